"""The BlockManager: a pool of pre-allocated files holding the segments of p-streams.

docs/design.md, paper §4.2.  One storage folder per query run::

    <dir>/LOCK            flock'ed by the engine that owns the folder (holds its pid)
    <dir>/streams.json    stream name -> id and schema fingerprint
    <dir>/pool/f000000.seg ...   pre-allocated files of ``file_bytes`` each
    <dir>/index/f000000.idx ...  a sealed file's segments (storage/fileindex.py)

* Each p-stream owns a **circular list** of pool files mapping its offsets to
  files: appends go to the last file, a full file takes the next free one from
  the pool, and :meth:`BlockManager.trim` returns whole files whose offsets were
  released to the pool, so an endless run keeps disk use bounded.
* A file *incarnation* starts with a 4 KiB file header (magic, stream id, epoch,
  first offset, checksum).  Every segment records the epoch of the incarnation
  that wrote it, so stale segments from an earlier use of a file are never taken
  for data.  Freed files have their header zeroed.
* Segments start on ``align`` boundaries (4 KiB, the O_DIRECT unit, by default;
  the paper's 256 KiB is ``align=262144``) and are written with ``O_DIRECT`` from
  page-aligned buffers where the file system allows it.  Where it does not, the
  files are opened buffered and :attr:`BlockManager.io_mode` says so.
* Writes are asynchronous and bulked (group commit): one write per stream is in
  flight on the I/O thread pool; the segments appended meanwhile are written
  together by the next ``pwritev``, up to ``bulk_bytes``.  A segment is
  *acknowledged* (its future resolves) once its write returned - it then
  survives the engine process being killed; with ``sync=True`` (``machine``
  durability) once it was also flushed (``fdatasync``), so it survives power loss;
  new pool files and ``streams.json`` are then made durable in their directory too.
* Opening an existing folder rebuilds every stream's list from the file headers
  and the sealed files' segment indexes (:mod:`scabbard.storage.fileindex`; a file
  without a usable one: its segment headers); the tail of each stream is verified in
  full and a torn
  last segment is dropped.  A pool file whose header cannot be read, or whose
  offsets end before a hole after which the stream continues (a released file
  whose zeroed header a machine crash lost), is moved to ``quarantine/``, never
  reused; files of another format version are refused.  The verified tails stay in
  memory until :meth:`BlockManager.forget_tails`: recovery reads them next (the newest
  checkpoint's state, the input to replay), so they are not read from the device twice.
  :attr:`BlockManager.torn` lists what was dropped or quarantined (runs report it).
  The tail file is then sealed and writing continues in a new incarnation.
* Every file operation goes through a :class:`scabbard.storage.fileio.FileIO`
  (recorded for the crash-state explorer).
"""

from __future__ import annotations

import bisect
import json
import logging
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from scabbard.batch import Batch
from scabbard.schema import Schema
from scabbard.storage import fileindex
from scabbard.storage import segment as seg_fmt
from scabbard.storage.devices import EmulatedDevice
from scabbard.storage.errors import (
    CorruptSegment,
    StorageError,
    StorageFull,
    StorageLocked,
    TrimmedError,
)
from scabbard.storage.fileio import OS, FileIO, write_atomic
from scabbard.storage.layout import (
    StorageConfig,
    _File,
    _Seg,
    _Stream,
)
from scabbard.storage.reopen import FolderScan
from scabbard.storage.segment import PAGE
from scabbard.storage.writer import GroupCommitWriter

log = logging.getLogger(__name__)

__all__ = ["BlockManager", "StorageConfig", "StorageFull", "StorageLocked", "TrimmedError"]


class BlockManager(FolderScan, GroupCommitWriter):
    """Owns one storage folder: ``with BlockManager(path) as bm: ...``."""

    def __init__(self, path: str | Path, config: StorageConfig | None = None,
                 io: FileIO = OS, read_only: bool = False, lock: int | None = None):
        """``lock``: the folder's lock (:func:`scabbard.storage.folderlock.lock`), taken by
        the caller before it read the folder's run description; this manager holds it from
        here on and releases it at :meth:`close` (or when opening fails).
        ``read_only``: a reader's view of the folder (another engine may be writing it):
        no lock taken, nothing created, repaired or moved - a torn tail or an unreadable
        file is left out of the view and listed in :attr:`torn`; appends are refused."""
        self.path = Path(path)
        self.read_only = read_only
        self.config = config or StorageConfig()
        cfg = self.config
        self.io = EmulatedDevice(io, cfg.write_bytes_per_s, cfg.discard) \
            if cfg.write_bytes_per_s or cfg.discard else io
        self._lock = threading.RLock()
        self._files: dict[int, _File] = {}
        self._free: deque[_File] = deque()
        self._streams: dict[str, _Stream] = {}
        self._by_id: dict[int, _Stream] = {}
        self._scanned: dict[int, list[_File]] = {}
        self._registry: dict[str, dict] = {}
        self._epoch = 0
        self._buffers: list[np.ndarray] = []
        self._read_buffers = seg_fmt.ReadBuffers(self.config.max_pending_bytes)
        self.torn: list[str] = []
        self.io_mode = "read-only" if read_only else \
            "O_DIRECT" if self.config.direct else "buffered"
        self._lockfd = lock
        try:
            self._open_folder()
        except BaseException:
            self._unlock()
            raise
        self._pool = ThreadPoolExecutor(self.config.io_threads, thread_name_prefix="scabbard-io")
        self._encoders = ThreadPoolExecutor(self.config.encode_threads,
                                            thread_name_prefix="scabbard-encode")
        self._grower = ThreadPoolExecutor(1, thread_name_prefix="scabbard-pool")  # spare files
        self._spare = None  # the spare file being made (GroupCommitWriter._take_file)
        self._closed = False
        self.bytes_written = 0  # segment bytes acknowledged (in discard mode: not written)


    # -- streams ---------------------------------------------------------------------------------
    def has_stream(self, name: str) -> bool:
        """Whether the folder's registry names the p-stream ``name``."""
        with self._lock:
            return name in self._registry

    def stream(self, name: str, schema: Schema) -> int:
        """Register (or reopen) the p-stream ``name``; return its id."""
        with self._lock:
            if name in self._streams:
                return self._streams[name].id
            entry = self._registry.get(name)
            if entry is not None and entry["fingerprint"] != schema.fingerprint:
                raise StorageError(f"stream {name!r} in {self.path} was written with schema "
                                   f"{entry['fingerprint']}, not {schema.name} "
                                   f"({schema.fingerprint})")
            if entry is None and self.read_only:
                raise StorageError(f"{self.path} holds no stream {name!r}")
            if entry is None:
                sid = max((e["id"] for e in self._registry.values()), default=0) + 1
                entry = {"id": sid, "fingerprint": schema.fingerprint, "schema": schema.name}
                self._registry[name] = entry
                write_atomic(self.io, self.path / "streams.json",
                             json.dumps(self._registry, indent=1).encode(),
                             self.config.durability)
            s = _Stream(entry["id"], name, schema)
            self._restore(s)
            self._streams[name] = s
            self._by_id[s.id] = s
            return s.id


    def start(self, stream: int) -> int:
        """First offset still stored."""
        return self._by_id[stream].start

    def durable_end(self, stream: int) -> int:
        """Offset one past the last acknowledged tuple."""
        return self._by_id[stream].durable

    def reset(self, stream: int, offset: int) -> None:
        """Start an empty stream at ``offset`` (e.g. after its data was released)."""
        s = self._by_id[stream]
        with self._lock:
            if s.files or s.pending:
                raise StorageError(f"stream {s.name!r} is not empty")
            s.start = s.next_offset = s.durable = offset


    # -- reading -----------------------------------------------------------------------------------
    def _locate(self, s: _Stream, offset: int) -> tuple[_File, _Seg]:
        with self._lock:
            if offset < s.start:
                raise TrimmedError(f"stream {s.name!r}: offset {offset} was released "
                                   f"(stored from {s.start})")
            if offset >= s.durable:
                raise StorageError(f"stream {s.name!r}: offset {offset} is not stored "
                                   f"(acknowledged up to {s.durable})")
            files = list(s.files)
            i = bisect.bisect_right([f.first for f in files], offset) - 1
            f = files[i]
            j = bisect.bisect_right([g.first for g in f.segs], offset) - 1
            if j < 0 or offset >= f.segs[j].first + f.segs[j].count:
                raise StorageError(f"stream {s.name!r}: offset {offset} was not persisted")
            return f, f.segs[j]

    def note(self, what: str, value: int) -> None:
        """Tell the file layer a fact about the run (see :meth:`FileIO.note`)."""
        self.io.note(what, value)

    def read(self, stream: int, offset: int) -> Batch:
        """The stored batch containing ``offset``, verified (raises :class:`CorruptSegment`)."""
        return self.read_with_meta(stream, offset)[0]

    def read_with_meta(self, stream: int, offset: int) -> tuple[Batch, np.ndarray]:
        """The stored batch containing ``offset`` and the metadata words stored with it."""
        s = self._by_id[stream]
        if self.config.discard:
            raise StorageError(f"stream {s.name!r}: storage in {self.path} runs without a disk "
                               f"(discard mode): nothing was written to read back")
        f, seg = self._locate(s, offset)
        buf = self._pread(f, seg.pos, seg.length)
        h, batch = seg_fmt.decode(buf, s.schema, str(f.path), seg.pos, copy=False)
        if h.stream_id != s.id or h.epoch != f.epoch or h.first_offset != seg.first:
            raise CorruptSegment(str(f.path), seg.pos, f"holds stream {h.stream_id} epoch "
                                 f"{h.epoch} offset {h.first_offset}, expected stream {s.id} "
                                 f"epoch {f.epoch} offset {seg.first}")
        return batch, h.meta

    def read_async(self, stream: int, offset: int) -> Future:
        return self._pool.submit(self.read, stream, offset)

    def last_meta(self, stream: int) -> np.ndarray | None:
        """The metadata words stored with the stream's last acknowledged batch (None if the
        stream holds none)."""
        s = self._by_id[stream]
        if s.durable <= s.start:
            return None
        return self.read_with_meta(stream, s.durable - 1)[1]

    def load(self, stream: int, start: int | None = None, end: int | None = None,
             with_meta: bool = False):
        """Every stored batch from ``start`` (default: the first stored) to ``end``, in order;
        with ``with_meta``, ``(batch, metadata words)`` pairs.

        Reads run ahead on the I/O pool while the caller consumes.
        """
        s = self._by_id[stream]
        start = s.start if start is None else start
        end = s.durable if end is None else min(end, s.durable)
        with self._lock:
            firsts = [g.first for f in s.files for g in f.segs if g.first + g.count > start
                      and g.first < end]
        window: deque[Future] = deque()

        def done():
            batch, meta = window.popleft().result()
            batch = _cut(batch, start, end)
            return (batch, meta) if with_meta else batch

        for off in firsts:
            window.append(self._pool.submit(self.read_with_meta, stream, max(off, start)))
            if len(window) > self.config.io_threads * 2:
                yield done()
        while window:
            yield done()

    def load_bulk(self, stream: int, start: int | None = None, end: int | None = None,
                  chunk_bytes: int = 8 << 20, with_meta: bool = False) -> list:
        """Every stored batch from ``start`` to ``end``, in order, as :meth:`load` - but the
        adjacent segments of a file are read by one ``pread`` each (up to ``chunk_bytes``),
        all chunks at once on the I/O pool: many small p-units (a window's pane units) cost
        a few device reads, not one each.  Each segment is verified as it is decoded.  With
        ``with_meta``, ``(batch, metadata words)`` pairs."""
        return self.load_ranges([(stream, start, end)], chunk_bytes, with_meta)[0]

    def load_ranges(self, ranges: list[tuple[int, int | None, int | None]],
                    chunk_bytes: int = 8 << 20, with_meta: bool = False) -> list[list]:
        """:meth:`load_bulk` of several ``(stream, start, end)`` ranges at once (a checkpoint's
        parts, read back by recovery): the segments they need are read in chunks of segments
        of one file at most ``GAP_BYTES`` apart - a range's and its neighbours' together, the
        small gaps between them read too - all chunks in flight at once.  A chunk inside a
        tail that opening the folder verified is decoded on the caller's thread: it is in
        memory, and a hand-off to the pool would cost more than the copy."""
        plans, wanted = [], {}  # per range (stream, start, end, its segments); per stream, all
        with self._lock:
            for stream, start, end in ranges:
                s = self._by_id[stream]
                if self.config.discard:
                    raise StorageError(f"stream {s.name!r}: storage in {self.path} runs without "
                                       f"a disk (discard mode): nothing was written to read back")
                start = s.start if start is None else start
                end = s.durable if end is None else min(end, s.durable)
                if start < end and start < s.start:
                    raise TrimmedError(f"stream {s.name!r}: offset {start} was released "
                                       f"(stored from {s.start})")
                segs = _segs_in(s, start, end)
                plans.append((s, start, end, segs))
                wanted.setdefault(s.id, (s, {}))[1].update(((id(f), g.pos), (f, g))
                                                           for f, g in segs)
            chunks = [(s, c) for s, need in wanted.values()
                      for c in _chunks(s, need, chunk_bytes)]

        def read(s: _Stream, f: _File, segs: list[_Seg]) -> list[tuple[tuple, Batch]]:
            base = segs[0].pos
            buf = self._pread(f, base, segs[-1].pos + segs[-1].length - base)
            ok = seg_fmt.verified_run(buf, [g.pos - base for g in segs],
                                      [g.length for g in segs], s.schema)  # many: one call
            out = []
            for k, g in enumerate(segs):
                h, batch = seg_fmt.decode(buf[g.pos - base:g.pos - base + g.length], s.schema,
                                          str(f.path), g.pos, copy=False, verified=k < ok)
                if h.stream_id != s.id or h.epoch != f.epoch or h.first_offset != g.first:
                    raise CorruptSegment(str(f.path), g.pos, f"holds stream {h.stream_id} "
                                         f"epoch {h.epoch} offset {h.first_offset}, expected "
                                         f"stream {s.id} epoch {f.epoch} offset {g.first}")
                out.append(((id(f), g.pos), (batch, h.meta)))
            return out

        pending = [self._pool.submit(read, s, f, segs) if not _in_tail(f, segs)
                   else (s, f, segs) for s, (f, segs) in chunks]
        got = dict(pair for x in pending
                   for pair in (x.result() if isinstance(x, Future) else read(*x)))
        cut = [[(_cut(got[(id(f), g.pos)][0], start, end), got[(id(f), g.pos)][1])
                for f, g in segs] for _, start, end, segs in plans]
        return cut if with_meta else [[b for b, _ in batches] for batches in cut]

    def forget_tails(self) -> None:
        """Drop the stream tails opening the folder read (recovery has read what it needs)."""
        with self._lock:
            for f in self._files.values():
                f.tail = None

    # -- garbage collection --------------------------------------------------------------------------
    def trim(self, stream: int, offset: int) -> int:
        """Release offsets below ``offset``: whole files return to the pool.  Returns files freed."""
        s = self._by_id[stream]
        freed = []
        with self._lock:
            while s.files and s.files[0].end <= offset and s.files[0].inflight == 0 \
                    and (len(s.files) > 1 or s.files[0].sealed):  # never the file being filled
                freed.append(s.files.popleft())
            s.start = s.files[0].first if s.files else max(s.start, offset)
        self._release(freed)
        return len(freed)

    def _release(self, files: list[_File]) -> None:
        zeros = seg_fmt.aligned_empty(PAGE)
        zeros[:] = 0
        for f in files:
            if not self.read_only:
                self._pwritev(f, [zeros], 0)  # the file no longer claims any data
                fileindex.remove(self.io, f.path)  # nor its index (a hint: not flushed)
            with self._lock:
                f.stream, f.segs, f.header_written, f.tail = -1, [], False, None
                self._free.append(f)

    # -- accounting ------------------------------------------------------------------------------
    @property
    def pool_bytes(self) -> int:
        """Disk space the pool occupies (what stays bounded)."""
        return len(self._files) * self.config.file_bytes

    def stats(self) -> dict:
        with self._lock:
            return {
                "files": len(self._files),
                "free_files": len(self._free),
                "pool_bytes": self.pool_bytes,
                "io_mode": self.io_mode,
                "bytes_written": self.bytes_written,
                "streams": {s.name: {"start": s.start, "durable": s.durable,
                                     "files": len(s.files)} for s in self._streams.values()},
            }

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.flush()
            self._index_tails()
        finally:
            self._grower.shutdown(wait=True)
            self._pool.shutdown(wait=True)
            self._encoders.shutdown(wait=True)
            for f in self._files.values():
                self.io.close(f.fd)
            self._unlock()

    def _index_tails(self) -> None:
        """At a clean close, each stream's last file is indexed too (the next opening seals
        it): that opening reads no segment header but those of the tails it verifies."""
        with self._lock:
            tails = [s.files[-1] for s in self._streams.values()
                     if s.files and s.files[-1].inflight == 0]
            for f in tails:  # sealed: an append racing the close goes to another file
                f.sealed = True
            indexes = self._claim_indexes(tails)
        self._write_indexes(indexes)

    def __enter__(self) -> BlockManager:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


GAP_BYTES = 256 << 10  # segments of a file this close are read by one pread, the gap too



def _segs_in(s: _Stream, start: int, end: int) -> list[tuple[_File, _Seg]]:
    """The segments of ``s`` holding offsets in ``[start, end)``, in offset order: found by
    bisection in the files and, in the first and last file, in their segments - a range
    read costs its own segments, not a walk over the whole stream."""
    if start >= end:
        return []
    files = list(s.files)
    i = max(bisect.bisect_right([f.first for f in files], start) - 1, 0)
    out = []
    for f in files[i:]:
        if f.first >= end:
            break
        firsts = [g.first for g in f.segs]
        j = max(bisect.bisect_right(firsts, start) - 1, 0)
        k = bisect.bisect_left(firsts, end)
        out.extend((f, g) for g in f.segs[j:k] if g.first + g.count > start)
    return out


def _chunks(s: _Stream, need: dict, chunk_bytes: int) -> list[tuple[_File, list[_Seg]]]:
    """The segments ``need`` holds (``(id(file), pos) -> (file, segment)``), in the stream's
    order, as runs of segments of one file of up to ``chunk_bytes`` (one read each), each
    segment at most ``GAP_BYTES`` after the one before."""
    order = {id(f): i for i, f in enumerate(s.files)}
    chunks: list[tuple[_File, list[_Seg]]] = []
    for f, g in sorted(need.values(), key=lambda fg: (order[id(fg[0])], fg[1].pos)):
        last = chunks[-1] if chunks else None
        if (last is not None and last[0] is f
                and 0 <= g.pos - (last[1][-1].pos + last[1][-1].length) <= GAP_BYTES
                and g.pos + g.length - last[1][0].pos <= chunk_bytes):
            last[1].append(g)
        else:
            chunks.append((f, [g]))
    return chunks


def _in_tail(f: _File, segs: list[_Seg]) -> bool:
    """Whether the segments lie in the tail that opening the folder read and kept."""
    tail = f.tail
    return tail is not None and tail[0] <= segs[0].pos \
        and segs[-1].pos + segs[-1].length <= tail[0] + len(tail[1])


def _cut(batch: Batch, start: int, end: int) -> Batch:
    lo = max(0, start - batch.offset)
    hi = min(len(batch), end - batch.offset)
    return batch if lo == 0 and hi == len(batch) else batch.slice(lo, hi)
