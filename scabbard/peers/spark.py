"""The Spark backend: a logical plan compiled to Spark Structured Streaming (docs/design.md).

Used three ways: as the correctness reference of the engine (equal window
results), as the fault-tolerant peer in the benchmarks (it keeps a checkpoint
location), and as the way out for users who outgrow one machine (``master``,
docs/design.md: everything it reads and writes is at URIs the executors reach, and
the executors do the reading and writing).

How a plan runs:

1. Every window aggregation (a *branch*; SG3 has two) is one streaming query:
   the dataset's Parquet files are the source, event time is ``timestamp`` in
   ms with a zero-delay watermark (the data arrive in event-time order), σ/π
   and the static ⋈ become DataFrame operations, and ω γ α a ``groupBy(window,
   keys)``.  It runs in append mode with the trigger ``availableNow`` and
   writes complete windows to Parquet.  The source is the union of the
   dataset's Parquet folder and the work folder's ``sentinel`` folder, into
   which the executors write the *sentinel*: per branch one tuple far beyond its
   last window.  Read after the data, it advances the branch's watermark past
   every real window, so all of them are emitted.  A sentinel is never part of a
   result.  (When the data come in several micro-batches, each branch first
   consumes them and then runs again from its checkpoint to read the sentinel.)
2. The operators on complete windows (having, keep-max, per-window aggregate,
   window join) act window by window, so they run as batch operations on the
   branches' outputs; the executors write the final rows.

Spark has no count-based windows in Structured Streaming.  The same windows come from
event time set to each tuple's *offset* in the stream (:func:`offsets`: the first offset of
the tuple's Parquet file plus ``_metadata.row_index``), read as milliseconds: a window of N
tuples sliding by M is then ``window(N ms, M ms)`` over it - exactly the engine's windows,
which number tuples the same way.  A stateless query (σ, π, ⋈ relation) is one streaming
query in append mode, no watermark; its rows carry their offset, by which the result is
read back in input order.

A run started again on the work folder of one that was stopped resumes from its
checkpoints (``scabbard.peers.spark_io`` has the folder's layout).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from functools import reduce
from pathlib import Path

import numpy as np

from scabbard.data import Dataset
from scabbard.data.parquet import arrow_schema
from scabbard.data.shared import SharedDataset, shared_view
from scabbard.hadoopfs import SharedFS, local_path, to_uri
from scabbard.peers.spark_io import Workdir, rows_read, write_rows
from scabbard.query import Query, QueryError
from scabbard.query.expr import BinOp, BoolOp, Cmp, Col, Expr, Lit, Not, resolve
from scabbard.query.plan import (
    Filter,
    Having,
    KeepMax,
    Node,
    PerWindowAggregate,
    Project,
    RelationJoin,
    Source,
    WindowAggregate,
    WindowJoin,
    stateless,
)

EVENT_TIME = "__event_time"
OFFSET = "__offset"  # a tuple's offset in the input stream (see offsets())
# Spark copies a tuple into each of its windows; past this many per tuple (SG1's hour windows
# sliding by a second: 3,600), the generated Java exceeds the JVM's 64 KB method limit and
# Spark falls back to interpreting only after tens of seconds spent compiling.  Such plans
# are interpreted from the start (the settings hold for the run and are then restored).
MANY_WINDOWS = 1000
INTERPRETED = {"spark.sql.codegen.factoryMode": "NO_CODEGEN",
               "spark.sql.codegen.wholeStage": "false"}
# The streaming aggregations' state store: Spark's default keeps every key in a hash map on
# the heap (and writes deltas and snapshots to the checkpoint); RocksDB keeps it on the
# local disk, bounded by its block cache (larger-than-memory state)
_STATE_STORE = "spark.sql.streaming.stateStore.providerClass"
STATE_STORES = {
    "memory": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}


def column(expr: Expr):
    """A Spark Column computing ``expr`` (category names must already be resolved)."""
    from pyspark.sql import functions as F

    if isinstance(expr, Col):
        return F.col(expr.name)
    if isinstance(expr, Lit):
        return F.lit(expr.value)
    if isinstance(expr, BinOp):
        a, b = column(expr.left), column(expr.right)
        if expr.op == "+":
            return a + b
        if expr.op == "-":
            return a - b
        if expr.op == "*":
            return a * b
        if expr.op == "/":
            return a.cast("double") / b.cast("double")
        if expr.op == "//":
            return F.floor(a / b).cast("long")
        return F.pmod(a, b)
    if isinstance(expr, Cmp):
        a, b = column(expr.left), column(expr.right)
        return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b,
                ">=": a >= b}[expr.op]
    if isinstance(expr, BoolOp):
        out = column(expr.args[0])
        for x in expr.args[1:]:
            out = (out & column(x)) if expr.op == "and" else (out | column(x))
        return out
    if isinstance(expr, Not):
        return ~column(expr.arg)
    raise QueryError(f"cannot compile {expr!r} for Spark")


def _agg_column(agg, schema):
    from pyspark.sql import functions as F

    if agg.fn == "count":
        return F.count(F.lit(1)).alias(agg.name)
    value = column(resolve(agg.expr, schema))
    fn = {"sum": F.sum, "avg": F.avg, "min": F.min, "max": F.max}[agg.fn]
    return fn(value).alias(agg.name)


def _stream(node: Node, source_df, relations: dict, carry: tuple[str, ...] = (EVENT_TIME,)):
    """The DataFrame of a plan prefix (σ, π, ⋈ relation) over the source stream; projections
    keep the columns ``carry`` (the event time the window reads)."""
    from pyspark.sql import functions as F

    if isinstance(node, Source):
        return source_df
    df = _stream(node.input, source_df, relations, carry)
    if isinstance(node, Filter):
        return df.where(column(resolve(node.predicate, node.input.schema)))
    if isinstance(node, Project):
        cols = [*(F.col(c) for c in carry), F.col("timestamp")]
        cols += [column(resolve(e, node.input.schema)).alias(n) for n, e in node.columns]
        return df.select(*cols)
    if isinstance(node, RelationJoin):
        rel = relations[node.relation.name].select(
            F.col(node.right).alias("__rel_key"), *node.columns)
        return (df.join(F.broadcast(rel), df[node.left] == rel["__rel_key"], "inner")
                .drop("__rel_key"))
    raise QueryError(f"{node.label()} cannot come before the window aggregation")


def branch_frame(node: WindowAggregate, source_df, relations: dict):
    """The streaming DataFrame of one window aggregation: one row per complete window and group.

    Spark's ``window()`` copies each row into every one of its ``range / slide``
    windows before aggregating - 3,600 copies per tuple for SG1.  (Chaining a pane
    aggregation and a window aggregation over the panes avoids the copies, but
    Spark's multi-operator watermarks then drop sparse panes as late: measured on
    CM2.  The single aggregation is Spark's supported way, so the peer uses it.)
    """
    from pyspark.sql import functions as F

    df = _stream(node.input, source_df, relations)
    schema = node.input.schema
    keys = [column(resolve(e, schema)).alias(n) for n, e in node.keys]
    w = node.window
    win = F.window(F.col(EVENT_TIME), f"{w.range_ms} milliseconds", f"{w.slide_ms} milliseconds")
    out = df.groupBy(win.alias("w"), *keys).agg(*(_agg_column(a, schema) for a in node.aggs))
    return out.select(
        F.unix_millis(F.col("w.start")).alias("window_start"),
        F.unix_millis(F.col("w.end")).alias("window_end"),
        *(n for n, _ in node.keys), *(a.name for a in node.aggs),
    )


def _post(node: Node, frames: dict):
    """Batch operations on complete windows, over the branches' outputs."""
    from pyspark.sql import Window as SparkWindow
    from pyspark.sql import functions as F

    if isinstance(node, WindowAggregate):
        return frames[id(node)]
    if isinstance(node, Having):
        return _post(node.input, frames).where(column(resolve(node.predicate, node.input.schema)))
    if isinstance(node, KeepMax):
        df = _post(node.input, frames)
        peak = F.max(node.column).over(SparkWindow.partitionBy("window_start", "window_end"))
        return df.withColumn("__peak", peak).where(F.col(node.column) == F.col("__peak")).drop("__peak")
    if isinstance(node, PerWindowAggregate):
        df = _post(node.input, frames)
        schema = node.input.schema
        keys = [column(resolve(e, schema)).alias(n) for n, e in node.keys]
        return (df.groupBy("window_start", "window_end", *keys)
                .agg(*(_agg_column(a, schema) for a in node.aggs)))
    if isinstance(node, WindowJoin):
        left = _post(node.left, frames)
        right = _post(node.right, frames).drop("window_start")  # the left side's bounds stay
        out = left.join(right, on=["window_end", *node.on], how="inner")
        if node.predicate is not None:
            out = out.where(column(resolve(node.predicate, node.schema)))
        return out.select(*node.schema.names)
    raise QueryError(f"{node.label()} is not a per-window operator")


def _branches(node: Node) -> list[WindowAggregate]:
    if isinstance(node, WindowAggregate):
        return [node]
    return [b for c in node.children for b in _branches(c)]


@dataclass(frozen=True)
class SparkRun:
    """A finished Spark run: result rows (as engine-style columns, if collected) and timing."""

    query: str
    columns: dict
    tuples: int
    seconds: float  # the streaming queries (source to complete windows)
    seconds_total: float  # including the per-window batch operations and writing the results
    output: str | None = None  # the URI the executors wrote the result rows to
    rows: int | None = None  # result rows (when written or collected)
    rows_read: tuple[int, ...] = ()  # input rows each branch's streaming queries read in this run

    @property
    def tuples_per_s(self) -> float:
        return self.tuples / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class Results:
    """What becomes of a Spark run's result rows: the executors write them to ``output`` as
    Parquet (a folder or URI; None: not written), and ``collect`` brings them to the driver
    as engine-style columns (a cluster's result need not fit there: ``collect=False``)."""

    output: str | Path | None = None
    collect: bool = True

    def deliver(self, spark, query: Query, result) -> tuple[str | None, int | None, dict]:
        """``result`` (a DataFrame of ``query``'s rows) written and collected: the output's
        URI, the rows counted, the columns."""
        out = to_uri(self.output) if self.output is not None else None
        rows, cols = None, {}
        if out is not None:  # uuids as canonical strings, as every result file has them
            types = arrow_to_spark(query.schema, uuid_strings=True)
            write_rows(uuid_strings(result, query.schema), types, out)
            rows = spark.read.schema(types).parquet(out).count()
        if self.collect:
            cols = _to_columns(result, query.schema)
            rows = len(cols[query.schema.names[0]])
        return out, rows, cols


COLLECT = Results()


def _survivors(node: Node, df, relations: dict):
    """Rows through a plan prefix's σ, π and ⋈, each still carrying its source row as ``__orig_*``."""
    from pyspark.sql import functions as F

    if isinstance(node, Source):
        return df.select(*(F.col(n).alias(f"__orig_{n}") for n in df.columns), *df.columns)
    df = _survivors(node.input, df, relations)
    if isinstance(node, Filter):
        return df.where(column(resolve(node.predicate, node.input.schema)))
    if isinstance(node, Project):
        for n, e in node.columns:
            df = df.withColumn(n, column(resolve(e, node.input.schema)))
        return df
    if isinstance(node, RelationJoin):
        rel = relations[node.relation.name].select(F.col(node.right).alias("__rel_key"),
                                                   *node.columns)
        return df.join(F.broadcast(rel), df[node.left] == rel["__rel_key"], "inner").drop("__rel_key")
    raise QueryError(f"{node.label()} cannot come before the window aggregation")


def _write_sentinel(spark, source, branches, relations, folder: str, beyond_ms: int,
                    axis: str = "timestamp") -> None:
    """Flush tuples: per branch, its last surviving tuple moved ``beyond_ms`` later on the
    windows' ``axis`` (the timestamp, or a count-based window's offset), written by the
    executors as one Parquet file into ``folder`` (kept if a previous attempt of the run
    finished writing it).

    Spark pushes filters below the watermark, so only a tuple that passes a
    branch's σ and ⋈ advances that branch's watermark past its last window.
    """
    from pyspark.sql import functions as F

    fs = SharedFS(spark)
    if any(e.name == "_SUCCESS" for e in fs.list(folder)):
        return
    for e in fs.list(folder):  # an attempt that died while writing it
        fs.delete(e.uri)
    names = source.columns
    last = [_survivors(node.input, source, relations)
            .select(*(F.col(f"__orig_{n}").alias(n) for n in names))
            .orderBy(F.col(axis).desc()).limit(1) for node in branches]
    rows = reduce(lambda a, b: a.unionByName(b), last)
    (rows.withColumn(axis, F.col(axis) + F.lit(beyond_ms))
     .coalesce(1).write.mode("append").parquet(folder))


def _to_columns(df, schema) -> dict:
    """Collect a Spark result into engine-style numpy columns (uuids as (n, 2) uint64)."""
    table = df.select(*schema.names).toArrow() if hasattr(df, "toArrow") else None
    if table is None:
        import pyarrow as pa

        table = pa.Table.from_pandas(df.select(*schema.names).toPandas(), preserve_index=False)
    out = {}
    for f in schema.fields:
        arr = table.column(f.name).combine_chunks()
        if f.dtype == "uuid":
            values = arr.to_pylist()
            raw = b"".join(bytes.fromhex(x.replace("-", "")) if isinstance(x, str) else x
                           for x in values)
            out[f.name] = np.frombuffer(raw, dtype=np.uint64).reshape(-1, 2).copy()
        else:
            out[f.name] = arr.to_numpy(zero_copy_only=False).astype(f.numpy_dtype)
    return out


@contextmanager
def _sql_settings(spark, settings: dict[str, str]):
    """``settings`` on ``spark``'s SQL configuration for the block, then what was there."""
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def windows_per_tuple(query: Query) -> int:
    """The most windows one input tuple falls into, over the query's window aggregations."""
    return max((-(-b.window.range_ms // b.window.slide_ms) for b in _branches(query.node)),
               default=1)


def _consume(node, stream, relations, i: int, work: Workdir) -> int:
    """Run branch ``i`` until it has read everything available (``availableNow``); the
    rows it read."""
    q = (branch_frame(node, stream, relations).writeStream.format("parquet")
         .option("checkpointLocation", work.checkpoint(i)).option("path", work.branch(i))
         .outputMode("append").trigger(availableNow=True).start())
    q.awaitTermination()
    if q.exception() is not None:
        raise RuntimeError(f"Spark streaming query failed: {q.exception()}")
    return rows_read(q)


def run_spark(query: Query, dataset: Dataset | SharedDataset, spark=None,
              workdir: str | Path | None = None, checkpoint: str | Path | None = None,
              results: Results = COLLECT, max_files_per_trigger: int | None = None,
              state_store: str = "memory") -> SparkRun:
    """Run ``query`` over ``dataset`` with Spark Structured Streaming; return its window results.

    ``dataset``: a local dataset, or one at a URI (:class:`SharedDataset`).  ``workdir``: a
    folder or URI every executor reaches (:class:`~scabbard.peers.spark_io.Workdir`); a
    temporary local folder by default, in local mode only.  ``checkpoint``: another parent
    for the checkpoint locations.  ``results``: where the final rows go (:class:`Results`;
    by default collected to the driver - a cluster's result need not fit there, LRB2's 30 M
    rows do not; without, ``columns`` is empty).  ``max_files_per_trigger``: Parquet files per micro-batch (default: all).
    ``state_store``: ``memory`` (Spark's default, on the heap) or ``rocksdb`` (on the local
    disk; a run resumed from a checkpoint keeps the store it started with).
    Started on the work folder of an unfinished run of the same query, it resumes.
    """
    from scabbard.sparksession import get_spark

    data = shared_view(dataset)
    if data.schema.fingerprint != query.source.schema.fingerprint:
        raise ValueError(f"{query.name} reads {query.source.schema.name!r} data, not "
                         f"{data.schema.name!r}")
    if state_store not in STATE_STORES:
        raise ValueError(f"state_store: one of {', '.join(STATE_STORES)}, not {state_store!r}")
    spark = spark or get_spark()
    many = windows_per_tuple(query) > MANY_WINDOWS
    settings = dict(INTERPRETED if many else {}, **{_STATE_STORE: STATE_STORES[state_store]})
    with _sql_settings(spark, settings):
        return _run(query, data, spark, (workdir, checkpoint), results, max_files_per_trigger)


def _run(query, data, spark, folders, results: Results, max_files_per_trigger) -> SparkRun:
    from pyspark.sql import functions as F

    workdir, checkpoint = folders
    own = workdir is None
    if own and not spark.sparkContext.master.startswith("local"):
        raise ValueError(f"a run on {spark.sparkContext.master} needs a workdir every "
                         "executor reaches (a shared folder or a URI)")
    work = Workdir(tempfile.mkdtemp(prefix="scabbard-spark-") if own else workdir, checkpoint)
    try:
        t0 = time.perf_counter()
        branches = _branches(query.node)
        relations = {name: spark.read.schema(arrow_to_spark(t.schema)).parquet(*t.parquet)
                     for name, t in data.tables.items()}
        spark_schema = arrow_to_spark(data.schema)
        reader = spark.readStream.schema(spark_schema)
        if max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
        if stateless(query.node):
            return _run_stateless(query, data, spark, reader, relations, work, results, t0)
        SharedFS(spark).mkdirs(work.sentinel)
        # 1. the stream: the dataset's Parquet folder and the sentinel folder; count-based
        # windows' event time is each tuple's offset in the stream (ms = tuples)
        rows = any(b.window.rows for b in branches)
        axis = OFFSET if rows else "timestamp"
        stream = reader.parquet(data.stream.parquet_folder)
        source = spark.read.schema(spark_schema).parquet(*data.stream.parquet)
        sentinel_schema = spark_schema
        if rows:
            at = offsets(spark, data)
            stream, source = stream.withColumn(OFFSET, at), source.withColumn(OFFSET, at)
            sentinel_schema = _with_offset(spark_schema)
        stream = stream.unionByName(spark.readStream.schema(sentinel_schema).parquet(work.sentinel))
        stream = stream.withColumn(EVENT_TIME, F.timestamp_millis(axis)) \
            .withWatermark(EVENT_TIME, "0 seconds")
        # 2. one streaming query per window aggregation.  Read in one micro-batch, the data
        # and the sentinel can be read together; read in several, the sentinel must come
        # after the last one (it would make all later data late), so each branch consumes
        # the data first and then runs again from its checkpoint to read the sentinel.
        horizon = max(b.window.range_ms + b.window.slide_ms for b in branches) + 1000
        read, streaming = [0] * len(branches), 0.0
        for flush in ([True] if not max_files_per_trigger else [False, True]):
            if flush:
                _write_sentinel(spark, source, branches, relations, work.sentinel, horizon,
                                axis)
            started = time.perf_counter()
            read = [n + _consume(node, stream, relations, i, work)
                    for n, (i, node) in zip(read, enumerate(branches), strict=True)]
            streaming += time.perf_counter() - started
        frames = {id(node): spark.read.schema(arrow_to_spark(node.schema)).parquet(work.branch(i))
                  for i, node in enumerate(branches)}
        # 3. per-window operators, as batch operations on complete windows
        out, rows, cols = results.deliver(spark, query, _post(query.node, frames))
        return SparkRun(query.name, cols, data.rows, streaming, time.perf_counter() - t0, out,
                        rows, tuple(read))
    finally:
        if own:
            shutil.rmtree(local_path(work.uri), ignore_errors=True)


def offsets(spark, data):
    """Each row's offset in the dataset's stream, as a Column of a (streaming or batch) read of
    its Parquet files: the first offset of the row's file (the manifest lists the files in
    stream order; their rows are counted by a batch job) plus the row's index in its file
    (``_metadata.row_index``).  What a count-based window numbers tuples by, and the order of
    a stateless query's results."""
    from pyspark.sql import functions as F

    counts = dict(spark.read.schema(arrow_to_spark(data.schema)).parquet(*data.stream.parquet)
                  .groupBy(F.col("_metadata.file_name")).count().collect())
    pairs, at = [], 0
    for uri in data.stream.parquet:
        name = uri.rsplit("/", 1)[-1]
        pairs += [F.lit(name), F.lit(at)]
        at += counts.get(name, 0)
    if at != data.rows:
        raise ValueError(f"{data.path}: its Parquet files hold {at:,} rows, its manifest says "
                         f"{data.rows:,}")
    first = F.element_at(F.create_map(*pairs), F.col("_metadata.file_name"))
    return (first + F.col("_metadata.row_index")).cast("long")


def _with_offset(types):
    """A StructType with the offset column added (a new one: ``add`` changes its receiver)."""
    from pyspark.sql.types import LongType, StructField, StructType

    return StructType([*types.fields, StructField(OFFSET, LongType(), False)])


def _run_stateless(query, data, spark, reader, relations, work, results: Results,
                   t0) -> SparkRun:
    """A stateless query (σ, π, ⋈ relation) as one streaming query in append mode: its rows,
    each with its input offset, written as they come; read back in input order."""
    stream = reader.parquet(data.stream.parquet_folder).withColumn(OFFSET, offsets(spark, data))
    frame = _stream(query.node, stream, relations, carry=(OFFSET,)).select(
        OFFSET, *query.schema.names)
    started = time.perf_counter()
    q = (frame.writeStream.format("parquet").option("checkpointLocation", work.checkpoint(0))
         .option("path", work.branch(0)).outputMode("append").trigger(availableNow=True).start())
    q.awaitTermination()
    if q.exception() is not None:
        raise RuntimeError(f"Spark streaming query failed: {q.exception()}")
    streaming = time.perf_counter() - started
    types = arrow_to_spark(query.schema)
    result = (spark.read.schema(_with_offset(types)).parquet(work.branch(0))
              .orderBy(OFFSET).select(*query.schema.names))
    out, rows, cols = results.deliver(spark, query, result)
    return SparkRun(query.name, cols, data.rows, streaming, time.perf_counter() - t0, out, rows,
                    (rows_read(q),))


def uuid_strings(df, schema):
    """``df`` with its uuid columns (16 bytes) as canonical strings, as result files hold
    them (the engine's ``--output`` and exactly-once reader too)."""
    from pyspark.sql import functions as F

    def canonical(name: str):
        h = F.lower(F.hex(F.col(name)))
        return F.concat_ws("-", *(F.substring(h, a, n) for a, n in
                                  ((1, 8), (9, 4), (13, 4), (17, 4), (21, 12)))).alias(name)

    return df.select(*(canonical(f.name) if f.dtype == "uuid" else F.col(f.name)
                       for f in schema.fields))


def arrow_to_spark(schema, uuid_strings: bool = False):
    """The Spark StructType of a schema's Parquet layout (uint32 as long, uuid as binary;
    ``uuid_strings``: as a string, as in result files)."""
    from pyspark.sql.types import (
        BinaryType,
        DoubleType,
        FloatType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    types = {"int32": IntegerType(), "int64": LongType(), "uint32": LongType(),
             "float32": FloatType(), "float64": DoubleType(),
             "uuid": StringType() if uuid_strings else BinaryType()}
    arrow_schema(schema)  # validates the field types
    return StructType([StructField(f.name, types[f.dtype], False) for f in schema.fields])
