"""Opt-in replacements of numba internals that make fastsim's compile shorter and its kernels
faster (``FASTSIM_NUMBA_PATCHES=1``; docs/decisions/0281 has what each does and its figures).

By default none is installed: fastsim runs on numba as shipped and leaves numba as it found it.
With ``FASTSIM_NUMBA_PATCHES=1`` they are installed for the whole process (a user's own numba code
in it is compiled under them too), and only on a numba version in :data:`TESTED_NUMBA`, the
releases the suite has been run against with them; on any other version fastsim warns and runs
without them. Each patch checks that the numba internals it replaces are there and leaves numba
alone if they are not. A patched process keeps a numba cache of its own (``kernels/jit.py``).
"""

import os
import warnings

# numba releases the suite passes on with the patches installed (raise deliberately, after a run)
TESTED_NUMBA = ("0.68.1",)
ENV = "FASTSIM_NUMBA_PATCHES"

# the patches installed in this process (names), for the cache key: empty unless asked for
INSTALLED = ()


def requested():
    """True if the environment asks for the patches."""
    return os.environ.get(ENV, "0").strip() not in ("", "0")


_OWN = "7fastsim7kernels"  # in the mangled name of every function compiled from this package
_OWN_MODULE = "fastsim.kernels."  # the prefix of the module name of every kernel of this package


def _index_as_written():
    """Compile fastsim's kernels without numba's negative-index wraparound (docs/decisions/0281). Returns
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
    callee, not once per basic block (docs/decisions/0281). Returns True if installed."""
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


def _quick_flag_compare():
    """Compare and hash numba's compile flags without reading every option through its property
    (docs/decisions/0281); the results are the same. Returns True if installed."""
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
    variables, which nothing reads in nopython mode (docs/decisions/0281). Returns True if installed."""
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
    they insert the variables' deletions they work with (docs/decisions/0281). Returns True if
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
    :func:`_dominating_definitions` finds as LLVM values, not stack slots (docs/decisions/0281). Returns
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
    the signature it found before for the same argument types (docs/decisions/0281). Returns True if
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
    and lowering registries, which loading does not use (docs/decisions/0281). Returns True if
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
    cache them as that IR (docs/decisions/0281); a kernel at either end of a call through a pointer
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



def install_if_requested():
    """Install the patches if ``FASTSIM_NUMBA_PATCHES=1`` and numba is a tested release; returns
    the names of those installed (also kept in :data:`INSTALLED`)."""
    global INSTALLED
    if INSTALLED or not requested():
        return INSTALLED
    import numba

    if numba.__version__ not in TESTED_NUMBA:
        warnings.warn(f"{ENV}=1 ignored: numba {numba.__version__} is not one of the releases the "
                      f"patches are tested with ({', '.join(TESTED_NUMBA)}); running on numba as "
                      "shipped", RuntimeWarning, stacklevel=2)
        return INSTALLED
    # no colours in numba's error messages: typing meets tens of thousands of failed candidates,
    # each formatted (takes effect only if numba's errors module was not imported yet)
    os.environ.setdefault("NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING", "1")
    steps = (("index-as-written", _index_as_written), ("shared-scopes", _inline_sharing_scopes),
             ("flag-compare", _quick_flag_compare),
             ("lean-postproc", _lean_postproc), ("rewrites-on-match", _rewrites_only_on_match),
             ("typed-call-memo", _typed_call_memo), ("load-without-refresh", _load_without_refresh),
             ("inner-ir-only", _inner_without_machine_code),
             ("values", _single_definitions_as_values))
    INSTALLED = tuple(name for name, step in steps if step())
    return INSTALLED
