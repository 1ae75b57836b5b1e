"""Requests a replay did not complete, counted by reason, so that none is lost without a word.

Dynamo's report keeps such requests in its numbers as it does (a rejected request is not a
completed one); fastsim keeps those numbers and adds, for each reason, how many requests and the
first one's file and line (or index). :func:`account` computes them after a run; the API attaches
them to the report (``Report.lost``) and emits one :class:`LostRequestsWarning` per reason; the
command line prints them and, with ``--strict``, exits non-zero.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple, Optional

import numpy as np

from fastsim.errors import FastsimWarning
from fastsim.kernels.codes import (OUTCOME_COMPLETED, OUTCOME_FAILED, OUTCOME_IN_FLIGHT, OUTCOME_NOT_ARRIVED,
                                   OUTCOME_REJECTED)
from fastsim.trace_checks import row_name

__all__ = ["LostGroup", "LostRequestsWarning", "account", "warn"]



class LostRequestsWarning(FastsimWarning):
    """Some requests of a replay were rejected, failed, or left unfinished by a time cap."""


class LostGroup(NamedTuple):
    """``count`` requests not completed for ``reason``; the first is row ``first_row`` (``where``:
    its file and line, or its index)."""

    reason: str
    count: int
    first_row: int
    where: str

    def message(self) -> str:
        s = "" if self.count == 1 else "s"
        return f"{self.count} request{s} {self.reason} (first: {self.where})"


def _blocks(tokens, block_size):
    return -(-tokens // block_size)


def _rejection_reasons(rows, isl, engines):
    """For each rejected row, the rule that rejected it, checked against each engine in order
    (the prefill pool first in a disaggregated run): ``max_model_len``, then a prompt whose blocks
    exceed ``num_gpu_blocks``."""
    reasons = np.full(rows.shape[0], "", dtype=object)
    for label, eng in engines:
        todo = reasons == ""
        mml = int(eng.max_model_len or 0)
        if mml > 0:
            hit = todo & (isl[rows] >= mml)
            reasons[hit] = (f"rejected: input length reaches max_model_len {mml}"
                            f"{label} (Dynamo rejects them too)")
            todo &= ~hit
        bs, cap = int(eng.block_size), int(eng.num_gpu_blocks)
        if eng.engine_type == "trtllm":  # it reserves the whole sequence: the prompt must leave room
            hit = todo & (isl[rows] >= cap * bs)
            reasons[hit] = (f"rejected: the prompt fills the {cap * bs} tokens of num_gpu_blocks {cap} of "
                            f"block_size {bs}{label}, leaving no room for output (Dynamo's TRT-LLM "
                            "rejects them too)")
            continue
        hit = todo & (_blocks(isl[rows], bs) > cap)
        reasons[hit] = (f"rejected: the prompt needs more KV blocks than num_gpu_blocks {cap} of "
                        f"block_size {bs}{label} can ever hold (Dynamo rejects them too)")
    reasons[reasons == ""] = "rejected by the engine"
    return reasons


def account(report, workload, engines, max_sim_time_ms: Optional[float] = None,
            decode_engine=None) -> list:
    """The lost requests of ``report`` (made from ``workload``) as a list of :class:`LostGroup`.

    ``engines``: ``[(label, EngineArgs), ...]`` whose rules may reject a request (label "" for an
    aggregated run, " (prefill pool)" / " (decode pool)" for a disaggregated one);
    ``decode_engine``: the decode pool's engine args, for failed hand-offs."""
    status = np.asarray(report._req["status"])
    lost = np.flatnonzero(status != OUTCOME_COMPLETED)
    if lost.size == 0:
        return []
    isl = np.asarray(workload.isl)
    groups: dict = {}

    def add(reason, row):
        g = groups.get(reason)
        groups[reason] = [1, row] if g is None else [g[0] + 1, g[1]]

    st = status[lost]
    rejected = lost[st == OUTCOME_REJECTED]
    if rejected.size:
        for row, reason in zip(rejected.tolist(), _rejection_reasons(rejected, isl, engines)):
            add(reason, row)
    failed = lost[st == OUTCOME_FAILED]
    if failed.size:
        if decode_engine is not None:
            bs, cap = int(decode_engine.block_size), int(decode_engine.num_gpu_blocks)
            too_big = _blocks(isl[failed], bs) > cap
            mml = int(decode_engine.max_model_len or 0)
            for hit, reason in (
                    (too_big, f"failed in disaggregated serving: the prompt needs more KV blocks than the "
                              f"decode pool's num_gpu_blocks {cap} (block_size {bs}) can hold"),
                    (~too_big, f"failed in disaggregated serving: the prompt reaches the decode pool's "
                               f"max_model_len {mml} (Dynamo 1.6.1 fails them too)")):
                if hit.any():
                    groups[reason] = [int(hit.sum()), int(failed[hit][0])]
        else:
            groups["failed in disaggregated serving"] = [int(failed.size), int(failed[0])]
        # Dynamo 1.6.1 plays none of a failed turn's later turns (docs/decisions/0470; an
        # agentic graph's are the cancelled requests below)
        session = np.asarray(workload.session)
        ended = np.isin(session, session[failed]) & (status == OUTCOME_NOT_ARRIVED)
        rows = lost[ended[lost]]
        if rows.size and getattr(workload, "graph", None) is None:
            groups["not played: an earlier turn of their session failed (Dynamo 1.6.1 ends the session)"] = \
                [int(rows.size), int(rows[0])]
            lost = lost[~ended[lost]]
            st = status[lost]
    graph = getattr(workload, "graph", None)
    if graph is not None and (rejected.size or failed.size):
        from fastsim.traces.agentic_report import cancelled_rows

        cancelled = cancelled_rows(graph, (status == OUTCOME_REJECTED) | (status == OUTCOME_FAILED),
                                   status != OUTCOME_NOT_ARRIVED)
        rows = lost[cancelled[lost]]
        if rows.size:
            groups["cancelled: a request of their play was rejected first (Dynamo cancels them too)"] = \
                [int(rows.size), int(rows[0])]
            lost = lost[~cancelled[lost]]
            st = status[lost]
    cap = "the --max-sim-time-seconds cap" if max_sim_time_ms is not None else "the end of the run"
    cap_ms = f" ({max_sim_time_ms:g} ms)" if max_sim_time_ms is not None else ""
    for code, reason in ((OUTCOME_NOT_ARRIVED, f"never arrived before {cap}{cap_ms}"),
                         (OUTCOME_IN_FLIGHT, f"unfinished (in flight) at {cap}{cap_ms}")):
        rows = lost[st == code]
        if rows.size:
            groups[reason] = [int(rows.size), int(rows[0])]
    out = [LostGroup(reason, count, first, row_name(workload, first))
           for reason, (count, first) in groups.items()]
    out.sort(key=lambda g: g.first_row)
    return out


def warn(groups) -> None:
    """One :class:`LostRequestsWarning` per reason."""
    for g in groups:
        warnings.warn(g.message(), LostRequestsWarning, stacklevel=3)
