"""Parameter sweeps (fastsim/sweep.py, `fastsim sweep`) and SLA goodput end to end (`fastsim replay`).

Spec parsing and its errors; local / dask / serial executors give the same rows; error rows; the
checkpoint (resume after a kill, spec change refused, --force); keep_requests; and the goodput
fields of `fastsim replay --sla-*` against numbers copied from Dynamo 1.4.2.
"""

import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pandas.testing as pdt
import pytest

import fastsim
from fastsim import sweep as sweep_module
from fastsim.cli import main
from fastsim.sweep import TIMING_COLUMNS, SpecError, SweepError, SweepWarning, load_spec, read_results, sweep

DATA = Path(__file__).parent / "data"
TRACE = str(DATA / "mooncake_tiny.jsonl")
ROOT = Path(__file__).resolve().parents[1]

SMALL = {
    "base": {"input_tokens": 256, "output_tokens": 32, "request_count": 400, "arrival_interval_ms": 5.0,
             "extra_engine_args": {"block_size": 64}},
    "grid": {"num_workers": [1, 2], "extra_engine_args.max_num_seqs": [8, 64]},
    "zip": {"arrival_interval_ms": [5.0, 20.0], "sla_ttft_ms": [50.0, 100.0]},
}


def _drop_timing(df):
    return df.drop(columns=[c for c in TIMING_COLUMNS if c in df])


@pytest.fixture(scope="module", autouse=True)
def _warm_kernels():
    # Load (or compile) the kernels in this process first, so spawned workers find a warm cache.
    fastsim.run_synthetic_trace_replay(16, 2, 1, arrival_interval_ms=1.0, extra_engine_args={"block_size": 16})


# ----------------------------------------------------------------------------- spec


def test_expansion_order_ids_and_columns():
    sp = load_spec(SMALL)
    assert sp.mode == "synthetic" and sp.n_configs == 8
    assert sp.varied == ["num_workers", "extra_engine_args.max_num_seqs", "arrival_interval_ms", "sla_ttft_ms"]
    t = sp.table()
    assert t["config_id"].tolist() == list(range(8))
    assert t["num_workers"].tolist() == [1, 1, 1, 1, 2, 2, 2, 2]  # first grid key slowest
    assert t["extra_engine_args.max_num_seqs"].tolist() == [8, 8, 64, 64] * 2
    assert t["sla_ttft_ms"].tolist() == [50.0, 100.0] * 4  # zip axis fastest, lists together
    assert t["arrival_interval_ms"].tolist() == [5.0, 20.0] * 4
    c = sp.configs[3].kwargs
    assert c["extra_engine_args"] == {"block_size": 64, "max_num_seqs": 64}
    assert c["sla_ttft_ms"] == 100.0 and c["num_workers"] == 1
    assert sp.configs[0].kwargs["extra_engine_args"] == {"block_size": 64, "max_num_seqs": 8}  # base not shared


def test_nested_grid_equals_dotted_and_hash_tracks_values():
    nested = dict(SMALL, grid={"num_workers": [1, 2], "extra_engine_args": {"max_num_seqs": [8, 64]}})
    assert load_spec(nested).spec_hash == load_spec(SMALL).spec_hash
    changed = dict(SMALL, grid={"num_workers": [1, 3], "extra_engine_args.max_num_seqs": [8, 64]})
    assert load_spec(changed).spec_hash != load_spec(SMALL).spec_hash


def test_repeats_and_seeds():
    sp = load_spec({"base": {"input_tokens": 64, "output_tokens": 4, "request_count": 10, "request_rate": 5.0,
                             "arrival_seed": 7}, "grid": {"num_workers": [1, 2]}, "repeats": 3})
    t = sp.table()
    assert sp.n_configs == 6 and list(t.columns) == ["config_id", "num_workers", "repeat", "seed"]
    assert t["seed"].tolist() == [7, 8, 9, 7, 8, 9] and t["repeat"].tolist() == [0, 1, 2] * 2
    assert [c.kwargs["arrival_seed"] for c in sp.configs] == [7, 8, 9, 7, 8, 9]
    sp = load_spec({"base": {"input_tokens": 64, "output_tokens": 4, "request_count": 10, "request_rate": 5.0},
                    "seeds": [3, 11]})
    assert [c.kwargs["arrival_seed"] for c in sp.configs] == [3, 11]
    with pytest.warns(SweepWarning, match="deterministic"):
        sp = load_spec({"base": {"trace_files": TRACE}, "repeats": 2})
    assert sp.varied == ["repeat"] and sp.n_configs == 2


@pytest.mark.parametrize("spec, message", [
    ({"base": {"trace_files": TRACE}, "gird": {}}, "unknown top-level key 'gird'; did you mean 'grid'"),
    ({"base": {"trace_files": TRACE}, "grid": {"num_worker": [1]}}, "unknown key 'num_worker'; did you mean 'num_workers'"),
    ({"base": {"trace_files": TRACE}, "grid": {"extra_engine_args.max_num_seq": [1]}},
     "'max_num_seq' is not an engine argument; did you mean 'extra_engine_args.max_num_seqs'"),
    ({"base": {"trace_files": TRACE, "extra_engine_args": {"blok_size": 64}}}, "did you mean 'extra_engine_args.block_size'"),
    ({"base": {"trace_files": TRACE}, "grid": {"arrival_interval_ms": [1.0]}}, "applies to synthetic replay only"),
    ({"base": {"input_tokens": 1, "output_tokens": 1, "request_count": 1}, "grid": {"trace_block_size": [64]}},
     "applies to trace replay only"),
    ({"grid": {"num_workers": [1]}}, "give either trace_files"),
    ({"base": {"trace_files": TRACE, "input_tokens": 4}}, "not both"),
    ({"base": {"input_tokens": 4, "output_tokens": 4}}, "synthetic replay needs request_count"),
    ({"base": {"trace_files": TRACE}, "zip": {"num_workers": [1, 2], "sla_ttft_ms": [1.0]}}, "equal lengths"),
    ({"base": {"trace_files": TRACE}, "grid": {"num_workers": []}}, "non-empty list"),
    ({"base": {"trace_files": TRACE}, "grid": {"num_workers": 4}}, "non-empty list"),
    ({"base": {"trace_files": TRACE}, "grid": {"num_workers": [1]}, "zip": {"num_workers": [2]}}, "varied twice"),
    ({"base": {"trace_files": TRACE, "report_jsonl_path": "x.jsonl"}}, "keep_requests"),
    ({"base": {"trace_files": TRACE}, "seeds": [1, 2]}, "trace replay has no random seed"),
    ({"base": {"input_tokens": 4, "output_tokens": 4, "request_count": 4, "request_rate": 1.0},
      "grid": {"arrival_seed": [1, 2]}, "repeats": 2}, "arrival_seed is set by repeats"),
    ({"base": {"trace_files": TRACE}, "repeats": 0}, "repeats must be a positive integer"),
    ({"base": {"trace_files": TRACE}, "grid": {"num_workers.x": [1]}}, "takes a single value"),
])
def test_spec_errors_name_the_key(spec, message):
    with pytest.raises(SpecError) as ei:
        load_spec(spec)
    assert message in str(ei.value)


def test_spec_files_yaml_toml_json(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text(Path(TRACE).read_text())
    (tmp_path / "s.yaml").write_text(
        "base:\n  trace_files: t.jsonl\n  extra_engine_args: {block_size: 64}\n"
        "grid:\n  num_workers: [1, 2]\n  extra_engine_args.max_num_seqs: [8, 16]\n")
    (tmp_path / "s.toml").write_text(
        '[base]\ntrace_files = "t.jsonl"\nextra_engine_args = { block_size = 64 }\n'
        "[grid]\nnum_workers = [1, 2]\nextra_engine_args.max_num_seqs = [8, 16]\n")
    (tmp_path / "s.json").write_text(json.dumps(
        {"base": {"trace_files": "t.jsonl", "extra_engine_args": {"block_size": 64}},
         "grid": {"num_workers": [1, 2], "extra_engine_args": {"max_num_seqs": [8, 16]}}}))
    specs = [load_spec(tmp_path / f"s.{ext}") for ext in ("yaml", "toml", "json")]
    assert len({s.spec_hash for s in specs}) == 1
    assert specs[0].configs[0].kwargs["trace_files"] == str(trace)  # relative to the spec file
    (tmp_path / "bad.yaml").write_text("base: [unclosed\n")
    with pytest.raises(SpecError, match="bad.yaml"):
        load_spec(tmp_path / "bad.yaml")
    with pytest.raises(SpecError, match="unknown format"):
        load_spec(tmp_path / "t.jsonl")


# ----------------------------------------------------------------------------- running


def test_serial_sweep_rows_match_direct_replays():
    df = sweep(SMALL, executor="serial", progress=False)
    assert df["status"].tolist() == ["ok"] * 8 and df["error"].tolist() == [""] * 8
    cols = list(df.columns)
    assert cols[:9] == ["config_id", "num_workers", "extra_engine_args.max_num_seqs", "arrival_interval_ms",
                        "sla_ttft_ms", "status", "error", "run_wall_s", "warnings"]
    assert "goodput_completed_requests" in cols and "p99_ttft_ms" in cols
    assert str(df["completed_requests"].dtype) == "Int64"
    rep = fastsim.run_synthetic_trace_replay(256, 32, 400, arrival_interval_ms=20.0, num_workers=2,
                                             sla_ttft_ms=100.0, extra_engine_args={"block_size": 64, "max_num_seqs": 8})
    row = df.iloc[5]
    for k, v in rep.summary.items():
        if k not in TIMING_COLUMNS:
            assert row[k] == v or (v is None and pd.isna(row[k])), k


def test_local_and_dask_executors_give_the_same_frame():
    ref = _drop_timing(sweep(SMALL, executor="serial", progress=False))
    local = sweep(SMALL, executor="local", workers=2, progress=False)
    pdt.assert_frame_equal(_drop_timing(local), ref)
    pytest.importorskip("distributed")
    dask = sweep(SMALL, executor="dask", workers=2, progress=False)
    pdt.assert_frame_equal(_drop_timing(dask), ref)


def test_failing_configurations_become_error_rows(monkeypatch):
    spec = {"base": {"trace_files": TRACE}, "grid": {"num_workers": [1, 0, 2]}}
    df = sweep(spec, executor="serial", progress=False)
    assert df["status"].tolist() == ["ok", "error", "ok"]
    assert "InputError" in df["error"][1] and "num_workers" in df["error"][1]
    assert pd.isna(df["p99_ttft_ms"][1]) and df["completed_requests"][1] is pd.NA
    assert df["completed_requests"][0] > 0

    from fastsim import api

    real = api.run_trace_replay

    @functools.wraps(real)
    def flaky(trace_files, **kw):
        if kw["num_workers"] == 2:
            raise ZeroDivisionError("boom")
        return real(trace_files, **kw)

    monkeypatch.setattr(api, "run_trace_replay", flaky)
    df = sweep({"base": {"trace_files": TRACE}, "grid": {"num_workers": [1, 2]}}, executor="serial", progress=False)
    assert df["status"].tolist() == ["ok", "error"]
    assert df["error"][1].startswith("ZeroDivisionError: boom (at test_sweep.py:")


def test_module_is_callable_as_the_function():
    import fastsim.sweep as module

    df = module({"base": {"trace_files": TRACE}}, executor="serial", progress=False)  # fastsim.sweep(spec)
    assert df["status"].tolist() == ["ok"] and module.sweep is sweep


def test_all_errors_keep_the_schema():
    df = sweep({"base": {"trace_files": TRACE}, "grid": {"num_workers": [0]}}, executor="serial", progress=False)
    assert df["status"].tolist() == ["error"] and "mean_ttft_ms" in df and "duration_ms" in df


def test_keep_requests_in_memory_and_on_disk(tmp_path):
    spec = {"base": {"trace_files": TRACE}, "grid": {"num_workers": [1, 0, 2]}}
    df, req = sweep(spec, executor="serial", progress=False, keep_requests=True)
    n = fastsim.run_trace_replay(TRACE).summary["num_requests"]
    assert sorted(req["config_id"].unique()) == [0, 2] and len(req) == 2 * n
    assert {"row", "ttft_ms", "e2e_latency_ms", "status"} <= set(req.columns)
    out = tmp_path / "r.parquet"
    df2, req2 = sweep(spec, executor="serial", progress=False, keep_requests=True, checkpoint=out)
    assert sorted(p.name for p in (tmp_path / "r.parquet.requests").iterdir()) == ["config_0.parquet", "config_2.parquet"]
    pdt.assert_frame_equal(req2[["config_id", "row", "ttft_ms"]], req[["config_id", "row", "ttft_ms"]])
    assert len(pd.read_parquet(tmp_path / "r.parquet.requests")) == len(req)


# ----------------------------------------------------------------------------- checkpoint


def test_checkpoint_reuse_refuse_force_and_csv(tmp_path):
    spec = {"base": {"trace_files": TRACE}, "grid": {"num_workers": [1, 2]}}
    out = tmp_path / "r.parquet"
    first = sweep(spec, executor="serial", progress=False, checkpoint=out)
    assert out.exists() and not (tmp_path / "r.parquet.partial.jsonl").exists()
    pdt.assert_frame_equal(read_results(out), first)
    again = sweep(spec, executor="serial", progress=False, checkpoint=out)  # finished: read back, not rerun
    assert again["run_wall_s"].tolist() == first["run_wall_s"].tolist()
    other = {"base": {"trace_files": TRACE}, "grid": {"num_workers": [1, 3]}}
    with pytest.raises(SweepError, match="different sweep spec"):
        sweep(other, executor="serial", progress=False, checkpoint=out)
    forced = sweep(other, executor="serial", progress=False, checkpoint=out, force=True)
    assert forced["num_workers"].tolist() == [1, 3]
    csv = tmp_path / "r.csv"
    c = sweep(spec, executor="serial", progress=False, checkpoint=csv)
    back = read_results(csv)
    assert (tmp_path / "r.csv.sweep.json").exists() and back["status"].tolist() == ["ok", "ok"]
    assert back["p99_ttft_ms"].tolist() == c["p99_ttft_ms"].tolist()
    with pytest.raises(SweepError, match="different sweep spec"):
        sweep(other, executor="serial", progress=False, checkpoint=csv)


def test_partial_checkpoint_of_another_spec_is_refused(tmp_path):
    out = tmp_path / "r.parquet"
    (tmp_path / "r.parquet.partial.jsonl").write_text(json.dumps({"fastsim_sweep": 1, "spec_hash": "0" * 64}) + "\n")
    with pytest.raises(SweepError, match="different sweep spec.*--force"):
        sweep({"base": {"trace_files": TRACE}}, executor="serial", progress=False, checkpoint=out)


def test_parquet_without_pyarrow_fails_before_running(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(SweepError, match=r"needs pyarrow: pip install pyarrow"):
        sweep({"base": {"trace_files": TRACE}}, executor="serial", progress=False, checkpoint=tmp_path / "r.parquet")
    assert not list(tmp_path.iterdir())


def test_resume_drops_a_line_cut_short(tmp_path, monkeypatch):
    spec = {**SMALL, "zip": {}}
    out = tmp_path / "r.parquet"
    partial = tmp_path / "r.parquet.partial.jsonl"
    def killed(self, frame):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:  # every row written, then a "kill" before the compaction
        m.setattr(sweep_module._Checkpoint, "finish", killed)
        with pytest.raises(KeyboardInterrupt):
            sweep(spec, executor="serial", progress=False, checkpoint=out)
    lines = partial.read_text().splitlines(keepends=True)
    assert len(lines) == 5 and not out.exists()
    kept = json.loads(lines[1])
    partial.write_text("".join(lines[:2]) + lines[2][:100])  # the third line cut short, no newline
    resumed = sweep(spec, executor="serial", progress=False, checkpoint=out)
    assert out.exists() and not partial.exists()
    assert resumed.set_index("config_id").loc[kept["config_id"], "run_wall_s"] == kept["run_wall_s"]  # not rerun
    pdt.assert_frame_equal(_drop_timing(resumed), _drop_timing(sweep(spec, executor="serial", progress=False)))
    out.unlink()
    partial.write_text(lines[0] + lines[1][:50] + "\n")  # a whole line that is not JSON is refused
    with pytest.raises(SweepError, match=r"r\.parquet\.partial\.jsonl:2: corrupt line"):
        sweep(spec, executor="serial", progress=False, checkpoint=out)


def _slow_spec(tmp_path):
    spec = {"base": {"input_tokens": 256, "output_tokens": 32, "request_count": 20000, "arrival_interval_ms": 2.0},
            "grid": {"num_workers": [2, 3, 4], "extra_engine_args.max_num_seqs": [16, 64, 128, 256]}}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def test_killed_sweep_resumes_to_the_same_file(tmp_path):
    spec = _slow_spec(tmp_path)
    out = tmp_path / "killed.parquet"
    partial = tmp_path / "killed.parquet.partial.jsonl"
    cmd = [sys.executable, "-m", "fastsim", "sweep", str(spec), "--out", str(out), "--workers", "1", "--no-progress"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if partial.exists() and partial.read_text().count("\n") >= 3:  # header + 2 rows
                break
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the CLI and its worker process
        proc.wait(timeout=30)
    assert not out.exists(), "the sweep finished before it could be killed"
    text = partial.read_text()
    # A kill can land while a row is being written and leave its line cut short; the resume
    # drops such a line (test_resume_drops_a_line_cut_short), so only whole lines count.
    done = [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines()[1:]]
    assert 2 <= len(done) < 12
    rerun = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert out.exists() and not partial.exists()
    final = read_results(out)
    walls = dict(zip(final["config_id"], final["run_wall_s"]))
    assert all(walls[r["config_id"]] == r["run_wall_s"] for r in done)  # kept, not rerun
    reference = sweep(spec, executor="serial", progress=False, checkpoint=tmp_path / "reference.parquet")
    pdt.assert_frame_equal(_drop_timing(final), _drop_timing(read_results(tmp_path / "reference.parquet")))
    pdt.assert_frame_equal(_drop_timing(final), _drop_timing(reference))


# ----------------------------------------------------------------------------- CLI


def test_cli_dry_run_and_errors(tmp_path, capsys):
    spec = tmp_path / "s.json"
    spec.write_text(json.dumps({"base": {"trace_files": TRACE}, "grid": {"num_workers": [1, 2, 4]}}))
    assert main(["sweep", str(spec), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "3 configurations (trace replay)" in out and "num_workers" in out
    assert main(["sweep", str(spec)]) == 2
    assert "--out is required" in capsys.readouterr().err
    spec.write_text(json.dumps({"base": {"trace_files": TRACE}, "grid": {"num_wrkers": [1]}}))
    assert main(["sweep", str(spec), "--out", str(tmp_path / "r.parquet")]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'num_workers'" in err and "Traceback" not in err


def test_cli_sweep_writes_results(tmp_path, capsys):
    spec = tmp_path / "s.json"
    spec.write_text(json.dumps({"base": {"trace_files": TRACE}, "grid": {"num_workers": [1, 0]}}))
    out = tmp_path / "r.csv"
    assert main(["sweep", str(spec), "--out", str(out), "--executor", "serial", "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "2 configurations: 1 ok, 1 errors" in captured.out and "config 1: InputError" in captured.err
    assert read_results(out)["status"].tolist() == ["ok", "error"]


# ----------------------------------------------------------------------------- SLA goodput vs Dynamo 1.4.2

# DYN_LOG=error python -m dynamo.replay  (ai-dynamo==1.4.2) --input-tokens 1024 --output-tokens 128
#   --request-count 200 --arrival-interval-ms 40 <SLA flags> --report-json x.json   (Dynamo 1.4.2)
DYNAMO_GOODPUT = [
    (["--sla-ttft-ms", "60"], (56, 6.003926658307868, 768.5026122634071)),
    (["--sla-itl-ms", "35"], (96, 10.292445699956344, 1317.433049594412)),
    (["--sla-e2e-ms", "4500"], (95, 10.185232723915133, 1303.709788661137)),
    (["--sla-ttft-ms", "80", "--sla-itl-ms", "40", "--sla-e2e-ms", "5000"], (70, 7.504908322884835, 960.6282653292589)),
]
# ... examples/mooncake_trace_1000.jsonl --num-workers 2 --extra-engine-args '{"block_size":64}'
#   --sla-ttft-ms 2000 --sla-itl-ms 30
DYNAMO_TRACE_GOODPUT = (457, 2.4480124280388225, 536.7200289710674)
KEYS = ("goodput_completed_requests", "goodput_request_throughput_rps", "goodput_output_throughput_tok_s")


@pytest.mark.parametrize("flags, expected", DYNAMO_GOODPUT)
def test_replay_sla_goodput_matches_dynamo(tmp_path, capsys, flags, expected):
    out = tmp_path / "r.json"
    argv = ["replay", "--input-tokens", "1024", "--output-tokens", "128", "--request-count", "200",
            "--arrival-interval-ms", "40", *flags, "--dynamo-version", "1.4.2", "--report-json", str(out)]
    assert main(argv) == 0
    capsys.readouterr()
    report = json.loads(out.read_text())
    assert tuple(report[k] for k in KEYS) == pytest.approx(expected, rel=1e-12)
    assert isinstance(report["goodput_completed_requests"], int)


def test_trace_replay_sla_goodput_matches_dynamo(tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = ["replay", str(ROOT / "examples" / "mooncake_trace_1000.jsonl"), "--num-workers", "2",
            "--extra-engine-args", '{"block_size":64}', "--sla-ttft-ms", "2000", "--sla-itl-ms", "30",
            "--dynamo-version", "1.4.2", "--report-json", str(out)]
    assert main(argv) == 0
    capsys.readouterr()
    report = json.loads(out.read_text())
    assert tuple(report[k] for k in KEYS) == pytest.approx(DYNAMO_TRACE_GOODPUT, rel=1e-12)


def test_sweep_sla_columns_match_dynamo():
    spec = {"base": {"input_tokens": 1024, "output_tokens": 128, "request_count": 200, "arrival_interval_ms": 40,
                     "dynamo_version": "1.4.2"},
            "zip": {"sla_ttft_ms": [60, None], "sla_itl_ms": [None, 35]}}
    df = sweep(spec, executor="serial", progress=False)
    for i, (_, expected) in enumerate(DYNAMO_GOODPUT[:2]):
        assert tuple(df[k][i] for k in KEYS) == pytest.approx(expected, rel=1e-12)
    no_sla = sweep({"base": spec["base"]}, executor="serial", progress=False)
    assert "goodput_completed_requests" not in no_sla


def test_dynamo_version_sweeps_like_any_parameter():
    spec = {"base": {"input_tokens": 1024, "output_tokens": 16, "request_count": 20, "arrival_interval_ms": 40},
            "grid": {"dynamo_version": ["1.4.2", "1.6.1"]}}
    df = sweep(spec, executor="serial", progress=False)
    assert df["status"].tolist() == ["ok", "ok"]
    assert df["dynamo_version"].tolist() == ["1.4.2", "1.6.1"]
    # 1.6.1 charges no decode step to the pass that completes a prompt (docs/decisions)
    assert df["min_ttft_ms"][1] < df["min_ttft_ms"][0]
    assert pd.isna(df["committed_prefill_tokens"][0]) and df["committed_prefill_tokens"][1] == 20 * 1024
    bad = sweep({"base": spec["base"], "grid": {"dynamo_version": ["1.5"]}}, executor="serial", progress=False)
    assert bad["status"].tolist() == ["error"] and "'1.6.1', '1.4.2'" in bad["error"][0]
