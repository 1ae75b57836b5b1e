"""Compile every kernel once for this machine, or load it from the cache: ``fastsim warmup``,
sweep workers, and the first simulation of a process.

The kernels are compiled by numba on first use and cached on disk (``kernels/jit.py``: the cache
directory). :func:`warm_up` runs one tiny simulation of each kind (a single worker, a cluster split
into shards, a trace with prefix caching, KV-aware routing, disaggregated serving, the SGLang
engine under 1.6.1's and 1.4.2's rules, the TRT-LLM engine, speculative decoding), so that every
kernel a replay or a sweep needs is compiled (on an empty cache) or loaded before the first real
run. Processes that share one cache directory (``NUMBA_CACHE_DIR``, e.g. on a shared file system
for Dask workers) compile it once between them.

Speculative decoding compiles a variant of the loop of its own (decision 0285): the first run that
uses it compiles (or loads) that variant, outside its timed region, and :func:`variant` tells
whether that is a compile.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

# one row of a Mooncake trace (two blocks of 16 tokens, the second shared with nothing)
_TRACE_ROWS = ('{"timestamp": 0, "input_length": 40, "output_length": 4, "hash_ids": [0, 1, 2]}\n'
               '{"timestamp": 1, "input_length": 40, "output_length": 4, "hash_ids": [0, 1, 3]}\n')


def cache_dir() -> str:
    """The numba cache directory of fastsim's kernels in this process."""
    from fastsim.kernels.jit import cache_dir as kernels_cache_dir

    return kernels_cache_dir()


def cached(kernel: str) -> bool:
    """True if the cache has machine code of ``kernel`` (a kernel's function name)."""
    cache = Path(cache_dir())
    return cache.is_dir() and any(cache.rglob(f"*.{kernel}-*.nbi"))


def announce_compile(what: str, how_long: str) -> None:
    """Tell the user, on stderr, that ``what`` is being compiled, which takes ``how_long``."""
    sys.stderr.write(f"fastsim: compiling {what} for this machine (first run only, {how_long}; "
                     "later runs load them from the cache; 'fastsim warmup' does it ahead)\n")
    sys.stderr.flush()


@contextmanager
def variant(name: str, what: str, how_long: str):
    """Load (or compile) a variant of a loop, ``name``, in the ``with`` block, announcing the
    compile when the cache has not got it: numba's cache files are named after the kernel, not
    its variant, so a marker file beside them records that the variant was made."""
    marker = Path(cache_dir()) / f"variant-{name}.done"
    if not marker.exists():
        announce_compile(what, how_long)
    yield
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    except OSError:  # a read-only shared cache: the message shows again, nothing else changes
        pass


def _aggregated():
    from fastsim.sim import load_split_kernels

    load_split_kernels()


def _trace_and_kv_router():
    from fastsim.api import run_trace_replay

    with tempfile.TemporaryDirectory(prefix="fastsim-warmup-") as d:
        path = os.path.join(d, "trace.jsonl")
        with open(path, "w") as f:
            f.write(_TRACE_ROWS)
        for router in ("round_robin", "kv_router"):
            run_trace_replay(path, num_workers=2, router_mode=router, trace_block_size=16,
                             extra_engine_args={"block_size": 16})


def _disaggregated():
    from fastsim.sim_disagg import load_disagg_kernels

    load_disagg_kernels()


def _sglang():
    from fastsim.api import run_synthetic_trace_replay

    run_synthetic_trace_replay(40, 4, 2, arrival_interval_ms=1.0,
                               extra_engine_args={"engine_type": "sglang", "block_size": 16})


def _sglang_142():
    # Dynamo 1.4.2's SGLang pass: a variant of the SGLang loop of its own (decision 0291)
    from fastsim.api import run_synthetic_trace_replay

    run_synthetic_trace_replay(40, 4, 2, arrival_interval_ms=1.0, dynamo_version="1.4.2",
                               extra_engine_args={"engine_type": "sglang", "block_size": 16})


def _sglang_closed():
    # a SGLang run with a time cap or a closed loop: a variant of the SGLang loop of its own for
    # each release (decisions 0292, 0293); a synthetic closed loop compiles it
    from fastsim.api import run_synthetic_trace_replay

    for version in ("1.6.1", "1.4.2"):
        run_synthetic_trace_replay(40, 4, 2, dynamo_version=version, replay_concurrency=1,
                                   extra_engine_args={"engine_type": "sglang", "block_size": 16})


def _sglang_speculative():
    # speculative decoding on the SGLang engine: a variant of the SGLang loop of its own (decision 0279)
    from fastsim.api import run_synthetic_trace_replay

    run_synthetic_trace_replay(40, 4, 2, arrival_interval_ms=1.0,
                               extra_engine_args={"engine_type": "sglang", "block_size": 16, "aic_nextn": 1})


def _sglang_kv_router():
    # kv_router on SGLang: the SGLang loop with the router compiled in, a variant of its own (decision 0295)
    from fastsim.api import run_synthetic_trace_replay

    run_synthetic_trace_replay(40, 4, 2, arrival_interval_ms=1.0, num_workers=2, router_mode="kv_router",
                               extra_engine_args={"engine_type": "sglang", "block_size": 16})


def _sglang_disaggregated():
    # SGLang prefill and decode pools: a loop of their own, its variant with speculative decoding
    # on the decode pool (decision 0400) and its variant with the pools' kv_routers (decision 0440)
    from fastsim.api import run_synthetic_trace_replay

    for extra, mode in (({}, "round_robin"), ({"aic_nextn": 1}, "round_robin"), ({}, "kv_router")):
        run_synthetic_trace_replay(40, 4, 2, arrival_interval_ms=1.0, router_mode=mode,
                                   prefill_engine_args={"engine_type": "sglang", "worker_type": "prefill",
                                                        "block_size": 16},
                                   decode_engine_args={"engine_type": "sglang", "worker_type": "decode",
                                                       "block_size": 16, **extra})


def _trtllm():
    # the vLLM pass with TRT-LLM's admission (kernels/trtllm.py): the same compiled loop, on two DP ranks
    from fastsim.api import run_synthetic_trace_replay

    run_synthetic_trace_replay(40, 4, 2, arrival_interval_ms=1.0,
                               extra_engine_args={"engine_type": "trtllm", "block_size": 16, "dp_size": 2})


def _speculative():
    from fastsim.sim import load_kernels

    load_kernels(speculative=True)


SPECULATIVE_STEP = "speculative decoding (its own variant of the loop)"

STEPS = (("aggregated loop (one worker, a split cluster)", _aggregated),
         ("trace replay, prefix caching, KV-aware routing", _trace_and_kv_router),
         ("disaggregated loop", _disaggregated),
         ("SGLang engine", _sglang),
         ("SGLang engine, Dynamo 1.4.2's core", _sglang_142),
         ("SGLang engine with a time cap or a closed loop (both releases)", _sglang_closed),
         ("SGLang engine with speculative decoding", _sglang_speculative),
         ("SGLang engine with kv_router", _sglang_kv_router),
         ("SGLang disaggregated loop (round robin, speculative decoding, kv_router)", _sglang_disaggregated),
         ("TRT-LLM engine", _trtllm),
         (SPECULATIVE_STEP, _speculative))


def warm_up(report=None, speculative: bool = True) -> float:
    """Compile (or load) every kernel; ``report(step, seconds)`` is called after each step;
    ``speculative``: the loop's speculative-decoding variant too (a sweep's workers leave it to
    the first configuration that uses it). Returns the total seconds."""
    start = time.perf_counter()
    for name, step in STEPS:
        if name == SPECULATIVE_STEP and not speculative:
            continue
        t = time.perf_counter()
        step()
        if report is not None:
            report(name, time.perf_counter() - t)
    return time.perf_counter() - start
