"""Compiled draws on a stream of Rust ``rand`` words (``fastsim/rust_rng.py`` makes the stream):
exponential arrival gaps and Canon's bounded integers, bit for bit as Dynamo draws them."""

import math

import numpy as np

from fastsim.kernels.jit import compiled


@compiled(_nrt=False, error_model="python", no_cfunc_wrapper=False)
def exp_arrivals_nb(x, mean_ms, out):  # pragma: no cover - numba
    # Rust's f64::ln is libm's log; numba's math.log is the same call (numpy's SIMD log is not:
    # it differs in the last bit for ~0.3% of inputs).
    t = 0.0
    out[0] = 0.0
    for i in range(x.shape[0]):
        u = 1.0 - float(x[i] >> np.uint64(11)) * 1.1102230246251565e-16
        if u < 2.2250738585072014e-308:
            u = 2.2250738585072014e-308
        elif u > 1.0:
            u = 1.0
        t += -mean_ms * math.log(u)
        out[i + 1] = t

@compiled(_nrt=False, error_model="python", no_cfunc_wrapper=False)
def exp_gaps_nb(x, mean_ms, out):  # pragma: no cover - numba
    for i in range(x.shape[0]):
        u = 1.0 - float(x[i] >> np.uint64(11)) * 1.1102230246251565e-16
        if u < 2.2250738585072014e-308:
            u = 2.2250738585072014e-308
        elif u > 1.0:
            u = 1.0
        out[i] = -mean_ms * math.log(u)

@compiled(_nrt=False, error_model="python", no_cfunc_wrapper=False)
def canon_u32_nb(words, n, out):  # pragma: no cover - numba
    # rand 0.9 UniformInt<u32>::sample_single_inclusive (Canon's method); returns words used or -1
    n64 = np.uint64(n)
    neg = np.uint64((np.uint64(1) << np.uint64(32)) - n64)  # (-n) mod 2^32 for 1 <= n <= 2^32 - 1
    m32 = np.uint64(0xFFFFFFFF)
    pos = 0
    nw = words.shape[0]
    for i in range(out.shape[0]):
        if pos >= nw:
            return -1
        prod = np.uint64(words[pos]) * n64
        pos += 1
        result = prod >> np.uint64(32)
        lo = prod & m32
        if lo > neg:
            if pos >= nw:
                return -1
            new_hi = (np.uint64(words[pos]) * n64) >> np.uint64(32)
            pos += 1
            if lo + new_hi > m32:
                result += np.uint64(1)
        out[i] = np.int64(result)
    return pos
