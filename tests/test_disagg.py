"""Disaggregated prefill/decode against Dynamo 1.4.2 (cluster doc C5, C5b, C6, C8, C9).

``data/disagg/dynamo142.json`` holds Dynamo 1.4.2's per-request records and report figures for
each scenario below (trace block size 16, engine block size 16, round robin), recorded once with
``run_trace_replay(..., prefill_engine_args=MockEngineArgs(is_prefill=True, ...),
decode_engine_args=MockEngineArgs(is_decode=True, ...))``. fastsim must give the same timeline to
the last bit: prefill admission, handoff (source held), reservation, activation, source release,
tokens, terminal status and both sides' prefix reuse.
"""

import json
import math
from pathlib import Path

import pytest

import fastsim
from fastsim.errors import InputError

DATA = json.loads((Path(__file__).parent / "data" / "disagg" / "dynamo142.json").read_text())


def row(ts, isl, osl, hids):
    return dict(timestamp=ts, input_length=isl, output_length=osl, hash_ids=hids)


S = list(range(1, 11))
XFER = dict(kv_bytes_per_token=1000000, kv_transfer_bandwidth=1.0)
XFER_ROWS = [row(0, 64, 4, [1, 2, 3, 4]), row(1000, 64, 4, [1, 2, 3, 4]), row(2000, 50, 4, [1, 2, 8, 9]),
             row(3000, 50, 4, [1, 2, 3, 4]), row(4000, 64, 4, [1, 2, 6, 7])]
BIG = list(range(1000, 1400))
# name: (rows, prefill engine args, decode engine args, prefill workers, decode workers, extra)
SCEN = {
    "single": ([row(0, 64, 3, [1, 2, 3, 4])], {}, {}, 1, 1, {}),
    "single_delay_131072_10": ([row(0, 64, 3, [1, 2, 3, 4])],
                               dict(kv_bytes_per_token=131072, kv_transfer_bandwidth=10.0), {}, 1, 1, {}),
    "single_delay_327680_64": ([row(0, 64, 3, [1, 2, 3, 4])],
                               dict(kv_bytes_per_token=327680, kv_transfer_bandwidth=64.0), {}, 1, 1, {}),
    "transfer_args_on_decode_only": ([row(0, 64, 3, [1, 2, 3, 4])], {},
                                     dict(kv_bytes_per_token=131072, kv_transfer_bandwidth=10.0), 1, 1, {}),
    "rr_p2_d3": ([row(0, 100, 4, list(range(10, 17))), row(0, 200, 4, list(range(20, 33))),
                  row(1, 300, 4, list(range(40, 59))), row(2, 50, 4, list(range(60, 64))),
                  row(3, 400, 4, list(range(70, 95)))], {}, {}, 2, 3, {}),
    "three_prompts_one_prefill": ([row(0, 160, 3, list(range(10, 20))), row(1, 320, 3, list(range(20, 40))),
                                   row(2, 480, 3, list(range(40, 70)))], {}, {}, 1, 1, {}),
    "prefill_seats_1": ([row(0, 160, 3, list(range(10, 20))), row(1, 320, 3, list(range(20, 40))),
                         row(2, 480, 3, list(range(40, 70)))], dict(max_num_seqs=1), {}, 1, 1, {}),
    "prefill_budget_800": ([row(0, 160, 3, list(range(10, 20))), row(1, 320, 3, list(range(20, 40))),
                            row(2, 480, 3, list(range(40, 70)))], dict(max_num_batched_tokens=800), {}, 1, 1, {}),
    "decode_budget_32": ([row(0, 100, 3, list(range(1, 8)))], {}, dict(max_num_batched_tokens=32), 1, 1, {}),
    "decode_budget_32_two": ([row(0, 100, 3, list(range(1, 8))), row(0, 100, 3, list(range(11, 18)))], {},
                             dict(max_num_batched_tokens=32), 1, 1, {}),
    "decode_seats_1": ([row(0, 100, 3, list(range(1, 8))), row(0, 100, 3, list(range(11, 18)))], {},
                       dict(max_num_seqs=1), 1, 1, {}),
    "decode_blocks_8": ([row(0, 100, 3, list(range(1, 8))), row(0, 100, 3, list(range(11, 18)))], {},
                        dict(num_gpu_blocks=8), 1, 1, {}),
    "prefill_kv_held_until_release": ([row(0, 160, 3, list(range(10, 20))), row(1, 160, 3, list(range(30, 40)))],
                                      dict(num_gpu_blocks=20, kv_bytes_per_token=1000000, kv_transfer_bandwidth=8.0),
                                      {}, 1, 1, {}),
    "sharing_rr": ([row(0, 240, 3, S + list(range(100, 105))), row(100, 240, 3, S + list(range(200, 205))),
                    row(200, 250, 3, S + list(range(300, 306))), row(300, 160, 3, S)], {}, {}, 1, 1, {}),
    "sharing_simultaneous": ([row(0, 240, 4, S + list(range(100, 105))), row(0, 240, 4, S + list(range(200, 205)))],
                             {}, {}, 1, 1, {}),
    "sharing_decode_20_blocks": ([row(0, 240, 2, S + list(range(100, 105))), row(100, 240, 2, S + list(range(200, 205))),
                                  row(100, 240, 2, S + list(range(300, 305)))], {}, dict(num_gpu_blocks=20), 1, 1, {}),
    "decode_kv_too_small_fails": ([row(0, 16, 3, [1]), row(1, 16 * 200, 3, BIG[:200]), row(2, 32, 3, [2, 3]),
                                   row(3, 48, 3, [4, 5, 6])], {}, dict(num_gpu_blocks=100), 1, 1, {}),
    "decode_max_model_len_rejects": ([row(0, 16, 3, [1]), row(1, 200, 3, list(range(10, 23))), row(2, 32, 5, [2, 3])],
                                     {}, dict(max_model_len=100), 1, 1, {}),
    "prefill_kv_too_small_rejects": ([row(0, 16, 3, [1]), row(1, 16 * 200, 3, BIG[:200]), row(2, 32, 3, [2, 3])],
                                     dict(num_gpu_blocks=100), {}, 1, 1, {}),
    "decode_preemption": ([row(0, 64, 40, [1, 2, 3, 4]), row(1, 64, 40, [5, 6, 7, 8]), row(2, 64, 40, [9, 10, 11, 12])],
                          {}, dict(num_gpu_blocks=12), 1, 1, {}),
    "concurrency_1": ([row(0, 64, 5, [1, 2, 3, 4]), row(5, 64, 5, [5, 6, 7, 8]), row(9, 64, 5, [9, 10, 11, 12])],
                      {}, {}, 1, 2, dict(replay_concurrency=1)),
    "concurrency_2_p2d2": ([row(0, 64, 5, [1, 2, 3, 4]), row(5, 96, 7, [5, 6, 7, 8, 9, 10]),
                            row(9, 64, 5, [9, 10, 11, 12]), row(12, 32, 2, [13, 14])], {}, {}, 2, 2,
                           dict(replay_concurrency=2)),
    # kv_transfer_timing_mode (read from the prefill args): destination_missing moves only the whole
    # blocks the decode worker does not hold (rows 2-5 share 0-4 blocks with row 1, cached there)
    "transfer_destination_missing": (XFER_ROWS, dict(XFER, kv_transfer_timing_mode="destination_missing"),
                                     dict(XFER, kv_transfer_timing_mode="destination_missing"), 1, 1, {}),
    "transfer_destination_missing_prefill_args": (XFER_ROWS, dict(XFER, kv_transfer_timing_mode="destination_missing"),
                                                  {}, 1, 1, {}),
    "transfer_full_prompt_sharing": (XFER_ROWS, dict(XFER, kv_transfer_timing_mode="full_prompt"), {}, 1, 1, {}),
    "chunked_prefill_many_steps": ([row(0, 160, 9, list(range(10, 20))), row(1, 2000, 3, list(range(100, 225)))],
                                   dict(max_num_batched_tokens=256), {}, 1, 1, {}),
}


def _run(name, tmp_path):
    rows, pe, de, P, D, kw = SCEN[name]
    trace = tmp_path / f"{name}.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / f"{name}.out.jsonl"
    rep = fastsim.run_trace_replay(
        trace, trace_block_size=16, prefill_engine_args=dict(block_size=16, worker_type="prefill", **pe),
        decode_engine_args=dict(block_size=16, worker_type="decode", **de), num_prefill_workers=P,
        num_decode_workers=D, report_jsonl_path=out, **dict(dict(dynamo_version="1.4.2"), **kw))
    return rep, _sorted([json.loads(line) for line in out.read_text().splitlines()])


def _sorted(recs):
    # JSONL order among equal arrivals is random in Dynamo (uuid): compare as sorted multisets
    def key(r):
        return tuple(-1.0 if r.get(k) is None else r[k] for k in
                     ("arrival_time_ms", "input_length", "output_length", "source_held_ms",
                      "decode_admit_ms", "first_token_ms", "last_token_ms", "reused_input_tokens"))
    return sorted(recs, key=key)


def _same(a, b):
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


@pytest.mark.parametrize("name", list(SCEN))
def test_timeline_matches_dynamo(name, tmp_path):
    want = DATA[name]
    rep, recs = _run(name, tmp_path)
    assert len(recs) == len(want["records"])
    for got, exp in zip(recs, _sorted(want["records"])):
        diff = {k: (got.get(k), v) for k, v in exp.items() if not _same(got.get(k), v)}
        assert not diff, f"{name}: {diff}"
    for k, v in want["report"].items():
        assert rep.summary[k] == pytest.approx(v, rel=1e-12, abs=1e-12), k


def test_destination_missing_moves_missing_blocks():
    # 1.4.2: (blocks of the prompt - blocks matched at the destination) x block_size tokens
    got = [r["destination_activated_ms"] - r["destination_reserved_ms"]
           for r in DATA["transfer_destination_missing"]["records"]]
    assert got == pytest.approx([64.0, 0.0, 32.0, 16.0, 32.0], abs=1e-9)


def test_transfer_delay_is_unquantised():
    # cluster doc C5.4: decode admit = pre(64) + 64 * 131072 / (10 * 1e9) * 1000, in f64
    rec = DATA["single_delay_131072_10"]["records"][0]
    assert rec["decode_admit_ms"] == rec["source_held_ms"] + 64 * 131072 / (10.0 * 1e9) * 1000


@pytest.mark.parametrize("pe, de, msg", [
    ({"worker_type": "prefill"}, {"worker_type": "decode", "block_size": 32}, "same block_size"),
    ({"worker_type": "prefill", "dp_size": 2}, {"worker_type": "decode"}, "dp_size 2 is not allowed"),
    ({"worker_type": "aggregated"}, {"worker_type": "decode"}, "worker_type must be 'prefill'"),
    ({"worker_type": "prefill", "kv_transfer_bandwidth": 0.0, "kv_bytes_per_token": 8}, {"worker_type": "decode"},
     "kv_transfer_bandwidth"),
])
def test_pool_configuration_errors(pe, de, msg):
    with pytest.raises(InputError, match=msg):
        fastsim.run_synthetic_trace_replay(64, 4, 3, arrival_interval_ms=1.0, prefill_engine_args=pe,
                                           decode_engine_args=de)


def _trace(tmp_path, rows):
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def test_decode_pool_scales_up_with_startup(tmp_path):
    rows = [row(10 * i, 64, 4, [100 + 4 * i + j for j in range(4)]) for i in range(30)]
    out = tmp_path / "o.jsonl"
    rep = fastsim.run_trace_replay(
        _trace(tmp_path, rows), trace_block_size=16, report_jsonl_path=out,
        prefill_engine_args=dict(block_size=16, worker_type="prefill"),
        decode_engine_args=dict(block_size=16, worker_type="decode", startup_time=0.05),
        scaling_schedule={"decode": [[0, 1], [100, 3]]}, dynamo_version="1.4.2")
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert rep.summary["completed_requests"] == 30
    early = {r["decode_worker_idx"] for r in recs if r["source_held_ms"] < 150}
    late = {r["decode_worker_idx"] for r in recs if r["source_held_ms"] >= 150}
    assert early == {0}  # the new workers are still starting (50 ms) until t = 150
    assert late == {0, 1, 2}
    assert list(rep.fleet[rep.fleet.pool == "decode"].state) == ["active"] * 3


def test_pending_destination_keeps_a_scaled_down_decode_worker_alive(tmp_path):
    # A and B hand off at ~17.5 ms to decode workers 0 and 1; their transfers take 64 ms. The
    # decode pool is scaled down to 1 worker at 20 ms: worker 1 holds B's pending destination, so
    # it stays alive until B is activated, finishes B, and only then retires.
    rows = [row(0, 64, 3, [1, 2, 3, 4]), row(0, 64, 3, [5, 6, 7, 8])]
    out = tmp_path / "o.jsonl"
    rep = fastsim.run_trace_replay(
        _trace(tmp_path, rows), trace_block_size=16, report_jsonl_path=out, num_decode_workers=2,
        prefill_engine_args=dict(block_size=16, worker_type="prefill", kv_bytes_per_token=1_000_000,
                                 kv_transfer_bandwidth=1.0),
        decode_engine_args=dict(block_size=16, worker_type="decode"),
        scaling_schedule={"decode": [[20, 1]]}, dynamo_version="1.4.2")
    recs = sorted((json.loads(line) for line in out.read_text().splitlines()),
                  key=lambda r: r["decode_worker_idx"])
    assert [r["decode_worker_idx"] for r in recs] == [0, 1]
    assert all(r["terminal_status"] == "completed" for r in recs)
    b = recs[1]
    assert b["destination_activated_ms"] == b["destination_reserved_ms"] + 64.0
    assert list(rep.fleet[rep.fleet.pool == "decode"].state) == ["active", "retired"]
    # both decode workers count until the drained one retires at B's completion
    assert rep.summary["decode_worker_seconds"] == pytest.approx(
        (2 * b["terminal_time_ms"] + (rep.summary["duration_ms"] - b["terminal_time_ms"])) / 1000, rel=1e-9)


def test_disaggregated_schedule_validation(tmp_path):
    with pytest.raises(InputError, match='"prefill"'):
        fastsim.run_trace_replay(_trace(tmp_path, [row(0, 16, 2, [1])]), trace_block_size=16,
                                 prefill_engine_args={"worker_type": "prefill", "block_size": 16},
                                 decode_engine_args={"worker_type": "decode", "block_size": 16},
                                 scaling_schedule={"decoders": [[0, 2]]})


# ----------------------------------------------------------------------------- notes C23
C23_ARGS = dict(block_size=64, num_gpu_blocks=256, max_num_batched_tokens=8192, max_num_seqs=8,
                enable_prefix_caching=True, speedup_ratio=1000.0, decode_speedup_ratio=1000.0)


def _c23(tmp_path, rows, router_mode="round_robin", pe=None):
    trace = tmp_path / "c23.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "c23.out.jsonl"
    rep = fastsim.run_trace_replay(
        trace, trace_block_size=64, num_prefill_workers=2, num_decode_workers=2, router_mode=router_mode,
        prefill_engine_args=dict(C23_ARGS, worker_type="prefill", **(pe or {})),
        decode_engine_args=dict(C23_ARGS, worker_type="decode"), report_jsonl_path=out,
        dynamo_version="1.4.2")
    return rep, [json.loads(line) for line in out.read_text().splitlines()]


@pytest.mark.parametrize("router_mode", ["round_robin", "kv_router"])
def test_c23_one_request_completes(tmp_path, router_mode):
    rep, recs = _c23(tmp_path, [row(5, 128, 3, [1, 2])], router_mode)
    (r,) = recs
    assert r["arrival_time_ms"] == 0.0 and r["output_length"] == 3 and r["terminal_status"] == "completed"
    assert rep.summary["completed_requests"] == 1
    # the prefill source was freed and the decode side finished (its blocks freed at completion)
    assert r["source_released_ms"] >= r["destination_activated_ms"] >= r["source_held_ms"]


def test_c23_handoff_delay_adds_the_transfer(tmp_path):
    _, base = _c23(tmp_path, [row(5, 128, 3, [1, 2])])
    _, slow = _c23(tmp_path, [row(5, 128, 3, [1, 2])],
                   pe=dict(kv_bytes_per_token=1_000_000, kv_transfer_bandwidth=1.0))
    assert slow[0]["ttft_ms"] >= base[0]["ttft_ms"] + 120.0
    assert slow[0]["destination_activated_ms"] - slow[0]["destination_reserved_ms"] == pytest.approx(128.0)


def test_c23_identical_requests_share_a_prefill_worker(tmp_path):
    _, recs = _c23(tmp_path, [row(0, 128, 3, [1, 2]), row(100, 128, 3, [1, 2])], "kv_router")
    assert recs[0]["prefill_worker_idx"] == recs[1]["prefill_worker_idx"]
    assert sorted(r["prefill_route_overlap_tokens"] for r in recs) == [0, 128]


def test_c23_stage_router_configs():
    from fastsim.router_config import RouterConfig
    from fastsim.sim_disagg import stage_router_configs

    cp, cd = stage_router_configs(RouterConfig(router_queue_threshold=1.25))
    assert cp.router_track_active_blocks is False
    assert cd.overlap_score_weight == 0.0
    assert cd.router_assume_kv_reuse is False and cd.router_track_prefill_tokens is False
