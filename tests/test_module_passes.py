"""fastsim's kernels are lowered into their own LLVM code library (``kernels/jit.py``:
``FastsimCodeLibrary``, through numba's ``pipeline_class`` option): it skips LLVM's per-function
pipeline, marks the ``llvm_inline`` kernels for LLVM to inline them and leaves the kernels' Python
entry points unoptimised. numba's own library, which every other function keeps, is untouched."""

from __future__ import annotations

import llvmlite.binding as llvm
from numba.core import codegen
from numba.core.registry import cpu_target

import fastsim.kernels.scheduler  # noqa: F401 (registers its llvm_inline kernels)
from fastsim.kernels import jit, loop

_OWN = "7fastsim7kernels"

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


def _optimized(name, library_class):
    library = library_class(cpu_target.target_context.codegen(), "test_module_passes")
    module = llvm.parse_assembly(_IR.format(name=name))
    library._optimize_functions(module)
    return str(module)


def test_kernels_compile_through_fastsims_pipeline():
    assert loop.run_loop_nb._compiler.pipeline_class is jit.FastsimCompiler
    assert not issubclass(codegen.JITCodeLibrary, jit.FastsimCodeLibrary)
    assert "_optimize_functions" not in vars(codegen.JITCodeLibrary)  # numba's is not replaced


def test_own_kernels_skip_the_function_pipeline():
    ir = _optimized(f"_ZN5numba{_OWN}4loop11run_loop_nbB2v1", jit.FastsimCodeLibrary)
    assert "alloca" in ir  # left for the module pipeline


def test_numbas_library_keeps_it():
    ir = _optimized(f"_ZN5numba{_OWN}4loop11run_loop_nbB2v1", codegen.JITCodeLibrary)
    assert "alloca" not in ir


def test_llvm_inline_kernels_are_marked_alwaysinline():
    assert "7fastsim7kernels9scheduler12rank_pass_nbB" in jit.ALWAYS_INLINE
    marked = _optimized(f"_ZN{_OWN}9scheduler12rank_pass_nbB3v12E", jit.FastsimCodeLibrary)
    other = _optimized(f"_ZN{_OWN}9scheduler11rank_passesB3v12E", jit.FastsimCodeLibrary)
    assert "alwaysinline" in marked and "alwaysinline" not in other


def test_entry_points_are_left_unoptimised():
    entry = _optimized(f"_ZN7cpython{_OWN}4loop11run_loop_nbB2v7E", jit.FastsimCodeLibrary)
    assert "optnone" in entry and "noinline" in entry
    assert "optnone" not in _optimized(f"_ZN{_OWN}4loop11run_loop_nbB2v7E",
                                       jit.FastsimCodeLibrary)


def _wraparound(store_result):
    """A function with numba's wraparound of an integer index (``fix_index``); with
    ``store_result`` the fixed index is stored, as numba does with a slice bound."""
    from llvmlite import ir

    i64 = ir.IntType(64)
    module = ir.Module()
    fn = ir.Function(module, ir.FunctionType(i64, [i64, i64, i64.as_pointer()]), "f")
    b = ir.IRBuilder(fn.append_basic_block())
    idx, size, slot = fn.args
    fixed = b.select(b.icmp_signed("<", idx, ir.Constant(i64, 0)), b.add(idx, size), idx)
    if store_result:
        b.store(fixed, slot)
    b.ret(fixed)
    return module, fixed, idx


def test_integer_indices_are_used_as_written():
    module, fixed, idx = _wraparound(False)
    assert jit._unwrapped_indices(module) == 1
    assert fixed.operands[1] is idx and fixed.operands[2] is idx


def test_slice_bounds_keep_their_wraparound():
    module, fixed, idx = _wraparound(True)
    assert jit._unwrapped_indices(module) == 0
    assert fixed.operands[1] is not idx
