"""A rank's waiting and running queues: intrusive doubly linked lists over request rows (heads
and tails in ``Ranks``), and a request's arrival into them."""

import numpy as np

from fastsim.kernels.codes import RUNNING, WAITING
from fastsim.kernels.jit import inner
from fastsim.kernels.rank_state import ADMISSIONS


# ----------------------------------------------------------------------------- queues
# Intrusive doubly linked lists over request rows: ``nxt``/``prv`` are the link columns (qnext/qprev
# for the waiting and running lists, xnext/xprev for the explicit running list).
@inner
def unlink(nxt, prv, heads, tails, k, r):
    p = prv[r]
    n = nxt[r]
    if p >= 0:
        nxt[p] = n
    else:
        heads[k] = n
    if n >= 0:
        prv[n] = p
    else:
        tails[k] = p
    prv[r] = -1
    nxt[r] = -1

@inner
def push_back(nxt, prv, heads, tails, k, r):
    t = tails[k]
    prv[r] = t
    nxt[r] = -1
    if t >= 0:
        nxt[t] = r
    else:
        heads[k] = r
    tails[k] = r

@inner
def push_front(nxt, prv, heads, tails, k, r):
    h = heads[k]
    nxt[r] = h
    prv[r] = -1
    if h >= 0:
        prv[h] = r
    else:
        tails[k] = r
    heads[k] = r

@inner
def unlink_waiting(rq, rk, k, r):
    unlink(rq.qnext, rq.qprev, rk.wait_head, rk.wait_tail, k, r)
    rk.n_wait[k] -= 1

@inner
def start_running(rq, rk, k, r):
    """Append ``r`` to rank ``k``'s running list (and its explicit part)."""
    push_back(rq.qnext, rq.qprev, rk.run_head, rk.run_tail, k, r)
    push_back(rq.xnext, rq.xprev, rk.xhead, rk.xtail, k, r)
    rk.n_run[k] += 1
    rq.status[r] = RUNNING
    rq.seq[r] = rk.counters[ADMISSIONS]
    rk.counters[ADMISSIONS] += 1

@inner
def stop_running(rq, rk, k, r, explicit):
    unlink(rq.qnext, rq.qprev, rk.run_head, rk.run_tail, k, r)
    if explicit:
        unlink(rq.xnext, rq.xprev, rk.xhead, rk.xtail, k, r)
    rk.n_run[k] -= 1

@inner
def arrive_nb(rq, r, t):
    """Request ``r`` arrives at ``t``: its row starts here. ``state.request_table`` leaves the row as
    zeros (filling every row up front cost more than this, made while the row is in cache): the
    result times start unset (NaN) and the links and the steady base at -1. Every later value of
    ``sbase`` is -1 or a pass number + 1, so ``sbase == 0`` marks a row that never arrived
    (``state.settle_unarrived`` gives such rows the same start after a capped run)."""
    rq.arrival[r] = t
    rq.first_admit[r] = np.nan
    rq.first_token[r] = np.nan
    rq.second_token[r] = np.nan
    rq.last_token[r] = np.nan
    rq.terminal[r] = np.nan
    rq.sbase[r] = -1
    rq.rank[r] = -1
    rq.qnext[r] = -1
    rq.qprev[r] = -1
    rq.xnext[r] = -1
    rq.xprev[r] = -1

@inner
def enqueue_waiting_nb(rq, rk, k, r):
    """Submit request ``r`` to rank ``k``'s waiting queue (Dynamo's ``receive``)."""
    rq.status[r] = WAITING
    rq.rank[r] = k
    rq.computed[r] = 0
    push_back(rq.qnext, rq.qprev, rk.wait_head, rk.wait_tail, k, r)
    rk.n_wait[k] += 1
