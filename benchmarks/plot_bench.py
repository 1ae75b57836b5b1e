"""Plot a bench_replay.py CSV: simulation time against requests and against workers, both simulators.

    python benchmarks/plot_bench.py results/bench_replay.csv --out results/scaling.png

Left: ``wall_time_ms`` against the number of requests, one line per (simulator, worker count).
Right: time per request against the number of workers, one line per (simulator, request count).
Medians over repeats; log-log axes.
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def plot(csv: Path, out: Path) -> Path:
    """Draw the two scaling panels of ``csv`` into ``out`` (PNG); returns ``out``."""
    df = pd.read_csv(csv)
    df = df[(df.returncode == 0) & df.wall_time_ms.notna()]
    med = df.groupby(["simulator", "workers", "requests"], as_index=False).wall_time_ms.median()
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    styles = {"fastsim": "-", "dynamo": "--"}
    for (sim, w), g in med.groupby(["simulator", "workers"]):
        g = g.sort_values("requests")
        if len(g) > 1:
            a.plot(g.requests, g.wall_time_ms, styles.get(sim, ":"), marker="o", label=f"{sim}, {w} workers")
    for (sim, n), g in med.groupby(["simulator", "requests"]):
        g = g.sort_values("workers")
        if len(g) > 1:
            b.plot(g.workers, 1000.0 * g.wall_time_ms / n, styles.get(sim, ":"), marker="o",
                   label=f"{sim}, {n:,} requests")
    a.set(xscale="log", yscale="log", xlabel="requests", ylabel="simulation time (ms)",
          title="simulation time against requests")
    b.set(xscale="log", yscale="log", xlabel="workers", ylabel="simulation time per request (us)",
          title="cost per request against workers")
    for ax in (a, b):
        ax.grid(True, which="both", alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", type=Path)
    ap.add_argument("--out", type=Path, default=Path("results/scaling.png"))
    a = ap.parse_args()
    print(plot(a.csv, a.out))


if __name__ == "__main__":
    main()
