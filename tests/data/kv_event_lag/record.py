"""Record Dynamo 1.6.1's outputs for the KV event lag tests: ``python record.py PYTHON RUNNER``
from this folder, PYTHON having ai-dynamo 1.6.1 and RUNNER the script that gives its replay API
the 1.4.2 replay flags (further arguments: only those cases). Writes ``NAME.json.gz``: ``{"reports": [...], "records": [[...], ...]}``,
the records (per request, the fields the tests read) for cases with ``"records": true``."""
import gzip
import json
import os
import subprocess
import sys
import tempfile

FIELDS = ("arrival_time_ms", "ttft_ms", "e2e_latency_ms", "reused_input_tokens")


def main(python, runner, *names):
    cases = json.load(open("cases.json"))
    for name, case in cases.items():
        if names and name not in names:
            continue
        reports, records = [], []
        for _ in range(case["runs"]):
            with tempfile.TemporaryDirectory() as tmp:
                rep, rows = os.path.join(tmp, "r.json"), os.path.join(tmp, "r.jsonl")
                subprocess.run([python, runner, case["trace"], *case["args"], "--report-json", rep,
                                "--report-jsonl", rows], check=True, env=dict(os.environ, DYN_LOG="error"),
                               stdout=subprocess.DEVNULL)
                reports.append(json.load(open(rep)))
                if case["records"]:
                    run = []
                    for line in open(rows):
                        d = json.loads(line)
                        row = {k: d[k] for k in FIELDS}
                        row["best_overlap_blocks"] = d["routing_history"][0]["best_available_overlap_blocks"]
                        run.append(row)
                    records.append(sorted(run, key=lambda r: (r["arrival_time_ms"], r["ttft_ms"])))
        with gzip.GzipFile(f"{name}.json.gz", "wb", mtime=0) as f:
            f.write(json.dumps({"reports": reports, "records": records}, sort_keys=True).encode())
        print(name, "done")


if __name__ == "__main__":
    main(*sys.argv[1:])
