"""The per-request columns' block of memory (``fastsim.arena``): contents, layout, and the same
simulation results whichever way the block was made (huge pages, huge pages given up part way,
an ordinary numpy buffer)."""

from __future__ import annotations

import numpy as np
import pytest

import fastsim.arena as arena
import fastsim.sim as sim
from fastsim.config import EngineArgs
from fastsim.workload import synthetic

from test_steady_decode import assert_same_results

_SPEC = [(np.float64, np.nan), (np.int64, -1), (np.int32, 0), (np.int32, -1), (np.int8, 0),
         (np.int8, 3), (np.int32, 7)]


@pytest.fixture(params=["huge", "huge-given-up", "plain"])
def layout(request, monkeypatch):
    monkeypatch.setattr(arena, "_cold_until", 0.0)  # (no pause left by an earlier slow page)
    if request.param == "plain":
        monkeypatch.setattr(arena, "huge_pages_enabled", False)
    elif request.param == "huge-given-up":
        monkeypatch.setattr(arena, "SLOW_HUGE_PAGE_S", -1.0)  # every page "slow": small after the first
        monkeypatch.setattr(arena, "COLD_PAUSE_S", 0.0)
    return request.param


@pytest.mark.parametrize("n", [0, 1, 5, 1000, 300_000])
def test_columns_filled_aligned_and_apart(n, layout):
    cols = arena.columns(n, _SPEC)
    assert len(cols) == len(_SPEC)
    for col, (dtype, fill) in zip(cols, _SPEC):
        assert col.dtype == np.dtype(dtype) and col.shape == (n,)
        assert col.flags.c_contiguous and col.flags.writeable
        assert col.ctypes.data % 16 == 0
        if n:
            expect = np.full(n, fill, dtype=dtype)
            np.testing.assert_array_equal(col, expect)
    for i, col in enumerate(cols):  # writing one column leaves the others as they were
        col[:] = 1 if i != 0 else 2.5
    for i, col in enumerate(cols):
        assert (col == (2.5 if i == 0 else 1)).all()


def test_unzeroed_columns_are_left_as_the_memory_comes(layout, monkeypatch):
    monkeypatch.setattr(arena, "np", _Poisoned())
    cols = arena.columns(300_000, [(np.float64, np.nan), (np.int32, -1)], zeroed=False)
    assert (cols[1] == _POISON_I32).all()  # (the fill is not applied)


# A byte pattern for memory "as it comes": every float64 of it a finite number, every int32 of
# it a valid-looking positive id, so a row read before it is written would go unnoticed as NaN
# or -1 would not.
_POISON_BYTE = 0x21
_POISON_I32 = int(np.full(1, _POISON_BYTE, np.uint8).repeat(4).view(np.int32)[0])


class _Poisoned:
    """numpy, except that ``empty`` returns poisoned memory."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def empty(shape, dtype=float):
        return np.full(shape, _POISON_BYTE, dtype=np.uint8).view(dtype)


def _agg(**kw):
    wl = synthetic(64, 8, 30_000, arrival_interval_ms=0.05)
    return sim.simulate(wl, EngineArgs(block_size=16), num_workers=2, **kw)


def _disagg(**kw):
    from fastsim.sim_disagg import simulate_disagg

    wl = synthetic(64, 8, 30_000, arrival_interval_ms=0.05)
    return simulate_disagg(wl, EngineArgs.coerce(dict(block_size=16, worker_type="prefill")),
                           EngineArgs.coerce(dict(block_size=16, worker_type="decode")),
                           num_prefill_workers=1, num_decode_workers=2, **kw)


@pytest.mark.parametrize("run", [_agg, _disagg], ids=["aggregated", "disaggregated"])
@pytest.mark.parametrize("cap", [None, 700.0], ids=["whole", "capped"])
def test_rows_start_when_they_arrive(run, cap, monkeypatch):
    """The result times are not cleared up front (``zeroed=False``): each row's start is written
    when it arrives, and after a capped run for the rows that never did. With that memory
    poisoned the results are the same, and the rows that never arrived read as such."""
    clean = run(max_sim_time_ms=cap)
    monkeypatch.setattr(arena, "np", _Poisoned())
    poisoned = run(max_sim_time_ms=cap)
    assert_same_results(poisoned, clean)
    df = poisoned.requests
    if cap is None:
        assert clean.summary["completed_requests"] == 30_000
    else:
        never = df["arrival_time_ms"].isna()
        assert 0 < never.sum() < 30_000  # the cap fell while requests were still to arrive
        assert df.loc[never, ["first_admit_ms", "first_token_ms", "terminal_time_ms"]].isna().all().all()
        assert df.loc[never, "decode_worker_idx"].isna().all()


def test_a_large_block_starts_on_a_huge_page_boundary(monkeypatch):
    if arena._madvise is None:
        pytest.skip("huge pages cannot be asked for on this system")
    monkeypatch.setattr(arena, "_cold_until", 0.0)  # (a slow page met earlier would pause the advice)
    cols = arena.columns(600_000, [(np.float64, 0.0)] * 4)  # 19 MB: the huge-page path
    assert cols[0].ctypes.data % arena.HUGE_PAGE == 0
    assert cols[1].ctypes.data - cols[0].ctypes.data == 600_000 * 8


_DEFAULTS = (arena.huge_pages_enabled, arena.SLOW_HUGE_PAGE_S)


def test_the_same_simulation_whatever_the_layout(layout):
    """Large enough (30k requests, 2 workers: about 4 MB of request state) for the huge-page path;
    compared with a run in the default layout."""
    wl = synthetic(64, 4, 30_000, arrival_interval_ms=0.05)
    run = sim.simulate(wl, EngineArgs(block_size=16), num_workers=2)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(arena, "huge_pages_enabled", _DEFAULTS[0])
        mp.setattr(arena, "SLOW_HUGE_PAGE_S", _DEFAULTS[1])
        default = sim.simulate(wl, EngineArgs(block_size=16), num_workers=2)
    assert_same_results(run, default)
    assert run.summary["completed_requests"] == 30_000


def test_a_slow_huge_page_pauses_the_advice(monkeypatch):
    """After a slow huge page, blocks asked for in the next seconds take small pages at once."""
    if arena._madvise is None:
        pytest.skip("huge pages cannot be asked for on this system")
    asked = []
    real = arena._huge_buffer
    monkeypatch.setattr(arena, "_huge_buffer",
                        lambda total, zeroed=True: asked.append(total) or real(total, zeroed))
    monkeypatch.setattr(arena, "SLOW_HUGE_PAGE_S", -1.0)
    monkeypatch.setattr(arena, "_cold_until", 0.0)
    spec = [(np.float64, np.nan)] * 4
    arena.columns(300_000, spec)  # 9.6 MB: asks, and finds its first page "slow"
    cols = arena.columns(300_000, spec)  # within the pause: a plain buffer
    assert len(asked) == 1 and np.isnan(cols[3]).all()
    monkeypatch.setattr(arena, "_cold_until", 0.0)  # the pause over
    arena.columns(300_000, spec)
    assert len(asked) == 2


def test_the_same_disaggregated_simulation_whatever_the_layout(layout):
    """The disaggregated run's request and handoff columns (two pools, 30k requests)."""
    from fastsim.sim_disagg import simulate_disagg

    wl = synthetic(64, 4, 30_000, arrival_interval_ms=0.05)
    pre, dec = EngineArgs(block_size=16, worker_type="prefill"), EngineArgs(block_size=16, worker_type="decode")
    run = simulate_disagg(wl, pre, dec, num_prefill_workers=1, num_decode_workers=2)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(arena, "huge_pages_enabled", _DEFAULTS[0])
        mp.setattr(arena, "SLOW_HUGE_PAGE_S", _DEFAULTS[1])
        default = simulate_disagg(wl, pre, dec, num_prefill_workers=1, num_decode_workers=2)
    assert_same_results(run, default)
    assert run.summary["completed_requests"] == 30_000
