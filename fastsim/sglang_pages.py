"""Content keys of the SGLang engine's KV pages.

The radix cache compares pages by content. A trace prompt's token ``i`` is its hash id
``i // trace_block_size`` (low 32 bits, as Dynamo synthesises tokens); a page's key is built from
its runs of equal tokens, so equal token runs give equal keys in any request. Synthetic prompts and
generated tokens are unique to their request: their keys carry the request's row.
"""

from __future__ import annotations

import numpy as np

_M = (1 << 64) - 1
_PROMPT, _UNIQUE, _GEN = 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9


def _mix(h, v):
    h ^= (v + 0x9E3779B97F4A7C15 + ((h << 6) & _M) + (h >> 2)) & _M
    h = (h * 0xBF58476D1CE4E5B9) & _M
    return h ^ (h >> 31)


def page_keys_of(isl, osl, row, hash_ids, tbs, ps):
    """uint64 keys of the complete pages of a request's whole sequence (prompt + output)."""
    total = isl + osl
    npages = total // ps
    keys = np.empty(npages, dtype=np.uint64)
    for p in range(npages):
        h = 0
        t, end = p * ps, (p + 1) * ps
        while t < end:
            if t < isl:
                if hash_ids is not None:
                    tok = int(hash_ids[t // tbs]) & 0xFFFFFFFF
                    run_end = min(end, isl, (t // tbs + 1) * tbs)
                    h = _mix(_mix(h, _PROMPT ^ tok), run_end - t)
                else:
                    run_end = min(end, isl)
                    h = _mix(_mix(h, _UNIQUE ^ row), run_end - t)
                    h = _mix(h, t)
            else:
                run_end = end
                h = _mix(_mix(h, _GEN ^ row), t)
                h = _mix(h, run_end - t)
            t = run_end
        keys[p] = h
    return keys
