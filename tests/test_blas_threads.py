"""fastsim's own processes (the command line, a sweep's workers) start numpy's OpenBLAS with one
thread; a user's choice, and a process that imported numpy already, are left alone."""

import os
import subprocess
import sys

import pytest

PROBE = ("import os, sys\n"
         "{pre}"
         "from fastsim.blas_threads import one_blas_thread\n"
         "one_blas_thread()\n"
         "print(os.environ.get('OPENBLAS_NUM_THREADS'))\n")


@pytest.mark.parametrize("pre,env,expected", [
    ("", None, "1"),
    ("", "3", "3"),
    ("import numpy\n", None, "None"),
])
def test_one_blas_thread(pre, env, expected):
    e = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if env is not None:
        e["OPENBLAS_NUM_THREADS"] = env
    out = subprocess.run([sys.executable, "-c", PROBE.format(pre=pre)], env=e, capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == expected


def test_the_command_line_asks_before_numpy():
    e = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    code = ("import sys, atexit\n"
            "import fastsim.cli as cli\n"
            "atexit.register(lambda: print('numpy' in sys.modules, __import__('os').environ.get('OPENBLAS_NUM_THREADS')))\n"
            "sys.argv = ['fastsim', '--version']\n"
            "cli.run()\n")
    out = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True).stdout
    assert out.strip().splitlines()[-1].endswith("1")
