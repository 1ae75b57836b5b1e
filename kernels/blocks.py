"""Engine-block identities.

Dynamo identifies a full KV block by a chained hash of the token contents of that block and every
block before it (``seq_hash[i] = H(seq_hash[i-1], block_hash[i])``, notes 5.1). Two requests share
engine block ``j`` exactly when their first ``(j + 1) * block_size`` tokens are equal. fastsim keeps
that equality relation, not Dynamo's hash values: a trace's tokens are ``hash_id as u32`` repeated
``trace_block_size`` times (notes 1.4), so block ``j``'s contents are determined by the hash ids it
covers, and a 64-bit chained mix of those ids gives the same sharing structure.

Keys have the top bit clear for content blocks and set for request-unique blocks (partial prompt
tails, generated tokens, synthetic prompts), so the two kinds never collide; 0 is never a key.
"""

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from fastsim.kernels.jit import inner, kernel, kernel_noalloc

_TOP = np.uint64(1) << np.uint64(63)
_LOW = ~_TOP


@inner
def mix64_nb(x):
    """splitmix64 finaliser: a bijective, well-spread 64-bit mix."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@kernel_noalloc
def unique_key_nb(row, j):
    """Key of block ``j`` of request ``row`` when its contents are unique to that request."""
    k = mix64_nb(np.uint64(row) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(j) + np.uint64(1))
    return k | _TOP


@kernel
def content_block_keys_nb(isl, hash_ptr, hash_ids, trace_block_size, block_size, out_ptr):
    """Keys of every full engine block of every prompt.

    ``isl[r]`` prompt tokens of row ``r`` come from ``hash_ids[hash_ptr[r]:hash_ptr[r + 1]]``, each
    id standing for ``trace_block_size`` tokens. Fills ``out_ptr`` (len n + 1, CSR offsets) and
    returns the keys of blocks ``0 .. isl[r] // block_size - 1`` of each row.

    The first ``(j + 1) * block_size`` tokens end in trace block ``m = ((j + 1) * block_size - 1)
    // trace_block_size``; two prompts agree on them exactly when they agree on trace blocks
    ``0 .. m`` (every token of a trace block is its id). So block ``j``'s key is a mix of ``j`` and
    a chained hash of those ids: the chain advances once per trace block, and the blocks' own mixes
    do not depend on one another (they overlap in the processor, where a chain per engine block
    made each wait for the last).
    """
    n = isl.shape[0]
    out_ptr[0] = 0
    for r in range(n):
        out_ptr[r + 1] = out_ptr[r] + isl[r] // block_size
    keys = np.empty(out_ptr[n], dtype=np.uint64)
    _keys_of_prefixes(hash_ptr, hash_ids, trace_block_size, block_size, out_ptr, keys)
    return keys


@kernel
def unique_content_keys_nb(ptr):
    """Keys of blocks ``0 .. ptr[r + 1] - ptr[r] - 1`` of each row ``r`` when no two blocks share
    contents (unique synthetic prompts): each a content key (top bit clear) of its own."""
    n = ptr.shape[0] - 1
    keys = np.empty(ptr[n], dtype=np.uint64)
    for r in range(n):
        for j in range(ptr[r + 1] - ptr[r]):
            key = mix64_nb(np.uint64(r) * np.uint64(0xD1B54A32D192ED03) + np.uint64(j) + np.uint64(0x5851F42D4C957F2D))
            key &= _LOW
            keys[ptr[r] + j] = key if key != np.uint64(0) else np.uint64(1)
    return keys


@kernel
def shared_block_keys_nb(isl, hash_ptr, hash_ids, trace_block_size, block_size, group, out_ptr):
    """``content_block_keys_nb`` for the leading blocks of each prompt that another prompt of the
    same group may share; the other blocks are left to be private (``out_ptr`` says how many each
    row keeps).

    A key nobody else holds can only ever be matched by its own request (after a preemption),
    which private blocks allow as well: a request's blocks beyond its shareable ones are kept by
    count, with no table entry, no slot and no key (``kernels/kvpool.py``), where a keyed block
    costs a registration, an eviction from the table and a slot. Requests that meet different
    pools can share nothing: ``group[r]`` names the pools row ``r`` can meet (its worker under a
    fixed round robin; all 0 when that is not known). Block ``j`` is kept when the chain of the
    trace blocks its tokens end in occurs in another row of the group (a chain, not the key: a
    row with fewer full blocks may not hold block ``j`` itself, so a few more are kept than could
    be hit, never fewer). Sharing is closed under prefixes, so the kept blocks are a prefix.
    """
    n = isl.shape[0]
    mask32 = np.uint64(0xFFFFFFFF)
    # Depth by depth (trace block m), only the rows that share every earlier trace block take
    # part: a row holding another row's chain at m holds it at m - 1 too. So a depth's table
    # holds a few rows' chains (it stays in the cache) and a row that shares nothing is done
    # after its first trace block.
    last = np.empty(n, dtype=np.int64)  # trace blocks a row's full blocks end in: 0 .. last[r] - 1
    alive = np.empty(n, dtype=np.int64)
    chain = np.empty(n, dtype=np.uint64)
    gmix = np.empty(n, dtype=np.uint64)
    n_alive = 0
    for r in range(n):
        full = isl[r] // block_size
        last[r] = (full * block_size + trace_block_size - 1) // trace_block_size if full > 0 else 0
        if last[r] > 0:
            alive[n_alive] = r
            n_alive += 1
        chain[r] = np.uint64(0x51ED270B27A3D1E5)
        gmix[r] = mix64_nb(np.uint64(group[r]) + np.uint64(0x2545F4914F6CDD1D))
    shared = np.zeros(n, dtype=np.int64)  # leading trace blocks another row of the group holds
    size = 1024
    while size < 2 * n:
        size *= 2
    tab = np.zeros(size, dtype=np.uint64)  # (chain, group) mixes of this depth
    stamp = np.zeros(size, dtype=np.int64)  # depth + 1 of the entry (older ones are empty)
    seen = np.zeros(size, dtype=np.uint8)  # rows holding it, up to 2
    pos = np.empty(n, dtype=np.int64)
    m = 0
    while n_alive > 0:
        for a in range(n_alive):
            r = alive[a]
            tok = np.uint64(hash_ids[hash_ptr[r] + m]) & mask32  # (as the keys' chain)
            chain[r] = mix64_nb(chain[r] ^ (tok + np.uint64(0x632BE59BD9B4E019)))
            h = mix64_nb(chain[r] ^ gmix[r]) | np.uint64(1)
            i = np.int64(h & np.uint64(size - 1))
            while stamp[i] == m + 1 and tab[i] != h:
                i = (i + 1) & (size - 1)
            if stamp[i] != m + 1:
                stamp[i] = m + 1
                tab[i] = h
                seen[i] = 0
            if seen[i] < 2:
                seen[i] += 1
            pos[a] = i
        k = 0
        for a in range(n_alive):
            r = alive[a]
            if seen[pos[a]] >= 2:
                shared[r] = m + 1
                if last[r] > m + 1:
                    alive[k] = r
                    k += 1
        n_alive = k
        m += 1
    for r in range(n):
        last[r] = min(isl[r] // block_size, shared[r] * trace_block_size // block_size)
    out_ptr[0] = 0
    for r in range(n):
        out_ptr[r + 1] = out_ptr[r] + last[r]
    keys = np.empty(out_ptr[n], dtype=np.uint64)
    _keys_of_prefixes(hash_ptr, hash_ids, trace_block_size, block_size, out_ptr, keys)
    return keys


@inner
def _keys_of_prefixes(hash_ptr, hash_ids, trace_block_size, block_size, out_ptr, keys):
    """The keys of blocks ``0 .. out_ptr[r + 1] - out_ptr[r] - 1`` of each row into ``keys``
    (``content_block_keys_nb``)."""
    n = out_ptr.shape[0] - 1
    mask32 = np.uint64(0xFFFFFFFF)
    for r in range(n):
        base = hash_ptr[r]
        chain = np.uint64(0x51ED270B27A3D1E5)
        m = -1  # trace blocks 0 .. m are in the chain
        edge = 0  # the first token of trace block m + 1: (m + 1) * trace_block_size
        for j in range(out_ptr[r + 1] - out_ptr[r]):
            # block j's last token, (j + 1) * block_size - 1, is in trace block m once it is below
            # the edge (a comparison: a division per block cost more than the hashing)
            while edge <= (j + 1) * block_size - 1:
                m += 1
                edge += trace_block_size
                # Dynamo's token is `hash_id as u32`: ids equal in their low 32 bits collide there too.
                tok = np.uint64(hash_ids[base + m]) & mask32
                chain = mix64_nb(chain ^ (tok + np.uint64(0x632BE59BD9B4E019)))
            key = mix64_nb(chain + np.uint64(j + 1) * np.uint64(0x9E3779B97F4A7C15)) & _LOW
            if key == np.uint64(0):
                key = np.uint64(1)
            keys[out_ptr[r] + j] = key


@intrinsic
def prefetch_nb(typingctx, arr, idx):
    """Ask the processor to fetch ``arr[idx]`` into its caches (no effect on results; no bounds
    check: an address out of range is ignored by the hardware)."""
    sig = types.void(arr, idx)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        # read, high temporal locality, data cache
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


# ----------------------------------------------------------------------------- a request's blocks
# ----------------------------------------------------------------------------- blocks
@inner
def key_span(rq, r):
    """(offset, count) of request ``r``'s content keys in ``rq.keys``. A workload without any
    (unique prompts, or prefix caching off) gives (0, 0) without reading ``key_ptr`` (all zeros,
    ``state.block_keys``): a fresh process then never maps its pages."""
    if rq.keys.shape[0] == 0:
        return np.int64(0), np.int64(0)
    base = rq.key_ptr[r]
    return base, rq.key_ptr[r + 1] - base

@inner
def stream_row_nb(rq, r):
    """The row whose token stream request ``r``'s private blocks belong to (``Reqs.kid``)."""
    if rq.kid.shape[0] == 0:
        return r
    s = rq.kid[r]
    return s if s >= 0 else ~s

@inner
def carries_blocks_nb(rq, r):
    """Does the session's next turn continue ``r``'s blocks (a growing stream, not its last turn)?"""
    return rq.kid.shape[0] != 0 and rq.kid[r] < 0

@inner
def block_key_nb(rq, r, j):
    """Identity of block ``j`` of request ``r``: content key for full prompt blocks, else unique.

    Dynamo allocates every block outside a request's cached prefix as a new physical block; when
    an equal block is already registered, the new one becomes a second copy of that key (cache
    hits keep going to the first copy still alive; see ``kvpool``).
    """
    base, nkeys = key_span(rq, r)
    if j < nkeys:
        return rq.keys[base + j]
    return unique_key_nb(stream_row_nb(rq, r), j)

# Token counts to blocks. A hardware division costs tens of cycles and a pass makes a dozen of
# them; with a power-of-two block size (the usual case) they are shifts and masks, which give the
# same floor quotient and non-negative remainder for negative numbers too (two's complement).
@inner
def blocks_floor(p, x):
    """``x // block_size``."""
    if p.bshift >= 0:
        return x >> p.bshift
    return x // p.block_size

@inner
def blocks_ceil(p, x):
    """Blocks that hold ``x`` tokens: ``ceil(x / block_size)``."""
    return blocks_floor(p, x + p.block_size - 1)

@inner
def block_mod(p, x):
    """``x % block_size`` (in ``[0, block_size)``)."""
    if p.bshift >= 0:
        return x & (p.block_size - 1)
    return x % p.block_size

@inner
def fill_keys(rq, r, j0, j1, kbuf):
    for j in range(j0, j1):
        kbuf[j - j0] = block_key_nb(rq, r, j)
    return j1 - j0
