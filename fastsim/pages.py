"""Small pages for the simulation's arrays.

numpy asks the kernel for transparent huge pages (``madvise(MADV_HUGEPAGE)``) on every array of
4 MB or more. Where transparent huge pages are in ``madvise`` mode (a common default), each 2 MB
page of such an array is then found, compacted or zeroed on its first touch, and on virtual
machines whose host backs guest memory lazily that first touch sometimes takes tens of
milliseconds. On a 2-core guest, 1M requests on 4 workers simulated in 178-238 ms in three fresh
processes out of five and in 0.89 and 1.08 s in the other two; with small pages, 181-202 ms in all
five (the conversation trace: 175-269 ms against 170-176 ms). fastsim therefore switches numpy's
advice off while it simulates, and back afterwards; a ``NUMPY_MADVISE_HUGEPAGE`` set in the
environment is left to decide (set it to 1 where huge pages are known to pay).

The per-request state is the exception: ``fastsim.arena`` asks for huge pages for that one block
itself, maps them up front and times each, and goes back to small pages at the first slow one.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading

def _advice_switch():
    """numpy's switch of its huge-page advice, or None (looked up on first use, so that importing
    this module, which the command line does, does not import numpy: ``fastsim --help``)."""
    try:  # numpy >= 2
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:  # pragma: no cover - numpy 1.x
        try:
            from numpy.core.multiarray import _set_madvise_hugepage
        except ImportError:
            _set_madvise_hugepage = None
    return _set_madvise_hugepage


_lock = threading.Lock()
_depth = 0  # simulations inside (threads, nesting): the first in switches off, the last out back
_before = True


@contextlib.contextmanager
def small_pages():
    """Arrays made inside get no huge-page advice from numpy (unless the environment says)."""
    global _depth, _before
    _set_madvise_hugepage = _advice_switch()
    if _set_madvise_hugepage is None or "NUMPY_MADVISE_HUGEPAGE" in os.environ:
        yield
        return
    with _lock:
        if _depth == 0:
            _before = _set_madvise_hugepage(False)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _set_madvise_hugepage(_before)


def with_small_pages(fn):
    """``fn`` run inside :func:`small_pages`."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with small_pages():
            return fn(*args, **kwargs)
    return wrapper


def __getattr__(name):
    if name == "_set_madvise_hugepage":  # (numpy's switch, as a module attribute)
        return _advice_switch()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
