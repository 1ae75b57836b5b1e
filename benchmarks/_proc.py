"""Shared helpers of the benchmark scripts: run one child process and measure it.

Every measured run is its own process, started through the simulator's command line, so its peak
RSS and whole-process time are its own. The resource usage comes from ``os.wait4`` on that child
(its own ``ru_maxrss``), not from ``getrusage(RUSAGE_CHILDREN)``, which reports the largest child
reaped so far and so cannot tell a small run that follows a big one.
"""

from __future__ import annotations

import os
import platform
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

__all__ = ["ChildResult", "run_child", "machine_summary"]


@dataclass
class ChildResult:
    """What one child process did: exit status, times, peak memory, the tail of its stderr."""

    returncode: int
    process_s: float    # wall time from spawn to exit, as seen by the parent
    cpu_s: float        # user + system CPU time of the child
    peak_rss_mb: float  # ru_maxrss of the child (Linux reports KiB)
    stderr_tail: str
    timed_out: bool = False
    page_faults: int = 0  # minor + major faults of the child: memory first touched (timing-noise free)


def run_child(cmd: Sequence[str], *, env: Optional[Mapping[str, str]] = None,
              cwd: Optional[str] = None, timeout_s: Optional[float] = None) -> ChildResult:
    """Run ``cmd`` to completion (stdout discarded) and measure it with ``os.wait4``."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err, env=dict(env) if env is not None else None, cwd=cwd)
        timer = threading.Timer(timeout_s, proc.kill) if timeout_s else None
        if timer:
            timer.start()
        try:
            _, status, ru = os.wait4(proc.pid, 0)
        finally:
            if timer:
                timer.cancel()
        elapsed = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        err.seek(0)
        tail = err.read()[-4000:].decode("utf-8", "replace")
    timed_out = bool(timeout_s) and proc.returncode < 0 and elapsed >= timeout_s
    return ChildResult(proc.returncode, elapsed, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024.0,
                       tail, timed_out, ru.ru_minflt + ru.ru_majflt)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine_summary() -> str:
    """One line naming the machine: CPU model, logical cores, OS, Python."""
    return (f"{_cpu_model()}, {os.cpu_count()} logical cores, {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}")
