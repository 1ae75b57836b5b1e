"""vLLM's prefill_schedule_interval against Dynamo 1.6.1 (decision 0341).

Cases in tests/data/interval_161 (cases.tsv, recorded by tests/data/record_tsv.py): every report field within
1e-9 and every request's timeline to the ns. With one attention-DP rank the interval changes nothing
(each such case equals its interval-1 twin); with several ranks it paces prefills.
"""

import json
from pathlib import Path

import pytest

import recorded
import test_mtp
from fastsim.config import EngineArgs
from fastsim.errors import InputError

DATA = Path(__file__).parent / "data" / "interval_161"
CASES = recorded.cases(DATA)


@pytest.mark.parametrize("name,args", CASES, ids=[c[0] for c in CASES])
def test_case_matches_dynamo_161(name, args):
    test_mtp.compare_with_dynamo(name, args, DATA)


def test_one_rank_interval_changes_nothing_in_dynamo():
    for a, b in (("dp1_busy_i4", "dp1_busy_i1"), ("dp1_3w_i7", "dp1_3w_i1")):
        ra, rb = (json.loads((DATA / f"{x}.json").read_text()) for x in (a, b))
        assert {k: v for k, v in ra.items() if k != "wall_time_ms" and "per_s" not in k} == \
               {k: v for k, v in rb.items() if k != "wall_time_ms" and "per_s" not in k}


@pytest.mark.parametrize("args,err", [
    ({"prefill_schedule_interval": 0}, "must be an integer >= 1"),
    ({"prefill_schedule_interval": True}, "must be an integer >= 1"),
    ({"engine_type": "sglang", "prefill_schedule_interval": 2}, "supported only for engine_type vllm"),
    ({"engine": {"backend": "sglang", "prefill_schedule_interval": 2}}, "supported only for backend=vllm"),
])
def test_bad_settings(args, err):
    with pytest.raises(InputError, match=err):
        EngineArgs.from_json(json.dumps(args))


def test_both_forms_and_neutral_value_on_sglang():
    assert EngineArgs.from_json('{"dp_size": 2, "prefill_schedule_interval": 3}').prefill_schedule_interval == 3
    assert EngineArgs.from_json('{"engine": {"prefill_schedule_interval": 3}, "dp_size": 4}').prefill_schedule_interval == 3
    # Dynamo 1.6.1 takes the default on either backend
    EngineArgs.from_json('{"engine": {"backend": "sglang", "prefill_schedule_interval": 1}}')
