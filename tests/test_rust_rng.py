"""fastsim/rust_rng.py: Rust rand's StdRng (ChaCha12) and Dynamo 1.4.2's synthetic draws.

Three kinds of evidence:

* published known-answer vectors: rand_chacha's ChaCha20 tests (``rand_chacha/src/chacha.rs``:
  ``test_chacha_true_values_a/b/c`` = draft-nir-cfrg-chacha20-poly1305-04 test vectors 1-4,
  ``test_chacha_construction``, ``test_chacha_multiple_blocks``) and rand's StdRng value-stability
  test (``rand/src/rngs/std.rs::test_stdrng_construction``, ChaCha12);
* Dynamo 1.4.2 behaviour: Poisson arrival times recovered from ``run_synthetic_trace_replay``
  (1 worker, 1-token requests, ``speedup_ratio=1e6``; for request_count k the last arrival is
  ``duration_ms - e2e_k`` with ``e2e_k = k*mean_e2e(k) - (k-1)*mean_e2e(k-1)``, exact because the
  subtraction is Sterbenz-exact), and prefix-group first occurrences read from the
  reused-token increments (``prefix_cache_reused_ratio * total_input_tokens``) of runs k = 1..30;
* Dynamo's own reports (V10 and two shared-prefix Poisson runs) reproduced to 1e-9.
"""

import json
import math
from pathlib import Path

import numpy as np
import pytest

import fastsim
from fastsim.rust_rng import (
    StdRng,
    chacha_blocks,
    poisson_arrivals_ms,
    poisson_gaps_ms,
    random_range_u32_array,
    seed_from_u64,
)
from fastsim.workload import synthetic

REF = Path(__file__).parent / "data" / "reference"
WALL_FIELDS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}


# ------------------------------------------------------------------ published vectors
def test_chacha20_true_values_a():
    rng = StdRng.from_seed(bytes(32), rounds=20)
    assert [rng.next_u32() for _ in range(16)] == [
        0xADE0B876, 0x903DF1A0, 0xE56A5D40, 0x28BD8653, 0xB819D2BD, 0x1AED8DA0, 0xCCEF36A8, 0xC70D778B,
        0x7C5941DA, 0x8D485751, 0x3FE02477, 0x374AD8B8, 0xF4B8436A, 0x1CA11815, 0x69B687C3, 0x8665EEB2,
    ]
    assert [rng.next_u32() for _ in range(16)] == [
        0xBEE7079F, 0x7A385155, 0x7C97BA98, 0x0D082D73, 0xA0290FCB, 0x6965E348, 0x3E53C612, 0xED7AEE32,
        0x7621B729, 0x434EE69C, 0xB03371D5, 0xD539D874, 0x281FED31, 0x45FB0A51, 0x1F0AE1AC, 0x6F4D794B,
    ]


def test_chacha20_true_values_b_and_c():
    rng = StdRng.from_seed(bytes(31) + b"\x01", rounds=20)
    for _ in range(16):
        rng.next_u32()
    assert [rng.next_u32() for _ in range(16)] == [
        0x2452EB3A, 0x9249F8EC, 0x8D829D9B, 0xDDD4CEB1, 0xE8252083, 0x60818B01, 0xF38422B8, 0x5AAA49C9,
        0xBB00CA8E, 0xDA3BA7B4, 0xC4B592D1, 0xFDF2732F, 0x4436274E, 0x2561B3C8, 0xEBDD4AA6, 0xA0136C00,
    ]
    seed = bytes([0, 0xFF]) + bytes(30)
    rng = StdRng.from_seed(seed, rounds=20)
    for _ in range(32):
        rng.next_u32()
    expected = [
        0xFB4DD572, 0x4BC42EF1, 0xDF922636, 0x327F1394, 0xA78DEA8F, 0x5E269039, 0xA1BEBBC1, 0xCAF09AAE,
        0xA25AB213, 0x48A6B46C, 0x1B9D9BCB, 0x092C5BE6, 0x546CA624, 0x1BEC45D5, 0x87F47473, 0x96F0992E,
    ]
    assert [rng.next_u32() for _ in range(16)] == expected
    assert rng.word_pos == 48
    key = np.frombuffer(seed, dtype="<u4")
    assert chacha_blocks(key, 2, 1, rounds=20)[0].tolist() == expected  # block counter addressing
    # next_u64 / fill_bytes advance the word position as rand_chacha's do
    rng.fill_bytes(32)
    assert rng.word_pos == 56
    rng.fill_bytes(25)
    assert rng.word_pos == 63
    rng.next_u64()  # straddles the 64-word buffer boundary
    assert rng.word_pos == 65


def test_chacha20_construction_and_multiple_blocks():
    seed = bytes([0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0])
    rng1 = StdRng.from_seed(seed, rounds=20)
    assert rng1.next_u32() == 137206642
    rng2 = StdRng.from_seed(rng1.fill_bytes(32), rounds=20)  # ChaChaRng::from_rng(&mut rng1)
    assert rng2.next_u32() == 1325750369
    rng = StdRng.from_seed(bytes(b for i in range(8) for b in (i, 0, 0, 0)), rounds=20)
    got = []
    for _ in range(16):
        got.append(rng.next_u32())
        for _ in range(16):
            rng.next_u32()
    assert got == [
        0xF225C81A, 0x6AB1BE57, 0x04D42951, 0x70858036, 0x49884684, 0x64EFEC72, 0x4BE2D186, 0x3615B384,
        0x11CFA18E, 0xD3C50049, 0x75C775F6, 0x434C6530, 0x2C5BAD8F, 0x898881DC, 0x5F1C86D9, 0xC1F8E7F4,
    ]


def test_stdrng_is_chacha12_value_stability():
    # rand 0.8/0.9 src/rngs/std.rs::test_stdrng_construction
    seed = bytes([1, 0, 0, 0, 23, 0, 0, 0, 200, 1, 0, 0, 210, 30, 0, 0] + [0] * 16)
    rng0 = StdRng.from_seed(seed)
    x0 = rng0.next_u64()
    rng1 = StdRng.from_seed(rng0.fill_bytes(32))  # StdRng::from_rng(&mut rng0)
    assert [x0, rng1.next_u64()] == [10719222850664546238, 14064965282130556830]


def test_seed_from_u64_pcg32_fill():
    # rand_core's seed_from_u64: PCG32 step first, then XSH-RR output, one LE u32 per chunk
    def ref(state):
        out = []
        for _ in range(8):
            state = (state * 6364136223846793005 + 11634580027462260723) % 2**64
            xs = ((((state >> 18) ^ state) >> 27)) % 2**32
            rot = state >> 59
            out.append(((xs >> rot) | (xs << (32 - rot))) % 2**32)
        return out

    for s in (0, 1, 7, 42, 2**63, 2**64 - 1):
        assert seed_from_u64(s).tolist() == ref(s)


def test_bulk_and_scalar_draws_agree():
    a, b = StdRng(7), StdRng(7)
    xs = a.next_u64_array(1000)
    assert xs.tolist() == [b.next_u64() for _ in range(1000)]
    assert a.word_pos == b.word_pos == 2000
    # an odd word position: next_u64 spans two words wherever it starts
    a.next_u32(), b.next_u32()
    assert a.next_u64_array(100).tolist() == [b.next_u64() for _ in range(100)]
    f = StdRng(3).random_f64_array(10)
    r = StdRng(3)
    assert f.tolist() == [r.random_f64() for _ in range(10)]
    assert np.all((f >= 0) & (f < 1))
    for n in (1, 2, 3, 5, 13, 1000, 2**31 + 1, 2**32 - 1):
        a, b = StdRng(11), StdRng(11)
        assert random_range_u32_array(a, n, 300).tolist() == [b.random_range(n) for _ in range(300)]
        assert a.word_pos == b.word_pos


def test_random_range_canon_second_draw():
    # Canon's method draws a second u32 only when the low half of x*n exceeds 2^32 - n; with
    # n = 2^32 - 1 that happens about half the time, so the stream positions diverge from 1 word/draw
    r = StdRng(5)
    vals = [r.random_range(2**32 - 1) for _ in range(200)]
    assert r.word_pos > 250 and all(0 <= v < 2**32 - 1 for v in vals)
    assert StdRng(5).random_range(1) == 0
    assert 0 <= StdRng(5).random_range(2**40) < 2**40  # u64 path


# ------------------------------------------------------------------ Dynamo 1.4.2 behaviour
# Arrival times (ms) of sessions 1..12 recovered from Dynamo 1.4.2 (see the module docstring);
# session 0 arrives at 0. Keys: (arrival_seed, request_rate).
DYNAMO_ARRIVALS = {
    (7, 1.0): [30.786437168091012, 397.63623174550554, 551.5361258397029, 1333.552086991356,
               1651.6896241890327, 4670.307850769937, 4863.239451834497, 5159.983714803664,
               5293.767240108121, 6579.1378377773835, 7597.672288219234, 7618.514513843917],
    (42, 1.0): [747.7246176406965, 1530.1953951913883, 2542.0753684496403, 3062.7859515607033,
                3097.732343327897, 3633.8020105943315, 4971.018354595163, 6863.161441140516,
                7003.894577514479, 7007.151973425685, 9697.536124796243, 10403.058285438894],
    (7, 80.0): [0.3848304646011377, 4.970452896818819, 6.894201572996286, 16.669401087391947,
                20.646120302362906, 58.37884813462422, 60.790493147931215, 64.4997964350458,
                66.1720905013515, 82.23922297221728, 94.9709036027404, 95.23143142304893],
    (0, 3.0): [437.8218695327672, 932.7667238620234, 941.4948821796988, 1233.9791932517194,
               1335.3267567725713, 1828.1108303531687, 1910.374872319785, 2436.5379022117268,
               2897.7550931319015, 4055.009079511077, 5923.050544371085, 5973.083234966733],
    (123456789, 1.0): [4005.0404571963495, 4432.04457667591, 4704.621365928299, 5303.989083979977,
                       5506.9515804891325, 6118.2096675105495, 7736.255061657124, 8874.097224108016,
                       9143.794336270574, 9502.385342961148, 15193.40225532315, 17669.219232612064],
    (2**64 - 1, 1.0): [63.10066945957124, 103.76373487128893, 179.36978590572514, 630.9932195218634,
                       843.8344326143277, 1661.9940547827641, 3391.173703713378, 3546.740543663035,
                       3995.996648531217, 4151.455802640509, 5214.406981099475, 6070.082549717308],
}


@pytest.mark.parametrize("key", sorted(DYNAMO_ARRIVALS))
def test_poisson_arrivals_bit_identical_to_dynamo(key):
    seed, rate = key
    expected = [0.0] + DYNAMO_ARRIVALS[key]
    got = poisson_arrivals_ms(seed, 1000.0 / rate, len(expected))
    assert got.tolist() == expected
    w = synthetic(8, 2, len(expected), request_rate=rate, arrival_seed=seed)
    assert w.session_arrival_ms.tolist() == expected
    # a longer workload shares the prefix (gaps are drawn one per session, in order)
    assert synthetic(8, 2, 500, request_rate=rate, arrival_seed=seed).session_arrival_ms[:13].tolist() == expected


def test_poisson_gaps_formula():
    # gap = -mean * ln(1 - U) with U = (next_u64 >> 11) * 2^-53, libm's log, summed one at a time
    r = StdRng(42)
    gaps = poisson_gaps_ms(r, 250.0, 50)
    r2 = StdRng(42)
    ref = [-250.0 * math.log(1.0 - (r2.next_u64() >> 11) * 2.0**-53) for _ in range(50)]
    assert gaps.tolist() == ref
    t, acc = 0.0, [0.0]
    for g in ref:
        t += g
        acc.append(t)
    assert poisson_arrivals_ms(42, 250.0, 51).tolist() == acc
    assert poisson_arrivals_ms(42, 250.0, 1).tolist() == [0.0]


# First occurrences of each prefix group ("N" = the session's group is new) seen in Dynamo 1.4.2,
# 1 worker, input 128 (2 blocks of 64), shared_prefix_ratio 0.5, sessions 0..29, keyed by
# (arrival mode, arrival_seed, num_prefix_groups). Identical for every arrival seed and with
# Poisson arrivals: the groups come from a separate StdRng(42).
DYNAMO_GROUP_FIRSTS = {
    ("const", 7, 4): "NN..N..N......................",
    ("const", 42, 4): "NN..N..N......................",
    ("const", 7, 7): "NNN.NN.N.....N................",
    ("const", 3, 3): "NN..N.........................",
    ("poisson", 7, 4): "NN..N..N......................",
    ("poisson", 42, 5): "NNN.NN........................",
}


@pytest.mark.parametrize("key", sorted(DYNAMO_GROUP_FIRSTS))
def test_group_draws_match_dynamo(key):
    mode, seed, groups = key
    kw = dict(arrival_interval_ms=1000.0) if mode == "const" else dict(request_rate=1.0)
    w = synthetic(128, 1, 30, arrival_seed=seed, shared_prefix_ratio=0.5, num_prefix_groups=groups, **kw)
    first = w.hash_ids.view(np.uint64).reshape(30, 2)[:, 0]
    seen, pattern = set(), []
    for x in first.tolist():
        pattern.append("." if x in seen else "N")
        seen.add(x)
    assert "".join(pattern) == DYNAMO_GROUP_FIRSTS[key]
    r = StdRng(42)
    assert ((first >> np.uint64(32)) & np.uint64(0xFFFF)).tolist() == [r.random_range(groups) for _ in range(30)]


def _strict(rep, ref):
    misses = []
    for k, v in ref.items():
        if k in WALL_FIELDS or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        got = rep[k]
        if abs(got - v) > 1e-12 and abs(got - v) / max(abs(v), 1e-12) > 1e-9:
            misses.append((k, got, v))
    return misses


def test_v10_poisson_reference_case():
    # tests/data/reference/V10.cmd: --input-tokens 1024 --output-tokens 128 --request-count 1000
    #   --request-rate 80 --arrival-seed 7 --num-workers 4 --router-mode round_robin
    ref = json.loads((REF / "V10.json").read_text())
    rep = fastsim.run_synthetic_trace_replay(1024, 128, 1000, request_rate=80.0, arrival_seed=7,
                                             num_workers=4, router_mode="round_robin", dynamo_version="1.4.2")
    assert _strict(rep, ref) == []


# Dynamo 1.4.2 reports (run_synthetic_trace_replay, default engine) with Poisson arrivals and
# several prefix groups: (isl, osl, count, rate, arrival_seed, groups, ratio, workers) -> fields
DYNAMO_GROUP_RUNS = [
    ((1024, 16, 300, 40.0, 3, 5, 0.5, 1),
     {"duration_ms": 8338.357879000014, "mean_ttft_ms": 55.22431584970896, "p99_ttft_ms": 118.08890105780247,
      "mean_e2e_latency_ms": 379.3088263697097, "p99_e2e_latency_ms": 612.8929051696623,
      "prefix_cache_reused_ratio": 0.49166666666666664, "mean_itl_ms": 21.605634034666675}),
    ((512, 8, 500, 200.0, 11, 13, 0.75, 2),
     {"duration_ms": 2478.311211079331, "mean_ttft_ms": 45.87896043962957, "p99_ttft_ms": 65.11813890059852,
      "mean_e2e_latency_ms": 243.95718983962925, "p99_e2e_latency_ms": 292.33369050456787,
      "prefix_cache_reused_ratio": 0.711, "mean_itl_ms": 28.29688991428569}),
]


@pytest.mark.parametrize("args, ref", DYNAMO_GROUP_RUNS)
def test_poisson_with_prefix_groups_matches_dynamo(args, ref):
    isl, osl, n, rate, seed, groups, ratio, workers = args
    rep = fastsim.run_synthetic_trace_replay(isl, osl, n, request_rate=rate, arrival_seed=seed,
                                             shared_prefix_ratio=ratio, num_prefix_groups=groups,
                                             num_workers=workers, dynamo_version="1.4.2")
    assert _strict(rep, ref) == []


def test_million_poisson_arrivals_fast():
    import time

    synthetic(8, 2, 1000, request_rate=10.0)  # warm the numba cache
    t0 = time.perf_counter()
    w = synthetic(8, 2, 1_000_000, request_rate=80.0, arrival_seed=7)
    assert time.perf_counter() - t0 < 1.0
    a = w.session_arrival_ms
    assert a[0] == 0.0 and np.all(np.diff(a) >= 0)
    assert a[1:13].tolist() == DYNAMO_ARRIVALS[(7, 80.0)]
    assert np.mean(np.diff(a)) == pytest.approx(12.5, rel=0.01)
