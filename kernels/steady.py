"""Steady decoding: running requests kept implicit between the passes where something happens to
them (a block start, their last token), and the light path of a pass made of them alone."""

from fastsim.kernels.admission import cached_tokens
from fastsim.kernels.blocks import block_mod, blocks_ceil
from fastsim.kernels.codes import HANDED, PREFILL, WAITING
from fastsim.kernels.jit import inline, inner
from fastsim.kernels.kvpool import NACTIVE, alloc_anon_nb
from fastsim.kernels.pass_time import step_ms
from fastsim.kernels.rank_state import DIAG_STEADY_PASSES, DUE, HOLD0


# ----------------------------------------------------------------------------- steady decoding
# A running request whose prompt is computed and whose KV ends exactly at its last computed token
# takes one budget token per pass, emits one token per pass, and needs a new block every
# ``block_size`` passes: nothing about it changes between those events except by formula. Such a
# *steady* member leaves the explicit running list (it stays in the running list, which keeps the
# running order) and is kept implicit: ``generated`` holds its count at rank pass ``sbase``. Its
# decode step starts a new block in every pass with one residue mod ``block_size``: the rank
# counts its steady members by that residue (``bcnt``) and allocates a pass's new output blocks
# by the count. It is filed in its rank's due wheel under the pass of its last token (mod
# ``DUE``). A pass then costs O(explicit members + members finishing), not O(running). It is
# exact: a pass runs this way only when its outcome cannot depend on where the steady members
# stand in the running order (every steady member gets its token, see ``steady_ok``, and every
# allocation fits, so nothing is preempted); otherwise the rank first makes every member explicit
# again (``materialize_nb``), runs the one-at-a-time pass and stays explicit for a while
# (doubling holds). Completions and block releases still happen one request at a time, in
# running order (by ``seq``).
@inner
def end_gen(p, rq, r):
    """Tokens ``r`` has generated when it finishes (its output length, or the model-length cap)."""
    e = rq.osl[r]
    if p.max_model_len > 0 and p.max_model_len - rq.isl[r] < e:
        e = p.max_model_len - rq.isl[r]
    return e

@inner
def block_residue(p, rq, r):
    """Steady member ``r`` starts a new block in its decode step of every rank pass ``P`` with
    ``P % bs`` equal to this (its length before that step is ``isl + generated + P - sbase``)."""
    return block_mod(p, rq.sbase[r] + 1 - rq.isl[r] - rq.generated[r])

@inner
def due_pass(p, rq, r):
    """The rank pass in which steady member ``r`` emits its last token."""
    return rq.sbase[r] + end_gen(p, rq, r) - rq.generated[r] - 1

@inner
def steady_join(p, rq, rk, k, r):
    """Count steady member ``r`` (``sbase`` set) among its rank's block starts and file it under
    the pass of its last token."""
    bs = p.block_size
    rk.bcnt[k * bs + block_residue(p, rq, r)] += 1
    b = k * DUE + due_pass(p, rq, r) % DUE
    rq.wnext[r] = rk.wheel[b]
    rk.wheel[b] = r

@inner
def materialize_nb(p, rq, rk, k, pass_idx, prev_end):
    """Make every steady member of rank ``k`` explicit, with its exact state before rank pass
    ``pass_idx``; ``prev_end`` is the end of the rank's last pass (their last token)."""
    if rk.nsteady[k] == 0:
        return
    isl = rq.isl
    gen = rq.generated
    sbase = rq.sbase
    qnext = rq.qnext
    xnext = rq.xnext
    xprev = rq.xprev
    prev = -1
    cur = rk.run_head[k]
    while cur >= 0:
        if sbase[cur] >= 0:
            g = gen[cur] + (pass_idx - sbase[cur])
            gen[cur] = g
            rq.computed[cur] = isl[cur] + g - 1
            rq.alloc[cur] = isl[cur] + g - 1
            rq.last_token[cur] = prev_end
            sbase[cur] = -1
        xprev[cur] = prev
        xnext[cur] = qnext[cur]
        prev = cur
        cur = qnext[cur]
    rk.xhead[k] = rk.run_head[k]
    rk.xtail[k] = rk.run_tail[k]
    bs = p.block_size
    for b in range(k * bs, (k + 1) * bs):
        rk.bcnt[b] = 0
    for b in range(k * DUE, (k + 1) * DUE):
        rk.wheel[b] = -1
    rk.nsteady[k] = 0
    rk.smax[k] = -1
    rk.slen[k] = 0
    rk.sechead[k] = -1
    rk.secdue[k] = -1

@inner
def steady_ok(p, pool, rq, rk, k, pass_idx):
    """True if this pass's outcome cannot depend on where the steady members stand in the running
    order: every steady member gets its token (the explicit members ahead of the last steady one
    get their whole demand and still leave one token per steady member; those behind it share
    what is left, in order, as in the one-at-a-time pass), and every block anyone may allocate
    fits the pool (so no allocation fails and nothing is preempted)."""
    bs = p.block_size
    isl = rq.isl
    gen = rq.generated
    need = rk.bcnt[k * bs + block_mod(p, pass_idx)]
    demand = rk.nsteady[k]
    smax = rk.smax[k]
    cur = rk.xhead[k]
    while cur >= 0:
        length = isl[cur] + gen[cur]
        if rq.seq[cur] < smax:
            demand += length - rq.computed[cur]
        nb = blocks_ceil(p, length) - blocks_ceil(p, rq.alloc[cur])
        if nb > 0:
            need += nb
        cur = rq.xnext[cur]
    return demand <= p.budget and need <= p.cap - pool.meta[k, NACTIVE]

# ----------------------------------------------------------------------------- steady passes
# A pass of a rank whose running requests are all steady members, with nothing waiting, nobody
# due to finish and every block start fitting the pool, changes only counters: each member takes
# one token, the members starting a block allocate it (anonymous blocks), and the decode time
# follows from the active block count. ``rank_pass_nb`` does exactly that in this state, through
# its general walks; ``steady_pass_nb`` does it directly. The event loop takes this light path
# for a group's pass that ends with nothing else due (see ``kernels/loop.py``); light loads,
# where a rank decodes alone for many passes between arrivals, are mostly made of such passes.
@inline
def steady_next_ok(p, pool, rq, rk, k, P, nact):
    """The part of ``steady_pass_ok`` that changes from one steady pass to the next: at rank pass
    ``P``, with ``nact`` active blocks, nobody is due and every block start fits the pool."""
    if rk.bcnt[k * p.block_size + block_mod(p, P)] > p.cap - nact:
        return False
    w = rk.wheel[k * DUE + P % DUE]
    while w >= 0:
        if due_pass(p, rq, w) == P:
            return False
        w = rq.wnext[w]
    return True

@inline
def waiting_blocked(p, pool, rq, rk, k, kbuf, hslot):
    """True if rank ``k``'s next pass admits nobody from its waiting queue, nor does any steady
    pass after it until the next event that reaches the rank: nothing waits, every seat is taken,
    or the queue's head (admissions go in queue order and stop at the head) needs more blocks than
    the pool has free. Steady passes take no seat, take free blocks and evict only cached ones,
    which can only shorten the head's cached prefix: a head that does not fit now fits in none of
    them. Writes only the scratch ``kbuf`` and ``hslot``."""
    if rk.n_wait[k] == 0:
        return True
    if not p.light_waiting:
        return False
    if rk.n_run[k] >= p.max_seqs:
        return True
    u = rk.wait_head[k]
    if rq.status[u] == HANDED:
        return False  # (a transferred prompt needs no new blocks)
    length = rq.isl[u] + rq.generated[u]
    if (p.max_model_len > 0 and rq.isl[u] >= p.max_model_len) or (
            rq.status[u] == WAITING and blocks_ceil(p, length) > p.cap):
        return False  # (rejected in the next pass: that is an event)
    active_cached = cached_tokens(p, pool, rq, k, u, kbuf, hslot)[1]
    return blocks_ceil(p, length) - active_cached > p.cap - pool.meta[k, NACTIVE]

@inline
def steady_pass_ok(p, pool, rq, rk, k, kbuf, hslot):
    """True if rank ``k``'s next pass is a steady pass (as above): its running requests are all
    steady members and it admits nobody (``waiting_blocked``). Changes nothing but the scratch
    ``kbuf`` and ``hslot``."""
    ns = rk.nsteady[k]
    if ns == 0 or rk.xhead[k] >= 0 or ns > p.budget or p.stage == PREFILL:
        return False
    if not steady_next_ok(p, pool, rq, rk, k, rk.rpass[k], pool.meta[k, NACTIVE]):
        return False
    return waiting_blocked(p, pool, rq, rk, k, kbuf, hslot)

@inline
def steady_pass_ms(p, perf, pool, rk, k):
    """The decode time of rank ``k``'s next pass, a steady pass. Changes nothing but the rank's
    memo of step times."""
    nb = rk.bcnt[k * p.block_size + block_mod(p, rk.rpass[k])]
    return step_ms(p, perf, rk, k, pool.meta[k, NACTIVE] + nb, rk.slen[k], rk.nsteady[k])

@inline
def steady_pass_nb(p, perf, pool, rk, k, now):
    """Run rank ``k``'s next pass, a steady pass (``steady_pass_ok``), starting at ``now``; returns
    its end. The caller stamps the members' tokens (``nsteady`` of them share one gap) and the
    second tokens of ``rk.secdue[k]``, as for ``rank_pass_nb``."""
    P = rk.rpass[k]
    rk.rpass[k] = P + 1
    rk.sback[k] = HOLD0
    rk.diag[DIAG_STEADY_PASSES] += 1
    rk.secdue[k] = rk.sechead[k]
    rk.sechead[k] = -1
    nb = rk.bcnt[k * p.block_size + block_mod(p, P)]
    if nb > 0:
        alloc_anon_nb(pool, k, nb)
    ns = rk.nsteady[k]
    decode_ms = step_ms(p, perf, rk, k, pool.meta[k, NACTIVE], rk.slen[k], ns)
    rk.slen[k] += ns
    return (now + 0.0) + decode_ms
