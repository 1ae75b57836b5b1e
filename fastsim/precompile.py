"""Compile the event loop's callees in a second process while the first compiles the loop.

numba compiles the aggregated loop (``kernels.loop.run_loop_nb``) in one thread. Its first third
is spent inlining the loop's inner functions (no callee is needed yet); then type inference asks
for every kernel the loop calls, and each is compiled on the spot, one after the other (about a
third of the cold compile). When the cache is empty, :func:`start` launches
``python -m fastsim.precompile``: it compiles those callees, from the last the loop asks for to
the first, with the exact signatures the loop uses (:data:`CALLEES`), and writes them to the same
numba cache.
By the time the loop's type inference reaches one, the first process loads it from the cache
instead of compiling it (if it is not there yet, it compiles it itself, as without the helper).
A first disaggregated run compiles its own loop while a helper compiles the aggregated one, whose
callees the disaggregated loop shares.

The signatures are spelled with the names of the state tables (``rq``, ``pool``, ...) and numba
scalar type names; ``tests/test_precompile.py`` checks them against what the loop compiles, so a
changed call cannot silently turn the helper into wasted work.
"""

from __future__ import annotations

import os
import subprocess
import sys

# (module, kernel, argument types): in the order run_loop_nb's type inference asks for them.
CALLEES = (
    ("scheduler", "_steady_join", ("p", "rq", "rk", "int64", "int32")),
    ("loop", "start_arrivals_nb", ("ss", "cl")),
    ("fleet", "apply_target_nb", ("fl", "float64", "int64")),
    ("loop", "_release_kv", ("p", "rq", "rt", "pa", "int32")),
    ("loop", "_on_terminal", ("ss", "cl", "int32", "float64")),
    ("router", "queue_pop_nb", ("rt",)),
    ("loop", "_dispatch_kv", ("p", "pool", "rq", "rk", "cl", "rt", "fl", "pa", "int64")),
    ("fleet", "mark_ready_nb", ("fl", "float64")),
    ("loop", "pop_arrival_nb", ("ss", "cl", "float64")),
    ("scheduler", "_steady_ok", ("p", "pool", "rq", "rk", "int64", "int64")),
    ("scheduler", "materialize_nb", ("p", "rq", "rk", "int64", "int64", "float64")),
    ("kvpool", "_evict", ("pool", "int64", "int64", "int64", "int64")),
    ("scheduler", "_schedule_running", ("p", "pool", "rq", "rk", "int64", "int64", "pa")),
    ("kvpool", "can_use_nb", ("pool", "int64", "array(uint64, 1d, C)", "int64", "int64")),
    ("scheduler", "_finish", ("p", "pool", "rq", "rk", "int64", "int64", "int64", "array(int32, 1d, C)",
                              "array(int32, 1d, C)", "int64", "bool")),
    ("scheduler", "_cached_tokens", ("p", "pool", "rq", "int64", "int64", "array(uint64, 1d, C)",
                                     "array(int64, 1d, C)")),
    ("perf", "prefill_time_nb", ("perf", "int64")),
    ("perf", "modeled_ms_nb", ("float64", "float64")),
    ("scheduler", "_decode_ms", ("p", "perf", "int64", "int64")),
    ("loop", "_stamp_tokens", ("rq", "rk", "gaps", "rt", "int64", "array(int32, 1d, C)", "int64",
                               "float64", "int64", "float64", "int64", "int64")),
    ("fleet", "retire_drained_nb", ("fl", "array(bool, 1d, C)", "array(int64, 1d, C)",
                                    "array(int64, 1d, C)", "int64", "Literal[int](0)")),
    ("loop", "_route_kv", ("p", "pool", "rq", "rk", "cl", "rt", "fl", "pa", "int64", "float64")),
    ("fleet", "nth_active_nb", ("fl", "int64")),
    ("fleet", "next_fleet_event_nb", ("fl",)),
    ("fleet", "sample_nb", ("fl", "pool", "array(int64, 1d, C)", "array(int64, 1d, C)", "int64",
                            "float64")),
    # and the report's, which the first process needs right after the loop
    ("stats", "dd_percentile_nb", ("array(int64, 1d, C)", "int64", "float64", "float64")),
)


def state_types():
    """numba types of the state tables of a simulation, by the names ``CALLEES`` uses."""
    import numba

    from fastsim import sim
    from fastsim.config import EngineArgs
    from fastsim.workload import synthetic

    st = sim._build_state(synthetic(16, 2, 1, arrival_interval_ms=1.0), EngineArgs(block_size=16),
                          1, 1, 1, None, None, True, [], None, None)
    rt = sim._router_state("round_robin", None, st.params, st.n, 1, 1, 1, 0)
    tables = dict(p=st.params, perf=st.perf, pool=st.pool, rq=st.rq, rk=st.rk, ss=st.ss, cl=st.cl,
                  gaps=st.gaps, rt=rt, fl=st.fl, pa=st.pa)
    return {name: numba.typeof(v) for name, v in tables.items()}


def signature(args, tables):
    """The numba argument types of one ``CALLEES`` entry."""
    from numba.core import types

    out = []
    for a in args:
        if a in tables:
            out.append(tables[a])
        elif a.startswith("Literal[int]("):
            out.append(types.IntegerLiteral(int(a[len("Literal[int]("):-1])))
        elif a.startswith("array("):
            dtype, ndim, layout = (x.strip() for x in a[len("array("):-1].split(","))
            out.append(types.Array(getattr(types, dtype), int(ndim.rstrip("d")), layout))
        else:
            out.append(getattr(types, a) if a != "bool" else types.boolean)
    return tuple(out)


def compile_callees():
    """Compile (and cache) every kernel of ``CALLEES``."""
    import importlib

    tables = state_types()
    # Backwards: the loop asks for its callees from the first on, a few seconds after the start,
    # and compiles itself any the helper has not finished; starting from the far end, the two
    # meet in the middle instead of compiling the same kernels at once (cold compile on a 2-core
    # guest: 36.8 -> 34.6 s).
    for mod, name, args in reversed(CALLEES):
        kernel = getattr(importlib.import_module(f"fastsim.kernels.{mod}"), name)
        kernel.compile(signature(args, tables))


def start(aggregated=False):
    """Launch the helper process (when there is a second core); returns it, or None.
    ``aggregated``: the helper loads (compiles) the whole aggregated loop instead, for a process
    that compiles the disaggregated one (which calls most of the same kernels)."""
    if (os.cpu_count() or 1) < 2 or os.environ.get("FASTSIM_PRECOMPILE", "1") == "0":
        return None
    args = ["--aggregated"] if aggregated else []
    try:
        return subprocess.Popen([sys.executable, "-m", "fastsim.precompile", *args],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    except OSError:
        return None


def finish(proc):
    """Wait for the helper (it ends soon after the loop's compile: its work is a part of it)."""
    if proc is None:
        return
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def cached(kernel):
    """True if the numba cache has machine code of ``kernel`` (a function name)."""
    from pathlib import Path

    import fastsim.kernels  # noqa: F401 (chooses NUMBA_CACHE_DIR)

    cache = Path(os.environ.get("NUMBA_CACHE_DIR", ""))
    return cache.is_dir() and any(cache.rglob(f"*.{kernel}-*.nbi"))


if __name__ == "__main__":
    import fastsim.kernels  # noqa: F401 (the cache directory and optimisation level)

    if "--aggregated" in sys.argv[1:]:
        from fastsim.sim import _load_kernels

        _load_kernels()
    else:
        compile_callees()
