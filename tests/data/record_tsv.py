"""Record the cases of a folder's cases.tsv (case name, tab, replay flags) with Dynamo, run from
that folder:

    DYN_LOG=error python ../record_tsv.py DYNAMO_PYTHON "RUNNER" [case ...]

RUNNER is Dynamo 1.6.1's runner that takes Dynamo 1.4.2's flags (run_dynamo_161.py) or, for
Dynamo 1.4.2, "-m dynamo.replay". Each case writes <case>.json (the report) and
<case>.per_request.jsonl.gz (per-request timelines; Dynamo 1.4.2 writes them for trace replays
only, its synthetic cases get the report alone). A kv_router case's extra runs (<case>.run2.json,
.run3.json: Dynamo breaks the router's ties at random) are the same command run again with
--report-json <case>.runN.json alone."""
import gzip
import os
import shutil
import subprocess
import sys

python, runner, only = sys.argv[1], sys.argv[2], set(sys.argv[3:])
for line in open("cases.tsv"):
    name, args = line.rstrip("\n").split("\t")
    if only and name not in only:
        continue
    cmd = [python, *runner.split(), *args.split(), "--report-json", f"{name}.json"]
    done = subprocess.run(cmd + ["--report-jsonl", f"{name}.per_request.jsonl"], stdout=subprocess.DEVNULL)
    if done.returncode:
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    else:
        with open(f"{name}.per_request.jsonl", "rb") as src, gzip.GzipFile(f"{name}.per_request.jsonl.gz", "wb",
                                                                           mtime=0) as dst:
            shutil.copyfileobj(src, dst)
        os.remove(f"{name}.per_request.jsonl")
