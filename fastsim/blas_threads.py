"""fastsim's own processes start numpy's OpenBLAS with one thread.

No kernel of fastsim calls BLAS, but numpy's bundled OpenBLAS starts a pool of threads when numpy
is imported, and they spin for a while before they sleep: on a 2-core machine one of them takes
a core from the replay it starts in (decision 0394). The command line and a sweep's worker
processes (which fastsim starts itself) ask for one BLAS thread before numpy is first imported; a
value the user set is kept, and ``import fastsim`` in a user's own process changes nothing.
"""

import os
import sys


def one_blas_thread() -> None:
    """Ask numpy's OpenBLAS for one thread, unless numpy is already imported or the user chose."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
