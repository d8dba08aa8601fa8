"""What the adaptive kernels' instrumented variant learns of the data (:mod:`scabbard.engine.
adaptive`): the filters' counts over the sampled rows, the group keys' range over every row
let through, the keys' distinct count and heaviest key estimated from the sample, and each
input column's range (a constant one is folded)."""

from __future__ import annotations

import numpy as np

KEYS_SAMPLED = 1 << 12  # the sampled keys a task's distinct keys are estimated from


class Profile:
    """What the instrumented tasks saw since profiling started."""

    def __init__(self, steps: int, keys: int, columns: int):
        self.tasks = 0
        self.counts = np.zeros(2 * steps, dtype=np.int64)
        self.lo = np.full(keys, np.iinfo(np.int64).max, dtype=np.int64)
        self.hi = np.full(keys, np.iinfo(np.int64).min, dtype=np.int64)
        self.rows = 0
        # each input column's smallest and largest value (integer columns; None: another
        # kind, or not seen yet), and its dtype: a column seen constant is folded
        self.col_lo: list[int | None] = [None] * columns
        self.col_hi: list[int | None] = [None] * columns
        self.dtypes: list[str | None] = [None] * columns
        # the smallest and largest relation code of the groups seen (:class:`RelationCodes`)
        self.code_lo, self.code_hi = np.iinfo(np.int64).max, np.iinfo(np.int64).min
        self.sampled = 0  # rows the filters were profiled on
        self.distinct = 0.0  # the most distinct keys a task's sample says its output held
        self.top_share = 0.0  # the largest share of a task's sampled keys one key held

    def describe(self) -> dict:
        return {"rows": self.rows, "sampled": self.sampled,
                "distinct_keys": round(self.distinct), "top_key_share": round(self.top_share, 4)}

    def columns(self, ranges: list[tuple[str, int, int] | None]) -> None:
        """Widen each integer column's range by a task's (:func:`column_ranges`)."""
        for j, r in enumerate(ranges):
            if r is None or self.dtypes[j] not in (None, r[0]):
                self.dtypes[j] = "-"  # never folded
                continue
            dtype, lo, hi = r
            self.dtypes[j] = dtype
            self.col_lo[j] = lo if self.col_lo[j] is None else min(lo, self.col_lo[j])
            self.col_hi[j] = hi if self.col_hi[j] is None else max(hi, self.col_hi[j])

    def constants(self, names) -> tuple[tuple[str, str, int], ...]:
        """The columns every profiled row held one value in."""
        return tuple((c, d, lo) for c, d, lo, hi in zip(names, self.dtypes, self.col_lo,
                                                        self.col_hi, strict=True)
                     if d not in (None, "-") and lo == hi)


def distinct_keys(sampled: np.ndarray, rows: int, most: int = KEYS_SAMPLED) -> tuple[float, float]:
    """From ``sampled`` keys (rows of key words) of ``rows`` output rows: the estimated
    number of distinct keys among all rows (the GEE estimator, Charikar et al., PODS 2000:
    the keys seen once in the sample scaled by sqrt(rows / sample), the others counted once),
    and the share of the sample its most frequent key holds.  At most ``most`` of the sampled
    rows, evenly strided, are counted, each key's words hashed into one (a sort of a few
    thousand numbers: ~0.1 ms, where sorting rows of words took 12 ms a task)."""
    s = len(sampled)
    if s == 0 or sampled.ndim != 2 or sampled.shape[1] == 0:
        return 0.0, 0.0
    if s > most:
        sampled = sampled[np.linspace(0, s - 1, most).astype(np.int64)]
        s = most
    h = np.zeros(s, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(sampled.shape[1]):  # a multiply-xorshift mix of each word in turn
            h = (h ^ sampled[:, j].astype(np.uint64)) * np.uint64(0x9E3779B97F4A7C15)
            h ^= h >> np.uint64(29)
    _, counts = np.unique(h, return_counts=True)
    once = int((counts == 1).sum())
    est = np.sqrt(max(rows, s) / s) * once + (len(counts) - once)
    return float(min(est, max(rows, s))), float(counts.max() / s)


def column_ranges(inputs: tuple) -> list[tuple[str, int, int] | None]:
    """Each input column's dtype, smallest and largest value (None: not an integer column,
    or no rows)."""
    return [(x.dtype.name, int(x.min()), int(x.max()))
            if x.ndim == 1 and x.dtype.kind in "iu" and len(x) else None for x in inputs]
