"""KV tiers below the GPU pool: Dynamo 1.6.1's host-memory tier (G2) and shared tier (G3).

fastsim reads and checks these settings with Dynamo 1.6.1's rules. The host tier is simulated
(``kernels/host_offload.py``, decisions 0350-0353) on aggregated vLLM workers (attention DP too)
with round robin or kv_router routing, host eviction included (Dynamo's LRU order within one
transfer follows its block hash values, which fastsim computes: decision 0354), and the G3 tier
behind it (``kernels/g3_tier.py``: scope worker_local, decision 0355; cluster_shared, decision
0451, under kv_router too, decision 0485); :func:`check_host_tier_run` refuses the rest by name.
Dynamo 1.4.2 reads its flat offload names but its offline replay runs without any tier, so in
1.4.2 mode those names change nothing, as there.

Nested form (Dynamo 1.6.1), under ``engine``::

    native_host_offload: {num_host_blocks, d2h_bandwidth_gbps: 32, h2d_bandwidth_gbps: 32,
                          scope: dp_rank_local | cluster_shared, shared_d2h_bandwidth_gbps,
                          shared_h2d_bandwidth_gbps, latency_to_first_byte_ms: 0, kv_layout_id}
    kv_cache_bytes_per_token    (required with a host tier: it sizes a block's transfer)
    g3_offload: {scope: worker_local | cluster_shared, num_g3_blocks, latency_to_first_byte_ms: 0.1,
                 read_bandwidth_gbps: 10, write_bandwidth_gbps: 10,
                 shared_read_bandwidth_gbps: 80, shared_write_bandwidth_gbps: 80}

Flat 1.4.2 names, mapped as Dynamo 1.6.1's compatibility runner maps them: ``num_g2_blocks`` ->
``num_host_blocks``, ``bandwidth_g1_to_g2_gbps`` -> ``d2h_bandwidth_gbps``,
``bandwidth_g2_to_g1_gbps`` -> ``h2d_bandwidth_gbps``, ``kv_bytes_per_token`` ->
``kv_cache_bytes_per_token`` (a tier exists only when ``num_g2_blocks`` > 0); the G3/G4 names,
``offload_batch_size`` and ``g1_backend`` have no 1.6.1 counterpart.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from fastsim.errors import InputError, NotSupportedError

__all__ = ["HostOffload", "G3Offload", "check_native_host_offload", "check_g3_offload",
           "flat_host_offload", "check_flat_tiers", "refuse_tiers", "check_host_tier_run", "host_tier_stopped",
           "FLAT_OFFLOAD_FIELDS"]

HOST_FIELDS = ("scope", "num_host_blocks", "d2h_bandwidth_gbps", "h2d_bandwidth_gbps",
               "shared_d2h_bandwidth_gbps", "shared_h2d_bandwidth_gbps", "latency_to_first_byte_ms",
               "kv_layout_id")
HOST_SCOPES = ("dp_rank_local", "cluster_shared")
G3_FIELDS = ("scope", "num_g3_blocks", "latency_to_first_byte_ms", "read_bandwidth_gbps",
             "write_bandwidth_gbps", "shared_read_bandwidth_gbps", "shared_write_bandwidth_gbps")
G3_SCOPES = ("worker_local", "cluster_shared")
# The 1.4.2 flat names and where Dynamo 1.6.1's runner puts them (None: nowhere, an error there).
FLAT_OFFLOAD_FIELDS = {
    "num_g2_blocks": "num_host_blocks",
    "bandwidth_g1_to_g2_gbps": "d2h_bandwidth_gbps",
    "bandwidth_g2_to_g1_gbps": "h2d_bandwidth_gbps",
    "num_g3_blocks": None, "bandwidth_g2_to_g3_gbps": None, "bandwidth_g3_to_g2_gbps": None,
    "bandwidth_g2_to_g4_gbps": None, "bandwidth_g4_to_g2_gbps": None, "enable_g4_storage": None,
    "offload_batch_size": None,
}


@dataclass(frozen=True)
class HostOffload:
    """A host-memory KV tier of one engine (per DP rank, or one pool shared by the cluster)."""

    num_host_blocks: int
    d2h_bandwidth_gbps: float = 32.0
    h2d_bandwidth_gbps: float = 32.0
    scope: str = "dp_rank_local"
    shared_d2h_bandwidth_gbps: Optional[float] = None
    shared_h2d_bandwidth_gbps: Optional[float] = None
    latency_to_first_byte_ms: float = 0.0
    kv_layout_id: Optional[str] = None
    kv_cache_bytes_per_token: int = 0
    g3: Optional["G3Offload"] = None  # the G3 tier behind it (engine.g3_offload)


@dataclass(frozen=True)
class G3Offload:
    """A shared KV tier behind the host tier (per worker, or one pool for the cluster)."""

    scope: str
    num_g3_blocks: int
    latency_to_first_byte_ms: float = 0.1
    read_bandwidth_gbps: float = 10.0
    write_bandwidth_gbps: float = 10.0
    shared_read_bandwidth_gbps: float = 80.0
    shared_write_bandwidth_gbps: float = 80.0


def _jtype(v) -> str:
    from fastsim.config import _json_type

    return _json_type(v)


def _object(value, source: str, path: str, valid: tuple) -> dict:
    if not isinstance(value, Mapping):
        raise InputError(f"{source}: field '{path}' must be an object, got {_jtype(value)}")
    for key in value:
        if key not in valid:
            raise InputError(f"{source}: unknown field '{path}.{key}' (valid fields: {', '.join(valid)})")
    return dict(value)


def _count(value, source: str, path: str) -> int:
    """A positive block count (Dynamo: usize, and 'must be positive')."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputError(f"{source}: field '{path}' must be an integer >= 1, got {_jtype(value)}")
    if value < 1:
        raise InputError(f"{source}: field '{path}' must be positive, got {value}")
    return int(value)


def _rate(value, source: str, path: str) -> float:
    """A finite non-negative number (bandwidths in decimal GB/s, 0 = instantaneous; latencies in ms)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"{source}: field '{path}' must be a number >= 0, got {_jtype(value)}")
    if not math.isfinite(value) or value < 0:
        raise InputError(f"{source}: field '{path}' must be finite and non-negative, got {value}")
    return float(value)


def check_native_host_offload(value, engine: Mapping[str, Any], source: str,
                              path: str = "engine.native_host_offload",
                              kv_field: str = "engine.kv_cache_bytes_per_token") -> Optional[HostOffload]:
    """The host tier configured by ``engine.native_host_offload`` (None: no tier), checked with
    Dynamo 1.6.1's rules; ``engine`` is the whole nested engine object (backend, prefix caching and
    ``kv_cache_bytes_per_token`` decide whether a tier is possible)."""
    if value is None:
        return None
    host = _object(value, source, path, HOST_FIELDS)
    if "num_host_blocks" not in host:
        raise InputError(f"{source}: field '{path}' is missing 'num_host_blocks' (the tier's size in blocks)")
    out: dict[str, Any] = {"num_host_blocks": _count(host["num_host_blocks"], source, f"{path}.num_host_blocks")}
    scope = host.get("scope", "dp_rank_local")
    if scope == "worker_local":
        raise InputError(f"{source}: field '{path}.scope': 'worker_local' is a G3 scope; use 'dp_rank_local' "
                         "for a host tier per DP rank")
    if scope not in HOST_SCOPES:
        raise InputError(f"{source}: field '{path}.scope' must be 'dp_rank_local' or 'cluster_shared', "
                         f"got {_jtype(scope)}")
    out["scope"] = scope
    for name in ("d2h_bandwidth_gbps", "h2d_bandwidth_gbps", "latency_to_first_byte_ms"):
        if name in host:
            out[name] = _rate(host[name], source, f"{path}.{name}")
    for name in ("shared_d2h_bandwidth_gbps", "shared_h2d_bandwidth_gbps"):
        if host.get(name) is not None:
            out[name] = _rate(host[name], source, f"{path}.{name}")
    layout = host.get("kv_layout_id")
    if layout is not None and not isinstance(layout, str):
        raise InputError(f"{source}: field '{path}.kv_layout_id' must be a string, got {_jtype(layout)}")
    if scope == "cluster_shared" and not layout:
        raise InputError(f"{source}: field '{path}': a cluster_shared host tier needs a nonempty kv_layout_id "
                         "(workers share blocks only within one KV layout)")
    out["kv_layout_id"] = layout
    if engine.get("backend", "vllm") != "vllm":
        raise InputError(f"{source}: field '{path}': host KV offload is supported only for backend=vllm, "
                         f"got backend {engine.get('backend')!r}")
    if engine.get("enable_prefix_caching", True) is False:
        raise InputError(f"{source}: field '{path}': host KV offload requires enable_prefix_caching=true "
                         "(host blocks are found by their prefix hashes)")
    kv_bytes = engine.get("kv_cache_bytes_per_token")
    if kv_bytes is None:
        name = kv_field.rsplit(".", 1)[-1]
        raise InputError(f"{source}: field '{path}' needs {kv_field} (the KV bytes of one token, which "
                         f"size a block's transfer to and from host memory): add it, for example "
                         f"\"{name}\": 131072")
    out["kv_cache_bytes_per_token"] = kv_bytes
    return HostOffload(**out)


def check_g3_offload(value, host: Optional[HostOffload], source: str,
                     path: str = "engine.g3_offload") -> Optional[G3Offload]:
    """The shared tier configured by ``engine.g3_offload`` (None: no tier), checked with Dynamo
    1.6.1's rules; it sits behind a host tier, which must be configured too."""
    if value is None:
        return None
    g3 = _object(value, source, path, G3_FIELDS)
    for name in ("scope", "num_g3_blocks"):
        if name not in g3:
            raise InputError(f"{source}: field '{path}' is missing '{name}'")
    if g3["scope"] not in G3_SCOPES:
        raise InputError(f"{source}: field '{path}.scope' must be 'worker_local' or 'cluster_shared', "
                         f"got {_jtype(g3['scope'])}")
    out: dict[str, Any] = {"scope": g3["scope"],
                           "num_g3_blocks": _count(g3["num_g3_blocks"], source, f"{path}.num_g3_blocks")}
    for name in G3_FIELDS[2:]:
        if name in g3:
            out[name] = _rate(g3[name], source, f"{path}.{name}")
    if host is None:
        raise InputError(f"{source}: field '{path}' needs engine.native_host_offload (the G3 tier is filled "
                         "from the host tier): add it")
    return G3Offload(**out)


def flat_host_offload(values: Mapping[str, Any], source: str) -> Optional[dict]:
    """The nested ``engine`` entries that Dynamo 1.6.1's runner makes of the 1.4.2 flat offload
    names in ``values`` (a flat engine-args mapping): ``{"native_host_offload": {...},
    "kv_cache_bytes_per_token": n}``, or None when they configure no tier."""
    gone = [name for name, target in FLAT_OFFLOAD_FIELDS.items()
            if target is None and values.get(name) not in (None, False)]
    if gone:
        raise InputError(f"{source}: field '{gone[0]}' has no Dynamo 1.6.1 equivalent (1.6.1 has a host tier, "
                         "engine.native_host_offload, and a G3 tier, engine.g3_offload, in the nested form); "
                         "remove it or use dynamo_version 1.4.2")
    host = {target: values[name] for name, target in FLAT_OFFLOAD_FIELDS.items()
            if target is not None and values.get(name) is not None}
    if not host.get("num_host_blocks"):
        if host.get("d2h_bandwidth_gbps") is not None or host.get("h2d_bandwidth_gbps") is not None:
            raise InputError(f"{source}: bandwidth_g1_to_g2_gbps / bandwidth_g2_to_g1_gbps need num_g2_blocks "
                             "(the host tier's size in blocks)")
        return None
    out = {"native_host_offload": host}
    if values.get("kv_bytes_per_token") is not None:
        out["kv_cache_bytes_per_token"] = values["kv_bytes_per_token"]
    return out


def check_flat_tiers(engine, version: str, source: str):
    """The engine (an :class:`~fastsim.config.EngineArgs`) as release ``version`` runs it: in 1.4.2
    the flat offload names have no effect (its offline replay has no tiers) and a nested host tier
    is refused (it is a 1.6.1 setting); in 1.6.1 the flat names configure the host tier they map
    to, checked as Dynamo checks it, in ``engine.host_offload``."""
    import dataclasses

    if version == "1.4.2":
        if engine.host_offload is not None and engine.host_offload.g3 is not None:
            raise NotSupportedError(f"{source}: engine.g3_offload is a Dynamo 1.6.1 setting (1.4.2's offline "
                                    "replay has no G3 tier, and no host tier before it); use dynamo_version 1.6.1")
        if engine.host_offload is not None:
            raise NotSupportedError(f"{source}: engine.native_host_offload is a Dynamo 1.6.1 setting (1.4.2's "
                                    "offline replay has no host tier); use dynamo_version 1.6.1")
        return engine
    values = {name: getattr(engine, name) for name in (*FLAT_OFFLOAD_FIELDS, "kv_bytes_per_token")}
    nested = flat_host_offload(values, source)
    if nested is None:
        return engine
    context = {"backend": engine.engine_type, "enable_prefix_caching": engine.enable_prefix_caching,
               "kv_cache_bytes_per_token": nested.get("kv_cache_bytes_per_token")}
    host = check_native_host_offload(nested["native_host_offload"], context, source,
                                     path="num_g2_blocks", kv_field="kv_bytes_per_token")
    return dataclasses.replace(engine, host_offload=host)


def refuse_tiers(host: Optional[HostOffload], g3: Optional[G3Offload], source: str) -> Optional[HostOffload]:
    """The host tier with its G3 tier attached."""
    if g3 is None:
        return host
    import dataclasses

    return dataclasses.replace(host, g3=g3)


def _not_yet(what: str) -> NotSupportedError:
    return NotSupportedError(
        f"a host KV tier (engine.native_host_offload / num_g2_blocks) with {what} is not supported yet by "
        "fastsim (it simulates the host tier on aggregated vLLM workers with round robin or kv_router routing); "
        "remove the tier or that setting")


def check_host_tier_run(engine, *, router_mode: str, disaggregated: bool = False,
                        scaling: bool = False, workload=None) -> None:
    """Refuse by name a run with a host tier that fastsim does not simulate yet."""
    host = engine.host_offload
    if host is None:
        return
    if disaggregated:
        raise _not_yet("disaggregated prefill/decode pools")
    if host.scope != "dp_rank_local":
        raise _not_yet(f"scope {host.scope!r} (one host pool shared by the cluster)")
    if router_mode not in ("round_robin", "kv_router"):
        raise _not_yet(f"router_mode {router_mode!r}")
    if scaling:
        raise _not_yet("a scaling schedule or a planner")
    if engine.aic_nextn:
        raise _not_yet("speculative decoding (aic_nextn)")
    if host.g3 is not None and max(int(engine.dp_size or 1), 1) > 1:
        # Dynamo 1.6.1: "invalid replay spec: g3_offload supports only dp_size=1"
        raise InputError(f"engine.g3_offload supports only dp_size=1 (as in Dynamo 1.6.1), got dp_size "
                         f"{engine.dp_size}: remove the G3 tier or the attention DP ranks")
    if workload is not None:
        if workload.stream_row is not None or workload.key_isl is not None:
            raise _not_yet("mooncake-delta session streams")


def host_tier_stopped(reason: int, rank: int, engine) -> NotSupportedError:
    """The refusal of a run whose host tier met what fastsim does not simulate."""
    from fastsim.kernels.host_tier import LOG_FULL

    if reason == LOG_FULL:
        return NotSupportedError(
            f"the host KV tier of rank {rank} had more transfers in flight than fastsim keeps (a store or "
            "load ring is full): not supported yet; lower the traffic or raise the bandwidths")
    return NotSupportedError(f"the host KV tier stopped the run (reason {reason})")
