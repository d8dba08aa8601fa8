"""numba kernels against plain Python references, on random inputs (hypothesis).

Covers empty batches, a single key, all-distinct keys, windows spanning many
batches, batch boundaries inside a pane, and incremental = batch for the assembler.
"""

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import reference as ref
from scabbard.kernels import assembler as ka
from scabbard.kernels import hashtable as ht
from scabbard.kernels import rows as kr
from scabbard.kernels import window as kw
from scabbard.kernels.aggregate import MAX, MIN, SUM, _pane_aggregate, pane_aggregate
from scabbard.kernels.window import windows_from_partials

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def streams(draw, max_rows=250):
    n = draw(st.integers(0, max_rows))
    k = draw(st.integers(0, 3))
    domain = draw(st.sampled_from([1, 3, 50, 10**9]))  # single key ... all distinct
    gaps = draw(st.lists(st.integers(0, 700), min_size=n, max_size=n))
    ts = np.cumsum(np.asarray(gaps, dtype=np.int64)) if n else np.zeros(0, np.int64)
    keys = np.asarray(draw(st.lists(st.lists(st.integers(0, domain - 1), min_size=k, max_size=k),
                                    min_size=n, max_size=n)), dtype=np.int64).reshape(n, k)
    iops = np.asarray(draw(st.lists(st.sampled_from([SUM, MIN, MAX]), max_size=3)), dtype=np.int64)
    fops = np.asarray(draw(st.lists(st.sampled_from([SUM, MIN, MAX]), max_size=3)), dtype=np.int64)
    ints = np.asarray(draw(st.lists(st.lists(st.integers(-1000, 1000), min_size=len(iops),
                                             max_size=len(iops)), min_size=n, max_size=n)),
                      dtype=np.int64).reshape(n, len(iops))
    floats = np.asarray(draw(st.lists(st.lists(st.floats(-1e3, 1e3), min_size=len(fops),
                                               max_size=len(fops)), min_size=n, max_size=n)),
                        dtype=np.float64).reshape(n, len(fops))
    slide = draw(st.sampled_from([1, 100, 1000]))
    panes = draw(st.sampled_from([1, 2, 5, 30]))
    return ts, keys, ints, floats, iops, fops, slide, panes


def as_dict(pane, gid, cnt, iv, fv, gkeys):
    return {(int(pane[r]), tuple(int(x) for x in gkeys[gid[r]])): (int(cnt[r]), list(iv[r]), list(fv[r]))
            for r in range(len(pane))}


def assert_same(got: dict, want: dict):
    assert got.keys() == want.keys()
    for k, (c, iv, fv) in want.items():
        gc, giv, gfv = got[k]
        assert gc == c and list(giv) == list(iv), k
        np.testing.assert_allclose(gfv, fv, rtol=1e-9, atol=1e-9)


@SETTINGS
@given(streams())
def test_pane_aggregate_matches_reference(s):
    ts, keys, ints, floats, iops, fops, slide, _ = s
    got = pane_aggregate(ts, keys, ints, floats, iops, fops, slide)
    pane = got[0]
    assert np.all(np.diff(pane) >= 0), "partials come out in pane order"
    assert_same(as_dict(*got), ref.pane_partials(ts, keys, ints, floats, iops, fops, slide))


@SETTINGS
@given(streams(), st.integers(0, 10**12))
def test_a_global_aggregate_folds_panes_as_the_hash_aggregation_does(s, shift):
    """Without group keys the panes are folded in registers (no hash table): the same
    partials, array for array, as the hash aggregation's - and with a replay's deferred
    shift, those of the shifted timestamps."""
    ts, _, ints, floats, iops, fops, slide, _ = s
    none = np.zeros((len(ts), 0), np.int64)
    got = pane_aggregate(ts, none, ints, floats, iops, fops, slide, shift=shift)
    want = _pane_aggregate(ts + shift, 0, none, ints, floats, iops, fops, slide)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
    if len(ts):
        assert_same(as_dict(*got), ref.pane_partials(ts + shift, none, ints, floats, iops, fops,
                                                     slide))


def test_pane_aggregate_rejects_disorder():
    with pytest.raises(ValueError, match="event-time order"):
        pane_aggregate(np.array([5, 3]), np.zeros((2, 1)), np.zeros((2, 0)), np.zeros((2, 0)),
                       [], [], 1)


def window_dict(res):
    ws, we, keys, cnt, iv, fv = res
    assert np.all(we - ws == we[0] - ws[0]) if len(we) else True
    return {(int(we[r]), tuple(int(x) for x in keys[r])): (int(cnt[r]), list(iv[r]), list(fv[r]))
            for r in range(len(we))}


@SETTINGS
@given(streams(), st.integers(0, 40), st.integers(0, 40))
def test_windows_from_partials_match_reference(s, lo_off, span):
    ts, keys, ints, floats, iops, fops, slide, panes = s
    partials = pane_aggregate(ts, keys, ints, floats, iops, fops, slide)
    first = int(ts[0]) // slide if len(ts) else 0
    p_lo = first + lo_off
    p_hi = p_lo + span
    got = window_dict(windows_from_partials(partials, iops, fops, panes, slide, p_lo, p_hi))
    want = ref.windows(ref.pane_partials(ts, keys, ints, floats, iops, fops, slide), iops, fops,
                       panes, slide, p_lo, p_hi)
    assert_same(got, want)


@pytest.mark.parametrize("seed", range(4))
def test_typed_keys_are_the_key_matrix_as_columns(seed):
    """Windows emitted with typed keys (a column per key word, of its result type): the
    matrix path's rows, each key word in its column; the other columns the same.  (One key
    layout: each layout is a compilation of the window kernel.)"""
    rng = np.random.default_rng(seed)
    n, slide, panes = 3000, 7, 5
    ts = np.sort(rng.integers(0, 400, n)).astype(np.int64)
    keys = np.stack([rng.integers(-3, 3, n), rng.integers(0, 1 << 40, n) % 5,
                     rng.integers(0, 4, n)], axis=1).astype(np.int64)
    ints, floats = rng.integers(-9, 9, (n, 2)), rng.random((n, 1))
    iops, fops = np.array([SUM, MIN]), np.array([MAX])
    partials = pane_aggregate(ts, keys, ints, floats, iops, fops, slide)
    args = (partials, iops, fops, panes, slide, 3 + seed, 50)
    matrix = windows_from_partials(*args)
    dtypes = (np.dtype("int32"), np.dtype("int64"), np.dtype("int32"))
    typed = windows_from_partials(*args, key_dtypes=dtypes)
    assert len(matrix[0]) > 100
    for j, (col, d) in enumerate(zip(typed[2], dtypes, strict=True)):
        assert col.dtype == d
        np.testing.assert_array_equal(col, matrix[2][:, j])
    for x, y in zip(typed[:2] + typed[3:], matrix[:2] + matrix[3:], strict=True):
        np.testing.assert_array_equal(x, y)


def assemble_in_chunks(partials, cuts, iops, fops, panes, slide, last_pane,
                       select=(kr.ALL_GROUPS, 0)):
    """Feed keyed partials to the sequential assembler in chunks, then flush."""
    pane, gid, cnt, iv, fv, gkeys = partials
    keys = gkeys[gid] if len(gid) else np.zeros((0, gkeys.shape[1]), np.int64)
    k, ni, nf = keys.shape[1], iv.shape[1], fv.shape[1]
    ws, dqi, dqf = kw.empty_window_state(16, ni, nf)
    table = ht.empty_key_table(k, 16)
    fifo = ka.empty_pane_fifo(ni, nf)
    out = kr.empty_result_rows(k, ni, nf, 16)
    cur = np.array([np.iinfo(np.int64).min])
    rows = []
    bounds = [0, *cuts, len(pane)]
    for a, b in zip(bounds, bounds[1:], strict=False):
        upto = int(pane[b]) if b < len(pane) else last_pane
        ws, dqi, dqf, table, fifo, out, m = ka.assemble_partials(
            ws, dqi, dqf, table, fifo, out, cur, pane[a:b], keys[a:b], cnt[a:b], iv[a:b], fv[a:b],
            iops, fops, panes, slide, True, upto, 0, kr.selection(*select))
        rows.append(tuple(x[:m].copy() for x in out))
    if cur[0] != np.iinfo(np.int64).min:
        out, m = ka.flush_windows(ws, dqi, dqf, table, fifo, out, cur, iops, fops, panes, slide,
                              kr.selection(*select))
        rows.append(tuple(x[:m].copy() for x in out))
    return tuple(np.concatenate([r[i] for r in rows]) for i in range(6))


def assemble_partitioned(partials, cuts, iops, fops, panes, slide, last_pane, parts, columns,
                         select=(kr.ALL_GROUPS, 0)):
    """:func:`assemble_in_chunks` with the groups split into ``parts`` partitions by the key
    ``columns`` (each partition its own state, fed its rows of every chunk and closing the same
    panes), the partitions' windows merged per chunk as the engine does."""
    from scabbard.engine.assembly import merge_windows

    pane, gid, cnt, iv, fv, gkeys = partials
    keys = gkeys[gid] if len(gid) else np.zeros((0, gkeys.shape[1]), np.int64)
    k, ni, nf = keys.shape[1], iv.shape[1], fv.shape[1]
    states = [[*kw.empty_window_state(16, ni, nf), ht.empty_key_table(k, 16), ka.empty_pane_fifo(ni, nf),
               kr.empty_result_rows(k, ni, nf, 16), np.array([np.iinfo(np.int64).min])]
              for _ in range(parts)]
    cols = np.asarray(columns, dtype=np.int64)
    sel = kr.selection(*select)
    merged = []
    bounds = [0, *cuts, len(pane)]
    for a, b in zip(bounds, bounds[1:], strict=False):
        upto = int(pane[b]) if b < len(pane) else last_pane
        order, starts = ka.partition_rows(keys[a:b], cols, parts)
        raws = []
        for p, st_ in enumerate(states):
            r = a + order[starts[p]:starts[p + 1]]
            ws, dqi, dqf, table, fifo, out, cur = st_
            ws, dqi, dqf, table, fifo, out, m = ka.assemble_partials(
                ws, dqi, dqf, table, fifo, out, cur, pane[r], keys[r], cnt[r], iv[r], fv[r],
                iops, fops, panes, slide, True, upto, 0, sel)
            st_[:6] = ws, dqi, dqf, table, fifo, out
            raws.append(tuple(x[:m].copy() for x in out))
        merged.append(merge_windows(raws))
    raws = []
    for ws, dqi, dqf, table, fifo, out, cur in states:
        if cur[0] != np.iinfo(np.int64).min:
            out, m = ka.flush_windows(ws, dqi, dqf, table, fifo, out, cur, iops, fops, panes, slide,
                                      sel)
            raws.append(tuple(x[:m].copy() for x in out))
    if raws:
        merged.append(merge_windows(raws))
    return tuple(np.concatenate([r[i] for r in merged]) for i in range(6))


def row_set(res) -> list:
    """Result rows as sorted tuples (a window's rows in any order)."""
    return sorted(zip(res[0].tolist(), res[1].tolist(), map(tuple, res[2].tolist()),
                      res[3].tolist(), map(tuple, res[4].tolist()), map(tuple, res[5].tolist()),
                      strict=True))


@SETTINGS
@given(streams(), st.lists(st.integers(0, 10**6), max_size=4), st.integers(1, 4), st.data())
def test_key_partitioned_assembly_emits_the_windows_of_one_state(s, raw_cuts, parts, data):
    """Partitions by key hash, each with its own window state, merged by window end, give every
    window exactly the rows of one sequential state, in window order - also when all keys fall
    in one partition and the others stay idle (one key), and for a fused per-window count
    partitioned by its own keys."""
    from scabbard.kernels.assembler import partition_rows

    ts, keys, ints, floats, iops, fops, slide, panes = s
    k = keys.shape[1]
    assume(k > 0)
    partials = pane_aggregate(ts, keys, ints, floats, iops, fops, slide)
    n = len(partials[0])
    cuts = sorted({c % n for c in raw_cuts}) if n else []
    last = int(partials[0][-1]) if n else 0
    one = assemble_in_chunks(partials, cuts, iops, fops, panes, slide, last)
    split = assemble_partitioned(partials, cuts, iops, fops, panes, slide, last, parts, range(k))
    assert row_set(split) == row_set(one)
    assert np.all(np.diff(split[1]) >= 0), "windows are emitted in order"
    columns = data.draw(st.lists(st.integers(0, k - 1), unique=True, min_size=1, max_size=k))
    select = (kr.ROLLUP_COUNT, 0, *columns)
    one = assemble_in_chunks(partials, cuts, iops, fops, panes, slide, last, select)
    split = assemble_partitioned(partials, cuts, iops, fops, panes, slide, last, parts, columns,
                                 select)
    assert rollup_rows(split, len(columns)) == rollup_rows(one, len(columns))
    # the partition of a row is a function of its key columns alone, and keeps their order
    order, starts = partition_rows(keys, np.arange(k, dtype=np.int64), parts)
    assert sorted(order.tolist()) == list(range(len(keys)))
    owner = {}
    for p in range(parts):
        rows = order[starts[p]:starts[p + 1]]
        assert np.all(np.diff(rows) > 0)
        for r in rows:
            assert owner.setdefault(tuple(keys[r].tolist()), p) == p


@SETTINGS
@given(streams(), st.lists(st.integers(0, 10**6), max_size=8))
def test_the_assembler_keeps_one_partial_per_group_and_pane(s, raw_cuts):
    """Tasks aggregate their own rows, so a (pane, group) that spans tasks comes as several
    partials: the window state folds them into one entry (its size is the key space's, not
    the tuples'), and the windows are the reference's."""
    ts, keys, ints, floats, iops, fops, slide, panes = s
    n = len(ts)
    assume(n > 0)
    cuts = sorted({c % n for c in raw_cuts} - {0})
    tasks = [pane_aggregate(ts[a:b], keys[a:b], ints[a:b], floats[a:b], iops, fops, slide)
             for a, b in zip([0, *cuts], [*cuts, n], strict=True)]
    k, ni, nf = keys.shape[1], len(iops), len(fops)
    ws, dqi, dqf = kw.empty_window_state(16, ni, nf)
    table, fifo = ht.empty_key_table(k, 16), ka.empty_pane_fifo(ni, nf)
    out, cur = kr.empty_result_rows(k, ni, nf, 16), np.array([np.iinfo(np.int64).min])
    sel, rows = kr.selection(kr.ALL_GROUPS, 0), []
    for i, (pane, gid, cnt, iv, fv, gkeys) in enumerate(tasks):
        upto = int(tasks[i + 1][0][0]) if i + 1 < len(tasks) else int(pane[-1])
        ws, dqi, dqf, table, fifo, out, m = ka.assemble_partials(
            ws, dqi, dqf, table, fifo, out, cur, pane, gkeys[gid], cnt, iv, fv, iops, fops,
            panes, slide, True, upto, 0, sel)
        rows.append(tuple(x[:m].copy() for x in out))
        head, tail = fifo[5]
        live = {(int(p), tuple(table[1][g].tolist())) for p, g in
                zip(fifo[0][head:tail], fifo[1][head:tail], strict=True)}
        assert tail - head == len(live), "a (pane, group) twice in the window state"
    out, m = ka.flush_windows(ws, dqi, dqf, table, fifo, out, cur, iops, fops, panes, slide, sel)
    rows.append(tuple(x[:m].copy() for x in out))
    got = tuple(np.concatenate([r[i] for r in rows]) for i in range(6))
    first, last = int(ts[0]) // slide, int(ts[-1]) // slide
    want = ref.windows(ref.pane_partials(ts, keys, ints, floats, iops, fops, slide), iops, fops,
                       panes, slide, first, last + panes)
    assert_same(window_dict(got), want)


@SETTINGS
@given(streams(), st.lists(st.integers(0, 10**6), max_size=6))
def test_assembler_incremental_equals_batch(s, raw_cuts):
    ts, keys, ints, floats, iops, fops, slide, panes = s
    partials = pane_aggregate(ts, keys, ints, floats, iops, fops, slide)
    n = len(partials[0])
    cuts = sorted({c % n for c in raw_cuts}) if n else []
    last = int(partials[0][-1]) if n else 0
    got_res = assemble_in_chunks(partials, cuts, iops, fops, panes, slide, last)
    ends = got_res[1]
    assert np.all(np.diff(ends) >= 0), "windows are emitted in order"
    p_lo = int(partials[0][0]) if n else 0
    want = ref.windows(ref.pane_partials(ts, keys, ints, floats, iops, fops, slide), iops, fops,
                       panes, slide, p_lo, last + panes)
    assert_same(window_dict(got_res), want)


def keep_largest(res, values):
    """The rows of each window whose ``values`` are the window's largest (the reference)."""
    we = res[1]
    keep = np.zeros(len(we), dtype=bool)
    for end in np.unique(we):
        rows = np.flatnonzero(we == end)
        keep[rows[values[rows] == values[rows].max()]] = True
    return tuple(a[keep] for a in res)


@SETTINGS
@given(streams(), st.integers(0, 40), st.lists(st.integers(0, 10**6), max_size=4),
       st.integers(0, 5))
def test_the_largest_groups_per_window_are_those_of_all_groups(s, span, raw_cuts, pick):
    """A keep-max fused into the emission (count, an int or a float slot) keeps exactly the
    rows the unfused emission has at each window's largest value - in a task's windows and in
    the sequential assembler alike."""
    ts, keys, ints, floats, iops, fops, slide, panes = s
    slots = [(kr.MAX_COUNT, 0)] + [(kr.MAX_INT, j) for j in range(len(iops))] + [
        (kr.MAX_FLOAT, j) for j in range(len(fops))]
    kind, slot = slots[pick % len(slots)]

    def values(res):
        return res[3] if kind == kr.MAX_COUNT else (res[4] if kind == kr.MAX_INT else res[5])[:, slot]

    partials = pane_aggregate(ts, keys, ints, floats, iops, fops, slide)
    p_lo = int(ts[0]) // slide if len(ts) else 0
    every = windows_from_partials(partials, iops, fops, panes, slide, p_lo, p_lo + span)
    top = windows_from_partials(partials, iops, fops, panes, slide, p_lo, p_lo + span,
                                (kind, slot))
    assert window_dict(top) == window_dict(keep_largest(every, values(every)))
    n = len(partials[0])
    cuts = sorted({c % n for c in raw_cuts}) if n else []
    last = int(partials[0][-1]) if n else 0
    every = assemble_in_chunks(partials, cuts, iops, fops, panes, slide, last)
    top = assemble_in_chunks(partials, cuts, iops, fops, panes, slide, last, (kind, slot))
    assert window_dict(top) == window_dict(keep_largest(every, values(every)))
    if len(every[1]):
        assert len(top[1]) >= len(np.unique(every[1])), "every window keeps a row at least"


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.sampled_from(["add", "del"]), st.integers(0, 60)), max_size=400))
def test_hash_table_behaves_like_a_dict(ops):
    table = ht.empty_key_table(2, 4)
    model: dict[tuple, int] = {}
    for op, v in ops:
        key = np.array([[v, v * 7 - 3]], dtype=np.int64)
        if op == "add":
            g, fresh, table = ht.find_or_insert(table, key, 0)
            if (v, v * 7 - 3) in model:
                assert not fresh and g == model[(v, v * 7 - 3)]
            else:
                assert fresh and g not in model.values()
                model[(v, v * 7 - 3)] = g
        elif (v, v * 7 - 3) in model:
            ht.remove(table, model.pop((v, v * 7 - 3)))
        assert ht.live(table) == len(model)
        for (a, b), g in model.items():
            probe = np.array([[a, b]], dtype=np.int64)
            assert ht.find(table, probe, 0, np.uint64(ht.hash_key(probe, 0, 2))) == g


@given(st.integers(0, 3), st.integers(0, 60), st.integers(0, 60), st.sampled_from([1, 3, 1000]))
@SETTINGS
def test_equi_join_matches_nested_loops(width, n, m, domain):
    from scabbard.kernels.join import equi_join

    rng = np.random.default_rng(n * 1000 + m * 10 + width)
    lk = rng.integers(0, domain, (n, width + 1))
    rk = rng.integers(0, domain, (m, width + 1))
    li, ri = equi_join(lk, rk)
    assert list(zip(li.tolist(), ri.tolist(), strict=True)) == ref.equi_join_pairs(lk, rk)


@given(st.sampled_from([1, 2]), st.integers(1, 300), st.sampled_from([5, 1 << 62]))
@SETTINGS
def test_the_inline_index_finds_the_relation_rows_the_generic_index_finds(width, n, domain):
    """The optimised kernels' join index (keys inline in the slots, one multiplication a
    hash): each key's row, -1 for a key the relation has not, one and two words, keys
    dense (clustered slots) and spread."""
    from scabbard.kernels.join import build_index, inline_index

    rng = np.random.default_rng(n * 10 + width)
    keys = np.unique(rng.integers(0, domain, (n, width)), axis=0)
    rng.shuffle(keys)
    asked = np.concatenate([keys, rng.integers(0, domain, (50, width)), -keys[:5] - 1])
    expect = [next((r for r in range(len(keys)) if (keys[r] == q).all()), -1) for q in asked]
    ix = inline_index(build_index(np.ascontiguousarray(keys, dtype=np.int64)))
    assert _probe_inline(ix, np.ascontiguousarray(asked, dtype=np.int64)).tolist() == expect


@functools.cache
def _inline_prober():
    from numba import njit

    from scabbard.kernels.join import probe_inline1, probe_inline2

    @njit
    def probe_all(ix, q):
        out = np.empty(q.shape[0], np.int64)
        for i in range(q.shape[0]):
            out[i] = probe_inline1(ix, q[i, 0]) if q.shape[1] == 1 else \
                probe_inline2(ix, q[i, 0], q[i, 1])
        return out

    return probe_all


def _probe_inline(ix, asked):
    return _inline_prober()(ix, asked)


def rollup(res, columns):
    """Per window end and value of the key ``columns``: how many groups the window has (the
    reference of a per-window count fused into the emission)."""
    counts: dict = {}
    for r in range(len(res[1])):
        key = (int(res[0][r]), int(res[1][r]), *(int(res[2][r, c]) for c in columns))
        counts[key] = counts.get(key, 0) + 1
    return counts


def rollup_rows(res, width):
    """The rows of a ROLLUP_COUNT emission, keyed as :func:`rollup`'s; no key twice."""
    got = {(int(res[0][r]), int(res[1][r]), *(int(x) for x in res[2][r, :width])): int(res[3][r])
           for r in range(len(res[1]))}
    assert len(got) == len(res[1]), "a window emits each value of the keys once"
    return got


@SETTINGS
@given(streams(), st.integers(0, 40), st.lists(st.integers(0, 10**6), max_size=4),
       st.data())
def test_the_groups_counted_per_key_value_are_those_of_all_groups(s, span, raw_cuts, data):
    """A per-window count grouped by some of the keys, fused into the emission, counts exactly
    the groups each window of the unfused emission has per value of those keys - in a task's
    windows and in the sequential assembler alike, for any subset and order of the keys."""
    ts, keys, ints, floats, iops, fops, slide, panes = s
    k = keys.shape[1]
    columns = data.draw(st.lists(st.integers(0, max(k - 1, 0)), unique=True, max_size=k))
    select = (kr.ROLLUP_COUNT, 0, *columns)
    partials = pane_aggregate(ts, keys, ints, floats, iops, fops, slide)
    p_lo = int(ts[0]) // slide if len(ts) else 0
    every = windows_from_partials(partials, iops, fops, panes, slide, p_lo, p_lo + span)
    counted = windows_from_partials(partials, iops, fops, panes, slide, p_lo, p_lo + span, select)
    assert rollup_rows(counted, len(columns)) == rollup(every, columns)
    n = len(partials[0])
    cuts = sorted({c % n for c in raw_cuts}) if n else []
    last = int(partials[0][-1]) if n else 0
    every = assemble_in_chunks(partials, cuts, iops, fops, panes, slide, last)
    counted = assemble_in_chunks(partials, cuts, iops, fops, panes, slide, last, select)
    assert rollup_rows(counted, len(columns)) == rollup(every, columns)
    assert np.all(np.diff(counted[1]) >= 0), "windows are emitted in order"


@pytest.mark.parametrize("rows", [0, 1, 1000])
def test_split_words_equals_a_column_at_a_time(rows):
    """The result's key columns in one pass over the rows = ``keys[:, j].astype(dtype)``,
    for each key type, words in any order, any rows (a row slice too)."""
    rng = np.random.default_rng(rows)
    keys = rng.integers(-(2**40), 2**40, (rows + 3, 5)).astype(np.int64)[2:rows + 2]
    keys[:, 1] %= 120  # an int8 key's values
    keys[:, 2] %= 2
    words, dtypes = [3, 1, 2, 0, 4], [np.int64, np.int8, np.bool_, np.float64, np.int32]
    got = kr.split_words(keys, words, dtypes)
    for c, (w, d) in enumerate(zip(words, dtypes, strict=True)):
        assert got[c].dtype == d and got[c].flags.c_contiguous
        assert np.array_equal(got[c], keys[:, w].astype(d)), (w, d)
    assert kr.split_words(keys, [], []) == []


@pytest.mark.parametrize("rows", [0, 1, 2, 1000])
def test_run_starts_are_the_first_rows_of_runs_of_equal_values(rows):
    """Each run's first offset, as numpy's compare of neighbours finds them (a slice too)."""
    rng = np.random.default_rng(rows)
    v = np.cumsum(rng.integers(0, 2, rows + 3) * rng.integers(-5, 6, rows + 3))[1:rows + 1]
    want = np.concatenate([[0], np.flatnonzero(v[1:] != v[:-1]) + 1]) if rows else []
    got = kr.run_starts(v.astype(np.int64))
    assert got.dtype == np.int64 and got.tolist() == list(want)


_CACHED_KERNEL = '''
from scabbard.kernels._jit import kernel

@kernel
def twice_the_sum(a):
    return 2 * a.sum()

@kernel
def thrice_the_sum(a):
    return 3 * a.sum()
'''

_LOAD_IT = '''
import sys
import numpy as np
import cached_kernel
from numba.core.registry import cpu_target
print(cached_kernel.twice_the_sum(np.arange(10)), sum(cached_kernel.twice_the_sum.stats.cache_hits.values()),
      "numba.np.polynomial.polynomial_core" in sys.modules)
if sys.argv[1:] == ["and-compile"]:
    print(cached_kernel.twice_the_sum(np.arange(4.0)))
if sys.argv[1:] == ["and-link"]:
    from numba import njit
    print(cached_kernel.thrice_the_sum(np.arange(10)))
    twice, thrice = (next(iter(k.overloads.values())) for k in
                     (cached_kernel.twice_the_sum, cached_kernel.thrice_the_sum))
    print(twice.library._shared_module is None, thrice.library._shared_module is None)
    plus_one = njit(lambda a: cached_kernel.twice_the_sum(a) + 1)  # compiled, links twice's
    print(plus_one(np.arange(10)), twice.library._shared_module is None,
          thrice.library._shared_module is None)
    engine = cpu_target.target_context.codegen()._engine
    print(engine.is_symbol_defined(thrice.fndesc.llvm_func_name),
          thrice.library._shared_module is None)
'''


def _cached_kernel_loader(tmp_path):
    """``run(*args)``: :data:`_LOAD_IT` in a new process, over :data:`_CACHED_KERNEL` written
    to ``tmp_path`` and a numba cache of its own there; its output lines."""
    import os
    import subprocess
    import sys
    (tmp_path / "cached_kernel.py").write_text(_CACHED_KERNEL)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}

    def run(*args):
        out = subprocess.run([sys.executable, "-c", _LOAD_IT, *args], env=env, capture_output=True,
                             text=True, timeout=300, check=True)
        return out.stdout.split("\n")

    return run


def test_a_kernel_loads_from_the_cache_without_numba_refreshing_its_registries(tmp_path):
    """A cold restart loads ~20 cached kernels; numba would first import and install every
    implementation it has (some 150 ms).  Loaded without, the kernel runs, and a signature
    the cache does not hold still compiles (numba's compiler refreshes for itself)."""
    run = _cached_kernel_loader(tmp_path)
    first = run()  # compiles, writes the cache
    assert first[0].split()[:2] == ["90", "0"], first
    loaded = run("and-compile")
    assert loaded[0].split() == ["90", "1", "False"], loaded  # from the cache, registries untouched
    assert loaded[1] == "12.0", loaded


def test_a_cached_kernel_parses_its_bitcode_when_it_is_linked_or_its_symbols_are_asked(
        tmp_path):
    """Cached kernels load as object code, their bitcode unparsed: a kernel compiled later
    that calls one links it (its bitcode parsed then), and numba's "is this symbol defined"
    lists the symbols of every kernel loaded so far before it answers no."""
    run = _cached_kernel_loader(tmp_path)
    run("and-link")  # compiles both, writes the cache
    out = run("and-link")
    assert out[0].split()[:2] == ["90", "1"] and out[1] == "135", out  # both from the cache
    assert out[2].split() == ["True", "True"], out  # neither parsed on loading
    assert out[3].split() == ["91", "False", "True"], out  # twice's parsed to link it
    assert out[4].split() == ["True", "False"], out  # thrice's listed to answer


def test_the_window_state_keeps_deque_room_only_for_min_and_max_slots():
    """A partial may push a value on each MIN/MAX slot's deque, so room for a push per
    partial is kept for those slots; a SUM slot never pushes and its deque keeps no room
    (a state of many keys summed holds no node pool beside its sums)."""
    from scabbard.kernels.aggregate import MIN, SUM

    n = 10_000
    pane, keys = np.zeros(n, np.int64), np.arange(n, dtype=np.int64).reshape(n, 1)
    cnt, iv, fv = np.ones(n, np.int64), np.ones((n, 1), np.int64), np.ones((n, 1), np.float64)
    iops, fops = np.array([SUM], np.int64), np.array([MIN], np.int64)
    ws, dqi, dqf = kw.empty_window_state(16, 1, 1)
    table, fifo = ht.empty_key_table(1, 16), ka.empty_pane_fifo(1, 1)
    out, cur = kr.empty_result_rows(1, 1, 1, 16), np.array([np.iinfo(np.int64).min])
    ws, dqi, dqf, *_ = ka.assemble_partials(
        ws, dqi, dqf, table, fifo, out, cur, pane, keys, cnt, iv, fv, iops, fops, 1, 1000,
        True, 0, 0, kr.selection(kr.ALL_GROUPS, 0))
    assert len(dqf.val) >= n  # the MIN slot: a node per partial
    assert len(dqi.val) < 1024  # the SUM slot: none kept


def test_the_window_state_grows_with_its_groups_not_with_the_partials_fed():
    """Feeding many partials of few groups (a reloaded partition: a key's partials of many
    tasks) keeps room for the groups and their (pane, group) entries, not for every partial
    fed: the state's arrays stay near the groups' size."""
    from scabbard.kernels.aggregate import SUM

    n, groups = 100_000, 1_000
    pane = np.repeat(np.arange(4, dtype=np.int64), n // 4)  # four panes, each of every group
    keys = (np.arange(n, dtype=np.int64) % groups).reshape(n, 1)
    cnt, iv, fv = np.ones(n, np.int64), np.ones((n, 1), np.int64), np.zeros((n, 0), np.float64)
    iops, fops = np.array([SUM], np.int64), np.zeros(0, np.int64)
    ws, dqi, dqf = kw.empty_window_state(16, 1, 0)
    table, fifo = ht.empty_key_table(1, 16), ka.empty_pane_fifo(1, 0)
    out, cur = kr.empty_result_rows(1, 1, 0, 16), np.array([np.iinfo(np.int64).min])
    ws, dqi, dqf, table, fifo, out, m = ka.assemble_partials(
        ws, dqi, dqf, table, fifo, out, cur, pane, keys, cnt, iv, fv, iops, fops, 4, 1000,
        False, 0, 0, kr.selection(kr.ALL_GROUPS, 0))
    assert len(ws.cnt) <= 4 * groups and len(fifo.last) <= 4 * groups
    assert len(fifo.pane) <= 4 * 4 * groups  # an entry per (pane, group), room doubled
    head, tail = fifo.head_tail
    assert tail - head == 4 * groups and int(ws.cnt.sum()) == n  # every partial is in


def test_a_cached_kernel_is_stale_when_a_kernel_it_may_inline_changes(tmp_path, monkeypatch):
    """numba keys a cached kernel by its own file only; the workbench's stamp adds every
    kernel source, so an assembler kernel is recompiled when the window kernels it inlines
    change (an updated checkout does not run stale kernels); a function outside the package
    keeps numba's own stamp."""
    from numba.core import caching

    from scabbard.kernels import _jit

    py = ka._assemble_partials.py_func
    stamp = caching.InTreeCacheLocator(py, ka.__file__).get_source_stamp
    before = stamp()
    monkeypatch.setattr(_jit, "_digest", b"window.py changed")
    assert stamp() != before
    outside = tmp_path / "other.py"
    outside.write_text("def f():\n    return 1\n")
    ns: dict = {}
    exec(compile(outside.read_text(), str(outside), "exec"), ns)
    loc = caching.InTreeCacheLocator(ns["f"], str(outside))
    assert loc.get_source_stamp() == _jit._own_stamp(loc)
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("x = 1\n")
    b.write_text("y = 2\n")
    first = _jit.sources_digest([a, b])
    b.write_text("y = 3\n")
    assert _jit.sources_digest([a, b]) != first


@SETTINGS
@given(streams(), st.lists(st.integers(0, 250), max_size=3), st.sampled_from([0, 1, 10**6]))
def test_combined_partials_are_one_row_per_pane_and_key_folded_in_order(s, cuts, groups):
    """Partials cut into pieces, combined (one run growing from 16 slots, a run per quarter of
    the rows, many runs) = each (pane, key)'s partials folded in the order given."""
    from scabbard.kernels.combine import combine_partials

    ts, keys, ints, floats, iops, fops, slide, _ = s
    pane, cnt = ts // slide, 1 + ts % 3
    want = {}
    for r in range(len(pane)):
        k = (int(pane[r]), tuple(int(x) for x in keys[r]))
        if k not in want:
            want[k] = [int(cnt[r]), list(ints[r]), list(floats[r])]
            continue
        st_ = want[k]
        st_[0] += int(cnt[r])
        st_[1] = [ref._apply(op, a, b) for op, a, b in zip(iops, st_[1], ints[r], strict=True)]
        st_[2] = [ref._apply(op, a, b) for op, a, b in zip(fops, st_[2], floats[r], strict=True)]
    bounds = [0, *sorted(c for c in cuts if c < len(pane)), len(pane)]
    pieces = [(pane[a:b], keys[a:b], cnt[a:b], ints[a:b], floats[a:b])
              for a, b in zip(bounds, bounds[1:], strict=False)]
    gp, gk, gc, gi, gf = combine_partials(pieces, iops, fops, groups)
    got = {(int(gp[r]), tuple(int(x) for x in gk[r])): (int(gc[r]), list(gi[r]), list(gf[r]))
           for r in range(len(gp))}
    assert len(got) == len(gp), "one row per (pane, key)"
    assert_same(got, want)
