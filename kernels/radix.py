"""The SGLang engine's radix prefix cache, per DP rank, as arrays (the compiled counterpart of the
tree in ``fastsim/sglang_ref.py``).

A node is a compressed edge: a run of pages, kept as a linked list of page slots (``pnext``) from
``head`` to ``tail``, each slot holding its page's content key. Rank ``r`` owns the node ids
``[r * nc, (r + 1) * nc)`` (its root is the first) and the page slots ``[r * pc, (r + 1) * pc)``;
both come from per-rank free stacks. A node's children are found through one open-addressing
table keyed by (node, key of the child's first page). Unlocked leaves are evictable, least recently
used first: a min-heap per rank of (access time, node), whose stale entries are skipped when popped
and dropped by a rebuild when the heap fills up. Times come from a per-rank counter that advances
at every match or insert (Dynamo reads a monotonic clock there).

Page counts: ``free[r]`` physical pages no one holds, ``evictable[r]`` pages of unlocked nodes.
"""

from typing import NamedTuple

import numpy as np

from fastsim.kernels.blocks import mix64_nb
from fastsim.kernels.jit import inline, inner

_EMPTY = -1


class Radix(NamedTuple):
    nc: np.ndarray        # int64[1]: node ids per rank
    pc: np.ndarray        # int64[1]: page slots per rank
    parent: np.ndarray    # int64[N]
    lock: np.ndarray      # int64[N]
    time: np.ndarray      # int64[N]
    nchild: np.ndarray    # int64[N]
    length: np.ndarray    # int64[N] pages (-1: free node)
    head: np.ndarray      # int64[N] first page slot
    tail: np.ndarray      # int64[N] last page slot
    fkey: np.ndarray      # uint64[N] key of the first page
    pkey: np.ndarray      # uint64[P]
    pnext: np.ndarray     # int64[P]
    nstack: np.ndarray    # int64[N] free node ids (per-rank regions)
    nstack_n: np.ndarray  # int64[R]
    pstack: np.ndarray    # int64[P] free page slots (per-rank regions)
    pstack_n: np.ndarray  # int64[R]
    ht_node: np.ndarray   # int64[H] child table: parent node (-1 empty)
    ht_key: np.ndarray    # uint64[H]
    ht_val: np.ndarray    # int64[H] child node
    heap_t: np.ndarray    # int64[R * hc] access times
    heap_v: np.ndarray    # int64[R * hc] node ids
    heap_n: np.ndarray    # int64[R]
    hc: np.ndarray        # int64[1]
    clock: np.ndarray     # int64[R]
    free: np.ndarray      # int64[R]
    evictable: np.ndarray  # int64[R]
    # the KV events a kv_router reads (the layout of ``kernels/kvpool.py``'s feed, so that
    # ``router.sync_index_nb`` reads it as it is): a page stored into the tree or removed from it,
    # per rank, in order; empty arrays when nothing reads them (round robin)
    ev_key: np.ndarray    # uint64[R * M]
    ev_code: np.ndarray   # int32[R * M]: 2 * rank + 1 stored, 2 * rank removed
    ev_time: np.ndarray   # float64[R * M]: inf until the pass's end stamps it
    ev_meta: np.ndarray   # int64[R, 3]: first entry, entries, 1 if the ring overflowed
    # each page slot's key chained over its path from the root (what the events name: a page's
    # content key alone repeats within a prompt, a router must tell the positions apart)
    pchain: np.ndarray    # uint64[P] (empty without events)


def new_radix(n_ranks, total_pages, n_events=0):
    """Empty caches for ``n_ranks`` ranks of ``total_pages`` pages each; ``n_events``: room for
    that many KV events a rank (0: none are kept)."""
    nc = total_pages + 2
    pc = max(total_pages, 1)
    n, p = n_ranks * nc, n_ranks * pc
    h = 1
    while h < 2 * n:
        h *= 2
    hc = 4 * nc + 16
    t = Radix(
        np.array([nc], np.int64), np.array([pc], np.int64),
        np.full(n, -1, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64),
        np.full(n, -1, np.int64), np.full(n, -1, np.int64), np.full(n, -1, np.int64), np.zeros(n, np.uint64),
        np.zeros(p, np.uint64), np.full(p, -1, np.int64),
        np.zeros(n, np.int64), np.zeros(n_ranks, np.int64), np.zeros(p, np.int64), np.zeros(n_ranks, np.int64),
        np.full(h, -1, np.int64), np.zeros(h, np.uint64), np.full(h, -1, np.int64),
        np.zeros(n_ranks * hc, np.int64), np.zeros(n_ranks * hc, np.int64), np.zeros(n_ranks, np.int64),
        np.array([hc], np.int64), np.zeros(n_ranks, np.int64), np.full(n_ranks, total_pages, np.int64),
        np.zeros(n_ranks, np.int64),
        np.zeros(n_ranks * n_events, np.uint64), np.zeros(n_ranks * n_events, np.int32),
        np.zeros(n_ranks * n_events), np.zeros((n_ranks, 3), np.int64),
        np.zeros(p if n_events else 0, np.uint64),
    )
    for r in range(n_ranks):
        base = r * nc
        t.length[base] = 0  # the root
        # free node ids, lowest on top
        k = 0
        for i in range(nc - 1, 0, -1):
            t.nstack[base + k] = base + i
            k += 1
        t.nstack_n[r] = k
        pb = r * pc
        k = 0
        for i in range(pc - 1, -1, -1):
            t.pstack[pb + k] = pb + i
            k += 1
        t.pstack_n[r] = k
    return t


@inline
def root_nb(t, r):
    return r * t.nc[0]


@inline
def now_nb(t, r):
    t.clock[r] += 1
    return t.clock[r]


# ---------------------------------------------------------------- child table
@inline
def _slot_nb(t, node, key):
    h = np.uint64(node) * np.uint64(0x9E3779B97F4A7C15) ^ key
    h ^= h >> np.uint64(29)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(32)
    return np.int64(h & np.uint64(t.ht_node.shape[0] - 1))


@inline
def child_get_nb(t, node, key):
    m = t.ht_node.shape[0] - 1
    i = _slot_nb(t, node, key)
    while t.ht_node[i] != _EMPTY:
        if t.ht_node[i] == node and t.ht_key[i] == key:
            return t.ht_val[i]
        i = (i + 1) & m
    return -1


@inner
def child_put_nb(t, node, key, child):
    m = t.ht_node.shape[0] - 1
    i = _slot_nb(t, node, key)
    while t.ht_node[i] != _EMPTY:
        if t.ht_node[i] == node and t.ht_key[i] == key:
            t.ht_val[i] = child
            return
        i = (i + 1) & m
    t.ht_node[i] = node
    t.ht_key[i] = key
    t.ht_val[i] = child


@inner
def child_del_nb(t, node, key):
    """Remove an entry; later entries of its probe run shift back (no tombstones)."""
    m = t.ht_node.shape[0] - 1
    i = _slot_nb(t, node, key)
    while True:
        if t.ht_node[i] == _EMPTY:
            return
        if t.ht_node[i] == node and t.ht_key[i] == key:
            break
        i = (i + 1) & m
    j = i
    while True:
        t.ht_node[i] = _EMPTY
        while True:
            j = (j + 1) & m
            if t.ht_node[j] == _EMPTY:
                return
            k = _slot_nb(t, t.ht_node[j], t.ht_key[j])
            # the entry at j may move to i unless its home k lies cyclically in (i, j]
            if i <= j:
                if i < k <= j:
                    continue
            elif k <= j or k > i:
                continue
            break
        t.ht_node[i] = t.ht_node[j]
        t.ht_key[i] = t.ht_key[j]
        t.ht_val[i] = t.ht_val[j]
        i = j


# ---------------------------------------------------------------- nodes and pages
@inner
def _new_node_nb(t, r, parent, time):
    t.nstack_n[r] -= 1
    n = t.nstack[r * t.nc[0] + t.nstack_n[r]]
    t.parent[n] = parent
    t.lock[n] = 0
    t.time[n] = time
    t.nchild[n] = 0
    t.length[n] = 0
    t.head[n] = -1
    t.tail[n] = -1
    return n


@inner
def _free_node_nb(t, r, n):
    t.length[n] = -1
    t.nstack[r * t.nc[0] + t.nstack_n[r]] = n
    t.nstack_n[r] += 1


@inline
def _new_page_nb(t, r, key):
    t.pstack_n[r] -= 1
    p = t.pstack[r * t.pc[0] + t.pstack_n[r]]
    t.pkey[p] = key
    t.pnext[p] = -1
    return p


@inline
def _free_page_nb(t, r, p):
    t.pstack[r * t.pc[0] + t.pstack_n[r]] = p
    t.pstack_n[r] += 1
    if t.ev_key.shape[0] > 0:
        _feed_nb(t, r, t.pchain[p], False)


@inline
def chain_key_nb(prev, key):
    """The chained key of a page of content key ``key`` after a page of chained key ``prev`` (0 at
    the root)."""
    return mix64_nb((prev * np.uint64(0x9E3779B97F4A7C15)) ^ key)


@inner
def _feed_nb(t, r, key, stored):
    """Put a stored/removed event of ``key`` on rank ``r``'s ring (decision 0295: the tree's
    pages are what Dynamo's SGLang engine publishes, net of its duplicates within a pass)."""
    m = t.ev_key.shape[0] // t.ev_meta.shape[0]
    em = t.ev_meta
    if em[r, 1] == m:
        em[r, 2] = 1  # the caller runs again with a larger ring
        return
    i = r * m + (em[r, 0] + em[r, 1]) % m
    t.ev_key[i] = key
    t.ev_code[i] = 2 * r + (1 if stored else 0)
    t.ev_time[i] = np.inf  # the pass is under way: stamped at its end
    em[r, 1] += 1


# ---------------------------------------------------------------- LRU of evictable leaves
@inline
def _is_evictable_leaf_nb(t, r, n):
    return n != root_nb(t, r) and t.length[n] > 0 and t.lock[n] == 0 and t.nchild[n] == 0


@inline
def _heap_less_nb(t, a_t, a_v, b_t, b_v):
    return a_t < b_t or (a_t == b_t and a_v < b_v)


@inner
def _heap_push_nb(t, r, time, n):
    hc = t.hc[0]
    if t.heap_n[r] == hc:
        _heap_rebuild_nb(t, r)
        if t.heap_n[r] == hc:
            return
    base = r * hc
    i = t.heap_n[r]
    t.heap_n[r] += 1
    while i > 0:
        p = (i - 1) // 2
        if _heap_less_nb(t, time, n, t.heap_t[base + p], t.heap_v[base + p]):
            t.heap_t[base + i] = t.heap_t[base + p]
            t.heap_v[base + i] = t.heap_v[base + p]
            i = p
        else:
            break
    t.heap_t[base + i] = time
    t.heap_v[base + i] = n


@inline
def _sift_down_nb(t, base, i, k, vt, vv):
    """Put the entry (``vt``, ``vv``) at position ``i`` of a heap of ``k`` entries, moving it down
    past every smaller child."""
    while True:
        c = 2 * i + 1
        if c >= k:
            break
        if c + 1 < k and _heap_less_nb(t, t.heap_t[base + c + 1], t.heap_v[base + c + 1],
                                        t.heap_t[base + c], t.heap_v[base + c]):
            c += 1
        if _heap_less_nb(t, t.heap_t[base + c], t.heap_v[base + c], vt, vv):
            t.heap_t[base + i] = t.heap_t[base + c]
            t.heap_v[base + i] = t.heap_v[base + c]
            i = c
        else:
            break
    t.heap_t[base + i] = vt
    t.heap_v[base + i] = vv


@inner
def _heap_pop_nb(t, r):
    """Remove the least entry; returns (time, node), node -1 if empty."""
    hc = t.hc[0]
    base = r * hc
    if t.heap_n[r] == 0:
        return 0, -1
    top_t, top_v = t.heap_t[base], t.heap_v[base]
    t.heap_n[r] -= 1
    k = t.heap_n[r]
    if k > 0:
        _sift_down_nb(t, base, 0, k, t.heap_t[base + k], t.heap_v[base + k])
    return top_t, top_v


@inner
def _heap_rebuild_nb(t, r):
    """Drop the stale entries: the heap becomes the rank's evictable leaves, each once."""
    nc = t.nc[0]
    t.heap_n[r] = 0
    hc = t.hc[0]
    base = r * hc
    k = 0
    for n in range(r * nc, (r + 1) * nc):
        if _is_evictable_leaf_nb(t, r, n):
            t.heap_t[base + k] = t.time[n]
            t.heap_v[base + k] = n
            k += 1
    t.heap_n[r] = k
    for s in range(k // 2 - 1, -1, -1):  # heapify
        _sift_down_nb(t, base, s, k, t.heap_t[base + s], t.heap_v[base + s])


@inline
def index_nb(t, r, n):
    """File ``n`` in the LRU if it is an evictable leaf (at its current time)."""
    if _is_evictable_leaf_nb(t, r, n):
        _heap_push_nb(t, r, t.time[n], n)


@inline
def touch_nb(t, r, n, time):
    t.time[n] = time
    index_nb(t, r, n)


# ---------------------------------------------------------------- locks
@inner
def inc_lock_nb(t, r, n):
    root = root_nb(t, r)
    while n != root:
        if t.lock[n] == 0:
            t.evictable[r] -= t.length[n]
        t.lock[n] += 1
        n = t.parent[n]


@inner
def dec_lock_nb(t, r, n):
    root = root_nb(t, r)
    while n != root:
        t.lock[n] -= 1
        if t.lock[n] == 0:
            t.evictable[r] += t.length[n]
            index_nb(t, r, n)
        n = t.parent[n]


# ---------------------------------------------------------------- structure
@inner
def split_nb(t, r, child, pos):
    """Split ``child`` after its first ``pos`` pages; returns the new upper node."""
    parent = t.parent[child]
    inter = _new_node_nb(t, r, parent, t.time[child])
    t.lock[inter] = t.lock[child]
    p = t.head[child]
    for _ in range(pos - 1):
        p = t.pnext[p]
    t.head[inter] = t.head[child]
    t.tail[inter] = p
    t.length[inter] = pos
    t.fkey[inter] = t.fkey[child]
    t.head[child] = t.pnext[p]
    t.pnext[p] = -1
    t.length[child] -= pos
    t.fkey[child] = t.pkey[t.head[child]]
    t.nchild[inter] = 1
    child_put_nb(t, inter, t.fkey[child], child)
    child_put_nb(t, parent, t.fkey[inter], inter)
    t.parent[child] = inter
    return inter


@inline
def common_nb(t, n, keys, off, nkeys):
    """How many of ``n``'s pages equal ``keys[off:nkeys]`` from the start."""
    k = 0
    p = t.head[n]
    while p != -1 and off + k < nkeys and t.pkey[p] == keys[off + k]:
        k += 1
        p = t.pnext[p]
    return k


@inner
def match_nb(t, r, keys, nkeys, lock, readonly):
    """Longest cached prefix of ``keys[:nkeys]``: (pages matched, last node). Unless ``readonly``,
    touches the path and splits a partly matched node; ``lock`` locks the path."""
    root = root_nb(t, r)
    cur = root
    m = 0
    if readonly:
        while m < nkeys:
            c = child_get_nb(t, cur, keys[m])
            if c == -1:
                break
            k = common_nb(t, c, keys, m, nkeys)
            m += k
            if k < t.length[c]:
                break
            cur = c
        return m, cur
    now = now_nb(t, r)
    t.time[root] = now
    pending = -1
    while m < nkeys:
        c = child_get_nb(t, cur, keys[m])
        if c == -1:
            break
        if pending != -1:
            touch_nb(t, r, pending, now)
            pending = -1
        k = common_nb(t, c, keys, m, nkeys)
        if k < t.length[c]:
            if k > 0:
                cur = split_nb(t, r, c, k)
            m += k
            break
        m += k
        cur = c
        pending = cur
    if pending != -1:
        t.time[pending] = now
        if lock:
            inc_lock_nb(t, r, pending)
        else:
            index_nb(t, r, pending)
    elif lock:
        inc_lock_nb(t, r, cur)
    return m, cur


@inner
def _append_pages_nb(t, r, n, keys, off, nkeys):
    events = t.ev_key.shape[0] > 0
    prev = np.uint64(0)
    if events:  # the chained key of the page before: the node's last, or its parent's
        if t.tail[n] != -1:
            prev = t.pchain[t.tail[n]]
        elif t.parent[n] != -1 and t.tail[t.parent[n]] != -1:
            prev = t.pchain[t.tail[t.parent[n]]]
    for i in range(off, nkeys):
        p = _new_page_nb(t, r, keys[i])
        if events:
            prev = chain_key_nb(prev, keys[i])
            t.pchain[p] = prev
            _feed_nb(t, r, prev, True)
        if t.tail[n] == -1:
            t.head[n] = p
        else:
            t.pnext[t.tail[n]] = p
        t.tail[n] = p
    t.length[n] += nkeys - off


@inner
def _create_nb(t, r, parent, keys, off, nkeys):
    n = _new_node_nb(t, r, parent, now_nb(t, r))
    _append_pages_nb(t, r, n, keys, off, nkeys)
    t.fkey[n] = keys[off]
    t.nchild[parent] += 1
    child_put_nb(t, parent, keys[off], n)
    t.evictable[r] += nkeys - off
    index_nb(t, r, n)
    return n


@inner
def insert_nb(t, r, start, keys, off, nkeys, allow_locked_tail):
    """Insert ``keys[off:nkeys]`` below ``start`` (whose path holds ``keys[:off]``); returns
    (last node, pages new to the tree)."""
    if off >= nkeys:
        return start, 0
    root = root_nb(t, r)
    now = now_nb(t, r)
    n = start
    while n != -1:
        touch_nb(t, r, n, now)
        n = t.parent[n]
    cur = start
    while off < nkeys:
        if (cur != root and t.nchild[cur] == 0
                and (t.lock[cur] == 0 or (allow_locked_tail and cur == start and t.lock[cur] == 1))):
            t.time[cur] = now
            _append_pages_nb(t, r, cur, keys, off, nkeys)
            if t.lock[cur] == 0:
                t.evictable[r] += nkeys - off
            index_nb(t, r, cur)
            return cur, nkeys - off
        c = child_get_nb(t, cur, keys[off])
        if c == -1:
            return _create_nb(t, r, cur, keys, off, nkeys), nkeys - off
        k = common_nb(t, c, keys, off, nkeys)
        if k == t.length[c]:
            off += k
            cur = c
            touch_nb(t, r, cur, now)
        else:
            inter = split_nb(t, r, c, k)
            off += k
            if off < nkeys:
                return _create_nb(t, r, inter, keys, off, nkeys), nkeys - off
            return inter, 0
    return cur, 0


@inner
def evict_nb(t, r, pages):
    """Free at least ``pages`` pages of unlocked leaves, least recently used first (a leaf gives
    its newest pages first); returns the pages freed."""
    done = 0
    while done < pages:
        tm, n = _heap_pop_nb(t, r)
        if n == -1:
            break
        if not _is_evictable_leaf_nb(t, r, n) or t.time[n] != tm:
            continue
        need = pages - done
        ln = t.length[n]
        if need < ln:
            keep = ln - need
            p = t.head[n]
            for _ in range(keep - 1):
                p = t.pnext[p]
            q = t.pnext[p]
            t.pnext[p] = -1
            t.tail[n] = p
            while q != -1:
                nx = t.pnext[q]
                _free_page_nb(t, r, q)
                q = nx
            t.length[n] = keep
            t.evictable[r] -= need
            t.free[r] += need
            done += need
            _heap_push_nb(t, r, t.time[n], n)
            continue
        q = t.head[n]
        while q != -1:
            nx = t.pnext[q]
            _free_page_nb(t, r, q)
            q = nx
        t.evictable[r] -= ln
        t.free[r] += ln
        done += ln
        parent = t.parent[n]
        child_del_nb(t, parent, t.fkey[n])
        t.nchild[parent] -= 1
        _free_node_nb(t, r, n)
        index_nb(t, r, parent)
    return done
