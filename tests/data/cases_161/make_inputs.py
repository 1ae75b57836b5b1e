"""Write the small Mooncake-format traces of the 1.6.1 cases (deterministic: numpy seed per file).

``mixed_300``: 300 requests, Poisson arrivals (mean gap 40 ms), prompts of 64-3000 tokens that
start with one of 5 shared prefixes (2-12 blocks of 64 tokens), outputs of 1-200 tokens (some 1).
``mixed_37``: its first 37 rows.
``unique_2048``: 120 requests every 20 ms, 2048/256 tokens, no shared blocks (the synthetic
workload of the preemption cases, as a trace). Block size 64 (``--trace-block-size 64``).
"""
import json

import numpy as np


def write(name, rows):
    with open(f"inputs/{name}.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def mixed(n=300, seed=1):
    rng = np.random.default_rng(seed)
    prefixes = [list(range(1000 * g, 1000 * g + int(rng.integers(2, 13)))) for g in range(5)]
    t, nxt, rows = 0.0, 100000, []
    for i in range(n):
        t += float(rng.exponential(40.0))
        isl = int(rng.integers(64, 3001))
        osl = 1 if rng.random() < 0.1 else int(rng.integers(2, 201))
        nblocks = -(-isl // 64)
        pre = prefixes[int(rng.integers(0, 5))][:nblocks] if rng.random() < 0.8 else []
        ids = pre + list(range(nxt, nxt + nblocks - len(pre)))
        nxt += nblocks
        rows.append(dict(timestamp=int(t), input_length=isl, output_length=osl, hash_ids=ids))
    return rows


def unique(n=120, isl=2048, osl=256, gap=20.0):
    nb = isl // 64
    return [dict(timestamp=int(i * gap), input_length=isl, output_length=osl,
                 hash_ids=list(range(i * nb, (i + 1) * nb))) for i in range(n)]


if __name__ == "__main__":
    write("mixed_300", mixed())
    write("mixed_37", mixed()[:37])  # the first 37 rows: a decode worker under KV pressure
    write("unique_2048", unique())
