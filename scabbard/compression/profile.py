"""Column statistics for adaptive compression: the instrumented kernel (paper §5.2).

Before a batch is persisted, :func:`profile_column` reads one column once and returns
what the codec rules need: min/max, the bit width of the values, of the batch's range
and of the steps between neighbours, the average run length, how regular the deltas are
(share of zero delta-of-deltas), an estimate of the distinct count, and for floats the
number of decimals that represents every value exactly.  :class:`ColumnProfile` merges the
batches profiled since the last decision (as LightSaber's ``addStatistics``: min of
mins, max of maxes, the widest widths, mean run length).  For an integer column it also
measures what the two step codecs would write (:meth:`ColumnProfile.add_steps`, a second
pass: the adaptive scheme makes it on one batch when it decides, not on every profiled one).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scabbard.compression._bits import U64, bit_width, zigzag
from scabbard.compression.base import FLOAT, INTEGER
from scabbard.compression.ints import DELTA_BLOCK, DOD_BUCKET, DOD_PLEN, DOD_VLEN
from scabbard.kernels._jit import kernel

# bits of a delta-of-delta code by the bit width of its zigzag (prefix and payload)
DOD_CODE_BITS = DOD_PLEN[DOD_BUCKET] + DOD_VLEN[DOD_BUCKET]
DISTINCT_SLOTS = 4096  # distinct values counted exactly up to half of this, then "many"
MAX_DECIMALS = 6


@kernel
def _min_max(v):
    """The smallest and the largest value, in one pass."""
    lo, hi = v[0], v[0]
    for i in range(1, v.shape[0]):
        x = v[i]
        lo = min(lo, x)
        hi = max(hi, x)
    return lo, hi


@kernel
def _int_stats(v, slots):
    """One pass: min, max, OR of the values' and of the deltas' zigzag codes, the deltas' bit
    widths summed, value changes,
    zero delta-of-deltas, distinct values (exact up to len(slots)//2, else -1)."""
    n = v.shape[0]
    lo, hi = v[0], v[0]
    codes = U64(0)
    dcodes = U64(0)
    step_bits = 0
    changes, dod_zero = 0, 0
    for i in range(slots.shape[0]):
        slots[i] = U64(0)
    used = 0
    cap = slots.shape[0] // 2
    mask = U64(slots.shape[0] - 1)
    prev_d = np.int64(0)
    for i in range(n):
        x = v[i]
        lo = min(lo, x)
        hi = max(hi, x)
        codes |= zigzag(x)
        if i:
            d = x - v[i - 1]
            dz = zigzag(d)
            dcodes |= dz
            step_bits += bit_width(dz)
            if d != 0:
                changes += 1
            if i > 1 and d == prev_d:
                dod_zero += 1
            prev_d = d
        if used >= 0:  # a set of (value + 1) with 0 as empty; value -1 maps to a sentinel
            key = U64(x) + U64(1)
            if key == U64(0):
                key = U64(0x9E3779B97F4A7C15)
            h = (key * U64(0x9E3779B97F4A7C15)) >> U64(40)
            j = h & mask
            while slots[j] != U64(0) and slots[j] != key:
                j = (j + U64(1)) & mask
            if slots[j] == U64(0):
                slots[j] = key
                used += 1
                if used > cap:
                    used = -1
    return lo, hi, codes, dcodes, step_bits, changes, dod_zero, used


@kernel
def _step_bits(v):
    """The bits of the steps packed in blocks (each at its widest: the ``delta`` codec) and
    of their changes in delta-of-delta's prefix code, the payloads' headers not counted."""
    block_bits, block, in_block = 0, U64(0), 0
    dod_bits = 0
    prev_d = np.int64(0)
    for i in range(1, v.shape[0]):
        d = v[i] - v[i - 1]
        block |= zigzag(d)
        in_block += 1
        if in_block == DELTA_BLOCK:
            block_bits += DELTA_BLOCK * bit_width(block)
            block, in_block = U64(0), 0
        dod_bits += DOD_CODE_BITS[bit_width(zigzag(d - prev_d))]  # the first's: d - 0
        prev_d = d
    return block_bits + in_block * bit_width(block), dod_bits


@kernel
def _decimals(x, most):
    """The fewest decimals (<= most) that write every finite value of x exactly; most + 1
    if none does; -1 if some value is not finite."""
    best = 0
    for i in range(x.shape[0]):
        v = x[i]
        if not np.isfinite(v):
            return -1
        d = best
        scale = 10.0 ** d
        while d <= most and np.round(v * scale) / scale != v:
            d += 1
            scale *= 10.0
        best = max(best, d)
        if best > most:
            return most + 1
    return best


@dataclass
class ColumnProfile:
    """Statistics of one column over the batches profiled since the last decision."""

    dtype: str
    rows: int = 0
    batches: int = 0
    min: int = 0  # of the values (floats: of their int64 bit patterns - not used)
    max: int = 0
    value_bits: int = 0  # zigzag bit width of the widest value
    range_bits: int = 0  # widest in-batch range (max - min) in bits: base-delta's width
    delta_bits: int = 0  # zigzag bit width of the widest step between neighbours
    step_bits: int = 0  # the steps' zigzag bit widths, summed
    block_bits: int = 0  # the steps packed in blocks at each block's widest: the delta codec
    dod_bits: int = 0  # the steps' changes in delta-of-delta's prefix code
    step_rows: int = 0  # ... over the steps of this many rows' batches (add_steps)
    step_batches: int = 0
    changes: int = 0  # adjacent values that differ
    dod_zero: int = 0  # zero delta-of-deltas
    distinct: int = 0  # largest exact in-batch distinct count; -1 = many
    decimals: int = -1  # floats: decimals that write every value (-1 non-finite, 7 = many)
    fmin: float = 0.0
    fmax: float = 0.0
    xor_bits: int = 0  # what the ``xor`` codec writes of a float column (add_xor)
    xor_rows: int = 0

    @property
    def avg_run(self) -> float:
        return self.rows / (self.changes + self.batches) if self.rows else 0.0

    @property
    def mean_step_bits(self) -> float:
        """Mean bit width of the steps between neighbours (zigzag)."""
        return self.step_bits / max(1, self.rows - self.batches)

    @property
    def delta_value_bits(self) -> float:
        """Bits a value in the ``delta`` codec (its steps in blocks; headers not counted)."""
        return self.block_bits / max(1, self.step_rows - self.step_batches)

    @property
    def dod_value_bits(self) -> float:
        """Bits a value in ``delta_of_delta`` (the first value's word not counted)."""
        return self.dod_bits / max(1, self.step_rows - self.step_batches)

    @property
    def xor_value_bits(self) -> float:
        """Bits a value in the ``xor`` codec, as :meth:`add_xor` measured (0: not measured)."""
        return self.xor_bits / self.xor_rows if self.xor_rows else 0.0

    @property
    def width_bits(self) -> int:
        """Bits a value of the column takes as it is (raw)."""
        from scabbard.schema import Field

        return Field("x", self.dtype).itemsize * 8

    @property
    def regular(self) -> float:
        """Share of delta-of-deltas that are zero (1.0: fixed intervals)."""
        return self.dod_zero / max(1, self.rows - 2 * self.batches)

    def add(self, column: np.ndarray, step_codecs: bool = True,
            sample: int | None = None, at: int = 0) -> None:
        """Profile one batch's column (``step_codecs``: an integer column's too).  With
        ``sample``, the statistics of runs, steps, distinct values and decimals come from
        ``sample`` rows of it from row ``at`` on (a contiguous slice: its runs and steps are
        the column's own; ``at`` is wrapped to fit) and only the values' range from all of
        it, in one cheap pass - what a specialised width must hold, so that sampling costs
        no fallbacks."""
        self.add_parts([(column, 0)], step_codecs, sample, at)

    def add_parts(self, parts: list[tuple[np.ndarray, int]], step_codecs: bool = True,
                  sample: int | None = None, at: int = 0) -> None:
        """:meth:`add` of a column given as a batch's pieces ``[(array, add)]``
        (:meth:`~scabbard.batch.Batch.column_parts`: a replayed copy's timestamps, their
        shift deferred), without making the column: the sample is copied with its shift, the
        range is each piece's plus its shift (making a 2^21-row shifted column to profile it
        cost SG1 0.2 ns a tuple, more than the statistics)."""
        n = sum(len(a) for a, _ in parts)
        if n == 0:
            return
        if sample is not None and n > sample:
            lo = at % (n - sample + 1)
            column = _rows(parts, lo, lo + sample)
            span = None
            if self.dtype in INTEGER:  # the range of every value
                ranges = []
                for a, add in parts:
                    if len(a):
                        a0, a1 = _min_max(np.ascontiguousarray(a))
                        ranges.append((int(a0) + add, int(a1) + add))
                span = (min(r[0] for r in ranges), max(r[1] for r in ranges))
            self._add(column, step_codecs, span)
        else:
            self._add(_rows(parts, 0, n), step_codecs, None)

    def _add(self, column: np.ndarray, step_codecs: bool, span: tuple[int, int] | None) -> None:
        """Profile the rows ``column`` (``span``: the whole batch's range, when they are a
        sample of it)."""
        n = len(column)
        if step_codecs and self.dtype in INTEGER:
            self.add_steps(column)
        if self.dtype == "uuid":
            bits = np.ascontiguousarray(column).view(np.int64).reshape(n, 2)[:, 0] ^ \
                np.ascontiguousarray(column).view(np.int64).reshape(n, 2)[:, 1]
        elif self.dtype in FLOAT:
            wide = column.astype(np.float64)
            bits = np.ascontiguousarray(column).view(np.int32 if column.itemsize == 4
                                                     else np.int64).astype(np.int64)
            d = int(_decimals(wide, MAX_DECIMALS))
            self.decimals = d if self.batches == 0 or self.decimals < 0 or d < 0 \
                else max(self.decimals, d)
            if d < 0:
                self.decimals = -1
            fin = wide[np.isfinite(wide)]
            if len(fin):
                lo, hi = float(fin.min()), float(fin.max())
                self.fmin = lo if self.batches == 0 else min(self.fmin, lo)
                self.fmax = hi if self.batches == 0 else max(self.fmax, hi)
        else:
            bits = column.astype(np.int64, copy=False)
        slots = np.empty(DISTINCT_SLOTS, np.uint64)
        lo, hi, codes, dcodes, steps, changes, dod_zero, used = _int_stats(
            np.ascontiguousarray(bits), slots)
        if span is not None:  # the range of every value of the batch, not only the sample's
            lo, hi = span
            codes = zigzag_or(int(lo), int(hi)) | int(codes)
        first = self.batches == 0
        self.min = int(lo) if first else min(self.min, int(lo))
        self.max = int(hi) if first else max(self.max, int(hi))
        self.value_bits = max(self.value_bits, bit_width_of(int(codes)))
        self.range_bits = max(self.range_bits, bit_width_of(int(hi) - int(lo)))
        self.delta_bits = max(self.delta_bits, bit_width_of(int(dcodes)))
        self.step_bits += int(steps)
        self.changes += int(changes)
        self.dod_zero += int(dod_zero)
        self.distinct = -1 if used < 0 or self.distinct < 0 else max(self.distinct, int(used))
        self.rows += n
        self.batches += 1

    def add_xor(self, column: np.ndarray) -> None:
        """What the ``xor`` codec writes of a float column, added to the profile's."""
        from scabbard.compression.base import codec_class

        if len(column):
            self.xor_bits += codec_class("xor")().encode(column).nbytes * 8
            self.xor_rows += len(column)

    def add_steps(self, column: np.ndarray) -> None:
        """What ``delta`` and ``delta_of_delta`` would write of an integer column (exactly,
        less their headers), added to the profile's."""
        if len(column) == 0:
            return
        blocks, dods = _step_bits(np.ascontiguousarray(column.astype(np.int64, copy=False)))
        self.block_bits += int(blocks)
        self.dod_bits += int(dods)
        self.step_rows += len(column)
        self.step_batches += 1


def _rows(parts: list[tuple[np.ndarray, int]], lo: int, hi: int) -> np.ndarray:
    """Rows ``[lo, hi)`` of a column in pieces ``[(array, add)]``, each with its ``add``: a
    view where they lie in one piece without one, else a copy of those rows only."""
    at, out = 0, []
    for a, add in parts:
        a_lo, a_hi = max(lo - at, 0), min(hi - at, len(a))
        if a_lo < a_hi:
            out.append(a[a_lo:a_hi] + add if add else a[a_lo:a_hi])
        at += len(a)
    return out[0] if len(out) == 1 else np.concatenate(out)


def zigzag_or(lo: int, hi: int) -> int:
    """The OR of the zigzag codes of ``lo`` and ``hi`` (the widest code of any value between
    them is as wide as the wider of theirs)."""
    def zz(v: int) -> int:
        return 2 * v if v >= 0 else -2 * v - 1
    return zz(lo) | zz(hi)


def bit_width_of(u: int) -> int:
    """Bits of a non-negative integer (0 for 0)."""
    return int(u).bit_length()
