"""A round-robin cluster whose workers never meet, simulated as shards side by side.

With round-robin routing, an open loop of single-turn requests and a fixed fleet, nothing one
worker does reaches another: request ``i`` (in arrival order) goes to worker ``i % W`` whatever
happens (Dynamo's ``next_worker`` counter), its rank within that worker follows from the worker's
own arrivals, and each worker's scheduler, KV cache and gap statistics are its own
(``kernels/loop.py``, ``Gaps``). The simulation of such a cluster is the simulations of its
workers. :func:`simulate_shards` deals the workers out to ``k`` shards (worker ``w`` to shard
``w % k``), simulates each shard's requests on its own workers in a thread of its own (the event
loop releases the GIL), and puts the results back in the cluster's rows and worker ids.

Everything the report reads comes out the same, bit for bit (``tests/test_shards.py``), with one
sum to take care of: the worker-seconds, which the unsplit loop adds up event by event over the
whole cluster. Each shard logs its events' times (``Cluster.tlog``), and the logs are merged
and folded in time order while the shards run (``kernels/ticks.py``). A shard whose log fills
hands it over and goes on; one that runs far ahead of the others in virtual time waits for them
once it holds more than ``_PENDING_MAX`` unfolded ticks, so the logs stay small.

Not split (the plain loop runs): kv_router (its choices depend on every worker's load), a closed
loop or sessions of several turns (a turn's arrival depends on when its worker finished the last
one), scaling schedules and planners, telemetry, a time cap, arrivals out of order in the trace,
and one worker.
"""

from __future__ import annotations

import os
import threading
from types import SimpleNamespace
from typing import NamedTuple

import numpy as np

from fastsim import interrupt
from fastsim.errors import InputError
from fastsim.run_config import RunConfig
from fastsim.state import build_state, router_state, settle_unarrived, sharing_groups

# Without a thread count a run is not split: the inter-token statistics of a split run are folded
# gap by gap in the cluster's order after the shards log them, a serial fold that costs more than
# the shards save (100k requests on 4 workers of a 2-core guest: 82-96 ms unsplit, 143-153 split;
# decision 0265). Before that fold, a split run paid from 50k requests (16.4 ms unsplit, 16-18
# split; 75k: 24 and 20).
_LOG_MIN = 1 << 16  # tick log entries per shard (a shard hands its log over when it fills)
_PENDING_MAX = 1 << 20  # unfolded ticks a shard may hold before it waits for the others


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def resolve_threads(threads) -> tuple:
    """``(threads, explicit)``: ``threads`` as given, else ``FASTSIM_THREADS``, else the cores this
    process may use (then no run is split: see above)."""
    if threads is None:
        env = os.environ.get("FASTSIM_THREADS", "").strip()
        if not env:
            return usable_cores(), False
        try:
            threads = int(env)
        except ValueError:
            raise InputError(f"FASTSIM_THREADS is {env!r}; it must be a positive integer") from None
        if threads < 1:
            raise InputError(f"FASTSIM_THREADS is {env!r}; it must be a positive integer")
        return threads, True
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise InputError(f"threads is {threads!r}; it must be a positive integer")
    return int(threads), True


def plan(workload, *, threads, num_workers, router_mode, replay_concurrency, max_sim_time_ms,
         schedule, planner, telemetry_interval_ms, speculative=False) -> int:
    """How many shards to simulate ``workload`` in: 1 (the plain loop) when it cannot or need not
    be split (see the module's docstring; ``speculative``: each rank's MTP sampler is seeded by
    its global rank id, which a shard renumbers)."""
    n_threads, explicit = resolve_threads(threads)
    n = int(workload.isl.shape[0])
    if (n_threads < 2 or num_workers < 2 or router_mode != "round_robin" or replay_concurrency
            or max_sim_time_ms is not None or schedule or planner is not None
            or telemetry_interval_ms or speculative or n == 0):
        return 1
    if not explicit:
        return 1
    if workload.session_ptr.shape[0] - 1 != n or workload.graph is not None:
        return 1  # sessions of several turns, or arrivals released by a request graph
    first = np.asarray(workload.session_arrival_ms, dtype=np.float64)
    if not bool(np.all(first[1:] >= first[:-1])):
        return 1  # out of order (or NaN): the release order is not the row order
    return min(n_threads, int(num_workers))


def _take_log(tl):
    """A shard's completion log so far (``kernels/timelines.py``), emptied."""
    from fastsim.kernels.timelines import LOG_N

    log = tl.clog[:int(tl.st[LOG_N])].copy()
    tl.st[LOG_N] = 0
    return log


def _rows(n, num_workers, k, s):
    """The rows (in arrival order) of shard ``s`` of ``k``: those routed to workers ``w % k == s``."""
    if num_workers % k == 0:
        return slice(s, None, k)  # (i % W) % k == i % k
    return np.flatnonzero((np.arange(n) % num_workers) % k == s)


def _sub_workload(workload, rows):
    """The requests ``rows`` of a single-turn open-loop ``workload``, as a workload of their own."""
    from fastsim.workload import Workload

    isl = np.ascontiguousarray(workload.isl[rows])
    m = int(isl.shape[0])
    hash_ptr = hash_ids = None
    if workload.hash_ptr is not None:
        hp = np.asarray(workload.hash_ptr, dtype=np.int64)
        starts, lens = hp[:-1][rows], np.diff(hp)[rows]
        hash_ptr = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(lens, out=hash_ptr[1:])
        take = np.repeat(starts - hash_ptr[:-1], lens) + np.arange(int(hash_ptr[-1]))
        hash_ids = np.asarray(workload.hash_ids)[take]
    ptr = np.arange(m + 1, dtype=np.int64)  # (session i is row i: one array serves all three)
    return Workload(
        isl=isl,
        osl=np.ascontiguousarray(workload.osl[rows]),
        session=ptr[:-1],
        turn=np.zeros(m, dtype=np.int64),  # (zeros are not touched: a single-turn loop never reads them)
        delay_ms=np.zeros(m),
        session_arrival_ms=np.ascontiguousarray(workload.session_arrival_ms[rows]),
        session_ptr=ptr,
        session_rows=ptr[:-1],
        hash_ptr=hash_ptr,
        hash_ids=hash_ids,
        trace_block_size=workload.trace_block_size,
        line=np.zeros(m, dtype=np.int64),  # (source lines: the split run reports none)
        source=workload.source,
    )


class Results(NamedTuple):
    """A split run's per-request results: the request-state columns ``results.request_columns``
    reads, in the cluster's rows and ranks."""

    arrival: np.ndarray
    first_admit: np.ndarray
    first_token: np.ndarray
    second_token: np.ndarray
    last_token: np.ndarray
    terminal: np.ndarray
    generated: np.ndarray
    reused: np.ndarray
    first_reused: np.ndarray
    npreempt: np.ndarray
    rank: np.ndarray
    status: np.ndarray
    isl: np.ndarray
    osl: np.ndarray


class _TickFold:
    """The worker-seconds of the whole cluster, folded from the shards' tick logs as they come
    (each log in time order): every tick up to the earliest time an unfinished shard has logged
    is folded. A shard that has finished its own work folds for the others (``help``), so the
    last shard to finish finds little left to fold; a shard far ahead of the others in virtual
    time waits for them (``_PENDING_MAX``)."""

    def __init__(self, k, live):
        self.live = int(live)
        self.k = k
        self.pending = [np.zeros(0) for _ in range(k)]
        self.pending_log = [[] for _ in range(k)]  # chunks of completions (``kernels/timelines.py``)
        self.wf = np.zeros(6)  # the inter-token statistics, folded in the cluster's order
        self.front = [-np.inf] * k  # the time each shard has logged up to
        self.done = [False] * k
        self.acc = np.zeros(2)  # [worker-seconds, last tick]: the loop starts at 0
        self.cond = threading.Condition()
        self.helpers = 0
        self.folding = False
        self.jobs = []  # [callable, state]: "posted", "taken", "done" (``post``)

    def _take(self):
        """The foldable ticks and completions (called with the lock held): those pending up to
        the earliest front of an unfinished shard (a shard hands over its completions up to the
        last time it logged), the ticks merged into at most two arrays in time order, the
        completions as each shard's."""
        from fastsim.kernels.ticks import merge_ticks_nb
        from fastsim.kernels.timelines import log_cut_nb

        upto = min((f for f, d in zip(self.front, self.done) if not d), default=np.inf)
        heads = []
        for s, p in enumerate(self.pending):
            cut = p.shape[0] if upto == np.inf else int(np.searchsorted(p, upto, side="right"))
            if cut:
                heads.append(p[:cut])
                self.pending[s] = p[cut:]
        while len(heads) > 2:
            heads = [merge_ticks_nb(heads[0], heads[1])] + heads[2:]
        logs = []
        for s, chunks in enumerate(self.pending_log):
            taken = []
            while chunks:
                c = chunks[0]
                cut = c.shape[0] if upto == np.inf else int(log_cut_nb(c, upto))
                if cut:
                    taken.append(c[:cut])
                if cut < c.shape[0]:
                    chunks[0] = c[cut:]
                    break
                chunks.pop(0)
            logs.append(np.concatenate(taken) if len(taken) > 1 else (taken[0] if taken else np.zeros(0)))
        return heads, (logs if any(x.shape[0] for x in logs) else None)

    def _fold(self):
        """Fold what can be folded (called with the lock held; it is released while folding, and
        one thread folds at a time)."""
        from fastsim.kernels.ticks import fold_ticks_nb
        from fastsim.kernels.timelines import fold_logs_nb

        while not self.folding:
            heads, logs = self._take()
            if not heads and logs is None:
                return
            self.folding = True
            self.cond.release()
            try:
                if heads:
                    fold_ticks_nb(self.acc, self.live, heads[0], heads[1] if len(heads) > 1 else heads[0][:0])
                if logs is not None:
                    ends = np.cumsum([x.shape[0] for x in logs])
                    fold_logs_nb(self.wf, np.concatenate(logs), ends - [x.shape[0] for x in logs], ends, self.k)
            finally:
                self.cond.acquire()
                self.folding = False
                self.cond.notify_all()

    def offer(self, s, ticks, finished, fold=True, log=None):
        """Shard ``s`` hands over its next ticks and completions (``log``; ``finished``: its
        last); ``fold``: it folds what it can, unless another shard does (the shard in the calling
        thread leaves it to them)."""
        with self.cond:
            if log is not None and log.shape[0]:
                self.pending_log[s].append(log)
            if ticks.shape[0]:
                p = self.pending[s]
                self.pending[s] = np.concatenate((p, ticks)) if p.shape[0] else ticks
                self.front[s] = float(ticks[-1])
            self.done[s] = finished
            if fold and self.helpers == 0:
                self._fold()
            self.cond.notify_all()
            while (not finished and self.pending[s].shape[0] > _PENDING_MAX
                   and any(not d and f < self.front[s] for f, d in zip(self.front, self.done))):
                self._fold()  # (a shard that waits has time to fold, whoever else would)
                if self.pending[s].shape[0] <= _PENDING_MAX:
                    break
                self.cond.wait()

    def help(self):
        """Fold for the other shards, and run the jobs they post, until all have finished (a
        shard whose own work is done)."""
        with self.cond:
            self.helpers += 1
            try:
                while True:
                    for job in self.jobs:
                        if job[1] == "posted":
                            self._run(job)
                    self._fold()
                    if all(self.done) and all(job[1] == "done" for job in self.jobs):
                        return
                    self.cond.wait()
            finally:
                self.helpers -= 1

    def _run(self, job):
        """Run a posted job (called with the lock held; it is released while the job runs)."""
        job[1] = "taken"
        self.cond.release()
        try:
            job[0]()
        finally:
            self.cond.acquire()
            job[1] = "done"
            self.cond.notify_all()

    def post(self, fn):
        """Offer ``fn`` to a helping shard; ``finish`` runs it here if none took it."""
        job = [fn, "posted"]
        with self.cond:
            self.jobs.append(job)
            self.cond.notify_all()
        return job

    def finish(self, job):
        """Wait for a posted job, running it here if no helper has taken it."""
        with self.cond:
            if job[1] == "posted":
                self._run(job)
            while job[1] != "done":
                self.cond.wait()

    def worker_seconds(self):
        """The cluster's worker-seconds, once every shard has handed over its last ticks (and its
        completions folded into ``wf``)."""
        with self.cond:
            while self.folding:
                self.cond.wait()
            self._fold()
            return float(self.acc[0])


def _scatter(dst, rq, rows, rank_map, lo, hi):
    """A shard's per-request results ``lo:hi`` into the cluster's (``dst``, a ``Results``) at
    ``rows`` (a slice with a step, or row numbers)."""
    from fastsim.kernels.ticks import scatter_results_nb

    if isinstance(rows, slice):
        first, step, idx = rows.start, rows.step, np.zeros(0, dtype=np.int64)
    else:
        first, step, idx = 0, 0, rows
    scatter_results_nb((dst.arrival, dst.first_admit, dst.first_token, dst.second_token,
                        dst.last_token, dst.terminal),
                       (dst.generated, dst.reused, dst.first_reused, dst.npreempt, dst.rank),
                       dst.status,
                       (rq.arrival, rq.first_admit, rq.first_token, rq.second_token, rq.last_token,
                        rq.terminal),
                       (rq.generated, rq.reused, rq.first_reused, rq.npreempt),
                       rq.rank, rq.status, rank_map, first, step, idx, lo, hi)


def simulate_shards(workload, engine, k, *, num_workers, dp, steady_decode, light_ticks, seed,
                    version="1.6.1", gap_ring=0, exact_gap_stats=True):
    """Simulate ``workload`` on ``num_workers`` round-robin workers as ``k`` shards side by side
    (``gap_ring``, ``exact_gap_stats``: as in ``RunConfig``).

    Returns ``(status, results, gaps, fleet, worker_seconds, states, remaining)``: the loop's
    status (OK or DEAD_END), the per-request :class:`Results` and the pooled gap statistics in
    the cluster's rows and groups (as ``results.request_columns`` and ``results.gap_columns`` take
    them), a fleet record for ``results.fleet_frame``, the cluster's worker-seconds, the shards'
    final states (for the invariant checks) and the requests left in flight (a dead end)."""
    from fastsim.dynamo_version import timing_rules
    from fastsim.kernels.codes import DEAD_END, INTERRUPTED, OK, TICKS_FULL
    from fastsim.kernels.loop import CTRL_C, NDONE, NARRIVED, NTICKS, run_loop_nb
    from fastsim.kernels.codes import RECORDS_FULL
    from fastsim.kernels.timelines import LOST, LOST_RECORDS, grow_records

    n = int(workload.isl.shape[0])
    fold = _TickFold(k, num_workers)
    rows = [_rows(n, num_workers, k, s) for s in range(k)]
    n_workers = [len(range(s, num_workers, k)) for s in range(k)]
    states = [None] * k
    results = [None] * k

    def prepare(s):
        sub = _sub_workload(workload, rows[s])
        log = max(_LOG_MIN, 4 * (n_workers[s] * 256 + 2))  # (room for a step: kernels/loop.py)
        # the request state of a shard in a thread is mapped by its own loop, page by page (it
        # has time to spare: the calling thread's shard starts last); the calling thread's own
        # is mapped here, in huge pages
        run = RunConfig(num_workers=n_workers[s], worker_rows=n_workers[s], dp=dp, steady_decode=steady_decode,
                        light_ticks=light_ticks, timing_rules=timing_rules(version), tick_log=log,
                        huge_pages=s == k - 1, gap_log=exact_gap_stats, gap_ring=gap_ring,
                        exact_gap_stats=exact_gap_stats,
                        sharing=sharing_groups(sub, "round_robin", n_workers[s]))
        states[s] = build_state(sub, engine, run)

    def stop_all():
        for x in states:
            if x is not None:
                x.cluster.state[CTRL_C] = 1

    def run(s):
        try:
            st = states[s]
            rt = router_state("round_robin", None, st.params, st.n_requests, n_workers[s] * dp,
                              n_workers[s], 1, seed)
            out = np.zeros(4)
            while True:
                (params, perf, pool, requests, ranks, sessions, cluster, gaps, fleet, scratch) = st.tables()
                with interrupt.on_ctrl_c(stop_all):  # (the shard of the main thread stops them all)
                    status = run_loop_nb(params, perf, pool, requests, ranks, sessions, cluster, gaps, rt, fleet,
                                         scratch, out, None)
                if status == RECORDS_FULL:
                    st = states[s] = st._replace(gaps=st.gaps._replace(tl=grow_records(st.gaps.tl)))
                    continue
                if status == INTERRUPTED:  # (re-raised by the caller)
                    raise KeyboardInterrupt
                if status != TICKS_FULL:
                    break
                fold.offer(s, st.cluster.tlog[:int(st.cluster.state[NTICKS])].copy(), False, fold=s < k - 1,
                           log=_take_log(st.gaps.tl))
                st.cluster.state[NTICKS] = 0
            if status not in (OK, DEAD_END):
                raise RuntimeError(f"shard {s} of a split run stopped with status {status}")
            done_log = _take_log(st.gaps.tl)
            settle_unarrived(st.requests, int(st.cluster.state[NARRIVED]))
            m = st.n_requests
            last = st.cluster.tlog[:int(st.cluster.state[NTICKS])].copy()
            if s < k - 1:
                with scatter_lock:  # (the shards' rows interleave: one shard writes at a time)
                    _scatter(dst, st.requests, rows[s], rank_map[s], 0, m)
                fold.offer(s, last, True, log=done_log)
            else:
                with scatter_lock:
                    # the last shard (usually the last to finish) shares its rows with a helping
                    # shard: posted before its last ticks, as a helper stops once all are done
                    half = fold.post(lambda: _scatter(dst, st.requests, rows[s], rank_map[s], 0, m // 2))
                    fold.offer(s, last, True, fold=False, log=done_log)
                    _scatter(dst, st.requests, rows[s], rank_map[s], m // 2, m)
                    fold.finish(half)
            results[s] = status
            if s < k - 1:
                fold.help()  # (the shard in the calling thread is usually the last to finish)
        except BaseException as exc:  # re-raised by the caller
            results[s] = exc
            if isinstance(exc, KeyboardInterrupt):
                stop_all()
            with fold.cond:  # a shard waiting on this one must not wait forever
                fold.done[s] = True
                fold.cond.notify_all()

    # the per-request results in the cluster's rows, as the unsplit loop leaves them in its
    # request state (``results.request_columns`` reads them): each shard writes its rows when its
    # loop ends, the first ones while the others still run, and so maps their pages (small
    # pages: a huge page the host has taken back can take 5-7 ms to come, ``fastsim/arena.py``,
    # and a thread cannot time its faults and fall back; mapped here instead, they cost the
    # calling thread's shard, which starts last, a millisecond or more)
    times = [np.empty(n, dtype=dt) for dt in [np.float64] * 6 + [np.int32] * 5 + [np.int8]]
    dst = Results(*times, isl=np.asarray(workload.isl, dtype=np.int64),
                  osl=np.asarray(workload.osl, dtype=np.int64))

    # a shard's local rank k is global worker s + k_worker * k, rank k % dp within it (-1 stays)
    rank_map = []
    for s in range(k):
        local = np.arange(n_workers[s] * dp)
        rank_map.append(np.append((s + k * (local // dp)) * dp + local % dp, -1).astype(np.int32))

    scatter_lock = threading.Lock()
    threads = []
    try:
        for s in range(k):
            prepare(s)  # (here: the shards' set-up is Python, which holds the GIL anyway)
            if s < k - 1:
                th = threading.Thread(target=run, args=(s,), name=f"fastsim-shard-{s}", daemon=True)
                th.start()
                threads.append(th)
            else:
                run(s)
        for th in threads:
            th.join()
    except KeyboardInterrupt:  # (raised in this thread outside a shard's loop: the others stop too)
        stop_all()
        for th in threads:
            th.join()
        raise
    for r in results:
        if isinstance(r, BaseException):
            raise r
    lost = max((int(st.gaps.tl.st[LOST]) for st in states), default=0)
    if lost & LOST_RECORDS:
        raise RuntimeError("a tick of a shard's event loop used every free token-time record")
    if lost:
        # a request's token times left its rank's ring before it completed: again, with a wider one
        ring = 4 * states[0].gaps.tl.ring.shape[1]
        del states, results, dst
        return simulate_shards(workload, engine, k, num_workers=num_workers, dp=dp, steady_decode=steady_decode,
                               light_ticks=light_ticks, seed=seed, version=version, gap_ring=ring,
                               exact_gap_stats=exact_gap_stats)
    status = DEAD_END if DEAD_END in results else OK
    ws = fold.worker_seconds()

    g0 = states[0].gaps
    gaps = SimpleNamespace(**{name: np.zeros((num_workers,) + getattr(g0, name).shape[1:],
                                             dtype=getattr(g0, name).dtype)
                              for name in ("itl", "itl_n", "otpu", "otpu_n")})
    # the inter-token statistics, folded from the shards' completions in the cluster's order
    gaps.tl = SimpleNamespace(head=np.zeros(1 if exact_gap_stats else 0, dtype=np.int32), wf=fold.wf)
    gaps.itl_hist = sum(st.gaps.itl_hist for st in states)
    gaps.otpu_hist = sum(st.gaps.otpu_hist for st in states)
    fleet = SimpleNamespace(fs=np.array([num_workers]), gstate=np.zeros(num_workers, np.int8),
                            passes=np.zeros(num_workers, np.int64))
    for s, st in enumerate(states):
        w = n_workers[s]
        for name in ("itl", "itl_n", "otpu", "otpu_n"):
            getattr(gaps, name)[s::k] = getattr(st.gaps, name)[:w]
        fleet.gstate[s::k] = st.fleet.gstate[:w]
        fleet.passes[s::k] = st.fleet.passes[:w]
    remaining = sum(int(st.cluster.state[NARRIVED] - st.cluster.state[NDONE]) for st in states)
    return status, dst, gaps, fleet, ws, states, remaining
