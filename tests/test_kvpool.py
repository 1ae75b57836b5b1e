"""KV block pool kernels against a slow reference of Dynamo's manual block manager (notes 5.3)."""

from collections import OrderedDict

import numpy as np
import pytest
from numba import njit

from fastsim.kernels.kvpool import (
    NACTIVE,
    NEVICT,
    NINACTIVE,
    alloc_nb,
    can_use_nb,
    lookup_nb,
    make_pool,
    match_prefix_nb,
    register_nb,
    release_nb,
    use_nb,
)


class SlowPool:
    """Obvious reference: active refcounts, an insertion-ordered inactive LRU, a capacity."""

    def __init__(self, cap):
        self.cap = cap
        self.active = {}
        self.inactive = OrderedDict()
        self.evicted = 0

    def can_use(self, keys):
        extra = sum(1 for k in keys if k not in self.active)
        return len(self.active) + extra <= self.cap

    def use(self, keys):
        for k in keys:
            if k in self.active:
                self.active[k] += 1
            elif k in self.inactive:
                del self.inactive[k]
                self.active[k] = 1
            else:
                if len(self.active) + len(self.inactive) >= self.cap:
                    self.inactive.popitem(last=False)
                    self.evicted += 1
                self.active[k] = 1

    def release(self, k, cacheable):
        self.active[k] -= 1
        if self.active[k] == 0:
            del self.active[k]
            if cacheable:
                self.inactive[k] = True

    def match(self, keys):
        m = a = 0
        for k in keys:
            if k in self.active:
                m += 1
                a += 1
            elif k in self.inactive:
                m += 1
            else:
                break
        return m, a


def _keys(xs):
    return np.array(xs, dtype=np.uint64)


def test_lifecycle_reuse_and_lru_eviction():
    # Shape of Dynamo's test_block_lifecycle_stringent, capacity 10, without Destroy.
    pool = make_pool(1, 10)
    use_nb(pool, 0, _keys([1, 2, 3, 4, 5]), 5)
    use_nb(pool, 0, _keys([1, 2, 6, 7]), 4)
    assert pool.meta[0, NACTIVE] == 7
    for k in [1, 2, 3, 4]:
        release_nb(pool, 0, np.uint64(k), True)
    # 1 and 2 still held once; 3, 4 inactive (insertion order 3, 4)
    assert pool.meta[0, NACTIVE] == 5 and pool.meta[0, NINACTIVE] == 2
    for k in [1, 2, 5, 6, 7]:
        release_nb(pool, 0, np.uint64(k), True)
    assert pool.meta[0, NACTIVE] == 0 and pool.meta[0, NINACTIVE] == 7
    assert match_prefix_nb(pool, 0, _keys([3, 4, 9]), 3) == (2, 0)
    # 3 new blocks fill the 3 free slots; 2 more evict the two oldest inactive blocks (3, then 4)
    use_nb(pool, 0, _keys([10, 11, 12, 13, 14]), 5)
    assert lookup_nb(pool, 0, np.uint64(3)) == -1
    assert lookup_nb(pool, 0, np.uint64(4)) == -1
    assert lookup_nb(pool, 0, np.uint64(1)) >= 0
    assert pool.meta[0, NEVICT] == 2


def test_failure_on_max_capacity():
    pool = make_pool(1, 10)
    keys = _keys(range(1, 11))
    assert can_use_nb(pool, 0, keys, 10, 10)
    use_nb(pool, 0, keys, 10)
    assert not can_use_nb(pool, 0, _keys([11]), 1, 1)
    # an active hit needs no room
    assert can_use_nb(pool, 0, _keys([3]), 1, 1)


def test_uncacheable_release_frees_the_slot():
    pool = make_pool(1, 4)
    use_nb(pool, 0, _keys([1, 2]), 2)
    release_nb(pool, 0, np.uint64(2), False)
    assert lookup_nb(pool, 0, np.uint64(2)) == -1
    assert pool.meta[0, NINACTIVE] == 0 and pool.meta[0, NACTIVE] == 1


def test_ranks_are_independent():
    pool = make_pool(3, 4)
    use_nb(pool, 1, _keys([7, 8]), 2)
    assert lookup_nb(pool, 0, np.uint64(7)) == -1
    assert lookup_nb(pool, 2, np.uint64(7)) == -1
    assert lookup_nb(pool, 1, np.uint64(7)) >= 0
    assert pool.meta[1, NACTIVE] == 2 and pool.meta[0, NACTIVE] == 0


@pytest.mark.parametrize("seed", range(5))
def test_random_operations_match_slow_reference(seed):
    rng = np.random.default_rng(seed)
    cap = 16
    pool = make_pool(1, cap)
    ref = SlowPool(cap)
    held = []  # keys we hold a reference to (with multiplicity)
    for _ in range(3000):
        op = rng.integers(0, 3)
        if op == 0:
            keys = list(dict.fromkeys(int(k) for k in rng.integers(1, 40, size=rng.integers(1, 5))))
            arr = _keys(keys)
            ok = can_use_nb(pool, 0, arr, len(keys), len(keys))
            assert ok == ref.can_use(keys)
            if ok:
                use_nb(pool, 0, arr, len(keys))
                ref.use(keys)
                held.extend(keys)
        elif op == 1 and held:
            k = held.pop(int(rng.integers(0, len(held))))
            cacheable = bool(rng.integers(0, 4))
            release_nb(pool, 0, np.uint64(k), cacheable)
            ref.release(k, cacheable)
        else:
            keys = [int(k) for k in rng.integers(1, 40, size=6)]
            assert match_prefix_nb(pool, 0, _keys(keys), 6) == ref.match(keys)
        assert pool.meta[0, NACTIVE] == len(ref.active)
        assert pool.meta[0, NINACTIVE] == len(ref.inactive)
    for k in range(1, 40):
        assert (lookup_nb(pool, 0, np.uint64(k)) >= 0) == (k in ref.active or k in ref.inactive)


@njit
def _alloc_new_and_register(pool, keys, n):
    """``n`` new blocks at once (as an admission takes them: one eviction of many blocks), then
    registered (``register_nb`` is callable only from kernels)."""
    slots = np.zeros(n, dtype=np.int64)
    alloc_nb(pool, 0, keys, n, slots, 0, 0, n, n, np.full(1, -1, dtype=np.int64))
    register_nb(pool, 0, slots, 0, 0, n)


@pytest.mark.parametrize("seed", range(3))
def test_long_prompts_match_slow_reference(seed):
    """Key lists longer than the pool's look-ahead (matches, all-or-nothing checks and evictions
    fetch memory several keys ahead of themselves): every length from 0 up, same answers."""
    rng = np.random.default_rng(100 + seed)
    cap = 48
    pool = make_pool(1, cap)
    ref = SlowPool(cap)
    held = []
    fresh = 1000  # keys never seen: a long allocation of new blocks evicts many at once
    for _ in range(1500):
        op = rng.integers(0, 4)
        if op == 3:
            n = int(rng.integers(1, 30))
            keys = list(range(fresh, fresh + n))
            fresh += n
            if can_use_nb(pool, 0, _keys(keys), n, 0):
                assert ref.can_use(keys)
                _alloc_new_and_register(pool, _keys(keys), n)
                ref.use(keys)
                held.extend(keys)
        elif op == 0:
            n = int(rng.integers(0, 30))
            keys = list(dict.fromkeys(int(k) for k in rng.integers(1, 90, size=n)))
            arr = _keys(keys) if keys else np.zeros(0, dtype=np.uint64)
            ok = can_use_nb(pool, 0, arr, len(keys), len(keys))
            assert ok == ref.can_use(keys)
            if ok:
                use_nb(pool, 0, arr, len(keys))
                ref.use(keys)
                held.extend(keys)
        elif op == 1 and held:
            for _ in range(int(rng.integers(1, 12))):
                if held:
                    k = held.pop(int(rng.integers(0, len(held))))
                    release_nb(pool, 0, np.uint64(k), True)
                    ref.release(k, True)
        else:
            n = int(rng.integers(0, 30))
            keys = [int(k) for k in rng.integers(1, 90, size=n)]
            arr = _keys(keys) if keys else np.zeros(0, dtype=np.uint64)
            assert match_prefix_nb(pool, 0, arr, n) == ref.match(keys)
        assert pool.meta[0, NACTIVE] == len(ref.active)
        assert pool.meta[0, NINACTIVE] == len(ref.inactive)
        assert pool.meta[0, NEVICT] == ref.evicted


def test_anonymous_blocks_keep_their_lru_place():
    """Private blocks are held without slots; a finished request's become one dead run in the LRU
    (evicted block by block, in LRU order), a preempted request's are registered under their keys."""
    from fastsim.kernels.blocks import unique_key_nb
    from fastsim.kernels.kvpool import NFREE, alloc_nb, free_slots_nb

    pool = make_pool(1, 8)
    table = np.full(4, -7, dtype=np.int32)  # slots of shareable blocks only
    kbuf = np.zeros(4, dtype=np.uint64)
    none = np.full(4, -1, dtype=np.int64)  # no slots of hits known: alloc_nb looks them up
    # row 0: three private blocks, all anonymous; it finishes: one run node of 3 dead blocks
    alloc_nb(pool, 0, kbuf, 3, table, 0, 0, 0, 0, none)
    assert (table == -7).all()
    assert pool.meta[0, NACTIVE] == 3 and pool.meta[0, NFREE] == 5
    free_slots_nb(pool, 0, table, 0, 3, 3, False, 0, 0, 0)
    assert pool.meta[0, NINACTIVE] == 3 and pool.slot_run.sum() == 3
    # row 1: a shared block K and two private ones; it is preempted: all three stay findable
    kbuf[0] = 77
    alloc_nb(pool, 0, kbuf, 3, table, 0, 0, 1, 1, none)
    assert table[0] >= 0 and (table[1:] == -7).all()
    free_slots_nb(pool, 0, table, 0, 3, 3, True, 1, 1, 1)
    own = _keys([77, unique_key_nb(1, 1), unique_key_nb(1, 2)])
    assert match_prefix_nb(pool, 0, own, 3) == (3, 0)
    assert pool.meta[0, NINACTIVE] == 6 and pool.meta[0, NFREE] == 2
    # row 2 takes 4 new blocks: 2 free ones, then 2 evicted from the oldest entry (the run)
    alloc_nb(pool, 0, kbuf, 4, table, 1, 0, 0, 0, none)
    assert pool.meta[0, NEVICT] == 2 and pool.slot_run.sum() == 1
    assert match_prefix_nb(pool, 0, own, 3) == (3, 0)
    # 2 more: the run's last block, then row 1's last block (released first, so older than K)
    alloc_nb(pool, 0, kbuf, 2, table, 1, 0, 0, 0, none)
    assert pool.meta[0, NEVICT] == 4 and pool.slot_run.sum() == 0
    assert match_prefix_nb(pool, 0, own, 3) == (2, 0)
    assert pool.meta[0, NACTIVE] == 6 and pool.meta[0, NINACTIVE] == 2 and pool.meta[0, NFREE] == 0
    free_slots_nb(pool, 0, table, 1, 6, 0, False, 2, 0, 0)  # (row 2 released as partial: freed)
    # a re-admitted row 1 reactivates its two cached blocks (K has a slot in its table, its
    # private block is found by key) and allocates the third anew
    alloc_nb(pool, 0, own, 3, table, 0, 2, 2, 1, none)
    assert pool.meta[0, NINACTIVE] == 0 and pool.meta[0, NACTIVE] == 3
    free_slots_nb(pool, 0, table, 0, 3, 3, False, 1, 2, 1)
    assert pool.meta[0, NACTIVE] == 0 and pool.meta[0, NINACTIVE] == 3
    assert match_prefix_nb(pool, 0, own, 3) == (2, 0)
