"""Dynamo's ``mooncake-delta`` trace format: each turn of a session carries only what is new.

The file is read as Mooncake JSONL (same fields, same checks: ``fastsim.workload.load_mooncake``).
Dynamo then plays each session as one growing token stream: turn ``k``'s prompt is everything the
session has seen, the earlier turns' input deltas and their generated outputs, followed by its own
delta (``WorkloadDriver`` in ``PromptMode::DeltaCumulative``; the same in Dynamo 1.4.2 and 1.6.1).
So turn ``k``'s input length is ``sum(delta_i + output_i for i < k) + delta_k``.

Prefix caching sees that stream. Only the first turn's prompt is made of trace hash ids (shareable
between sessions); every block after it contains generated tokens, which Dynamo draws at random
per request, so it can only ever match a later turn of the same session. The workload therefore
keeps, per row, the first turn's hash ids with ``key_isl`` (the tokens they cover) and the row of
the session's first turn as ``stream_row``: the simulator gives the blocks past the first prompt
a key of that stream and block index, which every turn of the session shares.
"""

from __future__ import annotations

import numpy as np

from fastsim.errors import InputError
from fastsim.workload import Workload, load_mooncake

__all__ = ["load_mooncake_delta"]


def load_mooncake_delta(path, trace_block_size=512, arrival_speedup_ratio=1.0, concurrency_mode=False,
                        dynamo_version="1.6.1") -> Workload:
    """Read a ``mooncake-delta`` trace; rows and errors as :func:`fastsim.workload.load_mooncake`."""
    base = load_mooncake(path, trace_block_size=trace_block_size, arrival_speedup_ratio=arrival_speedup_ratio,
                         concurrency_mode=concurrency_mode, dynamo_version=dynamo_version)
    return accumulate_deltas(base)


def accumulate_deltas(base: Workload) -> Workload:
    """The cumulative-prompt workload of a Mooncake workload whose turns are input deltas."""
    n = base.n_requests
    isl = np.empty(n, dtype=np.int64)
    key_isl = np.empty(n, dtype=np.int64)
    stream_row = np.empty(n, dtype=np.int64)
    first_ids_of_row = np.empty(n, dtype=np.int64)
    ptr, rows = base.session_ptr, base.session_rows
    for s in range(base.n_sessions):
        turns = rows[ptr[s]:ptr[s + 1]]
        first = int(turns[0])
        history = 0
        for k, r in enumerate(turns):
            r = int(r)
            if k > 0 and base.osl[int(turns[k - 1])] == 0:
                # a turn with no output adds no random tokens: the stream's later blocks could then
                # be shared with another session's, which these keys cannot express
                raise InputError(
                    f"{base.source}:{int(base.line[int(turns[k - 1])])}: output_length 0 on a turn that "
                    "is followed by another turn of its session is not supported yet by fastsim for "
                    "trace_format 'mooncake-delta'")
            isl[r] = history + int(base.isl[r])
            history = isl[r] + int(base.osl[r])
            key_isl[r] = base.isl[first]
            stream_row[r] = first
            first_ids_of_row[r] = first
    hash_ptr = hash_ids = None
    if base.hash_ptr is not None:
        counts = base.hash_ptr[first_ids_of_row + 1] - base.hash_ptr[first_ids_of_row]
        hash_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=hash_ptr[1:])
        take = np.repeat(base.hash_ptr[first_ids_of_row] - hash_ptr[:-1], counts) + np.arange(hash_ptr[-1])
        hash_ids = base.hash_ids[take]
    return Workload(
        isl=isl, osl=base.osl, session=base.session, turn=base.turn, delay_ms=base.delay_ms,
        session_arrival_ms=base.session_arrival_ms, session_ptr=base.session_ptr,
        session_rows=base.session_rows, hash_ptr=hash_ptr, hash_ids=hash_ids,
        trace_block_size=base.trace_block_size, line=base.line, source=base.source,
        session_ids=base.session_ids, key_isl=key_isl, stream_row=stream_row,
    )


def check_stream_options(trace_format, disagg, router_mode, engine):
    """Refuse (NotSupportedError, naming the option) what fastsim does not model for growing
    session streams yet: a disaggregated copy would have to carry their generated blocks, and a
    model-length cap makes a turn's output, hence the next turn's prompt, depend on the run
    (docs/decisions/0301). Closed loops run in both releases (docs/decisions/0240)."""
    from fastsim.errors import NotSupportedError

    what = None
    if disagg:
        what = "disaggregated replay"
    elif getattr(engine, "max_model_len", None) is not None:
        what = "max_model_len (a cut output would shorten the next turn's prompt)"
    if what is not None:
        raise NotSupportedError(f"trace_format '{trace_format}' with {what} is not supported yet by fastsim")
