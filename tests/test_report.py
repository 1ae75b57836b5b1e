"""fastsim/report.py against Dynamo 1.4.2: collector tests C18-C20, goodput and JSONL behaviour seen
in 1.4.2 runs, the report key set, the AIPerf table and a V12 reconstruction from its JSONL.
Every reference number is copied in here (no access to shared/ or Dynamo at run time)."""

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest

from fastsim.report import (JSONL_FIELDS, build_report, format_report_table,
                            make_gap_stats, uuid_for_row)

NAN = float("nan")
REF = Path(__file__).parent / "data" / "reference"

# Dynamo 1.4.2's V01.json, verbatim: its key set is the report's key set without an SLA.
V01 = {
    "completed_requests": 1000, "decode_gpus_per_worker": 1,
    "decode_worker_seconds": 41.34295281000015, "duration_ms": 41342.95281000015,
    "first_admission_prefix_cache_reused_ratio": 0.0, "gpu_hours": 0.011484153558333375,
    "input_throughput_tok_s": 24768.42920983409, "max_e2e_latency_ms": 6725.249986000032,
    "max_itl_ms": 63.90838300000178, "max_output_token_throughput_per_user": 172.53239425101353,
    "max_tpot_ms": 52.217609535433354, "max_ttft_ms": 110.85262100007094,
    "max_ttst_ms": 63.90838300000178, "mean_e2e_latency_ms": 6188.511739037069,
    "mean_itl_ms": 48.09869116800008, "mean_output_token_throughput_per_user": 25.592765024193422,
    "mean_tpot_ms": 48.0986911680002, "mean_ttft_ms": 79.97796070104263,
    "mean_ttst_ms": 49.50408568700006, "median_e2e_latency_ms": 6680.532064000061,
    "median_itl_ms": 47.04011666295806, "median_output_token_throughput_per_user": 21.26368140450145,
    "median_tpot_ms": 52.041127566929454, "median_ttft_ms": 77.32892199998969,
    "median_ttst_ms": 47.0389299999988, "min_e2e_latency_ms": 1382.952810000148,
    "min_itl_ms": 5.796013000000002, "min_output_token_throughput_per_user": 15.647399496869951,
    "min_tpot_ms": 10.365564929133953, "min_ttft_ms": 38.283432, "min_ttst_ms": 5.796013000000002,
    "num_requests": 1000, "output_throughput_tok_s": 3096.053651229261,
    "p75_e2e_latency_ms": 6710.070604000088, "p75_itl_ms": 62.48964595721651,
    "p75_output_token_throughput_per_user": 21.348906495075507, "p75_tpot_ms": 52.08475765354346,
    "p75_ttft_ms": 85.28262800007724, "p75_ttst_ms": 47.04166599999735,
    "p90_e2e_latency_ms": 6718.61890000007, "p90_itl_ms": 63.8796526419739,
    "p90_output_token_throughput_per_user": 23.974734795552248, "p90_tpot_ms": 52.21642377952714,
    "p90_ttft_ms": 107.10300100009044, "p90_ttst_ms": 63.90838300000178,
    "p95_e2e_latency_ms": 6721.739117000074, "p95_itl_ms": 63.8796526419739,
    "p95_output_token_throughput_per_user": 78.80693145854933, "p95_tpot_ms": 52.21685493700873,
    "p95_ttft_ms": 108.8416000000725, "p95_ttst_ms": 63.90838300000178,
    "p99_e2e_latency_ms": 6724.453513000055, "p99_itl_ms": 63.8796526419739,
    "p99_output_token_throughput_per_user": 111.60893078129207, "p99_tpot_ms": 52.21758799212605,
    "p99_ttft_ms": 110.40619400004289, "p99_ttst_ms": 63.90838300000178,
    "prefill_gpus_per_worker": 0, "prefill_worker_seconds": 0.0, "prefix_cache_reused_ratio": 0.0,
    "processed_output_tokens_per_s": 3341705.6984854136, "processed_tokens": 1152000,
    "processed_tokens_per_s": 30075351.28636872, "request_throughput_rps": 24.187919150228602,
    "std_e2e_latency_ms": 1136.3837667898604, "std_itl_ms": 13.33704069889042,
    "std_output_token_throughput_per_user": 19.868313739446492, "std_tpot_ms": 8.943890651717156,
    "std_ttft_ms": 16.509207126454406, "std_ttst_ms": 8.092034792835214,
    "total_input_tokens": 1024000, "total_output_tokens": 128000,
    "total_throughput_tok_s": 27864.48286106335, "wall_time_ms": 38.303792,
}

# The table Dynamo 1.4.2 printed for V01 (logs/V01.run1.stdout without its "Saved ..." line).
V01_TABLE = """NVIDIA AIPerf | LLM Metrics
┏━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━┓
┃ Metric                                             ┃      avg ┃      min ┃      max ┃      p99 ┃      p90 ┃      p75 ┃      std ┃
┡━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━┩
┃ Time to First Token (ms)                           ┃    79.98 ┃    38.28 ┃   110.85 ┃   110.41 ┃   107.10 ┃    85.28 ┃    16.51 ┃
┃ Time to Second Token (ms)                          ┃    49.50 ┃     5.80 ┃    63.91 ┃    63.91 ┃    63.91 ┃    47.04 ┃     8.09 ┃
┃ Request Latency (ms)                               ┃ 6,188.51 ┃ 1,382.95 ┃ 6,725.25 ┃ 6,724.45 ┃ 6,718.62 ┃ 6,710.07 ┃ 1,136.38 ┃
┃ Inter Token Latency (ms)                           ┃    48.10 ┃     5.80 ┃    63.91 ┃    63.88 ┃    63.88 ┃    62.49 ┃    13.34 ┃
┃ Output Token Throughput Per User (tokens/sec/user) ┃    25.59 ┃    15.65 ┃   172.53 ┃   111.61 ┃    23.97 ┃    21.35 ┃    19.87 ┃
┃ Output Token Throughput (tokens/sec)               ┃ 3,096.05 ┃      N/A ┃      N/A ┃      N/A ┃      N/A ┃      N/A ┃      N/A ┃
┃ Request Throughput (requests/sec)                  ┃    24.19 ┃      N/A ┃      N/A ┃      N/A ┃      N/A ┃      N/A ┃      N/A ┃
┃ Request Count (requests)                           ┃ 1,000.00 ┃      N/A ┃      N/A ┃      N/A ┃      N/A ┃      N/A ┃      N/A ┃
└━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┴━━━━━━━━━━┴━━━━━━━━━━┴━━━━━━━━━━┴━━━━━━━━━━┴━━━━━━━━━━┴━━━━━━━━━━┴━━━━━━━━━━┘
Wall Time (ms): 38.30
Prefix Cache Reused Ratio: 0.00
First Admission Prefix Cache Reused Ratio: 0.00"""

GOODPUT_KEYS = {"goodput_completed_requests", "goodput_request_throughput_rps",
                "goodput_output_throughput_tok_s"}
INT_KEYS = {"num_requests", "completed_requests", "total_input_tokens", "total_output_tokens",
            "prefill_gpus_per_worker", "decode_gpus_per_worker", "processed_tokens",
            "goodput_completed_requests"}


def mk(rows):
    """req dict from per-request dicts (token times list ``tokens``; status name)."""
    codes = {"pending": 0, "in_flight": 1, "completed": 2, "rejected": 3, "failed": 4}
    n = len(rows)
    req = {k: np.full(n, NAN) for k in ("arrival_ms", "first_admit_ms", "first_token_ms",
                                        "second_token_ms", "last_token_ms", "terminal_ms")}
    for k in ("input_length", "requested_output_length", "output_length", "reused_tokens",
              "first_reused_tokens"):
        req[k] = np.zeros(n, dtype=np.int64)
    req["worker_idx"] = np.full(n, -1, dtype=np.int64)
    req["status"] = np.zeros(n, dtype=np.int8)
    for i, r in enumerate(rows):
        t = r.get("tokens", [])
        req["arrival_ms"][i] = r.get("arrival", 0.0)
        req["first_admit_ms"][i] = r.get("admit", NAN)
        req["terminal_ms"][i] = r.get("terminal", t[-1] if t else NAN)
        if t:
            req["first_token_ms"][i], req["last_token_ms"][i] = t[0], t[-1]
        if len(t) >= 2:
            req["second_token_ms"][i] = t[1]
        req["output_length"][i] = len(t)
        req["input_length"][i] = r.get("isl", 16)
        req["requested_output_length"][i] = r.get("osl", len(t))
        req["reused_tokens"][i] = r.get("reused", 0)
        req["first_reused_tokens"][i] = r.get("first_reused", r.get("reused", 0))
        req["worker_idx"][i] = r.get("worker", -1)
        req["status"][i] = codes[r.get("status", "completed")]
    return req


def gaps_of(rows):
    g = [b - a for r in rows if r.get("status", "completed") == "completed"
         for a, b in zip(r.get("tokens", []), r.get("tokens", [])[1:])]
    return make_gap_stats(np.array(g, dtype=float))


def report(rows, **meta):
    m = dict(num_workers=1, single_path=True, decode_gpus_per_worker=1, wall_time_ms=1.0)
    m.update(meta)
    return build_report(mk(rows), gaps_of(rows), m)


# ---------------------------------------------------------------- collector conformance


def test_c18_zero_output_completion_counts_without_latency_samples():
    rows = [dict(arrival=0.0, isl=32, osl=0, admit=5.0, terminal=25.0)]
    s = report(rows, decode_gpus_per_worker=4).summary
    assert s["completed_requests"] == 1 and s["num_requests"] == 1
    assert s["total_input_tokens"] == 32 and s["total_output_tokens"] == 0
    assert s["duration_ms"] == 25.0 and s["decode_worker_seconds"] == 0.025
    assert s["gpu_hours"] == pytest.approx(0.1 / 3600, rel=1e-15)
    assert s["mean_ttft_ms"] == 0.0 and s["mean_e2e_latency_ms"] == 0.0
    assert s["request_throughput_rps"] == 1 / 0.025


def test_c18_multi_path_worker_seconds_come_from_meta():
    rows = [dict(arrival=0.0, isl=32, osl=0, admit=5.0, terminal=25.0)]
    s = report(rows, single_path=False, decode_worker_seconds=0.025,
               decode_gpus_per_worker=4).summary
    assert s["decode_worker_seconds"] == 0.025
    assert s["gpu_hours"] == pytest.approx(0.1 / 3600, rel=1e-15)
    # V06 (disaggregated 2P/4D, 1 GPU each): gpu_hours = (P_ws + D_ws)/3600
    s = report(rows, single_path=False, prefill_worker_seconds=22.910262735999854,
               decode_worker_seconds=45.82052547199971, prefill_gpus_per_worker=1).summary
    assert s["gpu_hours"] == 0.019091885613333213 and s["prefill_gpus_per_worker"] == 1


def test_c19_per_request_record():
    rows = [dict(arrival=0.0, isl=100, osl=4, admit=5.0, reused=30, tokens=[50.0, 60.0, 75.0, 95.0],
                 terminal=95.0)]
    req = mk(rows)
    req.update(prefill_admit_ms=np.array([5.0]), decode_admit_ms=np.array([25.0]),
               decode_reused_input_tokens=np.array([40]))
    rep = build_report(req, gaps_of(rows), dict(single_path=True, decode_gpus_per_worker=1))
    rec = json.loads(next(rep.jsonl_lines()))
    assert (rec["ttft_ms"], rec["ttst_ms"], rec["e2e_latency_ms"], rec["itl_ms"]) == (50.0, 10.0, 95.0, 15.0)
    assert rec["output_length"] == 4 and rec["reused_input_tokens"] == 30
    assert rec["decode_reused_input_tokens"] == 40 and rec["prefill_admit_ms"] == 5.0
    assert rec["decode_admit_ms"] == 25.0 and rec["source_held_ms"] is None
    s = rep.summary
    assert s["mean_itl_ms"] == 15.0 and s["max_itl_ms"] == 20.0 and s["min_itl_ms"] == 10.0
    assert s["mean_tpot_ms"] == 15.0 and s["mean_ttst_ms"] == 10.0


def test_c19_token_without_terminal_is_not_a_completion():
    rows = [dict(arrival=0.0, admit=5.0, tokens=[50.0], terminal=NAN, status="in_flight")]
    rep = report(rows)
    s = rep.summary
    assert s["completed_requests"] == 0 and s["duration_ms"] == 0.0 and s["num_requests"] == 1
    assert s["decode_worker_seconds"] == 1e-9
    assert list(rep.jsonl_lines()) == []  # in-flight requests are left out of the JSONL


def test_c20_distribution_rule():
    vals = [0, 1, 1, 2.5, 4, 4, 7.25, 9.5, 15, 22, 22, 100]
    rows = [dict(arrival=0.0, admit=0.0, tokens=[float(v)]) for v in reversed(vals)]
    s = report(rows).summary
    assert s["mean_ttft_ms"] == 15.6875 and s["min_ttft_ms"] == 0 and s["max_ttft_ms"] == 100
    assert (s["median_ttft_ms"], s["p75_ttft_ms"], s["p90_ttft_ms"], s["p95_ttft_ms"],
            s["p99_ttft_ms"]) == (7.25, 15, 22, 22, 100)
    assert s["std_ttft_ms"] == pytest.approx(26.49353793066025, rel=1e-15)
    assert s["mean_e2e_latency_ms"] == 15.6875 and s["mean_ttst_ms"] == 0.0  # osl 1: no TTST


def test_q12_nearest_rank_half_away_in_report():
    # n=6 distinct TTFTs: p50 uses rank 3 (banker's rounding would pick rank 2)
    rows = [dict(arrival=0.0, admit=0.0, tokens=[float(v)]) for v in (6, 1, 5, 2, 4, 3)]
    s = report(rows).summary
    assert s["median_ttft_ms"] == 4.0 and s["std_ttft_ms"] == pytest.approx(np.std([1, 2, 3, 4, 5, 6]))
    rows = [dict(arrival=0.0, admit=0.0, tokens=[float(v)]) for v in range(1, 8)]
    s = report(rows).summary
    assert s["p75_ttft_ms"] == 6.0 and s["p90_ttft_ms"] == 6.0  # n=7: ranks 5 and 5


# ---------------------------------------------------------------- goodput (C20 and 1.4.2 runs)


def test_c20_zero_output_goodput_requires_e2e_only_sla():
    rows = [dict(arrival=0.0, isl=32, osl=0, admit=5.0, terminal=100.0)]
    assert report(rows, sla_e2e_ms=100.0).summary["goodput_completed_requests"] == 1
    assert report(rows, sla_ttft_ms=1000.0).summary["goodput_completed_requests"] == 0


# Dynamo 1.4.2 run (bs 16): A zero-output (terminal 16.987721), B 3 tokens at arrival 100,
# C rejected at 200. goodput for each SLA, as reported.
RUN_X2 = [dict(arrival=0.0, isl=32, osl=0, admit=0.0, terminal=16.987721),
          dict(arrival=100.0, isl=32, osl=3, admit=100.0, tokens=[122.734314, 128.484203, 134.234092]),
          dict(arrival=200.0, isl=320000, osl=3, terminal=200.0, status="rejected")]


@pytest.mark.parametrize("sla,good,tokens", [
    (dict(sla_e2e_ms=1000), 2, 3), (dict(sla_ttft_ms=1000), 1, 3), (dict(sla_itl_ms=1000), 1, 3),
    (dict(sla_e2e_ms=1000, sla_itl_ms=1000), 1, 3), (dict(sla_ttft_ms=1000, sla_itl_ms=1000), 1, 3),
    (dict(sla_e2e_ms=0.001), 0, 0), (dict(sla_e2e_ms=16.9), 0, 0), (dict(sla_e2e_ms=17.0), 1, 0),
    (dict(sla_itl_ms=5.7), 0, 0), (dict(sla_ttft_ms=22.7), 0, 0)])
def test_goodput_matches_dynamo_run(sla, good, tokens):
    """The first six SLAs were run on Dynamo 1.4.2 with RUN_X2; 16.9/17.0 on A alone (16.987721)."""
    s = report(RUN_X2, **sla).summary
    assert s["completed_requests"] == 2 and s["num_requests"] == 3
    assert s["duration_ms"] == 134.234092 and s["mean_ttft_ms"] == 22.734313999999998
    assert s["goodput_completed_requests"] == good
    assert s["goodput_request_throughput_rps"] == good / 0.134234092
    assert s["goodput_output_throughput_tok_s"] == tokens / 0.134234092
    if good == 2:
        assert s["goodput_request_throughput_rps"] == 14.899344646365991
        assert s["goodput_output_throughput_tok_s"] == 22.349016969548988
    assert set(s) == set(V01) | GOODPUT_KEYS


def test_itl_sla_skipped_for_single_token_output():
    # Dynamo 1.4.2: one 1-token request, sla_itl 0.0001 -> good (no inter-token interval)
    rows = [dict(arrival=0.0, isl=32, admit=0.0, tokens=[22.734314])]
    s = report(rows, sla_itl_ms=0.0001).summary
    assert s["goodput_completed_requests"] == 1
    assert s["goodput_request_throughput_rps"] == 43.9863723180739


# ---------------------------------------------------------------- keys, JSON, JSONL, table


def test_summary_keys_and_types_equal_v01():
    s = report(RUN_X2).summary
    assert set(s) == set(V01)
    for k, v in s.items():
        assert type(v) is (int if k in INT_KEYS else float), k


def test_empty_inputs():
    rep = report([])
    s = rep.summary
    assert set(s) == set(V01) and s["num_requests"] == 0 and s["duration_ms"] == 0.0
    assert all(v == 0 for k, v in s.items()
               if k not in ("decode_worker_seconds", "gpu_hours", "wall_time_ms",
                            "decode_gpus_per_worker"))
    assert s["decode_worker_seconds"] == 1e-9 and s["gpu_hours"] == 1e-9 / 3600
    assert list(rep.jsonl_lines()) == [] and len(rep.requests) == 0
    assert "Request Count (requests)" in rep.format_table()
    only_rejected = report([dict(arrival=0.0, terminal=0.0, status="rejected")])
    assert only_rejected.summary["num_requests"] == 1 and only_rejected.summary["mean_itl_ms"] == 0.0
    pending = report([dict(status="pending")])
    assert pending.summary["num_requests"] == 0


def test_processed_tokens_use_wall_time():
    rows = [dict(arrival=0.0, isl=1024, admit=0.0, tokens=[10.0, 20.0])]
    s = report(rows, wall_time_ms=38.303792).summary
    assert s["processed_tokens"] == 1026
    assert s["processed_tokens_per_s"] == 1026 / 38.303792 * 1000
    assert report(rows, wall_time_ms=0.0).summary["processed_tokens_per_s"] == 0.0


def test_to_json_like_dynamo(tmp_path):
    rep = report(RUN_X2)
    p = rep.to_json(tmp_path / "sub" / "r.json")
    assert p == tmp_path / "sub" / "r.json"
    assert p.read_text() == json.dumps(rep.summary, indent=2, sort_keys=True) + "\n"
    q = rep.to_json(tmp_path)
    assert q.parent == tmp_path and q.name.startswith("fastsim_replay_report_") and q.suffix == ".json"
    assert json.loads(q.read_text()) == rep.summary


def test_jsonl_fields_order_nulls_and_sorting(tmp_path):
    rows = [dict(arrival=5.0, admit=5.0, tokens=[9.0, 11.0], worker=2),
            dict(arrival=1.0, admit=1.0, tokens=[3.0], worker=0),
            dict(arrival=5.0, terminal=5.0, status="rejected"),
            dict(arrival=2.0, admit=2.0, tokens=[4.0], terminal=NAN, status="in_flight"),
            dict(arrival=3.0, terminal=3.5, status="failed")]
    p = report(rows, single_path=False).to_jsonl(tmp_path / "r.jsonl")
    recs = [json.loads(ln) for ln in p.read_text().splitlines()]
    assert [list(r) for r in recs] == [[f for f, _ in JSONL_FIELDS]] * 4
    assert [r["uuid"] for r in recs] == [uuid_for_row(i) for i in (1, 4, 0, 2)]
    assert [r["terminal_status"] for r in recs] == ["completed", "failed", "completed", "rejected"]
    assert recs[2]["decode_worker_idx"] == 2 and recs[0]["decode_worker_idx"] == 0
    rej = recs[3]
    assert rej["first_admit_ms"] is None and rej["ttft_ms"] is None and rej["output_length"] == 0
    assert rej["terminal_time_ms"] == 5.0 and rej["session_id"] is None and rej["itl_ms"] is None
    assert recs[2]["itl_ms"] == 2.0 and recs[0]["ttst_ms"] is None


def test_jsonl_line_text_matches_dynamo():
    # Dynamo 1.4.2's line for request B of RUN_X2 (uuid replaced by fastsim's deterministic one)
    want = ('{"session_id":null,"turn_index":null,"uuid":"00000000-0000-0000-0000-000000000001",'
            '"arrival_time_ms":100.0,"first_admit_ms":100.0,"terminal_time_ms":134.234092,'
            '"first_token_ms":122.734314,"last_token_ms":134.234092,"ttft_ms":22.734313999999998,'
            '"ttst_ms":5.74988900000001,"e2e_latency_ms":34.234092000000004,'
            '"itl_ms":5.749889000000003,"input_length":32,"requested_output_length":3,'
            '"output_length":3,"reused_input_tokens":0,"prefill_worker_idx":null,'
            '"decode_worker_idx":null,"prefill_admit_ms":null,"source_held_ms":null,'
            '"destination_reserved_ms":null,"destination_activated_ms":null,"decode_admit_ms":null,'
            '"source_released_ms":null,"decode_reused_input_tokens":null,'
            '"prefill_route_overlap_tokens":null,"decode_route_overlap_tokens":null,'
            '"terminal_status":"completed"}')
    rows = [dict(RUN_X2[1], tokens=[122.734314, 128.484203, 134.234092])]
    rows = [dict(status="rejected", arrival=0.0, terminal=0.0)] + rows
    lines = list(report(rows).jsonl_lines())
    assert json.loads(lines[1])["ttst_ms"] == 5.74988900000001
    assert lines[1] == want


def test_float_text_like_serde_json():
    from fastsim.report import _fmt_float

    assert [_fmt_float(x) for x in (0.0, 16.0, 5e-05, 1e-06, 1e16, 1.5e17, 123.25)] == [
        "0.0", "16.0", "0.00005", "1e-6", "1e16", "1.5e17", "123.25"]


def test_requests_dataframe():
    rows = [dict(arrival=0.0, admit=0.0, tokens=[1.0, 2.0], worker=1),
            dict(arrival=1.0, terminal=1.0, status="rejected"), dict(status="pending")]
    df = report(rows).requests
    assert len(df) == 3 and df.index.name == "row"
    assert list(df["status"]) == ["completed", "rejected", "pending"]
    assert df["terminal_status"].tolist() == ["completed", "rejected", None]
    assert df["decode_worker_idx"].tolist()[0] == 1 and df["decode_worker_idx"].isna().tolist() == [False, True, True]
    assert df["uuid"].tolist()[1] == uuid_for_row(1) == "00000000-0000-0000-0000-000000000001"
    assert math.isnan(df["ttft_ms"][1]) and df["itl_ms"][0] == 1.0


def test_table_reproduces_dynamo_v01_output():
    assert format_report_table(V01) == V01_TABLE


def test_table_golden_small_report():
    rows = [dict(arrival=0.0, isl=10, admit=0.0, tokens=[1000.0, 1500.0, 3000.0])]
    rep = report(rows, wall_time_ms=2.5)
    # hand-checked: ITL gaps 500/1500 -> p75..p99 rank 1 -> bucket 3657 of 1500 = 1499.67;
    # otpu 2.0 -> 1.9997; std column is as wide as "500.00"
    top = "━" * 52 + "┳" + "┳".join(["━" * 10] * 6) + "┳" + "━" * 8
    mid, bot = top.replace("┳", "╇"), top.replace("┳", "┴")
    want = "\n".join([
        "NVIDIA AIPerf | LLM Metrics",
        "┏" + top + "┓",
        "┃ Metric                                             ┃      avg ┃      min ┃      max ┃      p99 ┃      p90 ┃      p75 ┃    std ┃",
        "┡" + mid + "┩",
        "┃ Time to First Token (ms)                           ┃ 1,000.00 ┃ 1,000.00 ┃ 1,000.00 ┃ 1,000.00 ┃ 1,000.00 ┃ 1,000.00 ┃   0.00 ┃",
        "┃ Time to Second Token (ms)                          ┃   500.00 ┃   500.00 ┃   500.00 ┃   500.00 ┃   500.00 ┃   500.00 ┃   0.00 ┃",
        "┃ Request Latency (ms)                               ┃ 3,000.00 ┃ 3,000.00 ┃ 3,000.00 ┃ 3,000.00 ┃ 3,000.00 ┃ 3,000.00 ┃   0.00 ┃",
        "┃ Inter Token Latency (ms)                           ┃ 1,000.00 ┃   500.00 ┃ 1,500.00 ┃ 1,499.67 ┃ 1,499.67 ┃ 1,499.67 ┃ 500.00 ┃",
        "┃ Output Token Throughput Per User (tokens/sec/user) ┃     1.33 ┃     0.67 ┃     2.00 ┃     2.00 ┃     2.00 ┃     2.00 ┃   0.67 ┃",
        "┃ Output Token Throughput (tokens/sec)               ┃     1.00 ┃      N/A ┃      N/A ┃      N/A ┃      N/A ┃      N/A ┃    N/A ┃",
        "┃ Request Throughput (requests/sec)                  ┃     0.33 ┃      N/A ┃      N/A ┃      N/A ┃      N/A ┃      N/A ┃    N/A ┃",
        "┃ Request Count (requests)                           ┃     1.00 ┃      N/A ┃      N/A ┃      N/A ┃      N/A ┃      N/A ┃    N/A ┃",
        "└" + bot + "┘",
        "Wall Time (ms): 2.50",
        "Prefix Cache Reused Ratio: 0.00",
        "First Admission Prefix Cache Reused Ratio: 0.00"])
    assert rep.format_table() == want
    assert repr(rep).startswith("Report(num_requests=1, completed=1, duration_ms=3000.000")


# ---------------------------------------------------------------- V12 from its per-request JSONL

# Dynamo 1.4.2 V12.json (1 worker, mooncake_synth_500, block 64): every key recomputable from the
# JSONL (the pooled ITL / otpu statistics need all gaps, and the first-admission ratio the
# first-admission reuse, which the JSONL does not carry).
V12 = {
    "completed_requests": 500, "decode_gpus_per_worker": 1, "decode_worker_seconds": 35.374946830999974,
    "duration_ms": 35374.94683099997, "gpu_hours": 0.009826374119722215,
    "input_throughput_tok_s": 77336.9360262206, "max_e2e_latency_ms": 30397.54915699999,
    "max_tpot_ms": 185.24780973333327, "max_ttft_ms": 15085.870939999975, "max_ttst_ms": 188.3366700000006,
    "mean_e2e_latency_ms": 19004.249025405956, "mean_tpot_ms": 56.742654228795,
    "mean_ttft_ms": 5598.203738931997, "mean_ttst_ms": 118.57150609999997,
    "median_e2e_latency_ms": 20167.58717199998, "median_tpot_ms": 55.88217952920955,
    "median_ttft_ms": 3233.671767, "median_ttst_ms": 147.01862600000095,
    "min_e2e_latency_ms": 3416.3126680000005, "min_tpot_ms": 17.018300434343484, "min_ttft_ms": 81.959817,
    "min_ttst_ms": 24.74194399999942, "num_requests": 500, "output_throughput_tok_s": 3738.549788691274,
    "p75_e2e_latency_ms": 23388.25605699998, "p75_tpot_ms": 66.04271292727265,
    "p75_ttft_ms": 9863.95440499999, "p75_ttst_ms": 183.02120699999978,
    "p90_e2e_latency_ms": 25324.03622199997, "p90_tpot_ms": 78.76691767804873,
    "p90_ttft_ms": 13180.099000999966, "p90_ttst_ms": 186.220421,
    "p95_e2e_latency_ms": 27213.651470999972, "p95_tpot_ms": 96.37294993478251,
    "p95_ttft_ms": 14316.635758999975, "p95_ttst_ms": 187.38673600000038,
    "p99_e2e_latency_ms": 29575.00906899999, "p99_tpot_ms": 178.6422300232558,
    "p99_ttft_ms": 14831.663700999987, "p99_ttst_ms": 188.19700399999965, "prefill_gpus_per_worker": 0,
    "prefill_worker_seconds": 0.0, "prefix_cache_reused_ratio": 0.6938076387442018,
    "processed_tokens": 2868041, "request_throughput_rps": 14.134296862372587,
    "std_e2e_latency_ms": 5830.960621836314, "std_tpot_ms": 24.75534530838183,
    "std_ttft_ms": 4857.494429800497, "std_ttst_ms": 67.5729601514374, "total_input_tokens": 2735790,
    "total_output_tokens": 132251, "total_throughput_tok_s": 81075.48581491187,
}


def _req_from_jsonl(recs):
    f = lambda k: np.array([NAN if r[k] is None else r[k] for r in recs], dtype=float)
    req = dict(arrival_ms=f("arrival_time_ms"), first_admit_ms=f("first_admit_ms"),
               first_token_ms=f("first_token_ms"), last_token_ms=f("last_token_ms"),
               terminal_ms=f("terminal_time_ms"))
    req["second_token_ms"] = req["first_token_ms"] + f("ttst_ms")
    codes = {"completed": 2, "rejected": 3, "failed": 4}
    req["status"] = np.array([codes[r["terminal_status"]] for r in recs], dtype=np.int8)
    for k, src in (("input_length", "input_length"), ("requested_output_length", "requested_output_length"),
                   ("output_length", "output_length"), ("reused_tokens", "reused_input_tokens"),
                   ("first_reused_tokens", "reused_input_tokens")):
        req[k] = np.array([r[src] for r in recs], dtype=np.int64)
    req["worker_idx"] = np.full(len(recs), -1, dtype=np.int64)
    return req


def test_v12_summary_and_jsonl_from_its_per_request_records():
    path = REF / "V12.per_request.jsonl.gz"
    if not path.exists():
        pytest.skip("tests/data/reference/V12.per_request.jsonl.gz not present")
    lines = gzip.open(path, "rt").read().splitlines()
    recs = [json.loads(ln) for ln in lines]
    rep = build_report(_req_from_jsonl(recs), make_gap_stats(np.zeros(0)),
                       dict(num_workers=1, single_path=True, decode_gpus_per_worker=1,
                            wall_time_ms=44.049393))
    for k, v in V12.items():
        assert rep.summary[k] == pytest.approx(v, rel=1e-12, abs=0), k
        assert type(rep.summary[k]) is type(v), k
    # the JSONL we write is Dynamo's text, record for record, apart from the uuid
    strip = lambda s: s[:s.index('"uuid":')] + s[s.index('"arrival_time_ms"'):]
    assert sorted(map(strip, rep.jsonl_lines())) == sorted(map(strip, lines))


def test_pooled_std_is_accurate_when_std_is_tiny_against_the_mean():
    from fastsim.report import _sketch_dist

    g = 5.79 + 1e-5 * np.random.default_rng(0).random(20_000)
    st = make_gap_stats(g)
    assert st["itl_shift"] == g[0]
    stats = _sketch_dist(st, "itl")
    assert stats[0] == pytest.approx(np.mean(g), rel=1e-14)
    assert stats[8] == pytest.approx(np.std(g), rel=1e-9)


def test_missing_gap_statistics_give_zero_itl():
    rep = build_report(mk(RUN_X2), {}, dict(single_path=True))
    assert rep.summary["mean_itl_ms"] == 0.0 and rep.summary["p99_output_token_throughput_per_user"] == 0.0
    assert rep.summary["mean_ttst_ms"] == 5.74988900000001
