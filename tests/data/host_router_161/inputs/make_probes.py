"""Write the probe traces of this folder (Mooncake JSONL, trace block size 64, 2 workers of 20
GPU blocks in every case). What each shows: docs/decisions/0353-kv-router-with-a-host-tier.md."""
import json

A10 = list(range(1, 12))  # 650 tokens: 10 full blocks
A11 = list(range(1, 13))  # 714 tokens: 11 full blocks
B = [1] + list(range(101, 118))  # shares A's first block (so it follows A) and pushes A's others to host


def write(name, rows):
    with open(f"{name}.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def req(t, n, hashes, out=2):
    return {"timestamp": t, "input_length": n, "output_length": out, "hash_ids": hashes}


# A again at 400 ms: device 2, host 8 on A's worker
write("h1", [req(0, 650, A10), req(100, 1152, B), req(400, 650, A10)])
# A's first 4 blocks only: device 2, host 2
write("h2", [req(0, 650, A10), req(100, 1152, B), req(400, 650, A10[:4] + list(range(201, 208)))])
# repeats at 200 and 250 ms, after A's store ended (about 110 ms)
write("h4", [req(0, 650, A10), req(100, 1152, B), req(200, 650, A10), req(250, 650, A10)])
# with a lag of 100 ms: B late enough to see A, repeats at 200 and 300 ms
write("h5", [req(0, 650, A10), req(130, 1152, B), req(200, 650, A10), req(300, 650, A10)])
# Z (18 blocks, decoding) on one worker; Y's choice turns on the prefill load X added to A's
write("h7", [req(0, 1152, list(range(501, 519)), out=100), req(1, 714, A11), req(100, 1152, B),
             req(400, 714, A11), req(401, 320, list(range(601, 606)))])
# V (sharing A's first 2 blocks) in prefill on A's worker; X's choice turns on its credit
write("h8", [req(0, 714, A11), req(100, 1152, B), req(395, 368, [1, 2, 701, 702, 703, 704]), req(400, 714, A11)])
write("h9", [req(0, 714, A11), req(100, 1152, B), req(395, 272, [1, 2, 701, 702, 703]), req(400, 714, A11)])
