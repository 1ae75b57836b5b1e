"""A process's start (decision 0287): ``--help`` and ``--version`` import neither numba nor
numpy; a kernel gets its numba cache on its first compile, not when it is defined, and an
inlined kernel gets none; a replay's process ends without Python's teardown and keeps its exit
status and output."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

DATA = Path(__file__).parent / "data"
TRACE = str(DATA / "mooncake_tiny.jsonl")


def _python(code: str, *args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True,
                          text=True, timeout=600, cwd=cwd)


def test_help_and_version_import_no_numba():
    proc = _python("""
        import sys
        from fastsim.cli import main
        for argv in (["--version"], ["--help"], ["replay", "--help"], ["replay", "--num-workers"]):
            try:
                main(argv)
            except SystemExit:
                pass
        print(sorted(m for m in ("numba", "numpy", "pandas", "scipy") if m in sys.modules))
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_kernels_get_their_cache_on_first_compile():
    proc = _python("""
        import json
        import numpy as np
        from fastsim.kernels import jit, loop, scan
        from fastsim.kernels.scan import max_sum_nb
        kernels = [v for m in (loop, scan) for v in vars(m).values() if hasattr(v, "py_func")]
        before = sorted({type(k._cache).__name__ for k in kernels})
        max_sum_nb(np.arange(3, dtype=np.int64), np.arange(3, dtype=np.int64))
        inline = [k for k in kernels if k.targetoptions.get("inline") == "always"]
        print(json.dumps({"before": before,
                          "after": type(max_sum_nb._cache).__name__,
                          "where": max_sum_nb._cache._cache_path.startswith(jit.cache_dir()),
                          "inline": sorted({type(k._cache).__name__ for k in inline})}))
    """)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {"before": ["NullCache"], "after": "FunctionCache", "where": True,
                   "inline": ["NullCache"]}


def test_replay_process_keeps_status_and_output(tmp_path):
    report = tmp_path / "r.json"
    ok = subprocess.run([sys.executable, "-m", "fastsim", "replay", TRACE, "--report-json", str(report)],
                        capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "Saved full report to" in ok.stdout and json.loads(report.read_text())["completed_requests"] > 0
    bad = subprocess.run([sys.executable, "-m", "fastsim", "replay", str(tmp_path / "missing.jsonl")],
                         capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert bad.returncode == 2 and "missing.jsonl" in bad.stderr and "Traceback" not in bad.stderr


def test_numba_yaml_probe_skipped_unless_its_config_file_is_there(tmp_path):
    """numba's import reads ``.numba_config.yaml`` only if ``yaml`` imports: the command line lets
    that import fail, unless the working folder has the file, which numba then still reads."""
    code = """
        import sys
        from fastsim import cli
        cli._skip_numba_blas_probe()
        import numba.core.config as config
        print(config._HAVE_YAML, 'yaml' in sys.modules)
    """
    plain = _python(code, cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.split() == ["False", "False"]
    try:
        import yaml  # noqa: F401
    except ImportError:
        return
    (tmp_path / ".numba_config.yaml").write_text("DISABLE_JIT: 0\n")
    configured = _python(code, cwd=tmp_path)
    assert configured.returncode == 0, configured.stderr
    assert configured.stdout.split() == ["True", "True"]
