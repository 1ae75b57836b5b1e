"""KV-cache-aware routing (Dynamo 1.4.2's offline ``kv_router``), in compiled code.

Semantics settled by experiment (cluster doc C2-C4, C7; verified doc Q10, Q11):

* targets are DP ranks; each target's *index* is exactly its KV pool (full blocks stored at pass
  start, removed on eviction, cached inactive blocks included), so the overlap of a request is the
  longest prefix of its full prompt blocks present in the target's pool;
* ``cost = pls * max(0, (PF + isl) / bs - credit * decay * overlap) + ActiveBlocks + NewBlocks
  + w * ActiveRequests`` where PF is the target's in-flight prefill tokens (``isl - overlap * bs``
  of each request routed there, until its first token), ActiveBlocks the deduplicated union of the
  full prompt blocks of the target's unfinished requests, NewBlocks the candidate's full blocks not
  in that union, ActiveRequests the requests routed there and not yet freed and ``w``
  ``decode_active_request_weight``;
* ``decay = 1 / (1 + overlap_score_credit_decay * ((PF - min PF) / bs) / ceil(isl / bs))``, the
  minimum over the active targets (1 when the decay is 0 or prefill tokens are not tracked): a
  backlogged target's cache hit is worth less (docs/decisions/0260);
* temperature 0 takes the lowest cost; exact ties (random in Dynamo) are broken by a seeded
  generator, so a seed gives bit-identical runs; T > 0 samples
  ``p ~ exp(-(c - c_min) / ((c_max - c_min) * T))``;
* with a KV event lag ``L`` (Dynamo 1.6.1's ``kv_event_lag_ms``), the overlap is read from the
  router's own index instead of the pool: the pool's feed of stored/removed blocks
  (``kvpool._feed``), each applied once ``L`` has passed since the end of the pass that made it
  (Dynamo publishes a pass's events when it completes); prefill and completion releases, and the
  active blocks, stay immediate (docs/decisions/0230);
* with a host KV tier (Dynamo 1.6.1's ``native_host_offload``), ``h`` the prompt blocks right
  after a target's device overlap ``d`` that its host tier holds (each from the end of its
  store, plus the lag: when Dynamo publishes its host-tier stored event; an evicted block counts
  until the end of the pass that evicted it, plus the lag: its removed event) and ``w``
  ``host_cache_hit_weight``: the cost's credit is ``credit * decay * d + w * h``, the prefill
  load ``isl - round((d + w * h) * bs)`` and the recorded overlap ``round(d + w * h)`` blocks
  (docs/decisions/0353, 0475);
* with ``router_queue_threshold`` set, a target is busy iff ``PF > thr * max_num_batched_tokens``
  and a request waits in the router queue while every target is busy (released at first-token and
  completion events, in fcfs, lcfs or wspt order; a request's strict priority goes first and its
  priority jump raises its policy score: docs/decisions/0480). The vLLM and SGLang loops move the
  queue after each single release and score a released request with the overlaps of its queue
  entry (``score_queued_nb``, docs/decisions/0410 and 0430).

The union of active prompt blocks is a refcounted open-addressing table keyed by (rank, block).
"""

from typing import NamedTuple

import numpy as np

from fastsim.kernels.blocks import mix64_nb
from fastsim.kernels.heap import heap_pop_nb, heap_pop_ranked_nb, heap_push_nb, heap_push_ranked_nb
from fastsim.kernels.host_tier import counted_ghost_nb, resident_since_nb
from fastsim.kernels.jit import inner, kernel_noalloc
from fastsim.kernels.kvpool import EV_COUNT, EV_FIRST, match_prefix_nb

FCFS, LCFS, WSPT = 0, 1, 2
# state slots
NENTRIES, OVERFLOW, NQUEUE, QSEQ = 0, 1, 2, 3


class LaggedIndex(NamedTuple):
    """The (rank, block) set a lagging router's indexer holds; the same table layout (and
    functions) as the router's union of active blocks."""

    tab_key: np.ndarray  # uint64[T]
    tab_rank: np.ndarray  # int32[T] (-1 = empty)
    tab_cnt: np.ndarray  # int32[T]
    state: np.ndarray  # int64[4] (NENTRIES, OVERFLOW as in Router.state)


class HostView(NamedTuple):
    """The host tiers' residency as the router reads it: the tier's own entry arrays (shared,
    not copied), and the weight of a host block in the overlap. Empty arrays: no host tier."""

    weight: float  # host_cache_hit_weight
    tkey: np.ndarray  # uint64[R * tsize] (kernels/host_tier.py)
    tstate: np.ndarray  # int64[R * tsize]
    tres: np.ndarray  # float64[R * tsize]: when each entry became resident
    tmask: int
    # the blocks the tiers evicted whose removal the lagging router may not have seen yet
    # (kernels/host_tier.py; empty without a lag)
    gkey: np.ndarray  # uint64[R * n_ghost]
    gres: np.ndarray  # float64[R * n_ghost]
    grem: np.ndarray  # float64[R * n_ghost]
    gmeta: np.ndarray  # int64[R, 17]: the tier's meta (the ghosts' ring heads and tails)
    now: np.ndarray  # float64[1]: the routing time (set by sync_index_nb)
    dev: np.ndarray  # int64[R]: each target's device overlap d (scratch)
    hcredit: np.ndarray  # float64[R]: ... and its host blocks' credit, weight * h (scratch)
    # each request's recorded overlap on its target, round(d + w * h) (int32[n], empty when
    # routing figures are not kept): its prefill load no longer tells it
    chosen: np.ndarray


class Router(NamedTuple):
    """Router configuration and state (all targets share one table)."""

    mode: int
    pls: float  # prefill_load_scale
    credit: float  # overlap_score_credit
    temperature: float
    track_prefill: bool
    track_active: bool
    dedup: bool  # router_assume_kv_reuse
    queue_thr: float  # < 0: no router queue
    policy: int
    budget: int  # max_num_batched_tokens of the workers (busy test)
    decay: float  # overlap_score_credit_decay
    req_weight: float  # decode_active_request_weight
    pf: np.ndarray  # int64[R]: in-flight prefill tokens per target
    active: np.ndarray  # int64[R]: |union of active prompt blocks| (or their sum without dedup)
    nreq: np.ndarray  # int64[R]: requests routed to the target and not yet freed
    tab_key: np.ndarray  # uint64[T]
    tab_rank: np.ndarray  # int32[T] (-1 = empty)
    tab_cnt: np.ndarray  # int32[T]
    route_pf: np.ndarray  # int64[n]: PF this request added to its target
    pf_open: np.ndarray  # bool[n]
    fnext: np.ndarray  # int32[n]: per-group list of first tokens of the pass in flight
    fhead: np.ndarray  # int32[G]
    ftail: np.ndarray  # int32[G]
    queue: np.ndarray  # int64[n]: router queue (binary heap of rows)
    qkey: np.ndarray  # float64[n]: queue priority (lower first)
    qseq: np.ndarray  # int64[n]: enqueue order (tie-break)
    # request priorities (Dynamo's ``priority`` and ``strict_priority``), both empty when no request
    # of the run has one: each request's priority jump, max(priority, 0), and its strict priority
    # negated (the queue takes the highest strict priority first, then the policy's order)
    qjump: np.ndarray  # float64[n] or empty
    qrank: np.ndarray  # int64[n] or empty
    cost: np.ndarray  # float64[R] scratch
    overlap: np.ndarray  # int64[R] scratch
    rng: np.ndarray  # uint64[1]
    state: np.ndarray  # int64[4]
    # per-request routing records (Dynamo 1.6.1's routing history), empty when not kept: the
    # best overlap (blocks) any target offered, and when a request queued by the router left
    # the queue (NaN: routed at once; -1 while queued)
    best: np.ndarray  # int32[n] or empty
    released: np.ndarray  # float64[n] or empty
    # the overlaps (blocks) of each target when a request entered the router queue: Dynamo
    # reports a queued request's route overlap as its queue entry saw it (int32[n, R] or empty)
    qov: np.ndarray
    lag: float  # KV event lag in ms (< 0: no index, the overlaps are read from the pool itself)
    index: LaggedIndex  # the lagging indexer's blocks (an empty table without a lag)
    host: HostView  # the host tiers the overlaps count (empty arrays without a tier)


# ----------------------------------------------------------------------------- rng
@inner
def _next_u64(rng):
    # splitmix64 stream: tiny, fast, and good enough for tie-breaking and softmax sampling
    rng[0] += np.uint64(0x9E3779B97F4A7C15)
    return mix64_nb(rng[0])


@inner
def _uniform(rng):
    return float(_next_u64(rng) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


# ----------------------------------------------------------------------------- the union table
@inner
def _slot(rt, rank, key):
    mask = rt.tab_key.shape[0] - 1
    i = np.int64(mix64_nb(key ^ (np.uint64(rank) * np.uint64(0xD6E8FEB86659FD93))) & np.uint64(mask))
    while True:
        rr = rt.tab_rank[i]
        if rr < 0 or (rr == rank and rt.tab_key[i] == key):
            return i
        i = (i + 1) & mask


@inner
def _home(rt, rank, key):
    return _home_in(rt.tab_key.shape[0] - 1, rank, key)


@inner
def _home_in(mask, rank, key):
    return np.int64(mix64_nb(key ^ (np.uint64(rank) * np.uint64(0xD6E8FEB86659FD93))) & np.uint64(mask))


@kernel_noalloc
def move_table_nb(old_key, old_rank, old_cnt, key, rank, cnt):
    """Move every entry of the router's table of active blocks into a larger, empty one (``rank``
    all -1, a power of two long). The table is a set with counts: where an entry sits in it
    changes no result."""
    mask = key.shape[0] - 1
    for i in range(old_rank.shape[0]):
        if old_rank[i] >= 0:
            j = _home_in(mask, np.int64(old_rank[i]), old_key[i])
            while rank[j] >= 0:
                j = (j + 1) & mask
            rank[j] = old_rank[i]
            key[j] = old_key[i]
            cnt[j] = old_cnt[i]


@inner
def _union_add(rt, rank, key):
    """Add one reference to (rank, key); returns True if the block is new to the union."""
    i = _slot(rt, np.int64(rank), key)
    if rt.tab_rank[i] >= 0:
        rt.tab_cnt[i] += 1
        return False
    if 2 * (rt.state[NENTRIES] + 1) > rt.tab_key.shape[0]:
        rt.state[OVERFLOW] = 1  # the caller re-runs with a larger table
        return False
    rt.tab_rank[i] = rank
    rt.tab_key[i] = key
    rt.tab_cnt[i] = 1
    rt.state[NENTRIES] += 1
    return True


@inner
def _union_remove(rt, rank, key):
    """Drop one reference to (rank, key); returns True if the block left the union."""
    mask = rt.tab_key.shape[0] - 1
    i = _slot(rt, np.int64(rank), key)
    if rt.tab_rank[i] < 0:
        return False
    rt.tab_cnt[i] -= 1
    if rt.tab_cnt[i] > 0:
        return False
    rt.state[NENTRIES] -= 1
    j = i
    while True:  # backward-shift deletion
        j = (j + 1) & mask
        if rt.tab_rank[j] < 0:
            break
        h = _home(rt, rt.tab_rank[j], rt.tab_key[j])
        if (j > i and (h <= i or h > j)) or (j < i and (h <= i and h > j)):
            rt.tab_rank[i] = rt.tab_rank[j]
            rt.tab_key[i] = rt.tab_key[j]
            rt.tab_cnt[i] = rt.tab_cnt[j]
            i = j
    rt.tab_rank[i] = -1
    return True


@inner
def _union_prefix(rt, rank, keys, n):
    """Leading blocks of ``keys[:n]`` already in target ``rank``'s union."""
    for j in range(n):
        if rt.tab_rank[_slot(rt, np.int64(rank), keys[j])] < 0:
            return j
    return n


# ----------------------------------------------------------------------------- lagged index
@inner
def sync_index_nb(rt, pool, now):
    """Apply to the lagging index every event of the pool's feed published at or before
    ``now - lag``: each rank's in its order (the index holds (rank, key) pairs, so the ranks'
    events do not act on each other)."""
    rt.host.now[0] = now
    if rt.lag < 0.0 or pool.ev_key.shape[0] == 0:
        return
    em = pool.ev_meta
    m = pool.ev_key.shape[0] // em.shape[0]
    for rank in range(em.shape[0]):
        while em[rank, EV_COUNT] > 0:
            i = rank * m + em[rank, EV_FIRST]
            if pool.ev_time[i] + rt.lag > now:
                break
            if pool.ev_code[i] & 1:
                _union_add(rt.index, rank, pool.ev_key[i])
            else:
                _union_remove(rt.index, rank, pool.ev_key[i])
            em[rank, EV_FIRST] = (em[rank, EV_FIRST] + 1) % m
            em[rank, EV_COUNT] -= 1


# ----------------------------------------------------------------------------- host tier
@inner
def _with_host_blocks(rt, k, keys, d, nshare):
    """Target ``k``'s overlap counting its host tier: the blocks ``keys[d:nshare]`` its host
    tier held (as published, lag included: a block evicted since counts until its removal
    event arrives) up to the first it did not, weighted, added to the
    device overlap ``d`` and rounded half away from zero (Dynamo's ``f64::round``)."""
    hv = rt.host
    seen = hv.now[0] - max(rt.lag, 0.0)
    h = 0
    ghosts = hv.gkey.shape[0] > 0
    for j in range(d, nshare):
        if resident_since_nb(hv.tkey, hv.tstate, hv.tres, hv.tmask, k, keys[j]) > seen:
            # an evicted block counts until its removal event reaches the router (0475)
            if not (ghosts and counted_ghost_nb(hv.gkey, hv.gres, hv.grem, hv.gmeta, k, keys[j], seen)):
                break
        h += 1
    hv.hcredit[k] = float(h) * hv.weight
    return np.int64(np.floor(float(d) + hv.hcredit[k] + 0.5))


# ----------------------------------------------------------------------------- decisions
@inner
def _least_prefill_nb(rt, n_targets, gstate, dp):
    """The least prefill backlog among the targets that can take a request (0 if none can)."""
    min_pf = np.int64(-1)
    for k in range(n_targets):
        if gstate[k if dp == 1 else k // dp] == 2 and (min_pf < 0 or rt.pf[k] < min_pf):
            min_pf = rt.pf[k]
    if min_pf < 0:
        min_pf = 0
    return min_pf


@inner
def _target_cost_nb(rt, k, keys, nfull, nshare, overlap, isl, bs, min_pf, req_blocks):
    """Target ``k``'s cost for a request whose overlap there is ``overlap`` blocks (``rt.host``'s
    scratch holds its device and host parts with a host tier)."""
    tiered = rt.host.tres.shape[0] > 0
    pf = rt.pf[k] if rt.track_prefill else 0
    credit = rt.credit
    if rt.decay > 0.0 and rt.track_prefill:
        excess = max(rt.pf[k] - min_pf, 0) / float(bs)
        credit = credit * (1.0 / (1.0 + rt.decay * (excess / req_blocks)))
    if tiered:  # the credit (and its decay) is the device overlap's; host blocks have their weight
        load = (pf + isl) / bs - (credit * rt.host.dev[k] + rt.host.hcredit[k])
    else:
        load = (pf + isl) / bs - credit * overlap
    if load < 0.0:
        load = 0.0
    c = rt.pls * load
    if rt.track_active:
        if rt.dedup:
            new = nfull - (_union_prefix(rt, k, keys, nshare) if nshare > 0 else 0)
        else:
            new = nfull
        c = c + rt.active[k] + new
    if rt.req_weight != 0.0:
        c = c + rt.req_weight * rt.nreq[k]
    return c


@inner
def score_targets_nb(rt, pool, keys, nfull, nshare, isl, bs, n_targets, gstate, dp):
    """Fill ``rt.cost`` and ``rt.overlap`` for a request with full prompt blocks ``keys[:nfull]``,
    of which only the first ``nshare`` can be held elsewhere (the rest are unique to it).

    Ranks of workers that are not active (starting, draining, retired) get an infinite cost.
    ``pool`` None: the overlaps are read from the index alone (the SGLang engine's radix caches
    feed it their KV events, ``kernels/sglang_route.py``).
    """
    min_pf = np.int64(0)
    if rt.decay > 0.0 and rt.track_prefill:
        min_pf = _least_prefill_nb(rt, n_targets, gstate, dp)
    req_blocks = float((isl + bs - 1) // bs)
    for k in range(n_targets):
        # (every request scores every target: without attention DP, no division per target)
        if gstate[k if dp == 1 else k // dp] != 2:  # fleet.ACTIVE
            rt.cost[k] = np.inf
            rt.overlap[k] = 0
            continue
        if nshare == 0:
            overlap = 0
        elif pool is None or rt.lag >= 0.0:  # (no pool: an engine whose events only reach the index)
            overlap = _union_prefix(rt.index, k, keys, nshare)
        else:
            overlap = match_prefix_nb(pool, k, keys, nshare)[0]
        if rt.host.tres.shape[0] > 0:
            rt.host.dev[k] = overlap
            rt.host.hcredit[k] = 0.0
            if overlap < nshare:
                overlap = _with_host_blocks(rt, k, keys, overlap, nshare)
        rt.overlap[k] = overlap
        rt.cost[k] = _target_cost_nb(rt, k, keys, nfull, nshare, overlap, isl, bs, min_pf, req_blocks)


@inner
def score_queued_nb(rt, r, keys, nfull, nshare, isl, bs, n_targets, gstate, dp):
    """``score_targets_nb`` for request ``r`` leaving the router queue: the loads are those of
    now, the overlaps those its queue entry saw (``rt.qov``: Dynamo 1.6.1 keeps a queued
    request's overlap scores from its arrival, decision 0410). No host tier."""
    min_pf = np.int64(0)
    if rt.decay > 0.0 and rt.track_prefill:
        min_pf = _least_prefill_nb(rt, n_targets, gstate, dp)
    req_blocks = float((isl + bs - 1) // bs)
    for k in range(n_targets):
        if gstate[k if dp == 1 else k // dp] != 2:  # fleet.ACTIVE
            rt.cost[k] = np.inf
            rt.overlap[k] = 0
            continue
        overlap = np.int64(rt.qov[r, k])
        rt.overlap[k] = overlap
        rt.cost[k] = _target_cost_nb(rt, k, keys, nfull, nshare, overlap, isl, bs, min_pf, req_blocks)


@inner
def choose_target_nb(rt, n_targets):
    """Lowest cost (seeded uniform tie-break) at T = 0, normalised softmax sampling at T > 0."""
    cost = rt.cost
    lo = np.inf
    hi = -np.inf
    n_ok = 0
    for k in range(n_targets):
        if cost[k] < np.inf:
            n_ok += 1
            if cost[k] < lo:
                lo = cost[k]
            if cost[k] > hi:
                hi = cost[k]
    if rt.temperature > 0.0 and hi > lo:
        total = 0.0
        for k in range(n_targets):
            if cost[k] < np.inf:
                total += np.exp(-(cost[k] - lo) / ((hi - lo) * rt.temperature))
        u = _uniform(rt.rng) * total
        acc = 0.0
        last = 0
        for k in range(n_targets):
            if cost[k] < np.inf:
                acc += np.exp(-(cost[k] - lo) / ((hi - lo) * rt.temperature))
                last = k
                if u < acc:
                    return k
        return last
    n_ties = 0
    for k in range(n_targets):
        if cost[k] == lo:
            n_ties += 1
    pick = np.int64(_next_u64(rt.rng) % np.uint64(n_ties)) if n_ties > 1 else 0
    for k in range(n_targets):
        if cost[k] == lo:
            if pick == 0:
                return k
            pick -= 1
    return 0


@inner
def commit_route_nb(rt, keys, nfull, nshare, isl, bs, r, k):
    """Account request ``r`` (routed to target ``k``) in the router's load state. Of its full
    prompt blocks ``keys[:nfull]`` only the first ``nshare`` can be shared: the others are new to
    any union and leave it with the request, so they are counted without the table."""
    if rt.host.tres.shape[0] > 0:  # the weighted overlap's cached tokens, rounded
        contrib = isl - np.int64(np.floor((float(rt.host.dev[k]) + rt.host.hcredit[k]) * bs + 0.5))
    else:
        contrib = isl - rt.overlap[k] * bs
    rt.route_pf[r] = contrib
    if rt.host.chosen.shape[0] > 0:
        rt.host.chosen[r] = rt.overlap[k]
    rt.pf_open[r] = True
    rt.pf[k] += contrib
    rt.nreq[k] += 1
    if rt.track_active:
        if rt.dedup:
            for j in range(nshare):
                if _union_add(rt, k, keys[j]):
                    rt.active[k] += 1
            rt.active[k] += nfull - nshare
        else:
            rt.active[k] += nfull


@inner
def note_route_nb(rt, r, n_targets, now):
    """Keep request ``r``'s routing figures, if they are kept: the best overlap among the scored
    targets, and ``now`` as its release time if it waited in the router queue."""
    if rt.best.shape[0] == 0:
        return
    best = 0
    for k in range(n_targets):
        if rt.overlap[k] > best:
            best = rt.overlap[k]
    rt.best[r] = best
    if rt.released[r] < 0.0:
        rt.released[r] = now


@inner
def note_queued_nb(rt, r):
    """Mark request ``r`` as waiting in the router queue (if routing figures are kept)."""
    if rt.released.shape[0] > 0:
        rt.released[r] = -1.0


@inner
def release_prefill_nb(rt, r, k):
    """The request's first token came (or it ended): its prefill load leaves the target."""
    if rt.pf_open[r]:
        rt.pf[k] -= rt.route_pf[r]
        rt.pf_open[r] = False


@inner
def free_request_nb(rt, k):
    """A request routed to target ``k`` leaves the router's count of its active requests."""
    rt.nreq[k] -= 1


@inner
def release_blocks_nb(rt, keys, nfull, nshare, k):
    """The request ended: it leaves the target's active requests, and its prompt blocks the
    target's active union (``nshare`` as in ``commit_route_nb``)."""
    free_request_nb(rt, k)
    if not rt.track_active:
        return
    if rt.dedup:
        for j in range(nshare):
            if _union_remove(rt, k, keys[j]):
                rt.active[k] -= 1
        rt.active[k] -= nfull - nshare
    else:
        rt.active[k] -= nfull


@inner
def all_busy_nb(rt, n_targets):
    """Router-queue test: every target's in-flight prefill exceeds ``thr * budget`` (strict)."""
    if rt.queue_thr < 0.0:
        return False
    limit = rt.queue_thr * rt.budget
    for k in range(n_targets):
        if not rt.pf[k] > limit:
            return False
    return True


# ----------------------------------------------------------------------------- router queue
@inner
def queue_key_nb(rt, now, isl, bs, n_targets):
    """The router-queue priority of a request arriving at ``now`` (lower leaves first): its
    arrival (fcfs), the reverse (lcfs), or its prompt tokens not cached on the best target (wspt;
    ``rt.overlap`` must hold its scores)."""
    if rt.policy == FCFS:
        return now
    if rt.policy == LCFS:
        return -now
    best = 0
    for k in range(n_targets):
        if rt.overlap[k] > best:
            best = rt.overlap[k]
    return float(max(isl - best * bs, 1))


@inner
def jumped_key_nb(policy, key, jump):
    """A queue key of ``queue_key_nb`` with the request's priority jump added, as Dynamo scores a
    queued request (highest score first, so the key is its negation): fcfs ``jump - t / 1000``
    and lcfs ``jump + t / 1000`` (``t`` the arrival in ms, the key's own time), wspt ``(1 + jump) /
    cost`` (``cost`` the key itself)."""
    if policy == FCFS:
        return -(jump - key / 1000.0)
    if policy == LCFS:
        return -(jump + (-key) / 1000.0)
    return -((1.0 + jump) / key)


@kernel_noalloc
def queue_push_nb(rt, r, key):
    """Queue request ``r`` with priority ``key`` (lower leaves first; enqueue order breaks ties;
    with request priorities, the strict priority first and the key with the request's jump).
    ``rt.overlap`` holds its scores if its queue-entry overlaps are kept (``rt.qov``)."""
    if rt.qov.shape[0] > 0:
        for k in range(rt.qov.shape[1]):
            rt.qov[r, k] = rt.overlap[k]
    rt.qseq[r] = rt.state[QSEQ]
    rt.state[QSEQ] += 1
    if rt.qjump.shape[0] > 0:
        rt.qkey[r] = jumped_key_nb(rt.policy, key, rt.qjump[r])
        heap_push_ranked_nb(rt.queue, rt.state, np.int64(NQUEUE), rt.qrank, rt.qkey, rt.qseq, r)
    else:
        rt.qkey[r] = key
        heap_push_nb(rt.queue, rt.state, np.int64(NQUEUE), rt.qkey, rt.qseq, r)


@kernel_noalloc
def queue_pop_nb(rt):
    """Remove and return the queue's first request."""
    if rt.qjump.shape[0] > 0:
        return heap_pop_ranked_nb(rt.queue, rt.state, np.int64(NQUEUE), rt.qrank, rt.qkey, rt.qseq)
    return heap_pop_nb(rt.queue, rt.state, np.int64(NQUEUE), rt.qkey, rt.qseq)
