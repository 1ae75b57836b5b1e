"""Dynamo 1.6.1's per-request routing and admission histories, as JSONL text.

1.6.1 adds to each per-request record (settled by experiment on Dynamo 1.6.1, see
``docs/decisions/0105-per-request-histories-161.md``):

* ``routing_history``: one entry per pool the request was routed in (``agg``; ``prefill`` then
  ``decode`` when disaggregated): outcome ``immediate`` or ``queued`` (the kv_router's queue, with
  the arrival as ``queue_entered_at_ms``, the dispatch as ``released_at_ms`` and their difference),
  the worker (``logical_worker_id``), its DP rank and the global rank (``scheduler_id``
  = worker * dp_size + rank), and the kv_router's overlap figures: the chosen target's overlap in
  blocks, the best any target offered and the difference (null under round robin), with
  ``reported_overlap_tokens`` = chosen overlap * block size (0 under round robin);
* ``admission_history``: every admission into a worker's running set in time order, numbered
  over the request and within its pool, with its time and the prompt tokens it found cached, and
  whether it followed a preemption;
* ``admission_count``, ``readmission_count`` and ``pressure_record_ordinals`` (always empty here:
  1.6.1 fills it only with memory-pressure telemetry records, which fastsim does not produce).

1.6.1 also names the session and turn of each request (null in 1.4.2) when it replays sessions: a
trace in closed loop or with a session of several turns (the trace's ``session_id``, else
``request_<line>``), a synthetic workload of several turns per session (``session_<k>``); and it
numbers the requests of a synthetic workload of single turns from 1 (their ``uuid``).

The inputs are per-request columns of the report's request table (``Report._req``): the rank
(``worker_idx``), first admission time and reuse, the readmission log of the loop
(``readmit_row``, ``readmit_reused``, ``readmit_stage``, ``readmit_ms``: ``kernels/admission.py``)
and the kv_router's figures (``route_*``: ``kernels/router.py``).
"""

from __future__ import annotations

import json

import numpy as np

# scheduler stages (kernels/codes.py): the pool of a readmission
_STAGE_POOL = {0: "agg", 1: "prefill", 2: "decode"}

_ROUTE = ('{"pool":"%s","outcome":"%s","queue_entered_at_ms":%s,"released_at_ms":%s,'
          '"queue_wait_ms":%s,"logical_worker_id":%d,"scheduler_id":%d,"dp_rank":%d,'
          '"reported_overlap_tokens":%d,"selected_overlap_blocks":%s,'
          '"best_available_overlap_blocks":%s,"overlap_regret_blocks":%s,'
          '"placement_replica_id":null}')
_ADMIT = ('{"admission_ordinal":%d,"pool_admission_ordinal":%d,"pool":"%s","at_ms":%s,'
          '"reused_input_tokens":%d,"is_readmission":%s}')
# a first admission with a host KV tier: its reuse split by tier (GPU pool, host tier)
_ADMIT_TIER = ('{"admission_ordinal":%d,"pool_admission_ordinal":%d,"pool":"%s","at_ms":%s,'
               '"reused_input_tokens":%d,"g1_reused_input_tokens":%d,"host_reused_input_tokens":%d,'
               '"is_readmission":%s}')

NAMES = ("session_id", "turn_index", "routing_history", "admission_history", "admission_count", "readmission_count",
         "pressure_record_ordinals")


def _num(x):
    """A float as Dynamo's serde_json writes it (null for NaN)."""
    from fastsim.report import _fmt_float

    x = float(x)
    if x != x:
        return "null"
    return _fmt_float(x)


def identity_columns(workload, closed_loop):
    """The request-table inputs of 1.6.1's request identities for ``workload``: its session names
    (none: written null), and ``uuid_base`` 1 for a synthetic workload of single turns (1.6.1
    numbers those requests from 1 in arrival order; its other uuids are random)."""
    multi = bool(workload.turn.any())
    if workload.source == "synthetic" and not multi:
        return {"uuid_base": 1}
    if not (multi or closed_loop):
        return {}
    first_rows = workload.session_rows[workload.session_ptr[:-1]]
    if workload.source == "synthetic":
        names = None
    elif workload.session_ids:
        names = [workload.session_ids.get(si, f"request_{ln}")
                 for si, ln in enumerate(workload.line[first_rows].tolist())]
    else:
        names = workload.line[first_rows]  # request_<line of the first turn>
    return {"session_index": workload.session, "turn_index": workload.turn, "session_names": names}


def _col(req, name, dtype, fill, n):
    v = req.get(name)
    if v is None:
        return np.full(n, fill, dtype=dtype)
    return np.asarray(v, dtype=dtype)


class History:
    """The history texts of a report's requests (``texts(rows)``)."""

    def __init__(self, req, dp=1, disaggregated=False):
        n = int(np.asarray(req["status"]).shape[0])
        self.dp = max(int(dp), 1)
        self.disagg = bool(disaggregated)
        self.rank = _col(req, "worker_idx", np.int64, -1, n)
        self.arrival = _col(req, "arrival_ms", np.float64, np.nan, n)
        self.first_admit = _col(req, "first_admit_ms", np.float64, np.nan, n)
        self.first_reused = _col(req, "first_reused_tokens", np.int64, 0, n)
        self.tier = "first_admission_g1_reused_input_tokens" in req
        if self.tier:
            self.first_g1 = _col(req, "first_admission_g1_reused_input_tokens", np.int64, 0, n)
            self.first_host = _col(req, "first_admission_host_reused_input_tokens", np.int64, 0, n)
        self.kv = "route_best_blocks" in req
        self.selected = _col(req, "route_selected_blocks", np.int64, -1, n)
        self.best = _col(req, "route_best_blocks", np.int64, -1, n)
        self.released = _col(req, "route_released_ms", np.float64, np.nan, n)
        self.reported = _col(req, "route_reported_tokens", np.int64, 0, n)
        if self.disagg:
            self.pre_rank = _col(req, "prefill_worker_idx", np.int64, -1, n)
            self.first_admit = _col(req, "prefill_admit_ms", np.float64, np.nan, n)
            self.decode_admit = _col(req, "decode_admit_ms", np.float64, np.nan, n)
            self.reported = np.maximum(_col(req, "prefill_route_overlap_tokens", np.int64, 0, n), 0)
            self.decode_reported = np.maximum(_col(req, "decode_route_overlap_tokens", np.int64, 0, n), 0)
            # the SGLang engine routes a request to its decode worker first (decision 0370)
            self.decode_first = bool(req.get("decode_routed_first", False))
            self.pool_dp = req.get("pool_dp") or {}  # (the SGLang engine's DP ranks a worker, per pool)
            # the decode rank a request was routed to (the SGLang engine routes one that then fails)
            self.decode_route = _col(req, "decode_route_idx", np.int64, -1, n) if "decode_route_idx" in req \
                else self.rank
        self.session = req.get("session_index")
        self.turn = req.get("turn_index")
        self.names = req.get("session_names")
        if "readmit_row" in req:
            rows = np.asarray(req["readmit_row"], dtype=np.int64)
            order = np.argsort(rows, kind="stable")  # by row, in time order within a row
            self.r_ptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(np.bincount(rows, minlength=n), out=self.r_ptr[1:])
            self.r_reused = np.asarray(req["readmit_reused"], dtype=np.int64)[order]
            self.r_stage = np.asarray(req["readmit_stage"], dtype=np.int64)[order]
            self.r_ms = np.asarray(req["readmit_ms"], dtype=np.float64)[order]
        else:
            preempted = np.asarray(req.get("preemptions", np.zeros(n)), dtype=np.int64)
            if preempted.any():
                raise ValueError("the request table has preemptions but no readmission log: its "
                                 "1.6.1 admission histories cannot be written")
            self.r_ptr = np.zeros(n + 1, dtype=np.int64)
            self.r_reused = self.r_stage = np.zeros(0, dtype=np.int64)
            self.r_ms = np.zeros(0)

    def _route(self, pool, rank, r, overlap):
        """One routing entry; ``overlap``: (reported tokens, selected, best) texts or None."""
        if self.kv and overlap is not None:
            rep, sel, best = overlap
            figures = (rep, str(sel), str(best), str(best - sel))
        else:
            figures = (0, "null", "null", "null")
        rel = self.released[r] if pool != "decode" and r >= 0 else np.nan
        if rel == rel:  # waited in the router queue
            arr = self.arrival[r]
            q = ("queued", _num(arr), _num(rel), _num(rel - arr))
        else:
            q = ("immediate", "null", "null", "0.0")
        dp = self.dp if pool == "agg" else self.pool_dp.get(pool, 1) if self.disagg else 1
        return _ROUTE % ((pool,) + q + (rank // dp, rank, rank % dp) + figures)

    def _routes(self, r):
        if self.disagg:
            out = []
            if self.pre_rank[r] >= 0:
                out.append(self._route("prefill", int(self.pre_rank[r]), r,
                                       (int(self.reported[r]), int(self.selected[r]), int(self.best[r]))))
            if self.decode_route[r] >= 0:
                out.append(self._route("decode", int(self.decode_route[r]), r,
                                       (int(self.decode_reported[r]), 0, 0)))
            return out[::-1] if self.decode_first else out
        if self.rank[r] < 0:
            return []
        return [self._route("agg", int(self.rank[r]), r,
                            (int(self.reported[r]), int(self.selected[r]), int(self.best[r])))]

    def _admissions(self, r):
        """(pool, time, reused, readmission) of each admission of row ``r``, in time order."""
        lo, hi = int(self.r_ptr[r]), int(self.r_ptr[r + 1])
        again = [(_STAGE_POOL[int(self.r_stage[i])], self.r_ms[i], int(self.r_reused[i]), True)
                 for i in range(lo, hi)]
        first = self.first_admit[r]
        if not self.disagg:
            return ([("agg", first, int(self.first_reused[r]), False)] if first == first else []) + again
        out = []
        if first == first:
            out.append(("prefill", first, int(self.first_reused[r]), False))
        out += [a for a in again if a[0] == "prefill"]
        if self.decode_admit[r] == self.decode_admit[r]:
            # a handed-off prompt's admission reuses nothing (its blocks came by transfer); only
            # a readmission after a preemption on the decode worker does
            out.append(("decode", self.decode_admit[r], 0, False))
        out += [a for a in again if a[0] == "decode"]
        return out

    def _session_name(self, r):
        s = int(self.session[r])
        if self.names is None:
            return f'"session_{s}"'
        name = self.names[s]
        if isinstance(name, str):
            return json.dumps(name, ensure_ascii=False)
        return f'"request_{int(name)}"'

    def _slow(self, r):
        """(routing, admissions, admission count, readmission count) texts of row ``r``."""
        adm = self._admissions(r)
        per_pool = {}
        items = []
        for i, (pool, t, reused, again) in enumerate(adm):
            j = per_pool.get(pool, 0)
            per_pool[pool] = j + 1
            if self.tier and not again:
                items.append(_ADMIT_TIER % (i, j, pool, _num(t), reused, self.first_g1[r], self.first_host[r],
                                            "false"))
            else:
                items.append(_ADMIT % (i, j, pool, _num(t), reused, "true" if again else "false"))
        return ("[" + ",".join(self._routes(r)) + "]", "[" + ",".join(items) + "]", str(len(adm)),
                str(sum(1 for a in adm if a[3])))

    def texts(self, rows):
        """{field name: JSON text of that field for each row of ``rows`` (a list), or one text
        for all of them (a str)}.

        Aggregated rows admitted once and routed at once (nearly all) are formatted column-wise;
        the others one by one."""
        from fastsim.report import _float_tokens

        rows = np.asarray(rows, dtype=np.int64)
        m = rows.shape[0]
        out = {"pressure_record_ordinals": "[]"}
        if self.session is None:
            out["session_id"] = out["turn_index"] = "null"
        else:
            out["session_id"] = [self._session_name(r) for r in rows.tolist()]
            out["turn_index"] = list(map(str, self.turn[rows].tolist()))
        first = self.first_admit[rows]
        if self.disagg:
            fast = np.zeros(m, dtype=bool)
        else:
            fast = ((self.r_ptr[rows + 1] == self.r_ptr[rows]) & ~np.isnan(first)
                    & np.isnan(self.released[rows]) & (self.rank[rows] >= 0))
        route, adm = [None] * m, [None] * m
        count, again = ["1"] * m, ["0"] * m
        idx = np.flatnonzero(fast)
        if idx.shape[0]:
            fr = rows[idx]
            ranks = self.rank[fr].tolist()
            if self.kv:
                sel, best = self.selected[fr].tolist(), self.best[fr].tolist()
                rep = self.reported[fr].tolist()
                texts = [self._route("agg", k, -1, (t, a, b)) for k, t, a, b in zip(ranks, rep, sel, best)]
            else:
                memo = {}
                texts = [memo.get(k) or memo.setdefault(k, self._route("agg", k, -1, None)) for k in ranks]
            at = _float_tokens(first[idx])
            reused = self.first_reused[fr].tolist()
            if self.tier:
                g1, host = self.first_g1[fr].tolist(), self.first_host[fr].tolist()
            for j, i in enumerate(idx.tolist()):
                route[i] = "[" + texts[j] + "]"
                if self.tier:
                    adm[i] = "[" + _ADMIT_TIER % (0, 0, "agg", at[j], reused[j], g1[j], host[j], "false") + "]"
                else:
                    adm[i] = "[" + _ADMIT % (0, 0, "agg", at[j], reused[j], "false") + "]"
        for i in np.flatnonzero(~fast).tolist():
            route[i], adm[i], count[i], again[i] = self._slow(int(rows[i]))
        out.update(routing_history=route, admission_history=adm, admission_count=count,
                   readmission_count=again)
        return out
