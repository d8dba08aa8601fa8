"""Asynchronous checkpoints: ft-operators, the checkpoint controller and its records.

Paper §3.2, Alg. 1 and Table 1; docs/design.md.

* :class:`FTOperator` - an operator whose state can be cut into immutable
  p-units (``prepare_checkpoint`` snapshots references at a marker, cheaply, on
  the thread that owns the state; ``checkpoint`` serialises and writes them
  later, on the I/O pools), restored (``load_state``) and whose progress
  vectors ``PV_in``/``PV_out`` say which input and output it reflects.
* :class:`CheckpointController` - injects checkpoint markers every
  ``interval`` seconds, every ``every_tasks`` tasks, or on demand; with one
  checkpoint in flight at a time it runs the checkpoint protocol below.
* :class:`CheckpointStore` - the records: ``<storage>/checkpoints/ckpt-<id>.json``,
  written to a temporary file, (flushed,) renamed, (directory flushed); a record
  carries its own checksum, so a torn or edited one is skipped, loudly.

The checkpoint protocol, for checkpoint ``N`` (one in flight at a time):

1. **marker** - the dispatcher attaches the marker to the next task; ``N`` is new:
   ids are never reused, not even those of records that are damaged
   (:meth:`CheckpointStore.highest_id`) or of epochs a sink holds.
2. **snapshot** - the marker travels with the data: the windows take it when its task is
   assembled, every operator above them when it came on all its inputs (Alg. 1), and when
   it passes the sink, the sink's open epoch is cut (:meth:`CheckpointController.cut`);
   once every operator's state was captured by reference (``prepare_checkpoint``), the
   checkpoint is snapshotted (:meth:`CheckpointController.on_marker`).
3. **state write** - the snapshot is written as state p-units, asynchronously.
4. **prepare** - once every state p-unit is acknowledged, the sink makes the
   epoch's output durable but invisible (phase 1 of two-phase commit).
5. **record** - the :class:`CheckpointRecord` is written atomically: the decision.
6. **commit** - the sink makes the epoch visible (phase 2).
7. **release** - only now is older data given up: input, persisted channels and state
   below the older of the two newest records recovery could use (``release(record)`` sends
   the release markers upstream; ``trim_state`` trims the state p-streams).  After a fallback recovery the
   record resumed from is the older one, so nothing a fallback needs is released;
   with a single record nothing is released.

A failure in any step - a write that fails, a full disk, an exception in a
callback, a dead timer - is **fail-stop**: the controller keeps the error and the
run stops at the next task with it (:meth:`CheckpointController.check`); it never
continues unprotected.  Nothing committed is lost: recovery resumes from the last
record and the epoch is produced again.
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from scabbard import timers
from scabbard.errors import Failure
from scabbard.faults import crashpoint
from scabbard.pog.markers import Marker, MarkerKind
from scabbard.storage.fileio import OS, Durability, FileIO, write_atomic, write_new

log = logging.getLogger(__name__)


class CheckpointError(Failure, RuntimeError):
    """No usable checkpoint, or one that cannot be written."""


class ProtocolError(CheckpointError):
    """A step taken out of its order: a bug, never a condition to recover from."""


class DamagedCheckpoint(CheckpointError):
    """A recovery resumed from checkpoint ``cid``, then found state it lists damaged (state
    read lazily, as the run needs it): the record is marked (:meth:`CheckpointStore.
    mark_damaged`) before this is raised, so the next recovery falls back past it."""

    def __init__(self, cid: int, why: str):
        super().__init__(f"checkpoint {cid}'s state is damaged ({why})")
        self.cid = cid


def damaged_in(err: BaseException | None) -> DamagedCheckpoint | None:
    """The :class:`DamagedCheckpoint` ``err`` is or was raised from (a failed checkpoint
    wraps it as its cause), if any - not one it was merely raised while handling."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, DamagedCheckpoint):
            return err
        seen.add(id(err))
        err = err.__cause__
    return None


class Status(enum.Enum):
    """Where checkpoint ``N`` is in the protocol (the module's numbered steps)."""

    MARKED = 1
    SNAPSHOTTED = 2
    STATE_WRITTEN = 3
    PREPARED = 4
    RECORDED = 5
    COMMITTED = 6
    RELEASED = 7
    FAILED = 0


@dataclass
class InFlight:
    """The checkpoint in flight and its status, guarded against a step out of order."""

    id: int
    status: Status = Status.MARKED

    def advance(self, to: Status) -> None:
        ok = (self.status not in (Status.RELEASED, Status.FAILED)) and (
            to is Status.FAILED or to.value == self.status.value + 1)
        if not ok:
            raise ProtocolError(f"checkpoint {self.id}: step {self.status.name} -> {to.name} "
                                f"is out of order")
        self.status = to


class TwoPhaseSink(Protocol):
    """What the controller asks of the output (every exactly-once sink; most steps are no-ops
    for the clocked sink, which only flushes at ``prepare``)."""

    def cut(self, epoch: int) -> None: ...

    def prepare(self, epoch: int) -> None: ...

    def commit(self, epoch: int) -> None: ...

    def finish(self, epoch: int) -> None: ...

    def highest_epoch(self) -> int: ...


@dataclass(frozen=True)
class CheckpointRecord:
    """What one complete checkpoint holds (the manifest)."""

    id: int
    seq: int  # the last task whose effects it holds
    input_end: int  # PV_in: ingress offset one past that task
    output: dict  # PV_out: the sink's committed clock at the cut
    state: list  # per state p-stream: {"stream", "first", "end"} offsets of its p-units
    operator: dict  # operator-specific scalars (last pane, last event time, ...)
    bytes: int  # state bytes written
    started: float  # time.time() of the marker
    completed: float  # time.time() of the record

    @property
    def duration_s(self) -> float:
        return self.completed - self.started


class CheckpointStore:
    """The folder of checkpoint records, newest last; keeps the ``keep`` newest."""

    def __init__(self, path: str | Path, keep: int = 3, io: FileIO = OS,
                 durability: Durability = Durability.MACHINE):
        self.path = Path(path)
        self.io, self.durability = io, durability
        fresh = not self.path.is_dir()
        io.mkdir(self.path)
        if fresh and durability.flush:
            io.fsync_dir(self.path.parent)
        self.keep = keep
        self._marking = threading.Lock()  # (two readers may find one record's damage at once)

    def _file(self, cid: int) -> Path:
        return self.path / f"ckpt-{cid:08d}.json"

    def _files(self) -> list[Path]:
        """The record files, oldest first - by the id they name, not by the name: from id
        10^8 on the name is wider than its 8 padded digits and would sort first."""
        return sorted((p for p in self.path.glob("ckpt-*.json") if p.stem[5:].isdigit()),
                      key=lambda p: int(p.stem[5:]))

    def record(self, rec: CheckpointRecord) -> None:
        body = json.dumps(asdict(rec), sort_keys=True)
        text = json.dumps({"record": json.loads(body), "crc32": zlib.crc32(body.encode())})
        tmp = self.path / f".ckpt-{rec.id:08d}.tmp"
        write_new(self.io, tmp, text.encode(), self.durability)
        crashpoint("checkpoint_record")
        self.io.replace(tmp, self._file(rec.id))
        if self.durability.flush:
            self.io.fsync_dir(self.path)
        # the ``keep`` newest records a recovery may use, and any marked one among them
        usable = [int(p.stem[5:]) for p in self._files()
                  if not self._damage_file(int(p.stem[5:])).exists()]
        for old in self._files():
            cid = int(old.stem[5:])
            if len(usable) >= self.keep and cid < usable[-self.keep]:
                self.io.unlink(old, missing_ok=True)
                self.io.unlink(self._damage_file(cid), missing_ok=True)

    def _damage_file(self, cid: int) -> Path:
        return self.path / f"damaged-{cid:08d}.txt"

    def mark_damaged(self, cid: int, why: str) -> None:
        """Record ``cid`` is not to be recovered from again (a recovery found its state
        damaged after resuming from it): a file beside it, written durably - the record
        itself stays (the sink's committed epochs are named by the newest record).  Once:
        a second reader finding the same damage (the recovery's read-ahead, its compaction
        and its verification read the same units) keeps the first one's reason - both
        writing the one temporary file, the second's rename found it gone."""
        with self._marking:
            if self._damage_file(cid).exists():
                return
            write_atomic(self.io, self._damage_file(cid), why.encode(), self.durability)

    def damaged(self, cid: int) -> str | None:
        """Why record ``cid`` was marked damaged, or None."""
        try:
            return self._damage_file(cid).read_text()
        except FileNotFoundError:
            return None

    def highest_id(self) -> int:
        """The highest id any record file carries, readable or not (ids are never reused)."""
        return max((int(p.stem[5:]) for p in self._files()), default=0)

    def records(self) -> list[CheckpointRecord]:
        """Every readable record, newest first; damaged ones are logged and skipped."""
        out = []
        for p in reversed(self._files()):
            try:
                doc = json.loads(p.read_text())
                body = json.dumps(doc["record"], sort_keys=True)
                if zlib.crc32(body.encode()) != doc["crc32"]:
                    raise ValueError("checksum mismatch")
                rec = CheckpointRecord(**doc["record"])
                if rec.id != int(p.stem[5:]):
                    raise ValueError(f"holds checkpoint {rec.id}")
                out.append(rec)
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                log.warning("checkpoint record %s is damaged (%s): skipped", p, e)
        return out

    def latest_id(self) -> int:
        """The id of the newest *readable* record (0: none)."""
        recs = self.records()
        return recs[0].id if recs else 0


@dataclass
class Snapshot:
    """What ``prepare_checkpoint`` captured at the marker (references to immutable data)."""

    seq: int
    input_end: int
    output: dict
    parts: list  # operator-specific: what checkpoint() serialises
    operator: dict


class FTOperator:
    """An operator with checkpointable state (paper Table 1).

    Subclasses implement :meth:`prepare_checkpoint`, :meth:`checkpoint` and
    :meth:`load_state`.  ``pv_in``/``pv_out`` are its progress vectors: the input
    offset and the output clock its state reflects.
    """

    def __init__(self):
        self.pv_in = 0
        self.pv_out: dict = {}
        self.dependencies: list = []
        self.acked = 0  # the newest checkpoint recorded with this operator's state

    def prepare_checkpoint(self, marker: Marker) -> Snapshot:
        raise NotImplementedError

    def checkpoint(self, snap: Snapshot) -> tuple[list[dict], list[Future], int]:
        """Write the snapshot as state p-units; ((stream, first, end) per part, futures, bytes)."""
        raise NotImplementedError

    def load_state(self, rec: CheckpointRecord) -> None:
        raise NotImplementedError

    def set_dependencies(self, deps: list) -> None:
        self.dependencies = list(deps)

    def latest_offsets(self) -> tuple[int, dict]:
        return self.pv_in, dict(self.pv_out)

    def send_ack(self, checkpoint_id: int) -> None:
        """The controller recorded checkpoint ``checkpoint_id``: its state is now durable."""
        self.acked = checkpoint_id


@dataclass
class CheckpointStats:
    completed: list = field(default_factory=list)  # CheckpointRecord


@dataclass(frozen=True)
class Due:
    """When a checkpoint is due: every ``interval`` seconds (None: not on a timer) and every
    ``every_tasks`` tasks (deterministic markers; None: not by tasks)."""

    interval: float | None = 1.0
    every_tasks: int | None = None

    def __post_init__(self) -> None:
        if self.interval is not None and not 0 < self.interval <= threading.TIMEOUT_MAX:
            raise CheckpointError(f"checkpoint interval must be in (0, {threading.TIMEOUT_MAX:g}] "
                                  f"seconds, got {self.interval}")
        if self.every_tasks is not None and self.every_tasks < 1:
            raise CheckpointError(f"every_tasks must be >= 1, got {self.every_tasks}")


class CheckpointController:
    """Markers every ``interval`` seconds (and/or every ``every_tasks`` tasks), one checkpoint
    in flight, atomic records; the protocol is the module's.

    ``resumed``: the record recovery resumed from (None for a fresh run, or a recovery that
    found none): GC keeps what it needs until a newer record exists beside the new one.
    ``release(record)`` and ``trim_state(parts)`` give up the input and channels that
    ``record`` no longer needs, and the state p-units below it;
    ``sink`` may implement ``cut(id)``/``prepare(id)``/``commit(id)`` (two-phase commit),
    ``highest_epoch()`` (epochs it already holds: their ids are never handed out again) and
    ``finish(id)`` (the end of the stream: the rest of the output committed as epoch ``id``).
    """

    def __init__(self, store: CheckpointStore, operator: FTOperator, due: Due = Due(),
                 sink: TwoPhaseSink | None = None,
                 release: Callable[[CheckpointRecord], None] | None = None,
                 trim_state: Callable[[list], None] | None = None, on_event=None,
                 resumed: CheckpointRecord | None = None):
        self.store, self.operator = store, operator
        self.interval, self.every_tasks = due.interval, due.every_tasks
        self.sink, self.release, self.trim_state = sink, release, trim_state
        self.on_event = on_event or (lambda name, **kw: None)
        self.stats = CheckpointStats()
        # Step 1's rule: never an id that any record file or sink epoch already carries
        epochs = self.sink.highest_epoch() if self.sink is not None else 0
        self.next_id = max(store.highest_id(), epochs) + 1
        self.error: BaseException | None = None
        self.running: Callable[[], bool] = lambda: True  # set by the run: False once it failed
        self._requested = False
        self._tasks = 0
        self._cut: int | None = None  # the checkpoint whose epoch the sink cut
        self.current: InFlight | None = None  # the checkpoint in flight
        self.trace: deque[tuple[int, Status]] = deque(maxlen=256)  # the steps taken, in order
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        self._history = [resumed] if resumed is not None else []  # usable records, for GC
        self._exec = ThreadPoolExecutor(1, thread_name_prefix="checkpoint")  # record + commit

    # -- fail-stop ---------------------------------------------------------------------------
    def _fail(self, err: BaseException, cid: int | None = None) -> None:
        """Any failure of the machinery: keep the first error; the run stops at the next task."""
        what = f"checkpoint {cid}" if cid is not None else "fault tolerance"
        log.info("%s failed: %s", what, err)
        with self._lock:
            if self.error is None:
                self.error = CheckpointError(
                    f"{what} failed: {err}; the run stopped so as never to continue "
                    f"unprotected (nothing committed is lost: continue it with --recover)")
                self.error.__cause__ = err
            if self.current is not None and self.current.status is not Status.FAILED:
                self.current.status = Status.FAILED
                self.trace.append((self.current.id, Status.FAILED))
            self.current = None
            self._idle.notify_all()
        with contextlib.suppress(Exception):  # already failing: the error above is what counts
            self.on_event("checkpoint_failed", id=cid, error=repr(err))

    def check(self) -> None:
        """Raise the machinery's error, if any (the dispatcher calls this before each task)."""
        if self.error is not None:
            raise self.error

    # -- markers (Step 1) ----------------------------------------------------------------------
    def start(self) -> None:
        if self.interval:
            self._timer = threading.Thread(target=self._tick, name="checkpoint-timer", daemon=True)
            self._timer.start()

    def _tick(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                self.request()
        except BaseException as e:  # noqa: BLE001 - a dead timer would stop checkpoints silently
            self._fail(e)

    def request(self) -> None:
        """Ask for a checkpoint at the next task boundary (on demand, or from the timer)."""
        with self._lock:
            self._requested = True

    def marker(self) -> Marker | None:
        """Called by the dispatcher before each task: a checkpoint marker, if one is due.
        Raises the machinery's error once it failed (fail-stop).

        Every ``every_tasks``-th task gets a marker, always: if the previous checkpoint is
        still in flight, this waits for it (while the run is :attr:`running`), so checkpoints
        fall on the same tasks on any machine."""
        running = self.running
        self.check()
        with self._lock:
            self._tasks += 1
            if self.every_tasks and self._tasks % self.every_tasks == 0:
                self._requested = True
                while self.current is not None and self.error is None and running():
                    self._idle.wait(0.05)
            if self.error is not None:
                raise self.error
            if not self._requested or self.current is not None:
                return None
            self._requested = False
            self.current = InFlight(self.next_id)
            self.trace.append((self.current.id, Status.MARKED))
            self.next_id += 1
            return Marker(MarkerKind.CHECKPOINT, "input", checkpoint_id=self.current.id)

    def abandon(self, cid: int) -> None:
        """Checkpoint ``cid``'s marker was handed out but reached nothing: its task had no
        tuples and none came after it before the run ended.  Nothing of it was taken (not
        even the sink's cut), so it is simply no longer in flight; its id is not reused."""
        with self._lock:
            cur = self.current
            if cur is None or cur.id != cid or cur.status is not Status.MARKED \
                    or self._cut == cid:
                raise ProtocolError(f"checkpoint {cid} cannot be abandoned: it is "
                                    f"{'not in flight' if cur is None or cur.id != cid else cur.status.name}")
            self.current = None
            self.trace.append((cid, Status.FAILED))
            self._idle.notify_all()

    def _step(self, cid: int, to: Status) -> None:
        """Checkpoint ``cid`` took step ``to`` (raises ProtocolError if out of order)."""
        with self._lock:
            cur = self.current
            if cur is None or cur.id != cid:
                raise ProtocolError(f"checkpoint {cid} took step {to.name}, but "
                                    f"{'none' if cur is None else cur.id} is in flight")
            cur.advance(to)
            self.trace.append((cid, to))

    def allocate_id(self) -> int:
        """A fresh id outside the checkpoint sequence (e.g. the final epoch of a sink)."""
        with self._lock:
            cid = self.next_id
            self.next_id += 1
            return cid

    # -- Alg. 1: the marker reached the operators and the sink -----------------------------------
    def cut(self, cid: int) -> None:
        """Step 2, at the sink: the marker of checkpoint ``cid`` passed it; what it wrote so
        far is the checkpoint's epoch."""
        try:
            with self._lock:
                cur = self.current
                if cur is None or cur.id != cid or cur.status is not Status.MARKED \
                        or self._cut == cid:
                    raise ProtocolError(f"checkpoint {cid}: the sink's cut is out of order")
            if self.sink is not None:
                self.sink.cut(cid)
            self._cut = cid
        except BaseException as e:  # noqa: BLE001
            self._fail(e, cid)

    def on_marker(self, marker: Marker) -> None:
        """Called when every operator took ``marker`` and the sink was cut."""
        cid = marker.checkpoint_id
        started = time.time()
        try:
            # Step 2: every part snapshotted by reference, the sink's epoch cut
            if self._cut != cid:
                raise ProtocolError(f"checkpoint {cid}: snapshotted before the sink was cut")
            snap = self.operator.prepare_checkpoint(marker)
            self._step(cid, Status.SNAPSHOTTED)
            # Step 3: the state p-units, written asynchronously
            parts, futures, nbytes = self.operator.checkpoint(snap)
        except BaseException as e:  # noqa: BLE001
            self._fail(e, cid)
            return
        crashpoint("checkpoint_state")
        pending = [len(futures)]
        errors: list[BaseException] = []

        def done(f: Future) -> None:
            if f.exception() is not None:
                errors.append(f.exception())
            with self._lock:
                pending[0] -= 1
                last = pending[0] == 0
            if last:
                if errors:
                    self._fail(errors[0], cid)
                else:
                    self._submit(cid, snap, parts, nbytes, started)

        if not futures:
            self._submit(cid, snap, parts, nbytes, started)
        for f in futures:
            f.add_done_callback(done)

    def _submit(self, cid: int, snap: Snapshot, parts: list, nbytes: int, started: float) -> None:
        try:
            self._exec.submit(self._complete, cid, snap, parts, nbytes, started)
        except RuntimeError as e:  # the executor was shut down (the run is stopping)
            self._fail(e, cid)

    def _complete(self, cid: int, snap: Snapshot, parts: list, nbytes: int,
                  started: float) -> None:
        span = timers.start()
        try:
            self._step(cid, Status.STATE_WRITTEN)  # every state p-unit acknowledged
            # Step 4: phase 1 - the epoch's output durable, not visible
            if self.sink is not None:
                self.sink.prepare(cid)
            self._step(cid, Status.PREPARED)
            # Step 5: the decision
            rec = CheckpointRecord(cid, snap.seq, snap.input_end, snap.output, parts,
                                   snap.operator, nbytes, started, time.time())
            self.store.record(rec)
            self._step(cid, Status.RECORDED)
            crashpoint("checkpoint_commit")
            # Step 6: phase 2 - visible
            if self.sink is not None:
                self.sink.commit(cid)
            self._step(cid, Status.COMMITTED)
            self.stats.completed.append(rec)
            self.operator.send_ack(cid)
            # Step 7: GC below the older of the two newest usable records
            self._history = (self._history + [rec])[-2:]
            if len(self._history) == 2:
                oldest = self._history[0]
                if self.release is not None:
                    self.release(oldest)
                if self.trim_state is not None:
                    self.trim_state(oldest.state)
            self._step(cid, Status.RELEASED)
            self.on_event("checkpoint", id=cid, state_bytes=nbytes,
                          duration_ms=round(rec.duration_s * 1e3, 2), input_end=snap.input_end,
                          state_rows={p["stream"]: p["end"] - p["first"] for p in parts},
                          **snap.operator.get("written", {}))
        except BaseException as e:  # noqa: BLE001
            self._fail(e, cid)
            return
        finally:
            timers.stop(span, "checkpoint", 0)
        with self._lock:
            self.current = None
            self._idle.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        with self._lock:
            return self._idle.wait_for(lambda: self.current is None, timeout)

    def stop(self, wait: bool = True) -> None:
        """No more markers.  With ``wait`` (the end of a run): let the checkpoint in flight
        complete, let the sink commit the rest of its output as a last epoch of its own, and
        raise the machinery's error if it failed.  Without: just stop (the run failed)."""
        self._stop.set()
        if self._timer is not None:
            self._timer.join()
        with self._lock:
            self._requested = False
        if not wait:
            self._exec.shutdown(wait=False)
            return
        if not self.wait_idle(600):
            self._fail(TimeoutError("the checkpoint in flight did not complete in 600 s"))
        self._exec.shutdown(wait=True)
        self.check()
        if self.sink is not None:
            try:
                self.sink.finish(self.allocate_id())
            except BaseException as e:  # noqa: BLE001
                self._fail(e)
        self.check()
