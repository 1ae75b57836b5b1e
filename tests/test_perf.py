"""Timing models (kernels/perf.py, fastsim/perf.py) against Dynamo 1.4.2's numbers.

Sources of the pinned values: notes = shared/spec/dynamo-mocker-notes.md (section 6, conformance
C1/C2), verified = shared/spec/dynamo-1.4.2-verified.md (X1, Q1-Q3, Q14 and its experiments e1b,
e14*), and tests/data/perf/dynamo_probe.out.json (probes written for this module).
"""

from __future__ import annotations

import bisect
import json
import math
import os
import random
import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from fastsim.errors import InputError
from fastsim.kernels.perf import (
    INTERPOLATED,
    POLYNOMIAL,
    PerfTables,
    decode_time_nb,
    interp1_nb,
    interp2_nb,
    lower_index_nb,
    modeled_ms_nb,
    prefill_time_nb,
    quantize_ms_nb,
    scale_nb,
)
from fastsim.perf import (
    NPZ_KEYS,
    convert_profile_results,
    describe,
    grid_model,
    is_profile_results_dir,
    load_perf_model,
    polynomial_model,
)

DATA = Path(__file__).parent / "data" / "perf"
PROFILE_DIR = DATA / "h200_tp1p_tp1d"
REF_NPZ = DATA / "H200_TP1P_TP1D_mocker_perf_data.npz"
TOT16 = 16384 * 16  # default KV capacity in tokens with block_size 16 (verified, conventions)

q = quantize_ms_nb
POLY = polynomial_model()


def R(x):  # the verified doc's 1-ns display rounding
    return round(x * 1e6) / 1e6


@pytest.fixture(scope="module")
def grid():
    return load_perf_model(REF_NPZ)


# --------------------------------------------------------------------------------------------
# Polynomial model (notes 6.1, C1)


@pytest.mark.parametrize(
    "t, ms",
    [
        (1, 16.5166038609989),
        (64, 17.4748845714944),
        (128, 18.4517979659776),
        (512, 24.3857036156416),
        (1024, 32.4907119025664),
        (4096, 85.75597972106239),
        (8192, 169.1369184042496),
        (16384, 378.2779326569984),
    ],
)
def test_polynomial_prefill_c1(t, ms):
    assert prefill_time_nb(POLY, t) == ms
    # The grouping a*(t*t) + b*t + c is the bit-exact one (independent reproduction, item 4).
    assert prefill_time_nb(POLY, t) == 4.209989e-07 * (float(t) * t) + 1.518344e-02 * t + 1.650142e01


@pytest.mark.parametrize("t", [0, -1, -1000])
def test_prefill_zero_without_new_tokens(t, grid):
    assert prefill_time_nb(POLY, t) == 0.0
    assert prefill_time_nb(grid, t) == 0.0


@pytest.mark.parametrize(
    "active, total, ms",
    [(0, 1024, 5.74), (512, 1024, 26.31), (1024, 1024, 34.01), (2048, 1024, 34.01), (7, 0, 34.01)],
)
def test_polynomial_decode_c1(active, total, ms):
    got = decode_time_nb(POLY, float(active), 0.0, float(total))
    assert got == pytest.approx(ms, rel=1e-15, abs=0)
    u = min(active / total, 1.0) if total > 0 else 1.0
    assert got == -25.74 * (u * u) + 54.01 * u + 5.74  # same grouping, bit for bit
    assert decode_time_nb(POLY, active, 123, total) == got  # ints work; ctx is ignored


def test_polynomial_tables_are_empty():
    assert POLY.kind == POLYNOMIAL
    for a in (POLY.prefill_x, POLY.prefill_y, POLY.decode_x, POLY.decode_y):
        assert a.shape == (0,) and a.dtype == np.float64
    assert POLY.decode_z.shape == (0, 0)
    assert load_perf_model(None).kind == POLYNOMIAL


# --------------------------------------------------------------------------------------------
# Scaling (notes 6.5, C2)


def test_scale_c2():
    assert scale_nb(12.0, 3.0) == 4.0
    assert scale_nb(12.0, 0.0) == 12.0
    assert scale_nb(0.0, 3.0) == 0.0
    assert scale_nb(12.0, -2.0) == 12.0


# --------------------------------------------------------------------------------------------
# Quantisation (verified X1; independent reproduction item 3)


def _q_exact(ms: float) -> float:
    """Slow reference: Duration::from_secs_f64(ms / 1000) in rationals, then as_secs_f64() * 1000."""
    s = ms / 1000.0
    if not s > 0:
        return 0.0
    f = Fraction(s)
    secs = math.floor(f)
    nanos = round((f - secs) * 10**9)  # Fraction.__round__: half to even, exact
    if nanos == 10**9:
        secs, nanos = secs + 1, 0
    return (float(secs) + float(nanos) / 1e9) * 1000.0


def test_quantize_v01_min_ttft_and_itl():
    # V01 (bs 64, 16384 blocks): min TTFT = prefill(1024) + decode of its 16 blocks, added as
    # (0 + p) + d (verified, independent reproduction item 2); min ITL is the 17-block step (item 1).
    qp = q(prefill_time_nb(POLY, 1024))
    qd = q(decode_time_nb(POLY, 16.0 * 64, 1024.0, 16384.0 * 64))
    assert (R(qp), R(qd)) == (32.490712, 5.79272)
    assert (0.0 + qp) + qd == 38.283432
    assert q(decode_time_nb(POLY, 17.0 * 64, 1025.0, 16384.0 * 64)) == 5.796013


def test_quantize_q3_and_speedups():
    # Q3: 64-token request, bs 16: TTFT 23.22807 = pre(64) 17.474885 + dec(64/262144) 5.753185.
    # Dynamo's JSONL first_token_ms (experiment e7) is 23.228070000000002: bit for bit.
    qp, qd = q(prefill_time_nb(POLY, 64)), q(decode_time_nb(POLY, 64.0, 64.0, TOT16))
    assert (qp, qd) == (17.474885, 5.753185)
    assert (0.0 + qp) + qd == 23.228070000000002
    # e1b: one 16-token request, OSL 4; ttft and ttst as Dynamo reported them (exact floats).
    # The speedup divides the rounded duration (modeled_ms_nb), decode by speedup * decode_speedup.
    cases = [  # speedup, decode_speedup, ttft, ttst
        (0.0, 1.0, 22.487759, 5.746593000000001),
        (100.0, 1.0, 0.22487800000000002, 0.05746600000000002),
        (1.0, 10.0, 17.318793, 0.5746590000000005),
        (2.0, 10.0, 8.659397, 0.28733000000000075),
        (1.0, 100.0, 16.801896, 0.05746600000000157),
    ]
    for s, ds in ((0.0, 1.0), (1.0, 1.0)):  # unscaled: one rounding
        assert modeled_ms_nb(prefill_time_nb(POLY, 16), s) == q(prefill_time_nb(POLY, 16))
    for s, ds, ttft, ttst in cases:
        p = modeled_ms_nb(prefill_time_nb(POLY, 16), s)
        d1 = modeled_ms_nb(decode_time_nb(POLY, 16.0, 16.0, TOT16), s * ds)
        d2 = modeled_ms_nb(decode_time_nb(POLY, 32.0, 17.0, TOT16), s * ds)
        t1 = (0.0 + p) + d1
        assert t1 == ttft, (s, ds)
        assert (t1 + d2) - t1 == ttst, (s, ds)
    # Rounding the plainly scaled value is 1 ns off at speedup 2 (8.659396000000001).
    wrong = (0.0 + q(scale_nb(prefill_time_nb(POLY, 16), 2.0))) + q(scale_nb(decode_time_nb(POLY, 16.0, 16.0, TOT16), 20.0))
    assert wrong != 8.659397
    # X1: ITL 0.057466 at speedup 100 is the scaled value rounded, not q(5.746593) / 100.
    assert modeled_ms_nb(decode_time_nb(POLY, 32.0, 17.0, TOT16), 100.0) == 0.057466
    assert q(decode_time_nb(POLY, 32.0, 17.0, TOT16)) / 100.0 != 0.057466


def _modeled_exact(raw: float, s: float) -> float:
    """Slow reference of aisimulate's modeled_duration_ms + the caller's Duration round trip."""

    def dur(x):
        f = Fraction(x)
        secs = math.floor(f)
        nanos = round((f - secs) * 10**9)
        return (secs + 1, 0) if nanos == 10**9 else (secs, nanos)

    def back(d):
        return float(d[0]) + float(d[1]) / 1e9

    if not raw > 0:
        return 0.0
    d = dur(raw / 1000.0)
    if s > 0 and d != (0, 0):
        d = dur(back(d) / s)
    return back(dur(back(d) * 1000.0 / 1000.0)) * 1000.0


def test_modeled_c2_and_exact_reference():
    assert modeled_ms_nb(12.0, 3.0) == 4.0
    assert modeled_ms_nb(12.0, 0.0) == 12.0
    assert modeled_ms_nb(0.0, 3.0) == 0.0
    assert modeled_ms_nb(12.0, -1.0) == 12.0
    assert modeled_ms_nb(0.0000004, 0.1) == 0.0  # rounds to 0 before scaling: not scaled up
    rng = random.Random(5)
    for _ in range(20000):
        raw = rng.choice([rng.uniform(0, 100), 10 ** rng.uniform(-7, 6), round(rng.uniform(1, 100), 7)])
        s = rng.choice([0.0, 1.0, 2.0, 3.0, 1.5, 0.3, 7.0, 100.0, rng.uniform(0.01, 1000)])
        got = modeled_ms_nb(raw, s)
        assert got == _modeled_exact(raw, s), (raw, s)
        assert q(got) == got  # already on the ns grid


def _hard_durations(seed):
    """Step times (ms) that probe the nanosecond rounding: random ones over many binades, ones
    with few decimals, exact binary ties, and either side of the round-trip bound."""
    from fastsim.kernels.perf import _ROUND_TRIP_S

    rng = np.random.default_rng(seed)
    edge = _ROUND_TRIP_S * 1000.0
    return np.concatenate([
        rng.uniform(0, 100, 200_000), np.exp(rng.uniform(-20, 16, 200_000)),
        np.round(rng.uniform(0, 100, 100_000), 6), np.round(rng.uniform(0, 100, 100_000), 4),
        rng.integers(1, 2 ** 20, 50_000) / 1024.0,  # exact binary ties of the nanosecond rounding
        edge * (1.0 + rng.uniform(-1e-6, 1e-6, 50_000)),
        edge * np.array([1.0, 1.0 - 2 ** -52, 1.0 + 2 ** -52]),
    ])


def test_modeled_shortcut_matches_every_rounding():
    """``modeled_ms_nb`` skips the round trips that change nothing below 1024 s (a speedup of 1,
    the final quantisation): the same values as ``_modeled_ms_rounds``, which does them all, on
    random durations, ties and either side of the bound."""
    import numba

    from fastsim.kernels.perf import _modeled_ms_rounds

    @numba.njit
    def mismatches(raws, s):
        bad = 0
        for i in range(raws.shape[0]):
            if raws[i] > 0.0 and modeled_ms_nb(raws[i], s) != _modeled_ms_rounds(raws[i], s):
                bad += 1
        return bad

    raws = _hard_durations(27)
    for s in (0.0, 1.0, 2.0, 1.5, 0.3, 0.5, 3.0, 7.0, 100.0, 1000.0):
        assert mismatches(raws, s) == 0, s


def test_modeled_against_dynamo_probe():
    probe = json.loads((DATA / "dynamo_probe.out.json").read_text())
    assert len(probe["speedup"]) == 9
    plain_ok = 0
    for kind, v, s, ds, first in probe["speedup"]:
        if kind == "prefill":  # constant prefill v, decode 1 ms
            assert (0.0 + modeled_ms_nb(v, s)) + modeled_ms_nb(1.0, s * ds) == first
            plain_ok += (0.0 + q(v / s)) + q(1.0 / s) == first
        else:  # prefill 1 ms, constant decode v, divided once by the product
            assert (0.0 + modeled_ms_nb(1.0, s)) + modeled_ms_nb(v, s * ds) == first
            assert (0.0 + modeled_ms_nb(1.0, s)) + modeled_ms_nb(modeled_ms_nb(v, s), ds) != first
    assert plain_ok < 6  # the single-rounding rule fails on most of these


def test_quantize_ties_and_tiny_values():
    # Exact binary ties are odd multiples of 1/1024 s: half to even.
    assert q(0.9765625) == 0.976562  # 976562.5 ns -> 976562
    assert q(4.8828125) == 4.882812  # 4882812.5 ns -> 4882812
    assert q(2.9296875) == 2.929688  # 2929687.5 ns -> 2929688
    # 0.0000005 ms / 1000 is 4.999999999999999e-10 s, just below half a ns: 0 (exact, not the tie).
    assert q(0.0000005) == 0.0
    assert q(0.0000015) == _q_exact(0.0000015)
    assert q(1e-7) == 0.0
    assert q(6e-7) == (0.0 + 1 / 1e9) * 1000.0 == 1.0000000000000002e-06  # 1 ns, read back via seconds
    assert q(0.0) == 0.0 and q(-0.0) == 0.0
    assert math.isnan(q(float("nan")))
    # Read-back above 1 s: (secs + nanos/1e9) * 1000, whole seconds handled separately.
    assert q(1000.0) == 1000.0
    assert q(999.9999995) == _q_exact(999.9999995)
    # Plain round(ms * 1e6) / 1e6 is off by 1 ns on near-ties; the exact rule is not.
    assert round(999.9999995 * 1e6) / 1e6 != q(999.9999995)


def test_quantize_matches_exact_reference():
    rng = random.Random(20261201)
    vals = []
    for _ in range(20000):
        k = rng.random()
        if k < 0.3:
            vals.append(rng.uniform(0, 50))
        elif k < 0.5:
            vals.append(10 ** rng.uniform(-9, 7))
        elif k < 0.85:  # near decimal ns ties, including 1-2 ulp either side
            n = rng.randrange(0, 10**10)
            vals.append(float(np.nextafter((n + 0.5) / 1e6, rng.choice([-np.inf, np.inf]))) if rng.random() < 0.5 else (n + 0.5) / 1e6)
        else:  # exact binary ties, odd/1024 s
            vals.append((2 * rng.randrange(0, 10**6) + 1) * 0.9765625)
    bad = [v for v in vals if q(v) != _q_exact(v)]
    assert not bad, bad[:5]


def test_quantize_against_dynamo_probe():
    # tests/data/perf/dynamo_probe.py: constant prefill P, constant 1 ms decode, one request.
    probe = json.loads((DATA / "dynamo_probe.out.json").read_text())
    assert len(probe["quant"]) == 7
    for p, first in probe["quant"].items():
        assert (0.0 + q(float(p))) + q(1.0) == first, p
    # The alternatives it rules out: secs*1000 + nanos/1e6 and total_ns/1e6 (above 1 s).
    s, n = divmod(round(3502.8812164 * 1e6), 10**9)
    assert (0.0 + (s * 1000.0 + n / 1e6)) + 1.0 != probe["quant"]["3502.8812164"]
    s, n = divmod(round(1052.6719662 * 1e6), 10**9)
    assert (0.0 + (s * 10**9 + n) / 1e6) + 1.0 != probe["quant"]["1052.6719662"]


# --------------------------------------------------------------------------------------------
# Interpolation (notes 6.2, verified Q14): kernels against slow references


def _lower_index_ref(xs, x):
    n = len(xs)
    if x <= xs[0]:
        return 0
    if x >= xs[-1]:
        return n - 2
    return bisect.bisect_right(xs, x) - 1


def _line_ref(x1, y1, x2, y2, x):
    return (y2 - y1) / (x2 - x1) * (x - x1) + y1


def _interp1_ref(xs, ys, x):
    i = _lower_index_ref(xs, x)
    return _line_ref(xs[i], ys[i], xs[i + 1], ys[i + 1], x)


def _interp2_ref(xs, ys, zs, x, y):
    i, j = _lower_index_ref(xs, x), _lower_index_ref(ys, y)
    z1 = _line_ref(xs[i], zs[i][j], xs[i + 1], zs[i + 1][j], x)
    z2 = _line_ref(xs[i], zs[i][j + 1], xs[i + 1], zs[i + 1][j + 1], x)
    return _line_ref(ys[j], z1, ys[j + 1], z2, y)


def _interp2_exact(xs, ys, zs, x, y):
    """Bilinear (with edge-cell extrapolation) in exact rationals, weights form: independent check."""
    i, j = _lower_index_ref(xs, x), _lower_index_ref(ys, y)
    F = Fraction
    fx = (F(x) - F(xs[i])) / (F(xs[i + 1]) - F(xs[i]))
    fy = (F(y) - F(ys[j])) / (F(ys[j + 1]) - F(ys[j]))
    v = (
        F(zs[i][j]) * (1 - fx) * (1 - fy)
        + F(zs[i + 1][j]) * fx * (1 - fy)
        + F(zs[i][j + 1]) * (1 - fx) * fy
        + F(zs[i + 1][j + 1]) * fx * fy
    )
    return float(v)


def test_lower_index_semantics():
    xs = np.array([0.0, 1.0, 4.0, 10.0])
    assert [lower_index_nb(xs, v) for v in (-5.0, 0.0, 0.5, 1.0, 3.9, 4.0, 9.9, 10.0, 50.0)] == [0, 0, 0, 1, 1, 2, 2, 2, 2]
    rng = np.random.default_rng(3)
    ax = np.cumsum(rng.uniform(0.1, 5.0, 50))
    xl = list(ax)
    for v in list(rng.uniform(ax[0] - 10, ax[-1] + 10, 500)) + xl:
        assert lower_index_nb(ax, float(v)) == _lower_index_ref(xl, float(v))


def test_knot_uses_the_cell_to_the_right():
    # Dynamo probe: axis [0, 1, 4, 10], t = 4. The right cell returns y[2] exactly; the left cell
    # would give 61654706913.52899 and a first token of ...914.52899.
    probe = json.loads((DATA / "dynamo_probe.out.json").read_text())
    xs = np.array([0.0, 1.0, 4.0, 10.0])
    ys = np.array([0.0, 54.832, 61654706913.529, 61654706913.529])
    perf = grid_model(xs, ys, [0.0, 1e7], [0.0, 1e6], np.ones((2, 2)))
    assert prefill_time_nb(perf, 4) == 61654706913.529
    assert _line_ref(1.0, 54.832, 4.0, 61654706913.529, 4.0) != 61654706913.529
    assert (0.0 + q(prefill_time_nb(perf, 4))) + q(decode_time_nb(perf, 16.0, 4.0, 0.0)) == probe["knot"]


def test_interp_kernels_match_slow_reference(grid):
    px, py = list(grid.prefill_x), list(grid.prefill_y)
    dx, dy, dz = list(grid.decode_x), list(grid.decode_y), grid.decode_z.tolist()
    rng = random.Random(7)
    for _ in range(3000):
        # inside, outside on both sides, and exactly on knots
        t = rng.choice([rng.uniform(-2e4, 4e4), float(rng.randrange(0, 40000)), rng.choice(px)])
        assert interp1_nb(grid.prefill_x, grid.prefill_y, t) == _interp1_ref(px, py, t)
        x = rng.choice([rng.uniform(-1e5, 2e6), float(rng.randrange(0, 1_500_000)), rng.choice(dx)])
        y = rng.choice([rng.uniform(-1e3, 4e4), float(rng.randrange(0, 30000)), rng.choice(dy)])
        got = interp2_nb(grid.decode_x, grid.decode_y, grid.decode_z, x, y)
        assert got == _interp2_ref(dx, dy, dz, x, y)
        assert got == pytest.approx(_interp2_exact(dx, dy, dz, x, y), rel=1e-9, abs=1e-9)
        # the public kernels add the clamps
        assert decode_time_nb(grid, x, y, 0.0) == max(got, 1.0)
        if t > 0:
            assert prefill_time_nb(grid, t) == max(_interp1_ref(px, py, t), 0.0)


def test_interp_random_uneven_grids():
    # Random uneven grids, queries everywhere (the kernels assume validated, increasing axes).
    rng = np.random.default_rng(11)
    for _ in range(20):
        nx, ny = rng.integers(2, 9, size=2)
        xs = np.cumsum(rng.uniform(0.5, 3.0, nx))
        ys = np.cumsum(rng.uniform(0.5, 3.0, ny))
        zs = rng.uniform(1, 50, (nx, ny))
        for x, y in rng.uniform(-5, 30, (50, 2)):
            got = interp2_nb(xs, ys, zs, float(x), float(y))
            assert got == _interp2_ref(list(xs), list(ys), zs.tolist(), float(x), float(y))
            assert got == pytest.approx(_interp2_exact(list(xs), list(ys), zs.tolist(), x, y), rel=1e-9, abs=1e-9)


# --------------------------------------------------------------------------------------------
# Q14 facts from the reference NPZ (experiments e14, e14b, e14c; bs 16, one request)


def test_q14_prefill_extrapolation(grid):
    assert R(prefill_time_nb(grid, 80)) == 0.164233  # below the grid: extrapolated, not 0.606596
    assert R(prefill_time_nb(grid, 20000)) == 440.757395  # above: not the clamped 360.512817
    assert prefill_time_nb(grid, 16) == 0.0 and prefill_time_nb(grid, 50) == 0.0  # negative -> 0
    assert R(prefill_time_nb(grid, 100)) == 0.606596


@pytest.mark.parametrize(
    "isl, first, ttst",
    [
        (16, 6.401136, 6.686802000000001),
        (50, 6.952223, 6.942810999999999),
        (80, 6.973846, 6.935264999999999),
        (100, 7.366306, 6.743238),
        (1000, 26.671586, 6.1586529999999975),
        (1001, 26.693684, 6.158633999999996),
        (16372, 367.105454, 6.592636000000027),
        (20000, 447.45029, 6.693375000000003),
        (30000, 668.8994449999999, 6.96120499999995),
        (950000, 21011.618867, 1.0),  # kv beyond the grid: extrapolation below 1 ms -> floor
    ],
)
def test_q14_single_request_timeline(grid, isl, first, ttst):
    # First pass: prefill(isl) + decode(physical kv = ceil(isl/16)*16, ctx = isl); second pass
    # decodes at length isl + 1. Dynamo's values, bit for bit.
    kv1 = -(-isl // 16) * 16
    kv2 = -(-(isl + 1) // 16) * 16
    t1 = (0.0 + q(prefill_time_nb(grid, isl))) + q(decode_time_nb(grid, float(kv1), float(isl), 0.0))
    assert t1 == first
    assert (t1 + q(decode_time_nb(grid, float(kv2), float(isl + 1), 0.0))) - t1 == ttst


def test_q14_shared_prefix_batch_and_kv_extrapolation(grid):
    # e14b: three requests (1603, 1622, 1641 tokens) sharing 100 blocks, one pass.
    t1 = (0.0 + q(prefill_time_nb(grid, 3 * (4866 // 3 - 3200 // 3)))) + q(decode_time_nb(grid, 1696.0, 1622.0, 0.0))
    assert t1 == 41.465877
    assert (t1 + q(decode_time_nb(grid, 1696.0, 1623.0, 0.0))) - t1 == 6.178038999999998
    # e14c: 80 x 12000 tokens, second pass kv 961280 > grid end 910195: extrapolated.
    t1 = 21267.683678999998
    assert (t1 + q(decode_time_nb(grid, 961280.0, 12001.0, 0.0))) - t1 == 35.923094999998284
    # floor before speedup: 0.5 ms at speedup 2 (e14c)
    assert q(scale_nb(decode_time_nb(grid, 950016.0, 950001.0, 0.0), 2.0)) == 0.5
    assert interp2_nb(grid.decode_x, grid.decode_y, grid.decode_z, 950016.0, 950001.0) < 1.0


# --------------------------------------------------------------------------------------------
# Profiler directory -> grid (Dynamo's converter)


def test_profile_dir_conversion_reproduces_dynamo():
    ref = np.load(REF_NPZ, allow_pickle=False)
    got = load_perf_model(PROFILE_DIR)
    assert got.kind == INTERPOLATED
    arrays = dict(zip(NPZ_KEYS, got[1:]))
    for key in NPZ_KEYS:
        assert arrays[key].shape == ref[key].shape, key
        np.testing.assert_allclose(arrays[key], ref[key], rtol=1e-13, atol=0, err_msg=key)
    # The axes and the 1-D fit are exact; the 2-D fit is too with numpy's reference LAPACK.
    for key in ("prefill_isl", "decode_active_kv_tokens", "decode_context_length"):
        assert np.array_equal(arrays[key], ref[key]), key


def test_profile_dir_legacy_json(tmp_path):
    p = np.load(PROFILE_DIR / "selected_prefill_interpolation" / "raw_data.npz")
    d = np.load(PROFILE_DIR / "selected_decode_interpolation" / "raw_data.npz")
    (tmp_path / "prefill_raw_data.json").write_text(
        json.dumps({"prefill_isl": p["prefill_isl"].tolist(), "prefill_ttft": p["prefill_ttft"].tolist()})
    )
    (tmp_path / "decode_raw_data.json").write_text(
        json.dumps(
            {
                "x_kv_usage": d["x_kv_usage"].tolist(),
                "y_context_length": d["y_context_length"].tolist(),
                "z_itl": d["z_itl"].tolist(),
                "max_kv_tokens": int(d["max_kv_tokens"][0]),
            }
        )
    )
    assert is_profile_results_dir(tmp_path)
    a, b = load_perf_model(tmp_path), load_perf_model(PROFILE_DIR)
    for x, y in zip(a[1:], b[1:]):
        assert np.array_equal(x, y)


def _write_profile(dirpath, isl, ttft, usage, ctx, itl, max_kv):
    (dirpath / "selected_prefill_interpolation").mkdir(parents=True)
    (dirpath / "selected_decode_interpolation").mkdir(parents=True)
    np.savez(dirpath / "selected_prefill_interpolation" / "raw_data.npz", prefill_isl=np.asarray(isl), prefill_ttft=np.asarray(ttft, float))
    np.savez(
        dirpath / "selected_decode_interpolation" / "raw_data.npz",
        x_kv_usage=np.asarray(usage, float),
        y_context_length=np.asarray(ctx, float),
        z_itl=np.asarray(itl, float),
        max_kv_tokens=np.array([max_kv]),
    )


def test_profile_dir_exact_linear_data(tmp_path):
    # Data exactly on planes: the fits recover them. Decode's batch-size coefficient is negative
    # beyond -1e-6, so Dynamo clamps it to 0 and keeps the intercept. Zero wall times are skipped.
    isl = np.array([100, 200, 400, 800, 1600])
    ttft = 5.0 + 0.02 * isl  # ms
    ttft_with_zero = np.append(ttft, 0.0)
    isl_with_zero = np.append(isl, 3200)  # still widens the prefill axis (Dynamo takes min/max of all points)
    max_kv = 100000
    usage = np.array([0.1, 0.2, 0.4, 0.5, 0.8, 0.3])
    ctx = np.array([1000.0, 500.0, 2000.0, 250.0, 4000.0, 3000.0])
    kv = np.round(usage * max_kv)
    bs = np.maximum(1, np.round(kv / ctx))
    itl = (0.004 - 0.0001 * bs + 2e-8 * kv) * 1000.0
    _write_profile(tmp_path, isl_with_zero, ttft_with_zero, usage, ctx, itl, max_kv)
    arrays = convert_profile_results(tmp_path)
    np.testing.assert_array_equal(arrays["prefill_isl"], np.linspace(100, 3200, 100))
    np.testing.assert_allclose(arrays["prefill_ttft_ms"], 5.0 + 0.02 * arrays["prefill_isl"], rtol=1e-9)
    kx, cy = arrays["decode_active_kv_tokens"], arrays["decode_context_length"]
    np.testing.assert_array_equal(kx, np.linspace(0, kv.max(), 100))
    np.testing.assert_array_equal(cy, np.linspace(1, (kv / bs).max(), 100))
    np.testing.assert_allclose(arrays["decode_itl"], (0.004 + 2e-8 * kx[:, None]) * 1000.0 + 0 * cy[None, :], rtol=1e-9)


def test_profile_dir_errors(tmp_path):
    good = dict(isl=[100, 200, 400], ttft=[6.0, 9.0, 15.0], usage=[0.1, 0.5, 0.9], ctx=[100.0, 200.0, 300.0], itl=[5.0, 9.0, 14.0], max_kv=10000)
    bad = dict(good, ttft=[15.0, 9.0, 6.0])  # prefill slope < 0: Dynamo rejects the fit
    _write_profile(tmp_path / "neg", **bad)
    with pytest.raises(ValueError, match="negative slope"):
        load_perf_model(tmp_path / "neg")
    bad = dict(good, ctx=[100.0, 200.0])
    _write_profile(tmp_path / "len", **bad)
    with pytest.raises(ValueError, match="same length"):
        load_perf_model(tmp_path / "len")
    _write_profile(tmp_path / "zero", **dict(good, ttft=[0.0, 0.0, 0.0]))
    with pytest.raises(ValueError, match="wall time is 0"):
        load_perf_model(tmp_path / "zero")
    _write_profile(tmp_path / "nan", **dict(good, itl=[5.0, float("nan"), 14.0]))
    with pytest.raises(ValueError, match="z_itl has NaN"):
        load_perf_model(tmp_path / "nan")
    d = tmp_path / "key"
    _write_profile(d, **good)
    np.savez(d / "selected_decode_interpolation" / "raw_data.npz", x_kv_usage=np.ones(3))
    with pytest.raises(ValueError, match=r"raw_data.npz: missing key\(s\) y_context_length, z_itl, max_kv_tokens"):
        load_perf_model(d)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="not a profiler results directory"):
        load_perf_model(tmp_path / "empty")


# --------------------------------------------------------------------------------------------
# Mocker-format NPZ: what loads, what is rejected (dynamo_probe.out.json "accept")

BASE = dict(
    prefill_isl=np.array([1.0, 1e6]),
    prefill_ttft_ms=np.array([7.0, 7.0]),
    decode_active_kv_tokens=np.array([0.0, 1e7]),
    decode_context_length=np.array([0.0, 1e6]),
    decode_itl=np.full((2, 2), 1.0),
)


def _npz(tmp_path, name, saver=np.savez, **changes):
    arrays = dict(BASE)
    arrays.update(changes)
    p = tmp_path / f"{name}.npz"
    saver(p, **{k: v for k, v in arrays.items() if v is not None})
    return p


def _first_token(perf):
    return (0.0 + q(prefill_time_nb(perf, 16))) + q(decode_time_nb(perf, 16.0, 16.0, TOT16))


def test_npz_variants_dynamo_accepts(tmp_path):
    probe = json.loads((DATA / "dynamo_probe.out.json").read_text())["accept"]
    accepted = {
        "base": _npz(tmp_path, "base"),
        "bigendian": _npz(tmp_path, "be", **{k: v.astype(">f8") for k, v in BASE.items()}),
        "fortran_itl": _npz(tmp_path, "f", decode_active_kv_tokens=np.array([0.0, 1e7, 2e7]), decode_itl=np.asfortranarray(np.ones((3, 2)))),
        "compressed": _npz(tmp_path, "z", np.savez_compressed),
    }
    for name, path in accepted.items():
        perf = load_perf_model(path)
        assert perf.kind == INTERPOLATED
        assert perf.decode_z.flags.c_contiguous and perf.decode_z.dtype == np.dtype(np.float64)
        assert _first_token(perf) == probe[name] == 8.0, name
    assert _first_token(POLY) == probe["int64_isl"]  # what Dynamo's fallback gives


@pytest.mark.parametrize(
    "name, changes, message",
    [
        ("missing_itl", dict(decode_itl=None), r"missing key\(s\) decode_itl"),
        ("int64_isl", dict(prefill_isl=np.array([1, 1000000])), "prefill_isl has dtype int64; it must be float64"),
        ("float32", dict(prefill_ttft_ms=np.array([7.0, 7.0], np.float32)), "prefill_ttft_ms has dtype float32"),
        ("isl_2d", dict(prefill_isl=np.array([[1.0], [1e6]])), r"prefill_isl has shape \(2, 1\); it must be 1-D"),
        ("isl_0d", dict(prefill_isl=np.array(1.0)), r"prefill_isl has shape \(\); it must be 1-D"),
        ("len_mismatch", dict(prefill_ttft_ms=np.array([7.0, 7.0, 7.0])), "prefill_isl has 2 values but prefill_ttft_ms has 3"),
        ("itl_shape", dict(decode_active_kv_tokens=np.array([0.0, 1e7, 2e7])), r"decode_itl has shape \(2, 2\) but must be .* = \(3, 2\)"),
        ("not_increasing", dict(prefill_isl=np.array([1.0, 1e6, 10.0]), prefill_ttft_ms=np.ones(3)), r"prefill_isl must be strictly increasing, but prefill_isl\[1\]"),
        ("duplicate", dict(prefill_isl=np.array([1.0, 1.0, 1e6]), prefill_ttft_ms=np.ones(3)), r"strictly increasing, but prefill_isl\[0\] = 1.0"),
        ("single_point", dict(prefill_isl=np.array([1.0]), prefill_ttft_ms=np.array([7.0])), "prefill_isl has 1 value"),
        ("nan_axis", dict(prefill_isl=np.array([1.0, np.nan])), "prefill_isl must be strictly increasing"),
        ("ctx_decreasing", dict(decode_context_length=np.array([1e6, 0.0])), "decode_context_length must be strictly increasing"),
        ("nan_ttft", dict(prefill_ttft_ms=np.array([np.nan, 7.0])), r"prefill_ttft_ms\[0\] is nan; table values must be finite"),
        ("inf_itl", dict(decode_itl=np.array([[1.0, 1.0], [1.0, np.inf]])), r"decode_itl\[1, 1\] is inf"),
        ("object", dict(decode_itl=np.array([None, 1], dtype=object)), "cannot read decode_itl"),
    ],
)
def test_npz_rejected_with_clear_error(tmp_path, name, changes, message):
    path = _npz(tmp_path, name, **changes)
    with pytest.raises(ValueError, match=message) as info:
        load_perf_model(path)
    assert isinstance(info.value, InputError)
    assert str(path) in str(info.value)  # the message names the file


def test_npz_files_that_are_not_archives(tmp_path):
    p = tmp_path / "text.npz"
    p.write_text("not a zip")
    with pytest.raises(ValueError, match="cannot read it as an NPZ archive"):
        load_perf_model(p)
    p = tmp_path / "array.npz"
    with open(p, "wb") as f:
        np.save(f, np.ones(3))
    with pytest.raises(ValueError, match="single .npy array"):
        load_perf_model(p)
    with pytest.raises(ValueError, match="no such NPZ file"):
        load_perf_model(tmp_path / "nope.npz")
    with pytest.raises(ValueError, match="no such file or directory"):
        load_perf_model(tmp_path / "nope")
    (tmp_path / "table.csv").write_text("1,2\n")
    with pytest.raises(ValueError, match="neither a mocker-format .npz file nor a profiler results directory"):
        load_perf_model(tmp_path / "table.csv")


def test_relative_paths_and_base_dir(tmp_path, monkeypatch):
    shutil.copy(REF_NPZ, tmp_path / "m.npz")
    shutil.copytree(PROFILE_DIR, tmp_path / "prof")
    a = load_perf_model("m.npz", base_dir=tmp_path)
    b = load_perf_model(os.path.join("prof"), base_dir=str(tmp_path))
    monkeypatch.chdir(tmp_path)
    c = load_perf_model("m.npz")
    assert np.array_equal(a.decode_z, c.decode_z)
    assert np.allclose(a.decode_z, b.decode_z, rtol=1e-13)
    assert load_perf_model(REF_NPZ, base_dir="/nonexistent").kind == INTERPOLATED  # absolute wins


def test_grid_model_from_arrays_and_describe(grid):
    g = grid_model(*(np.asarray(a).tolist() for a in grid[1:]), source="mine")
    assert all(np.array_equal(x, y) for x, y in zip(g[1:], grid[1:]))
    with pytest.raises(ValueError, match="mine: decode_itl has shape"):
        grid_model([1, 2], [1, 2], [1, 2], [1, 2], np.ones((3, 2)), source="mine")
    assert "interpolated" in repr(grid) and "100x100" in repr(grid)
    assert repr(POLY) == "PerfTables(kind=polynomial)"
    assert describe(grid).startswith("interpolated timing model: prefill 100 points")
    assert describe(POLY).startswith("polynomial timing model")
    assert isinstance(grid, PerfTables) and isinstance(grid, tuple)


def test_branch_free_modeled_ms_matches():
    """``unit_modeled_ms`` (the steady runs' branch-free rounding) gives ``modeled_ms_nb``'s value
    at speedups 0 and 1, or says it cannot (a rounding tie, a duration outside its range), on
    random durations, exact binary ties and either side of its bound."""
    import numba

    from fastsim.kernels.perf import unit_modeled_ms

    @numba.njit
    def check(raws, s):
        bad = 0
        declined = 0
        for i in range(raws.shape[0]):
            got, ok = unit_modeled_ms(raws[i])
            if not ok:
                declined += 1
            elif got != modeled_ms_nb(raws[i], s):
                bad += 1
        return bad, declined

    raws = np.concatenate([_hard_durations(29), np.random.default_rng(30).uniform(1, 40, 300_000),
                           np.array([999.9999999995, 1000.0 - 2 ** -40])])
    for s in (0.0, 1.0):
        bad, declined = check(raws, s)
        assert bad == 0, s
        assert 0 < declined < 100_000  # the ties and the durations past the bound, not more


def test_four_decode_times_at_once_match():
    """``decode4_ms_161`` gives four ``decode_ms_161`` values, with the polynomial model (side by
    side) and others (one at a time), at speedups with and without the side-by-side path."""
    import numba

    from fastsim.kernels.pass_time import decode4_ms_161, decode_ms_161
    from fastsim.kernels.rank_state import Params

    @numba.njit
    def mismatches(p, perf, lens, ns):
        bad = 0
        for i in range(lens.shape[0]):
            a, b, c, d = decode4_ms_161(p, perf, lens[i], ns[i])
            if (a != decode_ms_161(p, perf, lens[i], ns[i])
                    or b != decode_ms_161(p, perf, lens[i] + ns[i], ns[i])
                    or c != decode_ms_161(p, perf, lens[i] + 2 * ns[i], ns[i])
                    or d != decode_ms_161(p, perf, lens[i] + 3 * ns[i], ns[i])):
                bad += 1
        return bad

    rng = np.random.default_rng(31)
    ns = rng.integers(1, 256, 20_000)
    lens = ns * rng.integers(1, 4000, 20_000)
    grid = grid_model([1.0, 1e6], [1.0, 1e6], [0.0, 1e7], [0.0, 1e6], np.array([[3.0, 9.0], [5.0, 40.0]]))
    for perf in (POLY, grid):
        for speedup, cap in ((1.0, 4096), (1.0, 50), (2.0, 4096), (0.0, 4096), (1.5, 100_000)):
            p = Params(block_size=16, cap=cap, max_seqs=256, budget=8192, chunked=True, caching=True, lifo=False,
                       max_model_len=0, speedup=speedup, decode_speedup=1.0, stage=0)
            assert mismatches(p, perf, lens, ns) == 0, (perf.kind, speedup, cap)
