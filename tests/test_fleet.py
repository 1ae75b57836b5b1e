"""Autoscaling (Dynamo's EngineComponent scaling, notes C13/C14), telemetry and the planner hook."""

import json

import numpy as np
import pytest

from fastsim.config import EngineArgs
from fastsim.errors import InputError
from fastsim.kernels.fleet import (
    ACTIVE,
    CANCELLED,
    DRAINING,
    RETIRED,
    STARTING,
    apply_target_nb,
    mark_ready_nb,
    next_fleet_event_nb,
    nth_active_nb,
    retire_drained_nb,
)
from fastsim.sim import simulate
from fastsim.workload import synthetic


def _fleet(n_initial, cap, startup_ms):
    from fastsim.run_config import RunConfig
    from fastsim.state import build_state

    st = build_state(synthetic(16, 2, 1, arrival_interval_ms=1.0), EngineArgs(block_size=16),
                     RunConfig(num_workers=n_initial, worker_rows=cap))
    return st.fleet._replace(startup_ms=startup_ms)


def _states(fl):
    return [int(x) for x in fl.gstate[: fl.fs[0]]]


def test_c13_scale_up_cancel_then_ids_never_reused():
    fl = _fleet(2, 8, 5000.0)
    apply_target_nb(fl, 0.0, 4)
    assert _states(fl) == [ACTIVE, ACTIVE, STARTING, STARTING]
    assert fl.fs[2] == 4  # worker count includes starting workers
    apply_target_nb(fl, 0.0, 3)  # cancels the highest pending startup
    assert _states(fl) == [ACTIVE, ACTIVE, STARTING, CANCELLED]
    apply_target_nb(fl, 0.0, 2)
    assert _states(fl) == [ACTIVE, ACTIVE, CANCELLED, CANCELLED]
    apply_target_nb(fl, 0.0, 3)  # a new id, not a reused one
    assert _states(fl) == [ACTIVE, ACTIVE, CANCELLED, CANCELLED, STARTING]
    assert fl.fs[2] == 3


def test_c13_cancel_startups_before_draining():
    fl = _fleet(3, 8, 5000.0)
    apply_target_nb(fl, 0.0, 5)
    apply_target_nb(fl, 0.0, 1)  # 2 cancelled + 2 newly draining, 1 active
    assert _states(fl) == [ACTIVE, DRAINING, DRAINING, CANCELLED, CANCELLED]
    assert fl.fs[1] == 1 and fl.fs[4] == 2


def test_c13_stale_ready_is_ignored():
    fl = _fleet(1, 4, 5000.0)
    apply_target_nb(fl, 0.0, 2)
    apply_target_nb(fl, 0.0, 1)
    assert not mark_ready_nb(fl, 10_000.0)
    assert _states(fl) == [ACTIVE, CANCELLED]


def test_c13_drain_and_replace_without_startup():
    fl = _fleet(2, 4, 0.0)
    apply_target_nb(fl, 0.0, 1)
    assert _states(fl) == [ACTIVE, DRAINING]
    apply_target_nb(fl, 0.0, 2)
    assert _states(fl) == [ACTIVE, DRAINING, ACTIVE]
    assert fl.fs[1] == 2 and fl.fs[2] == 3  # non-draining 2, worker count 3
    assert nth_active_nb(fl, 1) == 2
    busy = np.zeros(4, dtype=np.bool_)
    n_run = np.array([0, 1, 0, 0])
    n_wait = np.zeros(4, dtype=np.int64)
    assert not retire_drained_nb(fl, busy, n_run, n_wait, 1, 0)  # still has work
    n_run[1] = 0
    assert retire_drained_nb(fl, busy, n_run, n_wait, 1, 0)
    assert _states(fl) == [ACTIVE, RETIRED, ACTIVE]


def test_c14_startup_delay():
    fl = _fleet(1, 4, 5000.0)
    apply_target_nb(fl, 500.0, 2)
    assert next_fleet_event_nb(fl) == 5500.0
    assert not mark_ready_nb(fl, 5499.0)
    assert mark_ready_nb(fl, 5500.0)
    assert fl.fs[1] == 2


def test_scaling_schedule_end_to_end_and_worker_seconds():
    w = synthetic(256, 16, 600, arrival_interval_ms=10.0)
    rep = simulate(w, EngineArgs(startup_time=1.0), num_workers=1,
                   scaling_schedule=[[0, 1], [1000, 3], [4000, 1]], telemetry_interval_ms=100.0)
    assert rep.summary["completed_requests"] == 600
    fleet = rep.fleet
    assert list(fleet.state) == ["active", "retired", "retired"]
    # worker-seconds: 1 worker to 1 s, 3 live (2 starting) until they retire after 4 s, then 1
    ws = rep.summary["decode_worker_seconds"]
    duration = rep.summary["duration_ms"] / 1000
    assert duration + 2 * 3.0 <= ws <= duration + 2 * 3.6
    tel = rep.workers
    assert set(tel.columns) >= {"time_ms", "worker", "running", "waiting", "kv_blocks_used"}
    at_2s = tel[tel.time_ms == 2000.0]
    assert sorted(at_2s.worker) == [0, 1, 2]
    assert (tel[tel.worker == 1].time_ms >= 1000.0).all()


def test_planner_hook_is_called_at_ticks_and_scales():
    seen = []

    def planner(state):
        seen.append(state)
        return 3 if state.waiting > 0 else None

    w = synthetic(1024, 64, 3000, arrival_interval_ms=5.0)
    rep = simulate(w, EngineArgs(), num_workers=1, planner=planner, planner_interval_ms=2000.0,
                   max_workers=3)
    assert rep.summary["completed_requests"] == 3000
    assert [s.now_ms for s in seen[:3]] == [2000.0, 4000.0, 6000.0]
    assert max(s.active_workers for s in seen) == 3
    assert len(rep.fleet) == 3


def test_schedule_validation():
    w = synthetic(16, 2, 3, arrival_interval_ms=1.0)
    for bad, msg in (([[0, 0]], "positive integer"), ([[5, 2], [1, 3]], "ascending"),
                     ([[0]], r"\[time_ms, workers\]"), ("[[0,", "malformed JSON")):
        with pytest.raises(InputError, match=msg):
            simulate(w, EngineArgs(), scaling_schedule=bad)
    with pytest.raises(InputError, match="planner_interval_ms"):
        simulate(w, EngineArgs(), planner=lambda s: None)


def test_static_schedule_matches_plain_run():
    # A schedule that never changes the fleet only splits the worker-seconds integral.
    w = synthetic(512, 32, 300, arrival_interval_ms=20.0)
    a = simulate(w, EngineArgs(), num_workers=2)
    b = simulate(w, EngineArgs(), num_workers=2, scaling_schedule=[[0, 2], [1000, 2]])
    for k in ("duration_ms", "mean_ttft_ms", "p99_itl_ms", "mean_e2e_latency_ms"):
        assert a.summary[k] == b.summary[k]
    assert json.dumps(a.summary["completed_requests"]) == json.dumps(b.summary["completed_requests"])


def test_invariants_hold_in_debug_mode():
    # preemption pressure, chunked prefill, scaling up and down, kv routing
    from fastsim.workload import load_mooncake
    from pathlib import Path

    trace = Path(__file__).parent / "data" / "reference" / "inputs" / "mooncake_synth_500.jsonl"
    w = load_mooncake(trace, trace_block_size=512)
    simulate(w, EngineArgs(block_size=64, num_gpu_blocks=600, max_num_batched_tokens=2048),
             num_workers=2, scaling_schedule=[[0, 2], [5000, 4], [15000, 2]], debug=True)
    simulate(w, EngineArgs(block_size=64, num_gpu_blocks=600), num_workers=3,
             router_mode="kv_router", debug=True)
    simulate(synthetic(2048, 512, 60, arrival_interval_ms=20.0),
             EngineArgs(num_gpu_blocks=512, max_num_seqs=64, preemption_mode="fifo"), debug=True)


def test_invariant_checker_catches_a_broken_state():
    from fastsim.invariants import InvariantError, check
    from fastsim.run_config import RunConfig
    from fastsim.state import build_state

    st = build_state(synthetic(16, 2, 2, arrival_interval_ms=1.0), EngineArgs(block_size=16),
                     RunConfig(num_workers=1, worker_rows=1, single_path=True))
    with pytest.raises(InvariantError, match="did not terminate"):
        check(st, EngineArgs(block_size=16))
