"""Write the traces of these cases into inputs/ (deterministic), from this folder:

    python make_inputs.py

Each is a recorded trace of the other folders with request priorities added by a fixed rule of
the row's position: ``priority`` (Dynamo's i32; only max(priority, 0) counts), ``strict_priority``
(a u32) and ``policy_class`` (read, but one class without a router policy profile)."""
import json
from pathlib import Path

HERE = Path(__file__).parent
MOONCAKE = HERE / ".." / "sglang_queue_161" / "mooncake_synth_500.jsonl"
DELTA = HERE / ".." / "traces_161" / "inputs" / "delta_dense.jsonl"
AGENTIC = HERE / ".." / "traces_161" / "inputs" / "agentic_wide.jsonl"

RULES = {
    # soft priorities of -1 to 3 (a negative one counts as 0)
    "soft": lambda i: {"priority": (i * 7) % 5 - 1},
    # a third of the requests ahead of the others
    "strict": lambda i: {"strict_priority": 1 if i % 3 == 0 else 0},
    # both, with two strict levels and large jumps (a jump of 1000 outweighs any arrival time)
    "mixed": lambda i: {"priority": [0, 2, 1000, -5][i % 4], "strict_priority": [0, 0, 1, 2, 0][i % 5]},
    # negative priorities and zeros only: the plain order
    "negative": lambda i: {"priority": -(i % 3), "strict_priority": 0},
    # a policy class on every row and priorities on some
    "pclass": lambda i: {"policy_class": ["gold", "silver"][i % 2], "priority": 5 if i % 6 == 0 else None},
}


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write(name, lines):
    (HERE / "inputs" / name).write_text("".join(json.dumps(r) + "\n" for r in lines))


def main():
    base = rows(MOONCAKE)
    for rule, f in RULES.items():
        write(f"mooncake_{rule}.jsonl", [dict(r, **f(i)) for i, r in enumerate(base)])
    write("delta_mixed.jsonl", [dict(r, **RULES["mixed"](i)) for i, r in enumerate(rows(DELTA))])
    agentic = rows(AGENTIC)
    write("agentic_mixed.jsonl", agentic[:1] + [dict(r, **RULES["mixed"](i)) for i, r in enumerate(agentic[1:])])


if __name__ == "__main__":
    main()
