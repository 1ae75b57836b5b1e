"""The columnar reader of agentic Mooncake v2 requests: the request rows parsed by Arrow's JSON
reader and checked by arrays (about 25 ms for 15,000 requests, where the line-by-line reader of
``fastsim/traces/agentic_mooncake.py`` takes 150 ms: ``docs/decisions/0303``).

It takes a strict subset of what the line-by-line reader accepts and gives the same columns for
it; for anything else (an error to report, a field it does not read, text whose lines Python would
split elsewhere) it returns None and the line-by-line reader, which names the file, line and field
of every error, reads the file. It never raises an error of its own.

Arrow's reader is laxer than Dynamo's in four ways, each checked on the bytes first: it takes
``NaN`` and ``Infinity``, two objects on one line, and a null where a field may be absent (the
line-by-line reader tells an absent ``not_before_ms``, ``dependencies`` or ``delay_ms``, which
default, from a null one, which is an error); and it rounds every decimal correctly, where Dynamo's
reader (serde_json without ``float_roundtrip``, ``workload._serde_float``) may differ by an ulp
for 16 or more significant digits. Rows holding such a decimal are read again line by line. A
negative zero goes line by line as well (the line reader reads ``-0`` as 0 but ``-0.0`` as -0.0).
"""

from __future__ import annotations

import re
from typing import Optional

import numpy as np

from fastsim.traces.graph import COMPLETION, DISPATCH, NodeColumns

__all__ = ["plain_text", "read_request_columns"]

# a decimal with at least 16 digits (leading zeros included: a superset is harmless), with or
# without a fraction before its exponent
_LONG_FRACTION = re.compile(rb"\.(?:" + b"|".join(
    [rb"(?<=[0-9]{%d}\.)[0-9]{%d}" % (k, 16 - k) for k in range(1, 16)] + [rb"(?<=[0-9]{16}\.)"]) + rb")")
_LONG_MANTISSA = (re.compile(rb"e(?<=[0-9]{16}e)"), re.compile(rb"E(?<=[0-9]{16}E)"))
# bytes that end a line for Python's str.splitlines (the line-by-line reader) but not for JSON Lines
_OTHER_BREAKS = (b"\xc2\x85", b"\xe2\x80\xa8", b"\xe2\x80\xa9", b"\xef\xbb\xbf")
_STRINGS = ("request_id", "play_id", "session_id", "model")
_UNREAD = ("priority", "strict_priority", "policy_class", "output_token_ids")  # the line reader's
_TRIGGERS = {"completion": COMPLETION, "dispatch": DISPATCH}
_RELATIONS = ("sequence", "spawn", "join", "replay_barrier")


def _schema():
    import pyarrow as pa

    dep = pa.struct([("request_id", pa.string()), ("trigger", pa.string()), ("delay_ms", pa.float64()),
                     ("relation", pa.string())])
    return pa.schema([("request_id", pa.string()), ("play_id", pa.string()), ("session_id", pa.string()),
                      ("model", pa.string()), ("input_length", pa.int64()), ("output_length", pa.int64()),
                      ("hash_ids", pa.list_(pa.uint64())), ("not_before_ms", pa.float64()),
                      ("source_play_ordinal", pa.int64()), ("recorded_api_time_ms", pa.float64()),
                      ("dependencies", pa.list_(dep))])


def plain_text(data: bytes) -> bool:
    """No byte on which the two readers could disagree before parsing: valid UTF-8 without a byte
    order mark, no line break of Python's but ``\\n`` and ``\\r\\n``, no ``NaN`` or ``Infinity``."""
    if b"\r" in data and data.count(b"\r") != data.count(b"\r\n"):
        return False
    if any(c in data for c in (b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e", b"\x1f")):
        return False
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return False
        if any(s in data for s in _OTHER_BREAKS):
            return False
    # (a byte is found at once; most traces hold no capital N or I at all)
    return not (b"N" in data and b"NaN" in data) and not (b"I" in data and b"Infinity" in data)


def _non_blank(strings) -> bool:
    """Every string has a character that is not whitespace (``str.strip``)."""
    return all(map(str.strip, strings))


def _values(arr, dtype):
    """The values of a primitive Arrow array as a NumPy view, and its validity (None: no nulls).
    (``Array.to_numpy`` would import pandas, a tenth of a second.)"""
    n = len(arr)
    data = arr.buffers()[1]
    if data is None:  # empty, or null throughout
        return np.zeros(n, dtype=dtype), (np.zeros(n, dtype=bool) if n else None)
    values = np.frombuffer(data, dtype=dtype)[arr.offset:arr.offset + n]
    if not arr.null_count:
        return values, None
    bits = np.unpackbits(np.frombuffer(arr.buffers()[0], dtype=np.uint8), bitorder="little")
    return values, bits[arr.offset:arr.offset + n].astype(bool)


def _list(arr):
    """An Arrow list array's values and CSR pointer (from 0); a null list has none. (Not
    ``ListArray.flatten``, which imports ``pyarrow.compute``, 20 ms.)"""
    ptr = _values(arr.offsets, np.int32)[0].astype(np.int64)
    return arr.values.slice(int(ptr[0]), int(ptr[-1] - ptr[0])), ptr - ptr[0]


def read_request_columns(data: bytes, lines: list, first: int, path: str, block_size: int,
                         row_reader) -> Optional[NodeColumns]:
    """The requests after line ``first`` (0-based) of ``data``, a :func:`plain_text` split into
    ``lines`` at ``\\n``, or None when the line-by-line reader must read them. ``row_reader(line_number)`` is that reader
    for one line (a :class:`~fastsim.traces.graph.Node`), for rows with long decimals."""
    try:
        import pyarrow as pa
        import pyarrow.json as pj
    except ImportError:
        return None
    numbers = [i + 1 for i in range(first, len(lines)) if lines[i].strip()]
    if not numbers:
        return None
    start = sum(len(x) + 1 for x in lines[:first])
    body = pa.py_buffer(data)[start:]
    try:
        table = pj.read_json(pa.BufferReader(body),
                             read_options=pj.ReadOptions(use_threads=False, block_size=len(body) + 1),
                             parse_options=pj.ParseOptions(explicit_schema=_schema()))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    n = table.num_rows
    if n != len(numbers):  # two objects on a line
        return None
    for name in _UNREAD:
        if name in table.column_names and table.column(name).null_count != n:
            return None
    table = table.combine_chunks()
    col = {name: table.column(name).chunk(0) for name in _schema().names}

    def null_given():  # a null in the file: then a null value may not mean an absent field
        return b"null" in data

    for name in _STRINGS + ("input_length", "output_length", "hash_ids"):
        if col[name].null_count:
            return None
    strings = {name: col[name].to_pylist() for name in _STRINGS}
    if not all(_non_blank(v) for v in strings.values()):
        return None
    isl, osl = _values(col["input_length"], np.int64)[0], _values(col["output_length"], np.int64)[0]
    if (isl < 1).any() or (osl < 0).any():
        return None
    hash_values, hash_ptr = _list(col["hash_ids"])
    if hash_values.null_count:
        return None
    if not np.array_equal(np.diff(hash_ptr), -(-isl // block_size)):
        return None
    nb, given = _values(col["not_before_ms"], np.float64)
    if given is not None:
        if null_given():
            return None
        nb = np.where(given, nb, 0.0)  # absent: 0
    if not (np.isfinite(nb).all() and (nb >= 0).all()) or np.signbit(nb).any():
        return None
    ordinal = col["source_play_ordinal"]
    if ordinal.null_count != n:
        values, given = _values(ordinal, np.int64)
        if (values[given if given is not None else slice(None)] < 0).any():
            return None
    api = col["recorded_api_time_ms"]
    if api.null_count != n:
        values, given = _values(api, np.float64)
        values = values[given if given is not None else slice(None)]
        if not (np.isfinite(values).all() and (values >= 0).all()):
            return None
    deps = col["dependencies"]
    if deps.null_count and null_given():
        return None
    d, dep_ptr = _list(deps)  # a null list (absent) has no entries
    if d.null_count:
        return None
    # a struct's children ignore its slice: cut them to it
    d = {f.name: d.field(k).slice(d.offset, len(d)) for k, f in enumerate(d.type)}
    if d["request_id"].null_count:
        return None
    dep_request_id = d["request_id"].to_pylist()
    if not _non_blank(dep_request_id):
        return None
    trig = d["trigger"].to_pylist()
    rel = d["relation"].to_pylist()
    if not (set(trig) <= _TRIGGERS.keys() and set(rel) <= set(_RELATIONS)):
        return None
    trigger = np.array([_TRIGGERS[t] for t in trig], dtype=np.int8)
    spawn = np.array([r == "spawn" for r in rel], dtype=bool)
    if ((trigger == DISPATCH) & ~spawn).any():
        return None
    delay, given = _values(d["delay_ms"], np.float64)
    if given is not None:
        if null_given():
            return None
        delay = np.where(given, delay, 0.0)  # absent: 0
    if not (np.isfinite(delay).all() and (delay >= 0).all()) or np.signbit(delay).any():
        return None
    line = np.array(numbers, dtype=np.int64)
    where = lambda i: f"{path}:{line[i]}"  # noqa: E731
    cols = NodeColumns(
        request_id=strings["request_id"], play_id=strings["play_id"], session_id=strings["session_id"],
        model=strings["model"],
        isl=isl.astype(np.int64), osl=osl.astype(np.int64), hash_ptr=hash_ptr,
        hash_ids=_values(hash_values, np.int64)[0].copy(), not_before_ms=nb.astype(np.float64),
        line=line, dep_ptr=dep_ptr, dep_request_id=dep_request_id, dep_trigger=trigger,
        dep_delay_ms=delay.astype(np.float64), dep_spawn=spawn,
        where=where, dep_where=lambda i, k: f"{where(i)} (dependencies[{k}])",
        ordinal=None if ordinal.null_count == n else ordinal.to_pylist(),
    )
    _reread_long_decimals(cols, data, lines, start, numbers, row_reader)
    return cols


def _reread_long_decimals(cols, data, lines, start, numbers, row_reader):
    """Rows with a decimal of 16 or more digits take their times from the line-by-line reader."""
    hits = [m.start() for rx in (_LONG_FRACTION,) + _LONG_MANTISSA for m in rx.finditer(data, start)]
    if not hits:
        return
    ends = np.cumsum([len(x) + 1 for x in lines])
    row_of_line = {ln: r for r, ln in enumerate(numbers)}
    for ln in sorted({int(np.searchsorted(ends, h, side="right")) + 1 for h in hits}):
        r = row_of_line.get(ln)
        if r is None:
            continue
        node = row_reader(ln)
        cols.not_before_ms[r] = node.not_before_ms
        for k, dep in enumerate(node.dependencies):
            cols.dep_delay_ms[cols.dep_ptr[r] + k] = dep.delay_ms
