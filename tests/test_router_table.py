"""The kv_router's table of active (target, block) entries starts small and grows in place when it
is a quarter full (``TABLE_GROW``), or the run starts again with a larger one if a single step
fills it (``TABLE_FULL``), on the vLLM and SGLang engines. Where an entry sits in the table
changes no result: replays with a table that must grow many times, and with one that never grows,
give the same report and the same requests, bit for bit (decision 0393)."""

from __future__ import annotations

from pathlib import Path

import pytest

import fastsim.sim as sim
from fastsim.api import run_trace_replay

TRACE = Path(__file__).parent.parent / "examples" / "mooncake_trace_1000.jsonl"


def _replay(monkeypatch, size, **kw):
    sizes = []
    grown = []
    real_state, real_grow = sim.router_state, sim.grow_union_table

    def state(*args, **kwargs):
        rt = real_state(*args, **kwargs)
        sizes.append(rt.tab_key.shape[0])
        return rt

    def grow(rt):
        grown.append(rt.tab_key.shape[0])
        return real_grow(rt)

    monkeypatch.setattr(sim, "initial_table_size", lambda *a: size)
    monkeypatch.setattr(sim, "router_state", state)
    monkeypatch.setattr(sim, "grow_union_table", grow)
    report = run_trace_replay(str(TRACE), num_workers=4, router_mode="kv_router", trace_block_size=512,
                              extra_engine_args={"block_size": 16}, arrival_speedup_ratio=8, **kw)
    return report, sizes, grown


@pytest.mark.parametrize("kw", [{}, {"dynamo_version": "1.4.2"}, {"kv_event_lag_ms": 5.0}])
def test_a_growing_table_gives_the_same_run(monkeypatch, kw):
    small, sizes, grown = _replay(monkeypatch, 1024, **kw)
    assert grown and max(sizes) > 1024  # it grew in place, and a step filled it (a fresh start)
    large, sizes_l, grown_l = _replay(monkeypatch, 1 << 22, **kw)
    assert not grown_l and set(sizes_l) == {1 << 22}
    a, b = small.summary, large.summary
    for k in a:
        if "wall" not in k and not k.startswith("processed_"):
            assert a[k] == b[k] or (a[k] != a[k] and b[k] != b[k]), k
    assert list(small.jsonl_lines()) == list(large.jsonl_lines())


def _replay_sglang(monkeypatch, size, **kw):
    import fastsim.sim_sglang as sim_sglang
    import fastsim.state as state

    sizes, grown = [], []
    real_router, real_grow = sim_sglang._router, state.grow_union_table

    def router(*args, **kwargs):
        rt = real_router(*args, **kwargs)
        sizes.append(rt.tab_key.shape[0])
        return rt

    def grow(rt):
        grown.append(rt.tab_key.shape[0])
        return real_grow(rt)

    monkeypatch.setattr(sim_sglang, "_union_table_size", lambda *a: size)
    monkeypatch.setattr(sim_sglang, "_router", router)
    monkeypatch.setattr(state, "grow_union_table", grow)
    report = run_trace_replay(str(TRACE), num_workers=4, router_mode="kv_router", trace_block_size=512,
                              extra_engine_args={"engine_type": "sglang", "block_size": 16}, arrival_speedup_ratio=8,
                              **kw)
    return report, sizes, grown


@pytest.mark.parametrize("kw", [{}, {"dynamo_version": "1.4.2"}])
def test_a_growing_table_gives_the_same_sglang_run(monkeypatch, kw):
    small, sizes, grown = _replay_sglang(monkeypatch, 1024, **kw)
    assert grown and max(sizes) > 1024
    large, sizes_l, grown_l = _replay_sglang(monkeypatch, 1 << 22, **kw)
    assert not grown_l and set(sizes_l) == {1 << 22}
    a, b = small.summary, large.summary
    for k in a:
        if "wall" not in k and not k.startswith("processed_"):
            assert a[k] == b[k] or (a[k] != a[k] and b[k] != b[k]), k
    assert list(small.jsonl_lines()) == list(large.jsonl_lines())
