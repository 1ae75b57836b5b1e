"""Per-request columns carved out of one block of memory, backed by huge pages where the kernel offers them.

A simulation keeps about a hundred bytes of state per request (timestamps, queue links, token
counters), and a fresh process pays a page fault for every 4 KiB page of it that is first touched:
about 2,900 faults for 100k requests, each costing 1.5-2 us on the machines measured
(``benchmarks/README.md``), so a quarter of a 4-worker run. Transparent huge pages map 2 MiB per
fault instead; Linux gives them to a mapping that asks (``madvise(MADV_HUGEPAGE)``) when
``/sys/kernel/mm/transparent_hugepage/enabled`` is ``madvise`` or ``always``. Separate numpy
arrays of a few hundred KiB each never get them: they are too small to hold an aligned 2 MiB page.

:func:`columns` lays the columns one after another in one zeroed numpy buffer, the first column
on a 2 MiB boundary, and asks the kernel for huge pages for it. A buffer this large comes from
fresh memory the first time (a new mapping, which then gets huge pages); once freed, the C
allocator hands the same memory out again to the next simulation in the process, already mapped,
so a sweep's later runs take no page faults for it at all. Where huge pages cannot be asked for
(another system, huge pages disabled, a block under 2 MiB) the buffer is the same without the
advice: the same columns, the same contents. (numpy's own huge-page advice for large arrays stays
off while fastsim simulates, ``fastsim/pages.py``: these blocks are the only ones advised, and
each of their pages is checked as it is mapped.)

The columns are views of the block, so the block lives as long as any of them: give columns
that outlive each other separate blocks (the simulator keeps the result timestamps apart from the
loop's scratch state, which it frees before the report is built).
"""

from __future__ import annotations

import ctypes
import mmap
import time

import numpy as np

HUGE_PAGE = 2 << 20
_ALIGN = 64  # each column starts on a cache line
_MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", None)
_MADV_NOHUGEPAGE = getattr(mmap, "MADV_NOHUGEPAGE", None)
SLOW_HUGE_PAGE_S = 1e-3  # a huge page slower than this to map: the rest of the block in small pages
COLD_PAUSE_S = 10.0  # ... and the blocks asked for in the next seconds, entirely
_cold_until = 0.0

huge_pages_enabled = True  # tests turn it off to check that both layouts give the same results


def _libc_madvise():
    if _MADV_HUGEPAGE is None or _MADV_NOHUGEPAGE is None:
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    fn.restype = ctypes.c_int
    return fn


_madvise = _libc_madvise()


def _offsets(n, spec):
    offsets, total = [], 0
    for dtype, _ in spec:
        offsets.append(total)
        total += -(-n * np.dtype(dtype).itemsize // _ALIGN) * _ALIGN
    return offsets, total


def _huge_buffer(total, zeroed=True):
    """A uint8 buffer of ``total`` bytes (zeroed, or left as it comes) starting on a 2 MiB
    boundary, the kernel asked to back its pages not yet mapped with huge pages."""
    raw = (np.zeros if zeroed else np.empty)(total + HUGE_PAGE, dtype=np.uint8)
    start = -raw.ctypes.data % HUGE_PAGE
    npages = min(-(-total // HUGE_PAGE), (raw.shape[0] - start) // HUGE_PAGE)
    base = raw.ctypes.data + start
    if npages == 0 or _madvise(base, npages * HUGE_PAGE, _MADV_HUGEPAGE) != 0:
        return raw[start:start + total]  # no huge pages here: touched page by page
    # Each huge page is mapped here, one store each, and timed (memory recycled from an earlier
    # simulation is mapped already: each store is then only a store). A page that is slow to come
    # (compaction, or guest memory its host has not backed yet: 5-7 ms per 2 MiB on the virtual
    # machines measured, against 0.1 ms for memory an earlier process freed moments before) means
    # the next ones would likely be slow too, so the rest of the block goes back to small pages,
    # which the kernel mostly recycles warm.
    # (A simulation asks for several blocks in a row: after a slow page, the next blocks of the
    # next few seconds take small pages from the start.)
    global _cold_until
    for k in range(npages):
        t = time.perf_counter()
        raw[start + k * HUGE_PAGE] = 0
        if time.perf_counter() - t > SLOW_HUGE_PAGE_S:
            _cold_until = time.monotonic() + COLD_PAUSE_S
            if k + 1 < npages:
                _madvise(base + (k + 1) * HUGE_PAGE, (npages - k - 1) * HUGE_PAGE, _MADV_NOHUGEPAGE)
            break
    return raw[start:start + total]


def columns(n, spec, zeroed=True, huge=True):
    """Arrays of length ``n``, one per ``(dtype, fill)`` of ``spec``, each filled with ``fill``
    (0, -1, NaN, ...), all in one block of memory (see the module's docstring). ``zeroed=False``:
    the arrays are left as the memory comes (``fill`` ignored), for columns whose every row is
    written before it is read (memory recycled within the process is then not cleared first).
    ``huge=False``: no huge pages, and nothing mapped here (the block's first writer maps it,
    page by page: a thread of a split run, ``fastsim/shards.py``)."""
    offsets, total = _offsets(n, spec)
    if (huge and huge_pages_enabled and _madvise is not None and total >= HUGE_PAGE
            and time.monotonic() >= _cold_until):
        buf = _huge_buffer(total, zeroed)
    else:
        buf = (np.zeros if zeroed else np.empty)(max(total, 1), dtype=np.uint8)
    out = []
    for (dtype, fill), off in zip(spec, offsets):
        dtype = np.dtype(dtype)
        col = buf[off:off + n * dtype.itemsize].view(dtype)
        if zeroed and fill != 0:  # (NaN included)
            col[:] = fill
        out.append(col)
    return out
