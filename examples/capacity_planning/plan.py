"""Fewest workers that meet a p99 TTFT target, for several max_num_seqs values.

Runs (or resumes, or just reads) the sweep of sweep.yaml into OUT/results.parquet, prints the plan
and draws OUT/capacity.png (p99 TTFT against workers, one line per max_num_seqs) and
OUT/frontier.png (output tokens/s per GPU against p99 TTFT, Pareto set marked). OUT defaults to a
folder in the system's temporary directory, so that nothing is written into the repository.

    python plan.py [--out DIR] [--target-ms 3000] [--workers N] [--spec sweep.yaml]
"""

import argparse
import tempfile
from pathlib import Path

from matplotlib.figure import Figure

import fastsim.plots
from fastsim.sweep import sweep

HERE = Path(__file__).resolve().parent
SEQS, WORKERS = "extra_engine_args.max_num_seqs", "num_workers"


def plan(results, target_ms):
    """One row per max_num_seqs: the fewest workers whose p99 TTFT meets the target (or None)."""
    rows = []
    for seqs, g in results[results["status"] == "ok"].groupby(SEQS, sort=True):
        ok = g[g["p99_ttft_ms"] <= target_ms].sort_values(WORKERS)
        best = ok.iloc[0] if len(ok) else None
        rows.append({
            "max_num_seqs": int(seqs),
            "fewest_workers": None if best is None else int(best[WORKERS]),
            "p99_ttft_ms": None if best is None else round(float(best["p99_ttft_ms"]), 1),
            "mean_itl_ms": None if best is None else round(float(best["mean_itl_ms"]), 2),
            "p99_e2e_s": None if best is None else round(float(best["p99_e2e_latency_ms"]) / 1000, 1),
            "goodput_share": None if best is None else
            round(float(best["goodput_completed_requests"]) / float(best["completed_requests"]), 4),
        })
    return rows


def capacity_plot(results, rows, target_ms, path):
    fig = Figure(figsize=(7.0, 4.6), layout="constrained")
    ax = fig.subplots()
    for i, (seqs, g) in enumerate(results[results["status"] == "ok"].groupby(SEQS, sort=True)):
        g = g.sort_values(WORKERS)
        ax.plot(g[WORKERS], g["p99_ttft_ms"] / 1000.0, "-o", color=f"C{i}", markersize=4,
                label=f"max_num_seqs={seqs}")
        best = next(r for r in rows if r["max_num_seqs"] == seqs)
        if best["fewest_workers"] is not None:
            ax.plot([best["fewest_workers"]], [best["p99_ttft_ms"] / 1000.0], "*", color=f"C{i}",
                    markersize=16, markeredgecolor="k")
    ax.axhline(target_ms / 1000.0, color="k", linestyle="--", linewidth=1, label=f"target p99 TTFT {target_ms / 1000:g} s")
    ax.set_yscale("log")
    ax.set_xlabel("workers")
    ax.set_ylabel("p99 TTFT (s)")
    ax.set_title("Mooncake conversation trace at 4x speed: fewest workers (stars) meeting the target")
    ax.title.set_fontsize(9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.savefig(path, dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target-ms", type=float, default=3000.0, help="p99 TTFT target (ms)")
    ap.add_argument("--workers", type=int, default=None, help="sweep worker processes (default: all CPUs)")
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "fastsim-capacity-planning",
                    help="folder of the results and plots (default: %(default)s)")
    ap.add_argument("--spec", type=Path, default=HERE / "sweep.yaml", help="the sweep spec (default: %(default)s)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = sweep(args.spec, workers=args.workers, checkpoint=args.out / "results.parquet")
    rows = plan(results, args.target_ms)
    print(f"p99 TTFT target {args.target_ms:g} ms ({len(results)} configurations, "
          f"{results['run_wall_s'].sum():.1f} s of simulation):")
    header = list(rows[0])
    print("  ".join(f"{h:>14}" for h in header))
    for r in rows:
        print("  ".join(f"{'-' if r[h] is None else r[h]:>14}" for h in header))
    capacity_plot(results, rows, args.target_ms, args.out / "capacity.png")
    fastsim.plots.frontier(results, x="p99_ttft_ms", path=args.out / "frontier.png")
    print(f"Saved {args.out / 'results.parquet'}, {args.out / 'capacity.png'} and {args.out / 'frontier.png'}")


if __name__ == "__main__":
    main()
