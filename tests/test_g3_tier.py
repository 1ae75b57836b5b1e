"""The G3 KV tier behind the host tier (docs/decisions/0355, 0420, 0450-0452, 0485): Dynamo 1.6.1's
``g3_offload`` of scope worker_local and cluster_shared, simulated by ``kernels/g3_tier.py`` and the
host tier's connector.

Cases recorded on Dynamo 1.6.1 (``tests/data/g3_161``): the host-eviction probes with a G3 tier
(a G3 tier smaller than one store, a G3 hit staged back past the GPU prefix, slow G3 lanes, a
prompt larger than the host tier restored until Dynamo gives up after 1024 rounds of a stalled
rank, with and without other work on the rank), and runs with small and large G3 tiers, host tiers smaller than the working set, G3 bandwidths and
latencies, KV pressure with preemptions, chunked prefills, round robin and kv_router clusters,
the bundled trace, the conversation trace and synthetic prompts; one pool shared by the workers
(its bandwidth caps binding or not, round robin and kv_router); reads that take no time. Every
report field (the ``g3_offload`` counters too) within 1e-9, every request's timeline and, under
kv_router, its routing figures, but for the cases named in ``DIFFERS``.
"""

import json
import math
from pathlib import Path

import pytest

import recorded
from fastsim.errors import InputError, NotSupportedError

DATA = Path(__file__).parent / "data" / "g3_161"
CASES = recorded.cases(DATA)
# recorded cases fastsim does not reproduce yet (decision 0485, "Left": a slow host tier's stores and
# their G3 writes)
DIFFERS = {"synth_h300_g3000_slowhost", "shared_moon_kv3_h400_g3000_lag50"}
TIMELINE = ("first_admit_ms", "first_token_ms", "last_token_ms", "reused_input_tokens")
ROUTE = ("reported_overlap_tokens", "selected_overlap_blocks", "best_available_overlap_blocks")


def _numbers(report, prefix=""):
    """Every numeric field of a report, nested objects (``g3_offload``) as dotted names."""
    out = {}
    for key, value in report.items():
        if isinstance(value, dict):
            out.update(_numbers(value, f"{prefix}{key}."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[prefix + key] = value
    return out


@pytest.mark.parametrize("name, args", recorded.with_known_differences(CASES, DIFFERS,
                                                                     "0485-g3-restore-rounds-and-shared-kv-router.md"))
def test_recorded_case_matches_dynamo(name, args):
    rep = recorded.replay(args, DATA)
    want = _numbers(json.loads((DATA / f"{name}.json").read_text()))
    got = _numbers(rep.summary)
    bad = [f"{k}: fastsim {got.get(k)}, Dynamo {v}" for k, v in want.items() if k not in recorded.WALL_FIELDS
           and (k not in got or not math.isclose(got[k], v, rel_tol=1e-9, abs_tol=1e-9))]
    assert not bad, "\n".join(bad)
    recorded.assert_timelines_match(rep.requests, recorded.per_request(DATA, name), TIMELINE)


@pytest.mark.parametrize("name, args", [c for c in CASES if "kv_router" in c[1] and c[0] not in DIFFERS])
def test_kv_router_case_routes_as_dynamo(name, args, tmp_path, capsys):
    """Each request's routing figures (the overlaps the router saw and chose) as Dynamo's: the host
    tiers' blocks as before, G3's none (decision 0485)."""
    _, mine = recorded.cli_replay(args.split(), DATA, tmp_path, capsys)

    def rows(recs):
        return sorted(((r["arrival_time_ms"], r["input_length"], r["requested_output_length"]),
                       tuple(r["routing_history"][0][k] for k in ROUTE)) for r in recs if r["routing_history"])

    assert rows(mine) == rows(recorded.per_request(DATA, name))


ENGINE = {"block_size": 64, "num_gpu_blocks": 20, "kv_cache_bytes_per_token": 131072,
          "native_host_offload": {"num_host_blocks": 7}, "g3_offload": {"scope": "worker_local", "num_g3_blocks": 20}}


def test_attention_dp_with_a_g3_tier_is_an_error_as_in_dynamo():
    # Dynamo 1.6.1: "invalid replay spec: g3_offload supports only dp_size=1"
    with pytest.raises(InputError, match="g3_offload supports only dp_size=1"):
        recorded.replay("../host_evict_161/inputs/ev_b5.jsonl --trace-block-size 64", DATA,
                        extra_engine_args={"engine": ENGINE, "dp_size": 2})


def test_a_g3_tier_is_refused_under_dynamo_142():
    # Dynamo 1.4.2 reads no nested engine object, and its offline replay has no tiers
    with pytest.raises(NotSupportedError, match="engine.g3_offload is a Dynamo 1.6.1 setting"):
        recorded.replay("../host_evict_161/inputs/ev_b5.jsonl --trace-block-size 64", DATA,
                        extra_engine_args={"engine": ENGINE}, dynamo_version="1.4.2")
