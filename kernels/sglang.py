"""The SGLang engine (the SGLang cores of Dynamo 1.6.1 and 1.4.2) and its event loop, compiled.

The same rules as the plain-Python reference ``fastsim/sglang_ref.py`` (which the tests compare it
with), on arrays: the waiting and running queues of each DP rank are doubly linked lists over
request rows, the radix cache is ``kernels/radix.py``. One pass of a rank (``rank_pass_nb``):
the lpm order if asked; a prefill batch under the token budgets (unless the group's
prefill_decode_interval holds prefill back); if anything was admitted, a pure prefill pass whose
finished prompts get their first token at its end; otherwise a decode pass over every running
request, retracting the ones with the fewest output tokens while the next tokens do not fit. The
loop (``run_sglang_nb``) routes arrivals round robin (worker, then its DP rank), runs each idle
worker's ranks together and stamps their tokens at the slowest rank's end, and pools the
inter-token gaps.

Dynamo 1.4.2's older core (``rank_pass_142_nb``, decision 0291): every pass prefills its batch and
then decodes every running request, the ones just prefilled included. The loop runs it when it is
given the 1.4.2 table (``Sg142``) instead of ``None``, a variant compiled apart.
"""

from typing import NamedTuple

import math

import numpy as np

from fastsim.kernels.codes import (ADMIT_OOM, DEAD_END, OK, OUTCOME_COMPLETED, OUTCOME_IN_FLIGHT,
                                   INTERRUPTED, OUTCOME_REJECTED, PLANNER_TICK, RECORDS_FULL, SIM_CAP,
                                   TABLE_FULL, TABLE_GROW, TELEMETRY_FULL)
from fastsim.kernels.heap import heap_pop_nb, heap_push_nb
from fastsim.kernels.jit import inline, inner, llvm_inline, loop_kernel
from fastsim.kernels.perf import decode_time_nb, modeled_ms_nb, prefill_time_nb
from fastsim.kernels.kvpool import seal_feed_nb
from fastsim.kernels.mtp import sample_burst_nb
from fastsim.kernels.radix import chain_key_nb, dec_lock_nb, evict_nb, inc_lock_nb, insert_nb, match_nb
from fastsim.kernels.router import NENTRIES, OVERFLOW, release_prefill_nb
from fastsim.kernels.sglang_route import (enter_queue_nb, must_wait_nb, next_first_token_nb, next_released_nb,
                                          note_first_token_nb, request_done_nb, route_nb, route_released_nb)
from fastsim.kernels.fleet import (NEXTPLAN, NSTARTING, SCHEDPOS, TARGET, apply_schedule_nb, apply_target_nb,
                                   mark_ready_nb, next_fleet_event_nb)
from fastsim.kernels.sglang_fleet import add_worker_seconds_nb, pick_worker_nb, retire_drained_nb
from fastsim.kernels.sglang_telemetry import sample_ticks_nb
from fastsim.kernels.sglang_steady import (DIAG_STEPS, HOLD_MAX, close_run_nb, join_nb, laid_out, materialize_nb, reserve_close,
                                           reserve_exact_nb, restore_nb, take_due_nb, try_enter_nb, unfile_fill_nb)
from fastsim.kernels.stats import dd_index_nb
from fastsim.kernels.timelines import FREE_RECORDS, fold_request, note_token, note_tokens_at, ring_put

# Params indices (int64 array)
# (P_CONC: the closed loop's concurrency, 0 for an open loop; P_SKIP: 1 if some rows' gaps are skipped;
# P_NOCACHE: 1 without prefix caching, the radix cache then never holds a page; P_MML: max_model_len,
# 0 for none; P_POOL: POOL_AGGREGATED, or a disaggregated pool's, kernels/sglang_disagg.py)
P_PS, P_PAGES, P_LPM, P_MAXPREFILL, P_CHUNK, P_CLIP, P_MAXRUN, P_INTERVAL, P_WORKERS, P_DP, P_TBS, \
    P_HASHED, P_CONC, P_SKIP, P_NOCACHE, P_MML, P_POOL = range(17)
# a disaggregated prefill rank's finished requests keep their KV until the decode side takes them;
# every admission on a disaggregated decode rank is a readmission (of a request it retracted)
POOL_AGGREGATED, POOL_PREFILL, POOL_DECODE = range(3)
# FParams indices (float64 array): the new-token ratio's schedule, the speed-ups, the time cap (< 0:
# none) and, written by the loop, the time of the last event it processed
F_INIT, F_MIN, F_STEP, F_SPEED, F_DSPEED, F_CAP, F_NOW = range(7)

# ``SgState.cnt`` slots: heap entries, this pass's emissions and completions, committed prefill
# tokens, requests done, the round-robin counter, the closed loop's next session, readmissions logged,
# and a Ctrl-C to stop at (set from another thread: fastsim/interrupt.py)
CNT_HEAP, CNT_EMIT, CNT_FIN, CNT_COMMITTED, CNT_DONE, CNT_RR, CNT_NEXTSESS, CNT_READMISSIONS, CNT_CTRL_C = range(9)

LPM_FALLBACK = 128
IN_BATCH_CHECK = 32
IN_BATCH_DEPRIORITIZE = 32
RETRACT_DECODE_STEPS = 20


_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


class SgReqs(NamedTuple):
    isl: np.ndarray
    osl: np.ndarray
    session: np.ndarray
    turn: np.ndarray
    delay: np.ndarray
    next_row: np.ndarray   # the session's next turn, -1
    tie: np.ndarray        # arrival order among equal times (session, turn)
    ready: np.ndarray      # float64 arrival time once known
    hash_ptr: np.ndarray
    hash_ids: np.ndarray
    gen: np.ndarray
    mat: np.ndarray
    alloc: np.ndarray
    own: np.ndarray
    cached: np.ndarray
    last: np.ndarray
    rank: np.ndarray
    status: np.ndarray     # 0 pending, 1 in flight, 2 completed
    wprev: np.ndarray
    wnext: np.ndarray
    rprev: np.ndarray
    rnext: np.ndarray
    arrival: np.ndarray
    first_admit: np.ndarray
    first_token: np.ndarray
    second_token: np.ndarray
    last_token: np.ndarray
    terminal: np.ndarray
    reused: np.ndarray
    done_next: np.ndarray  # chain of the rows a worker's pass completed


class Sg142(NamedTuple):
    """What only Dynamo 1.4.2's core keeps; a 1.6.1 run passes ``None`` instead, so that its loop
    is compiled without the 1.4.2 pass (decision 0285's pattern: numba prunes ``is None``
    branches before typing)."""
    reused_most: np.ndarray  # int64[n]: the most reused over a request's admissions (each chunk is one)


class SgRanks(NamedTuple):
    wh: np.ndarray
    wt: np.ndarray
    wn: np.ndarray
    rh: np.ndarray
    rt: np.ndarray
    rn: np.ndarray
    ratio: np.ndarray
    prefilled: np.ndarray
    rejects: np.ndarray    # int64[R]: waiting rows over max_model_len, rejected at the rank's next pass
    gstate: np.ndarray     # int64[R]: every rank active (kernels/fleet.py's ACTIVE), as kv_router reads them


class SgScratch(NamedTuple):
    keys: np.ndarray       # uint64: one request's page keys
    rows: np.ndarray       # int64: rows of a pass (can_run, then fresh)
    rows2: np.ndarray      # int64: retracted / completed / lpm order
    score: np.ndarray      # int64: lpm sort keys
    emit: np.ndarray       # int64: rows that got a token in the current group pass
    fin: np.ndarray        # int64: rows that completed in the current group pass
    heap: np.ndarray       # arrival heap
    cnt: np.ndarray        # int64 counters, by the CNT_ slots below
    busy: np.ndarray       # float64[W] end of the worker's pass in flight (inf: idle)
    rounds: np.ndarray     # int64[W] prefill_decode_interval countdown
    done_head: np.ndarray  # int64[W]
    gaps: np.ndarray       # float64[16]: itl [n, sum, sumsq, min, max, shift], otpu [...], compensations
    itl_hist: np.ndarray
    otpu_hist: np.ndarray
    dpnext: np.ndarray     # int64[W]
    rlog_row: np.ndarray   # readmissions after a retraction: row, time, reused tokens
    rlog_ms: np.ndarray
    rlog_reused: np.ndarray


class SgSpec(NamedTuple):
    """Speculative decoding (MTP) on the SGLang engine (decision 0279); other runs pass ``None``
    instead, so that their loop is compiled without it."""
    thresholds: np.ndarray  # uint64[nextn]: the draft positions' acceptance thresholds (kernels/mtp.py)
    streams: np.ndarray     # uint32[ranks, mtp.ROW]: each rank's generator
    burst: np.ndarray       # int64[n]: tokens the row took in the pass just run (1 otherwise)


class SgLoop(NamedTuple):
    """What a run under a time cap or in a closed loop needs; other runs pass ``None`` instead, so
    that their loop is compiled without that code (decision 0285's pattern: adding it to the one
    loop made 1.6.1's open loop 10-20% slower, decision 0292)."""
    gap_skip: np.ndarray     # bool[n]: the row's inter-token gaps stay out of the pooled statistics (a
                             # capped run's requests left in flight, known on a second run)
    pass_commit: np.ndarray  # int64[W]: prompt tokens the worker's pass in flight commits when it ends
    sess_first: np.ndarray   # int64[sessions]: each session's first turn (a closed loop starts them in order)


# ---------------------------------------------------------------- page keys
@inline
def _mix_nb(h, v):
    h ^= (v + np.uint64(0x9E3779B97F4A7C15) + (h << np.uint64(6)) + (h >> np.uint64(2)))
    h *= np.uint64(0xBF58476D1CE4E5B9)
    return h ^ (h >> np.uint64(31))


@inline
def page_key_nb(q, pr, row, p):
    """Content key of page ``p`` of request ``row`` (see ``fastsim/sglang_pages.py``)."""
    ps = pr[P_PS]
    tbs = pr[P_TBS]
    isl = q.isl[row]
    h = np.uint64(0)
    t = p * ps
    end = t + ps
    while t < end:
        if t < isl:
            if pr[P_HASHED]:
                tok = np.uint64(q.hash_ids[q.hash_ptr[row] + t // tbs]) & np.uint64(0xFFFFFFFF)
                run_end = min(end, isl, (t // tbs + 1) * tbs)
                h = _mix_nb(_mix_nb(h, np.uint64(0x9E3779B97F4A7C15) ^ tok), np.uint64(run_end - t))
            else:
                run_end = min(end, isl)
                h = _mix_nb(_mix_nb(h, np.uint64(0xC2B2AE3D27D4EB4F) ^ np.uint64(row)), np.uint64(run_end - t))
                h = _mix_nb(h, np.uint64(t))
        else:
            run_end = end
            h = _mix_nb(_mix_nb(h, np.uint64(0x165667B19E3779F9) ^ np.uint64(row)), np.uint64(t))
            h = _mix_nb(h, np.uint64(run_end - t))
        t = run_end
    return h


@inline
def _keys_nb(q, pr, s, row, npages):
    for p in range(npages):
        s.keys[p] = page_key_nb(q, pr, row, p)


# ---------------------------------------------------------------- queues
@inline
def _push_back(prev, nxt, head, tail, count, r, row):
    """Append ``row`` to list ``r`` of a doubly linked queue (links ``prev``/``nxt`` per row;
    ``head``, ``tail``, ``count`` per list)."""
    prev[row] = tail[r]
    nxt[row] = -1
    if tail[r] == -1:
        head[r] = row
    else:
        nxt[tail[r]] = row
    tail[r] = row
    count[r] += 1


@inline
def _w_push_back(q, k, r, row):
    _push_back(q.wprev, q.wnext, k.wh, k.wt, k.wn, r, row)


@inline
def _w_push_front(q, k, r, row):
    q.wnext[row] = k.wh[r]
    q.wprev[row] = -1
    if k.wh[r] == -1:
        k.wt[r] = row
    else:
        q.wprev[k.wh[r]] = row
    k.wh[r] = row
    k.wn[r] += 1


@inline
def _w_pop_front(q, k, r):
    row = k.wh[r]
    k.wh[r] = q.wnext[row]
    if k.wh[r] == -1:
        k.wt[r] = -1
    else:
        q.wprev[k.wh[r]] = -1
    k.wn[r] -= 1
    return row


@inline
def _unlink(prev, nxt, head, tail, count, r, row):
    """Take ``row`` out of list ``r`` of a doubly linked queue (as ``_push_back``'s)."""
    a, b = prev[row], nxt[row]
    if a == -1:
        head[r] = b
    else:
        nxt[a] = b
    if b == -1:
        tail[r] = a
    else:
        prev[b] = a
    count[r] -= 1


@inline
def _w_remove(q, k, r, row):
    _unlink(q.wprev, q.wnext, k.wh, k.wt, k.wn, r, row)


@inline
def _r_push_back(q, k, r, row):
    _push_back(q.rprev, q.rnext, k.rh, k.rt, k.rn, r, row)


@inline
def _r_remove(q, k, r, row):
    _unlink(q.rprev, q.rnext, k.rh, k.rt, k.rn, r, row)


# ---------------------------------------------------------------- KV lease operations
@inline
def _ceil(t, ps):
    return -(-t // ps) * ps


@inner
def _alloc_new_nb(q, pr, s, t, r, row, end):
    ps = pr[P_PS]
    npg = end // ps
    _keys_nb(q, pr, s, row, npg)
    m, last = match_nb(t, r, s.keys, npg, True, False)
    need = -(-end // ps) - m
    if need > t.free[r] + t.evictable[r]:
        dec_lock_nb(t, r, last)
        return -1
    if need > t.free[r]:
        evict_nb(t, r, need - t.free[r])
    t.free[r] -= need
    q.own[row] = need
    q.cached[row] = m * ps
    q.last[row] = last
    return m * ps


@inner
def _extend_nb(q, pr, t, r, row, end):
    ps = pr[P_PS]
    new = -(-end // ps) - (q.cached[row] // ps + q.own[row])
    if new > t.free[r] + t.evictable[r]:
        return -1
    if new > t.free[r]:
        evict_nb(t, r, new - t.free[r])
    t.free[r] -= new
    q.own[row] += new
    return q.mat[row]


@inline
def _cache_prefix_nb(q, pr, s, t, r, row, upto):
    ps = pr[P_PS]
    aligned = upto // ps * ps
    if aligned <= q.cached[row] or pr[P_NOCACHE]:
        return
    first, npg = q.cached[row] // ps, aligned // ps
    for p in range(first, npg):
        s.keys[p] = page_key_nb(q, pr, row, p)
    old = q.last[row]
    last, gained = insert_nb(t, r, old, s.keys, first, npg, True)
    if last != old:
        inc_lock_nb(t, r, last)
    moved = npg - first
    q.own[row] -= moved
    t.free[r] += moved - gained
    if last != old:
        dec_lock_nb(t, r, old)
    q.last[row] = last
    q.cached[row] = aligned


@llvm_inline
def _finish_nb(q, pr, s, t, r, row):
    ps = pr[P_PS]
    seq = q.isl[row] + q.gen[row]
    complete = min(seq, q.mat[row]) // ps * ps
    npg = complete // ps
    held = q.cached[row] // ps + q.own[row]
    t.free[r] += held - npg
    q.own[row] -= held - npg
    if pr[P_NOCACHE]:  # (no prefix caching: the complete pages are freed too)
        t.free[r] += q.own[row]
        q.own[row] = 0
    elif complete > q.cached[row]:
        first = q.cached[row] // ps
        for p in range(first, npg):
            s.keys[p] = page_key_nb(q, pr, row, p)
        _, gained = insert_nb(t, r, q.last[row], s.keys, first, npg, True)
        t.free[r] += (npg - first) - gained
        q.own[row] -= npg - first
    dec_lock_nb(t, r, q.last[row])
    q.last[row] = -1


@inner
def _release_nb(q, t, r, row):
    t.free[r] += q.own[row]
    q.own[row] = 0
    dec_lock_nb(t, r, q.last[row])
    q.last[row] = -1
    q.mat[row] = 0
    q.alloc[row] = 0
    q.cached[row] = 0


# ---------------------------------------------------------------- one pass of a rank
@inner
def _lpm_nb(q, pr, s, t, k, r):
    """Longest-prefix-match order of the waiting queue (stable; near-duplicate heads last)."""
    n = k.wn[r]
    if n > LPM_FALLBACK or n == 0:
        return
    ps = pr[P_PS]
    dup_pages = -(-IN_BATCH_DEPRIORITIZE // ps)
    i = 0
    row = k.wh[r]
    while row != -1:
        seq = q.isl[row] + q.gen[row]
        npg = seq // ps
        _keys_nb(q, pr, s, row, npg)
        m, _ = match_nb(t, r, s.keys, npg, False, True)
        m *= ps
        dep = 0
        if m <= IN_BATCH_CHECK and seq >= dup_pages * ps:
            # the head's chained content key; seen before in this queue -> deprioritised
            h = np.uint64(0)
            for p in range(dup_pages):
                h = _mix_nb(h, s.keys[p])
            for j in range(i):
                if s.rows2[n + j] == 1 and s.score[n + j] == np.int64(h):
                    dep = 1
                    break
            s.rows2[n + i] = 1
            s.score[n + i] = np.int64(h)
        else:
            s.rows2[n + i] = 0
        s.rows[i] = row
        # sort key: deprioritised last, longest match first, queue order to break ties
        s.score[i] = (dep * (1 << 40) - m) * (1 << 20) + i
        i += 1
        row = q.wnext[row]
    for a in range(1, n):  # insertion sort of (score, row); at most 128 of them
        sc, rw = s.score[a], s.rows[a]
        b = a - 1
        while b >= 0 and s.score[b] > sc:
            s.score[b + 1] = s.score[b]
            s.rows[b + 1] = s.rows[b]
            b -= 1
        s.score[b + 1] = sc
        s.rows[b + 1] = rw
    k.wh[r] = -1
    k.wt[r] = -1
    k.wn[r] = 0
    for j in range(n):
        _w_push_back(q, k, r, s.rows[j])


@inline
def _growth_nb(q, pr, k, r):
    """(KV tokens the running requests' next tokens need beyond their pages, their total length)."""
    ps = pr[P_PS]
    g = 0
    total = 0
    row = k.rh[r]
    while row != -1:
        seq = q.isl[row] + q.gen[row]
        total += seq
        if q.osl[row] - q.gen[row] > 0:
            need = _ceil(seq + 1, ps) - q.alloc[row]
            if need > 0:
                g += need
        row = q.rnext[row]
    return g, total


@inline
def _growth_burst_nb(q, pr, k, r, max_burst):
    """``_growth_nb`` for steps of up to ``max_burst`` tokens (speculative decoding): the pages of
    each request's largest possible step."""
    ps = pr[P_PS]
    g = 0
    total = 0
    row = k.rh[r]
    while row != -1:
        seq = q.isl[row] + q.gen[row]
        total += seq
        rem = q.osl[row] - q.gen[row]
        if rem > 0:
            need = _ceil(seq + min(max_burst, rem), ps) - q.alloc[row]
            if need > 0:
                g += need
        row = q.rnext[row]
    return g, total


@inline
def _decode_growth_nb(q, pr, k, r, spec):
    if spec is None:
        return _growth_nb(q, pr, k, r)
    return _growth_burst_nb(q, pr, k, r, spec.thresholds.shape[0] + 1)


@inline
def _append_token_nb(q, pr, t, r, row):
    ps = pr[P_PS]
    if q.mat[row] % ps == 0:
        t.free[r] -= 1
        q.own[row] += 1
    if q.isl[row] + q.gen[row] + 1 > q.alloc[row]:
        q.alloc[row] += ps
    q.mat[row] += 1
    q.gen[row] += 1


@inline
def _emit_nb(s, row):
    s.emit[s.cnt[CNT_EMIT]] = row
    s.cnt[CNT_EMIT] += 1


@inline
def _fin_nb(s, row):
    s.fin[s.cnt[CNT_FIN]] = row
    s.cnt[CNT_FIN] += 1


@inner
def _burst_tokens_nb(q, pr, s, t, k, r, spec):
    """A decode step's tokens with speculative decoding: each running request, in order, draws
    its step from the rank's generator (clipped to what it may still generate) and takes its
    tokens one by one, caching each completed page, until it completes (decision 0279)."""
    row = k.rh[r]
    while row != -1:
        nxt = q.rnext[row]
        b = min(sample_burst_nb(spec.thresholds, spec.streams, r), q.osl[row] - q.gen[row])
        spec.burst[row] = b
        for _ in range(b):
            _append_token_nb(q, pr, t, r, row)
            if q.gen[row] >= q.osl[row]:
                break
            _cache_prefix_nb(q, pr, s, t, r, row, q.mat[row])
        _emit_nb(s, row)
        if q.gen[row] >= q.osl[row]:
            _r_remove(q, k, r, row)
            _fin_nb(s, row)
        row = nxt


@llvm_inline
def rank_pass_nb(q, pr, fp, s, t, k, r, now, defer, perf, sd, tl, spec):
    """One pass of rank ``r`` at ``now``; returns its end time. A steady rank
    (``kernels/sglang_steady.py``) decodes its members by their sums; ``tl`` takes the token runs
    of the members that leave; ``spec``: an ``SgSpec`` with speculative decoding, else None."""
    ps = pr[P_PS]
    if pr[P_LPM]:
        _lpm_nb(q, pr, s, t, k, r)
    if k.rejects[r] > 0:
        _reject_nb(q, pr, s, k, r)
    ratio = k.ratio[r]
    n = 0
    total_isl = 0
    total_prefix = 0
    steady = sd.on[r] != 0
    if not defer:
        exact = True
        if k.wn[r] == 0:
            reserved = 0.0  # (nothing to admit: the reservation is not read)
        elif steady:
            # the members' sum of remaining outputs stands in for the sum of their rounded
            # reservations, unless a budget check comes out too close to tell (reserve_close)
            reserved = sd.rsum[r] * ratio
            exact = False
        else:
            reserved = reserve_exact_nb(sd, q, k, r, pr[P_CLIP], ratio)
        avail = float((t.free[r] + t.evictable[r]) * ps)
        rem_total = avail - reserved
        nsub = 0
        rem_input = float(pr[P_MAXPREFILL])
        rem_chunk = float(pr[P_CHUNK])
        slots = max(pr[P_MAXRUN] - k.rn[r], 0)
        while n < slots and k.wn[r] > 0:
            row = _w_pop_front(q, k, r)
            seq = q.isl[row] + q.gen[row]
            cached = 0
            if q.mat[row] == 0:
                match_len = seq if q.osl[row] == 0 else seq - 1
                npg = min(match_len // ps, seq // ps)
                _keys_nb(q, pr, s, row, npg)
                m, _ = match_nb(t, r, s.keys, npg, False, True)
                cached = m * ps
            start = max(q.mat[row], cached)
            extend = seq - start
            if extend == 0 and q.mat[row] > 0:
                _w_push_front(q, k, r, row)
                break
            if extend <= rem_chunk:
                chunk = extend
            else:
                chunk = int(rem_chunk) // ps * ps
                if chunk == 0:
                    _w_push_front(q, k, r, row)
                    break
                chunk = min(chunk, extend)
            charged = float(_ceil(chunk, ps))
            out_res = 0 if chunk < extend else min(q.osl[row] - q.gen[row], pr[P_CLIP])
            if not exact and reserve_close(charged + out_res, rem_total, avail, reserved, k.rn[r], nsub):
                reserved = reserve_exact_nb(sd, q, k, r, pr[P_CLIP], ratio)
                rem_total = avail - reserved
                for j in range(nsub):
                    rem_total -= sd.subs[j]
                exact = True
            if charged + out_res >= rem_total or charged > rem_input or charged > rem_chunk:
                _w_push_front(q, k, r, row)
                break
            end = start + chunk
            fresh = q.mat[row] == 0
            if q.mat[row] > 0:
                prefix = _extend_nb(q, pr, t, r, row, end)
            else:
                prefix = _alloc_new_nb(q, pr, s, t, r, row, end)
                if prefix >= 0:
                    prefix = min(prefix, start)
            if prefix < 0:
                # its cached prefix, counted as evictable, is locked for it: the pages do not fit
                # after all; it waits at the head of the queue and the batch ends (decisions 0278, 0295)
                _w_push_front(q, k, r, row)
                break
            q.mat[row] = end
            q.alloc[row] = _ceil(end, ps)
            s.cnt[CNT_COMMITTED] += end - prefix  # committed prefill tokens
            decode_pool = pr[P_POOL] == POOL_DECODE
            if math.isnan(q.first_admit[row]) and not decode_pool:
                q.first_admit[row] = now
                q.reused[row] = prefix
            elif (fresh and q.gen[row] > 0) or decode_pool:
                # a retracted request admitted again (its first chunk after the retraction)
                i = s.cnt[CNT_READMISSIONS]
                if i < s.rlog_row.shape[0]:
                    s.rlog_row[i] = row
                    s.rlog_ms[i] = now
                    s.rlog_reused[i] = prefix
                s.cnt[CNT_READMISSIONS] = i + 1
            total_isl += end
            total_prefix += prefix
            rem_total -= charged + out_res
            if not exact:
                sd.subs[nsub] = charged + out_res
                nsub += 1
            rem_input -= charged
            rem_chunk -= charged
            s.rows[n] = row
            n += 1
            if rem_chunk <= 0.0:
                break
    prefill = 0.0
    if n > 0:
        new = total_isl // n - total_prefix // n
        if new > 0:
            prefill = modeled_ms_nb(prefill_time_nb(perf, n * new), fp[F_SPEED])
    # partly prefilled requests go back to the front; the others are fresh
    nf = 0
    for i in range(n):
        row = s.rows[i]
        if q.mat[row] < q.isl[row] + q.gen[row]:
            _cache_prefix_nb(q, pr, s, t, r, row, q.mat[row])
            _w_push_front(q, k, r, row)
        else:
            s.rows[nf] = row
            nf += 1
    k.prefilled[r] = 1 if n > 0 else 0
    start_t = now + prefill
    end_t = start_t
    nret = 0
    est = 1.0  # (the new-token ratio re-estimated at a retraction)
    fin0 = s.cnt[CNT_FIN]  # this pass's completions are cached after its tokens, in order
    if n > 0:
        _first_tokens_nb(q, pr, s, t, k, r, nf)
        if steady:  # the new running requests join the members, or the rank turns explicit
            joined = True
            for i in range(nf):
                row = s.rows[i]
                if q.osl[row] - q.gen[row] > 0 and not laid_out(q, ps, row):
                    joined = False
            if joined:
                for i in range(nf):
                    row = s.rows[i]
                    if q.osl[row] - q.gen[row] > 0:
                        join_nb(sd, q, ps, r, row)
            else:
                # (the new ones are explicit already: the members before them are restored)
                materialize_nb(sd, q, k, tl, ps, r)
                steady = False
    else:
        idle = defer and k.rn[r] == 0
        if steady:
            e = _steady_step_nb(q, pr, fp, s, t, k, sd, tl, r, start_t, perf)
            if e >= 0.0:
                end_t = e
            else:  # a retraction is coming: the members are explicit again
                steady = False
    if n == 0 and not steady:
        # decode step over the running requests
        row = k.rh[r]
        while row != -1:  # requests with nothing left (zero-output) complete now
            nxt = q.rnext[row]
            if q.osl[row] - q.gen[row] <= 0:
                _r_remove(q, k, r, row)
                _fin_nb(s, row)
            row = nxt
        grow, total = _decode_growth_nb(q, pr, k, r, spec)
        while (t.free[r] + t.evictable[r]) * ps < grow and k.rn[r] > 1:
            victim = -1
            row = k.rh[r]
            while row != -1:
                if victim == -1 or q.gen[row] < q.gen[victim]:
                    victim = row
                row = q.rnext[row]
            _r_remove(q, k, r, victim)
            _release_nb(q, t, r, victim)
            s.rows2[nret] = victim
            nret += 1
            grow, total = _decode_growth_nb(q, pr, k, r, spec)
        if nret > 0:
            est = _retraction_ratio_nb(q, k, r)
        g = grow // ps
        if g > t.free[r]:
            evict_nb(t, r, g - t.free[r])
        if k.rn[r] > 0 and g <= t.free[r]:
            cnt = k.rn[r]
            active = min(total, pr[P_PAGES] * ps)
            end_t = start_t + modeled_ms_nb(
                decode_time_nb(perf, active, total // cnt, pr[P_PAGES] * ps), fp[F_SPEED] * fp[F_DSPEED])
            if spec is not None:
                _burst_tokens_nb(q, pr, s, t, k, r, spec)
            else:
                row = k.rh[r]
                while row != -1:
                    nxt = q.rnext[row]
                    _append_token_nb(q, pr, t, r, row)
                    _emit_nb(s, row)
                    if q.gen[row] >= q.osl[row]:
                        _r_remove(q, k, r, row)
                        _fin_nb(s, row)
                    else:
                        _cache_prefix_nb(q, pr, s, t, r, row, q.mat[row])
                    row = nxt
            sd.dec[r] = 1  # (a decode step of the rank: its tokens are the next slot of its ring)
            sd.step[r] += 1
    if pr[P_POOL] != POOL_PREFILL:  # (a disaggregated prefill rank holds them for the transfer)
        for i in range(fin0, s.cnt[CNT_FIN]):
            _finish_nb(q, pr, s, t, r, s.fin[i])
    if n == 0:
        for i in range(nret):  # SGLang re-queues retracted requests at the back
            _w_push_back(q, k, r, s.rows2[i])
        if nret > 0:
            k.ratio[r] = est
        elif not idle:
            k.ratio[r] = max(k.ratio[r] - fp[F_STEP], fp[F_MIN])
    if sd.enabled[0] and not steady and k.rn[r] > 0:
        if sd.hold[r] > 0:
            sd.hold[r] -= 1
        elif not try_enter_nb(sd, q, k, ps, r):
            sd.hold[r] = sd.holdlen[r]
            sd.holdlen[r] = min(2 * sd.holdlen[r], HOLD_MAX)
    return end_t


@llvm_inline
def _retraction_ratio_nb(q, k, r):
    """The new-token ratio SGLang's ``retract_decode`` re-estimates from the requests rank ``r``
    still runs right after its retractions, before the step: their output tokens plus 20 steps
    each, over the sum of their output lengths plus one. The requests that complete in that very
    step count too (decision 0476)."""
    decoded = 0
    max_new = 0
    row = k.rh[r]
    while row != -1:
        decoded += q.gen[row]
        max_new += q.osl[row]
        row = q.rnext[row]
    if max_new == 0:
        return 1.0
    return min(1.0, (decoded + RETRACT_DECODE_STEPS * k.rn[r]) / (max_new + 1))


@llvm_inline
def _steady_step_nb(q, pr, fp, s, t, k, sd, tl, r, start_t, perf):
    """The decode step of steady rank ``r`` from ``start_t``, by its members' sums: the same as the
    pass-at-a-time decode step when nothing is retracted (every member one token, new pages by
    count, filled pages into the cache in running order, the last tokens' requests complete in
    running order). Returns its end time, or -1.0 when the next tokens do not fit (a retraction:
    the members are made explicit first and the caller runs the step one request at a time)."""
    ps = pr[P_PS]
    D = sd.step[r]
    need = sd.acnt[r * ps + D % ps]  # members whose token starts a page
    if (t.free[r] + t.evictable[r]) * ps < need * ps and k.rn[r] > 1:
        materialize_nb(sd, q, k, tl, ps, r)
        return -1.0
    if need > t.free[r]:
        evict_nb(t, r, need - t.free[r])
    if need > t.free[r] or k.rn[r] == 0:  # (one request that does not fit, or none: no token this pass)
        return start_t
    cnt = k.rn[r]
    total = sd.tsum[r]
    end_t = start_t + modeled_ms_nb(
        decode_time_nb(perf, min(total, pr[P_PAGES] * ps), total // cnt, pr[P_PAGES] * ps),
        fp[F_SPEED] * fp[F_DSPEED])
    t.free[r] -= need
    # the emissions in running order: the settled members (one marker), then the fresh ones
    settled = cnt - sd.nfresh[r]
    sd.settled[r] = settled
    if settled > 0:
        _emit_nb(s, -1 - r)
    row = sd.fresh[r]
    while row != -1:
        q.gen[row] += 1
        _emit_nb(s, row)
        row = q.rnext[row]
    m = take_due_nb(sd, q, r, D)
    # filled pages into the cache, in running order (the members completing now cache theirs when
    # they finish)
    row = sd.ihead[r * ps + D % ps]
    while row != -1:
        if sd.base[row] + q.osl[row] - sd.g0[row] - 1 != D:
            mat = q.isl[row] + sd.g0[row] + D + 1 - sd.base[row]
            q.mat[row] = mat
            q.own[row] = -(-mat // ps) - q.cached[row] // ps
            _cache_prefix_nb(q, pr, s, t, r, row, mat)
        row = sd.inext[row]
    sd.tsum[r] += cnt
    sd.rsum[r] -= cnt
    for i in range(m):  # the completions, in running order
        row = sd.due[i]
        restore_nb(sd, q, ps, row, D + 1)
        close_run_nb(sd, tl, row, r, D + 1)
        unfile_fill_nb(sd, q, ps, r, row)
        sd.acnt[r * ps + (sd.base[row] - q.isl[row] - sd.g0[row]) % ps] -= 1
        sd.tsum[r] -= q.isl[row] + q.osl[row]
        _r_remove(q, k, r, row)
        _fin_nb(s, row)  # (its base stays set until the loop has stamped its last token)
    sd.fresh[r] = -1
    sd.nfresh[r] = 0
    sd.dec[r] = 1
    sd.step[r] = D + 1
    sd.diag[DIAG_STEPS] += 1
    return end_t


@llvm_inline
def rank_pass_142_nb(q, pr, fp, s, t, k, r, now, perf, v, sd, spec):
    """One pass of rank ``r`` at ``now`` under Dynamo 1.4.2's SGLang core: a prefill batch, then
    a decode step over every running request, those whose prompt the batch finished included
    (their first token), timed after the prefill. Admission matches no cached prefix first: a
    request is charged its whole remaining prompt (in pages, plus its clipped output when the
    prompt goes whole) and goes whole when it fits the configured chunk size. Retracted requests
    go back to the front of the waiting queue and reset the new-token ratio, which decays after
    every pass. ``spec``: an ``SgSpec`` with speculative decoding (every running request draws its
    step, the ones just prefilled included), else None. Returns the pass's end time, or -1.0 when
    an admission ran out of KV."""
    ps = pr[P_PS]
    if pr[P_LPM]:
        _lpm_nb(q, pr, s, t, k, r)
    if k.rejects[r] > 0:
        _reject_nb(q, pr, s, k, r)
    ratio = k.ratio[r]
    n = 0
    total_isl = 0
    total_prefix = 0
    reserved = 0.0
    row = k.rh[r] if k.wn[r] > 0 else -1  # (nothing to admit: the reservation is not read)
    while row != -1:
        reserved += min(q.osl[row] - q.gen[row], pr[P_CLIP]) * ratio
        row = q.rnext[row]
    rem_total = float((t.free[r] + t.evictable[r]) * ps) - reserved
    rem_input = float(pr[P_MAXPREFILL])
    rem_chunk = float(pr[P_CHUNK])
    slots = max(pr[P_MAXRUN] - k.rn[r], 0)
    while n < slots and k.wn[r] > 0:
        row = _w_pop_front(q, k, r)
        extend = q.isl[row] + q.gen[row] - q.mat[row]
        if extend == 0:
            _w_push_front(q, k, r, row)
            break
        if extend <= pr[P_CHUNK]:
            chunk = extend
        else:
            chunk = int(rem_chunk) // ps * ps
            if chunk == 0:
                _w_push_front(q, k, r, row)
                break
            chunk = min(chunk, extend)
        charged = float(_ceil(chunk, ps))
        out_res = 0 if chunk < extend else min(q.osl[row] - q.gen[row], pr[P_CLIP])
        if charged + out_res >= rem_total or charged > rem_input or charged > rem_chunk:
            _w_push_front(q, k, r, row)
            break
        end = q.mat[row] + chunk
        fresh = q.mat[row] == 0
        if fresh:
            prefix = _alloc_new_nb(q, pr, s, t, r, row, end)
        else:
            prefix = _extend_nb(q, pr, t, r, row, end)
        if prefix < 0:
            return -1.0
        q.mat[row] = end
        q.alloc[row] = _ceil(end, ps)
        s.cnt[CNT_COMMITTED] += end - prefix
        if math.isnan(q.first_admit[row]):
            q.first_admit[row] = now
            q.reused[row] = prefix
        elif fresh and q.gen[row] > 0:  # a retracted request admitted again
            i = s.cnt[CNT_READMISSIONS]
            if i < s.rlog_row.shape[0]:
                s.rlog_row[i] = row
                s.rlog_ms[i] = now
                s.rlog_reused[i] = prefix
            s.cnt[CNT_READMISSIONS] = i + 1
        v.reused_most[row] = max(v.reused_most[row], prefix)
        total_isl += end
        total_prefix += prefix
        rem_total -= charged + out_res
        rem_input -= charged
        rem_chunk -= charged
        s.rows[n] = row
        n += 1
        if rem_chunk <= 0.0:
            break
    prefill = 0.0
    if n > 0:
        new = total_isl // n - total_prefix // n
        if new > 0:
            prefill = modeled_ms_nb(prefill_time_nb(perf, n * new), fp[F_SPEED])
    for i in range(n):  # a partly prefilled request goes back to the front; the others run
        row = s.rows[i]
        if q.mat[row] < q.isl[row] + q.gen[row]:
            _cache_prefix_nb(q, pr, s, t, r, row, q.mat[row])
            _w_push_front(q, k, r, row)
        else:
            _r_push_back(q, k, r, row)
    k.prefilled[r] = 1 if n > 0 else 0  # (a pass that only admitted is followed by the next at once)
    fin0 = s.cnt[CNT_FIN]
    emit0 = s.cnt[CNT_EMIT]
    end_t, nret = _decode_step_nb(q, pr, fp, s, t, k, r, now + prefill, perf, spec)
    if s.cnt[CNT_EMIT] > emit0:  # a decode step of the rank: its tokens are the next slot of its ring
        sd.dec[r] = 1
        sd.step[r] += 1
    for i in range(fin0, s.cnt[CNT_FIN]):
        _finish_nb(q, pr, s, t, r, s.fin[i])
    for i in range(nret - 1, -1, -1):  # retracted requests go to the front, in retraction order
        _w_push_front(q, k, r, s.rows2[i])
    if nret > 0:
        k.ratio[r] = fp[F_INIT]
    k.ratio[r] = max(k.ratio[r] - fp[F_STEP], fp[F_MIN])
    return end_t


@llvm_inline
def _decode_step_nb(q, pr, fp, s, t, k, r, start_t, perf, spec):
    """The decode step that ends 1.4.2's pass, on rank ``r`` from ``start_t``: the requests with
    nothing left to generate complete; while the next tokens do not fit (free + evictable pages),
    the running request with the fewest output tokens (the first of them) is retracted (into
    ``s.rows2``); then one token to every running request. Returns (end time, retracted count).
    The same rules as the decode branch of 1.6.1's ``rank_pass_nb``, which keeps its own copy
    inline: calling this function from there made 1.6.1's loop 30% slower (decision 0291)."""
    ps = pr[P_PS]
    end_t = start_t
    nret = 0
    row = k.rh[r]
    while row != -1:  # requests with nothing left (zero-output) complete now
        nxt = q.rnext[row]
        if q.osl[row] - q.gen[row] <= 0:
            _r_remove(q, k, r, row)
            _fin_nb(s, row)
        row = nxt
    grow, total = _decode_growth_nb(q, pr, k, r, spec)
    while (t.free[r] + t.evictable[r]) * ps < grow and k.rn[r] > 1:
        victim = -1
        row = k.rh[r]
        while row != -1:
            if victim == -1 or q.gen[row] < q.gen[victim]:
                victim = row
            row = q.rnext[row]
        _r_remove(q, k, r, victim)
        _release_nb(q, t, r, victim)
        s.rows2[nret] = victim
        nret += 1
        grow, total = _decode_growth_nb(q, pr, k, r, spec)
    g = grow // ps
    if g > t.free[r]:
        evict_nb(t, r, g - t.free[r])
    if k.rn[r] > 0 and g <= t.free[r]:
        cnt = k.rn[r]
        active = min(total, pr[P_PAGES] * ps)
        end_t = start_t + modeled_ms_nb(
            decode_time_nb(perf, active, total // cnt, pr[P_PAGES] * ps), fp[F_SPEED] * fp[F_DSPEED])
        if spec is not None:
            _burst_tokens_nb(q, pr, s, t, k, r, spec)
        else:
            row = k.rh[r]
            while row != -1:
                nxt = q.rnext[row]
                _append_token_nb(q, pr, t, r, row)
                _emit_nb(s, row)
                if q.gen[row] >= q.osl[row]:
                    _r_remove(q, k, r, row)
                    _fin_nb(s, row)
                else:
                    _cache_prefix_nb(q, pr, s, t, r, row, q.mat[row])
                row = nxt
    return end_t, nret


@llvm_inline
def _first_tokens_nb(q, pr, s, t, k, r, nf):
    """The first tokens of the ``nf`` fresh rows in ``s.rows``: no time, no retraction."""
    ps = pr[P_PS]
    g = 0
    for i in range(nf):
        row = s.rows[i]
        if q.osl[row] - q.gen[row] <= 0:
            _fin_nb(s, row)
    for i in range(nf):
        row = s.rows[i]
        rem = q.osl[row] - q.gen[row]
        if rem == 1:
            q.gen[row] += 1
            _emit_nb(s, row)
            _fin_nb(s, row)
        if rem > 1:
            g += max(_ceil(q.isl[row] + q.gen[row] + 1, ps) - q.alloc[row], 0)
    g //= ps
    if g > t.free[r]:
        evict_nb(t, r, g - t.free[r])
    room = g <= t.free[r]
    for i in range(nf):
        row = s.rows[i]
        if q.osl[row] - q.gen[row] <= 0:  # zero-output or finished with its first token
            continue
        if room:
            _append_token_nb(q, pr, t, r, row)
            _emit_nb(s, row)
            _cache_prefix_nb(q, pr, s, t, r, row, q.mat[row])
        _r_push_back(q, k, r, row)


# ---------------------------------------------------------------- the event loop
@inline
def _add_nb(g, i, c, x):
    """``g[i] += x`` with Neumaier's compensation kept in ``g[c]`` (the sums of squared gaps lose
    digits otherwise: std_itl was 1.4e-9 off on a 500-request trace)."""
    a = g[i]
    b = a + x
    if abs(a) >= abs(x):
        g[c] += (a - b) + x
    else:
        g[c] += (x - b) + a
    g[i] = b


@inline
def _pool_stat_nb(g, o, hist, v, c):
    """Add ``c`` copies of ``v`` to the statistic at ``g[o:o+6]`` ([n, sum, sumsq about the shift,
    min, max, shift]; compensations at ``g[12 + o // 3]``) and to ``hist``."""
    if g[o] == 0:
        g[o + 5] = v
        g[o + 3] = v
        g[o + 4] = v
    d = v - g[o + 5]
    g[o] += c
    _add_nb(g, o + 1, 12 + o // 3, c * d)
    _add_nb(g, o + 2, 13 + o // 3, c * (d * d))
    g[o + 3] = min(g[o + 3], v)
    g[o + 4] = max(g[o + 4], v)
    i = dd_index_nb(v)
    if i >= 0:
        hist[i] += c


@inline
def _pool_gap_nb(s, v, c):
    """Pool ``c`` inter-token gaps of ``v`` ms (and their 1000/gap)."""
    _pool_stat_nb(s.gaps, 0, s.itl_hist, v, c)
    if v > 0:
        _pool_stat_nb(s.gaps, 6, s.otpu_hist, 1000.0 / v, c)


@inner
def _arrive_nb(q, pr, s, k, row, now):
    g = s.cnt[CNT_RR] % pr[P_WORKERS]
    s.cnt[CNT_RR] += 1
    _arrive_on_nb(q, pr, s, k, g, row, now)


@inner
def _arrive_on_nb(q, pr, s, k, g, row, now):
    """Request ``row`` arrives at worker ``g`` (its next DP rank in turn)."""
    d = s.dpnext[g]
    s.dpnext[g] = (d + 1) % pr[P_DP]
    r = g * pr[P_DP] + d
    q.arrival[row] = now
    q.status[row] = OUTCOME_IN_FLIGHT
    q.rank[row] = r
    _w_push_back(q, k, r, row)
    if pr[P_MML] > 0 and q.isl[row] >= pr[P_MML]:
        k.rejects[r] += 1


@inline
def _chained_keys_nb(q, pr, s, row, npages):
    """The chained keys of a request's first ``npages`` pages (``radix.chain_key_nb``: what the
    radix caches' KV events name)."""
    prev = np.uint64(0)
    for p in range(npages):
        prev = chain_key_nb(prev, page_key_nb(q, pr, row, p))
        s.keys[p] = prev


@inner
def _arrive_kv_nb(q, pr, s, t, k, rt, gstate, row, now):
    """kv_router: request ``row`` goes to the rank the router chooses, or waits in its queue
    (``kernels/sglang_route.py``)."""
    q.arrival[row] = now
    q.status[row] = OUTCOME_IN_FLIGHT
    ps = pr[P_PS]
    nfull = q.isl[row] // ps
    _chained_keys_nb(q, pr, s, row, nfull)
    nshare = nfull if pr[P_HASHED] else 0
    if must_wait_nb(rt, gstate.shape[0]):
        enter_queue_nb(rt, t, s.keys, nfull, nshare, q.isl[row], ps, gstate, row, now)
        return
    _submit_nb(q, pr, k, row, route_nb(rt, t, s.keys, nfull, nshare, q.isl[row], ps, gstate, row, now))


@inner
def _release_queued_nb(q, pr, s, t, k, rt, gstate, now):
    """kv_router: the router queue releases requests while some rank is not busy, each routed at
    ``now`` (with the overlaps of its queue entry)."""
    row = next_released_nb(rt, gstate.shape[0])
    while row >= 0:
        ps = pr[P_PS]
        nfull = q.isl[row] // ps
        _chained_keys_nb(q, pr, s, row, nfull)
        r = route_released_nb(rt, s.keys, nfull, nfull if pr[P_HASHED] else 0, q.isl[row], ps, gstate, row, now)
        _submit_nb(q, pr, k, row, r)
        row = next_released_nb(rt, gstate.shape[0])


@inner
def _release_first_tokens_nb(q, pr, s, t, k, rt, gstate, g, now):
    """kv_router: the prefill loads of the first tokens worker ``g``'s pass made leave the router,
    one at a time, the router queue moving after each (decision 0410)."""
    fr = next_first_token_nb(rt, g)
    while fr >= 0:
        release_prefill_nb(rt, fr, q.rank[fr])
        _release_queued_nb(q, pr, s, t, k, rt, gstate, now)
        fr = next_first_token_nb(rt, g)


@inner
def _submit_nb(q, pr, k, row, r):
    """Request ``row`` joins the waiting queue of rank ``r``, the router's choice."""
    q.rank[row] = r
    _w_push_back(q, k, r, row)
    if pr[P_MML] > 0 and q.isl[row] >= pr[P_MML]:
        k.rejects[r] += 1


@inner
def _leave_router_nb(q, pr, s, rt, row):
    """kv_router: request ``row`` ended (completed or rejected); its loads leave the router."""
    ps = pr[P_PS]
    nfull = q.isl[row] // ps
    _chained_keys_nb(q, pr, s, row, nfull)
    request_done_nb(rt, s.keys, nfull, nfull if pr[P_HASHED] else 0, row, q.rank[row])


@inner
def _reject_nb(q, pr, s, k, r):
    """The prompts of max_model_len tokens or more that reached rank ``r`` since its last pass
    (they are among the last of its waiting queue) are rejected as its next pass starts, and end
    with that pass, as a completion does (decision 0294)."""
    row = k.wt[r]
    while k.rejects[r] > 0:
        before = q.wprev[row]
        if q.isl[row] >= pr[P_MML]:
            _w_remove(q, k, r, row)
            _fin_nb(s, row)  # (rejected when the pass ends: under a time cap before then, it is in flight)
            k.rejects[r] -= 1
        row = before


@inner
def _stamp_bursts_nb(q, s, tl, lp, spec, end, skipping, rt, g):
    """The tokens of worker ``g``'s pass with speculative decoding, all stamped ``end``: a row's
    step of ``b`` tokens adds one gap since its last token and ``b - 1`` gaps of 0 (ITL only: a
    zero gap adds nothing to the throughput per user), as the vLLM engine's ``stamp_bursts`` does.
    With the kv_router (``rt``), a first token's prefill load leaves it when the pass ends."""
    zeros = 0
    run_gap = 0.0
    run_n = 0
    for i in range(s.cnt[CNT_EMIT]):
        row = s.emit[i]
        b = spec.burst[row]
        spec.burst[row] = 1
        note_tokens_at(tl, row, end, np.int64(b))
        m = q.gen[row]
        lo = m - b + 1  # the index of this step's first token
        if lo == 1:
            q.first_token[row] = end
            if rt is not None:
                note_first_token_nb(rt, g, row)
        if lo <= 2 and m >= 2:
            q.second_token[row] = end
        pool = True
        if lp is not None:
            pool = not (skipping and lp.gap_skip[row])
        if pool:
            if lo > 1:
                gap = end - q.last_token[row]
                if run_n > 0 and gap != run_gap:
                    _pool_gap_nb(s, run_gap, run_n)
                    run_n = 0
                run_gap = gap
                run_n += 1
            zeros += b - 1
        q.last_token[row] = end
    if run_n > 0:
        _pool_gap_nb(s, run_gap, run_n)
    if zeros > 0:
        _pool_gap_nb(s, 0.0, zeros)


@loop_kernel
def run_sglang_nb(q, pr, fp, s, t, k, tl, lp, perf, v142, rt, sd, spec, tel=None):
    """Run the simulation; returns 0, DEAD_END, ADMIT_OOM, SIM_CAP (the time cap
    ``fp[F_CAP]`` stopped it; ``fp[F_NOW]``: the last event processed; ``lp``: an ``SgLoop`` with a cap or
    a closed loop, else None), INTERRUPTED (``s.cnt[CNT_CTRL_C]`` was set), or RECORDS_FULL: grow
    ``tl``'s records and call again (the requests' token times, ``kernels/timelines.py``: the tokens of a
    rank's decode steps are runs of those steps, whose ends are in the rank's ring ``tl.ring``; a
    first token of a 1.6.1 prefill pass is a time of its own). ``rt``: the kv_router
    (``kernels/router.py``'s Router), or None for round robin (its loop is compiled without it);
    ``sd``: the steady-decoding state (``kernels/sglang_steady.py``); ``spec``: an ``SgSpec`` with
    speculative decoding, else None; ``tel``: the fleet (``kernels/fleet.py``'s Fleet: telemetry
    buffers, ``kernels/sglang_telemetry.py``, and a scaling schedule, ``kernels/sglang_fleet.py``)
    or None for a fixed fleet without telemetry. TELEMETRY_FULL: grow ``tel``'s buffers and call
    again; PLANNER_TICK (at ``fp[F_NOW]``): set ``tel.fs[TARGET]`` to the planner's target worker
    count (or leave it at -1) and call again; TABLE_GROW: grow ``rt``'s table of active blocks
    (``state.grow_union_table``) and call again; TABLE_FULL: it filled up within a step, start
    again with a larger one."""
    n = q.isl.shape[0]
    W = pr[P_WORKERS]
    dp = pr[P_DP]
    inf = np.inf
    room = 2 * min(n, W * dp * min(pr[P_MAXRUN], n)) + 64  # (two records a token, in one tick)
    cap = fp[F_CAP]
    last = False
    t_last = fp[F_NOW]  # the last event processed (fp[F_NOW] when the cap stops the loop or it pauses)
    skipping = pr[P_SKIP] != 0  # (read once: the per-token check costs nothing on other runs)
    gstate = k.gstate  # (kv_router: every rank active)
    # (the steady state's arrays read once: a table field read per token costs a reference count)
    sd_base, sd_dec, sd_step, sd_settled, sd_last_end = sd.base, sd.dec, sd.step, sd.settled, sd.last_end
    if tel is not None and tel.fs[TARGET] >= 0:  # a planner's decision at its tick, ``fp[F_NOW]``
        apply_target_nb(tel, fp[F_NOW], tel.fs[TARGET])
        tel.fs[TARGET] = -1
        retire_drained_nb(tel, s.busy, k, s.done_head, dp)
    while s.cnt[CNT_DONE] < n:
        if tl.st[FREE_RECORDS] < room:
            fp[F_NOW] = t_last  # (where a call again resumes)
            return RECORDS_FULL
        if rt is not None:  # kv_router's table of active blocks: grown in place when a quarter full
            if rt.state[OVERFLOW] != 0:
                return TABLE_FULL  # (it filled up within a step: the caller starts again)
            if 4 * rt.state[NENTRIES] > rt.tab_key.shape[0]:
                fp[F_NOW] = t_last
                return TABLE_GROW
        if s.cnt[CNT_CTRL_C] != 0:  # (set from another thread: fastsim/interrupt.py)
            return INTERRUPTED
        t_arr = q.ready[s.heap[0]] if s.cnt[CNT_HEAP] > 0 else inf
        t_end = inf
        for g in range(W):
            if s.busy[g] < t_end:
                t_end = s.busy[g]
        now = min(t_arr, t_end)
        if tel is not None:
            now = min(now, next_fleet_event_nb(tel))
        if now == inf:
            return DEAD_END
        if tel is not None:
            if not sample_ticks_nb(tel, q, s, k, t, W, dp, pr[P_PAGES], now):
                fp[F_NOW] = t_last  # (where a call again resumes)
                return TELEMETRY_FULL
        if lp is not None:
            if cap >= 0.0 and now > cap:
                # Dynamo 1.4.2's single-worker runtime (one worker, no DP) still processes the first
                # event beyond the cap; 1.6.1, and 1.4.2's cluster runtime, stop at the cap
                if v142 is None or W > 1 or dp > 1:
                    fp[F_NOW] = t_last
                    return SIM_CAP
                last = True
            t_last = now
        if tel is not None:  # (an event processed: the live workers' seconds up to it)
            add_worker_seconds_nb(tel, now)
        # 1. pass completions
        for g in range(W):
            if s.busy[g] <= now:
                s.busy[g] = inf
                # the pass's finished requests, in the order they finished (the list holds them
                # last first): Dynamo folds each one's gaps into its statistics in that order
                row = s.done_head[g]
                first = -1
                while row != -1:
                    nxt = q.done_next[row]
                    q.done_next[row] = first
                    first = row
                    row = nxt
                row = first
                s.done_head[g] = -1
                if rt is not None and v142 is None:  # 1.6.1: the first tokens' prefill loads leave the router first
                    _release_first_tokens_nb(q, pr, s, t, k, rt, gstate, g, now)
                while row != -1:
                    nxt = q.done_next[row]
                    if rt is not None:  # (its loads leave, the router queue moving after)
                        _leave_router_nb(q, pr, s, rt, row)
                        _release_queued_nb(q, pr, s, t, k, rt, gstate, now)
                    s.cnt[CNT_DONE] += 1
                    if pr[P_MML] > 0 and q.isl[row] >= pr[P_MML]:  # max_model_len's rejections have no gaps
                        q.status[row] = OUTCOME_REJECTED
                    else:
                        q.status[row] = OUTCOME_COMPLETED
                        fold_request(tl, row, True, now, g)  # its gaps into the running statistics
                    nt = q.next_row[row]
                    if nt != -1:
                        q.ready[nt] = now + q.delay[nt]
                        heap_push_nb(s.heap, s.cnt, CNT_HEAP, q.ready, q.tie, nt)
                    elif lp is not None:
                        if pr[P_CONC] > 0 and s.cnt[CNT_NEXTSESS] < lp.sess_first.shape[0]:
                            # a closed loop: the session's last turn ended, the next session starts now
                            nt = lp.sess_first[s.cnt[CNT_NEXTSESS]]
                            s.cnt[CNT_NEXTSESS] += 1
                            q.ready[nt] = now
                            heap_push_nb(s.heap, s.cnt, CNT_HEAP, q.ready, q.tie, nt)
                    row = nxt
                if rt is not None and v142 is not None:  # 1.4.2: after the completions
                    _release_first_tokens_nb(q, pr, s, t, k, rt, gstate, g, now)
        if tel is not None and tel.fs[NSTARTING] > 0:  # workers that finished starting
            mark_ready_nb(tel, now)
        # 2. arrivals
        while s.cnt[CNT_HEAP] > 0 and q.ready[s.heap[0]] <= now:
            row = heap_pop_nb(s.heap, s.cnt, CNT_HEAP, q.ready, q.tie)
            t_arr = now
            if v142 is not None:
                if pr[P_CONC] > 0 and W == 1 and dp == 1 and s.busy[0] != inf:
                    # Dynamo 1.4.2's single-worker runtime releases a closed loop's requests only
                    # between passes: one ready mid-pass arrives at the pass's end (decision 0240)
                    t_arr = s.busy[0]
            if rt is not None:
                _arrive_kv_nb(q, pr, s, t, k, rt, gstate, row, t_arr)
            elif tel is not None:  # round robin over the active workers
                _arrive_on_nb(q, pr, s, k, pick_worker_nb(s.cnt, CNT_RR, tel), row, t_arr)
            else:
                _arrive_nb(q, pr, s, k, row, t_arr)
        # 3. idle workers with work run a pass on each rank with work
        progress = True
        while progress:
            progress = False
            for g in range(W):
                if s.busy[g] != inf:
                    continue
                any_work = False
                any_running = False
                for r in range(g * dp, (g + 1) * dp):
                    if k.wn[r] > 0 or k.rn[r] > 0:
                        any_work = True
                    if k.rn[r] > 0:
                        any_running = True
                if not any_work:
                    continue
                defer = s.rounds[g] > 0 and any_running
                s.cnt[CNT_EMIT] = 0
                s.cnt[CNT_FIN] = 0
                committed = s.cnt[CNT_COMMITTED]
                end = now
                prefilled = False
                for r in range(g * dp, (g + 1) * dp):
                    if k.wn[r] > 0 or k.rn[r] > 0:
                        if v142 is None:
                            e = rank_pass_nb(q, pr, fp, s, t, k, r, now, defer, perf, sd, tl, spec)
                        else:
                            e = rank_pass_142_nb(q, pr, fp, s, t, k, r, now, perf, v142, sd, spec)
                        if e < 0.0:
                            return ADMIT_OOM
                        end = max(end, e)
                        if k.prefilled[r]:
                            prefilled = True
                if prefilled:
                    s.rounds[g] = pr[P_INTERVAL]
                elif defer:
                    s.rounds[g] -= 1
                if rt is not None:  # the ranks' KV events are published when the worker's pass ends
                    for r in range(g * dp, (g + 1) * dp):
                        seal_feed_nb(t, r, end)
                run_gap = 0.0
                run_n = 0
                if spec is not None:
                    _stamp_bursts_nb(q, s, tl, lp, spec, end, skipping, rt, g)
                for i in range(s.cnt[CNT_EMIT] if spec is None else 0):
                    row = s.emit[i]
                    # (1.4.2's loop is compiled without the steady members' branches: every token
                    # of its passes is a decode step's)
                    if v142 is None:
                        if row < 0:  # the settled members of a steady rank: one gap each, since its last step
                            rr = -1 - row
                            gap = end - sd_last_end[rr]
                            if run_n > 0 and gap != run_gap:
                                _pool_gap_nb(s, run_gap, run_n)
                                run_n = 0
                            run_gap = gap
                            run_n += sd_settled[rr]
                            continue
                    rr = q.rank[row]
                    if v142 is not None:
                        note_token(tl, row, rr, sd_step[rr] - 1, end, np.int64(-1), q.gen[row])
                    elif not sd_dec[rr]:  # a first token of a prefill pass
                        note_tokens_at(tl, row, end, 1)
                    elif sd_base[row] < 0 or sd_step[rr] - 1 < sd_base[row]:
                        # (a steady member's tokens from its base step on are one run, noted when it leaves)
                        note_token(tl, row, rr, sd_step[rr] - 1, end, np.int64(-1), q.gen[row])
                    if q.gen[row] == 1:
                        q.first_token[row] = end
                        if rt is not None:
                            note_first_token_nb(rt, g, row)
                    else:
                        gap = end - q.last_token[row]
                        pool = True
                        if lp is not None:
                            pool = not (skipping and lp.gap_skip[row])
                        if pool:
                            if run_n > 0 and gap != run_gap:  # runs of equal gaps are pooled at once
                                _pool_gap_nb(s, run_gap, run_n)
                                run_n = 0
                            run_gap = gap
                            run_n += 1
                        if q.gen[row] == 2:
                            q.second_token[row] = end
                    q.last_token[row] = end
                if run_n > 0:
                    _pool_gap_nb(s, run_gap, run_n)
                for r in range(g * dp, (g + 1) * dp):
                    if sd_dec[r]:
                        ring_put(tl, np.int64(r), sd_step[r] - 1, end)
                        sd_last_end[r] = end
                        sd_dec[r] = 0
                for i in range(s.cnt[CNT_FIN]):
                    row = s.fin[i]
                    q.terminal[row] = end
                    if v142 is None:
                        if sd_base[row] >= 0:  # a member's last token
                            q.last_token[row] = end
                            sd_base[row] = -1
                    q.done_next[row] = s.done_head[g]
                    s.done_head[g] = row
                went = end > now or s.cnt[CNT_EMIT] > 0 or s.cnt[CNT_FIN] > 0
                if v142 is not None:
                    if prefilled:  # (1.4.2: a zero-duration pass that only admitted, its prompt
                        went = True  # all cached, is followed by the next pass at once)
                if went:
                    s.busy[g] = end
                    if tel is not None:
                        tel.passes[g] += 1
                    if lp is not None:
                        lp.pass_commit[g] = s.cnt[CNT_COMMITTED] - committed
                    if end <= now:
                        progress = True
        if tel is not None:  # drained workers retire, then the schedule's steps due now apply
            retire_drained_nb(tel, s.busy, k, s.done_head, dp)
            if tel.fs[SCHEDPOS] < tel.sched_t.shape[0] and apply_schedule_nb(tel, now):
                retire_drained_nb(tel, s.busy, k, s.done_head, dp)
            if tel.planner_ms > 0.0 and tel.ff[NEXTPLAN] <= now:  # the planner sees the settled state
                tel.ff[NEXTPLAN] = now + tel.planner_ms
                fp[F_NOW] = now
                return PLANNER_TICK
        if lp is not None:
            if last:
                fp[F_NOW] = t_last
                return SIM_CAP
    return OK
