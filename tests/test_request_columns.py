"""The per-request columns the aggregated loop keeps in compact form (``sim._requests``): terminal
times stored only where they differ from the last token's, arrival times read off the workload
in an open loop of single turns, reuse and preemption counts written only when nonzero."""

from __future__ import annotations

import numpy as np

from fastsim.config import EngineArgs
from fastsim.sim import simulate
from fastsim.kernels.scheduler import COMPLETED, FINISHING, NOT_ARRIVED, REJECTED, RUNNING
from fastsim.sim import arrival_times, terminal_times
from fastsim.workload import synthetic


class _Rows:
    def __init__(self, status, last_token, terminal):
        self.status = np.array(status, dtype=np.int8)
        self.last_token = np.array(last_token, dtype=np.float64)
        self.terminal = np.array(terminal, dtype=np.float64)


def test_terminal_times_cover_every_kind_of_end():
    nan = np.nan
    rq = _Rows(
        [COMPLETED, COMPLETED, REJECTED, REJECTED, COMPLETED, FINISHING, RUNNING, NOT_ARRIVED],
        # ended with its last token; ended a pass after it (no token of its own); rejected at 0 and
        # at 5; a zero-output completion at 0; pending and running (no terminal yet); not arrived
        [7.5, 3.0, nan, nan, nan, 9.0, 4.0, nan],
        [0.0, 4.25, 0.0, 5.0, 0.0, 0.0, 0.0, 0.0],
    )
    got = terminal_times(rq)
    np.testing.assert_array_equal(got, [7.5, 4.25, 0.0, 5.0, 0.0, nan, nan, nan])


def test_capped_run_leaves_unarrived_and_unfinished_rows_empty():
    wl = synthetic(256, 8, 400, arrival_interval_ms=5.0)
    rep = simulate(wl, EngineArgs(block_size=16), num_workers=2, max_sim_time_ms=1000.0)
    df = rep.requests
    arrived = df["arrival_time_ms"].notna().to_numpy()
    assert 0 < arrived.sum() < len(df)
    # arrivals at or before the cap, in trace order, at the workload's times
    np.testing.assert_array_equal(df["arrival_time_ms"].to_numpy()[arrived],
                                  wl.session_arrival_ms[wl.session][arrived])
    assert (df["arrival_time_ms"].to_numpy()[arrived] <= 1000.0).all()
    done = df["terminal_time_ms"].notna().to_numpy()
    assert 0 < done.sum() < arrived.sum()
    np.testing.assert_array_equal(df["terminal_time_ms"].to_numpy()[done],
                                  df["last_token_ms"].to_numpy()[done])


def test_arrival_times_kept_by_the_loop_are_its_own():
    class _R:
        arrival = np.array([1.0, 2.0])
        status = np.array([COMPLETED, NOT_ARRIVED], dtype=np.int8)

    assert arrival_times(_R, None, True) is _R.arrival
