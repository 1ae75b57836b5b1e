"""The README's Python sweep pasted into a plain script (issue: a user's first hour, item 3).

A spawned worker re-imports the main script: without an ``if __name__ == "__main__":`` guard the
sweep ran again in every worker (81 lines of multiprocessing tracebacks, a ``.partial.jsonl``
left behind). Now such a call runs in-process with one warning; under the guard it uses processes.
"""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fastsim.sweep import SweepError, sweep

TRACE = str(Path(__file__).parent / "data" / "mooncake_tiny.jsonl")

SWEEP_CALL = f"""\
results = fastsim.sweep({{
    "base": {{"trace_files": {TRACE!r}, "extra_engine_args": {{"block_size": 16}}}},
    "grid": {{"num_workers": [1, 2]}},
}}, executor="local", checkpoint="results.parquet", workers=2, progress=False)
print(list(results["status"]))
"""


def _run_script(tmp_path, text):
    (tmp_path / "s.py").write_text(text, encoding="utf-8")
    return subprocess.run([sys.executable, "s.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600)


def test_unguarded_script_runs_in_process_and_says_so(tmp_path):
    r = _run_script(tmp_path, "import fastsim\n" + SWEEP_CALL)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['ok', 'ok']"
    assert "Traceback" not in r.stderr
    assert 'outside an `if __name__ == "__main__":` block' in r.stderr
    assert "run in this process" in r.stderr and "s.py:2" in r.stderr
    assert len(r.stderr.splitlines()) <= 3  # the warning and its source line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.parquet", "s.py"]


def test_guarded_script_uses_worker_processes(tmp_path):
    body = textwrap.indent(SWEEP_CALL, "    ")
    r = _run_script(tmp_path, "import fastsim\n\ndef main():\n" + body + "\n\nif __name__ == '__main__':\n    main()\n")
    assert r.returncode == 0, r.stderr
    assert "['ok', 'ok']" in r.stdout
    assert r.stderr == ""  # no warning: processes were used
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.parquet", "s.py"]


def test_failure_before_any_row_leaves_no_sidecar(tmp_path, monkeypatch):
    import fastsim.sweep as sw

    def broken(*a, **k):
        raise SweepError("the executor broke")

    monkeypatch.setattr(sw, "_execute", broken)
    with pytest.raises(SweepError, match="the executor broke"):
        sweep({"base": {"trace_files": TRACE}}, executor="serial", progress=False, checkpoint=tmp_path / "r.parquet")
    assert list(tmp_path.iterdir()) == []


def test_failure_after_rows_keeps_them_and_says_so(tmp_path, monkeypatch):
    import fastsim.sweep as sw

    real = sw._execute

    def dies_after_first(tasks, pool, on_result, window):
        real(tasks[:1], pool, on_result, window)
        raise SweepError("the executor broke")

    monkeypatch.setattr(sw, "_execute", dies_after_first)
    spec = {"base": {"trace_files": TRACE}, "grid": {"num_workers": [1, 2]}}
    with pytest.warns(sw.SweepWarning, match="rerun the same sweep to resume"):
        with pytest.raises(SweepError):
            sweep(spec, executor="serial", progress=False, checkpoint=tmp_path / "r.parquet")
    assert [p.name for p in tmp_path.iterdir()] == ["r.parquet.partial.jsonl"]
    monkeypatch.setattr(sw, "_execute", real)
    df = sweep(spec, executor="serial", progress=False, checkpoint=tmp_path / "r.parquet")
    assert list(df["status"]) == ["ok", "ok"]
    assert [p.name for p in tmp_path.iterdir()] == ["r.parquet"]
