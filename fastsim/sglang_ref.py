"""A slow, plain-Python SGLang engine: the reference the compiled one is tested against.

One object per DP rank (:class:`Rank`) holds the radix cache and the queues; :func:`simulate`
runs ranks grouped into workers under round-robin routing, in Dynamo's event order, and returns
the per-request timestamps. Written for clarity, not speed: lists, dicts and a heap. A pass is
1.6.1's (:func:`run_pass`) or, with ``Cfg.v142``, Dynamo 1.4.2's (:func:`run_pass_142`, decision
0291).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from fastsim.errors import NotSupportedError
from fastsim.kernels.codes import OUTCOME_COMPLETED, OUTCOME_IN_FLIGHT
from fastsim.rust_rng import StdRng
from fastsim.sglang_pages import page_keys_of

# An admission whose KV allocation fails after the budget check passed is not reproduced exactly
# yet (no recorded case has one): a run that reaches one is refused rather than reported wrongly.
_NOT_EXACT = ("the SGLang engine could not allocate KV for a request it had admitted (admission out of "
              "memory), which fastsim does not reproduce exactly yet; give the workers more KV "
              "(num_gpu_blocks) or fewer requests")

LPM_FALLBACK = 128
IN_BATCH_CHECK = 32
IN_BATCH_DEPRIORITIZE = 32


class Node:
    __slots__ = ("parent", "keys", "children", "lock", "time", "id", "alive")

    def __init__(self, parent, keys, time, nid):
        self.parent = parent
        self.keys = list(keys)
        self.children = {}
        self.lock = 0
        self.time = time
        self.id = nid
        self.alive = True


class Radix:
    """The radix tree over page keys, with an LRU of unlocked leaves (logical clock)."""

    def __init__(self, total_pages, ps):
        self.ps = ps
        self.total_pages = total_pages
        self.free = total_pages
        self.clock = 0
        self.nid = 0
        self.root = self._node(None, [], 0)
        self.evictable = 0  # pages
        self.heap = []

    def _node(self, parent, keys, time):
        self.nid += 1
        return Node(parent, keys, time, self.nid)

    def now(self):
        self.clock += 1
        return self.clock

    def _is_leaf_evictable(self, n):
        return n is not self.root and n.alive and n.lock == 0 and not n.children

    def _index(self, n):
        if self._is_leaf_evictable(n):
            heapq.heappush(self.heap, (n.time, n.id, n))

    def touch(self, n, t):
        n.time = t
        self._index(n)

    def split(self, child, pos):
        inter = self._node(child.parent, child.keys[:pos], child.time)
        inter.lock = child.lock
        child.keys = child.keys[pos:]
        inter.children[child.keys[0]] = child
        child.parent.children[inter.keys[0]] = inter
        child.parent = inter
        return inter

    def match(self, keys, lock=False, readonly=False):
        """(matched pages, last node)."""
        if readonly:
            cur, m = self.root, 0
            while m < len(keys):
                c = cur.children.get(keys[m])
                if c is None:
                    break
                k = _common(c.keys, keys, m)
                m += k
                if k < len(c.keys):
                    break
                cur = c
            return m, cur
        t = self.now()
        self.root.time = t
        cur, m, pending = self.root, 0, None
        while m < len(keys):
            c = cur.children.get(keys[m])
            if c is None:
                break
            if pending is not None:
                self.touch(pending, t)
                pending = None
            k = _common(c.keys, keys, m)
            if k < len(c.keys):
                if k > 0:
                    cur = self.split(c, k)
                m += k
                break
            m += k
            cur = c
            pending = cur
        if pending is not None:
            pending.time = t
            if lock:
                self.inc(pending)
            else:
                self._index(pending)
        elif lock:
            self.inc(cur)
        return m, cur

    def inc(self, n):
        while n is not self.root:
            if n.lock == 0:
                self.evictable -= len(n.keys)
            n.lock += 1
            n = n.parent

    def dec(self, n):
        while n is not self.root:
            n.lock -= 1
            if n.lock == 0:
                self.evictable += len(n.keys)
                self._index(n)
            n = n.parent

    def insert(self, start, keys, allow_locked_tail):
        """Insert page ``keys`` below ``start``; returns (new last node, pages that were new)."""
        if not keys:
            return start, 0
        t = self.now()
        n = start
        while n is not None:
            n.time = t
            self._index(n)
            n = n.parent
        cur, off = start, 0
        while off < len(keys):
            can_extend = (cur is not self.root and not cur.children
                          and (cur.lock == 0 or (allow_locked_tail and cur is start and cur.lock == 1)))
            if can_extend:
                cur.time = t
                cur.keys.extend(keys[off:])
                if cur.lock == 0:
                    self.evictable += len(keys) - off
                self._index(cur)
                return cur, len(keys) - off
            c = cur.children.get(keys[off])
            if c is None:
                return self._create(cur, keys[off:]), len(keys) - off
            k = _common(c.keys, keys, off)
            if k == len(c.keys):
                off += k
                cur = c
                self.touch(cur, t)
            else:
                inter = self.split(c, k)
                off += k
                if off < len(keys):
                    return self._create(inter, keys[off:]), len(keys) - off
                return inter, 0
        return cur, 0

    def _create(self, parent, keys):
        t = self.now()
        n = self._node(parent, keys, t)
        parent.children[keys[0]] = n
        self.evictable += len(keys)
        self._index(n)
        return n

    def evict(self, pages):
        done = 0
        while done < pages and self.heap:
            t, _, n = heapq.heappop(self.heap)
            if not self._is_leaf_evictable(n) or n.time != t:
                continue
            need = pages - done
            if need < len(n.keys):
                del n.keys[len(n.keys) - need:]
                self.evictable -= need
                self.free += need
                done += need
                heapq.heappush(self.heap, (n.time, n.id, n))
                continue
            cnt = len(n.keys)
            n.alive = False
            self.evictable -= cnt
            self.free += cnt
            done += cnt
            p = n.parent
            del p.children[n.keys[0]]
            self._index(p)
        return done


def _common(a, b, off):
    k = 0
    while k < len(a) and off + k < len(b) and a[k] == b[off + k]:
        k += 1
    return k


@dataclass
class Req:
    row: int
    isl: int
    osl: int
    keys: list
    gen: int = 0
    mat: int = 0          # materialized tokens
    alloc: int = 0        # allocated tokens (pages * ps)
    own: int = 0          # pages held outside the tree
    cached: int = 0       # tokens on the tree path (locked at last)
    last: object = None
    retracted: bool = False
    step: int = 1         # tokens taken in its last decode step

    @property
    def seq(self):
        return self.isl + self.gen

    @property
    def remaining(self):
        return self.osl - self.gen


@dataclass
class Cfg:
    ps: int
    total_pages: int
    policy: str = "fifo"
    max_prefill: int = 16384
    chunk: int = 8192
    clip: int = 4096
    conservativeness: float = 1.0
    max_running: int = 256
    interval: int = 0
    dp: int = 1
    v142: bool = False  # Dynamo 1.4.2's older core (see run_pass_142)
    caching: bool = True  # enable_prefix_caching (off: the radix cache never holds a page)
    max_model_len: int = 0  # (0: none; the reference engine refuses it)


class Rank:
    def __init__(self, cfg: Cfg, prefill_ms, decode_ms):
        self.c = cfg
        self.tree = Radix(cfg.total_pages, cfg.ps)
        self.waiting = []
        self.running = []
        self.init_ratio = 0.7 * cfg.conservativeness
        self.min_ratio = self.init_ratio * 0.14
        self.step = (self.init_ratio - self.min_ratio) / 600.0
        self.ratio = self.init_ratio
        self.prefill_ms = prefill_ms
        self.decode_ms = decode_ms
        self.prefilled = False
        self.committed = 0
        self.mtp = None  # speculative decoding: (acceptance rates, the rank's StdRng)
        self.estimate = self.init_ratio  # the ratio re-estimated at the last retraction

    def draw_step(self):
        """Tokens one decode step yields: 1 + the draft positions accepted before the first
        rejection (rand's random_bool: a rate of 1 draws nothing)."""
        rates, rng = self.mtp
        b = 1
        for p in rates:
            if p != 1.0 and not rng.next_u64() < int(p * 2.0 ** 64):
                break
            b += 1
        return b

    def busy(self):
        return bool(self.waiting or self.running)

    # -- KV lease operations -------------------------------------------------------------
    def _alloc_new(self, r, chunk_end):
        ps, tr = self.c.ps, self.tree
        m, last = tr.match(r.keys[: chunk_end // ps], lock=True)
        req_pages = -(-chunk_end // ps) - m
        if req_pages > tr.free + tr.evictable:
            tr.dec(last)
            return None
        if req_pages > tr.free:
            tr.evict(req_pages - tr.free)
        tr.free -= req_pages
        r.own, r.cached, r.last = req_pages, m * ps, last
        return m * ps

    def _extend(self, r, chunk_end):
        tr, ps = self.tree, self.c.ps
        new = -(-chunk_end // ps) - (r.cached // ps + r.own)
        if new > tr.free + tr.evictable:
            return None
        if new > tr.free:
            tr.evict(new - tr.free)
        tr.free -= new
        r.own += new
        return r.mat

    def _cache_prefix(self, r, upto):
        """Insert the request's complete pages below ``upto`` tokens into the tree (still active)."""
        ps, tr = self.c.ps, self.tree
        aligned = upto // ps * ps
        if aligned <= r.cached or not self.c.caching:
            return
        first, npg = r.cached // ps, aligned // ps
        last, gained = tr.insert(r.last, r.keys[first:npg], True)
        if last is not r.last:
            tr.inc(last)
        # pages of the range are the tree's now (new ones moved, duplicates freed)
        moved = npg - first
        r.own -= moved
        tr.free += moved - gained
        if last is not r.last:
            tr.dec(r.last)
        r.last, r.cached = last, aligned

    def _finish(self, r):
        ps, tr = self.c.ps, self.tree
        complete = min(r.seq, r.mat) // ps * ps
        npg = complete // ps
        held = r.cached // ps + r.own
        tr.free += held - npg  # pages beyond the complete ones
        r.own -= held - npg
        if not self.c.caching:  # the complete pages are freed too
            tr.free += r.own
            r.own = 0
        elif complete > r.cached:
            first = r.cached // ps
            _, gained = tr.insert(r.last, r.keys[first:npg], True)
            tr.free += (npg - first) - gained
            r.own -= npg - first
        tr.dec(r.last)
        r.last = None

    def _release(self, r):
        tr = self.tree
        tr.free += r.own
        r.own = 0
        tr.dec(r.last)
        r.last, r.mat, r.alloc, r.cached = None, 0, 0, 0


def _ceil(t, ps):
    return -(-t // ps) * ps


def _lpm(rank):
    """Longest-prefix-match order of the waiting queue (stable; near-duplicates last)."""
    c, tr = rank.c, rank.tree
    if len(rank.waiting) > LPM_FALLBACK:
        return
    dup_pages = -(-IN_BATCH_DEPRIORITIZE // c.ps)
    seen = set()
    scored = []
    for r in rank.waiting:
        npg = r.seq // c.ps
        m, _ = tr.match(r.keys[:npg], readonly=True)
        m *= c.ps
        dep = False
        if m <= IN_BATCH_CHECK and r.seq >= dup_pages * c.ps:
            head = tuple(r.keys[:dup_pages])
            dep = head in seen
            seen.add(head)
        scored.append((dep, -m, r))
    scored.sort(key=lambda x: (x[0], x[1]))
    rank.waiting[:] = [x[2] for x in scored]


def _budgets(rank):
    """A prefill batch's budgets at its start: KV tokens (free and evictable pages, less the running
    requests' clipped outputs times the new-token ratio), prompt tokens and the chunk."""
    c, tr = rank.c, rank.tree
    reserved = 0.0
    for r in rank.running:
        reserved += min(r.remaining, c.clip) * rank.ratio
    return float((tr.free + tr.evictable) * c.ps) - reserved, float(c.max_prefill), float(c.chunk)


def _prefill_batch(rank):
    c, tr, ps = rank.c, rank.tree, rank.c.ps
    rem_total, rem_input, rem_chunk = _budgets(rank)
    can_run, adm, rejected = [], [], []
    total_isl = total_prefix = 0
    slots = max(c.max_running - len(rank.running), 0)
    while len(can_run) < slots and rank.waiting:
        r = rank.waiting.pop(0)
        cached = 0
        if r.mat == 0:
            match_len = r.seq if r.osl == 0 else r.seq - 1
            npg = min(match_len // ps, r.seq // ps)
            m, _ = tr.match(r.keys[:npg], readonly=True)
            cached = m * ps
        start = max(r.mat, cached)
        extend = r.seq - start
        if extend == 0 and r.mat > 0:
            rejected.append(r)
            break
        if extend <= rem_chunk:
            chunk = extend
        else:
            chunk = int(rem_chunk) // ps * ps
            if chunk == 0:
                rejected.append(r)
                break
            chunk = min(chunk, extend)
        charged = float(_ceil(chunk, ps))
        out_res = 0 if chunk < extend else min(r.remaining, c.clip)
        if charged + out_res >= rem_total or charged > rem_input or charged > rem_chunk:
            rejected.append(r)
            break
        end = start + chunk
        readmission = r.mat == 0 and r.retracted  # (its first chunk after a retraction)
        if r.mat > 0:
            prefix = rank._extend(r, end)
        else:
            prefix = rank._alloc_new(r, end)
            if prefix is not None:
                prefix = min(prefix, start)
        if prefix is None:  # its locked prefix is no longer evictable: back to the head, batch ends
            rejected.append(r)
            break
        r.mat, r.alloc = end, _ceil(end, ps)
        adm.append((r, prefix, end - prefix, readmission))
        total_isl += end
        total_prefix += prefix
        rem_total -= charged + out_res
        rem_input -= charged
        rem_chunk -= charged
        can_run.append(r)
        if rem_chunk <= 0.0:
            break
    rank.waiting[0:0] = rejected
    return can_run, adm, total_isl, total_prefix


def _growth(running, ps, max_burst=1):
    g = 0
    for r in running:
        burst = min(max_burst, r.remaining)
        g += max(_ceil(r.seq + burst, ps) - r.alloc, 0)
    return g


def _first_tokens(rank, batch, emit):
    """The first token of every request of ``batch`` whose prefill ended in this pass: no time, no
    retraction. A request whose first token is its last needs no KV slot; the others get one,
    evicting cached pages if needed (without room, they get their token at the next decode step)."""
    tr, ps = rank.tree, rank.c.ps
    completed = [r for r in batch if r.remaining == 0]
    batch[:] = [r for r in batch if r.remaining > 0]
    for r in batch:
        if r.remaining == 1:
            r.gen += 1
            emit(r)
            completed.append(r)
    batch[:] = [r for r in batch if r.remaining > 0]
    g = _growth(batch, ps) // ps
    if g > tr.free:
        tr.evict(g - tr.free)
    if g > tr.free:
        return completed
    for r in batch:
        _append_token(rank, r)
        emit(r)
        rank._cache_prefix(r, r.mat)
    return completed


def _append_token(rank, r):
    tr, ps = rank.tree, rank.c.ps
    if r.mat % ps == 0:
        tr.free -= 1
        r.own += 1
    if r.seq + 1 > r.alloc:
        r.alloc += ps
    r.mat += 1
    r.gen += 1


def _step(rank, batch, emit):
    """A decode step: one token to every request of ``batch`` (a list, changed in place), after
    retracting requests while their next tokens do not fit; returns
    (completed, retracted, decode_len_sum, count). A retraction re-estimates the new-token ratio
    into ``rank.estimate`` from the requests left at that point."""
    tr, ps = rank.tree, rank.c.ps
    completed = [r for r in batch if r.remaining == 0]
    batch[:] = [r for r in batch if r.remaining > 0]
    retracted = []
    max_burst = 1 if rank.mtp is None else len(rank.mtp[0]) + 1
    while (tr.free + tr.evictable) * ps < _growth(batch, ps, max_burst) and len(batch) > 1:
        idx = min(range(len(batch)), key=lambda i: batch[i].gen)
        r = batch.pop(idx)
        rank._release(r)
        r.retracted = True
        retracted.append(r)
    if retracted:
        rank.estimate = _retract_ratio(batch)
    g = _growth(batch, ps, max_burst) // ps
    if g > tr.free:
        tr.evict(g - tr.free)
    total = sum(r.seq for r in batch)
    n = len(batch)
    if not batch:
        return completed, retracted, 0, 0
    if g > tr.free:
        return completed, retracted, None, n  # reservation failed: no tokens this pass
    keep = []
    for r in batch:
        r.step = 1 if rank.mtp is None else min(rank.draw_step(), r.remaining)
        for _ in range(r.step):
            _append_token(rank, r)
            emit(r)
            if r.gen >= r.osl:
                completed.append(r)
                break
            rank._cache_prefix(r, r.mat)
        else:
            keep.append(r)
    batch[:] = keep
    return completed, retracted, total, n


RETRACT_DECODE_STEPS = 20


def _retract_ratio(running):
    """The new-token ratio re-estimated at a retraction from the requests that stay, before the
    step (those that complete in it included, decision 0476): their output tokens plus 20 steps
    each, over the sum of their output lengths plus one."""
    decoded = sum(r.gen for r in running)
    max_new = sum(r.osl for r in running)
    return min(1.0, (decoded + RETRACT_DECODE_STEPS * len(running)) / (max_new + 1)) if max_new else 1.0


def run_pass(rank, now, modeled, emit, admit, defer=False):
    """One forward pass of ``rank`` at ``now``; returns (end time (ms), completed requests).
    ``defer``: the group's prefill_decode_interval holds prefill back in this pass."""
    c, ps = rank.c, rank.c.ps
    if c.policy == "lpm":
        _lpm(rank)
    if defer:
        can_run, adm, total_isl, total_prefix = [], [], 0, 0
    else:
        can_run, adm, total_isl, total_prefix = _prefill_batch(rank)
    for r, prefix, computed, readmission in adm:
        admit(r, prefix, computed, readmission)
    n = len(can_run)
    prefill = 0.0
    if n:
        new = total_isl // n - total_prefix // n
        if new > 0:
            prefill = modeled(rank.prefill_ms(n * new), c_speed=True)
    fresh = []
    for r in can_run:
        if r.mat < r.seq:
            rank._cache_prefix(r, r.mat)
            rank.waiting.insert(0, r)
        else:
            fresh.append(r)
    rank.prefilled = n > 0
    start = now + prefill
    end = start
    idle = False
    if n:
        completed, retracted = _first_tokens(rank, fresh, emit), []
        rank.running.extend(fresh)
    else:
        batch = rank.running
        idle = defer and not batch
        completed, retracted, total, cnt = _step(rank, batch, emit)
        if cnt and total is not None:
            end = start + modeled(rank.decode_ms(min(total, c.total_pages * ps), total // cnt), c_speed=False)
    for r in completed:
        rank._finish(r)
    rank.waiting.extend(retracted)  # SGLang re-queues retracted requests at the back
    if retracted:
        rank.ratio = rank.estimate
    elif not n and not idle:  # the ratio decays in decode passes only (SGLang's update_running_batch)
        rank.ratio = max(rank.ratio - rank.step, rank.min_ratio)
    return end, completed


def _prefill_batch_142(rank):
    """Dynamo 1.4.2's admission: no prefix match before the budgets (a request is charged its whole
    remaining prompt, rounded up to pages); it goes whole into the batch when it fits the
    configured chunk size, else a page-aligned chunk of the chunk budget left; a whole prompt also
    reserves its (clipped) output in the KV budget."""
    c, ps = rank.c, rank.c.ps
    rem_total, rem_input, rem_chunk = _budgets(rank)
    can_run, adm, rejected = [], [], []
    oom = False
    total_isl = total_prefix = 0
    slots = max(c.max_running - len(rank.running), 0)
    while len(can_run) < slots and rank.waiting:
        r = rank.waiting.pop(0)
        extend = r.seq - r.mat
        if extend == 0:
            rejected.append(r)
            break
        if extend <= c.chunk:
            chunk = extend
        else:
            chunk = int(rem_chunk) // ps * ps
            if chunk == 0:
                rejected.append(r)
                break
            chunk = min(chunk, extend)
        charged = float(_ceil(chunk, ps))
        out_res = 0 if chunk < extend else min(r.remaining, c.clip)
        if charged + out_res >= rem_total or charged > rem_input or charged > rem_chunk:
            rejected.append(r)
            break
        end = r.mat + chunk
        if r.mat > 0:
            prefix = rank._extend(r, end)
        else:
            prefix = rank._alloc_new(r, end)
        if prefix is None:
            rejected.append(r)
            oom = True
            break
        r.mat, r.alloc = end, _ceil(end, ps)
        adm.append((r, prefix, end - prefix))
        total_isl += end
        total_prefix += prefix
        rem_total -= charged + out_res
        rem_input -= charged
        rem_chunk -= charged
        can_run.append(r)
        if rem_chunk <= 0.0:
            break
    rank.waiting[0:0] = rejected
    return can_run, adm, total_isl, total_prefix, oom


def run_pass_142(rank, now, modeled, emit, admit):
    """One pass of Dynamo 1.4.2's SGLang core: the prefill batch, then a decode step over every
    running request, the ones just prefilled included (their first token), timed after the
    prefill; retracted requests go back to the front of the waiting queue and reset the new-token
    ratio, which decays after every pass."""
    c = rank.c
    if c.policy == "lpm":
        _lpm(rank)
    can_run, adm, total_isl, total_prefix, oom = _prefill_batch_142(rank)
    if oom:
        raise NotSupportedError(_NOT_EXACT)
    for r, prefix, computed in adm:
        admit(r, prefix, computed, False)
    n = len(can_run)
    prefill = 0.0
    if n:
        new = total_isl // n - total_prefix // n
        if new > 0:
            prefill = modeled(rank.prefill_ms(n * new), c_speed=True)
    for r in can_run:
        if r.mat < r.seq:
            rank._cache_prefix(r, r.mat)
            rank.waiting.insert(0, r)
        else:
            rank.running.append(r)
    rank.prefilled = n > 0
    start = now + prefill
    end = start
    completed, retracted, total, cnt = _step(rank, rank.running, emit)
    if cnt and total is not None:
        end = start + modeled(rank.decode_ms(min(total, c.total_pages * c.ps), total // cnt), c_speed=False)
    for r in completed:
        rank._finish(r)
    rank.waiting[0:0] = retracted
    if retracted:
        rank.ratio = rank.init_ratio
    rank.ratio = max(rank.ratio - rank.step, rank.min_ratio)
    return end, completed


def simulate(workload, cfg: Cfg, perf, *, num_workers=1, dp=1, speedup=1.0, decode_speedup=1.0, mtp=None):
    """Run ``workload`` on ``num_workers`` SGLang workers of ``dp`` ranks each, round robin
    (``mtp``: speculative decoding's acceptance rates and each rank's seed).

    Returns a dict of per-request columns and the list of every inter-token gap (ms)."""
    from fastsim.kernels.perf import decode_time_nb, modeled_ms_nb, prefill_time_nb

    n = workload.n_requests
    isl, osl = workload.isl, workload.osl
    ps = cfg.ps
    cols = {k: np.full(n, np.nan) for k in ("arrival_ms", "first_admit_ms", "first_token_ms",
                                             "second_token_ms", "last_token_ms", "terminal_ms")}
    gen = np.zeros(n, np.int64)
    reused = np.zeros(n, np.int64)
    first_reused = np.zeros(n, np.int64)
    admitted = np.zeros(n, bool)
    status = np.zeros(n, np.int8)
    rank_of = np.full(n, -1, np.int64)
    committed = [0]
    gaps = []

    def prefill_ms(t):
        return float(prefill_time_nb(perf, t))

    def decode_ms(active, ctx):
        return float(decode_time_nb(perf, active, ctx, cfg.total_pages * ps))

    def modeled(raw, c_speed):
        return float(modeled_ms_nb(raw, speedup if c_speed else speedup * decode_speedup))

    ranks = [Rank(cfg, prefill_ms, decode_ms) for _ in range(num_workers * dp)]
    if mtp is not None:
        for rk, seed in zip(ranks, mtp[1]):
            rk.mtp = (mtp[0], StdRng(seed))
    for rk in ranks:
        rk.modeled = modeled
    busy_until = [None] * num_workers
    rounds_left = [0] * num_workers
    dp_next = [0] * num_workers
    rr = [0]
    arrivals = []
    for s in range(workload.n_sessions):
        r0 = int(workload.session_rows[workload.session_ptr[s]])
        heapq.heappush(arrivals, (float(workload.session_arrival_ms[s]), s, 0, r0))
    next_turn = {}
    for s in range(workload.n_sessions):
        rows = workload.session_rows[workload.session_ptr[s]:workload.session_ptr[s + 1]]
        for a, b in zip(rows[:-1], rows[1:]):
            next_turn[int(a)] = int(b)
    hp, hid = workload.hash_ptr, workload.hash_ids

    def make_req(row):
        h = None if hp is None else hid[hp[row]:hp[row + 1]]
        keys = page_keys_of(int(isl[row]), int(osl[row]), row, h, workload.trace_block_size, ps)
        return Req(row, int(isl[row]), int(osl[row]), [int(k) for k in keys])

    done = 0
    pending = {}  # worker -> list of (req) emitted, completed rows
    now = 0.0
    while done < n:
        t_arr = arrivals[0][0] if arrivals else math.inf
        t_end = min((t for t in busy_until if t is not None), default=math.inf)
        now = min(t_arr, t_end)
        if now == math.inf:
            raise RuntimeError("sglang reference: dead end")
        # 1. pass completions
        for g in range(num_workers):
            if busy_until[g] is not None and busy_until[g] <= now:
                busy_until[g] = None
                for row in pending.pop(g, []):
                    done += 1
                    status[row] = OUTCOME_COMPLETED
                    nt = next_turn.get(row)
                    if nt is not None:
                        s = int(workload.session[nt])
                        heapq.heappush(arrivals, (now + float(workload.delay_ms[nt]), s,
                                                  int(workload.turn[nt]), nt))
        # 2. arrivals
        while arrivals and arrivals[0][0] <= now:
            _, _, _, row = heapq.heappop(arrivals)
            g = rr[0] % num_workers
            rr[0] += 1
            k = dp_next[g]
            dp_next[g] = (k + 1) % dp
            rid = g * dp + k
            cols["arrival_ms"][row] = now
            status[row] = OUTCOME_IN_FLIGHT
            rank_of[row] = rid
            ranks[rid].waiting.append(make_req(row))
        # 3. drive idle groups
        progress = True
        while progress:
            progress = False
            for g in range(num_workers):
                if busy_until[g] is not None:
                    continue
                grp = ranks[g * dp:(g + 1) * dp]
                if not any(rk.busy() for rk in grp):
                    continue
                emitted, finished = [], []

                def emit(r):
                    emitted.append(r.row)

                def admit(r, prefix, computed, readmission):
                    committed[0] += computed
                    if not admitted[r.row]:
                        admitted[r.row] = True
                        cols["first_admit_ms"][r.row] = now
                        reused[r.row] = prefix
                        first_reused[r.row] = prefix
                    elif cfg.v142:  # 1.4.2 reports the most reused over a request's admissions (every chunk)
                        reused[r.row] = max(reused[r.row], prefix)
                    elif readmission:  # and so does 1.6.1, over its readmissions (decision 0295)
                        reused[r.row] = max(reused[r.row], prefix)

                end = now
                # prefill_decode_interval is kept per group: after any rank's prefill, every rank
                # decodes that many passes before the next prefill (unless none has anything to decode)
                defer = rounds_left[g] > 0 and any(rk.running for rk in grp)
                prefilled = False
                for rk in grp:
                    if rk.busy():
                        if cfg.v142:
                            e, comp = run_pass_142(rk, now, modeled, emit, admit)
                        else:
                            e, comp = run_pass(rk, now, modeled, emit, admit, defer)
                        end = max(end, e)
                        finished += [r.row for r in comp]
                        prefilled |= rk.prefilled
                if prefilled:
                    rounds_left[g] = cfg.interval
                elif defer:
                    rounds_left[g] -= 1
                for row in emitted:
                    gen[row] += 1
                    k = gen[row]
                    if k == 1:
                        cols["first_token_ms"][row] = end
                    else:
                        gaps.append(end - cols["last_token_ms"][row])
                        if k == 2:
                            cols["second_token_ms"][row] = end
                    cols["last_token_ms"][row] = end
                for row in finished:
                    cols["terminal_ms"][row] = end
                if end > now:
                    busy_until[g] = end
                    pending[g] = finished
                elif emitted or finished or (cfg.v142 and prefilled):
                    # (1.4.2: a pass that only admitted, its prefill all cached, is followed by
                    # the next pass at once)
                    busy_until[g] = end
                    pending[g] = finished
                    progress = True
        # zero-duration completions are handled by the next loop round at the same time
    cols.update({
        "status": status, "input_length": np.asarray(isl, np.int64),
        "requested_output_length": np.asarray(osl, np.int64), "output_length": gen,
        "reused_tokens": reused, "first_reused_tokens": first_reused,
        "worker_idx": rank_of,
        "preemptions": np.zeros(n, np.int64),
    })
    term = cols["terminal_ms"][status == OUTCOME_COMPLETED]
    worker_seconds = num_workers * (float(term.max()) / 1000.0 if term.shape[0] else 0.0)
    return cols, np.asarray(gaps), committed[0], worker_seconds
