"""Disaggregated serving with KV pressure on the decode worker (docs/decisions/0250).

The recorded cases are the ``disagg_kv_*`` entries of ``data/cases_161/cases.json`` (Dynamo 1.6.1)
and ``data/dynamo142/cases.json`` (Dynamo 1.4.2); ``tests/test_cases_161.py`` and
``tests/test_dynamo142_cases.py`` check their reports and per-request timelines. This file adds
what those leave out:

* 1.6.1: each request's decode admissions (handoff admission, then each readmission after a
  preemption on the decode worker, with its time and reused tokens) as Dynamo recorded them;
* 1.4.2: the case Dynamo 1.4.2 cannot finish ends in the same dead end
  (``python -m dynamo.replay inputs/unique_2048.jsonl <the case's arguments>``: "offline disagg
  replay reached a dead end with 25 in-flight requests remaining").
"""

import gzip
import json
import os
from pathlib import Path

import pytest

from fastsim import cli

DATA = Path(__file__).parent / "data" / "cases_161"
CASES = {n: c for n, c in json.loads((DATA / "cases.json").read_text()).items() if n.startswith("disagg_kv_")}


def _run(args, version, tmp_path, capsys):
    rep, jsonl = tmp_path / "r.json", tmp_path / "r.jsonl"
    cwd = os.getcwd()
    os.chdir(DATA)
    try:
        code = cli.main(["replay", *args, "--dynamo-version", version, "--report-json", str(rep),
                         "--report-jsonl", str(jsonl)])
    finally:
        os.chdir(cwd)
    err = capsys.readouterr().err
    rows = [json.loads(x) for x in jsonl.read_text().splitlines()] if code == 0 else []
    return code, err, rows


def _decode_admissions(rows):
    """Per request (by arrival, prompt and output length): its decode admissions and readmission count."""
    def key(r):
        return (r["arrival_time_ms"], r["input_length"], r["requested_output_length"])

    out = []
    for r in sorted(rows, key=key):
        adm = tuple((round(a["at_ms"], 6), a["reused_input_tokens"], a["is_readmission"])
                    for a in r["admission_history"] if a["pool"] == "decode")
        out.append((key(r), adm, r["readmission_count"]))
    return out


def test_cases_preempt_on_the_decode_worker():
    # the cases are about decode-side pressure: most of them readmit requests there
    readmitted = 0
    for name in CASES:
        with gzip.open(DATA / f"{name}.per_request.jsonl.gz", "rt") as f:
            rows = [json.loads(x) for x in f]
        readmitted += any(a["pool"] == "decode" and a["is_readmission"]
                          for r in rows for a in r["admission_history"])
    assert readmitted >= 8


@pytest.mark.parametrize("name", sorted(CASES))
def test_decode_admissions_match_dynamo_161(name, tmp_path, capsys):
    code, err, rows = _run(CASES[name]["args"], "1.6.1", tmp_path, capsys)
    assert code == 0, err
    with gzip.open(DATA / f"{name}.per_request.jsonl.gz", "rt") as f:
        want = [json.loads(x) for x in f]
    assert _decode_admissions(rows) == _decode_admissions(want)


def test_dead_end_like_dynamo_142(tmp_path, capsys):
    code, err, _ = _run(CASES["disagg_kv_unique_p2_d1_200"]["args"], "1.4.2", tmp_path, capsys)
    assert code == 2
    assert "offline disagg replay reached a dead end with 25 in-flight requests remaining" in err


def test_telemetry_of_a_disaggregated_replay_is_refused(tmp_path, capsys):
    # (it used to be ignored by the API and end the command line in a traceback)
    args = CASES["disagg_kv_37_p1_d1"]["args"] + ["--telemetry-interval-ms", "10", "--report-workers",
                                                   str(tmp_path / "w.csv")]
    code, err, _ = _run(args, "1.6.1", tmp_path, capsys)
    assert code == 2 and "not supported yet" in err and "Traceback" not in err


@pytest.mark.parametrize("version", ["1.4.2", "1.6.1"])
@pytest.mark.parametrize("name", ["disagg_kv_p1_d3_100_bw10", "disagg_kv_p1_d1_150_budget8_bw20"])
def test_every_request_explicit_gives_the_same_rows(name, version, tmp_path, capsys, monkeypatch):
    # the decode worker's admission and reservation rules act on explicit requests only: the
    # steady decoding and light-tick paths must leave the results bit for bit unchanged
    import fastsim.sim_disagg as sd

    out = []
    for kw in ({}, {"steady_decode": False, "light_ticks": False}):
        monkeypatch.setattr(sd, "simulate_disagg", lambda *a, _f=sd.simulate_disagg, _kw=kw, **k: _f(*a, **{**k, **_kw}))
        code, err, rows = _run(CASES[name]["args"], version, tmp_path, capsys)
        assert code == 0, err
        out.append(rows)
        monkeypatch.undo()
    assert out[0] == out[1]
