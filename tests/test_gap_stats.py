"""The pooled inter-token statistics as Dynamo keeps them (issue 26, docs/decisions/0265).

``data/gap_stats/cases.tsv`` lists each case (its ``dynamo.replay`` flags and the releases it was
recorded on); ``<case>.<release>.json`` is Dynamo's report (``record.py`` there reruns them).
Dynamo folds each completed request's gaps, in token order, into a running mean and variance
(Welford's update), so their last bits depend on that order; fastsim folds them in the same
order, and the means and standard deviations of ITL and of the output-token throughput per user
must come out bit for bit. Every other numeric field within 1e-9 relative (wall-clock fields
aside), as everywhere else.
"""

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from numba import njit

from fastsim import cli
from fastsim.kernels import timelines
from fastsim.kernels.timelines import grow_records, new_timelines

DATA = Path(__file__).parent / "data" / "gap_stats"
WALL_FIELDS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}
EXACT = ("mean_itl_ms", "std_itl_ms", "mean_output_token_throughput_per_user",
         "std_output_token_throughput_per_user")
CASES = [(name, release, flags)
         for name, releases, flags in (line.split("\t") for line in (DATA / "cases.tsv").read_text().splitlines()
                                       if line.strip())
         for release in releases.split() if (DATA / f"{name}.{release}.json").exists()]


def _replay(flags, release, tmp_path, capsys, *extra):
    rep = tmp_path / "r.json"
    cwd = os.getcwd()
    os.chdir(DATA)
    try:
        assert cli.main(["replay", *flags.split(), "--dynamo-version", release, "--report-json", str(rep),
                         *extra]) == 0
    finally:
        os.chdir(cwd)
    capsys.readouterr()
    return json.loads(rep.read_text())


@pytest.mark.parametrize("name,release,flags", CASES, ids=[f"{n}-{r}" for n, r, _ in CASES])
def test_gap_statistics_bit_for_bit(name, release, flags, tmp_path, capsys):
    got = _replay(flags, release, tmp_path, capsys)
    want = json.loads((DATA / f"{name}.{release}.json").read_text())
    assert want["completed_requests"] > 0
    assert [(k, got[k]) for k in EXACT] == [(k, want[k]) for k in EXACT]
    misses = [f"{k}: fastsim {got.get(k)!r}, Dynamo {v!r}" for k, v in want.items()
              if k not in WALL_FIELDS and isinstance(v, (int, float)) and not isinstance(v, bool)
              and not got.get(k) == pytest.approx(v, rel=1e-9, abs=1e-12)]
    assert not misses, "\n".join(misses)


@njit
def note_token(tl, r, k, P, t, sbase, generated):
    timelines.note_token(tl, r, k, P, t, sbase, generated)


@njit
def note_tokens_at(tl, r, t, n):
    timelines.note_tokens_at(tl, r, t, n)


@njit
def fold_request(tl, r, completed):
    timelines.fold_request(tl, r, completed, 0.0, 0)


@pytest.mark.parametrize("release", ["1.4.2", "1.6.1"])
def test_split_run_folds_in_the_clusters_order(release, tmp_path, capsys):
    """Two shards of 2 workers each: their completions' gaps, merged by (time, worker), give
    Dynamo's statistics bit for bit."""
    flags = dict((n, f) for n, _, f in CASES)["split_60k_4w"]
    got = _replay(flags, release, tmp_path, capsys, "--threads", "2")
    want = json.loads((DATA / f"split_60k_4w.{release}.json").read_text())
    assert [(k, got[k]) for k in EXACT] == [(k, want[k]) for k in EXACT]


def _welford(values):
    n = mean = m2 = 0.0
    for v in values:
        n += 1.0
        d = v - mean
        mean += d / n
        m2 += d * (v - mean)
    return n, mean, m2


def test_runs_of_passes_and_bursts_fold_in_token_order():
    """A request's tokens as runs of its rank's passes (the ring holds their ends) and a burst of
    three at one time fold into the same running mean and variance as its times one by one;
    completions fold in the order they come."""
    tl = new_timelines(2, 1, 256, 16)
    ends = np.cumsum(np.linspace(5.0, 9.0, 40))
    times = {0: [], 1: []}
    for P, t in enumerate(ends):
        tl.ring[0, P] = t
        tl.ring_hi[0] = P + 1
        if P < 30:  # request 0: every pass up to 29, then three tokens of one step
            note_token(tl, 0, 0, P, t, -1, P + 1)
            times[0].append(t)
        if P % 3 == 0:  # request 1: every third pass
            note_token(tl, 1, 0, P, t, -1, P // 3 + 1)
            times[1].append(t)
    note_tokens_at(tl, 0, 500.0, 3)
    times[0] += [500.0] * 3
    fold_request(tl, 1, True)
    fold_request(tl, 0, True)
    gaps = [b - a for r in (1, 0) for a, b in zip(times[r], times[r][1:])]
    assert tuple(tl.wf[:3]) == _welford(gaps)
    assert tuple(tl.wf[3:]) == _welford([1000.0 / g for g in gaps if g > 0])
    assert tl.st[1] == 16 and tl.head[0] == -1  # every record back on the free list


def test_steady_run_closes_from_its_token_count():
    """A steady member takes a token every pass without being stamped: its run opens at its
    steady base and closes, at its next stamped token, after the tokens it took."""
    tl = grow_records(new_timelines(1, 1, 256, 4), 8)
    for P in range(12):
        tl.ring[0, P] = 10.0 * (P + 1) + P * P * 0.01
        tl.ring_hi[0] = P + 1
    note_token(tl, 0, 0, 0, tl.ring[0, 0], -1, 1)
    note_token(tl, 0, 0, 1, tl.ring[0, 1], 2, 2)  # steady from pass 2 on
    note_token(tl, 0, 0, 9, tl.ring[0, 9], -1, 10)  # explicit again: it took passes 2..8
    fold_request(tl, 0, True)
    gaps = np.diff(tl.ring[0, :10])
    assert tl.wf[0] == 9 and tl.wf[1] == _welford(gaps)[1] and tl.wf[2] == _welford(gaps)[2]
    assert math.isclose(tl.wf[1], float(np.mean(gaps)))
