"""Record each case of cases.tsv RUNS times with Dynamo, run from this folder:

    DYN_LOG=error python record_runs.py DYNAMO_PYTHON "RUNNER" RUNS [case ...]

RUNNER is Dynamo 1.6.1's runner that takes Dynamo 1.4.2's flags (run_dynamo_161.py). Run 1
writes <case>.json and <case>.per_request.jsonl.gz (as ../record_tsv.py does); run N > 1 writes
<case>.runN.json and <case>.runN.per_request.jsonl.gz: Dynamo breaks the router's ties at random,
and a tie decides which requests the router queue holds back, so each run keeps its records."""
import gzip
import os
import shutil
import subprocess
import sys

python, runner, runs, only = sys.argv[1], sys.argv[2], int(sys.argv[3]), set(sys.argv[4:])
for line in open("cases.tsv"):
    name, args = line.rstrip("\n").split("\t")
    if only and name not in only:
        continue
    for n in range(1, runs + 1):
        stem = name if n == 1 else f"{name}.run{n}"
        subprocess.run([python, *runner.split(), *args.split(), "--report-json", f"{stem}.json",
                        "--report-jsonl", f"{stem}.per_request.jsonl"], check=True, stdout=subprocess.DEVNULL)
        with open(f"{stem}.per_request.jsonl", "rb") as src, gzip.GzipFile(f"{stem}.per_request.jsonl.gz", "wb",
                                                                          mtime=0) as dst:
            shutil.copyfileobj(src, dst)
        os.remove(f"{stem}.per_request.jsonl")
