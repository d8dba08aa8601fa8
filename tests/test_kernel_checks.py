"""The kernels' validating wrappers (scabbard.kernels._check): a wrong argument is one line
naming the kernel and the argument, before any compiled code runs - where the compiled
kernel, without bounds checks, would write past an array's end or compile itself again."""

from __future__ import annotations

import numpy as np
import pytest

from scabbard.kernels import aggregate as kg
from scabbard.kernels import assembler as ka
from scabbard.kernels import hashtable as ht
from scabbard.kernels import join as kj
from scabbard.kernels import keystore as ks
from scabbard.kernels import rows as kr
from scabbard.kernels import window as kw
from scabbard.kernels._check import KernelArgumentError

I64 = np.int64


def _assembler(k=1, ni=1, nf=1):
    ws, dqi, dqf = kw.empty_window_state(16, ni, nf)
    return [ws, dqi, dqf, ht.empty_key_table(k, 16), ka.empty_pane_fifo(ni, nf),
            kr.empty_result_rows(k, ni, nf, 16), np.array([np.iinfo(I64).min])]


def _partials(n=4, k=1, ni=1, nf=1):
    return [np.arange(n, dtype=I64), np.arange(n * k, dtype=I64).reshape(n, k),
            np.ones(n, I64), np.ones((n, ni), I64), np.ones((n, nf))]


def _assemble(state=None, partials=None, iops=(0,), fops=(0,)):
    return ka.assemble_partials(*(state or _assembler()), *(partials or _partials()),
                                np.array(iops, I64), np.array(fops, I64), 2, 1000, True, 3, 0,
                                kr.selection())


def _index(slots=16):
    return np.full(slots, ks.EMPTY, I64), np.zeros(slots, I64), np.zeros(1, np.uint8)


NONE = np.full(1, ks.EMPTY, I64)  # an empty delta

BAD = {
    "assemble_partials: e_keys must be a int64 array of 2 dimensions, got float64":
        lambda: _assemble(partials=[*_partials()[:1], np.zeros((4, 1)), *_partials()[2:]]),
    "assemble_partials: the partials' columns must have one row each, got 4, 4, 3":
        lambda: _assemble(partials=[*_partials()[:2], np.ones(3, I64), *_partials()[3:]]),
    "assemble_partials: the partials have 2 key words":
        lambda: _assemble(partials=_partials(k=2)),
    "assemble_partials: the window state has 1 int and 1 float slots, the fifo 1 and 1, "
    "the operations 2 and 1": lambda: _assemble(iops=(0, 0)),
    "assemble_partials: dqf must be a Deques, got tuple":
        lambda: _assemble(state=[*_assembler()[:2], (), *_assembler()[3:]]),
    "flush_windows: table must be a KeyTable, got PaneFifo":
        lambda: ka.flush_windows(*_assembler()[:3], _assembler()[4], *_assembler()[4:],
                                 np.zeros(1, I64), np.zeros(1, I64), 2, 1000, kr.selection()),
    "flush_windows: panes must be an integer >= 1, got 0":
        lambda: ka.flush_windows(*_assembler(), np.zeros(1, I64), np.zeros(1, I64), 0, 1000,
                                 kr.selection()),
    "reset_assembly: fifo must be a PaneFifo, got NoneType":
        lambda: ka.reset_assembly(*_assembler()[:3], None),
    "route_rows: keys must be a int64 array of 2 dimensions, got int32":
        lambda: ka.route_rows(np.arange(3, dtype=I64), np.zeros((3, 1), np.int32), 2),
    "route_rows: one row number a key row: 2 rows, 3 keys":
        lambda: ka.route_rows(np.arange(2, dtype=I64), np.zeros((3, 1), I64), 2),
    "route_rows: parts must be an integer >= 1, got 0":
        lambda: ka.route_rows(np.arange(3, dtype=I64), np.zeros((3, 1), I64), 0),
    "partition_rows: cols must be columns of keys' 1, got [1]":
        lambda: ka.partition_rows(np.zeros((3, 1), I64), np.array([1], I64), 2),
    "merge_rows: partition 1's columns must be as wide as partition 0's":
        lambda: ka.merge_rows(*zip(*[(np.zeros(1, I64), np.zeros(1, I64),
                                      np.zeros((1, w), I64), np.zeros(1, I64),
                                      np.zeros((1, 1), I64), np.zeros((1, 1)))
                                     for w in (1, 2)], strict=True)),
    "pane_fifo_partials: table must be a KeyTable, got tuple":
        lambda: ka.pane_fifo_partials(ka.empty_pane_fifo(1, 1), ()),
    "empty_pane_fifo: ints must be an integer >= 0, got -1": lambda: ka.empty_pane_fifo(-1, 1),
    "empty_window_state: groups must be an integer >= 1, got 0":
        lambda: kw.empty_window_state(0, 1, 1),
    "empty_key_table: capacity must be an integer >= 1, got 0":
        lambda: ht.empty_key_table(1, 0),
    "empty_result_rows: sizes must be >= 0": lambda: kr.empty_result_rows(1, 1, -1, 8),
    "key_range: keys must be a int64 array of 2 dimensions, got int64 array of shape (3,)":
        lambda: kg.key_range(np.zeros(3, I64)),
    "split_words: one dtype a word of keys' 1, got words [0, 1]":
        lambda: kr.split_words(np.zeros((3, 1), I64), [0, 1], [I64, I64]),
    "windows_from_partials: pane must be a int64 array of 1 dimension, got float64":
        lambda: kw.windows_from_partials((np.zeros(2), *kg.pane_aggregate(
            np.arange(2, dtype=I64), np.zeros((2, 1), I64), np.zeros((2, 0), I64),
            np.zeros((2, 0)), [], [], 10)[1:]), [], [], 1, 10, 0, 1),
    "dense_pane_aggregate: ts, keys, ivals and fvals must have one row each":
        lambda: kg.dense_pane_aggregate(np.arange(3, dtype=I64), np.zeros((2, 1), I64),
                                        np.zeros((3, 0), I64), np.zeros((3, 0)),
                                        np.zeros(0, I64), np.zeros(0, I64), 10, [0], [4]),
    "inline_index: an inline index keys one or two words, the table 3":
        lambda: kj.inline_index(ht.empty_key_table(3, 8)),
    "index_find: out must have a slot a key":
        lambda: ks.index_find(*_index()[:2], NONE, np.zeros(1, I64), np.arange(4, dtype=I64),
                              np.zeros(3, I64)),
    "index_put: slot_keys must have a power of two of slots, got 12":
        lambda: ks.index_put(*_index(12), NONE, np.arange(4, dtype=I64), 0),
    "index_put: keys must be a int64 array of 1 dimension, got float64":
        lambda: ks.index_put(*_index(), NONE, np.arange(4.0), 0),
    "merge_delta: dirty must have a byte for each of the 2 pages, got 1":
        lambda: ks.merge_delta(*_index(1024), NONE, np.zeros(1, I64)),
    "count_new_keys: delta_keys must have a power of two of slots, got 3":
        lambda: ks.count_new_keys(_index()[0], np.zeros(3, I64), np.arange(2, dtype=I64)),
    "append_records: out must hold words 0 to 12, it has 11":
        lambda: ks.append_records(*_index(), NONE, np.arange(3, dtype=I64),
                                  np.zeros((3, 2), I64), 0, np.zeros(11, I64), 0),
    "index_grow: capacity must be a power of two >= 16, got 24":
        lambda: ks.index_grow(*_index()[:2], 24),
    "read_values: records and out must have a slot and a row a key":
        lambda: ks.read_values(*_index()[:2], NONE, np.zeros(1, I64), np.arange(3, dtype=I64),
                               np.zeros(0, I64), np.zeros(0, I64), 0, 0, np.zeros(2, I64),
                               np.zeros((3, 1), I64)),
    "read_values: the log must hold records 0 to 2 and the tail 2 to 2":
        lambda: ks.read_values(*_index()[:2], NONE, np.zeros(1, I64), np.arange(3, dtype=I64),
                               np.zeros(5, I64), np.zeros(0, I64), 2, 2, np.zeros(3, I64),
                               np.zeros((3, 1), I64)),
    "assemble_partials: sel's slot 1 is not one of the 1 its kind reads":
        lambda: ka.assemble_partials(*_assembler(), *_partials(), np.zeros(1, I64),
                                     np.zeros(1, I64), 2, 1000, True, 3, 0,
                                     kr.selection(kr.MAX_INT, 1)),
    "flush_windows: sel's key columns [0, 1] are not among the 1 key words":
        lambda: ka.flush_windows(*_assembler(), np.zeros(1, I64), np.zeros(1, I64), 2, 1000,
                                 kr.selection(kr.ROLLUP_COUNT, 0, 0, 1)),
    "windows_from_partials: sel must be a selection":
        lambda: kw.windows_from_partials(kg.pane_aggregate(
            np.arange(2, dtype=I64), np.zeros((2, 1), I64), np.zeros((2, 0), I64),
            np.zeros((2, 0)), [], [], 10), [], [], 1, 10, 0, 1, select=(9, 0)),
    "append_records: keys must be a int64 array of 1 dimension, got int64 array of shape (2, 1)":
        lambda: ks.append_records(*_index(), NONE, np.zeros((2, 1), I64), np.zeros((2, 1), I64),
                                  0, np.zeros(8, I64), 0),
    "read_values: out must be a int64 array of 2 dimensions, got int64 array of shape (2,)":
        lambda: ks.read_values(*_index()[:2], NONE, np.zeros(1, I64), np.arange(2, dtype=I64),
                               np.zeros(8, I64), np.zeros(8, I64), 0, 0, np.zeros(2, I64),
                               np.zeros(2, I64)),
    "scan_records: the log must hold records 0 to 4":
        lambda: ks.scan_records(np.zeros(11, I64), 0, 4, 1, *_index(), np.zeros(1, I64), 8),
}


@pytest.mark.parametrize("message", BAD)
def test_a_kernel_given_a_wrong_argument_says_which_in_one_line(message):
    with pytest.raises(KernelArgumentError) as got:
        BAD[message]()
    assert str(got.value).startswith(message), str(got.value)
    assert "\n" not in str(got.value)


def test_the_checked_kernels_still_compute():
    """The same arguments, well formed, pass every check and give the kernels' results."""
    state = _assembler()
    *_, m = _assemble(state=state)
    assert m > 0
    slot_keys, slot_records, dirty = _index()
    out = np.zeros(3 * 4, I64)
    assert ks.append_records(slot_keys, slot_records, dirty, NONE, np.arange(3, dtype=I64),
                             np.ones((3, 2), I64), 0, out, 0) == 3
    records, values = np.empty(3, I64), np.zeros((3, 2), I64)
    assert ks.read_values(slot_keys, slot_records, NONE, np.zeros(1, I64),
                          np.arange(3, dtype=I64), out, np.zeros(0, I64), 3, 3, records,
                          values) == -2
    assert records.tolist() == [0, 1, 2] and (values == 1).all()
    routed, starts = ka.route_rows(np.arange(5, dtype=I64), np.arange(5, dtype=I64)[:, None], 2)
    assert sorted(routed.tolist()) == list(range(5)) and starts[-1] == 5


def test_a_key_store_read_into_an_array_of_another_shape_is_refused(tmp_path):
    """``KeyStore.get(keys, out)``: ``out`` one row a key, the store's width - another width
    would read each record's words at the wrong place (a false "damaged")."""
    from scabbard.storage.keystore import KeyStore

    store = KeyStore(tmp_path / "kv", 2)
    store.put(np.arange(3, dtype=I64), np.ones((3, 2)))
    with pytest.raises(ValueError, match=r"out: float64\[3, 2\] \(a row a key\), got float64"):
        store.get(np.arange(3, dtype=I64), np.zeros((3, 3)))
    values, found = store.get(np.arange(3, dtype=I64), np.zeros((3, 2)))
    assert found.all() and (values == 1).all()
    store.close()


def test_a_store_array_replaced_between_two_calls_is_checked_again():
    """The key store's wrappers check its index, delta and log once while they stay the same
    arrays: a call with one of them replaced - by an array of another kind - is refused,
    after a call that passed with the others."""
    keys, values, out = np.arange(2, dtype=I64), np.zeros((2, 1), I64), np.zeros(6, I64)
    slot_keys, slot_records, dirty = _index()
    assert ks.append_records(slot_keys, slot_records, dirty, NONE, keys, values, 0, out, 0) == 2
    for bad in (np.full(1, -1, np.int32), np.full(3, ks.EMPTY, I64)):
        with pytest.raises(ks.check.KernelArgumentError, match="append_records: delta_keys"):
            ks.append_records(slot_keys, slot_records, dirty, bad, keys, values, 0, out, 0)
    with pytest.raises(ks.check.KernelArgumentError, match="read_values: delta_records"):
        ks.read_values(slot_keys, slot_records, NONE, np.zeros(2, I64), keys, out,
                       np.zeros(6, I64), 0, 0, np.zeros(2, I64), np.zeros((2, 1), I64))
