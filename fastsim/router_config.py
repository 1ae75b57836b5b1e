"""KV router configuration: the ``--router-config`` fields of Dynamo 1.4.2 (``KvRouterConfig``).

Field names and defaults are those Dynamo 1.4.2 accepts (cluster doc C4, from its ``unknown field``
error and the ``KvRouterConfig()`` signature). Effective semantics in offline replay (verified doc
Q11, cluster doc C3-C4):

* ``overlap_score_weight``, when given, sets ``prefill_load_scale``; 0 also zeroes the credit;
* ``router_queue_threshold`` None (the default) means no router queue;
* ``router_track_output_blocks`` is accepted and has no effect, as in Dynamo;
* infrastructure fields (event threads, TTLs, replica sync, remote indexers...) have no effect on
  an offline replay and are accepted as Dynamo accepts them;
* ``overlap_score_credit_decay`` and ``decode_active_request_weight`` enter the cost as in
  Dynamo (``kernels/router.py``, docs/decisions/0260);
* ``host_cache_hit_weight`` (0 to 1, as both releases require) weighs a host KV tier's blocks in
  the overlap (docs/decisions/0353); ``disk_cache_hit_weight`` (0 to 1) has no tier to weigh;
* options that change routing in ways fastsim does not model (AIC prefill-load model, shared
  caches, conditional disaggregation, policy files) raise :class:`NotSupportedError` unless left
  at their defaults.
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass, fields
from typing import Any, Optional

from fastsim.errors import InputError, NotSupportedError

__all__ = ["RouterConfig"]


@dataclass(frozen=True)
class RouterConfig:
    """Dynamo 1.4.2 ``KvRouterConfig`` fields with their defaults."""

    overlap_score_credit: float = 1.0
    overlap_score_credit_decay: float = 0.0
    prefill_load_scale: float = 1.0
    decode_active_request_weight: float = 0.0
    overlap_score_weight: Optional[float] = None
    host_cache_hit_weight: float = 0.75
    disk_cache_hit_weight: float = 0.25
    router_temperature: float = 0.0
    use_kv_events: bool = True
    durable_kv_events: Optional[bool] = None
    router_replica_sync: bool = False
    router_track_active_blocks: bool = True
    router_track_output_blocks: bool = False
    router_assume_kv_reuse: bool = True
    router_track_prefill_tokens: bool = True
    router_tracking_hash: str = "public-xxh3-v1"
    router_tracking_key_file: Optional[str] = None
    router_tracking_key_id: Optional[str] = None
    router_prefill_load_model: str = "none"
    router_snapshot_threshold: Optional[int] = None
    router_reset_states: Optional[bool] = None
    router_ttl_secs: float = 120.0
    router_queue_threshold: Optional[float] = None
    router_policy_config: Optional[str] = None
    router_event_threads: int = 4
    skip_initial_worker_wait: Optional[bool] = None
    router_queue_policy: str = "fcfs"
    use_remote_indexer: bool = False
    serve_indexer: bool = False
    shared_cache_multiplier: float = 0.0
    shared_cache_type: str = "none"
    router_predicted_ttl_secs: Optional[float] = None
    conditional_disagg_enabled: Optional[bool] = None
    conditional_disagg_policy: Optional[str] = None
    conditional_disagg_eff_isl_threshold: Optional[float] = None
    conditional_disagg_eff_isl_ratio_threshold: Optional[float] = None
    conditional_disagg_prefill_busy_threshold: Optional[float] = None
    conditional_disagg_decode_busy_threshold: Optional[float] = None

    def __post_init__(self):
        for name in ("router_temperature", "overlap_score_credit", "prefill_load_scale"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
                raise InputError(f"--router-config: '{name}' is {v!r}; it must be a finite number >= 0")
        for name in ("overlap_score_weight", "router_queue_threshold"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0):
                raise InputError(f"--router-config: '{name}' is {v!r}; it must be null or a finite number >= 0")
        for name in ("host_cache_hit_weight", "disk_cache_hit_weight"):  # (Dynamo: "must be between 0 and 1")
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
                raise InputError(f"--router-config: '{name}' is {v!r}; it must be a number between 0 and 1")
        if self.router_queue_policy not in ("fcfs", "lcfs", "wspt"):
            raise InputError(
                f"--router-config: 'router_queue_policy' is {self.router_queue_policy!r}; "
                "allowed: 'fcfs', 'lcfs', 'wspt'"
            )
        for name in ("router_track_active_blocks", "router_track_output_blocks",
                     "router_assume_kv_reuse", "router_track_prefill_tokens"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"--router-config: '{name}' must be true or false")
        for name in ("overlap_score_credit_decay", "decode_active_request_weight"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
                raise InputError(f"--router-config: '{name}' is {v!r}; it must be a finite number >= 0")
        unsupported = {
            "router_prefill_load_model": "none",
            "router_policy_config": None,
            "shared_cache_multiplier": 0.0,
            "shared_cache_type": "none",
            "conditional_disagg_enabled": None,
        }
        for name, default in unsupported.items():
            v = getattr(self, name)
            if v != default and not (name == "conditional_disagg_enabled" and v is False):
                raise NotSupportedError(f"--router-config: '{name}' = {v!r} is not supported yet by fastsim")

    # effective values ---------------------------------------------------------------------
    @property
    def effective_prefill_load_scale(self) -> float:
        """``overlap_score_weight`` when given, else ``prefill_load_scale``."""
        w = self.overlap_score_weight
        return float(self.prefill_load_scale if w is None else w)

    @property
    def effective_credit(self) -> float:
        """``overlap_score_credit``, zeroed by ``overlap_score_weight == 0``."""
        if self.overlap_score_weight is not None and self.overlap_score_weight == 0:
            return 0.0
        return float(self.overlap_score_credit)

    @classmethod
    def coerce(cls, x: Any, source: str = "--router-config") -> "RouterConfig":
        """A RouterConfig from None, a RouterConfig, a dict or JSON text (``[]`` = defaults)."""
        if x is None:
            return cls()
        if isinstance(x, RouterConfig):
            return x
        if isinstance(x, str):
            try:
                x = json.loads(x)
            except json.JSONDecodeError as exc:
                raise InputError(f"{source}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
        if isinstance(x, list) and not x:
            return cls()
        if not isinstance(x, dict):
            raise InputError(f"{source} must contain a JSON object, got {type(x).__name__}")
        valid = [f.name for f in fields(cls)]
        for name in x:
            if name not in valid:
                close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                raise InputError(f"{source}: unknown field '{name}'{hint}")
        return cls(**x)
