"""Write the probe traces of this folder (Mooncake JSONL, trace block size 64; 2 workers of 20 GPU
blocks, a host tier of 12 blocks at 1 GB/s in every case). What each shows:
docs/decisions/0475-host-eviction-under-a-lagging-router.md."""
import json
import sys

A10 = list(range(1, 12))  # 650 tokens: 10 full blocks
B = [1] + list(range(101, 118))  # follows A (its first block), pushes A's others out of the GPU pool; its
# 17 new blocks never fit the 12-block host tier, so it evicts nothing
E = [1] + list(range(201, 206))  # follows A; its 5 new blocks evict 3 of A's host blocks


def write(name, rows):
    with open(f"{name}.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def req(t, n, hashes, out=2):
    return {"timestamp": t, "input_length": n, "output_length": out, "hash_ids": hashes}


def probe(x_at):
    """A, B, E, then A's prompt again (X) at ``x_at`` ms: its routing figures count A's host blocks
    as the router sees them then."""
    return [req(0, 650, A10), req(130, 1152, B), req(300, 384, E), req(x_at, 650, A10)]


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        name, x_at = arg.split("=")
        write(name, probe(int(x_at) if x_at.isdigit() else float(x_at)))
