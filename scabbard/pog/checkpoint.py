"""Asynchronous checkpoints: ft-operators, the checkpoint controller and its records.

Paper §3.2, Alg. 1 and Table 1; DESIGN.md §6-7.

* :class:`FTOperator` - an operator whose state can be cut into immutable
  p-units (``prepare_checkpoint`` snapshots references at a marker, cheaply, on
  the thread that owns the state; ``checkpoint`` serialises and writes them
  later, on the I/O pools), restored (``load_state``) and whose progress
  vectors ``PV_in``/``PV_out`` say which input and output it reflects.
* :class:`CheckpointController` - injects checkpoint markers every
  ``interval`` seconds (or on demand); with one checkpoint in flight at a
  time it tracks the asynchronous state writes, then commits the output
  (two-phase: ``prepare`` before, ``commit`` after the record) and writes the
  :class:`CheckpointRecord` atomically.  Input before the older of the two
  newest records is released (GC), so recovery can fall back one checkpoint
  if the newest turns out to be damaged.
* :class:`CheckpointStore` - the records: ``<storage>/checkpoints/ckpt-<id>.json``,
  written to a temporary file, fsynced, renamed, directory fsynced; a record
  carries its own checksum, so a torn or edited one is skipped, loudly.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import zlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from scabbard.data.format import fsync_dir
from scabbard.faults import crashpoint
from scabbard.pog.markers import Marker, MarkerKind

log = logging.getLogger(__name__)


class CheckpointError(RuntimeError):
    """No usable checkpoint, or one that cannot be written."""


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

    def __init__(self, path: str | Path, keep: int = 3):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.keep = keep

    def _file(self, cid: int) -> Path:
        return self.path / f"ckpt-{cid:08d}.json"

    def record(self, rec: CheckpointRecord) -> None:
        body = json.dumps(asdict(rec), sort_keys=True)
        text = json.dumps({"record": json.loads(body), "crc32": zlib.crc32(body.encode())})
        tmp = self.path / f".ckpt-{rec.id:08d}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, text.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        crashpoint("checkpoint_record")
        os.replace(tmp, self._file(rec.id))
        fsync_dir(self.path)
        for old in sorted(self.path.glob("ckpt-*.json"))[:-self.keep]:
            old.unlink(missing_ok=True)

    def records(self) -> list[CheckpointRecord]:
        """Every readable record, newest first; damaged ones are logged and skipped."""
        out = []
        for p in sorted(self.path.glob("ckpt-*.json"), reverse=True):
            try:
                doc = json.loads(p.read_text())
                body = json.dumps(doc["record"], sort_keys=True)
                if zlib.crc32(body.encode()) != doc["crc32"]:
                    raise ValueError("checksum mismatch")
                out.append(CheckpointRecord(**doc["record"]))
            except (OSError, ValueError, KeyError, TypeError) as e:
                log.warning("checkpoint record %s is damaged (%s): skipped", p, e)
        return out

    def latest_id(self) -> int:
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
    failed: int = 0


class CheckpointController:
    """Markers every ``interval`` seconds, one checkpoint in flight, atomic records.

    ``release(input_offset)`` is called after each record with the offset below
    which input is no longer needed (the older of the two newest checkpoints).
    ``sink`` may implement ``prepare(id)``/``commit(id)`` (two-phase commit).
    """

    def __init__(self, store: CheckpointStore, operator: FTOperator, interval: float | None = 1.0,
                 sink=None, release: Callable[[int], None] | None = None,
                 trim_state: Callable[[list], None] | None = None, on_event=None):
        self.store, self.operator, self.interval = store, operator, interval
        self.sink, self.release, self.trim_state = sink, release, trim_state
        self.on_event = on_event or (lambda name, **kw: None)
        self.stats = CheckpointStats()
        self.next_id = store.latest_id() + 1
        self._requested = False
        self._inflight: int | None = None
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        self._history = store.records()[:1]  # the newest complete one, for GC
        self._exec = ThreadPoolExecutor(1, thread_name_prefix="checkpoint")  # record + commit

    # -- markers -----------------------------------------------------------------------------
    def start(self) -> None:
        if self.interval:
            self._timer = threading.Thread(target=self._tick, name="checkpoint-timer", daemon=True)
            self._timer.start()

    def _tick(self) -> None:
        while not self._stop.wait(self.interval):
            self.request()

    def request(self) -> None:
        """Ask for a checkpoint at the next task boundary (on demand, or from the timer)."""
        with self._lock:
            self._requested = True

    def marker(self) -> Marker | None:
        """Called by the dispatcher before each task: a checkpoint marker, if one is due."""
        with self._lock:
            if not self._requested or self._inflight is not None:
                return None
            self._requested = False
            self._inflight = self.next_id
            self.next_id += 1
            return Marker(MarkerKind.CHECKPOINT, "input", checkpoint_id=self._inflight)

    # -- Alg. 1: the marker reached the operator -------------------------------------------------
    def on_marker(self, marker: Marker) -> None:
        """Called when every input delivered ``marker`` (here: its task was assembled)."""
        cid = marker.checkpoint_id
        started = time.time()
        snap = self.operator.prepare_checkpoint(marker)
        if self.sink is not None and hasattr(self.sink, "cut"):
            self.sink.cut(cid)
        try:
            parts, futures, nbytes = self.operator.checkpoint(snap)
        except BaseException as e:  # noqa: BLE001 - a failed checkpoint must not stop the query
            self._failed(cid, e)
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
                    self._failed(cid, errors[0])
                else:
                    self._exec.submit(self._complete, cid, snap, parts, nbytes, started)

        if not futures:
            self._exec.submit(self._complete, cid, snap, parts, nbytes, started)
        for f in futures:
            f.add_done_callback(done)

    def _complete(self, cid: int, snap: Snapshot, parts: list, nbytes: int,
                  started: float) -> None:
        try:
            if self.sink is not None and hasattr(self.sink, "prepare"):
                self.sink.prepare(cid)  # phase 1: the epoch's output is durable, not visible
            rec = CheckpointRecord(cid, snap.seq, snap.input_end, snap.output, parts,
                                   snap.operator, nbytes, started, time.time())
            self.store.record(rec)  # the decision
            if self.sink is not None and hasattr(self.sink, "commit"):
                self.sink.commit(cid)  # phase 2: visible
        except BaseException as e:  # noqa: BLE001
            self._failed(cid, e)
            return
        self.stats.completed.append(rec)
        self.operator.send_ack(cid)
        self._history = (self._history + [rec])[-2:]
        oldest = self._history[0]
        if self.release is not None:
            self.release(oldest.input_end)
        if self.trim_state is not None:
            self.trim_state(oldest.state)
        self.on_event("checkpoint", id=cid, state_bytes=nbytes,
                      duration_ms=round(rec.duration_s * 1e3, 2), input_end=snap.input_end)
        with self._lock:
            self._inflight = None
            self._idle.notify_all()

    def _failed(self, cid: int, err: BaseException) -> None:
        log.warning("checkpoint %d failed: %s", cid, err)
        self.stats.failed += 1
        self.on_event("checkpoint_failed", id=cid, error=repr(err))
        with self._lock:
            self._inflight = None
            self._idle.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        with self._lock:
            return self._idle.wait_for(lambda: self._inflight is None, timeout)

    def stop(self, wait: bool = True) -> None:
        """No more markers; with ``wait``, let the checkpoint in flight complete."""
        self._stop.set()
        if self._timer is not None:
            self._timer.join()
        with self._lock:
            self._requested = False
        if wait:
            self.wait_idle(60)
        self._exec.shutdown(wait=wait)
