"""Write the deterministic inputs of the trace-format cases (run from this folder).

``python make_inputs.py``: ``inputs/delta_*.jsonl`` (mooncake-delta sessions: the first turn a full
prompt, later turns input deltas with a ``delay`` or a ``timestamp``).
"""
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


if __name__ == "__main__":
    os.makedirs("inputs", exist_ok=True)
    delta_trace("inputs/delta_small.jsonl", 1, 40, 4, 3, 2, 120, 400, 1500, 4)
    delta_trace("inputs/delta_long.jsonl", 2, 12, 12, 2, 2, 200, 900, 800, 3)
    delta_trace("inputs/delta_ragged.jsonl", 3, 80, 6, 4, 3, 90, 150, 1000, 0, ragged=True)
    delta_trace("inputs/delta_timestamps.jsonl", 4, 30, 5, 2, 2, 100, 500, 1200, 2, use_timestamps=True)
    delta_trace("inputs/delta_dense.jsonl", 5, 60, 5, 3, 2, 150, 60, 300, 4)
    delta_trace("inputs/delta_tbs64.jsonl", 6, 50, 4, 6, 4, 80, 200, 700, 5, tbs=64)
    print("ok")
