"""The persisted ingress as the engine's task feed (paper §3.1, §3.4; docs/design.md).

* :class:`PersistedFeed` - each source batch (after the operators persistence push-up moved
  before the p-stream, and compressed) is written to the ingress p-stream behind a retain
  marker and becomes a task only once it is stored: persisted data is never processed
  before it is durable.  Writing runs ahead of the tasks by what the p-stream holds in
  memory, so disk writes and processing overlap.
* :class:`ReplayFeed` - recovery: the stored input after a checkpoint, read back, as tasks;
  then the feed that continues after it.
* :class:`InputRelease` - without checkpoints, input no open window needs any more is
  released (GC) as tasks are assembled.
* :func:`run_persisted` - a query with its input persisted (no checkpoints): what
  ``scabbard run --persist-input`` and the ingest experiments run.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from scabbard.batch import Batch, SpanBatch
from scabbard.compression.policy import Compression
from scabbard.data import Dataset
from scabbard.engine import Engine, EngineConfig, NullSink, ReplaySource, RunReport, Sink
from scabbard.engine.ingress import PartitionedFeed, Prepared
from scabbard.engine.ports import Task
from scabbard.engine.sources import ONCE, Replay
from scabbard.faults import crashpoint
from scabbard.ft.config import PersistConfig
from scabbard.pog import POG, PStream, PUnit
from scabbard.pog.pstream import PStreamError
from scabbard.query import Query
from scabbard.storage import BlockManager
from scabbard.storage import segment as seg_fmt

INGRESS, READER = "input", "query"


def ingress_stream(pog: POG, engine: Engine, compress=None) -> PStream:
    """The ingress p-stream of ``engine``'s input: in memory ahead of the workers, enough to
    overlap disk and CPU and for the writer to bulk several p-units into one large write -
    and at least two pool files' worth: a task stored in pieces (up to a file) is staged
    whole before the assembly reads any of it."""
    cfg = pog.storage.config
    return pog.pstream(INGRESS, engine.input_schema, max_units=64,
                       max_bytes=max(8 * cfg.bulk_bytes, 2 * cfg.file_bytes), compress=compress)


# a task of a global aggregate (its fragment reads a batch piece by piece) is stored as p-units
# of at most this many tuples, each made while its columns are in the cache: SG1's and SM's
# tasks of 2^22 tuples, compressed whole, cost 2-4x per tuple what smaller pieces do
UNIT_ROWS = 1 << 21


@dataclass(eq=False)
class Staged:
    """A task's input in the ingress p-stream (a :class:`~scabbard.engine.ports.Staged`):
    its p-units, the batch the fragment reads, and ``done`` once all are durable."""

    units: list
    batch: Batch
    done: Future


class IngressWriter:
    """The ingress p-stream written from the workers' tasks (a
    :class:`~scabbard.engine.ports.UnitWriter`): each worker runs push-up on its task's batch,
    compresses what is left and copies it into its segment with its checksum - on its own
    thread, at once with the others - then waits for its turn (every earlier task of the
    feed staged), appends its p-units behind their retain markers and passes the turn on.
    The assembly takes each task once its p-units are acknowledged, and reads them from the
    p-stream then (:meth:`assembled`): persisted input is never *assembled* - its results
    never leave, its state never changes - before it is durable.  ``pieces``: p-units of at
    most this many tuples per task (None: one per task).  ``whole``: the fragment reads a
    task stored in several p-units as the task's own batch (raw input: the p-units are its
    slices), not as a span of the p-units' batches."""

    def __init__(self, pog: POG, stream: str = INGRESS, reader: str = READER,
                 pieces: int | None = None, whole: bool = False):
        self.pog, self.stream, self.reader, self.pieces = pog, stream, reader, pieces
        self.whole = whole
        self.ingress = pog.streams[stream]
        self.ingress.subscribe(None, reader, self.ingress.end)
        self.bm = pog.storage
        self.cond = threading.Condition()
        self.turn = 0  # the next task of the feed to stage
        self.halted = False

    def write(self, seq: int, batch: Batch, reduce) -> Staged:
        try:
            made = [self._make(piece, reduce) for piece in self._pieces(batch)]
        except BaseException:
            self._take_turn(seq)
            self._pass_turn(seq)
            raise
        self._take_turn(seq)
        try:
            units, acks = [], []
            for i, (piece, b, payload) in enumerate(made):
                if i:
                    crashpoint("ingress_piece")
                if len(b):
                    u, ack = self.pog.stage(self.stream, seq, b, piece.end, encoded=payload)
                    units.append(u)
                    acks.append(ack)
            end = self.ingress.end
        finally:
            self._pass_turn(seq)
        if self.whole and len(units) > 1:  # raw: the p-units are the task's slices, in order
            if reduce is not None or sum(len(u) for u in units) != len(batch):
                raise RuntimeError(f"task {seq}: its p-units do not hold its batch whole")
            return Staged(units, batch.at(units[0].offset), _all(acks))
        return Staged(units, _task_batch(units, made, end), _all(acks))

    def assembled(self, staged: Staged) -> None:
        """The task was assembled: its p-units are read (they leave memory; GC may trim)."""
        for unit in staged.units:
            u = self.ingress.read(self.reader, timeout=0)
            if u is None or u.offset != unit.offset:
                raise RuntimeError(f"the ingress p-stream gave {u and u.offset} where the task "
                                   f"assembled stored offset {unit.offset}")

    def stop(self) -> None:
        with self.cond:
            self.halted = True
            self.cond.notify_all()
        self.ingress.halt_writes()

    # -- on a worker's thread ------------------------------------------------------------------
    def _pieces(self, batch: Batch) -> list[Batch]:
        n = self.pieces
        if n is None or len(batch) <= n:
            return [batch]
        return [seg.slice(lo, min(len(seg), lo + n)) for seg in batch.segments()
                for lo in range(0, len(seg), n)]

    def _make(self, piece: Batch, reduce) -> tuple[Batch, Batch, object]:
        """``piece`` after push-up, compressed and copied into its segment (not sealed)."""
        b = reduce(piece) if reduce is not None else piece
        if not len(b):
            return piece, b, None
        compress = self.ingress.compress
        stored = compress(b) if compress is not None else None
        cfg = self.bm.config
        n = seg_fmt.segment_length(b, 1, cfg.align, stored)  # one metadata word: the clock
        payload = seg_fmt.encode_payload(b, meta_words=1, align=cfg.align,
                                         out=self.bm.buffer(n), stored=stored)
        return piece, b, payload

    def _take_turn(self, seq: int) -> None:
        with self.cond:
            while self.turn != seq:
                if self.halted:
                    raise PStreamError(f"p-stream {self.stream!r}: the run stopped before "
                                       f"task {seq} of its input was stored")
                self.cond.wait(0.1)

    def _pass_turn(self, seq: int) -> None:
        with self.cond:
            self.turn = seq + 1
            self.cond.notify_all()


def _task_batch(units: list, made: list, end: int) -> Batch:
    """What the fragment reads of a task stored as ``units``: its one p-unit's batch, its
    p-units' batches as one span batch, or no tuples at offset ``end``."""
    if len(units) == 1:
        return units[0].batch
    if units:
        return SpanBatch(units[0].batch.schema, [p for u in units for p in u.batch.segments()],
                         units[0].offset)
    schema = made[0][1].schema
    return Batch(schema, schema.empty_columns(0), end)


def _all(acks: list[Future]) -> Future:
    """A future resolved once every one of ``acks`` is (with the first error, if any)."""
    done: Future = Future()
    left = [len(acks)]
    lock = threading.Lock()

    def one(f: Future) -> None:
        err = f.exception()
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if err is not None and not done.done():
            done.set_exception(err)
        elif last and not done.done():
            done.set_result(None)

    if not acks:
        done.set_result(None)
    for f in acks:
        f.add_done_callback(one)
    return done


class PersistedFeed:
    """``source`` through the ingress p-stream: the source's batches as tasks whose workers
    persist them (:class:`IngressWriter`, the feed's ``writer``) before the fragment; their
    results are assembled once stored."""

    def __init__(self, pog: POG, engine: Engine, source, stream: str = INGRESS,
                 reader: str = READER):
        self.pog, self.stream, self.reader = pog, stream, reader
        self.ingress = pog.streams[stream]
        self.inner = engine.feed(source, reduce=False)
        cfg = pog.storage.config  # a piece of a task (Engine.task_rows): a quarter of a file
        quarter = engine.piece_rows(cfg.file_bytes, cfg.data_start)
        pieces = (min(UNIT_ROWS, quarter) if engine.spans_copies
                  else quarter if engine.raw_tasks_in_pieces else None)
        self.writer = IngressWriter(pog, stream, reader, pieces,
                                    whole=engine.raw_tasks_in_pieces)
        self.schema, self.batch_rows = self.inner.schema, self.inner.batch_rows
        self._stopped = False

    @property
    def exhausted(self) -> bool:
        return self.inner.exhausted

    def peek(self):
        return self.inner.peek()

    def stop(self) -> None:
        self._stopped = True
        self.inner.stop()

    @property
    def partitions(self) -> int:
        return self.inner.partitions

    def tasks(self) -> Iterator[Task]:
        for seq, t in enumerate(self.inner.tasks()):  # numbered as the writer stages them
            if self._stopped:
                return
            yield Task(t.batch, t.ingest_time, seq=seq, persist=True)


def persisted_in_order(pog: POG, stream: str, reader: str, feed: PartitionedFeed,
                       staged=None) -> Iterator[tuple[Prepared, PUnit]]:
    """The batches of ``feed`` (several ingress partitions) appended to the ingress p-stream
    ``stream`` by the partitions themselves, each in its turn (:meth:`POG.append`: behind a
    retain marker), and yielded here once stored, in order, with their p-units: what
    :meth:`POG.persisted` does on one thread.  A partition whose turn finds the stream full
    waits for ``reader`` (this generator's caller) to make room.  ``staged(prepared)``: called
    in the turn, right before the append."""
    s = pog.streams[stream]
    s.subscribe(None, reader, s.end)

    def stage(p: Prepared) -> Prepared | None:
        while not s.wait_room(p.batch.column_bytes, 0.05):
            if feed.stopping:
                return None
        if staged is not None:
            staged(p)
        pog.append(stream, p.seq, p.batch, p.source_end, p.stored)
        return p

    for p in feed.ordered(stage):
        yield p, s.read(reader, timeout=None)


class ReplayFeed:
    """Recovery: the stored input from ``start`` on, as tasks (their ingest times those of a
    rate-paced source, when it has one), then ``then``'s tasks.  ``on_replayed(n)`` is called
    once the replayed ones were all handed out."""

    def __init__(self, ingress: PStream, start: int, then: PersistedFeed, source,
                 on_replayed=None):
        self.ingress, self.start, self.then, self.source = ingress, start, then, source
        self.schema, self.batch_rows = then.schema, then.batch_rows
        self.on_replayed = on_replayed or (lambda n: None)

    @property
    def exhausted(self) -> bool:
        return self.then.exhausted

    @property
    def writer(self):
        return self.then.writer

    def peek(self):
        return self.then.peek()

    def stop(self) -> None:
        self.then.stop()

    @property
    def partitions(self) -> int:
        return self.then.partitions

    def tasks(self) -> Iterator[Task]:
        now = time.perf_counter()
        half = (self.start + self.ingress.end) // 2
        n = 0
        for u in self.ingress.load_stream(self.start):
            if u.offset <= half < u.offset + len(u):
                crashpoint("recovery_replay")
            source_end = u.vector_clock[0]  # differs from u.end after push-up
            yield Task(u.batch, self.source.arrival_time(source_end - len(u), len(u), now))
            n += 1
        self.on_replayed(n)
        yield from self.then.tasks()


class InputRelease:
    """GC without checkpoints: input that no open window needs any more is released."""

    align = False

    def __init__(self, pog: POG, horizon_ms: int, stream: str = INGRESS, reader: str = READER):
        self.pog, self.horizon_ms, self.stream, self.reader = pog, horizon_ms, stream, reader
        self.assembled_tasks: deque[tuple[int, int]] = deque()  # (last ts, end offset)

    def start(self, running, states: list) -> None:
        pass

    def marker(self) -> None:
        return None

    def pumped(self, r, clock: dict) -> None:
        pass

    def assembled(self, r, clock: dict, graph) -> None:
        self.assembled_tasks.append((r.last_ts, r.end_offset))
        horizon = r.last_ts - self.horizon_ms
        upto = None
        while self.assembled_tasks and self.assembled_tasks[0][0] < horizon:
            upto = self.assembled_tasks.popleft()[1]
        if upto is not None:
            self.pog.send_release(self.stream, self.reader, upto)

    def reached(self, where: str, marker, snapshot, pv: dict) -> None:
        pass

    def dropped(self, marker) -> None:
        pass

    def stop(self, failed: bool) -> None:
        pass


def run_persisted(query: Query, dataset: Dataset, persist: PersistConfig | None,
                  sink: Sink | None = None, config: EngineConfig | None = None,
                  replay: Replay = ONCE, *, watch: Sequence = (), source=None) -> RunReport:
    """Run ``query`` as :func:`scabbard.engine.run_query` does, with its ingress p-stream
    persisted as ``persist`` says: in ``persist.storage``, after persistence push-up with
    ``push_up`` (§3.4), compressed with the named ``compression`` scheme
    (:data:`scabbard.compression.policy.SCHEMES`; §5), the adaptive one re-selecting codecs
    every ``compression_interval`` seconds (its swaps and fallbacks are ``codec`` and
    ``fallback`` events among the metrics lines).  Without ``persist`` it is exactly
    :func:`scabbard.engine.run_query` (the input in memory)."""
    if dataset.schema.fingerprint != query.source.schema.fingerprint:
        raise ValueError(f"{query.name} reads {query.source.schema.name!r} data, but the dataset "
                         f"holds {dataset.schema.name!r}")
    engine = Engine(query, dataset.tables, config, push_up=bool(persist and persist.push_up))
    if source is None:
        layout = persist.layout if persist else None
        most = engine.unit_rows(layout.file_bytes, layout.data_start) if layout else None
        source = ReplaySource(dataset, engine.task_rows(dataset, replay.rate, most), replay,
                              span=engine.spans_copies)
    metrics = engine.metrics(watch)
    if persist is None:
        return engine.run(source, sink or NullSink(), metrics=metrics)
    with BlockManager(persist.storage, persist.layout) as bm:
        pog = POG(bm)
        compression = persist.compression or "none"
        adaptive = {"interval": persist.compression_interval} if compression == "adaptive" \
            else {}
        ingress_stream(pog, engine, Compression.scheme(
            engine.input_schema, compression, persist.lossy_decimals, on_event=metrics.event,
            ordered_time=getattr(source, "ordered", False), **adaptive))
        report = engine.run(PersistedFeed(pog, engine, source), sink or NullSink(),
                            metrics=metrics, listener=InputRelease(pog, engine.horizon_ms))
        return dataclasses.replace(report, written_bytes=bm.bytes_written)
