"""Command line: ``fastsim replay ...`` takes the flags of ``python -m dynamo.replay`` (1.4.2).

Same flag names, defaults, mutual-exclusion rules and output: the report JSON is written (default
``./fastsim_replay_report_YYYYmmdd_HHMMSS.json``; an existing directory gets that file inside),
then the AIPerf-style table is printed, then ``Saved full report to: PATH``. Flags for features
fastsim does not model yet are rejected with an error naming the flag (exit status 2), never
ignored. Any :class:`~fastsim.errors.FastsimError` prints its message on stderr, without a
traceback, and exits with status 2. Subcommands are argparse subparsers: ``replay``, ``sweep``
(:mod:`fastsim.sweep`) and ``plot`` (:mod:`fastsim.plots`).

Deviation: Dynamo reads ``--router-policy-config``'s default from ``$DYN_ROUTER_POLICY_CONFIG``;
fastsim has no router policies and does not read that variable.
"""

from __future__ import annotations

import argparse
import gc
import sys
import warnings
from datetime import datetime
from pathlib import Path
from typing import Optional, Sequence

from fastsim import __version__
from fastsim.errors import FastsimError, FastsimWarning
from fastsim.pages import small_pages

__all__ = ["main", "build_parser", "default_report_path", "resolve_report_path"]

_TRACE_FORMATS = ("mooncake", "mooncake-delta", "agentic_mooncake", "applied_compute_agentic", "dynamo", "azure")
_AIC_FLAGS = (
    "aic_backend", "aic_system", "aic_backend_version", "aic_tp_size", "aic_model_path",
    "aic_moe_tp_size", "aic_moe_ep_size", "aic_attention_dp_size", "aic_gemm_dtype",
    "aic_moe_dtype", "aic_fmha_dtype", "aic_kv_cache_dtype", "aic_comm_dtype", "aic_nextn",
    "aic_nextn_accept_rates",
)


class UsageError(FastsimError):
    """A command-line rule was broken (printed as ``fastsim replay: error: ...``, exit 2)."""


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def default_report_path(directory: Optional[Path] = None) -> Path:
    """``<directory or cwd>/fastsim_replay_report_YYYYmmdd_HHMMSS.json``."""
    stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
    return Path(directory if directory is not None else Path.cwd()) / f"fastsim_replay_report_{stamp}.json"


def resolve_report_path(report_json: Optional[str]) -> Path:
    """Where ``--report-json`` writes: the default name when None, a file inside an existing directory."""
    if report_json is None:
        return default_report_path()
    path = Path(report_json)
    if path.exists() and path.is_dir():
        return default_report_path(path)
    return path


def _add_replay_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``python -m dynamo.replay`` 1.4.2, with the same names and defaults."""
    p.add_argument("trace_files", nargs="*", help="trace file (Mooncake JSONL, or Azure CSV by .csv suffix)")
    p.add_argument("--extra-engine-args",
                   help="engine args as inline JSON (Dynamo MockEngineArgs fields), or a JSON file (fastsim extension)")
    p.add_argument("--prefill-engine-args",
                   help="JSON engine args of the prefill pool (worker_type prefill): a disaggregated replay")
    p.add_argument("--decode-engine-args",
                   help="JSON engine args of the decode pool (worker_type decode): a disaggregated replay")
    p.add_argument("--router-config", help="KV router configuration: a JSON object of Dynamo's KvRouterConfig fields")
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
    aic = p.add_argument_group("AIConfigurator options (not supported yet)")
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
                        "any number; default $FASTSIM_THREADS or the usable cores)")
    p.add_argument("--num-prefill-workers", type=int, default=1)
    p.add_argument("--num-decode-workers", type=int, default=1)
    p.add_argument("--replay-concurrency", type=int)
    p.add_argument("--replay-mode", choices=("offline", "online"), default="offline")
    p.add_argument("--router-mode", choices=("round_robin", "kv_router"), default="round_robin")
    p.add_argument("--arrival-speedup-ratio", type=float, default=1.0)
    p.add_argument("--trace-format", choices=_TRACE_FORMATS, default="mooncake",
                   help="format of the trace file (fastsim supports mooncake and azure)")
    p.add_argument("--trace-block-size", type=int, help="tokens represented by each hash_id; defaults to 512")
    p.add_argument("--trace-shared-prefix-ratio", type=float, default=0.0,
                   help="applied_compute_agentic only (not supported yet)")
    p.add_argument("--trace-num-prefix-groups", type=int, default=0,
                   help="applied_compute_agentic only (not supported yet)")
    p.add_argument("--report-json",
                   help="path to save the full replay report JSON; defaults to a timestamped file in the current directory")
    p.add_argument("--report-jsonl", default=None,
                   help="optional path to emit one JSON object per request for trace-file replay")
    p.add_argument("--planner-config", help="not supported yet (planner-in-the-loop replay)")
    p.add_argument("--benchmark-granularity", type=int, default=None,
                   help="planner only (not supported yet); Dynamo's default 8")
    p.add_argument("--max-sim-time-seconds", type=float, default=None,
                   help="optional cap on simulated duration for trace replay (seconds)")
    p.add_argument("--sla-ttft-ms", type=float, default=None, help="goodput SLA: max time to first token (ms)")
    p.add_argument("--sla-itl-ms", type=float, default=None, help="goodput SLA: max average inter-token latency (ms)")
    p.add_argument("--sla-e2e-ms", type=float, default=None, help="goodput SLA: max end-to-end latency (ms)")
    p.add_argument("--dynamo-version", choices=("1.6.1", "1.4.2"), default="1.6.1",
                   help="the Dynamo release whose replay is reproduced (default 1.6.1)")


def build_parser() -> argparse.ArgumentParser:
    """The ``fastsim`` parser with its subcommands."""
    parser = argparse.ArgumentParser(
        prog="fastsim",
        description="Fast re-implementation of NVIDIA Dynamo 1.4.2's offline replay simulator.",
    )
    parser.add_argument("--version", action="version", version=f"fastsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    replay = sub.add_parser(
        "replay",
        help="replay a trace or a synthetic workload (flags of python -m dynamo.replay)",
        description="Offline replay with the flags of `python -m dynamo.replay` (Dynamo 1.4.2).",
    )
    _add_replay_arguments(replay)
    replay.set_defaults(func=_cmd_replay)
    _add_sweep_parser(sub)
    _add_plot_parser(sub)
    return parser


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
        ("planner_config", "planner-in-the-loop replay"),
    ):
        if getattr(args, dest) is not None:
            nope(_flag(dest), what)
    for dest in _AIC_FLAGS:
        if getattr(args, dest) is not None:
            nope(_flag(dest), "AIConfigurator timing")
    if args.benchmark_granularity is not None:
        nope("--benchmark-granularity", "it only applies with --planner-config")
    if args.replay_mode != "offline":
        nope(f"--replay-mode={args.replay_mode}", "use --replay-mode=offline")
    if args.trace_format not in ("mooncake", "azure"):
        nope(f"--trace-format={args.trace_format}", "supported: mooncake, azure")
    if args.trace_shared_prefix_ratio != 0.0:
        nope("--trace-shared-prefix-ratio", "applied_compute_agentic traces")
    if args.trace_num_prefix_groups != 0:
        nope("--trace-num-prefix-groups", "applied_compute_agentic traces")
    disagg = args.prefill_engine_args is not None or args.decode_engine_args is not None
    if not disagg and (args.num_prefill_workers != 1 or args.num_decode_workers != 1):
        raise UsageError(
            "--num-prefill-workers and --num-decode-workers are only used for disaggregated replay "
            "(with --prefill-engine-args and --decode-engine-args); use --num-workers for aggregated replay"
        )


def _cmd_replay(args) -> int:
    from fastsim.api import run_synthetic_trace_replay, run_trace_replay
    from fastsim.config import EngineArgs

    using_trace_file = _check_dynamo_rules(args)
    _check_unsupported(args)
    engine = (
        EngineArgs.coerce(args.extra_engine_args, source="--extra-engine-args")
        if args.extra_engine_args is not None
        else None
    )
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
    )
    if using_trace_file:
        report = run_trace_replay(
            args.trace_files,
            trace_block_size=args.trace_block_size,
            trace_format=args.trace_format,
            report_jsonl_path=args.report_jsonl,
            max_sim_time_ms=(args.max_sim_time_seconds * 1000.0 if args.max_sim_time_seconds is not None else None),
            **common,
        )
    else:
        report = run_synthetic_trace_replay(
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
    path = resolve_report_path(args.report_json)
    try:
        written = report.to_json(path)
    except OSError as exc:
        raise FastsimError(f"--report-json: cannot write {path}: {exc.strerror or exc}") from None
    sys.stdout.write(report.format_table())
    sys.stdout.write("\n")
    sys.stdout.write(f"Saved full report to: {written if written is not None else path}\n")
    if args.report_workers is not None:
        if report.workers is None:
            raise FastsimError("--report-workers needs --telemetry-interval-ms (the sampling interval)")
        try:
            report.workers.to_csv(args.report_workers, index=False)
        except OSError as exc:
            raise FastsimError(f"--report-workers: cannot write {args.report_workers}: {exc.strerror or exc}") from None
        sys.stdout.write(f"Saved worker telemetry to: {args.report_workers}\n")
    return 0


def _add_sweep_parser(sub) -> None:
    p = sub.add_parser(
        "sweep",
        help="run a parameter sweep (many replays) from a spec file",
        description="Run every configuration of a sweep spec (base + grid/zip + repeats; see "
                    "fastsim.sweep) and write one row per configuration. Finished rows are "
                    "checkpointed in OUT.partial.jsonl: rerunning the same command resumes.",
    )
    p.add_argument("spec", help="sweep spec file (.yaml/.yml, .toml or .json)")
    p.add_argument("--executor", choices=("local", "dask", "serial"), default="local",
                   help="local: process pool (default); dask: dask.distributed (fastsim[dask]); "
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
    return 0


def _add_plot_parser(sub) -> None:
    p = sub.add_parser(
        "plot",
        help="plot latency CDFs, a sweep's throughput/latency frontier or worker timelines",
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


def _show_warning(message, category, filename, lineno, file=None, line=None):
    if issubclass(category, FastsimWarning):
        sys.stderr.write(f"fastsim: warning: {message}\n")
    else:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


class _NoScipyLinalg:
    """Import hook that makes ``scipy.linalg`` unavailable while it is installed."""

    def find_spec(self, name, path=None, target=None):
        if name == "scipy.linalg" or name.startswith("scipy.linalg."):
            raise ImportError("scipy.linalg is skipped by fastsim's command line")
        return None


def _skip_numba_blas_probe():
    """Importing numba's array kernels probes scipy's BLAS, importing all of ``scipy.linalg``
    (about 0.2 s of a 0.8 s replay). fastsim's kernels do no linear algebra, so the command line
    lets that probe fail fast; ``scipy.linalg`` itself stays importable afterwards."""
    if "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules:
        return
    hook = _NoScipyLinalg()
    sys.meta_path.insert(0, hook)
    try:
        import numba.np.arraymath  # noqa: F401
    except ImportError:
        pass
    finally:
        sys.meta_path.remove(hook)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``fastsim`` console script and ``python -m fastsim``; returns the exit code."""
    _skip_numba_blas_probe()
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    prog = f"fastsim {args.command}"
    saved = warnings.showwarning
    warnings.showwarning = _show_warning
    # One replay frees its garbage by reference counting; the cycle collector would only walk the
    # million-odd objects that importing numba and pandas leaves, again and again (60-70 ms of a
    # 0.8 s run). Sweeps, which run for long in one process, keep it.
    collecting = gc.isenabled()
    if args.command == "replay":
        gc.disable()
    try:
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
    finally:
        warnings.showwarning = saved
        if collecting:
            gc.enable()


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
