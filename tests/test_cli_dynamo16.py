"""``fastsim replay`` with Dynamo 1.6's options: every flag of the 1.6 runner, ``--dynamo-version``,
nested engine args, the trace-capacity error and the dead-end wording (fastsim/cli.py)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fastsim.cli import build_parser, main

DATA = Path(__file__).parent / "data"
TRACE = str(DATA / "mooncake_tiny.jsonl")
SYNTH = ["--input-tokens", "64", "--output-tokens", "3", "--request-count", "4", "--arrival-interval-ms", "5"]

# Every option of Dynamo 1.6.1's runner with the 1.4.2 command line (its --help).
RUNNER_161_FLAGS = (
    "--extra-engine-args --prefill-engine-args --decode-engine-args --router-config --router-policy-config "
    "--model-name --aic-backend --aic-system --aic-backend-version --aic-tp-size --aic-model-path "
    "--aic-moe-tp-size --aic-moe-ep-size --aic-attention-dp-size --aic-gemm-dtype --aic-moe-dtype "
    "--aic-fmha-dtype --aic-kv-cache-dtype --aic-comm-dtype --aic-nextn --aic-nextn-accept-rates "
    "--input-tokens --output-tokens --request-count --request-rate --arrival-interval-ms --arrival-seed "
    "--turns-per-session --shared-prefix-ratio --num-prefix-groups --inter-turn-delay-ms --num-workers "
    "--num-prefill-workers --num-decode-workers --replay-concurrency --replay-mode --router-mode "
    "--arrival-speedup-ratio --trace-format --trace-block-size --trace-shared-prefix-ratio "
    "--trace-num-prefix-groups --planner-config --benchmark-granularity --max-sim-time-seconds "
    "--sla-ttft-ms --sla-itl-ms --sla-e2e-ms --report-json --report-jsonl --coverage-json "
    "--telemetry-jsonl --telemetry-interval-ms --quiet --kv-event-lag-ms --agentic-lanes "
    "--execution-model --weka-nested-timestamp-basis --ais-perf-config"
).split()
RUNNER_161_TRACE_FORMATS = ("mooncake", "mooncake-delta", "agentic_mooncake", "applied_compute_agentic",
                            "dynamo", "weka")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def no_wall(summary):
    return {k: v for k, v in summary.items() if "wall" not in k and "per_s" not in k}


def test_every_runner_flag_exists():
    replay = build_parser()._subparsers._group_actions[0].choices["replay"]
    known = {s for a in replay._actions for s in a.option_strings}
    assert set(RUNNER_161_FLAGS) <= known
    fmt = next(a for a in replay._actions if "--trace-format" in a.option_strings)
    assert set(RUNNER_161_TRACE_FORMATS) <= set(fmt.choices)
    ns = build_parser().parse_args(["replay", TRACE])
    assert ns.dynamo_version == "1.6.1" and ns.kv_event_lag_ms is None and not ns.quiet


@pytest.mark.parametrize(
    "argv, words",
    [
        ([TRACE, "--telemetry-jsonl", "t.jsonl"], "--telemetry-jsonl is not supported yet"),
        ([TRACE, "--ais-perf-config", "{}"], "--ais-perf-config is not supported yet"),
    ],
)
def test_flags_of_other_features_are_not_supported_yet(capsys, argv, words):
    code, out, err = run(capsys, "replay", *argv)
    assert code == 2 and words in err and out == ""


@pytest.mark.parametrize(
    "argv, words",
    [  # Dynamo 1.6.1's own refusals, in its words
        ([TRACE, "--kv-event-lag-ms", "5"], "kv_event_lag_ms only supports router_mode='kv_router'"),
        ([TRACE, "--kv-event-lag-ms", "-1"], "kv_event_lag_ms must be finite and non-negative, got -1"),
        # (1.4.2 has no such option)
        ([TRACE, "--kv-event-lag-ms", "5", "--router-mode", "kv_router", "--num-workers", "2",
          "--dynamo-version", "1.4.2"], "Dynamo 1.4.2 has no KV event lag"),
        ([TRACE, "--agentic-lanes", "2"], "agentic_lanes requires trace_format='agentic_mooncake', 'weka', or 'dynamo'"),
        ([TRACE, "--weka-nested-timestamp-basis", "auto"], "weka_nested_timestamp_basis requires trace_format='weka'"),
        ([TRACE, "--execution-model", " "], "execution_model must be non-empty"),
        ([TRACE, "--trace-format", "agentic_mooncake"], "agentic execution requires a configured target model"),
        ([TRACE, "--trace-format", "dynamo", "--agentic-lanes", "0"], "agentic_lanes must be at least 1"),
        (SYNTH + ["--agentic-lanes", "2"], "--agentic-lanes only applies to trace-file replay"),
        (SYNTH + ["--execution-model", "m"], "--execution-model only applies to trace-file replay"),
    ],
)
def test_dynamo_161_refusals(capsys, argv, words):
    code, out, err = run(capsys, "replay", *argv)
    assert code == 2 and words in err


def test_honoured_flags_change_nothing_they_should_not(capsys, tmp_path):
    base = tmp_path / "base.json"
    assert run(capsys, "replay", TRACE, "--report-json", str(base))[0] == 0
    ref = no_wall(json.loads(base.read_text()))
    for extra in (["--kv-event-lag-ms", "0"], ["--kv-event-lag-ms", "0", "--router-mode", "round_robin"],
                  ["--execution-model", "target-model"], ["--telemetry-interval-ms", "1000"]):
        p = tmp_path / "x.json"
        code, out, err = run(capsys, "replay", TRACE, "--report-json", str(p), *extra)
        assert code == 0, err
        assert no_wall(json.loads(p.read_text())) == ref, extra
    code, out, err = run(capsys, "replay", TRACE, "--report-json", str(tmp_path / "q.json"), "--quiet")
    assert code == 0 and out == "" and (tmp_path / "q.json").exists()


def test_coverage_json(capsys, tmp_path):
    cov, jsonl = tmp_path / "cov.json", tmp_path / "r.jsonl"
    code, out, err = run(capsys, "replay", TRACE, "--report-json", str(tmp_path / "a.json"),
                         "--coverage-json", str(cov))
    assert code == 0, err
    # Dynamo 1.6.1's coverage without per-request capture
    assert json.loads(cov.read_text()) == {"capture_per_request": False, "capture_planner_details": False,
                                           "per_request_records": 0}
    code, out, err = run(capsys, "replay", TRACE, "--report-json", str(tmp_path / "a.json"),
                         "--coverage-json", str(cov), "--report-jsonl", str(jsonl))
    assert code == 0, err
    # Dynamo 1.6.1 on this trace: {"capture_per_request": true, ..., "per_request_records": 16}
    assert json.loads(cov.read_text()) == {"capture_per_request": True, "capture_planner_details": False,
                                           "per_request_records": 16}
    assert len(jsonl.read_text().splitlines()) == 16


def test_synthetic_report_jsonl_in_1_6_1(capsys, tmp_path):
    jsonl = tmp_path / "s.jsonl"
    code, out, err = run(capsys, "replay", *SYNTH, "--report-json", str(tmp_path / "s.json"),
                         "--report-jsonl", str(jsonl), "--quiet")
    assert code == 0, err
    assert len(jsonl.read_text().splitlines()) == 4
    code, out, err = run(capsys, "replay", *SYNTH, "--report-jsonl", str(jsonl), "--dynamo-version", "1.4.2")
    assert code == 2 and "--report-jsonl currently only supports trace-file replay" in err


def test_nested_engine_args_give_the_flat_run(capsys, tmp_path):
    flat = {"block_size": 16, "num_gpu_blocks": 300, "max_num_seqs": 4, "enable_prefix_caching": False}
    nested = {"engine": {"block_size": 16, "num_gpu_blocks": 300, "max_num_seqs": 4,
                         "enable_prefix_caching": False, "timing_model": {"type": "polynomial"}},
              "dp_size": 1, "dynamo": {"enable_local_indexer": True}}
    cfg = tmp_path / "nested.json"
    cfg.write_text(json.dumps(nested))
    reports = []
    for engine in (json.dumps(flat), json.dumps(nested), str(cfg)):
        p = tmp_path / "r.json"
        code, out, err = run(capsys, "replay", TRACE, "--extra-engine-args", engine, "--report-json", str(p))
        assert code == 0, err
        reports.append(no_wall(json.loads(p.read_text())))
    assert reports[0] == reports[1] == reports[2]
    code, out, err = run(capsys, "replay", TRACE, "--extra-engine-args", '{"engine": {}, "block_size": 16}')
    assert code == 2 and "field 'block_size' belongs under engine (engine.block_size)" in err


def test_trace_capacity_error_and_clamp_by_version(tmp_path):
    trace = tmp_path / "over.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n\n'
                     '{"timestamp": 5, "input_length": 1000, "output_length": 2, "hash_ids": [1]}\n')
    cmd = [sys.executable, "-m", "fastsim", "replay", str(trace), "--trace-block-size", "64",
           "--report-json", str(tmp_path / "r.json")]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    # Dynamo 1.6.1: "trace line 3 input_length 1000 exceeds hash_ids capacity 64"
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{trace}:3: trace line 3 input_length 1000 exceeds hash_ids capacity 64" in proc.stderr
    proc = subprocess.run(cmd + ["--dynamo-version", "1.4.2"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "warning" in proc.stderr and str(trace) in proc.stderr and "first: line 3" in proc.stderr
    assert json.loads((tmp_path / "r.json").read_text())["total_input_tokens"] == 10 + 64


@pytest.mark.parametrize("version", ["1.6.1", "1.4.2"])
def test_dead_end_wording(capsys, version):
    # A 1000-token prompt, chunked prefill off, a 512-token budget. Dynamo 1.6.1: "replay invariant
    # violated: offline replay detected an effect-free zero-duration pass with 3 in-flight requests
    # remaining"; 1.4.2: "offline replay reached a dead end with 3 in-flight requests remaining".
    code, out, err = run(capsys, "replay", "--input-tokens", "1000", "--output-tokens", "4", "--request-count", "3",
                         "--arrival-interval-ms", "10", "--dynamo-version", version, "--extra-engine-args",
                         '{"enable_chunked_prefill": false, "max_num_batched_tokens": 512}')
    assert code == 2
    new = ("replay invariant violated: offline replay detected an effect-free zero-duration pass with 3 "
           "in-flight requests remaining")
    assert (new in err) == (version == "1.6.1")
    assert "offline replay reached a dead end with 3 in-flight requests remaining" in err
