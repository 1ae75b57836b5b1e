"""The compile options of every kernel, in one place (docs/decisions/0280 says why each is set).

* ``kernel``: called from Python, may allocate (numba's reference counting on).
* ``kernel_noalloc``: called from Python, never allocates (reference counting off: reading arrays
  out of the state tuples costs nothing).
* ``loop_kernel``: ``kernel_noalloc`` that releases the GIL while it runs (the event loops: the
  shards of a split run go on side by side in threads, ``fastsim/shards.py``).
* ``inner``: only ever called from other kernels (no Python entry point is generated).
* ``inline``: inlined into its callers at numba's IR level (never compiled on its own, so not
  cached).
* ``llvm_inline``: ``inner``, compiled on its own and marked for LLVM to inline into its callers
  (a rank's pass: left to LLVM's own judgement, it stays a call, which passes every table field).

All use numba's numpy error model (an integer division by zero gives 0: no zero test and no
exception path on any division) and none has a C entry point. Every kernel is compiled by
numba's own pipeline with one step added through numba's ``pipeline_class`` option
(:class:`FastsimCompiler`): its LLVM code library (:class:`FastsimCodeLibrary`, a subclass of
numba's) uses each integer index as written, without numba's negative-index wraparound (the
kernels never index below zero), skips LLVM's per-function pipeline, leaving the optimisation to the module pipeline that
runs after inlining (faster code and a shorter compile), marks the ``llvm_inline`` kernels
``alwaysinline`` and leaves the Python entry points unoptimised (``optnone``: they run once per
call). Numba's own functions, and any other code, keep numba's library. Two settings are made for
fastsim's kernels only, and only while numba works on them:

* the cache: every kernel but the inlined ones caches its machine code under :func:`cache_dir`, a
  directory named after a hash of the numba version, the options below and every kernel source
  file, so that a change to any kernel starts a fresh cache (numba keys a cached kernel on its own
  file only). A ``NUMBA_CACHE_DIR`` in the environment is used as it is. The cache is made on the
  kernel's first compile, not when it is defined (decision 0287).
* the optimisation level: LLVM ``-O2`` (:data:`OPT_LEVEL`) instead of numba's ``-O3``, which
  compiles this code longer and runs it no faster.

The outermost compile of a thread also runs inside a frame that reserves stack room
(:data:`FRAME_ROOM`), so that numba's deep, call-heavy compiler does not map and unmap CPython's
frame-stack chunks over and over (decision 0284).
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import types
from contextlib import contextmanager
from pathlib import Path

from numba import njit
from numba.core import config
from numba.core.codegen import JITCodeLibrary
from numba.core.compiler import CompilerBase, DefaultPassBuilder
from numba.core.compiler_lock import global_compiler_lock
from numba.core.compiler_machinery import LoweringPass, register_pass
from numba.core.typed_passes import IRLegalization

OPT_LEVEL = 2

# the Python functions of the kernels at either end of a call through a pointer
# (``kernels/indirect.py`` adds them): the opt-in patches keep their machine code
MACHINE_CODE = set()

# mangled-name fragments of the ``llvm_inline`` kernels (:class:`FastsimCodeLibrary` marks them)
ALWAYS_INLINE = set()
_WRAPPERS = ("_ZN7cpython", "cfunc.")  # numba's Python and C entry points of a kernel
# FASTSIM_FUNCTION_PASSES=1: LLVM's per-function pipeline too, as numba runs it (a cache of its own)
FUNCTION_PASSES = os.environ.get("FASTSIM_FUNCTION_PASSES", "") not in ("", "0")
# FASTSIM_INDEX_WRAPAROUND=1: numba's negative-index wraparound kept (a cache of its own)
AS_WRITTEN = os.environ.get("FASTSIM_INDEX_WRAPAROUND", "") in ("", "0")


class FastsimCodeLibrary(JITCodeLibrary):
    """numba's JIT code library for fastsim's kernels: their indices used as written
    (:func:`_unwrapped_indices`), without LLVM's per-function pipeline (the module pipeline does
    that work again after inlining), with the ``llvm_inline`` kernels marked ``alwaysinline`` and
    the entry points ``optnone`` (decision 0280)."""

    def add_ir_module(self, ir_module):
        if AS_WRITTEN:
            _unwrapped_indices(ir_module)
        super().add_ir_module(ir_module)

    def _optimize_functions(self, ll_module):
        ll_module.data_layout = self._codegen._data_layout  # (what numba's does besides passes)
        for f in ll_module.functions:
            if f.is_declaration:
                continue
            if any(x in f.name for x in ALWAYS_INLINE):
                f.add_function_attribute("alwaysinline")
            elif f.name.startswith(_WRAPPERS):
                f.add_function_attribute("noinline")  # (which optnone requires)
                f.add_function_attribute("optnone")
        if FUNCTION_PASSES:
            super()._optimize_functions(ll_module)


def _unwrapped_indices(ir_module):
    """Leave out numba's negative-index wraparound in ``ir_module``, one of fastsim's kernels as
    numba lowered it: each ``select(i < 0, i + n, i)`` numba emits for an integer index becomes
    ``i`` (decision 0280). fastsim's kernels never index with a negative number; the bounds-checked
    simulations of ``tests/test_index_bounds.py`` check it, as numba's bounds check then sees the
    index as written. A slice bound's wraparound, which numba stores into the slice before
    clamping it, is left alone. Returns the number of indices rewritten."""
    from llvmlite import ir

    stored = set()  # ids of the values some instruction stores
    for fn in ir_module.functions:
        for block in fn.blocks:
            for instr in block.instructions:
                if isinstance(instr, ir.StoreInstr):
                    stored.add(id(instr.operands[0]))
    count = 0
    for fn in ir_module.functions:
        for block in fn.blocks:
            for instr in block.instructions:
                if not isinstance(instr, ir.SelectInstr) or id(instr) in stored:
                    continue
                cond, wrapped, idx = instr.operands
                if (isinstance(cond, ir.ICMPInstr) and cond.op == "slt"
                        and cond.operands[0] is idx
                        and isinstance(cond.operands[1], ir.Constant)
                        and cond.operands[1].constant == 0
                        and type(wrapped) is ir.Instruction and wrapped.opname == "add"
                        and wrapped.operands[0] is idx):
                    instr.operands[1] = idx  # select(c, i, i): LLVM folds it to i
                    count += 1
    return count


@register_pass(mutates_CFG=False, analysis_only=True)
class UseFastsimCodeLibrary(LoweringPass):
    """Lower the kernel into a :class:`FastsimCodeLibrary` (numba's lowering makes its own
    library only when the state has none)."""

    _name = "fastsim_code_library"

    def __init__(self):
        LoweringPass.__init__(self)

    def run_pass(self, state):
        if state.library is None:
            state.library = FastsimCodeLibrary(state.targetctx.codegen(),
                                               state.func_id.func_qualname)
            state.library.enable_object_caching()
        return False


class FastsimCompiler(CompilerBase):
    """numba's nopython pipeline, lowering into a :class:`FastsimCodeLibrary`."""

    def define_pipelines(self):
        pm = DefaultPassBuilder.define_nopython_pipeline(self.state)
        pm.add_pass_after(UseFastsimCodeLibrary, IRLegalization)
        pm.finalize()
        return [pm]


_cache_dir = None


def cache_dir() -> str:
    """The numba cache directory of fastsim's kernels (module docstring)."""
    global _cache_dir
    if _cache_dir is None:
        given = os.environ.get("NUMBA_CACHE_DIR", "")
        if given:
            _cache_dir = given
        else:
            import numba

            from fastsim.kernels import numba_patches

            here = Path(__file__).resolve().parent
            h = hashlib.sha256(f"{numba.__version__} opt{OPT_LEVEL} "
                               f"{'function-passes ' if FUNCTION_PASSES else ''}"
                               f"{'as-written ' if AS_WRITTEN else 'wraparound '}"
                               f"{' '.join(numba_patches.INSTALLED)}".encode())
            for src in sorted(here.glob("*.py")):
                h.update(src.name.encode())
                h.update(src.read_bytes())
            base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
            _cache_dir = str(base / "fastsim" / f"numba-{h.hexdigest()[:16]}")
    return _cache_dir


@contextmanager
def _numba_settings(**values):
    """Set numba's ``config`` attributes ``values`` and restore them afterwards, under numba's
    compiler lock (so no other thread compiles under them)."""
    with global_compiler_lock:
        # numba re-reads its configuration when the NUMBA_ environment has changed since it last
        # did (at the start of every compile): read it now, so that the compile keeps the values
        # set here and the ones restored afterwards are the environment's
        config.reload_config()
        saved = {k: getattr(config, k) for k in values}
        try:
            for k, v in values.items():
                setattr(config, k, v)
            yield
        finally:
            for k, v in saved.items():
                setattr(config, k, v)


def _opt_level():
    return type(config.OPT)(OPT_LEVEL)


def _call(fn, arg):
    return fn(arg)


# CPython 3.11+ keeps frames in 16 KB chunks and unmaps a chunk as soon as the frame at its base
# returns; numba's compiler loops over calls that straddle a chunk boundary, which maps and unmaps
# a chunk about 1.5 million times in a cold compile (decision 0284). A compile entered through a
# frame that declares FRAME_ROOM pointers of stack starts a chunk of twice that, and every frame
# the compile pushes fits in its other half.
FRAME_ROOM = 1 << 16
_call_with_room = (types.FunctionType(_call.__code__.replace(co_stacksize=FRAME_ROOM), {})
                   if sys.version_info >= (3, 11) else _call)
_compiling = threading.local()


def _own_compiles(dispatcher, cached):
    """Have every compile of ``dispatcher`` (called, typed from another kernel, or asked for)
    run at :data:`OPT_LEVEL`, and numba's setting restored after it; the outermost compile of a
    thread runs in a fresh frame-stack chunk (:data:`FRAME_ROOM`). A ``cached`` kernel gets its
    cache, in :func:`cache_dir`, on its first compile: numba's cache checks that its directory is
    writable when it is made, which for every kernel defined would cost more than all the loading
    of the few a run calls (decision 0287)."""
    usual = dispatcher.compile
    uncached = [cached]

    def compile_here(sig):
        from numba.core.registry import cpu_target

        # numba's code generator sets its target machine's level when it is first made: make it
        # under the process's own setting, before ours
        cpu_target.target_context  # noqa: B018
        with _numba_settings(OPT=_opt_level()):
            if uncached[0]:
                uncached[0] = False
                # (what njit's cache=True does when it makes the dispatcher; numba picks the
                # directory then)
                with _numba_settings(CACHE_DIR=cache_dir()):
                    dispatcher.enable_caching()
            return usual(sig)

    def compile(sig):
        if getattr(_compiling, "active", False):
            return compile_here(sig)
        _compiling.active = True
        try:
            return _call_with_room(compile_here, sig)
        finally:
            _compiling.active = False

    dispatcher.compile = compile
    return dispatcher


def compiled(cache=True, **options):
    """A decorator for a kernel with numba ``options`` of its own (over the numpy error model and
    no C entry point), at fastsim's optimisation level and, if ``cache``, in fastsim's cache."""
    options = dict(dict(error_model="numpy", no_cfunc_wrapper=True,
                        pipeline_class=FastsimCompiler), **options)

    def decorate(fn):
        return _own_compiles(njit(**options)(fn), cache)

    return decorate


kernel = compiled()
kernel_noalloc = compiled(_nrt=False)
loop_kernel = compiled(_nrt=False, nogil=True)
inner = compiled(_nrt=False, no_cpython_wrapper=True)
# (inlined into their callers' code before typing, never compiled on their own: nothing to cache)
inline = compiled(cache=False, _nrt=False, inline="always")


def llvm_inline(fn):
    parts = fn.__module__.split(".") + [fn.__name__]
    ALWAYS_INLINE.add("".join(f"{len(x)}{x}" for x in parts) + "B")
    return inner(fn)
