"""fastsim's ``inner`` kernels are compiled to optimised LLVM IR only and cached as that IR
(``kernels/numba_patches.py``, opt-in: ``_inner_without_machine_code``); the kernels Python calls and those
called through a pointer keep their machine code. For fastsim's kernels only, numba's IR
post-processing leaves out the per-block live variables (``_lean_postproc``), the typing of a
call to one of numba's functions is looked up when it was found before (``_typed_call_memo``),
the post-inference rewrites look for a match first (``_rewrites_only_on_match``), and a
variable assigned once, where that assignment dominates its uses, is lowered as a value
(``_single_definitions_as_values``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from numba.core import compiler, postproc

import fastsim.kernels.numba_patches as kernels
from fastsim.kernels import jit, loop

pytestmark = pytest.mark.skipif(
    "inner-ir-only" not in kernels.INSTALLED,
    reason="the opt-in numba patches are not installed, or numba's usual machine code asked for")

# A probe module loaded under the kernels' package name (so that the compile options apply to
# it): an inner kernel and three callers, each of which can be compiled on its own.
_CALLER = '''

@kernel_noalloc
def {name}(a):
    s = 0
    for i in range(a.size):
        s += {k} * add_one(a, i)
    return s
'''
_PROBE = '''
from fastsim.kernels.jit import inner, kernel_noalloc


@inner
def add_one(a, i):
    return a[i] + 1
''' + "".join(_CALLER.format(name=n, k=k)
               for n, k in (("total", 1), ("total_twice", 2), ("total_thrice", 3)))

_RUN = '''
import importlib.util, json, sys
import numpy as np
import fastsim.kernels
spec = importlib.util.spec_from_file_location("fastsim.kernels.probe_inner_ir", sys.argv[1])
probe = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)
a = np.arange(5, dtype=np.int64)
out = {"value": int(getattr(probe, sys.argv[2])(a))}
for name in ("add_one", sys.argv[2]):
    d = getattr(probe, name)
    (cres,) = d.overloads.values()
    engine = cres.library.codegen._engine
    out[name] = {"ir_only": bool(getattr(cres.library, "fastsim_ir_only", False)),
                 "machine_code": engine.is_symbol_defined(cres.fndesc.llvm_func_name),
                 "cache_hits": sum(d.stats.cache_hits.values())}
# asked for its address after all, an IR-only kernel gets machine code then
(cres,) = probe.add_one.overloads.values()
out["address"] = bool(cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name))
out["late"] = bool(getattr(cres.library, "fastsim_compiled_late", False))
print(json.dumps(out))
'''


def _run(tmp_path, caller, **env_):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"),
               **env_)
    done = subprocess.run([sys.executable, "-c", _RUN, str(tmp_path / "probe.py"), caller],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_installed():
    from numba.core import typed_passes

    assert getattr(typed_passes.BaseNativeLowering.run_pass, "fastsim", False)
    assert getattr(postproc.PostProcessor.run, "fastsim", False)


def test_inner_kernel_is_ir_only_compiled_and_from_the_cache(tmp_path):
    (tmp_path / "probe.py").write_text(textwrap.dedent(_PROBE))
    first = _run(tmp_path, "total")
    assert first["value"] == sum(range(1, 6))
    assert first["add_one"] == {"ir_only": True, "machine_code": False, "cache_hits": 0}
    assert first["total"]["machine_code"] and not first["total"]["ir_only"]
    # a second process compiles another caller against the cached IR of the inner kernel
    second = _run(tmp_path, "total_twice")
    assert second["value"] == 2 * sum(range(1, 6))
    assert second["add_one"] == {"ir_only": True, "machine_code": False, "cache_hits": 1}
    assert second["total_twice"]["machine_code"]
    assert first["address"] and second["address"] and first["late"] and second["late"]
    # numba's usual compiles asked for: the cached IR-only kernel still loads and links
    third = _run(tmp_path, "total_thrice", FASTSIM_INNER_MACHINE_CODE="1")
    assert third["value"] == 3 * sum(range(1, 6))
    assert third["add_one"]["cache_hits"] == 1 and third["total_thrice"]["machine_code"]


def test_a_pointer_call_registers_both_ends_for_machine_code():
    """The callee runs from its machine code; the caller's slot is filled in its machine code,
    so an IR-only caller would be left unlinked (the call then raises)."""
    from numba import njit

    from fastsim.kernels.indirect import link

    def caller(x):
        return x

    dispatcher = njit(caller)
    try:
        assert link(dispatcher) is dispatcher and caller in jit.MACHINE_CODE
    finally:
        jit.MACHINE_CODE.discard(caller)


def test_kernels_called_through_a_pointer_keep_machine_code():
    assert loop._light_ticks.py_func in jit.MACHINE_CODE
    assert loop._loop.py_func in jit.MACHINE_CODE
    import fastsim.sim as sim
    from fastsim.config import EngineArgs
    from fastsim.workload import synthetic

    sim.simulate(synthetic(64, 8, 10, arrival_interval_ms=40), EngineArgs())
    for d in (loop._loop, loop._light_ticks):
        assert d.overloads, d
        for cres in d.overloads.values():
            # compiled to machine code, not IR-only with machine code made when its address was
            # asked for (nor cached as IR, whose load would make it late again)
            assert not getattr(cres.library, "fastsim_ir_only", False)
            assert not getattr(cres.library, "fastsim_compiled_late", False)
            engine = cres.library.codegen._engine
            assert engine.is_symbol_defined(cres.fndesc.llvm_func_name)


def _blocks_ceil_ir():
    from fastsim.kernels import blocks

    return compiler.run_frontend(blocks.blocks_ceil.py_func)


def _elsewhere(n):
    s = 0
    for i in range(n):
        if i % 3:
            s += i
    return s


def test_post_processing_of_own_kernels_leaves_out_block_entry_variables():
    lean, usual = _blocks_ceil_ir(), _blocks_ceil_ir()
    lean.block_entry_vars.clear()
    usual.block_entry_vars.clear()
    postproc.PostProcessor(lean).run()
    postproc.PostProcessor.run.usual(postproc.PostProcessor(usual))
    assert lean.block_entry_vars == {} and usual.block_entry_vars
    assert sorted(lean.blocks) == sorted(usual.blocks)
    assert [str(b) for b in lean.blocks.values()] == [str(b) for b in usual.blocks.values()]
    assert lean.variable_lifetime.livemap == usual.variable_lifetime.livemap
    assert lean.generator_info is None


def test_post_processing_elsewhere_is_numbas():
    fir = compiler.run_frontend(_elsewhere)
    fir.block_entry_vars.clear()
    postproc.PostProcessor(fir).run()
    assert set(fir.block_entry_vars) == set(fir.blocks.values())
    assert kernels.__name__ == "fastsim.kernels.numba_patches"


# A probe module of fastsim's kernels, compiled in this process (without the cache): the typing
# memo and the rewrites apply to it as to any kernel of the package.
_PROBE_TYPING = '''
import numpy as np
from numba import njit


@njit(error_model="numpy")
def smallest(a, n):
    s = a[0]
    for i in range(n):
        s = min(s, a[i]) + max(0, i - n)
    return min(s, n)


@njit(error_model="numpy")
def doubled(a, b):
    return (a + b) * 2
'''


def _probe(name):
    import types

    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(textwrap.dedent(_PROBE_TYPING), f"<{name}>", "exec"), module.__dict__)
    return module


def test_typed_call_memo_returns_what_numba_types():
    import numpy as np
    from numba.core.types import functions

    memo = functions.BaseFunction.get_call_type
    assert getattr(memo, "fastsim", False)
    before = len(memo.found)
    probe = _probe("fastsim.kernels._probe_typing")
    a = np.array([5, 3, 9, 1], dtype=np.int64)
    assert probe.smallest(a, 4) == 1
    own = {k: v for k, v in memo.found.items() if str(k[0]).startswith("Function(<built-in")}
    assert len(memo.found) > before and own
    for (fn, context, args, kws), sig in memo.found.items():
        assert memo.usual(fn, context, args, dict(kws)) == sig
    # a function outside the package is typed by numba's own resolution only
    outside = _probe("probe_typing_elsewhere")
    after = len(memo.found)
    assert outside.smallest(a, 3) == 3
    assert len(memo.found) == after


def test_rewrites_still_apply_where_they_match():
    import io

    import numpy as np

    probe = _probe("fastsim.kernels._probe_rewrites")
    a, b = np.arange(4.0), np.ones(4)
    assert np.array_equal(probe.doubled(a, b), (a + b) * 2)
    assert probe.smallest(np.array([4, 2], dtype=np.int64), 2) == 2
    for fn, fused in ((probe.doubled, True), (probe.smallest, False)):
        text = io.StringIO()
        fn.inspect_types(file=text)
        assert ("arrayexpr" in text.getvalue()) == fused


def _shapes(a, n):
    x = a[0] + 1  # assigned once, in the entry block: used in the loop
    s = 0
    for i in range(n):
        s += x * i  # s and i: assigned again and again
    if n > 3:
        y = 2
    else:
        y = 3  # y: assigned in two blocks
    if n > 1:
        w = a[1]  # assigned once, but in a block that does not dominate its use
    if n > 2:
        s += w
    return s + y


def test_dominating_definitions():
    found = kernels._dominating_definitions(compiler.run_frontend(_shapes).blocks)
    assert {"x", "a", "n"} <= found  # (the arguments: assigned once, in the entry block)
    assert not {"s", "i", "y", "w"} & found


_PROBE_VALUES = '''
import numpy as np
from numba import njit


def weighted(a, n):
    x = a[0] + 1
    s = 0
    for i in range(n):
        s += x * a[i]
        if a[i] > 2:
            w = a[i] * 2
            s += w
    return s


weighted_noalloc = njit(error_model="numpy", _nrt=False)(weighted)
weighted_counted = njit(error_model="numpy")(weighted)
'''


@pytest.mark.skipif(os.environ.get("FASTSIM_VARIABLE_SLOTS", "") not in ("", "0"),
                    reason="numba's stack slots for every variable asked for")
def test_single_definitions_lowered_as_values(monkeypatch):
    """Only kernels of the package without reference counting have their dominating single
    definitions lowered as values; the results are numba's."""
    import types

    import numpy as np
    from numba.core import lowering

    assert getattr(lowering.Lower._find_singly_assigned_variable, "fastsim", False)
    seen = []
    usual = kernels._dominating_definitions
    monkeypatch.setattr(kernels, "_dominating_definitions",
                        lambda blocks: seen.append(usual(blocks)) or seen[-1])
    probes = {}
    for name in ("fastsim.kernels._probe_values", "probe_values_elsewhere"):
        module = types.ModuleType(name)
        monkeypatch.setitem(sys.modules, name, module)
        exec(compile(textwrap.dedent(_PROBE_VALUES), f"<{name}>", "exec"), module.__dict__)
        probes[name] = module
    a = np.array([1, 4, 2, 7, 3], dtype=np.int64)
    expected = probes["fastsim.kernels._probe_values"].weighted(a, 5)
    assert probes["fastsim.kernels._probe_values"].weighted_noalloc(a, 5) == expected
    assert len(seen) == 1 and "x" in seen[0]
    assert probes["fastsim.kernels._probe_values"].weighted_counted(a, 5) == expected
    assert probes["probe_values_elsewhere"].weighted_noalloc(a, 5) == expected
    assert len(seen) == 1  # neither a kernel with reference counting nor one elsewhere


_KINDS = {
    "synthetic": ["--input-tokens", "64", "--output-tokens", "8", "--request-count", "20",
                  "--arrival-interval-ms", "5", "--num-workers", "2"],
    "trace kv_router": ["--num-workers", "2", "--router-mode", "kv_router", "TRACE"],
    "disaggregated": ["--input-tokens", "256", "--output-tokens", "8", "--request-count", "20",
                      "--arrival-interval-ms", "5", "--num-prefill-workers", "1",
                      "--num-decode-workers", "2",
                      "--prefill-engine-args", '{"worker_type":"prefill","block_size":64}',
                      "--decode-engine-args", '{"worker_type":"decode","block_size":64}'],
}


@pytest.mark.parametrize("kind", sorted(_KINDS))
def test_warm_process_loads_kernels_without_numba_registries(kind, tmp_path):
    """A fresh process that finds every kernel in the cache loads them with numba's runtime set
    up but not its registries (``_load_without_refresh``), and runs each kind of simulation as
    the process that compiled them did."""
    from pathlib import Path

    trace = Path(__file__).parent / "data" / "mooncake_tiny.jsonl"
    args = [str(trace) if a == "TRACE" else a for a in _KINDS[kind]]
    reports = []
    for i in range(2):  # the first may compile (a cold cache); the second loads
        report = tmp_path / f"r{i}.json"
        done = subprocess.run([sys.executable, "-m", "fastsim", "replay", *args, "--report-json",
                               str(report)], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        reports.append(json.loads(report.read_text()))
    drop = ("wall_time_ms", "processed_output_tokens_per_s", "processed_tokens_per_s")
    assert [{k: v for k, v in r.items() if k not in drop} for r in reports] == [
        {k: v for k, v in reports[0].items() if k not in drop}] * 2
    from numba.core import caching

    assert getattr(caching.Cache.load_overload, "fastsim", False)
