"""The persisted ingress as the engine's task feed (paper §3.1, §3.4; DESIGN.md §6, §13).

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
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from scabbard.compression.policy import Compression
from scabbard.data import Dataset
from scabbard.engine import Engine, EngineConfig, NullSink, ReplaySource, RunReport, Sink
from scabbard.engine.ingress import PartitionedFeed, Prepared
from scabbard.engine.metrics import Metrics
from scabbard.engine.ports import Task
from scabbard.faults import crashpoint
from scabbard.pog import POG, PStream, PUnit
from scabbard.query import Query
from scabbard.storage import BlockManager, StorageConfig

INGRESS, READER = "input", "query"


def ingress_stream(pog: POG, engine: Engine, compress=None) -> PStream:
    """The ingress p-stream of ``engine``'s input: in memory ahead of the workers, enough to
    overlap disk and CPU and for the writer to bulk several p-units into one large write."""
    bm = pog.storage
    return pog.pstream(INGRESS, engine.input_schema, max_units=64,
                       max_bytes=8 * bm.config.bulk_bytes, compress=compress)


class PersistedFeed:
    """``source`` through the ingress p-stream: tasks once their p-units are stored."""

    def __init__(self, pog: POG, engine: Engine, source, stream: str = INGRESS,
                 reader: str = READER):
        self.pog, self.stream, self.reader = pog, stream, reader
        self.ingress = pog.streams[stream]
        self.inner = engine.feed(source, self.ingress.compress)
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
        if self.inner.partitions > 1:  # the partitions append, in turn; this thread reads
            for p, u in persisted_in_order(self.pog, self.stream, self.reader, self.inner):
                yield Task(u.batch, p.ingest_time, p.source_tuples, seq=p.seq)
            return
        ingest: dict[int, Task] = {}

        def batches():
            for t in self.inner.tasks():
                if self._stopped:
                    return
                ingest[t.seq] = t
                yield t.seq, t.batch, t.source_end, t.stored

        for u in self.pog.persisted(self.stream, self.reader, batches()):
            t = ingest.pop(u.batch_id)
            yield Task(u.batch, t.ingest_time, t.source_tuples, seq=t.seq)


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

    def start(self, running) -> None:
        pass

    def marker(self) -> None:
        return None

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

    def stop(self, failed: bool) -> None:
        pass


def run_persisted(query: Query, dataset: Dataset, storage: str | Path | None,
                  sink: Sink | None = None,
                  config: EngineConfig | None = None, rate: float | None = None,
                  duration: float | None = None, max_tuples: int | None = None,
                  metrics_log: str | Path | None = None, on_sample=None,
                  storage_config: StorageConfig | None = None, push_up: bool = False,
                  compression: str = "none", lossy_decimals: int | None = None,
                  compression_interval: float = 4.0, source=None) -> RunReport:
    """Run ``query`` as :func:`scabbard.engine.run_query` does, with its ingress p-stream
    persisted in ``storage``: after persistence push-up if ``push_up`` (§3.4), compressed with
    the named ``compression`` scheme (:data:`scabbard.compression.policy.SCHEMES`; §5), the
    adaptive one re-selecting codecs every ``compression_interval`` seconds (its swaps and
    fallbacks are ``codec`` and ``fallback`` events in the metrics log).  Without a ``storage``
    folder it is exactly :func:`scabbard.engine.run_query` (the input in memory)."""
    if dataset.schema.fingerprint != query.source.schema.fingerprint:
        raise ValueError(f"{query.name} reads {query.source.schema.name!r} data, but the dataset "
                         f"holds {dataset.schema.name!r}")
    engine = Engine(query, dataset.tables, config, push_up=push_up)
    if source is None:
        layout = storage_config or StorageConfig()
        most = engine.unit_rows(layout.file_bytes, layout.data_start) if storage else None
        source = ReplaySource(dataset, engine.task_rows(dataset, rate, most), rate=rate,
                              duration=duration, max_tuples=max_tuples,
                              loop=duration is not None or max_tuples is not None,
                              span=engine.spans_copies)
    metrics = Metrics(dataset.schema.row_bytes, metrics_log, engine.config.metrics_interval,
                      on_sample)
    if storage is None:
        return engine.run(source, sink or NullSink(), metrics=metrics)
    with BlockManager(storage, storage_config) as bm:
        pog = POG(bm)
        adaptive = {"interval": compression_interval} if compression == "adaptive" else {}
        ingress_stream(pog, engine, Compression.scheme(engine.input_schema, compression,
                                                        lossy_decimals, on_event=metrics.event,
                                                        **adaptive))
        report = engine.run(PersistedFeed(pog, engine, source), sink or NullSink(),
                            metrics=metrics, listener=InputRelease(pog, engine.horizon_ms))
        return dataclasses.replace(report, written_bytes=bm.bytes_written)
