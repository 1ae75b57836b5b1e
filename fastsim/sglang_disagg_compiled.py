"""Disaggregated serving on SGLang engines, compiled (``kernels/sglang_disagg.py``): the arrays of
both pools and the handoff, built from a workload, the loop's run, and its report. The rules are
the plain-Python reference's (``fastsim/sglang_disagg.py``, decision 0370), which runs what this
path does not cover yet (:func:`not_covered`)."""

from __future__ import annotations

import time

import numpy as np

from fastsim import interrupt, progress, warmup
from fastsim.kernels.codes import DEAD_END, INTERRUPTED, OUTCOME_IN_FLIGHT, SIM_CAP


def not_covered(prefill_engine, decode_engine):
    """Why the compiled loop does not run these pools yet (None: it does); the reference runs them."""
    return None


def simulate(workload, prefill_engine, decode_engine, *, num_prefill_workers, num_decode_workers, sla, version,
             concurrency=0, cap_ms=None, router_mode="round_robin", router_config=None, seed=0):
    """The :class:`fastsim.report.Report` of ``workload`` on SGLang prefill and decode pools, as
    :func:`fastsim.sglang_disagg.simulate_sglang_disagg` gives it (``router_mode`` "kv_router": each
    pool's router, ``router_config`` and ``seed`` as the aggregated engine's, decision 0440)."""
    from numba import typeof

    from fastsim import sglang_state
    from fastsim.kernels.sglang import CNT_COMMITTED, CNT_READMISSIONS, F_NOW, P_POOL, POOL_DECODE, POOL_PREFILL
    from fastsim.kernels.sglang_disagg import G_CTRL_C, new_handoff, run_sglang_disagg_nb
    from fastsim.sglang_disagg import pool_routers
    from fastsim.perf import engine_perf_model
    from fastsim.sglang_disagg import _cfg, _report, _stuck, gap_stats
    from fastsim.sim_sglang import _speculation

    n = workload.n_requests
    P, D = int(num_prefill_workers), int(num_decode_workers)
    dp_p, dp_d = max(int(prefill_engine.dp_size or 1), 1), max(int(decode_engine.dp_size or 1), 1)
    cfg_p, cfg_d = _cfg(prefill_engine, dp_p), _cfg(decode_engine, dp_d)
    perf_p, perf_d = engine_perf_model(prefill_engine), engine_perf_model(decode_engine)
    isl = np.asarray(workload.isl, np.int64)
    kvb, bw = prefill_engine.kv_bytes_per_token, prefill_engine.kv_transfer_bandwidth
    if kvb is None or bw is None:  # (no transfer time without both fields)
        xfer = np.zeros(n)
    else:
        xfer = isl.astype(np.float64) * float(kvb) / (float(bw) * 1e9) * 1000.0

    kv = router_mode == "kv_router"
    # kv_router: the prefill ranks' radix caches publish their KV events to the prefill router
    # (prompts without hash ids are unique to their request: no overlap to read, no events to keep)
    n_events = 4 * cfg_p.total_pages + 1024 if kv and workload.hash_ptr is not None else 0

    def build(log_size=None, gap_skip=None):
        pre = sglang_state.build(workload, cfg_p, P, dp_p, float(prefill_engine.speedup_ratio),
                                 float(prefill_engine.decode_speedup_ratio), n_events=n_events, steady=False)
        # the prefill pool prefills a copy of each request that generates one token, and holds its KV
        pre = (pre[0]._replace(osl=np.ones(n, np.int64)), *pre[1:])
        pre[1][P_POOL] = POOL_PREFILL
        dec = sglang_state.build(workload, cfg_d, D, dp_d, float(decode_engine.speedup_ratio),
                                 float(decode_engine.decode_speedup_ratio), log_size, 0, cap_ms, None,
                                 int(concurrency or 0), 0, False)
        dec[1][P_POOL] = POOL_DECODE
        h = new_handoff(n, D * dp_d, P, D, xfer, gap_skip)
        qp, prp, fpp, sp, tp, kp, tl, _, sdp = pre
        qd, prd, fpd, sd, td, kd, _, lp, sdd = dec
        # speculative decoding: each decode rank's sampler seeded with aic_mtp_seed plus its number
        # in the pool (made again with the state: its generators from the start)
        spec = _speculation(decode_engine, D * dp_d, n)
        rt_p, rt_d = pool_routers(router_config, workload, cfg_p, cfg_d, prefill_engine, decode_engine, P, D, dp_p,
                                  dp_d, seed) if kv else (None, None)
        return (qp, prp, fpp, sp, tp, kp, sdp, qd, prd, fpd, sd, td, kd, sdd, tl, lp, perf_p, perf_d, h, spec,
                rt_p, rt_d)

    args = build()
    # load (or compile) the loop before the clock starts, as the aggregated path does
    mtp = args[19] is not None
    with warmup.variant("sglang-disagg" + ("-mtp" if mtp else "") + ("-kv" if kv else ""),
                        "the SGLang disaggregated kernels" + (" with speculative decoding" if mtp else "")
                        + (" with kv_router" if kv else ""), "a minute or two"):
        run_sglang_disagg_nb.compile(tuple(typeof(a) for a in args))
    t0 = time.perf_counter()
    log_size, gap_skip = None, None
    while True:
        h, sp, sd = args[18], args[3], args[10]
        progress.track(n, lambda: _progress_of(h, sp, sd))  # (read by a watcher thread)
        with interrupt.on_ctrl_c(interrupt.flag((h.cnt, G_CTRL_C))):
            status = run_sglang_disagg_nb(*args)
        progress.untrack()
        if status == INTERRUPTED:
            raise KeyboardInterrupt  # (if Python has not raised the pending one already)
        qd = args[7]
        if status == DEAD_END:
            break
        if sd.cnt[CNT_READMISSIONS] > sd.rlog_row.shape[0]:  # more readmissions than the log held: again, with room
            log_size = int(sd.cnt[CNT_READMISSIONS])
        elif kv and args[4].ev_meta[:, 2].any():  # a prefill rank's KV events outgrew their ring: a larger one
            n_events *= 4
        elif status == SIM_CAP and gap_skip is None and ((qd.status == OUTCOME_IN_FLIGHT) & (qd.gen >= 2)).any():
            # the requests in flight at the cap add no gaps (Dynamo folds a request's gaps into its
            # statistics when it completes); they are known only now: the run is made again (it is
            # deterministic) with their gaps left out
            gap_skip = (qd.status == OUTCOME_IN_FLIGHT) & (qd.gen >= 2)
        else:
            break
        args = build(log_size, gap_skip)
    qp, sp, qd, fpd = args[0], args[3], args[7], args[9]
    status_col = qd.status.astype(np.int8)
    if status == DEAD_END:
        raise _stuck(workload, status_col, cfg_p)
    committed = int(sp.cnt[CNT_COMMITTED] + sd.cnt[CNT_COMMITTED])
    cap_event = None
    if status == SIM_CAP:  # the passes in flight at the last event have not committed their prompt tokens
        cap_event = float(fpd[F_NOW])
        committed -= int(h.commit_p[(sp.busy < np.inf) & (sp.busy > cap_event)].sum()
                         + h.commit_d[(sd.busy < np.inf) & (sd.busy > cap_event)].sum())
    k = int(sd.cnt[CNT_READMISSIONS])
    routes = None
    if kv:  # the prefill router's overlaps: of the rank chosen and the best (pages)
        rt_p = args[20]
        routes = {"prefill_route_overlap_tokens": np.where(h.pov >= 0, h.pov * cfg_p.ps, -1).astype(np.int64),
                  "route_selected_blocks": h.pov.copy(), "route_best_blocks": rt_p.best.astype(np.int64),
                  "route_released_ms": rt_p.released.copy()}
    readmits = (sd.rlog_row[:k], sd.rlog_ms[:k], sd.rlog_reused[:k])
    return _report(workload, {
        "arrival_ms": qd.arrival, "first_admit_ms": qp.first_admit, "first_token_ms": qd.first_token,
        "second_token_ms": qd.second_token, "last_token_ms": qd.last_token, "terminal_ms": qd.terminal,
        "status": status_col, "output_length": qd.gen.copy(), "reused_tokens": qp.reused, "dec_idx": h.dec_idx,
        "pre_idx": h.pre_idx, "source_held_ms": h.held, "destination_reserved_ms": h.reserved,
        "destination_activated_ms": h.activated, "decode_admit_ms": h.dadmit, "source_released_ms": h.released},
        readmits, gap_stats(sd), committed, cap_event, t0, P=P, D=D, dp_p=dp_p, dp_d=dp_d, concurrency=concurrency,
        sla=sla, version=version, routes=routes)


def _progress_of(h, sp, sd):
    """(requests finished, the latest pass end scheduled, in ms) of the running loop."""
    from fastsim.kernels.sglang_disagg import G_DONE

    busy = np.concatenate((sp.busy, sd.busy))
    busy = busy[np.isfinite(busy)]
    return int(h.cnt[G_DONE]), float(busy.max()) if busy.size else float("nan")
