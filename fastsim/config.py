"""Engine arguments: Dynamo 1.4.2 ``MockEngineArgs`` field names, defaults and validation rules.

:class:`EngineArgs` is a frozen dataclass with one attribute per JSON field that
``dynamo.mocker.MockEngineArgs.from_json`` accepts (checked against the 1.4.2 release), plus
``timing_model`` (Dynamo 1.6's timing-model selector, which the flat form also takes). Dynamo 1.6's
nested schema (``{"engine": {...}, "dp_size": ..., "dynamo": {...}}``) is read into these flat
fields by :mod:`fastsim.engine_config`. Each field belongs to one of four groups (see
``FIELD_GROUPS``):

* ``modelled``: fastsim simulates it (vLLM core, block pool, timing, data-parallel ranks).
* ``no_effect``: accepted with Dynamo's default and validation, but, as in Dynamo's aggregated
  offline replay, it changes nothing (live-mocker ports, ``startup_time`` of a static fleet, the
  disaggregated KV-transfer model, the router queue policy, ``reasoning``: its three fields are
  required, then nothing changes; the KVBM offload tiers ``num_g2_blocks`` ... of 1.4.2, whose
  offline replay runs without them, while 1.6.1 mode maps them to its host tier, see
  :mod:`fastsim.kv_tiers`). ``has_perf_model`` is a legacy field
  Dynamo ignores; ``is_prefill``/``is_decode`` are JSON spellings of ``worker_type``.
* ``unsupported``: a valid Dynamo option fastsim does not model yet (SGLang/TRT-LLM cores, AIC
  timing). Any non-default value raises :class:`NotSupportedError`.

Validation follows Dynamo: unknown fields, duplicate keys, ``null`` for a non-nullable field, a
wrong JSON type (``64.0`` is not an integer, ``1`` is not a boolean) and out-of-range values are all
errors. Enumerations are case-insensitive as in Dynamo 1.4.2 (``"FIFO"``, ``"Prefill"``), except
``router_queue_policy`` and ``g1_backend``, which Dynamo matches exactly. ``block_size`` 0 means the
engine default (64 for vLLM), as in Dynamo. ``max_num_seqs``/``max_num_batched_tokens`` may be
``null`` (no limit). Where Dynamo only logs an error, fastsim raises (a missing
``planner_profile_data`` path would otherwise fall back silently to the polynomial model).
``timing_model`` is ``None`` (the polynomial, or ``planner_profile_data``'s grid) or
``{"type": "fixed", "prefill_ms": x, "decode_ms": y}``; ``{"type": "polynomial"}`` and
``{"type": "external", "provider": "dynamo_profile", "config": {"path": NPZ}}`` are read into those.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import numbers
import os
from dataclasses import dataclass, fields
from typing import Any, Mapping, Optional

from fastsim.engine_config import (
    check_fixed_timing,
    check_reasoning,
    is_nested,
    misplaced_flat_field_hint,
    nested_to_flat,
    timing_fields,
)
from fastsim.errors import InputError, NotSupportedError

__all__ = ["EngineArgs", "FIELD_GROUPS", "ENGINE_ARG_FIELDS"]

_U32_MAX = 2**32 - 1
_U64_MAX = 2**64 - 1
_DEFAULT_BLOCK_SIZE = {"vllm": 64, "sglang": 1, "trtllm": 32}


@dataclass(frozen=True)
class EngineArgs:
    """Mock engine arguments (names and defaults of Dynamo 1.4.2 ``MockEngineArgs``).

    Construct with keywords (validated in ``__post_init__``), or from JSON/dict with
    :meth:`from_json`, or from anything accepted by :meth:`coerce`.
    """

    # --- modelled -------------------------------------------------------------------------
    engine_type: str = "vllm"
    num_gpu_blocks: int = 16384
    block_size: int = 64
    max_model_len: Optional[int] = None
    max_num_seqs: Optional[int] = 256
    max_num_batched_tokens: Optional[int] = 8192
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    speedup_ratio: float = 1.0
    decode_speedup_ratio: float = 1.0
    dp_size: int = 1
    worker_type: str = "aggregated"
    preemption_mode: str = "lifo"
    planner_profile_data: Optional[str] = None
    g1_backend: str = "native"
    timing_model: Optional[Any] = None
    prefill_schedule_interval: int = 1  # Dynamo 1.6 (vllm): prefills every N steps of a DP group
    # Dynamo 1.6's host KV tier (a fastsim.kv_tiers.HostOffload), set from engine.native_host_offload
    # or, in 1.6.1 mode, from the flat num_g2_blocks names (fastsim/kv_tiers.py)
    host_offload: Optional[Any] = None
    # --- accepted, no effect in aggregated offline replay (as in Dynamo) ----------------------
    startup_time: Optional[float] = None
    kv_bytes_per_token: Optional[int] = None
    kv_transfer_bandwidth: Optional[float] = None
    kv_transfer_timing_mode: str = "full_prompt"
    router_queue_policy: Optional[str] = None
    enable_local_indexer: bool = False
    bootstrap_port: Optional[int] = None
    handoff_session_timeout_ms: int = 300000
    response_replay_trace_path: Optional[str] = None
    zmq_kv_events_port: Optional[int] = None
    zmq_replay_port: Optional[int] = None
    reasoning: Optional[Any] = None
    # KVBM offload tiers: Dynamo 1.4.2's offline replay runs without them; in 1.6.1 mode the G2
    # names map to the host tier, which fastsim refuses until it simulates it (fastsim/kv_tiers.py).
    num_g2_blocks: Optional[int] = None
    num_g3_blocks: Optional[int] = None
    enable_g4_storage: bool = False
    offload_batch_size: Optional[int] = None
    bandwidth_g1_to_g2_gbps: Optional[float] = None
    bandwidth_g2_to_g1_gbps: Optional[float] = None
    bandwidth_g2_to_g3_gbps: Optional[float] = None
    bandwidth_g3_to_g2_gbps: Optional[float] = None
    bandwidth_g2_to_g4_gbps: Optional[float] = None
    bandwidth_g4_to_g2_gbps: Optional[float] = None
    # --- not supported yet (any non-default value is an error) -------------------------------
    aic_backend: Optional[str] = None
    aic_system: Optional[str] = None
    aic_backend_version: Optional[str] = None
    aic_tp_size: Optional[int] = None
    aic_model_path: Optional[str] = None
    aic_moe_tp_size: Optional[int] = None
    aic_moe_ep_size: Optional[int] = None
    aic_attention_dp_size: Optional[int] = None
    aic_gemm_dtype: Optional[str] = None
    aic_moe_dtype: Optional[str] = None
    aic_fmha_dtype: Optional[str] = None
    aic_kv_cache_dtype: Optional[str] = None
    aic_comm_dtype: Optional[str] = None
    aic_nextn: Optional[int] = None
    aic_nextn_accept_rates: Optional[str] = None
    aic_mtp_seed: int = 42
    gpu_memory_utilization: Optional[float] = None
    mem_fraction_static: Optional[float] = None
    free_gpu_memory_fraction: Optional[float] = None
    sglang: Optional[Any] = None
    trtllm: Optional[Any] = None

    def __post_init__(self):
        _validate(self, "EngineArgs")

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_json(cls, text_or_dict: "str | Mapping[str, Any]", source: str = "--extra-engine-args") -> "EngineArgs":
        """Parse Dynamo ``MockEngineArgs`` JSON (a JSON object as text, or an already-parsed dict).

        ``source`` names the origin in error messages (a CLI flag, a file, a keyword argument).
        Raises :class:`InputError` for malformed JSON (with line/column), duplicate or unknown
        fields (with the closest valid field), wrong types or ranges (naming the field and what is
        allowed), and :class:`NotSupportedError` for options fastsim does not model yet.
        """
        if isinstance(text_or_dict, (str, bytes, bytearray)):
            raw = _parse_json_object(text_or_dict, source)
        elif isinstance(text_or_dict, Mapping):
            raw = dict(text_or_dict)
            for key in raw:
                if not isinstance(key, str):
                    raise InputError(f"{source}: field names must be strings, got {key!r}")
        else:
            raise InputError(
                f"{source}: engine args must be a JSON object (text or dict), got {type(text_or_dict).__name__}"
            )
        return _build(cls, raw, source)

    @classmethod
    def coerce(cls, x: Any, source: str = "engine args") -> "EngineArgs":
        """Return ``x`` as :class:`EngineArgs`.

        Accepts an :class:`EngineArgs` (returned as is), ``None`` (all defaults), a dict, a JSON
        object as text, or the path of a file holding such JSON (a fastsim convenience; Dynamo's
        replay CLI takes inline JSON only).
        """
        if x is None:
            return cls()
        if isinstance(x, cls):
            return x
        if isinstance(x, os.PathLike):
            return cls.from_json(_read_text(os.fspath(x), source), source=os.fspath(x))
        if isinstance(x, (str, bytes, bytearray)):
            text = x.decode() if isinstance(x, (bytes, bytearray)) else x
            stripped = text.strip()
            if stripped and stripped[0] not in "{[":
                if os.path.isfile(stripped):
                    return cls.from_json(_read_text(stripped, source), source=stripped)
                if not stripped.startswith(("null", "true", "false", '"')) and not stripped[0].isdigit():
                    raise InputError(
                        f"{source}: {stripped!r} is neither a JSON object nor an existing file"
                    )
            return cls.from_json(text, source=source)
        if isinstance(x, Mapping):
            return cls.from_json(x, source=source)
        raise InputError(
            f"{source}: expected EngineArgs, a dict, JSON text or None, got {type(x).__name__}"
        )

    # ------------------------------------------------------------------ helpers
    def to_dict(self) -> dict:
        """All fields as a plain dict (JSON-serialisable; round-trips through :meth:`from_json`)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def to_json(self, **kw) -> str:
        """The fields as JSON text (``json.dumps`` keywords pass through)."""
        return json.dumps(self.to_dict(), **kw)

    def replace(self, **changes) -> "EngineArgs":
        """A validated copy with some fields changed (unknown names raise :class:`InputError`)."""
        unknown = [k for k in changes if k not in ENGINE_ARG_FIELDS]
        if unknown:
            raise InputError(_unknown_field_message("EngineArgs.replace", unknown[0]))
        return dataclasses.replace(self, **changes)

    @property
    def is_prefill(self) -> bool:
        """True for a prefill-only worker (``worker_type == "prefill"``)."""
        return self.worker_type == "prefill"

    @property
    def is_decode(self) -> bool:
        """True for a decode-only worker (``worker_type == "decode"``)."""
        return self.worker_type == "decode"

    @property
    def kv_capacity_tokens(self) -> int:
        """KV capacity of one DP rank in tokens (``num_gpu_blocks * block_size``)."""
        return self.num_gpu_blocks * self.block_size


# ---------------------------------------------------------------------- field table
# kind: uint (non-negative JSON integer, optional max), int1 (integer >= 1), float0 (finite >= 0),
# bool, enum (case-insensitive choices), enum_exact, path, str, obj.
# nullable: None allowed in JSON; "default" means null -> the default value (num_gpu_blocks).
_SPEC: dict[str, dict] = {
    "engine_type": dict(kind="enum", choices=("vllm", "sglang", "trtllm")),
    "num_gpu_blocks": dict(kind="int1", nullable="default"),
    "block_size": dict(kind="uint"),
    "max_model_len": dict(kind="int1", nullable=True),
    "max_num_seqs": dict(kind="int1", nullable=True),
    "max_num_batched_tokens": dict(kind="int1", nullable=True),
    "enable_prefix_caching": dict(kind="bool"),
    "enable_chunked_prefill": dict(kind="bool"),
    "speedup_ratio": dict(kind="float0"),
    "decode_speedup_ratio": dict(kind="float0"),
    "dp_size": dict(kind="int1", max=_U32_MAX),
    "worker_type": dict(kind="enum", choices=("aggregated", "prefill", "decode")),
    "preemption_mode": dict(kind="enum", choices=("lifo", "fifo")),
    "planner_profile_data": dict(kind="path", nullable=True),
    "g1_backend": dict(kind="enum_exact", choices=("native", "kvbm")),
    "startup_time": dict(kind="float0", nullable=True),
    "kv_bytes_per_token": dict(kind="uint", nullable=True),
    "kv_transfer_bandwidth": dict(kind="float0", nullable=True),
    "kv_transfer_timing_mode": dict(kind="enum", choices=("full_prompt", "destination_missing")),
    "router_queue_policy": dict(kind="enum_exact", choices=("fcfs", "lcfs", "wspt"), nullable=True),
    "enable_local_indexer": dict(kind="bool"),
    "bootstrap_port": dict(kind="uint", nullable=True, max=65535),
    "handoff_session_timeout_ms": dict(kind="uint", max=_U64_MAX),
    "response_replay_trace_path": dict(kind="path", nullable=True),
    "zmq_kv_events_port": dict(kind="uint", nullable=True, max=65535),
    "zmq_replay_port": dict(kind="uint", nullable=True, max=65535),
    "timing_model": dict(kind="timing", nullable=True),
    "reasoning": dict(kind="reasoning", nullable=True),
    "num_g2_blocks": dict(kind="uint", nullable=True),
    "num_g3_blocks": dict(kind="uint", nullable=True),
    "enable_g4_storage": dict(kind="bool"),
    "offload_batch_size": dict(kind="uint", nullable=True),
    **{name: dict(kind="float0", nullable=True) for name in (
        "bandwidth_g1_to_g2_gbps", "bandwidth_g2_to_g1_gbps", "bandwidth_g2_to_g3_gbps",
        "bandwidth_g3_to_g2_gbps", "bandwidth_g2_to_g4_gbps", "bandwidth_g4_to_g2_gbps")},
    "prefill_schedule_interval": dict(kind="int1"),
    # speculative decoding (MTP, decision 0340)
    "aic_nextn": dict(kind="int1", nullable=True, max=5),
    "aic_nextn_accept_rates": dict(kind="rates", nullable=True),
    "aic_mtp_seed": dict(kind="uint"),
}
_MTP_FIELDS = ("aic_nextn", "aic_nextn_accept_rates", "aic_mtp_seed")

_UNSUPPORTED_REASON = {
    "aic": "it configures AIConfigurator (AIC) timing and capacity models",
    "mem": "it configures GPU-memory based KV capacity estimation (AIC); set num_gpu_blocks instead",
    "sglang": "it configures the SGLang engine core",
    "trtllm": "it configures the TRT-LLM engine core",
}
_UNSUPPORTED: dict[str, str] = {}
for _f in (
    "aic_backend aic_system aic_backend_version aic_tp_size aic_model_path aic_moe_tp_size "
    "aic_moe_ep_size aic_attention_dp_size aic_gemm_dtype aic_moe_dtype aic_fmha_dtype "
    "aic_kv_cache_dtype aic_comm_dtype"
).split():
    _UNSUPPORTED[_f] = "aic"
for _f in ("gpu_memory_utilization", "mem_fraction_static", "free_gpu_memory_fraction"):
    _UNSUPPORTED[_f] = "mem"
_UNSUPPORTED.update(sglang="sglang", trtllm="trtllm")

ENGINE_ARG_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(EngineArgs))
_DEFAULTS = {f.name: f.default for f in fields(EngineArgs)}
# JSON-only spellings Dynamo accepts besides the dataclass fields.
_JSON_EXTRA = ("is_prefill", "is_decode", "has_perf_model")
_ALL_JSON_FIELDS = ENGINE_ARG_FIELDS + _JSON_EXTRA + ("prefill_decode_interval",)

FIELD_GROUPS: dict[str, tuple[str, ...]] = {
    "modelled": ENGINE_ARG_FIELDS[: ENGINE_ARG_FIELDS.index("startup_time")] + _MTP_FIELDS,
    "no_effect": ENGINE_ARG_FIELDS[
        ENGINE_ARG_FIELDS.index("startup_time") : ENGINE_ARG_FIELDS.index("aic_backend")
    ]
    + _JSON_EXTRA,
    "unsupported": tuple(_UNSUPPORTED),
}
assert set(FIELD_GROUPS["unsupported"]) | set(_MTP_FIELDS) == set(ENGINE_ARG_FIELDS[ENGINE_ARG_FIELDS.index("aic_backend") :])

_HINTS = {
    "watermark": "Dynamo 1.4.2 has no watermark: admission is an exact fit "
    "(older mockers had `watermark`); remove the field",
}


# ---------------------------------------------------------------------- parsing
def _read_text(path: str, source: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError as exc:
        raise InputError(f"{source}: cannot read {path}: {exc.strerror or exc}") from None


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def _no_duplicates(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


class _DuplicateKey(Exception):
    pass


def _parse_json_object(text, source: str) -> dict:
    if isinstance(text, (bytes, bytearray)):
        text = text.decode("utf-8", errors="replace")
    try:
        raw = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{source}: malformed JSON at line {exc.lineno} column {exc.colno} (char {exc.pos}): {exc.msg}"
        ) from None
    except _DuplicateKey as exc:
        raise InputError(f"{source}: duplicate field '{exc.args[0]}'") from None
    except ValueError as exc:  # NaN / Infinity
        raise InputError(f"{source}: malformed JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise InputError(f"{source}: engine args must be a JSON object, got {_json_type(raw)}")
    return raw


def _json_type(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"boolean {str(v).lower()}"
    if isinstance(v, int):
        return f"integer {v}"
    if isinstance(v, float):
        return f"number {v!r}"
    if isinstance(v, str):
        return f"string {v!r}"
    if isinstance(v, (list, tuple)):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def _unknown_field_message(source: str, name: str) -> str:
    msg = f"{source}: unknown field '{name}'"
    if name in _HINTS:
        return f"{msg}: {_HINTS[name]}"
    close = difflib.get_close_matches(name, _ALL_JSON_FIELDS, n=1, cutoff=0.6)
    if close:
        return f"{msg}; did you mean '{close[0]}'?"
    return f"{msg} (valid fields: {', '.join(ENGINE_ARG_FIELDS)})"


def _build(cls, raw: dict, source: str) -> "EngineArgs":
    if is_nested(raw):
        raw = nested_to_flat(raw, source)
    for name in raw:
        if name not in _ALL_JSON_FIELDS:
            hint = misplaced_flat_field_hint(name)
            if hint:
                raise InputError(f"{source}: unknown field '{name}': {hint}")
            raise InputError(_unknown_field_message(source, name))
    raw = dict(raw)
    if raw.get("timing_model") is not None:
        # The flat form takes Dynamo 1.6's selector too: polynomial, fixed, or a dynamo_profile NPZ.
        timing = timing_fields(raw.pop("timing_model"), source, "timing_model")
        if "planner_profile_data" in timing and raw.get("planner_profile_data") is not None:
            raise InputError(f"{source}: choose one timing provider: planner_profile_data or timing_model")
        raw.update(timing)
    raw.pop("has_perf_model", None)  # legacy field, ignored by Dynamo 1.4.2 as well
    if "prefill_decode_interval" in raw:
        from fastsim.sglang_config import move_flat_interval

        move_flat_interval(raw, source)
    is_prefill = raw.pop("is_prefill", False)
    is_decode = raw.pop("is_decode", False)
    for flag, val in (("is_prefill", is_prefill), ("is_decode", is_decode)):
        if not isinstance(val, bool):
            raise InputError(f"{source}: field '{flag}' must be a boolean (true/false), got {_json_type(val)}")
    if is_prefill and is_decode:
        raise InputError(f"{source}: is_prefill and is_decode cannot both be true")
    if (is_prefill or is_decode) and "worker_type" in raw:
        raise InputError(f"{source}: worker_type cannot be combined with is_prefill or is_decode")
    if is_prefill:
        raw["worker_type"] = "prefill"
    elif is_decode:
        raw["worker_type"] = "decode"
    values = {}
    for name, value in raw.items():
        spec = _SPEC.get(name)
        if value is None and spec is not None and spec.get("nullable") == "default":
            continue
        values[name] = _check_value(name, value, source, spec)
    _warn_lenient(values, source)
    # Dynamo: block_size 0 (or absent) -> engine default.
    if values.get("block_size", 0) == 0:
        values["block_size"] = _DEFAULT_BLOCK_SIZE[values.get("engine_type", "vllm")]
    return _construct(cls, values, source)


def _warn_lenient(values: dict, source: str) -> None:
    """Dynamo's leniencies that fastsim keeps, with a warning where the value looks like a mistake."""
    import warnings

    from fastsim.errors import FastsimWarning

    if values.get("block_size", None) == 0:
        warnings.warn(f"{source}: block_size 0 means the engine default "
                      f"({_DEFAULT_BLOCK_SIZE[values.get('engine_type', 'vllm')]}), as in Dynamo",
                      FastsimWarning, stacklevel=4)
    for name in ("speedup_ratio", "decode_speedup_ratio"):
        if values.get(name, None) == 0:
            warnings.warn(f"{source}: {name} 0 leaves the timings unscaled (as 1 does), as in Dynamo",
                          FastsimWarning, stacklevel=4)


def _construct(cls, values: dict, source: str) -> "EngineArgs":
    obj = object.__new__(cls)
    for name in ENGINE_ARG_FIELDS:
        object.__setattr__(obj, name, values.get(name, _DEFAULTS[name]))
    _validate(obj, source)
    return obj


def _check_value(name: str, value, source: str, spec: Optional[dict]):
    """Type/range-check one field; return the normalised value (lower-cased enums, str paths)."""
    where = f"{source}: field '{name}'"
    if spec is None:  # unsupported group: any non-default is an error (checked in _validate)
        return value
    kind = spec["kind"]
    if value is None:
        if spec.get("nullable"):
            return None
        raise InputError(f"{where} must not be null")
    if kind in ("uint", "int1"):
        lo = 1 if kind == "int1" else 0
        hi = spec.get("max", _U64_MAX)
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise InputError(f"{where} must be an integer >= {lo}, got {_json_type(value)}")
        if value < lo or value > hi:
            rng = f"an integer >= {lo}" if hi == _U64_MAX else f"an integer in [{lo}, {hi}]"
            extra = " (0 = engine default)" if name == "block_size" else ""
            raise InputError(f"{where} must be {rng}{extra}, got {value}")
        return int(value)
    if kind == "float0":
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise InputError(f"{where} must be a number >= 0, got {_json_type(value)}")
        if not math.isfinite(value) or value < 0:
            raise InputError(f"{where} must be a finite number >= 0, got {value}")
        return float(value)
    if kind == "bool":
        if not isinstance(value, bool):
            raise InputError(f"{where} must be a boolean (true/false), got {_json_type(value)}")
        return value
    if kind in ("enum", "enum_exact"):
        choices = spec["choices"]
        if not isinstance(value, str):
            raise InputError(f"{where} must be one of {_fmt_choices(choices)}, got {_json_type(value)}")
        v = value.lower() if kind == "enum" else value
        if v not in choices:
            case = " (case-sensitive)" if kind == "enum_exact" else ""
            raise InputError(f"{where} must be one of {_fmt_choices(choices)}{case}, got {value!r}")
        return v
    if kind == "timing":
        if not isinstance(value, Mapping) or value.get("type") != "fixed":
            raise InputError(f"{where} must be null or a fixed model "
                             f'{{"type": "fixed", "prefill_ms": x, "decode_ms": y}}, got {_json_type(value)}')
        return check_fixed_timing(value, source, name)
    if kind == "reasoning":
        return check_reasoning(value, source, name)
    if kind == "rates":
        if not isinstance(value, str):
            raise InputError(f"{where} must be a string of comma-separated rates in [0, 1] "
                             f'(e.g. "0.8,0.6"), got {_json_type(value)}')
        accept_rates(value, 1, where)
        return value
    if kind == "path":
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        if not isinstance(value, str) or not value:
            raise InputError(f"{where} must be a path string, got {_json_type(value)}")
        return value
    raise AssertionError(kind)  # pragma: no cover


def _fmt_choices(choices) -> str:
    return ", ".join(repr(c) for c in choices)


_DEFAULT_ACCEPT_RATES = (0.85, 0.3, 0.0, 0.0, 0.0)  # Dynamo's when aic_nextn_accept_rates is unset


def accept_rates(text: Optional[str], nextn: int, where: str = "aic_nextn_accept_rates") -> list[float]:
    """The ``nextn`` conditional acceptance rates of ``aic_nextn_accept_rates`` as Dynamo reads
    them: comma-separated numbers in [0, 1]; missing ones are 0, extra ones ignored; unset or
    blank gives Dynamo's defaults."""
    if text is None or not text.strip():
        rates = list(_DEFAULT_ACCEPT_RATES)
    else:
        rates = []
        for i, part in enumerate(text.split(",")):
            part = part.strip()
            try:
                if "_" in part:  # Python reads 1_0 as 10, Rust does not
                    raise ValueError
                rate = float(part)
            except ValueError:
                raise InputError(f"{where}: invalid rate {part!r} at position {i} (a number in [0, 1] "
                                 "was expected)") from None
            if not (math.isfinite(rate) and 0.0 <= rate <= 1.0):
                raise InputError(f"{where}: rate {i} must be finite and in [0, 1], got {part}")
            rates.append(rate)
    return (rates + [0.0] * nextn)[:nextn]


def _validate_mtp(obj: EngineArgs, source: str) -> None:
    """Speculative decoding's cross-field rules (Dynamo 1.6.1's messages)."""
    if obj.aic_nextn is None:
        if obj.aic_nextn_accept_rates is not None:
            raise InputError(f"{source}: field 'aic_nextn_accept_rates' requires aic_nextn "
                             "(the number of draft tokens, 1-5)")
        return
    if obj.decode_speedup_ratio != 1.0:
        raise InputError(f"{source}: aic_nextn requires decode_speedup_ratio = 1.0 (the burst sampling "
                         f"models MTP's speedup), got {obj.decode_speedup_ratio}")


def _validate(obj: EngineArgs, source: str) -> None:
    """Check every field of a constructed EngineArgs (types, ranges, support)."""
    for name in ENGINE_ARG_FIELDS:
        value = getattr(obj, name)
        spec = _SPEC.get(name)
        if spec is not None:
            if value is None and spec.get("nullable") == "default":
                raise InputError(f"{source}: field '{name}' must be an integer >= 1, got null")
            checked = _check_value(name, value, source, spec)
            if checked != value or type(checked) is not type(value):
                object.__setattr__(obj, name, checked)
        elif name == "host_offload":
            from fastsim.kv_tiers import HostOffload

            if value is not None and not isinstance(value, HostOffload):
                raise InputError(f"{source}: unknown field 'host_offload' (a host KV tier is configured by "
                                 "engine.native_host_offload in the nested form)")
        elif value != _DEFAULTS[name] and name not in ("sglang", "trtllm"):
            reason = _UNSUPPORTED_REASON[_UNSUPPORTED[name]]
            raise NotSupportedError(
                f"{source}: field '{name}' is not supported yet by fastsim ({reason}); "
                f"remove it or set it to its default {json.dumps(_DEFAULTS[name])}"
            )
    if obj.engine_type == "trtllm" or obj.trtllm is not None:
        from fastsim.trtllm_config import check_trtllm_args

        check_trtllm_args(obj, source)
    _validate_mtp(obj, source)
    if obj.engine_type == "sglang" and obj.prefill_schedule_interval != 1:
        raise InputError(f"{source}: field 'prefill_schedule_interval': prefill_schedule_interval is supported "
                         "only for engine_type vllm (SGLang's counterpart is prefill_decode_interval)")
    if obj.engine_type == "sglang" or obj.sglang is not None:
        from fastsim.sglang_config import check_sglang_args

        check_sglang_args(obj, source)
    if obj.block_size == 0:
        object.__setattr__(obj, "block_size", _DEFAULT_BLOCK_SIZE[obj.engine_type])
    if obj.g1_backend != "native":
        raise NotSupportedError(
            f"{source}: field 'g1_backend' = '{obj.g1_backend}' is not supported yet by fastsim "
            "(only the native KV block manager is modelled)"
        )
    if obj.planner_profile_data is not None and not os.path.exists(obj.planner_profile_data):
        raise InputError(
            f"{source}: field 'planner_profile_data': no such file or directory: {obj.planner_profile_data}"
        )
