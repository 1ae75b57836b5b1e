"""kv_router features against Dynamo 1.4.2 and 1.6.1 (tests/data/router_features, see its
record.py): the cost terms ``overlap_score_credit_decay`` and ``decode_active_request_weight``, and
the prefill router's queue in disaggregated mode (``router_queue_threshold``; 1.4.2 only).

Dynamo breaks routing ties at random, so each case was recorded over several runs. Every fastsim
seed must fall inside the band of Dynamo's runs (the band check of the other kv_router cases);
where a case says ``"exact": "some"``, one of fastsim's seeds reproduces one of Dynamo's runs
request by request, and with ``"exact": "all"`` (Dynamo's runs are all the same) every seed does
and the report agrees within 1e-9.
"""

import gzip
import json
import os
from pathlib import Path

import pytest

from fastsim import cli

from recorded import band_misses

DATA = Path(__file__).parent / "data" / "router_features"
CASES = json.loads((DATA / "cases.json").read_text())
SEEDS = (0, 1, 2)
TIMELINE = ("arrival_time_ms", "first_admit_ms", "first_token_ms", "last_token_ms", "input_length",
            "output_length", "reused_input_tokens", "prefill_route_overlap_tokens", "decode_admit_ms")
WALL = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}


def _recorded(name, version):
    return json.loads(gzip.decompress((DATA / f"{name}.{version}.json.gz").read_bytes()))


def _replay(name, version, seed, tmp_path, capsys):
    case = CASES[name]
    trace = tmp_path / case["trace"].removesuffix(".gz")
    if not trace.exists():
        trace.write_bytes(gzip.decompress((DATA / "traces" / case["trace"]).read_bytes()))
    rep, jsonl = tmp_path / "r.json", tmp_path / "r.jsonl"
    argv = ["replay", str(trace), *case["args"], "--seed", str(seed), "--dynamo-version", version,
            "--report-json", str(rep), "--report-jsonl", str(jsonl)]
    assert cli.main(argv) == 0
    capsys.readouterr()
    return json.loads(rep.read_text()), [json.loads(x) for x in jsonl.read_text().splitlines()]


def _timeline(rows):
    """The requests' timelines, without worker labels (a tie between idle workers only renames them)."""
    def norm(r):
        return tuple(round(r[k], 6) if isinstance(r.get(k), float) else r.get(k) for k in TIMELINE)

    return sorted(map(norm, rows), key=repr)


@pytest.mark.parametrize("name, version", [(n, v) for n in CASES for v in ("1.4.2", "1.6.1")
                                           if v in CASES[n].get("versions", ("1.4.2", "1.6.1"))])
def test_router_features_match_dynamo(name, version, tmp_path, capsys):
    want = _recorded(name, version)
    runs = [_timeline(rows) for rows in want["records"]]
    exact = CASES[name].get("exact", {}).get(version)
    matched = 0
    for seed in SEEDS:
        rep, rows = _replay(name, version, seed, tmp_path, capsys)
        assert band_misses(rep, want["reports"]) == [], (name, version, seed)
        mine = _timeline(rows)
        matched += mine in runs
        if exact == "all":
            assert mine == runs[0], (name, version, seed)
            ref = want["reports"][0]
            off = [k for k, v in ref.items() if k not in WALL and isinstance(v, float)
                   and abs(rep[k] - v) > 1e-9 * max(abs(v), 1e-12)]
            assert not off, off
    if exact == "some":
        assert matched >= 1, f"{name} ({version}): no seed reproduces one of Dynamo's runs"


def test_the_terms_change_the_routing(tmp_path, capsys):
    # the recorded cases would pass with terms that do nothing if the routing never depended on
    # them: without them the deterministic case routes differently
    name = "crafted_agg_2w"
    base = dict(CASES[name], args=CASES[name]["args"][:-2])
    CASES["_plain"] = base
    try:
        _, plain = _replay("_plain", "1.4.2", 0, tmp_path, capsys)
    finally:
        del CASES["_plain"]
    assert _timeline(plain) != _timeline(_recorded(name, "1.4.2")["records"][0])


def test_disaggregated_router_queue_is_refused_for_161(tmp_path, capsys):
    # Dynamo 1.6.1 releases a queued request with the overlaps of its arrival (docs/decisions/0262)
    case = CASES["queue_disagg_burst_fcfs"]
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(gzip.decompress((DATA / "traces" / case["trace"]).read_bytes()))
    code = cli.main(["replay", str(trace), *case["args"], "--dynamo-version", "1.6.1"])
    err = capsys.readouterr().err
    assert code == 2 and "router_queue_threshold in disaggregated replay" in err and "1.4.2" in err
