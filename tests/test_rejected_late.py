"""Requests rejected after the last token (``max_model_len``, or a prompt larger than the KV pool)
against Dynamo's recorded outputs, in both releases (decision 0390): Dynamo 1.6.1's single
worker counts its worker-seconds to its last event, a rejected arrival included; 1.4.2's to its
last token. Every report field within 1e-9, and every recorded request's times."""

import json
from pathlib import Path

import pytest

import recorded

DATA = Path(__file__).parent / "data"
FOLDERS = {"rejected_late_161": "1.6.1", "rejected_late_142": "1.4.2"}
CASES = [(folder, name, args) for folder in FOLDERS for name, args in recorded.cases(DATA / folder)]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("folder,name,args", CASES, ids=[f"{c[0]}/{c[1]}" for c in CASES])
def test_case_matches_dynamo(folder, name, args):
    d = DATA / folder
    rep = recorded.replay(args, d, dynamo_version=FOLDERS[folder])
    recorded.assert_summary_matches(rep.summary, json.loads((d / f"{name}.json").read_text()))
    if (d / f"{name}.per_request.jsonl.gz").exists():
        recorded.assert_timelines_match(rep.requests, recorded.per_request(d, name),
                                        ("first_admit_ms", "first_token_ms", "last_token_ms"))
