"""Calls through slots (``kernels/indirect.py``): tables passed by pointer, linking on compile and
on a cache load, and the refusals (an unlinked slot, a spelling that disagrees with the call)."""

import os
import subprocess
import sys
import textwrap

import pytest

KERNELS = textwrap.dedent('''
    from typing import NamedTuple

    import numpy as np
    from numba import njit, types

    import fastsim.kernels  # noqa: F401 (the compile settings)
    from fastsim.kernels.indirect import Indirect, deref, link, pin

    opts = dict(cache=True, error_model="numpy", _nrt=False, no_cfunc_wrapper=True)


    class T(NamedTuple):
        a: np.ndarray
        flag: bool  # (a boolean is a byte in memory, a bit in a register)
        n: int


    @njit(no_cpython_wrapper=True, **opts)
    def entry(tabs, i, x):
        t, u = deref(tabs)
        t.a[i] += x + u.a[i] + t.n
        return x * 2.0 if t.flag else x


    CALL = Indirect(entry, types.float64, ("tables(t, u)", "int64", "float64"))
    call = CALL.call


    @njit(**opts)
    def caller(t, u, out):
        tabs = pin((t, u))
        s = 0.0
        for i in range(t.a.shape[0]):
            s += call(tabs, i, 1.5)
        out[0] = s


    link(caller, CALL)


    @njit(**opts)
    def unlinked(t, u, out):  # (no link: its slot stays empty)
        out[0] = call(pin((t, u)), 0, 1.0)


    def run():
        t = T(np.zeros(3), True, 2)
        u = T(np.ones(3), False, 7)
        out = np.zeros(1)
        caller(t, u, out)
        return float(out[0]), t.a.tolist(), sum(caller.stats.cache_hits.values())
''')


def _child(tmp_path, code):
    (tmp_path / "ind_kernels.py").write_text(KERNELS)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_compiled_and_cached_calls_agree(tmp_path):
    code = "import ind_kernels as k; print(k.run())"
    first = _child(tmp_path, code)
    again = _child(tmp_path, code)  # the caller now comes from the cache: linked on load
    # 3 calls of 1.5 * 2 (flag set); each a[i] gets 1.5 + 1 + 2; then the cache hits
    assert first == "(9.0, [4.5, 4.5, 4.5], 0)"
    assert again == "(9.0, [4.5, 4.5, 4.5], 1)"


@pytest.mark.parametrize("change, call, expected", [
    # no slot to fill: the call raises rather than jump through it
    ("", "k.unlinked(t, t, np.zeros(1))", "RuntimeError fastsim: entry is not linked"),
    # a spelling whose types differ from the call's: the slot it names does not exist
    ("k.CALL.args = ('tables(t, u)', 'int32', 'float64')", "k.caller(t, t, np.zeros(1))",
     "RuntimeError fastsim: entry is not linked"),
    # the call typed for int64, the kernel returning float64: refused when linked
    ("k.CALL.restype = types.int64", "k.caller(t, t, np.zeros(1))",
     "TypeError entry returns float64, not the int64"),
])
def test_refusals(tmp_path, change, call, expected):
    code = textwrap.dedent(f'''
        import numpy as np
        from numba import types
        import ind_kernels as k
        {change}
        t = k.T(np.zeros(3), True, 2)
        try:
            {call}
        except Exception as e:
            print(type(e).__name__, e)
    ''')
    assert _child(tmp_path, code).startswith(expected)


def test_type_spellings():
    from numba.core import types

    from fastsim.kernels.indirect import parse_type

    tables = {"rq": types.int8}
    assert parse_type("tables(rq, rq)", tables) == types.CPointer(types.Tuple((types.int8,) * 2))
    assert parse_type("array(int32, 1d, C)", {}) == types.Array(types.int32, 1, "C")
    assert parse_type("array(int32, 1d, C)*2", {}) == types.UniTuple(types.Array(types.int32, 1, "C"), 2)
    assert parse_type("bool", {}) == types.boolean
    assert parse_type("Literal[int](0)", {}) == types.IntegerLiteral(0)
    with pytest.raises(ValueError, match="unknown type spelling"):
        parse_type("nonsense", {})
