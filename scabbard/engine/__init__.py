"""The engine core: task runtime (sources, dispatcher, workers, assembly, sinks, metrics).

docs/design.md.  It knows nothing of files: persistence and fault tolerance
(:mod:`scabbard.ft`) plug in through its ports (:mod:`scabbard.engine.ports`).

    from scabbard import queries
    from scabbard.data import open_dataset
    from scabbard.engine import run_query, CollectSink

    sink = CollectSink()
    report = run_query(queries.get("LRB1"), open_dataset("data/lrb/small"), sink=sink)
    print(report.summary.tuples_per_s, sink.to_pandas().head())
"""

from __future__ import annotations

from pathlib import Path

from scabbard.data import Dataset
from scabbard.engine.metrics import Metrics, Summary, read_metrics
from scabbard.engine.runtime import Engine, EngineConfig, RunReport
from scabbard.engine.sinks import CollectSink, NullSink, Sink
from scabbard.engine.sources import ArraySource, ReplaySource
from scabbard.query import Query

__all__ = ["ArraySource", "CollectSink", "Engine", "EngineConfig", "Metrics",
           "NullSink", "ReplaySource", "RunReport", "Sink", "Summary",
           "read_metrics", "run_query"]


def run_query(query: Query, dataset: Dataset, sink: Sink | None = None,
              config: EngineConfig | None = None, rate: float | None = None,
              duration: float | None = None, max_tuples: int | None = None,
              loop: bool | None = None, metrics_log: str | Path | None = None,
              on_sample=None, push_up: bool = False, source=None) -> RunReport:
    """Run ``query`` over a dataset with the engine, in memory.

    By default the dataset is read once; with ``duration`` (wall seconds) or
    ``max_tuples`` it is replayed endlessly (timestamps shifted per copy) until
    that limit.  ``rate`` caps the input at that many tuples per second.  ``push_up``:
    the plan persistence push-up rewrote (§3.4; the same results).  ``source``: a ready
    source over ``dataset`` to read instead (e.g. one whose data changes while it runs).
    With the input persisted: :func:`scabbard.ft.ingress.run_persisted`; with fault
    tolerance: :func:`scabbard.ft.recovery.run_fault_tolerant`.
    """
    if dataset.schema.fingerprint != query.source.schema.fingerprint:
        raise ValueError(f"{query.name} reads {query.source.schema.name!r} data, but the dataset "
                         f"holds {dataset.schema.name!r}")
    engine = Engine(query, dataset.tables, config, push_up=push_up)
    batch_rows = engine.task_rows(dataset, rate)
    if loop is None:
        loop = duration is not None or max_tuples is not None
    if source is None:
        source = ReplaySource(dataset, batch_rows, rate=rate, duration=duration,
                              max_tuples=max_tuples, loop=loop, span=engine.spans_copies)
    return engine.run(source, sink if sink is not None else NullSink(),
                      engine.metrics(metrics_log, on_sample))
