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
    tmask: int  # table size - 1 (table size is a power of two >= 2 * cap)
    slot_key: np.ndarray  # uint64[R * cap]
    slot_ref: np.ndarray  # int32[R * cap]
    lru_prev: np.ndarray  # int32[R * cap]
    lru_next: np.ndarray  # int32[R * cap]
    table: np.ndarray  # int32[R * tsize], local slot or -1
    free_stack: np.ndarray  # int32[R * cap]
    # per rank: [n_free, n_active, n_inactive, lru_head, lru_tail, n_evicted]
    meta: np.ndarray  # int64[R, 6]


NFREE, NACTIVE, NINACTIVE, HEAD, TAIL, NEVICT = 0, 1, 2, 3, 4, 5


def make_pool(n_ranks, cap):
    """Allocate empty pools for ``n_ranks`` ranks of ``cap`` blocks each."""
    tsize = 1
    while tsize < 2 * cap:
        tsize *= 2
    free_stack = np.empty(n_ranks * cap, dtype=np.int32)
    local = np.arange(cap - 1, -1, -1, dtype=np.int32)  # pop order 0, 1, 2, ...
    for k in range(n_ranks):
        free_stack[k * cap:(k + 1) * cap] = local
    meta = np.zeros((n_ranks, 6), dtype=np.int64)
    meta[:, NFREE] = cap
    meta[:, HEAD] = -1
    meta[:, TAIL] = -1
    return KvPool(
        cap=cap,
        tmask=tsize - 1,
        slot_key=np.zeros(n_ranks * cap, dtype=np.uint64),
        slot_ref=np.zeros(n_ranks * cap, dtype=np.int32),
        lru_prev=np.full(n_ranks * cap, -1, dtype=np.int32),
        lru_next=np.full(n_ranks * cap, -1, dtype=np.int32),
        table=np.full(n_ranks * tsize, -1, dtype=np.int32),
        free_stack=free_stack,
        meta=meta,
    )


@njit(cache=True, inline="always")
def _home(pool, key):
    return np.int64((key ^ (key >> np.uint64(29))) & np.uint64(pool.tmask))


@njit(cache=True)
def lookup_nb(pool, rank, key):
    """Local slot holding ``key`` on ``rank`` (active or inactive), or -1."""
    tbase = rank * (pool.tmask + 1)
    sbase = rank * pool.cap
    i = _home(pool, key)
    while True:
        s = pool.table[tbase + i]
        if s < 0:
            return -1
        if pool.slot_key[sbase + s] == key:
            return s
        i = (i + 1) & pool.tmask


@njit(cache=True)
def _table_insert(pool, rank, key, s):
    tbase = rank * (pool.tmask + 1)
    i = _home(pool, key)
    while pool.table[tbase + i] >= 0:
        i = (i + 1) & pool.tmask
    pool.table[tbase + i] = s


@njit(cache=True)
def _table_delete(pool, rank, key):
    # Linear probing with backward-shift deletion: no tombstones, probes stay short.
    tbase = rank * (pool.tmask + 1)
    sbase = rank * pool.cap
    i = _home(pool, key)
    while pool.slot_key[sbase + pool.table[tbase + i]] != key:
        i = (i + 1) & pool.tmask
    j = i
    while True:
        j = (j + 1) & pool.tmask
        s = pool.table[tbase + j]
        if s < 0:
            break
        h = _home(pool, pool.slot_key[sbase + s])
        # move entry j into hole i if its home is not in (i, j] cyclically
        if (j > i and (h <= i or h > j)) or (j < i and (h <= i and h > j)):
            pool.table[tbase + i] = s
            i = j
    pool.table[tbase + i] = -1


@njit(cache=True, inline="always")
def _lru_unlink(pool, rank, s):
    sbase = rank * pool.cap
    p = pool.lru_prev[sbase + s]
    n = pool.lru_next[sbase + s]
    if p >= 0:
        pool.lru_next[sbase + p] = n
    else:
        pool.meta[rank, HEAD] = n
    if n >= 0:
        pool.lru_prev[sbase + n] = p
    else:
        pool.meta[rank, TAIL] = p
    pool.lru_prev[sbase + s] = -1
    pool.lru_next[sbase + s] = -1


@njit(cache=True, inline="always")
def _lru_push_tail(pool, rank, s):
    sbase = rank * pool.cap
    t = pool.meta[rank, TAIL]
    pool.lru_prev[sbase + s] = t
    pool.lru_next[sbase + s] = -1
    if t >= 0:
        pool.lru_next[sbase + t] = s
    else:
        pool.meta[rank, HEAD] = s
    pool.meta[rank, TAIL] = s


@njit(cache=True)
def can_use_nb(pool, rank, keys, n):
    """True if blocks ``keys[:n]`` can all be made active on ``rank`` (the all-or-nothing check)."""
    sbase = rank * pool.cap
    extra = 0
    for i in range(n):
        s = lookup_nb(pool, rank, keys[i])
        if s < 0 or pool.slot_ref[sbase + s] == 0:
            extra += 1
    return pool.meta[rank, NACTIVE] + extra <= pool.cap


@njit(cache=True)
def use_nb(pool, rank, keys, n):
    """Make blocks ``keys[:n]`` active (refcount + 1), allocating or reactivating as needed.

    The caller has checked ``can_use_nb``. New blocks take a free slot, else the oldest inactive one.
    """
    sbase = rank * pool.cap
    for i in range(n):
        key = keys[i]
        s = lookup_nb(pool, rank, key)
        if s >= 0:
            if pool.slot_ref[sbase + s] == 0:  # inactive hit: reactivate
                _lru_unlink(pool, rank, s)
                pool.meta[rank, NINACTIVE] -= 1
                pool.meta[rank, NACTIVE] += 1
            pool.slot_ref[sbase + s] += 1
            continue
        if pool.meta[rank, NFREE] > 0:
            pool.meta[rank, NFREE] -= 1
            s = pool.free_stack[sbase + pool.meta[rank, NFREE]]
        else:
            s = np.int32(pool.meta[rank, HEAD])  # evict the oldest inactive block
            _lru_unlink(pool, rank, s)
            _table_delete(pool, rank, pool.slot_key[sbase + s])
            pool.meta[rank, NINACTIVE] -= 1
            pool.meta[rank, NEVICT] += 1
        pool.slot_key[sbase + s] = key
        pool.slot_ref[sbase + s] = 1
        _table_insert(pool, rank, key, s)
        pool.meta[rank, NACTIVE] += 1


@njit(cache=True)
def release_nb(pool, rank, key, cacheable):
    """Drop one reference to ``key``; at 0 it becomes inactive if ``cacheable``, else free."""
    sbase = rank * pool.cap
    s = lookup_nb(pool, rank, key)
    pool.slot_ref[sbase + s] -= 1
    if pool.slot_ref[sbase + s] > 0:
        return
    pool.meta[rank, NACTIVE] -= 1
    if cacheable:
        _lru_push_tail(pool, rank, s)
        pool.meta[rank, NINACTIVE] += 1
    else:
        _table_delete(pool, rank, key)
        pool.slot_key[sbase + s] = 0
        pool.free_stack[sbase + pool.meta[rank, NFREE]] = s
        pool.meta[rank, NFREE] += 1


@njit(cache=True)
def match_prefix_nb(pool, rank, keys, n):
    """Leading blocks of ``keys[:n]`` present on ``rank``: returns (matched, matched_and_active).

    Active blocks form prefix-closed chains (a holder holds every earlier block of its chain), so the
    active ones among the matched blocks are counted wherever they stand.
    """
    sbase = rank * pool.cap
    matched = 0
    active = 0
    for i in range(n):
        s = lookup_nb(pool, rank, keys[i])
        if s < 0:
            break
        matched += 1
        if pool.slot_ref[sbase + s] > 0:
            active += 1
    return matched, active
