"""Speculative decoding's emission (Dynamo 1.6.1, decision 0340): a ready request reserves the
blocks of its largest possible step, the rank's sampler (``kernels/mtp.py``) draws how many tokens
the step yields, and the request takes them with the blocks they need."""

import numpy as np

from fastsim.kernels.admission import finish_nb, preempt_nb
from fastsim.kernels.blocks import blocks_ceil, fill_keys, key_span
from fastsim.kernels.codes import PREFILL, TERM_COMPLETED, TERM_HANDOFF
from fastsim.kernels.jit import inline, inner
from fastsim.kernels.kvpool import NACTIVE, NFREE, alloc_anon_nb, alloc_nb, release_dead_nb
from fastsim.kernels.mtp import sample_burst_nb
from fastsim.kernels.rank_state import PROGRESS


@inline
def _remaining_nb(mml, isl, osl, gen, r):
    """Tokens ``r`` may still generate: its output length, or the model length ``mml`` (0: none),
    away (the columns are passed alone: a call passing the request table costs more than this)."""
    rem = osl[r] - gen[r]
    if mml > 0:
        rem = min(rem, mml - isl[r] - gen[r])
    return max(rem, 0)


@inner
def _extend_alloc(p, pool, rq, k, r, target, pa):
    """Allocate ``r``'s blocks up to ``target`` tokens (room is known to be there: no hits, no
    preemption), as ``admission.schedule`` does for a step into new blocks."""
    j0 = blocks_ceil(p, rq.alloc[r])
    j1 = blocks_ceil(p, target)
    if j1 > j0:
        n = j1 - j0
        kbase, nkeys = key_span(rq, r)
        n_keyed = min(max(nkeys - j0, 0), n)
        fill_keys(rq, np.int64(r), j0, j0 + n_keyed, pa.kbuf)
        alloc_nb(pool, k, pa.kbuf, n, rq.bslot, kbase + j0, 0, n_keyed, max(nkeys - j0, 0), pa.hslot)
        if n_keyed > 0:
            rq.nheld[r] = j0 + n_keyed
    rq.alloc[r] = target


@inner
def emit_speculative_nb(p, spec, pool, rq, rk, k, pa, ne, pend_head, pend_tail, g):
    """The emission of a pass with speculative decoding (Dynamo's speculative emit, decision
    0340): requests with nothing left to generate end; the others (``ready``, in running order)
    reserve the blocks of their largest possible step, ``min(nextn + 1, remaining)`` tokens
    each, preempting (lifo: the last running, fifo: the first) until that fits; then each draws
    its step's tokens from the rank's sampler and takes them, clipped to what it may still
    generate, with the blocks they need. The ready rows go to ``pa.emit`` from ``ne`` with their
    token counts in ``pa.burst``; returns (end of the rows, how many, their lengths before, the
    rank's active blocks before the steps grow them)."""
    isl = rq.isl
    osl = rq.osl
    gen = rq.generated
    comp = rq.computed
    alloc = rq.alloc
    xnext = rq.xnext
    emit = pa.emit
    burst = pa.burst
    mml = p.max_model_len
    thr = spec.thresholds
    rng = spec.streams
    first = ne
    cur = rk.xhead[k]
    while cur >= 0:
        nxt = xnext[cur]
        if comp[cur] >= isl[cur] + gen[cur]:
            if _remaining_nb(mml, isl, osl, gen, cur) == 0:
                kind = TERM_HANDOFF if p.stage == PREFILL else TERM_COMPLETED
                finish_nb(p, pool, rq, rk, k, np.int64(cur), np.int64(kind), pend_head, pend_tail, g,
                        np.bool_(True))
                pa.acc[PROGRESS] = 1
            else:
                emit[ne] = cur
                ne += 1
        cur = nxt
    max_burst = 1 if p.stage == PREFILL else p.nextn + 1
    # free blocks enough for every step's largest growth: the reservation takes and gives back
    # free blocks only, which changes nothing (the exact count is needed only near the limit)
    roomy = pool.meta[k, NFREE] >= (ne - first) * ((max_burst + p.block_size - 1) // p.block_size)
    while ne > first and not roomy:
        need = 0
        for i in range(first, ne):
            r = emit[i]
            length = isl[r] + gen[r]
            need += (blocks_ceil(p, length + min(max_burst, _remaining_nb(mml, isl, osl, gen, r)))
                     - blocks_ceil(p, length))
        if need <= p.cap - pool.meta[k, NACTIVE]:
            if need > 0:
                # Dynamo takes the whole reservation at once (evicting cached blocks as needed)
                # and gives back what the drawn steps leave unused as free blocks
                alloc_anon_nb(pool, k, need)
                release_dead_nb(pool, k, need, np.int64(0), np.int64(0))
            break
        victim = rk.xtail[k] if p.lifo else rk.xhead[k]
        if victim < 0:
            ne = first
            break
        if comp[victim] >= isl[victim] + gen[victim]:
            # its last token is not yet finalised as computed: that block is freed as partial
            comp[victim] = isl[victim] + gen[victim] - 1
        preempt_nb(p, pool, rq, rk, k, victim, pa, None)
        j = first
        for i in range(first, ne):
            if emit[i] != victim:
                emit[j] = emit[i]
                j += 1
        ne = j
    nact = pool.meta[k, NACTIVE]  # (after any preemption, before the steps' growth)
    total_len = 0
    for i in range(first, ne):
        r = emit[i]
        length = isl[r] + gen[r]
        total_len += length
        rem = _remaining_nb(mml, isl, osl, gen, r)
        if p.stage == PREFILL:
            b = min(rem, 1)
        else:
            b = min(sample_burst_nb(thr, rng, k), rem)
        burst[i] = b
        gen[r] += b
        if blocks_ceil(p, length + b) > blocks_ceil(p, alloc[r]):
            _extend_alloc(p, pool, rq, k, r, length + b, pa)
        else:
            alloc[r] = length + b
        comp[r] = length + b - 1  # the last token is computed by the next step
    if ne > first:
        pa.acc[PROGRESS] = 1
    return ne, ne - first, total_len, nact
