"""One run of the engine: the dispatcher, the workers, parallel boundary windows, ordered
assembly (docs/design.md, paper §2.3 and §4.1)."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from scabbard import timers
from scabbard.batch import Batch
from scabbard.engine.assembly import at_once
from scabbard.engine.graph import OperatorGraph, clock_only, empty_columns
from scabbard.engine.lanes import Job, Lane, close_spilled
from scabbard.engine.metrics import Metrics, RunReport
from scabbard.engine.ports import AssemblyListener, ClockedWriter, Resume
from scabbard.engine.sinks import Sink
from scabbard.engine.spill import SpillingAssembler
from scabbard.engine.tasks import INT64_MAX, INT64_MIN, BranchPart, TaskResult

BACKLOG_BYTES = 256 << 20  # batches waiting in persisted channels before the assembly waits


class Execution:
    """One run: the dispatcher, the workers, parallel boundary windows and ordered assembly.

    Task ``k`` is assembled after task ``k-1``.  Per branch (a :class:`Lane`), when both
    tasks are long in it, the windows between them (``boundary k``) are computed by
    whichever worker finishes the second of the two, outside the assembly lock; otherwise
    the assembler computes them sequentially from the branch's window state.  The branches'
    complete windows go through the operator graph (joins, ...) to the sink.

    ``engine``: the :class:`~scabbard.engine.runtime.Engine` whose fragment and boundary
    functions the workers run.  Its tasks run on its own workers, or on workers it shares with
    other runs (:meth:`share`).
    """

    def __init__(self, engine, feed, sink: Sink, metrics: Metrics,
                 listener: AssemblyListener | None = None, resume: Resume | None = None,
                 emit_after: int = INT64_MIN, stores: dict | None = None):
        self.engine, self.feed, self.sink, self.metrics = engine, feed, sink, metrics
        self.listener, self.resume, self.emit_after = listener, resume, emit_after
        self.clocked = isinstance(sink, ClockedWriter)
        self.writer = getattr(feed, "writer", None)  # persists what the workers' tasks read
        self.carried = None  # a marker a task with nothing in it passed on to the next
        self.next_seq = 0  # the dispatcher's task numbering
        self.clock = {"input_end": 0, "window_end": INT64_MIN}  # of the last emitted result
        self.plan = engine.plan
        parts = [engine.assembly_parts(i, feed.batch_rows) for i in range(len(self.plan.branches))]
        engine.split_parts = parts  # the fragments split each task's partials for them
        # the partitions of a partitioned assembly beyond the first run on these threads (a
        # spilling one's many partitions in a group per worker)
        spills = [engine.spills(i) for i in range(len(parts))]
        threads = max([p - 1 for p, spill in zip(parts, spills, strict=True) if not spill]
                      + [engine.config.workers - 1 for spill in spills if spill] + [0])
        self._partitions = (ThreadPoolExecutor(threads, thread_name_prefix="partition")
                            if threads > 0 else None)
        budget = engine.state_budget() if any(spills) else None
        self.lanes = [Lane(i, b, p, self._partitions, budget if spill else None,
                           engine.config.workers, engine.config.spill)
                      for i, (b, p, spill) in enumerate(zip(self.plan.branches, parts, spills,
                                                             strict=True))]
        for lane in self.lanes:
            lane.row_wise = lane.pieces_reach_sink(self.plan, stores)
        # a stored batch of a persisted channel (or a task's persisted input) becomes durable
        # on the writer's thread: that thread hands the assembly a kick, and whoever
        # assembles then moves it on
        self._kicker = (ThreadPoolExecutor(1, thread_name_prefix="graph")
                        if stores or self.writer is not None else None)
        # a join runs pieces of its input on the partitions' threads too (they are idle then)
        parallel = None if self._partitions is None else (
            lambda fn, args: at_once(self._partitions, fn, args), threads + 1)
        self.graph = OperatorGraph(self.plan, stores, self._reached, self._kick, parallel)
        # recovery: per branch, the windows a p-stream on its way to the sink holds already
        # (replayed from there, not computed again)
        self.skip = [self.graph.stored_through(self.plan.top(lane.i)) for lane in self.lanes]
        workers = engine.config.workers
        spilling = any(map(engine.spills, range(len(self.plan.branches))))
        depth = engine.config.queue_depth or (1 if spilling else 2 * workers)
        self.pool = None  # workers shared with other runs (share)
        self.tasks = queue.Queue(maxsize=depth)
        # tasks dispatched, not yet assembled: bound memory (and input persisted ahead of the
        # windows); with state under a budget (it holds no task) a task a worker and one more
        self.window = threading.Semaphore(depth + (1 if spilling else 2) * workers)
        self.lock = threading.Lock()  # guards the dictionaries below and the lanes'
        self.assembly_lock = threading.Lock()
        self.results: dict[int, TaskResult] = {}  # finished fragments, not yet assembled
        self.next = 0
        self.error: BaseException | None = None
        self.barrier: threading.Event | None = None  # aligned checkpoints: the marker's task

    # -- workers -----------------------------------------------------------------------------
    def _compute_boundary(self, lane: Lane, prev: TaskResult, cur: TaskResult) -> None:
        span = timers.start()
        cols = self.engine._boundary(prev, cur, lane.i, self.skip[lane.i]) or {}
        timers.stop(span, "boundary", cur.tuples)
        with self.lock:
            lane.boundaries[cur.seq] = cols
            lane.tails.pop(prev.seq, None)

    def window_states(self) -> list:
        """Per branch, what reads its window state out (:meth:`Lane.state`), or None."""
        return [lane.state() for lane in self.lanes]

    def share(self, pool) -> Execution:
        """Run this run's tasks on ``pool``'s workers, shared with other runs
        (:class:`~scabbard.engine.shared.SharedWorkers`), instead of workers of its own."""
        self.pool, self.tasks = pool, pool.channel(self)
        return self

    def worker(self) -> None:
        while True:
            item = self.tasks.get()
            if item is None or not self.work(item):
                return

    def work(self, item: Job) -> bool:
        """Run one task on this thread (its fragment, then whatever it lets be assembled);
        False if the run failed."""
        try:
            batch, staged = item.batch, None
            if item.unit is not None:  # push-up, codecs and its segment, here; stored
                staged = self.writer.write(item.unit, batch, self.engine.reduce)  # in order
                batch = staged.batch
            if staged is not None and not len(batch):  # nothing survived push-up
                r = TaskResult(item.seq, 0, item.ingest_time, [], batch.offset, empty=True)
            else:
                span = timers.start()
                r = self.engine._fragment(item.seq, batch, item.ingest_time, self.skip)
                timers.stop(span, "fragment", len(batch), r.long)
            r.marker, r.staged = item.marker, staged
            if staged is not None:
                r.tuples = len(item.batch)  # the source tuples it stands for
            elif item.source_tuples is not None:  # when push-up dropped some
                r.tuples = item.source_tuples
            jobs = []
            with self.lock:
                self.results[r.seq] = r
                for lane in self.lanes if not r.empty else ():
                    if r.parts[lane.i].long:
                        lane.tails[r.seq] = r
                    jobs += lane.claim(r, self.results)
            for lane, prev, cur in jobs:
                self._compute_boundary(lane, prev, cur)
            self.drain()
            return True
        except BaseException as e:  # surface in run(); stop the source
            self._failed(e)
            return False

    def _failed(self, e: BaseException) -> None:
        """A thread failed: the first error is the run's; the source and the writer stop."""
        if self.error is None:
            self.error = e
        self.feed.stop()
        if self.writer is not None:
            self.writer.stop()

    # -- the operator graph's channels ----------------------------------------------------------
    def _kick(self) -> None:
        # shut down: the run is ending, and its end moves what is left
        with contextlib.suppress(RuntimeError):
            self._kicker.submit(self._kicked)

    def _kicked(self) -> None:
        """A kick's drain, on the kicker's thread: an error fails the run (as a worker's)."""
        try:
            self.drain()
        except BaseException as e:  # noqa: BLE001 - surfaced by run()
            self._failed(e)

    def _reached(self, where: str, marker, snapshot, pv: dict) -> None:
        """Operator ``where`` of the graph took the marker on every input (Alg. 1)."""
        if self.listener is not None:
            self.listener.reached(where, marker, snapshot, pv)

    def _pump(self) -> int:
        """Move what can move through the graph; emit what reaches the sink (call with the
        assembly lock held)."""
        rows = 0
        for kind, what, at in self.graph.pump():
            if kind == "data":
                rows += self.emit(what, at)
            elif self.listener is not None:  # the marker passed the sink
                self.listener.reached("sink", what, dict(self.clock), at)
        return rows

    def _finish_graph(self) -> None:
        """The end of the run: wait for every persisted batch, move everything to the sink."""
        while True:
            self.metrics.add_result_rows(self._pump())
            waiting = [ch.items[0] for ch in self.graph.channels.values() if ch.items]
            if not waiting:
                return
            for item in waiting:
                item.check()

    # -- ordered assembly ----------------------------------------------------------------------
    def emit(self, cols: dict[str, np.ndarray], clock: dict) -> int:
        """Results to the sink (each row's window end - a stateless query's: its position -
        at or below ``emit_after`` dropped: committed before a failure)."""
        we = cols["window_end"]
        if len(we) and we[0] <= self.emit_after:
            keep = we > self.emit_after  # committed before a failure: a duplicate
            cols = {k: v[keep] for k, v in cols.items()}
            we = cols["window_end"]
        n = len(we)
        if n:
            span = timers.start()
            batch = self.engine._result_batch(cols)
            done = int(we[-1])
            if clock.get("piece"):  # a window in pieces: the windows before its last whole
                last = 0 if we[0] == we[-1] else int(np.searchsorted(we, we[-1]))  # (a crash
                done = int(we[last - 1]) if last else self.clock["window_end"]  # before: none)
            self.clock = dict(clock_only(clock), input_end=clock.get("input_end", 0),
                              window_end=done)
            if not self.clocked:
                self.sink.write(batch)
            elif self.plan.selection is not None:  # each row's position: its input offset + 1
                self.sink.write_clocked(batch, self.clock, we)
            else:
                self.sink.write_clocked(batch, self.clock)
            timers.stop(span, "sink", n)
        return n

    def _ready(self) -> TaskResult | None:
        """The next task if it can be assembled now (with the lock held): its input durable
        when it was persisted (else the writer's acknowledgement kicks the assembly)."""
        r = self.results.get(self.next)
        if r is None or not self._durable(r):
            return None
        if r.staged is not None:
            r.staged.done.result()  # a failed write fails the run here
        if r.empty:
            del self.results[self.next]
            return r
        for lane in self.lanes:
            if r.parts[lane.i].long and lane.prev_long and r.seq not in lane.boundaries:
                if r.seq in lane.claimed:
                    return None  # a worker is computing it; it drains when done
                lane.claimed.add(r.seq)
                lane.boundaries[r.seq] = None  # computed below, by the assembler
        del self.results[self.next]
        return r

    def _durable(self, r: TaskResult) -> bool:
        """Whether ``r``'s persisted input is stored (or it had none); if not, its writer's
        acknowledgement will kick the assembly (with the lock held).  Every thread that
        finds the next task not durable asks for the kick - a worker that left the
        assembly to another thread may never look again."""
        if r.staged is None or r.staged.done.done():
            return True
        if not r.waiting:
            r.waiting = True
            r.staged.done.add_done_callback(lambda _: self._kick())
        return False

    def _lane_windows(self, lane: Lane, r: TaskResult):
        """Branch ``lane``'s complete windows of task ``r``, in window order: pieces of
        result columns, as they are made (a branch whose state spills gives a window of many
        keys partition by partition, when its fused operators are row by row)."""
        part, i = r.parts[lane.i], lane.i
        if part.long and lane.prev_long:
            with self.lock:
                cols = lane.boundaries.pop(r.seq)
                prev = lane.tails.pop(lane.last_seq, None)
                lane.claimed.discard(r.seq)
            if cols is None:
                cols = self.engine._boundary(prev, r, i, self.skip[i]) or {}
            lane.assembler.skip(part)
            if cols:
                yield cols
        else:
            b = lane.branch
            upto = (part.first_pane + b.panes if part.long else part.last_pane) * b.slide_ms
            emit = upto > self.skip[i]  # recovery: all of them stored downstream already
            if emit and lane.row_wise and lane.assembler.streams(part):
                for raw in lane.assembler.pieces(part):
                    yield self.plan.post(i, b.finalize(raw))
            else:
                raw = lane.assembler.task(part, emit)
                cols = self.plan.post(i, b.finalize(raw)) if emit else {}
                if cols:
                    yield cols
            with self.lock:
                lane.tails.pop(lane.last_seq, None)
                lane.claimed.discard(r.seq)
        lane.prev_long = part.long
        lane.last_seq = r.seq
        internal, part.internal = part.internal, None  # the task stays a tail: not its windows
        if internal:
            yield internal

    def _push(self, lane: Lane, pieces, watermark: int, input_end: int) -> int:
        """A lane's windows into the operator graph, each piece moved on towards the sink once
        the next comes (a spilling window of many keys is never whole in memory); the last
        carries the watermark (nothing to emit: an empty piece carries it).  The rows emitted."""
        top, meta = self.plan.top(lane.i), {"input_end": input_end}
        last, rows, piece = None, 0, dict(meta, piece=True)
        for cols in pieces:
            if not len(cols["window_end"]):  # its HAVING emptied it: the last one pushed,
                continue  # whose clock names its windows whole, must reach the sink
            if last is not None:  # more rows of its last window may follow (see emit)
                if self.graph.passes(top, piece):  # (the dataflow's merge: ~500 a task)
                    rows += self.emit(last, piece)
                else:
                    self.graph.push(top, last, None, piece)
                    rows += self._pump()
            last = cols
        if last is None:  # nothing to emit, but the watermark moves on
            last = empty_columns(self.plan.operators[top].node.schema)
        self.graph.push(top, last, watermark, meta)
        return rows

    def skip_empty(self, r: TaskResult) -> None:
        """A task nothing of whose input survived push-up: no windows move; its marker goes
        on with the next task that has tuples (the same cut: nothing changed between)."""
        if r.marker is not None:
            self.carried = r.marker
            if self.barrier is not None:
                self.barrier.set()
        self.window.release()
        self.metrics.record(r.tuples, time.perf_counter() - r.ingest_time, 0)

    def assemble(self, r: TaskResult) -> None:
        if r.staged is not None:
            self.writer.assembled(r.staged)
        if self.carried is not None and r.marker is None:
            r.marker, self.carried = self.carried, None
        rows, clock = 0, dict(self.clock)  # (the listener's: before the task's windows)
        for lane in self.lanes:  # every window ending at or before its last pane is complete
            rows += self._push(lane, self._lane_windows(lane, r),
                               r.parts[lane.i].last_pane * lane.branch.slide_ms, r.end_offset)
        if r.rows is not None:  # a stateless query: the task's rows, positioned by offset
            self.graph.push(self.plan.selection.id, r.rows, r.end_offset,
                            {"input_end": r.end_offset})
        if r.marker is not None:  # state under a budget: its checkpoint is its spill units
            for lane in self.lanes:
                if isinstance(lane.assembler, SpillingAssembler):
                    lane.assembler.mark(r.marker)
        if self.listener is not None:
            self.listener.assembled(r, clock, self.graph)
        if r.marker is not None:  # the windows took it at the task; it follows their output
            for producer in self.plan.producers:
                self.graph.mark(producer, r.marker)
        rows += self._pump()
        while True:  # back-pressure: what waits to be stored in the channels is bounded
            waiting, oldest = self.graph.backlog()
            if waiting <= BACKLOG_BYTES:
                break
            oldest.check()
            rows += self._pump()
        if self.listener is not None:
            self.listener.pumped(r, dict(self.clock))
        if r.marker is not None and self.barrier is not None:
            self.barrier.set()
        self.window.release()
        self.metrics.record(r.tuples, time.perf_counter() - r.ingest_time, rows)

    def drain(self, wait: bool = False) -> None:
        """Assemble every task that can be, and move the graph; if another thread is at it,
        leave it to that one (``wait``: wait for it - the end of the run)."""
        while True:
            if not self.assembly_lock.acquire(blocking=wait):
                return
            try:
                while True:
                    with self.lock:
                        r = self._ready()
                    if r is None:
                        break
                    span = timers.start()
                    if r.empty:
                        self.skip_empty(r)
                    else:
                        self.assemble(r)
                    timers.stop(span, "assembly", r.tuples)
                    self.next += 1
                if self.graph.ready():  # persisted batches stored since
                    self.metrics.add_result_rows(self._pump())
            finally:
                self.assembly_lock.release()
            with self.lock:
                r = self.results.get(self.next)
                task = (r is not None and self._durable(r)
                        and (r.empty or not any(lane.busy(r) for lane in self.lanes)))
            if not task and not self.graph.ready():  # (a task whose input is not durable
                return  # yet is kicked once it is)

    # -- the run -------------------------------------------------------------------------------
    def submit(self, item: Job) -> bool:
        """Queue a task once the assembly window has room; False if the run failed."""
        while not self.window.acquire(timeout=0.1):
            if self.error is not None:
                return False
        return self.error is None and self._put(item, lambda: self.error is not None)

    def _put(self, item, give_up) -> bool:
        """Queue ``item``; False if ``give_up()`` while it is full (its workers failed)."""
        while True:
            try:
                self.tasks.put(item, timeout=0.1)
                return True
            except queue.Full:
                if give_up():
                    return False

    def dispatch(self, batch: Batch, ingest: float, tuples: int | None = None,
                 unit: int | None = None) -> bool:
        """Number the task, attach the listener's marker if it has one, queue it.
        ``tuples``: the source tuples it stands for (when push-up dropped some); ``unit``:
        the feed's number of a task whose input the worker persists."""
        marker = self.listener.marker() if self.listener is not None else None
        seq = self.next_seq
        self.next_seq += 1
        job = Job(seq, batch, ingest, marker, tuples, unit)
        if marker is None or not self.listener.align:
            return self.submit(job)
        t0 = time.perf_counter()
        self.barrier = threading.Event()
        if not self.submit(job):
            return False
        while not self.barrier.wait(0.1):  # alignment: the pipeline drains up to the marker
            if self.error is not None:
                return False
        self.barrier = None
        self.metrics.event("alignment", id=getattr(marker, "checkpoint_id", None),
                           ms=round((time.perf_counter() - t0) * 1e3, 3))
        return True

    def _may_wait(self) -> bool:
        """Whether the dispatcher may wait for the checkpoint in flight before marking a task
        (the listener's ``running``): not once the run failed, and not while that
        checkpoint's marker is carried by a task with nothing in it - the task that takes it
        on is yet to be dispatched (that task goes unmarked; the next one after the
        checkpoint completes gets the marker due)."""
        return self.error is None and self.carried is None

    def _threads(self) -> list[threading.Thread]:
        """The run's threads beside the dispatcher's: its workers."""
        return [threading.Thread(target=self.worker, name=f"worker-{i}", daemon=True)
                for i in range(self.engine.config.workers)]

    def _stop_threads(self, threads) -> None:
        """Queue each worker's end (tasks still queued dropped if every worker stopped)."""
        for _ in threads:
            if not self._put(None, lambda: not any(t.is_alive() for t in threads)):
                self.tasks = queue.Queue(self.tasks.maxsize)  # what it held: dropped

    def _final(self, lane: Lane) -> dict:
        """The end of the stream: the windows ``lane``'s state holds, as result columns."""
        return self.plan.post(lane.i, lane.branch.finalize(lane.assembler.flush()))

    def restore(self, at: Resume) -> None:
        """Start after task ``at.seq``, as if it had just been assembled (a long task whose
        tails are the saved partials), with the operator graph's saved state."""
        parts = []
        for lane, e in zip(self.lanes, at.edges, strict=True):
            last = at.last_ts // lane.branch.slide_ms
            spilled = at.spilled.get(lane.branch.id)
            if spilled is not None:  # on disk: read back as its windows close
                lane.assembler.resume(spilled, last)
                parts.append(BranchPart(last, last, False, e, e, None))
                lane.prev_long = False
                continue
            parts.append(BranchPart(last, last, True, e, e, None))
            lane.assembler.pending = (e, last)
            lane.prev_long = True
        prev = TaskResult(at.seq, 0, 0.0, parts, at.input_end, at.last_ts)
        for lane in self.lanes:
            lane.tails[at.seq] = prev
            lane.last_seq = at.seq
        self.graph.restore(at.graph)
        self.next = self.next_seq = at.seq + 1
        self.clock = dict(at.clock) or self.clock
        # (the sink may hold results past the checkpoint's: no clock written names less)
        if self.clock.get("window_end", INT64_MIN) < self.emit_after:
            self.clock = dict(self.clock, window_end=self.emit_after)

    def run(self) -> RunReport:
        engine, metrics = self.engine, self.metrics
        cfg = engine.config
        self.sink.open(engine.schema)
        threads = self._threads() if self.pool is None else []
        engine.warm_up(self.feed.peek())
        if engine.adaptive is not None:
            engine.adaptive.listen(metrics.event)
        metrics.start(query=engine.query.name, workers=cfg.workers,
                      batch_rows=self.feed.batch_rows, layout=getattr(engine, "layout", None),
                      ingress_partitions=getattr(self.feed, "partitions", 1))
        for t in threads:
            t.start()
        if self.resume is not None:
            self.restore(self.resume)
        try:
            if self.listener is not None:
                self.listener.start(self._may_wait, self.window_states())
            tasks = iter(self.feed.tasks())
            try:
                while True:  # everything this thread does per task is timed as ``dispatch``
                    span = timers.start()
                    task = next(tasks, None)
                    if task is None or self.error is not None or not self.dispatch(
                            task.batch, task.ingest_time, task.source_tuples,
                            task.seq if task.persist else None):
                        break
                    timers.stop(span, "dispatch", len(task.batch) if task.source_tuples is None
                                else task.source_tuples)
            finally:  # a feed's threads (parallel ingress) end with it
                if hasattr(tasks, "close"):
                    tasks.close()
        except BaseException as e:  # the dispatcher failed (e.g. fault tolerance: fail-stop)
            if self.error is None:
                self.error = e
            self.feed.stop()
        finally:
            self._stop_threads(threads)
            for t in threads:
                t.join()
            if self.pool is not None:  # the shared workers finish this run's tasks
                self.tasks.wait_idle()
        if self.error is not None:
            self._fail()
        try:
            self._drain_all()
        except BaseException as e:  # a persisted input failed to be stored: fail-stop
            if self.error is None:
                self.error = e
            self._fail()
        dropped = getattr(self.listener, "dropped", None)
        if self.carried is not None and dropped is not None:  # no task came after it
            dropped(self.carried)
            self.carried = None
        # end of stream: the open windows are final.  A run stopped early (by duration) is not
        # at the end of its stream: a fault-tolerant one continues with --recover.
        with self.assembly_lock:  # the graph's kicks wait: the end moves what is left
            try:
                if self.listener is None or self.feed.exhausted:
                    for lane in self.lanes:
                        pieces = lane.final_pieces(self.plan) or [self._final(lane)]
                        rows = self._push(lane, pieces, INT64_MAX, self.clock["input_end"])
                        self.metrics.add_result_rows(rows)
                self._finish_graph()
            except BaseException as e:  # a persisted channel failed: fail-stop
                self.error = e
        if self.error is not None:
            self._fail()
        if self.listener is not None:
            try:
                self.listener.stop(failed=False)  # may raise (fault tolerance: fail-stop)
            except BaseException as e:
                self.error = e
                self._fail()
        self.sink.close()
        if self._kicker is not None:
            self._kicker.shutdown(wait=True)
        if self._partitions is not None:
            self._partitions.shutdown(wait=True)
        spilled = close_spilled(self.lanes)
        return RunReport(engine.query.name, metrics.stop(), self.feed.batch_rows, cfg.workers,
                         spilled=spilled, layout=getattr(engine, "layout", None),
                         kernels=engine.adaptive.stats() if engine.adaptive is not None else {})

    def _drain_all(self) -> None:
        """The end of the run: assemble every task, waiting for the input of each to be
        durable where it was persisted."""
        while True:
            self.drain(wait=True)
            if self.error is not None:  # a kicked assembly failed meanwhile
                raise self.error
            with self.lock:
                r = self.results.get(self.next)
            if r is None:
                break
            if r.staged is None or r.staged.done.done():
                raise RuntimeError(f"tasks {sorted(self.results)} were never assembled")
            r.staged.done.exception()  # waits; an error is raised by the next drain
        if self.results:
            raise RuntimeError(f"tasks {sorted(self.results)} were never assembled")

    def _fail(self) -> None:
        """Stop everything and raise the run's error; the sink commits nothing more."""
        if self.writer is not None:
            self.writer.stop()
        if self._kicker is not None:
            self._kicker.shutdown(wait=False)
        if self._partitions is not None:
            self._partitions.shutdown(wait=False)
        close_spilled(self.lanes)
        if self.listener is not None:
            self.listener.stop(failed=True)
        try:
            self.sink.close()
        finally:
            self.metrics.stop(error=repr(self.error))
        raise self.error
