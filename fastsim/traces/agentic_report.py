"""The agentic fields of a replay's report and per-request records (Dynamo 1.6.1's layout).

Summary: ``agentic_graph`` (block size, node and play counts, the trace's source provenance and
models), ``agentic_model_projection`` (every source model projected to the configured
``execution_model``), ``agentic_play_outcomes`` (per play in play order: its last request's end as
``causal_terminal_ms`` and ``settled_at_ms``, and its status) and ``agentic_lifecycle_event_count``
(three events per finished request, dispatch, end and quiescence, and one per settled play), and
the trajectory figures: each settled play's latency from its first dispatch to its last end.
Dynamo's two digests (``graph_digest``, ``agentic_lifecycle_digest``) hash its internal
serialisations and are left out rather than made up.

Records: ``request_id``, ``play_id``, the conversation as ``session_id``, ``turn_index`` null, an
``agentic`` object (request, play, conversation, lane with lanes, root, spawning parent), uuids
numbered from 1 in request order and ``dispatched_at_ms`` equal to the arrival.
"""

from __future__ import annotations

import json

import numpy as np

COMPLETED_STATUS = 2  # fastsim.report STATUS_NAMES index of "completed"


def attach(report, graph, execution_model, lanes_of_play=None):
    """Add the agentic fields to ``report`` (its summary and its request table's record texts)."""
    req = report._req
    status = np.asarray(req["status"]).astype(np.int64)
    terminal = np.asarray(req.get("terminal_ms", req.get("terminal_time_ms")), dtype=np.float64)
    done = status >= COMPLETED_STATUS
    completed = status == COMPLETED_STATUS
    outcomes = []
    settled = 0
    for p, name in enumerate(graph.play_ids):
        rows = graph.play_rows[graph.play_ptr[p]:graph.play_ptr[p + 1]]
        if done[rows].all():
            t = float(terminal[rows].max())
            ok = bool(completed[rows].all())
            outcomes.append({"causal_terminal_ms": t, "play_id": name, "settled_at_ms": t,
                             "status": "completed" if ok else "failed"})
            settled += 1
        else:
            outcomes.append({"causal_terminal_ms": None, "play_id": name, "settled_at_ms": None,
                             "status": "incomplete"})
    s = report.summary
    s["agentic_graph"] = {"block_size": graph.block_size, "node_count": len(graph.request_ids),
                          "play_count": graph.n_plays,
                          "source": {"digest": graph.source_digest, "format": graph.source_format},
                          "source_models": list(graph.source_models)}
    s["agentic_model_projection"] = {"policy": "project_to_configured_target",
                                     "source_models": list(graph.source_models), "target_model": execution_model}
    s["agentic_play_outcomes"] = outcomes
    s["agentic_lifecycle_event_count"] = 3 * int(done.sum()) + settled
    s.update(_trajectories(graph, req, done))
    s.update(graph.extra_report)
    req["uuid_base"] = 1
    req["agentic_texts"] = _record_texts(graph, lanes_of_play)


def _trajectories(graph, req, done):
    """Dynamo's trajectory figures: each settled play's end-to-end latency, from its first
    dispatch to its last request's end (statistics as for the per-request latencies)."""
    from fastsim.report import _exact_dist

    arrival = np.asarray(req["arrival_ms"], dtype=np.float64)
    terminal = np.asarray(req["terminal_ms"], dtype=np.float64)
    lat = []
    for p in range(graph.n_plays):
        rows = graph.play_rows[graph.play_ptr[p]:graph.play_ptr[p + 1]]
        if done[rows].all():
            lat.append(float(terminal[rows].max() - arrival[rows].min()))
    mean, lo, hi, med, p75, p90, p95, p99, std = _exact_dist(np.array(lat, dtype=np.float64))
    return {"total_trajectories": graph.n_plays, "completed_trajectories": len(lat),
            "incomplete_trajectories": graph.n_plays - len(lat),
            "mean_trajectory_e2e_latency_ms": mean, "min_trajectory_e2e_latency_ms": lo,
            "max_trajectory_e2e_latency_ms": hi, "median_trajectory_e2e_latency_ms": med,
            "p50_trajectory_e2e_latency_ms": med, "p75_trajectory_e2e_latency_ms": p75,
            "p90_trajectory_e2e_latency_ms": p90, "p95_trajectory_e2e_latency_ms": p95,
            "p99_trajectory_e2e_latency_ms": p99, "std_trajectory_e2e_latency_ms": std}


def _record_texts(graph, lanes_of_play):
    q = json.dumps
    out = {"request_id": [], "play_id": [], "session_id": [], "agentic": []}
    for r, rid in enumerate(graph.request_ids):
        p = int(graph.play[r])
        play = graph.play_ids[p]
        conv = graph.session_names[r]
        parts = [f'"request_id":{q(rid)}', f'"play_id":{q(play)}', f'"conversation_id":{q(conv)}']
        if lanes_of_play is not None and lanes_of_play[p] >= 0:
            parts.append(f'"lane_id":"lane:{int(lanes_of_play[p])}"')
        parts.append(f'"root_id":{q(graph.root_ids[r])}')
        if graph.parent_ids[r] is not None:
            parts.append(f'"parent_id":{q(graph.parent_ids[r])}')
        out["request_id"].append(q(rid))
        out["play_id"].append(q(play))
        out["session_id"].append(q(conv))
        out["agentic"].append("{" + ",".join(parts) + "}")
    return out
