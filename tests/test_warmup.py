"""``fastsim warmup`` compiles (or loads) every kernel of each kind of simulation and says how long
each step took; after it, the kernels a replay needs are in the cache."""

from __future__ import annotations

import re
import subprocess
import sys


def test_warmup_reports_each_step_and_the_total(tmp_path):
    done = subprocess.run([sys.executable, "-m", "fastsim", "warmup"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=1800)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("numba cache: ")
    steps = [ln for ln in lines[1:] if re.match(r"^\s*\d+\.\d s  \S", ln)]
    from fastsim.warmup import STEPS

    assert len(steps) == len(STEPS) + 1 and steps[-1].endswith("in all"), done.stdout
    from fastsim import warmup

    assert warmup.cached("run_loop_nb") and warmup.cached("run_disagg_nb") and warmup.cached("run_sglang_nb")
    assert warmup.cached("pop_due_nb") and warmup.cached("prepare_store_nb")


def test_warmup_help_names_the_command():
    done = subprocess.run([sys.executable, "-m", "fastsim", "--help"], capture_output=True,
                          text=True)
    assert "warmup" in done.stdout + done.stderr
