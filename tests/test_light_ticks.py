"""Light ticks (``kernels/loop.py``, ``_light_tick``) are an exact optimisation: a tick that only
ends one group's pass and starts its next one, made of steady passes alone, is handled without the
full tick. With it and without it (``simulate(..., light_ticks=False)``) a simulation gives
identical results, bit for bit.

The cases run at light loads (where most ticks are light) and at loads where light ticks mix with
arrivals, admissions, completions, other groups' pass ends, fleet changes, telemetry and caps;
``_light`` checks that the light path ran.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

import fastsim.errors
import fastsim.sim as sim
from fastsim.config import EngineArgs
from fastsim.kernels.rank_state import DIAG_FALLBACKS, DIAG_LIGHT_ARRIVALS, DIAG_LIGHT_TICKS
from fastsim.workload import synthetic

from test_steady_decode import _cluster_case, _disagg_case, assert_same_results

NPZ = Path(__file__).parent / "data" / "perf" / "H200_TP1P_TP1D_mocker_perf_data.npz"


def _light(monkeypatch, workload, engine, fallbacks=False, arrivals=False, **kw):
    """``_light_once`` under both releases' rules (their decode times take different inputs);
    the counts of the 1.4.2 run."""
    _light_once(monkeypatch, workload, engine, fallbacks, arrivals, dynamo_version="1.6.1", **kw)
    return _light_once(monkeypatch, workload, engine, fallbacks, arrivals, dynamo_version="1.4.2", **kw)


def _light_once(monkeypatch, workload, engine, fallbacks=False, arrivals=False, **kw):
    """Run with and without light ticks, check the results are identical; returns the number of
    light ticks of the first run (and, with ``fallbacks=True``, its steady-pass fallbacks; with
    ``arrivals=True``, the arrival ticks it handled on their light path instead)."""
    states = []
    build = sim.build_state

    def keep(*args, **kwargs):
        st = build(*args, **kwargs)
        if args[2].gap_skip is None:  # (not the second run of a capped one, see below)
            states.append(st)
        return st

    monkeypatch.setattr(sim, "build_state", keep)
    a = sim.simulate(workload, engine, light_ticks=True, **kw)
    # (a capped run is made again, every request explicit, to leave the gaps of the requests in
    # flight out: the light ticks are those of its first run)
    n, nfall, narr = (int(states[-1].ranks.diag[i]) for i in (DIAG_LIGHT_TICKS, DIAG_FALLBACKS, DIAG_LIGHT_ARRIVALS))
    b = sim.simulate(workload, engine, light_ticks=False, **kw)
    assert int(states[-1].ranks.diag[DIAG_LIGHT_TICKS]) == 0 and int(states[-1].ranks.diag[DIAG_LIGHT_ARRIVALS]) == 0
    assert_same_results(a, b)
    if arrivals:
        return narr
    return (n, nfall) if fallbacks else n


def _case(seed):
    """The engines, cluster shapes and routing of the steady-decoding cases (``_cluster_case``),
    with a workload of their worker count at light to moderate load, and grid timing (whose
    decode time depends on the mean context too) in some."""
    _, engine, kw = _cluster_case(seed)
    rng = random.Random(5000 + seed)
    wl = synthetic(
        rng.randint(20, 600), rng.randint(1, 400), rng.randint(30, 200),
        arrival_interval_ms=rng.choice([1.0, 20.0, 100.0, 400.0]) / kw["num_workers"],
        turns_per_session=rng.choice([1, 1, 3]),
        shared_prefix_ratio=rng.choice([0.0, 0.5]), num_prefix_groups=rng.choice([0, 3]),
        block_size=engine.block_size,
    )
    if rng.random() < 0.3:
        engine = dataclasses.replace(engine, planner_profile_data=str(NPZ))
    return wl, engine, kw


@pytest.mark.parametrize("seed", range(40))
def test_random_clusters(monkeypatch, seed):
    wl, engine, kw = _case(seed)
    try:
        _light(monkeypatch, wl, engine, **kw)
    except fastsim.errors.DeadEndError:
        with pytest.raises(fastsim.errors.DeadEndError):
            sim.simulate(wl, engine, light_ticks=False, **kw)


def test_light_path_runs_at_light_load(monkeypatch):
    """One worker decoding alone between arrivals: almost every tick is light."""
    wl = synthetic(512, 200, 100, arrival_interval_ms=2000.0)
    n = _light(monkeypatch, wl, EngineArgs(block_size=16))
    assert n > 0.9 * 100 * 200


def test_light_ticks_among_groups(monkeypatch):
    """Several workers and DP groups whose passes interleave; kv_router; sessions."""
    wl = synthetic(300, 150, 200, arrival_interval_ms=60.0, turns_per_session=2)
    assert _light(monkeypatch, wl, EngineArgs(block_size=16), num_workers=3) > 1_000
    assert _light(monkeypatch, wl, EngineArgs(block_size=16, dp_size=2), num_workers=2) > 1_000
    assert _light(monkeypatch, wl, EngineArgs(block_size=16), num_workers=3, router_mode="kv_router") > 1_000
    assert _light(monkeypatch, wl, EngineArgs(block_size=16), num_workers=2, replay_concurrency=3) > 1_000


def test_groups_running_ahead(monkeypatch):
    """Open-loop arrivals on several one-rank workers: a worker decoding steadily runs ahead of the
    others up to the next arrival, and its pass ends still count in the worker-seconds one by one
    (they are compared bit for bit with the one-tick-at-a-time run)."""
    wl = synthetic(300, 200, 200, arrival_interval_ms=150.0)
    engine = EngineArgs(block_size=16)
    assert _light(monkeypatch, wl, engine, num_workers=4) > 10_000
    assert _light(monkeypatch, wl, engine, num_workers=3, router_mode="kv_router") > 10_000
    assert _light(monkeypatch, wl, engine, num_workers=4, telemetry_interval_ms=33.0) > 5_000
    assert _light(monkeypatch, wl, engine, num_workers=4, max_sim_time_ms=9_000.0) > 2_000
    # more passes ahead than a group's ring of phantom events holds
    long = synthetic(64, 3000, 12, arrival_interval_ms=40_000.0)
    assert _light(monkeypatch, long, engine, num_workers=3) > 20_000


def test_arrivals_joining_groups_in_mid_pass(monkeypatch):
    """Under load most arrivals join a worker in mid-pass: those ticks skip the full tick (the
    light arrival path), and those that wake an idle worker take it; the results are the
    one-tick-at-a-time run's, alone and with sessions, DP groups, telemetry, caps and a fleet
    schedule (which keep the path off while a fleet event is pending)."""
    engine = EngineArgs(block_size=16, num_gpu_blocks=4000)
    wl = synthetic(400, 60, 400, arrival_interval_ms=4.0)
    n = _light(monkeypatch, wl, engine, arrivals=True, num_workers=4)
    assert n > 300  # (a few arrivals find their worker idle)
    assert _light(monkeypatch, wl, engine, arrivals=True, num_workers=1) > 300
    assert _light(monkeypatch, wl, dataclasses.replace(engine, dp_size=2), arrivals=True, num_workers=2) > 300
    assert _light(monkeypatch, wl, engine, arrivals=True, num_workers=3, telemetry_interval_ms=3.0) > 300
    assert _light(monkeypatch, wl, engine, arrivals=True, num_workers=3, max_sim_time_ms=900.0) > 100
    assert _light(monkeypatch, wl, engine, arrivals=True, num_workers=3,
                  scaling_schedule=[[0, 3], [300, 1], [700, 4]]) > 100
    sessions = synthetic(300, 40, 150, arrival_interval_ms=6.0, turns_per_session=3, inter_turn_delay_ms=5.0)
    assert _light(monkeypatch, sessions, engine, arrivals=True, num_workers=2) > 100
    # kv_router: its routing may dispatch from a queue; the path stays off
    assert _light(monkeypatch, wl, engine, arrivals=True, num_workers=3, router_mode="kv_router") == 0


def test_light_ticks_with_pauses_fleet_and_caps(monkeypatch):
    """Telemetry ticks, the time cap, scaling schedules and planners between light ticks."""
    wl = synthetic(256, 300, 120, arrival_interval_ms=80.0)
    engine = EngineArgs(block_size=16, num_gpu_blocks=3000)
    assert _light(monkeypatch, wl, engine, num_workers=2, telemetry_interval_ms=7.0) > 1_000
    assert _light(monkeypatch, wl, engine, num_workers=1, max_sim_time_ms=4000.0) > 100
    assert _light(monkeypatch, wl, engine, num_workers=2, max_sim_time_ms=4000.0) > 100
    assert _light(monkeypatch, wl, engine, num_workers=3, scaling_schedule=[[0, 3], [2000, 1], [5000, 4]]) > 1_000
    # a planner may change the fleet at any tick: the light path stays off
    assert _light(monkeypatch, wl, engine, num_workers=1, planner=lambda s: 1 + int(s.now_ms // 700) % 3,
                  planner_interval_ms=50.0, max_workers=4) == 0


def test_small_pool_stops_the_light_path(monkeypatch):
    """A block start that does not fit the pool is the full tick's (it falls back and preempts)."""
    wl = synthetic(256, 400, 60, arrival_interval_ms=150.0)
    light, fallbacks = _light(monkeypatch, wl, EngineArgs(block_size=16, num_gpu_blocks=80), fallbacks=True)
    assert light > 100 and fallbacks > 10


def _light_disagg(monkeypatch, workload, pre, dec, arrivals=False, **kw):
    """``_light_disagg_once`` under both releases' rules; the counts of the 1.4.2 run."""
    _light_disagg_once(monkeypatch, workload, pre, dec, arrivals, dynamo_version="1.6.1", **kw)
    return _light_disagg_once(monkeypatch, workload, pre, dec, arrivals, dynamo_version="1.4.2", **kw)


def _light_disagg_once(monkeypatch, workload, pre, dec, arrivals=False, **kw):
    """``_light`` for disaggregated runs: light ticks of the decode workers (``arrivals=True``:
    the arrival ticks handled without the drain instead)."""
    import fastsim.kernels.disagg as kd
    from fastsim.sim_disagg import simulate_disagg

    seen = []
    real = kd.run_disagg_nb

    def run(*args):
        seen.append((args[8], args[9]))  # the prefill and the decode ranks
        return real(*args)

    monkeypatch.setattr(kd, "run_disagg_nb", run)
    a = simulate_disagg(workload, pre, dec, light_ticks=True, **kw)
    n, narr = int(seen[-1][1].diag[DIAG_LIGHT_TICKS]), int(seen[-1][0].diag[DIAG_LIGHT_ARRIVALS])
    b = simulate_disagg(workload, pre, dec, light_ticks=False, **kw)
    assert int(seen[-1][1].diag[DIAG_LIGHT_TICKS]) == 0 and int(seen[-1][0].diag[DIAG_LIGHT_ARRIVALS]) == 0
    assert_same_results(a, b)
    return narr if arrivals else n


@pytest.mark.parametrize("seed", range(8))
def test_random_disaggregated(monkeypatch, seed):
    from fastsim.sim_disagg import simulate_disagg

    wl, pre, dec, kw = _disagg_case(seed, intervals=(2.0, 50.0, 400.0))
    try:
        _light_disagg(monkeypatch, wl, pre, dec, **kw)
    except fastsim.errors.DeadEndError:
        with pytest.raises(fastsim.errors.DeadEndError):
            simulate_disagg(wl, pre, dec, light_ticks=False, **kw)


def test_disaggregated_arrivals_joining_prefill_workers_in_mid_pass(monkeypatch):
    """Arrivals that find their prefill worker busy skip the drain; the results are the full
    tick's, with round robin and kv_router, and with a fleet schedule (the path off while a fleet
    event is pending)."""
    pre = EngineArgs.coerce(dict(block_size=16, worker_type="prefill"))
    dec = EngineArgs.coerce(dict(block_size=16, worker_type="decode"))
    wl = synthetic(600, 40, 400, arrival_interval_ms=3.0)
    assert _light_disagg(monkeypatch, wl, pre, dec, arrivals=True, num_prefill_workers=2, num_decode_workers=3) > 200
    assert _light_disagg(monkeypatch, wl, pre, dec, arrivals=True, num_prefill_workers=1, num_decode_workers=2,
                         router_mode="kv_router") > 200
    assert _light_disagg(monkeypatch, wl, pre, dec, arrivals=True, num_prefill_workers=2, num_decode_workers=2,
                         max_sim_time_ms=700.0) > 50
    assert _light_disagg(monkeypatch, wl, pre, dec, arrivals=True, num_prefill_workers=2, num_decode_workers=2,
                         scaling_schedule={"prefill": [[0, 2], [400, 1], [800, 3]]}) > 50
    sessions = synthetic(300, 30, 150, arrival_interval_ms=4.0, turns_per_session=3, inter_turn_delay_ms=2.0)
    assert _light_disagg(monkeypatch, sessions, pre, dec, arrivals=True, num_prefill_workers=2,
                         num_decode_workers=2) > 50


def test_light_path_runs_on_decode_workers(monkeypatch):
    pre = EngineArgs.coerce(dict(block_size=16, worker_type="prefill"))
    dec = EngineArgs.coerce(dict(block_size=16, worker_type="decode"))
    wl = synthetic(256, 200, 150, arrival_interval_ms=200.0)
    assert _light_disagg(monkeypatch, wl, pre, dec, num_prefill_workers=1, num_decode_workers=2) > 5_000
    assert _light_disagg(monkeypatch, wl, pre, dec, num_prefill_workers=2, num_decode_workers=3,
                         router_mode="kv_router") > 5_000
    # KV transfers that take time (their completions are events of their own)
    pre_t = EngineArgs.coerce(dict(block_size=16, worker_type="prefill", kv_bytes_per_token=65536,
                                   kv_transfer_bandwidth=10.0))
    assert _light_disagg(monkeypatch, wl, pre_t, dec, num_prefill_workers=1, num_decode_workers=2) > 2_000
