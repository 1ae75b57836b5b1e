"""What ``fastsim plan --out DIR`` writes: ``plan.json``, ``results.parquet``, PNG plots and a
self-contained ``report.html`` (inline CSS and base64 images, no script, nothing fetched).

Plots (matplotlib's object-oriented API on the Agg canvas, as :mod:`fastsim.plots`):

* ``cost_vs_<metric>.png`` for p99 TTFT, the ITL metric (the SLO's, else p99 ITL) and every other
  latency metric an SLO bounds: cost per hour against the metric over every replayed
  configuration, those meeting every SLO in colour, the cost-latency frontier (no configuration
  is both cheaper and faster), the SLO bound as a vertical line and the answer as a star.
* ``fewest_workers.png``: the fewest workers meeting the SLOs for each setting of the other axes
  (bars; a cross where no evaluated count meets them).
"""

from __future__ import annotations

import base64
import html
import json
import math
from pathlib import Path

import numpy as np

from fastsim.plots import _figure, metric_label

__all__ = ["write_outputs", "cost_plot", "fewest_workers_plot", "render_html"]

_GOOD, _BAD, _FRONTIER, _BEST = "#1f77b4", "#b0b0b0", "#d62728", "#ff7f0e"
_MAX_BARS = 60
_MAX_TABLE = 200


def _frontier_mask(cost, metric):
    """Rows no other row beats on both cost and the metric (both minimised; NaN rows excluded)."""
    ok = np.isfinite(cost) & np.isfinite(metric)
    mask = np.zeros(cost.shape[0], dtype=bool)
    idx = np.nonzero(ok)[0]
    best = math.inf
    for i in idx[np.lexsort((cost[idx], metric[idx]))]:  # by metric, then cost
        if cost[i] < best:
            mask[i] = True
            best = cost[i]
    return mask


def _plot_metrics(result):
    cols = set(result.results.columns)
    slo_metrics = [s.column for s in result.spec.slos if s.column != "goodput_fraction"]
    itl = next((m for m in slo_metrics if m.endswith("_itl_ms")), "p99_itl_ms")
    ttft = "p99_ttft_ms"
    return [m for m in dict.fromkeys([ttft, itl, *slo_metrics]) if m in cols]


def cost_plot(result, metric, path=None):
    """Cost per hour against ``metric`` over the replayed configurations (see the module docstring)."""
    df = result.results[result.results["status"] == "ok"]
    cost = df["cost_per_hour_usd"].to_numpy(dtype=np.float64)
    x = df[metric].to_numpy(dtype=np.float64, na_value=np.nan)
    meets = df["meets_slo"].to_numpy(dtype=bool)
    fig = _figure(figsize=(7.0, 4.8))
    ax = fig.subplots()
    ax.scatter(x[~meets], cost[~meets], s=16, color=_BAD, label="misses an SLO", zorder=2)
    ax.scatter(x[meets], cost[meets], s=20, color=_GOOD, label="meets every SLO", zorder=3)
    front = _frontier_mask(cost, x)
    idx = np.nonzero(front)[0]
    idx = idx[np.argsort(x[idx], kind="stable")]
    if idx.shape[0]:
        ax.step(x[idx], cost[idx], where="post", color=_FRONTIER, linewidth=1.4, zorder=4,
                label="frontier (nothing cheaper and faster)")
        ax.plot(x[idx], cost[idx], "o", color=_FRONTIER, markersize=4, zorder=4)
    slo = next((s for s in result.spec.slos if s.column == metric), None)
    if slo is not None:
        ax.axvline(slo.bound, color="k", linestyle="--", linewidth=1, label=f"SLO {slo.describe()}")
    if result.best is not None:
        b = result.results[result.results["config_id"] == result.best["config_id"]].iloc[0]
        ax.plot([b[metric]], [b["cost_per_hour_usd"]], "*", color=_BEST, markersize=17, markeredgecolor="k",
                zorder=5, label="answer: cheapest meeting every SLO")
    finite = x[np.isfinite(x) & (x > 0)]
    if finite.shape[0] and finite.max() / finite.min() > 50.0:
        ax.set_xscale("log")
    ax.set_xlabel(metric_label(metric))
    ax.set_ylabel("cost (USD per hour)")
    ax.set_title(f"Cost against {metric_label(metric)} ({int(np.isfinite(x).sum())} configurations)", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="x-small")
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


def fewest_workers_plot(result, path=None):
    """Bars of the fewest workers meeting the SLOs per setting of the other axes."""
    fw = result.fewest_workers.sort_values("group").head(_MAX_BARS)
    n = len(fw)
    fig = _figure(figsize=(7.5, max(2.4, 0.8 + 0.28 * n)))
    ax = fig.subplots()
    y = np.arange(n)
    vals = fw["fewest_workers"].to_numpy(dtype=np.float64, na_value=np.nan)
    tried = fw["max_workers_tried"].to_numpy(dtype=np.float64, na_value=np.nan)
    best_group = None
    if result.best is not None:
        best_group = int(result.results.loc[result.results["config_id"] == result.best["config_id"], "group"].iloc[0])
    colors = [_BEST if g == best_group else _GOOD for g in fw["group"]]
    ax.barh(y, np.where(np.isfinite(vals), vals, 0.0), color=colors, height=0.7)
    miss = ~np.isfinite(vals)
    if miss.any():
        ax.plot(tried[miss], y[miss], "x", color=_FRONTIER, markersize=8, label="none up to this count")
        ax.legend(fontsize="x-small", loc="lower right")
    for yi, v in zip(y, vals):
        if np.isfinite(v):
            ax.annotate(f"{int(v)}", (v, yi), xytext=(3, 0), textcoords="offset points", va="center", fontsize=7)
    ax.set_yticks(y, [str(s) for s in fw["label"]], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("fewest workers meeting every SLO")
    more = len(result.fewest_workers) - n
    ax.set_title("Fewest workers by setting of the other axes" + (f" (first {n}; {more} more)" if more > 0 else ""),
                 fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


# ----------------------------------------------------------------------------- HTML

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1100px;
color:#1d1d1f;padding:0 16px;line-height:1.4}
h1{font-size:1.6em;margin-bottom:4px} h2{font-size:1.2em;margin-top:28px;border-bottom:1px solid #ddd}
.answer{padding:14px 18px;border-radius:8px;margin:16px 0;color:#fff;font-size:1.05em}
.answer.ok{background:#146c2e} .answer.none{background:#a1260d}
.answer b{font-size:1.15em} .answer .cost{font-size:1.5em;font-weight:700;margin:6px 0}
table{border-collapse:collapse;font-size:.82em;margin:8px 0}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:right} th{background:#f3f3f3}
td.t,th.t{text-align:left} tr.best td{background:#fff4d6} .met{color:#146c2e} .miss{color:#a1260d}
pre{background:#f6f6f6;padding:10px;overflow:auto;font-size:.8em}
img{max-width:100%;border:1px solid #eee;margin:6px 0}
.muted{color:#666;font-size:.85em} .wide{overflow-x:auto}
"""


def _e(v):
    return html.escape("" if v is None else str(v))


def _num(v, digits=4):
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        return f"{float(v):,.0f}" if abs(v) >= 10 ** digits else f"{float(v):,.{digits}g}"
    return _e(v)


def _table(df, columns, best_id=None, limit=_MAX_TABLE):
    cols = [c for c in columns if c in df.columns]
    head = "".join(f"<th class='t'>{_e(c)}</th>" if df[c].dtype == object else f"<th>{_e(c)}</th>" for c in cols)
    rows = []
    for _, r in df.head(limit).iterrows():
        cls = " class='best'" if best_id is not None and "config_id" in r and r["config_id"] == best_id else ""
        cells = "".join(f"<td class='t'>{_e(r[c])}</td>" if df[c].dtype == object and not isinstance(r[c], float)
                        else f"<td>{_num(r[c])}</td>" for c in cols)
        rows.append(f"<tr{cls}>{cells}</tr>")
    more = f"<p class='muted'>{len(df) - limit} more rows in results.parquet</p>" if len(df) > limit else ""
    return f"<div class='wide'><table><tr>{head}</tr>{''.join(rows)}</table></div>{more}"


def _answer_html(result):
    if result.best is None:
        inf = result.infeasible
        closest = inf.get("closest")
        extra = (f"<div>Closest: {_e(closest['label'])} ({_num(closest['cost_per_hour_usd'])} USD/h): "
                 f"{_e(closest['failures'])}</div>") if closest else ""
        return (f"<div class='answer none' id='answer'><b>No configuration meets the SLOs.</b>"
                f"<div>{_e(inf['reason'])}</div>{extra}</div>")
    b = result.best
    pools = "; ".join(f"{p['workers']} {p['role']} worker{'s' if p['workers'] != 1 else ''} x "
                      f"{p['gpus_per_worker']} {p['gpu']}" for p in b["pools"])
    return (f"<div class='answer ok' id='answer'><b>Answer: {_e(b['label'])}</b>"
            f"<div class='cost'>{b['cost_per_hour_usd']:,.2f} USD per hour &middot; "
            f"{_num(b['cost_per_million_output_tokens_usd'])} USD per million output tokens</div>"
            f"<div>{_e(pools)} ({b['gpus']} GPUs); meets every SLO in its own replay.</div></div>")


def _slo_table(result):
    b = result.best or (result.infeasible or {}).get("closest")
    if not b:
        return ""
    rows = "".join(
        f"<tr><td class='t'>{_e(s['name'])}</td><td>{_num(s['bound'])}</td><td>{_num(s['value'])}</td>"
        f"<td>{_num(s['margin'])}</td><td>{_num(None if s['margin_fraction'] is None else 100 * s['margin_fraction'], 3)}%</td>"
        f"<td class='{'met' if s['met'] else 'miss'}'>{'met' if s['met'] else 'missed'}</td></tr>" for s in b["slo"])
    lat = "".join(f"<tr><td class='t'>{_e(k)}</td><td>{_num(v)}</td></tr>" for k, v in b["latencies_ms"].items())
    which = "the answer" if result.best else "the closest configuration"
    return (f"<h2>SLOs of {which}</h2><table><tr><th class='t'>SLO</th><th>bound</th><th>value</th>"
            f"<th>margin</th><th>margin %</th><th class='t'></th></tr>{rows}</table>"
            f"<table><tr><th class='t'>latency</th><th>ms</th></tr>{lat}"
            f"<tr><td class='t'>output throughput (tok/s)</td><td>{_num(b['output_throughput_tok_s'])}</td></tr>"
            + (f"<tr><td class='t'>goodput fraction</td><td>{_num(b['goodput_fraction'])}</td></tr>"
               if b["goodput_fraction"] is not None else "") + "</table>")


def render_html(result, images):
    """The report as one HTML string; ``images``: ``[(title, png bytes)]``, inlined as base64."""
    sp, s = result.spec, result.search
    metrics = [c for c in dict.fromkeys(x.column for x in sp.slos)]
    axis_cols = [c for c, _ in sp.axes]
    best_id = result.best["config_id"] if result.best else None
    searched = (f"{s['method']} search over {s['configurations_in_grid']:,} configurations in {s['groups']:,} groups: "
                f"{s['evaluated']:,} evaluated ({s['replays_run']:,} replays run, {s['reused_from_cache']:,} reused) "
                f"in <b id='search-time'>{s['search_seconds']:.1f} s</b> wall "
                f"({s['simulation_seconds']:.1f} s of simulation, executor {_e(s['executor'])}"
                f"{', ' + str(s['rounds']) + ' rounds' if s['method'] == 'bisect' else ''}).")
    mono = result.monotonicity
    mono_html = ("<p>No violation among the evaluated points: within every group, a larger worker count met "
                 "every SLO a smaller one met.</p>" if mono.empty else
                 f"<p class='miss'>{len(mono)} violation(s): a larger worker count missed an SLO that a smaller one "
                 f"met{' (bisection may then miss a smaller answer)' if s['method'] == 'bisect' else ''}.</p>"
                 + _table(mono, ["label", "slo", "met_at_workers", "value_met", "missed_at_workers", "value_missed"]))
    cand_cols = ["label", "fewest_workers", "gpus", "cost_per_hour_usd", "cost_per_million_output_tokens_usd",
                 *metrics, "evaluated", "reason"]
    pareto_cols = ["config_id", *axis_cols, "num_workers", "num_prefill_workers", "num_decode_workers", "gpus",
                   "cost_per_hour_usd", "cost_per_million_output_tokens_usd", *metrics, "meets_slo"]
    imgs = "".join(f"<h3>{_e(t)}</h3><img alt='{_e(t)}' src='data:image/png;base64,"
                   f"{base64.b64encode(png).decode('ascii')}'>" for t, png in images)
    slo_list = ", ".join(_e(x.describe()) for x in sp.slos)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>fastsim plan: {_e(sp.name)}</title>
<style>{_CSS}</style></head><body>
<h1>Capacity plan: {_e(sp.name)}</h1>
<div class="muted">{_e(sp.description)}</div>
<div class="muted">SLOs: {slo_list}. {searched}</div>
{_answer_html(result)}
{_slo_table(result)}
<h2>Frontier</h2>
<p class="muted">Configurations no other replayed configuration beats on cost and every SLO metric at once
({len(result.pareto)}), cheapest first.</p>
{_table(result.pareto, pareto_cols, best_id)}
<h2>Plots</h2>
{imgs}
<h2>Candidates: fewest workers per setting</h2>
{_table(result.fewest_workers, cand_cols)}
<h2>Monotonicity in the worker count</h2>
{mono_html}
<h2>Search</h2>
<p>{searched}</p>
<h2>Spec</h2>
<pre>{_e(sp.text)}</pre>
<p class="muted">fastsim plan; every figure is a replay of the workload on fastsim's model of Dynamo's mocker.</p>
</body></html>
"""


def write_outputs(result, out_dir: Path):
    """Write every output into ``out_dir``; returns ``{name: path}``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {}
    plan_json = out_dir / "plan.json"
    plan_json.write_text(json.dumps(_jsonable(result.to_dict()), indent=2, allow_nan=False) + "\n",
                         encoding="utf-8")
    files["plan.json"] = plan_json
    parquet = out_dir / "results.parquet"
    result.results.to_parquet(parquet, index=False)
    files["results.parquet"] = parquet
    images = []
    if (result.results["status"] == "ok").any():
        for metric in _plot_metrics(result):
            path = out_dir / f"cost_vs_{metric}.png"
            cost_plot(result, metric, path)
            images.append((f"Cost against {metric_label(metric)}", path.read_bytes()))
            files[path.name] = path
    if len(result.fewest_workers):
        path = out_dir / "fewest_workers.png"
        fewest_workers_plot(result, path)
        images.append(("Fewest workers meeting the SLOs", path.read_bytes()))
        files[path.name] = path
    report = out_dir / "report.html"
    report.write_text(render_html(result, images), encoding="utf-8")
    files["report.html"] = report
    return files


def _jsonable(v):
    """Plain JSON values: numpy scalars as Python ones, NaN/inf/NA as null (plan.json is strict JSON)."""
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v) if math.isfinite(v) else None
    if v is None or isinstance(v, str):
        return v
    import pandas as pd

    if v is pd.NA:
        return None
    raise TypeError(f"{type(v).__name__} in plan.json")
