"""Incremental sliding-window assembly over pane partials (§2.3; LightSaber's window fragments).

The window state holds, per group, the aggregate of the panes currently inside
the window.  Sliding by one pane adds the new pane's partials and evicts the
pane that left:

* count and int sums: exact int64 add / subtract;
* float sums: add / subtract with Neumaier compensation, so long runs do not
  drift; a group's sums restart from exact zero whenever it leaves the window.
  The result is exact to ~1e-15 of the largest values that passed through the
  group's window since it last emptied - a sum many orders of magnitude smaller
  than those (1e-38 after 75) loses its relative precision;
* min / max (not invertible): a monotone deque per (group, slot) of (pane, value)
  nodes in a node pool - amortised O(1) per partial, front = the window's extreme.

A group with no tuples left in the window leaves the active set (and, in the
assembler, the key table), so an endless run keeps bounded state.

Here: the deques, the window state and the windows inside one task
(:func:`windows_from_partials`); a window's rows are emitted by :mod:`scabbard.kernels.rows`,
and the windows across tasks are assembled by :mod:`scabbard.kernels.assembler`.

State is kept in named tuples of arrays (:class:`Deques`, :class:`WindowState`,
:class:`PaneFifo`; the key table is :class:`~scabbard.kernels.hashtable.KeyTable`), which
numba takes whole and reads by field.  Hot loops never rebind an array variable
(numba would reference-count every array on every iteration): capacity is
reserved before a loop, and where it cannot be known, the loop returns to a
driver that grows the arrays and calls it again ("scan until blocked").
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from scabbard.kernels import _check as check
from scabbard.kernels._jit import inline, kernel, scan
from scabbard.kernels.aggregate import MAX, SUM, _grow_rows
from scabbard.kernels.rows import (
    ALL_GROUPS,
    check_selection,
    emit_window_rows,
    out_like,
    out_reserve,
    rollup_table,
    selection,
)

INT64_MIN = np.iinfo(np.int64).min

# -- monotone deques for min / max -----------------------------------------------------------
class Deques(NamedTuple):
    """A monotone deque per (group, slot) of (pane, value) nodes, in one pool of nodes."""

    head: np.ndarray  # int64[G, S]: the front node (the window's extreme), -1 empty
    tail: np.ndarray  # int64[G, S]: the back node, -1 empty
    val: np.ndarray   # [N] (int64 or float64): a node's value
    pane: np.ndarray  # int64[N]: a node's pane
    nxt: np.ndarray   # int64[N]: the next node towards the back, -1 none
    prv: np.ndarray   # int64[N]: the next node towards the front, -1 none
    free: np.ndarray  # int64[N]: stack of released nodes
    meta: np.ndarray  # int64[2]: next fresh node, free-stack height


@kernel
def _new_deques(groups: int, slots: int, values_like: np.ndarray):
    n = 64
    return Deques(np.full((groups, slots), -1, dtype=np.int64),
                  np.full((groups, slots), -1, dtype=np.int64),
                  np.empty(n, dtype=values_like.dtype), np.empty(n, dtype=np.int64),
                  np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64),
                  np.empty(n, dtype=np.int64), np.zeros(2, dtype=np.int64))


@kernel
def _reserve_deque_nodes(dq, groups: int, extra_nodes: int, ops):
    """``dq`` with room for ``groups`` groups and ``extra_nodes`` more pushes per slot whose
    operation ``ops`` pushes (MIN, MAX: a SUM slot's deque stays empty, no room is kept)."""
    pushing = 0
    for j in range(ops.shape[0]):
        if ops[j] != SUM:
            pushing += 1
    head, tail, val, pane, nxt, prv, free, meta = dq
    if groups > head.shape[0]:
        n = max(groups, 2 * head.shape[0])
        h2 = np.full((n, head.shape[1]), -1, dtype=np.int64)
        h2[: head.shape[0]] = head
        t2 = np.full((n, tail.shape[1]), -1, dtype=np.int64)
        t2[: tail.shape[0]] = tail
        head, tail = h2, t2
    need = meta[0] + extra_nodes * pushing  # a push per MIN/MAX slot per partial, at most
    if pushing > 0 and need > val.shape[0]:
        n = max(need, 2 * val.shape[0])
        val, pane = _grow_rows(val, n), _grow_rows(pane, n)
        nxt, prv, free = _grow_rows(nxt, n), _grow_rows(prv, n), _grow_rows(free, n)
    return Deques(head, tail, val, pane, nxt, prv, free, meta)


@inline
def _dq_release(dq, node: int) -> None:
    free, meta = dq.free, dq.meta
    free[meta[1]] = node
    meta[1] += 1


@inline
def _deque_push(dq, g: int, s: int, p: int, v, is_max: bool) -> None:
    """Append (pane p, value v), dropping the tail values ``v`` dominates (capacity reserved)."""
    head, tail, val, pane, nxt, prv, free, meta = dq
    t = tail[g, s]
    while t != -1 and ((val[t] <= v) if is_max else (val[t] >= v)):
        before = prv[t]
        _dq_release(dq, t)
        t = before
    if meta[1] > 0:
        meta[1] -= 1
        node = free[meta[1]]
    else:
        node = meta[0]
        meta[0] += 1
    val[node] = v
    pane[node] = p
    prv[node] = t
    nxt[node] = -1
    if t != -1:
        nxt[t] = node
    else:
        head[g, s] = node
    tail[g, s] = node


@inline
def _deque_evict(dq, g: int, s: int, upto_pane: int) -> None:
    """Drop front nodes of panes <= ``upto_pane``."""
    head, tail, val, pane, nxt, prv, free, meta = dq
    h = head[g, s]
    while h != -1 and pane[h] <= upto_pane:
        after = nxt[h]
        _dq_release(dq, h)
        h = after
    head[g, s] = h
    if h == -1:
        tail[g, s] = -1
    else:
        prv[h] = -1


# -- window state --------------------------------------------------------------------------------
class WindowState(NamedTuple):
    """Per group (its key table id), the aggregate of the panes inside the window; the groups
    with tuples in the window are the active set ``act[:nact[0]]``.  Min and max live in
    the :class:`Deques` beside it (one for integer slots, one for float slots)."""

    cnt: np.ndarray   # int64[G]: tuples in the window
    ints: np.ndarray  # int64[G, ni]: integer sums
    sums: np.ndarray  # float64[G, nf]: float sums
    comp: np.ndarray  # float64[G, nf]: their Neumaier compensation
    act: np.ndarray   # int64[G]: the active groups (the first nact[0])
    apos: np.ndarray  # int64[G]: a group's place in act, -1 inactive
    nact: np.ndarray  # int64[1]: active groups


@kernel
def new_window_state(groups: int, ni: int, nf: int):
    groups = max(groups, 16)
    ws = WindowState(np.zeros(groups, dtype=np.int64), np.zeros((groups, ni), dtype=np.int64),
                     np.zeros((groups, nf), dtype=np.float64),
                     np.zeros((groups, nf), dtype=np.float64), np.empty(groups, dtype=np.int64),
                     np.full(groups, -1, dtype=np.int64), np.zeros(1, dtype=np.int64))
    return (ws, _new_deques(groups, ni, np.zeros(1, dtype=np.int64)),
            _new_deques(groups, nf, np.zeros(1)))


def empty_window_state(groups: int, ints: int, floats: int) -> tuple:
    """An empty window state (and its two deques) with room for ``groups`` groups of ``ints``
    integer and ``floats`` float aggregate slots: ``(WindowState, Deques, Deques)``."""
    check.counts("empty_window_state", groups=groups)
    check.require("empty_window_state", min(ints, floats) >= 0,
                  lambda: f"slots must be >= 0, got {ints} int and {floats} float")
    return new_window_state(groups, ints, floats)


@kernel
def reserve_window_state(ws, dqi, dqf, groups: int, extra_nodes: int, iops, fops):
    """State with room for group ids < ``groups`` and ``extra_nodes`` deque pushes of each
    MIN/MAX slot of ``iops`` and ``fops``."""
    wcnt, wi, wf, wc, act, apos, nact = ws
    if groups > wcnt.shape[0]:
        n = max(groups, 2 * wcnt.shape[0])
        w2 = np.zeros(n, dtype=np.int64)
        w2[: wcnt.shape[0]] = wcnt
        wi2 = np.zeros((n, wi.shape[1]), dtype=np.int64)
        wi2[: wi.shape[0]] = wi
        wf2 = np.zeros((n, wf.shape[1]), dtype=np.float64)
        wf2[: wf.shape[0]] = wf
        wc2 = np.zeros((n, wc.shape[1]), dtype=np.float64)
        wc2[: wc.shape[0]] = wc
        a2 = np.empty(n, dtype=np.int64)
        a2[: act.shape[0]] = act
        p2 = np.full(n, -1, dtype=np.int64)
        p2[: apos.shape[0]] = apos
        ws = WindowState(w2, wi2, wf2, wc2, a2, p2, nact)
    return (ws, _reserve_deque_nodes(dqi, ws.cnt.shape[0], extra_nodes, iops),
            _reserve_deque_nodes(dqf, ws.cnt.shape[0], extra_nodes, fops))


@inline
def _kahan(wf, wc, g: int, j: int, x: float) -> None:
    s = wf[g, j]
    t = s + x
    if abs(s) >= abs(x):
        wc[g, j] += (s - t) + x
    else:
        wc[g, j] += (x - t) + s
    wf[g, j] = t


@inline
def add_partial(ws, dqi, dqf, g: int, p: int, cnt: int, src_i, src_f, row: int, iops, fops) -> None:
    """Add the pane partial ``row`` of group ``g`` (pane ``p``)."""
    wcnt, wi, wf, wc, act, apos, nact = ws
    if wcnt[g] == 0:
        apos[g] = nact[0]
        act[nact[0]] = g
        nact[0] += 1
    wcnt[g] += cnt
    for j in range(src_i.shape[1]):
        if iops[j] == SUM:
            wi[g, j] += src_i[row, j]
        else:
            _deque_push(dqi, g, j, p, src_i[row, j], iops[j] == MAX)
    for j in range(src_f.shape[1]):
        if fops[j] == SUM:
            _kahan(wf, wc, g, j, src_f[row, j])
        else:
            _deque_push(dqf, g, j, p, src_f[row, j], fops[j] == MAX)


@inline
def _deactivate(ws, dqi, dqf, g: int) -> None:
    wcnt, wi, wf, wc, act, apos, nact = ws
    wcnt[g] = 0
    for j in range(wi.shape[1]):
        wi[g, j] = 0
        _deque_evict(dqi, g, j, np.iinfo(np.int64).max)
    for j in range(wf.shape[1]):
        wf[g, j] = 0.0
        wc[g, j] = 0.0
        _deque_evict(dqf, g, j, np.iinfo(np.int64).max)
    last = act[nact[0] - 1]
    act[apos[g]] = last
    apos[last] = apos[g]
    apos[g] = -1
    nact[0] -= 1


@inline
def remove_partial(ws, dqi, dqf, g: int, p: int, cnt: int, src_i, src_f, row: int, iops,
                   fops) -> bool:
    """Evict the pane partial ``row`` of group ``g``; True if the group left the window."""
    wcnt, wi, wf, wc, act, apos, nact = ws
    wcnt[g] -= cnt
    for j in range(src_i.shape[1]):
        if iops[j] == SUM:
            wi[g, j] -= src_i[row, j]
        else:
            _deque_evict(dqi, g, j, p)
    for j in range(src_f.shape[1]):
        if fops[j] == SUM:
            _kahan(wf, wc, g, j, -src_f[row, j])
        else:
            _deque_evict(dqf, g, j, p)
    if wcnt[g] != 0:
        return False
    _deactivate(ws, dqi, dqf, g)
    return True


@kernel
def clear_window_state(ws, dqi, dqf) -> None:
    """Empty the window (every group leaves)."""
    act, nact = ws.act, ws.nact
    while nact[0] > 0:
        _deactivate(ws, dqi, dqf, act[nact[0] - 1])


# -- windows inside one task --------------------------------------------------------------------
@scan
def _task_scan(pp_pane, pp_gid, pp_cnt, pp_i, pp_f, gkeys, iops, fops, panes: int, slide: int,
               p_lo: int, p_hi: int, ws, dqi, dqf, out, pos, sel, rtab):
    """Slide from pane pos[0]; stop when the output is full.  pos = (pane, add, evict, rows)."""
    n = pp_pane.shape[0]
    p, add, ev, m = pos[0], pos[1], pos[2], pos[3]
    rng = panes * slide
    cap = out.start.shape[0]
    nact = ws.nact
    while p <= p_hi:
        while add < n and pp_pane[add] == p:
            add_partial(ws, dqi, dqf, pp_gid[add], p, pp_cnt[add], pp_i, pp_f, add, iops, fops)
            add += 1
        while ev < add and pp_pane[ev] <= p - panes:
            remove_partial(ws, dqi, dqf, pp_gid[ev], pp_pane[ev], pp_cnt[ev], pp_i, pp_f, ev,
                           iops, fops)
            ev += 1
        if nact[0] == 0:  # empty window: jump to the next pane with data
            p = pp_pane[add] if add < n else p_hi + 1
            continue
        if p >= p_lo:
            if m + nact[0] > cap:  # blocked: the driver grows the output and resumes at p
                pos[0], pos[1], pos[2], pos[3] = p, add, ev, m
                return False
            end = (p + 1) * slide
            m = emit_window_rows(ws, dqi, dqf, gkeys, iops, fops, end - rng, end, out, m, sel, rtab)
        p += 1
        # pane p's partials are added next round; resuming at p must not re-add them
    pos[0], pos[1], pos[2], pos[3] = p, add, ev, m
    return True


@kernel
def _windows_from_partials(pp_pane, pp_gid, pp_cnt, pp_i, pp_f, gkeys, iops, fops,
                           panes: int, slide: int, p_lo: int, p_hi: int, sel, proto):
    ws, dqi, dqf = new_window_state(gkeys.shape[0], pp_i.shape[1], pp_f.shape[1])
    rtab = rollup_table(sel, gkeys.shape[0])
    ws, dqi, dqf = reserve_window_state(ws, dqi, dqf, gkeys.shape[0], pp_pane.shape[0], iops,
                                        fops)
    # every partial lies in at most `panes` windows: room for all rows up front (np.empty
    # only reserves address space; pages are touched as rows are written)
    bound = min(pp_pane.shape[0] * panes, (p_hi - p_lo + 1) * gkeys.shape[0]) + 16
    out = out_like(proto, pp_i.shape[1], pp_f.shape[1], bound)
    first = p_lo - panes + 1
    start = np.searchsorted(pp_pane, first)
    pos = np.array([first, start, start, 0], dtype=np.int64)
    while not _task_scan(pp_pane, pp_gid, pp_cnt, pp_i, pp_f, gkeys, iops, fops, panes, slide,
                         p_lo, p_hi, ws, dqi, dqf, out, pos, sel, rtab):
        out = out_reserve(out, 2 * out.start.shape[0] + ws.nact[0])
        # resume at the blocked pane: its partials are already in; only emission remains
        p, m = pos[0], pos[3]
        end = (p + 1) * slide
        m = emit_window_rows(ws, dqi, dqf, gkeys, iops, fops, end - panes * slide, end, out, m,
                             sel, rtab)
        pos[0], pos[3] = p + 1, m
    return out, pos[3]


def windows_from_partials(partials, iops, fops, panes: int, slide_ms: int, p_lo: int, p_hi: int,
                          select: tuple[int, ...] = (ALL_GROUPS, 0), key_dtypes=None):
    """Results of the windows ending at panes ``p_lo..p_hi`` from one task's pane partials.

    ``partials`` is what :func:`scabbard.kernels.aggregate.pane_aggregate` returns; every
    pane the windows need must be complete in it.  Windows without tuples are skipped.
    ``select``: what each window emits, (kind, slot, key columns...) (:func:`emit_window_rows`).
    ``key_dtypes``: the rows' keys as one column per key word of these types ("typed", see
    *result rows*), else one int64 matrix.
    """
    name = "windows_from_partials"
    check.require(name, len(partials) == 6, "partials must be pane_aggregate's six arrays")
    pane, gid, cnt, iv, fv, gkeys = partials
    check.arrays(name, np.int64, 1, pane=pane, gid=gid, count=cnt)
    check.arrays(name, np.int64, 2, ints=iv, keys=gkeys)
    check.arrays(name, np.float64, 2, floats=fv)
    check.require(name, len(gid) == len(cnt) == len(iv) == len(fv) == len(pane),
                  "the partials' columns must have one row each")
    check.counts(name, panes=panes, slide_ms=slide_ms)
    iops = np.ascontiguousarray(iops, dtype=np.int64)
    fops = np.ascontiguousarray(fops, dtype=np.int64)
    proto = (np.zeros((0, gkeys.shape[1]), np.int64) if key_dtypes is None
             else tuple(np.zeros(0, d) for d in key_dtypes))
    sel = selection(*select)
    check_selection(name, sel, gkeys.shape[1], iv.shape[1], fv.shape[1])
    out, m = _windows_from_partials(pane, gid, cnt, iv, fv, gkeys, iops, fops, panes, slide_ms,
                                    p_lo, p_hi, sel, proto)
    keys = out.keys[:m] if key_dtypes is None else tuple(c[:m] for c in out.keys)
    return out.start[:m], out.end[:m], keys, out.count[:m], out.ints[:m], out.floats[:m]


