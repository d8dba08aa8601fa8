"""A dataset at a URI a cluster shares: its manifest and its Parquet files, as Spark reads them.

``scabbard datagen --out URI`` writes the same dataset a local run writes (manifest, replay
columns, Parquet), but at a URI the driver may not be able to open as a folder (HDFS, an
object store).  :class:`SharedDataset` is what Spark needs of it: the manifest, checked like
a local one, and the URIs of each table's Parquet part files.  :func:`shared_view` gives the
same view of a local :class:`~scabbard.data.Dataset`.  Reading goes through a
:class:`~scabbard.hadoopfs.SharedFS` (the driver's Hadoop client).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePosixPath

from scabbard.data import (
    Dataset,
    ManifestView,
    _plain_name,
    _schema_mismatch,
    parse_manifest,
    table_layout,
)
from scabbard.data.format import MANIFEST, DatasetError
from scabbard.hadoopfs import join, to_uri
from scabbard.schema import Schema


@dataclass(frozen=True)
class SharedTable:
    """One table: its folder's URI, schema, rows and Parquet part files (URIs, in order)."""

    name: str
    uri: str
    schema: Schema
    rows: int
    parquet: tuple[str, ...]
    entry: dict = field(repr=False)

    @property
    def parquet_folder(self) -> str:
        """The one folder holding the part files (a file stream reads it)."""
        folders = {f.rsplit("/", 1)[0] for f in self.parquet}
        if len(folders) != 1:
            raise DatasetError(f"{self.uri}: the Parquet files of {self.name!r} are not in one "
                               f"folder: {sorted(folders)}")
        return folders.pop()

    @property
    def nbytes(self) -> int:
        return self.rows * self.schema.payload_bytes


@dataclass(frozen=True)
class SharedDataset(ManifestView):
    """A dataset at a URI: manifest, stream and side tables (see the module)."""

    path: str
    manifest: dict = field(repr=False)
    stream: SharedTable = field(repr=False)
    tables: dict[str, SharedTable] = field(repr=False)


def _parquet_files(name: str, table_uri: str, entry: dict, where: str) -> tuple[str, ...]:
    files = entry.get("parquet")
    if not isinstance(files, list) or not files:
        raise DatasetError(f"{where}: table {name!r} lists no Parquet files; Spark reads those")
    out = []
    for f in files:
        rel = PurePosixPath(f) if isinstance(f, str) else None
        if rel is None or rel.is_absolute() or any(p in ("..", "") for p in rel.parts):
            raise DatasetError(f"{where}: corrupt manifest, Parquet file {f!r} of {name!r} must "
                               f"be a relative path inside the table folder")
        out.append(join(table_uri, f))
    return tuple(out)


def _table(name: str, table_uri: str, entry, where: str) -> SharedTable:
    schema, rows = table_layout(name, entry, where)
    return SharedTable(name, table_uri, schema, rows,
                       _parquet_files(name, table_uri, entry, where), entry)


def open_shared_dataset(fs, uri: str, schema: Schema | None = None) -> SharedDataset:
    """Read and check the manifest of the dataset at ``uri`` through ``fs`` (a SharedFS).

    Checks what a local open checks of the manifest, the schema (against ``schema`` when
    given), and that every column file has the size its rows give.
    """
    uri = to_uri(uri)
    mpath = join(uri, MANIFEST)
    if not fs.exists(mpath):
        raise DatasetError(f"{uri}: no {MANIFEST}: not a dataset, or its generation did not "
                           f"finish; run `scabbard datagen` again")
    manifest = parse_manifest(fs.read_bytes(mpath), mpath)
    stream = _table("stream", join(uri, "stream"), manifest["stream"], mpath)
    if schema is not None and stream.schema.fingerprint != schema.fingerprint:
        raise DatasetError(_schema_mismatch(uri, schema, stream.schema))
    tables = {}
    for name, entry in manifest["tables"].items():
        if not _plain_name(name):
            raise DatasetError(f"{mpath}: corrupt manifest, bad table name {name!r}")
        tables[name] = _table(name, join(uri, "tables", name), entry, mpath)
    for t in (stream, *tables.values()):
        sizes = {e.name: e.size for e in fs.list(join(t.uri, "columns"))} \
            if fs.exists(join(t.uri, "columns")) else {}
        for f, c in zip(t.schema.fields, t.entry["columns"], strict=True):
            name = PurePosixPath(c["file"]).name
            if sizes.get(name) != t.rows * f.itemsize:
                raise DatasetError(
                    f"{join(t.uri, c['file'])}: size {sizes.get(name)} B does not match "
                    f"{t.rows} rows x {f.itemsize} B ({t.name}.{f.name})")
    return SharedDataset(uri, manifest, stream, tables)


def shared_view(dataset: Dataset | SharedDataset) -> SharedDataset:
    """The :class:`SharedDataset` of a local dataset (its files as ``file://`` URIs)."""
    if isinstance(dataset, SharedDataset):
        return dataset
    uri = to_uri(dataset.path)

    def table(t, table_uri: str) -> SharedTable:
        where = join(uri, MANIFEST)
        return SharedTable(t.name, table_uri, t.schema, t.rows,
                           _parquet_files(t.name, table_uri, t.entry, where), t.entry)

    return SharedDataset(uri, dataset.manifest, table(dataset.stream, to_uri(dataset.stream.path)),
                         {n: table(t, to_uri(t.path)) for n, t in dataset.tables.items()})
