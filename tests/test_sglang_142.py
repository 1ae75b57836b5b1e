"""The SGLang engine in Dynamo 1.4.2 mode (``dynamo_version="1.4.2"``) against Dynamo 1.4.2's
recorded outputs (decision 0291).

* ``tests/data/sglang_142``: the cases of ``tests/data/sglang_161`` that 1.4.2 runs, recorded with
  Dynamo 1.4.2 (its synthetic runs write the report alone; the trace runs per-request records too).
* ``tests/data/sglang_142_traces``: loads written as traces (``make_traces.py``), so that Dynamo
  1.4.2 writes every request's records: tight KV with retractions, long chunked prompts, page sizes
  1-64, fifo and lpm, max_prefill_tokens, clip, conservativeness, DP 2 and 4 (with KV pressure and
  retractions),
  several workers, max_num_seqs, speed-ups, the NPZ timing model, zero-output and fully cached
  prompts, and the bundled 1000-request Mooncake trace.
* ``tests/data/sglang_mtp_142``: speculative decoding (``aic_nextn``) on those traces and on four
  synthetic loads of ``tests/data/sglang_mtp_161`` (decision 0279).

Every report field within 1e-9, and every request's admission, first and last token times (to the
ns) and reused tokens.
"""

import functools
import json
from pathlib import Path

import pytest

import recorded
from fastsim.api import run_synthetic_trace_replay
from fastsim.errors import NotSupportedError

DATA = Path(__file__).parent / "data"
FOLDERS = ("sglang_142", "sglang_142_traces", "sglang_mtp_142")
CASES = [(folder, name, args) for folder in FOLDERS for name, args in recorded.cases(DATA / folder)]
TIMELINE = ("first_admit_ms", "first_token_ms", "last_token_ms", "reused_input_tokens", "decode_worker_idx")


@pytest.mark.parametrize("folder,name,args", CASES, ids=[f"{c[0]}/{c[1]}" for c in CASES])
def test_case_matches_dynamo_142(folder, name, args):
    d = DATA / folder
    rep = recorded.replay(args, d, dynamo_version="1.4.2")
    recorded.assert_summary_matches(rep.summary, json.loads((d / f"{name}.json").read_text()))
    if (d / f"{name}.per_request.jsonl.gz").exists():
        recorded.assert_timelines_match(rep.requests, recorded.per_request(d, name), TIMELINE)


@pytest.mark.parametrize("folder,name", [("sglang_142", "F03_pressure"), ("sglang_142_traces", "tight_retract_p16"),
                                         ("sglang_142_traces", "dp2_retract"), ("sglang_142_traces", "repeats_zero_output"),
                                         ("sglang_142_traces", "long_tight_chunked"), ("sglang_mtp_142", "k3_tight"),
                                         ("sglang_mtp_142", "k2_dp2_retract"), ("sglang_mtp_142", "k2_burst_retract")])
def test_compiled_engine_equals_reference_142(folder, name, monkeypatch):
    """The compiled 1.4.2 pass (``kernels/sglang.py``, ``rank_pass_142_nb``) against the
    plain-Python one (``fastsim/sglang_ref.py``, ``run_pass_142``): every per-request column
    identical."""
    import fastsim.sim_sglang as sg

    d = DATA / folder
    args = dict(recorded.cases(d))[name]
    fast = recorded.replay(args, d, dynamo_version="1.4.2")
    monkeypatch.setattr(sg, "simulate_sglang", functools.partial(sg.simulate_sglang, reference=True))
    slow = recorded.replay(args, d, dynamo_version="1.4.2")
    recorded.assert_engines_agree(fast, slow)


@pytest.mark.parametrize("engine", [{"engine_type": "sglang", "block_size": 64, "prefill_decode_interval": 2},
                                    {"engine_type": "sglang", "block_size": 64,
                                     "sglang": {"prefill_decode_interval": 1}}])
def test_interval_is_refused_on_142(engine):
    """Dynamo 1.4.2's SGLang engine has no prefill_decode_interval (the flat field is an unknown
    field there, the nested one is ignored): asked of 1.4.2 mode, it is refused by name."""
    with pytest.raises(NotSupportedError, match="prefill_decode_interval with --dynamo-version 1.4.2"):
        run_synthetic_trace_replay(256, 8, 10, arrival_interval_ms=10.0, extra_engine_args=engine,
                                   dynamo_version="1.4.2")


def test_142_first_tokens_take_decode_time():
    """1.4.2's rule in one figure (F01): the first request's first token is its prefill and one
    decode step, P(3568) + D = 81.959 ms; the second's comes after the next pass's prefill and a
    decode step over both, 183.276 ms."""
    rep = recorded.replay(dict(recorded.cases(DATA / "sglang_142"))["F01_trace"], DATA / "sglang_142",
                          dynamo_version="1.4.2")
    first = rep.requests["first_token_ms"].to_numpy()
    assert first[0] == pytest.approx(81.958995, abs=1e-6)
    assert first[1] == pytest.approx(183.276254, abs=1e-6)
