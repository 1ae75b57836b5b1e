"""Disaggregated prefill/decode serving on SGLang ranks (Dynamo 1.6.1, decision 0370), compiled.

Two pools of the compiled SGLang engine (``kernels/sglang.py``), each with its own request table,
radix caches and queues: the prefill pool's table holds each request's one-token prefill copy (its
ranks keep a finished copy's KV: ``POOL_PREFILL``), the decode pool's the request itself. The
loop (``run_sglang_disagg_nb``) follows the plain-Python reference ``fastsim/sglang_disagg.py``
step by step (the tests compare the two):

* an arrival is routed round robin to a decode rank (or by the decode pool's kv_router,
  ``kernels/sglang_disagg_route.py``, decision 0440), whose queue of requests waiting for their
  reservation it joins; an idle worker attempts one reservation at once;
* a reservation (head of the queue, one an attempt: cached prefix matched and locked, fresh pages
  for the rest) sends the copy to the next prefill rank in turn (or the prefill pool's kv_router's
  choice); a head that did not fit waits for the rank's KV to change (a completion, a retraction,
  a taken prompt's pages freed);
* a prefill pass that finishes a copy holds its KV; after the transfer the request is taken by its
  decode rank at the worker's next pass boundary (prompt materialized and cached, the source
  released), and joins the running batch at the next pass as room allows;
* a decode pass's end attempts one reservation on each rank (not the end of a pass that took no
  time); completions release the next turns of their sessions, which arrive after the workers
  started their next passes.
"""

from typing import NamedTuple

import numpy as np

from fastsim.kernels.codes import DEAD_END, INTERRUPTED, OK, OUTCOME_COMPLETED, OUTCOME_FAILED, \
    OUTCOME_IN_FLIGHT, SIM_CAP
from fastsim.kernels.heap import heap_pop_nb, heap_push_nb
from fastsim.kernels.jit import kernel_noalloc, llvm_inline, loop_kernel
from fastsim.kernels.kvpool import seal_feed_nb
from fastsim.kernels.sglang import (CNT_COMMITTED, CNT_EMIT, CNT_FIN, CNT_HEAP, CNT_NEXTSESS, F_CAP, F_NOW, P_CONC,
                                    P_DP, P_HASHED, P_MAXRUN, P_PAGES, P_PS, P_WORKERS, _alloc_new_nb,
                                    _cache_prefix_nb, _chained_keys_nb, _finish_nb, _pool_gap_nb, _r_push_back,
                                    _w_push_back, rank_pass_nb)
from fastsim.kernels.sglang_disagg_route import (decode_done_nb, prefill_done_nb, publish_hold_nb, route_decode_nb,
                                                 source_released_nb)
from fastsim.kernels.sglang_route import route_nb

# ``Handoff.cnt`` slots: the two pools' round-robin counters, requests done, a Ctrl-C to stop at
# (set from another thread: fastsim/interrupt.py), 1 if some rows' gaps are skipped, completions'
# releases waiting to arrive
G_RRP, G_RRD, G_DONE, G_CTRL_C, G_SKIP, G_BORN = range(6)


class Handoff(NamedTuple):
    """The handoff between the pools, per request (``n``), per decode rank (``R``) and per worker."""
    cnt: np.ndarray        # int64[6], by the G_ slots
    xfer: np.ndarray       # float64[n]: the transfer's duration (ms)
    pre_idx: np.ndarray    # int64[n]: the prefill rank (-1: none yet)
    dec_idx: np.ndarray    # int64[n]: the decode rank (-1: not routed)
    reserved: np.ndarray   # float64[n] (NaN: not yet), and the four below
    held: np.ndarray
    activated: np.ndarray
    released: np.ndarray
    dadmit: np.ndarray
    xend: np.ndarray       # float64[n]: the transfer's end
    pnext: np.ndarray      # int64[n]: the next request waiting for its reservation on the rank
    ph: np.ndarray         # int64[R]: the rank's first request waiting for its reservation
    pt: np.ndarray
    pn: np.ndarray
    xnext: np.ndarray      # int64[n]: the transfers to the rank, by (end, row)
    xprev: np.ndarray
    xh: np.ndarray         # int64[R]
    xt: np.ndarray
    bnext: np.ndarray      # int64[n]: taken requests waiting to join the rank's running batch
    bh: np.ndarray         # int64[R]
    bt: np.ndarray
    bn: np.ndarray
    kvgen: np.ndarray      # int64[R]: changes of the rank's KV (completions, retractions, freed pages)
    failgen: np.ndarray    # int64[R]: the change at which the queue head last failed to fit (-1)
    started_p: np.ndarray  # float64[P]: the start of the worker's pass in flight
    started_d: np.ndarray  # float64[D]
    commit_p: np.ndarray   # int64[P]: the prompt tokens the worker's pass in flight computes
    commit_d: np.ndarray   # int64[D]
    gap_skip: np.ndarray   # bool[n]: the row's inter-token gaps stay out of the pooled statistics (a
                           # capped run's requests left in flight, known on a second run)
    born: np.ndarray       # int64[n]: the requests completions released in this step
    pov: np.ndarray        # int64[n]: kv_router: the overlap (pages) of the prefill rank chosen (-1: none)


def new_handoff(n, n_dec_ranks, n_pre_workers, n_dec_workers, xfer, gap_skip=None):
    """The handoff state of ``n`` requests (``xfer``: each one's transfer time; ``gap_skip``: the
    rows whose gaps the pooled statistics leave out, None: none)."""
    def ints(m, v=-1):
        return np.full(m, v, np.int64)

    def nans():
        return np.full(n, np.nan)

    R = n_dec_ranks
    cnt = np.zeros(6, np.int64)
    cnt[G_SKIP] = gap_skip is not None
    skip = np.zeros(n, np.bool_) if gap_skip is None else np.ascontiguousarray(gap_skip, dtype=np.bool_)
    return Handoff(cnt, np.ascontiguousarray(xfer, dtype=np.float64), ints(n), ints(n),
                   nans(), nans(), nans(), nans(), nans(), np.zeros(n), ints(n), ints(R), ints(R), ints(R, 0),
                   ints(n), ints(n), ints(R), ints(R), ints(n), ints(R), ints(R), ints(R, 0), ints(R, 0), ints(R),
                   np.zeros(n_pre_workers), np.zeros(n_dec_workers), ints(n_pre_workers, 0),
                   ints(n_dec_workers, 0), skip, ints(max(n, 1)), ints(n))


class GapPool(NamedTuple):
    """Pooled inter-token gaps, as ``kernels.sglang.SgScratch`` keeps them (``_pool_gap_nb``)."""
    gaps: np.ndarray       # float64[16]: itl [n, sum, sumsq, min, max, shift], otpu [...], compensations
    itl_hist: np.ndarray
    otpu_hist: np.ndarray


@kernel_noalloc
def pool_gaps_nb(pool, values):
    """Pool ``values`` one by one, in order, as the loop pools the gaps it stamps (the reference's
    pooling: the two agree to the bit)."""
    for i in range(values.shape[0]):
        _pool_gap_nb(pool, values[i], 1)


# (every function below is inlined into the loop: a call passed each table's arrays, some 150 of
# them, and cost more than the small pass it made, decision 0400)


# ---------------------------------------------------------------- the decode rank's queues
@llvm_inline
def _reserve_nb(qp, kp, prp, sp, tp, qd, prd, sd, td, h, rt_p, x, now):
    """One attempt to reserve the KV of the prompt at the head of decode rank ``x``'s queue; the
    request reserved goes to the next prefill rank in turn (a worker's DP ranks in a row), or to the
    prefill router's choice (``rt_p``; None: round robin)."""
    if h.pn[x] == 0 or h.failgen[x] == h.kvgen[x]:  # (a head that did not fit waits for the KV to change)
        return
    row = h.ph[x]
    if _alloc_new_nb(qd, prd, sd, td, x, row, qd.isl[row]) < 0:
        h.failgen[x] = h.kvgen[x]
        return
    h.ph[x] = h.pnext[row]
    if h.ph[x] == -1:
        h.pt[x] = -1
    h.pn[x] -= 1
    h.reserved[row] = now
    if rt_p is None:
        i = h.cnt[G_RRP] % (prp[P_WORKERS] * prp[P_DP])
        h.cnt[G_RRP] += 1
    else:
        ps = prp[P_PS]
        nfull = qp.isl[row] // ps
        _chained_keys_nb(qp, prp, sp, row, nfull)
        # (the aggregated engine's routing, ``kernels/sglang_route.py``; its router has no active-block term)
        i = route_nb(rt_p, tp, sp.keys, nfull, nfull if prp[P_HASHED] else 0, qp.isl[row], ps, kp.gstate, row, now)
        h.pov[row] = rt_p.overlap[i]
    h.pre_idx[row] = i
    qp.rank[row] = i
    _w_push_back(qp, kp, i, row)


@llvm_inline
def _arrive_nb(qp, kp, prp, sp, tp, qd, prd, sd, td, h, rt_p, rt_d, row, now):
    """Request ``row`` is routed to the next decode rank in turn, or to the decode router's choice
    (``rt_d``; None: round robin); returns 1 if it fails there (a prompt larger than the rank's KV),
    else 0."""
    qd.arrival[row] = now
    qd.status[row] = OUTCOME_IN_FLIGHT
    n_dec = prd[P_WORKERS] * prd[P_DP]
    if rt_d is None:
        x = h.cnt[G_RRD] % n_dec
        h.cnt[G_RRD] += 1
    else:
        x = route_decode_nb(rt_d, qd.isl[row] // prd[P_PS], qd.isl[row], prd[P_PS], n_dec, row, now)
    h.dec_idx[row] = x
    if -(-qd.isl[row] // prd[P_PS]) > prd[P_PAGES]:
        qd.status[row] = OUTCOME_FAILED
        qd.terminal[row] = now
        if rt_d is not None:
            decode_done_nb(rt_d, qd.isl[row] // prd[P_PS], row, x)
        return 1
    h.pnext[row] = -1
    if h.pt[x] == -1:
        h.ph[x] = row
    else:
        h.pnext[h.pt[x]] = row
    h.pt[x] = row
    h.pn[x] += 1
    if sd.busy[x // prd[P_DP]] == np.inf:  # an idle worker attempts one reservation (a busy one queues it)
        _reserve_nb(qp, kp, prp, sp, tp, qd, prd, sd, td, h, rt_p, x, now)
    return 0


@llvm_inline
def _transfer_nb(h, row, x, end):
    """Request ``row``'s transfer to decode rank ``x`` ends at ``end``: filed by (end, row)."""
    h.xend[row] = end
    after = h.xt[x]
    while after != -1 and (h.xend[after] > end or (h.xend[after] == end and after > row)):
        after = h.xprev[after]
    before = h.xh[x] if after == -1 else h.xnext[after]
    h.xprev[row] = after
    h.xnext[row] = before
    if after == -1:
        h.xh[x] = row
    else:
        h.xnext[after] = row
    if before == -1:
        h.xt[x] = row
    else:
        h.xprev[before] = row


@llvm_inline
def _activate_nb(qp, kp, prp, sp, tp, qd, prd, sd, td, h, rt_p, x, now):
    """Decode rank ``x`` takes the requests whose transfer has ended (prompt materialized, its
    complete pages cached: a page the rank holds already is freed), each followed by one
    reservation attempt; their sources are released."""
    ps = prd[P_PS]
    while h.xh[x] != -1 and h.xend[h.xh[x]] <= now:
        row = h.xh[x]
        h.xh[x] = h.xnext[row]
        if h.xh[x] == -1:
            h.xt[x] = -1
        else:
            h.xprev[h.xh[x]] = -1
        y = h.pre_idx[row]
        # the source is released by a command its prefill worker applies between passes (its KV
        # is freed before that worker schedules again either way)
        _finish_nb(qp, prp, sp, tp, y, row)
        wp = y // prp[P_DP]
        h.released[row] = now if sp.busy[wp] == np.inf else sp.busy[wp]
        if rt_p is not None:
            source_released_nb(rt_p, y)
            publish_hold_nb(qp, prp, sp, tp, y, row, False, h.released[row])
        isl = qd.isl[row]
        qd.mat[row] = isl
        qd.alloc[row] = -(-isl // ps) * ps
        before = td.free[x]
        _cache_prefix_nb(qd, prd, sd, td, x, row, isl)
        if td.free[x] > before:
            h.kvgen[x] += 1
        h.activated[row] = now
        h.bnext[row] = -1
        if h.bt[x] == -1:
            h.bh[x] = row
        else:
            h.bnext[h.bt[x]] = row
        h.bt[x] = row
        h.bn[x] += 1
        _reserve_nb(qp, kp, prp, sp, tp, qd, prd, sd, td, h, rt_p, x, now)


# ---------------------------------------------------------------- the workers' passes
@llvm_inline
def _prefill_pass_nb(qp, prp, fpp, sp, tp, kp, sdp, tl, perf, h, rt_p, w, now):
    """One pass of prefill worker ``w``'s busy ranks together; True if it started one."""
    dp = prp[P_DP]
    sp.cnt[CNT_EMIT] = 0
    sp.cnt[CNT_FIN] = 0
    c0 = sp.cnt[CNT_COMMITTED]
    end = now
    ran = False
    admitted = False
    for r in range(w * dp, (w + 1) * dp):
        if kp.wn[r] == 0 and kp.rn[r] == 0:
            continue
        ran = True
        e = rank_pass_nb(qp, prp, fpp, sp, tp, kp, r, now, False, perf, sdp, tl, None)
        end = max(end, e)
        if kp.prefilled[r]:
            admitted = True
    if rt_p is not None:  # the ranks' KV events are published when the worker's pass ends
        for r in range(w * dp, (w + 1) * dp):
            seal_feed_nb(tp, r, end)
    h.commit_p[w] = sp.cnt[CNT_COMMITTED] - c0
    for i in range(sp.cnt[CNT_FIN]):  # the copies it finishes (their order does not matter)
        row = sp.fin[i]
        qp.done_next[row] = sp.done_head[w]
        sp.done_head[w] = row
    if ran and (end > now or sp.cnt[CNT_EMIT] > 0 or sp.cnt[CNT_FIN] > 0 or admitted):
        sp.busy[w] = end
        h.started_p[w] = now
        return True
    return False


@llvm_inline
def _decode_pass_nb(qd, prd, fpd, sd, td, kd, sdd, tl, perf, h, spec, w, now):
    """One pass of decode worker ``w``'s busy ranks together, its tokens stamped at the slowest
    one's end; True if it started one. Taken requests join the running batch first, as room allows;
    while some wait for room, or a request waits for its reservation, the rank prefills nothing of
    its own. A rank's prefill (of a retracted request, again) takes no time. ``spec``: an
    ``SgSpec`` with speculative decoding (a request's step of ``b`` tokens adds a gap since its
    last token and ``b - 1`` gaps of 0), else None."""
    dp = prd[P_DP]
    sd.cnt[CNT_EMIT] = 0
    sd.cnt[CNT_FIN] = 0
    c0 = sd.cnt[CNT_COMMITTED]
    end = now
    ran = False
    admitted = False
    for r in range(w * dp, (w + 1) * dp):
        if kd.wn[r] == 0 and kd.rn[r] == 0 and h.bn[r] == 0:
            continue
        ran = True
        n_wait = kd.wn[r]
        while h.bn[r] > 0 and kd.rn[r] < prd[P_MAXRUN]:
            row = h.bh[r]
            h.bh[r] = h.bnext[row]
            if h.bh[r] == -1:
                h.bt[r] = -1
            h.bn[r] -= 1
            h.dadmit[row] = now
            _r_push_back(qd, kd, r, row)
        hold = h.bn[r] > 0 or h.pn[r] > 0
        e = rank_pass_nb(qd, prd, fpd, sd, td, kd, r, now, hold, perf, sdd, tl, spec)
        if kd.prefilled[r]:
            admitted = True
        else:
            end = max(end, e)
        if kd.wn[r] > n_wait:  # a retraction
            h.kvgen[r] += 1
    h.commit_d[w] = sd.cnt[CNT_COMMITTED] - c0
    for i in range(sd.cnt[CNT_EMIT]):
        row = sd.emit[i]
        b = 1
        if spec is not None:
            b = spec.burst[row]
            spec.burst[row] = 1
        m = qd.gen[row]
        lo = m - b + 1  # the index of this step's first token
        if lo == 1:
            qd.first_token[row] = end
        else:
            _log_gap_nb(h, sd, row, end - qd.last_token[row])
        if lo <= 2 and m >= 2:
            qd.second_token[row] = end
        for _ in range(b - 1):
            _log_gap_nb(h, sd, row, 0.0)
        qd.last_token[row] = end
    for i in range(sd.cnt[CNT_FIN]):  # (the chain holds them last first)
        row = sd.fin[i]
        qd.done_next[row] = sd.done_head[w]
        sd.done_head[w] = row
    if ran and (end > now or sd.cnt[CNT_EMIT] > 0 or sd.cnt[CNT_FIN] > 0 or admitted):
        sd.busy[w] = end
        h.started_d[w] = now
        return True
    return False


@llvm_inline
def _log_gap_nb(h, sd, row, gap):
    """Pool one inter-token gap of ``row``, one at a time (unless its gaps are skipped)."""
    if h.cnt[G_SKIP] == 0 or not h.gap_skip[row]:
        _pool_gap_nb(sd, gap, 1)


@llvm_inline
def _work_nb(qp, prp, fpp, sp, tp, kp, sdp, qd, prd, fpd, sd, td, kd, sdd, tl, perf_p, perf_d, h, spec, rt_p,
             now):
    """The idle workers' handoff commands and passes at ``now``, until none can start."""
    P, D, dpd = prp[P_WORKERS], prd[P_WORKERS], prd[P_DP]
    progress = True
    while progress:
        progress = False
        for w in range(D):
            if sd.busy[w] == np.inf:
                for x in range(w * dpd, (w + 1) * dpd):
                    _activate_nb(qp, kp, prp, sp, tp, qd, prd, sd, td, h, rt_p, x, now)
        for w in range(P):
            if sp.busy[w] == np.inf:
                if _prefill_pass_nb(qp, prp, fpp, sp, tp, kp, sdp, tl, perf_p, h, rt_p, w, now):
                    progress = True
        for w in range(D):
            if sd.busy[w] == np.inf:
                if _decode_pass_nb(qd, prd, fpd, sd, td, kd, sdd, tl, perf_d, h, spec, w, now):
                    progress = True


# ---------------------------------------------------------------- the event loop
@loop_kernel
def run_sglang_disagg_nb(qp, prp, fpp, sp, tp, kp, sdp, qd, prd, fpd, sd, td, kd, sdd, tl, lp, perf_p, perf_d, h, spec,
                         rt_p, rt_d):
    """Run the simulation (prefill pool: ``qp .. sdp``, decode pool: ``qd .. sdd``, each as
    ``kernels.sglang.run_sglang_nb`` takes them; ``lp``: the decode pool's ``SgLoop``, for a closed
    loop's sessions; ``h``: the ``Handoff``; ``spec``: the decode pool's ``SgSpec`` with speculative
    decoding, else None: its loop is compiled without it; ``rt_p``, ``rt_d``: the prefill and decode
    pools' kv_routers, ``kernels/sglang_disagg_route.py``, or None for round robin). Returns OK, DEAD_END (nothing can move any more),
    SIM_CAP (the time cap ``fpd[F_CAP]`` stopped it; ``fpd[F_NOW]``: the last event processed) or
    INTERRUPTED (``h.cnt[G_CTRL_C]`` was set)."""
    n = qd.isl.shape[0]
    P, D, dpd = prp[P_WORKERS], prd[P_WORKERS], prd[P_DP]
    inf = np.inf
    cap = fpd[F_CAP]
    while h.cnt[G_DONE] < n:
        if h.cnt[G_CTRL_C] != 0:  # (set from another thread: fastsim/interrupt.py)
            return INTERRUPTED
        now = qd.ready[sd.heap[0]] if sd.cnt[CNT_HEAP] > 0 else inf
        for w in range(P):
            now = min(now, sp.busy[w])
        for w in range(D):
            now = min(now, sd.busy[w])
            if sd.busy[w] == inf:  # an idle worker takes a transfer as it ends
                for x in range(w * dpd, (w + 1) * dpd):
                    if h.xh[x] != -1:
                        now = min(now, h.xend[h.xh[x]])
        if cap >= 0.0 and now > cap:
            return SIM_CAP
        if now == inf:
            return DEAD_END
        fpd[F_NOW] = now
        for w in range(P):  # prefill passes ending: the sources are held, the transfers start
            if sp.busy[w] <= now:
                sp.busy[w] = inf
                row = sp.done_head[w]
                while row != -1:
                    h.held[row] = now
                    if rt_p is not None:
                        prefill_done_nb(rt_p, row, h.pre_idx[row])
                        publish_hold_nb(qp, prp, sp, tp, h.pre_idx[row], row, True, now)
                    _transfer_nb(h, row, h.dec_idx[row], now + h.xfer[row])
                    row = qp.done_next[row]
                sp.done_head[w] = -1
        for w in range(D):  # decode passes ending
            if sd.busy[w] <= now:
                sd.busy[w] = inf
                row = sd.done_head[w]  # (in the order they finished: the chain holds them last first)
                first = -1
                while row != -1:
                    nxt = qd.done_next[row]
                    qd.done_next[row] = first
                    first = row
                    row = nxt
                sd.done_head[w] = -1
                row = first
                while row != -1:
                    h.kvgen[h.dec_idx[row]] += 1
                    if rt_d is not None:
                        decode_done_nb(rt_d, qd.isl[row] // prd[P_PS], row, h.dec_idx[row])
                    qd.terminal[row] = now
                    qd.status[row] = OUTCOME_COMPLETED
                    h.cnt[G_DONE] += 1
                    nt = qd.next_row[row]
                    if nt != -1:
                        qd.ready[nt] = now + qd.delay[nt]
                        h.born[h.cnt[G_BORN]] = nt
                        h.cnt[G_BORN] += 1
                    elif prd[P_CONC] > 0 and sd.cnt[CNT_NEXTSESS] < lp.sess_first.shape[0]:
                        nt = lp.sess_first[sd.cnt[CNT_NEXTSESS]]
                        sd.cnt[CNT_NEXTSESS] += 1
                        qd.ready[nt] = now
                        h.born[h.cnt[G_BORN]] = nt
                        h.cnt[G_BORN] += 1
                    row = qd.done_next[row]
                if h.started_d[w] < now:  # a pass end attempts one reservation on each rank (not the
                    for x in range(w * dpd, (w + 1) * dpd):  # end of a pass that took no time)
                        _reserve_nb(qp, kp, prp, sp, tp, qd, prd, sd, td, h, rt_p, x, now)
        while sd.cnt[CNT_HEAP] > 0 and qd.ready[sd.heap[0]] <= now:
            row = heap_pop_nb(sd.heap, sd.cnt, CNT_HEAP, qd.ready, qd.tie)
            h.cnt[G_DONE] += _arrive_nb(qp, kp, prp, sp, tp, qd, prd, sd, td, h, rt_p, rt_d, row, now)
        _work_nb(qp, prp, fpp, sp, tp, kp, sdp, qd, prd, fpd, sd, td, kd, sdd, tl, perf_p, perf_d, h, spec, rt_p, now)
        # requests a completion releases at once arrive after the workers started their next
        # passes, in (time, session, turn) order
        m = h.cnt[G_BORN]
        if m > 0:
            for a in range(1, m):
                rw = h.born[a]
                b = a - 1
                while b >= 0 and (qd.ready[h.born[b]] > qd.ready[rw]
                                  or (qd.ready[h.born[b]] == qd.ready[rw] and qd.tie[h.born[b]] > qd.tie[rw])):
                    h.born[b + 1] = h.born[b]
                    b -= 1
                h.born[b + 1] = rw
            h.cnt[G_BORN] = 0
            for a in range(m):
                row = h.born[a]
                if qd.ready[row] > now:
                    heap_push_nb(sd.heap, sd.cnt, CNT_HEAP, qd.ready, qd.tie, row)
                else:
                    h.cnt[G_DONE] += _arrive_nb(qp, kp, prp, sp, tp, qd, prd, sd, td, h, rt_p, rt_d, row, now)
            _work_nb(qp, prp, fpp, sp, tp, kp, sdp, qd, prd, fpd, sd, td, kd, sdd, tl, perf_p, perf_d, h, spec, rt_p, now)
    return OK
