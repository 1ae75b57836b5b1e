"""The memory a simulation needs, estimated before anything is allocated, and refused when the
machine cannot hold it.

:func:`estimate` adds up the state a run allocates from the sizes that drive it: per request
(the loop's columns, the report's), per worker row and per rank (queues, event trees, statistics),
the KV pools (their slot arrays and tables are mapped as they are used, so they count as much as a
run can touch, while their address space must still be reservable), the router's table and the
telemetry buffer. :func:`check` compares it with ``MemAvailable`` of ``/proc/meminfo`` and raises
:class:`InsufficientMemoryError` naming the estimate, what dominates it and the setting to change.
The accuracy of the estimate against measured peak RSS is recorded in
``docs/decisions/0312-memory-estimate.md``.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import numpy as np

from fastsim.errors import InputError

__all__ = ["Estimate", "InsufficientMemoryError", "available_bytes", "address_space_bytes",
           "estimate", "check", "telemetry_row_cap", "TELEMETRY_ROW_BYTES"]

# Bytes per request (per copy: a disaggregated run keeps a prefill and a decode copy): the loop's
# columns (6 float64 times, 2 int64, 12 int32, 2 int8: 114), the session tables, and the report's
# columns and derived latencies built after the loop's state is freed: 220 in all, as measured
# (150-215 on aggregated runs of 150k-300k requests, 230 per copy on disaggregated ones).
_PER_REQUEST = 220
# Bytes per content key of a prompt block (uint64 key, int32 slot) and per trace hash id.
_PER_KEY = 12
# Per request: its token-time records' heads and its open steady run (kernels/timelines.py).
_PER_TIMELINE = 32
# Per worker row: the cluster's per-group arrays (256 phantom events of 8 bytes dominate), the two
# event trees, the pooled statistics, the fleet record.
_PER_GROUP = 2600
# Per rank: queue heads, counters, the 256-bucket due wheel, the pool's metadata, router loads.
_PER_RANK = 1300
_PAGE = 4096
# Per telemetry row: the buffer (36 bytes) and its table when the report is read (56 bytes).
TELEMETRY_ROW_BYTES = 92
_TELEMETRY_START = 4096
# Loading the compiled kernels from the cache, once per process (measured: 44-46 MB for the
# aggregated loop, 62-65 MB with the disaggregated one).
_KERNELS = 46 << 20
_KERNELS_DISAGG = 66 << 20

_GB = 1 << 30


class InsufficientMemoryError(InputError):
    """A run needs more memory than the machine has available (refused before allocating)."""


class Estimate(NamedTuple):
    """Bytes a run is estimated to add (``parts``: name -> bytes) and the pool's address space."""

    parts: dict
    address_space: int

    @property
    def total(self) -> int:
        return int(sum(self.parts.values()))

    def describe(self) -> str:
        big = sorted(self.parts.items(), key=lambda kv: -kv[1])
        return ", ".join(f"{name} {_fmt(b)}" for name, b in big if b >= (1 << 20) or b == big[0][1])


def _fmt(b) -> str:
    if b >= _GB:
        return f"{b / _GB:.1f} GB"
    return f"{b / (1 << 20):.0f} MB"


def _meminfo() -> dict:
    out = {}
    try:
        with open("/proc/meminfo") as fh:
            for ln in fh:
                key, _, rest = ln.partition(":")
                parts = rest.split()
                if parts:
                    out[key] = int(parts[0]) * 1024
    except (OSError, ValueError):
        return {}
    return out


def available_bytes() -> Optional[int]:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (None where it cannot be read)."""
    return _meminfo().get("MemAvailable")


def address_space_bytes() -> Optional[int]:
    """Memory plus swap: the largest mapping the kernel's default overcommit rule grants."""
    info = _meminfo()
    if "MemTotal" not in info:
        return None
    return info["MemTotal"] + info.get("SwapTotal", 0)


def request_bytes() -> int:
    """Bytes a simulation adds per request (one copy)."""
    return _PER_REQUEST


def resident_bytes() -> Optional[int]:
    """This process's resident size now (``VmRSS``), None where it cannot be read."""
    try:
        with open("/proc/self/status") as fh:
            for ln in fh:
                if ln.startswith("VmRSS:"):
                    return int(ln.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def _pool(n_ranks: int, cap: int, blocks: int, live_per_rank: int, keys: int):
    """(touched bytes, address space) of ``n_ranks`` KV pools of ``cap`` blocks when a run allocates
    ``blocks`` blocks in all, at most ``live_per_rank`` of them at once on a rank without prefix
    caching (freed slots are reused first), and registers ``keys`` content keys in the tables."""
    tsize = 1 << max(int(4 * cap - 1).bit_length(), 0) if cap > 0 else 1
    per_rank = min(cap, -(-blocks // max(n_ranks, 1)))
    if keys == 0:
        per_rank = min(per_rank, live_per_rank)  # nothing stays cached: slots are reused
    slots = 33 * n_ranks * per_rank  # key 8, ref, lru links, free stack, chain, run 4 each, flag 1
    entries = min(cap, keys / max(n_ranks, 1))
    pages = tsize * 8 / _PAGE
    # a table's entries land at random: the expected share of its pages they touch
    table = n_ranks * tsize * 8 * (1.0 - math.exp(-entries / max(pages, 1.0)))
    return int(slots + table), n_ranks * cap * 33 + n_ranks * tsize * 8


def estimate(workload, engine, *, worker_rows: int, telemetry: bool = False,
             kv_router: bool = False, pools=None, kernels_loaded: bool = False) -> Estimate:
    """Bytes a run of ``workload`` adds on ``worker_rows`` worker rows (``engine.dp_size`` ranks each).

    ``pools``: for a disaggregated run, ``[(engine, worker_rows), ...]`` of its two pools
    (``engine``/``worker_rows`` are then ignored)."""
    n = int(workload.isl.shape[0])
    if pools is None:
        pools = [(engine, worker_rows)]
    parts = {"loading the kernels": 0 if kernels_loaded else (_KERNELS if len(pools) == 1 else _KERNELS_DISAGG),
             "per-request state": n * _PER_REQUEST * len(pools)}
    tokens = np.asarray(workload.isl, dtype=np.float64) + np.asarray(workload.osl, dtype=np.float64)
    n_keys = 0 if workload.hash_ids is None else int(workload.hash_ids.shape[0])
    touched = space = groups = ranks = 0
    longest = float(tokens.max()) if n else 0.0
    for eng, rows in pools:
        bs = max(int(eng.block_size), 1)
        blocks = int(np.ceil(tokens / bs).sum()) if n else 0
        keys = 0
        if workload.hash_ids is not None and eng.enable_prefix_caching:
            keys = int((np.asarray(workload.isl) // bs).sum())
            n_keys = max(n_keys, keys)
        seats = min(int(eng.max_num_seqs or n or 1), max(n, 1))
        r = int(rows) * max(int(eng.dp_size or 1), 1)
        t, a = _pool(r, int(eng.num_gpu_blocks), blocks, seats * int(math.ceil(longest / bs) + 1), keys)
        touched += t
        space += a
        groups += int(rows)
        ranks += r
        parts.setdefault("per-rank state", 0)
        parts["per-rank state"] += r * (_PER_RANK + 8 * bs)
    parts["per-rank state"] += 8 * (min(int(pools[0][0].num_gpu_blocks), 1 << 22) + (1 << 16))
    # each request's token times until it completes (kernels/timelines.py): 32 bytes a request,
    # a ring of pass ends a rank (8 bytes a pass, twice the longest output, a power of two)
    from fastsim.kernels.timelines import ring_width

    longest_out = int(np.asarray(workload.osl).max()) if n else 1
    parts["token times"] = n * _PER_TIMELINE + ranks * 8 * ring_width(longest_out)
    parts["per-worker state"] = groups * _PER_GROUP
    parts["prompt block keys"] = n_keys * _PER_KEY
    parts["KV pools"] = touched
    if kv_router:
        # the router's (rank, block) table as fastsim.sim sizes it (16 bytes a slot, a power of two
        # at least twice the live blocks) and its per-request queues (37 bytes)
        live = n_keys if n <= 4096 * ranks else n_keys * 4096 * ranks / max(n, 1)
        size = 1024
        while size < 2 * live + 2:
            size *= 2
        parts["router table"] = 16 * size + 37 * n
    if telemetry:
        parts["telemetry"] = _TELEMETRY_START * TELEMETRY_ROW_BYTES
    host = getattr(engine, "host_offload", None) if len(pools) == 1 else None
    if host is not None:
        # kernels/host_tier.py and host_offload.py: a key table of 49 bytes an entry (a power of two
        # at least twice the host blocks; key, state, load, residency time, hash, LRU epoch, a
        # mark), the LRU ring (24 bytes an item, 4 items a host block), the transfer rings, 9 bytes
        # a GPU block (pins), 17 columns a request and Dynamo's hash of every prompt block
        # (decision 0354; at most the prompt tokens / block size); under kv_router, the evicted
        # blocks whose removal has not reached the router (24 bytes an item, decision 0475)
        size = 1
        while size < 2 * host.num_host_blocks:
            size *= 2
        prompt_blocks = int(np.sum(np.asarray(workload.isl, dtype=np.int64))) // max(int(engine.block_size), 1)
        parts["host KV tiers"] = ranks * (49 * size + 24 * (4 * host.num_host_blocks + 64) + 1024 * 57
                                          + 8 * (1 << 16) + 9 * int(engine.num_gpu_blocks)
                                          + (24 * ghost_ring(host.num_host_blocks) if kv_router else 0)) \
            + 136 * n + 8 * prompt_blocks
    return Estimate(parts, space)


def ghost_ring(host_blocks: int, grown: int = 1) -> int:
    """Items a rank of the ring of evicted host blocks a kv_router may still count (decision
    0475): four times the host tier's blocks, ``grown`` times more after a run that filled it."""
    return (4 * int(host_blocks) + 64) * int(grown)


def check(est: Estimate, settings: dict, available: Optional[int] = None) -> None:
    """Refuse a run whose estimate exceeds the available memory, or whose KV pools cannot be
    mapped. ``settings`` maps a part's name to the setting that drives it (e.g. ``"KV pools":
    "num_gpu_blocks 16384 x 4 workers"``), named in the message."""
    space = address_space_bytes()
    if space is not None and est.address_space > space:
        raise InsufficientMemoryError(
            f"the KV pools need {_fmt(est.address_space)} of address space "
            f"({settings.get('KV pools', 'num_gpu_blocks x ranks')}), more than this machine's "
            f"{_fmt(space)} of memory and swap (their pages are mapped only as they are used, but "
            "the mapping must fit); lower num_gpu_blocks or the number of workers"
        )
    avail = available_bytes() if available is None else available
    if avail is None or est.total <= avail:
        return
    top = max(est.parts, key=est.parts.get)
    hint = settings.get(top)
    raise InsufficientMemoryError(
        f"this run needs an estimated {_fmt(est.total)} ({est.describe()}), more than the "
        f"{_fmt(avail)} this machine has available"
        + (f"; the largest part comes from {hint}" if hint else "")
    )


def telemetry_row_cap(available: Optional[int] = None) -> int:
    """Telemetry rows a run may hold: a quarter of the available memory (at least the first
    buffer), so that sampling at a tiny interval cannot exhaust the machine."""
    avail = available_bytes() if available is None else available
    if avail is None:
        avail = 4 * _GB
    return max(_TELEMETRY_START, int(avail // 4 // TELEMETRY_ROW_BYTES))
