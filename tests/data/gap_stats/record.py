"""Record the cases of cases.tsv (name, tab, the Dynamo releases, tab, replay flags) with Dynamo,
from this folder:

    DYN_LOG=error python record.py PYTHON_142 PYTHON_161 RUNNER_161 [case ...]

PYTHON_142 runs ``-m dynamo.replay`` (Dynamo 1.4.2); PYTHON_161 runs RUNNER_161, Dynamo 1.6.1's
runner that takes Dynamo 1.4.2's flags. Each case and release writes <case>.<release>.json, the
report (--report-json)."""
import subprocess
import sys

py142, py161, runner161, only = sys.argv[1], sys.argv[2], sys.argv[3], set(sys.argv[4:])
for line in open("cases.tsv"):
    name, releases, args = line.rstrip("\n").split("\t")
    if only and name not in only:
        continue
    for release in releases.split():
        cmd = [py142, "-m", "dynamo.replay"] if release == "1.4.2" else [py161, runner161]
        subprocess.run(cmd + args.split() + ["--report-json", f"{name}.{release}.json"], check=True,
                       stdout=subprocess.DEVNULL)
