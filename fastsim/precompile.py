"""Share a cold compile of the event loop between two processes.

numba compiles the aggregated loop (``kernels.loop.run_loop_nb``) in one thread: its type
inference asks for every kernel the loop calls (:data:`CALLEES`: the big pieces of the loop, which
LLVM inlines back, and the rarer steps it calls), and each is compiled on the spot, one after the
other; then the loop itself is lowered and optimised. The callees are about three quarters of the
work. When the cache is empty, :func:`start` launches ``python -m fastsim.precompile`` on the
second core, and the two processes share the callees through claim files in a temporary
directory: whichever process is first to create ``claim-<name>`` compiles that kernel (with the
exact signature the loop uses) into the shared numba cache, then creates ``done-<name>``.
Before the loop, the first process compiles the rank pass's own callees from the last (the
helper, compiling the rank pass, meets them from the first), then the others in the order the loop
asks for them, skipping those the helper has claimed and those needed only after the loop
(:data:`AFTER`); the helper starts with the rank pass and the light ticks (:data:`FIRST`), goes
on from the last to the first, and ends with the loop's Python entry point (:data:`LAST`). Every
compile of a listed signature, in either process and at any depth, goes through the claims
(:func:`share`), so a kernel is compiled once: a process that needs one the other is compiling
waits for its ``done`` file and loads it from the cache (or compiles it itself if the other
process has gone). Call graphs are acyclic and a claim
is held only while its kernel compiles, so two processes never wait on each other.
A first disaggregated run compiles its own loop while a helper compiles the aggregated one, whose
callees the disaggregated loop shares.

The signatures are spelled with the names of the state tables (``rq``, ``pool``, ...), numba
scalar type names, ``array(dtype, 1d, C)`` and ``type*n`` for a tuple of ``n``;
``tests/test_precompile.py`` checks them against what the loop compiles, so a
changed call cannot silently turn the helper into wasted work.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

# (module, kernel, argument types): in the order run_loop_nb's type inference asks for them (those
# of rank_pass_nb, from _steady_ok to _decode_ms, while it compiles).
_TABLES = "tables(p, perf, pool, rq, rk, ss, cl, gaps, rt, fl, pa)"  # the loop's pinned tables
CALLEES = (
    ("scheduler", "_steady_join", ("p", "rq", "rk", "int64", "int32")),
    ("loop", "start_arrivals_nb", ("ss", "cl")),
    ("fleet", "apply_target_nb", ("fl", "float64", "int64")),
    ("loop", "_release_kv", ("p", "rq", "rt", "pa", "int32")),
    ("loop", "_on_terminal", ("ss", "cl", "int32", "float64")),
    ("router", "queue_pop_nb", ("rt",)),
    ("loop", "_dispatch_kv", ("p", "pool", "rq", "rk", "cl", "rt", "fl", "pa", "int64", "float64")),
    ("fleet", "mark_ready_nb", ("fl", "float64")),
    ("loop", "pop_arrival_nb", ("ss", "cl", "float64")),
    ("scheduler", "rank_pass_nb", ("p", "perf", "pool", "rq", "rk", "int64", "float64", "pa",
                                   "array(int32, 1d, C)", "array(int32, 1d, C)", "int64",
                                   "float64")),
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
    ("loop", "_light_ticks", (_TABLES, "float64", "float64")),
    ("fleet", "nth_active_nb", ("fl", "int64")),
    ("fleet", "next_fleet_event_nb", ("fl",)),
    ("fleet", "sample_nb", ("fl", "pool", "array(int64, 1d, C)", "array(int64, 1d, C)", "int64",
                            "float64")),
    # and the report's, which the first process needs right after the loop
    ("stats", "dd_percentile_nb", ("array(int64, 1d, C)", "int64", "float64", "float64")),
    # and those the first process compiles outside the loop (so the helper takes them early): a
    # trace's block keys (before it), a split run's tick fold and results (after it)
    ("blocks", "content_block_keys_nb", ("array(int64, 1d, C)",) * 3 + ("int64", "int64",
                                                                        "array(int64, 1d, C)")),
    ("ticks", "fold_ticks_nb", ("array(float64, 1d, C)", "int64", "array(float64, 1d, C)",
                                "array(float64, 1d, C)")),
    ("ticks", "scatter_results_nb", ("array(float64, 1d, C)*6", "array(int32, 1d, C)*5",
                                     "array(int8, 1d, C)", "array(float64, 1d, C)*6",
                                     "array(int32, 1d, C)*4", "array(int32, 1d, C)",
                                     "array(int8, 1d, C)", "array(int32, 1d, C)", "int64", "int64",
                                     "array(int64, 1d, C)", "int64", "int64")),
    # the loop itself, last of the first process's (its Python entry point is the helper's)
    ("loop", "_loop", (_TABLES, "array(float64, 1d, C)")),
    ("loop", "run_loop_nb", ("p", "perf", "pool", "rq", "rk", "ss", "cl", "gaps", "rt", "fl", "pa",
                             "array(float64, 1d, C)")),
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
    from fastsim.kernels.indirect import parse_type

    return tuple(parse_type(a, tables) for a in args)


# the helper's first, both left to it by the first process: the rank pass (the largest subtree,
# about 40% of the callees' compile, which the loop's type inference waits for) and the light
# ticks, which the loop calls through a pointer (``kernels/indirect.py``): only its linking waits
# for them
FIRST = ("rank_pass_nb", "_light_ticks")
# the helper's last, also left to it: the loop's Python entry point, which calls the loop through a
# pointer (its linking waits for the loop)
LAST = ("run_loop_nb",)
SUBTREE = ("_steady_ok", "_decode_ms")  # the rank pass's callees in CALLEES: first and last
# needed only after the loop: the first process leaves them to the helper as well
AFTER = ("dd_percentile_nb", "fold_ticks_nb", "scatter_results_nb")
CLAIMS_ENV = "FASTSIM_PRECOMPILE_CLAIMS"  # the claim directory, for the helper
PEER_ENV = "FASTSIM_PRECOMPILE_PEER"  # the first process's pid, for the helper
WAIT_LIMIT_S = 600.0  # a peer that has not finished a kernel by then is not waited for


class Claims:
    """Claim and done files of one shared compile (module docstring). ``peer_alive()`` says whether
    the other process can still finish what it claimed."""

    def __init__(self, directory, peer_alive):
        self.dir = directory
        self.peer_alive = peer_alive

    def take(self, name):
        """True if this process is the first to claim ``name`` (it must then call :meth:`done`)."""
        try:
            fd = os.open(os.path.join(self.dir, f"claim-{name}"),
                         os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return False
        os.write(fd, str(os.getpid()).encode())  # (who has it)
        os.close(fd)
        return True

    def done(self, name):
        open(os.path.join(self.dir, f"done-{name}"), "w").close()

    def wait(self, name):
        """Wait until the other process has finished ``name`` (or has gone)."""
        path = os.path.join(self.dir, f"done-{name}")
        deadline = time.monotonic() + WAIT_LIMIT_S
        while not os.path.exists(path) and self.peer_alive() and time.monotonic() < deadline:
            time.sleep(0.01)


def _kernels():
    """``(name, dispatcher, argument types)`` of every ``CALLEES`` entry."""
    import importlib

    tables = state_types()
    return [(name, getattr(importlib.import_module(f"fastsim.kernels.{mod}"), name),
             signature(args, tables)) for mod, name, args in CALLEES]


def share(claims, kernels):
    """Route every compile of a ``CALLEES`` signature in this process through ``claims``: compile
    it if this process claims it first, else wait for the other's and load it from the cache.
    Returns a function that removes the routing."""
    for name, kernel, sig in kernels:
        usual = kernel.compile

        def compile(sig_, _usual=usual, _name=name, _sig=sig, _kernel=kernel):
            args = tuple(sig_.args) if hasattr(sig_, "args") else tuple(sig_)
            if args != _sig or args in _kernel.overloads:
                return _usual(sig_)
            if claims.take(_name):
                try:
                    return _usual(sig_)
                finally:
                    claims.done(_name)
            claims.wait(_name)
            return _usual(sig_)  # (loads it from the cache, or compiles it if the other failed)

        kernel.compile = compile

    def restore():
        for _, kernel, _ in kernels:
            kernel.__dict__.pop("compile", None)

    return restore


def compile_callees(claims=None, order="helper", kernels=None):
    """Compile (and cache) the kernels of ``CALLEES``; with ``claims``, only those this process
    claims first, in ``order``: the helper's, or the loop's (for the first process). Every compile
    of their signatures must then go through the claims already (:func:`share`)."""
    kernels = kernels or _kernels()
    if order == "helper":
        kernels = ([k for n in FIRST for k in kernels if k[0] == n]
                   + [k for k in reversed(kernels) if k[0] not in FIRST + LAST]
                   + [k for n in LAST for k in kernels if k[0] == n])
    elif claims is not None:
        # the rank pass's own callees first, from its last: the helper, compiling the rank pass,
        # meets them from its first, and the loop waits for the rank pass
        names = [k[0] for k in kernels]
        sub = (set(names[names.index(SUBTREE[0]):names.index(SUBTREE[1]) + 1])
               if all(n in names for n in SUBTREE) else set())
        kernels = ([k for k in reversed(kernels) if k[0] in sub]
                   + [k for k in kernels if k[0] not in sub | set(FIRST + LAST + AFTER)])
    for name, kernel, sig in kernels:
        if claims is None:
            kernel.compile(sig)
        elif claims.take(name):
            try:
                type(kernel).compile(kernel, sig)  # (numba's own: this process holds the claim)
            finally:
                claims.done(name)


class Helper:
    """A running helper process and the claims this process shares with it."""

    def __init__(self, proc, claims=None):
        self.proc = proc
        self.claims = claims
        self.restore = None

    def compile_first(self):
        """This process's part of the callees, before it compiles the loop (which then finds
        them compiled, or waits for the one the helper is finishing)."""
        if self.claims is None:
            return
        kernels = _kernels()
        self.restore = share(self.claims, kernels)
        compile_callees(self.claims, order="loop", kernels=kernels)


def start(aggregated=False):
    """Launch the helper process (when there is a second core); returns a :class:`Helper`, or
    None. ``aggregated``: the helper loads (compiles) the whole aggregated loop instead, for a
    process that compiles the disaggregated one (which calls most of the same kernels)."""
    import tempfile

    if (os.cpu_count() or 1) < 2 or os.environ.get("FASTSIM_PRECOMPILE", "1") == "0":
        return None
    args = ["--aggregated"] if aggregated else []
    env = dict(os.environ)
    claims = None
    if not aggregated:
        claims = Claims(tempfile.mkdtemp(prefix="fastsim-compile-"), lambda: proc.poll() is None)
        env.update({CLAIMS_ENV: claims.dir, PEER_ENV: str(os.getpid())})
    try:
        proc = subprocess.Popen([sys.executable, "-m", "fastsim.precompile", *args],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=env)
    except OSError:
        if claims is not None:
            shutil.rmtree(claims.dir, ignore_errors=True)
        return None
    return Helper(proc, claims)


def finish(helper, abandon=False):
    """Wait for the helper (it ends soon after the loop's compile: its work is a part of it), or
    stop it at once if ``abandon`` (the compile it helps has failed or was interrupted)."""
    if helper is None:
        return
    try:
        if abandon:
            helper.proc.kill()
        helper.proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        helper.proc.kill()
        helper.proc.wait()
    if helper.restore is not None:
        helper.restore()
    if helper.claims is not None:
        shutil.rmtree(helper.claims.dir, ignore_errors=True)


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
    else:  # (started by :func:`start`, which sets both variables)
        peer = int(os.environ[PEER_ENV])

        def peer_alive():
            try:
                os.kill(peer, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                pass
            return True

        claims = Claims(os.environ[CLAIMS_ENV], peer_alive)
        kernels = _kernels()
        share(claims, kernels)
        compile_callees(claims, order="helper", kernels=kernels)
