"""fastsim's single-worker engine against the naive pure-Python reference (tests/naive_engine.py).

Random small traces built to stress the scheduler: tiny KV pools (preemption, rejection, exact-fit
admission), small token budgets (chunked prefill), shared prompt prefixes (repeated hash ids, so
prefix caching and cached-block reactivation), chunking on/off, lifo/fifo, caching on/off,
max_model_len, speedups. Every per-request field fastsim writes to its JSONL must equal the
reference's bitwise; a dead end must be a dead end on both sides.

The reference itself was checked against Dynamo 1.4.2 (the ai-dynamo==1.4.2 venv, same traces through
``dynamo.replay.run_trace_replay``, per-request records compared as multisets): identical on seeds
0-1999 of ``random_case``, including every seed below, and on the minimal cases at the end.
"""

from __future__ import annotations

import json
import random

import pytest

import fastsim
from fastsim.errors import DeadEndError

from naive_engine import NaiveDeadEnd, NaiveEngine

FIELDS = ("arrival_time_ms", "first_admit_ms", "first_token_ms", "last_token_ms", "terminal_time_ms",
          "output_length", "reused_input_tokens", "terminal_status")
SEEDS = list(range(300))


def random_case(seed):
    """(rows, trace_block_size, engine args) of random case ``seed``; rows are Mooncake dicts."""
    rng = random.Random(seed)
    stress = rng.random() < 0.3  # a pool of a few blocks: constant preemption and re-admission
    bs = rng.choice([4, 8, 16])
    tbs = rng.choice([bs, bs, 2 * bs, max(1, bs // 2)])
    n = rng.randint(5, 40)
    families = [[rng.randrange(1, 1 << 20) for _ in range(80)] for _ in range(rng.randint(1, 3))]
    next_id = 1 << 21
    t = 0.0
    rows = []
    for _ in range(n):
        isl = rng.randint(1, 300) if rng.random() < 0.5 and not stress else rng.randint(1, 4 * bs)
        osl = rng.randint(0, 20)
        need = -(-isl // tbs)
        shared = rng.randint(0, need) if rng.random() < 0.7 else 0
        fam = rng.choice(families)
        hids = fam[:shared]
        while len(hids) < need:
            hids.append(next_id)
            next_id += 1
        rows.append(dict(timestamp=t, input_length=isl, output_length=osl, hash_ids=hids))
        gap = rng.random()
        # short decimals: Dynamo's JSON reader is not correctly rounded for 16-17 digit numbers
        t = round(t + (0.0 if gap < 0.3 else rng.uniform(0, 40 if gap < 0.8 else 400)), rng.choice([0, 3]))
    chunked = rng.random() < 0.75
    budget = rng.choice([8, 16, 24, 32, 64, 128, 8192])
    if not chunked and rng.random() < 0.85:
        budget = max(budget, max(r["input_length"] for r in rows))
    engine = dict(
        block_size=bs,
        num_gpu_blocks=rng.randint(8, 14) if stress else rng.randint(8, 60),
        max_num_seqs=rng.choice([1, 2, 3, 4, 8, 256]),
        max_num_batched_tokens=budget,
        enable_chunked_prefill=chunked,
        enable_prefix_caching=rng.random() < 0.8,
        preemption_mode=rng.choice(["lifo", "fifo"]),
        speedup_ratio=rng.choice([1.0, 1.0, 2.0, 0.0, 0.5]),
        decode_speedup_ratio=rng.choice([1.0, 1.0, 3.0]),
    )
    if rng.random() < 0.2:
        engine["max_model_len"] = rng.randint(16, 320)
    return rows, tbs, engine


def run_naive(rows, tbs, engine):
    t0 = min(r["timestamp"] for r in rows)
    eng = NaiveEngine([((r["timestamp"] - t0) / 1.0, r["hash_ids"], r["input_length"], r["output_length"])
                       for r in rows], trace_block_size=tbs, **engine)
    try:
        return eng.run()
    except NaiveDeadEnd:
        return "dead end"


def run_fastsim(rows, tbs, engine, tmp_path):
    trace = tmp_path / "trace.jsonl"
    out = tmp_path / "out.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    try:
        fastsim.run_trace_replay(str(trace), trace_block_size=tbs, extra_engine_args=engine,
                                 report_jsonl_path=str(out), dynamo_version="1.4.2")
    except DeadEndError:
        return "dead end"
    recs = [None] * len(rows)
    for line in out.read_text().splitlines():
        rec = json.loads(line)
        recs[int(rec["uuid"].replace("-", ""), 16)] = {k: rec[k] for k in FIELDS}
    return recs


def diff(naive, fast):
    """First differing (row, field, naive, fastsim), or None."""
    if isinstance(naive, str) or isinstance(fast, str):
        return None if naive == fast else ("*", "outcome", naive if isinstance(naive, str) else "ok",
                                           fast if isinstance(fast, str) else "ok")
    for row, (a, b) in enumerate(zip(naive, fast)):
        if b is None:
            return (row, "record", a, None)
        for k in FIELDS:
            if a[k] != b[k]:
                return (row, k, a[k], b[k])
    return None


BUGS = {
    "OPEN": "fastsim differs from the naive engine here (open)",
}
# Seeds whose fastsim run differs from the naive engine (which matches Dynamo on seeds 0-1999):
# none. The last four (182, 245, 249, 258) were duplicate blocks: a block computed while an equal
# one is registered is a second copy of the key, which takes over when the first copy is evicted
# (seed 182: row 6 then reuses 16 tokens, not 12); fastsim used to keep such a block private.
KNOWN_FASTSIM_BUGS = {}


def _seed_param(seed):
    tags = KNOWN_FASTSIM_BUGS.get(seed)
    if tags is None:
        return seed
    return pytest.param(seed, marks=pytest.mark.xfail(strict=True, reason="; ".join(BUGS[t] for t in tags.split())))


@pytest.mark.parametrize("seed", [_seed_param(s) for s in SEEDS])
def test_fastsim_matches_naive_engine(seed, tmp_path):
    rows, tbs, engine = random_case(seed)
    d = diff(run_naive(rows, tbs, engine), run_fastsim(rows, tbs, engine, tmp_path))
    assert d is None, f"seed {seed} engine {engine} tbs {tbs}: row {d[0]} {d[1]}: naive {d[2]!r} fastsim {d[3]!r}"


# Minimal cases shrunk from mismatching seeds, with Dynamo 1.4.2's per-request
# (first_admit_ms, first_token_ms, last_token_ms, reused_input_tokens). The naive engine reproduces them all.
def _r(ts, isl, osl, hids):
    return dict(timestamp=ts, input_length=isl, output_length=osl, hash_ids=hids)


MINIMAL = {
    # caching off: B must not share A's two blocks (fastsim: B's blocks shared -> shorter decode steps)
    "nocache-equal-prompts-share-nothing": (
        [_r(0, 32, 3, [1, 2]), _r(1, 32, 2, [1, 2])], dict(block_size=16, enable_prefix_caching=False),
        [(0.0, 22.734314, 51.238291000000004, 0), (22.734314, 45.478515, 51.238291000000004, 0)], None),
    # B recomputes its last (cached) block while A holds it: a separate block, counted in the decode KV
    "recomputed-last-block-is-a-separate-block": (
        [_r(0, 32, 5, [1, 2]), _r(1, 32, 1, [1, 2])], dict(block_size=16),
        [(0.0, 22.734314, 62.48162900000001, 0), (22.734314, 45.231962, 45.231962, 16)], None),
    # B's block 2 is split by the 32-token budget (15 + 1 tokens) while A holds an equal block
    "chunk-split-block-is-a-separate-block": (
        [_r(0, 113, 1, [1, 2, 3, 4, 5, 6, 7, 8]), _r(11, 48, 1, [1, 2, 3])],
        dict(block_size=16, num_gpu_blocks=28, max_num_batched_tokens=32),
        [(0.0, 88.391879, 88.391879, 0), (50.963163, 116.139784, 116.139784, 32)], None),
    # B recomputes its last block while A's equal block is only cached: B gets a new block, A's stays
    # cached, and C (matching it) re-activates it as one more active block (fastsim: B re-activated A's)
    "recomputed-block-does-not-take-over-a-cached-twin": (
        [_r(0, 32, 1, [1, 2]), _r(100, 32, 10, [1, 2]), _r(150, 48, 1, [1, 2, 3])], dict(block_size=16),
        [(0.0, 22.734314, 22.734314, 0), (100.0, 122.491056, 190.991111, 16),
         (151.240501, 173.741444, 173.741444, 32)], None),
    # probe: no logits are needed for OSL 0, so a fully cached prompt is not capped: B reuses all 64
    # tokens, computes nothing and completes at its admission (terminal 1000.0)
    "zero-output-fully-cached-prompt-reuses-everything": (
        [_r(0, 64, 1, [1, 2, 3, 4]), _r(1000, 64, 0, [1, 2, 3, 4])], dict(block_size=16),
        [(0.0, 23.228070000000002, 23.228070000000002, 0), (1000.0, None, None, 64)], None),
    # bs 4, budget 24: B arrives during A's first chunk pass and is admitted with A's last chunk; its
    # recomputed block 1 is a separate block (fastsim merges it with A's, but only when B arrived
    # during A's first pass: B at 17.0 ms gives the right times)
    "recomputed-block-of-a-request-that-waited-is-separate": (
        [_r(0, 56, 1, list(range(1, 15))), _r(3.0, 8, 1, [1, 2])],
        dict(block_size=4, num_gpu_blocks=47, max_num_batched_tokens=24),
        [(0.0, 70.771271, 70.771271, 0), (33.73213, 70.771271, 70.771271, 4)], None),
    # fifo, 6 blocks: the 31-token request needs a block and preempts the 16-token one at index 0; the
    # request after it is then skipped for that pass
    "fifo-victim-ahead-skips-the-next-request": (
        [_r(0, 16, 6, [1]), _r(0, 31, 6, [2, 3]), _r(0, 16, 7, [4])],
        dict(block_size=16, num_gpu_blocks=6, preemption_mode="fifo"),
        [(0.0, 47.766315, 315.64964699999996, 16), (0.0, 47.766315, 213.269647, 0),
         (0.0, 47.766315, 273.882981, 0)], None),
}
SHORT = ("first_admit_ms", "first_token_ms", "last_token_ms", "reused_input_tokens")


@pytest.mark.parametrize("name", list(MINIMAL))
def test_naive_engine_reproduces_dynamo_minimal_case(name):
    rows, engine, expect, _ = MINIMAL[name]
    assert [tuple(r[k] for k in SHORT) for r in run_naive(rows, engine["block_size"], engine)] == expect


@pytest.mark.parametrize("name", [
    n if MINIMAL[n][3] is None else pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=BUGS[MINIMAL[n][3]]))
    for n in MINIMAL])
def test_fastsim_reproduces_dynamo_minimal_case(name, tmp_path):
    rows, engine, expect, _ = MINIMAL[name]
    assert [tuple(r[k] for k in SHORT) for r in run_fastsim(rows, engine["block_size"], engine, tmp_path)] == expect
