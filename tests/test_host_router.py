"""kv_router with a host KV tier (docs/decisions/0353): a target's overlap counts the blocks its
host tier holds right after its device prefix, weighted by ``host_cache_hit_weight``.

Cases recorded on Dynamo 1.6.1 (``tests/data/host_router_161``): probes whose routing figures
show the rule (the weight, the credit, the prefill load, a KV event lag), the conversation trace of decision
0352's trial and the bundled Mooncake trace on 2-4 workers with tight GPU pools, with and without
a lag, a decaying credit, a router queue. Where Dynamo's runs of a case gave one report (all but
the router queue's), every report field within 1e-9 and each request's routing figures (the
worker aside: the first requests' workers are symmetric ties) and timeline; otherwise within the
band of Dynamo's runs (``tests/recorded.py``).
"""

import gzip
import json
from pathlib import Path

import pytest

from fastsim.errors import InputError
from fastsim.router_config import RouterConfig
import recorded

DATA = Path(__file__).parent / "data" / "host_router_161"
CASES = json.loads((DATA / "cases.json").read_text())
WALL_FIELDS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}
ROUTE = ("reported_overlap_tokens", "selected_overlap_blocks", "best_available_overlap_blocks")
TIMELINE = ("first_admit_ms", "first_token_ms", "last_token_ms", "reused_input_tokens",
            "first_admission_g1_reused_input_tokens", "first_admission_host_reused_input_tokens")


def _rows(recs):
    def key(r):
        return (r["arrival_time_ms"], r["input_length"], r["requested_output_length"])

    def figures(r):
        h = r["routing_history"][0]
        times = tuple(round(r.get(k), 6) if isinstance(r.get(k), float) else r.get(k) for k in TIMELINE)
        return tuple(h[k] for k in ROUTE) + times

    return sorted((key(r), figures(r)) for r in recs)


def _reports(name):
    names = [f"{name}.json"] + [f"{name}.run{i}.json" for i in range(2, CASES[name].get("runs", 1) + 1)]
    return [json.loads((DATA / n).read_text()) for n in names]


def _numbers(report, skip):
    return {k: v for k, v in report.items()
            if k not in skip and isinstance(v, (int, float)) and not isinstance(v, bool)}


def _deterministic(name):
    """Dynamo gave the same report in every run of the case (to 1e-9)."""
    runs = [_numbers(r, WALL_FIELDS) for r in _reports(name)]
    return all(abs(r[k] - v) <= 1e-9 * max(1.0, abs(v)) for r in runs[1:] for k, v in runs[0].items())


EXACT = [n for n in CASES if _deterministic(n)]
RANDOM = [n for n in CASES if n not in EXACT]


@pytest.mark.parametrize("name", EXACT)
def test_case_matches_dynamo(name, tmp_path, capsys):
    """Every report field within 1e-9 and each request's routing figures and timeline."""
    got, mine = recorded.cli_replay(CASES[name]["args"], DATA, tmp_path, capsys)
    misses = [f"{k}: fastsim {got.get(k)!r}, Dynamo {v!r}" for k, v in _numbers(_reports(name)[0], WALL_FIELDS).items()
              if not (isinstance(got.get(k), (int, float)) and abs(got[k] - v) <= 1e-9 * max(1.0, abs(v)))]
    assert not misses, "\n".join(misses)
    with gzip.open(DATA / f"{name}.per_request.jsonl.gz", "rt") as f:
        ref = [json.loads(line) for line in f]
    assert _rows(mine) == _rows(ref)


@pytest.mark.parametrize("name", RANDOM)
def test_random_case_within_dynamo_band(name, tmp_path, capsys):
    """Dynamo's runs differ (a router-queue release order among equal keys): the band of its runs."""
    got, _ = recorded.cli_replay(CASES[name]["args"], DATA, tmp_path, capsys)
    misses = recorded.band_misses(got, _reports(name))
    assert not misses, "\n".join(misses)


@pytest.mark.parametrize("field, value", [("host_cache_hit_weight", 1.5), ("host_cache_hit_weight", -0.5),
                                          ("disk_cache_hit_weight", 2), ("host_cache_hit_weight", True)])
def test_cache_hit_weights_outside_0_to_1_are_refused(field, value):
    """Both releases refuse them ("must be between 0 and 1"), tier or not."""
    with pytest.raises(InputError, match=f"'{field}' is .*between 0 and 1"):
        RouterConfig.coerce({field: value})
