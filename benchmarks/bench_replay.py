"""fastsim vs Dynamo's offline replay (1.4.2, and 1.6.1 when given), side by side, on a grid of workloads.

Every run is a fresh process through each simulator's command line (the same flags for all), so
its whole-process time and peak RSS are its own. For each workload and repeat the simulators
run back to back, and their order alternates from repeat to repeat; ratios are taken within each
such round and the table reports their median (the machine is noisy). Before the grid, each
simulator does small untimed runs (synthetic, and the bundled trace when the grid replays
traces), so fastsim's numba cache is warm (see ``bench_compile.py`` for the cold start).

    python benchmarks/bench_replay.py --grid core --repeats 3
    python benchmarks/bench_replay.py --grid trace --data ../shared/data --repeats 3
    python benchmarks/bench_replay.py --quick --no-dynamo          # smoke run, < 30 s

Dynamo 1.4.2 is taken from ``--dynamo-python`` (default ``$DYNAMO_PYTHON``: a Python with
ai-dynamo==1.4.2), Dynamo 1.6.1 from ``--dynamo161-python`` and ``--dynamo161-runner`` (defaults
``$DYNAMO161_PYTHON`` and ``$DYNAMO161_RUNNER``: a Python with ai-dynamo==1.6.1 and the script
that gives it 1.4.2's command line); each is skipped, with a note, when absent or broken.
The fastsim under test is whatever ``import fastsim`` finds for this Python (its path is printed).
fastsim replays in its default mode (Dynamo 1.6.1's rules), so its numbers are checked against
1.6.1's when 1.6.1 is run, else against 1.4.2's; ``--fastsim-args '--dynamo-version 1.4.2'`` pins
1.4.2's rules and checks against 1.4.2.

The ``trace`` grid also times fastsim in one process (``--inprocess N`` calls of its command
line's ``main`` after a warm-up call): the whole call, the report's ``wall_time_ms`` and the
difference, the time outside the simulation (reading the trace, building and writing the report).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Optional

from _proc import machine_summary, run_child

REPO = Path(__file__).resolve().parent.parent
BUNDLED_TRACE = REPO / "examples" / "mooncake_trace_1000.jsonl"
DEFAULT_DYNAMO_PYTHON = None  # set $DYNAMO_PYTHON or --dynamo-python: a Python with ai-dynamo==1.4.2
LOAD_PER_WORKER_RPS = 25.0  # synthetic load: one request every 40 ms per worker
SIMULATORS = ("fastsim", "dynamo", "dynamo161")
DYNAMOS = ("dynamo", "dynamo161")
LABEL = {"fastsim": "fastsim", "dynamo": "Dynamo 1.4.2", "dynamo161": "Dynamo 1.6.1"}
EXACT_FIELDS = ("completed_requests", "total_output_tokens")
CLOSE_FIELDS = ("duration_ms", "mean_ttft_ms", "mean_itl_ms")
REL_TOL = 1e-9
# Report fields that measure the simulator rather than the simulated system: never compared.
TIMING_FIELDS = ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s")


@dataclass(frozen=True)
class Workload:
    """One grid point: the replay flags both CLIs take, and how many requests they simulate."""

    name: str
    flags: tuple
    requests: int
    workers: int
    deterministic: bool = True  # same inputs -> same numbers; False would skip the metric check


def synthetic(requests: int, workers: int, isl: int = 1024, osl: int = 128,
              rps_per_worker: float = LOAD_PER_WORKER_RPS) -> Workload:
    """Fixed-interval synthetic load, scaled so every worker sees ``rps_per_worker``."""
    interval_ms = 1000.0 / (rps_per_worker * workers)
    flags = ("--input-tokens", str(isl), "--output-tokens", str(osl), "--request-count",
             str(requests), "--arrival-interval-ms", repr(interval_ms), "--num-workers",
             str(workers), "--router-mode", "round_robin")
    return Workload(f"synthetic {isl}/{osl} {interval_ms:g} ms", flags, requests, workers)


def trace(path: Path, workers: int, engine: str = '{"block_size":64}', extra=(), name=None) -> Workload:
    """A Mooncake JSONL trace replayed on ``workers`` round-robin workers (block size 64)."""
    path = path.resolve()
    with open(path, "rb") as f:
        requests = sum(1 for line in f if line.strip())
    flags = (str(path), "--num-workers", str(workers), "--extra-engine-args", engine) + tuple(extra)
    return Workload(name or f"trace {path.name}", flags, requests, workers)


def azure_to_mooncake(csv_path: Path, out: Path, block: int = 512) -> Path:
    """The Azure CSV trace as Mooncake JSONL, for simulators that read only Mooncake: arrival = ms
    since the first row, one fresh hash id per ``block`` prompt tokens (no prompt shares a prefix),
    rows with no prompt tokens left out (fastsim's Azure reader skips them too)."""
    from fastsim.workload import load_azure_csv

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the skipped zero-token rows
        w = load_azure_csv(csv_path)
    nxt = 0
    with open(out, "w") as f:
        for t, isl, osl in zip(w.session_arrival_ms.tolist(), w.isl.tolist(), w.osl.tolist()):
            nb = -(-isl // block)
            f.write(json.dumps({"timestamp": t, "input_length": isl, "output_length": osl,
                                "hash_ids": list(range(nxt, nxt + nb))}) + "\n")
            nxt += nb
    return out


def head_lines(path: Path, n: int, out: Path) -> Path:
    """The first ``n`` lines of ``path`` in ``out``."""
    with open(path, "rb") as src, open(out, "wb") as dst:
        for i, line in enumerate(src):
            if i >= n:
                break
            dst.write(line)
    return out


def real_traces(data: Path, scratch: Path) -> list:
    """The ``trace`` grid: the Mooncake conversation trace (8 workers, speedup 2; with kv_router
    too; its first 3,000 lines on 3 prefill + 5 decode workers with KV transfer), the Mooncake
    synthetic trace (3 workers of 2 attention-DP ranks) and the Azure 2023 conversation trace
    converted to Mooncake JSONL (2 workers)."""
    conv = data / "mooncake" / "conversation_trace.jsonl"
    synth = data / "mooncake" / "synthetic_trace.jsonl"
    azure = data / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
    missing = [str(p) for p in (conv, synth, azure) if not p.exists()]
    if missing:
        raise SystemExit(f"trace grid: missing {', '.join(missing)} (give --data)")
    return [
        trace(conv, 8, extra=("--trace-block-size", "512", "--arrival-speedup-ratio", "2"),
              name="mooncake conversation, speedup 2"),
        dataclasses.replace(
            trace(conv, 8, extra=("--trace-block-size", "512", "--arrival-speedup-ratio", "2",
                                  "--router-mode", "kv_router"),
                  name="mooncake conversation, speedup 2, kv_router"),
            deterministic=False),  # (Dynamo breaks kv_router's ties at random)
        disagg_trace(head_lines(conv, 3000, scratch / "conversation_3000.jsonl"), 3, 5,
                     name="mooncake conversation first 3,000, speedup 2, 3P+5D"),
        trace(synth, 3, engine='{"block_size":64,"dp_size":2}', extra=("--trace-block-size", "512"),
              name="mooncake synthetic, dp_size 2"),
        trace(azure_to_mooncake(azure, scratch / "azure_conv.jsonl"), 2,
              extra=("--trace-block-size", "512"), name="azure conversation (as Mooncake)"),
    ]


def mtp(requests: int, workers: int) -> Workload:
    """Synthetic load with speculative decoding (MTP): 2 draft tokens accepted at 0.8 and 0.6."""
    wl = synthetic(requests, workers)
    flags = wl.flags + ("--extra-engine-args", '{"aic_nextn":2,"aic_nextn_accept_rates":"0.8,0.6"}')
    return Workload(wl.name + " MTP k=2", flags, requests, workers)


def kv_router(requests: int, workers: int) -> Workload:
    """Synthetic load routed by kv_router (ties are random in Dynamo: metrics not compared)."""
    wl = synthetic(requests, workers)
    return Workload(wl.name + " kv_router", wl.flags[:-1] + ("kv_router",), requests, workers,
                    deterministic=False)


def disagg(requests: int, prefill: int, decode: int) -> Workload:
    """Disaggregated prefill/decode (V06's shape: one request every 10 ms on 2P + 4D)."""
    interval_ms = 1000.0 / (LOAD_PER_WORKER_RPS * decode)
    flags = ("--input-tokens", "1024", "--output-tokens", "128", "--request-count", str(requests),
             "--arrival-interval-ms", repr(interval_ms), "--num-prefill-workers", str(prefill),
             "--num-decode-workers", str(decode), "--prefill-engine-args",
             '{"worker_type":"prefill","block_size":64}', "--decode-engine-args",
             '{"worker_type":"decode","block_size":64}', "--router-mode", "round_robin")
    return Workload(f"disagg {prefill}P+{decode}D {interval_ms:g} ms", flags, requests, prefill + decode)


def disagg_trace(path: Path, prefill: int, decode: int, name: str) -> Workload:
    """A Mooncake trace on disaggregated prefill/decode workers, with KV transfer (128 KiB a
    token at 25 GB/s), speedup 2."""
    wl = trace(path, prefill + decode, name=name)
    flags = (wl.flags[0], "--num-prefill-workers", str(prefill), "--num-decode-workers", str(decode),
             "--prefill-engine-args",
             '{"worker_type":"prefill","block_size":64,"kv_bytes_per_token":131072,"kv_transfer_bandwidth":25}',
             "--decode-engine-args", '{"worker_type":"decode","block_size":64}',
             "--trace-block-size", "512", "--arrival-speedup-ratio", "2")
    return dataclasses.replace(wl, flags=flags)


def build_grid(name: str, quick: bool, data: Path, scratch: Path) -> list:
    """The workloads of one grid; ``quick`` shrinks them to a smoke run."""
    if name == "core":  # single-worker cost per request as the run grows
        return [synthetic(n, 1) for n in ((200, 1000) if quick else (1000, 10_000, 100_000))]
    if name == "cluster":  # cost of more workers at a fixed number of requests
        n, workers = (2000, (4, 16)) if quick else (100_000, (4, 16, 64))
        return [synthetic(n, w) for w in workers]
    if name == "trace":
        return [trace(BUNDLED_TRACE, 2)] if quick else real_traces(data, scratch)
    if name == "kv":  # KV-aware routing at the cluster sizes of the cluster grid
        n, workers = (2000, (4,)) if quick else (100_000, (4, 16, 64))
        return [kv_router(n, w) for w in workers]
    if name == "mtp":  # speculative decoding
        return [mtp(n, w) for n, w in (((1000, 1),) if quick else ((10_000, 1), (100_000, 4)))]
    if name == "disagg":
        return [disagg(n, 2, 4) for n in ((1000,) if quick else (1000, 10_000, 100_000))]
    if name == "load":  # a latency-vs-load sweep: light loads decode few requests per pass
        n, workers = (500, (1,)) if quick else (20_000, (1, 4))
        return [synthetic(n, w, rps_per_worker=rps) for w in workers for rps in (0.5, 2.5, 10.0, 25.0)]
    if name == "scale":  # long: every request count against every worker count
        if quick:
            return [synthetic(1000, w) for w in (1, 16)]
        return [synthetic(n, w) for n in (1000, 10_000, 100_000, 1_000_000)
                for w in (1, 4, 16, 64, 256)]
    raise SystemExit(f"unknown grid {name!r} (core, cluster, trace, kv, mtp, disagg, load, scale)")


# flags added to fastsim's command line only (``--fastsim-args``), e.g. ``--dynamo-version 1.4.2``
FASTSIM_EXTRA: list = []


def command(sim: str, python, wl: Workload, report: str) -> list:
    """``python`` is the interpreter, or (interpreter, script) for Dynamo 1.6.1's runner."""
    if sim == "dynamo161":
        cmd = list(python)
    else:
        cmd = [python, "-m", "fastsim" if sim == "fastsim" else "dynamo.replay"]
        cmd += ["replay"] if sim == "fastsim" else []
    extra = FASTSIM_EXTRA if sim == "fastsim" else []
    return cmd + list(wl.flags) + extra + ["--report-json", report]


def reference_of(dynamos: list) -> str:
    """The Dynamo whose report fastsim's is checked against: the release fastsim reproduces
    (1.6.1 unless ``--fastsim-args`` pins 1.4.2), if it is run, else 1.4.2."""
    pinned_142 = "1.4.2" in FASTSIM_EXTRA
    return "dynamo161" if "dynamo161" in dynamos and not pinned_142 else "dynamo"


def run_once(sim: str, python: str, wl: Workload, env: dict, timeout_s: float) -> dict:
    """One measured run in its own process; returns the CSV row (report fields included)."""
    with tempfile.TemporaryDirectory(prefix=f"bench-{sim}-") as tmp:
        report_path = os.path.join(tmp, "report.json")
        res = run_child(command(sim, python, wl, report_path), env=env, cwd=tmp, timeout_s=timeout_s)
        report = None
        if res.returncode == 0 and os.path.exists(report_path):
            with open(report_path) as f:
                report = json.load(f)
    row = {"workload": wl.name, "requests": wl.requests, "workers": wl.workers, "simulator": sim,
           "returncode": res.returncode, "process_s": res.process_s, "cpu_s": res.cpu_s,
           "peak_rss_mb": res.peak_rss_mb, "page_faults": res.page_faults, "report": report}
    if report is None:
        last = (res.stderr_tail.strip().splitlines() or ["no report written"])[-1]
        print(f"  {sim} FAILED (rc {res.returncode}): {'timeout' if res.timed_out else last}",
              file=sys.stderr)
        return row
    wall = report.get("wall_time_ms", math.nan)
    row["wall_time_ms"] = wall
    row["sim_requests_per_s"] = wl.requests / (wall / 1000.0) if wall and wall > 0 else math.nan
    for key in EXACT_FIELDS + CLOSE_FIELDS:
        row[key] = report.get(key)
    return row


def _rel(a, b) -> float:
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(a), abs(b))


def compare(fast: dict, dyn: dict) -> tuple:
    """(verdict, max relative difference, worst field) between two report dicts.

    The verdict checks the contract: EXACT_FIELDS equal, CLOSE_FIELDS within REL_TOL relative. The
    maximum relative difference is over every numeric field both reports have (except simulator
    timings), for information.
    """
    bad = [k for k in EXACT_FIELDS if fast.get(k) != dyn.get(k)]
    bad += [k for k in CLOSE_FIELDS
            if not (isinstance(fast.get(k), (int, float)) and isinstance(dyn.get(k), (int, float))
                    and _rel(fast[k], dyn[k]) <= REL_TOL)]
    worst, worst_field = 0.0, ""
    for k in sorted(set(fast) & set(dyn)):
        a, b = fast[k], dyn[k]
        if k in TIMING_FIELDS or isinstance(a, bool) or not isinstance(a, (int, float)) \
                or not isinstance(b, (int, float)):
            continue
        d = math.inf if math.isnan(a) != math.isnan(b) else (0.0 if math.isnan(a) else _rel(a, b))
        if d > worst:
            worst, worst_field = d, k
    return ("yes" if not bad else "NO: " + ",".join(bad)), worst, worst_field


def dynamo_available(python: Optional[str], runner: Optional[str] = None):
    """``python`` (with ``runner``: the pair) when it exists and imports dynamo.replay, else None
    (with a note on stderr)."""
    if not python:
        return None
    for path in (python, runner):
        if path and not os.path.exists(path):
            print(f"Dynamo skipped: {path} not found", file=sys.stderr)
            return None
    probe = subprocess.run([python, "-c", "import dynamo.replay"], capture_output=True, text=True,
                           env=dict(os.environ, DYN_LOG="error"))
    if probe.returncode != 0:
        print(f"Dynamo skipped: {python} cannot import dynamo.replay", file=sys.stderr)
        return None
    return (python, runner) if runner else python


def _median(values) -> float:
    values = [v for v in values if isinstance(v, (int, float)) and not math.isnan(v)]
    return statistics.median(values) if values else math.nan


def _fmt(x, digits=3) -> str:
    if not isinstance(x, (int, float)) or math.isnan(x):
        return "–"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def summarize(rows: list, workloads: list, dynamos: list) -> list:
    """One summary dict per workload: medians per simulator, medians of within-round ratios."""
    out = []
    for wl in workloads:
        mine = [r for r in rows if r["workload"] == wl.name and r["requests"] == wl.requests
                and r["workers"] == wl.workers]
        s = {"workload": wl.name, "requests": wl.requests, "workers": wl.workers}
        for sim in SIMULATORS:  # failed runs count as failures, not as times
            runs = [r for r in mine if r["simulator"] == sim and r["report"] is not None]
            for key in ("wall_time_ms", "process_s", "peak_rss_mb", "sim_requests_per_s"):
                s[f"{sim}_{key}"] = _median(r.get(key, math.nan) for r in runs)
                s[f"{sim}_{key}_range"] = _spread(r.get(key, math.nan) for r in runs)
            s[f"{sim}_failed"] = sum(1 for r in mine if r["simulator"] == sim and r["report"] is None)
        rounds = {}
        for r in (r for r in mine if r["report"] is not None):
            rounds.setdefault(r["repeat"], {})[r["simulator"]] = r
        for dyn in DYNAMOS:
            for key in ("wall_time_ms", "process_s", "peak_rss_mb"):
                s[f"ratio_{dyn}_{key}"] = _median(p[dyn].get(key, math.nan) / p["fastsim"][key]
                                                  for p in rounds.values()
                                                  if dyn in p and "fastsim" in p and p["fastsim"].get(key))
        verdicts = [r["same_metrics"] for r in mine if r["simulator"] == "fastsim"]
        if "dynamo" not in dynamos:
            s["same_metrics"] = "n/a"
        else:
            s["same_metrics"] = next((v for v in verdicts if v != "yes"), "yes" if verdicts else "n/a")
        for key in ("inproc_call_ms", "inproc_wall_ms", "inproc_outside_ms"):
            vals = [v for r in mine if r["simulator"] == "fastsim-inprocess" for v in r.get(key, [])]
            s[key], s[key + "_range"] = _median(vals), _spread(vals)
        out.append(s)
    return out


def _spread(values) -> str:
    values = [v for v in values if isinstance(v, (int, float)) and not math.isnan(v)]
    return f"{_fmt(min(values))}-{_fmt(max(values))}" if len(values) > 1 else ""


def markdown(summary: list, dynamos: list) -> str:
    """The results table (medians over repeats, min-max in brackets; ratios are Dynamo / fastsim
    within a round)."""
    sims = ["fastsim"] + dynamos
    head = ["workload", "requests", "workers"]
    head += [f"{LABEL[x]} wall_time_ms" for x in sims] + [f"wall ratio {LABEL[d]}/f" for d in dynamos]
    head += [f"{LABEL[x]} process s" for x in sims] + [f"process ratio {LABEL[d]}/f" for d in dynamos]
    head += [f"{LABEL[x]} RSS MB" for x in sims] + ["same_metrics"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summary:
        def cell(sim, key, digits=3):
            if s[f"{sim}_failed"] and math.isnan(s[f"{sim}_{key}"]):
                return "FAIL"
            rng = s.get(f"{sim}_{key}_range")
            return _fmt(s[f"{sim}_{key}"], digits) + (f" ({rng})" if rng else "")
        cells = [s["workload"], f"{s['requests']:,}", str(s["workers"])]
        cells += [cell(x, "wall_time_ms") for x in sims] + [_fmt(s[f"ratio_{d}_wall_time_ms"]) for d in dynamos]
        cells += [cell(x, "process_s") for x in sims] + [_fmt(s[f"ratio_{d}_process_s"]) for d in dynamos]
        cells += [cell(x, "peak_rss_mb") for x in sims] + [s["same_metrics"]]
        lines.append("| " + " | ".join(cells) + " |")
    if any(not math.isnan(s["inproc_call_ms"]) for s in summary):
        lines += ["", "fastsim in one process (after a warm-up call; median, min-max):", "",
                  "| workload | call ms | wall_time_ms | outside the simulation ms |", "|---|---|---|---|"]
        for s in summary:
            if not math.isnan(s["inproc_call_ms"]):
                lines.append("| " + " | ".join([s["workload"]] + [
                    _fmt(s[k]) + (f" ({s[k + '_range']})" if s[k + "_range"] else "")
                    for k in ("inproc_call_ms", "inproc_wall_ms", "inproc_outside_ms")]) + " |")
    return "\n".join(lines)


CSV_FIELDS = ("workload", "requests", "workers", "simulator", "repeat", "order", "returncode",
              "wall_time_ms", "process_s", "cpu_s", "peak_rss_mb", "page_faults", "sim_requests_per_s") \
    + EXACT_FIELDS + CLOSE_FIELDS + ("same_metrics", "max_rel_diff", "worst_field")

_INPROC = """
import json, sys, time, fastsim.cli
flags, report, n = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
argv = ["replay", *flags, "--report-json", report]
assert fastsim.cli.main(argv) == 0
for _ in range(n):
    t = time.perf_counter()
    assert fastsim.cli.main(argv) == 0
    call = (time.perf_counter() - t) * 1000.0
    with open(report) as f:
        wall = json.load(f)["wall_time_ms"]
    print(json.dumps([call, wall]))
"""


def inprocess(wl: Workload, n: int, timeout_s: float) -> dict:
    """fastsim's command line called ``n`` times in one process (after a warm-up call)."""
    with tempfile.TemporaryDirectory(prefix="bench-inproc-") as tmp:
        res = subprocess.run([sys.executable, "-c", _INPROC, json.dumps(list(wl.flags) + FASTSIM_EXTRA),
                              os.path.join(tmp, "r.json"), str(n)], capture_output=True, text=True,
                             cwd=tmp, timeout=timeout_s)
    pairs = [json.loads(x) for x in res.stdout.split("\n") if x.startswith("[")]
    if res.returncode != 0 or not pairs:
        print(f"  in-process run FAILED: {(res.stderr.strip().splitlines() or ['?'])[-1]}", file=sys.stderr)
    return {"workload": wl.name, "requests": wl.requests, "workers": wl.workers,
            "simulator": "fastsim-inprocess", "report": None, "repeat": -1,
            "inproc_call_ms": [c for c, _ in pairs], "inproc_wall_ms": [w for _, w in pairs],
            "inproc_outside_ms": [c - w for c, w in pairs]}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--grid", default="core",
                   help="comma-separated grids: core, cluster, trace, kv, disagg, load, scale (long, opt-in)")
    p.add_argument("--repeats", type=int, default=3, help="measured rounds per workload (default 3)")
    p.add_argument("--quick", action="store_true", help="smoke run: small sizes, 1 repeat")
    p.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data",
                   help="folder of the real traces of the trace grid (mooncake/, azure_llm_2023/)")
    p.add_argument("--inprocess", type=int, default=5,
                   help="in-process calls of fastsim per trace-grid workload (0: none)")
    p.add_argument("--dynamo-python", default=os.environ.get("DYNAMO_PYTHON") or DEFAULT_DYNAMO_PYTHON,
                   help="Python of a Dynamo 1.4.2 venv (default $DYNAMO_PYTHON)")
    p.add_argument("--dynamo161-python", default=os.environ.get("DYNAMO161_PYTHON"),
                   help="Python of a Dynamo 1.6.1 venv (default $DYNAMO161_PYTHON)")
    p.add_argument("--dynamo161-runner", default=os.environ.get("DYNAMO161_RUNNER"),
                   help="the script that runs 1.6.1 with 1.4.2's flags (default $DYNAMO161_RUNNER)")
    p.add_argument("--no-dynamo", action="store_true", help="run fastsim only")
    p.add_argument("--fastsim-args", default="",
                   help="flags added to fastsim's command line, e.g. '--dynamo-version 1.4.2' (its "
                        "metrics are then checked against Dynamo 1.4.2's; else against 1.6.1's "
                        "when 1.6.1 is run)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per run before it is killed")
    p.add_argument("--out", type=Path, default=Path("results/bench_replay.csv"), help="per-run CSV")
    p.add_argument("--md", type=Path, default=Path("results/bench_replay.md"), help="markdown table")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    FASTSIM_EXTRA[:] = shlex.split(args.fastsim_args)
    repeats = 1 if args.quick else max(1, args.repeats)
    pythons = {"fastsim": sys.executable}
    if not args.no_dynamo:
        pythons["dynamo"] = dynamo_available(args.dynamo_python)
        if args.dynamo161_python or args.dynamo161_runner:
            pythons["dynamo161"] = dynamo_available(args.dynamo161_python, args.dynamo161_runner)
    sims = [s for s in SIMULATORS if pythons.get(s)]
    dynamos = [s for s in sims if s != "fastsim"]
    envs = {s: dict(os.environ) if s == "fastsim" else dict(os.environ, DYN_LOG="error") for s in sims}
    scratch = tempfile.TemporaryDirectory(prefix="bench-traces-")
    workloads = [wl for g in args.grid.split(",") if g.strip()
                 for wl in build_grid(g.strip(), args.quick, args.data, Path(scratch.name))]

    import fastsim  # only to say which one is measured
    started = datetime.now()
    # (the tables are committed: they name what was measured, not where it sits on this machine)
    source = "this tree" if REPO in Path(fastsim.__file__).resolve().parents else "an installed copy"
    header = (f"Measured {started:%Y-%m-%d %H:%M} on {machine_summary()}; fastsim "
              f"{fastsim.__version__} from {source}; "
              + "; ".join(f"{LABEL[d]} (its own environment"
                          f"{'' if d == 'dynamo' else ', through the 1.6.1 runner'})" for d in dynamos)
              + f"{'' if dynamos else 'Dynamo not run'}; grid {args.grid}, {repeats} repeat(s), medians"
              + ("; PYTHONDONTWRITEBYTECODE set (every process compiles its Python modules)"
                 if os.environ.get("PYTHONDONTWRITEBYTECODE") else "") + ".")
    print(header, file=sys.stderr)

    # Untimed warm-up: fills fastsim's numba cache (the trace path and the disaggregated loop have
    # kernels of their own that a synthetic run never compiles) and brings every simulator's files
    # into the page cache.
    warmups = [synthetic(16, 1)]
    if any(w.name.startswith(("trace", "mooncake", "azure")) for w in workloads):
        warmups.append(trace(BUNDLED_TRACE, 2))
    if any(w.name.startswith("disagg") for w in workloads):
        warmups.append(disagg(16, 1, 1))
    for sim in sims:
        for wl in warmups:
            run_once(sim, pythons[sim], wl, envs[sim], args.timeout)

    rows = []
    for wl in workloads:
        for rep in range(repeats):
            order = sims[rep % len(sims):] + sims[:rep % len(sims)]
            if rep % 2:
                order = order[::-1]
            rnd = {}
            for pos, sim in enumerate(order):
                row = run_once(sim, pythons[sim], wl, envs[sim], args.timeout)
                row.update(repeat=rep, order=pos)
                rnd[sim] = row
                rows.append(row)
            ref = reference_of(dynamos)
            fast, dyn = rnd["fastsim"].get("report"), rnd.get(ref, {}).get("report")
            if fast is not None and dyn is not None:
                verdict, worst, field = compare(fast, dyn) if wl.deterministic else ("n/a", math.nan, "")
            else:
                verdict, worst, field = ("n/a" if ref not in rnd else "NO: run failed"), math.nan, ""
            for row in rnd.values():
                row.update(same_metrics=verdict, max_rel_diff=worst, worst_field=field)
            msg = "  ".join(f"{s} {rnd[s].get('wall_time_ms', math.nan):.1f} ms sim / "
                            f"{rnd[s]['process_s']:.2f} s proc" for s in sims)
            print(f"{wl.name} n={wl.requests} w={wl.workers} #{rep}: {msg}  same={verdict}",
                  file=sys.stderr)
        if args.inprocess and wl.name.startswith(("mooncake", "azure")):  # the trace grid's
            row = inprocess(wl, args.inprocess, args.timeout)
            rows.append(row)
            print(f"{wl.name} in-process: calls {row['inproc_call_ms']} ms, wall {row['inproc_wall_ms']}",
                  file=sys.stderr)
    scratch.cleanup()

    for path in (args.out, args.md):
        path.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS + ("inproc_call_ms", "inproc_wall_ms"),
                           extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    table = markdown(summarize(rows, workloads, dynamos), dynamos)
    args.md.write_text(header + "\n\n" + table + "\n")
    print(header + "\n\n" + table)
    failed = sum(1 for r in rows if r["report"] is None and r["simulator"] != "fastsim-inprocess")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
