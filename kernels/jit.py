"""The compile options of every kernel, in one place (docs/decisions/0280 says why each is set).

* ``kernel``: called from Python, may allocate (numba's reference counting on).
* ``kernel_noalloc``: called from Python, never allocates (reference counting off: reading arrays
  out of the state tuples costs nothing).
* ``loop_kernel``: ``kernel_noalloc`` that releases the GIL while it runs (the event loops: the
  shards of a split run go on side by side in threads, ``fastsim/shards.py``).
* ``inner``: only ever called from other kernels (no Python entry point is generated).
* ``inline``: inlined into its callers at numba's IR level.
* ``llvm_inline``: ``inner``, left for LLVM to inline into its callers (a rank's pass).

All use numba's numpy error model (an integer division by zero gives 0: no zero test and no
exception path on any division) and none has a C entry point. Two things are set for fastsim's
kernels only, and only while numba works on them:

* the cache: every kernel caches its machine code under :func:`cache_dir`, a directory named after
  a hash of the numba version, the options below and every kernel source file, so that a change to
  any kernel starts a fresh cache (numba keys a cached kernel on its own file only). A
  ``NUMBA_CACHE_DIR`` in the environment is used as it is.
* the optimisation level: LLVM ``-O2`` (:data:`OPT_LEVEL`) instead of numba's ``-O3``, which
  compiles this code longer and runs it no faster.
"""

from __future__ import annotations

import hashlib
import os
from contextlib import contextmanager
from pathlib import Path

from numba import njit
from numba.core import config
from numba.core.compiler_lock import global_compiler_lock

OPT_LEVEL = 2

# the Python functions of the kernels at either end of a call through a pointer
# (``kernels/indirect.py`` adds them): the opt-in patches keep their machine code
MACHINE_CODE = set()

# mangled-name fragments of the ``llvm_inline`` kernels (the opt-in patches mark them)
ALWAYS_INLINE = set()

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


def _own_compiles(dispatcher):
    """Have every compile of ``dispatcher`` (called, typed from another kernel, or asked for)
    run at :data:`OPT_LEVEL`, and numba's setting restored after it."""
    usual = dispatcher.compile

    def compile(sig):
        from numba.core.registry import cpu_target

        # numba's code generator reads the level once, when it is first made: made first
        cpu_target.target_context  # noqa: B018
        with _numba_settings(OPT=_opt_level()):
            return usual(sig)

    dispatcher.compile = compile
    return dispatcher


def compiled(**options):
    """A decorator for a kernel with numba ``options`` of its own (over ``cache=True``, the numpy
    error model and no C entry point), in fastsim's cache and at its optimisation level."""
    options = dict(dict(cache=True, error_model="numpy", no_cfunc_wrapper=True), **options)

    def decorate(fn):
        # numba picks a function's cache directory when it makes the dispatcher
        with _numba_settings(CACHE_DIR=cache_dir()):
            dispatcher = njit(**options)(fn)
        return _own_compiles(dispatcher)

    return decorate


kernel = compiled()
kernel_noalloc = compiled(_nrt=False)
loop_kernel = compiled(_nrt=False, nogil=True)
inner = compiled(_nrt=False, no_cpython_wrapper=True)
inline = compiled(_nrt=False, inline="always")


def llvm_inline(fn):
    parts = fn.__module__.split(".") + [fn.__name__]
    ALWAYS_INLINE.add("".join(f"{len(x)}{x}" for x in parts) + "B")
    return inner(fn)
