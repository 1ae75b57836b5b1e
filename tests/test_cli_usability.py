"""The command line as a user meets it (issue: a user's first hour, item 4), driven as a user
would: a subprocess, its stdout, stderr and exit status."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from fastsim.cli import build_parser

DATA = Path(__file__).parent / "data"
TRACE = str(DATA / "mooncake_tiny.jsonl")


def fastsim(*argv, cwd=None):
    return subprocess.run([sys.executable, "-m", "fastsim", *argv], capture_output=True, text=True,
                          cwd=cwd, timeout=600)


@pytest.mark.parametrize("typo", ["--num-worker", "--num-wokers", "--numworkers"])
def test_mistyped_flag_gets_a_suggestion_and_is_not_abbreviated(typo, tmp_path):
    r = fastsim("replay", TRACE, typo, "2", cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert f"unrecognized argument {typo}; did you mean --num-workers?" in r.stderr
    assert len(r.stderr.splitlines()) == 3 and r.stderr.startswith("usage: fastsim replay [TRACE_FILE] [options]\n")
    assert list(tmp_path.iterdir()) == []


def test_no_abbreviation_of_an_unambiguous_prefix():
    with pytest.raises(SystemExit):
        build_parser().parse_args(["replay", TRACE, "--arrival-speedup", "2"])


def test_mistyped_command_gets_a_suggestion():
    r = fastsim("repaly", TRACE)
    assert r.returncode == 2 and "did you mean 'replay'?" in r.stderr


def test_bad_value_is_one_short_usage_line():
    r = fastsim("replay", TRACE, "--num-workers", "two")
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.splitlines()
    assert lines == ["usage: fastsim replay [TRACE_FILE] [options]",
                     "fastsim replay: error: argument --num-workers: invalid int value: 'two'",
                     "(see 'fastsim replay --help')"]


def test_replay_help_shows_every_flag_with_default_and_meaning_grouped_with_examples():
    r = fastsim("replay", "--help")
    assert r.returncode == 0 and r.stderr == ""
    out = r.stdout
    for heading in ("trace replay:", "synthetic workload:", "engines and cluster:", "routing:",
                    "goodput SLA", "output:", "examples:"):
        assert heading in out
    assert "fastsim replay examples/mooncake_trace_1000.jsonl" in out
    # every visible flag has a help text and its default
    entries = re.split(r"\n(?=  --)", out.split("examples:")[0])
    replay = build_parser()._subparsers._group_actions[0].choices["replay"]
    shown = 0
    for action in replay._actions:
        if not action.option_strings or action.help == "==SUPPRESS==" or action.dest == "help":
            continue
        flag = action.option_strings[-1]
        entry = next(e for e in entries if e.lstrip().startswith(flag + " ") or e.lstrip().startswith(flag + "\n"))
        text = " ".join(entry.split())
        assert len(text) > len(flag) + 20, f"{flag} has no meaning: {text}"
        if action.nargs != 0:
            assert "(default: " in text, f"{flag} shows no default: {text}"
        shown += 1
    assert shown >= 40
    assert "--aic-backend" in out  # the unsupported AIConfigurator flags are named once
    assert out.count("--aic-") < 20


def test_report_workers_without_telemetry_fails_before_the_run(tmp_path):
    # the trace does not exist: the combination is refused before anything is loaded or simulated
    r = fastsim("replay", "missing.jsonl", "--report-workers", "w.csv", cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert "--report-workers needs --telemetry-interval-ms" in r.stderr
    assert "missing.jsonl" not in r.stderr and list(tmp_path.iterdir()) == []


def test_router_config_with_round_robin_warns(tmp_path):
    r = fastsim("replay", TRACE, "--router-config", '{"router_temperature": 0.5}', cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "fastsim: warning: --router-config configures --router-mode kv_router" in r.stderr
    ok = fastsim("replay", TRACE, "--num-workers", "2", "--router-mode", "kv_router",
                 "--router-config", '{"router_temperature": 0.5}', cwd=tmp_path)
    assert ok.returncode == 0 and "warning" not in ok.stderr


def test_sweep_whose_every_configuration_failed_exits_nonzero_after_writing_rows(tmp_path):
    (tmp_path / "spec.yaml").write_text(
        f"base: {{trace_files: {TRACE}}}\ngrid: {{extra_engine_args.block_size: [-1, -2]}}\n", encoding="utf-8")
    r = fastsim("sweep", "spec.yaml", "--out", "r.csv", "--executor", "serial", "--no-progress", cwd=tmp_path)
    assert r.returncode == 1
    assert "2 configurations: 0 ok, 2 errors" in r.stdout
    assert "every configuration failed" in r.stderr and "Traceback" not in r.stderr
    import pandas as pd

    assert list(pd.read_csv(tmp_path / "r.csv")["status"]) == ["error", "error"]
    (tmp_path / "spec.yaml").write_text(
        f"base: {{trace_files: {TRACE}}}\ngrid: {{extra_engine_args.block_size: [16, -1]}}\n", encoding="utf-8")
    some = fastsim("sweep", "spec.yaml", "--out", "r2.csv", "--executor", "serial", "--no-progress", cwd=tmp_path)
    assert some.returncode == 0 and "1 ok, 1 errors" in some.stdout
