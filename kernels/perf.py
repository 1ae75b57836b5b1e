"""Timing kernels: prefill and decode step time, speedup scaling, nanosecond quantisation.

Per pass, the clock advances by ``modeled_ms_nb(prefill_time_nb(perf, t), speedup)`` and then by
``modeled_ms_nb(decode_time_nb(perf, kv, ctx, total), speedup * decode_speedup)`` (two additions).

Three timing models, selected by ``PerfTables.kind``:

* ``POLYNOMIAL`` (0), Dynamo's default (notes 6.1; aisimulate ``common/perf_model.rs``).
* ``INTERPOLATED`` (1), Dynamo's ``PerfModel::from_npz`` grid (notes 6.2, verified Q14): 1-D linear
  interpolation for prefill and bilinear interpolation for decode, both extrapolated linearly
  beyond the grid on every axis (ndarray-interp 0.5 ``Linear``/``Bilinear`` with
  ``extrapolate(true)``), evaluated in the same floating-point order as that crate.
* ``FIXED`` (2), Dynamo 1.6's ``timing_model: {type: fixed}`` (aisimulate ``FixedTimingModel``): a
  constant ``prefill_ms`` for a pass with prompt tokens and a constant ``decode_ms`` for a pass that
  decodes, with no 1 ms decode floor.

The kernels trust their tables: ``fastsim.perf`` validates them (strictly increasing axes, shapes,
finite values) exactly where Dynamo's loader would reject them. Times are milliseconds.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from fastsim.kernels.jit import inline, kernel_noalloc

__all__ = [
    "POLYNOMIAL",
    "INTERPOLATED",
    "FIXED",
    "PerfTables",
    "prefill_time_nb",
    "decode_time_nb",
    "scale_nb",
    "quantize_ms_nb",
    "modeled_ms_nb",
    "lower_index_nb",
    "interp1_nb",
    "interp2_nb",
]

POLYNOMIAL = 0
INTERPOLATED = 1
FIXED = 2

# Polynomial coefficients (ms), Dynamo 1.4.2's built-in model (notes 6.1, conformance C1).
PREFILL_A = 4.209989e-07  # per token^2
PREFILL_B = 1.518344e-02  # per token
PREFILL_C = 1.650142e01  # fixed cost of a prefill pass
DECODE_A = -25.74  # per utilisation^2
DECODE_B = 54.01  # per utilisation
DECODE_C = 5.74  # idle-cache decode step
DECODE_FLOOR_MS = 1.0  # "Token-emitting decode steps should not collapse onto the same timestamp"

_NS_PER_S = 1e9
_SPLIT = 134217729.0  # 2**27 + 1: Veltkamp splitter for float64
# Below this many seconds, ``secs + nanos / 1e9`` (and that times 1000, divided by 1000) is within
# 10^-3 ns of the exact whole nanosecond count (a few roundings of 2^-53 relative each), so
# ``Duration::from_secs_f64`` of it gives the same (secs, nanos) back: a round trip to change nothing
_ROUND_TRIP_S = 1024.0


class PerfTables(NamedTuple):
    """The timing model as plain arrays (a numba-friendly NamedTuple).

    ``kind`` is ``POLYNOMIAL`` (0), ``INTERPOLATED`` (1) or ``FIXED`` (2). The fixed model keeps its
    two constants as ``prefill_y[0]`` and ``decode_z[0, 0]`` (the other arrays empty). For the grid model, ``prefill_x``
    (total new prompt tokens of a pass) and ``prefill_y`` (ms) are 1-D of equal length;
    ``decode_x`` (active KV tokens) and ``decode_y`` (context length) are the axes of ``decode_z``
    (ms), shape ``(len(decode_x), len(decode_y))``, ``decode_z[i, j]`` at
    ``(decode_x[i], decode_y[j])``. All arrays are float64, C-contiguous; for the polynomial kind they
    are empty (shape ``(0,)`` and ``(0, 0)``). Build it with ``fastsim.perf``.
    """

    kind: int
    prefill_x: np.ndarray
    prefill_y: np.ndarray
    decode_x: np.ndarray
    decode_y: np.ndarray
    decode_z: np.ndarray

    def __repr__(self) -> str:  # the arrays are long; summarise them
        if self.kind == POLYNOMIAL:
            return "PerfTables(kind=polynomial)"
        if self.kind == FIXED:
            return f"PerfTables(kind=fixed, prefill {self.prefill_y[0]:g} ms, decode {self.decode_z[0, 0]:g} ms)"
        px, dx, dy = self.prefill_x, self.decode_x, self.decode_y
        return (
            f"PerfTables(kind=interpolated, prefill {px.shape[0]} points on [{px[0]:g}, {px[-1]:g}] "
            f"tokens, decode {dx.shape[0]}x{dy.shape[0]} grid on kv [{dx[0]:g}, {dx[-1]:g}] x "
            f"ctx [{dy[0]:g}, {dy[-1]:g}])"
        )


# --------------------------------------------------------------------------------------------
# Interpolation (ndarray-interp 0.5 semantics)


@kernel_noalloc
def lower_index_nb(xs, x):
    """Left index ``i`` of the interpolation cell for ``x`` on the strictly increasing axis ``xs``.

    As ndarray-interp's ``get_lower_index``: ``0`` when ``x <= xs[0]``, ``len - 2`` when
    ``x >= xs[-1]`` (so the edge cell is extrapolated), else the ``i`` with
    ``xs[i] <= x < xs[i + 1]`` (a query exactly on a knot starts the cell to its right).
    """
    n = xs.shape[0]
    if x <= xs[0]:
        return 0
    if x >= xs[n - 1]:
        return n - 2
    lo = 0  # invariant: xs[lo] <= x < xs[hi]
    hi = n - 1
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if xs[mid] <= x:
            lo = mid
        else:
            hi = mid
    return lo


@kernel_noalloc
def _line_nb(x1, y1, x2, y2, x):
    # ndarray-interp Linear::calc_frac, same operation order: m * (x - x1) + y1.
    m = (y2 - y1) / (x2 - x1)
    return m * (x - x1) + y1


@kernel_noalloc
def interp1_nb(xs, ys, x):
    """Piecewise-linear ``ys(x)`` on the strictly increasing ``xs``, extrapolated from the end cells."""
    i = lower_index_nb(xs, x)
    return _line_nb(xs[i], ys[i], xs[i + 1], ys[i + 1], x)


@kernel_noalloc
def interp2_nb(xs, ys, zs, x, y):
    """Bilinear ``zs(x, y)`` (``zs[i, j]`` at ``(xs[i], ys[j])``), extrapolated from the edge cells.

    Interpolates along x first at ``ys[j]`` and ``ys[j + 1]``, then along y, as ndarray-interp's
    ``Bilinear`` does (the order fixes the last bits).
    """
    i = lower_index_nb(xs, x)
    j = lower_index_nb(ys, y)
    x1 = xs[i]
    x2 = xs[i + 1]
    z1 = _line_nb(x1, zs[i, j], x2, zs[i + 1, j], x)
    z2 = _line_nb(x1, zs[i, j + 1], x2, zs[i + 1, j + 1], x)
    return _line_nb(ys[j], z1, ys[j + 1], z2, y)


# --------------------------------------------------------------------------------------------
# Step times


@kernel_noalloc
def prefill_time_nb(perf, t):
    """Raw prefill time (ms, before speedup) of a pass computing ``t`` new prompt tokens in total.

    ``t`` = batch * (mean isl - mean prefix) with integer means (verified Q2). 0 when ``t <= 0``.
    Polynomial: ``max(a*(t*t) + b*t + c, 0)``; grid: ``max(interp1(t), 0)`` (Rust ``f64::max``,
    so a NaN would give 0).
    """
    if t <= 0:
        return 0.0
    tf = float(t)
    if perf.kind == POLYNOMIAL:
        # Grouping a*(t*t) + b*t + c (powi) is the one that matches Dynamo to the last bit.
        v = PREFILL_A * (tf * tf) + PREFILL_B * tf + PREFILL_C
    elif perf.kind == FIXED:
        v = perf.prefill_y[0]
    else:
        v = interp1_nb(perf.prefill_x, perf.prefill_y, tf)
    if v > 0.0:
        return v
    return 0.0


@kernel_noalloc
def decode_time_nb(perf, active_kv_tokens, ctx, total_kv_tokens):
    """Raw decode step time (ms, before speedup), including Dynamo's 1 ms floor.

    ``active_kv_tokens`` = physical active blocks x block size on the rank (verified Q1/Q14),
    ``ctx`` = integer mean context length of the decoding batch (grid only), ``total_kv_tokens`` =
    rank capacity in tokens (polynomial only). The caller handles an empty batch (decode time 0).
    Polynomial: ``u = min(active/total, 1)`` (1 if total <= 0), ``-25.74*(u*u) + 54.01*u + 5.74``;
    grid: ``interp2(active, ctx)``; then ``max(., 1.0)``. Fixed: ``decode_ms``, not floored.
    """
    if perf.kind == POLYNOMIAL:
        return polynomial_decode_ms(float(active_kv_tokens), float(total_kv_tokens))
    if perf.kind == FIXED:
        return perf.decode_z[0, 0]  # no floor: aisimulate's fixed model returns decode_ms as is
    v = interp2_nb(perf.decode_x, perf.decode_y, perf.decode_z, float(active_kv_tokens), float(ctx))
    if v > DECODE_FLOOR_MS:
        return v
    return DECODE_FLOOR_MS


@inline
def polynomial_decode_ms(active_kv_tokens, total_kv_tokens):
    """``decode_time_nb`` of the polynomial model (floats in, the 1 ms floor applied)."""
    if total_kv_tokens > 0.0:
        u = active_kv_tokens / total_kv_tokens
        if u > 1.0:
            u = 1.0
    else:
        u = 1.0
    v = DECODE_A * (u * u) + DECODE_B * u + DECODE_C
    if v > DECODE_FLOOR_MS:
        return v
    return DECODE_FLOOR_MS


@kernel_noalloc
def scale_nb(raw, s):
    """Speedup scaling in plain floats: ``raw / s`` when ``s > 0`` and ``raw > 0``, else ``raw``.

    Notes 6.5 / C2. To advance the clock exactly as Dynamo does, use ``modeled_ms_nb(raw, s)``:
    Dynamo scales the already rounded duration, so ``quantize_ms_nb(scale_nb(raw, s))`` is 1 ns off
    in some cases unless ``s`` is 0 or 1.
    """
    if s > 0.0 and raw > 0.0:
        return raw / s
    return raw


# --------------------------------------------------------------------------------------------
# Nanosecond quantisation (verified X1)


@kernel_noalloc
def _two_prod_nb(a, b):
    # Dekker's TwoProduct with Veltkamp splitting: p + e == a * b exactly (no FMA needed).
    p = a * b
    c = _SPLIT * a
    ah = c - (c - a)
    al = a - ah
    c = _SPLIT * b
    bh = c - (c - b)
    bl = b - bh
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


@kernel_noalloc
def _duration_nb(s):
    # Duration::from_secs_f64(s) for finite s > 0: (secs, nanos) as floats, nanos rounded to
    # nearest, ties to even, on the exact binary value of s (Rust's integer algorithm).
    secs = math.floor(s)
    frac = s - secs  # exact: s and floor(s) share the binade's grid
    p = frac * _NS_PER_S  # p + e == frac * 1e9 exactly (TwoProduct), p < 1e9
    n = math.floor(p)
    d = p - n  # exact; and d - 0.5 is a multiple of ulp(p) > |e|, so only d == 0.5 needs e
    if d > 0.5:
        n += 1.0
    elif d == 0.5:
        e = _two_prod_nb(frac, _NS_PER_S)[1]  # (worked out only here: a tie is rare)
        if e > 0.0:
            n += 1.0
        elif e == 0.0 and n % 2.0 == 1.0:  # exact tie: to even
            n += 1.0
    if n >= _NS_PER_S:  # rounded up to a whole second
        secs += 1.0
        n -= _NS_PER_S
    return secs, n


@kernel_noalloc
def quantize_ms_nb(ms):
    """Round a duration to whole nanoseconds exactly as Dynamo does, and return it in ms.

    Dynamo stores durations as ``Duration::from_secs_f64(ms / 1000)`` (round to nearest, ties to
    even, on the exact binary value of ``ms / 1000``) and reads them back as
    ``as_secs_f64() * 1000`` = ``(secs + nanos / 1e9) * 1000``. The fraction of a second times 1e9
    is formed error-free (TwoProduct), so the rounding decision is exact. ``ms <= 0`` gives 0
    (Dynamo never produces negative durations; Rust would panic). NaN stays NaN. Idempotent.
    """
    if ms != ms:
        return ms
    s = ms / 1000.0
    if not s > 0.0:
        return 0.0
    secs, n = _duration_nb(s)
    return (secs + n / _NS_PER_S) * 1000.0


@kernel_noalloc
def modeled_ms_nb(raw, s):
    """A raw step time (ms) as Dynamo's clock advances by it: quantised, scaled, quantised.

    Dynamo 1.4.2 (aisimulate ``timing.rs::modeled_duration_ms`` and the mocker's
    ``scale_decode_time`` / prefill counterpart) does
    ``d = Duration::from_secs_f64(raw / 1000)``; if ``s > 0`` and ``d > 0``:
    ``d = Duration::from_secs_f64(d.as_secs_f64() / s)``; then ``ms = d.as_secs_f64() * 1000``
    and stores ``Duration::from_secs_f64(ms / 1000)`` again. So the speedup divides an already
    rounded duration, in seconds: this differs by 1 ns from ``quantize_ms_nb(scale_nb(raw, s))``
    for about a quarter of random durations at ``s = 2`` (1/6 at 1.5; verified by experiment, see
    tests/data/perf/dynamo_probe.py). Prefill uses ``s = speedup_ratio``, decode
    ``s = speedup_ratio * decode_speedup_ratio``. C2: ``(12, 3) -> 4``, ``(12, 0) -> 12``,
    ``(0, 3) -> 0``. ``raw <= 0`` gives 0; NaN stays NaN.
    """
    if raw != raw:
        return raw
    x = raw / 1000.0
    if not x > 0.0:
        return 0.0
    secs, n = _duration_nb(x)
    if x < _ROUND_TRIP_S:
        # A whole number of nanoseconds below _ROUND_TRIP_S read as seconds and rounded again
        # comes back unchanged: dividing by a speedup of 1 and the final quantisation are skipped
        if s > 0.0 and s != 1.0 and (secs > 0.0 or n > 0.0):
            y = (secs + n / _NS_PER_S) / s
            if not y < _ROUND_TRIP_S:
                return _modeled_ms_rounds(raw, s)
            secs, n = _duration_nb(y)
        return (secs + n / _NS_PER_S) * 1000.0
    return _modeled_ms_rounds(raw, s)


@inline
def unit_modeled_ms(raw):
    """``(modeled_ms_nb(raw, s), True)`` for a speedup ``s`` of 1 (or none) and
    ``0 < raw / 1000 < _ROUND_TRIP_S``, worked out without branches so that several can run side
    by side; ``(_, False)`` when ``raw / 1000`` is an exact half-nanosecond (``_duration_nb``'s
    tie, for which the caller asks ``modeled_ms_nb``)."""
    x = raw / 1000.0
    secs = math.floor(x)
    frac = x - secs
    p = frac * _NS_PER_S
    n = math.floor(p)
    d = p - n
    n = n + 1.0 if d > 0.5 else n
    whole = n >= _NS_PER_S
    secs = secs + 1.0 if whole else secs
    n = n - _NS_PER_S if whole else n
    return (secs + n / _NS_PER_S) * 1000.0, d != 0.5 and x > 0.0 and x < _ROUND_TRIP_S


@kernel_noalloc
def _modeled_ms_rounds(raw, s):
    """``modeled_ms_nb`` with every rounding done (``raw`` > 0): durations of any length."""
    secs, n = _duration_nb(raw / 1000.0)
    if s > 0.0 and (secs > 0.0 or n > 0.0):
        secs, n = _duration_nb((secs + n / _NS_PER_S) / s)
    ms = (secs + n / _NS_PER_S) * 1000.0
    return quantize_ms_nb(ms)  # the caller's Duration::from_secs_f64(ms / 1000), read back
