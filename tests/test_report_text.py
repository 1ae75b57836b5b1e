"""The per-request JSONL, built column-wise, against a plain record-by-record formatter."""

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

import fastsim
from fastsim.report import JSONL_FIELDS, STATUS_NAMES, _fmt_float, uuid_for_row

DATA = Path(__file__).parent / "data"


def _token(value, kind):
    if kind == "z":
        return "null"
    if kind == "f":
        return "null" if math.isnan(value) else _fmt_float(value)
    if kind == "n" and value < 0:
        return "null"
    return str(int(value))


def plain_jsonl(rep):
    """One record at a time: the terminal requests by (arrival, row), Dynamo's field order."""
    cols = rep._columns()
    status = np.asarray(rep._req["status"])
    rows = sorted((float(cols["arrival_time_ms"][i]), i) for i in range(status.shape[0]) if status[i] >= 2)
    out = []
    for _, i in rows:
        parts = []
        for name, kind in JSONL_FIELDS:
            if kind == "u":
                text = json.dumps(uuid_for_row(i))
            elif kind == "s":
                text = json.dumps(STATUS_NAMES[int(status[i])])
            elif kind == "S":  # session labels: a string, or null
                text = "null" if cols[name] is None or cols[name][i] is None else json.dumps(cols[name][i])
            else:
                text = _token(cols[name][i] if kind != "z" else None, kind)
            parts.append(f'"{name}":{text}')
        out.append("{" + ",".join(parts) + "}\n")
    return "".join(out)


CASES = [
    dict(num_workers=1),
    dict(num_workers=3, extra_engine_args={"block_size": 64, "num_gpu_blocks": 300, "max_num_seqs": 4}),
    dict(num_workers=2, max_sim_time_ms=5000.0),  # in-flight and unarrived requests left out
    dict(num_workers=2, extra_engine_args={"block_size": 16, "dp_size": 2}, arrival_speedup_ratio=1e5),
]


@pytest.mark.parametrize("kw", CASES)
def test_jsonl_matches_the_record_by_record_text(tmp_path, kw):
    kw.setdefault("extra_engine_args", {"block_size": 64})
    kw.setdefault("dynamo_version", "1.4.2")  # 1.4.2's fields: the writer's columns (1.6.1's histories: test_per_request_161)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = fastsim.run_trace_replay(str(DATA / "mooncake_tiny.jsonl"), **kw)
    want = plain_jsonl(rep)
    assert rep.to_jsonl(tmp_path / "r.jsonl").read_text() == want
    assert [ln + "\n" for ln in rep.jsonl_lines(chunk=5)] == want.splitlines(keepends=True)
    assert "".join(rep._jsonl_texts(3)) == want


def test_disaggregated_fields_and_odd_floats():
    rep = fastsim.run_synthetic_trace_replay(
        64, 3, 12, arrival_interval_ms=0.000003,
        prefill_engine_args={"worker_type": "prefill", "block_size": 16},
        decode_engine_args={"worker_type": "decode", "block_size": 16},
        num_prefill_workers=1, num_decode_workers=2, dynamo_version="1.4.2")
    want = plain_jsonl(rep)
    assert "".join(rep._jsonl_texts(5)) == want
    assert '"prefill_worker_idx":0' in want and '"arrival_time_ms":3e-6,' in want  # serde's spelling
