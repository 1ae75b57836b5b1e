"""A host KV tier that evicts under kv_router with a KV event lag (docs/decisions/0475): an evicted
host block still counts for the router until its removal event reaches it, the removal being
published when the pass that evicted it ends.

Cases recorded on Dynamo 1.6.1 (``tests/data/host_evict_lag_161``; ``moon_kv3_h400_lag50``, refused
before, is in ``tests/test_host_evict.py``): probes on 2 workers whose routing figures show when
an evicted block stops counting, and the bundled Mooncake and conversation traces on 2-4 workers
with small host tiers. Dynamo's three runs of each case gave one report: every report field within
1e-9 and each request's routing figures (the worker aside: the first requests' workers are
symmetric ties) and timeline.
"""

import gzip
import json
from pathlib import Path

import pytest

import recorded
from test_host_router import WALL_FIELDS, _rows  # (the same record layout)

DATA = Path(__file__).parent / "data" / "host_evict_lag_161"
CASES = {name: (DATA, case) for name, case in json.loads((DATA / "cases.json").read_text()).items()}


def _reports(name):
    folder, case = CASES[name]
    names = [f"{name}.json"] + [f"{name}.run{i}.json" for i in range(2, case.get("runs", 1) + 1)]
    return [json.loads((folder / n).read_text()) for n in names]


def _numbers(report):
    return {k: v for k, v in report.items()
            if k not in WALL_FIELDS and isinstance(v, (int, float)) and not isinstance(v, bool)}


def _deterministic(name):
    """Dynamo gave the same report in every run of the case (to 1e-9)."""
    runs = [_numbers(r) for r in _reports(name)]
    return all(abs(r[k] - v) <= 1e-9 * max(1.0, abs(v)) for r in runs[1:] for k, v in runs[0].items())


def test_recorded_runs_are_deterministic():
    """Dynamo's three runs of each case gave one report (to 1e-9): exact comparisons hold."""
    assert all(_deterministic(name) for name in CASES)


@pytest.mark.parametrize("name", list(CASES))
def test_case_matches_dynamo(name, tmp_path, capsys):
    """Every report field within 1e-9 and each request's routing figures and timeline."""
    folder, case = CASES[name]
    got, mine = recorded.cli_replay(case["args"], folder, tmp_path, capsys)
    misses = [f"{k}: fastsim {got.get(k)!r}, Dynamo {v!r}" for k, v in _numbers(_reports(name)[0]).items()
              if not (isinstance(got.get(k), (int, float)) and abs(got[k] - v) <= 1e-9 * max(1.0, abs(v)))]
    assert not misses, "\n".join(misses)
    with gzip.open(folder / f"{name}.per_request.jsonl.gz", "rt") as f:
        ref = [json.loads(line) for line in f]
    assert _rows(mine) == _rows(ref)


def test_a_full_ring_of_evicted_blocks_reruns_with_a_larger_one(tmp_path, capsys, monkeypatch):
    """The ring of evicted blocks the router may still count starts small; a run that fills it
    starts again with a larger one and gives the same report."""
    import fastsim.memory

    monkeypatch.setattr(fastsim.memory, "ghost_ring", lambda host_blocks, grown=1: 2 * grown)
    folder, case = CASES["moon_kv2_h300_lag100"]
    got, _ = recorded.cli_replay(case["args"], folder, tmp_path, capsys)
    want = _numbers(_reports("moon_kv2_h300_lag100")[0])
    assert all(abs(got[k] - v) <= 1e-9 * max(1.0, abs(v)) for k, v in want.items())
