"""A synchronous persistent log - the paper's "Kafka++" baseline (§6.1, §6.3, Fig. 8).

What a persistent message broker does on its write path, without the broker: records
are serialized row by row (the paper's C struct layout, ``row_bytes`` per tuple),
batched, compressed with a fast codec (LZ4), appended to a partition file and
**flushed to disk (fdatasync) before the batch is acknowledged**.  Each producer
thread owns one partition, as Kafka's producers write to their own partitions.

On disk a partition is a sequence of frames::

    0   8s  magic b"SCABLOG1"
    8   Q   first offset (tuples before this batch in the partition)
    16  I   tuples in the batch
    20  I   stored payload length
    24  I   raw payload length (tuples x row bytes)
    28  I   codec (0 raw, 1 LZ4 block)
    32  Q   checksum of the stored payload
    40      payload, then zero padding to 8 bytes

:func:`read_partition` verifies every frame and stops at the first torn or damaged
one: everything acknowledged before a crash is read back, nothing unacknowledged is
claimed.  :func:`ingest` replays a query's dataset through ``producers`` partitions
for a while and reports throughput and the append-to-acknowledgement latency.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import cramjam
import numpy as np

from scabbard.batch import Batch
from scabbard.engine.metrics import PEER_PERCENTILES, percentiles_ms
from scabbard.errors import Failure
from scabbard.schema import Schema
from scabbard.storage.checksum import checksum

MAGIC = b"SCABLOG1"
_FRAME = struct.Struct("<8sQIIIIQ")
RAW, LZ4 = 0, 1


class LogError(Failure, RuntimeError):
    """A partition cannot be written or read."""


def to_rows(batch: Batch) -> np.ndarray:
    """The batch as the C structs a broker's records carry: ``row_bytes`` per tuple, fields
    in schema order, trailing padding zero (one vectorised copy per column)."""
    schema = batch.schema
    n = len(batch)
    rows = np.zeros((n, schema.row_bytes), np.uint8)
    at = 0
    for f, col in zip(schema.fields, batch.columns, strict=True):
        width = f.itemsize
        rows[:, at:at + width] = np.ascontiguousarray(col).view(np.uint8).reshape(n, width)
        at += width
    return rows.reshape(-1)


def from_rows(schema: Schema, rows: np.ndarray, offset: int = 0) -> Batch:
    n = len(rows) // schema.row_bytes
    table = rows.reshape(n, schema.row_bytes)
    cols, at = [], 0
    for f in schema.fields:
        width = f.itemsize
        raw = np.ascontiguousarray(table[:, at:at + width]).reshape(-1)
        cols.append(raw.view(f.numpy_dtype).reshape(f.column_shape(n)))
        at += width
    return Batch(schema, tuple(cols), offset)


_writev, _write = os.writev, os.write  # the system calls (tests replace them with short ones)


def _write_frame(fd: int, bufs: list) -> None:
    """Append all of ``bufs``: a short write (a signal, a nearly full disk) is completed from
    where it stopped; a write that makes no progress raises."""
    total = sum(memoryview(b).nbytes for b in bufs)
    done = _writev(fd, bufs)
    if done == total:
        return
    flat = b"".join(bytes(memoryview(b).cast("B")) for b in bufs)
    while done < total:
        n = _write(fd, flat[done:])
        if n <= 0:
            raise OSError(errno.EIO, f"a write made no progress ({done} of {total} bytes)")
        done += n


class Partition:
    """One append-only partition file; ``append`` returns once the batch is on disk."""

    def __init__(self, path: str | Path, codec: int = LZ4, sync: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.codec, self.sync = codec, sync
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.end, self.valid = 0, 0  # tuples, and bytes of whole frames
        for frame_end, first, n, _ in _frames(np.fromfile(self.path, np.uint8), False):
            self.end, self.valid = first + n, frame_end
        if os.fstat(self.fd).st_size > self.valid:  # a torn tail from a crash: cut it off
            os.ftruncate(self.fd, self.valid)
        self.bytes_written = 0

    def append(self, rows: np.ndarray, tuples: int) -> int:
        """Compress, write and flush one batch of ``tuples`` serialized rows; its end offset."""
        raw = rows.tobytes()
        payload = bytes(cramjam.lz4.compress_block(raw, store_size=False)) \
            if self.codec == LZ4 else raw
        body = np.frombuffer(payload, np.uint8)
        pad = (-len(payload)) % 8
        padded = np.concatenate([body, np.zeros(pad, np.uint8)]) if pad else body
        head = _FRAME.pack(MAGIC, self.end, tuples, len(payload), len(raw), self.codec,
                           checksum(padded))
        try:
            _write_frame(self.fd, [head, padded])
            if self.sync:
                os.fdatasync(self.fd)
        except OSError as e:
            with contextlib.suppress(OSError):  # the next frame must not follow a torn one
                os.ftruncate(self.fd, self.valid)
            raise LogError(f"appending to {self.path} failed: {e}") from e
        self.end += tuples
        self.valid += len(head) + len(padded)
        self.bytes_written += len(head) + len(padded)
        return self.end

    def close(self) -> None:
        os.close(self.fd)


def read_partition(path: str | Path, with_data: bool = True):
    """Yield ``(first offset, tuples, rows or None)`` of every intact frame, in order; stop at
    the first torn or damaged one (the tail a crash may leave)."""
    for _, first, n, rows in _frames(np.fromfile(path, np.uint8), with_data):
        yield first, n, rows


def _frames(data: np.ndarray, with_data: bool):
    pos, expect = 0, 0
    while pos + _FRAME.size <= len(data):
        magic, first, n, stored, raw_len, codec, total = _FRAME.unpack(
            data[pos:pos + _FRAME.size].tobytes())
        end = pos + _FRAME.size + stored + (-stored) % 8
        if magic != MAGIC or first != expect or end > len(data) or codec not in (RAW, LZ4):
            return
        padded = data[pos + _FRAME.size:end]
        if checksum(padded) != total:
            return
        rows = None
        if with_data:
            payload = padded[:stored].tobytes()
            raw = bytes(cramjam.lz4.decompress_block(payload, output_len=raw_len)) \
                if codec == LZ4 else payload
            rows = np.frombuffer(raw, np.uint8)
        yield end, first, n, rows
        expect = first + n
        pos = end


@dataclass(frozen=True)
class SyncLogResult:
    query: str
    batch_bytes: int
    producers: int
    tuples: int
    seconds: float
    row_bytes: int
    disk_bytes: int
    latency_ms: dict  # append -> acknowledged, per batch: p5 p25 p50 p75 p95 p99

    @property
    def tuples_per_s(self) -> float:
        return self.tuples / self.seconds

    @property
    def disk_mb_s(self) -> float:
        return self.disk_bytes / self.seconds / 1e6

    def line(self) -> str:
        """One line: the query, the batch size, tuples/s, MB/s of rows and to disk, the
        append-to-acknowledgement latency's p50 and p95 (``scabbard bench synclog``)."""
        lat = self.latency_ms
        return (f"{self.query:5} batch {self.batch_bytes >> 10:6} KiB  "
                f"{self.tuples_per_s / 1e6:7.2f} M tuples/s  "
                f"{self.tuples_per_s * self.row_bytes / 1e6:7.0f} MB/s of rows  "
                f"{self.disk_mb_s:6.0f} MB/s to disk  latency ms p50 {lat['p50']:7.2f}  "
                f"p95 {lat['p95']:7.2f}")


def ingest(query: str, dataset, folder: str | Path, seconds: float = 3.0,
           batch_bytes: int = 1 << 20, producers: int = 2, codec: int = LZ4) -> SyncLogResult:
    """Each producer serializes the dataset's tuples batch by batch and appends them to its
    own partition, waiting for each flush; for ``seconds``.  Throughput and latency."""
    schema = dataset.schema
    rows_per_batch = max(1, batch_bytes // schema.row_bytes)
    table = dataset.stream
    folder = Path(folder)
    for old in folder.glob("partition-*.log"):  # a benchmark starts from empty partitions
        old.unlink()
    latencies: list[list[float]] = [[] for _ in range(producers)]
    counts = [0] * producers
    written = [0] * producers
    errors: list[BaseException] = []
    stop = time.perf_counter() + seconds

    def produce(i: int) -> None:
        part = Partition(folder / f"partition-{i}.log", codec)
        lo = (i * table.rows // producers) // rows_per_batch * rows_per_batch
        try:
            while time.perf_counter() < stop:
                hi = min(lo + rows_per_batch, table.rows)
                t0 = time.perf_counter()
                rows = to_rows(table.batch(lo, hi))  # serialization is on the record's path
                part.append(rows, hi - lo)
                latencies[i].append(time.perf_counter() - t0)
                counts[i] += hi - lo
                lo = 0 if hi >= table.rows else hi
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            written[i] = part.bytes_written
            part.close()

    t0 = time.perf_counter()
    threads = [threading.Thread(target=produce, args=(i,), name=f"producer-{i}")
               for i in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    secs = time.perf_counter() - t0
    if errors:
        raise errors[0]
    pct = percentiles_ms([x for per in latencies for x in per], PEER_PERCENTILES)
    return SyncLogResult(query, batch_bytes, producers, sum(counts), secs, schema.row_bytes,
                         sum(written), pct)


class LoggedSource:
    """A source whose every batch is appended to a :class:`Partition` - serialized, LZ4,
    fdatasync - before the engine sees it: stream persistence through a synchronous log, as
    the paper's Flink++ persists its input through Kafka++ (Fig. 9).  Everything else is the
    wrapped source's."""

    def __init__(self, source, path: str | Path, codec: int = LZ4):
        self._source = source
        self.partition = Partition(path, codec)

    def batches(self):
        try:
            for sb in self._source.batches():
                self.partition.append(to_rows(sb.batch), len(sb.batch))
                yield sb
        finally:
            self.partition.close()

    def __getattr__(self, name):
        return getattr(self._source, name)

