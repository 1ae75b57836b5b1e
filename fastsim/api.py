"""Python API with the keyword names of Dynamo 1.4.2's ``dynamo.replay`` (``api.py``).

``run_trace_replay`` and ``run_synthetic_trace_replay`` validate their arguments as Dynamo does,
load a :class:`~fastsim.workload.Workload`, run ``fastsim.sim.simulate`` and return a
:class:`fastsim.report.Report` (Dynamo returns the report dict; ``Report.summary`` is that dict and
``report[key]`` reads it). Options fastsim does not model yet raise
:class:`~fastsim.errors.NotSupportedError`; none is silently ignored.
"""

from __future__ import annotations

import difflib
import math
import numbers
import os
from typing import Any, Optional

from fastsim import lost
from fastsim.config import EngineArgs
from fastsim.dynamo_version import check_version
from fastsim.errors import InputError, NotSupportedError
from fastsim.run_config import check_gap_statistics
from fastsim.output_paths import check_output_file, write_error
from fastsim.workload import DEFAULT_TRACE_BLOCK_SIZE, Workload, load_trace, synthetic

__all__ = ["run_trace_replay", "run_synthetic_trace_replay", "simulate_workload"]

_COMMON_KEYWORDS = (
    "extra_engine_args", "prefill_engine_args", "decode_engine_args", "router_config",
    "aic_perf_config", "num_workers", "num_prefill_workers", "num_decode_workers",
    "replay_concurrency", "replay_mode", "router_mode", "arrival_speedup_ratio", "model_name",
    "sla_ttft_ms", "sla_itl_ms", "sla_e2e_ms", "planner_config", "benchmark_granularity",
    "report_jsonl_path", "max_sim_time_ms", "dynamo_version", "kv_event_lag_ms",
)
_TRACE_KEYWORDS = _COMMON_KEYWORDS + (
    "trace_block_size", "trace_format", "trace_shared_prefix_ratio", "trace_num_prefix_groups",
    "agentic_lanes", "execution_model", "weka_nested_timestamp_basis",
)
_SYNTHETIC_KEYWORDS = _COMMON_KEYWORDS + (
    "request_rate", "arrival_interval_ms", "arrival_seed", "turns_per_session",
    "shared_prefix_ratio", "num_prefix_groups", "inter_turn_delay_ms",
)


def _reject_unknown(func: str, unsupported: dict, valid) -> None:
    if not unsupported:
        return
    name = sorted(unsupported)[0]
    close = difflib.get_close_matches(name, valid, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    raise InputError(f"{func}() got an unexpected keyword argument '{name}'{hint}")


def _opt_nonneg(value, name) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
        raise InputError(f"{name} must be a finite, non-negative value, got {value!r}")
    return float(value)


def _positive_int(value, message) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise InputError(f"{message}, got {value!r}")
    return int(value)


# Why planner-in-the-loop replay is refused (docs/decisions/0261): there is no offline behaviour of
# either release to reproduce.
PLANNER_NOT_RUN = (
    "neither Dynamo release runs planner-in-the-loop replay as it is installed: 1.4.2's replay stops "
    "at 'import sklearn' (scikit-learn is not a dependency of ai-dynamo 1.4.2) and 1.6.1's at "
    "'import aisimulate' (not a dependency of ai-dynamo 1.6.1), so there is no result to reproduce; "
    "script the worker counts with a scaling schedule instead"
)


def _common(
    *, extra_engine_args, prefill_engine_args, decode_engine_args, router_config, aic_perf_config,
    num_workers, num_prefill_workers, num_decode_workers, replay_concurrency, replay_mode,
    router_mode, arrival_speedup_ratio, model_name, sla_ttft_ms, sla_itl_ms, sla_e2e_ms,
    planner_config, benchmark_granularity, max_sim_time_ms, dynamo_version,
) -> dict:
    """Validate the options shared by both entry points; return the simulate() arguments."""
    check_version(dynamo_version)
    if replay_mode not in ("offline", "online"):
        raise InputError(f"replay_mode must be either 'offline' or 'online', got {replay_mode!r}")
    if replay_mode == "online":
        raise NotSupportedError("replay_mode 'online' is not supported yet by fastsim (use 'offline')")
    if router_mode not in ("round_robin", "kv_router"):
        raise InputError(f"router_mode must be either 'round_robin' or 'kv_router', got {router_mode!r}")
    if planner_config is not None:
        raise NotSupportedError(f"planner_config is not supported by fastsim: {PLANNER_NOT_RUN}")
    if benchmark_granularity != 8:
        raise InputError("benchmark_granularity only applies with planner_config, which fastsim does not support yet")
    disagg = prefill_engine_args is not None or decode_engine_args is not None
    if disagg and (prefill_engine_args is None or decode_engine_args is None):
        missing = "decode_engine_args" if decode_engine_args is None else "prefill_engine_args"
        raise InputError(f"disaggregated replay needs both prefill_engine_args and decode_engine_args ({missing} is missing)")
    from fastsim.router_config import RouterConfig

    router = RouterConfig.coerce(router_config, source="router_config")
    if aic_perf_config is not None:
        raise NotSupportedError("aic_perf_config (AIConfigurator timing) is not supported yet by fastsim")
    if model_name is not None:
        raise NotSupportedError("model_name (router policy profiles) is not supported yet by fastsim")
    workers = _positive_int(num_workers, "trace replay requires num_workers >= 1")
    if not disagg and (num_prefill_workers != 1 or num_decode_workers != 1):
        raise InputError(
            "num_prefill_workers and num_decode_workers are only used for disagg replay; "
            "use num_workers for aggregated replay"
        )
    if replay_concurrency is not None:
        replay_concurrency = _positive_int(replay_concurrency, "replay_concurrency must be at least 1")
        if replay_concurrency > 2**62:
            raise InputError(f"replay_concurrency must be at most 2^62, got {replay_concurrency}")
    ratio = arrival_speedup_ratio
    if isinstance(ratio, bool) or not isinstance(ratio, numbers.Real) or not math.isfinite(ratio) or ratio <= 0:
        raise InputError(f"arrival_speedup_ratio must be a finite positive number, got {ratio!r}")
    sla = (
        _opt_nonneg(sla_ttft_ms, "sla_ttft_ms"),
        _opt_nonneg(sla_itl_ms, "sla_itl_ms"),
        _opt_nonneg(sla_e2e_ms, "sla_e2e_ms"),
    )
    max_sim = _opt_nonneg(max_sim_time_ms, "max_sim_time_ms")
    from fastsim.kv_tiers import check_flat_tiers

    engine = EngineArgs.coerce(extra_engine_args, source="extra_engine_args")
    engine = check_flat_tiers(engine, check_version(dynamo_version), "extra_engine_args")
    if disagg:
        pools = dict(
            prefill=EngineArgs.coerce(prefill_engine_args, source="prefill_engine_args"),
            decode=EngineArgs.coerce(decode_engine_args, source="decode_engine_args"),
            num_prefill_workers=_positive_int(num_prefill_workers, "num_prefill_workers must be at least 1"),
            num_decode_workers=_positive_int(num_decode_workers, "num_decode_workers must be at least 1"),
        )
        for pool in ("prefill", "decode"):
            pools[pool] = check_flat_tiers(pools[pool], check_version(dynamo_version), f"{pool}_engine_args")
            if pools[pool].host_offload is not None:
                from fastsim.kv_tiers import check_host_tier_run

                check_host_tier_run(pools[pool], router_mode=router_mode, disaggregated=True)
        return dict(
            engine=pools["prefill"], num_workers=workers, router_mode=router_mode,
            replay_concurrency=replay_concurrency, max_sim_time_ms=max_sim, sla=sla,
            arrival_speedup_ratio=float(ratio), router_config=router, disagg=pools,
        )
    if engine.worker_type != "aggregated":
        raise InputError(
            f"extra_engine_args: trace replay only supports aggregated workers, got worker_type "
            f"'{engine.worker_type}' (a disaggregated replay takes prefill_engine_args and decode_engine_args)"
        )
    return dict(
        engine=engine, num_workers=workers, router_mode=router_mode,
        replay_concurrency=replay_concurrency, max_sim_time_ms=max_sim, sla=sla,
        arrival_speedup_ratio=float(ratio), router_config=router, disagg=None,
    )


def _write_jsonl(report, path):
    try:
        report.to_jsonl(os.fspath(path))
    except OSError as exc:
        raise write_error("report_jsonl_path", path, exc) from None


def _no_disagg_telemetry(telemetry_interval_ms):
    if telemetry_interval_ms is not None:
        raise NotSupportedError("telemetry_interval_ms (--telemetry-interval-ms, --report-workers): "
                                "per-worker telemetry of a disaggregated replay is not supported yet")


def _run_disagg(workload, opts, report_jsonl_path, seed, scaling_schedule=None, dynamo_version=None,
                gap_statistics="exact", kv_event_lag_ms=None):
    from fastsim.sim_disagg import simulate_disagg  # lazy: numba loads only when a simulation runs

    d = opts["disagg"]
    report = simulate_disagg(
        workload, d["prefill"], d["decode"], num_prefill_workers=d["num_prefill_workers"],
        num_decode_workers=d["num_decode_workers"], router_mode=opts["router_mode"],
        router_config=opts["router_config"], replay_concurrency=opts["replay_concurrency"],
        max_sim_time_ms=opts["max_sim_time_ms"], sla=opts["sla"], seed=seed,
        scaling_schedule=scaling_schedule, dynamo_version=dynamo_version, gap_statistics=gap_statistics,
        kv_event_lag_ms=kv_event_lag_ms,
    )
    report.lost = lost.account(report, workload, [(" (prefill pool)", d["prefill"]),
                                                  (" (decode pool)", d["decode"])],
                               opts["max_sim_time_ms"], decode_engine=d["decode"])
    lost.warn(report.lost)
    if report_jsonl_path is not None:
        _write_jsonl(report, report_jsonl_path)
    return report


def _cluster_kw(scaling_schedule, planner, planner_interval_ms, max_workers, telemetry_interval_ms,
                threads=None, gap_statistics="exact"):
    return dict(scaling_schedule=scaling_schedule, planner=planner,
                planner_interval_ms=planner_interval_ms, max_workers=max_workers,
                telemetry_interval_ms=telemetry_interval_ms, threads=threads, gap_statistics=gap_statistics)


def simulate_workload(workload: Workload, engine_args=None, *, num_workers: int = 1,
                      router_mode: str = "round_robin", replay_concurrency: Optional[int] = None,
                      max_sim_time_ms: Optional[float] = None, sla=(None, None, None),
                      report_jsonl_path=None, router_config=None, seed: int = 0,
                      scaling_schedule=None, planner=None, planner_interval_ms=None,
                      max_workers=None, telemetry_interval_ms=None, threads=None,
                      dynamo_version=None, debug=None, kv_event_lag_ms=None, gap_statistics="exact"):
    """Simulate an already-loaded :class:`Workload` (for sweeps that reuse one workload).

    ``engine_args`` is anything :meth:`EngineArgs.coerce` accepts. Writes ``report_jsonl_path`` if
    given and returns the :class:`fastsim.report.Report`. ``threads``: see
    :func:`fastsim.sim.simulate` (the same results with any number). ``dynamo_version``: the
    release reproduced, ``"1.6.1"`` or ``"1.4.2"``. ``gap_statistics``: ``"exact"`` (Dynamo's ITL and
    per-user throughput statistics to the last bit) or ``"pooled"`` (within about 1e-9, faster on
    token-heavy runs; the SGLang engine's are always exact).
    """
    from fastsim.sim import simulate  # lazy: numba loads only when a simulation runs

    engine = EngineArgs.coerce(engine_args, source="engine_args")
    if not isinstance(workload, Workload):
        raise InputError(f"workload must be a fastsim.workload.Workload, got {type(workload).__name__}")
    workload.validate()
    from fastsim.router_config import RouterConfig

    report = simulate(
        workload, engine, num_workers=num_workers, router_mode=router_mode,
        replay_concurrency=replay_concurrency, max_sim_time_ms=max_sim_time_ms, sla=tuple(sla),
        router_config=RouterConfig.coerce(router_config), seed=seed,
        scaling_schedule=scaling_schedule, planner=planner, planner_interval_ms=planner_interval_ms,
        max_workers=max_workers, telemetry_interval_ms=telemetry_interval_ms, threads=threads,
        dynamo_version=dynamo_version,
        debug=debug,
        kv_event_lag_ms=kv_event_lag_ms,
        gap_statistics=gap_statistics,
    )
    report.lost = lost.account(report, workload, [("", engine)], max_sim_time_ms)
    lost.warn(report.lost)
    if report_jsonl_path is not None:
        _write_jsonl(report, report_jsonl_path)
    return report


def run_trace_replay(
    trace_files,
    *,
    extra_engine_args=None,
    prefill_engine_args=None,
    decode_engine_args=None,
    router_config=None,
    aic_perf_config=None,
    num_workers: int = 1,
    num_prefill_workers: int = 1,
    num_decode_workers: int = 1,
    replay_concurrency: Optional[int] = None,
    replay_mode: str = "offline",
    router_mode: str = "round_robin",
    arrival_speedup_ratio: float = 1.0,
    trace_block_size: Optional[int] = None,
    trace_format: str = "mooncake",
    trace_shared_prefix_ratio: float = 0.0,
    trace_num_prefix_groups: int = 0,
    report_jsonl_path=None,
    max_sim_time_ms: Optional[float] = None,
    model_name: Optional[str] = None,
    sla_ttft_ms: Optional[float] = None,
    sla_itl_ms: Optional[float] = None,
    sla_e2e_ms: Optional[float] = None,
    planner_config=None,
    benchmark_granularity: int = 8,
    seed: int = 0,
    scaling_schedule=None,
    planner=None,
    planner_interval_ms: Optional[float] = None,
    max_workers: Optional[int] = None,
    telemetry_interval_ms: Optional[float] = None,
    threads: Optional[int] = None,
    dynamo_version: str = "1.6.1",
    debug: Optional[bool] = None,
    agentic_lanes: Optional[int] = None,
    execution_model: Optional[str] = None,
    weka_nested_timestamp_basis: Optional[str] = None,
    kv_event_lag_ms: Optional[float] = None,
    gap_statistics: str = "exact",
    **unsupported: Any,
):
    """Replay a trace file offline (Dynamo's ``run_trace_replay``); returns a ``Report``.

    ``trace_files`` is one path or a list holding exactly one path (Dynamo's rule for every format
    but ``dynamo``). ``trace_format`` ``"mooncake"`` (a ``.csv`` path is read as Azure CSV) or
    ``"azure"``; ``trace_block_size`` None means 512. ``extra_engine_args`` is anything
    :meth:`EngineArgs.coerce` accepts (EngineArgs, dict, JSON text, None). With
    ``replay_concurrency`` the replay is closed loop (first-turn timestamps ignored).
    ``sla_*_ms`` add the goodput figures; ``max_sim_time_ms`` stops the clock early;
    ``report_jsonl_path`` writes one JSON object per request.

    ``router_mode="kv_router"`` routes by KV overlap and load (``router_config``: Dynamo's
    ``KvRouterConfig`` fields); its exact-cost ties, random in Dynamo, are broken by a generator
    seeded with ``seed`` (a fastsim extension), so a seed gives bit-identical results.

    fastsim extensions for clusters that change over time: ``scaling_schedule``
    (``[[t_ms, workers], ...]``, new workers start in ``startup_time`` seconds of the engine args),
    ``planner`` (a callable given a :class:`fastsim.sim.PlannerState` every ``planner_interval_ms``,
    returning a target worker count or None; at most ``max_workers``), and
    ``telemetry_interval_ms`` (per-worker samples in ``Report.workers``). ``threads``: how many
    threads a round-robin replay may run its workers' shards in (``fastsim.sim.simulate``; the
    same results with any number; default ``FASTSIM_THREADS``, else 1). ``debug=True`` (default: the ``FASTSIM_DEBUG`` environment
    variable) checks the simulator's invariants on the final state (aggregated replays).

    ``dynamo_version``: the Dynamo release reproduced, ``"1.6.1"`` (default) or ``"1.4.2"``.

    Disaggregated replay: ``prefill_engine_args`` (``worker_type: prefill``) and
    ``decode_engine_args`` (``worker_type: decode``) together, with ``num_prefill_workers`` and
    ``num_decode_workers``; the KV transfer between the pools is modelled.

    Not supported yet (NotSupportedError): ``replay_mode="online"``, ``aic_perf_config``,
    ``planner_config``, ``model_name``, the agentic/delta/dynamo trace formats and their
    ``trace_*_prefix_*`` options. Unknown keywords raise InputError (naming the closest valid one).
    """
    _reject_unknown("run_trace_replay", unsupported, _TRACE_KEYWORDS)
    if report_jsonl_path is not None:
        check_output_file(report_jsonl_path, "report_jsonl_path")
    if isinstance(trace_files, (str, bytes, os.PathLike)):
        files = [os.fspath(trace_files)]
    else:
        try:
            files = [os.fspath(f) for f in trace_files]
        except TypeError:
            raise InputError(f"trace_files must be a path or a list of paths, got {trace_files!r}") from None
    opts = _common(
        extra_engine_args=extra_engine_args, prefill_engine_args=prefill_engine_args,
        decode_engine_args=decode_engine_args, router_config=router_config,
        aic_perf_config=aic_perf_config, num_workers=num_workers,
        num_prefill_workers=num_prefill_workers, num_decode_workers=num_decode_workers,
        replay_concurrency=replay_concurrency, replay_mode=replay_mode, router_mode=router_mode,
        arrival_speedup_ratio=arrival_speedup_ratio, model_name=model_name,
        sla_ttft_ms=sla_ttft_ms, sla_itl_ms=sla_itl_ms, sla_e2e_ms=sla_e2e_ms,
        planner_config=planner_config, benchmark_granularity=benchmark_granularity,
        max_sim_time_ms=max_sim_time_ms, dynamo_version=dynamo_version,
    )
    check_gap_statistics(gap_statistics)
    if not files:
        raise InputError("trace replay requires at least one trace file")
    if trace_format != "dynamo" and len(files) != 1:
        raise InputError(f"trace_format={trace_format!r} requires exactly one trace file, got {len(files)}")
    if (trace_shared_prefix_ratio != 0.0 or trace_num_prefix_groups != 0) and trace_format != "applied_compute_agentic":
        raise NotSupportedError(
            "trace_shared_prefix_ratio / trace_num_prefix_groups apply to trace_format='applied_compute_agentic' only"
        )
    from fastsim.traces import agentic_run

    execution_model = agentic_run.check_options(trace_format, agentic_lanes, execution_model,
                                                weka_nested_timestamp_basis)
    workload = load_trace(
        files[0] if trace_format != "dynamo" else files,
        trace_format=trace_format,
        trace_block_size=DEFAULT_TRACE_BLOCK_SIZE if trace_block_size is None else trace_block_size,
        # Dynamo (1.4.2 and 1.6.1) leaves a closed loop's inter-turn delays as recorded: the speed-up
        # only rescales trace arrival times (checked on both releases, docs/decisions/0302)
        arrival_speedup_ratio=1.0 if opts["replay_concurrency"] is not None else opts["arrival_speedup_ratio"],
        concurrency_mode=opts["replay_concurrency"] is not None,
        dynamo_version=dynamo_version,
        weka_nested_timestamp_basis=weka_nested_timestamp_basis,
        shared_prefix_ratio=trace_shared_prefix_ratio,
        num_prefix_groups=trace_num_prefix_groups,
    )
    agentic = workload.graph is not None or trace_format in agentic_run.GRAPH_FORMATS
    if agentic:
        return agentic_run.run(workload, opts, trace_format, agentic_lanes, execution_model, report_jsonl_path,
                               seed=seed, debug=debug, dynamo_version=dynamo_version, kv_event_lag_ms=kv_event_lag_ms,
                               cluster_kw=_cluster_kw(scaling_schedule, planner, planner_interval_ms, max_workers,
                                                      telemetry_interval_ms, threads, gap_statistics))
    if workload.stream_row is not None:
        from fastsim.traces.mooncake_delta import prepare_streams

        workload = prepare_streams(workload, opts, check_version(dynamo_version))
    if opts["disagg"] is not None:
        _no_disagg_telemetry(telemetry_interval_ms)
        return _run_disagg(workload, opts, report_jsonl_path, seed, scaling_schedule, dynamo_version,
                           gap_statistics, kv_event_lag_ms)
    return simulate_workload(
        workload, opts["engine"], num_workers=opts["num_workers"], router_mode=opts["router_mode"],
        replay_concurrency=opts["replay_concurrency"], max_sim_time_ms=opts["max_sim_time_ms"],
        sla=opts["sla"], report_jsonl_path=report_jsonl_path,
        router_config=opts["router_config"], seed=seed, dynamo_version=dynamo_version, debug=debug,
        kv_event_lag_ms=kv_event_lag_ms,
        **_cluster_kw(scaling_schedule, planner, planner_interval_ms, max_workers,
                      telemetry_interval_ms, threads, gap_statistics),
    )


def run_synthetic_trace_replay(
    input_tokens: int,
    output_tokens: int,
    request_count: int,
    *,
    extra_engine_args=None,
    prefill_engine_args=None,
    decode_engine_args=None,
    router_config=None,
    aic_perf_config=None,
    num_workers: int = 1,
    num_prefill_workers: int = 1,
    num_decode_workers: int = 1,
    replay_concurrency: Optional[int] = None,
    replay_mode: str = "offline",
    router_mode: str = "round_robin",
    arrival_speedup_ratio: float = 1.0,
    request_rate: Optional[float] = None,
    arrival_interval_ms: Optional[float] = None,
    arrival_seed: int = 42,
    turns_per_session: int = 1,
    shared_prefix_ratio: float = 0.0,
    num_prefix_groups: int = 0,
    inter_turn_delay_ms: float = 0.0,
    model_name: Optional[str] = None,
    sla_ttft_ms: Optional[float] = None,
    sla_itl_ms: Optional[float] = None,
    sla_e2e_ms: Optional[float] = None,
    planner_config=None,
    benchmark_granularity: int = 8,
    report_jsonl_path=None,
    max_sim_time_ms: Optional[float] = None,
    seed: int = 0,
    scaling_schedule=None,
    planner=None,
    planner_interval_ms: Optional[float] = None,
    max_workers: Optional[int] = None,
    telemetry_interval_ms: Optional[float] = None,
    threads: Optional[int] = None,
    dynamo_version: str = "1.6.1",
    debug: Optional[bool] = None,
    kv_event_lag_ms: Optional[float] = None,
    gap_statistics: str = "exact",
    **unsupported: Any,
):
    """Replay a synthetic workload offline (Dynamo's ``run_synthetic_trace_replay``); returns a ``Report``.

    ``request_count`` sessions of ``turns_per_session`` turns of ``input_tokens``/``output_tokens``.
    Exactly one of ``replay_concurrency``, ``request_rate`` (Poisson, req/s) or
    ``arrival_interval_ms`` (0 = burst) is required, as in Dynamo. See
    :func:`fastsim.workload.synthetic` for the generator (Poisson and prefix-group draws use numpy's
    RNG seeded with ``arrival_seed``, not Dynamo's). ``report_jsonl_path`` and ``max_sim_time_ms``
    are fastsim extensions (Dynamo's synthetic API has neither). Disaggregated replay, ``debug``,
    ``dynamo_version`` and the unsupported options as in :func:`run_trace_replay`.
    """
    _reject_unknown("run_synthetic_trace_replay", unsupported, _SYNTHETIC_KEYWORDS)
    if report_jsonl_path is not None:
        check_output_file(report_jsonl_path, "report_jsonl_path")
    opts = _common(
        extra_engine_args=extra_engine_args, prefill_engine_args=prefill_engine_args,
        decode_engine_args=decode_engine_args, router_config=router_config,
        aic_perf_config=aic_perf_config, num_workers=num_workers,
        num_prefill_workers=num_prefill_workers, num_decode_workers=num_decode_workers,
        replay_concurrency=replay_concurrency, replay_mode=replay_mode, router_mode=router_mode,
        arrival_speedup_ratio=arrival_speedup_ratio, model_name=model_name,
        sla_ttft_ms=sla_ttft_ms, sla_itl_ms=sla_itl_ms, sla_e2e_ms=sla_e2e_ms,
        planner_config=planner_config, benchmark_granularity=benchmark_granularity,
        max_sim_time_ms=max_sim_time_ms, dynamo_version=dynamo_version,
    )
    check_gap_statistics(gap_statistics)
    workload = synthetic(
        input_tokens, output_tokens, request_count,
        arrival_interval_ms=arrival_interval_ms, request_rate=request_rate,
        arrival_seed=arrival_seed, turns_per_session=turns_per_session,
        inter_turn_delay_ms=inter_turn_delay_ms, replay_concurrency=opts["replay_concurrency"],
        arrival_speedup_ratio=opts["arrival_speedup_ratio"],
        shared_prefix_ratio=shared_prefix_ratio, num_prefix_groups=num_prefix_groups,
        block_size=opts["engine"].block_size,
    )
    if opts["disagg"] is not None:
        _no_disagg_telemetry(telemetry_interval_ms)
        return _run_disagg(workload, opts, report_jsonl_path, seed, scaling_schedule, dynamo_version,
                           gap_statistics, kv_event_lag_ms)
    return simulate_workload(
        workload, opts["engine"], num_workers=opts["num_workers"], router_mode=opts["router_mode"],
        replay_concurrency=opts["replay_concurrency"], max_sim_time_ms=opts["max_sim_time_ms"],
        sla=opts["sla"], report_jsonl_path=report_jsonl_path,
        router_config=opts["router_config"], seed=seed, dynamo_version=dynamo_version, debug=debug,
        kv_event_lag_ms=kv_event_lag_ms,
        **_cluster_kw(scaling_schedule, planner, planner_interval_ms, max_workers,
                      telemetry_interval_ms, threads, gap_statistics),
    )
