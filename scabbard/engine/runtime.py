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

from scabbard.batch import Batch
from scabbard.data import Table
from scabbard.engine import physical
from scabbard.engine.metrics import Metrics, Summary
from scabbard.engine.sinks import Sink
from scabbard.kernels import hashtable as ht
from scabbard.kernels import window as kw
from scabbard.kernels.aggregate import _pane_aggregate
from scabbard.kernels.join import build_index
from scabbard.query import Query, QueryError

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
class _Edges:
    """Pane partials of one branch at a task's edges, keyed (not by task-local gid)."""

    pane: np.ndarray
    keys: np.ndarray
    cnt: np.ndarray
    ints: np.ndarray
    floats: np.ndarray


@dataclass
class _TaskResult:
    seq: int
    tuples: int
    ingest_time: float
    first_pane: int
    last_pane: int
    long: bool  # has windows of its own (then ``internal`` holds them)
    heads: list[_Edges]
    tails: list[_Edges]
    internal: dict | None


def _edges(partials, lo: int, hi: int) -> _Edges:
    pane, gid, cnt, iv, fv, gkeys = partials
    return _Edges(pane[lo:hi], gkeys[gid[lo:hi]], cnt[lo:hi], iv[lo:hi], fv[lo:hi])


class _BranchAssembler:
    """The sequential window state of one branch across tasks (boundary windows)."""

    def __init__(self, branch: physical.Branch):
        self.b = branch
        k = branch.key_width
        ni, nf = len(branch.iops), len(branch.fops)
        self.ws, self.dqi, self.dqf = kw.ws_new(64, ni, nf)
        self.table = ht.new_table(k, 64)
        self.fifo = kw.fifo_new(ni, nf)
        self.out = kw.out_new(k, ni, nf, 1024)
        self.cur = np.array([INT64_MIN], dtype=np.int64)

    def _feed(self, e: _Edges, emit: bool, upto: int, m: int) -> int:
        b = self.b
        (self.ws, self.dqi, self.dqf, self.table, self.fifo, self.out, m) = kw.asm_feed(
            self.ws, self.dqi, self.dqf, self.table, self.fifo, self.out, self.cur, e.pane,
            e.keys, e.cnt, e.ints, e.floats, b.iops, b.fops, b.panes, b.slide_ms, emit, upto, m)
        return m

    def _raw(self, m: int):
        return tuple(a[:m].copy() for a in self.out)

    def task(self, r: _TaskResult, i: int):
        """Emit the windows of task ``r`` that the task could not compute alone."""
        panes = self.b.panes
        if r.long:
            m = self._feed(r.heads[i], True, r.first_pane + panes, 0)
            raw = self._raw(m)
            kw.asm_reset(self.ws, self.dqi, self.dqf, self.fifo)
            self.table = ht.new_table(self.b.key_width, 64)
            self._feed(r.tails[i], False, r.last_pane, 0)
            return raw
        return self._raw(self._feed(r.heads[i], True, r.last_pane, 0))

    def flush(self):
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


class Engine:
    """Runs one query: ``Engine(query, relations).run(source, sink)``."""

    def __init__(self, query: Query, relations: dict[str, Table] | None = None,
                 config: EngineConfig | None = None):
        self.query = query
        self.config = config or EngineConfig()
        self.plan = physical.plan(query.node)
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
    def _fragment(self, seq: int, batch: Batch, ingest: float) -> _TaskResult:
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
            partials = _pane_aggregate(o_ts[:m], o_keys[:m], o_i[:m], o_f[:m], b.iops, b.fops,
                                       b.slide_ms)
            first, last = int(ts[0]) // b.slide_ms, int(ts[-1]) // b.slide_ms
            pane = partials[0]
            long = last - first + 1 > 2 * b.panes
            if long:
                lo, hi = first + b.panes, last - 1
                raw = kw._windows_from_partials(*partials, b.iops, b.fops, b.panes, b.slide_ms,
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
        return _TaskResult(seq, n, ingest, first, last, long, heads, tails, internal)

    def warm_up(self, batch: Batch) -> None:
        """Run the fragment and assembly code once on a few rows, results discarded.

        Loads the compiled kernels (from numba's on-disk cache) before the clock
        starts, so the first tasks of a run are not charged for it.
        """
        head = batch.slice(0, min(len(batch), 2048))
        r = self._fragment(0, head, 0.0)
        for i, b in enumerate(self.plan.branches):
            a = _BranchAssembler(b)
            a.task(r, i)
            b.finalize(a.flush())

    # -- running -----------------------------------------------------------------------------
    def _result_batch(self, cols: dict[str, np.ndarray]) -> Batch:
        return Batch(self.schema, tuple(cols[n] for n in self.schema.names))

    def run(self, source, sink: Sink, metrics_log: str | Path | None = None,
            on_sample=None) -> RunReport:
        """Run until the source ends; return throughput and latency figures."""
        cfg = self.config
        batch_rows = getattr(source, "batch_rows", 0)
        metrics = Metrics(source.schema.row_bytes, metrics_log, cfg.metrics_interval, on_sample)
        assemblers = [_BranchAssembler(b) for b in self.plan.branches]
        tasks: queue.Queue = queue.Queue(maxsize=cfg.queue_depth or 2 * cfg.workers)
        results: dict[int, _TaskResult] = {}
        results_lock = threading.Lock()
        assembly_lock = threading.Lock()
        state = {"next": 0, "error": None}
        sink.open(self.schema)

        def emit(cols: dict[str, np.ndarray]) -> int:
            n = len(cols["window_end"])
            if n:
                sink.write(self._result_batch(cols))
            return n

        def assemble(r: _TaskResult) -> None:
            raws = [a.task(r, i) for i, a in enumerate(assemblers)]
            rows = emit(self.plan.post([b.finalize(raw) for b, raw in
                                        zip(self.plan.branches, raws, strict=True)]))
            if r.internal is not None:
                rows += emit(r.internal)
            metrics.record(r.tuples, time.perf_counter() - r.ingest_time, rows)

        def drain() -> None:
            while True:
                if not assembly_lock.acquire(blocking=False):
                    return
                try:
                    while True:
                        with results_lock:
                            r = results.pop(state["next"], None)
                        if r is None:
                            break
                        assemble(r)
                        state["next"] += 1
                finally:
                    assembly_lock.release()
                with results_lock:
                    if state["next"] not in results:
                        return

        def worker() -> None:
            while True:
                item = tasks.get()
                if item is None:
                    return
                try:
                    r = self._fragment(*item)
                    with results_lock:
                        results[r.seq] = r
                    drain()
                except BaseException as e:  # surface in run(); stop the source
                    state["error"] = e
                    source.stop()
                    return

        threads = [threading.Thread(target=worker, name=f"worker-{i}", daemon=True)
                   for i in range(cfg.workers)]
        self.warm_up(source.peek())
        metrics.start(query=self.query.name, workers=cfg.workers, batch_rows=batch_rows)
        for t in threads:
            t.start()
        try:
            for sb in source.batches():
                if state["error"] is not None:
                    break
                tasks.put((sb.seq, sb.batch, sb.ingest_time))
        finally:
            for _ in threads:
                tasks.put(None)
            for t in threads:
                t.join()
        if state["error"] is not None:
            sink.close()
            metrics.stop(error=repr(state["error"]))
            raise state["error"]
        drain()
        with results_lock:
            if results:
                raise RuntimeError(f"tasks {sorted(results)} were never assembled")
        metrics.add_result_rows(emit(self.plan.post([b.finalize(a.flush()) for b, a in
                                                     zip(self.plan.branches, assemblers, strict=True)])))
        sink.close()
        summary = metrics.stop()
        return RunReport(self.query.name, summary, batch_rows, cfg.workers)
