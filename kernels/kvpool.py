"""Per-rank KV block pools: a key -> slot hash table, refcounts and an LRU of inactive blocks.

Semantics of Dynamo 1.4.2's manual block manager (notes 5.3, verified doc Q5, Q6 and "findings" 6-7):

* a block is *active* (refcount > 0), *inactive* (refcount 0, still matchable, in the LRU) or free;
* ``used = active + inactive <= capacity``; a new block takes a free block, else evicts the oldest
  inactive block; a `use` is all-or-nothing;
* freeing a request releases its blocks tail first; a full block whose refcount drops to 0 becomes
  the newest inactive entry, a partial block (and any block when prefix caching is off) goes back to
  the free list.

Callers hold each request's block table (the slot of each of its shareable blocks) and release
by slot. A new block is registered under its key once it is fully computed (``register_nb``): a content key
(top bit clear) always, a private key (``blocks.unique_key_nb``, top bit set) only when its
request is preempted while the block is cached, since only that request can match it again. A
key registered twice keeps its copies in registration order (``slot_cnext``): the table points at
the first copy still alive, which serves every hit; when it is evicted the next copy takes over
(Dynamo's behaviour, checked against the naive engine on random traces).

**Anonymous blocks.** A new block with a private key (the part of a request beyond its shareable
prompt blocks: a synthetic prompt, the unique tail of a trace prompt, every output block) is held
without a slot: the pool only counts it (a request's slot-held blocks are always a prefix of its
blocks). Nobody can look it up while it is active. When its request finishes, its full private
blocks are dead (no request can ever match them) but still take their place in the LRU: they go
there as one *run* node (a slot whose ``slot_run`` counts the dead blocks it stands for, merged
with a run at the LRU's tail), and an eviction at a run takes blocks off its count; both are
counts, not loops (``release_dead_nb``, ``_new_blocks``). When its request is preempted
instead, each full private block gets a slot and is registered under its key, exactly like a
slot-held block, since the request may match it again. So the LRU order of every block that can
still be hit is the same as if every block had its own slot, and a request's admission and
completion cost O(shareable blocks + 1), not O(blocks).

Accounting is in blocks (``NFREE``, ``NACTIVE``, ``NINACTIVE``: they sum to the capacity); slots
come from their own free stack. Slots in use (slot-held blocks and run nodes) never exceed blocks
in use, so ``cap`` slots per rank always suffice.

All ranks' pools live in flat arrays; rank ``k`` owns slots ``[k * cap, (k + 1) * cap)`` and table
entries ``[k * tsize, (k + 1) * tsize)``. Slot numbers inside a rank are local (0 .. cap - 1).
"""

import mmap
from typing import NamedTuple

import numpy as np

from fastsim.kernels.blocks import prefetch_nb, unique_key_nb
from fastsim.kernels.jit import inline, inner, kernel, kernel_noalloc


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
    slot_intab: np.ndarray  # int8[R * cap]: 1 if the slot is registered under its key
    slot_cnext: np.ndarray  # int32[R * cap]: next registered copy of the same key (slot + 1, 0: none)
    slot_run: np.ndarray  # int32[R * cap]: dead private blocks a run node stands for (0: a block)
    # per rank: [free blocks, active blocks, inactive blocks, lru_head, lru_tail, evicted blocks,
    # free slots on the stack, next never-used slot]
    meta: np.ndarray  # int64[R, 8]
    # The feed of KV events for a lagging router (kernels/router.py): each content key that
    # becomes present in a rank's table (stored) or leaves it (removed), stamped with the end of
    # the pass that changed it (``seal_feed_nb``; +inf until then). One ring per rank, in which
    # the stamps never decrease (a rank's passes follow one another); across ranks they do not
    # follow the order the events were made in (a pass made early may end late, a steady run
    # makes its passes ahead of the loop), so the router takes each rank's due events on their
    # own. Empty arrays when nobody reads the feed.
    ev_key: np.ndarray  # uint64[R * M]: rank r's ring of event keys is [r * M, (r + 1) * M)
    ev_code: np.ndarray  # int32[R * M]: 2 * rank + 1 for stored, 2 * rank for removed
    ev_time: np.ndarray  # float64[R * M]
    ev_meta: np.ndarray  # int64[R, 3], by the EV_ slots: first entry, entries, 1 if the ring overflowed


NFREE, NACTIVE, NINACTIVE, HEAD, TAIL, NEVICT, NSTACK, NEXTNEW = 0, 1, 2, 3, 4, 5, 6, 7
# ``KVPool.ev_meta`` slots; EV_STREAMS: 1 if the feed also carries private keys (the blocks of
# growing session streams, which their later turns look up: decision 0460)
EV_FIRST, EV_COUNT, EV_OVERFLOWED, EV_STREAMS = range(4)


def _lazy_zeros(n, dtype):
    """A zero array in fresh anonymous memory: the operating system maps its pages only when they
    are first touched. (``np.zeros`` gives that only while the allocator hands out fresh pages;
    once freed arrays of that size are recycled from the heap, it clears every byte up front.)"""
    dtype = np.dtype(dtype)
    if n == 0:
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(mmap.mmap(-1, n * dtype.itemsize), dtype=dtype)


def make_pool(n_ranks, cap, n_events=0, feed_streams=False):
    """Allocate empty pools for ``n_ranks`` ranks of ``cap`` blocks each.

    Every big array starts as zeros (slots, the table and the LRU links store index + 1, 0 meaning
    none) in fresh memory, so the operating system maps their pages only when a rank first touches
    them: a large cluster whose workers use little of their KV costs little memory and set-up time
    (64 ranks of 16,384 blocks: 67 MB of tables, set up in 0.1 ms instead of 4 ms of clearing).
    ``n_events``: room in each rank's KV event feed (0: no feed); ``feed_streams``: the feed
    carries private keys too (a workload of growing session streams, mooncake-delta).
    """
    tsize = 1
    while tsize < 4 * cap:  # load <= 1/4: short probe sequences (about half the time of 1/2)
        tsize *= 2
    meta = np.zeros((n_ranks, 8), dtype=np.int64)
    meta[:, NFREE] = cap
    meta[:, HEAD] = -1
    meta[:, TAIL] = -1
    ev_meta = np.zeros((n_ranks, 4), dtype=np.int64)
    ev_meta[:, EV_STREAMS] = 1 if feed_streams else 0
    return KvPool(
        cap=cap,
        tmask=tsize - 1,
        slot_key=_lazy_zeros(n_ranks * cap, np.uint64),
        slot_ref=_lazy_zeros(n_ranks * cap, np.int32),
        lru_prev=_lazy_zeros(n_ranks * cap, np.int32),
        lru_next=_lazy_zeros(n_ranks * cap, np.int32),
        table=_lazy_zeros(n_ranks * tsize, np.uint64),
        free_stack=_lazy_zeros(n_ranks * cap, np.int32),
        slot_intab=_lazy_zeros(n_ranks * cap, np.int8),
        slot_cnext=_lazy_zeros(n_ranks * cap, np.int32),
        slot_run=_lazy_zeros(n_ranks * cap, np.int32),
        meta=meta,
        ev_key=np.zeros(n_ranks * n_events, dtype=np.uint64),
        ev_code=np.zeros(n_ranks * n_events, dtype=np.int32),
        ev_time=np.zeros(n_ranks * n_events),
        ev_meta=ev_meta,
    )


@inner
def _fp(key):
    """32-bit fingerprint of a block key; its low bits are the key's home in the table."""
    return (key * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)


@inner
def _entry(key, s):
    return (_fp(key) << np.uint64(32)) | np.uint64(s + 1)


# The helpers below take plain arrays (borrowed, no reference counting); the public kernels unpack
# the pool once per call. Reading arrays out of the NamedTuple inside loops would cost an NRT
# incref/decref pair per access.
#
# A table entry is ``fingerprint << 32 | (local slot + 1)`` (0 = empty): a probe compares
# fingerprints in the table itself and reads the slot's key only on a fingerprint match, and a
# deletion recomputes homes from the entries alone.
@inner
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


@inner
def _table_insert(table, tbase, tmask, key, s):
    e = _entry(key, s)
    i = np.int64((e >> np.uint64(32)) & np.uint64(tmask))
    while table[tbase + i] != 0:
        i = (i + 1) & tmask
    table[tbase + i] = e


@inner
def _table_pos(table, tbase, tmask, key, s):
    """Position of the entry of ``key`` held in slot ``s``, or -1."""
    e0 = _entry(key, s)
    i = np.int64((e0 >> np.uint64(32)) & np.uint64(tmask))
    while True:
        e = table[tbase + i]
        if e == 0:
            return -1
        if e == e0:
            return i
        i = (i + 1) & tmask


@inner
def _delete_at(table, tbase, tmask, i):
    """Empty position ``i`` (linear probing with backward-shift deletion: no tombstones, probes
    stay short)."""
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


@inner
def _table_delete(table, tbase, tmask, key, s):
    """Remove the entry of ``key`` held in slot ``s`` (if present)."""
    i = _table_pos(table, tbase, tmask, key, s)
    if i >= 0:
        _delete_at(table, tbase, tmask, i)


@inner
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


@inner
def _lru_push_tail(lru_prev, lru_next, meta, rank, sbase, s):
    t = meta[rank, TAIL]
    lru_prev[sbase + s] = t + 1
    lru_next[sbase + s] = 0
    if t >= 0:
        lru_next[sbase + t] = s + 1
    else:
        meta[rank, HEAD] = s
    meta[rank, TAIL] = s


@inner
def _take_slot(free_stack, meta, rank, sbase):
    """An unused slot: the last released one, else the next never-used one."""
    if meta[rank, NSTACK] > 0:
        meta[rank, NSTACK] -= 1
        return np.int64(free_stack[sbase + meta[rank, NSTACK]])
    s = meta[rank, NEXTNEW]
    meta[rank, NEXTNEW] += 1
    return s


@inner
def _give_slot(free_stack, meta, rank, sbase, s):
    free_stack[sbase + meta[rank, NSTACK]] = s
    meta[rank, NSTACK] += 1


_AHEAD = 6  # LRU entries a long eviction looks ahead (see ``_evict``)


@inner
def _evict(pool, rank, sbase, tbase, m):
    """Evict ``m`` blocks from the LRU head (the caller checked there are that many); returns a
    slot they left unused (the caller takes it over) or -1. Other slots freed go to the stack.

    Evicting a registered block looks its key up in the hash table: a cache miss on a table and a
    slot column that long prompts keep pushing out of the cache. A long eviction therefore walks
    the LRU a few entries ahead of itself and has the memory those entries will need fetched
    meanwhile (their key, then the key's home in the table): the misses overlap instead of
    following one another. Prefetches change no state."""
    meta = pool.meta
    run = pool.slot_run
    lru_next = pool.lru_next
    slot_key = pool.slot_key
    intab = pool.slot_intab
    spare = np.int64(-1)
    far = np.int64(-1)  # 2 * _AHEAD entries ahead: its key is fetched
    near = np.int64(-1)  # _AHEAD entries ahead: its table home is fetched (the key has arrived)
    if m > _AHEAD:
        near = meta[rank, HEAD]
        for _ in range(_AHEAD):
            if near < 0:
                break
            near = lru_next[sbase + near] - 1
        far = near
        for _ in range(_AHEAD):
            if far < 0:
                break
            prefetch_nb(slot_key, sbase + far)
            far = lru_next[sbase + far] - 1
    while m > 0:
        if near >= 0:
            if far >= 0:
                prefetch_nb(slot_key, sbase + far)
                prefetch_nb(intab, sbase + far)
                far = lru_next[sbase + far] - 1
            if intab[sbase + near]:
                prefetch_nb(pool.table, tbase + np.int64(_fp(slot_key[sbase + near]) & np.uint64(pool.tmask)))
            near = lru_next[sbase + near] - 1
        h = meta[rank, HEAD]
        c = run[sbase + h]
        if c > 0:  # a run of dead private blocks: evict as many as needed from it
            t = min(np.int64(c), m)
            run[sbase + h] = c - t
            m -= t
            meta[rank, NINACTIVE] -= t
            meta[rank, NEVICT] += t
            if c > t:
                break
        else:
            m -= 1
            meta[rank, NINACTIVE] -= 1
            meta[rank, NEVICT] += 1
            if pool.slot_intab[sbase + h]:
                if _unregister(pool.table, pool.slot_key, pool.slot_cnext, pool.slot_intab, tbase,
                               sbase, pool.tmask, h):
                    _feed(pool, rank, pool.slot_key[sbase + h], False)
            pool.slot_key[sbase + h] = 0
        _lru_unlink(pool.lru_prev, pool.lru_next, meta, rank, sbase, h)
        if spare >= 0:
            _give_slot(pool.free_stack, meta, rank, sbase, spare)
        spare = h
    return spare


@inline
def _new_blocks(pool, rank, sbase, tbase, m):
    """Take ``m`` blocks of capacity for new blocks: free ones first, then evictions (the slots
    they leave unused go to the slot stack)."""
    meta = pool.meta
    f = min(meta[rank, NFREE], m)
    meta[rank, NFREE] -= f
    if m > f:
        e = m - f
        h = meta[rank, HEAD]
        c = pool.slot_run[sbase + h]
        if c > e:
            # the usual case under load: the oldest inactive entry is a run of dead private
            # blocks longer than the need, which only gets shorter (``_evict``'s first case,
            # without the call)
            pool.slot_run[sbase + h] = c - e
            meta[rank, NINACTIVE] -= e
            meta[rank, NEVICT] += e
            return
        spare = _evict(pool, rank, sbase, tbase, e)
        if spare >= 0:
            _give_slot(pool.free_stack, meta, rank, sbase, spare)


@kernel_noalloc
def lookup_nb(pool, rank, key):
    """Local slot holding ``key`` on ``rank`` (active or inactive), or -1."""
    return _find(pool.table, pool.slot_key, rank * (pool.tmask + 1), rank * pool.cap, pool.tmask, key)


@kernel_noalloc
def can_use_nb(pool, rank, keys, n, n_hits):
    """True if blocks ``keys[:n]`` can all be made active on ``rank`` (the all-or-nothing check):
    the first ``n_hits`` are prefix-cache hits (a cached one must be reactivated), every other one
    is a new block."""
    extra = n - n_hits
    if pool.meta[rank, NACTIVE] + n <= pool.cap:
        return True  # fits even if every block needs a slot
    table = pool.table
    slot_key = pool.slot_key
    slot_ref = pool.slot_ref
    tmask = pool.tmask
    tbase = rank * (tmask + 1)
    sbase = rank * pool.cap
    for i in range(n_hits):
        s = _find(table, slot_key, tbase, sbase, tmask, keys[i])
        if s < 0 or slot_ref[sbase + s] == 0:
            extra += 1
    return pool.meta[rank, NACTIVE] + extra <= pool.cap


@inner
def _register(table, slot_key, cnext, intab, tbase, sbase, tmask, s):
    """Register slot ``s`` under its key: as the key's primary if the key is absent, else as its
    newest copy (hits go to the primary; a copy takes over when the primary leaves). True if
    the key was absent (it is now stored)."""
    key = slot_key[sbase + s]
    cnext[sbase + s] = 0
    intab[sbase + s] = 1
    e_new = _entry(key, s)
    fp = e_new >> np.uint64(32)
    i = np.int64(fp & np.uint64(tmask))
    while True:  # one probe: the key's entry, or the empty position where it goes
        e = table[tbase + i]
        if e == 0:
            table[tbase + i] = e_new
            return True
        if (e >> np.uint64(32)) == fp:
            p = np.int64(e & np.uint64(0xFFFFFFFF)) - 1
            if slot_key[sbase + p] == key:
                while cnext[sbase + p] != 0:
                    p = cnext[sbase + p] - 1
                cnext[sbase + p] = s + 1
                return False
        i = (i + 1) & tmask


@inner
def _unregister(table, slot_key, cnext, intab, tbase, sbase, tmask, s):
    """Remove registered slot ``s`` from its key (its next copy becomes the primary). True if
    it was the key's last copy (the key is removed)."""
    key = slot_key[sbase + s]
    i = _table_pos(table, tbase, tmask, key, s)
    nxt = cnext[sbase + s] - 1
    gone = False
    if i >= 0:  # s is the primary: the table entry moves to the next copy, or goes
        if nxt >= 0:
            table[tbase + i] = _entry(key, nxt)
        else:
            _delete_at(table, tbase, tmask, i)
            gone = True
    else:  # a later copy: unlink it from the list
        p = _find(table, slot_key, tbase, sbase, tmask, key)
        while p >= 0 and cnext[sbase + p] != s + 1:
            p = cnext[sbase + p] - 1
        if p >= 0:
            cnext[sbase + p] = cnext[sbase + s]
    cnext[sbase + s] = 0
    intab[sbase + s] = 0
    return gone


@inner
def _feed(pool, rank, key, stored):
    """Put a stored/removed event of ``key`` on rank ``rank`` on the KV event feed, if there is
    one (private keys, top bit set, are left out: no other request can match them, unless they
    are a session stream's, whose later turns do)."""
    if pool.ev_key.shape[0] == 0 or ((key >> np.uint64(63)) != 0 and pool.ev_meta[rank, EV_STREAMS] == 0):
        return
    m = pool.ev_key.shape[0] // pool.ev_meta.shape[0]
    em = pool.ev_meta
    if em[rank, EV_COUNT] == m:
        em[rank, EV_OVERFLOWED] = 1  # the caller re-runs with a larger feed
        return
    i = rank * m + (em[rank, EV_FIRST] + em[rank, EV_COUNT]) % m
    pool.ev_key[i] = key
    pool.ev_code[i] = 2 * rank + (1 if stored else 0)
    pool.ev_time[i] = np.inf  # the pass is under way: sealed at its end
    em[rank, EV_COUNT] += 1


@inner
def seal_feed_nb(pool, rank, end):
    """Stamp the events of ``rank``'s pass just run with its end ``end``: Dynamo publishes a
    pass's KV events when the pass completes (the newest entries of the rank's ring, the only
    ones not stamped)."""
    if pool.ev_key.shape[0] == 0:
        return
    m = pool.ev_key.shape[0] // pool.ev_meta.shape[0]
    em = pool.ev_meta
    j = em[rank, EV_COUNT] - 1
    while j >= 0:
        i = rank * m + (em[rank, EV_FIRST] + j) % m
        if pool.ev_time[i] != np.inf:
            break
        pool.ev_time[i] = end
        j -= 1


@inline
def alloc_anon_nb(pool, rank, m):
    """Make ``m`` new anonymous (private) blocks active (``alloc_nb`` without keys or slots).
    The caller has checked that they fit."""
    _new_blocks(pool, rank, rank * pool.cap, rank * (pool.tmask + 1), m)
    pool.meta[rank, NACTIVE] += m


@inline
def alloc_nb(pool, rank, keys, n, slots, off, n_hits, n_keyed, n_store, hit_slots):
    """Make ``n`` blocks active; the slot of block ``i < n_store`` goes to ``slots[off + i]``
    (the others are found again by their key: see ``free_slots_nb``).

    The first ``n_hits`` are prefix-cache hits on ``keys[:n_hits]``: a reference to the key's
    primary block (reactivated if cached), which ``hit_slots[i]`` names if it was just looked up
    (``match_slots_nb``; -1 or a slot that no longer holds the key: looked up again). Every other
    block is new: a free block, else the oldest inactive one (evicted). New blocks below
    ``n_keyed`` get a slot holding ``keys[i]``, not registered yet (``register_nb`` registers a
    block once it is fully computed); the rest are anonymous private blocks (no slot, keys not
    read). The caller has checked ``can_use_nb``.
    """
    table = pool.table
    slot_key = pool.slot_key
    slot_ref = pool.slot_ref
    intab = pool.slot_intab
    lru_prev = pool.lru_prev
    lru_next = pool.lru_next
    meta = pool.meta
    tmask = pool.tmask
    tbase = rank * (tmask + 1)
    sbase = rank * pool.cap
    for i in range(n_hits):
        s = hit_slots[i]
        if s < 0 or slot_key[sbase + s] != keys[i]:  # (a slot keeps its key until it is freed)
            s = _find(table, slot_key, tbase, sbase, tmask, keys[i])
        if slot_ref[sbase + s] == 0:  # cached hit: reactivate
            _lru_unlink(lru_prev, lru_next, meta, rank, sbase, np.int64(s))
            meta[rank, NINACTIVE] -= 1
            meta[rank, NACTIVE] += 1
        slot_ref[sbase + s] += 1
        if i < n_store:
            slots[off + i] = s
    if n > n_hits:
        # every new block at once (the blocks evicted are the same either way: new blocks enter
        # the LRU only when released), then slots for the keyed ones
        alloc_anon_nb(pool, rank, n - n_hits)
    for i in range(n_hits, n_keyed):
        s = _take_slot(pool.free_stack, meta, rank, sbase)
        slot_key[sbase + s] = keys[i]
        slot_ref[sbase + s] = 1
        intab[sbase + s] = 0
        if i < n_store:
            slots[off + i] = s


@inner
def register_nb(pool, rank, slots, off, j0, j1):
    """Register the slot-held blocks ``j0 .. j1-1`` of a request (``slots[off + j]``), those not
    yet registered (a private block is registered only at a preemption: ``free_slots_nb``)."""
    sbase = rank * pool.cap
    tbase = rank * (pool.tmask + 1)
    for j in range(j0, j1):
        s = np.int64(slots[off + j])
        if not pool.slot_intab[sbase + s]:
            if _register(pool.table, pool.slot_key, pool.slot_cnext, pool.slot_intab, tbase, sbase,
                         pool.tmask, s):
                _feed(pool, rank, pool.slot_key[sbase + s], True)


@inline
def release_dead_nb(pool, rank, nb, n_held, n_full):
    """A finished request's anonymous blocks ``n_held .. nb-1`` (the tail of its table) leave by
    count: those not fully computed (``j >= n_full``) go back to the free list, the full ones
    stay cached, dead, as one run node at the LRU tail (merged with a run already there: dead
    blocks next to each other, their order cannot matter). ``free_slots_nb`` releases the rest;
    a request without slot-holding blocks needs only this."""
    meta = pool.meta
    if nb <= n_held:
        return
    m = nb - n_held
    freed = max(nb - max(n_full, n_held), 0)
    meta[rank, NACTIVE] -= m
    meta[rank, NFREE] += freed
    dead = m - freed
    if dead > 0:
        sbase = rank * pool.cap
        run = pool.slot_run
        t = meta[rank, TAIL]
        if t >= 0 and run[sbase + t] > 0:
            run[sbase + t] += dead
        else:
            s = _take_slot(pool.free_stack, meta, rank, sbase)
            run[sbase + s] = dead
            _lru_push_tail(pool.lru_prev, pool.lru_next, meta, rank, sbase, s)
        meta[rank, NINACTIVE] += dead


@kernel_noalloc
def free_slots_nb(pool, rank, slots, off, nb, n_full, keep, row, n_held, n_store):
    """Drop one reference to each of the ``nb`` blocks of request ``row``, last block first
    (Dynamo's release order). Blocks ``j < n_held`` hold slots: ``slots[off + j]`` for
    ``j < n_store``, else the block is found by its (private, registered) key; the rest are
    anonymous. At refcount 0 block ``j`` becomes the newest inactive entry if ``j < n_full``
    (fully computed), else it is freed. ``keep``: the request may come back (it was preempted),
    so its private cached blocks are registered to be found again; a finished request's private
    blocks stay cached (they take their place in the LRU) but unregistered, as no request can ask
    for them: its anonymous ones as one run node."""
    table = pool.table
    slot_key = pool.slot_key
    slot_ref = pool.slot_ref
    intab = pool.slot_intab
    cnext = pool.slot_cnext
    lru_prev = pool.lru_prev
    lru_next = pool.lru_next
    free_stack = pool.free_stack
    meta = pool.meta
    tmask = pool.tmask
    tbase = rank * (tmask + 1)
    sbase = rank * pool.cap
    j = nb - 1
    # anonymous blocks (always the tail of the table): the partial one freed, the full ones cached
    if not keep:
        release_dead_nb(pool, rank, nb, n_held, n_full)
        j = min(j, n_held - 1)
    while j >= n_held:  # (kept: they get slots and are registered, to be found again)
        meta[rank, NACTIVE] -= 1
        if j >= n_full:
            meta[rank, NFREE] += 1
        else:
            s = _take_slot(free_stack, meta, rank, sbase)
            slot_key[sbase + s] = unique_key_nb(row, j)
            slot_ref[sbase + s] = 0
            if _register(table, slot_key, cnext, intab, tbase, sbase, tmask, s):
                _feed(pool, rank, slot_key[sbase + s], True)  # (a stream's: its next turn looks for it)
            _lru_push_tail(lru_prev, lru_next, meta, rank, sbase, s)
            meta[rank, NINACTIVE] += 1
        j -= 1
    while j >= 0:
        if j < n_store:
            s = np.int64(slots[off + j])
        else:  # a private block hit again after a preemption: the primary of its key (held)
            s = _find(table, slot_key, tbase, sbase, tmask, unique_key_nb(row, j))
        slot_ref[sbase + s] -= 1
        if slot_ref[sbase + s] == 0:
            meta[rank, NACTIVE] -= 1
            if j < n_full:
                if keep and not intab[sbase + s]:
                    if _register(table, slot_key, cnext, intab, tbase, sbase, tmask, s):
                        _feed(pool, rank, slot_key[sbase + s], True)
                _lru_push_tail(lru_prev, lru_next, meta, rank, sbase, s)
                meta[rank, NINACTIVE] += 1
            else:
                if intab[sbase + s]:
                    if _unregister(table, slot_key, cnext, intab, tbase, sbase, tmask, s):
                        _feed(pool, rank, slot_key[sbase + s], False)
                slot_key[sbase + s] = 0
                _give_slot(free_stack, meta, rank, sbase, s)
                meta[rank, NFREE] += 1
        j -= 1


@kernel
def use_nb(pool, rank, keys, n):
    """``alloc_nb`` with every key looked up, slots discarded (for tests and tools)."""
    slots = np.empty(max(n, 1), dtype=np.int64)
    none = np.full(1, -1, dtype=np.int64)
    sbase = rank * pool.cap
    for i in range(n):  # blocks present are hits, the others new blocks registered at once
        hit = lookup_nb(pool, rank, keys[i]) >= 0
        alloc_nb(pool, rank, keys[i:i + 1], 1, slots, i, 1 if hit else 0, 1, 1, none)
        if not hit and not pool.slot_intab[sbase + slots[i]]:
            register_nb(pool, rank, slots, 0, i, i + 1)


@kernel
def release_nb(pool, rank, key, cacheable):
    """Drop one reference to the registered block ``key``; at 0 it becomes inactive if
    ``cacheable``, else free (for tests and tools)."""
    s = lookup_nb(pool, rank, key)
    slots = np.empty(1, dtype=np.int64)
    slots[0] = s
    free_slots_nb(pool, rank, slots, 0, 1, 1 if cacheable else 0, True, 0, 1, 1)


@inline
def _match(pool, rank, keys, n, out, keep):
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
        if keep:
            out[i] = s
        matched += 1
        if slot_ref[sbase + s] > 0:
            active += 1
    return matched, active


@inner
def match_slots_nb(pool, rank, keys, n, out):
    """``match_prefix_nb`` that also writes the slot of each matched block to ``out`` (for
    ``alloc_nb``'s hits)."""
    return _match(pool, rank, keys, n, out, True)


@kernel_noalloc
def match_prefix_nb(pool, rank, keys, n):
    """Leading blocks of ``keys[:n]`` present on ``rank``: returns (matched, matched_and_active).

    Active blocks form prefix-closed chains (a holder holds every earlier block of its chain), so the
    active ones among the matched blocks are counted wherever they stand.
    """
    return _match(pool, rank, keys, n, pool.free_stack, False)  # (no slots written)
