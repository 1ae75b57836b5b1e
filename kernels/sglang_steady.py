"""Steady decoding on the SGLang engine: a rank's running requests kept implicit between their
events, so that a decode pass costs O(1) plus the requests something happens to.

Between two events a running request of a 1.6.1 rank (its prompt computed, its pages laid out as
one decode step after another leaves them) takes one token in every decode step of its rank and
nothing else about it changes but by formula: after ``D - base`` steps from its ``base`` step it
has ``g0 + D - base`` tokens. A *steady member* keeps ``base`` and ``g0`` only; its explicit
columns (``gen``, ``mat``, ``alloc``, ``own``) are stale until it leaves. Its events are known
when it joins, as residues of the step index modulo the page size: the steps in which its next
token needs a new page (counted by residue, ``acnt``: the pass only needs how many), the steps in
which its token fills a page (then the page goes into the radix cache, which must happen one
request at a time in running order: a list per residue, in join order) and the step of its last
token (a due wheel). The aggregates a pass reads are kept as sums: the running lengths (the
decode time) and the remaining outputs (the admission's KV reservation, see ``reserve_close``).

A rank is steady as a whole (``on``): every running request is a member, so that running order is
join order. Members join when the rank turns steady (all of them, in running order) and when a
prefill pass gives them their first token (they are last in running order). They leave when
they complete and when the rank turns explicit again (``materialize_nb``: before a retraction,
or when a request joins that is not laid out as the formulas assume), which holds the rank
explicit for a while (doubling holds, as on the vLLM path).

Token times: a member's tokens from its ``base`` step on are one run of its rank's decode steps
(``kernels/timelines.py``, whose ring is indexed by each rank's decode steps on this engine),
appended when it leaves. In a step, the members that joined since the rank's last decode step
(*fresh*, last in running order) are emitted one by one (their gap is their own); the others
(*settled*) share one gap, the time since the rank's last decode step, and are pooled at once.
"""

from typing import NamedTuple

import numpy as np

from fastsim.kernels.jit import inline, inner, llvm_inline
from fastsim.kernels.timelines import _append

DUE = 1024  # due wheel width per rank (a member is filed under its last step mod DUE)
HOLD_FIRST, HOLD_MAX = 8, 4096  # passes a rank stays explicit after it leaves steady decoding
# ``SgSteady.diag`` slots: steady decode steps, ranks turned steady, ranks made explicit again, exact
# reservations a steady rank needed
DIAG_STEPS, DIAG_ENTERS, DIAG_EXITS, DIAG_EXACT = range(4)


class SgSteady(NamedTuple):
    enabled: np.ndarray   # int64[1]: 1 if ranks may turn steady (1.6.1 open loops, the clip above every output)
    on: np.ndarray        # int64[R]: 1 while the rank's running requests are all steady members
    step: np.ndarray      # int64[R]: decode steps the rank has taken (its ring index)
    dec: np.ndarray       # int64[R]: 1 if the rank's pass in flight took a decode step
    last_end: np.ndarray  # float64[R]: end of the rank's last decode step
    settled: np.ndarray   # int64[R]: members the rank's marker in this pass's emissions stands for
    fresh: np.ndarray     # int64[R]: the first fresh member (-1: none); the fresh ones end the running list
    nfresh: np.ndarray    # int64[R]
    tsum: np.ndarray      # int64[R]: members' lengths (prompt + output so far)
    rsum: np.ndarray      # int64[R]: members' remaining outputs
    hold: np.ndarray      # int64[R]: passes before the rank may turn steady again
    holdlen: np.ndarray   # int64[R]: the next hold
    joins: np.ndarray     # int64[R]: members joined so far (join order)
    acnt: np.ndarray      # int64[R * ps]: members whose token needs a new page in steps of each residue
    ihead: np.ndarray     # int64[R * ps]: members whose token fills a page in steps of each residue
    itail: np.ndarray     # int64[R * ps]
    wheel: np.ndarray     # int64[R * DUE]: members by their last step mod DUE
    base: np.ndarray      # int64[n]: a member's first steady step (-1: explicit)
    g0: np.ndarray        # int64[n]: its tokens before that step
    order: np.ndarray     # int64[n]: its join order
    iprev: np.ndarray     # int64[n]
    inext: np.ndarray     # int64[n]
    wnext: np.ndarray     # int64[n]
    due: np.ndarray       # int64[n]: scratch: the members completing in a step
    subs: np.ndarray      # float64[n + 300]: scratch: a pass's admission charges, in order
    diag: np.ndarray      # int64[4]: counts, by the DIAG_ slots


def new_steady(n, n_ranks, ps, enabled):
    """The steady-decoding state of ``n`` requests on ``n_ranks`` ranks of page size ``ps``."""
    def ints(m, v=0):
        return np.full(m, v, np.int64)

    return SgSteady(np.array([1 if enabled else 0], np.int64), ints(n_ranks), ints(n_ranks), ints(n_ranks),
                    np.zeros(n_ranks), ints(n_ranks), ints(n_ranks, -1), ints(n_ranks), ints(n_ranks),
                    ints(n_ranks), ints(n_ranks), ints(n_ranks, HOLD_FIRST), ints(n_ranks), ints(n_ranks * ps),
                    ints(n_ranks * ps, -1), ints(n_ranks * ps, -1), ints(n_ranks * DUE, -1), ints(n, -1), ints(n),
                    ints(n), ints(n, -1), ints(n, -1), ints(n, -1), ints(n + 1), np.zeros(n + 300), ints(4))


# ---------------------------------------------------------------- one member
@inline
def _ceil(t, ps):
    return -(-t // ps) * ps


@inline
def laid_out(q, ps, row):
    """True if running request ``row`` is laid out as a steady member's formulas assume: a token
    or more, more to come, its whole sequence computed, its pages up to the last full one cached
    and the last partial one (if any) its own."""
    mat = q.mat[row]
    return (q.gen[row] >= 1 and q.osl[row] > q.gen[row] and mat == q.isl[row] + q.gen[row]
            and q.alloc[row] == _ceil(mat, ps) and q.cached[row] == mat // ps * ps
            and q.own[row] == -(-mat // ps) - mat // ps)


@inline
def fill_class(sd, q, ps, row):
    """The residue of the steps in which member ``row``'s token fills a page."""
    return (sd.base[row] - q.isl[row] - sd.g0[row] - 1) % ps


@inline
def due_step(sd, q, row):
    """The step of member ``row``'s last token."""
    return sd.base[row] + q.osl[row] - sd.g0[row] - 1


@llvm_inline
def join_nb(sd, q, ps, r, row):
    """Running request ``row`` of rank ``r`` (laid out, last in running order among the members)
    becomes a fresh steady member from the rank's next decode step."""
    b = sd.step[r]
    g = q.gen[row]
    length = q.isl[row] + g
    sd.base[row] = b
    sd.g0[row] = g
    sd.order[row] = sd.joins[r]
    sd.joins[r] += 1
    sd.acnt[r * ps + (b - length) % ps] += 1
    c = r * ps + (b - length - 1) % ps
    sd.inext[row] = -1
    sd.iprev[row] = sd.itail[c]
    if sd.itail[c] == -1:
        sd.ihead[c] = row
    else:
        sd.inext[sd.itail[c]] = row
    sd.itail[c] = row
    w = r * DUE + (b + q.osl[row] - g - 1) % DUE
    sd.wnext[row] = sd.wheel[w]
    sd.wheel[w] = row
    sd.tsum[r] += length
    sd.rsum[r] += q.osl[row] - g
    if sd.fresh[r] == -1:
        sd.fresh[r] = row
    sd.nfresh[r] += 1


@inline
def restore_nb(sd, q, ps, row, steps):
    """Member ``row``'s explicit columns after its rank's first ``steps`` decode steps."""
    g = sd.g0[row] + steps - sd.base[row]
    mat = q.isl[row] + g
    q.gen[row] = g
    q.mat[row] = mat
    q.alloc[row] = _ceil(mat, ps)
    q.own[row] = -(-mat // ps) - q.cached[row] // ps


@inline
def close_run_nb(sd, tl, row, r, steps):
    """Member ``row``'s tokens since its base step, one run of rank ``r``'s decode steps, into its
    token times."""
    c = steps - sd.base[row]
    if c > 0:
        _append(tl, row, sd.base[row], r, c, 0.0)


@inline
def unfile_fill_nb(sd, q, ps, r, row):
    """Member ``row`` out of its rank's list of page fills."""
    c = r * ps + fill_class(sd, q, ps, row)
    a, b = sd.iprev[row], sd.inext[row]
    if a == -1:
        sd.ihead[c] = b
    else:
        sd.inext[a] = b
    if b == -1:
        sd.itail[c] = a
    else:
        sd.iprev[b] = a


@llvm_inline
def take_due_nb(sd, q, r, D):
    """The members whose last token is rank ``r``'s step ``D``, in running order, into
    ``sd.due``; returns how many."""
    w = r * DUE + D % DUE
    row = sd.wheel[w]
    sd.wheel[w] = -1
    m = 0
    while row != -1:
        nxt = sd.wnext[row]
        if due_step(sd, q, row) == D:
            sd.due[m] = row
            m += 1
        else:  # due a lap of the wheel later
            sd.wnext[row] = sd.wheel[w]
            sd.wheel[w] = row
        row = nxt
    for a in range(1, m):  # insertion sort by join order (few complete in one step)
        x = sd.due[a]
        b = a - 1
        while b >= 0 and sd.order[sd.due[b]] > sd.order[x]:
            sd.due[b + 1] = sd.due[b]
            b -= 1
        sd.due[b + 1] = x
    return m


# ---------------------------------------------------------------- a rank
@inner
def try_enter_nb(sd, q, k, ps, r):
    """Rank ``r`` turns steady if every running request is laid out; returns True if it did (all
    of them fresh members, in running order)."""
    row = k.rh[r]
    while row != -1:
        if not laid_out(q, ps, row):
            return False
        row = q.rnext[row]
    row = k.rh[r]
    while row != -1:
        join_nb(sd, q, ps, r, row)
        row = q.rnext[row]
    sd.on[r] = 1
    sd.diag[DIAG_ENTERS] += 1
    return True


@inner
def materialize_nb(sd, q, k, tl, ps, r):
    """Every member of rank ``r`` explicit again, with its state after the rank's decode steps so
    far; the rank stays explicit for its hold (which doubles)."""
    steps = sd.step[r]
    fresh = False
    row = k.rh[r]
    while row != -1:
        if row == sd.fresh[r]:
            fresh = True
        if sd.base[row] >= 0:  # (requests that could not join are explicit already)
            restore_nb(sd, q, ps, row, steps)
            close_run_nb(sd, tl, row, r, steps)
            if not fresh:  # (a fresh member's last token is already in its columns)
                q.last_token[row] = sd.last_end[r]
            sd.base[row] = -1
        row = q.rnext[row]
    for c in range(r * ps, (r + 1) * ps):
        sd.acnt[c] = 0
        sd.ihead[c] = -1
        sd.itail[c] = -1
    for w in range(r * DUE, (r + 1) * DUE):
        sd.wheel[w] = -1
    sd.on[r] = 0
    sd.diag[DIAG_EXITS] += 1
    sd.fresh[r] = -1
    sd.nfresh[r] = 0
    sd.tsum[r] = 0
    sd.rsum[r] = 0
    sd.hold[r] = sd.holdlen[r]
    sd.holdlen[r] = min(2 * sd.holdlen[r], HOLD_MAX)


# ---------------------------------------------------------------- the KV reservation
@inner
def reserve_exact_nb(sd, q, k, r, clip, ratio):
    """The admission's KV reservation of rank ``r``'s running requests (explicit or members), summed
    as the pass-at-a-time path sums it: ``min(remaining, clip) * ratio``, in running order."""
    steps = sd.step[r]
    if sd.on[r]:
        sd.diag[DIAG_EXACT] += 1
    reserved = 0.0
    row = k.rh[r]
    while row != -1:
        g = q.gen[row] if sd.base[row] < 0 else sd.g0[row] + steps - sd.base[row]
        reserved += min(q.osl[row] - g, clip) * ratio
        row = q.rnext[row]
    return reserved


@inline
def reserve_close(lhs, rem, avail, reserved, n, subs):
    """True if ``lhs >= rem`` could come out otherwise with the exact reservation: ``rem`` was
    computed from ``ratio * sum(remaining)`` instead of the sum of ``n`` rounded products, then
    ``subs`` charges were taken off (each sum and product rounds by at most half an ulp)."""
    return abs(lhs - rem) <= (n + subs + 8) * 4.5e-16 * (abs(avail) + abs(reserved) + abs(lhs)) + 1e-12
