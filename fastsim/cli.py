"""Command line: ``fastsim replay ...`` takes the flags of ``python -m dynamo.replay`` (1.4.2) and
the Dynamo 1.6 replay API's options; ``fastsim predict`` takes AISimulate's config file.

Same flag names, defaults and mutual-exclusion rules. Output differs from Dynamo's on purpose:
the report JSON is written only when ``--report-json`` is given (an existing directory gets
``fastsim_replay_report_YYYYmmdd_HHMMSS.json`` inside; Dynamo always writes that file into the
working directory), and the screen shows fastsim's summary (:mod:`fastsim.screen`: fits the
terminal, goodput and GPU-hours), not AIPerf's table; progress goes to stderr for runs longer
than 2 s (:mod:`fastsim.progress`). Flags for features
fastsim does not model yet are rejected with an error naming the flag (exit status 2), never
ignored. Any :class:`~fastsim.errors.FastsimError` prints its message on stderr, without a
traceback, and exits with status 2. Subcommands are argparse subparsers: ``replay``, ``predict``
(:mod:`fastsim.predict`), ``sweep`` (:mod:`fastsim.sweep`), ``plot`` (:mod:`fastsim.plots`) and ``plan`` (:mod:`fastsim.plan`).

Dynamo 1.6 options (the flags of its 1.4.2-style runner): ``--dynamo-version`` picks the release
reproduced (default 1.6.1); ``--coverage-json`` and ``--quiet`` are honoured; ``--execution-model``
is accepted (it names the target model of an agentic trace and changes nothing for a Mooncake or
Azure trace, as in Dynamo); ``--kv-event-lag-ms`` is honoured with kv_router (a Dynamo 1.6.1 option);
``--agentic-lanes`` and ``--weka-nested-timestamp-basis`` are honoured with the trace formats that
have them; ``--telemetry-jsonl`` and ``--ais-perf-config`` are refused as not supported yet. Used
where Dynamo itself refuses them (a lag with round robin, lanes or a timestamp basis with a format
that has none) these flags get Dynamo's error.

Deviation: Dynamo reads ``--router-policy-config``'s default from ``$DYN_ROUTER_POLICY_CONFIG``;
fastsim has no router policies and does not read that variable.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import signal
import sys
import textwrap
import warnings
from datetime import datetime
from pathlib import Path
from typing import Optional, Sequence

from fastsim import __version__
from fastsim.dynamo_version import DEFAULT_DYNAMO_VERSION, DYNAMO_VERSIONS
from fastsim.errors import FastsimError, FastsimWarning
from fastsim.pages import small_pages

__all__ = ["main", "build_parser", "default_report_path", "resolve_report_path"]

_TRACE_FORMATS = ("mooncake", "mooncake-delta", "agentic_mooncake", "agentic-mooncake", "applied_compute_agentic",
                  "dynamo", "weka", "azure")
# the formats fastsim replays (the others are refused as not yet)
_REPLAYED_FORMATS = ("mooncake", "azure", "mooncake-delta", "agentic_mooncake", "agentic-mooncake", "dynamo",
                     "applied_compute_agentic", "weka")
_AIC_FLAGS = (
    "aic_backend", "aic_system", "aic_backend_version", "aic_tp_size", "aic_model_path",
    "aic_moe_tp_size", "aic_moe_ep_size", "aic_attention_dp_size", "aic_gemm_dtype",
    "aic_moe_dtype", "aic_fmha_dtype", "aic_kv_cache_dtype", "aic_comm_dtype", "aic_nextn",
    "aic_nextn_accept_rates",
)


class UsageError(FastsimError):
    """A command-line rule was broken (printed as ``fastsim replay: error: ...``, exit 2)."""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every option's help ends with its default (``none`` when it has none); descriptions and
    epilogs keep their line breaks (the examples)."""

    def __init__(self, prog, **kwargs):
        kwargs.setdefault("max_help_position", 34)
        super().__init__(prog, **kwargs)

    def _get_default_metavar_for_optional(self, action):
        if action.type is int:
            return "N"
        if action.type is float:
            return "X"
        if action.dest.endswith(("_args", "_config", "_schedule")):
            return "JSON"
        if action.dest.startswith("report") or action.dest.endswith(("_file", "_path", "_data")):
            return "PATH"
        return action.dest.upper()

    def _get_help_string(self, action):
        text = action.help or ""
        if (action.option_strings and action.nargs != 0 and action.default is not argparse.SUPPRESS
                and "%(default)" not in text):
            text += " (default: none)" if action.default is None else " (default: %(default)s)"
        return text


class _Parser(argparse.ArgumentParser):
    """argparse without silent abbreviations, whose errors are one usage line, the message (with
    "did you mean" for a mistyped flag) and where to find help, instead of the full usage."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        import difflib
        import re

        usage = self.usage % {"prog": self.prog} if self.usage else f"{self.prog} [options]"
        bad = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if bad:
            choices = re.findall(r"'([^']*)'", bad.group(2))
            close = difflib.get_close_matches(bad.group(1), choices, n=1, cutoff=0.5)
            message += f"; did you mean '{close[0]}'?" if close else ""
        self.exit(2, f"usage: {usage}\n{self.prog}: error: {message}\n(see '{self.prog} --help')\n")

    def parse_args(self, args=None, namespace=None):
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            sub = self._subparser(getattr(ns, "command", None))
            sub.error(sub.unknown_argument_message(extras))
        return ns

    def _subparser(self, name):
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and name in action.choices:
                return action.choices[name]
        return self

    def unknown_argument_message(self, extras):
        """``unrecognized argument --num-worker; did you mean --num-workers?``"""
        import difflib

        flags = [x for x in extras if x.startswith("-")]
        if not flags:
            return f"unrecognized arguments: {' '.join(extras)}"
        flag = flags[0].split("=", 1)[0]
        known = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
        names = {o[2:]: o for o in known}
        close = [names[c] for c in difflib.get_close_matches(flag.lstrip("-"), list(names), n=1, cutoff=0.6)]
        more = f" (and {len(flags) - 1} more)" if len(flags) > 1 else ""
        return f"unrecognized argument {flag}{more}" + (f"; did you mean {close[0]}?" if close else "")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def default_report_path(directory: Optional[Path] = None) -> Path:
    """``<directory or cwd>/fastsim_replay_report_YYYYmmdd_HHMMSS.json``."""
    stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
    return Path(directory if directory is not None else Path.cwd()) / f"fastsim_replay_report_{stamp}.json"


def resolve_report_path(report_json: Optional[str]) -> Optional[Path]:
    """Where ``--report-json`` writes: nowhere when it is not given (Dynamo writes a timestamped
    file into the working directory; fastsim only when asked), a timestamped file inside an
    existing directory, else the path given."""
    if report_json is None:
        return None
    path = Path(report_json)
    if path.exists() and path.is_dir():
        return default_report_path(path)
    return path


def _add_replay_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``python -m dynamo.replay`` 1.4.2, with the same names and defaults."""
    p.add_argument("trace_files", nargs="*", help="trace file (Mooncake JSONL, or Azure CSV by .csv suffix)")
    p.add_argument("--extra-engine-args",
                   help="engine args as inline JSON (Dynamo MockEngineArgs fields), or a JSON file (fastsim extension); "
                        "'reasoning' ({start_thinking_token_id, end_thinking_token_id, thinking_ratio}) is accepted "
                        "and changes nothing, as in Dynamo 1.4.2's offline replay")
    p.add_argument("--prefill-engine-args",
                   help="JSON engine args of the prefill pool (worker_type prefill): a disaggregated replay")
    p.add_argument("--decode-engine-args",
                   help="JSON engine args of the decode pool (worker_type decode): a disaggregated replay")
    p.add_argument("--router-config", help="KV router configuration: a JSON object of Dynamo's KvRouterConfig fields")
    p.add_argument("--dynamo-version", choices=DYNAMO_VERSIONS, default=DEFAULT_DYNAMO_VERSION,
                   help="the Dynamo release whose replay semantics, report fields and errors to reproduce")
    p.add_argument("--seed", type=int, default=0,
                   help="fastsim only: seed of the KV router's tie-breaking (Dynamo breaks ties at random)")
    p.add_argument("--scaling-schedule", default=None,
                   help="fastsim only: target worker counts over virtual time, JSON [[t_ms, workers], ...]")
    p.add_argument("--telemetry-interval-ms", type=float, default=None,
                   help="fastsim only: sample every worker's queues and KV usage at this interval")
    p.add_argument("--report-workers", default=None,
                   help="fastsim only: write the per-worker telemetry as CSV to this path")
    p.add_argument("--router-policy-config", default=None, help="not supported yet (router policies)")
    p.add_argument("--model-name", help="not supported yet (router policy profiles)")
    aic = p.add_argument_group(
        "AIConfigurator options (not supported yet)",
        textwrap.fill("Dynamo's AIConfigurator timing flags are accepted for compatibility; each is an "
                      "error: " + ", ".join(_flag(d) for d in _AIC_FLAGS), 78))
    for dest in _AIC_FLAGS:
        kind = int if dest in ("aic_tp_size", "aic_moe_tp_size", "aic_moe_ep_size", "aic_attention_dp_size", "aic_nextn") else None
        aic.add_argument(_flag(dest), type=kind)
    p.add_argument("--input-tokens", type=int)
    p.add_argument("--output-tokens", type=int)
    p.add_argument("--request-count", type=int,
                   help="number of synthetic requests; when --turns-per-session > 1, this is the number of sessions")
    p.add_argument("--request-rate", type=float, help="Poisson open-loop request rate in requests per second")
    p.add_argument("--arrival-interval-ms", type=float,
                   help="fixed open-loop interval between synthetic requests in milliseconds")
    p.add_argument("--arrival-seed", type=int, default=42, help="seed for synthetic open-loop arrival timestamps")
    p.add_argument("--turns-per-session", type=int, default=1)
    p.add_argument("--shared-prefix-ratio", type=float, default=0.0)
    p.add_argument("--num-prefix-groups", type=int, default=0)
    p.add_argument("--inter-turn-delay-ms", type=float, default=0.0)
    p.add_argument("--num-workers", type=int, default=1)
    p.add_argument("--threads", type=int, default=None,
                   help="fastsim only: threads for a round-robin cluster's shards (same results with "
                        "any number; default $FASTSIM_THREADS, else none: the shards' serial fold of the "
                        "gap statistics costs more than they save)")
    p.add_argument("--gap-statistics", choices=("exact", "pooled"), default="exact",
                   help="fastsim only: 'exact' (default) gives Dynamo's ITL and per-user throughput "
                        "means and deviations to the last bit, folding every gap in Dynamo's order; "
                        "'pooled' keeps sums instead: within about 1e-9 of them, and several times "
                        "faster on token-heavy runs (SGLang's stay exact)")
    p.add_argument("--num-prefill-workers", type=int, default=1)
    p.add_argument("--num-decode-workers", type=int, default=1)
    p.add_argument("--replay-concurrency", type=int)
    p.add_argument("--replay-mode", choices=("offline", "online"), default="offline")
    p.add_argument("--router-mode", choices=("round_robin", "kv_router"), default="round_robin")
    p.add_argument("--arrival-speedup-ratio", type=float, default=1.0)
    p.add_argument("--trace-format", choices=_TRACE_FORMATS, default="mooncake",
                   help="format of the trace file: Mooncake JSONL, its delta and agentic forms, Dynamo request traces, "
                        "weka trace directories, or Azure CSV")
    p.add_argument("--trace-block-size", type=int, help="tokens represented by each hash_id; defaults to 512")
    p.add_argument("--trace-shared-prefix-ratio", type=float, default=0.0,
                   help="applied_compute_agentic only")
    p.add_argument("--trace-num-prefix-groups", type=int, default=0,
                   help="applied_compute_agentic only")
    p.add_argument("--report-json",
                   help="path to save the full replay report JSON (not written unless given)")
    p.add_argument("--report-jsonl", default=None,
                   help="optional path to emit one JSON object per request for trace-file replay")
    p.add_argument("--planner-config", help="refused: neither Dynamo release runs its planner offline as installed")
    p.add_argument("--benchmark-granularity", type=int, default=None,
                   help="planner only (not supported yet); Dynamo's default 8")
    p.add_argument("--max-sim-time-seconds", type=float, default=None,
                   help="optional cap on simulated duration for trace replay (seconds)")
    p.add_argument("--sla-ttft-ms", type=float, default=None, help="goodput SLA: max time to first token (ms)")
    p.add_argument("--sla-itl-ms", type=float, default=None, help="goodput SLA: max average inter-token latency (ms)")
    p.add_argument("--sla-e2e-ms", type=float, default=None, help="goodput SLA: max end-to-end latency (ms)")
    d16 = p.add_argument_group("Dynamo 1.6 replay options")
    d16.add_argument("--coverage-json", help="write the replay's coverage dict (Dynamo 1.6) to this path")
    d16.add_argument("--quiet", action="store_true", help="print nothing on stdout (the summary and the saved-file lines)")
    d16.add_argument("--kv-event-lag-ms", type=float,
                     help="delay of the KV events the kv_router's indexer sees (ms; kv_router only, aggregated "
                          "replay)")
    d16.add_argument("--agentic-lanes", type=int,
                     help="agentic traces: run this many plays at a time, each on the cluster's own timing "
                          "(default: every play at its recorded time)")
    d16.add_argument("--execution-model",
                     help="target model of an agentic trace (required for agentic_mooncake and weka; no effect "
                          "on Mooncake/Azure)")
    d16.add_argument("--weka-nested-timestamp-basis", choices=("auto", "absolute", "relative"),
                     help="weka traces only: how nested timestamps are read (none: auto)")
    d16.add_argument("--telemetry-jsonl", help="Dynamo 1.6 telemetry samples as JSONL (not supported yet)")
    d16.add_argument("--ais-perf-config", help="AIS timing for the router's estimator (not supported yet)")
    p.add_argument("--strict", action="store_true",
                   help="fastsim only: exit with status 3 if any request was not completed (rejected, "
                        "failed, or cut off by --max-sim-time-seconds). Without it such requests are "
                        "counted on stderr, the report keeps Dynamo's numbers and the exit status is 0")
    p.add_argument("--no-progress", action="store_true",
                   help="fastsim only: no progress on stderr (shown for runs longer than 2 s)")


def build_parser() -> argparse.ArgumentParser:
    """The ``fastsim`` parser with its subcommands."""
    parser = _Parser(
        prog="fastsim",
        usage="%(prog)s [--version] {replay,predict,sweep,plot,plan,warmup} ...",
        description="Fast re-implementation of NVIDIA Dynamo's offline replay simulator (1.6.1 by default, "
                    "1.4.2 with --dynamo-version). Without a command the arguments are replay's, as "
                    "`python -m dynamo.replay` takes them.",
    )
    parser.add_argument("--version", action="version", version=f"fastsim {__version__} (fastsim-llm)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", prog="fastsim")
    replay = sub.add_parser(
        "replay",
        help="replay a trace or a synthetic workload (flags of python -m dynamo.replay)",
        description="Offline replay with the flags of `python -m dynamo.replay` (1.4.2's CLI; the replay of\n"
                    "Dynamo 1.6.1 by default, 1.4.2 with --dynamo-version 1.4.2): a trace file, or\n"
                    "a synthetic workload (--input-tokens, --output-tokens, --request-count and one of\n"
                    "--request-rate, --arrival-interval-ms, --replay-concurrency).",
        usage="%(prog)s [TRACE_FILE] [options]",
        epilog=_REPLAY_EXAMPLES + "\n" + _REPLAY_EPILOG,
    )
    _add_replay_arguments(replay)
    _document(replay, _REPLAY_HELP, _REPLAY_GROUPS)
    replay.set_defaults(func=_cmd_replay)
    _add_predict_parser(sub)
    _add_sweep_parser(sub)
    _add_plot_parser(sub)
    _add_plan_parser(sub)
    _add_warmup_parser(sub)
    return parser


_REPLAY_EPILOG = """\
exit status:
  0  the replay ran; requests it did not complete (rejected by max_model_len or a KV pool they can
     never fit, failed in disaggregated serving, cut off by --max-sim-time-seconds) are counted on
     stderr with the first one's file and line, and kept in the report as Dynamo keeps them
  2  bad input or a run that cannot proceed (the message names the file, line, field or flag)
  3  with --strict: the replay ran but some requests were not completed

leniencies kept from Dynamo (a warning where the input looks like a mistake):
  block_size 0 in the engine args means the default (64); speedup_ratio 0 is accepted;
  negative times in a planner profile: predictions are clamped (prefill >= 0 ms, decode >= 1 ms)
"""


def _check_before_run(args) -> None:
    """What can be checked before the simulation runs, so that a long run does not end in an
    error: every output path can be written."""
    from fastsim.output_paths import check_output_file

    if args.report_json is not None:
        check_output_file(args.report_json, "--report-json", directory_ok=True)
    if args.report_jsonl is not None:
        check_output_file(args.report_jsonl, "--report-jsonl")
    if args.report_workers is not None:
        check_output_file(args.report_workers, "--report-workers")


_REPLAY_EXAMPLES = """\
examples:
  fastsim replay examples/mooncake_trace_1000.jsonl --num-workers 2 --extra-engine-args '{"block_size":64}'
  fastsim replay trace.jsonl --num-workers 4 --router-mode kv_router --router-config '{"router_temperature":0.5}'
  fastsim replay --input-tokens 1024 --output-tokens 128 --request-count 1000 --request-rate 80 --num-workers 4
  fastsim replay trace.jsonl --num-workers 4 --sla-ttft-ms 500 --report-json out.json --report-jsonl requests.jsonl
  fastsim replay trace.jsonl --num-workers 4 --telemetry-interval-ms 1000 --report-workers workers.csv

Engine arguments are Dynamo's MockEngineArgs fields (block_size, num_gpu_blocks, max_num_seqs,
max_num_batched_tokens, enable_prefix_caching, speedup_ratio, dp_size, startup_time, ...).
Dynamo 1.6.1's host KV tier: {"engine": {"kv_cache_bytes_per_token": N, "native_host_offload":
{"num_host_blocks": N, "d2h_bandwidth_gbps": 32, "h2d_bandwidth_gbps": 32, "latency_to_first_byte_ms": 0}}}
(or 1.4.2's num_g2_blocks, bandwidth_g1_to_g2_gbps, bandwidth_g2_to_g1_gbps, kv_bytes_per_token).
"""

# Help texts of `fastsim replay --help` that the definitions (in dynamo.replay's order) lack or
# that would repeat the default shown after them.
_REPLAY_HELP = {
    "trace_block_size": "tokens represented by each hash_id of the trace (none: 512)",
    "threads": "fastsim only: threads for a round-robin cluster's shards, with the same results with any "
               "number (none: $FASTSIM_THREADS, else 1)",
    "report_json": "write the full report JSON (Dynamo's keys) to this file; an existing directory gets "
                   "a timestamped file inside it",
    "report_jsonl": "write one JSON object per request (trace replay)",
    "input_tokens": "synthetic workload: prompt length of every request (tokens)",
    "output_tokens": "synthetic workload: output length of every request (tokens)",
    "turns_per_session": "synthetic workload: turns of each session (multi-turn when > 1)",
    "shared_prefix_ratio": "synthetic workload: fraction of each prompt shared within its prefix group",
    "num_prefix_groups": "synthetic workload: number of prefix groups (0: no shared prefixes)",
    "inter_turn_delay_ms": "synthetic workload: delay between a turn's completion and the next turn (ms)",
    "num_workers": "aggregated workers (each of dp_size attention ranks)",
    "num_prefill_workers": "disaggregated replay: prefill workers",
    "num_decode_workers": "disaggregated replay: decode workers",
    "replay_concurrency": "closed loop: keep this many requests in flight (trace timestamps are ignored)",
    "replay_mode": "offline (virtual time); online is not supported yet",
    "router_mode": "how requests are routed to workers",
    "arrival_speedup_ratio": "divide the trace's arrival times by this factor (2: twice the load)",
}
for _dest in _AIC_FLAGS:
    _REPLAY_HELP[_dest] = argparse.SUPPRESS  # listed in their section's description instead

# Help sections of `fastsim replay --help`, in order (flags not named here stay under "options").
_REPLAY_GROUPS = (
    ("trace replay", ("trace_format", "trace_block_size", "arrival_speedup_ratio", "max_sim_time_seconds")),
    ("synthetic workload", ("input_tokens", "output_tokens", "request_count", "request_rate",
                            "arrival_interval_ms", "arrival_seed", "turns_per_session", "shared_prefix_ratio",
                            "num_prefix_groups", "inter_turn_delay_ms")),
    ("engines and cluster", ("extra_engine_args", "num_workers", "replay_concurrency", "prefill_engine_args",
                             "decode_engine_args", "num_prefill_workers", "num_decode_workers", "replay_mode",
                             "threads", "scaling_schedule")),
    ("routing", ("router_mode", "router_config", "seed")),
    ("goodput SLA (requests meeting every bound given)", ("sla_ttft_ms", "sla_itl_ms", "sla_e2e_ms")),
    ("output", ("report_json", "report_jsonl", "telemetry_interval_ms", "report_workers", "no_progress", "strict")),
    ("Dynamo flags not supported yet (an error if given)",
     ("router_policy_config", "model_name", "planner_config", "benchmark_granularity",
      "trace_shared_prefix_ratio", "trace_num_prefix_groups")),
)


def _document(parser, helps, groups):
    """Give the flags in ``helps`` their help text and move the flags of ``groups`` into help
    sections of those titles, after the definitions (which keep Dynamo's order)."""
    by_dest = {a.dest: a for a in parser._actions}
    for dest, text in helps.items():
        if dest in by_dest:
            by_dest[dest].help = text
    sections = {}
    for title, dests in groups:
        for dest in dests:
            action = by_dest.get(dest)
            if action is None:
                continue
            for g in parser._action_groups:
                if action in g._group_actions:
                    g._group_actions.remove(action)
            if title not in sections:
                sections[title] = parser.add_argument_group(title)
            sections[title]._group_actions.append(action)
    aic = [g for g in parser._action_groups if g.title and g.title.startswith("AIConfigurator")]
    for g in aic:  # the AIConfigurator section last
        parser._action_groups.remove(g)
        parser._action_groups.append(g)


def _check_combinations(args) -> None:
    """Flag combinations that would fail or do nothing, checked before the simulation runs."""
    if args.report_workers is not None and args.telemetry_interval_ms is None:
        raise UsageError("--report-workers needs --telemetry-interval-ms (the sampling interval of the "
                         "per-worker telemetry it writes)")
    if args.router_config is not None and args.router_mode == "round_robin":
        warnings.warn("--router-config configures --router-mode kv_router; with round_robin (the default) "
                      "it has no effect", FastsimWarning)


def _check_dynamo_rules(args) -> bool:
    """Dynamo's CLI rules, with its messages; returns True for trace-file replay."""
    using_trace_file = bool(args.trace_files)
    synthetic_args = (args.input_tokens, args.output_tokens, args.request_count)
    using_synthetic = any(v is not None for v in synthetic_args) or any(
        (args.turns_per_session != 1, args.shared_prefix_ratio != 0.0,
         args.num_prefix_groups != 0, args.inter_turn_delay_ms != 0.0)
    )
    if args.trace_format == "dynamo" and not using_trace_file:
        raise UsageError("--trace-format=dynamo requires at least one trace file")
    if args.trace_format != "dynamo" and len(args.trace_files) > 1:
        raise UsageError(f"--trace-format={args.trace_format} requires exactly one trace file")
    if using_trace_file == using_synthetic:
        raise UsageError("provide either trace_file or all of --input-tokens/--output-tokens/--request-count")
    if using_synthetic and not all(v is not None for v in synthetic_args):
        raise UsageError("synthetic replay requires --input-tokens, --output-tokens, and --request-count")
    if using_synthetic:
        controllers = (args.replay_concurrency, args.request_rate, args.arrival_interval_ms)
        if sum(v is not None for v in controllers) != 1:
            raise UsageError(
                "synthetic replay requires exactly one of --replay-concurrency, --request-rate, or --arrival-interval-ms"
            )
        for dest in ("agentic_lanes", "execution_model", "weka_nested_timestamp_basis"):
            if getattr(args, dest) is not None:
                raise UsageError(f"{_flag(dest)} only applies to trace-file replay")
    elif args.request_rate is not None or args.arrival_interval_ms is not None:
        raise UsageError("--request-rate and --arrival-interval-ms only apply to synthetic replay")
    if using_trace_file and args.trace_format == "applied_compute_agentic" and args.replay_concurrency is None:
        raise UsageError(
            "--trace-format=applied_compute_agentic requires --replay-concurrency because the source "
            "traces do not include first-turn timestamps"
        )
    if args.report_jsonl is not None:
        if args.planner_config is not None:
            raise UsageError("--report-jsonl is not supported with --planner-config")
        if not using_trace_file and args.dynamo_version == "1.4.2":
            # (Dynamo 1.6.1 writes per-request records for synthetic replays too)
            raise UsageError("--report-jsonl currently only supports trace-file replay")
    if args.max_sim_time_seconds is not None:
        if args.planner_config is not None:
            raise UsageError("--max-sim-time-seconds is not supported with --planner-config")
        if not using_trace_file:
            raise UsageError("--max-sim-time-seconds currently only supports trace-file replay")
    return using_trace_file


def _check_unsupported(args) -> None:
    """Reject (naming the flag) every flag whose feature fastsim does not model yet."""
    def nope(flag, what):
        raise UsageError(f"{flag} is not supported yet by fastsim ({what})")

    for dest, what in (
        ("router_policy_config", "router policy configuration"),
        ("model_name", "router policy profiles"),
    ):
        if getattr(args, dest) is not None:
            nope(_flag(dest), what)
    if args.planner_config is not None:
        from fastsim.api import PLANNER_NOT_RUN

        raise UsageError(f"--planner-config is not supported by fastsim: {PLANNER_NOT_RUN} (--scaling-schedule)")
    for dest in _AIC_FLAGS:
        if getattr(args, dest) is not None:
            nope(_flag(dest), "AIConfigurator timing")
    if args.benchmark_granularity is not None:
        nope("--benchmark-granularity", "it only applies with --planner-config")
    if args.replay_mode != "offline":
        nope(f"--replay-mode={args.replay_mode}", "use --replay-mode=offline")
    if args.trace_format not in _REPLAYED_FORMATS:
        nope(f"--trace-format={args.trace_format}", "supported: " + ", ".join(_REPLAYED_FORMATS))
    _check_dynamo16_options(args, nope)
    if args.trace_format != "applied_compute_agentic":
        if args.trace_shared_prefix_ratio != 0.0:
            nope("--trace-shared-prefix-ratio", "it applies to --trace-format applied_compute_agentic only")
        if args.trace_num_prefix_groups != 0:
            nope("--trace-num-prefix-groups", "it applies to --trace-format applied_compute_agentic only")
    disagg = args.prefill_engine_args is not None or args.decode_engine_args is not None
    if not disagg and (args.num_prefill_workers != 1 or args.num_decode_workers != 1):
        raise UsageError(
            "--num-prefill-workers and --num-decode-workers are only used for disaggregated replay "
            "(with --prefill-engine-args and --decode-engine-args); use --num-workers for aggregated replay"
        )


def _check_dynamo16_options(args, nope) -> None:
    """The Dynamo 1.6 options: Dynamo's own refusals first, then what fastsim does not model yet."""
    import math

    lag = args.kv_event_lag_ms
    if lag is not None:
        if not math.isfinite(lag) or lag < 0:
            raise UsageError(f"kv_event_lag_ms must be finite and non-negative, got {lag:g}")
        if lag > 0 and args.router_mode != "kv_router":
            raise UsageError("kv_event_lag_ms only supports router_mode='kv_router'")
        if lag > 0 and args.dynamo_version == "1.4.2":
            raise UsageError("--kv-event-lag-ms is a Dynamo 1.6.1 option: Dynamo 1.4.2 has no KV event lag "
                             "(use --dynamo-version 1.6.1)")
    from fastsim.traces.agentic_run import check_options

    try:
        check_options(args.trace_format, args.agentic_lanes, args.execution_model, args.weka_nested_timestamp_basis)
    except FastsimError as exc:
        raise UsageError(str(exc)) from None
    if args.telemetry_jsonl is not None:
        nope("--telemetry-jsonl", "Dynamo 1.6's telemetry samples; fastsim samples workers with "
             "--telemetry-interval-ms and --report-workers")
    if args.ais_perf_config is not None:
        nope("--ais-perf-config", "AIS timing for the router's prefill-load estimator")


def _cmd_replay(args) -> int:
    from fastsim.config import EngineArgs

    using_trace_file = _check_dynamo_rules(args)
    _check_unsupported(args)
    _check_combinations(args)
    _check_before_run(args)
    engine = (
        EngineArgs.coerce(args.extra_engine_args, source="--extra-engine-args")
        if args.extra_engine_args is not None
        else None
    )
    if engine is not None:
        from fastsim.kv_tiers import check_flat_tiers

        engine = check_flat_tiers(engine, args.dynamo_version, "--extra-engine-args")
    common = dict(
        extra_engine_args=engine,
        prefill_engine_args=args.prefill_engine_args,
        decode_engine_args=args.decode_engine_args,
        num_prefill_workers=args.num_prefill_workers,
        num_decode_workers=args.num_decode_workers,
        num_workers=args.num_workers,
        replay_concurrency=args.replay_concurrency,
        replay_mode=args.replay_mode,
        router_mode=args.router_mode,
        router_config=args.router_config,
        seed=args.seed,
        scaling_schedule=args.scaling_schedule,
        telemetry_interval_ms=args.telemetry_interval_ms,
        threads=args.threads,
        arrival_speedup_ratio=args.arrival_speedup_ratio,
        sla_ttft_ms=args.sla_ttft_ms,
        sla_itl_ms=args.sla_itl_ms,
        sla_e2e_ms=args.sla_e2e_ms,
        dynamo_version=args.dynamo_version,
        kv_event_lag_ms=args.kv_event_lag_ms,
        gap_statistics=args.gap_statistics,
    )
    from fastsim import progress

    with progress.reporting() if not args.no_progress else contextlib.nullcontext():
        report = _run_replay(args, using_trace_file, common)
    path = resolve_report_path(args.report_json)
    written = None
    if path is not None:
        try:
            written = report.to_json(path)
        except OSError as exc:
            raise FastsimError(f"--report-json: cannot write {path}: {exc.strerror or exc}") from None
    if args.coverage_json is not None:
        _write_coverage(args.coverage_json, report, args.report_jsonl is not None)
    if not args.quiet:
        from fastsim.screen import format_summary

        disagg = args.prefill_engine_args is not None or args.decode_engine_args is not None
        workers = (f"{args.num_prefill_workers} prefill + {args.num_decode_workers} decode workers" if disagg
                   else args.num_workers)
        sys.stdout.write(format_summary(report.summary, sla=(args.sla_ttft_ms, args.sla_itl_ms, args.sla_e2e_ms),
                                        workers=workers))
        sys.stdout.write("\n")
        if written is not None:
            sys.stdout.write(f"Saved full report to: {written}\n")
        if args.report_jsonl is not None:
            sys.stdout.write(f"Saved per-request records to: {args.report_jsonl}\n")
    if args.report_workers is not None:
        try:
            report.workers.to_csv(args.report_workers, index=False)
        except OSError as exc:
            raise FastsimError(f"--report-workers: cannot write {args.report_workers}: {exc.strerror or exc}") from None
        if not args.quiet:
            sys.stdout.write(f"Saved worker telemetry to: {args.report_workers}\n")
    lost = getattr(report, "lost", None) or []
    if args.strict and lost:
        total = sum(g.count for g in lost)
        sys.stderr.write(f"fastsim replay: --strict: {total} request{'s' if total != 1 else ''} "
                         "not completed (counted above); exit status 3\n")
        return 3
    return 0


def _run_replay(args, using_trace_file, common):
    from fastsim.api import run_synthetic_trace_replay, run_trace_replay

    if using_trace_file:
        return run_trace_replay(
            args.trace_files,
            trace_block_size=args.trace_block_size,
            trace_format=args.trace_format,
            report_jsonl_path=args.report_jsonl,
            agentic_lanes=args.agentic_lanes,
            trace_shared_prefix_ratio=args.trace_shared_prefix_ratio,
            trace_num_prefix_groups=args.trace_num_prefix_groups,
            execution_model=args.execution_model,
            weka_nested_timestamp_basis=args.weka_nested_timestamp_basis,
            max_sim_time_ms=(args.max_sim_time_seconds * 1000.0 if args.max_sim_time_seconds is not None else None),
            **common,
        )
    else:
        return run_synthetic_trace_replay(
            args.input_tokens,
            args.output_tokens,
            args.request_count,
            request_rate=args.request_rate,
            arrival_interval_ms=args.arrival_interval_ms,
            arrival_seed=args.arrival_seed,
            turns_per_session=args.turns_per_session,
            shared_prefix_ratio=args.shared_prefix_ratio,
            num_prefix_groups=args.num_prefix_groups,
            inter_turn_delay_ms=args.inter_turn_delay_ms,
            report_jsonl_path=args.report_jsonl,
            **common,
        )


def _write_coverage(path, report, captured) -> None:
    import json

    from fastsim.predict import replay_coverage

    try:
        Path(path).write_text(json.dumps(replay_coverage(report, captured), indent=2, sort_keys=True) + "\n",
                              encoding="utf-8")
    except OSError as exc:
        raise FastsimError(f"--coverage-json: cannot write {path}: {exc.strerror or exc}") from None


def _add_predict_parser(sub) -> None:
    p = sub.add_parser(
        "predict",
        help="predict from an AISimulate config (traffic / engine / router / planner sections)",
        description="Read the config of `aisimulate predict --stack dynamo` (Dynamo 1.6), run the "
                    "replay and write OUTPUT_DIR/prediction.json ({summary, per_request, coverage, planner}).",
    )
    p.add_argument("-c", "--config", required=True, help="the prediction config (YAML)")
    p.add_argument("--stack", choices=("dynamo",), default="dynamo",
                   help="the replay stack: dynamo (the only one fastsim reproduces)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=YAML_VALUE",
                   help="override one config value, e.g. --set engine.workers.aggregated.parallelism.replicas=4")
    p.add_argument("--output-dir", default="./aisimulate-output", help="where prediction.json goes")
    p.add_argument("--overwrite", action="store_true", help="replace the prediction files of a non-empty OUTPUT_DIR")
    p.add_argument("--format", choices=("table", "json"), default="table", help="stdout: the table or the summary JSON")
    p.add_argument("--capture-per-request", action="store_true",
                   help="also keep per-request records (prediction.json's per_request and requests.jsonl)")
    p.add_argument("--dynamo-version", choices=DYNAMO_VERSIONS, default=DEFAULT_DYNAMO_VERSION,
                   help="the Dynamo release whose replay semantics to reproduce")
    p.set_defaults(func=_cmd_predict)


def _cmd_predict(args) -> int:
    from fastsim.predict import main_predict

    return main_predict(args)


def _add_sweep_parser(sub) -> None:
    p = sub.add_parser(
        "sweep",
        help="run a parameter sweep (many replays) from a spec file",
        usage="%(prog)s SPEC --out RESULTS [options]",
        description="Run every configuration of a sweep spec (base + grid/zip + repeats; see "
                    "fastsim.sweep) and write one row per configuration. Finished rows are "
                    "checkpointed in OUT.partial.jsonl: rerunning the same command resumes.",
    )
    p.add_argument("spec", help="sweep spec file (.yaml/.yml, .toml or .json)")
    p.add_argument("--executor", choices=("local", "dask", "serial"), default="local",
                   help="local: process pool (default); dask: dask.distributed (fastsim-llm[dask]); "
                        "serial: in this process")
    p.add_argument("--scheduler-address", help="dask scheduler address (default: start a LocalCluster)")
    p.add_argument("--workers", type=int, help="worker processes (default: the number of CPUs)")
    p.add_argument("--out", help="results file: .parquet (needs pyarrow) or .csv (required unless --dry-run)")
    p.add_argument("--force", action="store_true",
                   help="discard results or a checkpoint of a different spec at --out and recompute")
    p.add_argument("--keep-requests", action="store_true",
                   help="also keep every configuration's per-request table, as the parquet dataset OUT.requests/")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--dry-run", action="store_true", help="list the configurations and exit")
    p.set_defaults(func=_cmd_sweep)


def _cmd_sweep(args) -> int:
    import time

    from fastsim.sweep import load_spec, sweep

    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be at least 1, got {args.workers}")
    if args.scheduler_address is not None and args.executor != "dask":
        raise UsageError("--scheduler-address only applies to --executor dask")
    spec = load_spec(args.spec)
    if args.dry_run:
        sys.stdout.write(spec.table().to_string(index=False) + "\n")
        sys.stdout.write(f"{spec.n_configs} configurations ({spec.mode} replay)\n")
        return 0
    if args.out is None:
        raise UsageError("--out is required: the results file (.parquet or .csv)")
    t0 = time.perf_counter()
    try:
        res = sweep(spec, executor=args.executor, workers=args.workers, checkpoint=args.out,
                    progress=not args.no_progress, keep_requests=args.keep_requests,
                    scheduler_address=args.scheduler_address, force=args.force)
    except KeyboardInterrupt:
        if Path(f"{args.out}.partial.jsonl").exists():
            sys.stderr.write(f"fastsim sweep: finished rows are kept in {args.out}.partial.jsonl; "
                             "rerun the same command to resume\n")
        raise
    df = res[0] if args.keep_requests else res
    errors = df[df["status"] != "ok"]
    for _, row in errors.head(5).iterrows():
        sys.stderr.write(f"fastsim sweep: config {row['config_id']}: {row['error']}\n")
    if len(errors) > 5:
        sys.stderr.write(f"fastsim sweep: ... and {len(errors) - 5} more error rows\n")
    sys.stdout.write(f"{len(df)} configurations: {len(df) - len(errors)} ok, {len(errors)} errors "
                     f"({time.perf_counter() - t0:.1f} s)\n")
    sys.stdout.write(f"Saved results to: {args.out}\n")
    if len(df) and len(errors) == len(df):
        sys.stderr.write(f"fastsim sweep: error: every configuration failed (the error rows are in {args.out})\n")
        return 1
    return 0


def _add_plot_parser(sub) -> None:
    p = sub.add_parser(
        "plot",
        help="plot latency CDFs, a sweep's throughput/latency frontier or worker timelines",
        usage="%(prog)s FILE [FILE ...] --out DIR [options]",
        description="Write PNG plots for per-request JSONL files (--report-jsonl; several are "
                    "overlaid), sweep results (.parquet/.csv) or telemetry tables.",
    )
    p.add_argument("files", nargs="+", metavar="REPORT_OR_SWEEP_FILE")
    p.add_argument("--out", required=True, help="directory for the PNG files (created if needed)")
    p.add_argument("--x", default="p99_ttft_ms", help="sweep frontier: latency metric (default p99_ttft_ms)")
    p.add_argument("--y", default="output_throughput_tok_s",
                   help="sweep frontier: throughput metric (default output_throughput_tok_s)")
    p.add_argument("--total", action="store_true", help="sweep frontier: total throughput, not per GPU")
    p.set_defaults(func=_cmd_plot)


def _cmd_plot(args) -> int:
    from fastsim.plots import plot_files

    for path in plot_files(args.files, args.out, x=args.x, y=args.y, per_gpu=not args.total):
        sys.stdout.write(f"Saved plot: {path}\n")
    return 0


def _add_plan_parser(sub) -> None:
    p = sub.add_parser(
        "plan",
        help="find the cheapest fleet that meets latency SLOs (capacity planning)",
        description="Search a plan spec's configurations (workload, engine, slo, search, cost; see "
                    "fastsim.plan) for the cheapest one that meets every SLO, and write plan.json, "
                    "results.parquet, plots and report.html into OUT. Finished replays are kept in "
                    "OUT/evaluations.jsonl: rerunning the same command resumes.",
    )
    p.add_argument("spec", help="plan spec file (.yaml/.yml, .toml or .json)")
    p.add_argument("--out", help="output directory (required unless --dry-run)")
    p.add_argument("--method", choices=("exhaustive", "bisect"), default=None,
                   help="exhaustive: every worker count (default: the spec's search.method, else exhaustive); "
                        "bisect: halve the worker counts per setting of the other axes")
    p.add_argument("--executor", choices=("local", "dask", "serial"), default="local",
                   help="local: process pool (default); dask: dask.distributed; serial: in this process")
    p.add_argument("--scheduler-address", help="dask scheduler address (default: start a LocalCluster)")
    p.add_argument("--workers", type=int, help="worker processes (default: the number of CPUs)")
    p.add_argument("--force", action="store_true", help="discard the replays kept in OUT and recompute")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--dry-run", action="store_true", help="list the groups and worker counts and exit")
    p.set_defaults(func=_cmd_plan)


def _cmd_plan(args) -> int:
    from fastsim.plan import load_plan_spec, plan

    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be at least 1, got {args.workers}")
    if args.scheduler_address is not None and args.executor != "dask":
        raise UsageError("--scheduler-address only applies to --executor dask")
    spec = load_plan_spec(args.spec)
    if args.dry_run:
        for g in spec.groups:
            sys.stdout.write(f"{g.label}: workers {', '.join(str(w) for w in g.workers)}\n")
        sys.stdout.write(f"{spec.n_configs} configurations in {len(spec.groups)} groups ({spec.mode} replay, "
                         f"{args.method or spec.method} search)\n")
        return 0
    if args.out is None:
        raise UsageError("--out is required: the output directory")
    try:
        result = plan(spec, args.out, method=args.method, executor=args.executor, workers=args.workers,
                      scheduler_address=args.scheduler_address, progress=not args.no_progress, force=args.force)
    except KeyboardInterrupt:
        sys.stderr.write(f"fastsim plan: finished replays are kept in {args.out}/evaluations.jsonl; "
                         "rerun the same command to resume\n")
        raise
    s = result.search
    sys.stdout.write(f"{result.summary_line()}\n")
    sys.stdout.write(f"{s['evaluated']} of {s['configurations_in_grid']} configurations evaluated "
                     f"({s['method']}; {s['replays_run']} replays run, {s['reused_from_cache']} reused, "
                     f"{s['errors']} errors) in {s['search_seconds']:.1f} s\n")
    if len(result.monotonicity):
        sys.stderr.write(f"fastsim plan: warning: {len(result.monotonicity)} monotonicity violation(s): a larger "
                         "worker count missed an SLO a smaller one met (see plan.json)\n")
    sys.stdout.write(f"Saved plan to: {args.out} ({', '.join(result.files)})\n")
    return 0 if result.feasible else 1


def _add_warmup_parser(sub) -> None:
    p = sub.add_parser(
        "warmup",
        help="compile every simulation kernel for this machine once, ahead of the first replay",
        usage="%(prog)s",
        description="Compile (on an empty cache) or load every numba kernel fastsim runs, and say "
                    "how long it took. Later replays, sweeps and their workers load the kernels "
                    "from the cache. Processes that share NUMBA_CACHE_DIR share the compile.",
    )
    p.set_defaults(func=_cmd_warmup)


def _cmd_warmup(args) -> int:
    from fastsim import warmup

    print(f"numba cache: {warmup.cache_dir()}", flush=True)

    def report(step, seconds):
        print(f"{seconds:8.1f} s  {step}", flush=True)

    total = warmup.warm_up(report)
    print(f"{total:8.1f} s  in all", flush=True)
    return 0


def _show_warning(message, category, filename, lineno, file=None, line=None):
    if issubclass(category, FastsimWarning):
        sys.stderr.write(f"fastsim: warning: {message}\n")
    else:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


class _Without:
    """Import hook that makes the packages ``names`` unavailable while it is installed."""

    def __init__(self, *names):
        self.names = names

    def find_spec(self, name, path=None, target=None):
        if name.split(".", 1)[0] in self.names:
            raise ImportError(f"{name} is skipped by fastsim's command line")
        return None


def _skip_numba_blas_probe():
    """Numba probes optional packages that fastsim's kernels never use: importing numba imports
    ``scipy`` to check its version (about 15 ms), its array kernels import all of
    ``scipy.linalg`` to look for a BLAS (about 0.2 s of a 0.8 s replay), and its first load of a
    kernel imports ``cffi`` and ``pycparser`` to type cffi functions (about 15 ms), and its
    configuration imports ``yaml`` (about 15 ms) to read a ``.numba_config.yaml`` (kept when the
    working folder has one). The command line lets these probes fail fast (numba then offers no
    linear algebra and no cffi calls, which no kernel makes); the packages stay importable
    afterwards."""
    if "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules:
        return
    skipped = ("scipy", "cffi") if os.path.exists(".numba_config.yaml") else ("scipy", "cffi", "yaml")
    hook = _Without(*skipped)
    sys.meta_path.insert(0, hook)
    try:
        import numba.np.arraymath  # noqa: F401
        import numba.core.typing.cffi_utils  # noqa: F401
    except ImportError:
        pass
    finally:
        sys.meta_path.remove(hook)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The ``fastsim`` command line (what :func:`run`, the console script and ``python -m
    fastsim``, runs); returns the exit code."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in ("-h", "--help", "--version") and (argv[0].startswith("-") or (
            argv[0] not in _COMMANDS and os.path.exists(argv[0]))):
        argv.insert(0, "replay")  # Dynamo's replay flags, or a trace file, given as they are
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    global _command_run
    _command_run = args.command
    prog = f"fastsim {args.command}"
    saved = warnings.showwarning
    warnings.showwarning = _show_warning
    # One replay frees its garbage by reference counting; the cycle collector would only walk the
    # million-odd objects that importing numba and pandas leaves, again and again (60-70 ms of a
    # 0.8 s run, and about 40 ms of importing numba and its first kernel load: decision 0287).
    # Sweeps, which run for long in one process, keep it.
    collecting = gc.isenabled()
    if args.command in ("replay", "predict"):
        gc.disable()
    sigint = _noting_ctrl_c()
    try:
        _skip_numba_blas_probe()  # (after the parse: --help, --version and usage errors import no numba)
        with small_pages():  # the whole command: loading the workload and writing results too
            return args.func(args)
    except UsageError as exc:
        sys.stderr.write(f"{prog}: error: {exc}\n(see 'fastsim {args.command} --help')\n")
        return 2
    except FastsimError as exc:
        sys.stderr.write(f"{prog}: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        return 130
    except Exception:
        if _ctrl_c_seen:  # (a Ctrl-C that a library turned into another error: numba compiling, say)
            sys.stderr.write(f"{prog}: interrupted\n")
            return 130
        raise
    finally:
        if sigint is not None:
            signal.signal(signal.SIGINT, sigint)
        warnings.showwarning = saved
        if collecting:
            gc.enable()


_ctrl_c_seen = False


def _noting_ctrl_c():
    """Note every Ctrl-C before Python raises its KeyboardInterrupt; returns the handler to put
    back (None: SIGINT is not Python's to handle here, e.g. ignored in a background job)."""
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler:
        return None

    def handler(signum, frame):
        global _ctrl_c_seen
        _ctrl_c_seen = True
        signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGINT, handler)
    return previous


_COMMANDS = ("replay", "predict", "sweep", "plot", "plan", "warmup")

# the commands after which the process ends without tearing down its objects (:func:`run`)
_QUICK_EXIT_COMMANDS = ("replay", "predict")
_exit_code = None  # (set by run once such a command has returned)
_command_run = None  # (the command main parsed)


def _quick_exit():
    """The last exit handler: end the process without Python's teardown, which frees every
    module and object one by one (about 0.1 s after a replay, with numba's and numpy's
    thousands of objects loaded; decision 0287). The other exit handlers have run and
    non-daemon threads have ended by then; the output files are closed; standard output and
    error are flushed here."""
    if _exit_code is None:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 (a closed pipe: nothing more can be written anyway)
            pass
    os._exit(_exit_code)


def run() -> int:
    """Entry point of the ``fastsim`` console script and ``python -m fastsim``: :func:`main`,
    and, after a replay or predict, a process end without Python's teardown (:func:`_quick_exit`,
    which runs after every other exit handler as it is registered first)."""
    global _exit_code
    import atexit

    from fastsim.blas_threads import one_blas_thread

    one_blas_thread()
    atexit.register(_quick_exit)
    code = main()
    if _command_run in _QUICK_EXIT_COMMANDS:
        _exit_code = code
    return code


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(run())
