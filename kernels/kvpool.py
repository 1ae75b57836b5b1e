"""Per-rank KV block pools: a key -> slot hash table, refcounts and an LRU of inactive blocks.

Semantics of Dynamo 1.4.2's manual block manager (notes 5.3, verified doc Q5, Q6 and "findings" 6-7):

* a slot is *active* (refcount > 0), *inactive* (refcount 0, still matchable, in the LRU) or free;
* ``used = active + inactive <= capacity``; a new block takes a free slot, else evicts the oldest
  inactive block; a `use` is all-or-nothing;
* freeing a request releases its blocks tail first; a full block whose refcount drops to 0 becomes
  the newest inactive entry, a partial block (and any block when prefix caching is off) goes back to
  the free list.

All ranks' pools live in flat arrays; rank ``k`` owns slots ``[k * cap, (k + 1) * cap)`` and table
entries ``[k * tsize, (k + 1) * tsize)``. Slot numbers inside a rank are local (0 .. cap - 1).
"""

from typing import NamedTuple

import numpy as np
from numba import njit


class KvPool(NamedTuple):
    """Flat state of every rank's pool (see module docstring)."""

    cap: int  # blocks per rank
    tmask: int  # table size - 1 (table size is a power of two >= 4 * cap)
    slot_key: np.ndarray  # uint64[R * cap]
    slot_ref: np.ndarray  # int32[R * cap]
    lru_prev: np.ndarray  # int32[R * cap]
    lru_next: np.ndarray  # int32[R * cap]
    table: np.ndarray  # uint64[R * tsize]: fingerprint << 32 | (local slot + 1), 0 = empty
    free_stack: np.ndarray  # int32[R * cap]: released slots
    # per rank: [n_free, n_active, n_inactive, lru_head, lru_tail, n_evicted, n_stack, next_new]
    meta: np.ndarray  # int64[R, 8]


NFREE, NACTIVE, NINACTIVE, HEAD, TAIL, NEVICT, NSTACK, NEXTNEW = 0, 1, 2, 3, 4, 5, 6, 7


def make_pool(n_ranks, cap):
    """Allocate empty pools for ``n_ranks`` ranks of ``cap`` blocks each.

    Every big array starts as zeros (slots, the table and the LRU links store index + 1, 0 meaning
    none), so the operating system maps their pages only when a rank first touches them: a large
    cluster whose workers use little of their KV costs little memory and set-up time.
    """
    tsize = 1
    while tsize < 4 * cap:  # load <= 1/4: short probe sequences (about half the time of 1/2)
        tsize *= 2
    meta = np.zeros((n_ranks, 8), dtype=np.int64)
    meta[:, NFREE] = cap
    meta[:, HEAD] = -1
    meta[:, TAIL] = -1
    return KvPool(
        cap=cap,
        tmask=tsize - 1,
        slot_key=np.zeros(n_ranks * cap, dtype=np.uint64),
        slot_ref=np.zeros(n_ranks * cap, dtype=np.int32),
        lru_prev=np.zeros(n_ranks * cap, dtype=np.int32),
        lru_next=np.zeros(n_ranks * cap, dtype=np.int32),
        table=np.zeros(n_ranks * tsize, dtype=np.uint64),
        free_stack=np.zeros(n_ranks * cap, dtype=np.int32),
        meta=meta,
    )


@njit(cache=True, inline="always", _nrt=False)
def _fp(key):
    """32-bit fingerprint of a block key; its low bits are the key's home in the table."""
    return (key * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)


@njit(cache=True, inline="always", _nrt=False)
def _entry(key, s):
    return (_fp(key) << np.uint64(32)) | np.uint64(s + 1)


# The helpers below take plain arrays (borrowed, no reference counting); the public kernels unpack
# the pool once per call. Reading arrays out of the NamedTuple inside loops would cost an NRT
# incref/decref pair per access.
#
# A table entry is ``fingerprint << 32 | (local slot + 1)`` (0 = empty): a probe compares
# fingerprints in the table itself and reads the slot's key only on a fingerprint match, and a
# deletion recomputes homes from the entries alone.
@njit(cache=True, _nrt=False)
def _find(table, slot_key, tbase, sbase, tmask, key):
    fp = _fp(key)
    i = np.int64(fp & np.uint64(tmask))
    while True:
        e = table[tbase + i]
        if e == 0:
            return -1
        if (e >> np.uint64(32)) == fp:
            s = np.int64(e & np.uint64(0xFFFFFFFF)) - 1
            if slot_key[sbase + s] == key:
                return s
        i = (i + 1) & tmask


@njit(cache=True, _nrt=False)
def _table_insert(table, tbase, tmask, key, s):
    e = _entry(key, s)
    i = np.int64((e >> np.uint64(32)) & np.uint64(tmask))
    while table[tbase + i] != 0:
        i = (i + 1) & tmask
    table[tbase + i] = e


@njit(cache=True, _nrt=False)
def _table_delete(table, tbase, tmask, key, s):
    """Remove the entry of ``key`` held in slot ``s`` (linear probing with backward-shift
    deletion: no tombstones, probes stay short)."""
    e0 = _entry(key, s)
    i = np.int64((e0 >> np.uint64(32)) & np.uint64(tmask))
    while True:
        e = table[tbase + i]
        if e == 0:
            return  # not present (cannot happen for a held block; never probe forever)
        if e == e0:
            break
        i = (i + 1) & tmask
    j = i
    while True:
        j = (j + 1) & tmask
        e = table[tbase + j]
        if e == 0:
            break
        h = np.int64((e >> np.uint64(32)) & np.uint64(tmask))
        # move entry j into hole i if its home is not in (i, j] cyclically
        if (j > i and (h <= i or h > j)) or (j < i and (h <= i and h > j)):
            table[tbase + i] = e
            i = j
    table[tbase + i] = 0


@njit(cache=True, _nrt=False)
def _lru_unlink(lru_prev, lru_next, meta, rank, sbase, s):
    p = lru_prev[sbase + s] - 1
    n = lru_next[sbase + s] - 1
    if p >= 0:
        lru_next[sbase + p] = n + 1
    else:
        meta[rank, HEAD] = n
    if n >= 0:
        lru_prev[sbase + n] = p + 1
    else:
        meta[rank, TAIL] = p
    lru_prev[sbase + s] = 0
    lru_next[sbase + s] = 0


@njit(cache=True, _nrt=False)
def _lru_push_tail(lru_prev, lru_next, meta, rank, sbase, s):
    t = meta[rank, TAIL]
    lru_prev[sbase + s] = t + 1
    lru_next[sbase + s] = 0
    if t >= 0:
        lru_next[sbase + t] = s + 1
    else:
        meta[rank, HEAD] = s
    meta[rank, TAIL] = s


@njit(cache=True, _nrt=False, inline="always")
def _take_free(free_stack, meta, rank, sbase):
    """A free slot: the last released one, else the next never-used one (caller checked NFREE)."""
    meta[rank, NFREE] -= 1
    if meta[rank, NSTACK] > 0:
        meta[rank, NSTACK] -= 1
        return free_stack[sbase + meta[rank, NSTACK]]
    s = meta[rank, NEXTNEW]
    meta[rank, NEXTNEW] += 1
    return np.int32(s)


@njit(cache=True, _nrt=False, inline="always")
def _give_free(free_stack, meta, rank, sbase, s):
    free_stack[sbase + meta[rank, NSTACK]] = s
    meta[rank, NSTACK] += 1
    meta[rank, NFREE] += 1


@njit(cache=True, _nrt=False)
def lookup_nb(pool, rank, key):
    """Local slot holding ``key`` on ``rank`` (active or inactive), or -1."""
    return _find(pool.table, pool.slot_key, rank * (pool.tmask + 1), rank * pool.cap, pool.tmask, key)


@njit(cache=True, _nrt=False)
def can_use_nb(pool, rank, keys, n):
    """True if blocks ``keys[:n]`` can all be made active on ``rank`` (the all-or-nothing check)."""
    if pool.meta[rank, NACTIVE] + n <= pool.cap:
        return True  # fits even if every block is new
    table = pool.table
    slot_key = pool.slot_key
    slot_ref = pool.slot_ref
    tmask = pool.tmask
    tbase = rank * (tmask + 1)
    sbase = rank * pool.cap
    extra = 0
    for i in range(n):
        s = _find(table, slot_key, tbase, sbase, tmask, keys[i])
        if s < 0 or slot_ref[sbase + s] == 0:
            extra += 1
    return pool.meta[rank, NACTIVE] + extra <= pool.cap


@njit(cache=True, _nrt=False)
def use_nb(pool, rank, keys, n):
    """Make blocks ``keys[:n]`` active (refcount + 1), allocating or reactivating as needed.

    The caller has checked ``can_use_nb``. New blocks take a free slot, else the oldest inactive one.
    """
    table = pool.table
    slot_key = pool.slot_key
    slot_ref = pool.slot_ref
    lru_prev = pool.lru_prev
    lru_next = pool.lru_next
    free_stack = pool.free_stack
    meta = pool.meta
    tmask = pool.tmask
    tbase = rank * (tmask + 1)
    sbase = rank * pool.cap
    for i in range(n):
        key = keys[i]
        s = _find(table, slot_key, tbase, sbase, tmask, key)
        if s >= 0:
            if slot_ref[sbase + s] == 0:  # inactive hit: reactivate
                _lru_unlink(lru_prev, lru_next, meta, rank, sbase, np.int64(s))
                meta[rank, NINACTIVE] -= 1
                meta[rank, NACTIVE] += 1
            slot_ref[sbase + s] += 1
            continue
        if meta[rank, NFREE] > 0:
            s = _take_free(free_stack, meta, rank, sbase)
        else:
            s = np.int32(meta[rank, HEAD])  # evict the oldest inactive block
            _lru_unlink(lru_prev, lru_next, meta, rank, sbase, np.int64(s))
            _table_delete(table, tbase, tmask, slot_key[sbase + s], np.int64(s))
            meta[rank, NINACTIVE] -= 1
            meta[rank, NEVICT] += 1
        slot_key[sbase + s] = key
        slot_ref[sbase + s] = 1
        _table_insert(table, tbase, tmask, key, s)
        meta[rank, NACTIVE] += 1


@njit(cache=True, _nrt=False)
def use_new_nb(pool, rank, keys, n):
    """``use_nb`` for blocks known to be absent from ``rank`` (keys it never allocated): no lookups.

    The caller has checked ``can_use_nb``.
    """
    table = pool.table
    slot_key = pool.slot_key
    slot_ref = pool.slot_ref
    lru_prev = pool.lru_prev
    lru_next = pool.lru_next
    free_stack = pool.free_stack
    meta = pool.meta
    tmask = pool.tmask
    tbase = rank * (tmask + 1)
    sbase = rank * pool.cap
    for i in range(n):
        key = keys[i]
        if meta[rank, NFREE] > 0:
            s = np.int64(_take_free(free_stack, meta, rank, sbase))
        else:
            s = meta[rank, HEAD]  # evict the oldest inactive block
            _lru_unlink(lru_prev, lru_next, meta, rank, sbase, s)
            _table_delete(table, tbase, tmask, slot_key[sbase + s], s)
            meta[rank, NINACTIVE] -= 1
            meta[rank, NEVICT] += 1
        slot_key[sbase + s] = key
        slot_ref[sbase + s] = 1
        _table_insert(table, tbase, tmask, key, s)
        meta[rank, NACTIVE] += 1


@njit(cache=True, _nrt=False)
def release_many_nb(pool, rank, keys, n, n_cacheable):
    """Drop one reference to each of ``keys[:n]`` in order; at refcount 0 a block becomes the newest
    inactive entry if its position is below ``n_cacheable``, else its slot is freed."""
    table = pool.table
    slot_key = pool.slot_key
    slot_ref = pool.slot_ref
    lru_prev = pool.lru_prev
    lru_next = pool.lru_next
    free_stack = pool.free_stack
    meta = pool.meta
    tmask = pool.tmask
    tbase = rank * (tmask + 1)
    sbase = rank * pool.cap
    for i in range(n):
        key = keys[i]
        s = _find(table, slot_key, tbase, sbase, tmask, key)
        slot_ref[sbase + s] -= 1
        if slot_ref[sbase + s] > 0:
            continue
        meta[rank, NACTIVE] -= 1
        if i < n_cacheable:
            _lru_push_tail(lru_prev, lru_next, meta, rank, sbase, s)
            meta[rank, NINACTIVE] += 1
        else:
            _table_delete(table, tbase, tmask, key, np.int64(s))
            slot_key[sbase + s] = 0
            _give_free(free_stack, meta, rank, sbase, s)


@njit(cache=True)
def release_nb(pool, rank, key, cacheable):
    """Drop one reference to ``key``; at 0 it becomes inactive if ``cacheable``, else free."""
    keys = np.empty(1, dtype=np.uint64)
    keys[0] = key
    release_many_nb(pool, rank, keys, 1, 1 if cacheable else 0)


@njit(cache=True, _nrt=False)
def match_prefix_nb(pool, rank, keys, n):
    """Leading blocks of ``keys[:n]`` present on ``rank``: returns (matched, matched_and_active).

    Active blocks form prefix-closed chains (a holder holds every earlier block of its chain), so the
    active ones among the matched blocks are counted wherever they stand.
    """
    table = pool.table
    slot_key = pool.slot_key
    slot_ref = pool.slot_ref
    tmask = pool.tmask
    tbase = rank * (tmask + 1)
    sbase = rank * pool.cap
    matched = 0
    active = 0
    for i in range(n):
        s = _find(table, slot_key, tbase, sbase, tmask, keys[i])
        if s < 0:
            break
        matched += 1
        if slot_ref[sbase + s] > 0:
            active += 1
    return matched, active


@njit(cache=True, _nrt=False)
def rekey_nb(pool, rank, old, new):
    """Give the active block ``old`` the identity ``new`` (registering a transferred block).

    If ``new`` is already present, the reference moves onto that block and ``old`` is freed.
    """
    table = pool.table
    slot_key = pool.slot_key
    slot_ref = pool.slot_ref
    tmask = pool.tmask
    tbase = rank * (tmask + 1)
    sbase = rank * pool.cap
    s_new = _find(table, slot_key, tbase, sbase, tmask, new)
    if s_new >= 0:
        if slot_ref[sbase + s_new] == 0:
            _lru_unlink(pool.lru_prev, pool.lru_next, pool.meta, rank, sbase, np.int64(s_new))
            pool.meta[rank, NINACTIVE] -= 1
            pool.meta[rank, NACTIVE] += 1
        slot_ref[sbase + s_new] += 1
        s_old = _find(table, slot_key, tbase, sbase, tmask, old)
        slot_ref[sbase + s_old] -= 1
        if slot_ref[sbase + s_old] == 0:
            pool.meta[rank, NACTIVE] -= 1
            _table_delete(table, tbase, tmask, old, np.int64(s_old))
            slot_key[sbase + s_old] = 0
            _give_free(pool.free_stack, pool.meta, rank, sbase, s_old)
        return
    s_old = _find(table, slot_key, tbase, sbase, tmask, old)
    _table_delete(table, tbase, tmask, old, np.int64(s_old))
    slot_key[sbase + s_old] = new
    _table_insert(table, tbase, tmask, new, s_old)
