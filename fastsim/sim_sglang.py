"""Aggregated simulation on SGLang engines (Dynamo's ``engine_type: sglang``).

Runs the SGLang engine of :mod:`fastsim.sglang_ref` (radix prefix cache, fifo/lpm, chunked
prefill, the new-token ratio, ``prefill_decode_interval``, attention DP) under round-robin routing,
and builds the same :class:`fastsim.report.Report` as the vLLM path. ``version`` "1.4.2" runs
Dynamo 1.4.2's older core instead (decision 0291).
"""

from __future__ import annotations

import time

import numpy as np

from fastsim import interrupt, progress
from fastsim.errors import InputError, NotSupportedError
from fastsim.kernels.codes import (ADMIT_OOM, DEAD_END, OK, OUTCOME_COMPLETED, OUTCOME_IN_FLIGHT,
                                   INTERRUPTED, OUTCOME_REJECTED, SIM_CAP)
from fastsim.kernels.router import OVERFLOW
from fastsim.state import union_table_slots


# False: every decode pass one request at a time (the tests compare the two; ``kernels/sglang_steady.py``)
STEADY_DECODING = True


def _not_yet(what: str) -> NotSupportedError:
    return NotSupportedError(f"{what} with engine_type=sglang is not supported yet by fastsim "
                             "(the SGLang engine runs aggregated round-robin replays of Dynamo 1.6.1 and 1.4.2)")


def _mtp_draws(engine, n_ranks):
    """(acceptance rates, each rank's seed: ``aic_mtp_seed`` plus its index, as on the vLLM
    engine) of a run with speculative decoding (decision 0279), else None."""
    if not engine.aic_nextn:
        return None
    from fastsim.state import mtp_ranks

    kw = mtp_ranks(engine, n_ranks, 1)
    return kw["mtp_rates"], kw["mtp_seeds"]


def _speculation(engine, n_ranks, n_requests):
    """The compiled loop's ``SgSpec`` of a run with speculative decoding, else None."""
    draws = _mtp_draws(engine, n_ranks)
    if draws is None:
        return None
    from fastsim.kernels.mtp import accept_thresholds, new_streams
    from fastsim.kernels.sglang import SgSpec

    return SgSpec(accept_thresholds(draws[0]), new_streams(draws[1]), np.ones(n_requests, np.int64))


def simulate_sglang(workload, engine, *, num_workers, router_mode, version, replay_concurrency,
                    max_sim_time_ms, scaling_schedule, planner, telemetry_interval_ms, sla, router_config=None,
                    seed=0, kv_event_lag_ms=0.0, reference=False, planner_interval_ms=None, max_workers=None):
    """The :class:`fastsim.report.Report` of ``workload`` on SGLang workers (``reference``: run the
    plain-Python engine instead of the compiled one; ``router_config``, ``seed``, ``kv_event_lag_ms``:
    the kv_router's, decision 0295)."""
    from fastsim import sglang_ref
    from fastsim.perf import engine_perf_model
    from fastsim.report import build_report, make_gap_stats
    from fastsim.sglang_config import sglang_settings

    kv = router_mode == "kv_router"
    if router_mode not in ("round_robin", "kv_router"):
        raise _not_yet(f"router_mode {router_mode!r}")
    if kv:
        _check_kv_router(router_config, version, reference, max_sim_time_ms, replay_concurrency)
    if (max_sim_time_ms is not None or replay_concurrency) and reference:
        raise NotSupportedError("a time cap or a closed loop with the plain-Python SGLang reference engine is not "
                                "supported yet")
    _check_fleet(scaling_schedule, planner, kv, version, reference)
    # a changing fleet: a scaling schedule or a planner (a row for every worker it can create)
    scaling = bool(scaling_schedule) or planner is not None
    rows = num_workers
    if scaling:
        from fastsim.run_config import worker_rows

        rows = worker_rows(num_workers, scaling_schedule, planner, max_workers)
    if telemetry_interval_ms and reference:
        raise NotSupportedError("telemetry with the plain-Python SGLang reference engine is not supported yet")
    s = sglang_settings(engine)
    mml = int(engine.max_model_len or 0)
    if mml and version == "1.4.2":
        raise InputError("field 'max_model_len' is supported only for engine_type=vllm with "
                         "dynamo_version='1.4.2' (Dynamo 1.4.2 refuses it on sglang; 1.6.1 takes it)")
    if mml and reference:
        raise NotSupportedError("max_model_len with engine_type=sglang on the plain-Python reference engine is not "
                                "supported yet by fastsim")
    if version == "1.4.2" and s.prefill_decode_interval:
        raise NotSupportedError(
            "prefill_decode_interval with --dynamo-version 1.4.2: Dynamo 1.4.2's SGLang engine has no "
            "prefill_decode_interval (it rejects the flat field and ignores sglang.prefill_decode_interval); "
            "remove it, or run with --dynamo-version 1.6.1")
    dp = max(int(engine.dp_size or 1), 1)
    # without prefix caching nothing is ever matched, and lpm orders the queue as fifo does
    # (decision 0294: Dynamo 1.6.1's lpm run without caching is its fifo run to the ns); Dynamo
    # 1.4.2's SGLang engine ignores enable_prefix_caching
    caching = bool(engine.enable_prefix_caching) or version == "1.4.2"
    cfg = sglang_ref.Cfg(ps=int(engine.block_size), total_pages=int(engine.num_gpu_blocks),
                         policy=s.policy if caching else "fifo", caching=caching, max_model_len=mml,
                         max_prefill=s.max_prefill_tokens,
                         # 1.6.1's attention DP splits the chunk budget among the ranks (SGLang
                         # divides chunked_prefill_size by dp_size); 1.4.2's does not
                         chunk=s.chunked_prefill_size // (dp if version == "1.6.1" else 1),
                         clip=s.clip_max_new_tokens,
                         # and makes the schedule 0.3 times as conservative (the new-token ratio
                         # starts at 0.21 instead of 0.7: decision 0278)
                         conservativeness=s.schedule_conservativeness * (0.3 if dp > 1 and version == "1.6.1" else 1.0),
                         max_running=int(engine.max_num_seqs) if engine.max_num_seqs is not None else 1 << 62,
                         interval=s.prefill_decode_interval, dp=dp, v142=version == "1.4.2")
    perf = engine_perf_model(engine)
    if not reference:
        from fastsim import sglang_state, sglang_telemetry
        from fastsim.kernels.codes import PLANNER_TICK, RECORDS_FULL, TABLE_GROW, TELEMETRY_FULL
        from fastsim.kernels.fleet import TARGET
        from fastsim.state import grow_union_table
        from fastsim.kernels.sglang import CNT_CTRL_C, CNT_READMISSIONS, run_sglang_nb
        from fastsim.kernels.timelines import LOST, grow_records

        # (prompts without hash ids are unique to their request: no overlap to read, no events to keep)
        n_events = 4 * cfg.total_pages + 1024 if kv and workload.hash_ptr is not None else 0

        tel_cap = sglang_telemetry.check_run(telemetry_interval_ms, workload, num_workers)

        def build(log_size=None, ring=0, gap_skip=None):
            return sglang_state.build(workload, cfg, rows, dp, float(engine.speedup_ratio),
                                      float(engine.decode_speedup_ratio), log_size, ring, max_sim_time_ms, gap_skip,
                                      int(replay_concurrency or 0), n_events,
                                      # (speculative decoding draws every step's tokens: no request decodes by
                                      # sums; telemetry reads every rank's pages at its ticks, and scaling
                                      # moves requests between workers: none either)
                                      STEADY_DECODING and not engine.aic_nextn and not telemetry_interval_ms
                                      and not scaling)

        def fleet():
            return sglang_telemetry.new_fleet(telemetry_interval_ms, num_workers, rows, scaling_schedule,
                                              engine.startup_time, planner_interval_ms if planner else None)

        state = build()
        tel = fleet()
        table = _union_table_size(workload, cfg.ps, num_workers * dp) if kv else 0
        rt = _router(router_config, workload, cfg, engine, num_workers * dp, num_workers, table, seed,
                     kv_event_lag_ms, version) if kv else None
        # load (or compile) the loop before the clock starts, as the vLLM path does
        from numba import typeof

        v142 = sglang_state.table_142(workload) if cfg.v142 else None  # (None: 1.6.1's loop, compiled apart)
        # a run without a cap or a closed loop passes no SgLoop: its loop is compiled without them
        looped = max_sim_time_ms is not None or bool(replay_concurrency)
        spec = _speculation(engine, num_workers * dp, workload.n_requests)
        run_sglang_nb.compile(tuple(typeof(a) for a in (*state[:7], state[7] if looped else None, perf, v142, rt,
                                                        state[8], spec, tel)))
    t0 = time.perf_counter()
    if reference:  # the plain-Python engine (slow; the tests compare the two)
        cols, gap_list, committed, _ = sglang_ref.simulate(
            workload, cfg, perf, num_workers=num_workers, dp=dp, speedup=float(engine.speedup_ratio),
            decode_speedup=float(engine.decode_speedup_ratio), mtp=_mtp_draws(engine, num_workers * dp))
        gaps = make_gap_stats(gap_list)
    else:
        log_size, ring, gap_skip = None, 0, None
        progress.track(workload.n_requests, lambda: _progress_of(state))  # (read by a watcher thread)
        while True:
            q, pr, fp, s, t, k, tl, lp, sd = state
            if not looped:
                lp = None
            with interrupt.on_ctrl_c(interrupt.flag((s.cnt, CNT_CTRL_C))):
                status = run_sglang_nb(q, pr, fp, s, t, k, tl, lp, perf, v142, rt, sd, spec, tel)
                while status in (RECORDS_FULL, TELEMETRY_FULL, PLANNER_TICK, TABLE_GROW):
                    if status == RECORDS_FULL:
                        tl = grow_records(tl)
                    elif status == TABLE_GROW:
                        rt = grow_union_table(rt)
                    elif status == TELEMETRY_FULL:
                        tel = sglang_telemetry.grow(tel, tel_cap, telemetry_interval_ms)
                    else:
                        tel.fs[TARGET] = sglang_telemetry.planner_target(planner, tel, q, s, t, k, pr, fp, rows)
                    status = run_sglang_nb(q, pr, fp, s, t, k, tl, lp, perf, v142, rt, sd, spec, tel)
            if status == INTERRUPTED:
                raise KeyboardInterrupt  # (if Python has not raised the pending one already)
            if status in (OK, SIM_CAP) and s.cnt[CNT_READMISSIONS] > s.rlog_row.shape[0]:  # more readmissions than the log held
                log_size = int(s.cnt[CNT_READMISSIONS])
            elif kv and t.ev_meta[:, 2].any():  # a rank's KV events outgrew their ring: a larger one
                n_events *= 4
            elif kv and rt.state[OVERFLOW]:  # the router's table of active blocks filled in a step: a larger one
                table = 4 * rt.tab_key.shape[0]
            elif tl.st[LOST]:  # a request's token times left its worker's ring: a wider one
                ring = 4 * tl.ring.shape[1]
            elif status == SIM_CAP and gap_skip is None and (left := _in_flight_with_gaps(q)).any():
                # Dynamo folds a request's gaps into its statistics when it completes, so the
                # requests in flight at the cap add none; they are known only now: the run is made
                # again (it is deterministic) with their gaps left out of the pooled statistics
                gap_skip = left
            else:
                break
            state = build(log_size, ring, gap_skip)
            tel = fleet()
            v142 = sglang_state.table_142(workload) if cfg.v142 else None
            spec = _speculation(engine, num_workers * dp, workload.n_requests)  # (its generators from the start)
            if kv:
                rt = _router(router_config, workload, cfg, engine, num_workers * dp, num_workers, table, seed,
                             kv_event_lag_ms, version)
        progress.untrack()
        if status == ADMIT_OOM:
            raise NotSupportedError(sglang_ref._NOT_EXACT)
        if status == DEAD_END:
            raise _dead_end(workload, q, cfg)
        cols, gaps, committed = sglang_state.columns(q, s, rows, dp, tl, v142)
    wall_ms = (time.perf_counter() - t0) * 1000.0
    if mml:  # the engine ran the lengths max_model_len allows; the records keep the requested ones
        cols["requested_output_length"] = np.ascontiguousarray(workload.osl, dtype=np.int64)
    # (the workers' time runs to the last completion or max_model_len rejection)
    term = cols["terminal_ms"][(cols["status"] == OUTCOME_COMPLETED) | (cols["status"] == OUTCOME_REJECTED)]
    worker_seconds = num_workers * (float(term.max()) / 1000.0 if term.shape[0] else 0.0)
    single = num_workers == 1 and dp == 1 and not scaling
    if scaling and status != SIM_CAP:  # (the live workers summed at every event)
        worker_seconds = sglang_telemetry.worker_seconds(tel)
    if not reference and status == SIM_CAP:
        from fastsim.kernels.sglang import F_NOW

        # the workers' time so far is the last event at or before the cap (decision 0025), and
        # the passes still in flight there have not committed their prompt tokens
        worker_seconds = num_workers * float(fp[F_NOW]) / 1000.0
        if scaling:
            worker_seconds = sglang_telemetry.worker_seconds(tel)
        committed -= int(lp.pass_commit[s.busy < np.inf].sum())
        if not cfg.v142:  # 1.6.1's single worker stops at the cap like a cluster, with those seconds
            single = False
    if single and cfg.v142:  # Dynamo 1.4.2's records name no worker when there is one
        cols["worker_idx"] = np.full_like(cols["worker_idx"], -1)
    from fastsim.history import identity_columns

    if kv and rt.best.shape[0]:  # 1.6.1's routing records: the chosen and the best overlaps
        sel = np.where(rt.best >= 0, (q.isl - rt.route_pf) // cfg.ps, -1)
        cols["route_selected_blocks"] = sel.astype(np.int64)
        cols["route_reported_tokens"] = np.maximum(sel, 0).astype(np.int64) * cfg.ps
        cols["route_best_blocks"] = rt.best.astype(np.int64)
        cols["route_released_ms"] = rt.released.copy()
    if cfg.v142:  # 1.4.2's session labels (null on its single-worker runtime), as on the vLLM path
        from fastsim.workload import session_labels

        labels = session_labels(workload, bool(replay_concurrency), single)
        if labels is not None:
            cols["session_id"], cols["turn_index"] = labels
    else:
        cols.update(identity_columns(workload, bool(replay_concurrency)))  # 1.6.1's session names and uuids
    report = build_report(cols, gaps, {
        "num_workers": num_workers, "single_path": single, "decode_worker_seconds": worker_seconds,
        "prefill_worker_seconds": 0.0, "prefill_gpus_per_worker": 0, "decode_gpus_per_worker": dp,
        "wall_time_ms": wall_ms, "sla_ttft_ms": sla[0], "sla_itl_ms": sla[1], "sla_e2e_ms": sla[2],
        "dynamo_version": version, "committed_prefill_tokens": committed, "dp": dp})
    if telemetry_interval_ms:
        report.workers = lambda: sglang_telemetry.frame(tel)
    if scaling:
        report.fleet = lambda: sglang_telemetry.fleet_frame(tel)
    return report


def _check_fleet(scaling_schedule, planner, kv, version, reference):
    """What of a changing fleet on SGLang workers is not built yet, refused by name (decision 0380)."""
    for value, what in ((scaling_schedule, "a scaling schedule (scaling_schedule, --scaling-schedule)"),
                        (planner, "a planner (planner=, planner_interval_ms)")):
        if not value:
            continue
        where = ("with kv_router" if kv else "with --dynamo-version 1.4.2" if version == "1.4.2"
                 else "on the plain-Python reference engine" if reference else None)
        if where:
            raise NotSupportedError(
                f"{what} with engine_type=sglang {where} is not supported yet by fastsim (it runs with "
                "round_robin routing for Dynamo 1.6.1)")


def _progress_of(state):
    """(requests finished, the latest pass end scheduled, in ms) of a running SGLang loop."""
    from fastsim.kernels.sglang import CNT_DONE

    s = state[3]
    busy = s.busy[np.isfinite(s.busy)]
    return int(s.cnt[CNT_DONE]), float(busy.max()) if busy.size else float("nan")


def _check_kv_router(router_config, version, reference, max_sim_time_ms, replay_concurrency):
    """What the SGLang engine's kv_router does not run yet, refused by name."""
    from fastsim.router_config import RouterConfig

    RouterConfig.coerce(router_config)  # (a bad config is an error before anything runs)
    if reference:
        raise NotSupportedError("kv_router on the plain-Python SGLang reference engine is not supported yet")


def _union_table_size(workload, ps, n_ranks):
    """Slots of the router's table of active (rank, page) blocks at the start (it grows as they
    outgrow it: ``state.union_table_slots``)."""
    pages = int((np.asarray(workload.isl, dtype=np.int64) // ps).sum())
    return union_table_slots(pages, workload.n_requests, n_ranks)


def _router(router_config, workload, cfg, engine, n_ranks, n_workers, table, seed, lag, version):
    """The kv_router's state (``kernels/router.py``), its index fed by the radix caches' KV events
    with the lag ``lag`` (1.6.1: from the end of the pass that made them)."""
    from types import SimpleNamespace

    from fastsim.run_config import history_kept
    from fastsim.state import queue_priorities, router_state

    # the router queue's busy test reads the workers' max_num_batched_tokens, which an SGLang
    # worker's own schedule never uses (decision 0410)
    budget = engine.max_num_batched_tokens if engine.max_num_batched_tokens is not None else 8192
    params = SimpleNamespace(budget=int(budget), cap=cfg.total_pages)
    return router_state("kv_router", router_config, params, workload.n_requests, n_ranks, n_workers, table, seed,
                        record=history_kept(version), queue_overlaps=True, kv_event_lag_ms=float(lag or 0.0),
                        index_keys=cfg.total_pages, priorities=queue_priorities(workload))


def _in_flight_with_gaps(q):
    """The rows a capped run left in flight with two tokens or more (inter-token gaps to leave out)."""
    return (q.status == OUTCOME_IN_FLIGHT) & (q.gen >= 2)


def _dead_end(workload, q, cfg):
    """The error of a run in which no SGLang rank can ever make progress (Dynamo 1.6.1 stops there
    too, with "replay invariant violated: ... effect-free zero-duration pass"; 1.4.2 with "offline
    replay reached a dead end", or it runs on without end)."""
    import numpy as np

    from fastsim.errors import InputError

    stuck = np.flatnonzero(q.status == OUTCOME_IN_FLIGHT)
    blocked = np.flatnonzero((q.status == OUTCOME_IN_FLIGHT) & np.isnan(q.first_admit))
    where = ""
    if blocked.shape[0]:
        r = int(blocked[np.argmin(q.arrival[blocked])])
        line = int(workload.line[r])
        where = (f"; the first one waiting is {workload.source}" + (f" line {line}" if line else f" request {r}")
                 + f" ({int(q.isl[r])} prompt tokens)")
    if cfg.v142:
        return InputError(
            f"the SGLang engine is stuck with {stuck.shape[0]} request(s) left{where}: Dynamo 1.4.2 admits a "
            "request only when its whole remaining prompt, in pages, plus its output (clipped at "
            "clip_max_new_tokens) is below the KV its rank has free or evictable (at most "
            f"{cfg.total_pages * cfg.ps} tokens: num_gpu_blocks x block_size), and a partly prefilled or "
            "retracted request at the head of the queue holds the others back; give the workers more KV "
            "(num_gpu_blocks). Dynamo 1.4.2 cannot finish such a replay either (it stops with \"offline replay "
            "reached a dead end\" or runs on without end)")
    return InputError(
        f"the SGLang engine is stuck with {stuck.shape[0]} request(s) left{where}: a prompt must fit the "
        f"KV cache of a rank ({cfg.total_pages * cfg.ps} tokens: num_gpu_blocks x block_size) and "
        f"max_prefill_tokens ({cfg.max_prefill}) when it is not chunked (chunked_prefill_size "
        f"{cfg.chunk} per rank); Dynamo stops such a replay too")

