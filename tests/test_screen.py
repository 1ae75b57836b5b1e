"""Output people read (issue: a user's first hour, item 5): the screen summary, no report file
unless asked for, progress on stderr (a bar on a terminal, plain lines otherwise), Ctrl-C."""

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fastsim import progress
from fastsim.screen import MAX_WIDTH, format_summary

ROOT = Path(__file__).resolve().parents[1]
TRACE = str(ROOT / "examples" / "mooncake_trace_1000.jsonl")
TINY = str(Path(__file__).parent / "data" / "mooncake_tiny.jsonl")
FIRST_COMMAND = ["replay", TRACE, "--num-workers", "2", "--extra-engine-args", '{"block_size":64}']


def fastsim(*argv, cwd, env=None):
    e = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "fastsim", *argv], capture_output=True, text=True, cwd=cwd,
                          env=e, timeout=600)


def test_first_command_fits_100_columns_with_fastsims_title_and_writes_nothing(tmp_path):
    r = fastsim(*FIRST_COMMAND, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "fastsim replay: 1,000 of 1,000 requests completed on 2 workers, 187.0 s simulated"  # Dynamo 1.6.1 timing
    assert "AIPerf" not in r.stdout and "1,000.00" not in r.stdout
    assert max(map(len, lines)) <= MAX_WIDTH
    for label in ("TTFT (ms)", "Request latency (ms)", "Throughput", "GPU-hours", "Prefix cache", "Wall time"):
        assert any(line.startswith(label) for line in lines), label
    assert lines[-1] == "Reproduces      Dynamo 1.6.1 (--dynamo-version)"  # the default release
    assert "Goodput" not in r.stdout and "Saved" not in r.stdout
    assert r.stderr == ""  # a short run shows no progress
    assert list(tmp_path.iterdir()) == []  # no timestamped report file in the working directory


@pytest.mark.parametrize("columns", [60, 80, 200])
def test_columns_is_honoured(tmp_path, columns):
    r = fastsim(*FIRST_COMMAND, cwd=tmp_path, env={"COLUMNS": str(columns)})
    assert r.returncode == 0, r.stderr
    widths = [len(line) for line in r.stdout.splitlines()]
    if columns < 100:
        assert max(widths[1:]) <= columns  # the title line may be longer than a very narrow terminal
    else:
        header = next(line for line in r.stdout.splitlines() if line.startswith("Metric"))
        assert header.split()[1:] == ["avg", "min", "p50", "p75", "p90", "p95", "p99", "max", "std"]


def test_goodput_with_the_sla_and_an_explicit_report_json(tmp_path):
    r = fastsim(*FIRST_COMMAND, "--sla-ttft-ms", "1000", "--sla-itl-ms", "50", "--report-json", "out.json",
                cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "out.json").read_text())
    good = rep["goodput_completed_requests"]
    assert f"{good:,} of 1,000 requests" in r.stdout and "(TTFT <= 1,000 ms, ITL <= 50 ms)" in r.stdout
    assert f"Saved full report to: out.json" in r.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
    assert isinstance(rep["completed_requests"], int) and rep["completed_requests"] == 1000


def test_summary_counts_are_integers_and_columns_drop_to_fit():
    summary = {"num_requests": 12345, "completed_requests": 12000, "duration_ms": 5000.0, "gpu_hours": 0.5,
               "mean_ttft_ms": 1.0, "min_ttft_ms": 0.5, "max_ttft_ms": 9.0, "median_ttft_ms": 1.0,
               "p75_ttft_ms": 2.0, "p90_ttft_ms": 3.0, "p95_ttft_ms": 4.0, "p99_ttft_ms": 8.0, "std_ttft_ms": 1.5}
    text = format_summary(summary, width=40)
    assert "12,000 of 12,345 requests" in text
    header = next(line for line in text.splitlines() if line.startswith("Metric"))
    assert "avg" in header and "p99" in header and "p95" not in header
    assert max(len(line) for line in text.splitlines()[1:]) <= 40


class _Stream(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


def _wait_for(stream, text, timeout=10.0):
    t = time.monotonic()
    while text not in stream.getvalue() and time.monotonic() - t < timeout:
        time.sleep(0.05)
    return stream.getvalue()


def test_progress_into_a_file_is_plain_lines():
    stream = _Stream(tty=False)
    state = {"done": 250}
    with progress.reporting(stream, delay_s=0.0):
        progress.track(1000, lambda: (state["done"], 61_000.0))
        out = _wait_for(stream, "\n")
        progress.untrack()
    assert "\r" not in out
    assert out.startswith("fastsim: 250 of 1,000 requests done (25%), 61.0 s simulated, ")
    assert "ETA" in out and out.count("\n") == 1  # the next line comes 10 s later


def test_progress_on_a_terminal_is_a_bar_that_is_erased():
    stream = _Stream(tty=True)
    with progress.reporting(stream, delay_s=0.0):
        progress.track(1000, lambda: (400, 5_000.0))
        out = _wait_for(stream, "400/1000")
        progress.untrack()
        time.sleep(0.6)
    assert "simulating" in out and "5.0 s simulated" in out
    assert stream.getvalue().endswith("\r") or stream.getvalue().endswith("\x1b[A")  # leave=False cleared it


def test_nothing_before_the_delay_and_nothing_without_reporting():
    stream = _Stream(tty=False)
    with progress.reporting(stream, delay_s=30.0):
        progress.track(10, lambda: (1, 1.0))
        time.sleep(0.6)
    assert stream.getvalue() == ""
    progress.track(10, lambda: (1, 1.0))  # outside reporting(): a no-op
    assert progress._target is None


def test_sweep_into_a_log_file_writes_no_carriage_returns(tmp_path):
    (tmp_path / "spec.yaml").write_text(f"base: {{trace_files: {TINY}}}\ngrid: {{num_workers: [1, 2]}}\n")
    r = fastsim("sweep", "spec.yaml", "--out", "r.parquet", "--executor", "serial", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "\r" not in r.stderr and "sweep: 2/2 (100%)" in r.stderr


def test_long_replay_reports_progress_and_ctrl_c_still_interrupts(tmp_path):
    """A run of several seconds prints a progress line on stderr (a pipe: plain text); Ctrl-C
    then ends it with status 130 and no traceback, as before."""
    argv = ["replay", "--input-tokens", "512", "--output-tokens", "16000", "--request-count", "1000000",
            "--request-rate", "1500", "--num-workers", "16", "--router-mode", "kv_router"]
    # (a suite started in the background of a shell inherits SIGINT ignored, and so would the run:
    # the child starts with the default disposition, as from a terminal)
    p = subprocess.Popen([sys.executable, "-m", "fastsim", *argv], cwd=tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        line = p.stderr.readline()  # blocks until the first progress line (or the end)
        while line and "requests done" not in line:  # a cold kernel cache says so first, say
            line = p.stderr.readline()
        assert line.startswith("fastsim: ") and "of 1,000,000 requests done" in line, (line, p.poll())
        assert "\r" not in line and "simulated" in line and "ETA" in line
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=600)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, (p.returncode, out[-500:], err[-2000:])
    assert "fastsim replay: interrupted" in err and "Traceback" not in err, err[-2000:]
