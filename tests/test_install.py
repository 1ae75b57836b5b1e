"""What a plain ``pip install fastsim-llm`` gives (issue: a user's first hour, items 1-2).

The distribution is ``fastsim-llm`` (``fastsim`` on PyPI is NREL's vehicle simulator, imported
under the same name), the import name ``fastsim``; sweeps with YAML specs, parquet output and a
progress bar need no extra; numba/llvmlite are pinned to the tested releases.
"""

import importlib.metadata as metadata
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
TRACE = str(Path(__file__).parent / "data" / "mooncake_tiny.jsonl")
DIST = "fastsim-llm"


def _requirements():
    return [Requirement(r) for r in metadata.distribution(DIST).requires or []]


def test_distribution_name_is_not_the_pypi_fastsim():
    dist = metadata.distribution(DIST)
    assert dist.metadata["Name"] == DIST
    import fastsim

    assert Path(fastsim.__file__).resolve().parent == ROOT / "fastsim"  # the import name stays fastsim
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'name = "fastsim-llm"' in pyproject and 'packages = ["fastsim", "fastsim.kernels", "fastsim.traces"]' in pyproject


def test_version_names_the_distribution():
    r = subprocess.run([sys.executable, "-m", "fastsim", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout.strip().endswith("(fastsim-llm)")


def test_readme_says_how_to_install_and_warns_of_the_clash():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "pip install fastsim-llm" in readme
    assert "NREL" in readme and "cannot share an environment" in readme


def test_sweep_dependencies_are_in_the_base_install():
    base = {r.name.lower() for r in _requirements() if r.marker is None}
    assert {"pyarrow", "pyyaml", "tqdm", "numba", "llvmlite", "numpy", "pandas"} <= base
    extras = {r.name.lower() for r in _requirements() if r.marker is not None and "extra" in str(r.marker)}
    assert {"matplotlib", "dask"} <= extras
    assert not {"matplotlib", "dask"} & base


@pytest.mark.parametrize("name", ["numba", "llvmlite"])
def test_compiler_is_pinned_to_the_tested_release(name):
    req = next(r for r in _requirements() if r.name == name)
    assert any(s.operator == "<" for s in req.specifier), f"{req}: no upper bound"
    installed = metadata.version(name)
    assert req.specifier.contains(installed), f"{name} {installed} (tested here) outside {req}"
    lower = next(s.version for s in req.specifier if s.operator == ">=")
    # the lower bound is the tested minor release, not an older one nobody ran
    assert installed.split(".")[:2] == lower.split(".")[:2]


def test_yaml_sweep_to_parquet_without_the_extras(tmp_path):
    """``fastsim sweep spec.yaml --out results.parquet`` with matplotlib and dask unimportable."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(textwrap.dedent(f"""\
        base:
          trace_files: {TRACE}
          extra_engine_args: {{block_size: 16}}
        grid:
          num_workers: [1, 2]
        """), encoding="utf-8")
    code = ("import sys\n"
            "for m in ('matplotlib', 'dask', 'distributed'):\n"
            "    sys.modules[m] = None\n"
            "from fastsim.cli import main\n"
            "sys.exit(main(['sweep', 'spec.yaml', '--out', 'results.parquet', '--workers', '1']))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "2 configurations: 2 ok, 0 errors" in r.stdout
    assert "Traceback" not in r.stderr
    import pandas as pd

    df = pd.read_parquet(tmp_path / "results.parquet")
    assert list(df["num_workers"]) == [1, 2] and set(df["status"]) == {"ok"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.parquet", "spec.yaml"]
