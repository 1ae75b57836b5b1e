"""The compile helper (``fastsim.precompile``) compiles what the event loop asks for.

One cold compile in a child process with an empty cache (about 30 s): the helper's kernels first,
then a simulation, watching which kernels numba still compiles. With the helper's signatures
right, the loop finds each of them in the cache (it still compiles itself and a few small
helpers of the functions it inlines).
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
from fastsim.config import EngineArgs
from fastsim.sim import simulate
from fastsim.workload import synthetic
simulate(synthetic(64, 4, 3, arrival_interval_ms=1.0), EngineArgs(block_size=16))
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
    assert "run_loop_nb" in after
