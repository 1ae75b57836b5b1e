"""Calls from one kernel into another compiled on its own, through a function pointer.

numba links every kernel a kernel calls into the caller's LLVM module, where LLVM optimises and
compiles it again, and passes each state table by value, every array as seven scalars. A call
made here instead:

* passes the state tables by one pointer: :func:`pin` stores a tuple of tables in the caller's
  stack frame once, and the callee reads it with :func:`deref`;
* goes through a *slot*, a pointer-sized global of the caller's module, named after the callee,
  its argument types and the caller: the caller's module never sees the callee's body, so
  compiling the caller neither waits for the callee nor compiles it again;
* is linked when the caller's machine code is loaded, compiled or from the cache alike
  (:func:`link` hooks the caller's dispatcher): the callee is compiled (or loaded) for the
  argument types its :class:`Indirect` spells out and its address written into the slot. The slot
  name carries a hash of those types, so a spelling that disagrees with the call the caller was
  compiled with finds no slot and is refused. An unlinked slot is null, and the call raises
  ``RuntimeError`` rather than jump through it.

A call costs the callee's frame set-up and a reload of the table fields it reads: it pays for a
kernel that does much work per call (the light ticks, ``loop._light_ticks``), not for one called
once per pass (docs/decisions/0281 has the figures).

The argument spelling (:func:`parse_type`) names the caller's parameters (``rq``, ``pool``, ...),
numba scalar types, ``array(dtype, 1d, C)``, ``type*n`` for a tuple of ``n`` and
``tables(a, b, ...)`` for a pinned tuple of the caller's parameters ``a, b, ...``.
"""

from __future__ import annotations

import ctypes
import hashlib
import inspect

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from fastsim.kernels.jit import MACHINE_CODE

SLOT_PREFIX = "fastsim.slot."


@intrinsic
def pin(typingctx, tables):
    """A pointer to a copy of ``tables`` (a tuple) in the caller's stack frame, valid until the
    caller returns."""
    if not isinstance(tables, types.BaseTuple):
        return None

    def codegen(context, builder, sig, args):
        # kept in its register form (booleans as bits), which only deref reads
        slot = cgutils.alloca_once(builder, args[0].type, name="pinned")
        builder.store(args[0], slot)
        return builder.bitcast(slot, context.get_value_type(sig.return_type))

    return types.CPointer(tables)(tables), codegen


@intrinsic
def deref(typingctx, ptr):
    """The tuple of tables that ``ptr`` (from :func:`pin`) points to."""
    if not isinstance(ptr, types.CPointer) or not isinstance(ptr.dtype, types.BaseTuple):
        return None

    def codegen(context, builder, sig, args):
        value_type = context.get_value_type(ptr.dtype)
        return builder.load(builder.bitcast(args[0], value_type.as_pointer()))

    return ptr.dtype(ptr), codegen


def _split(text):
    """Split ``text`` at the commas outside brackets."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def parse_type(spec, tables):
    """The numba type spelled ``spec`` (module docstring), with ``tables`` mapping names to types."""
    spec = spec.strip()
    if spec in tables:
        return tables[spec]
    if spec.startswith("tables(") and spec.endswith(")"):
        items = [parse_type(x, tables) for x in _split(spec[len("tables("):-1])]
        return types.CPointer(types.Tuple(items))
    if "*" in spec:  # a tuple of n of the same type
        item, n = spec.rsplit("*", 1)
        return types.UniTuple(parse_type(item, tables), int(n))
    if spec.startswith("Literal[int](") and spec.endswith(")"):
        return types.IntegerLiteral(int(spec[len("Literal[int]("):-1]))
    if spec.startswith("array(") and spec.endswith(")"):
        dtype, ndim, layout = _split(spec[len("array("):-1])
        return types.Array(parse_type(dtype, {}), int(ndim.rstrip("d")), layout)
    if spec == "bool":
        return types.boolean
    ty = getattr(types, spec, None)
    if not isinstance(ty, types.Type):
        raise ValueError(f"unknown type spelling {spec!r}")
    return ty


def _fingerprint(argtypes):
    return hashlib.sha256(repr(tuple(str(t) for t in argtypes)).encode()).hexdigest()[:16]


class Indirect:
    """A kernel (``entry``, an ``inner`` dispatcher) called through a slot: calling the object in
    a kernel compiles to the call, with return type ``restype`` (a numba type), and ``args``
    spells the argument types in terms of the caller's parameters (module docstring)."""

    def __init__(self, entry, restype, args):
        self.entry = entry
        self.restype = restype
        self.args = tuple(args)
        self.label = entry.py_func.__qualname__
        MACHINE_CODE.add(entry.py_func)  # (the opt-in patches keep its machine code)
        me = self

        @intrinsic
        def call(typingctx, *argtypes):
            # (numba hands a starred call's arguments over as one tuple)
            sig = me.restype(types.StarArgTuple.from_types(argtypes))

            def codegen(context, builder, sig, args):
                argtypes = tuple(sig.args[0].types)
                values = cgutils.unpack_tuple(builder, args[0], len(argtypes))
                return me._lower(context, builder, argtypes, values)

            return sig, codegen

        self.call = call

    def slot_name(self, argtypes, caller):
        return f"{SLOT_PREFIX}{self.label}.{_fingerprint(argtypes)}.{caller}"

    def _lower(self, context, builder, argtypes, args):
        caller = builder.function.name
        name = self.slot_name(argtypes, caller)
        voidptr = ir.IntType(8).as_pointer()
        try:
            slot = builder.module.get_global(name)
        except KeyError:
            slot = ir.GlobalVariable(builder.module, voidptr, name=name)
            slot.initializer = ir.Constant(voidptr, None)  # external: written when linked
        fp = builder.load(slot)
        with builder.if_then(cgutils.is_null(builder, fp), likely=False):
            context.call_conv.return_user_exc(
                builder, RuntimeError, (f"fastsim: {self.label} is not linked into this kernel",))
        fnty = context.call_conv.get_function_type(self.restype, argtypes)
        fn = builder.bitcast(fp, fnty.as_pointer())
        status, res = context.call_conv.call_function(builder, fn, self.restype, argtypes,
                                                      args)
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        return res

    def argtypes(self, tables):
        """The argument types for a caller whose parameters have the types ``tables``."""
        return tuple(parse_type(a, tables) for a in self.args)

    def bind(self, cres, tables):
        """Fill this call's slot in the caller's compiled ``cres``, if it has one (a caller whose
        parameters do not fit the spelling, or whose call has other types, has none: the call
        then raises)."""
        try:
            argtypes = self.argtypes(tables)
        except (KeyError, ValueError):
            return
        engine = cres.library.codegen._engine
        name = self.slot_name(argtypes, cres.fndesc.mangled_name)
        if not engine.is_symbol_defined(name):
            return
        self.entry.compile(argtypes)
        target = self.entry.overloads[argtypes]
        if target.signature.return_type != self.restype:
            raise TypeError(f"{self.label} returns {target.signature.return_type}, not the "
                            f"{self.restype} its calls are compiled for")
        address = target.library.get_pointer_to_function(target.fndesc.llvm_func_name)
        ctypes.c_void_p.from_address(engine.get_global_value_address(name)).value = address


def link(caller, *calls):
    """Have ``caller`` (a dispatcher) fill the slots of ``calls`` whenever it gets machine code
    (compiled or loaded from the cache). Returns ``caller``."""
    params = list(inspect.signature(caller.py_func).parameters)
    usual = caller.add_overload
    MACHINE_CODE.add(caller.py_func)  # (its slots are filled in its machine code)

    def add_overload(cres):
        usual(cres)
        tables = dict(zip(params, cres.signature.args))
        for c in calls:
            c.bind(cres, tables)

    caller.add_overload = add_overload
    return caller
