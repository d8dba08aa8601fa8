"""Grouped aggregation into slide-sized panes (the per-task "fragment" of a window query).

A window ω(range, slide) is assembled from panes of one slide each (§2.3): a
task aggregates its batch per (pane, group) into *pane partials*, and windows
are sums of ``range / slide`` consecutive panes.  Input rows arrive in event-time
order, so a batch's panes come one after another: the kernel keeps one
accumulator per group for the current pane and flushes the groups it touched
when the pane changes.

Aggregate state of a group: ``count`` (int64), int slots (int64) and float slots
(float64).  Each slot has an operation: :data:`SUM`, :data:`MIN` or :data:`MAX`
(avg = SUM slot / count; count needs no slot).
"""

from __future__ import annotations

import numpy as np

from scabbard.kernels import _check as check
from scabbard.kernels import hashtable as ht
from scabbard.kernels._jit import inline, kernel, scan

SUM, MIN, MAX = 0, 1, 2


@inline
def combine(op: int, a, b):
    """Fold ``b`` into ``a`` (numba specialises it for int64 and float64)."""
    if op == SUM:
        return a + b
    if op == MIN:
        return a if a < b else b
    return a if a > b else b


@kernel
def _grow_rows(a: np.ndarray, n: int) -> np.ndarray:
    out = np.empty((n,) + a.shape[1:], dtype=a.dtype)
    out[: a.shape[0]] = a
    return out


DONE, NEED_ROOM, NEED_OUT = 0, 1, 2


@scan
def _agg_scan(ts, shift: int, keys, ivals, fvals, iops, fops, slide: int, table,
              acc_c, acc_i, acc_f, touched, o_pane, o_gid, o_cnt, o_i, o_f, st) -> int:
    """Aggregate rows from st[0] until done or blocked.  st = (row, rows out, touched, pane).
    Row ``r``'s event time is ``ts[r] + shift``."""
    n = ts.shape[0]
    k = keys.shape[1]
    ni, nf = ivals.shape[1], fvals.shape[1]
    slots, tkeys, hashes, free, meta = table
    r, m, nt, pane = st[0], st[1], st[2], st[3]
    cap = o_pane.shape[0]
    end = (pane + 1) * slide  # the pane's end: rows before it are in it (event-time order)
    while True:
        if r < n:
            t = ts[r] + shift
            p = pane if t < end else t // slide  # a division only where a pane starts
        else:
            p = pane + 1
        if p != pane:  # flush the finished pane's groups
            if m + nt > cap:
                st[0], st[1], st[2], st[3] = r, m, nt, pane
                return NEED_OUT
            for t in range(nt):
                g = touched[t]
                o_pane[m] = pane
                o_gid[m] = g
                o_cnt[m] = acc_c[g]
                for j in range(ni):
                    o_i[m, j] = acc_i[g, j]
                for j in range(nf):
                    o_f[m, j] = acc_f[g, j]
                acc_c[g] = 0
                m += 1
            nt = 0
            pane = p
            end = (p + 1) * slide
        if r == n:
            break
        h = ht.hash_key(keys, r, k)
        g = ht.find_in(slots, tkeys, hashes, keys, r, h)
        if g < 0:
            if not ht.has_room(slots, tkeys, meta):  # the driver grows the table
                st[0], st[1], st[2], st[3] = r, m, nt, pane
                return NEED_ROOM
            g = ht.insert_in(slots, tkeys, hashes, free, meta, keys, r, h)
        if acc_c[g] == 0:
            touched[nt] = g
            nt += 1
            for j in range(ni):
                acc_i[g, j] = ivals[r, j]
            for j in range(nf):
                acc_f[g, j] = fvals[r, j]
        else:
            for j in range(ni):
                acc_i[g, j] = combine(iops[j], acc_i[g, j], ivals[r, j])
            for j in range(nf):
                acc_f[g, j] = combine(fops[j], acc_f[g, j], fvals[r, j])
        acc_c[g] += 1
        r += 1
    st[0], st[1], st[2], st[3] = r, m, nt, pane
    return DONE


@kernel
def _pane_aggregate(ts, shift, keys, ivals, fvals, iops, fops, slide):
    n = ts.shape[0]
    ni, nf = ivals.shape[1], fvals.shape[1]
    table = ht.new_table(keys.shape[1], 64)
    cap = table.keys.shape[0]
    acc_c = np.zeros(cap, dtype=np.int64)
    acc_i = np.empty((cap, ni), dtype=np.int64)
    acc_f = np.empty((cap, nf), dtype=np.float64)
    touched = np.empty(cap, dtype=np.int64)
    out = max(16, min(n, 4096))
    o_pane = np.empty(out, dtype=np.int64)
    o_gid = np.empty(out, dtype=np.int64)
    o_cnt = np.empty(out, dtype=np.int64)
    o_i = np.empty((out, ni), dtype=np.int64)
    o_f = np.empty((out, nf), dtype=np.float64)
    st = np.zeros(4, dtype=np.int64)
    st[3] = (ts[0] + shift) // slide if n > 0 else 0
    while True:
        status = _agg_scan(ts, shift, keys, ivals, fvals, iops, fops, slide, table,
                           acc_c, acc_i, acc_f, touched, o_pane, o_gid, o_cnt, o_i, o_f, st)
        if status == DONE:
            break
        if status == NEED_ROOM:
            table = ht.grow(table)
            if table.keys.shape[0] > acc_c.shape[0]:  # the table grew: so do the accumulators
                cap = table.keys.shape[0]
                acc2 = np.zeros(cap, dtype=np.int64)
                acc2[: acc_c.shape[0]] = acc_c
                acc_c = acc2
                acc_i = _grow_rows(acc_i, cap)
                acc_f = _grow_rows(acc_f, cap)
                touched = _grow_rows(touched, cap)
        else:
            size = 2 * o_pane.shape[0] + st[2]
            o_pane, o_gid, o_cnt = _grow_rows(o_pane, size), _grow_rows(o_gid, size), _grow_rows(o_cnt, size)
            o_i, o_f = _grow_rows(o_i, size), _grow_rows(o_f, size)
    m = st[1]
    groups = table.meta[1]  # gids handed out
    return (o_pane[:m], o_gid[:m], o_cnt[:m], o_i[:m], o_f[:m], table.keys[:groups].copy())


@scan
def _global_scan(ts, shift: int, ivals, fvals, iops, fops, slide: int, starts, o_pane, o_cnt,
                 o_i, o_f, m0: int) -> int:
    """Fold rows in event-time order into the partials after the first ``m0`` of ``o_*``
    (the rows of an earlier piece of the same stream): the panes' first rows into
    ``starts``, then each pane's slots folded, a slot at a time, in a register - a division
    only where a pane starts, and the rows folded in their order (the hash aggregation's).
    Rows in partial ``m0 - 1``'s pane continue it, as if both pieces were one.  Returns the
    partials' count."""
    n = ts.shape[0]
    ni, nf = ivals.shape[1], fvals.shape[1]
    if n == 0:
        return m0
    base = m0
    t = ts[0] + shift
    if m0 > 0 and t // slide == o_pane[m0 - 1]:
        base = m0 - 1  # the piece starts in the last partial's pane
    m = 0
    end = 0
    for r in range(n):
        t = ts[r] + shift
        if m == 0 or t >= end:
            p = t // slide
            starts[m] = r
            o_pane[base + m] = p
            end = (p + 1) * slide
            m += 1
    starts[m] = n
    for g in range(m):
        lo, hi = starts[g], starts[g + 1]
        q = base + g
        more = q < m0  # continues a partial: its value is the fold so far
        o_cnt[q] = (o_cnt[q] if more else 0) + hi - lo
        first = lo if more else lo + 1
        for j in range(ni):
            op = iops[j]
            a = o_i[q, j] if more else ivals[lo, j]
            if op == SUM:
                for r in range(first, hi):
                    a += ivals[r, j]
            elif op == MIN:
                for r in range(first, hi):
                    a = min(a, ivals[r, j])
            else:
                for r in range(first, hi):
                    a = max(a, ivals[r, j])
            o_i[q, j] = a
        for j in range(nf):
            op = fops[j]
            b = o_f[q, j] if more else fvals[lo, j]
            for r in range(first, hi):
                b = combine(op, b, fvals[r, j])
            o_f[q, j] = b
    return base + m


@kernel
def _global_partials(first, last, n, ni: int, nf: int, slide):
    """Room for a global aggregate's partials of ``n`` rows whose event times run from
    ``first`` to ``last``: one per pane between them, at most one per row."""
    cap = 0
    if n > 0:
        cap = min(n, last // slide - first // slide + 1)
    return (np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int64),
            np.empty((cap, ni), dtype=np.int64), np.empty((cap, nf), dtype=np.float64))


@kernel
def _global_fold(ts, shift, ivals, fvals, iops, fops, slide, out, m0, starts):
    o_pane, o_cnt, o_i, o_f = out
    return _global_scan(ts, shift, ivals, fvals, iops, fops, slide, starts, o_pane, o_cnt,
                        o_i, o_f, m0)


def global_aggregate(first: int, last: int, n: int, pieces, ni: int, nf: int, iops, fops,
                     slide: int):
    """A global aggregate's pane partials (no group keys), as :func:`pane_aggregate` returns
    them, of ``n`` rows whose event times run from ``first`` to ``last``, folded piece by
    piece: ``pieces`` yields each piece's ``(ts, shift, ivals, fvals)`` in order, its event
    times ``ts + shift`` (one piece: the rows themselves; a fragment's, its front kernel's
    output piece by piece, which stays in cache, and part by part of a batch that spans
    replayed copies).  Each piece continues the last partial, so any cut gives the same
    partials."""
    out = _global_partials(np.int64(first), np.int64(last), n, ni, nf, slide)
    starts = np.empty(0, dtype=np.int64)
    m = 0
    for p_ts, shift, p_i, p_f in pieces:
        if len(starts) < len(p_ts) + 1:
            starts = np.empty(len(p_ts) + 1, dtype=np.int64)
        m = _global_fold(p_ts, np.int64(shift), p_i, p_f, iops, fops, slide, out, m, starts)
    o_pane, o_cnt, o_i, o_f = out
    return (o_pane[:m], np.zeros(m, dtype=np.int64), o_cnt[:m], o_i[:m], o_f[:m],
            np.zeros((1 if m > 0 else 0, 0), dtype=np.int64))


def _rows(a, n: int, dtype) -> np.ndarray:
    """``a`` as a C-contiguous (n, k) array (a 1-d array is one column)."""
    a = np.ascontiguousarray(a, dtype=dtype)
    a = a.reshape(n, 1) if a.ndim == 1 else a
    if a.ndim != 2 or a.shape[0] != n:
        raise ValueError(f"expected {n} rows, got an array of shape {a.shape}")
    return a


def pane_aggregate(ts, keys, ivals, fvals, iops, fops, slide_ms: int, ordered: bool = False,
                   shift: int = 0):
    """Aggregate rows (in event-time order) per slide-sized pane and group key.

    Row ``i``'s event time is ``ts[i] + shift`` (a replayed copy's timestamps, whose shift
    is deferred: :class:`scabbard.batch.ReplayBatch`).

    ``ordered``: the caller guarantees the event-time order (the engine's tasks come from
    an ordered stream), so the pass that checks it is skipped.

    Returns pane partials ``(pane, gid, count, ivals, fvals, group_keys)`` sorted by
    pane: one entry per (pane, group) present, with task-local group ids whose keys
    are ``group_keys[gid]``.  ``ivals``/``fvals`` are the per-row inputs of the int and
    float slots, combined with ``iops``/``fops`` (:data:`SUM`, :data:`MIN`, :data:`MAX`).
    """
    ts = np.ascontiguousarray(ts, dtype=np.int64)
    n = len(ts)
    keys, ivals, fvals = (_rows(a, n, t) for a, t in ((keys, np.int64), (ivals, np.int64),
                                                       (fvals, np.float64)))
    iops = np.ascontiguousarray(iops, dtype=np.int64)
    fops = np.ascontiguousarray(fops, dtype=np.int64)
    if len(iops) != ivals.shape[1] or len(fops) != fvals.shape[1]:
        raise ValueError("one operation per int and float slot")
    if slide_ms <= 0:
        raise ValueError("slide must be positive")
    if not ordered and n > 1 and np.any(ts[1:] < ts[:-1]):
        raise ValueError("rows must be in event-time order")
    if keys.shape[1] == 0:  # a global aggregate: folded in registers, no hash table
        edges = (int(ts[0]) + shift, int(ts[-1]) + shift) if n else (0, 0)
        return global_aggregate(*edges, n, [(ts, shift, ivals, fvals)], ivals.shape[1],
                                fvals.shape[1], iops, fops, slide_ms)
    return _pane_aggregate(ts, np.int64(shift), keys, ivals, fvals, iops, fops, slide_ms)


@kernel
def _key_ids(keys):
    n = keys.shape[0]
    table = ht.new_table(keys.shape[1], max(16, n))
    gid = np.empty(n, dtype=np.int64)
    slots, tkeys, hashes, free, meta = table
    for r in range(n):  # the table was sized for n keys: no growth, no rebinding
        h = ht.hash_key(keys, r, keys.shape[1])
        g = ht.find_in(slots, tkeys, hashes, keys, r, h)
        if g < 0:
            g = ht.insert_in(slots, tkeys, hashes, free, meta, keys, r, h)
        gid[r] = g
    return gid, tkeys[: meta[1]].copy()


def key_ids(keys: np.ndarray):
    """Dense ids of composite keys: ``(gid per row, keys of each gid)``."""
    keys = _rows(keys, len(keys), np.int64)
    return _key_ids(keys)


# -- Grizzly's specialisations: aggregation into a dense array ------------------------
DENSE_MAX = 1 << 16  # the most (pane-local) groups a dense-array aggregation addresses


@scan
def _dense_scan(ts, keys, ivals, fvals, iops, fops, slide: int, lo, span, gid_of, group_keys,
                acc_c, acc_i, acc_f, touched, o_pane, o_gid, o_cnt, o_i, o_f) -> int:
    """:func:`_agg_scan` with the group found by arithmetic - ``sum((key_j - lo_j) *
    stride_j)`` - instead of a hash probe; a key outside ``[lo_j, lo_j + span_j)`` fails the
    guard: (-1 - row, groups) - the caller deoptimises.  Returns (partial rows, groups)."""
    n = ts.shape[0]
    k = keys.shape[1]
    ni, nf = ivals.shape[1], fvals.shape[1]
    groups, nt, m = 0, 0, 0
    pane = ts[0] // slide if n > 0 else 0
    for r in range(n + 1):
        p = ts[r] // slide if r < n else pane + 1
        if p != pane:  # flush the finished pane's groups
            for t in range(nt):
                d = touched[t]
                g = gid_of[d]
                o_pane[m] = pane
                o_gid[m] = g
                o_cnt[m] = acc_c[d]
                for j in range(ni):
                    o_i[m, j] = acc_i[d, j]
                for j in range(nf):
                    o_f[m, j] = acc_f[d, j]
                acc_c[d] = 0
                m += 1
            nt = 0
            pane = p
        if r == n:
            break
        d = 0
        for j in range(k):
            x = keys[r, j] - lo[j]
            if x < 0 or x >= span[j]:
                return -1 - r, groups
            d = d * span[j] + x
        if gid_of[d] < 0:  # the group's first row in this task: its id, as a hash table's
            gid_of[d] = groups
            for j in range(k):
                group_keys[groups, j] = keys[r, j]
            groups += 1
        if acc_c[d] == 0:
            touched[nt] = d
            nt += 1
            for j in range(ni):
                acc_i[d, j] = ivals[r, j]
            for j in range(nf):
                acc_f[d, j] = fvals[r, j]
        else:
            for j in range(ni):
                acc_i[d, j] = combine(iops[j], acc_i[d, j], ivals[r, j])
            for j in range(nf):
                acc_f[d, j] = combine(fops[j], acc_f[d, j], fvals[r, j])
        acc_c[d] += 1
    return m, groups


@kernel
def _dense_aggregate(ts, keys, ivals, fvals, iops, fops, slide, lo, span):
    n, k = ts.shape[0], keys.shape[1]
    ni, nf = ivals.shape[1], fvals.shape[1]
    size = 1
    for j in range(k):
        size *= span[j]
    panes = (ts[n - 1] // slide - ts[0] // slide + 1) if n > 0 else 1
    out = max(1, min(n, size * panes))  # a partial per (pane, group) at most
    gid_of = np.full(size, -1, dtype=np.int64)
    group_keys = np.empty((min(size, max(n, 1)), k), dtype=np.int64)
    acc_c = np.zeros(size, dtype=np.int64)
    acc_i = np.empty((size, ni), dtype=np.int64)
    acc_f = np.empty((size, nf), dtype=np.float64)
    touched = np.empty(size, dtype=np.int64)
    o_pane = np.empty(out, dtype=np.int64)
    o_gid = np.empty(out, dtype=np.int64)
    o_cnt = np.empty(out, dtype=np.int64)
    o_i = np.empty((out, ni), dtype=np.int64)
    o_f = np.empty((out, nf), dtype=np.float64)
    m, groups = _dense_scan(ts, keys, ivals, fvals, iops, fops, slide, lo, span, gid_of,
                            group_keys, acc_c, acc_i, acc_f, touched, o_pane, o_gid, o_cnt,
                            o_i, o_f)
    h = max(m, 0)  # m < 0: a key failed the guard (nothing of it is used)
    return m, (o_pane[:h], o_gid[:h], o_cnt[:h], o_i[:h], o_f[:h], group_keys[:groups].copy())


def dense_pane_aggregate(ts, keys, ivals, fvals, iops, fops, slide_ms: int, lo, span):
    """:func:`pane_aggregate` (ordered rows) into a dense array: group ``(k_0, ..., k_j)`` at
    ``sum((k_j - lo_j) * stride_j)``, for keys known to lie in ``[lo_j, lo_j + span_j)``
    (Grizzly's specialisation for a small key range: no hash, no probe).  The same partials,
    row for row (group ids in order of first appearance, as the hash table hands them out);
    ``None`` when a key fails the guard - the caller runs :func:`pane_aggregate` instead
    (deoptimisation).  At most :data:`DENSE_MAX` groups."""
    check.arrays("dense_pane_aggregate", np.int64, 1, ts=ts, iops=iops, fops=fops)
    check.arrays("dense_pane_aggregate", np.int64, 2, keys=keys, ivals=ivals)
    check.arrays("dense_pane_aggregate", np.float64, 2, fvals=fvals)
    check.require("dense_pane_aggregate", len(keys) == len(ivals) == len(fvals) == len(ts),
                  "ts, keys, ivals and fvals must have one row each")
    check.require("dense_pane_aggregate", (ivals.shape[1], fvals.shape[1])
                  == (len(iops), len(fops)), "one operation per int and float slot")
    check.counts("dense_pane_aggregate", slide_ms=slide_ms)
    lo = np.ascontiguousarray(lo, dtype=np.int64)
    span = np.ascontiguousarray(span, dtype=np.int64)
    if len(lo) != keys.shape[1] or len(span) != len(lo) or np.any(span < 1) \
            or int(np.prod(span, dtype=np.float64)) > DENSE_MAX:
        raise ValueError(f"a dense aggregation needs a range per key word, at most "
                         f"{DENSE_MAX:,} groups in all")
    m, parts = _dense_aggregate(ts, keys, ivals, fvals, iops, fops, slide_ms, lo, span)
    return None if m < 0 else parts


def key_range(keys):
    """Per key word of ``keys`` (int64 rows x words), the smallest and largest value (the
    instrumented variant's profile of a task's group keys); ``lo > hi`` for no rows."""
    check.arrays("key_range", np.int64, 2, keys=keys)
    return _key_range(keys)


@kernel
def _key_range(keys):
    k = keys.shape[1]
    lo = np.full(k, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(k, np.iinfo(np.int64).min, dtype=np.int64)
    for j in range(k):  # a word at a time, in locals: min and max vectorise (4.2 -> 0.2 ns a
        a, b = lo[j], hi[j]  # row, where a branch per row stored into lo and hi)
        for r in range(keys.shape[0]):
            x = keys[r, j]
            a = min(a, x)
            b = max(b, x)
        lo[j], hi[j] = a, b
    return lo, hi
