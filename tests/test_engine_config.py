"""Dynamo 1.6's nested engine config read into EngineArgs (fastsim/engine_config.py).

The field lists and error cases come from Dynamo 1.6.1 (``_normalize_mocker_config`` and its
error messages); ``data/engine_config/normalized_161.json`` holds three of its normalised outputs.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from fastsim.config import EngineArgs
from fastsim.engine_config import DYNAMO_FIELDS, ENGINE_FIELDS, TOP_LEVEL_FIELDS
from fastsim.errors import InputError, NotSupportedError
from fastsim.perf import FIXED, POLYNOMIAL, engine_perf_model

DATA = Path(__file__).parent / "data"
NORMALIZED = json.loads((DATA / "engine_config" / "normalized_161.json").read_text())

# Dynamo 1.6.1's "unknown field `bogus`, expected one of ..." lists, per section.
DYNAMO_ENGINE_FIELDS = (
    "backend num_gpu_blocks block_size max_model_len max_num_seqs max_num_batched_tokens "
    "prefill_schedule_interval prefill_decode_interval enable_prefix_caching enable_chunked_prefill "
    "speedup_ratio decode_speedup_ratio aic_nextn aic_nextn_accept_rates aic_mtp_seed worker_type "
    "preemption_mode emit_kv_events emit_kv_token_ids kv_bytes_per_token kv_transfer_bytes_per_token "
    "kv_cache_bytes_per_token kv_cache_groups kv_cache_capacity_bytes native_host_offload state_cache "
    "prefix_match_unit g3_offload kv_transfer_bandwidth kv_transfer_timing_mode timing_model sglang trtllm"
).split()
DYNAMO_TOP_FIELDS = (
    "engine dp_size tensor_parallel_size startup_time num_gpu_blocks_is_explicit gpu_memory_utilization "
    "mem_fraction_static free_gpu_memory_fraction cuda_graph_reserved_bytes"
).split()
DYNAMO_RUNTIME_FIELDS = (
    "enable_local_indexer bootstrap_port handoff_session_timeout_ms reasoning response_replay_trace_path "
    "zmq_kv_events_port zmq_replay_port router_queue_policy"
).split()


def parse(obj):
    return EngineArgs.from_json(json.dumps(obj))


def test_field_lists_are_dynamo_161s():
    assert list(ENGINE_FIELDS) == DYNAMO_ENGINE_FIELDS
    assert set(TOP_LEVEL_FIELDS) == set(DYNAMO_TOP_FIELDS) | {"dynamo"}
    assert list(DYNAMO_FIELDS) == DYNAMO_RUNTIME_FIELDS


def test_dynamo_normalized_defaults_are_fastsims_defaults():
    case = NORMALIZED["defaults"]
    assert parse(case["normalized"]) == EngineArgs()
    assert parse({"engine": {}}) == EngineArgs() == parse({"dynamo": {}})


def test_nested_equals_flat():
    case = NORMALIZED["tuned"]
    flat = dict(
        block_size=16, num_gpu_blocks=512, max_num_seqs=64, max_num_batched_tokens=2048,
        enable_prefix_caching=False, enable_chunked_prefill=False, speedup_ratio=2.0,
        decode_speedup_ratio=1.5, preemption_mode="fifo", max_model_len=4096, kv_bytes_per_token=1000,
        kv_transfer_bandwidth=64.0, dp_size=2, startup_time=5.0, router_queue_policy="lcfs",
        enable_local_indexer=True,
        reasoning={"start_thinking_token_id": 1, "end_thinking_token_id": 2, "thinking_ratio": 0.5},
    )
    expected = parse(flat)
    assert parse(case["input"]) == expected
    assert parse(case["normalized"]) == expected  # Dynamo's own normalised form too
    assert expected.block_size == 16 and expected.dp_size == 2 and expected.preemption_mode == "fifo"


def test_timing_models():
    fixed = parse(NORMALIZED["fixed_timing"]["normalized"])
    assert fixed.timing_model == {"type": "fixed", "prefill_ms": 25.0, "decode_ms": 8.0}
    perf = engine_perf_model(fixed)
    assert perf.kind == FIXED and perf.prefill_y[0] == 25.0 and perf.decode_z[0, 0] == 8.0
    assert parse({"timing_model": {"type": "fixed", "prefill_ms": 25, "decode_ms": 8}}) == fixed  # flat
    poly = parse({"engine": {"timing_model": {"type": "polynomial"}}})
    assert poly == EngineArgs() and engine_perf_model(poly).kind == POLYNOMIAL


def test_external_dynamo_profile_is_planner_profile_data(tmp_path):
    npz = tmp_path / "p.npz"
    np.savez(npz, prefill_isl=np.array([1.0, 2.0]), prefill_ttft_ms=np.array([1.0, 2.0]),
             decode_active_kv_tokens=np.array([1.0, 2.0]), decode_context_length=np.array([1.0, 2.0]),
             decode_itl=np.ones((2, 2)))
    tm = {"type": "external", "provider": "dynamo_profile", "config": {"path": str(npz)}}
    nested = parse({"engine": {"timing_model": tm}})
    assert nested == parse({"planner_profile_data": str(npz)})
    assert nested.planner_profile_data == str(npz) and nested.timing_model is None
    assert parse({"timing_model": tm}) == nested
    with pytest.raises(InputError, match="choose one timing provider"):
        parse({"timing_model": tm, "planner_profile_data": str(npz)})


@pytest.mark.parametrize(
    "obj, pattern",
    [
        # misplaced: where it belongs
        ({"engine": {}, "block_size": 64}, r"field 'block_size' belongs under engine \(engine.block_size\), not the top level"),
        ({"engine": {"dp_size": 2}}, r"field 'engine.dp_size' belongs at the top level, not engine"),
        ({"engine": {"reasoning": None}}, r"field 'engine.reasoning' belongs under dynamo \(dynamo.reasoning\)"),
        ({"dynamo": {"block_size": 3}}, r"field 'dynamo.block_size' belongs under engine"),
        ({"dynamo": {"startup_time": 3}}, r"field 'dynamo.startup_time' belongs at the top level"),
        ({"engine": {}, "router_queue_policy": "fcfs"}, r"'router_queue_policy' belongs under dynamo"),
        # flat 1.4.2 names inside a nested config
        ({"engine": {"engine_type": "vllm"}}, r"'engine.engine_type' is a Dynamo 1.4.2 flat name; .* engine.backend"),
        ({"engine": {}, "planner_profile_data": "x.npz"}, r"'planner_profile_data' is a Dynamo 1.4.2 flat name.*dynamo_profile"),
        ({"engine": {"is_prefill": True}}, r"engine.worker_type = prefill"),
        ({"engine": {"g1_backend": "native"}}, r"no place in Dynamo 1.6's nested schema"),
        # nested-only names in a flat config
        ({"backend": "vllm"}, r"unknown field 'backend': .*engine.backend.*flat 1.4.2 name is 'engine_type'"),
        ({"prefill_schedule_interval": 0}, r"'prefill_schedule_interval' must be an integer >= 1"),
        ({"tensor_parallel_size": 1}, r"'tensor_parallel_size' is a top-level field of Dynamo 1.6's nested schema"),
        # unknown
        ({"engine": {"block_sz": 1}}, r"unknown field 'engine.block_sz'; did you mean 'block_size'\?"),
        ({"dynamo": {"bogus": 1}}, r"unknown field 'dynamo.bogus' \(valid fields: enable_local_indexer"),
        ({"engine": {"sglang": {"bogus": 1}}}, r"unknown field 'engine.sglang.bogus'"),
        ({"engine": {"timing_model": {"type": "fixed", "prefill_ms": 1, "decode_ms": 1}}, "bogus": 1},
         r"unknown field 'bogus'"),
        # types and Dynamo 1.6's stricter rules
        ({"engine": None}, r"field 'engine' must be an object, got null"),
        ({"dynamo": 5}, r"field 'dynamo' must be an object"),
        ({"engine": {"block_size": 0}}, r"'engine.block_size' must be an integer >= 1, got 0"),
        ({"engine": {"block_size": 64.0}}, r"'engine.block_size' must be an integer"),
        ({"engine": {"num_gpu_blocks": None}}, r"'engine.num_gpu_blocks' must not be null"),
        ({"engine": {"preemption_mode": "FIFO"}}, r"'engine.preemption_mode' must be one of 'lifo', 'fifo' \(case-sensitive\)"),
        ({"engine": {"backend": "VLLM"}}, r"'engine.backend' must be one of 'vllm', 'sglang', 'trtllm' \(case-sensitive\)"),
        ({"engine": {"max_model_len": 0}}, r"'engine.max_model_len' must be an integer >= 1"),
        ({"dp_size": 0}, r"'dp_size' must be an integer in \[1, 4294967295\]"),
        ({"engine": {}, "startup_time": -1}, r"'startup_time' must be a finite number >= 0"),
        ({"engine": {"prefill_schedule_interval": 0}}, r"'engine.prefill_schedule_interval' must be an integer >= 1"),
        ({"engine": {"prefill_decode_interval": 2}}, r"prefill_decode_interval is supported only for backend=sglang"),
        ({"engine": {"emit_kv_events": 1}}, r"'engine.emit_kv_events' must be a boolean"),
        ({"engine": {"kv_bytes_per_token": 5, "kv_transfer_bytes_per_token": 6}}, r"alias of engine.kv_transfer_bytes_per_token"),
        ({"engine": {}, "num_gpu_blocks_is_explicit": 1}, r"'num_gpu_blocks_is_explicit' must be a boolean"),
        # timing models
        ({"engine": {"timing_model": {"type": "bogus"}}}, r"'engine.timing_model.type' must be one of 'polynomial', 'fixed', 'external'"),
        ({"engine": {"timing_model": {"type": "fixed", "prefill_ms": 1}}}, r"'engine.timing_model' is missing 'decode_ms'"),
        ({"engine": {"timing_model": {"type": "fixed", "prefill_ms": -1, "decode_ms": 1}}}, r"'engine.timing_model.prefill_ms' must be a finite number >= 0"),
        ({"engine": {"timing_model": {"type": "external", "provider": "bogus"}}}, r"unsupported external timing provider"),
        ({"engine": {"timing_model": {"type": "external", "provider": "dynamo_profile"}}}, r"'engine.timing_model.config' must be an object, got null"),
        ({"engine": {"timing_model": {"type": "external", "provider": "dynamo_profile", "config": {}}}}, r"missing 'path'"),
        ({"engine": {"timing_model": {"type": "external", "provider": "dynamo_profile", "config": {"path": "p.npz", "x": 1}}}}, r"unknown field 'engine.timing_model.config.x'"),
        ({"engine": {"timing_model": {"type": "external", "provider": "dynamo_profile", "config": {"path": "/no/such.npz"}}}}, r"no such file or directory"),
        ({"timing_model": {"type": "external", "provider": "dynamo_profile", "config": {"path": "/no/such.npz"}}}, r"no such file or directory"),
        ({"timing_model": "fixed"}, r"'timing_model' must be an object"),
        # reasoning (Dynamo 1.6.1's checks)
        ({"dynamo": {"reasoning": {"start_thinking_token_id": 1}}}, r"'dynamo.reasoning' is missing 'end_thinking_token_id'"),
        ({"dynamo": {"reasoning": 5}}, r"'dynamo.reasoning' must be an object"),
        ({"reasoning": {"start_thinking_token_id": 1, "end_thinking_token_id": 2, "thinking_ratio": 1.5}},
         r"'reasoning.thinking_ratio' must be a number in \[0, 1\]"),
        ({"reasoning": {"start_thinking_token_id": 1, "end_thinking_token_id": 2, "thinking_ratio": 1, "x": 1}},
         r"unknown field 'reasoning.x'"),
    ],
)
def test_bad_nested_config_names_the_field(obj, pattern):
    with pytest.raises(InputError, match=pattern) as ei:
        parse(obj)
    assert str(ei.value).startswith("--extra-engine-args: ")


@pytest.mark.parametrize(
    "obj, words",
    [
        ({"engine": {"state_cache": {"bytes_per_request": 1}}}, "state cache"),
        ({"engine": {"kv_cache_groups": [{"x": 1}]}}, "KV cache groups"),
        ({"engine": {"kv_cache_capacity_bytes": 5}}, "engine.kv_cache_capacity_bytes"),
        ({"engine": {"sglang": {"schedule_policy": "lpm"}}}, "SGLang engine"),
        ({"engine": {"timing_model": {"type": "external", "provider": "ais", "config": {}}}}, "AIConfigurator"),
        ({"engine": {}, "tensor_parallel_size": 2}, "tensor_parallel_size"),
        ({"engine": {}, "cuda_graph_reserved_bytes": 5}, "cuda_graph_reserved_bytes"),
        ({"engine": {}, "gpu_memory_utilization": 0.9}, "gpu_memory_utilization"),
        ({"engine": {"aic_backend": "vllm"}}, "AIConfigurator timing"),
    ],
)
def test_unmodelled_nested_options_are_not_supported_yet(obj, words):
    with pytest.raises(NotSupportedError) as ei:
        parse(obj)
    assert "not supported yet" in str(ei.value) and words in str(ei.value)


def test_no_effect_fields_and_defaults_are_accepted():
    e = parse({"engine": {"emit_kv_events": True, "emit_kv_token_ids": True, "kv_cache_bytes_per_token": 131072,
                          "kv_cache_groups": [], "prefill_schedule_interval": 1, "prefill_decode_interval": 0,
                          "sglang": {"schedule_policy": "fifo"}, "trtllm": {},
                          "aic_nextn": None, "aic_mtp_seed": 42},
               "tensor_parallel_size": 1, "num_gpu_blocks_is_explicit": True, "cuda_graph_reserved_bytes": None,
               "dynamo": {"bootstrap_port": 1234, "zmq_replay_port": 5, "reasoning": None}})
    assert e == EngineArgs(bootstrap_port=1234, zmq_replay_port=5)
    assert parse({"engine": {"kv_bytes_per_token": 7}}).kv_bytes_per_token == 7


def test_flat_reasoning_is_accepted_with_no_effect():
    # Dynamo 1.6.1 (F07) and 1.4.2 (100 requests 1024/128 every 20 ms) report the same with and
    # without a reasoning config: replayed requests carry no token ids.
    r = {"start_thinking_token_id": 1, "end_thinking_token_id": 2, "thinking_ratio": 0.5}
    e = parse({"reasoning": r})
    assert e.reasoning == r and e.replace(reasoning=None) == EngineArgs()


def test_engine_args_keyword_validation_of_timing_model():
    e = EngineArgs(timing_model={"type": "fixed", "prefill_ms": 2, "decode_ms": 1})
    assert e.timing_model == {"type": "fixed", "prefill_ms": 2.0, "decode_ms": 1.0}
    with pytest.raises(InputError, match="timing_model"):
        EngineArgs(timing_model={"type": "polynomial"})
    assert EngineArgs.from_json(e.to_json()) == e  # round trip


@pytest.mark.parametrize(
    "timing, engine, ttft, itl",
    [
        # Dynamo 1.4.2's pass rule (the pass that completes a prompt is charged prefill + decode):
        ((25, 8), {}, 33.0, 8.0),
        ((25, 0.5), {}, 25.5, 0.5),  # no 1 ms floor for the fixed model (aisimulate FixedTimingModel)
        ((25, 8), {"speedup_ratio": 2.0}, 16.5, 4.0),  # speedups divide as for every model
        ((25, 8), {"speedup_ratio": 2.0, "decode_speedup_ratio": 4.0}, 13.5, 1.0),
    ],
)
def test_fixed_timing_in_a_replay(timing, engine, ttft, itl):
    import fastsim

    tm = {"type": "fixed", "prefill_ms": timing[0], "decode_ms": timing[1]}
    rep = fastsim.run_synthetic_trace_replay(
        1024, 4, 1, arrival_interval_ms=10.0, dynamo_version="1.4.2",
        extra_engine_args={"engine": dict(timing_model=tm, **engine)})
    s = rep.summary
    assert s["mean_ttft_ms"] == pytest.approx(ttft, rel=1e-12)
    assert s["mean_itl_ms"] == pytest.approx(itl, rel=1e-12)
    assert s["duration_ms"] == pytest.approx(ttft + 3 * itl, rel=1e-12)
    # the prefill cost does not depend on the number of prompt tokens
    s2 = fastsim.run_synthetic_trace_replay(
        64, 4, 1, arrival_interval_ms=10.0, dynamo_version="1.4.2",
        extra_engine_args={"engine": dict(timing_model=tm, **engine)}).summary
    assert s2["mean_ttft_ms"] == s["mean_ttft_ms"]


def test_sweep_specs_take_the_nested_form(tmp_path):
    from fastsim.sweep import load_spec

    (tmp_path / "p.npz").write_bytes(b"")
    spec = tmp_path / "s.json"
    spec.write_text(json.dumps({
        "base": {"input_tokens": 64, "output_tokens": 4, "request_count": 3, "arrival_interval_ms": 5,
                 "extra_engine_args": {"engine": {"timing_model": {"type": "external", "provider": "dynamo_profile",
                                                                   "config": {"path": "p.npz"}}}, "dp_size": 1}},
        "grid": {"extra_engine_args.engine.block_size": [16, 32]},
    }))
    sp = load_spec(spec)
    assert [c.kwargs["extra_engine_args"]["engine"]["block_size"] for c in sp.configs] == [16, 32]
    for c in sp.configs:  # relative to the spec file
        assert c.kwargs["extra_engine_args"]["engine"]["timing_model"]["config"]["path"] == str(tmp_path / "p.npz")
