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

from collections.abc import Sequence

from scabbard.data import Dataset
from scabbard.engine.metrics import Metrics, Summary
from scabbard.engine.runtime import Engine, EngineConfig, RunReport
from scabbard.engine.sinks import CollectSink, NullSink, Sink
from scabbard.engine.sources import ONCE, ArraySource, Replay, ReplaySource
from scabbard.query import Query

__all__ = ["ArraySource", "CollectSink", "Engine", "EngineConfig", "Metrics",
           "NullSink", "Replay", "ReplaySource", "RunReport", "Sink", "Summary",
           "run_query"]


def run_query(query: Query, dataset: Dataset, sink: Sink | None = None,
              config: EngineConfig | None = None, replay: Replay = ONCE, *,
              watch: Sequence = (), push_up: bool = False, source=None) -> RunReport:
    """Run ``query`` over a dataset with the engine, in memory.

    By default the dataset is read once; ``replay`` (a :class:`Replay`) replays it
    endlessly (timestamps shifted per copy) for a ``duration`` (wall seconds) or up to
    ``max_tuples``, at most ``rate`` tuples a second.  ``watch``: callables given each
    metrics line (samples and events; :class:`scabbard.outputs.MetricsLog` writes them to
    a file).  ``push_up``: the plan persistence push-up rewrote (§3.4; the same results).
    ``source``: a ready source over ``dataset`` to read instead (e.g. one whose data changes
    while it runs).  With the input persisted: :func:`scabbard.ft.ingress.run_persisted`;
    with fault tolerance: :func:`scabbard.ft.recovery.run_fault_tolerant`.
    """
    if dataset.schema.fingerprint != query.source.schema.fingerprint:
        raise ValueError(f"{query.name} reads {query.source.schema.name!r} data, but the dataset "
                         f"holds {dataset.schema.name!r}")
    engine = Engine(query, dataset.tables, config, push_up=push_up)
    if source is None:
        source = ReplaySource(dataset, engine.task_rows(dataset, replay.rate), replay,
                              span=engine.spans_copies)
    return engine.run(source, sink if sink is not None else NullSink(), engine.metrics(watch))
