"""``fastsim predict`` on AISimulate's prediction configs (fastsim/predict.py).

The configs are the ones Dynamo 1.6.1 ships (``data/aisimulate/``). A config fastsim runs must give
the same report as the equivalent ``run_*_replay`` call; one it does not model must be refused
with the section and key named.
"""

import json
import shutil
from pathlib import Path

import pytest

import fastsim
from fastsim.cli import main
from fastsim.errors import InputError, NotSupportedError
from fastsim.predict import compile_prediction, load_config

DATA = Path(__file__).parent / "data" / "aisimulate"
CONFIGS = DATA / "predict"
# Where Dynamo's repository keeps the fixtures the configs name.
FIXTURE_ROOT = Path("components/src/dynamo/replay/tests/e2e/configs/unified_cli/fixtures")
FIXED_1MS = {"type": "fixed", "prefill_ms": 1.0, "decode_ms": 1.0}


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A directory laid out like Dynamo's repository root for the fixtures; the cwd of the test."""
    shutil.copytree(DATA / "fixtures", tmp_path / FIXTURE_ROOT)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def engine(**over):
    base = {"block_size": 64, "enable_prefix_caching": True, "num_gpu_blocks": 256,
            "max_num_batched_tokens": 8192, "max_num_seqs": 256, "max_model_len": 2048,
            "timing_model": FIXED_1MS}
    base.update(over)
    return {"engine": base, "dp_size": 1, "startup_time": 0.0}  # Dynamo 1.6's nested form


def no_wall(summary):
    return {k: v for k, v in summary.items() if "wall" not in k and "per_s" not in k}


EQUIVALENT = {
    "01-synthetic-no-adapters.yaml": lambda: fastsim.run_synthetic_trace_replay(
        32, 4, 6, replay_concurrency=2, extra_engine_args=engine()),
    "02-synthetic-kv-router.yaml": lambda: fastsim.run_synthetic_trace_replay(
        32, 4, 6, arrival_interval_ms=50.0, num_workers=2, router_mode="kv_router",
        router_config={"overlap_score_credit": 1.0, "prefill_load_scale": 1.0, "router_temperature": 0.0},
        extra_engine_args=engine()),
    "09-trace-mooncake-speedup.yaml": lambda: fastsim.run_trace_replay(
        str(FIXTURE_ROOT / "traces" / "mooncake.jsonl"), trace_block_size=512, arrival_speedup_ratio=2.0,
        max_sim_time_ms=1000.0, extra_engine_args=engine()),
}


@pytest.mark.parametrize("name", sorted(EQUIVALENT))
def test_runnable_examples_equal_the_replay_they_describe(repo, capsys, name):
    out_dir = repo / "out"
    code, out, err = run(capsys, "predict", "--stack", "dynamo", "--config", str(CONFIGS / name),
                         "--output-dir", str(out_dir), "--format", "json")
    assert code == 0, err
    stdout_summary = json.loads(out)
    prediction = json.loads((out_dir / "prediction.json").read_text())
    assert sorted(prediction) == ["coverage", "per_request", "planner", "summary"]
    assert prediction["per_request"] is None and prediction["planner"] is None
    assert prediction["coverage"] == {"capture_per_request": False, "capture_planner_details": False,
                                      "per_request_records": 0}
    assert prediction["summary"]["completed_requests"] == stdout_summary["completed_requests"] > 0
    expected = EQUIVALENT[name]().summary
    assert no_wall(prediction["summary"]) == no_wall(expected)
    if name.startswith("09"):
        assert stdout_summary["completed_requests"] == 2  # as Dynamo's end-to-end test expects
    if name.startswith("02"):
        assert prediction["summary"]["num_requests"] == 6


def test_capture_per_request_table_output_and_overwrite(repo, capsys):
    cfg = str(CONFIGS / "01-synthetic-no-adapters.yaml")
    code, out, err = run(capsys, "predict", "-c", cfg, "--output-dir", "o", "--capture-per-request")
    assert code == 0, err
    assert "Saved full report to: o/prediction.json" in out and "AIPerf" in out
    prediction = json.loads(Path("o/prediction.json").read_text())
    lines = Path("o/requests.jsonl").read_text().splitlines()
    assert len(prediction["per_request"]) == len(lines) == 6
    assert prediction["coverage"] == {"capture_per_request": True, "capture_planner_details": False,
                                      "per_request_records": 6}
    assert [json.loads(x) for x in lines] == prediction["per_request"]
    # a non-empty output directory needs --overwrite, which replaces only predict's own files
    code, out, err = run(capsys, "predict", "-c", cfg, "--output-dir", "o")
    assert code == 2 and "is not empty; pass --overwrite" in err
    Path("o/keep.txt").write_text("mine")
    code, out, err = run(capsys, "predict", "-c", cfg, "--output-dir", "o", "--overwrite")
    assert code == 0 and not Path("o/requests.jsonl").exists() and Path("o/keep.txt").exists()


def test_set_overrides_a_value(repo, capsys):
    cfg = str(CONFIGS / "01-synthetic-no-adapters.yaml")
    code, out, err = run(capsys, "predict", "-c", cfg, "--output-dir", "o", "--format", "json",
                         "--set", "traffic.stop.requests=9",
                         "--set", "engine.workers.aggregated.timing={type: fixed, prefill_ms: 3, decode_ms: 2}")
    assert code == 0, err
    summary = json.loads(out)
    expected = fastsim.run_synthetic_trace_replay(
        32, 4, 9, replay_concurrency=2,
        extra_engine_args=engine(timing_model={"type": "fixed", "prefill_ms": 3, "decode_ms": 2})).summary
    assert no_wall(summary) == no_wall(expected) and summary["num_requests"] == 9


@pytest.mark.parametrize(
    "name, words",
    [
        ("03-synthetic-default-planner.yaml", "planner.policy: planner: {policy: enabled}"),
        ("04-synthetic-router-planner.yaml", "planner.policy"),
        ("05-trace-standard-round-robin.yaml", "traffic.source.format: trace format 'dynamo'"),
        ("06-synthetic-disagg-router-planner.yaml", "engine.mode: engine.mode 'disaggregated'"),
        ("07-synthetic-ais-router.yaml", "router.prefill_load_model.type: prefill_load_model type 'ais'"),
        ("08-synthetic-throughput-planner.yaml", "planner.policy"),
        ("10-trace-mooncake-delta-concurrency.yaml", "trace format 'mooncake-delta'"),
        ("11-trace-agentic-mooncake.yaml", "trace format 'agentic_mooncake'"),
        ("12-trace-applied-compute-agentic.yaml", "trace format 'applied_compute_agentic'"),
        ("13-trace-dynamo-agentic.yaml", "trace format 'dynamo'"),
    ],
)
def test_examples_fastsim_does_not_model_are_refused(repo, capsys, name, words):
    cfg = str(CONFIGS / name)
    code, out, err = run(capsys, "predict", "--stack", "dynamo", "-c", cfg, "--output-dir", "o")
    assert code == 2 and words in err and "not supported yet" in err and err.count("\n") <= 2
    assert err.startswith(f"fastsim predict: error: {cfg}: ")
    assert not Path("o").exists()  # refused before anything is written


def base_config():
    return load_config(CONFIGS / "01-synthetic-no-adapters.yaml")


def with_(path, value, data=None):
    data = data or base_config()
    node = data
    parts = path.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    if value is _DELETE:
        del node[parts[-1]]
    else:
        node[parts[-1]] = value
    return data


_DELETE = object()


@pytest.mark.parametrize(
    "path, value, error, words",
    [
        ("optimization", {}, InputError, "predict does not accept ['optimization']"),
        ("telemetry", {"x": 1}, NotSupportedError, "section 'telemetry' is not supported by fastsim predict"),
        ("engine", _DELETE, InputError, "engine: section is required"),
        ("engine.model", _DELETE, InputError, "engine.model: must be a nonempty string"),
        ("engine.hardware", "auto", InputError, "recommendation-only"),
        ("engine.bogus", 1, InputError, "engine: unknown key 'bogus'"),
        ("engine.backend", "sglang", NotSupportedError, "engine.backend 'sglang'"),
        ("engine.context_length", 0, InputError, "engine.context_length: must be an integer >= 1"),
        ("engine.workers.aggregated.kv_cache.capacity", {"type": "default"}, NotSupportedError,
         "engine.workers.aggregated.kv_cache.capacity.type: KV capacity type 'default'"),
        ("engine.workers.aggregated.kv_cache.capacity", {"type": "fixed"}, InputError, "requires blocks"),
        ("engine.workers.aggregated.kv_cache.block_size", 1, InputError, "block_size must be >= 2"),
        ("engine.workers.aggregated.timing", {"type": "default"}, NotSupportedError, "AIC op-level timing"),
        ("engine.workers.aggregated.timing", {"type": "fixed", "prefill_ms": 1}, InputError,
         "fixed timing requires prefill_ms and decode_ms"),
        ("engine.workers.aggregated.timing", {"type": "polynomial", "decode_ms": 1}, InputError,
         "polynomial timing rejects fixed timing values"),
        ("engine.workers.aggregated.scheduler.max_sequences", 0, InputError,
         "engine.workers.aggregated.scheduler.max_sequences: must be an integer >= 1"),
        ("engine.workers.prefill", {}, InputError, "aggregated mode rejects prefill/decode workers"),
        ("engine.kv_transfer", {}, InputError, "aggregated mode rejects kv_transfer"),
        ("traffic.source.images", {"height": 1, "width": 1}, NotSupportedError, "multimodal"),
        ("traffic.source.type", "bogus", InputError, "traffic.source.type: type must be one of"),
        ("traffic.load", {"type": "poisson"}, InputError, "poisson synthetic traffic requires requests_per_second"),
        ("traffic.load", {"type": "concurrency", "speedup": 2.0}, InputError, "does not accept ['speedup']"),
        ("traffic.load", {"type": "trace_timestamps"}, InputError, "synthetic traffic does not accept trace_timestamps"),
        ("traffic.load", {"type": "constant_rate", "sessions_per_second": 1.0}, InputError, "rate unit does not match"),
        ("traffic.stop", None, InputError, "synthetic traffic requires a stop condition"),
        ("traffic.stop", {"requests": 3, "sessions": 2}, InputError, "requires exactly one of requests"),
        ("traffic.stop", {"max_virtual_time_seconds": 1.0}, InputError, "max_virtual_time_seconds is trace-only"),
        ("router", {"policy": "round_robin", "temperature": 0.5}, InputError, "round_robin requires"),
        ("router", {"policy": "kv_router", "temperature": None}, InputError, "do not accept null"),
        ("router", {"policy": "random"}, InputError, "router.policy: must be one of"),
        ("planner", {"policy": "disabled", "target": "load"}, InputError, "only applies with policy: enabled"),
        ("evaluation.sla", {"ttft_ms": 1.0, "e2e_ms": 2.0}, InputError, "mutually exclusive"),
        ("evaluation.sla", {"ttft_ms": 0}, InputError, "evaluation.sla.ttft_ms: must be a finite number > 0"),
    ],
)
def test_config_errors_name_the_key(path, value, error, words):
    with pytest.raises(error) as ei:
        compile_prediction(with_(path, value), source="c.yaml")
    assert words in str(ei.value) and str(ei.value).startswith("c.yaml: ")


def test_compiled_plans():
    # synthetic-session with a relative stop and Poisson load; SLA; kv_router defaults
    data = load_config(CONFIGS / "04-synthetic-router-planner.yaml")
    data["planner"] = {"policy": "disabled"}
    data["traffic"]["load"] = {"type": "poisson", "sessions_per_second": 4.0}
    data["traffic"]["stop"] = {"sessions_per_load_unit": 1.6}
    data["router"] = {"policy": "kv_router"}
    data["evaluation"] = {"sla": {"ttft_ms": 50.0, "itl_ms": 5.0}}
    plan = compile_prediction(data)
    assert plan.trace is None and plan.args == (16, 4, 6)  # round(1.6 * 4) sessions
    kw = plan.kwargs
    assert (kw["turns_per_session"], kw["shared_prefix_ratio"], kw["num_prefix_groups"],
            kw["inter_turn_delay_ms"]) == (3, 0.5, 2, 5.0)
    assert kw["request_rate"] == 4.0 and kw["arrival_seed"] == 42 and kw["num_workers"] == 2
    assert kw["router_mode"] == "kv_router" and kw["router_config"] == {
        "overlap_score_credit": 1.0, "prefill_load_scale": 1.0, "router_temperature": 0.0}
    assert (kw["sla_ttft_ms"], kw["sla_itl_ms"]) == (50.0, 5.0)
    # no traffic section: AISimulate's default (1024/128, concurrency 10, 100 requests)
    data = base_config()
    del data["traffic"]
    plan = compile_prediction(data)
    assert plan.args == (1024, 128, 100) and plan.kwargs["replay_concurrency"] == 10
    # trace with concurrency load; attention_data is dp_size
    data = load_config(CONFIGS / "10-trace-mooncake-delta-concurrency.yaml")
    data["traffic"]["source"]["format"] = "mooncake"
    data["engine"]["workers"]["aggregated"]["parallelism"]["attention_data"] = 2
    plan = compile_prediction(data)
    assert plan.kwargs["replay_concurrency"] == 1 and plan.kwargs["max_sim_time_ms"] == 1000.0
    assert plan.kwargs["extra_engine_args"]["dp_size"] == 2


def test_context_length_max_reads_the_models_config(repo):
    data = with_("engine.context_length", "max")
    plan = compile_prediction(data)
    assert plan.kwargs["extra_engine_args"]["max_model_len"] == 2048  # tiny-model's max_position_embeddings
    data["engine"]["model"] = "no/such/model"
    with pytest.raises(NotSupportedError, match="'max' needs the model's max_position_embeddings"):
        compile_prediction(data)


def test_bad_files(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("traffic: [1, 2\n")
    code, out, err = run(capsys, "predict", "-c", str(bad), "--output-dir", str(tmp_path / "o"))
    assert code == 2 and "malformed YAML" in err
    bad.write_text("- 1\n")
    code, out, err = run(capsys, "predict", "-c", str(bad), "--output-dir", str(tmp_path / "o"))
    assert code == 2 and "must contain one YAML mapping" in err
    code, out, err = run(capsys, "predict", "-c", str(tmp_path / "none.yaml"), "--output-dir", str(tmp_path / "o"))
    assert code == 2 and "could not read configuration" in err
    code, out, err = run(capsys, "predict", "-c", str(CONFIGS / "01-synthetic-no-adapters.yaml"),
                         "--output-dir", str(tmp_path / "o"), "--set", "traffic")
    assert code == 2 and "expected PATH=YAML_VALUE" in err


def test_predict_as_a_dynamo_user_runs_it(repo):
    # `aisimulate predict --stack dynamo --config X --output-dir D --format json`, renamed
    import subprocess
    import sys

    cfg = CONFIGS / "09-trace-mooncake-speedup.yaml"
    proc = subprocess.run([sys.executable, "-m", "fastsim", "predict", "--stack", "dynamo", "--config", str(cfg),
                           "--output-dir", "D", "--format", "json"], capture_output=True, text=True, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary == json.loads((repo / "D" / "prediction.json").read_text())["summary"]
    assert summary["completed_requests"] == 2
    proc = subprocess.run([sys.executable, "-m", "fastsim", "predict", "--config",
                           str(CONFIGS / "03-synthetic-default-planner.yaml"), "--output-dir", "E"],
                          capture_output=True, text=True, cwd=repo)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "planner" in proc.stderr
