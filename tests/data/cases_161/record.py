"""Record Dynamo 1.6.1's outputs of the cases in cases.json, run from the folder of the cases (this one, or
../host_offload_161 with ``python ../cases_161/record.py``).

``python record.py PYTHON RUNNER [CASE ...]``: PYTHON has ``ai-dynamo==1.6.1`` installed, RUNNER is
the runner that puts the 1.4.2 command line in front of 1.6.1's replay API (``run_dynamo_161.py``
of the shared reference set). For each case it runs ``PYTHON RUNNER <args> --report-json
NAME.json --report-jsonl NAME.per_request.jsonl`` with ``DYN_LOG=error`` and gzips the JSONL
(``gzip -n``); a case with ``runs: 3`` (kv_router) also writes ``NAME.run2.json`` and
``NAME.run3.json``.
"""
import gzip
import json
import os
import shutil
import subprocess
import sys


def record(python, runner, name, case):
    for run in range(1, case.get("runs", 1) + 1):
        rep = f"{name}.json" if run == 1 else f"{name}.run{run}.json"
        cmd = [python, runner, *case["args"], "--report-json", rep]
        if run == 1:
            cmd += ["--report-jsonl", f"{name}.per_request.jsonl"]
        subprocess.run(cmd, check=True, env=dict(os.environ, DYN_LOG="error"), stdout=subprocess.DEVNULL)
    with open(f"{name}.per_request.jsonl", "rb") as f, gzip.GzipFile(
            f"{name}.per_request.jsonl.gz", "wb", mtime=0) as g:
        shutil.copyfileobj(f, g)
    os.remove(f"{name}.per_request.jsonl")


if __name__ == "__main__":
    python, runner, *names = sys.argv[1:]
    cases = json.load(open("cases.json"))
    for name in names or cases:
        record(python, runner, name, cases[name])
        print(name, "recorded")
