"""The task-parallel runtime (LightSaber-style, docs/design.md, paper §2.3 and §4.1).

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

A task whose batch spans fewer than ``range/slide + 2`` panes (``Branch.long_panes``)
has no window of its own; the assembler computes all its windows, sequentially.  The
default batch size is therefore chosen per query from the data's tuples per pane.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import numpy as np

from scabbard.batch import Batch
from scabbard.data import Table
from scabbard.engine import memory, physical
from scabbard.engine.assembly import (
    BranchAssembler,
    partition_columns,
    split_head,
    windows_between,
)
from scabbard.engine.config import (  # noqa: F401 (the engine's settings, named here too)
    AUTO_MIN_WORKERS,
    INGRESS_WORKERS,
    MAX_WORKERS,
    EngineConfig,
    default_cache_dir,
    parse_assembly,
)
from scabbard.engine.execution import Execution, RunReport
from scabbard.engine.feeds import SourceFeed
from scabbard.engine.graph import OperatorGraph
from scabbard.engine.ingress import PartitionedFeed, splittable
from scabbard.engine.layout import auto_dataflow, sample_keys
from scabbard.engine.metrics import Metrics
from scabbard.engine.ports import AssemblyListener, Resume
from scabbard.engine.pushup import Reducer
from scabbard.engine.sinks import Sink
from scabbard.engine.tasks import (
    INT64_MAX,
    INT64_MIN,
    BranchPart,
    Edges,
    TaskResult,
    empty_edges,
    front_outputs,
    task_edges,
)
from scabbard.kernels import window as kw
from scabbard.kernels.aggregate import global_aggregate, pane_aggregate
from scabbard.kernels.join import build_index
from scabbard.query import Query, QueryError, optimize

__all__ = ["INT64_MIN", "MAX_BATCH", "MIN_BATCH", "Edges", "Engine", "EngineConfig", "RunReport",
           "TaskResult"]

MIN_BATCH = 1 << 18
_SIZED: dict[tuple, int] = {}  # Engine.task_rows: each query's probed size, once a process
UNIT_SLACK = 2 * 4096  # a p-unit's header and alignment in its pool file (Engine.unit_rows)
# a persisted p-unit of the engine's sizing is at most a quarter of a pool file (a task larger
# is stored in pieces of that size): a unit of half a file left the rest of it unused, so
# every task took a fresh file - allocated and flushed on the writer's path until checkpoints
# released old ones (CM1, raw input, 2^20-row tasks of 64 MiB in 128 MiB files: 6-12 M
# tuples/s over 5 s, stalls of half a second at the start; 2^18 rows: 28-36)
UNITS_PER_FILE = 4
MAX_BATCH = 1 << 22
# A run raises its batches towards THROUGHPUT_BATCH where its fragment is cheap: a task's
# fixed cost is then a few % of its TASK_WORK_S of work - ~100-200 us of Python in memory
# (cut, handed out, assembled), and with the input persisted its segment, codecs, write and
# sink besides (with 4 ms of work, Python was 15% of CM1's CPU and its thread hand-offs
# another 15%: perf, steady state).  Measured (M tuples/s, 1 / 2 workers, two rounds): CM2
# (~2.5 ns a tuple) 381/412 and 405/655 with 2^18, 430/824 and 461/814 with 2^20; at 2
# workers, results written, fault tolerance with push-up and adaptive codecs beside: CM1
# 115-124 and 69 with 2^18 (4 ms), 119-141 and 86 with 2^20; YSB 126 and 82 with its
# windows' 400,000, 138 and 103 with 2^20 (12 ms).  An expensive fragment keeps the windows'
# own size (LRB2, ~250 ns a tuple: a 2^20-row task is a quarter second).
THROUGHPUT_BATCH = 1 << 20
TASK_WORK_S = 0.012
# a global aggregate's tasks (its batches run on across a small dataset's copies): each
# task's Python (~130 us holding the GIL for SM, a fifth of it per 1 M-row task at 2
# workers) against more work, up to MAX_BATCH rows; its output is one row per pane
GLOBAL_TASK_WORK_S = 0.012
FILL_S = 0.002  # with a rate, batches above MIN_BATCH only as large as fill in this time
PROBE_ROWS = 1 << 16  # the rows a run's fragment cost is measured on
STATELESS_BATCH = 1 << 19  # a stateless query's tasks: no windows to size them by


# a global aggregate's fragment runs its front kernel on pieces of this many rows: their
# output (a timestamp and the aggregates' inputs, 8 bytes each: 4 MiB for SM) stays in the
# cache, while each piece's two kernel calls (their Python side holds the GIL) stay few.
# Measured at 2 workers (M tuples/s, two rounds): SM 437/466 with 2^15, 519/542 with 2^17,
# 399/423 without pieces; SG1 1,216/1,251, 1,308/1,409 and 1,134/1,206
PIECE_ROWS = 1 << 17


class Engine:
    """Runs one query: ``Engine(query, relations).run(source, sink)``."""

    def __init__(self, query: Query, relations: dict[str, Table] | None = None,
                 config: EngineConfig | None = None, push_up: bool = False,
                 cut_after: frozenset[str] = frozenset()):
        """``push_up``: run the plan persistence push-up rewrote (§3.4): selections and
        projections before the ingress p-stream (:attr:`reduce`), the rest after it.
        ``cut_after``: operators whose output edge stays an edge (a p-stream will sit on it:
        nothing is fused above them)."""
        self.query, self.cut_after = query, frozenset(cut_after)
        self.config = config or EngineConfig()
        memory.tune(self.config.allocator)
        self.pushup = optimize.push_up(query.node) if push_up else None
        self.reduce = Reducer(self.pushup, self.config.cache_dir) if push_up else None
        self.input_schema = self.pushup.schema if push_up else query.node.source().schema
        self.plan = physical.plan(self.pushup.plan if push_up else query.node,
                                  frozenset(cut_after))
        self.schema = self.plan.schema
        # per branch, the partitions its assembly has in the current run (set by the run)
        self.split_parts: list[int] | None = None
        self._bind(relations or {})
        for b in self.plan.branches:
            b.kernel(self.config.cache_dir)
        if self.plan.selection is not None:
            self.plan.selection.kernel(self.config.cache_dir)
        self.adaptive = None
        if self.config.adaptive is not None:
            from scabbard.engine.adaptive import AdaptiveKernels

            self.adaptive = AdaptiveKernels(self.plan.branches, self.config.cache_dir,
                                            self.config.adaptive)

    # -- setup ------------------------------------------------------------------------------
    def _bind(self, relations: dict[str, Table]) -> None:
        """Index every joined relation and collect the arrays each kernel reads (per branch,
        then the stateless query's selection)."""
        self._relation_args = []
        sel = self.plan.selection
        for b in [*self.plan.branches, *([sel] if sel is not None else [])]:
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

    def batch_rows_for(self, tuples_per_ms: float, sample: Batch | None = None) -> int:
        """Batch size: enough panes for tasks to have windows of their own (4 windows' worth)
        in the branch with the shortest window (a longer one takes the assembler's path); a
        stateless query's: :data:`STATELESS_BATCH`.  Under a state budget, smaller
        (:func:`scabbard.engine.budget.task_rows`, with the distinct keys of ``sample``, the
        stream's first rows, if given)."""
        self.tuples_per_ms = tuples_per_ms
        if self.config.batch_rows:
            return self.config.batch_rows
        if not self.plan.branches:
            return STATELESS_BATCH
        want = min(4 * b.panes * b.slide_ms * self._per_unit(b) for b in self.plan.branches)
        if any(self.spills(i) for i in range(len(self.plan.branches))):
            # under a state budget: a task's own state (its partials, one per key at most)
            # a small part of the budget, so tasks stay short and the assembler's state is
            # what the budget holds
            from scabbard.engine.budget import task_rows

            keys = sample_keys(self, sample)
            return min(task_rows(self.state_budget(), min(MAX_BATCH, int(want)), keys[i],
                                 b.slide_ms * self._per_unit(b))
                       for i, b in enumerate(self.plan.branches) if self.spills(i))
        return int(min(MAX_BATCH, max(MIN_BATCH, want)))

    def run_batch_rows(self, tuples_per_ms: float, rate: float | None,
                       sample: Batch | None = None) -> int:
        """A run's batch size: :meth:`batch_rows_for`, raised where the fragment is cheap
        (measured on ``sample``, the stream's first rows) to :data:`TASK_WORK_S` of its work
        (a global aggregate's: :data:`GLOBAL_TASK_WORK_S`), as a power of two, up to
        :data:`THROUGHPUT_BATCH` (:data:`MAX_BATCH`) - and with a rate only as far as a
        batch fills in :data:`FILL_S`, so the larger tasks cost no latency.  Not where the
        size is set or bounded otherwise (``batch_rows``, a stateless query, a state budget).
        With adaptive kernels, the generic kernels' cost sizes the tasks: the variants are
        compared on the tasks the generic engine runs."""
        rows = self.batch_rows_for(tuples_per_ms, sample)
        if rate is not None and sample is not None:  # tasks a state budget let grow (few
            # keys in the sample): with a rate, only as large as fill in FILL_S
            rows = min(rows, max(self.batch_rows_for(tuples_per_ms), int(rate * FILL_S)))
        work, most = ((GLOBAL_TASK_WORK_S, MAX_BATCH) if self.spans_copies
                      else (TASK_WORK_S, THROUGHPUT_BATCH))
        most = most if rate is None else min(most, int(rate * FILL_S))
        if (most <= rows or self.config.batch_rows or not self.plan.branches
                or any(self.spills(i) for i in range(len(self.plan.branches)))
                or sample is None or not len(sample)):
            return rows  # nothing to raise, or not this method's to size: no probe
        cost = self.fragment_cost(sample)
        if cost is None:
            return rows
        # the power of two nearest the target (in ratio): the probe is a fraction of a ms,
        # and its +-15% from run to run would otherwise give every run its own task size
        return max(rows, min(most, 1 << max(0, round(math.log2(work / cost)))))

    def task_rows(self, dataset, rate: float | None = None, most: int | None = None) -> int:
        """A run's tuples per task: the one sizing rule of every mode - in memory, with the
        input persisted, fault-tolerant - so that the modes of a query run the same tasks.
        :meth:`run_batch_rows` on the stream's first :data:`PROBE_ROWS` rows (the windows'
        panes, raised to :data:`TASK_WORK_S` of fragment work where the fragment is cheap),
        at most ``most`` (a persisted task's input fits a pool file; one stored whole, a
        size of the engine's choosing, fits :data:`UNITS_PER_FILE` times - a task in pieces,
        :meth:`piece_rows`, is not cut), as a power of two when it was cut to that."""
        from scabbard.engine.sources import ReplaySource  # sources import this module

        if self.config.batch_rows:
            rows = self.batch_rows_for(ReplaySource(dataset, 1).tuples_per_ms())
        else:  # probed once per query, data and setting in a process: its runs in every
            # mode, side by side, get the same size (a probe's noise can tip the rounding)
            key = (self.query.name, str(getattr(dataset, "path", id(dataset))), rate,
                   self.config.state_memory, self.spans_copies)
            rows = _SIZED.get(key)
            probe = ReplaySource(dataset, PROBE_ROWS)
            self.tuples_per_ms = probe.tuples_per_ms()
            if rows is None:
                rows = _SIZED[key] = self.run_batch_rows(self.tuples_per_ms, rate, probe.peek())
        if most is not None:  # a size of the engine's own choosing: UNITS_PER_FILE a file
            # - but a task stored in pieces of that size (PersistedFeed) keeps its size up to
            # a file: a global aggregate's after push-up (SG1 with push-up and adaptive
            # codecs: 320 M tuples/s with 2^22-row tasks, 228 with 2^21), and any other
            # query's raw input (the fragment reads the source's batch whole: NQ's 2^19-row
            # tasks were too short for their windows, which the assembly then made alone on
            # one thread, 11.7 ns a tuple); a global aggregate's raw tasks are cut as any
            # others (SM: 30-35 M tuples/s with 2^18-row tasks, 18-26 with 2^20 in pieces of
            # 2^19)
            whole = self.config.batch_rows or (self.spans_copies and self.pushup is not None) \
                or self.raw_tasks_in_pieces
            cap = most if whole else max(1024, most // UNITS_PER_FILE)
            if rows > cap:
                rows = 1 << max(0, int(cap).bit_length() - 1)
        return rows

    def unit_rows(self, file_bytes: int, data_start: int) -> int:
        """The most tuples a p-unit of this engine's input holds in a pool file of
        ``file_bytes`` (its data from ``data_start``): the columns as stored raw (push-up's
        schema when it runs; compressed p-units are smaller, and a codec never stores more
        than raw), less room for the segment's header and its alignment."""
        return max(1024, (file_bytes - data_start - UNIT_SLACK) // self.input_schema.payload_bytes)

    def piece_rows(self, file_bytes: int, data_start: int) -> int:
        """The most tuples of a p-unit a task stored in pieces is cut into: a quarter of
        :meth:`unit_rows` (:data:`UNITS_PER_FILE` fill a pool file)."""
        return max(1024, self.unit_rows(file_bytes, data_start) // UNITS_PER_FILE)

    @property
    def raw_tasks_in_pieces(self) -> bool:
        """A persisted task's raw input is stored as several p-units and its fragment reads the
        source's batch whole (:class:`~scabbard.ft.ingress.IngressWriter`): no push-up, and a
        fragment that needs its batch in one piece (not :attr:`spans_copies`)."""
        return self.reduce is None and not self.spans_copies

    @property
    def spans_copies(self) -> bool:
        """The fragment reads a batch part by part, so a replayed small dataset's batches
        may run on across its copies (:class:`~scabbard.batch.SpanBatch`): every branch a
        global aggregate over event time, generic kernels.  (With push-up the fragment sees
        what the reducer kept, made whole by it; a writer copies a span batch's pieces.)"""
        return (bool(self.plan.branches) and self.adaptive is None and not self.plan.rows
                and all(b.key_width == 0 for b in self.plan.branches))

    def fragment_cost(self, sample: Batch) -> float | None:
        """Seconds of fragment work per *source* tuple of ``sample`` (the best of three runs,
        after the code is loaded): with push-up the fragment sees only what it kept, so a
        selective push-up makes a source tuple cheap.  None if nothing of it reaches the
        fragment."""
        self.warm_up(sample)
        n = len(sample)
        if self.reduce is not None:
            sample = self.reduce(sample)
        if not len(sample):
            return None
        best = float("inf")
        adaptive, self.adaptive = self.adaptive, None  # the generic kernels' cost; and no
        try:  # task of the adaptive phases (a profile of the probe's rows, not the stream's)
            for _ in range(3):
                t = time.perf_counter()
                self._fragment(0, sample, 0.0)
                best = min(best, time.perf_counter() - t)
        finally:
            self.adaptive = adaptive
        return max(best, 1e-9) / n

    def _per_unit(self, b, tuples_per_ms: float | None = None) -> float:
        """Input tuples per unit of branch ``b``'s window axis: per ms of event time, or one
        (a count-based window's unit is a tuple)."""
        if b.node.window.rows:
            return 1.0
        return tuples_per_ms if tuples_per_ms is not None else self.tuples_per_ms

    # -- the fragment function (parallel) ----------------------------------------------------
    def _fragment(self, seq: int, batch: Batch, ingest: float,
                  skip: list[int] | None = None) -> TaskResult:
        """The task's fragment function.  ``skip`` (per branch, recovery): windows ending at
        or before it are stored downstream already - not computed again.  A stateless query's
        is its selection (:mod:`scabbard.engine.selection`)."""
        n = len(batch)
        if self.plan.selection is not None:
            rows = self.plan.selection.select(batch, self._relation_args[0], self.config.cache_dir)
            return TaskResult(seq, n, ingest, [], batch.end,
                              int(batch.timestamps[-1]) if n else 0, rows=rows)
        # the windows' axis: event time, or each tuple's input offset (count-based windows).
        # Event time is ``ts + shift``: a replayed copy's shift is added where panes are cut
        # (``pane_aggregate``, the adaptive variants), not in a pass of its own.
        # A span batch (several copies, ``spans_copies``) is read part by part: its event
        # times are never made whole
        ts, shift = None, 0
        if self.plan.rows:
            ts, shift = np.arange(batch.offset, batch.end, dtype=np.int64), 0
        elif len(batch.segments()) == 1:
            ts, shift = batch.event_time()
            ts = np.ascontiguousarray(ts)
        elif self.adaptive is not None:  # the variants take a batch's times whole
            ts, shift = np.ascontiguousarray(batch.timestamps), 0
        # the first and last tuple's place on the windows' axis
        if not n:
            t_first = t_last = 0
        elif self.plan.rows:
            t_first, t_last = batch.offset, batch.end - 1
        else:
            t_first, t_last = batch.event_edges()
        parts = []
        for i, (b, rel_args) in enumerate(zip(self.plan.branches, self._relation_args,
                                              strict=True)):
            partials = self._partials(i, b, batch, ts, shift, t_first, t_last, rel_args)
            first, last = t_first // b.slide_ms, t_last // b.slide_ms
            pane = partials[0]
            if last - first + 1 >= b.long_panes:  # long: windows of its own
                lo = first + b.panes if skip is None else max(first + b.panes,
                                                               skip[i] // b.slide_ms)
                internal = None
                if lo <= last - 1:
                    raw = kw.windows_from_partials(partials, b.iops, b.fops, b.panes,
                                                   b.slide_ms, lo, last - 1, b.select,
                                                   b.key_dtypes)
                    internal = self.plan.post(i, b.finalize(raw))
                h = int(np.searchsorted(pane, first + b.panes))
                t = int(np.searchsorted(pane, last - b.panes + 1))
                parts.append(BranchPart(first, last, True, task_edges(partials, 0, h),
                                        task_edges(partials, t, len(pane)), internal))
            else:
                parts.append(BranchPart(first, last, False, task_edges(partials, 0, len(pane)),
                                        empty_edges(b.key_width, len(b.iops), len(b.fops)), None))
            split = self.split_parts[i] if self.split_parts else 1
            if split > 1 and not parts[-1].long:  # the assembler's alone: split here, in parallel
                split_head(parts[-1], partition_columns(b), split, alone=self.spills(i))
        return TaskResult(seq, n, ingest, parts, batch.end, t_last if n else 0)

    def _partials(self, i: int, b, batch: Batch, ts, shift: int, first: int, last: int,
                  rel_args: tuple):
        """Branch ``i``'s pane partials of ``batch`` (its event times ``ts + shift``, from
        ``first`` to ``last``; ``ts`` None: a span batch, never made whole)."""
        n, k, ni, nf = len(batch), b.key_width, len(b.iops), len(b.fops)
        if k == 0 and self.adaptive is None and n and not self.plan.rows:
            return self._global_fragment(b, batch, first, last, rel_args)  # piece by piece
        inputs = tuple(batch.column(c) for c in b.input_columns)
        o_ts, o_keys, o_i, o_f = front_outputs(n, k, ni, nf)
        if self.adaptive is not None and n:  # the variant the branch's phase asks for
            return self.adaptive.branches[i].run(n, (ts, shift), inputs, rel_args,
                                                 (o_ts, o_keys, o_i, o_f))
        m = b.kernel(self.config.cache_dir)(n, ts, *inputs, *rel_args, o_ts, o_keys, o_i, o_f)
        return pane_aggregate(o_ts[:m], o_keys[:m], o_i[:m], o_f[:m], b.iops, b.fops,
                              b.slide_ms, ordered=True, shift=shift)

    def _global_fragment(self, b, batch: Batch, first: int, last: int, rel_args: tuple):
        """A global aggregate's pane partials (no group keys), the front kernel run on
        :data:`PIECE_ROWS` rows at a time and each piece folded on: its output stays in the
        cache instead of a task's worth going out to memory and back.  A span batch's parts
        go one after the other, each with its own shift (``first`` and ``last``: the batch's
        first and last event time)."""
        kernel = b.kernel(self.config.cache_dir)
        n = len(batch)
        piece = min(n, PIECE_ROWS)
        ni, nf = len(b.iops), len(b.fops)
        o_ts, o_keys, o_i, o_f = front_outputs(piece, 0, ni, nf)

        def pieces():
            for part in batch.segments():
                ts, shift = part.event_time()
                inputs = tuple(part.column(c) for c in b.input_columns)
                for lo in range(0, len(part), piece):
                    hi = min(len(part), lo + piece)
                    got = kernel(hi - lo, ts[lo:hi], *(c[lo:hi] for c in inputs), *rel_args,
                                 o_ts, o_keys, o_i, o_f)
                    yield o_ts[:got], shift, o_i[:got], o_f[:got]

        return global_aggregate(first, last, n, pieces(), ni, nf, b.iops, b.fops, b.slide_ms)

    def warm_up(self, batch: Batch, writable: bool = False) -> None:
        """Run the fragment, assembly and graph code once on a few rows, results discarded.

        Loads the compiled kernels (from numba's on-disk cache) before the clock
        starts, so the first tasks of a run are not charged for it.  Once per engine.
        ``writable``: the fragment also on a writable copy of the rows - a recovery's replay
        reads the stored input into writable buffers, while a dataset's columns are
        read-only, and numba compiles a kernel once for each (the replay's first task loaded
        the other from the cache on the clock).
        """
        if getattr(self, "_warm", False):
            return
        if self.reduce is not None:
            batch = self.reduce(batch)
            if not len(batch):  # nothing survives the pushed-up selection: warm up later
                return
        self._warm = True
        first = batch.segments()[0]  # a span batch's first part: nothing made
        head = first.slice(0, min(len(first), 2048))
        adaptive, self.adaptive = self.adaptive, None  # not a task of the adaptive phases
        try:
            r = self._fragment(0, head, 0.0)
            if writable and not all(c.flags.writeable for c in head.columns):
                self._fragment(0, head.writable_copy(), 0.0)
        finally:
            self.adaptive = adaptive
        if self.plan.selection is not None:  # nothing else runs
            return
        graph = OperatorGraph(self.plan)
        for i, b in enumerate(self.plan.branches):
            a = BranchAssembler(b)
            a.task(r.parts[i])
            a.skip(r.parts[i])  # as after a long task: the flush loads its tail first
            graph.push(self.plan.top(i), self.plan.post(i, b.finalize(a.flush())), INT64_MAX, {})
        graph.pump()
        # the windows of long tasks and between them: the same kernels with the same types
        # (a first long task would otherwise compile them on the clock)
        empty = [empty_edges(b.key_width, len(b.iops), len(b.fops)) for b in self.plan.branches]
        prev = TaskResult(0, 0, 0.0, [BranchPart(p.first_pane, p.first_pane, True, e, e, None)
                                      for p, e in zip(r.parts, empty, strict=True)])
        cur = TaskResult(1, 0, 0.0, [BranchPart(p.first_pane, p.first_pane, True, p.edges(), e,
                                                None) for p, e in zip(r.parts, empty, strict=True)])
        for i in range(len(self.plan.branches)):
            self._boundary(prev, cur, i)

    def assembly_parts(self, i: int, batch_rows: int | None = None) -> int:
        """How many partitions branch ``i``'s sequential window state is split into (1: one
        state); a branch without group keys has one.

        ``auto``: one per worker when there are :data:`AUTO_MIN_WORKERS` or more and the
        branch's tasks of ``batch_rows`` are short (too few panes for windows of their own:
        the assembler computes every window), else one.  With fewer workers the serial
        assembly runs beside the other workers' fragments and keeps up (measured on 2 cores:
        SG2, SG3 and NQ scale 1.85-2.0x from 1 to 2 workers serially, and partitions only add
        the split and the merge); with more, it becomes the one stage that does not scale.
        """
        mode, n = parse_assembly(self.config.assembly)
        b = self.plan.branches[i]
        if partition_columns(b) is None:
            return 1
        if self.spills(i):
            from scabbard.engine.spill import PARTS

            return PARTS
        if mode in ("serial", "dataflow") or getattr(self, "per_key", False):
            return 1
        if mode == "auto":
            per_ms = getattr(self, "tuples_per_ms", None)
            short = (batch_rows is not None and per_ms is not None
                     and batch_rows < b.long_panes * b.slide_ms * self._per_unit(b, per_ms))
            return self.config.workers if short and self.config.workers >= AUTO_MIN_WORKERS else 1
        return n if n is not None else max(2, self.config.workers)

    def check_assembly(self) -> None:
        """QueryError if the query cannot run in the configured assembly mode (a partitioned
        dataflow's limits: :func:`scabbard.engine.dataflow.check_dataflow`)."""
        if parse_assembly(self.config.assembly)[0] == "dataflow":
            from scabbard.engine.dataflow import check_dataflow

            check_dataflow(self)

    def spills(self, i: int) -> bool:
        """Branch ``i``'s window state is held under a memory budget (``state_memory``): key
        partitions spilled to disk beyond it.  A branch without group keys holds one group
        per window, never spilled."""
        return (self.config.state_memory is not None
                and partition_columns(self.plan.branches[i]) is not None)

    def state_budget(self) -> int:
        """Each spilling branch's share of ``state_memory``."""
        n = sum(self.spills(i) for i in range(len(self.plan.branches)))
        return self.config.state_memory // max(1, n)

    def _boundary(self, prev: TaskResult, cur: TaskResult, i: int,
                  skip: int = INT64_MIN) -> dict | None:
        """Branch ``i``'s windows between two long tasks, from the first's tail and the
        second's head.

        They end at panes ``prev.last_pane .. cur.first_pane + range/slide - 1``: exactly the
        windows neither task computed alone.  Independent of every other task, so any
        worker can compute them, in parallel with the rest.  ``skip``: as for
        :meth:`_fragment` (None: nothing left to compute).
        """
        b = self.plan.branches[i]
        p, c = prev.parts[i], cur.parts[i]
        lo, hi = max(p.last_pane, skip // b.slide_ms), c.first_pane + b.panes - 1
        if lo > hi:  # recovery: stored downstream already
            return None
        raw = windows_between(b, p.tail, c.edges(), lo, hi, b.key_dtypes)
        return self.plan.post(i, b.finalize(raw))

    def _result_batch(self, cols: dict[str, np.ndarray]) -> Batch:
        return Batch(self.schema, tuple(cols[n] for n in self.schema.names))

    # -- running -----------------------------------------------------------------------------
    def ingress_partitions(self, source=None) -> int:
        """How many threads read ``source`` (parallel ingress): the configured number, by
        default one per :data:`INGRESS_WORKERS` workers; one for a source that cannot be split
        by offset ranges."""
        n = self.config.ingress_partitions or max(1, self.config.workers // INGRESS_WORKERS)
        return n if source is None or splittable(source) else 1

    def feed(self, source, transform=None, reduce: bool = True) -> SourceFeed | PartitionedFeed:
        """``source`` as this engine's tasks: the operators push-up moved before the engine
        applied (σ, π; not with ``reduce=False``: a feed whose workers run them), then
        ``transform``, on a pool of threads; read by the dispatcher, or by
        :meth:`ingress_partitions` threads (:class:`PartitionedFeed`)."""
        n = self.ingress_partitions(source)
        r = self.reduce if reduce else None
        if n > 1:
            return PartitionedFeed(source, n, r, transform, self.config.workers)
        return SourceFeed(source, r, transform, self.config.workers)

    def run(self, feed, sink: Sink, metrics: Metrics | None = None,
            listener: AssemblyListener | None = None, resume: Resume | None = None,
            emit_after: int = INT64_MIN, stores: dict | None = None) -> RunReport:
        """Run until the feed ends; return throughput and latency figures.

        ``feed``: a :class:`~scabbard.engine.ports.TaskFeed`, or a source (read through
        :meth:`feed`).  ``listener`` hears of every assembled task and may mark tasks at
        dispatch (checkpoints, GC: :mod:`scabbard.ft`); ``resume`` starts the assembly where a
        checkpoint left it; results whose window ends at or before ``emit_after`` are not
        emitted (they were committed before a failure); ``stores``: per operator whose output
        edge is persisted (see ``cut_after``), the p-stream's store
        (:class:`~scabbard.engine.graph.Channel`).
        """
        if not hasattr(feed, "tasks"):
            feed = self.feed(feed)
        metrics = metrics or self.metrics()
        mode, parts = parse_assembly(self.config.assembly)
        flow = None
        self.layout = None  # what auto estimated and chose, where it did (engine/layout.py)
        if mode == "auto":
            flow = auto_dataflow(self, feed)
        elif mode == "dataflow":
            from scabbard.engine.dataflow import Dataflow

            flow = Dataflow(self, parts, feed.peek())
        self.per_key = flow is not None  # the dataflow's partitions hold the windows
        if flow is not None:
            from scabbard.engine.dataflow import DataflowExecution

            return DataflowExecution(flow, feed, sink, metrics, listener, resume, emit_after,
                                     stores).run()
        return Execution(self, feed, sink, metrics, listener, resume, emit_after, stores).run()

    def metrics(self, watch: Sequence = ()) -> Metrics:
        """A run's live metrics (MB/s of the source's tuples): a sample every
        ``config.metrics_interval``, each line (samples and events) to each of ``watch``."""
        return Metrics(self.query.node.source().schema.payload_bytes,
                       self.config.metrics_interval, watch)

    @property
    def horizon_ms(self) -> int:
        """How far back on the windows' axis (event time; input offsets for count-based
        windows) an open window can reach; a stateless query keeps nothing open."""
        return max((b.panes * b.slide_ms + b.slide_ms for b in self.plan.branches), default=0)

