"""kernels/stats.py: Dynamo 1.4.2's DDSketch (crate ddsketchy 0.1.7, alpha 0.001, 32768 bins) and
nearest-rank rule. Reference numbers come from Dynamo 1.4.2 runs (copied here, see each test)."""

import json
import math
import random
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import numpy as np
import pytest

from fastsim.kernels import stats as S

DATA = Path(__file__).parent / "data"


# ---------------------------------------------------------------- slow pure-Python references


def ref_key(v):
    """ddsketchy: ceil(ln v * (1/ln_1p(2a/(1-a))))."""
    a = 0.001
    inv = 1.0 / math.log1p((2.0 * a) / (1.0 - a))
    return math.ceil(math.log(v) * inv)


def ref_value(k):
    """ddsketchy: exp(k * inv.recip()) * (2/(1+gamma))."""
    a = 0.001
    gamma = 1.0 + (2.0 * a) / (1.0 - a)
    inv = 1.0 / math.log1p((2.0 * a) / (1.0 - a))
    return math.exp(k * (1.0 / inv)) * (2.0 / (1.0 + gamma))


def ref_value_at_rank(values, rank):
    """Sorted list + formula (no collapse): bucket value of the rank-th smallest value."""
    v = sorted(values)[rank]
    return 0.0 if v == 0.0 else ref_value(ref_key(v))


class RefStore:
    """Line-by-line Python port of ddsketchy 0.1.7's collapsing-lowest dense store."""

    CHUNK = 128

    def __init__(self, bin_limit):
        self.bins, self.count = [], 0
        self.min_key, self.max_key, self.offset = 2**31 - 1, -(2**31), 0
        self.limit, self.collapsed = bin_limit, False

    def add(self, key):
        if key < self.min_key:
            if self.collapsed:
                idx = 0
            else:
                self._extend(key)
                idx = 0 if self.collapsed else key - self.offset
        else:
            if key > self.max_key:
                self._extend(key)
            idx = key - self.offset
        self.bins[idx] += 1
        self.count += 1

    def _new_len(self, lo, hi):
        want = hi - lo + 1
        return min(self.CHUNK * ((want + self.CHUNK - 1) // self.CHUNK), self.limit)

    def _extend(self, key):
        lo, hi = min(key, self.min_key), max(key, self.max_key)
        if not self.bins:
            self.bins = [0] * self._new_len(lo, hi)
            self.offset = lo
            self._adjust(lo, hi)
        elif lo >= self.min_key and hi < self.offset + len(self.bins):
            self.min_key, self.max_key = lo, hi
        else:
            n = self._new_len(lo, hi)
            if n > len(self.bins):
                self.bins += [0] * (n - len(self.bins))
            self._adjust(lo, hi)

    def _adjust(self, lo, hi):
        if hi - lo + 1 > len(self.bins):
            lo = hi - len(self.bins) + 1
            if lo >= self.max_key:
                self.offset = self.min_key = lo
                self.bins = [0] * len(self.bins)
                self.bins[0] = self.count
            else:
                shift = self.offset - lo
                if shift < 0:
                    a, b = self.min_key - self.offset, lo - self.offset
                    c = sum(self.bins[a:b])
                    self.bins[a:b] = [0] * (lo - self.min_key)
                    self.bins[b] += c
                self.min_key = lo
                self._shift(shift)
            self.max_key = hi
            self.collapsed = True
        else:
            mid = lo + (hi - lo + 1) // 2
            self._shift(self.offset + len(self.bins) // 2 - mid)
            self.min_key, self.max_key = lo, hi

    def _shift(self, shift):
        if shift > 0:
            self.bins = [0] * shift + self.bins[:-shift]
        elif shift < 0:
            self.bins = self.bins[-shift:] + [0] * (-shift)
        self.offset -= shift

    def key_at_rank(self, rank):
        n = 0
        for i, b in enumerate(self.bins):
            n += b
            if n > rank:
                return i + self.offset
        return self.max_key


def _hist(values):
    h = S.dd_new_hist()
    for v in values:
        S.dd_insert_nb(h, v)
    return h


# ---------------------------------------------------------------- constants and layout


def test_constants_match_the_crate_formulas():
    a = 0.001
    assert S.DD_GAMMA == 1.0 + (2.0 * a) / (1.0 - a)
    assert S.DD_GAMMA_LN == math.log1p((2.0 * a) / (1.0 - a))
    assert S.DD_INV_LN_GAMMA == 1.0 / S.DD_GAMMA_LN
    assert S.DD_MIN_INDEXABLE == 2.2250738585072014e-308 * S.DD_GAMMA
    assert S.DD_MAX_BINS == 32768


def test_layout_holds_1e_minus_9_to_1e12_without_clamping():
    assert S.DD_NBINS == S.DD_KEY_MAX + S.DD_OFFSET + 1
    assert S.DD_KEY_MIN + S.DD_OFFSET == 1  # index 0 is the zero bucket
    for v in (1e-9, 1e-3, 1.0, 1e6, 1e12):
        k = S.dd_key_nb(v)
        assert S.DD_KEY_MIN < k < S.DD_KEY_MAX
        assert S.dd_index_nb(v) == k + S.DD_OFFSET
        assert 1 <= S.dd_index_nb(v) < S.DD_NBINS
        assert abs(S.dd_key_value_nb(k) - v) <= 1.000001e-3 * v  # relative accuracy alpha
    assert S.dd_index_nb(0.0) == 0
    assert S.dd_index_nb(-5.0) == 0
    assert S.dd_index_nb(float("nan")) == -1 and S.dd_index_nb(float("inf")) == -1
    assert S.dd_index_nb(1e-300) == 1 and S.dd_index_nb(1e300) == S.DD_NBINS - 1  # clamped ends


# ---------------------------------------------------------------- against the slow reference


def test_key_and_value_match_reference_formula_bitwise():
    rng = np.random.default_rng(3)
    for v in np.exp(rng.uniform(math.log(1e-9), math.log(1e12), 3000)).tolist():
        k = S.dd_key_nb(v)
        assert k == ref_key(v)
        assert S.dd_key_value_nb(k) == ref_value(k)


def test_value_at_rank_matches_sorted_list_reference():
    rng = np.random.default_rng(11)
    vals = np.concatenate([np.exp(rng.uniform(math.log(1e-9), math.log(1e12), 700)),
                           rng.uniform(5.0, 60.0, 300), np.zeros(5), np.full(7, 42.0)])
    rng.shuffle(vals)
    h = _hist(vals.tolist())
    assert h.sum() == vals.shape[0]
    for r in range(vals.shape[0]):
        assert S.dd_value_at_rank_nb(h, r) == ref_value_at_rank(vals.tolist(), r)
    ranks = np.arange(vals.shape[0])[::-1].copy()
    many = S.dd_values_at_ranks_nb(h, ranks)
    assert many.tolist() == [S.dd_value_at_rank_nb(h, int(r)) for r in ranks]


def test_insert_many_and_ignored_values():
    h = S.dd_new_hist()
    assert S.dd_insert_many_nb(h, np.array([1.0, float("nan"), 2.0, float("inf"), 0.0])) == 3
    assert h.sum() == 3 and h[0] == 1
    assert S.dd_value_at_rank_nb(h, 0) == 0.0  # zero bucket value
    assert S.dd_value_at_rank_nb(h, 2) == ref_value(ref_key(2.0))
    assert S.dd_value_at_rank_nb(h, 99) == ref_value(ref_key(2.0))  # past the end: highest bucket


def test_empty_histogram():
    h = S.dd_new_hist()
    assert S.dd_value_at_rank_nb(h, 0) == 0.0
    assert S.dd_values_at_ranks_nb(h, np.array([0, 3])).tolist() == [0.0, 0.0]
    assert S.dd_percentile_nb(h, 0, 50.0, 0.0) == 0.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_collapse_of_lowest_keys_matches_ported_store(seed):
    """Key range wider than 32768 bins: ddsketchy folds the lowest keys upward; any order."""
    rnd = random.Random(seed)
    keys = [rnd.randint(-30000, 30000) for _ in range(400)] + [-32000, 32000]
    rnd.shuffle(keys)
    store = RefStore(S.DD_MAX_BINS)
    h = S.dd_new_hist()
    for k in keys:
        store.add(k)
        h[k + S.DD_OFFSET] += 1
    for r in range(len(keys)):
        assert S.dd_value_at_rank_nb(h, r) == S.dd_key_value_nb(store.key_at_rank(r))


def test_no_collapse_within_32768_keys_matches_ported_store():
    rnd = random.Random(7)
    keys = [rnd.randint(-16000, 16000) for _ in range(300)]
    store, h = RefStore(S.DD_MAX_BINS), S.dd_new_hist()
    for k in keys:
        store.add(k)
        h[k + S.DD_OFFSET] += 1
    assert not store.collapsed
    for r in range(len(keys)):
        assert S.dd_value_at_rank_nb(h, r) == S.dd_key_value_nb(store.key_at_rank(r))


# ---------------------------------------------------------------- nearest rank


def ref_rank(n, p):
    x = float(n - 1) * p / 100.0
    return min(int(Decimal(x).quantize(Decimal(1), rounding=ROUND_HALF_UP)), n - 1)


def test_nearest_rank_q12_cases():
    assert S.nearest_rank(6, 50) == 3 and S.nearest_rank_nb(6, 50.0) == 3  # 2.5 -> 3 (not banker's 2)
    assert S.nearest_rank(7, 75) == 5 and S.nearest_rank_nb(7, 75.0) == 5  # 4.5 -> 5
    assert S.nearest_rank(7, 90) == 5 and S.nearest_rank_nb(7, 90.0) == 5  # 5.4 -> 5 (not ceil)
    assert S.nearest_rank(2, 50) == 1
    # C20: n = 12 -> ranks 6, 8, 10, 10, 11
    assert [S.nearest_rank(12, p) for p in S.PERCENTILES] == [6, 8, 10, 10, 11]
    assert S.nearest_rank(1, 99) == 0 and S.nearest_rank(0, 50) == 0 and S.nearest_rank_nb(0, 50.0) == 0


def test_nearest_rank_grid_matches_exact_half_up():
    for n in range(1, 400):
        for p in S.PERCENTILES + (0.0, 12.5, 100.0):
            assert S.nearest_rank(n, p) == ref_rank(n, p) == S.nearest_rank_nb(n, p)


# ---------------------------------------------------------------- Dynamo 1.4.2 observations


def test_single_and_double_gap_match_dynamo():
    """Dynamo 1.4.2, one 592-token request (bs 16): gap 5.865129000000003 ms.
    OSL 2 (one gap): every ITL percentile = the exact gap (ddsketchy's one-value rule), otpu exact.
    OSL 3 (two equal gaps): bucket values 5.864985968363994 and 170.5453447539505, bitwise."""
    g = 5.865129000000003
    h1, o1 = _hist([g]), _hist([1000.0 / g])
    assert S.dd_percentile_nb(h1, 1, 50.0, g) == g
    assert S.dd_percentile_nb(o1, 1, 50.0, 1000.0 / g) == 170.4992336911941
    h2, o2 = _hist([g, g]), _hist([1000.0 / g] * 2)
    for p in S.PERCENTILES:
        assert S.dd_percentile_nb(h2, 2, p, g) == 5.864985968363994
        assert S.dd_percentile_nb(o2, 2, p, 1000.0 / g) == 170.5453447539505


def test_pooled_sketch_percentiles_match_dynamo_fixture():
    """tests/data/dd_gaps_dynamo142.json: 294 pooled gaps from a Dynamo 1.4.2 run and the report's
    ITL / output-token-throughput-per-user statistics. Percentiles, min and max are bitwise."""
    from fastsim.report import _dist_keys, _sketch_dist, make_gap_stats

    fx = json.loads((DATA / "dd_gaps_dynamo142.json").read_text())
    g = make_gap_stats(np.array(fx["gaps_ms"]))
    got = dict(zip(_dist_keys("itl", "_ms"), _sketch_dist(g, "itl")))
    got.update(zip(_dist_keys("output_token_throughput_per_user", ""), _sketch_dist(g, "otpu")))
    for k, v in fx["expected"].items():
        if k.startswith(("mean_", "std_")):
            assert got[k] == pytest.approx(v, rel=1e-13), k
        else:
            assert got[k] == v, k
