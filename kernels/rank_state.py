"""The vLLM scheduler's tables: the engine's scalars (``Params``), the requests (``Reqs``), the
per-rank queues and steady-decoding state (``Ranks``), one pass's scratch (``PassAcc``), their
builders and the names of their slots."""

from typing import NamedTuple

import numpy as np

from fastsim.kernels.codes import TIMING_142
from fastsim.kernels.mtp import accept_thresholds, new_streams


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
    steady: bool = True  # keep steadily decoding requests implicit (kernels/steady.py)
    bshift: int = -1  # log2(block_size) when it is a power of two (divisions become shifts), else -1
    fast: bool = True  # run passes that only advance steady members on the light path (``steady_pass_nb``)
    timing_rules: int = TIMING_142  # TIMING_142 or TIMING_161 (see ``step_ms``)
    trtllm: bool = False  # TRT-LLM's no-evict admission (kernels/trtllm.py) instead of vLLM's
    nextn: int = 0  # speculative decoding (MTP): draft tokens per decode step, 0 = off (kernels/speculative.py)
    psi: int = 1  # vLLM's prefill_schedule_interval across a DP group's ranks (decision 0341)
    # steady passes may run while the waiting queue's head cannot be admitted (``waiting_blocked``);
    # off where an admission does more than the vLLM pool's check (a host tier, TRT-LLM's reservations)
    light_waiting: bool = True

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
    tnext: np.ndarray  # int32: pending-terminal list link (the same memory as qnext: state.request_table)
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
    # session's next turn continues r's blocks (state._stream_ids)
    kid: np.ndarray

class Speculation(NamedTuple):
    """Speculative decoding's draws: the draft positions' acceptance thresholds and each rank's
    generator (kernels/mtp.py)."""

    thresholds: np.ndarray  # uint64[nextn]
    streams: np.ndarray  # uint32[R, mtp.ROW]


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
    wheel: np.ndarray  # int32[R * DUE]: due buckets (last-token pass mod DUE)
    bcnt: np.ndarray  # int64[R * block_size]: steady members starting a block, by pass mod block_size
    sechead: np.ndarray  # int32[R]: steady members whose next token is their second
    secdue: np.ndarray  # int32[R]: ... those of the pass in flight (stamped with its end)
    shold: np.ndarray  # int64[R]: no new steady members before this rank pass
    sback: np.ndarray  # int64[R]: current hold length after a fallback
    smax: np.ndarray  # int64[R]: at least the largest running order (seq) of a steady member
    counters: np.ndarray  # int64[2], by the slots below: the next admission's running order, and the
    #                       prompt tokens of the schedules that compute them (1.6.1 rules only)
    diag: np.ndarray  # int64[6], by the slots below: counts for tests and profiling, never read by
    #                   the simulation (steady-decode fallbacks and passes, light ticks, arrival
    #                   ticks on the light path, group passes run ahead in steady runs: kernels/loop.py)
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
    resv: np.ndarray  # int64[R]: TRT-LLM's reserved blocks (kernels/trtllm.py; 0 for vLLM)
    # speculative decoding's draws (kernels/mtp.py), None when it is off: the kernels branch on
    # ``is None``, which numba settles while compiling, so a run without it compiles none of it
    speculation: object
    # prefill_schedule_interval: [group step counter (at the group's first rank), this rank's
    # "the last open step left requests waiting" flag]
    psi: np.ndarray  # int64[R, 2]

ADMISSIONS, COMMITTED_TOKENS = range(2)  # ``Ranks.counters`` slots

(DIAG_FALLBACKS, DIAG_STEADY_PASSES, DIAG_LIGHT_TICKS, DIAG_LIGHT_ARRIVALS, DIAG_RUN_AHEAD_PASSES,
 DIAG_LIGHT_WAITING) = range(6)  # ``Ranks.diag`` slots

HOLD0, HOLD_MAX = 8, 4096  # passes a rank stays explicit after a fallback (doubling)

DUE = 256  # due-wheel buckets per rank: a member is looked at once per DUE passes until due

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
        wheel=np.full(n_ranks * DUE, -1, dtype=np.int32),
        bcnt=np.zeros(n_ranks * block_size, dtype=np.int64), sechead=heads(), secdue=heads(),
        shold=np.zeros(n_ranks, dtype=np.int64), sback=np.full(n_ranks, HOLD0, dtype=np.int64),
        smax=np.full(n_ranks, -1, dtype=np.int64),
        counters=np.zeros(2, dtype=np.int64), diag=np.zeros(6, dtype=np.int64),
        dkey=np.full(n_ranks, -1, dtype=np.int64), dctx=np.zeros(n_ranks, dtype=np.int64),
        dms=np.zeros(n_ranks), pkey=np.full(n_ranks, -1, dtype=np.int64), pms=np.zeros(n_ranks),
        dtab=np.full(cap + 1 if cap <= _DTAB_MAX else 0, np.nan),
        ptab=np.full(min(budget, _PTAB_MAX) + 1, np.nan),
        resv=np.zeros(n_ranks, dtype=np.int64),
        speculation=(Speculation(accept_thresholds(mtp_rates), new_streams(mtp_seeds))
                     if len(mtp_rates) else None),
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
    alog_n: np.ndarray  # int64[2], by the slots below
    # speculative decoding: the tokens each row of ``emit`` got in its pass (empty: one each)
    burst: np.ndarray  # int32[len(emit)] or int32[0]

BUDGET, BCOUNT, BISL, BPREFIX, PREEMPTED_ANY, PROGRESS, SELF_NEXT, AHEAD, NLOG, HANDED_FIRST, THROTTLE = range(11)

READMISSIONS, AWAITING_READMISSION = range(2)  # ``PassAcc.alog_n`` slots

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
