"""Checks of parsed trace values: sizes and times a simulation can hold, and strict text fields.

The readers in :mod:`fastsim.workload` call these on the values they parsed, so that any reader
(line by line, or a fast path that re-parses to find a bad line) refuses the same inputs with the
same messages: the file, the 1-based line, the field, and what is allowed. Workloads built any other
way (synthetic, from Python) meet the same bounds in :func:`check_workload`, which the simulators
call before they allocate anything.
"""

from __future__ import annotations

import re

import numpy as np

from fastsim.errors import InputError

__all__ = [
    "MAX_TOKENS",
    "MAX_TIME_MS",
    "MAX_RAW_TIME_MS",
    "check_time_value",
    "check_output_length",
    "check_request_tokens",
    "no_duplicate_keys",
    "azure_timestamps_ns",
    "azure_counts",
    "check_workload",
]

# A request's input plus output tokens: the per-request counters are 32-bit.
MAX_TOKENS = 2**31 - 1
# Simulated time stays below 2^53 ns (about 104 days), where a float64 of milliseconds still
# resolves a nanosecond's worth of ordering between events.
MAX_TIME_MS = 2.0**53 / 1e6
# A raw timestamp or delay before normalisation: any real clock in ms (epoch ms is about 1.8e12)
# fits, and differences of two such values stay finite.
MAX_RAW_TIME_MS = 2.0**63

_DAYS = MAX_TIME_MS / 86_400_000.0


def _where_name(value) -> str:
    if isinstance(value, int) and abs(value) >= 10**21:
        return f"an integer of {len(str(abs(value)))} digits"
    return repr(value)


def check_time_value(value, field: str, where: str) -> float:
    """A timestamp or delay in ms from a trace row (an int or float; the caller checked the type):
    finite and within +-2^63 ms. Returns it as float. Integers of any size are compared exactly
    (no OverflowError from converting them)."""
    if isinstance(value, int):
        if -MAX_RAW_TIME_MS <= value <= MAX_RAW_TIME_MS:
            return float(value)
    elif value == value and -MAX_RAW_TIME_MS <= value <= MAX_RAW_TIME_MS:
        return float(value)
    raise InputError(
        f"{where}: field '{field}' is {_where_name(value)}; it must be a finite number of ms "
        f"within +-2^63"
    )


def check_output_length(value: int, where: str) -> int:
    """``output_length`` of a trace row (an int >= 0): at most MAX_TOKENS."""
    if value > MAX_TOKENS:
        raise InputError(
            f"{where}: field 'output_length' is {_where_name(value)}; at most {MAX_TOKENS} tokens "
            "are supported"
        )
    return value


def check_request_tokens(isl: int, osl: int, where: str) -> None:
    """A row's input length (after Dynamo's clamp to ``len(hash_ids) * trace_block_size``) plus its
    output length: at most MAX_TOKENS, checked before any per-block state is built."""
    if isl + osl > MAX_TOKENS:
        raise InputError(
            f"{where}: input_length {isl} (after the clamp to len(hash_ids) * trace_block_size) plus "
            f"output_length {osl} is {isl + osl} tokens; at most {MAX_TOKENS} are supported"
        )


class DuplicateKeyError(ValueError):
    """A JSON object names a key twice (raised inside the JSON decoder)."""


def no_duplicate_keys(pairs):
    """``object_pairs_hook`` of the trace reader's JSON decoder: a key given twice is an error
    (the last one would otherwise win silently), as in the engine args."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(f"duplicate key '{key}'; give each field once")
            seen.add(key)
    return out


# ----------------------------------------------------------------------------- Azure CSV
# A full date-time: date, a space or T, hours:minutes:seconds, up to 9 fractional digits, and an
# optional UTC offset (Z, +HH:MM, +HHMM, +HH).
_DATETIME = r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?"
_OFFSET = r"(?:Z|[+-]\d{2}(?::?\d{2})?)"
_DATETIME_RE = re.compile(_DATETIME + _OFFSET + "?", re.ASCII)
_ALL_DATETIMES_RE = re.compile(f"(?:{_DATETIME}\n)*{_DATETIME}", re.ASCII)
_OFFSET_RE = re.compile(f"({_DATETIME})({_OFFSET})?", re.ASCII)
_COUNT_RE = re.compile(r"\d+", re.ASCII)
_ALL_COUNTS_RE = re.compile(r"(?:\d+\n)*\d+", re.ASCII)
_TS_EXAMPLE = "'2023-11-16 18:15:46.6805900'"


def _bad_timestamp(path, line, s):
    return InputError(
        f"{path}:{line}: field 'TIMESTAMP' must be a full date-time like {_TS_EXAMPLE} "
        f"(optionally with a UTC offset such as 'Z' or '+01:00'), got {s!r}"
    )


def azure_timestamps_ns(strings, line, path) -> np.ndarray:
    """Azure ``TIMESTAMP`` strings as int64 ns since the epoch (UTC where an offset is given).

    Each must be a full date-time (a bare ``2023`` or a date alone is refused, naming the line);
    a timezone suffix is converted to UTC here (numpy would parse it with a deprecation warning).
    Rows whose span exceeds the simulated-time bound are refused by :func:`check_workload` later."""
    joined = "\n".join(strings)
    if strings and _ALL_DATETIMES_RE.fullmatch(joined):
        offsets = None  # the common case: naive date-times, checked in one pass
    else:
        offsets = np.zeros(len(strings), dtype=np.int64)
        plain = list(strings)
        for j, s in enumerate(strings):
            m = _OFFSET_RE.fullmatch(s)
            if m is None:
                raise _bad_timestamp(path, int(line[j]), s)
            plain[j] = m.group(1)
            off = m.group(2)
            if off and off != "Z":
                sign = -1 if off[0] == "-" else 1
                digits = off[1:].replace(":", "")
                hours, minutes = int(digits[:2]), int(digits[2:] or 0)
                if hours > 23 or minutes > 59:
                    raise _bad_timestamp(path, int(line[j]), s)
                offsets[j] = sign * (hours * 60 + minutes) * 60_000_000_000
        strings = plain
    try:
        t_ns = np.array(strings, dtype="datetime64[ns]").astype(np.int64)
    except (ValueError, OverflowError):
        for j, s in enumerate(strings):
            try:
                np.datetime64(s, "ns")
            except (ValueError, OverflowError):
                raise _bad_timestamp(path, int(line[j]), s) from None
        raise  # pragma: no cover
    if offsets is not None:
        t_ns = t_ns - offsets  # local time minus its offset is UTC
    if t_ns.size and int(t_ns.max()) - int(t_ns.min()) > MAX_TIME_MS * 1e6:
        j = int(np.argmax(t_ns))
        raise InputError(
            f"{path}:{int(line[j])}: field 'TIMESTAMP' {strings[j]!r} is more than 2^53 ns (about "
            f"{_DAYS:.0f} days) after the earliest row; the simulated time must stay below that"
        )
    return t_ns


def azure_counts(strings, line, path, name) -> np.ndarray:
    """Azure token counts: plain decimal digits (``1_000``, ``+5``, ``1e3`` are refused), each at
    most MAX_TOKENS; returns int64."""
    if not (strings and _ALL_COUNTS_RE.fullmatch("\n".join(strings))):
        for j, s in enumerate(strings):
            if _COUNT_RE.fullmatch(s) is None:
                if s.startswith("-") and _COUNT_RE.fullmatch(s[1:]):
                    raise InputError(f"{path}:{int(line[j])}: field '{name}' must be an integer >= 0, got {s}")
                raise InputError(
                    f"{path}:{int(line[j])}: field '{name}' must be an integer >= 0 written in "
                    f"digits only, got {s!r}"
                )
    big = [j for j, s in enumerate(strings) if len(s) > 10 and int(s) > MAX_TOKENS] if any(
        len(s) > 10 for s in strings) else []
    if big:
        j = big[0]
        raise InputError(
            f"{path}:{int(line[j])}: field '{name}' is {strings[j]}; at most {MAX_TOKENS} tokens "
            "are supported"
        )
    return np.array(strings, dtype=np.int64) if strings else np.zeros(0, dtype=np.int64)


def check_synthetic_size(input_tokens, output_tokens, request_count, turns, block_size, shared_ratio) -> None:
    """A synthetic workload's sizes, before its arrays are made: a request of at most MAX_TOKENS
    tokens, and rows (with their prefix-block ids when prompts share prefixes) that fit in the
    available memory."""
    from fastsim import memory

    if input_tokens + output_tokens > MAX_TOKENS:
        raise InputError(
            f"input_tokens {input_tokens} plus output_tokens {output_tokens} is "
            f"{input_tokens + output_tokens} tokens; at most {MAX_TOKENS} are supported"
        )
    rows = request_count * turns
    per_row = 96 + memory.request_bytes()
    if shared_ratio > 0:
        per_row += 8 * -(-input_tokens // block_size)
    need = rows * per_row
    avail = memory.available_bytes()
    if avail is not None and need > avail:
        raise memory.InsufficientMemoryError(
            f"request_count {request_count} x turns_per_session {turns} = {rows} requests need an "
            f"estimated {need / 2**30:.1f} GB ({per_row} bytes each), more than the "
            f"{avail / 2**30:.1f} GB this machine has available; lower request_count"
        )


# ----------------------------------------------------------------------------- whole workload
def _row_name(workload, row) -> str:
    line = int(workload.line[row]) if workload.line is not None and workload.line.shape[0] > row else 0
    if line > 0:
        return f"{workload.source}:{line}"
    return f"{workload.source} request {row}" if workload.source != "synthetic" else f"synthetic request {row}"


def row_name(workload, row) -> str:
    """Where row ``row`` of a workload came from: ``file:line``, else its index."""
    return _row_name(workload, row)


def check_workload(workload, speedup_hint: str = "arrival_speedup_ratio"):
    """The bounds a simulation needs, on a whole workload (any reader, synthetic, or built in
    Python), checked before anything is allocated for it: every request's input plus output at
    most MAX_TOKENS; every session's arrival, and its arrival plus its turns' delays, finite and
    below MAX_TIME_MS (2^53 ns). Errors name the first offending row's file and line (or index).
    Returns the workload."""
    isl, osl = workload.isl, workload.osl
    n = int(isl.shape[0])
    if n == 0:
        return workload
    with np.errstate(over="ignore", invalid="ignore"):
        total = isl.astype(np.float64) + osl.astype(np.float64)
    if not total.max() <= MAX_TOKENS:
        row = int(np.argmax(total > MAX_TOKENS))
        raise InputError(
            f"{_row_name(workload, row)}: input length {int(isl[row])} plus output length "
            f"{int(osl[row])} is {int(isl[row]) + int(osl[row])} tokens; at most {MAX_TOKENS} are "
            "supported (a huge input_length is clamped to len(hash_ids) * trace_block_size)"
        )
    arrival = workload.session_arrival_ms
    with np.errstate(over="ignore", invalid="ignore"):
        span = arrival + np.bincount(workload.session, weights=workload.delay_ms,
                                     minlength=arrival.shape[0])
        bad_rows = ~(np.abs(workload.delay_ms) <= MAX_TIME_MS)
        bad_sessions = ~(np.abs(span) <= MAX_TIME_MS) & ~np.isnan(arrival)
    if bad_rows.any() or bad_sessions.any():
        if bad_rows.any():
            row = int(np.argmax(bad_rows))
            what = f"a delay of {float(workload.delay_ms[row])!r} ms"
        else:
            s = int(np.argmax(bad_sessions))
            row = int(workload.session_rows[workload.session_ptr[s]])
            what = (f"an arrival of {float(arrival[s])!r} ms after the first request" if not
                    abs(arrival[s]) <= MAX_TIME_MS else
                    f"an arrival plus its turns' delays of {float(span[s])!r} ms")
        raise InputError(
            f"{_row_name(workload, row)}: {what} (after dividing by {speedup_hint}) is beyond the "
            f"simulated-time limit of 2^53 ns ({MAX_TIME_MS:.6g} ms, about {_DAYS:.0f} days); check "
            f"the timestamps and delays, or raise {speedup_hint} (--arrival-speedup-ratio)"
        )
    return workload
