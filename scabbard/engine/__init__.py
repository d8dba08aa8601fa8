"""The engine: task runtime (sources, dispatcher, workers, assembly, sinks, metrics). DESIGN.md §5.

    from scabbard import queries
from scabbard.data import open_dataset
    from scabbard.engine import run_query, CollectSink

    sink = CollectSink()
    report = run_query(queries.get("LRB1"), open_dataset("data/lrb/small"), sink=sink)
    print(report.summary.tuples_per_s, sink.to_pandas().head())
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from scabbard.compression.policy import Compression
from scabbard.data import Dataset
from scabbard.engine.metrics import Metrics, Summary, read_metrics
from scabbard.engine.runtime import INGRESS, Engine, EngineConfig, RunReport
from scabbard.engine.sinks import CollectSink, CSVSink, NullSink, ParquetSink, Sink, sink_for
from scabbard.engine.sources import ArraySource, ReplaySource
from scabbard.pog import POG
from scabbard.query import Query
from scabbard.storage import BlockManager, StorageConfig

__all__ = ["ArraySource", "CSVSink", "CollectSink", "Engine", "EngineConfig", "Metrics",
           "NullSink", "ParquetSink", "ReplaySource", "RunReport", "Sink", "Summary",
           "read_metrics", "run_query", "sink_for"]


def run_query(query: Query, dataset: Dataset, sink: Sink | None = None,
              config: EngineConfig | None = None, rate: float | None = None,
              duration: float | None = None, max_tuples: int | None = None,
              loop: bool | None = None, metrics_log: str | Path | None = None,
              on_sample=None, storage: str | Path | None = None,
              storage_config: StorageConfig | None = None, push_up: bool = False,
              compression: str = "none", lossy_decimals: int | None = None,
              compression_interval: float = 4.0, source=None) -> RunReport:
    """Run ``query`` over a dataset with the engine.

    By default the dataset is read once; with ``duration`` (wall seconds) or
    ``max_tuples`` it is replayed endlessly (timestamps shifted per copy) until
    that limit.  ``rate`` caps the input at that many tuples per second.  With a
    ``storage`` folder the ingress p-stream is persisted there while the query runs,
    after persistence push-up if ``push_up`` (§3.4), compressed with the named
    ``compression`` scheme (:data:`scabbard.compression.policy.SCHEMES`; §5), the adaptive
    one re-selecting codecs every ``compression_interval`` seconds (its swaps and fallbacks
    are ``codec`` and ``fallback`` events in the metrics log).  ``source``: a ready source
    over ``dataset`` to read instead (e.g. one whose data changes while it runs).
    """
    if dataset.schema.fingerprint != query.source.schema.fingerprint:
        raise ValueError(f"{query.name} reads {query.source.schema.name!r} data, but the dataset "
                         f"holds {dataset.schema.name!r}")
    engine = Engine(query, dataset.tables, config, push_up=push_up)
    source_probe = ReplaySource(dataset, 1)
    batch_rows = engine.batch_rows_for(source_probe.tuples_per_ms())
    if loop is None:
        loop = duration is not None or max_tuples is not None
    if source is None:
        source = ReplaySource(dataset, batch_rows, rate=rate, duration=duration,
                              max_tuples=max_tuples, loop=loop)
    sink = sink if sink is not None else NullSink()
    if storage is None:
        return engine.run(source, sink, metrics_log, on_sample)
    metrics = Metrics(dataset.schema.row_bytes, metrics_log, engine.config.metrics_interval,
                      on_sample)
    with BlockManager(storage, storage_config) as bm:
        pog = POG(bm)
        # batches in memory ahead of the workers: enough to overlap disk and CPU, and for
        # the writer to bulk several p-units into one large write
        adaptive = {"interval": compression_interval} if compression == "adaptive" else {}
        compress = Compression.scheme(engine.input_schema, compression, lossy_decimals,
                                      on_event=metrics.event, **adaptive)
        pog.pstream(INGRESS, engine.input_schema, max_units=64,
                    max_bytes=8 * bm.config.bulk_bytes, compress=compress)
        report = engine.run(source, sink, pog=pog, metrics=metrics)
        return dataclasses.replace(report, written_bytes=bm.bytes_written)
