"""kv_router's router queue (``router_queue_threshold``) on vLLM workers against Dynamo 1.6.1
and 1.4.2 (decision 0430).

Cases in tests/data/vllm_queue_161 and tests/data/vllm_queue_142 (cases.tsv, recorded by
tests/data/sglang_queue_161/record_runs.py: three runs of each case, every run with its
per-request records). Dynamo breaks the router's ties at random, and a tie decides which requests
the queue holds back, so the runs of a case may differ. fastsim, with one of the seeds 0-2, gives
one of Dynamo's runs: its report within 1e-9 and every request's times and reused tokens equal
(1.6.1: its routing record too, workers compared as a partition, as in tests/test_sglang_queue.py).
A case none of whose runs a seed gives is held to the band of Dynamo's runs
(``recorded.band_misses``) and named in ``BAND_ONLY``.
"""

from pathlib import Path

import pytest

import recorded
from test_sglang_queue import _assert_records_match, _runs, _same_report

DATA = Path(__file__).parent / "data" / "vllm_queue_161"
CASES = recorded.cases(DATA)
DATA_142 = Path(__file__).parent / "data" / "vllm_queue_142"
CASES_142 = recorded.cases(DATA_142)
SEEDS = range(3)
# cases for which no seed gives one of Dynamo's recorded runs (checked against their band; decision 0430)
BAND_ONLY = set()
BAND_ONLY_142 = set()


def _check(name, args, folder, version, band_only, tmp_path, seeds=SEEDS):
    runs = _runs(name, folder)
    summaries = []
    for seed in seeds:
        rep = recorded.replay_capped(args, folder, seed=seed, dynamo_version=version)
        for report, rows in runs:
            if _same_report(rep.summary, report):
                assert name not in band_only, f"{name} now gives one of Dynamo's runs: take it out of BAND_ONLY"
                if version == "1.6.1":
                    _assert_records_match(rep, rows, tmp_path)
                else:  # (1.4.2's records have no routing history)
                    recorded.assert_timelines_match(rep.requests, rows, ("first_admit_ms", "first_token_ms",
                                                                         "last_token_ms", "reused_input_tokens"))
                return
        summaries.append(rep.summary)
    assert name in band_only, f"no seed of {list(seeds)} gives one of Dynamo's {len(runs)} runs of {name}"
    reports = [r for r, _ in runs]
    assert any(not recorded.band_misses(s, reports) for s in summaries), \
        [recorded.band_misses(s, reports) for s in summaries]


@pytest.mark.parametrize("name,args", CASES, ids=[c[0] for c in CASES])
def test_router_queue_matches_dynamo_161(name, args, tmp_path):
    _check(name, args, DATA, "1.6.1", BAND_ONLY, tmp_path)


@pytest.mark.parametrize("name,args", CASES_142, ids=[c[0] for c in CASES_142])
def test_router_queue_matches_dynamo_142(name, args, tmp_path):
    _check(name, args, DATA_142, "1.4.2", BAND_ONLY_142, tmp_path)
