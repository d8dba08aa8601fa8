"""Run-length encoding (the paper's Table 2, §5.1): runs of equal values as run values (in
an inner codec) and run lengths; the payload layout is in :mod:`scabbard.compression.ints`'
docstring."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from scabbard.compression._intcore import _ns_bit_decode, _ns_bit_encode, _start, _words
from scabbard.compression.base import (
    FLOAT,
    INTEGER,
    Codec,
    CodecError,
    Nested,
    numpy_dtype,
    register,
)
from scabbard.compression.ints import BaseDelta, NullSuppressionBit
from scabbard.compression.varlen import Simple8b
from scabbard.kernels._jit import kernel


# -- run-length encoding ---------------------------------------------------------------------
@kernel
def _count_runs(v):
    r = 1
    for i in range(1, v.shape[0]):
        r += v[i] != v[i - 1]
    return r


@kernel
def _find_runs(v, values, lengths):
    """Run values and run lengths minus one (§5.1, RLE [92]); ``lengths`` comes zeroed."""
    k = 0
    values[0] = v[0]
    for i in range(1, v.shape[0]):
        same = v[i] == v[i - 1]
        k += 1 - same
        values[k] = v[i]
        lengths[k] += same


SHORT_SLACK = 256  # runs beyond one per 4 values that _find_long_runs lets pass


def long_runs_cap(n: int) -> int:
    """The most runs :func:`_find_long_runs` finds in ``n`` values before it gives up."""
    return n // 4 + SHORT_SLACK + 1


@kernel
def _find_long_runs(v, values, lengths):
    """:func:`_find_runs` for long runs, without counting them first: a store at each run's
    start only (a timestamp of thousands of tuples a millisecond: 0.6 -> 0.2 ns a value); a
    branch a value, which runs of one to four would mispredict (2-3x slower).  Returns the
    number of runs, or -1 as soon as the runs are shorter than 4 on average (by more than
    :data:`SHORT_SLACK` runs so far): then count them and :func:`_find_runs`.  One pass over
    the column instead of two where the runs are long (SG1: 0.35 -> 0.27 ns a value);
    ``values`` and ``lengths`` hold :func:`long_runs_cap` runs."""
    n = v.shape[0]
    k, start = 0, 0
    values[0] = v[0]
    for i in range(1, n):
        if v[i] != v[i - 1]:
            lengths[k] = i - start - 1
            k += 1
            if 4 * k > i + 4 * SHORT_SLACK:
                return -1
            values[k] = v[i]
            start = i
    lengths[k] = n - start - 1
    return k + 1


def non_decreasing(v: np.ndarray) -> bool:
    """Whether ``v``'s values never decrease (one pass; what entitles a column to
    :func:`_find_sorted_runs`).  Read as int64 through a read-only view, whatever the
    caller's array: the kernel compiles once."""
    v = np.ascontiguousarray(v, np.int64).view()
    v.flags.writeable = False
    return bool(_non_decreasing(v))


@kernel
def _non_decreasing(v) -> bool:
    for i in range(1, v.shape[0]):  # noqa: SIM110 (numba compiles no generator into all())
        if v[i] < v[i - 1]:
            return False
    return True


# runs shorter on average: galloping costs about what a scan does (measured on 2^21 values
# out of cache, ns a value, scan / gallop: runs of 64 0.35 / 0.96, 256 0.41 / 0.41, 512
# 0.36 / 0.25, 1,024 0.56 / 0.13, 4,096 0.53 / 0.06)
SORTED_MIN_RUN = 512


def sorted_runs_cap(n: int) -> int:
    """The most runs :func:`_find_sorted_runs` finds in ``n`` values before it gives up."""
    return n // SORTED_MIN_RUN + SHORT_SLACK + 1


@kernel
def _find_sorted_runs(v, values, lengths):
    """:func:`_find_long_runs` for a column whose values never decrease (a stream's event
    times, checked by its source), reading a few values a run: from each run's start it
    gallops (1, 2, 4 ... values on) to a value that differs, then halves back to the run's
    end - SG's timestamps, runs of ~4,000: 0.06 against 0.34 ns a value, the column never
    read from memory whole.  Returns the number of runs; -1 as soon as the runs are shorter
    than :data:`SORTED_MIN_RUN` on average (by more than :data:`SHORT_SLACK` runs so far);
    -2 where a run is followed by a smaller value (the column is not in order: scan it).
    ``values`` and ``lengths`` hold :func:`sorted_runs_cap` runs."""
    n = v.shape[0]
    k, i = 0, 0
    while i < n:
        x = v[i]
        lo, hi, step = i, i + 1, 1  # v[lo] == x; v[hi] differs, or hi is past the end
        while hi < n and v[hi] == x:
            lo = hi
            step *= 2
            hi = lo + step
        hi = min(hi, n)
        while hi - lo > 1:
            mid = (lo + hi) >> 1
            if v[mid] == x:
                lo = mid
            else:
                hi = mid
        if hi < n and v[hi] < x:
            return -2
        values[k] = x
        lengths[k] = hi - i - 1
        k += 1
        if SORTED_MIN_RUN * k > hi + SORTED_MIN_RUN * SHORT_SLACK:
            return -1
        i = hi
    return k


@kernel
def _expand_runs(values, lengths, out):
    """Inverse of :func:`_find_runs`; False if the lengths do not add up to ``out``."""
    n = out.shape[0]
    i = 0
    for k in range(values.shape[0]):
        r = lengths[k] + 1
        if r > n - i:
            return False
        x = values[k]
        for t in range(r):
            out[i + t] = x
        i += r
    return i == n


_BITS_OF = {"float32": "int32", "float64": "int64"}  # what a float's bit pattern is stored as


@register
@dataclass(frozen=True)
class RunLength(Nested):
    """Runs of equal values as (value, length) pairs (Table 2, [92]): the run values go to
    the ``inner`` codec, the lengths to generic bit-aligned NS.

    Floats are compared as bit patterns (NaN payloads, -0.0 survive).  The inner codec gets
    the run values in the column's dtype if it accepts it, else a float's bit patterns as
    ``int32``/``int64``.  ``inner=None`` is generic NS-bit for integers and base-delta for
    float bit patterns.  RLE is specialised iff its inner codec is.
    """

    codec_id: ClassVar[int] = 7
    name: ClassVar[str] = "rle"
    accepts: ClassVar[frozenset[str]] = INTEGER | FLOAT

    def __post_init__(self):
        if self.inner is not None and not (isinstance(self.inner, Codec)
                                           and self.inner.lossless):
            raise CodecError(f"{self.name}: inner codec {self.inner} is not a lossless codec")

    @property
    def specialised(self) -> bool:
        return self.inner is not None and self.inner.specialised

    @classmethod
    def examples(cls) -> list[Codec]:
        # specialised: base-delta at 63 bits refuses run values that span all 64 (extremes)
        return [cls(), cls(inner=Simple8b()), cls(inner=BaseDelta(width=63))]

    def _inner_for(self, dtype: str) -> tuple[Codec, str]:
        inner = self.inner or (NullSuppressionBit() if dtype in INTEGER else BaseDelta())
        if dtype in inner.accepts:
            return inner, dtype
        if _BITS_OF.get(dtype) in inner.accepts:
            return inner, _BITS_OF[dtype]
        raise CodecError(f"{self.name}: inner codec {inner} takes neither {dtype} nor its bits")

    takes_shift: ClassVar[bool] = True  # encode(values, shift): the runs are shift's to move
    takes_order: ClassVar[bool] = True  # encode(values, ordered=True): the runs galloped to

    def encode(self, values: np.ndarray, shift: int = 0, ordered: bool = False) -> np.ndarray:
        """``values + shift`` encoded (``shift``: an integer column's deferred addend - a
        replayed copy's timestamp shift - added to the run values only).  ``ordered``: the
        values are known never to decrease (a stream's event times its source checked), so
        each run's end is found by galloping (:func:`_find_sorted_runs`), not by a scan."""
        values = np.asarray(values)
        dtype = values.dtype.name
        self.check_dtype(dtype)
        if values.ndim != 1:
            raise CodecError(f"{self.name} encodes 1-D columns, got shape {values.shape}")
        values = np.ascontiguousarray(values, numpy_dtype(dtype))
        if not len(values):
            return np.zeros(0, np.uint8)
        inner, inner_dtype = self._inner_for(dtype)
        bits = values.view(numpy_dtype(_BITS_OF.get(dtype, dtype)))
        v = np.require(bits, np.int64, "CA") if bits.dtype == np.int64 else bits.astype(np.int64)
        runs = -1
        if ordered:  # a few reads a run (room for fewer runs: a smaller allocation)
            cap = sorted_runs_cap(len(v))
            run_values, lengths = np.empty(cap, np.int64), np.empty(cap, np.int64)
            runs = int(_find_sorted_runs(v, run_values, lengths))
        if runs < 0:  # long runs in one pass
            cap = long_runs_cap(len(v))
            run_values, lengths = np.empty(cap, np.int64), np.empty(cap, np.int64)
            runs = int(_find_long_runs(v, run_values, lengths))
        if runs > 0:
            run_values, lengths = run_values[:runs], lengths[:runs]
        else:
            runs = int(_count_runs(v))
            run_values = np.empty(runs, np.int64)
            lengths = np.zeros(runs, np.int64)
            _find_runs(v, run_values, lengths)
        if shift:
            if dtype != "int64":
                raise CodecError(f"{self.name}: a shift applies to int64 columns, not {dtype}")
            run_values += shift
        stored = run_values.astype(numpy_dtype(_BITS_OF.get(dtype, dtype)), copy=False)
        held = inner.encode(stored.view(numpy_dtype(inner_dtype)))
        head = np.array([runs, held.nbytes], np.uint64)
        pad = np.zeros(-held.nbytes % 8, np.uint8)
        tail = _ns_bit_encode(lengths, False, 0, str(self))
        return np.concatenate([head.view(np.uint8), held, pad, tail])

    def decode(self, payload: np.ndarray, count: int, dtype: str) -> np.ndarray:
        if (p := _start(self, payload, count, dtype)) is None:
            return np.zeros(0, numpy_dtype(dtype))
        head = _words(p, 0, 2, self.name)
        runs, held = int(head[0]), int(head[1])
        end = 16 + held + (-held % 8)
        if not 0 < runs <= count or end > p.nbytes:
            raise CodecError(f"{self.name}: header of {runs} runs, {held} bytes in a "
                             f"{p.nbytes}-byte payload")
        inner, inner_dtype = self._inner_for(dtype)
        run_values = inner.decode(p[16:16 + held], runs, inner_dtype)
        if run_values.shape != (runs,):
            raise CodecError(f"{self.name}: inner codec {inner} decoded {run_values.shape}")
        lengths = _ns_bit_decode(p[end:], runs, False, self.name)
        bits = run_values.view(numpy_dtype(_BITS_OF.get(dtype, dtype)))
        out = np.empty(count, np.int64)
        if not _expand_runs(bits.astype(np.int64, copy=False), lengths, out):
            raise CodecError(f"{self.name}: run lengths do not add up to {count}")
        bits_dtype = numpy_dtype(_BITS_OF.get(dtype, dtype))
        return out.astype(bits_dtype, copy=False).view(numpy_dtype(dtype))
