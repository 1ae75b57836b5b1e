"""Dynamo's ``weka`` trace format: a directory (or file) of Weka/AgentX agent traces.

Each ``.json`` file holds one trace object, each ``.jsonl`` file one trace a line; directories are
walked recursively in name order, files taken in relative-path order. A trace is a play:
``{"id", "models", "block_size", "hash_id_scope": "local", "requests": [...]}`` whose requests are
``{"type": "n" | "s", "t" (s), "model", "in", "out", "hash_ids", "api_time" (s)}`` or sub-agent
markers ``{"type": "subagent", "t", "agent_id", "status": "completed" | "async_launched",
"duration_ms", "subagent_type", "requests": [...]}`` with nested requests.

Dynamo 1.6.1 lowers each trace to an agentic request graph (``fastsim/traces/graph.py``), which
this module reproduces step by step:

* conversations are recovered from the hash ids: a request extends the chain whose last request
  its hash ids start with (same model, already ended), else it forks a new chain off the one it
  shares the longest prefix with; forks that continue their parent after it ended are spliced
  back into it (a *seam*); a first request sharing nothing with the rest is a preamble of the
  main chain. The earliest chain is the main conversation (``session:root``), the others its
  workers;
* within a conversation each request waits for its predecessor's end (``t + api_time``) plus the
  recorded gap; a fork waits for its source (its dispatch if it started before the source ended);
  within one scope, a request also waits for the latest request of each other conversation that
  had ended before it started (a replay barrier);
* a sub-agent marker's requests (timestamps relative to the marker or absolute:
  ``--weka-nested-timestamp-basis``, ``auto`` decides from the whole corpus) are spawned by the
  latest parent request before the marker; a ``completed`` (blocking) sub-agent is joined by the
  first later parent request that starts after its end (``duration_ms`` or its last request);
* hash ids are the file's own (``hash_id_scope: local``); a prompt's partial last block is private.

Names follow Dynamo (``weka:<16 hex digits of BLAKE3(relative path)>:request:outer:3:inner:0``):
they order the requests, hence the round robin. Errors name the file and the JSON path.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import List, Optional

from fastsim.errors import InputError
from fastsim.traces.blake3_short import blake3_hex
from fastsim.traces.graph import COMPLETION, DISPATCH, Dependency, Node, build_graph, graph_workload

__all__ = ["load_weka"]

_EPS = 1e-6  # seconds
_SEAM_MAX_GAP = 3600.0
_SEAM_MIN_OVERLAP = 0.5
_MAX_TOKENS = 10_000_000


@dataclass
class _Req:
    t: float
    model: str
    isl: int
    osl: int
    hashes: List[int]
    api_time: Optional[float]
    where: str


@dataclass
class _Indexed:
    source_id: str
    order: int
    req: _Req


@dataclass
class _Fork:
    parent_chain: Optional[int]
    source_id: Optional[str]
    depth: int
    time: float


@dataclass
class _Chain:
    requests: List[_Indexed] = field(default_factory=list)
    fork: Optional[_Fork] = None
    spliced_into: Optional[int] = None
    tail_source: Optional[str] = None
    tail_hashes: List[int] = field(default_factory=list)
    tail_end: float = 0.0
    tail_model: str = ""


@dataclass
class _Stream:
    session_id: str
    requests: List[_Indexed]
    fork_source: Optional[str]
    scope: str


def _end(r: _Req) -> float:
    return r.t + max(r.api_time or 0.0, 0.0)


def _ms(seconds: float) -> float:
    """Seconds to ms at the ns, floored at 0 (Dynamo's ``seconds_to_milliseconds``)."""
    v = max(seconds, 0.0) * 1e9
    return math.floor(v + 0.5) / 1e6


def _order(x: _Indexed):
    return (x.req.t, x.order, x.source_id.encode("utf-8"))


def _lcp(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


# ----------------------------------------------------------------------------- reading
def _fail(where, msg):
    raise InputError(f"{where}: {msg}")


def _str(obj, name, where, required=True):
    v = obj.get(name)
    if v is None and not required:
        return None
    if not isinstance(v, str):
        _fail(where, f"field '{name}' must be a string, got {v!r}")
    return v


def _uint(obj, name, where):
    v = obj.get(name)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0 or v >= 1 << 64:
        _fail(where, f"field '{name}' must be a non-negative integer, got {v!r}")
    return v


def _num(obj, name, where, required=True):
    v = obj.get(name)
    if v is None and not required:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        _fail(where, f"field '{name}' must be a number, got {v!r}")
    return float(v)


def _request(obj, where):
    if not isinstance(obj, dict):
        _fail(where, "a request must be an object")
    t = _num(obj, "t", where)
    model = _str(obj, "model", where)
    isl = _uint(obj, "in", where)
    osl = _uint(obj, "out", where)
    hashes = obj.get("hash_ids", [])
    if hashes is None or not isinstance(hashes, list) or any(
            isinstance(h, bool) or not isinstance(h, int) or not 0 <= h < 1 << 64 for h in hashes):
        _fail(where, "field 'hash_ids' must be a list of integers in [0, 2^64)")
    api = _num(obj, "api_time", where, required=False)
    r = _Req(t, model, isl, osl, list(hashes), api, where)
    if not math.isfinite(t) or t < 0:
        _fail(where, f"field 't' must be a finite timestamp >= 0 (s), got {t!r}")
    if not model.strip():
        _fail(where, "field 'model' must not be empty")
    if isl == 0:
        _fail(where, "field 'in' must be positive (a zero-length request)")
    if isl > _MAX_TOKENS or osl > _MAX_TOKENS:
        _fail(where, f"fields 'in' and 'out' must be at most {_MAX_TOKENS} tokens")
    if api is not None and (not math.isfinite(api) or api < 0):
        _fail(where, f"field 'api_time' must be finite and non-negative, got {api!r}")
    return r


@dataclass
class _Sub:
    t: float
    agent_id: str
    duration_ms: Optional[int]
    status: str
    requests: List[_Req]
    where: str


@dataclass
class _Trace:
    id: str
    models: List[str]
    block_size: int
    entries: list  # _Req or _Sub
    where: str


def _trace(obj, where):
    if not isinstance(obj, dict):
        _fail(where, "a Weka trace must be a JSON object")
    tid = _str(obj, "id", where)
    models = obj.get("models", [])
    if not isinstance(models, list) or any(not isinstance(m, str) for m in models):
        _fail(where, "field 'models' must be a list of strings")
    bs = _uint(obj, "block_size", where)
    scope = _str(obj, "hash_id_scope", where)
    reqs = obj.get("requests")
    if not isinstance(reqs, list):
        _fail(where, "field 'requests' must be a list")
    entries = []
    for i, e in enumerate(reqs):
        w = f"{where}.requests[{i}]"
        kind = e.get("type") if isinstance(e, dict) else None
        if kind in ("n", "s"):
            entries.append(_request(e, w))
        elif kind == "subagent":
            t = _num(e, "t", w)
            agent = _str(e, "agent_id", w)
            dur = e.get("duration_ms")
            if dur is not None and (isinstance(dur, bool) or not isinstance(dur, int)):
                _fail(w, f"field 'duration_ms' must be an integer, got {dur!r}")
            status = _str(e, "status", w)
            _str(e, "subagent_type", w)
            inner = e.get("requests")
            if not isinstance(inner, list):
                _fail(w, "field 'requests' must be a list")
            nested = []
            for j, q in enumerate(inner):
                wq = f"{w}.requests[{j}]"
                if not isinstance(q, dict) or q.get("type") not in ("n", "s"):
                    _fail(wq, "field 'type' must be \"n\" or \"s\" inside a subagent")
                nested.append(_request(q, wq))
            entries.append(_Sub(t, agent, dur, status, nested, w))
        else:
            _fail(w, f"field 'type' must be \"n\", \"s\" or \"subagent\", got {kind!r}")
    if not tid.strip():
        _fail(where, "field 'id' must not be empty")
    if bs == 0:
        _fail(where, "field 'block_size' must be positive")
    if scope != "local":
        _fail(where, f"field 'hash_id_scope' must be \"local\", got {scope!r}")
    declared = set(models)
    if any(not m.strip() for m in declared):
        _fail(where, "field 'models' declares an empty model")
    used = [r.model for r in entries if isinstance(r, _Req)] + [q.model for s in entries if isinstance(s, _Sub)
                                                                 for q in s.requests]
    if not used:
        _fail(where, "the trace has no model requests")
    if declared and not set(used) <= declared:
        _fail(where, f"requests use models {sorted(set(used) - declared)} absent from its 'models'")
    for s in entries:
        if isinstance(s, _Sub):
            if not math.isfinite(s.t) or s.t < 0:
                _fail(s.where, f"field 't' must be a finite timestamp >= 0 (s), got {s.t!r}")
            if not s.agent_id.strip():
                _fail(s.where, "field 'agent_id' must not be empty")
            if s.duration_ms is not None and s.duration_ms < 0:
                _fail(s.where, f"field 'duration_ms' must not be negative, got {s.duration_ms}")
            if s.status not in ("completed", "async_launched"):
                _fail(s.where, f"field 'status' must be \"completed\" or \"async_launched\", got {s.status!r} "
                      "(unsupported non-success subagent status)")
            if s.status == "completed" and not s.requests:
                _fail(s.where, "a blocking (completed) subagent needs replayable requests; external waits are "
                      "not modelled")
    return _Trace(tid, models, bs, entries, where)


def _source_files(path):
    if os.path.islink(path):
        raise InputError(f"Weka source may not be a symlink: {path}")
    if os.path.isfile(path):
        if not path.lower().endswith((".json", ".jsonl")):
            raise InputError(f"Weka source file must use a .json or .jsonl extension: {path}")
        return [(path, os.path.basename(path))]
    if not os.path.isdir(path):
        raise InputError(f"weka trace directory {path} does not exist")
    files = []

    def visit(d, rel):
        for name in sorted(os.listdir(d), key=lambda s: os.fsencode(s)):
            p = os.path.join(d, name)
            if os.path.islink(p):
                raise InputError(f"Weka corpus may not contain symlinks: {p}")
            if os.path.isdir(p):
                visit(p, rel + [name])
            elif os.path.isfile(p) and name.lower().endswith((".json", ".jsonl")):
                files.append((p, "/".join(rel + [name])))

    visit(path, [])
    files.sort(key=lambda f: f[1].encode("utf-8"))
    if not files:
        raise InputError(f"Weka source {path} contains no JSON or JSONL files")
    return files


def _traces_of(path, rel):
    from fastsim.workload import _open_text, trace_json_decoder

    text = _open_text(path)
    jsonl = path.lower().endswith(".jsonl")
    dec = trace_json_decoder()
    out, pos, k = [], 0, 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        if pos >= len(text):
            break
        if not jsonl and k > 0:
            raise InputError(f"{path}: a Weka JSON source holds one object; use a .jsonl extension for several")
        try:
            obj, pos = dec.raw_decode(text, pos)
        except ValueError as exc:
            raise InputError(f"{path}: object {k + 1} is not valid JSON ({exc})") from None
        name = f"{rel}#{k:06d}" if jsonl else rel
        out.append((_trace(obj, f"{path}{f' (object {k + 1})' if jsonl else ''}: $"), name))
        k += 1
    if not out:
        raise InputError(f"Weka source {path} contains no trace objects")
    return out


# ----------------------------------------------------------------------------- lowering
def _split_preamble(reqs):
    reqs = sorted(reqs, key=_order)
    if len(reqs) < 2 or not reqs[0].req.hashes:
        return [], reqs
    first = reqs[0].req
    if any(_lcp(first.hashes, o.req.hashes) > 0 for o in reqs[1:]):
        return [], reqs
    if first.osl > 64:
        others = {h for o in reqs[1:] for h in o.req.hashes}
        if any(h in others for h in first.hashes):
            return [], reqs
    return [reqs[0]], reqs[1:]


def _append(chains, ci, by_source, x):
    c = chains[ci]
    by_source[x.source_id] = ci
    if x.req.hashes:
        c.tail_source = x.source_id
        c.tail_hashes = list(x.req.hashes)
        c.tail_end = _end(x.req)
        c.tail_model = x.req.model
    c.requests.append(x)


def _extension_target(chains, r):
    best, best_len = None, 0
    for i, c in enumerate(chains):
        n = len(c.tail_hashes)
        if (n == 0 or n > len(r.hashes) or n <= best_len or c.tail_model != r.model
                or c.tail_end > r.t + _EPS or c.tail_hashes != r.hashes[:n]):
            continue
        best, best_len = i, n
    return best


def _max_lcp_chain(chains, hashes):
    best, key = None, (0, 0)
    for i, c in enumerate(chains):
        d = _lcp(c.tail_hashes, hashes)
        k = (d, len(c.tail_hashes))
        if d > 0 and k > key:
            best, key = i, k
    return best, key[0]


def _seam_eligible(c, tail):
    f = c.fork
    if f is None or f.depth == 0 or not c.requests:
        return False
    first = c.requests[0].req
    gap = first.t - _end(tail)
    overlap = f.depth / max(len(tail.hashes), 1)
    return (_end(tail) <= first.t + _EPS and first.model == tail.model
            and not (gap > _SEAM_MAX_GAP and overlap < _SEAM_MIN_OVERLAP))


def _resolve_seams(chains, forks_by_source, by_source, req_by_source):
    keys = set(forks_by_source)
    aliases, processed = {}, set()
    while keys:
        source = min(keys, key=lambda s: s.encode("utf-8"))
        keys.discard(source)
        if source in processed:
            continue
        processed.add(source)
        owner = by_source[source]
        while owner in aliases:
            owner = aliases[owner]
        if chains[owner].tail_source != source:
            continue
        tail = req_by_source[source]
        registered = [i for i in forks_by_source[source] if chains[i].spliced_into is None]
        eligible = [i for i in registered if _seam_eligible(chains[i], tail)]
        if not eligible:
            continue
        elected = max(eligible, key=lambda i: (chains[i].fork.depth, -chains[i].fork.time, -i))
        moved = chains[elected].requests
        chains[elected].requests = []
        for x in moved:
            by_source[x.source_id] = owner
        o, e = chains[owner], chains[elected]
        o.requests.extend(moved)
        o.tail_source, o.tail_hashes, o.tail_end, o.tail_model = e.tail_source, list(e.tail_hashes), e.tail_end, e.tail_model
        e.spliced_into = owner
        aliases[elected] = owner
        if o.tail_source is None:
            continue
        new_tail = req_by_source[o.tail_source]
        for cand in registered:
            if cand == elected or chains[cand].spliced_into is not None:
                continue
            first = chains[cand].requests[0].req
            if new_tail.t > first.t + _EPS:
                continue
            d = _lcp(o.tail_hashes, first.hashes)
            if d == 0:
                continue
            f = chains[cand].fork
            f.parent_chain, f.source_id, f.depth = owner, o.tail_source, d
            forks_by_source.setdefault(o.tail_source, []).append(cand)
            processed.discard(o.tail_source)
            keys.add(o.tail_source)


def _detect_chains(reqs):
    reqs = sorted(reqs, key=_order)
    chains: List[_Chain] = []
    by_source, forks_by_source, req_by_source = {}, {}, {}
    for x in reqs:
        req_by_source[x.source_id] = x.req
        if not x.req.hashes:
            if not chains:
                chains.append(_Chain())
            by_source[x.source_id] = 0
            chains[0].requests.append(x)
            continue
        if not chains:
            chains.append(_Chain())
            _append(chains, 0, by_source, x)
            continue
        t = _extension_target(chains, x.req)
        if t is not None:
            _append(chains, t, by_source, x)
            continue
        if all(not c.tail_hashes for c in chains):
            _append(chains, 0, by_source, x)
            continue
        parent, depth = _max_lcp_chain(chains, x.req.hashes)
        fork_source = chains[parent].tail_source if parent is not None else None
        ci = len(chains)
        chains.append(_Chain(fork=_Fork(parent, fork_source, depth, x.req.t)))
        _append(chains, ci, by_source, x)
        if fork_source is not None and depth > 0:
            forks_by_source.setdefault(fork_source, []).append(ci)
    _resolve_seams(chains, forks_by_source, by_source, req_by_source)
    live = [i for i, c in enumerate(chains) if c.spliced_into is None]
    main = min(live, key=lambda i: _order(chains[i].requests[0])) if live else 0
    workers = sorted((i for i in live if i != main), key=lambda i: _order(chains[i].requests[0]))
    return chains, main, workers


def _streams(ns, prefix, chains, main, workers, preamble):
    main_reqs = sorted(chains[main].requests + preamble, key=_order)
    f = chains[main].fork
    out = [_Stream(f"{ns}:session:{prefix}", main_reqs, f.source_id if f else None, f"{ns}:scope:{prefix}")]
    for k, ci in enumerate(workers):
        c = chains[ci]
        out.append(_Stream(f"{ns}:session:{prefix}:worker:{k}", sorted(c.requests, key=_order),
                           c.fork.source_id if c.fork else None, f"{ns}:scope:{prefix}"))
    return out


def _nested_t(inner_t, marker_t, relative, where):
    if relative:
        return marker_t + inner_t
    if inner_t < marker_t - _EPS:
        _fail(where, f"nested request at {inner_t} s precedes its subagent marker at {marker_t} s under the "
              "absolute nested timestamp basis (--weka-nested-timestamp-basis relative reads it from the marker)")
    return max(inner_t, marker_t)


def _sub_end(s, relative):
    if s.duration_ms is not None:
        return s.t + s.duration_ms / 1000.0
    end = s.t
    for q in s.requests:
        end = max(end, _nested_t(q.t, s.t, relative, q.where) + max(q.api_time or 0.0, 0.0))
    return end


def _push(deps, d):
    if not any(x.request_id == d.request_id and x.trigger == d.trigger and x.relation == d.relation for x in deps):
        deps.append(d)


def _frontiers(streams, row_of, deps):
    by_scope = {}
    for st in streams:
        by_scope.setdefault(st.scope, []).append(st)
    for scope in sorted(by_scope, key=lambda s: s.encode("utf-8")):
        group = by_scope[scope]
        for target_stream in group:
            for target in target_stream.requests:
                frontier = []
                for other in group:
                    if other is target_stream:
                        continue
                    cands = [c for c in other.requests
                             if c.req.t < target.req.t and _end(c.req) <= target.req.t + _EPS]
                    if cands:
                        frontier.append(max(cands, key=lambda c: (_end(c.req), c.req.t, c.source_id.encode("utf-8"))))
                pruned = [c for c in frontier
                          if not any(c.req.t < later.req.t and _end(c.req) <= later.req.t + _EPS for later in frontier)]
                for p in pruned:
                    _push(deps.setdefault(target.source_id, []),
                          Dependency(row_of[p.source_id], COMPLETION, 0.0, "replay_barrier", target.req.where))


def _lower(trace, name, relative, hash_ids_of):
    ns = "weka:" + blake3_hex(name.encode("utf-8"))[:16]
    play = f"{ns}:play:{trace.id}"
    top, explicit = [], []
    for i, e in enumerate(trace.entries):
        if isinstance(e, _Req):
            top.append(_Indexed(f"outer:{i}", i, e))
        else:
            explicit.append((i, e))
    if not top:
        _fail(trace.where, "the trace has no parent requests")
    preamble, rest = _split_preamble(top)
    chains, main, workers = _detect_chains(rest)
    streams = _streams(ns, "root", chains, main, workers, preamble)
    root_index = next(i for i, st in enumerate(streams) if st.session_id.endswith(":root"))
    n_parent = len(streams)
    joins = []
    for outer, sub in explicit:
        owner = None
        for si, st in enumerate(streams[:n_parent]):
            for x in st.requests:
                if x.order < outer and (owner is None or x.order > owner[1].order):
                    owner = (si, x)
        if owner is None:
            _fail(sub.where, f"subagent {sub.agent_id!r} has no parent request before it")
        inner = []
        for j, q in enumerate(sub.requests):
            t = _nested_t(q.t, sub.t, relative, q.where)
            inner.append(_Indexed(f"outer:{outer}:inner:{j}", j, _Req(t, q.model, q.isl, q.osl, q.hashes,
                                                                       q.api_time, q.where)))
        if not inner:
            continue
        pre, rest_in = _split_preamble(inner)
        c_chains, c_main, c_workers = _detect_chains(rest_in)
        prefix = f"subagent:{outer}:{sub.agent_id}"
        child = _streams(ns, prefix, c_chains, c_main, c_workers, pre)
        root = next(st for st in child if st.session_id.endswith(f":{prefix}"))
        root.fork_source = owner[1].source_id
        root.scope = root.session_id
        for st in child:
            st.scope = root.scope
        join_source = None
        if sub.status == "completed":
            end = _sub_end(sub, relative)
            later = [x for x in streams[owner[0]].requests if x.order > outer and x.req.t + _EPS >= end]
            if later:
                join_source = min(later, key=lambda x: x.order).source_id
        streams.extend(child)
        if join_source is not None:
            terminals = [st.requests[-1].source_id for st in child if st.requests]
            if terminals:
                joins.append((join_source, terminals))
    root_time = min(x.req.t for st in streams for x in st.requests)
    row_of, by_source = {}, {}
    for st in streams:
        for x in st.requests:
            row_of[x.source_id] = f"{ns}:request:{x.source_id}"
            by_source[x.source_id] = x
    root_source = streams[root_index].requests[0].source_id
    deps = {}
    for st in streams:
        for a, b in zip(st.requests, st.requests[1:]):
            _push(deps.setdefault(b.source_id, []),
                  Dependency(row_of[a.source_id], COMPLETION, _ms(b.req.t - _end(a.req)), "sequence", b.req.where))
    for st in streams:
        if not st.requests or st.fork_source is None:
            continue
        first = st.requests[0]
        parent = next((x for s2 in streams for x in s2.requests if x.source_id == st.fork_source), None)
        if parent is None:
            _fail(trace.where, f"spawn source {st.fork_source} is missing")
        if first.req.t < _end(parent.req):
            dep = Dependency(row_of[st.fork_source], DISPATCH, _ms(first.req.t - parent.req.t), "spawn", first.req.where)
        else:
            dep = Dependency(row_of[st.fork_source], COMPLETION, _ms(first.req.t - _end(parent.req)), "spawn",
                             first.req.where)
        _push(deps.setdefault(first.source_id, []), dep)
    _frontiers(streams, row_of, deps)
    for target_id, terminals in joins:
        target = by_source[target_id]
        for term_id in terminals:
            term = by_source[term_id]
            gap = target.req.t - _end(term.req)
            if gap < -_EPS:
                _fail(target.req.where, f"joins subagent terminal {term_id}, which ends {-gap} s after it starts: the "
                      "subagent's duration_ms understates its own requests")
            _push(deps.setdefault(target_id, []),
                  Dependency(row_of[term_id], COMPLETION, _ms(gap), "join", target.req.where))
    root_stream = streams[root_index]
    for st in streams:
        if not st.requests:
            continue
        first = st.requests[0]
        if first.source_id == root_source or deps.get(first.source_id):
            continue
        _push(deps.setdefault(first.source_id, []),
              Dependency(row_of[root_source], DISPATCH, _ms(first.req.t - root_stream.requests[0].req.t), "spawn",
                         first.req.where))
    nodes = []
    for st in streams:
        for x in st.requests:
            rid = row_of[x.source_id]
            nodes.append(Node(rid, play, st.session_id, x.req.model, x.req.isl, x.req.osl,
                              hash_ids_of(name, rid, x.req, trace.block_size), _ms(x.req.t - root_time),
                              deps.get(x.source_id, []), line=0, where=x.req.where))
    total = sum(1 if isinstance(e, _Req) else len(e.requests) for e in trace.entries)
    if len(nodes) != total:
        _fail(trace.where, "not every request was lowered (orphan subagents are not supported)")
    return nodes


def load_weka(path, basis=None, arrival_speedup_ratio=1.0):
    """Read a Weka corpus into a Workload with its request graph; ``basis`` is
    ``--weka-nested-timestamp-basis`` (None: auto)."""
    from fastsim.workload import _check_ratio

    path = os.fspath(path)
    ratio = _check_ratio(arrival_speedup_ratio)
    basis = basis or "auto"
    traces = [tr for p, rel in _source_files(path) for tr in _traces_of(p, rel)]
    bs = traces[0][0].block_size
    for tr, _ in traces:
        if tr.block_size != bs:
            _fail(tr.where, f"block_size {tr.block_size} differs from {bs} ({traces[0][0].where}): a corpus has one")
    witness = any(q.t < s.t - _EPS for tr, _ in traces for s in tr.entries if isinstance(s, _Sub) for q in s.requests)
    replayable = any(s.requests for tr, _ in traces for s in tr.entries if isinstance(s, _Sub))
    if basis == "auto":
        resolved = "not_applicable" if not replayable else ("relative" if witness else "absolute")
    else:
        resolved = basis
    relative = resolved == "relative"
    ids = {}

    def hash_ids_of(name, rid, r, block):
        full, partial = divmod(r.isl, block)
        out = []
        for j in range(full):
            key = ("full", f"source:{name}:{r.hashes[j]}") if j < len(r.hashes) else ("full", f"private:missing:{rid}:{j}")
            out.append(ids.setdefault(key, len(ids)))
        if partial:
            out.append(ids.setdefault(("tail", f"{rid}:{full}:{r.isl}"), len(ids)))
        return out

    nodes, order = [], []
    for tr, name in traces:
        lowered = _lower(tr, name, relative, hash_ids_of)
        order.append(lowered[0].play_id)
        nodes.extend(lowered)
    for nd in nodes:
        nd.not_before_ms /= ratio
        for d in nd.dependencies:
            d.delay_ms /= ratio
    graph, cols = build_graph(nodes, bs, "weka", None, path, play_order=order)
    graph.extra_report["weka_nested_timestamp_basis"] = resolved
    return graph_workload(graph, cols, path, ratio)
