"""Telemetry on the SGLang engine (``telemetry_interval_ms``, decision 0380): the buffers its
compiled loop fills (``kernels/sglang_telemetry.py``) and the frame the report shows."""

from __future__ import annotations


def check_run(telemetry_interval_ms, workload, num_workers):
    """The most rows a run may hold (None without telemetry), as on the vLLM path."""
    from fastsim.run_config import check_telemetry

    return check_telemetry(workload, num_workers, telemetry_interval_ms)


def new_buffers(telemetry_interval_ms, num_workers):
    """The loop's telemetry buffers (``kernels/fleet.py``'s Fleet: every worker active from the
    start), or None without telemetry (the loop is then compiled without it)."""
    if not telemetry_interval_ms:
        return None
    from fastsim.kernels.fleet import make_fleet

    return make_fleet(num_workers, num_workers, telemetry_ms=float(telemetry_interval_ms),
                      telemetry_rows=max(4096, 64 * num_workers))


def grow(fl, cap, telemetry_interval_ms):
    """The buffers with twice the room (or telemetry stopped at ``cap`` rows, with a warning)."""
    from fastsim.state import grow_telemetry

    return grow_telemetry(fl, cap, telemetry_interval_ms)


def frame(fl):
    """The report's ``workers`` frame: one row per worker and tick."""
    from fastsim.results import telemetry_frame

    return telemetry_frame(fl)
