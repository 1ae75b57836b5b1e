"""Build the simulation state, run the compiled loop, wrap the results in a Report."""

from __future__ import annotations

import math
import time
from typing import NamedTuple

import numpy as np

from fastsim import arena, progress, reuse
from fastsim.dead_end import dead_end_error
from fastsim.errors import InputError
from fastsim.pages import with_small_pages
from fastsim.trace_checks import check_workload
from fastsim.workload import session_labels

_BIG_BUDGET = 1 << 62


def _engine_params(engine, stage=0, steady=True, fast=True, timing_rules=0):
    from fastsim.kernels.scheduler import Params

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
        max_model_len=int(engine.max_model_len or 0),
        speedup=float(engine.speedup_ratio),
        decode_speedup=float(engine.decode_speedup_ratio),
        stage=int(stage),
        steady=bool(steady),
        fast=bool(fast),
        timing_rules=int(timing_rules),
        bshift=bs.bit_length() - 1 if bs > 0 and bs & (bs - 1) == 0 else -1,
    )


def _block_keys(workload, block_size, caching=True, sharing=None):
    """CSR of content keys of every full prompt block (empty rows for unique synthetic prompts).

    ``sharing`` (from :func:`sharing_groups`): only the leading blocks another request of the
    same group may share keep their keys (``kernels/blocks.py``, ``shared_block_keys_nb``); the
    others are private to their request, which the results cannot tell apart (decision 0276)."""
    from fastsim.kernels.blocks import content_block_keys_nb, shared_block_keys_nb

    n = workload.isl.shape[0]
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
    """Which requests' pools can meet, for the block keys of a run (:func:`_block_keys`): None
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


def _initial_table_size(rq, block_size, n_ranks):
    """Slots of the router's (rank, block) table: twice a generous bound on live entries (only
    blocks with a content key enter it: the others are unique to their request)."""
    n = rq.isl.shape[0]
    blocks = int(np.minimum(rq.isl // block_size, np.diff(rq.key_ptr)).sum())
    # in-flight requests rarely exceed a few thousand per target; the table grows if they do
    live = blocks if n <= 4096 * n_ranks else int(blocks * (4096 * n_ranks) / n)
    size = 1024
    while size < 2 * live + 2:
        size *= 2
    return size


def _router_state(router_mode, router_config, params, n, n_ranks, n_groups, table, seed,
                  record=False, queue_overlaps=False, kv_event_lag_ms=None, index_keys=1 << 62):
    """The router's configuration and state; ``record``: keep each kv_router request's routing
    figures (best overlap, router-queue release) for the per-request routing history;
    ``queue_overlaps``: keep the overlaps a queued request saw at its queue entry;
    ``kv_event_lag_ms`` (not None): the router reads overlaps from its own index, which the pool's
    KV events reach that long after their pass ends (None: from the pool, at once); ``index_keys``:
    a bound on the distinct content keys of the workload (with the pools' capacity, the most
    blocks a target's index can hold)."""
    from fastsim.kernels.router import FCFS, KV_ROUTER, LCFS, ROUND_ROBIN, WSPT, LaggedIndex, Router
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
    )


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


# Initial room in the pool's KV event feed of a lagging router: the events of a lag window
# (it grows, and the run starts again, if a window holds more)
_KV_EVENTS = 1 << 16


def _check_kv_event_lag(lag, router_mode, version):
    """Dynamo 1.6.1's rules for ``kv_event_lag_ms`` (None or 0: no lag); returns the lag."""
    import math

    if lag is None:
        return 0.0
    if isinstance(lag, bool) or not isinstance(lag, (int, float, np.integer, np.floating)):
        raise InputError(f"kv_event_lag_ms is {lag!r}; it must be a number of milliseconds")
    lag = float(lag)
    if not math.isfinite(lag) or lag < 0:
        raise InputError(f"kv_event_lag_ms must be finite and non-negative, got {lag:g}")
    if lag > 0 and router_mode != "kv_router":
        raise InputError("kv_event_lag_ms only supports router_mode='kv_router'")
    if lag > 0 and version == "1.4.2":
        raise InputError("kv_event_lag_ms is a Dynamo 1.6.1 option: Dynamo 1.4.2 has no KV event lag "
                         "(use dynamo_version='1.6.1')")
    return lag


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


def _requests(workload, key_ptr, keys, block_size, osl=None, huge_pages=True):
    """Per-request state; ``osl`` overrides the workload's output lengths (a prefill copy's);
    ``huge_pages``: see ``arena.columns`` (``huge``)."""
    from fastsim.kernels.scheduler import Reqs

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


_KERNELS_LOADED = False


def _load_kernels():
    """Load (or compile) the loop kernels once per process, outside the timed region.

    ``wall_time_ms`` is the simulation's own time, as Dynamo's is the time of its Rust core (which
    excludes loading its extension module); the one-time load of cached machine code is not part
    of a simulation.
    """
    global _KERNELS_LOADED
    if _KERNELS_LOADED:
        return
    _KERNELS_LOADED = True
    import sys

    from fastsim import warmup
    from fastsim.config import EngineArgs
    from fastsim.workload import synthetic

    if not warmup.cached("run_loop_nb"):
        sys.stderr.write("fastsim: compiling the simulation kernels for this machine "
                         "(first run only, under a minute; later runs load them from the cache; "
                         "'fastsim warmup' does it ahead)\n")
        sys.stderr.flush()
    w = synthetic(16, 2, 1, arrival_interval_ms=1.0)
    # a one-row trace too, so that the block-identity kernel of trace replays is loaded as well
    w.hash_ptr = np.array([0, 1], dtype=np.int64)
    w.hash_ids = np.array([1], dtype=np.int64)
    w.trace_block_size = 16
    simulate(w, EngineArgs(block_size=16))
    simulate(w, EngineArgs(block_size=16), num_workers=2, threads=2)  # a split run's kernels


@with_small_pages
def simulate(
    workload,
    engine,
    *,
    num_workers: int = 1,
    router_mode: str = "round_robin",
    replay_concurrency: int | None = None,
    max_sim_time_ms: float | None = None,
    sla=(None, None, None),
    router_config=None,
    seed: int = 0,
    scaling_schedule=None,
    planner=None,
    planner_interval_ms: float | None = None,
    max_workers: int | None = None,
    telemetry_interval_ms: float | None = None,
    debug: bool | None = None,
    steady_decode: bool = True,
    light_ticks: bool = True,
    threads: int | None = None,
    dynamo_version: str | None = None,
    gap_skip=None,
    kv_event_lag_ms: float = 0.0,
):
    """Simulate ``workload`` on a cluster of aggregated workers; returns a :class:`Report`.

    * ``dynamo_version``: the release reproduced, ``"1.6.1"`` (default) or ``"1.4.2"``
      (``fastsim/dynamo_version.py``).

    * ``router_mode``: ``round_robin`` or ``kv_router`` (configured by ``router_config``, a
      :class:`fastsim.router_config.RouterConfig`; ``seed`` drives its tie-breaking).
    * ``scaling_schedule``: ``[[t_ms, workers], ...]`` target worker counts over virtual time;
      new workers take ``engine.startup_time`` seconds to start; scale-down cancels pending
      startups first, then drains the highest-id workers.
    * ``planner``: a callable ``planner(state) -> target or None`` called every
      ``planner_interval_ms`` of virtual time with a :class:`PlannerState`; the compiled loop
      returns to Python only at those ticks. ``max_workers`` bounds how many workers it may create.
    * ``telemetry_interval_ms``: per-worker samples (``Report.workers``).
    * ``debug`` (default: the ``FASTSIM_DEBUG`` environment variable): check the invariants of
      :mod:`fastsim.invariants` on the final state (uncapped runs).
    * ``steady_decode``: keep steadily decoding requests implicit between their block allocations
      (an exact optimisation, see ``kernels/scheduler.py``); False runs every request through every
      pass, which gives the same results more slowly (for checking).
    * ``light_ticks``: handle a tick that only ends a group's pass and starts its next one, made
      of steady passes alone, and an arrival tick whose arrivals all join groups in mid-pass, on
      light paths instead of the full tick (exact optimisations, see ``kernels/loop.py``); False
      for checking.
    * ``threads``: a round-robin cluster whose workers never meet (an open loop of single-turn
      requests, no scaling, no telemetry, no time cap) is simulated as that many shards of its
      workers side by side, one thread each, with the same results (``fastsim/shards.py``).
      Default: the ``FASTSIM_THREADS`` environment variable, else the cores this process may use,
      for runs of at least 50,000 requests. 1: never split (a sweep running one simulation per
      core).
    * ``kv_event_lag_ms`` (Dynamo 1.6.1, kv_router only): the router's indexer sees the blocks
      stored and removed on the workers that much virtual time later (docs/decisions/0230).
    * ``gap_skip`` (internal): rows whose inter-token gaps stay out of the statistics (below).

    A run cut short by ``max_sim_time_ms`` reports the inter-token statistics of its completed
    requests only, as Dynamo 1.4.2 does (it pools a request's gaps when it completes): the
    requests left in flight are known only at the end, so the run is made again, every request
    explicit, with their gaps left out (docs/decisions/0026).
    * ``dynamo_version``: the Dynamo release whose report is reproduced (``"1.6.1"`` or
      ``"1.4.2"``); 1.6.1's per-request records carry routing and admission histories, which the
      loop then keeps (a readmission log, and the kv_router's figures).
    """
    args = dict(locals())
    from fastsim import shards
    from fastsim.dynamo_version import check_version, timing_rules
    from fastsim.kernels.scheduler import TIMING_161
    from fastsim.kernels.loop import (DEAD_END, LOG_FULL, NARRIVED, NDONE, PLANNER_TICK, SIM_CAP, TABLE_FULL,
                                      TELEMETRY_FULL, run_loop_nb)

    version = check_version(dynamo_version)
    rules = timing_rules(version)

    if router_mode not in ("round_robin", "kv_router"):
        raise InputError(f"router_mode is {router_mode!r}; allowed: 'round_robin', 'kv_router'")
    if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)) or num_workers < 1:
        raise InputError(f"num_workers is {num_workers!r}; it must be a positive integer")
    if replay_concurrency is not None and replay_concurrency < 1:
        raise InputError(f"replay_concurrency is {replay_concurrency}; it must be a positive integer")
    schedule = _check_schedule(scaling_schedule)
    if planner is not None and not callable(planner):
        raise InputError("planner must be a callable planner(state) -> target worker count or None")
    if planner is not None and (planner_interval_ms is None or not planner_interval_ms > 0):
        raise InputError("planner needs planner_interval_ms > 0 (how often it is called, in virtual ms)")
    if telemetry_interval_ms is not None and not telemetry_interval_ms > 0:
        raise InputError(f"telemetry_interval_ms is {telemetry_interval_ms!r}; it must be > 0")
    lag = _check_kv_event_lag(kv_event_lag_ms, router_mode, version)
    # Dynamo 1.6.1's kv_router learns a pass's stored and removed blocks from the KV events
    # published when the pass ends, even without a lag (1.4.2's sees the pool at once). Not yet
    # for mooncake-delta streams (their blocks reach the pool by other paths: see 0230)
    if router_mode != "kv_router" or version != "1.6.1" or (lag == 0 and workload.stream_row is not None):
        lag = None

    check_workload(workload)
    if engine.engine_type == "sglang":  # the SGLang engine has its own driver
        from fastsim.sim_sglang import simulate_sglang

        return simulate_sglang(workload, engine, num_workers=num_workers, router_mode=router_mode, version=version,
                               replay_concurrency=replay_concurrency, max_sim_time_ms=max_sim_time_ms,
                               scaling_schedule=schedule, planner=planner,
                               telemetry_interval_ms=telemetry_interval_ms, sla=sla)
    tel_cap = _check_telemetry(workload, num_workers, telemetry_interval_ms)
    check_memory(workload, engine, _worker_rows(num_workers, schedule, planner, max_workers),
                 telemetry=bool(telemetry_interval_ms), kv_router=router_mode == "kv_router",
                 num_workers=num_workers, schedule=schedule, planner=planner)
    history = _history_kept(dynamo_version)
    n_shards = shards.plan(workload, threads=threads, num_workers=num_workers, router_mode=router_mode,
                           replay_concurrency=replay_concurrency, max_sim_time_ms=max_sim_time_ms,
                           schedule=schedule, planner=planner,
                           telemetry_interval_ms=telemetry_interval_ms)
    _load_kernels()
    t0 = time.perf_counter()
    dp = max(int(engine.dp_size or 1), 1)
    if n_shards > 1:
        report = _simulate_split(workload, engine, n_shards, t0, num_workers=num_workers, dp=dp,
                                 sla=sla, seed=seed, debug=debug, steady_decode=steady_decode,
                                 light_ticks=light_ticks, version=version, history=history)
        if report is not None:
            return report
        # the shards readmitted preempted requests, whose admissions they do not log: run whole
        t0 = time.perf_counter()
    if planner is not None:
        g_cap = int(max_workers or 4 * num_workers)
        if g_cap < num_workers:
            raise InputError(f"max_workers ({max_workers}) is below num_workers ({num_workers})")
    else:
        # every worker ever created gets a row: the initial ones plus each scale-up step
        g_cap, cur = int(num_workers), int(num_workers)
        for _, target in schedule:
            g_cap += max(0, target - cur)
            cur = target
    dynamic = bool(schedule) or planner is not None
    single_path = num_workers == 1 and dp == 1 and not dynamic
    if router_mode == "kv_router" and num_workers * dp < 2 and not dynamic:
        raise InputError(
            "offline replay only supports router_mode=kv_router with more than one worker/DP-rank target"
        )
    log_cap = _readmission_log_size(workload) if history else 0
    sharing = sharing_groups(workload, router_mode, num_workers, replay_concurrency, schedule, planner)
    kv_events = _KV_EVENTS if lag is not None else 0
    st = _build_state(workload, engine, g_cap, num_workers, dp, replay_concurrency, max_sim_time_ms,
                      single_path, schedule, planner_interval_ms, telemetry_interval_ms, steady_decode,
                      light_ticks, timing_rules=rules, gap_skip=gap_skip, readmission_log=log_cap,
                      kv_events=kv_events, sharing=sharing)
    progress.track(st.rq.isl.shape[0], lambda: _progress_of(st))  # read by a watcher thread (fastsim/progress.py)
    table = _initial_table_size(st.rq, st.params.block_size, g_cap * dp) if router_mode == "kv_router" else 1
    while True:
        rt = _router_state(router_mode, router_config, st.params, st.n, g_cap * dp, g_cap, table, seed,
                           record=history, kv_event_lag_ms=lag, index_keys=int(st.rq.key_ptr[-1]) + 1)
        out = np.zeros(4)
        while True:
            status = run_loop_nb(st.params, st.perf, st.pool, st.rq, st.rk, st.ss, st.cl, st.gaps,
                                 rt, st.fl, st.pa, out)
            if status == TELEMETRY_FULL:
                st = st._replace(fl=_grow_telemetry(st.fl, tel_cap, telemetry_interval_ms))
            elif status == LOG_FULL:
                st = st._replace(pa=_grow_log(st.pa))
                log_cap = st.pa.alog.shape[0]
            elif status == PLANNER_TICK:
                target = planner(PlannerState.of(st, float(out[1])))
                if target is not None:
                    if isinstance(target, bool) or not isinstance(target, (int, np.integer)) or target < 1:
                        raise InputError(f"planner returned {target!r}; it must be a positive worker count or None")
                    st.fl.fs[7] = min(int(target), g_cap)
            else:
                break
        if status == TABLE_FULL:
            # The router's table of active prompt blocks filled up: start again with a larger one.
            table *= 4
        elif st.pool.ev_meta[2]:
            # A lag window held more KV events than the feed: start again with a larger one.
            kv_events *= 4
        elif int(st.pa.alog_n[0]) > log_cap:
            # More readmissions than the log holds: start again with room for every one of them.
            log_cap = int(st.pa.alog_n[0])
        else:
            break
        st = _build_state(workload, engine, g_cap, num_workers, dp, replay_concurrency, max_sim_time_ms,
                          single_path, schedule, planner_interval_ms, telemetry_interval_ms, steady_decode,
                          light_ticks, timing_rules=rules, gap_skip=gap_skip, readmission_log=log_cap,
                          kv_events=kv_events, sharing=sharing)
    progress.untrack()
    if rt.index.state[1]:  # (its size bounds every block it can hold: a broken invariant)
        raise RuntimeError("the kv_router's KV-event index overflowed")
    settle_unarrived(st.rq, int(st.cl.state[NARRIVED]))
    wall_ms = (time.perf_counter() - t0) * 1000.0

    if status == DEAD_END:
        from fastsim.kernels.scheduler import FINISHING, HANDED, PREEMPTED, RUNNING, WAITING

        raise dead_end_error(int(st.cl.state[NARRIVED] - st.cl.state[NDONE]), workload, [("", engine)],
                             np.isin(st.rq.status, (WAITING, RUNNING, PREEMPTED, FINISHING, HANDED)),
                             st.rq.rank, dp, dynamo_version=version)
    if status == SIM_CAP and gap_skip is None:
        left = in_flight_with_gaps(st.rq)
        if left.any():
            del st
            return simulate(**dict(args, steady_decode=False, gap_skip=left))
    if _debug(debug) and max_sim_time_ms is None:
        from fastsim.invariants import check

        check(st, engine)
    # only the per-request results and the gap statistics go on: the rest of the state is freed
    # before the report's own arrays are made (peak memory)
    cols = _request_columns(st.rq, single_path and not history)
    committed = int(st.rk.seqc[5])
    if status == SIM_CAP:  # a pass in flight at the cap has not committed its prompt tokens yet
        committed -= int(st.cl.pass_commit[st.cl.last_stamp > out[1]].sum())
    if history:  # 1.6.1's records: routing and admission histories, session names
        from fastsim.history import identity_columns

        cols.update(_history_columns(st, rt))
        cols.update(identity_columns(workload, bool(replay_concurrency)))
    else:
        labels = session_labels(workload, bool(replay_concurrency), single_path)
        if labels is not None:
            cols["session_id"], cols["turn_index"] = labels
    gaps, fl = st.gaps, st.fl
    del st, rt
    # 1.6.1's single worker stops at its time cap like a cluster, with the worker-seconds so far
    single_ws = single_path and not (status == SIM_CAP and rules == TIMING_161)
    return _report(cols, gaps, fl, num_workers=num_workers, single_path=single_ws,
                   worker_seconds=float(out[0]), dp=dp, wall_ms=wall_ms, sla=sla,
                   telemetry=bool(telemetry_interval_ms), version=version, committed=committed)


def _worker_rows(num_workers, schedule, planner, max_workers):
    """Rows of worker state a run allocates: every worker it can ever create."""
    if planner is not None:
        g_cap = int(max_workers or 4 * num_workers)
        if g_cap < num_workers:
            raise InputError(f"max_workers ({max_workers}) is below num_workers ({num_workers})")
        return g_cap
    # every worker ever created gets a row: the initial ones plus each scale-up step
    g_cap, cur = int(num_workers), int(num_workers)
    for _, target in schedule:
        g_cap += max(0, target - cur)
        cur = target
    return g_cap


def check_memory(workload, engine, worker_rows, *, telemetry=False, kv_router=False, num_workers=1,
                 schedule=(), planner=None, pools=None, kernels_loaded=None):
    """Refuse (InsufficientMemoryError) a run the machine cannot hold, before allocating it."""
    from fastsim import memory

    est = memory.estimate(workload, engine, worker_rows=worker_rows, telemetry=telemetry,
                          kv_router=kv_router, pools=pools,
                          kernels_loaded=_KERNELS_LOADED if kernels_loaded is None else kernels_loaded)
    if schedule:
        workers = f"the scaling schedule ({worker_rows} worker rows: its peak, plus every scale-up)"
    elif planner is not None:
        workers = f"max_workers {worker_rows}"
    else:
        workers = f"--num-workers {num_workers}"
    engines = pools if pools is not None else [(engine, worker_rows)]
    blocks = " + ".join(f"num_gpu_blocks {e.num_gpu_blocks} x {r * max(int(e.dp_size or 1), 1)} ranks"
                        for e, r in engines)
    memory.check(est, {
        "per-request state": f"the workload's {workload.isl.shape[0]} requests",
        "prompt block keys": "the workload's prompt lengths over block_size",
        "per-worker state": workers,
        "per-rank state": f"{workers} x dp_size",
        "KV pools": f"{blocks}, from {workers}",
        "router table": "the kv_router's table of prompt blocks",
        "loading the kernels": "fastsim's compiled kernels (a fixed cost)",
    })


def _progress_of(st):
    """(requests finished, latest pass end in ms) of a running simulation's state."""
    from fastsim.kernels.loop import NDONE

    return int(st.cl.state[NDONE]), float(np.fmax.reduce(st.cl.last_stamp, initial=np.nan))


def _debug(debug):
    """``simulate``'s ``debug``: as given, else the ``FASTSIM_DEBUG`` environment variable."""
    if debug is None:
        import os

        return os.environ.get("FASTSIM_DEBUG", "") not in ("", "0")
    return bool(debug)


def _report(cols, gaps, fl, *, num_workers, single_path, worker_seconds, dp, wall_ms, sla,
            telemetry, version, committed):
    """The :class:`Report` of an aggregated run from its per-request columns, gap statistics and
    fleet record."""
    from fastsim.report import build_report

    report = build_report(
        cols,
        _gap_columns(gaps),
        {
            "num_workers": num_workers,
            "single_path": single_path,
            "decode_worker_seconds": worker_seconds,
            "prefill_worker_seconds": 0.0,
            "prefill_gpus_per_worker": 0,
            "decode_gpus_per_worker": dp,
            "wall_time_ms": wall_ms,
            "sla_ttft_ms": sla[0],
            "sla_itl_ms": sla[1],
            "sla_e2e_ms": sla[2],
            "dynamo_version": version,
            "committed_prefill_tokens": committed,
            "dp": dp,
        },
    )
    report.workers = (lambda: _telemetry_frame(fl)) if telemetry else None
    report.fleet = lambda: _fleet_frame(fl)
    return report


def _check_schedule(schedule):
    """Validate ``[[t_ms, workers], ...]`` (ascending times, positive counts)."""
    if schedule is None:
        return []
    if isinstance(schedule, str):
        import json

        try:
            schedule = json.loads(schedule)
        except json.JSONDecodeError as exc:
            raise InputError(f"scaling schedule: malformed JSON at char {exc.pos}: {exc.msg}") from None
    out, last = [], -np.inf
    try:
        items = list(schedule)
    except TypeError:
        raise InputError("scaling schedule must be a list of [time_ms, workers] pairs") from None
    for i, item in enumerate(items):
        try:
            t, n = item
        except (TypeError, ValueError):
            raise InputError(f"scaling schedule entry {i} is {item!r}; it must be [time_ms, workers]") from None
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not np.isfinite(t) or t < 0:
            raise InputError(f"scaling schedule entry {i}: time {t!r} must be a finite number >= 0 (ms)")
        if t < last:
            raise InputError(f"scaling schedule entry {i}: times must be ascending ({t} after {last})")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InputError(f"scaling schedule entry {i}: workers {n!r} must be a positive integer")
        out.append((float(t), int(n)))
        last = t
    return out


class _State(NamedTuple):
    n: int
    params: object
    perf: object
    pool: object
    rq: object
    rk: object
    ss: object
    cl: object
    gaps: object
    fl: object
    pa: object


def _simulate_split(workload, engine, n_shards, t0, *, num_workers, dp, sla, seed, debug,
                    steady_decode, light_ticks, version, history=False):
    """``simulate`` of a cluster split into shards (``fastsim/shards.py``), timed from ``t0``;
    None when ``history`` is asked for and a shard readmitted a preempted request (the shards
    keep no readmission log: the caller runs the cluster whole)."""
    from fastsim import shards
    from fastsim.kernels.loop import DEAD_END

    status, results, gaps, fl, ws, states, remaining = shards.simulate_shards(
        workload, engine, n_shards, num_workers=num_workers, dp=dp, steady_decode=steady_decode,
        light_ticks=light_ticks, seed=seed, version=version)
    wall_ms = (time.perf_counter() - t0) * 1000.0
    if status == DEAD_END:
        raise dead_end_error(remaining, workload, [("", engine)], dynamo_version=version)
    if _debug(debug):
        from fastsim.invariants import check

        for st in states:
            check(st, engine)
    committed = sum(int(st.rk.seqc[5]) for st in states)
    if history and any(int(st.pa.alog_n[0]) > 0 for st in states):
        return None
    del states
    cols = _request_columns(results, False)
    if history:
        from fastsim.history import identity_columns

        cols.update(_no_readmissions())
        cols.update(identity_columns(workload, False))
    return _report(cols, gaps, fl, num_workers=num_workers,
                   single_path=False, worker_seconds=ws, dp=dp, wall_ms=wall_ms, sla=sla,
                   telemetry=False, version=version, committed=committed)


def _build_state(workload, engine, g_cap, num_workers, dp, replay_concurrency, max_sim_time_ms,
                 single_path, schedule, planner_interval_ms, telemetry_interval_ms, steady_decode=True,
                 light_ticks=True, tick_log=0, huge_pages=True, timing_rules=0, gap_skip=None,
                 readmission_log=0, kv_events=0, sharing=None):
    """Allocate every table of one simulation (``g_cap`` worker rows of ``dp`` ranks each);
    ``sharing``: which requests' pools can meet (:func:`sharing_groups`; None: all keys kept);
    ``kv_events``: room in the pool's KV event feed (a lagging router), 0 for none;
    ``tick_log``: entries of the loop's tick log (a shard of a split run), 0 for none;
    ``huge_pages=False``: the request state in small pages its loop maps (a shard in a thread)."""
    from fastsim.kernels.fleet import ACTIVE, Fleet
    from fastsim.kernels.heap import new_tourney
    from fastsim.kernels.kvpool import make_pool
    from fastsim.kernels.loop import _PH, Cluster, make_sessions, new_gaps
    from fastsim.kernels.scheduler import make_pass_acc, make_ranks
    from fastsim.perf import engine_perf_model

    params = _engine_params(engine, steady=steady_decode, fast=light_ticks, timing_rules=timing_rules)
    perf = engine_perf_model(engine)
    n = int(workload.isl.shape[0])
    n_ranks = g_cap * dp
    bs = params.block_size
    key_ptr, keys = _block_keys(workload, bs, params.caching, sharing)
    rq = _requests(workload, key_ptr, keys, bs, huge_pages=huge_pages)
    pool = make_pool(n_ranks, params.cap, kv_events)
    rk = make_ranks(n_ranks, bs, params.cap, params.budget)
    concurrency = int(replay_concurrency or 0)
    ss = make_sessions(workload, concurrency)
    ctree, cdue = new_tourney(g_cap)
    ptree, pdue = new_tourney(g_cap)
    cl = Cluster(
        dp=dp,
        concurrency=concurrency,
        single_path=single_path,
        max_sim_time=float(max_sim_time_ms) if max_sim_time_ms is not None else -1.0,
        busy=np.zeros(g_cap, dtype=np.bool_),
        stalled=np.zeros(g_cap, dtype=np.bool_),
        pend_head=np.full(g_cap, -1, dtype=np.int32),
        pend_tail=np.full(g_cap, -1, dtype=np.int32),
        wctr=np.zeros(g_cap, dtype=np.int64),
        ctree=ctree,
        cdue=cdue,
        dirty=np.zeros(g_cap, dtype=np.bool_),
        dlist=np.zeros(g_cap + 1, dtype=np.int64),
        dwork=np.zeros(g_cap, dtype=np.int64),
        last_stamp=np.full(g_cap, np.nan),
        pass_commit=np.zeros(g_cap, dtype=np.int64),
        state=np.zeros(7, dtype=np.int64),
        light=np.zeros(g_cap, dtype=np.int64),
        ph=np.zeros(g_cap * _PH),
        ph_head=np.zeros(g_cap, dtype=np.int64),
        ph_n=np.zeros(g_cap, dtype=np.int64),
        ptree=ptree,
        pdue=pdue,
        tlog=np.zeros(tick_log),
    )
    gaps = new_gaps(g_cap, skip=gap_skip)
    gstate = np.zeros(g_cap, dtype=np.int8)
    gstate[:num_workers] = ACTIVE
    fs = np.zeros(10, dtype=np.int64)
    fs[:3] = num_workers  # created, active, live
    fs[7] = -1  # no pending planner target
    tel_cap = 4096 if telemetry_interval_ms else 0
    startup = engine.startup_time
    fl = Fleet(
        startup_ms=float(startup) * 1000.0 if startup else 0.0,
        planner_ms=float(planner_interval_ms or 0.0),
        tel_ms=float(telemetry_interval_ms or 0.0),
        gstate=gstate,
        ready_at=np.full(g_cap, np.inf),
        passes=np.zeros(g_cap, dtype=np.int64),
        hold=np.zeros(g_cap, dtype=np.int64),
        sched_t=np.array([t for t, _ in schedule], dtype=np.float64),
        sched_n=np.array([c for _, c in schedule], dtype=np.int64),
        tel_t=np.zeros(tel_cap),
        tel_w=np.zeros(tel_cap, dtype=np.int32),
        tel_run=np.zeros(tel_cap, dtype=np.int32),
        tel_wait=np.zeros(tel_cap, dtype=np.int32),
        tel_kv=np.zeros(tel_cap, dtype=np.int32),
        tel_cached=np.zeros(tel_cap, dtype=np.int32),
        tel_passes=np.zeros(tel_cap, dtype=np.int64),
        fs=fs,
        ff=np.array([0.0, float(planner_interval_ms or 0.0), 0.0, 0.0]),
    )
    max_blocks = int((max_tokens(workload.isl, workload.osl) if n else 1) // bs + 2)
    emit_cap = dp * min(params.max_seqs, max(n, 1)) + 1
    pa = make_pass_acc(max_blocks, emit_cap, min(params.max_seqs, max(n, 1)) + 1, readmission_log)
    return _State(n, params, perf, pool, rq, rk, ss, cl, gaps, fl, pa)


def _grow_log(pa):
    """The pass scratch with room for twice the readmissions (and every preempted request)."""
    n, pending = int(pa.alog_n[0]), int(pa.alog_n[1])
    cap = max(2 * pa.alog.shape[0], n + pending + 64)
    alog, alog_t = np.zeros((cap, 3), dtype=np.int64), np.zeros(cap)
    m = min(n, pa.alog.shape[0])
    alog[:m] = pa.alog[:m]
    alog_t[:m] = pa.alog_t[:m]
    return pa._replace(alog=alog, alog_t=alog_t)


def _check_telemetry(workload, num_workers, interval_ms):
    """The most telemetry rows a run may hold (None without telemetry); refuses an interval whose
    samples over the arrivals alone would exceed that cap."""
    if not interval_ms:
        return None
    from fastsim import memory

    cap = memory.telemetry_row_cap()
    arrivals = workload.session_arrival_ms
    span = float(np.nanmax(arrivals)) if arrivals.shape[0] and not np.isnan(arrivals).all() else 0.0
    rows = num_workers * span / float(interval_ms)
    if rows > cap:
        raise InputError(
            f"telemetry_interval_ms (--telemetry-interval-ms) {interval_ms!r}: sampling {num_workers} "
            f"workers over the {span:.6g} ms of arrivals alone takes at least {rows:.3g} rows "
            f"({rows * memory.TELEMETRY_ROW_BYTES / 2**30:.3g} GB), more than the {cap} rows a "
            "run may hold (a quarter of the available memory); raise the interval"
        )
    return cap


def _grow_telemetry(fl, cap=None, interval_ms=None):
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


def _telemetry_frame(fl):
    import pandas as pd

    n = int(fl.fs[6])
    return pd.DataFrame({
        "time_ms": fl.tel_t[:n].copy(),
        "worker": fl.tel_w[:n].astype(np.int64),
        "running": fl.tel_run[:n].astype(np.int64),
        "waiting": fl.tel_wait[:n].astype(np.int64),
        "kv_blocks_used": fl.tel_kv[:n].astype(np.int64),
        "kv_blocks_cached": fl.tel_cached[:n].astype(np.int64),
        "passes": fl.tel_passes[:n].copy(),
    })


_GSTATE_NAMES = {0: "unused", 1: "starting", 2: "active", 3: "draining", 4: "retired", 5: "cancelled"}


def _fleet_frame(fl):
    """One row per worker ever created: its final state and passes run."""
    import pandas as pd

    n = int(fl.fs[0])
    return pd.DataFrame({
        "worker": np.arange(n),
        "state": [_GSTATE_NAMES[int(x)] for x in fl.gstate[:n]],
        "passes": fl.passes[:n].copy(),
    })


class PlannerState(NamedTuple):
    """What a planner callable sees at a tick (totals over the live workers).

    Attributes:
        now_ms: the virtual time of the tick (ms since the first arrival's clock start).
        active_workers: workers serving requests (not starting, not draining).
        starting_workers: workers created by a scale-up, still in their ``startup_time``.
        draining_workers: workers being retired: they finish their requests and take no new ones.
        running: requests in the running batches of the live workers.
        waiting: requests queued at the live workers (routed, not yet admitted).
        kv_blocks_used: KV-cache blocks in use on the live workers.
        arrived: requests that have arrived so far (the whole run).
        finished: requests that have finished so far (the whole run).

    The planner returns the target worker count (scale-ups start new workers, scale-downs drain
    the highest-numbered ones) or None to leave the cluster as it is.
    """

    now_ms: float
    active_workers: int
    starting_workers: int
    draining_workers: int
    running: int
    waiting: int
    kv_blocks_used: int
    arrived: int
    finished: int

    @classmethod
    def of(cls, st, now_ms):
        from fastsim.kernels.kvpool import NACTIVE
        from fastsim.kernels.loop import NARRIVED, NDONE

        fl, cl, rk = st.fl, st.cl, st.rk
        live = np.isin(fl.gstate, (1, 2, 3))
        ranks = np.repeat(live, cl.dp)
        return cls(
            now_ms=now_ms,
            active_workers=int(fl.fs[1]),
            starting_workers=int(fl.fs[3]),
            draining_workers=int(fl.fs[4]),
            running=int(rk.n_run[ranks].sum()),
            waiting=int(rk.n_wait[ranks].sum()),
            kv_blocks_used=int(st.pool.meta[ranks, NACTIVE].sum()),
            arrived=int(cl.state[NARRIVED]),
            finished=int(cl.state[NDONE]),
        )


def in_flight_with_gaps(rq):
    """bool[n]: the rows still in flight that have emitted two tokens or more."""
    from fastsim.kernels.scheduler import COMPLETED, NOT_ARRIVED, REJECTED

    st = rq.status
    return (st != COMPLETED) & (st != REJECTED) & (st != NOT_ARRIVED) & (rq.generated >= 2)


def _request_columns(rq, single_path):
    from fastsim.kernels.scheduler import COMPLETED, NOT_ARRIVED, REJECTED

    st = rq.status
    status = np.where(
        st == COMPLETED, 2, np.where(st == REJECTED, 3, np.where(st == NOT_ARRIVED, 0, 1))
    ).astype(np.int8)
    worker_idx = rq.rank.astype(np.int64)
    if single_path:
        worker_idx = np.full_like(worker_idx, -1)
    return {
        "arrival_ms": rq.arrival,
        "first_admit_ms": rq.first_admit,
        "first_token_ms": rq.first_token,
        "second_token_ms": rq.second_token,
        "last_token_ms": rq.last_token,
        "terminal_ms": rq.terminal,
        "status": status,
        "input_length": rq.isl,
        "requested_output_length": rq.osl,
        "output_length": rq.generated.astype(np.int64),
        "reused_tokens": rq.reused.astype(np.int64),
        "first_reused_tokens": rq.first_reused.astype(np.int64),
        "worker_idx": worker_idx,
        "preemptions": rq.npreempt.astype(np.int64),
    }


def merged_gap_sums(acc, counts):
    """One pooled statistic from per-group rows (``kernels/loop.py``, ``Gaps``): ``acc[g]`` =
    [sum, sum of squares, min, max, shift, shift set], the sums taken about that group's shift,
    ``counts[g]`` its count. Returns (count, sum, sum of squares, min, max, shift).

    With one group (or only one that pooled anything) they are that group's own, bit for bit.
    Otherwise each group's mean and sum of squared deviations are combined (Chan et al.'s
    pairwise rule: the squared deviations of the group means from the overall mean are added),
    and the result is given about the overall mean: no difference of large sums, which would lose
    digits when the groups' shifts differ by more than the values' spread."""
    rows = [g for g in range(acc.shape[0]) if counts[g] > 0]
    if not rows:
        return 0, 0.0, 0.0, float(np.inf), float(-np.inf), 0.0
    vmin, vmax = float(acc[rows, 2].min()), float(acc[rows, 3].max())
    if len(rows) == 1:
        g = rows[0]
        return int(counts[g]), float(acc[g, 0]), float(acc[g, 1]), vmin, vmax, float(acc[g, 4])
    n = [int(counts[g]) for g in rows]
    total = sum(n)
    base = float(acc[rows[0], 4])
    # group means relative to the first group's shift, and each group's own squared deviations
    dev = [float(acc[g, 4]) - base + float(acc[g, 0]) / c for g, c in zip(rows, n)]
    m2 = [max(float(acc[g, 1]) - float(acc[g, 0]) * float(acc[g, 0]) / c, 0.0) for g, c in zip(rows, n)]
    mean_dev = math.fsum(c * d for c, d in zip(n, dev)) / total
    ssq = math.fsum(m2) + math.fsum(c * (d - mean_dev) ** 2 for c, d in zip(n, dev))
    return total, 0.0, ssq, vmin, vmax, base + mean_dev


def _gap_columns(gaps):
    out = {}
    for name, acc, counts, hist in (("itl", gaps.itl, gaps.itl_n, gaps.itl_hist),
                                    ("otpu", gaps.otpu, gaps.otpu_n, gaps.otpu_hist)):
        n, ssum, ssq, vmin, vmax, shift = merged_gap_sums(acc, counts)
        out.update({f"{name}_count": n, f"{name}_sum": ssum, f"{name}_sumsq": ssq,
                    f"{name}_min": vmin, f"{name}_max": vmax, f"{name}_shift": shift,
                    f"{name}_hist": hist})
    return out




def _history_kept(dynamo_version):
    """Whether the loop keeps what 1.6.1's per-request routing and admission histories need."""
    from fastsim.dynamo_version import check_version

    return check_version(dynamo_version) == "1.6.1"


def _readmission_log_size(workload):
    """First size of the readmission log: the aggregated loop grows it as preemptions come (a
    disaggregated run with more readmissions runs again, sized)."""
    return int(workload.isl.shape[0]) // 64 + 64


def _no_readmissions():
    return {"readmit_row": np.zeros(0, dtype=np.int64), "readmit_reused": np.zeros(0, dtype=np.int64),
            "readmit_stage": np.zeros(0, dtype=np.int64), "readmit_ms": np.zeros(0)}


def readmission_columns(pa):
    """The readmission log of a run's pass scratch ``pa`` (rows, reused tokens, stage, time), in
    the order the readmissions happened."""
    m = int(pa.alog_n[0])
    if m > pa.alog.shape[0]:
        raise RuntimeError(f"readmission log overflow ({m} readmissions, room for {pa.alog.shape[0]})")
    return {"readmit_row": pa.alog[:m, 0].copy(), "readmit_reused": pa.alog[:m, 1].copy(),
            "readmit_stage": pa.alog[:m, 2].copy(), "readmit_ms": pa.alog_t[:m].copy()}


def _history_columns(st, rt):
    """Per-request inputs of 1.6.1's routing and admission histories (aggregated run)."""
    cols = readmission_columns(st.pa)
    if rt.best.shape[0]:
        # the overlap of the chosen target, from the prefill load the route added (isl - overlap * bs)
        sel = np.where(rt.best >= 0, (st.rq.isl - rt.route_pf) // st.params.block_size, -1)
        cols["route_selected_blocks"] = sel.astype(np.int64)
        cols["route_reported_tokens"] = np.maximum(sel, 0).astype(np.int64) * st.params.block_size
        cols["route_best_blocks"] = rt.best.astype(np.int64)
        cols["route_released_ms"] = rt.released.copy()
    return cols
