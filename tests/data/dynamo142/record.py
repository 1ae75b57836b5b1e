"""Record Dynamo 1.4.2's outputs for the cases of ``cases.json`` (used by tests/test_dynamo142_cases.py).

Usage: ``python record.py DYNAMO_PYTHON [CASE ...]`` where DYNAMO_PYTHON is an interpreter with
``ai-dynamo==1.4.2`` installed. Each case runs ``DYNAMO_PYTHON -m dynamo.replay [trace] ARGS
--report-json R --report-jsonl J`` (with ``DYN_LOG=error``) and stores ``<case>.json.gz``:
``{"report": Dynamo's report, "records": its per-request JSONL rows}`` (none for a synthetic
workload: Dynamo writes them for trace files only). A case with ``"runs": N``
is run N times and stores every run's report (``"reports"``) and the first run's rows.
"""

import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def write_trace(case, folder):
    """The case's trace file in ``folder`` (None for a synthetic workload)."""
    if "trace" in case:
        path = folder / case["trace"].removesuffix(".gz")
        path.write_bytes(gzip.decompress((HERE / "traces" / case["trace"]).read_bytes()))
        return path
    if "rows" in case:
        path = folder / "rows.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in case["rows"]))
        return path
    return None


def run_once(python, case, folder):
    trace = write_trace(case, folder)
    rep, jl = folder / "report.json", folder / "records.jsonl"
    cmd = [python, "-m", "dynamo.replay"] + ([str(trace)] if trace else []) + case["args"]
    # (Dynamo writes per-request rows for trace files only)
    cmd += ["--report-json", str(rep)] + (["--report-jsonl", str(jl)] if trace else [])
    subprocess.run(cmd, check=True, cwd=folder, env=dict(os.environ, DYN_LOG="error"),
                   stdout=subprocess.DEVNULL)
    rows = [json.loads(x) for x in jl.read_text().splitlines()] if trace else []
    return json.loads(rep.read_text()), rows


def main():
    python, names = sys.argv[1], sys.argv[2:]
    cases = json.loads((HERE / "cases.json").read_text())
    for name in names or list(cases):
        case = cases[name]
        with tempfile.TemporaryDirectory() as tmp:
            runs = [run_once(python, case, Path(tmp)) for _ in range(case.get("runs", 1))]
        out = {"report": runs[0][0], "records": runs[0][1]}
        if len(runs) > 1:
            out["reports"] = [r for r, _ in runs]
        (HERE / f"{name}.json.gz").write_bytes(gzip.compress(json.dumps(out).encode(), mtime=0))
        print(name, len(runs[0][1]), "records")


if __name__ == "__main__":
    main()
