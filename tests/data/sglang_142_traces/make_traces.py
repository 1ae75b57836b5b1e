"""Write the mooncake-format traces of this folder's cases (deterministic; run from this folder).

Dynamo 1.4.2 writes per-request records for trace replays only, so the synthetic-style loads are
traces too: prompt and output lengths drawn uniformly from a range, arrivals at a fixed interval
(0: a burst), each request's hash ids its own unless it takes a shared prefix of ``shared`` blocks
from one of ``groups`` groups."""
import json

import numpy as np


def write(name, n, isl, osl, interval, *, seed, tbs=512, groups=0, shared=0, repeat=0):
    rng = np.random.RandomState(seed)
    nxt = 1_000_000
    prompts = []
    with open(f"{name}.jsonl", "w") as f:
        for i in range(n):
            if repeat and prompts and rng.rand() < repeat:  # an earlier prompt again, whole
                length, ids = prompts[rng.randint(len(prompts))]
            else:
                length = int(rng.randint(isl[0], isl[1] + 1))
                nb = -(-length // tbs)
                ids = []
                if groups:
                    g = int(rng.randint(groups))
                    ids = [g * 1000 + j for j in range(min(shared, nb))]
                while len(ids) < nb:
                    ids.append(nxt)
                    nxt += 1
                prompts.append((length, ids))
            out = int(rng.randint(osl[0], osl[1] + 1))
            f.write(json.dumps({"timestamp": int(i * interval), "input_length": length, "output_length": out,
                                "hash_ids": ids}) + "\n")


write("tight", 300, (600, 1000), (100, 400), 4, seed=1, tbs=64)
write("tight_page1", 200, (400, 900), (200, 300), 3, seed=2, tbs=64)
write("long", 40, (15000, 30000), (20, 60), 250, seed=3)
write("groups", 300, (1500, 3000), (50, 150), 12, seed=4, tbs=128, groups=4, shared=8)
write("mixed", 300, (300, 2500), (20, 300), 6, seed=5, tbs=64, groups=3, shared=4)
write("burst", 200, (200, 1200), (10, 120), 0, seed=6, tbs=32, groups=2, shared=6)
write("repeats", 150, (100, 1100), (0, 40), 20, seed=7, tbs=16, repeat=0.5)
write("longout", 60, (500, 2000), (1500, 5000), 40, seed=8)
write("dpload", 400, (800, 1600), (100, 200), 16, seed=9, tbs=64)
# four configurations of a random sweep against Dynamo 1.4.2 with many retractions (DP ranks among them)
write("sweep201", 300, (100, 1600), (20, 820), 15, seed=201, tbs=128, groups=2, shared=6)
write("sweep223", 300, (100, 1600), (0, 800), 0, seed=223, tbs=128, groups=2, shared=2)
write("sweep303", 1500, (100, 300), (20, 820), 40, seed=303, tbs=64, groups=5, shared=2)
write("sweep328", 800, (100, 4100), (100, 900), 15, seed=328, tbs=512, groups=5, shared=2, repeat=0.3)
