"""The outermost compile of fastsim's kernels runs inside one frame that reserves stack room
(``kernels/jit.py``, ``FRAME_ROOM``; decision 0284): every compile it leads to, the kernels it calls
included, runs above that frame, which appears once on the stack however deep the compile goes, and
a failed compile leaves the next one to start afresh."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from numba.core import event
from numba.core.errors import TypingError

from fastsim.kernels import jit


def _room_frames():
    """How many frames of the room-reserving call are on the stack."""
    f, n = sys._getframe(), 0
    while f is not None:
        n += f.f_code is jit._call_with_room.__code__
        f = f.f_back
    return n


class _Seen(event.Listener):
    def __init__(self):
        self.rooms = {}

    def on_start(self, ev):
        self.rooms[ev.data["dispatcher"].py_func.__name__] = _room_frames()

    def on_end(self, ev):
        pass


def _fresh_kernels():
    # compiled without the disk cache, so that each test compiles them
    @jit.compiled(cache=False, _nrt=False, no_cpython_wrapper=True)
    def add_one(a, i):
        return a[i] + 1

    @jit.compiled(cache=False)
    def total(a):
        s = 0
        for i in range(a.size):
            s += add_one(a, i)
        return s

    return total


@pytest.mark.skipif(sys.version_info < (3, 11), reason="frames live in chunks from Python 3.11")
def test_room_frame_reserves_its_stack():
    assert jit._call_with_room.__code__.co_stacksize == jit.FRAME_ROOM


def test_every_compile_runs_above_exactly_one_room_frame():
    total = _fresh_kernels()
    seen = _Seen()
    with event.install_listener("numba:compile", seen):
        assert total(np.arange(5)) == 15
    assert seen.rooms == {"total": 1, "add_one": 1}
    assert not getattr(jit._compiling, "active", False)


def test_a_failed_compile_leaves_the_next_one_its_room():
    @jit.compiled(cache=False)
    def bad(a):
        return a.no_such_attribute

    with pytest.raises(TypingError):
        bad(np.arange(3))
    assert not getattr(jit._compiling, "active", False)
    total = _fresh_kernels()
    seen = _Seen()
    with event.install_listener("numba:compile", seen):
        assert total(np.arange(3)) == 6
    assert seen.rooms["total"] == 1
