"""The compile options of every kernel, in one place (the package docstring says why each is set).

* ``kernel``: called from Python, may allocate (numba's reference counting on).
* ``kernel_noalloc``: called from Python, never allocates (reference counting off: reading arrays
  out of the state tuples costs nothing).
* ``loop_kernel``: ``kernel_noalloc`` that releases the GIL while it runs (the event loops: the
  shards of a split run go on side by side in threads, ``fastsim/shards.py``).
* ``inner``: only ever called from other kernels (no Python or C entry point is generated).
* ``inline``: inlined into its callers at numba's IR level (the per-pass call chain).
* ``llvm_inline``: ``inner``, compiled on its own and inlined into its callers by LLVM (marked
  ``alwaysinline``): the large pieces of the event loop, compiled alongside the loop on a cold
  start instead of within it.

All use ``cache=True`` and numba's numpy error model.
"""

from numba import njit

kernel = njit(cache=True, error_model="numpy")
kernel_noalloc = njit(cache=True, error_model="numpy", _nrt=False)
loop_kernel = njit(cache=True, error_model="numpy", _nrt=False, nogil=True)
inner = njit(cache=True, error_model="numpy", _nrt=False, no_cpython_wrapper=True,
             no_cfunc_wrapper=True)
inline = njit(cache=True, error_model="numpy", _nrt=False, inline="always")

# mangled-name fragments of the ``llvm_inline`` kernels (``kernels/__init__.py`` marks them)
ALWAYS_INLINE = set()


def llvm_inline(fn):
    parts = fn.__module__.split(".") + [fn.__name__]
    ALWAYS_INLINE.add("".join(f"{len(x)}{x}" for x in parts) + "B")
    return inner(fn)
