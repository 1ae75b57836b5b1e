"""KV tiers below the GPU pool (fastsim/kv_tiers.py, docs/decisions/0350, 0352).

* Dynamo 1.6.1's host tier (``engine.native_host_offload``) and G3 tier (``engine.g3_offload``)
  are checked with Dynamo's rules (the messages below restate Dynamo 1.6.1's own checks); the G3
  tier is refused by name, the host tier is simulated (``tests/test_host_offload.py``).
* Dynamo 1.4.2's flat names (``num_g2_blocks``, ...) run as in 1.4.2, whose offline replay has no
  tiers (``dynamo142_g2_noop``, recorded on 1.4.2); in 1.6.1 mode they map to the host tier as
  Dynamo 1.6.1's compatibility runner maps them.
* The recorded Dynamo 1.6.1 offload cases (``tests/data/host_offload_161``) are compared field by
  field and request by request where fastsim simulates them (host eviction included, decision
  0354); the others are refused by name (``REFUSED``: a configuration not supported yet).
"""

import gzip
import json
from pathlib import Path

import pytest

from fastsim import cli
from fastsim.config import EngineArgs
from fastsim.errors import InputError, NotSupportedError

import recorded

DATA = Path(__file__).parent / "data" / "host_offload_161"
CASES = json.loads((DATA / "cases.json").read_text())
TINY = str(Path(__file__).parent / "data" / "mooncake_tiny.jsonl")
WALL_FIELDS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}
TIMELINE = ("arrival_time_ms", "first_admit_ms", "first_token_ms", "last_token_ms", "terminal_time_ms",
            "input_length", "output_length", "reused_input_tokens", "first_admission_g1_reused_input_tokens",
            "first_admission_host_reused_input_tokens", "terminal_status", "prefill_admit_ms",
            "decode_admit_ms", "decode_reused_input_tokens")
KV = {"block_size": 64, "num_gpu_blocks": 100, "kv_cache_bytes_per_token": 131072}


def parse(engine, **top):
    return EngineArgs.from_json(json.dumps({"engine": engine, **top}))


@pytest.mark.parametrize(
    "engine, pattern",
    [
        (dict(KV, native_host_offload={}), r"'engine.native_host_offload' is missing 'num_host_blocks'"),
        (dict(KV, native_host_offload={"num_host_blocks": 0}), r"num_host_blocks' must be positive"),
        (dict(KV, native_host_offload={"num_host_blocks": 2.5}), r"num_host_blocks' must be an integer"),
        (dict(KV, native_host_offload={"num_host_blocks": 5, "foo": 1}),
         r"unknown field 'engine.native_host_offload.foo' \(valid fields: scope, num_host_blocks"),
        (dict(KV, native_host_offload={"num_host_blocks": 5, "scope": "worker_local"}), r"is a G3 scope"),
        (dict(KV, native_host_offload={"num_host_blocks": 5, "scope": "bogus"}),
         r"scope' must be 'dp_rank_local' or 'cluster_shared'"),
        (dict(KV, native_host_offload={"num_host_blocks": 5, "scope": "cluster_shared"}),
         r"needs a nonempty kv_layout_id"),
        (dict(KV, native_host_offload={"num_host_blocks": 5, "kv_layout_id": 3}), r"kv_layout_id' must be a string"),
        (dict(KV, native_host_offload={"num_host_blocks": 5, "d2h_bandwidth_gbps": -1}),
         r"d2h_bandwidth_gbps' must be finite and non-negative"),
        (dict(KV, native_host_offload={"num_host_blocks": 5, "h2d_bandwidth_gbps": "x"}),
         r"h2d_bandwidth_gbps' must be a number"),
        (dict(KV, native_host_offload={"num_host_blocks": 5, "latency_to_first_byte_ms": -1}),
         r"latency_to_first_byte_ms' must be finite"),
        (dict(KV, native_host_offload={"num_host_blocks": 5}, backend="sglang"), r"only for backend=vllm"),
        (dict(KV, native_host_offload={"num_host_blocks": 5}, enable_prefix_caching=False),
         r"requires enable_prefix_caching=true"),
        ({"block_size": 64, "native_host_offload": {"num_host_blocks": 5}},
         r"needs engine.kv_cache_bytes_per_token .*add it, for example \"kv_cache_bytes_per_token\": 131072"),
        (dict(KV, native_host_offload={"num_host_blocks": 5}, g3_offload={"num_g3_blocks": 5}),
         r"'engine.g3_offload' is missing 'scope'"),
        (dict(KV, native_host_offload={"num_host_blocks": 5}, g3_offload={"scope": "dp_rank_local", "num_g3_blocks": 5}),
         r"'engine.g3_offload.scope' must be 'worker_local' or 'cluster_shared'"),
        (dict(KV, g3_offload={"scope": "worker_local", "num_g3_blocks": 5}), r"needs engine.native_host_offload"),
    ],
)
def test_bad_tier_settings_name_the_field(engine, pattern):
    with pytest.raises(InputError, match=pattern) as ei:
        parse(engine)
    assert not isinstance(ei.value, NotSupportedError)


def test_a_cluster_shared_g3_tier_is_kept_with_its_shared_bandwidths():
    host = parse(dict(KV, native_host_offload={"num_host_blocks": 5},
                      g3_offload={"scope": "cluster_shared", "num_g3_blocks": 9,
                                  "shared_write_bandwidth_gbps": 4})).host_offload
    assert (host.g3.scope, host.g3.num_g3_blocks, host.g3.shared_read_bandwidth_gbps,
            host.g3.shared_write_bandwidth_gbps) == ("cluster_shared", 9, 80.0, 4.0)


def test_a_worker_local_g3_tier_is_kept_with_its_host_tier():
    host = parse(dict(KV, native_host_offload={"num_host_blocks": 5},
                      g3_offload={"scope": "worker_local", "num_g3_blocks": 9, "read_bandwidth_gbps": 2})).host_offload
    assert (host.g3.scope, host.g3.num_g3_blocks, host.g3.read_bandwidth_gbps, host.g3.write_bandwidth_gbps,
            host.g3.latency_to_first_byte_ms) == ("worker_local", 9, 2.0, 10.0, 0.1)


def test_host_tier_settings_are_kept():
    host = parse(dict(KV, native_host_offload={"num_host_blocks": 5, "scope": "cluster_shared", "kv_layout_id": "L0",
                                               "shared_d2h_bandwidth_gbps": 16, "latency_to_first_byte_ms": 2,
                                               "d2h_bandwidth_gbps": 0})).host_offload
    assert (host.num_host_blocks, host.scope, host.kv_layout_id, host.shared_d2h_bandwidth_gbps) == (5, "cluster_shared",
                                                                                                    "L0", 16.0)
    assert (host.d2h_bandwidth_gbps, host.h2d_bandwidth_gbps, host.latency_to_first_byte_ms) == (0.0, 32.0, 2.0)
    assert host.kv_cache_bytes_per_token == 131072
    assert parse(KV).host_offload is None
    with pytest.raises(InputError, match="unknown field 'host_offload'"):
        EngineArgs.from_json('{"host_offload": 5}')


def _replay_tiny(engine_args, version):
    import fastsim

    return fastsim.run_trace_replay(TINY, extra_engine_args=engine_args, dynamo_version=version)


@pytest.mark.parametrize(
    "flat, error, pattern",
    [
        ({"num_g2_blocks": 100}, InputError, r"'num_g2_blocks' needs kv_bytes_per_token"),
        ({"bandwidth_g1_to_g2_gbps": 4}, InputError, r"need num_g2_blocks"),
        ({"num_g3_blocks": 100}, InputError, r"'num_g3_blocks' has no Dynamo 1.6.1 equivalent"),
        ({"enable_g4_storage": True}, InputError, r"'enable_g4_storage' has no Dynamo 1.6.1 equivalent"),
        ({"num_g2_blocks": 100, "kv_bytes_per_token": 8, "engine_type": "sglang"}, InputError,
         r"only for backend=vllm"),
    ],
)
def test_flat_offload_names_in_161_mode(flat, error, pattern):
    with pytest.raises(error, match=pattern):
        _replay_tiny(flat, "1.6.1")


def test_flat_offload_names_map_to_the_host_tier():
    from fastsim.kv_tiers import check_flat_tiers

    flat = EngineArgs.from_json(json.dumps({"num_g2_blocks": 100, "kv_bytes_per_token": 8,
                                            "bandwidth_g1_to_g2_gbps": 4, "bandwidth_g2_to_g1_gbps": 2}))
    host = check_flat_tiers(flat, "1.6.1", "x").host_offload
    assert (host.num_host_blocks, host.d2h_bandwidth_gbps, host.h2d_bandwidth_gbps, host.kv_cache_bytes_per_token) == (
        100, 4.0, 2.0, 8)
    assert check_flat_tiers(flat, "1.4.2", "x").host_offload is None  # no effect in 1.4.2
    nested = parse(dict(KV, native_host_offload={"num_host_blocks": 5}))
    with pytest.raises(NotSupportedError, match="a Dynamo 1.6.1 setting"):
        check_flat_tiers(nested, "1.4.2", "x")


def test_flat_offload_names_are_checked_as_142_does():
    for bad in ({"num_g2_blocks": -1}, {"num_g2_blocks": 2.5}, {"bandwidth_g1_to_g2_gbps": -1},
                {"enable_g4_storage": 1}):
        with pytest.raises(InputError, match=next(iter(bad))):
            EngineArgs.from_json(json.dumps(bad))
    assert EngineArgs.from_json('{"num_g2_blocks": 0, "offload_batch_size": 0}').num_g2_blocks == 0


def _misses(got, want):
    def rel(a, b):
        return 0.0 if abs(a - b) <= 1e-12 else abs(a - b) / max(abs(b), 1e-12)

    return [f"{k}: fastsim {got.get(k)!r}, Dynamo {v!r}" for k, v in want.items()
            if k not in WALL_FIELDS and isinstance(v, (int, float)) and not isinstance(v, bool)
            and not (isinstance(got.get(k), (int, float)) and rel(got[k], v) <= 1e-9)]


def _timeline(recs):
    def norm(r):
        return tuple(round(r[k], 6) if isinstance(r.get(k), float) else r.get(k) for k in TIMELINE)

    return sorted(map(norm, recs), key=repr)


def _reference(name):
    with gzip.open(DATA / f"{name}.per_request.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


def test_142_runs_its_offload_names_without_effect(tmp_path, capsys):
    args = ["inputs/mooncake_synth_500.jsonl", "--num-workers", "1", "--trace-block-size", "512",
            "--router-mode", "round_robin", "--extra-engine-args",
            json.dumps({"block_size": 64, "num_gpu_blocks": 1500, "kv_bytes_per_token": 131072,
                        "num_g2_blocks": 20000, "bandwidth_g1_to_g2_gbps": 4, "bandwidth_g2_to_g1_gbps": 4,
                        "num_g3_blocks": 1000, "offload_batch_size": 8})]
    got, mine = recorded.cli_replay(args, DATA, tmp_path, capsys, version="1.4.2")
    want = json.loads((DATA / "dynamo142_g2_noop.json").read_text())
    misses = _misses(got, want)
    assert not misses, "\n".join(misses)
    assert _timeline(mine) == _timeline(_reference("dynamo142_g2_noop"))


def test_recorded_161_cases_are_complete():
    for name, case in CASES.items():
        summary = json.loads((DATA / f"{name}.json").read_text())
        rows = _reference(name)
        assert summary["completed_requests"] == sum(r["terminal_status"] == "completed" for r in rows)
        # Dynamo splits the reuse of a request's first admission by tier (GPU pool, host tier)
        assert all(r["first_admission_g1_reused_input_tokens"] + r["first_admission_host_reused_input_tokens"]
                   == r["admission_history"][0]["reused_input_tokens"] for r in rows if r["admission_history"])
        for run in range(2, case.get("runs", 1) + 1):
            assert (DATA / f"{name}.run{run}.json").exists()
    assert len(CASES) >= 10


# recorded cases fastsim refuses, and a word of the refusal: a configuration not supported yet
REFUSED = {
    "g2_shared": "scope 'cluster_shared'", "disagg_prefill_g2": "disaggregated",
}
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_recorded_161_case_is_refused_by_name(name, capsys):
    recorded.assert_refused_by_name(DATA, CASES[name]["args"], REFUSED[name], capsys)


# conv_kv4's three kv_router runs gave one report (to the last bits of four means): compared as one;
# g3_worker_local (a G3 tier, decisions 0355 and 0420) too
@pytest.mark.parametrize("name", [n for n in CASES if n not in REFUSED])
def test_recorded_161_case_matches_dynamo(name, tmp_path, capsys):
    got, mine = recorded.cli_replay(CASES[name]["args"], DATA, tmp_path, capsys)
    misses = _misses(got, json.loads((DATA / f"{name}.json").read_text()))
    assert not misses, "\n".join(misses)
    assert _timeline(mine) == _timeline(_reference(name))


def test_cli_names_the_flag_and_the_tier(capsys):
    flat = json.dumps({"num_g2_blocks": 100, "kv_bytes_per_token": 8, "num_g3_blocks": 4})
    assert cli.main(["replay", TINY, "--extra-engine-args", flat]) == 2
    err = capsys.readouterr().err
    assert "--extra-engine-args: field 'num_g3_blocks' has no Dynamo 1.6.1 equivalent" in err
    nested = json.dumps({"engine": {"block_size": 64, "native_host_offload": {"num_host_blocks": 100}}})
    assert cli.main(["replay", TINY, "--extra-engine-args", nested]) == 2
    assert 'add it, for example "kv_cache_bytes_per_token": 131072' in capsys.readouterr().err
