"""Suite-wide set-up: the bounds-checked simulations of ``test_index_bounds.py`` start in a
second process as soon as the test is collected, so that their compile (a few minutes on two
cores, mostly numba's) overlaps the rest of the suite instead of adding to it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
_bounds = {}


def pytest_collection_finish(session):
    # (after ``-k`` and ``-m`` have deselected what they will: only a selected test starts it)
    if any(item.nodeid.endswith("test_index_bounds.py::test_kernels_never_index_below_zero")
           for item in session.items):
        start_bounds_runs()


def start_bounds_runs():
    """Start ``bounds_runs.py`` with numba's bounds checking on, in a numba cache of its own
    (once per session); ``_bounds`` keeps the process and its output file."""
    if "proc" in _bounds:
        return _bounds
    d = tempfile.mkdtemp(prefix="fastsim-bounds-")
    # with the opt-in patches, whose indexing leaves out numba's negative-index wraparound: the
    # bounds check then rejects any negative index
    env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=os.path.join(d, "cache"),
               FASTSIM_NUMBA_PATCHES="1")
    env.pop("FASTSIM_INDEX_WRAPAROUND", None)
    out = open(os.path.join(d, "out.txt"), "w+")
    _bounds.update(dir=d, out=out, proc=subprocess.Popen(
        [sys.executable, str(HERE / "bounds_runs.py")], env=env, stdout=out,
        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
    return _bounds


def pytest_sessionfinish(session, exitstatus):
    proc = _bounds.get("proc")
    if proc is None:
        return
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    _bounds["out"].close()
    shutil.rmtree(_bounds["dir"], ignore_errors=True)  # (its numba cache: tens of MB)
