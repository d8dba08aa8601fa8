"""The spill store on disk: a window operator's spilled state as state p-units.

The engine core holds its window state within ``EngineConfig.state_memory`` and writes what
does not fit to a :class:`~scabbard.engine.ports.SpillStore` (:mod:`scabbard.engine.spill`);
these stores keep it on disk as a BlockManager p-stream of pane partials - the rows a
checkpoint's state holds:

* :class:`DiskSpill` (:func:`disk_spill`, a run without fault tolerance): in a scratch
  folder of its own, removed at :meth:`~DiskSpill.close`; a unit goes once read back;
* :class:`DurableSpill` (:class:`DurableSpills`, a fault-tolerant run): the p-stream
  ``spill-<operator>`` of the run's storage, written as durably as the rest of it.  The
  spilled units are the window state's checkpoint (Darwin: a spilled pane is already
  durable): at a marker the engine lists each key partition's units
  (:meth:`~DurableSpill.snapshot`), the checkpoint record keeps the list, and a unit stays
  stored while a partition still needs it or a checkpoint recovery could use lists it
  (released with :meth:`~DurableSpill.unpin_below` as GC moves on).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from scabbard import faults
from scabbard.batch import Batch
from scabbard.engine.tasks import Edges, edges_columns, partials_schema, unit_runs
from scabbard.pog.checkpoint import DamagedCheckpoint
from scabbard.storage import BlockManager, StorageConfig
from scabbard.storage.errors import CorruptSegment, TrimmedError

# the spill stream's pool files (a segment is at most a quarter of one), its writes in flight
# and the buffers it keeps for reuse, and half of it a read: beside a budget, the spill's own
# memory (DARWIN at 10 M keys within 16 MiB, anonymous MB above the start: 61-63 at 4 MiB in
# flight, 73-81 at 8, as fast - 3.2-3.3 M tuples/s)
SPILL_FILE = 8 << 20
SPILL_PENDING = 4 << 20
# a read's units in flight at once, at most (:meth:`DiskSpill.read`): read one at a time, each
# waited for, a reload's units left the assembly waiting on the read-ahead (DARWIN at 10^6
# keys within 16 MiB, 17 % of the workers' samples; 60 M tuples: 2.9-3.6 -> 3.3-3.8 M
# tuples/s).  2 MiB: as fast, 2-5 MB more at the peak
READ_BYTES = SPILL_PENDING // 4


class DiskSpill:
    """A branch's spill stream: state p-units of pane partials, in a scratch folder of its own
    (removed at :meth:`close`)."""

    incremental = False  # no checkpoints

    def __init__(self, branch, parent: str | Path | None = None, bm: BlockManager | None = None):
        self.branch = branch
        self.schema = partials_schema(branch, f"spill-{branch.id}")
        if bm is None:
            if parent is not None:  # made when first needed, as the folder of a run's output
                Path(parent).mkdir(parents=True, exist_ok=True)
            self.folder = Path(tempfile.mkdtemp(prefix="scabbard-spill-", dir=parent))
            # writes wait (back-pressure) beyond a few MiB in flight, and as few buffers are
            # kept for reuse: the spill's own memory stays a small fixed overhead beside the
            # budget
            bm = BlockManager(self.folder, StorageConfig(
                file_bytes=SPILL_FILE, pool_files=1, bulk_bytes=SPILL_PENDING // 2,
                max_pending_bytes=SPILL_PENDING))
        self.bm = bm
        self.sid = bm.stream(self.schema.name, self.schema)
        self.next = max(bm.durable_end(self.sid), bm.start(self.sid))  # a reopened stream's end
        self.live: dict[int, int] = {}  # first offset -> end, of every unit not yet read back
        self.bytes_written = self.bytes_read = 0
        self.futures: list = []  # appends not acknowledged yet
        self.lock = threading.Lock()
        self.owner = None  # the engine's state that writes here

    def attach(self, owner) -> None:
        self.owner = owner

    def write(self, e: Edges) -> list[tuple[int, int]]:
        """Append ``e`` (pane-sorted) as units; their offset ranges."""
        cols, n = edges_columns(e), len(e.pane)
        # a segment fits a pool file
        per = max(1, (self.bm.config.file_bytes // 4) // self.schema.row_bytes)
        ranges = []
        for lo in range(0, n, per):
            batch = Batch(self.schema, tuple(np.ascontiguousarray(c[lo:lo + per]) for c in cols),
                          self.next)
            f = self.bm.append(self.sid, batch)
            with self.lock:  # (a write that failed stays: a checkpoint listing it must fail)
                self.futures = [x for x in self.futures if _pending(x)] + [f]
                ranges.append((self.next, batch.end))
                self.live[self.next] = batch.end
            self.next = batch.end
            self.bytes_written += batch.column_bytes
        faults.crashpoint("spill_write")
        return ranges

    def read(self, ranges: list[tuple[int, int]]) -> Edges:
        """The units ``ranges`` back (verified), as one :class:`Edges`; they are released.
        The units are read :data:`READ_BYTES` at a time, all of those in flight at once (a
        unit is a few pages: one at a time, each waited for, a reload spent its time on the
        device's round trips), and each range's batches are copied into the result's arrays
        and let go: memory holds the result and those units' batches, not the batches, their
        columns joined and then the key and aggregate matrices stacked from them (a reloaded
        key partition's units, four times over)."""
        b = self.branch
        k, ni, nf = b.key_width, len(b.iops), len(b.fops)
        want = sum(end - first for first, end in ranges)
        e = Edges(np.empty(want, np.int64), np.empty((want, k), np.int64),
                  np.empty(want, np.int64), np.empty((want, ni), np.int64),
                  np.empty((want, nf), np.float64))
        if not ranges:
            return e
        self.bm.flush(self.sid)  # every unit acknowledged before it is read
        at = nbytes = 0
        for group in unit_runs(ranges, max(1, READ_BYTES // self.schema.row_bytes)):
            for batches in self.bm.load_ranges([(self.sid, first, end) for first, end in group]):
                for x in batches:
                    n = len(x)
                    if at + n > want:
                        break
                    _fill(e, at, x.columns, k, ni)
                    at, nbytes = at + n, nbytes + x.column_bytes
        if at != want:
            raise FileNotFoundError(f"{self.schema.name}: {at} of {want} rows stored")
        faults.crashpoint("spill_read")
        self.release(ranges)
        with self.lock:  # (read on the read-ahead and the compaction threads)
            self.bytes_read += nbytes
        return e

    def release(self, ranges: list[tuple[int, int]]) -> None:
        """The units ``ranges`` are not needed any more (whole files below the oldest unit
        still needed return to the pool)."""
        with self.lock:
            for first, _ in ranges:
                self.live.pop(first, None)
        self._trim()

    def _oldest(self) -> int:
        return min(self.live, default=self.next)

    def _trim(self) -> None:
        with self.lock:
            oldest = self._oldest()
        self.bm.trim(self.sid, oldest)

    def snapshot(self, marker, parts: dict) -> None:  # no checkpoints without fault tolerance
        pass

    def close(self) -> None:
        try:
            self.bm.close()
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


def _pending(f) -> bool:
    """An append not acknowledged yet, or one that failed."""
    return not f.done() or f.exception() is not None


def disk_spill(parent: str | Path | None = None):
    """``EngineConfig(spill=...)``: each window operator's spilled state in a scratch folder
    under ``parent`` (default: the system's temporary folder)."""
    return lambda branch: DiskSpill(branch, parent)


def _fill(e: Edges, at: int, cols, k: int, ni: int) -> None:
    """Rows ``at`` on of ``e`` from a stored batch's columns (:func:`partials_schema`'s)."""
    hi = at + len(cols[0])
    e.pane[at:hi] = cols[0]
    for j in range(k):
        e.keys[at:hi, j] = cols[1 + j]
    e.cnt[at:hi] = cols[1 + k]
    for j in range(ni):
        e.ints[at:hi, j] = cols[2 + k + j]
    for j in range(e.floats.shape[1]):
        e.floats[at:hi, j] = cols[2 + k + ni + j]


class DurableSpill(DiskSpill):
    """A window operator's spilled state in the run's storage (p-stream ``spill-<id>``): the
    units are its checkpoint too (see the module)."""

    def __init__(self, branch, bm: BlockManager, incremental: bool = False):
        super().__init__(branch, bm=bm)
        self.incremental = incremental  # incremental or eventual checkpoints
        self.pins: dict[int, list[tuple[int, int]]] = {}  # checkpoint id -> the units it lists
        self.taken: dict[int, tuple] = {}  # checkpoint id -> (parts, futures, bytes), unwritten
        self.marked_bytes = 0  # bytes_written at the last marker
        self.suspect = None  # (checkpoint id, on damage) while a recovery's units are unverified
        self._verifier: ThreadPoolExecutor | None = None
        self._stopping = False

    def snapshot(self, marker, parts: dict) -> None:
        cid = marker.checkpoint_id
        with self.lock:
            self.pins[cid] = [r for ranges in parts.values() for r in ranges]
            # every unit listed is acknowledged before the record is written: the appends in
            # flight now (the listed ones among them)
            self.taken[cid] = (parts, [f for f in self.futures if _pending(f)],
                               self.bytes_written - self.marked_bytes)
            self.marked_bytes = self.bytes_written

    def take(self, cid: int) -> tuple[dict, list, int]:
        """The partitions' units of checkpoint ``cid``, the writes they wait for, and the
        bytes spilled since the previous checkpoint's marker (its share of the writing)."""
        with self.lock:
            return self.taken.pop(cid)

    def pin(self, parts: dict, cid: int) -> None:
        """Keep the units checkpoint ``cid`` lists (recovery: the record before the one it
        resumed from, which the next recovery falls back to if that one fails to load)."""
        with self.lock:
            self.pins[cid] = [(int(f), int(e)) for units in parts.values() for f, e in units]

    def adopt(self, parts: dict, cid: int) -> None:
        """Recovery: the units checkpoint ``cid`` lists are the partitions' (and pinned by it)."""
        ranges = [(int(f), int(e)) for units in parts.values() for f, e in units]
        with self.lock:
            self.live.update(ranges)
            self.pins[cid] = ranges

    def check(self, parts: dict) -> None:
        """Recovery: the units ``parts`` lists are still stored (none released, none past the
        stream's durable end); their bytes are read and verified later, behind the run
        (:meth:`verify_behind`) and as the windows need them.  Raises TrimmedError or
        FileNotFoundError."""
        start, end = self.bm.start(self.sid), self.bm.durable_end(self.sid)
        for first, last in (r for units in parts.values() for r in units):
            if first < start:
                raise TrimmedError(f"{self.schema.name}: a listed unit at offset {first} was "
                                   f"released (stored from {start})")
            if last > end:
                raise FileNotFoundError(f"{self.schema.name}: a listed unit ends at offset "
                                        f"{last}, past what is stored ({end})")

    def verify_behind(self, cid: int, parts: dict, damaged) -> Future:
        """Read back and verify every unit of checkpoint ``cid``'s ``parts`` on a thread of
        its own while the recovered run goes on; the future's result is their bytes.  Until
        it is done a listed unit found damaged or missing - here or as a window reads it -
        calls ``damaged(cid, error)`` first (the record is marked, so that the next recovery
        falls back past it) and raises :class:`~scabbard.pog.checkpoint.DamagedCheckpoint`;
        other failures (a full disk, a unit this run wrote) are the run's, not the record's."""
        listed = {(int(f), int(e)) for units in parts.values() for f, e in units}
        self.suspect = (cid, damaged, listed)
        self._stopping = False
        if self._verifier is None:
            self._verifier = ThreadPoolExecutor(1, thread_name_prefix="spill-verify")

        def run() -> int:
            nbytes = self._suspected(listed, self.verify, parts)
            self.suspect = None
            return nbytes
        return self._verifier.submit(run)

    def _suspected(self, ranges, fn, *args):
        """``fn(*args)``, reading ``ranges``: damage found in a unit the unverified record
        lists is the record's (see :meth:`verify_behind`)."""
        try:
            return fn(*args)
        except (CorruptSegment, TrimmedError, FileNotFoundError) as e:
            suspect = self.suspect
            if suspect is None or not suspect[2].intersection(ranges):
                raise
            cid, damaged, _ = suspect
            damaged(cid, e)
            raise DamagedCheckpoint(cid, " ".join(str(e).split())) from e

    def read(self, ranges: list[tuple[int, int]]) -> Edges:
        self.bm.flush(self.sid)  # (a failed write is this run's, never the record's)
        return self._suspected({(int(f), int(e)) for f, e in ranges}, super().read, ranges)

    def stop_verifying(self) -> None:
        """The run is over (or failed): a verification still reading stops at its next unit."""
        self._stopping = True
        if self._verifier is not None:
            self._verifier.shutdown(wait=True, cancel_futures=True)
            self._verifier = None

    def verify(self, parts: dict) -> int:
        """Read back every unit ``parts`` lists (one at a time: memory holds one), verified;
        their bytes.  Raises CorruptSegment, TrimmedError or FileNotFoundError."""
        most = max(1, (self.bm.config.file_bytes // 4) // self.schema.row_bytes)
        runs: list[list[int]] = []  # adjacent units read at once, up to a quarter file
        for first, end in sorted((int(f), int(e)) for units in parts.values() for f, e in units):
            if runs and runs[-1][1] == first and end - runs[-1][0] <= most:
                runs[-1][1] = end
            else:
                runs.append([first, end])
        nbytes = 0
        for first, end in runs:
            if self._stopping:
                raise CancelledError(f"{self.schema.name}: the run stopped before its "
                                     f"recovered state was verified")
            got = self.bm.load_bulk(self.sid, first, end)
            if sum(len(x) for x in got) != end - first:
                raise FileNotFoundError(f"{self.schema.name}: {sum(len(x) for x in got)} of "
                                        f"{end - first} rows stored at offset {first}")
            nbytes += sum(x.column_bytes for x in got)
        return nbytes

    def unpin_below(self, cid: int) -> None:
        """GC: the checkpoints before ``cid`` will not be recovered from; what only they list
        is released."""
        with self.lock:
            for old in [c for c in self.pins if c < cid]:
                del self.pins[old]
            for old in [c for c in self.taken if c < cid]:  # failed before their record
                del self.taken[old]
        self._trim()

    def _oldest(self) -> int:
        return min([*self.live, *(f for r in self.pins.values() for f, _ in r)],
                   default=self.next)

    def close(self) -> None:  # the run's storage stays; its owner closes it
        self.stop_verifying()
        self.bm.flush(self.sid)


class DurableSpills:
    """``EngineConfig(spill=...)`` for a fault-tolerant run: each window operator's
    :class:`DurableSpill` in the run's storage ``bm``, kept by operator id for its
    checkpoints."""

    def __init__(self, bm: BlockManager | None = None):
        self.bm = bm  # the run's storage (set once it is open)
        self.incremental = False  # set with the run's checkpoint mode, before a store opens
        self.stores: dict[str, DurableSpill] = {}

    def stop_verifying(self) -> None:
        """Every store's verification stopped (an attempt of a recovery ends)."""
        for store in self.stores.values():
            store.stop_verifying()

    def __call__(self, branch) -> DurableSpill:
        if branch.id not in self.stores:
            self.stores[branch.id] = DurableSpill(branch, self.bm, self.incremental)
        return self.stores[branch.id]

