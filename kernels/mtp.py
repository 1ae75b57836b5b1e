"""Speculative decoding (MTP): how many tokens a decode step of one request yields.

Dynamo 1.6.1 (aisimulate-core 0.13.0, ``engine/common/speculative.rs``) gives each scheduler (one
per DP rank) a sampler: ``StdRng::seed_from_u64(aic_mtp_seed + worker)`` and the conditional
acceptance rates of the ``aic_nextn`` draft positions. A step yields the base token, then one more
for each draft position accepted in turn, stopping at the first rejection; each position is one
``rng.random_bool(rate)``. docs/decisions/0340 has the rules and the experiments behind them.

``random_bool(p)`` is rand's ``Bernoulli``: ``p == 1`` is always true and draws nothing; any other
``p`` compares one ``next_u64()`` with ``p_int = (p * 2^64) as u64`` (true when below it; ``p == 0``
still draws). ``StdRng`` is ChaCha12 (``fastsim/rust_rng.py`` documents the stream); a rank's
generator here is its 8 key words, its next block counter and a buffer of 4 blocks (64 words), read
two words at a time (low word first), as rand's ``BlockRng`` does. The stream is generated inside
the compiled pass, a buffer at a time, so a run never holds more than 256 bytes per rank.
"""

import numpy as np

from fastsim.kernels.jit import inline, inner
from fastsim.rust_rng import seed_from_u64

ALWAYS_TRUE = np.uint64(0xFFFFFFFFFFFFFFFF)  # rand's Bernoulli marker for p == 1 (no draw)
_BUF_WORDS = 64  # rand_chacha refills 4 blocks of 16 words at a time
# a rank's generator is one row of uint32 words: key (8), next block (2, low first), read
# position (1), a spare word, then the 64 stream words (one array for every rank: the pass's
# calls pass its tables field by field, so fewer fields cost less)
_KEY, _CTR, _POS, _BUF = 0, 8, 10, 12
ROW = _BUF + _BUF_WORDS
_SIGMA = (0x61707865, 0x3320646E, 0x79622D32, 0x6B206574)


def accept_thresholds(rates) -> np.ndarray:
    """rand's ``Bernoulli::new(p).p_int`` of each rate (``ALWAYS_TRUE`` for 1.0), as uint64."""
    out = np.empty(len(rates), dtype=np.uint64)
    for i, p in enumerate(rates):
        out[i] = ALWAYS_TRUE if p == 1.0 else np.uint64(int(p * 18446744073709551616.0))
    return out


def new_streams(seeds) -> np.ndarray:
    """The generators ``StdRng::seed_from_u64(seeds[i])`` of ranks ``i``, buffers empty, as a
    uint32[len(seeds), ROW] table."""
    st = np.zeros((len(seeds), ROW), dtype=np.uint32)
    for i, s in enumerate(seeds):
        st[i, _KEY:_KEY + 8] = seed_from_u64(int(s) & 0xFFFFFFFFFFFFFFFF)
        st[i, _POS] = _BUF_WORDS
    return st


_M32 = np.uint64(0xFFFFFFFF)


@inline
def _rotl(x, n):
    return ((x << np.uint64(n)) | (x >> np.uint64(32 - n))) & _M32


@inline
def _qr(a, b, c, d):
    """One ChaCha quarter-round on four 32-bit words held in uint64 registers."""
    a = (a + b) & _M32
    d = _rotl(d ^ a, 16)
    c = (c + d) & _M32
    b = _rotl(b ^ c, 12)
    a = (a + b) & _M32
    d = _rotl(d ^ a, 8)
    c = (c + d) & _M32
    b = _rotl(b ^ c, 7)
    return a, b, c, d


@inner
def _refill(st, k):
    """The next 4 ChaCha12 blocks of rank ``k``'s stream into its buffer (the state in registers:
    this is most of a speculative pass's cost otherwise)."""
    c = np.uint64(st[k, _CTR]) | (np.uint64(st[k, _CTR + 1]) << np.uint64(32))
    k0, k1, k2, k3 = np.uint64(st[k, 0]), np.uint64(st[k, 1]), np.uint64(st[k, 2]), np.uint64(st[k, 3])
    k4, k5, k6, k7 = np.uint64(st[k, 4]), np.uint64(st[k, 5]), np.uint64(st[k, 6]), np.uint64(st[k, 7])
    s0, s1, s2, s3 = np.uint64(_SIGMA[0]), np.uint64(_SIGMA[1]), np.uint64(_SIGMA[2]), np.uint64(_SIGMA[3])
    for b in range(4):
        c0 = c & _M32
        c1 = c >> np.uint64(32)
        x0, x1, x2, x3 = s0, s1, s2, s3
        x4, x5, x6, x7 = k0, k1, k2, k3
        x8, x9, x10, x11 = k4, k5, k6, k7
        x12, x13, x14, x15 = c0, c1, np.uint64(0), np.uint64(0)
        for _ in range(6):  # 12 rounds: column then diagonal quarter-rounds
            x0, x4, x8, x12 = _qr(x0, x4, x8, x12)
            x1, x5, x9, x13 = _qr(x1, x5, x9, x13)
            x2, x6, x10, x14 = _qr(x2, x6, x10, x14)
            x3, x7, x11, x15 = _qr(x3, x7, x11, x15)
            x0, x5, x10, x15 = _qr(x0, x5, x10, x15)
            x1, x6, x11, x12 = _qr(x1, x6, x11, x12)
            x2, x7, x8, x13 = _qr(x2, x7, x8, x13)
            x3, x4, x9, x14 = _qr(x3, x4, x9, x14)
        o = _BUF + b * 16
        st[k, o + 0] = np.uint32((x0 + s0) & _M32)
        st[k, o + 1] = np.uint32((x1 + s1) & _M32)
        st[k, o + 2] = np.uint32((x2 + s2) & _M32)
        st[k, o + 3] = np.uint32((x3 + s3) & _M32)
        st[k, o + 4] = np.uint32((x4 + k0) & _M32)
        st[k, o + 5] = np.uint32((x5 + k1) & _M32)
        st[k, o + 6] = np.uint32((x6 + k2) & _M32)
        st[k, o + 7] = np.uint32((x7 + k3) & _M32)
        st[k, o + 8] = np.uint32((x8 + k4) & _M32)
        st[k, o + 9] = np.uint32((x9 + k5) & _M32)
        st[k, o + 10] = np.uint32((x10 + k6) & _M32)
        st[k, o + 11] = np.uint32((x11 + k7) & _M32)
        st[k, o + 12] = np.uint32((x12 + c0) & _M32)
        st[k, o + 13] = np.uint32((x13 + c1) & _M32)
        st[k, o + 14] = np.uint32(x14 & _M32)
        st[k, o + 15] = np.uint32(x15 & _M32)
        c += np.uint64(1)
    st[k, _CTR] = np.uint32(c & _M32)
    st[k, _CTR + 1] = np.uint32(c >> np.uint64(32))


@inner
def next_u64_nb(st, k):
    """Rank ``k``'s ``next_u64()`` (only u64 draws are made: the position stays even)."""
    i = np.int64(st[k, _POS])
    if i >= _BUF_WORDS:
        _refill(st, k)
        i = 0
    st[k, _POS] = i + 2
    return np.uint64(st[k, _BUF + i]) | (np.uint64(st[k, _BUF + i + 1]) << np.uint64(32))


@inner
def sample_burst_nb(thr, st, k):
    """Tokens one decode step of a request on rank ``k`` yields: 1 + the draft positions accepted
    before the first rejection (before clipping to what the request may still generate)."""
    n = 1
    for j in range(thr.shape[0]):
        t = thr[j]
        if t != ALWAYS_TRUE and not next_u64_nb(st, k) < t:
            break
        n += 1
    return n
