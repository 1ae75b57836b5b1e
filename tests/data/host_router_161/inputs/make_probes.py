"""Write the probe traces of this folder (Mooncake JSONL, trace block size 64)."""
import json

A = list(range(1, 12))  # 10 full blocks (650 tokens)


def write(name, rows):
    with open(f"{name}.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def req(t, n, hashes, out=2):
    return {"timestamp": t, "input_length": n, "output_length": out, "hash_ids": hashes}


# h1: A on one worker; B shares A's first block (so it follows A) and pushes 9 of A's blocks out
# of the GPU pool into the host tier; A again: device overlap 1, host 9 on A's worker
write("h1", [req(0, 650, A), req(100, 1152, [1] + list(range(101, 118))), req(400, 650, A)])
# h2: as h1, A's repeat asks for only its first 4 blocks: host 3 after the device 1
write("h2", [req(0, 650, A), req(100, 1152, [1] + list(range(101, 118))),
             req(400, 650, A[:4] + list(range(201, 208)))])
# h3: B (20 blocks, sharing nothing) on the other worker; C (20 blocks, sharing A's first) pushes
# all of A out to host; then A twice: host blocks only on A's worker, against a loaded other one
write("h3", [req(0, 650, A), req(50, 1270, list(range(301, 321)), out=200),
             req(100, 1270, [1] + list(range(101, 120))), req(400, 650, A), req(402, 650, A)])
# h4: the repeat comes 100 ms after A's store ends (about 110 ms): with a KV event lag of 100 ms
# its host blocks are not yet published, at 250 ms they are
write("h4", [req(0, 650, A), req(100, 1152, [1] + list(range(101, 118))), req(200, 650, A),
             req(250, 650, A)])
