"""A partitioned dataflow (:mod:`scabbard.engine.dataflow`) over a dataset of its own, in
memory: ``PartitionedDataflow(query, dataset, parts).run(source)`` and
:func:`run_partitioned` - the tests' and ``scabbard bench partitioned``'s way to run one,
with a report of what each partition did."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from scabbard.engine.config import EngineConfig
from scabbard.engine.dataflow import Dataflow, DataflowExecution
from scabbard.engine.metrics import CpuSpent
from scabbard.engine.runtime import Engine
from scabbard.engine.sinks import Sink
from scabbard.engine.sources import ReplaySource


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
    cpu: CpuSpent | None = None  # the CPU seconds of its parts

    @property
    def tuples_per_s(self) -> float:
        return self.tuples / self.seconds if self.seconds > 0 else 0.0

    def __str__(self) -> str:
        shares = ", ".join(f"{t / max(1, self.tuples):.0%}" for t in self.per_partition)
        return (f"{self.tuples:,} tuples in {self.seconds:.2f} s = "
                f"{self.tuples_per_s / 1e6:.2f} M tuples/s, {self.parts} partitions "
                f"({shares}), {self.result_rows:,} result rows")

class _Reported(Sink):
    """A standalone dataflow's sink: result rows counted in its report as they come (and kept,
    when it collects them)."""

    def __init__(self, report: DataflowReport):
        self.report = report

    def write(self, batch) -> None:
        self.report.result_rows += len(batch)
        if self.report.results is not None and len(batch):
            self.report.results.append(dict(zip(batch.schema.names, batch.columns,
                                                strict=True)))


class PartitionedDataflow(Dataflow):
    """A query over a dataset as a partitioned dataflow of its own, in memory:
    ``PartitionedDataflow(query, dataset, parts).run(source)`` - the engine's run with
    ``assembly="dataflow[:P]"``, its result rows counted (or collected) in a report."""

    def __init__(self, query, dataset, parts: int | None, collect: bool = False, config=None):
        if parts is not None and parts < 1:
            raise ValueError(f"parts must be >= 1, got {parts}")
        mode = "dataflow" if parts is None else f"dataflow:{parts}"
        engine = Engine(query, dataset.tables, replace(config or EngineConfig(), assembly=mode))
        sample = None if parts is not None else \
            ReplaySource(dataset, engine.task_rows(dataset)).peek()
        super().__init__(engine, parts, sample)
        self._ran = False
        self.report = DataflowReport(self.parts, results=[] if collect else None)

    def source(self, dataset, replay, batch_rows: int | None = None) -> ReplaySource:
        rows = batch_rows or self.engine.task_rows(dataset, replay.rate)
        return ReplaySource(dataset, rows, replay)

    def run(self, source) -> DataflowReport:
        """Read ``source`` to its end through the partitions; the report."""
        if self._ran:
            raise RuntimeError("a PartitionedDataflow runs once: make another")
        self._ran = True
        run = DataflowExecution(self, self.engine.feed(source), _Reported(self.report),
                                self.engine.metrics())
        m = run.run().summary
        r = self.report
        r.tuples, r.seconds, r.batches = m.tuples, m.seconds, m.tasks
        r.per_partition, r.long_batches = list(self.per_partition), sum(self.longs)
        r.cpu = self.cpu
        return r


def run_partitioned(query, dataset, parts: int | None, replay=None,
                    batch_rows: int | None = None, collect: bool = False,
                    config=None) -> DataflowReport:
    """Run ``query`` over ``dataset`` as a partitioned dataflow of ``parts`` partitions (None:
    as many as :func:`plan_parts` finds worth it on the first batch, at most the config's
    workers; ``replay``: a :class:`~scabbard.engine.Replay`, default once)."""
    from scabbard.engine.sources import ONCE

    flow = PartitionedDataflow(query, dataset, parts, collect=collect, config=config)
    return flow.run(flow.source(dataset, replay or ONCE, batch_rows))
