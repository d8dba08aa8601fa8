"""Where a Spark run reads and writes: its work folder at a URI, results by the executors.

A run's work folder (``workdir``) holds everything it writes, at a URI every executor and
the driver reach (a temporary local folder in local mode)::

    <workdir>/sentinel/         the flush tuples (see scabbard.peers.spark), one Parquet file
    <workdir>/checkpoint<i>/    branch i's checkpoint location (unless one is given)
    <workdir>/branch<i>/        branch i's complete windows (Parquet, the file sink's log)
    <workdir>/result/           the final rows, when the caller names no other output

Nothing in it is written by the driver but Spark's own metadata (offsets, commits, the
file sink's log); a run started again on the same work folder resumes from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from scabbard.hadoopfs import join, to_uri


@dataclass(frozen=True)
class Workdir:
    """The layout of a run's work folder (see the module); ``checkpoints`` another parent
    for the checkpoint locations."""

    uri: str
    checkpoints: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "uri", to_uri(self.uri))
        if self.checkpoints is not None:
            object.__setattr__(self, "checkpoints", to_uri(self.checkpoints))

    @property
    def sentinel(self) -> str:
        return join(self.uri, "sentinel")

    def checkpoint(self, i: int) -> str:
        if self.checkpoints is not None:
            return join(self.checkpoints, f"branch{i}")
        return join(self.uri, f"checkpoint{i}")

    def branch(self, i: int) -> str:
        return join(self.uri, f"branch{i}")

    @property
    def result(self) -> str:
        return join(self.uri, "result")


def write_rows(df, types, uri: str) -> None:
    """The executors write ``df``'s columns ``types`` (a StructType) to Parquet at ``uri``
    (replacing what is there), cast to those types - for a schema's Parquet layout
    (:func:`scabbard.peers.spark.arrow_to_spark`: uint32 as int64, uuid as binary) what
    :func:`scabbard.data.parquet.read_parquet` reads back."""
    from pyspark.sql import functions as F

    (df.select(*(F.col(f.name).cast(f.dataType) for f in types.fields))
     .write.mode("overwrite").parquet(uri))


def rows_read(query) -> int:
    """Input rows a finished streaming query read (over its last 100 progress reports)."""
    total = 0
    for p in query.recentProgress:
        n = getattr(p, "numInputRows", None)
        total += int(n if n is not None else p["numInputRows"])
    return total
