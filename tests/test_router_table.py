"""The kv_router's table of active (target, block) entries starts small and grows in place when it
is a quarter full (``TABLE_GROW``), or the run starts again with a larger one if a single step
fills it (``TABLE_FULL``), on the vLLM and SGLang engines. Where an entry sits in the table
changes no result: replays with a table that must grow many times, and with one that never grows,
give the same report and the same requests, bit for bit (decision 0393)."""

from __future__ import annotations

from pathlib import Path

import pytest

import fastsim.sim as sim
import fastsim.sim_sglang as sim_sglang
import fastsim.state as state
from fastsim.api import run_trace_replay

TRACE = Path(__file__).parent.parent / "examples" / "mooncake_trace_1000.jsonl"
ENGINES = {  # engine_type: (module, its table sizing, its router builder)
    "vllm": (sim, "initial_table_size", "router_state"),
    "sglang": (sim_sglang, "_union_table_size", "_router"),
}


def _replay(monkeypatch, engine, size, **kw):
    """The bundled trace on 4 kv_router workers with a table of ``size`` slots at the start; returns
    the report, the table sizes the runs started with and the sizes it grew from."""
    module, sizing, builder = ENGINES[engine]
    sizes, grown = [], []
    build, grow = getattr(module, builder), state.grow_union_table

    def recorded_build(*args, **kwargs):
        rt = build(*args, **kwargs)
        sizes.append(rt.tab_key.shape[0])
        return rt

    def recorded_grow(rt):
        grown.append(rt.tab_key.shape[0])
        return grow(rt)

    monkeypatch.setattr(module, sizing, lambda *a: size)
    monkeypatch.setattr(module, builder, recorded_build)
    monkeypatch.setattr(module, "grow_union_table", recorded_grow, raising=False)
    monkeypatch.setattr(state, "grow_union_table", recorded_grow)
    report = run_trace_replay(str(TRACE), num_workers=4, router_mode="kv_router", trace_block_size=512,
                              extra_engine_args={"engine_type": engine, "block_size": 16},
                              arrival_speedup_ratio=8, **kw)
    return report, sizes, grown


@pytest.mark.parametrize("engine,kw", [
    ("vllm", {}), ("vllm", {"dynamo_version": "1.4.2"}), ("vllm", {"kv_event_lag_ms": 5.0}),
    ("sglang", {}), ("sglang", {"dynamo_version": "1.4.2"}),
])
def test_a_growing_table_gives_the_same_run(monkeypatch, engine, kw):
    small, sizes, grown = _replay(monkeypatch, engine, 1024, **kw)
    assert grown and max(sizes) > 1024  # it grew in place, and a step filled it (a fresh start)
    large, sizes_l, grown_l = _replay(monkeypatch, engine, 1 << 22, **kw)
    assert not grown_l and set(sizes_l) == {1 << 22}
    a, b = small.summary, large.summary
    for k in a:
        if "wall" not in k and not k.startswith("processed_"):
            assert a[k] == b[k] or (a[k] != a[k] and b[k] != b[k]), k
    assert list(small.jsonl_lines()) == list(large.jsonl_lines())
