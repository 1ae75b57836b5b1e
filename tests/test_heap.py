"""The event queues of kernels/heap.py: binary heaps and the tournament of pass completions, against
a sorted list under random operations (ties included: they go to the lower id / tie value)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from numba import njit

from fastsim.kernels.heap import heap_pop_nb, heap_push_nb, new_tourney, tourney_set_nb


@njit
def _set(tree, key, item, value):
    return tourney_set_nb(tree, key, item, value)


@njit
def _push(heap, count, key, tie, item):
    heap_push_nb(heap, count, 0, key, tie, item)


@njit
def _pop(heap, count, key, tie):
    return heap_pop_nb(heap, count, 0, key, tie)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 17, 64, 100])
def test_tournament_winner_is_least_key_then_id(n):
    rng = random.Random(n)
    tree, key = new_tourney(n)
    assert key.shape[0] >= n and tree.shape[0] == 2 * key.shape[0]
    pending = {}
    for _ in range(3000):
        i = rng.randrange(n)
        if i in pending and rng.random() < 0.5:
            del pending[i]
            root = _set(tree, key, i, np.inf)
        else:
            pending[i] = float(rng.choice([0, 1, 2, 3, rng.random()]))  # many ties
            root = _set(tree, key, i, pending[i])
        w = int(tree[1])
        assert root == (w, key[w])  # the new winner, handed back
        if pending:
            assert (key[w], w) == min((v, j) for j, v in pending.items())
        else:
            assert key[w] == np.inf


def test_heap_pops_in_key_then_tie_order():
    rng = random.Random(7)
    n = 500
    key = np.array([float(rng.choice([0, 1, 2, rng.random()])) for _ in range(n)])
    tie = np.array(rng.sample(range(n), n), dtype=np.int64)
    heap = np.zeros(n, dtype=np.int64)
    count = np.zeros(1, dtype=np.int64)
    inside, out = set(), []
    for _ in range(4 * n):
        if inside and (rng.random() < 0.45 or len(inside) == n):
            item = _pop(heap, count, key, tie)
            assert (key[item], tie[item]) == min((key[j], tie[j]) for j in inside)
            inside.remove(item)
            out.append(item)
        else:
            item = rng.choice([j for j in range(n) if j not in inside])
            _push(heap, count, key, tie, item)
            inside.add(item)
    assert int(count[0]) == len(inside) and out
