"""A sealed pool file's segment index: what opening the folder would otherwise read from every
segment's header (docs/design.md, "Opening a storage folder").

When a pool file is sealed (its stream went on in the next file) and every segment in it is
acknowledged - with machine durability, flushed - the writer writes ``index/fNNNNNN.idx``
for it: the file's incarnation (stream, epoch, first offset) and each segment's first
offset, tuple count, position and length, under one checksum.  Opening the folder then reads
one index and the file's first two pages instead of scanning every segment header, so it
takes time in the number of files, not in the bytes or segments stored (Darwin's "state that
needs no reload at recovery": a spilled state of gigabytes in small units opened in
milliseconds).

An index is a hint, never the truth: it is taken only when it is whole (its checksum), names
the incarnation the file's header names, and the segment at the file's first data position
is that incarnation's first listed segment (a reused file whose new header a crash lost but
whose first new segment it kept is scanned).  Anything else - no index, a torn, stale or
foreign one - and the file is scanned as before, and its index written anew.  So an index
is written without a flush and without a rename: a crash that loses or tears it costs a scan.
Segment data is still verified where it is read, by its own checksum.
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scabbard.storage.checksum import checksum

MAGIC = b"SCABIDX1"
# magic, version, 0, stream, epoch, first offset, end offset, write position, segments
_HEAD = struct.Struct("<8sHHIQQQQQ")
VERSION = 1
log = logging.getLogger(__name__)
FOLDER = "index"  # beside pool/


@dataclass(frozen=True)
class FileIndex:
    """One incarnation's segments: ``segs`` rows of (first, count, pos, length)."""

    stream: int
    epoch: int
    first: int
    end: int
    write_pos: int
    segs: np.ndarray  # int64, shape (n, 4)


def of_file(f) -> FileIndex:
    """The index of a pool file's incarnation (a :class:`~scabbard.storage.layout._File`)."""
    segs = np.array([(g.first, g.count, g.pos, g.length) for g in f.segs], np.int64)
    return FileIndex(f.stream, f.epoch, f.first, f.end, f.write_pos, segs.reshape(-1, 4))


def path_of(pool_file: Path) -> Path:
    """A pool file's index: ``<dir>/pool/f000012.seg`` -> ``<dir>/index/f000012.idx`` (one
    a pool file, written over when the file is reused: as bounded as the pool)."""
    return pool_file.parent.parent / FOLDER / pool_file.with_suffix(".idx").name


def encode(ix: FileIndex) -> bytes:
    """The index's bytes: header, segment table, checksum of both."""
    body = _HEAD.pack(MAGIC, VERSION, 0, ix.stream, ix.epoch, ix.first, ix.end, ix.write_pos,
                      len(ix.segs)) + np.ascontiguousarray(ix.segs, np.int64).tobytes()
    return body + struct.pack("<Q", checksum(body))


def decode(data: bytes) -> FileIndex | None:
    """The index ``data`` holds, or None when it is not a whole index of this version."""
    if len(data) < _HEAD.size + 8 or data[:8] != MAGIC:
        return None
    magic, version, _, stream, epoch, first, end, write_pos, n = _HEAD.unpack_from(data)
    if version != VERSION or len(data) != _HEAD.size + 32 * n + 8:
        return None
    (want,) = struct.unpack_from("<Q", data, len(data) - 8)
    if checksum(data[:-8]) != want:
        return None
    segs = np.frombuffer(data, np.int64, 4 * n, _HEAD.size).reshape(n, 4)
    return FileIndex(stream, epoch, first, end, write_pos, segs)


def write(io, path: Path, ix: FileIndex) -> None:
    """Write ``ix`` at ``path`` through ``io`` (no flush, no rename: see the module's text)."""
    fd = io.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        data = np.frombuffer(encode(ix), np.uint8)
        io.pwritev(fd, [data], 0)
    finally:
        io.close(fd)


def remove(io, pool_file: Path) -> None:
    """Remove a pool file's index (the file was released); a failure leaves a stale index,
    which names an incarnation no header will name again."""
    try:
        io.unlink(path_of(pool_file), missing_ok=True)
    except OSError as e:
        log.debug("stale segment index of %s left: %s", pool_file, e)


def read(io, path: Path) -> FileIndex | None:
    """The index at ``path``, or None when there is none or it is not whole."""
    try:
        fd = io.open(path, os.O_RDONLY)
    except OSError:  # none, or none readable: the file is scanned
        return None
    try:
        size = io.size(fd)
        if size > (1 << 30):
            return None
        buf = bytearray(size)
        done = 0
        while done < size:
            got = io.preadv(fd, [memoryview(buf)[done:]], done)
            if got <= 0:
                break
            done += got
        return decode(bytes(buf[:done]))
    finally:
        io.close(fd)
