"""Write the deterministic inputs of the trace-format cases (run from this folder).

``python make_inputs.py``: ``inputs/delta_*.jsonl`` (mooncake-delta sessions: the first turn a full
prompt, later turns input deltas with a ``delay`` or a ``timestamp``), ``inputs/agentic_*.jsonl``
(agentic_mooncake v2 plays: growing conversations, sub-agents spawned on dispatch and joined) and
``inputs/dynamo_*.jsonl`` (Dynamo request-trace records of agents with sub-agent sessions, named by
blocking or background tool records, or by timestamps alone).
"""
import gzip
import json
import os
import random


def delta_trace(path, seed, sessions, turns, first_blocks, delta_blocks, out, gap, delay, groups,
                use_timestamps=False, tbs=512, ragged=False):
    rnd = random.Random(seed)
    nid = 1000
    with open(path, "w") as f:
        for s in range(sessions):
            ts = s * gap
            n_turns = rnd.randint(1, turns) if ragged else turns
            t_ms = ts
            for t in range(n_turns):
                if t == 0:
                    ids = ([s % groups] if groups else []) + list(range(nid, nid + first_blocks - (1 if groups else 0)))
                    nid += first_blocks - (1 if groups else 0)
                    blocks = first_blocks
                else:
                    blocks = rnd.randint(1, delta_blocks)
                    ids = list(range(nid, nid + blocks))
                    nid += blocks
                row = {"session_id": f"s{s}", "input_length": tbs * blocks - rnd.randint(0, tbs - 1),
                       "output_length": max(1, out + rnd.randint(-out // 2, out // 2)), "hash_ids": ids}
                if use_timestamps:
                    row["timestamp"] = t_ms
                    t_ms += delay + rnd.randint(0, delay)
                else:
                    row["timestamp"] = ts
                    if t:
                        row["delay"] = delay + rnd.randint(0, delay)
                f.write(json.dumps(row) + "\n")




AGENTIC_HEADER = {"schema": "dynamo.agentic_mooncake", "version": 2, "block_size": 64, "hash_id_scope": "local",
                  "source": {"format": "fastsim-tests", "digest": "agentic"}}


def agentic_trace(path, seed, plays, turns, kids, gap, sys_blocks=2, models=("m-a",), spread=False, ordinals=False):
    """Plays of a main conversation whose context grows turn by turn (each turn repeats the
    history's hash ids), spawning ``kids`` sub-agents on dispatch after its first turn and joining
    them before its next turn; ``spread``: some later turns also carry a not_before_ms."""
    rnd = random.Random(seed)
    nid = 10_000
    rows = []
    for p in range(plays):
        ctx = list(range(sys_blocks))  # a system prompt shared by every play
        t0 = p * gap + rnd.randint(0, gap // 3)
        prev = None
        for t in range(turns):
            add = rnd.randint(1, 3)
            ctx = ctx + list(range(nid, nid + add))
            nid += add
            rid = f"p{p:02d}-t{t}"
            deps = []
            if prev is not None:
                deps.append({"request_id": prev, "trigger": "completion", "delay_ms": rnd.choice([0, 1, 50, 400]),
                             "relation": "sequence"})
            if t == 2 and kids:
                for k in range(kids):
                    deps.append({"request_id": f"p{p:02d}-k{k}", "trigger": "completion",
                                 "delay_ms": rnd.randint(0, 20), "relation": "join"})
            nb = t0 if t == 0 else (t0 + 700 * t if spread and rnd.random() < 0.5 else 0)
            rows.append({"request_id": rid, "play_id": f"play{p:02d}", "session_id": f"p{p}-main",
                         "model": models[p % len(models)], "input_length": 64 * len(ctx) - rnd.randint(0, 63),
                         "output_length": rnd.randint(20, 160), "hash_ids": list(ctx), "not_before_ms": nb,
                         "dependencies": deps})
            if t == 0:
                for k in range(kids):
                    kctx = ctx[:sys_blocks] + list(range(nid, nid + 2))
                    nid += 2
                    rows.append({"request_id": f"p{p:02d}-k{k}", "play_id": f"play{p:02d}",
                                 "session_id": f"p{p}-sub{k}", "model": models[-1],
                                 "input_length": 64 * len(kctx) - rnd.randint(0, 63),
                                 "output_length": rnd.randint(10, 80), "hash_ids": kctx, "not_before_ms": 0,
                                 "dependencies": [{"request_id": rid, "trigger": "dispatch",
                                                   "delay_ms": rnd.randint(0, 30), "relation": "spawn"}]})
            prev = rid
    if ordinals:  # plays taken last first: source_play_ordinal, not play_id, orders them
        for r in rows:
            r["source_play_ordinal"] = plays - 1 - int(r["play_id"][4:])
    rnd.shuffle(rows)  # file order does not matter: nodes are numbered by request_id
    with open(path, "w") as f:
        f.write(json.dumps(AGENTIC_HEADER) + "\n")
        for r in rows:
            f.write(json.dumps(r) + "\n")


def dynamo_trace(path, seed, parents, turns, background=False, tools=True, t0=1_700_000_000_000, prefix="a"):
    """Dynamo request-trace records: a parent session of ``turns`` requests per agent; after its
    first request a child session of two requests (a tool record names it unless ``tools`` is
    False: the spawn and join then come from the timestamps)."""
    rnd = random.Random(seed)
    recs = []
    nid = 1
    for a in range(parents):
        t = t0 + a * 900 + rnd.randint(0, 300)
        ctx = [nid, nid + 1]
        nid += 2

        def req(rid, sess, start, parent=None):
            nonlocal nid
            dur = rnd.randint(30, 200) + rnd.random()
            hashes = list(ctx) + [nid]
            nid += 1
            ctxd = {"session_id": sess}
            if parent:
                ctxd["parent_session_id"] = parent
            rec = {"schema": "dynamo.request.trace.v1", "event_type": "request_end",
                   "event_time_unix_ms": start + int(dur) + 1, "agent_context": ctxd,
                   "request": {"request_id": rid, "model": "src", "output_tokens": rnd.randint(5, 60),
                               "request_received_ms": start, "total_time_ms": dur,
                               "replay": {"trace_block_size": 16, "input_length": 16 * len(hashes) - rnd.randint(0, 15),
                                          "input_sequence_hashes": hashes}}}
            recs.append(rec)
            return start + round(dur)
        end = req(f"{prefix}{a}-r0", f"{prefix}gent{a}", t)
        child_start = t + rnd.randint(5, 40)
        c_end = req(f"{prefix}{a}-c0", f"{prefix}gent{a}-sub", child_start, parent=f"{prefix}gent{a}")
        c_end = req(f"{prefix}{a}-c1", f"{prefix}gent{a}-sub", c_end + rnd.randint(1, 50), parent=f"{prefix}gent{a}")
        nxt = max(end, c_end) + rnd.randint(1, 80) if not background else end + rnd.randint(1, 30)
        if tools:
            recs.append({"schema": "dynamo.request.trace.v1", "event_type": "tool_end", "event_time_unix_ms": c_end,
                         "agent_context": {"session_id": f"{prefix}gent{a}"},
                         "tool": {"tool_call_id": f"tool-{a}", "tool_class": "agent", "started_at_unix_ms": end,
                                  "ended_at_unix_ms": c_end,
                                  "claude": {"source_request_id": f"{prefix}{a}-r0",
                                             "consumer_request_id": None if background else f"{prefix}{a}-r1",
                                             "child_session_id": f"{prefix}gent{a}-sub",
                                             "execution_mode": "background" if background else "blocking"}}})
        for k in range(1, turns):
            ctx = ctx + [nid]
            nid += 1
            nxt = req(f"{prefix}{a}-r{k}", f"{prefix}gent{a}", nxt) + rnd.randint(1, 120)
    rnd.shuffle(recs)
    with open(path, "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")


def applied_compute_trace(path, seed, sessions, max_turns, prompt, answer, tool, latency_s):
    """Applied-compute agentic sessions: a prompt, then turns of answer + tool output + tool latency."""
    rnd = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(sessions):
            k = rnd.randint(0, max_turns)
            f.write(json.dumps({
                "num_turns": k, "input_prompt_length": rnd.randint(prompt // 2, prompt),
                "assistant_response_length": [rnd.randint(1, answer) for _ in range(k)],
                "tool_call_output_length": [rnd.randint(0, tool) for _ in range(k)],
                "tool_call_latency": [round(rnd.uniform(0, latency_s), 3) for _ in range(k)],
                "final_assistant_response_length": rnd.randint(1, answer)}) + "\n")


def weka_corpus(root, seed, n_traces, gap_s=0.2, absolute=False):
    """Weka traces with a main conversation, a second conversation forked off it (a worker chain),
    a preamble request sharing nothing, streaming requests, blocking and background sub-agents
    (with and without duration_ms), in a nested directory and a .jsonl file of two traces; short
    gaps, so the replay's own timing decides the arrivals."""
    rnd = random.Random(seed)

    def req(t, ids, model="big", kind="n"):
        return {"t": round(t, 6), "type": kind, "model": model, "in": 64 * len(ids) - rnd.randint(0, 63),
                "out": rnd.randint(20, 140), "hash_ids": list(ids), "api_time": round(rnd.uniform(0.3, 1.5), 4)}

    def trace(k):
        base = 10_000 * (k + 1)
        t = 0.0
        reqs = [req(t, [base + 900], model="small")]  # a preamble: shares nothing
        ctx = [1, 2, base]
        fork = None
        for j in range(7):
            t += rnd.uniform(0.05, gap_s)
            ctx = ctx + [base + 1 + j]
            reqs.append(req(t, ctx, kind=rnd.choice("ns")))
            if j == 1:
                fork = ctx[:3] + [base + 500]
            if j in (2, 4) and fork is not None:
                fork = fork + [base + 510 + j]
                reqs.append(req(t + 0.01, fork))
            if j == 3:
                sub_t = t + 0.02
                inner_t = (lambda x: x) if not absolute else (lambda x: sub_t + x)
                status = "completed" if k % 2 == 0 else "async_launched"
                sub = {"t": round(sub_t, 6), "type": "subagent", "agent_id": f"a{k}", "subagent_type": "Explore",
                       "status": status, "models": ["small"],
                       "requests": [dict(req(0, [7, base + 700]), model="small", t=round(inner_t(0.0), 6)),
                                    dict(req(0, [7, base + 700, base + 701]), model="small",
                                         t=round(inner_t(0.3), 6))]}
                if k % 3:
                    sub["duration_ms"] = 1500
                reqs.append(sub)
        return {"id": f"w{k}", "models": ["big", "small"], "block_size": 64, "hash_id_scope": "local",
                "requests": reqs}

    os.makedirs(f"{root}/team", exist_ok=True)
    for k in range(n_traces - 2):
        sub = "team/" if k % 2 else ""
        with open(f"{root}/{sub}trace{k:02d}.json", "w") as f:
            json.dump(trace(k), f)
    with open(f"{root}/more.jsonl", "w") as f:
        for k in range(n_traces - 2, n_traces):
            f.write(json.dumps(trace(k)) + "\n")


if __name__ == "__main__":
    os.makedirs("inputs", exist_ok=True)
    delta_trace("inputs/delta_small.jsonl", 1, 40, 4, 3, 2, 120, 400, 1500, 4)
    delta_trace("inputs/delta_long.jsonl", 2, 12, 12, 2, 2, 200, 900, 800, 3)
    delta_trace("inputs/delta_ragged.jsonl", 3, 80, 6, 4, 3, 90, 150, 1000, 0, ragged=True)
    delta_trace("inputs/delta_timestamps.jsonl", 4, 30, 5, 2, 2, 100, 500, 1200, 2, use_timestamps=True)
    delta_trace("inputs/delta_dense.jsonl", 5, 60, 5, 3, 2, 150, 60, 300, 4)
    delta_trace("inputs/delta_tbs64.jsonl", 6, 50, 4, 6, 4, 80, 200, 700, 5, tbs=64)
    agentic_trace("inputs/agentic_small.jsonl", 11, 12, 4, 2, 800)
    agentic_trace("inputs/agentic_chain.jsonl", 12, 8, 8, 0, 2000, sys_blocks=4)
    agentic_trace("inputs/agentic_wide.jsonl", 13, 40, 3, 3, 150, models=("m-a", "m-b"), spread=True)
    agentic_trace("inputs/agentic_ordinals.jsonl", 14, 10, 3, 1, 300, ordinals=True)
    dynamo_trace("inputs/dynamo_blocking.jsonl", 21, 10, 3)
    dynamo_trace("inputs/dynamo_background.jsonl", 22, 10, 3, background=True)
    dynamo_trace("inputs/dynamo_timestamps.jsonl", 23, 12, 3, tools=False)
    dynamo_trace("inputs/dynamo_part2.jsonl", 25, 6, 4, prefix="b", t0=1_700_000_002_000)
    with open("inputs/dynamo_blocking.jsonl", "rb") as f, gzip.GzipFile("inputs/dynamo_blocking_copy.jsonl.gz", "wb",
                                                                         mtime=0) as g:
        g.write(f.read())
    applied_compute_trace("inputs/applied_small.jsonl", 31, 30, 5, 2000, 120, 600, 1.5)
    applied_compute_trace("inputs/applied_long.jsonl", 32, 12, 12, 6000, 200, 1500, 0.8)
    weka_corpus("inputs/weka_rel", 41, 8)
    weka_corpus("inputs/weka_abs", 42, 6, absolute=True)
    print("ok")
