"""fastsim's compiled layer: numba kernels over plain arrays and scalars (no Python objects).

Kernels are compiled with ``cache=True``. Numba keys a cached kernel on its own source file only, so
a kernel that calls into another file would keep running stale machine code after that file
changes. To rule that out, the cache lives in a directory named after a hash of every kernel
source file, the numba version and the optimisation level: any change to any kernel starts a fresh
cache. Setting ``NUMBA_CACHE_DIR`` overrides it.

The kernels are compiled at LLVM ``-O2`` unless ``NUMBA_OPT`` says otherwise. numba's default
``-O3`` compiled this code about a third slower than ``-O1`` and ran the event loop slower too
(20k requests x 128 tokens on one worker: 227 ms against 115 ms, before later changes); ``-O2``
runs the loop about 5% faster than ``-O1`` (100k requests: 11.7 against 12.2 ms on 4 workers,
14.0 against 14.8 on 64) for about 1.7 s more of cold compile (23.4 against 21.8 s). Both
settings are made through numba's environment variables (read again with ``reload_config``), as
numba reloads its configuration from the environment.

The four sets of compile options are defined once, in ``kernels/jit.py`` (``kernel``,
``kernel_noalloc``, ``inner``, ``inline``), and explained here.

Every kernel uses numba's ``error_model="numpy"``: an integer division by zero gives 0 instead of
raising, so no division carries a zero test and an exception path (inputs are validated before
they reach the kernels, and no kernel divides by a count that can be 0). It made the cold compile
about 1 s shorter and the loop a few percent faster.

Loop kernels are compiled with ``_nrt=False``: they never allocate, and without numba's reference
counting, reading arrays out of the state NamedTuples costs nothing (with it, atomic
incref/decref pairs took most of the run time).

Kernels only ever called from other kernels are compiled with ``no_cpython_wrapper=True,
no_cfunc_wrapper=True``: numba would otherwise generate, for each of them, a Python entry point
that unboxes every array of every state tuple it takes (a trivial helper taking the request and
rank tables compiled for 1.3 s). Without those wrappers the cold compile went from 41 s to 34 s;
with the token stamping and the scheduling of a running request's rarer steps left as calls
instead of numba-level inlines, to 29 s (LLVM inlines the stamping anyway; the run time did not
change measurably).
Kernels that Python calls (the loops, the report statistics, the timing model, the pool's
public functions used by tests) keep them.

Array indexing in the kernels skips numba's negative-index wraparound (``_index_as_written``).
numba turns every ``a[i]`` with a signed ``i`` into ``a[i + (i < 0) * len(a)]``: three more
instructions and, in a loop whose hundreds of arrays live on the stack, a reload of the length.
The kernels never index with a negative number (a -1 link or "none" is always tested first), so
the wraparound only costs: without it the aggregated loop of 100k requests on 4 workers took
about 11.5 ms instead of 13.0 (four alternating fresh-process pairs). Only the code of
fastsim's own kernels is compiled this way (numba's implementations of numpy functions inside
them keep their wraparound), and
``tests/test_index_bounds.py`` runs simulations of every kind with numba's bounds checking on,
which then rejects any negative index the kernels would use. ``FASTSIM_INDEX_WRAPAROUND=1``
compiles them with numba's usual indexing (a cache of its own).

numba's IR-level inlining (``inline="always"``) deep-copies the callee's IR block by block, each
block with a fresh copy memo, so the callee's variable scope (every variable of the function) is
copied once per basic block: quadratic in the size of the callee. ``_inline_sharing_scopes`` has
every block of one copy share one copy of the scope (inlining then replaces the callee blocks'
scope with the caller's anyway). The compiled code is the same byte for byte (all 114 cached
objects of a cold compile compared); the cold compile is about 1.3 s shorter (36.2 against 37.5 s
on a 2-core guest), and the IR copies under a profiler took 3 s instead of 41 s.

numba optimises each function's LLVM IR twice: first with LLVM's per-function pipeline at the
chosen level, function by function, then with the module pipeline (which runs the same function
passes again, after inlining). On the event loop the first round is the dearest part of the
compile: numba keeps every variable in its own stack slot and loads and stores it whole, and the
loop's variables include the state tables (structs of 72-210 array fields), so its raw IR is
about 70k instructions over 1,500 blocks of whole-struct loads and stores. Replayed offline on
that IR, the function pipeline took 20.4 s (SROA splitting those structs 11.4 s, correlated
value propagation 7.2 s), the module pipeline and code generation 4.9 s more; the module
pipeline alone, whose own SROA does the same splitting after inlining, and code generation took
9.6 s. ``_llvm_passes`` skips the first round for modules that define fastsim's own
kernels (numba's implementations compiled on their own keep it). The cold compile went from
66.9-73.8 s to 48.8 s on a 2-core guest; the loop runs as fast (100k requests, three alternating
pairs of fresh processes, medians: 4 workers 30.0-32.9 ms against 31.0-34.0 with the function
pipeline, 64 workers 32.6-32.9 against 33.0-37.6, 16 with kv_router 65.9-68.3 against
64.9-67.3), and the suite and the reference cases give the same results. ``FASTSIM_FUNCTION_PASSES=1`` restores numba's
usual two rounds (a cache of its own).

The two largest pieces of the event loop, a rank's pass (``scheduler.rank_pass_nb``) and the light
ticks (``loop._light_ticks``), are compiled on their own. The rank's pass is an ``llvm_inline``
kernel (``kernels/jit.py``), marked ``alwaysinline`` in its LLVM IR, so that LLVM inlines it back
into the loop (the loop's object code has no copy of it; the run time is the same as with numba's
IR-level inlining, within the noise of alternating runs). The light ticks are called through a
pointer (``kernels/indirect.py``), so the loop's module has no copy of their body to optimise and
compile again (the light ticks run many passes per call; a rank's pass called the same way made
simulations 40-55% slower, as each call set up a large frame and reloaded every table field it
read: ``benchmarks/README.md``). Compiled on their own, both can be compiled by the helper
process of a cold start (``fastsim/precompile.py``) while the loop's process compiles the other
callees, instead of being typed and lowered inside the loop's compile. (Without the attribute
LLVM inlined the rank's pass too; with ``noinline`` the loop's own LLVM time did not drop, as the
linked-in callees are optimised and compiled again in its module.)

The Python entry point numba generates for a kernel unboxes every array of every state table it
takes, with an error path for each: for the event loop, 45 KB of its 140 KB of machine code,
run once per simulation. The Python entry points of fastsim's kernels (and any C entry point)
are marked ``optnone``, so LLVM neither optimises them nor spends its full code generator on
them: the cold compile went from 36.3 to 34.1 s, and a simulation of 10 requests takes as long
(0.60 ms, 200 runs in each of two alternating pairs of processes; the larger runs alike). The
loop's entry point is moreover a kernel of its own, ``loop.run_loop_nb``, which calls the loop
(``loop._loop``) once through a pointer (``kernels/indirect.py``), so that the helper process
compiles it while the first process compiles the loop: cold compiles alternating with the tree
before, 36.6-38.3 against 38.5-40.7 s.

numba looks up each typed call in caches keyed by, among others, the compile flags. Its flags
hash by their option names only (the same hash for all), so every lookup compares flags, and each
comparison reads every option (22) of both through a property. In a cold compile that was
about 130k comparisons and 63k hashes, 3 s in one process; ``_quick_flag_compare`` gives the
same results from the options set (and each class's defaults, read once), and the same hash
without reading any. With the helper taking the kernels just outside the loop
(``fastsim/precompile.py``), the cold compile went from 39.0 to 36.5 s
(``tests/test_flag_compare.py`` checks the results against reading every option).

numba compiles every kernel to machine code, also those only ever called from other kernels
(``inner``), whose machine code nothing runs: a caller links the callee's optimised LLVM IR into
its own module, where LLVM inlines it or compiles it again. ``_inner_without_machine_code``
stops at the optimised IR for those kernels and caches that IR instead of an object file; a
kernel at either end of a call through a pointer (``kernels/indirect.py``) keeps its machine
code, and any other whose address were asked for would be compiled then. Of the 125 kernels of a cold compile, 43
are now compiled to machine code (code generation in one process: 4.9-5.3 s instead of 7.2),
and a kernel the other process of a cold start compiled is loaded as IR, without linking an
object file. numba hands a kernel's module to the JIT, whose code generation rewrites it in place
(constant hoisting, address sinking), and a caller used to link the rewritten IR; it now links
the IR as LLVM's optimiser left it, so the loop's machine code is not byte for byte the same.
Simulations give the same results and run as fast (five alternating pairs of processes,
medians: 100k requests on 4 workers 37.3 against 38.1 ms, 64 workers 41.4 against 42.6, 16
with kv_router 89.5 against 83.4 with 82.5-93.1 against 81.0-92.3 over the pairs, 20k
requests on one worker 7.6 against 7.6). ``FASTSIM_INNER_MACHINE_CODE=1`` restores numba's
usual (a cache of its own).

numba post-processes a function's IR after most of its IR passes (about 1,400 times in a cold
compile), and each time computes the variables live at every block's entry, which only object
mode and generators read. ``_lean_postproc`` leaves that out for fastsim's own kernels (the
LLVM IR of the loop and of the rank's pass is the same, compared after optimisation): 2.0 s of
post-processing in a one-process cold compile instead of 5.3. With both, cold compiles
alternating with the tree before, four pairs, each with an empty cache: 32.6-37.4 s against
37.8-44.5.

numba types a call to one of its own functions (an operator, a builtin, a numpy function) by
trying the function's typing templates one by one, for every call in every kernel and again in
every round of type inference: 12,476 times in a cold compile, for 653 different pairs of
function and argument types. While one of fastsim's kernels is typed (its type inference's
``propagate``), ``_typed_call_memo`` keeps the signature found for each pair (function type,
typing context, argument types, keywords) and returns it for the same pair again. Typing took
2.8 s instead of 7.2-7.6 in a one-process cold compile. The optimised LLVM IR of every kernel is the
same (value names and addresses aside), except that numba no longer compiled a second copy of
its ``min`` and ``max`` for two int64s, whose unused environment globals the callers' modules
then declared.

numba's post-inference rewrites (of indexing by a string literal and of array expressions)
first post-process the IR with a deletion of every variable after its last use, which needs the
liveness of every variable in the function, then look for a match in each block.
``_rewrites_only_on_match`` looks first, for fastsim's kernels, and runs numba's pass only if a
rewrite matches; otherwise it does what numba's pass comes to without a match (the CFG
canonicalised, no deletions, the IR post-processed). The optimised LLVM IR is the same; the pass
took 0.4 s instead of 2.1.

numba keeps every variable that is used in more than one block in a stack slot, and loads it
whole at each use: in the event loop those are mostly the state tables (structs of up to 400
scalars), 720 whole-table loads and 419 stores in its lowered IR, which LLVM's instruction
combining splits field by field (118,782 instructions after the first round of the module
pipeline) and SROA then has to put back together. A variable assigned exactly once, in a block
that dominates every block using it and is lowered before them, can be the LLVM value itself, as
numba already does for a variable used in its own block only; ``_single_definitions_as_values``
does so for fastsim's kernels without reference counting (``_dominating_definitions``: the tables
and the other variables set at a kernel's start, and the arguments of the functions numba inlines).
The loop's lowered IR then has 2 whole-table loads and none of those stores; replayed offline, its
module's two optimisation rounds took 0.31 and 3.41 s instead of 1.49 and 5.23 (25,666
instructions after the first), and the optimised loop is the same size (12,364 instructions
against 12,337). In a one-process cold compile LLVM's optimisation took 11.3 s instead of 18.5;
cold compiles alternating with the tree before, three pairs, each with an empty cache:
27.6-28.8 s against 31.9-32.8. Kernels with reference counting keep numba's stack slots (with
them included, a simulation corrupted the heap, for a reason not tracked down; they are not on
the cold compile's longest path).
``FASTSIM_VARIABLE_SLOTS=1`` restores numba's usual lowering (a cache of its own).

Before it loads a kernel from the cache, numba refreshes its typing and lowering contexts:
it imports and installs every registry of implementations (about 0.3 s of a warm start), of
which loading uses nothing. A compile refreshes them itself. ``_load_without_refresh`` loads
fastsim's kernels after what the machine code needs of that refresh only: numba's runtime
(whose functions the kernels that allocate call; without it they crash) and the hash secret
symbols set when ``numba.cpython.hashing`` is imported. A warm ``fastsim replay`` of the tiny
workload, six alternating pairs: 1.34-1.44 s against 1.62-1.79 (the guest in a slow spell).
``tests/test_compile_tweaks.py`` runs each kind of simulation in a fresh process on a warm
cache.

numba colours each of its error messages with colorama, which it sets up anew for every
message, and typing the kernels meets tens of thousands of failed overload candidates, each of
which formats one. fastsim turns the colouring off (``NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING``,
unless it is set already); this takes effect only if numba was not imported before
``fastsim.kernels``.
"""

import hashlib
import os
from pathlib import Path


_OWN = "7fastsim7kernels"  # in the mangled name of every function compiled from this package
_WRAPPERS = ("_ZN7cpython", "cfunc.")  # numba's Python and C entry points of a kernel
_OWN_MODULE = __name__ + "."  # the prefix of the module name of every kernel of this package


def _index_as_written():
    """Compile fastsim's kernels without numba's negative-index wraparound (see above). Returns
    True if installed (False: numba's indexing helper is not where this numba version was known
    to keep it, or ``FASTSIM_INDEX_WRAPAROUND`` is set; indexing is then numba's own)."""
    if os.environ.get("FASTSIM_INDEX_WRAPAROUND", "") not in ("", "0"):
        return False
    try:
        from numba.core import types
        from numba.np import arrayobj
    except ImportError:
        return False
    usual = getattr(arrayobj, "fix_integer_index", None)
    if usual is None:
        return False
    if getattr(usual, "fastsim", False):
        return True

    def fix_integer_index(context, builder, idxty, idx, size):
        if idxty.signed and _OWN in builder.function.name:
            return context.cast(builder, idx, idxty, types.intp)
        return usual(context, builder, idxty, idx, size)

    fix_integer_index.fastsim = True
    arrayobj.fix_integer_index = fix_integer_index
    return True


def _inline_sharing_scopes():
    """Make numba's IR-level inlining copy a callee's variable scope once per copy of the
    callee, not once per basic block (see above). Returns True if installed."""
    import copy
    import threading

    try:
        from numba.core import inline_closurecall, ir
    except ImportError:
        return False
    worker = getattr(inline_closurecall, "InlineWorker", None)
    scope = getattr(ir, "Scope", None)
    if worker is None or scope is None or not hasattr(worker, "inline_ir"):
        return False
    if getattr(worker.inline_ir, "fastsim", False):
        return True
    if "__deepcopy__" in vars(scope):
        return False  # numba copies scopes its own way now: leave it
    active = threading.local()

    def scope_deepcopy(self, memo):
        shared = getattr(active, "scopes", None)
        if shared is not None and id(self) in shared:
            out = shared[id(self)][1]
        else:
            rv = self.__reduce_ex__(4)
            out = copy._reconstruct(self, memo, *rv)
            if shared is not None:
                shared[id(self)] = (self, out)  # (keeps ``self`` alive: its id stays unique)
        memo[id(self)] = out
        return out

    usual = worker.inline_ir

    def inline_ir(self, *args, **kwargs):
        outer = getattr(active, "scopes", None)
        active.scopes = {}
        try:
            return usual(self, *args, **kwargs)
        finally:
            active.scopes = outer

    inline_ir.fastsim = True
    scope.__deepcopy__ = scope_deepcopy
    worker.inline_ir = inline_ir
    return True


def _llvm_passes():
    """Have fastsim's kernels optimised by LLVM's module pipeline only, without numba's function
    pipeline first, mark the ``llvm_inline`` kernels ``alwaysinline`` and the kernels' Python
    and C entry points ``optnone`` (see above). Returns
    True if the function pipeline is skipped (False: numba's code generator is not as this was
    written for, or ``FASTSIM_FUNCTION_PASSES`` is set)."""
    skip = os.environ.get("FASTSIM_FUNCTION_PASSES", "") in ("", "0")
    try:
        from numba.core import codegen
    except ImportError:
        return False
    library = getattr(codegen, "CPUCodeLibrary", None)
    usual = getattr(library, "_optimize_functions", None)
    if usual is None:
        return False
    if getattr(usual, "fastsim", None) is not None:
        return usual.fastsim
    from fastsim.kernels.jit import ALWAYS_INLINE

    def _optimize_functions(self, ll_module):
        own = False
        for f in ll_module.functions:
            if not f.is_declaration and _OWN in f.name:
                own = True
                if any(x in f.name for x in ALWAYS_INLINE):
                    f.add_function_attribute("alwaysinline")
                elif f.name.startswith(_WRAPPERS):
                    f.add_function_attribute("noinline")  # (which optnone requires)
                    f.add_function_attribute("optnone")
        if own and skip:
            # what numba's version does besides running the passes
            ll_module.data_layout = self._codegen._data_layout
            return
        usual(self, ll_module)

    _optimize_functions.fastsim = skip
    library._optimize_functions = _optimize_functions
    return skip


def _quick_flag_compare():
    """Compare and hash numba's compile flags without reading every option through its property
    (see above); the results are the same. Returns True if installed."""
    try:
        from numba.core.targetconfig import TargetConfig
    except ImportError:
        return False
    if getattr(TargetConfig.values, "fastsim", False):
        return True
    slots = getattr(TargetConfig, "__slots__", ())
    if "_values" not in slots or not hasattr(TargetConfig, "options"):
        return False  # not the TargetConfig this was written for
    per_class = {}  # class -> (its options' defaults, the hash of its flags)

    def of(cls):
        got = per_class.get(cls)
        if got is None:
            defaults = {k: opt.default for k, opt in cls.options.items()}
            # numba's hash: of the sorted keys of ``values()``, the same for all flags of a class
            got = per_class[cls] = (defaults, hash(tuple(sorted(defaults))))
        return got

    def values(self):
        # what each option's property returns: the value set, else the option's default
        out = dict(of(type(self))[0])
        out.update(self._values)
        return out

    def __eq__(self, other):
        if self is other:
            return True
        if type(self) is not type(other):
            if not isinstance(other, TargetConfig):
                return NotImplemented
            return values(self) == values(other)
        a, b = self._values, other._values
        if a == b:
            return True
        defaults = of(type(self))[0]
        return all(a.get(k, defaults[k]) == b.get(k, defaults[k]) for k in a.keys() | b.keys())

    def __hash__(self):
        return of(type(self))[1]

    values.fastsim = True
    TargetConfig.values = values
    TargetConfig.__eq__ = __eq__
    TargetConfig.__hash__ = __hash__
    return True


def _lean_postproc():
    """Have numba's IR post-processing of fastsim's own kernels skip the per-block sets of live
    variables, which nothing reads in nopython mode (see above). Returns True if installed."""
    try:
        from numba.core import postproc, transforms
    except ImportError:
        return False
    processor = getattr(postproc, "PostProcessor", None)
    lifetime = getattr(postproc, "VariableLifetime", None)
    usual = getattr(processor, "run", None)
    if usual is None or lifetime is None or not hasattr(transforms, "canonicalize_cfg"):
        return False
    if getattr(usual, "fastsim", False):
        return True

    def run(self, emit_dels=False, extend_lifetimes=False):
        fir = self.func_ir
        if emit_dels or fir.is_generator or not fir.func_id.modname.startswith(_OWN_MODULE):
            return usual(self, emit_dels, extend_lifetimes)
        # numba's run without ``block_entry_vars`` (read by object mode and generators only)
        fir.blocks = transforms.canonicalize_cfg(fir.blocks)
        fir.variable_lifetime = lifetime(fir.blocks)
        fir.generator_info = None

    run.fastsim = True
    run.usual = usual
    processor.run = run
    return True


def _rewrites_only_on_match():
    """Have numba's post-inference rewrites of fastsim's own kernels look for a match before
    they insert the variables' deletions they work with (see above). Returns True if
    installed."""
    try:
        from numba.core import ir_utils, postproc, transforms, typed_passes
        from numba.core.rewrites import rewrite_registry
    except ImportError:
        return False
    rewrites = getattr(typed_passes, "NopythonRewrites", None)
    usual = getattr(rewrites, "run_pass", None)
    kinds = getattr(rewrite_registry, "rewrites", None)
    if usual is None or not isinstance(kinds, dict) or not hasattr(ir_utils, "remove_dels"):
        return False
    if getattr(usual, "fastsim", False):
        return True

    def matches(state):
        fir = state.func_ir
        for cls in kinds.get("after-inference", ()):
            rewrite = cls(state)
            for block in fir.blocks.values():
                if rewrite.match(fir, block, state.typemap, state.calltypes):
                    return True
        return False

    def run_pass(self, state):
        fir = state.func_ir
        if not fir.func_id.modname.startswith(_OWN_MODULE) or matches(state):
            return usual(self, state)
        # what numba's pass comes to when no rewrite matches: the CFG canonicalised, no
        # deletions, the IR post-processed
        fir.blocks = transforms.canonicalize_cfg(fir.blocks)
        ir_utils.remove_dels(fir.blocks)
        postproc.PostProcessor(fir).run()
        return True

    run_pass.fastsim = True
    rewrites.run_pass = run_pass
    return True


def _dominating_definitions(blocks):
    """The variables of the numba IR ``blocks`` that are assigned exactly once, in a block whose
    label is lower than (lowered before) and which dominates every other block that uses or
    deletes the variable, and that are used in at least one other block (numba's lowering keeps
    those used in their own block only as values already)."""
    from numba.core import ir
    from numba.core.analysis import compute_cfg_from_blocks, compute_use_defs

    home, again = {}, set()
    dels = {}
    for label, block in blocks.items():
        for stmt in block.body:
            if isinstance(stmt, ir.Assign):
                name = stmt.target.name
                if name in home:
                    again.add(name)
                home[name] = label
            elif isinstance(stmt, ir.Del):
                dels.setdefault(stmt.value, set()).add(label)
    elsewhere = {}
    for label, names in compute_use_defs(blocks).usemap.items():
        for name in names:  # (used in ``label`` before any assignment there)
            elsewhere.setdefault(name, set()).add(label)
    candidates = {name: label for name, label in home.items()
                  if name not in again and name in elsewhere}
    if not candidates:
        return set()
    dominators = compute_cfg_from_blocks(blocks).dominators()
    found = set()
    for name, label in candidates.items():
        if all(other > label and label in dominators[other]
               for other in elsewhere[name] | dels.get(name, set())):
            found.add(name)
    return found


def _single_definitions_as_values():
    """Have numba lower the variables of fastsim's kernels without reference counting that
    :func:`_dominating_definitions` finds as LLVM values, not stack slots (see above). Returns
    True if installed."""
    if os.environ.get("FASTSIM_VARIABLE_SLOTS", "") not in ("", "0"):
        return False
    try:
        from numba.core import analysis, ir, lowering  # noqa: F401 (all three are relied on)
    except ImportError:
        return False
    lower = getattr(lowering, "Lower", None)
    usual = getattr(lower, "_find_singly_assigned_variable", None)
    if usual is None or not all(hasattr(analysis, f) for f in ("compute_cfg_from_blocks",
                                                                 "compute_use_defs")):
        return False
    if getattr(usual, "fastsim", False):
        return True

    def _find_singly_assigned_variable(self):
        usual(self)
        fir = self.func_ir
        flags = self.flags
        if (flags is None or flags.nrt or self._disable_sroa_like_opt or fir.func_id.is_generator
                or not fir.func_id.modname.startswith(_OWN_MODULE)):
            return
        self._singly_assigned_vars |= _dominating_definitions(self.blocks)

    _find_singly_assigned_variable.fastsim = True
    lower._find_singly_assigned_variable = _find_singly_assigned_variable
    return True


def _typed_call_memo():
    """Have numba's typing of a call to one of its own functions, in fastsim's kernels, look up
    the signature it found before for the same argument types (see above). Returns True if
    installed."""
    import threading

    try:
        from numba.core import typeinfer
        from numba.core.types import functions
    except ImportError:
        return False
    base = getattr(functions, "BaseFunction", None)
    inferer = getattr(typeinfer, "TypeInferer", None)
    usual_call_type = getattr(base, "get_call_type", None)
    usual_propagate = getattr(inferer, "propagate", None)
    if usual_call_type is None or usual_propagate is None:
        return False
    if getattr(usual_call_type, "fastsim", False):
        return True
    typing = threading.local()  # whether a kernel of fastsim's is being typed, in this thread
    found = {}  # (function type, typing context, argument types, keywords) -> signature

    def propagate(self, *args, **kwargs):
        outer = getattr(typing, "own", False)
        typing.own = self.func_id.modname.startswith(_OWN_MODULE)
        try:
            return usual_propagate(self, *args, **kwargs)
        finally:
            typing.own = outer

    def get_call_type(self, context, args, kws):
        if not getattr(typing, "own", False):
            return usual_call_type(self, context, args, kws)
        try:
            key = (self, context, tuple(args), tuple(sorted(kws.items())))
            sig = found.get(key)
        except TypeError:  # an unhashable type among the arguments
            return usual_call_type(self, context, args, kws)
        if sig is None:
            sig = found[key] = usual_call_type(self, context, args, kws)
        return sig

    get_call_type.fastsim = True
    get_call_type.found = found
    get_call_type.usual = usual_call_type
    base.get_call_type = get_call_type
    inferer.propagate = propagate
    return True


def _load_without_refresh():
    """Load fastsim's cached kernels after setting up numba's runtime only, not all of its typing
    and lowering registries, which loading does not use (see above). Returns True if
    installed."""
    try:
        from numba.core import caching
        from numba.core.runtime import rtsys
    except ImportError:
        return False
    cache = getattr(caching, "Cache", None)
    usual = getattr(cache, "load_overload", None)
    if (usual is None or not hasattr(cache, "_load_overload")
            or not hasattr(cache, "_guard_against_spurious_io_errors")
            or not hasattr(rtsys, "initialize")):
        return False
    if getattr(usual, "fastsim", False):
        return True

    def load_overload(self, sig, target_context):
        module = getattr(getattr(self, "_py_func", None), "__module__", None) or ""
        if not module.startswith(_OWN_MODULE):
            return usual(self, sig, target_context)
        # what of numba's ``target_context.refresh()`` the machine code needs: the runtime the
        # allocating kernels call, and the hash secret symbols (set when hashing is imported)
        rtsys.initialize(target_context)
        import numba.cpython.hashing  # noqa: F401
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)

    load_overload.fastsim = True
    cache.load_overload = load_overload
    return True


def _inner_without_machine_code():
    """Compile fastsim's ``inner`` kernels to optimised LLVM IR only, without machine code, and
    cache them as that IR (see above); a kernel at either end of a call through a pointer
    (``kernels/indirect.py``) keeps its machine code. Returns True if installed (False: numba's
    code library is not as this was written for, or ``FASTSIM_INNER_MACHINE_CODE`` is set; the
    kernels are then compiled as numba would, and a cached IR-only kernel still loads)."""
    marking = os.environ.get("FASTSIM_INNER_MACHINE_CODE", "") in ("", "0")
    try:
        import llvmlite.binding as ll
        from numba.core import codegen, typed_passes
    except ImportError:
        return False
    library = getattr(codegen, "JITCodeLibrary", None)
    lowering = getattr(typed_passes, "BaseNativeLowering", None)
    cpu_codegen = getattr(codegen, "JITCPUCodegen", None)
    needed = ("_finalize_final_module", "serialize_using_object_code", "_unserialize",
              "get_pointer_to_function", "_finalize_specific", "_finalize_dynamic_globals",
              "_verify_declare_only_symbols", "_get_module_for_linking")
    if (library is None or lowering is None or cpu_codegen is None
            or not all(hasattr(library, n) for n in needed)
            or not hasattr(cpu_codegen, "set_env") or not hasattr(cpu_codegen, "_add_module")):
        return False
    if getattr(lowering.run_pass, "fastsim", False):
        return marking
    from fastsim.kernels.jit import MACHINE_CODE

    usual_run_pass = lowering.run_pass
    usual_finalize = library._finalize_final_module
    usual_serialize = library.serialize_using_object_code
    usual_unserialize = library._unserialize.__func__
    usual_pointer = library.get_pointer_to_function
    usual_set_env = cpu_codegen.set_env
    KIND = "fastsim-llvm-ir"

    def run_pass(self, state):
        if (marking and state.flags.no_cpython_wrapper
                and state.func_id.modname.startswith(_OWN_MODULE)
                and state.func_id.func not in MACHINE_CODE):
            if state.library is None:  # (as numba's own run_pass makes it)
                state.library = state.targetctx.codegen().create_library(
                    state.func_id.func_qualname)
                state.library.enable_object_caching()
            state.library.fastsim_ir_only = True
        return usual_run_pass(self, state)

    def _finalize_final_module(self):
        if not getattr(self, "fastsim_ir_only", False):
            return usual_finalize(self)
        # numba's checks, without handing the module to the JIT engine
        self._finalize_dynamic_globals()
        self._verify_declare_only_symbols()
        self._finalized = True

    def serialize_using_object_code(self):
        if not getattr(self, "fastsim_ir_only", False):
            return usual_serialize(self)
        self._ensure_finalized()
        return (self.name, KIND, self._get_module_for_linking().as_bitcode())

    def _unserialize(cls, codegen_, state):
        name, kind, data = state
        if kind != KIND:
            return usual_unserialize(cls, codegen_, state)
        self = codegen_.create_library(name)
        self._final_module = self._shared_module = ll.parse_bitcode(data)
        self.fastsim_ir_only = True
        self._finalized = True
        return self

    def get_pointer_to_function(self, name):
        if getattr(self, "fastsim_ir_only", False):
            self._ensure_finalized()
            fn = None
            try:
                fn = self._final_module.get_function(name)
            except NameError:
                pass
            if fn is None or fn.is_declaration:
                return 0
            # asked for its code after all: compile it now
            self.fastsim_ir_only = False
            self.fastsim_compiled_late = True
            self._codegen._add_module(self._final_module)
            self._finalize_specific()
        return usual_pointer(self, name)

    def set_env(self, env_name, env):
        # a kernel without machine code has no environment in the engine to point at its own
        if self._engine.get_global_value_address(env_name):
            usual_set_env(self, env_name, env)

    run_pass.fastsim = True
    lowering.run_pass = run_pass
    library._finalize_final_module = _finalize_final_module
    library.serialize_using_object_code = serialize_using_object_code
    library._unserialize = classmethod(_unserialize)
    library.get_pointer_to_function = get_pointer_to_function
    cpu_codegen.set_env = set_env
    return marking


def _configure():
    # no colours in numba's error messages (see above)
    os.environ.setdefault("NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING", "1")
    import numba
    from numba.core import config

    os.environ.setdefault("NUMBA_OPT", "2")
    as_written = _index_as_written()
    module_only = _llvm_passes()
    _inline_sharing_scopes()
    _quick_flag_compare()
    _lean_postproc()
    _rewrites_only_on_match()
    _typed_call_memo()
    _load_without_refresh()
    ir_only = _inner_without_machine_code()
    as_values = _single_definitions_as_values()
    if not os.environ.get("NUMBA_CACHE_DIR"):
        here = Path(__file__).resolve().parent
        h = hashlib.sha256(f"{numba.__version__} opt{os.environ['NUMBA_OPT']} "
                           f"{'as-written' if as_written else 'wraparound'}"
                           f"{' module-passes' if module_only else ''}"
                           f"{' inner-ir-only' if ir_only else ''}"
                           f"{' values' if as_values else ''}".encode())
        for src in sorted(here.glob("*.py")):
            h.update(src.name.encode())
            h.update(src.read_bytes())
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        os.environ["NUMBA_CACHE_DIR"] = str(base / "fastsim" / f"numba-{h.hexdigest()[:16]}")
    config.reload_config()


_configure()
