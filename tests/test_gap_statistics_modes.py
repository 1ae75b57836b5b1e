"""``gap_statistics="pooled"`` (``--gap-statistics pooled``, docs/decisions/0286): the ITL and
per-user throughput means and deviations from sums instead of Dynamo's running update, within
1e-9 of Dynamo's recorded reports; every other field, and every request, as in the exact mode."""

import json

import numpy as np
import pytest

from fastsim.api import run_synthetic_trace_replay, run_trace_replay
from fastsim.errors import InputError

from test_gap_stats import CASES, DATA, EXACT, WALL_FIELDS, _replay

SMALL = [c for c in CASES if c[0] in ("synthetic_20k_4w", "dp2_10k_2w", "preempt_tight_kv", "disagg_transfer",
                                      "time_cap_2w", "trtllm_1w", "mtp_k2")]


@pytest.mark.parametrize("name,release,flags", SMALL, ids=[f"{n}-{r}" for n, r, _ in SMALL])
def test_pooled_is_within_1e9_of_dynamo(name, release, flags, tmp_path, capsys):
    got = _replay(flags, release, tmp_path, capsys, "--gap-statistics", "pooled")
    want = json.loads((DATA / f"{name}.{release}.json").read_text())
    misses = [f"{k}: fastsim {got.get(k)!r}, Dynamo {v!r}" for k, v in want.items()
              if k not in WALL_FIELDS and isinstance(v, (int, float)) and not isinstance(v, bool)
              and not got.get(k) == pytest.approx(v, rel=1e-9, abs=1e-12)]
    assert not misses, "\n".join(misses)


def _summary(report):
    return {k: v for k, v in report.summary.items() if k not in WALL_FIELDS}


def test_only_the_four_folded_fields_change():
    kw = dict(num_workers=3, arrival_interval_ms=2.0, extra_engine_args={"block_size": 16, "num_gpu_blocks": 900})
    exact = run_synthetic_trace_replay(512, 96, 3000, **kw)
    pooled = run_synthetic_trace_replay(512, 96, 3000, gap_statistics="pooled", **kw)
    a, b = _summary(exact), _summary(pooled)
    assert a.keys() == b.keys()
    assert {k for k in a if a[k] != b[k]} <= set(EXACT)
    for k in EXACT:
        assert b[k] == pytest.approx(a[k], rel=1e-12)
    assert exact.requests.equals(pooled.requests)


def test_pooled_split_run_equals_whole_run():
    kw = dict(num_workers=4, arrival_interval_ms=1.0, gap_statistics="pooled")
    whole = run_synthetic_trace_replay(256, 64, 4000, threads=1, **kw)
    split = run_synthetic_trace_replay(256, 64, 4000, threads=2, **kw)
    assert _summary(whole) == _summary(split)


def test_pooled_trace_replay(tmp_path):
    trace = DATA.parent.parent.parent / "examples" / "mooncake_trace_1000.jsonl"
    a = run_trace_replay(trace, num_workers=2)
    b = run_trace_replay(trace, num_workers=2, gap_statistics="pooled")
    for k in EXACT:
        assert b.summary[k] == pytest.approx(a.summary[k], rel=1e-12)
    assert np.array_equal(a.requests["ttft_ms"].to_numpy(), b.requests["ttft_ms"].to_numpy())


@pytest.mark.parametrize("value", ["fast", "", None, 1])
def test_an_unknown_mode_is_refused_by_name(value):
    with pytest.raises(InputError, match="gap_statistics .* allowed: 'exact'"):
        run_synthetic_trace_replay(64, 8, 10, arrival_interval_ms=1.0, gap_statistics=value)


def test_pooled_keeps_no_token_times(monkeypatch):
    """The pooled mode keeps no per-request token times: nothing is folded at completion."""
    import fastsim.sim as sim

    kept = []
    build = sim.build_state

    def probe(*args, **kwargs):
        st = build(*args, **kwargs)
        kept.append(st.gaps.tl.head.shape[0])
        return st

    monkeypatch.setattr(sim, "build_state", probe)
    run_synthetic_trace_replay(64, 8, 50, arrival_interval_ms=1.0, num_workers=2, threads=1)
    run_synthetic_trace_replay(64, 8, 50, arrival_interval_ms=1.0, num_workers=2, threads=1, gap_statistics="pooled")
    assert kept[-2:] == [50, 0]  # (a first simulation in the process loads the kernels first)
