"""Disaggregated prefill/decode simulation: build the two pools, run the compiled loop, report."""

from __future__ import annotations

import time

import numpy as np

from fastsim import arena, interrupt, progress
from fastsim.errors import InputError, NotSupportedError
from fastsim.pages import with_small_pages
from fastsim.workload import session_labels
from fastsim.results import fleet_frame, gap_columns, in_flight_with_gaps, readmission_columns
from fastsim.run_config import (check_gap_statistics, check_kv_event_lag, check_schedule, history_kept,
                                readmission_log_size, worker_rows)
from fastsim.sim import load_kernels, check_memory
from fastsim.state import (block_keys, engine_params, max_tokens, mtp_ranks, request_table, request_timelines,
                           queue_priorities, router_state, session_table, settle_unarrived, sharing_groups)
from fastsim.dead_end import dead_end_error
from fastsim.trace_checks import check_workload


def stage_router_configs(cfg):
    """Dynamo's derived per-stage router configs (notes C23): the prefill router has no
    active-block term; the decode router counts prompt blocks only (no overlap credit, no dedup,
    no prefill load, no queue)."""
    from fastsim.router_config import RouterConfig

    cfg_p = RouterConfig(**{**cfg.__dict__, "router_track_active_blocks": False})
    cfg_d = RouterConfig(**{**cfg.__dict__, "overlap_score_weight": 0.0,
                            "router_assume_kv_reuse": False, "router_track_prefill_tokens": False,
                            "router_queue_threshold": None})
    return cfg_p, cfg_d


def _flat_synthetic(workload):
    """A synthetic workload of single-turn requests with unique prompts."""
    return workload.source == "synthetic" and workload.hash_ptr is None and not workload.turn.any()


def _check_pool_type(engine, name, worker_type):
    if engine.worker_type != worker_type:
        raise InputError(f"{name}: worker_type must be '{worker_type}', got '{engine.worker_type}'")


def _check_pool(engine, name, worker_type):
    if engine.worker_type != worker_type:
        raise InputError(f"{name}: worker_type must be '{worker_type}', got '{engine.worker_type}'")
    if int(engine.dp_size or 1) != 1:
        raise InputError(f"{name}: dp_size {engine.dp_size} is not allowed in a disaggregated pool (only 1)")


@with_small_pages
def simulate_disagg(
    workload,
    prefill_engine,
    decode_engine,
    *,
    num_prefill_workers: int = 1,
    num_decode_workers: int = 1,
    router_mode: str = "round_robin",
    router_config=None,
    replay_concurrency: int | None = None,
    max_sim_time_ms: float | None = None,
    sla=(None, None, None),
    seed: int = 0,
    scaling_schedule=None,
    steady_decode: bool = True,
    light_ticks: bool = True,
    dynamo_version: str | None = None,
    gap_skip=None,
    gap_statistics: str = "exact",
    kv_event_lag_ms: float | None = None,
    _readmission_log: int | None = None,
    _gap_ring: int = 0,
    _gap_records: int = 0,
    _kv_events: int = 1 << 13,
):
    """Simulate ``workload`` on separate prefill and decode pools (see ``kernels/disagg.py``).

    ``scaling_schedule``: ``{"prefill": [[t_ms, workers], ...], "decode": [...]}`` (either key may
    be left out); each pool's new workers take its engine's ``startup_time`` seconds to start.
    ``steady_decode`` and ``light_ticks`` as in :func:`fastsim.sim.simulate` (False: the same results,
    more slowly; light ticks apply to decode workers). A run cut short by ``max_sim_time_ms`` is
    made again with the gaps of the requests it left in flight left out (``gap_skip``), as there.
    ``dynamo_version``, ``gap_statistics`` and ``kv_event_lag_ms`` as in :func:`fastsim.sim.simulate`
    (the lag applies to the prefill router, the one that credits cached blocks).
    """
    args = dict(locals())
    from fastsim.dynamo_version import check_version, timing_rules

    lag = check_kv_event_lag(kv_event_lag_ms, router_mode, check_version(dynamo_version))
    if "sglang" in (prefill_engine.engine_type, decode_engine.engine_type):  # decision 0370
        if lag:
            raise NotSupportedError("kv_event_lag_ms in disaggregated serving on the SGLang engine is not "
                                    "supported yet by fastsim")
        return _sglang_disagg(args)
    from fastsim.kernels.disagg import Disagg, run_disagg_nb
    from fastsim.kernels.kvpool import EV_OVERFLOWED, make_pool
    from fastsim.kernels.router import OVERFLOW
    from fastsim.kernels.codes import (COMPLETED, DEAD_END, DECODE, FAILED, INTERRUPTED, NOT_ARRIVED, OUTCOME_FAILED,
                                       OUTCOME_IN_FLIGHT, PREFILL, REJECTED, SIM_CAP, outcome_of)
    from fastsim.kernels.fleet import make_fleet
    from fastsim.kernels.loop import CTRL_C, NARRIVED, NDONE, make_cluster, new_gaps
    from fastsim.kernels.timelines import LOST
    from fastsim.kernels.rank_state import COMMITTED_TOKENS, READMISSIONS, make_pass_acc, make_ranks
    from fastsim.perf import engine_perf_model
    from fastsim.report import build_report
    from fastsim.router_config import RouterConfig

    _check_pool(prefill_engine, "prefill_engine_args", "prefill")
    _check_pool(decode_engine, "decode_engine_args", "decode")
    from fastsim.trtllm_config import check_release

    check_release(prefill_engine, check_version(dynamo_version))
    check_release(decode_engine, check_version(dynamo_version))
    if prefill_engine.block_size != decode_engine.block_size:
        raise InputError(
            f"prefill and decode engine args must use the same block_size "
            f"(prefill {prefill_engine.block_size}, decode {decode_engine.block_size})"
        )
    for name, v in (("num_prefill_workers", num_prefill_workers), ("num_decode_workers", num_decode_workers)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InputError(f"{name} is {v!r}; a disaggregated replay needs at least one worker in each pool")
    if router_mode not in ("round_robin", "kv_router"):
        raise InputError(f"router_mode is {router_mode!r}; allowed: 'round_robin', 'kv_router'")
    bw = prefill_engine.kv_transfer_bandwidth
    if bw is not None and not bw > 0:
        raise InputError(f"prefill_engine_args: kv_transfer_bandwidth is {bw!r}; it must be > 0 (GB/s)")
    # Dynamo 1.6.1's prefill router reads its overlaps from the KV events of the prefill workers'
    # passes, published when each pass ends, lag or not (the private blocks of mooncake-delta
    # session streams included, as in the aggregated pools: decision 0460); 1.4.2's reads the pools
    # at once
    if router_mode != "kv_router" or check_version(dynamo_version) != "1.6.1":
        lag = None

    from fastsim.history import identity_columns

    history = history_kept(dynamo_version)
    if _readmission_log is None:
        _readmission_log = readmission_log_size(workload) if history else 0
    schedules = _pool_schedules(scaling_schedule)
    P0, D0 = int(num_prefill_workers), int(num_decode_workers)
    P, D = worker_rows(P0, schedules["prefill"], None, None), worker_rows(D0, schedules["decode"], None, None)
    version = check_version(dynamo_version)
    exact_gap_stats = check_gap_statistics(gap_statistics)
    from fastsim.kv_tiers import check_flat_tiers

    check_flat_tiers(prefill_engine, version, "prefill engine")
    check_flat_tiers(decode_engine, version, "decode engine")
    check_workload(workload)
    check_memory(workload, decode_engine, P + D, kv_router=router_mode == "kv_router",
                 num_workers=f"{P0} prefill + {D0} decode", schedule=schedules["prefill"] + schedules["decode"],
                 pools=[(prefill_engine, P), (decode_engine, D)], kernels_loaded=_LOADED)
    load_disagg_kernels(bool(prefill_engine.aic_nextn), bool(decode_engine.aic_nextn))
    t0 = time.perf_counter()
    pp = engine_params(prefill_engine, PREFILL, steady_decode, light_ticks, timing_rules(version))
    pd = engine_params(decode_engine, DECODE, steady_decode, light_ticks, timing_rules(version))
    n = int(workload.isl.shape[0])
    bs = pp.block_size
    # each pool shares prompt blocks only if its own prefix caching is on
    # (the keys nobody else holds are left private: state.sharing_groups)
    sharing = None if sharing_groups(workload, router_mode, 1) is None else "all"
    keys_p = block_keys(workload, bs, pp.caching, sharing)
    keys_d = keys_p if pd.caching == pp.caching else block_keys(workload, bs, pd.caching, sharing)
    # Dynamo 1.4.2 replays a flat synthetic request list through a path whose prefill copy
    # generates one token (V06 reproduces only so); trace and session workloads run the copy for
    # the full output length (cluster doc C5). Dynamo 1.6.1's prefill copy generates one token
    # for every workload (docs/decisions/0025).
    one_token = version == "1.6.1" or _flat_synthetic(workload)
    osl_p = np.minimum(workload.osl, 1) if one_token else None
    rq_p = request_table(workload, *keys_p, bs, osl_p)
    rq_d = request_table(workload, *keys_d, bs)

    def ranks(m, cap, budget, engine=None, first_worker=0):
        return make_ranks(m, bs, cap, budget, **(mtp_ranks(engine, m, 1, first_worker) if engine else {}))

    concurrency = int(replay_concurrency or 0)
    ss = session_table(workload, concurrency)
    G = P + D
    # (the phantom events are the pass ends of decode workers' steady runs: kernels/disagg.py)
    cl = make_cluster(G, 1, concurrency, False, max_sim_time_ms)
    gaps = new_gaps(G, skip=gap_skip, tl=request_timelines(workload, D, int(min(pd.max_seqs, max(n, 1))) + 1,
                                                            _gap_ring, _gap_records, exact=exact_gap_stats))
    cfg = RouterConfig.coerce(router_config)
    cfg_p, cfg_d = stage_router_configs(cfg)
    if cfg.router_queue_threshold is not None and router_mode == "kv_router" and version == "1.6.1":
        raise NotSupportedError(
            "router_queue_threshold in disaggregated replay is not supported yet by fastsim for Dynamo "
            "1.6.1 (its prefill router releases a queued request with the cache overlaps it saw at the "
            "arrival, docs/decisions/0262); it is for --dynamo-version 1.4.2")
    rt_p = router_state(router_mode, cfg_p, pp, n, P, G, 1024, seed, record=history, queue_overlaps=True,
                        kv_event_lag_ms=lag, index_keys=int(rq_p.key_ptr[-1]) + 1,
                        priorities=queue_priorities(workload))
    rt_d = router_state(router_mode, cfg_d, pd, n, D, G, 1024, seed + 1)
    rt_none = router_state("round_robin", None, pd, 0, 1, G, 1, 0)
    max_blocks = int((max_tokens(workload.isl, workload.osl) if n else 1) // bs + 2)
    emit_cap = max(pp.max_seqs, pd.max_seqs) if n else 1
    emit_cap = int(min(emit_cap, max(n, 1))) + 1
    pa = make_pass_acc(max_blocks, emit_cap, emit_cap, _readmission_log,
                       bursts=bool(prefill_engine.aic_nextn or decode_engine.aic_nextn))
    kvb = prefill_engine.kv_bytes_per_token
    # the handoff columns in two blocks (fastsim/arena.py): those the report keeps, and scratch
    handoff, reserved, activated, released, route_overlap = arena.columns(
        n, [(np.float64, np.nan)] * 4 + [(np.int64, -1)])
    # (one row at least: the transfer heap needs one; the report reads the worker ids, n rows)
    res_matched, xheap, xready, pre_idx, dec_idx, res_next, rel_next, arr_next = arena.columns(
        max(n, 1), [(np.int64, 0), (np.int64, 0), (np.float64, np.nan)] + [(np.int32, -1)] * 5)
    pre_idx, dec_idx = pre_idx[:n], dec_idx[:n]
    dg = Disagg(
        n_pre=P, n_dec=D,
        kv_bytes=float(kvb) if (kvb is not None and bw is not None) else 0.0,
        bandwidth=float(bw) if (kvb is not None and bw is not None) else 0.0,
        missing_only=prefill_engine.kv_transfer_timing_mode == "destination_missing",
        pre_idx=pre_idx, dec_idx=dec_idx,
        handoff=handoff, reserved=reserved, activated=activated,
        released=released, route_overlap=route_overlap,
        res_matched=res_matched, res_next=res_next,
        res_head=np.full(D, -1, np.int32), res_tail=np.full(D, -1, np.int32),
        rel_next=rel_next, rel_head=np.full(P, -1, np.int32),
        rel_tail=np.full(P, -1, np.int32), xheap=xheap,
        xready=xready, xtie=np.arange(n, dtype=np.int64),
        arr_next=arr_next, arr_head=np.full(D, -1, np.int32), arr_tail=np.full(D, -1, np.int32),
        res_tries=np.zeros(D, np.int64),
        order=np.zeros(max(n, 1), np.int64), front_stale=np.zeros(D, np.bool_),
        st=np.zeros(5, np.int64),
    )
    out = np.zeros(4)
    fl_p = make_fleet(P, P0, prefill_engine.startup_time, schedule=schedules["prefill"])
    fl_d = make_fleet(D, D0, decode_engine.startup_time, schedule=schedules["decode"])
    rk_p, rk_d = ranks(P, pp.cap, pp.budget, prefill_engine), ranks(D, pd.cap, pd.budget, decode_engine, 0)
    # (read by a watcher thread while the loop runs, fastsim/progress.py)
    progress.track(n, lambda: (int(cl.state[NDONE]), float(np.fmax.reduce(cl.last_stamp, initial=np.nan))))
    pool_p = make_pool(P, pp.cap, _kv_events if lag is not None else 0, feed_streams=workload.stream_row is not None)
    with interrupt.on_ctrl_c(interrupt.flag((cl.state, CTRL_C))):
        status = run_disagg_nb(pp, pd, engine_perf_model(prefill_engine),
                               engine_perf_model(decode_engine),
                               pool_p, make_pool(D, pd.cap), rq_p, rq_d, rk_p, rk_d,
                               ss, cl, gaps, rt_p, rt_d, rt_none, fl_p, fl_d, dg, pa, out)
    progress.untrack()
    if status == INTERRUPTED:
        raise KeyboardInterrupt  # (if Python has not raised the pending one already)
    if pool_p.ev_meta[:, EV_OVERFLOWED].any():
        # a lag window held more KV events than a prefill worker's feed: run again with a larger one
        return simulate_disagg(**dict(args, _kv_events=4 * _kv_events))
    if rt_p.index.state[OVERFLOW]:  # (its size bounds every block it can hold: a broken invariant)
        raise RuntimeError("the prefill router's KV-event index overflowed")
    if history and int(pa.alog_n[READMISSIONS]) > _readmission_log:
        # more readmissions than the log holds: run again with room for every one of them
        return simulate_disagg(**dict(args, _readmission_log=int(pa.alog_n[READMISSIONS])))
    if gaps.tl.st[LOST]:
        # a request's token times left the decode ring, or the records ran out: a wider one, more room
        return simulate_disagg(**dict(args, _gap_ring=4 * gaps.tl.ring.shape[1],
                                      _gap_records=4 * gaps.tl.rec_pass.shape[0]))
    settle_unarrived(rq_p, int(cl.state[NARRIVED]))
    settle_unarrived(rq_d, int(cl.state[NARRIVED]))
    wall_ms = (time.perf_counter() - t0) * 1000.0
    if status == DEAD_END:
        done = np.isin(rq_d.status, (COMPLETED, REJECTED, FAILED))
        raise dead_end_error(int(cl.state[NARRIVED] - cl.state[NDONE]), workload,
                             [(" of the prefill pool", prefill_engine), (" of the decode pool", decode_engine)],
                             (rq_p.status != NOT_ARRIVED) & ~done, dynamo_version=version, disagg=True)
    if status == SIM_CAP and gap_skip is None:
        left = in_flight_with_gaps(rq_d)
        if left.any():
            return simulate_disagg(**dict(args, steady_decode=False, gap_skip=left))
    st = rq_d.status
    status_col = outcome_of(st, failed=True)
    status_col[(st == NOT_ARRIVED) & (rq_p.status != NOT_ARRIVED)] = OUTCOME_IN_FLIGHT  # in transfer
    req = {
        "arrival_ms": rq_p.arrival,
        "first_admit_ms": rq_p.first_admit,
        "first_token_ms": rq_d.first_token,
        "second_token_ms": rq_d.second_token,
        "last_token_ms": rq_d.last_token,
        "terminal_ms": rq_d.terminal,
        "status": status_col,
        "input_length": rq_p.isl,
        "requested_output_length": rq_d.osl,
        "output_length": rq_d.generated.astype(np.int64),
        "reused_tokens": rq_p.reused.astype(np.int64),
        "ratio_reused_tokens": np.maximum(rq_p.reused, rq_d.reused).astype(np.int64),
        "first_reused_tokens": rq_p.first_reused.astype(np.int64),
        "worker_idx": dg.dec_idx.astype(np.int64),
        "preemptions": (rq_p.npreempt + rq_d.npreempt).astype(np.int64),
        "prefill_worker_idx": dg.pre_idx.astype(np.int64),
        "prefill_admit_ms": rq_p.first_admit,
        "source_held_ms": dg.handoff,
        "destination_reserved_ms": dg.reserved,
        "destination_activated_ms": dg.activated,
        "decode_admit_ms": rq_d.first_admit,
        "source_released_ms": dg.released,
        "decode_reused_input_tokens": np.where(np.isnan(rq_d.first_admit), -1, rq_d.reused).astype(np.int64),
        # round robin writes 0 for both overlaps of a routed request (1.4.2, tests/data/dynamo142)
        "prefill_route_overlap_tokens": np.where((dg.pre_idx >= 0) & (dg.route_overlap < 0), 0,
                                                 dg.route_overlap).astype(np.int64),
        "decode_route_overlap_tokens": np.where(dg.dec_idx >= 0, 0, -1).astype(np.int64),
    }
    labels = session_labels(workload, bool(replay_concurrency), False)
    if labels is not None:
        req["session_id"], req["turn_index"] = labels
    # a request that failed at the handoff has no decode worker
    req["worker_idx"] = np.where(status_col == OUTCOME_FAILED, -1, req["worker_idx"])
    if history:
        # Dynamo 1.6.1 writes a routed pool's overlap as 0 under round robin (1.4.2: null), and
        # the requested output length of the request, not of its prefill copy
        routed_p, routed_d = dg.pre_idx >= 0, dg.dec_idx >= 0
        req["prefill_route_overlap_tokens"] = np.where(routed_p, np.maximum(dg.route_overlap, 0), -1)
        req["decode_route_overlap_tokens"] = np.where(routed_d, 0, -1).astype(np.int64)
        req["requested_output_length"] = np.asarray(workload.osl, dtype=np.int64)
        req.update(readmission_columns(pa))
        req.update(identity_columns(workload, bool(replay_concurrency)))
        if rt_p.best.shape[0]:
            req["route_selected_blocks"] = np.where(dg.route_overlap >= 0, dg.route_overlap // bs, -1)
            req["route_best_blocks"] = rt_p.best.astype(np.int64)
            req["route_released_ms"] = rt_p.released.copy()
    committed = int(rk_p.counters[COMMITTED_TOKENS] + rk_d.counters[COMMITTED_TOKENS])
    if status == SIM_CAP:  # a pass in flight at the cap has not committed its prompt tokens yet
        committed -= int(cl.pass_commit[cl.last_stamp > out[2]].sum())
    report = build_report(req, gap_columns(gaps), {
        "num_workers": P0 + D0,
        "single_path": False,
        "decode_worker_seconds": float(out[1]),
        "prefill_worker_seconds": float(out[0]),
        "prefill_gpus_per_worker": 1,
        "decode_gpus_per_worker": 1,
        "wall_time_ms": wall_ms,
        "sla_ttft_ms": sla[0], "sla_itl_ms": sla[1], "sla_e2e_ms": sla[2],
        "dynamo_version": version,
        "committed_prefill_tokens": committed,
        "disaggregated": True,
    })
    def fleet():
        import pandas as pd

        return pd.concat([fleet_frame(fl_p).assign(pool="prefill"),
                          fleet_frame(fl_d).assign(pool="decode")], ignore_index=True)

    report.fleet = fleet
    report.workers = None
    return report


def _sglang_disagg(args):
    """The SGLang engine's disaggregated replay (``fastsim/sglang_disagg.py``: compiled, decision 0400)."""
    from fastsim.dynamo_version import check_version
    from fastsim.sglang_disagg import check_sglang_disagg, simulate_sglang_disagg

    pe, de = args["prefill_engine"], args["decode_engine"]
    _check_pool_type(pe, "prefill_engine_args", "prefill")
    _check_pool_type(de, "decode_engine_args", "decode")
    version = check_version(args["dynamo_version"])
    check_sglang_disagg(pe, de, router_mode=args["router_mode"], version=version,
                        scaling_schedule=args["scaling_schedule"], router_config=args["router_config"])
    return simulate_sglang_disagg(args["workload"], pe, de, num_prefill_workers=args["num_prefill_workers"],
                                  num_decode_workers=args["num_decode_workers"], sla=args["sla"], version=version,
                                  concurrency=int(args["replay_concurrency"] or 0), cap_ms=args["max_sim_time_ms"],
                                  router_mode=args["router_mode"], router_config=args["router_config"],
                                  seed=int(args["seed"]))


def _pool_schedules(schedule):
    """``{"prefill": [...], "decode": [...]}`` -> validated lists (missing keys: no scaling)."""
    if schedule is None:
        return {"prefill": [], "decode": []}
    if isinstance(schedule, str):
        import json

        try:
            schedule = json.loads(schedule)
        except json.JSONDecodeError as exc:
            raise InputError(f"scaling schedule: malformed JSON at char {exc.pos}: {exc.msg}") from None
    if not isinstance(schedule, dict) or set(schedule) - {"prefill", "decode"}:
        raise InputError('a disaggregated scaling schedule is {"prefill": [[t_ms, workers], ...], '
                         '"decode": [...]} (either key may be left out)')
    return {pool: check_schedule(schedule.get(pool)) for pool in ("prefill", "decode")}


_LOADED = False
_SPECULATIVE_LOADED = set()  # the (prefill, decode) speculative-decoding variants loaded


def load_disagg_kernels(prefill_speculative: bool = False, decode_speculative: bool = False):
    """Load the disaggregated loop once per process, outside the timed region (see sim.py), or
    its variant for pools with speculative decoding when a run has them (decision 0285)."""
    global _LOADED
    from fastsim import warmup
    from fastsim.config import EngineArgs
    from fastsim.workload import synthetic

    key = (prefill_speculative, decode_speculative)
    if any(key):
        if key in _SPECULATIVE_LOADED:
            return
        _SPECULATIVE_LOADED.add(key)
        load_kernels()
        name = "disaggregated-speculative-" + "-".join("yes" if x else "no" for x in key)
        with warmup.variant(name, "the disaggregated simulation kernels with speculative decoding",
                            "about a minute"), progress.hidden():
            simulate_disagg(synthetic(16, 2, 1, arrival_interval_ms=1.0),
                            EngineArgs(block_size=16, worker_type="prefill", aic_nextn=1 if key[0] else None),
                            EngineArgs(block_size=16, worker_type="decode", aic_nextn=1 if key[1] else None))
    elif not _LOADED:
        _LOADED = True
        if not warmup.cached("run_disagg_nb"):
            warmup.announce_compile("the disaggregated simulation kernels", "about a minute")
        load_kernels()
        with progress.hidden():
            simulate_disagg(synthetic(16, 2, 1, arrival_interval_ms=1.0),
                            EngineArgs(block_size=16, worker_type="prefill"),
                            EngineArgs(block_size=16, worker_type="decode"))
