"""Cold vs warm start of fastsim: what the numba compile costs, and what a cached start costs.

Each repeat makes a fresh, empty ``NUMBA_CACHE_DIR`` and runs ``python -m fastsim replay`` on a
tiny synthetic workload in it twice: the first run compiles every kernel and writes the cache
(cold), the second loads the cache (warm). Separately it times ``import fastsim`` (lazy: no numba)
and the import of the compiled layer (``fastsim.kernels.loop``: numba and the dispatchers, no
machine code yet) inside a child, next to the bare interpreter start (``python -c pass``). Then,
in the same cache, it replays the bundled Mooncake trace twice: the trace path has kernels of its
own that the synthetic run never compiled, so the first trace run shows what is left to compile
(and whether ``wall_time_ms`` pays for it). With a Dynamo venv it also times
``python -m dynamo.replay`` on the tiny workload, for scale.

    python benchmarks/bench_compile.py --repeats 2 --md results/bench_compile.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

from _proc import machine_summary, run_child

TRACE = Path(__file__).resolve().parent.parent / "examples" / "mooncake_trace_1000.jsonl"
TINY = ("--input-tokens", "64", "--output-tokens", "8", "--request-count", "10",
        "--arrival-interval-ms", "40")
IMPORT_PROBE = ("import time; t = time.perf_counter(); import {mod}; "
                "print(time.perf_counter() - t)")


def replay(python: str, module: str, cache_dir: str | None, extra_env=None, flags=TINY) -> dict:
    """One ``replay`` of ``flags`` in its own process: process time, CPU, RSS, sim time."""
    env = dict(os.environ, **(extra_env or {}))
    if cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = cache_dir
    with tempfile.TemporaryDirectory(prefix="bench-compile-") as tmp:
        report = os.path.join(tmp, "r.json")
        cmd = [python, "-m", module] + (["replay"] if module == "fastsim" else []) \
            + list(flags) + ["--report-json", report]
        res = run_child(cmd, env=env, cwd=tmp, timeout_s=600)
        if res.returncode != 0 or not os.path.exists(report):
            tail = (res.stderr_tail.strip().splitlines() or ["no report"])[-1]
            raise SystemExit(f"{module} replay failed (rc {res.returncode}): {tail}")
        with open(report) as f:
            wall_ms = json.load(f).get("wall_time_ms")
    return {"process_s": res.process_s, "cpu_s": res.cpu_s, "peak_rss_mb": res.peak_rss_mb,
            "wall_time_ms": wall_ms}


def import_time(python: str, module: str, cache_dir: str) -> float:
    """Seconds ``import module`` takes inside a fresh interpreter (the interpreter start excluded)."""
    out = subprocess.run([python, "-c", IMPORT_PROBE.format(mod=module)], capture_output=True,
                         text=True, check=True, env=dict(os.environ, NUMBA_CACHE_DIR=cache_dir))
    return float(out.stdout.strip().splitlines()[-1])


def bare_start(python: str) -> float:
    return run_child([python, "-c", "pass"]).process_s


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=2, help="cold+warm pairs, each in a fresh cache")
    p.add_argument("--dynamo-python", default=os.environ.get("DYNAMO_PYTHON"))
    p.add_argument("--no-dynamo", action="store_true")
    p.add_argument("--md", type=Path, help="also write the table here")
    args = p.parse_args(argv)
    dyn = None if args.no_dynamo or not args.dynamo_python or not os.path.exists(args.dynamo_python) else args.dynamo_python

    trace_flags = (str(TRACE), "--num-workers", "2")
    rows = {k: [] for k in ("bare", "import", "import_kernels", "cold", "warm", "trace_first",
                            "trace_again", "dynamo")}
    for rep in range(max(1, args.repeats)):
        with tempfile.TemporaryDirectory(prefix="numba-cache-") as cache:
            rows["bare"].append(bare_start(sys.executable))
            rows["import"].append(import_time(sys.executable, "fastsim", cache))
            rows["import_kernels"].append(import_time(sys.executable, "fastsim.kernels.loop", cache))
            rows["cold"].append(replay(sys.executable, "fastsim", cache))
            rows["warm"].append(replay(sys.executable, "fastsim", cache))
            for kind in ("trace_first", "trace_again"):
                rows[kind].append(replay(sys.executable, "fastsim", cache, flags=trace_flags))
            if dyn:
                rows["dynamo"].append(replay(dyn, "dynamo.replay", None, {"DYN_LOG": "error"}))
        cold, warm = rows["cold"][-1], rows["warm"][-1]
        print(f"repeat {rep}: cold {cold['process_s']:.2f} s, warm {warm['process_s']:.2f} s",
              file=sys.stderr)

    def med(kind, key):
        return statistics.median(r[key] for r in rows[kind]) if rows[kind] else float("nan")

    import fastsim  # only to say which one is measured
    here = Path(fastsim.__file__).resolve().parent
    which = "this tree" if here.parent == Path(__file__).resolve().parent.parent else str(here)
    lines = [f"Measured {datetime.now():%Y-%m-%d %H:%M} on {machine_summary()}; fastsim from "
             f"{which}; medians of {max(1, args.repeats)} repeat(s); tiny workload: {' '.join(TINY)}.", "",
             "| run | process s | CPU s | peak RSS MB | report wall_time_ms |", "|---|---|---|---|---|"]
    for kind, label in (("cold", "fastsim replay, empty NUMBA_CACHE_DIR (compiles)"),
                        ("warm", "fastsim replay, same cache again (loads)"),
                        ("trace_first", f"fastsim replay {TRACE.name} -w 2, first in that cache"),
                        ("trace_again", f"fastsim replay {TRACE.name} -w 2, again"),
                        ("dynamo", "python -m dynamo.replay (same workload)")):
        if rows[kind]:
            lines.append(f"| {label} | {med(kind, 'process_s'):.2f} | {med(kind, 'cpu_s'):.2f} | "
                         f"{med(kind, 'peak_rss_mb'):.0f} | {med(kind, 'wall_time_ms'):.2f} |")
    compile_s = med("cold", "process_s") - med("warm", "process_s")
    lines += ["", "| start-up piece | seconds |", "|---|---|",
              f"| `python -c pass` (bare interpreter) | {statistics.median(rows['bare']):.3f} |",
              f"| `import fastsim` (in-process) | {statistics.median(rows['import']):.4f} |",
              f"| `import fastsim.kernels.loop` (numba + dispatchers) | "
              f"{statistics.median(rows['import_kernels']):.3f} |",
              f"| compile cost (cold - warm process time) | {compile_s:.2f} |"]
    text = "\n".join(lines)
    print(text)
    if args.md:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
