"""A changing fleet of SGLang workers (a scaling schedule, decision 0380), in compiled code.

The worker lifecycle is the vLLM path's (``kernels/fleet.py``: a scale-up starts new workers with
the next ids, ready after ``startup_time``; a scale-down cancels pending startups, then drains the
highest-id active workers; a drained worker is retired and keeps its id). What is SGLang's here:
round robin over the active workers, a worker being idle when it has no pass in flight, and the
worker-seconds, which Dynamo sums at every event over the workers alive.
"""

import numpy as np

from fastsim.kernels.fleet import ACTIVE, DRAINING, NACT, NDRAINING, NLIVE, nth_active_nb, retire_if_idle_nb
from fastsim.kernels.jit import inline, inner

# ``Fleet.ff`` slots this module keeps: the worker-seconds so far and the last event they reach
WS, WS_AT = 2, 3


@inline
def pick_worker_nb(cnt, rr, fl):
    """Dynamo's round robin over the active workers: ``idx = counter % active``, then the
    counter becomes ``idx + 1`` (with a fixed fleet, the fixed-fleet loop's ``counter % W``)."""
    idx = cnt[rr] % fl.fs[NACT]
    cnt[rr] = idx + 1
    return nth_active_nb(fl, idx)


@inline
def add_worker_seconds_nb(fl, now):
    """Add the workers alive since the last event, up to ``now``."""
    fl.ff[WS] += fl.fs[NLIVE] * (now - fl.ff[WS_AT]) / 1000.0
    fl.ff[WS_AT] = now


@inner
def retire_drained_nb(fl, busy, k, done_head, dp):
    """Draining workers with no pass in flight and nothing queued on their ranks are retired
    (tombstoned: the id is never reused). Returns True if any was."""
    if fl.fs[NDRAINING] == 0:
        return False
    changed = False
    for g in range(busy.shape[0]):
        if fl.gstate[g] != DRAINING or busy[g] != np.inf or done_head[g] != -1:
            continue
        if retire_if_idle_nb(fl, g, dp, k.rn, k.wn):
            changed = True
    return changed


@inline
def serving_nb(fl, g):
    """Whether worker ``g`` runs passes (active, or draining its last requests)."""
    return fl.gstate[g] == ACTIVE or fl.gstate[g] == DRAINING
