"""Steady decoding (``kernels/scheduler.py``) is an exact optimisation: with it and without it
(``simulate(..., steady_decode=False)``, every request through every pass) a simulation gives
identical results, bit for bit: every per-request field and every report field.

The cases are built to make the optimisation fall back often (tiny KV pools that preempt, token
budgets that bind, chunked prefill, max_model_len, shared prefixes) as well as to run long stretches
of steady passes (long outputs, small blocks); ``test_both_paths_are_exercised`` checks that both
happen.
"""

from __future__ import annotations

import json
import random

import pandas as pd
import pytest

import fastsim.errors
import fastsim.sim as sim
from fastsim.config import EngineArgs
from fastsim.kernels.rank_state import DIAG_FALLBACKS, DIAG_STEADY_PASSES
from fastsim.workload import load_mooncake, synthetic

from test_engine_vs_naive import random_case

_TIMING_KEYS = ("wall_time_ms",)  # and every processed_*_per_s (simulation speed)


def assert_same_results(a, b):
    """Two reports agree bit for bit: every per-request field and every report field except the
    simulator's own timings."""
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    for k, v in a.summary.items():
        if k in _TIMING_KEYS or k.startswith("processed_"):
            continue
        w = b.summary[k]
        assert v == w or (v != v and w != w), f"summary {k}: {v!r} vs {w!r}"


def _same(workload, engine, *, run=None, **kw):
    """Both releases' rules (their decode times take different inputs) unless one is given;
    returns the 1.4.2 run."""
    run = run or sim.simulate
    for version in [kw.pop("dynamo_version")] if "dynamo_version" in kw else ["1.6.1", "1.4.2"]:
        if isinstance(engine, tuple):  # disaggregated: (prefill, decode) engine args
            a = run(workload, *engine, steady_decode=True, dynamo_version=version, **kw)
            b = run(workload, *engine, steady_decode=False, dynamo_version=version, **kw)
        else:
            a = run(workload, engine, steady_decode=True, dynamo_version=version, **kw)
            b = run(workload, engine, steady_decode=False, dynamo_version=version, **kw)
        assert_same_results(a, b)
    return a


def _trace(tmp_path, rows):
    p = tmp_path / "trace.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


@pytest.mark.parametrize("seed", range(0, 300, 3))
def test_random_single_worker_traces(seed, tmp_path):
    rows, tbs, engine = random_case(seed)
    rng = random.Random(seed)
    for r in rows:  # longer outputs than the naive-engine cases: many steady passes
        r["output_length"] = r["output_length"] * rng.choice([1, 5, 20])
    wl = load_mooncake(_trace(tmp_path, rows), trace_block_size=tbs)
    try:
        _same(wl, EngineArgs.coerce(engine))
    except fastsim.errors.DeadEndError:
        with pytest.raises(fastsim.errors.DeadEndError):
            sim.simulate(wl, EngineArgs.coerce(engine), steady_decode=False)


def random_engine(rng):
    """Random engine arguments (a dict) for cluster cases: small pools, tight batches, DP ranks."""
    return dict(
        block_size=rng.choice([8, 16, 64]),
        num_gpu_blocks=rng.choice([40, 120, 400, 4000]),
        max_num_seqs=rng.choice([4, 16, 256]),
        max_num_batched_tokens=rng.choice([256, 1024, 8192]),
        enable_chunked_prefill=rng.random() < 0.8,
        preemption_mode=rng.choice(["lifo", "fifo"]),
        dp_size=rng.choice([1, 1, 2, 4]),
    )


def _cluster_case(seed):
    rng = random.Random(1000 + seed)
    engine = random_engine(rng)
    bs = engine["block_size"]
    if rng.random() < 0.2:
        engine["max_model_len"] = rng.randint(300, 1200)
    wl = synthetic(
        rng.randint(50, 900), rng.randint(1, 300), rng.randint(50, 400),
        arrival_interval_ms=rng.choice([0.0, 1.0, 5.0, 30.0]),
        turns_per_session=rng.choice([1, 1, 3]),
        shared_prefix_ratio=rng.choice([0.0, 0.5]), num_prefix_groups=rng.choice([0, 3]), block_size=bs,
    )
    kw = dict(num_workers=rng.randint(1, 4))
    if rng.random() < 0.4 and kw["num_workers"] * engine["dp_size"] > 1:
        kw["router_mode"] = "kv_router"
        kw["seed"] = seed
    if rng.random() < 0.2:
        kw["replay_concurrency"] = rng.randint(1, 20)
    return wl, EngineArgs.coerce(engine), kw


@pytest.mark.parametrize("seed", range(40))
def test_random_clusters(seed):
    wl, engine, kw = _cluster_case(seed)
    try:
        _same(wl, engine, **kw)
    except fastsim.errors.DeadEndError:
        with pytest.raises(fastsim.errors.DeadEndError):
            sim.simulate(wl, engine, steady_decode=False, **kw)


def _disagg_case(seed, intervals=(0.0, 2.0, 10.0)):
    """A random disaggregated run: (workload, prefill engine, decode engine, keywords)."""
    rng = random.Random(2000 + seed)
    bs = rng.choice([16, 64])
    common = dict(block_size=bs, max_num_seqs=rng.choice([8, 64, 256]),
                  max_num_batched_tokens=rng.choice([512, 8192]))
    pre = EngineArgs.coerce(dict(common, worker_type="prefill", num_gpu_blocks=rng.choice([2000, 8000])))
    dec = EngineArgs.coerce(dict(common, worker_type="decode", num_gpu_blocks=rng.choice([300, 1000, 8000])))
    wl = synthetic(rng.randint(50, 900), rng.randint(1, 300), rng.randint(50, 300),
                   arrival_interval_ms=rng.choice(list(intervals)), turns_per_session=rng.choice([1, 2]),
                   block_size=bs)
    kw = dict(num_prefill_workers=rng.randint(1, 3), num_decode_workers=rng.randint(1, 4))
    if rng.random() < 0.4:
        kw["router_mode"] = "kv_router"
    return wl, pre, dec, kw


@pytest.mark.parametrize("seed", range(12))
def test_random_disaggregated(seed):
    from fastsim.sim_disagg import simulate_disagg

    wl, pre, dec, kw = _disagg_case(seed)
    try:
        _same(wl, (pre, dec), run=simulate_disagg, **kw)
    except fastsim.errors.DeadEndError:
        with pytest.raises(fastsim.errors.DeadEndError):
            simulate_disagg(wl, pre, dec, steady_decode=False, **kw)


def test_paused_and_capped_runs():
    """The loop returns to Python (planner ticks, telemetry growth, the time cap) with steady
    members made explicit, and resumes exactly."""
    wl = synthetic(512, 400, 600, arrival_interval_ms=4.0)
    engine = EngineArgs(block_size=16, num_gpu_blocks=3000)
    _same(wl, engine, num_workers=2, max_sim_time_ms=4000.0)
    _same(wl, engine, num_workers=2, telemetry_interval_ms=5.0)
    _same(wl, engine, num_workers=1, planner=lambda s: 1 + int(s.now_ms // 700) % 3,
          planner_interval_ms=50.0, max_workers=4)
    _same(wl, engine, num_workers=3, scaling_schedule=[[0, 3], [800, 1], [1600, 4]])


def _counted(monkeypatch, workload, engine, **kw):
    """(steady passes, fallbacks) of one simulation (``rk.diag[DIAG_STEADY_PASSES]``, ``rk.diag[DIAG_FALLBACKS]``)."""
    states = []
    build = sim.build_state

    def keep(*args, **kwargs):
        states.append(build(*args, **kwargs))
        return states[-1]

    monkeypatch.setattr(sim, "build_state", keep)
    _same(workload, engine, **kw)
    # the last steady run's state: a run may build its state again (a larger readmission log)
    st = [s for s in states if s.params.steady][-1]
    assert not states[-1].params.steady
    return int(st.ranks.diag[DIAG_STEADY_PASSES]), int(st.ranks.diag[DIAG_FALLBACKS])


def test_both_paths_are_exercised(monkeypatch):
    """The comparison means something only if steady passes run, and fall back, in such cases."""
    steady, fallbacks = _counted(monkeypatch, synthetic(256, 300, 300, arrival_interval_ms=5.0),
                                 EngineArgs(block_size=16))
    assert steady > 500 and fallbacks == 0
    # a small pool: passes where an allocation might not fit fall back (and preempt)
    steady, fallbacks = _counted(monkeypatch, synthetic(256, 300, 300, arrival_interval_ms=5.0),
                                 EngineArgs(block_size=16, num_gpu_blocks=400))
    assert steady > 1_000 and fallbacks > 100


def test_chunked_prefill_next_to_steady_members(monkeypatch, tmp_path):
    """Long prompts chunked under a binding token budget while others decode: a pass stays steady
    when every chunking request is behind the last steady member in the running order (it gets
    what the steady members leave, as in the one-pass-at-a-time pass). Counting the chunk's whole
    demand against the budget instead made every such pass fall back."""
    rows, hid = [], 0
    for i in range(120):
        isl = 2_000 + 37 * i if i % 3 == 0 else 64 + i
        n = -(-isl // 16)
        rows.append({"timestamp": 40 * i, "input_length": isl, "output_length": 150 + (i % 7) * 20,
                     "hash_ids": list(range(hid, hid + n))})
        hid += n
    wl = load_mooncake(_trace(tmp_path, rows), trace_block_size=16)
    engine = EngineArgs(block_size=16, max_num_batched_tokens=512)
    steady, fallbacks = _counted(monkeypatch, wl, engine)
    assert steady > 600 and fallbacks == 0
