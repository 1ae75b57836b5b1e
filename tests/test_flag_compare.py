"""numba's compile flags compare and hash through ``kernels/numba_patches.py``'s quicker functions
(``_quick_flag_compare``) exactly as through numba's own: equal when every option reads the same
(set or default), and the hash numba gives."""

from __future__ import annotations

import itertools

import pytest

from numba.core.compiler import Flags
from numba.core.targetconfig import TargetConfig

import fastsim.kernels  # noqa: F401  (installs them when asked for)

from fastsim.kernels import numba_patches

pytestmark = pytest.mark.skipif(not numba_patches.INSTALLED,
                                reason="the opt-in numba patches are not installed "
                                       "(FASTSIM_NUMBA_PATCHES=1 on a tested numba)")


def _read(flags):
    return {k: getattr(flags, k) for k in flags.options}  # through each option's property


def _variants():
    out = [Flags()]
    for nrt, boundscheck in itertools.product((None, False, True), (None, False, True)):
        f = Flags()
        if nrt is not None:
            f.nrt = nrt  # False is the default: set or not, it reads the same
        if boundscheck is not None:
            f.boundscheck = boundscheck
        out.append(f)
    out.append(Flags(out[-1]))
    return out


def test_installed():
    assert getattr(TargetConfig.values, "fastsim", False)


def test_same_results_as_reading_every_option():
    flags = _variants()
    for a, b in itertools.product(flags, flags):
        assert (a == b) == (_read(a) == _read(b))
        assert a.values() == _read(a) and list(a.values()) == list(a.options)
        assert hash(a) == hash(tuple(sorted(_read(a))))  # numba's: of the sorted option names
    assert (Flags() == object()) is False
