"""The compiled Mooncake scanner (kernels/tracescan.py) against the line-by-line reader.

``load_mooncake`` reads a trace with the scanner and falls back to the line reader whenever the
scanner gives up; a file the scanner takes must give the same arrays, bit for bit, as the line
reader, and a file it must not take (anything the line reader reports) must go to the line reader.
"""

import json
import random
import struct
import warnings
from pathlib import Path

import pytest

from fastsim import workload as wl
from fastsim.errors import InputError
from fastsim.trace_checks import check_workload

HERE = Path(__file__).parent
SHARED = HERE.parent.parent / "shared"
FIELDS = ("isl", "osl", "session", "turn", "delay_ms", "session_arrival_ms", "session_ptr",
          "session_rows", "hash_ptr", "hash_ids", "line")


def bundled_traces():
    """Every Mooncake JSONL the project and the shared folder carry (fixtures, examples, data)."""
    paths = sorted(HERE.glob("data/*.jsonl")) + sorted((HERE.parent / "examples").glob("*.jsonl"))
    for sub in ("data/dynamo", "data/mooncake", "reference/dynamo-1.4.2/inputs",
                "reference/dynamo-1.6.1/inputs"):
        paths += sorted((SHARED / sub).glob("*.jsonl"))
    return paths


def same_rows(a, b):
    for name in wl._Rows._fields:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, dict):
            assert x == y, name
            continue
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert x.tobytes() == y.tobytes(), name  # bit for bit: NaN payloads and signed zeros too


def by_line(path, concurrency_mode=False):
    return wl._mooncake_by_line(wl._decode_text(wl._read_bytes(str(path)), str(path)), str(path),
                                concurrency_mode)


def scanned(path, concurrency_mode=False):
    return wl._mooncake_scanned(wl._read_bytes(str(path)), concurrency_mode)


@pytest.mark.filterwarnings("ignore::fastsim.errors.TraceWarning")
def test_bundled_traces_are_scanned_to_the_same_arrays():
    paths = [p for p in bundled_traces() if p.stat().st_size]
    assert any(p.name == "mooncake_tiny.jsonl" for p in paths)
    taken = 0
    for p in paths:
        try:
            ref = by_line(p)
        except InputError:  # other formats (agentic, request traces): the line reader's error
            assert scanned(p) is None, p
            continue
        rows = scanned(p)
        assert rows is not None, f"the scanner gave up on {p}"
        same_rows(rows, ref)
        taken += 1
        for tbs, ratio in ((512, 1.0), (64, 3.0)):
            w = wl.load_mooncake(p, trace_block_size=tbs, arrival_speedup_ratio=ratio, dynamo_version="1.4.2")
            r, _, _ = wl._mooncake_workload(ref, str(p), tbs, ratio)
            for name in FIELDS:
                assert getattr(w, name).tobytes() == getattr(r, name).tobytes(), (p, name)
    assert taken >= 1


def _number(rng, kind):
    """A JSON number text of the kinds traces hold, including the awkward ones."""
    if kind == "int":
        return str(rng.choice([0, 1, 7, 10**6, rng.randrange(10**15)]))
    if kind == "neg":
        return str(-rng.randrange(1, 10**6))
    digits = "".join(rng.choice("0123456789") for _ in range(rng.randrange(1, 18)))
    cut = rng.randrange(0, len(digits) + 1)
    text = (digits[:cut].lstrip("0") or "0") + "." + (digits[cut:] or "0")
    if rng.random() < 0.3:
        text += rng.choice("eE") + rng.choice(["", "+", "-"]) + str(rng.randrange(0, 12))
    return text


def _unknown_value(rng, depth=0):
    r = rng.random()
    if depth < 3 and r < 0.2:
        return [_unknown_value(rng, depth + 1) for _ in range(rng.randrange(3))]
    if depth < 3 and r < 0.35:
        return {f"k{i}": _unknown_value(rng, depth + 1) for i in range(rng.randrange(3))}
    return rng.choice([None, True, False, "text", "esc\\\"aped\u00e9", 3, -2.5e-3, 12345678901234567890])


def random_trace(rng, n=60):
    """JSONL text with sessions, aliases, nulls, delays, odd numbers, unknown fields and spacing."""
    lines, clock = [], {}
    ascii_only = rng.random() < 0.25  # escaped non-ASCII text: left to the line reader
    for i in range(n):
        row = {}
        out = rng.randrange(0, 50)
        row["output_tokens" if rng.random() < 0.2 else "output_length"] = out
        n_ids = rng.randrange(1, 6)
        row["hash_ids"] = [rng.choice([rng.randrange(100), 2**64 - 1 - rng.randrange(3), 2**63 + i])
                           for _ in range(n_ids)]
        r = rng.random()
        if r < 0.6:
            row["input_tokens" if rng.random() < 0.2 else "input_length"] = rng.randrange(1, 16 * n_ids + 40)
        elif r < 0.7:
            row["input_length"] = None
        sid = rng.choice([None, None, "a", "b", "sess-\u00e9" if rng.random() < 0.2 else "c",
                          f"request_{len(lines) + 3}"])
        if sid is not None:
            row["session_id"] = sid
        key = sid or f"request_{len(lines) + 1}"
        first = key not in clock
        t = clock.get(key, rng.uniform(-100, 1e4)) + (0 if first else rng.uniform(0, 500))
        clock[key] = t
        if rng.random() < 0.9:
            text = _number(rng, rng.choice(["int", "float", "float", "neg"]) if first else "float")
            if not first and float(text) < clock[key]:
                text = repr(t)
            row["created_time" if rng.random() < 0.2 else "timestamp"] = "@" + text  # number text as is
            clock[key] = max(clock[key], float(text))
        elif rng.random() < 0.5:
            row["timestamp"] = None
        if not first and rng.random() < 0.3:
            row["delay_ms" if rng.random() < 0.3 else "delay"] = ("@" + _number(rng, "float"))
        if rng.random() < 0.3:
            row[rng.choice(["extra", "meta", "x"])] = _unknown_value(rng)
        items = list(row.items())
        rng.shuffle(items)
        sep = rng.choice([(", ", ": "), (",", ":"), (" ,\t", " : ")])
        body = sep[0].join(json.dumps(k) + sep[1] + (v[1:] if isinstance(v, str) and v.startswith("@")
                                                       else json.dumps(v, ensure_ascii=ascii_only))
                           for k, v in items)
        lines.append(rng.choice(["", " ", "\t"]) + "{" + rng.choice(["", " "]) + body + "}"
                     + rng.choice(["", " ", "\r"]))
        if rng.random() < 0.05:
            lines.append(rng.choice(["", "   ", "\r"]))
    return "\n".join(lines) + rng.choice(["", "\n"])


@pytest.mark.parametrize("seed", range(40))
def test_random_traces_scan_like_the_line_reader(tmp_path, seed):
    rng = random.Random(seed)
    p = tmp_path / "r.jsonl"
    p.write_text(random_trace(rng), encoding="utf-8")
    for concurrency_mode in (False, True):
        try:
            ref = by_line(p, concurrency_mode)
        except InputError:
            assert scanned(p, concurrency_mode) is None
            continue
        rows = scanned(p, concurrency_mode)
        if rows is not None:
            same_rows(rows, ref)
        r, _, _ = wl._mooncake_workload(ref, str(p), 16, 1.0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                w = wl.load_mooncake(p, trace_block_size=16, concurrency_mode=concurrency_mode,
                                     dynamo_version="1.4.2")
            except InputError:  # times beyond the simulated-time bound: refused whichever reader read it
                with pytest.raises(InputError):
                    check_workload(r)
                continue
        for name in FIELDS:
            assert getattr(w, name).tobytes() == getattr(r, name).tobytes(), name


def test_most_random_traces_are_scanned(tmp_path):
    """The random traces exercise the scanner, not only the fallback."""
    taken = 0
    for seed in range(40):
        p = tmp_path / f"r{seed}.jsonl"
        p.write_text(random_trace(random.Random(seed)), encoding="utf-8")
        taken += scanned(p, True) is not None
    assert taken >= 15


@pytest.mark.parametrize("text", [
    "935.4179999999999", "0.1", "1e22", "1.5e-21", "123456789012345678.9", "-0.5", "5e0", "0.000001",
    "1844674407370955161.5",
])
def test_decimal_timestamps_follow_serde(tmp_path, text):
    p = tmp_path / "t.jsonl"
    p.write_text('{"timestamp": 0, "output_length": 1, "hash_ids": [1]}\n'
                 f'{{"session_id": "s", "timestamp": 0, "output_length": 1, "hash_ids": [1]}}\n'
                 f'{{"session_id": "s", "delay": {text.lstrip("-")}, "timestamp": {text}, "output_length": 1, "hash_ids": [1]}}\n')
    if abs(float(text)) >= 2.0**63:  # beyond the bound on raw times: the line reader names the line
        assert scanned(p) is None
        with pytest.raises(InputError, match="t.jsonl:3"):
            by_line(p)
        return
    ref = by_line(p)
    rows = scanned(p)
    assert rows is not None
    same_rows(rows, ref)
    assert struct.pack("<d", rows.delay_ms[2]) == struct.pack("<d", wl._serde_float(text.lstrip("-")))


@pytest.mark.parametrize("line", [
    '{"timestamp": 0, "output_length": 1, "hash_ids": [1], "output_tokens": 1}',   # alias and name
    '{"timestamp": 0, "output_length": 1, "hash_ids": [1], "timestamp": 2}',       # repeated key
    '{"timestamp": 0, "output_length": 1, "hash_ids": [1], "session_id": "a\\u0062"}',  # escapes
    '{"timestamp": 0, "output_length": 1, "hash_ids": [1], "hash\\u005fids": [2]}',  # escaped key
    '{"timestamp": -0.0, "output_length": 1, "hash_ids": [1]}',                    # signed zero
    '{"timestamp": 12345678901234567, "output_length": 1, "hash_ids": [1]}',       # rounds in Python
    '{"timestamp": 1e23, "output_length": 1, "hash_ids": [1]}',                    # beyond 1e22
    '{"timestamp": 1.5e-22, "output_length": 1, "hash_ids": [1]}',                 # below 1e-22
    '{"timestamp": 18446744073709551615.5, "output_length": 1, "hash_ids": [1]}',  # 2**64 digits
    '{"timestamp": 0, "output_length": 1, "hash_ids": [1], "x": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}',
    '\x0c{"timestamp": 0, "output_length": 1, "hash_ids": [1]}',                  # stripped by Python
])
def test_lines_the_scanner_leaves_to_the_line_reader(tmp_path, line):
    p = tmp_path / "t.jsonl"
    p.write_text(line + "\n", encoding="utf-8")
    assert scanned(p) is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            wl.load_mooncake(p)  # read (or refused) by the line reader
        except InputError:
            pass


@pytest.mark.parametrize("line", [
    '{bad', '[1, 2]', '{"timestamp": 0, "hash_ids": [1]}', '{"timestamp": 0, "output_length": -1, "hash_ids": [1]}',
    '{"timestamp": 0, "output_length": 2.0, "hash_ids": [1]}', '{"timestamp": 0, "output_length": 1, "hash_ids": []}',
    '{"timestamp": 0, "output_length": 1, "hash_ids": [1, -1]}', '{"timestamp": 0, "output_length": 1, "hash_ids": [18446744073709551616]}',
    '{"timestamp": 0, "output_length": 1, "hash_ids": [1.0]}', '{"timestamp": "5", "output_length": 1, "hash_ids": [1]}',
    '{"timestamp": NaN, "output_length": 1, "hash_ids": [1]}', '{"timestamp": 0, "output_length": 1, "hash_ids": [1]} {}',
    '{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": [1]}', '{"output_length": 1, "hash_ids": [1]}',
    '{"timestamp": 0, "output_length": 1, "hash_ids": [1], "delay": 5}', '{"timestamp": 0, "output_length": 1, "hash_ids": [01]}',
    '{"timestamp": 0, "output_length": 1, "hash_ids": [1], "x": [1,]}', '{"timestamp": 0, "output_length": 1, "hash_ids": [1], "x": "\x01"}',
    '{"timestamp": 0, "output_length": 1, "hash_ids": [1],}', '{"timestamp": 0 "output_length": 1, "hash_ids": [1]}',
])
def test_the_scanner_takes_no_line_the_reader_refuses(tmp_path, line):
    p = tmp_path / "t.jsonl"
    p.write_text('{"timestamp": 0, "output_length": 1, "hash_ids": [1]}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"t\.jsonl:2: "):
        wl.load_mooncake(p)
    assert scanned(p) is None
