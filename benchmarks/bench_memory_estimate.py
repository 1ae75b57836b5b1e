"""Memory estimate against measured peak RSS: one fresh process per run.

    python benchmarks/bench_memory_estimate.py TRACE_DIR

TRACE_DIR holds the shared traces (mooncake/conversation_trace.jsonl,
azure_llm_2023/AzureLLMInferenceTrace_conv.csv). Each run executes ``fastsim replay`` in a child
process that records, at the moment fastsim checks memory, its resident size and the estimate
(``fastsim.memory.estimate``), then its peak resident size (``ru_maxrss``) after the run.
Prints a Markdown table.
"""

import json
import os
import subprocess
import sys

CHILD = r"""
import json, resource, sys
import fastsim.memory as m
from fastsim import cli
seen = {}
orig = m.check
def check(est, settings, available=None):
    if "rss" not in seen:
        seen["rss"] = m.resident_bytes()
        seen["est"] = est.total
        seen["parts"] = {k: int(v) for k, v in est.parts.items()}
    return orig(est, settings, available)
m.check = check
rc = cli.main(sys.argv[1:])
seen["peak"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
seen["rc"] = rc
sys.stderr.write("RESULT " + json.dumps(seen) + "\n")
"""


def runs(d):
    ex = os.path.join(os.path.dirname(__file__), "..", "examples", "mooncake_trace_1000.jsonl")
    conv = os.path.join(d, "mooncake", "conversation_trace.jsonl")
    azure = os.path.join(d, "azure_llm_2023", "AzureLLMInferenceTrace_conv.csv")
    syn = ["--input-tokens", "1024", "--output-tokens", "128"]
    return [
        ("Mooncake 1000, 1 worker", [ex]),
        ("Mooncake conversation 12k, 4 workers, kv_router", [conv, "--num-workers", "4", "--router-mode", "kv_router"]),
        ("Azure conv 19k, 16 workers, telemetry 1 s", [azure, "--num-workers", "16", "--telemetry-interval-ms", "1000"]),
        ("synthetic 300k, 8 workers", syn + ["--request-count", "300000", "--arrival-interval-ms", "2", "--num-workers", "8"]),
        ("synthetic 100k disaggregated 2P+4D", syn + ["--request-count", "100000", "--arrival-interval-ms", "5",
            "--num-prefill-workers", "2", "--num-decode-workers", "4",
            "--prefill-engine-args", '{"worker_type":"prefill"}', "--decode-engine-args", '{"worker_type":"decode"}']),
        ("synthetic 50k of 8k tokens, 8 workers of 200k blocks", ["--input-tokens", "8192", "--output-tokens", "64",
            "--request-count", "50000", "--arrival-interval-ms", "3", "--num-workers", "8",
            "--extra-engine-args", '{"num_gpu_blocks":200000}']),
    ]


def main():
    d = sys.argv[1]
    out = os.environ.get("TMPDIR", "/tmp")
    print("| run | RSS at the check (MB) | estimate (MB) | measured peak - RSS at check (MB) | ratio | estimated peak (MB) | peak RSS (MB) |")
    print("|---|---|---|---|---|---|---|")
    for name, args in runs(d):
        cmd = [sys.executable, "-c", CHILD, "replay", *args, "--report-json", os.path.join(out, "mem_est.json")]
        p = subprocess.run(cmd, capture_output=True, text=True)
        line = [ln for ln in p.stderr.splitlines() if ln.startswith("RESULT ")]
        if not line:
            print(f"| {name} | failed: {p.stderr.strip()[-200:]} |")
            continue
        r = json.loads(line[-1][7:])
        mb = 1 << 20
        grown = r["peak"] - r["rss"]
        print(f"| {name} | {r['rss'] / mb:.0f} | {r['est'] / mb:.0f} | {grown / mb:.0f} | "
              f"{r['est'] / max(grown, 1):.2f} | {(r['rss'] + r['est']) / mb:.0f} | {r['peak'] / mb:.0f} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
