"""Workloads: Mooncake JSONL and Azure CSV readers and the synthetic generator.

Every reader returns a :class:`Workload` (the contract in ``docs/ARCHITECTURE.md``): one row per
request (turn) in file order, the session structure as CSR arrays, and the trace's hash ids.

Semantics follow Dynamo 1.4.2 (``Trace::from_mooncake``, ``Trace::synthetic``; notes 1.3, 1.5, 2.2;
verified Q9, Q13): clamped input lengths, closed-loop turns within a session, arrivals normalised
to the earliest first-turn timestamp and divided (with the inter-turn delays) by
``arrival_speedup_ratio``. Errors are :class:`InputError` naming the file, the 1-based line and the
field; lossy repairs (clamped lengths, skipped rows) are reported once per file as a
:class:`TraceWarning`.
"""

from __future__ import annotations

import dataclasses
import gzip
import itertools
import json
import math
import numbers
import os
import warnings
from dataclasses import dataclass
from typing import NamedTuple, Optional

import numpy as np

from fastsim import reuse, rust_rng
from fastsim.errors import InputError, NotSupportedError, TraceWarning
from fastsim.trace_checks import (MAX_RAW_TIME_MS, MAX_TOKENS, DuplicateKeyError, azure_counts, azure_timestamps_ns, check_output_length,
                                  check_synthetic_size, check_time_value, check_workload,
                                  no_duplicate_keys)

__all__ = [
    "Workload",
    "load_trace",
    "load_mooncake",
    "load_azure_csv",
    "synthetic",
    "TRACE_FORMATS",
    "DEFAULT_TRACE_BLOCK_SIZE",
    "DYNAMO_VERSIONS",
    "check_dynamo_version",
]

DEFAULT_TRACE_BLOCK_SIZE = 512
_U64_MAX = 2**64 - 1
_I64_MAX = 2**63 - 1
# Dynamo's trace formats (``--trace-format`` choices) plus fastsim's ``azure`` CSV reader.
TRACE_FORMATS = ("mooncake", "azure", "mooncake-delta", "agentic_mooncake", "applied_compute_agentic", "dynamo",
                 "weka")
from fastsim.dynamo_version import DYNAMO_VERSIONS  # noqa: E402  (re-exported)
from fastsim.dynamo_version import check_version as check_dynamo_version  # noqa: E402


@dataclass(eq=False)
class Workload:
    """One row per request (turn), in file order (see ``docs/ARCHITECTURE.md``).

    Attributes: ``isl``/``osl`` (int64[n], after Dynamo's clamp), ``session`` (int64[n], numbered
    by first appearance), ``turn`` (int64[n]), ``delay_ms`` (float64[n], delay after the previous
    turn's completion, 0 for turn 0, already divided by the speedup ratio),
    ``session_arrival_ms`` (float64[S], normalised first-turn arrival; NaN where a trace loaded in
    concurrency mode has no timestamp), ``session_ptr``/``session_rows`` (CSR of each session's
    rows in turn order), ``hash_ptr``/``hash_ids`` (CSR of the hash ids, int64 bit patterns of
    Dynamo's u64 ids; None for unique prompts), ``trace_block_size`` (tokens per hash id),
    ``line`` (int64[n], 1-based source line, 0 for synthetic), ``source`` and
    ``session_ids`` (dict of explicit session names, or None: see the field).
    """

    isl: np.ndarray
    osl: np.ndarray
    session: np.ndarray
    turn: np.ndarray
    delay_ms: np.ndarray
    session_arrival_ms: np.ndarray
    session_ptr: np.ndarray
    session_rows: np.ndarray
    hash_ptr: Optional[np.ndarray]
    hash_ids: Optional[np.ndarray]
    trace_block_size: int
    line: np.ndarray
    source: str
    # explicit ``session_id`` of a trace's sessions, by session number (the others are named
    # ``request_<line of their first turn>``); None for workloads that carry no names
    session_ids: Optional[dict] = None
    # A session played as one growing token stream (``mooncake-delta``): the prompt tokens the
    # row's hash ids cover (int64[n]; the rest of its prompt is the stream's earlier output and
    # deltas), and the row that starts its stream (int64[n]). None: every prompt is its hash ids.
    key_isl: Optional[np.ndarray] = None
    stream_row: Optional[np.ndarray] = None
    # Agentic traces: the request graph that releases the arrivals (fastsim.traces.graph); None:
    # sessions of turns as above
    graph: Optional[object] = None
    # Request priorities as the rows give them (int64[n]; 0 where a row has none), read by
    # kv_router's router queue only (docs/decisions/0480): ``priority`` (an i32; its jump is
    # max(priority, 0)) and ``strict_priority`` (a u32). None: no row of the trace has the field.
    priority: Optional[np.ndarray] = None
    strict_priority: Optional[np.ndarray] = None

    @property
    def n_requests(self) -> int:
        """Number of rows (requests / turns)."""
        return int(self.isl.shape[0])

    @property
    def n_sessions(self) -> int:
        """Number of sessions."""
        return int(self.session_ptr.shape[0] - 1)

    def __len__(self) -> int:
        return self.n_requests

    def __repr__(self) -> str:
        hashes = "unique prompts" if self.hash_ids is None else f"{self.hash_ids.shape[0]} hash ids"
        return (
            f"Workload({self.n_requests} requests, {self.n_sessions} sessions, {hashes}, "
            f"trace_block_size={self.trace_block_size}, source={self.source!r})"
        )

    def session_order(self) -> np.ndarray:
        """Sessions in dispatch order for trace mode: stable sort by first-turn arrival (ties keep
        file order, as Dynamo's stable ``total_cmp`` sort does)."""
        return np.argsort(self.session_arrival_ms, kind="stable")

    def to_frame(self):
        """The per-row fields as a pandas DataFrame (index = row), with each session's arrival."""
        import pandas as pd

        return pd.DataFrame(
            {
                "line": self.line,
                "session": self.session,
                "turn": self.turn,
                "isl": self.isl,
                "osl": self.osl,
                "delay_ms": self.delay_ms,
                "session_arrival_ms": self.session_arrival_ms[self.session],
            }
        ).rename_axis("row")

    def validate(self) -> "Workload":
        """Check array shapes, dtypes and CSR consistency; returns self (raises InputError)."""
        n, s = self.n_requests, self.n_sessions
        for name in ("isl", "osl", "session", "turn", "line", "session_rows"):
            a = getattr(self, name)
            if a.dtype != np.int64 or a.shape != (n,):
                raise InputError(f"Workload.{name} must be int64[{n}], got {a.dtype}{list(a.shape)}")
        if self.delay_ms.dtype != np.float64 or self.delay_ms.shape != (n,):
            raise InputError(f"Workload.delay_ms must be float64[{n}]")
        if self.session_arrival_ms.shape != (s,) or self.session_ptr[-1] != n or self.session_ptr[0] != 0:
            raise InputError("Workload session CSR is inconsistent")
        if (self.hash_ptr is None) != (self.hash_ids is None):
            raise InputError("Workload.hash_ptr and hash_ids must both be set or both be None")
        if self.hash_ptr is not None and (self.hash_ptr.shape != (n + 1,) or self.hash_ptr[-1] != self.hash_ids.shape[0]):
            raise InputError("Workload hash CSR is inconsistent")
        if n and (self.isl.min() < 1 or self.osl.min() < 0):
            raise InputError("Workload lengths out of range (isl >= 1, osl >= 0)")
        if (self.key_isl is None) != (self.stream_row is None):
            raise InputError("Workload.key_isl and stream_row must both be set or both be None")
        if self.key_isl is not None and (self.key_isl.shape != (n,) or self.stream_row.shape != (n,)
                                         or np.any(self.key_isl > self.isl)):
            raise InputError("Workload stream columns are inconsistent")
        for name in ("priority", "strict_priority"):
            a = getattr(self, name)
            if a is not None and (a.dtype != np.int64 or a.shape != (n,)):
                raise InputError(f"Workload.{name} must be None or int64[{n}], got {a.dtype}{list(a.shape)}")
        return self


# ----------------------------------------------------------------------------- helpers
def _check_tbs(trace_block_size) -> int:
    if trace_block_size is None:
        return DEFAULT_TRACE_BLOCK_SIZE
    if isinstance(trace_block_size, bool) or not isinstance(trace_block_size, numbers.Integral):
        raise InputError(f"trace_block_size must be a positive integer, got {trace_block_size!r}")
    if trace_block_size <= 0:
        raise InputError(f"trace_block_size must be greater than 0, got {trace_block_size}")
    if trace_block_size > 2**62:
        raise InputError(f"trace_block_size must be at most 2^62 tokens, got {trace_block_size}")
    return int(trace_block_size)


def _check_ratio(ratio, name="arrival_speedup_ratio") -> float:
    if isinstance(ratio, bool) or not isinstance(ratio, numbers.Real) or not math.isfinite(ratio) or ratio <= 0:
        raise InputError(f"{name} must be a finite positive number, got {ratio!r}")
    return float(ratio)


def _num(x) -> str:
    """Format a number like Rust's f64 Display (``-50`` rather than ``-50.0``)."""
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e16:
        return str(int(x))
    return repr(x) if isinstance(x, float) else str(x)


def _jtype(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"boolean {str(v).lower()}"
    if isinstance(v, (int, float)):
        return f"number {_num(v)}"
    if isinstance(v, str):
        return f"string {v!r}"
    return {list: "array", dict: "object"}.get(type(v), type(v).__name__)


def _read_bytes(path: str) -> bytes:
    """The bytes of a trace file (``.gz`` transparently); InputError if it cannot be read."""
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as fh:
                return fh.read()
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        raise InputError(f"trace file {path} does not exist") from None
    except IsADirectoryError:
        raise InputError(f"trace file {path} is a directory") from None
    except (OSError, EOFError) as exc:
        raise InputError(f"cannot read trace file {path}: {exc}") from None


def _decode_text(data: bytes, path: str) -> str:
    """A trace's bytes as text (a UTF-8 byte order mark dropped); InputError if not UTF-8."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(f"{path}:{line}: not valid UTF-8 text ({exc.reason})") from None


def _open_text(path: str) -> str:
    """Read a text trace (``.gz`` transparently); InputError if it cannot be read or decoded."""
    return _decode_text(_read_bytes(path), path)


def _serde_float(text: str) -> float:
    """A JSON decimal as Dynamo's trace reader (serde_json's default, no float_roundtrip) reads it:
    the digits as one integer rounded to f64, then scaled by an exact power of ten. For 16-17
    significant digits this can differ from the correctly rounded value by an ulp (935.4179999999999
    reads as 935.418), and same-timestamp ordering is bitwise, so parity needs the same rule."""
    t = text.lower()
    mant, _, exp = t.partition("e")
    neg = mant.startswith("-")
    if neg:
        mant = mant[1:]
    whole, _, frac = mant.partition(".")
    digits = (whole + frac).lstrip("0") or "0"
    e10 = (int(exp) if exp else 0) - len(frac)
    m = int(digits)
    if m >= 1 << 64 or abs(e10) > 22:
        return float(text)  # outside the fast path: serde falls back to a correct parse too
    v = float(m) * 10.0 ** e10 if e10 >= 0 else float(m) / 10.0 ** (-e10)
    return -v if neg else v


def _reject_constant(name):
    raise ValueError(f"{name} is not valid JSON")


def trace_json_decoder() -> json.JSONDecoder:
    """The JSON decoder of every trace reader: Dynamo's rule for decimals, no NaN or Infinity,
    no key given twice."""
    return json.JSONDecoder(parse_constant=_reject_constant, parse_float=_serde_float,
                            object_pairs_hook=no_duplicate_keys)


def trace_json(text: str, where: str, what: str = ""):
    """One JSON value of a trace file (a line, a document), or an InputError naming ``where``
    (``file:line``) and, if given, ``what`` the value should have been."""
    try:
        return trace_json_decoder().decode(text)
    except DuplicateKeyError as exc:
        raise InputError(f"{where}: {exc}") from None
    except ValueError as exc:
        raise InputError(f"{where}: not valid JSON{' for ' + what if what else ''} ({exc})") from None


def _pick(row: dict, name: str, alias: str, where: str):
    """Value of a field that has a serde alias; both spellings present is an error (as in Dynamo)."""
    if alias in row:
        if name in row:
            raise InputError(f"{where}: both '{name}' and its alias '{alias}' are set; use one")
        return row[alias]
    return row.get(name)


# ----------------------------------------------------------------------------- Mooncake
def load_mooncake(
    path,
    trace_block_size: int = DEFAULT_TRACE_BLOCK_SIZE,
    arrival_speedup_ratio: float = 1.0,
    concurrency_mode: bool = False,
    dynamo_version: str = "1.6.1",
) -> Workload:
    """Read a Mooncake JSONL trace as Dynamo does (1.4.2's ``Trace::from_mooncake``).

    Each non-blank line is a JSON object with ``output_length`` (alias ``output_tokens``, required,
    integer >= 0), ``hash_ids`` (required, non-empty list of integers in [0, 2**64)), and optional
    ``input_length`` (alias ``input_tokens``), ``timestamp`` (alias ``created_time``, ms),
    ``session_id`` (string), ``delay`` (alias ``delay_ms``, ms); other fields are ignored.

    * Rows with the same ``session_id`` are the turns of one closed-loop session, in file order; a
      row without one is a one-turn session named ``request_<line>`` (Dynamo's naming, so an
      explicit ``session_id`` of that form joins it, as in Dynamo).
    * ``input_length`` defaults to ``cap = len(hash_ids) * trace_block_size``. A longer
      ``input_length`` is an :class:`InputError` with ``dynamo_version="1.6.1"`` (Dynamo 1.6.1:
      ``trace line N input_length X exceeds hash_ids capacity C``); with ``"1.4.2"`` it is clamped
      to ``cap`` as Dynamo 1.4.2 does, and the clamped rows are reported once in a
      :class:`TraceWarning` (count and first line).
    * Turn 0 has delay 0 (an explicit non-zero delay there is an error). Turn k > 0 waits its explicit
      delay, else its timestamp minus the session's previous timestamp, else 0, after the previous
      turn completes. Negative delays are errors.
    * Session arrivals are ``(t - min first-turn t) / ratio``; delays are divided by the ratio too.
      In trace mode every session needs a first-turn timestamp; with ``concurrency_mode=True``
      (``replay_concurrency``) timestamps are optional and a missing one is stored as NaN.

    Raises :class:`InputError` naming the file, line and field for malformed JSON, missing,
    negative or non-integer lengths, empty/invalid ``hash_ids``, bad timestamps or delays, and an
    empty file.
    """
    tbs = _check_tbs(trace_block_size)
    ratio = _check_ratio(arrival_speedup_ratio)
    clamp_is_error = check_dynamo_version(dynamo_version) != "1.4.2"
    path = os.fspath(path)
    data = _read_bytes(path)
    rows = _mooncake_scanned(data, concurrency_mode)
    if rows is None:  # the scanner left the file to the line reader (which names any error)
        rows = _mooncake_by_line(_decode_text(data, path), path, concurrency_mode)
    workload, clamped, clamp_first = _mooncake_workload(rows, path, tbs, ratio, clamp_is_error)
    if b"priority" in data or b"policy_class" in data:  # (a plain substring test: free on traces without them)
        workload = with_row_priorities(workload, _decode_text(data, path).split("\n"), path)
    if clamped:
        warnings.warn(
            f"{path}: input_length exceeds len(hash_ids) * trace_block_size ({tbs}) on {clamped} of "
            f"{workload.n_requests} rows (first: line {clamp_first}); clamped to that cap, as Dynamo 1.4.2 does",
            TraceWarning,
            stacklevel=2,
        )
    return check_workload(workload)


_I32 = (-(1 << 31), (1 << 31) - 1)
_U32 = (0, (1 << 32) - 1)


def row_priority(row: dict, name: str, where: str) -> int:
    """A row's ``priority`` (an i32) or ``strict_priority`` (a u32), 0 when absent or null, as
    Dynamo's request fields; anything else is an InputError naming the field and its range."""
    v = row.get(name)
    if v is None:
        return 0
    lo, hi = _I32 if name == "priority" else _U32
    if type(v) is not int or not lo <= v <= hi:
        kind = "i32" if name == "priority" else "u32"
        raise InputError(f"{where}: field '{name}' must be an integer in [{lo}, {hi}] ({kind}), got {_jtype(v)}")
    return v


def check_policy_class(row: dict, where: str) -> None:
    """``policy_class`` is a string or null: Dynamo reads it, and without a router policy profile
    (which fastsim does not take) every request is in the one default class."""
    v = row.get("policy_class")
    if v is not None and type(v) is not str:
        raise InputError(f"{where}: field 'policy_class' must be a string, got {_jtype(v)}")


def with_row_priorities(workload: "Workload", lines: list, path: str) -> "Workload":
    """``workload`` with the ``priority`` and ``strict_priority`` of its rows, read from the
    trace's ``lines`` (split as its reader split them: each row's 1-based source line is
    ``workload.line``); unchanged when no row has one."""
    prio = np.zeros(workload.n_requests, dtype=np.int64)
    strict = np.zeros(workload.n_requests, dtype=np.int64)
    has_prio = has_strict = False
    decode = trace_json_decoder().raw_decode
    for r, ln in enumerate(workload.line.tolist()):
        raw = lines[ln - 1]
        if "priority" not in raw and "policy_class" not in raw:
            continue
        row, _ = decode(raw.strip().lstrip("\ufeff"))  # (the line was read whole before)
        where = f"{path}:{ln}"
        prio[r] = row_priority(row, "priority", where)
        strict[r] = row_priority(row, "strict_priority", where)
        check_policy_class(row, where)
        has_prio = has_prio or "priority" in row
        has_strict = has_strict or "strict_priority" in row
    if not (has_prio or has_strict):
        return workload
    return dataclasses.replace(workload, priority=prio if has_prio else None,
                               strict_priority=strict if has_strict else None)


class _Rows(NamedTuple):
    """A Mooncake trace's requests as read, before the input lengths are capped (either reader's
    result): ``isl`` is -1 where the row gives no input length, ``delay_ms`` is not yet divided by
    the speedup ratio, ``first_ts`` is each session's first-turn timestamp (NaN if it has none)."""

    isl: np.ndarray
    osl: np.ndarray
    session: np.ndarray
    turn: np.ndarray
    delay_ms: np.ndarray
    first_ts: np.ndarray
    hash_ptr: np.ndarray
    hash_ids: np.ndarray
    line: np.ndarray
    session_ids: dict  # {session: its explicit session_id}, unless it reads request_<first line>


def _mooncake_workload(rows: _Rows, path: str, tbs: int, ratio: float, clamp_is_error: bool = False):
    """``(workload, clamped rows, first clamped line)`` from either reader's rows: input lengths
    capped at ``len(hash_ids) * trace_block_size`` (absent ones set to it), arrivals normalised."""
    n_ids = np.diff(rows.hash_ptr)
    if int(n_ids.max()) > _I64_MAX // tbs:
        raise InputError(f"trace_block_size {tbs} is too large: a prompt of {int(n_ids.max())} hash ids "
                         f"would hold more than 2**63 tokens")
    cap = n_ids * tbs
    given = rows.isl >= 0
    over = given & (rows.isl > cap)
    if clamp_is_error and over.any():
        r = int(np.argmax(over))
        ln = int(rows.line[r])
        raise InputError(
            f"{path}:{ln}: trace line {ln} input_length {int(rows.isl[r])} exceeds hash_ids capacity "
            f"{int(cap[r])} (len(hash_ids) {int(n_ids[r])} x trace_block_size {tbs}); Dynamo 1.6.1 rejects "
            "such a row, 1.4.2 clamped it (--dynamo-version 1.4.2)"
        )
    isl = np.where(given & ~over, rows.isl, cap)
    clamped = int(np.count_nonzero(over))
    clamp_first = int(rows.line[np.argmax(over)]) if clamped else 0

    first_ts = rows.first_ts
    present = first_ts[~np.isnan(first_ts)]
    # the first of the smallest timestamps, as Python's min() picks it (0.0 or -0.0 decides the
    # sign of a zero arrival)
    t0 = float(present[np.argmax(present == present.min())]) if present.shape[0] else 0.0
    with np.errstate(over="ignore"):  # a tiny ratio: check_workload names the row out of range
        arrivals = (first_ts - t0) / ratio
    session = rows.session
    counts = np.bincount(session, minlength=first_ts.shape[0])
    session_ptr = np.zeros(first_ts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=session_ptr[1:])
    workload = Workload(
        isl=isl.astype(np.int64, copy=False),
        osl=rows.osl,
        session=session,
        turn=rows.turn,
        delay_ms=rows.delay_ms / ratio,
        session_arrival_ms=arrivals,
        session_ptr=session_ptr,
        session_rows=np.argsort(session, kind="stable").astype(np.int64),
        hash_ptr=rows.hash_ptr,
        hash_ids=rows.hash_ids,
        trace_block_size=tbs,
        line=rows.line,
        source=path,
        session_ids=rows.session_ids,
    )
    return workload, clamped, clamp_first


_UTF8_BOM = b"\xef\xbb\xbf"


def _nested_duplicate_keys(data: bytes) -> bool:
    """True if a line holding a nested object repeats a key anywhere (the scanner skips the
    values of unknown fields, so such lines are parsed here; real traces have few or none)."""
    decode = json.JSONDecoder(object_pairs_hook=no_duplicate_keys).decode
    for raw in data.split(b"\n"):
        if raw.count(b"{") > 1:
            try:
                decode(raw.decode("utf-8"))
            except DuplicateKeyError:
                return True
            except ValueError:
                return True  # malformed after all: the line reader names it
    return False


def _mooncake_scanned(data: bytes, concurrency_mode: bool) -> Optional[_Rows]:
    """The rows of a trace read by the compiled scanner (``kernels/tracescan.py``), or None when it
    gives up on a line or finds anything the line reader would report (an error or a lossy case):
    the caller then reads the file line by line."""
    from fastsim.kernels import tracescan as sc

    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    start = 3 if data.startswith(_UTF8_BOM) else 0
    b = np.frombuffer(data, dtype=np.uint8)
    cap_rows = data.count(b"\n") + 1
    isl = np.empty(cap_rows, dtype=np.int64)
    osl = np.empty(cap_rows, dtype=np.int64)
    nids = np.empty(cap_rows, dtype=np.int64)
    ts = np.empty(cap_rows, dtype=np.float64)
    delay = np.empty(cap_rows, dtype=np.float64)
    flags = np.empty(cap_rows, dtype=np.int8)
    sid = np.empty((cap_rows, 2), dtype=np.int64)
    line = np.empty(cap_rows, dtype=np.int64)
    # every hash id takes a digit and a separator; untouched room costs no memory
    ids = np.empty(len(data) // 2 + 1, dtype=np.uint64)
    n, n_ids, bad = sc.scan_mooncake_nb(b, start, isl, osl, nids, ts, delay, flags, sid, line, ids,
                                        np.zeros(64, dtype=np.uint8))
    if bad or n == 0:
        return None
    if data.count(b"{") != n and _nested_duplicate_keys(data):
        return None  # the line reader names the line with the repeated key
    isl, osl, ts, delay, flags, line = isl[:n], osl[:n], ts[:n], delay[:n], flags[:n], line[:n]
    if np.any(osl > MAX_TOKENS) or np.any(np.abs(ts[(flags & sc.HAS_TS) != 0]) >= MAX_RAW_TIME_MS) or \
            np.any(np.abs(delay[(flags & sc.HAS_DELAY) != 0]) >= MAX_RAW_TIME_MS):
        return None  # out of range: the line reader's per-row checks name the line and field
    has_ts = (flags & sc.HAS_TS) != 0
    has_delay = (flags & sc.HAS_DELAY) != 0
    if np.any(has_ts & (ts == 0.0) & np.signbit(ts)):
        return None  # a -0.0 timestamp: the line reader settles which zero comes first
    if np.any((flags & sc.HAS_IN) != 0) and not np.all(isl[(flags & sc.HAS_IN) != 0] > 0):
        return None  # an input_length of 0: the line reader's error
    isl = np.where((flags & sc.HAS_IN) != 0, isl, -1)
    ts = np.where(has_ts, ts, np.nan)
    hash_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(nids[:n], out=hash_ptr[1:])
    hash_ids = ids[:n_ids].view(np.int64)
    if not np.any((flags & sc.HAS_SID) != 0):
        # every row is a session of its own (request_<line>): no delays, first turn only
        if np.any(has_delay & (delay != 0.0)):
            return None  # a delay on a first turn: the line reader's error
        if not concurrency_mode and not has_ts.all():
            return None  # a missing first-turn timestamp: the line reader's error
        idx = np.arange(n, dtype=np.int64)
        return _Rows(isl, osl, idx, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.float64), ts,
                     hash_ptr, hash_ids, line, {})
    return _scanned_sessions(data, sid[:n], flags, isl, osl, ts, has_ts, delay, has_delay, hash_ptr,
                             hash_ids, line, concurrency_mode)


def _scanned_sessions(data, sid, flags, isl, osl, ts, has_ts, delay, has_delay, hash_ptr, hash_ids,
                      line, concurrency_mode) -> Optional[_Rows]:
    """The session structure of scanned rows of which some have a ``session_id`` (None when the
    line reader would report something)."""
    from fastsim.kernels.tracescan import HAS_SID

    n = line.shape[0]
    named = ((flags & HAS_SID) != 0).tolist()
    starts, ends, lines = sid[:, 0].tolist(), sid[:, 1].tolist(), line.tolist()
    keys = [data[s0:s1].decode("utf-8") if has else f"request_{ln}"
            for has, s0, s1, ln in zip(named, starts, ends, lines)]
    index: dict = {}
    session = np.fromiter((index.setdefault(k, len(index)) for k in keys), dtype=np.int64, count=n)
    order = np.argsort(session, kind="stable")  # rows session by session, turns in file order
    s_sorted = session[order]
    pos = np.arange(n, dtype=np.int64)
    first = np.ones(n, dtype=bool)
    first[1:] = s_sorted[1:] != s_sorted[:-1]
    group_start = np.maximum.accumulate(np.where(first, pos, 0))
    turn = np.empty(n, dtype=np.int64)
    turn[order] = pos - group_start
    if np.any(has_delay[order][first] & (delay[order][first] != 0.0)):
        return None  # a delay on a first turn
    # each later turn's previous timestamp: the latest one given by an earlier turn of its session
    ts_sorted, has_sorted = ts[order], has_ts[order]
    last = np.maximum.accumulate(np.where(has_sorted, pos, -1))
    prev = np.full(n, -1, dtype=np.int64)
    prev[1:] = last[:-1]
    prev = np.where(prev >= group_start, prev, -1)
    later = ~first
    from_ts = later & ~has_delay[order] & has_sorted
    if np.any(from_ts & (prev < 0)):
        return None  # a delay that cannot be inferred
    with np.errstate(invalid="ignore"):
        d_sorted = np.where(has_delay[order], delay[order],
                            np.where(from_ts, ts_sorted - ts_sorted[np.maximum(prev, 0)], 0.0))
    d_sorted = np.where(later, d_sorted, 0.0)
    if np.any(~(d_sorted >= 0.0) | ~np.isfinite(d_sorted)):
        return None  # a negative or infinite delay
    delay_ms = np.empty(n, dtype=np.float64)
    delay_ms[order] = d_sorted
    first_ts = ts_sorted[first]  # sessions are numbered by first appearance: in that order
    if not concurrency_mode and np.isnan(first_ts).any():
        return None  # a session without a first-turn timestamp
    first_line = line[order][first].tolist()
    names = {si: k for k, si in index.items() if k != f"request_{first_line[si]}"}
    return _Rows(isl, osl, session, turn, delay_ms, first_ts, hash_ptr, hash_ids, line, names)


def _mooncake_by_line(text: str, path: str, concurrency_mode: bool) -> _Rows:
    """The rows of a trace read line by line with Python's JSON decoder, checking every field:
    the reader of any file the scanner does not take, and the one that names a bad line's file,
    line and field (InputError)."""
    raw_decode = trace_json_decoder().raw_decode

    isl_l, osl_l, sess_l, turn_l, delay_l, line_l, hlists = [], [], [], [], [], [], []
    sess_index: dict = {}
    sess_name: list = []
    first_ts: list = []
    first_line: list = []
    last_ts: list = []
    n_turns: list = []
    big_ids = False
    total_ids = 0
    named = False
    _int, _float = int, float

    for lineno, raw in enumerate(text.split("\n"), 1):
        s = raw.strip()
        if not s:
            continue
        where = f"{path}:{lineno}"
        try:
            row, end = raw_decode(s)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: malformed JSON at column {exc.colno}: {exc.msg}") from None
        except DuplicateKeyError as exc:
            raise InputError(f"{where}: {exc}") from None
        except ValueError as exc:
            raise InputError(f"{where}: malformed JSON: {exc}") from None
        if end != len(s):
            raise InputError(f"{where}: malformed JSON at column {end + 1}: extra data after the object")
        if type(row) is not dict:
            raise InputError(f"{where}: expected a JSON object, got {_jtype(row)}")

        # lengths
        out = (_pick(row, "output_length", "output_tokens", where) if "output_tokens" in row else row.get("output_length"))
        if out is None:
            raise InputError(f"{where}: missing required field 'output_length' (alias 'output_tokens')")
        if type(out) is not _int or out < 0:
            raise InputError(f"{where}: field 'output_length' must be an integer >= 0, got {_jtype(out)}")
        check_output_length(out, where)
        inp = (_pick(row, "input_length", "input_tokens", where) if "input_tokens" in row else row.get("input_length"))
        if inp is not None and (type(inp) is not _int or inp < 0):
            raise InputError(f"{where}: field 'input_length' must be an integer >= 1, got {_jtype(inp)}")
        hids = row.get("hash_ids")
        if hids is None:
            raise InputError(f"{where}: missing required field 'hash_ids'")
        if type(hids) is not list:
            raise InputError(f"{where}: field 'hash_ids' must be a list of integers, got {_jtype(hids)}")
        if not hids:
            raise InputError(f"{where}: field 'hash_ids' is empty; every request needs at least one hash id")
        if not set(map(type, hids)) <= {_int}:
            bad = next(h for h in hids if type(h) is not _int)
            raise InputError(f"{where}: field 'hash_ids' must hold integers >= 0, found {_jtype(bad)}")
        lo, hi = min(hids), max(hids)
        if lo < 0 or hi > _U64_MAX:
            bad = lo if lo < 0 else hi
            raise InputError(f"{where}: field 'hash_ids' must hold integers in [0, 2**64), found {bad}")
        if hi > _I64_MAX:
            big_ids = True
        if inp is None:
            inp = -1  # the cap (set with the others' in _mooncake_workload)
        elif inp == 0:
            raise InputError(f"{where}: field 'input_length' is 0; every request needs a positive input_length")
        elif inp > _I64_MAX:
            inp = _I64_MAX  # beyond any cap: clamped or refused with the others (check_workload bounds it)

        # timing
        ts = (_pick(row, "timestamp", "created_time", where) if "created_time" in row else row.get("timestamp"))
        if ts is not None:
            if type(ts) not in (_int, _float):
                raise InputError(f"{where}: field 'timestamp' must be a finite number (ms), got {_jtype(ts)}")
            ts = check_time_value(ts, "timestamp", where)
        delay = (_pick(row, "delay", "delay_ms", where) if "delay_ms" in row else row.get("delay"))
        if delay is not None:
            if type(delay) not in (_int, _float):
                raise InputError(f"{where}: field 'delay' must be a finite number of ms, got {_jtype(delay)}")
            delay = check_time_value(delay, "delay", where)
        sid = row.get("session_id")
        if sid is not None and type(sid) is not str:
            raise InputError(f"{where}: field 'session_id' must be a string, got {_jtype(sid)}")
        key = sid if sid is not None else f"request_{lineno}"
        named = named or sid is not None

        si = sess_index.get(key)
        if si is None:
            si = len(sess_name)
            sess_index[key] = si
            sess_name.append(key)
            first_ts.append(ts)
            first_line.append(lineno)
            last_ts.append(ts)
            n_turns.append(1)
            if delay is not None and delay != 0.0:
                raise InputError(
                    f"{where}: field 'delay' is {_num(delay)} on the first turn of session {key}; "
                    "a first turn cannot have a delay"
                )
            d = 0.0
            turn = 0
        else:
            turn = n_turns[si]
            n_turns[si] = turn + 1
            prev = last_ts[si]
            if delay is not None:
                d, what = delay, "field 'delay'"
            elif ts is not None:
                if prev is None:
                    raise InputError(
                        f"{where}: cannot infer the delay of turn {turn} of session {key} from its "
                        "timestamp: the previous turns have no timestamp (set 'delay')"
                    )
                d, what = ts - prev, f"timestamp {_num(ts)} minus the previous turn's {_num(prev)}"
            else:
                d, what = 0.0, ""
            if d < 0.0 or not math.isfinite(d):
                raise InputError(f"{where}: invalid delay {_num(d)} ms ({what}); delays must be >= 0")
            if ts is not None:
                last_ts[si] = ts
        isl_l.append(inp)
        osl_l.append(out)
        sess_l.append(si)
        turn_l.append(turn)
        delay_l.append(d)
        line_l.append(lineno)
        hlists.append(hids)
        total_ids += len(hids)

    n = len(isl_l)
    if n == 0:
        raise InputError(f"trace file {path} does not contain any requests")
    S = len(sess_name)

    present = [t for t in first_ts if t is not None]
    if len(present) != S and not concurrency_mode:
        si = next(i for i, t in enumerate(first_ts) if t is None)
        raise InputError(
            f"{path}:{first_line[si]}: field 'timestamp' is missing on the first turn of session "
            f"{sess_name[si]}; trace mode needs a first-turn timestamp for every session "
            "(closed-loop replay with replay_concurrency does not)"
        )
    session = np.array(sess_l, dtype=np.int64)
    hash_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, hlists), dtype=np.int64, count=n), out=hash_ptr[1:])
    flat = itertools.chain.from_iterable(hlists)
    if big_ids:
        hash_ids = np.fromiter(flat, dtype=np.uint64, count=total_ids).view(np.int64)
    else:
        hash_ids = np.fromiter(flat, dtype=np.int64, count=total_ids)
    return _Rows(
        isl=np.array(isl_l, dtype=np.int64),
        osl=np.array(osl_l, dtype=np.int64),
        session=session,
        turn=np.array(turn_l, dtype=np.int64),
        delay_ms=np.array(delay_l, dtype=np.float64),
        first_ts=np.array([np.nan if t is None else t for t in first_ts], dtype=np.float64),
        hash_ptr=hash_ptr,
        hash_ids=hash_ids,
        line=np.array(line_l, dtype=np.int64),
        session_ids={si: k for k, si in sess_index.items() if k != f"request_{first_line[si]}"},
    )


def session_labels(workload, concurrency_mode, single_path):
    """The ``session_id`` / ``turn_index`` Dynamo 1.4.2 writes on each row's JSONL record, or None
    when it writes null: the rows of a trace run through its workload driver -- closed loop
    (``replay_concurrency``), or a trace with a multi-turn session -- on the multi-worker path or
    disaggregated; never on the single-worker path (docs/decisions/0026).
    Returns (object array of str, int64 turn) or None."""
    if workload.session_ids is None or single_path:
        return None
    counts = np.diff(workload.session_ptr)
    if not concurrency_mode and not (counts > 1).any():
        return None
    first_rows = workload.session_rows[workload.session_ptr[:-1]]
    names = np.array([workload.session_ids.get(si, f"request_{ln}")
                      for si, ln in enumerate(workload.line[first_rows].tolist())], dtype=object)
    return names[workload.session], workload.turn.astype(np.int64)


# ----------------------------------------------------------------------------- Azure CSV
_AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def load_azure_csv(
    path,
    trace_block_size: int = DEFAULT_TRACE_BLOCK_SIZE,
    arrival_speedup_ratio: float = 1.0,
    concurrency_mode: bool = False,
) -> Workload:
    """Read an Azure LLM inference trace CSV (Azure/AzurePublicDataset, 2023 and 2024 releases).

    Header ``TIMESTAMP,ContextTokens,GeneratedTokens`` (names matched case-insensitively, any
    column order); timestamps like ``2023-11-16 18:15:46.6805900`` (up to 9 fractional digits, read
    to the nanosecond); a missing trailing newline and CRLF line ends are fine; blank lines are
    skipped. Each row is an independent one-turn session with a unique prompt (``hash_ptr`` and
    ``hash_ids`` are None): ``isl = ContextTokens``, ``osl = GeneratedTokens``, arrival = ms since
    the earliest row (the first row of a time-sorted file) divided by ``arrival_speedup_ratio``.

    Zero-token rows (decision): a row with ``ContextTokens == 0`` cannot be replayed (Dynamo rejects
    a request without prompt tokens), so it is **skipped**, reported once in a :class:`TraceWarning`
    with the count and the first line; ``Workload.line`` keeps the source lines of the kept rows. A
    row with ``GeneratedTokens == 0`` is kept (Dynamo allows ``max_output_tokens == 0``: it completes
    after prefill without a token). Negative or non-integer counts and bad timestamps are errors.
    ``trace_block_size`` is only recorded (there are no hash ids); ``concurrency_mode`` is accepted
    for symmetry with :func:`load_mooncake` (every row has a timestamp anyway).
    """
    tbs = _check_tbs(trace_block_size)
    ratio = _check_ratio(arrival_speedup_ratio)
    path = os.fspath(path)
    text = _open_text(path)
    lines = text.splitlines()
    hdr_idx = next((i for i, ln in enumerate(lines) if ln.strip()), None)
    if hdr_idx is None:
        raise InputError(f"trace file {path} does not contain any requests")
    header = [h.strip() for h in lines[hdr_idx].split(",")]
    lower = [h.lower() for h in header]
    cols = []
    for want in _AZURE_COLUMNS:
        if want.lower() not in lower:
            raise InputError(
                f"{path}:{hdr_idx + 1}: Azure CSV header must have columns {','.join(_AZURE_COLUMNS)}, "
                f"got {lines[hdr_idx].strip()!r}"
            )
        cols.append(lower.index(want.lower()))
    ncol = len(header)
    ts_s, ctx_s, gen_s, line_l = [], [], [], []
    for i in range(hdr_idx + 1, len(lines)):
        ln = lines[i]
        if not ln.strip():
            continue
        parts = ln.split(",")
        if len(parts) != ncol:
            raise InputError(f"{path}:{i + 1}: expected {ncol} comma-separated fields, got {len(parts)}")
        ts_s.append(parts[cols[0]].strip())
        ctx_s.append(parts[cols[1]].strip())
        gen_s.append(parts[cols[2]].strip())
        line_l.append(i + 1)
    if not line_l:
        raise InputError(f"trace file {path} does not contain any requests")
    line = np.array(line_l, dtype=np.int64)
    ctx = _parse_counts(ctx_s, line, path, "ContextTokens")
    gen = _parse_counts(gen_s, line, path, "GeneratedTokens")
    t_ns = azure_timestamps_ns(ts_s, line, path)
    keep = ctx > 0
    dropped = int((~keep).sum())
    if dropped:
        warnings.warn(
            f"{path}: skipped {dropped} of {len(line_l)} rows with ContextTokens = 0 "
            f"(first: line {int(line[~keep][0])}); a request needs at least one prompt token",
            TraceWarning,
            stacklevel=2,
        )
        if dropped == len(line_l):
            raise InputError(f"trace file {path} has no row with ContextTokens > 0")
        ctx, gen, t_ns, line = ctx[keep], gen[keep], t_ns[keep], line[keep]
    with np.errstate(over="ignore"):  # a tiny ratio: check_workload names the row out of range
        arrivals = (t_ns - t_ns.min()).astype(np.float64) / 1e6 / ratio
    return check_workload(_single_turn_workload(ctx, gen, arrivals, line, tbs, path))


def _parse_counts(strings, line, path, name) -> np.ndarray:
    return azure_counts(strings, line, path, name)


def _single_turn_workload(isl, osl, arrivals, line, tbs, source, hash_ptr=None, hash_ids=None) -> Workload:
    n = int(isl.shape[0])
    idx = np.arange(n, dtype=np.int64)
    return Workload(
        isl=np.asarray(isl, dtype=np.int64),
        osl=np.asarray(osl, dtype=np.int64),
        session=idx,
        turn=np.zeros(n, dtype=np.int64),
        delay_ms=np.zeros(n, dtype=np.float64),
        session_arrival_ms=np.asarray(arrivals, dtype=np.float64),
        session_ptr=np.arange(n + 1, dtype=np.int64),
        session_rows=idx.copy(),
        hash_ptr=hash_ptr,
        hash_ids=hash_ids,
        trace_block_size=int(tbs),
        line=np.asarray(line, dtype=np.int64),
        source=source,
    )


# ----------------------------------------------------------------------------- dispatch
def load_trace(
    path,
    trace_format: str = "mooncake",
    trace_block_size: Optional[int] = DEFAULT_TRACE_BLOCK_SIZE,
    arrival_speedup_ratio: float = 1.0,
    concurrency_mode: bool = False,
    dynamo_version: str = "1.6.1",
    weka_nested_timestamp_basis: Optional[str] = None,
    shared_prefix_ratio: float = 0.0,
    num_prefix_groups: int = 0,
) -> Workload:
    """Load one trace file by format.

    ``trace_format`` is ``"mooncake"`` (default; a path ending in ``.csv`` is read as Azure CSV),
    ``"mooncake-delta"`` (``fastsim.traces.mooncake_delta``), ``"applied_compute_agentic"``
    (``fastsim.traces.applied_compute``; closed loop only), the agentic graphs ``"agentic_mooncake"``,
    ``"weka"`` and ``"dynamo"`` (``fastsim.traces.agentic_run``) or ``"azure"``; anything else raises
    :class:`InputError`. ``trace_block_size`` None means 512 (Dynamo's default). ``dynamo_version``
    decides what a Mooncake row longer than its hash ids gives (see :func:`load_mooncake`).
    """
    if not isinstance(trace_format, str):
        raise InputError(f"trace_format must be a string, got {trace_format!r}")
    fmt = trace_format
    if fmt in ("agentic_mooncake", "agentic-mooncake", "weka", "dynamo"):
        from fastsim.traces import agentic_run

        return agentic_run.load(path, fmt, arrival_speedup_ratio, weka_nested_timestamp_basis)
    p = os.fspath(path)
    if fmt in ("azure", "azure_csv", "azure-csv") or (fmt == "mooncake" and p.lower().endswith((".csv", ".csv.gz"))):
        loader, extra = load_azure_csv, {}
    elif fmt == "mooncake":
        loader, extra = load_mooncake, {"dynamo_version": dynamo_version}
    elif fmt == "applied_compute_agentic":
        if not concurrency_mode:
            raise InputError("trace_format='applied_compute_agentic' requires replay_concurrency because the "
                             "source traces do not include first-turn timestamps")
        from fastsim.traces.applied_compute import load_applied_compute_agentic

        loader = load_applied_compute_agentic
        extra = {"shared_prefix_ratio": shared_prefix_ratio, "num_prefix_groups": num_prefix_groups}
    elif fmt == "mooncake-delta":
        from fastsim.traces.mooncake_delta import load_mooncake_delta

        loader, extra = load_mooncake_delta, {"dynamo_version": dynamo_version}
    else:
        loader = None
    if loader is not None:
        tbs = _check_tbs(trace_block_size)
        # a sweep's configurations share one reading (fastsim/reuse.py)
        if loader.__name__ == "load_applied_compute_agentic":
            return reuse.trace(p, (loader.__name__, tbs, arrival_speedup_ratio, shared_prefix_ratio, num_prefix_groups),
                               lambda: loader(p, trace_block_size=tbs, arrival_speedup_ratio=arrival_speedup_ratio,
                                              **extra))
        return reuse.trace(p, (loader.__name__, tbs, arrival_speedup_ratio, bool(concurrency_mode), dynamo_version),
                           lambda: loader(p, trace_block_size=tbs, arrival_speedup_ratio=arrival_speedup_ratio,
                                          concurrency_mode=concurrency_mode, **extra))
    raise InputError(
        f"trace_format must be one of {', '.join(repr(f) for f in TRACE_FORMATS)}, got {trace_format!r}"
    )


# ----------------------------------------------------------------------------- synthetic
_PREFIX_TAG = 0xD00D << 48
# Dynamo 1.4.2 draws prefix groups from StdRng::seed_from_u64(42) whatever --arrival-seed is (the
# binding's fixed SyntheticTraceSpec seed); arrivals use their own StdRng(arrival_seed).
_GROUP_SEED = 42


def _req_int(value, name, lo=1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputError(f"{name} must be an integer >= {lo}, got {value!r}")
    if value < lo:
        raise InputError(f"{name} must be at least {lo}, got {value}")
    return int(value)


def _req_float(value, name, positive=False) -> float:
    ok = not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)
    if not ok or value < 0 or (positive and value == 0):
        what = "positive" if positive else "non-negative"
        raise InputError(f"{name} must be a finite {what} number, got {value!r}")
    return float(value)


def _round_half_away(x: float) -> int:
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def synthetic(
    input_tokens: int,
    output_tokens: int,
    request_count: int,
    arrival_interval_ms: Optional[float] = None,
    request_rate: Optional[float] = None,
    arrival_seed: int = 42,
    turns_per_session: int = 1,
    inter_turn_delay_ms: float = 0.0,
    replay_concurrency: Optional[int] = None,
    arrival_speedup_ratio: float = 1.0,
    shared_prefix_ratio: float = 0.0,
    num_prefix_groups: int = 0,
    block_size: int = 64,
) -> Workload:
    """Dynamo's synthetic workload (``--input-tokens/--output-tokens/--request-count``; notes 2.1-2.2).

    ``request_count`` sessions of ``turns_per_session`` turns, every turn ``input_tokens`` prompt and
    ``output_tokens`` output tokens. As in Dynamo, exactly one load controller must be given:

    * ``arrival_interval_ms``: session ``s`` arrives at ``s`` accumulated gaps of
      ``1000 / (1000 / interval)`` ms (Dynamo's ConstantQps, summed one gap at a time, which matches
      1.4.2 bit for bit); 0 means a burst at t = 0.
    * ``request_rate`` (requests/s): Poisson arrivals, first at 0, then ``t += gap`` with
      ``gap = -(1000 / rate) * ln(1 - U)``, ``U = random::<f64>()`` from Rust's
      ``StdRng::seed_from_u64(arrival_seed)`` (ChaCha12; :mod:`fastsim.rust_rng`): bit-identical
      to Dynamo 1.4.2 (verified on 6 seed/rate pairs, 24 arrivals each, and reference case V10).
    * ``replay_concurrency``: closed loop; arrivals are unused (all 0).

    Arrivals and ``inter_turn_delay_ms`` (delay of turns k > 0) are divided by
    ``arrival_speedup_ratio``. Each turn's prompt is independent (turn k+1 does not contain turn k).
    Without a shared prefix every prompt is unique (``hash_ptr``/``hash_ids`` None). With
    ``shared_prefix_ratio > 0`` and ``num_prefix_groups > 0``, each session draws a group
    ``rng.random_range(0..G)`` (rand 0.9, u32 Canon sampling) from a separate
    ``StdRng::seed_from_u64(42)``: Dynamo 1.4.2's group draws ignore ``arrival_seed`` and the
    arrival draws (verified by experiment) and each turn's first
    ``min(round(ceil(isl / block_size) * ratio), nb)`` blocks (round half away from zero) are that
    group's prefix blocks; the rest are fresh ids counted from 1. Hash ids stand for one engine
    block each (``trace_block_size = block_size``, as Dynamo's spec uses the engine block size).
    Prefix ids are ``0xD00D << 48 | g << 32 | (g * pb + j)``: distinct per group even in their low
    32 bits (Dynamo 1.4.2 keeps groups apart; verified with 2 and 8 groups).

    Validation (InputError naming the argument): token counts and ``request_count`` >= 1,
    ``turns_per_session`` >= 1 (Dynamo 1.4.2 silently treats 0 as 1; fastsim rejects it),
    interval / delay finite >= 0, rate finite > 0, concurrency >= 1, ratio in [0, 1] (Dynamo lets
    some negative ratios through; fastsim rejects them), groups >= 0, 0 <= seed < 2^64.
    """
    controllers = (replay_concurrency, request_rate, arrival_interval_ms)
    if sum(v is not None for v in controllers) != 1:
        raise InputError(
            "synthetic replay requires exactly one of replay_concurrency, request_rate, or arrival_interval_ms"
        )
    isl = _req_int(input_tokens, "input_tokens")
    osl = _req_int(output_tokens, "output_tokens")
    count = _req_int(request_count, "request_count")
    turns = _req_int(turns_per_session, "turns_per_session")
    delay = _req_float(inter_turn_delay_ms, "inter_turn_delay_ms")
    ratio = _check_ratio(arrival_speedup_ratio)
    seed = _req_int(arrival_seed, "arrival_seed", lo=0)
    groups = _req_int(num_prefix_groups, "num_prefix_groups", lo=0)
    bs = _req_int(block_size, "block_size")
    share = shared_prefix_ratio
    if isinstance(share, bool) or not isinstance(share, numbers.Real) or not (0.0 <= share <= 1.0):
        raise InputError(f"shared_prefix_ratio must be between 0.0 and 1.0, got {share!r}")
    share = float(share)

    if seed > _U64_MAX:
        raise InputError(f"arrival_seed must be at most {_U64_MAX} (a u64), got {seed}")
    check_synthetic_size(isl, osl, count, turns, bs, share if groups > 0 else 0.0)
    if replay_concurrency is not None:
        _req_int(replay_concurrency, "replay_concurrency")
        arrivals = np.zeros(count, dtype=np.float64)
    elif arrival_interval_ms is not None:
        interval = _req_float(arrival_interval_ms, "arrival_interval_ms")
        arrivals = np.zeros(count, dtype=np.float64)
        if interval > 0 and count > 1:
            gap = 1000.0 / (1000.0 / interval)
            np.cumsum(np.full(count - 1, gap), out=arrivals[1:])  # sequential, like t += gap
    else:
        rate = _req_float(request_rate, "request_rate", positive=True)
        # Dynamo's PoissonQps: StdRng::seed_from_u64(arrival_seed), gaps -mean*ln(1 - U)
        arrivals = rust_rng.poisson_arrivals_ms(seed, 1000.0 / rate, count)
    with np.errstate(over="ignore"):  # a tiny ratio: check_workload names the row out of range
        arrivals = arrivals / ratio

    n = count * turns
    session = np.repeat(np.arange(count, dtype=np.int64), turns)
    turn = np.tile(np.arange(turns, dtype=np.int64), count)
    delays = np.where(turn > 0, delay / ratio, 0.0).astype(np.float64)
    hash_ptr = hash_ids = None
    tbs = bs
    nb = -(-isl // bs)
    pb = min(_round_half_away(nb * share), nb) if (groups > 0 and share > 0) else 0
    if pb > 0:
        if groups > 0xFFFFFFFF:
            raise NotSupportedError("num_prefix_groups >= 2^32 is not supported")
        # one rng.random_range(0..G) per session from Dynamo's fixed StdRng(42), in session order
        g = rust_rng.random_range_u32_array(rust_rng.StdRng(_GROUP_SEED), groups, count).astype(np.uint64)
        g_row = np.repeat(g, turns)
        j = np.arange(pb, dtype=np.uint64)
        prefix = (np.uint64(_PREFIX_TAG) | (g_row[:, None] << np.uint64(32)) | (g_row[:, None] * np.uint64(pb) + j))
        n_unique = nb - pb
        unique = np.arange(1, n * n_unique + 1, dtype=np.uint64).reshape(n, n_unique)
        hash_ids = np.concatenate([prefix, unique], axis=1).reshape(-1).view(np.int64)
        hash_ptr = np.arange(0, n * nb + 1, nb, dtype=np.int64)
    return check_workload(Workload(
        isl=np.full(n, isl, dtype=np.int64),
        osl=np.full(n, osl, dtype=np.int64),
        session=session,
        turn=turn,
        delay_ms=delays,
        session_arrival_ms=arrivals,
        session_ptr=np.arange(0, n + 1, turns, dtype=np.int64),
        session_rows=np.arange(n, dtype=np.int64),
        hash_ptr=hash_ptr,
        hash_ids=hash_ids,
        trace_block_size=tbs,
        line=np.zeros(n, dtype=np.int64),
        source="synthetic",
    ))
