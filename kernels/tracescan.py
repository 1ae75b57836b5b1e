"""A one-pass scanner of Mooncake JSONL traces: the request columns straight from the file's bytes.

``fastsim/workload.py`` reads a trace with it first and falls back to its line-by-line reader,
which names the file, line and field of any error, whenever the scanner meets something it does not
take. The scanner takes a strict subset of what that reader accepts: one JSON object per line, the
fields the reader knows with plain values (a ``session_id`` without escapes, a null as an absent
value), unknown fields holding any JSON value. A file it takes gives the same columns either way
(``tests/test_trace_scan.py``).

Numbers are converted as Dynamo's trace reader (serde_json without ``float_roundtrip``) and
``workload._serde_float`` convert them: a decimal's digits as one integer below 2**64, converted to
f64 and scaled by an exact power of ten (at most 1e22); anything outside that rule (more digits, a
larger exponent, an integer timestamp of more than 15 digits, which Python rounds) is left to the
line reader.

The helpers are inlined into the scan at numba's IR level: as calls they cost 20-30 ns each (a
quarter of a microsecond per hash id), which made the scan of the 12,031-line conversation trace
take 45 ms instead of 9.
"""

import numpy as np

from fastsim.kernels.jit import inline, kernel_noalloc

# field codes (bit ``1 << code`` of a row's ``seen`` mask) and their names in the file
F_OUT, F_OUT_ALIAS, F_IN, F_IN_ALIAS, F_HASH, F_TS, F_TS_ALIAS, F_DELAY, F_DELAY_ALIAS, F_SID = range(10)
FIELD_NAMES = ("output_length", "output_tokens", "input_length", "input_tokens", "hash_ids",
               "timestamp", "created_time", "delay", "delay_ms", "session_id")
_NAMES = np.zeros((len(FIELD_NAMES), 16), dtype=np.uint8)
_NAME_LEN = np.zeros(len(FIELD_NAMES), dtype=np.int64)
for _i, _f in enumerate(FIELD_NAMES):
    _NAMES[_i, :len(_f)] = np.frombuffer(_f.encode(), dtype=np.uint8)
    _NAME_LEN[_i] = len(_f)
# exact powers of ten (every one up to 1e22 is a double)
_POW10 = np.array([10.0 ** k for k in range(23)])

# row flags: which optional values the row has (a null counts as absent, as in the reader)
HAS_IN, HAS_TS, HAS_DELAY, HAS_SID = 1, 2, 4, 8

_MAX_NUMBER_CHARS = 300  # longer number tokens are the fallback's (Python caps int digits)


@inline
def _ws(b, p, e):
    while p < e:
        c = b[p]
        if c != 32 and c != 9 and c != 13 and c != 10:
            break
        p += 1
    return p


@inline
def _skip_string(b, p, e):
    """Position after the JSON string at ``p`` (which holds its quote), -1 if malformed."""
    if p >= e or b[p] != 34:
        return -1
    p += 1
    while p < e:
        c = b[p]
        if c == 34:
            return p + 1
        if c < 32:
            return -1
        if c == 92:
            p += 1
            if p >= e:
                return -1
            c = b[p]
            if c == 117:  # \uXXXX
                if p + 4 >= e:
                    return -1
                for k in range(1, 5):
                    h = b[p + k]
                    if not ((48 <= h <= 57) or (65 <= h <= 70) or (97 <= h <= 102)):
                        return -1
                p += 4
            elif not (c == 34 or c == 92 or c == 47 or c == 98 or c == 102 or c == 110
                      or c == 114 or c == 116):
                return -1
        p += 1
    return -1


@inline
def _skip_number(b, p, e):
    """Position after the JSON number at ``p``, -1 if malformed (or too long for the fallback's
    Python to convert)."""
    q = p
    if q < e and b[q] == 45:
        q += 1
    if q >= e:
        return -1
    if b[q] == 48:
        q += 1
    elif 49 <= b[q] <= 57:
        while q < e and 48 <= b[q] <= 57:
            q += 1
    else:
        return -1
    if q < e and b[q] == 46:
        q += 1
        if q >= e or not (48 <= b[q] <= 57):
            return -1
        while q < e and 48 <= b[q] <= 57:
            q += 1
    if q < e and (b[q] == 101 or b[q] == 69):
        q += 1
        if q < e and (b[q] == 43 or b[q] == 45):
            q += 1
        if q >= e or not (48 <= b[q] <= 57):
            return -1
        while q < e and 48 <= b[q] <= 57:
            q += 1
    if q - p > _MAX_NUMBER_CHARS:
        return -1
    return q


@inline
def _skip_literal(b, p, e):
    """Position after ``true``, ``false`` or ``null`` at ``p``, -1 otherwise."""
    if p + 4 <= e and b[p] == 116 and b[p + 1] == 114 and b[p + 2] == 117 and b[p + 3] == 101:
        return p + 4
    if p + 4 <= e and b[p] == 110 and b[p + 1] == 117 and b[p + 2] == 108 and b[p + 3] == 108:
        return p + 4
    if (p + 5 <= e and b[p] == 102 and b[p + 1] == 97 and b[p + 2] == 108 and b[p + 3] == 115
            and b[p + 4] == 101):
        return p + 5
    return -1


@inline
def _skip_value(b, p, e, stack):
    """Position after the JSON value at ``p`` (nested objects and arrays included), -1 if
    malformed or nested deeper than ``stack``."""
    depth = 0
    while True:
        p = _ws(b, p, e)
        if p >= e:
            return -1
        c = b[p]
        if c == 123 or c == 91:  # { [
            q = _ws(b, p + 1, e)
            if q < e and b[q] == (125 if c == 123 else 93):
                p = q + 1
            else:
                if depth == stack.shape[0]:
                    return -1
                stack[depth] = c
                depth += 1
                p = q
                if c == 123:
                    p = _skip_string(b, p, e)
                    if p < 0:
                        return -1
                    p = _ws(b, p, e)
                    if p >= e or b[p] != 58:
                        return -1
                    p += 1
                continue
        elif c == 34:
            p = _skip_string(b, p, e)
        elif c == 45 or 48 <= c <= 57:
            p = _skip_number(b, p, e)
        else:
            p = _skip_literal(b, p, e)
        if p < 0:
            return -1
        while True:  # after a value: the next member, or the end of containers
            if depth == 0:
                return p
            p = _ws(b, p, e)
            if p >= e:
                return -1
            c = b[p]
            top = stack[depth - 1]
            if c == 44:
                p += 1
                if top == 123:
                    p = _skip_string(b, _ws(b, p, e), e)
                    if p < 0:
                        return -1
                    p = _ws(b, p, e)
                    if p >= e or b[p] != 58:
                        return -1
                    p += 1
                break
            if (top == 123 and c == 125) or (top == 91 and c == 93):
                depth -= 1
                p += 1
                continue
            return -1


@inline
def _field(b, s, e):
    """The field code of the key between ``s`` and ``e`` (unquoted), -1 if unknown."""
    n = e - s
    for f in range(_NAMES.shape[0]):
        if _NAME_LEN[f] != n:
            continue
        same = True
        for k in range(n):
            if b[s + k] != _NAMES[f, k]:
                same = False
                break
        if same:
            return f
    return -1


@inline
def _uint(b, p, e, limit_digits):
    """(value, position after) of a JSON integer >= 0 at ``p`` with at most ``limit_digits``
    digits and no fraction or exponent; position -1 otherwise."""
    if p >= e or not (48 <= b[p] <= 57):
        return 0, -1
    if b[p] == 48 and p + 1 < e and 48 <= b[p + 1] <= 57:
        return 0, -1
    v = 0
    q = p
    while q < e and 48 <= b[q] <= 57:
        if q - p >= limit_digits:
            return 0, -1
        v = v * 10 + (b[q] - 48)
        q += 1
    if q < e and (b[q] == 46 or b[q] == 101 or b[q] == 69):
        return 0, -1
    return v, q


@inline
def _hash_id(b, p, e):
    """(value as uint64, position after) of an integer in [0, 2**64) at ``p``; position -1
    otherwise."""
    if p >= e or not (48 <= b[p] <= 57):
        return np.uint64(0), -1
    if b[p] == 48 and p + 1 < e and 48 <= b[p + 1] <= 57:
        return np.uint64(0), -1
    v = np.uint64(0)
    q = p
    top = np.uint64(1844674407370955161)  # (2**64 - 1) // 10
    while q < e and 48 <= b[q] <= 57:
        d = np.uint64(b[q] - 48)
        if v > top or (v == top and d > np.uint64(5)):
            return np.uint64(0), -1
        v = v * np.uint64(10) + d
        q += 1
    if q < e and (b[q] == 46 or b[q] == 101 or b[q] == 69):
        return np.uint64(0), -1
    return v, q


@inline
def _real(b, p, e):
    """(value, position after) of a JSON number at ``p`` as the reader converts it: an integer
    exactly (at most 15 digits), a decimal by ``workload._serde_float``'s rule; position -1 where
    that rule would not apply."""
    q = p
    neg = False
    if q < e and b[q] == 45:
        neg = True
        q += 1
    if q >= e or not (48 <= b[q] <= 57):
        return 0.0, -1
    if b[q] == 48 and q + 1 < e and 48 <= b[q + 1] <= 57:
        return 0.0, -1
    m = np.uint64(0)
    top = np.uint64(1844674407370955161)
    nint = 0
    while q < e and 48 <= b[q] <= 57:
        d = np.uint64(b[q] - 48)
        if m > top or (m == top and d > np.uint64(5)):
            return 0.0, -1
        m = m * np.uint64(10) + d
        nint += 1
        q += 1
    is_float = False
    nfrac = 0
    if q < e and b[q] == 46:
        is_float = True
        q += 1
        if q >= e or not (48 <= b[q] <= 57):
            return 0.0, -1
        while q < e and 48 <= b[q] <= 57:
            d = np.uint64(b[q] - 48)
            if m > top or (m == top and d > np.uint64(5)):
                return 0.0, -1
            m = m * np.uint64(10) + d
            nfrac += 1
            q += 1
    ex = 0
    if q < e and (b[q] == 101 or b[q] == 69):
        is_float = True
        q += 1
        eneg = False
        if q < e and (b[q] == 43 or b[q] == 45):
            eneg = b[q] == 45
            q += 1
        if q >= e or not (48 <= b[q] <= 57):
            return 0.0, -1
        nexp = 0
        while q < e and 48 <= b[q] <= 57:
            ex = ex * 10 + (b[q] - 48)
            nexp += 1
            if nexp > 4:
                return 0.0, -1
            q += 1
        if eneg:
            ex = -ex
    if not is_float:
        if nint > 15:  # float(int) of a larger integer rounds: the fallback's Python does that
            return 0.0, -1
        v = float(m)
        return (-v if neg and m != 0 else v), q  # an integer: float(-0) is 0.0
    e10 = ex - nfrac
    if e10 > 22 or e10 < -22:
        return 0.0, -1
    if e10 >= 0:
        v = float(m) * _POW10[e10]
    else:
        v = float(m) / _POW10[-e10]
    return (-v if neg else v), q


@kernel_noalloc
def scan_mooncake_nb(b, start, isl, osl, nids, ts, delay, flags, sid, line, ids, stack):
    """Scan the JSONL bytes ``b`` from ``start``; fill one entry of each column per request.

    Per request: ``isl``/``osl`` (input length 0 where absent), ``nids`` (its number of hash ids,
    which go one after the other into ``ids``, uint64), ``ts``/``delay`` (ms), ``flags``
    (``HAS_*``: which optional values it has), ``sid`` (start and end of its ``session_id``'s
    bytes in ``b``, -1 if none) and ``line`` (1-based). ``stack``: room for nested values of
    unknown fields (deeper ones are left to the line reader).

    Returns ``(rows, ids used, bad line)``: ``bad line`` is 0 when every line was taken, else the
    1-based line the scanner gave up on (the caller then reads the file line by line; ``ids``
    running out of room counts as such a line).
    """
    n = b.shape[0]
    row = 0
    nid = 0
    lineno = 0
    p = start
    while p < n or (p == n and lineno == 0):
        lineno += 1
        e = p
        while e < n and b[e] != 10:
            e += 1
        q = p
        while q < e and (b[q] == 32 or b[q] == 9 or b[q] == 13):
            q += 1
        if q == e:  # blank
            p = e + 1
            if e >= n:
                break
            continue
        if b[q] != 123:
            return row, nid, lineno
        seen = 0
        fl = 0
        r_in = 0
        r_out = 0
        r_ts = 0.0
        r_delay = 0.0
        s0 = -1
        s1 = -1
        id0 = nid
        q = _ws(b, q + 1, e)
        if q < e and b[q] == 125:
            return row, nid, lineno  # {}: no output_length
        while True:
            ks = q + 1
            q = _skip_string(b, q, e)
            if q < 0:
                return row, nid, lineno
            f = -1
            plain = True
            for k in range(ks, q - 1):
                if b[k] == 92:
                    plain = False
                    break
            if not plain:
                return row, nid, lineno  # an escaped key could spell a known name
            f = _field(b, ks, q - 1)
            q = _ws(b, q, e)
            if q >= e or b[q] != 58:
                return row, nid, lineno
            q = _ws(b, q + 1, e)
            if q >= e:
                return row, nid, lineno
            if f >= 0:
                bit = 1 << f
                if seen & bit:
                    return row, nid, lineno  # a repeated key: the last one counts there
                seen |= bit
                is_null = _skip_literal(b, q, e) == q + 4 and b[q] == 110
                if is_null:
                    if f == F_OUT or f == F_OUT_ALIAS or f == F_HASH:
                        return row, nid, lineno
                    q = q + 4
                elif f == F_OUT or f == F_OUT_ALIAS:
                    r_out, q = _uint(b, q, e, 18)
                elif f == F_IN or f == F_IN_ALIAS:
                    r_in, q = _uint(b, q, e, 18)
                    fl |= HAS_IN
                elif f == F_TS or f == F_TS_ALIAS:
                    r_ts, q = _real(b, q, e)
                    fl |= HAS_TS
                elif f == F_DELAY or f == F_DELAY_ALIAS:
                    r_delay, q = _real(b, q, e)
                    fl |= HAS_DELAY
                elif f == F_SID:
                    s0 = q + 1
                    q = _skip_string(b, q, e)
                    if q < 0:
                        return row, nid, lineno
                    for k in range(s0, q - 1):
                        if b[k] == 92:
                            return row, nid, lineno  # escapes: the fallback decodes them
                    s1 = q - 1
                    fl |= HAS_SID
                else:  # hash_ids
                    if b[q] != 91:
                        return row, nid, lineno
                    q = _ws(b, q + 1, e)
                    if q < e and b[q] == 93:
                        return row, nid, lineno  # empty
                    while True:
                        if nid >= ids.shape[0]:
                            return row, nid, lineno
                        ids[nid], q = _hash_id(b, q, e)
                        if q < 0:
                            return row, nid, lineno
                        nid += 1
                        q = _ws(b, q, e)
                        if q < e and b[q] == 44:
                            q = _ws(b, q + 1, e)
                            continue
                        if q < e and b[q] == 93:
                            q += 1
                            break
                        return row, nid, lineno
            else:
                q = _skip_value(b, q, e, stack)
            if q < 0:
                return row, nid, lineno
            q = _ws(b, q, e)
            if q < e and b[q] == 44:
                q = _ws(b, q + 1, e)
                continue
            if q < e and b[q] == 125:
                q += 1
                break
            return row, nid, lineno
        q = _ws(b, q, e)
        if q != e:
            return row, nid, lineno  # data after the object
        # both a field and its alias: the reader's error; output and hash ids are required
        if (seen & 3) == 3 or (seen & 12) == 12 or (seen & 96) == 96 or (seen & 384) == 384:
            return row, nid, lineno
        if (seen & 3) == 0 or (seen & 16) == 0:
            return row, nid, lineno
        isl[row] = r_in
        osl[row] = r_out
        nids[row] = nid - id0
        ts[row] = r_ts
        delay[row] = r_delay
        flags[row] = fl
        sid[row, 0] = s0
        sid[row, 1] = s1
        line[row] = lineno
        row += 1
        p = e + 1
        if e >= n:
            break
    return row, nid, 0
