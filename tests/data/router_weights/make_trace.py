"""Write traces/crafted_60.jsonl.gz: 60 requests, one every 40 ms, prompts of 3-47 blocks of 64
tokens drawn from five shared prefixes (so targets hold different overlaps), outputs of 20-400
tokens. Deterministic (seeded); rerun with ``python make_trace.py``."""

import gzip
import json
import random
from pathlib import Path

rng = random.Random(260)
rows = []
for i in range(60):
    group = rng.randrange(5)
    shared = rng.randrange(2, 20)
    own = rng.randrange(1, 28)
    hids = [1000 * (group + 1) + j for j in range(shared)] + [100000 + 100 * i + j for j in range(own)]
    isl = 64 * len(hids) - rng.randrange(0, 63)
    rows.append({"timestamp": 40 * i, "input_length": isl, "output_length": rng.randrange(20, 400), "hash_ids": hids})
text = "".join(json.dumps(r) + "\n" for r in rows)
(Path(__file__).resolve().parent / "traces" / "crafted_60.jsonl.gz").write_bytes(gzip.compress(text.encode(), mtime=0))
