"""mooncake-delta streams beyond the recorded cases of tests/test_trace_formats_161.py (decision
0460): the prompt lengths a session plays once turns are rejected or cut, and what fastsim refuses
with each release."""

import json
from pathlib import Path

import numpy as np
import pytest

from fastsim import run_trace_replay
from fastsim.config import EngineArgs
from fastsim.errors import InputError, NotSupportedError
from fastsim.traces.mooncake_delta import settle_stream_lengths, stream_deltas
from fastsim.workload import load_trace

DATA = Path(__file__).parent / "data"
SMALL = DATA / "traces_161" / "inputs" / "delta_small.jsonl"
CAPACITY = DATA / "delta_mml_161" / "inputs" / "delta_capacity.jsonl"
DISAGG = dict(prefill_engine_args={"block_size": 64, "worker_type": "prefill"},
              decode_engine_args={"block_size": 64, "worker_type": "decode"})


def _small():
    return load_trace(str(SMALL), trace_format="mooncake-delta")


def test_deltas_read_back_from_the_cumulative_lengths():
    w = _small()
    assert stream_deltas(w)[:4].tolist() == [1399, 251, 541, 416]  # the trace's input_length of s0


def test_a_rejected_turn_adds_its_prompt_and_no_output():
    # s0 with max_model_len 2000: turn 1 (1782 tokens) generates its 75, turn 2 (2398) is rejected,
    # so turn 3 is 2398 + 0 + 416 (Dynamo 1.6.1 and 1.4.2, tests/data/delta_mml_161)
    w = _small()
    e = EngineArgs(block_size=64, max_model_len=2000)
    assert settle_stream_lengths(w, [e], e).isl[:4].tolist() == [1399, 1782, 2398, 2814]


def test_a_cut_turn_adds_the_output_it_generated():
    # s12: turn 1 (1919 tokens) stops at 2000 after 81 of its 161 tokens; turn 2 is 2000 + 913
    w = _small()
    e = EngineArgs(block_size=64, max_model_len=2000)
    rows = w.session_rows[w.session_ptr[12]:w.session_ptr[13]]
    assert settle_stream_lengths(w, [e], e).isl[rows].tolist() == [1217, 1919, 2913, 2983]


def test_a_turn_too_big_for_the_pool_is_rejected_without_output():
    w = load_trace(str(CAPACITY), trace_format="mooncake-delta")
    e = EngineArgs(block_size=64, num_gpu_blocks=40)
    assert settle_stream_lengths(w, [e], e).isl.tolist() == [500, 3550, 3560, 600, 750]


def test_nothing_rejected_or_cut_keeps_the_workload():
    w = _small()
    e = EngineArgs(block_size=64, max_model_len=100_000)
    assert settle_stream_lengths(w, [e], e) is w
    assert np.array_equal(w.isl, _small().isl)


def test_disaggregated_replay_is_refused_with_dynamo_142_words():
    with pytest.raises(InputError, match="mooncake-delta trace format is not supported for disaggregated replay"):
        run_trace_replay(str(SMALL), trace_format="mooncake-delta", dynamo_version="1.4.2", **DISAGG)


def test_cut_turns_on_other_engines_are_not_supported_yet():
    with pytest.raises(NotSupportedError, match="engine_type=sglang"):
        run_trace_replay(str(SMALL), trace_format="mooncake-delta",
                         extra_engine_args={"engine_type": "sglang", "block_size": 64, "max_model_len": 2000})


def test_seeded_kv_router_case_matches_dynamo_142():
    import recorded

    folder = DATA / "delta_mml_161"
    for name, case in json.loads((folder / "seeded.json").read_text()).items():
        args = case["args"]
        got = run_trace_replay(
            str(folder / args[0]), trace_format="mooncake-delta", num_workers=int(args[args.index("--num-workers") + 1]),
            router_mode="kv_router", extra_engine_args=json.loads(args[args.index("--extra-engine-args") + 1]),
            dynamo_version=case["dynamo_version"], seed=case["seed"]).summary
        want = json.loads((folder / f"{name}.json").read_text())
        misses = [k for k, v in want.items() if k not in recorded.WALL_FIELDS and isinstance(v, (int, float))
                  and not isinstance(v, bool) and abs(got[k] - v) > 1e-9 * max(abs(v), 1e-12)]
        assert not misses, (name, misses)
