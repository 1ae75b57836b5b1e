"""Each request's token times, kept while it is in flight, and Dynamo's running mean and variance
of the inter-token gaps, folded in when it completes.

Dynamo's collector records every token time of a request and, when the request completes, adds
its gaps one by one, in token order, to the run's ITL and output-token-throughput-per-user
statistics with Welford's update (``mean += d / n``, ``m2 += d * (v - mean)``; std =
``sqrt(m2 / n)``). The result depends on that order, to the last bits (docs/decisions/0265).

Token times are not kept one by one: every token is stamped at the end of a pass of its rank, so
a request's times are a few *runs* of consecutive passes of one rank. Each rank keeps the end
times of its last passes in a ring (``ring``, indexed by rank pass mod its width), written once a
pass; a request keeps a short list of records: a run of passes ``[first, first + n)`` of rank
``k``, or a time repeated ``n`` times (several tokens of one step: speculative decoding). A
steady member (``kernels/steady.py``) takes a token every pass of its rank without being looked
at: its run is open (``open_base``) until it is explicit again, and is closed, from its token
count, at its next explicit token. At completion the records are walked (times from the ring),
each gap folded in, and the records freed: memory stays O(requests in flight x their records).

A shard of a split run (``fastsim/shards.py``) cannot fold its completions itself: the
cluster's order interleaves the shards'. It logs them instead (``clog``: the completion's time,
its group, its gaps), and the shards' logs are merged and folded in the cluster's order
(``fold_logs_nb``).

A run is read back at completion: its rank must not have run more passes since its first one
than the ring holds (``LOST`` otherwise, and the caller runs again with a wider ring); records
are taken from a free list that the loop has the caller grow between ticks (``RECORDS_FULL``)
and, should one tick take them all, ``LOST`` too.
"""

from typing import NamedTuple

import numpy as np

from fastsim.kernels.jit import compiled, inline, inner

# ``st`` slots: free list head, free records, what was lost; entries of ``clog`` in use, and the
# room it must have left before a tick (a tick's completions)
FREE_HEAD, FREE_RECORDS, LOST, LOG_N, LOG_ROOM = range(5)
LOST_RING, LOST_RECORDS = 1, 2  # (bits of ``st[LOST]``) a run's times overwritten; no record free
ITL, OTPU = 0, 3  # ``wf`` offsets: [count, mean, m2] of the gaps and of 1000 / gap


class Timelines(NamedTuple):
    ring: np.ndarray  # float64[K, W] (W a power of two): end of rank k's pass P at [k, P % W]
    ring_hi: np.ndarray  # int64[K]: passes of each rank whose end is in the ring
    head: np.ndarray  # int32[n]: each request's first record (-1: none); int32[0]: not kept
    tail: np.ndarray  # int32[n]: its last record
    open_base: np.ndarray  # int64[n]: first rank pass of its open steady run (-1: none)
    open_gen: np.ndarray  # int64[n]: tokens it had generated when that run opened
    open_rank: np.ndarray  # int64[n]: the rank of that run
    rec_pass: np.ndarray  # int64[S]: first rank pass of a run, or -1: a time (``rec_t``)
    rec_rank: np.ndarray  # int64[S]: the run's rank
    rec_n: np.ndarray  # int64[S]: tokens in the run (passes), or copies of the time
    rec_t: np.ndarray  # float64[S]
    rec_next: np.ndarray  # int32[S]: the next record of the request, or of the free list (-1: end)
    st: np.ndarray  # int64[5]: FREE_HEAD, FREE_RECORDS, LOST, LOG_N, LOG_ROOM
    wf: np.ndarray  # float64[6]: Welford's [count, mean, m2] of the gaps (ITL) and of 1000 / gap
    # float64[L], or [0]: fold at completion. A shard's completions, each [time, group, m, its m
    # gaps], in the order the shard completes them
    clog: np.ndarray


def new_timelines(n_rows, n_ranks, ring_width, records, log_room=0):
    """Timelines of ``n_rows`` requests on ``n_ranks`` ranks (``ring_width``: a power of two);
    ``n_rows`` 0: none kept (the pooled sums stand in). ``log_room`` > 0: a shard's, whose
    completions are logged (the most entries one tick's completions can take)."""
    keep = n_rows > 0
    tl = Timelines(
        ring=np.zeros((n_ranks if keep else 0, ring_width if keep else 1)),
        ring_hi=np.zeros(n_ranks if keep else 0, dtype=np.int64),
        head=np.full(n_rows, -1, dtype=np.int32), tail=np.full(n_rows, -1, dtype=np.int32),
        open_base=np.full(n_rows, -1, dtype=np.int64), open_gen=np.zeros(n_rows, dtype=np.int64),
        open_rank=np.zeros(n_rows, dtype=np.int64),
        rec_pass=np.zeros(0, dtype=np.int64), rec_rank=np.zeros(0, dtype=np.int64),
        rec_n=np.zeros(0, dtype=np.int64), rec_t=np.zeros(0), rec_next=np.zeros(0, dtype=np.int32),
        st=np.array([-1, 0, 0, 0, log_room], dtype=np.int64), wf=np.zeros(6),
        clog=np.zeros(2 * log_room + (1 << 16) if log_room else 0))
    return grow_records(tl, records if keep else 0)


def grow_records(tl, records=None):
    """``tl`` with room for ``records`` records (default: twice as many), those in use kept."""
    old = tl.rec_pass.shape[0]
    new = max(2 * old, 1024) if records is None else records
    if new <= old:
        return tl

    def grow(a):
        b = np.zeros(new, dtype=a.dtype)
        b[:old] = a
        return b

    nxt = grow(tl.rec_next)
    # the new records, chained in front of the free list
    nxt[old:new - 1] = np.arange(old + 1, new, dtype=np.int32)
    nxt[new - 1] = tl.st[FREE_HEAD]
    st = tl.st.copy()
    st[FREE_HEAD] = old
    st[FREE_RECORDS] += new - old
    return tl._replace(rec_pass=grow(tl.rec_pass), rec_rank=grow(tl.rec_rank), rec_n=grow(tl.rec_n),
                       rec_t=grow(tl.rec_t), rec_next=nxt, st=st)


def ring_width(max_tokens):
    """The ring width for requests of at most ``max_tokens`` output tokens: a power of two over
    twice that (a request running without a miss spans fewer passes)."""
    w = 256
    while w < 2 * max_tokens + 64:
        w *= 2
    return w


@inline
def keeping(tl):
    return tl.head.shape[0] > 0


@inline
def ring_note(tl, rpass, k0, k1, t):
    """The passes of ranks ``k0 .. k1-1`` run since the last note end at ``t``."""
    w = tl.ring.shape[1] - 1
    for k in range(k0, k1):
        hi = tl.ring_hi[k]
        while hi < rpass[k]:
            tl.ring[k, hi & w] = t
            hi += 1
        tl.ring_hi[k] = hi


@inline
def ring_put(tl, k, P, t):
    """Rank ``k``'s pass ``P`` ends at ``t`` (a steady run's pass)."""
    tl.ring[k, P & (tl.ring.shape[1] - 1)] = t
    tl.ring_hi[k] = P + 1


@inline
def _append(tl, r, first, k, n, t):
    """Add a record to request ``r``'s list; a run that continues the last one extends it."""
    last = tl.tail[r]
    if (first >= 0 and last >= 0 and tl.rec_pass[last] >= 0 and tl.rec_rank[last] == k
            and tl.rec_pass[last] + tl.rec_n[last] == first):
        tl.rec_n[last] += n
        return
    i = tl.st[FREE_HEAD]
    if i < 0:
        tl.st[LOST] |= LOST_RECORDS
        return
    tl.st[FREE_HEAD] = tl.rec_next[i]
    tl.st[FREE_RECORDS] -= 1
    tl.rec_pass[i] = first
    tl.rec_rank[i] = k
    tl.rec_n[i] = n
    tl.rec_t[i] = t
    tl.rec_next[i] = -1
    if last >= 0:
        tl.rec_next[last] = i
    else:
        tl.head[r] = i
    tl.tail[r] = i


@inline
def _close_steady(tl, r, sbase, generated):
    """Close ``r``'s open steady run if it has ended (``sbase``: its steady base now), from the
    tokens it took (``generated`` counts them, and the token being stamped)."""
    b = tl.open_base[r]
    if b >= 0 and sbase != b:
        c = generated - 1 - tl.open_gen[r]
        if c > 0:
            _append(tl, r, b, tl.open_rank[r], c, 0.0)
        tl.open_base[r] = -1


@inline
def note_token(tl, r, k, P, t, sbase, generated):
    """Request ``r`` took a token in rank ``k``'s pass ``P`` ending at ``t`` (``generated``
    counts it; ``sbase``: its steady base after the pass: a new steady run opens there)."""
    _close_steady(tl, r, sbase, generated)
    _append(tl, r, P, k, 1, t)
    if sbase >= 0 and tl.open_base[r] < 0:
        tl.open_base[r] = sbase
        tl.open_gen[r] = generated
        tl.open_rank[r] = k


@inline
def note_tokens_at(tl, r, t, n):
    """Request ``r`` took ``n`` tokens at ``t`` (one step of speculative decoding)."""
    last = tl.tail[r]
    if last >= 0 and tl.rec_pass[last] < 0 and tl.rec_t[last] == t:
        tl.rec_n[last] += n
        return
    _append(tl, r, np.int64(-1), np.int64(0), n, t)


@inline
def _add(n, mean, m2, v):
    """Dynamo's ``StreamingDistribution::add`` of ``v`` (finite) to ``(n, mean, m2)``."""
    n = n + 1.0
    d = v - mean
    mean = mean + d / n
    return n, mean, m2 + d * (v - mean)


@inline
def _fold(a, g):
    """Gap ``g`` into ``a`` = (ITL's count, mean, m2, then the throughput's), as Dynamo adds it:
    ``max(g, 0)`` to the ITL, ``1000 / g`` to the throughput if ``g > 0`` (finite values only)."""
    n1, m1, s1, n2, m2, s2 = a
    if g < 0.0:
        g = 0.0
    if g < np.inf:
        n1, m1, s1 = _add(n1, m1, s1, g)
        if g > 0.0:
            u = 1000.0 / g
            if u < np.inf:
                n2, m2, s2 = _add(n2, m2, s2, u)
    return n1, m1, s1, n2, m2, s2


@inline
def _fold_gap(wf, g):
    """Gap ``g`` into the statistics ``wf`` (in memory)."""
    a = _fold((wf[0], wf[1], wf[2], wf[3], wf[4], wf[5]), g)
    wf[0], wf[1], wf[2], wf[3], wf[4], wf[5] = a


@inline
def log_room(tl):
    """False if a shard's completion log may not hold one more tick's completions."""
    return tl.clog.shape[0] == 0 or tl.clog.shape[0] - tl.st[LOG_N] >= tl.st[LOG_ROOM]


@inline
def _fold_records(tl, i):
    """Fold the gaps of the records from ``i`` on (one request's, in token order). The running
    statistics stay in locals meanwhile: each update waits on the last one's division, and a
    round trip through memory would lengthen that chain."""
    wf = tl.wf
    ring = tl.ring
    w = ring.shape[1]
    m = w - 1
    a = (wf[0], wf[1], wf[2], wf[3], wf[4], wf[5])
    prev = np.nan
    while i >= 0:
        first = tl.rec_pass[i]
        n = tl.rec_n[i]
        if first < 0:
            x = tl.rec_t[i]
            if prev == prev:
                a = _fold(a, x - prev)
            for _ in range(n - 1):
                a = _fold(a, 0.0)
            prev = x
        else:
            k = tl.rec_rank[i]
            if tl.ring_hi[k] - first > w:
                tl.st[LOST] |= LOST_RING  # overwritten since
            p0 = first
            if prev != prev:  # the request's first token
                prev = ring[k, p0 & m]
                p0 += 1
            for P in range(p0, first + n):
                x = ring[k, P & m]
                a = _fold(a, x - prev)
                prev = x
        i = tl.rec_next[i]
    wf[0], wf[1], wf[2], wf[3], wf[4], wf[5] = a


@inline
def _log_records(tl, i, t, g):
    """A shard's completion at ``t`` in group ``g`` into its log: [t, g, m, the m gaps of the
    records from ``i`` on]."""
    ring = tl.ring
    w = ring.shape[1]
    m = w - 1
    log = tl.clog
    at = tl.st[LOG_N]
    log[at] = t
    log[at + 1] = g
    j = at + 3
    prev = np.nan
    while i >= 0:
        first = tl.rec_pass[i]
        n = tl.rec_n[i]
        if first < 0:
            x = tl.rec_t[i]
            if prev == prev:
                log[j] = x - prev
                j += 1
            for _ in range(n - 1):
                log[j] = 0.0
                j += 1
            prev = x
        else:
            k = tl.rec_rank[i]
            if tl.ring_hi[k] - first > w:
                tl.st[LOST] |= LOST_RING
            for P in range(first, first + n):
                x = ring[k, P & m]
                if prev == prev:
                    log[j] = x - prev
                    j += 1
                prev = x
        i = tl.rec_next[i]
    log[at + 2] = j - at - 3
    tl.st[LOG_N] = j


@inner
def fold_request(tl, r, completed, t, g):
    """Request ``r`` ended at ``t`` in group ``g``: if ``completed``, each of its gaps, in token
    order, into the running statistics (a shard: into its completion log); its records go back to
    the free list."""
    i = tl.head[r]
    if i < 0:
        return
    if completed:
        if tl.clog.shape[0] > 0:
            _log_records(tl, i, t, g)
        else:
            _fold_records(tl, i)
    last = i
    freed = 1
    while tl.rec_next[last] >= 0:
        last = tl.rec_next[last]
        freed += 1
    tl.rec_next[last] = tl.st[FREE_HEAD]
    tl.st[FREE_HEAD] = i
    tl.st[FREE_RECORDS] += freed
    tl.head[r] = -1
    tl.tail[r] = -1
    tl.open_base[r] = -1


@compiled(nogil=True)
def fold_logs_nb(wf, log, start, end, k):
    """Fold the completions of a split run's shards into ``wf`` in the cluster's order: by time,
    then group (the loop completes the groups' passes that end at one time lowest group first).
    Shard ``s``'s are ``log[start[s]:end[s]]`` (whole entries, in its order); shard ``s`` of
    ``k`` holds the cluster's groups ``s, s + k, ...``."""
    pos = start.copy()
    a = (wf[0], wf[1], wf[2], wf[3], wf[4], wf[5])
    while True:
        best = -1
        bt = np.inf
        bg = 0.0
        for s in range(pos.shape[0]):
            p = pos[s]
            if p < end[s]:
                t = log[p]
                g = s + k * log[p + 1]
                if best < 0 or t < bt or (t == bt and g < bg):
                    best = s
                    bt = t
                    bg = g
        if best < 0:
            break
        p = pos[best]
        m = np.int64(log[p + 2])
        for j in range(p + 3, p + 3 + m):
            a = _fold(a, log[j])
        pos[best] = p + 3 + m
    wf[0], wf[1], wf[2], wf[3], wf[4], wf[5] = a


@compiled(_nrt=False, nogil=True)
def log_cut_nb(log, upto):
    """The length of the entries of ``log`` (a shard's completions) at or before ``upto``."""
    p = 0
    while p < log.shape[0] and log[p] <= upto:
        p += 3 + np.int64(log[p + 2])
    return p
