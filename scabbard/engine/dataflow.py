"""PipeFabric's partitioned dataflow: partition operators on threads of their own, fed by key
through queues from the source, merged in order with punctuations.

PipeFabric (GvDB 2019, §3) parallelises a stateful query by *partitioning its input*: a
partitioning operator routes each tuple by a hash of its key to one of P long-lived
partition operators, each a sequential instance of the window aggregation over its keys,
running on a thread of its own; a merge puts their results back in order.  The engine's
task-parallel mode (:mod:`scabbard.engine.execution`) instead gives every worker whole
batches and assembles the windows they share in order; its partitioned *assembly*
(:class:`~scabbard.engine.assembly.PartitionedAssembler`) splits only the pane partials, a
fork-join per task.  Here, the input itself:

* **the source** (the caller's thread) routes each batch: a kernel generated for the query
  (:class:`Router`: its selections, then its group keys computed - σ and π as the front
  kernel computes them - for the tuples that pass) gives every surviving tuple's key, hashed
  to one of P partitions (:func:`scabbard.kernels.assembler.route_rows`: a multiply a key
  word, 6-7 ns a tuple with the keys); each partition gets the batch and its row numbers
  through its queue (bounded) - nothing is copied.  (A first version computing the keys in
  numpy kept the source busy nine tenths of an LRB1 run, py-spy: routing is the one serial
  stage);
* **a partition** (P threads, one queue each) runs the branch's front kernel on its rows
  of the batch where they are (``FrontSpec.gather``: a copy of them cost 3 ns a tuple on
  LRB1) and pane aggregation on them, computes the windows within the batch from its
  partials, those it shares with the batch before from that one's tail and its own head
  when both are long (as the engine's workers do), and the rest through a window state of
  its own (:class:`~scabbard.engine.assembly.BranchAssembler`: after a short batch, or every
  window of a batch shorter than a window), closing every window that
  ends before the batch's last pane - **the batch's end is a punctuation**: a partition that
  got no tuple of a batch still receives its panes and moves its windows on, so an idle
  partition never holds the merge back (where PipeFabric's k-slack would wait a bound);
* **the merge** (a thread) takes each batch's rows once every partition has delivered them
  and hands them on window by window in window order.  Where the fused operators judge each
  row alone (HAVINGs), each partition has made its own result columns and applied them, and
  the merge only orders: a window's rows partition by partition, as views where a window has
  many rows a piece (:func:`in_window_order`; LRB2 emits 30 rows an input tuple, which a
  merge that made every result column alone held to a quarter of the engine's throughput).
  A keep-max needs every partition's rows of a window: the merge gathers them
  (:func:`~scabbard.engine.assembly.merge_windows`) and runs the fused operators.

P is given, or planned (:func:`plan_parts`): on the dataset's first batch the router tells
the busiest partition's share of the tuples for 1 to ``workers`` partitions, and the plan
takes the fewest partitions within 10 % of the fastest (one key: one partition; keys spread
evenly: a worker each).

Results are the serial engine's, a window's rows in another order (tests).  It runs queries
with one window aggregation whose group keys σ and π compute from a tuple's own attributes
(:func:`check_routable` refuses the others: a joined relation's key, a global aggregate, a
count of groups fused into the emission), in memory.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field, replace

import numpy as np

from scabbard.engine.assembly import BranchAssembler, merge_windows, windows_between
from scabbard.engine.frontcode import front, group_key_codes, inputs
from scabbard.engine.physical import take, window_segments
from scabbard.engine.runtime import Engine, front_outputs
from scabbard.engine.sources import ReplaySource
from scabbard.engine.tasks import BranchPart, empty_edges, task_edges
from scabbard.kernels import assembler as ka
from scabbard.kernels import rows as kr
from scabbard.kernels import window as kw
from scabbard.kernels.aggregate import pane_aggregate
from scabbard.kernels.codegen import FrontSpec, compile_front
from scabbard.query.expr import QueryError
from scabbard.query.plan import Filter, Project, Source

QUEUE_BATCHES = 4  # batches a partition's queue holds before the source waits for it
_END, _STOPPED = object(), object()  # a partition's end of input; the run failed elsewhere
_FLUSH = -1  # the merge's key of the partitions' last windows (a batch's is its number)
VIEW_ROWS = 1024  # a window's rows a piece from which the merge hands on views, not copies


def check_routable(branch) -> None:
    """QueryError unless the branch's groups can be routed from its input tuples: keys
    computed by σ and π from source attributes (not a joined relation's), at least one, and
    every group's rows in one partition (a per-window count fused into the emission counts
    groups by some of their keys)."""
    node = branch.node
    if not node.keys:
        raise QueryError(f"{branch.id}: a global aggregate has one group: nothing to partition")
    at = node.input
    while not isinstance(at, Source):
        if not isinstance(at, Filter | Project):
            raise QueryError(f"{branch.id}: its groups' keys pass a {type(at).__name__}: a "
                             f"partitioned dataflow routes tuples by keys their own "
                             f"attributes give (selections and projections only)")
        at = at.input
    if branch.select[0] == kr.ROLLUP_COUNT:
        raise QueryError(f"{branch.id}: a per-window count over its groups is not "
                         f"partitioned by the groups' keys")


class Router:
    """A branch's routing kernel (see the module): its selections and its group keys, compiled
    by :func:`scabbard.kernels.codegen.compile_front` in index mode."""

    def __init__(self, branch, cache_dir):
        check_routable(branch)
        node = branch.node
        f = front(node.input)
        keys = group_key_codes(node, f)
        self.columns, _ = inputs(f, node.input.source().schema, ("timestamp",))
        self.width = len(keys)
        self.kernel = compile_front(FrontSpec(self.columns, (), tuple(f.steps), tuple(keys),
                                              (), (), index=True), cache_dir)

    def keys(self, batch) -> tuple[np.ndarray, np.ndarray]:
        """The row numbers of the batch's tuples that pass the selections, and their group
        keys (an int64 matrix, a row a tuple)."""
        n = len(batch)
        idx, keys = np.empty(n, dtype=np.int64), np.empty((n, self.width), dtype=np.int64)
        # the event times as the engine's front kernels get them (a replayed copy's shift
        # deferred)
        m = self.kernel(n, batch.event_time()[0], *(batch.column(c) for c in self.columns),
                        idx, keys, np.empty((n, 0), np.int64), np.empty((n, 0), np.float64))
        return idx[:m], keys[:m]

    def loads(self, batch, most: int) -> list[float]:
        """For 1 to ``most`` partitions, the busiest one's share of the batch's tuples that
        pass the selections (1.0 where none does)."""
        idx, keys = self.keys(batch)
        if not len(idx):
            return [1.0] * most
        return [float(np.diff(ka.route_rows(idx, keys, p)[1]).max()) / len(idx)
                for p in range(1, most + 1)]

    def route(self, batch, parts: int) -> list[np.ndarray]:
        """Each partition's row numbers of ``batch`` (the tuples that pass the selections), in
        input order."""
        idx, keys = self.keys(batch)
        if parts == 1:
            return [idx]
        routed, starts = ka.route_rows(idx, keys, parts)
        return [routed[lo:hi] for lo, hi in zip(starts[:-1].tolist(), starts[1:].tolist(),
                                                strict=True)]


def plan_parts(loads: list[float], within: float = 0.9) -> int:
    """The fewest partitions whose run is within ``within`` of the fastest choice's, from
    ``loads[P - 1]``: the busiest of P partitions' share of the tuples (a partition's work is
    its tuples, so P partitions take that share of one's time - one key: 1.0 at every P, and
    one partition is as fast as any; keys spread evenly: 1 / P)."""
    speed = [1.0 / max(x, 1e-9) for x in loads]
    return next(p for p, v in enumerate(speed, 1) if v >= within * max(speed))


@dataclass
class DataflowReport:
    """What a partitioned run did: input tuples, wall seconds, result rows, per partition the
    tuples it aggregated; ``results``: the result columns when collected."""

    parts: int
    tuples: int = 0
    seconds: float = 0.0
    result_rows: int = 0
    batches: int = 0
    per_partition: list[int] = field(default_factory=list)
    long_batches: int = 0  # partitions' batches whose own windows came from their partials
    results: list[dict] | None = None

    @property
    def tuples_per_s(self) -> float:
        return self.tuples / self.seconds if self.seconds > 0 else 0.0

    def __str__(self) -> str:
        shares = ", ".join(f"{t / max(1, self.tuples):.0%}" for t in self.per_partition)
        return (f"{self.tuples:,} tuples in {self.seconds:.2f} s = "
                f"{self.tuples_per_s / 1e6:.2f} M tuples/s, {self.parts} partitions "
                f"({shares}), {self.result_rows:,} result rows")


class _Partition:
    """One partition operator: its queue, its window state, its thread."""

    def __init__(self, flow: PartitionedDataflow, p: int):
        self.flow, self.p = flow, p
        self.inbox: queue.Queue = queue.Queue(QUEUE_BATCHES)
        self.assembler = BranchAssembler(flow.branch)
        self.tuples = 0
        self.arrays: dict[str, np.ndarray] = {}
        self.rows = 0  # the most rows a batch gave this partition
        self.long = 0  # batches whose own windows came from their partials
        self.prev: tuple | None = None  # the last batch's tail and last pane, if it was long
        self.thread = threading.Thread(target=flow.guarded, args=(self.run,), daemon=True,
                                       name=f"scabbard-partition-{p}")

    def scratch(self, name: str, shape: tuple, dtype) -> np.ndarray:
        """An array of this partition's, kept from batch to batch (grown to the rows a batch
        needs: fresh arrays a batch cost page faults and the allocator's lock, which every
        thread of the process shares)."""
        a = self.arrays.get(name)
        if a is None or len(a) < self.rows or a.shape[1:] != shape[1:] or a.dtype != dtype:
            a = self.arrays[name] = np.empty((self.rows,) + tuple(shape[1:]), dtype)
        return a

    def run(self) -> None:
        flow, b = self.flow, self.flow.branch
        kernel = flow.kernel
        k, ni, nf = self.widths = b.key_width, len(b.iops), len(b.fops)
        while True:
            item = flow.take(self.inbox)
            if item is _STOPPED:  # the run failed elsewhere
                return
            if item is _END:
                flow.put(flow.merge_in, (_FLUSH, self.p, [flow.finish(self.assembler.flush())]))
                return
            seq, batch, rows, first, last = item
            n = len(rows)
            self.rows = max(self.rows, n)
            self.tuples += n
            if n:
                ts, shift = flow.axis(batch)
                o_ts, o_keys, o_i, o_f = (self.scratch(f"out:{j}", a.shape, a.dtype)
                                          for j, a in enumerate(front_outputs(0, k, ni, nf)))
                m = kernel(n, rows, ts, *(batch.column(c) for c in b.input_columns),
                           *flow.rel_args, o_ts[:n], o_keys[:n], o_i[:n], o_f[:n])
                partials = pane_aggregate(o_ts[:m], o_keys[:m], o_i[:m], o_f[:m], b.iops,
                                          b.fops, b.slide_ms, ordered=True, shift=shift)
            else:
                partials = None
            flow.put(flow.merge_in, (seq, self.p, [flow.finish(raw) for raw in
                                                   self.windows(partials, first, last)]))

    def windows(self, partials, first: int, last: int) -> list[tuple]:
        """The windows a batch's partials (None: no tuple of the partition) close, as window
        rows in window order, in pieces (each in window order, the next's windows after its):
        those the batch shares with the batch before - from that one's tail and this one's
        head where both are long, else through the partition's window state - then those
        within it from its own partials, as the engine's long tasks do; a batch shorter than a
        window and two panes gives all of them through the state."""
        b, (k, ni, nf) = self.flow.branch, self.widths
        none = empty_edges(k, ni, nf)
        prev, self.prev = self.prev, None
        if last - first + 1 < b.long_panes:  # short: every window through the state
            head = none if partials is None else task_edges(partials, 0, len(partials[0]))
            return [self.assembler.task(BranchPart(first, last, False, head, none, None))]
        if partials is None:
            head = tail = none
        else:
            pane = partials[0]
            head = task_edges(partials, 0, int(np.searchsorted(pane, first + b.panes)))
            tail = task_edges(partials, int(np.searchsorted(pane, last - b.panes + 1)),
                              len(pane))
        self.long += 1
        # typed keys where the partition makes the result columns (as the engine's tasks do)
        typed = b.key_dtypes if self.flow.row_wise else None
        part = BranchPart(first, last, True, head, tail, None)
        if prev is None:
            shared = self.assembler.task(part)
        else:  # after a long batch: the windows between them from its tail and this head,
            # as the engine's workers compute them (its tail is never loaded into the state)
            shared = windows_between(b, prev[0], head, prev[1], first + b.panes - 1, typed)
            self.assembler.skip(part)
        self.prev = (tail, last)
        if partials is None or first + b.panes > last - 1:
            return [shared]
        return [shared, kw.windows_from_partials(partials, b.iops, b.fops, b.panes, b.slide_ms,
                                                 first + b.panes, last - 1, b.select, typed)]


def in_window_order(pieces: list[dict]) -> list[dict]:
    """Result columns of window rows (``pieces``, each in window order) as pieces in window
    order: each window's rows piece by piece, as views - or, where the windows have fewer
    rows a piece than :data:`VIEW_ROWS`, gathered into one piece (one sort of the window
    ends, stable)."""
    if len(pieces) <= 1:
        return pieces
    starts = [window_segments(c["window_end"]) for c in pieces]
    rows = sum(len(c["window_end"]) for c in pieces)
    if rows < VIEW_ROWS * sum(len(s) for s in starts):  # rows a view, were each a view
        cols = {n: np.concatenate([c[n] for c in pieces]) for n in pieces[0]}
        return [take(cols, np.argsort(cols["window_end"], kind="stable"))]
    ends = [c["window_end"][s] for c, s in zip(pieces, starts, strict=True)]
    windows = np.unique(np.concatenate(ends))
    bounds = []  # per piece: each window's first row and end (equal: none of it)
    for c, s, e in zip(pieces, starts, ends, strict=True):
        edge = np.append(s, len(c["window_end"]))
        at = np.searchsorted(e, windows)
        hit = (at < len(e)) & (e[np.minimum(at, len(e) - 1)] == windows)
        bounds.append((np.where(hit, edge[at], 0).tolist(),
                       np.where(hit, edge[np.minimum(at + 1, len(edge) - 1)], 0).tolist()))
    return [{n: v[lo[w]:hi[w]] for n, v in c.items()}
            for w in range(len(windows)) for c, (lo, hi) in zip(pieces, bounds, strict=True)
            if hi[w] > lo[w]]


class PartitionedDataflow:
    """A query as P partition operators on threads of their own (see the module):
    ``PartitionedDataflow(query, dataset, parts).run(source)``."""

    def __init__(self, query, dataset, parts: int | None, collect: bool = False, config=None):
        if parts is not None and parts < 1:
            raise ValueError(f"parts must be >= 1, got {parts}")
        self.engine = Engine(query, dataset.tables, config)
        plan = self.engine.plan
        if plan.selection is not None or len(plan.branches) != 1 or plan.graph:
            raise QueryError(f"{query.name}: a partitioned dataflow runs one window "
                             f"aggregation (and the operators fused above it)")
        self.plan, self.branch = plan, plan.branches[0]
        self.router = Router(self.branch, self.engine.config.cache_dir)
        self.rel_args = self.engine._relation_args[0]
        # the branch's front kernel reading a partition's rows of a batch in place
        self.kernel = compile_front(replace(self.branch.spec, gather=True),
                                    self.engine.config.cache_dir)
        self.cache_dir = self.engine.config.cache_dir
        self.loads: list[float] | None = None  # the plan's busiest shares (P planned)
        if parts is None:  # planned on the dataset's first batch, at most a worker each
            sample = ReplaySource(dataset, self.engine.task_rows(dataset)).peek()
            self.loads = self.router.loads(sample, self.engine.config.workers)
            parts = plan_parts(self.loads)
        self.parts, self.collect = parts, collect
        self.row_wise = all(op.kind == "having" for op in plan.chains[0]
                            if op.id != self.branch.emitted)
        # bounded: partitions ahead of the merge wait (their rows may be many an input tuple)
        self.merge_in: queue.Queue = queue.Queue(QUEUE_BATCHES * parts)
        self._ran = False
        self.end_seq = -1
        self.failed: BaseException | None = None
        self._lock = threading.Lock()
        self.report = DataflowReport(parts, results=[] if collect else None)

    def axis(self, batch) -> tuple[np.ndarray, int]:
        """The windows' axis of a batch's tuples: event time (``ts + shift``), or each
        tuple's input offset (count-based windows)."""
        if self.plan.rows:
            return np.arange(batch.offset, batch.end, dtype=np.int64), 0
        return batch.event_time()

    def guarded(self, fn) -> None:
        try:
            fn()
        except BaseException as e:  # the first failure stops the run; the caller raises it
            self.fail(e)

    def fail(self, e: BaseException) -> None:
        with self._lock:
            if self.failed is None:
                self.failed = e

    def _merge(self) -> None:
        """Each batch's rows once every partition gave them, in batch order."""
        pending, nxt = {}, 0
        while True:
            item = self.take(self.merge_in)
            if item is _STOPPED:
                return
            seq, p, raw = item
            pending.setdefault(seq, {})[p] = raw
            while nxt in pending and len(pending[nxt]) == self.parts:
                self._emit(pending.pop(nxt))
                nxt += 1
            if nxt == self.end_seq and len(pending.get(_FLUSH, ())) == self.parts:
                self._emit(pending.pop(_FLUSH))
                return

    def finish(self, raw: tuple):
        """A partition's piece of window rows as it leaves the partition: result columns
        through the fused operators where each row's fate is its own (HAVINGs: the
        partitions do that work at once, the merge only orders), else the rows as they
        are (a keep-max needs every partition's rows of a window: the merge's work)."""
        return self.plan.post(0, self.branch.finalize(raw)) if self.row_wise else raw

    def _emit(self, pieces: dict) -> None:
        """A batch's pieces of window rows, every partition's (by partition), merged in
        window order (and through the branch's fused operators when the partitions did not
        apply them: a keep-max fused into the emission runs again here, as each partition
        kept its own groups' largest)."""
        flat = [x for q in range(self.parts) for x in pieces[q]]
        if self.row_wise:
            out = in_window_order([c for c in flat if len(c["window_end"])])
        else:
            raw = merge_windows(flat)
            out = [self.plan.post(0, self.branch.finalize(raw))] if len(raw[1]) else []
        for cols in out:
            n = len(cols["window_end"])
            self.report.result_rows += n
            if self.collect and n:
                self.report.results.append(cols)

    def put(self, q: queue.Queue, item) -> None:
        """Into a queue, waiting while it is full - unless the run failed (a thread that
        stopped never empties its queue)."""
        while self.failed is None:
            try:
                q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def take(self, q: queue.Queue):
        """The next item of a queue, waiting while it is empty - :data:`_STOPPED` once the run
        failed (whoever would fill it may have stopped)."""
        while self.failed is None:
            try:
                return q.get(timeout=0.1)
            except queue.Empty:
                continue
        return _STOPPED

    def source(self, dataset, replay, batch_rows: int | None = None) -> ReplaySource:
        rows = batch_rows or self.engine.task_rows(dataset, replay.rate)
        return ReplaySource(dataset, rows, replay)

    def run(self, source) -> DataflowReport:
        """Read ``source`` to its end through the partitions; the report."""
        if self._ran:
            raise RuntimeError("a PartitionedDataflow runs once: make another")
        self._ran = True
        b = self.branch
        partitions = [_Partition(self, p) for p in range(self.parts)]
        merger = threading.Thread(target=self.guarded, args=(self._merge,), daemon=True,
                                  name="scabbard-merge")
        for t in [merger] + [q.thread for q in partitions]:
            t.start()
        t0, seq = time.perf_counter(), 0
        try:
            for sb in source.batches():
                if self.failed is not None:
                    break
                batch = sb.batch
                if not len(batch):
                    continue
                if self.plan.rows:
                    first, last = batch.offset, batch.end - 1
                else:
                    first, last = batch.event_edges()
                first, last = first // b.slide_ms, last // b.slide_ms
                for q, rows in zip(partitions, self.router.route(batch, self.parts),
                                   strict=True):
                    self.put(q.inbox, (seq, batch, rows, first, last))
                self.report.tuples += len(batch)
                seq += 1
        except BaseException as e:  # the threads stop too (a batch may be half handed out)
            self.fail(e)
            raise
        finally:
            self.end_seq = seq
            for q in partitions:
                self.put(q.inbox, _END)
            for t in [merger] + [q.thread for q in partitions]:
                t.join()  # each ends: at its end of input, or within 0.1 s of a failure
        if self.failed is not None:
            raise self.failed
        self.report.seconds = time.perf_counter() - t0
        self.report.batches = seq
        self.report.per_partition = [q.tuples for q in partitions]
        self.report.long_batches = sum(q.long for q in partitions)
        return self.report


def run_partitioned(query, dataset, parts: int | None, replay=None,
                    batch_rows: int | None = None, collect: bool = False,
                    config=None) -> DataflowReport:
    """Run ``query`` over ``dataset`` as a partitioned dataflow of ``parts`` partitions (None:
    as many as :func:`plan_parts` finds worth it on the first batch, at most the config's
    workers; ``replay``: a :class:`~scabbard.engine.Replay`, default once)."""
    from scabbard.engine.sources import ONCE

    flow = PartitionedDataflow(query, dataset, parts, collect=collect, config=config)
    return flow.run(flow.source(dataset, replay or ONCE, batch_rows))
