"""Host KV offload (G2) side by side with Dynamo 1.6.1: ``wall_time_ms`` with and without a host tier.

    DYNAMO161_PYTHON=... DYNAMO161_RUNNER=.../run_dynamo_161.py python benchmarks/bench_offload.py \
        --trace examples/mooncake_trace_1000.jsonl --repeats 2

Each round runs, on the same trace: Dynamo 1.6.1 and fastsim (in this process, after a warm-up
run of each variant), without a tier, with one large enough never to evict a host block, and with
one far smaller than the trace's distinct prompt blocks, which evicts all along
(``docs/decisions/0354-host-eviction.md``), and with that small tier backed by a G3 tier
(``docs/decisions/0355-g3-tier.md``). ``--variants`` picks some of them by number (0-3). The last
column says whether the simulated durations agree.
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
from fastsim.errors import NotSupportedError

REPO = Path(__file__).resolve().parent.parent
BASE = {"block_size": 64, "num_gpu_blocks": 2000}
HOST_BLOCKS = 200000  # more than the trace's distinct prompt blocks: no host eviction
TIER = dict(BASE, kv_cache_bytes_per_token=131072, native_host_offload={"num_host_blocks": HOST_BLOCKS})
SMALL_BLOCKS = 2000  # far fewer than the trace's distinct prompt blocks: the tier evicts
SMALL = dict(BASE, kv_cache_bytes_per_token=131072, native_host_offload={"num_host_blocks": SMALL_BLOCKS})
G3_BLOCKS = 20000  # a worker_local G3 tier behind the small host tier (decision 0355)
G3 = dict(SMALL, g3_offload={"scope": "worker_local", "num_g3_blocks": G3_BLOCKS})
VARIANTS = (("no tier", BASE), ("host tier", TIER), (f"host tier of {SMALL_BLOCKS} blocks (evicts)", SMALL),
            (f"host tier of {SMALL_BLOCKS} blocks + G3 tier of {G3_BLOCKS} blocks", G3))


def run_fastsim(trace, engine, workers):
    try:
        rep = fastsim.run_trace_replay(trace, num_workers=workers, trace_block_size=512,
                                       extra_engine_args={"engine": engine})
    except NotSupportedError:
        return None, None
    return rep.summary["wall_time_ms"], rep.summary["duration_ms"]


def run_dynamo(python, runner, trace, engine, workers):
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.json"
        cmd = [python, runner, str(trace), "--num-workers", str(workers), "--trace-block-size", "512",
               "--extra-engine-args", json.dumps({"engine": engine}), "--report-json", str(out)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=dict(os.environ, DYN_LOG="error"))
        rep = json.loads(out.read_text())
    return rep["wall_time_ms"], rep["duration_ms"]


def _ms(values):
    return "refused" if values[0] is None else " / ".join(f"{v:.1f}" for v in values)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=str(REPO / "examples" / "mooncake_trace_1000.jsonl"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--variants", type=int, nargs="*", default=None, help="numbers of the variants to run (0-3)")
    ap.add_argument("--dynamo161-python", default=os.environ.get("DYNAMO161_PYTHON"))
    ap.add_argument("--dynamo161-runner", default=os.environ.get("DYNAMO161_RUNNER"))
    a = ap.parse_args(argv)
    if not (a.dynamo161_python and a.dynamo161_runner):
        sys.exit("give --dynamo161-python and --dynamo161-runner (or DYNAMO161_PYTHON, DYNAMO161_RUNNER)")
    variants = VARIANTS if a.variants is None else [VARIANTS[i] for i in a.variants]
    for _, engine in variants:  # warm-up: the numba cache
        run_fastsim(a.trace, engine, a.workers)
    rows = {name: [] for name, _ in variants}
    for _ in range(a.repeats):
        for name, engine in variants:
            f_wall, f_dur = run_fastsim(a.trace, engine, a.workers)
            d_wall, d_dur = run_dynamo(a.dynamo161_python, a.dynamo161_runner, a.trace, engine, a.workers)
            rows[name].append((f_wall, d_wall, f_dur is None or abs(f_dur - d_dur) <= 1e-9 * abs(d_dur)))
    print(f"{Path(a.trace).name}, {a.workers} workers, 2000 GPU blocks; host tier: {HOST_BLOCKS} blocks, 32 GB/s, "
          "131072 bytes per token")
    print("| run | fastsim wall_time_ms per round | Dynamo 1.6.1 wall_time_ms per round | ratio (median) | same duration_ms |")
    print("|---|---|---|---|---|")
    for name, runs in rows.items():
        fs = [r[0] for r in runs]
        dy = [r[1] for r in runs]
        ratio = "-" if fs[0] is None else f"{statistics.median(d / f for f, d in zip(fs, dy)):.1f}x"
        same = "-" if fs[0] is None else ("yes" if all(r[2] for r in runs) else "NO")
        print(f"| {name} | {_ms(fs)} | {_ms(dy)} | {ratio} | {same} |")


if __name__ == "__main__":
    main()
