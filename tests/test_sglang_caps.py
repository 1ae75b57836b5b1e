"""The SGLang engine under a time cap (``--max-sim-time-seconds``, API ``max_sim_time_ms``) against
Dynamo's recorded outputs, in both releases (decision 0292).

* ``tests/data/sglang_caps_161``: recorded with Dynamo 1.6.1 (which stops at the last event at or
  before the cap, on one worker as on a cluster);
* ``tests/data/sglang_caps_142``: recorded with Dynamo 1.4.2 (whose single-worker runtime still
  processes the first event beyond the cap).

One and two workers, DP 2 and 4 (with ``prefill_decode_interval`` in 1.6.1), tight KV with
retractions, long prompts in chunks, lpm, clip, the bundled Mooncake trace, a cap before any
request completes. Every report field within 1e-9, and every completed request's admission, first
and last token times (to the ns), reused tokens and rank; the requests left in flight at the cap
are not in Dynamo's records, nor in fastsim's.
"""

import json
import warnings
from pathlib import Path

import pytest

import recorded
from fastsim.api import run_trace_replay
from fastsim.errors import NotSupportedError

DATA = Path(__file__).parent / "data"
FOLDERS = {"sglang_caps_161": "1.6.1", "sglang_caps_142": "1.4.2"}
CASES = [(folder, name, args) for folder in FOLDERS for name, args in recorded.cases(DATA / folder)]
TIMELINE = ("first_admit_ms", "first_token_ms", "last_token_ms", "reused_input_tokens", "decode_worker_idx")
MOONCAKE = Path(__file__).parent.parent / "examples" / "mooncake_trace_1000.jsonl"


def _capped_replay(args, folder, version):
    """``recorded.replay`` of Dynamo's flags ``args``, the cap in seconds passed as the API's ms."""
    flags = args.split()
    i = flags.index("--max-sim-time-seconds")
    cap_ms = float(flags[i + 1]) * 1000.0
    del flags[i:i + 2]
    with warnings.catch_warnings():  # (the warning about the requests left in flight at the cap)
        warnings.simplefilter("ignore")
        return recorded.replay(" ".join(flags), folder, dynamo_version=version, max_sim_time_ms=cap_ms)


@pytest.mark.parametrize("folder,name,args", CASES, ids=[f"{c[0]}/{c[1]}" for c in CASES])
def test_capped_case_matches_dynamo(folder, name, args):
    d = DATA / folder
    rep = _capped_replay(args, d, FOLDERS[folder])
    recorded.assert_summary_matches(rep.summary, json.loads((d / f"{name}.json").read_text()))
    finished = rep.requests[rep.requests["terminal_status"].notna()].reset_index(drop=True)
    recorded.assert_timelines_match(finished, recorded.per_request(d, name), TIMELINE)


@pytest.mark.parametrize("version", ["1.6.1", "1.4.2"])
def test_closed_loop_is_refused_naming_the_release(version):
    """Both releases run SGLang in a closed loop; fastsim's SGLang engine does not yet."""
    with pytest.raises(NotSupportedError, match=f"--replay-concurrency .*Dynamo {version} runs it"):
        run_trace_replay(str(MOONCAKE), num_workers=2, trace_block_size=512, replay_concurrency=4,
                         extra_engine_args={"engine_type": "sglang", "block_size": 64}, dynamo_version=version)
