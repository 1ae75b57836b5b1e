"""Every snippet of README.md and examples/README.md runs as written (issue: a user's first hour).

The shell commands run through bash and the Python blocks as plain scripts (no ``__main__``
guard, as a user pastes them), in a scratch folder holding the bundled example files at their
README paths, with this interpreter's ``fastsim`` first on PATH. Only the install and test-suite
commands are not run (they would install packages, or run this suite inside itself): their
extras are checked against the package metadata instead.
"""

import importlib.metadata as metadata
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
READMES = ("README.md", "examples/README.md")


def snippets(text):
    """``[("sh", command), ("python", source)]`` in document order: ```python fences, and indented
    blocks (backslash continuations joined)."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```python"):
            j = lines.index("```", i + 1)
            out.append(("python", "\n".join(lines[i + 1:j]) + "\n"))
            i = j + 1
            continue
        if line.startswith("```"):
            i = lines.index("```", i + 1) + 1
            continue
        if line.startswith("    ") and line.strip() and (i == 0 or not lines[i - 1].strip()):
            cmd = ""
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                if lines[i].strip():
                    cmd += lines[i].strip()
                    if cmd.endswith("\\"):
                        cmd = cmd[:-1] + " "
                    else:
                        out.append(("sh", cmd))
                        cmd = ""
                i += 1
            continue
        i += 1
    return out


def _not_run(cmd):
    return cmd.startswith("pip ") or "python -m pytest" in cmd or cmd.startswith("python plan.py")


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    d = tmp_path_factory.mktemp("readme")
    (d / "examples").mkdir()
    for f in ("mooncake_trace_1000.jsonl", "sweep.yaml", "plan.yaml"):
        shutil.copy(ROOT / "examples" / f, d / "examples" / f)
    return d


def _env():
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def test_install_commands_name_real_extras():
    extras = set(metadata.metadata("fastsim-llm").get_all("Provides-Extra") or [])
    text = "\n".join((ROOT / r).read_text(encoding="utf-8") for r in READMES)
    cmds = [c for kind, c in snippets(text) if kind == "sh" and _not_run(c)]
    assert any(c.startswith("pip install fastsim-llm") for c in cmds)
    for name in re.findall(r"\[([a-z,]+)\]", " ".join(cmds) + " " + text):
        for extra in name.split(","):
            if extra in ("test", "plots", "dask", "all", "sweep", "parquet"):
                assert extra in extras, extra


@pytest.mark.parametrize("readme", READMES)
def test_every_snippet_runs_as_written(readme, scratch):
    found = snippets((ROOT / readme).read_text(encoding="utf-8"))
    assert found
    ran = 0
    for n, (kind, code) in enumerate(found):
        if kind == "sh":
            if code.startswith("pip install ") and " && fastsim " in code:
                code = code.split(" && ", 1)[1]  # the install is the test environment's own
            if _not_run(code):
                continue
            assert code.startswith("fastsim "), code
            r = subprocess.run(["bash", "-c", code], cwd=scratch, env=_env(), capture_output=True, text=True,
                               timeout=900)
        else:
            script = scratch / f"snippet_{n}.py"
            script.write_text(code, encoding="utf-8")
            r = subprocess.run([sys.executable, script.name], cwd=scratch, env=_env(), capture_output=True,
                               text=True, timeout=900)
        assert r.returncode == 0, f"{readme}: {code}\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}"
        assert "Traceback" not in r.stderr, f"{readme}: {code}\n{r.stderr[-1500:]}"
        if code.startswith("fastsim replay"):
            assert r.stdout.startswith("fastsim replay: "), code
        ran += 1
    assert ran >= (10 if readme == "README.md" else 2)
    if readme == "README.md":
        made = {p.name for p in scratch.iterdir()}
        for f in ("out.json", "requests.jsonl", "workers.csv", "report.json", "grid.parquet", "results.parquet",
                  "results.parquet.requests", "plots"):
            assert f in made, f
        assert sorted(p.name for p in (scratch / "plots").iterdir()) == ["results_frontier.png",
                                                                          "results_latency_cdf.png"]
        assert not [f for f in made if f.startswith("fastsim_replay_report_")]
