"""fastsim's kernels skip numba's per-function LLVM pipeline and are optimised by the module
pipeline only (``kernels/__init__.py``: ``_llvm_passes``); every other function numba compiles
keeps both. The ``llvm_inline`` kernels are marked for LLVM to inline them, and the kernels'
Python entry points to be left unoptimised."""

from __future__ import annotations

import os

import llvmlite.binding as llvm
import pytest
from numba.core import codegen
from numba.core.registry import cpu_target

import fastsim.kernels as kernels
import fastsim.kernels.scheduler  # noqa: F401 (registers its llvm_inline kernels)

pytestmark = pytest.mark.skipif(os.environ.get("FASTSIM_FUNCTION_PASSES", "") not in ("", "0"),
                                reason="numba's usual two rounds asked for")

# a value kept in a stack slot, as numba emits every variable: the function pipeline's mem2reg/SROA
# turns it into a register
_IR = """
define i64 @"{name}"(i64 %x) {{
entry:
  %slot = alloca i64
  store i64 %x, i64* %slot
  %v = load i64, i64* %slot
  ret i64 %v
}}
"""


def _optimized(name, ir=_IR):
    library = cpu_target.target_context.codegen().create_library("test_module_passes")
    module = llvm.parse_assembly(ir.format(name=name))
    codegen.CPUCodeLibrary._optimize_functions(library, module)
    return str(module)


def test_installed():
    assert getattr(codegen.CPUCodeLibrary._optimize_functions, "fastsim", False)


def test_own_kernels_skip_the_function_pipeline():
    ir = _optimized(f"_ZN5numba{kernels._OWN}4loop11run_loop_nbB2v1")
    assert "alloca" in ir  # left for the module pipeline


def test_other_functions_keep_it():
    ir = _optimized("_ZN5numba2np8arraymath4sortB2v1")
    assert "alloca" not in ir


def test_llvm_inline_kernels_are_marked_alwaysinline():
    from fastsim.kernels.jit import ALWAYS_INLINE

    assert "7fastsim7kernels9scheduler12rank_pass_nbB" in ALWAYS_INLINE
    marked = _optimized(f"_ZN{kernels._OWN}9scheduler12rank_pass_nbB3v12E")
    other = _optimized(f"_ZN{kernels._OWN}9scheduler11rank_passesB3v12E")
    assert "alwaysinline" in marked and "alwaysinline" not in other


def test_entry_points_are_left_unoptimised():
    entry = _optimized(f"_ZN7cpython{kernels._OWN}4loop11run_loop_nbB2v7E")
    assert "optnone" in entry and "noinline" in entry
    assert "optnone" not in _optimized(f"_ZN{kernels._OWN}4loop11run_loop_nbB2v7E")
