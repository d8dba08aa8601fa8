"""Segments, the BlockManager's file pool, p-streams, markers and GC (issue: persistent streams)."""

from __future__ import annotations

import os
import subprocess
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scabbard.batch import Batch
from scabbard.pog import POG, PStreamError, PUnit
from scabbard.pog.markers import Marker, MarkerKind
from scabbard.schema import Field, Schema
from scabbard.storage import (
    BlockManager,
    CorruptSegment,
    StorageConfig,
    StorageError,
    StorageFull,
    StorageLocked,
    TrimmedError,
)
from scabbard.storage import segment as seg_fmt
from scabbard.storage.checksum import checksum, copy_checksum, copy_checksum_parts
from scabbard.storage.errors import FormatVersionError

SCHEMA = Schema("s", (Field("timestamp", "int64"), Field("k", "int32"), Field("v", "float64"),
                      Field("id", "uuid")), row_bytes=48)
SMALL = StorageConfig(file_bytes=64 * 1024, pool_files=2, io_threads=2, bulk_bytes=32 * 1024)


def make_batch(offset: int, n: int, schema: Schema = SCHEMA) -> Batch:
    """Rows whose values are a function of their offset (checkable after a round trip)."""
    i = np.arange(offset, offset + n, dtype=np.int64)
    uid = np.stack([i.astype(np.uint64), (i * 7).astype(np.uint64)], axis=1)
    return Batch.from_arrays(schema, [i * 10, (i % 1000).astype(np.int32), i * 0.5, uid], offset)


def check_batch(b: Batch) -> None:
    want = make_batch(b.offset, len(b))
    for got, exp in zip(b.columns, want.columns, strict=True):
        np.testing.assert_array_equal(got, exp)


def fill(bm: BlockManager, sid: int, start: int, count: int, rows: int = 300) -> int:
    off = start
    for _ in range(count):
        bm.append(sid, make_batch(off, rows))
        off += rows
    bm.flush(sid)
    return off


# -- segment format ----------------------------------------------------------------------------

def test_segment_round_trip_with_metadata():
    b = make_batch(1234, 1000)
    seg = seg_fmt.encode(b, stream_id=3, epoch=9, batch_id=17, meta=np.array([5, 6], np.uint64))
    assert seg.nbytes % seg_fmt.PAGE == 0 and seg.ctypes.data % seg_fmt.PAGE == 0
    h, out = seg_fmt.decode(seg, SCHEMA)
    assert (h.stream_id, h.epoch, h.batch_id, h.first_offset, h.count) == (3, 9, 17, 1234, 1000)
    assert (h.min_ts, h.max_ts) == (12340, 22330)
    assert list(h.meta) == [5, 6]
    assert out.offset == 1234
    check_batch(out)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 7), st.integers(0, 2**64 - 1))
def test_copy_checksum_is_copy_then_checksum(data, shift, seed):
    raw = np.frombuffer(bytes(shift) + data, np.uint8)[shift:]  # any source alignment
    padded = -(-len(data) // 8) * 8
    dst = np.full(padded, 0xEE, np.uint8)
    got = copy_checksum(raw, dst, seed)
    want = np.zeros(padded, np.uint8)
    want[:len(data)] = raw
    np.testing.assert_array_equal(dst, want)
    assert got == checksum(want, seed)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 70), st.integers(-3, 3)), min_size=1, max_size=5),
       st.integers(0, 2**64 - 1))
def test_copy_checksum_parts_is_shifted_copy_then_checksum(pieces, seed):
    """A column in pieces (int64, each shifted by its own add) is copied and hashed in one
    pass as if it were copied whole, then hashed - across stripes begun by the piece before."""
    rng = np.random.default_rng(len(pieces))
    parts = [(rng.integers(-2**40, 2**40, n, dtype=np.int64), add) for n, add in pieces]
    want = np.concatenate([a + add for a, add in parts]).view(np.uint8)
    dst = np.full(want.nbytes, 0xEE, np.uint8)
    got = copy_checksum_parts(parts, dst, seed)
    np.testing.assert_array_equal(dst, want)
    assert got == checksum(want, seed)


def test_segment_with_odd_column_lengths_round_trips_and_checks_padding():
    b = make_batch(5, 1001)  # the int32 column is 4004 bytes: padded to 4008
    seg = seg_fmt.encode(b, stream_id=1, epoch=1, batch_id=0)
    check_batch(seg_fmt.decode(seg, SCHEMA)[1])
    h = seg_fmt.parse_header(seg)
    k_pad = h.header_len + 8 * 1001 + 4004  # the padding after the int32 column
    seg[k_pad] ^= 1
    with pytest.raises(CorruptSegment, match="checksum"):
        seg_fmt.decode(seg, SCHEMA)


def test_segment_of_zero_rows():
    h, out = seg_fmt.decode(seg_fmt.encode(make_batch(7, 0), stream_id=1, epoch=1, batch_id=0), SCHEMA)
    assert h.count == 0 and len(out) == 0 and out.offset == 7


@pytest.mark.parametrize("damage", ["truncated", "torn", "zero-block", "payload-bit", "header-bit",
                                    "all-zero", "wrong-schema"])
def test_every_corruption_is_detected(damage):
    seg = seg_fmt.encode(make_batch(0, 2000), stream_id=1, epoch=1, batch_id=0)
    bad = seg.copy()
    schema = SCHEMA
    if damage == "truncated":
        bad = bad[: seg.nbytes // 2]
    elif damage == "torn":  # the second half of the write never reached the disk
        bad[seg.nbytes // 2:] = 0xAB
    elif damage == "zero-block":
        bad[seg_fmt.PAGE * 2: seg_fmt.PAGE * 3] = 0
    elif damage == "payload-bit":
        bad[seg.nbytes // 3] ^= 0x10
    elif damage == "header-bit":
        bad[40] ^= 0x01  # the tuple count
    elif damage == "all-zero":
        bad[:] = 0
    elif damage == "wrong-schema":
        schema = Schema("other", SCHEMA.fields[:3])
    with pytest.raises(CorruptSegment) as e:
        seg_fmt.decode(bad, schema, where="f000001.seg", position=8192)
    assert "f000001.seg" in str(e.value) and "8192" in str(e.value)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.data())
def test_a_run_of_segments_verifies_in_one_call_as_far_as_decode_would(data):
    """verified_run (one kernel call over a stream tail) counts the segments up to the first
    that decode refuses - whatever the damage, wherever it falls; compressed columns,
    metadata words, zero rows, another schema's segment."""
    from scabbard.compression import registered

    other = Schema("other", SCHEMA.fields[:3])
    codecs = [c for cls in registered() for c in cls.examples()]
    segs = []
    for i in range(data.draw(st.integers(1, 6))):
        n = data.draw(st.sampled_from([0, 1, 7, 300, 1001]))
        b = make_batch(1000 * i, n)
        meta = np.arange(data.draw(st.integers(0, 6)), dtype=np.uint64) if data.draw(
            st.booleans()) else None
        stored = None
        if data.draw(st.booleans()):  # each column through a lossless codec that takes it
            stored = []
            for f, col in zip(SCHEMA.fields, b.columns, strict=True):
                codec = data.draw(st.sampled_from([c for c in codecs if f.dtype in c.accepts
                                                   and c.lossless and not c.specialised]))
                stored.append((codec, codec.encode(col)))
        if data.draw(st.integers(0, 9)) == 0:
            b = Batch(other, b.columns[:3], b.offset)
            stored = None
        segs.append(seg_fmt.encode(b, stream_id=1, epoch=1, batch_id=i, meta=meta,
                                   stored=stored))
    buf = np.concatenate(segs)
    pos = np.cumsum([0] + [x.nbytes for x in segs])[:-1]
    lengths = [x.nbytes for x in segs]
    how = data.draw(st.sampled_from(["none", "header", "payload", "anywhere", "zeros",
                                      "cut-length"]))
    j = data.draw(st.integers(0, len(segs) - 1))  # the segment damaged
    h = seg_fmt.parse_header(segs[j])
    span = {"header": (0, h.header_len), "payload": (h.header_len, h.header_len + h.payload_len),
            "anywhere": (0, lengths[j])}.get(how)
    if span is not None and span[1] > span[0]:  # a bit flipped in that part of it
        buf[pos[j] + data.draw(st.integers(span[0], span[1] - 1))] ^= \
            1 << data.draw(st.integers(0, 7))
    elif how == "zeros":
        at = data.draw(st.integers(0, buf.nbytes - 8)) // 8 * 8
        buf[at:at + data.draw(st.integers(1, 3)) * 512] = 0
    elif how == "cut-length":  # a segment the scan saw shorter than written
        lengths[j] = data.draw(st.integers(0, lengths[j] // 8 - 1)) * 8

    def decodes(j):
        try:
            seg_fmt.decode(buf[pos[j]:pos[j] + lengths[j]], SCHEMA)
            return True
        except (CorruptSegment, FormatVersionError):  # (a version bit: refused too)
            return False
    want = next((j for j in range(len(segs)) if not decodes(j)), len(segs))
    assert seg_fmt.verified_run(buf, pos, lengths, SCHEMA, least=0) == want


@pytest.mark.parametrize("change", ["version", "raw-length", "schema"])
def test_a_sealed_header_that_decode_refuses_ends_the_verified_run(change):
    """Headers whose checksum holds but whose content decode refuses: another format version,
    a column's length that is not its rows', another schema with the same columns."""
    import struct

    segs = [seg_fmt.encode(make_batch(300 * i, 300), stream_id=1, epoch=1, batch_id=i)
            for i in range(3)]
    bad, schema = segs[1], SCHEMA
    hlen = seg_fmt.parse_header(bad).header_len
    if change == "version":
        struct.pack_into("<H", bad, 8, seg_fmt.VERSION + 1)
    elif change == "raw-length":
        struct.pack_into("<Q", bad, 128 + 48 + 8, 300 * 4 + 8)  # the int32 column's
    else:
        schema = Schema("other", SCHEMA.fields, row_bytes=56)  # another fingerprint
    seg_fmt._seal_header(bad, hlen)
    buf = np.concatenate(segs)
    pos, lengths = [0, segs[0].nbytes, segs[0].nbytes * 2], [x.nbytes for x in segs]
    with pytest.raises((CorruptSegment, FormatVersionError)):
        seg_fmt.decode(bad, schema)
    want = 0 if change == "schema" else 1
    assert seg_fmt.verified_run(buf, pos, lengths, schema, least=0) == want
    assert seg_fmt.verified_run(buf, pos, lengths, schema) == 0  # few: decoded one by one
    if change != "schema":
        assert seg_fmt.verified_run(buf, pos[:1], lengths[:1], schema, least=0) == 1


# -- the block manager -----------------------------------------------------------------------------

def test_append_read_and_reopen(tmp_path):
    with BlockManager(tmp_path, SMALL) as bm:
        sid = bm.stream("in", SCHEMA)
        end = fill(bm, sid, 0, 40)
        assert bm.durable_end(sid) == end
        for off in (0, 299, 300, 5555, end - 1):
            b = bm.read(sid, off)
            assert b.offset <= off < b.end
            check_batch(b)
        assert bm.io_mode == "O_DIRECT" or bm.io_mode.startswith("buffered (")
    with BlockManager(tmp_path, SMALL) as bm:
        sid = bm.stream("in", SCHEMA)
        assert (bm.start(sid), bm.durable_end(sid), bm.torn) == (0, end, [])
        loaded = list(bm.load(sid))
        assert sum(len(b) for b in loaded) == end
        for b in loaded:
            check_batch(b)
        fill(bm, sid, end, 5)  # writing continues after a reopen
        assert bm.durable_end(sid) == end + 1500


def test_a_read_buffer_is_read_into_again_only_once_nothing_refers_to_it():
    pool = seg_fmt.ReadBuffers(cap=64 * 1024)
    a = pool.take(10_000)
    first = a.ctypes.data
    assert first % seg_fmt.PAGE == 0 and a.nbytes == 10_000
    column = a[800:1600].view(np.int64)  # what a batch decoded without a copy holds
    del a
    b = pool.take(10_000)
    assert b.ctypes.data != first  # the column still refers to the first buffer
    del column
    c = pool.take(9_000)  # nothing refers to it now
    assert c.ctypes.data == first
    del b, c
    big = pool.take(100_000)  # beyond the cap: a buffer of its own, not kept
    assert big.ctypes.data % seg_fmt.PAGE == 0
    assert pool.kept_bytes <= 64 * 1024


def test_batches_held_while_more_are_read_stay_intact_and_buffers_are_reused(tmp_path):
    """Recovery's reads go into buffers handed out again once nothing refers to them: the
    batches a caller keeps are never overwritten, the ones it dropped make room."""
    with BlockManager(tmp_path, SMALL) as bm:
        sid = bm.stream("in", SCHEMA)
        end = fill(bm, sid, 0, 40)
    with BlockManager(tmp_path, SMALL) as bm:
        sid = bm.stream("in", SCHEMA)
        bm.forget_tails()  # every read from the device
        kept, seen = [], 0
        for i, b in enumerate(bm.load(sid)):
            seen += len(b)
            if i % 4 == 0:
                kept.append(b)
        assert seen == end
        for b in kept:
            check_batch(b)
        assert len(bm._read_buffers._owners) < 40 - len(kept)


def test_a_pool_of_small_write_buffers_makes_room_for_a_large_one(tmp_path, monkeypatch):
    """Segment buffers are reused (fresh pages cost page faults); a pool filled with small
    ones gives them up for a larger one, so that large segments stop allocating anew (an
    exactly-once sink under CM2's output allocated half of its segments)."""
    cfg = StorageConfig(file_bytes=1 << 20, pool_files=2, io_threads=1, bulk_bytes=1 << 18,
                        max_pending_bytes=64 << 10)
    fresh = []
    real = seg_fmt.aligned_empty
    monkeypatch.setattr(seg_fmt, "aligned_empty", lambda n, *a: fresh.append(n) or real(n, *a))
    with BlockManager(tmp_path, cfg) as bm:
        sid = bm.stream("in", SCHEMA)
        off = fill(bm, sid, 0, 16, rows=20)  # 16 small segments at once: the pool full of them
        small = seg_fmt.segment_length(make_batch(0, 20), 0, cfg.align)
        assert bm._buffers and all(b.nbytes == small for b in bm._buffers)
        fresh.clear()
        for _ in range(6):  # then large ones, one at a time
            off = fill(bm, sid, off, 1, rows=500)
        large = seg_fmt.segment_length(make_batch(0, 500), 0, cfg.align)
        assert large > small and fresh.count(large) == 1, fresh
        check = list(bm.load(sid))
    assert sum(len(b) for b in check) == off
    for b in check:
        check_batch(b)


def test_offsets_map_to_files_across_wraparound(tmp_path):
    with BlockManager(tmp_path, SMALL) as bm:
        sid = bm.stream("in", SCHEMA)
        off = 0
        used_ids = []
        for _ in range(30):  # ~10x the pool: files are freed and reused in a circle
            off = fill(bm, sid, off, 6)
            used_ids.extend(f.id for f in bm._by_id[sid].files)
            bm.trim(sid, off - 2000)
            for probe in range(max(bm.start(sid), 0), off, 211):
                b = bm.read(sid, probe)
                assert b.offset <= probe < b.end
                check_batch(b)
        assert bm.stats()["files"] <= 5
        assert len(used_ids) > 3 * bm.stats()["files"]  # ids came round again
        with pytest.raises(TrimmedError):
            bm.read(sid, 0)
        with pytest.raises(StorageError, match="not stored"):
            bm.read(sid, off)


def test_load_ranges_returns_exactly_the_rows_of_each_range_across_files(tmp_path):
    """Ranges of all shapes - inside one segment, across segments and files, at a stream's
    ends, empty - read back at once give each range's rows and nothing else."""
    rng = np.random.default_rng(7)
    cfg = StorageConfig(file_bytes=64 * 1024, pool_files=8, io_threads=2, bulk_bytes=32 * 1024)
    with BlockManager(tmp_path, cfg) as bm:
        a, b = bm.stream("a", SCHEMA), bm.stream("b", SCHEMA)
        ends = {a: fill(bm, a, 0, 40, rows=97), b: fill(bm, b, 0, 7, rows=300)}
        assert len(bm._by_id[a].files) > 2  # the ranges cross files
        ranges = [(a, 0, 1), (a, 96, 98), (a, 500, 1500), (b, 10, 10), (a, 0, None),
                  (b, 2000, None), (a, ends[a] - 1, ends[a])]
        for _ in range(30):
            sid = a if rng.random() < 0.7 else b
            lo = int(rng.integers(0, ends[sid]))
            ranges.append((sid, lo, int(rng.integers(lo, ends[sid] + 1))))
        got = bm.load_ranges(ranges)
        for (sid, lo, hi), batches in zip(ranges, got, strict=True):
            hi = ends[sid] if hi is None else hi
            offsets = np.concatenate([bt.columns[0] // 10 for bt in batches] + [np.zeros(0, int)])
            np.testing.assert_array_equal(offsets, np.arange(lo, hi))
            for bt in batches:
                check_batch(bt)


def test_trim_returns_files_to_the_pool_and_disk_stays_bounded(tmp_path):
    cfg = StorageConfig(file_bytes=128 * 1024, pool_files=2, bulk_bytes=64 * 1024)
    with BlockManager(tmp_path, cfg) as bm:
        sid = bm.stream("in", SCHEMA)
        off, written = 0, 0
        sizes = []
        for _ in range(200):
            off = fill(bm, sid, off, 4)
            written += 4 * seg_fmt.segment_length(make_batch(0, 300))
            freed = bm.trim(sid, off - 600)
            assert freed >= 0
            sizes.append(bm.pool_bytes)
        assert written > 50 * cfg.file_bytes  # many times the pool went through it
        assert max(sizes) <= 4 * cfg.file_bytes
        disk = sum(p.stat().st_size for p in (tmp_path / "pool").iterdir())
        assert disk == bm.pool_bytes
        pool_ids = {p.stem for p in (tmp_path / "pool").iterdir()}
        assert {p.stem for p in (tmp_path / "index").iterdir()} <= pool_ids  # one a file
    with BlockManager(tmp_path, cfg) as bm:  # what was released stays released
        sid = bm.stream("in", SCHEMA)
        assert bm.start(sid) > 0 and bm.durable_end(sid) == off


def test_corrupt_segment_in_the_middle_is_never_returned(tmp_path):
    with BlockManager(tmp_path, SMALL) as bm:
        sid = bm.stream("in", SCHEMA)
        end = fill(bm, sid, 0, 12)
        f = bm._by_id[sid].files[0]
        victim = f.segs[1]
        path = f.path
    with open(path, "r+b") as fh:  # flip one bit in the payload of the second segment
        fh.seek(victim.pos + victim.length // 2)
        byte = fh.read(1)
        fh.seek(victim.pos + victim.length // 2)
        fh.write(bytes([byte[0] ^ 4]))
    with BlockManager(tmp_path, SMALL) as bm:
        sid = bm.stream("in", SCHEMA)
        assert bm.durable_end(sid) == end
        with pytest.raises(CorruptSegment, match=path.name):
            bm.read(sid, victim.first)
        check_batch(bm.read(sid, 0))


def test_a_damaged_segment_among_many_small_ones_read_in_bulk_is_never_returned(tmp_path):
    """load_bulk verifies a chunk of many small segments in one call (segment.verified_run)
    and decodes the rest one by one: a bit flipped in the payload of one of 100 segments -
    beyond the tail that opening verifies - fails the read that reaches it, naming the file;
    the segments before it read back exactly."""
    cfg = StorageConfig(file_bytes=1 << 20, pool_files=2, io_threads=2, bulk_bytes=32 << 10)
    with BlockManager(tmp_path, cfg) as bm:
        sid = bm.stream("in", SCHEMA)
        end = fill(bm, sid, 0, 100, rows=10)
        f = bm._by_id[sid].files[0]
        assert len(f.segs) == 100 > seg_fmt.RUN_SEGMENTS
        victim, path = f.segs[50], f.path
        assert [len(b) for b in bm.load_bulk(sid, 0, end)] == [10] * 100
    h = seg_fmt.parse_header(np.fromfile(path, np.uint8, victim.length, offset=victim.pos))
    with open(path, "r+b") as fh:  # one bit of the victim's payload
        fh.seek(victim.pos + h.header_len + 3)
        byte = fh.read(1)
        fh.seek(victim.pos + h.header_len + 3)
        fh.write(bytes([byte[0] ^ 4]))
    with BlockManager(tmp_path, cfg) as bm:
        sid = bm.stream("in", SCHEMA)
        assert bm.durable_end(sid) == end  # (not in the tail opening verified)
        with pytest.raises(CorruptSegment, match=path.name):
            bm.load_bulk(sid, 0, end)
        before = bm.load_bulk(sid, 0, victim.first)
        assert len(before) == 50
        for b in before:
            check_batch(b)


def test_the_tail_verified_at_open_serves_recovery_reads_until_forgotten(tmp_path):
    """Opening verifies each stream's tail in full; recovery then reads that tail (the last
    checkpoint's state, the input to replay) from memory, not from the device a second time.
    Proven by damaging the file after the open: reads still give the verified rows, and
    once the tails are forgotten the damage is found."""
    with BlockManager(tmp_path, SMALL) as bm:
        sid = bm.stream("in", SCHEMA)
        end = fill(bm, sid, 0, 3)  # one file, its tail within one bulk write
    with BlockManager(tmp_path, SMALL) as bm:
        sid = bm.stream("in", SCHEMA)
        f = bm._by_id[sid].files[-1]
        victim = f.segs[-2]
        assert f.tail is not None and f.tail[0] <= victim.pos
        with open(f.path, "r+b") as fh:  # flip a payload bit behind the open's back
            fh.seek(victim.pos + victim.length // 2)
            byte = fh.read(1)
            fh.seek(victim.pos + victim.length // 2)
            fh.write(bytes([byte[0] ^ 4]))
        got = bm.load_bulk(sid)
        assert sum(len(b) for b in got) == end
        for b in [*got, bm.read(sid, victim.first)]:
            check_batch(b)
        got[0].columns[0][:] = -1  # a caller's writes into what it read stay its own
        check_batch(bm.load_bulk(sid)[0])
        bm.forget_tails()
        assert f.tail is None
        with pytest.raises(CorruptSegment, match=f.path.name):
            bm.read(sid, victim.first)


@pytest.mark.parametrize("damage", ["torn", "zeros"])
def test_torn_tail_is_dropped_on_reopen(tmp_path, damage):
    with BlockManager(tmp_path, SMALL) as bm:
        sid = bm.stream("in", SCHEMA)
        end = fill(bm, sid, 0, 5)
        f = bm._by_id[sid].files[-1]
        last = f.segs[-1]
        path = f.path
    with open(path, "r+b") as fh:
        fh.seek(last.pos + (seg_fmt.PAGE if damage == "torn" else 0))
        fh.write(b"\xff" * 100 if damage == "torn" else b"\0" * last.length)
    with BlockManager(tmp_path, SMALL) as bm:
        sid = bm.stream("in", SCHEMA)
        assert bm.durable_end(sid) == last.first
        assert (len(bm.torn) == 1) == (damage == "torn")
        assert sum(len(b) for b in bm.load(sid)) == last.first
        fill(bm, sid, last.first, 3)  # the lost tail is written again, in a new file incarnation
    for _ in range(2):  # and every later restart still finds all of it (the torn segment
        with BlockManager(tmp_path, SMALL) as bm:  # must not resurface and hide older files)
            sid = bm.stream("in", SCHEMA)
            assert bm.durable_end(sid) == last.first + 900 and bm.start(sid) == 0
            assert sum(len(b) for b in bm.load(sid)) == last.first + 900
            for b in bm.load(sid):
                check_batch(b)
    assert end == last.first + 300


@pytest.mark.parametrize("at", [0, 63, 90, 99])
def test_a_torn_segment_among_many_in_the_tail_drops_it_and_what_follows(tmp_path, at):
    """A tail of 100 small segments is verified in one call (segment.verified_run): a torn
    payload in any of them - the first, mid-way, the last - drops it and every segment after
    it on reopening, and what came before reads back exactly."""
    cfg = StorageConfig(file_bytes=1 << 20, pool_files=2, io_threads=2, bulk_bytes=1 << 20)
    with BlockManager(tmp_path, cfg) as bm:
        sid = bm.stream("in", SCHEMA)
        fill(bm, sid, 0, 100, rows=10)
        f = bm._by_id[sid].files[-1]
        assert len(f.segs) == 100 > seg_fmt.RUN_SEGMENTS
        victim, path = f.segs[at], f.path
    h = seg_fmt.parse_header(np.fromfile(path, np.uint8, victim.length, offset=victim.pos))
    with open(path, "r+b") as fh:  # the end of the victim's payload never written
        fh.seek(victim.pos + h.header_len + h.payload_len - 100)
        fh.write(b"\xff" * 100)
    with BlockManager(tmp_path, cfg) as bm:
        sid = bm.stream("in", SCHEMA)
        assert bm.durable_end(sid) == victim.first and len(bm.torn) == 1
        got = list(bm.load(sid))
        assert sum(len(b) for b in got) == victim.first
        for b in got:
            check_batch(b)


@pytest.mark.parametrize("damage", [None, "torn"])
def test_a_reopened_tail_is_flushed_before_its_stream_is_handed_out(tmp_path, damage):
    """With machine durability, what the last run wrote but had not flushed is taken as the
    stream's: opening the stream flushes the tail's file, and again after it erased a torn
    segment's header, before the stream is handed out (later writes and indexes follow it)."""
    import dataclasses

    from scabbard.storage.fileio import FileIO

    cfg = dataclasses.replace(SMALL, sync=True)
    with BlockManager(tmp_path, cfg) as bm:
        sid = bm.stream("in", SCHEMA)
        fill(bm, sid, 0, 5)
        f = bm._by_id[sid].files[-1]
        last, path = f.segs[-1], f.path
    if damage:
        with open(path, "r+b") as fh:
            fh.seek(last.pos + seg_fmt.PAGE)
            fh.write(b"\xff" * 100)
    log: list = []

    class Logged(FileIO):
        def pwritev(self, fd, bufs, pos):
            log.append(("write", fd, pos))
            return super().pwritev(fd, bufs, pos)

        def fdatasync(self, fd):
            log.append(("flush", fd, None))
            super().fdatasync(fd)

    with BlockManager(tmp_path, cfg, io=Logged()) as bm:
        sid = bm.stream("in", SCHEMA)
        handed_out = len(log)
        tail = bm._by_id[sid].files[-1]
        assert tail.path == path
        ops = [(kind, pos) for kind, fd, pos in log[:handed_out] if fd == tail.fd]
        assert ("flush", None) in ops, log
        erased = [i for i, (kind, pos) in enumerate(ops) if kind == "write" and pos == last.pos]
        assert len(erased) == (1 if damage else 0), ops
        if erased:
            assert ("flush", None) in ops[erased[0] + 1:], ops


def test_a_failed_tail_verification_is_reported_over_a_failed_flush_beside_it(tmp_path,
                                                                               monkeypatch):
    """The tail is verified while an I/O thread flushes it: when both fail, the error told is
    the verification's (the first cause), once the flush has ended."""
    import dataclasses

    from scabbard.storage import reopen
    from scabbard.storage.fileio import FileIO

    cfg = dataclasses.replace(SMALL, sync=True)
    with BlockManager(tmp_path, cfg) as bm:
        fill(bm, bm.stream("in", SCHEMA), 0, 3)
    flushed = threading.Event()

    class FailingFlush(FileIO):
        def fdatasync(self, fd):
            flushed.set()
            raise OSError(5, "the flush failed")

    class VerificationFailed(Exception):
        pass

    def verify(self, s, f):
        assert flushed.wait(10)  # both have failed before either is told
        raise VerificationFailed("the tail could not be read")

    monkeypatch.setattr(reopen.FolderScan, "_verify_tail", verify)
    with BlockManager(tmp_path, cfg, io=FailingFlush()) as bm, \
            pytest.raises(VerificationFailed, match="could not be read"):
        bm.stream("in", SCHEMA)


def test_second_engine_on_the_same_folder_is_refused(tmp_path):
    with BlockManager(tmp_path, SMALL) as bm:
        sid = bm.stream("in", SCHEMA)
        end = fill(bm, sid, 0, 3)
        with pytest.raises(StorageLocked, match=f"pid {os.getpid()}"):
            BlockManager(tmp_path, SMALL)
        check_batch(bm.read(sid, end - 1))  # the owner is unaffected
    BlockManager(tmp_path, SMALL).close()  # free again once the owner closed it


def test_folder_that_cannot_be_written(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(StorageError, match="not writable"):
        BlockManager(blocker / "storage", SMALL)


def test_full_storage_fails_clearly_and_keeps_acknowledged_data(tmp_path):
    cfg = StorageConfig(file_bytes=64 * 1024, pool_files=1, max_bytes=3 * 64 * 1024,
                        bulk_bytes=32 * 1024)
    with BlockManager(tmp_path, cfg) as bm:
        sid = bm.stream("in", SCHEMA)
        acked, off = 0, 0
        with pytest.raises(StorageFull, match="cap"):
            for _ in range(100):  # nothing is released: the cap is hit
                bm.append(sid, make_batch(off, 300)).result()
                off += 300
                acked = off
        assert bm.durable_end(sid) == acked
    with BlockManager(tmp_path, cfg) as bm:
        sid = bm.stream("in", SCHEMA)
        assert bm.durable_end(sid) == acked
        for b in bm.load(sid):
            check_batch(b)


def test_schema_mismatch_on_reopen(tmp_path):
    with BlockManager(tmp_path, SMALL) as bm:
        fill(bm, bm.stream("in", SCHEMA), 0, 1)
    with BlockManager(tmp_path, SMALL) as bm, pytest.raises(StorageError, match="schema"):
        bm.stream("in", Schema("other", SCHEMA.fields[:3]))


def test_appends_go_forward(tmp_path):
    with BlockManager(tmp_path, SMALL) as bm:
        sid = bm.stream("in", SCHEMA)
        fill(bm, sid, 0, 1)
        with pytest.raises(StorageError, match="up to 300 are written"):
            bm.append(sid, make_batch(100, 10))


def test_stale_segments_of_a_reused_file_are_not_data(tmp_path):
    """A file freed by one stream and reused by another never shows the old segments."""
    with BlockManager(tmp_path, SMALL) as bm:
        a = bm.stream("a", SCHEMA)
        end = fill(bm, a, 0, 20)
        bm.trim(a, end)
        b = bm.stream("b", SCHEMA)
        fill(bm, b, 0, 1)
    with BlockManager(tmp_path, SMALL) as bm:
        b = bm.stream("b", SCHEMA)
        assert bm.durable_end(b) == 300
        a = bm.stream("a", SCHEMA)
        assert bm.durable_end(a) <= end and sum(len(x) for x in bm.load(a)) < end


# -- p-streams and markers ---------------------------------------------------------------------

def unit(off: int, n: int = 300) -> PUnit:
    return PUnit("in", off, make_batch(off, n), (off + n,))


def test_readers_at_their_own_offsets(tmp_path):
    with BlockManager(tmp_path, SMALL) as bm:
        pog = POG(bm)
        s = pog.pstream("in", SCHEMA)
        s.subscribe("op1", "fast", 0)
        s.subscribe("op2", "slow", 0)
        for i in range(6):
            s.write(unit(i * 300), i, i * 300, is_persistent=i % 2 == 0).result()
        got_fast = [s.read("fast").offset for _ in range(6)]
        assert got_fast == [0, 300, 600, 900, 1200, 1500]
        assert s.read("fast") is None
        assert [s.read("slow").offset for _ in range(2)] == [0, 300]
        ck = s.checkpoint()
        assert ck.readers == {"fast": 1800, "slow": 600} and ck.end == 1800
        s.subscribe("op3", "late", 900)
        assert s.read("late").offset == 900


def test_persistent_unit_is_readable_only_once_stored(tmp_path):
    cfg = StorageConfig(file_bytes=64 * 1024, pool_files=2, io_threads=1)
    with BlockManager(tmp_path, cfg) as bm:
        s = POG(bm).pstream("in", SCHEMA)
        s.subscribe(None, "r", 0)
        gate = threading.Event()
        bm._pool.submit(gate.wait)  # hold the only I/O thread
        done = s.write(unit(0), 0, 0, is_persistent=True)
        assert s.read("r", timeout=0.2) is None and not done.done()
        assert bm.durable_end(s.stream_id) == 0
        gate.set()
        got = s.read("r", timeout=10)
        assert got is not None and got.persistent and bm.durable_end(s.stream_id) == 300


def test_retain_marker_persists_the_next_unit_only(tmp_path):
    with BlockManager(tmp_path, SMALL) as bm:
        pog = POG(bm)
        s = pog.pstream("in", SCHEMA)
        s.subscribe(None, "r", 0)
        s.write(unit(0), 0, 0).result()
        pog.insert_retain_marker("in")
        assert s.write(unit(300), 1, 300).result().persistent
        assert not s.write(unit(600), 2, 600).result().persistent
        assert [u.persistent for u in (s.read("r"), s.read("r"), s.read("r"))] == [False, True,
                                                                                    False]


def test_release_marker_trims_only_below_every_reader(tmp_path):
    with BlockManager(tmp_path, SMALL) as bm:
        pog = POG(bm)
        s = pog.pstream("in", SCHEMA)
        s.subscribe(None, "a", 0)
        s.subscribe(None, "b", 0)
        for i in range(40):
            pog.insert_retain_marker("in")
            s.write(unit(i * 300), i, i * 300)
        s.flush()
        while s.read("a", timeout=1) is not None:
            pass
        pog.send_release("in", "a", 12000)
        assert bm.start(s.stream_id) == 0  # reader b still needs everything
        for _ in range(40):
            s.read("b", timeout=1)
        pog.send_release("in", "b", 9000)
        assert 0 < bm.start(s.stream_id) <= 9000
        with pytest.raises(PStreamError, match="before reading"):
            s.trim_from("b", 13000)
        loaded = list(s.load_stream(9000))
        assert loaded[0].offset == 9000 and loaded[-1].end == 12000
        for u in loaded:
            check_batch(u.batch)


def test_write_gap_is_refused(tmp_path):
    with BlockManager(tmp_path, SMALL) as bm:
        s = POG(bm).pstream("in", SCHEMA)
        with pytest.raises(PStreamError, match="ends at 0"):
            s.write(unit(300), 0, 300)



def test_stream_bounds_the_bytes_waiting_in_memory(tmp_path):
    one = make_batch(0, 300).column_bytes
    with BlockManager(tmp_path, SMALL) as bm:
        s = POG(bm).pstream("in", SCHEMA, max_units=10, max_bytes=2 * one)
        s.subscribe(None, "r", 0)
        assert s.has_room(10 * one)  # an empty stream always takes one p-unit
        s.write(unit(0), 0, 0).result()
        s.write(unit(300), 1, 300).result()
        assert not s.has_room(one)
        blocked = threading.Thread(target=s.write, args=(unit(600), 2, 600))
        blocked.start()
        blocked.join(0.2)
        assert blocked.is_alive()  # back-pressure: waits for the reader
        assert s.read("r").offset == 0
        blocked.join(5)
        assert not blocked.is_alive() and s.end == 900


def test_persisted_ingress_delivers_every_unit_once_stored_in_order(tmp_path):
    with BlockManager(tmp_path, SMALL) as bm:
        pog = POG(bm)
        s = pog.pstream("in", SCHEMA, max_units=4)
        got = []

        def deliver(u: PUnit) -> bool:
            assert u.persistent and bm.durable_end(s.stream_id) >= u.end
            got.append(u.offset)
            pog.send_release("in", "r", u.end)
            return True

        batches = ((i, make_batch(0, 300), None, None) for i in range(50))  # offsets are assigned on write
        assert pog.persist_ingress("in", "r", batches, deliver)
        assert got == list(range(0, 15000, 300))
        assert bm.start(s.stream_id) > 0  # released as delivered: files went back to the pool
        stop_after = iter(range(3))
        more = ((i, make_batch(0, 300), None, None) for i in range(50, 100))
        assert not pog.persist_ingress("in", "r2", more, lambda u: next(stop_after, None) is not None)


@pytest.fixture
def tiny_disk(tmp_path):
    """A real 1 MiB file system (tmpfs), so 'disk full' is the kernel's ENOSPC; root only."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_real_full_disk_fails_clearly_and_keeps_acknowledged_data(tiny_disk):
    cfg = StorageConfig(file_bytes=128 * 1024, pool_files=1, bulk_bytes=32 * 1024)
    acked, off = 0, 0
    with BlockManager(tiny_disk / "store", cfg) as bm:
        sid = bm.stream("in", SCHEMA)
        with pytest.raises(StorageFull, match="no space left"):
            for _ in range(1000):  # nothing is released: the device fills up
                bm.append(sid, make_batch(off, 300)).result()
                off += 300
                acked = off
        assert acked > 0 and bm.durable_end(sid) == acked
    with BlockManager(tiny_disk / "store", cfg) as bm:
        sid = bm.stream("in", SCHEMA)
        assert bm.durable_end(sid) == acked
        assert sum(len(b) for b in bm.load(sid)) == acked


def test_an_emulated_slower_device_paces_writes(tmp_path):
    """``write_bytes_per_s`` (Fig. 11's emulated disk): acknowledgements come no faster
    than such a device would write."""
    cfg = StorageConfig(file_bytes=1 << 20, pool_files=2, bulk_bytes=256 * 1024,
                        write_bytes_per_s=4e6)
    with BlockManager(tmp_path, cfg) as bm:
        sid = bm.stream("s", SCHEMA)
        t0 = time.perf_counter()
        for i in range(8):
            bm.append(sid, make_batch(i * 2000, 2000)).result()
        took = time.perf_counter() - t0
        assert bm.bytes_written >= 8 * 2000 * 36  # the columns, 36 bytes a row
        assert took >= 0.9 * bm.bytes_written / 4e6
        assert len(bm.read(sid, 0)) == 2000  # and the data is there


def test_discard_mode_acknowledges_without_writing_and_refuses_reads(tmp_path):
    cfg = StorageConfig(file_bytes=1 << 20, pool_files=2, discard=True)
    with BlockManager(tmp_path, cfg) as bm:
        sid = bm.stream("s", SCHEMA)
        assert bm.append(sid, make_batch(0, 1000)).result() == 1000
        assert bm.bytes_written > 0 and bm.durable_end(sid) == 1000
        with pytest.raises(StorageError, match="discard"):
            bm.read(sid, 0)


def test_a_torn_tail_that_resurfaces_yields_to_the_newer_file(tmp_path):
    """Killed after the tail was rewritten but before the torn segment's erasure reached the
    disk: on restart the older file still claims the offsets the newer one holds - the newer
    incarnation wins for them and everything before stays (nothing older is given up)."""
    with BlockManager(tmp_path, SMALL) as bm:
        sid = bm.stream("in", SCHEMA)
        fill(bm, sid, 0, 5)
        f = bm._by_id[sid].files[-1]
        last, path = f.segs[-1], f.path
    with open(path, "r+b") as fh:
        fh.seek(last.pos)
        header = fh.read(seg_fmt.PAGE)  # the torn segment's header page, valid
        fh.seek(last.pos + seg_fmt.PAGE)
        fh.write(b"\xff" * 100)
    with BlockManager(tmp_path, SMALL) as bm:
        sid = bm.stream("in", SCHEMA)
        fill(bm, sid, last.first, 3)
    with open(path, "r+b") as fh:  # the erasure is undone: as if it never reached the disk
        fh.seek(last.pos)
        fh.write(header)
    with BlockManager(tmp_path, SMALL) as bm:
        sid = bm.stream("in", SCHEMA)
        assert (bm.start(sid), bm.durable_end(sid)) == (0, last.first + 900)
        got = list(bm.load(sid))
        assert sum(len(b) for b in got) == last.first + 900
        for b in got:
            check_batch(b)


def test_a_reader_resuming_at_the_end_releases_only_what_it_says(tmp_path):
    """After a restart the ingress reader subscribes at the stored end; a checkpoint then
    releases below its own, older offset - the stored input between the two must stay (the
    CI failure: one release trimmed everything up to the end, and a kill before the next
    checkpoint left a run that could not be recovered)."""
    with BlockManager(tmp_path, SMALL) as bm:
        s = POG(bm).pstream("in", SCHEMA)
        for i in range(12):
            s.write(PUnit("in", i, make_batch(i * 300, 300)), i, i * 300, is_persistent=True)
        s.flush()
    with BlockManager(tmp_path, SMALL) as bm:
        pog = POG(bm)
        s = pog.pstream("in", SCHEMA)
        assert s.end == 3600
        s.subscribe(None, "r")  # resumes at the end
        pog.send_release("in", "r", 1200)  # a checkpoint's input end, before it
        assert bm.start(s.stream_id) <= 1200
        assert sum(len(b) for b in bm.load(s.stream_id, 1200)) == 2400


def test_a_stream_whose_every_file_was_released_carries_on_where_it_ended(tmp_path):
    """Reopened, every file is sealed; a GC that then releases all of a stream's data (a
    recovery that replays a channel's stored units and writes nothing new yet) leaves no file
    to say where it ended.  The next incarnation restarts the empty stream at the position its
    checkpoint's reader had (offsets never go back below what a record depends on)."""
    with BlockManager(tmp_path, SMALL) as bm:
        end = fill(bm, bm.stream("in", SCHEMA), 0, 12)
    with BlockManager(tmp_path, SMALL) as bm:  # the next incarnation: its files sealed
        sid = bm.stream("in", SCHEMA)
        assert bm.durable_end(sid) == end
        bm.trim(sid, end)
        assert not bm._by_id[sid].files
    with BlockManager(tmp_path, SMALL) as bm:
        s = POG(bm).pstream("in", SCHEMA)
        assert s.end < end  # the stored end is gone with the files
        s.restart_at(end)
        s.subscribe(None, "a", end)
        assert s.end == end and bm.start(s.stream_id) == end
        s.on_marker(Marker(MarkerKind.RETAIN, "in"))
        s.write(unit(end), 0, end)
        s.flush()
        assert s.read("a", timeout=5).offset == end
        with pytest.raises(PStreamError, match="cannot restart"):
            s.restart_at(0)
    with BlockManager(tmp_path, SMALL) as bm:
        sid = bm.stream("in", SCHEMA)
        assert bm.start(sid) == end and bm.durable_end(sid) == end + 300


def test_flush_waits_for_the_appends_made_before_it_not_for_those_after(tmp_path):
    """A stream appended to without a pause (an exactly-once sink under a query's output) is
    never idle: a flush returns once what was appended before it is acknowledged, while a
    later append is still being written (a checkpoint's flush had waited for the run's end)."""
    import threading

    from scabbard.storage.fileio import FileIO

    started, tokens = threading.Event(), threading.Semaphore(0)

    class Gate(FileIO):  # each segment write waits for a token; the file headers pass
        def pwritev(self, fd, bufs, pos):
            if pos > 0:
                started.set()
                tokens.acquire()
            return super().pwritev(fd, bufs, pos)

    cfg = StorageConfig(file_bytes=1 << 20, pool_files=1, io_threads=1, bulk_bytes=32 * 1024)
    with BlockManager(tmp_path, cfg, Gate()) as bm:
        sid = bm.stream("s", SCHEMA)
        first = bm.append(sid, make_batch(0, 10))
        assert started.wait(60)  # its write is under way (and waits): the next is a chunk apart
        cond, waiting = bm._by_id[sid].cond, threading.Event()
        wait = cond.wait
        cond.wait = lambda timeout=None: (waiting.set(), wait(timeout))[1]
        flushed = threading.Thread(target=bm.flush, args=(sid,))
        flushed.start()
        assert waiting.wait(60)  # the flush took what it waits for: the append comes after
        later = bm.append(sid, make_batch(10, 10))
        tokens.release()  # the first append's write only
        flushed.join(60)
        alive = flushed.is_alive()
        tokens.release()
        flushed.join()
        assert not alive, "the flush waited for an append made after it"
        assert first.result() == 10 and later.result() == 20
