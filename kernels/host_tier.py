"""The host-memory KV tier (G2) of each rank: which blocks it holds, and its two copy lanes.

Dynamo 1.6.1's host tier (docs/decisions/0350 and 0351) as state the event loop can drive; it
knows nothing of the GPU pool, the scheduler or the clock's events, which call it:

* **Entries.** A block key is absent, *pending* (a store of it was prepared or is being copied:
  the transfer id says which) or *resident*. A store cohort takes its missing blocks whole or not
  at all; entries count against the capacity from the moment they are prepared.
* **No eviction.** When a cohort's missing blocks do not fit the free entries, Dynamo evicts the
  least recently used resident blocks, in an order that depends on its block hash values within
  one completion (0350, "Host LRU"); fastsim keeps the equality of those hashes, not their
  values. ``prepare_store_nb`` therefore answers ``NEEDS_EVICTION`` and changes nothing: the
  caller stops the run with a clear refusal. Entries are never removed, so the key table needs
  no deletion and the recency of resident blocks is never read (touches are not kept).
* **Lanes.** Each direction is one FIFO lane: a transfer of ``n`` blocks takes
  ``n * block_bytes / (GB/s * 1e6)`` ms (0 GB/s: no time) and starts at the later of the lane's
  previous end and its ready time (submission, or a later fence, plus the first-byte latency).
  Stores are prepared during a pass and submitted together at its end (``submit_prepared_nb``);
  a load is submitted when it is scheduled.
* **Completions** come in (deadline, store before load, transfer id) order, Dynamo's order of
  its deadline set; within a lane deadlines never decrease, so two queue heads give that order.
  A store's blocks become resident; a load's blocks stop being "loading".
* **Loads** mark their blocks as loading (Dynamo's ``load_by_key``): another request whose host
  prefix meets such a block waits.

Transfers live in a ring per rank (``n_live`` slots, indexed by id modulo the ring), their block
keys in a ring of keys per rank; a transfer that would overwrite a live one answers ``LOG_FULL``
(the caller reruns with larger rings). Rank ``k`` owns table entries ``[k * tsize, (k+1) * tsize)``.
"""

from typing import NamedTuple

import numpy as np

from fastsim.kernels.jit import inner, kernel, kernel_noalloc

# lookup answers (Dynamo's ``Lookup``)
MISS, PENDING, HIT = 0, 1, 2
# prepare_store_nb / schedule_load_nb answers
PREPARED, ALREADY_PRESENT, NEEDS_EVICTION, LOG_FULL = 0, 1, 2, 3
# transfer kinds, in Dynamo's same-deadline completion order
STORE, LOAD = 0, 1
_RESIDENT = np.int64(-1)  # entry state; > 0: pending store (transfer id + 1); 0: empty slot
# per-rank integer meta columns
(ENTRIES, NEXT_ID, D2H_HEAD, D2H_SUBMITTED, D2H_TAIL, H2D_HEAD, H2D_TAIL, KEY_HEAD,
 KEY_TAIL) = range(9)
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
    tkey: np.ndarray  # uint64[R * tsize]: entry keys
    tstate: np.ndarray  # int64[R * tsize]: 0 empty, -1 resident, id + 1 pending store
    tload: np.ndarray  # int64[R * tsize]: id + 1 of the load copying the block back (0: none)
    # when the entry's store completed (inf: not resident): Dynamo publishes a host block's
    # stored KV event then, and its kv_router counts the block from that event on (0353)
    tres: np.ndarray  # float64[R * tsize]
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
    meta: np.ndarray  # int64[R, 9]
    fmeta: np.ndarray  # float64[R, 2]: each lane's end


def bytes_per_ms(gbps):
    """Decimal GB/s as bytes per ms; 0 GB/s is an instantaneous lane (inf)."""
    return np.inf if gbps == 0 else float(gbps) * 1e6


def make_host_tier(n_ranks, cap, block_size, kv_cache_bytes_per_token, d2h_gbps, h2d_gbps,
                   latency_ms=0.0, n_live=1024, n_keys=1 << 16):
    """Empty host tiers of ``cap`` blocks for ``n_ranks`` ranks, with room for ``n_live``
    transfers in flight and ``n_keys`` of their block keys per rank."""
    tsize = 1
    while tsize < 2 * cap:
        tsize *= 2
    meta = np.zeros((n_ranks, 9), dtype=np.int64)
    return HostTier(
        cap=cap, tmask=tsize - 1, block_bytes=float(block_size * kv_cache_bytes_per_token),
        d2h_bpms=bytes_per_ms(d2h_gbps), h2d_bpms=bytes_per_ms(h2d_gbps),
        latency_ms=float(latency_ms),
        tkey=np.zeros(n_ranks * tsize, dtype=np.uint64),
        tstate=np.zeros(n_ranks * tsize, dtype=np.int64),
        tload=np.zeros(n_ranks * tsize, dtype=np.int64),
        tres=np.full(n_ranks * tsize, np.inf),
        xkind=np.zeros(n_ranks * n_live, dtype=np.int8),
        xrow=np.zeros(n_ranks * n_live, dtype=np.int64),
        xfirst=np.zeros(n_ranks * n_live, dtype=np.int64),
        xn=np.zeros(n_ranks * n_live, dtype=np.int64),
        xdead=np.full(n_ranks * n_live, np.inf),
        d2h=np.zeros(n_ranks * n_live, dtype=np.int64),
        h2d=np.zeros(n_ranks * n_live, dtype=np.int64),
        keys=np.zeros(n_ranks * n_keys, dtype=np.uint64),
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


@kernel_noalloc
def prepare_store_nb(ht, k, row, keys, n):
    """Admit the missing blocks of request ``row``'s store cohort ``keys[:n]`` (distinct keys, as
    a request's chained block keys are) on rank ``k``, whole or not at all: returns (PREPARED, id), (ALREADY_PRESENT, -1), (NEEDS_EVICTION, -1) when
    they do not fit the free entries (nothing changes: see the module docstring) or (LOG_FULL,
    -1). The prepared store is submitted at the pass end (``submit_prepared_nb``)."""
    missing = 0
    for i in range(n):
        if ht.tstate[_pos(ht, k, keys[i])] == 0:
            missing += 1
    if missing == 0:
        return ALREADY_PRESENT, np.int64(-1)
    if missing > ht.cap - ht.meta[k, ENTRIES]:
        return NEEDS_EVICTION, np.int64(-1)
    meta = ht.meta
    tid = _new_transfer(ht, k, STORE, row, missing)
    if tid < 0:
        return LOG_FULL, np.int64(-1)
    n_live = ht.xkind.shape[0] // meta.shape[0]
    j = 0
    for i in range(n):  # the transfer's blocks: the missing ones, in cohort order
        p = _pos(ht, k, keys[i])
        if ht.tstate[p] == 0:
            ht.keys[_key_at(ht, k, tid, j)] = keys[i]
            j += 1
            ht.tkey[p] = keys[i]
            ht.tstate[p] = tid + 1
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
    for i in range(n):
        ht.tload[_pos(ht, k, keys[i])] = tid + 1
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
    for i in range(ht.xn[x]):
        p = _pos(ht, k, ht.keys[_key_at(ht, k, tid, i)])
        if kind == STORE:
            ht.tstate[p] = _RESIDENT
            ht.tres[p] = now
        elif ht.tload[p] == tid + 1:
            ht.tload[p] = 0
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
