"""Writing p-units: files taken from the pool, pooled aligned buffers, asynchronous appends
encoded off the caller's thread, one group-commit writer per stream (a bulk ``pwritev``, then
``fdatasync`` with machine durability), acknowledgements, and a failed write failing every
waiting append.  A part of :class:`scabbard.storage.blockmanager.BlockManager`."""

from __future__ import annotations

import errno
import logging
import os
import struct
from concurrent.futures import Future
from pathlib import Path

import numpy as np

from scabbard import timers
from scabbard.batch import Batch
from scabbard.storage import fileindex
from scabbard.storage import segment as seg_fmt
from scabbard.storage.checksum import checksum
from scabbard.storage.errors import (
    StorageError,
    StorageFull,
    UnitTooLarge,
)
from scabbard.storage.layout import (
    _FILE_HEADER,
    FILE_MAGIC,
    _File,
    _Pending,
    _Seg,
    _Stream,
)
from scabbard.storage.segment import PAGE

log = logging.getLogger(__name__)


class GroupCommitWriter:
    """The write side of the BlockManager (a mixin: it shares the manager's attributes)."""

    def _next_epoch(self) -> int:
        self._epoch += 1
        return self._epoch

    def _take_file(self, s: _Stream, first: int) -> _File:
        """The next file of stream ``s`` (call with the lock held): a free one, else a new
        one.  When that leaves none free, a spare is made ahead on a thread of its own, so
        that a growing pool (input kept until two checkpoints are recorded) does not stall
        the appending thread on allocating and flushing each new file."""
        f = self._free.popleft() if self._free else self._create_file()
        f.stream, f.epoch, f.first, f.end = s.id, self._next_epoch(), first, first
        f.write_pos, f.sealed, f.header_written, f.segs = self.config.data_start, False, False, []
        f.indexed = False
        s.files.append(f)
        if not self._free and self._spare is None and not self._closed:
            self._spare = self._grower.submit(self._make_spare)
        return f

    def _make_spare(self) -> None:
        try:
            f = self._create_file()
        except Exception as e:  # noqa: BLE001 - the next take makes its own, and fails then
            log.debug("no spare pool file in %s: %s", self.path, e)
            f = None
        with self._lock:
            if f is not None:
                self._free.append(f)
            self._spare = None

    def buffer(self, n: int) -> np.ndarray:
        """An aligned buffer of at least ``n`` bytes for a segment this manager will write
        (:meth:`append` with ``payload``: it is reused once written)."""
        return self._buffer(n)

    def _buffer(self, n: int) -> np.ndarray:
        """An aligned buffer of at least ``n`` bytes: the smallest kept one up to twice that,
        else a new one (fresh pages cost page faults; see :meth:`_recycle`)."""
        with self._lock:
            fits = [i for i, b in enumerate(self._buffers) if n <= b.nbytes <= 2 * n]
            if fits:
                return self._buffers.pop(min(fits, key=lambda i: self._buffers[i].nbytes))
        return seg_fmt.aligned_empty(n)

    def _recycle(self, buf: np.ndarray) -> None:
        """Keep ``buf`` for reuse: as many bytes are kept as may wait to be written (a store
        held small - a spill stream under a memory budget - keeps few), the smallest ones
        given up to make room for a larger one.  A larger segment's fresh pages cost more,
        and a pool full of small buffers served none of the large segments: an exactly-once
        sink under CM2's output, whose pieces ended at its log files' ends (then 16 MiB: 4 and
        8 MiB, and a few KiB), allocated half its segments anew - 1.7 GB in a 4 s run, its encoding
        thread's copy at 2 GB/s instead of 10, on the query's critical path."""
        budget = self.config.max_pending_bytes
        with self._lock:
            kept = sum(b.nbytes for b in self._buffers)
            if kept + buf.nbytes > budget:
                self._buffers.sort(key=lambda b: b.nbytes)
                while (self._buffers and kept + buf.nbytes > budget
                       and self._buffers[0].nbytes < buf.nbytes):
                    kept -= self._buffers.pop(0).nbytes
            if kept + buf.nbytes <= budget:
                self._buffers.append(buf)

    def append(self, stream: int, batch: Batch, batch_id: int = 0,
               meta: np.ndarray | None = None, compress=None, stored=None,
               payload: seg_fmt.Payload | None = None) -> Future:
        """Persist ``batch`` (whose offset must continue the stream) asynchronously.

        ``compress``: a callable, batch -> ``[(codec, payload)]`` per column (e.g. a
        :class:`scabbard.compression.policy.Compression`), run here, before the segment's
        place in its file is reserved (its length is the compressed one); or ``stored``,
        the columns already compressed; or ``payload``, the segment made already but for
        its header (:func:`~scabbard.storage.segment.encode_payload`, in a buffer from
        :meth:`buffer`): it is sealed here, on the caller's thread, and nothing is left
        for the encoder pool.
        Returns a future resolving to the batch's end offset once it is
        acknowledged.  Blocks while ``max_pending_bytes`` await writing.
        """
        s = self._by_id[stream]
        cfg = self.config
        if self.read_only:
            raise StorageError(f"{self.path} is open to read only: nothing may be appended")
        if s.error is not None:
            raise StorageError(f"stream {s.name!r} cannot be written: {s.error}") from s.error
        if payload is None and stored is None and compress is not None:
            stored = compress(batch)
        n = payload.seglen if payload is not None else seg_fmt.segment_length(
            batch, 0 if meta is None else len(meta), cfg.align, stored)
        if n > cfg.file_bytes - cfg.data_start:
            raise UnitTooLarge(f"a segment of {n:,} bytes does not fit a {cfg.file_bytes:,}-byte "
                               f"pool file; use larger files or smaller batches",
                               n + cfg.data_start)
        with s.cond:
            while s.pending_bytes > cfg.max_pending_bytes and s.error is None:
                s.cond.wait()
        if s.error is not None:  # the writer failed while this append waited
            raise StorageError(f"stream {s.name!r} cannot be written: {s.error}") from s.error
        full = self._buffer(n) if payload is None else payload.full
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
            if payload is not None:
                encoded = Future()
                encoded.set_result(seg_fmt.seal(payload, stream_id=stream, epoch=f.epoch,
                                                first_offset=batch.offset, batch_id=batch_id,
                                                meta=meta))
            else:
                encoded = self._encoders.submit(seg_fmt.encode, batch, stream_id=stream,
                                                epoch=f.epoch, batch_id=batch_id, meta=meta,
                                                align=cfg.align, out=full, stored=stored)
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
                whole = self._whole_files(s)
            with s.cond:
                s.pending_bytes -= size
                s.cond.notify_all()
            for p in chunk:
                self._recycle(p.full)
                p.future.set_result(p.first + p.count)
            self._write_indexes(whole)

    def _whole_files(self, s: _Stream) -> list[tuple[Path, fileindex.FileIndex]]:
        """The indexes to write of ``s``'s files that are sealed and whose every segment is
        written (and flushed), from the newest back to one indexed already (call with the
        lock held)."""
        whole = []
        for f in reversed(s.files):
            if f.indexed:
                break
            if f.sealed and f.inflight == 0:
                whole.append(f)
        return self._claim_indexes(whole)

    @staticmethod
    def _claim_indexes(files) -> list[tuple[Path, fileindex.FileIndex]]:
        """Mark ``files`` indexed (call with the lock held, or before anyone else sees them)
        and return the indexes to write: of those not indexed yet that hold segments - each
        is written once."""
        out = [(f.path, fileindex.of_file(f)) for f in files if not f.indexed and f.segs]
        for f in files:
            f.indexed = True
        return out

    def _write_indexes(self, indexes: list[tuple[Path, fileindex.FileIndex]]) -> None:
        """Write each index beside its pool file; one that cannot be written costs the next
        opening a scan of that file, nothing else."""
        if self.config.discard or self.read_only:
            return
        for path, ix in indexes:
            try:
                fileindex.write(self.io, fileindex.path_of(path), ix)
            except Exception as e:  # whatever it is, the writer goes on: a hint is lost
                log.debug("no segment index for %s: %s", path, e)

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
        span = timers.start()
        try:
            self.io.pwritev(f.fd, bufs, pos)
        except OSError as e:
            if e.errno != errno.EINVAL or self.io_mode != "O_DIRECT":
                raise
            self._buffered(f"O_DIRECT write refused in {self.path}")
            self._reopen_buffered()
            self.io.pwritev(f.fd, bufs, pos)
        timers.stop(span, "write", sum(b.nbytes for b in bufs))

    def _reopen_buffered(self) -> None:
        with self._lock:
            for f in self._files.values():
                self.io.reopen(f.fd, f.path, os.O_RDWR)

    def flush(self, stream: int | None = None) -> None:
        """Wait until every append so far is acknowledged (or failed).  Appends made while it
        waits are not waited for: a stream appended to without a pause (an exactly-once
        sink under a query's output) is never idle, and a checkpoint's flush of it had
        waited for the end of the run."""
        streams = [self._by_id[stream]] if stream is not None else list(self._by_id.values())
        for s in streams:
            with self._lock:
                target = s.next_offset
            with s.cond:
                while s.durable < target and s.inflight and s.error is None:
                    s.cond.wait()
            if s.error is not None:
                raise s.error
