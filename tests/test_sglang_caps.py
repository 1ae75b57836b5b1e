"""The SGLang engine under a time cap (``--max-sim-time-seconds``, API ``max_sim_time_ms``) and in a
closed loop (``--replay-concurrency``) against Dynamo's recorded outputs, in both releases
(decisions 0292, 0293).

* ``tests/data/sglang_caps_161``, ``sglang_caps_142``: time caps, recorded with Dynamo 1.6.1 (which
  stops at the last event at or before the cap, on one worker as on a cluster) and Dynamo 1.4.2
  (whose single-worker runtime still processes the first event beyond the cap): one and two
  workers, DP 2 and 4 (with ``prefill_decode_interval`` in 1.6.1), tight KV with retractions,
  long prompts in chunks, lpm, clip, the bundled Mooncake trace, a cap before any request
  completes and one just before a completion.
* ``tests/data/sglang_closed_161``, ``sglang_closed_142``: closed loops of concurrency 1 to 16 on
  one to three workers, DP 2, tight KV with retractions, long chunked prompts, the Mooncake trace,
  multi-turn sessions with think times (1.4.2's single worker stamps a turn ready mid-pass at the
  pass's end, decision 0240), a synthetic load, and closed loops under a cap.

Every report field within 1e-9, and every finished request's admission, first and last token
times (to the ns), reused tokens and rank; the requests left in flight at a cap are in neither
Dynamo's records nor fastsim's.
"""

import json
from pathlib import Path

import pytest

import recorded
from fastsim.api import run_trace_replay
from fastsim.errors import NotSupportedError

DATA = Path(__file__).parent / "data"
FOLDERS = {"sglang_caps_161": "1.6.1", "sglang_caps_142": "1.4.2", "sglang_closed_161": "1.6.1",
           "sglang_closed_142": "1.4.2"}
CASES = [(folder, name, args) for folder in FOLDERS for name, args in recorded.cases(DATA / folder)]
TIMELINE = ("first_admit_ms", "first_token_ms", "last_token_ms", "reused_input_tokens", "decode_worker_idx")
MOONCAKE = Path(__file__).parent.parent / "examples" / "mooncake_trace_1000.jsonl"


@pytest.mark.parametrize("folder,name,args", CASES, ids=[f"{c[0]}/{c[1]}" for c in CASES])
def test_case_matches_dynamo(folder, name, args):
    d = DATA / folder
    rep = recorded.replay_capped(args, d, dynamo_version=FOLDERS[folder])
    recorded.assert_summary_matches(rep.summary, json.loads((d / f"{name}.json").read_text()))
    if not (d / f"{name}.per_request.jsonl.gz").exists():  # (Dynamo 1.4.2's synthetic runs write none)
        return
    finished = rep.requests[rep.requests["terminal_status"].notna()].reset_index(drop=True)
    rows = recorded.per_request(d, name)
    recorded.assert_timelines_match(finished, rows, TIMELINE)
    mine = [json.loads(line) for line in rep.jsonl_lines()]  # (the records as written, with 1.6.1's names)
    assert _labels(mine) == _labels(rows)  # session names and turns (or null)


def _labels(rows):
    """Each record's (arrival, lengths, session_id, turn_index), sorted."""
    return sorted(((r["arrival_time_ms"], r["input_length"], r["requested_output_length"]), r["session_id"],
                   r["turn_index"]) for r in rows)


def test_reference_engine_refuses_caps_and_closed_loops(monkeypatch):
    """The plain-Python reference engine has neither yet: asked for them, it says so."""
    import functools

    import fastsim.sim_sglang as sg

    monkeypatch.setattr(sg, "simulate_sglang", functools.partial(sg.simulate_sglang, reference=True))
    with pytest.raises(NotSupportedError, match="plain-Python SGLang reference"):
        run_trace_replay(str(MOONCAKE), num_workers=2, trace_block_size=512, replay_concurrency=4,
                         extra_engine_args={"engine_type": "sglang", "block_size": 64})
