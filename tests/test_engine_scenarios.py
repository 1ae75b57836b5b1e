"""Facts Dynamo 1.4.2's offline replay was shown to produce, as tests of fastsim's public API.

Every expected number was produced by ``ai-dynamo==1.4.2`` and is copied here (nothing at run time
needs Dynamo or the spec). Sources: "Qn"/"Xn" = dynamo-1.4.2-verified.md and experiments-1.4.2/eNN.py
(out/eNN.txt); "cluster Cn" = dynamo-1.4.2-verified-cluster.md and experiments-1.4.2-cluster/qNN.py;
"notes Cn" = conformance scenarios of dynamo-mocker-notes.md section 12 and "probe" = a case written
here, both run on Dynamo 1.4.2 for the numbers. Engine ``block_size`` 16 and ``trace_block_size`` 16
(one hash id = one block) unless stated. Times compare with ``==`` (bit-exact, verified X1); report
means/stds (float sums) within 1e-9 relative.
"""

from __future__ import annotations

import json
import math
import random

import pytest

import fastsim
from fastsim.errors import DeadEndError, FastsimError

pytestmark = pytest.mark.filterwarnings("ignore::fastsim.errors.TraceWarning")  # clamped input lengths
NPZ = __import__("pathlib").Path(__file__).parent / "data" / "perf" / "H200_TP1P_TP1D_mocker_perf_data.npz"


def row(ts, isl, osl, hids, **kw):
    return dict(timestamp=ts, input_length=isl, output_length=osl, hash_ids=list(hids), **kw)


def run(tmp_path, rows, engine=None, tbs=16, **kw):
    """Replay ``rows`` (Mooncake dicts); returns (summary, JSONL records by file row, None if absent).
    These scenarios were recorded on Dynamo 1.4.2 (clamped prompts included)."""
    kw.setdefault("dynamo_version", "1.4.2")
    trace, out = tmp_path / "trace.jsonl", tmp_path / "out.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    kw.setdefault("dynamo_version", "1.4.2")  # these scenarios were settled on Dynamo 1.4.2
    rep = fastsim.run_trace_replay(str(trace), extra_engine_args=dict(dict(block_size=16), **(engine or {})),
                                   trace_block_size=tbs, report_jsonl_path=str(out),
                                   **dict(dict(dynamo_version="1.4.2"), **kw))
    recs = [None] * len(rows)
    for r in map(json.loads, out.read_text().splitlines()):
        recs[int(r["uuid"].replace("-", ""), 16)] = r
    return rep.summary, recs


def col(recs, key):
    return [None if r is None else r[key] for r in recs]


def approx(x):
    return pytest.approx(x, rel=1e-9, abs=1e-12)


E4 = dict(block_size=4, num_gpu_blocks=32, max_num_batched_tokens=8, max_num_seqs=2, enable_prefix_caching=False,
          speedup_ratio=0.0)  # notes' args(4, 32, 8, 2), caching off, speedup 0 (unscaled)

# fastsim bugs found by these tests (reported; the tests stay strict xfails until fixed)
BUG_NO_CACHE_SHARING = ("fastsim bug: with enable_prefix_caching=false, blocks of equal content are still shared "
                        "between requests (Dynamo never shares them)")

# ============================================================================ Q1 decode step time
@pytest.mark.parametrize("blocks, ttft, itl, ttst", [
    (1000, 34.250479000000006, 8.273174999999998, 8.273175000000002),  # physical: (32 + 8*2) blocks
    (100, 49.616863, 25.734304, 25.734304),  # u = 48/100 (logical KV would clamp at 34.01)
])
def test_decode_counts_physical_blocks_and_shared_prefix_once(tmp_path, blocks, ttft, itl, ttst):
    # Q1 / e1.py: 8 requests = same 32-block prefix + 1 unique block, OSL 6; requests 2-8 hit in-pass
    rows = [row(0, 33 * 16, 6, list(range(1, 33)) + [1000 + i]) for i in range(8)]
    s, recs = run(tmp_path, rows, dict(num_gpu_blocks=blocks))
    assert (set(col(recs, "ttft_ms")), set(col(recs, "itl_ms")), set(col(recs, "ttst_ms"))) == ({ttft}, {itl}, {ttst})
    assert sorted(col(recs, "reused_input_tokens")) == [0] + [512] * 7


def test_decode_without_prefix_caching_counts_every_request_block(tmp_path):
    # Q1 / e5b.py: no prefix caching -> blocks never shared, ITL = dec(8 * 34 blocks)
    rows = [row(0, 33 * 16, 3, list(range(1, 33)) + [1000 + i]) for i in range(8)]
    s, recs = run(tmp_path, rows, dict(enable_prefix_caching=False))
    assert recs[0]["ttst_ms"] == 6.629555999999994
    assert set(col(recs, "first_token_ms")) == {94.751402}
    assert set(col(recs, "reused_input_tokens")) == {0}


@pytest.mark.parametrize("engine, ttft, itl", [
    (dict(speedup_ratio=100.0), 0.22487800000000002, 0.05746600000000002),
    (dict(speedup_ratio=0.0), 22.487759, 5.746593000000003),
    (dict(decode_speedup_ratio=10.0), 17.318793, 0.5746590000000005),
    (dict(speedup_ratio=2.0, decode_speedup_ratio=10.0), 8.659397, 0.28733000000000075),
    (dict(decode_speedup_ratio=100.0), 16.801896, 0.05746600000000157),
])
def test_speedup_scales_durations_before_ns_rounding(tmp_path, engine, ttft, itl):
    # Q1, X1 / e1b.py: one 16-token request, OSL 4
    s, recs = run(tmp_path, [row(0, 16, 4, [1])], engine)
    assert (recs[0]["ttft_ms"], recs[0]["itl_ms"]) == (ttft, itl)


# ============================================================================ Q2 prefill time
def test_prefill_uses_integer_batch_means(tmp_path):
    # Q2 / e2.py (a): ISL 10 and 13 in one pass -> t = 2 * (23 // 2) = 22, not 23
    s, recs = run(tmp_path, [row(0, 10, 2, [1]), row(0, 13, 2, [2])])
    assert col(recs, "first_token_ms") == [22.582252, 22.582252]


def test_prefill_of_batch_with_partial_cache_hit(tmp_path):
    # Q2 / e2.py (b): B (68 tokens, 48 cached from A) and C (37) in one pass -> t = 2*(105//2 - 48//2) = 56
    rows = [row(0, 48, 1, [1, 2, 3]), row(1000, 68, 2, [1, 2, 3, 4, 5]), row(1000, 37, 2, [10, 11, 12])]
    s, recs = run(tmp_path, rows)
    assert recs[0]["first_token_ms"] == 22.981084
    assert col(recs, "first_token_ms")[1:] == [1023.119379, 1023.119379]
    assert col(recs, "last_token_ms")[1:] == [1028.885745, 1028.885745]
    assert col(recs, "reused_input_tokens") == [0, 48, 0]


@pytest.mark.parametrize("isl, reused, ttft, ratio", [
    (64, 48, 22.497648000000027, 0.375),  # aligned: recomputes its last block (t = 16)
    (70, 64, 22.349016000000006, 0.45714285714285713),  # t = 70 mod 16 = 6
])
def test_fully_cached_prompt_is_never_free(tmp_path, isl, reused, ttft, ratio):
    # Q2 / e2.py (c): the same prompt again at 1000 ms; cached tokens capped at ((L-1)//bs)*bs
    nb = -(-isl // 16)
    s, recs = run(tmp_path, [row(0, isl, 1, range(1, nb + 1)), row(1000, isl, 2, range(1, nb + 1))])
    assert (recs[1]["reused_input_tokens"], recs[1]["ttft_ms"]) == (reused, ttft)
    assert s["prefix_cache_reused_ratio"] == approx(ratio)
    assert s["first_admission_prefix_cache_reused_ratio"] == approx(ratio)


def test_readmitted_request_prefills_only_its_prompt(tmp_path):
    # Q2 / e6d.py: B (160 tokens) is preempted after 65 tokens; on re-admission t = 160, not 225
    s, recs = run(tmp_path, [row(0, 16, 300, [1]), row(0, 160, 100, range(100, 110))], dict(num_gpu_blocks=20))
    assert col(recs, "first_token_ms") == [46.845895999999996, 46.845895999999996]
    assert col(recs, "last_token_ms") == [8839.401496000013, 9985.387493999988]


# ============================================================================ Q3 token timing
@pytest.mark.parametrize("isl, first", [
    (1, 22.259900000000002), (3, 22.29027), (7, 22.351021), (13, 22.442172000000003), (29, 22.688687),
    (64, 23.228070000000002), (100, 23.787045000000003), (333, 27.413373999999997),
    (517, 30.312466999999998), (1000, 38.053158), (2049, 55.543465000000005), (4097, 92.355481),
    (7777, 167.36843199999998),
])
def test_each_duration_rounded_to_the_nanosecond(tmp_path, isl, first):
    # X1 / e_quant.py: first token = (0 + q(prefill)) + q(decode), bit-exact for 13 ISLs
    nb = -(-isl // 16)
    s, recs = run(tmp_path, [row(0, isl, 2, range(1, nb + 1))])
    assert recs[0]["first_token_ms"] == first


@pytest.mark.parametrize("isl, osl, engine, tbs, first, ttst", [
    pytest.param(64, 1, {}, 16, 23.228070000000002, None, id="Q3-ttft-is-prefill-plus-decode-of-that-pass"),
    pytest.param(100, 3, dict(max_num_batched_tokens=32), 16, 73.288394, 5.7630709999999965,
                 id="Q4a-chunk-passes-have-no-decode-time"),  # chunks 32, 32, 32, 4
    pytest.param(160, 1, dict(num_gpu_blocks=10), 16, 52.951547999999995, None, id="Q7-prompt-filling-the-pool-runs"),
    pytest.param(12, 1, dict(block_size=4, num_gpu_blocks=16, max_num_batched_tokens=4, max_num_seqs=1), 4,
                 64.648433, None, id="notesC12-budget-sized-chunks-complete"),  # probe
])
def test_lone_request_first_token(tmp_path, isl, osl, engine, tbs, first, ttst):
    # Q3 (e.g. 23.22807 = pre(64) 17.474885 + dec(4 blocks) 5.753185), Q4 / e4.py, Q7 / e7.py, notes C12
    s, recs = run(tmp_path, [row(0, isl, osl, range(1, -(-isl // tbs) + 1))], engine, tbs=tbs)
    assert (recs[0]["first_token_ms"], recs[0]["ttst_ms"]) == (first, ttst)


# ============================================================================ Q4 chunked prefill
def test_running_decode_takes_budget_before_chunks(tmp_path):
    # Q4 (b) / e4.py: A decodes (1 budget token) while B is chunked 31, 31, 31, 7
    s, recs = run(tmp_path, [row(0, 16, 8, [1]), row(1, 100, 3, range(11, 18))], dict(max_num_batched_tokens=32))
    a, b = recs
    assert (a["first_token_ms"], a["last_token_ms"]) == (22.487759, 130.34792000000002)
    assert a["itl_ms"] == 15.408594428571432  # Q3: (last - first) / (n - 1)
    assert (b["first_admit_ms"], b["first_token_ms"], b["last_token_ms"]) == (22.487759, 113.06200500000001,
                                                                               124.60132700000001)


def test_waiting_request_admitted_once_budget_is_left(tmp_path):
    # Q4 (c) / e4c.py: C (16 tokens) enters at the end of pass 3, the first pass A's chunks leave budget
    s, recs = run(tmp_path, [row(0, 100, 3, range(1, 8)), row(1, 16, 3, [50])], dict(max_num_batched_tokens=32))
    assert recs[1]["first_admit_ms"] == 50.963163
    assert col(recs, "first_token_ms") == [73.53478600000001] * 2
    assert col(recs, "last_token_ms") == [85.07410800000001] * 2


def test_chunks_start_after_the_cached_prefix(tmp_path):
    # Q4 / e5b.py: B = A's 48 cached tokens + 100 new, budget 32 -> chunks 32, 32, 32, 4
    s, recs = run(tmp_path, [row(0, 48, 1, [1, 2, 3]), row(1000, 148, 2, [1, 2, 3] + list(range(10, 17)))],
                  dict(max_num_batched_tokens=32))
    assert (recs[1]["first_token_ms"], recs[1]["reused_input_tokens"]) == (1073.2982779999998, 48)


# ============================================================================ Q5 admission
@pytest.mark.parametrize("b_isl, b_osl, admit, b_first, b_last, a_last, b_reused", [
    (800, 1, 54.688732, 117.616343, 117.616343, 328.096343, 0),  # exactly 50 free blocks: admitted
    (801, 1, 291.478732, 347.002327, 347.002327, 291.478732, 0),  # 51 blocks: waits for A
    (784, 1, 54.688732, 117.33486400000001, 117.33486400000001, 327.814864, 0),
    (800, 2, 54.688732, 117.616343, 354.686469, 328.096343, 800),  # preempted, re-admitted on own blocks
])
def test_exact_fit_admission_without_watermark(tmp_path, b_isl, b_osl, admit, b_first, b_last, a_last, b_reused):
    # Q5 / e5.py: 100 blocks; A (784 tokens, OSL 10) holds 50 blocks; B arrives at 1 ms
    nb = -(-b_isl // 16)
    s, recs = run(tmp_path, [row(0, 784, 10, range(1, 50)), row(1, b_isl, b_osl, range(100, 100 + nb))],
                  dict(num_gpu_blocks=100))
    a, b = recs
    assert (b["first_admit_ms"], b["first_token_ms"], b["last_token_ms"]) == (admit, b_first, b_last)
    assert (a["first_token_ms"], a["last_token_ms"], b["reused_input_tokens"]) == (54.688732, a_last, b_reused)


def test_admission_discounts_active_shared_prefix_blocks(tmp_path):
    # Q5 / e5b.py: 8 x (32 shared + 1 own) blocks fit 41 blocks only through the discount
    rows = [row(0, 33 * 16, 2, list(range(1, 33)) + [1000 + i]) for i in range(8)]
    s, recs = run(tmp_path, rows, dict(num_gpu_blocks=41))
    assert set(col(recs, "first_admit_ms")) == {0.0}
    assert s["completed_requests"] == 8


def test_inactive_prefix_must_be_reactivated_to_fit(tmp_path):
    # Q5 / e5b.py: A's 32 blocks inactive, capacity 34: B re-activates them, C then needs 1 block
    rows = [row(0, 512, 1, range(1, 33)), row(1000, 528, 1, list(range(1, 33)) + [500]),
            row(1000, 528, 1, list(range(1, 33)) + [501])]
    s, recs = run(tmp_path, rows, dict(num_gpu_blocks=34))
    assert recs[0]["first_token_ms"] == 58.157815
    assert col(recs, "first_admit_ms")[1:] == [1000.0, 1000.0]
    assert col(recs, "first_token_ms")[1:] == [1050.997721, 1050.997721]
    assert col(recs, "reused_input_tokens") == [0, 512, 512]


# ============================================================================ Q6 preemption
E20 = dict(num_gpu_blocks=20)


@pytest.mark.parametrize("a_osl, b_reused, ratio, a_last, b_last", [
    (146, 144, 4.5, 3967.0888710000063, 5567.791271000012),  # 9 own blocks survive, reuse > prompt
    (200, 96, 3.0, 5540.1321210000115, 7140.834521000019),  # A evicts more of B's blocks
])
def test_lifo_preempts_last_running_and_reuse_is_own_surviving_blocks(tmp_path, a_osl, b_reused, ratio, a_last, b_last):
    # Q6 / e6.py: A and B, 16-token prompts, 20 blocks; B (last) is preempted and re-admitted
    s, recs = run(tmp_path, [row(0, 16, a_osl, [1]), row(0, 16, 200, [2])], E20)
    assert col(recs, "first_token_ms") == [27.871321000000002] * 2
    assert col(recs, "last_token_ms") == [a_last, b_last]
    assert col(recs, "reused_input_tokens") == [0, b_reused]
    assert s["prefix_cache_reused_ratio"] == approx(ratio)
    assert s["first_admission_prefix_cache_reused_ratio"] == 0.0


@pytest.mark.parametrize("mode, reused, lasts, ratio", [
    ("lifo", [0, 0, 144], [30.493544999999997, 4002.7286950000002, 6104.221945000008], 2.25),
    ("fifo", [0, 80, 16], [30.493544999999997, 6104.22194500001, 5655.602795000003], 1.5),
])
def test_reused_tokens_is_the_max_over_admissions(tmp_path, mode, reused, lasts, ratio):
    # Q6 / e6.py: C [7] OSL 1, A [1], B [7, 2]: lifo B reuses 16 then 144 -> 144 (not the sum 160);
    # fifo preempts A (the first running) instead
    rows = [row(0, 16, 1, [7]), row(0, 16, 146, [1]), row(0, 32, 200, [7, 2])]
    s, recs = run(tmp_path, rows, dict(E20, preemption_mode=mode))
    assert col(recs, "reused_input_tokens") == reused
    assert col(recs, "last_token_ms") == lasts
    assert s["prefix_cache_reused_ratio"] == approx(ratio)
    assert s["first_admission_prefix_cache_reused_ratio"] == approx(0.25)


@pytest.mark.parametrize("a_osl, a_last, b_last", [(250, 7331.707103000013, 10652.869947999965),
                                                   (300, 9014.276553000007, 12336.171112999958)])
def test_reused_tokens_is_not_the_last_admission(tmp_path, a_osl, a_last, b_last):
    # Q6 / e6b.py: B first reuses 80 (C's blocks); after full eviction it is re-admitted with 0 -> 80
    rows = [row(0, 80, 1, [1, 2, 3, 4, 5]), row(0, 16, a_osl, [50]), row(0, 96, 200, [1, 2, 3, 4, 5, 6])]
    s, recs = run(tmp_path, rows, E20)
    assert col(recs, "reused_input_tokens") == [0, 0, 80]
    assert col(recs, "last_token_ms") == [39.728153, a_last, b_last]
    assert s["prefix_cache_reused_ratio"] == approx(80 / 192)


@pytest.mark.parametrize("mode, victim", [("lifo", 1), ("fifo", 0)])
def test_preempted_request_goes_to_the_front_and_blocks_arrivals(tmp_path, mode, victim):
    # Q6 / e6c.py: D (16 tokens) arrives at 4500 while the victim waits; D enters only with it, at the
    # other's completion (lifo preempts the last running request, fifo the first)
    rows = [row(0, 16, 200, [1]), row(0, 16, 200, [2]), row(4500, 16, 1, [3])]
    s, recs = run(tmp_path, rows, dict(E20, preemption_mode=mode))
    assert recs[victim]["last_token_ms"] == 7158.799434000019
    assert recs[1 - victim]["last_token_ms"] == 5540.1321210000115
    assert recs[victim]["reused_input_tokens"] == 96
    assert (recs[2]["first_admit_ms"], recs[2]["first_token_ms"]) == (5540.1321210000115, 5585.756184000012)


# ============================================================================ Q7 rejection, dead ends
E10 = dict(num_gpu_blocks=10)


def test_oversized_fresh_request_is_rejected_and_not_counted(tmp_path):
    # Q7 / e7.py: 161 tokens > 10 blocks, alone at t=0: rejected at 0.0
    s, recs = run(tmp_path, [row(0, 161, 2, range(1, 12)), row(5, 16, 2, [50])], E10)
    rej, ok = recs
    assert (rej["terminal_status"], rej["terminal_time_ms"], rej["first_admit_ms"], rej["output_length"]) == (
        "rejected", 0.0, None, 0)
    assert (ok["first_token_ms"], ok["terminal_time_ms"]) == (32.628063, 48.140463)
    assert [s[k] for k in ("num_requests", "completed_requests", "total_input_tokens", "total_output_tokens",
                           "duration_ms", "mean_ttft_ms")] == [2, 1, 16, 2, 48.140463, approx(27.628062999999997)]


@pytest.mark.parametrize("rows, terminals", [
    ([row(0, 16, 2, [50]), row(0, 161, 2, range(1, 12))], [43.140463, 27.628062999999997]),  # same time
    ([row(0, 16, 2, [50]), row(3, 161, 2, range(1, 12))], [43.140463, 43.140463]),  # arrives mid-pass
    ([row(0, 161, 2, range(1, 12)), row(0, 16, 2, [50])], [27.628062999999997, 43.140463]),  # rejected first
])
def test_rejection_happens_at_the_end_of_the_pass_that_meets_it(tmp_path, rows, terminals):
    # Q7 / e7b.py: terminal = end of the pass where the request reaches the head of waiting
    s, recs = run(tmp_path, rows, E10)
    assert col(recs, "terminal_time_ms") == terminals
    assert s["duration_ms"] == 43.140463


def test_rejection_on_an_idle_worker_is_immediate(tmp_path):
    # Q7, Q12 / e12d.py: 4000 and 3200 tokens against 100 blocks; nothing completes
    s, recs = run(tmp_path, [row(0, 4000, 2, range(1, 251)), row(10, 3200, 2, range(1000, 1200))],
                  dict(num_gpu_blocks=100))
    assert (col(recs, "terminal_time_ms"), col(recs, "terminal_status")) == ([0.0, 10.0], ["rejected"] * 2)
    assert (s["completed_requests"], s["duration_ms"], s["decode_worker_seconds"]) == (0, 0.0, 1e-9)


@pytest.mark.parametrize("rows, engine", [
    ([row(0, 160, 2, range(1, 11))], E10),  # must decode into an 11th block: self-preempted forever
    ([row(0, 100, 2, range(1, 8))], dict(max_num_batched_tokens=64, enable_chunked_prefill=False)),
    ([row(0, 8, 1, [1, 2])], dict(block_size=4, num_gpu_blocks=16, max_num_batched_tokens=4, max_num_seqs=1,
                                  enable_chunked_prefill=False)),  # notes C12, chunking off
])
def test_unschedulable_request_is_a_dead_end(tmp_path, rows, engine):
    # Q7 / e7.py, notes C12 (probe): "offline replay reached a dead end with 1 in-flight requests remaining"
    with pytest.raises(DeadEndError, match="dead end with 1 in-flight requests remaining"):
        run(tmp_path, rows, engine, tbs=16 if engine.get("block_size", 16) == 16 else 4)


def test_prompt_equal_to_budget_runs_without_chunking(tmp_path):
    # Q7 / e7.py: 64 tokens with budget 64 and chunking off
    s, recs = run(tmp_path, [row(0, 64, 2, range(1, 5)), row(1, 16, 2, [9])],
                  dict(max_num_batched_tokens=64, enable_chunked_prefill=False))
    assert col(recs, "first_token_ms") == [23.228070000000002, 45.732309]
    assert col(recs, "terminal_time_ms") == [45.732309, 51.478902000000005]


def test_prompt_at_max_model_len_is_rejected(tmp_path):
    # Q7 / e7.py: max_model_len 16 rejects a 16-token prompt (at the pass end); a 1-token prompt runs
    s, recs = run(tmp_path, [row(0, 16, 1, [1]), row(0, 1, 1, [1])], dict(max_model_len=16))
    assert col(recs, "terminal_status") == ["rejected", "completed"]
    assert col(recs, "terminal_time_ms") == [22.259900000000002, 22.259900000000002]
    assert (s["completed_requests"], s["total_input_tokens"]) == (1, 1)


# ============================================================================ Q8 multi-worker, DP
def test_round_robin_assigns_in_arrival_order(tmp_path):
    # Q8 / e8.py (8a, trace_block_size 1: isl = number of hash ids): 5 requests at t=0 on 3 workers
    rows = [row(0, 16 * (i + 1), 2, range(100 * i + 1, 100 * i + 2 + i)) for i in range(5)]
    s, recs = run(tmp_path, rows, tbs=1, num_workers=3)
    assert col(recs, "input_length") == [1, 2, 3, 4, 5]
    assert col(recs, "decode_worker_idx") == [0, 1, 2, 0, 1]
    assert col(recs, "first_token_ms") == [22.308753, 22.339129000000003, 22.29027, 22.308753, 22.339129000000003]
    assert col(recs, "last_token_ms") == [28.055346, 28.085722000000004, 28.033566, 28.055346, 28.085722000000004]


def test_dp_rotates_workers_then_ranks_and_ends_at_the_slowest_rank(tmp_path):
    # Q8 / e8.py (8b): 2 workers x dp 2, prompts of 1000..4000 tokens -> (w0,r0),(w1,r0),(w0,r1),(w1,r1)
    rows = [row(0, 1000 * (i + 1), 2, range(1000 * i + 1, 1000 * i + 1 + math.ceil(1000 * (i + 1) / 16)))
            for i in range(4)]
    s, recs = run(tmp_path, rows, dict(dp_size=2), num_workers=2)
    assert col(recs, "decode_worker_idx") == [0, 2, 1, 3]
    assert col(recs, "first_token_ms") == [72.19708499999999, 90.529296, 72.19708499999999, 90.529296]
    assert col(recs, "last_token_ms") == [78.55343999999998, 97.090679, 78.55343999999998, 97.090679]


def test_dp_group_barrier_stamps_every_rank_at_the_group_end(tmp_path):
    # Q8 / e8.py (8c): 1 worker dp 2, 100 and 4000 tokens: both take the slow rank's times
    s, recs = run(tmp_path, [row(0, 100, 5, range(1, 8)), row(0, 4000, 5, range(100, 350))], dict(dp_size=2))
    assert col(recs, "decode_worker_idx") == [0, 1]
    assert col(recs, "ttft_ms") == [90.529296, 90.529296]
    assert col(recs, "itl_ms") == [6.561383000000003, 6.561383000000003]
    assert col(recs, "last_token_ms") == [116.77482800000001, 116.77482800000001]
    assert (s["decode_gpus_per_worker"], s["duration_ms"]) == (2, 116.77482800000001)
    assert s["decode_worker_seconds"] == approx(0.11677482800000001)
    assert s["gpu_hours"] == approx(6.487490444444444e-05)


def test_mid_epoch_arrival_on_idle_rank_waits_for_the_group_boundary(tmp_path):
    # Q8 / e8d.py: 1 worker dp 2; a 16-token request at 5 ms on the idle rank is admitted at 54.702861
    s, recs = run(tmp_path, [row(0, 2000, 3, range(1, 126)), row(5, 16, 3, [500])], dict(dp_size=2))
    assert col(recs, "first_admit_ms") == [0.0, 54.702861]
    assert col(recs, "first_token_ms") == [54.702861, 77.19062]
    assert col(recs, "last_token_ms") == [83.344458, 89.09105100000001]


@pytest.mark.parametrize("isl, bs, engine, first, last", [
    (160, 16, {}, 24.714502999999997, 36.267002999999995),  # Q8 / e8d.py
    (4, 4, dict(num_gpu_blocks=64, max_num_batched_tokens=64, max_num_seqs=1, enable_prefix_caching=False),
     23.139781999999997, 37.945133999999996),  # notes C10 (probe), args(4, 64, 64, 1)
])
def test_single_rank_timeline_equals_dp2_grouped_timeline(tmp_path, isl, bs, engine, first, last):
    # Q8 / notes C10: one request on dp 1 and on dp 2 gives the same timeline
    got = []
    for dp in (1, 2):
        s, recs = run(tmp_path, [row(0, isl, 3, range(1, -(-isl // bs) + 1))], dict(engine, block_size=bs, dp_size=dp),
                      tbs=bs)
        got.append((recs[0]["first_token_ms"], recs[0]["last_token_ms"], recs[0]["decode_worker_idx"]))
    assert got == [(first, last, None), (first, last, 0)]


# ============================================================================ Q9 concurrency, sessions
SESSIONS = [dict(session_id="a", timestamp=0, input_length=16, output_length=2, hash_ids=[1]),
            dict(session_id="a", timestamp=1000, input_length=16, output_length=2, hash_ids=[2]),
            dict(session_id="b", timestamp=5, input_length=16, output_length=2, hash_ids=[3]),
            dict(session_id="c", timestamp=7, input_length=16, output_length=2, hash_ids=[4])]


@pytest.mark.parametrize("conc, arrivals, lasts", [
    (None, [0.0, 1045.228665, 5.0, 7.0], [45.22866500000001, 1073.4630170000003, 50.98185000000001, 50.98185000000001]),
    (1, [0.0, 1028.234352, 1056.4687040000001, 1084.7030560000003],
     [28.234352, 1056.4687040000001, 1084.7030560000003, 1112.9374080000005]),
    (2, [0.0, 1028.487499, 0.0, 28.487499], [28.487499, 1056.7218510000002, 28.487499, 56.721851]),
])
def test_concurrency_caps_active_sessions_and_think_time_holds_the_slot(tmp_path, conc, arrivals, lasts):
    # Q9 / e9.py: a.t1 is dispatched at completion(a.t0) + 1000; b, c follow in index order
    s, recs = run(tmp_path, SESSIONS, replay_concurrency=conc)
    assert col(recs, "arrival_time_ms") == arrivals
    assert col(recs, "last_token_ms") == lasts


def test_explicit_turn_delay_is_used_as_given(tmp_path):
    # Q9, Q13 / e9.py: a.t1 has delay 300 -> dispatched at 44.982111 + 300
    rows = [dict(session_id="a", timestamp=0, input_length=16, output_length=2, hash_ids=[1]),
            dict(session_id="a", delay=300, input_length=16, output_length=2, hash_ids=[2]),
            dict(session_id="b", timestamp=5, input_length=16, output_length=2, hash_ids=[3])]
    s, recs = run(tmp_path, rows)
    assert col(recs, "arrival_time_ms") == [0.0, 344.98211100000003, 5.0]
    assert col(recs, "last_token_ms") == [44.982111, 373.21646300000003, 50.72870400000001]


@pytest.mark.parametrize("kw, duration", [
    (dict(replay_concurrency=1), 2112.9374080000002), (dict(replay_concurrency=2), 1056.9749980000001),
    (dict(arrival_interval_ms=10.0), 1095.7108150000001),
])
def test_synthetic_sessions_with_think_time(kw, duration):
    # Q9 / e9.py: 2 sessions x 2 turns of 16/2 tokens, inter-turn delay 1000 ms
    rep = fastsim.run_synthetic_trace_replay(16, 2, 2, extra_engine_args=dict(block_size=16), turns_per_session=2,
                                             inter_turn_delay_ms=1000.0, dynamo_version="1.4.2", **kw)
    assert (rep.summary["duration_ms"], rep.summary["num_requests"]) == (duration, 4)


def test_concurrency_backfills_at_the_completion_time_with_two_workers(tmp_path):
    # notes C16 (probe): args(4, 32, 8, 2), caching and chunking off, speedup 0; cap 2 on 2 workers
    s, recs = run(tmp_path, [row(0, 8, 2, [1, 2]), row(0, 8, 4, [3, 4]), row(0, 8, 2, [5, 6])],
                  dict(E4, enable_chunked_prefill=False), tbs=4, num_workers=2, replay_concurrency=2)
    assert col(recs, "arrival_time_ms") == [0.0, 0.0, 36.215199]
    assert col(recs, "first_admit_ms")[2] == recs[0]["last_token_ms"] == 36.215199
    assert col(recs, "last_token_ms") == [36.215199, 57.369613, 72.430398]
    assert (s["completed_requests"], s["total_input_tokens"], s["total_output_tokens"]) == (3, 24, 8)


def test_concurrency_is_depth_first_over_sessions(tmp_path):
    # notes C17 (probe): trace_block_size 1; a = 2 turns (second after a 5 ms delay), b = 1 turn; cap 1
    rows = [dict(session_id="a", timestamp=0, output_length=1, hash_ids=[1, 2]),
            dict(session_id="a", delay=5, output_length=1, hash_ids=[3, 4]),
            dict(session_id="b", timestamp=0, output_length=1, hash_ids=[5, 6])]
    s, recs = run(tmp_path, rows, tbs=1, replay_concurrency=1)
    assert col(recs, "arrival_time_ms") == [0.0, 27.275085, 49.55017]
    assert col(recs, "terminal_time_ms") == [22.275085, 49.55017, 71.825255]


# ============================================================================ Q10 same timestamp
T1 = 22.487759  # end of the first pass of a lone 16-token request (e10.py)


@pytest.mark.parametrize("nw", [1, 2])
@pytest.mark.parametrize("tb, admit, first", [
    (T1, T1, 45.22866500000001),  # arrives exactly at the pass end: joins the pass that starts then
    (math.nextafter(T1, 0), T1, 45.22866500000001),
    (math.nextafter(T1, 100), 28.234352, 50.975258000000004),  # 1 ulp later: waits a whole pass
    (T1 + 0.001, 28.234352, 50.975258000000004),
    (T1 - 0.001, T1, 45.22866500000001),
])
def test_arrival_at_a_pass_end_joins_the_next_pass(tmp_path, nw, tb, admit, first):
    # Q10 / e10.py, e10b.py (2 workers: a 48-token request on worker 1, B round-robined to A's worker 0):
    # completions -> arrivals -> new passes at one timestamp (bitwise equality)
    rows = [row(0, 16, 3, [1])] + [row(0, 48, 3, [7, 8, 9])] * (nw - 1) + [row(tb, 32, 3, [5, 6])]
    s, recs = run(tmp_path, rows, num_workers=nw)
    assert (recs[0]["first_token_ms"], recs[-1]["decode_worker_idx"]) == (T1, None if nw == 1 else 0)
    assert (recs[-1]["arrival_time_ms"], recs[-1]["first_admit_ms"], recs[-1]["first_token_ms"]) == (tb, admit, first)


# ============================================================================ Q12 report statistics
@pytest.mark.parametrize("n, pct, std, mean, duration", [
    (6, [29.22032399999989, 30.991432000000714, 32.773091999999906, 32.773091999999906, 32.773091999999906],
     3.006748873625993, 28.354116833333393, 5036.849982000001),
    (12, [34.56530500000008, 38.18138799999906, 41.83968300000015, 41.83968300000015, 43.68465900000001],
     6.187063353066471, 33.730755583333455, 11042.295660000002),
    (7, [29.22032399999989, 32.773092, 32.773092, 34.56530500000008, 34.56530500000008],
     3.53170993964208, 29.241429428571447, 6033.272246),
])
def test_latency_percentiles_are_half_away_nearest_rank(tmp_path, n, pct, std, mean, duration):
    # Q12 / e12.py: n lone requests with distinct TTFTs; population std; duration = last completion
    isls = [16 * (k + 1) * 7 for k in range(n)]
    random.Random(n).shuffle(isls)
    rows = [row(1000 * i, L, 2, range(1000 * i + 1, 1000 * i + 1 + L // 16)) for i, L in enumerate(isls)]
    s, recs = run(tmp_path, rows)
    assert [s[k] for k in ("median_ttft_ms", "p75_ttft_ms", "p90_ttft_ms", "p95_ttft_ms", "p99_ttft_ms")] == pct
    assert (s["std_ttft_ms"], s["mean_ttft_ms"]) == (approx(std), approx(mean))
    assert s["duration_ms"] == duration
    assert s["decode_worker_seconds"] == approx(duration / 1000)


def test_itl_and_throughput_per_user_are_pooled_over_gaps(tmp_path):
    # Q12 / e12b.py: OSL 3 / ISL 8000, OSL 11 / ISL 16, OSL 6 / ISL 3000; percentiles = DDSketch buckets
    rows = [row(0, 8000, 3, range(1, 501)), row(2000, 16, 11, [900]), row(4000, 3000, 6, range(1000, 1188))]
    s, recs = run(tmp_path, rows)
    assert col(recs, "itl_ms") == [7.367482999999993, 5.7465929999999386, 6.356354999999894]
    assert (s["mean_itl_ms"], s["std_itl_ms"]) == (approx(6.116627705882286), approx(0.5305868364336678))
    assert (s["min_itl_ms"], s["max_itl_ms"]) == (approx(5.746592999999848), 7.367482999999993)
    assert [s[k] for k in ("median_itl_ms", "p75_itl_ms", "p90_itl_ms", "p95_itl_ms", "p99_itl_ms")] == [
        approx(5.748851426827424), approx(6.353463621049605), approx(6.353463621049605),
        approx(7.36692336861511), approx(7.36692336861511)]
    assert s["mean_tpot_ms"] == approx(6.490143666666609)
    assert s["mean_ttst_ms"] == approx(6.490143666666654)
    k = "output_token_throughput_per_user"
    assert (s[f"mean_{k}"], s[f"std_{k}"]) == (approx(164.6022935303917), approx(12.875410539007538))
    assert (s[f"min_{k}"], s[f"max_{k}"]) == (approx(135.73156531206126), approx(174.01615183118528))
    assert [s[f"median_{k}"], s[f"p90_{k}"], s[f"p99_{k}"]] == [approx(173.99059041324327)] * 3


def test_zero_output_request_completes_at_its_prefill_pass(tmp_path):
    # Q12 / e12d.py: OSL 0 -> completed at pre(64) with no token, counted in completed/throughput
    s, recs = run(tmp_path, [row(0, 64, 0, [1, 2, 3, 4]), row(100, 16, 2, [9])])
    assert (recs[0]["terminal_status"], recs[0]["terminal_time_ms"], recs[0]["first_token_ms"]) == (
        "completed", 17.474885, None)
    assert (s["completed_requests"], s["total_output_tokens"], s["duration_ms"]) == (2, 2, 128.234352)
    assert s["mean_ttft_ms"] == approx(22.487758999999997)
    assert s["request_throughput_rps"] == approx(15.596444859018744)


@pytest.mark.parametrize("nw, dp, b_isl, blocks, duration, dws, gpu_hours", [
    (1, 1, 3200, 100, 29.831892999999997, 0.029831892999999998, 8.286636944444445e-06),  # single: duration_s
    (1, 2, 3200, 100, 29.831892999999997, 0.5, 0.0002777777777777778),  # multi: the clock ran to the rejection
    (2, 1, 3200, 100, 29.831892999999997, 1.0, 0.0002777777777777778),
    (2, 1, 16, 16384, 528.234352, 1.0564687039999998, 0.00029346352888888884),  # e12d.py: idle time counts
])
def test_worker_seconds_single_and_multi_path(tmp_path, nw, dp, b_isl, blocks, duration, dws, gpu_hours):
    # X2 / e12f.py: A completes at 29.83 ms; B (3200 tokens: rejected, or 16) arrives at 500 ms
    s, recs = run(tmp_path, [row(0, 16, 2, [1]), row(500, b_isl, 2, range(100, 100 + b_isl // 16))],
                  dict(num_gpu_blocks=blocks, dp_size=dp), num_workers=nw)
    assert s["duration_ms"] == duration
    assert (s["decode_worker_seconds"], s["gpu_hours"]) == (approx(dws), approx(gpu_hours))


@pytest.mark.parametrize("rows, terminals, duration", [
    ([row(0, 16, 2, [1]), row(500, 16, 2, [2]), row(1000, 3200, 2, range(100, 300))],
     [29.831892999999997, 529.8318929999999, 1000.0], 529.8318929999999),
    ([row(0, 16, 2, [1]), row(500, 3200, 2, range(100, 300)), row(1000, 16, 2, [2])],
     [29.831892999999997, 500.0, 1029.831893], 1029.831893),
    ([row(0, 16, 1, [1]), row(1000, 16, 0, [2])], [23.021988999999998, 1016.744463], 1016.744463),
])
def test_duration_is_the_last_completed_terminal(tmp_path, rows, terminals, duration):
    # Q12, X2 / e12e.py (100 blocks): rejected requests do not extend duration_ms
    s, recs = run(tmp_path, rows, dict(num_gpu_blocks=100))
    assert col(recs, "terminal_time_ms") == terminals
    assert (s["duration_ms"], s["decode_worker_seconds"]) == (duration, approx(duration / 1000))


# ============================================================================ Q13 trace handling
@pytest.mark.parametrize("rows, tbs, isl, first", [
    ([dict(timestamp=0, output_length=2, hash_ids=[1, 2, 3])], 16, [48], [22.981084]),  # no input_length
    ([dict(timestamp=0, input_length=100, output_length=2, hash_ids=[1, 2, 3])], 16, [48], [22.981084]),  # clamp
    ([dict(timestamp=0, input_length=100, output_length=2, hash_ids=[1, 2, 3])], None, [100], [23.787045000000003]),
    ([dict(created_time=10, input_length=16, output_length=2, hash_ids=[1]),
      dict(created_time=30, input_length=16, output_length=2, hash_ids=[2])], 16, [16, 16], [22.487759, 44.982111]),
    ([dict(timestamp=10, input_tokens=16, output_tokens=2, hash_ids=[1])], 16, [16], [22.487759]),
])
def test_input_length_defaults_clamps_and_field_aliases(tmp_path, rows, tbs, isl, first):
    # Q13 / e13.py: input_length = min(input_length or cap, cap), cap = len(hash_ids) * tbs (None: 512)
    s, recs = run(tmp_path, rows, tbs=tbs)
    assert (col(recs, "input_length"), col(recs, "first_token_ms")) == (isl, first)


def test_truncated_prompt_shares_only_its_full_blocks(tmp_path):
    # Q13 / e13.py: input 20 over [1,2,3], then input 40 over the same ids -> reuse 16 (1 full block)
    s, recs = run(tmp_path, [dict(timestamp=0, input_length=20, output_length=2, hash_ids=[1, 2, 3]),
                             dict(timestamp=1000, input_length=40, output_length=2, hash_ids=[1, 2, 3])])
    assert col(recs, "reused_input_tokens") == [0, 16]
    assert col(recs, "first_token_ms") == [22.55185, 1022.6159540000001]


@pytest.mark.parametrize("ratio, arrivals", [(1.0, [0.0, 1028.234352, 200.0, 1556.475297]),
                                             (2.0, [0.0, 528.234352, 100.0])])
def test_session_rows_are_closed_loop_turns_in_file_order(tmp_path, ratio, arrivals):
    # Q13 / e13.py: rows a, a, b, a (interleaved); delays = timestamp differences, scaled by the ratio
    rows = [dict(session_id="a", timestamp=0, input_length=16, output_length=2, hash_ids=[1]),
            dict(session_id="a", timestamp=1000, input_length=32, output_length=2, hash_ids=[1, 2]),
            dict(session_id="b", timestamp=200, input_length=48, output_length=2, hash_ids=[4, 5, 6]),
            dict(session_id="a", timestamp=1500, input_length=48, output_length=2, hash_ids=[1, 2, 3])]
    s, recs = run(tmp_path, rows[:len(arrivals)], arrival_speedup_ratio=ratio)
    assert (col(recs, "arrival_time_ms"), set(col(recs, "session_id"))) == (arrivals, {None})  # X2: always null
    if ratio == 1.0:
        assert col(recs, "reused_input_tokens") == [0, 16, 0, 32]  # prompts are not accumulated
        assert recs[3]["terminal_time_ms"] == 1584.722834


@pytest.mark.parametrize("rows, message", [
    ([dict(session_id="a", timestamp=100, input_length=16, output_length=2, hash_ids=[1]),
      dict(session_id="a", timestamp=50, input_length=16, output_length=2, hash_ids=[2])], "invalid delay -50"),
    ([dict(timestamp=100, input_length=16, output_length=2, hash_ids=[1]),
      dict(input_length=16, output_length=2, hash_ids=[2])], "timestamp.*session request_2"),
])
def test_invalid_trace_rows_are_errors(tmp_path, rows, message):
    # Q13 / e13.py: Dynamo: "trace line 2 has invalid delay -50" / "trace mode requires
    # first_arrival_timestamp_ms for session request_2"
    with pytest.raises(FastsimError, match=message):
        run(tmp_path, rows)


@pytest.mark.parametrize("rows, kw, arrivals, lasts", [
    ([row(5000, 16, 2, [1]), row(5100, 16, 2, [2])], {}, [0.0, 100.0], [28.234352, 128.234352]),
    ([row(5100, 16, 2, [2]), row(5000, 16, 3, [1])], {}, [100.0, 0.0], [128.234352, 33.980945000000006]),
    ([row(5000, 16, 2, [1]), row(5100, 16, 2, [2])], dict(arrival_speedup_ratio=2.0), [0.0, 50.0],
     [28.234352, 78.234352]),
    ([row(0.5, 16, 2, [1]), row(1.25, 16, 2, [2])], dict(num_workers=2), [0.0, 0.75], [28.234352, 28.984352]),
    ([row(100, 16, 2, [1], session_id="a"), dict(session_id="a", input_length=16, output_length=2, hash_ids=[2])],
     {}, [0.0, 28.234352], [28.234352, 56.468704]),  # a later turn without timestamp: delay 0
])
def test_arrivals_are_normalised_sorted_and_scaled(tmp_path, rows, kw, arrivals, lasts):
    # Q13 / e12d.py, e13.py: t' = (t - min t) / arrival_speedup_ratio, stable-sorted
    s, recs = run(tmp_path, rows, **kw)
    assert (col(recs, "arrival_time_ms"), col(recs, "last_token_ms")) == (arrivals, lasts)


def test_trace_numbers_are_read_as_dynamo_reads_them(tmp_path):
    # probe: Dynamo 1.4.2 turns the JSON text 935.4179999999999 into 935.418 (9354179999999999 -> f64 first),
    # 100.00000000000001 into 100.0, 1234.5678901234567 into 1234.567890123457; 616.0419999999999 is kept
    rows = [row(0, 16, 1, [1]), row(935.4179999999999, 16, 1, [2]), row(100.00000000000001, 16, 1, [3]),
            row(1234.5678901234567, 16, 1, [4]), row(616.0419999999999, 16, 1, [5])]
    s, recs = run(tmp_path, rows)
    assert col(recs, "arrival_time_ms") == [0.0, 935.418, 100.0, 1234.567890123457, 616.0419999999999]


# ============================================================================ Q14 NPZ timing model
@pytest.mark.parametrize("isl, engine, first, ttst", [
    (16, {}, 6.401136, 6.686802000000001), (50, {}, 6.952223, 6.942810999999999),  # prefill extrapolated < 0 -> 0
    (80, {}, 6.973846, 6.935264999999999), (1001, {}, 26.693684, 6.158633999999996),
    (20000, {}, 447.45029, 6.693375000000003),  # extrapolated above the grid on t and on context
    (950000, dict(max_num_batched_tokens=1000000, num_gpu_blocks=70000, speedup_ratio=2.0), 10505.809434,
     0.5),  # e14c.py: below the 1 ms floor; the floor applies before speedup
])
def test_npz_model_extrapolates_and_uses_physical_kv(tmp_path, isl, engine, first, ttst):
    # Q14 / e14.py: planner_profile_data NPZ, single request, budget 32768
    nb = -(-isl // 16)
    s, recs = run(tmp_path, [row(0, isl, 3, range(1, nb + 1))],
                  dict(dict(planner_profile_data=str(NPZ), max_num_batched_tokens=32768), **engine))
    assert (recs[0]["first_token_ms"], recs[0]["ttst_ms"]) == (first, ttst)


def test_npz_decode_uses_integer_mean_context(tmp_path):
    # Q14 / e14c.py: three requests sharing 100 blocks (1603, 1622, 1642 tokens) in one pass
    rows = [row(0, L, 3, list(range(1, 101)) + list(range(1000 * (k + 1), 1000 * (k + 1) + -(-L // 16) - 100)))
            for k, L in enumerate([1603, 1622, 1642])]
    s, recs = run(tmp_path, rows, dict(planner_profile_data=str(NPZ)))
    assert set(col(recs, "first_token_ms")) == {41.465877}
    assert set(col(recs, "ttst_ms")) == {6.178038999999998}


# ============================================================================ cluster facts
# cluster C1 / q1a.py: trace S (budget 64 -> chunking, 40 blocks -> preemption, shared prefixes)
S = [row(0, 100, 20, range(1, 8)), row(1, 48, 30, [1, 2, 3]), row(30.5, 200, 15, [1, 2, 3] + list(range(50, 60))),
     row(60, 33, 40, [70, 71, 72]), row(200, 300, 50, range(80, 99)), row(201, 17, 25, [1, 2]),
     row(400, 64, 5, [1, 2, 3, 4])]
S_ENGINE = dict(num_gpu_blocks=40, max_num_batched_tokens=64)
S_ADMIT = [0.0, 17.474885, 50.279382, 129.78762999999998, 569.3793479999999, 748.6863629999999, 748.6863629999999]
S_FIRST = [50.279382, 50.279382, 174.86072199999998, 174.86072199999998, 798.2836739999999, 798.2836739999999,
           847.0594419999999]
S_LAST = [657.3553129999999, 1040.7991049999998, 569.3793479999999, 1436.7347410000002, 2235.830047,
          1552.2531410000001, 977.2616049999999]
S_REUSED = [0, 32, 48, 0, 0, 16, 48]


def test_single_worker_timeline_with_chunking_preemption_and_sharing(tmp_path):
    # cluster C1 / q1a.py (single path)
    s, recs = run(tmp_path, S, S_ENGINE)
    assert (col(recs, "first_admit_ms"), col(recs, "first_token_ms")) == (S_ADMIT, S_FIRST)
    assert (col(recs, "last_token_ms"), col(recs, "reused_input_tokens")) == (S_LAST, S_REUSED)
    assert (s["duration_ms"], s["decode_worker_seconds"]) == (2235.830047, 2.235830047)
    assert s["prefix_cache_reused_ratio"] == approx(0.1889763779527559)


def test_multi_worker_timelines_equal_the_single_worker_ones(tmp_path):
    # cluster C1 / q1a.py ("dup"): each row followed by a copy with shifted hash ids, 2 workers -> both
    # workers reproduce S bitwise; worker-seconds integrate 2 workers
    rows = [r2 for r in S for r2 in (r, dict(r, hash_ids=[h + 1000 for h in r["hash_ids"]]))]
    s, recs = run(tmp_path, rows, S_ENGINE, num_workers=2)
    for w in (0, 1):
        mine = recs[w::2]
        assert set(col(mine, "decode_worker_idx")) == {w}
        assert (col(mine, "first_admit_ms"), col(mine, "first_token_ms")) == (S_ADMIT, S_FIRST)
        assert (col(mine, "last_token_ms"), col(mine, "reused_input_tokens")) == (S_LAST, S_REUSED)
    assert s["decode_worker_seconds"] == 4.471660093999994


def _q1b_trial(rng):
    rows, hid = [], 1
    for _ in range(12):
        isl, osl, ts = rng.randint(16, 600), rng.randint(1, 12), round(rng.uniform(0, 400), 3)
        nb = math.ceil(isl / 16)
        rows.append(row(ts, isl, osl, range(hid, hid + nb)))
        hid += nb
    return sorted(rows, key=lambda r: r["timestamp"])


def test_multi_path_worker_seconds_are_bitwise(tmp_path):
    # cluster C1b / q1b.py: random.seed(7), 6 trials of 12 requests on 2-4 workers; ws = sum n*dt/1000
    rng = random.Random(7)
    expect = [(2, 0.8027937380000003, 401.3968690000001), (3, 1.188688992, 396.22966399999973),
              (2, 0.7035006940000001, 351.7503470000001), (4, 1.6461914360000018, 411.54785900000024),
              (2, 0.8048328120000002, 402.4164060000001), (3, 1.2650078190000003, 421.66927300000003)]
    for nw, ws, duration in expect:
        s, recs = run(tmp_path, _q1b_trial(rng), num_workers=nw)
        assert (s["decode_worker_seconds"], s["duration_ms"]) == (ws, duration)


@pytest.mark.parametrize("nw, cap, workers", [(2, 3, [0, 1] * 4), (3, 2, [0, 1, 2, 0, 1, 2, 0, 1]), (2, 1, [0, 1] * 4)])
def test_cluster_concurrency_dispatches_at_completions(tmp_path, nw, cap, workers):
    # cluster C8 / q8a.py: 8 single-turn sessions; dispatch k = (k - cap)-th completion, round robin continues
    rows = [row(1000 * i, 16 * (i + 1) + 3, 3 + 7 * (i % 3), range(100 * i + 1, 100 * i + 2 + i)) for i in range(8)]
    s, recs = run(tmp_path, rows, num_workers=nw, replay_concurrency=cap)
    arr, ends = col(recs, "arrival_time_ms"), col(recs, "terminal_time_ms")
    assert sorted(arr) == [0.0] * cap + sorted(ends)[:8 - cap]
    assert col(recs, "decode_worker_idx") == workers
    if (nw, cap) == (2, 3):
        assert arr == [0.0, 0.0, 0.0, 34.74762200000001, 74.75466900000002, 92.00433600000001, 133.146098, 168.708446]
        assert ends == [34.74762200000001, 92.00433600000001, 133.146098, 74.75466900000002, 168.708446,
                        226.56255599999997, 168.708446, 249.64120000000003]


@pytest.mark.parametrize("nw, workers, terminals, dws", [
    (2, [0, 1, 0, 1, 0], [56.245076000000005, 1.0, 63.58221, 43.286761000000006, 500.0], 1.0),
    (3, [0, 1, 2, 0, 1], [57.51727, 1.0, 40.471893, 65.376486, 500.0], 1.5),
])
def test_rejection_on_the_round_robin_worker(tmp_path, nw, workers, terminals, dws):
    # cluster C9 / q9a.py: 100-block workers; 3200-token requests at 1 and 500 ms are rejected on their worker
    rows = [row(0, 16, 3, [1]), row(1, 3200, 3, range(100, 300)), row(2, 32, 3, [2, 3]), row(3, 48, 3, [4, 5, 6]),
            row(500, 3200, 3, range(300, 500))]
    s, recs = run(tmp_path, rows, dict(num_gpu_blocks=100), num_workers=nw)
    assert col(recs, "decode_worker_idx") == workers
    assert col(recs, "terminal_time_ms") == terminals
    assert col(recs, "terminal_status") == ["completed", "rejected", "completed", "completed", "rejected"]
    assert (s["num_requests"], s["completed_requests"], s["total_input_tokens"]) == (5, 3, 96)
    assert s["decode_worker_seconds"] == dws


T8, T9, T10 = 62.71391000000003, 68.46050300000003, 74.20709600000004  # pass ends 8-10 of A (16 tok, OSL 10)


@pytest.mark.parametrize("nw, cap, a_done, counts, duration, dws", [
    (1, (T9 + T10) / 2, True, (1, 1), T10, 0.07420709600000004),  # single path runs the next event
    (1, (T8 + T9) / 2, False, (1, 0), 0.0, 1e-9),
    (2, (T9 + T10) / 2, False, (2, 1), 22.487759, 0.1369210060000001),  # multi path stops before it
    (2, T10, True, (2, 2), T10, 0.1484141920000001),
])
def test_max_sim_time_cap(tmp_path, nw, cap, a_done, counts, duration, dws):
    # cluster C10 / q10b.py: in-flight requests are left out of the JSONL
    rows = [row(0, 16, 10, [1])] + ([row(0, 16, 1, [2])] if nw == 2 else [])
    s, recs = run(tmp_path, rows, num_workers=nw, max_sim_time_ms=cap)
    assert (recs[0] is not None) == a_done
    assert (s["num_requests"], s["completed_requests"], s["duration_ms"]) == counts + (duration,)
    assert s["decode_worker_seconds"] == dws


# ============================================================================ notes conformance


def test_round_robin_with_normalised_arrivals(tmp_path):
    # notes C15 (probe): args(4, 32, 8, 2), caching off, speedup 0, 2 workers, arrivals 100/100/101/101
    rows = [row(100, 8, 4, [1, 2]), row(100, 16, 2, [3, 4, 5, 6]), row(101, 8, 2, [7, 8]), row(101, 8, 2, [9, 10])]
    s, recs = run(tmp_path, rows, E4, tbs=4, num_workers=2)
    assert col(recs, "arrival_time_ms") == [0.0, 0.0, 1.0, 1.0]
    assert col(recs, "decode_worker_idx") == [0, 1, 0, 1]
    assert col(recs, "first_admit_ms") == [0.0, 0.0, 25.637991999999997, 45.334891]
    assert col(recs, "first_token_ms") == [25.637991999999997, 45.334891, 85.863611, 103.797286]
    assert (s["completed_requests"], s["total_input_tokens"], s["total_output_tokens"]) == (4, 40, 10)
    s, recs = run(tmp_path, [row(0, 4 * (i + 1), 1, range(10 * i + 1, 10 * i + 2 + i)) for i in range(5)], E4, tbs=4,
                  num_workers=4)
    assert col(recs, "decode_worker_idx") == [0, 1, 2, 3, 0]


@pytest.mark.parametrize("rows, engine, first, last, admit", [
    ([row(0, 8, 2, [1, 2]), row(0, 8, 2, [26, 27])], {},  # budget 12: r1 8 tokens + r2's first 4
     [42.99368199999999, 92.42917499999999], [92.42917499999999, 118.73917499999999], [0.0, 0.0]),
    ([row(0, 8, 2, [1, 2]), row(0, 8, 2, [26, 27])], dict(num_gpu_blocks=16, max_num_batched_tokens=4),
     [45.213383, 124.561934], [79.39410699999999, 139.523887], [0.0, 45.213383]),
    ([row(0, 8, 2, [1, 2]), row(0, 8, 2, [26, 27]), row(0, 12, 2, [51, 52, 53])], {},
     [42.99368199999999, 92.42917499999999, 185.93426799999997],
     [92.42917499999999, 143.10766399999997, 216.24093499999998], [0.0, 0.0, 92.42917499999999]),
    ([row(0, 4, 0, [1])], dict(max_num_batched_tokens=8), [None], [None], [0.0]),
])
def test_vllm_scheduler_small_cases(tmp_path, rows, engine, first, last, admit):
    # notes C24 (probe): args(4, 6, 12, 3), chunked on, caching off, speedup 0
    eng = dict(block_size=4, num_gpu_blocks=6, max_num_batched_tokens=12, max_num_seqs=3, enable_prefix_caching=False,
               speedup_ratio=0.0)
    s, recs = run(tmp_path, rows, dict(eng, **engine), tbs=4)
    assert (col(recs, "first_token_ms"), col(recs, "last_token_ms")) == (first, last)
    assert col(recs, "first_admit_ms") == admit
    if first == [None]:
        assert (recs[0]["terminal_time_ms"], recs[0]["terminal_status"]) == (16.56216, "completed")


def test_token_counts_beyond_int32_are_an_input_error():
    import numpy as np

    import fastsim.api
    from fastsim.errors import InputError
    from fastsim.workload import _single_turn_workload

    wl = _single_turn_workload(np.array([16, 2**31 - 10]), np.array([2, 20]), [0.0, 1.0], [1, 2],
                               16, "test")
    with pytest.raises(InputError, match=r"test:2: input length 2147483638 plus output length 20 is 2147483658 tokens"):
        fastsim.api.simulate_workload(wl)
