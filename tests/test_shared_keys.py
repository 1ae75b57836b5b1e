"""Prompt blocks that no other request can share are private (``kernels/blocks.py``,
``shared_block_keys_nb``; ``state.sharing_groups``): a run gives the same results, bit for bit, as
with a key for every full prompt block, under both releases' rules.

The cases replay the bundled Mooncake trace and random traces of few shared prefixes on small
pools (evictions, preemptions and readmissions, which match a request's own blocks again), on
round-robin clusters (keys shared per worker), attention-DP groups, a closed loop and a split run
(keys shared across the cluster), disaggregated pools and kv_router.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

import fastsim.sim as sim
import fastsim.shards as shards
import fastsim.sim_disagg as sim_disagg
import fastsim.state as state
from fastsim.config import EngineArgs
from fastsim.kernels.blocks import content_block_keys_nb, shared_block_keys_nb
from fastsim.workload import load_mooncake

from test_steady_decode import assert_same_results

TRACE = Path(__file__).resolve().parents[1] / "examples" / "mooncake_trace_1000.jsonl"


def _slice(tmp_path, first, n):
    lines = TRACE.read_text().splitlines(keepends=True)[first:first + n]
    p = tmp_path / f"slice_{first}_{n}.jsonl"
    p.write_text("".join(lines))
    return p


def _random_trace(tmp_path, seed, n=300):
    """Conversations that grow turn by turn (each prompt extends an earlier one of its
    conversation) and a few one-off prompts, arriving every few ms."""
    rng = random.Random(seed)
    convs = [[] for _ in range(12)]
    next_id = 0
    rows = []
    t = 0
    for _ in range(n):
        t += rng.randint(1, 40)
        if rng.random() < 0.15:
            ids = list(range(next_id, next_id + rng.randint(1, 6)))
        else:
            c = rng.randrange(len(convs))
            if len(convs[c]) > 5:  # (a new conversation: prompts stay within the small pools)
                convs[c] = []
            ids = convs[c] + list(range(next_id, next_id + rng.randint(1, 3)))
            convs[c] = ids
        next_id += 10
        isl = rng.randint(max(1, (len(ids) - 1) * 64 + 1), len(ids) * 64)
        rows.append({"timestamp": t, "input_length": isl, "output_length": rng.randint(1, 60),
                     "hash_ids": ids})
    p = tmp_path / f"random_{seed}.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def _both(monkeypatch, path, engine, run=None, tbs=64, versions=("1.6.1", "1.4.2"), **kw):
    """Run ``path`` with private unshared blocks (the default) and with every key kept, under
    both releases' rules; check they agree; returns how many keys the runs kept, both ways."""
    kept = []
    block_keys = state.block_keys

    def counting(*args, **kwargs):
        out = block_keys(*args, **kwargs)
        kept.append(int(out[1].shape[0]))
        return out

    monkeypatch.setattr(state, "block_keys", counting)
    monkeypatch.setattr(sim_disagg, "block_keys", counting)
    run = run or sim.simulate
    counts = []
    for version in versions:
        wl = load_mooncake(path, trace_block_size=tbs, dynamo_version=version)
        n0 = len(kept)
        a = run(wl, *engine, dynamo_version=version, **kw)
        fewer = sum(kept[n0:])
        with monkeypatch.context() as m:
            m.setattr(sim, "sharing_groups", lambda *a, **k: None)
            m.setattr(sim_disagg, "sharing_groups", lambda *a, **k: None)
            m.setattr(shards, "sharing_groups", lambda *a, **k: None)
            n0 = len(kept)
            b = run(wl, *engine, dynamo_version=version, **kw)
            every = sum(kept[n0:])
        assert_same_results(a, b)
        counts.append((fewer, every))
    return counts


def _engine(**kw):
    return (EngineArgs.coerce({"block_size": 16, **kw}),)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("blocks,workers", [(120, 2), (400, 3), (60, 1)])
def test_round_robin_random_traces(monkeypatch, tmp_path, seed, blocks, workers):
    counts = _both(monkeypatch, _random_trace(tmp_path, seed), _engine(num_gpu_blocks=blocks),
                   num_workers=workers)
    assert all(fewer < every for fewer, every in counts)


@pytest.mark.parametrize("first,n,workers,blocks", [(0, 300, 4, 2000), (400, 300, 2, 1500)])
def test_round_robin_bundled_trace(monkeypatch, tmp_path, first, n, workers, blocks):
    engine = (EngineArgs.coerce({"block_size": 64, "num_gpu_blocks": blocks}),)
    counts = _both(monkeypatch, _slice(tmp_path, first, n), engine, tbs=512, num_workers=workers)
    assert all(fewer < every for fewer, every in counts)


def test_split_run_and_dp_groups(monkeypatch, tmp_path):
    path = _random_trace(tmp_path, 7)
    _both(monkeypatch, path, _engine(num_gpu_blocks=200), num_workers=4, threads=2)
    _both(monkeypatch, path, _engine(num_gpu_blocks=150, dp_size=2), num_workers=2)


def test_closed_loop_keeps_keys_shared_across_workers(monkeypatch, tmp_path):
    counts = _both(monkeypatch, _random_trace(tmp_path, 8), _engine(num_gpu_blocks=150),
                   num_workers=3, replay_concurrency=6)
    assert all(fewer < every for fewer, every in counts)


def test_disaggregated_round_robin(monkeypatch, tmp_path):
    prefill = EngineArgs.coerce({"block_size": 16, "num_gpu_blocks": 150, "worker_type": "prefill"})
    decode = EngineArgs.coerce({"block_size": 16, "num_gpu_blocks": 150, "worker_type": "decode"})
    counts = _both(monkeypatch, _random_trace(tmp_path, 9), (prefill, decode),
                   run=sim_disagg.simulate_disagg, num_prefill_workers=2, num_decode_workers=2)
    assert all(fewer < every for fewer, every in counts)


@pytest.mark.parametrize("lag", [None, 30.0])
def test_kv_router(monkeypatch, tmp_path, lag):
    """kv_router's overlaps and active blocks (and 1.6.1's KV-event index, with or without a
    lag) see the same blocks (1.4.2 refuses a lag: that case runs 1.6.1 only)."""
    path = _random_trace(tmp_path, 10)
    if lag is None:
        counts = _both(monkeypatch, path, _engine(num_gpu_blocks=200), num_workers=3,
                       router_mode="kv_router")
    else:
        counts = _both_161(monkeypatch, path, _engine(num_gpu_blocks=200), num_workers=3,
                           router_mode="kv_router", kv_event_lag_ms=lag)
    assert all(fewer < every for fewer, every in counts)


def test_kv_router_disaggregated(monkeypatch, tmp_path):
    prefill = EngineArgs.coerce({"block_size": 16, "num_gpu_blocks": 150, "worker_type": "prefill"})
    decode = EngineArgs.coerce({"block_size": 16, "num_gpu_blocks": 150, "worker_type": "decode"})
    counts = _both(monkeypatch, _random_trace(tmp_path, 11), (prefill, decode),
                   run=sim_disagg.simulate_disagg, num_prefill_workers=2, num_decode_workers=2,
                   router_mode="kv_router")
    assert all(fewer < every for fewer, every in counts)


def _both_161(monkeypatch, path, engine, **kw):
    return _both(monkeypatch, path, engine, versions=("1.6.1",), **kw)


def test_kept_keys_are_a_prefix_of_each_prompt_shared_within_its_group():
    """The kept keys of each row are its first ones, and a row keeps block ``j`` when another
    row of its group holds block ``j`` with the same key (and keeps no more than one trace block
    beyond what it shares)."""
    rng = np.random.default_rng(3)
    n, tbs, bs = 200, 32, 16
    ids, ptr, isl = [], [0], []
    for _ in range(n):
        k = int(rng.integers(1, 7))
        row = [int(rng.integers(0, 3)) * 100 + i for i in range(k)]  # three families of prefixes
        if rng.random() < 0.3:
            row[-1] += 7
        ids += row
        ptr.append(len(ids))
        isl.append(int(rng.integers((k - 1) * tbs + 1, k * tbs + 1)))
    isl = np.array(isl, dtype=np.int64)
    ptr = np.array(ptr, dtype=np.int64)
    ids = np.array(ids, dtype=np.int64)
    all_ptr = np.empty(n + 1, dtype=np.int64)
    keys = content_block_keys_nb(isl, ptr, ids, tbs, bs, all_ptr)
    group = rng.integers(0, 3, n).astype(np.int64)
    kept_ptr = np.empty(n + 1, dtype=np.int64)
    kept = shared_block_keys_nb(isl, ptr, ids, tbs, bs, group, kept_ptr)
    for r in range(n):
        mine = keys[all_ptr[r]:all_ptr[r + 1]]
        k = kept_ptr[r + 1] - kept_ptr[r]
        assert np.array_equal(kept[kept_ptr[r]:kept_ptr[r + 1]], mine[:k])
        others = {int(x) for s in range(n) if s != r and group[s] == group[r]
                  for x in keys[all_ptr[s]:all_ptr[s + 1]]}
        shared = 0
        while shared < mine.shape[0] and int(mine[shared]) in others:
            shared += 1
        assert shared <= k <= min(mine.shape[0], shared + tbs // bs)
