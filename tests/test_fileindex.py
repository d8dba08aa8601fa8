"""A sealed pool file's segment index (scabbard/storage/fileindex.py): opening a folder reads
the indexes instead of every segment header, and an index that is torn, stale or names
another incarnation's segments is never taken - the file is scanned, as without one."""

from __future__ import annotations

import struct

import numpy as np

from scabbard.storage import fileindex
from scabbard.storage.blockmanager import BlockManager
from scabbard.storage.fileio import FileIO
from tests.test_storage import SCHEMA, SMALL, check_batch, fill


class CountingIO(FileIO):
    """Counts the bytes read from pool files."""

    def __init__(self):
        self.seg_bytes = 0
        self.paths: dict[int, str] = {}

    def open(self, path, flags, mode=0o644):
        fd = super().open(path, flags, mode)
        self.paths[fd] = str(path)
        return fd

    def preadv(self, fd, bufs, pos):
        n = super().preadv(fd, bufs, pos)
        if self.paths.get(fd, "").endswith(".seg"):
            self.seg_bytes += n
        return n


def layout(bm: BlockManager, name: str = "in") -> list:
    """What opening made of the stream: each file's incarnation and segments."""
    s = bm._streams[name]
    return [(f.id, f.epoch, f.first, f.end, [(g.first, g.count, g.pos, g.length)
                                             for g in f.segs]) for f in s.files]


def stored(tmp_path, files: int = 6) -> int:
    """A stream over ``files`` sealed files of many small segments; its end offset."""
    with BlockManager(tmp_path, SMALL) as bm:
        sid = bm.stream("in", SCHEMA)
        end = fill(bm, sid, 0, 16 * files, rows=100)
        assert len(bm._by_id[sid].files) >= files
    return end


def reopened(tmp_path, io: FileIO | None = None):
    bm = BlockManager(tmp_path, SMALL, io=io or FileIO())
    bm.stream("in", SCHEMA)
    return bm


def test_sealed_files_are_indexed_and_opening_reads_the_indexes_not_the_segments(tmp_path):
    end = stored(tmp_path)
    pool = tmp_path / "index"
    with BlockManager(tmp_path, SMALL, read_only=True) as bm:  # (writes no index)
        bm.stream("in", SCHEMA)
        files = {f"f{f[0]:06d}" for f in layout(bm)}
    # every sealed file's, written by the writer, and the last one's at the close
    assert {p.stem for p in pool.glob("*.idx")} == files
    io = CountingIO()
    with reopened(tmp_path, io) as bm:
        with_index = layout(bm)
        read_indexed = io.seg_bytes
        assert bm.durable_end(bm.stream("in", SCHEMA)) == end
    for p in pool.glob("*.idx"):
        p.unlink()
    io = CountingIO()
    with reopened(tmp_path, io) as bm:
        assert layout(bm) == with_index  # the indexes say what the headers say
        read_scanning = io.seg_bytes
        got = list(bm.load(bm.stream("in", SCHEMA)))
    assert sum(len(b) for b in got) == end
    for b in got:
        check_batch(b)
    assert read_indexed * 3 < read_scanning, (read_indexed, read_scanning)
    assert len(list(pool.glob("*.idx"))) >= 6  # the scan wrote them (the tail's too)


def _rewrite(path, change) -> None:
    ix = fileindex.read(FileIO(), path)
    fileindex.write(FileIO(), path, change(ix))


def test_a_torn_stale_or_foreign_index_is_not_taken(tmp_path):
    end = stored(tmp_path)
    with reopened(tmp_path) as bm:
        want = layout(bm)
    pool = tmp_path / "index"
    first, second, third, fourth = sorted(pool.glob("*.idx"))[:4]
    data = bytearray(first.read_bytes())
    data[70] ^= 1  # torn: its checksum fails
    first.write_bytes(bytes(data))
    second.write_bytes(third.read_bytes())  # another file's incarnation
    # the right incarnation, but the segment at the file's first data position is not the
    # first one it lists (a reused file whose new first segment a crash kept)
    _rewrite(third, lambda ix: fileindex.FileIndex(
        ix.stream, ix.epoch, ix.first, ix.end, ix.write_pos,
        np.concatenate([ix.segs[:1] + [[0, 0, 0, 4096]], ix.segs[1:]])))
    _rewrite(fourth, lambda ix: fileindex.FileIndex(  # an earlier incarnation's, shorter
        ix.stream, ix.epoch - 1, ix.first, ix.end, ix.write_pos, ix.segs[:-1]))
    with reopened(tmp_path) as bm:
        assert layout(bm) == want
        got = list(bm.load(bm.stream("in", SCHEMA)))
    assert sum(len(b) for b in got) == end
    for p in (first, second, third, fourth):  # written anew by the scan
        ix = fileindex.read(FileIO(), p)
        assert ix is not None and int(p.stem[1:]) in [f[0] for f in want]
    assert fileindex.decode(b"SCABIDX1" + bytes(60)) is None
    assert fileindex.decode(bytes(data)) is None


def test_the_index_of_a_released_file_is_not_taken_once_another_stream_reuses_it(tmp_path):
    """Files released by one stream and reused by another: their old indexes name the first
    stream's incarnations, and the next opening takes none of them."""
    with BlockManager(tmp_path, SMALL) as bm:
        a = bm.stream("a", SCHEMA)
        end = fill(bm, a, 0, 30, rows=100)
        bm.trim(a, end)
        b = bm.stream("b", SCHEMA)
        fill(bm, b, 0, 30, rows=100)
    with BlockManager(tmp_path, SMALL) as bm:
        b = bm.stream("b", SCHEMA)
        assert bm.durable_end(b) == 3000
        assert sum(len(x) for x in bm.load(b)) == 3000
        a = bm.stream("a", SCHEMA)
        assert sum(len(x) for x in bm.load(a)) <= end


def test_an_index_round_trips_and_refuses_other_versions():
    ix = fileindex.FileIndex(3, 9, 100, 400, 8192, np.array([[100, 300, 4096, 4096]]))
    data = fileindex.encode(ix)
    back = fileindex.decode(data)
    assert (back.stream, back.epoch, back.first, back.end, back.write_pos) == (3, 9, 100, 400,
                                                                              8192)
    assert back.segs.tolist() == [[100, 300, 4096, 4096]]
    other = bytearray(data)
    other[8:10] = struct.pack("<H", 2)
    assert fileindex.decode(bytes(other)) is None
    assert fileindex.decode(data[:-1]) is None


def test_a_recovery_opens_its_storage_by_the_indexes_and_gives_the_failure_free_output(
        tiny, tmp_path):
    """A fault-tolerant run stopped part-way, its sealed files indexed as it ran; the
    recovery opens the storage by them (its report says how long that took) and the output
    is the failure-free run's."""
    from ftkit import CFG, SMALL, StopAfter, failure_free, query

    from scabbard.ft.recovery import run_fault_tolerant
    from scabbard.ft.sinks import ClockedSink, read_output
    from scabbard.ft.verify import compare

    q, ds = query("CM1", tiny)
    store, out, n = tmp_path / "store", tmp_path / "out", 6 * ds.rows
    run_fault_tolerant(q, ds, store, ClockedSink(out), CFG, interval=None, every_tasks=3,
                       max_tuples=n, layout=SMALL, wrap_source=lambda s: StopAfter(s, 30))
    indexed = {p.stem for p in (store / "index").glob("*.idx")}
    assert len(indexed) >= 3, indexed
    r = run_fault_tolerant(q, ds, store, ClockedSink(out), CFG, interval=None, every_tasks=3,
                           max_tuples=n, layout=SMALL, recover=True)
    assert r.resumed_from is not None and r.loaded["open_ms"] > 0
    assert compare(read_output(out), failure_free(q, ds, n), q.schema).ok


def test_the_reopen_bench_opens_the_same_stream_both_ways(tmp_path):
    from scabbard.experiments import reopen

    s = reopen.Settings(sizes_mb=(3,), segment_kib=8, rounds=2, cold=False,
                        data_dir=str(tmp_path), output_dir=str(tmp_path / "out"))
    runs = reopen.run(s, log=lambda line: None)
    assert sorted(runs["how"]) == ["index", "index", "scan", "scan"]
    assert runs["segments"].nunique() == 1 and runs["segments"].iloc[0] > 300
    t = reopen.table(runs)
    assert list(t["stored_mb"]) == [3] and (t["scan_ms"] > 0).all() and (t["index_ms"] > 0).all()
    assert (tmp_path / "out" / "results.csv").is_file()


def test_a_released_file_loses_its_index_and_no_later_epoch_repeats_one(tmp_path):
    """Trim removes a released file's index; an index left behind (a removal a crash lost)
    is removed at the next opening, and its epoch is never handed out again there."""
    import shutil

    with BlockManager(tmp_path, SMALL) as bm:
        sid = bm.stream("in", SCHEMA)
        end = fill(bm, sid, 0, 80, rows=100)
        first = bm._by_id[sid].files[0]
        kept = fileindex.read(FileIO(), fileindex.path_of(first.path))
        assert kept is not None
        shutil.copy(fileindex.path_of(first.path), tmp_path / "kept.idx")
        assert bm.trim(sid, end - 200) > 0
        assert not fileindex.path_of(first.path).exists()  # removed with the release
    stale = fileindex.path_of(first.path)
    fileindex.write(FileIO(), stale, fileindex.FileIndex(
        kept.stream, 10_000, kept.first, kept.end, kept.write_pos, kept.segs))
    with reopened(tmp_path) as bm:
        assert bm._epoch >= 10_000
        assert not stale.exists()  # the released file's index, removed at opening
        assert bm.durable_end(bm.stream("in", SCHEMA)) == end


def test_opening_with_machine_durability_flushes_the_tail_it_takes(tmp_path):
    """A tail written but not flushed when its run stopped is the stream's once opened: it
    is flushed before an index names it or another file continues it."""
    import dataclasses

    from scabbard.storage.fileio import RecordingIO

    stored(tmp_path)
    io = RecordingIO(tmp_path)
    base = io.record_existing()  # the folder as it is: a durable base, not this opening's
    with BlockManager(tmp_path, dataclasses.replace(SMALL, sync=True), io=io) as bm:
        bm.stream("in", SCHEMA)
        tail = bm._streams["in"].files[-1].path.name
        synced = [op for op in io.ops[base:] if op.kind == "sync" and op.path.endswith(tail)]
    assert synced, [op.describe() for op in io.ops][:20]
