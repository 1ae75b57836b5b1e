"""Scheduling a request into a pass: its prefix-cache hit at admission, its KV allocation,
preemption when the pool runs out (lifo or fifo victims, refunding a victim already scheduled in
this pass), the release of its blocks, and its end on the rank (``finish_nb``)."""

import numpy as np

from fastsim.kernels.blocks import blocks_ceil, blocks_floor, carries_blocks_nb, fill_keys, key_span, stream_row_nb
from fastsim.kernels.codes import (BLOCKED, FINISHING, PREEMPTED, RUNNING, SCHEDULED, SELF_PREEMPTED, TERM_COMPLETED,
                                   TERM_HANDOFF, WAITING)
from fastsim.kernels.host_fences import eviction_dep_nb, fence_allocation_nb, preempt_fence_nb
from fastsim.kernels.jit import inline, inner
from fastsim.kernels.kvpool import NACTIVE, alloc_nb, can_use_nb, free_slots_nb, match_slots_nb, register_nb, release_dead_nb
from fastsim.kernels.queues import push_front, stop_running
from fastsim.kernels.rank_state import (AHEAD, AWAITING_READMISSION, BCOUNT, BISL, BPREFIX, BUDGET, NLOG, PREEMPTED_ANY,
                                        PROGRESS, READMISSIONS, SELF_NEXT)
from fastsim.kernels.trtllm import left_running_nb, released_nb


@inner
def free_blocks_nb(p, pool, rq, k, r, keep):
    """Release every allocated block of ``r`` on rank ``k``, tail first (Dynamo's Deref order);
    ``keep``: ``r`` will be scheduled again (preempted), so its cached blocks stay findable.

    A block counts as full (cacheable) only if its tokens were all computed: the block holding a
    request's not-yet-computed last token is freed like a partial one (matches V08 and V14).
    """
    nb = blocks_ceil(p, rq.alloc[r])
    # (with speculative decoding the block of the not-yet-computed last token is allocated too)
    n_full = blocks_floor(p, rq.alloc[r] if p.nextn == 0 else min(rq.alloc[r], rq.computed[r])) if p.caching else 0
    held = rq.nheld[r]
    if carries_blocks_nb(rq, r):
        keep = True  # the session's next turn starts with these blocks: they stay findable
    if not keep and held == 0:
        release_dead_nb(pool, k, nb, np.int64(0), n_full)  # (no slots: by count, inline)
    else:
        base, nkeys = key_span(rq, r)
        free_slots_nb(pool, k, rq.bslot, base, nb, n_full, np.bool_(keep), stream_row_nb(rq, r),
                      np.int64(held), nkeys)
    if held != 0:  # (usually 0: the column's pages are then only read)
        rq.nheld[r] = 0
    rq.alloc[r] = 0

@inner
def cached_tokens(p, pool, rq, k, r, kbuf, hslot):
    """Prefix-cache hit of a request about to be admitted:
    (cached_tokens, active_cached_blocks, active_matched_blocks); the matched blocks' slots go
    to ``hslot``."""
    if not p.caching:
        return 0, 0, 0
    if rq.status[r] == WAITING and key_span(rq, r)[1] == 0 and rq.kid.shape[0] == 0:
        return 0, 0, 0  # never admitted (not preempted) and its first block is unique: no hit
    length = rq.isl[r] + rq.generated[r]
    n = fill_keys(rq, np.int64(r), np.int64(0), blocks_floor(p, length), kbuf)
    matched, active = match_slots_nb(pool, k, kbuf, n, hslot)
    cached = matched * p.block_size
    if not p.trtllm and not _generation_complete(p, rq, r):
        # logits are needed: a fully cached context recomputes its last block (notes 3.5; vLLM
        # only: TRT-LLM reuses the whole cached context, docs/decisions/0360)
        cap = blocks_floor(p, length - 1) * p.block_size
        if cached > cap:
            cached = cap
    elif cached > length:
        cached = length
    if p.nextn > 0 and cached >= p.block_size:
        cached -= p.block_size  # the drafter needs the last matched block's hidden states (decision 0340)
    return cached, min(active, blocks_floor(p, cached)), active

@inner
def _generation_complete(p, rq, r):
    if rq.generated[r] >= rq.osl[r]:
        return True
    return p.max_model_len > 0 and rq.isl[r] + rq.generated[r] >= p.max_model_len

# ----------------------------------------------------------------------------- preemption
@inner
def log_readmission(p, pa, r, cached, now):
    """Note the readmission of preempted request ``r`` at ``now`` with ``cached`` reused tokens."""
    i = pa.alog_n[READMISSIONS]
    if i < pa.alog.shape[0]:
        pa.alog[i, 0] = r
        pa.alog[i, 1] = cached
        pa.alog[i, 2] = p.stage
        pa.alog_t[i] = now
    pa.alog_n[READMISSIONS] = i + 1
    pa.alog_n[AWAITING_READMISSION] -= 1

@inner
def preempt_nb(p, pool, rq, rk, k, victim, pa, tier):
    """Preempt ``victim``: free its blocks, refund this pass's schedule, requeue it at the front
    (``tier``: the run's host tier, ``kernels/host_offload.py``, or None)."""
    acc = pa.acc
    if tier is not None:
        preempt_fence_nb(tier, k, victim)
    acc[SELF_NEXT] = rq.xnext[victim]
    stop_running(rq, rk, k, np.int64(victim), np.bool_(True))
    free_blocks_nb(p, pool, rq, k, np.int64(victim), np.bool_(True))
    rq.status[victim] = PREEMPTED
    rq.computed[victim] = 0
    rq.npreempt[victim] += 1
    pa.alog_n[AWAITING_READMISSION] += 1
    slog = pa.slog
    for i in range(acc[NLOG] - 1, -1, -1):  # (lifo: the victim is usually the last scheduled)
        if slog[i, 0] == victim:
            acc[BUDGET] += slog[i, 1]
            if slog[i, 2] > 0:
                acc[BCOUNT] -= 1
                acc[BISL] -= slog[i, 3] + slog[i, 2]
                acc[BPREFIX] -= slog[i, 3]
            slog[i, 0] = -1
            break
    push_front(rq.qnext, rq.qprev, rk.wait_head, rk.wait_tail, k, victim)
    rk.n_wait[k] += 1
    acc[PREEMPTED_ANY] = 1
    acc[PROGRESS] = 1

@inner
def _make_room(p, pool, rq, rk, k, r, pa, tier):
    """An allocation for ``r`` failed: preempt the next victim. Returns 0 (another request was
    preempted: try again), 1 (``r`` preempted itself) or -1 (no victim left)."""
    # (preemption happens only while every running request is explicit: see the pass)
    victim = rk.xtail[k] if p.lifo else rk.xhead[k]
    if victim < 0:
        return -1
    if victim != r and not p.lifo and rq.status[r] == RUNNING:
        pa.acc[AHEAD] += 1  # Dynamo's loop is index based: the list shifts under it
    preempt_nb(p, pool, rq, rk, k, victim, pa, tier)
    return 1 if victim == r else 0

# Inlined into the pass: a call would pass every column of the state tables (hundreds of
# arguments), which cost more than the function's own work; the rare preemption path stays a call.
@inline
def schedule(p, pool, rq, rk, k, r, cached, pa, tier):
    """Dynamo's ``schedule_request`` for ``r`` (``cached`` > 0 only for a request from waiting);
    ``tier``: the run's host tier (new blocks taken from blocks a store still reads fence the
    pass, ``kernels/host_fences.py``), or None."""
    acc = pa.acc
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
    kbase, nkeys = key_span(rq, r)  # shareable (content-keyed) prompt blocks
    while True:
        if target <= rq.alloc[r]:
            break
        j0 = blocks_ceil(p, rq.alloc[r])
        j1 = blocks_ceil(p, target)
        if j1 <= j0:  # the target stays inside the last allocated block
            rq.alloc[r] = target
            break
        n = j1 - j0
        # blocks of the cached prefix are hits; every other block is a new physical block, with
        # a slot if its key is shareable, else anonymous (kvpool): only those keys are needed
        n_hits = min(max(blocks_floor(p, cached) - j0, 0), n)
        n_keyed = max(n_hits, min(max(nkeys - j0, 0), n))
        fill_keys(rq, np.int64(r), j0, j0 + n_keyed, pa.kbuf)
        if can_use_nb(pool, k, pa.kbuf, n, n_hits):
            # hits occur only from the first block (an admission): ``hslot`` holds their slots
            if tier is not None:
                dep = eviction_dep_nb(tier, pool, k, pa.kbuf, n_hits, n - n_hits)
            alloc_nb(pool, k, pa.kbuf, n, rq.bslot, kbase + j0, n_hits, n_keyed,
                     max(nkeys - j0, 0), pa.hslot)
            if tier is not None:
                fence_allocation_nb(tier, k, r, dep, j0 + n_hits)
            if n_keyed > 0:
                rq.nheld[r] = j0 + n_keyed
            rq.alloc[r] = target
            break
        room = _make_room(p, pool, rq, rk, k, r, pa, tier)
        if room < 0:
            actual = ecb
            break
        if room == 1:
            return SELF_PREEMPTED
    tokens_used = actual - ecb
    if tokens_used == 0 and actual < length:
        return BLOCKED
    rq.computed[r] = actual
    if p.caching:  # prompt blocks now fully computed become visible to the prefix cache
        register_nb(pool, k, rq.bslot, kbase, blocks_floor(p, ecb), min(blocks_floor(p, actual), nkeys))
    prompt_tokens = min(actual, prompt) - prompt_before
    i = acc[NLOG]
    pa.slog[i, 0] = r
    pa.slog[i, 1] = tokens_used
    pa.slog[i, 2] = prompt_tokens
    pa.slog[i, 3] = prompt_before
    acc[NLOG] = i + 1
    if prompt_tokens > 0:
        acc[BCOUNT] += 1
        acc[BISL] += prompt_before + prompt_tokens
        acc[BPREFIX] += prompt_before
    acc[BUDGET] -= tokens_used
    if tokens_used > 0:
        acc[PROGRESS] = 1
    return SCHEDULED

@inner
def schedule_running(p, pool, rq, rk, k, r, pa, tier):
    """``schedule`` of a running request that is not a plain decode step inside its blocks (a
    prefill chunk, a step into a new block): rarer than admissions, so a call."""
    return schedule(p, pool, rq, rk, k, r, np.int64(0), pa, tier)


# ----------------------------------------------------------------------------- the pass
@inner
def finish_nb(p, pool, rq, rk, k, r, kind, pend_head, pend_tail, g, explicit):
    """Terminal bookkeeping at pass start; the caller applies it at the group's end."""
    if kind == TERM_COMPLETED or kind == TERM_HANDOFF:
        stop_running(rq, rk, k, np.int64(r), np.bool_(explicit))
        if kind == TERM_HANDOFF and p.trtllm:  # its blocks stay held until the source is released
            left_running_nb(p, rk, k, rq.isl[r], rq.osl[r], rq.alloc[r])
        if kind == TERM_COMPLETED:
            active_before = pool.meta[k, NACTIVE]
            alloc = rq.alloc[r]
            free_blocks_nb(p, pool, rq, k, r, np.bool_(False))
            if p.trtllm:
                released_nb(p, pool, rk, k, rq.isl[r], rq.osl[r], alloc, active_before)
    rq.status[r] = FINISHING
    rq.term_kind[r] = kind
    rq.tnext[r] = -1
    if pend_tail[g] >= 0:
        rq.tnext[pend_tail[g]] = r
    else:
        pend_head[g] = r
    pend_tail[g] = r
