"""PipeFabric's partitioned dataflow in the model (``SimConfig.dataflow_parts`` = P > 0), as
:mod:`scabbard.engine.dataflow` runs it, and its costs measured on the real dataflow.

* The **dispatcher** reads (and persists) the source's batches as for the task-parallel
  engine, then routes each task's tuples by key on its core (``route_ns`` a tuple) and hands
  each partition its rows.
* **P partition threads**, each with its own queue and window state: partition ``p`` takes
  its share ``shares[p]`` of each task's tuples and works ``share x partitions_ns`` a tuple
  on a core (the front, the pane aggregation and its windows: the work the task-parallel
  engine's workers and its assembly share between them).  A key's tuples go to one
  partition, so a skewed key space leaves one partition with most of the work.
* The **merge** thread takes the tasks in order once every partition gave its windows,
  works ``merge_ns`` a tuple (ordering the windows, the fused operators that need every
  partition's rows), cuts a checkpoint at a marker and hands the results on.

The costs come from one run of the real dataflow with two partitions on the query's dataset
(each thread's CPU time per input tuple) and the router's shares for 1 to ``most``
partitions on the dataset's first batches: the partitions' work in all is taken to be what
two partitions did, whatever P - what a partition's smaller window state saves on a larger
machine is not modelled.
"""

from __future__ import annotations

from scabbard.sim.resources import Queue, Signal

END = object()


class DataflowThreads:
    """The partitions and the merge of one engine life (:class:`scabbard.sim.model._Engine`)."""

    def __init__(self, engine, parts: int):
        costs = engine.costs.dataflow
        if costs is None:
            raise ValueError(f"the calibration of {engine.cfg.query} has no dataflow costs "
                             f"(its groups cannot be routed, or it was calibrated before them)")
        self.e, self.parts = engine, parts
        self.shares = costs.shares_of(parts)
        self.route_s, self.merge_s = costs.route_ns * 1e-9, costs.merge_ns * 1e-9
        self.part_s = costs.partitions_ns * 1e-9
        self.inboxes = [Queue(engine.env) for _ in range(parts)]
        self.given: dict[int, object] = {}  # tasks handed out, by sequence number
        self.parts_done: dict[int, int] = {}  # partitions done with a task
        self.ended = 0
        self.wake = Signal(engine.env)

    def start(self) -> None:
        for p in range(self.parts):
            self.e.spawn(self.partition(p))
        self.e.spawn(self.merge())

    def hand_out(self, task):
        """On the dispatcher's thread: the task's tuples routed, each partition given its
        rows."""
        yield from self.e.cpu.run(task.n * self.route_s * self.e.work, "route")
        self.given[task.seq] = task
        for q in self.inboxes:
            yield from q.put(task)

    def finish(self):
        for q in self.inboxes:
            yield from q.put(END)

    def partition(self, p: int):
        e = self.e
        while True:
            task = yield from self.inboxes[p].get()
            if task is END:
                self.ended += 1
                self.wake.notify()
                return
            # a recovered life's first task pays what the warm-up did not load (as a worker's)
            warmup, e.warmup = e.warmup, 0.0
            yield from e.cpu.run(task.n * self.shares[p] * self.part_s * e.work + warmup,
                                 "partition")
            self.parts_done[task.seq] = self.parts_done.get(task.seq, 0) + 1
            self.wake.notify()

    def merge(self):
        e = self.e
        while True:
            while self.parts_done.get(e.next, 0) == self.parts:
                del self.parts_done[e.next]
                task = self.given.pop(e.next)
                yield from e.cpu.acquire()
                yield from e.cpu.work(task.n * self.merge_s * e.work, "merge")
                if task.marker is not None:
                    yield from e.on_marker(task)
                e.cpu.release()
                e.assembled(task)
                e.next += 1
            if self.ended == self.parts and not self.given:
                if e.input_done:
                    e.run.finished = True
                return
            yield from self.wake.wait()


def measure_dataflow(query: str, scale: str, data_dir, seconds: float = 2.0,
                     most: int = 16) -> dict | None:
    """The costs of :class:`~scabbard.sim.config.DataflowCosts` for ``query`` on its dataset:
    one run of the real dataflow with two partitions (after a warm one), each thread's CPU
    per input tuple; the router's shares for 1 to ``most`` partitions on up to 2 M of the
    dataset's first tuples.  None: the query's groups cannot be routed."""
    from scabbard import queries, workloads
    from scabbard.engine import Replay
    from scabbard.engine.flowrun import PartitionedDataflow
    from scabbard.query.expr import QueryError

    ds = workloads.dataset(queries.workload_of(query), scale, root=str(data_dir))
    q = queries.get(query)
    try:
        warm = PartitionedDataflow(q, ds, 2)
    except QueryError:
        return None
    warm.run(warm.source(ds, Replay(duration=min(1.0, seconds))))
    flow = PartitionedDataflow(q, ds, 2)
    report = flow.run(flow.source(ds, Replay(duration=seconds)))
    n = max(1, report.tuples)
    cpu = report.cpu
    batch = flow.source(ds, Replay(), batch_rows=2_000_000).peek()
    return {"route_ns": cpu.route / n * 1e9, "partitions_ns": sum(cpu.partitions) / n * 1e9,
            "merge_ns": cpu.merge / n * 1e9, "shares": flow.router.shares(batch, most)}
