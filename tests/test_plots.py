"""Plots (fastsim/plots.py, `fastsim plot`): rendered to PNG files, checked through the Figure objects."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("matplotlib")

import fastsim  # noqa: E402
from fastsim.cli import main  # noqa: E402
from fastsim.errors import InputError  # noqa: E402
from fastsim.plots import frontier, latency_cdfs, metric_label, pareto_mask, plot_files, worker_timelines  # noqa: E402

TRACE = str(Path(__file__).parent / "data" / "mooncake_tiny.jsonl")
PNG = b"\x89PNG\r\n\x1a\n"


def _png(path):
    data = Path(path).read_bytes()
    assert data[:8] == PNG and len(data) > 5000
    return data


@pytest.fixture(scope="module")
def reports():
    kw = dict(arrival_interval_ms=10.0, extra_engine_args={"block_size": 64})
    return [fastsim.run_synthetic_trace_replay(512, 64, 300, num_workers=w, **kw) for w in (1, 2)]


def _telemetry(n_workers, samples=50):
    rng = np.random.default_rng(1)
    rows = []
    for w in range(n_workers):
        t = np.sort(rng.uniform(0.0, 30_000.0, samples))
        for i, ti in enumerate(t):
            rows.append((ti, w, int(rng.integers(0, 64)), int(rng.integers(0, 10)), 100 + 20 * i))
    return pd.DataFrame(rows, columns=["time_ms", "worker", "running", "waiting", "kv_blocks_used"])


def _sweep_frame():
    """A results frame shaped like fastsim.sweep's (config_id, varied..., status, metrics)."""
    return pd.DataFrame({
        "config_id": [0, 1, 2, 3, 4],
        "num_workers": [1, 2, 4, 8, 8],
        "status": ["ok", "ok", "ok", "ok", "error"],
        "error": ["", "", "", "", "InputError: x"],
        "p99_ttft_ms": [900.0, 300.0, 120.0, 100.0, np.nan],
        "mean_ttft_ms": [400.0, 100.0, 60.0, 50.0, np.nan],
        "output_throughput_tok_s": [1000.0, 1900.0, 3000.0, 3100.0, np.nan],
        "duration_ms": [10_000.0] * 4 + [np.nan],
        "gpu_hours": [10 / 3600, 20 / 3600, 40 / 3600, 80 / 3600, np.nan],
    })


def test_metric_labels():
    assert metric_label("p99_ttft_ms") == "p99 TTFT (ms)"
    assert metric_label("mean_e2e_latency_ms") == "mean E2E latency (ms)"
    assert metric_label("output_throughput_tok_s") == "output throughput (tok/s)"
    assert metric_label("something_else") == "something_else"


def test_latency_cdfs_one_and_several(tmp_path, reports):
    fig = latency_cdfs(reports[0], path=tmp_path / "one.png")
    _png(tmp_path / "one.png")
    assert [ax.get_xlabel() for ax in fig.axes] == ["TTFT (ms)", "ITL per request (ms)", "E2E latency (ms)"]
    assert all(ax.get_ylabel() == "fraction of requests" for ax in fig.axes)
    line = fig.axes[0].get_lines()[0]
    assert line.get_ydata()[-1] == pytest.approx(1.0) and len(line.get_xdata()) == 300
    fig = latency_cdfs({"1 worker": reports[0], "2 workers": reports[1].requests}, path=tmp_path / "two.png")
    _png(tmp_path / "two.png")
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["1 worker", "2 workers"]
    with pytest.raises(InputError, match="labels"):
        latency_cdfs(reports, labels=["a"])


def test_latency_cdfs_by_config_and_from_jsonl(tmp_path, reports):
    path = reports[1].to_jsonl(tmp_path / "r.jsonl")
    fig = latency_cdfs(str(path))
    assert len(fig.axes[0].get_lines()) == 1
    long = pd.concat([r.requests.assign(config_id=i) for i, r in enumerate(reports)], ignore_index=True)
    fig = latency_cdfs(long, by="config_id")
    assert len(fig.axes[2].get_lines()) == 2


def test_pareto_mask():
    x = np.array([1.0, 2.0, 3.0, 2.0, np.nan, 0.5, 1.0])
    y = np.array([1.0, 3.0, 2.0, 3.0, 9.0, 0.2, 1.0])
    assert pareto_mask(x, y).tolist() == [True, True, False, True, False, True, True]


def test_frontier_marks_pareto_set(tmp_path):
    df = _sweep_frame()
    fig = frontier(df, per_gpu=False, path=tmp_path / "f.png")
    _png(tmp_path / "f.png")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "p99 TTFT (ms)" and ax.get_ylabel() == "output throughput (tok/s)"
    pareto = [ln for ln in ax.get_lines() if ln.get_label() == "Pareto set"][0]
    assert pareto.get_xdata().tolist() == [100.0]  # 8 workers: lowest latency and highest throughput
    fig = frontier(df, x="mean_ttft_ms")  # per GPU: 1000, 950, 750, 387.5 tok/s/GPU: all trade-offs
    ax = fig.axes[0]
    assert ax.get_ylabel() == "output throughput per GPU (tok/s)" and ax.get_xlabel() == "mean TTFT (ms)"
    pareto = [ln for ln in ax.get_lines() if ln.get_label() == "Pareto set"][0]
    assert pareto.get_ydata().tolist() == pytest.approx([387.5, 750.0, 950.0, 1000.0])
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert texts[0] == "1: num_workers=8"


def test_worker_timelines(tmp_path):
    fig = worker_timelines(_telemetry(3), path=tmp_path / "t.png")
    _png(tmp_path / "t.png")
    assert [ax.get_ylabel() for ax in fig.axes] == ["running requests", "waiting requests (queue depth)",
                                                   "KV blocks used"]
    assert fig.axes[-1].get_xlabel() == "time (s)"
    assert len(fig.axes[0].get_lines()) == 3
    fig = worker_timelines(_telemetry(40, samples=10), kv_capacity_blocks=1000)
    assert fig.axes[2].get_ylabel() == "KV cache usage (fraction)"
    assert [ln.get_label() for ln in fig.axes[0].get_lines()] == ["mean of 40 workers"]
    with pytest.raises(InputError, match="kv_blocks_used"):
        worker_timelines(_telemetry(2).drop(columns=["kv_blocks_used"]))


def test_plot_files_and_cli(tmp_path, reports, capsys):
    reports[0].to_jsonl(tmp_path / "a.jsonl")
    reports[1].to_jsonl(tmp_path / "b.jsonl")
    _sweep_frame().to_csv(tmp_path / "sweep.csv", index=False)
    _telemetry(2).to_csv(tmp_path / "telemetry.csv", index=False)
    written = plot_files([tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "sweep.csv",
                          tmp_path / "telemetry.csv"], tmp_path / "out")
    assert sorted(p.name for p in written) == ["latency_cdf.png", "sweep_frontier.png", "telemetry_timelines.png"]
    for p in written:
        _png(p)
    reports[0].to_json(tmp_path / "rep.json")
    assert main(["plot", str(tmp_path / "rep.json"), "--out", str(tmp_path / "o2")]) == 2
    assert "--report-jsonl" in capsys.readouterr().err
    assert main(["plot", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "o3")]) == 0
    assert "Saved plot:" in capsys.readouterr().out
    _png(tmp_path / "o3" / "latency_cdf.png")


def test_plot_a_real_sweep_file(tmp_path, capsys):
    from fastsim.sweep import sweep

    out = tmp_path / "res.parquet"
    sweep({"base": {"trace_files": TRACE}, "grid": {"num_workers": [1, 2, 3]}}, executor="serial",
          progress=False, checkpoint=out)
    assert main(["plot", str(out), "--out", str(tmp_path / "p"), "--x", "mean_e2e_latency_ms", "--total"]) == 0
    capsys.readouterr()
    _png(tmp_path / "p" / "res_frontier.png")
