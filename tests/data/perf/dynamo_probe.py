"""Black-box probes of Dynamo 1.4.2's NPZ timing model and duration quantisation (not run by pytest).

Run with a Python that has ai-dynamo==1.4.2 (DYNAMO_PYTHON):  DYN_LOG=error $DYNAMO_PYTHON dynamo_probe.py > dynamo_probe.out.json
Each probe replays one request (block_size 16, trace block 16, OSL 2) on one worker with a tiny
hand-made NPZ and records ``first_token_ms`` = (0 + q(prefill)) + q(decode). tests/test_perf.py
pins the outputs.

* ``quant``: constant prefill P ms, constant decode 1 ms. Exact binary ties (P = odd * 0.9765625
  ms = odd/1024 s) show round-half-to-even; P > 1 s shows the read-back formula
  ``(secs + nanos/1e9) * 1000`` (Duration::as_secs_f64() * 1000).
* ``speedup``: constant prefill P (decode 1 ms) at speedup s, or constant decode at speedup 2 and
  decode speedup 1.5: the speedup divides the already rounded duration, in seconds, and decode
  is divided once by the product (aisimulate ``modeled_duration_ms``).
* ``knot``: prefill axis [0, 1, 4, 10] (uneven), query t = 4 tokens, a knot. The cell to the right
  (exact value) and the cell to the left (rounded) differ by a visible ns at ~6e10 ms.
* ``accept``: which NPZ variants Dynamo uses (first token 8.0 = 7 ms prefill + 1 ms decode) and
  which it rejects (falls back to the polynomial model: 22.487759).
"""

import itertools
import json
import os
import sys
import tempfile

os.environ.setdefault("DYN_LOG", "error")
import numpy as np  # noqa: E402
from dynamo.mocker import MockEngineArgs  # noqa: E402
from dynamo.replay import run_trace_replay  # noqa: E402

D = tempfile.mkdtemp(prefix="fastsim_perf_probe_")
_ids = itertools.count()


def first_token(npz_path, isl=16, **engine):
    n = next(_ids)
    trace = os.path.join(D, f"t{n}.jsonl")
    with open(trace, "w") as f:
        nb = -(-isl // 16)
        f.write(json.dumps(dict(timestamp=0, input_length=isl, output_length=2, hash_ids=list(range(1, nb + 1)))) + "\n")
    out = os.path.join(D, f"t{n}.out.jsonl")
    eng = dict(block_size=16, planner_profile_data=npz_path, max_num_batched_tokens=65536, **engine)
    run_trace_replay(trace, extra_engine_args=MockEngineArgs.from_json(json.dumps(eng)), trace_block_size=16,
                     report_jsonl_path=out)
    return json.loads(open(out).readline())["first_token_ms"]


def save(name, saver=np.savez, **arrays):
    p = os.path.join(D, name + ".npz")
    saver(p, **arrays)
    return p


BASE = dict(prefill_isl=np.array([1.0, 1e6]), prefill_ttft_ms=np.array([7.0, 7.0]),
            decode_active_kv_tokens=np.array([0.0, 1e7]), decode_context_length=np.array([0.0, 1e6]),
            decode_itl=np.full((2, 2), 1.0))


def var(**ch):
    d = dict(BASE)
    d.update(ch)
    return {k: v for k, v in d.items() if v is not None}


out = {"quant": {}, "speedup": [], "accept": {}}
for P in (0.9765625, 4.8828125, 2.9296875, 3502.8812164, 1052.6719662, 1602.4656961, 3176.9169012):
    out["quant"][repr(P)] = first_token(save(f"q{P}", **var(prefill_ttft_ms=np.array([P, P]))))
for P, s in [(26.2518335, 2.0), (89.4383872, 2.0), (24.0753606, 0.3), (18.5802329, 2.0), (71.1034094, 2.0), (77.1012948, 2.0)]:
    path = save(f"s{P}", **var(prefill_ttft_ms=np.array([P, P])))
    out["speedup"].append(["prefill", P, s, 1.0, first_token(path, speedup_ratio=s)])
for Dv in (50.2970025, 58.4947335, 81.7369275):
    path = save(f"d{Dv}", **var(prefill_ttft_ms=np.array([1.0, 1.0]), decode_itl=np.full((2, 2), Dv)))
    out["speedup"].append(["decode", Dv, 2.0, 1.5, first_token(path, speedup_ratio=2.0, decode_speedup_ratio=1.5)])
out["knot"] = first_token(save("knot", **var(prefill_isl=np.array([0.0, 1.0, 4.0, 10.0]),
                                           prefill_ttft_ms=np.array([0.0, 54.832, 61654706913.529, 61654706913.529]))), isl=4)
variants = {
    "base": var(),
    "int64_isl": var(prefill_isl=np.array([1, 1000000])),
    "float32": {k: v.astype(np.float32) for k, v in BASE.items()},
    "bigendian": {k: v.astype(">f8") for k, v in BASE.items()},
    "fortran_itl": var(decode_active_kv_tokens=np.array([0.0, 1e7, 2e7]), decode_itl=np.asfortranarray(np.ones((3, 2)))),
    "isl_2d": var(prefill_isl=np.array([[1.0], [1e6]]), prefill_ttft_ms=np.array([[7.0], [7.0]])),
    "isl_0d": var(prefill_isl=np.array(1.0)),
    "not_increasing": var(prefill_isl=np.array([1.0, 1e6, 10.0]), prefill_ttft_ms=np.array([7.0, 7.0, 7.0])),
    "duplicate": var(prefill_isl=np.array([1.0, 1.0, 1e6]), prefill_ttft_ms=np.array([7.0, 7.0, 7.0])),
    "single_point": var(prefill_isl=np.array([1.0]), prefill_ttft_ms=np.array([7.0])),
    "nan_axis": var(prefill_isl=np.array([1.0, np.nan])),
    "nan_ttft": var(prefill_ttft_ms=np.array([np.nan, np.nan])),
    "inf_ttft": var(prefill_ttft_ms=np.array([np.inf, np.inf])),
    "nan_itl": var(decode_itl=np.full((2, 2), np.nan)),
    "itl_shape": var(decode_active_kv_tokens=np.array([0.0, 1e7, 2e7])),
    "ctx_decreasing": var(decode_context_length=np.array([1e6, 0.0])),
    "missing_itl": var(decode_itl=None),
    "len_mismatch": var(prefill_ttft_ms=np.array([7.0, 7.0, 7.0])),
}
for name, arrays in variants.items():
    out["accept"][name] = first_token(save(name, **arrays))
out["accept"]["compressed"] = first_token(save("compressed", np.savez_compressed, **BASE))
json.dump(out, sys.stdout, indent=1)
print()
