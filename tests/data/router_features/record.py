"""Record Dynamo's outputs for the cases of ``cases.json`` (tests/test_router_features.py).

Usage: ``python record.py VERSION PYTHON [RUNNER] [CASE ...]``. VERSION is ``1.4.2`` or ``1.6.1``;
PYTHON an interpreter with that ``ai-dynamo`` release installed. For 1.4.2 each run is
``PYTHON -m dynamo.replay TRACE ARGS --report-json R --report-jsonl J``; for 1.6.1, which has no
replay command line, ``PYTHON RUNNER TRACE ARGS ...`` where RUNNER is the script that gives 1.6.1's
replay API the 1.4.2 flags. ``DYN_LOG=error``. Each case runs ``runs`` times (the kv_router breaks
ties at random) and stores ``<case>.<VERSION>.json.gz``: ``{"reports": [every run's report],
"records": [every run's per-request rows]}``.
"""

import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_once(command, case, folder):
    trace = folder / case["trace"].removesuffix(".gz")
    trace.write_bytes(gzip.decompress((HERE / "traces" / case["trace"]).read_bytes()))
    rep, jl = folder / "report.json", folder / "records.jsonl"
    cmd = command + [str(trace)] + case["args"] + ["--report-json", str(rep), "--report-jsonl", str(jl)]
    subprocess.run(cmd, check=True, cwd=folder, env=dict(os.environ, DYN_LOG="error"),
                   stdout=subprocess.DEVNULL)
    return json.loads(rep.read_text()), [json.loads(x) for x in jl.read_text().splitlines()]


def main():
    version, python, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    if version == "1.6.1":
        command, names = [python, rest[0]], rest[1:]
    else:
        command, names = [python, "-m", "dynamo.replay"], rest
    cases = json.loads((HERE / "cases.json").read_text())
    for name in names or list(cases):
        case = cases[name]
        with tempfile.TemporaryDirectory() as tmp:
            runs = [run_once(command, case, Path(tmp)) for _ in range(case.get("runs", 1))]
        out = {"reports": [r for r, _ in runs], "records": [rows for _, rows in runs]}
        (HERE / f"{name}.{version}.json.gz").write_bytes(gzip.compress(json.dumps(out).encode(), mtime=0))
        print(name, version, len(runs), "runs", flush=True)


if __name__ == "__main__":
    main()
