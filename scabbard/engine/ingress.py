"""Parallel ingress (PipeFabric's partitioned sources): the source read by several
threads, so that no single thread touches every tuple.

With one ingress partition the dispatcher reads the source itself (:class:`SourceFeed`): it
cuts every batch (views of the dataset; a replayed copy's timestamps are shifted by whoever
reads them, :class:`~scabbard.batch.ReplayBatch`) and, when the input is persisted, appends
it to the ingress p-stream (its push-up, codecs and p-unit: a pass over every tuple).
:class:`PartitionedFeed` splits the source by offset ranges between ``N`` partitions
instead:

* the source's batches are numbered globally from its start (:meth:`ReplaySource.ranges`:
  pure arithmetic, no data) and batch ``j`` belongs to partition ``j mod N``;
* each partition's thread, for each of its batches:

  1. waits until the batch may start - while it is more than ``lookahead`` batches ahead of
     the oldest one not yet handed out (back-pressure), and with a rate until it arrived;
  2. cuts it from the source and hands it to the feed's pool for
     preparation (the σ and π persistence push-up moved below the p-stream, the codecs), as
     the dispatcher did, keeping ``2 x workers / N`` of its batches in preparation;
  3. takes its **turn** - batch ``j`` after batch ``j - 1``, whichever partition had it - and
     runs the ordered ``stage`` on its own thread (the persisted feed: the p-unit appended
     to the ingress p-stream behind its retain marker, :func:`scabbard.ft.ingress.
     persisted_in_order`), then passes the turn on.  A batch nothing survived push-up in is
     not staged: its source tuples count with the next one's task, as before;

* the dispatcher only takes what was staged, in order (:meth:`PartitionedFeed.ordered`),
  and hands the tasks out.

The stream's end is decided in one place: the first batch a partition finds past
``duration``, or past the end of the stream, or met after :meth:`stop`, ends it; later
batches are dropped unstaged, so what was staged is always a prefix of the stream without a
hole - the ingress p-stream's offsets stay one sequence, and a recovery may use any number
of partitions.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from scabbard import timers
from scabbard.batch import Batch
from scabbard.engine.ports import Task


@dataclass(frozen=True, slots=True)
class Prepared:
    """A batch ready for the ordered stage: global batch number ``seq``, what the engine will
    process (after push-up's σ and π), when its tuples arrived, the source tuples it stands
    for and the source offset one past it (push-up only: None otherwise), its columns
    compressed (a transform, else None)."""

    seq: int
    batch: Batch
    ingest_time: float
    source_tuples: int | None = None
    source_end: int | None = None
    stored: tuple | None = None


def as_task(p: Prepared) -> Task:
    return Task(p.batch, p.ingest_time, p.source_tuples, p.source_end, p.seq, p.stored)


def splittable(source) -> bool:
    """Can ``source`` be read by several partitions: does its own class cut it by offset
    ranges?  (A wrapper that forwards to a replay source - a log in front of it, a test's
    early stop - is read through its own ``batches``.)"""
    kind = type(source)
    return callable(getattr(kind, "ranges", None)) and callable(getattr(kind, "cut", None))


class PartitionedFeed:
    """``source`` read by ``partitions`` threads, each its share of the batches, prepared by
    ``reduce`` (batch -> batch) and ``transform`` (batch -> stored columns) on a pool of
    ``workers`` threads, staged in order (see the module's docstring)."""

    def __init__(self, source, partitions: int, reduce: Callable[[Batch], Batch] | None = None,
                 transform: Callable[[Batch], list] | None = None, workers: int = 1,
                 lookahead: int | None = None):
        if partitions < 2:
            raise ValueError(f"a partitioned feed needs 2 or more partitions, got {partitions}")
        if not splittable(source):
            raise ValueError(f"{type(source).__name__} cannot be split into partitions")
        self.source, self.partitions = source, partitions
        self.reduce, self.transform, self.workers = reduce, transform, workers
        self.schema = source.schema
        self.batch_rows = getattr(source, "batch_rows", 0)
        # batches prepared or preparing ahead of the oldest not handed out
        self.lookahead = lookahead or max(2 * workers, 2 * partitions)
        self._exhausted = False
        self._stop = threading.Event()

    # -- TaskFeed ---------------------------------------------------------------------------------
    @property
    def exhausted(self) -> bool:
        return self._exhausted

    def peek(self) -> Batch:
        return self.source.peek()

    def stop(self) -> None:
        self._stop.set()
        self.source.stop()
        run = getattr(self, "_run", None)
        if run is not None:
            run.wake()

    @property
    def stopping(self) -> bool:
        """The feed was stopped, or its reader left: a stage waiting for room gives up."""
        run = getattr(self, "_run", None)
        return self._stop.is_set() or (run is not None and run.halted)

    def arrival_time(self, offset: int, n: int, default: float) -> float:
        return self.source.arrival_time(offset, n, default)

    def tasks(self) -> Iterator[Task]:
        yield from self.ordered(as_task)

    # -- the partitions ------------------------------------------------------------------------------
    def ordered(self, stage: Callable[[Prepared], object]) -> Iterator:
        """Run the partitions while this is consumed: ``stage(prepared)`` runs for every batch
        that kept tuples, in batch order, on the thread of the batch's partition; what it
        returns (None: nothing) is yielded here in the same order.  Ends at the end of the
        stream (then :attr:`exhausted`), at ``duration`` or after :meth:`stop`; raises what a
        partition raised."""
        run = _Run(self, stage)
        self._run = run
        pool = (ThreadPoolExecutor(self.workers, thread_name_prefix="persist")
                if self.reduce is not None or self.transform is not None else None)
        threads = [threading.Thread(target=run.partition, args=(k, pool), daemon=True,
                                    name=f"ingress-{k}") for k in range(self.partitions)]
        for t in threads:
            t.start()
        try:
            while True:
                out = run.take()
                if out is _DONE:
                    break
                yield out
            if run.error is not None:
                raise run.error
            if run.complete and run.turn >= run.end and not self._stop.is_set():
                self._exhausted = True
                self.source.exhausted = True  # the ReplaySource's flag, read by recovery
        finally:
            run.halt()
            for t in threads:
                t.join()
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)


_DONE = object()


class _Run:
    """One pass of :meth:`PartitionedFeed.ordered`: the turn, the staged outputs, the end."""

    def __init__(self, feed: PartitionedFeed, stage):
        self.feed, self.stage = feed, stage
        self.cond = threading.Condition()
        self.turn = 0  # the next batch to stage
        self.end = math.inf  # the first batch that is not part of the stream
        self.complete = False  # the end is the stream's own (not duration or stop)
        self.outputs: deque = deque()  # (batch number, output), staged, not yet taken
        self.skipped = 0  # source tuples of batches nothing survived push-up in (for the next)
        self.error: BaseException | None = None
        self.halted = False
        self.t0 = time.perf_counter()
        self.origin = feed.source.origin()

    # -- shared state (every method takes the condition) ----------------------------------------
    def wake(self) -> None:
        with self.cond:
            self.cond.notify_all()

    def halt(self) -> None:
        with self.cond:
            self.halted = True
            self.cond.notify_all()

    def _over(self) -> bool:
        return self.halted or self.error is not None or self.feed.stopping

    def _end_at(self, j: int, complete: bool = False) -> None:
        with self.cond:
            if j < self.end:
                self.end, self.complete = j, complete
            self.cond.notify_all()

    def _admit(self, j: int, wait: bool = True) -> bool | None:
        """Batch ``j`` may start: it is within the look-ahead of the oldest batch not handed
        out (``wait``: until it is; else None when not yet); False if it will not be part of
        the stream."""
        with self.cond:
            while True:
                if self._over() or j >= self.end:
                    return False
                floor = self.outputs[0][0] if self.outputs else self.turn
                if j < floor + self.feed.lookahead:
                    return True
                if not wait:
                    return None
                self.cond.wait()

    def take(self):
        """The dispatcher: the next staged output, in order; ``_DONE`` at the end."""
        with self.cond:
            while True:
                if self.error is not None:
                    return _DONE
                if self.outputs:
                    out = self.outputs.popleft()[1]
                    self.cond.notify_all()  # the look-ahead moved on
                    return out
                if self.turn >= self.end or self.halted or self.feed.stopping:
                    return _DONE
                self.cond.wait()

    # -- a partition's thread -----------------------------------------------------------------
    def partition(self, k: int, pool) -> None:
        feed = self.feed
        n, source = feed.partitions, feed.source
        ahead = max(1, -(-2 * feed.workers // n))  # of its own batches in preparation
        pending: deque = deque()
        try:
            j = -1
            for j, r in enumerate(source.ranges()):
                if j % n != k:
                    continue
                ok = self._admit(j, wait=False)
                if ok is None:  # at the look-ahead: stage its own first (the turn may be one
                    while pending:  # of them), then wait
                        self._stage(*pending.popleft())
                    ok = self._admit(j)
                if not ok:
                    break
                if feed.source.duration is not None and (
                        time.perf_counter() - self.t0 >= feed.source.duration):
                    self._end_at(j)
                    break
                span = timers.start()
                sb = source.cut(j, r, self.origin, sleep=feed._stop.wait)
                fut = pool.submit(self._prepare, sb.batch) if pool is not None else None
                timers.stop(span, "ingress", len(sb.batch))
                pending.append((sb, fut))
                while pending and (len(pending) > ahead or pending[0][1] is None
                                   or pending[0][1].done()):
                    self._stage(*pending.popleft())
            else:
                self._end_at(j + 1, complete=True)  # the stream's own end
            while pending:
                self._stage(*pending.popleft())
        except BaseException as e:  # surface in the dispatcher; stop the others
            with self.cond:
                if self.error is None:
                    self.error = e
                self.cond.notify_all()
        finally:
            for _, fut in pending:
                if fut is not None:
                    fut.cancel()

    def _prepare(self, batch: Batch) -> tuple[Batch, tuple | None]:
        feed = self.feed
        b = feed.reduce(batch) if feed.reduce is not None else batch
        return b, tuple(feed.transform(b)) if feed.transform is not None and len(b) else None

    def _stage(self, sb, fut) -> None:
        """Batch ``sb.seq``: wait for its turn, stage it, pass the turn on."""
        b, stored = fut.result() if fut is not None else (sb.batch, None)
        j = sb.seq
        with self.cond:
            while self.turn != j and not self._over() and j < self.end:
                self.cond.wait()
            if self.turn != j or self._over():
                return  # past the end, or the run is over: dropped unstaged
            self.skipped += len(sb.batch)
            skipped = self.skipped
        out = None
        if len(b):
            span = timers.start()
            reduced = self.feed.reduce is not None
            out = self.stage(Prepared(j, b, sb.ingest_time, skipped if reduced else None,
                                      sb.batch.end if reduced else None, stored))
            timers.stop(span, "append", len(sb.batch))
        with self.cond:
            if len(b):
                self.skipped = 0
            self.turn = j + 1
            if out is not None:
                self.outputs.append((j, out))
            self.cond.notify_all()
