"""fastsim's compiled layer: numba kernels over plain arrays and scalars (no Python objects)."""
