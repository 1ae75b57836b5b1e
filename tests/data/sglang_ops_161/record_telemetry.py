"""Record Dynamo 1.6.1's telemetry samples of this folder's cases (run from this folder):

    DYN_LOG=error python record_telemetry.py DYNAMO_PYTHON RUN_DYNAMO_161 [case ...]

Each case writes <case>.telemetry.jsonl.gz: the same replay flags as cases.tsv plus
--telemetry-jsonl (the interval is the case's --telemetry-interval-ms)."""
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
    out = f"{name}.telemetry.jsonl"
    subprocess.run([python, runner, *args.split(), "--telemetry-jsonl", out, "--quiet"], check=True,
                   stdout=subprocess.DEVNULL)
    with open(out, "rb") as src, gzip.GzipFile(out + ".gz", "wb", mtime=0) as dst:
        shutil.copyfileobj(src, dst)
    os.remove(out)
