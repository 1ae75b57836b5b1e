"""Per-worker telemetry of the SGLang engine's loop, in compiled code.

The rows are the vLLM path's (``kernels/fleet.py``'s ``Fleet`` buffers, read by
``fastsim/results.py``'s ``telemetry_frame``), with the SGLang meanings of decision 0380: a
worker's running requests are the ones it has started: its DP ranks' running queues, the partly
prefilled requests back in their waiting queues between chunks, and the requests its pass in
flight completes at its end (the engine computes a pass at its start: they have left the queue,
but they finish only at the end); its waiting ones the rest of the ranks' waiting queues; ``kv_blocks_used`` the
radix pages no one can evict (held by requests or locked in the tree), ``kv_blocks_cached`` the
evictable pages of unlocked radix nodes, both as the pass start left them (the requests a pass
completes have released theirs into the radix cache then).
"""

from fastsim.kernels.fleet import ACTIVE, DRAINING, NCREATED, NEXTTEL, NLIVE, STARTING, TELN, write_row_nb
from fastsim.kernels.jit import inner, kernel_noalloc


@inner
def worker_counts_nb(q, s, k, t, g, dp, pages_per_rank):
    """Worker ``g``'s (running, waiting, KV pages used, KV pages cached), as the rows read them."""
    run = 0
    wait = 0
    used = 0
    cached = 0
    for r in range(g * dp, (g + 1) * dp):
        run += k.rn[r]
        row = k.wh[r]
        while row != -1:  # (a partly prefilled request has started: it runs between chunks)
            if 0 < q.mat[row] < q.isl[row] + q.gen[row]:
                run += 1
            else:
                wait += 1
            row = q.wnext[row]
        used += pages_per_rank - t.free[r] - t.evictable[r]
        cached += t.evictable[r]
    row = s.done_head[g]  # (the chain of the rows the pass in flight completes)
    while row != -1:
        run += 1
        row = q.done_next[row]
    return run, wait, used, cached


@inner
def sample_ticks_nb(fl, q, s, k, t, n_workers, dp, pages_per_rank, now):
    """Record one row per live worker for every tick before ``now`` (the state is constant between the
    loop's events, so a tick in ``[last event, now)`` sees it as the last event left it); False
    if the buffers are full (the caller grows them and calls the loop again)."""
    while fl.tel_ms > 0.0 and fl.ff[NEXTTEL] < now:
        n = fl.fs[TELN]
        if n + fl.fs[NLIVE] > fl.tel_t.shape[0]:
            return False
        tick = fl.ff[NEXTTEL]
        for g in range(fl.fs[NCREATED]):
            st = fl.gstate[g]
            if st != ACTIVE and st != DRAINING and st != STARTING:
                continue  # (one row per live worker: retired and cancelled ones have none)
            run, wait, used, cached = worker_counts_nb(q, s, k, t, g, dp, pages_per_rank)
            write_row_nb(fl, n, tick, g, run, wait, used, cached)
            n += 1
        fl.fs[TELN] = n
        fl.ff[NEXTTEL] = tick + fl.tel_ms
    return True


@kernel_noalloc
def live_totals_nb(fl, q, s, k, t, dp, pages_per_rank, out):
    """``out[:3]``: running, waiting and KV pages used over the live workers (a planner's view)."""
    out[0] = out[1] = out[2] = 0
    for g in range(fl.fs[NCREATED]):
        st = fl.gstate[g]
        if st == ACTIVE or st == DRAINING or st == STARTING:
            run, wait, used, _ = worker_counts_nb(q, s, k, t, g, dp, pages_per_rank)
            out[0] += run
            out[1] += wait
            out[2] += used
