"""Disaggregated prefill/decode serving on SGLang engines (Dynamo 1.6.1, decision 0370).

Prefill and decode workers are the plain-Python SGLang ranks of :mod:`fastsim.sglang_ref`, run in
Dynamo 1.6.1's handoff order:

* a request is routed to a decode worker at its arrival; the decode worker reserves the KV of
  its page-rounded prompt (fresh pages, first come first served) when it is between passes;
* once reserved, the request goes to a prefill worker (round robin), whose SGLang scheduler
  prefills a copy of it that generates one token (chunked, radix-cached, as an aggregated rank);
* at the end of that prefill the prefill worker holds the KV; after the transfer (``isl *
  kv_bytes_per_token / bandwidth``) the decode worker takes the request at its next pass
  boundary (it is idle: at once) with its prompt materialized, and the source is released;
* the decode worker generates every output token (its first decode step gives the first token:
  TTFT counts the prefill, the transfer and that step).

Runs that reach what is not reproduced yet (a decode worker retracting or failing to reserve,
attention DP, the kv_router, closed loops, caps) are refused by name.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque

import numpy as np

from fastsim.errors import NotSupportedError
from fastsim.kernels.codes import OUTCOME_COMPLETED, OUTCOME_IN_FLIGHT

_WHAT = "disaggregated serving on the SGLang engine"


def _not_yet(what: str) -> NotSupportedError:
    return NotSupportedError(f"{what} in {_WHAT} is not supported yet by fastsim (it runs Dynamo 1.6.1's "
                             "round-robin open-loop replays without decode-side KV pressure)")


PRESSURE = True
PENDING_BLOCKS = True
CACHE_AT_ACTIVATION = True
MATCH_AT_RESERVE = True


class _Pressure(Exception):
    """A decode worker ran out of KV (a retraction or a reservation that waits): not exact yet."""


def check_sglang_disagg(prefill_engine, decode_engine, *, router_mode, version, replay_concurrency,
                        max_sim_time_ms, scaling_schedule):
    """Refuse by name what the SGLang disaggregated engine does not run yet."""
    if version != "1.6.1":
        raise NotSupportedError(
            f"{_WHAT} with --dynamo-version {version} is not supported yet by fastsim (Dynamo 1.4.2 runs it "
            "with another handoff; fastsim reproduces Dynamo 1.6.1's)")
    if prefill_engine.engine_type != "sglang" or decode_engine.engine_type != "sglang":
        raise NotSupportedError("a disaggregated replay with one pool on the SGLang engine and the other on "
                                "another engine is not supported by fastsim; give both pools engine_type sglang")
    for eng, pool in ((prefill_engine, "prefill"), (decode_engine, "decode")):
        if int(eng.dp_size or 1) != 1:
            raise _not_yet(f"attention DP (dp_size) on the {pool} pool")
        if eng.aic_nextn:
            raise _not_yet(f"speculative decoding (aic_nextn) on the {pool} pool")
        if eng.max_model_len:
            raise _not_yet(f"max_model_len on the {pool} pool")
        if (eng.sglang or {}).get("prefill_decode_interval"):
            raise _not_yet(f"prefill_decode_interval on the {pool} pool")
    if router_mode != "round_robin":
        raise _not_yet(f"router_mode {router_mode!r}")
    if replay_concurrency:
        raise _not_yet("a closed loop (replay_concurrency)")
    if max_sim_time_ms is not None:
        raise _not_yet("a time cap (max_sim_time_ms)")
    if scaling_schedule:
        raise _not_yet("a scaling schedule")


def _cfg(engine):
    from fastsim import sglang_ref
    from fastsim.sglang_config import sglang_settings

    s = sglang_settings(engine)
    caching = bool(engine.enable_prefix_caching)
    return sglang_ref.Cfg(ps=int(engine.block_size), total_pages=int(engine.num_gpu_blocks),
                          policy=s.policy if caching else "fifo", caching=caching, max_prefill=s.max_prefill_tokens,
                          chunk=s.chunked_prefill_size, clip=s.clip_max_new_tokens,
                          conservativeness=s.schedule_conservativeness,
                          max_running=int(engine.max_num_seqs) if engine.max_num_seqs is not None else 1 << 62,
                          interval=0, dp=1, v142=False)


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


class _Worker:
    """One worker (a single SGLang rank) of a pool, with the time its pass in flight ends."""

    def __init__(self, rank, modeled):
        self.rank = rank
        self.modeled = modeled
        self.busy_until = None
        self.finished = []   # the requests its pass in flight completes
        self.pend = deque()  # decode: requests waiting for their KV reservation
        self.ready = []      # decode: (transfer end, row) transferred, waiting to be taken
        self.tries = 0       # decode: reservation attempts due at this boundary
        self.gen = 0         # decode: changes of its KV (completions, releases)
        self.prebuilt = deque()  # decode: taken requests waiting to join the running batch
        self.failed_gen = -1  # decode: the change at which the queue head last failed to fit


def simulate_sglang_disagg(workload, prefill_engine, decode_engine, *, num_prefill_workers, num_decode_workers,
                           sla, version="1.6.1"):
    """The :class:`fastsim.report.Report` of ``workload`` on SGLang prefill and decode pools."""
    from fastsim import sglang_ref
    from fastsim.history import identity_columns
    from fastsim.report import build_report, make_gap_stats
    from fastsim.sglang_pages import page_keys_of

    t0 = time.perf_counter()
    cfg_p, cfg_d = _cfg(prefill_engine), _cfg(decode_engine)
    P, D = int(num_prefill_workers), int(num_decode_workers)
    pre = []
    for _ in range(P):
        pm, dm, mod = _timing(prefill_engine, cfg_p)
        pre.append(_Worker(_HoldingRank(cfg_p, pm, dm), mod))
    dec = []
    for _ in range(D):
        pm, dm, mod = _timing(decode_engine, cfg_d)
        # a decode worker's prefill (of a retracted request, again) takes no time in Dynamo
        dec.append(_Worker(sglang_ref.Rank(cfg_d, lambda t: 0.0, dm), mod))
    kvb, bw = prefill_engine.kv_bytes_per_token, prefill_engine.kv_transfer_bandwidth

    n = workload.n_requests
    isl, osl = workload.isl, workload.osl
    nan = lambda: np.full(n, np.nan)  # noqa: E731
    arrival, padmit, held, reserved, activated, released = nan(), nan(), nan(), nan(), nan(), nan()
    dadmit = nan()
    first_tok, second_tok, last_tok, terminal = nan(), nan(), nan(), nan()
    gen = np.zeros(n, np.int64)
    reused = np.zeros(n, np.int64)
    status = np.zeros(n, np.int8)
    pre_idx = np.full(n, -1, np.int64)
    dec_idx = np.full(n, -1, np.int64)
    committed = [0]
    gaps = []
    readmits = []  # (row, time, reused tokens) of the retracted requests prefilled again on decode
    copies = {}   # row -> the prefill copy (its source KV held until the decode worker takes it)
    targets = {}  # row -> the decode-side request

    hp, hid = workload.hash_ptr, workload.hash_ids

    def keys_of(row, ps):
        h = None if hp is None else hid[hp[row]:hp[row + 1]]
        return [int(k) for k in page_keys_of(int(isl[row]), int(osl[row]), row, h, workload.trace_block_size, ps)]

    arrivals = []
    for s in range(workload.n_sessions):
        r0 = int(workload.session_rows[workload.session_ptr[s]])
        heapq.heappush(arrivals, (float(workload.session_arrival_ms[s]), s, 0, r0))
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

    def reserve(w, now, tries):
        """``tries`` attempts to reserve the KV of the prompt at the head of the decode worker's
        queue (one reservation an attempt); each one reserved goes to a prefill worker."""
        tr, ps = w.rank.tree, w.rank.c.ps
        for _ in range(tries):
            if not w.pend or w.failed_gen == w.gen:  # (a head that did not fit waits for the KV to change)
                return
            row = w.pend[0]
            r = sglang_ref.Req(row, int(isl[row]), int(osl[row]), keys_of(row, ps))
            if MATCH_AT_RESERVE:
                if w.rank._alloc_new(r, r.isl) is None:
                    w.failed_gen = w.gen
                    return
            else:
                pages = -(-int(isl[row]) // ps)
                if pages > tr.free + tr.evictable:
                    w.failed_gen = w.gen
                    return
                if pages > tr.free:
                    tr.evict(pages - tr.free)
                tr.free -= pages
                _, r.last = tr.match([], lock=True)
                r.own = pages
            w.pend.popleft()
            targets[row] = r
            reserved[row] = now
            p = rr["p"] % P
            rr["p"] += 1
            pre_idx[row] = p
            c = sglang_ref.Req(row, int(isl[row]), 1, keys_of(row, cfg_p.ps))
            copies[row] = (p, c)
            pre[p].rank.waiting.append(c)

    def activate(w, now):
        """Take the transferred requests whose transfer has ended (prompt materialized, its complete
        pages cached: a page the worker holds already is freed), each followed by one reservation
        attempt."""
        due = sorted(x for x in w.ready if x[0] <= now)
        if not due:
            return
        w.ready = [x for x in w.ready if x[0] > now]
        tr = w.rank.tree
        for _, _, row in due:
            p, c = copies.pop(row)
            # the source is released by a command its prefill worker applies between passes (its
            # KV is freed before that worker schedules again either way)
            pre[p].rank.release(c)
            released[row] = now if pre[p].busy_until is None else pre[p].busy_until
            r = targets.pop(row)
            r.mat = r.isl
            r.alloc = -(-r.isl // w.rank.c.ps) * w.rank.c.ps
            before = tr.free
            if CACHE_AT_ACTIVATION:
                w.rank._cache_prefix(r, r.isl)
            if tr.free > before:
                w.gen += 1
            activated[row] = now
            w.prebuilt.append(r)
            reserve(w, now, 1)

    def promote(w, now):
        """The taken requests join the running batch at the start of a pass (up to max_num_seqs)."""
        rk = w.rank
        while w.prebuilt and len(rk.running) < rk.c.max_running:
            r = w.prebuilt.popleft()
            dadmit[r.row] = now
            rk.running.append(r)

    def run(w, now, decode_side):
        emitted = []

        def emit(r):
            emitted.append(r.row)

        def admit(r, prefix, computed, readmission):
            committed[0] += computed
            if decode_side:
                if not PRESSURE:
                    raise _Pressure()  # a retracted request prefilled again on the decode worker
                readmits.append((r.row, now, prefix))
                return
            if np.isnan(padmit[r.row]):
                padmit[r.row] = now
                reused[r.row] = prefix

        n_wait = len(w.rank.waiting)
        hold = False
        if decode_side:
            promote(w, now)
            # no fresh prefill on a decode worker while taken requests wait for room or a
            # destination waits for its reservation
            hold = bool(w.prebuilt) or (PENDING_BLOCKS and bool(w.pend))
        end, completed = sglang_ref.run_pass(w.rank, now, w.modeled, emit, admit, hold)
        if decode_side:
            if len(w.rank.waiting) > n_wait or (w.rank.waiting and not PRESSURE):
                if not PRESSURE:
                    raise _Pressure()  # a retraction
                w.gen += 1
            for row in emitted:
                gen[row] += 1
                if gen[row] == 1:
                    first_tok[row] = end
                else:
                    gaps.append(end - last_tok[row])
                    if gen[row] == 2:
                        second_tok[row] = end
                last_tok[row] = end
        w.finished = [r.row for r in completed]
        if end > now or emitted or completed:
            w.busy_until = end
            return True
        return False

    done = 0
    try:
        while done < n:
            t_arr = arrivals[0][0] if arrivals else math.inf
            t_pass = min((w.busy_until for w in pre + dec if w.busy_until is not None), default=math.inf)
            t_x = min((x[0] for w in dec if w.busy_until is None for x in w.ready), default=math.inf)
            now = min(t_arr, t_pass, t_x)
            if now == math.inf:
                raise _Pressure()
            for p, w in enumerate(pre):  # prefill passes ending: the sources are held
                if w.busy_until is not None and w.busy_until <= now:
                    w.busy_until = None
                    for row in w.finished:
                        held[row] = now
                        dec[dec_idx[row]].ready.append((now + transfer_ms(row), row, row))
                    w.finished = []
            for w in dec:  # decode passes ending
                if w.busy_until is not None and w.busy_until <= now:
                    w.busy_until = None
                    w.tries += 1  # a pass end attempts one reservation
                    w.gen += len(w.finished)
                    for row in w.finished:
                        terminal[row] = now
                        status[row] = OUTCOME_COMPLETED
                        done += 1
                        nt = next_turn.get(row)
                        if nt is not None:
                            heapq.heappush(arrivals, (now + float(workload.delay_ms[nt]), int(workload.session[nt]),
                                                      int(workload.turn[nt]), nt))
                    w.finished = []
            while arrivals and arrivals[0][0] <= now:
                _, _, _, row = heapq.heappop(arrivals)
                arrival[row] = now
                status[row] = OUTCOME_IN_FLIGHT
                d = rr["d"] % D
                rr["d"] += 1
                dec_idx[row] = d
                dec[d].pend.append(row)
                if dec[d].busy_until is None:  # (a busy worker queues it without an attempt)
                    dec[d].tries += 1
            progress = True
            while progress:
                progress = False
                for w in dec:
                    if w.busy_until is None:
                        reserve(w, now, w.tries)
                        w.tries = 0
                        activate(w, now)
                for w in pre:
                    if w.busy_until is None and w.rank.busy():
                        progress |= run(w, now, False)
                for w in dec:
                    if w.busy_until is None and (w.rank.busy() or w.prebuilt):
                        progress |= run(w, now, True)
    except _Pressure:
        raise _not_yet("a decode worker short of KV (a reservation that waits, a retraction or a recomputed "
                       "prompt)") from None

    cols = {
        "arrival_ms": arrival, "first_admit_ms": padmit, "first_token_ms": first_tok,
        "second_token_ms": second_tok, "last_token_ms": last_tok, "terminal_ms": terminal,
        "status": status, "input_length": np.asarray(isl, np.int64),
        "requested_output_length": np.asarray(osl, np.int64), "output_length": gen,
        "reused_tokens": reused, "ratio_reused_tokens": reused, "first_reused_tokens": reused.copy(),
        "worker_idx": dec_idx, "preemptions": np.zeros(n, np.int64),
        "prefill_worker_idx": pre_idx, "prefill_admit_ms": padmit, "source_held_ms": held,
        "destination_reserved_ms": reserved, "destination_activated_ms": activated,
        "decode_admit_ms": dadmit, "source_released_ms": released,
        "decode_reused_input_tokens": np.where(np.isnan(activated), -1, 0).astype(np.int64),
        "prefill_route_overlap_tokens": np.where(pre_idx >= 0, 0, -1).astype(np.int64),
        "decode_route_overlap_tokens": np.where(dec_idx >= 0, 0, -1).astype(np.int64),
    }
    rrow = np.array([x[0] for x in readmits], np.int64)
    cols.update({"readmit_row": rrow, "readmit_reused": np.array([x[2] for x in readmits], np.int64),
                 "readmit_stage": np.full(rrow.shape[0], 2, np.int64),  # (kernels/codes.py: the decode stage)
                 "readmit_ms": np.array([x[1] for x in readmits], np.float64),
                 "preemptions": np.bincount(rrow, minlength=n).astype(np.int64)})
    cols.update(identity_columns(workload, False))
    cols["decode_routed_first"] = True
    term = terminal[status == OUTCOME_COMPLETED]
    last = float(term.max()) / 1000.0 if term.shape[0] else 0.0
    wall_ms = (time.perf_counter() - t0) * 1000.0
    return build_report(cols, make_gap_stats(gaps), {
        "num_workers": P + D, "single_path": False, "decode_worker_seconds": D * last,
        "prefill_worker_seconds": P * last, "prefill_gpus_per_worker": 1, "decode_gpus_per_worker": 1,
        "wall_time_ms": wall_ms, "sla_ttft_ms": sla[0], "sla_itl_ms": sla[1], "sla_e2e_ms": sla[2],
        "dynamo_version": version, "committed_prefill_tokens": committed[0], "disaggregated": True})


def _holding_rank_class():
    from fastsim import sglang_ref

    class HoldingRank(sglang_ref.Rank):
        """A prefill worker's rank: a finished prefill keeps its KV (the source of the transfer) until
        :meth:`release`."""

        def _finish(self, r):
            pass

        def release(self, r):
            sglang_ref.Rank._finish(self, r)

    return HoldingRank


def _HoldingRank(cfg, prefill_ms, decode_ms):
    global _HoldingRank_cls
    try:
        cls = _HoldingRank_cls
    except NameError:
        cls = _HoldingRank_cls = _holding_rank_class()
    return cls(cfg, prefill_ms, decode_ms)
