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

* **the dispatcher** routes each batch: a kernel generated for the query
  (:class:`~scabbard.engine.routing.Router`: its selections, then its group keys computed -
  σ and π as the front kernel computes them - for the tuples that pass) hashes every
  surviving tuple's key to one of P partitions (the hash of
  :func:`scabbard.kernels.assembler.route_rows`, a multiply a key word), writing each row's
  partition, and :func:`~scabbard.kernels.assembler.scatter_rows` then writes each
  partition's list of row numbers, counted in registers (LRB1: 1.3-1.5 ns a tuple, where
  hashing and scattering in one loop took 3.8-5.6, each row's count waiting on the row
  before; the keys written out, then hashed and scattered, 4-7; with one partition it
  writes the selections' row numbers alone); each
  partition gets the batch and its row numbers through its queue (the run's tasks in flight
  bound it) - nothing is copied. (A first version computing the keys in numpy kept the
  source busy nine tenths of an LRB1 run, py-spy: routing is the one serial stage);
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

P is given, or planned (:func:`~scabbard.engine.routing.plan_parts`): on the dataset's first
batch the router tells the busiest partition's share of the tuples for 1 to ``workers``
partitions, and the plan takes the fewest partitions within 10 % of the fastest (one key:
one partition; keys spread evenly: a worker each).

Results are the serial engine's, a window's rows in another order (tests).  It runs queries
with one window aggregation whose group keys σ and π compute from a tuple's own attributes
(:func:`~scabbard.engine.routing.check_routable` refuses the others: a joined relation's key,
a global aggregate, a count of groups fused into the emission), its state in memory.

It is a mode of the engine's run (``EngineConfig(assembly="dataflow[:P]")``, ``--assembly``):
:class:`DataflowExecution` is the engine's :class:`~scabbard.engine.execution.Execution` with
the partitions' threads and the merge's in place of the workers - its dispatcher persists a
task's input when the feed persists it, then routes it; its merge assembles the tasks in task
order through the operator graph to the sink.  So checkpoint markers, the exactly-once sinks
and recovery are the engine's: the state a checkpoint takes is the partitions' pane partials
at a task's edges as one (the serial engine's), and a recovery routes it back to the
partitions by key - to any P, or to the task-parallel engine.
:class:`~scabbard.engine.flowrun.PartitionedDataflow` runs it on a dataset of its own (tests,
``scabbard bench partitioned``).
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent import futures
from dataclasses import replace

import numpy as np

from scabbard.engine.assembly import BranchAssembler, merge_windows, windows_between
from scabbard.engine.execution import Execution
from scabbard.engine.metrics import CpuSpent
from scabbard.engine.physical import window_segments
from scabbard.engine.routing import Router, check_routable, plan_parts
from scabbard.engine.tasks import (
    INT64_MIN,
    BranchPart,
    Edges,
    TaskResult,
    empty_edges,
    front_outputs,
    merge_by_pane,
    task_edges,
)
from scabbard.kernels import assembler as ka
from scabbard.kernels import window as kw
from scabbard.kernels.aggregate import pane_aggregate
from scabbard.kernels.codegen import compile_front
from scabbard.query.expr import QueryError

# a window's rows a piece from which the merge hands on views, not one gathered piece: a
# piece costs ~10 us on its way to the sink (past the channel: OperatorGraph.passes), a row's
# move ~14 ns, most of it the fresh piece's page faults (SG2, ~1,060 rows a piece, gathered ->
# views: the merge's CPU 6.8-7.1 -> 5.1-5.3 ns an input tuple; at ~16 us a piece, through the
# channel, views had cost 9.6-12.6)
VIEW_ROWS = 768


def check_dataflow(engine) -> None:
    """QueryError unless ``engine``'s query runs as a partitioned dataflow: one window
    aggregation whose groups can be routed (:func:`check_routable`), its input the only
    persisted stream, its state in memory, the generic kernels."""
    plan, name = engine.plan, engine.query.name
    if engine.cut_after:
        raise QueryError(f"{name}: a partitioned dataflow persists its input only (no "
                         f"p-stream on another edge)")
    if plan.selection is not None or len(plan.branches) != 1 or plan.graph:
        raise QueryError(f"{name}: a partitioned dataflow runs one window aggregation (and "
                         f"the operators fused above it)")
    if engine.adaptive is not None or engine.spills(0):
        raise QueryError(f"{name}: a partitioned dataflow holds its window state in memory "
                         f"and runs the generic kernels (no state memory budget, no adaptive "
                         f"kernels)")
    check_routable(plan.branches[0])


class Dataflow:
    """An engine's window operator as a partitioned dataflow (see the module): its router, the
    partitions' front kernel, P (given, or planned on ``sample``, a batch of the input)."""

    def __init__(self, engine, parts: int | None, sample=None):
        if parts is not None and parts < 1:
            raise ValueError(f"parts must be >= 1, got {parts}")
        check_dataflow(engine)
        plan = engine.plan
        self.engine, self.plan, self.branch = engine, plan, plan.branches[0]
        self.cache_dir = engine.config.cache_dir
        self.router = Router(self.branch, self.cache_dir, bool(plan.rows))
        self.rel_args = engine._relation_args[0]
        # the branch's front kernel reading a partition's rows of a batch in place
        self.kernel = compile_front(replace(self.branch.spec, gather=True), self.cache_dir)
        self.loads: list[float] | None = None  # the plan's busiest shares (P planned)
        if parts is None:  # planned on the input's first batch, at most a worker each
            self.loads = self.router.loads(sample, engine.config.workers)
            parts = plan_parts(self.loads)
        self.parts = parts
        _ = self.router.routing if parts > 1 else self.router.selecting  # compiled: ahead
        self.row_wise = all(op.kind == "having" for op in plan.chains[0]
                            if op.id != self.branch.emitted)
        self.per_partition = [0] * parts  # of the last run: tuples each partition took
        self.longs = [0] * parts  # and its batches whose own windows came from their partials
        self.cpu = CpuSpent(parts)  # and the CPU seconds of its parts (the simulator's costs)

    def axis(self, batch) -> tuple[np.ndarray, int]:
        """The windows' axis of a batch's tuples: event time (``ts + shift``), or each
        tuple's input offset (count-based windows)."""
        if self.plan.rows:
            return np.arange(batch.offset, batch.end, dtype=np.int64), 0
        return batch.event_time()

    def finish(self, raw: tuple):
        """A partition's piece of window rows as it leaves the partition: result columns
        through the fused operators where each row's fate is its own (HAVINGs: the
        partitions do that work at once, the merge only orders), else the rows as they
        are (a keep-max needs every partition's rows of a window: the merge's work)."""
        return self.plan.post(0, self.branch.finalize(raw)) if self.row_wise else raw

    def merged(self, pieces: list) -> list[dict]:
        """A batch's pieces of window rows, every partition's (by partition), as result
        columns in window order (through the branch's fused operators when the partitions
        did not apply them: a keep-max fused into the emission runs again here, as each
        partition kept its own groups' largest)."""
        if self.row_wise:
            return in_window_order([c for c in pieces if len(c["window_end"])])
        raw = merge_windows(pieces)
        return [self.plan.post(0, self.branch.finalize(raw))] if len(raw[1]) else []

    def route_edges(self, e) -> list:
        """Pane partials (a checkpoint's) split by partition as their keys' tuples are."""
        if self.parts == 1:
            return [e]
        routed, starts = ka.route_rows(np.arange(len(e.pane), dtype=np.int64), e.keys,
                                       self.parts)
        return [Edges(*(np.ascontiguousarray(c[routed[lo:hi]]) for c in
                        (e.pane, e.keys, e.cnt, e.ints, e.floats)))
                for lo, hi in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True)]

    def union_edges(self, edges: list):
        """The partitions' pane partials at a batch's edge as the serial engine's: one piece,
        in pane order (a checkpoint's state)."""
        b = self.branch
        return merge_by_pane([x for x in edges if len(x.pane)], b.key_width, len(b.iops),
                             len(b.fops))

def in_window_order(pieces: list[dict]) -> list[dict]:
    """Result columns of window rows (``pieces``, each in window order) as pieces in window
    order, each window's rows piece by piece: as views where the windows have at least
    :data:`VIEW_ROWS` rows a piece, else gathered into one piece (each row moved once to its
    place, :func:`_gathered`)."""
    if len(pieces) <= 1:
        return pieces
    starts = [window_segments(c["window_end"]) for c in pieces]
    ends = [c["window_end"][s] for c, s in zip(pieces, starts, strict=True)]
    windows = np.unique(np.concatenate(ends))
    rows = sum(len(c["window_end"]) for c in pieces)
    if rows < VIEW_ROWS * sum(len(s) for s in starts):  # rows a view, were each a view
        return [_gathered(pieces, starts, ends, windows, rows)]
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


def _gathered(pieces: list[dict], starts: list, ends: list, windows, rows: int) -> dict:
    """The pieces' rows as one piece, window by window and within a window piece by piece:
    each run of a window's rows of a piece placed at its offset (the counts of the windows
    before it, then of the pieces before it) - one move a row, where a stable sort of the
    window ends cost a sort (SG2: windows of ~1,000 rows a piece)."""
    where = [np.searchsorted(windows, e) for e in ends]
    runs = [np.diff(np.append(s, len(c["window_end"]))) for c, s in zip(pieces, starts,
                                                                        strict=True)]
    counts = np.zeros((len(windows), len(pieces)), dtype=np.int64)  # window-major
    for i, (w, n) in enumerate(zip(where, runs, strict=True)):
        counts[w, i] = n
    at = (np.cumsum(counts.ravel()) - counts.ravel()).reshape(counts.shape)
    out = {n: np.empty((rows, *v.shape[1:]), dtype=v.dtype) for n, v in pieces[0].items()}
    for i, (c, s, w, n) in enumerate(zip(pieces, starts, where, runs, strict=True)):
        dest = np.repeat(at[w, i] - s, n) + np.arange(len(c["window_end"]))
        for name, v in c.items():
            out[name][dest] = v
    return out


_END, _STOPPED = object(), object()  # a partition's end of input; the run failed elsewhere


def coalesce(pieces: list[dict], least: int) -> list[dict]:
    """Result columns in pieces (in order) as pieces of at least ``least`` rows where they
    were smaller: consecutive small ones joined, a large one left as it is (a view: not
    copied), the last possibly smaller."""
    out, run, n = [], [], 0

    def flush():
        if run:
            out.append(run[0] if len(run) == 1 else
                       {k: np.concatenate([c[k] for c in run]) for k in run[0]})
            run.clear()

    for c in pieces:
        m = len(c["window_end"])
        if m >= least:
            flush()
            out.append(c)
            continue
        run.append(c)
        n += m
        if n >= least:
            flush()
            n = 0
    flush()
    return out


class _Union(Edges):
    """The partitions' pane partials at a task's edge as one (:meth:`Dataflow.union_edges`),
    merged when first read: the state a checkpoint may take - most never are (a long task's
    tail is replaced by the next's; merged on the merge thread a task, SG2's tails held it
    a third of its time)."""

    def __init__(self, flow: Dataflow, parts: list):  # (not the dataclass's fields)
        self._flow, self._parts, self._whole = flow, parts, None

    def _merged(self) -> Edges:
        if self._whole is None:
            self._whole = self._flow.union_edges(self._parts)
        return self._whole

    pane = property(lambda self: self._merged().pane)
    keys = property(lambda self: self._merged().keys)
    cnt = property(lambda self: self._merged().cnt)
    ints = property(lambda self: self._merged().ints)
    floats = property(lambda self: self._merged().floats)


class _Partition:
    """One partition operator: its queue, its window state, its thread."""

    def __init__(self, run: DataflowExecution, p: int):
        self.run, self.flow, self.p = run, run.flow, p
        self.inbox: queue.Queue = queue.Queue()  # bounded by the run's tasks in flight
        self.assembler = BranchAssembler(self.flow.branch)
        self.arrays: dict[str, np.ndarray] = {}
        self.rows = 0  # the most rows a batch gave this partition
        self.prev: tuple | None = None  # the last batch's tail and last pane, if it was long
        self.thread = threading.Thread(target=run.guarded, args=(self.loop,), daemon=True,
                                       name=f"scabbard-partition-{p}")

    def scratch(self, name: str, shape: tuple, dtype) -> np.ndarray:
        """An array of this partition's, kept from batch to batch (grown to the rows a batch
        needs: fresh arrays a batch cost page faults and the allocator's lock, which every
        thread of the process shares)."""
        a = self.arrays.get(name)
        if a is None or len(a) < self.rows or a.shape[1:] != shape[1:] or a.dtype != dtype:
            a = self.arrays[name] = np.empty((self.rows,) + tuple(shape[1:]), dtype)
        return a

    def resume(self, e, last: int) -> None:
        """Start as after a long batch ending at pane ``last`` whose tail is ``e``."""
        self.prev = (e, last)
        self.assembler.pending = (e, last)

    def loop(self) -> None:
        run, flow, b = self.run, self.flow, self.flow.branch
        kernel = flow.kernel
        k, ni, nf = self.widths = b.key_width, len(b.iops), len(b.fops)
        while True:
            item = run.take(self.inbox)
            if item is _STOPPED:  # the run failed elsewhere
                return
            if item is _END:
                flow.cpu.partitions[self.p] = time.thread_time()  # the thread's own, all of it
                run.merge_in.put((_END, self.p, None))
                return
            seq, batch, rows, first, last = item
            n = len(rows)
            self.rows = max(self.rows, n)
            flow.per_partition[self.p] += n
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
            pieces, edges = self.windows(partials, first, last)
            run.merge_in.put((seq, self.p, ([flow.finish(raw) for raw in pieces], edges)))

    def windows(self, partials, first: int, last: int) -> tuple[list[tuple], tuple]:
        """The windows a batch's partials (None: no tuple of the partition) close, as window
        rows in window order, in pieces (each in window order, the next's windows after its):
        those the batch shares with the batch before - from that one's tail and this one's
        head where both are long, else through the partition's window state - then those
        within it from its own partials, as the engine's long tasks do; a batch shorter than a
        window and two panes gives all of them through the state.  With them, the pane
        partials at the batch's two edges (a checkpoint's state)."""
        b, (k, ni, nf) = self.flow.branch, self.widths
        none = empty_edges(k, ni, nf)
        prev, self.prev = self.prev, None
        if last - first + 1 < b.long_panes:  # short: every window through the state
            head = none if partials is None else task_edges(partials, 0, len(partials[0]))
            return [self.assembler.task(BranchPart(first, last, False, head, none, None))], \
                (head, none)
        if partials is None:
            head = tail = none
        else:
            pane = partials[0]
            head = task_edges(partials, 0, int(np.searchsorted(pane, first + b.panes)))
            tail = task_edges(partials, int(np.searchsorted(pane, last - b.panes + 1)),
                              len(pane))
        self.flow.longs[self.p] += 1
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
            return [shared], (head, tail)
        return [shared, kw.windows_from_partials(partials, b.iops, b.fops, b.panes, b.slide_ms,
                                                 first + b.panes, last - 1, b.select,
                                                 typed)], (head, tail)


class _HandOut:
    """The dispatcher's queue of a dataflow's run: a task put here is persisted (when its
    feed persists input), routed and handed to the partitions at once, on the dispatcher's
    thread (the run's tasks in flight bound the partitions' queues)."""

    def __init__(self, run: DataflowExecution):
        self.run = run

    def put(self, job, timeout: float | None = None) -> None:  # never full: no timeout
        self.run.hand_out(job)


class DataflowExecution(Execution):
    """One run of an engine whose window operator is a partitioned dataflow (see the module):
    the engine's dispatcher, feed, persisted input, checkpoint markers, operator graph and
    sink (:class:`~scabbard.engine.execution.Execution`), with the partitions' threads and
    the merge's in place of the workers.  The merge assembles each task in task order once
    every partition gave its windows: through the graph to the sink, the listener told of it
    with the partitions' pane partials at its edges as one (a checkpoint's state is the
    serial engine's, and a recovery routes it back to the partitions by key)."""

    def __init__(self, flow: Dataflow, feed, sink, metrics, listener=None, resume=None,
                 emit_after: int = INT64_MIN, stores: dict | None = None):
        super().__init__(flow.engine, feed, sink, metrics, listener, resume, emit_after, stores)
        self.flow = flow
        flow.per_partition, flow.longs = [0] * flow.parts, [0] * flow.parts
        flow.cpu = CpuSpent(flow.parts)
        self.partitions = [_Partition(self, p) for p in range(flow.parts)]
        self.merge_in: queue.Queue = queue.Queue()
        self.handed: dict = {}  # tasks handed to the partitions, not yet assembled
        self.tasks = _HandOut(self)
        self._pieces: list = []  # the task being assembled's windows (see _lane_windows)

    def window_states(self) -> list:
        """None for every branch: the partitions hold the window state, on their threads."""
        return [None] * len(self.lanes)

    def _threads(self) -> list[threading.Thread]:
        merge = threading.Thread(target=self.guarded, args=(self._merge,), daemon=True,
                                 name="scabbard-merge")
        return [merge] + [q.thread for q in self.partitions]

    def _stop_threads(self, threads) -> None:
        for q in self.partitions:
            q.inbox.put(_END)

    def guarded(self, fn) -> None:
        try:
            fn()
        except BaseException as e:  # the first failure stops the run; run() raises it
            self._failed(e)

    def take(self, q: queue.Queue):
        """The next item of a queue, waiting while it is empty - :data:`_STOPPED` once the run
        failed (whoever would fill it may have stopped)."""
        while self.error is None:
            try:
                return q.get(timeout=0.1)
            except queue.Empty:
                continue
        return _STOPPED

    def restore(self, at) -> None:
        super().restore(at)
        last = at.last_ts // self.flow.branch.slide_ms
        for q, e in zip(self.partitions, self.flow.route_edges(at.edges[0]), strict=True):
            q.resume(e, last)

    def hand_out(self, job) -> None:
        """Task ``job`` (dispatched): its input persisted when the feed persists it, then
        its rows routed to the partitions; the merge assembles it once they gave its
        windows."""
        flow, b = self.flow, self.flow.branch
        batch, staged = job.batch, None
        if job.unit is not None:  # push-up, codecs and its segment; stored in order
            staged = self.writer.write(job.unit, batch, self.engine.reduce)
            batch = staged.batch
        n = len(batch)
        tuples = len(job.batch) if staged is not None else job.source_tuples or n
        if not n:  # nothing survived push-up: the merge moves its marker on
            r = TaskResult(job.seq, tuples, job.ingest_time, [], batch.offset, empty=True)
            r.marker, r.staged = job.marker, staged
            self.handed[job.seq] = r
            self.merge_in.put((job.seq, -1, None))
            return
        t_first, t_last = ((batch.offset, batch.end - 1) if self.plan.rows
                           else batch.event_edges())
        first, last = t_first // b.slide_ms, t_last // b.slide_ms
        none = empty_edges(b.key_width, len(b.iops), len(b.fops))
        part = BranchPart(first, last, last - first + 1 >= b.long_panes, none, none, None)
        r = TaskResult(job.seq, tuples, job.ingest_time, [part], batch.end, t_last)
        r.marker, r.staged = job.marker, staged
        self.handed[job.seq] = r
        started = time.thread_time()
        routed = flow.router.route(batch, flow.parts)
        flow.cpu.route += time.thread_time() - started
        for q, rows in zip(self.partitions, routed, strict=True):
            q.inbox.put((job.seq, batch, rows, first, last))

    def _merge(self) -> None:
        """Each task assembled once every partition gave its windows, in task order."""
        pending: dict[int, dict] = {}
        ended = 0
        while True:
            item = self.take(self.merge_in)
            if item is _STOPPED:
                return
            seq, p, got = item
            if seq is _END:
                ended += 1
                if ended == self.flow.parts:
                    self.flow.cpu.merge = time.thread_time()
                    return
                continue
            pending.setdefault(seq, {})[p] = got
            while (r := self.handed.get(self.next)) is not None and \
                    len(pending.get(r.seq, ())) == (1 if r.empty else self.flow.parts):
                if not self._assemble(r, pending.pop(r.seq)):
                    return

    def _assemble(self, r: TaskResult, got: dict) -> bool:
        """Task ``r`` to the sink (once its persisted input is durable); False if the run
        failed meanwhile."""
        if r.staged is not None:
            while not r.staged.done.done():
                if self.error is not None:
                    return False
                futures.wait([r.staged.done], timeout=0.1)
            r.staged.done.result()  # a failed write fails the run here
        with self.assembly_lock:
            if r.empty:
                self.skip_empty(r)
            else:
                by = [got[p] for p in range(self.flow.parts)]
                pieces = self.flow.merged([x for pieces, _ in by for x in pieces])
                # small pieces joined where the sink asks for larger writes (a Parquet row
                # group a window's piece made SG2's output 3x slower); else views, not copied
                # (joined, LRB2's copy held the merge thread: 0.44 of the engine, from 1.0)
                least = self.sink.least_rows
                self._pieces = coalesce(pieces, least) if least else pieces
                if self.listener is not None:  # the state a checkpoint takes at this task
                    part = r.parts[0]
                    part.head = _Union(self.flow, [e[0] for _, e in by])
                    part.tail = _Union(self.flow, [e[1] for _, e in by])
                self.assemble(r)
            del self.handed[r.seq]
            self.next += 1
        return True

    def _drain_all(self) -> None:
        super()._drain_all()
        if self.handed and self.error is None:
            raise RuntimeError(f"tasks {sorted(self.handed)} were never assembled")

    def _lane_windows(self, lane, r):
        pieces, self._pieces = self._pieces, []
        return iter(pieces)

    def _final(self, lane) -> dict:
        raw = merge_windows([q.assembler.flush() for q in self.partitions])
        return self.plan.post(0, self.flow.branch.finalize(raw))
