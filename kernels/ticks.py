"""A run split into shards (``fastsim/shards.py``): its worker-seconds, from the shards' tick logs,
and its per-request results, written back into the cluster's rows.

The loop adds ``live * (t - now) / 1000`` at every event of the whole cluster, in time order
(``kernels/loop.py``, ``_step_ws``), and a float sum depends on the order and the places of its
terms. Each shard logs the times of its own events (``Cluster.tlog``); merged in time order they
are the events of the unsplit run, so folding them the same way gives its worker-seconds bit for
bit. (Events at one time add zero, in any order.)
"""

import numpy as np

from fastsim.kernels.jit import compiled

fold_kernel = compiled(_nrt=False, nogil=True)
merge_kernel = compiled(nogil=True)


@fold_kernel
def fold_ticks_nb(acc, live, a, b):
    """Fold the ticks of ``a`` and ``b`` (each in time order) into ``acc`` = [worker-seconds,
    time of the last tick], in merged time order, as the loop steps: ``ws += live * (t - now) /
    1000``."""
    ws = acc[0]
    now = acc[1]
    i = 0
    j = 0
    na = a.shape[0]
    nb = b.shape[0]
    while i < na or j < nb:
        if j >= nb or (i < na and a[i] <= b[j]):
            t = a[i]
            i += 1
        else:
            t = b[j]
            j += 1
        ws += live * (t - now) / 1000.0
        now = t
    acc[0] = ws
    acc[1] = now


@merge_kernel
def merge_ticks_nb(a, b):
    """``a`` and ``b`` (each in time order) merged into one array in time order."""
    out = np.empty(a.shape[0] + b.shape[0])
    i = 0
    j = 0
    for k in range(out.shape[0]):
        if j >= b.shape[0] or (i < a.shape[0] and a[i] <= b[j]):
            out[k] = a[i]
            i += 1
        else:
            out[k] = b[j]
            j += 1
    return out


@fold_kernel
def scatter_results_nb(dst_f, dst_i, dst_s, times, counts, rank, status, rank_map, first, step,
                       rows, lo, hi):
    """A shard's per-request results ``lo:hi`` into the cluster's: the shard's row ``i`` is the
    cluster's row ``first + i * step`` (``step`` > 0) or ``rows[i]`` (``step`` == 0).

    The six timestamp columns of ``times`` go to ``dst_f``, the four counts of ``counts``
    (output, reused, first reused, preemptions) to ``dst_i[:4]``, the rank through ``rank_map``
    (its last entry for -1) to ``dst_i[4]``, the status to ``dst_s``."""
    last = rank_map.shape[0] - 1
    for i in range(lo, hi):
        r = first + i * step if step > 0 else rows[i]
        for c in range(6):
            dst_f[c][r] = times[c][i]
        for c in range(4):
            dst_i[c][r] = counts[c][i]
        k = rank[i]
        dst_i[4][r] = rank_map[k if k >= 0 else last]
        dst_s[r] = status[i]
