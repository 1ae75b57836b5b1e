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

from fastsim.kernels.jit import inner
from fastsim.rust_rng import seed_from_u64

ALWAYS_TRUE = np.uint64(0xFFFFFFFFFFFFFFFF)  # rand's Bernoulli marker for p == 1 (no draw)
_BUF_WORDS = 64  # rand_chacha refills 4 blocks of 16 words at a time
# a rank's generator is one row of uint32 words: key (8), next block (2, low first), read
# position (1), a spare word, the 64 stream words, then 32 words of block scratch (one array
# for every rank: the pass's calls pass its tables field by field, so fewer fields cost less)
_KEY, _CTR, _POS, _BUF, _SCRATCH = 0, 8, 10, 12, 12 + _BUF_WORDS
ROW = _SCRATCH + 32
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


@inner
def _rotl(x, n):
    return ((x << np.uint32(n)) | (x >> np.uint32(32 - n))) & np.uint32(0xFFFFFFFF)


@inner
def _refill(st, k):
    """The next 4 ChaCha12 blocks of rank ``k``'s stream into its buffer."""
    x = st[k, _SCRATCH:_SCRATCH + 16]
    s = st[k, _SCRATCH + 16:_SCRATCH + 32]
    c = np.uint64(st[k, _CTR]) | (np.uint64(st[k, _CTR + 1]) << np.uint64(32))
    for b in range(4):
        s[0] = _SIGMA[0]
        s[1] = _SIGMA[1]
        s[2] = _SIGMA[2]
        s[3] = _SIGMA[3]
        for i in range(8):
            s[4 + i] = st[k, _KEY + i]
        s[12] = np.uint32(c & np.uint64(0xFFFFFFFF))
        s[13] = np.uint32(c >> np.uint64(32))
        s[14] = 0
        s[15] = 0
        for i in range(16):
            x[i] = s[i]
        for _ in range(6):  # 12 rounds: column then diagonal quarter-rounds
            for a, bb, cc, d in ((0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15),
                                 (0, 5, 10, 15), (1, 6, 11, 12), (2, 7, 8, 13), (3, 4, 9, 14)):
                x[a] += x[bb]
                x[d] = _rotl(x[d] ^ x[a], 16)
                x[cc] += x[d]
                x[bb] = _rotl(x[bb] ^ x[cc], 12)
                x[a] += x[bb]
                x[d] = _rotl(x[d] ^ x[a], 8)
                x[cc] += x[d]
                x[bb] = _rotl(x[bb] ^ x[cc], 7)
        for i in range(16):
            st[k, _BUF + b * 16 + i] = x[i] + s[i]
        c += np.uint64(1)
    st[k, _CTR] = np.uint32(c & np.uint64(0xFFFFFFFF))
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
