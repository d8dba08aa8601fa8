"""The replay format's column files written by a cluster: one Spark task per column.

On one machine the driver converts the Parquet part files into column files
(:func:`scabbard.data.parquet.parquet_to_replay`).  On a cluster the files live at a URI the
driver need not see, so the conversion is a Spark job of its own: a task per column of each
table reads that column from every part file in partition order - with the same decoding as
on one machine (:func:`scabbard.data.parquet.record_batch_columns`) - writes
``columns/<name>.bin`` from start to end and returns its SHA-256, its rows per part file and,
for the stream's event time, the first and last value and where it decreases.  The bytes are
those a local conversion writes, and so is the manifest built from the results.

Executors reach the URI through pyarrow's file systems: a folder mounted on every machine
(``file://``), HDFS (``hdfs://``, libhdfs on the nodes), S3 (``s3a://`` is S3 to pyarrow),
Google Cloud Storage (``gs://``) and Azure (``abfs://``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

import numpy as np

from scabbard.data.format import DatasetError, table_entry
from scabbard.schema import Schema

ARROW_SCHEMES = ("file", "hdfs", "s3", "s3a", "gs", "gcs", "abfs", "abfss")
BATCH_ROWS = 1 << 18


def arrow_filesystem(uri: str):
    """(pyarrow file system, path in it) of a URI, or DatasetError for a scheme it lacks."""
    import pyarrow.fs as pafs

    parsed = urlparse(uri)
    if parsed.scheme not in ARROW_SCHEMES:
        raise DatasetError(
            f"{uri}: the executors write the replay columns through pyarrow, which has no file "
            f"system for {parsed.scheme}:// (use one of {', '.join(ARROW_SCHEMES)})")
    if parsed.scheme == "file":
        return pafs.LocalFileSystem(), unquote(parsed.path)
    if parsed.scheme == "s3a":
        uri = "s3" + uri[3:]
    return pafs.FileSystem.from_uri(uri)


@dataclass(frozen=True)
class ColumnTask:
    """Write column ``field`` of table ``table`` (at ``table_uri``) from its Parquet files."""

    table: str
    table_uri: str
    schema: dict
    field: int
    parquet: tuple[str, ...]


@dataclass(frozen=True)
class ColumnResult:
    table: str
    field: int
    sha256: str
    rows_per_file: tuple[int, ...]
    first: int | None = None  # event time, for the stream's first column
    last: int | None = None
    decreases_in: str | None = None  # the part file where event time first decreases


def write_column(task: ColumnTask) -> ColumnResult:
    """Run on an executor: one column file from the Parquet files, hashed as it is written."""
    import pyarrow.parquet as pq

    from scabbard.data.parquet import record_batch_columns

    schema = Schema.from_dict(task.schema)
    f = schema.fields[task.field]
    one = Schema(schema.name, (f,), stream=False)  # this column alone
    event_time = schema.stream and task.field == 0
    fs, root = arrow_filesystem(task.table_uri)
    fs.create_dir(f"{root}/columns", recursive=True)
    target = f"{root}/columns/{f.name}.bin"
    digest, counts = hashlib.sha256(), []
    first = last = decreases = None
    with fs.open_output_stream(target) as out:
        for uri in task.parquet:
            pfs, path = arrow_filesystem(uri)
            with pfs.open_input_file(path) as handle:
                pf = pq.ParquetFile(handle)
                n = 0
                for rb in pf.iter_batches(batch_size=BATCH_ROWS, columns=[f.name]):
                    (col,) = record_batch_columns(one, rb)
                    buf = memoryview(np.ascontiguousarray(col)).cast("B")
                    out.write(buf)
                    digest.update(buf)
                    n += rb.num_rows
                    if event_time and len(col):
                        if decreases is None and ((last is not None and col[0] < last)
                                                  or np.any(col[1:] < col[:-1])):
                            decreases = uri
                        first = int(col[0]) if first is None else first
                        last = int(col[-1])
                if n != pf.metadata.num_rows:
                    raise DatasetError(f"{uri}: read {n} rows, its footer says "
                                       f"{pf.metadata.num_rows}")
                counts.append(n)
    if urlparse(task.table_uri).scheme == "file":  # a mounted folder: flush it to its disk
        fd = os.open(target, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return ColumnResult(task.table, task.field, digest.hexdigest(), tuple(counts), first, last,
                        decreases)


def write_columns(spark, tables: Mapping[str, tuple[str, Schema, tuple[str, ...]]]) -> dict:
    """Write every column file of ``tables`` (name -> (table URI, schema, Parquet URIs in
    order)) with one Spark task per column; return each table's manifest entry.

    Raises :class:`DatasetError` if event time decreases or the columns disagree on rows.
    """
    from scabbard.sparksession import ship_scabbard

    for uri, _, _ in tables.values():
        arrow_filesystem(uri)  # an unsupported scheme fails here, before the job
    ship_scabbard(spark)  # the tasks run scabbard's code: a cluster's executors get it with them
    tasks = [ColumnTask(name, uri, schema.to_dict(), i, tuple(files))
             for name, (uri, schema, files) in tables.items() for i in range(len(schema.fields))]
    results = spark.sparkContext.parallelize(tasks, len(tasks)).map(write_column).collect()
    entries = {}
    for name, (uri, schema, _) in tables.items():
        mine = sorted((r for r in results if r.table == name), key=lambda r: r.field)
        counts = {r.rows_per_file for r in mine}
        if len(counts) != 1:
            raise DatasetError(f"{uri}: the columns of {name!r} disagree on their rows")
        rows = sum(counts.pop())
        first = last = None
        if schema.stream:
            if mine[0].decreases_in is not None:
                raise DatasetError(f"{mine[0].decreases_in}: event timestamps decrease; a "
                                   f"stream must be in event-time order")
            first, last = mine[0].first, mine[0].last
        entries[name] = table_entry(schema, rows, [r.sha256 for r in mine], first, last)
    return entries
