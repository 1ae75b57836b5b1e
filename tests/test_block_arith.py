"""Exact shortcuts of the hot path give the results of the plain computation.

Block arithmetic by shifts (``Params.bshift``, kernels/scheduler.py) is an exact optimisation: a
power-of-two block size turns the scheduler's divisions into shifts and masks, and a simulation
forced onto the division path gives identical results, bit for bit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from numba import njit

import fastsim.errors
import fastsim.sim as sim
import fastsim.sim_disagg as sim_disagg
from fastsim.config import EngineArgs
from fastsim.kernels.scheduler import _block_mod, _blocks_ceil, _blocks_floor
from fastsim.workload import synthetic

from test_steady_decode import _cluster_case


@njit
def _arith(p, xs, out):
    for i in range(xs.shape[0]):
        out[i, 0] = _blocks_floor(p, xs[i])
        out[i, 1] = _blocks_ceil(p, xs[i])
        out[i, 2] = _block_mod(p, xs[i])


@pytest.mark.parametrize("bs", [1, 2, 16, 64, 512, 3, 48, 100])
def test_helpers_match_python_floor_division(bs):
    p = sim._engine_params(EngineArgs(block_size=bs))
    assert (p.bshift >= 0) == (bs & (bs - 1) == 0)
    xs = np.array(list(range(-3 * bs - 2, 3 * bs + 3)) + [2**40 + 7, -(2**40) - 7], dtype=np.int64)
    out = np.zeros((xs.shape[0], 3), dtype=np.int64)
    _arith(p, xs, out)
    for x, (f, c, m) in zip(xs.tolist(), out.tolist()):
        assert (f, c, m) == (x // bs, -(-x // bs), x % bs), x


def _division_only(monkeypatch):
    real = sim._engine_params

    def params(*a, **k):
        return real(*a, **k)._replace(bshift=-1)

    monkeypatch.setattr(sim, "_engine_params", params)
    monkeypatch.setattr(sim_disagg, "_engine_params", params)


def _assert_same(a, b):
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    for k, v in a.summary.items():
        if k == "wall_time_ms" or k.startswith("processed_"):
            continue
        w = b.summary[k]
        assert v == w or (v != v and w != w), f"summary {k}: {v!r} vs {w!r}"


@pytest.mark.parametrize("seed", range(0, 40, 3))
def test_shifts_and_divisions_agree_on_clusters(seed, monkeypatch):
    wl, engine, kw = _cluster_case(seed)
    try:
        a = sim.simulate(wl, engine, **kw)
    except fastsim.errors.DeadEndError:
        return
    with monkeypatch.context() as m:
        _division_only(m)
        b = sim.simulate(wl, engine, **kw)
    _assert_same(a, b)


def test_shifts_and_divisions_agree_disaggregated(monkeypatch):
    common = dict(block_size=16, max_num_seqs=64, max_num_batched_tokens=512)
    pre = EngineArgs.coerce(dict(common, worker_type="prefill", num_gpu_blocks=2000))
    dec = EngineArgs.coerce(dict(common, worker_type="decode", num_gpu_blocks=8000))
    wl = synthetic(700, 120, 200, arrival_interval_ms=2.0, turns_per_session=2, block_size=16)
    kw = dict(num_prefill_workers=2, num_decode_workers=3)
    a = sim_disagg.simulate_disagg(wl, pre, dec, **kw)
    with monkeypatch.context() as m:
        _division_only(m)
        b = sim_disagg.simulate_disagg(wl, pre, dec, **kw)
    _assert_same(a, b)


@pytest.mark.parametrize("seed", range(1, 40, 6))
def test_gap_cache_collisions_do_not_change_results(seed, monkeypatch):
    """Inter-token gaps are pooled with their histogram indices cached by value (kernels/loop.py,
    ``_pool_gaps``): a one-row cache (every new gap evicts the last) gives the same results."""
    import fastsim.kernels.loop as loop

    wl, engine, kw = _cluster_case(seed)
    try:
        a = sim.simulate(wl, engine, **kw)
    except fastsim.errors.DeadEndError:
        return
    with monkeypatch.context() as m:
        real = loop.new_gaps
        m.setattr(loop, "new_gaps", lambda: real(cache_rows=1))
        b = sim.simulate(wl, engine, **kw)
    _assert_same(a, b)


def test_gap_cache_collisions_on_a_busy_cluster(monkeypatch):
    import fastsim.kernels.loop as loop

    wl = synthetic(1024, 64, 3000, arrival_interval_ms=5.0)
    a = sim.simulate(wl, EngineArgs(), num_workers=4)
    with monkeypatch.context() as m:
        real = loop.new_gaps
        m.setattr(loop, "new_gaps", lambda: real(cache_rows=1))
        b = sim.simulate(wl, EngineArgs(), num_workers=4)
    _assert_same(a, b)
    assert a.summary["completed_requests"] == 3000
