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

A turn's context holds what the earlier turns really generated: none for a turn rejected on
arrival (``max_model_len``, or a prompt larger than the KV pool), ``max_model_len - isl`` tokens
for a cut one. :func:`prepare_streams` settles those lengths from the trace before the run
(docs/decisions/0460) and checks the options a delta replay runs with.
"""

from __future__ import annotations

import dataclasses

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
        priority=base.priority, strict_priority=base.strict_priority,
    )


def stream_deltas(workload: Workload) -> np.ndarray:
    """Each row's own input delta (the trace's ``input_length``), read back from the cumulative
    prompt lengths :func:`accumulate_deltas` wrote, which assume every output is generated whole."""
    delta = workload.isl.copy()
    ptr, rows = workload.session_ptr, workload.session_rows
    for s in range(workload.n_sessions):
        turns = rows[ptr[s]:ptr[s + 1]]
        if turns.shape[0] > 1:
            delta[turns[1:]] = workload.isl[turns[1:]] - workload.isl[turns[:-1]] - workload.osl[turns[:-1]]
    return delta


def _rejects(engine, isl):
    """Whether Dynamo's vLLM engine rejects a fresh prompt of ``isl`` tokens (a number or an
    array) on arrival: at or over ``max_model_len``, or needing more KV blocks than the pool holds
    (kernels/scheduler.py)."""
    mml = int(engine.max_model_len or 0)
    too_long = isl >= mml if mml > 0 else False
    return too_long | (-(-isl // int(engine.block_size)) > int(engine.num_gpu_blocks))


def _may_change(workload, admit_engines, limit):
    """Whether some turn could be rejected or cut (a quick test on the lengths before any is
    changed: a change only ever makes later prompts shorter, never longer)."""
    if workload.n_requests == 0:
        return False
    longest = int(workload.isl.max())
    if limit > 0 and int((workload.isl + workload.osl).max()) > limit:
        return True
    return any(_rejects(e, longest) for e in admit_engines)


def settle_stream_lengths(workload: Workload, admit_engines, output_engine) -> Workload:
    """The prompt lengths Dynamo plays once a turn's output may be cut or refused (docs/decisions/0460).

    A session's context holds what its turns really generated: a turn rejected on arrival
    (``admit_engines``: each pool that may reject it, in order) adds its prompt but no output, and a
    turn that reaches ``max_model_len`` of ``output_engine`` (the engine that generates) adds the
    ``max_model_len - isl`` tokens it generated. Both depend on the prompt alone, so the lengths
    follow from the trace before the run. Returns ``workload`` itself when nothing changes."""
    limit = int(output_engine.max_model_len or 0)
    if not _may_change(workload, admit_engines, limit):
        return workload
    delta = stream_deltas(workload)
    isl = np.empty_like(workload.isl)
    ptr, rows = workload.session_ptr, workload.session_rows
    for s in range(workload.n_sessions):
        history = 0  # the tokens of the session's context so far
        for r in rows[ptr[s]:ptr[s + 1]]:
            isl[r] = history + int(delta[r])
            out = int(workload.osl[r])
            if any(_rejects(e, isl[r]) for e in admit_engines):
                out = 0
            elif limit > 0:
                # (a prompt at or over the limit fails at the decode pool and ends its session:
                # its later turns never arrive, docs/decisions/0470)
                out = max(0, min(out, limit - int(isl[r])))
            history = int(isl[r]) + out
    if np.array_equal(isl, workload.isl):
        return workload
    return dataclasses.replace(workload, isl=isl)


def prepare_streams(workload: Workload, opts: dict, dynamo_version: str) -> Workload:
    """Check the options a ``mooncake-delta`` replay runs with and return its workload with the
    prompt lengths Dynamo plays (:func:`settle_stream_lengths`). Dynamo 1.4.2 refuses disaggregated
    replay of these traces (its words below); 1.6.1 runs it, the prefill pool caching each turn's
    prompt and the decode pool generating its output (docs/decisions/0460). Rejections and cut
    outputs are modelled for the vLLM engine; on the others fastsim refuses them as not yet."""
    from fastsim.errors import NotSupportedError
    from fastsim.trtllm_config import output_limit

    disagg = opts["disagg"]
    if disagg is not None:
        if dynamo_version == "1.4.2":
            raise InputError("mooncake-delta trace format is not supported for disaggregated replay "
                             "(Dynamo 1.4.2 refuses it; 1.6.1 runs it)")
        prefill, decode = disagg["prefill"], disagg["decode"]
        admit, output = [prefill], decode
    else:
        admit, output = [opts["engine"]], opts["engine"]
    others = sorted({e.engine_type for e in admit + [output]} - {"vllm"})
    if others and _may_change(workload, admit, output_limit(output)):
        raise NotSupportedError(
            f"trace_format 'mooncake-delta' with engine_type={others[0]} and turns that max_model_len or the "
            "KV capacity rejects or cuts (the next turn's prompt then depends on them) is not supported yet "
            "by fastsim (only engine_type=vllm)")
    settled = settle_stream_lengths(workload, admit, output)
    if disagg is not None and decode.engine_type != "vllm":
        _refuse_decode_failures(settled, prefill, decode)
    return settled


def _refuse_decode_failures(workload, prefill, decode):
    """Dynamo 1.6.1 fails a turn whose prompt the decode pool refuses (at or over its
    ``max_model_len``, or more blocks than it holds) after the prefill pool took it, and plays
    none of its session's later turns; fastsim does so with vLLM decode pools
    (docs/decisions/0470) and refuses such turns on the others here."""
    from fastsim.errors import NotSupportedError

    failed = np.flatnonzero(_rejects(decode, workload.isl) & ~_rejects(prefill, workload.isl))
    if failed.size:
        r = int(failed[0])
        raise NotSupportedError(
            f"{workload.source}:{int(workload.line[r])}: a turn of {int(workload.isl[r])} prompt tokens that the "
            "prefill pool takes but the decode pool refuses (its max_model_len or num_gpu_blocks) is not supported "
            "yet by fastsim with trace_format 'mooncake-delta' (Dynamo 1.6.1 fails it and ends its session)")
