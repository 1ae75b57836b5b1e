"""Steady decoding on the SGLang engine (``kernels/sglang_steady.py``) is exact: a simulation gives
the same results, bit for bit, with it (the default) and with every decode pass run one request at
a time (``fastsim.sim_sglang.STEADY_DECODING = False``), under both releases' rules.

Random configurations: synthetic loads (shared prefixes, multi-turn sessions) and slices of the
bundled Mooncake trace; page sizes 1-64; KV from tight (retractions, evictions) to ample; fifo and
lpm; chunked prefill; clip_max_new_tokens below and above the outputs; max_num_seqs; attention DP
(with room: KV pressure on DP ranks is refused); prefill_decode_interval; time caps and closed
loops (where steady decoding stays off). ``_steady_steps`` checks that steady steps happened
where they can.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

import fastsim.sglang_state as sglang_state
import fastsim.sim_sglang as sim_sglang
from fastsim.api import run_synthetic_trace_replay, run_trace_replay
from fastsim.errors import InputError, NotSupportedError
from fastsim.kernels.sglang_steady import DIAG_EXITS, DIAG_STEPS

from recorded import WALL_FIELDS

TRACE = Path(__file__).resolve().parents[1] / "examples" / "mooncake_trace_1000.jsonl"
COLUMNS = ("arrival_time_ms", "first_admit_ms", "terminal_time_ms", "first_token_ms", "ttst_ms", "last_token_ms",
           "itl_ms", "reused_input_tokens", "output_length", "decode_worker_idx", "status")


def _run(monkeypatch, steady, load, engine, version, **kw):
    """The report of ``load`` (a callable taking the engine arguments and keywords), with or
    without steady decoding, and the steady state of its last build."""
    states = []
    build = sglang_state.build

    def keep(*args, **kwargs):
        st = build(*args, **kwargs)
        states.append(st)
        return st

    monkeypatch.setattr(sglang_state, "build", keep)
    monkeypatch.setattr(sim_sglang, "STEADY_DECODING", steady)
    rep = load(engine, dynamo_version=version, **kw)
    return rep, states[-1][8]


def _assert_same(a, b):
    for col in COLUMNS:
        np.testing.assert_array_equal(a.requests[col].to_numpy(), b.requests[col].to_numpy(), err_msg=col)
    for k, v in b.summary.items():
        if k in WALL_FIELDS or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        assert a.summary[k] == v, k  # bit for bit


def _both(monkeypatch, load, engine, version, **kw):
    """Steady and pass-at-a-time runs agree; returns the steady run's diagnostics (None when the
    configuration is refused, by both)."""
    try:
        slow, _ = _run(monkeypatch, False, load, engine, version, **kw)
    except (NotSupportedError, InputError) as e:
        with pytest.raises(type(e)):
            _run(monkeypatch, True, load, engine, version, **kw)
        return None
    fast, sd = _run(monkeypatch, True, load, engine, version, **kw)
    _assert_same(fast, slow)
    return sd.diag.copy()


def _synthetic(n_in, n_out, n, interval, workers, **extra):
    """A synthetic load (``interval`` None: a closed loop's, given ``replay_concurrency``)."""
    def load(engine, **kw):
        if interval is not None:
            kw["arrival_interval_ms"] = interval
        return run_synthetic_trace_replay(n_in, n_out, n, extra_engine_args=engine, num_workers=workers, **extra,
                                          **kw)
    return load


def _trace(tmp_path, first, count, workers, speedup):
    lines = TRACE.read_text().splitlines(keepends=True)[first:first + count]
    path = tmp_path / f"slice_{first}_{count}.jsonl"
    path.write_text("".join(lines))

    def load(engine, **kw):
        return run_trace_replay([str(path)], extra_engine_args=engine, num_workers=workers, trace_block_size=512,
                                arrival_speedup_ratio=speedup, **kw)
    return load


def _engine(rng, dp):
    ps = rng.choice([1, 16, 32, 64])
    sg = {"schedule_policy": rng.choice(["fifo", "lpm"])}
    if rng.random() < 0.4:
        sg["chunked_prefill_size"] = ps * rng.choice([8, 32, 128])
    if rng.random() < 0.3:
        sg["clip_max_new_tokens"] = rng.choice([8, 64, 4096])
    if rng.random() < 0.3:
        sg["schedule_conservativeness"] = rng.choice([0.3, 1.0, 1.7])
    e = {"engine_type": "sglang", "block_size": ps, "sglang": sg, "dp_size": dp}
    # tight (retractions, evictions) to ample, in tokens of a rank
    e["num_gpu_blocks"] = max(rng.choice([3000, 8000, 30000, 200000]) // ps, 64) if dp == 1 else 200000 // ps
    if rng.random() < 0.25:
        e["max_num_seqs"] = rng.choice([4, 16, 64])
    return e


@pytest.mark.parametrize("seed", range(40))
def test_random_configurations(monkeypatch, tmp_path, seed):
    rng = random.Random(seed)
    dp = rng.choice([1, 1, 1, 2])
    engine = _engine(rng, dp)
    if rng.random() < 0.5:
        load = _synthetic(rng.choice([64, 300, 1024]), rng.choice([1, 8, 70, 200]), rng.choice([150, 400]),
                          rng.choice([0.5, 3.0, 20.0]), rng.choice([1, 2, 3]),
                          **({"shared_prefix_ratio": 0.5, "num_prefix_groups": 4} if rng.random() < 0.4 else {}),
                          **({"turns_per_session": 3, "inter_turn_delay_ms": 40.0} if rng.random() < 0.3 else {}))
    else:
        load = _trace(tmp_path, rng.randrange(0, 700), rng.choice([120, 300]), rng.choice([1, 2]),
                      rng.choice([1.0, 4.0, 20.0]))
    versions = ("1.6.1", "1.4.2")
    if rng.random() < 0.3:
        engine["sglang"]["prefill_decode_interval"] = rng.choice([1, 3])
        versions = ("1.6.1",)  # (1.4.2 has none)
    for version in versions:
        _both(monkeypatch, load, engine, version)


@pytest.mark.parametrize("version", ["1.6.1", "1.4.2"])
@pytest.mark.parametrize("kw", [{"max_sim_time_ms": 1500.0}, {"replay_concurrency": 6}])
def test_caps_and_closed_loops(monkeypatch, version, kw):
    """Steady decoding stays off under a time cap or in a closed loop; the runs agree."""
    engine = {"engine_type": "sglang", "block_size": 16, "num_gpu_blocks": 300}
    interval = None if "replay_concurrency" in kw else 2.0
    diag = _both(monkeypatch, _synthetic(300, 60, 200, interval, 2), engine, version, **kw)
    assert diag[DIAG_STEPS] == 0


def _steady_steps(monkeypatch, load, engine):
    return _both(monkeypatch, load, engine, "1.6.1")


def test_steady_steps_happen(monkeypatch, tmp_path):
    """Steady steps on a synthetic load, on a trace with shared prefixes (lpm), with DP and the
    interval; retractions on a tight pool make ranks explicit again, and the runs still agree."""
    diag = _steady_steps(monkeypatch, _synthetic(512, 64, 400, 2.0, 2),
                         {"engine_type": "sglang", "block_size": 64})
    assert diag[DIAG_STEPS] > 50
    diag = _steady_steps(monkeypatch, _trace(tmp_path, 0, 300, 2, 4.0),
                         {"engine_type": "sglang", "block_size": 32, "sglang": {"schedule_policy": "lpm"}})
    assert diag[DIAG_STEPS] > 50
    diag = _steady_steps(monkeypatch, _synthetic(1024, 128, 300, 5.0, 2),
                         {"engine_type": "sglang", "block_size": 64, "dp_size": 2,
                          "sglang": {"prefill_decode_interval": 2}})
    assert diag[DIAG_STEPS] > 50
    diag = _steady_steps(monkeypatch, _synthetic(300, 120, 300, 1.0, 1),
                         {"engine_type": "sglang", "block_size": 16, "num_gpu_blocks": 400})
    assert diag[DIAG_STEPS] > 50 and diag[DIAG_EXITS] > 0
