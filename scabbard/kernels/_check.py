"""The checks of the kernels' validating wrappers.

Kernels are compiled without bounds checks (:data:`scabbard.kernels._jit.JIT_OPTIONS`) and
specialised on their arguments' types: an array one row short is written past its end, an
int32 array compiles the kernel again (a second or more of the run) and a float where an
int is expected fails deep in numba's typing.  So every kernel a module outside
``scabbard.kernels`` calls is a Python function that checks what it is given - the dtype and
the dimensions of each array, the sizes that must agree, the state's kind - and calls the
compiled kernel; a wrong argument is one line naming the kernel and the argument
(:class:`KernelArgumentError`).  The checks look at shapes and types only, never at every
value, and format a message only for an error: about a microsecond a call.  A state that
outlives its calls (a key store's index) is checked once for the arrays it is made of
(:class:`Checked`), the call's own arguments every call.
"""

from __future__ import annotations

import weakref

import numpy as np


class KernelArgumentError(ValueError):
    """A kernel's argument is not what the kernel takes."""


def _describe(a) -> str:
    if isinstance(a, np.ndarray):
        return f"{a.dtype} array of shape {a.shape}"
    return type(a).__name__


def arrays(kernel: str, dtype, ndim: int, **named) -> None:
    """Each of ``named`` is a numpy array of ``dtype`` with ``ndim`` dimensions."""
    want = _DTYPES.get(dtype) or np.dtype(dtype)
    for name, a in named.items():
        if isinstance(a, np.ndarray) and (a.dtype is want or a.dtype == want) \
                and a.ndim == ndim:
            continue
        raise KernelArgumentError(f"{kernel}: {name} must be a {want} array of {ndim} "
                                  f"dimension{'s' if ndim > 1 else ''}, got {_describe(a)}")


_DTYPES = {t: np.dtype(t) for t in (np.int64, np.float64, np.uint8, np.uint64)}
_INT64 = _DTYPES[np.int64]


def plain(dtype, ndim: int, *arrays) -> bool:
    """Whether each of ``arrays`` is a plain numpy array of ``dtype`` with ``ndim``
    dimensions: the test of a call made per record (:func:`arrays` says which is not)."""
    want = _DTYPES[dtype]
    for a in arrays:
        if a.__class__ is not np.ndarray or a.dtype is not want or a.ndim != ndim:
            return False
    return True


def int64_rows(a, b, two) -> bool:
    """Whether ``a`` and ``b`` are plain int64 arrays of one dimension and ``two`` of two: the
    one test of a key store's call, made per record (:func:`arrays` says which is not)."""
    return (a.__class__ is b.__class__ is two.__class__ is np.ndarray
            and a.dtype is b.dtype is two.dtype is _INT64
            and a.ndim == b.ndim == 1 and two.ndim == 2)


def states(kernel: str, kind: type, **named) -> None:
    """Each of ``named`` is a ``kind`` (a named tuple of arrays its constructor made)."""
    for name, value in named.items():
        if not isinstance(value, kind):
            raise KernelArgumentError(f"{kernel}: {name} must be a {kind.__name__}, got "
                                      f"{type(value).__name__}")


def require(kernel: str, holds: bool, message) -> None:
    """``message`` (what the arguments must be; a function giving it, so that it is only
    formatted for an error) unless ``holds``."""
    if not holds:
        raise KernelArgumentError(f"{kernel}: {message() if callable(message) else message}")


def counts(kernel: str, **named) -> None:
    """Each of ``named`` is an integer >= 1 (a count the kernel sizes by)."""
    for name, n in named.items():
        if not (isinstance(n, int | np.integer) and not isinstance(n, bool) and n >= 1):
            raise KernelArgumentError(f"{kernel}: {name} must be an integer >= 1, got {n!r}")


def power_of_two(kernel: str, **named) -> None:
    """Each of ``named`` is an array whose size is a power of two (an open-addressed index)."""
    for name, a in named.items():
        if not (a.size >= 1 and a.size & (a.size - 1) == 0):
            raise KernelArgumentError(f"{kernel}: {name} must have a power of two of slots, "
                                      f"got {a.size}")


class Checked:
    """The last pair of arrays a check passed, held weakly (a closed store's arrays are
    freed): the same pair again - a store's index between two of its calls - is not checked
    again.  An array changes its dtype or dimensions only by being replaced."""

    def __init__(self):
        self._a = self._b = _NOTHING

    def seen(self, a, b) -> bool:
        if a is None or b is None:  # (a freed array's reference gives None too)
            return (self._a is _NONE if a is None else self._a() is a) and (
                self._b is _NONE if b is None else self._b() is b)
        return self._a() is a and self._b() is b

    def passed(self, a, b) -> None:
        self._a, self._b = _ref(a), _ref(b)


_GONE = object()  # what no reference gives: no argument is it


def _NOTHING():
    return _GONE


def _NONE():
    return None


def _ref(a):
    """A weak reference to array ``a`` (None: one that gives None)."""
    return _NONE if a is None else weakref.ref(a)
