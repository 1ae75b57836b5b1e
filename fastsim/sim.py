"""Build the simulation state, run the compiled loop, wrap the results in a Report."""

from __future__ import annotations

import dataclasses
import time
from typing import NamedTuple

import numpy as np

from fastsim import interrupt, progress
from fastsim.dead_end import dead_end_error
from fastsim.errors import InputError
from fastsim.kernels.rank_state import COMMITTED_TOKENS, READMISSIONS
from fastsim.pages import with_small_pages
from fastsim.results import (fleet_frame, gap_columns, history_columns, in_flight_with_gaps, no_readmissions,
                             request_columns, telemetry_frame)
from fastsim.run_config import (RunConfig, check_gap_statistics, check_kv_event_lag,
                                check_schedule, check_telemetry, history_kept, readmission_log_size, worker_rows)
from fastsim.state import (build_state, grow_readmission_log, grow_telemetry, grow_union_table, initial_table_size,
                           host_view, queue_priorities, router_state, settle_unarrived, sharing_groups)
from fastsim.trace_checks import check_workload
from fastsim.workload import session_labels


# Initial room in each rank's KV event feed of a lagging router: the rank's events of a lag
# window (it grows, and the run starts again, if a window holds more)
_KV_EVENTS = 1 << 13


_KERNELS_LOADED = False
_SPECULATIVE_LOADED = False
_SPLIT_KERNELS_LOADED = False

# A host tier's first rings per rank: transfers in flight and their blocks (a run that fills them
# starts again with rings 4x larger)
_TIER_RINGS = (1024, 1 << 16)


def load_split_kernels():
    """``load_kernels``, and those of a run split into shards (``fastsim/shards.py``: loaded only
    when a run is split, which takes a thread count)."""
    global _SPLIT_KERNELS_LOADED
    load_kernels()
    if _SPLIT_KERNELS_LOADED:
        return
    _SPLIT_KERNELS_LOADED = True
    from fastsim.config import EngineArgs
    from fastsim.workload import synthetic

    with progress.hidden():
        simulate(synthetic(16, 2, 4, arrival_interval_ms=1.0), EngineArgs(block_size=16), num_workers=2, threads=2)


def load_kernels(speculative: bool = False):
    """Load (or compile) the loop kernels once per process, outside the timed region;
    ``speculative``: the loop's variant with speculative decoding instead, which is compiled apart
    (a run without it compiles none of its code, and one with it needs only its own: decision
    0285).

    ``wall_time_ms`` is the simulation's own time, as Dynamo's is the time of its Rust core (which
    excludes loading its extension module); the one-time load of cached machine code is not part
    of a simulation.
    """
    if _SPECULATIVE_LOADED if speculative else _KERNELS_LOADED:
        return
    with progress.hidden():  # (a one-request run, compiling the first time: not the user's)
        _load_kernels(speculative)


def _load_kernels(speculative):
    global _KERNELS_LOADED, _SPECULATIVE_LOADED
    from fastsim import warmup
    from fastsim.config import EngineArgs
    from fastsim.workload import synthetic

    w = synthetic(16, 2, 1, arrival_interval_ms=1.0)
    # a one-row trace, so that the block-identity kernel of trace replays is loaded as well
    w.hash_ptr = np.array([0, 1], dtype=np.int64)
    w.hash_ids = np.array([1], dtype=np.int64)
    w.trace_block_size = 16
    if speculative:
        _SPECULATIVE_LOADED = True
        with warmup.variant("speculative", "the simulation kernels with speculative decoding",
                            "about a minute"):
            simulate(w, EngineArgs(block_size=16, aic_nextn=1))  # (never split into shards)
    else:
        _KERNELS_LOADED = True
        if not warmup.cached("run_loop_nb"):
            warmup.announce_compile("the simulation kernels", "about a minute")
        simulate(w, EngineArgs(block_size=16))


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
    gap_statistics: str = "exact",
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
      (an exact optimisation, see ``kernels/steady.py``); False runs every request through every
      pass, which gives the same results more slowly (for checking).
    * ``light_ticks``: handle a tick that only ends a group's pass and starts its next one, made
      of steady passes alone, and an arrival tick whose arrivals all join groups in mid-pass, on
      light paths instead of the full tick (exact optimisations, see ``kernels/loop.py``); False
      for checking.
    * ``threads``: a round-robin cluster whose workers never meet (an open loop of single-turn
      requests, no scaling, no telemetry, no time cap) is simulated as that many shards of its
      workers side by side, one thread each, with the same results (``fastsim/shards.py``).
      Default: the ``FASTSIM_THREADS`` environment variable, else 1: never split (the shards log
      their completions' gaps, and their serial fold in the cluster's order costs more than the
      shards save, decision 0265).
    * ``kv_event_lag_ms`` (Dynamo 1.6.1, kv_router only): the router's indexer sees the blocks
      stored and removed on the workers that much virtual time later (docs/decisions/0230).
    * ``gap_skip`` (internal): rows whose inter-token gaps stay out of the statistics (below).
    * ``gap_statistics``: ``"exact"`` (the default) folds each request's inter-token gaps into the
      ITL and per-user throughput means and deviations in Dynamo's order, to its last bit
      (decision 0265); ``"pooled"`` keeps sums of them instead, within about 1e-9 of Dynamo's and
      several times faster on token-heavy runs (decision 0286).

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
    from fastsim.kernels.fleet import TARGET
    from fastsim.kernels.kvpool import EV_OVERFLOWED
    from fastsim.kernels.router import OVERFLOW
    from fastsim.kernels.codes import (
        DEAD_END,
        HOST_TIER_STOP,
        INTERRUPTED,
        LOG_FULL,
        PLANNER_TICK,
        RECORDS_FULL,
        SIM_CAP,
        TABLE_FULL,
        TABLE_GROW,
        TELEMETRY_FULL,
        TIMING_161,
    )
    from fastsim.kernels.loop import CTRL_C, NARRIVED, NDONE, run_loop_nb
    from fastsim.kernels.timelines import LOST, LOST_RECORDS, grow_records
    from fastsim.trtllm_config import check_release

    version = check_version(dynamo_version)
    rules = timing_rules(version)
    exact_gap_stats = check_gap_statistics(gap_statistics)
    from fastsim.kv_tiers import check_flat_tiers

    engine = check_flat_tiers(engine, version, "engine")

    if router_mode not in ("round_robin", "kv_router"):
        raise InputError(f"router_mode is {router_mode!r}; allowed: 'round_robin', 'kv_router'")
    if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)) or num_workers < 1:
        raise InputError(f"num_workers is {num_workers!r}; it must be a positive integer")
    if replay_concurrency is not None and replay_concurrency < 1:
        raise InputError(f"replay_concurrency is {replay_concurrency}; it must be a positive integer")
    schedule = check_schedule(scaling_schedule)
    if planner is not None and not callable(planner):
        raise InputError("planner must be a callable planner(state) -> target worker count or None")
    if planner is not None and (planner_interval_ms is None or not planner_interval_ms > 0):
        raise InputError("planner needs planner_interval_ms > 0 (how often it is called, in virtual ms)")
    if telemetry_interval_ms is not None and not telemetry_interval_ms > 0:
        raise InputError(f"telemetry_interval_ms is {telemetry_interval_ms!r}; it must be > 0")
    lag = check_kv_event_lag(kv_event_lag_ms, router_mode, version)
    # Dynamo 1.6.1's kv_router learns a pass's stored and removed blocks from the KV events
    # published when the pass ends, even without a lag (1.4.2's sees the pool at once), the
    # blocks of mooncake-delta streams included (decisions 0230, 0460)
    if router_mode != "kv_router" or version != "1.6.1":
        lag = None

    check_workload(workload)
    check_release(engine, version)
    if engine.host_offload is not None:
        from fastsim.kv_tiers import check_host_tier_run

        check_host_tier_run(engine, router_mode=router_mode, scaling=bool(schedule) or planner is not None,
                            workload=workload)
        # the tier's pass reads every request explicitly: no steady decode, no light ticks, no shards
        steady_decode, light_ticks, threads = False, False, 1
    if engine.engine_type == "sglang":  # the SGLang engine has its own driver
        from fastsim.sim_sglang import simulate_sglang

        return simulate_sglang(workload, engine, num_workers=num_workers, router_mode=router_mode, version=version,
                               replay_concurrency=replay_concurrency, max_sim_time_ms=max_sim_time_ms,
                               scaling_schedule=schedule, planner=planner,
                               telemetry_interval_ms=telemetry_interval_ms, sla=sla, router_config=router_config,
                               seed=seed, kv_event_lag_ms=kv_event_lag_ms, planner_interval_ms=planner_interval_ms,
                               max_workers=max_workers)
    tel_cap = check_telemetry(workload, num_workers, telemetry_interval_ms)
    g_cap = worker_rows(num_workers, schedule, planner, max_workers)
    if g_cap < num_workers:
        raise InputError(f"max_workers ({max_workers}) is below num_workers ({num_workers})")
    check_memory(workload, engine, g_cap,
                 telemetry=bool(telemetry_interval_ms), kv_router=router_mode == "kv_router",
                 num_workers=num_workers, schedule=schedule, planner=planner)
    history = history_kept(dynamo_version)
    n_shards = 1 if engine.host_offload is not None else shards.plan(workload, threads=threads, num_workers=num_workers, router_mode=router_mode,
                           replay_concurrency=replay_concurrency, max_sim_time_ms=max_sim_time_ms,
                           schedule=schedule, planner=planner,
                           telemetry_interval_ms=telemetry_interval_ms, speculative=bool(engine.aic_nextn))
    if n_shards > 1:
        load_split_kernels()
    else:
        load_kernels(speculative=bool(engine.aic_nextn))
    t0 = time.perf_counter()
    dp = max(int(engine.dp_size or 1), 1)
    if n_shards > 1:
        report = _simulate_split(workload, engine, n_shards, t0, num_workers=num_workers, dp=dp,
                                 sla=sla, seed=seed, debug=debug, steady_decode=steady_decode,
                                 light_ticks=light_ticks, version=version, history=history,
                                 exact_gap_stats=exact_gap_stats)
        if report is not None:
            return report
        # the shards readmitted preempted requests, whose admissions they do not log: run whole
        t0 = time.perf_counter()
    dynamic = bool(schedule) or planner is not None
    single_path = num_workers == 1 and dp == 1 and not dynamic
    if router_mode == "kv_router" and num_workers * dp < 2 and not dynamic and rules != TIMING_161:
        # (Dynamo 1.6.1 runs it: the one target takes every request, and the records carry the
        # router's overlaps, decision 0391)
        raise InputError(
            "offline replay only supports router_mode=kv_router with more than one worker/DP-rank target"
        )
    run = RunConfig(num_workers=int(num_workers), worker_rows=g_cap, dp=dp, replay_concurrency=replay_concurrency,
                    max_sim_time_ms=max_sim_time_ms, single_path=single_path, schedule=tuple(schedule),
                    planner_interval_ms=planner_interval_ms, telemetry_interval_ms=telemetry_interval_ms,
                    steady_decode=steady_decode, light_ticks=light_ticks, timing_rules=rules, gap_skip=gap_skip,
                    exact_gap_stats=exact_gap_stats,
                    readmission_log=readmission_log_size(workload) if history else 0,
                    kv_events=_KV_EVENTS if lag is not None else 0,
                    sharing=None if engine.host_offload is not None else sharing_groups(
                        workload, router_mode, num_workers, replay_concurrency, schedule, planner))
    tier_rings = _TIER_RINGS
    st = build_state(workload, engine, run)
    # Dynamo 1.6.1's kv_router counts an evicted host block until its removal, published at the
    # end of the pass that evicted it, reaches it (plus the lag, if any: decision 0475)
    ghosts = router_mode == "kv_router" and lag is not None
    tier = _host_tier(st, engine, tier_rings, workload, ghosts, lag)
    progress.track(st.n_requests, lambda: _progress_of(st))  # read by a watcher thread (fastsim/progress.py)
    table = initial_table_size(st.requests, st.params.block_size, g_cap * dp) if router_mode == "kv_router" else 1
    while True:
        rt = router_state(router_mode, router_config, st.params, st.n_requests, g_cap * dp, g_cap, table, seed,
                          record=history, kv_event_lag_ms=lag, index_keys=int(st.requests.key_ptr[-1]) + 1,
                          queue_overlaps=tier is None, priorities=queue_priorities(workload))
        if tier is not None and router_mode == "kv_router":  # its overlaps count the host tiers' blocks
            rt = rt._replace(host=host_view(tier.ht, rt.host.weight, g_cap * dp, rt.best.shape[0]))
        out = np.zeros(4)
        while True:
            (params, perf, pool, requests, ranks, sessions, cluster, gaps, fleet, scratch) = st.tables()
            if tier is not None:  # its loop variant is not part of the simulation's own time (load_kernels)
                t0 += _load_tier_kernels(run_loop_nb, (params, perf, pool, requests, ranks, sessions, cluster,
                                                       gaps, rt, fleet, scratch, out, tier))
            with interrupt.on_ctrl_c(interrupt.flag((cluster.state, CTRL_C))):
                status = run_loop_nb(params, perf, pool, requests, ranks, sessions, cluster, gaps, rt, fleet, scratch,
                                     out, tier)
            if status == TELEMETRY_FULL:
                st = st._replace(fleet=grow_telemetry(st.fleet, tel_cap, telemetry_interval_ms))
            elif status == RECORDS_FULL:
                st = st._replace(gaps=st.gaps._replace(tl=grow_records(st.gaps.tl)))
            elif status == TABLE_GROW:
                rt = grow_union_table(rt)
            elif status == LOG_FULL:
                st = st._replace(scratch=grow_readmission_log(st.scratch))
                run = dataclasses.replace(run, readmission_log=st.scratch.alog.shape[0])
            elif status == PLANNER_TICK:
                target = planner(PlannerState.of(st, float(out[1])))
                if target is not None:
                    if isinstance(target, bool) or not isinstance(target, (int, np.integer)) or target < 1:
                        raise InputError(f"planner returned {target!r}; it must be a positive worker count or None")
                    st.fleet.fs[TARGET] = min(int(target), g_cap)
            elif status == INTERRUPTED:
                raise KeyboardInterrupt  # (if Python has not raised the pending one already)
            else:
                break
        if tier is not None and ghosts and _ghosts_lost(tier):
            # more evicted blocks awaited their removal's arrival than the ring kept: larger rings
            tier_rings = (tier_rings[0], 4 * tier_rings[1])
        elif status == HOST_TIER_STOP:
            from fastsim.kernels.host_offload import tier_stop_reason
            from fastsim.kernels.host_tier import LOG_FULL as RINGS_FULL
            from fastsim.kv_tiers import host_tier_stopped

            reason, rank = tier_stop_reason(tier)
            if reason != RINGS_FULL:
                raise host_tier_stopped(reason, rank, engine)
            tier_rings = (4 * tier_rings[0], 4 * tier_rings[1])  # start again with larger rings
        elif status == TABLE_FULL:
            # The router's table of active prompt blocks filled up within a step: start again
            # with a larger one.
            table = 4 * rt.tab_key.shape[0]
        elif st.pool.ev_meta[:, EV_OVERFLOWED].any():
            # A lag window held more KV events than the feed: start again with a larger one.
            run = dataclasses.replace(run, kv_events=4 * run.kv_events)
        elif st.gaps.tl.st[LOST]:
            if st.gaps.tl.st[LOST] & LOST_RECORDS:  # (the loop grows them between ticks)
                raise RuntimeError("a tick of the event loop used every free token-time record")
            # A request's token times left the ring before it completed: start again with a wider one.
            run = dataclasses.replace(run, gap_ring=4 * st.gaps.tl.ring.shape[1])
        elif int(st.scratch.alog_n[READMISSIONS]) > run.readmission_log:
            # More readmissions than the log holds: start again with room for every one of them.
            run = dataclasses.replace(run, readmission_log=int(st.scratch.alog_n[READMISSIONS]))
        else:
            break
        st = build_state(workload, engine, run)
        tier = _host_tier(st, engine, tier_rings, workload, ghosts, lag)
    progress.untrack()
    if rt.index.state[OVERFLOW]:  # (its size bounds every block it can hold: a broken invariant)
        raise RuntimeError("the kv_router's KV-event index overflowed")
    settle_unarrived(st.requests, int(st.cluster.state[NARRIVED]))
    wall_ms = (time.perf_counter() - t0) * 1000.0

    if status == DEAD_END:
        from fastsim.kernels.codes import FINISHING, HANDED, PREEMPTED, RUNNING, WAITING

        raise dead_end_error(int(st.cluster.state[NARRIVED] - st.cluster.state[NDONE]), workload, [("", engine)],
                             np.isin(st.requests.status, (WAITING, RUNNING, PREEMPTED, FINISHING, HANDED)),
                             st.requests.rank, dp, dynamo_version=version)
    if status == SIM_CAP and gap_skip is None:
        left = in_flight_with_gaps(st.requests)
        if left.any():
            del st
            return simulate(**dict(args, steady_decode=False, gap_skip=left))
    if _debug(debug) and max_sim_time_ms is None:
        from fastsim.invariants import check

        check(st, engine)
    # only the per-request results and the gap statistics go on: the rest of the state is freed
    # before the report's own arrays are made (peak memory)
    cols = request_columns(st.requests, single_path and not history)
    if tier is not None:  # the first admission's reuse split by tier
        from fastsim.report import TIER_FIELDS

        cols[TIER_FIELDS[0]], cols[TIER_FIELDS[1]] = tier.first_g1, tier.first_host
    committed = int(st.ranks.counters[COMMITTED_TOKENS])
    if status == SIM_CAP:  # a pass in flight at the cap has not committed its prompt tokens yet
        committed -= int(st.cluster.pass_commit[st.cluster.last_stamp > out[1]].sum())
    if history:  # 1.6.1's records: routing and admission histories, session names
        from fastsim.history import identity_columns

        cols.update(history_columns(st, rt))
        cols.update(identity_columns(workload, bool(replay_concurrency)))
    else:
        labels = session_labels(workload, bool(replay_concurrency), single_path)
        if labels is not None:
            cols["session_id"], cols["turn_index"] = labels
    gaps, fl = st.gaps, st.fleet
    del st, rt
    # 1.6.1's single worker stops at its time cap like a cluster, with the worker-seconds so far
    single_ws = single_path and not (status == SIM_CAP and rules == TIMING_161)
    # a single worker's clock runs on to its host tier's last transfer (decision 0354) and, under
    # 1.6.1's rules, to its last event: an arrival it rejects after its last token counts
    tail_s = float(out[1]) / 1000.0 if single_ws and (tier is not None or rules == TIMING_161) else 0.0
    report = _report(cols, gaps, fl, num_workers=num_workers, single_path=single_ws,
                     worker_seconds=float(out[0]), dp=dp, wall_ms=wall_ms, sla=sla,
                     telemetry=bool(telemetry_interval_ms), version=version, committed=committed,
                     single_tail_s=tail_s)
    if tier is not None and tier.g3.cap > 0:  # Dynamo's G3 counters (decision 0355)
        from fastsim.kernels.g3_tier import g3_counters

        report.summary["g3_offload"] = g3_counters(tier.g3, int(tier.g3bypass[0]))
    return report


def _load_tier_kernels(run_loop_nb, args):
    """Load (or compile, on the first run with a host tier) the event loop's variant that takes a
    host tier, for the arguments ``args``; returns the seconds it took."""
    import sys

    from numba import typeof

    t = time.perf_counter()
    sig = tuple(typeof(x) for x in args)
    if sig not in run_loop_nb.overloads:
        sys.stderr.write("fastsim: loading the host-tier simulation kernels (compiled on the first run with a "
                         "host tier, about a minute; later runs load them from the cache)\n")
        run_loop_nb.compile(sig)
    return time.perf_counter() - t


def _ghosts_lost(tier):
    """Whether a host tier evicted more blocks than it could keep for a lagging router."""
    from fastsim.kernels.host_tier import GHOST_LOST

    return bool(tier.ht.meta[:, GHOST_LOST].any())


def _host_tier(st, engine, rings, workload, ghosts=False, lag=None):
    """The run's host KV tiers and connector state (``kernels/host_offload.py``), None without a
    tier; ``ghosts``: its evicted blocks are kept for a kv_router, which counts them until their
    removal reaches it after the KV event lag ``lag`` (a ring of them a rank, grown with
    ``rings[1]``)."""
    host = engine.host_offload
    if host is None:
        return None
    from fastsim.kernels.host_offload import make_tier_run
    from fastsim.kernels.host_tier import make_host_tier
    from fastsim.memory import ghost_ring

    n_ranks = st.ranks.n_run.shape[0]
    ht = make_host_tier(n_ranks, host.num_host_blocks, st.params.block_size, host.kv_cache_bytes_per_token,
                        host.d2h_bandwidth_gbps, host.h2d_bandwidth_gbps, host.latency_to_first_byte_ms,
                        n_live=rings[0], n_keys=rings[1],
                        n_ghost=ghost_ring(host.num_host_blocks, rings[1] // _TIER_RINGS[1]) if ghosts else 0,
                        ghost_lag=float(lag or 0.0))
    from fastsim.kernels.dynamo_hash import sequence_hashes

    dhash = sequence_hashes(workload, st.params.block_size, st.requests.key_ptr)
    g3 = None
    if host.g3 is not None:  # one rank a worker (dp_size 1): rank k's G3 pool is its worker's, or the cluster's
        import warnings

        from fastsim.errors import FastsimWarning
        from fastsim.kernels.g3_tier import make_g3_tier

        warnings.warn("the G3 tier (engine.g3_offload) matches Dynamo 1.6.1 on 48 of the 50 configurations "
                      "recorded; with a slow host tier whose stores complete close together, its write "
                      "counters (and under kv_router, late requests' times) may differ from Dynamo's "
                      "(docs/decisions/0485-g3-restore-rounds-and-shared-kv-router.md)", FastsimWarning,
                      stacklevel=2)

        g3 = make_g3_tier(n_ranks, host.g3.num_g3_blocks, st.params.block_size * host.kv_cache_bytes_per_token,
                          host.g3.latency_to_first_byte_ms, host.g3.read_bandwidth_gbps,
                          host.g3.write_bandwidth_gbps, n_jobs=4 * rings[0], n_keys=4 * rings[1],
                          shared=host.g3.scope == "cluster_shared",
                          shared_read_gbps=host.g3.shared_read_bandwidth_gbps,
                          shared_write_gbps=host.g3.shared_write_bandwidth_gbps)
    instant = g3 is not None and host.g3.latency_to_first_byte_ms == 0 and host.g3.read_bandwidth_gbps == 0
    return make_tier_run(ht, st.n_requests, n_ranks, st.params.cap, st.scratch.kbuf.shape[0], dhash, g3,
                         n_att=rings[1] if instant else 1)


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
        "host KV tiers": "engine.native_host_offload.num_host_blocks x ranks",
        "loading the kernels": "fastsim's compiled kernels (a fixed cost)",
    })


def _progress_of(st):
    """(requests finished, latest pass end in ms) of a running simulation's state."""
    from fastsim.kernels.loop import NDONE

    return int(st.cluster.state[NDONE]), float(np.fmax.reduce(st.cluster.last_stamp, initial=np.nan))


def _debug(debug):
    """``simulate``'s ``debug``: as given, else the ``FASTSIM_DEBUG`` environment variable."""
    if debug is None:
        import os

        return os.environ.get("FASTSIM_DEBUG", "") not in ("", "0")
    return bool(debug)


def _report(cols, gaps, fl, *, num_workers, single_path, worker_seconds, dp, wall_ms, sla,
            telemetry, version, committed, single_tail_s=0.0):
    """The :class:`Report` of an aggregated run from its per-request columns, gap statistics and
    fleet record."""
    from fastsim.report import build_report

    report = build_report(
        cols,
        gap_columns(gaps),
        {
            "num_workers": num_workers,
            "single_path": single_path,
            "single_path_tail_s": single_tail_s,
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
    report.workers = (lambda: telemetry_frame(fl)) if telemetry else None
    report.fleet = lambda: fleet_frame(fl)
    return report


def _simulate_split(workload, engine, n_shards, t0, *, num_workers, dp, sla, seed, debug,
                    steady_decode, light_ticks, version, history=False, exact_gap_stats=True):
    """``simulate`` of a cluster split into shards (``fastsim/shards.py``), timed from ``t0``;
    None when ``history`` is asked for and a shard readmitted a preempted request (the shards
    keep no readmission log: the caller runs the cluster whole)."""
    from fastsim import shards
    from fastsim.kernels.codes import DEAD_END

    status, results, gaps, fl, ws, states, remaining = shards.simulate_shards(
        workload, engine, n_shards, num_workers=num_workers, dp=dp, steady_decode=steady_decode,
        light_ticks=light_ticks, seed=seed, version=version, exact_gap_stats=exact_gap_stats)
    wall_ms = (time.perf_counter() - t0) * 1000.0
    if status == DEAD_END:
        raise dead_end_error(remaining, workload, [("", engine)], dynamo_version=version)
    if _debug(debug):
        from fastsim.invariants import check

        for st in states:
            check(st, engine)
    committed = sum(int(st.ranks.counters[COMMITTED_TOKENS]) for st in states)
    if history and any(int(st.scratch.alog_n[READMISSIONS]) > 0 for st in states):
        return None
    del states
    cols = request_columns(results, False)
    if history:
        from fastsim.history import identity_columns

        cols.update(no_readmissions())
        cols.update(identity_columns(workload, False))
    return _report(cols, gaps, fl, num_workers=num_workers,
                   single_path=False, worker_seconds=ws, dp=dp, wall_ms=wall_ms, sla=sla,
                   telemetry=False, version=version, committed=committed)


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
        from fastsim.kernels.fleet import ACTIVE, DRAINING, NACT, NDRAINING, NSTARTING, STARTING
        from fastsim.kernels.kvpool import NACTIVE
        from fastsim.kernels.loop import NARRIVED, NDONE

        fleet, cluster, ranks = st.fleet, st.cluster, st.ranks
        live = np.repeat(np.isin(fleet.gstate, (STARTING, ACTIVE, DRAINING)), cluster.dp)
        return cls(
            now_ms=now_ms,
            active_workers=int(fleet.fs[NACT]),
            starting_workers=int(fleet.fs[NSTARTING]),
            draining_workers=int(fleet.fs[NDRAINING]),
            running=int(ranks.n_run[live].sum()),
            waiting=int(ranks.n_wait[live].sum()),
            kv_blocks_used=int(st.pool.meta[live, NACTIVE].sum()),
            arrived=int(cluster.state[NARRIVED]),
            finished=int(cluster.state[NDONE]),
        )
