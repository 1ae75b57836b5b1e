"""How long a pass takes: the decode step of a rank's batch under each release's timing rules
(the prefill time is read in the pass itself, ``kernels/scheduler.py``)."""

import numpy as np

from fastsim.kernels.codes import TIMING_161
from fastsim.kernels.jit import inline, inner
from fastsim.kernels.perf import POLYNOMIAL, decode_time_nb, modeled_ms_nb, polynomial_decode_ms, unit_modeled_ms


@inline
def decode_ms_161(p, perf, total_len, n_ready):
    """A decode step's time under 1.6.1's rules, as the clock advances by it: ``n_ready``
    decoding requests of total length ``total_len`` (``step_ms`` without its memo)."""
    ctx = total_len // n_ready if perf.kind != POLYNOMIAL else 0
    raw = decode_time_nb(perf, float(total_len), float(ctx), float(p.cap * p.block_size))
    return modeled_ms_nb(raw, p.speedup * p.decode_speedup)

@inline
def decode4_ms_161(p, perf, total_len, n_ready):
    """``decode_ms_161`` of four passes in a row, whose batches' total lengths are ``total_len``
    plus 0, 1, 2 and 3 times ``n_ready``. With the polynomial model and no speedup the four are
    worked out side by side, without calls or branches, as their chains of divisions and
    roundings do not depend on each other; the same values."""
    s = p.speedup * p.decode_speedup
    if perf.kind == POLYNOMIAL and (s == 1.0 or not s > 0.0):
        tot = float(p.cap * p.block_size)
        d0, ok0 = unit_modeled_ms(polynomial_decode_ms(float(total_len), tot))
        d1, ok1 = unit_modeled_ms(polynomial_decode_ms(float(total_len + n_ready), tot))
        d2, ok2 = unit_modeled_ms(polynomial_decode_ms(float(total_len + 2 * n_ready), tot))
        d3, ok3 = unit_modeled_ms(polynomial_decode_ms(float(total_len + 3 * n_ready), tot))
        if ok0 and ok1 and ok2 and ok3:
            return d0, d1, d2, d3
    return (decode_ms_161(p, perf, total_len, n_ready), decode_ms_161(p, perf, total_len + n_ready, n_ready),
            decode_ms_161(p, perf, total_len + 2 * n_ready, n_ready),
            decode_ms_161(p, perf, total_len + 3 * n_ready, n_ready))

@inline
def step_ms(p, perf, rk, k, nact, total_len, n_ready):
    """Decode time of a pass of rank ``k`` with ``nact`` active blocks and ``n_ready`` requests
    of total length ``total_len``, through the rank's memo (its inputs often repeat). Under
    1.4.2's rules the active KV is the rank's ``nact`` blocks; under 1.6.1's it is ``total_len``
    tokens, the logical lengths of the decoding requests (Dynamo PR #12583)."""
    ctx = total_len // n_ready if perf.kind != POLYNOMIAL else 0
    if p.timing_rules == TIMING_161:
        if total_len == rk.dkey[k] and ctx == rk.dctx[k]:
            return rk.dms[k]
        decode_ms = decode_ms_161(p, perf, total_len, n_ready)
        rk.dkey[k] = total_len
        rk.dctx[k] = ctx
        rk.dms[k] = decode_ms
        return decode_ms
    if perf.kind == POLYNOMIAL and nact < rk.dtab.shape[0]:
        decode_ms = rk.dtab[nact]
        if decode_ms != decode_ms:
            decode_ms = _decode_ms(p, perf, nact, np.int64(0))
            rk.dtab[nact] = decode_ms
    elif nact == rk.dkey[k] and ctx == rk.dctx[k]:
        decode_ms = rk.dms[k]
    else:
        decode_ms = _decode_ms(p, perf, nact, ctx)
        rk.dkey[k] = nact
        rk.dctx[k] = ctx
        rk.dms[k] = decode_ms
    return decode_ms

@inner
def _decode_ms(p, perf, nact, ctx):
    """A decode step's time as the clock advances by it: ``nact`` active blocks on the rank, mean
    context ``ctx`` (grid timing only)."""
    raw = decode_time_nb(perf, float(nact * p.block_size), float(ctx), float(p.cap * p.block_size))
    return modeled_ms_nb(raw, p.speedup * p.decode_speedup)
