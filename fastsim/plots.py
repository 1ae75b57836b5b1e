"""Plots of replay and sweep results (matplotlib; extra ``fastsim-llm[plots]``).

Figures are built on matplotlib's object-oriented API with the Agg canvas: nothing touches
``pyplot``'s global state or the user's backend, no display is needed, and every function returns
the :class:`matplotlib.figure.Figure` (and writes it to ``path`` when given).

* :func:`latency_cdfs`: CDFs of TTFT, ITL per request and end-to-end latency for one or several
  reports (a :class:`~fastsim.report.Report`, its ``requests`` DataFrame, or a per-request JSONL
  file as ``--report-jsonl`` writes it). Only completed requests with a value count.
* :func:`frontier`: throughput against latency over a sweep's ``ok`` rows, Pareto set marked
  (:func:`pareto_mask`: no other row has lower-or-equal latency and higher-or-equal throughput,
  one of them strictly).
* :func:`worker_timelines`: per-worker running / waiting requests and KV blocks in use over time,
  from a telemetry DataFrame with columns ``time_ms, worker, running, waiting, kv_blocks_used``.
* :func:`plot_files`: what ``fastsim plot FILE... --out DIR`` does: picks the plots by file content.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from fastsim.errors import FastsimError, InputError

__all__ = ["latency_cdfs", "frontier", "pareto_mask", "worker_timelines", "plot_files", "metric_label",
           "config_labels", "TELEMETRY_COLUMNS"]

TELEMETRY_COLUMNS = ("time_ms", "worker", "running", "waiting", "kv_blocks_used")
_CDF_METRICS = (("ttft_ms", "TTFT (ms)"), ("itl_ms", "ITL per request (ms)"),
                ("e2e_latency_ms", "E2E latency (ms)"))
_NAMES = {"ttft": "TTFT", "ttst": "TTST", "tpot": "TPOT", "itl": "ITL", "e2e_latency": "E2E latency"}
_STATS = ("mean", "min", "max", "median", "p75", "p90", "p95", "p99", "std")
_LABELS = {
    "output_throughput_tok_s": "output throughput (tok/s)",
    "input_throughput_tok_s": "input throughput (tok/s)",
    "total_throughput_tok_s": "total throughput (tok/s)",
    "request_throughput_rps": "request throughput (req/s)",
    "goodput_request_throughput_rps": "goodput (req/s)",
    "goodput_output_throughput_tok_s": "goodput output throughput (tok/s)",
    "gpu_hours": "GPU-hours",
}
_MAX_CDF_POINTS = 4000
_MAX_LINES = 16


def _figure(**kw):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise FastsimError("plots need matplotlib: pip install 'fastsim-llm[plots]'") from None
    fig = Figure(layout="constrained", **kw)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path):
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
    return fig


def metric_label(key: str) -> str:
    """Axis label of a summary metric: ``p99_ttft_ms`` -> ``p99 TTFT (ms)``."""
    if key in _LABELS:
        return _LABELS[key]
    stat, _, rest = key.partition("_")
    if stat in _STATS:
        if rest.endswith("_ms") and rest[:-3] in _NAMES:
            return f"{stat} {_NAMES[rest[:-3]]} (ms)"
        if rest == "output_token_throughput_per_user":
            return f"{stat} output tok/s per user"
    return key


# ----------------------------------------------------------------------------- latency CDFs


def _requests_frame(obj):
    """A per-request DataFrame from a Report, a DataFrame or a JSONL path."""
    import pandas as pd

    if hasattr(obj, "requests") and not isinstance(obj, pd.DataFrame):
        return obj.requests
    if isinstance(obj, pd.DataFrame):
        return obj
    path = Path(obj)
    if path.is_dir():
        return pd.read_parquet(path)
    if path.suffix.lower() == ".parquet":
        return pd.read_parquet(path)
    if path.suffix.lower() == ".csv":
        return pd.read_csv(path)
    try:
        return pd.read_json(path, lines=True)
    except ValueError as exc:
        raise InputError(f"{path}: not a per-request JSONL file ({exc})") from None


def _completed(df, column):
    """Values of ``column`` over completed requests (NaN dropped), as float64."""
    if column not in df:
        raise InputError(f"per-request table has no '{column}' column (columns: {', '.join(map(str, df.columns))})")
    v = df[column]
    for status in ("terminal_status", "status"):
        if status in df:
            v = v[(df[status].astype(str) == "completed").to_numpy()]
            break
    v = np.asarray(v, dtype=np.float64)
    return v[np.isfinite(v)]


def _ecdf(values):
    """(x, y) of the empirical CDF, at most ``_MAX_CDF_POINTS`` points (quantiles beyond that)."""
    v = np.sort(values)
    n = v.shape[0]
    if n > _MAX_CDF_POINTS:
        y = np.linspace(1.0 / n, 1.0, _MAX_CDF_POINTS)
        return v[np.minimum(np.ceil(y * n).astype(np.int64) - 1, n - 1)], y
    return v, np.arange(1, n + 1) / n


def latency_cdfs(reports, labels=None, *, by=None, log_x=None, path=None):
    """CDFs of TTFT, ITL per request (mean inter-token gap of each request) and E2E latency.

    ``reports``: one item or a list / dict (label -> item) of :class:`fastsim.report.Report`,
    per-request DataFrames or JSONL/parquet paths; ``labels`` names list items (default: the file
    stem or ``report i``). ``by``: a column (e.g. ``config_id`` of a sweep's requests table) whose
    groups are separate curves. ``log_x`` None: log scale when a metric spans > 2 decades.
    Returns the Figure (one panel per metric); writes it to ``path`` if given.
    """
    if isinstance(reports, dict):
        items = list(reports.items())
    else:
        seq = reports if isinstance(reports, (list, tuple)) else [reports]
        names = list(labels) if labels is not None else [
            Path(r).stem if isinstance(r, (str, Path)) else f"report {i}" for i, r in enumerate(seq)]
        if len(names) != len(seq):
            raise InputError(f"latency_cdfs: {len(names)} labels for {len(seq)} reports")
        items = list(zip(names, seq))
    frames = []
    for name, item in items:
        df = _requests_frame(item)
        if by is not None:
            if by not in df:
                raise InputError(f"latency_cdfs: no column '{by}' to group by")
            frames += [(f"{by}={k}", g) for k, g in df.groupby(by, sort=True)]
        else:
            frames.append((str(name), df))
    if not frames:
        raise InputError("latency_cdfs: nothing to plot")
    fig = _figure(figsize=(4.2 * len(_CDF_METRICS), 3.6))
    axes = fig.subplots(1, len(_CDF_METRICS), squeeze=False)[0]
    for ax, (col, label) in zip(axes, _CDF_METRICS):
        lo, hi = math.inf, 0.0
        for name, df in frames[:_MAX_LINES]:
            v = _completed(df, col)
            if v.shape[0]:
                x, y = _ecdf(v)
                ax.step(x, y, where="post", label=name, linewidth=1.3)
                pos = v[v > 0]
                lo, hi = (min(lo, pos.min()), max(hi, pos.max())) if pos.shape[0] else (lo, hi)
        if (log_x if log_x is not None else (hi > 0 and lo < math.inf and hi / lo > 100.0)):
            ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of requests")
        ax.set_ylim(0.0, 1.02)
        ax.grid(True, alpha=0.3)
    if len(frames) > 1:
        axes[0].legend(fontsize="small", title=f"first {_MAX_LINES}" if len(frames) > _MAX_LINES else None)
    fig.suptitle("Latency CDFs (completed requests)")
    return _save(fig, path)


# ----------------------------------------------------------------------------- sweep frontier


def pareto_mask(x, y):
    """Boolean mask of the Pareto set minimising ``x`` and maximising ``y`` (NaN rows: False)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    ok = np.isfinite(x) & np.isfinite(y)
    mask = np.zeros(x.shape[0], dtype=bool)
    idx = np.nonzero(ok)[0]
    order = idx[np.lexsort((-y[idx], x[idx]))]  # by x ascending, then y descending
    best = -math.inf
    for i in order:
        if y[i] > best:
            mask[i] = True
            best = y[i]
    # equal points: every copy of a Pareto point is in the set
    for i in idx[~mask[idx]]:
        mask[i] = bool(np.any(mask & (x == x[i]) & (y == y[i])))
    return mask


def _suggest(name, df):
    """``; did you mean 'p99_ttft_ms'?`` among the numeric columns of ``df`` (or a few of them)."""
    import difflib

    numeric = [str(c) for c in df.columns if str(df[c].dtype) not in ("object", "string", "bool")
               and c not in ("config_id",) and c not in _varied_columns(df)]
    close = difflib.get_close_matches(name, numeric, n=3, cutoff=0.5)
    if close:
        return "; did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
    return f" (metrics: {', '.join(numeric[:12])}{', ...' if len(numeric) > 12 else ''})"


def _varied_columns(df):
    cols = list(df.columns)
    return cols[1:cols.index("status")] if cols and cols[0] == "config_id" and "status" in cols else []


def frontier(results, x="p99_ttft_ms", y="output_throughput_tok_s", *, per_gpu=True, annotate=True, path=None):
    """Throughput (``y``) against latency (``x``) over a sweep's ``ok`` rows, the Pareto set marked.

    ``results``: the DataFrame :func:`fastsim.sweep.sweep` returns, or a ``.parquet``/``.csv`` path.
    ``per_gpu``: divide ``y`` (a rate) by the GPUs in use, i.e. ``y * duration / GPU-seconds``
    (``gpu_hours * 3600``), so that configurations of different sizes compare. Pareto points are
    annotated with their varied parameters when ``annotate``. Returns the Figure.
    """
    import pandas as pd

    if not isinstance(results, pd.DataFrame):
        from fastsim.sweep import read_results

        results = read_results(results)
    df = results[results["status"] == "ok"] if "status" in results else results
    for col in (x, y) + (("duration_ms", "gpu_hours") if per_gpu else ()):
        if col not in df:
            raise InputError(f"frontier: the results have no '{col}' column{_suggest(col, df)}")
    xv = df[x].to_numpy(dtype=np.float64, na_value=np.nan)
    yv = df[y].to_numpy(dtype=np.float64, na_value=np.nan)
    ylabel = metric_label(y)
    if per_gpu:
        gpu_s = df["gpu_hours"].to_numpy(dtype=np.float64, na_value=np.nan) * 3600.0
        with np.errstate(divide="ignore", invalid="ignore"):
            yv = np.where(gpu_s > 0, yv * df["duration_ms"].to_numpy(dtype=np.float64) / 1000.0 / gpu_s, np.nan)
        ylabel = ylabel.replace(" (", " per GPU (", 1) if " (" in ylabel else ylabel + " per GPU"
    mask = pareto_mask(xv, yv)
    fig = _figure(figsize=(7.0, 5.4))
    ax = fig.subplots()
    ax.scatter(xv[~mask], yv[~mask], s=18, color="0.65", label="configurations")
    idx = np.nonzero(mask)[0]
    idx = idx[np.lexsort((-yv[idx], xv[idx]))]
    ax.plot(xv[idx], yv[idx], "-o", color="C3", markersize=6, label="Pareto set")
    if annotate and idx.shape[0]:
        varied = [c for c in _varied_columns(df) if c not in ("repeat", "seed") and df[c].nunique(dropna=False) > 1]
        lines, seen, points = [], set(), []
        for k, i in enumerate(idx):
            if (xv[i], yv[i]) in seen:
                continue
            seen.add((xv[i], yv[i]))
            points.append((xv[i], yv[i]))
            params = ", ".join(f"{c.split('.')[-1]}={df[c].iloc[i]}" for c in varied)
            lines.append(f"{len(lines) + 1}: {params or 'config ' + str(df.index[i])}")
        from matplotlib.lines import Line2D

        if len(lines) > 12:
            lines = lines[:12] + [f"... {len(lines) - 12} more Pareto points"]
        fig.legend([Line2D([], [], linestyle="none")] * len(lines), lines, loc="outside lower left",
                   fontsize=7, handlelength=0, handletextpad=0, frameon=False,
                   title="Pareto set", title_fontsize=8, alignment="left")
    for values, set_scale in ((xv, ax.set_xscale), (yv, ax.set_yscale)):
        if _spans_decades(values):
            set_scale("log")
    ax.set_xlabel(metric_label(x))
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    if annotate and idx.shape[0]:
        _place_labels(fig, ax, points)
    ax.set_title(f"Throughput vs latency ({int(np.isfinite(xv).sum())} configurations)")
    return _save(fig, path)


def _spans_decades(values):
    """Positive finite values whose largest is more than 100 times the smallest (log axis)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v) & (v > 0)]
    return bool(v.shape[0]) and v.max() / v.min() > 100.0


def _place_labels(fig, ax, points, size=8):
    """Number the Pareto points 1, 2, ... next to them, each label moved to the first of a few
    offsets around its point where it overlaps no label placed before (in display space)."""
    fig.canvas.draw()  # the final layout and scales: display coordinates are known
    offsets = [(5, -11), (5, 4), (-12, 4), (-12, -11), (5, 14), (5, -21), (-12, 14), (-12, -21),
               (16, -4), (-22, -4)]
    placed = []
    renderer = fig.canvas.get_renderer()
    for n, (px, py) in enumerate(points, start=1):
        chosen = None
        for dx, dy in offsets:
            text = ax.annotate(str(n), (px, py), textcoords="offset points", xytext=(dx, dy), fontsize=size,
                               color="C3")
            text.set_in_layout(False)
            box = text.get_window_extent(renderer).padded(1.5)  # (a margin: a later layout rounds)
            if not any(box.overlaps(b) for b in placed):
                chosen = (text, box)
                break
            text.remove()
        if chosen is None:  # crowded everywhere: the first offset, and the legend still lists it
            text = ax.annotate(str(n), (px, py), textcoords="offset points", xytext=offsets[0], fontsize=size,
                               color="C3")
            text.set_in_layout(False)
            chosen = (text, text.get_window_extent(renderer))
        placed.append(chosen[1])
    return placed


# ----------------------------------------------------------------------------- worker timelines


def worker_timelines(telemetry, *, kv_capacity_blocks=None, path=None):
    """Per-worker queue depth (running, waiting) and KV blocks in use over time.

    ``telemetry``: a DataFrame with columns ``time_ms, worker, running, waiting, kv_blocks_used``
    (one row per sample; each worker's value holds until its next sample). With at most 16 workers
    every worker gets a line; with more, the panels show the mean over workers and the min-max
    band. ``kv_capacity_blocks`` plots KV use as a fraction of capacity. Returns the Figure.
    """
    import pandas as pd

    if not isinstance(telemetry, pd.DataFrame):
        telemetry = _requests_frame(telemetry)
    missing = [c for c in TELEMETRY_COLUMNS if c not in telemetry]
    if missing:
        raise InputError(f"worker_timelines: telemetry lacks column(s) {', '.join(missing)} "
                         f"(needs {', '.join(TELEMETRY_COLUMNS)})")
    if telemetry.empty:
        raise InputError("worker_timelines: the telemetry table is empty")
    panels = [("running", "running requests"), ("waiting", "waiting requests (queue depth)"),
              ("kv_blocks_used", "KV blocks used")]
    if kv_capacity_blocks:
        panels[2] = ("kv_blocks_used", "KV cache usage (fraction)")
    fig = _figure(figsize=(8.0, 7.2))
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    workers = sorted(telemetry["worker"].unique())
    for ax, (col, label) in zip(axes, panels):
        wide = telemetry.pivot_table(index="time_ms", columns="worker", values=col, aggfunc="last").sort_index()
        # a worker's value holds until its next sample, and it has none after it retired (or
        # before it started): fill forward only within its own span of samples
        wide = wide.ffill().where(wide.bfill().notna())
        if kv_capacity_blocks and col == "kv_blocks_used":
            wide = wide / float(kv_capacity_blocks)
        t = wide.index.to_numpy(dtype=np.float64) / 1000.0
        if len(workers) <= _MAX_LINES:
            for w in workers:
                ax.step(t, wide[w].to_numpy(dtype=np.float64), where="post", linewidth=1.0, label=f"worker {w}")
        else:
            ax.fill_between(t, wide.min(axis=1), wide.max(axis=1), step="post", alpha=0.3, label="min-max")
            ax.step(t, wide.mean(axis=1), where="post", linewidth=1.2, label=f"mean of {len(workers)} workers")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel("time (s)")
    axes[0].legend(fontsize="x-small", ncol=min(len(workers), 4) if len(workers) <= _MAX_LINES else 2)
    fig.suptitle("Per-worker timelines")
    return _save(fig, path)


# ----------------------------------------------------------------------------- files


def _kind(df):
    cols = set(df.columns)
    if {"config_id", "status"} <= cols and "mean_ttft_ms" in cols:
        return "sweep"
    if set(TELEMETRY_COLUMNS) <= cols:
        return "telemetry"
    if {"ttft_ms", "e2e_latency_ms"} <= cols:
        return "requests"
    return None


def config_labels(results):
    """``{config_id: "num_workers=2, max_num_seqs=32"}``: each configuration of a sweep named by
    the values of the parameters that vary (the last part of a dotted name)."""
    varied = [c for c in _varied_columns(results) if results[c].nunique(dropna=False) > 1]
    labels = {}
    for _, row in results.iterrows():
        text = ", ".join(f"{c.split('.')[-1]}={row[c]}" for c in varied)
        labels[int(row["config_id"])] = text or f"config {int(row['config_id'])}"
    return labels


def _by_configuration(requests, results):
    """The per-request table of a sweep split by configuration, keyed by :func:`config_labels`."""
    labels = config_labels(results)
    return {labels.get(int(cid), f"config {int(cid)}"): g for cid, g in requests.groupby("config_id", sort=True)}


def plot_files(paths, out_dir, *, x="p99_ttft_ms", y="output_throughput_tok_s", per_gpu=True):
    """Write PNGs for result files into ``out_dir``; returns the paths written.

    Per-request files (``.jsonl`` as ``--report-jsonl`` writes, or tables with ``ttft_ms``) ->
    ``latency_cdf.png`` (all of them overlaid; a table with ``config_id`` -> one curve per
    configuration); sweep results (``.parquet``/``.csv`` of ``fastsim sweep``) ->
    ``<stem>_frontier.png``, and when the sweep kept its per-request tables (``--keep-requests``:
    ``<file>.requests/``) ``<stem>_latency_cdf.png`` with one curve per configuration, labelled by
    its parameter values; telemetry tables -> ``<stem>_timelines.png``. A report JSON holds only
    the summary: it is refused with a hint to pass the per-request JSONL.
    """
    import pandas as pd

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written, cdf = [], {}
    for p in map(Path, paths):
        if not p.exists():
            raise InputError(f"{p}: no such file or directory")
        suffix = p.suffix.lower()
        if suffix == ".json":
            try:
                head = json.loads(p.read_text(encoding="utf-8"))
            except ValueError:
                head = None
            hint = " (a replay report JSON)" if isinstance(head, dict) and "mean_ttft_ms" in head else ""
            raise InputError(f"{p}{hint}: holds no per-request data to plot; pass the per-request JSONL "
                             "(fastsim replay --report-jsonl FILE) or a sweep results file")
        if suffix in (".parquet", ".csv"):
            from fastsim.sweep import read_results

            df = read_results(p)
        elif p.is_dir():
            df = pd.read_parquet(p)
        else:
            df = _requests_frame(p)
        kind = _kind(df)
        stem = p.name.split(".")[0] or "plot"
        if kind == "sweep":
            written.append(out / f"{stem}_frontier.png")
            frontier(df, x=x, y=y, per_gpu=per_gpu, path=written[-1])
            kept = p.with_name(p.name + ".requests")  # the sweep's --keep-requests dataset
            if kept.is_dir() and any(kept.glob("*.parquet")):
                written.append(out / f"{stem}_latency_cdf.png")
                latency_cdfs(_by_configuration(pd.read_parquet(kept), df), path=written[-1])
        elif kind == "requests" and "config_id" in df and p.name.endswith(".requests") and p.is_dir():
            results = p.with_name(p.name[: -len(".requests")])
            if results.exists():
                from fastsim.sweep import read_results

                written.append(out / f"{stem}_latency_cdf.png")
                latency_cdfs(_by_configuration(df, read_results(results)), path=written[-1])
            else:
                cdf[stem if stem not in cdf else str(p)] = df
        elif kind == "telemetry":
            written.append(out / f"{stem}_timelines.png")
            worker_timelines(df, path=written[-1])
        elif kind == "requests":
            cdf[stem if stem not in cdf else str(p)] = df
        else:
            raise InputError(f"{p}: not a per-request table, sweep results or telemetry "
                             f"(columns: {', '.join(map(str, list(df.columns)[:12]))})")
    if cdf:
        by = "config_id" if len(cdf) == 1 and "config_id" in next(iter(cdf.values())) else None
        written.append(out / "latency_cdf.png")
        latency_cdfs(cdf, by=by, path=written[-1])
    return written
