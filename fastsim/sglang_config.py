"""Checks of the SGLang engine's settings (Dynamo's ``engine_type: sglang`` / ``engine.backend: sglang``).

The ``sglang`` object takes Dynamo's names and defaults (``schedule_policy`` fifo, ``max_prefill_tokens``
16384, ``chunked_prefill_size`` 8192, ``clip_max_new_tokens`` 4096, ``schedule_conservativeness`` 1.0,
and 1.4.2's ``page_size``); ``prefill_decode_interval`` (default 0) is kept in it too.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from fastsim.errors import InputError

_INT_FIELDS = ("max_prefill_tokens", "chunked_prefill_size", "clip_max_new_tokens", "page_size")
_VALID = ("schedule_policy", "max_prefill_tokens", "chunked_prefill_size", "clip_max_new_tokens",
          "schedule_conservativeness", "page_size", "prefill_decode_interval")


class SglangSettings(NamedTuple):
    policy: str
    max_prefill_tokens: int
    chunked_prefill_size: int
    clip_max_new_tokens: int
    schedule_conservativeness: float
    prefill_decode_interval: int


def move_flat_interval(raw: dict, source: str) -> None:
    """The flat ``prefill_decode_interval`` goes into the ``sglang`` object (the only engine with it)."""
    value = raw.pop("prefill_decode_interval")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"{source}: field 'prefill_decode_interval' must be a non-negative integer, got {value!r}")
    if str(raw.get("engine_type", "vllm")).lower() != "sglang":
        if value != 0:
            raise InputError(f"{source}: field 'prefill_decode_interval': prefill_decode_interval is supported "
                             "only for engine_type=sglang")
        return
    sub = dict(raw.get("sglang") or {})
    sub["prefill_decode_interval"] = value
    raw["sglang"] = sub


def check_sglang_args(obj, source: str) -> None:
    """Validate ``obj.sglang`` (an EngineArgs being built) and refuse what is not modelled yet."""
    if obj.engine_type != "sglang":
        raise InputError(f"{source}: field 'sglang' configures the SGLang engine; set engine_type to 'sglang' "
                         "or remove it")
    sub = obj.sglang if obj.sglang is not None else {}
    if not isinstance(sub, dict):
        raise InputError(f"{source}: field 'sglang' must be an object, got {type(sub).__name__}")
    for key, value in sub.items():
        if key not in _VALID:
            raise InputError(f"{source}: unknown field 'sglang.{key}' (valid fields: {', '.join(_VALID)})")
        if key in _INT_FIELDS and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InputError(f"{source}: field 'sglang.{key}' must be an integer >= 1, got {value!r}")
    policy = sub.get("schedule_policy", "fifo")
    if policy not in ("fifo", "fcfs", "lpm"):
        raise InputError(f"{source}: field 'sglang.schedule_policy' must be 'fifo' (or 'fcfs') or 'lpm', "
                         f"got {policy!r}")
    cons = sub.get("schedule_conservativeness", 1.0)
    if isinstance(cons, bool) or not isinstance(cons, (int, float)) or not math.isfinite(cons) or cons < 0:
        raise InputError(f"{source}: field 'sglang.schedule_conservativeness' must be a finite number >= 0, "
                         f"got {cons!r}")
    interval = sub.get("prefill_decode_interval", 0)
    if isinstance(interval, bool) or not isinstance(interval, int) or interval < 0:
        raise InputError(f"{source}: field 'prefill_decode_interval' must be a non-negative integer, "
                         f"got {interval!r}")
    if "page_size" in sub:
        object.__setattr__(obj, "block_size", sub["page_size"])
    chunk = sub.get("chunked_prefill_size", 8192)
    if obj.block_size and chunk % obj.block_size:
        raise InputError(f"{source}: engine_type=sglang requires sglang.chunked_prefill_size to be divisible by "
                         f"block_size, got chunked_prefill_size={chunk}, block_size={obj.block_size}")


def sglang_settings(engine) -> SglangSettings:
    sub = engine.sglang or {}
    policy = sub.get("schedule_policy", "fifo")
    return SglangSettings("lpm" if policy == "lpm" else "fifo", int(sub.get("max_prefill_tokens", 16384)),
                          int(sub.get("chunked_prefill_size", 8192)), int(sub.get("clip_max_new_tokens", 4096)),
                          float(sub.get("schedule_conservativeness", 1.0)),
                          int(sub.get("prefill_decode_interval", 0)))
