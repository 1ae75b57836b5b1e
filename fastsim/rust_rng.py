"""Bit-exact ports of the Rust ``rand`` pieces Dynamo's synthetic workload generator uses.

Dynamo 1.4.2's ``Trace::synthetic`` (``lib/mocker/src/loadgen/trace.rs``) draws from Rust
``rand::rngs::StdRng::seed_from_u64``: Poisson arrivals from ``StdRng(arrival_seed)`` (the CLI's
``--arrival-seed``, unmixed, first gap for session 1), prefix groups from a separate ``StdRng(42)``
(one ``random_range(0..G)`` per session, whatever the arrival seed). Both were established by
experiment on the release (``tests/test_rust_rng.py``). This module reproduces those streams:

* :func:`seed_from_u64`: ``rand_core::SeedableRng::seed_from_u64``, which fills the 32-byte seed
  with a PCG32 stream (``state = state * MUL + INC`` first, then the XSH-RR output
  ``(((state >> 18) ^ state) >> 27) as u32`` rotated right by ``state >> 59``), one little-endian
  u32 per 4-byte chunk.
* :class:`StdRng`: ``StdRng`` = ``rand_chacha::ChaCha12Rng`` (rand 0.8 / 0.9): the ChaCha block
  function with 12 rounds, key = the 32-byte seed (8 LE words), 64-bit block counter in state
  words 12-13, stream (nonce) 0 in words 14-15. rand_chacha produces 4 blocks per refill, in
  block order, so the output is simply the keystream words in order; ``next_u32`` reads one word,
  ``next_u64`` reads two (low word first, also across a refill boundary, as ``BlockRng`` does).
* :meth:`StdRng.random_f64`: ``rng.random::<f64>()`` (``StandardUniform``), ``(next_u64 >> 11) * 2^-53``.
* :meth:`StdRng.random_range`: ``rng.random_range(0..n)`` for ``usize`` (rand 0.9: ``UniformUsize``
  samples as u32 when the range fits in u32, with Canon's widening-multiply method).
* :func:`poisson_gaps_ms`: Dynamo's ``sample_exponential_ms``,
  ``-mean * ln((1 - random::<f64>()).clamp(f64::MIN_POSITIVE, 1))``.

The ChaCha core is vectorised with numpy over blocks (one million u64 draws take a few ms).
Known-answer tests live in ``tests/test_rust_rng.py``.
"""

from __future__ import annotations

import numpy as np

from fastsim.kernels.rng_draws import canon_u32_nb, exp_arrivals_nb, exp_gaps_nb

__all__ = [
    "seed_from_u64",
    "chacha_blocks",
    "StdRng",
    "poisson_gaps_ms",
    "poisson_arrivals_ms",
    "random_range_u32_array",
]

_MASK64 = (1 << 64) - 1
_PCG_MUL = 6364136223846793005
_PCG_INC = 11634580027462260723
_SIGMA = (0x61707865, 0x3320646E, 0x79622D32, 0x6B206574)  # "expand 32-byte k"
_F64_MIN_POSITIVE = 2.2250738585072014e-308
_SCALE_53 = 1.0 / (1 << 53)


def seed_from_u64(state: int) -> np.ndarray:
    """``SeedableRng::seed_from_u64(state)`` for a 32-byte seed, as 8 little-endian u32 key words."""
    state = int(state) & _MASK64
    words = []
    for _ in range(8):
        state = (state * _PCG_MUL + _PCG_INC) & _MASK64
        xorshifted = (((state >> 18) ^ state) >> 27) & 0xFFFFFFFF
        rot = state >> 59
        words.append(((xorshifted >> rot) | (xorshifted << ((32 - rot) & 31))) & 0xFFFFFFFF)
    return np.array(words, dtype=np.uint32)


def _rotl(x: np.ndarray, n: int) -> np.ndarray:
    return (x << np.uint32(n)) | (x >> np.uint32(32 - n))


def chacha_blocks(key: np.ndarray, start_block: int, n_blocks: int, rounds: int = 12, stream: int = 0) -> np.ndarray:
    """ChaCha keystream blocks ``start_block .. start_block + n_blocks`` as uint32[n_blocks, 16].

    ``key`` is 8 u32 words; the block counter is 64-bit (words 12-13) and ``stream`` the 64-bit
    nonce (words 14-15), as in rand_chacha. ``rounds`` = 12 for StdRng, 20 for the published
    ChaCha20 test vectors.
    """
    key = np.asarray(key, dtype=np.uint32)
    ctr = (np.uint64(start_block) + np.arange(n_blocks, dtype=np.uint64)) if n_blocks else np.zeros(0, np.uint64)
    init = np.empty((16, n_blocks), dtype=np.uint32)
    for i in range(4):
        init[i] = _SIGMA[i]
    for i in range(8):
        init[4 + i] = key[i]
    init[12] = (ctr & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    init[13] = (ctr >> np.uint64(32)).astype(np.uint32)
    init[14] = stream & 0xFFFFFFFF
    init[15] = (stream >> 32) & 0xFFFFFFFF
    x = [init[i].copy() for i in range(16)]

    def qr(a, b, c, d):
        x[a] += x[b]; x[d] ^= x[a]; x[d] = _rotl(x[d], 16)
        x[c] += x[d]; x[b] ^= x[c]; x[b] = _rotl(x[b], 12)
        x[a] += x[b]; x[d] ^= x[a]; x[d] = _rotl(x[d], 8)
        x[c] += x[d]; x[b] ^= x[c]; x[b] = _rotl(x[b], 7)

    with np.errstate(over="ignore"):
        for _ in range(rounds // 2):
            qr(0, 4, 8, 12); qr(1, 5, 9, 13); qr(2, 6, 10, 14); qr(3, 7, 11, 15)
            qr(0, 5, 10, 15); qr(1, 6, 11, 12); qr(2, 7, 8, 13); qr(3, 4, 9, 14)
        out = np.empty((n_blocks, 16), dtype=np.uint32)
        for i in range(16):
            out[:, i] = x[i] + init[i]
    return out


class StdRng:
    """Rust ``rand::rngs::StdRng`` (ChaCha12, stream 0) as a word stream.

    ``StdRng(seed_u64)`` is ``StdRng::seed_from_u64(seed_u64)``; ``StdRng.from_seed(bytes32)`` is
    ``StdRng::from_seed``. ``rounds`` may be changed (20 = ``ChaCha20Rng``) for test vectors.
    """

    _REFILL_BLOCKS = 4  # rand_chacha's BUF_BLOCKS; only affects how much is generated at a time

    def __init__(self, seed: int = 0, *, key: np.ndarray | None = None, rounds: int = 12):
        self.key = seed_from_u64(seed) if key is None else np.asarray(key, dtype=np.uint32)
        self.rounds = rounds
        self._next_block = 0
        self._buf = np.zeros(0, dtype=np.uint32)
        self._pos = 0

    @classmethod
    def from_seed(cls, seed: bytes, rounds: int = 12) -> "StdRng":
        if len(seed) != 32:
            raise ValueError("seed must be 32 bytes")
        return cls(key=np.frombuffer(bytes(seed), dtype="<u4").astype(np.uint32), rounds=rounds)

    # -- raw words -------------------------------------------------------------------------
    def _words(self, n: int) -> np.ndarray:
        """The next ``n`` keystream words (advances the stream)."""
        avail = self._buf.shape[0] - self._pos
        if avail < n:
            need = n - avail
            nb = -(-need // 16)
            nb = -(-nb // self._REFILL_BLOCKS) * self._REFILL_BLOCKS
            fresh = chacha_blocks(self.key, self._next_block, nb, self.rounds).reshape(-1)
            self._next_block += nb
            self._buf = np.concatenate([self._buf[self._pos:], fresh])
            self._pos = 0
        w = self._buf[self._pos:self._pos + n]
        self._pos += n
        return w

    @property
    def word_pos(self) -> int:
        """Words consumed so far (rand_chacha's ``get_word_pos``)."""
        return self._next_block * 16 - (self._buf.shape[0] - self._pos)

    def clone(self) -> "StdRng":
        c = StdRng.__new__(StdRng)
        c.key, c.rounds, c._next_block = self.key, self.rounds, self._next_block
        c._buf, c._pos = self._buf, self._pos
        return c

    def next_u32(self) -> int:
        return int(self._words(1)[0])

    def next_u64(self) -> int:
        w = self._words(2)
        return int(w[0]) | (int(w[1]) << 32)

    def next_u64_array(self, n: int) -> np.ndarray:
        """``n`` successive ``next_u64()`` values as uint64[n]."""
        w = self._words(2 * n).astype(np.uint64).reshape(n, 2) if n else np.zeros((0, 2), np.uint64)
        return w[:, 0] | (w[:, 1] << np.uint64(32))

    def fill_bytes(self, n: int) -> bytes:
        """``fill_bytes`` of ``n`` bytes (whole words are consumed, as ``BlockRng`` does)."""
        return self._words(-(-n // 4)).astype("<u4").tobytes()[:n]

    # -- distributions ---------------------------------------------------------------------
    def random_f64(self) -> float:
        """``rng.random::<f64>()``: ``(next_u64 >> 11) * 2^-53`` in [0, 1)."""
        return (self.next_u64() >> 11) * _SCALE_53

    def random_f64_array(self, n: int) -> np.ndarray:
        return (self.next_u64_array(n) >> np.uint64(11)).astype(np.float64) * _SCALE_53

    def random_range(self, n: int) -> int:
        """``rng.random_range(0..n)`` for ``usize`` with rand 0.9 (``UniformUsize``): a range that
        fits in u32 is sampled as u32 with Canon's method (one u32 widening multiply, a second
        draw only when the low half of the product is in the biased zone)."""
        if n <= 0:
            raise ValueError("empty range")
        if n <= 0xFFFFFFFF:
            prod = self.next_u32() * n
            result, lo = prod >> 32, prod & 0xFFFFFFFF
            if lo > ((-n) & 0xFFFFFFFF):
                new_hi = (self.next_u32() * n) >> 32
                result += (lo + new_hi) > 0xFFFFFFFF
            return int(result)
        prod = self.next_u64() * n
        result, lo = prod >> 64, prod & _MASK64
        if lo > ((-n) & _MASK64):
            new_hi = (self.next_u64() * n) >> 64
            result += (lo + new_hi) > _MASK64
        return int(result)


def poisson_gaps_ms(rng: StdRng, mean_ms: float, n: int) -> np.ndarray:
    """``n`` of Dynamo's exponential gaps (``sample_exponential_ms``):
    ``-mean * ln((1 - random::<f64>()).clamp(f64::MIN_POSITIVE, 1.0))``, one ``next_u64`` each."""
    if mean_ms == 0.0:
        return np.zeros(n, dtype=np.float64)
    out = np.empty(n, dtype=np.float64)
    exp_gaps_nb(rng.next_u64_array(n), float(mean_ms), out)
    return out


def poisson_arrivals_ms(seed: int, mean_ms: float, count: int) -> np.ndarray:
    """Dynamo's Poisson first-turn arrivals: ``[0, g1, g1 + g2, ...]`` (``count`` values, summed
    one gap at a time) with the gaps of :func:`poisson_gaps_ms` drawn from
    ``StdRng::seed_from_u64(seed)``. Verified bit for bit against Dynamo 1.4.2 (the CLI's
    ``--arrival-seed`` is the seed, unmixed)."""
    out = np.zeros(count, dtype=np.float64)
    if count > 1 and mean_ms != 0.0:
        exp_arrivals_nb(StdRng(seed).next_u64_array(count - 1), float(mean_ms), out)
    return out


def random_range_u32_array(rng: StdRng, n: int, count: int) -> np.ndarray:
    """``count`` successive ``rng.random_range(0..n)`` (usize, 1 <= n < 2^32, rand 0.9) as
    int64[count]; same draws and stream position as calling :meth:`StdRng.random_range`."""
    if not 1 <= n <= 0xFFFFFFFF:
        raise ValueError("n must be in [1, 2^32 - 1]")
    out = np.empty(count, dtype=np.int64)
    if count == 0:
        return out
    probe = rng.clone()
    extra = 64
    while True:
        words = probe._words(count + extra)
        used = canon_u32_nb(words, n, out)
        if used >= 0:
            rng._words(used)  # advance the real generator by what was consumed
            return out
        probe = rng.clone()
        extra *= 4
