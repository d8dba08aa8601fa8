"""The on-disk segment: one p-unit (a batch of tuples, or a part of operator state).

Layout, little-endian, starting on an ``align`` boundary of its file::

    0    8s  magic  b"SCABSEG1"
    8    H   format version (1)
    10   H   kind (0 stream data, 1 state)
    12   I   header length: this fixed part + column descriptors + metadata, multiple of 8
    16   I   stream id
    20   I   number of columns
    24   Q   file epoch (which incarnation of the pooled file wrote it)
    32   Q   first offset (stream position of the first tuple)
    40   Q   tuple count
    48   Q   batch id
    56   q   min event time
    64   q   max event time
    72   Q   payload length (the stored columns, each padded to 8 bytes)
    80   Q   segment length (header + payload rounded up to ``align``)
    88   16s schema fingerprint
    104  Q   header checksum (bytes [0, header length) with this field zero; it covers the next)
    112  Q   payload checksum (so the two together cover header and payload): each
             column's padded bytes hashed with the previous column's sum as seed
    120  I   metadata length (uint64 words x 8: vector clock, dependencies)
    124  I   reserved
    128  per column, 48 bytes: H codec id, H reserved, I flags, Q raw length,
         Q stored length, 24s codec parameters
    ...  metadata words
    header length: the columns, one after the other, each padded to 8 bytes.

Codec 0 is "raw" (the column's little-endian bytes); any other id is looked up in
the codec registry (:mod:`scabbard.compression`) and the column decoded with the
codec its 24 parameter bytes describe - so segments of one stream may each use
other codecs (adaptive compression, deoptimisation) and all decode.  A segment
that fails any check raises :class:`CorruptSegment` naming the file and the
position; it is never returned as data.
"""

from __future__ import annotations

import struct
import sys
import threading
from dataclasses import dataclass

import numpy as np

from scabbard import timers
from scabbard.batch import Batch
from scabbard.compression import CodecError, codec_from_params
from scabbard.compression.policy import RawColumn
from scabbard.schema import Schema
from scabbard.storage.checksum import (
    checksum,
    copy_checksum,
    copy_checksum_parts,
    first_failing,
)
from scabbard.storage.errors import CorruptSegment, FormatVersionError

MAGIC = b"SCABSEG1"
VERSION = 2  # 2: the payload checksum chains per column
PAGE = 4096
KIND_DATA, KIND_STATE = 0, 1
CODEC_RAW = 0

_FIXED = struct.Struct("<8sHHIIIQQQQqqQQ16sQQII")
_COLUMN = struct.Struct("<HHIQQ24s")
_FP_BYTES = struct.Struct("16s")
assert _FIXED.size == 128 and _COLUMN.size == 48
_HEADER_SUM_AT, _SUM_AT = 104, 112


def round_up(n: int, align: int) -> int:
    return -(-n // align) * align


def aligned_empty(nbytes: int, align: int = PAGE) -> np.ndarray:
    """A uint8 buffer whose address is a multiple of ``align`` (what O_DIRECT needs)."""
    return _aligned_view(np.empty(nbytes + align, dtype=np.uint8), nbytes, align)


def _aligned_view(raw: np.ndarray, nbytes: int, align: int = PAGE) -> np.ndarray:
    start = (-raw.ctypes.data) % align
    return raw[start:start + nbytes]


def _refs_when_only_listed() -> int:
    """``sys.getrefcount`` of an array that only a list holds, read in a loop over the list
    (the list's reference, the loop's and the call's): measured, not assumed."""
    owners = [np.empty(1, np.uint8)]
    for raw in owners:
        return sys.getrefcount(raw)
    raise AssertionError


class ReadBuffers:
    """Aligned buffers to read into, handed out again once nothing refers to them.

    A read hands out a view of a buffer; a batch decoded from it without a copy is made of
    views of the same memory, and numpy's views all refer to the array that owns it.  So a
    buffer whose only reference is this pool's (``sys.getrefcount``) is read into again: no
    batch still in use is overwritten, and nothing has to be given back.  Fresh memory costs
    a page fault and the zeroing of each page on first touch - on this kind of virtual
    machine 0.1-2 GB/s, once the host has taken back memory a killed engine freed: a
    recovery replaying 230 MB of stored input into fresh buffers spent most of its replay
    there.  ``cap``: bytes kept; a read beyond them gets a buffer of its own."""

    _FREE = _refs_when_only_listed()

    def __init__(self, cap: int):
        self.cap = cap
        self._owners: list[np.ndarray] = []
        self._lock = threading.Lock()

    def take(self, nbytes: int) -> np.ndarray:
        want = nbytes + PAGE
        with self._lock:  # the view is made under the lock: then the buffer is in use
            for raw in self._owners:
                if want <= raw.nbytes <= 2 * want and sys.getrefcount(raw) == self._FREE:
                    return _aligned_view(raw, nbytes)
            raw = np.empty(want, np.uint8)
            if sum(r.nbytes for r in self._owners) + want <= self.cap:
                self._owners.append(raw)
            return _aligned_view(raw, nbytes)

    @property
    def kept_bytes(self) -> int:
        with self._lock:
            return sum(r.nbytes for r in self._owners)


@dataclass(frozen=True)
class ColumnInfo:
    codec: int
    flags: int
    raw_len: int
    stored_len: int
    params: bytes


@dataclass(frozen=True)
class SegmentHeader:
    kind: int
    header_len: int
    stream_id: int
    epoch: int
    first_offset: int
    count: int
    batch_id: int
    min_ts: int
    max_ts: int
    payload_len: int
    segment_len: int
    fingerprint: str
    header_sum: int
    data_sum: int
    columns: tuple[ColumnInfo, ...]
    meta: np.ndarray  # uint64 words

    @property
    def end_offset(self) -> int:
        return self.first_offset + self.count


def header_length(ncols: int, meta_words: int) -> int:
    return _FIXED.size + _COLUMN.size * ncols + 8 * meta_words


def _pad8(n: int) -> int:
    return round_up(n, 8)


def segment_length(batch: Batch, meta_words: int = 0, align: int = PAGE,
                   stored: list | None = None) -> int:
    sizes = [p.nbytes for _, p in stored] if stored is not None else batch.column_nbytes()
    payload = sum(_pad8(n) for n in sizes)
    return round_up(header_length(len(sizes), meta_words) + payload, align)


@dataclass
class Payload:
    """A segment whose columns are written and hashed but whose header is not yet: what a
    worker makes of a batch before its place in the stream is known (:func:`encode_payload`),
    sealed with that place by :func:`seal`.  ``seg``: the segment's bytes (a view of
    ``full``, the buffer it lives in), the header's ``hlen`` bytes still to be written."""

    full: np.ndarray
    seg: np.ndarray
    hlen: int
    payload_len: int
    descs: bytes
    dsum: int
    count: int
    ncols: int
    min_ts: int
    max_ts: int
    fingerprint: bytes
    meta_words: int

    @property
    def seglen(self) -> int:
        return self.seg.nbytes


def encode_payload(batch: Batch, *, meta_words: int = 0, align: int = PAGE,
                   out: np.ndarray | None = None, stored: list | None = None) -> Payload:
    """``batch``'s columns copied and hashed into ``out`` (or a new aligned buffer) behind
    room for the header; see :func:`encode`.  Runs on any thread: nothing in it depends on
    where the segment will lie."""
    span = timers.start()
    raw = batch.column_nbytes()
    if stored is not None and len(stored) != len(raw):
        raise ValueError(f"{len(stored)} stored columns for {len(raw)} in the batch")
    sizes = raw if stored is None else [p.nbytes for _, p in stored]
    hlen = header_length(len(sizes), meta_words)
    payload = sum(_pad8(n) for n in sizes)
    seglen = round_up(hlen + payload, align)
    if out is None:
        out = aligned_empty(seglen, PAGE)
    elif out.nbytes < seglen:
        raise ValueError(f"buffer of {out.nbytes} bytes is too small for a {seglen}-byte segment")
    seg = out[:seglen]
    pos, dsum = hlen, 0
    descs = []
    for i, (r, n) in enumerate(zip(raw, sizes, strict=True)):  # copied and hashed in one pass
        dst = seg[pos:pos + _pad8(n)]
        if stored is None:  # the column as it is: its pieces copied, a deferred shift added
            codec = None
            dsum = copy_checksum_parts(batch.column_parts(i), dst, dsum)
        else:
            codec, p = stored[i]
            if isinstance(p, RawColumn):  # stored raw, by reference: copied from its pieces
                dsum = copy_checksum_parts(p.parts, dst, dsum)
            else:
                dsum = copy_checksum(np.ascontiguousarray(p).reshape(-1).view(np.uint8), dst,
                                     dsum)
        cid, params = (CODEC_RAW, b"") if codec is None else (codec.codec_id, codec.to_params())
        descs.append(_COLUMN.pack(cid, 0, 0, r, n, params))
        pos += _pad8(n)
    seg[pos:] = 0
    mn, mx = batch.event_edges() if batch.schema.stream and len(batch) else (0, 0)
    timers.stop(span, "encode", len(batch))
    return Payload(out, seg, hlen, payload, b"".join(descs), dsum, len(batch), len(sizes),
                   mn, mx, batch.schema.fingerprint.encode(), meta_words)


def warm_up(batch: Batch) -> None:
    """Load the copy-and-hash kernels from numba's cache: a few of ``batch``'s rows encoded
    as they are, as a writable copy (a replayed batch), as a codec's output (bytes) and as
    a column in pieces."""
    head = batch.segments()[0].slice(0, min(len(batch.segments()[0]), 64))
    copied = head.writable_copy()
    for b in (head, copied):
        encode_payload(b)
    codec_out = np.ascontiguousarray(copied.columns[0]).reshape(-1).view(np.uint8)
    copy_checksum(codec_out, aligned_empty(_pad8(codec_out.nbytes)), 0)
    for writable in (False, True):  # a column in pieces (a span's copies, shifted)
        piece = np.arange(8, dtype=np.int64)
        piece.flags.writeable = writable
        copy_checksum_parts([(piece, 5), (piece, 0)], aligned_empty(128), 0)


def seal(p: Payload, *, stream_id: int, epoch: int, first_offset: int, batch_id: int,
         kind: int = KIND_DATA, meta: np.ndarray | None = None) -> np.ndarray:
    """Write ``p``'s header - its place in the stream - and return the whole segment."""
    meta = np.zeros(0, np.uint64) if meta is None else np.ascontiguousarray(meta, np.uint64)
    if len(meta) != p.meta_words:
        raise ValueError(f"{len(meta)} metadata words for a segment made with {p.meta_words}")
    seg = p.seg
    fixed = _FIXED.pack(MAGIC, VERSION, kind, p.hlen, stream_id, p.ncols, epoch, first_offset,
                        p.count, batch_id, p.min_ts, p.max_ts, p.payload_len, p.seglen,
                        p.fingerprint, 0, 0, meta.nbytes, 0)
    seg[:p.hlen] = np.frombuffer(fixed + p.descs + meta.tobytes(), np.uint8)
    struct.pack_into("<Q", seg, _SUM_AT, p.dsum)
    _seal_header(seg, p.hlen)
    return seg


def encode(batch: Batch, *, stream_id: int, epoch: int, batch_id: int,
           meta: np.ndarray | None = None, align: int = PAGE, out: np.ndarray | None = None,
           stored: list | None = None) -> np.ndarray:
    """Write ``batch`` as one data segment, its length a multiple of ``align``, into ``out``
    (or a new aligned buffer); return the segment (:func:`encode_payload` and :func:`seal`
    make any other kind).

    ``stored``: per column, ``(codec, payload)`` - the column already compressed (see
    :mod:`scabbard.compression.policy`); by default every column is stored raw.
    The returned view has the segment's full (aligned) length; padding is zero.
    """
    words = 0 if meta is None else len(meta)
    p = encode_payload(batch, meta_words=words, align=align, out=out, stored=stored)
    return seal(p, stream_id=stream_id, epoch=epoch, first_offset=batch.offset,
                batch_id=batch_id, kind=KIND_DATA, meta=meta)


def _seal_header(seg: np.ndarray, hlen: int) -> None:
    struct.pack_into("<Q", seg, _HEADER_SUM_AT, 0)
    struct.pack_into("<Q", seg, _HEADER_SUM_AT, checksum(seg[:hlen]))


def parse_header(buf: np.ndarray, where: str = "<memory>", position: int = 0,
                 file_len: int | None = None) -> SegmentHeader:
    """Parse and verify a segment header from the first bytes of ``buf``.

    Raises :class:`CorruptSegment` if the header is damaged; a block of zeros
    (unwritten space) raises it with problem ``"no segment (zeros)"``.
    """
    if buf.nbytes < _FIXED.size:
        raise CorruptSegment(where, position, f"truncated: {buf.nbytes} bytes, no header")
    f = _FIXED.unpack(buf[:_FIXED.size].tobytes())
    (magic, version, kind, hlen, stream_id, ncols, epoch, first, count, batch_id, mn, mx,
     payload, seglen, fp, hsum, dsum, meta_len, _) = f
    if magic != MAGIC:
        if not buf[:_FIXED.size].any():
            raise CorruptSegment(where, position, "no segment (zeros)")
        raise CorruptSegment(where, position, f"bad magic {magic!r}")
    if version != VERSION:
        raise FormatVersionError(f"{where} at byte {position}: segment format version {version}; "
                                 f"this build reads version {VERSION}")
    if hlen != header_length(ncols, meta_len // 8) or meta_len % 8 or hlen > buf.nbytes:
        raise CorruptSegment(where, position, f"inconsistent header length {hlen}")
    head = buf[:hlen].copy()
    head[_HEADER_SUM_AT:_HEADER_SUM_AT + 8] = 0
    if checksum(head) != hsum:
        raise CorruptSegment(where, position, "header checksum mismatch")
    if seglen < hlen + payload:
        raise CorruptSegment(where, position, f"segment length {seglen} < header + payload")
    if file_len is not None and position + seglen > file_len:
        raise CorruptSegment(where, position, f"truncated: segment of {seglen} bytes overruns "
                                              f"the file ({file_len} bytes)")
    cols = []
    for i in range(ncols):
        at = _FIXED.size + i * _COLUMN.size
        codec, _, flags, raw_len, stored_len, params = _COLUMN.unpack(
            buf[at:at + _COLUMN.size].tobytes())
        cols.append(ColumnInfo(codec, flags, raw_len, stored_len, params))
    if sum(_pad8(c.stored_len) for c in cols) != payload:
        raise CorruptSegment(where, position, "column lengths do not add up to the payload")
    meta_at = _FIXED.size + ncols * _COLUMN.size
    meta = buf[meta_at:meta_at + meta_len].copy().view(np.uint64)
    return SegmentHeader(kind, hlen, stream_id, epoch, first, count, batch_id, mn, mx, payload,
                         seglen, fp.decode(errors="replace"), hsum, dsum, tuple(cols), meta)


RUN_SEGMENTS = 64  # fewer are decoded one by one: loading the kernel from numba's cache the
# first time (~25 ms here) costs more than a few decodes (0.1 ms each for a small segment)


def verified_run(buf: np.ndarray, positions, lengths, schema: Schema,
                 least: int = RUN_SEGMENTS) -> int:
    """How many of the segments at byte ``positions`` of ``buf`` (``lengths`` bytes each, in
    order) verify, counted until the first that does not: every check of :func:`decode` but
    the codecs' (a codec's parameters are checksummed with the header), in one kernel call -
    a stream tail of thousands of small segments in milliseconds.  :func:`decode` tells why
    the first that does not verify fails (or finds it does: the run goes on after it).  0
    for fewer than ``least`` segments: decode them one by one."""
    pos = np.asarray(positions, np.int64)
    if len(pos) < least or buf.nbytes % 8 or np.any(pos % 8):
        return 0  # few, or not word-aligned: decode says
    words = buf.reshape(-1).view(np.uint8).view(np.uint64)
    return first_failing(words, pos // 8, np.asarray(lengths, np.int64) // 8,
                         _FIXED.size // 8, _FP_BYTES.pack(schema.fingerprint.encode()),
                         np.array([f.itemsize for f in schema.fields], np.int64),
                         MAGIC, VERSION)


def decode(buf: np.ndarray, schema: Schema, where: str = "<memory>", position: int = 0,
           copy: bool = True, verified: bool = False) -> tuple[SegmentHeader, Batch]:
    """Verify the whole segment in ``buf`` and return its header and batch.

    With ``copy=False`` the batch's columns are views of ``buf``; ``verified``: its payload
    checksum was checked (:func:`verified_run`), not hashed again.
    """
    h = parse_header(buf, where, position)
    end = h.header_len + h.payload_len
    if buf.nbytes < end:
        raise CorruptSegment(where, position, f"truncated: {buf.nbytes} of {end} bytes")
    dsum, pos = 0 if not verified else h.data_sum, h.header_len
    for c in h.columns if not verified else ():
        dsum = checksum(buf[pos:pos + _pad8(c.stored_len)], dsum)
        pos += _pad8(c.stored_len)
    if dsum != h.data_sum:
        raise CorruptSegment(where, position, "checksum mismatch (torn or damaged payload)")
    if h.fingerprint != schema.fingerprint:
        raise CorruptSegment(where, position, f"written with schema {h.fingerprint}, expected "
                                              f"{schema.name} ({schema.fingerprint})")
    if len(h.columns) != len(schema.fields):
        raise CorruptSegment(where, position, f"{len(h.columns)} columns, schema has "
                                              f"{len(schema.fields)}")
    pos = h.header_len
    cols = []
    for f, c in zip(schema.fields, h.columns, strict=True):
        want = h.count * f.itemsize
        if c.raw_len != want:
            raise CorruptSegment(where, position, f"column {f.name!r}: {c.raw_len} bytes for "
                                                  f"{h.count} rows, expected {want}")
        data = buf[pos:pos + c.stored_len]
        if c.codec == CODEC_RAW:
            col = data.view(f.numpy_dtype).reshape(f.column_shape(h.count))
            cols.append(col.copy() if copy else col)
        else:
            try:
                col = codec_from_params(c.codec, c.params).decode(data, h.count, f.dtype)
            except CodecError as e:
                raise CorruptSegment(where, position, f"column {f.name!r}: {e}") from None
            if col.dtype != f.numpy_dtype or col.shape != f.column_shape(h.count):
                raise CorruptSegment(where, position, f"column {f.name!r}: codec {c.codec} "
                                                      f"decoded {col.dtype}{col.shape}")
            cols.append(col)
        pos += _pad8(c.stored_len)
    return h, Batch(schema, tuple(cols), h.first_offset)
