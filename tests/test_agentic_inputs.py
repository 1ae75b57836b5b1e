"""Bad agentic traces: every error names the file, the line (or the record) and the field, and a
graph that could never finish (a cycle, a missing request, a play without a root) is refused
before anything runs."""

import json

import pytest

from fastsim import run_trace_replay
from fastsim.errors import InputError, NotSupportedError
from fastsim.workload import load_trace

HEADER = {"schema": "dynamo.agentic_mooncake", "version": 2, "block_size": 4, "hash_id_scope": "local",
          "source": {"format": "tests", "digest": "x"}}


def node(rid, deps=(), play="p", nb=0, **kw):
    row = {"request_id": rid, "play_id": play, "session_id": "s", "model": "m", "input_length": 8,
           "output_length": 3, "hash_ids": [1, 2], "not_before_ms": nb,
           "dependencies": [{"request_id": d, "trigger": "completion", "delay_ms": 0, "relation": "sequence"}
                            for d in deps]}
    row.update(kw)
    return row


def agentic(tmp_path, rows, header=HEADER):
    p = tmp_path / "a.jsonl"
    lines = ([json.dumps(header)] if header is not None else []) + [json.dumps(r) for r in rows]
    p.write_text("\n".join(lines) + "\n")
    return p


def load(p, fmt="agentic_mooncake"):
    return load_trace(p, trace_format=fmt)


@pytest.mark.parametrize("rows, words", [
    ([node("a"), node("b", ["zz"])], [":3", "'b' depends on request_id 'zz'", "not in the trace"]),
    ([node("a", ["b"]), node("b", ["a"])], [":2", "dependency cycle", "'a'", "'b'", "can ever start"]),
    ([node("a", ["a"])], [":2", "cannot depend on itself"]),
    ([node("a"), node("b", ["a"], play="q")], [":3", "in play 'q' depends on request 'a' in play 'p'"]),
    ([node("a"), node("a")], [":3", "duplicates request_id 'a'"]),
    ([node("a", dependencies=[{"request_id": "a0", "trigger": "completion", "delay_ms": -5,
                               "relation": "sequence"}]), node("a0")],
     [":2", "dependencies[0]", "'delay_ms'", "-5"]),
    ([node("a", dependencies=[{"request_id": "a0", "trigger": "dispatch", "delay_ms": 1, "relation": "join"}]),
      node("a0")], [":2", "'join' dependency must use the \"completion\" trigger"]),
    ([node("a", dependencies=[{"request_id": "a0", "trigger": "later", "delay_ms": 1, "relation": "spawn"}]),
      node("a0")], [":2", "'trigger'", "'later'"]),
    ([node("a", hash_ids=[1])], [":2", "needs exactly 2 hash_ids, got 1"]),
    ([node("a", input_length=0)], [":2", "'input_length'"]),
    ([node("a", not_before_ms=-1)], [":2", "'not_before_ms'"]),
    ([node("a", model="")], [":2", "'model'"]),
    ([node("a", output_length=-1)], [":2", "'output_length'"]),
    ([node("a", hash_ids=[1, "x"])], [":2", "'hash_ids'"]),
    ([node("a", source_play_ordinal=0), node("b")], [":3", "'source_play_ordinal' must be set on every row"]),
    ([node("a", source_play_ordinal=1)], ["contiguous from 0"]),
])
def test_bad_agentic_mooncake_rows(tmp_path, rows, words):
    p = agentic(tmp_path, rows)
    with pytest.raises(InputError) as ei:
        load(p)
    msg = str(ei.value)
    assert str(p) in msg and all(w in msg for w in words), msg


@pytest.mark.parametrize("header, words", [
    (dict(HEADER, version=1), [":1", "'version' must be 2"]),
    (dict(HEADER, block_size=0), [":1", "'block_size'"]),
    (dict(HEADER, hash_id_scope="global"), [":1", "'hash_id_scope'"]),
    (dict(HEADER, source={"format": "", "digest": "d"}), [":1", "'format'"]),
    ({"schema": "other"}, [":1", "v2 header"]),
])
def test_bad_agentic_mooncake_header(tmp_path, header, words):
    p = agentic(tmp_path, [node("a")], header=header)
    with pytest.raises(InputError) as ei:
        load(p)
    assert all(w in str(ei.value) for w in words), str(ei.value)


def test_legacy_rows_are_refused(tmp_path):
    p = agentic(tmp_path, [node("a")], header=None)
    with pytest.raises(InputError, match="must be the agentic Mooncake v2 header.*not read by Dynamo 1.6.1"):
        load(p)


def test_priorities_follow_their_rows(tmp_path):
    """The graph numbers its rows in request_id order: each keeps its own line's priorities
    (the router queue reads them, decision 0480); a bad one names its line."""
    p = agentic(tmp_path, [node("b", priority=3, policy_class="gold"), node("a", strict_priority=2), node("c")])
    w = load(p)
    assert w.graph.request_ids == ["a", "b", "c"]
    assert w.priority.tolist() == [0, 3, 0] and w.strict_priority.tolist() == [2, 0, 0]
    p = agentic(tmp_path, [node("b"), node("a", strict_priority=-1)])
    with pytest.raises(InputError, match=r":3: field 'strict_priority' must be an integer in \[0, 4294967295\]"):
        load(p)


def test_empty_and_missing_files(tmp_path):
    p = tmp_path / "e.jsonl"
    p.write_text("\n")
    with pytest.raises(InputError, match="agentic trace is empty"):
        load(p)
    with pytest.raises(InputError, match="agentic trace did not contain any requests"):
        load(agentic(tmp_path, []))
    with pytest.raises(InputError, match="does not exist"):
        load(tmp_path / "nope.jsonl")
    with pytest.raises(InputError, match="weka trace directory .* does not exist"):
        load(tmp_path / "nodir", fmt="weka")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="contains no JSON or JSONL files"):
        load(tmp_path / "empty", fmt="weka")


def rec(rid, start, session="s", dur=10, parent=None, **kw):
    ctx = {"session_id": session}
    if parent:
        ctx["parent_session_id"] = parent
    r = {"schema": "dynamo.request.trace.v1", "event_type": "request_end", "event_time_unix_ms": start + dur,
         "agent_context": ctx,
         "request": {"request_id": rid, "output_tokens": 2, "request_received_ms": start, "total_time_ms": dur,
                     "replay": {"trace_block_size": 4, "input_length": 4, "input_sequence_hashes": [7]}}}
    r.update(kw)
    return r


def dynamo(tmp_path, recs):
    p = tmp_path / "d.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    return p


@pytest.mark.parametrize("recs, words", [
    ([rec("a", 100), rec("b", 105)], [":2", "'b' starts 5 ms before the end of 'a'", "negative wait"]),
    ([rec("a", 100), rec("a", 200)], [":2", "duplicate request_id 'a'"]),
    ([rec("a", 100), dict(rec("b", 200), agent_context=None)], ["cannot mix requests with and without agent_context"]),
    ([rec("a", 100), {"schema": "dynamo.request.trace.v1", "event_type": "tool_end", "event_time_unix_ms": 1,
                      "agent_context": {"session_id": "s"},
                      "tool": {"tool_call_id": "t", "tool_class": "agent",
                               "claude": {"source_request_id": "zz", "execution_mode": "blocking"}}}],
     [":2", "tool 't' references request_id 'zz'"]),
    ([rec("a", 100), {"schema": "dynamo.request.trace.v1", "event_type": "weird", "event_time_unix_ms": 1}],
     [":2", "'event_type'", "'weird'"]),
    ([rec("a", 100, parent="nobody")], [":1", "names parent session 'nobody'"]),
    ([dict(rec("a", 100), schema="v0")], [":1", "'schema'"]),
])
def test_bad_dynamo_records(tmp_path, recs, words):
    p = dynamo(tmp_path, recs)
    with pytest.raises(InputError) as ei:
        load(p, fmt="dynamo")
    msg = str(ei.value)
    assert all(w in msg for w in words), msg


def weka_dir(tmp_path, requests, **kw):
    d = tmp_path / "corpus"
    d.mkdir(exist_ok=True)
    trace = {"id": "w", "models": ["m"], "block_size": 4, "hash_id_scope": "local", "requests": requests}
    trace.update(kw)
    (d / "t.json").write_text(json.dumps(trace))
    return d


def wreq(t, **kw):
    r = {"t": t, "type": "n", "model": "m", "in": 8, "out": 2, "hash_ids": [1, 2], "api_time": 0.1}
    r.update(kw)
    return r


@pytest.mark.parametrize("requests, kw, words", [
    ([wreq(0), wreq(-1)], {}, ["t.json: $.requests[1]", "field 't'"]),
    ([wreq(0), wreq(1, api_time=-2)], {}, ["$.requests[1]", "'api_time'"]),
    ([wreq(0, **{"in": 0})], {}, ["$.requests[0]", "'in' must be positive"]),
    ([wreq(0), {"t": 1, "type": "x"}], {}, ["$.requests[1]", "'type'"]),
    ([wreq(0), {"t": 1, "type": "subagent", "agent_id": "a", "subagent_type": "E", "status": "failed",
               "requests": [wreq(0)]}], {}, ["$.requests[1]", "'status'", "'failed'"]),
    ([wreq(0), {"t": 1, "type": "subagent", "agent_id": "a", "subagent_type": "E", "status": "completed",
               "requests": []}], {}, ["$.requests[1]", "needs replayable requests"]),
    ([wreq(0), {"t": 5, "type": "subagent", "agent_id": "a", "subagent_type": "E", "status": "completed",
               "requests": [wreq(1.0)]}], {"_basis": "absolute"}, ["$.requests[1].requests[0]", "precedes its subagent marker"]),
    ([wreq(0, model="other")], {}, ["absent from its 'models'"]),
    ([wreq(0)], {"hash_id_scope": "global"}, ["'hash_id_scope'"]),
])
def test_bad_weka_traces(tmp_path, requests, kw, words):
    basis = kw.pop("_basis", None)
    d = weka_dir(tmp_path, requests, **kw)
    with pytest.raises(InputError) as ei:
        load_trace(d, trace_format="weka", weka_nested_timestamp_basis=basis)
    msg = str(ei.value)
    assert all(w in msg for w in words), msg


def test_plain_dynamo_trace_is_not_yet(tmp_path):
    r = rec("a", 100)
    del r["agent_context"]
    with pytest.raises(NotSupportedError, match="without agent_context"):
        load(dynamo(tmp_path, [r]), fmt="dynamo")


def test_agentic_options(tmp_path):
    p = agentic(tmp_path, [node("a"), node("b", ["a"])])
    with pytest.raises(InputError, match="requires a configured target model"):
        run_trace_replay(p, trace_format="agentic_mooncake")
    with pytest.raises(InputError, match="agentic_lanes must be at least 1"):
        run_trace_replay(p, trace_format="agentic_mooncake", execution_model="m", agentic_lanes=0)
    with pytest.raises(InputError, match="agentic_mooncake trace format is not supported with replay_concurrency"):
        run_trace_replay(p, trace_format="agentic_mooncake", execution_model="m", replay_concurrency=2)
    with pytest.raises(NotSupportedError, match="1.4.2"):
        run_trace_replay(p, trace_format="agentic_mooncake", execution_model="m", dynamo_version="1.4.2")


def test_a_graph_runs_to_the_end(tmp_path):
    """Two plays of a root, a sub-agent on dispatch and a join: every request ends, each play settles."""
    rows = []
    for p, t0 in (("p", 0), ("q", 50)):
        rows += [node(f"{p}-r", play=p, nb=t0),
                 node(f"{p}-k", play=p, dependencies=[{"request_id": f"{p}-r", "trigger": "dispatch",
                                                       "delay_ms": 3, "relation": "spawn"}]),
                 node(f"{p}-j", [f"{p}-r", f"{p}-k"], play=p)]
    rep = run_trace_replay(agentic(tmp_path, rows), trace_format="agentic_mooncake", execution_model="m",
                           agentic_lanes=1)
    s = rep.summary
    assert s["completed_requests"] == 6 and s["agentic_lifecycle_event_count"] == 3 * 6 + 2
    outcomes = s["agentic_play_outcomes"]
    assert [o["status"] for o in outcomes] == ["completed", "completed"]
    arrival = rep.requests["arrival_time_ms"].tolist()  # rows in request_id order: p-j p-k p-r q-j q-k q-r
    # one lane: play q starts when play p settles, whatever its not_before_ms
    assert arrival[5] == outcomes[0]["settled_at_ms"]
    assert arrival[1] == arrival[2] + 3  # spawned on dispatch


def test_a_sweep_over_lanes(tmp_path):
    """A sweep of an agentic trace: lanes are a grid axis; the nested agentic fields come back as
    JSON text columns."""
    import fastsim

    rows = [node(f"{p}-r", play=p, nb=t0) for p, t0 in (("p", 0), ("q", 5), ("r", 9))]
    spec = {"base": {"trace_files": str(agentic(tmp_path, rows)), "trace_format": "agentic_mooncake",
                     "execution_model": "m"},
            "grid": {"agentic_lanes": [None, 1]}}
    df = fastsim.sweep(spec, executor="serial", progress=False)
    assert df["status"].tolist() == ["ok", "ok"] and df["completed_trajectories"].tolist() == [3, 3]
    outcomes = [json.loads(x) for x in df["agentic_play_outcomes"]]
    assert [o["play_id"] for o in outcomes[1]] == ["p", "q", "r"]
    # one lane: each play starts when the previous one settles
    assert outcomes[1][2]["settled_at_ms"] > outcomes[0][2]["settled_at_ms"]


def test_closed_loops_of_sessions_run_under_142(tmp_path):
    """Dynamo 1.4.2's closed loops of multi-turn sessions are reproduced (docs/decisions/0240, checked
    against recorded runs in tests/test_dynamo142_cases.py): mooncake-delta closed loops and
    applied_compute_agentic run under 1.4.2 as they do under 1.6.1."""
    delta = tmp_path / "d.jsonl"
    delta.write_text(json.dumps({"session_id": "s", "timestamp": 0, "input_length": 8, "output_length": 2,
                                 "hash_ids": [1]}) + "\n")
    rep = run_trace_replay(delta, trace_format="mooncake-delta", replay_concurrency=2, dynamo_version="1.4.2")
    assert rep.summary["completed_requests"] == 1
    applied = tmp_path / "a.jsonl"
    applied.write_text(json.dumps({"num_turns": 0, "input_prompt_length": 8, "assistant_response_length": [],
                                   "tool_call_output_length": [], "tool_call_latency": [],
                                   "final_assistant_response_length": 2}) + "\n")
    for version in ("1.4.2", "1.6.1"):
        rep = run_trace_replay(applied, trace_format="applied_compute_agentic", replay_concurrency=2,
                               dynamo_version=version)
        assert rep.summary["completed_requests"] == 1


@pytest.mark.parametrize("fmt, name", [("agentic_mooncake", "a.jsonl"), ("dynamo", "a.jsonl"),
                                       ("applied_compute_agentic", "a.jsonl"), ("weka", "w.json")])
@pytest.mark.parametrize("bad, words", [('{"a": 1, "a": 2}', ["duplicate key 'a'"]),
                                        ('{"a": NaN}', ["NaN is not valid JSON"])])
def test_every_format_reads_json_as_strictly_as_mooncake(tmp_path, fmt, name, bad, words):
    """One JSON decoder for every trace format: a key given twice, or NaN, names the file."""
    p = tmp_path / name
    p.write_text(bad + "\n")
    with pytest.raises(InputError) as e:
        load_trace(p, trace_format=fmt, concurrency_mode=fmt == "applied_compute_agentic")
    assert str(p) in str(e.value) and all(w in str(e.value) for w in words), str(e.value)
