"""Exactly-once output: the two methods of paper §3.2.

Both store results as checksummed segments and know the *vector clock* of what they
committed - the input offset, the last window end, and the position in every persisted
channel the result depends on - so that after a crash the engine replays from its
checkpoint and drops every result at or below the committed window end, the output's own
position (windows are emitted in order, each window in one piece).  A stateless query's
results are not per window: each row's position is its tuple's input offset + 1 (the
offset in the ingress p-stream when the input is persisted), and the clock's ``window_end``
is the last committed row's.

* :class:`ClockedSink` writes each result batch at once, with its clock in the
  segment's metadata; ``committed()`` returns the clock of the newest stored
  batch (a torn last write is rejected on reopen).  Low latency.  A batch over one log file
  is stored in pieces cut at windows' ends; a window over one log file is cut inside it, and
  such a piece's clock names only the windows complete before it.  Every piece also names
  the run that wrote it (the log's length when the sink opened): rows a run wrote past what
  it committed - a window it had not finished when it crashed - are the ones the next run
  writes again, and the reader drops them where the next run starts.
* :class:`TransactionalSink` stages results per checkpoint epoch and commits
  them with the checkpoint, in two phases: ``prepare`` writes the epoch to
  ``pending/``, the checkpoint record is the decision, ``commit`` renames it into
  ``committed/``.  ``recover(latest)`` rolls decided epochs forward and drops the
  others.  Output is visible once per checkpoint.  An epoch is named by its
  checkpoint id, ids are never reused, and a committed epoch is never replaced;
  the staged results of an epoch are kept until it is committed, so a failed
  write loses nothing.

A fault-tolerant run binds its sink to the run's file I/O and durability
(:meth:`ExactlyOnceSink.bind`): with ``machine`` durability the clocked log is
flushed before each write is acknowledged, and the transactional epochs and the
folders that name them are flushed before the record that decides them.

``read_output(path)`` reads either back as a DataFrame.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import time
from pathlib import Path

import numpy as np

from scabbard import faults
from scabbard.batch import Batch
from scabbard.engine.sinks import Sink
from scabbard.ft.modes import EXACTLY_ONCE_SINKS
from scabbard.pog.checkpoint import ProtocolError
from scabbard.schema import Schema, SchemaError
from scabbard.storage import BlockManager, StorageConfig, StorageError, folderlock
from scabbard.storage import segment as seg_fmt
from scabbard.storage.fileio import OS, Durability, FileIO, write_atomic, write_new

NO_WINDOW = np.iinfo(np.int64).min
_KIND = ".sink.json"
_OWNER = ".run"  # the id of the run whose output the folder is (run.json holds it too)


def _clock(meta: np.ndarray, layout: tuple[str, ...] = (), head: int = 2) -> dict:
    """A result's vector clock from its segment's metadata: the input offset, the last window
    end, ``head - 2`` words of the sink's own, and the position in every persisted channel it
    depends on (``layout``)."""
    m = np.asarray(meta, np.uint64).view(np.int64)
    clock = {"input_end": int(m[0]), "window_end": int(m[1])}
    clock.update({n: int(v) for n, v in zip(layout, m[head:], strict=False)})
    return clock


def _meta(clock: dict, layout: tuple[str, ...] = (), *own: int) -> np.ndarray:
    words = [clock["input_end"], clock["window_end"], *own, *(clock.get(n, 0) for n in layout)]
    return np.array(words, np.int64).view(np.uint64)


def owner_of(path: str | Path) -> str | None:
    """The run id an output folder was claimed by (None: unclaimed, or no folder)."""
    try:
        return (Path(path) / _OWNER).read_text().strip() or None
    except (FileNotFoundError, NotADirectoryError, UnicodeDecodeError):
        return None


def _read_mark(path: Path) -> dict:
    """The output folder's ``.sink.json`` (kind and schema), checked."""
    f = path / _KIND
    try:
        doc = json.loads(f.read_text())
        if not isinstance(doc, dict) or doc.get("kind") not in EXACTLY_ONCE_SINKS \
                or not isinstance(doc.get("schema"), str):
            raise ValueError("not an exactly-once output description")
        Schema.from_dict(doc["schema_doc"])
    except FileNotFoundError:
        raise StorageError(f"{path} is not an exactly-once output folder (no {_KIND})") from None
    except (ValueError, KeyError, TypeError, SchemaError, UnicodeDecodeError) as e:
        raise StorageError(f"{f} is damaged ({e}); this output folder cannot be read") from None
    return doc


def _mark(path: Path, kind: str, schema: Schema, io: FileIO, durability: Durability) -> None:
    if (path / _KIND).exists():
        have = _read_mark(path)
        if have["kind"] != kind or have["schema"] != schema.fingerprint:
            raise ValueError(f"{path} holds {have['kind']} output of another schema or kind; "
                             f"choose another --output folder")
        return
    write_atomic(io, path / _KIND, json.dumps({"kind": kind, "schema": schema.fingerprint,
                                               "schema_doc": schema.to_dict()}).encode(),
                 durability)


class ExactlyOnceSink(Sink):
    kind = ""
    visible = True  # its results are read (a discarding sink's are not: nothing to own)
    least_rows = 1 << 20  # a write a window's piece held SG2 at 5 M tuples/s, one a task 19

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.schema: Schema | None = None
        self.io: FileIO = OS
        self.durability = Durability.MACHINE
        self.layout: tuple[str, ...] = ()  # the clock's channel entries, in order

    def fresh(self) -> ExactlyOnceSink:
        """A sink of this kind on this folder, not yet opened (a run that failed closed this
        one; a new attempt in the same process opens its own)."""
        return type(self)(self.path)

    def bind(self, io: FileIO, durability: Durability, clock: tuple[str, ...] = ()) -> None:
        """The run's file I/O and durability (before :meth:`open`); ``clock``: the persisted
        channels a result's vector clock has an entry for, besides the input."""
        self.io, self.durability, self.layout = io, durability, tuple(clock)

    def _mkdir(self, path: Path) -> None:
        fresh = not path.is_dir()
        self.io.mkdir(path)
        if fresh and self.durability.flush:
            self.io.fsync_dir(path.parent)

    def claim(self, run_id: str) -> None:
        """Mark the folder as run ``run_id``'s output (after :meth:`open`, which locks it):
        a recovery finds its results by this, not by the folder's path."""
        write_atomic(self.io, self.path / _OWNER, run_id.encode(), self.durability)

    def owner(self) -> str | None:
        """The id of the run whose output the folder is (None: unclaimed)."""
        return owner_of(self.path)

    def holds_results(self) -> bool:
        """Whether the folder already holds committed results (a new run must not add to them)."""
        return (self.path / _KIND).exists() and len(read_output(self.path)) > 0

    def committed(self) -> dict:
        """The clock of the newest committed result."""
        raise NotImplementedError

    def write_clocked(self, batch: Batch, clock: dict, ends=None) -> None:
        """Store ``batch`` with ``clock``; ``ends``: each row's position (default: its
        ``window_end``; a stateless query's rows: input offset + 1)."""
        raise NotImplementedError

    def write(self, batch: Batch) -> None:
        self.write_clocked(batch, {"input_end": 0, "window_end": int(batch.column("window_end").max())})

    # -- the checkpoint controller's side (scabbard.pog.checkpoint.TwoPhaseSink) ---------------
    def cut(self, epoch: int) -> None:
        """The marker: what was written so far belongs to checkpoint ``epoch``."""

    def prepare(self, epoch: int) -> None:
        """Before checkpoint ``epoch`` is recorded: its output durable (not yet visible)."""

    def commit(self, epoch: int) -> None:
        """Checkpoint ``epoch`` was recorded: its output visible."""

    def finish(self, epoch: int) -> None:
        """The end of the stream: the rest of the output committed as epoch ``epoch``."""

    def highest_epoch(self) -> int:
        """The highest epoch id the output holds (never handed out again)."""
        return 0

    def recover(self, decided: int) -> None:
        """After a crash: checkpoints up to ``decided`` were recorded."""


class ClockedSink(ExactlyOnceSink):
    kind = "clocked"
    CONFIG = StorageConfig(file_bytes=64 << 20, pool_files=1, io_threads=1, encode_threads=2,
                           bulk_bytes=16 << 20, max_pending_bytes=64 << 20)

    def open(self, schema: Schema) -> None:
        if self.schema is not None:
            return
        self._mkdir(self.path)
        _mark(self.path, self.kind, schema, self.io, self.durability)
        self.schema = schema
        config = dataclasses.replace(self.CONFIG, sync=self.durability.flush)
        self.bm = BlockManager(self.path / "log", config, self.io)
        self.sid = self.bm.stream("results", schema)
        self.rows = self.bm.durable_end(self.sid)
        self.torn = list(self.bm.torn)
        self.run = self.rows  # named by every piece this run writes (see the module)
        self.complete = self.committed()  # the clock of the windows stored whole

    def committed(self) -> dict:
        if self.rows == 0:
            return {"input_end": 0, "window_end": NO_WINDOW}
        return _clock(self.bm.read_with_meta(self.sid, self.rows - 1)[1], self.layout, 3)

    def write_clocked(self, batch: Batch, clock: dict, ends=None) -> None:
        """One segment per piece that fits a log file; pieces end at a window's end (a
        stateless query's at any row: each is its own position), so a crash between two
        leaves no window half-committed, and each piece's clock names its own last one.  A
        window over a log file is cut inside it: the pieces that end inside it carry the
        clock of the windows before it (a crash there commits none of its rows)."""
        cfg = self.CONFIG
        fits = max(1, (cfg.file_bytes - cfg.data_start - cfg.align) // max(1, self.schema.row_bytes)
                   - len(batch.columns))
        we = batch.column("window_end") if ends is None else np.asarray(ends)
        lo = 0
        while lo < len(batch):
            hi = len(batch)
            if hi - lo > fits:
                hi = int(np.searchsorted(we, we[lo + fits], side="left"))
                if hi <= lo:  # one window over a log file
                    hi = lo + fits
            if hi == len(batch):
                last = clock
            elif we[hi - 1] != we[hi]:
                last = dict(clock, window_end=int(we[hi - 1]))
            else:  # inside a window
                last = self.complete
            piece = batch.slice(lo, hi)
            self.bm.append(self.sid, Batch(self.schema, piece.columns, self.rows),
                           meta=_meta(last, self.layout, self.run))
            self.rows += len(piece)
            self.complete = last
            lo = hi
            faults.crashpoint("sink_write")

    def prepare(self, checkpoint_id: int) -> None:
        """Before a checkpoint is recorded, the output up to its cut must be stored."""
        self.bm.flush(self.sid)

    def close(self) -> None:
        if getattr(self, "bm", None) is not None:  # opened
            self.bm.close()


class DiscardSink(ExactlyOnceSink):
    """Results counted and dropped: what the benchmarks measure checkpointing with, so that
    writing the output is not charged to the checkpoints (the no-FT baseline drops its
    results too).  Trivially exactly-once - nothing is ever visible."""

    kind = "discard"
    visible = False

    def open(self, schema: Schema) -> None:
        self.schema = schema

    def committed(self) -> dict:
        return {"input_end": 0, "window_end": NO_WINDOW}

    def write_clocked(self, batch: Batch, clock: dict, ends=None) -> None:
        pass


class Epoch(enum.Enum):
    """Where an epoch of the transactional sink is in two-phase commit."""

    CUT = 1  # its results are staged in memory (the marker passed)
    PREPARED = 2  # phase 1: durable in pending/, not visible
    COMMITTED = 3  # phase 2: in committed/, visible


class TransactionalSink(ExactlyOnceSink):
    """Results staged per checkpoint epoch and committed with it, in two phases:

    1. **cut** - the checkpoint's marker: the results written so far form epoch ``N``;
    2. **prepare** (phase 1) - epoch ``N`` (with any earlier epoch not committed) is written to
       ``pending/N.seg`` and made durable; its results stay staged in memory, so a failed
       write loses nothing and may be retried;
    3. the checkpoint record is written: the decision;
    4. **commit** (phase 2) - ``pending/N.seg`` is renamed into ``committed/``; the staged
       results are dropped.

    :attr:`epochs` holds each epoch's :class:`Epoch` status; a step out of order raises
    :class:`~scabbard.pog.checkpoint.ProtocolError`.  ``recover(decided)`` after a crash rolls
    the epochs up to the newest record forward and drops the rest.
    """

    kind = "transactional"
    _lockfd: int | None = None

    def _take_lock(self) -> None:
        """The folder's lock, held from recovery or the run's start to :meth:`close`: a second
        run on this output folder (with another storage folder) is refused - it had written
        its epochs among this run's, and committed epoch ids this run hands out too."""
        if self._lockfd is None:
            self._mkdir(self.path)
            self._lockfd = folderlock.lock(self.path / "LOCK", f"output folder {self.path}")

    def close(self) -> None:
        if self._lockfd is not None:
            folderlock.unlock(self._lockfd)
            self._lockfd = None

    def open(self, schema: Schema) -> None:
        if self.schema is not None:
            return
        self._take_lock()
        self.schema = schema
        for d in ("pending", "committed"):
            self._mkdir(self.path / d)
        _mark(self.path, self.kind, schema, self.io, self.durability)
        self._open: list[tuple[Batch, dict]] = []  # the current epoch
        self._cut: dict[int, list[tuple[Batch, dict]]] = {}  # cut, not yet committed
        self.epochs: dict[int, Epoch] = {}  # this run's epochs, by id
        # when each staged batch was written, per epoch: results are visible at the commit,
        # so ``held_s`` (write -> commit, per batch) is what this sink adds to the latency
        self._open_at: list[float] = []
        self._cut_at: dict[int, list[float]] = {}
        self.held_s: list[float] = []
        self._pending: set[int] = set()  # epochs prepare() wrote to pending/ (not empty)

    def recover(self, decided: int) -> None:
        """Epochs up to checkpoint ``decided`` were decided: commit them; drop the rest.
        A pending epoch that is committed already (a crash between the two renames of an
        older build) is dropped, never written over the committed one."""
        self._take_lock()
        for d in ("pending", "committed"):
            self._mkdir(self.path / d)
        for p in _epochs(self.path / "pending"):
            done = self.path / "committed" / p.name
            if int(p.stem) <= decided and not done.exists():
                self.io.replace(p, done)
            else:
                self.io.unlink(p)
        for tmp in (self.path / "pending").glob(".*.tmp"):
            self.io.unlink(tmp, missing_ok=True)
        if self.durability.flush:
            self.io.fsync_dir(self.path / "committed")
            self.io.fsync_dir(self.path / "pending")

    def _parts(self) -> list[Path]:
        return _epochs(self.path / "committed")

    def highest_epoch(self) -> int:
        """The highest epoch id this folder holds, committed or pending (never handed out
        again)."""
        return max((int(p.stem) for d in ("pending", "committed")
                    for p in _epochs(self.path / d)), default=0)

    def committed(self) -> dict:
        parts = self._parts()
        if not parts:
            return {"input_end": 0, "window_end": NO_WINDOW}
        h = seg_fmt.parse_header(np.fromfile(parts[-1], np.uint8, count=seg_fmt.PAGE * 4), str(parts[-1]))
        return _clock(h.meta, self.layout)

    def write_clocked(self, batch: Batch, clock: dict, ends=None) -> None:
        self._open.append((batch, clock))
        self._open_at.append(time.perf_counter())

    def _advance(self, epoch: int, to: Epoch, allowed: tuple) -> None:
        have = self.epochs.get(epoch)
        if have not in allowed:
            raise ProtocolError(f"epoch {epoch}: {have.name if have else 'unknown'} -> "
                                f"{to.name} is out of order")
        self.epochs[epoch] = to

    def cut(self, checkpoint_id: int) -> None:
        """Step 1: what was written so far belongs to checkpoint ``checkpoint_id``."""
        self._advance(checkpoint_id, Epoch.CUT, (None,))
        self._cut[checkpoint_id], self._open = self._open, []
        self._cut_at[checkpoint_id], self._open_at = self._open_at, []

    def _staged(self, checkpoint_id: int) -> list[tuple[Batch, dict]]:
        """Epoch ``checkpoint_id``'s results, with those of earlier epochs not committed."""
        return [x for c in sorted(self._cut) if c <= checkpoint_id for x in self._cut[c]]

    def prepare(self, checkpoint_id: int) -> None:
        """Step 2 (phase 1): the epoch's results durable in ``pending/``, not visible.  They
        stay staged in memory until :meth:`commit`: if this write fails, nothing is lost and
        it may be retried."""
        if self.epochs.get(checkpoint_id) is not Epoch.CUT:
            self._advance(checkpoint_id, Epoch.PREPARED, (Epoch.CUT,))
        staged = self._staged(checkpoint_id)
        if not staged:
            self.epochs[checkpoint_id] = Epoch.PREPARED
            return
        done = self.path / "committed" / f"{checkpoint_id:012d}.seg"
        if done.exists():
            raise StorageError(f"{done} is committed already: epoch {checkpoint_id} would "
                               f"replace committed results")
        cols = [np.concatenate([b.columns[i] for b, _ in staged])
                for i in range(len(self.schema.fields))]
        clock = staged[-1][1]
        seg = seg_fmt.encode(Batch(self.schema, tuple(cols), 0), stream_id=0, epoch=checkpoint_id,
                        batch_id=checkpoint_id, meta=_meta(clock, self.layout))
        tmp = self.path / "pending" / f".{checkpoint_id:012d}.tmp"
        try:
            write_new(self.io, tmp, seg, self.durability)
        except BaseException:
            self.io.unlink(tmp, missing_ok=True)
            raise
        self.io.replace(tmp, self.path / "pending" / f"{checkpoint_id:012d}.seg")
        if self.durability.flush:
            self.io.fsync_dir(self.path / "pending")
        self._pending.add(checkpoint_id)
        self.epochs[checkpoint_id] = Epoch.PREPARED

    def commit(self, checkpoint_id: int) -> None:
        """Step 4 (phase 2): visible.  The staged results of this and earlier epochs are
        dropped."""
        self._advance(checkpoint_id, Epoch.COMMITTED, (Epoch.PREPARED,))
        p = self.path / "pending" / f"{checkpoint_id:012d}.seg"
        if checkpoint_id in self._pending:  # an empty epoch wrote nothing to commit
            if not p.exists():
                raise StorageError(f"{p} is gone: epoch {checkpoint_id}'s results were "
                                   f"prepared but cannot be committed (was {self.path} "
                                   f"changed by hand?)")
            self.io.replace(p, self.path / "committed" / p.name)
            if self.durability.flush:
                self.io.fsync_dir(self.path / "committed")
            self._pending.discard(checkpoint_id)
        for cid in [c for c in self._cut if c <= checkpoint_id]:
            del self._cut[cid]
            self.epochs[cid] = Epoch.COMMITTED
        now = time.perf_counter()
        for cid in [c for c in self._cut_at if c <= checkpoint_id]:
            self.held_s.extend(now - t for t in self._cut_at.pop(cid))

    def finish(self, epoch: int) -> None:
        """End of the stream: the rest is committed as a last epoch ``epoch`` (a fresh id)."""
        self.cut(epoch)
        self.prepare(epoch)
        self.commit(epoch)


def _epochs(folder: Path) -> list[Path]:
    """The epoch files of a folder, in id order."""
    return sorted(p for p in folder.glob("*.seg") if p.stem.isdigit())


def open_output(path: str | Path, kind: str) -> ExactlyOnceSink:
    """An exactly-once sink of ``kind`` on the output folder ``path``."""
    kinds = {"clocked": ClockedSink, "transactional": TransactionalSink}
    if kind not in kinds:
        raise ValueError(f"unknown exactly-once sink {kind!r}; choose one of {', '.join(kinds)}")
    return kinds[kind](path)


def _clocked_frames(bm: BlockManager, sid: int, schema: Schema) -> list:
    """A clocked log's committed rows, in pieces: where a run's pieces end past what it
    committed (a window it had not finished when it stopped), those rows are dropped - where
    the next run starts, which wrote the window again, and at the end of the log."""
    frames: list = []
    windowed = not schema.stream  # a stateless query's pieces are always whole

    def upto(window_end: int) -> None:
        while windowed and frames:
            we = frames[-1]["window_end"].to_numpy()
            k = int(np.searchsorted(we, window_end, side="right"))
            if k < len(we):
                frames[-1] = frames[-1].iloc[:k]
            if k:
                return
            frames.pop()

    run, complete = None, NO_WINDOW
    for batch, meta in bm.load(sid, with_meta=True):
        m = np.asarray(meta, np.uint64).view(np.int64)
        if run is not None and m[2] != run:
            upto(complete)
        run, complete = int(m[2]), int(m[1])
        frames.append(batch.to_pandas())
    upto(complete)
    return frames


def read_output(path: str | Path):
    """Every committed result of an exactly-once output folder, as a DataFrame."""
    import pandas as pd

    path = Path(path)
    doc = _read_mark(path)
    schema = Schema.from_dict(doc["schema_doc"])
    frames = []
    if doc["kind"] == "clocked" and (path / "log" / "pool").is_dir():  # else: nothing stored
        with BlockManager(path / "log", ClockedSink.CONFIG, read_only=True) as bm:  # a
            # reader changes nothing (a torn tail is left out, not repaired) and takes no lock
            if bm.has_stream("results"):  # else: a crash before the sink's first write
                frames = _clocked_frames(bm, bm.stream("results", schema), schema)
    else:
        for p in _epochs(path / "committed"):
            frames.append(seg_fmt.decode(np.fromfile(p, np.uint8), schema, str(p))[1].to_pandas())
    if not frames:
        return Batch(schema, tuple(np.zeros((0,) + f.column_shape(0)[1:], f.numpy_dtype)
                                   for f in schema.fields)).to_pandas()
    return pd.concat(frames, ignore_index=True)
