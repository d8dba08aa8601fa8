"""Pane partials combined per (pane, key) before a window state sees them.

A spilled key partition comes back from disk as every task's share of it since the spill
(:mod:`scabbard.engine.spill`): at many keys, one partial per tuple - DARWIN at 10^7 keys,
1.46 M rows for the 156 k groups of a partition.  Fed to the window assembler one by one, each
row costs the assembler's random accesses over its group-indexed arrays (the key table, the
window state, the pane FIFO: eight or more cache lines a row; 0.3-0.6 s a partition here).
:func:`combine_partials` folds them first into one row per (pane, key), in three passes, as a
radix-partitioned aggregation does:

1. each row's hash (of its pane and key words), and the rows a *run* (``2^bits`` runs, by
   bits of the hash the table does not use) - a sequential pass;
2. every row's words copied side by side (pane, key words, count, integer partials) into its
   run's stretch of one matrix - sequential writes, one stream a run;
3. run by run, the rows combined in place by a table sized for the run's groups
   (:data:`RUN_GROUPS`: it and the run's rows stay in the core's L2 cache), each (pane, key)'s
   row moved down to the next free row - the first partial's row, the others folded into it.

Counts and integer partials combine exactly, float partials by their operator in the order
fed (the window state sums them with Kahan compensation, as it sums uncombined ones).  The
rows come out by run, within a run in the order of each (pane, key)'s first partial.
"""

from __future__ import annotations

import numpy as np

from scabbard.kernels import _check as check
from scabbard.kernels import hashtable as ht
from scabbard.kernels._jit import kernel
from scabbard.kernels.aggregate import combine

RUN_GROUPS = 8192  # the groups a run is sized for: its table and rows within an L2 cache
MAX_BITS = 10
RUN_SHIFT = np.uint64(40)  # the hash bits a row's run is taken from (the table's are the low)


def run_bits(groups: int) -> int:
    """Runs (``2^bits``) for about ``groups`` groups: :data:`RUN_GROUPS` a run."""
    bits = 0
    while bits < MAX_BITS and (RUN_GROUPS << bits) < groups:
        bits += 1
    return bits


@kernel
def _hash_count(pane, keys, hashes, counts, bits: int) -> None:
    """Pass 1: each row's hash; ``counts[run + 1]`` += the run's rows."""
    runs = np.uint64((1 << bits) - 1)
    for r in range(pane.shape[0]):
        h = ht.mix(np.uint64(ht.SEED), pane[r])
        for j in range(keys.shape[1]):
            h = ht.mix(h, keys[r, j])
        hashes[r] = np.int64(h)
        counts[np.int64((h >> RUN_SHIFT) & runs) + 1] += 1


@kernel
def _scatter(pane, keys, cnt, ints, floats, hashes, at, rows, fl, hs, bits: int) -> None:
    """Pass 2: each row's words to the next free row of its run (``at``: one a run)."""
    runs = np.uint64((1 << bits) - 1)
    k, ni, nf = keys.shape[1], ints.shape[1], floats.shape[1]
    for r in range(pane.shape[0]):
        h = hashes[r]
        p = np.int64((np.uint64(h) >> RUN_SHIFT) & runs)
        t = at[p]
        at[p] = t + 1
        rows[t, 0] = pane[r]
        for j in range(k):
            rows[t, 1 + j] = keys[r, j]
        rows[t, 1 + k] = cnt[r]
        for j in range(ni):
            rows[t, 2 + k + j] = ints[r, j]
        for j in range(nf):
            fl[t, j] = floats[r, j]
        hs[t] = h


@kernel
def _combine_runs(rows, fl, hs, starts, k: int, iops, fops, run_groups: int) -> int:
    """Pass 3: each run's rows combined in place; the rows kept (the first ones)."""
    ni, nf = iops.shape[0], fops.shape[0]
    w = rows.shape[1]
    cap = 16
    while cap < 2 * run_groups:
        cap *= 2
    slots = np.zeros(cap, np.int64)  # a row + 1, 0: free
    m = 0
    for p in range(starts.shape[0] - 1):
        m0 = m
        slots[:] = 0
        mask = np.uint64(cap - 1)
        for r in range(starts[p], starts[p + 1]):
            if 2 * (m - m0 + 1) > cap:  # half full: twice the slots, the run's rows again
                cap *= 2
                slots = np.zeros(cap, np.int64)
                mask = np.uint64(cap - 1)
                for q in range(m0, m):
                    s = np.int64(np.uint64(hs[q]) & mask)
                    while slots[s] != 0:
                        s = np.int64((np.uint64(s) + np.uint64(1)) & mask)
                    slots[s] = q + 1
            h = hs[r]
            s = np.int64(np.uint64(h) & mask)
            while True:
                g1 = slots[s]
                if g1 == 0:  # a new (pane, key): its row moves down to the next free one
                    if m != r:
                        for j in range(w):
                            rows[m, j] = rows[r, j]
                        for j in range(nf):
                            fl[m, j] = fl[r, j]
                        hs[m] = h
                    slots[s] = m + 1
                    m += 1
                    break
                g = g1 - 1
                same = hs[g] == h
                for j in range(1 + k):
                    if same and rows[g, j] != rows[r, j]:
                        same = False
                if same:
                    rows[g, 1 + k] += rows[r, 1 + k]
                    for j in range(ni):
                        rows[g, 2 + k + j] = combine(iops[j], rows[g, 2 + k + j],
                                                     rows[r, 2 + k + j])
                    for j in range(nf):
                        fl[g, j] = combine(fops[j], fl[g, j], fl[r, j])
                    break
                s = np.int64((np.uint64(s) + np.uint64(1)) & mask)
    return m


def combine_partials(pieces, iops, fops, groups: int = 0) -> tuple[np.ndarray, ...]:
    """The pane partials of ``pieces`` - each a tuple (pane, key rows, count, integer
    partials, float partials), combined by ``iops``/``fops`` - as one row per (pane, key)
    (see the module): pane, key rows, count, integer and float partials, arrays of their own.
    ``groups``: about the rows it will give (sizes the runs; a quarter of the rows if 0)."""
    check.arrays("combine_partials", np.int64, 1, iops=iops, fops=fops)
    check.require("combine_partials", len(pieces) > 0, lambda: "at least one piece")
    k = pieces[0][1].shape[1] if getattr(pieces[0][1], "ndim", 0) == 2 else -1
    for piece in pieces:
        _check_piece(piece, k, iops, fops)
    n = sum(len(p[0]) for p in pieces)
    groups = groups or n // 4
    bits = run_bits(groups)
    counts = np.zeros((1 << bits) + 1, np.int64)
    hashes = [np.empty(len(p[0]), np.int64) for p in pieces]
    for p, h in zip(pieces, hashes, strict=True):
        _hash_count(p[0], p[1], h, counts, bits)
    starts = np.cumsum(counts)
    rows = np.empty((n, 2 + k + len(iops)), np.int64)
    fl, hs = np.empty((n, len(fops)), np.float64), np.empty(n, np.int64)
    at = starts[:-1].copy()
    for p, h in zip(pieces, hashes, strict=True):
        _scatter(*p, h, at, rows, fl, hs, bits)
    del hashes
    m = _combine_runs(rows, fl, hs, starts, k, iops, fops, max(16, groups >> bits))
    return (rows[:m, 0].copy(), rows[:m, 1:1 + k].copy(), rows[:m, 1 + k].copy(),
            rows[:m, 2 + k:].copy(), fl[:m].copy())


def _check_piece(piece, k: int, iops, fops) -> None:
    pane, keys, cnt, ints, floats = piece
    check.arrays("combine_partials", np.int64, 1, pane=pane, cnt=cnt)
    check.arrays("combine_partials", np.int64, 2, keys=keys, ints=ints)
    check.arrays("combine_partials", np.float64, 2, floats=floats)
    n = len(pane)
    check.require("combine_partials", len(keys) == len(cnt) == len(ints) == len(floats) == n,
                  lambda: f"one row a partial in every column, got {len(keys)}, {len(cnt)}, "
                          f"{len(ints)}, {len(floats)} for {n} panes")
    check.require("combine_partials", keys.shape[1] == k and ints.shape[1] == len(iops)
                  and floats.shape[1] == len(fops),
                  lambda: f"every piece {k} key words, {len(iops)} integer and {len(fops)} "
                          f"float partials, got {keys.shape[1]}, {ints.shape[1]}, "
                          f"{floats.shape[1]}")
