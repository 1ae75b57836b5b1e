"""fastsim: a fast, faithful simulator of LLM inference serving clusters.

A numba re-implementation of the offline replay of NVIDIA Dynamo's mocker
(``python -m dynamo.replay``, version 1.4.2), built for large parameter sweeps.
"""

__version__ = "0.1.0"


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
