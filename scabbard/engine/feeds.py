"""The engine core's own task feed: a source's batches, prepared on a pool of threads.

:class:`SourceFeed` reads a source (:mod:`scabbard.engine.sources`) and, where operators run
before the engine proper (persistence push-up's σ and π, :class:`scabbard.engine.pushup.Reducer`)
or a feed wants each batch transformed (compressed, before it is persisted), does that on a
pool of threads, ``2 x workers`` batches ahead, delivering in order.  A batch that nothing
survived is skipped; its source tuples count with the next task.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

from scabbard.batch import Batch
from scabbard.engine.ports import Task


class SourceFeed:
    """``source`` as tasks: ``reduce`` (batch -> batch) and ``transform`` (batch -> stored
    columns) run on ``workers`` threads; without either the source's batches pass as they are.
    The source is read by the thread that takes the tasks (one ingress partition; several:
    :class:`scabbard.engine.ingress.PartitionedFeed`)."""

    partitions = 1

    def __init__(self, source, reduce: Callable[[Batch], Batch] | None = None,
                 transform: Callable[[Batch], list] | None = None, workers: int = 1):
        self.source, self.reduce, self.transform, self.workers = source, reduce, transform, workers
        self.schema = source.schema
        self.batch_rows = getattr(source, "batch_rows", 0)

    @property
    def exhausted(self) -> bool:
        return getattr(self.source, "exhausted", True)

    def peek(self) -> Batch:
        return self.source.peek()

    def stop(self) -> None:
        self.source.stop()

    def arrival_time(self, offset: int, n: int, default: float) -> float:
        return self.source.arrival_time(offset, n, default)

    def tasks(self) -> Iterator[Task]:
        reduce, transform = self.reduce, self.transform
        if reduce is None and transform is None:
            for sb in self.source.batches():
                yield Task(sb.batch, sb.ingest_time, seq=sb.seq)
            return

        def job(sb):
            b = reduce(sb.batch) if reduce is not None else sb.batch
            return b, tuple(transform(b)) if transform is not None and len(b) else None

        window: deque = deque()

        def in_order(pool):
            for sb in self.source.batches():
                window.append((sb, pool.submit(job, sb)))
                while window and (len(window) > 2 * self.workers or window[0][1].done()):
                    yield window.popleft()
            while window:
                yield window.popleft()

        skipped = 0
        with ThreadPoolExecutor(self.workers, thread_name_prefix="persist") as pool:
            try:
                for sb, fut in in_order(pool):
                    b, stored = fut.result()
                    skipped += len(sb.batch)
                    if len(b):
                        reduced = reduce is not None
                        yield Task(b, sb.ingest_time, skipped if reduced else None,
                                   sb.batch.end if reduced else None, sb.seq, stored)
                        skipped = 0
            finally:
                for _, fut in window:
                    fut.cancel()
