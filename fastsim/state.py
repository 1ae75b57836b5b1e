"""The tables of one simulation, each built from the workload, the engine and a
:class:`~fastsim.run_config.RunConfig`: the engine's scalars (``engine_params``), the prompt
blocks' keys, the request table, the router, and the whole state of an aggregated run
(``build_state``). The builders of each kernel table sit beside its field spec in ``kernels/``;
this module feeds them."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fastsim import arena, reuse
from fastsim.errors import InputError
from fastsim.kernels.rank_state import AWAITING_READMISSION, READMISSIONS
from fastsim.run_config import RunConfig

_BIG_BUDGET = 1 << 62


def engine_params(engine, stage=0, steady=True, fast=True, timing_rules=0):
    from fastsim.kernels.rank_state import Params
    from fastsim.trtllm_config import output_limit

    nextn = int(engine.aic_nextn or 0)
    if nextn:
        steady = False  # a step's tokens are drawn at random: no request decodes by formula
    # vLLM paces prefills across the ranks of an attention-DP group only (decision 0341)
    psi = int(engine.prefill_schedule_interval) if (engine.dp_size or 1) > 1 else 1
    if psi > 1:
        steady = False  # a rank's pass depends on the group's step count

    budget = engine.max_num_batched_tokens
    max_seqs = engine.max_num_seqs
    bs = int(engine.block_size)
    return Params(
        block_size=bs,
        cap=int(engine.num_gpu_blocks),
        max_seqs=int(max_seqs) if max_seqs is not None else _BIG_BUDGET,
        budget=int(budget) if budget is not None else _BIG_BUDGET,
        chunked=bool(engine.enable_chunked_prefill),
        caching=bool(engine.enable_prefix_caching),
        lifo=str(engine.preemption_mode).lower() == "lifo",
        max_model_len=output_limit(engine),
        speedup=float(engine.speedup_ratio),
        decode_speedup=float(engine.decode_speedup_ratio),
        stage=int(stage),
        steady=bool(steady),
        fast=bool(fast),
        timing_rules=int(timing_rules),
        bshift=bs.bit_length() - 1 if bs > 0 and bs & (bs - 1) == 0 else -1,
        trtllm=engine.engine_type == "trtllm",
        nextn=nextn,
        psi=psi,
        light_waiting=engine.host_offload is None and engine.engine_type != "trtllm",
    )


def mtp_ranks(engine, n_ranks, dp, first_worker=0):
    """``make_ranks`` keyword arguments for speculative decoding: the draft positions' acceptance
    rates and each rank's sampler seed, ``aic_mtp_seed`` plus its worker's id (decision 0340)."""
    if not engine.aic_nextn:
        return {}
    from fastsim.config import accept_rates

    seeds = [(int(engine.aic_mtp_seed) + first_worker + k) & 0xFFFFFFFFFFFFFFFF for k in range(n_ranks)]
    return dict(mtp_rates=accept_rates(engine.aic_nextn_accept_rates, int(engine.aic_nextn)), mtp_seeds=seeds)




def block_keys(workload, block_size, caching=True, sharing=None, every_block=False):
    """CSR of content keys of every full prompt block (empty rows for unique synthetic prompts).

    ``sharing`` (from :func:`sharing_groups`): only the leading blocks another request of the
    same group may share keep their keys (``kernels/blocks.py``, ``shared_block_keys_nb``); the
    others are private to their request, which the results cannot tell apart (decision 0276).
    ``every_block``: unique synthetic prompts get a key per full block too, each its own (a host
    KV tier stores every full prompt block, decision 0352)."""
    from fastsim.kernels.blocks import content_block_keys_nb, shared_block_keys_nb, unique_content_keys_nb

    n = workload.isl.shape[0]
    if workload.hash_ptr is None and caching and every_block:
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.asarray(workload.isl, dtype=np.int64) // block_size, out=ptr[1:])
        return ptr, unique_content_keys_nb(ptr)
    if workload.hash_ptr is None or not caching:
        # unique prompts, or prefix caching off: Dynamo gives every block a random id (never shared)
        return np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.uint64)

    def make():
        ptr = np.empty(n + 1, dtype=np.int64)
        # a delta session's later blocks hold generated tokens: only its first prompt is content
        key_isl = workload.isl if workload.key_isl is None else workload.key_isl
        args = (np.asarray(key_isl, dtype=np.int64), np.asarray(workload.hash_ptr, dtype=np.int64),
                np.asarray(workload.hash_ids, dtype=np.int64), int(workload.trace_block_size),
                int(block_size))
        if sharing is None:
            keys = content_block_keys_nb(*args, ptr)
        else:
            keys = shared_block_keys_nb(*args, _group_of_rows(sharing, n), ptr)
        return ptr, keys

    # the loop only reads them: a sweep's configurations of one trace share them (fastsim/reuse.py)
    return reuse.derived(workload, ("block_keys", int(block_size), sharing), make)


def sharing_groups(workload, router_mode, num_workers, replay_concurrency=None, schedule=(),
                   planner=None):
    """Which requests' pools can meet, for the block keys of a run (:func:`block_keys`): None
    (every full prompt block keeps its key) when a session's turns continue one stream's blocks
    (mooncake-delta); ``"workers"`` when request ``i`` goes to worker ``i % num_workers`` whatever
    happens (round robin, a fixed fleet, an open loop of single turns in arrival order:
    ``fastsim/shards.py``); ``"all"`` otherwise (any request may meet any other). kv_router reads
    the keys too, the same way: its overlaps (pools or KV-event index) and its table of active
    blocks take the blocks past a request's keyed ones as its own (``kernels/router.py``)."""
    if workload.stream_row is not None or workload.key_isl is not None:
        return None
    n = int(workload.isl.shape[0])
    if (router_mode != "round_robin" or replay_concurrency or schedule or planner is not None
            or workload.graph is not None or workload.session_ptr.shape[0] - 1 != n):
        return "all"
    first = np.asarray(workload.session_arrival_ms, dtype=np.float64)
    if not bool(np.all(first[1:] >= first[:-1])):
        return "all"
    return ("workers", int(num_workers))


def _group_of_rows(sharing, n):
    if sharing == "all":
        return np.zeros(n, dtype=np.int64)
    return np.arange(n, dtype=np.int64) % sharing[1]


def initial_table_size(rq, block_size, n_ranks):
    """Slots of the router's (rank, block) table at the start (``union_table_slots``): only blocks
    with a content key enter it (the others are unique to their request)."""
    blocks = int(np.minimum(rq.isl // block_size, np.diff(rq.key_ptr)).sum())
    return union_table_slots(blocks, int(rq.isl.shape[0]), n_ranks)


def union_table_slots(blocks, n_requests, n_ranks):
    """Slots of the router's (rank, block) table at the start, for ``n_requests`` requests holding
    ``blocks`` blocks that may enter it: four times the blocks of four average requests per
    target. The loop asks for a table four times larger whenever it is a quarter full
    (``grow_union_table``), so it stays about as small as the blocks in flight: a table sized for
    a long trace's every block would be mostly empty, and its probes would miss every cache
    (decision 0393)."""
    live = -(-blocks * 4 * n_ranks // max(n_requests, 1))
    size = 4096
    while size < 4 * live:
        size *= 2
    return size


def grow_union_table(rt):
    """``rt`` with its table of active blocks four times larger, holding the same entries."""
    from fastsim.kernels.router import move_table_nb

    size = 4 * rt.tab_key.shape[0]
    key = np.zeros(size, dtype=np.uint64)
    rank = np.full(size, -1, dtype=np.int32)
    cnt = np.zeros(size, dtype=np.int32)
    move_table_nb(rt.tab_key, rt.tab_rank, rt.tab_cnt, key, rank, cnt)
    return rt._replace(tab_key=key, tab_rank=rank, tab_cnt=cnt)


def router_state(router_mode, router_config, params, n, n_ranks, n_groups, table, seed,
                  record=False, queue_overlaps=False, kv_event_lag_ms=None, index_keys=1 << 62, priorities=None):
    """The router's configuration and state; ``record``: keep each kv_router request's routing
    figures (best overlap, router-queue release) for the per-request routing history;
    ``queue_overlaps``: keep the overlaps a queued request saw at its queue entry;
    ``kv_event_lag_ms`` (not None): the router reads overlaps from its own index, which the pool's
    KV events reach that long after their pass ends (None: from the pool, at once); ``index_keys``:
    a bound on the distinct content keys of the workload (with the pools' capacity, the most
    blocks a target's index can hold); ``priorities``: the requests' ``(priority, strict_priority)``
    arrays (``queue_priorities``), or None."""
    from fastsim.kernels.codes import KV_ROUTER, ROUND_ROBIN
    from fastsim.kernels.router import FCFS, LCFS, WSPT, Router
    from fastsim.router_config import RouterConfig

    cfg = RouterConfig.coerce(router_config)
    kv = router_mode == "kv_router"
    m = n if kv else 1
    return Router(
        mode=KV_ROUTER if kv else ROUND_ROBIN,
        pls=cfg.effective_prefill_load_scale,
        credit=cfg.effective_credit,
        temperature=float(cfg.router_temperature),
        track_prefill=bool(cfg.router_track_prefill_tokens),
        track_active=bool(cfg.router_track_active_blocks),
        dedup=bool(cfg.router_assume_kv_reuse),
        queue_thr=float(cfg.router_queue_threshold) if cfg.router_queue_threshold is not None else -1.0,
        policy={"fcfs": FCFS, "lcfs": LCFS, "wspt": WSPT}[cfg.router_queue_policy],
        budget=int(params.budget),
        decay=float(cfg.overlap_score_credit_decay),
        req_weight=float(cfg.decode_active_request_weight),
        pf=np.zeros(n_ranks, dtype=np.int64),
        active=np.zeros(n_ranks, dtype=np.int64),
        nreq=np.zeros(n_ranks, dtype=np.int64),
        tab_key=np.zeros(table, dtype=np.uint64),
        tab_rank=np.full(table, -1, dtype=np.int32),
        tab_cnt=np.zeros(table, dtype=np.int32),
        route_pf=np.zeros(m, dtype=np.int64),
        pf_open=np.zeros(m, dtype=np.bool_),
        fnext=np.full(m, -1, dtype=np.int32),
        fhead=np.full(n_groups, -1, dtype=np.int32),
        ftail=np.full(n_groups, -1, dtype=np.int32),
        queue=np.zeros(max(m, 1), dtype=np.int64),
        qkey=np.zeros(m),
        qseq=np.zeros(m, dtype=np.int64),
        **_queue_priority_columns(priorities, kv and cfg.router_queue_threshold is not None, m),
        cost=np.zeros(n_ranks),
        overlap=np.zeros(n_ranks, dtype=np.int64),
        rng=np.array([(int(seed) * 0x9E3779B97F4A7C15 + 12345) % (1 << 64)], dtype=np.uint64),
        state=np.zeros(4, dtype=np.int64),
        best=np.full(m if kv and record else 0, -1, dtype=np.int32),
        released=np.full(m if kv and record else 0, np.nan),
        qov=np.zeros((m, n_ranks) if kv and queue_overlaps and cfg.router_queue_threshold is not None
                     else (0, 1), dtype=np.int32),
        lag=-1.0 if kv_event_lag_ms is None else float(kv_event_lag_ms),
        index=_lagged_index(n_ranks * min(params.cap, index_keys) if kv_event_lag_ms is not None else 0),
        host=host_view(None, cfg.host_cache_hit_weight),
    )


def queue_priorities(workload):
    """The requests' ``(priority, strict_priority)`` arrays, or None when none of them raises a
    request in the router queue (every priority <= 0 and every strict priority 0): the queue then
    keeps its plain order (docs/decisions/0480)."""
    prio, strict = getattr(workload, "priority", None), getattr(workload, "strict_priority", None)
    if (prio is None or not np.any(prio > 0)) and (strict is None or not np.any(strict > 0)):
        return None
    n = workload.n_requests
    return (np.zeros(n, dtype=np.int64) if prio is None else prio,
            np.zeros(n, dtype=np.int64) if strict is None else strict)


def _queue_priority_columns(priorities, queued, m):
    """The router's ``qjump`` (each request's priority jump, max(priority, 0)) and ``qrank`` (its
    strict priority negated: the heap takes the lowest first), empty without a queue or priorities."""
    if priorities is None or not queued:
        return dict(qjump=np.zeros(0), qrank=np.zeros(0, dtype=np.int64))
    prio, strict = priorities
    return dict(qjump=np.maximum(prio[:m], 0).astype(np.float64), qrank=-strict[:m].astype(np.int64))


def host_view(ht, weight, n_ranks=0, n_recorded=0):
    """The kv_router's view of the host tiers ``ht`` (``kernels/host_tier.py``; None: no tier) of
    ``n_ranks`` ranks, with ``host_cache_hit_weight`` ``weight``: it shares the tier's arrays;
    ``n_recorded``: the requests whose routing figures are kept (0: none)."""
    from fastsim.kernels.router import HostView

    if ht is None:
        return HostView(weight=float(weight), tkey=np.zeros(0, dtype=np.uint64), tstate=np.zeros(0, dtype=np.int64),
                        tres=np.zeros(0), tmask=0, gkey=np.zeros(0, dtype=np.uint64), gres=np.zeros(0),
                        grem=np.zeros(0), gmeta=np.zeros((1, 17), dtype=np.int64),
                        now=np.zeros(1), dev=np.zeros(0, dtype=np.int64),
                        hcredit=np.zeros(0), chosen=np.zeros(0, dtype=np.int32))
    return HostView(weight=float(weight), tkey=ht.tkey, tstate=ht.tstate, tres=ht.tres, tmask=int(ht.tmask),
                    gkey=ht.gkey, gres=ht.gres, grem=ht.grem, gmeta=ht.meta,
                    now=np.zeros(1), dev=np.zeros(n_ranks, dtype=np.int64), hcredit=np.zeros(n_ranks),
                    chosen=np.full(n_recorded, -1, dtype=np.int32))


def _lagged_index(blocks):
    """An empty lagging index with room for ``blocks`` (rank, block) entries: the pools'
    capacity and the workload's content keys bound the blocks present at any time, so it never
    fills."""
    from fastsim.kernels.router import LaggedIndex

    size = 1
    while size < 2 * blocks + 2:
        size *= 2
    return LaggedIndex(tab_key=np.zeros(size, dtype=np.uint64), tab_rank=np.full(size, -1, dtype=np.int32),
                       tab_cnt=np.zeros(size, dtype=np.int32), state=np.zeros(4, dtype=np.int64))


def max_tokens(isl, osl):
    """The largest ``isl + osl`` of a workload (0 if empty), in one pass without a temporary
    (a fresh process pays about a page fault per 4 KB of new memory)."""
    from fastsim.kernels.scan import max_sum_nb

    if isl.shape[0] == 0:
        return 0
    return int(max_sum_nb(np.ascontiguousarray(isl, dtype=np.int64),
                          np.ascontiguousarray(osl, dtype=np.int64)))


def settle_unarrived(rq, n_arrived):
    """Give the rows that never arrived (a capped run, a dead end) the start ``arrive_nb`` gives
    an arriving row: unset times, no worker, no links (``sbase == 0`` marks them)."""
    if n_arrived >= rq.isl.shape[0]:
        return
    rows = np.flatnonzero(rq.sbase == 0)
    for col in (rq.arrival, rq.first_admit, rq.first_token, rq.second_token, rq.last_token,
                rq.terminal):
        col[rows] = np.nan
    for col in (rq.sbase, rq.rank, rq.qnext, rq.qprev, rq.xnext, rq.xprev):
        col[rows] = -1


def _stream_ids(workload):
    """``Reqs.kid``: empty when every prompt is its own; for a workload of growing session streams
    (``mooncake-delta``) the row starting each row's stream, bit-inverted (negative) on the rows
    whose blocks the session's next turn continues."""
    if workload.stream_row is None:
        return np.zeros(0, dtype=np.int64)
    kid = np.asarray(workload.stream_row, dtype=np.int64).copy()
    ptr, rows = workload.session_ptr, workload.session_rows
    last = np.zeros(kid.shape[0], dtype=np.bool_)
    last[rows[ptr[1:] - 1]] = True
    kid[~last] = ~kid[~last]
    return kid


def request_table(workload, key_ptr, keys, block_size, osl=None, huge_pages=True):
    """Per-request state; ``osl`` overrides the workload's output lengths (a prefill copy's);
    ``huge_pages``: see ``arena.columns`` (``huge``)."""
    from fastsim.kernels.rank_state import Reqs

    n = workload.isl.shape[0]
    isl = np.asarray(workload.isl, dtype=np.int64)
    osl = np.asarray(workload.osl if osl is None else osl, dtype=np.int64)
    if n and max_tokens(isl, osl) >= 2**31:
        row = int(np.argmax(isl + osl))
        raise InputError(f"request {row}: input plus output length {int(isl[row] + osl[row])} tokens; "
                         f"at most {2**31 - 1} are supported")

    # Two blocks of memory (fastsim/arena.py): the timestamps the report keeps, and the loop's
    # state, freed before the report is built. Three link columns share their memory with another,
    # which their row never uses at the same time: the pending-terminal link (tnext) with the
    # waiting/running link (qnext: a finishing request has left both lists), the due-wheel link
    # (wnext) with the explicit-list link (xnext) and the second-token link (snext) with xprev (a
    # steady request is not on the explicit list; making it explicit again discards the wheel and
    # the second-token lists). 12 bytes less per request.
    # A row's unset times (NaN) and links (-1) are written when it arrives
    # (``scheduler.arrive_nb``), while the row is in cache, and after a run by
    # :func:`settle_unarrived` for the rows that never arrived: the times start as the memory
    # comes, the state as zeros (``sbase == 0`` marks a row that never arrived).
    arrival, first_admit, first_token, second_token, last_token, terminal = arena.columns(
        n, [(np.float64, 0)] * 6, zeroed=False, huge=huge_pages)
    (seq, sbase, computed, generated, alloc, rank, qnext, qprev, npreempt, reused, first_reused,
     nheld, xnext, xprev, status, term_kind) = arena.columns(
        n, [(np.int64, 0)] * 2 + [(np.int32, 0)] * 12 + [(np.int8, 0)] * 2, huge=huge_pages)
    return Reqs(
        isl=isl,
        osl=osl,
        key_ptr=key_ptr,
        keys=keys,
        computed=computed,
        generated=generated,
        alloc=alloc,
        status=status,
        rank=rank,
        qnext=qnext,
        qprev=qprev,
        npreempt=npreempt,
        arrival=arrival,
        first_admit=first_admit,
        first_token=first_token,
        second_token=second_token,
        last_token=last_token,
        terminal=terminal,
        reused=reused,
        first_reused=first_reused,
        kid=_stream_ids(workload),
        tnext=qnext,
        term_kind=term_kind,
        bslot=np.zeros(keys.shape[0], dtype=np.int32),
        nheld=nheld,
        seq=seq,
        sbase=sbase,
        wnext=xnext,
        xnext=xnext,
        xprev=xprev,
        snext=xprev,
    )


def session_table(workload, concurrency):
    """The arrival structure of ``workload`` (``concurrency`` > 0: closed loop)."""
    n = workload.isl.shape[0]
    first = np.asarray(workload.session_arrival_ms, dtype=np.float64)
    graph = _no_graph() if workload.graph is None else graph_table(workload.graph)
    agentic = graph.play.shape[0] > 0
    n_static = 0 if concurrency else int(first.shape[0])
    if agentic:
        # the roots of an open replay arrive at their own times (``graph.rel``): static arrivals in
        # time then row order; with lanes the plays start them (kernels/agentic.py)
        roots = np.flatnonzero(graph.ndeps == 0) if not graph.lanes else np.zeros(0, dtype=np.int64)
        first = 0.0 + graph.rel  # (the time the heap had: a play start of 0 plus rel)
        order = roots[np.argsort(first[roots], kind="stable")].astype(np.int64)
        n_static = int(order.shape[0])
    elif concurrency or first.shape[0] < 2 or bool(np.all(first[1:] >= first[:-1])):
        order = np.zeros(0, dtype=np.int64)  # (traces and synthetic loads usually come sorted)
    else:
        order = np.argsort(first, kind="stable")
    if not concurrency and workload.session_ptr.shape[0] - 1 == n and not agentic:
        tie = np.zeros(0, dtype=np.int64)  # single-turn open loop: the heap stays empty
    else:
        tie = (workload.session_ptr[workload.session] + workload.turn).astype(np.int64)
    from fastsim.kernels.loop import Sessions

    return Sessions(
        session=np.asarray(workload.session, dtype=np.int64),
        turn=np.asarray(workload.turn, dtype=np.int64),
        delay=np.asarray(workload.delay_ms, dtype=np.float64),
        ptr=np.asarray(workload.session_ptr, dtype=np.int64),
        rows=np.asarray(workload.session_rows, dtype=np.int64),
        first_arrival=first,
        order=order,
        n_static=n_static,
        tie=tie,
        # (written only for rows entering the heap, which a single-turn open loop never uses)
        ready_at=np.zeros(n if tie.shape[0] else 1),
        heap=np.zeros(max(n, 1) if tie.shape[0] else 1, dtype=np.int64),
        cur=np.full(1, -1, dtype=np.int64),
        cur_t=np.full(1, np.inf),
        graph=graph,
    )


def _no_graph():
    """The empty graph of an ordinary workload."""
    from fastsim.kernels.agentic import Graph

    z = np.zeros(0, dtype=np.int64)
    f = np.zeros(0)
    return Graph(lanes=0, play=z, ndeps=z, ready=f, rel=f, out_ptr=np.zeros(1, dtype=np.int64), out_row=z,
                 out_delay=f, out_trigger=np.zeros(0, dtype=np.int8), play_ptr=np.zeros(1, dtype=np.int64),
                 play_rows=z, left=z, start=f, settled=f, lane=z, next_play=np.zeros(1, dtype=np.int64),
                 fate=np.zeros(1, dtype=np.int64))


def graph_table(g):
    """The loop's state of an :class:`fastsim.traces.graph.AgenticGraph` (fresh for each run)."""
    from fastsim.kernels.agentic import Graph

    n_plays = g.n_plays
    nb = g.not_before_ms
    if g.lanes:
        rel = nb - g.play_root_min[g.play]  # from the play's start, less its earliest root
    else:
        rel = nb - nb.min()  # from the trace's earliest time
    return Graph(
        lanes=int(g.lanes), play=g.play.astype(np.int64), ndeps=g.ndeps.astype(np.int64).copy(),
        ready=np.full(nb.shape[0], -np.inf), rel=np.asarray(rel, dtype=np.float64),
        out_ptr=g.out_ptr, out_row=g.out_row, out_delay=g.out_delay, out_trigger=g.out_trigger,
        play_ptr=g.play_ptr, play_rows=g.play_rows, left=np.diff(g.play_ptr).astype(np.int64),
        start=np.full(n_plays, np.nan), settled=np.full(n_plays, np.nan),
        lane=np.full(n_plays, -1, dtype=np.int64), next_play=np.zeros(1, dtype=np.int64),
        fate=np.zeros(nb.shape[0] + 1, dtype=np.int64),
    )


class SimState(NamedTuple):
    """Every table of one aggregated simulation, in the order the event loop takes them."""

    n_requests: int
    params: object  # kernels.scheduler.Params
    perf: object  # the timing model (kernels/perf.py)
    pool: object  # kernels.kvpool.KVPool: every rank's KV blocks
    requests: object  # kernels.scheduler.Reqs
    ranks: object  # kernels.scheduler.Ranks
    sessions: object  # kernels.loop.Sessions
    cluster: object  # kernels.loop.Cluster
    gaps: object  # kernels.loop.Gaps
    fleet: object  # kernels.fleet.Fleet
    scratch: object  # kernels.scheduler.PassAcc

    def tables(self):
        """The tables as ``run_loop_nb`` takes them (all but the router and the output)."""
        return (self.params, self.perf, self.pool, self.requests, self.ranks, self.sessions, self.cluster,
                self.gaps, self.fleet, self.scratch)


def build_state(workload, engine, run: RunConfig) -> SimState:
    """Allocate every table of one simulation of ``workload`` on ``engine`` workers, shaped by
    ``run`` (``run.worker_rows`` workers of ``run.dp`` ranks each)."""
    from fastsim.kernels.fleet import make_fleet
    from fastsim.kernels.kvpool import make_pool
    from fastsim.kernels.loop import make_cluster, new_gaps
    from fastsim.kernels.rank_state import make_pass_acc, make_ranks
    from fastsim.perf import engine_perf_model

    params = engine_params(engine, steady=run.steady_decode, fast=run.light_ticks, timing_rules=run.timing_rules)
    n = int(workload.isl.shape[0])
    rows, dp = run.worker_rows, run.dp
    bs = params.block_size
    key_ptr, keys = block_keys(workload, bs, params.caching, run.sharing,
                               every_block=engine.host_offload is not None)
    concurrency = int(run.replay_concurrency or 0)
    max_blocks = int((max_tokens(workload.isl, workload.osl) if n else 1) // bs + 2)
    per_rank = min(params.max_seqs, max(n, 1)) + 1
    perf = engine_perf_model(engine)
    requests = request_table(workload, key_ptr, keys, bs, huge_pages=run.huge_pages)
    pool = make_pool(rows * dp, params.cap, run.kv_events, feed_streams=workload.stream_row is not None)
    ranks = make_ranks(rows * dp, bs, params.cap, params.budget, **mtp_ranks(engine, rows * dp, dp))
    sessions = session_table(workload, concurrency)
    cluster = make_cluster(rows, dp, concurrency, run.single_path, run.max_sim_time_ms, run.tick_log)
    gaps = new_gaps(rows, skip=run.gap_skip,
                    tl=request_timelines(workload, rows * dp, per_rank, run.gap_ring, log=run.gap_log,
                                       exact=run.exact_gap_stats))
    fleet = make_fleet(rows, run.num_workers, engine.startup_time, run.planner_interval_ms,
                       run.telemetry_interval_ms, run.schedule, _TELEMETRY_ROWS if run.telemetry_interval_ms else 0)
    scratch = make_pass_acc(max_blocks, dp * (per_rank - 1) + 1, per_rank, run.readmission_log,
                            bursts=params.nextn > 0)
    return SimState(n, params, perf, pool, requests, ranks, sessions, cluster, gaps, fleet, scratch)


def request_timelines(workload, n_ranks, per_rank, ring=0, records=0, log=False, exact=True):
    """The requests' token-time records (``kernels/timelines.py``) on ``n_ranks`` ranks of at most
    ``per_rank`` running requests: a ring as wide as ``ring``, or as the longest output needs, and
    first room for ``records``, or a few records per request that can be in flight; ``log``: a
    shard's, which logs its completions (room for every running request's gaps)."""
    from fastsim.kernels.timelines import new_timelines, ring_width

    if not exact:  # none kept: the pooled sums stand in (gap_statistics="pooled", decision 0286)
        return new_timelines(0, n_ranks, 1, 0)
    n = int(workload.isl.shape[0])
    longest = int(workload.osl.max()) if n else 1
    in_flight = min(n, n_ranks * per_rank)
    return new_timelines(n, n_ranks, ring or ring_width(longest), records or 4 * in_flight + 1024,
                         log_room=in_flight * (longest + 3) if log else 0)


# first room for telemetry samples (it doubles as needed, up to fastsim.memory's cap)
_TELEMETRY_ROWS = 4096


def grow_readmission_log(pa):
    """The pass scratch with room for twice the readmissions (and every preempted request)."""
    n, pending = int(pa.alog_n[READMISSIONS]), int(pa.alog_n[AWAITING_READMISSION])
    cap = max(2 * pa.alog.shape[0], n + pending + 64)
    alog, alog_t = np.zeros((cap, 3), dtype=np.int64), np.zeros(cap)
    m = min(n, pa.alog.shape[0])
    alog[:m] = pa.alog[:m]
    alog_t[:m] = pa.alog_t[:m]
    return pa._replace(alog=alog, alog_t=alog_t)


def grow_telemetry(fl, cap=None, interval_ms=None):
    """Twice the telemetry capacity, keeping the rows recorded so far; at ``cap`` rows, telemetry
    stops with a warning instead (the simulation itself goes on)."""
    if cap is not None and fl.tel_t.shape[0] >= cap:
        import warnings

        from fastsim.errors import FastsimWarning

        warnings.warn(
            f"telemetry stopped at {fl.tel_t[fl.tel_t.shape[0] - 1]:.6g} ms after {fl.tel_t.shape[0]} "
            f"rows, the most a run may hold (a quarter of the available memory); later samples are "
            f"missing: raise --telemetry-interval-ms (now {interval_ms!r})",
            FastsimWarning, stacklevel=3)
        return fl._replace(tel_ms=0.0)

    def grow(a):
        b = np.zeros(min(max(2 * a.shape[0], 4096), cap or 1 << 62), dtype=a.dtype)
        b[: a.shape[0]] = a
        return b

    return fl._replace(**{f: grow(getattr(fl, f)) for f in
                          ("tel_t", "tel_w", "tel_run", "tel_wait", "tel_kv", "tel_cached", "tel_passes")})
