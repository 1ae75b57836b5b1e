"""Invariant checks of a finished simulation (debug mode: ``simulate(..., debug=True)`` or
``FASTSIM_DEBUG=1``).

They read the final state tables and raise :class:`InvariantError` naming every violation:

* every request terminated exactly once (completed or rejected), and a completed one emitted
  exactly its requested output (or stopped at ``max_model_len``), a rejected one nothing;
* per-request times are ordered: arrival <= first admission <= first token <= second <= last
  token <= terminal;
* every KV pool is consistent: refcounts never negative, active + inactive + free = capacity, the
  hash table holds exactly the active and inactive blocks, and nothing is left active at the end;
* no retired or cancelled worker (a tombstone) holds requests.
"""

from __future__ import annotations

import numpy as np

from fastsim.errors import FastsimError


class InvariantError(FastsimError):
    """The simulation's state broke an invariant (a bug in fastsim: please report it)."""


def check(st, engine) -> None:
    """Raise :class:`InvariantError` if the final state ``st`` (``state.SimState``) breaks an invariant."""
    from fastsim.kernels.kvpool import NACTIVE, NFREE, NINACTIVE
    from fastsim.kernels.loop import NDONE
    from fastsim.kernels.codes import COMPLETED, REJECTED

    bad = []
    rq = st.requests
    status = rq.status
    if not np.isin(status, (COMPLETED, REJECTED)).all():
        rows = np.flatnonzero(~np.isin(status, (COMPLETED, REJECTED)))
        bad.append(f"{rows.size} requests did not terminate (first row {rows[0]})")
    if int(st.cluster.state[NDONE]) != rq.isl.shape[0]:
        bad.append(f"{int(st.cluster.state[NDONE])} terminal events for {rq.isl.shape[0]} requests")
    done = status == COMPLETED
    from fastsim.trtllm_config import output_limit

    mml = output_limit(engine)
    full = rq.generated == rq.osl
    if mml:
        full |= rq.isl + rq.generated >= mml
    if (done & ~full).any():
        bad.append(f"{int((done & ~full).sum())} completed requests emitted a wrong number of tokens")
    rej = status == REJECTED
    if (rej & (rq.generated != 0)).any():
        bad.append("a rejected request emitted tokens")
    with np.errstate(invalid="ignore"):
        seq = [rq.arrival, rq.first_admit, rq.first_token, rq.second_token, rq.last_token, rq.terminal]
        names = ["arrival", "first_admit", "first_token", "second_token", "last_token", "terminal"]
        for a, b, na, nb in zip(seq, seq[1:], names, names[1:]):
            both = done & ~np.isnan(a) & ~np.isnan(b)
            if (a[both] > b[both]).any():
                bad.append(f"{na} after {nb} for {int((a[both] > b[both]).sum())} requests")
    pool = st.pool
    cap = pool.cap
    meta = pool.meta
    if (pool.slot_ref < 0).any():
        bad.append("a KV block refcount is negative")
    total = meta[:, NACTIVE] + meta[:, NINACTIVE] + meta[:, NFREE]
    if (total != cap).any():
        bad.append(f"KV pool accounting broken on ranks {np.flatnonzero(total != cap)[:5].tolist()}")
    tsize = pool.tmask + 1
    entries = (pool.table.reshape(-1, tsize) != 0).sum(axis=1)
    primaries = (pool.slot_intab.reshape(-1, cap) != 0).sum(axis=1) - (pool.slot_cnext.reshape(-1, cap) != 0).sum(axis=1)
    if (entries != primaries).any():
        bad.append("KV hash table entries differ from the registered first copies")
    runs = pool.slot_run.reshape(-1, cap).sum(axis=1)
    if (runs > meta[:, NINACTIVE]).any():
        bad.append("KV run nodes stand for more blocks than are inactive")
    if ((pool.slot_run != 0) & ((pool.slot_ref != 0) | (pool.slot_intab != 0))).any():
        bad.append("a KV run node is referenced or registered")
    if ((pool.slot_intab != 0) & (pool.slot_ref == 0) & (pool.slot_key == 0)).any():
        bad.append("a free KV slot is still registered")
    if (meta[:, NACTIVE] != 0).any():
        bad.append(f"KV blocks still active after the run on ranks {np.flatnonzero(meta[:, NACTIVE])[:5].tolist()}")
    gstate = st.fleet.gstate
    dp = st.cluster.dp
    dead = np.repeat(np.isin(gstate, (4, 5)), dp)
    if (dead & ((st.ranks.n_run > 0) | (st.ranks.n_wait > 0))).any():
        bad.append("a retired or cancelled worker holds requests")
    if bad:
        raise InvariantError("invariant violated: " + "; ".join(bad))
