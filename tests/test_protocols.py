"""The checkpoint protocol and two-phase commit as units: numbered steps in order, guarded
against steps out of order, fail-stop, ids never reused - without an engine or Spark."""

from __future__ import annotations

import errno
import os
from concurrent.futures import Future

import numpy as np
import pytest
from ftkit import FailingIO

from scabbard.batch import Batch
from scabbard.ft.sinks import Epoch, TransactionalSink, read_output
from scabbard.pog.checkpoint import (
    CheckpointController,
    CheckpointError,
    CheckpointStore,
    DamagedCheckpoint,
    Due,
    FTOperator,
    InFlight,
    ProtocolError,
    Snapshot,
    Status,
    damaged_in,
)
from scabbard.schema import Field, Schema
from scabbard.storage import StorageError, StorageLocked

RESULTS = Schema("r", (Field("window_start", "int64"), Field("window_end", "int64"),
                       Field("n", "int64")), stream=False)


def results(lo: int, hi: int) -> Batch:
    we = np.arange(lo, hi, dtype=np.int64)
    return Batch(RESULTS, (we - 1, we, we * 10))


class Operator(FTOperator):
    """State that is a counter; its checkpoint is one p-unit, acknowledged at once (or not)."""

    def __init__(self, fail_write: bool = False):
        super().__init__()
        self.seq, self.fail_write = -1, fail_write

    def prepare_checkpoint(self, marker):
        return Snapshot(self.seq, 100 * (self.seq + 1), {}, [], {"id": marker.checkpoint_id})

    def checkpoint(self, snap):
        f = Future()
        if self.fail_write:
            f.set_exception(OSError(errno.EIO, "I/O error"))
        else:
            f.set_result(1)
        return [{"stream": "s", "first": snap.seq, "end": snap.seq + 1}], [f], 8


def controller(tmp_path, sink=None, op=None, **kw):
    released, trimmed = [], []
    c = CheckpointController(CheckpointStore(tmp_path / "ck"), op or Operator(), Due(None),
                             sink=sink, release=released.append, trim_state=trimmed.append, **kw)
    return c, released, trimmed


def checkpoint(c: CheckpointController, op: Operator, seq: int) -> int:
    """One task with a checkpoint marker, assembled; the marker passes the sink."""
    c.request()
    m = c.marker()
    op.seq = seq
    c.cut(m.checkpoint_id)
    c.on_marker(m)
    assert c.wait_idle(30)
    return m.checkpoint_id


def test_the_steps_are_taken_in_order_and_gc_waits_for_a_second_record(tmp_path):
    op = Operator()
    c, released, trimmed = controller(tmp_path, op=op)
    first = checkpoint(c, op, 4)
    assert [s for i, s in c.trace if i == first] == [
        Status.MARKED, Status.SNAPSHOTTED, Status.STATE_WRITTEN, Status.PREPARED,
        Status.RECORDED, Status.COMMITTED, Status.RELEASED]
    assert released == [] and trimmed == []  # one record: nothing older to fall back to
    checkpoint(c, op, 9)
    assert [r.input_end for r in released] == [500]  # below the older record
    assert [r.id for r in c.store.records()] == [first + 1, first]
    c.stop()


def test_a_failed_state_write_fails_the_checkpoint_and_stops_the_run(tmp_path):
    op = Operator(fail_write=True)
    c, released, _ = controller(tmp_path, op=op)
    c.request()
    m = c.marker()
    c.cut(m.checkpoint_id)
    c.on_marker(m)
    assert c.wait_idle(30)
    assert c.trace[-1] == (m.checkpoint_id, Status.FAILED)
    with pytest.raises(CheckpointError, match="checkpoint 1 failed.*I/O error"):
        c.marker()  # fail-stop: the next task does not run unprotected
    assert not c.store.records() and released == []
    c.stop(wait=False)


def test_a_checkpoint_snapshotted_before_the_sink_was_cut_fails_stop(tmp_path):
    c, _, _ = controller(tmp_path)
    c.request()
    m = c.marker()
    c.on_marker(m)  # every operator took the marker, but it never passed the sink
    assert c.trace[-1] == (m.checkpoint_id, Status.FAILED)
    with pytest.raises(CheckpointError, match="before the sink was cut"):
        c.marker()
    c.stop(wait=False)


def test_a_step_out_of_order_is_refused():
    f = InFlight(3)
    f.advance(Status.SNAPSHOTTED)
    with pytest.raises(ProtocolError, match="SNAPSHOTTED -> RECORDED"):
        f.advance(Status.RECORDED)
    f.advance(Status.FAILED)
    with pytest.raises(ProtocolError):
        f.advance(Status.STATE_WRITTEN)


def test_ids_are_never_reused_not_even_those_of_damaged_records(tmp_path):
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "ckpt-00000007.json").write_text("{ torn")
    sink = TransactionalSink(tmp_path / "out")
    (tmp_path / "out" / "committed").mkdir(parents=True)
    (tmp_path / "out" / "committed" / f"{9:012d}.seg").write_bytes(b"")
    c, _, _ = controller(tmp_path, sink=sink)
    assert c.next_id == 10  # above the damaged record 7 and the sink's epoch 9
    c.stop(wait=False)


def test_a_record_marked_damaged_stays_marked_until_gc_removes_both(tmp_path):
    """A recovery that found a record's state damaged marks it; the mark is durable (a new
    store on the folder sees it), the record itself stays, GC keeps the 3 newest records a
    recovery may use (marked ones not counted) and removes a record and its mark together."""
    c, _, _ = controller(tmp_path)
    op = c.operator
    ids = [checkpoint(c, op, seq) for seq in range(3)]
    c.store.mark_damaged(ids[0], "corrupt segment at byte 4096")
    again = CheckpointStore(tmp_path / "ck")
    assert again.damaged(ids[0]) == "corrupt segment at byte 4096"
    assert again.damaged(ids[1]) is None
    assert [r.id for r in again.records()] == ids[::-1]
    c.store.mark_damaged(ids[2], "checksum mismatch")  # marked ones are not counted
    ids.append(checkpoint(c, op, 3))
    assert [r.id for r in again.records()] == ids[::-1]
    ids.append(checkpoint(c, op, 4))  # 3 usable beside: the oldest goes, its mark with it
    assert [r.id for r in again.records()] == ids[:0:-1] and again.damaged(ids[0]) is None
    assert again.damaged(ids[2]) == "checksum mismatch"
    c.stop()


def test_two_readers_marking_one_records_damage_at_once_keep_the_first_reason(tmp_path):
    """A recovery's read-ahead and its verification find the same damaged unit together:
    the second mark, made while the first one's file is being renamed into place, neither
    fails (both wrote the one temporary file: the second rename found it gone) nor replaces
    the first one's reason."""
    import threading

    from scabbard.storage.fileio import FileIO

    first_renaming, second_done = threading.Event(), threading.Event()

    class Pausing(FileIO):  # the first mark's rename waits for the second mark
        def replace(self, src, dst):
            if not first_renaming.is_set():
                first_renaming.set()
                second_done.wait(timeout=2)  # (with the mark serialised it never comes)
            super().replace(src, dst)

    store = CheckpointStore(tmp_path / "ck", io=Pausing())
    errors = []

    def second():
        first_renaming.wait()
        try:
            store.mark_damaged(7, "found by the verification")
        except Exception as e:  # noqa: BLE001 - the failure is what is checked
            errors.append(e)
        second_done.set()

    t = threading.Thread(target=second)
    t.start()
    store.mark_damaged(7, "found by the read-ahead")
    t.join()
    assert errors == [] and store.damaged(7) == "found by the read-ahead"


def test_damage_found_behind_a_run_is_found_through_the_errors_that_wrap_it():
    cause = DamagedCheckpoint(12, "checksum mismatch")
    assert str(cause) == "checkpoint 12's state is damaged (checksum mismatch)"
    try:
        try:
            raise cause
        except DamagedCheckpoint as e:
            raise CheckpointError("checkpoint 13 failed") from e
    except CheckpointError as wrapped:
        assert damaged_in(wrapped) is cause
    assert damaged_in(CheckpointError("a full disk")) is None
    assert damaged_in(None) is None


def _sink(tmp_path, io=None) -> TransactionalSink:
    s = TransactionalSink(tmp_path / "out")
    if io is not None:
        from scabbard.storage import Durability
        s.bind(io, Durability.MACHINE)
    s.open(RESULTS)
    return s


def test_two_phase_commit_makes_an_epoch_visible_only_at_commit(tmp_path):
    s = _sink(tmp_path)
    s.write_clocked(results(1, 5), {"input_end": 10, "window_end": 4})
    s.cut(1)
    s.write_clocked(results(5, 7), {"input_end": 20, "window_end": 6})  # the next epoch
    s.prepare(1)
    assert s.epochs[1] is Epoch.PREPARED and len(read_output(tmp_path / "out")) == 0
    s.commit(1)
    assert s.epochs[1] is Epoch.COMMITTED
    assert list(read_output(tmp_path / "out")["window_end"]) == [1, 2, 3, 4]
    assert s.committed() == {"input_end": 10, "window_end": 4}
    s.finish(2)
    assert list(read_output(tmp_path / "out")["window_end"]) == [1, 2, 3, 4, 5, 6]


def test_two_phase_commit_steps_out_of_order_are_refused(tmp_path):
    s = _sink(tmp_path)
    with pytest.raises(ProtocolError, match="epoch 1: unknown -> COMMITTED"):
        s.commit(1)
    s.cut(1)
    with pytest.raises(ProtocolError, match="epoch 1: CUT -> COMMITTED"):
        s.commit(1)
    with pytest.raises(ProtocolError, match="epoch 1: CUT -> CUT"):
        s.cut(1)
    s.prepare(1)
    s.commit(1)
    with pytest.raises(ProtocolError, match="COMMITTED -> PREPARED"):
        s.prepare(1)


def test_a_failed_prepare_keeps_the_epoch_staged_and_a_retry_commits_it_whole(tmp_path):
    io = FailingIO(lambda path, pos, bufs: ".tmp" in path and "pending" in path,
                   err=errno.ENOSPC)
    s = _sink(tmp_path, io)
    s.write_clocked(results(1, 4), {"input_end": 10, "window_end": 3})
    s.cut(1)
    with pytest.raises(OSError, match="No space left"):
        s.prepare(1)
    assert s.epochs[1] is Epoch.CUT and not list((tmp_path / "out" / "pending").iterdir())
    s.prepare(1)  # the disk has room again
    s.commit(1)
    assert list(read_output(tmp_path / "out")["window_end"]) == [1, 2, 3]


def test_recovery_rolls_decided_epochs_forward_and_never_replaces_a_committed_one(tmp_path):
    s = _sink(tmp_path)
    for e in (1, 2, 3):
        s.write_clocked(results(10 * e, 10 * e + 2), {"input_end": e, "window_end": 10 * e + 1})
        s.cut(e)
        s.prepare(e)
    s.commit(1)
    s.close()  # the run died here: its process's lock on the folder went with it
    committed = (tmp_path / "out" / "committed" / f"{1:012d}.seg").read_bytes()
    (tmp_path / "out" / "pending" / f"{1:012d}.seg").write_bytes(b"stale")  # a leftover
    again = TransactionalSink(tmp_path / "out")
    again.recover(decided=2)  # record 2 was written, record 3 was not
    assert (tmp_path / "out" / "committed" / f"{1:012d}.seg").read_bytes() == committed
    assert sorted(p.name for p in (tmp_path / "out" / "committed").iterdir()) == [
        f"{1:012d}.seg", f"{2:012d}.seg"]
    assert not list((tmp_path / "out" / "pending").iterdir())
    assert again.highest_epoch() == 2


def test_a_second_sink_on_a_transactional_output_folder_is_refused(tmp_path):
    """Another run (another storage folder) on the same output folder is refused, at recovery
    and at the start: it had written its epochs among the first run's."""
    s = _sink(tmp_path)
    s.write_clocked(results(1, 4), {"input_end": 10, "window_end": 3})
    other = TransactionalSink(tmp_path / "out")
    with pytest.raises(StorageLocked, match=f"output folder .* in use .*pid {os.getpid()}"):
        other.open(RESULTS)
    with pytest.raises(StorageLocked, match="output folder"):
        other.recover(decided=0)
    s.cut(1)  # the owner is unaffected
    s.prepare(1)
    s.commit(1)
    s.close()
    other.open(RESULTS)  # free again once the owner closed it
    other.close()
    assert list(read_output(tmp_path / "out")["window_end"]) == [1, 2, 3]


def test_committing_a_prepared_epoch_whose_file_is_gone_fails(tmp_path):
    s = _sink(tmp_path)
    s.cut(1)  # an epoch without results writes nothing and commits nothing, silently
    s.prepare(1)
    s.commit(1)
    s.write_clocked(results(1, 4), {"input_end": 10, "window_end": 3})
    s.cut(2)
    s.prepare(2)
    (tmp_path / "out" / "pending" / f"{2:012d}.seg").unlink()
    with pytest.raises(StorageError, match="is gone: epoch 2's results were prepared"):
        s.commit(2)

