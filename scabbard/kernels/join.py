"""Joins: a static hash index over a relation's key (YSB's ad -> campaign), probed per tuple.

The relation's key column (an integer, or a uuid as two int64 words) is indexed
once into the open-addressing table of :mod:`scabbard.kernels.hashtable`; a
relation row's position is its gid.  The generated front-end kernels call
:func:`probe1` / :func:`probe2` for every tuple that reaches the join; a miss
(-1) drops the tuple (inner join).
"""

from __future__ import annotations

import numpy as np

from scabbard.kernels import hashtable as ht
from scabbard.kernels._jit import kernel


@kernel
def _build(keys: np.ndarray):
    table = ht.new_table(keys.shape[1], keys.shape[0])
    for r in range(keys.shape[0]):
        g, fresh, table = ht.find_or_insert(table, keys, r)
        if not fresh:
            return table, r
    return table, -1


def build_index(keys: np.ndarray):
    """Index unique keys (n, K) int64: row r gets id r.  Raises on a duplicate key."""
    keys = np.ascontiguousarray(keys).view(np.int64).reshape(len(keys), -1)
    table, dup = _build(keys)
    if dup >= 0:
        raise ValueError(f"relation key is not unique: row {dup} repeats an earlier key")
    return table


@kernel
def _scan(table, h: np.uint64, k0: np.int64, k1: np.int64, width: int) -> int:
    slots, keys, hashes = table[0], table[1], table[2]
    mask = slots.shape[0] - 1
    s = np.int64(h & np.uint64(mask))
    while True:
        g = slots[s]
        if g == ht.EMPTY:
            return -1
        if hashes[g] == h and keys[g, 0] == k0 and (width == 1 or keys[g, 1] == k1):
            return g
        s = (s + 1) & mask


@kernel
def probe1(table, k0: np.int64) -> int:
    """Row of the relation whose (integer) key is ``k0``, or -1."""
    return _scan(table, ht.mix(np.uint64(ht.SEED), k0), k0, np.int64(0), 1)


@kernel
def probe2(table, k0: np.int64, k1: np.int64) -> int:
    """Row of the relation whose uuid key is (``k0``, ``k1``), or -1."""
    h = ht.mix(ht.mix(np.uint64(ht.SEED), k0), k1)
    return _scan(table, h, k0, k1, 2)
