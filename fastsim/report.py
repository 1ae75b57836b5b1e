"""Report: Dynamo 1.4.2's replay summary, per-request records, JSON/JSONL files and AIPerf table.

``build_report(req, gaps, meta)`` turns the simulation's per-request arrays and pooled
inter-token-gap statistics into a :class:`Report` whose ``summary`` has exactly the keys (and
Python int/float types) of ``dynamo.replay``'s report JSON. Rules (spec notes 11, verified doc
Q12/X2, cluster doc C1b/C10, collector tests C18-C20; settled against Dynamo 1.4.2 by experiment):

* Only COMPLETED requests contribute. A zero-output completion counts in
  ``completed_requests``, the token totals, ``duration_ms`` and the rates, but gives no latency
  sample. ``duration_ms`` = max terminal time of the completed requests (0.0 if none).
* TTFT, TTST, TPOT (per request), E2E: exact mean/min/max, population std and nearest-rank
  percentiles (``kernels.stats.nearest_rank``). TTST/TPOT need >= 2 output tokens. Each latency is
  clamped at >= 0 as Dynamo does.
* ITL and output-token-throughput-per-user (``1000/gap`` for gap > 0) are pooled over every gap:
  exact mean/min/max/std from the running sums, percentiles from the DDSketch histogram
  (``kernels.stats.dd_percentile_nb``). ``max_itl_ms`` is the exact max.
* Rates divide by ``max(duration_ms/1000, 1e-9)``; ``processed_*`` use the real wall time.
* Worker-seconds: single path (1 worker, dp 1) -> ``max(duration_ms/1000, 1e-9)``; multi path and
  disagg -> the loop's integrated values from ``meta``. ``gpu_hours`` = Σ ws·gpus / 3600.
* Goodput keys only when an SLA is set: a completed request is good iff every SET bound holds:
  ttft <=, e2e <=, mean ITL ``(e2e - ttft)/(osl - 1)`` <= (skipped when osl <= 1). A zero-output
  completion has no TTFT/ITL, so it is good only under an e2e-only SLA, with
  e2e = terminal - arrival (checked on 1.4.2: itl-only and ttft SLAs reject it).
* JSONL: requests with a terminal status only (in-flight ones are left out), sorted by
  (arrival, uuid); uuid = ``uuid_for_row(row)`` (``row + 1`` for the synthetic single-turn
  workloads of 1.6.1 mode, as 1.6.1 numbers them), so that order is (arrival, row).
"""

from __future__ import annotations

import itertools
import json
import math
from datetime import datetime
from pathlib import Path

import numpy as np

from fastsim.kernels.codes import OUTCOME_COMPLETED, OUTCOME_IN_FLIGHT, OUTCOME_NOT_ARRIVED
from fastsim.kernels.stats import (PERCENTILES, dd_insert_many_nb, dd_new_hist, dd_percentile_nb,
                                   nearest_rank)

STATUS_NAMES = ("pending", "in_flight", "completed", "rejected", "failed")

_STAT_NAMES = ("mean", "min", "max", "median", "p75", "p90", "p95", "p99", "std")
_DIST_PREFIXES = (("ttft", "_ms"), ("ttst", "_ms"), ("tpot", "_ms"), ("itl", "_ms"),
                  ("e2e_latency", "_ms"), ("output_token_throughput_per_user", ""))
GOODPUT_KEYS = ("goodput_completed_requests", "goodput_request_throughput_rps",
                "goodput_output_throughput_tok_s")


def _dist_keys(prefix, suffix):
    return [f"{s}_{prefix}{suffix}" for s in _STAT_NAMES]


# Every key of Dynamo 1.4.2's report, in its serialisation order (the file itself is key-sorted).
# The ITL block yields max_itl_ms, which Dynamo then writes a second time: one key.
SUMMARY_KEYS = (
    ["num_requests", "completed_requests", "total_input_tokens", "total_output_tokens",
     "duration_ms", "wall_time_ms", "request_throughput_rps", "input_throughput_tok_s",
     "output_throughput_tok_s", "total_throughput_tok_s", "prefill_worker_seconds",
     "decode_worker_seconds", "prefill_gpus_per_worker", "decode_gpus_per_worker", "gpu_hours",
     "processed_tokens", "processed_tokens_per_s", "processed_output_tokens_per_s",
     "prefix_cache_reused_ratio", "first_admission_prefix_cache_reused_ratio"]
    + [k for p, s in _DIST_PREFIXES for k in _dist_keys(p, s)]
)

# Per-request JSONL fields in Dynamo 1.4.2's order, with their kind: "f" float (NaN = null),
# "i" int (always set), "n" int (-1 = null), "z" always null, "s" the terminal status string,
# "S" a string (None = null; all null without the column).
JSONL_FIELDS = (
    ("session_id", "S"), ("turn_index", "n"), ("uuid", "u"), ("arrival_time_ms", "f"),
    ("first_admit_ms", "f"), ("terminal_time_ms", "f"), ("first_token_ms", "f"),
    ("last_token_ms", "f"), ("ttft_ms", "f"), ("ttst_ms", "f"), ("e2e_latency_ms", "f"),
    ("itl_ms", "f"), ("input_length", "i"), ("requested_output_length", "i"),
    ("output_length", "i"), ("reused_input_tokens", "i"), ("prefill_worker_idx", "n"),
    ("decode_worker_idx", "n"), ("prefill_admit_ms", "f"), ("source_held_ms", "f"),
    ("destination_reserved_ms", "f"), ("destination_activated_ms", "f"), ("decode_admit_ms", "f"),
    ("source_released_ms", "f"), ("decode_reused_input_tokens", "n"),
    ("prefill_route_overlap_tokens", "n"), ("decode_route_overlap_tokens", "n"),
    ("terminal_status", "s"),
)
# Dynamo 1.6.1's fields: 1.4.2's with the dispatch time after the arrival and, before the terminal
# status, the routing and admission histories and their counts ("h": JSON text built per record,
# see fastsim/history.py, as are the session names 1.6.1 writes for session replays).
JSONL_FIELDS_161 = (
    (("session_id", "h"), ("turn_index", "h")) + JSONL_FIELDS[2:4] + (("dispatched_at_ms", "z"),)
    + JSONL_FIELDS[4:-1]
    + (("routing_history", "h"), ("admission_history", "h"), ("admission_count", "h"),
       ("readmission_count", "h"), ("pressure_record_ordinals", "h"))
    + JSONL_FIELDS[-1:]
)
# Dynamo 1.6.1's records of a run with a host KV tier: the first admission's reuse split by tier
# (GPU pool, host tier) after the reuse (fastsim/kv_tiers.py; -1 = null: never admitted).
TIER_FIELDS = ("first_admission_g1_reused_input_tokens", "first_admission_host_reused_input_tokens")
_AT_REUSE = [name for name, _ in JSONL_FIELDS_161].index("reused_input_tokens") + 1
JSONL_FIELDS_161_TIER = (JSONL_FIELDS_161[:_AT_REUSE] + tuple((name, "n") for name in TIER_FIELDS)
                         + JSONL_FIELDS_161[_AT_REUSE:])
# Dynamo 1.6.1's records of an agentic trace: the request's identities first ("a": JSON text per
# record, fastsim/traces/agentic_report.py), the dispatch time ("d": the arrival) after the arrival.
JSONL_FIELDS_AGENTIC = (
    (("request_id", "a"), ("play_id", "a"), ("session_id", "a"), ("turn_index", "z"), ("agentic", "a"))
    + JSONL_FIELDS[2:4] + (("dispatched_at_ms", "d"),) + JSONL_FIELDS_161[5:]
)
# Optional per-request inputs copied straight into the JSONL (session labels, disaggregated mode).
_OPTIONAL_FIELDS = ("session_id", "turn_index", "prefill_worker_idx", "prefill_admit_ms",
                    "source_held_ms",
                    "destination_reserved_ms", "destination_activated_ms", "decode_admit_ms",
                    "source_released_ms", "decode_reused_input_tokens",
                    "prefill_route_overlap_tokens", "decode_route_overlap_tokens")

TITLE = "NVIDIA AIPerf | LLM Metrics"
STAT_COLUMNS = ("avg", "min", "max", "p99", "p90", "p75", "std")
_TABLE_ROWS = (("Time to First Token (ms)", "ttft_ms"), ("Time to Second Token (ms)", "ttst_ms"),
               ("Request Latency (ms)", "e2e_latency_ms"), ("Inter Token Latency (ms)", "itl_ms"),
               ("Token Gap (ms)", "token_gap_ms"),
               ("Output Token Throughput Per User (tokens/sec/user)",
                "output_token_throughput_per_user"))

# Two lowercase hex digits of every byte value, as one little-endian uint16 (for _uuids_for_rows).
_HEX2 = np.array([ord(a) | (ord(b) << 8) for a in "0123456789abcdef" for b in "0123456789abcdef"],
                 dtype=np.uint16)


def uuid_for_row(row):
    """Deterministic uuid string of workload row ``row`` (``str(uuid.UUID(int=row))``)."""
    h = f"{int(row):032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _uuids_for_rows(rows, quoted=False):
    """Vectorised ``uuid_for_row`` for rows < 2**64 -> list of str (``quoted``: in double quotes,
    as JSON strings)."""
    rows = np.asarray(rows, dtype=np.uint64)
    n = rows.shape[0]
    ch = _HEX2[rows.astype(">u8").view(np.uint8).reshape(n, 8)].view(np.uint8).reshape(n, 16)
    q = 1 if quoted else 0
    out = np.empty((n, 36 + 2 * q), dtype=np.uint8)
    if q:
        out[:, 0] = out[:, -1] = ord('"')
    out[:, q:q + 19] = np.frombuffer(b"00000000-0000-0000-", dtype=np.uint8)
    out[:, q + 19:q + 23] = ch[:, :4]
    out[:, q + 23] = ord("-")
    out[:, q + 24:q + 36] = ch[:, 4:]
    return list(map(bytes.decode, out.view(f"S{36 + 2 * q}").ravel().tolist()))


# ----------------------------------------------------------------------------- statistics


def _exact_dist(values):
    """mean/min/max/median/p75/p90/p95/p99/std of ``values`` as Dynamo computes them (all 0.0 if
    empty): nearest-rank percentiles via one partial sort, population std (two-pass)."""
    n = int(values.shape[0])
    if n == 0:
        return [0.0] * 9
    ranks = [nearest_rank(n, p) for p in PERCENTILES]
    part = np.partition(values, sorted(set(ranks)))
    mean = float(np.sum(values)) / n
    d = values - mean
    std = math.sqrt(float(np.sum(d * d)) / n)
    return [mean, float(values.min()), float(values.max())] + [float(part[k]) for k in ranks] + [std]


def _sketch_dist(gaps, name):
    """The same 9 statistics for a pooled gap metric (``itl`` or ``otpu``) of ``gaps``."""
    n = int(gaps.get(f"{name}_count", 0) or 0)
    if n <= 0:
        return [0.0] * 9
    shift = float(gaps.get(f"{name}_shift", 0.0) or 0.0)  # optional: sums of (v - shift)
    s = float(gaps[f"{name}_sum"]) / n
    var = float(gaps[f"{name}_sumsq"]) / n - s * s
    vmin, vmax = float(gaps[f"{name}_min"]), float(gaps[f"{name}_max"])
    hist = np.ascontiguousarray(gaps[f"{name}_hist"], dtype=np.int64)
    pct = [float(dd_percentile_nb(hist, n, p, vmin)) for p in PERCENTILES]
    welford = gaps.get(f"{name}_welford")
    if welford is not None:  # Dynamo's running mean and variance, in its order (kernels/timelines.py)
        wn, mean, m2 = welford
        return [mean, vmin, vmax] + pct + [math.sqrt(m2 / wn)]
    return [shift + s, vmin, vmax] + pct + [math.sqrt(max(var, 0.0))]


def make_gap_stats(itl_gaps_ms):
    """Build the ``gaps`` dict of ``build_report`` from an array of every pooled gap (ms).

    A reference/testing helper: the event loop accumulates the same quantities incrementally.
    The sums are taken about ``shift`` = the first value, as the loop should do too: plain
    ``sumsq/n - mean**2`` cancels catastrophically when std << mean (1M gaps of 5.79 ms +- 1e-3:
    std off by 2e-8 relative unshifted, 2e-16 shifted).
    """
    g = np.asarray(itl_gaps_ms, dtype=np.float64)
    out = {}
    for name, v in (("itl", g), ("otpu", 1000.0 / g[g > 0])):
        hist = dd_new_hist()
        shift = float(v[0]) if v.shape[0] else 0.0
        d = v - shift
        if v.shape[0]:
            dd_insert_many_nb(hist, v)
        out.update({f"{name}_count": int(v.shape[0]), f"{name}_sum": float(np.sum(d)),
                    f"{name}_sumsq": float(np.sum(d * d)), f"{name}_shift": shift,
                    f"{name}_min": float(v.min()) if v.shape[0] else 0.0,
                    f"{name}_max": float(v.max()) if v.shape[0] else 0.0,
                    f"{name}_hist": hist})
    return out


def _derived(req):
    """Per-request derived timings over ALL rows (NaN where undefined), clamped at >= 0."""
    arr = np.asarray(req["arrival_ms"], dtype=np.float64)
    ft = np.asarray(req["first_token_ms"], dtype=np.float64)
    st = np.asarray(req["second_token_ms"], dtype=np.float64)
    lt = np.asarray(req["last_token_ms"], dtype=np.float64)
    out_len = np.asarray(req["output_length"], dtype=np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        ttft = np.where(out_len >= 1, np.maximum(ft - arr, 0.0), np.nan)
        e2e = np.where(out_len >= 1, np.maximum(lt - arr, 0.0), np.nan)
        ttst = np.where(out_len >= 2, np.maximum(st - ft, 0.0), np.nan)
        tpot = np.where(out_len >= 2, np.maximum(lt - ft, 0.0) / (out_len - 1).astype(np.float64),
                        np.nan)
    return {"ttft": ttft, "e2e": e2e, "ttst": ttst, "tpot": tpot}


def _goodput(meta, comp, out_len, der, arr, term):
    """(good count, good output tokens) among completed requests, or None without an SLA."""
    b_ttft, b_itl, b_e2e = (meta.get("sla_ttft_ms"), meta.get("sla_itl_ms"), meta.get("sla_e2e_ms"))
    if b_ttft is None and b_itl is None and b_e2e is None:
        return None
    ttft, e2e = der["ttft"][comp], der["e2e"][comp]
    osl = out_len[comp]
    zero = osl == 0
    # Zero-output completions: no TTFT/ITL sample; e2e measured to the terminal time.
    e2e = np.where(zero, np.maximum(term[comp] - arr[comp], 0.0), e2e)
    good = np.ones(osl.shape[0], dtype=bool)
    if b_e2e is not None:
        good &= e2e <= float(b_e2e)
    if b_ttft is not None:
        good &= ~zero & (ttft <= float(b_ttft))
    if b_itl is not None:
        with np.errstate(invalid="ignore", divide="ignore"):
            avg = (e2e - ttft) / (osl - 1).astype(np.float64)
        good &= ~zero & ((osl <= 1) | (avg <= float(b_itl)))
    return int(np.count_nonzero(good)), int(osl[good].sum())


def build_report(req, gaps, meta):
    """Build the :class:`Report` of one simulation (see the module docstring for the rules).

    ``req``: dict of per-request numpy arrays (index = workload row): ``arrival_ms,
    first_admit_ms, first_token_ms, second_token_ms, last_token_ms, terminal_ms`` (float64, NaN =
    never), ``status`` (0 pending/never arrived, 1 in flight, 2 completed, 3 rejected, 4 failed),
    ``input_length, requested_output_length, output_length, reused_tokens, first_reused_tokens,
    worker_idx`` (int64, worker_idx -1 = null) and optionally the disaggregated fields of
    ``_OPTIONAL_FIELDS`` (NaN / -1 = null).
    ``gaps``: pooled gap statistics ``{itl,otpu}_{count,sum,sumsq,min,max,hist}``, plus optional
    ``{itl,otpu}_shift`` when the sums are of ``v - shift`` (recommended: see ``make_gap_stats``);
    missing keys / count 0 -> all-zero statistics.
    ``meta``: ``num_workers, single_path, decode_worker_seconds, prefill_worker_seconds,
    prefill_gpus_per_worker, decode_gpus_per_worker, wall_time_ms, sla_ttft_ms, sla_itl_ms,
    sla_e2e_ms``, and optionally ``dynamo_version`` (default ``"1.4.2"``; 1.6.1's per-request
    records need the history inputs of ``fastsim/history.py`` in ``req``), ``dp`` (ranks per
    worker) and ``disaggregated``.
    """
    status = np.asarray(req["status"]).astype(np.int8, copy=False)
    comp = status == OUTCOME_COMPLETED
    arr = np.asarray(req["arrival_ms"], dtype=np.float64)
    term = np.asarray(req["terminal_ms"], dtype=np.float64)
    out_len = np.asarray(req["output_length"], dtype=np.int64)
    isl = np.asarray(req["input_length"], dtype=np.int64)
    der = _derived(req)

    completed = int(np.count_nonzero(comp))
    total_in = int(isl[comp].sum())
    total_out = int(out_len[comp].sum())
    # disaggregated runs: the ratio takes the max reuse over both sides' admissions, while the
    # per-request field reports the prefill side (cluster doc C6)
    reused = int(np.asarray(req.get("ratio_reused_tokens", req["reused_tokens"]), dtype=np.int64)[comp].sum())
    first_reused = int(np.asarray(req["first_reused_tokens"], dtype=np.int64)[comp].sum())
    duration_ms = float(np.max(term[comp])) if completed else 0.0
    duration_s = max(duration_ms / 1000.0, 1e-9)
    wall = float(meta.get("wall_time_ms") or 0.0)

    if meta.get("single_path", False):
        # (its clock may run past the last token to a host tier's last transfer: decision 0354)
        decode_ws = max(duration_s, float(meta.get("single_path_tail_s") or 0.0))
    else:
        decode_ws = float(meta.get("decode_worker_seconds") or 0.0)
    prefill_ws = float(meta.get("prefill_worker_seconds") or 0.0)
    pg = int(meta.get("prefill_gpus_per_worker") or 0)
    dg = int(meta.get("decode_gpus_per_worker") or 0)

    s = {
        "num_requests": int(np.count_nonzero(status != OUTCOME_NOT_ARRIVED)),
        "completed_requests": completed,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "duration_ms": duration_ms,
        "wall_time_ms": wall,
        "request_throughput_rps": completed / duration_s,
        "input_throughput_tok_s": total_in / duration_s,
        "output_throughput_tok_s": total_out / duration_s,
        "total_throughput_tok_s": (total_in + total_out) / duration_s,
        "prefill_worker_seconds": prefill_ws,
        "decode_worker_seconds": decode_ws,
        "prefill_gpus_per_worker": pg,
        "decode_gpus_per_worker": dg,
        "gpu_hours": (prefill_ws * pg + decode_ws * dg) / 3600.0,
    }
    gp = _goodput(meta, comp, out_len, der, arr, term)
    if gp is not None:
        s["goodput_completed_requests"] = gp[0]
        s["goodput_request_throughput_rps"] = gp[0] / duration_s
        s["goodput_output_throughput_tok_s"] = gp[1] / duration_s
    processed = total_in + total_out
    s["processed_tokens"] = processed
    s["processed_tokens_per_s"] = processed / wall * 1000.0 if wall > 0 else 0.0
    s["processed_output_tokens_per_s"] = total_out / wall * 1000.0 if wall > 0 else 0.0
    s["prefix_cache_reused_ratio"] = reused / total_in if total_in else 0.0
    s["first_admission_prefix_cache_reused_ratio"] = first_reused / total_in if total_in else 0.0

    for prefix, key in (("ttft", "ttft"), ("ttst", "ttst"), ("tpot", "tpot")):
        v = der[key][comp]
        s.update(zip(_dist_keys(prefix, "_ms"), _exact_dist(v[~np.isnan(v)])))
    s.update(zip(_dist_keys("itl", "_ms"), _sketch_dist(gaps, "itl")))
    v = der["e2e"][comp]
    s.update(zip(_dist_keys("e2e_latency", "_ms"), _exact_dist(v[~np.isnan(v)])))
    s.update(zip(_dist_keys("output_token_throughput_per_user", ""), _sketch_dist(gaps, "otpu")))
    version = meta.get("dynamo_version")
    if version == "1.6.1":
        s.update(_fields_161(meta, der, comp))
    if version is not None:
        s["dynamo_version"] = version
    return Report(s, req, der, dynamo_version=version, dp=int(meta.get("dp") or 1),
                  disaggregated=bool(meta.get("disaggregated", False)))


def _fields_161(meta, der, comp):
    """The summary fields Dynamo 1.6.1 added (none removed): prompt tokens computed, counting
    recomputation after preemption; the sample counts of three distributions; the KV eviction
    policy; power figures, null without a power model."""
    return {
        "committed_prefill_tokens": int(meta.get("committed_prefill_tokens") or 0),
        "kv_eviction_policy": "lru",
        "num_ttft_samples": int(np.count_nonzero(~np.isnan(der["ttft"][comp]))),
        "num_tpot_samples": int(np.count_nonzero(~np.isnan(der["tpot"][comp]))),
        "num_e2e_latency_samples": int(np.count_nonzero(~np.isnan(der["e2e"][comp]))),
        "power_w": None,
        "power_coverage": None,
    }


# ----------------------------------------------------------------------------- output


def _fmt_float(x):
    """Float text as Rust's serde_json (ryu) writes it: shortest round-trip digits, positional
    for 1e-5 <= |x| < 1e16 (``0.00005``; Python says ``5e-05``), else ``1.5e16`` / ``1e-7``."""
    t = repr(float(x))
    if "e" not in t:
        return t
    sign = "-" if t.startswith("-") else ""
    mant, exp = t.lstrip("-").split("e")
    ip, _, fp = mant.partition(".")
    digits = (ip + fp).lstrip("0") or "0"
    kk = int(exp) + len(ip)  # digits before the decimal point
    if -5 < kk <= 0:
        return f"{sign}0.{'0' * -kk}{digits.rstrip('0')}"
    d = digits.rstrip("0") or "0"
    return f"{sign}{d[0]}{'.' + d[1:] if len(d) > 1 else ''}e{kk - 1}"


def _float_tokens(v):
    """JSON texts of a float column (None if every value is null/NaN)."""
    null = np.isnan(v)
    if null.all():
        return None
    out = np.array(list(map(repr, v.tolist())), dtype=object)
    a = np.abs(v)
    # Python's repr switches to exponent form outside [1e-4, 1e16); serde_json spells it differently.
    with np.errstate(invalid="ignore"):
        odd = ~null & (a != 0) & ((a < 1e-4) | (a >= 1e16))  # where repr uses an exponent
    if odd.any():
        out[odd] = list(map(_fmt_float, v[odd].tolist()))
    out[null] = "null"
    return out.tolist()


def _int_tokens(v, nullable):
    """JSON texts of an int column, -1 as null when ``nullable`` (None if every value is null)."""
    null = v < 0 if nullable else None
    if null is not None and null.all():
        return None
    if null is None or not null.any():
        return list(map(str, v.tolist()))
    out = np.array(list(map(str, v.tolist())), dtype=object)
    out[null] = "null"
    return out.tolist()


def _format_value(value):
    """AIPerf cell text: ``N/A`` for None, ``f"{v:,.2f}"`` for numbers."""
    if value is None:
        return "N/A"
    if isinstance(value, (int, float)):
        return f"{value:,.2f}"
    return str(value)


def format_report_table(report):
    """The AIPerf-style table (with footer lines) Dynamo prints for a report dict."""
    rows = []
    for label, suffix in _TABLE_ROWS:
        if f"mean_{suffix}" not in report:
            continue
        rows.append([label] + [_format_value(report.get(f"{c}_{suffix}"))
                               for c in ("mean", "min", "max", "p99", "p90", "p75", "std")])
    na = ["N/A"] * (len(STAT_COLUMNS) - 1)
    rows.append(["Output Token Throughput (tokens/sec)",
                 _format_value(report.get("output_throughput_tok_s"))] + na)
    rows.append(["Request Throughput (requests/sec)",
                 _format_value(report.get("request_throughput_rps"))] + na)
    rows.append(["Request Count (requests)",
                 _format_value(report.get("completed_requests", report.get("num_requests")))] + na)

    headers = ["Metric", *STAT_COLUMNS]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def sep(left, mid, right):
        return left + mid.join("━" * (w + 2) for w in widths) + right

    def line(cells):
        padded = [f" {c.ljust(widths[0])} " if i == 0 else f" {c.rjust(widths[i])} "
                  for i, c in enumerate(cells)]
        return "┃" + "┃".join(padded) + "┃"

    out = [TITLE, sep("┏", "┳", "┓"), line(headers), sep("┡", "╇", "┩")]
    out += [line(r) for r in rows]
    out.append(sep("└", "┴", "┘"))
    for label, key in (("Wall Time (ms)", "wall_time_ms"),
                       ("Prefix Cache Reused Ratio", "prefix_cache_reused_ratio"),
                       ("First Admission Prefix Cache Reused Ratio",
                        "first_admission_prefix_cache_reused_ratio")):
        v = report.get(key)
        if isinstance(v, (int, float)):
            out.append(f"{label}: {_format_value(v)}")
    return "\n".join(out)


def _timestamped(directory):
    return Path(directory) / f"fastsim_replay_report_{datetime.now().strftime('%Y%m%d_%H%M%S')}.json"


class Report:
    """Result of one simulation: ``summary`` (Dynamo's report dict), ``requests`` (DataFrame),
    ``to_json``, ``to_jsonl`` and ``format_table``."""

    def __init__(self, summary, req, derived, dynamo_version=None, dp=1, disaggregated=False):
        self.summary = summary
        # the release reproduced (its per-request record format too)
        self.dynamo_version = dynamo_version if dynamo_version is not None else summary.get("dynamo_version")
        self._req = req
        self._der = derived
        self._dp = dp
        self._disagg = disaggregated
        self._history = None
        self._df = None
        self._frames = {"fleet": None, "workers": None}

    def _frame(self, name):
        f = self._frames[name]
        if callable(f):  # built on first use (pandas is imported only when a frame is asked for)
            f = self._frames[name] = f()
        return f

    @property
    def fleet(self):
        """pandas DataFrame, one row per worker ever created: its final state and passes run."""
        return self._frame("fleet")

    @fleet.setter
    def fleet(self, value):
        self._frames["fleet"] = value

    @property
    def workers(self):
        """pandas DataFrame of per-worker telemetry samples (None unless a sampling interval was
        given)."""
        return self._frame("workers")

    @workers.setter
    def workers(self, value):
        self._frames["workers"] = value

    def __repr__(self):
        s = self.summary
        return (f"Report(num_requests={s['num_requests']}, completed={s['completed_requests']}, "
                f"duration_ms={s['duration_ms']:.3f}, mean_ttft_ms={s['mean_ttft_ms']:.3f}, "
                f"mean_itl_ms={s['mean_itl_ms']:.3f})")

    def __getitem__(self, key):
        return self.summary[key]

    # -- per-request columns (all rows, in row order)
    def _columns(self):
        """JSONL field -> (numpy column, kind) over all rows (NaN / -1 = null)."""
        r, d = self._req, self._der
        n = np.asarray(r["status"]).shape[0]
        cols = {
            "arrival_time_ms": r["arrival_ms"], "first_admit_ms": r["first_admit_ms"],
            "terminal_time_ms": r["terminal_ms"], "ttft_ms": d["ttft"], "ttst_ms": d["ttst"],
            "e2e_latency_ms": d["e2e"], "itl_ms": d["tpot"],
            "input_length": r["input_length"],
            "requested_output_length": r["requested_output_length"],
            "output_length": r["output_length"], "reused_input_tokens": r["reused_tokens"],
            "decode_worker_idx": r["worker_idx"],
        }
        out_len = np.asarray(r["output_length"], dtype=np.int64)
        cols["first_token_ms"] = np.where(out_len >= 1, r["first_token_ms"], np.nan)
        cols["last_token_ms"] = np.where(out_len >= 1, r["last_token_ms"], np.nan)
        for f in _OPTIONAL_FIELDS:
            if f in r:
                cols[f] = r[f]
        res = {name: np.asarray(r[name], dtype=np.int64) for name in TIER_FIELDS if name in r}
        for name, kind in JSONL_FIELDS:
            if kind == "f":
                res[name] = np.asarray(cols.get(name, np.full(n, np.nan)), dtype=np.float64)
            elif kind in ("i", "n"):
                res[name] = np.asarray(cols.get(name, np.full(n, -1)), dtype=np.int64)
            elif kind == "S":
                res[name] = np.asarray(cols[name], dtype=object) if name in cols else None
        return res

    @property
    def requests(self):
        """pandas DataFrame, one row per workload row (index ``row``): the JSONL fields (nullable
        ``Int64`` for optional ints, NaN for missing times) plus ``status`` (readable)."""
        if self._df is None:
            import pandas as pd

            cols = self._columns()
            status = np.asarray(self._req["status"]).astype(np.int64)
            n = status.shape[0]
            names = np.array(STATUS_NAMES, dtype=object)
            term = names[status].copy()
            term[status <= OUTCOME_IN_FLIGHT] = None
            data = {}
            for name, kind in JSONL_FIELDS:
                if kind == "z" or (kind == "S" and cols[name] is None):
                    data[name] = pd.Series([None] * n, dtype=object)
                elif kind == "S":
                    data[name] = pd.Series(cols[name], dtype=object)
                elif kind == "u":
                    base = int(self._req.get("uuid_base", 0))
                    data[name] = pd.Series(_uuids_for_rows(np.arange(n) + base), dtype=object)
                elif kind in ("f", "i"):
                    data[name] = cols[name]
                elif kind == "n":
                    v = cols[name]
                    data[name] = pd.arrays.IntegerArray(v, v < 0)
                else:  # object dtype keeps None (pandas would infer a string dtype with NaN)
                    data[name] = pd.Series(term, dtype=object)
            data["status"] = pd.Categorical.from_codes(status, STATUS_NAMES)
            df = pd.DataFrame(data)
            df.index.name = "row"
            self._df = df
        return self._df

    def jsonl_lines(self, chunk=100_000):
        """Yield Dynamo-style JSONL lines (no newline): terminal requests sorted by (arrival, row)."""
        for text in self._jsonl_texts(chunk):
            yield from text.split("\n")[:-1]

    def _jsonl_texts(self, chunk):
        """The JSONL text (each line with its newline), ``chunk`` records at a time (see
        ``jsonl_lines``).

        Built column-wise, with no Python-level step per request: each field's values are
        formatted by one C-level ``map`` over the chunk (a field that is null throughout the chunk
        joins the constant text between values), and the lines are assembled by one ``str.join``
        over the columns interleaved with that constant text.
        """
        cols = self._columns()
        status = np.asarray(self._req["status"]).astype(np.int64)
        rows = np.nonzero(status >= OUTCOME_COMPLETED)[0]
        agentic = self._req.get("agentic_texts")
        if agentic is None:
            rows = rows[np.lexsort((rows, cols["arrival_time_ms"][rows]))]
        # (an agentic trace's records come in request order, as Dynamo writes them)
        fields, texts = JSONL_FIELDS, None
        if self.dynamo_version == "1.6.1":
            from fastsim.history import History

            fields = JSONL_FIELDS_161 if agentic is None else JSONL_FIELDS_AGENTIC
            if TIER_FIELDS[0] in cols and agentic is None:
                fields = JSONL_FIELDS_161_TIER
            if self._history is None:
                self._history = History(self._req, self._dp, self._disagg)
        uuid_base = int(self._req.get("uuid_base", 0))
        names = np.array([f'"{x}"' for x in STATUS_NAMES], dtype=object)
        for start in range(0, rows.shape[0], chunk):
            idx = rows[start:start + chunk]
            if fields is not JSONL_FIELDS:
                texts = self._history.texts(idx)
            heads, values, const = [], [], "{"  # heads[i] precedes values[i] on every line
            for i, (name, kind) in enumerate(fields):
                const += ("," if i else "") + f'"{name}":'
                if kind == "z" or (kind == "S" and cols[name] is None):
                    vals = None
                elif kind == "h":  # 1.6.1's histories and names (fastsim/history.py)
                    vals = texts[name]
                    if isinstance(vals, str):  # the same text on every record of the chunk
                        const += vals
                        continue
                elif kind == "a":  # an agentic request's identities
                    vals = [agentic[name][r] for r in idx.tolist()]
                elif kind == "d":  # the dispatch: the arrival
                    vals = _float_tokens(cols["arrival_time_ms"][idx])
                elif kind == "S":  # session labels: strings or null
                    vals = ["null" if x is None else json.dumps(x) for x in cols[name][idx].tolist()]
                elif kind == "u":
                    vals = _uuids_for_rows(idx + uuid_base, quoted=True)
                elif kind == "s":
                    vals = names[status[idx]].tolist()
                elif kind == "f":
                    vals = _float_tokens(cols[name][idx])
                else:
                    vals = _int_tokens(cols[name][idx], kind == "n")
                if vals is None:
                    const += "null"
                else:
                    heads.append(const)
                    values.append(vals)
                    const = ""
            m = idx.shape[0]
            columns = []
            for head, vals in zip(heads, values):
                columns += [itertools.repeat(head, m), vals]
            columns.append(itertools.repeat(const + "}\n", m))
            yield "".join(itertools.chain.from_iterable(zip(*columns)))

    def to_jsonl(self, path):
        """Write the per-request JSONL (Dynamo's field order and nulls); returns the Path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            for text in self._jsonl_texts(100_000):
                f.write(text)
        return path

    def to_json(self, path=None):
        """Write the summary as Dynamo does (indent 2, sorted keys, trailing newline).

        ``path`` None -> ``./fastsim_replay_report_<timestamp>.json``; an existing directory ->
        that file name inside it. Returns the Path written.
        """
        p = _timestamped(Path.cwd()) if path is None else Path(path)
        if p.exists() and p.is_dir():
            p = _timestamped(p)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(self.summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        return p

    def format_table(self):
        """The AIPerf-style table Dynamo prints after a replay (title, table, footer lines)."""
        return format_report_table(self.summary)
