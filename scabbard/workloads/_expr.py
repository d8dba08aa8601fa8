"""Spark column expressions shared by the generators: counter-based randomness and event time.

Every random value is a pure function of (seed, tag, row keys): a 64-bit
xxHash of them, turned into the distribution needed.  So a dataset does not
depend on how Spark partitions the work, on the order tasks run in, or on the
number of cores - the same parameters give the same bytes on a laptop and on a
cluster.  Tags name the draw ("lrb.speed"), so two draws never share a stream.

Driver-side draws (small tables, block timelines) use numpy's PCG64 seeded
from (seed, tag) for the same reason.
"""

from __future__ import annotations

import hashlib
import math
import zlib
from collections.abc import Sequence
from importlib import import_module
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pyspark.sql import Column


class _Lazy:
    """A module imported on first attribute access.  The workload modules hold both the
    generators (Spark) and the queries and schemas (no Spark): running a query - an engine
    restarting after a crash among others - must not pay for importing PySpark."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(import_module(self._name), attr)


F = _Lazy("pyspark.sql.functions")
T = _Lazy("pyspark.sql.types")

_TWO53 = float(2**53)


def evenly_spaced_ms(index: Column, rate: float) -> Column:
    """Event time in ms of row ``index`` when rows arrive evenly at ``rate`` per second.

    Exact integer arithmetic when ``rate`` is whole (no float rounding at boundaries).
    """
    if float(rate).is_integer():
        return F.floor(index * F.lit(1000) / F.lit(int(rate))).cast("long")
    return F.floor(index.cast("double") * F.lit(1000.0 / rate)).cast("long")


def stream_key(seed: int, tag: str) -> int:
    """A signed 64-bit key for the draw ``tag`` under ``seed`` (folded into one hash input)."""
    digest = hashlib.blake2b(f"{seed}/{tag}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def hash64(seed: int, tag: str, *cols: Column) -> Column:
    """A 64-bit hash of (seed, tag, cols): the raw material of every draw."""
    return F.xxhash64(F.lit(stream_key(seed, tag)), *cols)


def uniform(seed: int, tag: str, *cols: Column) -> Column:
    """U[0, 1) as a double with 53 random bits."""
    return F.shiftrightunsigned(hash64(seed, tag, *cols), 11).cast("double") / F.lit(_TWO53)


def randint(seed: int, tag: str, n: int | Column, *cols: Column) -> Column:
    """Uniform integer in [0, n) as a long (n may be a column)."""
    n = F.lit(n) if isinstance(n, int) else n
    return F.floor(uniform(seed, tag, *cols) * n).cast("long")


def normal(seed: int, tag: str, *cols: Column) -> Column:
    """Approximately standard normal: the Irwin-Hall sum of the four 16-bit quarters of one hash.

    Mean 0 and variance 1 exactly, bounded at +-3.46 (no far tails); one hash and
    no transcendental functions, which keeps the generators several times faster
    than Box-Muller.
    """
    h = hash64(seed, tag, *cols)
    mask = F.lit(0xFFFF)
    total = (
        h.bitwiseAND(mask)
        + F.shiftright(h, 16).bitwiseAND(mask)
        + F.shiftright(h, 32).bitwiseAND(mask)
        + F.shiftrightunsigned(h, 48)
    ).cast("double")
    return (total / F.lit(65536.0) - F.lit(2.0)) * F.lit(math.sqrt(3.0))


def choice(u: Column, values: Sequence, weights: Sequence[float]) -> Column:
    """Pick ``values[i]`` with probability ``weights[i] / sum(weights)`` given a U[0,1) column.

    A balanced tree of comparisons against the cumulative weights: log2(n) tests per row.
    """
    if len(values) != len(weights) or not values:
        raise ValueError("choice needs as many weights as values")
    cum = np.cumsum(np.asarray(weights, dtype=float)) / float(sum(weights))

    def tree(lo: int, hi: int) -> Column:  # values[lo..hi]
        if lo == hi:
            return F.lit(values[lo])
        mid = (lo + hi) // 2
        return F.when(u < F.lit(float(cum[mid])), tree(lo, mid)).otherwise(tree(mid + 1, hi))

    return tree(0, len(values) - 1)


def round_half_up(x: Column) -> Column:
    """Round to the nearest integer (as a long).  Spark's ``round`` goes through BigDecimal
    and is ~10x slower."""
    return F.floor(x + F.lit(0.5)).cast("long")


def log_uniform_rank(u: Column, n: int) -> Column:
    """A rank in [0, n) with P(rank = k) ~ 1/(k+1): a bounded Zipf(1) by inversion."""
    return F.least(F.floor(F.exp(u * F.lit(math.log(n + 1.0)))) - F.lit(1), F.lit(n - 1)).cast("long")


def numpy_rng(seed: int, tag: str) -> np.random.Generator:
    """A driver-side generator for (seed, tag)."""
    return np.random.default_rng([seed, zlib.crc32(tag.encode())])


def uuid4_bytes(seed: int, tag: str, i: int) -> bytes:
    """A version-4-shaped UUID (16 bytes) derived from (seed, tag, i)."""
    b = bytearray(hashlib.blake2b(f"{seed}/{tag}/{i}".encode(), digest_size=16).digest())
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    return bytes(b)


def uuid_table(seed: int, tag: str, n: int) -> list[bytearray]:
    """``n`` UUIDs as Spark binary literals (index with :func:`pick`)."""
    return [bytearray(uuid4_bytes(seed, tag, i)) for i in range(n)]


def pick(values: list, index: Column) -> Column:
    """``values[index]`` for a 0-based index column, with ``values`` folded into the plan."""
    return F.element_at(F.lit(values), (index + F.lit(1)).cast("int"))
