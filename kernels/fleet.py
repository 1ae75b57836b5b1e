"""Worker lifecycle (autoscaling) and per-worker telemetry, in compiled code.

Dynamo 1.4.2's ``EngineComponent`` scaling rules (notes 7 "Scaling", 10; conformance C13, C14):

* worker ids are stable and never reused; a new worker takes the next id and the next ``dp`` rank
  ids; removed workers keep their rows (tombstones);
* ``apply_target(n)``: with ``effective = active + starting``, add ``n - effective`` workers
  (starting for ``startup_time`` if set, else active at once), or remove ``effective - n``:
  cancel pending startups first (highest ids, tombstoned at once), then mark the highest-id active
  workers as draining (no new requests; they finish their work and are then retired);
* a worker that finished starting becomes active (a cancelled worker's "ready" is ignored);
* worker-seconds integrate the live workers (active + starting + draining).

Telemetry samples every live worker at fixed virtual-time ticks: running and waiting requests,
KV blocks in use and cached, passes run so far.
"""

from typing import NamedTuple

import numpy as np

from fastsim.kernels.jit import inline, inner, kernel_noalloc
from fastsim.kernels.kvpool import NACTIVE, NINACTIVE

UNUSED, STARTING, ACTIVE, DRAINING, RETIRED, CANCELLED = 0, 1, 2, 3, 4, 5
# fs slots
NCREATED, NACT, NLIVE, NSTARTING, NDRAINING, SCHEDPOS, TELN, TARGET, STARTED = 0, 1, 2, 3, 4, 5, 6, 7, 8
# ff slots
NEXTTEL, NEXTPLAN = 0, 1


class Fleet(NamedTuple):
    """Worker states, scaling schedule and telemetry buffers."""

    startup_ms: float  # <= 0: workers start at once
    planner_ms: float  # <= 0: no planner ticks
    tel_ms: float  # <= 0: no telemetry
    gstate: np.ndarray  # int8[G]
    ready_at: np.ndarray  # float64[G]
    passes: np.ndarray  # int64[G]
    hold: np.ndarray  # int64[G]: what keeps a draining worker alive besides its queues
    #                   (disaggregation: pending destinations on a decode worker, held sources on
    #                   a prefill worker; always 0 for aggregated workers)
    sched_t: np.ndarray  # float64[K]: scaling schedule times (ms), ascending
    sched_n: np.ndarray  # int64[K]: target worker counts
    tel_t: np.ndarray  # float64[C]
    tel_w: np.ndarray  # int32[C]
    tel_run: np.ndarray  # int32[C]
    tel_wait: np.ndarray  # int32[C]
    tel_kv: np.ndarray  # int32[C]
    tel_cached: np.ndarray  # int32[C]
    tel_passes: np.ndarray  # int64[C]
    fs: np.ndarray  # int64[10]
    ff: np.ndarray  # float64[4]


def make_fleet(rows, active, startup_s=None, planner_ms=None, telemetry_ms=None, schedule=(),
               telemetry_rows=0):
    """The fleet of a run with room for ``rows`` workers, the first ``active`` of them serving;
    ``startup_s``: a new worker's start-up time; ``schedule``: validated ``(t_ms, workers)``
    steps; ``telemetry_rows``: first room for telemetry samples."""
    gstate = np.zeros(rows, dtype=np.int8)
    gstate[:active] = ACTIVE
    fs = np.zeros(10, dtype=np.int64)
    fs[NCREATED] = fs[NACT] = fs[NLIVE] = active
    fs[TARGET] = -1  # no pending planner target
    c = telemetry_rows
    return Fleet(
        startup_ms=float(startup_s) * 1000.0 if startup_s else 0.0,
        planner_ms=float(planner_ms or 0.0),
        tel_ms=float(telemetry_ms or 0.0),
        gstate=gstate,
        ready_at=np.full(rows, np.inf),
        passes=np.zeros(rows, dtype=np.int64),
        hold=np.zeros(rows, dtype=np.int64),
        sched_t=np.array([t for t, _ in schedule], dtype=np.float64),
        sched_n=np.array([n for _, n in schedule], dtype=np.int64),
        tel_t=np.zeros(c),
        tel_w=np.zeros(c, dtype=np.int32),
        tel_run=np.zeros(c, dtype=np.int32),
        tel_wait=np.zeros(c, dtype=np.int32),
        tel_kv=np.zeros(c, dtype=np.int32),
        tel_cached=np.zeros(c, dtype=np.int32),
        tel_passes=np.zeros(c, dtype=np.int64),
        fs=fs,
        ff=np.array([0.0, float(planner_ms or 0.0), 0.0, 0.0]),
    )


@kernel_noalloc
def nth_active_nb(fl, idx):
    """Id of the ``idx``-th active worker in ascending id order."""
    if fl.fs[NCREATED] == fl.fs[NACT]:
        return idx  # nothing was ever added late or removed: ids are dense
    c = 0
    for g in range(fl.fs[NCREATED]):
        if fl.gstate[g] == ACTIVE:
            if c == idx:
                return g
            c += 1
    return -1


@kernel_noalloc
def apply_target_nb(fl, now, target):
    """Scale toward ``target`` workers (Dynamo's ``apply_target_count``). Returns True if changed."""
    effective = fl.fs[NACT] + fl.fs[NSTARTING]
    if target > effective:
        for _ in range(target - effective):
            g = fl.fs[NCREATED]
            if g >= fl.gstate.shape[0]:
                return True  # capacity exhausted: the Python layer sized it from the schedule
            fl.fs[NCREATED] += 1
            fl.fs[NLIVE] += 1
            if fl.startup_ms > 0.0:
                fl.gstate[g] = STARTING
                fl.ready_at[g] = now + fl.startup_ms
                fl.fs[NSTARTING] += 1
            else:
                fl.gstate[g] = ACTIVE
                fl.fs[NACT] += 1
        return True
    if target >= effective:
        return False
    excess = effective - target
    for g in range(fl.fs[NCREATED] - 1, -1, -1):
        if excess == 0:
            break
        if fl.gstate[g] == STARTING:
            fl.gstate[g] = CANCELLED
            fl.fs[NSTARTING] -= 1
            fl.fs[NLIVE] -= 1
            excess -= 1
    for g in range(fl.fs[NCREATED] - 1, -1, -1):
        if excess == 0:
            break
        if fl.gstate[g] == ACTIVE:
            fl.gstate[g] = DRAINING
            fl.fs[NACT] -= 1
            fl.fs[NDRAINING] += 1
            excess -= 1
    return True


@inline
def at_rest_nb(fl):
    """No fleet event can be due: no worker starting or draining, no scaling step left, no
    planner (the event loops' light paths run only then)."""
    return (fl.fs[NSTARTING] == 0 and fl.fs[NDRAINING] == 0
            and fl.fs[SCHEDPOS] >= fl.sched_t.shape[0] and fl.planner_ms == 0.0)


@kernel_noalloc
def mark_ready_nb(fl, now):
    """Workers whose startup has elapsed become active. Returns True if any did."""
    if fl.fs[NSTARTING] == 0:
        return False
    changed = False
    for g in range(fl.fs[NCREATED]):
        if fl.gstate[g] == STARTING and fl.ready_at[g] <= now:
            fl.gstate[g] = ACTIVE
            fl.fs[NSTARTING] -= 1
            fl.fs[NACT] += 1
            changed = True
    return changed


@inline
def retire_if_idle_nb(fl, g, dp, n_run, n_wait):
    """Retire (tombstone) draining worker ``g`` if none of its ``dp`` ranks has a request running
    or waiting; True if it was."""
    for k in range(g * dp, (g + 1) * dp):
        if n_run[k] + n_wait[k] > 0:
            return False
    fl.gstate[g] = RETIRED
    fl.fs[NDRAINING] -= 1
    fl.fs[NLIVE] -= 1
    return True


@kernel_noalloc
def retire_drained_nb(fl, busy, n_run, n_wait, dp, g0):
    """Draining workers with no work and nothing held are retired (tombstoned); ``g0`` is the
    pool's first group in ``busy``. Returns True if any were."""
    if fl.fs[NDRAINING] == 0:
        return False
    changed = False
    for g in range(fl.fs[NCREATED]):
        if fl.gstate[g] != DRAINING or busy[g0 + g] or fl.hold[g] != 0:
            continue
        if retire_if_idle_nb(fl, g, dp, n_run, n_wait):
            changed = True
    return changed


@inner
def apply_schedule_nb(fl, now):
    """Apply the scaling-schedule steps due at or before ``now``; True if any was."""
    applied = False
    while fl.fs[SCHEDPOS] < fl.sched_t.shape[0] and fl.sched_t[fl.fs[SCHEDPOS]] <= now:
        apply_target_nb(fl, now, fl.sched_n[fl.fs[SCHEDPOS]])
        fl.fs[SCHEDPOS] += 1
        applied = True
    return applied


@kernel_noalloc
def next_fleet_event_nb(fl):
    """Earliest pending startup completion, scheduled scaling step or planner tick (inf if none)."""
    t = np.inf
    if fl.fs[NSTARTING] > 0:
        for g in range(fl.fs[NCREATED]):
            if fl.gstate[g] == STARTING and fl.ready_at[g] < t:
                t = fl.ready_at[g]
    pos = fl.fs[SCHEDPOS]
    if pos < fl.sched_t.shape[0] and fl.sched_t[pos] < t:
        t = fl.sched_t[pos]
    if fl.planner_ms > 0.0 and fl.ff[NEXTPLAN] < t:
        t = fl.ff[NEXTPLAN]
    return t


@inline
def write_row_nb(fl, n, t, g, run, wait, kv, cached):
    """Telemetry row ``n``: worker ``g`` at time ``t`` (requests running and waiting, KV blocks in
    use and cached, passes so far)."""
    fl.tel_t[n] = t
    fl.tel_w[n] = g
    fl.tel_run[n] = run
    fl.tel_wait[n] = wait
    fl.tel_kv[n] = kv
    fl.tel_cached[n] = cached
    fl.tel_passes[n] = fl.passes[g]


@inner
def sample_nb(fl, pool, n_run, n_wait, dp, t):
    """Record one telemetry row per live worker at time ``t``; False if the buffers are full."""
    n = fl.fs[TELN]
    if n + fl.fs[NLIVE] > fl.tel_t.shape[0]:
        return False
    for g in range(fl.fs[NCREATED]):
        st = fl.gstate[g]
        if st != ACTIVE and st != DRAINING and st != STARTING:
            continue
        run = 0
        wait = 0
        kv = 0
        cached = 0
        for k in range(g * dp, (g + 1) * dp):
            run += n_run[k]
            wait += n_wait[k]
            kv += pool.meta[k, NACTIVE]
            cached += pool.meta[k, NINACTIVE]
        write_row_nb(fl, n, t, g, run, wait, kv, cached)
        n += 1
    fl.fs[TELN] = n
    return True
