"""Fresh memory: fastsim simulates with numpy's huge-page advice off (``fastsim.pages``) and
restores it, and sizes its scratch without request-sized temporaries."""

from __future__ import annotations

import pytest

import fastsim.pages as pages
import fastsim.sim as sim
import fastsim.state as state
from fastsim.config import EngineArgs
from fastsim.errors import InputError
from fastsim.workload import synthetic

needs_switch = pytest.mark.skipif(pages._set_madvise_hugepage is None,
                                  reason="this numpy has no huge-page switch")


_WL = synthetic(64, 8, 20, arrival_interval_ms=1.0)


def _run():
    sim.simulate(_WL, EngineArgs())


def _advice():
    now = pages._set_madvise_hugepage(True)
    pages._set_madvise_hugepage(now)
    return now


def _seen_during_build(monkeypatch, run):
    seen = []
    real = sim.build_state

    def spy(*a, **k):
        seen.append(_advice())
        return real(*a, **k)

    monkeypatch.setattr(sim, "build_state", spy)
    run()
    return seen


@needs_switch
@pytest.mark.parametrize("before", [True, False])
def test_off_while_simulating_and_restored(before, monkeypatch):
    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    pages._set_madvise_hugepage(before)
    try:
        seen = _seen_during_build(monkeypatch, _run)
        assert seen and not any(seen)  # (the first run in a process also loads the kernels)
        assert _advice() is before
        with pytest.raises(InputError):  # restored when the simulation raises, too
            sim.simulate(_WL, EngineArgs(), num_workers=0)
        assert _advice() is before
    finally:
        pages._set_madvise_hugepage(True)


@needs_switch
def test_the_environment_decides_when_set(monkeypatch):
    monkeypatch.setenv("NUMPY_MADVISE_HUGEPAGE", "1")
    pages._set_madvise_hugepage(True)  # (on: a switch-off would show)
    seen = _seen_during_build(monkeypatch, _run)
    assert seen and all(seen)


@needs_switch
def test_overlapping_simulations_restore_the_advice_once(monkeypatch):
    """Nested (or concurrent) simulations: the advice stays off until the last one ends."""
    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    assert _advice() is True
    with pages.small_pages():
        with pages.small_pages():
            assert _advice() is False
        assert _advice() is False
    assert _advice() is True


@pytest.mark.parametrize("n", [1, 8191, 8192, 8193, 20000])
def test_max_tokens_without_a_temporary(n):
    """``state.max_tokens`` sums in chunks (no request-sized temporary): the same maximum wherever
    it falls, chunk edges included."""
    import numpy as np

    rng = np.random.default_rng(n)
    isl = rng.integers(1, 5000, n)
    osl = rng.integers(0, 3000, n)
    for where in {0, n // 2, n - 1, min(8191, n - 1), min(8192, n - 1)}:
        i, o = isl.copy(), osl.copy()
        i[where] = 9000
        assert state.max_tokens(i, o) == int((i + o).max())
