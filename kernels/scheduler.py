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

from typing import NamedTuple

import numpy as np
from numba import njit

from fastsim.kernels.blocks import unique_key_nb
from fastsim.kernels.kvpool import (
    NACTIVE,
    lookup_nb,
    can_use_nb,
    match_prefix_nb,
    release_many_nb,
    use_nb,
)
from fastsim.kernels.perf import decode_time_nb, modeled_ms_nb, prefill_time_nb

# request status codes (HANDED: a disaggregated request whose KV was transferred to this decode
# worker, waiting to be activated; FAILED: its prompt can never fit the decode worker's KV)
NOT_ARRIVED, WAITING, RUNNING, PREEMPTED, FINISHING, COMPLETED, REJECTED, HANDED, FAILED = range(9)
# schedule_request outcomes
SCHEDULED, BLOCKED, SELF_PREEMPTED = 0, 1, 2
# terminal kinds on the pending list (HANDOFF: a prefill copy finished; its KV stays held)
TERM_COMPLETED, TERM_REJECTED, TERM_HANDOFF = 1, 2, 3
# worker stages
AGGREGATED, PREFILL, DECODE = 0, 1, 2


class Params(NamedTuple):
    """Engine arguments of one pool, as scalars the kernels read."""

    block_size: int
    cap: int  # num_gpu_blocks per rank
    max_seqs: int
    budget: int  # max_num_batched_tokens (a huge number when unset)
    chunked: bool
    caching: bool
    lifo: bool
    max_model_len: int  # 0 = unset
    speedup: float
    decode_speedup: float
    stage: int  # AGGREGATED, PREFILL (decode steps take 0 ms) or DECODE (prefill takes 0 ms)


class Reqs(NamedTuple):
    """Per-request state (one row per request), scheduler and collector columns."""

    isl: np.ndarray  # int64
    osl: np.ndarray  # int64
    key_ptr: np.ndarray  # int64[n + 1]: content keys of full prompt blocks (CSR)
    keys: np.ndarray  # uint64
    computed: np.ndarray  # int64
    generated: np.ndarray  # int64
    alloc: np.ndarray  # int64: tokens covered by allocated blocks
    status: np.ndarray  # int8
    rank: np.ndarray  # int32
    qnext: np.ndarray  # int32: waiting/running queue links
    qprev: np.ndarray  # int32
    npreempt: np.ndarray  # int32
    sched_pass: np.ndarray  # int64: id of the pass that last scheduled the request
    sched_tokens: np.ndarray  # int64
    sched_prompt: np.ndarray  # int64
    sched_prefix: np.ndarray  # int64
    arrival: np.ndarray  # float64
    first_admit: np.ndarray
    first_token: np.ndarray
    second_token: np.ndarray
    last_token: np.ndarray
    terminal: np.ndarray
    reused: np.ndarray  # int64: max over admissions
    first_reused: np.ndarray  # int64
    tnext: np.ndarray  # int32: pending-terminal list link
    term_kind: np.ndarray  # int8
    dup_lo: np.ndarray  # int32: prompt blocks [dup_lo, dup_hi) are private duplicates
    dup_hi: np.ndarray  # int32


class Ranks(NamedTuple):
    """Per-rank queue heads (intrusive doubly linked lists over request rows)."""

    wait_head: np.ndarray  # int32[R]
    wait_tail: np.ndarray
    run_head: np.ndarray
    run_tail: np.ndarray
    n_run: np.ndarray  # int64[R]
    n_wait: np.ndarray  # int64[R]


class PassAcc(NamedTuple):
    """Scratch of one pass (reset by the caller)."""

    kbuf: np.ndarray  # uint64[max blocks of a request]
    # [budget, batch_count, batch_isl, batch_prefix, preempted_any, progress, self_next]
    acc: np.ndarray  # int64[8]
    emit: np.ndarray  # int32[...] rows that emitted a token in this group pass
    emit_n: np.ndarray  # int64[1]


BUDGET, BCOUNT, BISL, BPREFIX, PREEMPTED_ANY, PROGRESS, SELF_NEXT, AHEAD = 0, 1, 2, 3, 4, 5, 6, 7


# ----------------------------------------------------------------------------- queues
@njit(cache=True, inline="always", _nrt=False)
def _unlink(rq, heads, tails, k, r):
    p = rq.qprev[r]
    n = rq.qnext[r]
    if p >= 0:
        rq.qnext[p] = n
    else:
        heads[k] = n
    if n >= 0:
        rq.qprev[n] = p
    else:
        tails[k] = p
    rq.qprev[r] = -1
    rq.qnext[r] = -1


@njit(cache=True, inline="always", _nrt=False)
def _push_back(rq, heads, tails, k, r):
    t = tails[k]
    rq.qprev[r] = t
    rq.qnext[r] = -1
    if t >= 0:
        rq.qnext[t] = r
    else:
        heads[k] = r
    tails[k] = r


@njit(cache=True, inline="always", _nrt=False)
def _push_front(rq, heads, tails, k, r):
    h = heads[k]
    rq.qnext[r] = h
    rq.qprev[r] = -1
    if h >= 0:
        rq.qprev[h] = r
    else:
        tails[k] = r
    heads[k] = r


@njit(cache=True, _nrt=False)
def enqueue_waiting_nb(rq, rk, k, r):
    """Submit request ``r`` to rank ``k``'s waiting queue (Dynamo's ``receive``)."""
    rq.status[r] = WAITING
    rq.rank[r] = k
    rq.computed[r] = 0
    _push_back(rq, rk.wait_head, rk.wait_tail, k, r)
    rk.n_wait[k] += 1


# ----------------------------------------------------------------------------- blocks
@njit(cache=True, inline="always", _nrt=False)
def block_key_nb(rq, r, j):
    """Identity of block ``j`` of request ``r``: content key for full prompt blocks, else unique.

    Dynamo allocates every block outside a request's cached prefix as a new physical block; when
    an equal block is already registered, the new one stays a private duplicate (cache hits keep
    going to the registered copy; released, the duplicate still takes a cache slot). Such blocks
    get a private identity: prompt blocks ``[dup_lo, dup_hi)``.
    """
    base = rq.key_ptr[r]
    if j < rq.key_ptr[r + 1] - base and not (rq.dup_lo[r] <= j < rq.dup_hi[r]):
        return rq.keys[base + j]
    return unique_key_nb(r, j)


@njit(cache=True, inline="always", _nrt=False)
def _ceil_div(a, b):
    return (a + b - 1) // b


@njit(cache=True, _nrt=False)
def _fill_keys(rq, r, j0, j1, kbuf):
    for j in range(j0, j1):
        kbuf[j - j0] = block_key_nb(rq, r, j)
    return j1 - j0


@njit(cache=True, _nrt=False)
def free_blocks_nb(p, pool, rq, k, r, kbuf):
    """Release every allocated block of ``r`` on rank ``k``, tail first (Dynamo's Deref order).

    A block counts as full (cacheable) only if its tokens were all computed: the block holding a
    request's not-yet-computed last token is freed like a partial one (matches V08 and V14).
    """
    bs = p.block_size
    nb = _ceil_div(rq.alloc[r], bs)
    for i in range(nb):
        kbuf[i] = block_key_nb(rq, r, nb - 1 - i)
    n_full = rq.alloc[r] // bs if p.caching else 0
    # positions i < nb - n_full hold the partial tail block: freed, not cached
    n_partial = nb - n_full
    if n_partial > 0:
        release_many_nb(pool, k, kbuf, n_partial, 0)
    if n_full > 0:
        release_many_nb(pool, k, kbuf[n_partial:], n_full, n_full)
    rq.alloc[r] = 0
    rq.dup_lo[r] = 0
    rq.dup_hi[r] = 0


@njit(cache=True, _nrt=False)
def _cached_tokens(p, pool, rq, k, r, kbuf):
    """Prefix-cache hit of a request about to be admitted:
    (cached_tokens, active_cached_blocks, active_matched_blocks)."""
    if not p.caching:
        return 0, 0, 0
    length = rq.isl[r] + rq.generated[r]
    n = _fill_keys(rq, r, 0, length // p.block_size, kbuf)
    matched, active = match_prefix_nb(pool, k, kbuf, n)
    cached = matched * p.block_size
    if not _generation_complete(p, rq, r):
        # logits are needed: a fully cached context recomputes its last block (notes 3.5)
        cap = ((length - 1) // p.block_size) * p.block_size
        if cached > cap:
            cached = cap
    elif cached > length:
        cached = length
    return cached, min(active, cached // p.block_size), active


@njit(cache=True, inline="always", _nrt=False)
def _generation_complete(p, rq, r):
    if rq.generated[r] >= rq.osl[r]:
        return True
    return p.max_model_len > 0 and rq.isl[r] + rq.generated[r] >= p.max_model_len


# ----------------------------------------------------------------------------- preemption
@njit(cache=True, _nrt=False)
def _preempt(p, pool, rq, rk, k, victim, pass_id, pa):
    """Preempt ``victim``: free its blocks, refund this pass's schedule, requeue it at the front."""
    acc = pa.acc
    acc[SELF_NEXT] = rq.qnext[victim]
    _unlink(rq, rk.run_head, rk.run_tail, k, victim)
    rk.n_run[k] -= 1
    free_blocks_nb(p, pool, rq, k, victim, pa.kbuf)
    rq.status[victim] = PREEMPTED
    rq.computed[victim] = 0
    rq.npreempt[victim] += 1
    if rq.sched_pass[victim] == pass_id:
        acc[BUDGET] += rq.sched_tokens[victim]
        if rq.sched_prompt[victim] > 0:
            acc[BCOUNT] -= 1
            acc[BISL] -= rq.sched_prefix[victim] + rq.sched_prompt[victim]
            acc[BPREFIX] -= rq.sched_prefix[victim]
        rq.sched_pass[victim] = -1
    _push_front(rq, rk.wait_head, rk.wait_tail, k, victim)
    rk.n_wait[k] += 1
    acc[PREEMPTED_ANY] = 1
    acc[PROGRESS] = 1


@njit(cache=True, _nrt=False)
def _mark_duplicates(pool, rq, k, r, j0, j1):
    """Blocks ``j0 .. j1-1`` (outside the cached prefix) that are already registered on rank ``k``
    become private duplicates (kept as one contiguous range per request)."""
    nfull = rq.key_ptr[r + 1] - rq.key_ptr[r]
    for j in range(j0, min(j1, nfull)):
        if rq.dup_lo[r] <= j < rq.dup_hi[r]:
            continue
        if lookup_nb(pool, k, rq.keys[rq.key_ptr[r] + j]) < 0:
            continue
        if rq.dup_hi[r] == rq.dup_lo[r]:
            rq.dup_lo[r] = j
            rq.dup_hi[r] = j + 1
        elif rq.dup_hi[r] == j:
            rq.dup_hi[r] = j + 1


@njit(cache=True, _nrt=False)
def _schedule(p, pool, rq, rk, k, r, cached, pass_id, pa):
    """Dynamo's ``schedule_request`` for ``r`` (``cached`` > 0 only for a request from waiting)."""
    acc = pa.acc
    bs = p.block_size
    ecb = rq.computed[r] + cached
    prompt = rq.isl[r]
    length = prompt + rq.generated[r]
    prompt_before = min(ecb, prompt)
    remaining = length - ecb
    budget = acc[BUDGET]
    if prompt - prompt_before > 0 and not p.chunked and prompt - prompt_before > budget:
        return BLOCKED
    desired = min(remaining, budget)
    if desired == 0 and remaining > 0:
        return BLOCKED
    target = ecb + desired
    actual = target
    while True:
        if target <= rq.alloc[r]:
            break
        j0 = _ceil_div(rq.alloc[r], bs)
        j1 = _ceil_div(target, bs)
        if j1 <= j0:  # the target stays inside the last allocated block
            rq.alloc[r] = target
            break
        if p.caching:
            _mark_duplicates(pool, rq, k, r, max(j0, cached // bs), j1)
        n = _fill_keys(rq, r, j0, j1, pa.kbuf)
        if can_use_nb(pool, k, pa.kbuf, n):
            use_nb(pool, k, pa.kbuf, n)
            rq.alloc[r] = target
            break
        victim = rk.run_tail[k] if p.lifo else rk.run_head[k]
        if victim < 0:
            actual = ecb
            break
        if victim != r and not p.lifo and rq.status[r] == RUNNING:
            acc[AHEAD] += 1  # Dynamo's loop is index based: the list shifts under it
        _preempt(p, pool, rq, rk, k, victim, pass_id, pa)
        if victim == r:
            return SELF_PREEMPTED
        budget = acc[BUDGET]
    tokens_used = actual - ecb
    if tokens_used == 0 and actual < length:
        return BLOCKED
    rq.computed[r] = actual
    prompt_tokens = min(actual, prompt) - prompt_before
    rq.sched_pass[r] = pass_id
    rq.sched_tokens[r] = tokens_used
    rq.sched_prompt[r] = prompt_tokens
    rq.sched_prefix[r] = prompt_before
    if prompt_tokens > 0:
        acc[BCOUNT] += 1
        acc[BISL] += prompt_before + prompt_tokens
        acc[BPREFIX] += prompt_before
    acc[BUDGET] -= tokens_used
    if tokens_used > 0:
        acc[PROGRESS] = 1
    return SCHEDULED


# ----------------------------------------------------------------------------- the pass
@njit(cache=True, _nrt=False)
def _finish(p, pool, rq, rk, k, r, kind, pend_head, pend_tail, g, kbuf):
    """Terminal bookkeeping at pass start; the caller applies it at the group's end."""
    if kind == TERM_COMPLETED or kind == TERM_HANDOFF:
        _unlink(rq, rk.run_head, rk.run_tail, k, r)
        rk.n_run[k] -= 1
        if kind == TERM_COMPLETED:
            free_blocks_nb(p, pool, rq, k, r, kbuf)
    rq.status[r] = FINISHING
    rq.term_kind[r] = kind
    rq.tnext[r] = -1
    if pend_tail[g] >= 0:
        rq.tnext[pend_tail[g]] = r
    else:
        pend_head[g] = r
    pend_tail[g] = r


@njit(cache=True, _nrt=False, inline="always")
def rank_pass_nb(p, perf, pool, rq, rk, k, now, pass_id, pa, pend_head, pend_tail, g):
    """Run one forward pass of rank ``k`` (in group ``g``) starting at ``now``; returns its end.

    Rows that emit a token are appended to ``pa.emit``; terminals go on group ``g``'s pending list.
    ``pa.acc[PROGRESS]`` tells whether the pass changed anything observable.
    """
    # Hot loops touch only these locals: reading an array out of a NamedTuple inside a loop costs
    # an NRT incref/decref pair per access, which dominated the run time before this hoisting.
    acc = pa.acc
    isl = rq.isl
    gen = rq.generated
    comp = rq.computed
    alloc = rq.alloc
    qnext = rq.qnext
    spass = rq.sched_pass
    stok = rq.sched_tokens
    sprompt = rq.sched_prompt
    sprefix = rq.sched_prefix
    emit = pa.emit
    emit_n = pa.emit_n
    bs = p.block_size
    acc[BUDGET] = p.budget
    acc[BCOUNT] = 0
    acc[BISL] = 0
    acc[BPREFIX] = 0
    acc[PREEMPTED_ANY] = 0
    # Phase A: running requests, in running order.
    cur = rk.run_head[k]
    budget = acc[BUDGET]  # a register copy for the fast path; acc[BUDGET] is synced around calls
    while cur >= 0 and budget > 0:
        length = isl[cur] + gen[cur]
        c = comp[cur]
        if c >= isl[cur] and length - c == 1 and (length + bs - 1) // bs <= (alloc[cur] + bs - 1) // bs:
            # A decode step inside an allocated block: what _schedule would do, without the call.
            comp[cur] = length
            alloc[cur] = length
            spass[cur] = pass_id
            stok[cur] = 1
            sprompt[cur] = 0
            sprefix[cur] = isl[cur]
            budget -= 1
            acc[PROGRESS] = 1
            cur = qnext[cur]
            continue
        acc[BUDGET] = budget
        acc[AHEAD] = 0
        res = _schedule(p, pool, rq, rk, k, cur, 0, pass_id, pa)
        budget = acc[BUDGET]
        if res == SCHEDULED:
            cur = qnext[cur]
        elif res == BLOCKED:
            break
        else:
            cur = acc[SELF_NEXT]
        # each victim removed ahead of the current request skips one request, as Dynamo's
        # index-based loop does (fifo preemption)
        for _ in range(acc[AHEAD]):
            if cur < 0:
                break
            cur = qnext[cur]
    acc[BUDGET] = budget
    # Phase B: waiting requests, FIFO, only if nothing was preempted.
    while acc[PREEMPTED_ANY] == 0 and rk.n_run[k] < p.max_seqs:
        u = rk.wait_head[k]
        if u < 0:
            break
        if rq.status[u] == HANDED:
            # Admission of a transferred prompt: its blocks were reserved at the handoff; it takes
            # no token budget and no prefill time, only a seat, and decodes in this pass.
            _unlink(rq, rk.wait_head, rk.wait_tail, k, u)
            rk.n_wait[k] -= 1
            if p.max_model_len > 0 and rq.isl[u] >= p.max_model_len:
                free_blocks_nb(p, pool, rq, k, u, pa.kbuf)
                _finish(p, pool, rq, rk, k, u, TERM_REJECTED, pend_head, pend_tail, g, pa.kbuf)
                acc[PROGRESS] = 1
                continue
            _push_back(rq, rk.run_head, rk.run_tail, k, u)
            rk.n_run[k] += 1
            rq.status[u] = RUNNING
            rq.computed[u] = rq.isl[u]
            rq.first_admit[u] = now
            acc[PROGRESS] = 1
            continue
        length = rq.isl[u] + rq.generated[u]
        fresh = rq.status[u] == WAITING
        if (p.max_model_len > 0 and rq.isl[u] >= p.max_model_len) or (
            fresh and _ceil_div(length, p.block_size) > p.cap
        ):
            _unlink(rq, rk.wait_head, rk.wait_tail, k, u)
            rk.n_wait[k] -= 1
            _finish(p, pool, rq, rk, k, u, TERM_REJECTED, pend_head, pend_tail, g, pa.kbuf)
            acc[PROGRESS] = 1
            continue
        cached, active_cached, active = _cached_tokens(p, pool, rq, k, u, pa.kbuf)
        needed = _ceil_div(length, p.block_size) - active_cached
        if needed > p.cap - pool.meta[k, NACTIVE]:
            break  # head-of-line blocking: wait, never preempt for a waiting request
        before = acc[BUDGET]
        res = _schedule(p, pool, rq, rk, k, u, cached, pass_id, pa)
        if res != SCHEDULED:
            break
        _unlink(rq, rk.wait_head, rk.wait_tail, k, u)
        rk.n_wait[k] -= 1
        _push_back(rq, rk.run_head, rk.run_tail, k, u)
        rk.n_run[k] += 1
        rq.status[u] = RUNNING
        if np.isnan(rq.first_admit[u]):
            rq.first_admit[u] = now
            rq.first_reused[u] = cached
        if cached > rq.reused[u]:
            rq.reused[u] = cached
        acc[PROGRESS] = 1
        if before - acc[BUDGET] == 0 and acc[BUDGET] == 0:
            break
    # Duration: prefill of this pass's prompt tokens.
    prefill_ms = 0.0
    bc = acc[BCOUNT]
    if bc > 0 and p.stage != DECODE:
        t = bc * (acc[BISL] // bc - acc[BPREFIX] // bc)
        prefill_ms = modeled_ms_nb(prefill_time_nb(perf, t), p.speedup)
    # Emission: every request whose computed tokens reach its known length emits one token. One
    # walk emits; completions are finished afterwards, once the decode time has been read off
    # the pool (it counts their blocks: they are freed at the end of the pass).
    n_ready = 0
    total_len = 0
    osl = rq.osl
    mml = p.max_model_len
    first_emit = emit_n[0]
    cur = rk.run_head[k]
    while cur >= 0:
        nxt = qnext[cur]
        length = isl[cur] + gen[cur]
        if comp[cur] >= length:
            if gen[cur] >= osl[cur] or (mml > 0 and length >= mml):
                # nothing left to generate (e.g. zero output tokens): ends without a token
                kind = TERM_HANDOFF if p.stage == PREFILL else TERM_COMPLETED
                _finish(p, pool, rq, rk, k, cur, kind, pend_head, pend_tail, g, pa.kbuf)
                acc[PROGRESS] = 1
            else:
                n_ready += 1
                total_len += length
                gen[cur] += 1
                emit[emit_n[0]] = cur
                emit_n[0] += 1
        cur = nxt
    decode_ms = 0.0
    if n_ready > 0:
        raw = decode_time_nb(
            perf,
            float(pool.meta[k, NACTIVE] * p.block_size),
            float(total_len // n_ready),
            float(p.cap * p.block_size),
        )
        decode_ms = modeled_ms_nb(raw, p.speedup * p.decode_speedup)
        if p.stage == PREFILL:
            decode_ms = 0.0  # a prefill worker's extra steps take no time (cluster doc C5)
        acc[PROGRESS] = 1
        done_kind = TERM_HANDOFF if p.stage == PREFILL else TERM_COMPLETED
        for i in range(first_emit, emit_n[0]):
            cur = emit[i]
            if gen[cur] >= osl[cur] or (mml > 0 and isl[cur] + gen[cur] >= mml):
                _finish(p, pool, rq, rk, k, cur, done_kind, pend_head, pend_tail, g, pa.kbuf)
    return (now + prefill_ms) + decode_ms
