"""The Python API can be found from the interpreter (issue: a user's first hour, item 6)."""

import subprocess
import sys
from pathlib import Path

import pytest

import fastsim
from fastsim.sim import PlannerState

TRACE = str(Path(__file__).parent / "data" / "mooncake_tiny.jsonl")
ENTRY_POINTS = ("run_trace_replay", "run_synthetic_trace_replay", "sweep", "Report")


def test_dir_and_help_list_the_entry_points_and_import_stays_light():
    code = ("import sys, fastsim, pydoc\n"
            "names = dir(fastsim)\n"
            "print(all(n in names for n in %r), 'numba' in sys.modules)\n"
            "print(pydoc.render_doc(fastsim, renderer=pydoc.plaintext))\n" % (ENTRY_POINTS,))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    first, text = r.stdout.split("\n", 1)
    assert first == "True False"  # listed, and dir() imported nothing heavy
    for name in ENTRY_POINTS:
        assert f"{name}" in text
    assert "run_trace_replay(trace_files" in text  # help() shows the signatures, not only the names
    assert set(ENTRY_POINTS) <= set(fastsim.__all__)


@pytest.mark.parametrize("debug", [True, False])
def test_debug_is_accepted_and_checks_the_invariants(debug, monkeypatch):
    import fastsim.invariants as inv

    calls = []
    real = inv.check
    monkeypatch.setattr(inv, "check", lambda st, engine: (calls.append(1), real(st, engine))[1])
    monkeypatch.delenv("FASTSIM_DEBUG", raising=False)
    rep = fastsim.run_trace_replay(TRACE, num_workers=2, extra_engine_args={"block_size": 16}, debug=debug)
    assert rep.summary["completed_requests"] == rep.summary["num_requests"]
    rep = fastsim.run_synthetic_trace_replay(64, 4, 20, arrival_interval_ms=5.0, debug=debug,
                                             planner=lambda s: 2, planner_interval_ms=50.0)
    assert rep.summary["completed_requests"] == 20
    assert len(calls) == (2 if debug else 0)


def test_planner_state_fields_are_documented():
    doc = PlannerState.__doc__
    for name in PlannerState._fields:
        assert f"{name}:" in doc, name


def test_run_trace_replay_docstring_describes_disaggregation():
    doc = fastsim.run_trace_replay.__doc__
    assert "disaggregated engine args" not in doc and "not supported yet by fastsim)" not in doc
    assert "Disaggregated replay" in doc and "debug=True" in doc
