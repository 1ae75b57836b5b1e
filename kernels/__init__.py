"""fastsim's compiled layer: numba kernels over plain arrays and scalars (no Python objects).

Every kernel is declared with one of the decorators of ``kernels/jit.py``, which also keeps the
kernels' numba cache apart from any other code's and compiles them at LLVM ``-O2``, set and
restored around each of fastsim's own compiles. Importing this package changes nothing in numba;
``FASTSIM_NUMBA_PATCHES=1`` opts in to the numba patches of ``kernels/numba_patches.py``.
"""

from fastsim.kernels import numba_patches as _numba_patches

_numba_patches.install_if_requested()
