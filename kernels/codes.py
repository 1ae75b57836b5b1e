"""The integer codes that the kernels and the Python side share: one place for each meaning.

Two request codes exist and must not be confused:

* a request's **status** while it is simulated (``Reqs.status``, int8): where it is in a
  worker's queues;
* its **outcome** in the results (the report's ``status`` column): what a user sees at the end.
  ``outcome_of`` turns the first into the second.

numba reads module-level integers as compile-time constants, so naming a code costs nothing.
"""

from __future__ import annotations

import numpy as np

# ---- request status inside the simulation ------------------------------------------------------
# HANDED: a disaggregated request whose KV was transferred to this decode worker, waiting to be
# activated; FAILED: its prompt can never fit the decode worker's KV
NOT_ARRIVED, WAITING, RUNNING, PREEMPTED, FINISHING, COMPLETED, REJECTED, HANDED, FAILED = range(9)

# ---- request outcome in the results (the report's ``status`` column) --------------------------
OUTCOME_NOT_ARRIVED, OUTCOME_IN_FLIGHT, OUTCOME_COMPLETED, OUTCOME_REJECTED, OUTCOME_FAILED = range(5)

# ---- what ended a request's stay on a worker (its entry on the pending list) ------------------
# HANDOFF: a prefill copy finished; its KV stays held until the transfer
TERM_COMPLETED, TERM_REJECTED, TERM_HANDOFF = 1, 2, 3

# ---- a scheduling attempt's result -------------------------------------------------------------
SCHEDULED, BLOCKED, SELF_PREEMPTED = 0, 1, 2

# ---- worker stages ---------------------------------------------------------------------------------
AGGREGATED, PREFILL, DECODE = 0, 1, 2

# ---- timing rules of a pass (``Params.timing_rules``) ------------------------------------------
# Dynamo 1.4.2's, or 1.6.1's (decode time only for a pass that holds a request past its prompt,
# from the logical lengths of those requests)
TIMING_142, TIMING_161 = 0, 1

# ---- router modes ----------------------------------------------------------------------------------
ROUND_ROBIN, KV_ROUTER = 0, 1

# ---- why the event loop returned to Python -----------------------------------------------------
# OK: the run ended; the others ask Python to grow a table, call the planner, or report a stop
# (ADMIT_OOM: the SGLang engine's refusal, kernels/sglang.py; HOST_TIER_STOP: the
# host KV tier met what fastsim does not simulate, kernels/host_offload.py; RECORDS_FULL: grow the
# token-time records, kernels/timelines.py; INTERRUPTED: Ctrl-C was pressed, fastsim/interrupt.py;
# TABLE_GROW: the kv_router's table of active blocks is a quarter full, to be grown in place
# before the run goes on, where TABLE_FULL means it filled up within a step and the run starts again)
OK, DEAD_END, SIM_CAP, TABLE_FULL, TELEMETRY_FULL, PLANNER_TICK, TICKS_FULL, LOG_FULL, ADMIT_OOM, \
    HOST_TIER_STOP, RECORDS_FULL, INTERRUPTED, TABLE_GROW = range(13)


def outcome_of(status: np.ndarray, failed: bool = False) -> np.ndarray:
    """int8 outcomes of simulation statuses: completed, rejected, never arrived, else in flight
    (``failed``: a disaggregated run, whose FAILED requests are reported as such)."""
    out = np.full(status.shape, OUTCOME_IN_FLIGHT, dtype=np.int8)
    out[status == COMPLETED] = OUTCOME_COMPLETED
    out[status == REJECTED] = OUTCOME_REJECTED
    out[status == NOT_ARRIVED] = OUTCOME_NOT_ARRIVED
    if failed:
        out[status == FAILED] = OUTCOME_FAILED
    return out
