"""The TRT-LLM engine (engine_type trtllm, capacity policy guaranteed_no_evict) against Dynamo 1.6.1.

Cases in tests/data/trtllm_161 (cases.tsv, recorded by tests/data/record_tsv.py with Dynamo 1.6.1): every report
field within 1e-9 and every request's admission, first and last token times, output length and reused
tokens to the ns.
"""

import json
from pathlib import Path

import pytest

import recorded
from fastsim.api import run_synthetic_trace_replay
from fastsim.config import EngineArgs
from fastsim.errors import InputError

DATA = Path(__file__).parent / "data" / "trtllm_161"
CASES = recorded.cases(DATA)


@pytest.mark.parametrize("name,args", CASES, ids=[c[0] for c in CASES])
def test_case_matches_dynamo_161(name, args):
    rep = recorded.replay(args, DATA)
    recorded.assert_summary_matches(rep.summary, json.loads((DATA / f"{name}.json").read_text()))
    recorded.assert_timelines_match(rep.requests, recorded.per_request(DATA, name),
                                    ("first_admit_ms", "first_token_ms", "last_token_ms", "output_length",
                                     "reused_input_tokens"))


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


CASES_142 = recorded.cases(DATA.parent / "trtllm_142")


@pytest.mark.parametrize("name,args", CASES_142, ids=[c[0] for c in CASES_142])
def test_case_matches_dynamo_142(name, args):
    """Dynamo 1.4.2 runs the same TRT-LLM engine: its reports, recorded in tests/data/trtllm_142."""
    rep = recorded.replay(args.replace("../trtllm_161/", ""), DATA, dynamo_version="1.4.2")
    recorded.assert_summary_matches(rep.summary, json.loads((DATA.parent / "trtllm_142" / f"{name}.json").read_text()))


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
