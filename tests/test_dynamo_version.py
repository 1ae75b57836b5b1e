"""The release switch: ``dynamo_version`` in the API and ``--dynamo-version`` on the command line,
what the report records of it, and the summary fields of each release."""

import json

import pytest

import fastsim
from fastsim import cli
from fastsim.errors import InputError
from fastsim.report import SUMMARY_KEYS

NEW_161 = {"committed_prefill_tokens", "kv_eviction_policy", "num_ttft_samples", "num_tpot_samples",
           "num_e2e_latency_samples", "power_w", "power_coverage"}


def _run(version=None, **kw):
    extra = {} if version is None else {"dynamo_version": version}
    return fastsim.run_synthetic_trace_replay(1024, 8, 5, arrival_interval_ms=100.0, **extra, **kw)


def test_default_is_161_and_the_report_says_so():
    rep = _run()
    assert rep.dynamo_version == "1.6.1" and rep.summary["dynamo_version"] == "1.6.1"
    assert set(rep.summary) == set(SUMMARY_KEYS) | NEW_161 | {"dynamo_version"}
    s = rep.summary
    assert (s["num_ttft_samples"], s["num_tpot_samples"], s["num_e2e_latency_samples"]) == (5, 5, 5)
    assert s["committed_prefill_tokens"] == 5 * 1024
    assert s["kv_eviction_policy"] == "lru" and s["power_w"] is None and s["power_coverage"] is None


def test_142_keeps_its_key_set():
    rep = _run("1.4.2")
    assert rep.dynamo_version == "1.4.2"
    assert set(rep.summary) == set(SUMMARY_KEYS) | {"dynamo_version"}


def test_the_releases_charge_the_first_pass_differently():
    # one 1024-token prompt alone: 1.6.1's TTFT is P(1024); 1.4.2 adds a decode step (D(1088))
    assert _run("1.6.1")["min_ttft_ms"] == pytest.approx(32.490712, abs=1e-9)
    assert _run("1.4.2")["min_ttft_ms"] == pytest.approx(38.283432, abs=1e-9)


@pytest.mark.parametrize("bad", ["1.5.0", "161", 1.6, ""])
def test_an_unknown_release_is_an_error_naming_the_allowed_ones(bad):
    with pytest.raises(InputError, match=r"dynamo_version .*allowed: '1.6.1', '1.4.2'"):
        _run(bad)


def test_cli_flag(tmp_path, capsys):
    out = tmp_path / "r.json"
    base = ["replay", "--input-tokens", "64", "--output-tokens", "4", "--request-count", "3",
            "--arrival-interval-ms", "10", "--report-json", str(out)]
    assert cli.main(base + ["--dynamo-version", "1.4.2"]) == 0
    assert json.loads(out.read_text())["dynamo_version"] == "1.4.2"
    assert cli.main(base) == 0
    assert json.loads(out.read_text())["dynamo_version"] == "1.6.1"
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:  # argparse's usage error
        cli.main(base + ["--dynamo-version", "1.5"])
    assert exc.value.code == 2 and "'1.6.1', '1.4.2'" in capsys.readouterr().err
