"""A round-robin cluster simulated as shards side by side (``fastsim/shards.py``) gives the
unsplit loop's results bit for bit: every per-request field, every report field (worker-seconds
included, folded from the shards' tick logs), the fleet frame."""

import json
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import fastsim.errors
from fastsim import shards, sim
from fastsim.config import EngineArgs
from fastsim.workload import load_mooncake, synthetic

from test_steady_decode import assert_same_results, random_engine

MOONCAKE_SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "mooncake_trace_1000.jsonl"


def _same_split(workload, engine, *, threads=2, **kw):
    assert shards.plan(workload, threads=threads, num_workers=kw.get("num_workers", 1),
                       router_mode="round_robin", replay_concurrency=None, max_sim_time_ms=None,
                       schedule=[], planner=None, telemetry_interval_ms=None) > 1
    try:
        a = sim.simulate(workload, engine, threads=1, **kw)
    except fastsim.errors.DeadEndError as exc:
        with pytest.raises(fastsim.errors.DeadEndError, match=str(exc).split(" in-flight")[0]):
            sim.simulate(workload, engine, threads=threads, **kw)
        return None
    b = sim.simulate(workload, engine, threads=threads, **kw)
    assert_same_results(a, b)
    pd.testing.assert_frame_equal(a.fleet, b.fleet)
    return b


def _random_case(seed):
    rng = random.Random(7000 + seed)
    engine = random_engine(rng)
    bs = engine["block_size"]
    if rng.random() < 0.25:
        engine["max_model_len"] = rng.randint(300, 1200)
    engine = EngineArgs.coerce(engine)
    wl = synthetic(
        rng.randint(50, 900), rng.randint(1, 300), rng.randint(50, 600),
        arrival_interval_ms=rng.choice([0.0, 1.0, 5.0, 30.0]),
        shared_prefix_ratio=rng.choice([0.0, 0.5]), num_prefix_groups=rng.choice([0, 3]), block_size=bs,
    )
    return wl, engine, dict(num_workers=rng.randint(2, 7)), rng.choice([2, 3, 4])


@pytest.mark.parametrize("seed", range(30))
def test_random_clusters_split(seed):
    wl, engine, kw, threads = _random_case(seed)
    _same_split(wl, engine, threads=threads, **kw)


@pytest.mark.parametrize("workers,threads", [(2, 2), (3, 2), (4, 2), (5, 3), (8, 8)])
def test_trace_with_prefix_reuse_split(workers, threads):
    wl = load_mooncake(MOONCAKE_SAMPLE)
    rep = _same_split(wl, EngineArgs(block_size=16), threads=threads, num_workers=workers)
    assert rep.summary["decode_worker_seconds"] > 0
    assert rep.summary["prefix_cache_reused_ratio"] > 0.1


def test_long_light_run_hands_its_log_over(monkeypatch):
    """Light load (every pass its own event, 64 ticks per request): the shards' logs fill many
    times over, and a shard far ahead waits for the others."""
    monkeypatch.setattr(shards, "_LOG_MIN", 1)  # the smallest log a step needs
    monkeypatch.setattr(shards, "_PENDING_MAX", 500)
    folds = []
    real = shards._TickFold.offer

    def offer(self, s, ticks, finished, fold=True, log=None):
        folds.append(ticks.shape[0])
        return real(self, s, ticks, finished, fold, log)

    monkeypatch.setattr(shards._TickFold, "offer", offer)
    wl = synthetic(64, 64, 3000, arrival_interval_ms=40.0)
    _same_split(wl, EngineArgs(), threads=2, num_workers=4)
    assert len(folds) > 20


def test_dead_end_split():
    # a prompt longer than the token budget without chunked prefill: no pass can start it
    wl = synthetic(600, 10, 40, arrival_interval_ms=1.0)
    engine = EngineArgs(max_num_batched_tokens=512, enable_chunked_prefill=False)
    with pytest.raises(fastsim.errors.DeadEndError, match="with 40 in-flight"):
        sim.simulate(wl, engine, num_workers=4, threads=1)
    with pytest.raises(fastsim.errors.DeadEndError, match="with 40 in-flight"):
        sim.simulate(wl, engine, num_workers=4, threads=2)


def test_what_is_not_split():
    wl = synthetic(64, 8, 100, arrival_interval_ms=1.0)
    base = dict(threads=2, num_workers=4, router_mode="round_robin", replay_concurrency=None,
                max_sim_time_ms=None, schedule=[], planner=None, telemetry_interval_ms=None)
    assert shards.plan(wl, **base) == 2
    assert shards.plan(wl, **dict(base, threads=8)) == 4  # at most one shard per worker
    for change in (dict(threads=1), dict(num_workers=1), dict(router_mode="kv_router"),
                   dict(replay_concurrency=4), dict(max_sim_time_ms=10.0), dict(schedule=[(5.0, 2)]),
                   dict(planner=lambda s: None), dict(telemetry_interval_ms=5.0)):
        assert shards.plan(wl, **dict(base, **change)) == 1, change
    assert shards.plan(synthetic(64, 8, 100, arrival_interval_ms=1.0, turns_per_session=2), **base) == 1
    unsorted = synthetic(64, 8, 100, arrival_interval_ms=1.0)
    unsorted.session_arrival_ms = unsorted.session_arrival_ms[::-1].copy()
    assert shards.plan(unsorted, **base) == 1



def test_default_does_not_split(monkeypatch):
    """Without a thread count no run is split (decision 0265); FASTSIM_THREADS is one."""
    monkeypatch.delenv("FASTSIM_THREADS", raising=False)
    monkeypatch.setattr(shards, "usable_cores", lambda: 2)
    base = dict(threads=None, num_workers=4, router_mode="round_robin", replay_concurrency=None,
                max_sim_time_ms=None, schedule=[], planner=None, telemetry_interval_ms=None)
    large = synthetic(64, 8, 100_000, arrival_interval_ms=1.0)
    assert shards.plan(large, **base) == 1
    monkeypatch.setenv("FASTSIM_THREADS", "2")
    assert shards.plan(large, **base) == 2


def test_threads_argument_checked(monkeypatch):
    wl = synthetic(64, 8, 10, arrival_interval_ms=1.0)
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(fastsim.errors.InputError, match="threads"):
            sim.simulate(wl, EngineArgs(), num_workers=2, threads=bad)
    monkeypatch.setenv("FASTSIM_THREADS", "two")
    with pytest.raises(fastsim.errors.InputError, match="FASTSIM_THREADS"):
        sim.simulate(wl, EngineArgs(), num_workers=2)
    monkeypatch.setenv("FASTSIM_THREADS", "2")
    assert shards.resolve_threads(None) == (2, True)


def test_unsplit_and_split_worker_seconds_differ_from_a_naive_sum():
    """The fold is needed: adding each shard's own worker-seconds does not give the cluster's."""
    wl = synthetic(256, 32, 2000, arrival_interval_ms=3.0)
    rep = _same_split(wl, EngineArgs(), threads=2, num_workers=4)
    halves = [sim.simulate(shards._sub_workload(wl, slice(s, None, 2)), EngineArgs(), num_workers=2,
                           threads=1).summary["decode_worker_seconds"] for s in range(2)]
    assert rep.summary["decode_worker_seconds"] != sum(halves)
    assert np.isclose(rep.summary["decode_worker_seconds"], sum(halves), rtol=1e-3)


def test_cli_threads(tmp_path, capsys):
    from fastsim.cli import main

    flags = ["replay", "--input-tokens", "256", "--output-tokens", "16", "--request-count", "400",
             "--arrival-interval-ms", "2", "--num-workers", "4"]
    reports = []
    for threads in ("1", "2"):
        out = tmp_path / f"r{threads}.json"
        assert main(flags + ["--threads", threads, "--report-json", str(out)]) == 0
        rep = json.loads(out.read_text())
        rep.pop("wall_time_ms")
        reports.append({k: v for k, v in rep.items() if not k.startswith("processed_")})
    assert reports[0] == reports[1]
    capsys.readouterr()
    assert main(flags + ["--threads", "0"]) != 0
    err = capsys.readouterr().err
    assert "threads is 0" in err and "Traceback" not in err
