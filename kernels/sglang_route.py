"""kv_router on the SGLang engine: the router kernels of ``kernels/router.py``, fed by the radix caches.

The router is the vLLM path's (cost, tie-breaking, prefill and active-block loads, its lagging
index): only where its inputs come from differs. A request's blocks are its prompt's complete
pages, keyed as the radix cache keys them (``kernels/sglang.py``'s ``page_key_nb``); a target's
overlap is read from the router's index, which the radix caches' KV events reach (a page stored
into a rank's tree or removed from it, ``kernels/radix.py``), each once ``kv_event_lag_ms`` has
passed since the end of the pass that made it. The prefill load leaves at the request's first
token, its blocks at its completion, both when the worker's pass that made them ends
(decision 0295).

With ``router_queue_threshold`` an arrival waits in the router queue while others wait or every
rank is busy (its prefill load above the threshold times ``max_num_batched_tokens``). The queue
moves after each single release (a request's prefill load at its first token, a completion), and
a request leaving it is scored with the loads of that moment and the overlaps of its arrival
(decision 0410).
"""


from fastsim.kernels.jit import inner
from fastsim.kernels.router import (NQUEUE, all_busy_nb, choose_target_nb, commit_route_nb, note_queued_nb,
                                    note_route_nb, queue_key_nb, queue_pop_nb, queue_push_nb, release_blocks_nb,
                                    release_prefill_nb, score_queued_nb, score_targets_nb, sync_index_nb)


@inner
def route_nb(rt, t, keys, nfull, nshare, isl, ps, gstate, row, now):
    """The rank request ``row`` goes to (its prompt's ``nfull`` complete pages ``keys``, the first
    ``nshare`` of which another request can hold), its load committed to the router."""
    n_targets = gstate.shape[0]
    sync_index_nb(rt, t, now)
    score_targets_nb(rt, None, keys, nfull, nshare, isl, ps, n_targets, gstate, 1)
    k = choose_target_nb(rt, n_targets)
    commit_route_nb(rt, keys, nfull, nshare, isl, ps, row, k)
    note_route_nb(rt, row, n_targets, now)
    return k


@inner
def must_wait_nb(rt, n_targets):
    """An arrival waits in the router queue: queueing is on, and others wait or every rank is busy."""
    return rt.queue_thr >= 0.0 and (rt.state[NQUEUE] > 0 or all_busy_nb(rt, n_targets))


@inner
def enter_queue_nb(rt, t, keys, nfull, nshare, isl, ps, gstate, row, now):
    """Request ``row`` waits in the router queue, with the overlaps it sees now (its scores at
    release, and wspt's order)."""
    n_targets = gstate.shape[0]
    sync_index_nb(rt, t, now)
    score_targets_nb(rt, None, keys, nfull, nshare, isl, ps, n_targets, gstate, 1)
    queue_push_nb(rt, row, queue_key_nb(rt, now, isl, ps, n_targets))
    note_queued_nb(rt, row)


@inner
def next_released_nb(rt, n_targets):
    """The next request the router queue releases (-1: it is empty, or every rank is busy)."""
    if rt.state[NQUEUE] > 0 and not all_busy_nb(rt, n_targets):
        return queue_pop_nb(rt)
    return -1


@inner
def route_released_nb(rt, keys, nfull, nshare, isl, ps, gstate, row, now):
    """The rank request ``row``, released by the router queue, goes to: ``route_nb`` with the
    overlaps of its queue entry."""
    n_targets = gstate.shape[0]
    score_queued_nb(rt, row, keys, nfull, nshare, isl, ps, n_targets, gstate, 1)
    k = choose_target_nb(rt, n_targets)
    commit_route_nb(rt, keys, nfull, nshare, isl, ps, row, k)
    note_route_nb(rt, row, n_targets, now)
    return k


@inner
def note_first_token_nb(rt, g, row):
    """Request ``row``'s first token came in worker ``g``'s pass in flight: its prefill load
    leaves the router when that pass ends."""
    rt.fnext[row] = -1
    if rt.ftail[g] < 0:
        rt.fhead[g] = row
    else:
        rt.fnext[rt.ftail[g]] = row
    rt.ftail[g] = row


@inner
def next_first_token_nb(rt, g):
    """Worker ``g``'s pass ended: the next request whose first token it made (-1: none left),
    taken off the list; its prefill load is to leave the router."""
    row = rt.fhead[g]
    if row >= 0:
        rt.fhead[g] = rt.fnext[row]
        if rt.fhead[g] < 0:
            rt.ftail[g] = -1
    return row


@inner
def request_done_nb(rt, keys, nfull, nshare, row, k):
    """Request ``row`` ended on rank ``k``: it leaves the router's loads."""
    release_prefill_nb(rt, row, k)
    release_blocks_nb(rt, keys, nfull, nshare, k)
