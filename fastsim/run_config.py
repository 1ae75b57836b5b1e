"""How one simulation runs: the options of ``simulate`` other than the workload and the engine,
validated once (``check_*``) and carried as one frozen :class:`RunConfig` to the builders of the
state (``fastsim/state.py``)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from fastsim.errors import InputError


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """The shape of one simulation's tables and the loop's options.

    * ``worker_rows``: every worker the run can ever create (the initial ones, each scale-up, a
      planner's ``max_workers``), each of ``dp`` ranks;
    * ``single_path``: one worker of one rank, no scaling (Dynamo's single-worker runtime);
    * ``schedule``: validated ``(t_ms, workers)`` steps (:func:`check_schedule`);
    * ``steady_decode``, ``light_ticks``: the loop's exact shortcuts (off only to check them);
    * ``timing_rules``: ``kernels.codes.TIMING_142`` or ``TIMING_161``;
    * ``tick_log``: entries of the loop's tick log (a shard of a split run), 0 for none;
    * ``huge_pages``: the request state in huge pages (False: a shard in a thread maps its own);
    * ``gap_skip``: rows whose inter-token gaps stay out of the statistics (a capped run's
      second pass), None for none;
    * ``readmission_log``, ``kv_events``: first sizes of the readmission log and of each rank's KV
      event feed (0: none); a run that outgrows them starts again with larger ones
      (:func:`dataclasses.replace`);
    * ``exact_gap_stats``: fold the inter-token gaps in Dynamo's order (``gap_statistics="exact"``,
      decision 0265); False: the pooled sums only (``"pooled"``, decision 0286);
    * ``gap_ring``: the width of the ranks' rings of pass ends that the requests' token times
      are read back from (``kernels/timelines.py``), 0: from the longest output; a run that
      outgrows it starts again with a wider one; ``gap_log``: a shard's (``fastsim/shards.py``),
      which logs its completions' gaps for the cluster to fold in its order;
    * ``sharing``: which requests' pools can meet (``state.sharing_groups``; None: every full prompt
      block keeps its key).
    """

    num_workers: int
    worker_rows: int
    dp: int = 1
    replay_concurrency: int | None = None
    max_sim_time_ms: float | None = None
    single_path: bool = False
    schedule: tuple = ()
    planner_interval_ms: float | None = None
    telemetry_interval_ms: float | None = None
    steady_decode: bool = True
    light_ticks: bool = True
    timing_rules: int = 0
    tick_log: int = 0
    huge_pages: bool = True
    gap_skip: np.ndarray | None = None
    readmission_log: int = 0
    kv_events: int = 0
    gap_ring: int = 0
    gap_log: bool = False
    exact_gap_stats: bool = True
    sharing: object = None


GAP_STATISTICS = ("exact", "pooled")


def check_gap_statistics(value) -> bool:
    """True for ``gap_statistics="exact"`` (Dynamo's running update in its order), False for
    ``"pooled"`` (sums: within about 1e-9 of Dynamo's, faster); anything else is an error."""
    if value not in GAP_STATISTICS:
        raise InputError(f"gap_statistics is {value!r}; allowed: 'exact' (Dynamo's inter-token statistics to "
                         "the last bit, the default) or 'pooled' (within about 1e-9 of them, faster)")
    return value == "exact"


def check_schedule(schedule):
    """Validate ``[[t_ms, workers], ...]`` (ascending times, positive counts)."""
    if schedule is None:
        return []
    if isinstance(schedule, str):
        import json

        try:
            schedule = json.loads(schedule)
        except json.JSONDecodeError as exc:
            raise InputError(f"scaling schedule: malformed JSON at char {exc.pos}: {exc.msg}") from None
    out, last = [], -np.inf
    try:
        items = list(schedule)
    except TypeError:
        raise InputError("scaling schedule must be a list of [time_ms, workers] pairs") from None
    for i, item in enumerate(items):
        try:
            t, n = item
        except (TypeError, ValueError):
            raise InputError(f"scaling schedule entry {i} is {item!r}; it must be [time_ms, workers]") from None
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not np.isfinite(t) or t < 0:
            raise InputError(f"scaling schedule entry {i}: time {t!r} must be a finite number >= 0 (ms)")
        if t < last:
            raise InputError(f"scaling schedule entry {i}: times must be ascending ({t} after {last})")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InputError(f"scaling schedule entry {i}: workers {n!r} must be a positive integer")
        out.append((float(t), int(n)))
        last = t
    return out


def check_telemetry(workload, num_workers, interval_ms):
    """The most telemetry rows a run may hold (None without telemetry); refuses an interval whose
    samples over the arrivals alone would exceed that cap."""
    if not interval_ms:
        return None
    from fastsim import memory

    cap = memory.telemetry_row_cap()
    arrivals = workload.session_arrival_ms
    span = float(np.nanmax(arrivals)) if arrivals.shape[0] and not np.isnan(arrivals).all() else 0.0
    rows = num_workers * span / float(interval_ms)
    if rows > cap:
        raise InputError(
            f"telemetry_interval_ms (--telemetry-interval-ms) {interval_ms!r}: sampling {num_workers} "
            f"workers over the {span:.6g} ms of arrivals alone takes at least {rows:.3g} rows "
            f"({rows * memory.TELEMETRY_ROW_BYTES / 2**30:.3g} GB), more than the {cap} rows a "
            "run may hold (a quarter of the available memory); raise the interval"
        )
    return cap


def check_kv_event_lag(lag, router_mode, version):
    """Dynamo 1.6.1's rules for ``kv_event_lag_ms`` (None or 0: no lag); returns the lag."""
    if lag is None:
        return 0.0
    if isinstance(lag, bool) or not isinstance(lag, (int, float, np.integer, np.floating)):
        raise InputError(f"kv_event_lag_ms is {lag!r}; it must be a number of milliseconds")
    lag = float(lag)
    if not math.isfinite(lag) or lag < 0:
        raise InputError(f"kv_event_lag_ms must be finite and non-negative, got {lag:g}")
    if lag > 0 and router_mode != "kv_router":
        raise InputError("kv_event_lag_ms only supports router_mode='kv_router'")
    if lag > 0 and version == "1.4.2":
        raise InputError("kv_event_lag_ms is a Dynamo 1.6.1 option: Dynamo 1.4.2 has no KV event lag "
                         "(use dynamo_version='1.6.1')")
    return lag


def history_kept(dynamo_version):
    """Whether the loop keeps what 1.6.1's per-request routing and admission histories need."""
    from fastsim.dynamo_version import check_version

    return check_version(dynamo_version) == "1.6.1"


def readmission_log_size(workload):
    """First size of the readmission log: the aggregated loop grows it as preemptions come (a
    disaggregated run with more readmissions runs again, sized)."""
    return int(workload.isl.shape[0]) // 64 + 64


def worker_rows(num_workers, schedule, planner, max_workers):
    """Rows of worker state a run allocates: every worker it can ever create."""
    if planner is not None:
        g_cap = int(max_workers or 4 * num_workers)
        if g_cap < num_workers:
            raise InputError(f"max_workers ({max_workers}) is below num_workers ({num_workers})")
        return g_cap
    # every worker ever created gets a row: the initial ones plus each scale-up step
    g_cap, cur = int(num_workers), int(num_workers)
    for _, target in schedule:
        g_cap += max(0, target - cur)
        cur = target
    return g_cap
