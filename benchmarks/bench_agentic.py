"""fastsim vs Dynamo 1.6.1 on a large agentic trace, side by side in one run.

    python benchmarks/bench_agentic.py --plays 2500 --repeats 3

writes an ``agentic_mooncake`` v2 trace of ``--plays`` plays (a 4-turn conversation whose context
grows each turn, two sub-agents spawned on its first turn's dispatch and joined before its third:
6 requests a play, 15,000 for 2,500 plays) and replays it with both simulators on 4 workers,
round robin, open replay and ``--agentic-lanes``. Reported per run: the simulation time each
reports (``wall_time_ms``), the whole process time, and whether the two reports agree (every
numeric field within 1e-9 but the wall-clock ones). fastsim runs with each of ``--gap-statistics``
(``exact``, Dynamo's running update, the default; ``pooled``; ``both``) against the same Dynamo
run. ``--inprocess N`` (default 7) also times fastsim in one process: N replays after a warm-up,
the smallest ``wall_time_ms`` (rows ``repeat`` -1). Dynamo 1.6.1 is run from ``--dynamo161-python``
with ``--dynamo161-runner`` (defaults ``$DYNAMO161_PYTHON``, ``$DYNAMO161_RUNNER``), ``DYN_LOG=error``;
without them fastsim runs alone. The CSV goes to ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _proc import machine_summary, run_child  # noqa: E402

WALL = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}


def write_trace(path, plays, seed=7, gap_ms=40):
    rnd = random.Random(seed)
    header = {"schema": "dynamo.agentic_mooncake", "version": 2, "block_size": 64, "hash_id_scope": "local",
              "source": {"format": "fastsim-bench", "digest": f"plays-{plays}"}}
    nid = 100
    with open(path, "w") as f:
        f.write(json.dumps(header) + "\n")
        for p in range(plays):
            ctx = [0, 1, 2]  # a shared system prompt
            prev = None
            for t in range(4):
                ctx = ctx + list(range(nid, nid + rnd.randint(1, 4)))
                nid = ctx[-1] + 1
                deps = [] if prev is None else [{"request_id": prev, "trigger": "completion",
                                                 "delay_ms": rnd.choice([1, 20, 300]), "relation": "sequence"}]
                if t == 2:
                    deps += [{"request_id": f"p{p}-k{k}", "trigger": "completion", "delay_ms": 2, "relation": "join"}
                             for k in range(2)]
                rid = f"p{p}-t{t}"
                f.write(json.dumps({"request_id": rid, "play_id": f"play{p}", "session_id": f"p{p}",
                                    "model": "m", "input_length": 64 * len(ctx) - rnd.randint(0, 63),
                                    "output_length": rnd.randint(30, 200), "hash_ids": ctx,
                                    "not_before_ms": p * gap_ms if t == 0 else 0, "dependencies": deps}) + "\n")
                if t == 0:
                    for k in range(2):
                        kctx = [0, 1, 2, nid, nid + 1]
                        nid += 2
                        f.write(json.dumps({"request_id": f"p{p}-k{k}", "play_id": f"play{p}",
                                            "session_id": f"p{p}-k{k}", "model": "m",
                                            "input_length": 64 * len(kctx) - rnd.randint(0, 63),
                                            "output_length": rnd.randint(20, 100), "hash_ids": kctx,
                                            "not_before_ms": 0,
                                            "dependencies": [{"request_id": rid, "trigger": "dispatch",
                                                              "delay_ms": 5 * (k + 1), "relation": "spawn"}]}) + "\n")
                prev = rid
    return 6 * plays


def run(cmd, report, env=None):
    res = run_child(cmd, env=env)
    if res.returncode != 0:
        raise SystemExit(f"failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr_tail}")
    return json.loads(Path(report).read_text()), res.process_s


def agree(a, b):
    bad = [k for k, v in b.items() if k not in WALL and isinstance(v, (int, float)) and not isinstance(v, bool)
           and not (isinstance(a.get(k), (int, float)) and abs(a[k] - v) <= 1e-9 * max(abs(v), 1e-12))]
    return not bad, bad[:3]


INPROCESS = """
import json, sys
from fastsim import run_trace_replay
path, workers, lanes, stats, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
walls = []
for _ in range(n + 1):  # the first is a warm-up
    r = run_trace_replay(path, trace_format="agentic_mooncake", execution_model="target", num_workers=workers,
                         agentic_lanes=int(lanes) if lanes != "0" else None, gap_statistics=stats)
    walls.append(r.summary["wall_time_ms"])
print(json.dumps(walls[1:]))
"""


def inprocess(trace, workers, lanes, stats, n):
    """The smallest of ``n`` in-process ``wall_time_ms`` of fastsim (after a warm-up)."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", INPROCESS, str(trace), str(workers), str(lanes), stats, str(n)],
                         capture_output=True, text=True, check=True)
    return min(json.loads(out.stdout.strip().splitlines()[-1]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plays", type=int, default=2500)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--dynamo161-python", default=os.environ.get("DYNAMO161_PYTHON"))
    ap.add_argument("--dynamo161-runner", default=os.environ.get("DYNAMO161_RUNNER"))
    ap.add_argument("--gap-statistics", choices=["exact", "pooled", "both"], default="both")
    ap.add_argument("--inprocess", type=int, default=7, help="in-process replays per mode (0: none)")
    ap.add_argument("--out", default="results/bench_agentic.csv")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_agentic_"))
    trace = tmp / "agentic.jsonl"
    n = write_trace(trace, a.plays)
    print(f"# {machine_summary()}\n# {n} requests in {a.plays} plays, {a.workers} workers", file=sys.stderr)
    modes = {"open": [], "lanes64": ["--agentic-lanes", "64"]}
    lanes_of = {"open": 0, "lanes64": 64}
    stats = ["exact", "pooled"] if a.gap_statistics == "both" else [a.gap_statistics]
    common = [str(trace), "--trace-format", "agentic_mooncake", "--execution-model", "target",
              "--num-workers", str(a.workers)]
    rows = []
    dyn_env = dict(os.environ, DYN_LOG="error")
    for mode, extra in modes.items():
        for rep in range(a.repeats):
            dy = None
            if a.dynamo161_python and a.dynamo161_runner:
                dy, dy_proc = run([a.dynamo161_python, a.dynamo161_runner, *common, *extra,
                                   "--report-json", str(tmp / "d.json")], tmp / "d.json", env=dyn_env)
            for st in stats:
                fs, fs_proc = run([sys.executable, "-m", "fastsim", "replay", *common, *extra, "--quiet",
                                   "--gap-statistics", st, "--report-json", str(tmp / "f.json")], tmp / "f.json")
                row = {"mode": mode, "gap_statistics": st, "repeat": rep, "requests": n,
                       "fastsim_wall_ms": fs["wall_time_ms"], "fastsim_process_s": round(fs_proc, 3)}
                if dy is not None:
                    ok, bad = agree(fs, dy)
                    row.update(dynamo_wall_ms=dy["wall_time_ms"], dynamo_process_s=round(dy_proc, 3),
                               wall_ratio=round(dy["wall_time_ms"] / fs["wall_time_ms"], 1),
                               process_ratio=round(dy_proc / fs_proc, 2), reports_agree=ok,
                               first_misses=";".join(bad))
                rows.append(row)
                print(row, file=sys.stderr)
        if a.inprocess:
            for st in stats:
                best = inprocess(trace, a.workers, lanes_of[mode], st, a.inprocess)
                row = {"mode": mode, "gap_statistics": st, "repeat": -1, "requests": n, "fastsim_wall_ms": best,
                       "fastsim_process_s": ""}
                dyn = [r["dynamo_wall_ms"] for r in rows if r["mode"] == mode and "dynamo_wall_ms" in r]
                if dyn:
                    med = statistics.median(dyn)
                    row.update(dynamo_wall_ms=med, dynamo_process_s="", wall_ratio=round(med / best, 1),
                               process_ratio="", reports_agree="", first_misses="")
                rows.append(row)
                print(row, file=sys.stderr)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        w.writeheader()
        w.writerows(rows)
    for mode in modes:
        for st in stats:
            rs = [r for r in rows if r["mode"] == mode and r["gap_statistics"] == st and r["repeat"] >= 0]
            line = (f"{mode}, {st}: fastsim wall_time_ms median "
                    f"{statistics.median(r['fastsim_wall_ms'] for r in rs):.1f}")
            if "dynamo_wall_ms" in rs[0]:
                line += (f", Dynamo 1.6.1 {statistics.median(r['dynamo_wall_ms'] for r in rs):.1f}, ratio "
                         f"{statistics.median(r['wall_ratio'] for r in rs)}x; process "
                         f"{statistics.median(r['process_ratio'] for r in rs)}x; reports agree: "
                         f"{all(r['reports_agree'] for r in rs)}")
            ip = [r for r in rows if r["mode"] == mode and r["gap_statistics"] == st and r["repeat"] < 0]
            if ip:
                line += f"; in-process min {ip[0]['fastsim_wall_ms']:.1f} ms"
                if ip[0].get("wall_ratio"):
                    line += f" ({ip[0]['wall_ratio']}x)"
            print(line)

if __name__ == "__main__":
    main()
