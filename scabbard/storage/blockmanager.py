"""The BlockManager: a pool of pre-allocated files holding the segments of p-streams.

DESIGN.md §7, paper §4.2.  One storage folder per query run::

    <dir>/LOCK            flock'ed by the engine that owns the folder (holds its pid)
    <dir>/streams.json    stream name -> id and schema fingerprint
    <dir>/pool/f000000.seg ...   pre-allocated files of ``file_bytes`` each

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
  and segment headers; the tail of each stream is verified in full and a torn
  last segment is dropped.  A pool file whose header cannot be read, or whose
  offsets end before a hole after which the stream continues (a released file
  whose zeroed header a machine crash lost), is moved to ``quarantine/``, never
  reused; files of another format version are refused.
  :attr:`BlockManager.torn` lists what was dropped or quarantined (runs report it).
  The tail file is then sealed and writing continues in a new incarnation.
* Every file operation goes through a :class:`scabbard.storage.fileio.FileIO`
  (recorded for the crash-state explorer).
"""

from __future__ import annotations

import bisect
import errno
import fcntl
import json
import logging
import os
import struct
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scabbard.batch import Batch
from scabbard.schema import Schema
from scabbard.storage import segment as seg_fmt
from scabbard.storage.checksum import checksum
from scabbard.storage.devices import EmulatedDevice
from scabbard.storage.fileio import OS, Durability, FileIO, write_atomic
from scabbard.storage.segment import PAGE, CorruptSegment, FormatVersionError, StorageError

log = logging.getLogger(__name__)

MiB = 1 << 20
_FILE_HEADER = struct.Struct("<8sHHIQQQQ")  # magic, version, 0, stream, epoch, first offset, 0, sum
FILE_MAGIC = b"SCABFILE"
FILE_VERSION = 1


class StorageFull(StorageError):
    """No space for another pool file (disk full or the configured cap reached)."""


class StorageLocked(StorageError):
    """Another engine owns the storage folder."""


class TrimmedError(StorageError):
    """The requested offset was released (garbage-collected)."""


@dataclass(frozen=True)
class StorageConfig:
    """How the BlockManager lays out and writes its files."""

    file_bytes: int = 64 * MiB
    pool_files: int = 4  # pre-allocated when the folder is created
    max_bytes: int | None = None  # cap on the pool; None: until the disk is full
    align: int = PAGE
    io_threads: int = 2
    encode_threads: int = 2  # segments are copied and checksummed off the caller's thread
    bulk_bytes: int = 32 * MiB
    max_pending_bytes: int = 256 * MiB  # appends block beyond this (back-pressure)
    direct: bool = True
    sync: bool = False  # machine durability: flush every write before it is acknowledged
    # emulated devices (Fig. 11): a slower disk - writes wait so that the folder is never
    # written faster than this many bytes/s; or no disk at all - segments are built (encoded,
    # checksummed) and acknowledged but not written, so nothing can be read back
    write_bytes_per_s: float | None = None
    discard: bool = False

    def __post_init__(self) -> None:
        if self.align < PAGE or self.align & (self.align - 1):
            raise ValueError(f"align must be a power of two >= {PAGE}, got {self.align}")
        if self.file_bytes % self.align or self.file_bytes < 2 * self.align:
            raise ValueError(f"file_bytes must be a multiple of align ({self.align}) and hold "
                             f"at least one segment, got {self.file_bytes}")
        if self.io_threads < 1 or self.pool_files < 1 or self.encode_threads < 1:
            raise ValueError("io_threads, encode_threads and pool_files must be >= 1")
        if self.write_bytes_per_s is not None and not self.write_bytes_per_s > 0:
            raise ValueError(f"write_bytes_per_s must be positive, got {self.write_bytes_per_s}")

    @property
    def data_start(self) -> int:
        return max(PAGE, self.align)

    @property
    def durability(self) -> Durability:
        return Durability.MACHINE if self.sync else Durability.PROCESS


@dataclass
class _Seg:
    first: int
    count: int
    pos: int
    length: int


@dataclass
class _File:
    id: int
    path: Path
    fd: int
    stream: int = -1
    epoch: int = 0
    first: int = 0
    end: int = 0  # offset one past the last acknowledged tuple
    write_pos: int = 0  # next free byte (reserved, maybe not yet written)
    sealed: bool = False
    header_written: bool = False
    inflight: int = 0  # segments reserved in it, not yet written
    segs: list[_Seg] = field(default_factory=list)


@dataclass
class _Pending:
    file: _File
    pos: int
    length: int
    encoded: Future  # -> the segment (a view of ``full``), encoded on the encoder pool
    full: np.ndarray  # the pooled buffer it lives in
    first: int
    count: int
    future: Future


@dataclass
class _Stream:
    id: int
    name: str
    schema: Schema
    files: deque = field(default_factory=deque)  # the circular list, oldest first
    next_offset: int = 0  # reserved by appends
    durable: int = 0  # acknowledged
    start: int = 0  # first offset still stored
    pending: deque = field(default_factory=deque)
    pending_bytes: int = 0
    inflight: bool = False
    error: BaseException | None = None
    cond: threading.Condition = field(default_factory=threading.Condition)


class BlockManager:
    """Owns one storage folder: ``with BlockManager(path) as bm: ...``."""

    def __init__(self, path: str | Path, config: StorageConfig | None = None,
                 io: FileIO = OS):
        self.path = Path(path)
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
        self.torn: list[str] = []
        self.io_mode = "O_DIRECT" if self.config.direct else "buffered"
        self._open_folder()
        self._pool = ThreadPoolExecutor(self.config.io_threads, thread_name_prefix="scabbard-io")
        self._encoders = ThreadPoolExecutor(self.config.encode_threads,
                                            thread_name_prefix="scabbard-encode")
        self._closed = False
        self.bytes_written = 0  # segment bytes acknowledged (in discard mode: not written)

    # -- the folder ----------------------------------------------------------------------------
    def _open_folder(self) -> None:
        io = self.io
        fresh = not (self.path / "pool").is_dir()
        try:
            io.mkdir(self.path / "pool")
            if fresh and self.config.sync:
                io.fsync_dir(self.path)
                io.fsync_dir(self.path.parent)
            probe = self.path / f".write-probe-{os.getpid()}"
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT, 0o644))  # nothing to record
            os.unlink(probe)
        except OSError as e:
            raise StorageError(f"storage folder {self.path} is not writable: {e.strerror}. "
                               f"Choose another with --storage DIR") from e
        self._lockfd = os.open(self.path / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lockfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._lockfd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(self._lockfd)
            raise StorageLocked(f"storage folder {self.path} is in use by another engine "
                                f"(pid {holder}); stop it or choose another folder") from None
        os.ftruncate(self._lockfd, 0)
        os.pwrite(self._lockfd, f"{os.getpid()}\n".encode(), 0)
        reg = self.path / "streams.json"
        if reg.exists():
            try:
                self._registry = json.loads(reg.read_text())
                if not isinstance(self._registry, dict):
                    raise ValueError("not an object")
            except (ValueError, UnicodeDecodeError) as e:
                self._unlock()
                raise StorageError(f"{reg} is damaged ({e}): this storage folder cannot be "
                                   f"reopened") from None
        existing = sorted(p for p in (self.path / "pool").glob("f*.seg")
                          if p.stem[1:].isdigit())
        try:
            for p in existing:
                self._scan_file(self._open_file(int(p.stem[1:]), p))
            if not existing:
                for _ in range(self.config.pool_files):
                    self._free.append(self._create_file())
        except BaseException:
            for f in self._files.values():
                io.close(f.fd)
            self._unlock()
            raise

    def _unlock(self) -> None:
        fcntl.flock(self._lockfd, fcntl.LOCK_UN)
        os.close(self._lockfd)

    def _open_file(self, fid: int, path: Path) -> _File:
        flags = os.O_RDWR | os.O_CREAT
        if self.io_mode == "O_DIRECT":
            try:
                fd = self.io.open(path, flags | os.O_DIRECT)
            except OSError as e:
                if e.errno != errno.EINVAL:
                    raise
                self._buffered(f"the file system of {self.path} refuses O_DIRECT")
                fd = self.io.open(path, flags)
        else:
            fd = self.io.open(path, flags)
        f = _File(fid, path, fd)
        self._files[fid] = f
        return f

    def _buffered(self, why: str) -> None:
        if self.io_mode == "O_DIRECT":
            log.warning("%s: using buffered I/O (page cache) instead", why)
            self.io_mode = f"buffered ({why})"

    def _create_file(self) -> _File:
        cfg = self.config
        if cfg.max_bytes is not None and (len(self._files) + 1) * cfg.file_bytes > cfg.max_bytes:
            raise StorageFull(f"storage folder {self.path} is at its cap of {cfg.max_bytes:,} bytes "
                              f"({len(self._files)} files) and nothing was released")
        fid = max(self._files, default=-1) + 1
        while (self.path / "pool" / f"f{fid:06d}.seg").exists():  # e.g. a quarantined id
            fid += 1
        f = self._open_file(fid, self.path / "pool" / f"f{fid:06d}.seg")
        try:
            self.io.fallocate(f.fd, 0, cfg.file_bytes)
            if cfg.sync:  # the file's size and its name survive power loss
                self.io.fsync(f.fd)
                self.io.fsync_dir(self.path / "pool")
        except OSError as e:
            self.io.close(f.fd)
            del self._files[fid]
            self.io.unlink(f.path, missing_ok=True)
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise StorageFull(f"no space left on the device of {self.path} for another "
                                  f"{cfg.file_bytes / MiB:.0f} MiB pool file") from e
            raise StorageError(f"cannot allocate {f.path}: {e.strerror}") from e
        return f

    # -- reading files back (open) ---------------------------------------------------------------
    def _pread(self, f: _File, pos: int, n: int) -> np.ndarray:
        buf = seg_fmt.aligned_empty(n)
        done = 0
        while done < n:
            got = self.io.preadv(f.fd, [buf[done:]], pos + done)
            if got == 0:
                break
            done += got
        return buf[:done]

    def _scan_file(self, f: _File) -> None:
        """Rebuild what one pool file holds.  A file whose header is zero (never used, or
        released) is free; one whose header cannot be read is quarantined - it may hold data
        recovery needs, so it is never overwritten."""
        size = self.io.size(f.fd)
        head = self._pread(f, 0, PAGE)
        if len(head) < _FILE_HEADER.size or not head[:_FILE_HEADER.size].any():
            self._free.append(f)
            return
        if bytes(head[:8]) != FILE_MAGIC:
            self._quarantine(f, "no pool-file header (bad magic)")
            return
        magic, version, _, stream, epoch, first, _, hsum = _FILE_HEADER.unpack(
            head[:_FILE_HEADER.size].tobytes())
        if checksum(head[:_FILE_HEADER.size - 8]) != hsum:
            self._quarantine(f, "damaged pool-file header")
            return
        if version != FILE_VERSION:
            raise FormatVersionError(f"{f.path}: pool-file format version {version}; this "
                                     f"build reads version {FILE_VERSION}. Open {self.path} "
                                     f"with the scabbard that wrote it, or use another folder")
        f.stream, f.epoch, f.first, f.end = stream, epoch, first, first
        f.header_written = True
        self._epoch = max(self._epoch, epoch)
        pos = self.config.data_start
        while pos + PAGE <= size:
            head = self._pread(f, pos, PAGE)
            try:
                h = seg_fmt.parse_header(head, str(f.path), pos, file_len=size)
            except FormatVersionError as e:
                raise FormatVersionError(f"{e}. Open {self.path} with the scabbard that wrote "
                                         f"it, or use another folder") from None
            except CorruptSegment as e:
                if e.problem != "no segment (zeros)":
                    self.torn.append(str(e))
                break
            if h.stream_id != stream or h.epoch != epoch or h.first_offset < f.end:
                break  # a segment of an earlier incarnation of this file
            f.segs.append(_Seg(h.first_offset, h.count, pos, h.segment_len))
            f.end = h.end_offset
            pos += h.segment_len
        f.write_pos = pos
        f.sealed = True
        self._scanned.setdefault(stream, []).append(f)

    def _quarantine(self, f: _File, why: str) -> None:
        """Move an unreadable pool file to ``quarantine/``: out of the pool, never reused."""
        qdir = self.path / "quarantine"
        self.io.mkdir(qdir)
        n = 0
        while (qdir / f"{f.path.name}.{n}").exists():
            n += 1
        self.io.close(f.fd)
        del self._files[f.id]
        self.io.replace(f.path, qdir / f"{f.path.name}.{n}")
        if self.config.sync:
            self.io.fsync_dir(qdir)
            self.io.fsync_dir(self.path / "pool")
        self.torn.append(f"{f.path}: {why}; moved to {qdir / f'{f.path.name}.{n}'}")

    def _verify_tail(self, s: _Stream, f: _File) -> None:
        """Verify the stream's last segments in full; drop a torn tail."""
        cfg = self.config
        keep = len(f.segs)
        budget = cfg.bulk_bytes + (f.segs[-1].length if f.segs else 0)
        i = len(f.segs) - 1
        while i >= 0 and f.write_pos - f.segs[i].pos <= budget:
            i -= 1
        for j in range(i + 1, len(f.segs)):
            seg = f.segs[j]
            try:
                seg_fmt.decode(self._pread(f, seg.pos, seg.length), s.schema, str(f.path), seg.pos,
                          copy=False)
            except CorruptSegment as e:
                self.torn.append(str(e))
                keep = j
                break
        if keep < len(f.segs):  # erase the torn segment's header: later scans stop before it
            zeros = seg_fmt.aligned_empty(PAGE)
            zeros[:] = 0
            self._pwritev(f, [zeros], f.segs[keep].pos)
        del f.segs[keep:]
        f.end = f.segs[-1].first + f.segs[-1].count if f.segs else f.first

    # -- streams ---------------------------------------------------------------------------------
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

    def _restore(self, s: _Stream) -> None:
        files = sorted(self._scanned.pop(s.id, []), key=lambda f: (f.first, f.epoch))
        chain: list[_File] = []
        for f in files:  # the files in offset order; where two claim an offset the newer wins
            if chain and f.first < chain[-1].end:
                prev = chain[-1]
                if f.epoch < prev.epoch:  # an older incarnation's file inside newer data: stale
                    self.torn.append(f"{f.path}: offsets {f.first}.. were written again by a "
                                     f"later file; the file returned to the pool")
                    self._release([f])
                    continue
                # a later incarnation wrote these offsets again (after dropping a torn tail of
                # ``prev``): the newer file holds them; ``prev`` keeps what comes before.  Older
                # data is never given up here: recovery may need it
                prev.segs = [g for g in prev.segs if g.first + g.count <= f.first]
                prev.end = prev.segs[-1].first + prev.segs[-1].count if prev.segs \
                    else prev.first
            if chain and f.first > chain[-1].end:
                # a hole.  The stream continues after it, so the files before it are cut off:
                # released files whose zeroed header was lost in a machine crash (stale), or,
                # without machine durability, data whose successor was lost.  Never reused.
                hole = f"{chain[-1].end}..{f.first}"
                for g in chain:
                    self._quarantine(g, f"offsets {g.first}..{g.end} of stream {s.name!r} end "
                                        f"before a hole (offsets {hole} are missing) after "
                                        f"which the stream continues")
                chain = []
            chain.append(f)
        if chain:
            self._verify_tail(s, chain[-1])
            s.files.extend(chain)
            s.start = chain[0].first
            s.next_offset = s.durable = chain[-1].end

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

    # -- writing -----------------------------------------------------------------------------------
    def _next_epoch(self) -> int:
        self._epoch += 1
        return self._epoch

    def _take_file(self, s: _Stream, first: int) -> _File:
        f = self._free.popleft() if self._free else self._create_file()
        f.stream, f.epoch, f.first, f.end = s.id, self._next_epoch(), first, first
        f.write_pos, f.sealed, f.header_written, f.segs = self.config.data_start, False, False, []
        s.files.append(f)
        return f

    def _buffer(self, n: int) -> np.ndarray:
        """An aligned buffer of at least ``n`` bytes, reused (fresh pages cost page faults)."""
        with self._lock:
            for i, b in enumerate(self._buffers):
                if n <= b.nbytes <= 2 * n:
                    return self._buffers.pop(i)
        return seg_fmt.aligned_empty(n)

    def _recycle(self, buf: np.ndarray) -> None:
        with self._lock:
            if sum(b.nbytes for b in self._buffers) + buf.nbytes <= 256 * MiB:
                self._buffers.append(buf)

    def append(self, stream: int, batch: Batch, batch_id: int = 0,
               meta: np.ndarray | None = None, compress=None, stored=None) -> Future:
        """Persist ``batch`` (whose offset must continue the stream) asynchronously.

        ``compress``: a callable, batch -> ``[(codec, payload)]`` per column (e.g. a
        :class:`scabbard.compression.policy.Compression`), run here, before the segment's
        place in its file is reserved (its length is the compressed one); or ``stored``,
        the columns already compressed.
        Returns a future resolving to the batch's end offset once it is
        acknowledged.  Blocks while ``max_pending_bytes`` await writing.
        """
        s = self._by_id[stream]
        cfg = self.config
        if s.error is not None:
            raise StorageError(f"stream {s.name!r} cannot be written: {s.error}") from s.error
        if stored is None and compress is not None:
            stored = compress(batch)
        n = seg_fmt.segment_length(batch, 0 if meta is None else len(meta), cfg.align, stored)
        if n > cfg.file_bytes - cfg.data_start:
            raise StorageError(f"a segment of {n:,} bytes does not fit a {cfg.file_bytes:,}-byte "
                               f"pool file; use larger files or smaller batches")
        with s.cond:
            while s.pending_bytes > cfg.max_pending_bytes and s.error is None:
                s.cond.wait()
        if s.error is not None:  # the writer failed while this append waited
            raise StorageError(f"stream {s.name!r} cannot be written: {s.error}") from s.error
        full = self._buffer(n)
        fut: Future = Future()
        with self._lock:
            if batch.offset < s.next_offset:
                self._recycle(full)
                raise StorageError(f"stream {s.name!r}: batch at offset {batch.offset}, but "
                                   f"offsets up to {s.next_offset} are written (appends go "
                                   f"forward; p-units not persisted leave gaps)")
            f = s.files[-1] if s.files else None
            if f is None or f.sealed or f.write_pos + n > cfg.file_bytes:
                if f is not None:
                    f.sealed = True
                f = self._take_file(s, batch.offset)
            pos = f.write_pos
            f.write_pos += n
            f.inflight += 1
            s.next_offset = batch.end
            encoded = self._encoders.submit(seg_fmt.encode, batch, stream_id=stream, epoch=f.epoch,
                                            batch_id=batch_id, meta=meta, align=cfg.align,
                                            out=full, stored=stored)
            with s.cond:
                s.pending.append(_Pending(f, pos, n, encoded, full, batch.offset, len(batch), fut))
                s.pending_bytes += n
                start = not s.inflight
                s.inflight = True
        if start:
            self._pool.submit(self._writer, s)
        return fut

    def _writer(self, s: _Stream) -> None:
        """Write the stream's pending segments, in order, in bulk chunks (one writer per stream)."""
        cfg = self.config
        while True:
            with s.cond:
                if not s.pending or s.error is not None:
                    s.inflight = False
                    s.cond.notify_all()
                    return
                chunk = [s.pending.popleft()]
                size = chunk[0].length
                while (s.pending and s.pending[0].file is chunk[0].file
                       and s.pending[0].pos == chunk[-1].pos + chunk[-1].length
                       and size + s.pending[0].length <= cfg.bulk_bytes):
                    chunk.append(s.pending.popleft())
                    size += chunk[-1].length
            f = chunk[0].file
            try:
                bufs = [p.encoded.result() for p in chunk]
                if not f.header_written:
                    self._write_file_header(f)
                self._pwritev(f, bufs, chunk[0].pos)
                if cfg.sync:
                    self.io.fdatasync(f.fd)
            except BaseException as e:  # fail every waiting append; nothing unacknowledged lies
                err = self._io_error(e, s)
                with s.cond:
                    s.error = err
                    rest = list(s.pending)
                    s.pending.clear()
                    s.pending_bytes = 0
                for p in chunk + rest:
                    p.future.set_exception(err)
                with s.cond:
                    s.inflight = False
                    s.cond.notify_all()
                return
            with self._lock:
                self.bytes_written += size
                for p in chunk:
                    f.segs.append(_Seg(p.first, p.count, p.pos, p.length))
                    f.end = p.first + p.count
                    f.inflight -= 1
                s.durable = f.end
            with s.cond:
                s.pending_bytes -= size
                s.cond.notify_all()
            for p in chunk:
                self._recycle(p.full)
                p.future.set_result(p.first + p.count)

    def _io_error(self, e: BaseException, s: _Stream) -> BaseException:
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return StorageFull(f"no space left writing stream {s.name!r} in {self.path}; "
                               f"offsets below {s.durable} are safe")
        if isinstance(e, OSError):
            return StorageError(f"writing stream {s.name!r} in {self.path} failed: {e}; "
                                f"offsets below {s.durable} are safe")
        return e

    def _write_file_header(self, f: _File) -> None:
        head = seg_fmt.aligned_empty(PAGE)
        head[:] = 0
        body = _FILE_HEADER.pack(FILE_MAGIC, 1, 0, f.stream, f.epoch, f.first, 0, 0)[:-8]
        head[:len(body)] = np.frombuffer(body, np.uint8)
        head[len(body):len(body) + 8] = np.frombuffer(
            struct.pack("<Q", checksum(head[:len(body)])), np.uint8)
        self._pwritev(f, [head], 0)
        f.header_written = True

    def _pwritev(self, f: _File, bufs: list[np.ndarray], pos: int) -> None:
        """Write all of ``bufs`` (a short write is completed by the I/O interface)."""
        try:
            self.io.pwritev(f.fd, bufs, pos)
        except OSError as e:
            if e.errno != errno.EINVAL or self.io_mode != "O_DIRECT":
                raise
            self._buffered(f"O_DIRECT write refused in {self.path}")
            self._reopen_buffered()
            self.io.pwritev(f.fd, bufs, pos)

    def _reopen_buffered(self) -> None:
        with self._lock:
            for f in self._files.values():
                self.io.reopen(f.fd, f.path, os.O_RDWR)

    def flush(self, stream: int | None = None) -> None:
        """Wait until every append so far is acknowledged (or failed)."""
        streams = [self._by_id[stream]] if stream is not None else list(self._by_id.values())
        for s in streams:
            with s.cond:
                while s.inflight:
                    s.cond.wait()
            if s.error is not None:
                raise s.error

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
            self._pwritev(f, [zeros], 0)  # the file no longer claims any data
            with self._lock:
                f.stream, f.segs, f.header_written = -1, [], False
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
        finally:
            self._pool.shutdown(wait=True)
            self._encoders.shutdown(wait=True)
            for f in self._files.values():
                self.io.close(f.fd)
            self._unlock()

    def __enter__(self) -> BlockManager:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _cut(batch: Batch, start: int, end: int) -> Batch:
    lo = max(0, start - batch.offset)
    hi = min(len(batch), end - batch.offset)
    return batch if lo == 0 and hi == len(batch) else batch.slice(lo, hi)
