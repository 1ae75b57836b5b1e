"""fastsim's compiled layer: numba kernels over plain arrays and scalars (no Python objects).

Kernels are compiled with ``cache=True``. Numba keys a cached kernel on its own source file only, so
a kernel that calls into another file would keep running stale machine code after that file
changes. To rule that out, the cache lives in a directory named after a hash of every kernel
source file (and the numba version): any change to any kernel starts a fresh cache. A user who sets
``NUMBA_CACHE_DIR`` keeps full control.

Loop kernels are compiled with ``_nrt=False``: they never allocate, and without numba's reference
counting, reading arrays out of the state NamedTuples costs nothing (with it, atomic
incref/decref pairs took most of the run time).
"""

import hashlib
import os
from pathlib import Path


def _configure_cache():
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    import numba
    from numba.core import config

    here = Path(__file__).resolve().parent
    h = hashlib.sha256(numba.__version__.encode())
    for src in sorted(here.glob("*.py")):
        h.update(src.name.encode())
        h.update(src.read_bytes())
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    config.CACHE_DIR = str(base / "fastsim" / f"numba-{h.hexdigest()[:16]}")


_configure_cache()
