"""Joins: a static hash index over a relation's key (YSB's ad -> campaign), probed per tuple.

The relation's key column (an integer, or a uuid as two int64 words) is indexed
once into the open-addressing table of :mod:`scabbard.kernels.hashtable`; a
relation row's position is its gid.  The generated front-end kernels call
:func:`probe1` / :func:`probe2` for every tuple that reaches the join; a miss
(-1) drops the tuple (inner join).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from scabbard.kernels import _check as check
from scabbard.kernels import hashtable as ht
from scabbard.kernels._jit import inline, kernel, scan


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


@inline
def _scan(table, h: np.uint64, k0: np.int64, k1: np.int64, width: int) -> int:
    slots, keys, hashes = table.slots, table.keys, table.hashes
    mask = slots.shape[0] - 1
    s = np.int64(h & np.uint64(mask))
    while True:
        g = slots[s]
        if g == ht.EMPTY:
            return -1
        if hashes[g] == h and keys[g, 0] == k0 and (width == 1 or keys[g, 1] == k1):
            return g
        s = (s + 1) & mask


@inline
def probe1(table, k0: np.int64) -> int:
    """Row of the relation whose (integer) key is ``k0``, or -1."""
    return _scan(table, ht.mix(np.uint64(ht.SEED), k0), k0, np.int64(0), 1)


@inline
def probe2(table, k0: np.int64, k1: np.int64) -> int:
    """Row of the relation whose uuid key is (``k0``, ``k1``), or -1."""
    h = ht.mix(ht.mix(np.uint64(ht.SEED), k0), k1)
    return _scan(table, h, k0, k1, 2)


class InlineIndex(NamedTuple):
    """A relation's key index for an optimised kernel (Grizzly's specialised join): each
    slot holds its key's words and relation row inline - a probe reads one slot, where the
    generic index reads a slot, then the row's hash and key - hashed by one multiplication
    (Fibonacci hashing) instead of a splitmix64 finaliser per word; a quarter full."""

    keys: np.ndarray   # int64[S, 2]: the key words in each slot
    rows: np.ndarray   # int64[S]: the relation row, -1 empty
    shift: np.ndarray  # uint64[1]: 64 - log2(S), the hash's top bits index the slots


_FIB, _MIX = 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F


@inline
def _inline_slot(ix, k0: np.int64, k1: np.int64) -> int:
    h = (np.uint64(k0) ^ (np.uint64(k1) * np.uint64(_MIX))) * np.uint64(_FIB)
    return np.int64(h >> ix.shift[0])


@kernel
def _fill_inline(ix, keys: np.ndarray) -> None:
    mask = ix.rows.shape[0] - 1
    width = keys.shape[1]
    for r in range(keys.shape[0]):
        k1 = keys[r, 1] if width == 2 else np.int64(0)
        s = _inline_slot(ix, keys[r, 0], k1)
        while ix.rows[s] >= 0:
            s = (s + 1) & mask
        ix.rows[s] = r
        ix.keys[s, 0] = keys[r, 0]
        ix.keys[s, 1] = k1


def inline_index(table: ht.KeyTable) -> InlineIndex:
    """The :class:`InlineIndex` of a relation's index built by :func:`build_index` (the same
    rows for the same keys)."""
    check.states("inline_index", ht.KeyTable, table=table)
    check.require("inline_index", table.keys.shape[1] in (1, 2),
                  lambda: f"an inline index keys one or two words, the table {table.keys.shape[1]}")
    n = int(table.meta[1])
    bits = max(4, int(4 * n - 1).bit_length())  # at least 4 slots a key
    ix = InlineIndex(np.zeros((1 << bits, 2), np.int64), np.full(1 << bits, -1, np.int64),
                     np.array([64 - bits], np.uint64))
    _fill_inline(ix, np.ascontiguousarray(table.keys[:n]))
    return ix


@inline
def _inline_scan(ix, k0: np.int64, k1: np.int64) -> int:
    mask = ix.rows.shape[0] - 1
    s = _inline_slot(ix, k0, k1)
    while True:
        r = ix.rows[s]
        if r < 0 or (ix.keys[s, 0] == k0 and ix.keys[s, 1] == k1):
            return r
        s = (s + 1) & mask


@inline
def probe_inline1(ix, k0: np.int64) -> int:
    """:func:`probe1` on an :class:`InlineIndex`."""
    return _inline_scan(ix, k0, np.int64(0))


@inline
def probe_inline2(ix, k0: np.int64, k1: np.int64) -> int:
    """:func:`probe2` on an :class:`InlineIndex`."""
    return _inline_scan(ix, k0, k1)


# -- the equi-join of two windowed result streams (SG3) -------------------------------------------
@kernel
def _build_chains(rkeys: np.ndarray):
    """Distinct right keys in a table; per key gid the first right row, per row the next one."""
    k = rkeys.shape[1]
    table = ht.new_table(k, max(16, rkeys.shape[0]))
    head = np.full(max(16, rkeys.shape[0]), -1, dtype=np.int64)
    nxt = np.full(rkeys.shape[0], -1, dtype=np.int64)
    last = np.full(max(16, rkeys.shape[0]), -1, dtype=np.int64)
    for r in range(rkeys.shape[0]):
        g, fresh, table = ht.find_or_insert(table, rkeys, r)
        if g >= head.shape[0]:
            n = 2 * g + 2
            h2 = np.full(n, -1, dtype=np.int64)
            h2[:head.shape[0]] = head
            l2 = np.full(n, -1, dtype=np.int64)
            l2[:last.shape[0]] = last
            head, last = h2, l2
        if fresh:
            head[g] = r
        else:
            nxt[last[g]] = r
        last[g] = r
    return table, head, nxt


@scan
def _probe_chains(table, head, nxt, lkeys: np.ndarray, count_only: bool, li, ri) -> int:
    k = lkeys.shape[1]
    m = 0
    for r in range(lkeys.shape[0]):
        g = ht.find(table, lkeys, r, ht.hash_key(lkeys, r, k))
        if g < 0:
            continue
        j = head[g]
        while j != -1:
            if not count_only:
                li[m] = r
                ri[m] = j
            m += 1
            j = nxt[j]
    return m


def equi_join(lkeys: np.ndarray, rkeys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row pairs ``(li, ri)`` with ``lkeys[li] == rkeys[ri]`` (rows of int64 words), in left
    order and, per left row, in right order: a hash join built on the right side.

    The window join of the paper's SG3 (§6.1, Table 3): its keys are the window end and the
    ``on`` columns, so every left row meets the right rows of its own window.
    """
    lkeys, rkeys = (np.ascontiguousarray(k, dtype=np.int64) for k in (lkeys, rkeys))
    lkeys, rkeys = (k.reshape(-1, 1) if k.ndim == 1 else k for k in (lkeys, rkeys))
    if lkeys.shape[1] != rkeys.shape[1]:
        raise ValueError(f"join keys of {lkeys.shape[1]} and {rkeys.shape[1]} words")
    none = np.zeros(0, dtype=np.int64)
    if not len(lkeys) or not len(rkeys):
        return none, none.copy()
    table, head, nxt = _build_chains(rkeys)
    n = _probe_chains(table, head, nxt, lkeys, True, none, none)
    li, ri = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    _probe_chains(table, head, nxt, lkeys, False, li, ri)
    return li, ri
