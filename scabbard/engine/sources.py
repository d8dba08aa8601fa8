"""Sources: cut a stream into fixed-size batches (tasks), optionally at a fixed input rate.

:class:`ReplaySource` replays a generated dataset the way the paper's benchmarks
do (LIGHTSABER_NOTES §2.0): the data is read again and again, and copy ``k`` has
its timestamps shifted by ``k * (last timestamp + 1)``, so event time keeps
increasing and windows keep sliding on an endless run.  The source adds no
shift itself: a copy's batch is a :class:`~scabbard.batch.ReplayBatch`, whose
timestamps are shifted where they are read (the fragment adds the shift as it
cuts panes, without a pass of its own); every column is a zero-copy view of the
memory-mapped dataset.  With ``span`` a batch may run on past a copy's end into
the next (a :class:`~scabbard.batch.SpanBatch`, a part per copy), so a task can be
larger than a small dataset - for a fragment that reads it part by part.

Each batch carries its *ingest time*: without a rate limit, the moment the
source hands it over; with ``rate`` tuples/s, the source waits until the whole
batch would have arrived and stamps it with the arrival time of its middle
tuple - so a latency sample is that of the batch's median tuple, batching delay
included.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from scabbard import timers
from scabbard.batch import Batch, ReplayBatch, SpanBatch
from scabbard.compression.rle import non_decreasing
from scabbard.data import Dataset, Table


@dataclass(frozen=True)
class SourceBatch:
    seq: int
    batch: Batch
    ingest_time: float  # time.perf_counter() units


@dataclass(frozen=True, kw_only=True)
class Replay:
    """How a run reads its dataset: endlessly (``loop``; copy ``k`` with its timestamps
    shifted) or once, until ``max_tuples`` tuples or ``duration`` seconds of wall time,
    whichever comes first, at most ``rate`` tuples a second (None: as fast as it is read).
    Keywords only: three numbers in a row are too easy to pass in the wrong order.
    ``loop=None``: endless when ``duration`` or ``max_tuples`` bounds it, else once."""

    rate: float | None = None
    duration: float | None = None
    max_tuples: int | None = None
    loop: bool | None = None

    def __post_init__(self) -> None:
        if self.rate is not None and not self.rate > 0:
            raise ValueError(f"rate must be positive, got {self.rate}")
        if self.duration is not None and not self.duration >= 0:
            raise ValueError(f"duration must be >= 0 seconds, got {self.duration}")
        if self.max_tuples is not None and self.max_tuples < 0:
            raise ValueError(f"max_tuples must be >= 0, got {self.max_tuples}")

    @property
    def endless(self) -> bool:
        if self.loop is not None:
            return self.loop
        return self.duration is not None or self.max_tuples is not None


ONCE = Replay()


def replays_in_order(ts) -> bool:
    """Event times ``ts`` never decrease, and a copy of them replayed after the last (shifted
    by the replay's step) starts after it ends: the first is >= 0 (one pass, in a kernel)."""
    return len(ts) > 0 and int(ts[0]) >= 0 and bool(non_decreasing(np.asarray(ts)))


class ReplaySource:
    """Replay a dataset's stream in batches of ``batch_rows`` as ``replay`` says (default:
    once; see :class:`Replay`).

    The stream is a pure function of the offset, so a restarted engine resumes it
    with ``start`` (the first offset to emit; ``max_tuples`` still counts from 0).
    With a rate, tuple ``i`` arrives at ``started_at + i / rate`` (wall clock,
    ``time.time()``; default: now - ``start / rate``): the input that arrived while
    an engine was down is waiting for it when it comes back, as from a real feed.
    """

    def __init__(self, data: Dataset | Table, batch_rows: int = 1 << 20, replay: Replay = ONCE,
                 start: int = 0, started_at: float | None = None, span: bool = False):
        table = data.stream if isinstance(data, Dataset) else data
        if table.rows == 0:
            raise ValueError("cannot replay an empty dataset")
        if batch_rows <= 0:
            raise ValueError(f"batch_rows must be positive, got {batch_rows}")
        self.table = table
        self.schema = table.schema
        # plain arrays over the dataset's memory maps: a slice of a ``np.memmap`` is a memmap,
        # made through a Python hook (``__array_finalize__``), which cost the dispatcher a
        # fifth of its time at a billion tuples a second (SG1)
        self._columns = tuple(np.asarray(c) for c in table.columns)
        self.batch_rows = batch_rows
        self.replay = replay
        self.rate, self.duration, self.max_tuples = replay.rate, replay.duration, replay.max_tuples
        self.loop = loop = replay.endless
        ts = table.column("timestamp")
        self.step = int(ts[-1]) + 1  # replay k is shifted by k * step
        if start < 0 or (not loop and start > table.rows):
            raise ValueError(f"start offset {start} is outside the stream")
        self.start = start
        self.started_at = started_at
        self.exhausted = False  # the stream ended (not stopped by duration or stop())
        # batches may run on past a copy's end into the next (a SpanBatch): for readers that
        # go part by part, so tasks may be larger than a small dataset
        self.span = span
        self._stopped = False

    def stop(self) -> None:
        self._stopped = True

    def peek(self) -> Batch:
        """The first batch, without starting the stream (for warming up)."""
        return self._batch(0, min(self.batch_rows, self.table.rows), 0, 0)

    @functools.cached_property
    def ordered(self) -> bool:
        """Every batch's event times never decrease - checked here, once, in one pass over the
        table's timestamps (a dataset's writer refuses decreasing ones, but a table may be
        made otherwise), and a replayed copy, shifted by ``step``, starts after the last
        one ends (its first timestamp >= 0).  A compressor may then find the runs of the
        timestamps without reading them all (:attr:`Compression.ordered_time`)."""
        return self.schema.index("timestamp") == 0 and replays_in_order(
            self.table.column("timestamp"))

    def tuples_per_ms(self) -> float:
        """Average input tuples per ms of event time (to size batches)."""
        ts = self.table.column("timestamp")
        return self.table.rows / max(1, int(ts[-1]) - int(ts[0]) + 1)

    def _origin(self) -> float:
        """The perf_counter() moment tuple 0 arrived (with a rate)."""
        if self.started_at is None:
            self.started_at = time.time() - self.start / self.rate
        return time.perf_counter() - (time.time() - self.started_at)

    def arrival_time(self, offset: int, n: int, default: float) -> float:
        """When the middle tuple of ``offset .. offset + n`` arrived (perf_counter units);
        ``default`` without a rate (the input was there all along)."""
        if self.rate is None:
            return default
        return self._origin() + (offset + n / 2) / self.rate

    def ranges(self) -> Iterator[tuple[int, int, int, int]]:
        """The stream's batches from ``start`` as ``(offset, row, n, copy)``: ``n`` tuples from
        row ``row`` of copy ``copy`` of the dataset (on into the next copies with ``span``),
        at stream offset ``offset``.  Pure arithmetic (no data is touched); it ends where the
        stream ends (``max_tuples``, or one pass without ``loop``), never at ``duration``.
        Parallel ingress (:mod:`scabbard.engine.ingress`) deals them out to its partitions."""
        rows = self.table.rows
        offset = self.start
        while True:
            copy, lo = divmod(offset, rows)
            if copy and not self.loop:
                return
            n = self.batch_rows if self.span and self.loop else min(self.batch_rows, rows - lo)
            if self.max_tuples is not None:
                n = min(n, self.max_tuples - offset)
                if n <= 0:
                    return
            yield offset, lo, n, copy
            offset += n

    def origin(self) -> float:
        """The perf_counter() moment the input started: tuple 0's arrival with a rate."""
        return time.perf_counter() if self.rate is None else self._origin()

    def cut(self, seq: int, r: tuple[int, int, int, int], origin: float,
            sleep=time.sleep) -> SourceBatch:
        """Batch ``r`` of :meth:`ranges` as batch number ``seq``: its columns (timestamps
        shifted), once it has arrived with a rate (``sleep`` waits; ``origin``: from
        :meth:`origin`)."""
        offset, lo, n, copy = r
        batch = self._batch(lo, lo + n, copy, offset)
        if self.rate is not None:
            wait = origin + (offset + n) / self.rate - time.perf_counter()
            if wait > 0:
                sleep(wait)
            ingest = origin + (offset + n / 2) / self.rate
        else:
            ingest = time.perf_counter()
        return SourceBatch(seq, batch, ingest)

    def batches(self) -> Iterator[SourceBatch]:
        t0 = time.perf_counter()
        origin = self.origin()
        ranges = self.ranges()
        seq = 0
        while not self._stopped:
            r = next(ranges, None)
            if r is None:
                self.exhausted = True
                return
            if self.duration is not None and time.perf_counter() - t0 >= self.duration:
                return
            yield self.cut(seq, r, origin)
            seq += 1

    def _batch(self, lo: int, hi: int, copy: int, offset: int) -> Batch:
        span, n = timers.start(), hi - lo
        rows = self.table.rows
        if hi <= rows:
            batch = self._part(lo, hi, copy, offset)
        else:  # on past the copy's end: a part per copy
            parts, at, left = [], offset, n
            while left > 0:
                m = min(left, rows - lo)
                parts.append(self._part(lo, lo + m, copy, at))
                at, left, lo, copy = at + m, left - m, 0, copy + 1
            batch = SpanBatch(self.schema, parts, offset)
        timers.stop(span, "source", n)
        return batch

    def _part(self, lo: int, hi: int, copy: int, offset: int) -> Batch:
        cols = tuple(c[lo:hi] for c in self.columns_of(copy))
        return (ReplayBatch(self.schema, cols, offset, copy * self.step) if copy
                else Batch(self.schema, cols, offset))

    def columns_of(self, copy: int) -> tuple[np.ndarray, ...]:
        """The columns the replay's copy ``copy`` is cut from (a subclass may change them:
        the data of an experiment that changes part-way)."""
        return self._columns


class ArraySource:
    """A fixed list of batches (tests, and streams built in memory)."""

    def __init__(self, batches: list[Batch]):
        if not batches:
            raise ValueError("no batches")
        self.schema = batches[0].schema
        self._batches = batches

    def stop(self) -> None:
        pass

    def peek(self) -> Batch:
        return self._batches[0]

    def tuples_per_ms(self) -> float:
        ts = np.concatenate([b.timestamps for b in self._batches])
        return len(ts) / max(1, int(ts[-1]) - int(ts[0]) + 1)

    def batches(self) -> Iterator[SourceBatch]:
        for seq, b in enumerate(self._batches):
            yield SourceBatch(seq, b, time.perf_counter())


class StopAfter:
    """``source`` cut after its first ``k`` batches, as if the engine were stopped there: a
    fault-tolerant run is then not at the end of its stream and continues with a recovery
    (the tests' and the experiments' way to stop a run at a chosen task)."""

    def __init__(self, source, k: int):
        self.source, self.k = source, k

    def batches(self):
        for i, b in enumerate(self.source.batches()):
            if i >= self.k:
                return
            yield b

    def __getattr__(self, name):
        return getattr(self.source, name)
