"""Darwin's per-key state store: grouped writes, per-key reads verified, checkpoints and
recovery - over every crash state a machine crash may leave."""

from __future__ import annotations

import random
import shutil

import numpy as np
import pytest

from scabbard.check.model import FileSystemModel
from scabbard.storage import RecordingIO
from scabbard.storage.keystore import LOG, CorruptStore, KeyStore


def _values(keys, width, salt=0.0):
    return keys[:, None] * 1.5 + np.arange(width)[None, :] + salt


def _check(store, want: dict):
    keys = np.fromiter(want, np.int64, len(want))
    got, found = store.get(keys)
    assert found.all()
    assert np.array_equal(got, np.array([want[k] for k in keys.tolist()]).reshape(len(keys), -1))


def test_values_come_back_by_key_from_the_tail_the_log_and_large_groups(tmp_path):
    rng = np.random.default_rng(1)
    # a small group and a small first file: records in the tail, in the log, written whole
    # as a group larger than the tail, the file grown and remapped, the index grown
    s = KeyStore(tmp_path / "s", 3, group_bytes=40 * 8 * 5, initial_bytes=4096)
    want = {}
    for n in (7, 1, 300, 33, 2000, 5):
        keys = rng.integers(-10**12, 10**12, n)
        keys[: n // 3] = rng.integers(0, 50, n // 3)  # updates of a few keys, some twice
        vals = rng.standard_normal((n, 3))
        s.put(keys, vals)
        for key, v in zip(keys.tolist(), vals, strict=False):
            want[key] = v
        _check(s, want)
    assert len(s) == len(want) and s.stats()["writes"] >= 3
    got, found = s.get(np.array([10**13, 12, -5], np.int64))
    assert found.tolist() == [False, 12 in want, False]
    assert not got[0].any() and not got[2].any()
    with pytest.raises(ValueError, match="reserved"):
        s.put(np.array([np.iinfo(np.int64).min]), np.zeros((1, 3)))


def test_a_recovery_finds_the_last_checkpoint_and_nothing_after_it(tmp_path):
    s = KeyStore(tmp_path / "s", 2, group_bytes=1024)
    keys = np.arange(1000, dtype=np.int64)
    s.put(keys, _values(keys, 2))
    s.checkpoint()
    s.put(keys[:10], _values(keys[:10], 2, salt=100))  # after the checkpoint: not kept
    s.put(np.array([5000]), np.ones((1, 2)))
    s.close()
    r = KeyStore(tmp_path / "s")
    assert r.width == 2 and len(r) == 1000
    _check(r, dict(zip(keys.tolist(), _values(keys, 2), strict=False)))
    assert not r.get(np.array([5000]))[1][0]
    r.put(keys[:3], _values(keys[:3], 2, salt=7))  # written over the records not kept
    r.checkpoint()
    r.close()
    want = dict(zip(keys.tolist(), _values(keys, 2), strict=False))
    want.update(zip(keys[:3].tolist(), _values(keys[:3], 2, salt=7), strict=False))
    _check(KeyStore(tmp_path / "s"), want)
    with pytest.raises(Exception, match="values of 2 words, not 3"):
        KeyStore(tmp_path / "s", 3)


def test_recovery_maps_the_index_file_and_scans_only_the_log_since(tmp_path):
    s = KeyStore(tmp_path / "s", 1, group_bytes=4096, index_every=20_000)
    keys = np.arange(3000, dtype=np.int64)
    for round_ in range(40):  # 120,000 records of 3,000 keys: the index file catches up
        s.put(keys, _values(keys, 1, salt=round_))
        if round_ % 3 == 2:
            s.checkpoint()
    s.put(keys[:5], _values(keys[:5], 1, salt=-1))
    s.checkpoint()
    # the index file catches up every 20,000 records, not at each of the 14 checkpoints
    pages = s.slot_keys.size // 512
    assert 0 < s.stats()["index_pages_written"] <= (120_005 // 20_000 + 1) * pages
    assert s.stats()["index_pages_written"] < s.checkpoints * pages
    s.close()
    want = dict(zip(keys.tolist(), _values(keys, 1, salt=39), strict=True))
    want.update(zip(keys[:5].tolist(), _values(keys[:5], 1, salt=-1), strict=True))
    r = KeyStore(tmp_path / "s")
    assert 0 < r.scanned < 20_000  # the log since the index file caught up, not all of it
    _check(r, want)
    r.close()
    # an index file that is not one is not trusted: the whole log rebuilds the same index
    index = tmp_path / "s" / r.index_name
    raw = bytearray(index.read_bytes())
    raw[0] ^= 1
    index.write_bytes(bytes(raw))
    r = KeyStore(tmp_path / "s")
    assert r.scanned == r.records
    _check(r, want)
    r.checkpoint()  # a new index file
    r.close()
    r = KeyStore(tmp_path / "s")
    assert r.scanned == 0
    _check(r, want)


def test_a_damaged_index_entry_is_found_when_its_key_is_read(tmp_path):
    s = KeyStore(tmp_path / "s", 2, index_every=1)
    keys = np.arange(100, dtype=np.int64)
    s.put(keys, _values(keys, 2))
    s.checkpoint()
    s.close()
    index = tmp_path / "s" / s.index_name
    words = np.fromfile(index, np.int64)
    cap = (words.size - 512) // 2
    slot = int(np.flatnonzero(words[512:512 + cap] == 42)[0])
    words[512 + cap + slot] = 7  # key 42's entry points at key 7's record
    words.tofile(index)
    r = KeyStore(tmp_path / "s")
    _check(r, {i: _values(np.array([i]), 2)[0] for i in range(40)})
    with pytest.raises(CorruptStore, match="key 42"):
        r.get(np.array([42]))


def test_a_damaged_record_is_found_when_its_key_is_read_and_at_recovery(tmp_path):
    s = KeyStore(tmp_path / "s", 4, group_bytes=1024)
    keys = np.arange(100, dtype=np.int64)
    s.put(keys, _values(keys, 4))
    s.checkpoint()
    with open(tmp_path / "s" / LOG, "r+b") as f:  # record 37's third value word
        f.seek(37 * 6 * 8 + 3 * 8)
        f.write(b"\xff")
    got, _ = s.get(keys[:37])  # the others are read as they were
    with pytest.raises(CorruptStore, match="key 37 .* fails its check"):
        s.get(np.array([1, 37]))
    s.close()
    with pytest.raises(CorruptStore, match="record 37 .* fails its check"):
        KeyStore(tmp_path / "s")


def test_every_crash_state_recovers_to_a_checkpoint_no_older_than_the_last_acknowledged(tmp_path):
    """Puts and checkpoints recorded; every state a machine crash may leave (unflushed writes
    dropped, kept or torn, names lost) opens to the state of one checkpoint, the last one
    acknowledged before the crash or a later one."""
    io = RecordingIO(tmp_path / "run")
    s = KeyStore(tmp_path / "run" / "s", 2, io=io, group_bytes=2048, initial_bytes=4096,
                 index_every=300)  # the index file catches up at most checkpoints
    rng = np.random.default_rng(3)
    states = [{}]  # the store's content at each checkpoint (0: the empty store)
    acked = [len(io.ops)]  # operations issued when each checkpoint returned
    current = {}
    for i in range(12):
        keys = rng.integers(0, 400 if i % 3 else 40, 150)
        vals = rng.standard_normal((150, 2))
        s.put(keys, vals)
        current.update(zip(keys.tolist(), map(tuple, vals), strict=False))
        if i % 2:
            s.checkpoint()
            states.append(dict(current))
            acked.append(len(io.ops))
    s.close()
    model = FileSystemModel(io.ops)
    seen = set()
    for state in model.sample(120, random.Random(0)):
        root = tmp_path / "state"
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir()
        model.materialize(state, root)
        if not (root / "s" / "store.json").exists():
            assert state.at <= acked[0]
            continue
        r = KeyStore(root / "s")
        last = max((i for i, a in enumerate(acked) if a <= state.at), default=0)
        keys = np.fromiter(set().union(*states), np.int64)
        got, found = r.get(keys)
        content = {k: tuple(v) for k, v, f in zip(keys.tolist(), got, found, strict=False) if f}
        match = [i for i, st in enumerate(states) if st == content]
        assert match and max(match) >= last, (state.how, state.at, last, match)
        seen.add(max(match))
        r.close()
    assert len(seen) >= 4  # the states reach several checkpoints


def test_darwins_figures_1_and_3_measure_both_stores_side_by_side(tmp_path):
    from scabbard.experiments import keyvalue as kv

    s = kv.Settings(record_counts=(3000, 20000), ops=4000, batch=500, individual_ops=300,
                    group=50, rounds=2, data_dir=str(tmp_path), output_dir=str(tmp_path / "o"))
    runs = kv.run(s, log=lambda line: None)
    assert len(runs) == 2 * 2 * 2 * len(kv.OPS)
    assert set(runs["store"]) == {"keystore", "rocksdb"} and (runs["ops_per_s"] > 0).all()
    assert (runs["disk_mb"] > 0).all()
    table = kv.summary(runs)
    assert list(table["op"].astype(str)[:4]) == list(kv.OPS)
    assert (table["keystore / rocksdb"] > 0).all()
    kv.plot(runs, str(tmp_path / "o"))
    assert (tmp_path / "o" / "keyvalue.png").stat().st_size > 0
    assert (tmp_path / "o" / "keyvalue.csv").exists()
    with pytest.raises(ValueError, match="unknown store 'tbb'"):
        kv.Settings(stores=("tbb",))


def test_darwins_figure_2_checkpoints_and_recovers_every_store(tmp_path):
    from scabbard.experiments import keyvalue as kv

    s = kv.Settings(record_counts=(5000, 40000), rounds=2, batch=1000, data_dir=str(tmp_path),
                    output_dir=str(tmp_path / "o"))
    runs = kv.recovery(s, log=lambda line: None)
    assert len(runs) == 2 * 2 * len(kv.RECOVERY_STORES)
    assert (runs[["checkpoint_s", "recovery_s", "first_reads_ms", "disk_mb"]] > 0).all().all()
    table = kv.recovery_summary(runs)
    assert set(table["store"]) == set(kv.RECOVERY_STORES) and len(table) == 6
    kv.plot_recovery(runs, str(tmp_path / "o"))
    assert (tmp_path / "o" / "keyvalue_recovery.png").exists()


def test_the_log_a_recovery_reads_is_a_delta_counted_once_and_merged_at_the_next_catch_up(
        tmp_path):
    s = KeyStore(tmp_path / "s", 1, index_every=1000)
    keys = np.arange(1000, dtype=np.int64)
    s.put(keys, _values(keys, 1))
    s.checkpoint()  # the index file catches up: 1,000 keys
    s.put(keys[:300], _values(keys[:300], 1, salt=1))  # updated ...
    s.put(np.arange(1000, 1010), _values(np.arange(1000, 1010), 1))  # ... and new keys
    # (1,010 keys: the index of 2,048 slots does not grow)
    s.checkpoint()  # committed, the index file as it was
    s.close()
    r = KeyStore(tmp_path / "s", index_every=1000)
    assert r.scanned == 310 and len(r) == 1010
    want = dict(zip(range(1010), _values(np.arange(1010), 1), strict=True))
    want.update(zip(range(300), _values(keys[:300], 1, salt=1), strict=True))
    _check(r, want)
    # keys in the delta are not new; a key in neither is
    r.put(np.array([5, 1005, 5000]), np.zeros((3, 1)))
    assert len(r) == 1011
    want.update({5: np.zeros(1), 1005: np.zeros(1), 5000: np.zeros(1)})
    _check(r, want)
    r.put(np.arange(2000, 2700), _values(np.arange(2000, 2700), 1))
    want.update(zip(range(2000, 2700), _values(np.arange(2000, 2700), 1), strict=True))
    assert r.checkpoint()["index_pages"] > 0  # the catch-up merged the delta
    r.close()
    again = KeyStore(tmp_path / "s")
    assert again.scanned == 0 and len(again) == 1711
    _check(again, want)


def test_growing_an_index_that_holds_a_key_twice_keeps_its_newer_record():
    from scabbard.kernels import keystore as k

    keys = np.full(1024, k.EMPTY, np.int64)
    records = np.zeros(1024, np.int64)
    dirty = np.zeros(2, np.uint8)
    none = np.full(1, k.EMPTY, np.int64)
    k.index_put(keys, records, dirty, none, np.array([7, 8]), 10)  # 7 -> 10, 8 -> 11
    at = np.flatnonzero(keys == 7)[0]
    stale = (at + 1 + np.flatnonzero(keys[at + 1:] == k.EMPTY)[0]) % 1024
    keys[stale], records[stale] = 7, 3  # a torn page's stale copy, behind the key's slot
    for grown in k.index_grow(keys, records, 2048), k.index_grow(keys[::-1].copy(),
                                                                 records[::-1].copy(), 2048):
        got = np.empty(2, np.int64)
        k.index_find(*grown, none, none, np.array([7, 8]), got)
        assert got.tolist() == [10, 11] and (grown[0] == 7).sum() == 1
