"""Binary min-heaps of item ids, ordered by (key[item], tie[item]).

Every event queue of the simulator is one of these: pending arrivals (ready time, then session and
turn order), the router queue (policy key, then enqueue order) and KV transfers (completion time,
then row). The heap array holds item ids; its size lives in ``count[slot]`` so that the callers
keep all their scalars in state arrays.

The router queue with request priorities orders by one more key ahead of those two (the strict
priority), in ``heap_push_ranked_nb`` and ``heap_pop_ranked_nb``.

Pass completions (end time, then worker id: at most one per worker) use a tournament tree instead:
its matches compare two siblings without a data-dependent branch, where a heap's sift takes a
mispredicted branch per level (at 64 workers the heap took a sixth of the loop's time).
"""

import numpy as np

from fastsim.kernels.jit import inline, inner


def new_tourney(n):
    """A tournament over items ``0 .. n-1``, all with key +inf: ``(tree, key)``. ``tree[1]`` is the
    winner: the item of least (key, id); the leaves ``tree[m + i] = i`` (``m``: a power of two
    >= ``n``; items ``n .. m-1`` are padding that keep key +inf)."""
    m = 1
    while m < n:
        m *= 2
    tree = np.zeros(2 * m, dtype=np.int64)
    tree[m:] = np.arange(m)
    for i in range(m - 1, 0, -1):
        tree[i] = tree[2 * i]
    return tree, np.full(m, np.inf)


@inner
def tourney_set_nb(tree, key, item, value):
    """Set ``key[item] = value`` (+inf: nothing pending) and replay the item's matches up to the
    root; returns the new winner and its key (``tree[1]`` and ``key[tree[1]]``, from registers).
    A tie goes to the left subtree (lower ids). The climbing winner stays in registers: each level
    only reads its sibling's winner, which this update does not change, so those reads do not wait
    on one another."""
    key[item] = value
    j = tree.shape[0] // 2 + item
    w = item
    kw = value
    while j > 1:
        s = tree[j ^ 1]
        ks = key[s]
        # the climbing side is the right child when j is odd: then it must win outright. Both
        # tests are evaluated (no short circuit) so that the winner is a select, not a branch: the
        # outcome is a coin toss when the items' keys interleave (decision 0393)
        stay = (kw < ks) | ((kw == ks) & ((j & 1) == 0))
        w = w if stay else s
        kw = kw if stay else ks
        j >>= 1
        tree[j] = w
    return w, kw


@inner
def ranked_less_nb(rank, key, tie, a, b):
    """``a`` orders before ``b``: lower ``rank`` (None: no rank), then lower ``key``, then lower
    ``tie``."""
    if rank is not None:
        if rank[a] != rank[b]:
            return rank[a] < rank[b]
    if key[a] != key[b]:
        return key[a] < key[b]
    return tie[a] < tie[b]


@inner
def heap_push_ranked_nb(heap, count, slot, rank, key, tie, item):
    """Insert ``item`` into a heap ordered by (rank, key, tie); ``rank`` None: by (key, tie)."""
    i = count[slot]
    count[slot] += 1
    heap[i] = item
    while i > 0:
        par = (i - 1) >> 1
        if ranked_less_nb(rank, key, tie, heap[i], heap[par]):
            heap[i], heap[par] = heap[par], heap[i]
            i = par
        else:
            break


@inner
def heap_pop_ranked_nb(heap, count, slot, rank, key, tie):
    """Remove and return the first item of a heap ordered by (rank, key, tie) (``rank`` None: by
    (key, tie)); the heap must not be empty."""
    top = heap[0]
    n = count[slot] - 1
    count[slot] = n
    heap[0] = heap[n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and ranked_less_nb(rank, key, tie, heap[c + 1], heap[c]):
            c += 1
        if ranked_less_nb(rank, key, tie, heap[c], heap[i]):
            heap[i], heap[c] = heap[c], heap[i]
            i = c
        else:
            break
    return top


@inline
def heap_push_nb(heap, count, slot, key, tie, item):
    """Insert ``item`` into a heap ordered by (key, tie)."""
    heap_push_ranked_nb(heap, count, slot, None, key, tie, item)


@inline
def heap_pop_nb(heap, count, slot, key, tie):
    """Remove and return the first item of a heap ordered by (key, tie) (it must not be empty)."""
    return heap_pop_ranked_nb(heap, count, slot, None, key, tie)
