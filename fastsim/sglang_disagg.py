"""Disaggregated prefill/decode serving on SGLang engines (Dynamo 1.6.1, decision 0370).

:func:`simulate_sglang_disagg` runs it in the compiled loop (``kernels/sglang_disagg.py``,
``fastsim/sglang_disagg_compiled.py``, decision 0400). This module keeps the refusals, the report
both paths share, and the reference the tests compare the loop with: prefill and decode workers
as groups of DP ranks of the plain-Python SGLang engine (:mod:`fastsim.sglang_ref`), run in
Dynamo 1.6.1's handoff order:

* a request is routed to a decode rank at its arrival; the rank reserves the KV of its prompt
  (cached prefix matched, fresh pages for the rest), head of its queue first, one reservation an
  attempt, attempts made only between the worker's passes;
* once reserved, the request goes to a prefill rank, whose SGLang scheduler prefills a copy of it
  that generates one token (chunked, radix-cached, as an aggregated rank);
* at the end of that prefill the prefill rank holds the KV; after the transfer (``isl *
  kv_bytes_per_token / bandwidth``) the decode rank takes the request at its worker's next pass
  boundary with its prompt materialized, and the source is released;
* the decode rank generates every output token (its first decode step gives the first token);
  a request it retracts is prefilled again there, in no time.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque

import numpy as np

from fastsim import sglang_ref
from fastsim.errors import NotSupportedError
from fastsim.kernels.codes import DECODE, OUTCOME_COMPLETED, OUTCOME_FAILED, OUTCOME_IN_FLIGHT

_WHAT = "disaggregated serving on the SGLang engine"


def _not_yet(what: str) -> NotSupportedError:
    return NotSupportedError(f"{what} in {_WHAT} is not supported yet by fastsim (it runs Dynamo 1.6.1's "
                             "round-robin and kv_router replays, decisions 0370 and 0440)")


def check_sglang_disagg(prefill_engine, decode_engine, *, router_mode, version, scaling_schedule,
                        router_config=None):
    """Refuse by name what the SGLang disaggregated engine does not run yet."""
    if version != "1.6.1":
        raise NotSupportedError(
            f"{_WHAT} with --dynamo-version {version} is not supported yet by fastsim (Dynamo 1.4.2 runs it "
            "with another handoff; fastsim reproduces Dynamo 1.6.1's)")
    if prefill_engine.engine_type != "sglang" or decode_engine.engine_type != "sglang":
        raise NotSupportedError("a disaggregated replay with one pool on the SGLang engine and the other on "
                                "another engine is not supported by fastsim; give both pools engine_type sglang")
    if prefill_engine.aic_nextn:
        raise _not_yet("speculative decoding (aic_nextn) on the prefill pool")
    for eng, pool in ((prefill_engine, "prefill"), (decode_engine, "decode")):
        if eng.max_model_len:
            raise _not_yet(f"max_model_len on the {pool} pool")
        if (eng.sglang or {}).get("prefill_decode_interval"):
            raise _not_yet(f"prefill_decode_interval on the {pool} pool")
    if router_mode not in ("round_robin", "kv_router"):
        raise _not_yet(f"router_mode {router_mode!r}")
    if router_mode == "kv_router":
        from fastsim.router_config import RouterConfig

        cfg = RouterConfig.coerce(router_config)  # (a bad config is an error before anything runs)
        if cfg.router_queue_threshold is not None:
            raise _not_yet("the kv_router's router_queue_threshold")
    if scaling_schedule:
        raise _not_yet("a scaling schedule")


def _cfg(engine, dp):
    """An SGLang rank's settings; attention DP divides the chunk among the ranks and makes the
    schedule 0.3 times as conservative, as on an aggregated worker (decisions 0290, 0278)."""
    from fastsim.sglang_config import sglang_settings

    s = sglang_settings(engine)
    caching = bool(engine.enable_prefix_caching)
    return sglang_ref.Cfg(ps=int(engine.block_size), total_pages=int(engine.num_gpu_blocks),
                          policy=s.policy if caching else "fifo", caching=caching, max_prefill=s.max_prefill_tokens,
                          chunk=s.chunked_prefill_size // dp, clip=s.clip_max_new_tokens,
                          conservativeness=s.schedule_conservativeness * (0.3 if dp > 1 else 1.0),
                          max_running=int(engine.max_num_seqs) if engine.max_num_seqs is not None else 1 << 62,
                          interval=0, dp=dp, v142=False)


def _timing(engine, cfg):
    """(prefill_ms(tokens), decode_ms(active, ctx), modeled(raw, c_speed)) of ``engine``'s ranks."""
    from fastsim.kernels.perf import decode_time_nb, modeled_ms_nb, prefill_time_nb
    from fastsim.perf import engine_perf_model

    perf = engine_perf_model(engine)
    speedup, dspeed = float(engine.speedup_ratio), float(engine.decode_speedup_ratio)
    cap = cfg.total_pages * cfg.ps

    def prefill_ms(t):
        return float(prefill_time_nb(perf, t))

    def decode_ms(active, ctx):
        return float(decode_time_nb(perf, active, ctx, cap))

    def modeled(raw, c_speed):
        return float(modeled_ms_nb(raw, speedup if c_speed else speedup * dspeed))

    return prefill_ms, decode_ms, modeled


class _Rank:
    """One SGLang rank of a worker and, on a decode worker, its side of the handoff."""

    def __init__(self, rank, index):
        self.rk = rank
        self.index = index       # its number in the pool (worker * dp + DP rank)
        self.pend = deque()      # decode: requests waiting for their KV reservation
        self.ready = []          # decode: (transfer end, row) transferred, waiting to be taken
        self.prebuilt = deque()  # decode: taken requests waiting to join the running batch
        self.gen = 0             # decode: changes of its KV (completions, retractions, freed pages)
        self.failed_gen = -1     # decode: the change at which the queue head last failed to fit

    def busy(self):
        return self.rk.busy() or bool(self.prebuilt)


class _Worker:
    """One worker of a pool: its DP ranks pass together; the time its pass in flight ends."""

    def __init__(self, ranks, modeled):
        self.ranks = ranks
        self.modeled = modeled
        self.busy_until = None
        self.finished = []  # the requests its pass in flight completes
        self.started = 0.0  # the time its pass in flight started
        self.pass_commit = 0  # the prompt tokens its pass in flight computes


def simulate_sglang_disagg(workload, prefill_engine, decode_engine, *, num_prefill_workers, num_decode_workers,
                           sla, version="1.6.1", concurrency=0, cap_ms=None, reference=False,
                           router_mode="round_robin", router_config=None, seed=0):
    """The :class:`fastsim.report.Report` of ``workload`` on SGLang prefill and decode pools
    (``concurrency``: a closed loop's; ``cap_ms``: the time cap, Dynamo stopping at the last event at
    or before it; ``reference``: the plain-Python ranks below even where the compiled loop,
    ``fastsim/sglang_disagg_compiled.py``, runs them; ``router_mode`` "kv_router": each pool's
    kv_router, ``router_config`` and ``seed`` its settings and tie-breaking seed, decision 0440)."""
    from fastsim import sglang_disagg_compiled

    run = simulate_reference
    if not reference and sglang_disagg_compiled.not_covered(prefill_engine, decode_engine) is None:
        run = sglang_disagg_compiled.simulate
    return run(workload, prefill_engine, decode_engine, num_prefill_workers=num_prefill_workers,
               num_decode_workers=num_decode_workers, sla=sla, version=version, concurrency=concurrency,
               cap_ms=cap_ms, router_mode=router_mode, router_config=router_config, seed=seed)


def stage_configs(router_config):
    """Each pool's router config: Dynamo's derived ones (``fastsim/sim_disagg.py``'s
    ``stage_router_configs``); without ``router_track_prefill_tokens`` the prefill router's cost
    has no prefill term at all, overlap credit included, so that its ranks tie but for
    ``decode_active_request_weight`` (``kv_notrack_p3d2``: Dynamo chose a rank with no overlap
    over one of 64 pages for the 4th request, and reused 0.59-0.60 of the prompts against the
    0.68-0.69 of a router still crediting overlaps)."""
    from dataclasses import replace

    from fastsim.router_config import RouterConfig
    from fastsim.sim_disagg import stage_router_configs

    rc_p, rc_d = stage_router_configs(RouterConfig.coerce(router_config))
    if not rc_p.router_track_prefill_tokens:
        rc_p = replace(rc_p, overlap_score_weight=0.0)
    return rc_p, rc_d


def pool_routers(router_config, workload, cfg_p, cfg_d, prefill_engine, decode_engine, P, D, dp_p, dp_d, seed):
    """The kv_router state of each pool (``kernels/router.py``), with Dynamo's derived configs
    (``fastsim/sim_disagg.py``'s ``stage_router_configs``): the prefill router's index fed by the
    prefill ranks' KV events as the aggregated engine's is (decision 0295), the decode router
    without overlaps. Each rank is a target; the decode router's ties are drawn from ``seed + 1``."""
    from types import SimpleNamespace

    from fastsim.state import router_state

    rc_p, rc_d = stage_configs(router_config)
    n = workload.n_requests
    def params(engine, cfg):  # (the budget is read by the router queue alone, which is refused here)
        budget = engine.max_num_batched_tokens
        return SimpleNamespace(budget=int(budget) if budget is not None else 8192, cap=cfg.total_pages)

    rt_p = router_state("kv_router", rc_p, params(prefill_engine, cfg_p), n, P * dp_p, P, 1024, seed, record=True,
                        kv_event_lag_ms=0.0, index_keys=cfg_p.total_pages)
    rt_d = router_state("kv_router", rc_d, params(decode_engine, cfg_d), n, D * dp_d, D, 1024, seed + 1)
    return rt_p, rt_d


def simulate_reference(workload, prefill_engine, decode_engine, *, num_prefill_workers, num_decode_workers,
                       sla, version="1.6.1", concurrency=0, cap_ms=None, router_mode="round_robin", router_config=None,
                       seed=0):
    """:func:`simulate_sglang_disagg` on the plain-Python SGLang ranks (slow; the tests compare the
    compiled loop with it)."""
    from fastsim.sglang_pages import page_keys_of

    t0 = time.perf_counter()
    dp_p, dp_d = max(int(prefill_engine.dp_size or 1), 1), max(int(decode_engine.dp_size or 1), 1)
    cfg_p, cfg_d = _cfg(prefill_engine, dp_p), _cfg(decode_engine, dp_d)
    P, D = int(num_prefill_workers), int(num_decode_workers)
    pre, dec = [], []
    for pool, count, engine, cfg, dp in ((pre, P, prefill_engine, cfg_p, dp_p), (dec, D, decode_engine, cfg_d, dp_d)):
        for g in range(count):
            prefill_ms, decode_ms, modeled = _timing(engine, cfg)
            if pool is dec:  # a decode worker's prefill (of a retracted request, again) takes no time
                prefill_ms = _no_time
            ranks = [_Rank((_HoldingRank if pool is pre else sglang_ref.Rank)(cfg, prefill_ms, decode_ms), g * dp + k)
                     for k in range(dp)]
            # speculative decoding: each decode rank's sampler seeded with aic_mtp_seed plus its
            # number in the pool (the prefill pool's size does not count: mtp_k1_p2d1_seed)
            if pool is dec and engine.aic_nextn:
                from fastsim.config import accept_rates
                from fastsim.rust_rng import StdRng

                rates = accept_rates(engine.aic_nextn_accept_rates, int(engine.aic_nextn))
                for x in ranks:
                    x.rk.mtp = (rates, StdRng((int(engine.aic_mtp_seed) + x.index) & 0xFFFFFFFFFFFFFFFF))
            pool.append(_Worker(ranks, modeled))
    kvb, bw = prefill_engine.kv_bytes_per_token, prefill_engine.kv_transfer_bandwidth

    n = workload.n_requests
    isl, osl = workload.isl, workload.osl
    nan = lambda: np.full(n, np.nan)  # noqa: E731
    arrival, padmit, held, reserved, activated, released, dadmit = (nan() for _ in range(7))
    first_tok, second_tok, last_tok, terminal = nan(), nan(), nan(), nan()
    gen = np.zeros(n, np.int64)
    reused = np.zeros(n, np.int64)
    status = np.zeros(n, np.int8)
    pre_idx = np.full(n, -1, np.int64)
    dec_idx = np.full(n, -1, np.int64)
    committed = [0]
    gaps = []      # (row, inter-token gap) in the order they were stamped
    readmits = ([], [], [])  # rows, times, reused tokens of the retracted requests prefilled again on decode
    copies = {}    # row -> (prefill rank, the prefill copy): its KV held until the decode side takes it
    targets = {}   # row -> the decode-side request
    dec_rank = {}  # row -> its decode rank

    hp, hid = workload.hash_ptr, workload.hash_ids
    rt_p = rt_d = None
    if router_mode == "kv_router":  # each pool's router (decision 0440)
        from fastsim import sglang_disagg_router as sdr

        rc_p, rc_d = stage_configs(router_config)
        rt_p, rt_d = sdr.PrefillRouter(rc_p, P * dp_p, seed), sdr.DecodeRouter(rc_d, D * dp_d, seed + 1)
        pre_trees = [y.rk.tree for w in pre for y in w.ranks]
        route_ov = np.full(n, -1, np.int64)
        route_best = np.full(n, -1, np.int64)

    def prompt_pages(row, ps):
        """The keys of a prompt's complete pages another request can hold (none: unique prompts, or
        no prefix caching on the prefill ranks, which then publish nothing: kv_nocache_trace)."""
        return keys_of(row, ps)[:int(isl[row]) // ps] if hp is not None and cfg_p.caching else []

    def keys_of(row, ps):
        h = None if hp is None else hid[hp[row]:hp[row + 1]]
        return [int(k) for k in page_keys_of(int(isl[row]), int(osl[row]), row, h, workload.trace_block_size, ps)]

    arrivals = []
    # a closed loop starts its first ``concurrency`` sessions at 0, the next one whenever a session ends
    started = min(concurrency, workload.n_sessions) if concurrency else workload.n_sessions
    for s in range(started):
        r0 = int(workload.session_rows[workload.session_ptr[s]])
        heapq.heappush(arrivals, (0.0 if concurrency else float(workload.session_arrival_ms[s]), s, 0, r0))
    next_turn = {}
    for s in range(workload.n_sessions):
        rows = workload.session_rows[workload.session_ptr[s]:workload.session_ptr[s + 1]]
        for a, b in zip(rows[:-1], rows[1:]):
            next_turn[int(a)] = int(b)
    rr = {"p": 0, "d": 0}

    def transfer_ms(row):
        if kvb is None or bw is None:
            return 0.0
        return float(isl[row]) * float(kvb) / (float(bw) * 1e9) * 1000.0

    def reserve(x, now, tries):
        """``tries`` attempts to reserve the KV of the prompt at the head of decode rank ``x``'s queue
        (one reservation an attempt: its cached prefix matched, fresh pages for the rest); each one
        reserved goes to a prefill worker."""
        for _ in range(tries):
            if not x.pend or x.failed_gen == x.gen:  # (a head that did not fit waits for the KV to change)
                return
            row = x.pend[0]
            r = sglang_ref.Req(row, int(isl[row]), int(osl[row]), keys_of(row, cfg_d.ps))
            if x.rk._alloc_new(r, r.isl) is None:
                x.failed_gen = x.gen
                return
            x.pend.popleft()
            targets[row] = r
            reserved[row] = now
            if rt_p is None:
                i = rr["p"] % (P * dp_p)  # (round robin over the pool's ranks, a worker's DP ranks in a row)
                rr["p"] += 1
            else:
                i, route_ov[row], route_best[row] = rt_p.route(pre_trees, prompt_pages(row, cfg_p.ps), int(isl[row]),
                                                               cfg_p.ps, row, now)
            w, y = pre[i // dp_p], pre[i // dp_p].ranks[i % dp_p]
            pre_idx[row] = y.index
            c = sglang_ref.Req(row, int(isl[row]), 1, keys_of(row, cfg_p.ps))
            copies[row] = (w, y, c)
            y.rk.waiting.append(c)

    def activate(x, now):
        """Take the transferred requests whose transfer has ended (prompt materialized, its complete
        pages cached: a page the rank holds already is freed), each followed by one reservation
        attempt."""
        due = sorted(e for e in x.ready if e[0] <= now)
        if not due:
            return
        x.ready = [e for e in x.ready if e[0] > now]
        tr = x.rk.tree
        for _, row in due:
            w, y, c = copies.pop(row)
            # the source is released by a command its prefill worker applies between passes (its
            # KV is freed before that worker schedules again either way)
            y.rk.release(c)
            released[row] = now if w.busy_until is None else w.busy_until
            if rt_p is not None:
                rt_p.released(y.index, prompt_pages(row, cfg_p.ps), released[row])
            r = targets.pop(row)
            r.mat = r.isl
            r.alloc = -(-r.isl // cfg_d.ps) * cfg_d.ps
            before = tr.free
            x.rk._cache_prefix(r, r.isl)
            if tr.free > before:
                x.gen += 1
            activated[row] = now
            x.prebuilt.append(r)
            reserve(x, now, 1)

    def run(w, now, decode_side):
        """One pass of worker ``w``'s busy ranks together, its tokens stamped at the slowest one's end."""
        emitted, admitted = [], []

        def emit(r):
            emitted.append(r.row)

        def admit(r, prefix, computed, readmission):
            admitted.append(r.row)
            committed[0] += computed
            w.pass_commit += computed
            if decode_side:  # a retracted request prefilled again
                for log, v in zip(readmits, (r.row, now, prefix)):
                    log.append(v)
            elif np.isnan(padmit[r.row]):
                padmit[r.row] = now
                reused[r.row] = prefix

        end, completed, ran = now, [], False
        w.pass_commit = 0
        for x in w.ranks:
            if not x.busy():
                continue
            ran = True
            hold = False
            n_wait = len(x.rk.waiting)
            if rt_p is not None and not decode_side:  # (what the pass changes is published at its end)
                rt_p.pass_starts(x.index, x.rk.tree)
            if decode_side:
                while x.prebuilt and len(x.rk.running) < x.rk.c.max_running:  # taken requests join
                    r = x.prebuilt.popleft()
                    dadmit[r.row] = now
                    x.rk.running.append(r)
                # no fresh prefill on a decode rank while taken requests wait for room or a
                # destination waits for its reservation
                hold = bool(x.prebuilt) or bool(x.pend)
            e, comp = sglang_ref.run_pass(x.rk, now, w.modeled, emit, admit, hold)
            end = max(end, e)
            completed += comp
            if decode_side and len(x.rk.waiting) > n_wait:  # a retraction
                x.gen += 1
        if decode_side:
            for row in emitted:
                gen[row] += 1
                if gen[row] == 1:
                    first_tok[row] = end
                else:
                    gaps.append((row, end - last_tok[row]))
                    if gen[row] == 2:
                        second_tok[row] = end
                last_tok[row] = end
        w.finished = [r.row for r in completed]
        # (a decode rank's prefill chunk takes no time: a pass all the same, the next one follows it)
        started = ran and (end > now or emitted or completed or admitted)
        if rt_p is not None and not decode_side:
            for x in w.ranks:
                rt_p.pass_ends(x.index, end if started else now)
        if started:
            w.busy_until = end
            w.started = now
            return True
        return False

    def arrive(row, now):
        """Route a request to a decode rank: round robin over the pool's ranks, a worker's DP ranks
        in a row (``dp2_both_2p2d``: ranks 0, 1, 2, 3 of two workers of two)."""
        arrival[row] = now
        status[row] = OUTCOME_IN_FLIGHT
        if rt_d is None:
            i = rr["d"] % (D * dp_d)
            rr["d"] += 1
        else:  # the decode router's choice
            i = rt_d.route(int(isl[row]) // cfg_d.ps)
        w, x = dec[i // dp_d], dec[i // dp_d].ranks[i % dp_d]
        dec_idx[row] = x.index
        if -(-int(isl[row]) // cfg_d.ps) > cfg_d.total_pages:
            # a prompt larger than the decode rank's KV fails at once (Dynamo refuses its reservation)
            status[row] = OUTCOME_FAILED
            terminal[row] = now
            if rt_d is not None:
                rt_d.done(i, int(isl[row]) // cfg_d.ps)
            return 1
        dec_rank[row] = x
        x.pend.append(row)
        if w.busy_until is None:  # an idle worker attempts one reservation (a busy one queues it)
            reserve(x, now, 1)
        return 0

    def work(now):
        """The idle workers' handoff commands and passes at ``now``, until none can start."""
        progress = True
        while progress:
            progress = False
            for w in dec:
                if w.busy_until is None:
                    for x in w.ranks:
                        activate(x, now)
            for w in pre:
                if w.busy_until is None:
                    progress |= run(w, now, False)
            for w in dec:
                if w.busy_until is None:
                    progress |= run(w, now, True)

    born = []  # the arrivals completions released in this step
    done = 0
    last_event = 0.0
    while done < n:
        t_arr = arrivals[0][0] if arrivals else math.inf
        t_pass = min((w.busy_until for w in pre + dec if w.busy_until is not None), default=math.inf)
        t_x = min((e[0] for w in dec if w.busy_until is None for x in w.ranks for e in x.ready), default=math.inf)
        now = min(t_arr, t_pass, t_x)
        if cap_ms is not None and now > cap_ms:
            break
        if now == math.inf:
            raise _stuck(workload, status, cfg_p)
        last_event = now
        for w in pre:  # prefill passes ending: the sources are held
            if w.busy_until is not None and w.busy_until <= now:
                w.busy_until = None
                for row in w.finished:
                    held[row] = now
                    if rt_p is not None:
                        rt_p.held(int(pre_idx[row]), row, prompt_pages(row, cfg_p.ps))
                    dec_rank[row].ready.append((now + transfer_ms(row), row))
                w.finished = []
        for w in dec:  # decode passes ending
            if w.busy_until is not None and w.busy_until <= now:
                w.busy_until = None
                for row in w.finished:
                    if rt_d is not None:
                        rt_d.done(int(dec_idx[row]), int(isl[row]) // cfg_d.ps)
                    dec_rank[row].gen += 1
                    terminal[row] = now
                    status[row] = OUTCOME_COMPLETED
                    done += 1
                    nt = next_turn.get(row)
                    if nt is not None:
                        heapq.heappush(born, (now + float(workload.delay_ms[nt]), int(workload.session[nt]),
                                              int(workload.turn[nt]), nt))
                    elif started < workload.n_sessions and concurrency:
                        r0 = int(workload.session_rows[workload.session_ptr[started]])
                        heapq.heappush(born, (now, started, 0, r0))
                        started += 1
                w.finished = []
                if w.started < now:  # a pass end attempts one reservation on each rank (not the end
                    for x in w.ranks:  # of a decode rank's prefill in no time: closed_tight_c32)
                        reserve(x, now, 1)
        while arrivals and arrivals[0][0] <= now:
            done += arrive(heapq.heappop(arrivals)[3], now)
        work(now)
        # requests a completion releases at once arrive after the workers started their next passes
        while born:
            e = heapq.heappop(born)
            if e[0] > now:
                heapq.heappush(arrivals, e)
            else:
                done += arrive(e[3], now)
        work(now)

    if cap_ms is not None and done < n:
        # stopped at the cap: the passes in flight have not committed their prompt tokens
        committed[0] -= sum(w.pass_commit for w in pre + dec if w.busy_until is not None and w.busy_until > last_event)
    from fastsim.kernels.sglang_disagg import GapPool, pool_gaps_nb
    from fastsim.kernels.stats import dd_new_hist

    pool = GapPool(np.zeros(16), dd_new_hist(), dd_new_hist())
    pool_gaps_nb(pool, np.array([g for row, g in gaps if status[row] == OUTCOME_COMPLETED], np.float64))
    return _report(workload, {
        "arrival_ms": arrival, "first_admit_ms": padmit, "first_token_ms": first_tok,
        "second_token_ms": second_tok, "last_token_ms": last_tok, "terminal_ms": terminal, "status": status,
        "output_length": gen, "reused_tokens": reused, "dec_idx": dec_idx, "pre_idx": pre_idx, "source_held_ms": held,
        "destination_reserved_ms": reserved, "destination_activated_ms": activated, "decode_admit_ms": dadmit,
        "source_released_ms": released}, readmits, gap_stats(pool), committed[0],
        last_event if cap_ms is not None and done < n else None, t0,
        P=P, D=D, dp_p=dp_p, dp_d=dp_d, concurrency=concurrency, sla=sla, version=version,
        routes=None if rt_p is None else {
            "prefill_route_overlap_tokens": np.where(route_ov >= 0, route_ov * cfg_p.ps, -1).astype(np.int64),
            "route_selected_blocks": route_ov, "route_best_blocks": route_best,
            "route_released_ms": np.full(n, np.nan)})


def gap_stats(pool):
    """The ``gaps`` of ``fastsim.report.build_report`` from gaps pooled as ``kernels.sglang``'s
    ``_pool_gap_nb`` pools them (``pool``: its ``gaps``, ``itl_hist`` and ``otpu_hist``)."""
    g = pool.gaps
    out = {}
    for name, off, comp, hist in (("itl", 0, 12, pool.itl_hist), ("otpu", 6, 14, pool.otpu_hist)):
        cnt = int(g[off])
        out.update({f"{name}_count": cnt, f"{name}_sum": float(g[off + 1] + g[comp]),
                    f"{name}_sumsq": float(g[off + 2] + g[comp + 1]),
                    f"{name}_min": float(g[off + 3]) if cnt else 0.0,
                    f"{name}_max": float(g[off + 4]) if cnt else 0.0, f"{name}_shift": float(g[off + 5]),
                    f"{name}_hist": hist})
    return out


def _report(workload, c, readmits, gaps, committed, cap_event, t0, *, P, D, dp_p, dp_d, concurrency, sla, version,
            routes=None):
    """The report of a run (``c``: the per-request arrays; ``readmits``: (row, time, reused tokens)
    of each readmission on a decode rank; ``gaps``: the pooled gaps of the completed requests,
    :func:`gap_stats`; ``cap_event``: the last event of a run the time cap stopped, else None;
    ``t0``: the clock at its start; ``routes``: kv_router's routing columns, overlaps of the prefill
    router: ``prefill_route_overlap_tokens``, ``route_selected_blocks``, ``route_best_blocks``,
    ``route_released_ms``; None: round robin)."""
    from fastsim.history import identity_columns
    from fastsim.report import build_report

    isl, osl = workload.isl, workload.osl
    status, pre_idx, dec_idx, activated = c["status"], c["pre_idx"], c["dec_idx"], c["destination_activated_ms"]
    padmit, reused = c["first_admit_ms"], c["reused_tokens"]
    cols = {k: v for k, v in c.items() if k not in ("pre_idx", "dec_idx")}
    cols.update({
        "input_length": np.asarray(isl, np.int64), "requested_output_length": np.asarray(osl, np.int64),
        "ratio_reused_tokens": reused, "first_reused_tokens": reused.copy(),
        "worker_idx": np.where(status == OUTCOME_FAILED, -1, dec_idx), "decode_route_idx": dec_idx,
        "prefill_worker_idx": pre_idx, "prefill_admit_ms": padmit,
        "decode_reused_input_tokens": np.where(np.isnan(activated), -1, 0).astype(np.int64),
        "prefill_route_overlap_tokens": np.where(pre_idx >= 0, 0, -1).astype(np.int64),
        "decode_route_overlap_tokens": np.where(dec_idx >= 0, 0, -1).astype(np.int64),
    })
    n = workload.n_requests
    rrow = np.asarray(readmits[0], np.int64)
    cols.update({"readmit_row": rrow, "readmit_reused": np.asarray(readmits[2], np.int64),
                 "readmit_stage": np.full(rrow.shape[0], DECODE, np.int64),
                 "readmit_ms": np.asarray(readmits[1], np.float64),
                 "preemptions": np.bincount(rrow, minlength=n).astype(np.int64)})
    if routes is not None:
        cols.update(routes)
    cols.update(identity_columns(workload, bool(concurrency)))
    # the SGLang engine routes a request to its decode worker first; each pool's DP ranks name the
    # worker and the rank in the routing history
    cols.update({"decode_routed_first": True, "pool_dp": {"prefill": dp_p, "decode": dp_d}})
    term = c["terminal_ms"][status == OUTCOME_COMPLETED]
    last = float(term.max()) / 1000.0 if term.shape[0] else 0.0
    if cap_event is not None:  # stopped at the cap: the workers' time runs to the last event
        last = cap_event / 1000.0
    wall_ms = (time.perf_counter() - t0) * 1000.0
    return build_report(cols, gaps, {
        "num_workers": P + D, "single_path": False, "decode_worker_seconds": D * last,
        "prefill_worker_seconds": P * last, "prefill_gpus_per_worker": dp_p, "decode_gpus_per_worker": dp_d,
        "wall_time_ms": wall_ms, "sla_ttft_ms": sla[0], "sla_itl_ms": sla[1], "sla_e2e_ms": sla[2],
        "dynamo_version": version, "committed_prefill_tokens": committed, "disaggregated": True})


def _no_time(tokens):
    return 0.0


def _stuck(workload, status, cfg_p):
    """The error of a run in which nothing can move any more (Dynamo stops such a replay too: "replay
    invariant violated: offline disagg replay encountered an effect-free zero-duration pass")."""
    from fastsim.errors import InputError

    left = np.flatnonzero(status == OUTCOME_IN_FLIGHT)
    return InputError(
        f"the SGLang prefill and decode workers are stuck with {left.shape[0]} request(s) left: a prompt must fit "
        f"the KV cache of a prefill rank ({cfg_p.total_pages * cfg_p.ps} tokens: num_gpu_blocks x block_size) "
        f"and max_prefill_tokens ({cfg_p.max_prefill}) when it is not chunked (chunked_prefill_size "
        f"{cfg_p.chunk} per rank); Dynamo stops such a replay too")


class _HoldingRank(sglang_ref.Rank):
    """A prefill worker's rank: a finished prefill keeps its KV (the source of the transfer) until
    :meth:`release`."""

    def _finish(self, r):
        pass

    def release(self, r):
        sglang_ref.Rank._finish(self, r)
