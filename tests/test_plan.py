"""Capacity planning (fastsim/plan.py, fastsim/plan_report.py, `fastsim plan`).

On the bundled Mooncake trace: the answer meets every SLO when replayed on its own and no cheaper
evaluated configuration does; bisection finds the exhaustive answer; monotonicity violations are
found; the outputs (plan.json, results.parquet, PNGs, a self-contained report.html that renders in
headless Chromium with the answer on screen); the replay cache resumes; each bad spec is an error
before anything runs.
"""

import base64
import html.parser
import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import fastsim
from fastsim import plan as plan_module
from fastsim.cli import main
from fastsim.plan import SLO_METRICS, load_plan_spec, plan, split_workers
from fastsim.sweep import SpecError

ROOT = Path(__file__).resolve().parents[1]
TRACE = str(ROOT / "examples" / "mooncake_trace_1000.jsonl")
PRICE = {"H100": 2.5, "H200": 3.75}


def _spec(**over):
    spec = {
        "name": "bundled-trace",
        "workload": {"trace_files": TRACE, "trace_block_size": 512},
        "engine": {"block_size": 64},
        "slo": {"p99_ttft_ms": 3000, "p99_itl_ms": 200},
        "search": {"num_workers": {"min": 1, "max": 8}, "split": ["agg", "1:1"]},
        "cost": {"gpu_hour_usd": {"H100": PRICE["H100"]}},
    }
    for k, v in over.items():
        spec[k] = v
    return spec


@pytest.fixture(scope="module", autouse=True)
def _warm_kernels():
    fastsim.run_synthetic_trace_replay(16, 2, 1, arrival_interval_ms=1.0, extra_engine_args={"block_size": 16})


@pytest.fixture(scope="module")
def exhaustive(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan")
    return plan(_spec(), out, executor="serial", progress=False), out


def _meets(summary, slo):
    """The SLOs checked straight on a replay summary (independently of the planner's own verdict)."""
    for name, bound in slo.items():
        if summary[SLO_METRICS[name]] > bound:
            return False
    return summary["completed_requests"] == summary["num_requests"]


# ----------------------------------------------------------------------------- the answer


def test_best_meets_every_slo_in_its_own_replay_and_nothing_cheaper_does(exhaustive):
    result, _ = exhaustive
    slo = _spec()["slo"]
    best = result.best
    assert best is not None and result.infeasible is None
    # its own replay, run here with the arguments the plan gives it
    kwargs = dict(result.spec.points[best["config_id"]].kwargs)
    report = fastsim.run_trace_replay(kwargs.pop("trace_files"), **kwargs)
    assert _meets(report.summary, slo)
    for s in best["slo"]:
        assert s["met"] and s["margin"] == pytest.approx(s["bound"] - report.summary[SLO_METRICS[s["name"]]])
    # the cost: workers x 1 GPU x the price
    assert best["cost_per_hour_usd"] == pytest.approx(best["gpus"] * PRICE["H100"])
    assert best["cost_per_million_output_tokens_usd"] == pytest.approx(
        best["cost_per_hour_usd"] / (3600 * report.summary["output_throughput_tok_s"]) * 1e6)
    # every cheaper evaluated configuration misses an SLO, read from its row's own metrics
    res = result.results
    cheaper = res[res["cost_per_hour_usd"] < best["cost_per_hour_usd"]]
    assert len(cheaper) > 0
    for _, row in cheaper.iterrows():
        assert not _meets(row, slo), row["config_id"]
    assert res["meets_slo"].tolist() == [_meets(r, slo) for _, r in res.iterrows()]


def test_bisection_finds_the_exhaustive_answer(exhaustive):
    full, _ = exhaustive
    bis = plan(_spec(), method="bisect", executor="serial", progress=False)
    assert bis.best["config_id"] == full.best["config_id"]
    assert bis.best["cost_per_hour_usd"] == full.best["cost_per_hour_usd"]
    assert bis.search["evaluated"] < full.search["evaluated"]
    assert full.monotonicity.empty  # on this grid the assumption holds: every group agrees
    a = full.fewest_workers.set_index("group")["fewest_workers"]
    b = bis.fewest_workers.set_index("group")["fewest_workers"]
    pd.testing.assert_series_equal(a.sort_index(), b.sort_index())
    # bisection stays inside a few probes per group (the largest count, then halving)
    per_group = bis.results.groupby("group").size()
    assert (per_group <= 1 + math.ceil(math.log2(8))).all()


def test_monotonicity_violations_are_reported():
    # p99 E2E on this trace: 3 aggregated workers do better than 4 (round robin's request spread)
    spec = _spec(slo={"p99_e2e_ms": 16000}, search={"num_workers": [2, 3, 4, 6]})
    res = plan(spec, executor="serial", progress=False)
    df = res.results.set_index("num_workers")["p99_e2e_latency_ms"]
    expected = [(w1, w2) for w1 in df.index for w2 in df.index
                if w1 < w2 and df[w1] <= 16000 < df[w2]]
    assert expected, "this grid was chosen for a violation; the simulation changed"
    got = res.monotonicity
    # each miss is reported against the largest smaller count that met the SLO
    want = {(max(w1 for w1, x in expected if x == w2), w2) for _, w2 in expected}
    assert set(zip(got["met_at_workers"], got["missed_at_workers"])) == want
    assert (got["slo"] == "p99_e2e_ms").all()
    assert res.best["params"]["num_workers"] == min(w for w in df.index if df[w] <= 16000)


def test_infeasible_says_why_and_cli_exits_1(tmp_path, capsys):
    spec = tmp_path / "p.json"
    spec.write_text(json.dumps(_spec(slo={"p99_ttft_ms": 50}, search={"num_workers": [1, 2]})))
    assert main(["plan", str(spec), "--out", str(tmp_path / "o"), "--executor", "serial", "--no-progress"]) == 1
    assert "infeasible: no evaluated configuration meets every SLO" in capsys.readouterr().out
    doc = json.loads((tmp_path / "o" / "plan.json").read_text())
    assert doc["best"] is None
    assert "p99_ttft_ms <= 50 met by 0 of 2" in doc["infeasible"]["reason"]
    assert doc["infeasible"]["closest"]["params"]["num_workers"] == 2
    assert "No configuration meets the SLOs" in (tmp_path / "o" / "report.html").read_text()


def test_goodput_slo_uses_the_replays_goodput():
    spec = _spec(slo={"goodput": {"min_fraction": 0.95, "ttft_ms": 2000, "itl_ms": 40}},
                 search={"num_workers": [2, 4, 8]})
    res = plan(spec, executor="serial", progress=False)
    df = res.results
    frac = df["goodput_completed_requests"] / df["num_requests"]
    np.testing.assert_allclose(df["goodput_fraction"], frac)
    assert df["meets_slo"].tolist() == (frac >= 0.95).tolist()
    kw = res.spec.points[0].kwargs
    assert kw["sla_ttft_ms"] == 2000 and kw["sla_itl_ms"] == 40


# ----------------------------------------------------------------------------- outputs


class _Collect(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.attrs, self.text = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def test_outputs_in_dir(exhaustive):
    result, out = exhaustive
    doc = json.loads((out / "plan.json").read_text())
    assert doc["best"]["config_id"] == result.best["config_id"] and doc["infeasible"] is None
    assert {"pareto", "fewest_workers", "monotonicity", "search", "spec", "slo"} <= set(doc)
    assert doc["search"]["evaluated"] == doc["search"]["configurations_in_grid"] == 15  # 8 agg + 7 split
    table = pd.read_parquet(out / "results.parquet")
    assert len(table) == 15 and table["config_id"].tolist() == list(range(15))
    # the pareto set: nothing evaluated is at least as good on cost and both metrics, better on one
    obj = table[["cost_per_hour_usd", "p99_ttft_ms", "p99_itl_ms"]].to_numpy()
    for i in range(len(table)):
        dominated = np.any(np.all(obj <= obj[i], axis=1) & np.any(obj < obj[i], axis=1))
        assert table["pareto"].iloc[i] == (not dominated)
    assert sorted(r["config_id"] for r in doc["pareto"]) == table.loc[table["pareto"], "config_id"].tolist()
    assert result.best["config_id"] in table.loc[table["pareto"], "config_id"].tolist()
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == ["cost_vs_p99_itl_ms.png", "cost_vs_p99_ttft_ms.png", "fewest_workers.png"]
    for p in out.glob("*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_html_is_self_contained(exhaustive):
    result, out = exhaustive
    text = (out / "report.html").read_text()
    parser = _Collect()
    parser.feed(text)
    parser.close()
    assert {"html", "head", "body", "table"} <= set(parser.tags)
    assert "script" not in parser.tags and "link" not in parser.tags and "iframe" not in parser.tags
    imgs = [a for t, a in parser.attrs if t == "img"]
    assert len(imgs) == 3
    for a in imgs:
        prefix = "data:image/png;base64,"
        assert a["src"].startswith(prefix)
        assert base64.b64decode(a["src"][len(prefix):])[:4] == b"\x89PNG"
    for _, a in parser.attrs:
        for v in a.values():
            assert not (v or "").startswith(("http:", "https:", "//")), v
    body = " ".join(parser.text)
    assert result.best["label"] in body and f"{result.best['cost_per_hour_usd']:,.2f} USD per hour" in body
    assert f"{result.search['search_seconds']:.1f} s" in body  # how long the search took


def _chromium():
    for name in (os.environ.get("FASTSIM_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _pixels(png, rgb):
    from matplotlib.image import imread

    img = (imread(png)[:, :, :3] * 255).round().astype(int)
    return int(np.all(np.abs(img - np.array(rgb)) <= 2, axis=2).sum())


@pytest.mark.skipif(_chromium() is None, reason="no Chromium found (chromium, chromium-browser, google-chrome or "
                    "$FASTSIM_CHROMIUM): .ci/run installs it with apt-get where apt is available")
def test_report_renders_in_headless_chromium(exhaustive, tmp_path):
    _, out = exhaustive
    shots = {}
    for name, height in (("top", 900), ("page", 6000)):
        shot = tmp_path / f"{name}.png"
        # no network: everything the page shows is inline
        subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--no-first-run", "--proxy-server=127.0.0.1:9", f"--window-size=1280,{height}",
                        f"--screenshot={shot}", (out / "report.html").as_uri()],
                       check=True, capture_output=True, timeout=120)
        shots[name] = shot
    # the answer box (#146c2e) is on the first screen, a sizeable block of it
    assert _pixels(shots["top"], (0x14, 0x6C, 0x2E)) > 20000
    # the plots were decoded and drawn: the markers of configurations meeting the SLOs (#1f77b4)
    assert _pixels(shots["page"], (0x1F, 0x77, 0xB4)) > 200


# ----------------------------------------------------------------------------- search space


def test_split_workers_never_shrinks_a_pool():
    for ratio in [(1, 1), (1, 2), (2, 1), (1, 3), (3, 5)]:
        prev = (1, 1)
        for total in range(2, 60):
            p, d = split_workers(total, ratio)
            assert p >= 1 and d >= 1 and p + d == total
            assert p >= prev[0] and d >= prev[1]
            prev = (p, d)
    assert split_workers(8, (1, 3)) == (2, 6) and split_workers(6, (1, 1)) == (3, 3)


def test_gpu_types_tensor_parallel_and_engine_per_type():
    spec = _spec(
        engine={"block_size": 64, "prefill": {"max_num_batched_tokens": 16384}},
        search={"num_workers": [2, 4], "split": ["agg", "1:1"], "prefill_gpu": ["H100", "H200"],
                "max_num_seqs": [64, 128]},
        cost={"gpu_hour_usd": PRICE, "gpu": "H100", "prefill_tensor_parallel_size": 2,
              "gpu_engine_args": {"H200": {"speedup_ratio": 1.5}}})
    sp = load_plan_spec(spec)
    # agg ignores prefill_gpu: its two settings merge into one group per max_num_seqs
    labels = [g.label for g in sp.groups]
    assert labels == ["split=agg, max_num_seqs=64", "split=agg, max_num_seqs=128",
                      "split=1:1, prefill_gpu=H100, max_num_seqs=64", "split=1:1, prefill_gpu=H100, max_num_seqs=128",
                      "split=1:1, prefill_gpu=H200, max_num_seqs=64", "split=1:1, prefill_gpu=H200, max_num_seqs=128"]
    p = next(p for p in sp.points if p.params.get("prefill_gpu") == "H200" and p.workers == 4)
    assert p.kwargs["num_prefill_workers"] == 2 and p.kwargs["num_decode_workers"] == 2
    assert p.kwargs["prefill_engine_args"] == {"block_size": 64, "max_num_batched_tokens": 16384, "speedup_ratio": 1.5,
                                               "max_num_seqs": 64, "worker_type": "prefill"}
    assert p.kwargs["decode_engine_args"] == {"block_size": 64, "max_num_seqs": 64, "worker_type": "decode"}
    # 2 prefill workers x TP 2 x H200 + 2 decode workers x 1 x H100
    assert p.gpus == 6 and p.cost_per_hour == pytest.approx(2 * 2 * 3.75 + 2 * 2.5)
    agg = next(p for p in sp.points if p.params["split"] == "agg" and p.workers == 4)
    assert agg.kwargs["extra_engine_args"] == {"block_size": 64, "max_num_seqs": 64} and agg.cost_per_hour == 10.0
    res = plan(sp, executor="serial", progress=False, method="bisect")
    assert res.best is not None and res.best["cost_per_hour_usd"] == res.results.loc[
        res.results["meets_slo"], "cost_per_hour_usd"].min()


def test_replay_keywords_pass_through(monkeypatch):
    spec = _spec(workload={"trace_files": TRACE, "trace_block_size": 512, "arrival_speedup_ratio": 2.0},
                 search={"num_workers": [2], "router_mode": ["round_robin", "kv_router"],
                         "router_config": {"router_temperature": [0.0, 0.5]}})
    sp = load_plan_spec(spec)
    kws = [p.kwargs for p in sp.points]
    assert [k["router_mode"] for k in kws] == ["round_robin", "round_robin", "kv_router", "kv_router"]
    assert [k["router_config"] for k in kws][:2] == [{"router_temperature": 0.0}, {"router_temperature": 0.5}]
    assert all(k["arrival_speedup_ratio"] == 2.0 for k in kws)
    # a keyword the replay API gains later is accepted as it is (read from the API's signature)
    real = plan_module._api_params
    monkeypatch.setattr(plan_module, "_api_params", lambda mode: {**real(mode), "dynamo_version": "1.6.1"})
    sp = load_plan_spec(_spec(workload={"trace_files": TRACE, "dynamo_version": "1.4.2"},
                              search={"num_workers": [1], "dynamo_version": ["1.4.2", "1.6.1"]}))
    assert [p.kwargs["dynamo_version"] for p in sp.points] == ["1.4.2", "1.6.1"]


def test_spec_files_yaml_toml_json_agree(tmp_path):
    (tmp_path / "t.jsonl").write_text(Path(TRACE).read_text())
    yaml_text = """
workload: {trace_files: t.jsonl, trace_block_size: 512}
slo: {p90_ttft_ms: 2000}
search:
  num_workers: {min: 2, max: 6, step: 2}
  split: [agg, "1:2"]
cost: {gpu_hour_usd: {H100: 2.5}}
"""
    toml_text = """
[workload]
trace_files = "t.jsonl"
trace_block_size = 512
[slo]
p90_ttft_ms = 2000
[search]
num_workers = {min = 2, max = 6, step = 2}
split = ["agg", "1:2"]
[cost.gpu_hour_usd]
H100 = 2.5
"""
    json_text = json.dumps({"workload": {"trace_files": "t.jsonl", "trace_block_size": 512},
                            "slo": {"p90_ttft_ms": 2000},
                            "search": {"num_workers": [2, 4, 6], "split": ["agg", [1, 2]]},
                            "cost": {"gpu_hour_usd": {"H100": 2.5}}})
    keys = []
    for name, text in (("p.yaml", yaml_text), ("p.toml", toml_text), ("p.json", json_text)):
        (tmp_path / name).write_text(text)
        sp = load_plan_spec(tmp_path / name)
        assert sp.points[0].kwargs["trace_files"] == str(tmp_path / "t.jsonl")  # relative to the spec
        keys.append([(p.label, p.key) for p in sp.points])
    assert keys[0] == keys[1] == keys[2] and len(keys[0]) == 6


# ----------------------------------------------------------------------------- resume


def test_rerun_reuses_replays_and_force_recomputes(tmp_path):
    spec = _spec(search={"num_workers": [1, 2, 3]})
    first = plan(spec, tmp_path, executor="serial", progress=False)
    assert first.search["replays_run"] == 3
    cache = tmp_path / "evaluations.jsonl"
    lines = cache.read_text().splitlines()
    cache.write_text("\n".join(lines[:2]) + "\n" + lines[2][:40])  # killed while writing the third
    again = plan(spec, tmp_path, executor="serial", progress=False)
    assert (again.search["replays_run"], again.search["reused_from_cache"]) == (1, 2)
    assert again.best == first.best
    cols = [c for c in first.results.columns if c not in ("run_wall_s", "wall_time_ms", "processed_tokens_per_s",
                                                           "processed_output_tokens_per_s")]
    pd.testing.assert_frame_equal(again.results[cols], first.results[cols])
    forced = plan(spec, tmp_path, executor="serial", progress=False, force=True)
    assert forced.search["replays_run"] == 3


def test_local_executor_runs_bisection_rounds_on_one_pool(tmp_path):
    spec = _spec(search={"num_workers": [1, 2, 3, 4]})
    res = plan(spec, tmp_path, method="bisect", executor="local", workers=2, progress=False)
    ref = plan(spec, method="bisect", executor="serial", progress=False)
    assert res.best["config_id"] == ref.best["config_id"] and res.search["rounds"] == ref.search["rounds"] >= 2
    assert (res.results["status"] == "ok").all()


# ----------------------------------------------------------------------------- bad specs


BAD = [
    ({"slo": {"p99_tfft_ms": 100}}, "unknown SLO metric 'p99_tfft_ms'; did you mean 'p99_ttft_ms'?"),
    ({"slo": {"p99_queue_ms": 100}}, "the report has no metric 'queue_ms'"),
    ({"slo": {"p42_ttft_ms": 100}}, "the report has no statistic 'p42'"),
    ({"slo": {}}, "give at least one objective"),
    ({"slo": {"goodput": {"min_fraction": 0.9}}}, "at least one per-request bound"),
    ({"search": {"num_workers": []}}, "search.num_workers is an empty list: empty search space"),
    ({"search": {"num_workers": {"min": 8, "max": 4}}}, "is empty (max < min): empty search space"),
    ({"search": {}}, "empty search space: give at least num_workers"),
    ({"search": {"num_workers": [1], "max_num_seqs": []}}, "search.max_num_seqs is an empty list"),
    ({"search": {"num_workers": [1], "split": ["1:1"]}}, "split 1:1 needs at least 2 workers"),
    ({"search": {"max_num_seqs": [8]}}, "num_workers (the worker counts to consider"),
    ({"search": {"num_workers": [2], "gpu": ["H100", "A100"]}},
     "cost.gpu_hour_usd has no price for GPU type 'A100' (used by search.gpu)"),
    ({"cost": {"gpu_hour_usd": {"H100": 2.5}, "prefill_gpu": "H10"}, "search": {"num_workers": [2], "split": ["1:1"]}},
     "no price for GPU type 'H10' (used by plan spec: cost.prefill_gpu); did you mean 'H100'?"),
    ({"cost": {"gpu_hour_usd": PRICE}}, "which GPU type runs the aggregated workers?"),
    ({"cost": {"gpu_hour_usd": {}}}, "price at least one GPU type"),
    ({"cost": {"gpu": "H100"}}, "gpu_hour_usd (USD per GPU-hour"),
    ({"cost": {"gpu_hour_usd": {"H100": 2.5}, "tensor_paralel_size": 2}},
     "unknown key 'tensor_paralel_size'; did you mean 'tensor_parallel_size'?"),
    ({"cost": None}, "the cost section is required"),
    ({"slos": {}}, "unknown section 'slos'; did you mean 'slo'?"),
    ({"workload": {"trace_files": TRACE, "trace_blok_size": 512}},
     "unknown key 'trace_blok_size'; did you mean 'trace_block_size'?"),
    ({"workload": {"trace_files": TRACE, "num_workers": 4}}, "'num_workers' is set by the plan"),
    ({"workload": {"trace_files": TRACE, "request_rate": 4}}, "applies to synthetic replay only"),
    ({"workload": {"trace_files": "no/such/trace.jsonl"}}, "workload.trace_files: cannot read no/such/trace.jsonl"),
    ({"engine": {"max_num_seq": 8}}, "unknown engine argument 'max_num_seq'; did you mean 'max_num_seqs'?"),
    ({"engine": {"max_num_seqs": 0}}, "max_num_seqs"),
    ({"search": {"num_workers": [2], "max_num_seqz": [1]}}, "unknown key 'max_num_seqz'; did you mean 'max_num_seqs'?"),
    ({"search": {"num_workers": [2], "split": [12]}}, "quoted 'P:D' string"),
    ({"search": {"num_workers": [2], "split": ["1:1"], "dp_size": [2]}}, "dp_size 2 is not allowed in a disaggregated"),
    ({"search": {"num_workers": [2], "method": "binary"}}, "search.method must be one of exhaustive, bisect"),
]


@pytest.mark.parametrize("over, message", BAD)
def test_bad_specs_fail_before_anything_runs(over, message, monkeypatch):
    def no_replay(*a, **k):
        raise AssertionError("a replay ran")

    monkeypatch.setattr(plan_module._Evaluator, "evaluate", no_replay)
    monkeypatch.setattr(plan_module._Evaluator, "__init__", no_replay)
    with pytest.raises(SpecError) as info:
        plan(_spec(**over), executor="serial", progress=False)
    assert message in str(info.value)


def test_cli_bad_spec_and_dry_run(tmp_path, capsys):
    spec = tmp_path / "p.json"
    spec.write_text(json.dumps(_spec(slo={"p99_tfft_ms": 100})))
    assert main(["plan", str(spec), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'p99_ttft_ms'" in err and "Traceback" not in err and not (tmp_path / "o").exists()
    spec.write_text(json.dumps(_spec()))
    assert main(["plan", str(spec), "--dry-run"]) == 0
    assert "15 configurations in 2 groups (trace replay, exhaustive search)" in capsys.readouterr().out
    assert main(["plan", str(spec)]) == 2
    assert "--out is required" in capsys.readouterr().err
