"""The host KV tier (G2) in the vLLM pass (kernels/host_offload.py, docs/decisions/0352).

* Small traces recorded on Dynamo 1.6.1 (``tests/data/host_offload_small_161``), each showing a
  rule: a load while another request runs, a deferral by a store in flight and the fences on the
  GPU blocks a store still reads, the idle worker woken at a load's end, instantaneous lanes,
  first-byte latency, chunked prefill, preemption; ``mooncake_synth_500`` runs without host
  eviction (two and three workers, KV pressure, slow lanes, a closed loop), the conversation trace
  on two workers and on one worker of attention DP 2, DP ranks with a prefill cadence, and unique
  synthetic prompts readmitted after preemptions. Every report field within 1e-9 and
  every request's timeline, with its first admission's reuse split by tier.
* A tier where nothing is ever evicted from the GPU pool changes nothing (Dynamo 1.6.1 gives the
  report of the run without it): fastsim too, to the bit.
* What fastsim does not simulate is refused by name (the message says what to change).
"""

import gzip
import json
from pathlib import Path

import pytest

import fastsim
from fastsim.errors import NotSupportedError

import recorded

DATA = Path(__file__).parent / "data" / "host_offload_small_161"
CASES = json.loads((DATA / "cases.json").read_text())
SYNTH = str(Path(__file__).parent / "data" / "host_offload_161" / "inputs" / "mooncake_synth_500.jsonl")
WALL_FIELDS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}
TIMELINE = ("arrival_time_ms", "first_admit_ms", "first_token_ms", "last_token_ms", "terminal_time_ms",
            "input_length", "output_length", "reused_input_tokens", "first_admission_g1_reused_input_tokens",
            "first_admission_host_reused_input_tokens", "terminal_status", "admission_history")
KV = {"block_size": 64, "kv_cache_bytes_per_token": 131072}


def _rel(a, b):
    return 0.0 if abs(a - b) <= 1e-12 else abs(a - b) / max(abs(b), 1e-12)


def _timeline(recs):
    def norm(v):
        if isinstance(v, float):
            return round(v, 6)
        if isinstance(v, list):
            return json.dumps([{k: norm(x) for k, x in item.items()} for item in v], sort_keys=True)
        return v

    return sorted((tuple(norm(r.get(k)) for k in TIMELINE) for r in recs), key=repr)


@pytest.mark.parametrize("name", list(CASES))
def test_recorded_case_matches_dynamo(name, tmp_path, capsys):
    got, mine = recorded.cli_replay(CASES[name]["args"], DATA, tmp_path, capsys)
    want = json.loads((DATA / f"{name}.json").read_text())
    misses = [f"{k}: fastsim {got.get(k)!r}, Dynamo {v!r}" for k, v in want.items()
              if k not in WALL_FIELDS and isinstance(v, (int, float)) and not isinstance(v, bool)
              and not (isinstance(got.get(k), (int, float)) and _rel(got[k], v) <= 1e-9)]
    assert not misses, "\n".join(misses)
    with gzip.open(DATA / f"{name}.per_request.jsonl.gz", "rt") as f:
        ref = [json.loads(line) for line in f]
    assert _timeline(mine) == _timeline(ref)


def test_e1_load_and_split():
    """E1 (decision 0351): C's 6 blocks past its 1-block GPU prefix come back from host at 1 GB/s
    (6 x 8.388608 ms); D has finished by then, so the idle worker wakes at the load's end and
    admits C with 64 tokens from the GPU pool and 320 from the host tier."""
    with gzip.open(DATA / "e1.per_request.jsonl.gz", "rt") as f:
        c = next(r for r in map(json.loads, f) if r["arrival_time_ms"] == 400.0 and r["input_length"] == 448)
    assert c["first_admit_ms"] == pytest.approx(400 + 6 * 8.388608, abs=1e-9)
    assert (c["first_admission_g1_reused_input_tokens"], c["first_admission_host_reused_input_tokens"]) == (64, 320)


def _summary(report):
    return {k: v for k, v in report.summary.items() if k not in WALL_FIELDS}


def test_a_tier_that_is_never_needed_changes_nothing():
    """Nothing leaves the GPU pool (40000 blocks): every store is free and there is no host hit,
    so the report is that of the run without the tier (as on Dynamo 1.6.1, decision 0351)."""
    base = {"block_size": 64, "num_gpu_blocks": 40000, "max_num_batched_tokens": 1024}
    tier = dict(base, kv_cache_bytes_per_token=131072, native_host_offload={"num_host_blocks": 20000})
    kw = dict(trace_block_size=512, num_workers=1, dynamo_version="1.6.1")
    without = fastsim.run_trace_replay(SYNTH, extra_engine_args={"engine": base}, **kw)
    with_tier = fastsim.run_trace_replay(SYNTH, extra_engine_args={"engine": tier}, **kw)
    assert _summary(with_tier) == _summary(without)


@pytest.mark.parametrize("engine, kw, words", [
    (dict(KV, native_host_offload={"num_host_blocks": 100, "scope": "cluster_shared", "kv_layout_id": "L"}), {},
     "scope 'cluster_shared'"),
    (dict(KV, native_host_offload={"num_host_blocks": 100}), dict(scaling_schedule=[(1000.0, 2)]),
     "a scaling schedule"),
])
def test_unsupported_runs_are_refused_by_name(engine, kw, words):
    top = {"dp_size": kw.pop("dp_size")} if "dp_size" in kw else {}
    with pytest.raises(NotSupportedError, match="not supported yet by fastsim") as ei:
        fastsim.run_trace_replay(SYNTH, extra_engine_args={"engine": engine, **top}, trace_block_size=512,
                                 dynamo_version="1.6.1", **kw)
    assert words in str(ei.value)


def test_a_tier_smaller_than_the_working_set_runs():
    """200 host blocks for mooncake_synth_500's 12841 distinct prompt blocks: the tier evicts
    (decision 0354; every figure is checked against Dynamo as g2_small in test_kv_tiers.py)."""
    engine = {"engine": dict(KV, num_gpu_blocks=1500, native_host_offload={"num_host_blocks": 200})}
    report = fastsim.run_trace_replay(SYNTH, extra_engine_args=engine, trace_block_size=512, dynamo_version="1.6.1")
    assert report.summary["completed_requests"] == 500


def test_full_transfer_rings_restart_the_run(monkeypatch):
    """Transfers in flight beyond the tier's rings stop the loop (LOG_FULL); the run starts again
    with larger rings and gives the same report."""
    from fastsim import sim

    engine = {"engine": dict(KV, num_gpu_blocks=800, native_host_offload={"num_host_blocks": 20000,
                                                                        "d2h_bandwidth_gbps": 0.5})}
    kw = dict(extra_engine_args=engine, trace_block_size=512, num_workers=2, dynamo_version="1.6.1")
    want = _summary(fastsim.run_trace_replay(SYNTH, **kw))
    monkeypatch.setattr(sim, "_TIER_RINGS", (2, 16))
    assert _summary(fastsim.run_trace_replay(SYNTH, **kw)) == want


def test_a_host_tier_too_large_for_the_machine_is_refused():
    from fastsim.memory import InsufficientMemoryError

    engine = {"engine": dict(KV, native_host_offload={"num_host_blocks": 10 ** 10})}
    with pytest.raises(InsufficientMemoryError, match="engine.native_host_offload.num_host_blocks"):
        fastsim.run_trace_replay(SYNTH, extra_engine_args=engine, trace_block_size=512, dynamo_version="1.6.1")
