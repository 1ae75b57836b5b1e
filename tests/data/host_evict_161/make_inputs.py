"""Write the small traces of this folder (deterministic; trace block size 64, one hash id per
engine block of 64 tokens). A: 7 blocks (ids 1-7); D: 18 other blocks that push every earlier block
out of a 20-block GPU pool; C: A's prompt again, whose host reuse shows which of A's blocks the host
tier kept."""
import json

A = list(range(1, 8))
D = list(range(201, 219))


def row(t, ids, extra=0, osl=2):
    """A request at ``t`` ms whose full blocks are ``ids``, plus ``extra`` tokens of a partial block
    of its own (id 1000 + the first id)."""
    return {"timestamp": t, "input_length": 64 * len(ids) + extra, "output_length": osl,
            "hash_ids": ids + ([1000 + ids[0]] if extra else [])}


TRACES = {
    # B's 1, 2, 3, 5 new blocks evict that many of A's (one completed store: one recency)
    "ev_b1": [row(0, A), row(100, [101], 36), row(200, D), row(400, A)],
    "ev_b2": [row(0, A), row(100, [101, 102], 36), row(200, D), row(400, A)],
    "ev_b3": [row(0, A), row(100, [101, 102, 103], 36), row(200, D), row(400, A)],
    "ev_b5": [row(0, A), row(100, [101, 102, 103, 104, 105], 36), row(200, D), row(400, A)],
    # E (A's first 4 blocks, all on the GPU) touches them at its lookup; then B evicts
    "ev_touch": [row(0, A), row(100, A[:4], 10), row(200, [101, 102], 36), row(300, D), row(500, A)],
    # F (A's first 4 blocks + 1 new) stores its new block and touches its prompt
    "ev_store_touch": [row(0, A), row(100, A[:4] + [301], 10), row(200, [101, 102], 36), row(300, D),
                       row(500, A)],
    # C1 loads A's blocks back (their recency: the load's completion); B then evicts
    "ev_load": [row(0, A), row(100, D), row(300, A), row(400, D[:9] + [401, 402], 10),
                row(600, [101, 102, 103], 36), row(700, D), row(900, A)],
    # a store cohort that needs more room than the unpinned resident blocks give: retried
    "ev_retry": [row(0, A), row(20, [101, 102, 103], 36, osl=200), row(200, D), row(2500, A), row(2600, [101, 102, 103], 36)],
    # a cohort larger than the tier never fits (its cursor stays), small ones do
    "ev_unfit": [row(0, A), row(100, D), row(300, [101, 102], 36), row(400, A), row(500, D), row(700, A)],
    # two requests share a 4-block prefix; a 4-block tier
    "ev_prefix": [row(0, A[:4] + [11, 12]), row(100, A[:4] + [21, 22, 23]), row(200, D),
                  row(400, A[:4] + [31]), row(500, [101], 36), row(600, D), row(800, A[:4] + [11, 12])],
}

if __name__ == "__main__":
    for name, rows in TRACES.items():
        with open(f"inputs/{name}.jsonl", "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
