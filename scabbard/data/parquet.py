"""Parquet <-> replay format.

Spark writes Parquet; the engine replays column files.  Types map one to one,
with two adaptations for Spark, which has neither unsigned integers nor
fixed-size binary: ``uint32`` is stored in Parquet as ``int64`` and ``uuid`` as
16-byte ``binary``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from scabbard.data.format import DatasetError, column_file, hash_columns, table_entry
from scabbard.schema import Field, Schema

_ARROW = {
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint32": pa.int64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "uuid": pa.binary(),
}


def arrow_schema(schema: Schema, uuid_strings: bool = False) -> pa.Schema:
    """The Parquet (Arrow) schema a dataset's Parquet files have; ``uuid_strings``: uuids
    as canonical strings, as every result file and reader gives them."""
    return pa.schema([pa.field(f.name, pa.string() if uuid_strings and f.dtype == "uuid"
                               else _ARROW[f.dtype], nullable=False) for f in schema.fields])


def _uuid_words(f: Field, arr: pa.Array) -> np.ndarray:
    """Canonical uuid strings (a result file's) as the (n, 2) words of a uuid column."""
    texts = arr.to_pylist()
    try:
        raw = b"".join(bytes.fromhex(t.replace("-", "")) for t in texts)
    except (AttributeError, ValueError):
        raise DatasetError(f"column {f.name!r}: not canonical uuid strings") from None
    if len(raw) != 16 * len(texts):
        raise DatasetError(f"column {f.name!r}: every uuid must be exactly 16 bytes")
    return np.frombuffer(raw, np.uint8).copy().view(f.numpy_dtype).reshape(len(texts), 2)


def _to_numpy(f: Field, arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.null_count:
        raise DatasetError(f"column {f.name!r} has {arr.null_count} nulls; datasets have none")
    if f.dtype == "uuid":
        if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
            return _uuid_words(f, arr)
        if not pa.types.is_binary(arr.type) and not pa.types.is_fixed_size_binary(arr.type):
            raise DatasetError(f"column {f.name!r}: expected binary uuids, got {arr.type}")
        n = len(arr)
        if pa.types.is_fixed_size_binary(arr.type):
            if arr.type.byte_width != 16:
                raise DatasetError(f"column {f.name!r}: uuids must be 16 bytes")
            data = np.frombuffer(arr.buffers()[1], dtype=np.uint8)
            start = arr.offset * 16
            raw = data[start : start + 16 * n]
        else:
            offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset : arr.offset + n + 1]
            if n and not np.all(np.diff(offsets) == 16):
                raise DatasetError(f"column {f.name!r}: every uuid must be exactly 16 bytes")
            data = np.frombuffer(arr.buffers()[2], dtype=np.uint8)
            raw = data[offsets[0] : offsets[0] + 16 * n] if n else data[:0]
        return np.ascontiguousarray(raw).view(f.numpy_dtype).reshape(n, 2)
    values = arr.to_numpy(zero_copy_only=False)
    want = f.numpy_dtype
    if values.dtype == want:
        return values
    if f.dtype == "uint32":
        if len(values) and (values.min() < 0 or values.max() > np.iinfo(np.uint32).max):
            raise DatasetError(f"column {f.name!r}: value outside the uint32 range")
        return values.astype(want)
    raise DatasetError(f"column {f.name!r}: Parquet type {arr.type} does not match {f.dtype}")


def record_batch_columns(schema: Schema, rb: pa.RecordBatch | pa.Table) -> tuple[np.ndarray, ...]:
    """Column arrays of an Arrow batch, in schema order and dtypes."""
    names = rb.schema.names
    missing = [n for n in schema.names if n not in names]
    if missing:
        raise DatasetError(f"{schema.name}: Parquet data lacks columns {missing}")
    return tuple(_to_numpy(f, rb.column(names.index(f.name))) for f in schema.fields)


def spark_parquet_writer(df, codec: str):
    """The Spark writer of a dataset's Parquet: format v2 pages (delta encodings) without
    dictionaries or page checksums - ~1.7x faster to write than parquet-mr's defaults, and
    read by pyarrow and Spark alike."""
    return (df.write.option("compression", codec)
            .option("parquet.writer.version", "v2")
            .option("parquet.enable.dictionary", "false")
            .option("parquet.page.write-checksum.enabled", "false"))


def parquet_files(folder: Path) -> list[Path]:
    """Part files of a Parquet folder, in partition order."""
    return sorted(Path(folder).glob("part-*.parquet"))


def parquet_rows(files: Iterable[Path]) -> int:
    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def _convert_file(path: Path, schema: Schema, table_dir: Path, start: int, batch_rows: int,
                  progress: Callable[[int], None] | None) -> tuple[int, int | None, int | None, bool]:
    """Write one Parquet file's rows into the column files at row ``start``.

    Returns (rows, first timestamp, last timestamp, timestamps non-decreasing).
    """
    fds = [os.open(column_file(table_dir, f.name), os.O_WRONLY) for f in schema.fields]
    rows, first, last, ordered = 0, None, None, True
    try:
        for rb in pq.ParquetFile(path).iter_batches(batch_size=batch_rows, columns=list(schema.names)):
            cols = record_batch_columns(schema, rb)
            for fd, f, col in zip(fds, schema.fields, cols, strict=True):
                buf = memoryview(np.ascontiguousarray(col)).cast("B")
                offset = (start + rows) * f.itemsize
                while buf:
                    n = os.pwrite(fd, buf, offset)
                    buf, offset = buf[n:], offset + n
            if schema.stream and len(cols[0]):
                ts = cols[0]
                if (last is not None and ts[0] < last) or np.any(ts[1:] < ts[:-1]):
                    ordered = False
                first = int(ts[0]) if first is None else first
                last = int(ts[-1])
            rows += rb.num_rows
            if progress is not None:
                progress(rb.num_rows)
    finally:
        for fd in fds:
            os.fsync(fd)
            os.close(fd)
    return rows, first, last, ordered


def parquet_to_replay(
    files: Iterable[Path],
    schema: Schema,
    table_dir: Path,
    progress: Callable[[int], None] | None = None,
    threads: int | None = None,
    batch_rows: int = 1 << 18,
) -> dict:
    """Convert Parquet part files (in order) into the replay format; return the manifest entry.

    Files are converted in parallel, each straight into its rows' place in the
    pre-sized column files (the row offsets come from the Parquet footers), then
    every column is hashed.  Raises :class:`DatasetError` if event time decreases.
    """
    files = [Path(f) for f in files]
    table_dir = Path(table_dir)
    counts = [pq.ParquetFile(f).metadata.num_rows for f in files]
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(int)
    rows = int(starts[-1])
    (table_dir / "columns").mkdir(parents=True, exist_ok=True)
    for f in schema.fields:
        with open(column_file(table_dir, f.name), "wb") as fh:
            fh.truncate(rows * f.itemsize)
    threads = threads or min(4, os.cpu_count() or 1)
    with ThreadPoolExecutor(threads) as pool:
        parts = list(pool.map(
            lambda k: _convert_file(files[k], schema, table_dir, int(starts[k]), batch_rows, progress),
            range(len(files)),
        ))
    for k, (n, _, _, _) in enumerate(parts):
        if n != counts[k]:
            raise DatasetError(f"{files[k]}: read {n} rows, its footer says {counts[k]}")
    first = last = None
    if schema.stream:
        nonempty = [(f, a, b, ok) for f, (_, a, b, ok) in zip(files, parts, strict=True) if a is not None]
        for f, _, _, ok in nonempty:
            if not ok:
                raise DatasetError(f"{f}: event timestamps decrease; a stream must be in event-time order")
        for (_, _, b, _), (f, a, _, _) in zip(nonempty, nonempty[1:], strict=False):
            if a < b:
                raise DatasetError(f"{f}: event timestamps decrease across part files")
        if nonempty:
            first, last = nonempty[0][1], nonempty[-1][2]
    return table_entry(schema, rows, hash_columns(table_dir, schema), first, last)


def columns_to_arrow(schema: Schema, columns: tuple[np.ndarray, ...],
                     uuid_strings: bool = False) -> pa.Table:
    """An Arrow table of column arrays, in the Parquet types of :func:`arrow_schema`
    (``uuid_strings``: uuids as canonical strings, as in result files)."""
    from scabbard.batch import uuid_hex

    arrays = []
    for f, col in zip(schema.fields, columns, strict=True):
        if f.dtype == "uuid" and uuid_strings:
            arrays.append(pa.array(uuid_hex(col), pa.string()))
        elif f.dtype == "uuid":
            raw = np.ascontiguousarray(col).view(np.uint8).reshape(-1)
            n = len(col)
            offsets = pa.py_buffer((np.arange(n + 1, dtype=np.int32) * 16).tobytes())
            arrays.append(pa.Array.from_buffers(pa.binary(), n, [None, offsets, pa.py_buffer(raw)]))
        elif f.dtype == "uint32":
            arrays.append(pa.array(np.asarray(col, dtype=np.int64)))
        else:
            arrays.append(pa.array(np.asarray(col)))
    return pa.Table.from_arrays(arrays, schema=arrow_schema(schema, uuid_strings))


def write_parquet(schema: Schema, columns: tuple[np.ndarray, ...], path: Path) -> None:
    """Write column arrays as one Parquet file (the replay -> Parquet direction)."""
    pq.write_table(columns_to_arrow(schema, columns), path)


def read_parquet(schema: Schema, path_or_files) -> tuple[np.ndarray, ...]:
    """Read Parquet (one file, a folder of part files, or a list) into column arrays."""
    if isinstance(path_or_files, str | Path):
        p = Path(path_or_files)
        files = parquet_files(p) if p.is_dir() else [p]
    else:
        files = list(path_or_files)
    if not files:
        raise DatasetError(f"{path_or_files}: no Parquet files")
    table = pa.concat_tables(pq.read_table(f, columns=list(schema.names)) for f in files)
    return record_batch_columns(schema, table)
