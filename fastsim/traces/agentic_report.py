"""The agentic fields of a replay's report and per-request records (Dynamo 1.6.1's layout).

Summary: ``agentic_graph`` (block size, node and play counts, the trace's source provenance and
models), ``agentic_model_projection`` (every source model projected to the configured
``execution_model``), ``agentic_play_outcomes`` (per play in play order: its last finished
request's end as ``causal_terminal_ms``, the same as ``settled_at_ms`` once every request of the
play has finished, and its status; a play cut by a time cap is ``incomplete``, with no
``settled_at_ms``, and no ``causal_terminal_ms`` while none of its requests has finished) and
``agentic_lifecycle_event_count`` (one event per dispatched request, two more per finished one, end
and quiescence, and one per settled play), and the trajectory figures: each settled play's latency
from its first dispatch to its last end.
Dynamo's two digests (``graph_digest``, ``agentic_lifecycle_digest``) hash its internal
serialisations and are left out rather than made up.

Records: ``request_id``, ``play_id``, the conversation as ``session_id``, ``turn_index`` null, an
``agentic`` object (request, play, conversation, lane with lanes, root, spawning parent), uuids
numbered from 1 in request order and ``dispatched_at_ms`` equal to the arrival.
"""

from __future__ import annotations

from json.encoder import encode_basestring_ascii

import numpy as np

NOT_ARRIVED_STATUS = 0  # fastsim.report STATUS_NAMES index of "pending"
COMPLETED_STATUS = 2  # ... of "completed"
REJECTED_STATUS = 3  # ... of "rejected" (and 4 of "failed": a disaggregated handoff the decode pool refuses)
FAILURE_NAMES = {3: "rejected", 4: "failed"}


def attach(report, graph, execution_model, lanes_of_play=None):
    """Add the agentic fields to ``report`` (its summary and its request table's record texts)."""
    req = report._req
    status = np.asarray(req["status"]).astype(np.int64)
    terminal = np.asarray(req.get("terminal_ms", req.get("terminal_time_ms")), dtype=np.float64)
    done = status >= COMPLETED_STATUS
    # a request rejected, or failed at its handoff (docs/decisions/0470), fails its play
    lost = status >= REJECTED_STATUS
    cancelled = cancelled_rows(graph, lost, status != NOT_ARRIVED_STATUS)
    plays = _per_play(graph, done, cancelled, status == COMPLETED_STATUS, terminal)
    failure = _first_rejection(graph, lost, terminal)
    outcomes = []
    for p, (name, settled, ok, t) in enumerate(zip(graph.play_ids, plays["done"].tolist(),
                                                   plays["completed"].tolist(), plays["terminal"].tolist())):
        if settled and ok:
            outcomes.append({"causal_terminal_ms": t, "play_id": name, "settled_at_ms": t, "status": "completed"})
        elif settled:  # a request rejected: the play failed when it was
            r = failure[p]
            outcomes.append({"causal_terminal_ms": float(terminal[r]), "failure_request_id": graph.request_ids[r],
                             "failure_status": FAILURE_NAMES[int(status[r])], "play_id": name, "settled_at_ms": t,
                             "status": "failed"})
        elif t == t:  # (NaN while none of its requests has finished)
            outcomes.append({"causal_terminal_ms": t, "play_id": name, "status": "incomplete"})
        else:
            outcomes.append({"play_id": name, "status": "incomplete"})
    s = report.summary
    s["agentic_graph"] = {"block_size": graph.block_size, "node_count": len(graph.request_ids),
                          "play_count": graph.n_plays,
                          "source": {"digest": graph.source_digest, "format": graph.source_format},
                          "source_models": list(graph.source_models)}
    s["agentic_model_projection"] = {"policy": "project_to_configured_target",
                                     "source_models": list(graph.source_models), "target_model": execution_model}
    s["agentic_play_outcomes"] = outcomes
    dispatched = int(np.count_nonzero(status != NOT_ARRIVED_STATUS))
    s["agentic_lifecycle_event_count"] = (dispatched + 2 * int(done.sum()) + int(cancelled.sum())
                                          + int(plays["done"].sum()))
    s.update(_trajectories(graph, req, plays))
    s.update(graph.extra_report)
    req["uuid_base"] = 1
    req["agentic_texts"] = _record_texts(graph, lanes_of_play)


def _per_play(graph, done, cancelled, completed, terminal):
    """Per play (play order): all its requests done or cancelled, all completed, and its last
    finished request's end (NaN if none has; a play has at least one request)."""
    rows, starts = graph.play_rows, graph.play_ptr[:-1]
    ended = np.where(done, terminal, np.nan)[rows]
    return {"done": np.logical_and.reduceat((done | cancelled)[rows], starts),
            "completed": np.logical_and.reduceat(completed[rows], starts),
            "terminal": np.fmax.reduceat(ended, starts)}


def cancelled_rows(graph, rejected, arrived):
    """The requests cancelled by rejections (the loop's rule, ``kernels/agentic.py``): a rejection
    fails its play, whose requests not yet dispatched then never are."""
    failed = np.zeros(graph.n_plays, dtype=bool)
    failed[graph.play[rejected]] = True
    return failed[graph.play] & ~arrived


def _first_rejection(graph, rejected, terminal):
    """Per play, the row of its first rejected request (by end, then row), or -1."""
    first = np.full(graph.n_plays, -1, dtype=np.int64)
    rows = np.flatnonzero(rejected)
    for r in rows[np.lexsort((rows, terminal[rows]))][::-1]:
        first[graph.play[r]] = r
    return first


def _trajectories(graph, req, plays):
    """Dynamo's trajectory figures: each settled play's end-to-end latency, from its first
    dispatch to its last request's end (statistics as for the per-request latencies)."""
    from fastsim.report import _exact_dist

    arrival = np.asarray(req["arrival_ms"], dtype=np.float64)
    first = np.minimum.reduceat(arrival[graph.play_rows], graph.play_ptr[:-1])
    settled = plays["done"] & plays["completed"]  # (a failed play has no trajectory)
    lat = plays["terminal"][settled] - first[settled]
    mean, lo, hi, med, p75, p90, p95, p99, std = _exact_dist(np.ascontiguousarray(lat, dtype=np.float64))
    return {"total_trajectories": graph.n_plays, "completed_trajectories": int(lat.shape[0]),
            "incomplete_trajectories": graph.n_plays - int(lat.shape[0]),
            "mean_trajectory_e2e_latency_ms": mean, "min_trajectory_e2e_latency_ms": lo,
            "max_trajectory_e2e_latency_ms": hi, "median_trajectory_e2e_latency_ms": med,
            "p50_trajectory_e2e_latency_ms": med, "p75_trajectory_e2e_latency_ms": p75,
            "p90_trajectory_e2e_latency_ms": p90, "p95_trajectory_e2e_latency_ms": p95,
            "p99_trajectory_e2e_latency_ms": p99, "std_trajectory_e2e_latency_ms": std}


def _record_texts(graph, lanes_of_play):
    # json.dumps of a string, without its per-call set-up (15,000 requests: 5 ms instead of 100)
    q = encode_basestring_ascii
    play_of = graph.play.tolist()
    rid = list(map(q, graph.request_ids))
    play_q = list(map(q, graph.play_ids))
    play = [play_q[p] for p in play_of]
    conv = list(map(q, graph.session_names))
    root = list(map(q, graph.root_ids))
    lane = [""] * len(play_q)
    if lanes_of_play is not None:
        lane = [f',"lane_id":"lane:{int(x)}"' if x >= 0 else "" for x in np.asarray(lanes_of_play).tolist()]
    parent = [f',"parent_id":{q(x)}' if x is not None else "" for x in graph.parent_ids]
    agentic = [f'{{"request_id":{r},"play_id":{p},"conversation_id":{c}{lane[k]},"root_id":{o}{a}}}'
               for r, p, c, k, o, a in zip(rid, play, conv, play_of, root, parent)]
    return {"request_id": rid, "play_id": play, "session_id": conv, "agentic": agentic}
