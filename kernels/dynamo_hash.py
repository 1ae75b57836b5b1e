"""Dynamo's own block hash values: XXH3-64 over a block's token ids, chained into sequence hashes.

fastsim keys blocks by the equality of Dynamo's hashes (``kernels/blocks.py``), which is all the
GPU pool and the router need. The host tier (G2) needs the values too: Dynamo 1.6.1 orders the
blocks of one completed transfer, which share one LRU recency, by their sequence hash
(decision 0354). The facts used here:

* a block's *local* hash is XXH3-64 with seed 1337 of its token ids as little-endian u32 bytes;
  its *sequence* hash is the local hash for the first block, else XXH3-64 with seed 1337 of the
  16 bytes ``parent sequence hash (u64 LE) || local hash (u64 LE)`` (aisimulate-core's
  ``engine/common/hashing.rs``, as in Dynamo's mocker);
* a trace row's tokens are, for each of its hash ids, the id's number in order of first appearance
  in the trace (file order, from 0), repeated ``trace_block_size`` times and truncated to the
  prompt length. That number, not the id itself (notes 1.4 say the id's low 32 bits, as in 1.4.2),
  was settled by probes on Dynamo 1.6.1 (decision 0354); the two agree on traces whose ids are
  numbered as they first appear, as the Mooncake conversation trace's are;
* unique synthetic prompts: token ``pos`` of request ``row`` is a splitmix64 mix of
  ``(row << 32) ^ pos`` (notes 2.2).

XXH3-64 follows the published xxHash specification (XXH3, version 0.8): the paths for inputs of
4-8, 9-16, 17-128 and 129-240 bytes, and the striped long path with the secret derived from the
seed. Checked against the reference implementation (the Python ``xxhash`` package) on every
length from 4 to 2100 bytes and against Dynamo 1.6.1's ``compute_block_hash_for_seq``
(``tests/test_dynamo_hash.py``).
"""

import numpy as np

from fastsim.kernels.jit import inner, kernel

SEED = np.uint64(1337)

# the XXH3 default secret (192 bytes, "kSecret" of the specification)
_SECRET_HEX = (
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
    "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e"
)
K_SECRET = np.frombuffer(bytes.fromhex(_SECRET_HEX), dtype=np.uint8).copy()

_P32_1 = np.uint64(0x9E3779B1)
_P32_2 = np.uint64(0x85EBCA77)
_P32_3 = np.uint64(0xC2B2AE3D)
_P64_1 = np.uint64(0x9E3779B185EBCA87)
_P64_2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P64_3 = np.uint64(0x165667B19E3779F9)
_P64_4 = np.uint64(0x85EBCA77C2B2AE63)
_P64_5 = np.uint64(0x27D4EB2F165667C5)
_MX1 = np.uint64(0x165667919E3779F9)
_MX2 = np.uint64(0x9FB21C651E98DF25)
_M32 = np.uint64(0xFFFFFFFF)


@inner
def _r64(b, i):
    """Little-endian u64 at byte ``i`` of the uint8 array ``b``."""
    v = np.uint64(0)
    for j in range(8):
        v |= np.uint64(b[i + j]) << np.uint64(8 * j)
    return v


@inner
def _r32(b, i):
    v = np.uint64(0)
    for j in range(4):
        v |= np.uint64(b[i + j]) << np.uint64(8 * j)
    return v


@inner
def _rotl(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@inner
def _mul_fold(a, b):
    """The 128-bit product of ``a`` and ``b``, its low and high halves xored."""
    a_lo = a & _M32
    a_hi = a >> np.uint64(32)
    b_lo = b & _M32
    b_hi = b >> np.uint64(32)
    lo_lo = a_lo * b_lo
    hi_lo = a_hi * b_lo
    lo_hi = a_lo * b_hi
    hi_hi = a_hi * b_hi
    cross = (lo_lo >> np.uint64(32)) + (hi_lo & _M32) + lo_hi
    upper = (hi_lo >> np.uint64(32)) + (cross >> np.uint64(32)) + hi_hi
    lower = (cross << np.uint64(32)) | (lo_lo & _M32)
    return lower ^ upper


@inner
def _avalanche(h):
    h ^= h >> np.uint64(37)
    h *= _MX1
    return h ^ (h >> np.uint64(32))


@inner
def _mix16(b, i, s, si, seed):
    lo = _r64(b, i)
    hi = _r64(b, i + 8)
    return _mul_fold(lo ^ (_r64(s, si) + seed), hi ^ (_r64(s, si + 8) - seed))


@inner
def _swap32(x):
    return (((x & np.uint64(0xFF)) << np.uint64(24)) | ((x & np.uint64(0xFF00)) << np.uint64(8))
            | ((x >> np.uint64(8)) & np.uint64(0xFF00)) | ((x >> np.uint64(24)) & np.uint64(0xFF)))


@inner
def _swap64(x):
    return (_swap32(x & _M32) << np.uint64(32)) | _swap32(x >> np.uint64(32))


@inner
def _accumulate_512(acc, b, i, s, si):
    for j in range(8):
        v = _r64(b, i + 8 * j)
        key = v ^ _r64(s, si + 8 * j)
        acc[j ^ 1] += v
        acc[j] += (key & _M32) * (key >> np.uint64(32))


@inner
def _long(b, n, seed, ks, s, acc):
    # ``s``: the secret derived from the seed
    for i in range(12):
        lo = _r64(ks, 16 * i) + seed
        hi = _r64(ks, 16 * i + 8) - seed
        for j in range(8):
            s[16 * i + j] = np.uint8((lo >> np.uint64(8 * j)) & np.uint64(0xFF))
            s[16 * i + 8 + j] = np.uint8((hi >> np.uint64(8 * j)) & np.uint64(0xFF))
    acc[0] = _P32_3
    acc[1] = _P64_1
    acc[2] = _P64_2
    acc[3] = _P64_3
    acc[4] = _P64_4
    acc[5] = _P32_2
    acc[6] = _P64_5
    acc[7] = _P32_1
    stripes = (192 - 64) // 8
    block_len = 64 * stripes
    nb = (n - 1) // block_len
    for blk in range(nb):
        for st in range(stripes):
            _accumulate_512(acc, b, blk * block_len + st * 64, s, st * 8)
        for j in range(8):  # scramble
            a = acc[j]
            a ^= a >> np.uint64(47)
            a ^= _r64(s, 192 - 64 + 8 * j)
            acc[j] = a * _P32_1
    last = ((n - 1) - block_len * nb) // 64
    for st in range(last):
        _accumulate_512(acc, b, nb * block_len + st * 64, s, st * 8)
    _accumulate_512(acc, b, n - 64, s, 192 - 64 - 7)
    h = np.uint64(n) * _P64_1
    for j in range(4):
        h += _mul_fold(acc[2 * j] ^ _r64(s, 11 + 16 * j), acc[2 * j + 1] ^ _r64(s, 11 + 16 * j + 8))
    return _avalanche(h)


@inner
def xxh3_64_nb(b, n, seed, ks, s, acc):
    """XXH3-64 of the first ``n`` (>= 4) bytes of the uint8 array ``b`` with ``seed``; ``ks`` is
    :data:`K_SECRET`, ``s`` (uint8[192]) and ``acc`` (uint64[8]) scratch of the long path."""
    if n <= 8:
        seed2 = seed ^ (_swap32(seed & _M32) << np.uint64(32))
        in1 = _r32(b, 0)
        in2 = _r32(b, n - 4)
        bitflip = (_r64(ks, 8) ^ _r64(ks, 16)) - seed2
        keyed = (in2 + (in1 << np.uint64(32))) ^ bitflip
        h = keyed ^ _rotl(keyed, 49) ^ _rotl(keyed, 24)
        h *= _MX2
        h ^= (h >> np.uint64(35)) + np.uint64(n)
        h *= _MX2
        return h ^ (h >> np.uint64(28))
    if n <= 16:
        flip1 = (_r64(ks, 24) ^ _r64(ks, 32)) + seed
        flip2 = (_r64(ks, 40) ^ _r64(ks, 48)) - seed
        lo = _r64(b, 0) ^ flip1
        hi = _r64(b, n - 8) ^ flip2
        acc = np.uint64(n) + _swap64(lo) + hi + _mul_fold(lo, hi)
        return _avalanche(acc)
    if n <= 128:
        acc = np.uint64(n) * _P64_1
        if n > 32:
            if n > 64:
                if n > 96:
                    acc += _mix16(b, 48, ks, 96, seed)
                    acc += _mix16(b, n - 64, ks, 112, seed)
                acc += _mix16(b, 32, ks, 64, seed)
                acc += _mix16(b, n - 48, ks, 80, seed)
            acc += _mix16(b, 16, ks, 32, seed)
            acc += _mix16(b, n - 32, ks, 48, seed)
        acc += _mix16(b, 0, ks, 0, seed)
        acc += _mix16(b, n - 16, ks, 16, seed)
        return _avalanche(acc)
    if n <= 240:
        acc = np.uint64(n) * _P64_1
        for i in range(8):
            acc += _mix16(b, 16 * i, ks, 16 * i, seed)
        acc = _avalanche(acc)
        for i in range(8, n // 16):
            acc += _mix16(b, 16 * i, ks, 16 * (i - 8) + 3, seed)
        acc += _mix16(b, n - 16, ks, 136 - 17, seed)
        return _avalanche(acc)
    return _long(b, n, seed, ks, s, acc)


@inner
def next_sequence_hash_nb(parent, local, buf, ks, s, acc):
    """Dynamo's sequence hash of a block with local hash ``local`` after a block whose sequence
    hash is ``parent`` (``buf``: 16 bytes of scratch)."""
    for j in range(8):
        buf[j] = np.uint8((parent >> np.uint64(8 * j)) & np.uint64(0xFF))
        buf[8 + j] = np.uint8((local >> np.uint64(8 * j)) & np.uint64(0xFF))
    return xxh3_64_nb(buf, 16, SEED, ks, s, acc)


@inner
def _put_token(buf, i, tok):
    for j in range(4):
        buf[4 * i + j] = np.uint8((tok >> np.uint64(8 * j)) & np.uint64(0xFF))


@kernel
def trace_sequence_hashes_nb(isl, hash_ptr, tokens, trace_block_size, block_size, key_ptr, ks):
    """Dynamo's sequence hash of every full prompt block of every trace row, in the layout of the
    rows' block keys (``key_ptr``: row ``r``'s blocks are ``key_ptr[r] .. key_ptr[r + 1] - 1``,
    ``isl[r] // block_size`` of them). ``tokens``: the token of each hash id of ``hash_ptr``'s
    rows, each standing for ``trace_block_size`` tokens; a number from 0 to ``len(tokens) - 1``."""
    n = isl.shape[0]
    out = np.zeros(key_ptr[n], dtype=np.uint64)
    buf = np.empty(4 * block_size, dtype=np.uint8)
    pair = np.empty(16, dtype=np.uint8)
    sec = np.empty(192, dtype=np.uint8)
    acc = np.empty(8, dtype=np.uint64)
    # the local hash of a block of one repeated token, computed once per token
    n_tok = 1
    for i in range(tokens.shape[0]):
        n_tok = max(n_tok, tokens[i] + 1)
    uniform_hash = np.zeros(n_tok, dtype=np.uint64)
    known = np.zeros(n_tok, dtype=np.bool_)
    for r in range(n):
        nb = key_ptr[r + 1] - key_ptr[r]
        parent = np.uint64(0)
        for j in range(nb):
            t0 = j * block_size
            first = hash_ptr[r] + t0 // trace_block_size
            last = hash_ptr[r] + (t0 + block_size - 1) // trace_block_size
            if first == last or _same_token(tokens, first, last):
                tok = tokens[first]
                if not known[tok]:
                    for i in range(block_size):
                        _put_token(buf, i, np.uint64(tok) & _M32)
                    uniform_hash[tok] = xxh3_64_nb(buf, 4 * block_size, SEED, ks, sec, acc)
                    known[tok] = True
                local = uniform_hash[tok]
            else:
                for i in range(block_size):
                    _put_token(buf, i, np.uint64(tokens[hash_ptr[r] + (t0 + i) // trace_block_size]) & _M32)
                local = xxh3_64_nb(buf, 4 * block_size, SEED, ks, sec, acc)
            h = local if j == 0 else next_sequence_hash_nb(parent, local, pair, ks, sec, acc)
            out[key_ptr[r] + j] = h
            parent = h
    return out


@inner
def _same_token(tokens, first, last):
    for i in range(first + 1, last + 1):
        if tokens[i] != tokens[first]:
            return False
    return True


@inner
def _synthetic_token(row, pos):
    """Token ``pos`` of synthetic request ``row`` (Dynamo's flat synthetic lists: a splitmix64
    mix of ``(row << 32) ^ pos``, its low 32 bits, 0 made 1; notes 2.2)."""
    z = ((np.uint64(row) << np.uint64(32)) ^ np.uint64(pos)) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = (z ^ (z >> np.uint64(31))) & _M32
    return np.uint64(1) if z == 0 else z


@kernel
def synthetic_sequence_hashes_nb(n, block_size, key_ptr, ks):
    """:func:`trace_sequence_hashes_nb` for unique synthetic prompts (``n`` rows)."""
    out = np.zeros(key_ptr[n], dtype=np.uint64)
    buf = np.empty(4 * block_size, dtype=np.uint8)
    pair = np.empty(16, dtype=np.uint8)
    sec = np.empty(192, dtype=np.uint8)
    acc = np.empty(8, dtype=np.uint64)
    for r in range(n):
        parent = np.uint64(0)
        for j in range(key_ptr[r + 1] - key_ptr[r]):
            for i in range(block_size):
                _put_token(buf, i, _synthetic_token(r, j * block_size + i))
            local = xxh3_64_nb(buf, 4 * block_size, SEED, ks, sec, acc)
            h = local if j == 0 else next_sequence_hash_nb(parent, local, pair, ks, sec, acc)
            out[key_ptr[r] + j] = h
            parent = h
    return out


def sequence_hashes(workload, block_size, key_ptr):
    """Dynamo's sequence hashes of the full prompt blocks of ``workload`` (uint64, laid out as
    ``key_ptr``)."""
    if workload.hash_ptr is None:
        return synthetic_sequence_hashes_nb(int(workload.isl.shape[0]), int(block_size),
                                            np.asarray(key_ptr, dtype=np.int64), K_SECRET)
    # a trace's token for a hash id is the number of distinct ids met before its first appearance,
    # in file order (0354)
    ids = np.asarray(workload.hash_ids, dtype=np.int64).view(np.uint64)
    uniq, first = np.unique(ids, return_index=True)
    token_of_uniq = np.empty(uniq.shape[0], dtype=np.int64)
    token_of_uniq[np.argsort(first, kind="stable")] = np.arange(uniq.shape[0], dtype=np.int64)
    ranks = token_of_uniq[np.searchsorted(uniq, ids)]
    return trace_sequence_hashes_nb(np.asarray(workload.isl, dtype=np.int64),
                                    np.asarray(workload.hash_ptr, dtype=np.int64), ranks,
                                    int(workload.trace_block_size), int(block_size),
                                    np.asarray(key_ptr, dtype=np.int64), K_SECRET)
