"""numba kernels over numpy arrays: select, project, hash aggregation, windows, joins. DESIGN.md §5.

Kernels import nothing from the engine; JIT flags live in :mod:`scabbard.kernels._jit` only.
"""
