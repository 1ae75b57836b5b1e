"""Host KV tier (G2) eviction (docs/decisions/0354): Dynamo 1.6.1's host LRU, whose order inside
one completed transfer is its blocks' sequence hashes, which fastsim computes
(``kernels/dynamo_hash.py``).

Cases recorded on Dynamo 1.6.1 (``tests/data/host_evict_161``): small probes that each settle one
rule (the order inside a transfer, touches at a lookup and at a prepared store, a load's
recency, a retried cohort, a cohort larger than the tier, a shared prefix), and runs whose host
tier is smaller than the working set (tiny tiers, KV pressure with preemptions, chunked prefills,
attention DP, round robin and kv_router clusters, the conversation trace, unique synthetic
prompts). Every report field within 1e-9 and every request's timeline (with kv_router, its
routing figures too; with a KV event lag, evicted host blocks counted until their removal arrives:
docs/decisions/0475 and ``tests/test_host_evict_lag.py``).
"""

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from fastsim.kernels.dynamo_hash import K_SECRET, trace_sequence_hashes_nb, xxh3_64_nb
import recorded

DATA = Path(__file__).parent / "data" / "host_evict_161"
CASES = json.loads((DATA / "cases.json").read_text())
WALL_FIELDS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}
TIMELINE = ("arrival_time_ms", "first_admit_ms", "first_token_ms", "last_token_ms", "terminal_time_ms",
            "input_length", "output_length", "reused_input_tokens", "first_admission_g1_reused_input_tokens",
            "first_admission_host_reused_input_tokens", "terminal_status")
ROUTE = ("reported_overlap_tokens", "selected_overlap_blocks", "best_available_overlap_blocks")


def _reports(name):
    names = [f"{name}.json"] + [f"{name}.run{i}.json" for i in range(2, CASES[name].get("runs", 1) + 1)]
    return [json.loads((DATA / n).read_text()) for n in names]


def _numbers(report):
    return {k: v for k, v in report.items()
            if k not in WALL_FIELDS and isinstance(v, (int, float)) and not isinstance(v, bool)}


def _rows(recs, routed):
    def norm(r):
        times = tuple(round(r[k], 6) if isinstance(r.get(k), float) else r.get(k) for k in TIMELINE)
        route = tuple(r["routing_history"][0][k] for k in ROUTE) if routed else ()
        return times + route

    return sorted(map(norm, recs), key=repr)


def test_recorded_runs_are_deterministic():
    """Dynamo's kv_router runs of each case gave one report (to 1e-9): exact comparisons hold."""
    for name in CASES:
        runs = [_numbers(r) for r in _reports(name)]
        assert all(abs(r[k] - v) <= 1e-9 * max(1.0, abs(v)) for r in runs[1:] for k, v in runs[0].items()), name
    assert len(CASES) >= 20


@pytest.mark.parametrize("name", list(CASES))
def test_case_matches_dynamo(name, tmp_path, capsys):
    got, mine = recorded.cli_replay(CASES[name]["args"], DATA, tmp_path, capsys)
    misses = [f"{k}: fastsim {got.get(k)!r}, Dynamo {v!r}" for k, v in _numbers(_reports(name)[0]).items()
              if not (isinstance(got.get(k), (int, float)) and abs(got[k] - v) <= 1e-9 * max(1.0, abs(v)))]
    assert not misses, "\n".join(misses)
    with gzip.open(DATA / f"{name}.per_request.jsonl.gz", "rt") as f:
        ref = [json.loads(line) for line in f]
    routed = "kv_router" in CASES[name]["args"]
    assert _rows(mine, routed) == _rows(ref, routed)


def test_sequence_hashes_are_dynamos():
    """Dynamo 1.6.1's own ``compute_block_hash_for_seq`` gives 17903371052352623343 for 64 tokens
    of id 7 (local hash: XXH3-64, seed 1337, u32 LE tokens); the chained values below were computed
    with the reference XXH3 (the Python ``xxhash`` package) over ``parent || local``."""
    # one trace row: ids 7, 8 of 64 tokens each -> tokens 0, 1 (first appearance): not 7, 8
    isl, ptr = np.array([128, 64]), np.array([0, 2, 3])
    out = trace_sequence_hashes_nb(isl, ptr, np.array([0, 1, 0]), 64, 64, np.array([0, 2, 3]), K_SECRET)
    assert out[0] == out[2]  # equal prefixes, equal hashes
    raw = trace_sequence_hashes_nb(np.array([64]), np.array([0, 1]), np.array([7]), 64, 64, np.array([0, 1]),
                                   K_SECRET)
    assert int(raw[0]) == 17903371052352623343


# XXH3-64 with seed 1337 of bytes ``i % 251``, by the reference implementation (Python ``xxhash``
# 4.1.0): every path of the algorithm (4-8, 9-16, 17-128, 129-240 bytes, and the long one)
XXH3_1337 = {4: 14543010222501324881, 8: 9489597670696732514, 12: 13627135447037955148,
             16: 15479319472501821348, 17: 13284838353755930206, 100: 2373863107657306934,
             128: 11199347517402057010, 129: 10706060905237543574, 200: 10324555464619158213,
             240: 9252566581064153417, 241: 7095135160959709863, 256: 9905010809680880876,
             1024: 5676746954029127272, 1500: 5231706776070287315}


def test_xxh3_matches_the_reference():
    from numba import njit

    @njit
    def xxh3(b, n, seed, ks):
        return xxh3_64_nb(b, n, seed, ks, np.empty(192, dtype=np.uint8), np.empty(8, dtype=np.uint64))

    for n, want in XXH3_1337.items():
        b = (np.arange(n) % 251).astype(np.uint8)
        assert int(xxh3(b, n, np.uint64(1337), K_SECRET)) == want, n


def test_trace_tokens_are_hash_ids_numbered_by_first_appearance():
    """Dynamo 1.6.1 gives a hash id the number of distinct ids met before it in the file (rule 5):
    ids 13, 14 then 0, 13 are tokens 0, 1 then 2, 0."""
    from types import SimpleNamespace

    from fastsim.kernels.dynamo_hash import sequence_hashes

    w = SimpleNamespace(isl=np.array([128, 128]), hash_ptr=np.array([0, 2, 4]),
                        hash_ids=np.array([13, 14, 0, 13], dtype=np.int64), trace_block_size=64)
    got = sequence_hashes(w, 64, np.array([0, 2, 4]))
    want = trace_sequence_hashes_nb(w.isl, w.hash_ptr, np.array([0, 1, 2, 0]), 64, 64, np.array([0, 2, 4]),
                                    K_SECRET)
    assert list(got) == list(want) and got[0] != got[2]
