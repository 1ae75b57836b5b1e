"""Write traces/crafted_60.jsonl.gz: 60 requests, one every 40 ms, prompts of 3-47 blocks of 64
tokens drawn from five shared prefixes (so targets hold different overlaps), outputs of 20-400
tokens; and traces/burst_40.jsonl.gz: the same kind of requests in four bursts of ten (at 0, 300,
600 and 900 ms, 1 ms apart), to fill a router queue; and traces/release_4.jsonl.gz: four
requests whose routing tells when the disaggregated prefill router frees a request (at the
release of its source, not at the activation of its transfer). Deterministic (seeded); rerun with
``python make_trace.py``."""

import gzip
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent


def request(rng, i, t):
    group = rng.randrange(5)
    shared = rng.randrange(2, 20)
    own = rng.randrange(1, 28)
    hids = [1000 * (group + 1) + j for j in range(shared)] + [100000 + 100 * i + j for j in range(own)]
    isl = 64 * len(hids) - rng.randrange(0, 63)
    return {"timestamp": t, "input_length": isl, "output_length": rng.randrange(20, 400), "hash_ids": hids}


def write(name, rows):
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (HERE / "traces" / name).write_bytes(gzip.compress(text.encode(), mtime=0))


rng = random.Random(260)
write("crafted_60.jsonl.gz", [request(rng, i, 40 * i) for i in range(60)])
rng = random.Random(261)
write("burst_40.jsonl.gz", [request(rng, i, 300 * (i // 10) + i % 10) for i in range(40)])
write("release_4.jsonl.gz", [
    {"timestamp": 0, "input_length": 256, "output_length": 10, "hash_ids": [1, 2, 3, 4]},
    {"timestamp": 1, "input_length": 6000, "output_length": 10, "hash_ids": list(range(100, 194))},
    {"timestamp": 5, "input_length": 4000, "output_length": 10, "hash_ids": list(range(200, 263))},
    {"timestamp": 60, "input_length": 512, "output_length": 10, "hash_ids": [1, 2, 3, 4, 300, 301, 302, 303]},
])
