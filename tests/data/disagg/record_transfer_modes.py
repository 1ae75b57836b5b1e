"""Record Dynamo 1.4.2's records for the kv_transfer_timing_mode scenarios of tests/test_disagg.py.

Run with a Python that has ``ai-dynamo==1.4.2`` installed (offline replay needs no services):
``python record_transfer_modes.py`` writes ``new.json`` (merge its entries into dynamo142.json)
and prints each request's transfer time. Same rows and arguments as ``XFER_ROWS`` / ``XFER`` in
the test, trace and engine block size 16, one prefill and one decode worker, round robin.
"""
import json, subprocess, sys, os, tempfile
FIELDS = ["arrival_time_ms", "prefill_worker_idx", "prefill_admit_ms", "source_held_ms", "destination_reserved_ms",
          "destination_activated_ms", "decode_admit_ms", "source_released_ms", "decode_worker_idx", "first_admit_ms",
          "first_token_ms", "last_token_ms", "terminal_time_ms", "input_length", "output_length",
          "reused_input_tokens", "decode_reused_input_tokens", "terminal_status"]
REPORT = ["num_requests", "completed_requests", "duration_ms", "prefill_worker_seconds", "decode_worker_seconds",
          "prefix_cache_reused_ratio", "first_admission_prefix_cache_reused_ratio", "mean_ttft_ms"]
def row(ts, isl, osl, h): return dict(timestamp=ts, input_length=isl, output_length=osl, hash_ids=h)
ROWS = [row(0, 64, 4, [1, 2, 3, 4]), row(1000, 64, 4, [1, 2, 3, 4]), row(2000, 50, 4, [1, 2, 8, 9]),
        row(3000, 50, 4, [1, 2, 3, 4]), row(4000, 64, 4, [1, 2, 6, 7])]
X = dict(kv_bytes_per_token=1000000, kv_transfer_bandwidth=1.0)
SCEN = {
    "transfer_destination_missing": (dict(X, kv_transfer_timing_mode="destination_missing"),
                                     dict(X, kv_transfer_timing_mode="destination_missing")),
    "transfer_destination_missing_prefill_args": (dict(X, kv_transfer_timing_mode="destination_missing"), {}),
    "transfer_full_prompt_sharing": (dict(X, kv_transfer_timing_mode="full_prompt"), {}),
}
out = {}
for name, (pe, de) in SCEN.items():
    d = tempfile.mkdtemp()
    tr = os.path.join(d, "t.jsonl"); open(tr, "w").write("".join(json.dumps(r) + "\n" for r in ROWS))
    cmd = [sys.executable, "-m", "dynamo.replay", tr, "--trace-block-size", "16", "--num-prefill-workers", "1",
           "--num-decode-workers", "1",
           "--prefill-engine-args", json.dumps(dict(pe, worker_type="prefill", block_size=16)),
           "--decode-engine-args", json.dumps(dict(de, worker_type="decode", block_size=16)),
           "--report-json", os.path.join(d, "r.json"), "--report-jsonl", os.path.join(d, "r.jsonl")]
    subprocess.run(cmd, check=True, env=dict(os.environ, DYN_LOG="error"), capture_output=True)
    recs = [json.loads(l) for l in open(os.path.join(d, "r.jsonl"))]
    rep = json.load(open(os.path.join(d, "r.json")))
    out[name] = {"records": [{k: r.get(k) for k in FIELDS} for r in recs], "report": {k: rep[k] for k in REPORT}}
with open("new.json", "w") as f:
    json.dump(out, f, indent=1)
for n, v in out.items():
    print(n, [round(r["destination_activated_ms"] - r["destination_reserved_ms"], 6) for r in v["records"]])
