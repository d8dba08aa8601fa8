"""Result files: the engine's results appended to a Parquet or a CSV file, as they come
(:class:`scabbard.engine.Sink`s; the engine itself writes no file), and its metrics
appended to a JSON-lines log (:class:`MetricsLog`, :func:`read_metrics`).  Result rows have the
query's result schema; uuids are written as canonical strings, as the exactly-once output
reader gives them."""

from __future__ import annotations

import json
from pathlib import Path

from scabbard.batch import Batch
from scabbard.engine.sinks import NullSink, Sink
from scabbard.schema import Schema


class ParquetSink(Sink):
    """Appends result batches to one Parquet file (uuids as canonical strings, as the CSV
    sink and the exactly-once output reader give them)."""

    least_rows = 1 << 20  # a row group a write: SG2's windows a write were 3x slower

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def open(self, schema: Schema) -> None:
        import pyarrow.parquet as pq

        from scabbard.data.parquet import arrow_schema

        super().open(schema)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = pq.ParquetWriter(self.path, arrow_schema(schema, uuid_strings=True))

    def write(self, batch: Batch) -> None:
        from scabbard.data.parquet import columns_to_arrow

        super().write(batch)
        if len(batch):
            self._writer.write_table(columns_to_arrow(self.schema, batch.columns,
                                                      uuid_strings=True))

    def close(self) -> None:
        self._writer.close()


class CSVSink(Sink):
    """Appends result rows to a CSV file (uuids as canonical strings)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def open(self, schema: Schema) -> None:
        super().open(schema)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "w", newline="")  # noqa: SIM115 - closed in close()
        self._file.write(",".join(schema.names) + "\n")

    def write(self, batch: Batch) -> None:
        super().write(batch)
        if len(batch):
            batch.to_pandas().to_csv(self._file, header=False, index=False)

    def close(self) -> None:
        self._file.close()


def sink_for(path: str | Path | None) -> Sink:
    """A sink for an output path by its extension (.parquet, .csv); None keeps nothing."""
    if path is None:
        return NullSink()
    suffix = Path(path).suffix.lower()
    if suffix == ".parquet":
        return ParquetSink(path)
    if suffix == ".csv":
        return CSVSink(path)
    raise ValueError(f"output {path}: use a .parquet or .csv file name")


class MetricsLog:
    """A run's metrics lines appended to a JSON-lines file, each as it comes (a watcher of
    :class:`scabbard.engine.Metrics`): a notebook reads the file while the run goes on
    (:func:`read_metrics`).  The file is opened for each line, so nothing is left open when
    a run ends or fails, and a recovered run appends to its predecessor's log."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def __call__(self, line: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(line) + "\n")


def metrics_log(path: str | Path | None) -> tuple:
    """The watchers of a run with its metrics log at ``path`` (none without a path)."""
    return () if path is None else (MetricsLog(path),)


def read_metrics(path: str | Path):
    """The metrics log as a DataFrame (one row per line; latency percentiles as columns)."""
    import pandas as pd

    rows = []
    with open(path) as f:
        for line in f:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line being written
            for k, v in obj.pop("latency_ms", {}).items():
                obj[f"latency_{k}_ms"] = v
            rows.append(obj)
    return pd.DataFrame(rows)
