"""Progress of a long simulation on stderr, without slowing the simulation down.

The compiled event loop releases the GIL while it runs and keeps its counters in numpy arrays
(requests finished, each worker's last pass end): a watcher thread reads them a few times a
second, so the loop carries no per-tick Python and no extra pauses (docs/decisions/0322).
Nothing is shown for a run that ends within ``DELAY_S`` (2 s). Then, on a terminal, a tqdm bar
(requests done, simulated time, ETA) that is erased when the run ends; into a file or a pipe, a
plain line every ``LINE_EVERY_S`` (10 s), never a carriage-return stream.

Progress is shown only inside :func:`reporting` (the command line turns it on; the Python API
stays quiet unless asked, e.g. ``with fastsim.progress.reporting(): fastsim.run_trace_replay(...)``).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time

__all__ = ["reporting", "hidden", "track", "untrack", "DELAY_S", "LINE_EVERY_S", "plain_line"]

DELAY_S = 2.0
LINE_EVERY_S = 10.0
_sink = None  # (stream, delay) while reporting() is active
_target = None  # (total, read, start time) of the simulation running, set by track()
_hidden = 0  # (how many hidden() blocks are open)


@contextlib.contextmanager
def reporting(stream=None, *, delay_s: float = DELAY_S):
    """Show the progress of the simulations run inside this block on ``stream`` (default stderr):
    a watcher thread runs for the block's duration and follows what :func:`track` registers."""
    global _sink
    if _sink is not None:  # nested: the outer block reports already
        yield
        return
    stop = threading.Event()
    _sink = (stream if stream is not None else sys.stderr, float(delay_s))
    thread = threading.Thread(target=_run, args=(_sink, stop), daemon=True, name="fastsim-progress")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        _sink = None
        untrack()


@contextlib.contextmanager
def hidden():
    """Simulations run inside this block are not shown: the one-request runs that load or compile
    the kernels, whose progress ("0 of 1 requests done") would only mislead while they compile."""
    global _hidden
    _hidden += 1
    try:
        yield
    finally:
        _hidden -= 1


def track(total, read):
    """A simulation of ``total`` requests starts; ``read()`` returns ``(requests done, simulated
    ms)`` and is called from the watcher thread while the compiled loop runs. A no-op unless
    :func:`reporting` is active, and inside :func:`hidden`."""
    global _target
    if _sink is not None and total > 0 and not _hidden:
        _target = (int(total), read, time.monotonic())


def untrack():
    """The simulation registered by :func:`track` has finished (its bar, if any, is erased)."""
    global _target
    _target = None


def plain_line(done, total, sim_ms, elapsed_s):
    """``fastsim: 4,500 of 10,000 requests done (45%), 312.5 s simulated, 4.1 s elapsed, ETA 5.0 s``."""
    eta = f"ETA {elapsed_s * (total - done) / done:,.1f} s" if done else "ETA -"
    sim = f"{sim_ms / 1000.0:,.1f} s simulated, " if sim_ms == sim_ms else ""
    pct = 100.0 * done / total if total else 100.0
    return f"fastsim: {done:,} of {total:,} requests done ({pct:.0f}%), {sim}{elapsed_s:,.1f} s elapsed, {eta}\n"


def _run(sink, stop):
    stream, delay = sink
    tty = hasattr(stream, "isatty") and stream.isatty()
    bar, shown, last_line = None, None, 0.0
    try:
        while not stop.wait(0.25):
            target = _target
            if target is not shown:  # that simulation ended, or another began
                if bar is not None:
                    bar.close()
                    bar = None
                shown, last_line = target, 0.0
            if target is None:
                continue
            total, read, t0 = target
            elapsed = time.monotonic() - t0
            if elapsed < delay:
                continue
            try:
                done, sim_ms = read()
            except Exception:  # the state was being replaced (a restart): try again next time
                continue
            done = int(done)
            if tty:
                if bar is None:
                    from tqdm import tqdm

                    bar = tqdm(total=total, unit="req", desc="simulating", file=stream, leave=False,
                               dynamic_ncols=True)
                bar.update(done - bar.n)
                if sim_ms == sim_ms:
                    bar.set_postfix_str(f"{sim_ms / 1000.0:,.1f} s simulated", refresh=True)
            elif last_line == 0.0 or elapsed - last_line >= LINE_EVERY_S:
                last_line = elapsed
                stream.write(plain_line(done, total, sim_ms, elapsed))
                stream.flush()
    finally:
        if bar is not None:
            bar.close()
