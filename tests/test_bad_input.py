"""A corpus of bad and extreme inputs: each is refused with exit status 2, no traceback, and a message
that names the file and line, the field, the flag or the path at fault; requests a replay does not
complete are counted on stderr (and fail the run with ``--strict``).

Cases run ``fastsim.cli.main`` in this process (the same code as the console script); a handful run
the console script in a subprocess, and some call the Python API, which raises the same errors.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

import fastsim
from fastsim import memory
from fastsim.cli import main
from fastsim.errors import FastsimError, InputError

EXAMPLE = str(Path(__file__).resolve().parent.parent / "examples" / "mooncake_trace_1000.jsonl")


class Case(NamedTuple):
    id: str
    kind: str
    argv: list
    files: dict
    expect: list  # substrings the message must contain (file:line, field, flag, path, limit)
    code: int = 2


def row(**kw):
    """One Mooncake row: a valid request, with fields replaced or removed (value ``...``)."""
    base = {"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": [1]}
    base.update(kw)
    return json.dumps({k: v for k, v in base.items() if v is not ...})


def trace(*rows):
    return "\n".join(rows) + "\n"


OK = row()
SYN = ["--input-tokens", "100", "--output-tokens", "5", "--request-count", "4", "--arrival-interval-ms", "1"]
CASES: list = []


def add(id, kind, argv, files=None, expect=(), code=2):
    CASES.append(Case(id, kind, list(argv), dict(files or {}), list(expect), code))


def mooncake(id, kind, rows, expect, *args, code=2):
    """A case on a Mooncake trace ``t.jsonl`` of ``rows``."""
    add(id, kind, ["t.jsonl", *args], {"t.jsonl": trace(*rows)}, expect, code)


# ----------------------------------------------------------------------- 1. unchecked numbers
for i, v in enumerate([2**31, 2**32, 2**63 - 1, 2**63, 2**64, 10**30, 10**400]):
    mooncake(f"output_length-huge-{i}", "huge number", [OK, row(output_length=v)],
             ["t.jsonl:2", "output_length", "2147483647"])
for i, v in enumerate([10**400, -(10**400), 10**19 * 10, 2**64 * 3]):
    mooncake(f"timestamp-many-digits-{i}", "huge number", [row(timestamp=v)], ["t.jsonl:1", "'timestamp'"])
for i, v in enumerate([10**400, 2**70]):
    mooncake(f"delay-many-digits-{i}", "huge number",
             [row(session_id="s"), row(session_id="s", timestamp=..., delay=v)], ["t.jsonl:2", "'delay'"])
for i, (isl, tbs) in enumerate([(10**18, 10**18), (2**40, 2**40), (2**31, 2**31), (10**30, 2**60)]):
    # 1.4.2 clamps such a prompt to its hash ids, then the token bound applies; 1.6.1 refuses the row
    mooncake(f"input-length-huge-block-{i}", "huge number", [OK, row(input_length=isl)],
             ["t.jsonl:2", "input_length", "2147483647"], "--trace-block-size", str(tbs),
             "--dynamo-version", "1.4.2")
    mooncake(f"input-length-huge-block-161-{i}", "huge number", [OK, row(input_length=isl)],
             ["t.jsonl:2", "input_length"], "--trace-block-size", str(tbs))
mooncake("input-and-output-over-limit", "huge number", [row(input_length=2**30, output_length=2**30 + 1)],
         ["t.jsonl:1", "2147483649 tokens"], "--trace-block-size", str(2**30))
mooncake("trace-block-size-2^70", "huge number", [OK], ["trace_block_size", "2^62"],
         "--trace-block-size", str(2**70))
mooncake("replay-concurrency-2^70", "huge number", [OK], ["replay_concurrency", "2^62"],
         "--replay-concurrency", str(2**70))
add("synthetic-tokens-over-limit", "huge number",
    ["--input-tokens", str(2**31), "--output-tokens", "5", "--request-count", "2", "--arrival-interval-ms", "1"],
    expect=["input_tokens", "2147483647"])
add("synthetic-arrival-seed-huge", "huge number", SYN + ["--arrival-seed", str(2**70)], expect=["arrival_seed"])

# ----------------------------------------------------------------------- 1. output paths
for flag in ("--report-jsonl", "--report-workers"):
    extra = ["--telemetry-interval-ms", "100"] if flag == "--report-workers" else []
    name = flag.lstrip("-")
    mooncake(f"{name}-is-a-directory", "output path", [OK], [flag, "sub", "is a directory"], flag, "sub", *extra)
    mooncake(f"{name}-under-a-file", "output path", [OK], [flag, "t.jsonl/x", "not a directory"],
             flag, "t.jsonl/x/out", *extra)
    mooncake(f"{name}-deep-under-a-file", "output path", [OK], [flag, "not a directory"],
             flag, "t.jsonl/a/b/c/out", *extra)
    mooncake(f"{name}-empty-path", "output path", [OK], [flag], flag, "", *extra)
mooncake("report-json-under-a-file", "output path", [OK], ["--report-json", "not a directory"],
         "--report-json", "t.jsonl/x.json")
mooncake("report-workers-without-telemetry", "output path", [OK], ["--report-workers", "--telemetry-interval-ms"],
         "--report-workers", "w.csv")

# ----------------------------------------------------------------------- 2. memory
for i, n in enumerate([1_000_000, 10**9, 10**20]):
    mooncake(f"num-workers-{n}", "memory", [OK], ["address space", "--num-workers", "num_gpu_blocks"],
             "--num-workers", str(n))
for i, n in enumerate([10**12, 10**15, 10**18]):
    mooncake(f"num-gpu-blocks-{n}", "memory", [OK], ["address space", f"num_gpu_blocks {n}"],
             "--extra-engine-args", json.dumps({"num_gpu_blocks": n}))
for i, n in enumerate([10**9, 10**7]):
    mooncake(f"scaling-schedule-to-{n}", "memory", [OK], ["scaling schedule", "address space"],
             "--scaling-schedule", json.dumps([[0, 1], [10, n]]))
mooncake("disagg-prefill-pool-huge", "memory", [OK], ["address space", "prefill"],
         "--num-prefill-workers", "1000000", "--prefill-engine-args", '{"worker_type":"prefill"}',
         "--decode-engine-args", '{"worker_type":"decode"}')
add("telemetry-interval-tiny", "memory", [EXAMPLE, "--telemetry-interval-ms", "0.001"],
    expect=["--telemetry-interval-ms", "0.001", "raise the interval"])
add("telemetry-interval-subnormal", "memory", [EXAMPLE, "--telemetry-interval-ms", "1e-320"],
    expect=["--telemetry-interval-ms", "raise the interval"])
for i, (count, turns) in enumerate([(10**12, 1), (10**6, 10**6), (10**15, 1)]):
    extra = ["--turns-per-session", str(turns)] if turns > 1 else []
    add(f"synthetic-requests-{i}", "memory",
        ["--input-tokens", "100", "--output-tokens", "5", "--request-count", str(count),
         "--arrival-interval-ms", "1", *extra], expect=["request_count", "GB", "available"])

# ----------------------------------------------------------------------- 4. absurd times
for i, ts in enumerate([1e300, -1e300, 1.7e308, -1.7e308, 1e19, -1e19, 9.3e18, "1e400", "-1e400"]):
    text = trace(OK, row(timestamp=ts) if not isinstance(ts, str) else OK.replace('"timestamp": 0', f'"timestamp": {ts}'))
    add(f"timestamp-absurd-{i}", "absurd time", ["t.jsonl"], {"t.jsonl": text}, ["t.jsonl:2", "'timestamp'"])
for i, ts in enumerate([1e13, 1e16, 2**62]):
    mooncake(f"timestamp-beyond-simulated-time-{i}", "absurd time", [OK, row(timestamp=ts)],
             ["t.jsonl:2", "2^53 ns"])
for i, ratio in enumerate(["1e-310", "1e-300", "5e-324", "1e-9"]):
    mooncake(f"arrival-speedup-tiny-{i}", "absurd time", [OK, row(timestamp=10_000)],
             ["t.jsonl:2", "2^53 ns", "--arrival-speedup-ratio"], "--arrival-speedup-ratio", ratio)
for i, d in enumerate([1e300, 1e16, 2**62]):
    mooncake(f"delay-absurd-{i}", "absurd time", [row(session_id="s"), row(session_id="s", delay=d)],
             ["t.jsonl:2"])
mooncake("delays-sum-beyond-simulated-time", "absurd time",
         [row(session_id="s")] + [row(session_id="s", timestamp=..., delay=5e9)] * 2, ["t.jsonl:1", "delays"])
for i, args in enumerate([["--request-rate", "1e-300"], ["--arrival-interval-ms", "1e300"],
                          ["--arrival-interval-ms", "1e12"]]):
    add(f"synthetic-arrival-absurd-{i}", "absurd time",
        ["--input-tokens", "100", "--output-tokens", "5", "--request-count", "4", *args],
        expect=["synthetic request 1", "2^53 ns"])
add("synthetic-delay-absurd", "absurd time", SYN + ["--turns-per-session", "2", "--inter-turn-delay-ms", "1e300"],
    expect=["synthetic request 1", "delay"])
add("synthetic-speedup-tiny", "absurd time", SYN + ["--arrival-speedup-ratio", "1e-310"],
    expect=["synthetic request 1", "--arrival-speedup-ratio"])

# ----------------------------------------------------------------------- 6. strict parsing: Mooncake
for key in ("timestamp", "output_length", "input_length", "hash_ids", "session_id"):
    text = OK[:-1] + f', "{key}": 1' + "}" if key != "hash_ids" else OK[:-1] + ', "hash_ids": [2]}'
    if key == "session_id":
        text = '{"session_id": "a", "session_id": "b", ' + OK[1:]
    add(f"duplicate-key-{key}", "strict parsing", ["t.jsonl"], {"t.jsonl": trace(OK, text)},
        ["t.jsonl:2", f"duplicate key '{key}'"])
add("duplicate-key-nested", "strict parsing", ["t.jsonl"],
    {"t.jsonl": trace('{"timestamp": 0, "output_length": 5, "hash_ids": [1], "x": {"a": 1, "a": 2}}')},
    ["t.jsonl:1", "duplicate key 'a'"])
for i, (field, value) in enumerate([("output_length", -1), ("output_length", 1.5), ("output_length", "5"),
                                    ("output_length", True), ("output_length", None),
                                    ("input_length", -1), ("input_length", 2.5), ("input_length", "x"),
                                    ("input_length", 0), ("timestamp", "0"), ("timestamp", True),
                                    ("timestamp", [1]), ("session_id", 5), ("session_id", [])]):
    mooncake(f"field-{field}-{i}", "strict parsing", [OK, row(**{field: value})], ["t.jsonl:2", field])
for i, value in enumerate([[], "x", [-1], [2**64], [1.5], ["a"], {}, [True], None]):
    mooncake(f"hash-ids-{i}", "strict parsing", [row(hash_ids=value)], ["t.jsonl:1", "hash_ids"])
mooncake("missing-output-length", "strict parsing", [row(output_length=...)], ["t.jsonl:1", "output_length"])
mooncake("missing-hash-ids", "strict parsing", [row(hash_ids=...)], ["t.jsonl:1", "hash_ids"])
mooncake("missing-first-timestamp", "strict parsing", [row(timestamp=...)], ["t.jsonl:1", "timestamp"])
mooncake("alias-and-name-output", "strict parsing", [row(output_tokens=5)], ["t.jsonl:1", "output_tokens"])
mooncake("alias-and-name-timestamp", "strict parsing", [row(created_time=5)], ["t.jsonl:1", "created_time"])
mooncake("alias-and-name-input", "strict parsing", [row(input_tokens=5)], ["t.jsonl:1", "input_tokens"])
mooncake("first-turn-delay", "strict parsing", [row(delay=5)], ["t.jsonl:1", "delay"])
mooncake("negative-delay", "strict parsing", [row(session_id="s"), row(session_id="s", delay=-5)],
         ["t.jsonl:2", "delay"])
mooncake("timestamps-going-back", "strict parsing", [row(session_id="s", timestamp=10), row(session_id="s", timestamp=5)],
         ["t.jsonl:2", "delay"])
for i, text in enumerate(["{", "[1, 2]", "5", '"x"', "null", '{"timestamp": NaN}', '{"timestamp": Infinity}',
                          OK + " {}", OK + " x", "{'a': 1}", '{"a": 1,}', "\x00"]):
    add(f"malformed-json-{i}", "strict parsing", ["t.jsonl"], {"t.jsonl": trace(OK, text)}, ["t.jsonl:2"])

# ----------------------------------------------------------------------- 6. strict parsing: Azure
AZ = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
AZ_OK = "2023-11-16 18:15:46.6805900,10,5\n"
for i, ts in enumerate(["2023", "2023-11", "2023-11-16", "2023-11-16 18", "2023-11-16 18:15", "yesterday",
                        "2023-13-45 00:00:00", "2023-11-16 25:00:00", "16/11/2023 18:15:46", "", "NaT",
                        "2023-11-16 18:15:46.1234567890", "2023-11-16 18:15:46+25:00", "1700000000"]):
    add(f"azure-timestamp-{i}", "strict parsing", ["a.csv"], {"a.csv": AZ + AZ_OK + f"{ts},10,5\n"},
        ["a.csv:3", "TIMESTAMP"])
for i, count in enumerate(["1_000", "+5", "1e3", "5.0", "0x10", " ", "ten", "١٢"]):
    add(f"azure-context-tokens-{i}", "strict parsing", ["a.csv"],
        {"a.csv": AZ + AZ_OK + f"2023-11-16 18:15:47,{count},5\n"}, ["a.csv:3", "ContextTokens"])
    add(f"azure-generated-tokens-{i}", "strict parsing", ["a.csv"],
        {"a.csv": AZ + AZ_OK + f"2023-11-16 18:15:47,10,{count}\n"}, ["a.csv:3", "GeneratedTokens"])
add("azure-negative-count", "strict parsing", ["a.csv"], {"a.csv": AZ + "2023-11-16 18:15:47,-4,5\n"},
    ["a.csv:2", "ContextTokens"])
add("azure-count-over-limit", "strict parsing", ["a.csv"], {"a.csv": AZ + f"2023-11-16 18:15:47,{2**40},5\n"},
    ["a.csv:2", "ContextTokens", "2147483647"])
add("azure-span-beyond-int64", "absurd time", ["a.csv"],
    {"a.csv": AZ + "1700-01-01 00:00:00,10,5\n2250-01-01 00:00:00,10,5\n"}, ["a.csv:3", "TIMESTAMP", "2^53"])
add("azure-span-beyond-simulated-time", "absurd time", ["a.csv"],
    {"a.csv": AZ + "2023-01-01 00:00:00,10,5\n2023-12-01 00:00:00,10,5\n"}, ["a.csv:3", "2^53"])
add("azure-bad-header", "strict parsing", ["a.csv"], {"a.csv": "time,ctx,gen\n" + AZ_OK}, ["a.csv:1", "header"])
add("azure-field-count", "strict parsing", ["a.csv"], {"a.csv": AZ + "2023-11-16 18:15:46,10\n"}, ["a.csv:2", "fields"])

# ----------------------------------------------------------------------- files
add("trace-missing", "file", ["nope.jsonl"], expect=["nope.jsonl", "does not exist"])
add("trace-is-directory", "file", ["sub"], expect=["sub", "is a directory"])
add("trace-empty", "file", ["t.jsonl"], {"t.jsonl": ""}, ["t.jsonl", "does not contain any requests"])
add("trace-blank-lines", "file", ["t.jsonl"], {"t.jsonl": "\n \n\n"}, ["t.jsonl", "does not contain any requests"])
add("trace-not-utf8", "file", ["t.jsonl"], {"t.jsonl": OK.encode() + b"\n\xff\xfe\n"}, ["t.jsonl:2", "UTF-8"])
add("trace-gz-corrupt", "file", ["t.jsonl.gz"], {"t.jsonl.gz": b"\x1f\x8b\x08garbage"}, ["t.jsonl.gz"])
add("trace-gz-bad-row", "file", ["t.jsonl.gz"], {"t.jsonl.gz": gzip.compress(trace(OK, row(output_length=-1)).encode())},
    ["t.jsonl.gz:2", "output_length"])
add("azure-empty", "file", ["a.csv"], {"a.csv": AZ}, ["a.csv", "does not contain any requests"])
add("azure-all-zero-context", "file", ["a.csv"], {"a.csv": AZ + "2023-11-16 18:15:46,0,5\n"}, ["a.csv", "ContextTokens"])

# ----------------------------------------------------------------------- 5. engine args and profiles
LONG = "/".join(["a-rather-long-directory-name"] * 4) + "/engine_args.json"
add("extra-engine-args-missing-file", "engine args", [EXAMPLE, "--extra-engine-args", LONG],
    expect=["--extra-engine-args", LONG])
add("extra-engine-args-directory", "engine args", [EXAMPLE, "--extra-engine-args", "sub"],
    expect=["--extra-engine-args", "sub"])
for i, text in enumerate(['{"block_size": 16, "block_size": 32}', '{"num_gpu_blocks": -1}',
                          '{"num_gpu_blocks": 1.5}', '{"max_num_seqs": "x"}', '{"blocksize": 16}',
                          '{"enable_prefix_caching": 1}', "[1]", '{"a": NaN}', "{"]):
    add(f"extra-engine-args-{i}", "engine args", [EXAMPLE, "--extra-engine-args", text], expect=["--extra-engine-args"])
add("profile-text", "engine args", ["t.jsonl", "--extra-engine-args", '{"planner_profile_data": "p.npz"}'],
    {"t.jsonl": trace(OK), "p.npz": "hello"}, ["p.npz", "not a zip of .npy arrays"])
add("profile-pickle", "engine args", ["t.jsonl", "--extra-engine-args", '{"planner_profile_data": "p.npz"}'],
    {"t.jsonl": trace(OK), "p.npz": pickle.dumps({"a": 1})}, ["p.npz", "not a zip of .npy arrays"])
add("profile-npy", "engine args", ["t.jsonl", "--extra-engine-args", '{"planner_profile_data": "p.npz"}'],
    {"t.jsonl": trace(OK), "p.npz": b"\x93NUMPY\x01\x00" + b" " * 100}, ["p.npz", "single .npy array"])
add("profile-missing", "engine args", ["t.jsonl", "--extra-engine-args", '{"planner_profile_data": "none.npz"}'],
    {"t.jsonl": trace(OK)}, ["planner_profile_data", "none.npz"])
add("profile-empty-dir", "engine args", ["t.jsonl", "--extra-engine-args", '{"planner_profile_data": "sub"}'],
    {"t.jsonl": trace(OK)}, ["planner_profile_data", "sub"])

# ----------------------------------------------------------------------- flags (already refused)
for i, args in enumerate([["--num-workers", "0"], ["--num-workers", "-3"], ["--arrival-speedup-ratio", "0"],
                          ["--arrival-speedup-ratio", "-1"], ["--arrival-speedup-ratio", "nan"],
                          ["--arrival-speedup-ratio", "inf"], ["--threads", "0"], ["--trace-block-size", "0"],
                          ["--trace-block-size", "-1"], ["--sla-ttft-ms", "-1"], ["--sla-itl-ms", "nan"],
                          ["--sla-e2e-ms", "inf"], ["--max-sim-time-seconds", "-1"],
                          ["--max-sim-time-seconds", "nan"], ["--replay-concurrency", "0"],
                          ["--telemetry-interval-ms", "0"], ["--telemetry-interval-ms", "-5"],
                          ["--telemetry-interval-ms", "nan"], ["--scaling-schedule", "[[0"],
                          ["--scaling-schedule", "[[10, 2], [5, 3]]"], ["--scaling-schedule", "[[0, 0]]"],
                          ["--scaling-schedule", "[[-1, 2]]"], ["--scaling-schedule", "[[0, 1.5]]"],
                          ["--scaling-schedule", "5"], ["--router-config", "{"],
                          ["--router-config", '{"router_temperature": "hot"}'],
                          ["--router-mode", "kv_router", "--dynamo-version", "1.4.2"],  # (1.6.1 runs one target)
                          ["--planner-config", "x"], ["--model-name", "m"],
                          ["--replay-mode", "online"], ["--trace-format", "dynamo"],
                          ["--request-rate", "5"], ["--num-prefill-workers", "2"]]):
    flag = args[0]
    expect = {"--sla-ttft-ms": "sla_ttft_ms", "--sla-itl-ms": "sla_itl_ms", "--sla-e2e-ms": "sla_e2e_ms",
              "--max-sim-time-seconds": "max_sim_time", "--num-workers": "num_workers",
              "--arrival-speedup-ratio": "arrival_speedup_ratio", "--threads": "threads",
              "--trace-block-size": "trace_block_size", "--replay-concurrency": "replay_concurrency",
              "--telemetry-interval-ms": "telemetry_interval_ms", "--scaling-schedule": "scaling schedule",
              "--router-config": "router", "--router-mode": "kv_router", "--trace-format": "event_type",
              "--replay-mode": "online"}.get(flag, flag)
    mooncake(f"flag-{flag.lstrip('-')}-{i}", "flag", [OK], [expect], *args)
for i, args in enumerate([["--input-tokens", "0"], ["--output-tokens", "-1"], ["--request-count", "0"],
                          ["--turns-per-session", "0"], ["--shared-prefix-ratio", "2", "--num-prefix-groups", "1"],
                          ["--num-prefix-groups", "-1"], ["--arrival-seed", "-1"],
                          ["--inter-turn-delay-ms", "-1", "--turns-per-session", "2"]]):
    argv = list(SYN)
    flag = args[0]
    if flag in argv:
        j = argv.index(flag)
        argv[j + 1] = args[1]
        args = args[2:]
    add(f"synthetic-flag-{flag.lstrip('-')}-{i}", "flag", argv + list(args),
        expect=[flag.lstrip("-").replace("-", "_")])
for i, args in enumerate([["--request-rate", "0"], ["--request-rate", "-1"], ["--arrival-interval-ms", "-1"],
                          ["--arrival-interval-ms", "nan"]]):
    add(f"synthetic-controller-{i}", "flag",
        ["--input-tokens", "100", "--output-tokens", "5", "--request-count", "4", *args],
        expect=[args[0].lstrip("-").replace("-", "_")])
add("argparse-not-an-int", "flag", ["t.jsonl", "--num-workers", "many"], {"t.jsonl": trace(OK)}, ["--num-workers"])
add("argparse-unknown-flag", "flag", ["t.jsonl", "--num-wrokers", "2"], {"t.jsonl": trace(OK)}, ["--num-wrokers"])

# ----------------------------------------------------------------------- 3/5. lost requests and dead ends
REJ = [row(input_length=100, hash_ids=[1]), row(input_length=10, hash_ids=[2]), row(input_length=200, hash_ids=[3])]
mooncake("lost-max-model-len", "lost requests", REJ, ["2 requests rejected", "max_model_len 50", "t.jsonl:1"],
         "--extra-engine-args", '{"max_model_len": 50}', code=0)
mooncake("lost-max-model-len-strict", "lost requests", REJ, ["max_model_len 50", "t.jsonl:1", "--strict"],
         "--extra-engine-args", '{"max_model_len": 50}', "--strict", code=3)
mooncake("lost-never-fits-pool", "lost requests", REJ, ["rejected", "num_gpu_blocks 5", "t.jsonl:1"],
         "--extra-engine-args", '{"num_gpu_blocks": 5, "block_size": 16}', code=0)
mooncake("lost-never-fits-pool-strict", "lost requests", REJ, ["num_gpu_blocks 5", "--strict"],
         "--extra-engine-args", '{"num_gpu_blocks": 5, "block_size": 16}', "--strict", code=3)
mooncake("lost-sim-time-cap", "lost requests", [OK, row(timestamp=5000), row(timestamp=9000)],
         ["never arrived", "--max-sim-time-seconds", "t.jsonl:2"], "--max-sim-time-seconds", "1", code=0)
mooncake("lost-sim-time-cap-unfinished", "lost requests", [OK, row(timestamp=1)],
         ["unfinished", "t.jsonl:1"], "--max-sim-time-seconds", "0.001", "--num-workers", "2", code=0)
mooncake("lost-sim-time-cap-strict", "lost requests", [OK, row(timestamp=5000)],
         ["never arrived", "--strict"], "--max-sim-time-seconds", "1", "--num-workers", "2", "--strict", code=3)
DISAGG = ["--prefill-engine-args", '{"worker_type": "prefill", "block_size": 16}',
          "--decode-engine-args", '{"worker_type": "decode", "block_size": 16, "num_gpu_blocks": 4}']
mooncake("lost-disagg-failed", "lost requests", [row(input_length=100, hash_ids=list(range(1, 8))),
                                                 row(input_length=16, hash_ids=[20])],
         ["failed in disaggregated serving", "num_gpu_blocks 4", "t.jsonl:1"], "--trace-block-size", "16", *DISAGG,
         code=0)
mooncake("lost-disagg-failed-strict", "lost requests", [row(input_length=100, hash_ids=list(range(1, 8)))],
         ["failed in disaggregated serving", "--strict"], "--trace-block-size", "16", *DISAGG, "--strict", code=3)
add("lost-synthetic-index", "lost requests", SYN + ["--extra-engine-args", '{"max_model_len": 50}'],
    expect=["4 requests rejected", "synthetic request 0"], code=0)
DE = [row(input_length=160, output_length=2, hash_ids=list(range(1, 11))), row(input_length=16, hash_ids=[11])]
mooncake("dead-end-kv-pool", "dead end", DE, ["dead end", "t.jsonl:1", "worker 0", "KV pool", "num_gpu_blocks is 10"],
         "--trace-block-size", "16", "--extra-engine-args", '{"num_gpu_blocks": 10, "block_size": 16}')
mooncake("dead-end-budget", "dead end", DE, ["dead end", "t.jsonl:1", "worker 0", "max_num_batched_tokens 64",
                                             "enable_chunked_prefill off"],
         "--trace-block-size", "16", "--extra-engine-args",
         '{"max_num_batched_tokens": 64, "enable_chunked_prefill": false, "block_size": 16}')
mooncake("dead-end-kv-pool-cluster", "dead end", [DE[1], DE[0]], ["dead end", "t.jsonl:2", "worker 1", "KV pool"],
         "--trace-block-size", "16", "--num-workers", "2", "--extra-engine-args",
         '{"num_gpu_blocks": 10, "block_size": 16}')
mooncake("dead-end-disagg", "dead end", [DE[0]], ["dead end", "t.jsonl:1", "max_num_batched_tokens 64"],
         "--trace-block-size", "16", "--prefill-engine-args",
         '{"worker_type": "prefill", "block_size": 16, "max_num_batched_tokens": 64, "enable_chunked_prefill": false}',
         "--decode-engine-args", '{"worker_type": "decode", "block_size": 16}')

# ----------------------------------------------------------------------- 6. leniencies kept (warnings)
mooncake("lenient-block-size-0", "leniency", [OK], ["block_size 0", "engine default"],
         "--extra-engine-args", '{"block_size": 0}', code=0)
mooncake("lenient-speedup-0", "leniency", [OK], ["speedup_ratio 0", "unscaled"],
         "--extra-engine-args", '{"speedup_ratio": 0}', code=0)
mooncake("lenient-decode-speedup-0", "leniency", [OK], ["decode_speedup_ratio 0"],
         "--extra-engine-args", '{"decode_speedup_ratio": 0}', code=0)
mooncake("lenient-clamped-input", "leniency", [OK, row(input_length=10_000)], ["t.jsonl", "line 2", "clamped"],
         "--dynamo-version", "1.4.2", code=0)
mooncake("capacity-exceeded-161", "strict parsing", [OK, row(input_length=10_000)],
         ["t.jsonl:2", "exceeds hash_ids capacity"])


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    return tmp_path


def run_case(case, workdir, capsys):
    for name, content in case.files.items():
        path = workdir / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    try:
        code = main(["replay", "--report-json", str(workdir / "report.json"), *case.argv])
    except SystemExit as exc:  # argparse's own errors (exit 2, usage on stderr)
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case, workdir, capsys):
    code, out, err = run_case(case, workdir, capsys)
    assert "Traceback" not in err and "RuntimeWarning" not in err and "DeprecationWarning" not in err
    assert code == case.code, err
    for text in case.expect:
        assert text in err, (text, err)
    if case.code == 2:
        assert "error:" in err


def test_corpus_size_and_kinds():
    kinds = {c.kind for c in CASES}
    assert len(CASES) >= 150
    assert len({c.id for c in CASES}) == len(CASES)
    assert {"huge number", "output path", "memory", "absurd time", "strict parsing", "file", "engine args",
            "flag", "lost requests", "dead end", "leniency"} <= kinds


# ----------------------------------------------------------------------- behaviour beyond the message
def test_azure_timezone_suffix_is_utc_without_numpy_warning(workdir, recwarn):
    (workdir / "a.csv").write_text(AZ + "2023-11-16 18:15:46Z,10,5\n2023-11-16 19:15:47+01:00,10,5\n"
                                   "2023-11-16 13:15:48.5-05:00,10,5\n2023-11-16 18:15:49+0000,10,5\n")
    w = fastsim.workload.load_azure_csv("a.csv")
    assert w.session_arrival_ms.tolist() == [0.0, 1000.0, 2500.0, 3000.0]
    assert not [x for x in recwarn if not issubclass(x.category, fastsim.errors.FastsimWarning)]


def test_lost_requests_are_kept_in_the_report_as_dynamo_counts_them(workdir):
    (workdir / "t.jsonl").write_text(trace(*REJ))
    with pytest.warns(fastsim.lost.LostRequestsWarning, match="2 requests rejected"):
        rep = fastsim.run_trace_replay("t.jsonl", extra_engine_args={"max_model_len": 50})
    assert rep.summary["num_requests"] == 3 and rep.summary["completed_requests"] == 1
    assert [(g.count, g.first_row, g.where) for g in rep.lost] == [(2, 0, "t.jsonl:1")]


def test_report_jsonl_path_is_checked_before_the_run_by_the_api(workdir):
    (workdir / "t.jsonl").write_text(trace(OK))
    with pytest.raises(InputError, match="report_jsonl_path: sub is a directory"):
        fastsim.run_trace_replay("t.jsonl", report_jsonl_path="sub")


def test_memory_estimate_refuses_with_the_setting_to_change(workdir, monkeypatch):
    (workdir / "t.jsonl").write_text(trace(OK))
    monkeypatch.setattr(memory, "available_bytes", lambda: 50 << 20)
    with pytest.raises(memory.InsufficientMemoryError, match=r"--num-workers 20000.*available|available.*--num-workers 20000"):
        fastsim.run_trace_replay("t.jsonl", num_workers=20_000, extra_engine_args={"num_gpu_blocks": 16})


def test_memory_estimate_parts_grow_with_their_settings():
    w = fastsim.workload.synthetic(1024, 128, 1000, arrival_interval_ms=1.0)
    e = fastsim.EngineArgs()
    one = memory.estimate(w, e, worker_rows=1)
    many = memory.estimate(w, e, worker_rows=1000)
    assert many.parts["per-worker state"] == 1000 * one.parts["per-worker state"]
    assert many.address_space == 1000 * one.address_space
    big = memory.estimate(fastsim.workload.synthetic(1024, 128, 100_000, arrival_interval_ms=1.0), e, worker_rows=1)
    assert big.parts["per-request state"] == 100 * one.parts["per-request state"]


def test_telemetry_is_capped_with_a_warning_and_the_results_are_unchanged(monkeypatch):
    monkeypatch.setattr(memory, "telemetry_row_cap", lambda available=None: 5000)
    with pytest.warns(fastsim.errors.FastsimWarning, match="telemetry stopped .* after 5000 rows"):
        rep = fastsim.run_trace_replay(EXAMPLE, num_workers=2, telemetry_interval_ms=72.0)
    plain = fastsim.run_trace_replay(EXAMPLE, num_workers=2)
    assert len(rep.workers) == 5000
    skip = ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s")
    assert {k: v for k, v in rep.summary.items() if k not in skip} == \
        {k: v for k, v in plain.summary.items() if k not in skip}


def test_workload_checks_apply_to_workloads_built_in_python():
    w = fastsim.workload.synthetic(100, 5, 3, arrival_interval_ms=1.0)
    w.session_arrival_ms[2] = 1e300
    with pytest.raises(InputError, match="synthetic request 2: an arrival of 1e[+]300 ms"):
        fastsim.api.simulate_workload(w)
    w = fastsim.workload.synthetic(100, 5, 3, arrival_interval_ms=1.0)
    w.osl[1] = 2**31
    with pytest.raises(InputError, match="synthetic request 1: input length 100 plus output length 2147483648"):
        fastsim.api.simulate_workload(w)


@pytest.mark.parametrize("rows, args, expect", [
    ([row(timestamp=10**400)], [], "t.jsonl:1: field 'timestamp'"),
    ([OK, row(timestamp=1.7e308)], [], "t.jsonl:2: field 'timestamp'"),
    ([OK, row(output_length=2**63)], [], "t.jsonl:2: field 'output_length'"),
    ([OK], ["--report-jsonl", "sub"], "--report-jsonl: sub is a directory"),
    ([OK, row(timestamp=10)], ["--arrival-speedup-ratio", "1e-310"], "t.jsonl:2"),
])
def test_console_script_prints_no_traceback(workdir, rows, args, expect):
    (workdir / "t.jsonl").write_text(trace(*rows))
    p = subprocess.run([sys.executable, "-m", "fastsim", "replay", "t.jsonl", *args, "--report-json", "r.json"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr and "Warning" not in p.stderr
    assert expect in p.stderr
    assert not (workdir / "r.json").exists()  # refused before the run


def test_help_states_exit_statuses_and_leniencies(capsys):
    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    out = capsys.readouterr().out
    assert "--strict" in out and "exit status" in out and "block_size 0" in out and "speedup_ratio 0" in out
