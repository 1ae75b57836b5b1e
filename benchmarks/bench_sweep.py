"""A 200-configuration sweep: fastsim's wall time, and Dynamo's estimate.

Two grids of 200 configurations (``--grid``):

* ``synthetic``: 10,000 synthetic requests each; 1-8 workers x ``max_num_seqs`` x arrival interval.
* ``trace``: the Mooncake conversation trace (12,031 requests, ``--trace-block-size 512``, engine
  ``block_size`` 64, ``--arrival-speedup-ratio 2``) on 8 workers x 10 ``max_num_seqs`` x 10
  ``num_gpu_blocks`` x prefix caching on/off.

fastsim runs the whole sweep (``fastsim.sweep``, local executor), ``--repeats`` times. Dynamo 1.4.2
is timed on a sample of the same configurations, each as a user would run it (``python -m
dynamo.replay ...`` in a fresh process, ``DYN_LOG=error``); its estimate for the sweep is the
sample's mean time per configuration times the number of configurations, divided by the same
number of parallel processes. The sampled Dynamo reports are also compared with fastsim's rows.

    python benchmarks/bench_sweep.py [--grid trace] [--workers N] [--repeats 3] [--dynamo-sample 10] [--json out.json]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import fastsim
from fastsim.sweep import TIMING_COLUMNS, load_spec, sweep

DYNAMO_PYTHON = os.environ.get("DYNAMO_PYTHON")  # a Python with ai-dynamo==1.4.2
REPO = Path(__file__).resolve().parent.parent
SPEC = {
    "name": "bench-200",
    "base": {"input_tokens": 1024, "output_tokens": 128, "request_count": 10_000,
             "extra_engine_args": {"block_size": 64}},
    "grid": {
        "num_workers": [1, 2, 4, 8],
        "extra_engine_args.max_num_seqs": [32, 64, 128, 256, 512],
        "arrival_interval_ms": [2.5, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 40.0, 60.0, 80.0],
    },
}


def trace_spec(data):
    """The ``trace`` grid: 8 workers x max_num_seqs x num_gpu_blocks x prefix caching on/off."""
    return {
        "name": "bench-200-trace",
        "base": {"trace_files": str(data / "mooncake" / "conversation_trace.jsonl"), "num_workers": 8,
                 "trace_block_size": 512, "arrival_speedup_ratio": 2.0,
                 "extra_engine_args": {"block_size": 64}},
        "grid": {
            "extra_engine_args.max_num_seqs": [8, 16, 32, 48, 64, 96, 128, 192, 256, 512],
            "extra_engine_args.num_gpu_blocks": [2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576,
                                                 32768, 65536],
            "extra_engine_args.enable_prefix_caching": [True, False],
        },
    }


def dynamo_cmd(cfg, report):
    """The ``python -m dynamo.replay`` command line of one configuration's kwargs."""
    kw = cfg.kwargs
    cmd = [DYNAMO_PYTHON, "-m", "dynamo.replay"]
    if "trace_files" in kw:
        cmd += [kw["trace_files"], "--trace-block-size", str(kw["trace_block_size"]),
                "--arrival-speedup-ratio", str(kw["arrival_speedup_ratio"])]
    else:
        cmd += ["--input-tokens", str(kw["input_tokens"]), "--output-tokens", str(kw["output_tokens"]),
                "--request-count", str(kw["request_count"]), "--arrival-interval-ms", str(kw["arrival_interval_ms"])]
    return cmd + ["--num-workers", str(kw["num_workers"]), "--extra-engine-args",
                  json.dumps(kw["extra_engine_args"]), "--report-json", report]


def run_dynamo(cfg, tmp):
    report = os.path.join(tmp, f"dyn_{cfg.config_id}.json")
    t0 = time.perf_counter()
    subprocess.run(dynamo_cmd(cfg, report), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "DYN_LOG": "error"})
    return time.perf_counter() - t0, json.loads(Path(report).read_text())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=os.cpu_count(), help="parallel processes (both simulators)")
    ap.add_argument("--dynamo-sample", type=int, default=10, help="configurations run with Dynamo (0: none)")
    ap.add_argument("--json", help="also write the numbers to this file")
    ap.add_argument("--grid", choices=("synthetic", "trace"), default="synthetic", help="which 200 configurations")
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data",
                    help="folder of the real traces (mooncake/conversation_trace.jsonl) for --grid trace")
    ap.add_argument("--repeats", type=int, default=1, help="whole sweeps timed (median and range reported)")
    ap.add_argument("--dynamo-version", choices=("1.4.2", "1.6.1"), default="1.4.2",
                    help="the release fastsim reproduces in the sweep: the one of $DYNAMO_PYTHON (1.4.2), so that "
                         "the sampled reports can be compared field by field")
    args = ap.parse_args()

    raw = SPEC if args.grid == "synthetic" else trace_spec(args.data)
    spec = load_spec({**raw, "base": {**raw["base"], "dynamo_version": args.dynamo_version}})
    n = spec.n_configs
    fastsim.run_synthetic_trace_replay(16, 2, 1, arrival_interval_ms=1.0)  # kernels: compile or load once
    totals = []
    for _ in range(max(args.repeats, 1)):
        t0 = time.perf_counter()
        df = sweep(spec, executor="local", workers=args.workers, progress=False)
        totals.append(time.perf_counter() - t0)
        assert (df["status"] == "ok").all(), df.loc[df["status"] != "ok", "error"].head()
    total = statistics.median(totals)
    out = {
        "grid": args.grid, "configs": n, "workers": args.workers, "dynamo_version": args.dynamo_version,
        "requests_per_config": SPEC["base"]["request_count"] if args.grid == "synthetic" else 12031,
        "fastsim_sweep_wall_s": round(total, 2), "fastsim_sweep_wall_s_all": [round(t, 2) for t in totals],
        "fastsim_wall_per_config_s": round(total / n, 4),
        "fastsim_mean_run_wall_s": round(float(df["run_wall_s"].mean()), 4),
        "fastsim_mean_sim_wall_ms": round(float(df["wall_time_ms"].mean()), 2),
    }
    if args.dynamo_sample and DYNAMO_PYTHON and Path(DYNAMO_PYTHON).exists():
        step = max(n // args.dynamo_sample, 1)
        sample = spec.configs[step // 2::step][:args.dynamo_sample]
        times, core_ms, worst = [], [], 0.0
        with tempfile.TemporaryDirectory() as tmp:
            for cfg in sample:
                wall, rep = run_dynamo(cfg, tmp)
                times.append(wall)
                core_ms.append(rep["wall_time_ms"])
                row = df.iloc[cfg.config_id]
                for k, v in rep.items():
                    if k not in TIMING_COLUMNS and isinstance(v, (int, float)) and v:
                        worst = max(worst, abs(float(row[k]) - v) / abs(v))
        per = sum(times) / len(times)
        out.update({
            "dynamo_sampled_configs": [c.config_id for c in sample],
            "dynamo_mean_process_wall_s": round(per, 3),
            "dynamo_mean_core_wall_ms": round(sum(core_ms) / len(core_ms), 1),
            "dynamo_estimated_sweep_wall_s": round(per * n / args.workers, 1),
            "speedup_vs_dynamo": round(per * n / args.workers / total, 1),
            "max_rel_diff_vs_dynamo_on_sample": worst,
        })
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
