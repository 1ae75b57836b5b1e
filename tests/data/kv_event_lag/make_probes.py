"""Write the probe traces of the KV event lag tests (Mooncake format, block size 64).

Each probe is a group of requests far from the others (10-20 s apart, own hash ids), so groups do
not interact: a first request stores 40 blocks; a later request with the same 40-block prefix asks
how much of it the router's index shows, ``offset`` ms after the first one arrived (``stored_*``),
or after two large requests that evict most of those blocks from a 60-block pool
(``removed_*``). ``overlap_*``: passes of two workers that overlap (decision 0277): a long prefill
(125 blocks, shared with a request long after) starts at 0 on one worker; a 40-block prompt starts
at 1 on the other and ends first; probes with that prefix at each ``offset`` ask whether the
index shows the short pass's blocks once it ended, while the long pass still runs.
"""
import json

STORED = [50, 100, 150, 200, 250, 299, 300, 301, 320, 350, 352, 356, 358, 358.13, 358.14, 359, 362,
          370, 380, 390, 400, 450, 500, 550, 600, 700, 900]
REMOVED = [50, 100, 200, 300, 350, 370, 380, 400, 450, 600, 1000]
OVERLAP = [50, 80, 120]


def stored_rows():
    for i, off in enumerate(STORED):
        t, base = 10000 * i, 1000 * (i + 1)
        prefix = list(range(base, base + 40))
        yield {"timestamp": t, "input_length": 2560, "output_length": 20, "hash_ids": prefix}
        yield {"timestamp": t + off, "input_length": 3200, "output_length": 20,
               "hash_ids": prefix + list(range(base + 500, base + 510))}


def removed_rows():
    for i, off in enumerate(REMOVED):
        t, base = 20000 * i, 10000 * (i + 1)
        prefix = list(range(base, base + 40))
        yield {"timestamp": t, "input_length": 2560, "output_length": 20, "hash_ids": prefix}
        for other in (1000, 2000):
            yield {"timestamp": t + 1000, "input_length": 3200, "output_length": 5,
                   "hash_ids": list(range(base + other, base + other + 50))}
        yield {"timestamp": t + 1000 + off, "input_length": 3200, "output_length": 5,
               "hash_ids": prefix + list(range(base + 500, base + 510))}


def overlap_rows():
    for i, off in enumerate(OVERLAP):
        t, base = 20000 * i, 100000 * (i + 1)
        long_prompt = list(range(base + 1000, base + 1125))
        prefix = list(range(base, base + 40))
        yield {"timestamp": t, "input_length": 64 * 125, "output_length": 4, "hash_ids": long_prompt}
        yield {"timestamp": t + 1, "input_length": 2560, "output_length": 4, "hash_ids": prefix}
        yield {"timestamp": t + off, "input_length": 2624, "output_length": 4, "hash_ids": prefix + [base + 500]}
        yield {"timestamp": t + 400, "input_length": 64 * 126, "output_length": 4,
               "hash_ids": long_prompt + [base + 600]}


if __name__ == "__main__":
    for name, rows in (("stored_probes.jsonl", stored_rows()), ("removed_probes.jsonl", removed_rows()),
                       ("overlap_probes.jsonl", overlap_rows())):
        with open(name, "w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
