"""Telemetry, scaling schedules and planners on the SGLang engine, and what of them it refuses
(decision 0380).

tests/data/sglang_ops_161 (cases.tsv with ``--telemetry-interval-ms``, recorded by
tests/data/record_tsv.py; each case's Dynamo 1.6.1 telemetry samples by its record_telemetry.py):
with telemetry on, every report field within 1e-9 of Dynamo's and every request's times to the
ns, as without it; each telemetry row's running and waiting requests are the ones Dynamo's
per-request records put on that worker at that tick, and the ticks are Dynamo's sample times.
tests/data/sglang_ops_142: the same for Dynamo 1.4.2, which has no telemetry of its own.
tests/data/sglang_scaling_161 and sglang_planner_161: scaling schedules and planner policies run by
Dynamo 1.6.1's scaling-policy hook (their record_scaling.py and record_planner.py).
"""

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

import recorded
from fastsim.api import run_synthetic_trace_replay
from fastsim.errors import NotSupportedError

DATA = Path(__file__).parent / "data" / "sglang_ops_161"
DATA_142 = Path(__file__).parent / "data" / "sglang_ops_142"
CASES = recorded.cases(DATA)
CASES_142 = recorded.cases(DATA_142)
SGLANG = {"engine_type": "sglang", "block_size": 16}
# (tel_2w_pressure differed until the ratio re-estimated at a retraction divided by the outputs'
# sum plus one: decisions 0279, 0380)
DIFFERS = set()


def _kv(args):
    return "kv_router" in args


def _runs(folder, name):
    """Dynamo's reports of a kv_router case (it breaks the router's ties at random): the recorded
    one and its other runs."""
    runs = [json.loads((folder / f"{name}.json").read_text())]
    k = 2
    while (folder / f"{name}.run{k}.json").exists():
        runs.append(json.loads((folder / f"{name}.run{k}.json").read_text()))
        k += 1
    return runs


@pytest.mark.parametrize("name,args", recorded.with_known_differences(CASES, DIFFERS, "0380"))
def test_telemetry_case_matches_dynamo_161(name, args):
    if not _kv(args):
        recorded.assert_matches_dynamo(DATA, name, args)
        return
    # kv_router: the run with telemetry equals the one without, and is within Dynamo's band
    with_tel = recorded.replay(args, DATA, seed=0)
    flags = args.split()
    i = flags.index("--telemetry-interval-ms")
    plain = recorded.replay(" ".join(flags[:i] + flags[i + 2:]), DATA, seed=0)
    for col in ("first_admit_ms", "first_token_ms", "last_token_ms", "decode_worker_idx"):
        np.testing.assert_array_equal(with_tel.requests[col].to_numpy(), plain.requests[col].to_numpy())
    misses = recorded.band_misses(with_tel.summary, _runs(DATA, name))
    assert not misses, misses


def _in_flight_check(rep, rows, ticks_only=False):
    """Each telemetry row's running + waiting requests are the ones Dynamo's records put on that
    worker with arrival <= tick < terminal, and its running ones those admitted by then."""
    w = rep.workers
    worker = np.array([r["routing_history"][0]["logical_worker_id"] for r in rows])
    arrival = np.array([r["arrival_time_ms"] for r in rows])
    admit = np.array([np.inf if r["first_admit_ms"] is None else r["first_admit_ms"] for r in rows])
    end = np.array([r["terminal_time_ms"] for r in rows])
    for t, g, run, wait in zip(w.time_ms, w.worker, w.running, w.waiting):
        here = (worker == g) & (arrival <= t) & (end > t)
        assert run + wait == here.sum(), (t, g)
        assert run == (here & (admit <= t)).sum(), (t, g)


@pytest.mark.parametrize("name,args", [c for c in CASES if not _kv(c[1])],
                         ids=[c[0] for c in CASES if not _kv(c[1])])
def test_telemetry_rows_agree_with_dynamo_161(name, args):
    rep = recorded.replay(args, DATA)
    rows = recorded.per_request(DATA, name)
    w = rep.workers
    n_workers = int(args.split("--num-workers")[1].split()[0])
    # one row per worker and tick, at Dynamo's sample times (its baseline and periodic samples;
    # fastsim stops at the last event, Dynamo adds a final sample there)
    with gzip.open(DATA / f"{name}.telemetry.jsonl.gz", "rt") as f:
        samples = [json.loads(line) for line in f]
    ticks = [s["sampled_at_ms"] for s in samples if s["kind"] in ("baseline", "periodic")]
    np.testing.assert_allclose(np.unique(w.time_ms.to_numpy()), ticks, rtol=0, atol=1e-9)
    assert (np.bincount(w.worker.to_numpy(), minlength=n_workers) == len(ticks)).all()
    # the pages: never more than the workers have, what a worker's live requests hold at least
    dp = json.loads(args.split("--extra-engine-args ")[1].split(" --")[0]).get("dp_size", 1)
    eng = json.loads(args.split("--extra-engine-args ")[1].split(" --")[0])
    pages = (eng.get("engine") or eng).get("num_gpu_blocks")
    if pages:
        assert ((w.kv_blocks_used + w.kv_blocks_cached) <= pages * dp).all()
    assert (w.passes.diff().fillna(0)[w.worker.diff().fillna(0) == 0] >= 0).all()
    if any(r["readmission_count"] for r in rows) or "max_model_len" in args:
        return  # (retracted requests wait again; rejections leave without a pass)
    _in_flight_check(rep, rows)


@pytest.mark.parametrize("name,args", CASES_142, ids=[c[0] for c in CASES_142])
def test_telemetry_case_matches_dynamo_142(name, args):
    """Dynamo 1.4.2 has no telemetry: fastsim's leaves its runs as they are."""
    if (DATA_142 / f"{name}.per_request.jsonl.gz").exists():
        recorded.assert_matches_dynamo(DATA_142, name, args, dynamo_version="1.4.2", telemetry_interval_ms=100.0)
    else:
        rep = recorded.replay(args, DATA_142, dynamo_version="1.4.2", telemetry_interval_ms=100.0)
        recorded.assert_summary_matches(rep.summary, json.loads((DATA_142 / f"{name}.json").read_text()))
        assert rep.workers.shape[0] > 0


def test_telemetry_needs_no_steady_decoding_to_agree():
    """The rows read every rank's pages at the tick: a run with telemetry decodes step by step,
    with the same results as the steady run without it."""
    kw = dict(arrival_interval_ms=20.0, num_workers=2, extra_engine_args=SGLANG)
    a = run_synthetic_trace_replay(800, 120, 60, telemetry_interval_ms=50.0, **kw)
    b = run_synthetic_trace_replay(800, 120, 60, **kw)
    for col in ("first_admit_ms", "first_token_ms", "last_token_ms"):
        np.testing.assert_array_equal(a.requests[col].to_numpy(), b.requests[col].to_numpy())
    assert b.workers is None and a.workers.shape[0] > 0


def test_telemetry_buffers_grow():
    """More rows than the first buffers hold: the loop pauses, they grow, it goes on."""
    rep = run_synthetic_trace_replay(200, 20, 400, arrival_interval_ms=5.0, num_workers=3,
                                     extra_engine_args=SGLANG, telemetry_interval_ms=0.2)
    w = rep.workers
    assert w.shape[0] > 4096 * 2
    n_ticks = w.shape[0] // 3
    np.testing.assert_allclose(w.time_ms.to_numpy()[::3][:5], [0.0, 0.2, 0.4, 0.6000000000000001, 0.8])
    assert n_ticks * 3 == w.shape[0]


@pytest.mark.parametrize("folder,name", [("sglang_caps_161", "cap_tight_p16_2w"),
                                         ("sglang_closed_161", "c4_mixed_2w")])
def test_telemetry_under_a_cap_or_in_a_closed_loop(folder, name):
    """A capped or closed-loop run whose telemetry buffers grow mid-run (the loop pauses and
    resumes) ends as the run without telemetry does."""
    data = Path(__file__).parent / "data" / folder
    args = dict(recorded.cases(data))[name]
    a = recorded.replay_capped(args, data, telemetry_interval_ms=2.0)
    b = recorded.replay_capped(args, data)
    assert a.workers.shape[0] > 8192
    assert a.summary == {**b.summary, "wall_time_ms": a.summary["wall_time_ms"],
                         **{k: a.summary[k] for k in recorded.WALL_FIELDS if k in a.summary}}
    for col in ("first_admit_ms", "first_token_ms", "last_token_ms", "status"):
        np.testing.assert_array_equal(a.requests[col].to_numpy(), b.requests[col].to_numpy())


@pytest.mark.parametrize("kw,words", [
    (dict(scaling_schedule=[[0, 1], [100, 2]], router_mode="kv_router"), "scaling schedule"),
    (dict(scaling_schedule=[[0, 1], [100, 2]], dynamo_version="1.4.2"), "scaling schedule"),
    (dict(planner=lambda s: None, planner_interval_ms=100.0, router_mode="kv_router"), "planner"),
    (dict(planner=lambda s: None, planner_interval_ms=100.0, dynamo_version="1.4.2"), "planner"),
])
def test_refused_by_name(kw, words):
    with pytest.raises(NotSupportedError, match=words) as e:
        run_synthetic_trace_replay(256, 8, 10, arrival_interval_ms=10.0, extra_engine_args=SGLANG, **kw)
    assert "not supported yet" in str(e.value)


DATA_SCALING = Path(__file__).parent / "data" / "sglang_scaling_161"
CASES_SCALING = recorded.cases(DATA_SCALING)


@pytest.mark.parametrize("name,args", CASES_SCALING, ids=[c[0] for c in CASES_SCALING])
def test_scaling_case_matches_dynamo_161(name, args):
    """A scaling schedule on SGLang workers (tests/data/sglang_scaling_161, recorded by its
    record_scaling.py through Dynamo 1.6.1's scaling-policy hook): every report field within 1e-9
    (the worker-seconds too), every request's times to the ns and the worker it went to."""
    rows = recorded.per_request(DATA_SCALING, name)
    if "--max-sim-time-seconds" in args:
        rep = recorded.replay_capped(args, DATA_SCALING)
        recorded.assert_summary_matches(rep.summary, json.loads((DATA_SCALING / f"{name}.json").read_text()))
        # (Dynamo's records of a capped run are the requests that finished)
        finished = rep.requests[rep.requests["terminal_status"].notna()].reset_index(drop=True)
        recorded.assert_timelines_match(finished, rows, ("first_admit_ms", "first_token_ms", "last_token_ms",
                                                         "reused_input_tokens"))
        return
    else:
        recorded.assert_matches_dynamo(DATA_SCALING, name, args)
        rep = recorded.replay(args, DATA_SCALING)
    order = sorted(range(len(rows)), key=lambda i: (rows[i]["arrival_time_ms"], rows[i]["input_length"], i))
    req = rep.requests
    mine = sorted(range(len(req)), key=lambda i: (req.arrival_time_ms.iat[i], req.input_length.iat[i], i))
    want = [rows[i]["routing_history"][0]["logical_worker_id"] for i in order]
    dp = json.loads(args.split("--extra-engine-args ")[1].split(" --")[0]).get("dp_size", 1)
    got = (req.decode_worker_idx.to_numpy()[mine] // dp).tolist()
    assert got == want


DATA_PLANNER = Path(__file__).parent / "data" / "sglang_planner_161"
CASES_PLANNER = recorded.cases(DATA_PLANNER)


def _policies():
    import importlib.util

    spec = importlib.util.spec_from_file_location("sglang_planner_policies", DATA_PLANNER / "policies.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.POLICIES


@pytest.mark.parametrize("name,args", CASES_PLANNER, ids=[c[0] for c in CASES_PLANNER])
def test_planner_case_matches_dynamo_161(name, args):
    """A planner callable on SGLang workers (tests/data/sglang_planner_161, recorded by its
    record_planner.py through Dynamo 1.6.1's scaling-policy hook with the same policy, ticks every
    interval from the first): every report field within 1e-9, every request's times to the ns."""
    flags = args.split()
    i = flags.index("--planner-policy")
    policy = _policies()[flags[i + 1]]
    del flags[i:i + 2]
    i = flags.index("--planner-interval-ms")
    interval = float(flags[i + 1])
    del flags[i:i + 2]

    def planner(st):
        return policy(st.now_ms, st.active_workers, st.starting_workers, st.draining_workers)

    # (max_workers: room for every worker the policy creates; the sawtooth creates 16 over the run,
    # more than the default four times num_workers)
    recorded.assert_matches_dynamo(DATA_PLANNER, name, " ".join(flags), planner=planner,
                                   planner_interval_ms=interval, max_workers=32)
