"""The kernels of the per-key state store (Darwin, :mod:`scabbard.storage.keystore`).

A store is a log of fixed-width records and an index in memory.  A record is
``1 + width + 1`` int64 words: the key, the value's ``width`` words (float64 values are
stored by their bits) and a check word, a hash of the record's number, its key and its
value - so a record read from the wrong place, torn or zero-filled is caught per key,
without reading the group it was written with.

The kernels that allocate nothing are :func:`~scabbard.kernels._jit.scan` loops: their
inlined helpers take arrays and branch, which costs reference counting per row otherwise
(measured: gets 1.9x slower).

The index is open addressing with linear probing over two power-of-two arrays: ``slot_keys``
(the key, or :data:`EMPTY`) and ``slot_records`` (the number of the key's newest record).
It is kept at most half full; :func:`index_grow` doubles it.  Every change marks its page of
:data:`PAGE_SLOTS` slots in ``dirty`` (one byte a page): what a checkpoint writes of the
index.
"""

from __future__ import annotations

import numpy as np

from scabbard.kernels import _check as check
from scabbard.kernels._jit import inline, kernel, scan

EMPTY = np.iinfo(np.int64).min  # a free slot's key: the one key a store refuses
PAGE_SHIFT = 9
PAGE_SLOTS = 1 << PAGE_SHIFT  # slots a page of the index (4 KiB of keys, 4 KiB of records)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX = np.uint64(0xBF58476D1CE4E5B9)
_SEED = np.uint64(0x5CAB0A2D00000001)


@inline
def _slot(key, mask):
    h = np.uint64(key) * _GOLDEN
    return np.int64(h >> np.uint64(32)) & mask


@inline
def _mix(h, word):
    h = (h ^ np.uint64(word)) * _MIX
    return h ^ (h >> np.uint64(31))


@inline
def _check(words, at, width, record):
    """The check word of the record at ``words[at:]`` (key and value), numbered ``record``."""
    h = _mix(_SEED, record)
    for j in range(width + 1):
        h = _mix(h, words[at + j])
    return np.int64(h)


@inline
def _find(slot_keys, slot_records, k):
    """The record ``k`` points at in one index, or -1."""
    mask = slot_keys.size - 1
    s = _slot(k, mask)
    while slot_keys[s] != EMPTY:
        if slot_keys[s] == k:
            return slot_records[s]
        s = (s + 1) & mask
    return -1


@inline
def _has(slot_keys, k):
    mask = slot_keys.size - 1
    s = _slot(k, mask)
    while slot_keys[s] != EMPTY:
        if slot_keys[s] == k:
            return True
        s = (s + 1) & mask
    return False


@inline
def _point(slot_keys, slot_records, dirty, k, record, mask):
    """Point key ``k`` at ``record``, its page marked dirty: 1 if the key is new, else 0."""
    s = _slot(k, mask)
    while slot_keys[s] != EMPTY and slot_keys[s] != k:
        s = (s + 1) & mask
    new = 0
    if slot_keys[s] == EMPTY:
        slot_keys[s] = k
        new = 1
    slot_records[s] = record
    dirty[s >> PAGE_SHIFT] = 1
    return new


@scan
def _index_find(slot_keys, slot_records, delta_keys, delta_records, keys, out):
    """The kernel of :func:`index_find`."""
    for i in range(keys.size):
        out[i] = _find(slot_keys, slot_records, keys[i])
    if delta_keys.size > 1:  # a delta (one slot: none)
        for i in range(keys.size):
            out[i] = max(out[i], _find(delta_keys, delta_records, keys[i]))


@scan
def _index_put(slot_keys, slot_records, dirty, delta_keys, keys, first_record):
    """The kernel of :func:`index_put`."""
    mask = slot_keys.size - 1
    added = 0
    for i in range(keys.size):
        if _point(slot_keys, slot_records, dirty, keys[i], first_record + i, mask):
            added += not _has(delta_keys, keys[i])
    return added


@scan
def _count_new(slot_keys, delta_keys, keys):
    """The kernel of :func:`count_new`."""
    n = 0
    for i in range(keys.size):
        n += not _has(slot_keys, keys[i]) and not _has(delta_keys, keys[i])
    return n


@scan
def _merge_delta(slot_keys, slot_records, dirty, delta_keys, delta_records):
    """The kernel of :func:`merge_delta`."""
    mask = slot_keys.size - 1
    for i in range(delta_keys.size):
        k = delta_keys[i]
        if k != EMPTY and delta_records[i] > _find(slot_keys, slot_records, k):
            _point(slot_keys, slot_records, dirty, k, delta_records[i], mask)


@scan
def _append_records(slot_keys, slot_records, dirty, delta_keys, keys, values, first_record, out,
                   at):
    """The kernel of :func:`append_records`."""
    for i in range(keys.size):
        if keys[i] == EMPTY:
            return -1
    width = values.shape[1]
    rw = width + 2
    for i in range(keys.size):
        w = at + i * rw
        out[w] = keys[i]
        for j in range(width):
            out[w + 1 + j] = values[i, j]
        out[w + rw - 1] = _check(out, w, width, first_record + i)
    return _index_put(slot_keys, slot_records, dirty, delta_keys, keys, first_record)


@kernel
def _index_grow(slot_keys, slot_records, capacity):
    """The kernel of :func:`index_grow`."""
    keys = np.full(capacity, EMPTY, np.int64)
    records = np.zeros(capacity, np.int64)
    mask = capacity - 1
    for i in range(slot_keys.size):
        k = slot_keys[i]
        if k == EMPTY:
            continue
        s = _slot(k, mask)
        while keys[s] != EMPTY and keys[s] != k:
            s = (s + 1) & mask
        # a key twice (a page of the index file torn by a crash, then merged again): the
        # newer record is the key's
        if keys[s] != k or slot_records[i] > records[s]:
            records[s] = slot_records[i]
        keys[s] = k
    return keys, records


@scan
def _read_values(slot_keys, slot_records, delta_keys, delta_records, keys, log, tail, tail_first,
                end, records, out):
    """The kernel of :func:`read_values`."""
    _index_find(slot_keys, slot_records, delta_keys, delta_records, keys, records)
    width = out.shape[1]
    rw = width + 2
    for i in range(records.size):
        r = records[i]
        if r < 0:
            continue
        if r >= end:
            return i
        if r >= tail_first:
            at = (r - tail_first) * rw
            for j in range(width):
                out[i, j] = tail[at + 1 + j]
            continue
        at = r * rw
        if log[at] != keys[i] or _check(log, at, width, r) != log[at + rw - 1]:
            return i
        for j in range(width):
            out[i, j] = log[at + 1 + j]
    return -2


@scan
def _scan_records(log, first, end, width, slot_keys, slot_records, dirty, added, room):
    """The kernel of :func:`scan_records`."""
    rw = width + 2
    mask = slot_keys.size - 1
    for r in range(first, end):
        if added[0] >= room:
            return r
        at = r * rw
        if _check(log, at, width, r) != log[at + rw - 1]:
            return -1 - r
        added[0] += _point(slot_keys, slot_records, dirty, log[at], r, mask)
    return end


# -- what Python calls: the kernels above behind the checks of scabbard.kernels._check -----------
_INDEX, _PAGES, _DELTA_KEYS, _DELTA, _LOG = (check.Checked() for _ in range(5))
# a put's and a get's index, delta and log, checked together as they were last (two pairs
# each: both seen means the four arrays are the ones the last full check passed)
_PUT, _GET = (check.Checked(), check.Checked()), (check.Checked(), check.Checked())


def _index(kernel: str, slot_keys, slot_records, dirty=None) -> None:
    """An index as :class:`scabbard.storage.keystore.KeyStore` keeps one: two int64 arrays of
    the same power of two of slots (and a byte a page of them)."""
    if not _INDEX.seen(slot_keys, slot_records):
        check.arrays(kernel, np.int64, 1, slot_keys=slot_keys, slot_records=slot_records)
        check.power_of_two(kernel, slot_keys=slot_keys)
        check.require(kernel, slot_records.size == slot_keys.size,
                      lambda: f"slot_records must have slot_keys' {slot_keys.size} slots, "
                      f"got {slot_records.size}")
        _INDEX.passed(slot_keys, slot_records)
    if dirty is not None and not _PAGES.seen(dirty, slot_keys):
        check.arrays(kernel, np.uint8, 1, dirty=dirty)
        pages = -(-slot_keys.size // PAGE_SLOTS)
        check.require(kernel, dirty.size >= pages, lambda: f"dirty must have a byte for each "
                      f"of the {pages} pages, got {dirty.size}")
        _PAGES.passed(dirty, slot_keys)


def _delta(kernel: str, delta_keys, delta_records=None) -> None:
    """A recovery's delta of the index (one :data:`EMPTY` slot: none)."""
    if not _DELTA_KEYS.seen(delta_keys, None):
        check.arrays(kernel, np.int64, 1, delta_keys=delta_keys)
        check.power_of_two(kernel, delta_keys=delta_keys)
        _DELTA_KEYS.passed(delta_keys, None)
    if delta_records is not None and not _DELTA.seen(delta_keys, delta_records):
        check.arrays(kernel, np.int64, 1, delta_records=delta_records)
        check.require(kernel, delta_records.size == delta_keys.size,
                      "delta_records must have delta_keys' slots")
        _DELTA.passed(delta_keys, delta_records)


def index_find(slot_keys, slot_records, delta_keys, delta_records, keys, out) -> None:
    """``out[i]``: the newest record of ``keys[i]`` in the index or its delta (the log a
    recovery scanned: records are numbered in order, the larger is the newer), or -1 for a
    key neither holds."""
    _index("index_find", slot_keys, slot_records)
    _delta("index_find", delta_keys, delta_records)
    if not check.plain(np.int64, 1, keys, out):
        check.arrays("index_find", np.int64, 1, keys=keys, out=out)
    check.require("index_find", out.size >= keys.size, "out must have a slot a key")
    _index_find(slot_keys, slot_records, delta_keys, delta_records, keys, out)


def index_put(slot_keys, slot_records, dirty, delta_keys, keys, first_record: int) -> int:
    """Point ``keys[i]`` at record ``first_record + i`` (a later duplicate wins); the number of
    keys new to the store (in neither the index nor the keys of its delta).  The caller
    keeps the index at most half full."""
    _index("index_put", slot_keys, slot_records, dirty)
    _delta("index_put", delta_keys)
    check.arrays("index_put", np.int64, 1, keys=keys)
    return _index_put(slot_keys, slot_records, dirty, delta_keys, keys, first_record)


def count_new_keys(slot_keys, delta_keys, keys) -> int:
    """How many of ``keys`` neither the index nor its delta holds (a key twice in ``keys``
    counts twice: an upper bound, for sizing)."""
    check.arrays("count_new_keys", np.int64, 1, slot_keys=slot_keys, keys=keys)
    check.power_of_two("count_new_keys", slot_keys=slot_keys)
    _delta("count_new_keys", delta_keys)
    return _count_new(slot_keys, delta_keys, keys)


def merge_delta(slot_keys, slot_records, dirty, delta_keys, delta_records) -> None:
    """The delta's entries into the index where they are newer (its keys are counted)."""
    _index("merge_delta", slot_keys, slot_records, dirty)
    _delta("merge_delta", delta_keys, delta_records)
    _merge_delta(slot_keys, slot_records, dirty, delta_keys, delta_records)


def append_records(slot_keys, slot_records, dirty, delta_keys, keys, values, first_record: int,
                   out, at: int) -> int:
    """Records ``first_record ...`` for ``keys`` and ``values`` (int64[n, width], the values'
    bits) into ``out`` from word ``at`` on, and the index pointed at them (a later duplicate
    wins): the number of keys new to the index, or -1 (nothing done) if a key is
    :data:`EMPTY`.  The caller keeps the index at most half full."""
    name = "append_records"
    a, b = _PUT
    if not (a.seen(slot_keys, dirty) and b.seen(slot_records, delta_keys)):
        _index(name, slot_keys, slot_records, dirty)
        _delta(name, delta_keys)
        a.passed(slot_keys, dirty)
        b.passed(slot_records, delta_keys)
    if not check.int64_rows(keys, out, values):
        check.arrays(name, np.int64, 1, keys=keys, out=out)
        check.arrays(name, np.int64, 2, values=values)
    end = at + keys.size * (values.shape[1] + 2)
    if not (len(values) == keys.size and 0 <= at and end <= out.size):
        check.require(name, len(values) == keys.size, "values must have a row a key")
        check.require(name, False, f"out must hold words {at} to {end}, it has {out.size}")
    return _append_records(slot_keys, slot_records, dirty, delta_keys, keys, values,
                           first_record, out, at)


def index_grow(slot_keys, slot_records, capacity: int):
    """The index's entries in new arrays of ``capacity`` slots (a power of two)."""
    _index("index_grow", slot_keys, slot_records)
    check.require("index_grow", isinstance(capacity, int | np.integer) and capacity >= 1
                  and capacity & (capacity - 1) == 0 and capacity >= slot_keys.size,
                  lambda: f"capacity must be a power of two >= {slot_keys.size}, got {capacity!r}")
    return _index_grow(slot_keys, slot_records, capacity)


def read_values(slot_keys, slot_records, delta_keys, delta_records, keys, log, tail,
                tail_first: int, end: int, records, out) -> int:
    """Each key's newest record into ``records`` (-1: the index does not hold the key) and
    its value into ``out[i]`` (int64[n, width]; a missing key's row left alone), from the
    written ``log`` (records ``0 ..``) or, from record ``tail_first`` to ``end``, from the
    ``tail`` not written yet.  Every record read from the log is verified against its check
    word and its key (a damaged index entry points elsewhere): the index of the first that
    fails, else -2."""
    name = "read_values"
    a, b = _GET
    if not (a.seen(slot_keys, delta_keys) and b.seen(slot_records, delta_records)):
        _index(name, slot_keys, slot_records)
        _delta(name, delta_keys, delta_records)
        a.passed(slot_keys, delta_keys)
        b.passed(slot_records, delta_records)
    if not (check.int64_rows(keys, records, out) and _LOG.seen(log, tail)):
        check.arrays(name, np.int64, 1, keys=keys, log=log, tail=tail, records=records)
        check.arrays(name, np.int64, 2, out=out)
        _LOG.passed(log, tail)
    rw = out.shape[1] + 2
    if not (records.size == keys.size == len(out) and 0 <= tail_first <= end
            and tail_first * rw <= log.size and (end - tail_first) * rw <= tail.size):
        check.require(name, records.size == keys.size == len(out),
                      "records and out must have a slot and a row a key")
        check.require(name, False, f"the log must hold records 0 to {tail_first} and the "
                      f"tail {tail_first} to {end}")
    return _read_values(slot_keys, slot_records, delta_keys, delta_records, keys, log, tail,
                        tail_first, end, records, out)


def scan_records(log, first: int, end: int, width: int, slot_keys, slot_records, dirty,
                 added, room: int) -> int:
    """Records ``first .. end`` of ``log`` into the index (recovery: the log past what the
    index's file holds), ``added[0]`` counting the keys new to it, until ``room`` keys are
    new (the caller sizes the index for them); the first record whose check fails is
    returned as ``-1 - record``; else the record it stopped before."""
    name = "scan_records"
    _index(name, slot_keys, slot_records, dirty)
    check.arrays(name, np.int64, 1, log=log, added=added)
    check.require(name, added.size >= 1, "added must hold the count")
    check.require(name, 0 <= first <= end and end * (width + 2) <= log.size,
                  lambda: f"the log must hold records {first} to {end}")
    return _scan_records(log, first, end, width, slot_keys, slot_records, dirty, added, room)
