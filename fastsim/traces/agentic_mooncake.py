"""Dynamo's ``agentic_mooncake`` trace format (also spelled ``agentic-mooncake``), version 2.

A JSONL file: a header line ``{"schema": "dynamo.agentic_mooncake", "version": 2, "block_size":
B, "hash_id_scope": "local", "source": {"format": ..., "digest": ...}}`` then one request a line:
``request_id``, ``play_id``, ``session_id``, ``model`` (non-empty strings), ``input_length`` (> 0,
needing exactly ceil(input_length / B) ``hash_ids``), ``output_length``, ``not_before_ms``
(finite, >= 0), ``dependencies`` (list of ``{"request_id", "trigger": "completion"|"dispatch",
"delay_ms", "relation": "sequence"|"spawn"|"join"|"replay_barrier"}``; only ``spawn`` may use the
``dispatch`` trigger). The header's ``block_size`` is the trace block size. Timing rules:
``fastsim.traces.graph``. Errors name the file, the line and the field. A file the columnar reader
(``fastsim/traces/agentic_columns.py``) takes is read by it, any other line by line here.
"""

from __future__ import annotations

import math

from fastsim.errors import InputError
from fastsim.workload import check_policy_class, row_priority
from fastsim.traces.graph import (COMPLETION, DISPATCH, Dependency, Node, build_graph_columns, columns_of_nodes,
                                  graph_workload)

__all__ = ["load_agentic_mooncake"]

SCHEMA = "dynamo.agentic_mooncake"
_TRIGGERS = {"completion": COMPLETION, "dispatch": DISPATCH}
_RELATIONS = ("sequence", "spawn", "join", "replay_barrier")
_FIELDS = {"request_id", "play_id", "source_play_ordinal", "session_id", "model", "input_length", "output_length",
           "output_token_ids", "hash_ids", "not_before_ms", "recorded_api_time_ms", "priority", "strict_priority",
           "policy_class", "dependencies"}


def _json(text, where, what):
    from fastsim.workload import trace_json

    return trace_json(text, where, what)


def _string(row, name, where):
    v = row.get(name)
    if not isinstance(v, str) or not v.strip():
        raise InputError(f"{where}: field '{name}' must be a non-empty string, got {v!r}")
    return v


def _int(row, name, where, lo=0, required=True):
    v = row.get(name)
    if v is None and not required:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or v >= 1 << 63:
        raise InputError(f"{where}: field '{name}' must be an integer >= {lo}, got {v!r}")
    return v


def _number(row, name, where, default=None):
    v = row.get(name, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise InputError(f"{where}: field '{name}' must be a finite number >= 0, got {v!r}")
    return float(v)


def _header(text, where):
    h = _json(text, where, "the agentic Mooncake v2 header")
    if not isinstance(h, dict) or h.get("schema") != SCHEMA:
        if isinstance(h, dict) and "request_id" in h:
            raise InputError(f"{where}: the first line must be the agentic Mooncake v2 header "
                             f'{{"schema": "{SCHEMA}", "version": 2, ...}}; rows without it (legacy rows with '
                             "'wait_for') are not read by Dynamo 1.6.1 either")
        raise InputError(f"{where}: the first line must be the agentic Mooncake v2 header with "
                         f"\"schema\": \"{SCHEMA}\", got {text.strip()[:80]!r}")
    if h.get("version") != 2:
        raise InputError(f"{where}: field 'version' must be 2, got {h.get('version')!r}")
    bs = _int(h, "block_size", where, lo=1)
    if h.get("hash_id_scope") != "local":
        raise InputError(f"{where}: field 'hash_id_scope' must be \"local\", got {h.get('hash_id_scope')!r}")
    src = h.get("source")
    if not isinstance(src, dict):
        raise InputError(f"{where}: field 'source' must be an object with non-empty 'format' and 'digest'")
    fmt = _string(src, "format", where + " (source)")
    digest = _string(src, "digest", where + " (source)")
    return bs, fmt, digest


def _dependency(d, where):
    if not isinstance(d, dict):
        raise InputError(f"{where}: a dependency must be an object, got {d!r}")
    rid = _string(d, "request_id", where)
    trig = d.get("trigger")
    if trig not in _TRIGGERS:
        raise InputError(f"{where}: field 'trigger' must be \"completion\" or \"dispatch\", got {trig!r}")
    rel = d.get("relation")
    if rel not in _RELATIONS:
        raise InputError(f"{where}: field 'relation' must be one of {', '.join(_RELATIONS)}, got {rel!r}")
    if trig == "dispatch" and rel != "spawn":
        raise InputError(f"{where}: a {rel!r} dependency must use the \"completion\" trigger "
                         "(only \"spawn\" may start on \"dispatch\")")
    delay = _number(d, "delay_ms", where, default=0.0)
    return Dependency(rid, _TRIGGERS[trig], delay, rel, where)


def _node(row, where, bs, line):
    if not isinstance(row, dict):
        raise InputError(f"{where}: a request must be a JSON object")
    # (the router queue's request priorities: checked here, read by with_row_priorities)
    row_priority(row, "priority", where)
    row_priority(row, "strict_priority", where)
    check_policy_class(row, where)
    rid = _string(row, "request_id", where)
    play = _string(row, "play_id", where)
    sess = _string(row, "session_id", where)
    model = _string(row, "model", where)
    isl = _int(row, "input_length", where, lo=1)
    osl = _int(row, "output_length", where, lo=0)
    ids = row.get("hash_ids")
    if not isinstance(ids, list) or not ids or any(isinstance(h, bool) or not isinstance(h, int) or not 0 <= h < 1 << 64
                                                   for h in ids):
        raise InputError(f"{where}: field 'hash_ids' must be a non-empty list of integers in [0, 2^64)")
    need = -(-isl // bs)
    if len(ids) != need:
        raise InputError(f"{where}: input_length {isl} at block_size {bs} needs exactly {need} hash_ids, "
                         f"got {len(ids)}")
    toks = row.get("output_token_ids")
    if toks is not None and (not isinstance(toks, list) or len(toks) != osl):
        raise InputError(f"{where}: field 'output_token_ids' must list output_length ({osl}) tokens")
    nb = _number(row, "not_before_ms", where, default=0.0)
    ordinal = _int(row, "source_play_ordinal", where, lo=0, required=False)
    if row.get("recorded_api_time_ms") is not None:
        _number(row, "recorded_api_time_ms", where)
    deps = row.get("dependencies", [])
    if not isinstance(deps, list):
        raise InputError(f"{where}: field 'dependencies' must be a list")
    deps = [_dependency(d, f"{where} (dependencies[{k}])") for k, d in enumerate(deps)]
    nd = Node(rid, play, sess, model, isl, osl, ids, nb, deps, line=line, where=where)
    nd.ordinal = ordinal
    return nd


def _play_order(c):
    """Plays in ``source_play_ordinal`` order when the rows give it (all of them, 0..P-1, one per
    play), else None (``play_id`` order). ``c``: the requests' columns."""
    if c.ordinal is None:
        return None
    missing = next((i for i, o in enumerate(c.ordinal) if o is None), None)
    if missing is not None:
        raise InputError(f"{c.where(missing)}: field 'source_play_ordinal' must be set on every row when it is used")
    of_play = {}
    for i, (play, ordinal) in enumerate(zip(c.play_id, c.ordinal)):
        if of_play.setdefault(play, ordinal) != ordinal:
            raise InputError(f"{c.where(i)}: play {play!r} has inconsistent source_play_ordinal values "
                             f"({of_play[play]} and {ordinal})")
    ordinals = sorted(of_play.values())
    if ordinals != list(range(len(ordinals))):
        raise InputError(f"{c.where(0).rsplit(':', 1)[0]}: source_play_ordinal values must be unique and "
                         f"contiguous from 0, got {ordinals[:10]}")
    return sorted(of_play, key=of_play.get)


def _read_columns(data, path):
    """The header and the requests' columns by the columnar reader, or None when it does not take
    the file (then the line-by-line reader reads it: ``fastsim/traces/agentic_columns.py``)."""
    from fastsim.traces.agentic_columns import plain_text, read_request_columns

    if not plain_text(data):
        return None
    lines = data.split(b"\n")
    first = next((i for i, x in enumerate(lines) if x.strip()), None)
    if first is None:
        return None
    header = _header(lines[first].removesuffix(b"\r").decode("utf-8"), f"{path}:{first + 1}")

    def row_reader(ln):
        where = f"{path}:{ln}"
        return _node(_json(lines[ln - 1].removesuffix(b"\r").decode("utf-8"), where, "an agentic Mooncake v2 request"), where,
                     header[0], ln)

    cols = read_request_columns(data, lines, first + 1, path, header[0], row_reader)
    return None if cols is None else (header, cols)


def _read_rows(text, path):
    """The header and the requests' columns, line by line (every error named by file and line)."""
    header = None
    nodes = []
    for ln, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{ln}"
        if header is None:
            header = _header(line, where)
            continue
        nodes.append(_node(_json(line, where, "an agentic Mooncake v2 request"), where, header[0], ln))
    if header is None:
        raise InputError(f"{path}: agentic trace is empty (it needs the v2 header line and requests)")
    if not nodes:
        raise InputError(f"{path}: agentic trace did not contain any requests")
    return header, columns_of_nodes(nodes)


def load_agentic_mooncake(path, arrival_speedup_ratio=1.0):
    """Read an agentic Mooncake v2 trace into a Workload with its request graph."""
    import os

    from fastsim.workload import _check_ratio, _decode_text, _read_bytes, with_row_priorities

    path = os.fspath(path)
    ratio = _check_ratio(arrival_speedup_ratio)
    data = _read_bytes(path)
    read = _read_columns(data, path)
    header, cols = read if read is not None else _read_rows(_decode_text(data, path), path)
    cols.not_before_ms = cols.not_before_ms / ratio
    cols.dep_delay_ms = cols.dep_delay_ms / ratio
    graph, table = build_graph_columns(cols, header[0], header[1], header[2], path, play_order=_play_order(cols))
    workload = graph_workload(graph, table, path, ratio)
    if b"priority" in data or b"policy_class" in data:
        text = _decode_text(data, path)  # (its lines numbered as the reader that read them numbered them)
        workload = with_row_priorities(workload, text.split("\n") if read is not None else text.splitlines(), path)
    return workload
