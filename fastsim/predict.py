"""``fastsim predict``: AISimulate's prediction config (``aisimulate predict --stack dynamo``).

Dynamo 1.6 replaced ``python -m dynamo.replay`` with ``aisimulate predict --stack dynamo --config
X.yaml --output-dir D``. fastsim reads the same YAML and writes the same ``D/prediction.json``
(``{"summary", "per_request", "coverage", "planner"}``, indent 2, sorted keys) and, with
``--capture-per-request``, ``D/requests.jsonl``; so a Dynamo 1.6 user switches by changing the
program's name. The config sections and their meaning follow AISimulate's public schema
(``aisimulate.config``: ``traffic``, ``engine``, ``evaluation``; the ``router`` and ``planner``
sections of Dynamo's adapters) and its compiler to Dynamo's replay API:

* ``traffic.source``: ``synthetic`` (``input_tokens``, ``output_tokens``), ``synthetic-session``
  (``new_input_tokens_per_turn``, ``output_tokens_per_turn``, ``session``: ``turns``,
  ``shared_prefix_ratio``, ``prefix_groups``, ``inter_turn_delay_ms``) or ``trace`` (``paths``,
  ``format``, ``block_size`` default 512). ``traffic.load``: ``concurrency`` (closed loop),
  ``poisson`` (``requests_per_second`` / ``sessions_per_second``, ``seed`` default 42),
  ``constant_rate`` (an arrival every ``1000 / rate`` ms) or ``trace_timestamps`` (``speedup``).
  ``traffic.stop``: ``requests`` / ``sessions``, ``*_per_load_unit`` (``max(1, round(x * load))``),
  or, for traces, ``max_virtual_time_seconds``. Without a ``traffic`` section: synthetic 1024/128
  at concurrency 10 for 100 requests.
* ``engine`` (``mode: aggregated``, ``backend: vllm``): per worker ``parallelism.replicas``
  (workers), ``parallelism.attention_data`` (``dp_size``), ``scheduler.max_batched_tokens`` /
  ``max_sequences``, ``kv_cache.block_size`` (default 64) / ``prefix_caching`` /
  ``capacity: {type: fixed, blocks}``, ``timing: {type: fixed | polynomial}``,
  ``startup_seconds``; ``context_length`` (an integer, or ``max``: the model's
  ``max_position_embeddings`` from its ``config.json``) is vLLM's ``max_model_len``. ``model`` and
  ``hardware`` are required as in AISimulate; the other parallelism knobs, ``backend_version``,
  ``forward_model`` and ``systems_path`` only feed AIC timing and change nothing here.
* ``router``: ``policy: round_robin`` or ``kv_router`` with ``overlap_score_credit``,
  ``prefill_load_scale`` and ``temperature`` (defaults 1, 1, 0); ``planner: {policy: disabled}``.
* ``evaluation.sla``: ``ttft_ms``, ``itl_ms``, ``e2e_ms`` (goodput).

Paths (trace files, the model directory) are relative to the current directory, as in AISimulate.
What fastsim does not model is refused with an error naming the section and key: AIC timing and
memory-based KV capacity (the ``default`` types), disaggregated mode, SGLang/TRT-LLM, the planner,
AIS prefill-load estimation, images, and every trace format but ``mooncake``.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from fastsim.errors import FastsimError, InputError, NotSupportedError

__all__ = ["PredictionPlan", "load_config", "compile_prediction", "run_prediction", "replay_coverage",
           "prepare_output_directory", "KNOWN_OUTPUTS"]

#: Files AISimulate's ``--overwrite`` may replace in an output directory (the ones predict writes).
KNOWN_OUTPUTS = ("prediction.json", "requests.jsonl")
_CORE = ("traffic", "engine", "evaluation")
_ADAPTERS = ("router", "planner")


class ConfigError(InputError):
    """A prediction config that breaks the schema (names the file and the key)."""


@dataclass
class PredictionPlan:
    """A compiled prediction: which replay entry point and its keyword arguments."""

    trace: Optional[str]  # the trace path; None for a synthetic replay
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)


# ------------------------------------------------------------------------------ loading
def load_config(path, overrides=()) -> dict:
    """The YAML mapping at ``path`` with AISimulate's ``--set PATH=YAML_VALUE`` overrides applied."""
    try:
        import yaml
    except ImportError:
        raise FastsimError("fastsim predict needs PyYAML: pip install pyyaml") from None
    source = Path(path)
    try:
        data = yaml.safe_load(source.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{source}: could not read configuration: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: malformed YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: configuration must contain one YAML mapping")
    for assignment in overrides:
        if "=" not in assignment:
            raise ConfigError(f"invalid --set {assignment!r}; expected PATH=YAML_VALUE")
        raw_path, raw_value = assignment.split("=", 1)
        parts = raw_path.split(".")
        if not raw_path or any(not p or p.isdigit() for p in parts):
            raise ConfigError(f"invalid --set path {raw_path!r}; sequence indexes are unsupported")
        node = data
        for part in parts[:-1]:
            if not isinstance(node, dict):
                raise ConfigError(f"--set path {raw_path!r} crosses a non-mapping value")
            node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--set path {raw_path!r} crosses a non-mapping value")
        try:
            node[parts[-1]] = yaml.safe_load(raw_value)
        except yaml.YAMLError as exc:
            raise ConfigError(f"invalid YAML value for --set {raw_path!r}: {exc}") from None
    return data


# ------------------------------------------------------------------------------ schema helpers
class _Reader:
    """Typed access to one mapping of the config, with errors naming ``file: a.b.c``."""

    def __init__(self, source: str, path: str, value, allowed: tuple):
        self.source, self.path = source, path
        if not isinstance(value, dict):
            raise self.error(f"must be a mapping, got {_kind(value)}", path)
        for key in value:
            if key not in allowed:
                raise self.error(f"unknown key '{key}' (allowed: {', '.join(allowed)})", path)
        self.value = value

    def error(self, msg, path=None) -> ConfigError:
        return ConfigError(f"{self.source}: {path or self.path}: {msg}")

    def refuse(self, key, what) -> NotSupportedError:
        return NotSupportedError(f"{self.source}: {self._p(key)}: {what} is not supported yet by fastsim")

    def _p(self, key):
        return f"{self.path}.{key}" if self.path else key

    def has(self, key):
        return key in self.value

    def sub(self, key, allowed, default=None) -> "_Reader":
        v = self.value.get(key, {} if default is None else default)
        return _Reader(self.source, self._p(key), v, allowed)

    def choice(self, key, choices, default):
        v = self.value.get(key, default)
        if v not in choices:
            raise self.error(f"must be one of {', '.join(repr(c) for c in choices)}, got {v!r}", self._p(key))
        return v

    def int(self, key, default=None, lo=1):
        v = self.value.get(key, default)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo:
            raise self.error(f"must be an integer >= {lo}, got {v!r}", self._p(key))
        return int(v)

    def num(self, key, default=None, lo=0.0, positive=False, hi=None):
        v = self.value.get(key, default)
        if v is None:
            return None
        ok = not isinstance(v, bool) and isinstance(v, numbers.Real) and math.isfinite(v)
        ok = ok and (v > lo if positive else v >= lo) and (hi is None or v <= hi)
        if not ok:
            rng = f"> {lo:g}" if positive else f">= {lo:g}"
            if hi is not None:
                rng += f" and <= {hi:g}"
            raise self.error(f"must be a finite number {rng}, got {v!r}", self._p(key))
        return float(v)

    def bool(self, key, default):
        v = self.value.get(key, default)
        if not isinstance(v, bool):
            raise self.error(f"must be true or false, got {v!r}", self._p(key))
        return v

    def str(self, key, default=None, required=False):
        v = self.value.get(key, default)
        if v is None and not required:
            return None
        if not isinstance(v, str) or not v:
            raise self.error(f"must be a nonempty string, got {v!r}", self._p(key))
        return v


def _kind(v) -> str:
    return "null" if v is None else type(v).__name__


# ------------------------------------------------------------------------------ compiling
def compile_prediction(data: dict, source: str = "config") -> PredictionPlan:
    """Translate a prediction config into one fastsim replay call (validating every key)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: configuration must contain one YAML mapping")
    forbidden = sorted(set(data) & {"optimization", "optimizer"})
    if forbidden:
        raise ConfigError(f"{source}: predict does not accept {forbidden} (they belong to 'recommend')")
    for section in data:
        if section not in _CORE + _ADAPTERS:
            raise NotSupportedError(
                f"{source}: section '{section}' is not supported by fastsim predict "
                f"(it models {', '.join(_CORE + _ADAPTERS)})"
            )
    if "engine" not in data:
        raise ConfigError(f"{source}: engine: section is required")
    top = _Reader(source, "", data, _CORE + _ADAPTERS)
    engine_args, workers = _engine(top.sub("engine", (
        "mode", "model", "hardware", "backend", "backend_version", "forward_model", "systems_path",
        "context_length", "workers", "kv_transfer")))
    kw: dict[str, Any] = {"extra_engine_args": engine_args, "num_workers": workers}
    kw.update(_router(top.sub("router", ("policy", "prefill_load_model", "overlap_score_credit",
                                         "prefill_load_scale", "temperature"))))
    _planner(top.sub("planner", ("policy",) + _PLANNER_KEYS))
    ev = top.sub("evaluation", ("sla",))
    if ev.has("sla") and ev.value["sla"] is not None:
        sla = ev.sub("sla", ("ttft_ms", "itl_ms", "e2e_ms"))
        vals = {k: sla.num(k, positive=True) for k in ("ttft_ms", "itl_ms", "e2e_ms")}
        if vals["e2e_ms"] is not None and (vals["ttft_ms"] is not None or vals["itl_ms"] is not None):
            raise sla.error("e2e_ms is mutually exclusive with ttft_ms/itl_ms")
        kw.update({f"sla_{k}": v for k, v in vals.items() if v is not None})
    if "traffic" in data:
        plan = _traffic(top.sub("traffic", ("source", "load", "stop")))
    else:  # AISimulate's default traffic
        plan = PredictionPlan(None, (1024, 128, 100), {"replay_concurrency": 10})
    plan.kwargs.update(kw)
    return plan


_PLANNER_KEYS = (
    "target", "enable_throughput_scaling", "enable_load_scaling", "throughput_adjustment_interval_seconds",
    "load_adjustment_interval_seconds", "load_scaling_down_sensitivity", "load_min_observations",
    "max_num_gpus", "min_workers", "prefill_min_workers", "decode_min_workers",
)


def _planner(p: _Reader) -> None:
    policy = p.choice("policy", ("disabled", "enabled"), "disabled")
    if policy == "enabled":
        raise p.refuse("policy", "planner: {policy: enabled} (planner-in-the-loop replay)")
    extra = [k for k in p.value if k != "policy"]
    if extra:
        raise p.error(f"'{extra[0]}' only applies with policy: enabled")


def _router(r: _Reader) -> dict:
    policy = r.choice("policy", ("round_robin", "kv_router"), "round_robin")
    load = r.sub("prefill_load_model", ("type",))
    load_type = load.choice("type", ("none", "ais"), "none")
    knobs = ("overlap_score_credit", "prefill_load_scale", "temperature")
    for k in knobs:
        if k in r.value and r.value[k] is None:
            raise r.error("Router numeric knobs do not accept null", r._p(k))
    if policy == "round_robin":
        conflicts = sorted(k for k in knobs if r.has(k))
        if load_type != "none" or conflicts:
            raise r.error(f"round_robin requires prefill_load_model.type='none' and rejects KV-router knobs "
                          f"{conflicts}")
        return {"router_mode": "round_robin"}
    if load_type == "ais":
        raise load.refuse("type", "prefill_load_model type 'ais' (AIS prefill-load estimation)")
    return {
        "router_mode": "kv_router",
        "router_config": {
            "overlap_score_credit": r.num("overlap_score_credit", 1.0),
            "prefill_load_scale": r.num("prefill_load_scale", 1.0),
            "router_temperature": r.num("temperature", 0.0),
        },
    }


def _engine(e: _Reader):
    mode = e.choice("mode", ("aggregated", "disaggregated"), "aggregated")
    e.str("model", required=True)
    hardware = e.str("hardware", required=True)
    if hardware == "auto":
        raise e.error("engine.hardware='auto' is recommendation-only", "engine.hardware")
    backend = e.choice("backend", ("vllm", "sglang", "trtllm"), "vllm")
    e.choice("forward_model", ("op_level", "fpm"), "op_level")
    e.str("backend_version")
    e.str("systems_path")
    if mode == "disaggregated":
        raise e.refuse("mode", "engine.mode 'disaggregated' in predict (fastsim replay has it: "
                               "--prefill-engine-args / --decode-engine-args)")
    if e.has("kv_transfer"):
        raise e.error("aggregated mode rejects kv_transfer", "engine.kv_transfer")
    if backend != "vllm":
        raise e.refuse("backend", f"engine.backend '{backend}' (only the vLLM core is modelled)")
    workers = e.sub("workers", ("aggregated", "prefill", "decode"))
    if workers.value.get("prefill") is not None or workers.value.get("decode") is not None:
        raise workers.error("aggregated mode rejects prefill/decode workers")
    if workers.value.get("aggregated") is None:
        raise workers.error("aggregated mode requires workers.aggregated")
    w = workers.sub("aggregated", ("parallelism", "scheduler", "kv_cache", "timing", "startup_seconds"))
    par = w.sub("parallelism", ("replicas", "tensor", "pipeline", "attention_data", "moe_tensor", "moe_expert"))
    for k in ("tensor", "pipeline", "moe_tensor", "moe_expert"):
        par.int(k, 1)  # feed AIC timing / memory only
    sched = w.sub("scheduler", ("max_batched_tokens", "max_sequences"))
    cache = w.sub("kv_cache", ("block_size", "prefix_caching", "capacity"))
    cap = cache.sub("capacity", ("type", "memory_fraction", "blocks"))
    cap_type = cap.choice("type", ("default", "fixed"), "default")
    if cap_type == "default":
        raise cap.refuse("type", "KV capacity type 'default' (sized from GPU memory by AIC); give "
                                 "capacity: {type: fixed, blocks: N}")
    if cap.has("memory_fraction"):
        raise cap.error("fixed KV capacity rejects memory_fraction")
    blocks = cap.int("blocks")
    if blocks is None:
        raise cap.error("fixed KV capacity requires blocks")
    timing = w.sub("timing", ("type", "prefill_ms", "decode_ms"))
    t_type = timing.choice("type", ("default", "fixed", "polynomial"), "default")
    if t_type == "default":
        raise timing.refuse("type", "timing type 'default' (AIC op-level timing); give timing: "
                                    "{type: fixed, prefill_ms, decode_ms} or {type: polynomial}")
    block_size = cache.int("block_size", 64)
    if block_size < 2:
        raise cache.error("block_size must be >= 2 for vLLM", cache._p("block_size"))
    args: dict[str, Any] = {
        "engine_type": backend,
        "num_gpu_blocks": blocks,
        "block_size": block_size,
        "enable_prefix_caching": cache.bool("prefix_caching", True),
        "max_num_batched_tokens": sched.int("max_batched_tokens", 8192),
        "max_num_seqs": sched.int("max_sequences", 256),
        "dp_size": par.int("attention_data", 1),
        "startup_time": w.num("startup_seconds", 0.0),
        "max_model_len": _context_length(e),
    }
    if t_type == "fixed":
        p_ms, d_ms = timing.num("prefill_ms"), timing.num("decode_ms")
        if p_ms is None or d_ms is None:
            raise timing.error("fixed timing requires prefill_ms and decode_ms")
        args["timing_model"] = {"type": "fixed", "prefill_ms": p_ms, "decode_ms": d_ms}
    elif timing.has("prefill_ms") or timing.has("decode_ms"):
        raise timing.error(f"{t_type} timing rejects fixed timing values")
    return args, par.int("replicas", 1)


def _context_length(e: _Reader) -> int:
    v = e.value.get("context_length", "max")
    if v != "max":
        return e.int("context_length")
    model = e.value["model"]
    config = Path(model) / "config.json"
    try:
        mpe = json.loads(config.read_text(encoding="utf-8")).get("max_position_embeddings")
    except (OSError, ValueError):
        mpe = None
    if isinstance(mpe, bool) or not isinstance(mpe, int) or mpe < 1:
        raise NotSupportedError(
            f"{e.source}: engine.context_length: 'max' needs the model's max_position_embeddings, and "
            f"{config} does not give it (fastsim reads only a local model directory); give an integer"
        )
    return mpe


def _traffic(t: _Reader) -> PredictionPlan:
    if not t.has("source"):
        raise t.error("source is required", "traffic.source")
    if not t.has("load"):
        raise t.error("load is required", "traffic.load")
    kind = t.value["source"].get("type", "synthetic") if isinstance(t.value["source"], dict) else None
    src_keys = {
        "synthetic": ("type", "input_tokens", "output_tokens", "images"),
        "synthetic-session": ("type", "new_input_tokens_per_turn", "output_tokens_per_turn", "session"),
        "trace": ("type", "paths", "format", "block_size", "nested_timestamp_basis"),
    }
    if kind not in src_keys:
        raise t.error(f"type must be one of 'synthetic', 'synthetic-session', 'trace', got {kind!r}",
                      "traffic.source.type")
    src = t.sub("source", src_keys[kind])
    load = t.sub("load", ("type", "concurrency", "requests_per_second", "sessions_per_second", "seed",
                          "speedup", "agentic_lanes"))
    ltype = load.choice("type", ("concurrency", "poisson", "constant_rate", "trace_timestamps"), "concurrency")
    allowed = {"concurrency": {"concurrency"}, "poisson": {"requests_per_second", "sessions_per_second", "seed"},
               "constant_rate": {"requests_per_second", "sessions_per_second"},
               "trace_timestamps": {"speedup", "agentic_lanes"}}[ltype]
    unexpected = sorted(k for k in load.value if k != "type" and k not in allowed and load.value[k] is not None)
    if unexpected:
        raise load.error(f"traffic.load.type={ltype!r} does not accept {unexpected}")
    if load.value.get("agentic_lanes") is not None:
        raise load.refuse("agentic_lanes", "traffic.load.agentic_lanes (agentic trace replay)")
    stop = _Reader(t.source, "traffic.stop", t.value.get("stop") or {},
                   ("requests", "requests_per_load_unit", "sessions", "sessions_per_load_unit",
                    "max_virtual_time_seconds"))
    concurrency = load.int("concurrency", 10) if ltype == "concurrency" else None

    if kind == "trace":
        paths = src.value.get("paths")
        if not isinstance(paths, list) or not paths or any(not isinstance(p, str) or not p for p in paths):
            raise src.error("paths must contain at least one nonempty path", "traffic.source.paths")
        fmt = src.choice("format", ("mooncake", "mooncake-delta", "agentic_mooncake", "applied_compute_agentic",
                                    "dynamo", "weka"), "mooncake")
        if fmt != "dynamo" and len(paths) != 1:
            raise src.error(f"trace format {fmt!r} requires exactly one path", "traffic.source.paths")
        if src.value.get("nested_timestamp_basis") is not None and fmt != "weka":
            raise src.error("nested_timestamp_basis is only valid for trace format 'weka'")
        if fmt != "mooncake":
            raise src.refuse("format", f"trace format '{fmt}' (fastsim replays 'mooncake' traces)")
        if ltype not in ("trace_timestamps", "concurrency"):
            raise load.error("trace traffic requires trace_timestamps or concurrency load")
        if any(stop.value.get(k) is not None for k in ("requests", "requests_per_load_unit", "sessions",
                                                        "sessions_per_load_unit")):
            raise stop.error("trace traffic only accepts max_virtual_time_seconds")
        kw: dict[str, Any] = {"trace_block_size": src.int("block_size", 512)}
        if ltype == "concurrency":
            kw["replay_concurrency"] = concurrency
        else:
            kw["arrival_speedup_ratio"] = load.num("speedup", 1.0, positive=True)
        secs = stop.num("max_virtual_time_seconds", positive=True)
        if secs is not None:
            kw["max_sim_time_ms"] = 1000.0 * secs
        return PredictionPlan(paths[0], (), kw)

    if ltype == "trace_timestamps":
        raise load.error("synthetic traffic does not accept trace_timestamps load")
    session = kind == "synthetic-session"
    if session:
        isl = src.int("new_input_tokens_per_turn", 1024)
        osl = src.int("output_tokens_per_turn", 128)
        if not src.has("session"):
            raise src.error("session is required", "traffic.source.session")
        s = src.sub("session", ("turns", "shared_prefix_ratio", "prefix_groups", "inter_turn_delay_ms"))
        kw = {
            "turns_per_session": s.int("turns", 4, lo=2),
            "shared_prefix_ratio": s.num("shared_prefix_ratio", 0.0, hi=1.0),
            "num_prefix_groups": s.int("prefix_groups", 0, lo=0),
            "inter_turn_delay_ms": s.num("inter_turn_delay_ms", 0.0),
        }
        if kw["shared_prefix_ratio"] > 0 and kw["num_prefix_groups"] == 0:
            raise s.error("prefix_groups must be positive when shared_prefix_ratio is positive")
    else:
        isl = src.int("input_tokens", 1024)
        osl = src.int("output_tokens", 128)
        if src.value.get("images") is not None:
            raise src.refuse("images", "images on synthetic requests (multimodal)")
        kw = {}
    unit, wrong = ("sessions_per_second", "requests_per_second") if session else ("requests_per_second",
                                                                                   "sessions_per_second")
    rate = load.num(unit, positive=True)
    if load.value.get(wrong) is not None:
        raise load.error("traffic load rate unit does not match source type")
    if ltype in ("poisson", "constant_rate") and rate is None:
        raise load.error(f"{ltype} synthetic traffic requires {unit}")
    if t.value.get("stop") is None:
        raise t.error("synthetic traffic requires a stop condition", "traffic.stop")
    if stop.value.get("max_virtual_time_seconds") is not None:
        raise stop.error("max_virtual_time_seconds is trace-only")
    count_key, rel_key = ("sessions", "sessions_per_load_unit") if session else ("requests", "requests_per_load_unit")
    other = [k for k in ("requests", "requests_per_load_unit", "sessions", "sessions_per_load_unit")
             if stop.value.get(k) is not None and k not in (count_key, rel_key)]
    given = [k for k in (count_key, rel_key) if stop.value.get(k) is not None]
    if other or len(given) != 1:
        raise stop.error(f"synthetic {'session' if session else 'request'} traffic requires exactly one of "
                         f"{count_key}, {rel_key}")
    if ltype == "concurrency":
        load_unit = float(concurrency)
        kw["replay_concurrency"] = concurrency
    elif ltype == "poisson":
        load_unit = rate
        kw["request_rate"] = rate
        kw["arrival_seed"] = load.int("seed", 42, lo=0)
    else:
        load_unit = rate
        kw["arrival_interval_ms"] = 1000.0 / rate
    if given[0] == count_key:
        count = stop.int(count_key)
    else:
        count = max(1, round(stop.num(rel_key, positive=True) * load_unit))
    return PredictionPlan(None, (isl, osl, count), kw)


# ------------------------------------------------------------------------------ running
def run_prediction(plan: PredictionPlan, *, capture_per_request: bool = False, dynamo_version: str = "1.6.1"):
    """Run the compiled replay; returns ``(report, prediction)`` where ``prediction`` is the
    ``prediction.json`` mapping (``per_request`` is None unless captured)."""
    from fastsim.api import run_synthetic_trace_replay, run_trace_replay

    kw = dict(plan.kwargs, dynamo_version=dynamo_version)
    if plan.trace is not None:
        report = run_trace_replay(plan.trace, **kw)
    else:
        report = run_synthetic_trace_replay(*plan.args, **kw)
    records = [json.loads(line) for line in report.jsonl_lines()] if capture_per_request else None
    prediction = {
        "summary": report.summary,
        "per_request": records,
        "coverage": replay_coverage(report, capture_per_request),
        "planner": None,
    }
    return report, prediction


def replay_coverage(report, captured: bool) -> dict:
    """Dynamo 1.6.1's ``coverage`` of a replay: whether per-request records were captured, and how
    many (one per request that reached a terminal state)."""
    import numpy as np

    from fastsim.kernels.codes import OUTCOME_COMPLETED

    n = int(np.count_nonzero(np.asarray(report._req["status"]) >= OUTCOME_COMPLETED)) if captured else 0
    return {"capture_per_request": bool(captured), "capture_planner_details": False, "per_request_records": n}


def prepare_output_directory(path, overwrite: bool) -> Path:
    """Create the output directory; a non-empty one needs ``overwrite`` (which removes only the
    files predict writes), as in AISimulate."""
    root = Path(path)
    if root.exists() and not root.is_dir():
        raise InputError(f"--output-dir: {root} exists and is not a directory")
    if root.exists() and any(root.iterdir()) and not overwrite:
        raise InputError(f"--output-dir: {root} is not empty; pass --overwrite to replace its prediction files")
    root.mkdir(parents=True, exist_ok=True)
    if overwrite:
        for name in KNOWN_OUTPUTS:
            target = root / name
            if target.is_file() or target.is_symlink():
                target.unlink()
    return root


def write_outputs(root: Path, prediction: dict) -> Path:
    """Write ``prediction.json`` (and ``requests.jsonl`` when records were captured)."""
    path = root / "prediction.json"
    try:
        path.write_text(json.dumps(prediction, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        if prediction["per_request"] is not None:
            with open(root / "requests.jsonl", "w", encoding="utf-8") as fh:
                for rec in prediction["per_request"]:
                    fh.write(json.dumps(rec, sort_keys=True, separators=(",", ":")) + "\n")
    except OSError as exc:
        raise FastsimError(f"--output-dir: cannot write {path.parent}: {exc.strerror or exc}") from None
    return path


def main_predict(args) -> int:
    """``fastsim predict`` (see :mod:`fastsim.cli`)."""
    data = load_config(args.config, args.overrides)
    plan = compile_prediction(data, source=os.fspath(args.config))
    root = prepare_output_directory(args.output_dir, args.overwrite)
    report, prediction = run_prediction(plan, capture_per_request=args.capture_per_request,
                                        dynamo_version=args.dynamo_version)
    path = write_outputs(root, prediction)
    if args.format == "json":
        sys.stdout.write(json.dumps(prediction["summary"], sort_keys=True, separators=(",", ":")) + "\n")
    else:
        sys.stdout.write(report.format_table() + "\n")
        sys.stdout.write(f"Saved full report to: {path}\n")
    return 0
