"""Dynamo 1.6.1's per-request records (tests/data/per_request_161, see its README).

Each case runs `fastsim replay` in 1.6.1 mode with the arguments Dynamo 1.6.1 was given and compares
the records with Dynamo's on every field but ``uuid`` (Dynamo's trace uuids are random), as a
multiset, with the field order of each record and of each history entry.

Timing fields (admission, token and terminal times, router-queue release, the arrivals that
follow a completion: closed loop, later turns, and V09's reuse, see ``TIMED_REUSE``) are compared
only when fastsim's 1.6.1 mode has 1.6.1's timing rules (``timing_161``); the other fields do not
depend on them in these cases and are compared in any case. kv_router cases leave out the worker ids: Dynamo breaks exact-cost ties
at random, fastsim with its own seeded generator.
"""

import gzip
import json
import math
import os
import shlex
from pathlib import Path

import pytest

import fastsim
from fastsim import cli
from fastsim.report import JSONL_FIELDS, JSONL_FIELDS_161

DATA = Path(__file__).parent / "data" / "per_request_161"
CASES = dict(line.split("\t", 1) for line in (DATA / "cases.txt").read_text().splitlines() if line)

TIMING = {"first_admit_ms", "terminal_time_ms", "first_token_ms", "last_token_ms", "ttft_ms",
          "ttst_ms", "e2e_latency_ms", "itl_ms", "prefill_admit_ms", "source_held_ms",
          "destination_reserved_ms", "destination_activated_ms", "decode_admit_ms",
          "source_released_ms", "admission_history.at_ms", "routing_history.released_at_ms",
          "routing_history.queue_wait_ms"}
# cases whose arrivals after the first follow completions
ARRIVAL_TIMED = {"sessions_open", "sessions_closed", "closed_blank_line", "synthetic_turns",
                 "synthetic_closed", "V16"}
# V09: 2 of its 1000 requests find a different cached prefix when admitted at other times
TIMED_REUSE = {"V09": {"reused_input_tokens", "admission_history.reused_input_tokens"}}
WORKER_IDS = {"decode_worker_idx", "prefill_worker_idx", "routing_history.logical_worker_id",
              "routing_history.scheduler_id", "routing_history.dp_rank"}
ROUTING_KEYS = ["pool", "outcome", "queue_entered_at_ms", "released_at_ms", "queue_wait_ms",
                "logical_worker_id", "scheduler_id", "dp_rank", "reported_overlap_tokens",
                "selected_overlap_blocks", "best_available_overlap_blocks", "overlap_regret_blocks",
                "placement_replica_id"]
ADMISSION_KEYS = ["admission_ordinal", "pool_admission_ordinal", "pool", "at_ms",
                  "reused_input_tokens", "is_readmission"]

# One 1024-token request on one default worker: Dynamo 1.6.1 charges the pass that completes the
# prompt no decode time (its TTFT is P(1024)); 1.4.2 charged P + D = 38.283432 ms.
TIMING_PROBE_TTFT_161 = 32.490712


@pytest.fixture(scope="module")
def timing_161():
    rep = fastsim.run_synthetic_trace_replay(1024, 2, 1, arrival_interval_ms=10.0, dynamo_version="1.6.1")
    return math.isclose(rep.summary["min_ttft_ms"], TIMING_PROBE_TTFT_161, rel_tol=1e-9)


def _replay(case, tmp_path, capsys, version="1.6.1"):
    out = tmp_path / f"{case}.jsonl"
    argv = ["replay", *shlex.split(CASES[case]), "--report-json", str(tmp_path / "r.json"),
            "--report-jsonl", str(out), "--dynamo-version", version]
    cwd = os.getcwd()
    os.chdir(DATA)
    try:
        code = cli.main(argv)
    finally:
        os.chdir(cwd)
    capsys.readouterr()
    assert code == 0
    return out.read_text().splitlines()


def _dynamo(case):
    with gzip.open(DATA / f"{case}.per_request.jsonl.gz", "rt") as f:
        return f.read().splitlines()


def _project(rec, leave_out):
    """The record without the fields of ``leave_out`` (history fields as ``history.key``)."""
    out = {}
    for k, v in rec.items():
        if k == "uuid" or k in leave_out:
            continue
        if k in ("routing_history", "admission_history"):
            v = [{kk: vv for kk, vv in e.items() if f"{k}.{kk}" not in leave_out} for e in v]
        out[k] = v
    return out


def _rounded(v):
    if isinstance(v, float):
        return round(v, 6)
    if isinstance(v, dict):
        return {k: _rounded(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_rounded(x) for x in v]
    return v


def _close(a, b):
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return a == b and type(a) is type(b)


def _leave_out(case, timed):
    out = set()
    if not timed:
        out |= TIMING
        if case in ARRIVAL_TIMED:
            out.add("arrival_time_ms")
        out |= TIMED_REUSE.get(case, set())
    if "kv_router" in CASES[case]:
        out |= WORKER_IDS
        if timed and case in TIE_TIMED:
            out |= TIMING
    return out


# kv_router cases whose timelines depend on how ties between DP ranks fell (Dynamo breaks them at
# random; two prompts on ranks of one worker share its passes, on two workers they do not)
TIE_TIMED = {"kv_dp"}


def _compare(case, mine, theirs, leave_out):
    assert len(mine) == len(theirs)
    a = [_project(json.loads(x), leave_out) for x in mine]
    b = [_project(json.loads(x), leave_out) for x in theirs]

    def key(r):  # the request's identity first, then the whole record (rounded: within tolerance)
        who = (r.get("arrival_time_ms") or 0.0, r["input_length"], r["requested_output_length"],
               r["session_id"] or "", r["turn_index"] or 0)
        return who, json.dumps(_rounded(r), sort_keys=True)

    a.sort(key=key)
    b.sort(key=key)
    misses = [f"fastsim {x}\nDynamo  {y}" for x, y in zip(a, b) if not _close(x, y)]
    assert not misses, f"{case}: {len(misses)} records differ, first:\n" + misses[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_fields_and_order_match_dynamo_161(case, tmp_path, capsys):
    mine = _replay(case, tmp_path, capsys)
    theirs = _dynamo(case)
    for line in mine:
        rec = json.loads(line)
        assert list(rec) == [f for f, _ in JSONL_FIELDS_161]
        for e in rec["routing_history"]:
            assert list(e) == ROUTING_KEYS
        for e in rec["admission_history"]:
            assert list(e) == ADMISSION_KEYS
    assert list(json.loads(theirs[0])) == [f for f, _ in JSONL_FIELDS_161]


@pytest.mark.parametrize("case", sorted(CASES))
def test_untimed_values_match_dynamo_161(case, tmp_path, capsys):
    _compare(case, _replay(case, tmp_path, capsys), _dynamo(case), _leave_out(case, timed=False))


@pytest.mark.parametrize("case", sorted(CASES))
def test_timed_values_match_dynamo_161(case, tmp_path, capsys, timing_161):
    if not timing_161:
        pytest.skip("fastsim's 1.6.1 mode does not have Dynamo 1.6.1's timing rules yet (issue 25: "
                    "R1 no decode time for a prompt's completing pass, R2 logical KV tokens)")
    _compare(case, _replay(case, tmp_path, capsys), _dynamo(case), _leave_out(case, timed=True))


def test_readmissions_are_recorded():
    # the preemption case holds readmissions with reuse, in both preemption modes
    for case in ("preemption", "preemption_fifo"):
        recs = [json.loads(x) for x in _dynamo(case)]
        again = [a for r in recs for a in r["admission_history"] if a["is_readmission"]]
        assert again and any(a["reused_input_tokens"] > 0 for a in again)


def test_kv_queue_outcomes(tmp_path, capsys):
    recs = [json.loads(x) for x in _replay("kv_queue", tmp_path, capsys)]
    queued = [r for r in recs if r["routing_history"][0]["outcome"] == "queued"]
    assert len(queued) == 4
    for r in queued:
        h = r["routing_history"][0]
        assert h["queue_entered_at_ms"] == r["arrival_time_ms"]
        assert h["queue_wait_ms"] == h["released_at_ms"] - h["queue_entered_at_ms"] > 0
        assert h["released_at_ms"] <= r["first_admit_ms"]


def test_142_mode_keeps_142_records(tmp_path, capsys):
    for case in ("closed_blank_line", "sessions_open", "disagg_trace", "kv_reject", "V16"):
        for line in _replay(case, tmp_path, capsys, version="1.4.2"):
            rec = json.loads(line)
            assert list(rec) == [f for f, _ in JSONL_FIELDS]
            assert rec["session_id"] is None and rec["turn_index"] is None
            if case in ("closed_blank_line", "sessions_open", "V16"):  # one worker
                assert rec["decode_worker_idx"] is None
    rep = fastsim.run_synthetic_trace_replay(64, 2, 2, arrival_interval_ms=1.0, dynamo_version="1.4.2")
    assert rep.dynamo_version == "1.4.2"
    assert [json.loads(x)["decode_worker_idx"] for x in rep.jsonl_lines()] == [None, None]


def test_one_worker_index_is_0_in_161_mode(tmp_path, capsys):
    assert {json.loads(x)["decode_worker_idx"] for x in _replay("one_worker", tmp_path, capsys)} == {0}


def test_a_small_readmission_log_gives_the_same_records(tmp_path, capsys, monkeypatch):
    from fastsim import sim

    want = _replay("preemption_fifo", tmp_path, capsys)
    monkeypatch.setattr(sim, "readmission_log_size", lambda workload: 1)
    assert _replay("preemption_fifo", tmp_path, capsys) == want


def test_split_run_with_readmissions_runs_whole():
    kw = dict(extra_engine_args={"num_gpu_blocks": 128, "block_size": 64}, num_workers=2,
              arrival_interval_ms=10.0)
    one = fastsim.run_synthetic_trace_replay(2048, 1024, 40, threads=1, **kw)
    two = fastsim.run_synthetic_trace_replay(2048, 1024, 40, threads=2, **kw)
    assert list(one.jsonl_lines()) == list(two.jsonl_lines())
    assert any('"is_readmission":true' in x for x in two.jsonl_lines())
    # and a split run without readmissions writes the records of the whole run
    kw["extra_engine_args"] = {"block_size": 64}
    one = fastsim.run_synthetic_trace_replay(512, 8, 40, threads=1, **kw)
    two = fastsim.run_synthetic_trace_replay(512, 8, 40, threads=2, **kw)
    assert list(one.jsonl_lines()) == list(two.jsonl_lines())


def test_unknown_version_is_refused():
    with pytest.raises(fastsim.errors.InputError, match="dynamo_version"):
        fastsim.run_synthetic_trace_replay(16, 2, 1, arrival_interval_ms=1.0, dynamo_version="1.5")


def test_synthetic_single_turn_uuids_are_dynamos(tmp_path, capsys):
    # 1.6.1 numbers a synthetic workload's single-turn requests from 1 in arrival order
    for case in ("one_worker", "dp_ranks", "preemption", "disagg_synthetic"):
        mine = {(r["uuid"], r["arrival_time_ms"]) for r in map(json.loads, _replay(case, tmp_path, capsys))}
        assert mine == {(r["uuid"], r["arrival_time_ms"]) for r in map(json.loads, _dynamo(case))}
