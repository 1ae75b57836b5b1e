"""Inputs shared across a sweep's configurations (fastsim/reuse.py): a trace read once per
process, its block keys and the timing tables built once, with the same results and warnings."""

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

import fastsim
from fastsim import perf, reuse, state
from fastsim.errors import TraceWarning
from fastsim.sweep import TIMING_COLUMNS, sweep
from fastsim.workload import load_trace as _load_trace

DATA = Path(__file__).parent / "data"
TRACE = str(DATA / "mooncake_tiny.jsonl")


def load_trace(path, **kw):
    # Dynamo 1.4.2's reading: it clamps a prompt longer than its hash ids (1.6.1 refuses the row)
    return _load_trace(path, dynamo_version="1.4.2", **kw)


@pytest.fixture(autouse=True)
def reuse_off():
    yield
    reuse._on = False
    reuse.clear()


def test_off_by_default_every_call_reads_afresh():
    assert not reuse.enabled()
    assert load_trace(TRACE) is not load_trace(TRACE)


@pytest.mark.filterwarnings("ignore::fastsim.errors.TraceWarning")
def test_a_trace_is_read_once_per_file_and_options(tmp_path):
    with reuse.during():
        a = load_trace(TRACE)
        assert load_trace(TRACE) is a
        assert load_trace(TRACE, trace_block_size=64) is not a
        assert load_trace(TRACE, arrival_speedup_ratio=2.0) is not a
        p = tmp_path / "t.jsonl"
        p.write_bytes(Path(TRACE).read_bytes())
        b = load_trace(p)
        assert b is not a and load_trace(p) is b
        p.write_text(p.read_text().replace('"output_length": 500', '"output_length": 501', 1))
        os.utime(p, ns=(1, 1))  # a changed file is read again, whatever its time
        c = load_trace(p)
        assert c is not b and c.osl[0] == 501
    assert not reuse.enabled()
    assert load_trace(TRACE) is not a


def test_warnings_of_the_reading_come_again_with_every_configuration(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps({"timestamp": 0, "input_length": 99, "output_length": 2, "hash_ids": [1]}) + "\n")
    with reuse.during():
        for _ in range(3):
            with pytest.warns(TraceWarning, match="clamped to that cap"):
                load_trace(p, trace_block_size=16)


@pytest.mark.filterwarnings("ignore::fastsim.errors.TraceWarning")
def test_block_keys_are_built_once_per_block_size():
    w = load_trace(TRACE)
    assert state.block_keys(w, 64)[1] is not state.block_keys(w, 64)[1]  # not a shared workload
    with reuse.during():
        w = load_trace(TRACE)
        ptr, keys = state.block_keys(w, 64)
        assert state.block_keys(w, 64)[1] is keys
        other = state.block_keys(w, 16)[1]
        assert other is not keys and other.shape[0] > keys.shape[0]
        fresh = state.block_keys(load_trace(TRACE, trace_block_size=256), 64)
        assert fresh[1] is not keys


def test_timing_tables_of_a_file_are_loaded_once(tmp_path):
    npz = Path(__file__).parent.parent.parent / "shared" / "reference" / "dynamo-1.4.2" / "inputs" / \
        "H200_TP1P_TP1D_mocker_perf_data.npz"
    if not npz.exists():
        pytest.skip("the shared reference inputs are not here")
    assert perf.load_perf_model(npz) is not perf.load_perf_model(npz)
    with reuse.during():
        t = perf.load_perf_model(npz)
        assert perf.load_perf_model(npz) is t
        assert perf.load_perf_model(npz.parent / "H200_TP1P_TP1D") is not t


def _drop_timing(df):
    return df.drop(columns=[c for c in TIMING_COLUMNS if c in df])


def test_a_sweep_sharing_its_inputs_gives_the_rows_of_separate_replays(tmp_path):
    p = tmp_path / "t.jsonl"
    lines = Path(TRACE).read_text().splitlines()
    row = json.loads(lines[0])
    row["input_length"] = 10**6  # clamped: a warning on every configuration's row
    p.write_text("\n".join([json.dumps(row)] + lines[1:]) + "\n")
    spec = {"base": {"trace_files": str(p), "trace_block_size": 512, "extra_engine_args": {"block_size": 64},
                     "dynamo_version": "1.4.2"},
            "grid": {"num_workers": [1, 2], "extra_engine_args.enable_prefix_caching": [True, False],
                     "extra_engine_args.max_num_seqs": [4, 256]}}
    df = sweep(spec, executor="serial", progress=False)
    assert (df["status"] == "ok").all()
    assert df["warnings"].str.contains("clamped to that cap").all()
    for i, r in df.iterrows():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = fastsim.run_trace_replay(
                str(p), trace_block_size=512, num_workers=int(r["num_workers"]), dynamo_version="1.4.2",
                extra_engine_args={"block_size": 64, "enable_prefix_caching": bool(r["extra_engine_args.enable_prefix_caching"]),
                                   "max_num_seqs": int(r["extra_engine_args.max_num_seqs"])})
        for k, v in ref.summary.items():
            if k not in TIMING_COLUMNS:
                assert r[k] == v or (isinstance(v, float) and np.isnan(v) and np.isnan(r[k])), (i, k)
    assert not reuse.enabled()
