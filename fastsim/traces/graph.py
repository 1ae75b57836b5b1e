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
from typing import List, Optional

import numpy as np

from fastsim.errors import InputError

__all__ = ["Dependency", "Node", "AgenticGraph", "build_graph", "COMPLETION", "DISPATCH"]

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


def _fail(where, msg):
    raise InputError(f"{where}: {msg}" if where else msg)


def build_graph(nodes: List[Node], block_size: int, source_format: str, source_digest: str, path: str,
                play_order: Optional[List[str]] = None):
    """Check ``nodes`` as Dynamo does and number them; returns (graph, per-row arrays dict with
    ``isl``, ``osl``, ``hash_ptr``, ``hash_ids``, ``line``). Errors name the node's position.
    ``play_order``: the plays in their source order (default: ``play_id`` order)."""
    if not nodes:
        raise InputError(f"{path}: agentic trace did not contain any requests")
    seen = {}
    for nd in nodes:
        if nd.request_id in seen:
            _fail(nd.where, f"duplicates request_id {nd.request_id!r} (first at {seen[nd.request_id]})")
        seen[nd.request_id] = nd.where
    nodes = sorted(nodes, key=lambda nd: nd.request_id.encode("utf-8"))  # Rust's String order: bytes
    index = {nd.request_id: i for i, nd in enumerate(nodes)}
    n = len(nodes)
    if play_order is None:
        plays = sorted({nd.play_id for nd in nodes}, key=lambda s: s.encode("utf-8"))
    else:
        plays = list(dict.fromkeys(play_order))
    play_index = {p: i for i, p in enumerate(plays)}
    play = np.array([play_index[nd.play_id] for nd in nodes], dtype=np.int64)
    src, dst, delay, trig = [], [], [], []
    parent: List[Optional[str]] = [None] * n
    for i, nd in enumerate(nodes):
        for dep in nd.dependencies:
            j = index.get(dep.request_id)
            if j is None:
                _fail(dep.where or nd.where, f"request {nd.request_id!r} depends on request_id "
                      f"{dep.request_id!r}, which is not in the trace")
            if j == i:
                _fail(dep.where or nd.where, f"request {nd.request_id!r} cannot depend on itself")
            if nodes[j].play_id != nd.play_id:
                _fail(dep.where or nd.where, f"request {nd.request_id!r} in play {nd.play_id!r} depends on "
                      f"request {dep.request_id!r} in play {nodes[j].play_id!r}; dependencies stay in their play")
            src.append(j)
            dst.append(i)
            delay.append(dep.delay_ms)
            trig.append(dep.trigger)
            if dep.relation == "spawn" and parent[i] is None:
                parent[i] = dep.request_id
    ndeps = np.array([len(nd.dependencies) for nd in nodes], dtype=np.int64)
    src_a = np.array(src, dtype=np.int64)
    order = np.argsort(src_a, kind="stable")
    out_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src_a, minlength=n), out=out_ptr[1:])
    out_row = np.array(dst, dtype=np.int64)[order]
    out_delay = np.array(delay, dtype=np.float64)[order]
    out_trigger = np.array(trig, dtype=np.int8)[order]
    _check_acyclic(nodes, ndeps, out_ptr, out_row)
    play_rows = np.argsort(play, kind="stable").astype(np.int64)
    play_ptr = np.zeros(len(plays) + 1, dtype=np.int64)
    np.cumsum(np.bincount(play, minlength=len(plays)), out=play_ptr[1:])
    nb = np.array([nd.not_before_ms for nd in nodes], dtype=np.float64)
    root_min = np.full(len(plays), np.inf)
    for p in range(len(plays)):
        rows = play_rows[play_ptr[p]:play_ptr[p + 1]]
        roots = rows[ndeps[rows] == 0]
        if roots.shape[0] == 0:
            first = nodes[int(rows[0])]
            _fail(first.where, f"play {plays[p]!r} has no root request (every request waits for another), "
                  "so it can never start")
        root_min[p] = nb[roots].min()
    root_of_play = {}
    for i in range(n):  # the first root (in request_id order) names its play's root
        if ndeps[i] == 0:
            root_of_play.setdefault(int(play[i]), nodes[i].request_id)
    graph = AgenticGraph(
        request_ids=[nd.request_id for nd in nodes], play_ids=plays, play=play,
        session_names=[nd.session_id for nd in nodes],
        root_ids=[root_of_play[int(play[i])] for i in range(n)], parent_ids=parent,
        not_before_ms=nb, ndeps=ndeps, out_ptr=out_ptr, out_row=out_row, out_delay=out_delay,
        out_trigger=out_trigger, play_ptr=play_ptr, play_rows=play_rows, play_root_min=root_min,
        block_size=int(block_size), source_format=source_format, source_digest=source_digest,
        source_models=sorted({nd.model for nd in nodes}),
    )
    counts = np.array([len(nd.hash_ids) for nd in nodes], dtype=np.int64)
    hash_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=hash_ptr[1:])
    ids = [h for nd in nodes for h in nd.hash_ids]
    hash_ids = np.array([h - (1 << 64) if h >= 1 << 63 else h for h in ids], dtype=np.int64)
    cols = dict(isl=np.array([nd.input_length for nd in nodes], dtype=np.int64),
                osl=np.array([nd.output_length for nd in nodes], dtype=np.int64),
                hash_ptr=hash_ptr, hash_ids=hash_ids,
                line=np.array([nd.line for nd in nodes], dtype=np.int64))
    return graph, cols


def _check_acyclic(nodes, ndeps, out_ptr, out_row):
    """Kahn's algorithm; a cycle is an error naming (up to 8 of) the requests on or behind it."""
    indeg = ndeps.copy()
    stack = list(np.flatnonzero(indeg == 0))
    seen = 0
    while stack:
        i = stack.pop()
        seen += 1
        for k in range(out_ptr[i], out_ptr[i + 1]):
            j = out_row[k]
            indeg[j] -= 1
            if indeg[j] == 0:
                stack.append(j)
    if seen != len(nodes):
        blocked = [nodes[i] for i in np.flatnonzero(indeg > 0)]
        names = ", ".join(repr(nd.request_id) for nd in blocked[:8])
        _fail(blocked[0].where, f"dependency cycle among {len(blocked)} agentic requests ({names}): "
              "none of them can ever start")


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

