"""Inter-query parallelism: several queries on one engine, sharing its workers (PipeFabric's
Fig. 7, where each of up to 256 threads runs a query of its own on a replicated input).

Each query keeps what is its own - its source and dispatcher, its ordered assembly, its
operator graph and sink - and hands its tasks to one pool of worker threads
(:class:`SharedWorkers`) instead of workers of its own.  A worker takes the next task,
whichever query it belongs to, in the order the dispatchers queued them, so the queries share
the cores as their tasks come and no query waits for a thread another one holds idle.  Each
query's tasks in flight stay bounded by its own window (as alone), so one query's dispatcher
cannot fill the pool's queue ahead of the others by more than that.

:func:`run_together` runs queries this way and returns each one's report.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from scabbard.data import Dataset
from scabbard.engine.execution import Execution
from scabbard.engine.metrics import RunReport
from scabbard.engine.runtime import Engine, EngineConfig
from scabbard.engine.sinks import NullSink, Sink
from scabbard.engine.sources import Replay, ReplaySource
from scabbard.query import Query

T = TypeVar("T")


class _Channel:
    """One run's way into the pool: what its dispatcher puts is queued for the shared
    workers, counted until a worker has run it (:meth:`wait_idle`)."""

    def __init__(self, pool: SharedWorkers, run: Execution):
        self.pool, self.run = pool, run
        self.cond = threading.Condition()
        self.outstanding = 0

    def put(self, item, timeout: float | None = None) -> None:  # never full: no timeout
        with self.cond:
            self.outstanding += 1
        self.pool.queue.put((self, item))

    def done(self) -> None:
        with self.cond:
            self.outstanding -= 1
            self.cond.notify_all()

    def wait_idle(self) -> None:
        """Until every task queued so far has been run (or skipped: the run failed)."""
        with self.cond:
            while self.outstanding:
                self.cond.wait()


class SharedWorkers:
    """``workers`` threads that run the tasks of every run attached to them
    (:meth:`Execution.share <scabbard.engine.execution.Execution.share>`).  A context manager:
    the threads end with it."""

    def __init__(self, workers: int):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.threads = [threading.Thread(target=self._serve, name=f"shared-worker-{i}",
                                         daemon=True) for i in range(workers)]
        for t in self.threads:
            t.start()

    def channel(self, run: Execution) -> _Channel:
        return _Channel(self, run)

    def _serve(self) -> None:
        while True:
            got = self.queue.get()
            if got is None:
                return
            channel, item = got
            try:
                if channel.run.error is None:  # a failed run's queued tasks are dropped
                    channel.run.work(item)
            finally:
                channel.done()

    def close(self) -> None:
        for _ in self.threads:
            self.queue.put(None)
        for t in self.threads:
            t.join()

    def __enter__(self) -> SharedWorkers:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(frozen=True)
class Together:
    """One query of :func:`run_together`: the query, its dataset, where its results go
    (None: dropped) and, optionally, a ready source to read instead of replaying the
    dataset."""

    query: Query
    dataset: Dataset
    sink: Sink | None = None
    source: object = None


def run_together(runs: Sequence[Together], workers: int, duration: float | None = None,
                 max_tuples: int | None = None) -> list[RunReport]:
    """Run ``runs`` at once on one pool of ``workers`` threads, each query with its own
    source, dispatcher, assembly and sink; their reports in order.  Each query reads its
    dataset once, or replays it (timestamps shifted per copy) for ``duration`` wall seconds
    or ``max_tuples`` tuples, as :func:`scabbard.engine.run_query` does.  The first query
    that fails fails the call, once every query has ended (the others stop as their
    sources end)."""
    if not runs:
        raise ValueError("no query to run")
    engines = []
    for r in runs:
        if r.dataset.schema.fingerprint != r.query.source.schema.fingerprint:
            raise ValueError(f"{r.query.name} reads {r.query.source.schema.name!r} data, but "
                             f"its dataset holds {r.dataset.schema.name!r}")
        engines.append(Engine(r.query, r.dataset.tables, EngineConfig(workers=workers)))
    loop = duration is not None or max_tuples is not None

    def one(r: Together, engine: Engine, pool: SharedWorkers):
        def run() -> RunReport:
            source = r.source or ReplaySource(r.dataset, engine.task_rows(r.dataset, None),
                                              Replay(duration=duration, max_tuples=max_tuples,
                                                     loop=loop), span=engine.spans_copies)
            return Execution(engine, engine.feed(source), r.sink or NullSink(),
                             engine.metrics()).share(pool).run()
        return run

    with SharedWorkers(workers) as pool:
        return at_once([one(r, e, pool) for r, e in zip(runs, engines, strict=True)], "query")


def at_once(calls: Sequence[Callable[[], T]], name: str = "run") -> list[T]:
    """Each of ``calls`` on a thread of its own, all at once; their results in order.  The
    first that raised raises, once every one has ended."""
    results: list = [None] * len(calls)
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            results[i] = calls[i]()
        except BaseException as e:  # noqa: BLE001 - raised below, after the others end
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,), name=f"{name}-{i}")
               for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results
