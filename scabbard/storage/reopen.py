"""Opening a storage folder: the lock, the stream registry, the pool files, and rebuilding every
stream's files from their headers after a restart - torn tails dropped, unreadable files and
files cut off by a hole quarantined, other format versions refused.  A part of
:class:`scabbard.storage.blockmanager.BlockManager`."""

from __future__ import annotations

import concurrent.futures
import errno
import json
import logging
import os
from pathlib import Path

import numpy as np

from scabbard.storage import fileindex, folderlock
from scabbard.storage import segment as seg_fmt
from scabbard.storage.checksum import checksum
from scabbard.storage.errors import (
    CorruptSegment,
    FormatVersionError,
    StorageError,
    StorageFull,
)
from scabbard.storage.layout import (
    _FILE_HEADER,
    FILE_MAGIC,
    FILE_VERSION,
    MiB,
    _File,
    _Seg,
    _Stream,
)
from scabbard.storage.segment import PAGE

SCAN_BYTES = 256 * 1024  # a reopen scan reads segment headers this much at a time

log = logging.getLogger(__name__)


class FolderScan:
    """The folder side of the BlockManager (a mixin: it shares the manager's attributes)."""

    def _open_folder(self) -> None:
        if self.read_only:
            self._open_to_read()
            return
        io = self.io
        fresh = not (self.path / "pool").is_dir()
        try:
            io.mkdir(self.path / "pool")
            io.mkdir(self.path / fileindex.FOLDER)  # a hint: its name is not flushed
            if fresh and self.config.sync:
                io.fsync_dir(self.path)
                io.fsync_dir(self.path.parent)
            probe = self.path / f".write-probe-{os.getpid()}"
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT, 0o644))  # nothing to record
            os.unlink(probe)
        except OSError as e:
            raise StorageError(f"storage folder {self.path} is not writable: {e.strerror}. "
                               f"Choose another with --storage DIR") from e
        if self._lockfd is None:  # else: the caller took it
            self._lockfd = folderlock.lock(self.path / "LOCK", f"storage folder {self.path}")
        self._read_registry_and_pool()

    def _open_to_read(self) -> None:
        """A reader's open: no lock, no probe, no pool file made."""
        if not (self.path / "pool").is_dir():
            raise StorageError(f"{self.path} is not a storage folder (no pool/)")
        self._read_registry_and_pool()

    def _read_registry_and_pool(self) -> None:
        io = self.io
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
        # every index, a free file's too: no incarnation made from here on takes an epoch
        # one of them names (an epoch is otherwise rebuilt from the headers alone)
        indexes = {p.stem: ix for p in (self.path / fileindex.FOLDER).glob("f*.idx")
                   if (ix := fileindex.read(io, p)) is not None}
        self._epoch = max([self._epoch, *(ix.epoch for ix in indexes.values())])
        try:
            for p in existing:
                self._scan_file(self._open_file(int(p.stem[1:]), p), indexes.get(p.stem))
            if not existing and not self.read_only:
                for _ in range(self.config.pool_files):
                    self._free.append(self._create_file())
        except BaseException:
            for f in self._files.values():
                io.close(f.fd)
            self._unlock()
            raise

    def _unlock(self) -> None:
        if self._lockfd is not None:  # read-only: nothing was locked
            folderlock.unlock(self._lockfd)
            self._lockfd = None

    def _open_file(self, fid: int, path: Path) -> _File:
        flags = os.O_RDWR | os.O_CREAT
        if self.read_only:
            fd = self.io.open(path, os.O_RDONLY)
        elif self.io_mode == "O_DIRECT":
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
        """A new pool file, allocated (and with machine durability its size and name flushed).
        Its id is taken under the lock; the allocation runs outside it when the caller does
        not hold it (the writer's spare file, made ahead on a thread of its own)."""
        cfg = self.config
        with self._lock:
            if cfg.max_bytes is not None and \
                    (len(self._files) + 1) * cfg.file_bytes > cfg.max_bytes:
                raise StorageFull(f"storage folder {self.path} is at its cap of "
                                  f"{cfg.max_bytes:,} bytes ({len(self._files)} files) and "
                                  f"nothing was released")
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
            with self._lock:
                del self._files[fid]
            self.io.unlink(f.path, missing_ok=True)
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise StorageFull(f"no space left on the device of {self.path} for another "
                                  f"{cfg.file_bytes / MiB:.0f} MiB pool file") from e
            raise StorageError(f"cannot allocate {f.path}: {e.strerror}") from e
        return f

    # -- reading files back (open) ---------------------------------------------------------------
    def _pread(self, f: _File, pos: int, n: int) -> np.ndarray:
        buf = self._read_buffers.take(n)
        tail = f.tail
        if tail is not None and tail[0] <= pos and pos + n <= tail[0] + len(tail[1]):
            buf[:] = tail[1][pos - tail[0]:pos - tail[0] + n]  # read at open, still in memory
            return buf
        done = 0
        while done < n:
            got = self.io.preadv(f.fd, [buf[done:]], pos + done)
            if got == 0:
                break
            done += got
        return buf[:done]

    def _scan_file(self, f: _File, ix: fileindex.FileIndex | None = None) -> None:
        """Rebuild what one pool file holds.  A file whose header is zero (never used, or
        released) is free; one whose header cannot be read is quarantined - it may hold data
        recovery needs, so it is never overwritten."""
        size = self.io.size(f.fd)
        head = self._pread(f, 0, PAGE)
        if len(head) < _FILE_HEADER.size or not head[:_FILE_HEADER.size].any():
            self._free.append(f)
            if ix is not None and not self.read_only:
                fileindex.remove(self.io, f.path)  # a released file's
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
        f.sealed = True
        if self._indexed(f, size, ix):
            self._scanned.setdefault(stream, []).append(f)
            return
        pos = self.config.data_start
        # the headers come from reads of SCAN_BYTES (many a header a read) while segments are
        # small; past a segment longer than that, a read of the next header's page alone (an
        # ingress p-unit of 8 MiB: 4 KiB read for it, not 256)
        buf, at, last = head[:0], pos, 0
        while pos + PAGE <= size:
            if pos + PAGE > at + len(buf):
                n = PAGE if last >= SCAN_BYTES else SCAN_BYTES
                buf, at = self._pread(f, pos, min(n, size - pos)), pos
            head = buf[pos - at:pos - at + PAGE]
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
            last = h.segment_len
        f.write_pos = pos
        self._scanned.setdefault(stream, []).append(f)

    def _indexed(self, f: _File, size: int, ix: fileindex.FileIndex | None) -> bool:
        """Take ``f``'s segments from its index ``ix`` (storage/fileindex.py; read whole)
        when it names the incarnation the file's header names and the file's first segment
        is that incarnation's; else False (the file is scanned)."""
        if ix is None or (ix.stream, ix.epoch, ix.first) != (f.stream, f.epoch, f.first) \
                or not len(ix.segs) or ix.write_pos > size:
            return False
        first, _, pos, length = (int(v) for v in ix.segs[0])
        try:
            h = seg_fmt.parse_header(self._pread(f, pos, PAGE), str(f.path), pos,
                                     file_len=size)
        except (CorruptSegment, FormatVersionError):
            return False
        if (h.stream_id, h.epoch, h.first_offset, h.segment_len) != \
                (f.stream, f.epoch, first, length):
            return False
        f.segs = [_Seg(*row) for row in ix.segs.tolist()]
        f.end, f.write_pos, f.indexed = ix.end, ix.write_pos, True
        return True

    def _quarantine(self, f: _File, why: str) -> None:
        """Move an unreadable pool file to ``quarantine/``: out of the pool, never reused
        (read-only: out of the view only)."""
        if self.read_only:
            self.io.close(f.fd)
            del self._files[f.id]
            self.torn.append(f"{f.path}: {why}; not read")
            return
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
        base = f.segs[i + 1].pos if i + 1 < len(f.segs) else f.write_pos
        buf = self._pread(f, base, f.write_pos - base) if f.write_pos > base else None
        tail = f.segs[i + 1:]  # one read of them all, verified in one call; the first that
        # fails (if any) and those after it decoded one by one: decode says why
        ok = seg_fmt.verified_run(buf, [g.pos - base for g in tail], [g.length for g in tail],
                                  s.schema) if tail else 0
        for j in range(i + 1 + ok, len(f.segs)):
            seg = f.segs[j]
            try:
                seg_fmt.decode(buf[seg.pos - base:seg.pos - base + seg.length], s.schema,
                               str(f.path), seg.pos, copy=False)
            except CorruptSegment as e:
                if e.problem != "no segment (zeros)":  # zeros: never written, as a scan has it
                    self.torn.append(str(e))
                keep = j
                break
        if keep < len(f.segs) and not self.read_only:  # erase the torn segment's header:
            # later scans stop before it
            zeros = seg_fmt.aligned_empty(PAGE)
            zeros[:] = 0
            self._pwritev(f, [zeros], f.segs[keep].pos)
        if keep < len(f.segs):
            f.indexed = False  # its index (if any) lists the dropped tail: written anew
            f.write_pos = f.segs[keep].pos
        del f.segs[keep:]
        if buf is not None and keep > i + 1:  # what recovery reads next, kept (forget_tails)
            f.tail = (base, buf[:f.segs[-1].pos + f.segs[-1].length - base])
        f.end = f.segs[-1].first + f.segs[-1].count if f.segs else f.first


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
                prev.indexed = False  # its index (if any) lists what ``f`` holds now
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
            # what was written but not yet flushed when the last run stopped is taken as the
            # stream's: flushed now, before an index names it or a later file continues it (a
            # power loss would otherwise open a hole behind the tail) - on an I/O thread while
            # this one reads and verifies the tail, and again if that erased a torn segment
            tail, segs = chain[-1], len(chain[-1].segs)
            flush = self._pool.submit(self.io.fdatasync, tail.fd) \
                if self.config.sync and not self.read_only else None
            try:
                self._verify_tail(s, tail)
            except BaseException:
                if flush is not None:  # waited for; the verification's error is the one told
                    concurrent.futures.wait([flush])
                raise
            if flush is not None:
                flush.result()
            if flush is not None and len(tail.segs) < segs:
                self.io.fdatasync(tail.fd)
            self._write_indexes(self._claim_indexes(chain))  # the next opening reads them
            s.files.extend(chain)
            s.start = chain[0].first
            s.next_offset = s.durable = chain[-1].end
