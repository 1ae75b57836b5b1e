"""fastsim: a fast, faithful simulator of LLM inference serving clusters.

A numba re-implementation of the offline replay of NVIDIA Dynamo's mocker
(``python -m dynamo.replay``; releases 1.6.1, the default, and 1.4.2), built for large parameter
sweeps. Installed as the distribution ``fastsim-llm``.

Entry points (imported on first use, so ``import fastsim`` stays cheap):

* ``run_trace_replay(trace_file, num_workers=..., extra_engine_args=..., ...)``: replay a
  Mooncake JSONL or Azure CSV trace; returns a ``Report``.
* ``run_synthetic_trace_replay(input_tokens, output_tokens, request_count, ...)``: replay a
  synthetic workload; returns a ``Report``.
* ``sweep(spec, executor="local", checkpoint="results.parquet")``: run every configuration of
  a parameter sweep; returns a pandas DataFrame, one row per configuration.
* ``Report``: ``summary`` (Dynamo's report keys), ``requests`` (a DataFrame, one row per
  request), ``workers`` (telemetry), ``to_json``, ``to_jsonl``.
* ``EngineArgs``: the engine arguments (Dynamo's ``MockEngineArgs`` names and defaults).

Modules: ``fastsim.plots`` (matplotlib, extra ``fastsim-llm[plots]``), ``fastsim.progress``,
``fastsim.sim`` (``simulate``, ``PlannerState``), ``fastsim.workload``.
"""

__version__ = "0.1.0"

__all__ = ["run_trace_replay", "run_synthetic_trace_replay", "sweep", "Report", "EngineArgs", "__version__"]


def _tree_kernels():
    """In a source checkout the compiled layer is the sibling folder ``kernels/`` (installed as
    ``fastsim.kernels``). When this package is imported from the checkout itself (``python -m
    pytest`` in a clone whose wheel is installed, not an editable install), make
    ``fastsim.kernels`` resolve to that folder; an installed package has it in place already."""
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    tree = os.path.join(os.path.dirname(here), "kernels")
    if os.path.isdir(os.path.join(here, "kernels")) or not os.path.isfile(os.path.join(tree, "__init__.py")):
        return

    class _TreeKernelsFinder:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name != "fastsim.kernels":
                return None
            from importlib.util import spec_from_file_location

            return spec_from_file_location(name, os.path.join(tree, "__init__.py"),
                                           submodule_search_locations=[tree])

    if not any(getattr(f, "__name__", "") == "_TreeKernelsFinder" for f in sys.meta_path):
        sys.meta_path.append(_TreeKernelsFinder)


_tree_kernels()
del _tree_kernels


def __dir__():
    return sorted(set(globals()) | set(__all__))


def __getattr__(name):
    # Lazy exports keep `import fastsim` cheap (numba loads only when a simulation runs).
    if name in ("run_trace_replay", "run_synthetic_trace_replay"):
        from fastsim import api

        return getattr(api, name)
    if name in ("EngineArgs",):
        from fastsim import config

        return getattr(config, name)
    if name == "sweep":
        import importlib

        return importlib.import_module("fastsim.sweep")  # the module is callable: fastsim.sweep(spec, ...)
    if name == "plan":
        import importlib

        return importlib.import_module("fastsim.plan")  # the module is callable: fastsim.plan(spec, ...)
    if name in ("Report",):
        from fastsim import report

        return getattr(report, name)
    raise AttributeError(f"module 'fastsim' has no attribute {name!r}")
