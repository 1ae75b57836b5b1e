"""With the defaults, fastsim leaves numba as it found it: after simulations of every kind, every
function and class of numba's modules, every method of their classes, numba's configuration and
the ``NUMBA_*`` environment are the same objects and values as before (``kernels/jit.py`` sets the
optimisation level and the cache directory only while it compiles fastsim's own kernels)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

_PROBE = textwrap.dedent('''
    import importlib, inspect, json, os, sys, types
    # the numba modules the opt-in patches replace things in, and numba's usual set
    for m in ("numba", "numba.core.codegen", "numba.core.targetconfig", "numba.core.ir",
              "numba.core.inline_closurecall", "numba.core.postproc", "numba.core.typed_passes",
              "numba.core.typeinfer", "numba.core.caching", "numba.core.lowering",
              "numba.core.types.functions", "numba.np.arrayobj", "numba.core.errors",
              "numba.core.dispatcher", "numba.core.config", "numba.core.rewrites"):
        importlib.import_module(m)

    def snapshot():
        objects, values = {}, {}
        for name, mod in list(sys.modules.items()):
            if not name.startswith(("numba", "llvmlite")) or not isinstance(mod, types.ModuleType):
                continue
            for attr, value in list(vars(mod).items()):
                if inspect.isfunction(value) or inspect.isclass(value):
                    objects[f"{name}.{attr}"] = value
                    if inspect.isclass(value) and value.__module__ == name:
                        for k, v in list(vars(value).items()):
                            if callable(v) or isinstance(v, (property, classmethod, staticmethod)):
                                objects[f"{name}.{attr}.{k}"] = v
        from numba.core import config
        for k in dir(config):
            if k.isupper():
                values[f"config.{k}"] = repr(getattr(config, k))
        for k, v in os.environ.items():
            if k.startswith("NUMBA"):
                values[f"env.{k}"] = v
        return objects, values

    before_objects, before_values = snapshot()

    from fastsim import warmup
    warmup.warm_up()
    from fastsim.api import run_synthetic_trace_replay
    run_synthetic_trace_replay(64, 8, 20, arrival_interval_ms=5.0, num_workers=2)

    after_objects, after_values = snapshot()
    changed = sorted(k for k, v in before_objects.items() if after_objects.get(k) is not v)
    changed += sorted(k for k in set(before_values) | set(after_values)
                      if before_values.get(k) != after_values.get(k))
    print(json.dumps({"checked": len(before_objects) + len(before_values), "changed": changed}))
''')


def test_numba_is_left_as_found(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "FASTSIM_NUMBA_PATCHES"}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["checked"] > 5_000  # (about 9,000 with numba 0.68)
    assert result["changed"] == []
