"""Dynamo 1.6's nested engine configuration, read into fastsim's flat :class:`~fastsim.config.EngineArgs`.

Dynamo 1.6.1 takes engine arguments as ``{"engine": {...}, "dp_size": ..., "startup_time": ...,
"dynamo": {...}}`` (``dynamo._core._normalize_mocker_config``) and rejects the flat 1.4.2 names.
fastsim accepts both forms in both ``dynamo_version`` modes: :func:`nested_to_flat` turns a nested
object into the flat 1.4.2 field names that :class:`EngineArgs` validates. A JSON object is nested
when it has an ``engine`` or a ``dynamo`` key (the rule Dynamo's own 1.4.2-compatibility runner
uses).

Field names, defaults and the rules below were read from Dynamo 1.6.1 itself (every field of
``_normalize_mocker_config({})`` and its error messages):

* Top level: ``engine``, ``dynamo``, ``dp_size``, ``tensor_parallel_size``, ``startup_time``,
  ``num_gpu_blocks_is_explicit``, ``gpu_memory_utilization``, ``mem_fraction_static``,
  ``free_gpu_memory_fraction``, ``cuda_graph_reserved_bytes``.
* ``engine``: the 1.4.2 engine fields under the same names, except ``backend`` (1.4.2
  ``engine_type``) and ``kv_transfer_bytes_per_token`` (1.4.2 ``kv_bytes_per_token``, still
  accepted there as an alias); ``timing_model`` (``polynomial``, ``fixed`` or ``external`` with
  provider ``dynamo_profile`` and an NPZ ``path``: 1.4.2's ``planner_profile_data``); the 1.6
  additions ``prefill_schedule_interval``, ``prefill_decode_interval``, ``emit_kv_events``,
  ``emit_kv_token_ids``, ``kv_cache_bytes_per_token``, ``kv_cache_groups``,
  ``kv_cache_capacity_bytes``, ``native_host_offload``, ``g3_offload``, ``state_cache``,
  ``prefix_match_unit``; the ``sglang`` and ``trtllm`` sub-objects.
* ``dynamo``: ``enable_local_indexer``, ``bootstrap_port``, ``handoff_session_timeout_ms``,
  ``reasoning``, ``response_replay_trace_path``, ``zmq_kv_events_port``, ``zmq_replay_port``,
  ``router_queue_policy``.

The nested form is stricter than the flat one, as in Dynamo: enumerations are case-sensitive,
``block_size`` must be at least 1 (no "0 = default"), and ``num_gpu_blocks`` must not be null. A
field in the wrong section, or a flat 1.4.2 name inside a nested object, is an error that says
where it belongs. Options fastsim does not model yet raise :class:`NotSupportedError` naming the
feature.
"""

from __future__ import annotations

import difflib
import math
import numbers
from typing import Any, Mapping

from fastsim.errors import InputError, NotSupportedError

__all__ = [
    "is_nested",
    "nested_to_flat",
    "misplaced_flat_field_hint",
    "timing_fields",
    "check_fixed_timing",
    "check_reasoning",
    "TOP_LEVEL_FIELDS",
    "ENGINE_FIELDS",
    "DYNAMO_FIELDS",
]

TOP_LEVEL_FIELDS = (
    "engine", "dynamo", "dp_size", "tensor_parallel_size", "startup_time",
    "num_gpu_blocks_is_explicit", "gpu_memory_utilization", "mem_fraction_static",
    "free_gpu_memory_fraction", "cuda_graph_reserved_bytes",
)
ENGINE_FIELDS = (
    "backend", "num_gpu_blocks", "block_size", "max_model_len", "max_num_seqs",
    "max_num_batched_tokens", "prefill_schedule_interval", "prefill_decode_interval",
    "enable_prefix_caching", "enable_chunked_prefill", "speedup_ratio", "decode_speedup_ratio",
    "aic_nextn", "aic_nextn_accept_rates", "aic_mtp_seed", "worker_type", "preemption_mode",
    "emit_kv_events", "emit_kv_token_ids", "kv_bytes_per_token", "kv_transfer_bytes_per_token",
    "kv_cache_bytes_per_token", "kv_cache_groups", "kv_cache_capacity_bytes", "native_host_offload",
    "state_cache", "prefix_match_unit", "g3_offload", "kv_transfer_bandwidth",
    "kv_transfer_timing_mode", "timing_model", "sglang", "trtllm",
)
DYNAMO_FIELDS = (
    "enable_local_indexer", "bootstrap_port", "handoff_session_timeout_ms", "reasoning",
    "response_replay_trace_path", "zmq_kv_events_port", "zmq_replay_port", "router_queue_policy",
)
# Defaults of the backend sub-objects (Dynamo 1.6.1's normalised config).
SGLANG_DEFAULTS = {
    "schedule_policy": "fifo", "max_prefill_tokens": 16384, "chunked_prefill_size": 8192,
    "clip_max_new_tokens": 4096, "schedule_conservativeness": 1.0,
}
TRTLLM_DEFAULTS = {"capacity_scheduler_policy": "guaranteed_no_evict"}

# Engine fields whose flat (1.4.2) name is the same and whose checks EngineArgs owns.
_SAME_NAME = (
    "num_gpu_blocks", "block_size", "max_model_len", "max_num_seqs", "max_num_batched_tokens",
    "enable_prefix_caching", "enable_chunked_prefill", "speedup_ratio", "decode_speedup_ratio",
    "worker_type", "preemption_mode", "kv_transfer_bandwidth", "kv_transfer_timing_mode",
    "aic_nextn", "aic_nextn_accept_rates", "aic_mtp_seed",
)
_TOP_SAME_NAME = ("dp_size", "startup_time", "gpu_memory_utilization", "mem_fraction_static",
                  "free_gpu_memory_fraction")
# Flat 1.4.2 names that the nested schema spells differently (or places in a sub-object).
_FLAT_RENAMES = {
    "engine_type": "engine.backend",
    "kv_bytes_per_token": "engine.kv_transfer_bytes_per_token",
    "planner_profile_data": "engine.timing_model = {type: external, provider: dynamo_profile, config: {path: ...}}",
    "is_prefill": "engine.worker_type = prefill",
    "is_decode": "engine.worker_type = decode",
    "num_g2_blocks": "engine.native_host_offload.num_host_blocks",
    "bandwidth_g1_to_g2_gbps": "engine.native_host_offload.d2h_bandwidth_gbps",
    "bandwidth_g2_to_g1_gbps": "engine.native_host_offload.h2d_bandwidth_gbps",
    "g1_backend": None, "num_g3_blocks": None, "enable_g4_storage": None, "offload_batch_size": None,
    "bandwidth_g2_to_g3_gbps": None, "bandwidth_g3_to_g2_gbps": None, "bandwidth_g2_to_g4_gbps": None,
    "bandwidth_g4_to_g2_gbps": None, "has_perf_model": None,
}
_AIC_FLAT = (
    "aic_backend", "aic_system", "aic_backend_version", "aic_tp_size", "aic_model_path",
    "aic_moe_tp_size", "aic_moe_ep_size", "aic_attention_dp_size", "aic_gemm_dtype", "aic_moe_dtype",
    "aic_fmha_dtype", "aic_kv_cache_dtype", "aic_comm_dtype",
)


def is_nested(raw: Mapping[str, Any]) -> bool:
    """True when a JSON object uses Dynamo 1.6's nested schema (an ``engine`` or ``dynamo`` key)."""
    return "engine" in raw or "dynamo" in raw


def _where(name: str) -> str:
    """Where a field belongs in the nested schema, as ``engine.x`` / ``dynamo.x`` / ``the top level``."""
    if name in ENGINE_FIELDS:
        return f"under engine (engine.{name})"
    if name in DYNAMO_FIELDS:
        return f"under dynamo (dynamo.{name})"
    if name in TOP_LEVEL_FIELDS:
        return "at the top level"
    return ""


def misplaced_flat_field_hint(name: str) -> str:
    """For a flat (1.4.2) config: the hint for a field name that only the nested schema has, or ''."""
    if name in ("engine", "dynamo"):
        return ""
    if name in ENGINE_FIELDS and name not in _SAME_NAME:
        flat = {"backend": "engine_type", "kv_transfer_bytes_per_token": "kv_bytes_per_token"}.get(name)
        also = f" (its flat 1.4.2 name is '{flat}')" if flat else ""
        return (f"'{name}' is a field of Dynamo 1.6's nested schema: put it under \"engine\" "
                f"(engine.{name}){also}")
    if name in ("tensor_parallel_size", "num_gpu_blocks_is_explicit", "cuda_graph_reserved_bytes"):
        return (f"'{name}' is a top-level field of Dynamo 1.6's nested schema: use it with an "
                "\"engine\" object")
    return ""


def _misplaced(source: str, path: str, name: str, here: str) -> InputError:
    where = _where(name)
    if name in _FLAT_RENAMES:
        target = _FLAT_RENAMES[name]
        if target is None:
            return InputError(
                f"{source}: field '{path}' is a Dynamo 1.4.2 flat name with no place in Dynamo 1.6's "
                "nested schema; remove it"
            )
        return InputError(
            f"{source}: field '{path}' is a Dynamo 1.4.2 flat name; in the nested schema use {target}"
        )
    if name in _AIC_FLAT:
        return NotSupportedError(
            f"{source}: field '{path}' is a Dynamo 1.4.2 flat name of AIConfigurator timing "
            "(engine.timing_model {type: external, provider: ais} in Dynamo 1.6), which is not supported "
            "yet by fastsim"
        )
    if where:
        return InputError(f"{source}: field '{path}' belongs {where}, not {here}")
    valid = {"the top level": TOP_LEVEL_FIELDS, "engine": ENGINE_FIELDS, "dynamo": DYNAMO_FIELDS}[here]
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else f" (valid fields: {', '.join(valid)})"
    return InputError(f"{source}: unknown field '{path}'{hint}")


def _object(value, source: str, path: str) -> dict:
    if not isinstance(value, Mapping):
        raise InputError(f"{source}: field '{path}' must be an object, got {_jtype(value)}")
    for key in value:
        if not isinstance(key, str):
            raise InputError(f"{source}: field names in '{path}' must be strings, got {key!r}")
    return dict(value)


def _jtype(v) -> str:
    from fastsim.config import _json_type

    return _json_type(v)


def _check(name: str, path: str, value, source: str, *, exact_enums: bool = True):
    """Type/range-check ``value`` with the flat field ``name``'s rules, naming ``path`` in errors."""
    from fastsim.config import _SPEC, _check_value

    spec = dict(_SPEC[name])
    if exact_enums and spec["kind"] == "enum":
        spec["kind"] = "enum_exact"
    if name == "block_size":
        spec["kind"] = "int1"  # Dynamo 1.6: "block_size must be positive" (no 0 = default)
    if name == "num_gpu_blocks":
        spec.pop("nullable", None)
    return _check_value(path, value, source, spec)


def _uint(value, source: str, path: str, lo: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < lo:
        raise InputError(f"{source}: field '{path}' must be an integer >= {lo}, got {_jtype(value)}")
    return int(value)


def _nonneg(value, source: str, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
        raise InputError(f"{source}: field '{path}' must be a finite number >= 0, got {_jtype(value)}")
    return float(value)


def _not_yet(source: str, path: str, feature: str) -> NotSupportedError:
    return NotSupportedError(
        f"{source}: field '{path}' is not supported yet by fastsim ({feature}); "
        "remove it or leave it at its default"
    )


def nested_to_flat(raw: Mapping[str, Any], source: str) -> dict:
    """The flat (1.4.2-named) engine-args dict equivalent to the nested object ``raw``.

    Raises :class:`InputError` naming the field (and where it belongs when it is misplaced) and
    :class:`NotSupportedError` for options fastsim does not model yet.
    """
    flat: dict[str, Any] = {}
    for name, value in raw.items():
        if name not in TOP_LEVEL_FIELDS:
            raise _misplaced(source, name, name, "the top level")
    engine = _object(raw.get("engine", {}), source, "engine")
    dynamo = _object(raw.get("dynamo", {}), source, "dynamo")

    # ---- top level
    for name in _TOP_SAME_NAME:
        if name in raw:
            flat[name] = raw[name] if name in ("gpu_memory_utilization", "mem_fraction_static",
                                                "free_gpu_memory_fraction") else _check(name, name, raw[name], source)
    if "tensor_parallel_size" in raw:
        tp = _uint(raw["tensor_parallel_size"], source, "tensor_parallel_size", lo=1)
        if tp != 1:
            raise NotSupportedError(
                f"{source}: field 'tensor_parallel_size' = {tp} is not supported yet by fastsim (it sizes "
                "the KV cache from GPU memory; set engine.num_gpu_blocks instead)"
            )
    if "num_gpu_blocks_is_explicit" in raw and not isinstance(raw["num_gpu_blocks_is_explicit"], bool):
        raise InputError(f"{source}: field 'num_gpu_blocks_is_explicit' must be a boolean (true/false), "
                         f"got {_jtype(raw['num_gpu_blocks_is_explicit'])}")
    if raw.get("cuda_graph_reserved_bytes") is not None:
        raise NotSupportedError(
            f"{source}: field 'cuda_graph_reserved_bytes' is not supported yet by fastsim (it sizes the KV "
            "cache from GPU memory; set engine.num_gpu_blocks instead)"
        )

    # ---- engine
    for name in engine:
        if name not in ENGINE_FIELDS:
            raise _misplaced(source, f"engine.{name}", name, "engine")
    backend = engine.get("backend", "vllm")
    if backend not in ("vllm", "sglang", "trtllm"):
        raise InputError(f"{source}: field 'engine.backend' must be one of 'vllm', 'sglang', 'trtllm' "
                         f"(case-sensitive), got {_jtype(backend)}")
    if backend != "vllm":
        flat["engine_type"] = backend
    for name in _SAME_NAME:
        if name in engine:
            path = f"engine.{name}"
            flat[name] = _check(name, path, engine[name], source)
    if "kv_bytes_per_token" in engine and "kv_transfer_bytes_per_token" in engine:
        raise InputError(f"{source}: engine.kv_bytes_per_token is an alias of "
                         "engine.kv_transfer_bytes_per_token; give one of them")
    for alias in ("kv_transfer_bytes_per_token", "kv_bytes_per_token"):
        if alias in engine:
            flat["kv_bytes_per_token"] = _check("kv_bytes_per_token", f"engine.{alias}", engine[alias], source)
    if "prefill_schedule_interval" in engine:
        interval = _uint(engine["prefill_schedule_interval"], source, "engine.prefill_schedule_interval", lo=1)
        if backend == "sglang" and interval != 1:
            raise InputError(f"{source}: field 'engine.prefill_schedule_interval': prefill_schedule_interval is "
                             "supported only for backend=vllm (SGLang's counterpart is "
                             "engine.prefill_decode_interval)")
        if interval != 1 and backend == "trtllm":
            raise InputError(f"{source}: field 'engine.prefill_schedule_interval': prefill_schedule_interval is "
                             "supported only for backend=vllm")
        if interval != 1:
            flat["prefill_schedule_interval"] = interval
    sglang = {}
    if "prefill_decode_interval" in engine:
        interval = _uint(engine["prefill_decode_interval"], source, "engine.prefill_decode_interval")
        if interval != 0 and backend != "sglang":
            raise InputError(f"{source}: field 'engine.prefill_decode_interval': prefill_decode_interval is "
                             "supported only for backend=sglang")
        if backend == "sglang":
            sglang["prefill_decode_interval"] = interval
    for name in ("emit_kv_events", "emit_kv_token_ids"):
        # Live-mocker KV event publishing: nothing to publish to in offline replay.
        if name in engine and not isinstance(engine[name], bool):
            raise InputError(f"{source}: field 'engine.{name}' must be a boolean (true/false), "
                             f"got {_jtype(engine[name])}")
    if engine.get("kv_cache_bytes_per_token") is not None:
        # Sizes offload-tier transfers only; without a tier it changes nothing.
        _uint(engine["kv_cache_bytes_per_token"], source, "engine.kv_cache_bytes_per_token", lo=1)
    from fastsim.kv_tiers import check_g3_offload, check_native_host_offload, refuse_tiers

    host_tier = check_native_host_offload(engine.get("native_host_offload"), engine, source)
    host_tier = refuse_tiers(host_tier, check_g3_offload(engine.get("g3_offload"), host_tier, source), source)
    if host_tier is not None:
        flat["host_offload"] = host_tier
    for name, feature in (
        ("state_cache", "per-request state cache"),
        ("prefix_match_unit", "per-request state cache"),
        ("kv_cache_capacity_bytes", "KV cache groups sized in bytes"),
    ):
        if engine.get(name) is not None:
            raise _not_yet(source, f"engine.{name}", feature)
    if engine.get("kv_cache_groups") not in (None, []):
        raise _not_yet(source, "engine.kv_cache_groups", "KV cache groups")
    for name, defaults, feature in (("sglang", SGLANG_DEFAULTS, "the SGLang engine"),
                                    ("trtllm", TRTLLM_DEFAULTS, "the TRT-LLM engine")):
        if engine.get(name) is None:
            continue
        sub = _object(engine[name], source, f"engine.{name}")
        for key, value in sub.items():
            path = f"engine.{name}.{key}"
            if key not in defaults:
                raise InputError(f"{source}: unknown field '{path}' (valid fields: {', '.join(defaults)})")
            if name == "sglang" and backend == "sglang":
                sglang[key] = value  # checked with the flat form's sglang object (fastsim/sglang_config.py)
            elif name == "trtllm":
                if value != defaults[key]:
                    raise InputError(f"{source}: field '{path}' must be 'guaranteed_no_evict' (the only TRT-LLM "
                                     f"capacity scheduler policy), got {_jtype(value)}")
            elif value != defaults[key]:
                raise _not_yet(source, path, f"it configures {feature}")
    if sglang:
        flat["sglang"] = sglang
    if "timing_model" in engine:
        flat.update(timing_fields(engine["timing_model"], source, "engine.timing_model"))

    # ---- dynamo
    for name in dynamo:
        if name not in DYNAMO_FIELDS:
            raise _misplaced(source, f"dynamo.{name}", name, "dynamo")
    for name in DYNAMO_FIELDS:
        if name in dynamo:
            if name == "reasoning":
                flat[name] = check_reasoning(dynamo[name], source, "dynamo.reasoning")
            else:
                flat[name] = _check(name, f"dynamo.{name}", dynamo[name], source, exact_enums=False)
    return flat


def timing_fields(value, source: str, path: str) -> dict:
    """The flat fields for a timing-model selector: ``{}`` (polynomial), ``timing_model`` (fixed) or
    ``planner_profile_data`` (a ``dynamo_profile`` NPZ)."""
    tm = _object(value, source, path)
    kind = tm.get("type")
    if kind not in ("polynomial", "fixed", "external"):
        raise InputError(f"{source}: field '{path}.type' must be one of 'polynomial', 'fixed', 'external', "
                         f"got {_jtype(kind)}")
    if kind == "polynomial":
        return {}  # Dynamo ignores other keys here too
    if kind == "fixed":
        return {"timing_model": check_fixed_timing(tm, source, path)}
    for key in tm:
        if key not in ("type", "provider", "config"):
            raise InputError(f"{source}: unknown field '{path}.{key}' (valid fields: type, provider, config)")
    provider = tm.get("provider")
    if provider in ("ais", "aic"):
        raise NotSupportedError(
            f"{source}: {path} provider '{provider}' (AIConfigurator timing) is not supported yet by fastsim; "
            "supported: polynomial, fixed, external dynamo_profile (an NPZ)"
        )
    if provider != "dynamo_profile":
        raise InputError(f"{source}: field '{path}.provider': unsupported external timing provider "
                         f"{_jtype(provider)} (fastsim supports 'dynamo_profile')")
    config = _object(tm.get("config"), source, f"{path}.config")
    for key in config:
        if key != "path":
            raise InputError(f"{source}: unknown field '{path}.config.{key}', expected 'path'")
    if "path" not in config:
        raise InputError(f"{source}: field '{path}.config' is missing 'path' (the profile NPZ)")
    return {"planner_profile_data": _check("planner_profile_data", f"{path}.config.path", config["path"], source)}


def check_fixed_timing(tm: Mapping[str, Any], source: str, path: str = "timing_model") -> dict:
    """Validate ``{"type": "fixed", "prefill_ms": x, "decode_ms": y}``; return it normalised."""
    out = {"type": "fixed"}
    for key in ("prefill_ms", "decode_ms"):
        if key not in tm:
            raise InputError(f"{source}: field '{path}' is missing '{key}' (a fixed model needs prefill_ms "
                             "and decode_ms)")
        v = tm[key]
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v < 0:
            raise InputError(f"{source}: field '{path}.{key}' must be a finite number >= 0, got {_jtype(v)}")
        out[key] = float(v)
    return out


def check_reasoning(value, source: str, path: str = "reasoning"):
    """Validate a reasoning config (Dynamo 1.6.1's fields); ``None`` passes through."""
    if value is None:
        return None
    r = _object(value, source, path)
    for key in r:
        if key not in ("start_thinking_token_id", "end_thinking_token_id", "thinking_ratio"):
            raise InputError(f"{source}: unknown field '{path}.{key}' (valid fields: start_thinking_token_id, "
                             "end_thinking_token_id, thinking_ratio)")
    for key in ("start_thinking_token_id", "end_thinking_token_id", "thinking_ratio"):
        if key not in r:
            raise InputError(f"{source}: field '{path}' is missing '{key}'")
    out = {k: _uint(r[k], source, f"{path}.{k}") for k in ("start_thinking_token_id", "end_thinking_token_id")}
    ratio = r["thinking_ratio"]
    if isinstance(ratio, bool) or not isinstance(ratio, numbers.Real) or not 0.0 <= ratio <= 1.0:
        raise InputError(f"{source}: field '{path}.thinking_ratio' must be a number in [0, 1], got {_jtype(ratio)}")
    out["thinking_ratio"] = float(ratio)
    return out
