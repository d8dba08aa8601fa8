"""Result rows of window kernels: the output buffers, the key helpers that read and write
either kind of key columns, which groups a window emits (``selection``: all, the largest
count / value, roll-ups) and the emission of one window from its state (``emit_window_rows``).

Split from :mod:`scabbard.kernels.window` (the window state) and
:mod:`scabbard.kernels.assembler` (the sequential assembler), which both emit through it.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import literal_unroll, types
from numba.extending import overload

from scabbard.kernels import _check as check
from scabbard.kernels import hashtable as ht
from scabbard.kernels._jit import inline, kernel
from scabbard.kernels.aggregate import SUM, _grow_rows

# -- result rows ----------------------------------------------------------------------------------
# out: a ResultRows (below).  Its keys are either one int64 matrix [n, K] (a key word per
# column) or a tuple of K columns, each of its result column's type ("typed": the rows are the
# result's key columns as written, with no pass to split the words and half the bytes for
# int32 keys - emission-bound queries such as LRB2, 30 result rows per input tuple, are bound
# by the bytes they write).  The helpers below read and write either kind inside the kernels
# (numba picks the code by the type).  They are not inlined at numba IR level
# (``inline="always"``): so inlined into emit_window_rows, they made the min/max deque reads
# return garbage (a random-query test found it); LLVM inlines them.


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
    check.arrays("split_words", np.int64, 2, keys=keys)
    check.require("split_words", len(words) == len(dtypes)
                  and all(0 <= w < keys.shape[1] for w in words),
                  lambda: f"one dtype a word of keys' {keys.shape[1]}, got words {list(words)}")
    outs = tuple(np.empty(keys.shape[0], d) for d in dtypes)
    if outs:  # on no rows too: the warm-up's empty windows compile it for the run
        _split_words(keys, np.asarray(words, dtype=np.int64), outs)
    return list(outs)


@kernel
def _run_starts(values, out) -> int:
    m = 0
    for i in range(values.shape[0]):
        if i == 0 or values[i] != values[i - 1]:
            out[m] = i
            m += 1
    return m


def run_starts(values: np.ndarray) -> np.ndarray:
    """The first offset of each run of equal values (result rows grouped by window: each
    window's first row), in one pass with no temporaries - numpy's compare of neighbours,
    then its nonzero, took the dataflow's merge ~1 ns a row (LRB2: 30 rows an input
    tuple)."""
    check.arrays("run_starts", np.int64, 1, values=values)
    out = np.empty(len(values), dtype=np.int64)  # pages past the runs' count never touched
    return out[:_run_starts(values, out)].copy()


class ResultRows(NamedTuple):
    """Windows' result rows, ``n`` of room (the rows written are counted by the caller)."""

    start: np.ndarray   # int64[n]: window start
    end: np.ndarray     # int64[n]: window end
    keys: object        # int64[n, K] key words, or a tuple of K typed key columns
    count: np.ndarray   # int64[n]: tuples in the window's group
    ints: np.ndarray    # int64[n, ni]: integer aggregates
    floats: np.ndarray  # float64[n, nf]: float aggregates


@kernel
def out_new(k: int, ni: int, nf: int, n: int):
    n = max(n, 16)
    return ResultRows(np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64),
                      np.empty((n, k), dtype=np.int64), np.empty(n, dtype=np.int64),
                      np.empty((n, ni), dtype=np.int64), np.empty((n, nf), dtype=np.float64))


@kernel
def out_like(proto, ni: int, nf: int, n: int):
    """:func:`out_new` with keys of the kind of ``proto`` (:func:`keys_like`)."""
    n = max(n, 16)
    return ResultRows(np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64),
                      keys_like(proto, n), np.empty(n, dtype=np.int64),
                      np.empty((n, ni), dtype=np.int64), np.empty((n, nf), dtype=np.float64))


@kernel
def out_reserve(out, need: int):
    if need <= out.start.shape[0]:
        return out
    n = max(2 * out.start.shape[0], need)
    return ResultRows(_grow_rows(out.start, n), _grow_rows(out.end, n), grow_keys(out.keys, n),
                      _grow_rows(out.count, n), _grow_rows(out.ints, n),
                      _grow_rows(out.floats, n))


def empty_result_rows(words: int, ints: int, floats: int, rows: int) -> ResultRows:
    """Room for ``rows`` result rows of ``words`` key words, ``ints`` integer and ``floats``
    float aggregates, keys as one int64 matrix (``out_new``, from Python)."""
    check.require("empty_result_rows", min(words, ints, floats, rows) >= 0,
                  lambda: f"sizes must be >= 0, got {words}, {ints}, {floats}, {rows}")
    return out_new(words, ints, floats, rows)


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


def check_selection(kernel: str, sel: np.ndarray, words: int, ints: int, floats: int) -> None:
    """``sel`` (an int64 array) is an emission of windows with ``words`` key words, ``ints``
    integer and ``floats`` float slots: its kind one of the five, its slot and key columns
    theirs (a wrong one would read past the window state's rows)."""
    check.require(kernel, sel.size >= 2 and ALL_GROUPS <= sel[0] <= ROLLUP_COUNT,
                  "sel must be a selection (kind, slot, columns...)")
    kind, slot, columns = int(sel[0]), int(sel[1]), sel[2:]
    slots = {MAX_INT: ints, MAX_FLOAT: floats}.get(kind)
    check.require(kernel, slots is None or 0 <= slot < slots,
                  lambda: f"sel's slot {slot} is not one of the {slots} its kind reads")
    inside = bool(((columns >= 0) & (columns < words)).all())  # (none: one group a window)
    check.require(kernel, kind != ROLLUP_COUNT or inside,
                  lambda: f"sel's key columns {columns.tolist()} are not among the {words} "
                  f"key words")


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
    o_s, o_e, o_k, o_c = out.start, out.end, out.keys, out.count
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
def emit_window_rows(ws, dqi, dqf, keys, iops, fops, start: int, end: int, out, m: int, sel,
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


