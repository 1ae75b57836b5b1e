"""The arrays of a compiled SGLang simulation (``kernels/sglang.py``), built from a workload, and the
per-request columns and gap statistics read back from them."""

from __future__ import annotations

import numpy as np

from fastsim.kernels.fleet import ACTIVE
from fastsim.kernels.radix import new_radix
from fastsim.kernels.sglang import (CNT_COMMITTED, CNT_HEAP, CNT_NEXTSESS, CNT_READMISSIONS, Sg142, SgLoop, SgRanks,
                                    SgReqs, SgScratch)
from fastsim.kernels.sglang_steady import new_steady
from fastsim.kernels.stats import dd_new_hist
from fastsim.kernels.timelines import ITL, OTPU, new_timelines, ring_width


def build(workload, cfg, num_workers, dp, speedup, decode_speedup, log_size=None, ring=0, cap_ms=None,
          gap_skip=None, concurrency=0, n_events=0, steady=True):
    """(q, pr, fp, s, t, k, tl, lp, sd) for ``kernels.sglang.run_sglang_nb``; ``log_size``: room for that many
    readmissions after retractions (default: one per request); ``ring``: the width of the pass-end
    rings (default: from the longest output); ``cap_ms``: the time cap (None: none); ``gap_skip``:
    the rows whose inter-token gaps the pooled statistics leave out (None: none); ``concurrency``:
    a closed loop of that many sessions at a time (0: the trace's arrival times); ``n_events``: room
    for that many KV events a rank (a kv_router's feed, 0: none); ``steady``: False runs every
    decode pass one request at a time (steady decoding also needs 1.6.1's rules, an open loop
    without a cap and ``clip_max_new_tokens`` at or above every output length)."""
    n = workload.n_requests
    log_size = n + 16 if log_size is None else log_size
    isl = np.ascontiguousarray(workload.isl, dtype=np.int64)
    osl = np.ascontiguousarray(workload.osl, dtype=np.int64)
    if cfg.max_model_len:  # a request stops when its sequence reaches max_model_len (decision 0294)
        osl = np.minimum(osl, np.maximum(cfg.max_model_len - isl, 0))
    session = np.ascontiguousarray(workload.session, dtype=np.int64)
    turn = np.ascontiguousarray(workload.turn, dtype=np.int64)
    next_row = np.full(n, -1, np.int64)
    ptr, rows = workload.session_ptr, workload.session_rows
    for sidx in range(workload.n_sessions):
        rs = rows[ptr[sidx]:ptr[sidx + 1]]
        if rs.shape[0] > 1:
            next_row[rs[:-1]] = rs[1:]
    tie = session * (int(turn.max(initial=0)) + 1) + turn
    ready = np.full(n, np.inf)
    hashed = workload.hash_ptr is not None
    hash_ptr = np.ascontiguousarray(workload.hash_ptr if hashed else np.zeros(n + 1, np.int64), dtype=np.int64)
    hash_ids = np.ascontiguousarray(workload.hash_ids if hashed else np.zeros(1, np.int64), dtype=np.int64)

    def full(v, dtype=np.int64):
        return np.full(n, v, dtype)

    nan = np.nan
    q = SgReqs(isl, osl, session, turn, np.ascontiguousarray(workload.delay_ms, dtype=np.float64), next_row, tie,
               ready, hash_ptr, hash_ids, full(0), full(0), full(0), full(0), full(0), full(-1), full(-1),
               np.zeros(n, np.int8), full(-1), full(-1), full(-1), full(-1), full(nan, np.float64),
               full(nan, np.float64), full(nan, np.float64), full(nan, np.float64), full(nan, np.float64),
               full(nan, np.float64), full(0), full(-1))
    n_ranks = num_workers * dp
    init = 0.7 * cfg.conservativeness
    mn = init * 0.14
    k = SgRanks(np.full(n_ranks, -1, np.int64), np.full(n_ranks, -1, np.int64), np.zeros(n_ranks, np.int64),
                np.full(n_ranks, -1, np.int64), np.full(n_ranks, -1, np.int64), np.zeros(n_ranks, np.int64),
                np.full(n_ranks, init), np.zeros(n_ranks, np.int64), np.zeros(n_ranks, np.int64),
                np.full(n_ranks, ACTIVE, np.int64))
    pr = np.array([cfg.ps, cfg.total_pages, cfg.policy == "lpm", cfg.max_prefill, cfg.chunk, cfg.clip,
                   min(cfg.max_running, 1 << 62), cfg.interval, num_workers, dp, workload.trace_block_size,
                   hashed, concurrency, gap_skip is not None, not cfg.caching, cfg.max_model_len, 0],
                  dtype=np.int64)
    fp = np.array([init, mn, (init - mn) / 600.0, speedup, decode_speedup,
                   -1.0 if cap_ms is None else float(cap_ms), 0.0], dtype=np.float64)
    max_pages = int(((isl + osl).max(initial=0)) // cfg.ps) + 2
    heap = np.zeros(max(n, 1), np.int64)
    s = SgScratch(np.zeros(max_pages, np.uint64), np.zeros(n + 300, np.int64), np.zeros(2 * n + 300, np.int64),
                  np.zeros(2 * n + 300, np.int64), np.zeros(n + 1, np.int64), np.zeros(n + 1, np.int64), heap,
                  np.zeros(9, np.int64), np.full(num_workers, np.inf), np.zeros(num_workers, np.int64),
                  np.full(num_workers, -1, np.int64), np.zeros(16), dd_new_hist(), dd_new_hist(),
                  np.zeros(num_workers, np.int64), np.zeros(log_size, np.int64), np.zeros(log_size),
                  np.zeros(log_size, np.int64))
    lp = SgLoop(np.zeros(n, np.bool_) if gap_skip is None else np.ascontiguousarray(gap_skip, dtype=np.bool_),
                np.zeros(num_workers, np.int64), np.ascontiguousarray(rows[ptr[:-1]], dtype=np.int64))
    first = rows[ptr[:-1]]
    if concurrency > 0:
        # a closed loop: the first sessions start at 0, in session order (a sorted array is a heap)
        first = first[:concurrency]
        ready[first] = 0.0
        heap[:first.shape[0]] = first[np.argsort(tie[first], kind="stable")]
        s.cnt[CNT_NEXTSESS] = first.shape[0]
    else:
        ready[first] = np.asarray(workload.session_arrival_ms, dtype=np.float64)
        # the arrival heap starts as every session's first turn, in (time, session, turn) order
        order = np.lexsort((tie[first], ready[first]))
        heap[:first.shape[0]] = first[order]
    s.cnt[CNT_HEAP] = first.shape[0]
    t = new_radix(n_ranks, cfg.total_pages, n_events)
    # the requests' token times: each rank's decode steps end in a ring, a few records per request in flight
    tl = new_timelines(n, n_ranks, ring or ring_width(int(osl.max(initial=1))),
                       4 * min(n, n_ranks * min(cfg.max_running, n)) + 1024)
    sd = new_steady(n, n_ranks, cfg.ps, steady and not cfg.v142 and cap_ms is None and concurrency == 0
                    and cfg.clip >= int(osl.max(initial=0)))
    return q, pr, fp, s, t, k, tl, lp, sd


def table_142(workload):
    """The 1.4.2 core's own table (``kernels.sglang.Sg142``) for ``workload``."""
    return Sg142(np.zeros(workload.n_requests, np.int64))


def columns(q, s, num_workers, dp, tl, v142=None):
    """The per-request columns of ``fastsim.report.build_report`` and the gap statistics (their
    mean and variance as Dynamo keeps them, from the timelines ``tl``)."""
    n = q.isl.shape[0]
    cols = {
        "arrival_ms": q.arrival, "first_admit_ms": q.first_admit, "first_token_ms": q.first_token,
        "second_token_ms": q.second_token, "last_token_ms": q.last_token, "terminal_ms": q.terminal,
        "status": q.status.astype(np.int8), "input_length": q.isl, "requested_output_length": q.osl,  # (the driver
        # puts the requested lengths back when max_model_len cut them)
        "output_length": q.gen.copy(),
        # 1.4.2 reports the most reused over a request's admissions, and so does 1.6.1 (below)
        "reused_tokens": q.reused if v142 is None else v142.reused_most, "first_reused_tokens": q.reused.copy(),
        "worker_idx": q.rank.copy(),  # the rank: 1.6.1's records name the worker and its DP rank
        "preemptions": np.zeros(n, np.int64),
    }
    g = s.gaps
    gaps = {}
    for name, off, comp, hist in (("itl", 0, 12, s.itl_hist), ("otpu", 6, 14, s.otpu_hist)):
        cnt = int(g[off])
        gaps.update({f"{name}_count": cnt, f"{name}_sum": float(g[off + 1] + g[comp]),
                     f"{name}_sumsq": float(g[off + 2] + g[comp + 1]),
                     f"{name}_min": float(g[off + 3]) if cnt else 0.0,
                     f"{name}_max": float(g[off + 4]) if cnt else 0.0, f"{name}_shift": float(g[off + 5]),
                     f"{name}_hist": hist})
        o = ITL if name == "itl" else OTPU
        if int(tl.wf[o]) != cnt:
            raise RuntimeError(f"{name}: {int(tl.wf[o])} gaps folded at completion, {cnt} pooled")
        gaps[f"{name}_welford"] = (cnt, float(tl.wf[o + 1]), float(tl.wf[o + 2]))
    m = int(s.cnt[CNT_READMISSIONS])
    if v142 is None and m:
        # 1.6.1 reports the most a request reused over its admissions (a readmission after a
        # retraction can reuse more than the first, its own prefix cached: decision 0295)
        most = q.reused.copy()
        np.maximum.at(most, s.rlog_row[:m], s.rlog_reused[:m])
        cols["reused_tokens"] = most
    order = np.argsort(s.rlog_row[:m], kind="stable")
    cols["preemptions"] = np.bincount(s.rlog_row[:m], minlength=n).astype(np.int64)
    cols.update(readmit_row=s.rlog_row[:m][order], readmit_ms=s.rlog_ms[:m][order],
                readmit_reused=s.rlog_reused[:m][order], readmit_stage=np.zeros(m, np.int64))
    return cols, gaps, int(s.cnt[CNT_COMMITTED])
