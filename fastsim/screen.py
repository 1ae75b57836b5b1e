"""What ``fastsim replay`` prints: a summary of a report that fits the terminal.

Dynamo's own table (``Report.format_table``, AIPerf's layout, about 140 columns, counts shown as
``1,000.00``) stays available for comparison; the command line prints this one instead:

* fastsim's title line (requests, workers, simulated time), then the latency distributions as
  rows of ``avg p50 p90 p99 max ...``; the columns that do not fit the width are left out, the
  least telling first (p95, p75, std, min), ``avg`` and ``p99`` never.
* then throughput, goodput (when an SLA was given: how many requests met it, with the bounds),
  GPU-hours, prefix-cache reuse and the simulator's wall time, one labelled line each.

The width is ``$COLUMNS`` when set, else the terminal's width capped at 100 (and 100 when stdout
is not a terminal). Counts are printed as integers, figures with thousands separators.
"""

from __future__ import annotations

import os
import shutil

__all__ = ["format_summary", "screen_width", "MAX_WIDTH"]

MAX_WIDTH = 100
_ROWS = (("TTFT (ms)", "ttft_ms"), ("TTST (ms)", "ttst_ms"), ("Request latency (ms)", "e2e_latency_ms"),
         ("Inter-token latency (ms)", "itl_ms"), ("Output tok/s per user", "output_token_throughput_per_user"))
# (column heading, summary statistic), in display order, and the order they are dropped in
_COLUMNS = (("avg", "mean"), ("min", "min"), ("p50", "median"), ("p75", "p75"), ("p90", "p90"),
            ("p95", "p95"), ("p99", "p99"), ("max", "max"), ("std", "std"))
_DROP_ORDER = ("p95", "p75", "std", "min", "p50", "max", "p90")


def screen_width() -> int:
    """``$COLUMNS`` if it is a positive integer, else the terminal's width, at most 100."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return min(shutil.get_terminal_size((MAX_WIDTH, 24)).columns, MAX_WIDTH)


def _num(v, digits=2):
    if v is None or v != v:
        return "-"
    return f"{v:,.{digits}f}"


def _count(v):
    return "-" if v is None else f"{int(v):,}"


def _table(summary, width):
    rows = [(label, suffix) for label, suffix in _ROWS if summary.get(f"mean_{suffix}") is not None]
    if not rows:
        return []
    label_w = max(len("Metric"), *(len(label) for label, _ in rows))
    cells = {head: [_num(summary.get(f"{stat}_{suffix}")) for _, suffix in rows] for head, stat in _COLUMNS}
    col_w = {head: max(len(head), *(len(c) for c in cells[head])) for head, _ in _COLUMNS}
    shown = [head for head, _ in _COLUMNS]
    drop = list(_DROP_ORDER)
    while drop and label_w + sum(col_w[h] + 2 for h in shown) > width:
        shown.remove(drop.pop(0))
    lines = ["Metric".ljust(label_w) + "".join(h.rjust(col_w[h] + 2) for h in shown)]
    lines.append("-" * len(lines[0]))
    for i, (label, _) in enumerate(rows):
        lines.append(label.ljust(label_w) + "".join(cells[h][i].rjust(col_w[h] + 2) for h in shown))
    return lines


def _wrap(label, text, width):
    """``label  text`` with continuation lines indented under the text, within ``width``."""
    import textwrap

    indent = " " * 16
    return textwrap.fill(text, width=max(width, 40), initial_indent=label.ljust(16), subsequent_indent=indent,
                         break_on_hyphens=False)


def format_summary(summary, *, sla=(None, None, None), workers=None, width=None) -> str:
    """The screen summary of a report dict (``Report.summary``). ``sla``: the (TTFT, ITL, E2E)
    bounds in ms that were given, named on the goodput line; ``workers``: the cluster for the
    title (a worker count, or text such as ``"2 prefill + 4 decode workers"``)."""
    width = screen_width() if width is None else width
    done, total = summary.get("completed_requests"), summary.get("num_requests")
    sim_s = (summary.get("duration_ms") or 0.0) / 1000.0
    if isinstance(workers, int):
        workers = f"{workers:,} worker{'s' if workers != 1 else ''}"
    who = f" on {workers}" if workers else ""
    out = [f"fastsim replay: {_count(done)} of {_count(total)} requests completed{who}, "
           f"{_num(sim_s, 1)} s simulated", ""]
    out += _table(summary, width)
    out.append("")
    out.append(_wrap("Throughput", f"{_num(summary.get('request_throughput_rps'))} requests/s, "
                     f"{_num(summary.get('output_throughput_tok_s'))} output tokens/s, "
                     f"{_num(summary.get('total_throughput_tok_s'))} tokens/s in all", width))
    if "goodput_completed_requests" in summary:
        bounds = [f"{name} <= {_num(v, 0) if float(v).is_integer() else _num(v)} ms"
                  for name, v in zip(("TTFT", "ITL", "E2E"), sla) if v is not None]
        good = summary.get("goodput_completed_requests")
        share = f" ({100.0 * good / done:.1f}%)" if done else ""
        out.append(_wrap("Goodput", f"{_count(good)} of {_count(done)} requests{share} met the SLA"
                         f"{' (' + ', '.join(bounds) + ')' if bounds else ''}: "
                         f"{_num(summary.get('goodput_request_throughput_rps'))} requests/s, "
                         f"{_num(summary.get('goodput_output_throughput_tok_s'))} output tokens/s", width))
    gpu_h = summary.get("gpu_hours")
    if gpu_h is not None:
        out.append(_wrap("GPU-hours", f"{gpu_h:,.4g}", width))
    reuse = summary.get("prefix_cache_reused_ratio")
    if reuse is not None:
        first = summary.get("first_admission_prefix_cache_reused_ratio")
        extra = f" ({100.0 * first:.1f}% at first admission)" if first is not None else ""
        out.append(_wrap("Prefix cache", f"{100.0 * reuse:.1f}% of prompt tokens reused{extra}", width))
    wall = summary.get("wall_time_ms")
    if wall is not None:
        speed = f" ({sim_s * 1000.0 / wall:,.0f}x real time)" if wall > 0 and sim_s > 0 else ""
        out.append(_wrap("Wall time", f"{_num(wall)} ms{speed}", width))
    version = summary.get("dynamo_version")
    if version:
        out.append(_wrap("Reproduces", f"Dynamo {version} (--dynamo-version)", width))
    return "\n".join(out)
