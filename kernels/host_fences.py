"""Fences between the GPU pool and the host tier's stores (Dynamo 1.6.1, decision 0352).

A store copies a request's GPU blocks to host memory; until it completes, those GPU blocks are
still read. Each pool slot a store reads carries the store's id (``TierRun.pin``). When a new
block is taken by evicting such a block, the pass that writes it may not compute before the store
completes (the rank's ``cnb``, a running maximum, as Dynamo's ``compute_not_before``), and the
taker's own store waits until the store it depends on has completed (``wdep``). A store is still
in flight when it is not older than the head of its rank's copy lane (``host_tier``), so pins are
never cleared on completion: a stale pin names a completed store and fences nothing.

The functions take the run's ``TierRun`` (``kernels/host_offload.py``); the scheduler calls them
only when the run has a tier.
"""

import numpy as np

from fastsim.kernels.host_tier import store_fence_nb
from fastsim.kernels.jit import inner
from fastsim.kernels.kvpool import HEAD, NFREE
from fastsim.kernels.kvpool import lookup_nb as pool_lookup_nb


@inner
def store_in_flight_nb(tr, k, tid):
    """Is rank ``k``'s store ``tid`` prepared or still copying?"""
    return tid >= 0 and store_fence_nb(tr.ht, k, tid) != -np.inf


@inner
def eviction_dep_nb(tr, pool, k, keys, n_hits, fresh):
    """The latest store among the blocks that ``fresh`` new blocks on rank ``k`` will evict (after
    the hits ``keys[:n_hits]`` are reactivated, which takes them out of the LRU), or -1; the pins
    of the blocks evicted are cleared (their slots will hold other blocks)."""
    meta = pool.meta
    need = fresh - meta[k, NFREE]
    if need <= 0:
        return np.int64(-1)
    sbase = k * pool.cap
    for i in range(n_hits):
        s = pool_lookup_nb(pool, k, keys[i])
        if s >= 0 and pool.slot_ref[sbase + s] == 0:
            tr.mark[sbase + s] = 1
    dep = np.int64(-1)
    h = meta[k, HEAD]
    while need > 0 and h >= 0:
        if tr.mark[sbase + h] == 0:
            c = pool.slot_run[sbase + h]
            if c > 0:  # a run of dead private blocks (output blocks: never stored)
                need -= min(np.int64(c), need)
            else:
                need -= 1
                pin = tr.pin[sbase + h]
                if pin > 0:
                    dep = max(dep, pin - 1)
                    tr.pin[sbase + h] = 0
        h = pool.lru_next[sbase + h] - 1
    for i in range(n_hits):
        s = pool_lookup_nb(pool, k, keys[i])
        if s >= 0:
            tr.mark[sbase + s] = 0
    return dep


@inner
def fence_allocation_nb(tr, k, r, dep, j_lo):
    """Request ``r`` took new GPU blocks, from its block ``j_lo`` on, whose previous contents store
    ``dep`` may still be reading: the compute start waits for the store, and so does ``r``'s own
    next store of those blocks."""
    if dep < 0:
        return
    d = store_fence_nb(tr.ht, k, dep)
    if d == -np.inf:
        return
    if d > tr.cnb[k]:
        tr.cnb[k] = d
    if not store_in_flight_nb(tr, k, tr.wdep[r]) or j_lo < tr.wlo[r]:
        tr.wlo[r] = j_lo
    if dep > tr.wdep[r]:
        tr.wdep[r] = dep


@inner
def preempt_fence_nb(tr, k, r):
    """vLLM flushes a preempted request's prepared stores before its GPU blocks are reused: the
    compute start waits for its latest store."""
    if tr.last_store[r] >= 0:
        d = store_fence_nb(tr.ht, k, tr.last_store[r])
        if d != -np.inf and d > tr.cnb[k]:
            tr.cnb[k] = d
    tr.wdep[r] = -1


@inner
def compute_start_nb(tr, k, now):
    """When rank ``k``'s pass starting at ``now`` may compute (every fence met)."""
    return max(now, tr.cnb[k])
