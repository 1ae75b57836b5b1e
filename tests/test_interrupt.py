"""Ctrl-C stops a compiled event loop at once, not when the loop next returns to Python, which on
a long run can be minutes later (fastsim/interrupt.py)."""

import os
import signal
import threading
import time

import pytest

import fastsim

# minutes of simulation: overloaded workers, long outputs
LONG = dict(input_tokens=512, output_tokens=16000, request_count=1_000_000, request_rate=1500.0, num_workers=16)


@pytest.mark.parametrize("router_mode,engine", [("kv_router", None), ("round_robin", {"engine_type": "sglang"}),
                                                ("round_robin", None)],
                         ids=["vllm-kv-router", "sglang", "vllm-shards"])
def test_ctrl_c_stops_a_long_run_within_a_second(router_mode, engine):
    fastsim.run_synthetic_trace_replay(64, 4, 20, arrival_interval_ms=1.0, num_workers=2, router_mode=router_mode,
                                       extra_engine_args=engine)  # (kernels compiled or loaded first)
    sent = []

    def send():
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    # (Python's own handler, as from a terminal: a suite started in a shell's background inherits
    # SIGINT ignored)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(4.0, send)  # (the loop has long started by then)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            fastsim.run_synthetic_trace_replay(**LONG, router_mode=router_mode, extra_engine_args=engine,
                                               threads=2 if engine is None and router_mode == "round_robin" else None)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert sent and time.monotonic() - sent[0] < 1.0, "the loop ran on after Ctrl-C"
