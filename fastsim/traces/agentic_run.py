"""Replaying an agentic trace: Dynamo 1.6.1's options, the loader of each format, the run and
its report (the graph rules: ``fastsim/traces/graph.py``)."""

from __future__ import annotations

import heapq

import numpy as np

from fastsim.errors import InputError, NotSupportedError

GRAPH_FORMATS = ("agentic_mooncake", "agentic-mooncake", "weka")  # (dynamo: when the trace is agentic)
_LANE_FORMATS = ("agentic_mooncake", "agentic-mooncake", "weka", "dynamo")


def check_options(trace_format, agentic_lanes, execution_model, weka_nested_timestamp_basis):
    """Dynamo's checks of the agentic options (its messages); returns the stripped execution model."""
    if isinstance(agentic_lanes, bool) or (agentic_lanes is not None and not isinstance(agentic_lanes, (int, np.integer))):
        raise InputError("agentic_lanes must be an integer or None")
    if agentic_lanes is not None and trace_format not in _LANE_FORMATS:
        raise InputError("agentic_lanes requires trace_format='agentic_mooncake', 'weka', or 'dynamo'")
    if agentic_lanes is not None and agentic_lanes < 1:
        raise InputError("agentic_lanes must be at least 1")
    if weka_nested_timestamp_basis is not None:
        if weka_nested_timestamp_basis not in ("auto", "absolute", "relative"):
            raise InputError("weka_nested_timestamp_basis must be 'auto', 'absolute', or 'relative'")
        if trace_format != "weka":
            raise InputError("weka_nested_timestamp_basis requires trace_format='weka'")
    if execution_model is not None:
        if not isinstance(execution_model, str):
            raise InputError("execution_model must be a string or None")
        execution_model = execution_model.strip()
        if not execution_model:
            raise InputError("execution_model must be non-empty")
    if trace_format in GRAPH_FORMATS and execution_model is None:
        raise InputError("agentic execution requires a configured target model (--execution-model)")
    return execution_model


def load(path, fmt, arrival_speedup_ratio, weka_nested_timestamp_basis):
    """The Workload (with its graph) of an agentic trace of format ``fmt``."""
    if fmt in ("agentic_mooncake", "agentic-mooncake"):
        from fastsim.traces.agentic_mooncake import load_agentic_mooncake

        return load_agentic_mooncake(path, arrival_speedup_ratio)
    if fmt == "dynamo":
        from fastsim.traces.dynamo_trace import load_dynamo_trace

        return load_dynamo_trace(path, arrival_speedup_ratio)
    if fmt == "weka":
        from fastsim.traces.weka import load_weka

        return load_weka(path, weka_nested_timestamp_basis, arrival_speedup_ratio)
    raise NotSupportedError(f"trace_format '{fmt}' is not supported yet by fastsim")


def lanes_of_plays(graph, terminal):
    """The lane each play ran on (-1 for all in open replay): the first plays take lanes 0..N-1,
    and each later play the lane of the play that settled first (ties: the lower play)."""
    n_plays = graph.n_plays
    lanes = np.full(n_plays, -1, dtype=np.int64)
    if not graph.lanes:
        return lanes
    settle = np.maximum.reduceat(terminal[graph.play_rows], graph.play_ptr[:-1]).tolist()
    active = []
    for p in range(min(graph.lanes, n_plays)):
        lanes[p] = p
        heapq.heappush(active, (settle[p], p))
    for p in range(min(graph.lanes, n_plays), n_plays):
        _, q = heapq.heappop(active)
        lanes[p] = lanes[q]
        heapq.heappush(active, (settle[p], p))
    return lanes


def run(workload, opts, trace_format, agentic_lanes, execution_model, report_jsonl_path, *, seed, debug,
        dynamo_version, cluster_kw, kv_event_lag_ms=None):
    """Simulate an agentic workload and add the agentic report fields (``kv_event_lag_ms``: the
    kv_router's KV event lag, decision 0230)."""
    import dataclasses

    from fastsim.api import _write_jsonl, simulate_workload
    from fastsim.dynamo_version import check_version
    from fastsim.traces import agentic_report

    if workload.graph is None:  # a dynamo request trace that is not agentic: a plain replay
        raise NotSupportedError(f"trace_format '{trace_format}' without agentic structure is not supported yet")
    if check_version(dynamo_version) != "1.6.1":
        raise NotSupportedError(f"trace_format '{trace_format}' with --dynamo-version 1.4.2 is not supported yet "
                                "by fastsim (only Dynamo 1.6.1's agentic driver is reproduced)")
    if execution_model is None:
        raise InputError("agentic execution requires a configured target model (--execution-model)")
    if opts["replay_concurrency"] is not None:  # (Dynamo 1.6.1's own refusals, word for word)
        raise InputError("agentic_mooncake trace format is not supported with replay_concurrency"
                         if trace_format.startswith("agentic") else
                         "agentic Dynamo request traces are not supported with replay_concurrency")
    graph = workload.graph.with_lanes(agentic_lanes)
    workload = dataclasses.replace(workload, graph=graph)
    if opts["disagg"] is not None:  # prefill and decode pools: the same graph drives the arrivals
        from fastsim.api import _no_disagg_telemetry, _run_disagg

        _no_disagg_telemetry(cluster_kw["telemetry_interval_ms"])
        report = _run_disagg(workload, opts, None, seed, cluster_kw["scaling_schedule"], dynamo_version,
                             cluster_kw["gap_statistics"], kv_event_lag_ms)
    else:
        report = simulate_workload(
            workload, opts["engine"], num_workers=opts["num_workers"], router_mode=opts["router_mode"],
            sla=opts["sla"], router_config=opts["router_config"], seed=seed, dynamo_version=dynamo_version,
            debug=debug, kv_event_lag_ms=kv_event_lag_ms, max_sim_time_ms=opts["max_sim_time_ms"], **cluster_kw)
    terminal = np.asarray(report._req["terminal_ms"], dtype=np.float64)
    agentic_report.attach(report, graph, execution_model, lanes_of_plays(graph, terminal) if graph.lanes else None)
    if report_jsonl_path is not None:
        _write_jsonl(report, report_jsonl_path)
    return report
