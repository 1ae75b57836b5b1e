"""The compiled SGLang disaggregated loop (``kernels/sglang_disagg.py``) against the plain-Python
reference (``fastsim/sglang_disagg.py``) on random small configurations: every per-request column
and every report field identical (decision 0400)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fastsim.api import run_synthetic_trace_replay, run_trace_replay
from fastsim.errors import InputError

WALL = ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s")  # (the real clock's)


def _both(monkeypatch, run):
    """(the compiled run's report, the reference's) of ``run()``."""
    import functools

    import fastsim.sglang_disagg as sgd

    def outcome():
        try:
            return run()
        except InputError as err:  # (a configuration that cannot finish: the same error from both)
            return str(err)

    fast = outcome()
    plain = sgd.simulate_sglang_disagg
    monkeypatch.setattr(sgd, "simulate_sglang_disagg", functools.partial(plain, reference=True))
    slow = outcome()
    monkeypatch.setattr(sgd, "simulate_sglang_disagg", plain)
    return fast, slow


def _assert_identical(fast, slow):
    if isinstance(slow, str) or isinstance(fast, str):
        assert fast == slow
        return
    assert sorted(fast._req) == sorted(slow._req)
    for key, want in slow._req.items():  # every column the report is built from (readmissions too)
        got = fast._req[key]
        if isinstance(want, np.ndarray):
            assert got.dtype == want.dtype and got.shape == want.shape, key
            assert np.array_equal(got.view(np.uint8) if got.dtype.kind == "f" else got,
                                  want.view(np.uint8) if want.dtype.kind == "f" else want), key  # (bit for bit)
        else:
            assert got == want, key
    a, b = fast.requests, slow.requests
    assert list(a.columns) == list(b.columns)
    for col in a.columns:
        for x, y in zip(a[col].tolist(), b[col].tolist(), strict=True):
            assert str(x) == str(y), col  # (repr: every bit of a float, NaN and NA alike)
    for key, value in slow.summary.items():
        if key not in WALL:
            got = fast.summary[key]
            if isinstance(value, float) and math.isnan(value):
                assert isinstance(got, float) and math.isnan(got), key
            else:
                assert got == value, key


def _engines(rng):
    """Random prefill and decode engine arguments of small SGLang pools."""
    ps = int(rng.choice([16, 32, 64]))
    out = []
    for kind in ("prefill", "decode"):
        e = {"engine_type": "sglang", "worker_type": kind, "block_size": ps,
             # (a prefill rank holds the longest prompt; a decode rank may be tight: retractions)
             "num_gpu_blocks": int(rng.choice([160, 400, 2000] if kind == "prefill" else [60, 90, 160, 2000]))
             * 16 // ps,
             "enable_prefix_caching": bool(rng.random() < 0.85),
             "sglang": {"schedule_policy": str(rng.choice(["fifo", "lpm"])),
                        "chunked_prefill_size": int(rng.choice([256, 512, 8192])),
                        "schedule_conservativeness": float(rng.choice([0.3, 1.0]))}}
        if rng.random() < 0.3:
            e["dp_size"] = 2
        if rng.random() < 0.3:
            e["max_num_seqs"] = int(rng.choice([2, 4, 8]))
        if rng.random() < 0.3:
            e["speedup_ratio"] = float(rng.choice([1.5, 2.0]))
        out.append(e)
    if rng.random() < 0.3:  # speculative decoding on the decode pool
        k = int(rng.integers(1, 4))
        out[1].update(aic_nextn=k, aic_nextn_accept_rates=",".join(str(round(0.9 - 0.2 * i, 1)) for i in range(k)),
                      aic_mtp_seed=int(rng.integers(0, 100)))
    if rng.random() < 0.4:
        out[0].update(kv_bytes_per_token=int(rng.choice([1000, 100000])),
                      kv_transfer_bandwidth=float(rng.choice([1, 25])))
    return out


def _trace(path, rng, n):
    """A random Mooncake trace of ``n`` rows sharing prefixes (hash ids from a small pool)."""
    t = 0.0
    with open(path, "w") as f:
        for _ in range(n):
            t += float(rng.exponential(30.0))
            isl = int(rng.integers(1, 1200))
            blocks = -(-isl // 64)
            shared = int(rng.integers(0, blocks + 1))
            ids = [int(rng.integers(0, 6)) * 100 + i for i in range(shared)] + \
                [int(rng.integers(1000, 1 << 30)) for _ in range(blocks - shared)]
            f.write(json.dumps({"timestamp": int(t), "input_length": isl, "output_length": int(rng.integers(1, 60)),
                                "hash_ids": ids}) + "\n")


@pytest.mark.parametrize("seed", range(32))
def test_trace_replays_agree(seed, monkeypatch, tmp_path):
    """Random traces, pools, KV sizes, chunks, policies, DP, speculative decoding, transfer times,
    time caps and closed loops."""
    rng = np.random.default_rng(seed)
    pe, de = _engines(rng)
    path = tmp_path / "trace.jsonl"
    _trace(path, rng, int(rng.integers(20, 120)))
    kw = dict(prefill_engine_args=pe, decode_engine_args=de, num_prefill_workers=int(rng.integers(1, 3)),
              num_decode_workers=int(rng.integers(1, 4)), trace_block_size=64)
    if seed % 4 == 1:
        kw["max_sim_time_ms"] = float(rng.integers(500, 2500))
    if seed % 4 == 2:
        kw["replay_concurrency"] = int(rng.integers(2, 12))
    fast, slow = _both(monkeypatch, lambda: run_trace_replay([str(path)], **kw))
    _assert_identical(fast, slow)


@pytest.mark.parametrize("seed", range(16))
def test_kv_router_trace_replays_agree(seed, monkeypatch, tmp_path):
    """kv_router (decision 0440): random traces and pools as above, each pool's router, its seed
    and weights; the prefill router's overlaps (held copies included) and ties as in the loop."""
    rng = np.random.default_rng(500 + seed)
    pe, de = _engines(rng)
    path = tmp_path / "trace.jsonl"
    _trace(path, rng, int(rng.integers(20, 120)))
    kw = dict(prefill_engine_args=pe, decode_engine_args=de, num_prefill_workers=int(rng.integers(1, 4)),
              num_decode_workers=int(rng.integers(1, 4)), trace_block_size=64, router_mode="kv_router",
              seed=int(rng.integers(0, 5)))
    if seed % 3 == 1:
        kw["router_config"] = {"overlap_score_credit_decay": 1.0, "decode_active_request_weight": 0.5}
    elif seed % 6 == 2:
        kw["router_config"] = {"router_track_prefill_tokens": False}
    if seed % 4 == 1:
        kw["max_sim_time_ms"] = float(rng.integers(500, 2500))
    if seed % 4 == 2:
        kw["replay_concurrency"] = int(rng.integers(2, 12))
    fast, slow = _both(monkeypatch, lambda: run_trace_replay([str(path)], **kw))
    _assert_identical(fast, slow)


@pytest.mark.parametrize("seed", range(4))
def test_kv_router_synthetic_sessions_agree(seed, monkeypatch):
    """kv_router with multi-turn sessions sharing prefixes (open and closed loops)."""
    rng = np.random.default_rng(700 + seed)
    pe, de = _engines(rng)
    kw = dict(prefill_engine_args=pe, decode_engine_args=de, num_prefill_workers=int(rng.integers(1, 4)),
              num_decode_workers=int(rng.integers(1, 3)), turns_per_session=int(rng.integers(1, 4)),
              shared_prefix_ratio=0.5, num_prefix_groups=3, inter_turn_delay_ms=float(rng.choice([0.0, 20.0])),
              router_mode="kv_router", seed=seed)
    if seed % 2:
        kw["replay_concurrency"] = int(rng.integers(2, 8))
    else:
        kw["request_rate"] = float(rng.choice([20.0, 100.0]))
    lengths = int(rng.integers(50, 700)), int(rng.integers(2, 40)), int(rng.integers(10, 60))
    fast, slow = _both(monkeypatch, lambda: run_synthetic_trace_replay(*lengths, **kw))
    _assert_identical(fast, slow)


@pytest.mark.parametrize("seed", range(12))
def test_synthetic_sessions_agree(seed, monkeypatch):
    """Multi-turn sessions (open and closed loops) with shared prefixes."""
    rng = np.random.default_rng(100 + seed)
    pe, de = _engines(rng)
    kw = dict(prefill_engine_args=pe, decode_engine_args=de, num_prefill_workers=int(rng.integers(1, 3)),
              num_decode_workers=int(rng.integers(1, 3)), turns_per_session=int(rng.integers(1, 4)),
              shared_prefix_ratio=0.5, num_prefix_groups=3, inter_turn_delay_ms=float(rng.choice([0.0, 20.0])))
    if seed % 2:
        kw["replay_concurrency"] = int(rng.integers(2, 8))
    else:
        kw["request_rate"] = float(rng.choice([20.0, 100.0]))
    lengths = int(rng.integers(50, 700)), int(rng.integers(2, 40)), int(rng.integers(10, 60))
    fast, slow = _both(monkeypatch, lambda: run_synthetic_trace_replay(*lengths, **kw))
    _assert_identical(fast, slow)


def test_a_full_readmission_log_runs_again_with_room(monkeypatch):
    """More readmissions than the decode pool's log holds: the run is made again with room for all."""
    from fastsim import sglang_state

    build = sglang_state.build

    def small_log(workload, cfg, *args, **kw):
        if len(args) == 4:  # (the decode pool's call, the log's size not given yet: room for one)
            args = (*args, 1)
        elif args[4] is None:
            args = (*args[:4], 1, *args[5:])
        return build(workload, cfg, *args, **kw)

    kw = dict(arrival_interval_ms=1.0, num_prefill_workers=1, num_decode_workers=1,
              prefill_engine_args={"engine_type": "sglang", "worker_type": "prefill", "block_size": 16},
              decode_engine_args={"engine_type": "sglang", "worker_type": "decode", "block_size": 16,
                                  "num_gpu_blocks": 70})
    monkeypatch.setattr(sglang_state, "build", small_log)
    fast, slow = _both(monkeypatch, lambda: run_synthetic_trace_replay(100, 900, 12, **kw))
    assert len(slow._req["readmit_row"]) > 1
    _assert_identical(fast, slow)


def test_ctrl_c_stops_a_long_run_within_a_second():
    """The loop reads its Ctrl-C flag every event (fastsim/interrupt.py, decision 0323)."""
    import os
    import signal
    import threading
    import time

    pools = dict(prefill_engine_args={"engine_type": "sglang", "worker_type": "prefill", "block_size": 64},
                 decode_engine_args={"engine_type": "sglang", "worker_type": "decode", "block_size": 64},
                 num_prefill_workers=2, num_decode_workers=4)
    run_synthetic_trace_replay(64, 4, 20, arrival_interval_ms=1.0, **pools)  # (the loop compiled or loaded first)
    sent = []

    def send():
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(4.0, send)  # (the loop has long started by then)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):  # (minutes of simulation: long outputs, overloaded pools)
            run_synthetic_trace_replay(512, 16000, 200_000, request_rate=1500.0, **pools)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert sent and time.monotonic() - sent[0] < 1.0, "the loop ran on after Ctrl-C"
