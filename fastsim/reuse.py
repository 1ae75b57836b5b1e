"""Inputs a sweep's configurations share: a trace read once per process, and what is derived from
it and from the engine's files (block keys, timing tables) built once.

A sweep runs many configurations of the same trace in each worker process; between them only the
engine and cluster settings change. While reuse is on (:func:`enable`, or :func:`during` for a
block), ``workload.load_trace`` hands every configuration the same :class:`~fastsim.workload.Workload`
for the same file (the key holds its path, size, modification time and inode, and the reading
options) and issues the warnings its reading gave again; ``state.block_keys`` keeps a shared
Workload's block keys per engine block size; ``perf.load_perf_model`` keeps the timing tables of a
file. The simulation only reads these arrays (they are inputs of the loop), so sharing them
changes no result. Reuse is off unless a sweep turns it on: a user's own calls get fresh objects,
which they may change.
"""

from __future__ import annotations

import os
import warnings
import weakref
from collections import OrderedDict
from contextlib import contextmanager

__all__ = ["enable", "during", "enabled", "clear", "trace", "derived", "from_file"]

_MAX_TRACES = 4  # traces kept per process (a sweep over several traces or speedup ratios)

_on = False
_traces: OrderedDict = OrderedDict()  # key -> (Workload, [(category, message), ...])
_derived = weakref.WeakKeyDictionary()  # shared Workload -> {key: value}
_files: dict = {}  # (kind, path, file stamp) -> value


def enable() -> None:
    """Turn reuse on for the rest of this process (a sweep's worker processes)."""
    global _on
    _on = True


def enabled() -> bool:
    """Whether inputs are shared in this process now."""
    return _on


@contextmanager
def during():
    """Turn reuse on for a block (a sweep run in this process), then off, its inputs dropped."""
    global _on
    before = _on
    _on = True
    try:
        yield
    finally:
        _on = before
        if not before:
            clear()


def clear() -> None:
    """Drop every shared input."""
    _traces.clear()
    _derived.clear()
    _files.clear()


def _stamp(path: str):
    """What identifies a file's contents for reuse: its size, modification time and inode."""
    st = os.stat(path)
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def trace(path: str, options: tuple, load):
    """``load()``'s Workload of the trace at ``path`` read with ``options`` (hashable), read once
    while reuse is on; the warnings of the reading are issued again on every call."""
    if not _on:
        return load()
    try:
        key = (os.path.realpath(path), _stamp(path), options)
        hash(key)
    except (OSError, TypeError):
        return load()  # the reader reports a missing file or a bad option
    hit = _traces.get(key)
    if hit is None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            workload = load()
        hit = _traces[key] = (workload, [(w.category, str(w.message)) for w in caught])
        _derived[workload] = {}
        while len(_traces) > _MAX_TRACES:
            _traces.popitem(last=False)
    else:
        _traces.move_to_end(key)
    for category, message in hit[1]:
        warnings.warn(message, category, stacklevel=3)
    return hit[0]


def derived(workload, key, make):
    """``make()``, kept with ``workload`` under ``key`` when it is a shared Workload."""
    memo = _derived.get(workload) if _on else None
    if memo is None:
        return make()
    if key not in memo:
        memo[key] = make()
    return memo[key]


def from_file(kind: str, path, make):
    """``make()`` for the file or directory ``path`` (its stamp part of the key), kept while reuse
    is on."""
    if not _on:
        return make()
    try:
        p = os.path.realpath(os.fspath(path))
        if os.path.isfile(p):
            stamp = _stamp(p)
        else:  # a directory: every file under it
            stamp = tuple(sorted((os.path.join(d, f), _stamp(os.path.join(d, f)))
                                 for d, _, files in os.walk(p) for f in files))
        key = (kind, p, stamp)
    except OSError:
        return make()
    if key not in _files:
        _files[key] = make()
    return _files[key]
