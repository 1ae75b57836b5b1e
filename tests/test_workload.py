"""Trace readers and the synthetic generator (fastsim/workload.py).

Expected values follow Dynamo 1.4.2 (notes 1.3, 1.5, 2.1, 2.2; verified Q9, Q13), several of them
cross-checked against the release (the arrival times quoted in comments are Dynamo's).
"""

import gzip
import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from fastsim.errors import InputError, NotSupportedError, TraceWarning
from fastsim.workload import Workload, load_azure_csv, load_mooncake, load_trace, synthetic

DATA = Path(__file__).parent / "data"


def R(**kw):
    row = dict(timestamp=0, input_length=16, output_length=2, hash_ids=[1])
    row.update(kw)
    return {k: v for k, v in row.items() if v is not _DROP}


_DROP = object()


def write(tmp_path, rows, name="t.jsonl"):
    p = tmp_path / name
    with open(p, "w") as f:
        for r in rows:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return str(p)


def mc(tmp_path, rows, **kw):
    kw.setdefault("trace_block_size", 16)
    return load_mooncake(write(tmp_path, rows), **kw)


def err(tmp_path, rows, **kw):
    with pytest.raises(InputError) as ei:
        mc(tmp_path, rows, **kw)
    return str(ei.value)


# ------------------------------------------------------------------ Mooncake: basics
def test_mooncake_fixture():
    w = load_mooncake(DATA / "mooncake_tiny.jsonl")
    assert isinstance(w, Workload) and w.validate() is w
    assert w.n_requests == 16 and w.n_sessions == 16
    assert w.isl[:3].tolist() == [6755, 7319, 7234]
    assert w.osl[:3].tolist() == [500, 490, 794]
    assert w.hash_ids[w.hash_ptr[1]:w.hash_ptr[2]].tolist() == [0] + list(range(14, 28))
    assert w.line.tolist() == list(range(1, 17))
    assert w.trace_block_size == 512 and w.source.endswith("mooncake_tiny.jsonl")
    assert np.all(w.turn == 0) and np.all(w.delay_ms == 0)
    for name in ("isl", "osl", "session", "turn", "line", "session_ptr", "session_rows", "hash_ptr", "hash_ids"):
        assert getattr(w, name).dtype == np.int64, name
    assert w.session_arrival_ms.dtype == np.float64


def test_aliases(tmp_path):
    w = mc(tmp_path, [
        {"created_time": 10, "input_tokens": 16, "output_tokens": 3, "hash_ids": [1]},
        {"created_time": 30, "input_length": 8, "output_length": 2, "hash_ids": [2]},
        {"session_id": "s", "timestamp": 40, "input_length": 8, "output_length": 2, "hash_ids": [3]},
        {"session_id": "s", "delay_ms": 7, "input_length": 8, "output_length": 2, "hash_ids": [4]},
    ])
    assert w.isl.tolist() == [16, 8, 8, 8] and w.osl.tolist() == [3, 2, 2, 2]
    assert w.session_arrival_ms.tolist() == [0.0, 20.0, 30.0]
    assert w.delay_ms.tolist() == [0, 0, 0, 7.0]


def test_alias_and_name_together_is_an_error(tmp_path):
    assert "both 'timestamp' and its alias 'created_time'" in err(tmp_path, [R(created_time=5)])
    assert "alias 'input_tokens'" in err(tmp_path, [R(input_tokens=8)])


def test_missing_input_length_is_the_cap(tmp_path):
    w = mc(tmp_path, [R(input_length=_DROP, hash_ids=[1, 2, 3]), R(input_length=None, hash_ids=[1])])
    assert w.isl.tolist() == [48, 16]


def test_clamp_warns_once_with_count_and_first_line(tmp_path):
    # Dynamo 1.4.2 clamps a row longer than its hash ids.
    rows = [R(), R(input_length=100, hash_ids=[1, 2, 3]), R(input_length=17), R(input_length=16)]
    with pytest.warns(TraceWarning) as rec:
        w = mc(tmp_path, rows, dynamo_version="1.4.2")
    assert w.isl.tolist() == [16, 48, 16, 16]
    assert len(rec) == 1
    msg = str(rec[0].message)
    assert "on 2 of 4 rows" in msg and "first: line 2" in msg and "t.jsonl" in msg


def test_row_longer_than_its_hash_ids_is_an_error_in_1_6_1(tmp_path):
    # Dynamo 1.6.1's words: "trace line 2 input_length 1000 exceeds hash_ids capacity 64"
    # (experiment on the release; blank lines count, as here).
    rows = [R(), "", R(input_length=100, hash_ids=[1, 2, 3]), R(input_length=16)]
    for kw in ({}, {"dynamo_version": "1.6.1"}):
        msg = err(tmp_path, rows, **kw)
        assert "trace line 3 input_length 100 exceeds hash_ids capacity 48" in msg
        assert msg.startswith(str(tmp_path / "t.jsonl") + ":3:")
    # the same through load_trace
    with pytest.raises(InputError, match="trace line 3 input_length 100 exceeds hash_ids capacity 48"):
        load_trace(write(tmp_path, rows), trace_block_size=16)
    w = load_trace(write(tmp_path, rows[:2] + rows[3:]), trace_block_size=16)
    assert w.isl.tolist() == [16, 16]


def test_dynamo_version_is_checked(tmp_path):
    with pytest.raises(InputError, match=r"dynamo_version is '1.5'; allowed: '1.6.1', '1.4.2'"):
        mc(tmp_path, [R()], dynamo_version="1.5")


def test_no_warning_without_clamp(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mc(tmp_path, [R(), R(input_length=16)])


def test_blank_lines_and_crlf(tmp_path):
    rows = ["", json.dumps(R()) + "\r", "   ", json.dumps(R(timestamp=5)), ""]
    w = mc(tmp_path, rows)
    assert w.n_requests == 2 and w.line.tolist() == [2, 4]
    assert w.session_arrival_ms.tolist() == [0.0, 5.0]


def test_large_hash_ids_keep_their_bits(tmp_path):
    big = 2**64 - 1
    w = mc(tmp_path, [R(hash_ids=[big, 2**40])])
    assert w.hash_ids.view(np.uint64).tolist() == [big, 2**40]


def test_gzip_trace(tmp_path):
    p = tmp_path / "t.jsonl.gz"
    with gzip.open(p, "wt") as f:
        f.write(json.dumps(R()) + "\n")
    assert load_mooncake(p, trace_block_size=16).n_requests == 1


# ------------------------------------------------------------------ Mooncake: sessions and timing
def test_sessions_interleaved_in_file_order(tmp_path):
    rows = [
        R(session_id="a", timestamp=0),
        R(session_id="a", timestamp=1000, input_length=32, hash_ids=[1, 2]),
        R(session_id="b", timestamp=200, input_length=48, hash_ids=[4, 5, 6]),
        R(session_id="a", timestamp=1500, input_length=48, hash_ids=[1, 2, 3]),
        R(timestamp=300),
    ]
    w = mc(tmp_path, rows).validate()
    assert w.session.tolist() == [0, 0, 1, 0, 2]
    assert w.turn.tolist() == [0, 1, 0, 2, 0]
    assert w.delay_ms.tolist() == [0.0, 1000.0, 0.0, 500.0, 0.0]
    assert w.session_ptr.tolist() == [0, 3, 4, 5]
    assert w.session_rows.tolist() == [0, 1, 3, 2, 4]
    assert w.session_arrival_ms.tolist() == [0.0, 200.0, 300.0]


def test_delay_sources(tmp_path):
    rows = [
        R(session_id="a", timestamp=100),
        R(session_id="a", timestamp=150, delay=7),   # explicit delay wins over the timestamp
        R(session_id="a", timestamp=None),           # no timestamp, no delay -> 0
        R(session_id="a", timestamp=_DROP, delay=2.5),
        R(session_id="a", timestamp=400),            # 400 - last timestamp (150)
    ]
    w = mc(tmp_path, rows)
    assert w.delay_ms.tolist() == [0.0, 7.0, 0.0, 2.5, 250.0]


def test_normalisation_and_speedup(tmp_path):
    rows = [
        R(timestamp=5100), R(timestamp=5000),
        R(session_id="s", timestamp=6000), R(session_id="s", timestamp=7000),
    ]
    w = mc(tmp_path, rows)
    assert w.session_arrival_ms.tolist() == [100.0, 0.0, 1000.0]
    w2 = mc(tmp_path, rows, arrival_speedup_ratio=2.0)
    assert w2.session_arrival_ms.tolist() == [50.0, 0.0, 500.0]
    assert w2.delay_ms.tolist() == [0.0, 0.0, 0.0, 500.0]
    # Float and negative timestamps are fine (Dynamo: -5, 5 -> 0, 10).
    w3 = mc(tmp_path, [R(timestamp=-5), R(timestamp=5.25)])
    assert w3.session_arrival_ms.tolist() == [0.0, 10.25]


def test_stable_session_order(tmp_path):
    rows = [R(timestamp=5100), R(timestamp=5000), R(timestamp=5000), R(timestamp=4000.5), R(timestamp=5000)]
    w = mc(tmp_path, rows)
    assert w.session_order().tolist() == [3, 1, 2, 4, 0]


def test_implicit_session_names_follow_dynamo(tmp_path):
    # Dynamo names a row without session_id "request_<line>": an explicit "request_2" joins line 2.
    w = mc(tmp_path, [R(session_id="request_2", timestamp=0), R(timestamp=500)])
    assert w.session.tolist() == [0, 0] and w.turn.tolist() == [0, 1]
    assert w.delay_ms.tolist() == [0.0, 500.0]


def test_concurrency_mode_allows_missing_timestamps(tmp_path):
    rows = [R(timestamp=_DROP), R(timestamp=10), R(timestamp=20)]
    w = mc(tmp_path, rows, concurrency_mode=True)
    assert math.isnan(w.session_arrival_ms[0]) and w.session_arrival_ms[1:].tolist() == [0.0, 10.0]
    msg = err(tmp_path, rows)
    assert "t.jsonl:1:" in msg and "timestamp" in msg and "session request_1" in msg


# ------------------------------------------------------------------ Mooncake: errors name file and line
@pytest.mark.parametrize(
    "rows, pattern",
    [
        ([R(), "{bad"], r"t\.jsonl:2: malformed JSON at column 2"),
        ([R(), json.dumps(R()) + " {}"], r"t\.jsonl:2: malformed JSON .*extra data"),
        (["[1, 2]"], r"t\.jsonl:1: expected a JSON object, got array"),
        ([R(output_length=_DROP)], r"t\.jsonl:1: missing required field 'output_length'"),
        ([R(output_length=-1)], r"t\.jsonl:1: field 'output_length' must be an integer >= 0, got number -1"),
        ([R(output_length=2.0)], r"field 'output_length' must be an integer"),
        ([R(), R(input_length=-3)], r"t\.jsonl:2: field 'input_length' must be an integer >= 1, got number -3"),
        ([R(input_length=1.5)], r"field 'input_length' must be an integer"),
        ([R(input_length="16")], r"field 'input_length' must be an integer .*string '16'"),
        ([R(input_length=True)], r"field 'input_length' must be an integer .*boolean true"),
        ([R(input_length=0)], r"t\.jsonl:1: field 'input_length' is 0"),
        ([R(hash_ids=_DROP)], r"t\.jsonl:1: missing required field 'hash_ids'"),
        ([R(hash_ids=[])], r"t\.jsonl:1: field 'hash_ids' is empty"),
        ([R(hash_ids=5)], r"field 'hash_ids' must be a list of integers, got number 5"),
        ([R(hash_ids=[1, -1])], r"field 'hash_ids' must hold integers in \[0, 2\*\*64\), found -1"),
        ([R(hash_ids=[1, 2.0])], r"field 'hash_ids' must hold integers >= 0, found number 2"),
        ([R(hash_ids=[2**64])], r"field 'hash_ids' must hold integers in"),
        ([R(timestamp="5")], r"t\.jsonl:1: field 'timestamp' must be a finite number"),
        (['{"timestamp": NaN, "output_length": 1, "hash_ids": [1]}'], r"t\.jsonl:1: malformed JSON"),
        ([R(session_id=5)], r"field 'session_id' must be a string, got number 5"),
        ([R(delay="2")], r"field 'delay' must be a finite number"),
        ([R(delay=5)], r"t\.jsonl:1: field 'delay' is 5 on the first turn of session request_1"),
        ([R(session_id="a", timestamp=100), R(session_id="a", timestamp=50)],
         r"t\.jsonl:2: invalid delay -50 ms \(timestamp 50 minus the previous turn's 100\)"),
        ([R(session_id="a"), R(session_id="a", delay=-3)], r"t\.jsonl:2: invalid delay -3 ms \(field 'delay'\)"),
        ([R(session_id="a", timestamp=None), R(session_id="a", timestamp=100)],
         r"t\.jsonl:2: cannot infer the delay of turn 1 of session a"),
        ([R(timestamp=100), R(timestamp=_DROP)],
         r"t\.jsonl:2: field 'timestamp' is missing on the first turn of session request_2"),
        ([], r"trace file .*t\.jsonl does not contain any requests"),
        (["", "  "], r"does not contain any requests"),
    ],
)
def test_mooncake_errors(tmp_path, rows, pattern):
    import re

    msg = err(tmp_path, rows)
    assert re.search(pattern, msg), msg


def test_error_line_numbers_count_blank_lines(tmp_path):
    rows = ["", R(session_id="a", timestamp=100), "", R(session_id="a", timestamp=50)]
    assert ":4: invalid delay -50" in err(tmp_path, rows)


def test_argument_validation(tmp_path):
    p = write(tmp_path, [R()])
    with pytest.raises(InputError, match="trace_block_size must be greater than 0"):
        load_mooncake(p, trace_block_size=0)
    with pytest.raises(InputError, match="trace_block_size must be a positive integer"):
        load_mooncake(p, trace_block_size=1.5)
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(InputError, match="arrival_speedup_ratio must be a finite positive number"):
            load_mooncake(p, arrival_speedup_ratio=bad)
    with pytest.raises(InputError, match="does not exist"):
        load_mooncake(tmp_path / "missing.jsonl")
    with pytest.raises(InputError, match="is a directory"):
        load_mooncake(tmp_path)


# ------------------------------------------------------------------ Azure CSV
def test_azure_fixture():
    w = load_azure_csv(DATA / "azure_conv_head20.csv").validate()
    assert w.n_requests == 20 and w.n_sessions == 20
    assert w.hash_ptr is None and w.hash_ids is None
    assert w.isl[:3].tolist() == [374, 396, 879] and w.osl[:3].tolist() == [44, 109, 55]
    assert w.isl[-1] == 1353 and w.osl[-1] == 142  # last row, no trailing newline
    assert w.line.tolist() == list(range(2, 22))
    # 18:15:46.6805900 -> 18:15:50.9951690 = 4314.579 ms; nanosecond-exact
    assert w.session_arrival_ms[0] == 0.0
    assert w.session_arrival_ms[1] == pytest.approx(4314.579, abs=1e-9)
    assert w.session_arrival_ms[-1] == pytest.approx(13025.088, abs=1e-9)
    assert np.all(np.diff(w.session_arrival_ms) >= 0)
    w2 = load_azure_csv(DATA / "azure_conv_head20.csv", arrival_speedup_ratio=2.0)
    np.testing.assert_allclose(w2.session_arrival_ms, w.session_arrival_ms / 2)


def azure(tmp_path, body, name="a.csv"):
    p = tmp_path / name
    p.write_text(body)
    return p


def test_azure_zero_tokens(tmp_path):
    body = (
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.0000000,100,10\n"
        "2023-11-16 18:15:47.0000000,0,10\n"
        "2023-11-16 18:15:48.0000000,50,0\n"
        "2023-11-16 18:15:49.0000000,0,0"
    )
    with pytest.warns(TraceWarning) as rec:
        w = load_azure_csv(azure(tmp_path, body))
    assert len(rec) == 1 and "skipped 2 of 4 rows" in str(rec[0].message) and "line 3" in str(rec[0].message)
    assert w.isl.tolist() == [100, 50] and w.osl.tolist() == [10, 0]
    assert w.line.tolist() == [2, 4]
    assert w.session_arrival_ms.tolist() == [0.0, 2000.0]


@pytest.mark.parametrize(
    "body, pattern",
    [
        ("TIME,Context,Generated\n2023-11-16 18:15:46.0,1,1", r"a\.csv:1: Azure CSV header must have columns"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0,1", r"a\.csv:2: expected 3 comma-separated fields, got 2"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0,1,1\nyesterday,1,1", r"a\.csv:3: field 'TIMESTAMP'"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0,-4,1", r"a\.csv:2: field 'ContextTokens' must be an integer >= 0, got -4"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0,1,1.5", r"a\.csv:2: field 'GeneratedTokens' must be an integer"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n", r"does not contain any requests"),
        ("", r"does not contain any requests"),
    ],
)
def test_azure_errors(tmp_path, body, pattern):
    with pytest.raises(InputError, match=pattern):
        load_azure_csv(azure(tmp_path, body))


def test_azure_column_order_and_case(tmp_path):
    body = "generatedtokens,TIMESTAMP,contexttokens\r\n7,2023-11-16 18:15:46.5,11\r\n"
    w = load_azure_csv(azure(tmp_path, body))
    assert w.isl.tolist() == [11] and w.osl.tolist() == [7]


# ------------------------------------------------------------------ dispatch
def test_load_trace_dispatch(tmp_path):
    p = write(tmp_path, [R()])
    assert load_trace(p, trace_block_size=16).hash_ids is not None
    assert load_trace(p, trace_block_size=None).trace_block_size == 512
    csv = DATA / "azure_conv_head20.csv"
    assert load_trace(csv).hash_ids is None
    assert load_trace(azure(tmp_path, "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 00:00:00,1,1", "x.txt"),
                      trace_format="azure").n_requests == 1
    assert load_trace(p, trace_format="mooncake-delta").stream_row is not None
    with pytest.raises(InputError, match="requires replay_concurrency"):
        load_trace(p, trace_format="applied_compute_agentic")
    with pytest.raises(InputError, match="field 'id' must be a string"):
        load_trace(p, trace_format="weka")
    with pytest.raises(InputError, match="the first line must be the agentic Mooncake v2 header"):
        load_trace(p, trace_format="agentic_mooncake")
    with pytest.raises(InputError, match="field 'event_type' must be request_end"):
        load_trace(p, trace_format="dynamo")
    with pytest.raises(InputError, match="trace_format must be one of"):
        load_trace(p, trace_format="parquet")


# ------------------------------------------------------------------ synthetic
def test_synthetic_constant_interval_matches_sequential_sum():
    w = synthetic(16, 2, 1000, arrival_interval_ms=33.3).validate()
    t, expected = 0.0, [0.0]
    gap = 1000.0 / (1000.0 / 33.3)
    for _ in range(999):
        t += gap
        expected.append(t)
    assert w.session_arrival_ms.tolist() == expected
    # Dynamo 1.4.2: the last of these requests ends at 33294.934351999545 = 33266.69999999954 + service
    assert w.session_arrival_ms[-1] == 33266.69999999954
    assert w.hash_ptr is None and w.hash_ids is None and w.source == "synthetic"
    assert np.all(w.line == 0) and w.isl.tolist() == [16] * 1000 and w.osl.tolist() == [2] * 1000


def test_synthetic_burst_poisson_concurrency():
    assert synthetic(8, 2, 5, arrival_interval_ms=0).session_arrival_ms.tolist() == [0.0] * 5
    assert synthetic(8, 2, 5, replay_concurrency=2).session_arrival_ms.tolist() == [0.0] * 5
    a = synthetic(8, 2, 20000, request_rate=10.0).session_arrival_ms
    b = synthetic(8, 2, 20000, request_rate=10.0).session_arrival_ms
    c = synthetic(8, 2, 20000, request_rate=10.0, arrival_seed=7).session_arrival_ms
    assert a[0] == 0.0 and np.all(np.diff(a) >= 0)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert np.mean(np.diff(a)) == pytest.approx(100.0, rel=0.03)


def test_synthetic_sessions_delays_speedup():
    w = synthetic(160, 4, 3, arrival_interval_ms=100, turns_per_session=2,
                  inter_turn_delay_ms=250, arrival_speedup_ratio=2.0).validate()
    assert w.n_requests == 6 and w.n_sessions == 3
    assert w.session.tolist() == [0, 0, 1, 1, 2, 2] and w.turn.tolist() == [0, 1] * 3
    assert w.delay_ms.tolist() == [0.0, 125.0] * 3
    assert w.session_arrival_ms.tolist() == [0.0, 50.0, 100.0]
    assert w.session_ptr.tolist() == [0, 2, 4, 6] and w.session_rows.tolist() == list(range(6))


def test_synthetic_shared_prefix_hash_ids():
    # nb = ceil(48/16) = 3, pb = round_half_away(1.5) = 2 (Dynamo 1.4.2 reuse ratio 0.5333 confirms)
    w = synthetic(48, 2, 4, arrival_interval_ms=100, shared_prefix_ratio=0.5, num_prefix_groups=1,
                  block_size=16).validate()
    assert w.trace_block_size == 16 and w.hash_ptr.tolist() == [0, 3, 6, 9, 12]
    ids = w.hash_ids.view(np.uint64).reshape(4, 3)
    assert np.all(ids[:, :2] == ids[0, :2]) and ids[0, 0] != ids[0, 1]
    assert ids[:, 2].tolist() == [1, 2, 3, 4]
    assert int(ids[0, 0]) >> 48 == 0xD00D
    # full prefix and several groups: prefixes differ between groups, also in the low 32 bits
    w = synthetic(160, 2, 40, arrival_interval_ms=1, shared_prefix_ratio=1.0, num_prefix_groups=4,
                  block_size=16)
    ids = w.hash_ids.view(np.uint64).reshape(40, 10)
    firsts = {int(x) for x in ids[:, 0]}
    assert 1 < len(firsts) <= 4 and len({x & 0xFFFFFFFF for x in firsts}) == len(firsts)
    # ratio > 0 but no groups -> unique prompts
    assert synthetic(48, 2, 4, arrival_interval_ms=1, shared_prefix_ratio=0.5).hash_ids is None


@pytest.mark.parametrize(
    "args, kw, pattern",
    [
        ((16, 2, 3), {}, "exactly one of replay_concurrency, request_rate, or arrival_interval_ms"),
        ((16, 2, 3), dict(request_rate=1.0, arrival_interval_ms=1.0), "exactly one of"),
        ((0, 2, 3), dict(arrival_interval_ms=1), "input_tokens must be at least 1"),
        ((16, 0, 3), dict(arrival_interval_ms=1), "output_tokens must be at least 1"),
        ((16, 2, 0), dict(arrival_interval_ms=1), "request_count must be at least 1"),
        ((16.5, 2, 3), dict(arrival_interval_ms=1), "input_tokens must be an integer"),
        ((16, 2, 3), dict(arrival_interval_ms=-1), "arrival_interval_ms must be a finite non-negative number"),
        ((16, 2, 3), dict(arrival_interval_ms=float("nan")), "arrival_interval_ms must be a finite"),
        ((16, 2, 3), dict(request_rate=0.0), "request_rate must be a finite positive number"),
        ((16, 2, 3), dict(request_rate=float("inf")), "request_rate must be a finite positive"),
        ((16, 2, 3), dict(replay_concurrency=0), "replay_concurrency must be at least 1"),
        ((16, 2, 3), dict(arrival_interval_ms=1, turns_per_session=0), "turns_per_session must be at least 1"),
        ((16, 2, 3), dict(arrival_interval_ms=1, inter_turn_delay_ms=-1), "inter_turn_delay_ms must be a finite non-negative"),
        ((16, 2, 3), dict(arrival_interval_ms=1, shared_prefix_ratio=1.5), r"shared_prefix_ratio must be between 0.0 and 1.0, got 1.5"),
        ((16, 2, 3), dict(arrival_interval_ms=1, shared_prefix_ratio=-0.1), "shared_prefix_ratio must be between"),
        ((16, 2, 3), dict(arrival_interval_ms=1, num_prefix_groups=-1), "num_prefix_groups must be at least 0"),
        ((16, 2, 3), dict(arrival_interval_ms=1, arrival_seed=-1), "arrival_seed must be at least 0"),
        ((16, 2, 3), dict(arrival_interval_ms=1, arrival_speedup_ratio=0.0), "arrival_speedup_ratio must be a finite positive"),
    ],
)
def test_synthetic_validation(args, kw, pattern):
    with pytest.raises(InputError, match=pattern):
        synthetic(*args, **kw)


def test_synthetic_poisson_uses_dynamo_stdrng():
    # Dynamo 1.4.2 (--request-rate 1 --arrival-seed 42): sessions 1 and 2 arrive at these times
    a = synthetic(8, 2, 3, request_rate=1.0, arrival_seed=42).session_arrival_ms
    assert a.tolist() == [0.0, 747.7246176406965, 1530.1953951913883]
    assert synthetic(8, 2, 3, request_rate=1.0, arrival_seed=2**64 - 1).session_arrival_ms[1] == 63.10066945957124
    with pytest.raises(InputError, match="arrival_seed must be at most"):
        synthetic(8, 2, 3, request_rate=1.0, arrival_seed=2**64)
