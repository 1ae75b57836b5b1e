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

from fastsim.kernels.blocks import unique_key_nb
from fastsim.kernels.jit import inline, inner, llvm_inline
from fastsim.kernels.kvpool import (
    NACTIVE,
    NFREE,
    alloc_anon_nb,
    alloc_nb,
    can_use_nb,
    free_slots_nb,
    match_slots_nb,
    register_nb,
    release_dead_nb,
)
from fastsim.kernels.mtp import accept_thresholds, new_streams, sample_burst_nb
from fastsim.kernels.perf import POLYNOMIAL, decode_time_nb, modeled_ms_nb, prefill_time_nb

# request status codes (HANDED: a disaggregated request whose KV was transferred to this decode
# worker, waiting to be activated; FAILED: its prompt can never fit the decode worker's KV)
NOT_ARRIVED, WAITING, RUNNING, PREEMPTED, FINISHING, COMPLETED, REJECTED, HANDED, FAILED = range(9)
# schedule_request outcomes
SCHEDULED, BLOCKED, SELF_PREEMPTED = 0, 1, 2
# terminal kinds on the pending list (HANDOFF: a prefill copy finished; its KV stays held)
TERM_COMPLETED, TERM_REJECTED, TERM_HANDOFF = 1, 2, 3
# worker stages
AGGREGATED, PREFILL, DECODE = 0, 1, 2
# timing rules of a pass (``Params.timing_rules``): Dynamo 1.4.2's, or 1.6.1's (decode time only
# for a pass that holds a request past its prompt, from the logical lengths of those requests)
TIMING_142, TIMING_161 = 0, 1


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
    steady: bool = True  # keep steadily decoding requests implicit (see "steady decoding" below)
    bshift: int = -1  # log2(block_size) when it is a power of two (divisions become shifts), else -1
    fast: bool = True  # run passes that only advance steady members on the light path (``steady_pass_nb``)
    timing_rules: int = TIMING_142  # TIMING_142 or TIMING_161 (see ``_step_ms``)
    nextn: int = 0  # speculative decoding (MTP): draft tokens per decode step, 0 = off (``_emit_mtp``)
    psi: int = 1  # vLLM's prefill_schedule_interval across a DP group's ranks (decision 0341)


class Reqs(NamedTuple):
    """Per-request state (one row per request), scheduler and collector columns."""

    isl: np.ndarray  # int64
    osl: np.ndarray  # int64
    key_ptr: np.ndarray  # int64[n + 1]: content keys of full prompt blocks (CSR)
    keys: np.ndarray  # uint64
    computed: np.ndarray  # int32
    generated: np.ndarray  # int32
    alloc: np.ndarray  # int32: tokens covered by allocated blocks
    status: np.ndarray  # int8
    rank: np.ndarray  # int32
    qnext: np.ndarray  # int32: waiting/running queue links
    qprev: np.ndarray  # int32
    npreempt: np.ndarray  # int32
    arrival: np.ndarray  # float64
    first_admit: np.ndarray
    first_token: np.ndarray
    second_token: np.ndarray
    last_token: np.ndarray
    terminal: np.ndarray
    reused: np.ndarray  # int32: max over admissions
    first_reused: np.ndarray  # int32
    tnext: np.ndarray  # int32: pending-terminal list link (the same memory as qnext: sim._requests)
    term_kind: np.ndarray  # int8
    bslot: np.ndarray  # int32[len(keys)]: pool slots of the shareable blocks (offsets: key_ptr)
    nheld: np.ndarray  # int32: leading blocks that hold a slot (the rest are anonymous: kvpool)
    # steady decoding (see below)
    seq: np.ndarray  # int64: admission order into the running list
    sbase: np.ndarray  # int64: rank pass at which ``generated`` is exact; -1 = explicit
    wnext: np.ndarray  # int32: due-wheel bucket link (the same memory as xnext)
    xnext: np.ndarray  # int32: explicit running list links
    xprev: np.ndarray  # int32
    snext: np.ndarray  # int32: second-token list link (the same memory as xprev)
    # int64: empty unless sessions are growing token streams (mooncake-delta): the row that starts
    # row r's stream (its private blocks' keys are the stream's), inverted (< 0) while the
    # session's next turn continues r's blocks (sim._stream_ids)
    kid: np.ndarray


class Ranks(NamedTuple):
    """Per-rank queue heads (intrusive doubly linked lists over request rows)."""

    wait_head: np.ndarray  # int32[R]
    wait_tail: np.ndarray
    run_head: np.ndarray
    run_tail: np.ndarray
    n_run: np.ndarray  # int64[R]
    n_wait: np.ndarray  # int64[R]
    # steady decoding (see below)
    xhead: np.ndarray  # int32[R]: the explicit members of the running list, in running order
    xtail: np.ndarray  # int32[R]
    rpass: np.ndarray  # int64[R]: passes the rank has run
    nsteady: np.ndarray  # int64[R]: implicit (steady) members
    slen: np.ndarray  # int64[R]: sum of their lengths at the rank's next pass
    wheel: np.ndarray  # int32[R * _DUE]: due buckets (last-token pass mod _DUE)
    bcnt: np.ndarray  # int64[R * block_size]: steady members starting a block, by pass mod block_size
    sechead: np.ndarray  # int32[R]: steady members whose next token is their second
    secdue: np.ndarray  # int32[R]: ... those of the pass in flight (stamped with its end)
    shold: np.ndarray  # int64[R]: no new steady members before this rank pass
    sback: np.ndarray  # int64[R]: current hold length after a fallback
    smax: np.ndarray  # int64[R]: at least the largest running order (seq) of a steady member
    seqc: np.ndarray  # int64[7]: [admission counter, fallbacks, steady passes, light ticks,
    #                   arrival ticks on the light path (kernels/loop.py), tokens of the schedules
    #                   that compute prompt tokens (1.6.1 rules only), group passes run ahead in
    #                   steady runs (kernels/loop.py, also counted as light ticks)]
    # the last step times of each rank, reused while their inputs repeat (they often do)
    dkey: np.ndarray  # int64[R]: active blocks of the last decode time (-1: none)
    dctx: np.ndarray  # int64[R]: its mean context (grid timing only)
    dms: np.ndarray  # float64[R]: that decode time, modeled
    pkey: np.ndarray  # int64[R]: new prompt tokens of the last prefill time (-1: none)
    pms: np.ndarray  # float64[R]: that prefill time, modeled
    # polynomial timing: the decode time depends only on the active block count (the same for
    # every rank of the pool), so it is tabulated by that count as it is met (NaN: not yet)
    dtab: np.ndarray  # float64[cap + 1] (empty above _DTAB_MAX blocks: the memo above serves)
    # a prefill time depends only on the pass's new prompt tokens: tabulated the same way, up to
    # the token budget (larger counts use the memo)
    ptab: np.ndarray  # float64[min(budget, _PTAB_MAX) + 1]
    # speculative decoding (kernels/mtp.py): the draft positions' acceptance thresholds (empty:
    # off) and each rank's generator
    mtp_thr: np.ndarray  # uint64[nextn]
    mtp_rng: np.ndarray  # uint32[R, mtp.ROW] (R = 0: off)
    # prefill_schedule_interval: [group step counter (at the group's first rank), this rank's
    # "the last open step left requests waiting" flag]
    psi: np.ndarray  # int64[R, 2]


_HOLD0, _HOLD_MAX = 8, 4096  # passes a rank stays explicit after a fallback (doubling)
_DUE = 256  # due-wheel buckets per rank: a member is looked at once per _DUE passes until due
_DTAB_MAX = 1 << 22
_PTAB_MAX = 1 << 16


def make_ranks(n_ranks, block_size, cap, budget, mtp_rates=(), mtp_seeds=()):
    """Empty per-rank queues and steady-decoding state for ``n_ranks`` ranks of ``cap`` KV
    blocks each and a token budget of ``budget`` per pass; ``mtp_rates``: the draft positions'
    acceptance rates (speculative decoding), ``mtp_seeds``: each rank's sampler seed."""
    def heads():
        return np.full(n_ranks, -1, dtype=np.int32)

    return Ranks(
        wait_head=heads(), wait_tail=heads(), run_head=heads(), run_tail=heads(),
        n_run=np.zeros(n_ranks, dtype=np.int64), n_wait=np.zeros(n_ranks, dtype=np.int64),
        xhead=heads(), xtail=heads(), rpass=np.zeros(n_ranks, dtype=np.int64),
        nsteady=np.zeros(n_ranks, dtype=np.int64), slen=np.zeros(n_ranks, dtype=np.int64),
        wheel=np.full(n_ranks * _DUE, -1, dtype=np.int32),
        bcnt=np.zeros(n_ranks * block_size, dtype=np.int64), sechead=heads(), secdue=heads(),
        shold=np.zeros(n_ranks, dtype=np.int64), sback=np.full(n_ranks, _HOLD0, dtype=np.int64),
        smax=np.full(n_ranks, -1, dtype=np.int64),
        seqc=np.zeros(7, dtype=np.int64),
        dkey=np.full(n_ranks, -1, dtype=np.int64), dctx=np.zeros(n_ranks, dtype=np.int64),
        dms=np.zeros(n_ranks), pkey=np.full(n_ranks, -1, dtype=np.int64), pms=np.zeros(n_ranks),
        dtab=np.full(cap + 1 if cap <= _DTAB_MAX else 0, np.nan),
        ptab=np.full(min(budget, _PTAB_MAX) + 1, np.nan),
        mtp_thr=accept_thresholds(mtp_rates), mtp_rng=new_streams(mtp_seeds if len(mtp_rates) else ()),
        psi=np.zeros((n_ranks, 2), dtype=np.int64),
    )



class PassAcc(NamedTuple):
    """Scratch of one pass (reset by the caller)."""

    kbuf: np.ndarray  # uint64[max blocks of a request]
    hslot: np.ndarray  # int64[max blocks of a request]: slots of the blocks matched at admission
    # [budget, batch_count, batch_isl, batch_prefix, preempted_any, progress, self_next, ahead,
    #  schedules in slog, handed_first (set by the caller)]
    acc: np.ndarray  # int64[10]
    emit: np.ndarray  # int32[...] rows that emitted a token in this group pass
    emit_n: np.ndarray  # int64[1]
    wake: np.ndarray  # int32[max running per rank + 1]: steady members whose last token is in this pass
    ncommon: np.ndarray  # int64[1]: steady members that emitted in this group pass, not in ``emit``
    # this rank pass's schedules, for a preemption's refund: [row, tokens, prompt tokens, prefix]
    slog: np.ndarray  # int64[max running per rank + 1, 4]
    # readmissions after a preemption, for the per-request admission histories (Dynamo 1.6.1):
    # [row, reused tokens, stage] and the time of each, while they fit; alog_n = [readmissions
    # (all of them: a count above the capacity asks the caller for a run with a larger log),
    # preempted requests not yet readmitted (the loop pauses for a larger log before they could
    # overflow it: kernels/loop.py)]
    alog: np.ndarray  # int64[capacity, 3]
    alog_t: np.ndarray  # float64[capacity]
    alog_n: np.ndarray  # int64[2]
    # speculative decoding: the tokens each row of ``emit`` got in its pass (empty: one each)
    burst: np.ndarray  # int32[len(emit)] or int32[0]


BUDGET, BCOUNT, BISL, BPREFIX, PREEMPTED_ANY, PROGRESS, SELF_NEXT, AHEAD, NLOG, HANDED_FIRST, THROTTLE = range(11)


def make_pass_acc(max_blocks, emit_cap, rank_cap, readmission_log=0, bursts=False):
    """Pass scratch for requests of up to ``max_blocks`` blocks, ``emit_cap`` emitters per group
    pass and ``rank_cap`` running requests per rank (both counting one spare), with room for
    ``readmission_log`` readmissions in the log (0: counted, not kept); ``bursts``: a step may
    yield several tokens (speculative decoding)."""
    return PassAcc(
        kbuf=np.zeros(max_blocks, dtype=np.uint64),
        hslot=np.full(max_blocks, -1, dtype=np.int64),
        acc=np.zeros(THROTTLE + 1, dtype=np.int64),
        emit=np.zeros(emit_cap, dtype=np.int32),
        emit_n=np.zeros(1, dtype=np.int64),
        wake=np.zeros(rank_cap, dtype=np.int32),
        ncommon=np.zeros(1, dtype=np.int64),
        slog=np.zeros((rank_cap, 4), dtype=np.int64),
        alog=np.zeros((readmission_log, 3), dtype=np.int64),
        alog_t=np.zeros(readmission_log),
        alog_n=np.zeros(2, dtype=np.int64),
        burst=np.zeros(emit_cap if bursts else 0, dtype=np.int32),
    )


# ----------------------------------------------------------------------------- queues
# Intrusive doubly linked lists over request rows: ``nxt``/``prv`` are the link columns (qnext/qprev
# for the waiting and running lists, xnext/xprev for the explicit running list).
@inner
def _unlink(nxt, prv, heads, tails, k, r):
    p = prv[r]
    n = nxt[r]
    if p >= 0:
        nxt[p] = n
    else:
        heads[k] = n
    if n >= 0:
        prv[n] = p
    else:
        tails[k] = p
    prv[r] = -1
    nxt[r] = -1


@inner
def _push_back(nxt, prv, heads, tails, k, r):
    t = tails[k]
    prv[r] = t
    nxt[r] = -1
    if t >= 0:
        nxt[t] = r
    else:
        heads[k] = r
    tails[k] = r


@inner
def _push_front(nxt, prv, heads, tails, k, r):
    h = heads[k]
    nxt[r] = h
    prv[r] = -1
    if h >= 0:
        prv[h] = r
    else:
        tails[k] = r
    heads[k] = r


@inner
def _unlink_waiting(rq, rk, k, r):
    _unlink(rq.qnext, rq.qprev, rk.wait_head, rk.wait_tail, k, r)
    rk.n_wait[k] -= 1


@inner
def _start_running(rq, rk, k, r):
    """Append ``r`` to rank ``k``'s running list (and its explicit part)."""
    _push_back(rq.qnext, rq.qprev, rk.run_head, rk.run_tail, k, r)
    _push_back(rq.xnext, rq.xprev, rk.xhead, rk.xtail, k, r)
    rk.n_run[k] += 1
    rq.status[r] = RUNNING
    rq.seq[r] = rk.seqc[0]
    rk.seqc[0] += 1


@inner
def _stop_running(rq, rk, k, r, explicit):
    _unlink(rq.qnext, rq.qprev, rk.run_head, rk.run_tail, k, r)
    if explicit:
        _unlink(rq.xnext, rq.xprev, rk.xhead, rk.xtail, k, r)
    rk.n_run[k] -= 1


@inner
def arrive_nb(rq, r, t):
    """Request ``r`` arrives at ``t``: its row starts here. ``sim._requests`` leaves the row as
    zeros (filling every row up front cost more than this, made while the row is in cache): the
    result times start unset (NaN) and the links and the steady base at -1. Every later value of
    ``sbase`` is -1 or a pass number + 1, so ``sbase == 0`` marks a row that never arrived
    (``sim.settle_unarrived`` gives such rows the same start after a capped run)."""
    rq.arrival[r] = t
    rq.first_admit[r] = np.nan
    rq.first_token[r] = np.nan
    rq.second_token[r] = np.nan
    rq.last_token[r] = np.nan
    rq.terminal[r] = np.nan
    rq.sbase[r] = -1
    rq.rank[r] = -1
    rq.qnext[r] = -1
    rq.qprev[r] = -1
    rq.xnext[r] = -1
    rq.xprev[r] = -1


@inner
def enqueue_waiting_nb(rq, rk, k, r):
    """Submit request ``r`` to rank ``k``'s waiting queue (Dynamo's ``receive``)."""
    rq.status[r] = WAITING
    rq.rank[r] = k
    rq.computed[r] = 0
    _push_back(rq.qnext, rq.qprev, rk.wait_head, rk.wait_tail, k, r)
    rk.n_wait[k] += 1


# ----------------------------------------------------------------------------- blocks
@inner
def key_span(rq, r):
    """(offset, count) of request ``r``'s content keys in ``rq.keys``. A workload without any
    (unique prompts, or prefix caching off) gives (0, 0) without reading ``key_ptr`` (all zeros,
    ``sim._block_keys``): a fresh process then never maps its pages."""
    if rq.keys.shape[0] == 0:
        return np.int64(0), np.int64(0)
    base = rq.key_ptr[r]
    return base, rq.key_ptr[r + 1] - base


@inner
def stream_row_nb(rq, r):
    """The row whose token stream request ``r``'s private blocks belong to (``Reqs.kid``)."""
    if rq.kid.shape[0] == 0:
        return r
    s = rq.kid[r]
    return s if s >= 0 else ~s


@inner
def carries_blocks_nb(rq, r):
    """Does the session's next turn continue ``r``'s blocks (a growing stream, not its last turn)?"""
    return rq.kid.shape[0] != 0 and rq.kid[r] < 0


@inner
def block_key_nb(rq, r, j):
    """Identity of block ``j`` of request ``r``: content key for full prompt blocks, else unique.

    Dynamo allocates every block outside a request's cached prefix as a new physical block; when
    an equal block is already registered, the new one becomes a second copy of that key (cache
    hits keep going to the first copy still alive; see ``kvpool``).
    """
    base, nkeys = key_span(rq, r)
    if j < nkeys:
        return rq.keys[base + j]
    return unique_key_nb(stream_row_nb(rq, r), j)


# Token counts to blocks. A hardware division costs tens of cycles and a pass makes a dozen of
# them; with a power-of-two block size (the usual case) they are shifts and masks, which give the
# same floor quotient and non-negative remainder for negative numbers too (two's complement).
@inner
def _blocks_floor(p, x):
    """``x // block_size``."""
    if p.bshift >= 0:
        return x >> p.bshift
    return x // p.block_size


@inner
def _blocks_ceil(p, x):
    """Blocks that hold ``x`` tokens: ``ceil(x / block_size)``."""
    return _blocks_floor(p, x + p.block_size - 1)


@inner
def _block_mod(p, x):
    """``x % block_size`` (in ``[0, block_size)``)."""
    if p.bshift >= 0:
        return x & (p.block_size - 1)
    return x % p.block_size


@inner
def _fill_keys(rq, r, j0, j1, kbuf):
    for j in range(j0, j1):
        kbuf[j - j0] = block_key_nb(rq, r, j)
    return j1 - j0


@inner
def free_blocks_nb(p, pool, rq, k, r, keep):
    """Release every allocated block of ``r`` on rank ``k``, tail first (Dynamo's Deref order);
    ``keep``: ``r`` will be scheduled again (preempted), so its cached blocks stay findable.

    A block counts as full (cacheable) only if its tokens were all computed: the block holding a
    request's not-yet-computed last token is freed like a partial one (matches V08 and V14).
    """
    nb = _blocks_ceil(p, rq.alloc[r])
    # (with speculative decoding the block of the not-yet-computed last token is allocated too)
    n_full = _blocks_floor(p, rq.alloc[r] if p.nextn == 0 else min(rq.alloc[r], rq.computed[r])) if p.caching else 0
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
def _cached_tokens(p, pool, rq, k, r, kbuf, hslot):
    """Prefix-cache hit of a request about to be admitted:
    (cached_tokens, active_cached_blocks, active_matched_blocks); the matched blocks' slots go
    to ``hslot``."""
    if not p.caching:
        return 0, 0, 0
    if rq.status[r] == WAITING and key_span(rq, r)[1] == 0 and rq.kid.shape[0] == 0:
        return 0, 0, 0  # never admitted (not preempted) and its first block is unique: no hit
    length = rq.isl[r] + rq.generated[r]
    n = _fill_keys(rq, np.int64(r), np.int64(0), _blocks_floor(p, length), kbuf)
    matched, active = match_slots_nb(pool, k, kbuf, n, hslot)
    cached = matched * p.block_size
    if not _generation_complete(p, rq, r):
        # logits are needed: a fully cached context recomputes its last block (notes 3.5)
        cap = _blocks_floor(p, length - 1) * p.block_size
        if cached > cap:
            cached = cap
    elif cached > length:
        cached = length
    if p.nextn > 0 and cached >= p.block_size:
        cached -= p.block_size  # the drafter needs the last matched block's hidden states (decision 0340)
    return cached, min(active, _blocks_floor(p, cached)), active


@inner
def _generation_complete(p, rq, r):
    if rq.generated[r] >= rq.osl[r]:
        return True
    return p.max_model_len > 0 and rq.isl[r] + rq.generated[r] >= p.max_model_len


# ----------------------------------------------------------------------------- preemption
@inner
def _log_readmission(p, pa, r, cached, now):
    """Note the readmission of preempted request ``r`` at ``now`` with ``cached`` reused tokens."""
    i = pa.alog_n[0]
    if i < pa.alog.shape[0]:
        pa.alog[i, 0] = r
        pa.alog[i, 1] = cached
        pa.alog[i, 2] = p.stage
        pa.alog_t[i] = now
    pa.alog_n[0] = i + 1
    pa.alog_n[1] -= 1


@inner
def _preempt(p, pool, rq, rk, k, victim, pa):
    """Preempt ``victim``: free its blocks, refund this pass's schedule, requeue it at the front."""
    acc = pa.acc
    acc[SELF_NEXT] = rq.xnext[victim]
    _stop_running(rq, rk, k, np.int64(victim), np.bool_(True))
    free_blocks_nb(p, pool, rq, k, np.int64(victim), np.bool_(True))
    rq.status[victim] = PREEMPTED
    rq.computed[victim] = 0
    rq.npreempt[victim] += 1
    pa.alog_n[1] += 1
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
    _push_front(rq.qnext, rq.qprev, rk.wait_head, rk.wait_tail, k, victim)
    rk.n_wait[k] += 1
    acc[PREEMPTED_ANY] = 1
    acc[PROGRESS] = 1


@inner
def _make_room(p, pool, rq, rk, k, r, pa):
    """An allocation for ``r`` failed: preempt the next victim. Returns 0 (another request was
    preempted: try again), 1 (``r`` preempted itself) or -1 (no victim left)."""
    # (preemption happens only while every running request is explicit: see the pass)
    victim = rk.xtail[k] if p.lifo else rk.xhead[k]
    if victim < 0:
        return -1
    if victim != r and not p.lifo and rq.status[r] == RUNNING:
        pa.acc[AHEAD] += 1  # Dynamo's loop is index based: the list shifts under it
    _preempt(p, pool, rq, rk, k, victim, pa)
    return 1 if victim == r else 0


# Inlined into the pass: a call would pass every column of the state tables (hundreds of
# arguments), which cost more than the function's own work; the rare preemption path stays a call.
@inline
def _schedule(p, pool, rq, rk, k, r, cached, pa):
    """Dynamo's ``schedule_request`` for ``r`` (``cached`` > 0 only for a request from waiting)."""
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
        j0 = _blocks_ceil(p, rq.alloc[r])
        j1 = _blocks_ceil(p, target)
        if j1 <= j0:  # the target stays inside the last allocated block
            rq.alloc[r] = target
            break
        n = j1 - j0
        # blocks of the cached prefix are hits; every other block is a new physical block, with
        # a slot if its key is shareable, else anonymous (kvpool): only those keys are needed
        n_hits = min(max(_blocks_floor(p, cached) - j0, 0), n)
        n_keyed = max(n_hits, min(max(nkeys - j0, 0), n))
        _fill_keys(rq, np.int64(r), j0, j0 + n_keyed, pa.kbuf)
        if can_use_nb(pool, k, pa.kbuf, n, n_hits):
            # hits occur only from the first block (an admission): ``hslot`` holds their slots
            alloc_nb(pool, k, pa.kbuf, n, rq.bslot, kbase + j0, n_hits, n_keyed,
                     max(nkeys - j0, 0), pa.hslot)
            if n_keyed > 0:
                rq.nheld[r] = j0 + n_keyed
            rq.alloc[r] = target
            break
        room = _make_room(p, pool, rq, rk, k, r, pa)
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
        register_nb(pool, k, rq.bslot, kbase, _blocks_floor(p, ecb), min(_blocks_floor(p, actual), nkeys))
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
def _schedule_running(p, pool, rq, rk, k, r, pa):
    """``_schedule`` of a running request that is not a plain decode step inside its blocks (a
    prefill chunk, a step into a new block): rarer than admissions, so a call."""
    return _schedule(p, pool, rq, rk, k, r, np.int64(0), pa)


# ----------------------------------------------------------------------------- steady decoding
# A running request whose prompt is computed and whose KV ends exactly at its last computed token
# takes one budget token per pass, emits one token per pass, and needs a new block every
# ``block_size`` passes: nothing about it changes between those events except by formula. Such a
# *steady* member leaves the explicit running list (it stays in the running list, which keeps the
# running order) and is kept implicit: ``generated`` holds its count at rank pass ``sbase``. Its
# decode step starts a new block in every pass with one residue mod ``block_size``: the rank
# counts its steady members by that residue (``bcnt``) and allocates a pass's new output blocks
# by the count. It is filed in its rank's due wheel under the pass of its last token (mod
# ``_DUE``). A pass then costs O(explicit members + members finishing), not O(running). It is
# exact: a pass runs this way only when its outcome cannot depend on where the steady members
# stand in the running order (every steady member gets its token, see ``_steady_ok``, and every
# allocation fits, so nothing is preempted); otherwise the rank first makes every member explicit
# again (``materialize_nb``), runs the one-at-a-time pass and stays explicit for a while
# (doubling holds). Completions and block releases still happen one request at a time, in
# running order (by ``seq``).
@inner
def _end_gen(p, rq, r):
    """Tokens ``r`` has generated when it finishes (its output length, or the model-length cap)."""
    e = rq.osl[r]
    if p.max_model_len > 0 and p.max_model_len - rq.isl[r] < e:
        e = p.max_model_len - rq.isl[r]
    return e


@inner
def _block_residue(p, rq, r):
    """Steady member ``r`` starts a new block in its decode step of every rank pass ``P`` with
    ``P % bs`` equal to this (its length before that step is ``isl + generated + P - sbase``)."""
    return _block_mod(p, rq.sbase[r] + 1 - rq.isl[r] - rq.generated[r])


@inner
def _due_pass(p, rq, r):
    """The rank pass in which steady member ``r`` emits its last token."""
    return rq.sbase[r] + _end_gen(p, rq, r) - rq.generated[r] - 1


@inner
def _steady_join(p, rq, rk, k, r):
    """Count steady member ``r`` (``sbase`` set) among its rank's block starts and file it under
    the pass of its last token."""
    bs = p.block_size
    rk.bcnt[k * bs + _block_residue(p, rq, r)] += 1
    b = k * _DUE + _due_pass(p, rq, r) % _DUE
    rq.wnext[r] = rk.wheel[b]
    rk.wheel[b] = r


@inner
def materialize_nb(p, rq, rk, k, pass_idx, prev_end):
    """Make every steady member of rank ``k`` explicit, with its exact state before rank pass
    ``pass_idx``; ``prev_end`` is the end of the rank's last pass (their last token)."""
    if rk.nsteady[k] == 0:
        return
    isl = rq.isl
    gen = rq.generated
    sbase = rq.sbase
    qnext = rq.qnext
    xnext = rq.xnext
    xprev = rq.xprev
    prev = -1
    cur = rk.run_head[k]
    while cur >= 0:
        if sbase[cur] >= 0:
            g = gen[cur] + (pass_idx - sbase[cur])
            gen[cur] = g
            rq.computed[cur] = isl[cur] + g - 1
            rq.alloc[cur] = isl[cur] + g - 1
            rq.last_token[cur] = prev_end
            sbase[cur] = -1
        xprev[cur] = prev
        xnext[cur] = qnext[cur]
        prev = cur
        cur = qnext[cur]
    rk.xhead[k] = rk.run_head[k]
    rk.xtail[k] = rk.run_tail[k]
    bs = p.block_size
    for b in range(k * bs, (k + 1) * bs):
        rk.bcnt[b] = 0
    for b in range(k * _DUE, (k + 1) * _DUE):
        rk.wheel[b] = -1
    rk.nsteady[k] = 0
    rk.smax[k] = -1
    rk.slen[k] = 0
    rk.sechead[k] = -1
    rk.secdue[k] = -1


@inner
def _steady_ok(p, pool, rq, rk, k, pass_idx):
    """True if this pass's outcome cannot depend on where the steady members stand in the running
    order: every steady member gets its token (the explicit members ahead of the last steady one
    get their whole demand and still leave one token per steady member; those behind it share
    what is left, in order, as in the one-at-a-time pass), and every block anyone may allocate
    fits the pool (so no allocation fails and nothing is preempted)."""
    bs = p.block_size
    isl = rq.isl
    gen = rq.generated
    need = rk.bcnt[k * bs + _block_mod(p, pass_idx)]
    demand = rk.nsteady[k]
    smax = rk.smax[k]
    cur = rk.xhead[k]
    while cur >= 0:
        length = isl[cur] + gen[cur]
        if rq.seq[cur] < smax:
            demand += length - rq.computed[cur]
        nb = _blocks_ceil(p, length) - _blocks_ceil(p, rq.alloc[cur])
        if nb > 0:
            need += nb
        cur = rq.xnext[cur]
    return demand <= p.budget and need <= p.cap - pool.meta[k, NACTIVE]


# ----------------------------------------------------------------------------- the pass
@inner
def _finish(p, pool, rq, rk, k, r, kind, pend_head, pend_tail, g, explicit):
    """Terminal bookkeeping at pass start; the caller applies it at the group's end."""
    if kind == TERM_COMPLETED or kind == TERM_HANDOFF:
        _stop_running(rq, rk, k, np.int64(r), np.bool_(explicit))
        if kind == TERM_COMPLETED:
            free_blocks_nb(p, pool, rq, k, r, np.bool_(False))
    rq.status[r] = FINISHING
    rq.term_kind[r] = kind
    rq.tnext[r] = -1
    if pend_tail[g] >= 0:
        rq.tnext[pend_tail[g]] = r
    else:
        pend_head[g] = r
    pend_tail[g] = r


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
    preemption), as ``_schedule`` does for a step into new blocks."""
    j0 = _blocks_ceil(p, rq.alloc[r])
    j1 = _blocks_ceil(p, target)
    if j1 > j0:
        n = j1 - j0
        kbase, nkeys = key_span(rq, r)
        n_keyed = min(max(nkeys - j0, 0), n)
        _fill_keys(rq, np.int64(r), j0, j0 + n_keyed, pa.kbuf)
        alloc_nb(pool, k, pa.kbuf, n, rq.bslot, kbase + j0, 0, n_keyed, max(nkeys - j0, 0), pa.hslot)
        if n_keyed > 0:
            rq.nheld[r] = j0 + n_keyed
    rq.alloc[r] = target


@inner
def _emit_mtp(p, pool, rq, rk, k, pa, ne, pend_head, pend_tail, g):
    """The emission of a pass with speculative decoding (Dynamo's speculative emit, decision
    0340): requests with nothing left to generate end; the others (``ready``, in running order)
    reserve the blocks of their largest possible step, ``min(nextn + 1, remaining)`` tokens
    each, preempting (lifo: the last running, fifo: the first) until that fits; then each draws
    its step's tokens from the rank's sampler and takes them, clipped to what it may still
    generate, with the blocks they need. The ready rows go to ``pa.emit`` from ``ne`` with their
    token counts in ``pa.burst``; returns (end of the rows, how many, their lengths before)."""
    isl = rq.isl
    osl = rq.osl
    gen = rq.generated
    comp = rq.computed
    alloc = rq.alloc
    xnext = rq.xnext
    emit = pa.emit
    burst = pa.burst
    mml = p.max_model_len
    thr = rk.mtp_thr
    rng = rk.mtp_rng
    first = ne
    cur = rk.xhead[k]
    while cur >= 0:
        nxt = xnext[cur]
        if comp[cur] >= isl[cur] + gen[cur]:
            if _remaining_nb(mml, isl, osl, gen, cur) == 0:
                kind = TERM_HANDOFF if p.stage == PREFILL else TERM_COMPLETED
                _finish(p, pool, rq, rk, k, np.int64(cur), np.int64(kind), pend_head, pend_tail, g,
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
            need += (_blocks_ceil(p, length + min(max_burst, _remaining_nb(mml, isl, osl, gen, r)))
                     - _blocks_ceil(p, length))
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
        _preempt(p, pool, rq, rk, k, victim, pa)
        j = first
        for i in range(first, ne):
            if emit[i] != victim:
                emit[j] = emit[i]
                j += 1
        ne = j
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
        if _blocks_ceil(p, length + b) > _blocks_ceil(p, alloc[r]):
            _extend_alloc(p, pool, rq, k, r, length + b, pa)
        else:
            alloc[r] = length + b
        comp[r] = length + b - 1  # the last token is computed by the next step
    if ne > first:
        pa.acc[PROGRESS] = 1
    return ne, ne - first, total_len


@llvm_inline
def rank_pass_nb(p, perf, pool, rq, rk, k, now, pa, pend_head, pend_tail, g, prev_end):
    """Run one forward pass of rank ``k`` (in group ``g``) starting at ``now``; returns its end.

    Rows that emit a token are appended to ``pa.emit``; steady members that emit (not listed) are
    counted in ``pa.ncommon``; terminals go on group ``g``'s pending list. ``pa.acc[PROGRESS]``
    tells whether the pass changed anything observable. ``prev_end`` is the end of the group's
    previous pass.
    """
    # Hot loops touch only these locals: reading an array out of a NamedTuple inside a loop costs
    # an NRT incref/decref pair per access, which dominated the run time before this hoisting.
    acc = pa.acc
    isl = rq.isl
    gen = rq.generated
    comp = rq.computed
    alloc = rq.alloc
    xnext = rq.xnext
    seq = rq.seq
    sbase = rq.sbase
    slog = pa.slog
    emit = pa.emit
    emit_n = pa.emit_n
    wake = pa.wake
    bs = p.block_size
    P = rk.rpass[k]
    rk.rpass[k] = P + 1
    ns = rk.nsteady[k]
    if ns > 0 and not _steady_ok(p, pool, rq, rk, k, P):
        materialize_nb(p, rq, rk, k, P, prev_end)
        rk.shold[k] = P + rk.sback[k]
        rk.sback[k] = min(2 * rk.sback[k], _HOLD_MAX)
        ns = 0
        rk.seqc[1] += 1
    elif ns > 0:
        rk.sback[k] = _HOLD0
        rk.seqc[2] += 1
    rk.secdue[k] = rk.sechead[k]
    rk.sechead[k] = -1
    # Steady members whose last token is in this pass, in running order (the others in their
    # due bucket stay filed there).
    nw = 0
    if ns > 0:
        b = k * _DUE + P % _DUE
        w = rk.wheel[b]
        keep = -1
        while w >= 0:
            nxt = rq.wnext[w]
            if _due_pass(p, rq, w) == P:
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
    acc[BUDGET] = p.budget
    acc[BCOUNT] = 0
    acc[BISL] = 0
    acc[BPREFIX] = 0
    acc[PREEMPTED_ANY] = 0
    defer = False
    if acc[THROTTLE] != 0 and rk.psi[k, 1] == 0:
        defer = _has_decode(rq, rk, k)
    nlog = 0  # schedules logged in this pass (synced with acc[NLOG] around calls)
    # Phase A: running requests, in running order. Steady members take one token each; those
    # whose step starts a block allocate it here, all at once: every allocation of this pass fits
    # (``_steady_ok``) and none is a cache hit, so the pool ends the same whatever their order
    # (the same blocks leave the LRU head) and their output blocks are anonymous.
    if ns > 0:
        nb = rk.bcnt[k * bs + _block_mod(p, P)]
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
        if c >= isl[cur] and length - c == 1 and _blocks_ceil(p, length) <= _blocks_ceil(p, alloc[cur]):
            # A decode step inside an allocated block: what _schedule would do, without the call.
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
        res = _schedule_running(p, pool, rq, rk, k, np.int64(cur), pa)
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
    # Phase B: waiting requests, FIFO, only if nothing was preempted.
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
            _unlink_waiting(rq, rk, k, u)
            if p.max_model_len > 0 and rq.isl[u] >= p.max_model_len:
                free_blocks_nb(p, pool, rq, k, np.int64(u), np.bool_(False))
                _finish(p, pool, rq, rk, k, np.int64(u), np.int64(TERM_REJECTED), pend_head, pend_tail,
                        g, np.bool_(True))
                acc[PROGRESS] = 1
                continue
            _start_running(rq, rk, k, u)
            rq.computed[u] = rq.isl[u]
            rq.first_admit[u] = now
            acc[PROGRESS] = 1
            if acc[BUDGET] == 0:
                break  # an admission that used no token with none left ends the admissions
            continue
        length = rq.isl[u] + rq.generated[u]
        fresh = rq.status[u] == WAITING
        if (p.max_model_len > 0 and rq.isl[u] >= p.max_model_len) or (
            fresh and _blocks_ceil(p, length) > p.cap
        ):
            _unlink_waiting(rq, rk, k, u)
            _finish(p, pool, rq, rk, k, np.int64(u), np.int64(TERM_REJECTED), pend_head, pend_tail, g,
                    np.bool_(True))
            acc[PROGRESS] = 1
            continue
        cached, active_cached, active = _cached_tokens(p, pool, rq, k, np.int64(u), pa.kbuf,
                                                       pa.hslot)
        if defer and length - cached > 1:
            break
        needed = _blocks_ceil(p, length) - active_cached
        if needed > p.cap - pool.meta[k, NACTIVE]:
            break  # head-of-line blocking: wait, never preempt for a waiting request
        before = acc[BUDGET]
        res = _schedule(p, pool, rq, rk, k, np.int64(u), np.int64(cached), pa)
        if res != SCHEDULED:
            break
        _unlink_waiting(rq, rk, k, u)
        _start_running(rq, rk, k, u)
        # (the reuse columns start at 0 and are written only on a hit: without hits, as in a
        # synthetic run, a fresh process never maps their pages)
        if np.isnan(rq.first_admit[u]):
            rq.first_admit[u] = now
            if cached > 0:
                rq.first_reused[u] = cached
        if cached > 0 and cached > rq.reused[u]:
            rq.reused[u] = cached
        if rq.npreempt[u] > 0:
            _log_readmission(p, pa, u, cached, now)
        acc[PROGRESS] = 1
        if before - acc[BUDGET] == 0 and acc[BUDGET] == 0:
            break
    if p.psi > 1 and not defer:
        rk.psi[k, 1] = 1 if rk.n_wait[k] > 0 else 0
    # Duration: prefill of this pass's prompt tokens.
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
            rk.seqc[5] += slog[i, 1]
            length = isl[r] + gen[r]
            if gen[r] == 0 and comp[r] >= length and not (
                    gen[r] >= osl[r] or (p.max_model_len > 0 and length >= p.max_model_len)):
                pf_n += 1
                pf_len += length
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
    if p.nextn > 0:  # speculative decoding: several tokens a step (no steady members then)
        ne, n_ready, total_len = _emit_mtp(p, pool, rq, rk, k, pa, ne, pend_head, pend_tail, g)
        cur = -1
    while cur >= 0:
        nxt = xnext[cur]
        length = isl[cur] + gen[cur]
        if comp[cur] >= length:
            if gen[cur] >= osl[cur] or (mml > 0 and length >= mml):
                # nothing left to generate (e.g. zero output tokens): ends without a token
                kind = TERM_HANDOFF if p.stage == PREFILL else TERM_COMPLETED
                _finish(p, pool, rq, rk, k, np.int64(cur), np.int64(kind), pend_head, pend_tail, g,
                        np.bool_(True))
                acc[PROGRESS] = 1
            else:
                n_ready += 1
                total_len += length
                gen[cur] += 1
                emit[ne] = cur
                ne += 1
                if (convert and comp[cur] == length and alloc[cur] == length
                        and gen[cur] < _end_gen(p, rq, cur) and rq.status[cur] == RUNNING):
                    _unlink(xnext, rq.xprev, rk.xhead, rk.xtail, k, cur)
                    sbase[cur] = P + 1
                    _steady_join(p, rq, rk, k, cur)
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
        if p.nextn > 0:  # a speculative step verifies every ready request, fresh ones too (decision 0340)
            pf_n = 0
            pf_len = 0
        n_dec = n_ready - pf_n
        if p.stage != PREFILL and n_dec > 0:  # a prefill worker's extra steps take no time (cluster doc C5)
            decode_ms = _step_ms(p, perf, rk, k, pool.meta[k, NACTIVE], total_len - pf_len, n_dec)
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
            eg = _end_gen(p, rq, w)
            g_now = gen[w] + (P - sbase[w])  # before this pass's token
            # its last token: explicit again, stamped with this pass's emitters
            rk.bcnt[k * bs + _block_residue(p, rq, w)] -= 1
            nfin += 1
            fin_len += isl[w] + g_now
            gen[w] = eg
            comp[w] = isl[w] + eg - 1
            alloc[w] = isl[w] + eg - 1
            rq.last_token[w] = prev_end
            sbase[w] = -1
            emit[ne] = w
            ne += 1
            _finish(p, pool, rq, rk, k, np.int64(w), np.int64(done_kind), pend_head, pend_tail, g,
                    np.bool_(False))
        else:
            cur = emit[i]
            i += 1
            if gen[cur] >= osl[cur] or (mml > 0 and isl[cur] + gen[cur] >= mml):
                _finish(p, pool, rq, rk, k, np.int64(cur), np.int64(done_kind), pend_head, pend_tail,
                        g, np.bool_(True))
    emit_n[0] = ne
    if ns > 0 or conv_n > 0:
        rk.nsteady[k] = ns - nfin + conv_n
        rk.slen[k] = rk.slen[k] - fin_len + (ns - nfin) + conv_len
        pa.ncommon[0] += ns - nfin
    return (now + prefill_ms) + decode_ms


@inline
def decode_ms_161(p, perf, total_len, n_ready):
    """A decode step's time under 1.6.1's rules, as the clock advances by it: ``n_ready``
    decoding requests of total length ``total_len`` (``_step_ms`` without its memo)."""
    ctx = total_len // n_ready if perf.kind != POLYNOMIAL else 0
    raw = decode_time_nb(perf, float(total_len), float(ctx), float(p.cap * p.block_size))
    return modeled_ms_nb(raw, p.speedup * p.decode_speedup)


@inline
def _step_ms(p, perf, rk, k, nact, total_len, n_ready):
    """Decode time of a pass of rank ``k`` with ``nact`` active blocks and ``n_ready`` requests
    of total length ``total_len``, through the rank's memo (its inputs often repeat). Under
    1.4.2's rules the active KV is the rank's ``nact`` blocks; under 1.6.1's it is ``total_len``
    tokens, the logical lengths of the decoding requests (Dynamo PR #12583)."""
    ctx = total_len // n_ready if perf.kind != POLYNOMIAL else 0
    if p.timing_rules == TIMING_161:
        if total_len == rk.dkey[k] and ctx == rk.dctx[k]:
            return rk.dms[k]
        decode_ms = decode_ms_161(p, perf, total_len, n_ready)
        rk.dkey[k] = total_len
        rk.dctx[k] = ctx
        rk.dms[k] = decode_ms
        return decode_ms
    if perf.kind == POLYNOMIAL and nact < rk.dtab.shape[0]:
        decode_ms = rk.dtab[nact]
        if decode_ms != decode_ms:
            decode_ms = _decode_ms(p, perf, nact, np.int64(0))
            rk.dtab[nact] = decode_ms
    elif nact == rk.dkey[k] and ctx == rk.dctx[k]:
        decode_ms = rk.dms[k]
    else:
        decode_ms = _decode_ms(p, perf, nact, ctx)
        rk.dkey[k] = nact
        rk.dctx[k] = ctx
        rk.dms[k] = decode_ms
    return decode_ms


# ----------------------------------------------------------------------------- steady passes
# A pass of a rank whose running requests are all steady members, with nothing waiting, nobody
# due to finish and every block start fitting the pool, changes only counters: each member takes
# one token, the members starting a block allocate it (anonymous blocks), and the decode time
# follows from the active block count. ``rank_pass_nb`` does exactly that in this state, through
# its general walks; ``steady_pass_nb`` does it directly. The event loop takes this light path
# for a group's pass that ends with nothing else due (see ``kernels/loop.py``); light loads,
# where a rank decodes alone for many passes between arrivals, are mostly made of such passes.
@inline
def steady_next_ok(p, pool, rq, rk, k, P, nact):
    """The part of ``steady_pass_ok`` that changes from one steady pass to the next: at rank pass
    ``P``, with ``nact`` active blocks, nobody is due and every block start fits the pool."""
    if rk.bcnt[k * p.block_size + _block_mod(p, P)] > p.cap - nact:
        return False
    w = rk.wheel[k * _DUE + P % _DUE]
    while w >= 0:
        if _due_pass(p, rq, w) == P:
            return False
        w = rq.wnext[w]
    return True


@inline
def steady_pass_ok(p, pool, rq, rk, k):
    """True if rank ``k``'s next pass is a steady pass (as above). Changes nothing."""
    ns = rk.nsteady[k]
    if ns == 0 or rk.n_wait[k] > 0 or rk.xhead[k] >= 0 or ns > p.budget or p.stage == PREFILL:
        return False
    return steady_next_ok(p, pool, rq, rk, k, rk.rpass[k], pool.meta[k, NACTIVE])


@inline
def steady_pass_ms(p, perf, pool, rk, k):
    """The decode time of rank ``k``'s next pass, a steady pass. Changes nothing but the rank's
    memo of step times."""
    nb = rk.bcnt[k * p.block_size + _block_mod(p, rk.rpass[k])]
    return _step_ms(p, perf, rk, k, pool.meta[k, NACTIVE] + nb, rk.slen[k], rk.nsteady[k])


@inline
def steady_pass_nb(p, perf, pool, rk, k, now):
    """Run rank ``k``'s next pass, a steady pass (``steady_pass_ok``), starting at ``now``; returns
    its end. The caller stamps the members' tokens (``nsteady`` of them share one gap) and the
    second tokens of ``rk.secdue[k]``, as for ``rank_pass_nb``."""
    P = rk.rpass[k]
    rk.rpass[k] = P + 1
    rk.sback[k] = _HOLD0
    rk.seqc[2] += 1
    rk.secdue[k] = rk.sechead[k]
    rk.sechead[k] = -1
    nb = rk.bcnt[k * p.block_size + _block_mod(p, P)]
    if nb > 0:
        alloc_anon_nb(pool, k, nb)
    ns = rk.nsteady[k]
    decode_ms = _step_ms(p, perf, rk, k, pool.meta[k, NACTIVE], rk.slen[k], ns)
    rk.slen[k] += ns
    return (now + 0.0) + decode_ms


@inner
def _decode_ms(p, perf, nact, ctx):
    """A decode step's time as the clock advances by it: ``nact`` active blocks on the rank, mean
    context ``ctx`` (grid timing only)."""
    raw = decode_time_nb(perf, float(nact * p.block_size), float(ctx), float(p.cap * p.block_size))
    return modeled_ms_nb(raw, p.speedup * p.decode_speedup)
