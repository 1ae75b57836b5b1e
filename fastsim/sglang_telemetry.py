"""Telemetry and scaling schedules on the SGLang engine (``telemetry_interval_ms``,
``scaling_schedule``, decision 0380): the fleet its compiled loop keeps (``kernels/fleet.py``'s
Fleet, with ``kernels/sglang_telemetry.py`` and ``kernels/sglang_fleet.py``) and the frames the
report shows."""

from __future__ import annotations


def check_run(telemetry_interval_ms, workload, num_workers):
    """The most rows a run may hold (None without telemetry), as on the vLLM path."""
    from fastsim.run_config import check_telemetry

    return check_telemetry(workload, num_workers, telemetry_interval_ms)


def new_fleet(telemetry_interval_ms, num_workers, rows, schedule, startup_s, planner_ms=None):
    """The loop's fleet: ``rows`` workers, the first ``num_workers`` active from the start, the
    scaling ``schedule`` (validated steps) and telemetry buffers; None for a fixed fleet without
    telemetry (the loop is then compiled without it)."""
    if not telemetry_interval_ms and not schedule and not planner_ms:
        return None
    from fastsim.kernels.fleet import make_fleet

    return make_fleet(rows, num_workers, startup_s=startup_s if schedule or planner_ms else None,
                      planner_ms=planner_ms, telemetry_ms=float(telemetry_interval_ms or 0.0), schedule=schedule,
                      telemetry_rows=max(4096, 64 * rows) if telemetry_interval_ms else 0)


def worker_seconds(fl):
    """The worker-seconds a changing fleet ran (summed at every event over the live workers)."""
    from fastsim.kernels.sglang_fleet import WS

    return float(fl.ff[WS])


def fleet_frame(fl):
    """The report's ``fleet`` frame: every worker ever created, its final state and passes."""
    from fastsim.results import fleet_frame as frame_of

    return frame_of(fl)


def grow(fl, cap, telemetry_interval_ms):
    """The buffers with twice the room (or telemetry stopped at ``cap`` rows, with a warning)."""
    from fastsim.state import grow_telemetry

    return grow_telemetry(fl, cap, telemetry_interval_ms)


def frame(fl):
    """The report's ``workers`` frame: one row per worker and tick."""
    from fastsim.results import telemetry_frame

    return telemetry_frame(fl)


def planner_target(planner, fl, q, s, t, k, pr, fp, rows):
    """Call ``planner`` at its tick (``fp[F_NOW]``) with the SGLang workers' state; the target
    worker count for the loop (at most ``rows``), or -1 to leave the fleet as it is."""
    import numpy as np

    from fastsim.errors import InputError
    from fastsim.kernels.fleet import NACT, NDRAINING, NSTARTING
    from fastsim.kernels.sglang import CNT_DONE, F_NOW, P_DP, P_PAGES
    from fastsim.kernels.sglang_telemetry import live_totals_nb
    from fastsim.sim import PlannerState

    out = np.zeros(3, np.int64)
    live_totals_nb(fl, q, s, k, t, int(pr[P_DP]), int(pr[P_PAGES]), out)
    state = PlannerState(now_ms=float(fp[F_NOW]), active_workers=int(fl.fs[NACT]),
                         starting_workers=int(fl.fs[NSTARTING]), draining_workers=int(fl.fs[NDRAINING]),
                         running=int(out[0]), waiting=int(out[1]), kv_blocks_used=int(out[2]),
                         arrived=int(np.isfinite(q.arrival).sum()),
                         finished=int(s.cnt[CNT_DONE]))
    target = planner(state)
    if target is None:
        return -1
    if isinstance(target, bool) or not isinstance(target, (int, np.integer)) or target < 1:
        raise InputError(f"planner returned {target!r}; it must be a positive worker count or None")
    return min(int(target), rows)
