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
from numba import literal_unroll, types
from numba.extending import overload

from scabbard.kernels import hashtable as ht
from scabbard.kernels._jit import inline, kernel, scan
from scabbard.kernels.aggregate import MAX, SUM, _grow_rows, combine

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
def dq_new(groups: int, slots: int, values_like: np.ndarray):
    n = 64
    return Deques(np.full((groups, slots), -1, dtype=np.int64),
                  np.full((groups, slots), -1, dtype=np.int64),
                  np.empty(n, dtype=values_like.dtype), np.empty(n, dtype=np.int64),
                  np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64),
                  np.empty(n, dtype=np.int64), np.zeros(2, dtype=np.int64))


@kernel
def dq_reserve(dq, groups: int, extra_nodes: int):
    """``dq`` with room for ``groups`` groups and ``extra_nodes`` more pushes per slot."""
    head, tail, val, pane, nxt, prv, free, meta = dq
    if groups > head.shape[0]:
        n = max(groups, 2 * head.shape[0])
        h2 = np.full((n, head.shape[1]), -1, dtype=np.int64)
        h2[: head.shape[0]] = head
        t2 = np.full((n, tail.shape[1]), -1, dtype=np.int64)
        t2[: tail.shape[0]] = tail
        head, tail = h2, t2
    need = meta[0] + extra_nodes * head.shape[1]  # a push per slot per partial, at most
    if head.shape[1] > 0 and need > val.shape[0]:
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
def dq_push(dq, g: int, s: int, p: int, v, is_max: bool) -> None:
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
def dq_evict(dq, g: int, s: int, upto_pane: int) -> None:
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
def ws_new(groups: int, ni: int, nf: int):
    groups = max(groups, 16)
    ws = WindowState(np.zeros(groups, dtype=np.int64), np.zeros((groups, ni), dtype=np.int64),
                     np.zeros((groups, nf), dtype=np.float64),
                     np.zeros((groups, nf), dtype=np.float64), np.empty(groups, dtype=np.int64),
                     np.full(groups, -1, dtype=np.int64), np.zeros(1, dtype=np.int64))
    return ws, dq_new(groups, ni, np.zeros(1, dtype=np.int64)), dq_new(groups, nf, np.zeros(1))


@kernel
def ws_reserve(ws, dqi, dqf, groups: int, extra_nodes: int):
    """State with room for group ids < ``groups`` and ``extra_nodes`` deque pushes."""
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
    return (ws, dq_reserve(dqi, ws.cnt.shape[0], extra_nodes),
            dq_reserve(dqf, ws.cnt.shape[0], extra_nodes))


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
def ws_add(ws, dqi, dqf, g: int, p: int, cnt: int, src_i, src_f, row: int, iops, fops) -> None:
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
            dq_push(dqi, g, j, p, src_i[row, j], iops[j] == MAX)
    for j in range(src_f.shape[1]):
        if fops[j] == SUM:
            _kahan(wf, wc, g, j, src_f[row, j])
        else:
            dq_push(dqf, g, j, p, src_f[row, j], fops[j] == MAX)


@inline
def _deactivate(ws, dqi, dqf, g: int) -> None:
    wcnt, wi, wf, wc, act, apos, nact = ws
    wcnt[g] = 0
    for j in range(wi.shape[1]):
        wi[g, j] = 0
        dq_evict(dqi, g, j, np.iinfo(np.int64).max)
    for j in range(wf.shape[1]):
        wf[g, j] = 0.0
        wc[g, j] = 0.0
        dq_evict(dqf, g, j, np.iinfo(np.int64).max)
    last = act[nact[0] - 1]
    act[apos[g]] = last
    apos[last] = apos[g]
    apos[g] = -1
    nact[0] -= 1


@inline
def ws_sub(ws, dqi, dqf, g: int, p: int, cnt: int, src_i, src_f, row: int, iops, fops) -> bool:
    """Evict the pane partial ``row`` of group ``g``; True if the group left the window."""
    wcnt, wi, wf, wc, act, apos, nact = ws
    wcnt[g] -= cnt
    for j in range(src_i.shape[1]):
        if iops[j] == SUM:
            wi[g, j] -= src_i[row, j]
        else:
            dq_evict(dqi, g, j, p)
    for j in range(src_f.shape[1]):
        if fops[j] == SUM:
            _kahan(wf, wc, g, j, -src_f[row, j])
        else:
            dq_evict(dqf, g, j, p)
    if wcnt[g] != 0:
        return False
    _deactivate(ws, dqi, dqf, g)
    return True


@kernel
def ws_clear(ws, dqi, dqf) -> None:
    """Empty the window (every group leaves)."""
    act, nact = ws.act, ws.nact
    while nact[0] > 0:
        _deactivate(ws, dqi, dqf, act[nact[0] - 1])


# -- result rows ----------------------------------------------------------------------------------
# out = (window_start[n], window_end[n], keys, count[n], ints[n, ni], floats[n, nf]); keys is
# either one int64 matrix [n, K] (a key word per column) or a tuple of K columns, each of its
# result column's type ("typed": the rows are the result's key columns as written, with no pass
# to split the words and half the bytes for int32 keys - emission-bound queries such as LRB2,
# 30 result rows per input tuple, are bound by the bytes they write).  The helpers below
# read and write either kind inside the kernels (numba picks the code by the type).  They are
# not inlined at numba IR level (``inline="always"``): so inlined into ws_emit, they made
# the min/max deque reads return garbage (a random-query test found it); LLVM inlines them.


def _generated(src: str, name: str, **env):
    env["np"] = np
    exec(src, env)  # noqa: S102 - code generated above from the tuple's length only
    return env[name]


def put_keys(o_k, m, keys, g):
    """Row ``m`` of the output keys := the key words of group ``g``."""


@overload(put_keys)
def _put_keys(o_k, m, keys, g):
    if isinstance(o_k, types.Array):
        def impl(o_k, m, keys, g):
            for j in range(keys.shape[1]):
                o_k[m, j] = keys[g, j]
        return impl
    return _generated("def impl(o_k, m, keys, g):\n    pass\n" + "".join(
        f"    o_k[{j}][m] = keys[g, {j}]\n" for j in range(len(o_k.types))), "impl")


def put_key(o_k, m, j, v):
    """Word ``j`` of output row ``m`` := ``v``."""


@overload(put_key)
def _put_key(o_k, m, j, v):
    if isinstance(o_k, types.Array):
        def impl(o_k, m, j, v):
            o_k[m, j] = v
        return impl
    return _generated("def impl(o_k, m, j, v):\n    pass\n" + "".join(
        f"    if j == {c}:\n        o_k[{c}][m] = v\n" for c in range(len(o_k.types))), "impl")


def key_at(o_k, r, j):
    """Word ``j`` of output row ``r``, as int64."""


@overload(key_at)
def _key_at(o_k, r, j):
    if isinstance(o_k, types.Array):
        return lambda o_k, r, j: o_k[r, j]
    return _generated("def impl(o_k, r, j):\n" + "".join(
        f"    if j == {c}:\n        return np.int64(o_k[{c}][r])\n"
        for c in range(len(o_k.types))) + "    return np.int64(0)\n", "impl")


def keys_like(proto, n):
    """Output keys for ``n`` rows of the kind of ``proto`` (a [0, K] matrix or a tuple of
    empty columns)."""


@overload(keys_like)
def _keys_like(proto, n):
    if isinstance(proto, types.Array):
        return lambda proto, n: np.empty((n, proto.shape[1]), dtype=np.int64)
    return _generated("def impl(proto, n):\n    return (" + "".join(
        f"np.empty(n, proto[{c}].dtype), " for c in range(len(proto.types))) + ")\n", "impl")


def grow_keys(o_k, n):
    """``o_k`` with room for ``n`` rows (its rows copied)."""


@overload(grow_keys)
def _grow_keys(o_k, n):
    if isinstance(o_k, types.Array):
        return lambda o_k, n: _grow_rows(o_k, n)
    return _generated("def impl(o_k, n):\n    return (" + "".join(
        f"_grow(o_k[{c}], n), " for c in range(len(o_k.types))) + ")\n", "impl", _grow=_grow_rows)


@kernel
def _split_words(keys, words, outs) -> None:
    for i in range(keys.shape[0]):
        c = 0
        for o in literal_unroll(outs):
            o[i] = keys[i, words[c]]
            c += 1


def split_words(keys: np.ndarray, words: list[int], dtypes: list) -> list[np.ndarray]:
    """Column ``c`` of the result: word ``words[c]`` of every row of the key matrix ``keys``
    (rows x words, int64), as ``dtypes[c]`` - in one pass over the rows.  A column at a time
    (``keys[:, j].astype``) reads the whole matrix once per column, with a stride: for LRB2's
    30 result rows per input tuple that was 0.3 us of the fragment's 0.8 us per tuple."""
    outs = tuple(np.empty(keys.shape[0], d) for d in dtypes)
    if outs:  # on no rows too: the warm-up's empty windows compile it for the run
        _split_words(keys, np.asarray(words, dtype=np.int64), outs)
    return list(outs)


@kernel
def out_new(k: int, ni: int, nf: int, n: int):
    n = max(n, 16)
    return (np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64),
            np.empty((n, k), dtype=np.int64), np.empty(n, dtype=np.int64),
            np.empty((n, ni), dtype=np.int64), np.empty((n, nf), dtype=np.float64))


@kernel
def out_like(proto, ni: int, nf: int, n: int):
    """:func:`out_new` with keys of the kind of ``proto`` (:func:`keys_like`)."""
    n = max(n, 16)
    return (np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64), keys_like(proto, n),
            np.empty(n, dtype=np.int64), np.empty((n, ni), dtype=np.int64),
            np.empty((n, nf), dtype=np.float64))


@kernel
def out_reserve(out, need: int):
    if need <= out[0].shape[0]:
        return out
    n = max(2 * out[0].shape[0], need)
    return (_grow_rows(out[0], n), _grow_rows(out[1], n), grow_keys(out[2], n),
            _grow_rows(out[3], n), _grow_rows(out[4], n), _grow_rows(out[5], n))


# What a window emits, an int64 array ``sel`` = (kind, slot, key columns...):
# * ALL_GROUPS: a row per group;
# * MAX_COUNT / MAX_INT / MAX_FLOAT: only the groups whose count or aggregate ``slot`` is the
#   window's largest (a HAVING value >= ALL (...) fused into the emission: NEXMark Q5);
# * ROLLUP_COUNT: a row per distinct value of the group keys' columns ``sel[2:]`` with the
#   number of the window's groups holding it (a per-window COUNT grouped by a subset of the
#   keys fused into the emission: LRB3's vehicles per segment), keys in sel[2:]'s order.
ALL_GROUPS, MAX_COUNT, MAX_INT, MAX_FLOAT, ROLLUP_COUNT = 0, 1, 2, 3, 4


def selection(kind: int = ALL_GROUPS, slot: int = 0, *columns: int) -> np.ndarray:
    """The ``sel`` array of an emission (see above)."""
    return np.array([kind, slot, *columns], dtype=np.int64)


@kernel
def rollup_table(sel, groups: int):
    """The scratch hash table of a ROLLUP_COUNT emission over up to ``groups`` groups:
    (row of each slot's key in the output, the window that wrote the slot, the window)."""
    cap = 16
    while sel[0] == ROLLUP_COUNT and cap < 2 * groups:
        cap *= 2
    return np.empty(cap, dtype=np.int64), np.zeros(cap, dtype=np.int64), np.zeros(1, dtype=np.int64)


@inline
def _emit_rollup(ws, keys, sel, rtab, start: int, end: int, out, m: int) -> int:
    """One row per distinct value of the keys' columns sel[2:] among the active groups, with
    how many groups hold it (the table holds twice the groups: probing always ends)."""
    act, nact = ws.act, ws.nact
    o_s, o_e, o_k, o_c = out[0], out[1], out[2], out[3]
    rows, seen, window = rtab
    window[0] += 1
    w = window[0]
    mask = rows.shape[0] - 1
    nr = sel.shape[0] - 2
    for a in range(nact[0]):
        g = act[a]
        h = np.uint64(ht.SEED)
        for j in range(nr):
            h = ht.mix(h, keys[g, sel[2 + j]])
        s = np.int64(h & np.uint64(mask))
        while True:
            if seen[s] != w:  # a value not seen in this window yet: its row
                seen[s] = w
                rows[s] = m
                o_s[m] = start
                o_e[m] = end
                for j in range(nr):
                    put_key(o_k, m, j, keys[g, sel[2 + j]])
                o_c[m] = 1
                m += 1
                break
            r = rows[s]
            same = True
            for j in range(nr):
                if key_at(o_k, r, j) != keys[g, sel[2 + j]]:
                    same = False
                    break
            if same:
                o_c[r] += 1
                break
            s = (s + 1) & mask
    return m


@inline
def _int_value(ws, dqi, iops, g: int, kind: int, slot: int):
    if kind == MAX_COUNT:
        return ws.cnt[g]
    return ws.ints[g, slot] if iops[slot] == SUM else dqi.val[dqi.head[g, slot]]


@inline
def _float_value(ws, dqf, fops, g: int, slot: int):
    return ws.sums[g, slot] + ws.comp[g, slot] if fops[slot] == SUM else dqf.val[dqf.head[g, slot]]


@inline
def ws_emit(ws, dqi, dqf, keys, iops, fops, start: int, end: int, out, m: int, sel,
            rtab) -> int:
    """Write the rows of window [start, end) at row ``m`` (room reserved for one per active
    group): as ``sel`` says (above); ``rtab``: a ROLLUP_COUNT's :func:`rollup_table`."""
    sel_kind, sel_slot = sel[0], sel[1]
    if sel_kind == ROLLUP_COUNT:
        return _emit_rollup(ws, keys, sel, rtab, start, end, out, m)
    wcnt, wi, wf, wc, act, apos, nact = ws
    o_s, o_e, o_k, o_c, o_i, o_f = out
    ih, iv = dqi.head, dqi.val
    fh, fv = dqf.head, dqf.val
    top_i = np.iinfo(np.int64).min
    top_f = -np.inf
    if sel_kind == MAX_FLOAT:
        for a in range(nact[0]):
            top_f = max(top_f, _float_value(ws, dqf, fops, act[a], sel_slot))
    elif sel_kind != ALL_GROUPS:
        for a in range(nact[0]):
            top_i = max(top_i, _int_value(ws, dqi, iops, act[a], sel_kind, sel_slot))
    for a in range(nact[0]):
        g = act[a]
        if sel_kind == MAX_FLOAT:
            if _float_value(ws, dqf, fops, g, sel_slot) != top_f:
                continue
        elif sel_kind != ALL_GROUPS:
            if _int_value(ws, dqi, iops, g, sel_kind, sel_slot) != top_i:
                continue
        o_s[m] = start
        o_e[m] = end
        put_keys(o_k, m, keys, g)
        o_c[m] = wcnt[g]
        for j in range(wi.shape[1]):
            o_i[m, j] = wi[g, j] if iops[j] == SUM else iv[ih[g, j]]
        for j in range(wf.shape[1]):
            o_f[m, j] = wf[g, j] + wc[g, j] if fops[j] == SUM else fv[fh[g, j]]
        m += 1
    return m


# -- windows inside one task --------------------------------------------------------------------
@scan
def _task_scan(pp_pane, pp_gid, pp_cnt, pp_i, pp_f, gkeys, iops, fops, panes: int, slide: int,
               p_lo: int, p_hi: int, ws, dqi, dqf, out, pos, sel, rtab):
    """Slide from pane pos[0]; stop when the output is full.  pos = (pane, add, evict, rows)."""
    n = pp_pane.shape[0]
    p, add, ev, m = pos[0], pos[1], pos[2], pos[3]
    rng = panes * slide
    cap = out[0].shape[0]
    nact = ws.nact
    while p <= p_hi:
        while add < n and pp_pane[add] == p:
            ws_add(ws, dqi, dqf, pp_gid[add], p, pp_cnt[add], pp_i, pp_f, add, iops, fops)
            add += 1
        while ev < add and pp_pane[ev] <= p - panes:
            ws_sub(ws, dqi, dqf, pp_gid[ev], pp_pane[ev], pp_cnt[ev], pp_i, pp_f, ev, iops, fops)
            ev += 1
        if nact[0] == 0:  # empty window: jump to the next pane with data
            p = pp_pane[add] if add < n else p_hi + 1
            continue
        if p >= p_lo:
            if m + nact[0] > cap:  # blocked: the driver grows the output and resumes at p
                pos[0], pos[1], pos[2], pos[3] = p, add, ev, m
                return False
            end = (p + 1) * slide
            m = ws_emit(ws, dqi, dqf, gkeys, iops, fops, end - rng, end, out, m, sel, rtab)
        p += 1
        # pane p's partials are added next round; resuming at p must not re-add them
    pos[0], pos[1], pos[2], pos[3] = p, add, ev, m
    return True


@kernel
def _windows_from_partials(pp_pane, pp_gid, pp_cnt, pp_i, pp_f, gkeys, iops, fops,
                           panes: int, slide: int, p_lo: int, p_hi: int, sel, proto):
    ws, dqi, dqf = ws_new(gkeys.shape[0], pp_i.shape[1], pp_f.shape[1])
    rtab = rollup_table(sel, gkeys.shape[0])
    ws, dqi, dqf = ws_reserve(ws, dqi, dqf, gkeys.shape[0], pp_pane.shape[0])
    # every partial lies in at most `panes` windows: room for all rows up front (np.empty
    # only reserves address space; pages are touched as rows are written)
    bound = min(pp_pane.shape[0] * panes, (p_hi - p_lo + 1) * gkeys.shape[0]) + 16
    out = out_like(proto, pp_i.shape[1], pp_f.shape[1], bound)
    first = p_lo - panes + 1
    start = np.searchsorted(pp_pane, first)
    pos = np.array([first, start, start, 0], dtype=np.int64)
    while not _task_scan(pp_pane, pp_gid, pp_cnt, pp_i, pp_f, gkeys, iops, fops, panes, slide,
                         p_lo, p_hi, ws, dqi, dqf, out, pos, sel, rtab):
        out = out_reserve(out, 2 * out[0].shape[0] + ws.nact[0])
        # resume at the blocked pane: its partials are already in; only emission remains
        p, m = pos[0], pos[3]
        end = (p + 1) * slide
        m = ws_emit(ws, dqi, dqf, gkeys, iops, fops, end - panes * slide, end, out, m, sel, rtab)
        pos[0], pos[3] = p + 1, m
    return out, pos[3]


def windows_from_partials(partials, iops, fops, panes: int, slide_ms: int, p_lo: int, p_hi: int,
                          select: tuple[int, ...] = (ALL_GROUPS, 0), key_dtypes=None):
    """Results of the windows ending at panes ``p_lo..p_hi`` from one task's pane partials.

    ``partials`` is what :func:`scabbard.kernels.aggregate.pane_aggregate` returns; every
    pane the windows need must be complete in it.  Windows without tuples are skipped.
    ``select``: what each window emits, (kind, slot, key columns...) (:func:`ws_emit`).
    ``key_dtypes``: the rows' keys as one column per key word of these types ("typed", see
    *result rows*), else one int64 matrix.
    """
    pane, gid, cnt, iv, fv, gkeys = partials
    if panes < 1 or slide_ms < 1:
        raise ValueError("panes and slide must be positive")
    iops = np.ascontiguousarray(iops, dtype=np.int64)
    fops = np.ascontiguousarray(fops, dtype=np.int64)
    proto = (np.zeros((0, gkeys.shape[1]), np.int64) if key_dtypes is None
             else tuple(np.zeros(0, d) for d in key_dtypes))
    out, m = _windows_from_partials(pane, gid, cnt, iv, fv, gkeys, iops, fops, panes, slide_ms,
                                    p_lo, p_hi, selection(*select), proto)
    keys = out[2][:m] if key_dtypes is None else tuple(c[:m] for c in out[2])
    return out[0][:m], out[1][:m], keys, out[3][:m], out[4][:m], out[5][:m]


# -- the assembler's state machine (sequential, across tasks) -------------------------------------
# fifo: a PaneFifo (below).
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
def fifo_new(ni: int, nf: int):
    n = 1024
    return PaneFifo(np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64),
                    np.empty(n, dtype=np.int64), np.empty((n, ni), dtype=np.int64),
                    np.empty((n, nf), dtype=np.float64), np.zeros(2, dtype=np.int64),
                    np.full(64, -1, dtype=np.int64))


@kernel
def fifo_groups(fifo, groups: int):
    """``fifo`` whose ``last`` has room for group ids < ``groups``."""
    last = fifo.last
    if groups <= last.shape[0]:
        return fifo
    grown = np.full(max(groups, 2 * last.shape[0]), -1, dtype=np.int64)
    grown[:last.shape[0]] = last
    return PaneFifo(fifo.pane, fifo.gid, fifo.cnt, fifo.ints, fifo.floats, fifo.head_tail,
                    grown)


def fifo_entries(fifo: PaneFifo, table) -> tuple[np.ndarray, ...]:
    """The live entries of ``fifo``, oldest first, copied: pane, the group's keys (rows of
    ``table``'s keys), count, integer and float partials (a window state as pane partials,
    what feeding them to a fresh state rebuilds)."""
    h0, h1 = (int(x) for x in fifo.head_tail)
    return (fifo.pane[h0:h1].copy(), table.keys[fifo.gid[h0:h1]], fifo.cnt[h0:h1].copy(),
            fifo.ints[h0:h1].copy(), fifo.floats[h0:h1].copy())


@kernel
def fifo_reserve(fifo, extra: int):
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
        if ws_sub(ws, dqi, dqf, g, f_p[h], f_c[h], f_i, f_f, h, iops, fops):
            ht.remove_in(slots, hashes, free, meta, g)
        ht_[0] += 1
    if emit and ws.nact[0] > 0:
        end = (p + 1) * slide
        m = ws_emit(ws, dqi, dqf, tkeys, iops, fops, end - panes * slide, end, out, m, sel, rtab)
    return m


# blocked-scan outcomes
DONE, NEED_ROOM, NEED_OUT = 0, 1, 2


@scan
def asm_scan(ws, dqi, dqf, table, fifo, out, pos, cur, e_pane, e_keys, e_cnt, e_i, e_f, hi: int,
             iops, fops, panes: int, slide: int, emit: bool, upto: int, sel, rtab) -> int:
    """Feed entries pos[0]..hi (pane order), then close panes < ``upto``.

    ``cur[0]`` is the open pane (the smallest not yet closed; INT64_MIN before any).
    pos = (next entry, rows written).  Returns DONE, or NEED_ROOM (the key table is full) /
    NEED_OUT (the output may not hold the next window) for the driver.
    """
    slots, tkeys, hashes, free, meta = table
    f_p, f_g, f_c, f_i, f_f, ht_, last = fifo
    r, m = pos[0], pos[1]
    cap = out[0].shape[0]
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
        ws_add(ws, dqi, dqf, g, e_pane[r], e_cnt[r], e_i, e_f, r, iops, fops)
        t = last[g]
        if ht_[0] <= t < ht_[1] and f_g[t] == g and f_p[t] == e_pane[r]:
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
def asm_flush_scan(ws, dqi, dqf, table, fifo, out, pos, cur, iops, fops, panes: int,
                   slide: int, sel, rtab) -> int:
    """End of stream: close panes until the window is empty (NEED_OUT when full)."""
    slots, tkeys, hashes, free, meta = table
    ht_ = fifo.head_tail
    m = pos[1]
    cap = out[0].shape[0]
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
def asm_reset(ws, dqi, dqf, fifo) -> None:
    """Forget the window (before loading a long task's tail)."""
    ws_clear(ws, dqi, dqf)
    fifo.head_tail[0] = 0
    fifo.head_tail[1] = 0


@kernel
def asm_feed(ws, dqi, dqf, table, fifo, out, cur, e_pane, e_keys, e_cnt, e_i, e_f, iops, fops,
             panes: int, slide: int, emit: bool, upto: int, m0: int, sel):
    """Feed a batch of pane partials, then close panes < ``upto``; return the state and rows.

    Drives :func:`asm_scan`, inserting new keys and growing the output when it blocks.
    With ``emit`` False panes close without emitting (loading a task's tail, whose
    windows the task emitted itself).
    """
    n = e_pane.shape[0]
    ws, dqi, dqf = ws_reserve(ws, dqi, dqf, table.meta[1] + n, n)
    fifo = fifo_groups(fifo_reserve(fifo, n), ws.cnt.shape[0])
    rtab = rollup_table(sel, ws.cnt.shape[0])
    pos = np.array([0, m0], dtype=np.int64)
    while True:
        status = asm_scan(ws, dqi, dqf, table, fifo, out, pos, cur, e_pane, e_keys, e_cnt, e_i,
                          e_f, n, iops, fops, panes, slide, emit, upto, sel, rtab)
        if status == DONE:
            break
        if status == NEED_ROOM:
            table = ht.grow(table)
        else:
            out = out_reserve(out, 2 * out[0].shape[0] + ws.nact[0])
    return ws, dqi, dqf, table, fifo, out, pos[1]


@kernel
def asm_flush(ws, dqi, dqf, table, fifo, out, cur, iops, fops, panes: int, slide: int, sel):
    """End of stream: emit every window that still holds tuples; return (out, rows)."""
    pos = np.zeros(2, dtype=np.int64)
    rtab = rollup_table(sel, ws.cnt.shape[0])
    while asm_flush_scan(ws, dqi, dqf, table, fifo, out, pos, cur, iops, fops, panes,
                         slide, sel, rtab) != DONE:
        out = out_reserve(out, 2 * out[0].shape[0] + ws.nact[0])
    return out, pos[1]


# -- key-partitioned assembly ---------------------------------------------------------------------
@kernel
def partition_rows(keys, cols, parts: int):
    """Rows of ``keys`` by partition: the hash of their columns ``cols``, from its high bits (a
    partition's own hash table uses the low ones), mod ``parts``.  Returns (order, starts):
    partition p's rows are ``order[starts[p]:starts[p + 1]]``, in their original order."""
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
    for p in range(parts):
        starts[p + 1] += starts[p]
    at = starts[:parts].copy()
    order = np.empty(n, dtype=np.int64)
    for r in range(n):
        order[at[pid[r]]] = r
        at[pid[r]] += 1
    return order, starts


@kernel
def merge_rows(s_t, e_t, k_t, c_t, i_t, f_t):
    """P partitions' window rows (tuples of each partition's column arrays: starts, ends, keys,
    counts, ints, floats - each partition's rows in window-end order) as one set of arrays in
    window-end order: window by window, each partition's rows of it in partition order.  One
    pass, no sort; the output is allocated once."""
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
