"""Dynamo runs recorded as test data: a folder's ``cases.tsv`` (case name, then the replay flags
Dynamo was given), each case's report (``<name>.json``) and per-request records
(``<name>.per_request.jsonl.gz``). Shared by the engine tests that replay such folders through
fastsim's API."""

from __future__ import annotations

import gzip
import json
import os
import warnings

import numpy as np
import pytest

from fastsim.api import run_synthetic_trace_replay, run_trace_replay

WALL_FIELDS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}
_INT_FLAGS = ("num_workers", "input_tokens", "output_tokens", "request_count", "trace_block_size",
              "turns_per_session", "num_prefix_groups", "arrival_seed", "num_prefill_workers",
              "num_decode_workers", "replay_concurrency")
_FLOAT_FLAGS = ("arrival_interval_ms", "inter_turn_delay_ms", "shared_prefix_ratio", "request_rate",
                "kv_event_lag_ms", "telemetry_interval_ms", "arrival_speedup_ratio")
# a random case (kv_router ties): fastsim within the range of Dynamo's runs, widened by these
BAND = {"completed_requests": ("exact", 0), "total_output_tokens": ("exact", 0),
        "duration_ms": ("rel", 0.02), "mean_ttft_ms": ("rel", 0.02), "p99_ttft_ms": ("rel", 0.05),
        "mean_itl_ms": ("rel", 0.02), "mean_e2e_latency_ms": ("rel", 0.02),
        "p99_e2e_latency_ms": ("rel", 0.05), "prefix_cache_reused_ratio": ("abs", 0.01)}


def with_known_differences(cases_, differs, decision):
    """``cases_`` as pytest parameters, each named by its case; those in ``differs`` (recorded cases
    fastsim does not reproduce yet) marked as strict expected failures, so that a fix shows up as
    an unexpected pass."""
    return [pytest.param(name, args, id=name, marks=pytest.mark.xfail(
                strict=True, reason=f"known difference from Dynamo, see docs/decisions/{decision}"))
            if name in differs else pytest.param(name, args, id=name) for name, args in cases_]


def cases(folder):
    """``[name, flags]`` of every case in ``folder/cases.tsv``."""
    return [line.split("\t") for line in (folder / "cases.tsv").read_text().splitlines() if line.strip()]


def replay(flags, folder, **extra):
    """Run Dynamo's replay ``flags`` through fastsim's API; a trace (and an engine's
    ``planner_profile_data``) is a path relative to ``folder``; ``extra`` adds API keywords."""
    a = flags.split()
    kw, trace = {}, None
    i = 0
    while i < len(a):
        if not a[i].startswith("--"):
            trace = str(folder / a[i])
            i += 1
            continue
        key, val = a[i][2:].replace("-", "_"), a[i + 1]
        kw[key] = json.loads(val) if key.endswith("engine_args") or key == "scaling_schedule" else val
        i += 2
    for k in _INT_FLAGS:
        if k in kw:
            kw[k] = int(kw[k])
    for k in _FLOAT_FLAGS:
        if k in kw:
            kw[k] = float(kw[k])
    eng = kw.get("extra_engine_args") or {}
    if "planner_profile_data" in eng:
        eng["planner_profile_data"] = str(folder / eng["planner_profile_data"])
    kw.update(extra)
    if trace is not None:
        return run_trace_replay(trace, **kw)
    return run_synthetic_trace_replay(kw.pop("input_tokens"), kw.pop("output_tokens"), kw.pop("request_count"), **kw)


def cli_replay(args, folder, tmp_path, capsys, version="1.6.1"):
    """Run ``fastsim replay args`` from ``folder`` (the flags' paths are relative to it) under
    ``version``'s rules; returns its report and its per-request records."""
    import os

    from fastsim import cli

    rep, jsonl = tmp_path / "r.json", tmp_path / "r.jsonl"
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        assert cli.main(["replay", *args, "--dynamo-version", version, "--report-json", str(rep),
                         "--report-jsonl", str(jsonl)]) == 0
    finally:
        os.chdir(cwd)
    capsys.readouterr()
    return json.loads(rep.read_text()), [json.loads(line) for line in jsonl.read_text().splitlines()]


def assert_engines_agree(fast, slow):
    """Two reports of one run, by the compiled engine and by a reference engine: the per-request
    times and lengths identical, every numeric summary field within 1e-12."""
    for col in ("arrival_time_ms", "first_admit_ms", "first_token_ms", "last_token_ms", "reused_input_tokens",
                "output_length"):
        np.testing.assert_array_equal(fast.requests[col].to_numpy(), slow.requests[col].to_numpy(), err_msg=col)
    for k, v in slow.summary.items():
        if k in WALL_FIELDS or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        assert fast.summary[k] == pytest.approx(v, rel=1e-12, abs=1e-12), k


def assert_summary_matches(summary, ref):
    """Every numeric field of Dynamo's report ``ref`` within 1e-9 (wall-clock fields aside)."""
    for k, v in ref.items():
        if k in WALL_FIELDS or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        assert summary[k] == pytest.approx(v, rel=1e-9, abs=1e-9), k


def per_request(folder, name):
    """Dynamo's per-request records of case ``name``."""
    with gzip.open(folder / f"{name}.per_request.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


def assert_timelines_match(requests, rows, columns, order=None):
    """Each request's ``columns`` (times to the ns) equal to Dynamo's records ``rows``; requests
    are matched by (arrival, input length, requested output length) unless ``order`` gives
    (fastsim's rows, Dynamo's rows) in matching order."""
    if order is None:
        order_ref = sorted(range(len(rows)), key=lambda i: (rows[i]["arrival_time_ms"], rows[i]["input_length"],
                                                            rows[i]["requested_output_length"], i))
        arr = requests["arrival_time_ms"].to_numpy()
        isl = requests["input_length"].to_numpy()
        osl = requests["requested_output_length"].to_numpy()
        order_mine = sorted(range(len(requests)), key=lambda i: (arr[i], int(isl[i]), int(osl[i]), i))
    else:
        order_mine, order_ref = order
    for col in columns:
        got = requests[col].to_numpy()[order_mine].astype(float)
        want = np.array([np.nan if rows[i][col] is None else rows[i][col] for i in order_ref], dtype=float)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6, err_msg=col)


def band_misses(got, runs, skip=()):
    """The fields of :data:`BAND` where the report ``got`` falls outside Dynamo's ``runs``."""
    misses = []
    for m, (kind, tol) in BAND.items():
        if m in skip:
            continue
        lo, hi, v = min(r[m] for r in runs), max(r[m] for r in runs), got[m]
        if kind == "exact":
            bad = not lo <= v <= hi
        elif kind == "abs":
            bad = max(lo - v, v - hi, 0.0) > tol + 0.03 * abs(hi)
        else:
            bad = max(lo - v, v - hi, 0.0) / max(abs(lo), abs(hi), 1e-12) > tol + 0.03
        if bad:
            misses.append(f"{m}: fastsim {v}, Dynamo {lo}..{hi}")
    return misses


def assert_matches_dynamo(folder, name, args, **extra):
    """Case ``name`` of ``folder`` replayed: every report field within 1e-9 of Dynamo's, every
    request's admission, first and last token times and reused tokens to the ns (a multi-turn
    synthetic case's session K turn t is row K * turns + t)."""
    rep = replay(args, folder, **extra)
    assert_summary_matches(rep.summary, json.loads((folder / f"{name}.json").read_text()))
    rows = per_request(folder, name)
    order = None
    if rows[0]["session_id"] is not None:
        turns = int(args.split("--turns-per-session")[1].split()[0]) if "--turns-per-session" in args else 1
        order = ([int(r["session_id"].split("_")[1]) * turns + r["turn_index"] for r in rows], list(range(len(rows))))
    assert_timelines_match(rep.requests, rows,
                           ("first_admit_ms", "first_token_ms", "last_token_ms", "reused_input_tokens"), order)


def replay_capped(args, folder, **extra):
    """:func:`replay` of Dynamo's flags ``args`` with a time cap (seconds) and a closed loop's
    concurrency passed as the API's keywords (its warnings about requests rejected or left in
    flight at the cap silenced)."""
    flags = args.split()
    for flag, key, convert in (("--max-sim-time-seconds", "max_sim_time_ms", lambda v: float(v) * 1000.0),
                               ("--replay-concurrency", "replay_concurrency", int)):
        if flag in flags:
            i = flags.index(flag)
            extra[key] = convert(flags[i + 1])
            del flags[i:i + 2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return replay(" ".join(flags), folder, **extra)


def assert_refused_by_name(folder, args, words, capsys):
    """The command line refuses Dynamo's flags ``args`` (run from ``folder``) with exit status 2 and
    a "not supported yet" message containing ``words``."""
    from fastsim import cli

    cwd = os.getcwd()
    os.chdir(folder)
    try:
        assert cli.main(["replay", *args, "--dynamo-version", "1.6.1"]) == 2
    finally:
        os.chdir(cwd)
    err = capsys.readouterr().err
    assert words in err and "not supported yet" in err, err
