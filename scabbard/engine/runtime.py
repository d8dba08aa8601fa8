"""The task-parallel runtime (LightSaber-style, DESIGN.md §5, paper §2.3 and §4.1).

* A **source** cuts the stream into batches; the dispatcher (the thread calling
  :meth:`Engine.run`) turns each into a task on a bounded queue (back-pressure).
* **Workers** (threads; the kernels release the GIL) run the *fragment
  function* of each task: the generated front-end kernel, pane aggregation, and
  every window that lies entirely inside the task's batch.  Each task returns
  those complete results plus the pane partials of its first and last
  ``range/slide`` panes.
* **Assembly** happens in task order, by whichever worker finishes the next
  task: it merges the edge partials of consecutive tasks into the windows that
  span task boundaries, emits them, then the task's own complete windows - so
  the sink sees windows in order.  The post-window operators (having,
  keep-max, per-window aggregate, window join) run on every batch of complete
  windows, inside tasks or in assembly.

A task whose batch spans fewer than ``2 * range/slide`` panes has no windows of
its own; the assembler computes all its windows, sequentially.  The default
batch size is therefore chosen per query from the data's tuples per pane.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scabbard import timers
from scabbard.batch import Batch
from scabbard.data import Table
from scabbard.engine import physical
from scabbard.engine.feeds import SourceFeed
from scabbard.engine.metrics import Metrics, Summary
from scabbard.engine.ports import AssemblyListener, ClockedWriter, Resume
from scabbard.engine.pushup import Reducer
from scabbard.engine.sinks import Sink
from scabbard.kernels import hashtable as ht
from scabbard.kernels import window as kw
from scabbard.kernels.aggregate import key_ids, pane_aggregate
from scabbard.kernels.join import build_index
from scabbard.query import Query, QueryError, optimize

MIN_BATCH = 1 << 18
MAX_BATCH = 1 << 22
INT64_MIN = np.iinfo(np.int64).min


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "scabbard" / "codegen"


@dataclass(frozen=True)
class EngineConfig:
    """How the engine runs a query.  ``batch_rows=None`` sizes batches from the data."""

    workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    batch_rows: int | None = None
    queue_depth: int | None = None
    cache_dir: Path = field(default_factory=default_cache_dir)
    metrics_interval: float = 0.5

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.batch_rows is not None and self.batch_rows < 1:
            raise ValueError(f"batch_rows must be >= 1, got {self.batch_rows}")


@dataclass
class Edges:
    """Pane partials of one branch at a task's edges, keyed (not by task-local gid)."""

    pane: np.ndarray
    keys: np.ndarray
    cnt: np.ndarray
    ints: np.ndarray
    floats: np.ndarray


@dataclass
class TaskResult:
    seq: int
    tuples: int
    ingest_time: float
    first_pane: int
    last_pane: int
    long: bool  # has windows of its own (then ``internal`` holds them)
    heads: list[Edges]
    tails: list[Edges]
    internal: dict | None
    end_offset: int = 0  # input offset one past the task's batch
    last_ts: int = 0
    marker: object = None  # a checkpoint marker that followed this task's batch


def _edges(partials, lo: int, hi: int) -> Edges:
    pane, gid, cnt, iv, fv, gkeys = partials
    return Edges(pane[lo:hi], gkeys[gid[lo:hi]], cnt[lo:hi], iv[lo:hi], fv[lo:hi])


class _BranchAssembler:
    """The sequential window state of one branch across tasks.

    Used for the windows no task can compute alone when they cannot be computed
    in parallel: around short tasks, and at the start.  A long task leaves its
    tail here as *pending*; it is loaded into the state only if the next task
    needs the sequential path.
    """

    def __init__(self, branch: physical.Branch):
        self.b = branch
        k = branch.key_width
        ni, nf = len(branch.iops), len(branch.fops)
        self.ws, self.dqi, self.dqf = kw.ws_new(64, ni, nf)
        self.table = ht.new_table(k, 64)
        self.fifo = kw.fifo_new(ni, nf)
        self.out = kw.out_new(k, ni, nf, 1024)
        self.cur = np.array([INT64_MIN], dtype=np.int64)
        self.pending: tuple[Edges, int] | None = None  # a long task's tail, not yet loaded

    def _feed(self, e: Edges, emit: bool, upto: int, m: int) -> int:
        b = self.b
        (self.ws, self.dqi, self.dqf, self.table, self.fifo, self.out, m) = kw.asm_feed(
            self.ws, self.dqi, self.dqf, self.table, self.fifo, self.out, self.cur, e.pane,
            e.keys, e.cnt, e.ints, e.floats, b.iops, b.fops, b.panes, b.slide_ms, emit, upto, m)
        return m

    def _raw(self, m: int):
        return tuple(a[:m].copy() for a in self.out)

    def _load_pending(self) -> None:
        """Make the state the window of the pending tail (its windows were emitted already)."""
        if self.pending is None:
            return
        tail, last_pane = self.pending
        self.pending = None
        kw.asm_reset(self.ws, self.dqi, self.dqf, self.fifo)
        self.table = ht.new_table(self.b.key_width, 64)
        self._feed(tail, False, last_pane, 0)

    def task(self, r: TaskResult, i: int):
        """The windows of task ``r`` it could not compute alone, sequentially."""
        self._load_pending()
        if r.long:
            raw = self._raw(self._feed(r.heads[i], True, r.first_pane + self.b.panes, 0))
            self.pending = (r.tails[i], r.last_pane)
            return raw
        return self._raw(self._feed(r.heads[i], True, r.last_pane, 0))

    def skip(self, r: TaskResult, i: int) -> None:
        """Task ``r``'s leading windows were computed in parallel; keep only its tail."""
        self.pending = (r.tails[i], r.last_pane)

    def flush(self):
        self._load_pending()
        b = self.b
        if self.cur[0] == INT64_MIN:
            return self._raw(0)
        self.out, m = kw.asm_flush(self.ws, self.dqi, self.dqf, self.table, self.fifo, self.out,
                                   self.cur, b.iops, b.fops, b.panes, b.slide_ms)
        return self._raw(m)


@dataclass(frozen=True)
class RunReport:
    query: str
    summary: Summary
    batch_rows: int
    workers: int
    written_bytes: int = 0  # persisted (segments acknowledged by the storage), if any


class Engine:
    """Runs one query: ``Engine(query, relations).run(source, sink)``."""

    def __init__(self, query: Query, relations: dict[str, Table] | None = None,
                 config: EngineConfig | None = None, push_up: bool = False):
        """``push_up``: run the plan persistence push-up rewrote (§3.4): selections and
        projections before the ingress p-stream (:attr:`reduce`), the rest after it."""
        self.query = query
        self.config = config or EngineConfig()
        self.pushup = optimize.push_up(query.node) if push_up else None
        self.reduce = Reducer(self.pushup) if push_up else None
        self.input_schema = self.pushup.schema if push_up else query.node.source().schema
        self.plan = physical.plan(self.pushup.plan if push_up else query.node)
        self.schema = self.plan.schema
        self._bind(relations or {})
        for b in self.plan.branches:
            b.kernel(self.config.cache_dir)

    # -- setup ------------------------------------------------------------------------------
    def _bind(self, relations: dict[str, Table]) -> None:
        """Index every joined relation and collect the arrays each kernel reads."""
        self._relation_args = []
        for b in self.plan.branches:
            args = []
            for node, cols in b.relations:
                name = node.relation.name
                if name not in relations:
                    raise QueryError(f"{self.query.name} joins relation {name!r}: pass its data "
                                     f"(relations={{{name!r}: table}})")
                table = relations[name]
                if table.schema.fingerprint != node.relation.schema.fingerprint:
                    raise QueryError(f"relation {name!r}: the data's schema does not match the query's")
                key = np.asarray(table.column(node.right))
                args.append(build_index(key.reshape(len(key), -1)))
                args.extend(np.asarray(table.column(c)) for c in cols)
            self._relation_args.append(tuple(args))

    def batch_rows_for(self, tuples_per_ms: float) -> int:
        """Batch size: enough panes for tasks to have windows of their own (4 windows' worth)."""
        if self.config.batch_rows:
            return self.config.batch_rows
        b = self.plan.branches[0]
        want = 4 * b.panes * b.slide_ms * tuples_per_ms
        return int(min(MAX_BATCH, max(MIN_BATCH, want)))

    # -- the fragment function (parallel) ----------------------------------------------------
    def _fragment(self, seq: int, batch: Batch, ingest: float) -> TaskResult:
        ts = np.ascontiguousarray(batch.timestamps)
        n = len(ts)
        cols = {f.name: c for f, c in zip(batch.schema.fields, batch.columns, strict=True)}
        heads, tails, internals = [], [], []
        long = False
        first = last = 0
        for b, rel_args in zip(self.plan.branches, self._relation_args, strict=True):
            k, ni, nf = b.key_width, len(b.iops), len(b.fops)
            o_ts = np.empty(n, dtype=np.int64)
            o_keys = np.empty((n, k), dtype=np.int64)
            o_i = np.empty((n, ni), dtype=np.int64)
            o_f = np.empty((n, nf), dtype=np.float64)
            kernel = b.kernel(self.config.cache_dir)
            m = kernel(n, ts, *(cols[c] for c in b.input_columns), *rel_args, o_ts, o_keys, o_i, o_f)
            partials = pane_aggregate(o_ts[:m], o_keys[:m], o_i[:m], o_f[:m], b.iops, b.fops,
                                      b.slide_ms, ordered=True)
            first, last = int(ts[0]) // b.slide_ms, int(ts[-1]) // b.slide_ms
            pane = partials[0]
            long = last - first + 1 > 2 * b.panes
            if long:
                lo, hi = first + b.panes, last - 1
                raw = kw.windows_from_partials(partials, b.iops, b.fops, b.panes, b.slide_ms,
                                               lo, hi)
                internals.append(b.finalize(raw))
                h = int(np.searchsorted(pane, first + b.panes))
                t = int(np.searchsorted(pane, last - b.panes + 1))
                heads.append(_edges(partials, 0, h))
                tails.append(_edges(partials, t, len(pane)))
            else:
                heads.append(_edges(partials, 0, len(pane)))
                tails.append(_edges(partials, len(pane), len(pane)))
        internal = self.plan.post(internals) if long else None
        return TaskResult(seq, n, ingest, first, last, long, heads, tails, internal,
                           batch.end, int(ts[-1]) if n else 0)

    def warm_up(self, batch: Batch) -> None:
        """Run the fragment and assembly code once on a few rows, results discarded.

        Loads the compiled kernels (from numba's on-disk cache) before the clock
        starts, so the first tasks of a run are not charged for it.  Once per engine.
        """
        if getattr(self, "_warm", False):
            return
        if self.reduce is not None:
            batch = self.reduce(batch)
            if not len(batch):  # nothing survives the pushed-up selection: warm up later
                return
        self._warm = True
        head = batch.slice(0, min(len(batch), 2048))
        r = self._fragment(0, head, 0.0)
        for i, b in enumerate(self.plan.branches):
            a = _BranchAssembler(b)
            a.task(r, i)
            b.finalize(a.flush())

    def _boundary(self, prev: TaskResult, cur: TaskResult) -> dict:
        """Windows between two long tasks, from the first's tail and the second's head.

        They end at panes ``prev.last_pane .. cur.first_pane + range/slide - 1``: exactly the
        windows neither task computed alone.  Independent of every other task, so any
        worker can compute them, in parallel with the rest.
        """
        parts = []
        for i, b in enumerate(self.plan.branches):
            t, h = prev.tails[i], cur.heads[i]
            gid, gkeys = key_ids(np.concatenate([t.keys, h.keys]))
            raw = kw.windows_from_partials(
                (np.concatenate([t.pane, h.pane]), gid, np.concatenate([t.cnt, h.cnt]),
                 np.concatenate([t.ints, h.ints]), np.concatenate([t.floats, h.floats]), gkeys),
                b.iops, b.fops, b.panes, b.slide_ms, prev.last_pane, cur.first_pane + b.panes - 1)
            parts.append(b.finalize(raw))
        return self.plan.post(parts)

    def _result_batch(self, cols: dict[str, np.ndarray]) -> Batch:
        return Batch(self.schema, tuple(cols[n] for n in self.schema.names))

    # -- running -----------------------------------------------------------------------------
    def feed(self, source, transform=None) -> SourceFeed:
        """``source`` as this engine's tasks: the operators push-up moved before the engine
        applied (σ, π), then ``transform``, on the workers' threads."""
        return SourceFeed(source, self.reduce, transform, self.config.workers)

    def run(self, feed, sink: Sink, metrics_log: str | Path | None = None,
            on_sample=None, metrics: Metrics | None = None,
            listener: AssemblyListener | None = None, resume: Resume | None = None,
            emit_after: int = INT64_MIN) -> RunReport:
        """Run until the feed ends; return throughput and latency figures.

        ``feed``: a :class:`~scabbard.engine.ports.TaskFeed`, or a source (read through
        :meth:`feed`).  ``listener`` hears of every assembled task and may mark tasks at
        dispatch (checkpoints, GC: :mod:`scabbard.ft`); ``resume`` starts the assembly where a
        checkpoint left it; results whose window ends at or before ``emit_after`` are not
        emitted (they were committed before a failure).
        """
        if not hasattr(feed, "tasks"):
            feed = self.feed(feed)
        metrics = metrics or Metrics(feed.schema.row_bytes, metrics_log,
                                     self.config.metrics_interval, on_sample)
        return _Execution(self, feed, sink, metrics, listener, resume, emit_after).run()

    @property
    def horizon_ms(self) -> int:
        """How far back in event time an open window can reach."""
        return max(b.panes * b.slide_ms + b.slide_ms for b in self.plan.branches)


@dataclass(slots=True)
class _Job:
    """A dispatched task: its number, what it runs on, and the marker it carries."""

    seq: int
    batch: Batch
    ingest_time: float
    marker: object = None
    source_tuples: int | None = None


class _Execution:
    """One run: the dispatcher, the workers, parallel boundary windows and ordered assembly.

    Task ``k`` is assembled after task ``k-1``.  When both are long, the windows
    between them (``boundary k``) are computed by whichever worker finishes the
    second of the two, outside the assembly lock; otherwise the assembler computes
    them sequentially from its window state.
    """

    def __init__(self, engine: Engine, feed, sink: Sink, metrics: Metrics,
                 listener: AssemblyListener | None = None, resume: Resume | None = None,
                 emit_after: int = INT64_MIN):
        self.engine, self.feed, self.sink, self.metrics = engine, feed, sink, metrics
        self.listener, self.resume, self.emit_after = listener, resume, emit_after
        self.clocked = isinstance(sink, ClockedWriter)
        self.next_seq = 0  # the dispatcher's task numbering
        self.clock = {"input_end": 0, "window_end": INT64_MIN}  # of the last emitted result
        self.plan = engine.plan
        self.assemblers = [_BranchAssembler(b) for b in self.plan.branches]
        workers = engine.config.workers
        depth = engine.config.queue_depth or 2 * workers
        self.tasks: queue.Queue = queue.Queue(maxsize=depth)
        # tasks dispatched but not yet assembled: bounds memory (and the input persisted ahead
        # of the windows) when assembly is the bottleneck
        self.window = threading.Semaphore(depth + 2 * workers)
        self.lock = threading.Lock()  # guards the dictionaries below
        self.assembly_lock = threading.Lock()
        self.results: dict[int, TaskResult] = {}  # finished fragments, not yet assembled
        self.tails: dict[int, TaskResult] = {}  # long tasks whose next boundary is not done
        self.boundaries: dict[int, dict] = {}  # boundary k -> result columns
        self.claimed: set[int] = set()
        self.next = 0
        self.prev_long = False
        self.error: BaseException | None = None
        self.barrier: threading.Event | None = None  # aligned checkpoints: the marker's task

    # -- workers -----------------------------------------------------------------------------
    def _claim(self, r: TaskResult) -> list[tuple[TaskResult, TaskResult]]:
        """Boundaries this finished task completes (call with the lock held)."""
        if not r.long:
            return []
        jobs = []
        prev = self.tails.get(r.seq - 1)
        if prev is not None and r.seq not in self.claimed:
            self.claimed.add(r.seq)
            jobs.append((prev, r))
        nxt = self.results.get(r.seq + 1)
        if nxt is not None and nxt.long and r.seq + 1 not in self.claimed:
            self.claimed.add(r.seq + 1)
            jobs.append((r, nxt))
        return jobs

    def _compute_boundary(self, prev: TaskResult, cur: TaskResult) -> None:
        span = timers.start()
        cols = self.engine._boundary(prev, cur)
        timers.stop(span, "boundary", cur.tuples)
        with self.lock:
            self.boundaries[cur.seq] = cols
            self.tails.pop(prev.seq, None)

    def worker(self) -> None:
        while True:
            item = self.tasks.get()
            if item is None:
                return
            try:
                span = timers.start()
                r = self.engine._fragment(item.seq, item.batch, item.ingest_time)
                timers.stop(span, "fragment", len(item.batch), r.long)
                r.marker = item.marker
                if item.source_tuples is not None:  # when push-up dropped some
                    r.tuples = item.source_tuples
                with self.lock:
                    self.results[r.seq] = r
                    if r.long:
                        self.tails[r.seq] = r
                    jobs = self._claim(r)
                for prev, cur in jobs:
                    self._compute_boundary(prev, cur)
                self.drain()
            except BaseException as e:  # surface in run(); stop the source
                self.error = e
                self.feed.stop()
                return

    # -- ordered assembly ----------------------------------------------------------------------
    def emit(self, cols: dict[str, np.ndarray], input_end: int = 0) -> int:
        we = cols["window_end"]
        if len(we) and we[0] <= self.emit_after:
            keep = we > self.emit_after  # committed before a failure: a duplicate
            cols = {k: v[keep] for k, v in cols.items()}
            we = cols["window_end"]
        n = len(we)
        if n:
            batch = self.engine._result_batch(cols)
            self.clock = {"input_end": input_end, "window_end": int(we[-1])}
            if self.clocked:
                self.sink.write_clocked(batch, self.clock)
            else:
                self.sink.write(batch)
        return n

    def _ready(self) -> TaskResult | None:
        """The next task if it can be assembled now (with the lock held)."""
        r = self.results.get(self.next)
        if r is None:
            return None
        parallel = r.long and self.prev_long
        if parallel and r.seq not in self.boundaries:
            if r.seq in self.claimed:
                return None  # a worker is computing it; it drains when done
            self.claimed.add(r.seq)
            self.boundaries[r.seq] = None  # computed below, by the assembler
        del self.results[self.next]
        return r

    def assemble(self, r: TaskResult) -> None:
        rows = 0
        if r.long and self.prev_long:
            with self.lock:
                cols = self.boundaries.pop(r.seq)
                prev = self.tails.pop(r.seq - 1, None)
            if cols is None:
                cols = self.engine._boundary(prev, r)
            rows += self.emit(cols, r.end_offset)
            for i, a in enumerate(self.assemblers):
                a.skip(r, i)
        else:
            raws = [a.task(r, i) for i, a in enumerate(self.assemblers)]
            rows += self.emit(self.plan.post([b.finalize(raw) for b, raw in
                                              zip(self.plan.branches, raws, strict=True)]),
                              r.end_offset)
            with self.lock:
                self.tails.pop(r.seq - 1, None)
        if r.internal is not None:
            rows += self.emit(r.internal, r.end_offset)
        if self.listener is not None:
            self.listener.assembled(r, dict(self.clock))
            if r.marker is not None and self.barrier is not None:
                self.barrier.set()
        self.prev_long = r.long
        self.window.release()
        self.metrics.record(r.tuples, time.perf_counter() - r.ingest_time, rows)

    def drain(self) -> None:
        while True:
            if not self.assembly_lock.acquire(blocking=False):
                return
            try:
                while True:
                    with self.lock:
                        r = self._ready()
                    if r is None:
                        break
                    span = timers.start()
                    self.assemble(r)
                    timers.stop(span, "assembly", r.tuples)
                    self.next += 1
            finally:
                self.assembly_lock.release()
            with self.lock:
                r = self.results.get(self.next)
                if r is None or (r.long and self.prev_long and r.seq in self.claimed
                                 and r.seq not in self.boundaries):
                    return

    # -- the run -------------------------------------------------------------------------------
    def submit(self, item: _Job) -> bool:
        """Queue a task once the assembly window has room; False if the run failed."""
        while not self.window.acquire(timeout=0.1):
            if self.error is not None:
                return False
        if self.error is not None:
            return False
        self.tasks.put(item)
        return True

    def dispatch(self, batch: Batch, ingest: float, tuples: int | None = None) -> bool:
        """Number the task, attach the listener's marker if it has one, queue it.
        ``tuples``: the source tuples it stands for (when push-up dropped some)."""
        marker = self.listener.marker() if self.listener is not None else None
        seq = self.next_seq
        self.next_seq += 1
        job = _Job(seq, batch, ingest, marker, tuples)
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

    def restore(self, at: Resume) -> None:
        """Start after task ``at.seq``, as if it had just been assembled (a long task whose
        tail is the saved partials)."""
        prev = TaskResult(at.seq, 0, 0.0, at.last_pane, at.last_pane, True, [], at.edges,
                           None, at.input_end, at.last_ts)
        self.tails[at.seq] = prev
        self.prev_long = True
        for a, e in zip(self.assemblers, at.edges, strict=True):
            a.pending = (e, at.last_pane)
        self.next = self.next_seq = at.seq + 1
        self.clock = dict(at.clock) or self.clock

    def run(self) -> RunReport:
        engine, metrics = self.engine, self.metrics
        cfg = engine.config
        self.sink.open(engine.schema)
        threads = [threading.Thread(target=self.worker, name=f"worker-{i}", daemon=True)
                   for i in range(cfg.workers)]
        engine.warm_up(self.feed.peek())
        metrics.start(query=engine.query.name, workers=cfg.workers,
                      batch_rows=self.feed.batch_rows)
        for t in threads:
            t.start()
        if self.resume is not None:
            self.restore(self.resume)
        try:
            if self.listener is not None:
                self.listener.start(lambda: self.error is None)
            for task in self.feed.tasks():
                if self.error is not None or not self.dispatch(task.batch, task.ingest_time,
                                                               task.source_tuples):
                    break
        except BaseException as e:  # the dispatcher failed (e.g. fault tolerance: fail-stop)
            if self.error is None:
                self.error = e
            self.feed.stop()
        finally:
            for _ in threads:
                self.tasks.put(None)
            for t in threads:
                t.join()
        if self.error is not None:
            self._fail()
        self.drain()
        if self.results:
            raise RuntimeError(f"tasks {sorted(self.results)} were never assembled")
        # end of stream: the open windows are final.  A run stopped early (by duration) is not
        # at the end of its stream: a fault-tolerant one continues with --recover.
        if self.listener is None or self.feed.exhausted:
            final = self.plan.post([b.finalize(a.flush()) for b, a in
                                    zip(self.plan.branches, self.assemblers, strict=True)])
            metrics.add_result_rows(self.emit(final, self.clock["input_end"]))
        if self.listener is not None:
            try:
                self.listener.stop(failed=False)  # may raise (fault tolerance: fail-stop)
            except BaseException as e:
                self.error = e
                self._fail()
        self.sink.close()
        return RunReport(engine.query.name, metrics.stop(), self.feed.batch_rows, cfg.workers)

    def _fail(self) -> None:
        """Stop everything and raise the run's error; the sink commits nothing more."""
        if self.listener is not None:
            self.listener.stop(failed=True)
        try:
            self.sink.close()
        finally:
            self.metrics.stop(error=repr(self.error))
        raise self.error
