"""kv_router on the SGLang engine: the router kernels of ``kernels/router.py``, fed by the radix caches.

The router is the vLLM path's (cost, tie-breaking, prefill and active-block loads, its lagging
index): only where its inputs come from differs. A request's blocks are its prompt's complete
pages, keyed as the radix cache keys them (``kernels/sglang.py``'s ``page_key_nb``); a target's
overlap is read from the router's index, which the radix caches' KV events reach (a page stored
into a rank's tree or removed from it, ``kernels/radix.py``), each once ``kv_event_lag_ms`` has
passed since the end of the pass that made it. The prefill load leaves at the request's first
token, its blocks at its completion, both when the worker's pass that made them ends
(decision 0295).
"""


from fastsim.kernels.jit import inner
from fastsim.kernels.router import (choose_target_nb, commit_route_nb, note_route_nb, release_blocks_nb,
                                    release_prefill_nb, score_targets_nb, sync_index_nb)


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
def pass_end_nb(rt, rank, g):
    """Worker ``g``'s pass ended: the prefill loads of the requests whose first token it made
    leave the router (``rank``: each request's rank)."""
    row = rt.fhead[g]
    while row >= 0:
        release_prefill_nb(rt, row, rank[row])
        row = rt.fnext[row]
    rt.fhead[g] = -1
    rt.ftail[g] = -1


@inner
def request_done_nb(rt, keys, nfull, nshare, row, k):
    """Request ``row`` ended on rank ``k``: it leaves the router's loads."""
    release_prefill_nb(rt, row, k)
    release_blocks_nb(rt, keys, nfull, nshare, k)
