"""Aggregated simulation on SGLang engines (Dynamo's ``engine_type: sglang``).

Runs the SGLang engine of :mod:`fastsim.sglang_ref` (radix prefix cache, fifo/lpm, chunked
prefill, the new-token ratio, ``prefill_decode_interval``, attention DP) under round-robin routing,
and builds the same :class:`fastsim.report.Report` as the vLLM path. ``version`` "1.4.2" runs
Dynamo 1.4.2's older core instead (decision 0291).
"""

from __future__ import annotations

import time

import numpy as np

from fastsim.errors import NotSupportedError
from fastsim.kernels.codes import (ADMIT_OOM, DEAD_END, DP_PRESSURE, OK, OUTCOME_COMPLETED, OUTCOME_IN_FLIGHT,
                                   SIM_CAP)


# False: every decode pass one request at a time (the tests compare the two; ``kernels/sglang_steady.py``)
STEADY_DECODING = True


def _not_yet(what: str) -> NotSupportedError:
    return NotSupportedError(f"{what} with engine_type=sglang is not supported yet by fastsim "
                             "(the SGLang engine runs aggregated round-robin replays of Dynamo 1.6.1 and 1.4.2)")


def simulate_sglang(workload, engine, *, num_workers, router_mode, version, replay_concurrency,
                    max_sim_time_ms, scaling_schedule, planner, telemetry_interval_ms, sla, reference=False):
    """The :class:`fastsim.report.Report` of ``workload`` on SGLang workers (``reference``: run the
    plain-Python engine instead of the compiled one)."""
    from fastsim import sglang_ref
    from fastsim.perf import engine_perf_model
    from fastsim.report import build_report, make_gap_stats
    from fastsim.sglang_config import sglang_settings

    if router_mode != "round_robin":
        raise _not_yet(f"router_mode {router_mode!r}")
    if (max_sim_time_ms is not None or replay_concurrency) and reference:
        raise NotSupportedError("a time cap or a closed loop with the plain-Python SGLang reference engine is not "
                                "supported yet")
    for value, what in ((scaling_schedule, "a scaling schedule"), (planner, "a planner"),
                        (telemetry_interval_ms, "telemetry")):
        if value:
            raise _not_yet(what)
    s = sglang_settings(engine)
    if version == "1.4.2" and s.prefill_decode_interval:
        raise NotSupportedError(
            "prefill_decode_interval with --dynamo-version 1.4.2: Dynamo 1.4.2's SGLang engine has no "
            "prefill_decode_interval (it rejects the flat field and ignores sglang.prefill_decode_interval); "
            "remove it, or run with --dynamo-version 1.6.1")
    dp = max(int(engine.dp_size or 1), 1)
    cfg = sglang_ref.Cfg(ps=int(engine.block_size), total_pages=int(engine.num_gpu_blocks), policy=s.policy,
                         max_prefill=s.max_prefill_tokens,
                         # 1.6.1's attention DP splits the chunk budget among the ranks (SGLang
                         # divides chunked_prefill_size by dp_size); 1.4.2's does not
                         chunk=s.chunked_prefill_size // (dp if version == "1.6.1" else 1),
                         clip=s.clip_max_new_tokens, conservativeness=s.schedule_conservativeness,
                         max_running=int(engine.max_num_seqs) if engine.max_num_seqs is not None else 1 << 62,
                         interval=s.prefill_decode_interval, dp=dp, v142=version == "1.4.2")
    perf = engine_perf_model(engine)
    if not reference:
        from fastsim import sglang_state
        from fastsim.kernels.codes import RECORDS_FULL
        from fastsim.kernels.sglang import CNT_READMISSIONS, run_sglang_nb
        from fastsim.kernels.timelines import LOST, grow_records

        def build(log_size=None, ring=0, gap_skip=None):
            return sglang_state.build(workload, cfg, num_workers, dp, float(engine.speedup_ratio),
                                      float(engine.decode_speedup_ratio), log_size, ring, max_sim_time_ms, gap_skip,
                                      int(replay_concurrency or 0), STEADY_DECODING)

        state = build()
        # load (or compile) the loop before the clock starts, as the vLLM path does
        from numba import typeof

        v142 = sglang_state.table_142(workload) if cfg.v142 else None  # (None: 1.6.1's loop, compiled apart)
        # a run without a cap or a closed loop passes no SgLoop: its loop is compiled without them
        looped = max_sim_time_ms is not None or bool(replay_concurrency)
        run_sglang_nb.compile(tuple(typeof(a) for a in (*state[:7], state[7] if looped else None, perf, v142,
                                                        state[8])))
    t0 = time.perf_counter()
    if reference:  # the plain-Python engine (slow; the tests compare the two)
        cols, gap_list, committed, _ = sglang_ref.simulate(
            workload, cfg, perf, num_workers=num_workers, dp=dp, speedup=float(engine.speedup_ratio),
            decode_speedup=float(engine.decode_speedup_ratio))
        gaps = make_gap_stats(gap_list)
    else:
        log_size, ring, gap_skip = None, 0, None
        while True:
            q, pr, fp, s, t, k, tl, lp, sd = state
            if not looped:
                lp = None
            status = run_sglang_nb(q, pr, fp, s, t, k, tl, lp, perf, v142, sd)
            while status == RECORDS_FULL:
                tl = grow_records(tl)
                status = run_sglang_nb(q, pr, fp, s, t, k, tl, lp, perf, v142, sd)
            if status in (OK, SIM_CAP) and s.cnt[CNT_READMISSIONS] > s.rlog_row.shape[0]:  # more readmissions than the log held
                log_size = int(s.cnt[CNT_READMISSIONS])
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
            v142 = sglang_state.table_142(workload) if cfg.v142 else None
        if status == ADMIT_OOM:
            raise NotSupportedError(sglang_ref._NOT_EXACT)
        if status == DP_PRESSURE:
            raise NotSupportedError(sglang_ref._NOT_EXACT_DP)
        if status == DEAD_END:
            raise _dead_end(workload, q, cfg)
        cols, gaps, committed = sglang_state.columns(q, s, num_workers, dp, tl, v142)
    wall_ms = (time.perf_counter() - t0) * 1000.0
    term = cols["terminal_ms"][cols["status"] == OUTCOME_COMPLETED]
    worker_seconds = num_workers * (float(term.max()) / 1000.0 if term.shape[0] else 0.0)
    single = num_workers == 1 and dp == 1
    if not reference and status == SIM_CAP:
        from fastsim.kernels.sglang import F_NOW

        # the workers' time so far is the last event at or before the cap (decision 0025), and
        # the passes still in flight there have not committed their prompt tokens
        worker_seconds = num_workers * float(fp[F_NOW]) / 1000.0
        committed -= int(lp.pass_commit[s.busy < np.inf].sum())
        if not cfg.v142:  # 1.6.1's single worker stops at the cap like a cluster, with those seconds
            single = False
    if single and cfg.v142:  # Dynamo 1.4.2's records name no worker when there is one
        cols["worker_idx"] = np.full_like(cols["worker_idx"], -1)
    from fastsim.history import identity_columns

    if cfg.v142:  # 1.4.2's session labels (null on its single-worker runtime), as on the vLLM path
        from fastsim.workload import session_labels

        labels = session_labels(workload, bool(replay_concurrency), single)
        if labels is not None:
            cols["session_id"], cols["turn_index"] = labels
    else:
        cols.update(identity_columns(workload, bool(replay_concurrency)))  # 1.6.1's session names and uuids
    return build_report(cols, gaps, {
        "num_workers": num_workers, "single_path": single, "decode_worker_seconds": worker_seconds,
        "prefill_worker_seconds": 0.0, "prefill_gpus_per_worker": 0, "decode_gpus_per_worker": dp,
        "wall_time_ms": wall_ms, "sla_ttft_ms": sla[0], "sla_itl_ms": sla[1], "sla_e2e_ms": sla[2],
        "dynamo_version": version, "committed_prefill_tokens": committed, "dp": dp})


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

