"""The results of a finished run, read out of its tables: the per-request columns and the
pooled inter-token statistics the report is built from, the admission and routing histories of
Dynamo 1.6.1's records, and the workers' telemetry and fleet frames."""

from __future__ import annotations

import math

import numpy as np

from fastsim.kernels.fleet import ACTIVE, CANCELLED, DRAINING, NCREATED, RETIRED, STARTING, TELN, UNUSED
from fastsim.kernels.rank_state import READMISSIONS

def in_flight_with_gaps(rq):
    """bool[n]: the rows still in flight that have emitted two tokens or more."""
    from fastsim.kernels.codes import COMPLETED, NOT_ARRIVED, REJECTED

    st = rq.status
    return (st != COMPLETED) & (st != REJECTED) & (st != NOT_ARRIVED) & (rq.generated >= 2)


def request_columns(rq, single_path):
    from fastsim.kernels.codes import outcome_of

    status = outcome_of(rq.status)
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


def gap_columns(gaps):
    """The report's inputs of the pooled gap statistics: counts, extremes and histograms, and the
    mean and variance: Dynamo's running ones (``{name}_welford``: count, mean, sum of squared
    deviations) when the requests' timelines were kept, else the sums about a shift."""
    from fastsim.kernels.timelines import ITL, OTPU

    out = {}
    keep = gaps.tl.head.shape[0] > 0
    for name, acc, counts, hist, o in (("itl", gaps.itl, gaps.itl_n, gaps.itl_hist, ITL),
                                       ("otpu", gaps.otpu, gaps.otpu_n, gaps.otpu_hist, OTPU)):
        n, ssum, ssq, vmin, vmax, shift = merged_gap_sums(acc, counts)
        out.update({f"{name}_count": n, f"{name}_sum": ssum, f"{name}_sumsq": ssq,
                    f"{name}_min": vmin, f"{name}_max": vmax, f"{name}_shift": shift,
                    f"{name}_hist": hist})
        if keep:
            wf = gaps.tl.wf
            if int(wf[o]) != n:
                raise RuntimeError(f"{name}: {int(wf[o])} gaps folded at completion, {n} pooled")
            out[f"{name}_welford"] = (int(wf[o]), float(wf[o + 1]), float(wf[o + 2]))
    return out


def no_readmissions():
    return {"readmit_row": np.zeros(0, dtype=np.int64), "readmit_reused": np.zeros(0, dtype=np.int64),
            "readmit_stage": np.zeros(0, dtype=np.int64), "readmit_ms": np.zeros(0)}


def readmission_columns(pa):
    """The readmission log of a run's pass scratch ``pa`` (rows, reused tokens, stage, time), in
    the order the readmissions happened."""
    m = int(pa.alog_n[READMISSIONS])
    if m > pa.alog.shape[0]:
        raise RuntimeError(f"readmission log overflow ({m} readmissions, room for {pa.alog.shape[0]})")
    return {"readmit_row": pa.alog[:m, 0].copy(), "readmit_reused": pa.alog[:m, 1].copy(),
            "readmit_stage": pa.alog[:m, 2].copy(), "readmit_ms": pa.alog_t[:m].copy()}


def history_columns(st, rt):
    """Per-request inputs of 1.6.1's routing and admission histories (aggregated run)."""
    cols = readmission_columns(st.scratch)
    if rt.best.shape[0]:
        if rt.host.chosen.shape[0]:  # (with a host tier the prefill load is not a whole number of blocks)
            sel = np.where(rt.best >= 0, rt.host.chosen, -1)
        else:  # the overlap of the chosen target, from the prefill load the route added (isl - overlap * bs)
            sel = np.where(rt.best >= 0, (st.requests.isl - rt.route_pf) // st.params.block_size, -1)
        cols["route_selected_blocks"] = sel.astype(np.int64)
        cols["route_reported_tokens"] = np.maximum(sel, 0).astype(np.int64) * st.params.block_size
        cols["route_best_blocks"] = rt.best.astype(np.int64)
        cols["route_released_ms"] = rt.released.copy()
    return cols


def telemetry_frame(fl):
    import pandas as pd

    n = int(fl.fs[TELN])
    return pd.DataFrame({
        "time_ms": fl.tel_t[:n].copy(),
        "worker": fl.tel_w[:n].astype(np.int64),
        "running": fl.tel_run[:n].astype(np.int64),
        "waiting": fl.tel_wait[:n].astype(np.int64),
        "kv_blocks_used": fl.tel_kv[:n].astype(np.int64),
        "kv_blocks_cached": fl.tel_cached[:n].astype(np.int64),
        "passes": fl.tel_passes[:n].copy(),
    })


_GSTATE_NAMES = {UNUSED: "unused", STARTING: "starting", ACTIVE: "active", DRAINING: "draining",
                 RETIRED: "retired", CANCELLED: "cancelled"}


def fleet_frame(fl):
    """One row per worker ever created: its final state and passes run."""
    import pandas as pd

    n = int(fl.fs[NCREATED])
    return pd.DataFrame({
        "worker": np.arange(n),
        "state": [_GSTATE_NAMES[int(x)] for x in fl.gstate[:n]],
        "passes": fl.passes[:n].copy(),
    })
