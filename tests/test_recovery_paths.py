"""Recovery off the main road: fallbacks, the transactional sink's epochs, failed writes,
fail-stop, other input, damaged storage on reopen, metadata written atomically.

Each test is the finding of a careful reading made real; each fails without its fix."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import threading

import numpy as np
import pandas as pd
import pytest
from ftkit import (
    CFG,
    SMALL,
    FailingIO,
    StopAfter,
    committed_epochs,
    damage_record,
    damage_state,
    failure_free,
    query,
    records,
    tmpfs,
)

from scabbard.batch import Batch
from scabbard.data import Dataset, write_dataset
from scabbard.ft.recovery import run_fault_tolerant
from scabbard.ft.sinks import ClockedSink, TransactionalSink, owner_of, read_output
from scabbard.ft.verify import compare
from scabbard.outputs import read_metrics
from scabbard.pog.checkpoint import CheckpointController, CheckpointError, CheckpointStore, Due
from scabbard.schema import Field, Schema
from scabbard.storage import (
    BlockManager,
    FileIO,
    FormatVersionError,
    RecordingIO,
    StorageConfig,
    StorageError,
    StorageLocked,
)
from scabbard.storage import segment as seg_fmt


def stopped(q, ds, store, sink, k, **kw):
    """A run (or a recovery) whose source stops after ``k`` new batches: not completed."""
    return run_fault_tolerant(q, ds, store, sink, CFG, interval=None,
                              layout=SMALL,
                              wrap_source=lambda s: StopAfter(s, k), **kw)


def finish(q, ds, store, sink, **kw):
    return run_fault_tolerant(q, ds, store, sink, CFG, interval=None, recover=True,
                              layout=SMALL, **kw)


# -- 1. a fallback recovery keeps what it may still fall back to -------------------------------
def test_a_fallback_recovery_keeps_the_input_and_state_it_may_fall_back_to(tiny, tmp_path):
    """The newest record reads but its state does not load: recovery resumes from the one
    before.  Its first new checkpoint must not release what that older checkpoint needs -
    if the new one turns out damaged too, recovery falls back to the older one again."""
    q, ds = query("CM1", tiny)
    n = 40 * ds.rows
    store, out = tmp_path / "store", tmp_path / "out"
    stopped(q, ds, store, ClockedSink(out), 26, every_tasks=8, max_tuples=n)
    new, old = records(store)[:2]
    damage_state(store, new, q, ds)
    replayed = 26 - (old.seq + 1)  # stored tasks after the older checkpoint
    r = stopped(q, ds, store, ClockedSink(out), 0, recover=True, every_tasks=replayed)
    assert r.resumed_from == old.id and len(r.checkpoints) == 1
    damage_state(store, r.checkpoints[0], q, ds)  # the one new checkpoint is damaged too
    r = finish(q, ds, store, ClockedSink(out))
    assert r.resumed_from == old.id
    assert compare(read_output(out), failure_free(q, ds, n), q.schema).ok


def test_a_damaged_first_checkpoint_falls_back_to_the_start_of_the_input(tiny, tmp_path):
    """With a single checkpoint there is nothing older to fall back to but the input itself:
    the first checkpoint releases nothing."""
    q, ds = query("CM1", tiny)
    n = 20 * ds.rows
    store, out = tmp_path / "store", tmp_path / "out"
    stopped(q, ds, store, ClockedSink(out), 6, every_tasks=4, max_tuples=n)
    (only,) = records(store)
    damage_state(store, only, q, ds)
    r = finish(q, ds, store, ClockedSink(out))
    assert r.resumed_from is None and r.replayed_from == 0
    assert compare(read_output(out), failure_free(q, ds, n), q.schema).ok


# -- 2. the transactional sink never reuses an id, never replaces a committed epoch ------------
def test_checkpoint_ids_are_never_reused_after_a_damaged_newest_record(tiny, tmp_path):
    q, ds = query("LRB1", tiny)
    n = 30 * ds.rows
    store, out = tmp_path / "store", tmp_path / "out"
    stopped(q, ds, store, TransactionalSink(out), 20, every_tasks=3, max_tuples=n)
    newest = records(store)[0]
    before = committed_epochs(out)
    assert f"{newest.id:012d}.seg" in before
    damage_record(store, newest)
    r = finish(q, ds, store, TransactionalSink(out), every_tasks=3)
    assert all(c.id > newest.id for c in r.checkpoints)
    after = committed_epochs(out)
    assert all(after[name] == data for name, data in before.items())  # never replaced
    assert compare(read_output(out), failure_free(q, ds, n), q.schema).ok


# -- 3. a failed prepare, a failed record: fail-stop, nothing lost ----------------------------
def test_a_full_disk_during_prepare_stops_the_run_and_loses_no_result(tiny, tmp_path):
    q, ds = query("CM2", tiny)
    n = 60 * ds.rows
    store = tmp_path / "store"
    with tmpfs(tmp_path / "disk", "192k") as grow:
        out = tmp_path / "disk" / "out"
        with pytest.raises(CheckpointError, match="No space left on device"):
            run_fault_tolerant(q, ds, store, TransactionalSink(out), CFG, interval=None,
                               every_tasks=2, max_tuples=n, layout=SMALL)
        assert records(store)  # some checkpoints committed before the disk filled
        assert not list((out / "pending").glob(".*.tmp"))  # no half-written epoch left
        grow("64m")
        finish(q, ds, store, TransactionalSink(out), every_tasks=2)
        assert compare(read_output(out), failure_free(q, ds, n), q.schema).ok


def test_a_failed_record_after_prepare_leaves_no_orphan_epoch(tiny, tmp_path):
    q, ds = query("LRB1", tiny)
    n = 30 * ds.rows
    store, out = tmp_path / "store", tmp_path / "out"
    io = FailingIO(lambda path, pos, bufs: ".ckpt-" in path, k=3)
    with pytest.raises(CheckpointError, match="checkpoint 3 failed"):
        run_fault_tolerant(q, ds, store, TransactionalSink(out), CFG, interval=None,
                           every_tasks=3, max_tuples=n, layout=SMALL, io=io)
    assert io.failed == 1 and (out / "pending" / f"{3:012d}.seg").exists()
    finish(q, ds, store, TransactionalSink(out), every_tasks=3)
    assert not list((out / "pending").iterdir())
    assert compare(read_output(out), failure_free(q, ds, n), q.schema).ok


# -- 4. the end-of-stream epoch takes a fresh id, not max + 2**30 ------------------------------
def test_epochs_after_an_early_stop_and_a_failure_commit_in_order(tiny, tmp_path):
    """A run stopped early commits the rest as a last epoch; a recovery fails after a few
    checkpoints; the next recovery must know what was committed last."""
    q, ds = query("YSB", tiny)
    n = 40 * ds.rows
    store, out = tmp_path / "store", tmp_path / "out"
    stopped(q, ds, store, TransactionalSink(out), 10, every_tasks=4, max_tuples=n)
    io = FailingIO(lambda path, pos, bufs: ".ckpt-" in path, k=3)
    with pytest.raises(CheckpointError):
        run_fault_tolerant(q, ds, store, TransactionalSink(out), CFG, interval=None,
                           every_tasks=2, recover=True, layout=SMALL, io=io)
    finish(q, ds, store, TransactionalSink(out), every_tasks=4)
    ids = [int(p) for p in (p.split(".")[0] for p in committed_epochs(out))]
    assert ids == sorted(ids) and max(ids) < 1000
    assert compare(read_output(out), failure_free(q, ds, n), q.schema).ok


# -- 5. failures that stopped checkpointing silently ---------------------------------------------
SCHEMA = Schema("t", (Field("timestamp", "int64"), Field("v", "int64")))


def _batch(offset: int, n: int) -> Batch:
    ts = np.arange(offset, offset + n, dtype=np.int64)
    return Batch(SCHEMA, (ts, ts * 2), offset)


class _Stall(FileIO):
    """Writes wait until ``go`` is set, then fail (a device that hangs, then errors)."""

    def __init__(self):
        self.go = threading.Event()
        self.armed = False

    def pwritev(self, fd, bufs, pos):
        if self.armed:
            self.go.wait(60)
            raise OSError(errno.EIO, "I/O error")
        return super().pwritev(fd, bufs, pos)


def test_an_append_waiting_on_back_pressure_fails_when_the_writer_fails(tmp_path):
    io = _Stall()
    cfg = StorageConfig(file_bytes=1 << 20, pool_files=2, bulk_bytes=64 << 10,
                        max_pending_bytes=64 << 10)
    with BlockManager(tmp_path, cfg, io) as bm:
        sid = bm.stream("s", SCHEMA)
        io.armed = True
        futures, errors = [], []

        def produce():
            try:
                for i in range(40):
                    futures.append(bm.append(sid, _batch(i * 1000, 1000)))
            except StorageError as e:
                errors.append(e)

        t = threading.Thread(target=produce)
        t.start()
        while not (bm._by_id[sid].pending_bytes > cfg.max_pending_bytes):
            threading.Event().wait(0.01)  # the producer fills the queue; then it blocks
        io.go.set()
        t.join(60)
        assert not t.is_alive(), "the blocked append never returned"
        assert errors and "cannot be written" in str(errors[0])
        for f in futures:  # every acknowledged-or-not future is resolved
            assert f.exception(timeout=60) is not None
        with pytest.raises(StorageError):
            bm.close()


def test_a_failure_in_gc_after_a_checkpoint_stops_the_run(tiny, tmp_path):
    """Releasing input writes a zero header over each freed pool file; when that write
    fails the run stops with the error instead of running on without checkpoints."""
    q, ds = query("CM1", tiny)
    io = FailingIO(lambda path, pos, bufs: "/pool/" in path and pos == 0 and _zeros(bufs))
    with pytest.raises(CheckpointError, match="failed"):
        run_fault_tolerant(q, ds, tmp_path / "store", ClockedSink(tmp_path / "out"), CFG,
                           interval=None, every_tasks=2, max_tuples=40 * ds.rows,
                           layout=SMALL, io=io)
    assert io.failed == 1


def _zeros(bufs) -> bool:
    """A page of zeros: what a released pool file's header is overwritten with."""
    return all(not np.frombuffer(memoryview(b).cast("B"), np.uint8).any() for b in bufs)


def test_a_checkpoint_interval_too_long_for_a_timer_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match="interval"):
        CheckpointController(CheckpointStore(tmp_path), operator=None, due=Due(1e300))
    r = subprocess.run([sys.executable, "-m", "scabbard", "run", "--query", "CM1",
                        "--checkpoint-interval", "1e300", "--storage", str(tmp_path / "s"),
                        "--output", str(tmp_path / "o")], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "--checkpoint-interval must be in" in r.stderr


def test_a_dead_checkpoint_timer_stops_the_run(tiny, tmp_path, monkeypatch):
    q, ds = query("CM1", tiny)

    def broken(self):
        raise RuntimeError("timer broke")

    monkeypatch.setattr(CheckpointController, "request", broken)
    n = 40 * ds.rows
    with pytest.raises(CheckpointError, match="timer broke"):
        run_fault_tolerant(q, ds, tmp_path / "store", ClockedSink(tmp_path / "out"), CFG,
                           interval=0.001, max_tuples=n, rate=n / 3.0, layout=SMALL)


# -- 6. recovery with other input or settings ----------------------------------------------------
def test_recovery_refuses_another_dataset_or_other_settings(tiny, tmp_path):
    q, ds = query("CM1", tiny)
    store, out = tmp_path / "store", tmp_path / "out"
    stopped(q, ds, store, ClockedSink(out), 5, every_tasks=2, max_tuples=10 * ds.rows)
    cols = list(ds.stream.columns)
    cols[3] = np.asarray(cols[3]).copy()
    cols[3][0] += 1  # one value changed: another dataset, the same schema and size
    other = write_dataset(tmp_path / "other", ds.schema, tuple(cols), workload="cm",
                          params=ds.params, parquet=False)
    with pytest.raises(CheckpointError, match="dataset's checksum"):
        finish(q, other, store, ClockedSink(out))
    with pytest.raises(CheckpointError, match="max_tuples 240000 recorded, 7 given"):
        finish(q, ds, store, ClockedSink(out), max_tuples=7)
    with pytest.raises(CheckpointError, match="durability 'machine' recorded, 'process' given"):
        finish(q, ds, store, ClockedSink(out), durability="process")
    finish(q, ds, store, ClockedSink(out))  # the same data and settings: fine


def test_run_verify_finds_a_changed_dataset(tiny, tmp_path):
    import shutil

    ds = tiny["cm"]
    copy = tmp_path / "cm"
    shutil.copytree(ds.path, copy)
    col = copy / "stream" / "columns" / f"{ds.schema.fields[2].name}.bin"
    data = bytearray(col.read_bytes())
    data[100] ^= 1
    col.write_bytes(bytes(data))
    r = subprocess.run([sys.executable, "-m", "scabbard", "run", "--query", "CM1", "--data",
                        str(copy), "--verify", "--quiet"], capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert "checksum mismatch" in r.stderr


def test_a_damaged_dataset_is_refused_by_default_and_verified_once_per_change(tiny, tmp_path,
                                                                             monkeypatch):
    """Checksums are verified by default, once per change of the dataset's files (a stamp of
    their sizes and times): 8 flipped bytes made a run compute 4,211 results without a word."""
    import shutil

    from scabbard.data import STAMP, open_dataset

    ds = tiny["cm"]
    copy = tmp_path / "cm"
    shutil.copytree(ds.path, copy)
    (copy / STAMP).unlink(missing_ok=True)  # the original's, copied with its times
    hashed = []
    real = Dataset.verify
    monkeypatch.setattr(Dataset, "verify", lambda self: hashed.append(1) or real(self))
    open_dataset(copy)
    open_dataset(copy)
    assert len(hashed) == 1 and (copy / STAMP).is_file()  # the second open read no byte
    col = copy / "stream" / "columns" / f"{ds.schema.fields[2].name}.bin"
    data = bytearray(col.read_bytes())
    data[100:108] = bytes(b ^ 0xFF for b in data[100:108])
    col.write_bytes(bytes(data))
    base = [sys.executable, "-m", "scabbard", "run", "--query", "CM1", "--data", str(copy),
            "--max-tuples", "1000", "--quiet"]
    r = subprocess.run(base, capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert f"{col.name}: checksum mismatch" in r.stderr
    r = subprocess.run(base + ["--no-verify"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# -- 7. data hidden on reopen ----------------------------------------------------------------
def _store_with_data(path, n=4):
    with BlockManager(path, SMALL) as bm:
        sid = bm.stream("s", SCHEMA)
        for i in range(n):
            bm.append(sid, _batch(i * 1000, 1000)).result()
        return {f.path: f for f in bm._files.values() if f.segs}


def test_a_segment_of_another_format_version_is_refused_not_hidden(tmp_path):
    files = _store_with_data(tmp_path)
    path = next(iter(files))
    with open(path, "r+b") as f:
        f.seek(SMALL.data_start + 8)
        f.write(struct.pack("<H", 1))  # format version 1 in the first segment's header
    with pytest.raises(FormatVersionError, match="format version 1"):
        BlockManager(tmp_path, SMALL)


def test_an_unreadable_pool_file_is_quarantined_never_reused(tmp_path):
    files = _store_with_data(tmp_path, n=2)
    path = next(iter(files))
    with open(path, "r+b") as f:
        f.seek(20)
        f.write(b"\xff\xff")  # the pool-file header's epoch: its checksum fails
    original = path.read_bytes()
    with BlockManager(tmp_path, SMALL) as bm:
        assert any("damaged pool-file header" in t for t in bm.torn)
        sid = bm.stream("s", SCHEMA)
        for _ in range(12):  # more than the pool held: new files are taken
            bm.append(sid, _batch(bm.durable_end(sid), 1000)).result()
    quarantined = list((tmp_path / "quarantine").iterdir())
    assert len(quarantined) == 1 and quarantined[0].read_bytes() == original


def test_a_released_file_resurrected_by_a_machine_crash_never_hides_live_data(tmp_path):
    """Releasing a file zeroes its header without a flush; a power loss may bring the old header
    back.  That stale file ends before a hole after which the live stream continues: it is
    quarantined, and every acknowledged offset after the release still reads."""
    cfg = StorageConfig(file_bytes=64 << 10, pool_files=4, bulk_bytes=16 << 10)
    with BlockManager(tmp_path, cfg) as bm:
        sid = bm.stream("s", SCHEMA)
        for i in range(40):
            bm.append(sid, _batch(i * 500, 500)).result()
        files = list(bm._by_id[sid].files)
        heads = {f.path: f.path.read_bytes()[:seg_fmt.PAGE] for f in files[:2]}
        trim_to = files[2].first
        assert bm.trim(sid, trim_to) == 2
        end = bm.durable_end(sid)
    first = files[0].path  # its zeroed header is lost: the old one is back; the second's is not
    with open(first, "r+b") as f:
        f.write(heads[first])
    with BlockManager(tmp_path, cfg) as bm:
        sid = bm.stream("s", SCHEMA)
        assert any("end before a hole" in t for t in bm.torn), bm.torn
        assert bm.durable_end(sid) == end and bm.start(sid) == trim_to
        assert sum(len(b) for b in bm.load(sid)) == end - trim_to
    assert (tmp_path / "quarantine").is_dir()


def test_a_torn_tail_is_reported_in_the_metrics_log_and_the_summary(tiny, tmp_path):
    q, ds = query("CM1", tiny)
    store, out = tmp_path / "store", tmp_path / "out"
    stopped(q, ds, store, ClockedSink(out), 9, every_tasks=4, max_tuples=20 * ds.rows)
    with BlockManager(store, SMALL) as bm:  # tear the last input segment's payload
        sid = bm.stream("input", q.source.schema)
        f, seg = bm._locate(bm._by_id[sid], bm.durable_end(sid) - 1)
    with open(f.path, "r+b") as fh:
        fh.seek(seg.pos + seg_fmt.PAGE)
        fh.write(b"\x00" * 4096)
    log = tmp_path / "metrics.jsonl"
    r = finish(q, ds, store, ClockedSink(out), metrics_log=log)
    assert r.damage and "checksum mismatch" in r.damage[0]
    events = read_metrics(log)
    assert (events["event"] == "storage_damage").sum() == len(r.damage)
    assert compare(read_output(out), failure_free(q, ds, 20 * ds.rows), q.schema).ok


# -- 8. metadata written atomically ------------------------------------------------------------
def test_metadata_files_are_only_ever_renamed_into_place(tiny, tmp_path):
    q, ds = query("LRB1", tiny)
    io = RecordingIO(tmp_path)
    run_fault_tolerant(q, ds, tmp_path / "store", TransactionalSink(tmp_path / "out"), CFG,
                       interval=None, every_tasks=3, max_tuples=10 * ds.rows,
                       layout=SMALL, io=io)
    final = ("run.json", "streams.json", ".sink.json", "ckpt-")
    written = {op.path for op in io.ops if op.kind in ("write", "truncate")}
    assert not [p for p in written if os.path.basename(p).startswith(final)]
    renamed = {os.path.basename(op.dst) for op in io.ops if op.kind == "rename"}
    for name in ("run.json", "streams.json", ".sink.json"):
        assert name in renamed
    # machine durability: each new pool file's name is flushed before data goes into it
    for i, op in enumerate(io.ops):
        if op.kind == "create" and "/pool/f" in op.path:
            d = os.path.dirname(op.path)
            first_write = next((j for j, o in enumerate(io.ops) if o.ino == op.ino
                                and o.kind == "write"), len(io.ops))
            assert any(o.kind == "syncdir" and o.path == d for o in io.ops[i:first_write]), op


# -- 10. a fault-tolerant run reads its dataset once by default ----------------------------------
@pytest.mark.timeout(300)
def test_a_fault_tolerant_run_without_limits_reads_the_dataset_once(tiny, tmp_path):
    q, ds = query("LRB1", tiny)
    out = tmp_path / "out"
    r = run_fault_tolerant(q, ds, tmp_path / "store", ClockedSink(out), CFG, interval=0.05,
                           layout=SMALL)
    assert r.run.summary.tuples == ds.rows
    assert json.loads((tmp_path / "store" / "run.json").read_text())["completed"]
    assert compare(read_output(out), failure_free(q, ds, None), q.schema).ok


def test_recovering_with_other_settings_is_a_one_line_error(tiny, tmp_path):
    ds = tiny["cm"]
    base = [sys.executable, "-m", "scabbard", "run", "--query", "CM1", "--data", str(ds.path),
            "--storage", str(tmp_path / "s"), "--output", str(tmp_path / "o"), "--quiet",
            "--checkpoint-interval", "0.1", "--batch", "4000"]
    r = subprocess.run(base + ["--max-tuples", str(2 * ds.rows)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(base + ["--recover", "--rate", "1000"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "rate None recorded, 1000.0 given" in r.stderr
    r = subprocess.run(base + ["--recover", "--exactly-once", "transactional"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "sink 'clocked' recorded, 'transactional' given" in r.stderr


def _folder_bytes(folder) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_reading_an_output_changes_nothing_and_takes_no_lock(tiny, tmp_path):
    """read_output is a reader: a torn last segment of the clocked log is left out of what
    it returns, not repaired on disk (repair is recovery's), and a run holding the folder
    does not stop it reading the committed prefix."""
    q, ds = query("CM1", tiny)
    store, out = tmp_path / "store", tmp_path / "out"
    stopped(q, ds, store, ClockedSink(out), 9, every_tasks=4, max_tuples=20 * ds.rows)
    whole = read_output(out)
    with BlockManager(out / "log", ClockedSink.CONFIG) as bm:  # tear the last result piece
        sid = bm.stream("results", q.schema)
        f, seg = bm._locate(bm._by_id[sid], bm.durable_end(sid) - 1)
        first = seg.first
    with open(f.path, "r+b") as fh:  # a word of its first column
        fh.seek(seg.pos)
        h = seg_fmt.parse_header(np.frombuffer(fh.read(seg_fmt.PAGE), np.uint8))
        fh.seek(seg.pos + h.header_len)
        fh.write(b"\xff" * 8)
    before = _folder_bytes(out)
    torn = read_output(out)
    assert _folder_bytes(out) == before  # nothing written, nothing moved
    assert 0 < len(torn) <= first < len(whole)
    pd.testing.assert_frame_equal(torn, whole.iloc[:len(torn)])
    with BlockManager(out / "log", ClockedSink.CONFIG):  # a run holds the folder
        assert len(read_output(out)) == len(torn)
    finish(q, ds, store, ClockedSink(out))  # recovery repairs it: the output is whole
    assert compare(read_output(out), failure_free(q, ds, 20 * ds.rows), q.schema).ok


def test_recovering_a_folder_that_does_not_exist_makes_nothing(tiny, tmp_path):
    q, ds = query("CM1", tiny)
    with pytest.raises(CheckpointError, match="holds no run to recover"):
        finish(q, ds, tmp_path / "typo", ClockedSink(tmp_path / "out"))
    assert not (tmp_path / "typo").exists()


def test_a_run_takes_the_storage_lock_before_it_writes_run_json(tiny, tmp_path):
    """Two fresh runs started together on one storage folder: the second is refused before
    it writes anything, so the first's run.json is never replaced by another's settings."""
    q, ds = query("CM1", tiny)
    store = tmp_path / "store"
    with BlockManager(store, SMALL):  # another engine holds the folder, before its run.json
        with pytest.raises(StorageLocked, match="storage folder .* in use"):
            run_fault_tolerant(q, ds, store, ClockedSink(tmp_path / "out"), CFG,
                               interval=None, max_tuples=ds.rows, layout=SMALL)
        assert not (store / "run.json").exists()
    r = run_fault_tolerant(q, ds, store, ClockedSink(tmp_path / "out"), CFG, interval=None,
                           max_tuples=ds.rows, layout=SMALL)  # free: it runs
    assert r.run.summary.tuples == ds.rows


class _SinkFailingToOpen(TransactionalSink):
    def open(self, schema) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_recovery_failing_after_the_sink_recovered_releases_the_output_folder(tiny, tmp_path):
    """The transactional sink locks its folder when it recovers it; a recovery that fails
    after that (the sink cannot open) releases it, as a failed run does: the next attempt in
    this process recovers, and the output is the failure-free one."""
    q, ds = query("CM1", tiny)
    store, out = tmp_path / "store", tmp_path / "out"
    stopped(q, ds, store, TransactionalSink(out), 9, every_tasks=4, max_tuples=20 * ds.rows)
    with pytest.raises(OSError, match="No space left"):
        finish(q, ds, store, _SinkFailingToOpen(out))
    finish(q, ds, store, TransactionalSink(out))
    assert compare(read_output(out), failure_free(q, ds, 20 * ds.rows), q.schema).ok


@pytest.mark.parametrize("kind", [ClockedSink, TransactionalSink])
def test_recovering_into_another_output_folder_is_refused_naming_the_runs_own(tiny, tmp_path,
                                                                            kind):
    """The run's results are in the folder it claimed: a recovery into another one had split
    them (clocked) or left an epoch in neither (transactional) and exited 0."""
    q, ds = query("CM1", tiny)
    store, out, other = tmp_path / "store", tmp_path / "out", tmp_path / "other"
    stopped(q, ds, store, kind(out), 9, every_tasks=4, max_tuples=20 * ds.rows)
    with pytest.raises(CheckpointError, match=f"results are in {out}, not in {other} .*: "
                                              f"recover with --output {out}"):
        finish(q, ds, store, kind(other))
    finish(q, ds, store, kind(out))
    assert compare(read_output(out), failure_free(q, ds, 20 * ds.rows), q.schema).ok


def test_recovering_into_an_emptied_output_folder_is_refused(tiny, tmp_path):
    q, ds = query("CM1", tiny)
    store, out = tmp_path / "store", tmp_path / "out"
    stopped(q, ds, store, ClockedSink(out), 9, every_tasks=4, max_tuples=20 * ds.rows)
    assert len(read_output(out))
    shutil.rmtree(out)
    with pytest.raises(CheckpointError, match="lost results .* recorded them up to .* as "
                                              "committed.*: emptied or replaced"):
        finish(q, ds, store, ClockedSink(out))


def test_a_moved_output_folder_recovers_and_a_new_run_claims_its_own(tiny, tmp_path):
    q, ds = query("CM1", tiny)
    store, out, moved = tmp_path / "store", tmp_path / "out", tmp_path / "moved"
    stopped(q, ds, store, TransactionalSink(out), 9, every_tasks=4, max_tuples=20 * ds.rows)
    token = json.loads((store / "run.json").read_text())["run_id"]
    assert owner_of(out) == token
    out.rename(moved)  # the folder is known by the run it holds, not by its path
    finish(q, ds, store, TransactionalSink(moved))
    assert compare(read_output(moved), failure_free(q, ds, 20 * ds.rows), q.schema).ok
    stopped(q, ds, tmp_path / "s2", TransactionalSink(tmp_path / "o2"), 2)  # another run's
    with pytest.raises(CheckpointError, match="holds another run's results"):
        finish(q, ds, store, TransactionalSink(tmp_path / "o2"))


def test_check_output_tells_a_killed_recovered_run_from_a_damaged_output(tiny, tmp_path):
    """``scabbard check output``: a run killed inside a checkpoint's commit has committed a
    prefix; recovered, exactly the failure-free output; an epoch file copied (every row
    twice) is a mismatch, exit 1.  A folder holding no run is one line, exit 2."""
    ds = tiny["cm"]
    store, out = tmp_path / "s", tmp_path / "o"
    base = [sys.executable, "-m", "scabbard", "run", "--query", "CM1", "--data", str(ds.path),
            "--storage", str(store), "--output", str(out), "--checkpoint-interval", "0.1",
            "--batch", "4000", "--max-tuples", str(18 * ds.rows), "--sink", "transactional",
            "--rate", str(6 * ds.rows), "--quiet"]  # paced: 3 s, ~30 checkpoints
    # (the third commit comes while input is still due however slowly a loaded machine
    # checkpoints: with 1 s of input a CI run once ended after two)
    check = [sys.executable, "-m", "scabbard", "check", "output", "--storage", str(store)]
    killed = subprocess.run(base + ["--crash-at", "checkpoint_commit:3"], capture_output=True,
                            text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr  # SIGKILLed itself inside the commit
    r = subprocess.run(check, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "has not consumed its input" in r.stdout, r.stdout + r.stderr
    assert "are a prefix of the failure-free output" in r.stdout
    again = subprocess.run(base + ["--recover"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    r = subprocess.run(check, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "exactly once" in r.stdout and " 0 lost" in r.stdout, r.stdout
    epochs = sorted((out / "committed").glob("*.seg"))
    shutil.copy(epochs[-1], epochs[-1].with_name(f"{len(epochs) + 1000:012d}.seg"))
    r = subprocess.run(check, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "MISMATCH" in r.stdout, r.stdout
    assert int(re.search(r"(\d+) duplicated", r.stdout).group(1)) > 0, r.stdout
    r = subprocess.run(check[:-1] + [str(tmp_path / "nothing")], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no run.json" in r.stderr


def test_a_task_size_beyond_a_pool_files_unit_recovers_with_the_size_it_was_started_with(
        tiny, tmp_path):
    """``--batch`` larger than a p-unit of the ingress's pool files: the run cuts its tasks to
    one, and a recovery given the same size cuts it the same way - not refused as another
    run's (RunMismatch: batch_rows 16384 recorded, 1048576 given) - and commits the
    failure-free output."""
    from scabbard.engine import EngineConfig
    from scabbard.ft.runfile import recorded_run

    q, ds = query("LRB1", tiny)
    n, store, out = 8 * ds.rows, tmp_path / "store", tmp_path / "out"
    cfg = EngineConfig(workers=2, batch_rows=1 << 20)
    runs = 0

    def run(**kw):
        nonlocal runs
        runs += 1
        run_fault_tolerant(q, ds, store, ClockedSink(out), cfg, interval=None, every_tasks=2,
                           layout=SMALL, wrap_source=lambda s: StopAfter(s, 5), **kw)

    run(max_tuples=n)
    cut = recorded_run(store)["batch_rows"]
    assert cut < 1 << 20 and n // cut > 10  # cut to a unit of a 1 MiB file: many tasks
    while not recorded_run(store).get("completed"):
        run(recover=True)
        assert runs < 30
    assert runs >= 3
    v = compare(read_output(out), failure_free(q, ds, n), q.schema)
    assert v.ok, v
