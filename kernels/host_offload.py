"""vLLM's offloading connector over the host tier (G2): what a pass does with a rank's host tier.

Dynamo 1.6.1 models vLLM's ``OffloadingConnector`` (docs/decisions/0350, 0351 and 0352 hold the
rules and the experiments that settled them). ``kernels/host_tier.py`` keeps the tier's entries
and copy lanes; this module ties them to the requests, the GPU pool and the pass:

* **Stores (write-through).** After a pass's two phases, each request it scheduled, in running
  order, offers its prompt blocks computed past its store cursor: those the tier misses form one
  store cohort, prepared in the pass and submitted at its end. The cohort's GPU blocks are
  *pinned* (``pin``, per pool slot) by the store's id until it completes.
* **Fences.** A new GPU block taken (evicted) from a pinned block may not be written before that
  store completes: the rank's compute start waits for it (``cnb``, a running maximum, as
  Dynamo's ``compute_not_before``), and the taker's own store waits one pass (its blocks are
  still read). A preempted request's latest store fences the compute start too.
* **Loads.** In the admission phase, a request's prompt blocks past its GPU prefix that the tier
  holds, in order, are a hit: GPU blocks are reserved for the GPU prefix and the loaded suffix,
  an H2D copy is queued (after any store still reading the reserved blocks), and the request
  sleeps in the rank's *connector queue* (vLLM's ``skipped_waiting``) until a transfer
  completes. When its load completes, the loaded blocks become its cached GPU blocks and the
  next admission attempt takes them as its prefix.
* **Deferrals.** A lookup that meets a block still being stored or loaded for another request,
  or the request's own store in flight, sends the request to the connector queue asleep.
* **Boundaries.** At a pass end, transfers due complete (stores first), the prepared stores are
  submitted, and transfers due at once complete; any completion wakes the connector queue's
  sleepers. A rank without a pass in flight completes its transfers at their deadlines (events
  of the loop).

* **Recency.** A lookup, and a store cohort prepared, touch the request's prompt blocks in reverse
  order (vLLM's ``LRUCachePolicy.touch``); a cohort that does not fit even after evicting is
  retried at the next pass (decision 0354).

A transfer ring that fills stops the run with ``flag[STOP]`` set (the caller reruns it with larger
rings). ``TierRun`` is passed to the pass and the loop as its own argument, None
without a tier, so that a run without one never compiles this module.
"""

from typing import NamedTuple

import numpy as np

from fastsim.kernels.admission import finish_nb, log_readmission, schedule
from fastsim.kernels.blocks import blocks_ceil, blocks_floor, fill_keys, key_span
from fastsim.kernels.g3_tier import make_g3_tier
from fastsim.kernels.codes import SCHEDULED, TERM_REJECTED, WAITING
from fastsim.kernels.host_fences import eviction_dep_nb, store_in_flight_nb
from fastsim.kernels.g3_tier import (FULL, KTAIL, WRITE, advance_nb, contains_nb, drop_done_nb, instant_reads_nb,
                                     next_event_nb, probe_nb, submit_read_nb, submit_write_nb, take_first_nb)
from fastsim.kernels.g3_tier import EPOCH as G3_EPOCH
from fastsim.kernels.host_tier import (CLOCK, HIT, LOAD, LOG_FULL, MISS, PENDING, PREPARED, can_reserve_prefix_nb,
                                       complete_external_nb,
                                       loading_nb, lookup_nb, next_deadline_nb, pin_external_nb, pop_due_nb,
                                       prepare_store_nb, reserve_external_nb, schedule_load_nb, seal_ghosts_nb,
                                       store_blocks_nb, store_fence_nb, submit_prepared_nb, touch_nb, unpin_begin_nb,
                                       unpin_end_nb, unpin_nb)
from fastsim.kernels.jit import inline, inner
from fastsim.kernels.kvpool import NACTIVE, alloc_nb, can_use_nb, match_slots_nb, register_nb, seal_feed_nb
from fastsim.kernels.queues import start_running, unlink_waiting
from fastsim.kernels.rank_state import BUDGET, NLOG, PREEMPTED_ANY, PROGRESS

# a request's load state (Dynamo's ``LoadState``)
NO_LOAD, LOADING, ACTIVATED = 0, 1, 2
# ``TierRun.flag`` slots: why the run stopped (0: it did not), and the rank
STOP, STOP_RANK = 0, 1
# a request whose lookups submitted this many reads from G3 while its rank scheduled nothing (since
# it was admitted, or the rank last scheduled work) restores nothing more from G3 until it is
# admitted: Dynamo 1.6.1's "G3 restore made no progress in 1024 rounds; continuing without further
# G3 restores" (decisions 0420, 0485)
G3_MAX_ROUNDS = 1024


class TierRun(NamedTuple):
    """The host tiers of a run and every request's connector state (module docstring)."""

    ht: object  # host_tier.HostTier
    # per request
    cursor: np.ndarray  # int64[n]: prompt blocks offered to the tier so far (store cursor)
    last_store: np.ndarray  # int64[n]: id of its latest store (-1: none)
    lstate: np.ndarray  # int8[n]: NO_LOAD, LOADING, ACTIVATED
    ltid: np.ndarray  # int64[n]: its load's transfer id
    lpb: np.ndarray  # int64[n]: blocks its load reserved (GPU prefix + loaded suffix)
    lg1: np.ndarray  # int64[n]: GPU-prefix tokens found before its load
    lg1b: np.ndarray  # int64[n]: ... in blocks
    lfoot: np.ndarray  # int64[n]: its known blocks when the load was queued
    wdep: np.ndarray  # int64[n]: latest store its new GPU blocks were taken from (-1: none)
    wlo: np.ndarray  # int64[n]: the first of those blocks
    first_g1: np.ndarray  # int64[n]: first admission's reuse from the GPU pool (-1: not yet)
    first_host: np.ndarray  # int64[n]: ... and from the host tier
    sched: np.ndarray  # int64[n]: the rank pass (+1) that last scheduled it
    cq_next: np.ndarray  # int64[n]: connector queue links
    cq_prev: np.ndarray  # int64[n]
    in_cq: np.ndarray  # int8[n]
    asleep: np.ndarray  # int8[n]: waits for a transfer to complete
    # per rank
    cq_head: np.ndarray  # int64[R]
    cq_tail: np.ndarray  # int64[R]
    n_cq: np.ndarray  # int64[R]
    n_asleep: np.ndarray  # int64[R]
    cnb: np.ndarray  # float64[R]: no compute before (fences met so far)
    # the request whose prompt was touched last on the rank, and the LRU clock after it: touching
    # it again before anything else moves the clock leaves the LRU order as it is (skipped)
    touched_row: np.ndarray  # int64[R]
    touched_clock: np.ndarray  # int64[R]
    # per GPU pool slot
    pin: np.ndarray  # int64[R * cap]: id + 1 of the store that read the block (0: none)
    mark: np.ndarray  # int8[R * cap]: scratch of the eviction walk
    # per full prompt block, laid out as the requests' block keys (``rq.key_ptr``): Dynamo's
    # sequence hash, which orders the blocks of one transfer in the host LRU (0354)
    dhash: np.ndarray  # uint64[blocks]
    keys: np.ndarray  # uint64[max blocks of a request]: scratch
    hashes: np.ndarray  # uint64[max blocks of a request]: scratch
    miss: np.ndarray  # bool[max blocks of a request]: scratch
    flag: np.ndarray  # int64[2]: STOP reason, its rank
    # the G3 tier behind the host tiers (``kernels/g3_tier.py``; ``g3.cap`` 0: none) and scratch
    # for its blocks: those a lookup stages, the stores a boundary completes, a store's blocks
    g3: object
    g3keys: np.ndarray  # uint64[max blocks of a request]
    g3stores: np.ndarray  # int64[transfers in flight of a rank]
    g3skeys: np.ndarray  # uint64[blocks of a transfer]
    g3shash: np.ndarray  # uint64[blocks of a transfer]
    g3n: np.ndarray  # int64[n]: reads from G3 its lookups submitted while its rank was stalled (G3_MAX_ROUNDS)
    g3skip: np.ndarray  # int8[n]: it restores nothing more from G3 until admitted (G3_MAX_ROUNDS)
    g3bypass: np.ndarray  # int64[1]: times a request gave up restoring (Dynamo's ``bypassed_restores``)
    # with reads that take no time, the (request, block) pairs each rank staged at its instant
    # ``att_at`` (a read completes at once, so a later lookup at the same instant may meet them
    # evicted again: Dynamo stages them again only if the prefix can fit; decision 0452)
    att_row: np.ndarray  # int64[R * n_att]
    att_key: np.ndarray  # uint64[R * n_att]
    att_n: np.ndarray  # int64[R]
    att_at: np.ndarray  # float64[R]


def make_tier_run(ht, n_rows, n_ranks, cap, max_blocks, dhash, g3=None, n_att=1):
    """The connector state of ``n_rows`` requests on ``n_ranks`` ranks of ``cap`` GPU blocks;
    ``dhash``: Dynamo's sequence hash of every full prompt block (``kernels/dynamo_hash.py``)."""

    def full(v):
        return np.full(n_rows, v, dtype=np.int64)

    return TierRun(
        ht=ht, cursor=full(0), last_store=full(-1), lstate=np.zeros(n_rows, dtype=np.int8),
        ltid=full(-1), lpb=full(0), lg1=full(0), lg1b=full(0), lfoot=full(0), wdep=full(-1), wlo=full(0),
        first_g1=full(-1), first_host=full(-1), sched=full(0), cq_next=full(-1), cq_prev=full(-1),
        in_cq=np.zeros(n_rows, dtype=np.int8), asleep=np.zeros(n_rows, dtype=np.int8),
        cq_head=np.full(n_ranks, -1, dtype=np.int64), cq_tail=np.full(n_ranks, -1, dtype=np.int64),
        n_cq=np.zeros(n_ranks, dtype=np.int64), n_asleep=np.zeros(n_ranks, dtype=np.int64),
        cnb=np.zeros(n_ranks), touched_row=np.full(n_ranks, -1, dtype=np.int64),
        touched_clock=np.zeros(n_ranks, dtype=np.int64), pin=np.zeros(n_ranks * cap, dtype=np.int64),
        mark=np.zeros(n_ranks * cap, dtype=np.int8), dhash=dhash,
        keys=np.zeros(max(max_blocks, 1), dtype=np.uint64), hashes=np.zeros(max(max_blocks, 1), dtype=np.uint64),
        miss=np.zeros(max(max_blocks, 1), dtype=np.bool_),
        flag=np.zeros(2, dtype=np.int64),
        g3=g3 if g3 is not None else make_g3_tier(n_ranks, 0, 1.0, 0.0, 0.0, 0.0, n_jobs=1, n_keys=1),
        g3keys=np.zeros(max(max_blocks, 1), dtype=np.uint64),
        g3stores=np.zeros(ht.xkind.shape[0] // ht.meta.shape[0], dtype=np.int64),
        g3skeys=np.zeros(max(max_blocks, ht.cap, 1), dtype=np.uint64),
        g3shash=np.zeros(max(max_blocks, ht.cap, 1), dtype=np.uint64),
        g3n=np.zeros(n_rows, dtype=np.int64), g3skip=np.zeros(n_rows, dtype=np.int8),
        g3bypass=np.zeros(1, dtype=np.int64),
        att_row=np.zeros(n_ranks * n_att, dtype=np.int64), att_key=np.zeros(n_ranks * n_att, dtype=np.uint64),
        att_n=np.zeros(n_ranks, dtype=np.int64), att_at=np.full(n_ranks, -1.0),
    )


# ----------------------------------------------------------------------------- connector queue
@inner
def _cq_unlink(tr, k, r):
    p = tr.cq_prev[r]
    n = tr.cq_next[r]
    if p >= 0:
        tr.cq_next[p] = n
    else:
        tr.cq_head[k] = n
    if n >= 0:
        tr.cq_prev[n] = p
    else:
        tr.cq_tail[k] = p
    tr.cq_prev[r] = -1
    tr.cq_next[r] = -1
    tr.in_cq[r] = 0
    tr.n_cq[k] -= 1
    if tr.asleep[r]:
        tr.asleep[r] = 0
        tr.n_asleep[k] -= 1


@inner
def _sleep(tr, rq, rk, k, r):
    """``r`` waits in rank ``k``'s connector queue for a transfer to complete (it joins the queue's
    tail if it is not in it yet, leaving the ordinary waiting queue)."""
    if not tr.in_cq[r]:
        unlink_waiting(rq, rk, k, r)
        t = tr.cq_tail[k]
        tr.cq_prev[r] = t
        tr.cq_next[r] = -1
        if t >= 0:
            tr.cq_next[t] = r
        else:
            tr.cq_head[k] = r
        tr.cq_tail[k] = r
        tr.in_cq[r] = 1
        tr.n_cq[k] += 1
    if not tr.asleep[r]:
        tr.asleep[r] = 1
        tr.n_asleep[k] += 1


@inner
def _leave_queue(tr, rq, rk, k, r):
    """``r`` leaves whichever waiting queue holds it (admitted or rejected)."""
    if tr.in_cq[r]:
        _cq_unlink(tr, k, r)
    else:
        unlink_waiting(rq, rk, k, r)


@inner
def _wake_all(tr, k):
    r = tr.cq_head[k]
    while r >= 0:
        tr.asleep[r] = 0
        r = tr.cq_next[r]
    tr.n_asleep[k] = 0


@inner
def ready_waiters_nb(tr, k):
    """Requests of rank ``k``'s connector queue that may be tried in a pass (not asleep)."""
    return tr.n_cq[k] - tr.n_asleep[k]


@inner
def _next_candidate(tr, rk, k):
    """vLLM's next waiting request: the first ready one of the connector queue, else the head of
    the ordinary waiting queue. With a G3 tier, Dynamo first takes the first ready one that holds
    GPU blocks for a host load (queued or landed), so that a request staging blocks from G3 ahead
    of it in the queue cannot keep it waiting (decision 0420)."""
    if tr.n_cq[k] > tr.n_asleep[k]:
        if tr.g3.cap > 0:
            r = tr.cq_head[k]
            while r >= 0:
                if not tr.asleep[r] and tr.lstate[r] != NO_LOAD:
                    return r
                r = tr.cq_next[r]
        r = tr.cq_head[k]
        while r >= 0:
            if not tr.asleep[r]:
                return r
            r = tr.cq_next[r]
    return np.int64(rk.wait_head[k])


# ----------------------------------------------------------------------------- lookups
@inline
def _host_lookup(tr, p, rq, k, r, base, n_prompt, now):
    """Dynamo's host lookup of ``r`` past its ``base`` GPU-prefix blocks: (MISS, 0), (PENDING, 0)
    for a deferral, or (HIT, blocks)."""
    ht = tr.ht
    st = tr.lstate[r]
    if st == ACTIVATED:
        return MISS, np.int64(0)
    if st == LOADING:
        return PENDING, np.int64(0)
    if tr.last_store[r] >= 0:
        if store_in_flight_nb(tr, k, tr.last_store[r]):
            return PENDING, np.int64(0)
        tr.last_store[r] = -1
    if tr.g3.cap > 0 and base < n_prompt and _stage(tr, rq, k, r, base, n_prompt, now):
        _touch_prompt(tr, k, r, n_prompt)
        return PENDING, np.int64(0)
    kind, nh = _host_match(tr, k, base, n_prompt)
    _touch_prompt(tr, k, r, n_prompt)  # vLLM touches the prompt's blocks after the lookup
    return kind, nh


@inner
def _touch_prompt(tr, k, r, n_prompt):
    """Touch request ``r``'s prompt blocks (``tr.keys[:n_prompt]``) in reverse order, each with
    its own recency (vLLM's ``LRUCachePolicy.touch``)."""
    ht = tr.ht
    if tr.touched_row[k] == r and tr.touched_clock[k] == ht.meta[k, CLOCK]:
        return  # its blocks are the most recent already, in this order
    for j in range(n_prompt - 1, -1, -1):
        touch_nb(ht, k, tr.keys[j])
    tr.touched_row[k] = r
    tr.touched_clock[k] = ht.meta[k, CLOCK]


@inner
def _stage(tr, rq, k, r, base, n_prompt, now):
    """Dynamo's G3 staging before a host lookup: the prompt's blocks past the GPU prefix that the
    host tier misses and G3 holds, in order up to the first that neither holds (or that the host
    tier has no room for), get a reserved host entry each and one read from G3. True when the
    lookup must wait: a read was submitted, or a block is still on its way to either tier. A
    request that submitted ``G3_MAX_ROUNDS`` reads while its rank scheduled nothing stages nothing
    more, probes included, until it is admitted (Dynamo's bypass)."""
    ht = tr.ht
    g = tr.g3
    if tr.g3skip[r]:
        return False
    if tr.g3n[r] >= G3_MAX_ROUNDS:
        tr.g3skip[r] = 1
        tr.g3bypass[0] += 1
        return False
    kbase = key_span(rq, r)[0]
    instant = instant_reads_nb(g)
    if instant and now > tr.att_at[k]:
        tr.att_at[k] = now
        tr.att_n[k] = 0
    deferred = False
    n = 0
    for j in range(base, n_prompt):
        key = tr.keys[j]
        s = lookup_nb(ht, k, key)
        if s == HIT:
            continue
        if s == PENDING:
            deferred = True
            continue
        q = probe_nb(g, k, key)
        if q == 2:
            if instant and _attempted(tr, k, r, key) and not _prefix_fits(tr, k, base, n_prompt):
                break
            if not reserve_external_nb(ht, k, key, tr.dhash[kbase + j]):
                break
            tr.g3keys[n] = key
            n += 1
        elif q == 1:
            deferred = True
        else:
            break
    if n == 0:
        return deferred
    tr.g3n[r] += 1
    if not submit_read_nb(g, k, tr.g3keys, n, now) and tr.flag[STOP] == 0:
        tr.flag[STOP] = LOG_FULL
        tr.flag[STOP_RANK] = k
    if instant:
        n_att = tr.att_row.shape[0] // tr.att_n.shape[0]
        for i in range(n):
            if tr.att_n[k] == n_att:  # full: the run starts again with larger rings
                if tr.flag[STOP] == 0:
                    tr.flag[STOP] = LOG_FULL
                    tr.flag[STOP_RANK] = k
                break
            tr.att_row[k * n_att + tr.att_n[k]] = r
            tr.att_key[k * n_att + tr.att_n[k]] = tr.g3keys[i]
            tr.att_n[k] += 1
    return True


@inner
def _attempted(tr, k, r, key):
    """Request ``r`` staged block ``key`` on rank ``k`` at this instant already."""
    n_att = tr.att_row.shape[0] // tr.att_n.shape[0]
    for i in range(k * n_att, k * n_att + tr.att_n[k]):
        if tr.att_row[i] == r and tr.att_key[i] == key:
            return True
    return False


@inner
def _prefix_fits(tr, k, base, n_prompt):
    """The prompt's blocks past the GPU prefix, up to the first that neither the host tier nor G3
    holds, would fit the host tier together (Dynamo's same-instant re-promotion check)."""
    n = base
    while n < n_prompt and (lookup_nb(tr.ht, k, tr.keys[n]) != MISS or contains_nb(tr.g3, k, tr.keys[n])):
        n += 1
    return can_reserve_prefix_nb(tr.ht, k, tr.keys[base:n], n - base)


@inline
def _host_match(tr, k, base, n_prompt):
    """The host blocks right after the GPU prefix (Dynamo's ``lookup_visited``)."""
    ht = tr.ht
    if base >= n_prompt:
        return MISS, np.int64(0)
    matched = np.int64(0)
    deferred = False
    for j in range(base, n_prompt):
        key = tr.keys[j]
        s = lookup_nb(ht, k, key)
        if s == HIT:
            matched += 1
            if loading_nb(ht, k, key):
                deferred = True
        elif s == PENDING:
            matched += 1
            deferred = True
        else:
            break
    if matched == 0:
        return MISS, np.int64(0)
    if deferred:
        return PENDING, np.int64(0)
    return HIT, matched


@inline
def _start_load(tr, p, pool, rq, k, r, base, nh, length, now, hslot):
    """Reserve GPU blocks for ``r``'s GPU prefix (``base`` blocks) and its ``nh`` host blocks and
    queue their copy: True, or False when the pool cannot hold them (``CapacityBlocked``)."""
    n = base + nh
    if not can_use_nb(pool, k, tr.keys, n, base):
        return False
    dep = eviction_dep_nb(tr, pool, k, tr.keys, base, nh)
    kbase, nkeys = key_span(rq, r)
    alloc_nb(pool, k, tr.keys, n, rq.bslot, kbase, base, n, nkeys, hslot)
    rq.nheld[r] = n
    rq.alloc[r] = n * p.block_size
    not_before = now
    if dep >= 0:
        d = store_fence_nb(tr.ht, k, dep)
        if d > not_before:
            not_before = d
    res, tid = schedule_load_nb(tr.ht, k, r, tr.keys[base:], nh, now, not_before)
    if res == LOG_FULL:
        tr.flag[STOP] = LOG_FULL
        tr.flag[STOP_RANK] = k
    tr.lstate[r] = LOADING
    tr.ltid[r] = tid
    tr.lpb[r] = n
    tr.lg1[r] = min(base * p.block_size, length)
    tr.lg1b[r] = base
    tr.lfoot[r] = blocks_ceil(p, length)
    return True


@inner
def _inflight_tail_blocks(tr, p, rq, rk, k):
    """Blocks that running chunked prefills still need and that loads queued or completed on rank
    ``k`` have not reserved: vLLM keeps them free when it starts another load."""
    total = np.int64(0)
    cur = rk.xhead[k]
    while cur >= 0:
        if rq.computed[cur] < rq.isl[cur]:
            total += max(blocks_ceil(p, rq.isl[cur] + rq.generated[cur]) - blocks_ceil(p, rq.alloc[cur]), 0)
        cur = rq.xnext[cur]
    r = tr.cq_head[k]
    while r >= 0:
        if tr.lstate[r] != NO_LOAD:
            total += max(tr.lfoot[r] - tr.lpb[r], 0)
        r = tr.cq_next[r]
    return total


@inline
def admit_waiting_tier(p, pool, rq, rk, k, now, defer, pa, pend_head, pend_tail, g, tr):
    """Phase B with a host tier (``scheduler._admit_waiting_requests`` plus the connector): the
    candidate is the connector queue's first ready request, else the waiting queue's head; its
    GPU prefix is looked up, then the host tier (a hit queues a load, a deferral sleeps).
    ``defer``: a throttled step of the DP prefill cadence (decision 0341) admits no request that
    computes more than its last prompt token; host loads still start."""
    acc = pa.acc
    bs = p.block_size
    while acc[PREEMPTED_ANY] == 0 and rk.n_run[k] < p.max_seqs and acc[BUDGET] > 0:
        u = _next_candidate(tr, rk, k)
        if u < 0:
            break
        length = rq.isl[u] + rq.generated[u]
        if p.max_model_len > 0 and rq.isl[u] >= p.max_model_len:
            _leave_queue(tr, rq, rk, k, u)
            finish_nb(p, pool, rq, rk, k, np.int64(u), np.int64(TERM_REJECTED), pend_head, pend_tail, g,
                      np.bool_(True))
            acc[PROGRESS] = 1
            continue
        n_prompt = rq.isl[u] // bs
        nfull = blocks_floor(p, length)
        fill_keys(rq, np.int64(u), np.int64(0), nfull, tr.keys)
        matched, active = match_slots_nb(pool, k, tr.keys, nfull, pa.hslot)
        activated = tr.lstate[u] == ACTIVATED
        if activated:  # the first try after a load: the loaded prefix, frozen
            matched = tr.lpb[u]
            active = tr.lpb[u]
        kind, nh = _host_lookup(tr, p, rq, k, u, matched, n_prompt, now)
        if kind == PENDING:
            _sleep(tr, rq, rk, k, u)
            acc[PROGRESS] = 1
            continue
        if rq.status[u] == WAITING and blocks_ceil(p, length) > p.cap:
            _leave_queue(tr, rq, rk, k, u)
            finish_nb(p, pool, rq, rk, k, np.int64(u), np.int64(TERM_REJECTED), pend_head, pend_tail, g,
                      np.bool_(True))
            acc[PROGRESS] = 1
            continue
        cached = matched * bs
        if rq.generated[u] < rq.osl[u] and not (p.max_model_len > 0 and length >= p.max_model_len):
            cap = blocks_floor(p, length - 1) * bs  # logits: the last block is recomputed
            if cached > cap:
                cached = cap
        elif cached > length:
            cached = length
        active_cached = min(active, blocks_floor(p, cached))
        held = tr.lpb[u] if tr.lstate[u] != NO_LOAD else 0
        needed = blocks_ceil(p, length) - max(active_cached, held)
        avail = p.cap - pool.meta[k, NACTIVE]
        if kind == HIT:
            avail -= _inflight_tail_blocks(tr, p, rq, rk, k)
        if needed > avail:
            break  # head-of-line blocking
        if kind == HIT:
            if not _start_load(tr, p, pool, rq, k, u, matched, nh, length, now, pa.hslot):
                break
            _sleep(tr, rq, rk, k, u)
            acc[PROGRESS] = 1
            continue
        if defer and length - cached > 1:
            break
        before = acc[BUDGET]
        res = schedule(p, pool, rq, rk, k, np.int64(u), np.int64(cached), pa, tr)
        if res != SCHEDULED:
            break
        _leave_queue(tr, rq, rk, k, u)
        start_running(rq, rk, k, u)
        _admitted(tr, p, rq, u, cached, now)
        if rq.npreempt[u] > 0:
            log_readmission(p, pa, u, cached, now)
        acc[PROGRESS] = 1
        if before - acc[BUDGET] == 0 and acc[BUDGET] == 0:
            break


@inner
def _admitted(tr, p, rq, u, cached, now):
    """Admission bookkeeping: first admission time and reuse (split by tier), the store cursor
    moved past a loaded prefix, the load consumed."""
    g1 = cached
    host = np.int64(0)
    if tr.lstate[u] == ACTIVATED:
        g1 = min(tr.lg1[u], cached)
        host = cached - g1
        tr.cursor[u] = cached // p.block_size
    tr.lstate[u] = NO_LOAD
    tr.g3n[u] = 0
    tr.g3skip[u] = 0
    if np.isnan(rq.first_admit[u]):
        rq.first_admit[u] = now
        if cached > 0:
            rq.first_reused[u] = cached
        tr.first_g1[u] = g1
        tr.first_host[u] = host
    if cached > 0 and cached > rq.reused[u]:
        rq.reused[u] = cached


# ----------------------------------------------------------------------------- stores
@inline
def offer_stores_nb(p, rq, rk, k, pa, tr):
    """After both phases: every request scheduled in this pass, in running order, offers its
    prompt blocks computed past its cursor (one store cohort of those the tier misses). A pass
    that scheduled work resets its rank's restore rounds (``G3_MAX_ROUNDS``)."""
    acc = pa.acc
    if acc[NLOG] > 0 and tr.g3.cap > 0:
        _reset_rounds(tr, k)
    stamp = rk.rpass[k]
    for i in range(acc[NLOG]):
        r = pa.slog[i, 0]
        if r >= 0:
            tr.sched[r] = stamp
    cur = rk.xhead[k]
    while cur >= 0:
        if tr.sched[cur] == stamp:
            _offer_store(p, rq, k, cur, tr)
        cur = rq.xnext[cur]


@inner
def _reset_rounds(tr, k):
    """Rank ``k`` scheduled work: its waiting requests' G3 restore rounds count from 0 again (a
    request that restored is in the connector queue until it is admitted)."""
    r = tr.cq_head[k]
    while r >= 0:
        tr.g3n[r] = 0
        r = tr.cq_next[r]


@inner
def _offer_store(p, rq, k, r, tr):
    """Request ``r``'s store cohort: its prompt blocks from its cursor to those now computed that
    the tier misses (Dynamo's ``observe_completed_blocks``)."""
    ht = tr.ht
    end = min(rq.computed[r], rq.isl[r]) // p.block_size
    c0 = tr.cursor[r]
    if end <= c0:
        return
    n = fill_keys(rq, np.int64(r), c0, end, tr.keys)
    n_miss = 0
    last = np.int64(-1)
    for i in range(n):
        tr.miss[i] = lookup_nb(ht, k, tr.keys[i]) == MISS
        if tr.miss[i]:
            last = c0 + i
            n_miss += 1
    if n_miss == 0:
        tr.cursor[r] = end
        return
    if tr.wdep[r] >= 0:
        if store_in_flight_nb(tr, k, tr.wdep[r]):
            if last >= tr.wlo[r]:
                return  # blocks still written after a fence: retried at the next pass
        else:
            tr.wdep[r] = -1
    kbase = key_span(rq, r)[0]
    for i in range(n):
        tr.hashes[i] = tr.dhash[kbase + c0 + i]
    res, tid = prepare_store_nb(ht, k, r, tr.keys, tr.hashes, n)
    if res == PREPARED:
        sbase = k * p.cap
        for i in range(n):
            if tr.miss[i]:
                tr.pin[sbase + rq.bslot[kbase + c0 + i]] = tid + 1
        tr.last_store[r] = tid
        tr.cursor[r] = end
        n_prompt = fill_keys(rq, np.int64(r), np.int64(0), rq.isl[r] // p.block_size, tr.keys)
        _touch_prompt(tr, k, r, n_prompt)  # then the prompt's blocks are touched, last first
    elif res == LOG_FULL and tr.flag[STOP] == 0:
        tr.flag[STOP] = res
        tr.flag[STOP_RANK] = k
    # RETRY_CAPACITY: too few blocks to evict; the cursor stays and the next pass tries again


# ----------------------------------------------------------------------------- transfers
@inner
def _advance(tr, pool, rq, k, now):
    """Complete rank ``k``'s transfers due by ``now``; a completed load's blocks become its
    request's cached GPU blocks. True if any completed."""
    any_done = False
    n_stores = 0
    while True:
        tid, kind, r = pop_due_nb(tr.ht, k, now)
        if tid < 0:
            break
        any_done = True
        if kind != LOAD:
            if tr.g3.cap > 0:  # written to G3 once every due transfer has completed
                tr.g3stores[n_stores] = tid
                n_stores += 1
        else:
            # the loaded blocks (the reservation past the GPU prefix) become visible
            register_nb(pool, k, rq.bslot, key_span(rq, r)[0], tr.lg1b[r], tr.lpb[r])
            # Dynamo publishes the loaded blocks' stored KV events as the load completes, not at
            # the end of the next pass (a lagging kv_router sees them from then; 0353)
            seal_feed_nb(pool, k, now)
            tr.lstate[r] = ACTIVATED
    if tr.g3.cap > 0:
        for i in range(n_stores):
            _write_g3(tr, k, tr.g3stores[i], now)
        if _take_g3(tr, k, now):
            any_done = True
    return any_done


@inner
def _write_g3(tr, k, tid, now):
    """A completed host store of rank ``k`` is written to G3: the blocks G3 takes stay pinned in
    the host tier until the write completes."""
    ht = tr.ht
    g = tr.g3
    n = store_blocks_nb(ht, k, tid, tr.g3skeys, tr.g3shash)
    m = submit_write_nb(g, k, tr.g3skeys, tr.g3shash, n, now)
    if m > 0:
        n_ring = g.kkey.shape[0]
        for i in range(g.meta[KTAIL] - m, g.meta[KTAIL]):
            pin_external_nb(ht, k, g.kkey[i % n_ring])
    elif g.meta[FULL] != 0 and tr.flag[STOP] == 0:
        tr.flag[STOP] = LOG_FULL
        tr.flag[STOP_RANK] = k


@inner
def _take_g3(tr, k, now):
    """Rank ``k`` takes its G3 jobs completed by ``now``: a write unpins its host blocks (they
    rejoin the LRU together), a read makes its reserved host entries resident, one by one. True
    if any G3 job completed since the rank last looked (it wakes the sleepers)."""
    ht = tr.ht
    g = tr.g3
    advance_nb(g, now)
    progressed = False
    n_ring = g.kkey.shape[0]
    while True:
        m = take_first_nb(g, k, now)
        if m < 0:
            break
        progressed = True
        first = g.dfirst[m]
        n = g.dn[m]
        if g.ddir[m] == WRITE:
            at = unpin_begin_nb(ht, k, n)
            for i in range(n):
                unpin_nb(ht, k, g.kkey[(first + i) % n_ring])
            unpin_end_nb(ht, k, at)
        else:
            for i in range(n):
                complete_external_nb(ht, k, g.kkey[(first + i) % n_ring], now)
        drop_done_nb(g, m)
    if g.seen[k] != g.meta[G3_EPOCH]:
        progressed = True
        g.seen[k] = g.meta[G3_EPOCH]
    return progressed


@inner
def pass_boundary_nb(tr, pool, rq, k, now):
    """The end of a pass of rank ``k`` at ``now``: transfers due complete, the pass's prepared
    stores are submitted, and those due at once complete; a completion wakes the sleepers."""
    done = _advance(tr, pool, rq, k, now)
    seal_ghosts_nb(tr.ht, k, now)  # (Dynamo publishes the pass's host removals with its end)
    submit_prepared_nb(tr.ht, k, now)
    if _advance(tr, pool, rq, k, now):
        done = True
    if done:
        _wake_all(tr, k)


@inner
def idle_deadline_nb(tr, k):
    """When rank ``k``'s next transfer completes or its G3 tier has an event (inf: none)."""
    d = next_deadline_nb(tr.ht, k)
    if tr.g3.cap > 0:
        e = next_event_nb(tr.g3, k)
        if e < d:
            d = e
    return d


@inner
def idle_advance_nb(tr, pool, rq, k, now):
    """A rank without a pass in flight at one of its transfer deadlines: completions only (no
    submission); True if sleepers woke."""
    if _advance(tr, pool, rq, k, now):
        _wake_all(tr, k)
        return True
    return False


def tier_stop_reason(tr):
    """(reason, rank) of a run the tier stopped (reason 0: it did not)."""
    return int(tr.flag[STOP]), int(tr.flag[STOP_RANK])


