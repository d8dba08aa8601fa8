"""Sinks: where complete window results go, in window order (the port, and the sinks that
keep them in memory or drop them; the engine writes no file - the file sinks are
:mod:`scabbard.outputs`).

Result rows have the query's result schema: ``window_start``, ``window_end``
(ms of event time), the group keys and the aggregates, named as in the query.
"""

from __future__ import annotations

import numpy as np

from scabbard.batch import Batch
from scabbard.schema import Schema


class Sink:
    """Receives result batches in window order."""

    schema: Schema
    rows: int = 0
    # the fewest rows a write is worth (a Parquet row group a write): a producer of many
    # small pieces (a partitioned dataflow's merge) joins them up to it; 0: any
    least_rows: int = 0

    def open(self, schema: Schema) -> None:
        self.schema = schema
        self.rows = 0

    def write(self, batch: Batch) -> None:
        self.rows += len(batch)

    def close(self) -> None:
        pass


class NullSink(Sink):
    """Counts result rows and drops them (benchmarks)."""


class CollectSink(Sink):
    """Keeps every result batch in memory."""

    def open(self, schema: Schema) -> None:
        super().open(schema)
        self.batches: list[Batch] = []

    def write(self, batch: Batch) -> None:
        super().write(batch)
        if len(batch):
            self.batches.append(batch)

    def columns(self) -> dict[str, np.ndarray]:
        if not self.batches:
            return {f.name: f.empty(0) for f in self.schema.fields}
        return {f.name: np.concatenate([b.columns[i] for b in self.batches])
                for i, f in enumerate(self.schema.fields)}

    def to_pandas(self):
        cols = self.columns()
        return Batch(self.schema, tuple(cols[n] for n in self.schema.names)).to_pandas() \
            .reset_index(drop=True)
