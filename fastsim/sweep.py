"""Parameter sweeps: many replays from one spec, on a process pool or a dask cluster.

A sweep spec is a mapping, or a ``.yaml``/``.yml``, ``.toml`` or ``.json`` file, with the keys:

* ``base``: replay arguments shared by every configuration, named as the keywords of
  :func:`fastsim.run_trace_replay` / :func:`fastsim.run_synthetic_trace_replay` (``trace_files``:
  trace replay; ``input_tokens``, ``output_tokens``, ``request_count``: synthetic replay). Engine
  arguments are nested mappings (``extra_engine_args: {block_size: 64}``).
* ``grid``: ``key: [values...]``, the cartesian product of all keys (first key slowest);
  ``zip``: lists of equal length varied together (one axis; a list of such mappings: several).
* ``repeats`` / ``seeds``: every configuration runs ``repeats`` times (innermost axis; columns
  ``repeat`` and, for synthetic replay, ``seed``). Synthetic repeat ``r`` sets ``arrival_seed`` to
  ``seeds[r]`` (default ``base.arrival_seed`` (42) + r), which changes Poisson arrivals
  (``request_rate``) and prefix-group draws only. Trace replay has no randomness: its repeats are
  identical runs (only the wall-clock columns differ; a SweepWarning says so), useful only to time
  the simulator, and ``seeds`` is an error there. ``name``, ``description``: free text.

Keys may be dotted to reach into nested arguments (``extra_engine_args.max_num_seqs``); a nested
mapping of lists means the same (what a TOML dotted key parses to); Dynamo 1.6's nested engine
arguments are swept the same way (``extra_engine_args.engine.block_size``). An unknown key, a key of the
other replay mode or an unknown engine field is a :class:`SpecError` naming it and the closest
valid key. Values are not checked up front: a configuration whose replay raises (a bad value, a
feature fastsim does not model yet) becomes an ``error`` row and the others complete. Relative
``trace_files``/``planner_profile_data`` paths (and a nested ``engine.timing_model.config.path``)
in a spec file are relative to the file.
``report_jsonl_path`` is refused (see ``keep_requests``); ``sla_*_ms`` add the goodput columns.

Configurations are numbered ``config_id`` 0..N-1 in that order; results are sorted by it and,
except the wall-clock :data:`TIMING_COLUMNS`, identical whatever the executor or worker count.
Workers are spawned processes; each loads the compiled kernels once (numba disk cache). A spawned
process re-imports the main script: a sweep called from a script's top level without Python's
``if __name__ == "__main__":`` guard would start again in every worker, so there the ``local``
executor runs the configurations in the calling process instead and says so (a
:class:`SweepWarning`); under the guard, from a module, the CLI or a notebook it uses processes. Each worker reads each trace once: the
configurations it runs share the request table, its block keys and the timing tables of a
profile file (``fastsim/reuse.py``; a Dask worker keeps them too, and so does a serial sweep).

Checkpoint (``checkpoint=PATH``, CLI ``--out``): each finished row is appended and fsynced to
``PATH.partial.jsonl``, headed by the SHA-256 of the expanded configurations (paths as written;
file contents are not hashed). A rerun skips finished configurations (error rows included): a
killed sweep loses only its in-flight runs. A checkpoint of another spec is refused
(:class:`SweepError`) unless ``force=True``. At the end the rows are compacted into ``PATH``
(``.parquet``: needs pyarrow, else the sweep stops before running, no silent CSV fallback; hash
in its schema metadata. ``.csv``: hash in ``PATH.sweep.json``) and the sidecar is deleted.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import inspect
import itertools
import json
import math
import numbers
import os
import shutil
import sys
import time
import traceback
import types
import warnings
from collections import deque, namedtuple
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fastsim import __version__
from fastsim.config import ENGINE_ARG_FIELDS, EngineArgs
from fastsim.engine_config import TOP_LEVEL_FIELDS
from fastsim.errors import FastsimError, FastsimWarning, InputError

__all__ = ["sweep", "load_spec", "read_results", "SweepSpec", "Config", "SpecError", "SweepError",
           "SweepWarning", "TIMING_COLUMNS"]

#: Columns that measure this machine's wall clock: they differ between otherwise identical runs.
TIMING_COLUMNS = ("run_wall_s", "wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s")
_SPEC_KEYS = ("base", "grid", "zip", "repeats", "seeds", "name", "description")
_POSITIONAL = {"trace": ("trace_files",), "synthetic": ("input_tokens", "output_tokens", "request_count")}
_ENGINE_KEYS = ("extra_engine_args", "prefill_engine_args", "decode_engine_args")
_FREEFORM_KEYS = ("router_config", "planner_config", "aic_perf_config")
_REFUSED = {"report_jsonl_path": "every configuration would write the same file; use keep_requests=True "
                                 "(CLI --keep-requests) to keep the per-request tables"}
_ENGINE_FIELDS = (*ENGINE_ARG_FIELDS, "has_perf_model", "is_prefill", "is_decode",
                  *(f for f in TOP_LEVEL_FIELDS if f not in ENGINE_ARG_FIELDS))  # Dynamo 1.6's nested form
_FORMAT = 1  # checkpoint format version


class SpecError(InputError):
    """A sweep spec is malformed: an unknown key (named, with the closest valid one), a bad shape."""


class SweepError(FastsimError):
    """A sweep cannot run as asked: a checkpoint of another spec, a missing optional dependency."""


class SweepWarning(FastsimWarning):
    """A sweep spec is valid but probably not what was meant (repeats of a deterministic replay)."""


# ----------------------------------------------------------------------------- spec


def _api_params(mode):
    from fastsim import api

    fn = api.run_trace_replay if mode == "trace" else api.run_synthetic_trace_replay
    return {p.name: p.default for p in inspect.signature(fn).parameters.values() if p.kind is not p.VAR_KEYWORD}


def _hint(name, valid):
    close = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def _plain(value, where):
    """``value`` as plain JSON-able Python (numpy scalars/arrays, tuples, paths, EngineArgs converted)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, EngineArgs):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {str(k): _plain(v, where) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
        return [_plain(v, where) for v in (value.tolist() if hasattr(value, "tolist") else value)]
    raise SpecError(f"{where}: value {value!r} of type {type(value).__name__} cannot be stored in a sweep spec")


def _values(v, where):
    """An axis' list of values (any non-string sequence), as plain Python."""
    if isinstance(v, (str, bytes, Mapping)) or not hasattr(v, "__iter__") or not len(v := list(v)):
        raise SpecError(f"{where} must be a non-empty list of values, got {v!r}")
    return [_plain(x, where) for x in v]


def _flatten(mapping, prefix, where):
    """``{a: {b: [..]}}`` -> ``{"a.b": [..]}`` (anything but a non-empty mapping is a leaf)."""
    if not isinstance(mapping, Mapping):
        raise SpecError(f"{where} must be a mapping of key -> list of values, got {type(mapping).__name__}")
    out = {}
    for k, v in mapping.items():
        if not isinstance(k, str) or not k:
            raise SpecError(f"{where}: keys must be non-empty strings, got {k!r}")
        out.update(_flatten(v, f"{prefix}{k}.", where) if isinstance(v, Mapping) and v else {prefix + k: v})
    return out


def _check_key(key, mode, where):
    params = _api_params(mode)
    top, *rest = key.split(".")
    if top not in params:
        other = "synthetic" if mode == "trace" else "trace"
        if top in _api_params(other):
            raise SpecError(f"{where}: '{top}' is not a keyword of {mode} replay (it applies to {other} replay only)")
        valid = list(params) + [f"extra_engine_args.{f}" for f in _ENGINE_FIELDS]
        raise SpecError(f"{where}: unknown key '{key}'{_hint(key, valid)}")
    if top in _REFUSED:
        raise SpecError(f"{where}: '{top}' is not allowed in a sweep: {_REFUSED[top]}")
    if rest and top in _ENGINE_KEYS:
        if rest[0] not in _ENGINE_FIELDS:
            hint = _hint(rest[0], _ENGINE_FIELDS).replace("'", f"'{top}.", 1)
            raise SpecError(f"{where}: unknown key '{key}': '{rest[0]}' is not an engine argument{hint}")
    elif rest and top not in _FREEFORM_KEYS:
        raise SpecError(f"{where}: '{key}': '{top}' takes a single value, not nested keys")


def _set(kwargs, key, value):
    """Set dotted ``key`` in the nested ``kwargs`` (intermediate mappings created as needed)."""
    *parents, last = key.split(".")
    d = kwargs
    for i, p in enumerate(parents):
        cur = d.get(p)
        if cur is None:
            cur = d[p] = {}
        elif isinstance(cur, str) and cur.lstrip().startswith("{"):
            cur = d[p] = json.loads(cur)
        if not isinstance(cur, dict):
            raise SpecError(f"'{key}': '{'.'.join(parents[:i + 1])}' must be a mapping in base to set nested keys")
        d = cur
    d[last] = value


def _cell(value):
    """A parameter value as a table cell: scalars as they are, lists/mappings as JSON text."""
    return value if value is None or isinstance(value, (bool, int, float, str)) else json.dumps(value, sort_keys=True)


def _column(values):
    """A parameter column of one type family, or all text (parquet needs one type per column)."""
    kinds = {"num" if isinstance(v, (int, float)) and not isinstance(v, bool) else type(v).__name__
             for v in values if v is not None}
    return [v if v is None or isinstance(v, str) else json.dumps(v) for v in values] if len(kinds) > 1 else values


def _resolve(path, root):
    return os.path.join(root, path) if isinstance(path, str) and path and not os.path.isabs(path) else path


Config = namedtuple("Config", "config_id params kwargs")
Config.__doc__ = "One configuration: its id, the varied values (column -> cell value) and the full replay kwargs."


@dataclass
class SweepSpec:
    """A validated, expanded sweep spec (build it with :func:`load_spec`).

    ``mode`` is ``"trace"`` or ``"synthetic"``; ``varied`` the parameter columns in order;
    ``configs`` every :class:`Config`; ``spec_hash`` the SHA-256 of the expanded configurations.
    """

    mode: str
    source: str
    varied: list
    configs: list = field(default_factory=list)
    spec_hash: str = ""

    @property
    def n_configs(self) -> int:
        """Number of configurations (rows of the result)."""
        return len(self.configs)

    def table(self, configs=None):
        """The configurations (default: all) as a DataFrame of ``config_id`` + varied columns."""
        import pandas as pd

        configs = self.configs if configs is None else configs
        cols = {"config_id": pd.array([c.config_id for c in configs], dtype="int64")}
        cols.update({n: _column([c.params.get(n) for c in configs]) for n in self.varied})
        return pd.DataFrame(cols)


def _read_spec_file(path: Path):
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".toml", ".json"):
        raise SpecError(f"sweep spec {path}: unknown format '{suffix}' (use .yaml, .yml, .toml or .json)")
    try:
        data = path.read_bytes()
        if suffix == ".json":
            return json.loads(data)
        if suffix == ".toml":
            toml = _optional("tomllib" if sys.version_info >= (3, 11) else "tomli", "reading a TOML spec", None)
            return toml.loads(data.decode("utf-8"))
        return _optional("yaml", "reading a YAML sweep spec", None).safe_load(data)
    except SweepError:
        raise
    except OSError as exc:
        raise SpecError(f"sweep spec {path}: cannot read: {exc.strerror or exc}") from None
    except Exception as exc:  # the parsers' own error types (JSONDecodeError, YAMLError, TOMLDecodeError)
        raise SpecError(f"sweep spec {path}: {exc}") from None


#: pip's names of the modules fastsim needs that are not imported under the same name
_PIP_NAMES = {"yaml": "pyyaml", "distributed": "dask[distributed]"}


def _optional(module, what, extra):
    """Import ``module`` or raise a SweepError with the install command (``extra`` None: a module
    of the base install, missing from a broken environment)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        hint = f"'fastsim-llm[{extra}]'" if extra else _PIP_NAMES.get(module, module)
        raise SweepError(f"{what} needs {module}: pip install {hint}") from None


def load_spec(spec) -> SweepSpec:
    """Validate and expand a sweep spec: a mapping, a file path (.yaml/.yml/.toml/.json) or a
    :class:`SweepSpec` (returned as is). Raises :class:`SpecError` naming the offending key."""
    if isinstance(spec, SweepSpec):
        return spec
    if isinstance(spec, (str, os.PathLike)):
        path = Path(spec)
        raw, root, src = _read_spec_file(path), str(path.resolve().parent), str(path)
    elif isinstance(spec, Mapping):
        raw, root, src = spec, None, "sweep spec"
    else:
        raise SpecError(f"a sweep spec must be a mapping or a file path, got {type(spec).__name__}")
    if not isinstance(raw, Mapping):
        raise SpecError(f"{src}: the spec must be a mapping with 'base', 'grid' and/or 'zip', got {type(raw).__name__}")
    for k in raw:
        if k not in _SPEC_KEYS:
            raise SpecError(f"{src}: unknown top-level key '{k}'{_hint(str(k), _SPEC_KEYS)} "
                            f"(valid: {', '.join(_SPEC_KEYS)})")
    base_raw = raw.get("base") or {}
    if not isinstance(base_raw, Mapping):
        raise SpecError(f"{src}: 'base' must be a mapping of replay arguments")
    base_flat = {str(k): _plain(v, f"{src}: base['{k}']") for k, v in base_raw.items()}
    grid = _flatten(raw.get("grid") or {}, "", f"{src}: grid")
    zips = raw.get("zip") or []
    zips = [zips] if isinstance(zips, Mapping) else zips
    zips = [_flatten(z, "", f"{src}: zip[{i}]") for i, z in enumerate(zips if isinstance(zips, list) else [zips])]

    tops = {k.split(".")[0] for k in itertools.chain(base_flat, grid, *zips)}
    is_trace, is_synth = "trace_files" in tops, bool(tops & set(_POSITIONAL["synthetic"]))
    if is_trace == is_synth:
        raise SpecError(f"{src}: give either trace_files (trace replay) or input_tokens, output_tokens and "
                        f"request_count (synthetic replay), in base, grid or zip{', not both' if is_trace else ''}")
    mode = "trace" if is_trace else "synthetic"
    missing = [k for k in _POSITIONAL[mode] if k not in tops]
    if missing:
        raise SpecError(f"{src}: synthetic replay needs {', '.join(missing)} (in base, grid or zip)")

    base = {}
    for k in sorted(base_flat, key=lambda s: s.count(".")):
        _check_key(k, mode, f"{src}: base")
        if k in _ENGINE_KEYS and isinstance(base_flat[k], dict):
            for f in base_flat[k]:
                _check_key(f"{k}.{f}", mode, f"{src}: base")
        _set(base, k, base_flat[k])

    axes = [((k,), [(x,) for x in _values(v, f"{src}: grid['{k}']")]) for k, v in grid.items()]
    for i, z in enumerate(zips):
        cols = {k: _values(v, f"{src}: zip[{i}]['{k}']") for k, v in z.items()}
        lengths = {k: len(v) for k, v in cols.items()}
        if len(set(lengths.values())) > 1:
            raise SpecError(f"{src}: zip[{i}] lists must have equal lengths, got {lengths}")
        if cols:
            axes.append((tuple(cols), list(zip(*cols.values()))))
    varied = [k for keys, _ in axes for k in keys]
    for k in varied:
        _check_key(k, mode, f"{src}: {'grid' if k in grid else 'zip'}")
        if varied.count(k) > 1:
            raise SpecError(f"{src}: '{k}' is varied twice (in grid and/or zip)")
        clash = [b for b in varied if b.startswith(k + ".")]
        if clash:
            raise SpecError(f"{src}: '{k}' and '{clash[0]}' are both varied; vary one or the other")

    def integer(v, lo):
        return not isinstance(v, bool) and isinstance(v, int) and v >= lo

    repeats, seeds = raw.get("repeats"), raw.get("seeds")
    if repeats is not None and not integer(repeats, 1):
        raise SpecError(f"{src}: repeats must be a positive integer, got {repeats!r}")
    if seeds is not None:
        seeds = _values(seeds, f"{src}: seeds")
        if mode == "trace":
            raise SpecError(f"{src}: seeds set arrival_seed (synthetic replay); trace replay has no random seed")
        if not all(integer(x, 0) for x in seeds) or repeats not in (None, len(seeds)):
            raise SpecError(f"{src}: seeds must be {repeats or 'a list of'} non-negative integers, got {seeds!r}")
    n_rep = len(seeds) if seeds is not None else (repeats or 1)
    if mode == "synthetic" and (n_rep > 1 or seeds is not None):
        if any(k.split(".")[0] == "arrival_seed" for k in varied):
            raise SpecError(f"{src}: arrival_seed is set by repeats/seeds; remove it from grid/zip")
        start = base.get("arrival_seed", _api_params("synthetic")["arrival_seed"])
        if seeds is None and not integer(start, 0):
            raise SpecError(f"{src}: base arrival_seed must be a non-negative integer, got {start!r}")
        seeds = seeds if seeds is not None else [start + r for r in range(n_rep)]
    if mode == "trace" and n_rep > 1:
        warnings.warn(f"{src}: trace replay is deterministic; its {n_rep} repeats give identical rows "
                      "(only the wall-clock columns differ)", SweepWarning, stacklevel=2)
    if n_rep > 1 or seeds is not None:
        varied += ["repeat"] + (["seed"] if seeds is not None else [])

    sp = SweepSpec(mode=mode, source=src, varied=varied)
    h = hashlib.sha256(json.dumps({"format": _FORMAT, "mode": mode, "varied": varied}).encode())
    for combo in itertools.product(*[vals for _, vals in axes]):
        assignment = {k: v for (keys, _), tup in zip(axes, combo) for k, v in zip(keys, tup)}
        for r in range(n_rep):
            kw = copy.deepcopy(base)
            for k in sorted(assignment, key=lambda s: s.count(".")):
                _set(kw, k, copy.deepcopy(assignment[k]))
            params = {k: _cell(v) for k, v in assignment.items()}
            if n_rep > 1 or seeds is not None:
                params["repeat"] = r
            if seeds is not None:
                params["seed"] = kw["arrival_seed"] = seeds[r]
            h.update(json.dumps([len(sp.configs), kw], sort_keys=True).encode())  # paths as written
            if root is not None:
                if "trace_files" in kw:
                    tf = kw["trace_files"]
                    kw["trace_files"] = [_resolve(p, root) for p in tf] if isinstance(tf, list) else _resolve(tf, root)
                eng = kw.get("extra_engine_args")
                if isinstance(eng, dict) and "planner_profile_data" in eng:
                    eng["planner_profile_data"] = _resolve(eng["planner_profile_data"], root)
                nested = eng.get("engine") if isinstance(eng, dict) else None
                tm = nested.get("timing_model") if isinstance(nested, dict) else None
                if isinstance(tm, dict) and isinstance(tm.get("config"), dict) and "path" in tm["config"]:
                    # Dynamo 1.6's nested form of the same NPZ path
                    kw["extra_engine_args"] = dict(eng, engine=dict(eng["engine"], timing_model=dict(
                        tm, config=dict(tm["config"], path=_resolve(tm["config"]["path"], root)))))
            sp.configs.append(Config(len(sp.configs), params, kw))
    sp.spec_hash = h.hexdigest()
    return sp


def _warm_worker():
    """Load every kernel in a worker process (once, from numba's disk cache; compile it if the
    cache is cold: ``fastsim warmup``, which the sweep's own process runs first). The loop's
    speculative-decoding variant is left to the first configuration that uses it."""
    from fastsim.blas_threads import one_blas_thread

    one_blas_thread()
    try:
        from fastsim.warmup import warm_up

        warm_up(speculative=False)
    except Exception:  # a broken install shows up in the first real configuration instead
        pass


def _run_task(task):
    """Run one configuration ``(config_id, mode, kwargs, keep_requests, threads, share)``. Never
    raises an Exception: returns ``(record, per-request DataFrame or None)``. ``share``: the task
    runs in a worker process, which keeps the inputs it reads for the configurations it runs next
    (``fastsim/reuse.py``)."""
    cid, mode, kwargs, keep, threads, share = task
    from fastsim import api, reuse

    if share:
        reuse.enable()

    t0 = time.perf_counter()
    summary, req, status, err = None, None, "ok", ""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            kw = copy.deepcopy(kwargs)
            kw.setdefault("threads", threads)
            if mode == "trace":
                rep = api.run_trace_replay(kw.pop("trace_files"), **kw)
            else:
                rep = api.run_synthetic_trace_replay(kw.pop("input_tokens"), kw.pop("output_tokens"),
                                                     kw.pop("request_count"), **kw)
            summary = {k: _plain(v, "summary") for k, v in rep.summary.items()}
            if keep:
                req = rep.requests.reset_index()
                req.insert(0, "config_id", cid)
        except Exception as exc:
            status, err = "error", f"{type(exc).__name__}: {exc}"
            tb = traceback.extract_tb(exc.__traceback__)
            if not isinstance(exc, FastsimError) and tb:  # a bug: say where
                err += f" (at {os.path.basename(tb[-1].filename)}:{tb[-1].lineno} in {tb[-1].name})"
    rec = {"config_id": cid, "status": status, "error": err, "run_wall_s": time.perf_counter() - t0,
           "warnings": "; ".join(dict.fromkeys(str(w.message) for w in caught)), "summary": summary}
    return rec, req


def _unguarded_main_call():
    """``(script, line)`` when this call comes from the top-level code of the ``__main__`` module
    outside an ``if __name__ == "__main__":`` block (a spawned worker re-imports that module and
    would run the call again), else None."""
    import ast

    main = sys.modules.get("__main__")
    if main is None or not getattr(main, "__file__", None):
        return None  # an interactive session, ``python -c``: spawned workers do not re-import it
    frame, top = sys._getframe(1), None
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is vars(main):
            top = frame
        frame = frame.f_back
    if top is None:
        return None
    where = (top.f_code.co_filename, top.f_lineno)
    try:
        with open(top.f_code.co_filename, "rb") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return where  # cannot tell: assume the worst

    def is_guard(test):
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
            return False
        sides = [test.left, test.comparators[0]]
        return (any(isinstance(x, ast.Name) and x.id == "__name__" for x in sides)
                and any(isinstance(x, ast.Constant) and x.value == "__main__" for x in sides))

    for node in tree.body:
        if (isinstance(node, ast.If) and is_guard(node.test)
                and node.body[0].lineno <= top.f_lineno <= (node.body[-1].end_lineno or node.lineno)):
            return None
    return where


def _caller_level():
    """``warnings.warn``'s stacklevel (for a call made in :func:`sweep`) of the first frame
    outside this module: the user's line, whether they called the module or the function."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_code.co_filename == __file__:
        frame, level = frame.f_back, level + 1
    return level


class _SpawnFailed(Exception):
    """The local executor's worker processes died before running anything."""


class _Pool:
    """A ``concurrent.futures`` executor: spawned worker processes (``local``: each loads the kernels
    once, in its initializer) or a ``dask.distributed`` client (the scheduler at ``address``, or a
    LocalCluster of ``workers`` single-threaded processes)."""

    def __init__(self, kind, workers, address=None):
        self.kind, self.size, self.client, self.cluster = kind, workers, None, None
        if not address:  # a cold kernel cache is compiled once here, not by every worker at once
            _warm_worker()
        if kind == "local":
            from concurrent.futures.process import BrokenProcessPool

            self.crash_errors, self.max_crashes = (BrokenProcessPool,), 2
            self.pool = self._spawn()
            try:
                self.pool.submit(os.getpid).result()
            except BrokenProcessPool:
                self.pool.shutdown(wait=False)
                raise _SpawnFailed() from None
            return
        import logging

        distributed = _optional("distributed", "executor 'dask'", "dask")
        self.crash_errors, self.max_crashes = (distributed.scheduler.KilledWorker,), 1  # dask retried already
        if address:
            self.client = distributed.Client(address)
        else:
            self.cluster = distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                                    dashboard_address=None, silence_logs=logging.ERROR)
            self.client = distributed.Client(self.cluster)
        self.client.run(_warm_worker)
        self.size = max(sum(self.client.nthreads().values()), 1)
        self.pool = self.client.get_executor(pure=False)

    def _spawn(self):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        return ProcessPoolExecutor(self.size, mp_context=multiprocessing.get_context("spawn"), initializer=_warm_worker)

    def rebuild(self):  # a new process pool after a worker death broke the old one (dask heals itself)
        if self.kind == "local":
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = self._spawn()

    def close(self, cancel=False):
        self.pool.shutdown(wait=not cancel, **({"cancel_futures": cancel} if self.kind == "local" else {}))
        for c in (self.client, self.cluster):
            if c is not None:
                c.close()


def _execute(tasks, pool, on_result, window):
    """Run ``tasks`` with at most ``window`` in flight, calling ``on_result(record, requests)``
    for each (``pool`` None: one by one in this process).

    A worker death (a broken process pool fails every in-flight future; dask raises KilledWorker
    after its own retries) requeues the configurations in flight; one that was in flight during
    ``pool.max_crashes`` deaths becomes an error row.
    """
    from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, wait

    if pool is None:
        from fastsim import reuse

        _warm_worker()  # kernel loading stays out of the first row's run_wall_s
        with reuse.during():  # the configurations share their inputs, for this sweep only
            for t in tasks:
                on_result(*_run_task(t))
        return
    pending, inflight, crashes = deque(tasks), {}, {}
    while pending or inflight:
        while pending and len(inflight) < window:
            t = pending.popleft()
            inflight[pool.pool.submit(_run_task, t)] = t
        done = wait(list(inflight), return_when=FIRST_COMPLETED)[0]
        broken = pool.kind == "local" and any(isinstance(f.exception(), pool.crash_errors) for f in done)
        if broken:
            done = wait(list(inflight), return_when=ALL_COMPLETED)[0]
        requeue = []
        for fut in sorted(done, key=lambda f: inflight[f][0]):
            task = inflight.pop(fut)
            try:
                rec, req = fut.result()
            except pool.crash_errors as exc:
                n = crashes[task[0]] = crashes.get(task[0], 0) + 1
                if n < pool.max_crashes:
                    requeue.append(task)
                    continue
                err = f"{type(exc).__name__}: its worker process died {n} time(s) while it ran (out of memory?): {exc}"
                rec, req = {"config_id": task[0], "status": "error", "run_wall_s": math.nan, "warnings": "",
                            "summary": None, "error": err}, None
            on_result(rec, req)
        pending.extendleft(reversed(requeue))
        if broken:
            pool.rebuild()


class _Checkpoint:
    """``PATH.partial.jsonl`` (a header line, then one record per finished configuration) -> ``PATH``."""

    def __init__(self, path, spec, force, keep_requests):
        self.path = Path(path)
        suffix = self.path.suffix.lower()
        if suffix not in (".parquet", ".csv"):
            raise SweepError(f"checkpoint {self.path}: the name must end in .parquet or .csv")
        if suffix == ".parquet" or keep_requests:
            _optional("pyarrow", f"writing {self.path}" if suffix == ".parquet" else "keep_requests with a checkpoint",
                      None)
        self.out = self.path
        self.partial, self.meta = (self.path.with_name(self.path.name + e) for e in (".partial.jsonl", ".sweep.json"))
        self.req_dir = self.path.with_name(self.path.name + ".requests") if keep_requests else None
        self.spec, self.force, self._f = spec, force, None
        self.fresh, self.rows = False, 0  # the sidecar was started by this run; rows it added
        self.header = {"fastsim_sweep": _FORMAT, "spec_hash": spec.spec_hash, "n_configs": spec.n_configs,
                       "mode": spec.mode, "varied": spec.varied, "fastsim_version": __version__, "source": spec.source}

    def _mismatch(self, what):
        if not self.force:
            raise SweepError(f"{what} was written for a different sweep spec; rerun with force=True (CLI --force) "
                             "to discard it and recompute, or choose another output path")
        for p in (self.partial, self.out, self.meta):
            if p.exists():
                p.unlink()
        if self.req_dir is not None and self.req_dir.exists():
            shutil.rmtree(self.req_dir)

    def _req_file(self, cid):
        return self.req_dir / f"config_{cid:0{len(str(max(self.spec.n_configs - 1, 0)))}d}.parquet"

    def open(self):
        """``(finished records by config id, the final frame if the sweep is already complete)``."""
        if self.partial.exists():
            records = self._read_partial()
            if records is not None:
                if self.req_dir is not None:  # a row counts only once its requests are on disk
                    records = {c: r for c, r in records.items() if r["status"] != "ok" or self._req_file(c).exists()}
                self._f = open(self.partial, "a", encoding="utf-8")
                return records, None
        elif self.out.exists():
            header = _read_header(self.out)
            if header is None or header.get("spec_hash") != self.spec.spec_hash:
                self._mismatch(str(self.out) if header else f"{self.out} exists and")
            elif self.req_dir is None or self.req_dir.exists():
                return {}, read_results(self.out)
        self.partial.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.partial, "w", encoding="utf-8")
        self.fresh = True
        self._write(self.header)
        return {}, None

    def _read_partial(self):
        with open(self.partial, "rb+") as f:
            data = f.read()
            if data and not data.endswith(b"\n"):  # a line cut short by a kill: drop it
                f.truncate(data.rfind(b"\n") + 1)
                data = data[:data.rfind(b"\n") + 1]
        if not data:  # killed before its header was written: start afresh
            return None
        lines = data.decode("utf-8", errors="replace").splitlines() or ["null"]
        try:
            header = json.loads(lines[0])
        except ValueError:
            header = None
        if not isinstance(header, dict) or header.get("spec_hash") != self.spec.spec_hash:
            self._mismatch(str(self.partial) if isinstance(header, dict) else f"{self.partial} has no header: it")
            return None
        records = {}
        for i, line in enumerate(lines[1:], start=2):
            try:
                rec = json.loads(line)
            except ValueError:
                raise SweepError(f"{self.partial}:{i}: corrupt line (delete it, or use force=True)") from None
            records.setdefault(rec["config_id"], rec)
        return records

    def _write(self, obj):
        self._f.write(json.dumps(obj) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def add(self, rec, req):  # one finished configuration: its requests first (atomically), then its row
        if self.req_dir is not None and req is not None:
            self.req_dir.mkdir(parents=True, exist_ok=True)
            dest = self._req_file(rec["config_id"])
            req.to_parquet(dest.with_name(dest.name + ".tmp"), index=False)
            os.replace(dest.with_name(dest.name + ".tmp"), dest)
        self._write(rec)
        self.rows += 1

    def abandon(self, interrupted):
        """The sweep stopped early: a sidecar holding no finished row is deleted; one that does is
        kept for a rerun to resume from (an error says so; Ctrl-C is the CLI's to report)."""
        self.close()
        if not self.partial.exists():
            return
        if self.fresh and self.rows == 0:
            self.partial.unlink()
        elif not interrupted:
            warnings.warn(f"the finished configurations are kept in {self.partial}: rerun the same sweep to "
                          "resume, or delete that file", SweepWarning, stacklevel=_caller_level())

    def close(self):
        if self._f is not None:
            self._f.close()
            self._f = None

    def finish(self, frame):  # compact the rows into PATH (atomically), then delete the sidecar
        self.close()
        tmp = self.out.with_name(self.out.name + ".tmp")
        if self.out.suffix.lower() == ".parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.Table.from_pandas(frame, preserve_index=False)
            meta = {**(table.schema.metadata or {}), b"fastsim_sweep": json.dumps(self.header).encode()}
            pq.write_table(table.replace_schema_metadata(meta), tmp)
        else:
            frame.to_csv(tmp, index=False)
            self.meta.write_text(json.dumps(self.header, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, self.out)
        self.partial.unlink()

    def read_requests(self):
        import pandas as pd

        files = sorted(self.req_dir.glob("config_*.parquet")) if self.req_dir.exists() else []
        return pd.concat([pd.read_parquet(f) for f in files], ignore_index=True) if files else pd.DataFrame()


def _read_header(path):
    """The sweep header stored with a result file (None if it has none)."""
    path = Path(path)
    try:
        if path.suffix.lower() == ".parquet":
            import pyarrow.parquet as pq

            meta = pq.read_schema(path).metadata or {}
            return json.loads(meta[b"fastsim_sweep"]) if b"fastsim_sweep" in meta else None
        side = path.with_name(path.name + ".sweep.json")
        return json.loads(side.read_text(encoding="utf-8")) if side.exists() else None
    except Exception:
        return None


def read_results(path):
    """Read a sweep result file (``.parquet`` or ``.csv``) back as a DataFrame."""
    import pandas as pd

    path = Path(path)
    if path.suffix.lower() == ".parquet":
        _optional("pyarrow", f"reading {path}", None)
        return pd.read_parquet(path)
    df = pd.read_csv(path, dtype={c: str for c in ("status", "error", "warnings")})
    return df.fillna({c: "" for c in ("status", "error", "warnings") if c in df})


def _frame(spec, records):
    """The result DataFrame of ``records`` (dicts by config id), in config order."""
    import numpy as np
    import pandas as pd

    from fastsim.report import SUMMARY_KEYS

    rows = [(c, records[c.config_id]) for c in spec.configs if c.config_id in records]
    sums = [r["summary"] or {} for _, r in rows]
    df = spec.table([c for c, _ in rows])
    # the report's own key order (goodput keys after gpu_hours), whatever rows have or lack
    metrics = [*max(sums, key=len, default={}), *SUMMARY_KEYS, *sorted({k for s in sums for k in s})]
    metrics = list(dict.fromkeys(metrics))
    for c in ("status", "error", "warnings"):
        df[c] = pd.Series([r.get(c) or "" for _, r in rows], dtype=object).astype(str)
    df.insert(len(df.columns) - 1, "run_wall_s", [float(r.get("run_wall_s", math.nan)) for _, r in rows])
    for k in metrics:
        vals = [s.get(k) for s in sums]
        present = [v for v in vals if v is not None]
        if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
            df[k] = pd.array(vals, dtype="Int64")
        elif present and all(isinstance(v, str) for v in present):  # dynamo_version, kv_eviction_policy
            df[k] = pd.Series(vals, dtype="str")
        elif present and any(isinstance(v, (dict, list)) for v in present):  # agentic_graph, ...: JSON text
            import json

            df[k] = pd.Series(["" if v is None else json.dumps(v, sort_keys=True) for v in vals], dtype="str")
        else:
            df[k] = np.array([math.nan if v is None else v for v in vals], dtype=np.float64)
    return df


class _Progress:
    """On a terminal a tqdm bar (completed/total, rate, ETA); into a file or a pipe a plain line
    every ~10 s and at the end (a bar's carriage returns would fill a log file)."""

    def __init__(self, total, initial, enabled):
        self.total, self.done, self.first, self.errors, self.on = total, initial, initial, 0, enabled
        self.t0 = self.last = time.monotonic()
        self.bar = None
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, unit="cfg", desc="sweep", file=sys.stderr,
                            dynamic_ncols=True, smoothing=0.05)

    def update(self, rec):
        self.done += 1
        self.errors += rec["status"] != "ok"
        if self.bar is not None:
            self.bar.update(1)
            if self.errors:
                self.bar.set_postfix(errors=self.errors, refresh=False)
        elif self.on and (time.monotonic() - self.last >= 10.0 or self.done == self.total):
            self.last = time.monotonic()
            el, ran = self.last - self.t0, self.done - self.first
            eta = f"{el / ran * (self.total - self.done):.1f}s" if ran else "?"
            sys.stderr.write(f"sweep: {self.done}/{self.total} ({100.0 * self.done / max(self.total, 1):.0f}%) "
                             f"elapsed {el:.1f}s eta {eta} errors {self.errors}\n")


# ----------------------------------------------------------------------------- entry point


def sweep(spec, executor="local", workers=None, checkpoint=None, progress=True, keep_requests=False,
          *, scheduler_address=None, force=False):
    """Run every configuration of a sweep spec; returns a DataFrame with one row per configuration.

    ``spec``: a mapping, a spec file path or a :class:`SweepSpec` (see the module docstring).
    ``executor``: ``"local"`` (a pool of ``workers`` spawned processes, default ``os.cpu_count()``),
    ``"dask"`` (``dask.distributed``, extra ``fastsim-llm[dask]``: the scheduler at
    ``scheduler_address`` — its workers need fastsim installed — or else a LocalCluster of
    ``workers`` single-threaded processes) or ``"serial"`` (in this process, for debugging).
    ``checkpoint``: a ``.parquet``/``.csv`` output path that makes the sweep resumable; ``force``
    discards a checkpoint of a different spec instead of refusing it.
    ``progress``: a progress bar on stderr.

    Columns: ``config_id``; one per varied parameter (dotted names; ``repeat``/``seed`` with
    repeats); ``status`` (``ok``/``error``); ``error`` (the message, ``""`` when ok);
    ``run_wall_s``; ``warnings`` (of that run); then every summary metric, Dynamo's report keys
    (goodput keys when a configuration sets an SLA; NaN/<NA> on error rows). Sorted by
    ``config_id``, identical whatever the executor except :data:`TIMING_COLUMNS`.

    ``keep_requests=True`` returns ``(results, requests)``: the per-request tables
    (:attr:`fastsim.report.Report.requests` with ``config_id`` and ``row`` in front) of every ok
    configuration, concatenated in config order; with a checkpoint they are also kept on disk as
    the parquet dataset ``PATH.requests/`` (one file per configuration; ``pandas.read_parquet(dir)``).
    """
    sp = load_spec(spec)
    if executor not in ("local", "dask", "serial"):
        raise InputError(f"executor must be 'local', 'dask' or 'serial', got {executor!r}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, numbers.Integral) or workers < 1):
        raise InputError(f"workers must be a positive integer, got {workers!r}")
    if scheduler_address is not None and executor != "dask":
        raise InputError("scheduler_address only applies to executor='dask'")
    ck = _Checkpoint(checkpoint, sp, force, keep_requests) if checkpoint is not None else None
    kept = {}
    try:
        records, frame = ck.open() if ck is not None else ({}, None)
        keep = bool(keep_requests)
        todo = [(c.config_id, sp.mode, c.kwargs, keep) for c in sp.configs if c.config_id not in records]
        if frame is not None and progress:
            sys.stderr.write(f"sweep: all {sp.n_configs} configurations already done ({ck.out})\n")
        if frame is None and todo:
            n = min(int(workers or os.cpu_count() or 1), len(todo))
            # one replay per core: a replay splits itself into threads only when it runs alone
            one = 1 if executor != "serial" and n > 1 else None
            todo = [t + (one, True) for t in todo]
            pool = None
            if executor == "local" and n > 1 and (where := _unguarded_main_call()) is not None:
                warnings.warn(
                    f"sweep(executor='local') was called at {os.path.basename(where[0])}:{where[1]}, outside an "
                    "`if __name__ == \"__main__\":` block; worker processes re-import the script and would run "
                    f"the sweep again, so its {len(todo)} configurations run in this process, one at a time. "
                    f"Put the call under that guard to use {n} processes", SweepWarning, stacklevel=_caller_level())
                executor = "serial"
            elif executor != "serial":
                try:
                    pool = _Pool(executor, n, scheduler_address)
                except _SpawnFailed:
                    warnings.warn(
                        "executor 'local' could not start its worker processes (they are spawned and re-import "
                        "the main module); the configurations run in this process, one at a time",
                        SweepWarning, stacklevel=_caller_level())
                    executor = "serial"
            if pool is None:  # in this process, one at a time: a replay may use every core again
                todo = [t[:-2] + (None, False) for t in todo]
            bar, ok = _Progress(sp.n_configs, len(records), progress), False

            def on_result(rec, req):
                records[rec["config_id"]] = rec
                if ck is not None:
                    ck.add(rec, req)
                elif req is not None:
                    kept[rec["config_id"]] = req
                bar.update(rec)

            try:
                _execute(todo, pool, on_result, 1 if pool is None else pool.size * (1 if executor == "local" else 2))
                ok = True
            finally:
                if bar.bar is not None:
                    bar.bar.close()
                if pool is not None:
                    pool.close(cancel=not ok)
        if frame is None:
            frame = _frame(sp, records)
            if ck is not None:
                ck.finish(frame)
    except BaseException as exc:
        if ck is not None:
            ck.abandon(isinstance(exc, KeyboardInterrupt))
        raise
    finally:
        if ck is not None:
            ck.close()
    if not keep_requests:
        return frame
    if ck is not None:
        return frame, ck.read_requests()
    import pandas as pd

    return frame, (pd.concat([kept[c] for c in sorted(kept)], ignore_index=True) if kept else pd.DataFrame())


class _CallableModule(types.ModuleType):
    """``fastsim.sweep(spec, ...)`` works whether ``fastsim.sweep`` names this module or the function."""

    def __call__(self, *args, **kwargs):
        return sweep(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
