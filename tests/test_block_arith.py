"""Exact shortcuts of the hot path give the results of the plain computation.

Block arithmetic by shifts (``Params.bshift``, kernels/scheduler.py) is an exact optimisation: a
power-of-two block size turns the scheduler's divisions into shifts and masks, and a simulation
forced onto the division path gives identical results, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import fastsim.errors
import fastsim.sim as sim
import fastsim.sim_disagg as sim_disagg
import fastsim.state as state
from fastsim.config import EngineArgs
from fastsim.kernels.blocks import block_mod, blocks_ceil, blocks_floor
from fastsim.workload import synthetic

from test_steady_decode import _cluster_case, assert_same_results


@njit
def _arith(p, xs, out):
    for i in range(xs.shape[0]):
        out[i, 0] = blocks_floor(p, xs[i])
        out[i, 1] = blocks_ceil(p, xs[i])
        out[i, 2] = block_mod(p, xs[i])


@pytest.mark.parametrize("bs", [1, 2, 16, 64, 512, 3, 48, 100])
def test_helpers_match_python_floor_division(bs):
    p = state.engine_params(EngineArgs(block_size=bs))
    assert (p.bshift >= 0) == (bs & (bs - 1) == 0)
    xs = np.array(list(range(-3 * bs - 2, 3 * bs + 3)) + [2**40 + 7, -(2**40) - 7], dtype=np.int64)
    out = np.zeros((xs.shape[0], 3), dtype=np.int64)
    _arith(p, xs, out)
    for x, (f, c, m) in zip(xs.tolist(), out.tolist()):
        assert (f, c, m) == (x // bs, -(-x // bs), x % bs), x


def _division_only(m):
    real = state.engine_params

    def params(*a, **k):
        return real(*a, **k)._replace(bshift=-1)

    m.setattr(state, "engine_params", params)
    m.setattr(sim_disagg, "engine_params", params)


def _one_row_gap_cache(m):
    import fastsim.kernels.loop as loop

    real = loop.new_gaps
    m.setattr(loop, "new_gaps", lambda *a, **kw: real(*a, **dict(kw, cache_rows=1)))


def _same_with(patch, monkeypatch, run, *args, **kw):
    """``run(*args, **kw)`` gives the same results with ``patch`` applied (or the same dead end)."""
    try:
        a = run(*args, **kw)
    except fastsim.errors.DeadEndError:
        a = None
    with monkeypatch.context() as m:
        patch(m)
        if a is None:
            with pytest.raises(fastsim.errors.DeadEndError):
                run(*args, **kw)
            return None
        b = run(*args, **kw)
    assert_same_results(a, b)
    return a


def _same_on_cluster_case(patch, monkeypatch, seed):
    wl, engine, kw = _cluster_case(seed)
    _same_with(patch, monkeypatch, sim.simulate, wl, engine, **kw)


@pytest.mark.parametrize("seed", range(0, 40, 3))
def test_shifts_and_divisions_agree_on_clusters(seed, monkeypatch):
    _same_on_cluster_case(_division_only, monkeypatch, seed)


def test_shifts_and_divisions_agree_disaggregated(monkeypatch):
    common = dict(block_size=16, max_num_seqs=64, max_num_batched_tokens=512)
    pre = EngineArgs.coerce(dict(common, worker_type="prefill", num_gpu_blocks=2000))
    dec = EngineArgs.coerce(dict(common, worker_type="decode", num_gpu_blocks=8000))
    wl = synthetic(700, 120, 200, arrival_interval_ms=2.0, turns_per_session=2, block_size=16)
    _same_with(_division_only, monkeypatch, sim_disagg.simulate_disagg, wl, pre, dec,
               num_prefill_workers=2, num_decode_workers=3)


@pytest.mark.parametrize("seed", range(1, 40, 6))
def test_gap_cache_collisions_do_not_change_results(seed, monkeypatch):
    """Inter-token gaps are pooled with their histogram indices cached by value (kernels/loop.py,
    ``_pool_gaps``): a one-row cache (every new gap evicts the last) gives the same results."""
    _same_on_cluster_case(_one_row_gap_cache, monkeypatch, seed)


def test_gap_cache_collisions_on_a_busy_cluster(monkeypatch):
    wl = synthetic(1024, 64, 3000, arrival_interval_ms=5.0)
    a = _same_with(_one_row_gap_cache, monkeypatch, sim.simulate, wl, EngineArgs(), num_workers=4)
    assert a.summary["completed_requests"] == 3000


def _pool_one_by_one(gaps_ms, cache_rows):
    import numba

    import fastsim.kernels.loop as loop

    @numba.njit
    def drive(gaps, values):
        for v in values:
            loop._pool_gaps(gaps, v, np.int64(1), 0)

    gaps = loop.new_gaps(cache_rows=cache_rows)
    drive(gaps, np.asarray(gaps_ms, dtype=np.float64))
    return gaps


@pytest.mark.parametrize("cache_rows", [1, 4096])
def test_gap_cache_gives_the_exact_histogram_index(cache_rows):
    """Gaps pooled through the gap cache land where ``dd_index`` puts each one: values a few ulps
    either side of bucket edges, in random order, and the ``(t + d) - t`` gaps of back-to-back
    passes (which differ in their last bits)."""
    from fastsim.kernels import stats

    rng = np.random.default_rng(7)
    values = []
    for k in rng.integers(-400, 6000, size=300):  # keys of values ~0.7 .. 1.6e5
        edge = np.exp(float(k) * stats.DD_VALUE_LN)
        values.extend(edge + np.arange(-4, 5) * np.spacing(edge))
    t = np.cumsum(rng.uniform(1e3, 1e6, size=2000))
    values.extend((t + 5.79272) - t)
    values.extend([0.0, 0.0, 1e-300, 5.0, 5.0])
    values = np.array(values)
    rng.shuffle(values)
    gaps = _pool_one_by_one(np.concatenate([values, values[::-1]]), cache_rows)
    itl, otpu = stats.dd_new_hist(), stats.dd_new_hist()
    for v in np.concatenate([values, values[::-1]]):
        stats.dd_insert_nb(itl, v)
        if v > 0.0:
            stats.dd_insert_nb(otpu, 1000.0 / v)
    assert np.array_equal(gaps.itl_hist, itl)
    assert np.array_equal(gaps.otpu_hist, otpu)


@pytest.mark.parametrize("seed", range(6))
def test_block_keys_are_equal_exactly_when_the_prompt_prefixes_are(seed):
    """Engine block ``j`` of two prompts has one key exactly when their first ``(j + 1) *
    block_size`` tokens are equal (a trace token is its block's hash id as u32), for block sizes
    smaller than, equal to, larger than and not dividing the trace block size."""
    from fastsim.kernels.blocks import content_block_keys_nb

    rng = np.random.default_rng(seed)
    tbs = int(rng.choice([16, 48, 64]))
    bs = int(rng.choice([8, 16, 24, 64, 100]))
    rows = []
    for _ in range(60):  # prompts drawn from a few shared prefixes, ids that collide in u32
        n_ids = int(rng.integers(1, 9))
        ids = [int(rng.integers(0, 3)) for _ in range(n_ids)]
        if rng.random() < 0.2:
            ids[-1] += 1 << 32
        isl = int(rng.integers(max(1, (n_ids - 1) * tbs + 1), n_ids * tbs + 1))
        rows.append((isl, ids))
    isl = np.array([r[0] for r in rows], dtype=np.int64)
    ptr = np.cumsum([0] + [len(r[1]) for r in rows]).astype(np.int64)
    ids = np.array([i for r in rows for i in r[1]], dtype=np.int64)
    out_ptr = np.empty(len(rows) + 1, dtype=np.int64)
    keys = content_block_keys_nb(isl, ptr, ids, tbs, bs, out_ptr)
    tokens = [np.repeat(np.array(r[1], dtype=np.int64) & 0xFFFFFFFF, tbs)[:r[0]] for r in rows]
    for a in range(len(rows)):
        for b in range(len(rows)):
            na, nb = out_ptr[a + 1] - out_ptr[a], out_ptr[b + 1] - out_ptr[b]
            for j in range(min(na, nb)):
                same = np.array_equal(tokens[a][:(j + 1) * bs], tokens[b][:(j + 1) * bs])
                assert (keys[out_ptr[a] + j] == keys[out_ptr[b] + j]) == same, (a, b, j)
    depth = {}  # prefixes of different lengths never share a key
    for r in range(len(rows)):
        for j in range(out_ptr[r + 1] - out_ptr[r]):
            assert depth.setdefault(int(keys[out_ptr[r] + j]), j) == j
    assert (keys >> np.uint64(63) == 0).all() and (keys != 0).all()


def test_per_group_gap_sums_merge_to_the_pooled_statistic():
    """Gap sums are kept per group (each about its own shift) and merged in group order for the
    report (``results.merged_gap_sums``): one group gives its own sums bit for bit; several give the
    count, minimum and maximum exactly and the mean and variance of all the gaps."""
    import numba

    import fastsim.kernels.loop as loop
    from fastsim.results import merged_gap_sums

    @numba.njit
    def drive(gaps, values, groups, counts):
        for i in range(values.shape[0]):
            loop._pool_gaps(gaps, values[i], counts[i], groups[i])

    rng = np.random.default_rng(3)
    values = rng.uniform(4.0, 9.0, size=5000)
    counts = rng.integers(1, 50, size=5000)
    groups = rng.integers(0, 4, size=5000)
    one = loop.new_gaps(1)
    drive(one, values, np.zeros(5000, dtype=np.int64), counts)
    n, ssum, ssq, vmin, vmax, shift = merged_gap_sums(one.itl, one.itl_n)
    assert (n, ssum, ssq, vmin, vmax, shift) == (int(one.itl_n[0]), one.itl[0, 0], one.itl[0, 1],
                                                  one.itl[0, 2], one.itl[0, 3], one.itl[0, 4])
    four = loop.new_gaps(4)
    drive(four, values, groups, counts)
    n4, s4, q4, lo4, hi4, sh4 = merged_gap_sums(four.itl, four.itl_n)
    assert (n4, lo4, hi4) == (n, vmin, vmax) == (int(counts.sum()), values.min(), values.max())
    mean = np.average(values, weights=counts)
    var = np.average((values - mean) ** 2, weights=counts)
    assert abs((sh4 + s4 / n4) - mean) < 1e-12 * mean
    assert abs((q4 / n4 - (s4 / n4) ** 2) - var) < 1e-9 * var
    assert np.array_equal(four.itl_hist, one.itl_hist)
