"""The TRT-LLM engine (engine_type trtllm, capacity policy guaranteed_no_evict) against Dynamo 1.6.1.

Cases in tests/data/trtllm_161 (cases.tsv, recorded by record.py there with Dynamo 1.6.1): every report
field within 1e-9 and every request's admission, first and last token times, output length and reused
tokens to the ns.
"""

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from fastsim.api import run_synthetic_trace_replay, run_trace_replay
from fastsim.config import EngineArgs
from fastsim.errors import InputError

DATA = Path(__file__).parent / "data" / "trtllm_161"
CASES = [line.split("\t") for line in (DATA / "cases.tsv").read_text().splitlines() if line.strip()]
SKIP = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}
INT_KW = ("num_workers", "input_tokens", "output_tokens", "request_count", "trace_block_size",
          "turns_per_session", "num_prefix_groups", "arrival_seed", "num_prefill_workers", "num_decode_workers",
          "replay_concurrency")
FLOAT_KW = ("arrival_interval_ms", "inter_turn_delay_ms", "shared_prefix_ratio", "request_rate")


def _run(args, **extra):
    """Run the case's replay flags through fastsim's API."""
    a = args.split()
    kw, trace = {}, None
    i = 0
    while i < len(a):
        if not a[i].startswith("--"):
            trace = str(DATA / a[i])
            i += 1
            continue
        key, val = a[i][2:].replace("-", "_"), a[i + 1]
        kw[key] = json.loads(val) if key.endswith("engine_args") else val
        i += 2
    for k in INT_KW:
        if k in kw:
            kw[k] = int(kw[k])
    for k in FLOAT_KW:
        if k in kw:
            kw[k] = float(kw[k])
    kw.update(extra)
    if trace is not None:
        return run_trace_replay(trace, **kw)
    return run_synthetic_trace_replay(kw.pop("input_tokens"), kw.pop("output_tokens"), kw.pop("request_count"), **kw)


@pytest.mark.parametrize("name,args", CASES, ids=[c[0] for c in CASES])
def test_case_matches_dynamo_161(name, args):
    rep = _run(args)
    ref = json.loads((DATA / f"{name}.json").read_text())
    for k, v in ref.items():
        if k in SKIP or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        assert rep.summary[k] == pytest.approx(v, rel=1e-9, abs=1e-9), k
    rows = [json.loads(line) for line in gzip.open(DATA / f"{name}.per_request.jsonl.gz", "rt")]
    mine = rep.requests
    order_ref = sorted(range(len(rows)), key=lambda i: (rows[i]["arrival_time_ms"], rows[i]["input_length"],
                                                        rows[i]["requested_output_length"], i))
    arr = mine["arrival_time_ms"].to_numpy()
    order_mine = sorted(range(len(mine)), key=lambda i: (arr[i], int(mine["input_length"].iloc[i]),
                                                         int(mine["requested_output_length"].iloc[i]), i))
    for col in ("first_admit_ms", "first_token_ms", "last_token_ms", "output_length", "reused_input_tokens"):
        got = mine[col].to_numpy()[order_mine].astype(float)
        want = np.array([np.nan if rows[i][col] is None else rows[i][col] for i in order_ref], dtype=float)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6, err_msg=col)


def test_config_forms():
    e = EngineArgs.from_json('{"engine":{"backend":"trtllm","trtllm":{"capacity_scheduler_policy":"guaranteed_no_evict"}}}')
    assert (e.engine_type, e.block_size) == ("trtllm", 32)
    e = EngineArgs.from_json('{"engine_type":"trtllm","num_gpu_blocks":512}')
    assert (e.engine_type, e.block_size, e.num_gpu_blocks) == ("trtllm", 32, 512)
    # Dynamo accepts the trtllm object on another backend and ignores it
    assert EngineArgs.from_json('{"engine":{"trtllm":{}}}').engine_type == "vllm"


@pytest.mark.parametrize("text,err", [
    ('{"engine":{"backend":"trtllm","trtllm":{"capacity_scheduler_policy":"max_utilization"}}}',
     "engine.trtllm.capacity_scheduler_policy' must be 'guaranteed_no_evict'"),
    ('{"engine_type":"trtllm","trtllm":{"capacity_scheduler_policy":"max_utilization"}}',
     "trtllm.capacity_scheduler_policy' must be 'guaranteed_no_evict'"),
    ('{"engine":{"backend":"trtllm","trtllm":{"policy":"x"}}}', "unknown field 'engine.trtllm.policy'"),
    ('{"engine_type":"trtllm","trtllm":{"policy":"x"}}', "unknown field 'trtllm.policy'"),
    ('{"engine":{"backend":"trtllm","block_size":1}}', "at least 2"),
    ('{"engine_type":"trtllm","trtllm":7}', "'trtllm' must be an object"),
])
def test_bad_settings(text, err):
    with pytest.raises(InputError, match=err.replace("(", r"\(").replace(")", r"\)")):
        EngineArgs.from_json(text)


CASES_142 = [line.split("\t") for line in (DATA.parent / "trtllm_142" / "cases.tsv").read_text().splitlines()
             if line.strip()]


@pytest.mark.parametrize("name,args", CASES_142, ids=[c[0] for c in CASES_142])
def test_case_matches_dynamo_142(name, args):
    """Dynamo 1.4.2 runs the same TRT-LLM engine: its reports, recorded in tests/data/trtllm_142."""
    rep = _run(args.replace("../trtllm_161/", ""), dynamo_version="1.4.2")
    ref = json.loads((DATA.parent / "trtllm_142" / f"{name}.json").read_text())
    for k, v in ref.items():
        if k in SKIP or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        assert rep.summary[k] == pytest.approx(v, rel=1e-9, abs=1e-9), k


def test_dynamo_142_refuses_max_model_len_on_trtllm():
    with pytest.raises(InputError, match="max_model_len' is supported only for engine_type=vllm"):
        run_synthetic_trace_replay(100, 4, 2, arrival_interval_ms=1.0, dynamo_version="1.4.2",
                                   extra_engine_args={"engine_type": "trtllm", "max_model_len": 500})


# ----------------------------------------------------------------------------- against the naive engine
# The compiled pass keeps each rank's reservation incrementally (kernels/trtllm.py); the naive
# engine (tests/naive_engine.py) sums every running request's remaining reservation at each
# admission. Random small traces with tiny pools, shared prefixes and small budgets, under Dynamo
# 1.4.2's timing rules (the naive engine's), which run the same TRT-LLM engine.
@pytest.mark.parametrize("seed", range(150))
def test_compiled_engine_equals_naive_engine(seed, tmp_path):
    from test_engine_vs_naive import diff, random_case, run_fastsim, run_naive

    rows, tbs, engine = random_case(seed)
    engine.pop("max_model_len", None)  # Dynamo 1.4.2 refuses it on trtllm
    engine["engine_type"] = "trtllm"
    if engine["block_size"] < 2:
        engine["block_size"] = 2
    d = diff(run_naive(rows, tbs, engine), run_fastsim(rows, tbs, engine, tmp_path))
    assert d is None, f"seed {seed} engine {engine} tbs {tbs}: row {d[0]} {d[1]}: naive {d[2]!r} fastsim {d[3]!r}"


def test_disaggregated_forms():
    assert EngineArgs.from_json('{"engine_type":"trtllm","is_prefill":true}').worker_type == "prefill"
    assert EngineArgs.from_json('{"engine":{"backend":"trtllm","worker_type":"decode"}}').worker_type == "decode"


@pytest.mark.parametrize("text,err", [
    ('{"engine":{"backend":"trtllm","prefill_schedule_interval":2}}', "supported only for backend=vllm"),
    ('{"engine":{"backend":"trtllm","prefill_decode_interval":2}}', "supported only for backend=sglang"),
])
def test_other_engines_knobs_are_refused(text, err):
    with pytest.raises(InputError, match=err):
        EngineArgs.from_json(text)


def test_dynamo_142_refuses_disaggregated_trtllm():
    with pytest.raises(InputError, match="disaggregated serving does not support engine_type=trtllm"):
        run_synthetic_trace_replay(100, 4, 2, arrival_interval_ms=1.0, dynamo_version="1.4.2",
                                   num_prefill_workers=1, num_decode_workers=1,
                                   prefill_engine_args={"engine_type": "trtllm", "is_prefill": True},
                                   decode_engine_args={"engine_type": "trtllm", "is_decode": True})
