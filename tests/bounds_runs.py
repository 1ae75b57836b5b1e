"""Simulations of every kind, for ``test_index_bounds.py`` to run with numba's bounds checking on.

Run as a script (``python tests/bounds_runs.py``); prints one line per group of runs and "ok" at
the end. An ``IndexError`` raised inside a kernel ends it with a traceback.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

import fastsim.errors  # noqa: E402
import fastsim.sim as sim  # noqa: E402
from fastsim.config import EngineArgs  # noqa: E402
from fastsim.sim_disagg import simulate_disagg  # noqa: E402
from fastsim.workload import load_mooncake, synthetic  # noqa: E402

from test_engine_vs_naive import random_case  # noqa: E402
from test_steady_decode import _cluster_case, _disagg_case  # noqa: E402


def _both(run, *args, **kw):
    """``run`` (and the report it builds) with each exact optimisation on and off (their kernels'
    paths differ); a dead end is a legitimate outcome of some random cases."""
    for steady, light in ((True, True), (False, False)):
        try:
            run(*args, steady_decode=steady, light_ticks=light, **kw)
        except fastsim.errors.DeadEndError:
            pass


def bounds_are_checked():
    """Exit with an error unless numba checks the bounds of fastsim's kernels in this process
    (else every run below would pass without checking anything)."""
    from numba.core import config

    from fastsim.kernels.scan import max_sum_nb

    if not config.BOUNDSCHECK:
        sys.exit("numba's bounds checking is off (NUMBA_BOUNDSCHECK=1 expected)")
    try:
        max_sum_nb(np.zeros(2, dtype=np.int64), np.zeros(1, dtype=np.int64))  # reads b[1]
    except IndexError:
        return
    sys.exit("an index past the end of an array went unchecked in a fastsim kernel")


def main():
    bounds_are_checked()
    for seed in range(0, 60, 3):  # single worker, traces: prefix caching, chunking, preemption
        rows, tbs, engine = random_case(seed)
        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "trace.jsonl"
            p.write_text("".join(json.dumps(r) + "\n" for r in rows))
            wl = load_mooncake(p, trace_block_size=tbs)
        _both(sim.simulate, wl, EngineArgs.coerce(engine))
    print("traces", flush=True)
    for seed in range(24):  # clusters: DP, kv_router, closed loops, sessions, shared prefixes
        wl, engine, kw = _cluster_case(seed)
        _both(sim.simulate, wl, engine, **kw)
    print("clusters", flush=True)
    for seed in range(8):
        wl, pre, dec, kw = _disagg_case(seed)
        _both(simulate_disagg, wl, pre, dec, **kw)
    print("disaggregated", flush=True)
    wl = synthetic(512, 400, 400, arrival_interval_ms=4.0)
    engine = EngineArgs(block_size=16, num_gpu_blocks=3000, startup_time=0.2)
    for kw in (dict(num_workers=2, max_sim_time_ms=3000.0),
               dict(num_workers=2, telemetry_interval_ms=5.0),
               dict(num_workers=1, planner=lambda s: 1 + int(s.now_ms // 700) % 3,
                    planner_interval_ms=50.0, max_workers=4),
               dict(num_workers=3, scaling_schedule=[[0, 3], [800, 1], [1600, 4]]),
               dict(num_workers=3, router_mode="kv_router", scaling_schedule=[[0, 3], [900, 2]])):
        _both(sim.simulate, wl, engine, **kw)
    pre = EngineArgs(block_size=16, worker_type="prefill")
    dec = EngineArgs(block_size=16, worker_type="decode", num_gpu_blocks=2000, startup_time=0.1)
    _both(simulate_disagg, wl, pre, dec, num_prefill_workers=1, num_decode_workers=2,
          scaling_schedule={"prefill": [[0, 1], [500, 2]], "decode": [[0, 2], [700, 1]]},
          max_sim_time_ms=2500.0)
    print("fleets", flush=True)
    light = synthetic(256, 300, 60, arrival_interval_ms=900.0)  # steady runs ahead of the loop
    _both(sim.simulate, light, EngineArgs(block_size=16), num_workers=1)
    _both(sim.simulate, light, EngineArgs(block_size=16), num_workers=3)
    # split into shards (fastsim/shards.py): tick logs that fill and are handed over, the results
    # scattered back by stride (workers divisible by shards) and by row number (not)
    import fastsim.shards as shards

    shards._LOG_MIN = 1
    for workers, threads in ((4, 2), (3, 2), (5, 3)):
        _both(sim.simulate, light, EngineArgs(block_size=16), num_workers=workers, threads=threads)
        _both(sim.simulate, wl, engine, num_workers=workers, threads=threads)
    print("shards", flush=True)
    print("ok", flush=True)


if __name__ == "__main__":
    main()
