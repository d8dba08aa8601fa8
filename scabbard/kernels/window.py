"""Incremental sliding-window assembly over pane partials (§2.3; LightSaber's window fragments).

The window state holds, per group, the aggregate of the panes currently inside
the window.  Sliding by one pane adds the new pane's partials and evicts the
pane that left:

* count and int sums: exact int64 add / subtract;
* float sums: add / subtract with Neumaier compensation, so long runs do not
  drift (a window whose values cancel comes back to exactly what a fresh sum gives);
* min / max (not invertible): a monotone deque per (group, slot) of (pane, value)
  nodes in a node pool - amortised O(1) per partial, front = the window's extreme.

A group with no tuples left in the window leaves the active set (and, in the
assembler, the key table), so an endless run keeps bounded state.

The state is a tuple of arrays (numba-friendly); functions that may grow it
return it.  Results are written to growable row buffers
``(window_start, window_end, keys, count, ints, floats)``.
"""

from __future__ import annotations

import numpy as np

from scabbard.kernels import hashtable as ht
from scabbard.kernels._jit import kernel
from scabbard.kernels.aggregate import MAX, SUM, _grow_rows

# -- monotone deques for min / max ------------------------------------------------------------


@kernel
def dq_new(groups: int, slots: int, values_dtype_probe: np.ndarray):
    head = np.full((groups, slots), -1, dtype=np.int64)
    tail = np.full((groups, slots), -1, dtype=np.int64)
    n = 64
    val = np.empty(n, dtype=values_dtype_probe.dtype)
    pane = np.empty(n, dtype=np.int64)
    nxt = np.empty(n, dtype=np.int64)
    prv = np.empty(n, dtype=np.int64)
    free = np.empty(n, dtype=np.int64)
    meta = np.zeros(2, dtype=np.int64)  # next fresh node, free-stack height
    return head, tail, val, pane, nxt, prv, free, meta


@kernel
def _dq_alloc(dq):
    head, tail, val, pane, nxt, prv, free, meta = dq
    if meta[1] > 0:
        meta[1] -= 1
        return free[meta[1]], dq
    if meta[0] == val.shape[0]:
        n = 2 * val.shape[0]
        val = _grow_rows(val, n)
        pane = _grow_rows(pane, n)
        nxt = _grow_rows(nxt, n)
        prv = _grow_rows(prv, n)
        free = _grow_rows(free, n)
    node = meta[0]
    meta[0] += 1
    return node, (head, tail, val, pane, nxt, prv, free, meta)


@kernel
def _dq_release(dq, node: int) -> None:
    free, meta = dq[6], dq[7]
    free[meta[1]] = node
    meta[1] += 1


@kernel
def dq_push(dq, g: int, s: int, p: int, v, is_max: bool):
    """Append (pane p, value v), dropping tail values v dominates."""
    head, tail, val, pane, nxt, prv, free, meta = dq
    t = tail[g, s]
    while t != -1 and ((val[t] <= v) if is_max else (val[t] >= v)):
        before = prv[t]
        _dq_release(dq, t)
        t = before
    node, dq = _dq_alloc(dq)
    head, tail, val, pane, nxt, prv, free, meta = dq
    val[node] = v
    pane[node] = p
    prv[node] = t
    nxt[node] = -1
    if t != -1:
        nxt[t] = node
    else:
        head[g, s] = node
    tail[g, s] = node
    return dq


@kernel
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


@kernel
def dq_clear(dq, g: int, s: int) -> None:
    dq_evict(dq, g, s, np.iinfo(np.int64).max)


# -- window state ----------------------------------------------------------------------------


@kernel
def ws_new(groups: int, ni: int, nf: int):
    groups = max(groups, 16)
    wcnt = np.zeros(groups, dtype=np.int64)
    wi = np.zeros((groups, ni), dtype=np.int64)
    wf = np.zeros((groups, nf), dtype=np.float64)
    wc = np.zeros((groups, nf), dtype=np.float64)
    act = np.empty(groups, dtype=np.int64)
    apos = np.full(groups, -1, dtype=np.int64)
    nact = np.zeros(1, dtype=np.int64)
    idq = dq_new(groups, ni, np.zeros(1, dtype=np.int64))
    fdq = dq_new(groups, nf, np.zeros(1, dtype=np.float64))
    return wcnt, wi, wf, wc, act, apos, nact, idq, fdq


@kernel
def _grow_dq_groups(dq, n: int):
    head, tail, val, pane, nxt, prv, free, meta = dq
    h2 = np.full((n, head.shape[1]), -1, dtype=np.int64)
    h2[: head.shape[0]] = head
    t2 = np.full((n, tail.shape[1]), -1, dtype=np.int64)
    t2[: tail.shape[0]] = tail
    return h2, t2, val, pane, nxt, prv, free, meta


@kernel
def ws_reserve(ws, g: int):
    """``ws`` with room for group id ``g``."""
    wcnt, wi, wf, wc, act, apos, nact, idq, fdq = ws
    if g < wcnt.shape[0]:
        return ws
    n = max(2 * wcnt.shape[0], g + 1)
    wcnt2 = np.zeros(n, dtype=np.int64)
    wcnt2[: wcnt.shape[0]] = wcnt
    wi2 = np.zeros((n, wi.shape[1]), dtype=np.int64)
    wi2[: wi.shape[0]] = wi
    wf2 = np.zeros((n, wf.shape[1]), dtype=np.float64)
    wf2[: wf.shape[0]] = wf
    wc2 = np.zeros((n, wc.shape[1]), dtype=np.float64)
    wc2[: wc.shape[0]] = wc
    act2 = np.empty(n, dtype=np.int64)
    act2[: act.shape[0]] = act
    apos2 = np.full(n, -1, dtype=np.int64)
    apos2[: apos.shape[0]] = apos
    return (wcnt2, wi2, wf2, wc2, act2, apos2, nact, _grow_dq_groups(idq, n),
            _grow_dq_groups(fdq, n))


@kernel
def ws_add(ws, g: int, p: int, cnt: int, iv: np.ndarray, fv: np.ndarray, iops, fops):
    """Add one pane partial of group ``g`` (pane ``p``); return the state."""
    ws = ws_reserve(ws, g)
    wcnt, wi, wf, wc, act, apos, nact, idq, fdq = ws
    if wcnt[g] == 0:
        apos[g] = nact[0]
        act[nact[0]] = g
        nact[0] += 1
    wcnt[g] += cnt
    for j in range(iv.shape[0]):
        if iops[j] == SUM:
            wi[g, j] += iv[j]
        else:
            idq = dq_push(idq, g, j, p, iv[j], iops[j] == MAX)
    for j in range(fv.shape[0]):
        if fops[j] == SUM:
            s, x = wf[g, j], fv[j]
            t = s + x
            if abs(s) >= abs(x):
                wc[g, j] += (s - t) + x
            else:
                wc[g, j] += (x - t) + s
            wf[g, j] = t
        else:
            fdq = dq_push(fdq, g, j, p, fv[j], fops[j] == MAX)
    return wcnt, wi, wf, wc, act, apos, nact, idq, fdq


@kernel
def ws_sub(ws, g: int, p: int, cnt: int, iv: np.ndarray, fv: np.ndarray, iops, fops) -> bool:
    """Evict one pane partial of group ``g``; True if the group left the window."""
    wcnt, wi, wf, wc, act, apos, nact, idq, fdq = ws
    wcnt[g] -= cnt
    for j in range(iv.shape[0]):
        if iops[j] == SUM:
            wi[g, j] -= iv[j]
        else:
            dq_evict(idq, g, j, p)
    for j in range(fv.shape[0]):
        if fops[j] == SUM:
            s, x = wf[g, j], -fv[j]
            t = s + x
            if abs(s) >= abs(x):
                wc[g, j] += (s - t) + x
            else:
                wc[g, j] += (x - t) + s
            wf[g, j] = t
        else:
            dq_evict(fdq, g, j, p)
    if wcnt[g] != 0:
        return False
    _deactivate(ws, g)
    return True


@kernel
def _deactivate(ws, g: int) -> None:
    wcnt, wi, wf, wc, act, apos, nact, idq, fdq = ws
    wcnt[g] = 0
    for j in range(wi.shape[1]):
        wi[g, j] = 0
        dq_clear(idq, g, j)
    for j in range(wf.shape[1]):
        wf[g, j] = 0.0
        wc[g, j] = 0.0
        dq_clear(fdq, g, j)
    last = act[nact[0] - 1]
    act[apos[g]] = last
    apos[last] = apos[g]
    apos[g] = -1
    nact[0] -= 1


@kernel
def ws_clear(ws) -> None:
    """Empty the window (every group leaves)."""
    act, nact = ws[4], ws[6]
    while nact[0] > 0:
        _deactivate(ws, act[nact[0] - 1])


# -- result rows -------------------------------------------------------------------------------


@kernel
def out_new(k: int, ni: int, nf: int, n: int):
    n = max(n, 16)
    return (np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64),
            np.empty((n, k), dtype=np.int64), np.empty(n, dtype=np.int64),
            np.empty((n, ni), dtype=np.int64), np.empty((n, nf), dtype=np.float64))


@kernel
def _out_reserve(out, need: int):
    if need <= out[0].shape[0]:
        return out
    n = max(2 * out[0].shape[0], need)
    return (_grow_rows(out[0], n), _grow_rows(out[1], n), _grow_rows(out[2], n),
            _grow_rows(out[3], n), _grow_rows(out[4], n), _grow_rows(out[5], n))


@kernel
def ws_emit(ws, keys: np.ndarray, iops, fops, start: int, end: int, out, m: int):
    """Write one row per active group for the window [start, end); return (out, m)."""
    wcnt, wi, wf, wc, act, apos, nact, idq, fdq = ws
    na = nact[0]
    out = _out_reserve(out, m + na)
    o_s, o_e, o_k, o_c, o_i, o_f = out
    ih, iv = idq[0], idq[2]
    fh, fvv = fdq[0], fdq[2]
    for a in range(na):
        g = act[a]
        o_s[m] = start
        o_e[m] = end
        for j in range(keys.shape[1]):
            o_k[m, j] = keys[g, j]
        o_c[m] = wcnt[g]
        for j in range(wi.shape[1]):
            o_i[m, j] = wi[g, j] if iops[j] == SUM else iv[ih[g, j]]
        for j in range(wf.shape[1]):
            o_f[m, j] = wf[g, j] + wc[g, j] if fops[j] == SUM else fvv[fh[g, j]]
        m += 1
    return out, m


# -- windows inside one task -------------------------------------------------------------------


@kernel
def _windows_from_partials(pp_pane, pp_gid, pp_cnt, pp_i, pp_f, gkeys, iops, fops,
                           panes: int, slide: int, p_lo: int, p_hi: int):
    n = pp_pane.shape[0]
    ws = ws_new(gkeys.shape[0], pp_i.shape[1], pp_f.shape[1])
    out = out_new(gkeys.shape[1], pp_i.shape[1], pp_f.shape[1], 1024)
    m = 0
    rng = panes * slide
    first = p_lo - panes + 1
    add = np.searchsorted(pp_pane, first)
    ev = add
    p = first
    while p <= p_hi:
        while add < n and pp_pane[add] == p:
            ws = ws_add(ws, pp_gid[add], p, pp_cnt[add], pp_i[add], pp_f[add], iops, fops)
            add += 1
        while ev < add and pp_pane[ev] <= p - panes:
            ws_sub(ws, pp_gid[ev], pp_pane[ev], pp_cnt[ev], pp_i[ev], pp_f[ev], iops, fops)
            ev += 1
        if ws[6][0] > 0:
            if p >= p_lo:
                end = (p + 1) * slide
                out, m = ws_emit(ws, gkeys, iops, fops, end - rng, end, out, m)
            p += 1
        else:  # empty window: jump to the next pane with data
            p = pp_pane[add] if add < n else p_hi + 1
    return out[0][:m], out[1][:m], out[2][:m], out[3][:m], out[4][:m], out[5][:m]


def windows_from_partials(partials, iops, fops, panes: int, slide_ms: int, p_lo: int, p_hi: int):
    """Results of the windows ending at panes ``p_lo..p_hi`` from one task's pane partials.

    ``partials`` is what :func:`scabbard.kernels.aggregate.pane_aggregate` returns; every
    pane the windows need must be complete in it.  Windows without tuples are skipped.
    """
    pane, gid, cnt, iv, fv, gkeys = partials
    if panes < 1 or slide_ms < 1:
        raise ValueError("panes and slide must be positive")
    iops = np.ascontiguousarray(iops, dtype=np.int64)
    fops = np.ascontiguousarray(fops, dtype=np.int64)
    return _windows_from_partials(pane, gid, cnt, iv, fv, gkeys, iops, fops, panes, slide_ms,
                                  p_lo, p_hi)


# -- the assembler's state machine (sequential, across tasks) -----------------------------------


@kernel
def fifo_new(k: int, ni: int, nf: int):
    n = 1024
    return (np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64),
            np.empty((n, ni), dtype=np.int64), np.empty((n, nf), dtype=np.float64),
            np.zeros(2, dtype=np.int64))  # head, tail


@kernel
def _fifo_push(fifo, p: int, g: int, c: int, iv, fv):
    f_p, f_g, f_c, f_i, f_f, ht_ = fifo
    if ht_[1] == f_p.shape[0]:
        if ht_[0] > f_p.shape[0] // 2:  # compact: move live entries down
            live = ht_[1] - ht_[0]
            f_p[:live] = f_p[ht_[0]:ht_[1]]
            f_g[:live] = f_g[ht_[0]:ht_[1]]
            f_c[:live] = f_c[ht_[0]:ht_[1]]
            f_i[:live] = f_i[ht_[0]:ht_[1]]
            f_f[:live] = f_f[ht_[0]:ht_[1]]
            ht_[0], ht_[1] = 0, live
        else:
            n = 2 * f_p.shape[0]
            f_p, f_g, f_c = _grow_rows(f_p, n), _grow_rows(f_g, n), _grow_rows(f_c, n)
            f_i, f_f = _grow_rows(f_i, n), _grow_rows(f_f, n)
    t = ht_[1]
    f_p[t], f_g[t], f_c[t] = p, g, c
    f_i[t] = iv
    f_f[t] = fv
    ht_[1] += 1
    return f_p, f_g, f_c, f_i, f_f, ht_


@kernel
def _close(ws, table, fifo, out, m, iops, fops, p: int, panes: int, slide: int, emit: bool):
    """Close pane ``p``: evict panes <= p - panes, emit the window ending at p."""
    f_p, f_g, f_c, f_i, f_f, ht_ = fifo
    while ht_[0] < ht_[1] and f_p[ht_[0]] <= p - panes:
        h = ht_[0]
        g = f_g[h]
        if ws_sub(ws, g, f_p[h], f_c[h], f_i[h], f_f[h], iops, fops):
            ht.remove(table, g)
        ht_[0] += 1
    if emit and ws[6][0] > 0:
        end = (p + 1) * slide
        out, m = ws_emit(ws, table[1], iops, fops, end - panes * slide, end, out, m)
    return out, m


@kernel
def asm_feed(ws, table, fifo, out, m, cur, e_pane, e_keys, e_cnt, e_i, e_f, lo: int, hi: int,
             iops, fops, panes: int, slide: int, emit: bool):
    """Feed entries [lo, hi) (pane order); close panes before each new pane.

    ``cur[0]`` is the open pane (the smallest not yet closed; ``INT64_MIN`` before the
    first entry).  With ``emit`` False, panes close without emitting (loading a task's
    tail, whose windows the task emitted itself).
    """
    for r in range(lo, hi):
        q = e_pane[r]
        if cur[0] == np.iinfo(np.int64).min:
            cur[0] = q
        if q < cur[0]:
            raise ValueError("pane partials arrived out of order")
        while cur[0] < q:
            if ws[6][0] == 0 and fifo[5][0] == fifo[5][1]:
                cur[0] = q  # nothing in the window: skip the empty panes at once
                break
            out, m = _close(ws, table, fifo, out, m, iops, fops, cur[0], panes, slide, emit)
            cur[0] += 1
        g, _, table = ht.find_or_insert(table, e_keys, r)
        ws = ws_add(ws, g, q, e_cnt[r], e_i[r], e_f[r], iops, fops)
        fifo = _fifo_push(fifo, q, g, e_cnt[r], e_i[r], e_f[r])
    return ws, table, fifo, out, m


@kernel
def asm_close_until(ws, table, fifo, out, m, cur, upto: int, iops, fops, panes: int, slide: int,
                    emit: bool):
    """Close every pane < ``upto`` (e.g. panes the watermark has passed)."""
    while cur[0] < upto:
        if ws[6][0] == 0 and fifo[5][0] == fifo[5][1]:
            cur[0] = upto
            break
        out, m = _close(ws, table, fifo, out, m, iops, fops, cur[0], panes, slide, emit)
        cur[0] += 1
    return out, m


@kernel
def asm_flush(ws, table, fifo, out, m, cur, iops, fops, panes: int, slide: int):
    """End of stream: close panes until the window is empty."""
    while ws[6][0] > 0 or fifo[5][0] < fifo[5][1]:
        out, m = _close(ws, table, fifo, out, m, iops, fops, cur[0], panes, slide, True)
        cur[0] += 1
    return out, m


@kernel
def asm_reset(ws, fifo):
    """Forget the window (before loading a long task's tail)."""
    ws_clear(ws)
    fifo[5][0] = 0
    fifo[5][1] = 0
