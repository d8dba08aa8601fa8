"""An open-addressing hash table from composite int64 keys to dense ids, held in numpy arrays.

Grouped aggregation (§2.3, LightSaber) needs a key -> group id map that numba
code can use without Python objects.  The table here is linear probing over a
power-of-two slot array; each slot holds a group id (gid) or -1, and the keys
live in a gid-indexed matrix, so aggregate state can be plain gid-indexed
arrays.  Removal uses backward-shift deletion (no tombstones), and freed gids
are recycled - the sliding-window assembly removes keys that leave the window,
so an endless run keeps a bounded table.

The table is a :class:`KeyTable`, a named tuple of arrays (numba takes it whole).
Functions that may grow the table return it; callers rebind.  ``K`` may be 0
(a global aggregate: every row has the same, empty key).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from scabbard.kernels import _check as check
from scabbard.kernels._jit import inline, kernel

EMPTY = -1
_LIVE, _NEXT, _FREE = 0, 1, 2


SEED = 0x9E3779B97F4A7C15


class KeyTable(NamedTuple):
    """The table's arrays: a slot per power of two, a row per gid."""

    slots: np.ndarray   # int64[cap]: gid or -1
    keys: np.ndarray    # int64[ids, K]: key of each gid
    hashes: np.ndarray  # uint64[ids]: hash of each gid's key
    free: np.ndarray    # int64[ids]: stack of recycled gids
    meta: np.ndarray    # int64[3]: live gids, next fresh gid, free-stack height


@inline
def mix(h: np.uint64, v: np.int64) -> np.uint64:
    """Fold one key value into a hash (splitmix64 finaliser)."""
    h ^= np.uint64(v)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(31)
    h *= np.uint64(0x94D049BB133111EB)
    h ^= h >> np.uint64(29)
    return h


@inline
def hash_key(keys: np.ndarray, row: int, k: int) -> np.uint64:
    """The hash of one key row: :func:`mix` over its columns."""
    h = np.uint64(SEED)
    for j in range(k):
        h = mix(h, keys[row, j])
    return h


@kernel
def new_table(k: int, capacity: int):
    """An empty table for ``k`` key columns with room for ``capacity`` gids before growing."""
    ids = max(capacity, 8)
    cap = 16
    while cap < 2 * ids:
        cap *= 2
    slots = np.full(cap, EMPTY, dtype=np.int64)
    keys = np.empty((ids, k), dtype=np.int64)
    hashes = np.empty(ids, dtype=np.uint64)
    free = np.empty(ids, dtype=np.int64)
    meta = np.zeros(3, dtype=np.int64)
    return KeyTable(slots, keys, hashes, free, meta)


@inline
def _same(keys: np.ndarray, gid: int, probe: np.ndarray, row: int, k: int) -> bool:
    for j in range(k):
        if keys[gid, j] != probe[row, j]:
            return False
    return True


@inline
def find_in(slots, keys, hashes, probe: np.ndarray, row: int, h: np.uint64) -> int:
    """:func:`find` on the table's arrays (for hot loops that hold them in locals)."""
    mask = slots.shape[0] - 1
    s = np.int64(h & np.uint64(mask))
    k = keys.shape[1]
    while True:
        g = slots[s]
        if g == EMPTY:
            return -1
        if hashes[g] == h and _same(keys, g, probe, row, k):
            return g
        s = (s + 1) & mask


@inline
def find(table, probe: np.ndarray, row: int, h: np.uint64) -> int:
    """The gid of key ``probe[row]`` (hash ``h``), or -1."""
    return find_in(table.slots, table.keys, table.hashes, probe, row, h)


@kernel
def _rehash(slots: np.ndarray, hashes: np.ndarray, new_cap: int) -> np.ndarray:
    new = np.full(new_cap, EMPTY, dtype=np.int64)
    mask = new_cap - 1
    for s in range(slots.shape[0]):
        g = slots[s]
        if g != EMPTY:
            t = np.int64(hashes[g] & np.uint64(mask))
            while new[t] != EMPTY:
                t = (t + 1) & mask
            new[t] = g
    return new


@kernel
def _grow_ids(keys, hashes, free):
    n = keys.shape[0] * 2
    k2 = np.empty((n, keys.shape[1]), dtype=np.int64)
    k2[: keys.shape[0]] = keys
    h2 = np.empty(n, dtype=np.uint64)
    h2[: hashes.shape[0]] = hashes
    f2 = np.empty(n, dtype=np.int64)
    f2[: free.shape[0]] = free
    return k2, h2, f2


@inline
def has_room(slots, keys, meta) -> bool:
    """True if one more key fits without growing (load <= 1/2, a gid available)."""
    return (meta[_LIVE] + 1) * 2 <= slots.shape[0] and (meta[_FREE] > 0 or meta[_NEXT] < keys.shape[0])


@inline
def insert_in(slots, keys, hashes, free, meta, probe: np.ndarray, row: int, h: np.uint64) -> int:
    """Insert key ``probe[row]`` (known absent) into a table with room (:func:`has_room`)."""
    if meta[_FREE] > 0:
        meta[_FREE] -= 1
        g = free[meta[_FREE]]
    else:
        g = meta[_NEXT]
        meta[_NEXT] += 1
    for j in range(keys.shape[1]):
        keys[g, j] = probe[row, j]
    hashes[g] = h
    mask = slots.shape[0] - 1
    s = np.int64(h & np.uint64(mask))
    while slots[s] != EMPTY:
        s = (s + 1) & mask
    slots[s] = g
    meta[_LIVE] += 1
    return g


@kernel
def grow(table):
    """The table with twice the slots and ids (for callers that found no room)."""
    slots, keys, hashes, free, meta = table
    slots = _rehash(slots, hashes, slots.shape[0] * 2)
    keys, hashes, free = _grow_ids(keys, hashes, free)
    return KeyTable(slots, keys, hashes, free, meta)


@inline
def insert(table, probe: np.ndarray, row: int, h: np.uint64):
    """Insert key ``probe[row]`` (known absent); return (gid, table)."""
    if not has_room(table.slots, table.keys, table.meta):
        table = grow(table)
    g = insert_in(table.slots, table.keys, table.hashes, table.free, table.meta, probe, row, h)
    return g, table


@inline
def find_or_insert(table, probe: np.ndarray, row: int):
    """(gid, is_new, table) for key ``probe[row]``."""
    h = hash_key(probe, row, probe.shape[1])
    g = find(table, probe, row, h)
    if g >= 0:
        return g, False, table
    g, table = insert(table, probe, row, h)
    return g, True, table


@inline
def remove_in(slots, hashes, free, meta, gid: int) -> None:
    """:func:`remove` on the table's arrays (for hot loops that hold them in locals)."""
    mask = slots.shape[0] - 1
    s = np.int64(hashes[gid] & np.uint64(mask))
    while slots[s] != gid:
        s = (s + 1) & mask
    # shift back the entries of the probe run that follows the hole
    hole = s
    t = (s + 1) & mask
    while slots[t] != EMPTY:
        ideal = np.int64(hashes[slots[t]] & np.uint64(mask))
        # move slots[t] into the hole unless its ideal slot lies cyclically in (hole, t]
        if (t > hole and (ideal <= hole or ideal > t)) or (t < hole and ideal <= hole and ideal > t):
            slots[hole] = slots[t]
            hole = t
        t = (t + 1) & mask
    slots[hole] = EMPTY
    free[meta[_FREE]] = gid
    meta[_FREE] += 1
    meta[_LIVE] -= 1


@kernel
def remove(table, gid: int) -> None:
    """Delete ``gid``'s key (backward-shift deletion) and recycle the gid."""
    remove_in(table.slots, table.hashes, table.free, table.meta, gid)


def empty_key_table(words: int, capacity: int) -> KeyTable:
    """An empty table for keys of ``words`` int64 words (0: one empty key) with room for
    ``capacity`` gids before growing (``new_table``, from Python)."""
    check.require("empty_key_table", isinstance(words, int | np.integer) and words >= 0,
                  lambda: f"words must be an integer >= 0, got {words!r}")
    check.counts("empty_key_table", capacity=capacity)
    return new_table(words, capacity)


def live(table) -> int:
    return int(table.meta[_LIVE])


def id_bound(table) -> int:
    """One past the largest gid ever handed out (gid-indexed arrays need this many rows)."""
    return int(table.meta[_NEXT])
