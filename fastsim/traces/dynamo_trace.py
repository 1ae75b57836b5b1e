"""Dynamo request traces (``--trace-format dynamo``): ``dynamo.request.trace.v1`` JSONL files, as
Dynamo's own frontend records them (``.gz`` too; several files make one trace).

Each ``request_end`` record gives a request: ``request.request_id``, ``output_tokens``,
``request_received_ms`` and ``total_time_ms`` (its start and end; without them the record's
``event_time_unix_ms``), and ``request.replay`` (``trace_block_size``, ``input_length``,
``input_sequence_hashes``). ``tool_end`` / ``tool_error`` records describe tool calls;
``request_payload`` and ``tool_start`` records are skipped. A record may be wrapped in an
``event`` object.

A trace whose requests carry ``agent_context`` (all of them or none) is agentic, lowered to a
request graph as Dynamo 1.6.1 does (``fastsim/traces/graph.py`` for the timing rules):

* the requests of one ``session_id``, in (start, end, request_id) order, follow each other: each
  waits for the previous one's completion plus the recorded gap (its start minus that end);
* a session with a ``parent_session_id`` is a sub-agent: a tool record naming it as
  ``claude.child_session_id`` says which parent request spawned it (``source_request_id``: the
  first child request starts that long after the source's dispatch) and which parent request waits
  for its last request (``consumer_request_id``, a join); without such a record the spawn is the
  last parent request started at or before the child's first, and the join the first parent
  request started at or after the child's last end;
* plays are the connected parts of the graph, named ``dynamo-play:<root>`` after their earliest
  root (ties: the smaller request id); roots keep their start, less the trace's earliest start.

Requests without ``agent_context`` make a plain trace, which fastsim does not replay yet.
"""

from __future__ import annotations

import gzip
import math
import os

from fastsim.errors import InputError, NotSupportedError
from fastsim.traces.graph import COMPLETION, DISPATCH, Dependency, Node, build_graph, graph_workload

__all__ = ["load_dynamo_trace"]

SCHEMA = "dynamo.request.trace.v1"
_U64 = 1 << 64


def _round_half_away(x):
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


def _u64(obj, name, where, required=True):
    v = obj.get(name)
    if v is None and not required:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < _U64:
        raise InputError(f"{where}: field '{name}' must be an integer in [0, 2^64), got {v!r}")
    return v


def _text(obj, name, where):
    v = obj.get(name)
    if not isinstance(v, str) or not v.strip():
        raise InputError(f"{where}: field '{name}' must be a non-empty string, got {v!r}")
    return v


def _object(obj, name, where, required=True):
    v = obj.get(name)
    if v is None and not required:
        return None
    if not isinstance(v, dict):
        raise InputError(f"{where}: field '{name}' must be an object, got {v!r}")
    return v


def _lines(path):
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                data = f.read()
        else:
            with open(path, "rb") as f:
                data = f.read()
    except FileNotFoundError:
        raise InputError(f"trace file {path} does not exist") from None
    except IsADirectoryError:
        raise InputError(f"trace file {path} is a directory") from None
    except (OSError, EOFError) as exc:
        raise InputError(f"cannot read trace file {path}: {exc}") from None
    try:
        return data.decode("utf-8-sig").splitlines()
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise InputError(f"{path}:{line}: not valid UTF-8 text") from None


class _Request:
    __slots__ = ("rid", "start", "end", "session", "parent", "model", "isl", "osl", "ids", "bs", "line", "where")


class _Tool:
    __slots__ = ("session", "call_id", "source", "consumer", "child", "mode", "where")


def _read(paths):
    from fastsim.workload import trace_json

    requests, tools, seen = [], [], {}
    for path in paths:
        for ln, line in enumerate(_lines(path), 1):
            if not line.strip():
                continue
            where = f"{path}:{ln}"
            value = trace_json(line, where)
            if not isinstance(value, dict):
                continue
            event = value.get("event", value)
            if not isinstance(event, dict):
                raise InputError(f"{where}: field 'event' must be an object")
            kind = event.get("event_type", value.get("event_type"))
            if kind in ("request_payload", "tool_start"):
                continue
            if kind not in ("request_end", "tool_end", "tool_error"):
                raise InputError(f"{where}: field 'event_type' must be request_end, tool_end or tool_error "
                                 f"(request_payload and tool_start are skipped), got {kind!r}")
            if event.get("schema") != SCHEMA:
                raise InputError(f"{where}: field 'schema' must be {SCHEMA!r}, got {event.get('schema')!r}")
            t_event = _u64(event, "event_time_unix_ms", where)
            ctx = _object(event, "agent_context", where, required=False)
            if ctx is not None:
                _text(ctx, "session_id", where + " (agent_context)")
            if kind == "request_end":
                requests.append(_request(event, ctx, t_event, where, ln, seen))
            else:
                tool = _tool(event, ctx, t_event, where)
                if tool is not None:
                    tools.append(tool)
    if not requests:
        raise InputError(f"{', '.join(paths)}: the Dynamo trace contains no request_end records")
    return requests, tools


def _request(event, ctx, t_event, where, ln, seen):
    req = _object(event, "request", where)
    r = _Request()
    r.rid = _text(req, "request_id", where + " (request)")
    if r.rid in seen:
        raise InputError(f"{where}: duplicate request_id {r.rid!r} (first at {seen[r.rid]})")
    seen[r.rid] = where
    total = req.get("total_time_ms")
    if total is not None:
        if isinstance(total, bool) or not isinstance(total, (int, float)) or not math.isfinite(total) or total < 0:
            raise InputError(f"{where}: field 'request.total_time_ms' must be a finite number >= 0, got {total!r}")
        total = _round_half_away(float(total))
    received = _u64(req, "request_received_ms", where + " (request)", required=False)
    r.end = min(received + total, _U64 - 1) if received is not None and total is not None else t_event
    r.start = received if received is not None else max(t_event - (total or 0), 0)
    r.session = ctx.get("session_id") if ctx else None
    r.parent = ctx.get("parent_session_id") if ctx else None
    if r.parent is not None and not isinstance(r.parent, str):
        raise InputError(f"{where}: field 'agent_context.parent_session_id' must be a string")
    model = req.get("model")
    r.model = model if isinstance(model, str) else "unknown"
    osl = req.get("output_tokens")
    if isinstance(osl, bool) or not isinstance(osl, int) or osl < 0:
        raise InputError(f"{where}: field 'request.output_tokens' must be an integer >= 0, got {osl!r}")
    r.osl = osl
    rep = _object(req, "replay", where + " (request)")
    r.bs = _u64(rep, "trace_block_size", where + " (request.replay)")
    r.isl = _u64(rep, "input_length", where + " (request.replay)")
    ids = rep.get("input_sequence_hashes")
    if not isinstance(ids, list) or any(isinstance(h, bool) or not isinstance(h, int) or not 0 <= h < _U64 for h in ids):
        raise InputError(f"{where}: field 'request.replay.input_sequence_hashes' must be a list of integers "
                         "in [0, 2^64)")
    r.ids = ids
    r.line = ln
    r.where = where
    return r


def _tool(event, ctx, t_event, where):
    tool = event.get("tool")
    if ctx is None or tool is None:
        return None
    if not isinstance(tool, dict):
        raise InputError(f"{where}: field 'tool' must be an object")
    t = _Tool()
    t.session = ctx["session_id"]
    t.call_id = _text(tool, "tool_call_id", where + " (tool)")
    _text(tool, "tool_class", where + " (tool)")
    dur = tool.get("duration_ms")
    if dur is not None and (isinstance(dur, bool) or not isinstance(dur, (int, float)) or not math.isfinite(dur)
                            or dur < 0):
        raise InputError(f"{where}: field 'tool.duration_ms' must be a finite number >= 0, got {dur!r}")
    end = _u64(tool, "ended_at_unix_ms", where + " (tool)", required=False)
    end = t_event if end is None else end
    start = _u64(tool, "started_at_unix_ms", where + " (tool)", required=False)
    if start is None:
        start = end - _round_half_away(float(dur)) if dur is not None else end
    if end < start:
        raise InputError(f"{where}: the tool's end time precedes its start time")
    claude = tool.get("claude")
    t.source = t.consumer = t.child = None
    t.where = where
    if claude is not None:
        if not isinstance(claude, dict):
            raise InputError(f"{where}: field 'tool.claude' must be an object")
        t.source = _text(claude, "source_request_id", where + " (tool.claude)")
        t.consumer = claude.get("consumer_request_id")
        t.child = claude.get("child_session_id")
        mode = claude.get("execution_mode")
        if mode not in ("blocking", "background"):
            raise InputError(f"{where}: field 'tool.claude.execution_mode' must be \"blocking\" or \"background\", "
                             f"got {mode!r}")
        t.mode = mode
    return t


def _dep(src, dst, trigger, relation):
    t0 = src.start if trigger == DISPATCH else src.end
    delay = dst.start - t0
    if delay < 0:
        raise InputError(f"{dst.where}: request {dst.rid!r} starts {-delay} ms before the "
                         f"{'dispatch' if trigger == DISPATCH else 'end'} of {src.rid!r} it waits for "
                         f"({src.where}): a negative wait")
    return Dependency(src.rid, trigger, float(delay), relation, dst.where)


def _push(deps, dep):
    if not any(d.request_id == dep.request_id and d.trigger == dep.trigger for d in deps):
        deps.append(dep)


def load_dynamo_trace(paths, arrival_speedup_ratio=1.0):
    """Read Dynamo request-trace files (one path or a list) into a Workload with its request graph."""
    from fastsim.workload import _check_ratio

    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]
    paths = [os.fspath(p) for p in paths]
    if not paths:
        raise InputError("trace_format='dynamo' requires at least one trace file")
    ratio = _check_ratio(arrival_speedup_ratio)
    reqs, tools = _read(paths)
    with_ctx = sum(r.session is not None for r in reqs)
    if with_ctx and with_ctx != len(reqs):
        raise InputError(f"{paths[0]}: a Dynamo request trace cannot mix requests with and without agent_context")
    bs = reqs[0].bs
    if bs <= 0:
        raise InputError(f"{reqs[0].where}: the embedded trace_block_size must be positive")
    for r in reqs:
        if r.bs != bs:
            raise InputError(f"{r.where}: trace_block_size {r.bs} differs from {bs} ({reqs[0].where}); mixed "
                             "block sizes are not supported")
    if not with_ctx:
        raise NotSupportedError(f"{paths[0]}: a Dynamo request trace without agent_context (plain requests) is "
                                "not supported yet by fastsim")
    reqs.sort(key=lambda r: (r.start, r.end, r.rid.encode("utf-8")))
    first_start = min(r.start for r in reqs)
    by_id = {r.rid: r for r in reqs}
    by_session, parent_of = {}, {}
    for r in reqs:
        by_session.setdefault(r.session, []).append(r)
        if r.parent is not None:
            if parent_of.setdefault(r.session, r.parent) != r.parent:
                raise InputError(f"{r.where}: session {r.session!r} has conflicting parent_session_id values "
                                 f"{parent_of[r.session]!r} and {r.parent!r}")
    deps = {r.rid: [] for r in reqs}
    for rows in by_session.values():  # (already in (start, end, request_id) order)
        for a, b in zip(rows, rows[1:]):
            _push(deps[b.rid], _dep(a, b, COMPLETION, "sequence"))
    tool_of_child = {}
    for t in tools:
        if t.source is None:
            continue
        for rid in (t.source, t.consumer):
            if rid is None:
                continue
            if rid not in by_id:
                raise InputError(f"{t.where}: tool {t.call_id!r} references request_id {rid!r}, which is not in the trace")
            if by_id[rid].session != t.session:
                raise InputError(f"{t.where}: tool {t.call_id!r} request {rid!r} belongs to session "
                                 f"{by_id[rid].session!r}, not the tool's session {t.session!r}")
        if t.child is None or t.child not in by_session:
            continue
        if t.child in tool_of_child:
            raise InputError(f"{t.where}: several tool records name child session {t.child!r}")
        tool_of_child[t.child] = t
    for child in sorted(parent_of, key=lambda s: s.encode("utf-8")):
        parent = parent_of[child]
        kids = by_session[child]
        if parent not in by_session:
            raise InputError(f"{kids[0].where}: child session {child!r} names parent session {parent!r}, "
                             "which has no requests in the trace")
        mine = by_session[parent]
        first = kids[0]
        last = max(kids, key=lambda r: (r.end, r.start, r.rid.encode("utf-8")))
        t = tool_of_child.get(child)
        if t is not None:
            src = by_id[t.source]
            if src.session != parent:
                raise InputError(f"{t.where}: tool {t.call_id!r} source request {t.source!r} is not in parent "
                                 f"session {parent!r}")
            _push(deps[first.rid], _dep(src, first, DISPATCH, "spawn"))
            if t.consumer is not None:
                con = by_id[t.consumer]
                if con.session != parent:
                    raise InputError(f"{t.where}: tool {t.call_id!r} consumer request {t.consumer!r} is not in "
                                     f"parent session {parent!r}")
                _push(deps[con.rid], _dep(last, con, COMPLETION, "join"))
            continue
        before = [r for r in mine if r.start <= first.start]
        if before:  # the last of the latest starts (Rust's max_by_key keeps the last maximum)
            best = max(r.start for r in before)
            spawn = [r for r in before if r.start == best][-1]
            _push(deps[first.rid], _dep(spawn, first, DISPATCH, "spawn"))
        after = [r for r in mine if r.start >= last.end]
        if after:  # the first of the earliest starts
            best = min(r.start for r in after)
            join = [r for r in after if r.start == best][0]
            _push(deps[join.rid], _dep(last, join, COMPLETION, "join"))
    nodes = []
    for r in reqs:
        need = -(-r.isl // bs)
        if r.isl < 1 or len(r.ids) != need:
            raise InputError(f"{r.where}: input_length {r.isl} at trace_block_size {bs} needs exactly {need} "
                             f"input_sequence_hashes (and input_length > 0), got {len(r.ids)}")
        d = deps[r.rid]
        nb = float(r.start - first_start) if not d else 0.0
        nodes.append(Node(r.rid, "", r.session, r.model, r.isl, r.osl, list(r.ids), nb / ratio,
                          [Dependency(x.request_id, x.trigger, x.delay_ms / ratio, x.relation, x.where) for x in d],
                          line=r.line, where=r.where))
    _name_plays(nodes, "dynamo-play")
    graph, cols = build_graph(nodes, bs, SCHEMA, f"requests:{len(nodes)};tools:{len(tools)}", paths[0])
    return graph_workload(graph, cols, paths[0], ratio)


def _name_plays(nodes, prefix):
    """Each connected part of the graph is a play named after its earliest root (by not_before_ms,
    then request id)."""
    index = {nd.request_id: i for i, nd in enumerate(nodes)}
    parent = list(range(len(nodes)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, nd in enumerate(nodes):
        for d in nd.dependencies:
            j = index.get(d.request_id)
            if j is not None:
                a, b = find(i), find(j)
                if a != b:
                    parent[a] = b
    label = {}
    for i, nd in enumerate(nodes):
        if not nd.dependencies:
            c = find(i)
            key = (nd.not_before_ms, nd.request_id.encode("utf-8"))
            if c not in label or key < label[c][0]:
                label[c] = (key, nd.request_id)
    for i, nd in enumerate(nodes):
        c = find(i)
        nd.play_id = f"{prefix}:{label[c][1] if c in label else nd.request_id}"
