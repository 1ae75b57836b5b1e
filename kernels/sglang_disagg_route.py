"""kv_router in SGLang disaggregated serving (Dynamo 1.6.1, decision 0440): the two pools' routers.

Dynamo routes an SGLang request to its decode rank first, at its arrival, and to a prefill rank
when that decode rank has reserved its KV. Each pool has its own router, with the derived configs
of the vLLM path (``fastsim/sim_disagg.py``'s ``stage_router_configs``):

* the decode router sees no overlap: a rank's cost is its active prompt blocks plus the request's
  (and ``decode_active_request_weight`` times its requests); a request's blocks leave at its
  completion;
* the prefill router is the aggregated SGLang engine's (``kernels/sglang_route.py``) without the
  active-block term: overlaps from the prefill ranks' radix caches (their KV events, published
  when a pass ends), the prefill load ``isl - overlap`` leaving when the pass that prefilled the
  copy ends, the request itself when its source is released;
* a held copy's complete prompt pages are published when its prefill pass ends, though its rank
  caches them only at the release (Dynamo's SGLang engine publishes a page at its allocation,
  counting its references): a stored event each, and a removed one at the release, after the
  events of the pages the release caches.
"""

from fastsim.kernels.jit import inner
from fastsim.kernels.kvpool import seal_feed_nb
from fastsim.kernels.radix import _feed_nb
from fastsim.kernels.sglang import P_HASHED, P_NOCACHE, P_PS, _chained_keys_nb
from fastsim.kernels.router import (choose_target_nb, commit_route_nb, free_request_nb, release_blocks_nb,
                                    release_prefill_nb)


@inner
def route_decode_nb(rt, nfull, isl, ps, n_targets, row, now):
    """The decode rank request ``row`` (``nfull`` complete prompt pages) goes to, its blocks
    committed to the decode router."""
    for k in range(n_targets):
        rt.overlap[k] = 0
        rt.cost[k] = float(rt.active[k] + nfull)
        if rt.req_weight != 0.0:
            rt.cost[k] += rt.req_weight * rt.nreq[k]
    k = choose_target_nb(rt, n_targets)
    commit_route_nb(rt, rt.overlap, nfull, 0, isl, ps, row, k)
    return k


@inner
def decode_done_nb(rt, nfull, row, k):
    """Request ``row`` left decode rank ``k`` (completed, or failed at its arrival): its blocks
    leave the decode router."""
    release_prefill_nb(rt, row, k)
    release_blocks_nb(rt, rt.overlap, nfull, 0, k)


@inner
def prefill_done_nb(rt, row, k):
    """The pass that prefilled request ``row``'s copy on prefill rank ``k`` ended: its prefill load
    leaves the router."""
    release_prefill_nb(rt, row, k)


@inner
def source_released_nb(rt, k):
    """A request's source on prefill rank ``k`` was released: it leaves the rank's requests."""
    free_request_nb(rt, k)


@inner
def publish_hold_nb(qp, prp, sp, tp, y, row, stored, stamp):
    """The events of request ``row``'s held copy on prefill rank ``y``: one per complete prompt
    page (``stored``: its prefill pass ended; else its source was released), published at
    ``stamp`` with the rank's other events not published yet."""
    # (prompts unique to their request keep no events; without prefix caching a rank publishes
    # nothing: kv_nocache_trace's overlaps are all 0 in Dynamo's records)
    if tp.ev_key.shape[0] == 0 or not prp[P_HASHED] or prp[P_NOCACHE]:
        return
    nfull = qp.isl[row] // prp[P_PS]
    _chained_keys_nb(qp, prp, sp, row, nfull)
    for p in range(nfull):
        _feed_nb(tp, y, sp.keys[p], stored)
    seal_feed_nb(tp, y, stamp)
