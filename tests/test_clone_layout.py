"""Tests run from a clone with a plain (non-editable) install (issue: a user's first hour, item 8).

``python -m pytest`` puts the clone's root first on ``sys.path``, so ``import fastsim`` finds the
source folder, where the compiled layer is the sibling ``kernels/`` (installed as
``fastsim.kernels``). It used to fail at collection (16 test modules); ``fastsim/__init__.py`` now
maps ``fastsim.kernels`` to that folder when it is imported from a source tree. The editable
install of the development environment is switched off in these subprocesses, which is what a
plain ``pip install .`` leaves: nothing that maps ``fastsim.kernels``.
"""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WITHOUT_EDITABLE = (
    "import sys\n"
    "sys.meta_path[:] = [f for f in sys.meta_path\n"
    "                    if 'Editable' not in getattr(f, '__name__', type(f).__name__)]\n"
    "sys.path_hooks[:] = [h for h in sys.path_hooks if 'editable' not in repr(h).lower()]\n"
    "sys.path_importer_cache.clear()\n"
)


def _run(code, cwd):
    return subprocess.run([sys.executable, "-c", WITHOUT_EDITABLE + code], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def test_kernels_import_from_the_source_tree():
    r = _run("import fastsim.kernels.loop, fastsim\n"
             "print(fastsim.__file__)\nprint(fastsim.kernels.__file__)\n", ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [str(ROOT / "fastsim" / "__init__.py"), str(ROOT / "kernels" / "__init__.py")]


def test_collection_from_the_clone_succeeds():
    r = _run("import pytest\n"
             "sys.exit(pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', 'tests/test_kvpool.py',"
             " 'tests/test_steady_decode.py']))\n", ROOT)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "error" not in r.stdout.lower() and " collected" in r.stdout


def test_an_installed_package_keeps_its_own_kernels(tmp_path):
    """The layout of a wheel (``fastsim/kernels/`` inside the package) is left alone."""
    site = tmp_path / "site"
    shutil.copytree(ROOT / "fastsim", site / "fastsim", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "kernels", site / "fastsim" / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    r = _run(f"sys.path.insert(0, {str(site)!r})\nimport fastsim, fastsim.kernels\n"
             "print(fastsim.kernels.__file__)\n"
             "print(any(getattr(f, '__name__', '') == '_TreeKernelsFinder' for f in sys.meta_path))\n", tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [str(site / "fastsim" / "kernels" / "__init__.py"), "False"]
