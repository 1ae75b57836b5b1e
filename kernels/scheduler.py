"""One vLLM-style forward pass of one rank (Dynamo 1.4.2's ``VllmCore::execute_pass``).

Notes 3.4-3.8 with the 1.4.2 corrections of the verified doc (Q1-Q7, findings 1-8):

* Phase A: running requests in running order take budget first (a decode step costs 1 token, a
  chunk ``min(remaining, budget)``); allocation failure preempts (lifo: last running, fifo: first),
  refunding a victim already scheduled in this pass.
* Phase B (only if nothing was preempted): waiting requests FIFO while ``running < max_num_seqs``:
  rejection of a fresh request that can never fit, exact-fit admission counting active cached
  prefix blocks, head-of-line blocking.
* Duration: prefill from ``t = n * (mean(prefix + chunk) - mean(prefix))`` (integer means), decode
  from the rank's physical active blocks after this pass's allocations; each rounded to the ns.
* Every request whose computed tokens reach its known length emits one token, stamped at the end of
  the pass (of the DP group: the caller stamps).

The pass is executed eagerly at its start; the caller defers the visible effects (token stamps,
terminal notifications) to the group's end time.
"""

import numpy as np

from fastsim.kernels.admission import (cached_tokens, finish_nb, free_blocks_nb, log_readmission, schedule,
                                       schedule_running)
from fastsim.kernels.blocks import block_mod, blocks_ceil
from fastsim.kernels.codes import (BLOCKED, DECODE, HANDED, PREFILL, RUNNING, SCHEDULED, TERM_COMPLETED, TERM_HANDOFF,
                                   TERM_REJECTED, TIMING_161, WAITING)
from fastsim.kernels.host_fences import compute_start_nb
from fastsim.kernels.host_offload import admit_waiting_tier, offer_stores_nb
from fastsim.kernels.jit import inline, inner, llvm_inline
from fastsim.kernels.kvpool import NACTIVE, alloc_anon_nb
from fastsim.kernels.pass_time import step_ms
from fastsim.kernels.perf import modeled_ms_nb, prefill_time_nb
from fastsim.kernels.queues import start_running, unlink, unlink_waiting
from fastsim.kernels.rank_state import (AHEAD, BCOUNT, BISL, BPREFIX, BUDGET, COMMITTED_TOKENS, DIAG_FALLBACKS,
                                        DIAG_STEADY_PASSES, DUE, HANDED_FIRST, HOLD0, HOLD_MAX, NLOG, PREEMPTED_ANY,
                                        PROGRESS, SELF_NEXT, THROTTLE)
from fastsim.kernels.trtllm import admitted_nb, fits_nb, released_nb
from fastsim.kernels.speculative import emit_speculative_nb
from fastsim.kernels.steady import block_residue, due_pass, end_gen, materialize_nb, steady_join, steady_ok


@llvm_inline
def rank_pass_nb(p, perf, pool, rq, rk, k, now, pa, pend_head, pend_tail, g, prev_end, spec, tier):
    """Run one forward pass of rank ``k`` (in group ``g``) starting at ``now``; returns its end.

    Rows that emit a token are appended to ``pa.emit``; steady members that emit (not listed) are
    counted in ``pa.ncommon``; terminals go on group ``g``'s pending list. ``pa.acc[PROGRESS]``
    tells whether the pass changed anything observable. ``prev_end`` is the end of the group's
    previous pass. The phases are inlined into one function (``@inline``): a call would pass the
    whole state. ``tier``: the run's host KV tier (``kernels/host_offload.py``), None without one
    (then none of its code is compiled: numba prunes the branches on it).
    """
    P = rk.rpass[k]
    rk.rpass[k] = P + 1
    ns, nw = _steady_members(p, pool, rq, rk, k, P, prev_end, pa)
    # a throttled step of the DP group's prefill cadence defers prefill work while the rank
    # decodes (vLLM's prefill_schedule_interval, decision 0341)
    defer = pa.acc[THROTTLE] != 0 and rk.psi[k, 1] == 0 and _has_decode(rq, rk, k)
    _schedule_running_requests(p, pool, rq, rk, k, P, ns, defer, pa, tier)
    if tier is None:
        _admit_waiting_requests(p, pool, rq, rk, k, now, defer, pa, pend_head, pend_tail, g)
    else:
        admit_waiting_tier(p, pool, rq, rk, k, now, defer, pa, pend_head, pend_tail, g, tier)
    if p.psi > 1 and not defer:
        rk.psi[k, 1] = 1 if rk.n_wait[k] > 0 else 0
    prefill_ms = _prefill_ms(p, perf, rk, k, pa.acc)
    pf_n, pf_len = _prompts_completed_161(p, rq, rk, pa)
    if tier is not None:
        # store cohorts of the requests scheduled, before any finishes; compute waits for fences
        offer_stores_nb(p, rq, rk, k, pa, tier)
        start = compute_start_nb(tier, k, now)
        decode_ms = _emit_tokens(p, perf, pool, rq, rk, k, P, ns, nw, pf_n, pf_len, pa, pend_head, pend_tail, g,
                                 prev_end, spec)
        return (start + prefill_ms) + decode_ms
    decode_ms = _emit_tokens(p, perf, pool, rq, rk, k, P, ns, nw, pf_n, pf_len, pa, pend_head, pend_tail, g,
                             prev_end, spec)
    return (now + prefill_ms) + decode_ms


@inner
def _has_decode(rq, rk, k):
    """Rank ``k`` runs a request past its prompt whose last step computed all it had (vLLM's
    ``not is_prefill_chunk``)."""
    cur = rk.xhead[k]
    while cur >= 0:
        c = rq.computed[cur]
        if c >= rq.isl[cur] and c >= rq.isl[cur] + rq.generated[cur] - 1:
            return True
        cur = rq.xnext[cur]
    return False


@inline
def _steady_members(p, pool, rq, rk, k, P, prev_end, pa):
    """The rank's steady members at rank pass ``P`` (all made explicit first if this pass could
    treat them differently), and those whose last token is in this pass, into ``pa.wake`` in
    running order. Returns (steady members, due members)."""
    acc = pa.acc
    seq = rq.seq
    wake = pa.wake
    ns = rk.nsteady[k]
    if ns > 0 and not steady_ok(p, pool, rq, rk, k, P):
        materialize_nb(p, rq, rk, k, P, prev_end)
        rk.shold[k] = P + rk.sback[k]
        rk.sback[k] = min(2 * rk.sback[k], HOLD_MAX)
        ns = 0
        rk.diag[DIAG_FALLBACKS] += 1
    elif ns > 0:
        rk.sback[k] = HOLD0
        rk.diag[DIAG_STEADY_PASSES] += 1
    rk.secdue[k] = rk.sechead[k]
    rk.sechead[k] = -1
    # Steady members whose last token is in this pass, in running order (the others in their
    # due bucket stay filed there).
    nw = 0
    if ns > 0:
        b = k * DUE + P % DUE
        w = rk.wheel[b]
        keep = -1
        while w >= 0:
            nxt = rq.wnext[w]
            if due_pass(p, rq, w) == P:
                wake[nw] = w
                nw += 1
            else:
                rq.wnext[w] = keep
                keep = w
            w = nxt
        rk.wheel[b] = keep
        for i in range(1, nw):
            x = wake[i]
            j = i - 1
            while j >= 0 and seq[wake[j]] > seq[x]:
                wake[j + 1] = wake[j]
                j -= 1
            wake[j + 1] = x
        acc[PROGRESS] = 1
    return ns, nw


@inline
def _schedule_running_requests(p, pool, rq, rk, k, P, ns, defer, pa, tier):
    """Phase A: the running requests take the token budget in running order (the ``ns`` steady
    members one token each, first) at rank pass ``P``; an allocation that fails preempts;
    ``defer``: prefill work waits for another step."""
    # Hot loops touch only these locals: reading an array out of a NamedTuple inside a loop costs
    # an NRT incref/decref pair per access, which dominated the run time before this hoisting.
    acc = pa.acc
    isl = rq.isl
    gen = rq.generated
    comp = rq.computed
    alloc = rq.alloc
    xnext = rq.xnext
    slog = pa.slog
    bs = p.block_size
    acc[BUDGET] = p.budget
    acc[BCOUNT] = 0
    acc[BISL] = 0
    acc[BPREFIX] = 0
    acc[PREEMPTED_ANY] = 0
    nlog = 0  # schedules logged in this pass (synced with acc[NLOG] around calls)
    # Running requests, in running order. Steady members take one token each; those
    # whose step starts a block allocate it here, all at once: every allocation of this pass fits
    # (``steady_ok``) and none is a cache hit, so the pool ends the same whatever their order
    # (the same blocks leave the LRU head) and their output blocks are anonymous.
    if ns > 0:
        nb = rk.bcnt[k * bs + block_mod(p, P)]
        if nb > 0:
            alloc_anon_nb(pool, k, nb)
    cur = rk.xhead[k]
    budget = acc[BUDGET] - ns  # a register copy for the fast path; acc[BUDGET] is synced around calls
    while cur >= 0 and budget > 0:
        length = isl[cur] + gen[cur]
        c = comp[cur]
        if defer and length - c > 1:
            cur = xnext[cur]  # prefill work waits on a throttled step (decision 0341)
            continue
        if c >= isl[cur] and length - c == 1 and blocks_ceil(p, length) <= blocks_ceil(p, alloc[cur]):
            # A decode step inside an allocated block: what schedule would do, without the call.
            comp[cur] = length
            alloc[cur] = length
            slog[nlog, 0] = cur
            slog[nlog, 1] = 1
            slog[nlog, 2] = 0
            slog[nlog, 3] = isl[cur]
            nlog += 1
            budget -= 1
            acc[PROGRESS] = 1
            cur = xnext[cur]
            continue
        acc[BUDGET] = budget
        acc[AHEAD] = 0
        acc[NLOG] = nlog
        res = schedule_running(p, pool, rq, rk, k, np.int64(cur), pa, tier)
        nlog = acc[NLOG]
        budget = acc[BUDGET]
        if res == SCHEDULED:
            cur = xnext[cur]
        elif res == BLOCKED:
            break
        else:
            cur = acc[SELF_NEXT]
        # each victim removed ahead of the current request skips one request, as Dynamo's
        # index-based loop does (fifo preemption)
        for _ in range(acc[AHEAD]):
            if cur < 0:
                break
            cur = xnext[cur]
    acc[BUDGET] = budget
    acc[NLOG] = nlog


@inline
def _admit_waiting_requests(p, pool, rq, rk, k, now, defer, pa, pend_head, pend_tail, g):
    """Phase B: waiting requests are admitted FIFO while seats and KV allow, only if nothing was
    preempted; one that can never fit is rejected."""
    acc = pa.acc
    while acc[PREEMPTED_ANY] == 0 and rk.n_run[k] < p.max_seqs:
        u = rk.wait_head[k]
        if acc[HANDED_FIRST] != 0:
            # a handoff waits for KV on this decode worker: only transferred prompts are
            # admitted, in queue order, past any request that would need new blocks
            while u >= 0 and rq.status[u] != HANDED:
                u = rq.qnext[u]
        if u < 0:
            break
        if rq.status[u] == HANDED:
            # Admission of a transferred prompt: its blocks were reserved at the handoff; it takes
            # no token budget and no prefill time, only a seat, and decodes in this pass.
            unlink_waiting(rq, rk, k, u)
            if p.max_model_len > 0 and rq.isl[u] >= p.max_model_len:
                active_before = pool.meta[k, NACTIVE]
                free_blocks_nb(p, pool, rq, k, np.int64(u), np.bool_(False))
                if p.trtllm:
                    released_nb(p, pool, rk, k, rq.isl[u], rq.osl[u], rq.isl[u], active_before)
                finish_nb(p, pool, rq, rk, k, np.int64(u), np.int64(TERM_REJECTED), pend_head, pend_tail,
                        g, np.bool_(True))
                acc[PROGRESS] = 1
                continue
            start_running(rq, rk, k, u)
            rq.computed[u] = rq.isl[u]
            rq.first_admit[u] = now
            acc[PROGRESS] = 1
            if acc[BUDGET] == 0:
                break  # an admission that used no token with none left ends the admissions
            continue
        length = rq.isl[u] + rq.generated[u]
        fresh = rq.status[u] == WAITING
        if (p.max_model_len > 0 and rq.isl[u] >= p.max_model_len) or (
            fresh and blocks_ceil(p, length) > p.cap
        ):
            unlink_waiting(rq, rk, k, u)
            finish_nb(p, pool, rq, rk, k, np.int64(u), np.int64(TERM_REJECTED), pend_head, pend_tail, g,
                    np.bool_(True))
            acc[PROGRESS] = 1
            continue
        cached, active_cached, active = cached_tokens(p, pool, rq, k, np.int64(u), pa.kbuf,
                                                       pa.hslot)
        if defer and length - cached > 1:
            break
        if p.trtllm:  # the whole to-completion KV must fit beside every running request's
            if fits_nb(p, rk, k, rq.isl[u], rq.osl[u], active_cached) < 0:
                break
        elif blocks_ceil(p, length) - active_cached > p.cap - pool.meta[k, NACTIVE]:
            break  # head-of-line blocking: wait, never preempt for a waiting request
        before = acc[BUDGET]
        active_before = pool.meta[k, NACTIVE]
        res = schedule(p, pool, rq, rk, k, np.int64(u), np.int64(cached), pa, None)
        if res != SCHEDULED:
            break
        if p.trtllm:
            admitted_nb(p, pool, rk, k, rq.isl[u], rq.osl[u], rq.alloc[u], active_before)
        unlink_waiting(rq, rk, k, u)
        start_running(rq, rk, k, u)
        # (the reuse columns start at 0 and are written only on a hit: without hits, as in a
        # synthetic run, a fresh process never maps their pages)
        if np.isnan(rq.first_admit[u]):
            rq.first_admit[u] = now
            if cached > 0:
                rq.first_reused[u] = cached
        if cached > 0 and cached > rq.reused[u]:
            rq.reused[u] = cached
        if rq.npreempt[u] > 0:
            log_readmission(p, pa, u, cached, now)
        acc[PROGRESS] = 1
        if before - acc[BUDGET] == 0 and acc[BUDGET] == 0:
            break


@inline
def _prefill_ms(p, perf, rk, k, acc):
    """Duration, prefill part: the time of this pass's new prompt tokens (tabulated per rank)."""
    prefill_ms = 0.0
    bc = acc[BCOUNT]
    if bc > 0 and p.stage != DECODE:
        t = acc[BISL] - acc[BPREFIX] if bc == 1 else bc * (acc[BISL] // bc - acc[BPREFIX] // bc)
        if t < rk.ptab.shape[0]:
            prefill_ms = rk.ptab[t]
            if prefill_ms != prefill_ms:
                prefill_ms = modeled_ms_nb(prefill_time_nb(perf, t), p.speedup)
                rk.ptab[t] = prefill_ms
        elif t == rk.pkey[k]:
            prefill_ms = rk.pms[k]
        else:
            prefill_ms = modeled_ms_nb(prefill_time_nb(perf, t), p.speedup)
            rk.pkey[k] = t
            rk.pms[k] = prefill_ms
    return prefill_ms


@inline
def _prompts_completed_161(p, rq, rk, pa):
    """Duration, 1.6.1 rules: the emitters whose prompt completes in this pass (left out of the
    decode batch) as (count, total length); counts ``committed_prefill_tokens`` as well."""
    acc = pa.acc
    slog = pa.slog
    isl = rq.isl
    gen = rq.generated
    comp = rq.computed
    # 1.6.1 charges decode time only for the emitters that had emitted a token before this pass:
    # those whose prompt completes in it are left out of the decode batch (docs/decisions/0025).
    # It also counts the tokens of every schedule that computes prompt tokens (a recomputation
    # after preemption with its generated tokens): ``committed_prefill_tokens``.
    pf_n = 0
    pf_len = 0
    if p.timing_rules == TIMING_161:
        osl = rq.osl
        for i in range(acc[NLOG]):
            r = slog[i, 0]
            if r < 0 or slog[i, 2] == 0:
                continue
            rk.counters[COMMITTED_TOKENS] += slog[i, 1]
            length = isl[r] + gen[r]
            if gen[r] == 0 and comp[r] >= length and not (
                    gen[r] >= osl[r] or (p.max_model_len > 0 and length >= p.max_model_len)):
                pf_n += 1
                pf_len += length
    return pf_n, pf_len


@inline
def _emit_tokens(p, perf, pool, rq, rk, k, P, ns, nw, pf_n, pf_len, pa, pend_head, pend_tail, g, prev_end, spec):
    """Emission, and the decode part of the duration, which it returns."""
    acc = pa.acc
    isl = rq.isl
    gen = rq.generated
    comp = rq.computed
    alloc = rq.alloc
    xnext = rq.xnext
    seq = rq.seq
    sbase = rq.sbase
    emit = pa.emit
    emit_n = pa.emit_n
    wake = pa.wake
    bs = p.block_size
    # Emission: every request whose computed tokens reach its known length emits one token. One
    # walk emits; completions are finished afterwards, once the decode time has been read off
    # the pool (it counts their blocks: they are freed at the end of the pass). Explicit members
    # that have become steady leave the explicit list here.
    n_ready = ns
    total_len = rk.slen[k]
    osl = rq.osl
    mml = p.max_model_len
    ne = emit_n[0]  # (a local: with the count in an array, each store to another array reloads it)
    first_emit = ne
    convert = p.steady and P >= rk.shold[k]
    conv_n = 0
    conv_len = 0
    cur = rk.xhead[k]
    nact = pool.meta[k, NACTIVE]
    if spec is not None:  # speculative decoding: several tokens a step (no steady members then)
        # (1.4.2's decode time counts the blocks held before the steps grow them)
        ne, n_ready, total_len, nact = emit_speculative_nb(p, spec, pool, rq, rk, k, pa, ne, pend_head, pend_tail, g)
        cur = -1
    while cur >= 0:
        nxt = xnext[cur]
        length = isl[cur] + gen[cur]
        if comp[cur] >= length:
            if gen[cur] >= osl[cur] or (mml > 0 and length >= mml):
                # nothing left to generate (e.g. zero output tokens): ends without a token
                kind = TERM_HANDOFF if p.stage == PREFILL else TERM_COMPLETED
                finish_nb(p, pool, rq, rk, k, np.int64(cur), np.int64(kind), pend_head, pend_tail, g,
                        np.bool_(True))
                acc[PROGRESS] = 1
            else:
                n_ready += 1
                total_len += length
                gen[cur] += 1
                emit[ne] = cur
                ne += 1
                if (convert and comp[cur] == length and alloc[cur] == length
                        and gen[cur] < end_gen(p, rq, cur) and rq.status[cur] == RUNNING):
                    unlink(xnext, rq.xprev, rk.xhead, rk.xtail, k, cur)
                    sbase[cur] = P + 1
                    steady_join(p, rq, rk, k, cur)
                    if seq[cur] > rk.smax[k]:
                        rk.smax[k] = seq[cur]
                    conv_n += 1
                    conv_len += length + 1
                    if gen[cur] == 1:
                        rq.snext[cur] = rk.sechead[k]
                        rk.sechead[k] = cur
        cur = nxt
    end_emit = ne
    decode_ms = 0.0
    if n_ready > 0:
        if spec is not None:  # a speculative step verifies every ready request, fresh ones too (decision 0340)
            pf_n = 0
            pf_len = 0
        n_dec = n_ready - pf_n
        if p.stage != PREFILL and n_dec > 0:  # a prefill worker's extra steps take no time (cluster doc C5)
            decode_ms = step_ms(p, perf, rk, k, nact if spec is not None else pool.meta[k, NACTIVE],
                              total_len - pf_len, n_dec)
        acc[PROGRESS] = 1
    # Completions in running order: explicit emitters merged with the steady members due.
    done_kind = TERM_HANDOFF if p.stage == PREFILL else TERM_COMPLETED
    i = first_emit
    wi = 0
    nfin = 0
    fin_len = 0
    while i < end_emit or wi < nw:
        if wi < nw and (i >= end_emit or seq[wake[wi]] < seq[emit[i]]):
            w = wake[wi]
            wi += 1
            eg = end_gen(p, rq, w)
            g_now = gen[w] + (P - sbase[w])  # before this pass's token
            # its last token: explicit again, stamped with this pass's emitters
            rk.bcnt[k * bs + block_residue(p, rq, w)] -= 1
            nfin += 1
            fin_len += isl[w] + g_now
            gen[w] = eg
            comp[w] = isl[w] + eg - 1
            alloc[w] = isl[w] + eg - 1
            rq.last_token[w] = prev_end
            sbase[w] = -1
            emit[ne] = w
            ne += 1
            finish_nb(p, pool, rq, rk, k, np.int64(w), np.int64(done_kind), pend_head, pend_tail, g,
                    np.bool_(False))
        else:
            cur = emit[i]
            i += 1
            if gen[cur] >= osl[cur] or (mml > 0 and isl[cur] + gen[cur] >= mml):
                finish_nb(p, pool, rq, rk, k, np.int64(cur), np.int64(done_kind), pend_head, pend_tail,
                        g, np.bool_(True))
    emit_n[0] = ne
    if ns > 0 or conv_n > 0:
        rk.nsteady[k] = ns - nfin + conv_n
        rk.slen[k] = rk.slen[k] - fin_len + (ns - nfin) + conv_len
        pa.ncommon[0] += ns - nfin
    return decode_ms
