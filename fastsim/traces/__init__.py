"""Trace formats beyond plain Mooncake and Azure, one module each, every one producing the
:class:`fastsim.workload.Workload` tables the simulator runs."""
