"""Plots that tell the truth (issue: a user's first hour, item 7)."""

import itertools
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("matplotlib")

from fastsim.plots import config_labels, frontier, latency_cdfs, plot_files, worker_timelines  # noqa: E402
from fastsim.sweep import sweep  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRACE = str(Path(__file__).parent / "data" / "mooncake_tiny.jsonl")


def fastsim(*argv, cwd):
    return subprocess.run([sys.executable, "-m", "fastsim", *argv], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


def _telemetry_with_retirement():
    """Worker 0 samples every second for 30 s; worker 1 retires after 10 s with a full queue."""
    rows = [(t * 1000.0, 0, 2, 0, 10) for t in range(31)]
    rows += [(t * 1000.0, 1, 50, 9, 900) for t in range(11)]
    return pd.DataFrame(rows, columns=["time_ms", "worker", "running", "waiting", "kv_blocks_used"])


def test_a_worker_timeline_stops_at_its_retirement():
    fig = worker_timelines(_telemetry_with_retirement())
    line = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}["worker 1"]
    t, y = (np.asarray(a, dtype=float) for a in line.get_data())
    assert np.nanmax(t[np.isfinite(y)]) == 10.0  # no value after its last sample (was carried to 30 s)
    assert np.isnan(y[t > 10.0]).all()


def test_the_mean_over_many_workers_leaves_retired_ones_out():
    tel = pd.concat([_telemetry_with_retirement().assign(worker=lambda d, k=k: d["worker"] + 2 * k)
                     for k in range(10)], ignore_index=True)  # 20 workers: the mean and the band
    fig = worker_timelines(tel)
    mean = next(ln for ln in fig.axes[0].get_lines() if ln.get_label().startswith("mean of"))
    t, y = (np.asarray(a, dtype=float) for a in mean.get_data())
    assert y[t == 5.0][0] == 26.0 and y[t == 20.0][0] == 2.0  # after retirement: the survivors only


def _crowded_results(n=6):
    """``n`` Pareto points a few pixels apart (dominated points far away set the axes' range):
    labels at one fixed offset from their points would collide."""
    x = np.concatenate([np.linspace(100.0, 108.0, n), [900.0, 950.0]])
    y = np.concatenate([1000.0 + 8.0 * np.arange(n), [100.0, 120.0]])
    m = len(x)
    return pd.DataFrame({
        "config_id": range(m), "num_workers": range(1, m + 1), "status": ["ok"] * m, "error": [""] * m,
        "p99_ttft_ms": x, "output_throughput_tok_s": y, "duration_ms": [1000.0] * m, "gpu_hours": [1 / 3600] * m,
    })


def test_frontier_labels_do_not_overlap():
    fig = frontier(_crowded_results(), per_gpu=False)
    fig.canvas.draw()
    ax = fig.axes[0]
    boxes = [t.get_window_extent() for t in ax.texts]
    assert len(boxes) == 6
    assert not any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2))


def test_frontier_axes_are_logarithmic_only_when_values_span_decades():
    df = _crowded_results()
    fig = frontier(df, per_gpu=False)
    assert (fig.axes[0].get_xscale(), fig.axes[0].get_yscale()) == ("linear", "linear")
    df["p99_ttft_ms"] = np.geomspace(10.0, 100_000.0, len(df))
    df["output_throughput_tok_s"] = np.geomspace(10.0, 50_000.0, len(df))
    fig = frontier(df, per_gpu=False)
    assert (fig.axes[0].get_xscale(), fig.axes[0].get_yscale()) == ("log", "log")


@pytest.fixture(scope="module")
def kept_sweep(tmp_path_factory):
    d = tmp_path_factory.mktemp("kept")
    spec = {"base": {"trace_files": TRACE, "extra_engine_args": {"block_size": 16}},
            "grid": {"num_workers": [1, 2], "extra_engine_args.max_num_seqs": [4, 64]}}
    sweep(spec, executor="serial", progress=False, checkpoint=d / "res.parquet", keep_requests=True)
    return d


def test_cdf_legends_name_the_varied_parameters(kept_sweep):
    res = pd.read_parquet(kept_sweep / "res.parquet")
    assert config_labels(res) == {0: "num_workers=1, max_num_seqs=4", 1: "num_workers=1, max_num_seqs=64",
                                  2: "num_workers=2, max_num_seqs=4", 3: "num_workers=2, max_num_seqs=64"}
    out = kept_sweep / "plots"
    written = plot_files([kept_sweep / "res.parquet.requests"], out)
    assert [p.name for p in written] == ["res_latency_cdf.png"]


def test_plot_of_a_sweep_that_kept_requests_draws_its_latency_cdfs(kept_sweep, tmp_path):
    r = fastsim("plot", str(kept_sweep / "res.parquet"), "--out", "p", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"Saved plot: {Path('p') / 'res_frontier.png'}",
                                     f"Saved plot: {Path('p') / 'res_latency_cdf.png'}"]
    assert (tmp_path / "p" / "res_latency_cdf.png").read_bytes()[:4] == b"\x89PNG"
    req = pd.read_parquet(kept_sweep / "res.parquet.requests")
    from fastsim.plots import _by_configuration

    fig = latency_cdfs(_by_configuration(req, pd.read_parquet(kept_sweep / "res.parquet")))
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend[0] == "num_workers=1, max_num_seqs=4" and not any("config" in t for t in legend)


def test_mistyped_x_gets_suggestions(kept_sweep, tmp_path):
    r = fastsim("plot", str(kept_sweep / "res.parquet"), "--x", "p99_ttft", "--out", "p", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "no 'p99_ttft' column; did you mean 'p99_ttft_ms'" in r.stderr
    r = fastsim("plot", str(kept_sweep / "res.parquet"), "--x", "qqq", "--out", "p", cwd=tmp_path)
    assert r.returncode == 2 and "metrics: " in r.stderr


def test_the_capacity_example_writes_only_into_its_out_folder(tmp_path):
    """`fastsim plan` run in the example's folder (a small spec in place of plan.yaml) writes into --out alone."""
    example = ROOT / "examples" / "capacity_planning"
    before = sorted(p.name for p in example.iterdir())
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"workload: {{trace_files: {TRACE}}}\nengine: {{block_size: 16}}\nslo: {{p99_ttft_ms: 3000}}\n"
                    "search: {num_workers: [1, 2], max_num_seqs: [4, 64]}\ncost: {gpu_hour_usd: {H100: 2.5}}\n")
    r = subprocess.run([sys.executable, "-m", "fastsim", "plan", str(spec), "--out", str(tmp_path / "out"),
                        "--executor", "serial", "--no-progress"], cwd=example, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode in (0, 1), r.stderr
    assert "results.parquet" in [p.name for p in (tmp_path / "out").iterdir()]
    assert sorted(p.name for p in example.iterdir()) == before
    if shutil.which("git") and (ROOT / ".git").exists():
        status = subprocess.run(["git", "status", "--porcelain", "--", "examples"], cwd=ROOT,
                                capture_output=True, text=True).stdout
        assert "??" not in status
