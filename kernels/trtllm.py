"""TRT-LLM's capacity scheduler (``GUARANTEED_NO_EVICT``) on top of the vLLM pass.

Dynamo 1.6.1 runs ``backend: trtllm`` on the same scheduler core and KV pool as vLLM; only the
admission rule differs (docs/decisions/0360):

* a request reserves its whole KV up front: the blocks of its prompt plus every output token it
  may generate, ``ceil(min(isl + osl, limit) / block_size)`` (its *to-completion* blocks, where the
  limit is ``max_model_len`` and the pool's capacity in tokens, whichever is smaller);
* the waiting head is admitted only if the blocks it still needs (to-completion minus the blocks
  of its cached prefix that are in use by running requests) fit what is left after every running
  request's remaining reservation; otherwise it waits (head-of-line blocking);
* nothing is ever preempted, since no allocation can fail.

The rank's reservation ``T = active blocks + sum over running requests of (to-completion blocks -
blocks held)`` is kept in ``Ranks.resv``. A running request's new block raises the active count
and lowers its own remainder by one, so ``T`` changes only when a request is admitted or
finishes: :func:`admitted_nb` and :func:`released_nb` apply those changes from the pool's actual
active count, so ``T`` stays exact whatever prefix blocks are shared. The waiting head may be
admitted iff its need is at most ``capacity - T``.

In disaggregated serving (``kernels/disagg.py``) a decode worker adds a handoff's whole sequence
to ``T`` when it reserves the prompt's blocks (fresh ones: no prefix credit), and a prefill copy
leaves ``T`` in two steps: its remainder at its handoff (:func:`left_running_nb`), its blocks
when the source is released.
"""

from fastsim.kernels.jit import inner
from fastsim.kernels.kvpool import NACTIVE


@inner
def _ceil_div(x, d):
    return (x + d - 1) // d


@inner
def completion_blocks_nb(p, isl, osl):
    """Blocks a request of ``isl`` prompt and ``osl`` output tokens holds when it completes."""
    total = isl + osl
    if p.max_model_len > 0 and total > p.max_model_len:
        total = p.max_model_len
    return _ceil_div(total, p.block_size)


@inner
def fits_nb(p, rk, k, isl, osl, active_cached_blocks):
    """The blocks the waiting head still needs, or -1 if they do not fit rank ``k`` now."""
    needed = completion_blocks_nb(p, isl, osl) - active_cached_blocks
    if needed > p.cap - rk.resv[k]:
        return -1
    return needed


@inner
def admitted_nb(p, pool, rk, k, isl, osl, alloc, active_before):
    """A request was admitted (its first chunk allocated: ``alloc`` tokens held)."""
    held = _ceil_div(alloc, p.block_size)
    rk.resv[k] += (pool.meta[k, NACTIVE] - active_before) + completion_blocks_nb(p, isl, osl) - held


@inner
def released_nb(p, pool, rk, k, isl, osl, alloc, active_before):
    """A completed request held ``alloc`` tokens' blocks; the pool had ``active_before`` active
    blocks before they were released."""
    held = _ceil_div(alloc, p.block_size)
    rk.resv[k] -= (completion_blocks_nb(p, isl, osl) - held) + (active_before - pool.meta[k, NACTIVE])


@inner
def left_running_nb(p, rk, k, isl, osl, alloc):
    """A request left the running list holding its blocks (a prefill copy handed off): its
    remaining reservation is no longer promised; its blocks leave with their release."""
    rk.resv[k] -= completion_blocks_nb(p, isl, osl) - _ceil_div(alloc, p.block_size)
