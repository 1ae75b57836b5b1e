"""Steady runs (``kernels/loop.py``: ``_steady_run``, ``_steady_run_dp``) advance a group through
many decode passes between its events in one tight loop, ahead of the event loop. They are exact:
a simulation gives the same results, bit for bit, as the pass-at-a-time path
(``steady_decode=False``: every request through every pass, no light ticks, no runs) and as the
full tick for every pass end (``light_ticks=False``), under both releases' rules.

The cases replay the bundled Mooncake trace (real prompt and output lengths, shared prefixes) on
round-robin clusters, attention-DP groups, kv_router, disaggregated pools (decode workers run
ahead too), with time caps,
telemetry, planner ticks and scaling; ``_runs`` checks that the runs happened where they can.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

import fastsim.sim as sim
from fastsim.config import EngineArgs
from fastsim.kernels.rank_state import DIAG_LIGHT_WAITING, DIAG_RUN_AHEAD_PASSES
from fastsim.workload import load_mooncake

from test_steady_decode import assert_same_results

TRACE = Path(__file__).resolve().parents[1] / "examples" / "mooncake_trace_1000.jsonl"


def _slice(tmp_path, first, n):
    """Lines ``first .. first+n-1`` of the bundled trace, as a trace of its own."""
    lines = TRACE.read_text().splitlines(keepends=True)[first:first + n]
    p = tmp_path / f"slice_{first}_{n}.jsonl"
    p.write_text("".join(lines))
    return p


def _three_ways(monkeypatch, path, engine, speedup=1.0, counter=DIAG_RUN_AHEAD_PASSES, **kw):
    """Run ``path`` with steady runs (the default), without light ticks and runs, and pass at a
    time, under both releases' rules; check the three agree; returns the passes run ahead in
    steady runs (``rk.diag[DIAG_RUN_AHEAD_PASSES]``, or the ``counter`` slot) under each release."""
    states = []
    build = sim.build_state

    def keep(*args, **kwargs):
        st = build(*args, **kwargs)
        if args[2].gap_skip is None:  # (not the explicit rerun of a capped run)
            states.append(st)
        return st

    monkeypatch.setattr(sim, "build_state", keep)
    ahead = {}
    for version in ("1.6.1", "1.4.2"):
        wl = load_mooncake(path, trace_block_size=512, arrival_speedup_ratio=speedup,
                           dynamo_version=version)
        a = sim.simulate(wl, engine, dynamo_version=version, **kw)
        ahead[version] = int(states[-1].ranks.diag[counter])
        b = sim.simulate(wl, engine, dynamo_version=version, light_ticks=False, **kw)
        assert int(states[-1].ranks.diag[DIAG_RUN_AHEAD_PASSES]) == 0
        c = sim.simulate(wl, engine, dynamo_version=version, steady_decode=False, **kw)
        assert_same_results(a, b)
        assert_same_results(a, c)
    return ahead


ENGINE = EngineArgs.coerce({"block_size": 64})
ENGINE_DP = EngineArgs.coerce({"block_size": 64, "dp_size": 2})


@pytest.mark.parametrize("first,n,workers,speedup", [(0, 400, 4, 2.0), (300, 500, 8, 1.0),
                                                     (600, 400, 2, 4.0)])
def test_round_robin_trace_slices(monkeypatch, tmp_path, first, n, workers, speedup):
    ahead = _three_ways(monkeypatch, _slice(tmp_path, first, n), ENGINE, speedup=speedup,
                        num_workers=workers)
    assert min(ahead.values()) > 1_000


@pytest.mark.parametrize("first,n,workers", [(0, 400, 2), (500, 300, 3)])
def test_attention_dp_trace_slices(monkeypatch, tmp_path, first, n, workers):
    """Groups of two ranks run ahead together (the pass ends at the slower rank)."""
    ahead = _three_ways(monkeypatch, _slice(tmp_path, first, n), ENGINE_DP, num_workers=workers)
    assert min(ahead.values()) > 1_000


def test_kv_router_trace_slice(monkeypatch, tmp_path):
    """kv_router: a run stops at the next arrival (any group may get it, and routing reads every
    group's cache)."""
    _three_ways(monkeypatch, _slice(tmp_path, 100, 400), ENGINE, num_workers=4,
                router_mode="kv_router", seed=3)
    _three_ways(monkeypatch, _slice(tmp_path, 100, 300), ENGINE_DP, num_workers=2,
                router_mode="kv_router", seed=5)


@pytest.mark.parametrize("engine,workers", [
    ({"block_size": 64, "num_gpu_blocks": 700}, 4),
    ({"block_size": 64, "num_gpu_blocks": 900, "preemption_mode": "fifo"}, 2),
    ({"block_size": 64, "num_gpu_blocks": 4096, "max_num_seqs": 3}, 4),
    ({"block_size": 64, "num_gpu_blocks": 700, "dp_size": 2}, 2),
    ({"block_size": 64, "num_gpu_blocks": 800, "enable_chunked_prefill": False,
      "max_num_batched_tokens": 65536}, 3),
])
def test_waiting_queue_that_cannot_be_admitted(monkeypatch, tmp_path, engine, workers):
    """Tight pools and few seats: a group runs ahead while its waiting queue's head cannot be
    admitted (no free seat, or not enough free blocks: steady passes only take blocks and evict
    cached ones, so it stays so until the group's next event)."""
    path = _slice(tmp_path, 0, 400)
    waiting = _three_ways(monkeypatch, path, EngineArgs.coerce(engine), speedup=2.0, num_workers=workers,
                          counter=DIAG_LIGHT_WAITING)
    assert min(waiting.values()) > 100
    _three_ways(monkeypatch, path, EngineArgs.coerce(engine), speedup=2.0, num_workers=workers,
                router_mode="kv_router", seed=11)


@pytest.mark.parametrize("cap_ms", [30_000.0, 61_234.5])
def test_time_caps(monkeypatch, tmp_path, cap_ms):
    """A run stops at the cap; the requests in flight at the cap keep their gaps out."""
    path = _slice(tmp_path, 0, 500)
    _three_ways(monkeypatch, path, ENGINE, num_workers=4, max_sim_time_ms=cap_ms)
    _three_ways(monkeypatch, path, ENGINE_DP, num_workers=2, max_sim_time_ms=cap_ms)
    _three_ways(monkeypatch, path, ENGINE, num_workers=1, max_sim_time_ms=cap_ms)


def test_telemetry_planner_and_scaling(monkeypatch, tmp_path):
    """Telemetry samples, planner ticks and fleet changes land where they do pass at a time."""
    path = _slice(tmp_path, 200, 300)
    ahead = _three_ways(monkeypatch, path, ENGINE_DP, num_workers=3, telemetry_interval_ms=777.0)
    assert min(ahead.values()) > 0
    _three_ways(monkeypatch, path, ENGINE, num_workers=2, planner=lambda s: 2 + int(s.now_ms // 5_000) % 3,
                planner_interval_ms=1_000.0, max_workers=4)
    _three_ways(monkeypatch, path, ENGINE_DP, num_workers=3,
                scaling_schedule=[[0, 3], [20_000, 1], [40_000, 4]])


def test_disaggregated_trace_slice(monkeypatch, tmp_path):
    """Decode workers run ahead between the prefill side's events (``kernels/disagg.py``)."""
    import fastsim.kernels.disagg as kd
    from fastsim.sim_disagg import simulate_disagg

    seen = []
    real = kd.run_disagg_nb

    def run(*args):
        seen.append(args[9])  # the decode ranks
        return real(*args)

    monkeypatch.setattr(kd, "run_disagg_nb", run)
    path = _slice(tmp_path, 0, 300)
    pre = EngineArgs.coerce({"block_size": 64, "worker_type": "prefill", "kv_bytes_per_token": 65536,
                             "kv_transfer_bandwidth": 25.0})
    dec = EngineArgs.coerce({"block_size": 64, "worker_type": "decode"})
    for version in ("1.6.1", "1.4.2"):
        wl = load_mooncake(path, trace_block_size=512, dynamo_version=version)
        for kw in ({}, {"router_mode": "kv_router"}, {"max_sim_time_ms": 40_000.0}):
            a = simulate_disagg(wl, pre, dec, num_prefill_workers=2, num_decode_workers=3,
                                dynamo_version=version, **kw)
            if "max_sim_time_ms" not in kw:  # (a capped run is made again, every request explicit)
                assert int(seen[-1].diag[DIAG_RUN_AHEAD_PASSES]) > 1_000
            b = simulate_disagg(wl, pre, dec, num_prefill_workers=2, num_decode_workers=3,
                                dynamo_version=version, light_ticks=False, **kw)
            assert int(seen[-1].diag[DIAG_RUN_AHEAD_PASSES]) == 0
            c = simulate_disagg(wl, pre, dec, num_prefill_workers=2, num_decode_workers=3,
                                dynamo_version=version, steady_decode=False, **kw)
            assert_same_results(a, b)
            assert_same_results(a, c)


def test_gap_windows_hold_one_index():
    """Every gap of a window gets the window's histogram indices (``_gap_window``): checked at
    both ends and at random points of windows of random gaps, gaps on bucket edges included."""
    from fastsim.kernels.loop import _gap_window
    from fastsim.kernels.stats import DD_GAMMA_LN, dd_index_nb

    rng = random.Random(7)
    gaps = [rng.uniform(0.5, 200.0) for _ in range(3_000)]
    gaps += [10.0 ** rng.uniform(-3, 5) for _ in range(1_000)]
    # values next to bucket edges, of the gap and of 1000 / gap
    for k in range(-500, 3_000, 7):
        edge = math.exp(k * DD_GAMMA_LN)
        gaps += [edge, math.nextafter(edge, 0.0), math.nextafter(edge, math.inf), 1000.0 / edge,
                 edge * (1.0 - 1e-12), edge * (1.0 + 1e-9)]
    wide = 0
    for gap in gaps:
        hi, i, oi = _gap_window(gap)
        assert hi >= gap
        assert i == dd_index_nb(gap) and oi == dd_index_nb(1000.0 / gap)
        if hi == gap:
            continue
        wide += 1
        points = [hi, math.nextafter(gap, math.inf), math.nextafter(hi, 0.0)]
        points += [rng.uniform(gap, hi) for _ in range(20)]
        for x in points:
            assert dd_index_nb(x) == i, (gap, hi, x)
            assert dd_index_nb(1000.0 / x) == oi, (gap, hi, x)
    assert wide > len(gaps) // 2
