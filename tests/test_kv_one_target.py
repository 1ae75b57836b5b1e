"""kv_router with one target (one worker, no attention DP) against Dynamo 1.6.1's recorded outputs
(decision 0391). Dynamo 1.6.1 runs it (1.4.2 refuses it, and so does fastsim in 1.4.2 mode): the
one target takes every request, so the report is the round-robin one, and each record carries the
overlaps the router's index saw. Every report field within 1e-9, every request's admission, first
and last token times and reused tokens, and every request's routing overlaps, on the vLLM,
SGLang and TRT-LLM engines, with and without a KV event lag."""

import json
from pathlib import Path

import pytest

import recorded
from fastsim.errors import InputError

DATA = Path(__file__).parent / "data" / "kv_one_target_161"
CASES = recorded.cases(DATA)
OVERLAPS = ("reported_overlap_tokens", "selected_overlap_blocks", "best_available_overlap_blocks")


def _key(r):
    return (r["arrival_time_ms"], r["input_length"], r["requested_output_length"])


@pytest.mark.parametrize("name,args", CASES, ids=[c[0] for c in CASES])
def test_one_target_matches_dynamo_161(name, args):
    recorded.assert_matches_dynamo(DATA, name, args)
    mine = sorted((json.loads(line) for line in recorded.replay(args, DATA).jsonl_lines()), key=_key)
    ref = sorted(recorded.per_request(DATA, name), key=_key)
    assert [[h[k] for k in OVERLAPS] for r in mine for h in r["routing_history"]] == \
        [[h[k] for k in OVERLAPS] for r in ref for h in r["routing_history"]]
    assert sum(r["routing_history"][0]["best_available_overlap_blocks"] for r in ref) > 0  # (the index saw reuse)


def test_one_target_refused_for_142():
    with pytest.raises(InputError, match="kv_router with more than one worker/DP-rank target"):
        recorded.replay(dict(CASES)["vllm_1w"], DATA, dynamo_version="1.4.2")
