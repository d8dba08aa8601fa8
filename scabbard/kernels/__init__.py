"""numba kernels over numpy arrays: select, project, hash aggregation, windows, joins. docs/design.md.

Kernels import nothing from the engine; JIT flags live in :mod:`scabbard.kernels._jit` only.
"""
