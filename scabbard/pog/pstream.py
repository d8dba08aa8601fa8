"""The p-stream: a FIFO channel between operators that persists p-units when told to.

Paper Table 1 and §3.1.  Interface::

    subscribe(operator, reader_id, offset)        a reader and where it starts
    write(punit, batch_id, offset, is_persistent) -> Future (resolves when readable)
    read(reader_id, timeout=0)                    the reader's next readable p-unit, or None
    checkpoint()                                  offsets to restore the channel from
    trim_from(reader_id, offset, is_persistent)   the reader no longer needs data below offset
    load_stream(start)                            the persisted p-units, from disk

A p-unit written with ``is_persistent`` (or after a retain marker) is handed to
the BlockManager and becomes readable only once acknowledged - the paper's rule
that persisted data is never processed before it is stored (§3.1).  Readers see
p-units strictly in offset order, each at its own pace.  A p-unit leaves memory
when every reader has read it; it leaves disk when every reader has released it
(``trim_from``), in whole files.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass

from scabbard.errors import Failure
from scabbard.pog.markers import Marker, MarkerKind
from scabbard.pog.punit import PUnit
from scabbard.schema import Schema
from scabbard.storage.blockmanager import BlockManager


class PStreamError(Failure, RuntimeError):
    pass


@dataclass(frozen=True)
class StreamCheckpoint:
    """What a p-stream needs to be restored: its end and each reader's positions."""

    name: str
    end: int
    durable: int
    readers: dict[str, int]
    released: dict[str, int]


@dataclass
class _Entry:
    unit: PUnit
    ready: bool


class PStream:
    def __init__(self, name: str, schema: Schema, storage: BlockManager | None = None,
                 start: int = 0, max_units: int = 64, max_bytes: int = 256 << 20,
                 compress=None):
        self.name, self.schema, self.storage = name, schema, storage
        # batch -> [(codec, payload)] per column, for p-units not compressed yet (a writer may
        # compress them itself, in parallel: PUnit.compress); None: stored raw
        self.compress = compress
        self.stream_id = storage.stream(name, schema) if storage is not None else None
        if storage is not None:
            stored = storage.durable_end(self.stream_id)
            if stored == 0 and start:
                storage.reset(self.stream_id, start)
            start = max(start, stored)
        self._units: deque[_Entry] = deque()  # in memory, offset order
        self._bytes = 0  # their size
        self._end = start
        self._readers: dict[str, int] = {}
        self._released: dict[str, int] = {}
        self._operators: dict[str, object] = {}
        self._retain = 0  # retain markers received, not yet applied
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self._halted = False  # the run stopped: a write waiting for room gives up
        self.max_units, self.max_bytes = max_units, max_bytes

    # -- readers -------------------------------------------------------------------------------
    def subscribe(self, operator, reader_id: str, offset: int | None = None) -> None:
        """A reader that reads from ``offset`` (default: the end) on.  It has released nothing
        yet: what is stored stays until it says so - a reader that resumes after a crash
        must not release the stored input a checkpoint before ``offset`` still needs."""
        with self._cond:
            off = self._end if offset is None else offset
            stored = self.storage.start(self.stream_id) if self.storage is not None else off
            self._readers[reader_id] = off
            self._released[reader_id] = min(off, stored)
            self._operators[reader_id] = operator

    @property
    def end(self) -> int:
        return self._end

    def restart_at(self, offset: int) -> None:
        """An empty stream carries on at ``offset`` (recovery: GC released every stored p-unit
        below where a checkpoint's reader was, and the pool files with them, so the stored end
        was lost - offsets must never go back below what a record already depends on)."""
        with self._cond:
            if self._units or self._end > offset:
                raise PStreamError(f"p-stream {self.name!r} cannot restart at {offset}: it "
                                   f"holds data up to {self._end}")
            if self.storage is not None:
                self.storage.reset(self.stream_id, offset)
            self._end = offset

    def _room(self, nbytes: int) -> bool:
        return not self._units or (len(self._units) < self.max_units
                                   and self._bytes + nbytes <= self.max_bytes)

    def has_room(self, nbytes: int) -> bool:
        """Would a write of ``nbytes`` go through without waiting?  At most ``max_units``
        p-units and ``max_bytes`` wait in memory (one p-unit always fits an empty stream)."""
        with self._cond:
            return self._room(nbytes)

    def halt_writes(self) -> None:
        """The run stopped: a write waiting for readers to make room raises instead (its
        readers will read nothing more)."""
        with self._cond:
            self._halted = True
            self._cond.notify_all()

    def wait_room(self, nbytes: int, timeout: float) -> bool:
        """:meth:`has_room`, waiting up to ``timeout`` seconds for readers to make room."""
        with self._cond:
            return self._cond.wait_for(lambda: self._room(nbytes) or self._error is not None,
                                       timeout) and self._room(nbytes)

    # -- markers ---------------------------------------------------------------------------------
    def on_marker(self, marker: Marker) -> None:
        if marker.kind is MarkerKind.RETAIN:
            with self._cond:
                self._retain += 1
        elif marker.kind is MarkerKind.RELEASE:
            self.trim_from(marker.reader, marker.offset, is_persistent=True)
        else:
            raise PStreamError(f"{self.name}: {marker.kind.value} markers are handled by "
                               f"ft-operators, not p-streams")

    # -- writing ---------------------------------------------------------------------------------
    def write(self, punit: PUnit, batch_id: int, offset: int, is_persistent: bool = False) -> Future:
        """Append ``punit`` at ``offset`` (the stream's end).

        Blocks while the stream has no room for it (:meth:`has_room`:
        back-pressure).  The future resolves to the p-unit once readers can read it.
        """
        if self._error is not None:
            raise PStreamError(f"p-stream {self.name!r} failed: {self._error}") from self._error
        if punit.offset != offset or offset != self._end:
            raise PStreamError(f"p-stream {self.name!r}: write at offset {offset} (unit at "
                               f"{punit.offset}), the stream ends at {self._end}")
        with self._cond:
            while not self._room(punit.batch.column_bytes) and self._error is None:
                if self._halted:
                    raise PStreamError(f"p-stream {self.name!r}: the run stopped while a write "
                                       f"waited for room")
                self._cond.wait()
            persist = is_persistent or self._retain > 0
            if self._retain:
                self._retain -= 1
            unit = punit.with_persistence(persist)
            entry = _Entry(unit, ready=not persist)
            self._units.append(entry)
            self._bytes += unit.batch.column_bytes
            self._end = unit.end
            if not persist:
                self._cond.notify_all()
        done: Future = Future()
        if not persist:
            done.set_result(unit)
            return done
        if self.storage is None:
            raise PStreamError(f"p-stream {self.name!r} has no storage to persist to")
        ack = self.storage.append(self.stream_id, unit.batch, batch_id, unit.meta_words(),
                                  compress=self.compress if unit.stored is None else None,
                                  stored=None if unit.stored is None else list(unit.stored),
                                  payload=unit.encoded)

        def acknowledged(f: Future) -> None:
            err = f.exception()
            with self._cond:
                if err is not None:
                    self._error = err
                else:
                    entry.ready = True
                self._cond.notify_all()
            if err is not None:
                done.set_exception(err)
            else:
                if unit.vector_clock:  # how far the acknowledged input reaches (a recording)
                    self.storage.note(f"acknowledged {self.name}", int(unit.vector_clock[0]))
                done.set_result(unit)

        ack.add_done_callback(acknowledged)
        return done

    # -- reading ---------------------------------------------------------------------------------
    def read(self, reader_id: str, timeout: float | None = 0) -> PUnit | None:
        """The reader's next p-unit once readable; None if none within ``timeout`` seconds.

        ``timeout=None`` waits for one.  Raises if persisting failed.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if self._error is not None:
                    raise PStreamError(f"p-stream {self.name!r}: persisting failed: "
                                       f"{self._error}") from self._error
                pos = self._readers[reader_id]
                entry = self._find(pos)
                if entry is not None and entry.ready:
                    self._readers[reader_id] = entry.unit.end
                    self._drop_read()
                    return entry.unit
                wait = None if deadline is None else deadline - time.monotonic()
                if wait is not None and wait <= 0:
                    return None
                self._cond.wait(wait)

    def _find(self, offset: int) -> _Entry | None:
        for e in self._units:  # a few dozen units at most
            if e.unit.offset <= offset < e.unit.end:
                return e
        return None

    def _drop_read(self) -> None:
        low = min(self._readers.values(), default=self._end)
        dropped = False
        while self._units and self._units[0].unit.end <= low and self._units[0].ready:
            self._bytes -= self._units.popleft().unit.batch.column_bytes
            dropped = True
        if dropped:
            self._cond.notify_all()

    # -- progress, GC, recovery --------------------------------------------------------------------
    def checkpoint(self) -> StreamCheckpoint:
        with self._cond:
            durable = self.storage.durable_end(self.stream_id) if self.storage else self._end
            return StreamCheckpoint(self.name, self._end, durable, dict(self._readers),
                                    dict(self._released))

    def trim_from(self, reader_id: str, offset: int, is_persistent: bool = True) -> int:
        """``reader_id`` needs nothing below ``offset`` any more; returns the files freed."""
        with self._cond:
            if offset > self._readers.get(reader_id, offset):
                raise PStreamError(f"p-stream {self.name!r}: reader {reader_id!r} releases "
                                   f"offset {offset} before reading it")
            self._released[reader_id] = max(self._released.get(reader_id, 0), offset)
            low = min(self._released.values())
        if is_persistent and self.storage is not None:
            return self.storage.trim(self.stream_id, low)
        return 0

    def load_stream(self, start: int | None = None, end: int | None = None):
        """The persisted p-units from ``start``, read back (in parallel) and verified."""
        if self.storage is None:
            raise PStreamError(f"p-stream {self.name!r} has no storage")
        for b, meta in self.storage.load(self.stream_id, start, end, with_meta=True):
            clock = tuple(int(w) for w in meta) or (b.end,)
            yield PUnit(self.name, -1, b, clock, persistent=True)

    def last_clock(self) -> tuple[int, ...] | None:
        """The vector clock stored with the last persisted p-unit (None if none is stored)."""
        meta = self.storage.last_meta(self.stream_id) if self.storage is not None else None
        return None if meta is None else tuple(int(w) for w in meta)

    def flush(self) -> None:
        if self.storage is not None:
            self.storage.flush(self.stream_id)
