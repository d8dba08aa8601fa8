"""The sequential window assembler's state machine across tasks (§2.3): the window's pane
partials in a FIFO (:class:`PaneFifo`), the groups in a key table, the window state of
:mod:`scabbard.kernels.window`; and the rows of a key-partitioned assembly split and merged
(PipeFabric's partitions).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from scabbard.kernels import _check as check
from scabbard.kernels import hashtable as ht
from scabbard.kernels._jit import inline, kernel, scan
from scabbard.kernels.aggregate import combine
from scabbard.kernels.rows import (
    ResultRows,
    check_selection,
    emit_window_rows,
    out_new,
    out_reserve,
    rollup_table,
)
from scabbard.kernels.window import (
    INT64_MIN,
    Deques,
    WindowState,
    add_partial,
    clear_window_state,
    remove_partial,
    reserve_window_state,
)

# -- the assembler's state machine (sequential, across tasks) -------------------------------------
# The window's pane partials, oldest first, each (pane, group) ONCE: a partial of a group
# whose newest entry is of the same pane is folded into that entry (``last[g]``: the index
# of group g's newest entry, checked before use - a stale one points below the head, past
# the tail, or at another (group, pane)).  So the state is one partial per group per pane
# of the window - the size of the key space, not of the tuples the window saw.


class PaneFifo(NamedTuple):
    """The assembler's window of pane partials: entries ``[head_tail[0], head_tail[1])`` of
    the first five arrays, oldest first (numba takes it whole; its fields by name)."""

    pane: np.ndarray       # int64[n]: the entry's pane
    gid: np.ndarray        # int64[n]: its group (the key table's id)
    cnt: np.ndarray        # int64[n]: tuples it folded
    ints: np.ndarray       # int64[n, ni]: integer aggregate partials
    floats: np.ndarray     # float64[n, nf]: float aggregate partials
    head_tail: np.ndarray  # int64[2]: the live entries' first and end index
    last: np.ndarray       # int64[G]: group g's newest entry (checked before use), -1 none


@kernel
def _new_pane_fifo(ni: int, nf: int, n: int):
    return PaneFifo(np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64),
                    np.empty(n, dtype=np.int64), np.empty((n, ni), dtype=np.int64),
                    np.empty((n, nf), dtype=np.float64), np.zeros(2, dtype=np.int64),
                    np.full(64, -1, dtype=np.int64))


@kernel
def _fifo_room_for_groups(fifo, groups: int):
    """``fifo`` whose ``last`` has room for group ids < ``groups``."""
    last = fifo.last
    if groups <= last.shape[0]:
        return fifo
    grown = np.full(max(groups, 2 * last.shape[0]), -1, dtype=np.int64)
    grown[:last.shape[0]] = last
    return PaneFifo(fifo.pane, fifo.gid, fifo.cnt, fifo.ints, fifo.floats, fifo.head_tail,
                    grown)


def pane_fifo_partials(fifo: PaneFifo, table) -> tuple[np.ndarray, ...]:
    """The live entries of ``fifo``, oldest first, copied: pane, the group's keys (rows of
    ``table``'s keys), count, integer and float partials (a window state as pane partials,
    what feeding them to a fresh state rebuilds)."""
    check.states("pane_fifo_partials", PaneFifo, fifo=fifo)
    check.states("pane_fifo_partials", ht.KeyTable, table=table)
    h0, h1 = (int(x) for x in fifo.head_tail)
    return (fifo.pane[h0:h1].copy(), table.keys[fifo.gid[h0:h1]], fifo.cnt[h0:h1].copy(),
            fifo.ints[h0:h1].copy(), fifo.floats[h0:h1].copy())


@kernel
def _reserve_pane_fifo(fifo, extra: int):
    """``fifo`` with room for ``extra`` more entries (compacting or growing)."""
    f_p, f_g, f_c, f_i, f_f, ht_, last = fifo
    live = ht_[1] - ht_[0]
    if ht_[1] + extra <= f_p.shape[0]:
        return fifo
    if live + extra <= f_p.shape[0] // 2 + 1:  # enough room once the evicted head is dropped
        f_p[:live] = f_p[ht_[0]:ht_[1]]
        f_g[:live] = f_g[ht_[0]:ht_[1]]
        f_c[:live] = f_c[ht_[0]:ht_[1]]
        f_i[:live] = f_i[ht_[0]:ht_[1]]
        f_f[:live] = f_f[ht_[0]:ht_[1]]
        ht_[0], ht_[1] = 0, live
        return fifo
    n = max(2 * f_p.shape[0], 2 * (live + extra))
    new = PaneFifo(np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64),
                   np.empty(n, dtype=np.int64), np.empty((n, f_i.shape[1]), dtype=np.int64),
                   np.empty((n, f_f.shape[1]), dtype=np.float64), ht_, last)
    new.pane[:live] = f_p[ht_[0]:ht_[1]]
    new.gid[:live] = f_g[ht_[0]:ht_[1]]
    new.cnt[:live] = f_c[ht_[0]:ht_[1]]
    new.ints[:live] = f_i[ht_[0]:ht_[1]]
    new.floats[:live] = f_f[ht_[0]:ht_[1]]
    ht_[0], ht_[1] = 0, live
    return new


@inline
def _close(ws, dqi, dqf, slots, tkeys, hashes, free, meta, fifo, out, m: int, iops, fops,
           p: int, panes: int, slide: int, emit: bool, sel, rtab) -> int:
    """Close pane ``p``: evict panes <= p - panes, then emit the window ending at p."""
    f_p, f_g, f_c, f_i, f_f, ht_, _ = fifo
    while ht_[0] < ht_[1] and f_p[ht_[0]] <= p - panes:
        h = ht_[0]
        g = f_g[h]
        if remove_partial(ws, dqi, dqf, g, f_p[h], f_c[h], f_i, f_f, h, iops, fops):
            ht.remove_in(slots, hashes, free, meta, g)
        ht_[0] += 1
    if emit and ws.nact[0] > 0:
        end = (p + 1) * slide
        m = emit_window_rows(ws, dqi, dqf, tkeys, iops, fops, end - panes * slide, end, out, m,
                             sel, rtab)
    return m


# blocked-scan outcomes
DONE, NEED_ROOM, NEED_OUT, NEED_FIFO = 0, 1, 2, 3


@scan
def _assemble_until_blocked(ws, dqi, dqf, table, fifo, out, pos, cur, e_pane, e_keys, e_cnt,
                            e_i, e_f, hi: int, iops, fops, panes: int, slide: int, emit: bool,
                            upto: int, sel, rtab) -> int:
    """Feed entries pos[0]..hi (pane order), then close panes < ``upto``.

    ``cur[0]`` is the open pane (the smallest not yet closed; INT64_MIN before any).
    pos = (next entry, rows written).  Returns DONE, or NEED_ROOM (the key table is full) /
    NEED_OUT (the output may not hold the next window) / NEED_FIFO (the pane FIFO is full)
    for the driver.
    """
    slots, tkeys, hashes, free, meta = table
    f_p, f_g, f_c, f_i, f_f, ht_, last = fifo
    r, m = pos[0], pos[1]
    cap = out.start.shape[0]
    nact = ws.nact
    k = e_keys.shape[1]
    while True:
        target = e_pane[r] if r < hi else upto
        if r >= hi and target == INT64_MIN:
            break
        if cur[0] == INT64_MIN:
            cur[0] = target
        while cur[0] < target:
            if nact[0] == 0 and ht_[0] == ht_[1]:
                cur[0] = target  # nothing in the window: skip the empty panes at once
                break
            if m + nact[0] > cap:
                pos[0], pos[1] = r, m
                return NEED_OUT
            m = _close(ws, dqi, dqf, slots, tkeys, hashes, free, meta, fifo, out, m, iops, fops,
                       cur[0], panes, slide, emit, sel, rtab)
            cur[0] += 1
        if r >= hi:
            break
        h = ht.hash_key(e_keys, r, k)
        g = ht.find_in(slots, tkeys, hashes, e_keys, r, h)
        if g < 0:
            if not ht.has_room(slots, tkeys, meta):
                pos[0], pos[1] = r, m
                return NEED_ROOM
            g = ht.insert_in(slots, tkeys, hashes, free, meta, e_keys, r, h)
        t = last[g]
        fold = ht_[0] <= t < ht_[1] and f_g[t] == g and f_p[t] == e_pane[r]
        if not fold and ht_[1] >= f_p.shape[0]:  # (the row again once there is room: its
            pos[0], pos[1] = r, m  # group, inserted, is found then)
            return NEED_FIFO
        add_partial(ws, dqi, dqf, g, e_pane[r], e_cnt[r], e_i, e_f, r, iops, fops)
        if fold:
            f_c[t] += e_cnt[r]  # the group's partial of this pane: fold it in
            for j in range(e_i.shape[1]):
                f_i[t, j] = combine(iops[j], f_i[t, j], e_i[r, j])
            for j in range(e_f.shape[1]):
                f_f[t, j] = combine(fops[j], f_f[t, j], e_f[r, j])
        else:
            t = ht_[1]
            f_p[t], f_g[t], f_c[t] = e_pane[r], g, e_cnt[r]
            for j in range(e_i.shape[1]):
                f_i[t, j] = e_i[r, j]
            for j in range(e_f.shape[1]):
                f_f[t, j] = e_f[r, j]
            ht_[1] += 1
            last[g] = t
        r += 1
    pos[0], pos[1] = r, m
    return DONE


@scan
def _flush_until_blocked(ws, dqi, dqf, table, fifo, out, pos, cur, iops, fops, panes: int,
                         slide: int, sel, rtab) -> int:
    """End of stream: close panes until the window is empty (NEED_OUT when full)."""
    slots, tkeys, hashes, free, meta = table
    ht_ = fifo.head_tail
    m = pos[1]
    cap = out.start.shape[0]
    while ws.nact[0] > 0 or ht_[0] < ht_[1]:
        if m + ws.nact[0] > cap:
            pos[1] = m
            return NEED_OUT
        m = _close(ws, dqi, dqf, slots, tkeys, hashes, free, meta, fifo, out, m, iops, fops,
                   cur[0], panes, slide, True, sel, rtab)
        cur[0] += 1
    pos[1] = m
    return DONE


@kernel
def _reset_assembly(ws, dqi, dqf, fifo) -> None:
    """The kernel of :func:`reset_assembly`."""
    clear_window_state(ws, dqi, dqf)
    fifo.head_tail[0] = 0
    fifo.head_tail[1] = 0


@kernel
def _assemble_partials(ws, dqi, dqf, table, fifo, out, cur, e_pane, e_keys, e_cnt, e_i, e_f,
                       iops, fops, panes: int, slide: int, emit: bool, upto: int, m0: int, sel):
    """The kernel of :func:`assemble_partials`: drives :func:`_assemble_until_blocked`,
    growing the key table (and the group-indexed state with it), the pane FIFO and the output
    when it blocks - as the groups come, not by the rows fed: a reloaded partition's many
    partials of few groups hold room for its groups only."""
    n = e_pane.shape[0]
    ws, dqi, dqf = reserve_window_state(ws, dqi, dqf, table.keys.shape[0], n, iops, fops)
    fifo = _fifo_room_for_groups(fifo, ws.cnt.shape[0])
    rtab = rollup_table(sel, ws.cnt.shape[0])
    pos = np.array([0, m0], dtype=np.int64)
    while True:
        status = _assemble_until_blocked(ws, dqi, dqf, table, fifo, out, pos, cur, e_pane, e_keys,
                                         e_cnt, e_i, e_f, n, iops, fops, panes, slide, emit,
                                         upto, sel, rtab)
        if status == DONE:
            break
        if status == NEED_ROOM:  # group ids stay below the table's capacity of ids
            table = ht.grow(table)
            ws, dqi, dqf = reserve_window_state(ws, dqi, dqf, table.keys.shape[0], 0, iops, fops)
            fifo = _fifo_room_for_groups(fifo, ws.cnt.shape[0])
            rtab = rollup_table(sel, ws.cnt.shape[0])
        elif status == NEED_FIFO:  # compacted, or grown to hold as many again as it holds
            live = fifo.head_tail[1] - fifo.head_tail[0]  # (or the rows left, if fewer)
            fifo = _reserve_pane_fifo(fifo, max(64, min(n - pos[0], live)))
        else:
            out = out_reserve(out, 2 * out.start.shape[0] + ws.nact[0])
    return ws, dqi, dqf, table, fifo, out, pos[1]


@kernel
def _flush_windows(ws, dqi, dqf, table, fifo, out, cur, iops, fops, panes: int, slide: int,
                   sel):
    """The kernel of :func:`flush_windows`."""
    pos = np.zeros(2, dtype=np.int64)
    rtab = rollup_table(sel, ws.cnt.shape[0])
    while _flush_until_blocked(ws, dqi, dqf, table, fifo, out, pos, cur, iops, fops, panes,
                               slide, sel, rtab) != DONE:
        out = out_reserve(out, 2 * out.start.shape[0] + ws.nact[0])
    return out, pos[1]


# -- key-partitioned assembly ---------------------------------------------------------------------
@inline
def _by_partition(pid, starts, parts: int, values):
    """``values`` (one a row) grouped by each row's partition ``pid``, each partition's in
    their order (a counting sort); ``starts`` holds partition p's row count at ``p + 1`` and
    becomes the partitions' offsets."""
    for p in range(parts):
        starts[p + 1] += starts[p]
    at = starts[:parts].copy()
    out = np.empty(pid.shape[0], dtype=np.int64)
    for r in range(pid.shape[0]):
        out[at[pid[r]]] = values[r]
        at[pid[r]] += 1
    return out


@kernel
def _partition_rows(keys, cols, parts: int):
    """The kernel of :func:`partition_rows`."""
    n = keys.shape[0]
    pid = np.empty(n, dtype=np.int64)
    starts = np.zeros(parts + 1, dtype=np.int64)
    for r in range(n):
        h = np.uint64(ht.SEED)
        for j in range(cols.shape[0]):
            h = ht.mix(h, keys[r, cols[j]])
        p = np.int64((h >> np.uint64(32)) % np.uint64(parts))
        pid[r] = p
        starts[p + 1] += 1
    return _by_partition(pid, starts, parts, np.arange(n)), starts


@inline
def route_mix(h: np.uint64, v: np.int64) -> np.uint64:
    """Fold one key word into a route's hash (from ``ht.SEED``): a multiply a word
    (Fibonacci hashing)."""
    return (h ^ np.uint64(v)) * np.uint64(0x9E3779B97F4A7C15)


@inline
def route_part(h: np.uint64, parts: int) -> int:
    """The partition of a route's hash: its high half folded in, mapped onto ``parts`` by a
    multiply and a shift (no division).  :func:`route_rows` and the dataflow's generated
    routing kernels (:class:`~scabbard.kernels.codegen.FrontSpec`'s ``route``) both route by
    these two, so a key's tuples and its checkpointed state go to one partition."""
    h ^= h >> np.uint64(32)
    return np.int64(((h & np.uint64(0xFFFFFFFF)) * np.uint64(parts)) >> np.uint64(32))


ROUTE_SKIP = 255  # a routing kernel's partition of a row the selections drop
MOST_ROUTED = 254  # the most partitions a routing kernel's uint8 partitions can name


@scan
def _scatter_rows(of, out_rows, counts):
    """Each row number ``i`` appended, in order, to the list of its partition ``of[i]``
    (``ROUTE_SKIP``: to none): ``out_rows[p, :counts[p]]`` are partition ``p``'s rows.  Up to
    four partitions count in registers - every list is written at its end on every row, its
    count moved on by whether the row is its own - where a count in memory made each row wait
    for the row before it (LRB1, 2 partitions: the generated kernel hashing and scattering in
    one loop 3.8 ns a tuple; its partitions first, then this, 1.1-1.2)."""
    parts = out_rows.shape[0]
    n = of.shape[0]
    if parts > 4:
        for i in range(n):
            p = of[i]
            if p < parts:
                out_rows[p, counts[p]] = i
                counts[p] += 1
        return
    c0 = 0
    c1 = 0
    c2 = 0
    c3 = 0
    for i in range(n):
        p = of[i]
        out_rows[0, c0] = i
        c0 += p == 0
        if parts > 1:
            out_rows[1, c1] = i
            c1 += p == 1
            if parts > 2:
                out_rows[2, c2] = i
                c2 += p == 2
                if parts > 3:
                    out_rows[3, c3] = i
                    c3 += p == 3
    counts[0] = c0
    if parts > 1:
        counts[1] = c1
    if parts > 2:
        counts[2] = c2
    if parts > 3:
        counts[3] = c3


@kernel
def _route_rows(rows, keys, parts: int):
    """The kernel of :func:`route_rows`."""
    n, k = keys.shape
    pid = np.empty(n, dtype=np.int64)
    starts = np.zeros(parts + 1, dtype=np.int64)
    for r in range(n):
        h = np.uint64(ht.SEED)
        for j in range(k):
            h = route_mix(h, keys[r, j])
        p = route_part(h, parts)
        pid[r] = p
        starts[p + 1] += 1
    return _by_partition(pid, starts, parts, rows), starts


@kernel
def _merge_rows(s_t, e_t, k_t, c_t, i_t, f_t):
    """The kernel of :func:`merge_rows`."""
    parts = len(e_t)
    n = 0
    for p in range(parts):
        n += e_t[p].shape[0]
    k, ni, nf = k_t[0].shape[1], i_t[0].shape[1], f_t[0].shape[1]
    out = out_new(k, ni, nf, n)
    o_s, o_e, o_k, o_c, o_i, o_f = out
    pos = np.zeros(parts, dtype=np.int64)
    m = 0
    while True:
        found = False
        w = 0
        for p in range(parts):
            if pos[p] < e_t[p].shape[0] and (not found or e_t[p][pos[p]] < w):
                w = e_t[p][pos[p]]
                found = True
        if not found:
            break
        for p in range(parts):
            ends = e_t[p]
            r = pos[p]
            while r < ends.shape[0] and ends[r] == w:
                o_s[m] = s_t[p][r]
                o_e[m] = w
                for j in range(k):
                    o_k[m, j] = k_t[p][r, j]
                o_c[m] = c_t[p][r]
                for j in range(ni):
                    o_i[m, j] = i_t[p][r, j]
                for j in range(nf):
                    o_f[m, j] = f_t[p][r, j]
                m += 1
                r += 1
            pos[p] = r
    return o_s[:m], o_e[:m], o_k[:m], o_c[:m], o_i[:m], o_f[:m]


# -- what Python calls: the kernels above behind the checks of scabbard.kernels._check -----------
def empty_pane_fifo(ints: int, floats: int, entries: int = 1024) -> PaneFifo:
    """An assembler's empty window of pane partials with ``ints`` integer and ``floats`` float
    aggregate slots, and room for ``entries`` partials (at least 16) before growing."""
    _sizes("empty_pane_fifo", ints=ints, floats=floats, entries=entries)
    return _new_pane_fifo(ints, floats, max(16, entries))


def _sizes(kernel: str, **named) -> None:
    for name, n in named.items():
        check.require(kernel, isinstance(n, int | np.integer) and 0 <= n,
                      lambda name=name, n=n: f"{name} must be an integer >= 0, got {n!r}")


def _assembler_state(kernel: str, ws, dqi, dqf, table, fifo, out, cur, iops, fops,
                     sel) -> None:
    """The assembler's state, as its constructors made it, and the operations it folds by."""
    check.states(kernel, WindowState, ws=ws)
    check.states(kernel, Deques, dqi=dqi, dqf=dqf)
    check.states(kernel, ht.KeyTable, table=table)
    check.states(kernel, PaneFifo, fifo=fifo)
    check.states(kernel, ResultRows, out=out)
    check.arrays(kernel, np.int64, 1, cur=cur, iops=iops, fops=fops, sel=sel)
    check.require(kernel, cur.size == 1, lambda: f"cur must hold one pane, got {cur.size}")
    ni, nf = ws.ints.shape[1], ws.sums.shape[1]
    check_selection(kernel, sel, table.keys.shape[1], ni, nf)
    check.require(kernel, (len(iops), len(fops)) == (ni, nf) == (fifo.ints.shape[1],
                                                                  fifo.floats.shape[1]),
                  lambda: f"the window state has {ni} int and {nf} float slots, the fifo "
                  f"{fifo.ints.shape[1]} and {fifo.floats.shape[1]}, the operations "
                  f"{len(iops)} and {len(fops)}")
    check.require(kernel, isinstance(out.keys, np.ndarray) and out.keys.ndim == 2
                  and out.keys.shape[1] == table.keys.shape[1],
                  lambda: f"out's keys must be a matrix of the table's {table.keys.shape[1]} words")


def reset_assembly(ws, dqi, dqf, fifo) -> None:
    """Forget the window (before loading a long task's tail)."""
    check.states("reset_assembly", WindowState, ws=ws)
    check.states("reset_assembly", Deques, dqi=dqi, dqf=dqf)
    check.states("reset_assembly", PaneFifo, fifo=fifo)
    _reset_assembly(ws, dqi, dqf, fifo)


def assemble_partials(ws, dqi, dqf, table, fifo, out, cur, e_pane, e_keys, e_cnt, e_i, e_f,
                      iops, fops, panes: int, slide: int, emit: bool, upto: int, m0: int, sel):
    """Feed a batch of pane partials (``e_pane``, ``e_keys`` ... in pane order), then close
    panes < ``upto``; return the state and the rows written to ``out`` (from row ``m0``).

    With ``emit`` False panes close without emitting (loading a task's tail, whose windows
    the task emitted itself).  The state (``ws`` ... ``out``) is what the kernel returns:
    the caller keeps the returned one (it may have grown).
    """
    name = "assemble_partials"
    _assembler_state(name, ws, dqi, dqf, table, fifo, out, cur, iops, fops, sel)
    check.arrays(name, np.int64, 1, e_pane=e_pane, e_cnt=e_cnt)
    check.arrays(name, np.int64, 2, e_keys=e_keys, e_i=e_i)
    check.arrays(name, np.float64, 2, e_f=e_f)
    n = len(e_pane)
    check.require(name, len(e_keys) == len(e_cnt) == len(e_i) == len(e_f) == n,
                  lambda: f"the partials' columns must have one row each, got {len(e_pane)}, "
                  f"{len(e_keys)}, {len(e_cnt)}, {len(e_i)}, {len(e_f)}")
    check.require(name, (e_keys.shape[1], e_i.shape[1], e_f.shape[1])
                  == (table.keys.shape[1], len(iops), len(fops)),
                  lambda: f"the partials have {e_keys.shape[1]} key words, {e_i.shape[1]} int and "
                  f"{e_f.shape[1]} float slots; the state {table.keys.shape[1]}, {len(iops)} "
                  f"and {len(fops)}")
    check.counts(name, panes=panes, slide=slide)
    check.require(name, 0 <= m0 <= len(out.start), lambda: f"m0 must be a row of out, got {m0}")
    return _assemble_partials(ws, dqi, dqf, table, fifo, out, cur, e_pane, e_keys, e_cnt, e_i,
                              e_f, iops, fops, panes, slide, bool(emit), upto, m0, sel)


def flush_windows(ws, dqi, dqf, table, fifo, out, cur, iops, fops, panes: int, slide: int, sel):
    """End of stream: emit every window that still holds tuples; return (out, rows)."""
    _assembler_state("flush_windows", ws, dqi, dqf, table, fifo, out, cur, iops, fops, sel)
    check.counts("flush_windows", panes=panes, slide=slide)
    return _flush_windows(ws, dqi, dqf, table, fifo, out, cur, iops, fops, panes, slide, sel)


def partition_rows(keys, cols, parts: int):
    """Rows of ``keys`` (int64 rows x words) by partition: the hash of their columns ``cols``,
    from its high bits (a partition's own hash table uses the low ones), mod ``parts``.
    Returns (order, starts): partition p's rows are ``order[starts[p]:starts[p + 1]]``, in
    their original order."""
    check.arrays("partition_rows", np.int64, 2, keys=keys)
    check.arrays("partition_rows", np.int64, 1, cols=cols)
    check.counts("partition_rows", parts=parts)
    check.require("partition_rows", bool(np.all((cols >= 0) & (cols < keys.shape[1]))),
                  lambda: f"cols must be columns of keys' {keys.shape[1]}, got {cols.tolist()}")
    return _partition_rows(keys, cols, parts)


def route_rows(rows, keys, parts: int):
    """``rows`` (int64 row numbers, one a row of ``keys``) by partition: a hash of each key row
    (a multiply a key word), mapped onto ``parts`` by a multiply and a shift (no division).
    Returns (routed, starts): partition p's are ``routed[starts[p]:starts[p + 1]]``, in their
    order in ``rows``."""
    check.arrays("route_rows", np.int64, 1, rows=rows)
    check.arrays("route_rows", np.int64, 2, keys=keys)
    check.counts("route_rows", parts=parts)
    check.require("route_rows", len(rows) == len(keys),
                  lambda: f"one row number a key row: {len(rows)} rows, {len(keys)} keys")
    return _route_rows(rows, keys, parts)


def scatter_rows(of, out_rows, counts) -> None:
    """Each partition's row numbers from each row's partition ``of`` (uint8;
    :data:`ROUTE_SKIP`: none): partition ``p``'s are ``out_rows[p, :counts[p]]``, in order
    (``out_rows``: int32 or int64, a row a partition, as long as ``of``; ``counts``: int64
    zeros, one a partition)."""
    check.arrays("scatter_rows", np.uint8, 1, of=of)
    check.arrays("scatter_rows", np.int64, 1, counts=counts)
    check.require("scatter_rows", isinstance(out_rows, np.ndarray) and out_rows.ndim == 2
                  and out_rows.dtype in (np.int32, np.int64)
                  and out_rows.shape[1] >= len(of) and out_rows.shape[0] == len(counts) >= 1,
                  lambda: f"out_rows must be an int32 or int64 array of a row a partition "
                          f"({len(counts)}), each at least {len(of)} long, got "
                          f"{check._describe(out_rows)}")
    _scatter_rows(of, out_rows, counts)


def merge_rows(s_t, e_t, k_t, c_t, i_t, f_t):
    """P partitions' window rows (tuples of each partition's column arrays: starts, ends, keys,
    counts, ints, floats - each partition's rows in window-end order) as one set of arrays in
    window-end order: window by window, each partition's rows of it in partition order.  One
    pass, no sort; the output is allocated once."""
    parts = len(e_t)
    check.require("merge_rows", parts >= 1 and all(len(t) == parts for t in (s_t, k_t, c_t,
                                                                            i_t, f_t)),
                  "one tuple of arrays a column, each with one array a partition")
    for p in range(parts):
        check.arrays("merge_rows", np.int64, 1, starts=s_t[p], ends=e_t[p], counts=c_t[p])
        check.arrays("merge_rows", np.int64, 2, keys=k_t[p], ints=i_t[p])
        check.arrays("merge_rows", np.float64, 2, floats=f_t[p])
        n = len(e_t[p])
        check.require("merge_rows", all(len(t[p]) == n for t in (s_t, k_t, c_t, i_t, f_t)),
                      lambda p=p: f"partition {p}'s columns must have one row each")
        check.require("merge_rows", (k_t[p].shape[1], i_t[p].shape[1], f_t[p].shape[1])
                      == (k_t[0].shape[1], i_t[0].shape[1], f_t[0].shape[1]),
                      lambda p=p: f"partition {p}'s columns must be as wide as partition 0's")
    return _merge_rows(tuple(s_t), tuple(e_t), tuple(k_t), tuple(c_t), tuple(i_t), tuple(f_t))
