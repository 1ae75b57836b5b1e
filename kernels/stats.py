"""Report statistics kernels: Dynamo 1.4.2's DDSketch and its nearest-rank percentile rule.

Dynamo 1.4.2 (``lib/mocker/src/replay/collector.rs``) reports the pooled inter-token latency (ITL)
and output-token-throughput-per-user percentiles from a DDSketch of the Rust crate **ddsketchy
0.1.7** (the crate path is embedded in ``dynamo/_core.abi3.so``; it is not ``sketches-ddsketch``),
built with relative accuracy ``alpha = 0.001`` and at most 32768 bins per store. The crate's rules,
mirrored here bit for bit:

* ``gamma = 1 + 2*alpha/(1-alpha)``, ``gamma_ln = ln_1p(2*alpha/(1-alpha))``,
  ``inv_ln_gamma = 1/gamma_ln``.
* key of a value ``v >= min_indexable`` = ``ceil(ln(v) * inv_ln_gamma)`` (a multiplication by the
  inverse, not a division by ``gamma_ln``: they can differ at a bucket edge).
  ``min_indexable = max(exp(i32::MIN/inv_ln_gamma + 1), f64::MIN_POSITIVE*gamma)`` ~ 2.2e-308, so
  only zero (and values below ~2e-308) goes to the zero bucket, whose value is 0.0.
  Non-finite values are ignored (not counted).
* value of key ``k`` = ``exp(k * (1/inv_ln_gamma)) * (2/(1+gamma))``.
* ``quantile(q)``: empty -> 0.0; one value -> that exact value; else
  ``rank = trunc(q*(count-1))`` (0-based) and the value of the bucket where the running count first
  exceeds ``rank`` -- no clamping to the exact min/max, so q = 1 gives the max's BUCKET value.
* The store collapses its LOWEST keys once the key range exceeds 32768 bins: the final state equals
  clamping every key up to ``max_key - 32767``. The fixed histogram here spans 65536 keys and
  applies that clamp at query time, so results are exact for values in ~[3.6e-29, 2.8e28].

Dynamo turns a percentile p into the nearest rank ``min(round_half_away((n-1)*p/100), n-1)`` and
queries the sketch so that the truncated rank is that same rank (verified doc Q12:
``(rank + 0.5)/(n-1)``, clamped to 1); checked against Dynamo 1.4.2 by experiment, n = 1 gives
the exact value and n = 2 the bucket value, bitwise.

Histogram layout (``hist``: int64[DD_NBINS]): index 0 = zero bucket; key ``k`` at ``k + DD_OFFSET``
(keys -32768..32767 -> indices 1..65536). Values outside the key window clamp to its ends.
"""

import math

import numpy as np

from fastsim.kernels.jit import kernel, kernel_noalloc

DD_ALPHA = 0.001
DD_MAX_BINS = 32768  # ddsketchy store bin limit used by Dynamo (collapse-lowest beyond it)
DD_GAMMA = 1.0 + (2.0 * DD_ALPHA) / (1.0 - DD_ALPHA)
DD_GAMMA_LN = math.log1p((2.0 * DD_ALPHA) / (1.0 - DD_ALPHA))
DD_INV_LN_GAMMA = 1.0 / DD_GAMMA_LN
# The crate rebuilds ln(gamma) for the value mapping as inv_ln_gamma.recip(); keep that rounding.
DD_VALUE_LN = 1.0 / DD_INV_LN_GAMMA
DD_VALUE_FACTOR = 2.0 / (1.0 + DD_GAMMA)
# exp(i32::MIN / inv_ln_gamma + 1) underflows to 0, so the normal-float bound wins.
DD_MIN_INDEXABLE = max(math.exp(-2147483648.0 / DD_INV_LN_GAMMA + 1.0), 2.2250738585072014e-308 * DD_GAMMA)

DD_KEY_MIN = -32768
DD_KEY_MAX = 32767
DD_OFFSET = 1 - DD_KEY_MIN  # key DD_KEY_MIN -> index 1 (index 0 is the zero bucket)
DD_NBINS = DD_KEY_MAX + DD_OFFSET + 1  # 65537

# Percentiles Dynamo reports, in report order (median = p50).
PERCENTILES = (50.0, 75.0, 90.0, 95.0, 99.0)


def dd_new_hist():
    """Return an empty DDSketch histogram (int64[DD_NBINS] of zeros)."""
    return np.zeros(DD_NBINS, dtype=np.int64)


@kernel_noalloc
def dd_key_nb(v):
    """Bucket key of a positive value ``v >= DD_MIN_INDEXABLE`` (ddsketchy's ``ceil(ln v * inv)``)."""
    return int(math.ceil(math.log(v) * DD_INV_LN_GAMMA))


@kernel
def dd_key_value_nb(key):
    """Representative value of bucket ``key``: ``exp(key * ln_gamma) * 2/(1+gamma)``."""
    return math.exp(float(key) * DD_VALUE_LN) * DD_VALUE_FACTOR


@kernel_noalloc
def dd_index_nb(v):
    """Histogram index of value ``v``; -1 for NaN/inf (the crate ignores them).

    Zero, negative and sub-``DD_MIN_INDEXABLE`` values map to the zero bucket (index 0): Dynamo
    clamps gaps at 0, so negatives never reach its sketch.
    """
    if not math.isfinite(v):
        return -1
    if v < DD_MIN_INDEXABLE:
        return 0
    k = dd_key_nb(v)
    if k < DD_KEY_MIN:
        k = DD_KEY_MIN
    elif k > DD_KEY_MAX:
        k = DD_KEY_MAX
    return k + DD_OFFSET


@kernel_noalloc
def dd_insert_nb(hist, v):
    """Add value ``v`` to ``hist``; returns 1 if counted, 0 if ignored (non-finite)."""
    i = dd_index_nb(v)
    if i < 0:
        return 0
    hist[i] += 1
    return 1


@kernel
def dd_insert_many_nb(hist, values):
    """Add every value of ``values`` to ``hist``; returns how many were counted."""
    c = 0
    for j in range(values.shape[0]):
        c += dd_insert_nb(hist, values[j])
    return c


@kernel
def _dd_low_index_nb(hist):
    """Lowest positive-store index left after ddsketchy's collapse (1 if no collapse applies)."""
    hi = 0
    for i in range(hist.shape[0] - 1, 0, -1):
        if hist[i] != 0:
            hi = i
            break
    lo = hi - (DD_MAX_BINS - 1)
    if lo < 1:
        lo = 1
    return lo


@kernel
def _dd_index_value_nb(i, lo):
    """Value of histogram index ``i`` after applying the collapse floor ``lo``."""
    if i == 0:
        return 0.0
    if i < lo:
        i = lo
    return dd_key_value_nb(i - DD_OFFSET)


@kernel
def dd_value_at_rank_nb(hist, rank):
    """Bucket value of the ``rank``-th smallest (0-based) value in ``hist``.

    Mirrors ddsketchy's ``key_at_rank`` (first bucket whose running count exceeds ``rank``) plus
    the collapse of the lowest keys beyond 32768 bins. Empty -> 0.0; ``rank`` past the end -> the
    highest bucket. The one-value special case of ``quantile`` is NOT applied here (see
    ``dd_percentile_nb``).
    """
    lo = _dd_low_index_nb(hist)
    cum = 0
    last = -1
    for i in range(hist.shape[0]):
        c = hist[i]
        if c == 0:
            continue
        cum += c
        last = i
        if cum > rank:
            return _dd_index_value_nb(i, lo)
    if last < 0:
        return 0.0
    return _dd_index_value_nb(last, lo)


@kernel
def dd_values_at_ranks_nb(hist, ranks):
    """``dd_value_at_rank_nb`` for several ranks (any order) in one pass over ``hist``."""
    m = ranks.shape[0]
    out = np.zeros(m, dtype=np.float64)
    order = np.argsort(ranks)
    lo = _dd_low_index_nb(hist)
    cum = 0
    j = 0
    last = -1
    for i in range(hist.shape[0]):
        c = hist[i]
        if c == 0:
            continue
        cum += c
        last = i
        while j < m and ranks[order[j]] < cum:
            out[order[j]] = _dd_index_value_nb(i, lo)
            j += 1
        if j == m:
            break
    while j < m:  # ranks past the end (or empty histogram)
        out[order[j]] = 0.0 if last < 0 else _dd_index_value_nb(last, lo)
        j += 1
    return out


@kernel
def nearest_rank_nb(n, p):
    """Dynamo's 0-based nearest rank ``min(round_half_away((n-1)*p/100), n-1)``; 0 if n < 1.

    Evaluated as Rust does, ``((n-1) as f64 * p / 100.0).round()``; round half away from zero
    without the ``floor(x + 0.5)`` trap (0.49999999999999994 + 0.5 rounds up to 1.0).
    """
    if n < 1:
        return 0
    x = float(n - 1) * p / 100.0
    fl = np.floor(x)
    k = int(fl)
    if x - fl >= 0.5:
        k += 1
    if k > n - 1:
        k = n - 1
    if k < 0:
        k = 0
    return k


def nearest_rank(n, p):
    """Plain-Python ``nearest_rank_nb`` (Dynamo's percentile index rule; see there)."""
    n = int(n)
    if n < 1:
        return 0
    x = float(n - 1) * float(p) / 100.0
    r = math.floor(x)
    if x - r >= 0.5:
        r += 1
    return max(0, min(int(r), n - 1))


@kernel
def dd_percentile_nb(hist, n, p, vmin):
    """Dynamo's sketch percentile p (0..100) of ``n`` values: 0 if empty, exact ``vmin`` if one
    value (ddsketchy returns its exact min for a single value), else the bucket value of the
    nearest-rank element."""
    if n <= 0:
        return 0.0
    if n == 1:
        return vmin
    return dd_value_at_rank_nb(hist, nearest_rank_nb(n, p))
