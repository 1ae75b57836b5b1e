"""The compile helper (``fastsim.precompile``) compiles what the event loop asks for.

One cold compile in a child process with an empty cache (about a minute on 2 cores): the helper's
kernels first, then what a first run loads (``sim._load_kernels``), watching which kernels numba
still compiles. With the helper's signatures right, the loop and its Python entry point find
each of them in the cache (only a few small helpers of the functions the loop inlines are
compiled again). The claims by which
the two processes share the work are tested with stand-in kernels.
"""

import json
import os
import subprocess
import sys

CHILD = r"""
import json, sys
from numba.core import event
compiled = []
class Watch(event.Listener):
    def on_start(self, ev):
        pass
    def on_end(self, ev):
        d = ev.data.get("dispatcher")
        compiled.append(getattr(d, "__qualname__", str(d)))
from fastsim import precompile
precompile.compile_callees()
helper = list(compiled)
event.register("numba:compile", Watch())
compiled.clear()
from fastsim.sim import _load_kernels
_load_kernels()  # what a first run compiles: the loop, a trace's set-up, a split run
print(json.dumps({"after": compiled}))
"""


def test_loop_finds_every_callee_compiled(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), FASTSIM_PRECOMPILE="0")
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    after = json.loads(done.stdout.strip().splitlines()[-1])["after"]
    from fastsim.precompile import CALLEES

    listed = {name for _, name, _ in CALLEES}
    again = [name for name in after if name in listed]
    assert not again, f"compiled again by the loop (signature in CALLEES differs): {again}"
    assert {"run_loop_nb", "_loop"} <= listed  # (the loop itself is shared too)


class _Kernel:
    """Stands for a numba dispatcher: ``compile`` records the signatures it compiles."""

    def __init__(self):
        self.overloads = {}
        self.compiled = []

    def compile(self, sig):
        self.compiled.append(tuple(sig))
        self.overloads[tuple(sig)] = True
        return "entry"


def test_claims_are_exclusive(tmp_path):
    from fastsim.precompile import Claims

    a, b = Claims(str(tmp_path), lambda: True), Claims(str(tmp_path), lambda: True)
    assert a.take("k") and not b.take("k") and not a.take("k")
    assert b.take("other")
    a.done("k")
    b.wait("k")  # returns at once: done


def test_a_kernel_claimed_elsewhere_is_waited_for_then_loaded(tmp_path):
    import threading
    import time

    from fastsim.precompile import Claims, share

    other = Claims(str(tmp_path), lambda: True)
    assert other.take("k")
    kernel = _Kernel()
    restore = share(Claims(str(tmp_path), lambda: True), [("k", kernel, (1, 2))])
    timer = threading.Timer(0.3, other.done, ("k",))
    t0 = time.monotonic()
    timer.start()
    assert kernel.compile((1, 2)) == "entry"
    assert time.monotonic() - t0 >= 0.25  # it waited for the other process's ``done``
    assert kernel.compiled == [(1, 2)]  # then asked numba (which loads it from the cache)
    # another signature of the same kernel is not shared: compiled at once, no claim taken
    assert kernel.compile((3,)) == "entry" and kernel.compiled[-1] == (3,)
    assert not (tmp_path / "claim-k3").exists()
    restore()
    assert "compile" not in vars(kernel)


def test_a_kernel_claimed_by_a_process_that_has_gone_is_compiled_here(tmp_path):
    from fastsim.precompile import Claims, share

    assert Claims(str(tmp_path), lambda: True).take("k")  # and never done
    kernel = _Kernel()
    share(Claims(str(tmp_path), lambda: False), [("k", kernel, (1,))])
    assert kernel.compile((1,)) == "entry" and kernel.compiled == [(1,)]


def test_the_first_to_claim_compiles_and_marks_it_done(tmp_path):
    from fastsim.precompile import Claims, compile_callees, share

    claims = Claims(str(tmp_path), lambda: True)
    kernels = [(name, _Kernel(), (i,)) for i, name in enumerate("abc")]
    assert Claims(str(tmp_path), lambda: True).take("b")  # the other process has b
    share(claims, kernels)
    compile_callees(claims, order="loop", kernels=kernels)
    assert [k.compiled for _, k, _ in kernels] == [[(0,)], [], [(2,)]]
    assert (tmp_path / "done-a").exists() and (tmp_path / "done-c").exists()
    assert not (tmp_path / "done-b").exists()


def test_an_abandoned_compile_stops_its_helper_at_once(tmp_path):
    import time

    from fastsim.precompile import Claims, Helper, finish

    claims_dir = tmp_path / "claims"
    claims_dir.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    t0 = time.monotonic()
    finish(Helper(proc, Claims(str(claims_dir), lambda: proc.poll() is None)), abandon=True)
    assert proc.poll() is not None and time.monotonic() - t0 < 10
    assert not claims_dir.exists()


def test_the_first_process_leaves_the_kernels_after_the_loop_to_the_helper(tmp_path):
    from fastsim.precompile import AFTER, Claims, compile_callees

    names = ["a", AFTER[0], "c"]
    for order, expected in (("loop", [[(0,)], [], [(2,)]]), ("helper", [[(0,)], [(1,)], [(2,)]])):
        claims_dir = tmp_path / order
        claims_dir.mkdir()
        kernels = [(name, _Kernel(), (i,)) for i, name in enumerate(names)]
        compile_callees(Claims(str(claims_dir), lambda: True), order=order, kernels=kernels)
        assert [k.compiled for _, k, _ in kernels] == expected, order


def test_numba_error_colours_are_off_in_a_fresh_process():
    code = ("import os, fastsim.kernels; from numba.core import errors; "
            "print(os.environ.get('NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING'), "
            "type(errors.termcolor()).__name__)")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1", "NOPColorScheme"]


def test_the_first_process_starts_with_the_rank_pass_callees_from_the_last(tmp_path):
    from fastsim.precompile import FIRST, SUBTREE, Claims, compile_callees

    log = []

    class Logged(_Kernel):
        def __init__(self, name):
            super().__init__()
            self.name = name

        def compile(self, sig):
            log.append(self.name)
            return super().compile(sig)

    names = ["a", FIRST[0], SUBTREE[0], "x", SUBTREE[1], "c"]
    kernels = [(name, Logged(name), (i,)) for i, name in enumerate(names)]
    compile_callees(Claims(str(tmp_path), lambda: True), order="loop", kernels=kernels)
    assert log == [SUBTREE[1], "x", SUBTREE[0], "a", "c"]  # (the rank pass is the helper's)
