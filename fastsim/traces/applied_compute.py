"""Dynamo's ``applied_compute_agentic`` trace format: one tool-calling session a line.

Each JSONL line is a session: ``num_turns``, ``input_prompt_length`` (> 0),
``assistant_response_length``, ``tool_call_output_length`` and ``tool_call_latency`` (lists of
``num_turns`` entries; latencies in seconds, finite and >= 0) and ``final_assistant_response_length``.
It plays ``num_turns + 1`` turns, each after the previous one ends plus the tool's latency: turn
``k`` answers with ``assistant_response_length[k]`` tokens (the last with the final length), and
the next prompt is the previous one plus that answer plus the tool's output. So the context grows
turn by turn, and each prompt repeats its predecessor's hash ids, extended by new ones to cover
the added tokens (Dynamo 1.6.1's ``Trace::from_applied_compute_agentic``).

With ``trace_shared_prefix_ratio`` r and ``trace_num_prefix_groups`` G > 0, line ``i`` belongs to
group ``i % G`` and the first ``round(ceil(input_prompt_length / B) * r)`` blocks of its prompt are
the group's. The traces carry no timestamps: Dynamo replays them in closed loop only
(``replay_concurrency``). Hash ids are numbered by first appearance, as Dynamo interns them.
"""

from __future__ import annotations

import math
import os

import numpy as np

from fastsim.errors import InputError

__all__ = ["load_applied_compute_agentic"]

_GROUP_TAG = 0xA63E << 48
_LISTS = ("assistant_response_length", "tool_call_output_length", "tool_call_latency")


def _count(row, name, where, lo=0):
    v = row.get(name)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or v >= 1 << 62:
        raise InputError(f"{where}: field '{name}' must be an integer >= {lo}, got {v!r}")
    return v


def load_applied_compute_agentic(path, trace_block_size=512, arrival_speedup_ratio=1.0,
                                 shared_prefix_ratio=0.0, num_prefix_groups=0):
    """Read an applied-compute agentic trace into a Workload of closed-loop sessions."""
    from fastsim.workload import Workload, _check_ratio, _check_tbs, _open_text, trace_json

    path = os.fspath(path)
    tbs = _check_tbs(trace_block_size)
    ratio = _check_ratio(arrival_speedup_ratio)
    if (isinstance(shared_prefix_ratio, bool) or not isinstance(shared_prefix_ratio, (int, float))
            or not 0.0 <= shared_prefix_ratio <= 1.0):
        raise InputError(f"shared_prefix_ratio must be between 0.0 and 1.0, got {shared_prefix_ratio!r}")
    if isinstance(num_prefix_groups, bool) or not isinstance(num_prefix_groups, int) or num_prefix_groups < 0:
        raise InputError(f"num_prefix_groups must be an integer >= 0, got {num_prefix_groups!r}")
    isl, osl, delay, session, turn, line, hash_rows = [], [], [], [], [], [], []
    names = {}
    canon = {}
    next_unique = 1
    for ln, text in enumerate(_open_text(path).splitlines(), 1):
        if not text.strip():
            continue
        where = f"{path}:{ln}"
        row = trace_json(text, where)
        if not isinstance(row, dict):
            raise InputError(f"{where}: a session must be a JSON object")
        n_turns = _count(row, "num_turns", where)
        lists = {}
        for name in _LISTS:
            v = row.get(name)
            if not isinstance(v, list):
                raise InputError(f"{where}: field '{name}' must be a list of {n_turns} values")
            if len(v) != n_turns:
                raise InputError(f"{where}: field {name} length {len(v)} does not match num_turns {n_turns}")
            lists[name] = v
        for k, v in enumerate(lists["assistant_response_length"]):
            _count({"x": v}, "x", f"{where} (assistant_response_length[{k}])")
        for k, v in enumerate(lists["tool_call_output_length"]):
            _count({"x": v}, "x", f"{where} (tool_call_output_length[{k}])")
        cur = _count(row, "input_prompt_length", where, lo=1)
        final = _count(row, "final_assistant_response_length", where)
        s = len(names)
        names[s] = f"applied_compute_agentic_session_{ln}"
        group = (ln - 1) % num_prefix_groups if shared_prefix_ratio > 0.0 and num_prefix_groups > 0 else None
        shared = int(math.floor(-(-cur // tbs) * shared_prefix_ratio + 0.5))  # Rust's round (half away)
        ids = []

        def extend(length):
            nonlocal next_unique
            while len(ids) < -(-length // tbs):
                j = len(ids)
                if j < shared and group is not None:
                    ids.append(_GROUP_TAG | (group << 32) | j)
                else:
                    ids.append(next_unique)
                    next_unique += 1

        extend(cur)
        wait = 0.0
        for k in range(n_turns + 1):
            isl.append(cur)
            osl.append(lists["assistant_response_length"][k] if k < n_turns else final)
            delay.append(wait / ratio)
            session.append(s)
            turn.append(k)
            line.append(ln)
            hash_rows.append([canon.setdefault(h, len(canon)) for h in ids])
            if k == n_turns:
                break
            lat = lists["tool_call_latency"][k]
            if isinstance(lat, bool) or not isinstance(lat, (int, float)) or not math.isfinite(lat) or lat < 0:
                raise InputError(f"{where}: tool_call_latency[{k}] must be a finite non-negative number, got {lat!r}")
            cur = cur + lists["assistant_response_length"][k] + lists["tool_call_output_length"][k]
            extend(cur)
            wait = float(lat) * 1000.0
    if not isl:
        raise InputError(f"trace file {path} did not contain any requests")
    n = len(isl)
    counts = np.array([len(h) for h in hash_rows], dtype=np.int64)
    hash_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=hash_ptr[1:])
    n_sessions = len(names)
    session_a = np.array(session, dtype=np.int64)
    session_ptr = np.zeros(n_sessions + 1, dtype=np.int64)
    np.cumsum(np.bincount(session_a, minlength=n_sessions), out=session_ptr[1:])
    return Workload(
        isl=np.array(isl, dtype=np.int64), osl=np.array(osl, dtype=np.int64), session=session_a,
        turn=np.array(turn, dtype=np.int64), delay_ms=np.array(delay, dtype=np.float64),
        session_arrival_ms=np.full(n_sessions, np.nan), session_ptr=session_ptr,
        session_rows=np.arange(n, dtype=np.int64), hash_ptr=hash_ptr,
        hash_ids=np.array([h for r in hash_rows for h in r], dtype=np.int64), trace_block_size=tbs,
        line=np.array(line, dtype=np.int64), source=path, session_ids=names,
    )
