"""Arrivals released by an agentic request graph (the rules: ``fastsim/traces/graph.py``).

Every node of the graph is a one-turn session whose arrival goes through the loop's arrival heap
(``Sessions.heap``, ordered by time then row, as Dynamo orders ready requests by time then node),
but for the roots of an open replay, whose times are known from the start: they are the loop's
static arrivals (``Sessions.order``, in time then row order, merged with the heap by the same
rule), which keeps the heap to the requests released and not yet arrived.
A node enters the heap when its play has started and its last dependency has fired; its time is
the latest of its play-relative earliest time and each dependency's firing time plus delay.
Dependencies fire when their source is dispatched (taken from the heap) or ends. A request that
is rejected (``max_model_len``) fails its play, as in Dynamo 1.6.1: every node of the play not yet
dispatched is cancelled (the caller takes them off the arrival heap and the static arrivals),
while the ones in flight run to their end. With lanes, a play that settles (its last node ends or
is cancelled) hands its lane to the next play at once.

A workload without a graph has an empty :class:`Graph` (``play`` of length 0): every hook returns
at its first test.
"""

from typing import NamedTuple

import numpy as np

from fastsim.kernels.heap import heap_push_nb
from fastsim.kernels.jit import inline, inner

_DISPATCH = 1
# a node's fate
PENDING, DISPATCHED, CANCELLED = 0, 1, 2


class Graph(NamedTuple):
    """Dependency state of an agentic workload (row = node)."""

    lanes: int  # plays at a time; 0: every play at its trace time
    play: np.ndarray  # int64[n]: play of each row (empty: no graph)
    ndeps: np.ndarray  # int64[n]: dependencies not yet fired
    ready: np.ndarray  # float64[n]: the latest firing time plus delay so far (-inf: none)
    rel: np.ndarray  # float64[n]: earliest time, relative to the play's start
    out_ptr: np.ndarray  # int64[n + 1]: CSR of each row's dependents
    out_row: np.ndarray  # int64[m]
    out_delay: np.ndarray  # float64[m]
    out_trigger: np.ndarray  # int8[m]: 0 completion, 1 dispatch
    play_ptr: np.ndarray  # int64[P + 1]: CSR of each play's rows
    play_rows: np.ndarray  # int64[n]
    left: np.ndarray  # int64[P]: nodes of the play not ended
    start: np.ndarray  # float64[P]: when the play started (NaN: not yet)
    settled: np.ndarray  # float64[P]: when its last node ended (NaN: not yet)
    lane: np.ndarray  # int64[P]: its lane (-1: open replay)
    next_play: np.ndarray  # int64[1]: the next play a freed lane takes
    fate: np.ndarray  # int64[n + 1]: PENDING, DISPATCHED or CANCELLED; the last slot counts the cancelled


@inner
def _push(ss, count, slot, r, t):
    ss.ready_at[r] = t
    heap_push_nb(ss.heap, count, slot, ss.ready_at, ss.tie, r)


@inner
def _start_play(ss, count, slot, p, t, lane):
    gr = ss.graph
    gr.start[p] = t
    gr.lane[p] = lane
    for k in range(gr.play_ptr[p], gr.play_ptr[p + 1]):
        r = gr.play_rows[k]
        e = t + gr.rel[r]
        if e > gr.ready[r]:
            gr.ready[r] = e
        if gr.ndeps[r] == 0 and gr.lanes > 0:  # (open replay: the roots are static arrivals)
            _push(ss, count, slot, r, gr.ready[r])


@inner
def graph_start_nb(ss, count, slot):
    """Start the first plays at 0: every play (open replay) or one per lane."""
    gr = ss.graph
    n_plays = gr.play_ptr.shape[0] - 1
    first = n_plays if gr.lanes == 0 else min(gr.lanes, n_plays)
    for p in range(first):
        _start_play(ss, count, slot, p, 0.0, -1 if gr.lanes == 0 else p)
    gr.next_play[0] = first


@inner
def _fire(ss, count, slot, r, t, trigger):
    """Row ``r`` was dispatched or ended (``trigger``) at ``t``: its dependents of that trigger."""
    gr = ss.graph
    for k in range(gr.out_ptr[r], gr.out_ptr[r + 1]):
        if gr.out_trigger[k] != trigger:
            continue
        d = gr.out_row[k]
        e = t + gr.out_delay[k]
        if e > gr.ready[d]:
            gr.ready[d] = e
        gr.ndeps[d] -= 1
        if gr.ndeps[d] == 0 and gr.fate[d] != CANCELLED:
            _push(ss, count, slot, d, gr.ready[d])


@inner
def graph_dispatched_nb(ss, count, slot, r, t):
    """Row ``r`` arrived (was dispatched) at ``t``."""
    if ss.graph.play.shape[0] == 0:
        return
    ss.graph.fate[r] = DISPATCHED
    _fire(ss, count, slot, r, t, _DISPATCH)


@inner
def _cancel_play(gr, p):
    """Play ``p`` failed: its nodes not yet dispatched are cancelled."""
    n = gr.play.shape[0]
    for k in range(gr.play_ptr[p], gr.play_ptr[p + 1]):
        c = gr.play_rows[k]
        if gr.fate[c] == PENDING:
            gr.fate[c] = CANCELLED
            gr.fate[n] += 1
            gr.left[p] -= 1


@inner
def graph_rejected_nb(ss, r):
    """Row ``r`` is rejected: its play fails (called before ``graph_ended_nb``, whose completion
    dependents are then all cancelled)."""
    _cancel_play(ss.graph, ss.graph.play[r])


@inner
def graph_ended_nb(ss, count, slot, r, t):
    """Row ``r`` ended at ``t``: its completion dependents (but cancelled ones), and its play's
    settlement."""
    gr = ss.graph
    _fire(ss, count, slot, r, t, 0)
    p = gr.play[r]
    gr.left[p] -= 1
    if gr.left[p] == 0:
        gr.settled[p] = t
        if gr.lanes > 0 and gr.next_play[0] < gr.play_ptr.shape[0] - 1:
            _start_play(ss, count, slot, gr.next_play[0], t, gr.lane[p])
            gr.next_play[0] += 1


@inline
def graph_cancelled_nb(ss):
    """Nodes cancelled so far (0 without a graph)."""
    gr = ss.graph
    return gr.fate[gr.fate.shape[0] - 1]


@inline
def graph_cancelled_row_nb(ss, r):
    """True if row ``r`` is a cancelled node of an agentic graph."""
    return ss.graph.play.shape[0] > 0 and ss.graph.fate[r] == CANCELLED
