"""The compile options of every kernel, in one place (the package docstring says why each is set).

* ``kernel``: called from Python, may allocate (numba's reference counting on).
* ``kernel_noalloc``: called from Python, never allocates (reference counting off: reading arrays
  out of the state tuples costs nothing).
* ``loop_kernel``: ``kernel_noalloc`` that releases the GIL while it runs (the event loops: the
  shards of a split run go on side by side in threads, ``fastsim/shards.py``).
* ``inner``: only ever called from other kernels (no Python or C entry point is generated, and
  no machine code unless it is called through a pointer: ``kernels/__init__.py``).
* ``inline``: inlined into its callers at numba's IR level (the per-pass call chain).
* ``llvm_inline``: ``inner``, compiled on its own and inlined into its callers by LLVM (marked
  ``alwaysinline``): a rank's pass, compiled alongside the event loop on a cold start instead of
  within it.

All use ``cache=True`` and numba's numpy error model, and none has a C entry point
(``no_cfunc_wrapper``): the calls through pointers (``kernels/indirect.py``) use numba's own
calling convention, and not generating them shortened the cold compile by about 0.6 s (two
alternating pairs: 34.4 and 34.5 against 33.8 and 34.0 s).
"""

from numba import njit

kernel = njit(cache=True, error_model="numpy", no_cfunc_wrapper=True)
kernel_noalloc = njit(cache=True, error_model="numpy", _nrt=False, no_cfunc_wrapper=True)
loop_kernel = njit(cache=True, error_model="numpy", _nrt=False, nogil=True, no_cfunc_wrapper=True)
inner = njit(cache=True, error_model="numpy", _nrt=False, no_cpython_wrapper=True,
             no_cfunc_wrapper=True)
inline = njit(cache=True, error_model="numpy", _nrt=False, inline="always", no_cfunc_wrapper=True)

# the Python functions of the kernels at either end of a call through a pointer
# (``kernels/indirect.py`` adds them): their machine code is kept (``kernels/__init__.py``)
MACHINE_CODE = set()

# mangled-name fragments of the ``llvm_inline`` kernels (``kernels/__init__.py`` marks them)
ALWAYS_INLINE = set()


def llvm_inline(fn):
    parts = fn.__module__.split(".") + [fn.__name__]
    ALWAYS_INLINE.add("".join(f"{len(x)}{x}" for x in parts) + "B")
    return inner(fn)
