"""The event loop of one aggregated simulation, in compiled code.

Dynamo 1.4.2's offline ``agg.rs`` driver around its ``EngineComponent`` (notes 7-8, verified doc
Q8-Q10, X2, cluster doc C1, C1b, C8). One tick at virtual time ``now`` repeats, until nothing
changes:

1. apply pass completions due at ``now`` (lowest group id first): terminals, session follow-ups;
2. release arrivals due at ``now`` in (ready time, session, turn) order and route them;
3. drive ready groups, lowest id first: a group is ready when it is idle and one of its ranks has
   work; every rank with work runs one pass; the group ends at the slowest rank's end (the DP
   barrier) and all its tokens are stamped there. A zero-duration pass that changed something
   completes at once; one that changed nothing stalls the group until new work is routed to it.

Then ``now`` moves to the earliest pending completion or arrival. No future event while requests
are unfinished is a dead end (returned as a status, never a hang).
"""

import math
from typing import NamedTuple

import numpy as np
from numba.core import types

from fastsim.kernels.agentic import (Graph, graph_cancelled_nb, graph_cancelled_row_nb, graph_dispatched_nb,
                                     graph_ended_nb, graph_rejected_nb, graph_start_nb)
from fastsim.kernels.codes import (
    COMPLETED,
    DEAD_END,
    HOST_TIER_STOP,
    KV_ROUTER,
    LOG_FULL,
    INTERRUPTED,
    OK,
    PLANNER_TICK,
    RECORDS_FULL,
    REJECTED,
    SIM_CAP,
    TABLE_FULL,
    TABLE_GROW,
    TELEMETRY_FULL,
    TERM_COMPLETED,
    TICKS_FULL,
    TIMING_161,
)
from fastsim.kernels.fleet import (
    ACTIVE,
    DRAINING,
    NACT,
    NCREATED,
    NDRAINING,
    NEXTPLAN,
    NEXTTEL,
    NLIVE,
    NSTARTING,
    SCHEDPOS,
    STARTED,
    TARGET,
    apply_schedule_nb,
    apply_target_nb,
    at_rest_nb,
    mark_ready_nb,
    next_fleet_event_nb,
    nth_active_nb,
    retire_drained_nb,
    sample_nb,
)
from fastsim.kernels.heap import heap_pop_nb, heap_push_nb, tourney_set_nb
from fastsim.kernels.host_offload import STOP, idle_advance_nb, idle_deadline_nb, pass_boundary_nb, ready_waiters_nb
from fastsim.kernels.indirect import Indirect, deref, link, pin
from fastsim.kernels.jit import inline, inner, llvm_inline, loop_kernel
from fastsim.kernels.router import (
    NENTRIES,
    NQUEUE,
    OVERFLOW,
    all_busy_nb,
    choose_target_nb,
    commit_route_nb,
    note_queued_nb,
    note_route_nb,
    queue_pop_nb,
    queue_push_nb,
    release_blocks_nb,
    release_prefill_nb,
    WSPT,
    queue_key_nb,
    score_queued_nb,
    score_targets_nb,
    sync_index_nb,
)
from fastsim.kernels.blocks import block_mod, fill_keys, key_span
from fastsim.kernels.pass_time import decode4_ms_161, step_ms
from fastsim.kernels.queues import arrive_nb, enqueue_waiting_nb
from fastsim.kernels.rank_state import (
    AWAITING_READMISSION,
    COMMITTED_TOKENS,
    DIAG_LIGHT_ARRIVALS,
    DIAG_LIGHT_TICKS,
    DIAG_LIGHT_WAITING,
    DIAG_RUN_AHEAD_PASSES,
    DIAG_STEADY_PASSES,
    PROGRESS,
    READMISSIONS,
    THROTTLE,
)
from fastsim.kernels.scheduler import rank_pass_nb
from fastsim.kernels.timelines import (FREE_RECORDS, Timelines, fold_request, keeping, log_room, new_timelines,
                                      note_token, note_tokens_at, ring_note, ring_put)
from fastsim.kernels.steady import materialize_nb, steady_next_ok, steady_pass_ms, steady_pass_nb, steady_pass_ok
from fastsim.kernels.kvpool import NACTIVE, alloc_anon_nb, seal_feed_nb
from fastsim.kernels.stats import (DD_GAMMA, DD_GAMMA_LN, DD_KEY_MAX, DD_KEY_MIN, DD_NBINS, DD_OFFSET,
                                    dd_index_nb)


class Sessions(NamedTuple):
    """Arrival structure: sessions of one or more turns (rows)."""

    session: np.ndarray  # int64[n]
    turn: np.ndarray  # int64[n]
    delay: np.ndarray  # float64[n]: after the previous turn's completion
    ptr: np.ndarray  # int64[S + 1]
    rows: np.ndarray  # int64[n]: rows of each session in turn order
    first_arrival: np.ndarray  # float64[S]
    order: np.ndarray  # int64[S]: first turns sorted by arrival (open loop; empty: already sorted)
    n_static: int  # first turns released at their trace time: S (open loop) or 0 (closed loop)
    tie: np.ndarray  # int64[n]: (session, turn) order of each row, the arrival tie-break
    ready_at: np.ndarray  # float64[n] (scratch): arrival times of the rows in the heap
    heap: np.ndarray  # int64[n] (scratch): later turns / closed-loop dispatches
    cur: np.ndarray  # int64[1]: the next static first turn (-1: none left)
    cur_t: np.ndarray  # float64[1]: its arrival time
    graph: Graph  # agentic request graph releasing the arrivals (kernels/agentic.py; empty: none)


class Cluster(NamedTuple):
    """Logical workers (groups of ``dp`` consecutive ranks) and loop scalars."""

    dp: int
    concurrency: int  # 0 = open loop (trace arrival times)
    single_path: bool  # 1 worker, dp 1: Dynamo's single-worker runtime
    max_sim_time: float  # < 0: none
    busy: np.ndarray  # bool[G]
    stalled: np.ndarray  # bool[G]
    pend_head: np.ndarray  # int32[G]: pending terminals of the group's pass in flight
    pend_tail: np.ndarray  # int32[G]
    wctr: np.ndarray  # int64[G]: round robin over a worker's DP ranks
    ctree: np.ndarray  # int64[2m]: tournament of the groups' pending completions (kernels/heap.py)
    cdue: np.ndarray  # float64[m]: a group's pass end while it is busy, +inf when it has none
    dirty: np.ndarray  # bool[G]: the group may have become drivable since the last drive phase
    dlist: np.ndarray  # int64[G + 1]: dirty group ids; dlist[G] holds their count
    dwork: np.ndarray  # int64[G]: scratch copy of the dirty list being driven
    last_stamp: np.ndarray  # float64[G]: end of the group's last pass (NaN: none yet)
    # prompt tokens the group's last pass commits (``committed_prefill_tokens``): Dynamo 1.6.1
    # counts them when the pass ends, so a run stopped at its time cap leaves out a pass in flight
    pass_commit: np.ndarray  # int64[G]
    state: np.ndarray  # int64[8]: [rr, n_heap, static_pos, next_session, n_arrived, n_done, n_ticks, ctrl_c]
    light: np.ndarray  # int64[G]: the group's pass ends in a row that were not light ticks (run_loop_nb)
    # phantom events (``_steady_run``): a ring of pass ends per group, and a tournament of the
    # groups' earliest ones
    ph: np.ndarray  # float64[G * _PH]
    ph_head: np.ndarray  # int64[G]
    ph_n: np.ndarray  # int64[G]
    ptree: np.ndarray  # int64[2m] (kernels/heap.py)
    pdue: np.ndarray  # float64[m]
    # the times at which the worker-seconds step (every event, phantoms included), in time order,
    # for a run split into shards (``fastsim/shards.py``); empty: not kept
    tlog: np.ndarray  # float64[cap]; state[NTICKS] entries used


RR, NHEAP, STATIC, NEXTSESS, NARRIVED, NDONE, NTICKS, CTRL_C = range(8)


def make_cluster(groups, dp=1, concurrency=0, single_path=False, max_sim_time_ms=None, tick_log=0):
    """The loop's state of ``groups`` logical workers of ``dp`` ranks each, before the first event
    (``concurrency`` 0: open loop; ``tick_log``: entries of the tick log, 0 for none)."""
    from fastsim.kernels.heap import new_tourney

    ctree, cdue = new_tourney(groups)
    ptree, pdue = new_tourney(groups)
    return Cluster(
        dp=dp,
        concurrency=concurrency,
        single_path=single_path,
        max_sim_time=float(max_sim_time_ms) if max_sim_time_ms is not None else -1.0,
        busy=np.zeros(groups, dtype=np.bool_),
        stalled=np.zeros(groups, dtype=np.bool_),
        pend_head=np.full(groups, -1, dtype=np.int32),
        pend_tail=np.full(groups, -1, dtype=np.int32),
        wctr=np.zeros(groups, dtype=np.int64),
        ctree=ctree,
        cdue=cdue,
        dirty=np.zeros(groups, dtype=np.bool_),
        dlist=np.zeros(groups + 1, dtype=np.int64),
        dwork=np.zeros(groups, dtype=np.int64),
        last_stamp=np.full(groups, np.nan),
        pass_commit=np.zeros(groups, dtype=np.int64),
        state=np.zeros(8, dtype=np.int64),
        light=np.zeros(groups, dtype=np.int64),
        ph=np.zeros(groups * _PH),
        ph_head=np.zeros(groups, dtype=np.int64),
        ph_n=np.zeros(groups, dtype=np.int64),
        ptree=ptree,
        pdue=pdue,
        tlog=np.zeros(tick_log),
    )


class Gaps(NamedTuple):
    """Pooled inter-token gap statistics: ITL and 1000 / gap (output-token throughput per user).

    The sums are kept per group (``results.merged_gap_sums`` combines them), so a group's gaps add up
    in its own order whatever the other groups do meanwhile: a group may run ahead of the event
    loop (``_steady_run``). Counts, minima, maxima and histograms are order-free and shared.
    """

    itl: np.ndarray  # float64[G, 6]: sum, sum of squares (both about the shift), min, max, shift, shift set
    itl_n: np.ndarray  # int64[G]
    itl_hist: np.ndarray  # int64[DD_NBINS]
    otpu: np.ndarray
    otpu_n: np.ndarray
    otpu_hist: np.ndarray
    cache: np.ndarray  # float64[2^k, 4] (scratch): gaps met, by value (see ``_pool_gaps``)
    # bool[n], or bool[0] for none: rows whose gaps are left out (the requests a time cap leaves
    # in flight: Dynamo pools a request's gaps only when it completes). Every row must then be
    # explicit (no steady members), so that each gap is seen with its request.
    skip: np.ndarray
    # each request's token times until it completes, and Dynamo's running mean and variance of
    # the gaps folded in then (``kernels/timelines.py``); none kept: the sums above stand in
    tl: Timelines


# Histogram indices of a gap and of 1000 / gap take two logarithms and a division. Pass durations
# recur (a duration depends on a few counts: prefill tokens, active blocks), so the same gap values
# come back, across passes and groups: they are cached by value, direct mapped, in
# [gap, its histogram index, 1000 / gap, that one's index] rows (NaN: empty).
_GAP_CACHE = 4096


def new_gaps(n_groups=1, cache_rows=_GAP_CACHE, skip=None, tl=None):
    """Empty pooled gap statistics of ``n_groups`` groups (``cache_rows``: a power of two);
    ``skip``: the rows whose gaps are left out (see ``Gaps``); ``tl``: the requests' timelines
    (``timelines.new_timelines``), or none."""
    def acc():
        return np.tile(np.array([0.0, 0.0, np.inf, -np.inf, 0.0, 0.0]), (max(n_groups, 1), 1))

    def count():
        return np.zeros(max(n_groups, 1), dtype=np.int64)

    return Gaps(itl=acc(), itl_n=count(), itl_hist=np.zeros(DD_NBINS, dtype=np.int64),
                otpu=acc(), otpu_n=count(), otpu_hist=np.zeros(DD_NBINS, dtype=np.int64),
                cache=np.full((cache_rows, 4), np.nan),
                skip=np.zeros(0, dtype=np.bool_) if skip is None else np.asarray(skip, dtype=np.bool_),
                tl=new_timelines(0, 0, 256, 0) if tl is None else tl)


# ----------------------------------------------------------------------------- heaps
@inner
def _mark(cl, g):
    """Group ``g`` may be drivable now (it became idle or was given work)."""
    if not cl.dirty[g]:
        cl.dirty[g] = True
        n = cl.dlist.shape[0] - 1
        cl.dlist[cl.dlist[n]] = g
        cl.dlist[n] += 1


# ----------------------------------------------------------------------------- arrivals
@llvm_inline
def _load_static(ss, cl):
    """Put the next static first turn (in arrival order) and its time in the cursor (an agentic
    graph's cancelled roots are passed over)."""
    if graph_cancelled_nb(ss) > 0:
        _skip_cancelled_static(ss, cl)
    pos = cl.state[STATIC]
    if pos < ss.n_static:
        s = ss.order[pos] if ss.order.shape[0] > 0 else pos
        ss.cur[0] = ss.rows[ss.ptr[s]]
        ss.cur_t[0] = ss.first_arrival[s]
    else:
        ss.cur[0] = -1
        ss.cur_t[0] = np.inf


@inner
def _skip_cancelled_static(ss, cl):
    """Pass over the static first turns an agentic graph cancelled (kept out of ``_load_static``,
    which runs at every static arrival: the check there slowed agentic replays by a third)."""
    pos = cl.state[STATIC]
    while pos < ss.n_static and graph_cancelled_row_nb(ss, ss.rows[ss.ptr[ss.order[pos] if ss.order.shape[0] > 0
                                                                           else pos]]):
        pos += 1
    cl.state[STATIC] = pos


@inner
def next_arrival(ss, cl):
    """(row, time) of the earliest pending arrival, static first turns merged with the heap by
    (time, session and turn order), or (-1, inf)."""
    best = ss.cur[0]
    bt = ss.cur_t[0]
    if cl.state[NHEAP] > 0:
        top = ss.heap[0]
        tt = ss.ready_at[top]
        if best < 0 or tt < bt or (tt == bt and ss.tie[top] < ss.tie[best]):
            return top, tt
    return best, bt


@inner
def pop_arrival_nb(ss, cl, now):
    """Take the next arrival due at or before ``now`` (in arrival order): (row, its arrival
    time), or (-1, inf)."""
    r, t = next_arrival(ss, cl)
    if r < 0 or t > now:
        return -1, np.inf
    if cl.state[NHEAP] > 0 and ss.heap[0] == r:
        heap_pop_nb(ss.heap, cl.state, np.int64(NHEAP), ss.ready_at, ss.tie)
    else:
        cl.state[STATIC] += 1
        _load_static(ss, cl)
    cl.state[NARRIVED] += 1
    graph_dispatched_nb(ss, cl.state, np.int64(NHEAP), r, t)
    return r, t


@inner
def start_arrivals_nb(ss, cl):
    """Arm the first arrivals: the first ``concurrency`` sessions at 0 (closed loop), else every
    session's first turn at its trace time."""
    if cl.concurrency > 0:
        first = min(cl.concurrency, ss.ptr.shape[0] - 1)
        for s in range(first):
            _activate_session(ss, cl, s, 0.0)
        cl.state[NEXTSESS] = first
    if ss.graph.play.shape[0] > 0:
        graph_start_nb(ss, cl.state, np.int64(NHEAP))
    _load_static(ss, cl)


@inner
def _activate_session(ss, cl, s, t):
    r = ss.rows[ss.ptr[s]]
    ss.ready_at[r] = t
    heap_push_nb(ss.heap, cl.state, np.int64(NHEAP), ss.ready_at, ss.tie, r)


@inner
def turns_follow(ss, cl):
    """True if a turn's end can release an arrival: sessions of several turns, a closed loop or
    an agentic request graph (in an open loop of single turns every arrival is known from the
    start)."""
    return cl.concurrency > 0 or ss.rows.shape[0] > ss.ptr.shape[0] - 1 or ss.graph.play.shape[0] > 0


@inner
def _play_failed(ss, cl, r):
    """Row ``r`` of an agentic graph was rejected: its play's nodes not yet dispatched are
    cancelled, and leave the arrival heap (the survivors, packed in heap order, are pushed again
    in place) and the static cursor."""
    graph_rejected_nb(ss, r)
    m = cl.state[NHEAP]
    k = 0
    for i in range(m):
        r = ss.heap[i]
        if not graph_cancelled_row_nb(ss, r):
            ss.heap[k] = r
            k += 1
    cl.state[NHEAP] = 0
    for i in range(k):
        heap_push_nb(ss.heap, cl.state, np.int64(NHEAP), ss.ready_at, ss.tie, ss.heap[i])
    if ss.cur[0] >= 0 and graph_cancelled_row_nb(ss, ss.cur[0]):
        _load_static(ss, cl)


@llvm_inline
def on_terminal(ss, cl, r, t, rejected):
    """A turn ended (completed, or ``rejected``): release the session's next turn or free its slot
    (agentic graphs: its dependents; a rejection first fails its play, ``_play_failed``)."""
    if ss.graph.play.shape[0] > 0:
        if rejected:
            _play_failed(ss, cl, r)
        graph_ended_nb(ss, cl.state, np.int64(NHEAP), r, t)
        return
    if not turns_follow(ss, cl):
        return
    s = ss.session[r]
    nxt = ss.turn[r] + 1
    if ss.ptr[s] + nxt < ss.ptr[s + 1]:
        nr = ss.rows[ss.ptr[s] + nxt]
        ss.ready_at[nr] = t + ss.delay[nr]
        heap_push_nb(ss.heap, cl.state, np.int64(NHEAP), ss.ready_at, ss.tie, nr)
    elif cl.concurrency > 0:
        start_next_session_nb(ss, cl, t)


@inner
def session_failed_nb(ss, cl, r, t):
    """A turn failed where Dynamo 1.6.1 ends its session (a disaggregated handoff the decode pool
    refuses, docs/decisions/0470): none of the session's later turns arrives (they count as done,
    outside the report). True if a closed loop is owed its next session (the caller starts it,
    ``start_next_session_nb``); agentic graphs and open-loop single turns end as ``on_terminal``
    ends a rejected turn."""
    if ss.graph.play.shape[0] > 0 or not turns_follow(ss, cl):
        on_terminal(ss, cl, r, t, True)
        return False
    s = ss.session[r]
    cl.state[NDONE] += ss.ptr[s + 1] - (ss.ptr[s] + ss.turn[r] + 1)
    return cl.concurrency > 0


@inline
def start_next_session_nb(ss, cl, t):
    """A closed loop's freed slot starts the next session not yet started, at ``t``."""
    if cl.state[NEXTSESS] < ss.ptr.shape[0] - 1:
        _activate_session(ss, cl, cl.state[NEXTSESS], t)
        cl.state[NEXTSESS] += 1


# ----------------------------------------------------------------------------- effects
@inner
def _pool_value(acc, n_acc, g, hist, v, i, c):
    """Add ``c`` copies of value ``v`` (histogram index ``i``) to one pooled statistic of group
    ``g``: ``acc[g]`` = [sum, sum of squares (both about the shift), min, max, shift, shift set]."""
    if acc[g, 5] == 0.0:
        # sums are taken about the first value: sum of squares minus squared mean then keeps
        # full precision when the spread is small next to the mean
        acc[g, 4] = v
        acc[g, 5] = 1.0
    d = v - acc[g, 4]
    acc[g, 0] += c * d
    acc[g, 1] += c * (d * d)
    if v < acc[g, 2]:
        acc[g, 2] = v
    if v > acc[g, 3]:
        acc[g, 3] = v
    n_acc[g] += c
    if i >= 0:
        hist[i] += c


@inline
def _pool_gaps(gaps, gap, c, g):
    """Add ``c`` inter-token gaps of value ``gap`` to the pooled ITL and 1000/gap statistics of
    group ``g``."""
    h = 0
    if gap < 1e7:  # (gap >= 0: a hash of its value down to ~1e-11 ms, in range for the conversion)
        h = np.int64(gap * 68719476736.0)
        h = (h ^ (h >> 20)) & (gaps.cache.shape[0] - 1)
    e = gaps.cache[h]
    if gap != e[0]:
        e[0] = gap
        e[1] = dd_index_nb(gap)
        if gap > 0.0:
            e[2] = 1000.0 / gap
            e[3] = dd_index_nb(e[2])
    i = np.int64(e[1])
    inv = e[2]
    oi = np.int64(e[3])
    _pool_value(gaps.itl, gaps.itl_n, g, gaps.itl_hist, gap, i, c)
    if gap > 0.0:
        _pool_value(gaps.otpu, gaps.otpu_n, g, gaps.otpu_hist, inv, oi, c)


# A steady run's gaps differ from pass to pass under 1.6.1's rules (the decode time grows with the
# batch's lengths), so the cache above misses on almost every one; but they creep up by a few
# hundred-thousandths a pass, and the histogram's buckets are 0.2% wide. A *window* of gaps
# [lo, hi] inside one bucket of the gap's histogram and whose 1000 / gap stay inside one bucket of
# theirs serves a run's passes without a logarithm. Its ends are the buckets' edges (gamma^key,
# by ``exp``) pulled in by 2^-28 of their value: ``log`` and ``exp`` are off by a few ulps at
# most, a hundred million times less, so every gap in the window gets the indices that ``log``
# gives its first one. A gap that close to an edge gets no window (it is its own).
_WIN_SHRINK = 1.0 / (1 << 28)


@inline
def _gap_window(gap):
    """``(hi, i, oi)``: every gap in ``[gap, hi]`` has the histogram index ``i``, and its
    1000 / gap the index ``oi`` (``gap > 0``, finite); ``hi`` is ``gap`` when no wider window is
    certain."""
    i = dd_index_nb(gap)
    inv = 1000.0 / gap
    oi = dd_index_nb(inv)
    k = i - DD_OFFSET  # bucket keys: key k holds the values in (gamma^(k-1), gamma^k]
    ko = oi - DD_OFFSET
    if k <= DD_KEY_MIN or k >= DD_KEY_MAX or ko <= DD_KEY_MIN or ko >= DD_KEY_MAX or i <= 0:
        return gap, i, oi  # (clamped keys, the zero bucket)
    g_hi = math.exp(k * DD_GAMMA_LN)
    g_lo = g_hi / DD_GAMMA
    o_hi = math.exp(ko * DD_GAMMA_LN)
    o_lo = o_hi / DD_GAMMA
    if (gap < g_lo * (1.0 + _WIN_SHRINK) or gap > g_hi * (1.0 - _WIN_SHRINK)
            or inv < o_lo * (1.0 + _WIN_SHRINK) or inv > o_hi * (1.0 - _WIN_SHRINK)):
        return gap, i, oi  # on an edge, as far as these can tell
    hi = min(g_hi, 1000.0 / o_lo) * (1.0 - _WIN_SHRINK)
    if hi < gap:
        hi = gap
    return hi, i, oi


@inline
def _pool_gaps_at(gaps, gap, c, g, i, oi):
    """``_pool_gaps`` with the histogram indices known: ``i`` of ``gap`` (> 0), ``oi`` of
    1000 / gap."""
    _pool_value(gaps.itl, gaps.itl_n, g, gaps.itl_hist, gap, i, c)
    _pool_value(gaps.otpu, gaps.otpu_n, g, gaps.otpu_hist, 1000.0 / gap, oi, c)


@inline
def _release_prefill_at_pass_end(rt, g, r):
    """kv_router: request ``r`` got its first token, so its prefill load leaves the router when
    group ``g``'s pass ends (queued on the group's list, ``_complete_group`` releases it)."""
    if rt.mode == KV_ROUTER:
        rt.fnext[r] = -1
        if rt.ftail[g] >= 0:
            rt.fnext[rt.ftail[g]] = r
        else:
            rt.fhead[g] = r
        rt.ftail[g] = r


@inner
def stamp_tokens(rq, rk, gaps, rt, g, rows, n, t, ncommon, prev_end, k0, k1):
    """Stamp one token at time ``t`` on each of ``rows[:n]`` and on the ``ncommon`` steady
    members of ranks ``k0 .. k1-1`` (whose last token was at ``prev_end``, the group's previous
    pass end), and pool the inter-token gaps.

    Every request whose last token was at ``prev_end`` shares one gap: those are pooled at once,
    after the others (runs of equal gaps pooled together), so the sums do not depend on which
    requests are kept implicit.
    """
    gen = rq.generated
    first = rq.first_token
    second = rq.second_token
    last = rq.last_token
    common = ncommon
    run_gap = 0.0
    run_n = 0
    skipping = gaps.skip.shape[0] > 0
    tl = gaps.tl
    keep = keeping(tl)
    for i in range(n):
        r = rows[i]
        m = gen[r]  # already counts this token
        if keep:
            k = rq.rank[r]
            note_token(tl, r, k, rk.rpass[k] - 1, t, rq.sbase[r], m)
        if skipping and m > 1 and gaps.skip[r]:
            if m == 2:
                second[r] = t
            last[r] = t
            continue
        if m == 1:
            first[r] = t
            _release_prefill_at_pass_end(rt, g, r)
        else:
            lt = last[r]
            if lt == prev_end:
                common += 1
            else:
                gap = t - lt
                if run_n > 0 and gap != run_gap:
                    _pool_gaps(gaps, run_gap, np.int64(run_n), g)
                    run_n = 0
                run_gap = gap
                run_n += 1
            if m == 2:
                second[r] = t
        last[r] = t
    if run_n > 0:
        _pool_gaps(gaps, run_gap, np.int64(run_n), g)
    if common > 0:
        _pool_gaps(gaps, t - prev_end, np.int64(common), g)
    if keep:
        ring_note(tl, rk.rpass, k0, k1, t)
    for k in range(k0, k1):
        r = rk.secdue[k]
        while r >= 0:
            second[r] = t
            r = rq.snext[r]
        rk.secdue[k] = -1


@inner
def stamp_bursts(rq, gaps, rt, g, rows, n, t, bursts):
    """``stamp_tokens`` when a step may yield several tokens (speculative decoding: no steady
    members then): row ``i`` got ``bursts[i]`` tokens, all stamped ``t``; each after the first
    adds a gap of 0."""
    gen = rq.generated
    skipping = gaps.skip.shape[0] > 0
    zeros = 0
    run_gap = 0.0  # equal gaps in a row are pooled at once (most steps share the last pass end)
    run_n = 0
    tl = gaps.tl
    keep = keeping(tl)
    for i in range(n):
        r = rows[i]
        b = bursts[i]
        if b <= 0:
            continue
        if keep:
            note_tokens_at(tl, r, t, np.int64(b))
        m = gen[r]  # counts this step's tokens
        lo = m - b + 1  # the index of its first token here
        if lo == 1:
            rq.first_token[r] = t
            _release_prefill_at_pass_end(rt, g, r)
        if lo <= 2 and m >= 2:
            rq.second_token[r] = t
        if not (skipping and m > 1 and gaps.skip[r]):
            if lo > 1:
                gap = t - rq.last_token[r]
                if run_n > 0 and gap != run_gap:
                    _pool_gaps(gaps, run_gap, np.int64(run_n), g)
                    run_n = 0
                run_gap = gap
                run_n += 1
            zeros += b - 1
        rq.last_token[r] = t
    if run_n > 0:
        _pool_gaps(gaps, run_gap, np.int64(run_n), g)
    if zeros > 0:
        _pool_gaps(gaps, 0.0, np.int64(zeros), g)


@inner
def fill_prompt_keys(rq, r, bs, kbuf):
    """Keys of the full prompt blocks of ``r`` into ``kbuf``; returns their count."""
    return fill_keys(rq, r, np.int64(0), rq.isl[r] // bs, kbuf)


@inline
def _complete_group(p, pool, rq, rk, ss, cl, gaps, rt, fl, pa, g, t, tier):
    """Apply the visible effects of group ``g``'s pass ending at ``t``: the host tier's pass
    boundary (transfers, ``kernels/host_offload.py``), router load releases, terminals (session
    follow-ups, closed-loop backfill; a completed request's gaps folded into the running
    statistics, in this order). While the router queue holds requests, it moves after each single
    release (``_complete_group_queued``); an empty queue stays empty through a pass end (arrivals
    are routed later), and releases in any order leave the same loads."""
    if tier is not None:
        for k in range(g * cl.dp, (g + 1) * cl.dp):
            pass_boundary_nb(tier, pool, rq, k, t)
    if rt.mode == KV_ROUTER and rt.state[NQUEUE] > 0:
        _complete_group_queued(p, pool, rq, rk, ss, cl, gaps, rt, fl, pa, g, t)
        return
    if rt.mode == KV_ROUTER:
        r = rt.fhead[g]
        while r >= 0:
            release_prefill_nb(rt, r, rq.rank[r])
            r = rt.fnext[r]
        rt.fhead[g] = -1
        rt.ftail[g] = -1
    r = cl.pend_head[g]
    while r >= 0:
        nxt = rq.tnext[r]
        _end_request(p, rq, ss, cl, gaps, rt, pa, g, r, t)
        r = nxt
    cl.pend_head[g] = -1
    cl.pend_tail[g] = -1


@inline
def _end_request(p, rq, ss, cl, gaps, rt, pa, g, r, t):
    """Request ``r`` ended in group ``g``'s pass ending at ``t``: its terminal, its gaps folded
    into the running statistics, its router loads released, then its session follow-up or
    closed-loop backfill."""
    rq.status[r] = COMPLETED if rq.term_kind[r] == TERM_COMPLETED else REJECTED
    rq.terminal[r] = t
    cl.state[NDONE] += 1
    if keeping(gaps.tl):
        fold_request(gaps.tl, r, rq.term_kind[r] == TERM_COMPLETED, t, g)
    if rt.mode == KV_ROUTER:
        _release_kv(p, rq, rt, pa, r)
    on_terminal(ss, cl, r, t, rq.term_kind[r] != TERM_COMPLETED)


@inner
def _complete_group_queued(p, pool, rq, rk, ss, cl, gaps, rt, fl, pa, g, t):
    """``_complete_group``'s releases with a router queue: Dynamo's router moves its queue after
    every single release, a request's end or a first token's prefill load. On vLLM workers both
    releases (1.6.1 and 1.4.2) take, rank by rank, the pass's ended requests first, then its first
    tokens in the order they were made (docs/decisions/0430; the SGLang loop's 1.6.1 order is
    first tokens first)."""
    ended = cl.pend_head[g]
    cl.pend_head[g] = -1
    cl.pend_tail[g] = -1
    firsts = rt.fhead[g]
    rt.fhead[g] = -1
    rt.ftail[g] = -1
    for k in range(g * cl.dp, (g + 1) * cl.dp):
        r = ended
        while r >= 0:
            nxt = rq.tnext[r]
            if rq.rank[r] == k:
                _end_request(p, rq, ss, cl, gaps, rt, pa, g, r, t)
                _move_router_queue(p, pool, rq, rk, cl, rt, fl, pa, t)
            r = nxt
        r = firsts
        while r >= 0:
            nxt = rt.fnext[r]
            if rq.rank[r] == k:
                release_prefill_nb(rt, r, k)
                _move_router_queue(p, pool, rq, rk, cl, rt, fl, pa, t)
            r = nxt


@inner
def _move_router_queue(p, pool, rq, rk, cl, rt, fl, pa, now):
    """Release queued requests while some target is not busy, each routed as it leaves."""
    n_targets = rk.n_run.shape[0]
    while rt.state[NQUEUE] > 0 and not all_busy_nb(rt, n_targets):
        _dispatch_kv(p, pool, rq, rk, cl, rt, fl, pa, queue_pop_nb(rt), now, True)


@inner
def shareable_blocks(rq, r, nfull):
    """How many of ``r``'s ``nfull`` full prompt blocks another request can hold: its content-keyed
    ones (the rest are unique to it), or all of them in a growing session stream (mooncake-delta:
    a turn's later blocks are its session's earlier turns', kept under the stream's keys)."""
    if rq.kid.shape[0] > 0:
        return nfull
    return min(nfull, key_span(rq, r)[1])


@inner
def _release_kv(p, rq, rt, pa, r):
    """kv_router: request ``r``'s prefill load and prompt blocks leave the router."""
    k = rq.rank[r]
    release_prefill_nb(rt, r, k)
    nfull = fill_prompt_keys(rq, np.int64(r), p.block_size, pa.kbuf)
    release_blocks_nb(rt, pa.kbuf, nfull, shareable_blocks(rq, r, nfull), k)


@inner
def _dispatch_kv(p, pool, rq, rk, cl, rt, fl, pa, r, now, queued):
    """Route request ``r`` to the cheapest target at ``now`` and submit it there. ``queued``: it
    leaves the router queue, and is scored with the loads of now and, when its queue entry's
    overlaps are kept (``rt.qov``), those overlaps (Dynamo 1.6.1's pending request keeps its
    arrival's overlap scores, docs/decisions/0430)."""
    bs = p.block_size
    n_targets = rk.n_run.shape[0]
    nfull = fill_prompt_keys(rq, np.int64(r), bs, pa.kbuf)
    nshare = shareable_blocks(rq, r, nfull)
    sync_index_nb(rt, pool, now)
    if queued and rt.qov.shape[0] > 0:
        score_queued_nb(rt, r, pa.kbuf, nfull, nshare, rq.isl[r], bs, n_targets, fl.gstate, cl.dp)
    else:
        score_targets_nb(rt, pool, pa.kbuf, nfull, nshare, rq.isl[r], bs, n_targets, fl.gstate, cl.dp)
    k = choose_target_nb(rt, n_targets)
    commit_route_nb(rt, pa.kbuf, nfull, nshare, rq.isl[r], bs, r, k)
    note_route_nb(rt, r, n_targets, now)
    enqueue_waiting_nb(rq, rk, k, r)
    cl.stalled[k // cl.dp] = False
    _mark(cl, k // cl.dp)


@inline
def _drive_group(p, perf, pool, rq, rk, ss, cl, gaps, rt, fl, pa, g, now, tier):
    """Run one pass on every rank of group ``g`` that has work: the group becomes busy until the
    pass ends, completes it at once (zero duration, something changed) or stalls."""
    dp = cl.dp
    k0 = g * dp
    has_work = False
    for k in range(k0, k0 + dp):
        if rk.n_run[k] + rk.n_wait[k] > 0:
            has_work = True
            break
        if tier is not None:
            if ready_waiters_nb(tier, k) > 0:  # (a request woken in the connector queue)
                has_work = True
                break
    if not has_work:
        return
    fl.passes[g] += 1
    pa.emit_n[0] = 0
    pa.ncommon[0] = 0
    if p.psi > 1:  # prefills only on every psi-th step of the group (decision 0341)
        pa.acc[THROTTLE] = 1 if rk.psi[k0, 0] % p.psi != 0 else 0
        rk.psi[k0, 0] += 1
    prev_end = cl.last_stamp[g]
    end = now
    progress = False
    committed = rk.counters[COMMITTED_TOKENS]
    for k in range(k0, k0 + dp):
        if rk.n_run[k] + rk.n_wait[k] == 0:
            if tier is None:
                continue
            if ready_waiters_nb(tier, k) == 0:
                continue
        pa.acc[PROGRESS] = 0
        e = rank_pass_nb(p, perf, pool, rq, rk, k, now, pa, cl.pend_head, cl.pend_tail, g,
                         prev_end, rk.speculation, tier)
        if e > end:
            end = e
        if pa.acc[PROGRESS] != 0:
            progress = True
    for k in range(k0, k0 + dp):
        # a lagging kv_router's feed of the ranks' KV events: published when the group's pass
        # ends, the latest rank's end (decision 0480)
        seal_feed_nb(pool, k, end)
    cl.pass_commit[g] = rk.counters[COMMITTED_TOKENS] - committed
    if p.psi > 1:
        drained = True
        for k in range(k0, k0 + dp):
            if rk.n_run[k] + rk.n_wait[k] > 0:
                drained = False
        if drained:
            rk.psi[k0, 0] = 0  # a new wave starts aligned
    if pa.burst.shape[0] > 0:
        stamp_bursts(rq, gaps, rt, g, pa.emit, pa.emit_n[0], end, pa.burst)
    else:
        stamp_tokens(rq, rk, gaps, rt, g, pa.emit, pa.emit_n[0], end, pa.ncommon[0], prev_end, k0,
                     k0 + dp)
    cl.last_stamp[g] = end
    if end > now:
        cl.busy[g] = True
        tourney_set_nb(cl.ctree, cl.cdue, g, end)
    elif progress:
        _complete_group(p, pool, rq, rk, ss, cl, gaps, rt, fl, pa, g, now, tier)
        _mark(cl, g)  # idle again at the same time: it may run another pass
    else:
        cl.stalled[g] = True  # nothing can change here until new work is routed to this group


@inline
def _route(p, pool, rq, rk, cl, rt, fl, pa, r, now):
    """Send an arriving request to a target: round robin, or kv_router (maybe via its queue)."""
    if rt.mode == KV_ROUTER:
        _route_kv(p, pool, rq, rk, cl, rt, fl, pa, r, now)
        return
    # Dynamo's next_worker: idx = counter % len(active); counter = idx + 1; then the worker's rank
    c = cl.state[RR]
    nact = fl.fs[NACT]
    # (the counter is at most nact unless the fleet shrank: the division is rarely needed)
    idx = c if c < nact else (0 if c == nact else c % nact)
    cl.state[RR] = idx + 1
    w = nth_active_nb(fl, idx)
    if cl.dp == 1:
        k = w
    else:
        k = w * cl.dp + cl.wctr[w] % cl.dp
        cl.wctr[w] += 1
    enqueue_waiting_nb(rq, rk, k, r)
    cl.stalled[w] = False
    if not cl.busy[w]:  # (a busy group is marked when its pass ends)
        _mark(cl, w)


@inner
def _route_kv(p, pool, rq, rk, cl, rt, fl, pa, r, now):
    """kv_router: dispatch now, or queue the request while every target is busy (a call: it
    stays out of the inlined loop)."""
    n_targets = rk.n_run.shape[0]
    if rt.state[NQUEUE] > 0 or all_busy_nb(rt, n_targets):
        bs = p.block_size
        if rt.policy == WSPT or rt.qov.shape[0] > 0:
            # its overlaps now: wspt's order, and its scores at release if kept (queue_push_nb)
            nfull = fill_prompt_keys(rq, np.int64(r), bs, pa.kbuf)
            nshare = shareable_blocks(rq, r, nfull)
            sync_index_nb(rt, pool, now)
            score_targets_nb(rt, pool, pa.kbuf, nfull, nshare, rq.isl[r], bs, n_targets,
                             fl.gstate, cl.dp)
        queue_push_nb(rt, r, queue_key_nb(rt, now, rq.isl[r], bs, n_targets))
        note_queued_nb(rt, r)
        return
    _dispatch_kv(p, pool, rq, rk, cl, rt, fl, pa, r, now, False)


@inline
def _route_arrivals(p, pool, rq, rk, ss, cl, rt, fl, pa, now):
    """Release every arrival due at ``now``, in arrival order, and route it (the tick's phase 3)."""
    while True:
        r, t_arr = pop_arrival_nb(ss, cl, now)
        if r < 0:
            return
        if cl.single_path and cl.concurrency > 0 and p.timing_rules != TIMING_161:
            t_arr = _single_worker_dispatch_ms(cl, now)
        arrive_nb(rq, r, t_arr)
        _route(p, pool, rq, rk, cl, rt, fl, pa, r, now)


@inner
def _single_worker_dispatch_ms(cl, now):
    """The arrival Dynamo 1.4.2's single-worker runtime stamps on a closed loop's request released
    at ``now``: that runtime wakes only for its worker's pass ends while the worker is busy, so a
    turn whose think time ends mid-pass is dispatched, and arrives, at the end of that pass (it is
    admitted there anyway); on an idle worker, at ``now`` (docs/decisions/0240)."""
    end = cl.cdue[cl.ctree[1]]
    if end > now and end < np.inf:
        return end
    return now


@inline
def _drain(p, perf, pool, rq, rk, ss, cl, gaps, rt, fl, pa, now, tier):
    """Process everything due at ``now`` until nothing changes (the tick phases, in order)."""
    while True:
        changed = False  # by the fleet phases (5, 6)
        # 1. pass completions
        while cl.cdue[cl.ctree[1]] <= now:
            g = cl.ctree[1]
            t_end = cl.cdue[g]
            tourney_set_nb(cl.ctree, cl.cdue, g, np.inf)
            cl.busy[g] = False
            _mark(cl, g)
            _complete_group(p, pool, rq, rk, ss, cl, gaps, rt, fl, pa, g, t_end, tier)
        if tier is not None:  # transfers of idle ranks due now (their deadlines are events)
            _tier_idle_events(rk, cl, pool, rq, tier, now)
        # 2. workers that finished starting
        if fl.fs[NSTARTING] > 0 and mark_ready_nb(fl, now):
            if rt.mode == KV_ROUTER:
                n_targets = rk.n_run.shape[0]
                while rt.state[NQUEUE] > 0 and not all_busy_nb(rt, n_targets):
                    _dispatch_kv(p, pool, rq, rk, cl, rt, fl, pa, queue_pop_nb(rt), now, True)
        # 3. arrivals
        _route_arrivals(p, pool, rq, rk, ss, cl, rt, fl, pa, now)
        # 4. ready groups, lowest id first (only groups marked since the last drive can be)
        gcap = cl.dirty.shape[0]
        nd = cl.dlist[gcap]
        if nd > 0:
            for i in range(nd):
                x = cl.dlist[i]
                cl.dirty[x] = False
                j = i - 1  # insertion sort into dwork: the list is short
                while j >= 0 and cl.dwork[j] > x:
                    cl.dwork[j + 1] = cl.dwork[j]
                    j -= 1
                cl.dwork[j + 1] = x
            cl.dlist[gcap] = 0
            for i in range(nd):
                g = cl.dwork[i]
                st = fl.gstate[g]
                if (st == ACTIVE or st == DRAINING) and not cl.busy[g] and not cl.stalled[g]:
                    _drive_group(p, perf, pool, rq, rk, ss, cl, gaps, rt, fl, pa, g, now, tier)
        # 5. retire drained workers
        if fl.fs[NDRAINING] > 0 and retire_drained_nb(fl, cl.busy, rk.n_run, rk.n_wait, cl.dp, 0):
            changed = True
        # 6. scaling decisions last: they see a settled timestamp
        if fl.fs[SCHEDPOS] < fl.sched_t.shape[0] and apply_schedule_nb(fl, now):
            changed = True
        # Another round can only act on what this one left due at ``now``: groups marked since
        # their drive (a zero-duration pass, a dispatch), arrivals released by a completion in
        # the drive (zero-delay turns), or a fleet change. Anything else would be a no-op round.
        if changed or cl.dlist[gcap] > 0:
            continue
        if next_arrival(ss, cl)[1] <= now:
            continue
        return


@inner
def _tier_idle_events(rk, cl, pool, rq, tier, now):
    """Complete the host-tier transfers due by ``now`` of the ranks without a pass in flight; a
    rank whose sleepers woke may run a pass."""
    for g in range(cl.busy.shape[0]):
        if cl.busy[g]:
            continue
        for k in range(g * cl.dp, (g + 1) * cl.dp):
            if idle_deadline_nb(tier, k) <= now and idle_advance_nb(tier, pool, rq, k, now):
                cl.stalled[g] = False
                _mark(cl, g)


@inner
def _tier_next_event(cl, tier):
    """The earliest transfer deadline of a rank without a pass in flight (inf: none)."""
    t = np.inf
    for g in range(cl.busy.shape[0]):
        if cl.busy[g]:
            continue
        for k in range(g * cl.dp, (g + 1) * cl.dp):
            d = idle_deadline_nb(tier, k)
            if d < t:
                t = d
    return t


@inner
def _tier_tail(rk, cl, pool, rq, fl, tier, ws, now):
    """After the last request: Dynamo's clock runs on to each host-tier transfer still in
    flight (a store of the last prompts' blocks), and every worker counts its seconds until the
    last one completes (decision 0353). Returns the worker-seconds and the time."""
    while True:
        t = _tier_next_event(cl, tier)
        if t == np.inf or (cl.max_sim_time >= 0.0 and t > cl.max_sim_time):
            return ws, now
        ws = _step_ws(cl, fl, ws, now, t)
        now = t
        _tier_idle_events(rk, cl, pool, rq, tier, now)


@inline
def _next_arrival_at(ss, cl, rt, fl, g):
    """The time of the next arrival that can reach group ``g``. Round robin over a fleet that
    cannot change, with every arrival known from the start (an open loop of single turns), sends
    the arrivals to the workers in turn: the next one for ``g`` is a fixed number of arrivals
    ahead (``_route``'s counter). Otherwise any arrival may reach it: the next arrival."""
    if (rt.mode == KV_ROUTER or turns_follow(ss, cl) or not at_rest_nb(fl)
            or fl.fs[NCREATED] != fl.fs[NACT]):
        return next_arrival(ss, cl)[1]
    nact = fl.fs[NACT]
    c = cl.state[RR]
    idx = c if c < nact else (0 if c == nact else c % nact)  # (as ``_route``)
    d = g - idx
    if d < 0:
        d += nact
    pos = cl.state[STATIC] + d
    if pos >= ss.n_static:
        return np.inf
    s = ss.order[pos] if ss.order.shape[0] > 0 else pos
    return ss.first_arrival[s]


@inline
def _light_refused(p, rk, ss, cl, rt, fl, g, now):
    """The quick refusals of ``_light_tick`` for group ``g`` at ``now`` (True: not a light tick):
    the loop tests them before calling ``_light_ticks``, whose call costs more than the test."""
    if cl.cdue[g] != now or cl.pend_head[g] >= 0:
        return True
    # the usual refusals under load first: prefills, admissions (a waiting queue whose head
    # cannot be admitted is for ``steady_pass_ok`` to tell)
    for k in range(g * cl.dp, (g + 1) * cl.dp):
        if rk.xhead[k] >= 0 or (rk.n_wait[k] > 0 and not p.light_waiting):
            return True
    if rt.mode == KV_ROUTER and (rt.fhead[g] >= 0 or rt.state[NQUEUE] > 0):
        return True
    if not at_rest_nb(fl):
        return True
    return next_arrival(ss, cl)[1] <= now


@inline
def _light_tick(p, perf, pool, rq, rk, ss, cl, gaps, rt, fl, pa, now):
    """Handle the tick at ``now`` on the light path if all it holds is the end of one group's
    pass and that group's next pass, made of steady passes only (``scheduler.steady_pass_ok``):
    no terminals, no router work, no arrival, no fleet event, no other group's pass end. The
    state afterwards is exactly what ``_drain`` would leave. Returns False, changing nothing, if
    the tick is not of that kind."""
    g = cl.ctree[1]
    if _light_refused(p, rk, ss, cl, rt, fl, g, now):
        return False
    dp = cl.dp
    k0 = g * dp
    end = now
    for k in range(k0, k0 + dp):
        if rk.n_run[k] + rk.n_wait[k] == 0:
            continue
        if not steady_pass_ok(p, pool, rq, rk, k, pa.kbuf, pa.hslot):
            return False
        e = (now + 0.0) + steady_pass_ms(p, perf, pool, rk, k)
        if e > end:
            end = e
    if not end > now:  # no work, or a zero-length pass: the drain's business
        return False
    if cl.ctree.shape[0] > 2:  # another group's pass ending now too: the drain orders them
        tourney_set_nb(cl.ctree, cl.cdue, g, np.inf)
        if cl.cdue[cl.ctree[1]] <= now:
            tourney_set_nb(cl.ctree, cl.cdue, g, now)
            return False
    # the group's pass that ended now had nothing to apply; its next pass (as _drive_group)
    rk.diag[DIAG_LIGHT_TICKS] += 1
    for k in range(k0, k0 + dp):
        if rk.n_wait[k] > 0:
            rk.diag[DIAG_LIGHT_WAITING] += 1  # (a waiting queue whose head cannot be admitted)
    fl.passes[g] += 1
    prev_end = cl.last_stamp[g]
    common = 0
    for k in range(k0, k0 + dp):
        if rk.n_run[k] + rk.n_wait[k] > 0:
            common += rk.nsteady[k]
            seal_feed_nb(pool, k, steady_pass_nb(p, perf, pool, rk, k, now))
    stamp_tokens(rq, rk, gaps, rt, g, pa.emit, np.int64(0), end, np.int64(common), prev_end, k0,
                  k0 + dp)
    cl.last_stamp[g] = end
    cl.pass_commit[g] = 0
    tourney_set_nb(cl.ctree, cl.cdue, g, end)
    return True


_PH = 256  # phantom events a group may hold (see ``_steady_run``)


@inline
def _log_tick(cl, t):
    """Keep ``t`` in the tick log, if one is kept (a split run, ``fastsim/shards.py``). The loop
    returns TICKS_FULL before the log could overflow (``_tick_room``)."""
    if cl.tlog.shape[0] > 0:
        i = cl.state[NTICKS]
        cl.tlog[i] = t
        cl.state[NTICKS] = i + 1


@inline
def _tick_room(cl):
    """Entries the tick log can still take beyond what one step of the loop may add (a step
    logs its own time and every phantom event before it: at most ``_PH`` per group); a large
    number when no log is kept."""
    if cl.tlog.shape[0] == 0:
        return np.int64(1) << 62
    return cl.tlog.shape[0] - cl.state[NTICKS] - (cl.ph_n.shape[0] * _PH + 2)


@inline
def _step_ws(cl, fl, ws, now, t):
    """The worker-seconds after the loop steps from ``now`` to ``t``, over the phantom events in
    between (``_steady_run``) in time order: Dynamo adds ``live * (t - now) / 1000`` at every
    event, and those sums depend on where the events fall. (Events at one time add zero.)"""
    live = fl.fs[NLIVE]
    g = cl.ptree[1]
    pt = cl.pdue[g]
    while pt < t:
        ws += live * (pt - now) / 1000.0
        _log_tick(cl, pt)
        now = pt
        m = cl.ph_n[g] - 1
        head = (cl.ph_head[g] + 1) % _PH
        cl.ph_n[g] = m
        cl.ph_head[g] = head
        # (the next winner comes back in registers: reading it from the tree would wait on the
        # store that just wrote it)
        g, pt = tourney_set_nb(cl.ptree, cl.pdue, g, cl.ph[g * _PH + head] if m > 0 else np.inf)
    _log_tick(cl, t)
    return ws + live * (t - now) / 1000.0


@inline
def _run_limit(ss, cl, rt, fl, g):
    """Before when the passes of a steady run of group ``g`` must start: its next arrival, the
    next pass end of another group when turns follow completions, the next telemetry tick and the
    time cap. Takes ``g`` off the tournament for the run."""
    limit = _next_arrival_at(ss, cl, rt, fl, g)
    tourney_set_nb(cl.ctree, cl.cdue, g, np.inf)  # off the tournament while it runs
    if turns_follow(ss, cl):
        if cl.cdue[cl.ctree[1]] < limit:
            limit = cl.cdue[cl.ctree[1]]
    if fl.tel_ms > 0.0 and fl.ff[NEXTTEL] < limit:
        limit = np.nextafter(fl.ff[NEXTTEL], np.inf)  # a pass may start at the tick, not after
    if cl.max_sim_time >= 0.0 and not cl.max_sim_time >= limit:
        limit = np.nextafter(cl.max_sim_time, np.inf)  # ... and at the cap, not after
    return limit


@inline
def _pass_ended(cl, E, alone, live, ws, now, base, head, m):
    """A steady pass of a run ends at ``E``: a group alone steps the clock and the worker-seconds
    to it; otherwise ``E`` joins the group's phantom events (the loop will not stop there).
    Returns ``(ws, now, m)``, ``m`` the phantoms held."""
    if alone:
        ws += live * (E - now) / 1000.0
        _log_tick(cl, E)
        now = E
    else:
        cl.ph[base + (head + m) % _PH] = E
        m += 1
    return ws, now, m


@inline
def _steady_run(p, perf, pool, rq, rk, ss, cl, gaps, rt, fl, g, now, ws):
    """After a light tick of one-rank group ``g``: the steady passes that follow it on that rank,
    run at once, ahead of the event loop, in one loop over the rank's counters held in locals.

    Another group's events cannot reach ``g``, nor see it, before the next arrival that can reach
    ``g`` (``_next_arrival_at``): they only finish their own requests (the sums that pass ends
    add to are kept per group: ``Gaps``; the worker-seconds are kept exact by phantom events,
    below). So ``g`` runs every pass that starts before that arrival (strictly: an arrival at a
    pass's start joins before it), at or before the next telemetry tick (a tick samples every group) and
    within the time cap, while its next pass is again a steady pass (``steady_next_ok``: a rank
    of steady members only stays so, as no such pass admits or finishes anyone). When a turn's
    end can release a follow-up turn (sessions of several turns, a closed loop), the next pass
    end of any other group bounds the run too. Each pass does what ``_light_tick`` does, in the
    same order: the block starts allocated, the step time, the shared gap pooled. ``g`` then
    waits in the tournament for the end of the last one.

    The loop would have stopped at each of those pass ends but the last: they stay on record as
    *phantom* events (``cl.ph``, at most ``_PH`` per group, which bounds a run), so that the
    worker-seconds still add up event by event in time order (``_step_ws``), as Dynamo adds them.
    With one group there is nothing to interleave: the run steps the clock and worker-seconds
    itself, as the loop would, and returns ``(now, ws)`` (the time of its last pass start);
    otherwise they come back unchanged."""
    E = cl.cdue[g]
    limit = _run_limit(ss, cl, rt, fl, g)
    now, ws, n = run_ahead_nb(p, perf, pool, rq, rk, cl, gaps, g, g, E, limit, now, ws, fl.fs[NLIVE])
    fl.passes[g] += n
    return now, ws


@inline
def run_ahead_nb(p, perf, pool, rq, rk, cl, gaps, g, k, E, limit, now, ws, live):
    """The loop of a steady run (``_steady_run``) of group ``g``, one rank ``k``, whose pass ends
    at ``E`` (``g`` is off the tournament): every steady pass that starts before ``limit``, then
    ``g`` back in the tournament at the end of the last one. Returns ``(now, ws, passes run)``."""
    P = rk.rpass[k]
    ns = rk.nsteady[k]
    slen = rk.slen[k]
    nact = pool.meta[k, NACTIVE]
    bs = p.block_size
    n = 0
    base = g * _PH
    head = cl.ph_head[g]
    m = cl.ph_n[g]
    alone = cl.ctree.shape[0] == 2
    room = _tick_room(cl)  # (alone, each pass start is logged)
    wlo = np.inf  # the gap window (``_gap_window``): none yet
    whi = -np.inf
    wi = 0
    woi = 0
    # Under 1.6.1's rules each pass's decode time is a new value, from the batch's total length
    # (which grows by ``ns`` a pass): four are worked out at a time, whose chains of divisions and
    # roundings do not depend on each other (the last ones may go unused).
    t161 = p.timing_rules == TIMING_161
    d0 = d1 = d2 = d3 = 0.0
    dj = 4
    while E < limit and m < _PH and n < room and steady_next_ok(p, pool, rq, rk, k, P, nact):
        nb = rk.bcnt[k * bs + block_mod(p, P)]
        if t161:
            if dj == 4:
                d0, d1, d2, d3 = decode4_ms_161(p, perf, slen, ns)
                dj = 0
            dms = d0 if dj == 0 else (d1 if dj == 1 else (d2 if dj == 2 else d3))
            dj += 1
        else:
            dms = step_ms(p, perf, rk, k, nact + nb, slen, ns)
        e = (E + 0.0) + dms
        if not e > E:
            break  # a zero-length pass: the drain's business
        if nb > 0:
            alloc_anon_nb(pool, k, nb)
            seal_feed_nb(pool, k, e)  # (its evictions reach a lagging kv_router at the pass end)
            nact += nb
        slen += ns
        if keeping(gaps.tl):
            ring_put(gaps.tl, k, P, e)
        P += 1
        n += 1
        d = e - E  # the pass's gap: the group's last stamp was ``E``
        if not (d >= wlo and d <= whi):
            wlo = d
            whi, wi, woi = _gap_window(d)
        _pool_gaps_at(gaps, d, ns, g, wi, woi)
        ws, now, m = _pass_ended(cl, E, alone, live, ws, now, base, head, m)
        E = e
    if n > 0:
        if cl.ph_n[g] == 0 and m > 0:
            tourney_set_nb(cl.ptree, cl.pdue, g, cl.ph[base + head])
        cl.ph_n[g] = m
        rk.rpass[k] = P
        rk.slen[k] = slen
        rk.diag[DIAG_STEADY_PASSES] += n
        rk.diag[DIAG_LIGHT_TICKS] += n
        rk.diag[DIAG_RUN_AHEAD_PASSES] += n
        cl.last_stamp[g] = E
    tourney_set_nb(cl.ctree, cl.cdue, g, E)
    return now, ws, n


@inline
def step_phantoms_nb(cl, t):
    """Take the earliest phantom event before ``t`` off its group's ring (``_steady_run``):
    returns its time, or ``t`` when there is none (the caller steps its sums to it)."""
    g = cl.ptree[1]
    pt = cl.pdue[g]
    if not pt < t:
        return t
    m = cl.ph_n[g] - 1
    head = (cl.ph_head[g] + 1) % _PH
    cl.ph_n[g] = m
    cl.ph_head[g] = head
    tourney_set_nb(cl.ptree, cl.pdue, g, cl.ph[g * _PH + head] if m > 0 else np.inf)
    return pt


@inline
def _steady_run_dp(p, perf, pool, rq, rk, ss, cl, gaps, rt, fl, g, now, ws):
    """``_steady_run`` for a group of several attention-DP ranks: every rank with work runs its
    steady pass, the group's pass ends at the slowest rank's end (the DP barrier, as in
    ``_light_tick``) and all its members share that one gap. A rank without work stays so (no
    arrival reaches the group before the run's limit). The ranks' counters stay in their arrays;
    a pass is checked whole (every rank's next pass steady, the group's end after its start)
    before any rank allocates."""
    dp = cl.dp
    k0 = g * dp
    E = cl.cdue[g]
    limit = _run_limit(ss, cl, rt, fl, g)
    bs = p.block_size
    common = 0  # the members that share each pass's gap
    for k in range(k0, k0 + dp):
        if rk.n_run[k] + rk.n_wait[k] > 0:
            common += rk.nsteady[k]
    n = 0
    nrank = 0
    base = g * _PH
    head = cl.ph_head[g]
    m = cl.ph_n[g]
    alone = cl.ctree.shape[0] == 2
    live = fl.fs[NLIVE]
    room = _tick_room(cl)  # (alone, each pass start is logged)
    wlo = np.inf  # the gap window (``_gap_window``): none yet
    whi = -np.inf
    wi = 0
    woi = 0
    while E < limit and m < _PH and n < room:
        end = E
        ok = True
        for k in range(k0, k0 + dp):
            if rk.n_run[k] + rk.n_wait[k] == 0:
                continue
            P = rk.rpass[k]
            nact = pool.meta[k, NACTIVE]
            if not steady_next_ok(p, pool, rq, rk, k, P, nact):
                ok = False
                break
            nb = rk.bcnt[k * bs + block_mod(p, P)]
            e = (E + 0.0) + step_ms(p, perf, rk, k, nact + nb, rk.slen[k], rk.nsteady[k])
            if e > end:
                end = e
        if not ok or not end > E:
            break  # (a zero-length pass: the drain's business)
        for k in range(k0, k0 + dp):
            if rk.n_run[k] + rk.n_wait[k] == 0:
                continue
            P = rk.rpass[k]
            nb = rk.bcnt[k * bs + block_mod(p, P)]
            if nb > 0:
                nact = pool.meta[k, NACTIVE]
                alloc_anon_nb(pool, k, nb)
                if pool.ev_key.shape[0] > 0:  # its evictions reach a lagging kv_router at its pass end
                    seal_feed_nb(pool, k, (E + 0.0) + step_ms(p, perf, rk, k, nact + nb, rk.slen[k],
                                                              rk.nsteady[k]))
            rk.slen[k] += rk.nsteady[k]
            rk.rpass[k] = P + 1
            if keeping(gaps.tl):
                ring_put(gaps.tl, k, P, end)
            nrank += 1
        n += 1
        d = end - E  # the pass's gap: the group's last stamp was ``E``
        if not (d >= wlo and d <= whi):
            wlo = d
            whi, wi, woi = _gap_window(d)
        _pool_gaps_at(gaps, d, common, g, wi, woi)
        ws, now, m = _pass_ended(cl, E, alone, live, ws, now, base, head, m)
        E = end
    if n > 0:
        if cl.ph_n[g] == 0 and m > 0:
            tourney_set_nb(cl.ptree, cl.pdue, g, cl.ph[base + head])
        cl.ph_n[g] = m
        rk.diag[DIAG_STEADY_PASSES] += nrank
        rk.diag[DIAG_LIGHT_TICKS] += n
        rk.diag[DIAG_RUN_AHEAD_PASSES] += n
        fl.passes[g] += n
        cl.last_stamp[g] = E
        cl.pass_commit[g] = 0
    tourney_set_nb(cl.ctree, cl.cdue, g, E)
    return now, ws


@inline
def _steady_members_only(rk, cl, g):
    """No rank of group ``g`` has a steady member whose next token is its second (those are
    stamped one by one: a steady run leaves them to the light tick)."""
    for k in range(g * cl.dp, (g + 1) * cl.dp):
        if rk.sechead[k] >= 0:
            return False
    return True


LIGHT_NONE, LIGHT_THEN_DRAIN, LIGHT_DONE = range(3)  # what ``_light_ticks`` handled


@inner
def _light_ticks(tabs, now, ws):
    """Handle light ticks (``_light_tick``) from ``now`` on, one after the other, stepping the
    clock and the worker-seconds between them as the event loop would, while the loop would do
    nothing else in between (no telemetry tick, no time cap, no fleet event: ``_light_tick``).
    Returns ``(now, ws, outcome)``: LIGHT_NONE if the first tick was not light (nothing
    changed), LIGHT_THEN_DRAIN if some were and the tick at the returned ``now`` still needs the
    full drain, LIGHT_DONE if that tick has been handled too (the loop goes on to its next event).
    ``tabs`` points to the loop's tables (``kernels/indirect.py``)."""
    p, perf, pool, rq, rk, ss, cl, gaps, rt, fl, pa = deref(tabs)
    outcome = LIGHT_NONE
    while True:
        g = cl.ctree[1]
        if not _light_tick(p, perf, pool, rq, rk, ss, cl, gaps, rt, fl, pa, now):
            return now, ws, outcome
        outcome = LIGHT_THEN_DRAIN
        if cl.dp == 1:
            if rk.sechead[g] < 0:
                now, ws = _steady_run(p, perf, pool, rq, rk, ss, cl, gaps, rt, fl, g, now, ws)
        elif _steady_members_only(rk, cl, g):
            now, ws = _steady_run_dp(p, perf, pool, rq, rk, ss, cl, gaps, rt, fl, g, now, ws)
        # the loop's next event (light ticks leave no fleet event pending: see _light_tick)
        t = cl.cdue[cl.ctree[1]]
        t_arr = next_arrival(ss, cl)[1]
        if t_arr < t:
            t = t_arr
        if t == np.inf or (fl.tel_ms > 0.0 and fl.ff[NEXTTEL] < t) or (
                cl.max_sim_time >= 0.0 and t > cl.max_sim_time):
            return now, ws, LIGHT_DONE  # the loop's own business
        if _tick_room(cl) < 0:
            return now, ws, LIGHT_DONE  # the tick log is nearly full: the loop returns TICKS_FULL
        ws = _step_ws(cl, fl, ws, now, t)
        now = t


@loop_kernel
def run_loop_nb(p, perf, pool, rq, rk, ss, cl, gaps, rt, fl, pa, out, tier):
    """Run the simulation until it ends or pauses. ``out`` (float64[4]) holds [worker_seconds, now];
    ``tier``: the run's host KV tier (``kernels/host_offload.py``), None without one.

    Returns OK, DEAD_END (no future event while requests are unfinished), SIM_CAP, TABLE_FULL (the
    router's block table was too small: re-run with a larger one), or a pause the caller resumes by
    calling again with the same state: TELEMETRY_FULL (grow the telemetry buffers), LOG_FULL (grow
    the readmission log ``pa.alog``), TABLE_GROW (grow the router's block table), PLANNER_TICK
    (a planner may set ``fl.fs[TARGET]``), TICKS_FULL (empty the tick log ``cl.tlog``: a shard
    of a split run, ``fastsim/shards.py``), HOST_TIER_STOP (the host tier would have to evict:
    ``tier.flag``) or INTERRUPTED (``cl.state[CTRL_C]`` was set). It releases the GIL while it runs.

    The loop itself is ``_loop``, called once through a pointer: this kernel is the Python entry
    point numba generates (it unboxes every array of every table), compiled apart from the loop.
    """
    return _loop_call(pin((p, perf, pool, rq, rk, ss, cl, gaps, rt, fl, pa)), tier, out)


@inner
def _loop(tabs, tier, out):
    """``run_loop_nb`` on the tables ``tabs`` points to."""
    p, perf, pool, rq, rk, ss, cl, gaps, rt, fl, pa = deref(tabs)
    n_rows = rq.isl.shape[0]
    ws = out[0]
    now = out[1]
    status = OK
    drain_now = False
    last = False
    if fl.fs[STARTED] == 0:
        fl.fs[STARTED] = 1
        start_arrivals_nb(ss, cl)
        drain_now = True
    elif fl.fs[TARGET] >= 0:
        apply_target_nb(fl, now, fl.fs[TARGET])
        fl.fs[TARGET] = -1
        drain_now = True
    while True:
        if drain_now:
            # the one call site of the drain (it is inlined: a call would copy the whole state)
            _drain(p, perf, pool, rq, rk, ss, cl, gaps, rt, fl, pa, now, tier)
            drain_now = False
            if tier is not None:
                if tier.flag[STOP] != 0:
                    status = HOST_TIER_STOP
                    break
            if last:
                break
            if rt.state[OVERFLOW] != 0:
                status = TABLE_FULL
                break
            if 4 * rt.state[NENTRIES] > rt.tab_key.shape[0]:
                status = TABLE_GROW  # (grown before it fills up within a step, which costs a re-run)
                break
            if fl.planner_ms > 0.0 and fl.ff[NEXTPLAN] <= now:
                fl.ff[NEXTPLAN] = now + fl.planner_ms
                status = PLANNER_TICK
                break
        if cl.state[NDONE] + graph_cancelled_nb(ss) >= n_rows:  # (an agentic graph's cancelled nodes never arrive)
            if tier is not None:
                ws, now = _tier_tail(rk, cl, pool, rq, fl, tier, ws, now)
            break
        if _tick_room(cl) < 0 or not log_room(gaps.tl):
            status = TICKS_FULL  # the caller empties the logs and calls again
            break
        if cl.state[CTRL_C] != 0:  # (set from another thread: fastsim/interrupt.py)
            status = INTERRUPTED
            break
        if keeping(gaps.tl) and gaps.tl.st[FREE_RECORDS] < 2 * (cl.state[NARRIVED] - cl.state[NDONE]) + 64:
            # a tick takes at most two token-time records per request in flight: the caller grows them
            status = RECORDS_FULL
            break
        if pa.alog.shape[0] > 0 and pa.alog_n[AWAITING_READMISSION] > pa.alog.shape[0] - pa.alog_n[READMISSIONS]:
            # the preempted requests could overflow the readmission log: the caller grows it
            status = LOG_FULL
            break
        t = np.inf
        if fl.fs[NSTARTING] > 0 or fl.fs[SCHEDPOS] < fl.sched_t.shape[0] or fl.planner_ms > 0.0:
            t = next_fleet_event_nb(fl)
        if cl.cdue[cl.ctree[1]] < t:
            t = cl.cdue[cl.ctree[1]]
        t_arr = next_arrival(ss, cl)[1]
        if t_arr < t:
            t = t_arr
        if tier is not None:
            t_tier = _tier_next_event(cl, tier)
            if t_tier < t:
                t = t_tier
        if t == np.inf:
            status = DEAD_END
            break
        # telemetry: the state is constant between events, so ticks in [now, t) see it as it is now
        while fl.tel_ms > 0.0 and fl.ff[NEXTTEL] < t:
            if not sample_nb(fl, pool, rk.n_run, rk.n_wait, cl.dp, fl.ff[NEXTTEL]):
                status = TELEMETRY_FULL
                break
            fl.ff[NEXTTEL] += fl.tel_ms
        if status == TELEMETRY_FULL:
            break
        if cl.max_sim_time >= 0.0 and t > cl.max_sim_time:
            status = SIM_CAP
            if not cl.single_path or p.timing_rules == TIMING_161:
                # the pass ends a steady run went past are events at or before the cap too
                cap = np.nextafter(cl.max_sim_time, np.inf)
                while cl.pdue[cl.ptree[1]] < cap:
                    pt = cl.pdue[cl.ptree[1]]
                    ws = _step_ws(cl, fl, ws, now, pt)  # (the phantoms before ``pt``)
                    now = pt
                    gph = cl.ptree[1]
                    mph = cl.ph_n[gph] - 1
                    hph = (cl.ph_head[gph] + 1) % _PH
                    cl.ph_n[gph] = mph
                    cl.ph_head[gph] = hph
                    tourney_set_nb(cl.ptree, cl.pdue, gph, cl.ph[gph * _PH + hph] if mph > 0 else np.inf)
                break
            # Dynamo 1.4.2's single-worker runtime still processes the first event beyond the
            # cap (1.6.1's stops at the cap, as a cluster does).
            now = t
            drain_now = True
            last = True
            continue
        ws = _step_ws(cl, fl, ws, now, t)
        now = t
        drain_now = True
        if (p.fast and t_arr == now and cl.cdue[cl.ctree[1]] > now and rt.mode != KV_ROUTER
                and at_rest_nb(fl)):
            # An arrival tick with no pass end and no fleet event: the drain would release and
            # route the arrivals and then drive the groups they woke. Routing them here is the
            # same; the drain is needed only if one of them went to an idle group (under load
            # they mostly join a group in mid-pass, and the tick ends there). Not for kv_router:
            # its routing can fill the router's block table, which the loop checks after a drain.
            _route_arrivals(p, pool, rq, rk, ss, cl, rt, fl, pa, now)
            rk.diag[DIAG_LIGHT_ARRIVALS] += 1
            drain_now = cl.dlist[cl.dirty.shape[0]] > 0
            continue
        if p.fast:
            # Under load light ticks are rare: after four pass ends of a group in a row that
            # were not, its next seven are not tried (then one is); a light tick resets the
            # count. (At light loads a group's pass ends hold an admission, a prefill or a
            # completion a few at a time, rarely four in a row.)
            g = cl.ctree[1]
            if cl.cdue[g] == now:  # (an arrival or a fleet event is never light)
                v = cl.light[g]
                if v >= 4 and v < 11:
                    cl.light[g] = v + 1
                else:
                    outcome = LIGHT_NONE
                    if not _light_refused(p, rk, ss, cl, rt, fl, g, now):
                        now, ws, outcome = _light_ticks_call(tabs, now, ws)
                        drain_now = outcome != LIGHT_DONE
                    if outcome != LIGHT_NONE:
                        cl.light[g] = 0
                    else:
                        cl.light[g] = 4 if v >= 11 else v + 1
    # steady members become explicit whenever the loop returns (results, planner, telemetry)
    for k in range(rk.n_run.shape[0]):
        materialize_nb(p, rq, rk, k, rk.rpass[k], cl.last_stamp[k // cl.dp])
    out[0] = ws
    out[1] = now
    return status


# The light ticks are compiled on their own and called through a pointer (``kernels/indirect.py``):
# the loop's module does not hold their body, so LLVM does not optimise and compile it again there.
LIGHT_TICKS = Indirect(_light_ticks, types.Tuple((types.float64, types.float64, types.int64)),
                       ("tabs", "float64", "float64"))
_light_ticks_call = LIGHT_TICKS.call
link(_loop, LIGHT_TICKS)
LOOP = Indirect(_loop, types.int64, ("tables(p, perf, pool, rq, rk, ss, cl, gaps, rt, fl, pa)", "tier",
                                     "array(float64, 1d, C)"))
_loop_call = LOOP.call
link(run_loop_nb, LOOP)
