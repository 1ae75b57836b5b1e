"""Capacity planning: the cheapest fleet that meets latency SLOs (``fastsim plan SPEC --out DIR``).

A plan spec is a mapping, or a ``.yaml``/``.yml``, ``.toml`` or ``.json`` file, with the sections:

* ``workload``: replay keywords of :func:`fastsim.run_trace_replay` (``trace_files``,
  ``trace_format``, ``trace_block_size``, ``arrival_speedup_ratio``, ``router_mode``...) or of
  :func:`fastsim.run_synthetic_trace_replay` (``input_tokens``, ``output_tokens``,
  ``request_count``, ``request_rate``...). Any keyword the replay functions take is passed through,
  except those the plan sets itself (worker counts, engine args, ``sla_*``; see ``_OWNED``).
  A relative ``trace_files`` in a spec file is relative to the file.
* ``engine``: engine arguments (``MockEngineArgs`` fields) of every worker; ``engine.prefill`` and
  ``engine.decode`` add fields for the pools of disaggregated configurations.
* ``slo``: ``STAT_METRIC: bound`` with ``STAT`` one of p50 (= median), p75, p90, p95, p99, mean,
  max and ``METRIC`` one of ``ttft_ms``, ``itl_ms``, ``e2e_ms``, ``ttst_ms``, ``tpot_ms`` (the
  replay report's percentiles must be at most the bound), and ``goodput: {min_fraction, ttft_ms,
  itl_ms, e2e_ms}``: at least ``min_fraction`` of the requests must be good (every given
  per-request bound holds: Dynamo's goodput, from ``sla_*_ms``).
* ``search``: the axes, each a list of values or an inclusive range ``{min, max, step}``:
  ``num_workers`` (required: the worker counts, total over both pools when disaggregated);
  ``split``: ``agg`` or ``"P:D"`` (prefill:decode workers in that ratio, see
  :func:`split_workers`); engine fields (``max_num_seqs``, ``dp_size``, ``engine_type``...), also
  written ``engine.F`` or the sweep's ``extra_engine_args.F``; ``prefill.F`` / ``decode.F`` for one
  pool; ``gpu``, ``prefill_gpu``, ``decode_gpu``: GPU types; any other replay keyword, with the
  sweep's dotted keys (``router_mode``, ``router_config.router_temperature``). ``method``:
  ``exhaustive`` (default) or ``bisect``.
* ``cost``: ``gpu_hour_usd: {TYPE: price}``; ``gpu`` (default type; optional when one is priced),
  ``prefill_gpu``, ``decode_gpu``; ``tensor_parallel_size`` (GPUs per data-parallel rank, default
  1), ``prefill_tensor_parallel_size``, ``decode_tensor_parallel_size``; ``gpu_engine_args:
  {TYPE: {engine fields}}`` for what a type changes in the simulation (``speedup_ratio``,
  ``num_gpu_blocks``): without it a GPU type changes only the price.

``name`` and ``description`` are free text. Unknown keys are a :class:`~fastsim.sweep.SpecError`
naming the key and the closest valid one; so are an SLO on a metric the report lacks, an empty
search space and a GPU type without a price, all before anything runs.

Search: the non-worker axes form groups (their cartesian product, first key slowest; settings a
configuration ignores, such as ``prefill.*`` for ``agg``, are dropped and duplicate groups merged).
``exhaustive`` replays every worker count of every group; ``bisect`` assumes that within a group
meeting the SLOs is monotone in the worker count, replays the largest count, then halves the
interval, all groups' probes of a round side by side. Either way the evaluated points are checked
against that assumption (:attr:`PlanResult.monotonicity`). Replays run on the sweep's executors
(``local``, ``dask``, ``serial``) with its progress bar. With ``out``, each finished replay is
appended to ``DIR/evaluations.jsonl``, keyed by the SHA-256 of its replay arguments (trace files by
content): a killed or repeated plan reruns nothing it has (``force`` discards the file).

Cost per hour = sum over pools of workers x GPUs per worker (``tensor_parallel_size x dp_size``) x
the GPU type's price; cost per million output tokens = cost per hour / (3600 x
``output_throughput_tok_s``) x 1e6. ``best`` is the cheapest configuration meeting every SLO (ties:
fewer GPUs, then the SLO metrics in spec order, then ``config_id``), with every request completed.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import numbers
import os
import sys
import time
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fastsim import __version__
from fastsim.config import ENGINE_ARG_FIELDS, EngineArgs
from fastsim.errors import FastsimError, InputError
from fastsim.sweep import (Config, SpecError, SweepError, SweepSpec, _api_params, _hint, _optional, _plain,
                           _resolve, _set, _values)

__all__ = ["plan", "load_plan_spec", "PlanSpec", "PlanResult", "split_workers", "SLO_METRICS", "SpecError"]

PLAN_SECTIONS = ("name", "description", "workload", "engine", "slo", "search", "cost")
_STATS = {"p50": "median", "median": "median", "mean": "mean", "p75": "p75", "p90": "p90", "p95": "p95",
          "p99": "p99", "max": "max"}
_METRICS = {"ttft_ms": "ttft_ms", "itl_ms": "itl_ms", "e2e_ms": "e2e_latency_ms",
            "e2e_latency_ms": "e2e_latency_ms", "ttst_ms": "ttst_ms", "tpot_ms": "tpot_ms"}
#: Every SLO name a spec may use -> the replay report key it bounds.
SLO_METRICS = {f"{s}_{m}": f"{stat}_{key}" for s, stat in _STATS.items() for m, key in _METRICS.items()}
_GOODPUT_KEYS = ("min_fraction", "ttft_ms", "itl_ms", "e2e_ms")
_COST_KEYS = ("gpu_hour_usd", "gpu", "prefill_gpu", "decode_gpu", "tensor_parallel_size",
              "prefill_tensor_parallel_size", "decode_tensor_parallel_size", "gpu_engine_args")
_GPU_AXES = ("gpu", "prefill_gpu", "decode_gpu")
_POOLS = ("prefill", "decode")
_METHODS = ("exhaustive", "bisect")
# Replay keywords the plan sets itself, and why a spec may not.
_OWNED = {
    "num_workers": "the worker counts are search.num_workers",
    "num_prefill_workers": "disaggregated pool sizes come from search.num_workers and search.split",
    "num_decode_workers": "disaggregated pool sizes come from search.num_workers and search.split",
    "extra_engine_args": "engine arguments go in the engine section (search: the field name)",
    "prefill_engine_args": "engine arguments go in engine.prefill (search: prefill.FIELD)",
    "decode_engine_args": "engine arguments go in engine.decode (search: decode.FIELD)",
    "sla_ttft_ms": "per-request bounds go in slo.goodput",
    "sla_itl_ms": "per-request bounds go in slo.goodput",
    "sla_e2e_ms": "per-request bounds go in slo.goodput",
    "report_jsonl_path": "every configuration would write the same file",
    "threads": "the executor sets it (one replay per core)",
    "scaling_schedule": "a plan sizes a fixed fleet",
    "planner": "a plan sizes a fixed fleet",
    "planner_interval_ms": "a plan sizes a fixed fleet",
    "max_workers": "a plan sizes a fixed fleet",
}
_POSITIONAL = {"trace": ("trace_files",), "synthetic": ("input_tokens", "output_tokens", "request_count")}
_CACHE_FORMAT = 1


# ----------------------------------------------------------------------------- spec


@dataclass(frozen=True)
class Slo:
    """One SLO: ``name`` as the spec writes it, the report ``column`` it reads, its ``bound`` and
    ``sense`` (``"max"``: the value may not exceed the bound; ``"min"``: it may not fall below)."""

    name: str
    column: str
    bound: float
    sense: str = "max"

    def met(self, value) -> bool:
        if value is None or not math.isfinite(value):
            return False
        return value <= self.bound if self.sense == "max" else value >= self.bound

    def margin(self, value) -> float:
        """Bound minus value for a maximum (value minus bound for a minimum): >= 0 when met."""
        if value is None or not math.isfinite(value):
            return math.nan
        return self.bound - value if self.sense == "max" else value - self.bound

    def describe(self) -> str:
        return f"{self.name} {'<=' if self.sense == 'max' else '>='} {self.bound:g}"


@dataclass
class Group:
    """One setting of the non-worker axes: its values (column -> value), its split and worker counts."""

    gid: int
    params: dict
    split: tuple | None  # (prefill, decode) ratio, None for aggregated
    workers: list
    ignored: set = field(default_factory=set)  # axes this group's configurations do not use (blank)
    label: str = ""


@dataclass
class Point:
    """One configuration: a group at one worker count, with its replay arguments and pools."""

    config_id: int
    gid: int
    workers: int
    params: dict
    kwargs: dict
    pools: list  # [{role, workers, gpu, gpus_per_worker, usd_per_gpu_hour}]
    key: str = ""
    label: str = ""

    @property
    def gpus(self) -> int:
        return sum(p["workers"] * p["gpus_per_worker"] for p in self.pools)

    @property
    def cost_per_hour(self) -> float:
        return sum(p["workers"] * p["gpus_per_worker"] * p["usd_per_gpu_hour"] for p in self.pools)


@dataclass
class PlanSpec:
    """A validated, expanded plan spec (build it with :func:`load_plan_spec`)."""

    name: str
    description: str
    source: str
    text: str
    mode: str
    method: str
    slos: list
    axes: list  # [(column, [values])], the non-worker axes in spec order
    worker_counts: list
    groups: list = field(default_factory=list)
    points: list = field(default_factory=list)
    normalized: dict = field(default_factory=dict)

    @property
    def n_configs(self) -> int:
        """Configurations in the grid (every group at every worker count it allows)."""
        return len(self.points)

    def points_of(self, gid):
        return [p for p in self.points if p.gid == gid]


def split_workers(total: int, ratio) -> tuple:
    """Prefill and decode workers for ``total`` workers in the ratio ``(P, D)``: prefill =
    ``round(total * P / (P + D))`` (halves up) held within ``[1, total - 1]``, decode the rest.
    Both are non-decreasing in ``total``, so a larger fleet never has a smaller pool."""
    p, d = ratio
    n_p = min(max((2 * total * p + (p + d)) // (2 * (p + d)), 1), total - 1)
    return n_p, total - n_p


def _where(src, section, key=None):
    return f"{src}: {section}" + (f".{key}" if key is not None else "")


def _read_plan_file(path: Path):
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".toml", ".json"):
        raise SpecError(f"plan spec {path}: unknown format '{suffix}' (use .yaml, .yml, .toml or .json)")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"plan spec {path}: cannot read: {exc.strerror or exc}") from None
    try:
        if suffix == ".json":
            return json.loads(text), text
        if suffix == ".toml":
            toml = _optional("tomllib" if sys.version_info >= (3, 11) else "tomli", "reading a TOML spec", "plan")
            return toml.loads(text), text
        return _optional("yaml", "reading a YAML plan spec", "plan").safe_load(text), text
    except SweepError:
        raise
    except Exception as exc:  # the parsers' own error types
        raise SpecError(f"plan spec {path}: {exc}") from None


def _mapping(value, where, allow_none=True):
    if value is None and allow_none:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(f"{where} must be a mapping, got {type(value).__name__}")
    for k in value:
        if not isinstance(k, str) or not k:
            raise SpecError(f"{where}: keys must be non-empty strings, got {k!r}")
    return dict(value)


def _positive(value, where, integer=False):
    ok = (not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value) and value > 0
          and (not integer or float(value).is_integer()))
    if not ok:
        raise SpecError(f"{where} must be a positive {'integer' if integer else 'number'}, got {value!r}")
    return int(value) if integer else float(value)


def _engine_fields(mapping, where):
    """Engine fields as plain values; an unknown field names the closest valid one."""
    out = {}
    for k, v in _mapping(mapping, where).items():
        if k not in ENGINE_ARG_FIELDS:
            raise SpecError(f"{where}: unknown engine argument '{k}'{_hint(k, ENGINE_ARG_FIELDS)}")
        out[k] = _plain(v, f"{where}.{k}")
    return out


def _check_replay_key(key, mode, where):
    """A replay keyword the spec may set (dotted into freeform mappings such as router_config)."""
    params = _api_params(mode)
    top, *rest = key.split(".")
    if top in _OWNED:
        raise SpecError(f"{where}: '{top}' is set by the plan: {_OWNED[top]}")
    allowed = [p for p in params if p not in _OWNED]
    if top not in params:
        other = "synthetic" if mode == "trace" else "trace"
        if top in _api_params(other):
            raise SpecError(f"{where}: '{top}' is not a keyword of {mode} replay (it applies to {other} replay only)")
        raise SpecError(f"{where}: unknown key '{key}'{_hint(key, allowed)}")
    if rest and top not in ("router_config", "planner_config", "aic_perf_config"):
        raise SpecError(f"{where}: '{key}': '{top}' takes a single value, not nested keys")


def _axis_values(value, where):
    """A search axis: a non-empty list, or an inclusive range ``{min, max, step}``."""
    if isinstance(value, Mapping) and value and set(value) <= {"min", "max", "step"}:
        if "min" not in value or "max" not in value:
            raise SpecError(f"{where}: a range needs min and max (and optionally step), got {dict(value)}")
        lo, hi, step = value["min"], value["max"], value.get("step", 1)
        for name, v in (("min", lo), ("max", hi), ("step", step)):
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
                raise SpecError(f"{where}: range {name} must be a number, got {v!r}")
        if step <= 0:
            raise SpecError(f"{where}: range step must be positive, got {step!r}")
        if hi < lo:
            raise SpecError(f"{where}: the range {{min: {lo}, max: {hi}}} is empty (max < min): empty search space")
        if all(isinstance(v, numbers.Integral) for v in (lo, hi, step)):
            return list(range(int(lo), int(hi) + 1, int(step)))
        n = int(math.floor((hi - lo) / step + 1e-9)) + 1
        return [round(lo + i * step, 12) for i in range(n)]
    if isinstance(value, (list, tuple)) and not value:
        raise SpecError(f"{where} is an empty list: empty search space")
    try:
        return _values(value, where)
    except SpecError:
        raise SpecError(f"{where} must be a non-empty list of values or a range {{min, max, step}}, "
                        f"got {value!r}") from None


def _parse_split(value, where):
    """``"agg"`` -> None; ``"P:D"`` or ``[P, D]`` -> (P, D)."""
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("agg", "aggregated"):
            return None
        parts = v.split(":")
        if len(parts) == 2 and all(s.strip().isdigit() for s in parts):
            value = [int(s) for s in parts]
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
        raise SpecError(f"{where}: split {value!r} is a number; write 'agg' or a quoted 'P:D' string "
                        "(YAML reads an unquoted 1:2 as the base-60 number 62)")
    if (isinstance(value, (list, tuple)) and len(value) == 2
            and all(isinstance(x, numbers.Integral) and not isinstance(x, bool) and x >= 1 for x in value)):
        return int(value[0]), int(value[1])
    raise SpecError(f"{where}: split must be 'agg' or 'P:D' with positive integers (e.g. '1:2'), got {value!r}")


def _split_label(split):
    return "agg" if split is None else f"{split[0]}:{split[1]}"


def _parse_slo(raw, src):
    slos, goodput = [], None
    where = _where(src, "slo")
    for k, v in _mapping(raw, where).items():
        if k == "goodput":
            g = _mapping(v, f"{where}.goodput", allow_none=False)
            for gk in g:
                if gk not in _GOODPUT_KEYS:
                    raise SpecError(f"{where}.goodput: unknown key '{gk}'{_hint(gk, _GOODPUT_KEYS)} "
                                    f"(valid: {', '.join(_GOODPUT_KEYS)})")
            if "min_fraction" not in g:
                raise SpecError(f"{where}.goodput: min_fraction (the share of requests that must be good) is required")
            frac = g["min_fraction"]
            if isinstance(frac, bool) or not isinstance(frac, numbers.Real) or not 0 < frac <= 1:
                raise SpecError(f"{where}.goodput.min_fraction must be a number in (0, 1], got {frac!r}")
            bounds = {f"sla_{b}": _positive(g[b], f"{where}.goodput.{b}") for b in ("ttft_ms", "itl_ms", "e2e_ms")
                      if b in g}
            if not bounds:
                raise SpecError(f"{where}.goodput: give at least one per-request bound (ttft_ms, itl_ms, e2e_ms)")
            goodput = bounds
            slos.append(Slo("goodput", "goodput_fraction", float(frac), "min"))
            continue
        if k not in SLO_METRICS:
            stat, _, metric = k.partition("_")
            detail = ""
            if stat in _STATS and metric not in _METRICS:
                detail = f": the report has no metric '{metric}' (metrics: {', '.join(_METRICS)})"
            elif stat not in _STATS and metric in _METRICS:
                detail = f": the report has no statistic '{stat}' (statistics: {', '.join(_STATS)})"
            raise SpecError(f"{where}: unknown SLO metric '{k}'{_hint(k, [*SLO_METRICS, 'goodput'])}{detail}")
        slos.append(Slo(k, SLO_METRICS[k], _positive(v, f"{where}.{k}")))
    if not slos:
        raise SpecError(f"{where}: give at least one objective (e.g. p99_ttft_ms: 2000, or goodput)")
    columns = [s.column for s in slos]
    dup = [c for c in columns if columns.count(c) > 1]
    if dup:
        raise SpecError(f"{where}: two SLOs bound the same metric ({dup[0]})")
    return slos, goodput


class _CostModel:
    def __init__(self, raw, src):
        where = _where(src, "cost")
        if raw is None:
            raise SpecError(f"{src}: the cost section is required (cost.gpu_hour_usd: {{GPU type: USD per GPU-hour}})")
        c = _mapping(raw, where, allow_none=False)
        for k in c:
            if k not in _COST_KEYS:
                raise SpecError(f"{where}: unknown key '{k}'{_hint(k, _COST_KEYS)} (valid: {', '.join(_COST_KEYS)})")
        if "gpu_hour_usd" not in c:
            raise SpecError(f"{where}: gpu_hour_usd (USD per GPU-hour by GPU type, e.g. {{H100: 2.5}}) is required")
        prices = _mapping(c["gpu_hour_usd"], f"{where}.gpu_hour_usd", allow_none=False)
        if not prices:
            raise SpecError(f"{where}.gpu_hour_usd: price at least one GPU type")
        self.where = where
        self.prices = {t: _positive(p, f"{where}.gpu_hour_usd.{t}") for t, p in prices.items()}
        self.defaults = {}
        for k in _GPU_AXES:
            if k in c:
                if not isinstance(c[k], str):
                    raise SpecError(f"{where}.{k} must be a GPU type name, got {c[k]!r}")
                self.check_type(c[k], f"{where}.{k}")
                self.defaults[k] = c[k]
        if "gpu" not in self.defaults and len(self.prices) == 1:
            self.defaults["gpu"] = next(iter(self.prices))
        self.tp = {"aggregated": _positive(c.get("tensor_parallel_size", 1), f"{where}.tensor_parallel_size", True)}
        for pool in _POOLS:
            k = f"{pool}_tensor_parallel_size"
            self.tp[pool] = _positive(c[k], f"{where}.{k}", True) if k in c else self.tp["aggregated"]
        self.engine = {}
        for t, args in _mapping(c.get("gpu_engine_args"), f"{where}.gpu_engine_args").items():
            self.check_type(t, f"{where}.gpu_engine_args")
            self.engine[t] = _engine_fields(args, f"{where}.gpu_engine_args.{t}")

    def check_type(self, gpu, used_by):
        if gpu not in self.prices:
            raise SpecError(f"{self.where}.gpu_hour_usd has no price for GPU type '{gpu}' (used by {used_by})"
                            f"{_hint(str(gpu), self.prices)}; priced: {', '.join(self.prices)}")

    def gpu_of(self, role, params):
        """The GPU type of a pool: its own axis or default, else the ``gpu`` axis or default."""
        names = ("gpu",) if role == "aggregated" else (f"{role}_gpu", "gpu")
        for name in names:
            if name in params:
                return params[name]
            if name in self.defaults:
                return self.defaults[name]
        return None


def load_plan_spec(spec) -> PlanSpec:
    """Validate and expand a plan spec: a mapping, a file path or a :class:`PlanSpec` (returned as
    is). Raises :class:`~fastsim.sweep.SpecError` naming the offending key, before anything runs."""
    if isinstance(spec, PlanSpec):
        return spec
    if isinstance(spec, (str, os.PathLike)):
        path = Path(spec)
        raw, text = _read_plan_file(path)
        root, src = str(path.resolve().parent), str(path)
    elif isinstance(spec, Mapping):
        raw, root, src = spec, None, "plan spec"
        text = json.dumps(_plain(spec, src), indent=2)
    else:
        raise SpecError(f"a plan spec must be a mapping or a file path, got {type(spec).__name__}")
    if not isinstance(raw, Mapping):
        raise SpecError(f"{src}: the spec must be a mapping with sections {', '.join(PLAN_SECTIONS)}, "
                        f"got {type(raw).__name__}")
    for k in raw:
        if k not in PLAN_SECTIONS:
            raise SpecError(f"{src}: unknown section '{k}'{_hint(str(k), PLAN_SECTIONS)} "
                            f"(valid: {', '.join(PLAN_SECTIONS)})")

    # workload: replay keywords, mode from the positional ones
    workload = {k: _plain(v, _where(src, "workload", k)) for k, v in _mapping(raw.get("workload"),
                                                                           _where(src, "workload")).items()}
    search_raw = _mapping(raw.get("search"), _where(src, "search"))
    tops = set(workload) | {k.split(".")[0] for k in search_raw}
    is_trace, is_synth = "trace_files" in tops, bool(tops & set(_POSITIONAL["synthetic"]))
    if is_trace == is_synth:
        raise SpecError(f"{src}: workload needs either trace_files (trace replay) or input_tokens, output_tokens "
                        f"and request_count (synthetic replay){', not both' if is_trace else ''}")
    mode = "trace" if is_trace else "synthetic"
    missing = [k for k in _POSITIONAL[mode] if k not in tops]
    if missing:
        raise SpecError(f"{src}: synthetic replay needs {', '.join(missing)} in workload")
    for k in workload:
        _check_replay_key(k, mode, _where(src, "workload"))

    # engine: base fields, pool additions
    eng_raw = _mapping(raw.get("engine"), _where(src, "engine"))
    pool_extra = {pool: _engine_fields(eng_raw.pop(pool, None), _where(src, "engine", pool)) for pool in _POOLS}
    engine = _engine_fields(eng_raw, _where(src, "engine"))
    for k in ("worker_type", "is_prefill", "is_decode"):
        if k in engine or any(k in pool_extra[p] for p in _POOLS):
            raise SpecError(f"{_where(src, 'engine')}: '{k}' is set by the plan (search.split chooses "
                            "aggregated or disaggregated workers)")

    slos, goodput = _parse_slo(raw.get("slo"), src)
    cost = _CostModel(raw.get("cost"), src)

    # search: the worker axis, the method, the other axes (canonical column names)
    method = search_raw.pop("method", "exhaustive")
    if method not in _METHODS:
        raise SpecError(f"{_where(src, 'search', 'method')} must be one of {', '.join(_METHODS)}, got {method!r}"
                        f"{_hint(str(method), _METHODS)}")
    flat = {}
    for k, v in search_raw.items():
        # a nested mapping that is not a range stands for dotted keys, as in sweeps
        if isinstance(v, Mapping) and v and not set(v) <= {"min", "max", "step"}:
            for kk, vv in v.items():
                flat[f"{k}.{kk}"] = vv
        else:
            flat[k] = v
    if not flat:
        raise SpecError(f"{_where(src, 'search')}: empty search space: give at least num_workers (the worker "
                        "counts to consider)")
    if "num_workers" not in flat:
        raise SpecError(f"{_where(src, 'search')}: num_workers (the worker counts to consider, a list or "
                        f"{{min, max}}) is required")
    worker_counts = _axis_values(flat.pop("num_workers"), _where(src, "search", "num_workers"))
    for w in worker_counts:
        if isinstance(w, bool) or not isinstance(w, numbers.Integral) or w < 1:
            raise SpecError(f"{_where(src, 'search', 'num_workers')}: worker counts must be positive integers, "
                            f"got {w!r}")
    worker_counts = sorted(set(int(w) for w in worker_counts))
    axes = []
    for k, v in flat.items():
        col = _canonical_axis(k, mode, src)
        if any(col == c for c, _ in axes):
            raise SpecError(f"{_where(src, 'search')}: '{col}' is varied twice (as '{k}' and another spelling)")
        values = _axis_values(v, _where(src, "search", k))
        if col == "split":
            values = [_split_label(_parse_split(x, _where(src, "search", "split"))) for x in values]
        elif col in _GPU_AXES:
            for x in values:
                cost.check_type(x, f"search.{col}")
        if len(set(json.dumps(x, sort_keys=True) for x in values)) != len(values):
            raise SpecError(f"{_where(src, 'search', k)}: a value is listed twice")
        axes.append((col, values))
    sp = PlanSpec(name=str(raw.get("name") or (Path(src).stem if root else "plan")),
                  description=str(raw.get("description") or ""), source=src, text=text, mode=mode, method=method,
                  slos=slos, axes=axes, worker_counts=worker_counts)
    _expand(sp, workload, engine, pool_extra, goodput, cost, root, src)
    sp.normalized = {"name": sp.name, "description": sp.description, "workload": workload,
                     "engine": {**engine, **{p: pool_extra[p] for p in _POOLS if pool_extra[p]}},
                     "slo": {s.name: s.bound for s in slos if s.name != "goodput"}
                     | ({"goodput": {"min_fraction": next(s.bound for s in slos if s.name == "goodput"),
                                     **{k[4:]: v for k, v in goodput.items()}}} if goodput else {}),
                     "search": {"method": method, "num_workers": worker_counts, **dict(axes)},
                     "cost": _plain(raw.get("cost"), src)}
    return sp


def _canonical_axis(key, mode, src):
    """A search key -> its column: an engine field (bare), ``prefill.F``/``decode.F``, a GPU axis,
    ``split`` or a replay keyword (dotted as in sweeps)."""
    where = _where(src, "search")
    if key in ("split", *_GPU_AXES):
        return key
    top, _, rest = key.partition(".")
    if top in ("engine", "extra_engine_args") and rest:
        top, rest = rest, ""
        if "." in top or top not in ENGINE_ARG_FIELDS:
            raise SpecError(f"{where}: unknown key '{key}': '{top}' is not an engine argument{_hint(top, ENGINE_ARG_FIELDS)}")
    if not rest and top in ENGINE_ARG_FIELDS:
        if top in ("worker_type", "is_prefill", "is_decode"):
            raise SpecError(f"{where}: '{top}' is set by the plan: vary search.split instead")
        return top
    pool = {"prefill": "prefill", "prefill_engine_args": "prefill", "decode": "decode",
            "decode_engine_args": "decode"}.get(top)
    if pool and rest:
        if rest not in ENGINE_ARG_FIELDS or rest in ("worker_type", "is_prefill", "is_decode"):
            raise SpecError(f"{where}: unknown key '{key}': '{rest}' is not an engine argument of a pool"
                            f"{_hint(rest, ENGINE_ARG_FIELDS)}")
        return f"{pool}.{rest}"
    params = _api_params(mode)
    if top in params or top in _OWNED:
        _check_replay_key(key, mode, where)
        return key
    valid = ["num_workers", "method", "split", *_GPU_AXES, *ENGINE_ARG_FIELDS,
             *(f"{p}.{f}" for p in _POOLS for f in ENGINE_ARG_FIELDS), *(p for p in params if p not in _OWNED)]
    raise SpecError(f"{where}: unknown key '{key}'{_hint(key, valid)}")


_DIGESTS = {}  # (path, size, mtime) -> SHA-256: a trace is read once per process, not once per configuration


def _file_digest(path):
    """SHA-256 of a trace file's content; a missing file is a spec error (before anything runs)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise SpecError(f"workload.trace_files: cannot read {path}: {exc.strerror or exc}") from None
    memo = (os.path.abspath(path), st.st_size, st.st_mtime_ns)
    if memo not in _DIGESTS:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        _DIGESTS[memo] = h.hexdigest()
    return _DIGESTS[memo]


def _cache_key(mode, kwargs):
    """The replay's identity: its arguments, trace files by content, and fastsim's version."""
    kw = dict(kwargs)
    if "trace_files" in kw:
        tf = kw["trace_files"]
        kw["trace_files"] = [_file_digest(p) for p in tf] if isinstance(tf, list) else _file_digest(tf)
    blob = json.dumps({"format": _CACHE_FORMAT, "fastsim": __version__, "mode": mode, "kwargs": kw},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _expand(sp, workload, engine, pool_extra, goodput, cost, root, src):
    """Fill ``sp.groups`` and ``sp.points``: every group (duplicates merged) at every worker count."""
    cols = [c for c, _ in sp.axes]
    has_pool_gpu = {p: f"{p}_gpu" in cols or f"{p}_gpu" in cost.defaults for p in _POOLS}
    seen = {}
    for combo in itertools.product(*[vals for _, vals in sp.axes]):
        params = dict(zip(cols, combo))
        split = _parse_split(params.get("split", "agg"), "split")
        # blank the settings this configuration ignores, so that equal configurations merge
        if split is None:
            ignored = {k for k in params if k.split(".")[0] in _POOLS or k in ("prefill_gpu", "decode_gpu")}
        else:
            ignored = {"gpu"} & set(params) if all(has_pool_gpu.values()) else set()
        params = {k: (None if k in ignored else v) for k, v in params.items()}
        ident = json.dumps(params, sort_keys=True)
        if ident in seen:
            continue
        counts = [w for w in sp.worker_counts if split is None or w >= 2]
        if not counts:
            raise SpecError(f"{_where(src, 'search', 'num_workers')}: split {_split_label(split)} needs at least 2 "
                            f"workers (one per pool); none of {sp.worker_counts} has: empty search space")
        g = Group(len(sp.groups), params, split, counts, ignored)
        g.label = ", ".join(f"{k}={v}" for k, v in params.items() if k not in ignored) or "all"
        seen[ident] = g
        sp.groups.append(g)
        for w in counts:
            sp.points.append(_point(len(sp.points), g, w, sp, workload, engine, pool_extra, goodput, cost, root, src))


def _pool_engine(role, engine, pool_extra, gpu, params, cost, where):
    args = dict(engine)
    if role != "aggregated":
        args.update(pool_extra[role])
    args.update(cost.engine.get(gpu, {}))
    args.update({k: v for k, v in params.items() if k in ENGINE_ARG_FIELDS})
    if role != "aggregated":
        args.update({k.split(".", 1)[1]: v for k, v in params.items() if k.startswith(role + ".")})
        args["worker_type"] = role
    try:
        ea = EngineArgs.coerce(args, source=where)
    except InputError as exc:
        raise SpecError(str(exc)) from None
    if role != "aggregated" and int(ea.dp_size or 1) != 1:
        raise SpecError(f"{where}: dp_size {ea.dp_size} is not allowed in a disaggregated pool (fastsim models 1)")
    return args, ea


def _point(cid, g, w, sp, workload, engine, pool_extra, goodput, cost, root, src):
    kw = copy.deepcopy(workload)
    for k, v in g.params.items():
        if k in g.ignored or k == "split" or k in _GPU_AXES or k in ENGINE_ARG_FIELDS or k.split(".")[0] in _POOLS:
            continue
        _set(kw, k, copy.deepcopy(v))
    if goodput:
        kw.update(goodput)
    roles = [("aggregated", w)] if g.split is None else list(zip(_POOLS, split_workers(w, g.split)))
    used = {k: v for k, v in g.params.items() if k not in g.ignored}
    pools = []
    for role, n in roles:
        gpu = cost.gpu_of(role, used)
        if gpu is None:
            raise SpecError(f"{_where(src, 'cost')}: which GPU type runs the {role} workers? Set cost.gpu "
                            f"(or cost.{role}_gpu, or vary search.gpu); priced: {', '.join(cost.prices)}")
        cost.check_type(gpu, f"the {role} workers of group {g.label}")
        where = f"{src}: engine of the {role} workers ({g.label})"
        args, ea = _pool_engine(role, engine, pool_extra, gpu, used, cost, where)
        kw["extra_engine_args" if role == "aggregated" else f"{role}_engine_args"] = args
        tp = cost.tp[role]
        pools.append({"role": role, "workers": n, "gpu": gpu, "tensor_parallel_size": tp,
                      "dp_size": int(ea.dp_size or 1), "gpus_per_worker": tp * int(ea.dp_size or 1),
                      "usd_per_gpu_hour": cost.prices[gpu]})
    if g.split is None:
        kw["num_workers"] = w
    else:
        kw["num_prefill_workers"], kw["num_decode_workers"] = pools[0]["workers"], pools[1]["workers"]
    if root is not None and "trace_files" in kw:
        tf = kw["trace_files"]
        kw["trace_files"] = [_resolve(p, root) for p in tf] if isinstance(tf, list) else _resolve(tf, root)
    for a in ("extra_engine_args", "prefill_engine_args", "decode_engine_args"):
        eng = kw.get(a)
        if root is not None and isinstance(eng, dict) and eng.get("planner_profile_data"):
            eng["planner_profile_data"] = _resolve(eng["planner_profile_data"], root)
    params = {**g.params, "num_workers": w}
    if g.split is not None or any(c == "split" for c, _ in sp.axes):
        params["num_prefill_workers"] = pools[0]["workers"] if g.split is not None else None
        params["num_decode_workers"] = pools[1]["workers"] if g.split is not None else None
    shown = [f"{k}={v}" for k, v in used.items()] + [f"num_workers={w}"]
    if g.split is not None:
        shown.append(f"({pools[0]['workers']}P+{pools[1]['workers']}D)")
    return Point(cid, g.gid, w, params, kw, pools, _cache_key(sp.mode, kw), ", ".join(shown))


# ----------------------------------------------------------------------------- evaluation


class _Evaluator:
    """Runs points on the sweep's executors, reusing finished replays from ``DIR/evaluations.jsonl``."""

    def __init__(self, sp, executor, workers, scheduler_address, cache_path, force, progress):
        self.sp, self.executor, self.workers, self.address = sp, executor, workers, scheduler_address
        self.pool, self.records, self.round_of = None, {}, {}
        self.cached, self.ran, self.sim_s = 0, 0, 0.0
        self.by_key = {}
        self.cache_path, self._f = (Path(cache_path) if cache_path is not None else None), None
        if self.cache_path is not None:
            if force and self.cache_path.exists():
                self.cache_path.unlink()
            self.by_key = self._read_cache()
            self.cache_path.parent.mkdir(parents=True, exist_ok=True)
            self._f = open(self.cache_path, "a", encoding="utf-8")
        self._synced = time.monotonic()
        self.progress, self.total, self._bar = progress, 0, None

    def _read_cache(self):
        if not self.cache_path.exists():
            return {}
        with open(self.cache_path, "rb+") as f:
            data = f.read()
            if data and not data.endswith(b"\n"):  # a line cut short by a kill: drop it
                f.truncate(data.rfind(b"\n") + 1)
                data = data[:data.rfind(b"\n") + 1]
        out = {}
        for i, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
            try:
                rec = json.loads(line)
                out[rec["key"]] = rec
            except (ValueError, KeyError, TypeError):
                raise SweepError(f"{self.cache_path}:{i}: corrupt line (delete the file, or use force=True)") from None
        return out

    def expect(self, n):
        """Tell the progress bar that ``n`` more evaluations may come (bisection: at most)."""
        self.total += n
        if self._bar is not None:
            self._bar.total = self.total
            if self._bar.bar is not None:
                self._bar.bar.total = self.total
                self._bar.bar.refresh()

    @property
    def bar(self):
        """The sweep's progress bar (tqdm, else a line every 2 s), made at the first result."""
        if self._bar is None:
            from fastsim.sweep import _Progress

            self._bar = _Progress(self.total, 0, self.progress)
            if self._bar.bar is not None:
                self._bar.bar.set_description("plan")
        return self._bar

    def evaluate(self, points, round_no=0):
        """Replay the points not evaluated yet (identical replays once); returns their records."""
        todo, tasks = {}, []
        for p in points:
            if p.config_id in self.records:
                continue
            self.round_of[p.config_id] = round_no
            hit = self.by_key.get(p.key)
            if hit is not None:
                self.records[p.config_id] = {**hit, "config_id": p.config_id}
                self.cached += 1
                self.bar.update(hit)
                continue
            if p.key not in todo:
                todo[p.key] = []
                tasks.append(p)
            todo[p.key].append(p)
        if tasks:
            self._run(tasks, todo)
        return {p.config_id: self.records[p.config_id] for p in points}

    def _run(self, tasks, todo):
        from fastsim.sweep import _execute, _Pool

        if self.pool is None and self.executor != "serial":
            n = min(int(self.workers or os.cpu_count() or 1), max(len(tasks), 2))
            self.pool = _Pool(self.executor, n, self.address)
        n = 1 if self.pool is None else self.pool.size
        threads = 1 if self.pool is not None and n > 1 else None
        by_id = {p.config_id: p for p in tasks}

        def on_result(rec, _req):
            p = by_id[rec["config_id"]]
            rec = {**rec, "key": p.key}
            self.by_key[p.key] = rec
            self.ran += 1
            self.sim_s += float(rec.get("run_wall_s") or 0.0)
            if self._f is not None:
                self._f.write(json.dumps(rec) + "\n")
                self._f.flush()  # a killed process keeps every line; a crashed machine loses < 1 s of them
                if time.monotonic() - self._synced >= 1.0:
                    os.fsync(self._f.fileno())
                    self._synced = time.monotonic()
            for q in todo[p.key]:
                self.records[q.config_id] = {**rec, "config_id": q.config_id}
                self.bar.update(rec)

        jobs = [(p.config_id, self.sp.mode, p.kwargs, False, threads, self.pool is not None) for p in tasks]
        window = 1 if self.pool is None else self.pool.size * (1 if self.executor == "local" else 2)
        _execute(jobs, self.pool, on_result, window)

    def close(self, ok=True):
        if self._bar is not None and self._bar.bar is not None:
            if ok:  # bisection stops short of its bound: the bar ends at what was done
                self._bar.bar.total = self._bar.done
                self._bar.bar.refresh()
            self._bar.bar.close()
        if self.pool is not None:
            self.pool.close(cancel=not ok)
            self.pool = None
        if self._f is not None:
            os.fsync(self._f.fileno())
            self._f.close()
            self._f = None


def _goodput_fraction(summary):
    n = summary.get("num_requests") or 0
    g = summary.get("goodput_completed_requests")
    return g / n if g is not None and n else math.nan


def _verdict(sp, rec):
    """(meets every SLO, failures as text, {slo name: (value, margin, met)}) of one record."""
    if rec["status"] != "ok" or not rec.get("summary"):
        return False, f"replay failed: {rec.get('error') or 'no summary'}", {}
    s = rec["summary"]
    checks, failures = {}, []
    for slo in sp.slos:
        v = _goodput_fraction(s) if slo.column == "goodput_fraction" else s.get(slo.column)
        v = math.nan if v is None else float(v)
        met = slo.met(v)
        checks[slo.name] = (v, slo.margin(v), met)
        if not met:
            failures.append(f"{slo.name} {v:.6g} {'>' if slo.sense == 'max' else '<'} {slo.bound:g}")
    n, done = s.get("num_requests") or 0, s.get("completed_requests") or 0
    if done < n:
        failures.append(f"{n - done} of {n} requests did not complete")
    return not failures, "; ".join(failures), checks


def _bisect(sp, ev):
    """Per group, the fewest workers meeting the SLOs, by halving its worker-count interval. All
    groups' probes of a round run side by side; returns the number of rounds."""
    state = {}
    for g in sp.groups:
        pts = sp.points_of(g.gid)
        state[g.gid] = {"pts": pts, "lo": -1, "hi": len(pts) - 1, "probe": len(pts) - 1, "first": True}
        ev.expect(1 + math.ceil(math.log2(len(pts))) if len(pts) > 1 else 1)
    rnd = 1
    while True:
        active = [s for s in state.values() if s["probe"] is not None]
        if not active:
            return rnd - 1
        recs = ev.evaluate([s["pts"][s["probe"]] for s in active], rnd)
        for s in active:
            i = s["probe"]
            ok = _verdict(sp, recs[s["pts"][i].config_id])[0]
            if s["first"]:
                s["first"] = False
                if not ok:  # even the largest count misses: nothing below is tried
                    s["probe"] = None
                    continue
            elif ok:
                s["hi"] = i
            else:
                s["lo"] = i
            s["probe"] = (s["lo"] + s["hi"]) // 2 if s["hi"] - s["lo"] > 1 else None
        rnd += 1


# ----------------------------------------------------------------------------- results


class PlanResult:
    """What :func:`plan` found. DataFrames: :attr:`results` (every evaluated configuration),
    :attr:`pareto`, :attr:`fewest_workers` (one row per group), :attr:`monotonicity`; :attr:`best`
    (a dict, None when nothing meets the SLOs, then :attr:`infeasible` says why); :attr:`search`
    (counts and times). :meth:`to_dict` is ``plan.json``."""

    def __init__(self, spec, results, best, infeasible, pareto, fewest, monotonicity, search):
        self.spec, self.results, self.best, self.infeasible = spec, results, best, infeasible
        self.pareto, self.fewest_workers, self.monotonicity, self.search = pareto, fewest, monotonicity, search
        self.files = {}

    @property
    def feasible(self) -> bool:
        return self.best is not None

    def to_dict(self) -> dict:
        sp = self.spec
        return {
            "fastsim_plan": 1, "fastsim_version": __version__, "name": sp.name, "description": sp.description,
            "spec": sp.normalized,
            "slo": [{"name": s.name, "metric": s.column, "bound": s.bound,
                     "sense": "at most" if s.sense == "max" else "at least"} for s in sp.slos],
            "best": self.best, "infeasible": self.infeasible,
            "pareto": _records(self.pareto),
            "fewest_workers": _records(self.fewest_workers),
            "monotonicity": {"assumption": "within a group, a larger worker count meets every SLO that a smaller one meets",
                             "violations": _records(self.monotonicity)},
            "search": self.search,
        }

    def summary_line(self) -> str:
        if self.best is None:
            return f"infeasible: {self.infeasible['reason']}"
        b = self.best
        per_m = b["cost_per_million_output_tokens_usd"]
        return (f"best: {b['label']} - {b['gpus']} GPUs, ${b['cost_per_hour_usd']:.2f}/h, "
                + (f"${per_m:.3f} per million output tokens" if per_m is not None else "no output tokens"))

    def write(self, out_dir):
        """Write plan.json, results.parquet, the PNG plots and report.html into ``out_dir``."""
        from fastsim.plan_report import write_outputs

        self.files = write_outputs(self, Path(out_dir))
        return self.files


def _clean(v):
    """A table cell as plain JSON-able Python (NaN, NA -> None)."""
    import pandas as pd

    if v is None or v is pd.NA:
        return None
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if hasattr(v, "item") and not isinstance(v, (list, dict, str)):
        v = v.item()
        return None if isinstance(v, float) and not math.isfinite(v) else v
    return v


def _records(df):
    if df is None or df.empty:
        return []
    return [{k: _clean(v) for k, v in row.items()} for row in df.to_dict("records")]


_LATENCY_KEYS = [f"{s}_{m}" for m in ("ttft_ms", "itl_ms", "e2e_latency_ms") for s in ("median", "p90", "p99")]


def _point_dict(sp, p, rec, row_round):
    ok, failures, checks = _verdict(sp, rec)
    s = rec.get("summary") or {}
    out_tps = s.get("output_throughput_tok_s") or 0.0
    per_m = p.cost_per_hour / (out_tps * 3600.0) * 1e6 if out_tps > 0 else math.nan
    return {
        "config_id": p.config_id, "label": p.label,
        "params": {k: v for k, v in p.params.items() if v is not None},
        "pools": p.pools, "gpus": p.gpus, "cost_per_hour_usd": p.cost_per_hour,
        "cost_per_million_output_tokens_usd": _clean(per_m),
        "output_throughput_tok_s": out_tps, "goodput_fraction": _clean(_goodput_fraction(s)),
        "latencies_ms": {k.replace("median", "p50").replace("e2e_latency", "e2e"): _clean(s.get(k))
                         for k in _LATENCY_KEYS},
        "slo": [_slo_dict(slo, *checks.get(slo.name, (math.nan, math.nan, False))) for slo in sp.slos],
        "meets_slo": ok, "failures": failures, "round": row_round,
    }


def _slo_dict(slo, value, margin, met):
    return {"name": slo.name, "value": _clean(value), "bound": slo.bound, "margin": _clean(margin),
            "margin_fraction": _clean(margin / slo.bound), "met": met}


def _pareto_mask(obj):
    """Non-dominated rows of ``obj`` (n x k, all minimised; rows with a NaN are never in the set)."""
    import numpy as np

    obj = np.asarray(obj, dtype=np.float64)
    n = obj.shape[0]
    finite = np.all(np.isfinite(obj), axis=1)
    mask = finite.copy()
    idx = np.nonzero(finite)[0]
    vals = obj[idx]
    for start in range(0, idx.shape[0], 512):
        block = vals[start:start + 512]
        le = np.all(vals[None, :, :] <= block[:, None, :], axis=2)
        lt = np.any(vals[None, :, :] < block[:, None, :], axis=2)
        dominated = np.any(le & lt, axis=1)
        mask[idx[start:start + 512][dominated]] = False
    return mask if n else np.zeros(0, dtype=bool)


def _assemble(sp, ev, t_search, rounds, method, executor):
    import numpy as np
    import pandas as pd

    from fastsim.sweep import _frame

    pts = [p for p in sp.points if p.config_id in ev.records]
    varied = list(dict.fromkeys(k for p in pts for k in p.params))
    sweep_like = SweepSpec(mode=sp.mode, source=sp.source, varied=varied,
                           configs=[Config(p.config_id, p.params, p.kwargs) for p in pts])
    df = _frame(sweep_like, ev.records)
    verdicts = [_verdict(sp, ev.records[p.config_id]) for p in pts]
    out_tps = df["output_throughput_tok_s"].to_numpy(dtype=np.float64, na_value=np.nan) if len(df) else np.zeros(0)
    cost_h = np.array([p.cost_per_hour for p in pts], dtype=np.float64)
    plan_cols = {
        "group": [p.gid for p in pts],
        "round": [ev.round_of.get(p.config_id, 0) for p in pts],
        "gpu_types": [", ".join(f"{q['role']}={q['gpu']}" for q in p.pools) for p in pts],
        "gpus": [p.gpus for p in pts],
        "cost_per_hour_usd": cost_h,
        "cost_per_million_output_tokens_usd": np.where(out_tps > 0, cost_h / (np.where(out_tps > 0, out_tps, 1.0)
                                                                                 * 3600.0) * 1e6, np.nan),
        "goodput_fraction": [_goodput_fraction(ev.records[p.config_id].get("summary") or {}) for p in pts],
        "meets_slo": [v[0] for v in verdicts],
        "slo_failures": [v[1] for v in verdicts],
    }
    for slo in sp.slos:
        plan_cols[f"margin_{slo.name}"] = [v[2].get(slo.name, (math.nan, math.nan))[1] for v in verdicts]
    pos = list(df.columns).index("status")
    for i, (k, v) in enumerate(plan_cols.items()):
        df.insert(pos + i, k, v)
    metric_cols = [(s.column, s.sense) for s in sp.slos]
    ok = (df["status"] == "ok").to_numpy()
    obj = np.column_stack([cost_h] + [df[c].to_numpy(dtype=np.float64, na_value=np.nan) * (1 if sense == "max" else -1)
                                      for c, sense in metric_cols]) if len(df) else np.zeros((0, 1))
    obj[~ok] = np.nan
    df.insert(pos + len(plan_cols), "pareto", _pareto_mask(obj))

    # best: cheapest meeting every SLO (ties: fewer GPUs, the SLO metrics in order, config id)
    feas = df[df["meets_slo"]]
    best = infeasible = None
    if len(feas):
        keys = ["cost_per_hour_usd", "gpus"] + [c for c, _ in metric_cols] + ["config_id"]
        asc = [True, True] + [sense == "max" for _, sense in metric_cols] + [True]
        cid = int(feas.sort_values(keys, ascending=asc, kind="mergesort").iloc[0]["config_id"])
        best = _point_dict(sp, sp.points[cid], ev.records[cid], ev.round_of.get(cid, 0))
    else:
        infeasible = _infeasible(sp, df, ev)

    # per group: the fewest workers meeting the SLOs
    rows = []
    for g in sp.groups:
        gdf = df[df["group"] == g.gid]
        met = gdf[gdf["meets_slo"]].sort_values("num_workers")
        row = {"group": g.gid, **g.params, "label": g.label,
               "evaluated": int(len(gdf)), "max_workers_tried": int(gdf["num_workers"].max()) if len(gdf) else None}
        if len(met):
            r = met.iloc[0]
            row.update(fewest_workers=int(r["num_workers"]), config_id=int(r["config_id"]), gpus=int(r["gpus"]),
                       cost_per_hour_usd=float(r["cost_per_hour_usd"]),
                       cost_per_million_output_tokens_usd=float(r["cost_per_million_output_tokens_usd"]),
                       **{c: float(r[c]) for c, _ in metric_cols}, reason="")
        else:
            last = gdf.sort_values("num_workers").iloc[-1] if len(gdf) else None
            row.update(fewest_workers=None, config_id=None, gpus=None, cost_per_hour_usd=None,
                       cost_per_million_output_tokens_usd=None, **{c: None for c, _ in metric_cols},
                       reason="" if last is None else f"at {int(last['num_workers'])} workers: {last['slo_failures']}")
        rows.append(row)
    fewest = pd.DataFrame(rows)
    if len(fewest):
        fewest = fewest.sort_values(["cost_per_hour_usd", "group"], na_position="last", kind="mergesort")
        fewest = fewest.reset_index(drop=True)

    mono = _monotonicity(sp, verdicts, pts)
    pareto_cols = ["config_id", *varied, "gpus", "cost_per_hour_usd", "cost_per_million_output_tokens_usd",
                   *[c for c, _ in metric_cols if c not in varied], "meets_slo"]
    pareto = df[df["pareto"]].sort_values(["cost_per_hour_usd", "config_id"])[
        list(dict.fromkeys(pareto_cols))].reset_index(drop=True)
    search = {
        "method": method, "executor": executor, "configurations_in_grid": sp.n_configs,
        "groups": len(sp.groups), "evaluated": len(pts), "replays_run": ev.ran, "reused_from_cache": ev.cached,
        "rounds": rounds, "search_seconds": t_search, "simulation_seconds": ev.sim_s,
        "errors": int((df["status"] != "ok").sum()) if len(df) else 0,
    }
    return PlanResult(sp, df, best, infeasible, pareto, fewest, mono, search)


def _infeasible(sp, df, ev):
    if not len(df):
        return {"reason": "nothing was evaluated"}
    ok = df[df["status"] == "ok"]
    if not len(ok):
        first = df["error"].iloc[0]
        return {"reason": f"every one of the {len(df)} evaluated configurations failed to replay; "
                          f"the first: {first}"}
    parts = []
    for slo in sp.slos:
        n_met = int((df[f"margin_{slo.name}"] >= 0).sum())
        vals = ok[slo.column].dropna()
        if not len(vals):
            parts.append(f"{slo.describe()} met by none (no value in any replay)")
            continue
        bi = vals.idxmin() if slo.sense == "max" else vals.idxmax()
        parts.append(f"{slo.describe()} met by {n_met} of {len(df)}; best value {vals[bi]:.6g} "
                     f"({sp.points[int(df.loc[bi, 'config_id'])].label})")
    unfinished = int((ok["completed_requests"] < ok["num_requests"]).sum())
    if unfinished:
        parts.append(f"{unfinished} replays left requests unfinished")
    # the closest: the largest worst relative margin
    def worst(row):
        m = [row[f"margin_{s.name}"] / s.bound for s in sp.slos]
        return min(m) if all(math.isfinite(x) for x in m) else -math.inf

    cid = max(((worst(row), int(row["config_id"])) for _, row in ok.iterrows()), key=lambda t: (t[0], -t[1]))[1]
    closest = _point_dict(sp, sp.points[cid], ev.records[cid], ev.round_of.get(cid, 0))
    return {"reason": "no evaluated configuration meets every SLO: " + "; ".join(parts), "closest": closest}


def _monotonicity(sp, verdicts, pts):
    """Pairs of evaluated worker counts, within a group, where the larger misses an SLO the smaller meets."""
    import pandas as pd

    rows = []
    by_group = {}
    for p, v in zip(pts, verdicts):
        if v[2]:  # replayed (an error row has no SLO values)
            by_group.setdefault(p.gid, []).append((p.workers, p, v[2]))
    for gid, items in by_group.items():
        items.sort(key=lambda t: t[0])
        for slo in sp.slos:
            best_met = None  # the largest smaller count that met this SLO so far
            for w, p, checks in items:
                value, _, met = checks[slo.name]
                if met:
                    best_met = (w, value)
                elif best_met is not None:
                    rows.append({"group": gid, "label": sp.groups[gid].label, "slo": slo.name,
                                 "met_at_workers": best_met[0], "value_met": best_met[1],
                                 "missed_at_workers": w, "value_missed": value})
    return pd.DataFrame(rows, columns=["group", "label", "slo", "met_at_workers", "value_met",
                                       "missed_at_workers", "value_missed"])


# ----------------------------------------------------------------------------- entry point


def plan(spec, out=None, *, method=None, executor="local", workers=None, scheduler_address=None,
         progress=True, force=False):
    """Find the cheapest configuration of a plan spec that meets its SLOs; returns a :class:`PlanResult`.

    ``spec``: a mapping, a spec file path or a :class:`PlanSpec` (see the module docstring).
    ``out``: a directory for ``plan.json``, ``results.parquet``, the plots and ``report.html``, and
    the replay cache ``evaluations.jsonl`` that makes a rerun resume (``force`` discards it).
    ``method``: ``"exhaustive"`` or ``"bisect"`` (default: the spec's ``search.method``).
    ``executor``, ``workers``, ``scheduler_address``, ``progress``: as in :func:`fastsim.sweep`.
    """
    sp = load_plan_spec(spec)
    method = method or sp.method
    if method not in _METHODS:
        raise InputError(f"method must be one of {', '.join(_METHODS)}, got {method!r}")
    if executor not in ("local", "dask", "serial"):
        raise InputError(f"executor must be 'local', 'dask' or 'serial', got {executor!r}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, numbers.Integral) or workers < 1):
        raise InputError(f"workers must be a positive integer, got {workers!r}")
    if scheduler_address is not None and executor != "dask":
        raise InputError("scheduler_address only applies to executor='dask'")
    if out is not None:  # the outputs' dependencies, checked before the search rather than after it
        _optional("pyarrow", "writing results.parquet", "plan")
        _optional("matplotlib", "the plan's plots", "plan")
        out = Path(out)
        if out.exists() and not out.is_dir():
            raise FastsimError(f"--out {out}: exists and is not a directory")
    t0 = time.perf_counter()
    ev = _Evaluator(sp, executor, workers, scheduler_address, None if out is None else out / "evaluations.jsonl",
                    force, progress)
    ok = False
    try:
        if method == "exhaustive":
            ev.expect(sp.n_configs)
            ev.evaluate(sp.points, 0)
            rounds = 1
        else:
            rounds = _bisect(sp, ev)
        ok = True
    finally:
        ev.close(ok)
    result = _assemble(sp, ev, time.perf_counter() - t0, rounds, method, executor)
    if out is not None:
        result.write(out)
    return result


class _CallableModule(types.ModuleType):
    """``fastsim.plan(spec, ...)`` works whether ``fastsim.plan`` names this module or the function."""

    def __call__(self, *args, **kwargs):
        return plan(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
