"""Record this folder's cases (case name, tab, replay flags with --planner-interval-ms and
--planner-policy, a name in policies.py) with Dynamo 1.6.1, run from this folder:

    DYN_LOG=error DYNAMO_161_PYTHON record_planner.py RUN_DYNAMO_161 [case ...]

Dynamo's replay API scales the workers through a scaling-policy hook (the one its
planner-in-the-loop replay installs): ``initial_tick_ms()``, then ``on_tick(state)`` returning the
decode pool's target and the next tick. Here the first tick is at the interval and each next one
an interval later, as fastsim's planner ticks; the target is the policy's. The rest is
RUN_DYNAMO_161 with the other flags, writing <case>.json and <case>.per_request.jsonl.gz."""
import contextlib
import gzip
import importlib.util
import os
import shutil
import sys

import dynamo.replay
import dynamo.replay.api as api

from policies import POLICIES

runner_path, only = sys.argv[1], set(sys.argv[2:])
spec = importlib.util.spec_from_file_location("runner", runner_path)
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)


class Hook:
    def __init__(self, policy, interval_ms):
        self.policy, self.interval = policy, interval_ms

    def initial_tick_ms(self):
        return self.interval

    def on_tick(self, st):
        now = float(st["now_ms"])
        target = self.policy(now, st["active_decode_count"], st["starting_decode_count"],
                             st["draining_decode_count"])
        return {"target_prefill": None, "target_decode": target, "next_tick_ms": now + self.interval}

    def finalize(self, lifecycle_operations=None):
        return None


def with_hook(fn, hook):
    def run(*a, **kw):
        api._planner_replay_adapter = lambda: (lambda **_: contextlib.nullcontext(hook))
        return fn(*a, planner_config="{}", **{k: v for k, v in kw.items() if k != "planner_config"})
    return run


base = {name: getattr(api, name) for name in ("run_trace_replay", "run_synthetic_trace_replay")}
for line in open("cases.tsv"):
    name, args = line.rstrip("\n").split("\t")
    if only and name not in only:
        continue
    flags = args.split()
    i = flags.index("--planner-interval-ms")
    interval = float(flags[i + 1])
    del flags[i:i + 2]
    i = flags.index("--planner-policy")
    policy = POLICIES[flags[i + 1]]
    del flags[i:i + 2]
    for fn_name, fn in base.items():
        setattr(dynamo.replay, fn_name, with_hook(fn, Hook(policy, interval)))
    out = f"{name}.per_request.jsonl"
    assert runner.run([*flags, "--report-json", f"{name}.json", "--report-jsonl", out, "--quiet"]) == 0
    with open(out, "rb") as src, gzip.GzipFile(out + ".gz", "wb", mtime=0) as dst:
        shutil.copyfileobj(src, dst)
    os.remove(out)
