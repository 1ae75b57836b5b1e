"""Command line (fastsim/cli.py): flags, Dynamo's rules, unsupported flags, error handling.

Every case but the last (the cycle collector's, on a tiny trace) fails before a simulation starts.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fastsim import __version__
from fastsim.cli import build_parser, main, resolve_report_path

DATA = Path(__file__).parent / "data"
TRACE = str(DATA / "mooncake_tiny.jsonl")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def replay_ns(*argv):
    return build_parser().parse_args(["replay", *argv])


def test_version(capsys):
    with pytest.raises(SystemExit) as ei:
        main(["--version"])
    assert ei.value.code == 0
    assert capsys.readouterr().out.strip() == f"fastsim {__version__} (fastsim-llm)"


def test_no_command_prints_help(capsys):
    code, out, err = run(capsys)
    assert code == 2 and "replay" in err


def test_replay_flags_without_a_command(capsys):
    # `fastsim <flags>` runs what `python -m dynamo.replay <flags>` runs
    code, out, err = run(capsys, "--input-tokens", "64", "--output-tokens", "4", "--request-count", "3",
                         "--arrival-interval-ms", "5")
    assert code == 0 and "3 of 3 requests completed" in out
    with pytest.raises(SystemExit) as ei:
        main(["--bogus"])
    assert ei.value.code == 2 and "fastsim replay: error: unrecognized argument --bogus" in capsys.readouterr().err
    code, out, err = run(capsys, str(TRACE), "--num-workers", "2")
    assert code == 0 and "requests completed on 2 workers" in out


def test_defaults_match_dynamo():
    ns = replay_ns()
    expected = dict(
        trace_files=[], extra_engine_args=None, arrival_seed=42, turns_per_session=1,
        shared_prefix_ratio=0.0, num_prefix_groups=0, inter_turn_delay_ms=0.0, num_workers=1,
        num_prefill_workers=1, num_decode_workers=1, replay_concurrency=None,
        replay_mode="offline", router_mode="round_robin", arrival_speedup_ratio=1.0,
        trace_format="mooncake", trace_block_size=None, trace_shared_prefix_ratio=0.0,
        trace_num_prefix_groups=0, report_json=None, report_jsonl=None,
        max_sim_time_seconds=None, sla_ttft_ms=None, sla_itl_ms=None, sla_e2e_ms=None,
        input_tokens=None, output_tokens=None, request_count=None, request_rate=None,
        arrival_interval_ms=None,
    )
    for k, v in expected.items():
        assert getattr(ns, k) == v, k


def test_all_dynamo_flags_exist():
    flags = (
        "--extra-engine-args --prefill-engine-args --decode-engine-args --router-config "
        "--router-policy-config --model-name --aic-backend --aic-system --aic-backend-version "
        "--aic-tp-size --aic-model-path --aic-moe-tp-size --aic-moe-ep-size --aic-attention-dp-size "
        "--aic-gemm-dtype --aic-moe-dtype --aic-fmha-dtype --aic-kv-cache-dtype --aic-comm-dtype "
        "--aic-nextn --aic-nextn-accept-rates --input-tokens --output-tokens --request-count "
        "--request-rate --arrival-interval-ms --arrival-seed --turns-per-session "
        "--shared-prefix-ratio --num-prefix-groups --inter-turn-delay-ms --num-workers "
        "--num-prefill-workers --num-decode-workers --replay-concurrency --replay-mode "
        "--router-mode --arrival-speedup-ratio --trace-format --trace-block-size "
        "--trace-shared-prefix-ratio --trace-num-prefix-groups --report-json --report-jsonl "
        "--planner-config --benchmark-granularity --max-sim-time-seconds --sla-ttft-ms "
        "--sla-itl-ms --sla-e2e-ms"
    ).split()
    replay = build_parser()._subparsers._group_actions[0].choices["replay"]
    known = {s for a in replay._actions for s in a.option_strings}
    assert set(flags) <= known


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "provide either trace_file or all of --input-tokens/--output-tokens/--request-count"),
        ([TRACE, "--input-tokens", "8"], "provide either trace_file or all of"),
        (["--input-tokens", "8", "--output-tokens", "2"], "synthetic replay requires --input-tokens, --output-tokens, and --request-count"),
        (["--turns-per-session", "2"], "synthetic replay requires --input-tokens"),
        (["--input-tokens", "8", "--output-tokens", "2", "--request-count", "3"],
         "synthetic replay requires exactly one of --replay-concurrency, --request-rate, or --arrival-interval-ms"),
        (["--input-tokens", "8", "--output-tokens", "2", "--request-count", "3", "--request-rate", "1",
          "--arrival-interval-ms", "5"], "exactly one of"),
        ([TRACE, "--request-rate", "1"], "--request-rate and --arrival-interval-ms only apply to synthetic replay"),
        ([TRACE, TRACE], "--trace-format=mooncake requires exactly one trace file"),
        (["--trace-format", "dynamo"], "--trace-format=dynamo requires at least one trace file"),
        ([TRACE, "--trace-format", "applied_compute_agentic"], "requires --replay-concurrency"),
        (["--input-tokens", "8", "--output-tokens", "2", "--request-count", "3", "--arrival-interval-ms", "5",
          "--report-jsonl", "x.jsonl", "--dynamo-version", "1.4.2"],
         "--report-jsonl currently only supports trace-file replay"),
        (["--input-tokens", "8", "--output-tokens", "2", "--request-count", "3", "--arrival-interval-ms", "5",
          "--max-sim-time-seconds", "1"], "--max-sim-time-seconds currently only supports trace-file replay"),
    ],
)
def test_dynamo_rules(capsys, argv, message):
    code, out, err = run(capsys, "replay", *argv)
    assert code == 2 and message in err and err.startswith("fastsim replay: error:")
    assert out == ""


@pytest.mark.parametrize(
    "extra, flag",
    [
        (["--aic-backend", "vllm"], "--aic-backend"),
        (["--aic-tp-size", "2"], "--aic-tp-size"),
        (["--router-policy-config", "p.yaml"], "--router-policy-config"),
        (["--model-name", "m"], "--model-name"),
        (["--benchmark-granularity", "8"], "--benchmark-granularity"),
        (["--replay-mode", "online"], "--replay-mode=online"),
        (["--trace-shared-prefix-ratio", "0.5"], "--trace-shared-prefix-ratio"),
        (["--trace-num-prefix-groups", "2"], "--trace-num-prefix-groups"),
    ],
)
def test_unsupported_flags_are_named(capsys, extra, flag):
    code, out, err = run(capsys, "replay", TRACE, *extra)
    assert code == 2 and flag in err and "not supported yet" in err


def test_planner_config_is_refused_with_the_reason(capsys):
    # neither release runs its planner offline as installed (docs/decisions/0261)
    code, out, err = run(capsys, "replay", TRACE, "--planner-config", "{}")
    assert code == 2 and "--planner-config is not supported by fastsim" in err
    assert "import sklearn" in err and "import aisimulate" in err


def test_unknown_flag_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as ei:
        main(["replay", TRACE, "--watermark", "0.01"])
    assert ei.value.code == 2
    assert "--watermark" in capsys.readouterr().err


@pytest.mark.parametrize(
    "engine, message",
    [
        ('{"watermark": 0.01}', "--extra-engine-args: unknown field 'watermark'"),
        ('{"block_sz": 16}', "did you mean 'block_size'"),
        ("{bad", "--extra-engine-args: malformed JSON at line 1 column 2"),
        ('{"block_size": 1.5}', "--extra-engine-args: field 'block_size' must be an integer"),
        ('{"engine_type": "trtllm", "trtllm": {"capacity_scheduler_policy": "max_utilization"}}',
         "must be 'guaranteed_no_evict'"),
        ('{"worker_type": "prefill"}', "trace replay only supports aggregated workers"),
    ],
)
def test_engine_args_errors(capsys, engine, message):
    code, out, err = run(capsys, "replay", TRACE, "--extra-engine-args", engine)
    assert code == 2 and message in err


def test_trace_errors_exit_2(capsys, tmp_path):
    code, out, err = run(capsys, "replay", str(tmp_path / "missing.jsonl"))
    assert code == 2 and "does not exist" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"timestamp": 0, "output_length": 1, "hash_ids": [1]}) + "\n{oops\n")
    code, out, err = run(capsys, "replay", str(bad))
    assert code == 2 and re.search(r"bad\.jsonl:2: malformed JSON", err)
    code, out, err = run(capsys, "replay", str(bad), "--trace-block-size", "0")
    assert code == 2 and "trace_block_size must be greater than 0" in err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--num-workers", "0"], "num_workers >= 1"),
        (["--replay-concurrency", "0"], "replay_concurrency must be at least 1"),
        (["--arrival-speedup-ratio", "0"], "arrival_speedup_ratio must be a finite positive number"),
        (["--sla-ttft-ms", "-1"], "sla_ttft_ms must be a finite, non-negative value"),
        (["--max-sim-time-seconds", "-1"], "max_sim_time_ms must be a finite, non-negative value"),
    ],
)
def test_api_validation_through_cli(capsys, extra, message):
    code, out, err = run(capsys, "replay", TRACE, *extra)
    assert code == 2 and message in err


def test_synthetic_validation_through_cli(capsys):
    code, out, err = run(capsys, "replay", "--input-tokens", "0", "--output-tokens", "2",
                         "--request-count", "3", "--arrival-interval-ms", "1")
    assert code == 2 and "input_tokens must be at least 1" in err


def test_python_dash_m_no_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "fastsim", "replay", TRACE, "--extra-engine-args", '{"watermark": 1}'],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert "unknown field 'watermark'" in proc.stderr and "Traceback" not in proc.stderr
    assert not list(tmp_path.iterdir())  # nothing written on error


def test_report_path_resolution(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_report_path(None) is None  # no report file unless asked for
    d = tmp_path / "reports"
    d.mkdir()
    q = resolve_report_path(str(d))
    assert q.parent == d and re.fullmatch(r"fastsim_replay_report_\d{8}_\d{6}\.json", q.name)
    assert resolve_report_path(str(tmp_path / "r.json")) == tmp_path / "r.json"


# ------------------------------------------------------------------ Python API: validation before simulation
from fastsim.api import run_synthetic_trace_replay, run_trace_replay  # noqa: E402
from fastsim.errors import FastsimError, InputError, NotSupportedError  # noqa: E402


@pytest.mark.parametrize(
    "kw, exc, pattern",
    [
        (dict(replay_mode="online"), NotSupportedError, "replay_mode 'online' is not supported yet"),
        (dict(replay_mode="fast"), InputError, "replay_mode must be either 'offline' or 'online'"),
        (dict(router_mode="kv_router", dynamo_version="1.4.2"), InputError,
         "kv_router with more than one worker/DP-rank target"),
        (dict(router_mode="random"), InputError, "router_mode must be either"),
        (dict(prefill_engine_args={}), InputError, "decode_engine_args is missing"),
        (dict(prefill_engine_args={"worker_type": "prefill"}, decode_engine_args={"worker_type": "decode", "block_size": 16}),
         InputError, "same block_size"),
        (dict(prefill_engine_args={"worker_type": "decode"}, decode_engine_args={"worker_type": "decode"}),
         InputError, "worker_type must be 'prefill'"),
        (dict(prefill_engine_args={"worker_type": "prefill", "dp_size": 2}, decode_engine_args={"worker_type": "decode"}),
         InputError, "dp_size 2 is not allowed"),
        (dict(router_config={"router_temprature": 1.0}), InputError, "did you mean 'router_temperature'"),
        (dict(router_config={"router_queue_policy": "sjf"}), InputError, "allowed: 'fcfs', 'lcfs', 'wspt'"),
        (dict(router_config={"router_prefill_load_model": "aic"}), NotSupportedError, "router_prefill_load_model"),
        (dict(aic_perf_config=object()), NotSupportedError, "aic_perf_config"),
        (dict(planner_config={}), NotSupportedError, "planner_config"),
        (dict(model_name="m"), NotSupportedError, "model_name"),
        (dict(num_prefill_workers=2), InputError, "only used for disagg replay"),
        (dict(num_workers=0), InputError, "num_workers >= 1"),
        (dict(replay_concurrency=0), InputError, "replay_concurrency must be at least 1"),
        (dict(sla_itl_ms=float("nan")), InputError, "sla_itl_ms must be a finite, non-negative value"),
        (dict(extra_engine_args={"worker_type": "decode"}), InputError, "only supports aggregated workers"),
        (dict(extra_engine_args={"watermark": 0.01}), InputError, "extra_engine_args: unknown field 'watermark'"),
        (dict(trace_shared_prefix_ratio=0.5), NotSupportedError, "applied_compute_agentic"),
        (dict(trace_format="weka", execution_model="m"), InputError, "field 'id' must be a string"),
        (dict(trace_format="dynamo"), InputError, "field 'event_type' must be request_end"),
        (dict(trace_block_size=0), InputError, "trace_block_size must be greater than 0"),
        (dict(arrival_speedup_ratio=-1.0), InputError, "arrival_speedup_ratio must be a finite positive"),
        (dict(trace_blocksize=16), InputError, "unexpected keyword argument 'trace_blocksize'; did you mean 'trace_block_size'"),
    ],
)
def test_run_trace_replay_validation(kw, exc, pattern):
    with pytest.raises(exc, match=pattern) as ei:
        run_trace_replay(TRACE, **kw)
    assert isinstance(ei.value, FastsimError)


def test_run_trace_replay_files():
    with pytest.raises(InputError, match="requires at least one trace file"):
        run_trace_replay([])
    with pytest.raises(InputError, match="requires exactly one trace file, got 2"):
        run_trace_replay([TRACE, TRACE])


def test_run_synthetic_trace_replay_validation():
    with pytest.raises(InputError, match="exactly one of replay_concurrency, request_rate, or arrival_interval_ms"):
        run_synthetic_trace_replay(16, 2, 3)
    with pytest.raises(InputError, match="request_count must be at least 1"):
        run_synthetic_trace_replay(16, 2, 0, arrival_interval_ms=1.0)
    with pytest.raises(InputError, match="kv_router with more than one worker"):
        run_synthetic_trace_replay(16, 2, 3, arrival_interval_ms=1.0, router_mode="kv_router", dynamo_version="1.4.2")
    with pytest.raises(InputError, match="did you mean 'arrival_interval_ms'"):
        run_synthetic_trace_replay(16, 2, 3, arrival_interval=1.0)


def test_compile_notice_only_when_compiling():
    """The Python API announces a compile only on a cold cache (it once announced one on every
    run when fastsim.kernels had not been imported yet)."""
    import subprocess
    import sys

    code = "from fastsim.sim import load_kernels; load_kernels()"
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)  # warms the cache
    again = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert "compiling" not in again.stderr


@pytest.mark.parametrize("enabled", [True, False])
def test_replay_runs_without_the_cycle_collector_and_restores_it(monkeypatch, tmp_path, capsys, enabled):
    """``replay`` turns the cycle collector off while it runs (one simulation frees its garbage by
    reference counting) and leaves it as it found it, also when the command fails."""
    import gc

    import fastsim.api as api

    seen = []
    real = api.run_trace_replay

    def spy(*a, **k):
        seen.append(gc.isenabled())
        return real(*a, **k)

    monkeypatch.setattr(api, "run_trace_replay", spy)
    (gc.enable if enabled else gc.disable)()
    try:
        code, _, _ = run(capsys, "replay", TRACE, "--report-json", str(tmp_path / "r.json"))
        assert code == 0 and seen == [False]
        assert gc.isenabled() is enabled
        code, _, _ = run(capsys, "replay", str(tmp_path / "missing.jsonl"))
        assert code == 2 and gc.isenabled() is enabled
    finally:
        gc.enable()
