"""Ctrl-C while a compiled event loop runs.

Python raises KeyboardInterrupt only between bytecodes, so a loop running in compiled code would
not see a Ctrl-C until it returned, minutes later on a long run. Inside :func:`on_ctrl_c`, CPython
writes the number of each signal it receives to a pipe as the signal arrives (its wake-up file
descriptor); a watcher thread reads it and, on SIGINT, calls the given function, which sets a flag
the loop reads every tick. The loop returns, and the KeyboardInterrupt that is pending is raised
(the caller raises one if Python has not). Outside the main thread, or with SIGINT not handled by
Python (ignored by a job started in a shell's background, or handled by the application), nothing
changes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading

__all__ = ["on_ctrl_c", "flag"]

_stops = []  # the functions of the on_ctrl_c blocks open now, innermost last
_pipe = None  # (read end, write end), with its watcher thread, made at the first use


@contextlib.contextmanager
def on_ctrl_c(stop):
    """Call ``stop()`` (from another thread) when SIGINT arrives inside this block."""
    if threading.current_thread() is not threading.main_thread() or \
            not callable(signal.getsignal(signal.SIGINT)):
        yield
        return
    try:
        previous = signal.set_wakeup_fd(_wake_up_pipe()[1], warn_on_full_buffer=False)
    except (ValueError, OSError):  # (an interpreter that will not take it: as before)
        yield
        return
    _stops.append(stop)
    try:
        yield
    finally:
        _stops.remove(stop)
        signal.set_wakeup_fd(previous)


def flag(*slots):
    """The function that sets each ``(array, index)`` of ``slots`` to 1: the loops' Ctrl-C flags."""
    def stop():
        for array, index in slots:
            array[index] = 1
    return stop


def _wake_up_pipe():
    global _pipe
    if _pipe is None:
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)  # (CPython requires it of a wake-up descriptor)
        threading.Thread(target=_watch, args=(read_end,), daemon=True, name="fastsim-ctrl-c").start()
        _pipe = (read_end, write_end)
    return _pipe


def _watch(read_end):
    while True:
        if signal.SIGINT in os.read(read_end, 64):
            for stop in list(_stops):
                stop()
