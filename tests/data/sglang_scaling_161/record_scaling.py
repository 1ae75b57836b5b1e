"""Record this folder's cases (case name, tab, replay flags with --scaling-schedule) with Dynamo
1.6.1, run from this folder:

    DYN_LOG=error DYNAMO_161_PYTHON record_scaling.py RUN_DYNAMO_161 [case ...]

Dynamo's command line has no scaling schedule; its replay API scales the workers through a
scaling-policy hook (the one its planner-in-the-loop replay installs: ``initial_tick_ms()``, then
``on_tick(state)`` returning the decode pool's target and the next tick). Here that hook returns
the schedule's steps: a tick at each step's time, whose target is the step's worker count. The
rest is RUN_DYNAMO_161 with the other flags, writing <case>.json and <case>.per_request.jsonl.gz."""
import contextlib
import gzip
import importlib.util
import json
import os
import shutil
import sys

import dynamo.replay
import dynamo.replay.api as api

runner_path, only = sys.argv[1], set(sys.argv[2:])
spec = importlib.util.spec_from_file_location("runner", runner_path)
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)


class Schedule:
    """The scaling-policy hook of a fixed schedule [[t_ms, workers], ...]."""

    def __init__(self, steps):
        self.steps, self.i = steps, 0

    def initial_tick_ms(self):
        return float(self.steps[0][0])

    def on_tick(self, state):
        target = int(self.steps[self.i][1])
        self.i += 1
        nxt = float(self.steps[self.i][0]) if self.i < len(self.steps) else None
        return {"target_prefill": None, "target_decode": target, "next_tick_ms": nxt}

    def finalize(self, lifecycle_operations=None):
        return None


def with_schedule(fn, steps):
    def run(*a, **kw):
        policy = Schedule(steps)
        api._planner_replay_adapter = lambda: (lambda **_: contextlib.nullcontext(policy))
        return fn(*a, planner_config="{}", **{k: v for k, v in kw.items() if k != "planner_config"})
    return run


base = {name: getattr(api, name) for name in ("run_trace_replay", "run_synthetic_trace_replay")}
for line in open("cases.tsv"):
    name, args = line.rstrip("\n").split("\t")
    if only and name not in only:
        continue
    flags = args.split()
    i = flags.index("--scaling-schedule")
    steps = json.loads(flags[i + 1])
    del flags[i:i + 2]
    for fn_name, fn in base.items():
        setattr(dynamo.replay, fn_name, with_schedule(fn, steps))
    out = f"{name}.per_request.jsonl"
    assert runner.run([*flags, "--report-json", f"{name}.json", "--report-jsonl", out, "--quiet"]) == 0
    with open(out, "rb") as src, gzip.GzipFile(out + ".gz", "wb", mtime=0) as dst:
        shutil.copyfileobj(src, dst)
    os.remove(out)
