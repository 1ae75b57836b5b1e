"""The disaggregated runtime (Dynamo 1.4.2's offline ``disagg.rs``), in compiled code.

Separate prefill and decode pools, semantics as measured on 1.4.2 (cluster doc C5, C5b, C6, C8-C10):

* a request is routed to a prefill worker (round robin in arrival order, or the prefill router:
  ``pls * max(0, (PF + isl) / bs - credit * overlap)``, no active-block term); the prefill copy runs
  the request's FULL output length there, its decode steps taking 0 ms but a budget token, a seat
  and KV growth; none of its tokens is visible;
* the handoff comes at the end of the pass that emits its last token (``source_held_ms``); the prefill
  KV stays held. A prompt that can never fit the decode KV fails there; one at or over the decode
  ``max_model_len`` is rejected at the decode worker in 1.4.2, fails there in 1.6.1 (after taking
  its decode route), which also ends its session (docs/decisions/0470);
* a decode worker is chosen (round robin in handoff order, or the decode router: its active prompt
  blocks plus the candidate's, no dedup, no overlap); at that worker's next scheduling point (now if
  idle, else its current pass end) the prompt's blocks are reserved if they fit (blocks already
  registered there are shared; reserved ones are registered only at activation);
* after the transfer (``isl * kv_bytes_per_token / (bandwidth * 1e9) * 1000`` ms, unquantised) the
  request is activated at the decode worker's first scheduling point: a seat, no token budget, no
  prefill time; its first decode token is its first token (TTFT);
* the prefill copy's KV is freed at the prefill worker's first scheduling point at or after the
  activation (``source_released_ms``);
* under KV pressure (docs/decisions/0250): one reservation attempt per event at the decode worker,
  the event's own first, then one per activation there, after that activation's blocks are
  registered; none while every seat is taken; a head that failed waits for a request to leave the
  worker; while a handoff waits, only transferred prompts are admitted there (not a preempted
  request that needs new blocks). 1.6.1 queues an activated request by its handoff ordinal.

Groups ``0 .. P-1`` are the prefill workers, ``P .. P+D-1`` the decode workers (``dp_size`` 1). The
two pools have their own engine arguments, KV pools, request state and routers.
"""

from typing import NamedTuple

import numpy as np

from fastsim.kernels.fleet import (
    ACTIVE,
    NACT,
    NDRAINING,
    NLIVE,
    NSTARTING,
    SCHEDPOS,
    UNUSED,
    apply_schedule_nb,
    at_rest_nb,
    mark_ready_nb,
    next_fleet_event_nb,
    nth_active_nb,
    retire_drained_nb,
)
from fastsim.kernels.agentic import graph_cancelled_nb
from fastsim.kernels.heap import heap_pop_nb, heap_push_nb, tourney_set_nb
from fastsim.kernels.jit import inline, inner, loop_kernel
from fastsim.kernels.kvpool import NACTIVE, alloc_nb, match_slots_nb, register_nb, seal_feed_nb
from fastsim.kernels.trtllm import completion_blocks_nb
from fastsim.kernels.codes import (
    COMPLETED,
    DEAD_END,
    INTERRUPTED,
    FAILED,
    HANDED,
    KV_ROUTER,
    OK,
    REJECTED,
    SIM_CAP,
    TERM_HANDOFF,
    TERM_REJECTED,
    TIMING_161,
)
from fastsim.kernels.loop import (
    CTRL_C,
    NDONE,
    fill_prompt_keys,
    shareable_blocks,
    next_arrival,
    turns_follow,
    pop_arrival_nb,
    run_ahead_nb,
    start_arrivals_nb,
    step_phantoms_nb,
    on_terminal,
    session_failed_nb,
    start_next_session_nb,
    stamp_bursts,
    stamp_tokens,
)
from fastsim.kernels.router import (
    NQUEUE,
    all_busy_nb,
    choose_target_nb,
    commit_route_nb,
    free_request_nb,
    note_queued_nb,
    note_route_nb,
    queue_key_nb,
    queue_pop_nb,
    queue_push_nb,
    release_blocks_nb,
    release_prefill_nb,
    score_targets_nb,
    sync_index_nb,
)
from fastsim.kernels.admission import free_blocks_nb
from fastsim.kernels.queues import arrive_nb, enqueue_waiting_nb
from fastsim.kernels.rank_state import (
    COMMITTED_TOKENS,
    DIAG_LIGHT_ARRIVALS,
    DIAG_LIGHT_TICKS,
    HANDED_FIRST,
    PREEMPTED_ANY,
    PROGRESS,
)
from fastsim.kernels.scheduler import rank_pass_nb
from fastsim.kernels.timelines import fold_request, keeping
from fastsim.kernels.steady import materialize_nb, steady_pass_ms, steady_pass_nb, steady_pass_ok

NXHEAP, RRPRE, RRDEC, NHANDOFF, NSESSDUE = 0, 1, 2, 3, 4


class Disagg(NamedTuple):
    """Handoff state of a disaggregated run."""

    n_pre: int
    n_dec: int
    kv_bytes: float  # kv_bytes_per_token (<= 0: no transfer time)
    bandwidth: float  # GB/s (<= 0: no transfer time)
    missing_only: bool  # kv_transfer_timing_mode destination_missing: only blocks not cached there
    pre_idx: np.ndarray  # int32[n]
    dec_idx: np.ndarray  # int32[n]
    handoff: np.ndarray  # float64[n]: source_held_ms
    reserved: np.ndarray  # float64[n]
    activated: np.ndarray  # float64[n]
    released: np.ndarray  # float64[n]
    route_overlap: np.ndarray  # int64[n]: prefill router overlap (tokens), -1 = none
    res_matched: np.ndarray  # int64[n]: blocks shared with registered ones at reservation
    res_next: np.ndarray  # int32[n]
    res_head: np.ndarray  # int32[D]
    res_tail: np.ndarray  # int32[D]
    rel_next: np.ndarray  # int32[n]
    rel_head: np.ndarray  # int32[P]
    rel_tail: np.ndarray  # int32[P]
    xheap: np.ndarray  # int64[n]: transfers in flight, by completion time
    xready: np.ndarray  # float64[n]
    xtie: np.ndarray  # int64[n]: 0 .. n-1 (equal completion times: lowest row first)
    arr_next: np.ndarray  # int32[n]: transferred, awaiting activation at a scheduling point
    arr_head: np.ndarray  # int32[D]
    arr_tail: np.ndarray  # int32[D]
    res_tries: np.ndarray  # int64[D]: reservation attempts the worker's current event grants
    order: np.ndarray  # int64[n]: handoff ordinal (the order requests reached their decode workers)
    # the queue head was attempted (and not reserved) since the worker's capacity last changed
    front_stale: np.ndarray  # bool[D]
    # int64[5]: [n_xheap, rr_prefill, rr_decode, handoffs so far, closed-loop sessions owed by
    # failed handoffs (started after the tick's passes, as in Dynamo 1.6.1)]
    st: np.ndarray


# ----------------------------------------------------------------------------- small lists / heap
@inner
def _push(head, tail, nxt, k, r):
    nxt[r] = -1
    if tail[k] >= 0:
        nxt[tail[k]] = r
    else:
        head[k] = r
    tail[k] = r


# ----------------------------------------------------------------------------- lifecycle steps
@inner
def _final(rq_d, ss, cl, r, status, t):
    rq_d.status[r] = status
    rq_d.terminal[r] = t
    cl.state[NDONE] += 1
    on_terminal(ss, cl, r, t, status != COMPLETED)


@inner
def _score_decode(rt_d, fl_d, n_dec, nfull):
    """Decode router cost (derived config: no overlap credit, no dedup, no prefill load):
    the worker's active prompt blocks plus the candidate's full blocks (active workers only),
    plus ``decode_active_request_weight`` times its active requests."""
    for k in range(n_dec):
        rt_d.overlap[k] = 0
        rt_d.cost[k] = float(rt_d.active[k] + nfull) if fl_d.gstate[k] == ACTIVE else np.inf
        if rt_d.req_weight != 0.0:
            rt_d.cost[k] += rt_d.req_weight * rt_d.nreq[k]


@inner
def _route_prefill(pp, pool_p, rq_p, rk_p, cl, rt_p, fl_p, dg, pa, r, now):
    k = 0
    if rt_p.mode == KV_ROUTER:
        bs = pp.block_size
        nfull = fill_prompt_keys(rq_p, np.int64(r), bs, pa.kbuf)
        nshare = shareable_blocks(rq_p, r, nfull)
        sync_index_nb(rt_p, pool_p, now)  # (Dynamo 1.6.1: the KV events of the passes ended by now)
        score_targets_nb(rt_p, pool_p, pa.kbuf, nfull, nshare, rq_p.isl[r], bs, dg.n_pre, fl_p.gstate, 1)
        k = choose_target_nb(rt_p, dg.n_pre)
        commit_route_nb(rt_p, pa.kbuf, nfull, nshare, rq_p.isl[r], bs, r, k)
        dg.route_overlap[r] = rt_p.overlap[k] * bs
        note_route_nb(rt_p, r, dg.n_pre, now)
    else:  # round robin over the active prefill workers, in arrival order
        idx = dg.st[RRPRE] % fl_p.fs[NACT]
        dg.st[RRPRE] = idx + 1
        k = nth_active_nb(fl_p, idx)
    dg.pre_idx[r] = k
    enqueue_waiting_nb(rq_p, rk_p, k, r)
    cl.stalled[k] = False


@inner
def _admit_prefill(pp, pool_p, rq_p, rk_p, cl, rt_p, fl_p, dg, pa, r, now):
    """An arrival: route it to a prefill worker, or queue it in the prefill router while that
    router has a backlog or every prefill worker is busy (``router_queue_threshold``; the
    decode router has no queue). True if routed."""
    if rt_p.mode == KV_ROUTER and (rt_p.state[NQUEUE] > 0 or all_busy_nb(rt_p, dg.n_pre)):
        bs = pp.block_size
        nfull = fill_prompt_keys(rq_p, np.int64(r), bs, pa.kbuf)
        sync_index_nb(rt_p, pool_p, now)  # (Dynamo 1.6.1: the KV events of the passes ended by now)
        score_targets_nb(rt_p, pool_p, pa.kbuf, nfull, shareable_blocks(rq_p, r, nfull), rq_p.isl[r], bs,
                         dg.n_pre, fl_p.gstate, 1)
        queue_push_nb(rt_p, r, queue_key_nb(rt_p, now, rq_p.isl[r], bs, dg.n_pre))
        note_queued_nb(rt_p, r)
        return False
    _route_prefill(pp, pool_p, rq_p, rk_p, cl, rt_p, fl_p, dg, pa, r, now)
    return True


@inner
def _drain_prefill_queue(pp, pool_p, rq_p, rk_p, cl, rt_p, fl_p, dg, pa, now):
    """Route queued arrivals, first in the queue's order, while some prefill worker is not busy
    (at the prefill router's lifecycle edges: a prefill's end, a worker becoming ready)."""
    while rt_p.state[NQUEUE] > 0 and not all_busy_nb(rt_p, dg.n_pre):
        r = queue_pop_nb(rt_p)
        _route_prefill(pp, pool_p, rq_p, rk_p, cl, rt_p, fl_p, dg, pa, r, now)
        # (routed on the overlaps of now; reported with those of its queue entry, as Dynamo does)
        dg.route_overlap[r] = rt_p.qov[r, dg.pre_idx[r]] * pp.block_size


@inner
def _free_source(pp, pool_p, rq_p, rk_p, k, r):
    """Free a handed-off prefill copy's KV; TRT-LLM's reservation loses the blocks it frees (the
    copy left the running list, and its remainder with it, at its handoff: kernels/trtllm.py)."""
    active_before = pool_p.meta[k, NACTIVE]
    free_blocks_nb(pp, pool_p, rq_p, k, np.int64(r), np.bool_(False))
    if pp.trtllm:
        rk_p.resv[k] -= active_before - pool_p.meta[k, NACTIVE]


@inner
def _release_source(pp, pool_p, rq_p, rk_p, rt_p, fl_p, dg, pa, k, t):
    """Scheduling point of prefill worker ``k``: free the KV of copies activated downstream; the
    prefill router frees their requests here (docs/decisions/0260)."""
    r = dg.rel_head[k]
    changed = r >= 0
    while r >= 0:
        nxt = dg.rel_next[r]
        _free_source(pp, pool_p, rq_p, rk_p, k, r)
        dg.released[r] = t
        if rt_p.mode == KV_ROUTER:
            free_request_nb(rt_p, k)
        fl_p.hold[k] -= 1
        r = nxt
    dg.rel_head[k] = -1
    dg.rel_tail[k] = -1
    return changed


@inner
def _handoff(pp, pd, pool_p, rq_p, rk_p, rq_d, rk_d, ss, cl, rt_p, rt_d, fl_p, fl_d, dg, pa, r, t):
    """The prefill copy emitted its last token at ``t``: choose a decode worker and queue the
    reservation there (or fail / reject the request as Dynamo does)."""
    k_pre = dg.pre_idx[r]
    dg.handoff[r] = t
    if rt_p.mode == KV_ROUTER:
        release_prefill_nb(rt_p, r, k_pre)
    isl = rq_d.isl[r]
    bs = pd.block_size
    timing_161 = pd.timing_rules == TIMING_161
    # Dynamo 1.6.1 fails a prompt at or over the decode max_model_len here, as one that can never
    # fit the decode KV, and ends its session; 1.4.2 hands it off and rejects it at the decode
    # worker (docs/decisions/0470)
    too_long = timing_161 and not pd.trtllm and pd.max_model_len > 0 and isl >= pd.max_model_len
    if too_long:
        # it is routed first (a turn of the round robin, a draw of the decode router's ties), then
        # refused by the decode engine, which frees what the route took
        if rt_d.mode == KV_ROUTER:
            nfull = fill_prompt_keys(rq_d, np.int64(r), bs, pa.kbuf)
            _score_decode(rt_d, fl_d, dg.n_dec, nfull)
            choose_target_nb(rt_d, dg.n_dec)
        else:
            dg.st[RRDEC] = dg.st[RRDEC] % fl_d.fs[NACT] + 1
    if (isl + bs - 1) // bs > pd.cap or too_long:
        if rt_p.mode == KV_ROUTER:
            free_request_nb(rt_p, k_pre)
        _free_source(pp, pool_p, rq_p, rk_p, k_pre, r)
        rq_d.status[r] = FAILED
        rq_d.terminal[r] = t
        cl.state[NDONE] += 1
        if timing_161:
            if session_failed_nb(ss, cl, r, t):
                dg.st[NSESSDUE] += 1
        else:
            on_terminal(ss, cl, r, t, True)
        return
    k = 0
    if rt_d.mode == KV_ROUTER:
        nfull = fill_prompt_keys(rq_d, np.int64(r), bs, pa.kbuf)
        _score_decode(rt_d, fl_d, dg.n_dec, nfull)
        k = choose_target_nb(rt_d, dg.n_dec)
        commit_route_nb(rt_d, pa.kbuf, nfull, min(nfull, rq_d.key_ptr[r + 1] - rq_d.key_ptr[r]),
                        isl, bs, r, k)
    else:  # round robin over the active decode workers, in handoff order
        idx = dg.st[RRDEC] % fl_d.fs[NACT]
        dg.st[RRDEC] = idx + 1
        k = nth_active_nb(fl_d, idx)
    dg.dec_idx[r] = k
    dg.order[r] = dg.st[NHANDOFF]
    dg.st[NHANDOFF] += 1
    fl_d.hold[k] += 1  # a pending destination keeps a scaled-down decode worker alive
    fl_p.hold[k_pre] += 1  # and the source it will read keeps the prefill worker alive
    _push(dg.res_head, dg.res_tail, dg.res_next, k, r)
    if not cl.busy[dg.n_pre + k]:
        dg.res_tries[k] += 1  # a handoff reaching an idle worker is one reservation attempt
    cl.stalled[dg.n_pre + k] = False


@inner
def _reserve(pd, pool_d, rq_d, rk_d, cl, dg, pa, k, t):
    """Scheduling point of decode worker ``k``: reserve KV for queued handoffs, in order, while
    they fit (blocks already registered here are shared and discounted, as in admission) and
    attempts remain. One attempt per event at the worker (its pass end, each activation, each
    handoff reaching it idle; docs/decisions/0026); attempts not used now lapse. No attempt
    while every seat is taken; a head that failed waits for a request to leave the worker
    (docs/decisions/0250)."""
    bs = pd.block_size
    changed = False
    # The event's own attempts come first (its pass end, or the handoffs that reached it idle).
    # Then each activation here, in order, makes its blocks visible and brings one attempt: the
    # transfers that finished (the arrival list), then the reservations of this event that need
    # no transfer (appended to that list). ``act``: the next activation.
    act = dg.arr_head[k]
    while dg.res_head[k] >= 0:
        if dg.res_tries[k] == 0:
            if act < 0:
                break
            register_nb(pool_d, k, rq_d.bslot, rq_d.key_ptr[act], dg.res_matched[act],
                        rq_d.key_ptr[act + 1] - rq_d.key_ptr[act])
            act = dg.arr_next[act]
            dg.res_tries[k] = 1
        dg.res_tries[k] -= 1
        if dg.front_stale[k]:
            # the head already failed at this capacity: it is tried again only after a request
            # on the worker completes or is preempted
            dg.res_tries[k] = 0
            continue
        if rk_d.n_run[k] >= pd.max_seqs:
            dg.res_tries[k] = 0  # every seat is taken: no reservation is attempted
            dg.front_stale[k] = True
            continue
        r = dg.res_head[k]
        isl = rq_d.isl[r]
        nb = (isl + bs - 1) // bs
        nfull = fill_prompt_keys(rq_d, np.int64(r), bs, pa.kbuf)
        if pd.trtllm:
            # TRT-LLM: fresh blocks only (no prefix credit), and the whole to-completion KV must
            # fit beside every reservation already made here (kernels/trtllm.py)
            matched = 0
            if completion_blocks_nb(pd, isl, rq_d.osl[r]) > pd.cap - rk_d.resv[k]:
                dg.res_tries[k] = 0
                dg.front_stale[k] = True
                continue
        else:
            matched, active = match_slots_nb(pool_d, k, pa.kbuf, nfull, pa.hslot)
            if nb - min(active, matched) > pd.cap - pool_d.meta[k, NACTIVE]:
                dg.res_tries[k] = 0  # the head waits: this event's other attempts lapse
                dg.front_stale[k] = True
                continue
        active_before = pool_d.meta[k, NACTIVE]
        # the matched blocks are hits; the others are new (the shareable ones with slots) and
        # stay unregistered (invisible to the prefix cache) until activation
        nkeys = rq_d.key_ptr[r + 1] - rq_d.key_ptr[r]
        n_keyed = max(matched, min(nkeys, nb))
        alloc_nb(pool_d, k, pa.kbuf, nb, rq_d.bslot, rq_d.key_ptr[r], matched, n_keyed, nkeys,
                 pa.hslot)
        rq_d.nheld[r] = n_keyed
        rq_d.alloc[r] = isl
        if pd.trtllm:  # the prompt's blocks are held; the rest of the sequence is promised
            rk_d.resv[k] += (pool_d.meta[k, NACTIVE] - active_before) + completion_blocks_nb(
                pd, isl, rq_d.osl[r]) - nb
        dg.res_matched[r] = matched
        dg.reserved[r] = t
        dg.res_head[k] = dg.res_next[r]
        if dg.res_head[k] < 0:
            dg.res_tail[k] = -1
        dg.front_stale[k] = False
        changed = True
        delay = 0.0
        if dg.kv_bytes > 0.0 and dg.bandwidth > 0.0:
            # full_prompt: the prompt's tokens; destination_missing: the whole blocks the
            # destination does not hold yet (1.4.2, by experiment: tests/test_disagg.py)
            tokens = (nb - matched) * bs if dg.missing_only else isl
            delay = tokens * dg.kv_bytes / (dg.bandwidth * 1e9) * 1000.0
        if delay > 0.0:
            dg.xready[r] = t + delay
            heap_push_nb(dg.xheap, dg.st, np.int64(NXHEAP), dg.xready, dg.xtie, r)
        else:
            _arrive_decode(rq_d, rk_d, cl, dg, k, r)
            if act < 0:
                act = r
    dg.res_tries[k] = 0
    return changed


@inner
def _grant_tries(dg, k, pass_end):
    """The reservation attempt of decode worker ``k``'s pass end (each activation there brings
    its own: ``_reserve``)."""
    if pass_end:
        dg.res_tries[k] += 1


@inner
def _arrive_decode(rq_d, rk_d, cl, dg, k, r):
    """The transfer finished: the request awaits activation at decode worker ``k``'s next
    scheduling point (now if it is idle)."""
    rq_d.rank[r] = k
    _push(dg.arr_head, dg.arr_tail, dg.arr_next, k, r)
    cl.stalled[dg.n_pre + k] = False


@inner
def _restore_handoff_order(rq_d, rk_d, dg, k, r):
    """Move ``r``, just queued at the back of decode worker ``k``'s waiting list, in front of the
    first request there that reached the worker after it (Dynamo 1.6.1 queues an activated
    request by its handoff ordinal, not by when its transfer finished)."""
    u = rk_d.wait_head[k]
    while u >= 0 and u != r and dg.order[u] < dg.order[r]:
        u = rq_d.qnext[u]
    if u < 0 or u == r:
        return
    # unlink r from the tail and link it in before u
    p = rq_d.qprev[r]
    rq_d.qnext[p] = -1
    rk_d.wait_tail[k] = p
    q = rq_d.qprev[u]
    rq_d.qprev[r] = q
    rq_d.qnext[r] = u
    rq_d.qprev[u] = r
    if q >= 0:
        rq_d.qnext[q] = r
    else:
        rk_d.wait_head[k] = r


@inner
def _activate(pd, pool_d, rq_d, rk_d, fl_d, dg, k, t):
    """Scheduling point of decode worker ``k``: transferred requests are activated (their blocks
    are registered, their prefill source is released) and wait for a seat (HANDED)."""
    r = dg.arr_head[k]
    changed = r >= 0
    while r >= 0:
        nxt = dg.arr_next[r]
        dg.activated[r] = t
        fl_d.hold[k] -= 1
        # its content-keyed blocks become visible here (an equal block registered meanwhile
        # keeps serving hits; this one is a second copy of the key)
        register_nb(pool_d, k, rq_d.bslot, rq_d.key_ptr[r], dg.res_matched[r],
                    rq_d.key_ptr[r + 1] - rq_d.key_ptr[r])
        _push(dg.rel_head, dg.rel_tail, dg.rel_next, dg.pre_idx[r], r)
        enqueue_waiting_nb(rq_d, rk_d, k, r)
        if pd.timing_rules == TIMING_161:
            _restore_handoff_order(rq_d, rk_d, dg, k, r)
        rq_d.status[r] = HANDED
        r = nxt
    dg.arr_head[k] = -1
    dg.arr_tail[k] = -1
    return changed


@inline
def _complete(pp, pd, pool_p, pool_d, rq_p, rq_d, rk_p, rk_d, ss, cl, gaps, rt_p, rt_d, fl_p, fl_d, dg, pa, g, t):
    """Visible effects of group ``g``'s pass ending at ``t``, then its scheduling-point work."""
    r = cl.pend_head[g]
    while r >= 0:
        if g < dg.n_pre:
            nxt = rq_p.tnext[r]
            if rq_p.term_kind[r] == TERM_HANDOFF:
                rq_p.status[r] = COMPLETED
                _handoff(pp, pd, pool_p, rq_p, rk_p, rq_d, rk_d, ss, cl, rt_p, rt_d, fl_p, fl_d, dg, pa, r, t)
            else:  # rejected on the prefill worker
                if rt_p.mode == KV_ROUTER:
                    release_prefill_nb(rt_p, r, dg.pre_idx[r])
                    free_request_nb(rt_p, dg.pre_idx[r])
                rq_p.status[r] = REJECTED
                _final(rq_d, ss, cl, r, REJECTED, t)
        else:
            nxt = rq_d.tnext[r]
            k = g - dg.n_pre
            if rt_d.mode == KV_ROUTER:
                nfull = fill_prompt_keys(rq_d, np.int64(r), pd.block_size, pa.kbuf)
                release_blocks_nb(rt_d, pa.kbuf, nfull, min(nfull, rq_d.key_ptr[r + 1] - rq_d.key_ptr[r]), k)
            if keeping(gaps.tl):  # its gaps into the running statistics, in completion order
                fold_request(gaps.tl, r, rq_d.term_kind[r] != TERM_REJECTED, t, g)
            _final(rq_d, ss, cl, r, COMPLETED if rq_d.term_kind[r] != TERM_REJECTED else REJECTED, t)
        r = nxt
    cl.pend_head[g] = -1
    cl.pend_tail[g] = -1
    if g < dg.n_pre:
        if rt_p.state[NQUEUE] > 0:
            _drain_prefill_queue(pp, pool_p, rq_p, rk_p, cl, rt_p, fl_p, dg, pa, t)
        _release_source(pp, pool_p, rq_p, rk_p, rt_p, fl_p, dg, pa, g, t)
    else:
        _grant_tries(dg, g - dg.n_pre, True)
        _reserve(pd, pool_d, rq_d, rk_d, cl, dg, pa, g - dg.n_pre, t)
        _activate(pd, pool_d, rq_d, rk_d, fl_d, dg, g - dg.n_pre, t)


@inline
def _drive(pp, pd, perf_p, perf_d, pool_p, pool_d, rq_p, rq_d, rk_p, rk_d, ss, cl, gaps, rt_p,
           rt_d, rt_none, fl_p, fl_d, dg, pa, g, now):
    """One pass of worker ``g`` (prefill or decode) if it has work; True if anything changed."""
    pre = g < dg.n_pre
    k = g if pre else g - dg.n_pre
    if (rk_p.n_run[k] + rk_p.n_wait[k] == 0) if pre else (rk_d.n_run[k] + rk_d.n_wait[k] == 0):
        return False
    pa.emit_n[0] = 0
    pa.acc[PROGRESS] = 0
    # Two call sites, one per pool: choosing between the pools' state tuples (``pp if pre else
    # pd``) copies every field of them on each pass, which cost more than the pass itself.
    pa.ncommon[0] = 0
    # a decode worker with a handoff waiting for KV admits only transferred prompts
    pa.acc[HANDED_FIRST] = 0 if pre else (1 if dg.res_head[k] >= 0 else 0)
    prev_end = cl.last_stamp[g]
    if pre:
        committed = rk_p.counters[COMMITTED_TOKENS]
        end = rank_pass_nb(pp, perf_p, pool_p, rq_p, rk_p, k, now, pa, cl.pend_head,
                           cl.pend_tail, g, prev_end, rk_p.speculation, None)
        cl.pass_commit[g] = rk_p.counters[COMMITTED_TOKENS] - committed
        seal_feed_nb(pool_p, k, max(end, now))  # (the pass's KV events reach the kv_router's index at its end)
    else:
        committed = rk_d.counters[COMMITTED_TOKENS]
        end = rank_pass_nb(pd, perf_d, pool_d, rq_d, rk_d, k, now, pa, cl.pend_head,
                           cl.pend_tail, g, prev_end, rk_d.speculation, None)
        cl.pass_commit[g] = rk_d.counters[COMMITTED_TOKENS] - committed
        if cl.pend_head[g] >= 0 or pa.acc[PREEMPTED_ANY] != 0:
            dg.front_stale[k] = False  # a request left: the queued head may fit now
    if end < now:
        end = now
    progress = pa.acc[PROGRESS] != 0
    if not pre:
        if pa.burst.shape[0] > 0:
            stamp_bursts(rq_d, gaps, rt_none, g, pa.emit, pa.emit_n[0], end, pa.burst)
        else:
            stamp_tokens(rq_d, rk_d, gaps, rt_none, g, pa.emit, pa.emit_n[0], end, pa.ncommon[0],
                         prev_end, k, k + 1)
    cl.last_stamp[g] = end
    if end > now:
        cl.busy[g] = True
        tourney_set_nb(cl.ctree, cl.cdue, g, end)
        return True
    if progress:
        _complete(pp, pd, pool_p, pool_d, rq_p, rq_d, rk_p, rk_d, ss, cl, gaps, rt_p, rt_d, fl_p, fl_d, dg, pa, g, now)
        return True
    cl.stalled[g] = True
    return False


@inline
def _route_arrivals(pp, pool_p, rq_p, rq_d, rk_p, ss, cl, rt_p, fl_p, dg, pa, now):
    """Release every arrival due at ``now``, in arrival order, and route it to a prefill worker
    (the tick's phase 3). Returns (arrivals routed, whether one went to an idle worker)."""
    n = 0
    woke = False
    while True:
        r, t_arr = pop_arrival_nb(ss, cl, now)
        if r < 0:
            return n, woke
        arrive_nb(rq_p, r, t_arr)
        arrive_nb(rq_d, r, t_arr)
        n += 1
        if _admit_prefill(pp, pool_p, rq_p, rk_p, cl, rt_p, fl_p, dg, pa, r, now) and not cl.busy[dg.pre_idx[r]]:
            woke = True


@inline
def _drain(pp, pd, perf_p, perf_d, pool_p, pool_d, rq_p, rq_d, rk_p, rk_d, ss, cl, gaps, rt_p,
           rt_d, rt_none, fl_p, fl_d, dg, pa, now):
    n_groups = dg.n_pre + dg.n_dec
    while True:
        changed = False
        # 1. pass completions (and their scheduling-point work)
        while cl.cdue[cl.ctree[1]] <= now:
            g = cl.ctree[1]
            t_end = cl.cdue[g]
            tourney_set_nb(cl.ctree, cl.cdue, g, np.inf)
            cl.busy[g] = False
            _complete(pp, pd, pool_p, pool_d, rq_p, rq_d, rk_p, rk_d, ss, cl, gaps, rt_p, rt_d, fl_p, fl_d, dg, pa, g,
                      t_end)
            changed = True
        # workers that finished starting
        if fl_p.fs[NSTARTING] > 0 and mark_ready_nb(fl_p, now):
            if rt_p.state[NQUEUE] > 0:
                _drain_prefill_queue(pp, pool_p, rq_p, rk_p, cl, rt_p, fl_p, dg, pa, now)
            changed = True
        if fl_d.fs[NSTARTING] > 0 and mark_ready_nb(fl_d, now):
            changed = True
        # 2. KV transfers that finished
        while dg.st[NXHEAP] > 0 and dg.xready[dg.xheap[0]] <= now:
            r = heap_pop_nb(dg.xheap, dg.st, np.int64(NXHEAP), dg.xready, dg.xtie)
            _arrive_decode(rq_d, rk_d, cl, dg, dg.dec_idx[r], r)
            changed = True
        # 3. arrivals go to a prefill worker
        if _route_arrivals(pp, pool_p, rq_p, rq_d, rk_p, ss, cl, rt_p, fl_p, dg, pa, now)[0] > 0:
            changed = True
        # 4. the decode pool: reservations and activations of idle workers, then ready workers;
        # 5. then the prefill pool: idle workers release sources; ready workers run, again while
        # zero-duration passes keep making progress (all their handoffs at this timestamp reach
        # the decode side together, as in Dynamo). One loop, so that the pass has one call site.
        # The cheap tests stay here: a call passes the whole state, which is not free.
        g = dg.n_pre
        prefill_phase = False
        again = False
        while True:
            if not prefill_phase and g >= n_groups:
                prefill_phase = True
                g = 0
                again = False
            if prefill_phase and g >= dg.n_pre:
                if not again:
                    break
                g = 0
                again = False
            if prefill_phase:
                if cl.busy[g] or fl_p.gstate[g] == UNUSED:
                    g += 1
                    continue
                if dg.rel_head[g] >= 0 and _release_source(pp, pool_p, rq_p, rk_p, rt_p, fl_p, dg, pa, g, now):
                    cl.stalled[g] = False
                    changed = True
                if cl.stalled[g] or rk_p.n_run[g] + rk_p.n_wait[g] == 0:
                    g += 1
                    continue
            else:
                k = g - dg.n_pre
                if cl.busy[g] or fl_d.gstate[k] == UNUSED:
                    g += 1
                    continue
                if dg.res_head[k] >= 0:
                    _grant_tries(dg, k, False)
                    if _reserve(pd, pool_d, rq_d, rk_d, cl, dg, pa, k, now):
                        changed = True
                dg.res_tries[k] = 0
                if dg.arr_head[k] >= 0 and _activate(pd, pool_d, rq_d, rk_d, fl_d, dg, k, now):
                    changed = True
                if cl.stalled[g] or rk_d.n_run[k] + rk_d.n_wait[k] == 0:
                    g += 1
                    continue
            if _drive(pp, pd, perf_p, perf_d, pool_p, pool_d, rq_p, rq_d, rk_p, rk_d, ss, cl,
                      gaps, rt_p, rt_d, rt_none, fl_p, fl_d, dg, pa, g, now):
                changed = True
                if prefill_phase and not cl.busy[g]:
                    again = True
            g += 1
        # a closed loop's sessions ended by failed handoffs start now, after the passes that
        # began at this tick (Dynamo 1.6.1 admits them at the prefill worker's next pass)
        while dg.st[NSESSDUE] > 0:
            dg.st[NSESSDUE] -= 1
            start_next_session_nb(ss, cl, now)
            changed = True
        # retire drained workers: a decode worker also waits for its pending destinations, a
        # prefill worker for the sources it still holds
        if fl_p.fs[NDRAINING] > 0 and retire_drained_nb(fl_p, cl.busy, rk_p.n_run, rk_p.n_wait, 1, 0):
            changed = True
        if fl_d.fs[NDRAINING] > 0 and retire_drained_nb(fl_d, cl.busy, rk_d.n_run, rk_d.n_wait, 1,
                                                        dg.n_pre):
            changed = True
        # scaling decisions last
        if apply_schedule_nb(fl_p, now):
            changed = True
        if apply_schedule_nb(fl_d, now):
            changed = True
        if not changed:
            return


@inline
def _light_tick(pd, perf_d, pool_d, rq_d, rk_d, ss, cl, gaps, rt_none, fl_p, fl_d, dg, pa, now):
    """The light path of ``kernels/loop.py`` for a decode worker: handle the tick at ``now`` if it
    holds only that worker's pass end, with no terminal, no reservation or activation pending
    there, and a next pass that is a steady pass (``scheduler.steady_pass_ok``); no arrival,
    finished transfer, fleet event or other pass end at ``now``. The drain would then only run
    that pass: idle workers have acted on everything they could at the previous drain. Returns
    False, changing nothing, otherwise."""
    g = cl.ctree[1]
    if g < dg.n_pre or cl.cdue[g] != now or cl.pend_head[g] >= 0:
        return False
    k = g - dg.n_pre
    if rk_d.n_wait[k] > 0 or rk_d.xhead[k] >= 0 or dg.res_head[k] >= 0 or dg.arr_head[k] >= 0:
        return False
    if not (at_rest_nb(fl_p) and at_rest_nb(fl_d)):
        return False
    if next_arrival(ss, cl)[1] <= now or (dg.st[NXHEAP] > 0 and dg.xready[dg.xheap[0]] <= now):
        return False
    if rk_d.n_run[k] == 0 or not steady_pass_ok(pd, pool_d, rq_d, rk_d, k, pa.kbuf, pa.hslot):
        return False
    end = (now + 0.0) + steady_pass_ms(pd, perf_d, pool_d, rk_d, k)
    if not end > now:
        return False
    tourney_set_nb(cl.ctree, cl.cdue, g, np.inf)
    if cl.cdue[cl.ctree[1]] <= now:  # another pass ends now too: the drain orders them
        tourney_set_nb(cl.ctree, cl.cdue, g, now)
        return False
    rk_d.diag[DIAG_LIGHT_TICKS] += 1
    prev_end = cl.last_stamp[g]
    ns = rk_d.nsteady[k]
    steady_pass_nb(pd, perf_d, pool_d, rk_d, k, now)
    stamp_tokens(rq_d, rk_d, gaps, rt_none, g, pa.emit, np.int64(0), end, np.int64(ns), prev_end, k,
                  k + 1)
    cl.last_stamp[g] = end
    cl.pass_commit[g] = 0
    tourney_set_nb(cl.ctree, cl.cdue, g, end)
    return True


@inline
def _steady_run_decode(pd, perf_d, pool_d, rq_d, rk_d, ss, cl, gaps, dg, g, now):
    """After a light tick of decode worker ``g``: its following steady passes, run ahead of the
    loop as in ``kernels/loop.py`` (``_steady_run``), the pass ends the loop does not stop at kept
    as phantom events for the worker-seconds. Work reaches a decode worker only through a handoff
    at a prefill pass end, whose reservation and transfer follow it: the run ends before the next
    prefill pass end, finished transfer or arrival (which may start a prefill pass), and, when a
    turn's end can release a follow-up turn, before any other worker's next pass end; a pass may
    start at the time cap, not after."""
    E = cl.cdue[g]
    tourney_set_nb(cl.ctree, cl.cdue, g, np.inf)  # off the tournament while it runs
    limit = next_arrival(ss, cl)[1]
    for h in range(dg.n_pre):
        if cl.cdue[h] < limit:
            limit = cl.cdue[h]
    if dg.st[NXHEAP] > 0 and dg.xready[dg.xheap[0]] < limit:
        limit = dg.xready[dg.xheap[0]]
    if turns_follow(ss, cl) and cl.cdue[cl.ctree[1]] < limit:
        limit = cl.cdue[cl.ctree[1]]
    if cl.max_sim_time >= 0.0 and not cl.max_sim_time >= limit:
        limit = np.nextafter(cl.max_sim_time, np.inf)
    # (the ws arguments are unused: with several workers a run only records phantom events)
    run_ahead_nb(pd, perf_d, pool_d, rq_d, rk_d, cl, gaps, g, g - dg.n_pre, E, limit, now, 0.0,
                 np.int64(0))


@loop_kernel
def run_disagg_nb(pp, pd, perf_p, perf_d, pool_p, pool_d, rq_p, rq_d, rk_p, rk_d, ss, cl, gaps,
                  rt_p, rt_d, rt_none, fl_p, fl_d, dg, pa, out):
    """Run a disaggregated simulation. ``out`` receives [prefill_ws, decode_ws, now, -]."""
    n_rows = rq_d.isl.shape[0]
    start_arrivals_nb(ss, cl)
    now = 0.0
    ws_p = 0.0
    ws_d = 0.0
    status = OK
    light = False
    while True:
        if not light:
            # the one call site of the drain (it is inlined: a call would copy the whole state)
            _drain(pp, pd, perf_p, perf_d, pool_p, pool_d, rq_p, rq_d, rk_p, rk_d, ss, cl, gaps, rt_p,
                   rt_d, rt_none, fl_p, fl_d, dg, pa, now)
        if cl.state[NDONE] + graph_cancelled_nb(ss) >= n_rows:  # (an agentic graph's cancelled nodes never arrive)
            break
        if cl.state[CTRL_C] != 0:  # (set from another thread: fastsim/interrupt.py)
            status = INTERRUPTED
            break
        t = np.inf
        if fl_p.fs[NSTARTING] > 0 or fl_p.fs[SCHEDPOS] < fl_p.sched_t.shape[0]:
            t = next_fleet_event_nb(fl_p)
        if fl_d.fs[NSTARTING] > 0 or fl_d.fs[SCHEDPOS] < fl_d.sched_t.shape[0]:
            t = min(t, next_fleet_event_nb(fl_d))
        if cl.cdue[cl.ctree[1]] < t:
            t = cl.cdue[cl.ctree[1]]
        if dg.st[NXHEAP] > 0 and dg.xready[dg.xheap[0]] < t:
            t = dg.xready[dg.xheap[0]]
        t_arr = next_arrival(ss, cl)[1]
        if t_arr < t:
            t = t_arr
        if t == np.inf:
            status = DEAD_END
            break
        if cl.max_sim_time >= 0.0 and t > cl.max_sim_time:
            status = SIM_CAP
            t = np.nextafter(cl.max_sim_time, np.inf)  # the pass ends run ahead up to the cap
            while True:
                pt = step_phantoms_nb(cl, t)
                if pt == t:
                    break
                ws_p += fl_p.fs[NLIVE] * (pt - now) / 1000.0
                ws_d += fl_d.fs[NLIVE] * (pt - now) / 1000.0
                now = pt
            break
        while True:  # the pass ends of steady runs before ``t`` are events too
            pt = step_phantoms_nb(cl, t)
            ws_p += fl_p.fs[NLIVE] * (pt - now) / 1000.0
            ws_d += fl_d.fs[NLIVE] * (pt - now) / 1000.0
            now = pt
            if pt == t:
                break
        g = cl.ctree[1]
        light = pd.fast and _light_tick(pd, perf_d, pool_d, rq_d, rk_d, ss, cl, gaps, rt_none, fl_p,
                                        fl_d, dg, pa, now)
        if light and rk_d.sechead[g - dg.n_pre] < 0:
            _steady_run_decode(pd, perf_d, pool_d, rq_d, rk_d, ss, cl, gaps, dg, g, now)
        if (pd.fast and not light and t_arr == now and cl.cdue[cl.ctree[1]] > now
                and not (dg.st[NXHEAP] > 0 and dg.xready[dg.xheap[0]] <= now)
                and at_rest_nb(fl_p) and at_rest_nb(fl_d)):
            # An arrival tick with no pass end, no finished transfer and no fleet event (as in
            # kernels/loop.py): the drain would route the arrivals to prefill workers and then
            # find nothing else to do unless one of them went to an idle worker (the last drain
            # left every idle worker with nothing it could do).
            woke = _route_arrivals(pp, pool_p, rq_p, rq_d, rk_p, ss, cl, rt_p, fl_p, dg, pa, now)[1]
            rk_p.diag[DIAG_LIGHT_ARRIVALS] += 1
            light = not woke
    # steady members become explicit before the results are read
    for k in range(rk_p.n_run.shape[0]):
        materialize_nb(pp, rq_p, rk_p, k, rk_p.rpass[k], cl.last_stamp[k])
    for k in range(rk_d.n_run.shape[0]):
        materialize_nb(pd, rq_d, rk_d, k, rk_d.rpass[k], cl.last_stamp[dg.n_pre + k])
    out[0] = ws_p
    out[1] = ws_d
    out[2] = now
    return status
