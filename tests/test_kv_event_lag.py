"""``kv_event_lag_ms`` (Dynamo 1.6.1, kv_router): the router's index sees the blocks a pass stored
or removed ``lag`` ms after the pass ends; prefill and completion releases and the active blocks
stay immediate (docs/decisions/0230). Dynamo's outputs: ``tests/data/kv_event_lag`` (README)."""
import gzip
import json
import math
from pathlib import Path

import pytest

from fastsim.api import run_trace_replay
from fastsim.errors import FastsimError

DATA = Path(__file__).parent / "data" / "kv_event_lag"
CASES = json.loads((DATA / "cases.json").read_text())
WALL = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}
# check_reference.py's loose metrics for random kv_router runs: (kind, tolerance)
LOOSE = {
    "completed_requests": ("exact", 0), "total_output_tokens": ("exact", 0),
    "duration_ms": ("rel", 0.02), "mean_ttft_ms": ("rel", 0.02), "p99_ttft_ms": ("rel", 0.05),
    "mean_itl_ms": ("rel", 0.02), "mean_e2e_latency_ms": ("rel", 0.02),
    "p99_e2e_latency_ms": ("rel", 0.05), "prefix_cache_reused_ratio": ("abs", 0.01),
}


def _dynamo(name):
    with gzip.open(DATA / f"{name}.json.gz") as f:
        return json.load(f)


def _kwargs(args):
    """The replay flags of a case as ``run_trace_replay`` keywords."""
    kw = {}
    for flag, value in zip(args[::2], args[1::2]):
        key = flag.lstrip("-").replace("-", "_")
        if key == "extra_engine_args":
            kw[key] = json.loads(value)
        elif key in ("num_workers", "trace_block_size"):
            kw[key] = int(value)
        elif key == "kv_event_lag_ms":
            kw[key] = float(value)
        else:
            kw[key] = value
    return kw


def _run(name, tmp_path=None, seed=0):
    case = CASES[name]
    jsonl = None if tmp_path is None else tmp_path / f"{name}.jsonl"
    report = run_trace_replay(str(DATA / case["trace"]), seed=seed, report_jsonl_path=jsonl, **_kwargs(case["args"]))
    return report, jsonl


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c["records"]])
def test_probes_see_what_dynamo_indexer_sees(name, tmp_path):
    """Per request: the best overlap the index offered is Dynamo's (deterministic), and so is the
    TTFT where that overlap is positive (the target holding it is strictly cheapest; without it
    the two targets tie, and Dynamo breaks ties at random)."""
    dyn = _dynamo(name)["records"]
    _, jsonl = _run(name, tmp_path)
    ours = []
    for line in jsonl.read_text().splitlines():
        d = json.loads(line)
        ours.append((d["arrival_time_ms"], d["routing_history"][0]["best_available_overlap_blocks"], d["ttft_ms"]))
    ours.sort()
    assert len(ours) == len(dyn[0])
    for i, (t, best, ttft) in enumerate(ours):
        rows = [run[i] for run in dyn]
        assert all(r["arrival_time_ms"] == t for r in rows)
        assert best == rows[0]["best_overlap_blocks"] and all(r["best_overlap_blocks"] == best for r in rows), t
        if best > 0:
            assert all(math.isclose(ttft, r["ttft_ms"], rel_tol=1e-9) for r in rows), (t, ttft)


def test_a_lag_longer_than_the_run_reproduces_dynamo_exactly():
    """No block ever reaches the index: every overlap is 0 and Dynamo's runs agree."""
    reports = _dynamo("synth2000_lag1e8")["reports"]
    ours = _run("synth2000_lag1e8")[0].summary
    for key, want in reports[0].items():
        if key in WALL or not isinstance(want, (int, float)) or isinstance(want, bool):
            continue
        assert math.isclose(ours[key], want, rel_tol=1e-9, abs_tol=1e-12), (key, ours[key], want)


@pytest.mark.parametrize("seed", [0, 1])
def test_lag_500_within_dynamo_band(seed):
    """Dynamo breaks ties at random: fastsim's run lies within the range of its runs (widened by
    3%) in check_reference.py's loose metrics."""
    reports = _dynamo("synth2000_lag500")["reports"]
    ours = _run("synth2000_lag500", seed=seed)[0].summary
    for key, (kind, tol) in LOOSE.items():
        lo, hi = min(r[key] for r in reports), max(r[key] for r in reports)
        v = ours[key]
        if kind == "exact":
            assert lo <= v <= hi, key
        elif kind == "rel":
            d = max(lo - v, v - hi, 0.0)
            assert d <= (tol + 0.03) * abs(hi), (key, v, lo, hi)
        else:
            assert max(lo - v, v - hi, 0.0) <= tol + 0.03, (key, v, lo, hi)


def test_lag_zero_is_no_lag():
    kw = _kwargs(CASES["removed_lag300"]["args"])
    kw.pop("kv_event_lag_ms")
    trace = str(DATA / CASES["removed_lag300"]["trace"])
    a = run_trace_replay(trace, **kw).summary
    b = run_trace_replay(trace, kv_event_lag_ms=0, **kw).summary
    assert {k: v for k, v in a.items() if k not in WALL} == {k: v for k, v in b.items() if k not in WALL}


@pytest.mark.parametrize(
    "extra, words",
    [
        ({"router_mode": "round_robin"}, "kv_event_lag_ms only supports router_mode='kv_router'"),
        ({"dynamo_version": "1.4.2"}, "Dynamo 1.4.2 has no KV event lag"),
        ({"kv_event_lag_ms": float("nan")}, "kv_event_lag_ms must be finite and non-negative"),
    ],
)
def test_refusals(extra, words):
    kw = _kwargs(CASES["stored_lag300"]["args"])
    kw.update(extra)
    with pytest.raises(FastsimError, match=words.replace("(", r"\(").replace(")", r"\)")):
        run_trace_replay(str(DATA / CASES["stored_lag300"]["trace"]), **kw)


def test_cli_flag_reaches_the_router(capsys, tmp_path):
    """``fastsim replay --kv-event-lag-ms`` gives the API's per-request overlaps."""
    from fastsim.cli import main

    case = CASES["removed_lag300"]
    rows = tmp_path / "r.jsonl"
    code = main(["replay", str(DATA / case["trace"]), *case["args"], "--report-jsonl", str(rows), "--quiet",
                 "--no-progress"])
    capsys.readouterr()
    assert code == 0
    best = sorted((json.loads(x)["arrival_time_ms"], json.loads(x)["routing_history"][0]["best_available_overlap_blocks"])
                  for x in rows.read_text().splitlines())
    want = [(r["arrival_time_ms"], r["best_overlap_blocks"]) for r in _dynamo("removed_lag300")["records"][0]]
    assert best == sorted(want)
