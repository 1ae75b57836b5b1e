"""The columnar reader of agentic Mooncake traces (``fastsim/traces/agentic_columns.py``) gives the
line-by-line reader's columns for every file it takes, and leaves every other file to it (so that
errors keep their file, line and field)."""

import dataclasses
import gzip
import json

import numpy as np
import pytest

from fastsim.errors import InputError
from fastsim.traces import agentic_mooncake as am
from fastsim.workload import _decode_text, load_trace

HEADER = {"schema": "dynamo.agentic_mooncake", "version": 2, "block_size": 4, "hash_id_scope": "local",
          "source": {"format": "tests", "digest": "x"}}


def row(rid, deps=(), play="p", nb=0, trigger="completion", relation="sequence", delay=3, **kw):
    r = {"request_id": rid, "play_id": play, "session_id": "s" + play, "model": "m", "input_length": 8,
         "output_length": 3, "hash_ids": [1, 2], "not_before_ms": nb,
         "dependencies": [{"request_id": d, "trigger": trigger, "delay_ms": delay, "relation": relation}
                          for d in deps]}
    r.update(kw)
    return r


def text(rows, header=HEADER, sep="\n"):
    return sep.join([json.dumps(header)] + [r if isinstance(r, str) else json.dumps(r) for r in rows]) + sep


def columns(data, path="t.jsonl"):
    """(columnar, line by line) columns of ``data``; the first is None when the reader left it."""
    got = am._read_columns(data, path)
    header, ref = am._read_rows(_decode_text(data, path), path)
    return (None if got is None else got[1]), ref


def same_columns(a, b):
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "where":
            assert [x(i) for i in range(len(a.request_id))] == [y(i) for i in range(len(b.request_id))]
            continue
        if f.name == "dep_where":
            ks = [(i, k) for i in range(len(a.request_id)) for k in range(a.dep_ptr[i + 1] - a.dep_ptr[i])]
            assert [x(*ik) for ik in ks] == [y(*ik) for ik in ks]
            continue
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), f.name
        else:
            assert x == y, f.name


GRAPH = [row("a", nb=10.5), row("b", ["a"], trigger="dispatch", relation="spawn", delay=0.25),
         row("c", ["a", "b"], relation="join"), row("d", play="q", nb=7)]


@pytest.mark.parametrize("rows, sep", [
    (GRAPH, "\n"),
    (GRAPH, "\r\n"),
    (GRAPH + ["", "   "], "\n"),  # blank lines
    ([row("a", nb=935.4179999999999), row("b", ["a"], delay=1234.5678901234567)], "\n"),  # serde's decimals
    ([row("a", nb=1.5e3), row("b", ["a"], delay=2e-3)], "\n"),
    ([dict(row("a"), extra={"x": [1, 2]}, priority=None), row("b", ["a"], recorded_api_time_ms=12.5)], "\n"),
    ([{k: v for k, v in row("a").items() if k not in ("not_before_ms", "dependencies")},
      row("b", ["a"], dependencies=[{"request_id": "a", "trigger": "completion", "relation": "sequence"}])], "\n"),
    ([row("a", source_play_ordinal=1), row("b", play="q", source_play_ordinal=0)], "\n"),
    ([row("a", hash_ids=[2 ** 64 - 1, 2 ** 63])], "\n"),
    ([row("é", session_id="sé\u00a0", model="m\u3000")], "\n"),
    ([json.dumps(row("é", session_id="sé\u00a0", model="\u3000m"), ensure_ascii=False)], "\n"),
])
def test_same_columns_as_the_line_reader(rows, sep):
    got, ref = columns(text(rows, sep=sep).encode())
    assert got is not None
    same_columns(got, ref)


@pytest.mark.parametrize("rows", [
    [row("a", not_before_ms=None)],  # a null, not an absent field
    [row("a", dependencies=None)],
    [row("a", priority=0)],  # fields the columnar reader does not read
    [row("a", output_token_ids=[1, 2, 3])],
    [row("a", input_length=8.0)],
    [row("a", model=" ")],
    [json.dumps(row("a")) + " " + json.dumps(row("b"))],  # two objects on a line
    ['{"request_id": "a", "request_id": "b"}'],
    [row("a", hash_ids=[1, None])],
    [json.dumps(row("a", b="x\u2028y"), ensure_ascii=False)],  # a line break of Python's inside a string
    [row("a", nb=1.0), '{"x": NaN}'],
    [row("a", nb=-0.0)],  # the line reader reads -0 as 0 and -0.0 as -0.0
])
def test_other_files_are_left_to_the_line_reader(rows):
    data = text(rows).encode()
    assert am._read_columns(data, "t.jsonl") is None


@pytest.mark.parametrize("rows, words", [
    ([row("a", not_before_ms=None)], [":2", "'not_before_ms'"]),
    ([row("a"), json.dumps(row("b")) + " {}"], [":3", "not valid JSON"]),
    ([row("a"), '{"request_id": "b", "request_id": "b"}'], [":3", "request_id"]),
    ([row("a"), row("b", ["zz"])], [":3", "'b' depends on request_id 'zz'"]),
    ([row("a"), row("a")], [":3", "duplicates request_id 'a'"]),
    ([row("a", ["b"]), row("b", ["a"])], [":2", "dependency cycle"]),
    ([row("a", hash_ids=[1])], [":2", "needs exactly 2 hash_ids"]),
])
def test_errors_name_file_and_line(tmp_path, rows, words):
    p = tmp_path / "a.jsonl"
    p.write_text(text(rows))
    with pytest.raises(InputError) as err:
        load_trace(p, trace_format="agentic_mooncake")
    for w in words:
        assert w in str(err.value)


def test_priority_is_read_by_the_line_reader(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text(text([row("a", priority=2)]))
    assert load_trace(p, trace_format="agentic_mooncake").priority.tolist() == [2]
    p.write_text(text([row("b", priority=None), row("a", priority=None)], sep="\r\n"))  # the columnar reader's
    assert load_trace(p, trace_format="agentic_mooncake").priority.tolist() == [0, 0]
    p.write_text(text([row("a", priority=2.5)]))
    with pytest.raises(InputError, match=":2: field 'priority' must be an integer"):
        load_trace(p, trace_format="agentic_mooncake")


def test_gzip_and_speedup(tmp_path):
    p = tmp_path / "a.jsonl.gz"
    p.write_bytes(gzip.compress(text(GRAPH).encode()))
    w = load_trace(p, trace_format="agentic_mooncake", arrival_speedup_ratio=2.0)
    g = w.graph
    assert g.request_ids == ["a", "b", "c", "d"] and g.play_ids == ["p", "q"]
    assert g.not_before_ms.tolist() == [5.25, 0.0, 0.0, 3.5]
    assert sorted(g.out_delay.tolist()) == [0.125, 1.5, 1.5]
    assert g.parent_ids == [None, "a", None, None]


def test_cycle_behind_many_plays(tmp_path):
    """The acyclicity check walks many plays level by level with arrays; a cycle is still found
    and named, with the requests behind it."""
    rows = []
    for p in range(100):
        rows += [row(f"p{p:03}a", play=f"p{p:03}"), row(f"p{p:03}b", [f"p{p:03}a"], play=f"p{p:03}")]
    rows += [row("z1", play="z"), row("z2", ["z1", "z4"], play="z"), row("z3", ["z2"], play="z"),
             row("z4", ["z3"], play="z"), row("z5", ["z4"], play="z")]
    p = tmp_path / "a.jsonl"
    p.write_text(text(rows))
    with pytest.raises(InputError, match=r":203: dependency cycle among 4 agentic requests \('z2', 'z3', 'z4', 'z5'\)"):
        load_trace(p, trace_format="agentic_mooncake")
