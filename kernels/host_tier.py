"""The host-memory KV tier (G2) of each rank: which blocks it holds, and its two copy lanes.

Dynamo 1.6.1's host tier (docs/decisions/0350 and 0351) as state the event loop can drive; it
knows nothing of the GPU pool, the scheduler or the clock's events, which call it:

* **Entries.** A block key is absent, *pending* (a store of it was prepared or is being copied:
  the transfer id says which) or *resident*. A store cohort takes its missing blocks whole or not
  at all; entries count against the capacity from the moment they are prepared.
* **Eviction (LRU).** When a cohort's missing blocks do not fit the free entries, the least
  recently used resident blocks that no load is reading and that are not in the cohort make
  room; if there are not enough of them, nothing changes and the caller retries at its next
  pass (``RETRY_CAPACITY``, Dynamo's ``RetryCapacity``). Recency is an epoch: a touch gives one
  block a new epoch, a completed transfer gives its blocks one epoch together, ordered inside it
  by Dynamo's sequence hash of the block (``thash``; decision 0354). The LRU is a ring per rank
  of (key, hash, epoch) items in (epoch, hash) order; an item is live while its entry is
  resident with that epoch (a later touch, a load or an eviction leaves it dead in place).
* **Lanes.** Each direction is one FIFO lane: a transfer of ``n`` blocks takes
  ``n * block_bytes / (GB/s * 1e6)`` ms (0 GB/s: no time) and starts at the later of the lane's
  previous end and its ready time (submission, or a later fence, plus the first-byte latency).
  Stores are prepared during a pass and submitted together at its end (``submit_prepared_nb``);
  a load is submitted when it is scheduled.
* **Completions** come in (deadline, store before load, transfer id) order, Dynamo's order of
  its deadline set; within a lane deadlines never decrease, so two queue heads give that order.
  A store's blocks become resident; a load's blocks stop being "loading".
* **Evicted blocks a kv_router still counts** (only with one): Dynamo publishes a host block's
  removal when the pass that evicted it ends, and the router applies it after its KV event lag;
  until then the block stays in a ring of the rank's evicted blocks (decision 0475).
* **Loads** mark their blocks as loading (Dynamo's ``load_by_key``): another request whose host
  prefix meets such a block waits.

Transfers live in a ring per rank (``n_live`` slots, indexed by id modulo the ring), their block
keys in a ring of keys per rank; a transfer that would overwrite a live one answers ``LOG_FULL``
(the caller reruns with larger rings). Rank ``k`` owns table entries ``[k * tsize, (k+1) * tsize)``
(linear probing; an evicted entry's followers shift back, so no table position is kept across
calls).
"""

from typing import NamedTuple

import numpy as np

from fastsim.kernels.jit import inner, kernel, kernel_noalloc

# lookup answers (Dynamo's ``Lookup``)
MISS, PENDING, HIT = 0, 1, 2
# prepare_store_nb / schedule_load_nb answers
PREPARED, ALREADY_PRESENT, RETRY_CAPACITY, LOG_FULL = 0, 1, 2, 3
# transfer kinds, in Dynamo's same-deadline completion order
STORE, LOAD = 0, 1
_RESIDENT = np.int64(-1)  # entry state; > 0: pending store (transfer id + 1); 0: empty slot
# entry state of a block reserved for a read from the G3 tier (Dynamo's ``External`` transfer)
_EXTERNAL = np.int64(-2)
# per-rank integer meta columns
(ENTRIES, NEXT_ID, D2H_HEAD, D2H_SUBMITTED, D2H_TAIL, H2D_HEAD, H2D_TAIL, KEY_HEAD,
 KEY_TAIL, LRU_HEAD, LRU_TAIL, CLOCK, EVICTED, GHOST_HEAD, GHOST_TAIL, GHOST_SEALED, GHOST_LOST) = range(17)
# per-rank float meta columns
D2H_END, H2D_END = 0, 1


class HostTier(NamedTuple):
    """Flat state of every rank's host tier (see the module docstring)."""

    cap: int  # host blocks per rank
    tmask: int  # key table size - 1 (a power of two >= 2 * cap)
    block_bytes: float  # bytes of one block (block_size * kv_cache_bytes_per_token)
    d2h_bpms: float  # bytes per ms of the device-to-host lane (inf: instantaneous)
    h2d_bpms: float
    latency_ms: float  # first-byte latency of every transfer
    ghost_lag: float  # the KV event lag of the kv_router that counts the evicted blocks (gkey)
    tkey: np.ndarray  # uint64[R * tsize]: entry keys
    tstate: np.ndarray  # int64[R * tsize]: 0 empty, -1 resident, id + 1 pending store
    tload: np.ndarray  # int64[R * tsize]: id + 1 of the load copying the block back (0: none)
    # when the entry's store completed (inf: not resident): Dynamo publishes a host block's
    # stored KV event then, and its kv_router counts the block from that event on (0353)
    tres: np.ndarray  # float64[R * tsize]
    thash: np.ndarray  # uint64[R * tsize]: Dynamo's sequence hash of the entry's block
    tepoch: np.ndarray  # int64[R * tsize]: its LRU epoch (0: not in the LRU: pending or loading)
    tprot: np.ndarray  # int8[R * tsize]: scratch: in the cohort being admitted (not a victim)
    # writes to the G3 tier reading the block (it leaves the LRU while any does; 0355)
    tpin: np.ndarray  # int64[R * tsize]
    # the LRU ring of each rank, ``n_lru`` items a rank (module docstring)
    lkey: np.ndarray  # uint64[R * n_lru]
    lhash: np.ndarray  # uint64[R * n_lru]
    lep: np.ndarray  # int64[R * n_lru]
    # transfers, slot = id % n_live per rank: kind, request row, first key (in the key ring),
    # blocks, deadline (inf until submitted)
    xkind: np.ndarray  # int8[R * n_live]
    xrow: np.ndarray  # int64[R * n_live]
    xfirst: np.ndarray  # int64[R * n_live]
    xn: np.ndarray  # int64[R * n_live]
    xdead: np.ndarray  # float64[R * n_live]
    d2h: np.ndarray  # int64[R * n_live]: ring of store ids in submission order
    h2d: np.ndarray  # int64[R * n_live]: ring of load ids
    keys: np.ndarray  # uint64[R * n_keys]: ring of the transfers' block keys
    # evicted blocks a lagging kv_router still counts (``n_ghost`` items a rank, none without a
    # lag): the key, when it became resident, and when its removal was published (inf until the
    # pass that evicted it ends); the router drops them once their removal reaches it (0475)
    gkey: np.ndarray  # uint64[R * n_ghost]
    gres: np.ndarray  # float64[R * n_ghost]
    grem: np.ndarray  # float64[R * n_ghost]
    meta: np.ndarray  # int64[R, 17]
    fmeta: np.ndarray  # float64[R, 2]: each lane's end


def bytes_per_ms(gbps):
    """Decimal GB/s as bytes per ms; 0 GB/s is an instantaneous lane (inf)."""
    return np.inf if gbps == 0 else float(gbps) * 1e6


def make_host_tier(n_ranks, cap, block_size, kv_cache_bytes_per_token, d2h_gbps, h2d_gbps,
                   latency_ms=0.0, n_live=1024, n_keys=1 << 16, n_ghost=0, ghost_lag=0.0):
    """Empty host tiers of ``cap`` blocks for ``n_ranks`` ranks, with room for ``n_live``
    transfers in flight and ``n_keys`` of their block keys per rank, and for ``n_ghost`` evicted
    blocks whose removal a kv_router with a KV event lag of ``ghost_lag`` ms has not seen yet (0:
    no such router)."""
    tsize = 1
    while tsize < 2 * cap:
        tsize *= 2
    meta = np.zeros((n_ranks, 17), dtype=np.int64)
    n_lru = 4 * cap + 64  # live items are at most ``cap``: the ring compacts when it is full
    return HostTier(
        cap=cap, tmask=tsize - 1, block_bytes=float(block_size * kv_cache_bytes_per_token),
        d2h_bpms=bytes_per_ms(d2h_gbps), h2d_bpms=bytes_per_ms(h2d_gbps),
        latency_ms=float(latency_ms), ghost_lag=float(ghost_lag),
        tkey=np.zeros(n_ranks * tsize, dtype=np.uint64),
        tstate=np.zeros(n_ranks * tsize, dtype=np.int64),
        tload=np.zeros(n_ranks * tsize, dtype=np.int64),
        tres=np.full(n_ranks * tsize, np.inf),
        thash=np.zeros(n_ranks * tsize, dtype=np.uint64),
        tepoch=np.zeros(n_ranks * tsize, dtype=np.int64),
        tprot=np.zeros(n_ranks * tsize, dtype=np.int8),
        tpin=np.zeros(n_ranks * tsize, dtype=np.int64),
        lkey=np.zeros(n_ranks * n_lru, dtype=np.uint64),
        lhash=np.zeros(n_ranks * n_lru, dtype=np.uint64),
        lep=np.zeros(n_ranks * n_lru, dtype=np.int64),
        xkind=np.zeros(n_ranks * n_live, dtype=np.int8),
        xrow=np.zeros(n_ranks * n_live, dtype=np.int64),
        xfirst=np.zeros(n_ranks * n_live, dtype=np.int64),
        xn=np.zeros(n_ranks * n_live, dtype=np.int64),
        xdead=np.full(n_ranks * n_live, np.inf),
        d2h=np.zeros(n_ranks * n_live, dtype=np.int64),
        h2d=np.zeros(n_ranks * n_live, dtype=np.int64),
        keys=np.zeros(n_ranks * n_keys, dtype=np.uint64),
        gkey=np.zeros(n_ranks * n_ghost, dtype=np.uint64),
        gres=np.zeros(n_ranks * n_ghost),
        grem=np.zeros(n_ranks * n_ghost),
        meta=meta,
        fmeta=np.zeros((n_ranks, 2)),
    )


@inner
def _home_of(tmask, key):
    return np.int64((key * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)) & tmask


@inner
def _home(ht, key):
    return _home_of(ht.tmask, key)


@inner
def _pos(ht, k, key):
    """Table position of ``key`` on rank ``k``, or of the empty entry where it would go."""
    base = k * (ht.tmask + 1)
    i = _home(ht, key)
    while True:
        if ht.tstate[base + i] == 0 or ht.tkey[base + i] == key:
            return base + i
        i = (i + 1) & ht.tmask


@kernel_noalloc
def lookup_nb(ht, k, key):
    """MISS, PENDING (a store of it is prepared or in flight) or HIT (resident) on rank ``k``."""
    s = ht.tstate[_pos(ht, k, key)]
    if s == 0:
        return MISS
    return HIT if s == _RESIDENT else PENDING


@inner
def resident_since_nb(tkey, tstate, tres, tmask, k, key):
    """When ``key`` became resident on rank ``k`` (inf: it is not), from the tier's own arrays
    (the kv_router holds them without the rest of the tier)."""
    base = k * (tmask + 1)
    i = _home_of(tmask, key)
    while True:
        s = tstate[base + i]
        if s == 0:
            return np.inf
        if tkey[base + i] == key:
            return tres[base + i] if s == _RESIDENT else np.inf
        i = (i + 1) & tmask


@kernel_noalloc
def loading_nb(ht, k, key):
    """True if a load is copying ``key`` back to rank ``k``'s GPU."""
    return ht.tload[_pos(ht, k, key)] != 0


@inner
def _new_transfer(ht, k, kind, row, n):
    """Record a transfer of ``n`` blocks, whose keys the caller writes to ``_key_at`` 0 .. n-1;
    its id, or -1 if the rings are full."""
    meta = ht.meta
    n_live = ht.xkind.shape[0] // meta.shape[0]
    n_ring = ht.keys.shape[0] // meta.shape[0]
    tid = meta[k, NEXT_ID]
    # the oldest live transfer of either lane must not share this slot, and the keys must fit
    oldest = tid
    if meta[k, D2H_TAIL] > meta[k, D2H_HEAD]:
        oldest = min(oldest, ht.d2h[k * n_live + meta[k, D2H_HEAD] % n_live])
    if meta[k, H2D_TAIL] > meta[k, H2D_HEAD]:
        oldest = min(oldest, ht.h2d[k * n_live + meta[k, H2D_HEAD] % n_live])
    if tid - oldest >= n_live or meta[k, KEY_TAIL] + n - meta[k, KEY_HEAD] > n_ring:
        return np.int64(-1)
    meta[k, NEXT_ID] = tid + 1
    x = k * n_live + tid % n_live
    ht.xkind[x] = kind
    ht.xrow[x] = row
    ht.xfirst[x] = meta[k, KEY_TAIL]
    ht.xn[x] = n
    ht.xdead[x] = np.inf
    meta[k, KEY_TAIL] += n
    return tid


@inner
def _key_at(ht, k, tid, i):
    """Position in the key ring of block ``i`` of rank ``k``'s transfer ``tid``."""
    n_live = ht.xkind.shape[0] // ht.meta.shape[0]
    n_ring = ht.keys.shape[0] // ht.meta.shape[0]
    return k * n_ring + (ht.xfirst[k * n_live + tid % n_live] + i) % n_ring


# ----------------------------------------------------------------------------- the LRU
@inner
def _compact(ht, k):
    """Keep the live items of rank ``k``'s LRU ring, in order, at its front."""
    meta = ht.meta
    base = k * (ht.lkey.shape[0] // meta.shape[0])
    j = np.int64(0)
    for i in range(meta[k, LRU_HEAD], meta[k, LRU_TAIL]):
        if _live(ht, k, base + i):
            ht.lkey[base + j] = ht.lkey[base + i]
            ht.lhash[base + j] = ht.lhash[base + i]
            ht.lep[base + j] = ht.lep[base + i]
            j += 1
    meta[k, LRU_HEAD] = 0
    meta[k, LRU_TAIL] = j


@inner
def _lru_push(ht, k, key, h, epoch):
    """Append one item to rank ``k``'s LRU ring (compacting it first when it is full)."""
    meta = ht.meta
    n_lru = ht.lkey.shape[0] // meta.shape[0]
    base = k * n_lru
    if meta[k, LRU_TAIL] == n_lru:
        _compact(ht, k)
    i = base + meta[k, LRU_TAIL]
    ht.lkey[i] = key
    ht.lhash[i] = h
    ht.lep[i] = epoch
    meta[k, LRU_TAIL] += 1


@inner
def _live(ht, k, i):
    """True if ring item ``i`` is its block's current recency (resident, in the LRU, same epoch)."""
    if ht.lep[i] <= 0:
        return False
    p = _pos(ht, k, ht.lkey[i])
    return ht.tstate[p] == _RESIDENT and ht.tepoch[p] == ht.lep[i]


@kernel_noalloc
def touch_nb(ht, k, key):
    """A recency of its own for ``key`` on rank ``k`` if it is resident and no load reads it
    (Dynamo's ``touch``: other blocks ignore it)."""
    p = _pos(ht, k, key)
    if ht.tstate[p] != _RESIDENT or ht.tload[p] != 0 or ht.tpin[p] != 0:
        return
    ht.meta[k, CLOCK] += 1
    ht.tepoch[p] = ht.meta[k, CLOCK]
    _lru_push(ht, k, key, ht.thash[p], ht.meta[k, CLOCK])


@inner
def _sift(h, kk, e, lo, root, end):
    """Heap sift-down of the (hash, key, epoch) items ``lo + root .. lo + end - 1`` by hash."""
    while True:
        child = 2 * root + 1
        if child >= end:
            return
        if child + 1 < end and h[lo + child + 1] > h[lo + child]:
            child += 1
        if h[lo + root] >= h[lo + child]:
            return
        a = lo + root
        b = lo + child
        h[a], h[b] = h[b], h[a]
        kk[a], kk[b] = kk[b], kk[a]
        e[a], e[b] = e[b], e[a]
        root = child


@inner
def _touch_cohort_end(ht, k, first):
    """The ring items pushed since ``first`` (one transfer's blocks) share one epoch, ordered
    by their sequence hash (Dynamo's ``touch_cohort``)."""
    meta = ht.meta
    n_lru = ht.lkey.shape[0] // meta.shape[0]
    lo = k * n_lru + first
    n = meta[k, LRU_TAIL] - first
    for root in range(n // 2 - 1, -1, -1):  # heapsort by hash, in place
        _sift(ht.lhash, ht.lkey, ht.lep, lo, root, n)
    for end in range(n - 1, 0, -1):
        ht.lhash[lo], ht.lhash[lo + end] = ht.lhash[lo + end], ht.lhash[lo]
        ht.lkey[lo], ht.lkey[lo + end] = ht.lkey[lo + end], ht.lkey[lo]
        ht.lep[lo], ht.lep[lo + end] = ht.lep[lo + end], ht.lep[lo]
        _sift(ht.lhash, ht.lkey, ht.lep, lo, 0, end)


@inner
def _cohort_room(ht, k, n_new):
    """Room in rank ``k``'s ring for ``n_new`` items pushed together (compacted if needed), so
    that a cohort's items stay contiguous; returns the ring index of the first."""
    meta = ht.meta
    if meta[k, LRU_TAIL] + n_new > ht.lkey.shape[0] // meta.shape[0]:
        _compact(ht, k)
    return meta[k, LRU_TAIL]


@inner
def _delete(ht, k, p):
    """Remove the entry at table position ``p`` of rank ``k`` (linear probing: the entries after it
    in its probe run shift back to keep every key reachable)."""
    base = k * (ht.tmask + 1)
    i = p - base
    j = i
    while True:
        j = (j + 1) & ht.tmask
        if ht.tstate[base + j] == 0:
            break
        home = _home(ht, ht.tkey[base + j])
        # the entry at j may move to i unless its home lies cyclically in (i, j]
        if (i <= j and (i < home <= j)) or (i > j and (home <= j or home > i)):
            continue
        a = base + i
        b = base + j
        ht.tkey[a] = ht.tkey[b]
        ht.tstate[a] = ht.tstate[b]
        ht.tload[a] = ht.tload[b]
        ht.tres[a] = ht.tres[b]
        ht.thash[a] = ht.thash[b]
        ht.tepoch[a] = ht.tepoch[b]
        ht.tprot[a] = ht.tprot[b]
        ht.tpin[a] = ht.tpin[b]
        i = j
    a = base + i
    ht.tkey[a] = 0
    ht.tstate[a] = 0
    ht.tload[a] = 0
    ht.tres[a] = np.inf
    ht.thash[a] = 0
    ht.tepoch[a] = 0
    ht.tprot[a] = 0
    ht.tpin[a] = 0


@inner
def _keep_ghost(ht, k, p):
    """Entry ``p`` of rank ``k`` is being evicted: keep it for the lagging kv_router, which counts
    it until its removal event reaches it (the removal is published when the pass ends)."""
    meta = ht.meta
    n_ghost = ht.gkey.shape[0] // meta.shape[0]
    if meta[k, GHOST_TAIL] - meta[k, GHOST_HEAD] >= n_ghost:
        meta[k, GHOST_LOST] = 1  # the caller reruns with a larger ring
        return
    g = k * n_ghost + meta[k, GHOST_TAIL] % n_ghost
    ht.gkey[g] = ht.tkey[p]
    ht.gres[g] = ht.tres[p]
    ht.grem[g] = np.inf
    meta[k, GHOST_TAIL] += 1


@kernel_noalloc
def seal_ghosts_nb(ht, k, now):
    """The pass of rank ``k`` ending at ``now`` publishes the removals of the blocks it evicted;
    those whose removal reached the router by ``now`` are dropped (the router's reads come in
    time order, so none of them is read again)."""
    if ht.gkey.shape[0] == 0:
        return
    meta = ht.meta
    n_ghost = ht.gkey.shape[0] // meta.shape[0]
    base = k * n_ghost
    for i in range(meta[k, GHOST_SEALED], meta[k, GHOST_TAIL]):
        ht.grem[base + i % n_ghost] = now
    meta[k, GHOST_SEALED] = meta[k, GHOST_TAIL]
    while meta[k, GHOST_HEAD] < meta[k, GHOST_SEALED] and \
            ht.grem[base + meta[k, GHOST_HEAD] % n_ghost] + ht.ghost_lag <= now:
        meta[k, GHOST_HEAD] += 1


@inner
def counted_ghost_nb(gkey, gres, grem, meta, k, key, seen):
    """Whether an evicted block ``key`` of rank ``k`` still counts for a router that has seen the
    events published up to ``seen``: resident by then, its removal published after. Drops the
    ghosts whose removal was published by ``seen`` (the router's times never go back)."""
    n_ghost = gkey.shape[0] // meta.shape[0]
    base = k * n_ghost
    while meta[k, GHOST_HEAD] < meta[k, GHOST_SEALED] and grem[base + meta[k, GHOST_HEAD] % n_ghost] <= seen:
        meta[k, GHOST_HEAD] += 1
    for i in range(meta[k, GHOST_HEAD], meta[k, GHOST_TAIL]):
        g = base + i % n_ghost
        if gkey[g] == key and gres[g] <= seen < grem[g]:
            return True
    return False


@inner
def _evict(ht, k, keys, n, needed):
    """Evict ``needed`` least recently used blocks of rank ``k`` that are not among ``keys[:n]``:
    True, or False (nothing changed) when fewer than ``needed`` are evictable."""
    meta = ht.meta
    n_lru = ht.lkey.shape[0] // meta.shape[0]
    base = k * n_lru
    for i in range(n):
        p = _pos(ht, k, keys[i])
        if ht.tstate[p] != 0:
            ht.tprot[p] = 1
    found = np.int64(0)
    i = meta[k, LRU_HEAD]
    while found < needed and i < meta[k, LRU_TAIL]:
        if not _live(ht, k, base + i):
            if i == meta[k, LRU_HEAD]:
                meta[k, LRU_HEAD] += 1
        elif ht.tprot[_pos(ht, k, ht.lkey[base + i])] == 0:
            found += 1
        i += 1
    ok = found == needed
    if ok:  # the same walk again, evicting
        i = meta[k, LRU_HEAD]
        left = needed
        while left > 0:
            if _live(ht, k, base + i):
                p = _pos(ht, k, ht.lkey[base + i])
                if ht.tprot[p] == 0:
                    ht.lep[base + i] = 0
                    if ht.gkey.shape[0] > 0:
                        _keep_ghost(ht, k, p)
                    _delete(ht, k, p)
                    meta[k, ENTRIES] -= 1
                    meta[k, EVICTED] += 1
                    left -= 1
            i += 1
    for i in range(n):
        p = _pos(ht, k, keys[i])
        if ht.tstate[p] != 0:
            ht.tprot[p] = 0
    return ok


@kernel_noalloc
def prepare_store_nb(ht, k, row, keys, hashes, n):
    """Admit the missing blocks of request ``row``'s store cohort ``keys[:n]`` (distinct keys, as
    a request's chained block keys are; ``hashes[:n]`` their Dynamo sequence hashes) on rank
    ``k``, whole or not at all, evicting least recently used blocks outside the cohort to make
    room: returns (PREPARED, id), (ALREADY_PRESENT, -1), (RETRY_CAPACITY, -1) when not enough
    blocks can be evicted (nothing changes) or (LOG_FULL, -1). The prepared store is submitted
    at the pass end (``submit_prepared_nb``)."""
    missing = 0
    for i in range(n):
        if ht.tstate[_pos(ht, k, keys[i])] == 0:
            missing += 1
    if missing == 0:
        return ALREADY_PRESENT, np.int64(-1)
    if missing > ht.cap:
        return RETRY_CAPACITY, np.int64(-1)
    meta = ht.meta
    n_live = ht.xkind.shape[0] // meta.shape[0]
    # the transfer slot first: a full ring must leave the tier as it was (the run restarts)
    oldest = meta[k, NEXT_ID]
    if meta[k, D2H_TAIL] > meta[k, D2H_HEAD]:
        oldest = min(oldest, ht.d2h[k * n_live + meta[k, D2H_HEAD] % n_live])
    if meta[k, H2D_TAIL] > meta[k, H2D_HEAD]:
        oldest = min(oldest, ht.h2d[k * n_live + meta[k, H2D_HEAD] % n_live])
    n_ring = ht.keys.shape[0] // meta.shape[0]
    if meta[k, NEXT_ID] - oldest >= n_live or meta[k, KEY_TAIL] + missing - meta[k, KEY_HEAD] > n_ring:
        return LOG_FULL, np.int64(-1)
    if missing > ht.cap - meta[k, ENTRIES]:
        if not _evict(ht, k, keys, n, missing - (ht.cap - meta[k, ENTRIES])):
            return RETRY_CAPACITY, np.int64(-1)
    tid = _new_transfer(ht, k, STORE, row, missing)
    j = 0
    for i in range(n):  # the transfer's blocks: the missing ones, in cohort order
        p = _pos(ht, k, keys[i])
        if ht.tstate[p] == 0:
            ht.keys[_key_at(ht, k, tid, j)] = keys[i]
            j += 1
            ht.tkey[p] = keys[i]
            ht.tstate[p] = tid + 1
            ht.thash[p] = hashes[i]
            ht.tepoch[p] = 0
            meta[k, ENTRIES] += 1
    ht.d2h[k * n_live + meta[k, D2H_TAIL] % n_live] = tid
    meta[k, D2H_TAIL] += 1
    return PREPARED, tid


@inner
def _lane_end(start, bytes_, bpms):
    if bpms == np.inf:
        return start
    return start + bytes_ / bpms


@kernel_noalloc
def submit_prepared_nb(ht, k, now):
    """Submit rank ``k``'s prepared stores at the end of a pass (``now``), in preparation order.
    Returns how many were submitted."""
    meta = ht.meta
    n_live = ht.xkind.shape[0] // meta.shape[0]
    m = 0
    while meta[k, D2H_SUBMITTED] < meta[k, D2H_TAIL]:
        tid = ht.d2h[k * n_live + meta[k, D2H_SUBMITTED] % n_live]
        x = k * n_live + tid % n_live
        start = max(ht.fmeta[k, D2H_END], now + ht.latency_ms)
        end = _lane_end(start, float(ht.xn[x] * ht.block_bytes), ht.d2h_bpms)
        ht.fmeta[k, D2H_END] = end
        ht.xdead[x] = end
        meta[k, D2H_SUBMITTED] += 1
        m += 1
    return m


@kernel_noalloc
def schedule_load_nb(ht, k, row, keys, n, now, not_before):
    """Queue the copy of resident blocks ``keys[:n]`` back to rank ``k``'s GPU for request
    ``row``, ready at ``max(now, not_before)`` (a fence on the GPU blocks it fills) plus the
    first-byte latency: (PREPARED, id) or (LOG_FULL, -1). The caller checked with ``lookup_nb``
    and ``loading_nb`` that every block is resident and not loading."""
    tid = _new_transfer(ht, k, LOAD, row, n)
    if tid < 0:
        return LOG_FULL, np.int64(-1)
    for i in range(n):
        ht.keys[_key_at(ht, k, tid, i)] = keys[i]
    meta = ht.meta
    n_live = ht.xkind.shape[0] // meta.shape[0]
    x = k * n_live + tid % n_live
    start = max(ht.fmeta[k, H2D_END], max(now, not_before) + ht.latency_ms)
    end = _lane_end(start, float(n * ht.block_bytes), ht.h2d_bpms)
    ht.fmeta[k, H2D_END] = end
    ht.xdead[x] = end
    for i in range(n):  # a block a load reads leaves the LRU until the load completes
        q = _pos(ht, k, keys[i])
        ht.tload[q] = tid + 1
        ht.tepoch[q] = 0
    ht.h2d[k * n_live + meta[k, H2D_TAIL] % n_live] = tid
    meta[k, H2D_TAIL] += 1
    return PREPARED, tid


@kernel_noalloc
def deadline_nb(ht, k, tid):
    """Completion time of rank ``k``'s transfer ``tid`` (inf: prepared, not submitted yet)."""
    n_live = ht.xkind.shape[0] // ht.meta.shape[0]
    return ht.xdead[k * n_live + tid % n_live]


@kernel_noalloc
def store_fence_nb(ht, k, tid):
    """The deadline of rank ``k``'s store ``tid`` if it is still in flight (its GPU blocks are
    still being read: a pass that reuses one starts no earlier), else -inf. Stores enter the D2H
    lane in id order, so ``tid`` is in flight iff it is not older than the lane's head."""
    meta = ht.meta
    if tid < 0 or meta[k, D2H_TAIL] == meta[k, D2H_HEAD]:
        return -np.inf
    n_live = ht.xkind.shape[0] // meta.shape[0]
    if tid < ht.d2h[k * n_live + meta[k, D2H_HEAD] % n_live]:
        return -np.inf
    return ht.xdead[k * n_live + tid % n_live]


@inner
def _next(ht, k):
    """(deadline, id) of rank ``k``'s next completion among submitted transfers, or (inf, -1)."""
    meta = ht.meta
    n_live = ht.xkind.shape[0] // meta.shape[0]
    best = np.inf
    tid = np.int64(-1)
    if meta[k, D2H_SUBMITTED] > meta[k, D2H_HEAD]:  # stores first at equal deadlines
        tid = ht.d2h[k * n_live + meta[k, D2H_HEAD] % n_live]
        best = ht.xdead[k * n_live + tid % n_live]
    if meta[k, H2D_TAIL] > meta[k, H2D_HEAD]:
        t = ht.h2d[k * n_live + meta[k, H2D_HEAD] % n_live]
        d = ht.xdead[k * n_live + t % n_live]
        if d < best:
            best = d
            tid = t
    return best, tid


@kernel_noalloc
def next_deadline_nb(ht, k):
    """When rank ``k``'s next transfer completes (inf: none in flight)."""
    return _next(ht, k)[0]


@kernel_noalloc
def pop_due_nb(ht, k, now):
    """Complete rank ``k``'s next transfer due by ``now``: its blocks become resident (a store)
    or stop loading (a load). Returns (id, kind, request row), or (-1, -1, -1) if none is due."""
    d, tid = _next(ht, k)
    if tid < 0 or d > now:
        return np.int64(-1), np.int64(-1), np.int64(-1)
    meta = ht.meta
    n_live = ht.xkind.shape[0] // meta.shape[0]
    x = k * n_live + tid % n_live
    kind = np.int64(ht.xkind[x])
    # the transfer's blocks that enter the LRU share one epoch, ordered by hash (0354)
    first = _cohort_room(ht, k, ht.xn[x])
    meta[k, CLOCK] += 1
    epoch = meta[k, CLOCK]
    for i in range(ht.xn[x]):
        key = ht.keys[_key_at(ht, k, tid, i)]
        p = _pos(ht, k, key)
        if kind == STORE:
            ht.tstate[p] = _RESIDENT
            ht.tres[p] = now
        elif ht.tload[p] == tid + 1:
            ht.tload[p] = 0
            if ht.tpin[p] != 0:  # a G3 write still reads it
                continue
        else:
            continue
        ht.tepoch[p] = epoch
        _lru_push(ht, k, key, ht.thash[p], epoch)
    _touch_cohort_end(ht, k, first)
    if kind == STORE:
        meta[k, D2H_HEAD] += 1
    else:
        meta[k, H2D_HEAD] += 1
    # the key ring frees up to the first key of the oldest transfer still live
    head = meta[k, KEY_TAIL]
    if meta[k, D2H_TAIL] > meta[k, D2H_HEAD]:
        head = min(head, ht.xfirst[k * n_live + ht.d2h[k * n_live + meta[k, D2H_HEAD] % n_live] % n_live])
    if meta[k, H2D_TAIL] > meta[k, H2D_HEAD]:
        head = min(head, ht.xfirst[k * n_live + ht.h2d[k * n_live + meta[k, H2D_HEAD] % n_live] % n_live])
    meta[k, KEY_HEAD] = head
    return tid, kind, ht.xrow[x]


@kernel
def resident_blocks_nb(ht, k):
    """Resident entries of rank ``k`` (for tests and reports)."""
    base = k * (ht.tmask + 1)
    m = 0
    for i in range(ht.tmask + 1):
        if ht.tstate[base + i] == _RESIDENT:
            m += 1
    return m


# ----------------------------------------------------------------------------- the G3 tier's side
@kernel_noalloc
def reserve_external_nb(ht, k, key, h):
    """Reserve an entry on rank ``k`` for block ``key`` (sequence hash ``h``) that a G3 read will
    fill (Dynamo's ``reserve_external``), evicting the least recently used block if the tier is
    full: True, or False when nothing can be evicted (nothing changes)."""
    meta = ht.meta
    if meta[k, ENTRIES] >= ht.cap:
        # (the block itself is absent: nothing to protect)
        if not _evict(ht, k, ht.lkey, 0, meta[k, ENTRIES] + 1 - ht.cap):
            return False
    p = _pos(ht, k, key)
    ht.tkey[p] = key
    ht.tstate[p] = _EXTERNAL
    ht.thash[p] = h
    ht.tepoch[p] = 0
    ht.tpin[p] = 0
    ht.tload[p] = 0
    meta[k, ENTRIES] += 1
    return True


@inner
def can_reserve_prefix_nb(ht, k, keys, n):
    """Whether rank ``k`` could hold every block of ``keys[:n]`` at once, evicting least recently
    used blocks outside them (Dynamo's ``can_reserve_external_prefix``): nothing changes."""
    meta = ht.meta
    missing = np.int64(0)
    for i in range(n):
        p = _pos(ht, k, keys[i])
        if ht.tstate[p] == 0:
            missing += 1
        else:
            ht.tprot[p] = 1
    needed = missing - (ht.cap - meta[k, ENTRIES])
    found = np.int64(0)
    if needed > 0:
        base = k * (ht.lkey.shape[0] // meta.shape[0])
        i = meta[k, LRU_HEAD]
        while found < needed and i < meta[k, LRU_TAIL]:
            if _live(ht, k, base + i) and ht.tprot[_pos(ht, k, ht.lkey[base + i])] == 0:
                found += 1
            i += 1
    for i in range(n):
        p = _pos(ht, k, keys[i])
        if ht.tstate[p] != 0:
            ht.tprot[p] = 0
    return needed <= 0 or found == needed


@kernel_noalloc
def complete_external_nb(ht, k, key, now):
    """A G3 read filled ``key``'s reserved entry: it is resident, with a recency of its own."""
    p = _pos(ht, k, key)
    ht.tstate[p] = _RESIDENT
    ht.tres[p] = now
    if ht.tpin[p] == 0 and ht.tload[p] == 0:
        ht.meta[k, CLOCK] += 1
        ht.tepoch[p] = ht.meta[k, CLOCK]
        _lru_push(ht, k, key, ht.thash[p], ht.meta[k, CLOCK])


@kernel_noalloc
def pin_external_nb(ht, k, key):
    """A G3 write reads resident block ``key``: it leaves the LRU until the write completes."""
    p = _pos(ht, k, key)
    ht.tpin[p] += 1
    ht.tepoch[p] = 0


@inner
def unpin_begin_nb(ht, k, n):
    """Room for the ``n`` blocks a completed G3 write unpins; returns the ring index to pass to
    ``unpin_end_nb`` after ``unpin_nb`` of each block."""
    first = _cohort_room(ht, k, n)
    ht.meta[k, CLOCK] += 1
    return first


@inner
def unpin_nb(ht, k, key):
    """One block of a completed G3 write: unpinned, it rejoins the LRU with the write's epoch."""
    p = _pos(ht, k, key)
    ht.tpin[p] -= 1
    if ht.tpin[p] == 0 and ht.tload[p] == 0 and ht.tstate[p] == _RESIDENT:
        ht.tepoch[p] = ht.meta[k, CLOCK]
        _lru_push(ht, k, key, ht.thash[p], ht.meta[k, CLOCK])


@inner
def unpin_end_nb(ht, k, first):
    _touch_cohort_end(ht, k, first)


@inner
def store_blocks_nb(ht, k, tid, keys, hashes):
    """The blocks of rank ``k``'s completed store ``tid`` (its keys still in the key ring) into
    ``keys`` and their sequence hashes into ``hashes``; returns their count."""
    n_live = ht.xkind.shape[0] // ht.meta.shape[0]
    n = ht.xn[k * n_live + tid % n_live]
    for i in range(n):
        key = ht.keys[_key_at(ht, k, tid, i)]
        keys[i] = key
        hashes[i] = ht.thash[_pos(ht, k, key)]
    return n
