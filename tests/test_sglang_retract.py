"""The new-token ratio SGLang re-estimates at a retraction (decision 0476), against Dynamo 1.6.1.

``tests/data/sglang_retract_161``: one-worker replays whose decode steps retract requests while
another request completes in the same step (small hand-cut traces, the bundled Mooncake trace with
pages of 16 and 64, DP 2, speculative decoding). Every report field within 1e-9 and every
request's admission, first and last token times and reused tokens to the ns; the compiled engine
against the plain-Python one on three of them.
"""

import functools
from pathlib import Path

import pytest

import recorded

FOLDER = Path(__file__).parent / "data" / "sglang_retract_161"
CASES = recorded.cases(FOLDER)


@pytest.mark.parametrize("name,args", CASES, ids=[c[0] for c in CASES])
def test_retraction_ratio_matches_dynamo_161(name, args):
    recorded.assert_matches_dynamo(FOLDER, name, args)


@pytest.mark.parametrize("name", ["tiny_completes_at_retraction", "synth_b", "synth_b_mtp_k2"])
def test_compiled_engine_equals_reference(name, monkeypatch):
    import fastsim.sim_sglang as sg

    args = dict(CASES)[name]
    fast = recorded.replay(args, FOLDER)
    monkeypatch.setattr(sg, "simulate_sglang", functools.partial(sg.simulate_sglang, reference=True))
    recorded.assert_engines_agree(fast, recorded.replay(args, FOLDER))
