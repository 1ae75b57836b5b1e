"""Record the MTP cases of cases.tsv with Dynamo 1.6.1 through the runner that takes Dynamo 1.4.2's flags:

    DYN_LOG=error python record.py DYNAMO_PYTHON "RUNNER" [case ...]

RUNNER is the 1.6.1 runner script (run_dynamo_161.py) or, for Dynamo 1.4.2, "-m dynamo.replay".

Each case writes <case>.json (the report) and <case>.per_request.jsonl.gz (per-request timelines;
Dynamo 1.4.2 writes them for trace replays only, its synthetic cases get the report alone).
The kv_router cases' conv500_kv4.run2.json, .run3.json, k2_dp2_2w_kv.run2.json, .run3.json are the
same case's command run again with --report-json <case>.runN.json alone (Dynamo breaks the
router's ties at random)."""
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
        # a configuration Dynamo refuses: keep its message (tests expect fastsim to refuse it too)
        failed = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if failed.returncode:
            with open(f"{name}.error", "w") as out:
                out.write(failed.stderr[-2000:])
    else:
        with open(f"{name}.per_request.jsonl", "rb") as src, gzip.GzipFile(f"{name}.per_request.jsonl.gz", "wb",
                                                                           mtime=0) as dst:
            shutil.copyfileobj(src, dst)
        os.remove(f"{name}.per_request.jsonl")
