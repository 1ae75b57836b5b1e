"""Why a replay reached a dead end: the stuck requests, their workers, and the limit that blocks them.

Dynamo reports only how many requests remain (``offline replay reached a dead end with N in-flight
requests remaining``; disaggregated: ``offline disagg replay reached ...``; 1.6.1: ``replay
invariant violated: offline replay detected an effect-free zero-duration pass with N in-flight
requests remaining``); fastsim keeps the release's sentence and adds the first stuck requests by
file and line (or index), the worker each waits on, and the engine limit it can never get past:
the KV pool (its prompt plus output needs more blocks than ``num_gpu_blocks``), the token budget
(a prompt longer than ``max_num_batched_tokens`` with chunked prefill off), or, for the requests
queued behind those, the seats and blocks the stuck ones hold.
"""

from __future__ import annotations

import numpy as np

from fastsim.errors import DeadEndError
from fastsim.trace_checks import row_name

__all__ = ["dead_end_error", "blocking_limit"]

_SHOWN = 3


def blocking_limit(isl: int, osl: int, engine, label: str = "") -> str:
    """The engine limit a request of ``isl`` prompt and ``osl`` output tokens can never get past,
    or "" if there is none."""
    bs, cap = int(engine.block_size), int(engine.num_gpu_blocks)
    need = -(-(isl + osl) // bs)
    if need > cap:
        return (f"the KV pool{label}: it needs {need} blocks of {bs} tokens to finish, "
                f"num_gpu_blocks is {cap}")
    budget = engine.max_num_batched_tokens
    if not engine.enable_chunked_prefill and budget is not None and isl > budget:
        return (f"the token budget{label}: its prompt of {isl} tokens exceeds max_num_batched_tokens "
                f"{budget} with enable_chunked_prefill off")
    return ""


def dead_end_error(remaining: int, workload, engines, in_flight=None, rank=None, dp: int = 1,
                   dynamo_version: str = "1.6.1", disagg: bool = False) -> DeadEndError:
    """The :class:`DeadEndError` of a run that stopped with ``remaining`` requests in flight.

    ``engines``: ``[(label, EngineArgs), ...]`` (label "" for an aggregated run); ``in_flight``:
    the rows still in flight (a bool mask or indices) when the caller has the state, with
    ``rank`` (each row's rank) to name workers; otherwise every row that can never finish is
    named from the workload alone."""
    head = f"offline replay reached a dead end with {remaining} in-flight requests remaining"
    if disagg and dynamo_version == "1.4.2":  # Dynamo 1.4.2's disaggregated runtime names itself
        head = f"offline disagg replay reached a dead end with {remaining} in-flight requests remaining"
    if dynamo_version != "1.4.2":  # Dynamo 1.6.1's words first (observed on the release)
        head = ("replay invariant violated: offline replay detected an effect-free zero-duration "
                f"pass with {remaining} in-flight requests remaining; fastsim: {head}")
    isl, osl = np.asarray(workload.isl), np.asarray(workload.osl)
    if in_flight is None:
        rows = np.arange(isl.shape[0])
    else:
        rows = np.flatnonzero(in_flight) if np.asarray(in_flight).dtype == np.bool_ else np.asarray(in_flight)
    stuck = []
    for r in rows.tolist():
        for label, eng in engines:
            why = blocking_limit(int(isl[r]), int(osl[r]), eng, label)
            if why:
                stuck.append((r, why))
                break
        if len(stuck) > _SHOWN and in_flight is None:
            break
    def worker(r):
        if rank is None or int(rank[r]) < 0:
            return ""
        return f" on worker {int(rank[r]) // max(dp, 1)}"

    if not stuck:
        shown = rows[:_SHOWN].tolist()
        if not shown:
            return DeadEndError(head)
        names = "; ".join(f"{row_name(workload, r)}{worker(r)}" for r in shown)
        return DeadEndError(
            f"{head}: stuck: {names}{' and more' if rows.shape[0] > _SHOWN else ''} (no engine limit "
            "rules them out alone: the seats (max_num_seqs) and KV blocks of the requests ahead of "
            "them never free)")
    parts = [f"{row_name(workload, r)}{worker(r)} is blocked by {why}" for r, why in stuck[:_SHOWN]]
    more = len(stuck) - _SHOWN if in_flight is not None else 0
    tail = f"; {more} more like them" if more > 0 else ""
    behind = (rows.shape[0] - len(stuck)) if in_flight is not None else 0
    if behind > 0:
        tail += (f"; {behind} more request{'s' if behind > 1 else ''} wait{'' if behind > 1 else 's'} "
                 "behind for the seats and blocks these hold")
    return DeadEndError(f"{head}: {'; '.join(parts)}{tail}")
