"""The host KV tier's state and lanes (kernels/host_tier.py) against the transfer times measured on
Dynamo 1.6.1 (docs/decisions/0350: 64-token blocks of 131072 bytes a token, 8388608 bytes a block)
and the rules of aisimulate-core 0.13.0's tier (whole cohorts, pending entries, completion order)."""

import numpy as np
import pytest

from fastsim.kernels.host_tier import (
    ALREADY_PRESENT, HIT, LOAD, LOG_FULL, MISS, PENDING, PREPARED, RETRY_CAPACITY, STORE,
    deadline_nb, loading_nb, lookup_nb, make_host_tier, next_deadline_nb, pop_due_nb,
    prepare_store_nb, resident_blocks_nb, schedule_load_nb, store_fence_nb, submit_prepared_nb, touch_nb)


def keys(*ks):
    return np.array(ks, dtype=np.uint64)


def tier(cap=100, d2h=32.0, h2d=32.0, latency=0.0, ranks=1, **kw):
    return make_host_tier(ranks, cap, 64, 131072, d2h, h2d, latency, **kw)


def store_resident(ht, k, ks, now=0.0):
    assert prepare_store_nb(ht, k, 0, ks, ks, len(ks))[0] == PREPARED
    submit_prepared_nb(ht, k, now)
    while pop_due_nb(ht, k, np.inf)[0] >= 0:
        pass


@pytest.mark.parametrize("gbps, latency, after", [(1.0, 0.0, 58.720256), (0.1, 0.0, 587.20256),
                                                  (1.0, 2.0, 60.720256), (0.0, 0.0, 0.0)])
def test_load_times_as_measured(gbps, latency, after):
    # 7 blocks back from host: Dynamo admits the request this long after its arrival (100 ms here)
    ht = tier(h2d=gbps, latency=latency)
    ks = keys(*range(1, 8))
    store_resident(ht, 0, ks)
    status, tid = schedule_load_nb(ht, 0, 5, ks, 7, 100.0, 0.0)
    assert status == PREPARED
    assert deadline_nb(ht, 0, tid) == 100.0 + after
    assert all(loading_nb(ht, 0, k) for k in ks)
    assert pop_due_nb(ht, 0, 100.0 + after) == (tid, LOAD, 5)
    assert not any(loading_nb(ht, 0, k) for k in ks)


def test_store_times_as_measured():
    # D2H at 0.01 GB/s: 8 blocks from the end of a prefill pass at 24.385704 ms, then 18 blocks
    # submitted at 6803.329139 ms, after the lane is free (0350, rule 3)
    ht = tier(d2h=0.01)
    status, first = prepare_store_nb(ht, 0, 0, keys(*range(1, 9)), keys(*range(1, 9)), 8)
    assert status == PREPARED and deadline_nb(ht, 0, first) == np.inf  # prepared, not submitted
    assert lookup_nb(ht, 0, np.uint64(1)) == PENDING
    assert submit_prepared_nb(ht, 0, 24.385704) == 1
    assert deadline_nb(ht, 0, first) == 24.385704 + 6710.8864
    assert deadline_nb(ht, 0, first) == pytest.approx(6735.272104, abs=1e-9)  # Dynamo's first token - prefill
    assert pop_due_nb(ht, 0, 6735.0)[0] == -1
    assert pop_due_nb(ht, 0, deadline_nb(ht, 0, first)) == (first, STORE, 0)
    assert lookup_nb(ht, 0, np.uint64(1)) == HIT
    status, second = prepare_store_nb(ht, 0, 1, keys(*range(101, 119)), keys(*range(101, 119)), 18)
    submit_prepared_nb(ht, 0, 6803.329139)
    assert deadline_nb(ht, 0, second) == 6803.329139 + 18 * 8388608 / 0.01e6
    assert deadline_nb(ht, 0, second) == pytest.approx(21902.823539, abs=1e-9)


def test_lane_is_fifo_and_latency_delays_the_start():
    ht = tier(d2h=1.0, latency=2.0)
    a = prepare_store_nb(ht, 0, 0, keys(1), keys(1), 1)[1]
    b = prepare_store_nb(ht, 0, 1, keys(2, 3), keys(2, 3), 2)[1]
    submit_prepared_nb(ht, 0, 10.0)
    assert deadline_nb(ht, 0, a) == 12.0 + 8.388608
    assert deadline_nb(ht, 0, b) == 12.0 + 8.388608 + 2 * 8.388608
    c = prepare_store_nb(ht, 0, 2, keys(4), keys(4), 1)[1]
    submit_prepared_nb(ht, 0, 1000.0)  # the lane is idle again: starts at 1002
    assert deadline_nb(ht, 0, c) == 1002.0 + 8.388608


def test_store_takes_only_missing_blocks_and_whole_cohorts():
    ht = tier(cap=5)
    store_resident(ht, 0, keys(1, 2))
    assert prepare_store_nb(ht, 0, 0, keys(1, 2), keys(1, 2), 2) == (ALREADY_PRESENT, -1)
    status, tid = prepare_store_nb(ht, 0, 0, keys(1, 2, 3, 4), keys(1, 2, 3, 4), 4)
    assert status == PREPARED
    assert lookup_nb(ht, 0, np.uint64(3)) == PENDING and lookup_nb(ht, 0, np.uint64(5)) == MISS
    submit_prepared_nb(ht, 0, 0.0)
    # the two missing blocks only, after the first store in the lane
    assert deadline_nb(ht, 0, tid) == 2 * 8388608 / 32e6 + 2 * 8388608 / 32e6
    # two more missing blocks need one victim: the resident block with the smaller hash (1 and 2
    # share their store's recency)
    assert prepare_store_nb(ht, 0, 0, keys(5, 6), keys(5, 6), 2)[0] == PREPARED
    assert lookup_nb(ht, 0, np.uint64(1)) == MISS and lookup_nb(ht, 0, np.uint64(2)) == HIT
    # the tier is full: the only resident block is in the next cohort (kept), the rest pending
    assert prepare_store_nb(ht, 0, 0, keys(2, 7), keys(2, 7), 2) == (RETRY_CAPACITY, -1)
    assert lookup_nb(ht, 0, np.uint64(2)) == HIT and lookup_nb(ht, 0, np.uint64(7)) == MISS


def test_same_deadline_completes_store_before_load_then_by_id():
    ht = tier(d2h=0.0, h2d=0.0)
    store_resident(ht, 0, keys(1))
    load = schedule_load_nb(ht, 0, 7, keys(1), 1, 5.0, 0.0)[1]
    store = prepare_store_nb(ht, 0, 8, keys(2), keys(2), 1)[1]
    submit_prepared_nb(ht, 0, 5.0)
    assert load < store and next_deadline_nb(ht, 0) == 5.0
    assert pop_due_nb(ht, 0, 5.0) == (store, STORE, 8)
    assert pop_due_nb(ht, 0, 5.0) == (load, LOAD, 7)
    assert next_deadline_nb(ht, 0) == np.inf


def test_load_waits_for_its_fence():
    ht = tier(h2d=1.0)
    store_resident(ht, 0, keys(1))
    tid = schedule_load_nb(ht, 0, 0, keys(1), 1, 3.0, 50.0)[1]
    assert deadline_nb(ht, 0, tid) == 50.0 + 8.388608


def test_ranks_are_independent():
    ht = tier(ranks=2, cap=1)
    store_resident(ht, 1, keys(9))
    assert lookup_nb(ht, 1, np.uint64(9)) == HIT and lookup_nb(ht, 0, np.uint64(9)) == MISS
    assert prepare_store_nb(ht, 0, 0, keys(9), keys(9), 1)[0] == PREPARED
    assert resident_blocks_nb(ht, 1) == 1 and resident_blocks_nb(ht, 0) == 0


def test_full_rings_ask_for_a_larger_run():
    ht = tier(n_live=2, n_keys=4)
    assert prepare_store_nb(ht, 0, 0, keys(1, 2, 3), keys(1, 2, 3), 3)[0] == PREPARED
    assert prepare_store_nb(ht, 0, 0, keys(4, 5), keys(4, 5), 2) == (LOG_FULL, -1)  # 5 keys > 4
    assert prepare_store_nb(ht, 0, 0, keys(4), keys(4), 1)[0] == PREPARED
    assert prepare_store_nb(ht, 0, 0, keys(6), keys(6), 1) == (LOG_FULL, -1)  # 3 transfers > 2
    assert lookup_nb(ht, 0, np.uint64(6)) == MISS
    submit_prepared_nb(ht, 0, 0.0)
    pop_due_nb(ht, 0, np.inf)
    assert prepare_store_nb(ht, 0, 0, keys(6), keys(6), 1)[0] == PREPARED  # the first one's room is free


def test_store_fence_while_in_flight_only():
    ht = tier(d2h=1.0, h2d=1.0)
    a = prepare_store_nb(ht, 0, 0, keys(1), keys(1), 1)[1]
    store_resident(ht, 0, keys(2))  # (submits and completes a as well)
    assert store_fence_nb(ht, 0, a) == -np.inf
    b = prepare_store_nb(ht, 0, 0, keys(3), keys(3), 1)[1]
    load = schedule_load_nb(ht, 0, 0, keys(1), 1, 100.0, 0.0)[1]
    c = prepare_store_nb(ht, 0, 0, keys(4), keys(4), 1)[1]
    assert store_fence_nb(ht, 0, c) == np.inf  # prepared in this pass: read until submitted
    submit_prepared_nb(ht, 0, 100.0)
    assert store_fence_nb(ht, 0, b) == 100.0 + 8.388608
    assert store_fence_nb(ht, 0, c) == (100.0 + 8.388608) + 8.388608  # FIFO: after b
    assert pop_due_nb(ht, 0, 100.0 + 8.388608) == (b, STORE, 0)  # (the load ends at the same time)
    assert store_fence_nb(ht, 0, b) == -np.inf and store_fence_nb(ht, 0, c) > 100.0
    assert pop_due_nb(ht, 0, np.inf)[0] == load


def test_lru_order_touches_and_load_pins():
    """Victims: oldest recency first; one transfer's blocks share one recency, ordered by hash; a
    touch gives one block its own; a block a load reads is no victim until the load ends."""
    ht = tier(cap=4, d2h=0.0, h2d=0.0)
    # one store of keys 1-4 whose hashes order them 3, 1, 4, 2
    status, tid = prepare_store_nb(ht, 0, 0, keys(1, 2, 3, 4), keys(20, 40, 10, 30), 4)
    submit_prepared_nb(ht, 0, 0.0)
    assert pop_due_nb(ht, 0, 0.0)[0] == tid
    touch_nb(ht, 0, np.uint64(3))  # 3 becomes the most recent
    load = schedule_load_nb(ht, 0, 9, keys(1), 1, 0.0, 0.0)[1]  # 1 is pinned by a load
    prepare_store_nb(ht, 0, 1, keys(5), keys(5), 1)
    assert lookup_nb(ht, 0, np.uint64(4)) == MISS  # 4 (hash 30) before 2 (hash 40)
    prepare_store_nb(ht, 0, 1, keys(6), keys(6), 1)
    assert lookup_nb(ht, 0, np.uint64(2)) == MISS
    prepare_store_nb(ht, 0, 1, keys(7), keys(7), 1)  # 3, touched, is the last unpinned resident block
    assert lookup_nb(ht, 0, np.uint64(3)) == MISS and lookup_nb(ht, 0, np.uint64(1)) == HIT
    # left: 1 (loading), 5, 6 and 7 (pending): no victim for one more block
    assert prepare_store_nb(ht, 0, 1, keys(8), keys(8), 1) == (RETRY_CAPACITY, -1)
    submit_prepared_nb(ht, 0, 0.0)
    done = []
    while True:
        x = pop_due_nb(ht, 0, 0.0)[0]
        if x < 0:
            break
        done.append(x)
    assert done[-1] == load  # same deadline: the stores first
    # the store of 5 completed first: the oldest recency now
    assert prepare_store_nb(ht, 0, 1, keys(8), keys(8), 1)[0] == PREPARED
    assert lookup_nb(ht, 0, np.uint64(5)) == MISS and resident_blocks_nb(ht, 0) == 3


def test_evicted_entries_leave_every_other_key_reachable():
    """Evictions delete table entries (linear probing with back shifts): many rounds on a small
    table keep every resident key found."""
    ht = tier(cap=8, d2h=0.0, h2d=0.0)
    live = []
    for r in range(200):
        ks = keys(*(1000 + 3 * r + j for j in range(3)))
        assert prepare_store_nb(ht, 0, r, ks, ks, 3)[0] == PREPARED
        submit_prepared_nb(ht, 0, 0.0)
        while pop_due_nb(ht, 0, 0.0)[0] >= 0:
            pass
        live = (live + [int(k) for k in ks])[-8:]
        assert resident_blocks_nb(ht, 0) == 8 if r >= 2 else True
    assert all(lookup_nb(ht, 0, np.uint64(k)) == HIT for k in live[-6:])
