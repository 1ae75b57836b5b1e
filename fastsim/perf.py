"""Timing models: Dynamo's polynomial, a mocker-format NPZ grid, a planner profiler directory, or
Dynamo 1.6's fixed per-pass latencies.

``engine_perf_model(engine)`` picks the model of an :class:`~fastsim.config.EngineArgs`: its
``timing_model`` when that is a fixed model (:func:`fixed_model`), else
``load_perf_model(engine.planner_profile_data)``.

``load_perf_model(planner_profile_data)`` turns the engine argument ``planner_profile_data`` into
the :class:`~fastsim.kernels.perf.PerfTables` the compiled loop reads:

* ``None``: the built-in polynomial model (notes 6.1).
* a path ending in ``.npz``: a grid in Dynamo's mocker format (notes 6.2, verified Q14), checked
  the way Dynamo 1.4.2's Rust loader (``PerfModel::from_npz`` with ndarray-npy and ndarray-interp)
  checks it.
* a profiler results directory (``selected_prefill_interpolation/raw_data.npz`` and
  ``selected_decode_interpolation/raw_data.npz``, or the legacy ``prefill_raw_data.json`` and
  ``decode_raw_data.json``): converted to the same grid as Dynamo's
  ``dynamo.mocker.utils.planner_profiler_perf_data_converter`` does it (least-squares fits of
  the planner's regression models evaluated on a 100-point grid), see
  :func:`convert_profile_results`.

Dynamo logs an error and silently falls back to the polynomial model when the NPZ cannot be used;
fastsim raises :class:`~fastsim.errors.InputError` (a ``ValueError``) naming the file and the
problem instead. It also rejects NaN/infinite table values, which Dynamo accepts and silently
turns into 0 ms prefill / 1 ms decode steps. Nothing is ever unpickled.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

from fastsim import reuse
from fastsim.errors import InputError
from fastsim.kernels.perf import FIXED, INTERPOLATED, POLYNOMIAL, PerfTables

__all__ = [
    "PerfTables",
    "NPZ_KEYS",
    "load_perf_model",
    "engine_perf_model",
    "polynomial_model",
    "fixed_model",
    "grid_model",
    "convert_profile_results",
    "is_profile_results_dir",
    "describe",
]

#: Keys of Dynamo's mocker-format NPZ, in the order its loader reads them.
NPZ_KEYS = ("prefill_isl", "prefill_ttft_ms", "decode_active_kv_tokens", "decode_context_length", "decode_itl")
_NDIM = {"prefill_isl": 1, "prefill_ttft_ms": 1, "decode_active_kv_tokens": 1, "decode_context_length": 1, "decode_itl": 2}

# Profiler directory layout (dynamo.planner.monitoring.perf_metrics, 1.4.2).
_PREFILL_NPZ = os.path.join("selected_prefill_interpolation", "raw_data.npz")
_DECODE_NPZ = os.path.join("selected_decode_interpolation", "raw_data.npz")
_PREFILL_JSON = "prefill_raw_data.json"
_DECODE_JSON = "decode_raw_data.json"

# Converter constants (planner_profiler_perf_data_converter.py and planner/core/perf_model, 1.4.2).
_RESOLUTION = 100  # grid points per axis
_BUCKETS = 16  # fpm_sample_bucket_size: 16 buckets on a 1-D axis, isqrt(16) = 4 per axis in 2-D
_MIN_WALL_S = 1e-6  # predictions are clamped to at least 1 us
_RELAXABLE_NEG_TOLERANCE = 1e-6  # decode batch-size coefficient below -1e-6 is clamped to 0
_DEFAULT_MAX_CTX = 8192.0  # context axis end when no decode point has requests (unreachable)


# --------------------------------------------------------------------------------------------
# Public constructors


def polynomial_model() -> PerfTables:
    """The built-in polynomial model (Dynamo's default when ``planner_profile_data`` is unset)."""
    return PerfTables(POLYNOMIAL, np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0), np.zeros((0, 0)))


def fixed_model(prefill_ms: float, decode_ms: float) -> PerfTables:
    """Dynamo 1.6's fixed model: ``prefill_ms`` per pass with prompt tokens, ``decode_ms`` per pass
    that decodes (finite, >= 0)."""
    for name, v in (("prefill_ms", prefill_ms), ("decode_ms", decode_ms)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise InputError(f"fixed timing model: {name} must be a finite number >= 0, got {v!r}")
    return PerfTables(FIXED, np.zeros(0), np.array([float(prefill_ms)]), np.zeros(0), np.zeros(0),
                      np.array([[float(decode_ms)]]))


def engine_perf_model(engine) -> PerfTables:
    """The timing model an :class:`~fastsim.config.EngineArgs` selects (fixed, grid or polynomial)."""
    timing = getattr(engine, "timing_model", None)
    if timing is not None:
        return fixed_model(timing["prefill_ms"], timing["decode_ms"])
    return load_perf_model(engine.planner_profile_data)


def grid_model(
    prefill_isl,
    prefill_ttft_ms,
    decode_active_kv_tokens,
    decode_context_length,
    decode_itl,
    *,
    source: str = "grid",
) -> PerfTables:
    """An interpolated model from arrays in Dynamo's mocker layout, validated as Dynamo does.

    ``prefill_isl`` (1-D, total new prompt tokens of a pass) -> ``prefill_ttft_ms``;
    ``decode_itl[i, j]`` (ms) at (``decode_active_kv_tokens[i]``, ``decode_context_length[j]``).
    Each axis needs at least 2 strictly increasing values, and lengths must match; values must be
    finite. ``source`` names the input in error messages.
    """
    arrays = {
        "prefill_isl": prefill_isl,
        "prefill_ttft_ms": prefill_ttft_ms,
        "decode_active_kv_tokens": decode_active_kv_tokens,
        "decode_context_length": decode_context_length,
        "decode_itl": decode_itl,
    }
    out = {}
    for key, value in arrays.items():
        a = np.asarray(value)
        if a.dtype.kind not in "iuf":
            raise InputError(f"{source}: {key} has dtype {a.dtype}; it must be numeric")
        if a.ndim != _NDIM[key]:
            raise InputError(f"{source}: {key} has shape {a.shape}; it must be {_NDIM[key]}-D")
        out[key] = a
    return _validated(out, source)


def load_perf_model(planner_profile_data: str | os.PathLike | None, base_dir: str | os.PathLike | None = None) -> PerfTables:
    """The timing model for Dynamo's ``planner_profile_data`` engine argument.

    ``None`` -> polynomial; a ``.npz`` path -> a mocker-format grid; a profiler results directory
    -> the grid Dynamo 1.4.2 derives from it. A relative path is resolved against ``base_dir``
    (default: the current directory). Raises :class:`~fastsim.errors.InputError` (a ``ValueError``)
    when the input is missing or unusable; Dynamo would fall back to the polynomial model there.
    """
    if planner_profile_data is None:
        return polynomial_model()
    path = Path(os.fspath(planner_profile_data)).expanduser()
    if not path.is_absolute():
        path = Path(base_dir if base_dir is not None else os.getcwd()) / path
    # Dynamo's replay resolves by suffix first: a ".npz" path goes straight to the Rust loader.
    if path.suffix == ".npz":
        if not path.is_file():
            raise InputError(f"planner_profile_data {str(path)!r}: no such NPZ file")
        return reuse.from_file("npz", path, lambda: _load_npz(path))
    if path.is_dir():
        if not is_profile_results_dir(path):
            raise InputError(
                f"planner_profile_data {str(path)!r} is a directory but not a profiler results directory: "
                f"expected {_PREFILL_NPZ} (or {_PREFILL_JSON}) and {_DECODE_NPZ} (or {_DECODE_JSON}) in it"
            )
        return reuse.from_file("profile", path, lambda: _validated(convert_profile_results(path),
                                                                 f"{path} (converted profiler results)"))
    if path.exists():
        raise InputError(
            f"planner_profile_data {str(path)!r} is neither a mocker-format .npz file nor a profiler results "
            f"directory (a .npz needs the keys {', '.join(NPZ_KEYS)})"
        )
    raise InputError(f"planner_profile_data {str(path)!r}: no such file or directory")


def describe(perf: PerfTables) -> str:
    """A short human-readable account of a timing model (for logs and ``--verbose`` output)."""
    if perf.kind == FIXED:
        return (f"fixed timing model: {perf.prefill_y[0]:g} ms per pass with prompt tokens, "
                f"{perf.decode_z[0, 0]:g} ms per pass that decodes")
    if perf.kind == POLYNOMIAL:
        return (
            "polynomial timing model (Dynamo default): prefill(t) = 4.209989e-07*t^2 + 1.518344e-02*t + "
            "16.50142 ms; decode(u) = max(-25.74*u^2 + 54.01*u + 5.74, 1) ms with u = active/total KV"
        )
    px, py = perf.prefill_x, perf.prefill_y
    dx, dy, dz = perf.decode_x, perf.decode_y, perf.decode_z
    return (
        f"interpolated timing model: prefill {px.shape[0]} points, tokens [{px[0]:g}, {px[-1]:g}] -> "
        f"[{py.min():.6g}, {py.max():.6g}] ms (linear, extrapolated, >= 0); decode {dx.shape[0]}x{dy.shape[0]} "
        f"grid, active KV tokens [{dx[0]:g}, {dx[-1]:g}] x context [{dy[0]:g}, {dy[-1]:g}] -> "
        f"[{dz.min():.6g}, {dz.max():.6g}] ms (bilinear, extrapolated, >= 1 ms)"
    )


# --------------------------------------------------------------------------------------------
# Mocker-format NPZ


def _check_npz_magic(path: Path) -> None:
    """An NPZ is a zip archive of .npy arrays; anything else (text, a pickle, a lone .npy) is named
    as such here, before numpy's loader answers with hints about pickles."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(6)
    except OSError as exc:
        raise InputError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    if head.startswith(b"\x93NUMPY"):
        raise InputError(f"{path}: is a single .npy array, not an NPZ archive with the keys {', '.join(NPZ_KEYS)}")
    if not head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        raise InputError(
            f"{path}: cannot read it as an NPZ archive: it is not a zip of .npy arrays (it starts with "
            f"{head!r}); a mocker-format NPZ holds the keys {', '.join(NPZ_KEYS)}"
        )


def _load_npz(path: Path) -> PerfTables:
    # Dynamo reads each key as Array1<f64> / Array2<f64> (ndarray-npy): float64 of either byte
    # order and any memory order is accepted; int64, float32, other ranks fail (verified by
    # experiment with 1.4.2: each of those falls back to the polynomial model).
    _check_npz_magic(path)
    try:
        npz = np.load(path, allow_pickle=False)
    except Exception as exc:  # truncated, a pickle inside...
        raise InputError(f"{path}: cannot read it as an NPZ archive ({exc})") from None
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise InputError(f"{path}: is a single .npy array, not an NPZ archive with the keys {', '.join(NPZ_KEYS)}")
    with npz:
        missing = [k for k in NPZ_KEYS if k not in npz.files]
        if missing:
            raise InputError(
                f"{path}: missing key(s) {', '.join(missing)}; a mocker-format NPZ needs {', '.join(NPZ_KEYS)} "
                f"(found: {', '.join(npz.files) or 'none'})"
            )
        arrays = {}
        for key in NPZ_KEYS:
            try:
                a = npz[key]
            except Exception as exc:  # object arrays (would need pickle), corrupt members
                raise InputError(f"{path}: cannot read {key} ({exc})") from None
            if a.dtype.kind != "f" or a.dtype.itemsize != 8:
                raise InputError(f"{path}: {key} has dtype {a.dtype}; it must be float64 (Dynamo cannot read it otherwise)")
            if a.ndim != _NDIM[key]:
                raise InputError(f"{path}: {key} has shape {a.shape}; it must be {_NDIM[key]}-D")
            arrays[key] = a
    return _validated(arrays, str(path))


def _validated(arrays: dict, source: str) -> PerfTables:
    """Dynamo's load-time checks (PerfModel::from_npz, ndarray-interp builders), plus finiteness."""
    px = _f64(arrays["prefill_isl"])
    py = _f64(arrays["prefill_ttft_ms"])
    dx = _f64(arrays["decode_active_kv_tokens"])
    dy = _f64(arrays["decode_context_length"])
    dz = _f64(arrays["decode_itl"])
    if px.shape[0] != py.shape[0]:
        raise InputError(f"{source}: prefill_isl has {px.shape[0]} values but prefill_ttft_ms has {py.shape[0]}")
    if dz.shape != (dx.shape[0], dy.shape[0]):
        raise InputError(
            f"{source}: decode_itl has shape {dz.shape} but must be (len(decode_active_kv_tokens), "
            f"len(decode_context_length)) = ({dx.shape[0]}, {dy.shape[0]})"
        )
    for key, axis in (("prefill_isl", px), ("decode_active_kv_tokens", dx), ("decode_context_length", dy)):
        if axis.shape[0] < 2:
            raise InputError(f"{source}: {key} has {axis.shape[0]} value(s); linear interpolation needs at least 2")
        bad = np.flatnonzero(~(axis[1:] > axis[:-1]))  # also catches NaN
        if bad.size:
            i = int(bad[0])
            raise InputError(
                f"{source}: {key} must be strictly increasing, but {key}[{i}] = {float(axis[i])!r} and "
                f"{key}[{i + 1}] = {float(axis[i + 1])!r}"
            )
    for key, values in (("prefill_ttft_ms", py), ("decode_itl", dz)):
        bad = np.argwhere(~np.isfinite(values))
        if bad.size:
            where = tuple(int(v) for v in bad[0])
            raise InputError(
                f"{source}: {key}{list(where)} is {float(values[where])!r}; table values must be finite "
                f"(Dynamo would silently use 0 ms prefill / 1 ms decode there)"
            )
    for key, values in (("prefill_ttft_ms", py), ("decode_itl", dz)):
        neg = np.argwhere(values < 0)
        if neg.size:
            import warnings

            from fastsim.errors import FastsimWarning

            where = tuple(int(v) for v in neg[0])
            warnings.warn(
                f"{source}: {key} has {neg.shape[0]} negative value(s) (first {key}{list(where)} = "
                f"{float(values[where])!r}); predictions are clamped (prefill to at least 0 ms, decode to at least "
                f"1 ms), as in Dynamo",
                FastsimWarning, stacklevel=3)
    return PerfTables(INTERPOLATED, px, py, dx, dy, dz)


def _f64(a) -> np.ndarray:
    # Native byte order, C order, writeable float64: one numba signature for every source.
    return np.array(a, dtype=np.float64, order="C", copy=True)


# --------------------------------------------------------------------------------------------
# Profiler results directory -> grid (Dynamo's converter)


def is_profile_results_dir(path: str | os.PathLike) -> bool:
    """True if ``path`` holds prefill and decode profiler data (NPZ or legacy JSON), as Dynamo checks."""
    p = Path(path)
    if not p.is_dir():
        return False
    has_prefill = (p / _PREFILL_NPZ).exists() or (p / _PREFILL_JSON).exists()
    has_decode = (p / _DECODE_NPZ).exists() or (p / _DECODE_JSON).exists()
    return has_prefill and has_decode


def convert_profile_results(directory: str | os.PathLike, resolution: int = _RESOLUTION) -> dict[str, np.ndarray]:
    """The mocker-format arrays Dynamo 1.4.2 derives from a profiler results directory.

    Same as ``convert_profile_results_to_npz``: each profiled point becomes a forward-pass sample;
    prefill wall time is fitted by ordinary least squares on the prefill tokens, decode wall time
    on ``[batch size, KV tokens]`` (the planner's ``PrefillRegressionModel`` /
    ``DecodeRegressionModel``, scikit-learn ``LinearRegression``); the fits are evaluated on
    ``resolution`` evenly spaced points per axis and clamped to at least 1 us. Samples are fitted
    in the planner's bucket order, and predictions are formed as it does, so the result is
    bit-identical with numpy's LAPACK on the reference machine and equal to float precision
    elsewhere. Returns the five arrays keyed by :data:`NPZ_KEYS` (not yet validated).
    """
    directory = Path(directory)
    resolution = int(resolution)

    # Prefill: wall_time = a * tokens + b.
    tokens, walls = _prefill_samples(directory)
    if not tokens:
        raise InputError(f"{directory}: no prefill profiling data points")
    obs = [((float(x),), w) for x, w in zip(tokens, walls) if w != 0.0]  # zero wall times are skipped
    coef, intercept = _fit(obs, 1, f"{directory}: prefill")
    if coef[0] < 0:
        raise InputError(
            f"{directory}: the prefill regression has a negative slope ({coef[0]!r} s/token); Dynamo rejects "
            "the fit (\"Failed to fit prefill regression from profiling data\")"
        )
    isl_values = [float(x) for x in tokens]
    prefill_x = np.linspace(min(isl_values), max(isl_values), resolution)
    prefill_y = np.array([_predict(coef, intercept, (x,)) * 1000.0 for x in prefill_x])

    # Decode: wall_time = c0 * batch + c1 * kv_tokens + b.
    batches, kvs, walls = _decode_samples(directory)
    if not kvs:
        raise InputError(f"{directory}: no decode profiling data points")
    obs = [((float(n), float(kv)), w) for n, kv, w in zip(batches, kvs, walls) if w != 0.0]
    coef, intercept = _fit(obs, 2, f"{directory}: decode")
    if coef[1] < 0:
        raise InputError(
            f"{directory}: the decode regression has a negative KV-token coefficient ({coef[1]!r}); Dynamo "
            "rejects the fit (\"Failed to fit decode regression from profiling data\")"
        )
    if coef[0] < -_RELAXABLE_NEG_TOLERANCE:  # batch size is a "relaxable" feature: clamp, keep intercept
        coef[0] = 0.0
    max_kv = max(float(kv) for kv in kvs)
    ctx_values = [float(kv) / max(1, n) for n, kv in zip(batches, kvs) if n > 0]
    max_ctx = max(ctx_values) if ctx_values else _DEFAULT_MAX_CTX
    decode_x = np.linspace(0, max_kv, resolution)
    decode_y = np.linspace(1, max_ctx, resolution)
    decode_z = np.zeros((resolution, resolution))
    for i, kv in enumerate(decode_x):
        for j, ctx in enumerate(decode_y):
            bs = max(1, kv / ctx) if ctx > 0 else 1
            decode_z[i, j] = _predict(coef, intercept, (bs, kv)) * 1000.0

    return {
        "prefill_isl": prefill_x,
        "prefill_ttft_ms": prefill_y,
        "decode_active_kv_tokens": decode_x,
        "decode_context_length": decode_y,
        "decode_itl": decode_z,
    }


def _read_raw(directory: Path, npz_rel: str, json_rel: str, keys: tuple[str, ...]) -> tuple[dict, Path]:
    npz_path, json_path = directory / npz_rel, directory / json_rel
    if npz_path.exists():
        _check_npz_magic(npz_path)
        try:
            with np.load(npz_path, allow_pickle=False) as data:
                missing = [k for k in keys if k not in data.files]
                if missing:
                    raise InputError(f"{npz_path}: missing key(s) {', '.join(missing)} (found: {', '.join(data.files)})")
                return {k: np.asarray(data[k]) for k in keys}, npz_path
        except InputError:
            raise
        except Exception as exc:
            raise InputError(f"{npz_path}: cannot read it as an NPZ archive ({exc})") from None
    if json_path.exists():
        try:
            with open(json_path) as f:
                data = json.load(f)
        except (OSError, ValueError) as exc:
            raise InputError(f"{json_path}: cannot read it as JSON ({exc})") from None
        if not isinstance(data, dict):
            raise InputError(f"{json_path}: must hold a JSON object with the keys {', '.join(keys)}")
        missing = [k for k in keys if k not in data]
        if missing:
            raise InputError(f"{json_path}: missing key(s) {', '.join(missing)}")
        try:
            return {k: np.asarray(data[k], dtype=np.float64) for k in keys}, json_path
        except (TypeError, ValueError) as exc:
            raise InputError(f"{json_path}: values must be numbers ({exc})") from None
    raise InputError(f"{directory}: profiling data not found at {npz_path} or {json_path}")


def _series(raw: dict, key: str, src: Path) -> np.ndarray:
    a = raw[key]
    if a.dtype.kind not in "iuf" or a.ndim != 1:
        raise InputError(f"{src}: {key} must be a 1-D numeric array (got dtype {a.dtype}, shape {a.shape})")
    if not np.all(np.isfinite(a)):
        raise InputError(f"{src}: {key} has NaN or infinite values")
    return a


def _prefill_samples(directory: Path) -> tuple[list[int], list[float]]:
    raw, src = _read_raw(directory, _PREFILL_NPZ, _PREFILL_JSON, ("prefill_isl", "prefill_ttft"))
    isl = _series(raw, "prefill_isl", src)
    ttft = _series(raw, "prefill_ttft", src)
    if isl.shape != ttft.shape:
        raise InputError(f"{src}: prefill_isl has {isl.shape[0]} values but prefill_ttft has {ttft.shape[0]}")
    # One sample per point: sum_prefill_tokens = int(isl) (truncates), wall time in seconds.
    return [int(v) for v in isl], [float(v) / 1000.0 for v in ttft]


def _decode_samples(directory: Path) -> tuple[list[int], list[int], list[float]]:
    keys = ("x_kv_usage", "y_context_length", "z_itl", "max_kv_tokens")
    raw, src = _read_raw(directory, _DECODE_NPZ, _DECODE_JSON, keys)
    usage = _series(raw, "x_kv_usage", src)
    ctx = _series(raw, "y_context_length", src)
    itl = _series(raw, "z_itl", src)
    if not (usage.shape == ctx.shape == itl.shape):
        raise InputError(
            f"{src}: x_kv_usage, y_context_length and z_itl must have the same length "
            f"(got {usage.shape[0]}, {ctx.shape[0]}, {itl.shape[0]})"
        )
    mk = raw["max_kv_tokens"]
    if mk.dtype.kind not in "iuf" or mk.size < 1 or mk.ndim > 1 or not np.all(np.isfinite(mk)):
        raise InputError(f"{src}: max_kv_tokens must be a number (or a 1-element array), got {mk!r}")
    max_kv_tokens = int(mk.reshape(-1)[0])  # Dynamo: int(data["max_kv_tokens"][0]) / int(json value)
    batches, kvs, walls = [], [], []
    for u, c, z in zip(usage, ctx, itl):
        kv = int(round(float(u) * max_kv_tokens))  # Python round: half to even
        n = max(1, int(round(kv / float(c)))) if c > 0 else 1
        batches.append(n)
        kvs.append(kv)
        walls.append(float(z) / 1000.0)
    return batches, kvs, walls


def _bucket_order(xs: list[tuple[float, ...]], per_axis: int) -> list[int]:
    """Order in which the planner's bucketed sample store returns its samples.

    Samples are filed into equal-width buckets over the running min/max of each axis; every time the
    bounds grow, all samples are re-filed in their current order. The final order (bucket creation
    order, then arrival order) fixes the summation order of the fit, hence its last bits.
    """
    ndim = len(xs[0]) if xs else 0
    lo = [math.inf] * ndim
    hi = [-math.inf] * ndim

    def key(v):
        k = []
        for a in range(ndim):
            if hi[a] <= lo[a]:
                k.append(0)
            else:
                idx = int((v[a] - lo[a]) / (hi[a] - lo[a]) * per_axis)
                k.append(max(0, min(idx, per_axis - 1)))
        return tuple(k)

    buckets: dict[tuple, list[int]] = {}
    for n, v in enumerate(xs):
        changed = False
        for a in range(ndim):
            if v[a] < lo[a]:
                lo[a] = v[a]
                changed = True
            if v[a] > hi[a]:
                hi[a] = v[a]
                changed = True
        if changed and n > 0:
            order = [i for b in buckets.values() for i in b]
            buckets = {}
            for i in order:
                buckets.setdefault(key(xs[i]), []).append(i)
        buckets.setdefault(key(v), []).append(n)
    return [i for b in buckets.values() for i in b]


def _fit(obs: list, ndim: int, what: str) -> tuple[np.ndarray, float]:
    """Ordinary least squares with intercept, as scikit-learn's LinearRegression computes it."""
    if not obs:
        raise InputError(f"{what}: every profiled wall time is 0; nothing to fit")
    per_axis = _BUCKETS if ndim == 1 else math.isqrt(_BUCKETS)
    order = _bucket_order([x for x, _ in obs], per_axis)
    X = np.array([obs[i][0] for i in order], dtype=np.float64).reshape(-1, ndim)
    y = np.array([obs[i][1] for i in order], dtype=np.float64)
    x_off = X.mean(axis=0)
    y_off = y.mean()
    coef = np.linalg.lstsq(X - x_off, y - y_off, rcond=None)[0]  # LAPACK gelsd, as scipy's lstsq
    intercept = float(y_off - x_off @ coef)
    return coef, intercept


def _predict(coef: np.ndarray, intercept: float, x: tuple) -> float:
    # One row at a time, as the converter calls model.predict([[...]]): (1, d) @ (d,) + b, then the
    # 1 us clamp. A vectorised matrix product rounds differently in the last bit.
    return max(_MIN_WALL_S, float((np.array([x], dtype=np.float64) @ coef + intercept)[0]))
