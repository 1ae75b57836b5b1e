"""Binary min-heaps of item ids, ordered by (key[item], tie[item]).

Every event queue of the simulator is one of these: pending arrivals (ready time, then session and
turn order), pass completions (end time, then worker id), the router queue (policy key, then
enqueue order) and KV transfers (completion time, then row). The heap array holds item ids; its
size lives in ``count[slot]`` so that the callers keep all their scalars in state arrays.
"""

from fastsim.kernels.jit import inner


@inner
def heap_less_nb(key, tie, a, b):
    """``a`` orders before ``b``."""
    if key[a] != key[b]:
        return key[a] < key[b]
    return tie[a] < tie[b]


@inner
def heap_push_nb(heap, count, slot, key, tie, item):
    """Insert ``item``."""
    i = count[slot]
    count[slot] += 1
    heap[i] = item
    while i > 0:
        par = (i - 1) >> 1
        if heap_less_nb(key, tie, heap[i], heap[par]):
            heap[i], heap[par] = heap[par], heap[i]
            i = par
        else:
            break


@inner
def heap_pop_nb(heap, count, slot, key, tie):
    """Remove and return the first item (the heap must not be empty)."""
    top = heap[0]
    n = count[slot] - 1
    count[slot] = n
    heap[0] = heap[n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and heap_less_nb(key, tie, heap[c + 1], heap[c]):
            c += 1
        if heap_less_nb(key, tie, heap[c], heap[i]):
            heap[i], heap[c] = heap[c], heap[i]
            i = c
        else:
            break
    return top
