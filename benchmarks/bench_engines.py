"""fastsim's SGLang or TRT-LLM engine vs Dynamo 1.6.1's (or 1.4.2's), side by side:
``wall_time_ms`` (the simulation alone, which both report) on a few workloads, with the ratio per
round.

    DYNAMO161_PYTHON=... DYNAMO161_RUNNER=.../run_dynamo_161.py python benchmarks/bench_engines.py --engine sglang --repeats 2
    DYNAMO142_PYTHON=... python benchmarks/bench_engines.py --engine sglang --dynamo-version 1.4.2
    ... bench_engines.py --engine sglang --router-mode kv_router   (both routed by the kv_router)
    ... bench_engines.py --engine sglang --disaggregated   (prefill and decode pools, decision 0370)
    ... bench_engines.py --engine sglang --disaggregated --router-mode kv_router   (each pool's kv_router, 0440)

fastsim runs in this process after a warm-up run (numba cache warm), under the rules of the
release it is compared with; Dynamo runs as a child process (1.6.1 through the runner that gives it
Dynamo 1.4.2's command line; 1.4.2 as ``python -m dynamo.replay``). Each round runs both back to
back; the table gives each round's figures, the median ratio and whether the two reports give the
same ``duration_ms``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import fastsim

WORKLOADS = {
    # name: (fastsim.run_synthetic_trace_replay keywords, the same as dynamo.replay flags, DP ranks)
    "100k x 8 workers, 1024/128": (dict(input_tokens=1024, output_tokens=128, request_count=100_000,
                                        arrival_interval_ms=2.0, num_workers=8),
                                   "--input-tokens 1024 --output-tokens 128 --request-count 100000 "
                                   "--arrival-interval-ms 2 --num-workers 8", 1),
    "100k x 1 worker, 512/64": (dict(input_tokens=512, output_tokens=64, request_count=100_000,
                                     arrival_interval_ms=10.0, num_workers=1),
                                "--input-tokens 512 --output-tokens 64 --request-count 100000 "
                                "--arrival-interval-ms 10 --num-workers 1", 1),
    "20k x 4 workers, dp 2": (dict(input_tokens=1024, output_tokens=128, request_count=20_000,
                                   arrival_interval_ms=5.0, num_workers=4),
                              "--input-tokens 1024 --output-tokens 128 --request-count 20000 "
                              "--arrival-interval-ms 5 --num-workers 4", 2),
}


DISAGG_WORKLOADS = {
    # name: (keywords, flags, (prefill workers, decode workers))
    "10k, 2P + 4D, 1500/150": (dict(input_tokens=1500, output_tokens=150, request_count=10_000,
                                    arrival_interval_ms=2.0),
                               "--input-tokens 1500 --output-tokens 150 --request-count 10000 "
                               "--arrival-interval-ms 2", (2, 4)),
    "5k, 1P + 2D, 1024/128, tight decode KV": (dict(input_tokens=1024, output_tokens=128, request_count=5_000,
                                                    arrival_interval_ms=4.0),
                                               "--input-tokens 1024 --output-tokens 128 --request-count 5000 "
                                               "--arrival-interval-ms 4", (1, 2)),
}


def pool_args(name):
    """The two pools' SGLang engine arguments of a disaggregated workload (64-token pages)."""
    decode = {"engine_type": "sglang", "worker_type": "decode", "block_size": 64}
    if "tight" in name:
        decode["num_gpu_blocks"] = 800
    return {"engine_type": "sglang", "worker_type": "prefill", "block_size": 64}, decode


def run_disagg(name, python, runner, repeats, router_mode="round_robin"):
    """One table row: a disaggregated workload on fastsim and on Dynamo, ``repeats`` rounds (with
    the kv_router, whose ties Dynamo breaks at random, the durations are not compared)."""
    kw, flags, (n_p, n_d) = DISAGG_WORKLOADS[name]
    pe, de = pool_args(name)
    flags += (f" --num-prefill-workers {n_p} --num-decode-workers {n_d} --router-mode {router_mode}"
              f" --prefill-engine-args {json.dumps(pe, separators=(',', ':'))}"
              f" --decode-engine-args {json.dumps(de, separators=(',', ':'))}")
    fs, dy, ratios, same = [], [], [], True
    for _ in range(repeats):
        k = dict(kw)
        rep = fastsim.run_synthetic_trace_replay(k.pop("input_tokens"), k.pop("output_tokens"), k.pop("request_count"),
                                                 prefill_engine_args=pe, decode_engine_args=de,
                                                 num_prefill_workers=n_p, num_decode_workers=n_d,
                                                 router_mode=router_mode, **k)
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "r.json"
            subprocess.run([python, *runner.split(), *flags.split(), "--report-json", str(out)], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ, DYN_LOG="error"))
            ref = json.loads(out.read_text())
        fs.append(rep.summary["wall_time_ms"])
        dy.append(ref["wall_time_ms"])
        ratios.append(dy[-1] / fs[-1])
        same &= abs(rep.summary["duration_ms"] - ref["duration_ms"]) <= 1e-9 * max(1.0, abs(ref["duration_ms"]))
    verdict = "n/a (random ties)" if router_mode == "kv_router" else "yes" if same else "NO"
    print(f"| {name} | {', '.join(f'{x:.0f}' for x in fs)} | {', '.join(f'{x:.0f}' for x in dy)} | "
          f"{statistics.median(ratios):.2f}x | {verdict} |", flush=True)


def engine_args(engine, dp):
    """The engine arguments of a workload: SGLang with 64-token pages; TRT-LLM at its defaults,
    with 1,500 blocks a rank under DP (every rank's KV reserved to the limit)."""
    if engine == "sglang":
        return {"engine_type": "sglang", "block_size": 64, "dp_size": dp}
    return {"engine_type": "trtllm"} if dp == 1 else {"engine_type": "trtllm", "dp_size": dp, "num_gpu_blocks": 1500}


def run_fastsim(kw, engine, version="1.6.1", router_mode="round_robin"):
    kw = dict(kw, router_mode=router_mode)
    n_in, n_out, n = kw.pop("input_tokens"), kw.pop("output_tokens"), kw.pop("request_count")
    rep = fastsim.run_synthetic_trace_replay(n_in, n_out, n, extra_engine_args=engine, dynamo_version=version, **kw)
    return rep.summary["wall_time_ms"], rep.summary["duration_ms"]


def run_dynamo(python, runner, flags, engine):
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.json"
        cmd = [python, *runner.split(), *flags.split(), "--extra-engine-args", json.dumps(engine),
               "--report-json", str(out)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=dict(os.environ, DYN_LOG="error"))
        rep = json.loads(out.read_text())
    return rep["wall_time_ms"], rep["duration_ms"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=("sglang", "trtllm"), required=True)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--dynamo161-python", default=os.environ.get("DYNAMO161_PYTHON"))
    ap.add_argument("--dynamo161-runner", default=os.environ.get("DYNAMO161_RUNNER"))
    ap.add_argument("--dynamo-version", choices=("1.6.1", "1.4.2"), default="1.6.1",
                    help="the release compared with (and whose rules fastsim runs)")
    ap.add_argument("--dynamo142-python", default=os.environ.get("DYNAMO142_PYTHON"))
    ap.add_argument("--router-mode", choices=("round_robin", "kv_router"), default="round_robin")
    ap.add_argument("--disaggregated", action="store_true",
                    help="prefill and decode pools (SGLang, Dynamo 1.6.1, round robin)")
    a = ap.parse_args(argv)
    if a.dynamo_version == "1.4.2":
        if not a.dynamo142_python:
            sys.exit("give --dynamo142-python (or DYNAMO142_PYTHON)")
        python, runner = a.dynamo142_python, "-m dynamo.replay"
    else:
        if not (a.dynamo161_python and a.dynamo161_runner):
            sys.exit("give --dynamo161-python and --dynamo161-runner (or DYNAMO161_PYTHON, DYNAMO161_RUNNER)")
        python, runner = a.dynamo161_python, a.dynamo161_runner
    if a.disaggregated:
        if a.engine != "sglang" or a.dynamo_version != "1.6.1":
            sys.exit("--disaggregated compares the SGLang engine with Dynamo 1.6.1")
        print("| workload | fastsim wall_time_ms | Dynamo 1.6.1 wall_time_ms | ratio (median) | same duration_ms |")
        print("|---|---|---|---|---|")
        for name in DISAGG_WORKLOADS:
            run_disagg(name, python, runner, a.repeats, a.router_mode)
        return
    run_fastsim(dict(input_tokens=256, output_tokens=8, request_count=50, arrival_interval_ms=10.0),
                engine_args(a.engine, 1), a.dynamo_version, a.router_mode)  # warm
    print(f"| workload | fastsim wall_time_ms | Dynamo {a.dynamo_version} wall_time_ms | ratio (median) | "
          "same duration_ms |")
    print("|---|---|---|---|---|")
    for name, (kw, flags, dp) in WORKLOADS.items():
        engine = engine_args(a.engine, dp)
        fs, dy, ratios, same = [], [], [], True
        for _ in range(a.repeats):
            f_wall, f_dur = run_fastsim(kw, engine, a.dynamo_version, a.router_mode)
            d_wall, d_dur = run_dynamo(python, runner, f"{flags} --router-mode {a.router_mode}", engine)
            fs.append(f_wall)
            dy.append(d_wall)
            ratios.append(d_wall / f_wall)
            same &= abs(f_dur - d_dur) <= 1e-9 * max(1.0, abs(d_dur))
        print(f"| {name} | {', '.join(f'{x:.0f}' for x in fs)} | {', '.join(f'{x:.0f}' for x in dy)} | "
              f"{statistics.median(ratios):.2f}x | {'yes' if same else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
