"""With the opt-in numba patches (``kernels/numba_patches.py``), fastsim's kernels are compiled without
numba's negative-index wraparound (an index is used as written). That is right only if no kernel ever indexes an array with a
negative number. With numba's bounds checking on, an index outside ``[0, len)`` raises
``IndexError``; with the wraparound gone that includes every negative index, which would
otherwise have been mapped into range first. ``bounds_runs.py`` runs simulations of every kind
(traces with prefix caching and preemption, clusters with DP ranks, kv_router, closed loops and
sessions, disaggregation, scaling, planners, telemetry, caps, clusters split into shards, each
with the exact optimisations on and off) compiled that way, in a process of its own
(``conftest.py`` starts it early).
"""

from __future__ import annotations

import os

import numba.np.arrayobj
import pytest

from fastsim.kernels import numba_patches

from conftest import start_bounds_runs


@pytest.mark.skipif("index-as-written" not in numba_patches.INSTALLED,
                    reason="the opt-in numba patches are not installed, or numba's usual indexing "
                           "asked for")
def test_indexing_installed():
    assert getattr(numba.np.arrayobj.fix_integer_index, "fastsim", False)


def test_kernels_never_index_below_zero():
    b = start_bounds_runs()
    rc = b["proc"].wait(timeout=1800)
    b["out"].seek(0)
    out = b["out"].read()
    assert rc == 0 and out.rstrip().endswith("ok"), out[-4000:]
