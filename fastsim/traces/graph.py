"""Agentic request graphs: the workload shape Dynamo 1.6.1 gives every agentic trace format.

An agentic trace is a set of *plays* (one agent run each). A play is a DAG of requests (*nodes*):
a node arrives once every one of its dependencies has fired, each after its own delay, and not
before its own ``not_before_ms``. A dependency fires when its source request is *dispatched*
(``trigger: dispatch``, a sub-agent spawned as its parent starts) or when it *completes*
(``trigger: completion``: the next turn of a conversation, a join). Every node is a full prompt
of trace hash ids (no context is carried over by the simulator: a conversation's next turn repeats
its history as hash ids, which the prefix cache then finds).

Dynamo's rules, settled by experiment on Dynamo 1.6.1 (``docs/decisions/0300-agentic-graphs.md``):

* nodes are numbered in ``request_id`` order (string order): that is the order of the per-request
  records, of their uuids (numbered from 1), and the tie-break of equal arrival times;
* plays are taken in ``play_id`` order;
* open replay (no lanes): a node's earliest time is its ``not_before_ms`` minus the smallest
  ``not_before_ms`` of the trace;
* ``agentic_lanes`` N: N plays run at a time; a play starts on a free lane when the previous play
  there settles (its last request ends), and its nodes' earliest times count from that start, less
  the smallest ``not_before_ms`` of the play's roots;
* arrival = max(earliest time, over the dependencies: the source's dispatch or completion time plus
  the dependency's delay).

:class:`AgenticGraph` carries the arrays the compiled loop reads (``kernels/agentic.py``) and the
names the report writes. Loaders build one with :func:`build_graph` from a list of :class:`Node`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, List, Optional

import numpy as np

from fastsim.errors import InputError

__all__ = ["Dependency", "Node", "NodeColumns", "AgenticGraph", "build_graph", "build_graph_columns",
           "COMPLETION", "DISPATCH"]

COMPLETION, DISPATCH = 0, 1


@dataclass
class Dependency:
    """One dependency of a node: on ``request_id``'s ``trigger`` (COMPLETION or DISPATCH), after
    ``delay_ms``; ``relation`` is Dynamo's label (sequence, spawn, join, replay_barrier)."""

    request_id: str
    trigger: int
    delay_ms: float
    relation: str
    where: str = ""  # the source position, for errors


@dataclass
class Node:
    """One request of an agentic trace, as a loader read it."""

    request_id: str
    play_id: str
    session_id: str
    model: str
    input_length: int
    output_length: int
    hash_ids: List[int]
    not_before_ms: float
    dependencies: List[Dependency]
    line: int = 0  # source line (0: none)
    where: str = ""  # the source position, for errors ("file:line" or "file:$.requests[3]")
    ordinal: Optional[int] = None  # the play's source_play_ordinal, if the trace orders its plays


@dataclass(eq=False)
class AgenticGraph:
    """The dependency structure of an agentic workload (row = node, in ``request_id`` order)."""

    request_ids: List[str]
    play_ids: List[str]  # by play index (play order)
    play: np.ndarray  # int64[n]: play index of each row
    session_names: List[str]  # by row: the conversation (``session_id``)
    root_ids: List[str]  # by row: the first root of its play
    parent_ids: List[Optional[str]]  # by row: the source of its ``spawn`` dependency, if any
    not_before_ms: np.ndarray  # float64[n], as given (after the speed-up)
    ndeps: np.ndarray  # int64[n]
    out_ptr: np.ndarray  # int64[n + 1]: CSR of each row's dependents
    out_row: np.ndarray  # int64[m]
    out_delay: np.ndarray  # float64[m]
    out_trigger: np.ndarray  # int8[m]
    play_ptr: np.ndarray  # int64[P + 1]: CSR of each play's rows
    play_rows: np.ndarray  # int64[n]
    play_root_min: np.ndarray  # float64[P]: smallest not_before_ms of the play's roots
    block_size: int
    source_format: str
    source_digest: str
    source_models: List[str]
    lanes: int = 0  # 0: open replay; set per run (``with_lanes``)
    extra_report: dict = field(default_factory=dict)  # e.g. weka_nested_timestamp_basis

    @property
    def n_plays(self) -> int:
        return len(self.play_ids)

    def with_lanes(self, lanes) -> "AgenticGraph":
        """A copy that runs ``lanes`` plays at a time (None: open replay)."""
        if lanes is None:
            return dataclasses.replace(self, lanes=0)
        if isinstance(lanes, bool) or not isinstance(lanes, (int, np.integer)):
            raise InputError(f"agentic_lanes must be an integer or None, got {lanes!r}")
        if lanes < 1:
            raise InputError("agentic_lanes must be at least 1")
        return dataclasses.replace(self, lanes=int(lanes))


@dataclass
class NodeColumns:
    """The requests of an agentic trace as columns, in file order (what :func:`build_graph_columns`
    takes: the columnar reader fills it directly, :func:`build_graph` from a list of :class:`Node`)."""

    request_id: List[str]
    play_id: List[str]
    session_id: List[str]
    model: List[str]
    isl: np.ndarray  # int64[n]
    osl: np.ndarray  # int64[n]
    hash_ptr: np.ndarray  # int64[n + 1]: CSR of each request's hash ids
    hash_ids: np.ndarray  # int64: the u64 ids, two's complement
    not_before_ms: np.ndarray  # float64[n]
    line: np.ndarray  # int64[n]: source line (0: none)
    dep_ptr: np.ndarray  # int64[n + 1]: CSR of each request's dependencies
    dep_request_id: List[str]
    dep_trigger: np.ndarray  # int8: COMPLETION or DISPATCH
    dep_delay_ms: np.ndarray  # float64
    dep_spawn: np.ndarray  # bool: relation "spawn"
    where: Callable[[int], str]  # request -> its source position, for errors
    dep_where: Callable[[int, int], str]  # (request, k) -> its k-th dependency's position
    ordinal: Optional[List[Optional[int]]] = None  # source_play_ordinal of each request (None: not given)


def columns_of_nodes(nodes: List[Node]) -> NodeColumns:
    """The columns of a list of nodes (file order kept)."""
    deps = [d for nd in nodes for d in nd.dependencies]
    counts = np.array([len(nd.dependencies) for nd in nodes], dtype=np.int64)
    dep_ptr = np.zeros(len(nodes) + 1, dtype=np.int64)
    np.cumsum(counts, out=dep_ptr[1:])
    hcounts = np.array([len(nd.hash_ids) for nd in nodes], dtype=np.int64)
    hash_ptr = np.zeros(len(nodes) + 1, dtype=np.int64)
    np.cumsum(hcounts, out=hash_ptr[1:])
    ids = [h for nd in nodes for h in nd.hash_ids]
    return NodeColumns(
        request_id=[nd.request_id for nd in nodes], play_id=[nd.play_id for nd in nodes],
        session_id=[nd.session_id for nd in nodes], model=[nd.model for nd in nodes],
        isl=np.array([nd.input_length for nd in nodes], dtype=np.int64),
        osl=np.array([nd.output_length for nd in nodes], dtype=np.int64),
        hash_ptr=hash_ptr,
        hash_ids=np.array([h - (1 << 64) if h >= 1 << 63 else h for h in ids], dtype=np.int64),
        not_before_ms=np.array([nd.not_before_ms for nd in nodes], dtype=np.float64),
        line=np.array([nd.line for nd in nodes], dtype=np.int64),
        dep_ptr=dep_ptr, dep_request_id=[d.request_id for d in deps],
        dep_trigger=np.array([d.trigger for d in deps], dtype=np.int8),
        dep_delay_ms=np.array([d.delay_ms for d in deps], dtype=np.float64),
        dep_spawn=np.array([d.relation == "spawn" for d in deps], dtype=bool),
        where=lambda i: nodes[i].where,
        dep_where=lambda i, k: nodes[i].dependencies[k].where or nodes[i].where,
        ordinal=[nd.ordinal for nd in nodes] if any(nd.ordinal is not None for nd in nodes) else None,
    )


def _fail(where, msg):
    raise InputError(f"{where}: {msg}" if where else msg)


def build_graph(nodes: List[Node], block_size: int, source_format: str, source_digest: str, path: str,
                play_order: Optional[List[str]] = None):
    """:func:`build_graph_columns` of a list of nodes."""
    if not nodes:
        raise InputError(f"{path}: agentic trace did not contain any requests")
    return build_graph_columns(columns_of_nodes(nodes), block_size, source_format, source_digest, path,
                               play_order)


def build_graph_columns(c: NodeColumns, block_size: int, source_format: str, source_digest: str, path: str,
                        play_order: Optional[List[str]] = None):
    """Check the requests ``c`` as Dynamo does and number them; returns (graph, per-row arrays dict
    with ``isl``, ``osl``, ``hash_ptr``, ``hash_ids``, ``line``). Errors name the request's
    position. ``play_order``: the plays in their source order (default: ``play_id`` order)."""
    n = len(c.request_id)
    if n == 0:
        raise InputError(f"{path}: agentic trace did not contain any requests")
    if len(set(c.request_id)) != n:
        seen = {}
        for i, rid in enumerate(c.request_id):
            if rid in seen:
                _fail(c.where(i), f"duplicates request_id {rid!r} (first at {seen[rid]})")
            seen[rid] = c.where(i)
    # Rust's String order is the UTF-8 bytes' order, which is Python's code point order
    order = np.array(sorted(range(n), key=c.request_id.__getitem__), dtype=np.int64)
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n, dtype=np.int64)
    request_ids = [c.request_id[i] for i in order]
    index = {rid: r for r, rid in enumerate(request_ids)}
    if play_order is None:
        plays = sorted(set(c.play_id))
    else:
        plays = list(dict.fromkeys(play_order))
    play_index = {p: i for i, p in enumerate(plays)}
    play = np.array([play_index[p] for p in c.play_id], dtype=np.int64)[order]

    # edges in (dependent's row, dependency position) order, as the checks and the CSR take them
    counts = np.diff(c.dep_ptr)
    dst_file = rank[np.repeat(np.arange(n, dtype=np.int64), counts)]
    edge = np.argsort(dst_file, kind="stable")
    dst = dst_file[edge]
    src = np.array([index.get(c.dep_request_id[k], -1) for k in edge.tolist()], dtype=np.int64)
    bad = (src < 0) | (src == dst)
    bad |= np.where(src >= 0, play[np.maximum(src, 0)] != play[dst], False)
    if bad.any():
        _edge_error(c, order, play, plays, edge, src, dst, int(np.flatnonzero(bad)[0]))
    parent: List[Optional[str]] = [None] * n
    for k in np.flatnonzero(c.dep_spawn[edge]).tolist():  # the first spawn dependency names the parent
        if parent[dst[k]] is None:
            parent[dst[k]] = c.dep_request_id[edge[k]]
    ndeps = counts[order].astype(np.int64)
    by_src = np.argsort(src, kind="stable")
    out_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=out_ptr[1:])
    out_row = dst[by_src]
    out_delay = c.dep_delay_ms[edge][by_src].astype(np.float64)
    out_trigger = c.dep_trigger[edge][by_src].astype(np.int8)
    _check_acyclic(c, order, request_ids, ndeps, out_ptr, out_row)
    play_rows = np.argsort(play, kind="stable").astype(np.int64)
    play_ptr = np.zeros(len(plays) + 1, dtype=np.int64)
    np.cumsum(np.bincount(play, minlength=len(plays)), out=play_ptr[1:])
    nb = c.not_before_ms[order].astype(np.float64)
    root = ndeps == 0
    root_min = np.minimum.reduceat(np.where(root, nb, np.inf)[play_rows], play_ptr[:-1])
    has_root = np.logical_or.reduceat(root[play_rows], play_ptr[:-1])
    if not has_root.all():
        p = int(np.flatnonzero(~has_root)[0])
        _fail(c.where(int(order[play_rows[play_ptr[p]]])), f"play {plays[p]!r} has no root request (every "
              "request waits for another), so it can never start")
    roots = np.flatnonzero(root)  # the first root (in request_id order) names its play's root
    first_play, first_at = np.unique(play[roots], return_index=True)
    root_row = np.empty(len(plays), dtype=np.int64)
    root_row[first_play] = roots[first_at]
    root_ids = [request_ids[r] for r in root_row[play].tolist()]
    graph = AgenticGraph(
        request_ids=request_ids, play_ids=plays, play=play,
        session_names=[c.session_id[i] for i in order], root_ids=root_ids, parent_ids=parent,
        not_before_ms=nb, ndeps=ndeps, out_ptr=out_ptr, out_row=out_row, out_delay=out_delay,
        out_trigger=out_trigger, play_ptr=play_ptr, play_rows=play_rows, play_root_min=root_min,
        block_size=int(block_size), source_format=source_format, source_digest=source_digest,
        source_models=sorted(set(c.model)),
    )
    hcounts = np.diff(c.hash_ptr)[order]
    hash_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(hcounts, out=hash_ptr[1:])
    take = np.repeat(c.hash_ptr[:-1][order] - hash_ptr[:-1], hcounts) + np.arange(hash_ptr[-1], dtype=np.int64)
    cols = dict(isl=c.isl[order].astype(np.int64), osl=c.osl[order].astype(np.int64),
                hash_ptr=hash_ptr, hash_ids=c.hash_ids[take].astype(np.int64),
                line=c.line[order].astype(np.int64))
    return graph, cols


def _edge_error(c, order, play, plays, edge, src, dst, k):
    """The error of edge ``k`` (in dependent-row order): the first bad dependency of the trace."""
    i = int(order[dst[k]])
    ko = int(edge[k]) - int(c.dep_ptr[i])
    where = c.dep_where(i, ko)
    rid, dep = c.request_id[i], c.dep_request_id[int(edge[k])]
    if src[k] < 0:
        _fail(where, f"request {rid!r} depends on request_id {dep!r}, which is not in the trace")
    if src[k] == dst[k]:
        _fail(where, f"request {rid!r} cannot depend on itself")
    _fail(where, f"request {rid!r} in play {c.play_id[i]!r} depends on request {dep!r} in play "
          f"{plays[play[src[k]]]!r}; dependencies stay in their play")


def _check_acyclic(c, order, request_ids, ndeps, out_ptr, out_row):
    """Kahn's algorithm; a cycle is an error naming (up to 8 of) the requests on or behind it.
    Level by level with arrays while many requests free at once (a trace of many plays), then
    one by one (a long chain)."""
    indeg = ndeps.copy()
    frontier = np.flatnonzero(indeg == 0)
    seen = 0
    while frontier.shape[0] >= 64:
        seen += frontier.shape[0]
        lo = out_ptr[frontier]
        count = out_ptr[frontier + 1] - lo
        total = int(count.sum())
        ends = np.cumsum(count)
        targets = out_row[np.repeat(lo - (ends - count), count) + np.arange(total, dtype=np.int64)]
        hit, times = np.unique(targets, return_counts=True)
        indeg[hit] -= times
        frontier = hit[indeg[hit] == 0]
    if frontier.shape[0]:
        deg = indeg.tolist()
        ptr = out_ptr.tolist()
        dst = out_row.tolist()
        stack = frontier.tolist()
        while stack:
            i = stack.pop()
            seen += 1
            for k in range(ptr[i], ptr[i + 1]):
                j = dst[k]
                deg[j] -= 1
                if deg[j] == 0:
                    stack.append(j)
        indeg = np.array(deg, dtype=np.int64)
    if seen != indeg.shape[0]:
        blocked = np.flatnonzero(indeg > 0).tolist()
        names = ", ".join(repr(request_ids[i]) for i in blocked[:8])
        _fail(c.where(int(order[blocked[0]])), f"dependency cycle among {len(blocked)} agentic requests "
              f"({names}): none of them can ever start")


def graph_workload(graph: AgenticGraph, cols: dict, path: str, ratio: float = 1.0):
    """The Workload of a graph: one single-turn session per node (arrivals come from the graph)."""
    from fastsim.workload import Workload

    n = cols["isl"].shape[0]
    nb = graph.not_before_ms
    start = nb - nb.min() if n else nb
    rows = np.arange(n, dtype=np.int64)
    return Workload(
        isl=cols["isl"], osl=cols["osl"], session=rows.copy(), turn=np.zeros(n, dtype=np.int64),
        delay_ms=np.zeros(n), session_arrival_ms=np.asarray(start, dtype=np.float64),
        session_ptr=np.arange(n + 1, dtype=np.int64), session_rows=rows.copy(),
        hash_ptr=cols["hash_ptr"], hash_ids=cols["hash_ids"], trace_block_size=graph.block_size,
        line=cols["line"], source=path, graph=graph,
    )

