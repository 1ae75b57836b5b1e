"""Dynamo 1.6.1's other trace formats (tests/data/traces_161, see its README; and
tests/data/agentic_lag_161, the agentic formats with the kv_router's KV event lag, decision 0230;
tests/data/agentic_cap_161, the agentic formats under a time cap, decision 0300):
recorded cases of each format fastsim replays, run through ``fastsim replay --dynamo-version 1.6.1`` with the
arguments Dynamo was given. Every numeric report field must agree within 1e-9 relative and every
request's timeline (admission, first and last token, terminal time, input length, reuse) to the
nanosecond; a kv_router case (random ties in Dynamo) must fall within the band of Dynamo's three
runs. Cases marked ``dynamo_version: "1.4.2"`` were recorded on Dynamo 1.4.2 and run with
``--dynamo-version 1.4.2``.
"""

import gzip
import json
import os
from pathlib import Path

import pytest

import recorded
from fastsim import cli

DATA = Path(__file__).parent / "data"
FOLDERS = [DATA / f for f in ("traces_161", "agentic_lag_161", "agentic_cap_161", "agentic_mml_161",
                              "agentic_disagg_161", "delta_mml_161",
                              "delta_disagg_161", "delta_lag_161", "delta_disagg_lag_161", "decode_reject_161")]
CASES = {(folder.name, name): case for folder in FOLDERS
         for name, case in json.loads((folder / "cases.json").read_text()).items()}
TIMELINE = ("session_id", "turn_index", "arrival_time_ms", "first_admit_ms", "first_token_ms", "last_token_ms",
            "terminal_time_ms", "input_length", "output_length", "reused_input_tokens", "terminal_status",
            "request_id", "play_id", "agentic", "dispatched_at_ms", "decode_worker_idx")
# agentic summary fields compared as they are (Dynamo's digests are not reproduced)
AGENTIC = ("agentic_graph", "agentic_model_projection", "agentic_play_outcomes")


def _replay(folder, args, version, tmp_path, capsys):
    rep, jsonl = tmp_path / "r.json", tmp_path / "r.jsonl"
    argv = ["replay", *args, "--dynamo-version", version, "--report-json", str(rep), "--report-jsonl", str(jsonl)]
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        assert cli.main(argv) == 0
    finally:
        os.chdir(cwd)
    capsys.readouterr()
    return json.loads(rep.read_text()), [json.loads(line) for line in jsonl.read_text().splitlines()]


def _no_digests(v):
    """An agentic summary field without Dynamo's digests (the graph's, and a weka corpus's BLAKE3
    over its files), which fastsim does not produce."""
    if not isinstance(v, dict):
        return v
    v = {a: b for a, b in v.items() if a != "graph_digest"}
    if isinstance(v.get("source"), dict) and v["source"].get("format") == "weka":
        v["source"] = {a: b for a, b in v["source"].items() if a != "digest"}
    return v


def _rel(a, b):
    return 0.0 if abs(a - b) <= 1e-12 else abs(a - b) / max(abs(b), 1e-12)


def _timeline(recs):
    def norm(r):
        return tuple(round(r[k], 6) if isinstance(r.get(k), float) else repr(r.get(k)) for k in TIMELINE)

    return sorted(map(norm, recs), key=repr)


def _ids(keys):
    return [name if folder == "traces_161" else f"{folder}/{name}" for folder, name in keys]


RANDOM = [k for k, c in CASES.items() if c.get("runs", 1) > 1]
EXACT = [k for k, c in CASES.items() if c.get("runs", 1) == 1]


@pytest.mark.parametrize("key", RANDOM, ids=_ids(RANDOM))
def test_trace_format_random_case_within_dynamo_band(key, tmp_path, capsys):
    """One of fastsim's seeds 0-2 within the band of Dynamo's recorded runs (every NAME.runN.json):
    on a small trace a tail statistic (p99) follows a few requests' ties, on both sides."""
    folder, name = DATA / key[0], key[1]
    case = CASES[key]
    runs = [json.loads((folder / f"{name}.json").read_text())]
    runs += [json.loads(p.read_text()) for p in sorted(folder.glob(f"{name}.run*.json"))]
    every = []
    for seed in range(3):
        got, _ = _replay(folder, [*case["args"], "--seed", str(seed)], case.get("dynamo_version", "1.6.1"),
                         tmp_path, capsys)
        misses = recorded.band_misses(got, runs)
        if not misses:
            return
        every.append(f"seed {seed}: " + "; ".join(misses))
    raise AssertionError("\n".join(every))


@pytest.mark.parametrize("key", EXACT, ids=_ids(EXACT))
def test_trace_format_case_matches_dynamo_161(key, tmp_path, capsys):
    folder, case = DATA / key[0], CASES[key]
    got, mine = _replay(folder, case["args"], case.get("dynamo_version", "1.6.1"), tmp_path, capsys)
    name = case.get("same_as", key[1])
    want = json.loads((folder / f"{name}.json").read_text())
    for k in AGENTIC:
        if k in want:
            assert _no_digests(got.get(k)) == _no_digests(want[k]), k
    misses = [f"{k}: fastsim {got.get(k)!r}, Dynamo {v!r}" for k, v in want.items()
              if k not in recorded.WALL_FIELDS and isinstance(v, (int, float)) and not isinstance(v, bool)
              and not (isinstance(got.get(k), (int, float)) and _rel(got[k], v) <= 1e-9)]
    assert not misses, "\n".join(misses)
    with gzip.open(folder / f"{name}.per_request.jsonl.gz", "rt") as f:
        ref = [json.loads(line) for line in f]
    assert _timeline(mine) == _timeline(ref)
