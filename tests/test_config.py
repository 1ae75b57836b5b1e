"""EngineArgs: Dynamo 1.4.2 MockEngineArgs names, defaults and validation (fastsim/config.py)."""

import json

import numpy as np
import pytest

from fastsim.config import ENGINE_ARG_FIELDS, FIELD_GROUPS, EngineArgs
from fastsim.errors import FastsimError, InputError, NotSupportedError

# The field list of `MockEngineArgs.from_json` in ai-dynamo 1.4.2, copied from its
# "unknown field `watermark`, expected one of ..." error message.
DYNAMO_JSON_FIELDS = (
    "engine_type num_gpu_blocks block_size max_model_len max_num_seqs max_num_batched_tokens "
    "enable_prefix_caching g1_backend enable_chunked_prefill speedup_ratio decode_speedup_ratio "
    "dp_size startup_time worker_type is_prefill is_decode planner_profile_data aic_backend "
    "aic_system aic_backend_version aic_tp_size aic_model_path aic_moe_tp_size aic_moe_ep_size "
    "aic_attention_dp_size aic_gemm_dtype aic_moe_dtype aic_fmha_dtype aic_kv_cache_dtype "
    "aic_comm_dtype aic_nextn aic_nextn_accept_rates aic_mtp_seed gpu_memory_utilization "
    "mem_fraction_static free_gpu_memory_fraction enable_local_indexer bootstrap_port "
    "handoff_session_timeout_ms kv_bytes_per_token kv_transfer_bandwidth kv_transfer_timing_mode "
    "num_g2_blocks num_g3_blocks enable_g4_storage offload_batch_size bandwidth_g1_to_g2_gbps "
    "bandwidth_g2_to_g1_gbps bandwidth_g2_to_g3_gbps bandwidth_g3_to_g2_gbps "
    "bandwidth_g2_to_g4_gbps bandwidth_g4_to_g2_gbps reasoning response_replay_trace_path "
    "zmq_kv_events_port zmq_replay_port preemption_mode router_queue_policy sglang trtllm "
    "has_perf_model"
).split()


def parse(obj):
    return EngineArgs.from_json(json.dumps(obj) if not isinstance(obj, str) else obj)


def test_every_dynamo_field_is_known():
    known = set(ENGINE_ARG_FIELDS) | {"is_prefill", "is_decode", "has_perf_model"}
    # timing_model: Dynamo 1.6's selector, which the flat form takes too (engine.timing_model);
    # host_offload: the host KV tier, from engine.native_host_offload or the flat num_g2_blocks names.
    assert known == set(DYNAMO_JSON_FIELDS) | {"timing_model", "prefill_schedule_interval", "host_offload"}
    grouped = set().union(*FIELD_GROUPS.values())
    assert grouped == known


def test_defaults_match_dynamo():
    e = EngineArgs()
    expected = dict(
        engine_type="vllm", num_gpu_blocks=16384, block_size=64, max_model_len=None,
        max_num_seqs=256, max_num_batched_tokens=8192, enable_prefix_caching=True,
        enable_chunked_prefill=True, speedup_ratio=1.0, decode_speedup_ratio=1.0, dp_size=1,
        startup_time=None, worker_type="aggregated", preemption_mode="lifo",
        planner_profile_data=None, kv_bytes_per_token=None, kv_transfer_bandwidth=None,
        kv_transfer_timing_mode="full_prompt", g1_backend="native", aic_mtp_seed=42,
        handoff_session_timeout_ms=300000, enable_local_indexer=False, enable_g4_storage=False,
        router_queue_policy=None,
    )
    for k, v in expected.items():
        assert getattr(e, k) == v, k
    assert parse({}) == e
    assert e.is_prefill is False and e.is_decode is False
    assert e.kv_capacity_tokens == 16384 * 64


def test_unknown_field_suggests_closest():
    with pytest.raises(InputError, match=r"unknown field 'block_sz'; did you mean 'block_size'\?"):
        parse({"block_sz": 16})
    with pytest.raises(InputError, match="did you mean 'max_num_seqs'"):
        parse({"max_num_seq": 3})


def test_watermark_is_unknown_with_explanation():
    with pytest.raises(InputError) as ei:
        parse({"watermark": 0.01})
    msg = str(ei.value)
    assert "unknown field 'watermark'" in msg and "no watermark" in msg
    assert msg.startswith("--extra-engine-args:")


def test_source_appears_in_messages():
    with pytest.raises(InputError, match=r"^--prefill-engine-args: unknown field 'x'"):
        EngineArgs.from_json('{"x": 1}', source="--prefill-engine-args")


def test_malformed_json_reports_position():
    with pytest.raises(InputError, match=r"malformed JSON at line 1 column 2"):
        parse("{bad")
    with pytest.raises(InputError, match=r"line 2 column"):
        parse('{"block_size": 16,\n oops}')
    with pytest.raises(InputError, match="NaN"):
        parse('{"speedup_ratio": NaN}')


def test_non_object_and_duplicates():
    for text in ("[]", "5", "null", '"x"'):
        with pytest.raises(InputError, match="must be a JSON object"):
            parse(text)
    with pytest.raises(InputError, match="duplicate field 'block_size'"):
        parse('{"block_size": 64, "block_size": 32}')


@pytest.mark.parametrize(
    "obj, pattern",
    [
        ({"block_size": 1.5}, r"'block_size' must be an integer >= 0, got number 1.5"),
        ({"block_size": "64"}, r"'block_size' must be an integer"),
        ({"block_size": True}, r"'block_size' must be an integer .* got boolean true"),
        ({"block_size": -1}, r"'block_size' must be an integer >= 0 \(0 = engine default\), got -1"),
        ({"num_gpu_blocks": 0}, r"'num_gpu_blocks' must be an integer >= 1, got 0"),
        ({"num_gpu_blocks": 64.0}, r"'num_gpu_blocks' must be an integer"),
        ({"max_num_seqs": 0}, r"'max_num_seqs' must be an integer >= 1"),
        ({"max_num_batched_tokens": 0}, r"'max_num_batched_tokens' must be an integer >= 1"),
        ({"max_model_len": 0}, r"'max_model_len' must be an integer >= 1"),
        ({"dp_size": 0}, r"'dp_size' must be an integer in \[1, 4294967295\]"),
        ({"speedup_ratio": -1}, r"'speedup_ratio' must be a finite number >= 0, got -1"),
        ({"speedup_ratio": "1"}, r"'speedup_ratio' must be a number >= 0, got string '1'"),
        ({"decode_speedup_ratio": -0.5}, r"'decode_speedup_ratio' must be a finite number >= 0"),
        ({"startup_time": -1}, r"'startup_time' must be a finite number >= 0"),
        ({"kv_transfer_bandwidth": -1}, r"'kv_transfer_bandwidth'"),
        ({"enable_prefix_caching": 1}, r"'enable_prefix_caching' must be a boolean \(true/false\), got integer 1"),
        ({"enable_chunked_prefill": "true"}, r"'enable_chunked_prefill' must be a boolean"),
        ({"preemption_mode": "random"}, r"'preemption_mode' must be one of 'lifo', 'fifo', got 'random'"),
        ({"worker_type": "both"}, r"'worker_type' must be one of 'aggregated', 'prefill', 'decode'"),
        ({"engine_type": "tgi"}, r"'engine_type' must be one of 'vllm', 'sglang', 'trtllm'"),
        ({"kv_transfer_timing_mode": "DestinationMissing"}, r"'kv_transfer_timing_mode' must be one of"),
        ({"router_queue_policy": "WSPT"}, r"'router_queue_policy' must be one of .*case-sensitive"),
        ({"planner_profile_data": 5}, r"'planner_profile_data' must be a path string"),
        ({"block_size": None}, r"'block_size' must not be null"),
        ({"preemption_mode": None}, r"'preemption_mode' must not be null"),
        ({"is_prefill": 1}, r"'is_prefill' must be a boolean"),
    ],
)
def test_wrong_type_or_range_names_field(obj, pattern):
    with pytest.raises(InputError, match=pattern):
        parse(obj)


def test_nullable_fields_and_block_size_zero():
    e = parse({"num_gpu_blocks": None, "max_num_seqs": None, "max_num_batched_tokens": None,
               "max_model_len": None, "startup_time": None, "block_size": 0})
    assert e.num_gpu_blocks == 16384 and e.block_size == 64
    assert e.max_num_seqs is None and e.max_num_batched_tokens is None
    assert EngineArgs(block_size=0).block_size == 64


def test_enum_spellings_like_dynamo():
    assert parse({"preemption_mode": "FIFO"}).preemption_mode == "fifo"
    assert parse({"preemption_mode": "LiFo"}).preemption_mode == "lifo"
    assert parse({"worker_type": "Prefill"}).worker_type == "prefill"
    assert parse({"worker_type": "decode"}).is_decode
    assert parse({"kv_transfer_timing_mode": "DESTINATION_MISSING"}).kv_transfer_timing_mode == "destination_missing"
    assert parse({"engine_type": "VLLM"}).engine_type == "vllm"
    assert parse({"router_queue_policy": "wspt"}).router_queue_policy == "wspt"
    assert EngineArgs(preemption_mode="FIFO").preemption_mode == "fifo"


def test_is_prefill_is_decode_spellings():
    assert parse({"is_prefill": True}).worker_type == "prefill"
    assert parse({"is_decode": True}).worker_type == "decode"
    assert parse({"is_prefill": False}).worker_type == "aggregated"
    with pytest.raises(InputError, match="cannot both be true"):
        parse({"is_prefill": True, "is_decode": True})
    with pytest.raises(InputError, match="worker_type cannot be combined"):
        parse({"is_prefill": True, "worker_type": "decode"})


def test_legacy_has_perf_model_is_ignored():
    assert parse({"has_perf_model": True}) == EngineArgs()


@pytest.mark.parametrize(
    "obj, field",
    [
        ({"aic_backend": "vllm"}, "aic_backend"),
        ({"aic_tp_size": 2}, "aic_tp_size"),
        ({"gpu_memory_utilization": 0.9}, "gpu_memory_utilization"),
        ({"g1_backend": "kvbm"}, "g1_backend"),
    ],
)
def test_unmodelled_fields_are_not_supported_yet(obj, field):
    with pytest.raises(NotSupportedError) as ei:
        parse(obj)
    assert "not supported yet" in str(ei.value) and field in str(ei.value)
    assert isinstance(ei.value, InputError) and isinstance(ei.value, FastsimError)


def test_unmodelled_fields_at_default_are_accepted():
    e = parse({"aic_mtp_seed": 42, "enable_g4_storage": False, "aic_backend": None,
               "g1_backend": "native", "sglang": None})
    assert e == EngineArgs()


def test_no_effect_fields_are_accepted():
    e = parse({"startup_time": 5, "kv_bytes_per_token": 1000, "kv_transfer_bandwidth": 64,
               "bootstrap_port": 1234, "enable_local_indexer": True, "router_queue_policy": "lcfs"})
    assert e.startup_time == 5.0 and isinstance(e.startup_time, float)
    assert e.kv_bytes_per_token == 1000


def test_planner_profile_data_must_exist(tmp_path):
    with pytest.raises(InputError, match="no such file or directory"):
        parse({"planner_profile_data": str(tmp_path / "missing.npz")})
    p = tmp_path / "perf.npz"
    p.write_bytes(b"")
    assert parse({"planner_profile_data": str(p)}).planner_profile_data == str(p)
    assert parse({"planner_profile_data": None}).planner_profile_data is None


def test_coerce(tmp_path):
    e = EngineArgs(block_size=16)
    assert EngineArgs.coerce(None) == EngineArgs()
    assert EngineArgs.coerce(e) is e
    assert EngineArgs.coerce({"block_size": 16}) == e
    assert EngineArgs.coerce('{"block_size": 16}') == e
    f = tmp_path / "engine.json"
    f.write_text('{"block_size": 16}')
    assert EngineArgs.coerce(str(f)) == e
    assert EngineArgs.coerce(f) == e
    with pytest.raises(InputError, match="expected EngineArgs"):
        EngineArgs.coerce(16)
    with pytest.raises(InputError, match=r"^xargs: unknown field"):
        EngineArgs.coerce({"bs": 1}, source="xargs")


def test_keyword_construction_is_validated():
    with pytest.raises(InputError, match="block_size"):
        EngineArgs(block_size=-1)
    with pytest.raises(NotSupportedError):
        EngineArgs(g1_backend="kvbm")
    assert EngineArgs(num_gpu_blocks=np.int64(100)).num_gpu_blocks == 100
    assert type(EngineArgs(num_gpu_blocks=np.int64(100)).num_gpu_blocks) is int


def test_replace_and_round_trip():
    e = EngineArgs(block_size=16, num_gpu_blocks=100)
    f = e.replace(preemption_mode="fifo")
    assert f.preemption_mode == "fifo" and f.block_size == 16 and e.preemption_mode == "lifo"
    with pytest.raises(InputError, match="did you mean 'block_size'"):
        e.replace(block_sz=3)
    with pytest.raises(InputError):
        e.replace(max_num_seqs=0)
    assert EngineArgs.from_json(f.to_json()) == f
    assert EngineArgs.from_json(f.to_dict()) == f
    with pytest.raises(Exception):
        f.block_size = 3  # frozen
    assert hash(f) == hash(EngineArgs.from_json(f.to_json()))


def test_reasoning_is_checked_and_accepted():
    """Dynamo 1.4.2 requires the three fields of ``reasoning`` and then replays exactly as without
    it (a 300-row Mooncake trace on 2 workers: identical rows, report within 1e-15 for thinking
    ratios 0.5 and 0.9)."""
    e = parse({"reasoning": {"start_thinking_token_id": 1, "end_thinking_token_id": 2, "thinking_ratio": 0.5}})
    assert e.reasoning["thinking_ratio"] == 0.5
    with pytest.raises(InputError, match="'reasoning' is missing 'end_thinking_token_id'"):
        parse({"reasoning": {"start_thinking_token_id": 1}})
    with pytest.raises(InputError, match="reasoning.thinking_ratio"):
        parse({"reasoning": {"start_thinking_token_id": 1, "end_thinking_token_id": 2, "thinking_ratio": "x"}})
    with pytest.raises(InputError, match="must be an object"):
        parse({"reasoning": 3})
