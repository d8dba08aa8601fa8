"""The checks of the kernels' validating wrappers.

Kernels are compiled without bounds checks (:data:`scabbard.kernels._jit.JIT_OPTIONS`) and
specialised on their arguments' types: an array one row short is written past its end, an
int32 array compiles the kernel again (a second or more of the run) and a float where an
int is expected fails deep in numba's typing.  So every kernel a module outside
``scabbard.kernels`` calls is a Python function that checks what it is given - the dtype and
the dimensions of each array, the sizes that must agree, the state's kind - and calls the
compiled kernel; a wrong argument is one line naming the kernel and the argument
(:class:`KernelArgumentError`).  The checks look at shapes and types only, never at every
value: a few microseconds a call, on calls made once a task or a batch.
"""

from __future__ import annotations

import numpy as np


class KernelArgumentError(ValueError):
    """A kernel's argument is not what the kernel takes."""


def _describe(a) -> str:
    if isinstance(a, np.ndarray):
        return f"{a.dtype} array of shape {a.shape}"
    return type(a).__name__


def arrays(kernel: str, dtype, ndim: int, **named) -> None:
    """Each of ``named`` is a numpy array of ``dtype`` with ``ndim`` dimensions."""
    dtype = np.dtype(dtype)
    for name, a in named.items():
        if not (isinstance(a, np.ndarray) and a.dtype == dtype and a.ndim == ndim):
            raise KernelArgumentError(f"{kernel}: {name} must be a {dtype} array of {ndim} "
                                      f"dimension{'s' if ndim > 1 else ''}, got {_describe(a)}")


def states(kernel: str, kind: type, **named) -> None:
    """Each of ``named`` is a ``kind`` (a named tuple of arrays its constructor made)."""
    for name, value in named.items():
        if not isinstance(value, kind):
            raise KernelArgumentError(f"{kernel}: {name} must be a {kind.__name__}, got "
                                      f"{type(value).__name__}")


def require(kernel: str, holds: bool, message: str) -> None:
    """``message`` (what the arguments must be) unless ``holds``."""
    if not holds:
        raise KernelArgumentError(f"{kernel}: {message}")


def counts(kernel: str, **named) -> None:
    """Each of ``named`` is an integer >= 1 (a count the kernel sizes by)."""
    for name, n in named.items():
        require(kernel, isinstance(n, int | np.integer) and not isinstance(n, bool) and n >= 1,
                f"{name} must be an integer >= 1, got {n!r}")


def power_of_two(kernel: str, **named) -> None:
    """Each of ``named`` is an array whose size is a power of two (an open-addressed index)."""
    for name, a in named.items():
        require(kernel, a.size >= 1 and a.size & (a.size - 1) == 0,
                f"{name} must have a power of two of slots, got {a.size}")
