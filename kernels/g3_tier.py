"""The G3 KV tier behind each worker's host tier (Dynamo 1.6.1's ``g3_offload``).

Dynamo 1.6.1's secondary storage (docs/decisions/0355 holds the rules and the experiments behind
them), as state the host tier's connector drives (``kernels/host_offload.py``):

* **Entries.** Each worker has its own pool of ``num_g3_blocks`` entries (scope worker_local), or
  every worker shares one (cluster_shared, decision 0451): a block is absent, *pending* (a write
  of it is in flight) or resident, and *pinned* while a read copies it.
* **Writes.** A host store that completes is written to G3, for its blocks G3 does not hold
  yet; when they do not fit, the least recently used resident unpinned blocks are evicted,
  ordered by (recency ordinal, Dynamo's sequence hash), the store's own blocks excepted
  (decision 0450); if there are too few, all of them are evicted and only the first blocks that
  then fit are written.
* **Recency** is one ordinal counter for the whole tier: every probe moves it (a resident block
  probed takes it), a submitted job moves it, and a completed job gives all its blocks one value.
* **Transfers** are jobs served in parallel: a job waits for the first-byte latency, then moves
  its bytes at the worker's bandwidth of its direction shared equally among the worker's jobs of
  that direction that are moving bytes (reads and writes have separate budgets); in a shared pool
  no faster than the pool's bandwidth shared equally among every worker's moving jobs. The tier's clock
  advances from event to event, and every call that advances it to a time is a rounding point of
  the jobs' remaining bytes, as in Dynamo; callers advance it exactly where Dynamo does.
* **Completions** are kept per worker until that worker takes them.

The state is one tier for the whole run (jobs of every worker advance together, as Dynamo's one
registry does); pool ``q`` owns entry table ``[q * tsize, (q+1) * tsize)`` (linear probing).
"""

from typing import NamedTuple

import numpy as np

from fastsim.kernels.host_tier import _home_of, _sift as _sift_by_hash
from fastsim.kernels.jit import inner

READ, WRITE = 0, 1
# entry states
_EMPTY, _PENDING, _RESIDENT = 0, 1, 2
# integer meta slots
(ORDINAL, EPOCH, NJOBS, NDONE, KTAIL, PROBES, HITS, PENDING_PROBES, EVICTIONS,
 R_SUB, R_DONE, R_BYTES, W_SUB, W_DONE, W_BYTES, FULL, CROSS) = range(17)
# float meta slots
NOW, R_MS, W_MS = 0, 1, 2


class G3Tier(NamedTuple):
    """Flat state of the run's G3 tier (see the module docstring)."""

    cap: int  # G3 blocks per pool
    tmask: int  # entry table size - 1 (a power of two >= 2 * cap)
    block_bytes: float
    latency_ms: float
    bw: np.ndarray  # float64[2]: decimal GB/s of a worker's reads and writes (0: instantaneous)
    shared: int  # 1: scope cluster_shared (one pool, P = 1); 0: worker_local (a pool a worker, P = R)
    sbw: np.ndarray  # float64[2]: decimal GB/s of the shared pool's reads and writes (0: no cap)
    # entries per pool
    gkey: np.ndarray  # uint64[P * tsize]: fastsim's block key
    ghash: np.ndarray  # uint64[P * tsize]: Dynamo's sequence hash (the LRU tie-break)
    gstate: np.ndarray  # int8[P * tsize]
    gpins: np.ndarray  # int64[P * tsize]: reads copying it
    gtouch: np.ndarray  # int64[P * tsize]: recency ordinal
    gwriter: np.ndarray  # int64[P * tsize]: the worker that wrote it
    gcount: np.ndarray  # int64[P]: entries (pending ones too)
    # jobs in flight, in submission order (``meta[NJOBS]`` of them)
    jid: np.ndarray  # int64[J]
    jrank: np.ndarray  # int64[J]
    jdir: np.ndarray  # int64[J]
    jfirst: np.ndarray  # int64[J]: first key in the key ring
    jn: np.ndarray  # int64[J]
    jsub: np.ndarray  # float64[J]: submitted at
    jready: np.ndarray  # float64[J]: first byte at
    jrem: np.ndarray  # float64[J]: bytes left
    # completed jobs not taken yet by their worker, in completion order (``meta[NDONE]``)
    did: np.ndarray  # int64[J]
    drank: np.ndarray  # int64[J]
    ddir: np.ndarray  # int64[J]
    dfirst: np.ndarray  # int64[J]
    dn: np.ndarray  # int64[J]
    dat: np.ndarray  # float64[J]
    # the jobs' keys (a ring; ``meta[KTAIL]`` counts every key written)
    kkey: np.ndarray  # uint64[K]
    khash: np.ndarray  # uint64[K]
    seen: np.ndarray  # int64[R]: the completion epoch each worker saw last
    counts: np.ndarray  # int64[R * 2 + 2]: scratch: ready jobs per worker and direction, then per direction
    meta: np.ndarray  # int64[16]
    fmeta: np.ndarray  # float64[3]
    # the LRU ring of each pool: (key, hash, recency) items in (recency, hash) order, ``n_lru``
    # a pool; an item is live while its entry has that recency (a later one, or an eviction,
    # leaves it dead in place, skipped and dropped when the ring compacts)
    lkey: np.ndarray  # uint64[P * n_lru]
    lhash: np.ndarray  # uint64[P * n_lru]
    ltouch: np.ndarray  # int64[P * n_lru]
    lhead: np.ndarray  # int64[P]
    ltail: np.ndarray  # int64[P]
    evictable: np.ndarray  # int64[P]: resident unpinned entries
    ckey: np.ndarray  # uint64[cap]: scratch: the victims of one write


def make_g3_tier(n_ranks, cap, block_bytes, latency_ms, read_gbps, write_gbps, n_jobs=4096, n_keys=1 << 18,
                 shared=False, shared_read_gbps=0.0, shared_write_gbps=0.0):
    """An empty G3 tier of ``cap`` blocks per worker (one rank a worker), or, ``shared``, one pool
    of ``cap`` blocks for every worker (scope cluster_shared) with its own bandwidth caps."""
    tsize = 1
    while tsize < 2 * cap:
        tsize *= 2
    bw = np.zeros(2)
    bw[READ] = read_gbps
    bw[WRITE] = write_gbps
    sbw = np.zeros(2)
    sbw[READ] = shared_read_gbps
    sbw[WRITE] = shared_write_gbps
    n_lru = 4 * cap + 64
    n_pools = 1 if shared else n_ranks
    return G3Tier(
        cap=int(cap), tmask=tsize - 1, block_bytes=float(block_bytes), latency_ms=float(latency_ms), bw=bw,
        shared=int(bool(shared)), sbw=sbw,
        gkey=np.zeros(n_pools * tsize, dtype=np.uint64), ghash=np.zeros(n_pools * tsize, dtype=np.uint64),
        gstate=np.zeros(n_pools * tsize, dtype=np.int8), gpins=np.zeros(n_pools * tsize, dtype=np.int64),
        gtouch=np.zeros(n_pools * tsize, dtype=np.int64), gwriter=np.zeros(n_pools * tsize, dtype=np.int64),
        gcount=np.zeros(n_pools, dtype=np.int64),
        jid=np.zeros(n_jobs, dtype=np.int64), jrank=np.zeros(n_jobs, dtype=np.int64),
        jdir=np.zeros(n_jobs, dtype=np.int64), jfirst=np.zeros(n_jobs, dtype=np.int64),
        jn=np.zeros(n_jobs, dtype=np.int64), jsub=np.zeros(n_jobs), jready=np.zeros(n_jobs), jrem=np.zeros(n_jobs),
        did=np.zeros(n_jobs, dtype=np.int64), drank=np.zeros(n_jobs, dtype=np.int64),
        ddir=np.zeros(n_jobs, dtype=np.int64), dfirst=np.zeros(n_jobs, dtype=np.int64),
        dn=np.zeros(n_jobs, dtype=np.int64), dat=np.zeros(n_jobs),
        kkey=np.zeros(n_keys, dtype=np.uint64), khash=np.zeros(n_keys, dtype=np.uint64),
        seen=np.zeros(n_ranks, dtype=np.int64), counts=np.zeros(2 * n_ranks + 2, dtype=np.int64),
        meta=np.zeros(17, dtype=np.int64), fmeta=np.zeros(3),
        lkey=np.zeros(n_pools * n_lru, dtype=np.uint64), lhash=np.zeros(n_pools * n_lru, dtype=np.uint64),
        ltouch=np.zeros(n_pools * n_lru, dtype=np.int64), lhead=np.zeros(n_pools, dtype=np.int64),
        ltail=np.zeros(n_pools, dtype=np.int64), evictable=np.zeros(n_pools, dtype=np.int64),
        ckey=np.zeros(max(cap, 1), dtype=np.uint64),
    )


@inner
def _pool(g, k):
    """The pool of worker ``k``: its own (worker_local), or the cluster's one (cluster_shared)."""
    return 0 if g.shared else k


@inner
def _pos(g, k, key):
    """Table position of ``key`` in pool ``k``, or of the empty entry where it would go."""
    base = k * (g.tmask + 1)
    i = _home_of(g.tmask, key)
    while True:
        if g.gstate[base + i] == _EMPTY or g.gkey[base + i] == key:
            return base + i
        i = (i + 1) & g.tmask


@inner
def _delete(g, k, p):
    """Remove the entry at position ``p`` of worker ``k`` (its probe run's followers shift back)."""
    base = k * (g.tmask + 1)
    i = p - base
    j = i
    while True:
        j = (j + 1) & g.tmask
        if g.gstate[base + j] == _EMPTY:
            break
        home = _home_of(g.tmask, g.gkey[base + j])
        if (i <= j and (i < home <= j)) or (i > j and (home <= j or home > i)):
            continue
        a = base + i
        b = base + j
        g.gkey[a] = g.gkey[b]
        g.ghash[a] = g.ghash[b]
        g.gstate[a] = g.gstate[b]
        g.gpins[a] = g.gpins[b]
        g.gtouch[a] = g.gtouch[b]
        g.gwriter[a] = g.gwriter[b]
        i = j
    a = base + i
    g.gkey[a] = 0
    g.ghash[a] = 0
    g.gstate[a] = _EMPTY
    g.gpins[a] = 0
    g.gtouch[a] = 0
    g.gwriter[a] = 0


# ----------------------------------------------------------------------------- probes
@inner
def probe_nb(g, k, key):
    """Dynamo's ``probe`` by worker ``k``: 0 miss, 1 pending, 2 resident (which takes a new recency)."""
    k = _pool(g, k)
    g.meta[PROBES] += 1
    g.meta[ORDINAL] += 1
    p = _pos(g, k, key)
    s = g.gstate[p]
    if s == _EMPTY:
        return 0
    if s == _PENDING:
        g.meta[PENDING_PROBES] += 1
        return 1
    g.gtouch[p] = g.meta[ORDINAL]
    _lru_room(g, k, 1)
    _lru_push(g, k, key, g.ghash[p], g.meta[ORDINAL])
    g.meta[HITS] += 1
    return 2


@inner
def contains_nb(g, k, key):
    """Worker ``k``'s pool holds ``key`` (resident or pending); no probe is counted."""
    return g.gstate[_pos(g, _pool(g, k), key)] != _EMPTY


@inner
def instant_reads_nb(g):
    """Reads take no time: no first-byte latency and no bandwidth limit, the pool's included."""
    return g.latency_ms == 0.0 and g.bw[READ] == 0.0 and not (g.shared and g.sbw[READ] != 0.0)


# ----------------------------------------------------------------------------- the clock
@inner
def _rate(g, k, d):
    """Bytes per ms of a ready job of worker ``k`` in direction ``d`` (inf: instantaneous): the
    worker's bandwidth shared equally among its ready jobs, capped, in a shared pool, by the
    pool's bandwidth shared equally among every worker's ready jobs."""
    bw = g.bw[d]
    rate = np.inf
    if bw != 0.0:
        rate = bw * 1e6 / max(g.counts[2 * k + d], 1)
    if g.shared and g.sbw[d] != 0.0:
        rate = min(rate, g.sbw[d] * 1e6 / max(g.counts[g.counts.shape[0] - 2 + d], 1))
    return rate


@inner
def _count_ready(g, now):
    g.counts[:] = 0
    total = g.counts.shape[0] - 2
    for j in range(g.meta[NJOBS]):
        if g.jready[j] <= now:
            g.counts[2 * g.jrank[j] + g.jdir[j]] += 1
            g.counts[total + g.jdir[j]] += 1


@inner
def _event_time(g, j, now):
    if g.jready[j] > now:
        return g.jready[j]
    return now + g.jrem[j] / _rate(g, g.jrank[j], g.jdir[j])


@inner
def _finish(g, j, now):
    """Job ``j`` completed at ``now``: its blocks change state, the statistics count it, and its
    worker will take it."""
    g.meta[EPOCH] += 1
    g.meta[ORDINAL] += 1
    k = g.jrank[j]
    q = _pool(g, k)
    d = g.jdir[j]
    n_ring = g.kkey.shape[0]
    first = _lru_room(g, q, g.jn[j])
    for i in range(g.jn[j]):
        key = g.kkey[(g.jfirst[j] + i) % n_ring]
        p = _pos(g, q, key)
        if d == WRITE:
            g.gstate[p] = _RESIDENT
            g.evictable[q] += 1
        else:
            g.gpins[p] -= 1
            if g.gpins[p] == 0:
                g.evictable[q] += 1
            if g.gwriter[p] != k:
                g.meta[CROSS] += 1
        g.gtouch[p] = g.meta[ORDINAL]
        _lru_push(g, q, key, g.ghash[p], g.meta[ORDINAL])
    _lru_sort_end(g, q, first)
    if d == WRITE:
        g.meta[W_DONE] += 1
        g.meta[W_BYTES] += np.int64(g.jn[j] * g.block_bytes)
        g.fmeta[W_MS] += now - g.jsub[j]
    else:
        g.meta[R_DONE] += 1
        g.meta[R_BYTES] += np.int64(g.jn[j] * g.block_bytes)
        g.fmeta[R_MS] += now - g.jsub[j]
    m = g.meta[NDONE]
    g.did[m] = g.jid[j]
    g.drank[m] = k
    g.ddir[m] = d
    g.dfirst[m] = g.jfirst[j]
    g.dn[m] = g.jn[j]
    g.dat[m] = now
    g.meta[NDONE] = m + 1


@inner
def _remove_job(g, j):
    for i in range(j, g.meta[NJOBS] - 1):
        g.jid[i] = g.jid[i + 1]
        g.jrank[i] = g.jrank[i + 1]
        g.jdir[i] = g.jdir[i + 1]
        g.jfirst[i] = g.jfirst[i + 1]
        g.jn[i] = g.jn[i + 1]
        g.jsub[i] = g.jsub[i + 1]
        g.jready[i] = g.jready[i + 1]
        g.jrem[i] = g.jrem[i + 1]
    g.meta[NJOBS] -= 1


@inner
def advance_nb(g, target):
    """Move the tier's clock to ``target`` (not back), completing the jobs due on the way, event
    by event, with Dynamo's arithmetic of the bytes left."""
    now = g.fmeta[NOW]
    if target < now:
        target = now
    while True:
        _count_ready(g, now)
        nj = g.meta[NJOBS]
        has_event = nj > 0
        event = np.inf
        for j in range(nj):
            e = _event_time(g, j, now)
            if e < event:
                event = e
        nxt = min(event, target) if has_event else target
        elapsed = nxt - now
        for j in range(nj):
            if g.jready[j] <= now:
                rate = _rate(g, g.jrank[j], g.jdir[j])
                if _event_time(g, j, now) <= nxt:
                    g.jrem[j] = 0.0
                else:
                    g.jrem[j] = max(g.jrem[j] - elapsed * rate, 0.0)
        now = nxt
        g.fmeta[NOW] = now
        finished = False
        j = 0
        while j < g.meta[NJOBS]:
            if g.jready[j] <= now and g.jrem[j] == 0.0:
                _finish(g, j, now)
                _remove_job(g, j)
                finished = True
            else:
                j += 1
        if not has_event or event > target:
            break
        if now == target and not finished:
            _count_ready(g, now)
            later = True
            for j in range(g.meta[NJOBS]):
                if _event_time(g, j, now) <= target:
                    later = False
                    break
            if later:
                break


@inner
def next_event_nb(g, k):
    """Dynamo's ``next_deadline`` of worker ``k``: the next event of any job, or a completion it
    has not taken (inf: none); a completion it has not seen yet is due at once."""
    now = g.fmeta[NOW]
    if g.seen[k] != g.meta[EPOCH]:
        return now
    _count_ready(g, now)
    t = np.inf
    for j in range(g.meta[NJOBS]):
        e = _event_time(g, j, now)
        if e < t:
            t = e
    for m in range(g.meta[NDONE]):
        if g.drank[m] == k and g.dat[m] < t:
            t = g.dat[m]
    return t


# ----------------------------------------------------------------------------- the LRU ring
@inner
def _live(g, k, i):
    """Ring item ``i`` is its entry's current recency."""
    if g.ltouch[i] <= 0:
        return False
    p = _pos(g, k, g.lkey[i])
    return g.gstate[p] != _EMPTY and g.gtouch[p] == g.ltouch[i]


@inner
def _compact(g, k):
    n_lru = g.lkey.shape[0] // g.lhead.shape[0]
    base = k * n_lru
    j = np.int64(0)
    for i in range(g.lhead[k], g.ltail[k]):
        if _live(g, k, base + i):
            g.lkey[base + j] = g.lkey[base + i]
            g.lhash[base + j] = g.lhash[base + i]
            g.ltouch[base + j] = g.ltouch[base + i]
            j += 1
    g.lhead[k] = 0
    g.ltail[k] = j


@inner
def _lru_room(g, k, n):
    """Room for ``n`` items pushed together; returns the ring index of the first."""
    if g.ltail[k] + n > g.lkey.shape[0] // g.lhead.shape[0]:
        _compact(g, k)
    return g.ltail[k]


@inner
def _lru_push(g, k, key, h, touch):
    i = k * (g.lkey.shape[0] // g.lhead.shape[0]) + g.ltail[k]
    g.lkey[i] = key
    g.lhash[i] = h
    g.ltouch[i] = touch
    g.ltail[k] += 1


@inner
def _lru_sort_end(g, k, first):
    """The items pushed since ``first`` (one completed job's blocks) in hash order."""
    lo = k * (g.lkey.shape[0] // g.lhead.shape[0]) + first
    n = g.ltail[k] - first
    for root in range(n // 2 - 1, -1, -1):
        _sift_by_hash(g.lhash, g.lkey, g.ltouch, lo, root, n)
    for end in range(n - 1, 0, -1):
        g.lhash[lo], g.lhash[lo + end] = g.lhash[lo + end], g.lhash[lo]
        g.lkey[lo], g.lkey[lo + end] = g.lkey[lo + end], g.lkey[lo]
        g.ltouch[lo], g.ltouch[lo + end] = g.ltouch[lo + end], g.ltouch[lo]
        _sift_by_hash(g.lhash, g.lkey, g.ltouch, lo, 0, end)


@inner
def _lru_victims(g, k, needed):
    """The keys of pool ``k``'s ``needed`` oldest resident unpinned blocks into ``g.ckey``
    (the caller checked that there are that many)."""
    base = k * (g.lkey.shape[0] // g.lhead.shape[0])
    found = 0
    i = g.lhead[k]
    while found < needed:
        if not _live(g, k, base + i):
            if i == g.lhead[k]:
                g.lhead[k] += 1
        else:
            p = _pos(g, k, g.lkey[base + i])
            if g.gstate[p] == _RESIDENT and g.gpins[p] == 0:
                g.ckey[found] = g.lkey[base + i]
                found += 1
        i += 1


# ----------------------------------------------------------------------------- submissions
@inner
def _push_job(g, k, d, n, now):
    """A job of ``n`` blocks, whose keys the caller wrote at the key ring's tail."""
    g.meta[ORDINAL] += 1
    j = g.meta[NJOBS]
    g.jid[j] = g.meta[ORDINAL]
    g.jrank[j] = k
    g.jdir[j] = d
    g.jfirst[j] = g.meta[KTAIL]
    g.jn[j] = n
    g.jsub[j] = now
    g.jready[j] = now + g.latency_ms
    g.jrem[j] = float(n * g.block_bytes)
    g.meta[NJOBS] = j + 1
    g.meta[KTAIL] += n
    if d == WRITE:
        g.meta[W_SUB] += 1
    else:
        g.meta[R_SUB] += 1


@inner
def _room(g, n):
    """False (and the tier's FULL flag set) when a job of ``n`` keys does not fit its rings."""
    if g.meta[NJOBS] >= g.jid.shape[0] or g.meta[NJOBS] + g.meta[NDONE] >= g.did.shape[0] - 1:
        g.meta[FULL] = 1
        return False
    n_ring = g.kkey.shape[0]
    head = g.meta[KTAIL]
    for j in range(g.meta[NJOBS]):
        head = min(head, g.jfirst[j])
    for m in range(g.meta[NDONE]):
        head = min(head, g.dfirst[m])
    if g.meta[KTAIL] + n - head > n_ring:
        g.meta[FULL] = 1
        return False
    return True


@inner
def _hold_own(g, k, keys, n, step):
    """Pin (``step`` 1) or unpin (-1) the resident blocks among ``keys[:n]`` of pool ``k``: a
    write holds the blocks of its store that G3 has while it picks its victims."""
    for i in range(n):
        p = _pos(g, k, keys[i])
        if g.gstate[p] == _RESIDENT:
            if step > 0 and g.gpins[p] == 0:
                g.evictable[k] -= 1
            g.gpins[p] += step
            if step < 0 and g.gpins[p] == 0:
                g.evictable[k] += 1


@inner
def submit_write_nb(g, k, keys, hashes, n, now):
    """Write the blocks ``keys[:n]`` of a completed host store of worker ``k``: the number of
    blocks written (whose keys are now at the key ring's tail, in ``keys`` order), 0 when none
    is missing or they do not fit. Dynamo's ``submit(Write)``."""
    advance_nb(g, now)
    q = _pool(g, k)
    n_ring = g.kkey.shape[0]
    tail = g.meta[KTAIL]
    m = 0
    for i in range(n):
        if g.gstate[_pos(g, q, keys[i])] == _EMPTY:
            g.kkey[(tail + m) % n_ring] = keys[i]
            g.khash[(tail + m) % n_ring] = hashes[i]
            m += 1
    if m == 0:
        return 0
    needed = g.gcount[q] + m - g.cap
    if needed > 0:
        # the blocks of this store that G3 holds are not its victims (decision 0450)
        _hold_own(g, q, keys, n, 1)
        if g.evictable[q] < needed:  # too few victims: the blocks that fit are written, the first ones
            m -= needed - g.evictable[q]
            needed = g.evictable[q]
        if m > 0:
            # the least recently used resident unpinned blocks, by (recency, sequence hash): the ring's order
            _lru_victims(g, q, needed)
            for v in range(needed):
                _delete(g, q, _pos(g, q, g.ckey[v]))
                g.gcount[q] -= 1
                g.evictable[q] -= 1
                g.meta[EVICTIONS] += 1
        _hold_own(g, q, keys, n, -1)
        if m <= 0:
            return 0
    if not _room(g, m):
        return 0
    for i in range(m):
        key = g.kkey[(tail + i) % n_ring]
        p = _pos(g, q, key)
        g.gkey[p] = key
        g.ghash[p] = g.khash[(tail + i) % n_ring]
        g.gstate[p] = _PENDING
        g.gpins[p] = 0
        g.gtouch[p] = 0
        g.gwriter[p] = k
        g.gcount[q] += 1
    _push_job(g, k, WRITE, m, g.fmeta[NOW])
    return m


@inner
def submit_read_nb(g, k, keys, n, now):
    """Read resident blocks ``keys[:n]`` of worker ``k`` back to its host tier (pins them): True,
    or False when the rings are full."""
    advance_nb(g, now)
    if not _room(g, n):
        return False
    q = _pool(g, k)
    n_ring = g.kkey.shape[0]
    tail = g.meta[KTAIL]
    for i in range(n):
        g.kkey[(tail + i) % n_ring] = keys[i]
        p = _pos(g, q, keys[i])
        if g.gpins[p] == 0:
            g.evictable[q] -= 1
        g.gpins[p] += 1
    _push_job(g, k, READ, n, g.fmeta[NOW])
    return True


@inner
def take_first_nb(g, k, now):
    """The index of worker ``k``'s first completion due by ``now`` not taken yet, or -1."""
    for m in range(g.meta[NDONE]):
        if g.drank[m] == k and g.dat[m] <= now:
            return m
    return -1


@inner
def drop_done_nb(g, m):
    """Forget taken completion ``m`` (the others keep their order)."""
    for i in range(m, g.meta[NDONE] - 1):
        g.did[i] = g.did[i + 1]
        g.drank[i] = g.drank[i + 1]
        g.ddir[i] = g.ddir[i + 1]
        g.dfirst[i] = g.dfirst[i + 1]
        g.dn[i] = g.dn[i + 1]
        g.dat[i] = g.dat[i + 1]
    g.meta[NDONE] -= 1


def g3_counters(g, bypassed=0):
    """The report's ``g3_offload`` object (Dynamo's ``G3Stats``); ``bypassed``: the times a request
    gave up restoring from G3, a field Dynamo writes only when it is not 0."""
    resident = int((g.gstate == _RESIDENT).sum())
    pending = int((g.gstate == _PENDING).sum())
    meta, fmeta = g.meta, g.fmeta

    def io(sub, done, nbytes, ms):
        return {"cancelled_jobs": 0, "completed_bytes": int(meta[nbytes]), "completed_jobs": int(meta[done]),
                "submitted_jobs": int(meta[sub]), "transfer_ms": float(fmeta[ms])}

    out = {"bypassed_restores": bypassed} if bypassed else {}
    return out | {
        "cross_worker_read_blocks": int(meta[CROSS]),
        "evictions": int(meta[EVICTIONS]),
        "lookup_hits": int(meta[HITS]),
        "lookup_pending": int(meta[PENDING_PROBES]),
        "lookup_probes": int(meta[PROBES]),
        "pending_blocks": pending,
        "read": io(R_SUB, R_DONE, R_BYTES, R_MS),
        "resident_blocks": resident,
        "write": io(W_SUB, W_DONE, W_BYTES, W_MS),
    }
