"""`fastsim plan` over 1,024 configurations of the Mooncake conversation trace: the exhaustive
search's wall time, then bisection on the same grid (its replays all come from the exhaustive
search's cache) and whether both give the same answer.

The grid contains `examples/capacity_planning/plan.yaml`'s: aggregated workers or 1:1, 2:1, 3:1
prefill:decode splits x `max_num_batched_tokens` 1024, 2048, 4096, 8192 x `max_num_seqs` 64, 256
x 4..35 workers (4 x 4 x 2 x 32 = 1,024), the trace at 4x its recorded rate, p99 TTFT <= 3 s and
p99 ITL <= 60 ms, one H100 per worker.

    python benchmarks/bench_plan.py [--trace PATH] [--requests N] [--workers N] [--out DIR] [--json out.json]

``--requests N`` replays the first N requests only (a quick check of the script; the figures in
benchmarks/README.md are of the whole trace). ``--out`` keeps the replay cache: a rerun with the
same directory resumes an interrupted search and then times only what was left, so time a fresh
directory (the default is a new temporary one).
"""

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import fastsim
from fastsim.plan import load_plan_spec, plan

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "examples" / "capacity_planning" / "conversation_trace.jsonl"


def spec(trace):
    return {
        "name": "bench-plan-1024",
        "workload": {"trace_files": str(trace), "trace_block_size": 512, "arrival_speedup_ratio": 4.0},
        "engine": {"block_size": 64},
        "slo": {"p99_ttft_ms": 3000, "p99_itl_ms": 60},
        "search": {"num_workers": {"min": 4, "max": 35}, "split": ["agg", "1:1", "2:1", "3:1"],
                   "max_num_batched_tokens": [1024, 2048, 4096, 8192], "max_num_seqs": [64, 256]},
        "cost": {"gpu_hour_usd": {"H100": 2.5}},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=str(TRACE), help="the conversation trace (default: the example's copy)")
    ap.add_argument("--requests", type=int, help="replay only the first N requests")
    ap.add_argument("--workers", type=int, default=os.cpu_count(), help="parallel replay processes")
    ap.add_argument("--out", help="output directory (default: a new temporary directory)")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="bench_plan_"))
    trace = Path(args.trace)
    if args.requests:
        out.mkdir(parents=True, exist_ok=True)
        head = out / f"first_{args.requests}.jsonl"
        with open(trace) as src, open(head, "w") as dst:
            for i, line in zip(range(args.requests), src):
                dst.write(line)
        trace = head
    sp = load_plan_spec(spec(trace))
    sys.stderr.write(f"fastsim {fastsim.__file__}: {sp.n_configs} configurations in {len(sp.groups)} groups, "
                     f"{args.workers} processes, output {out}\n")
    load = os.getloadavg()
    t0 = time.perf_counter()
    full = plan(sp, out / "exhaustive", method="exhaustive", workers=args.workers)
    t_full = time.perf_counter() - t0
    (out / "bisect").mkdir(exist_ok=True)  # its replays: the exhaustive search's, copied
    shutil.copyfile(out / "exhaustive" / "evaluations.jsonl", out / "bisect" / "evaluations.jsonl")
    bis = plan(sp, out / "bisect", method="bisect", workers=args.workers, progress=False)
    figures = {
        "configurations": sp.n_configs, "groups": len(sp.groups), "requests_per_replay": args.requests or 12031,
        "processes": args.workers, "exhaustive_wall_s": round(t_full, 1),
        "exhaustive_search_s": round(full.search["search_seconds"], 1),
        "simulation_s": round(full.search["simulation_seconds"], 1),
        "replays_run": full.search["replays_run"], "errors": full.search["errors"],
        "answer": full.summary_line(), "bisect_answer": bis.summary_line(), "bisect_evaluated": bis.search["evaluated"],
        "bisect_same_answer": (bis.best or {}).get("config_id") == (full.best or {}).get("config_id"),
        "monotonicity_violations": len(full.monotonicity),
        "load_average_at_start": [round(x, 2) for x in load], "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}",
    }
    for k, v in figures.items():
        print(f"{k}: {v}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
