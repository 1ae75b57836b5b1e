"""Speculative decoding is a variant of the loop of its own (decision 0285): its draws are a table
that is ``None`` when it is off, and the pass branches on ``is None``, which numba settles while it
compiles. A run without it compiles none of its code; a run with it loads its variant outside the
timed region."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

from fastsim.config import EngineArgs
from fastsim.kernels.rank_state import Speculation, make_ranks
from fastsim.run_config import RunConfig
from fastsim.sim import simulate
from fastsim.state import build_state
from fastsim.workload import synthetic


def test_ranks_carry_speculation_only_when_it_is_on():
    assert make_ranks(2, 16, 100, 64).speculation is None
    spec = make_ranks(2, 16, 100, 64, mtp_rates=[0.5, 0.25], mtp_seeds=[7, 8]).speculation
    assert isinstance(spec, Speculation)
    assert spec.thresholds.shape == (2,) and spec.streams.shape[0] == 2
    on = build_state(synthetic(16, 2, 1, arrival_interval_ms=1.0), EngineArgs(block_size=16, aic_nextn=2), RunConfig(num_workers=1, worker_rows=1))
    off = build_state(synthetic(16, 2, 1, arrival_interval_ms=1.0), EngineArgs(block_size=16), RunConfig(num_workers=1, worker_rows=1))
    assert isinstance(on.ranks.speculation, Speculation) and off.ranks.speculation is None


# Compiles the pass alone, for a run without speculative decoding or a host tier, in an empty cache, and lists
# the kernels numba compiled on the way.
_PROBE = textwrap.dedent('''
    import json, numba
    from numba.core import event
    from fastsim.config import EngineArgs
    from fastsim.kernels.scheduler import rank_pass_nb
    from fastsim.run_config import RunConfig
    from fastsim.state import build_state
    from fastsim.workload import synthetic

    st = build_state(synthetic(16, 2, 1, arrival_interval_ms=1.0), EngineArgs(block_size=16), RunConfig(num_workers=1, worker_rows=1))
    p, perf, pool, rq, rk, ss, cl, gaps, fl, pa = st.tables()
    args = (p, perf, pool, rq, rk, 0, 0.0, pa, cl.pend_head, cl.pend_tail, 0, 0.0, rk.speculation, None)
    names = []

    class Seen(event.Listener):
        def on_start(self, ev):
            names.append(ev.data["dispatcher"].py_func.__name__)

        def on_end(self, ev):
            pass

    with event.install_listener("numba:compile", Seen()):
        rank_pass_nb.compile(tuple(numba.typeof(a) for a in args))
    print(json.dumps(names))
''')


def test_a_pass_without_speculation_compiles_none_of_its_code(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    names = json.loads(done.stdout.strip().splitlines()[-1])
    assert "rank_pass_nb" in names and "finish_nb" in names
    assert "emit_speculative_nb" not in names and "sample_burst_nb" not in names
    assert "offer_stores_nb" not in names and "compute_start_nb" not in names  # (the host tier's: decision 0352)


def test_speculative_runs_match_in_one_process_and_across_variants():
    # the variant is loaded outside the timed region, and both variants run side by side
    w = synthetic(64, 16, 6, arrival_interval_ms=2.0)
    on = simulate(w, EngineArgs(block_size=16, aic_nextn=2, aic_nextn_accept_rates="0.6,0.3"))
    off = simulate(w, EngineArgs(block_size=16))
    again = simulate(w, EngineArgs(block_size=16, aic_nextn=2, aic_nextn_accept_rates="0.6,0.3"))
    assert on.summary["mean_itl_ms"] == again.summary["mean_itl_ms"]
    assert on.summary["total_output_tokens"] == off.summary["total_output_tokens"] == 6 * 16
    assert not np.isclose(on.summary["mean_itl_ms"], off.summary["mean_itl_ms"])
