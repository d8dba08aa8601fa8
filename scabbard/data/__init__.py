"""Load generated datasets as columnar batches: memory-mapped, zero-copy, validated.

    >>> from scabbard.data import open_dataset
    >>> ds = open_dataset("data/lrb/small")            # doctest: +SKIP
    >>> for batch in ds.batches(rows=65536):           # doctest: +SKIP
    ...     speeds = batch.column("speed")             # a view into the page cache

:func:`open_dataset` checks the manifest, the schema (against the workload's
``SCHEMA`` when given) and every column file's size before it maps anything, and
raises :class:`DatasetError` naming the file and the mismatch.  ``verify=True``
also recomputes the checksums.  A manifest is not trusted: every field's type is
checked, table names must be plain names and column files must lie inside their
table's folder (no absolute paths, no ``..``, no symbolic link out of it) - any
malformed or hostile manifest is a :class:`DatasetError` naming the field.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np

from scabbard.batch import Batch
from scabbard.data.format import (
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    DatasetDamaged,
    DatasetError,
    TableWriter,
    build_manifest,
    combine_checksums,
    hash_file,
    publish,
    staging_dir,
)
from scabbard.schema import Schema, SchemaError

__all__ = ["Dataset", "DatasetDamaged", "DatasetError", "Table", "dataset_path", "open_dataset", "write_dataset"]

_TABLE_KEYS = ("schema", "schema_fingerprint", "rows", "columns", "checksum")


def dataset_path(root: str | Path, workload: str, name: str) -> Path:
    """Where ``scabbard datagen`` puts a dataset: ``<root>/<workload>/<name>``."""
    return Path(root) / workload / name


STAMP = "verified.json"  # beside the manifest: the files as they were when last verified

@dataclass(frozen=True)
class Table:
    """One table of a dataset (the stream, or a side table), its columns memory-mapped."""

    name: str
    path: Path
    schema: Schema
    rows: int
    columns: tuple[np.ndarray, ...]
    entry: dict = field(repr=False)

    def column(self, name: str) -> np.ndarray:
        return self.columns[self.schema.index(name)]

    def batch(self, start: int = 0, stop: int | None = None) -> Batch:
        """Rows [start, stop) as a zero-copy batch whose offset is ``start``."""
        stop = self.rows if stop is None else stop
        if not 0 <= start <= stop <= self.rows:
            raise IndexError(f"rows [{start}, {stop}) out of range for {self.rows} rows")
        return Batch(self.schema, tuple(c[start:stop] for c in self.columns), start)

    def batches(self, rows: int, start: int = 0, stop: int | None = None) -> Iterator[Batch]:
        """Consecutive zero-copy batches of ``rows`` tuples (the last may be shorter)."""
        if rows <= 0:
            raise ValueError(f"rows per batch must be positive, got {rows}")
        stop = self.rows if stop is None else min(stop, self.rows)
        for lo in range(start, stop, rows):
            yield self.batch(lo, min(lo + rows, stop))

    @property
    def nbytes(self) -> int:
        """Size of the tuples as the engine holds them (the fields, no struct padding)."""
        return self.rows * self.schema.payload_bytes

    @property
    def stored_bytes(self) -> int:
        return sum(c["bytes"] for c in self.entry["columns"])

    def to_pandas(self, limit: int | None = None):
        stop = self.rows if limit is None else min(limit, self.rows)
        return self.batch(0, stop).to_pandas()

    def verify(self) -> None:
        """Recompute every column's SHA-256 and compare with the manifest."""
        hashes = []
        for c in self.entry["columns"]:
            path = self.path / c["file"]
            digest = hash_file(path)
            if digest != c["sha256"]:
                raise DatasetDamaged(
                    f"{path}: checksum mismatch (manifest {c['sha256'][:12]}..., "
                    f"file {digest[:12]}...): the file was modified or corrupted"
                )
            hashes.append(c["sha256"])
        if combine_checksums(hashes) != self.entry["checksum"]:
            raise DatasetDamaged(f"{self.path}: table checksum does not match its columns")


class ManifestView:
    """What a dataset's manifest and stream say, wherever the dataset lives (a folder here:
    :class:`Dataset`; a URI a cluster shares: :class:`scabbard.data.shared.SharedDataset`)."""

    manifest: dict
    stream: Table

    @property
    def workload(self) -> str:
        return self.manifest["workload"]

    @property
    def name(self) -> str:
        return self.manifest["name"]

    @property
    def params(self) -> dict:
        return self.manifest["params"]

    @property
    def checksum(self) -> str:
        return self.manifest["checksum"]

    @property
    def schema(self) -> Schema:
        return self.stream.schema

    @property
    def rows(self) -> int:
        return self.stream.rows


@dataclass(frozen=True)
class Dataset(ManifestView):
    """A generated dataset: the stream, its side tables and the manifest."""

    path: Path
    manifest: dict = field(repr=False)
    stream: Table = field(repr=False)
    tables: dict[str, Table] = field(repr=False)


    def __len__(self) -> int:
        return self.stream.rows

    def batches(self, rows: int, start: int = 0, stop: int | None = None) -> Iterator[Batch]:
        return self.stream.batches(rows, start, stop)

    def batch(self, start: int = 0, stop: int | None = None) -> Batch:
        return self.stream.batch(start, stop)

    def column(self, name: str) -> np.ndarray:
        return self.stream.column(name)

    def table(self, name: str) -> Table:
        try:
            return self.tables[name]
        except KeyError:
            raise DatasetError(
                f"{self.path}: no side table {name!r} (has: {', '.join(self.tables) or 'none'})"
            ) from None

    def to_pandas(self, limit: int | None = None):
        return self.stream.to_pandas(limit)

    def verify(self) -> None:
        """Recompute all checksums; raise :class:`DatasetError` on any mismatch."""
        self.stream.verify()
        for t in self.tables.values():
            t.verify()
        expected = combine_checksums(
            [self.stream.entry["checksum"]] + [t.entry["checksum"] for t in self.tables.values()]
        )
        if expected != self.manifest["checksum"]:
            raise DatasetError(f"{self.path}: dataset checksum does not match its tables")

    def files_stamp(self) -> dict:
        """Each column file's size and modification time, and the manifest's checksum: what
        changes when a file does (cheap: one stat a file, nothing read)."""
        files = {}
        for t in (self.stream, *self.tables.values()):
            for c in t.entry["columns"]:
                st = (t.path / c["file"]).stat()
                files[str((t.path / c["file"]).relative_to(self.path))] = [st.st_size,
                                                                          st.st_mtime_ns]
        return {"checksum": self.manifest["checksum"], "files": files}

    def verify_once(self) -> bool:
        """:meth:`verify` unless it passed since the files last changed (a stamp of their
        sizes and times, :data:`STAMP`, beside the manifest); True if it verified.  A folder
        that cannot be written is verified at every open."""
        stamp, at = self.files_stamp(), self.path / STAMP
        try:
            if json.loads(at.read_text()) == stamp:
                return False
        except (OSError, ValueError):
            pass
        self.verify()
        tmp = at.with_name(f".{STAMP}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(stamp))
            os.replace(tmp, at)
        except OSError:
            tmp.unlink(missing_ok=True)
        return True


def _read_manifest(path: Path) -> dict:
    mpath = path / MANIFEST
    if path.exists() and not path.is_dir():
        raise DatasetError(f"{path}: is a file, not a dataset folder")
    if not path.is_dir():
        raise DatasetError(f"{path}: no such dataset folder")
    if not mpath.is_file():
        partial = [p.name for p in path.parent.glob(f".{path.name}.partial-*")]
        hint = " (an interrupted generation left a partial folder)" if partial else ""
        raise DatasetError(
            f"{path}: no {MANIFEST}: not a dataset, or its generation did not finish{hint}; "
            "run `scabbard datagen` again"
        )
    return parse_manifest(mpath.read_bytes(), mpath)


def parse_manifest(text: bytes | str, mpath) -> dict:
    """A manifest's JSON ``text`` checked field by field (``mpath`` names it in errors)."""
    try:
        manifest = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DatasetError(f"{mpath}: corrupt manifest, not valid JSON ({e})") from None
    if not isinstance(manifest, dict):
        raise DatasetError(f"{mpath}: corrupt manifest, expected a JSON object")
    if manifest.get("format") != FORMAT:
        raise DatasetError(f"{mpath}: not a {FORMAT} manifest (format={manifest.get('format')!r})")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise DatasetError(
            f"{mpath}: format version {manifest.get('format_version')!r} is not supported "
            f"(this scabbard reads version {FORMAT_VERSION}); regenerate the dataset"
        )
    for key in ("workload", "name", "params", "stream", "tables", "checksum"):
        if key not in manifest:
            raise DatasetError(f"{mpath}: corrupt manifest, missing {key!r}")
    for key, kind in (("workload", str), ("name", str), ("checksum", str), ("params", dict),
                      ("stream", dict), ("tables", dict)):
        _expect(manifest[key], kind, mpath, repr(key))
    for name in manifest["tables"]:
        if not _plain_name(name):
            raise DatasetError(f"{mpath}: corrupt manifest, table name {name!r} must be a plain "
                               f"folder name (no '/', '..' or leading '.')")
    return manifest


_KINDS = {int: "an integer", str: "a string", dict: "an object", list: "a list"}


def _expect(value, kind: type, where: Path, what: str):
    """``value`` if it is a ``kind`` (an int is never a bool), else a DatasetError."""
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise DatasetError(f"{where}: corrupt manifest, {what} must be {_KINDS[kind]}, got "
                           f"{type(value).__name__} {value!r:.60}")
    return value


def _plain_name(name) -> bool:
    return (isinstance(name, str) and name not in ("", ".", "..") and not name.startswith(".")
            and not any(c in name for c in "/\\\0"))


def _column_path(table_dir: Path, file, where: Path, what: str) -> Path:
    """The column file a manifest names, refused unless it stays inside ``table_dir``."""
    _expect(file, str, where, f"{what} 'file'")
    rel = PurePosixPath(file)
    if (not file or rel.is_absolute() or any(p in ("..", "") for p in rel.parts)
            or any(c in file for c in "\\\0")):
        raise DatasetError(f"{where}: corrupt manifest, {what} 'file' must be a relative path "
                           f"inside the table folder, got {file!r}")
    path = table_dir / rel
    try:
        inside = path.resolve().is_relative_to(table_dir.resolve())
    except (OSError, RuntimeError):  # a symbolic link loop
        inside = False
    if not inside:
        raise DatasetError(f"{where}: corrupt manifest, {what} 'file' {file!r} leads outside "
                           f"the table folder {table_dir}")
    return path


def table_layout(name: str, entry, where) -> tuple[Schema, int]:
    """A manifest's table entry checked field by field: its schema and row count."""
    if not isinstance(entry, dict) or any(k not in entry for k in _TABLE_KEYS):
        raise DatasetError(f"{where}: corrupt manifest, table {name!r} lacks {list(_TABLE_KEYS)}")
    _expect(entry["schema"], dict, where, f"the schema of table {name!r}")
    try:
        schema = Schema.from_dict(entry["schema"])
    except (KeyError, TypeError, ValueError, AttributeError, SchemaError) as e:
        raise DatasetError(f"{where}: corrupt manifest, bad schema for {name!r}: {e}") from None
    if schema.fingerprint != entry["schema_fingerprint"]:
        raise DatasetError(
            f"{where}: corrupt manifest, schema of {name!r} does not match its fingerprint"
        )
    rows = entry["rows"]
    if not isinstance(rows, int) or isinstance(rows, bool) or rows < 0:
        raise DatasetError(f"{where}: corrupt manifest, bad row count {rows!r} for {name!r}")
    _expect(entry["checksum"], str, where, f"the checksum of table {name!r}")
    _expect(entry["columns"], list, where, f"'columns' of table {name!r}")
    for i, c in enumerate(entry["columns"]):
        what = f"column {i} of table {name!r}"
        _expect(c, dict, where, what)
        for key, kind in (("name", str), ("file", str), ("bytes", int), ("sha256", str)):
            if key not in c:
                raise DatasetError(f"{where}: corrupt manifest, {what} lacks {key!r}")
            _expect(c[key], kind, where, f"{what} {key!r}")
    listed = [c["name"] for c in entry["columns"]]
    if listed != list(schema.names):
        raise DatasetError(
            f"{where}: corrupt manifest, columns {listed} of {name!r} do not match its schema "
            f"{list(schema.names)}"
        )
    return schema, rows


def _open_table(name: str, table_dir: Path, entry: dict, where: Path) -> Table:
    schema, rows = table_layout(name, entry, where)
    columns = []
    for i, (fld, c) in enumerate(zip(schema.fields, entry["columns"], strict=True)):
        path = _column_path(table_dir, c["file"], where, f"column {i} of table {name!r}")
        expected = rows * fld.itemsize
        if not path.is_file():
            raise DatasetError(f"{path}: column file of {name}.{fld.name} is missing")
        actual = path.stat().st_size
        if actual != expected or c.get("bytes") != expected:
            raise DatasetError(
                f"{path}: size {actual} B does not match {rows} rows x {fld.itemsize} B = "
                f"{expected} B of {fld.dtype} ({name}.{fld.name}); the file is truncated, "
                "padded or belongs to another dataset"
            )
        if rows == 0:
            columns.append(fld.empty(0))
        else:
            columns.append(
                np.memmap(path, dtype=fld.numpy_dtype, mode="r", shape=fld.column_shape(rows))
            )
    return Table(name, table_dir, schema, rows, tuple(columns), entry)


def open_dataset(
    path: str | Path, schema: Schema | None = None, verify: bool | str = "once"
) -> Dataset:
    """Open and validate a dataset folder written by ``scabbard datagen``.

    ``schema``: the stream schema the caller expects (e.g. ``scabbard.workloads.cm.SCHEMA``);
    a mismatch raises :class:`DatasetError` listing the differences.
    ``verify``: recompute every checksum (reads every byte) - ``"once"`` (the default) the
    first time and again whenever a file changed (:meth:`Dataset.verify_once`), ``True`` at
    every open, ``False`` never (``--no-verify``).  A damaged file is
    :class:`DatasetDamaged`, naming it.
    """
    path = Path(path)
    manifest = _read_manifest(path)
    mpath = path / MANIFEST
    stream = _open_table("stream", path / "stream", manifest["stream"], mpath)
    if schema is not None and stream.schema.fingerprint != schema.fingerprint:
        raise DatasetError(_schema_mismatch(path, schema, stream.schema))
    tables = {
        name: _open_table(name, path / "tables" / name, entry, mpath)
        for name, entry in manifest["tables"].items()
    }
    ds = Dataset(path, manifest, stream, tables)
    if verify == "once":
        ds.verify_once()
    elif verify is True:
        ds.verify()
    elif verify is not False:
        raise ValueError(f"verify must be 'once', True or False, got {verify!r}")
    return ds


def _schema_mismatch(path: Path, want: Schema, got: Schema) -> str:
    want_f = [(f.name, f.dtype) for f in want.fields]
    got_f = [(f.name, f.dtype) for f in got.fields]
    diffs = []
    if want.name != got.name:
        diffs.append(f"schema name {got.name!r} (expected {want.name!r})")
    missing = [n for n in want_f if n not in got_f]
    extra = [n for n in got_f if n not in want_f]
    if missing:
        diffs.append(f"missing {missing}")
    if extra:
        diffs.append(f"unexpected {extra}")
    if not missing and not extra and want_f != got_f:
        diffs.append("fields in a different order")
    if want.row_bytes != got.row_bytes:
        diffs.append(f"row size {got.row_bytes} B (expected {want.row_bytes} B)")
    return f"{path}: dataset schema does not match {want.name!r}: " + "; ".join(diffs or ["?"])


def write_dataset(
    path: str | Path,
    schema: Schema,
    columns: tuple[np.ndarray, ...] | Batch,
    tables: dict[str, tuple[Schema, tuple[np.ndarray, ...]]] | None = None,
    workload: str = "custom",
    params: dict | None = None,
    parquet: bool = True,
) -> Dataset:
    """Write column arrays as a dataset (replay format, plus Parquet unless ``parquet=False``).

    For data that does not come from ``scabbard datagen``: e.g. synthetic columns
    for a codec experiment, or a conversion of external data.  The folder appears
    atomically, like a generated one.
    """
    from scabbard.data.parquet import write_parquet

    path = Path(path)
    if isinstance(columns, Batch):
        columns = columns.columns
    parts = {"stream": (schema, tuple(columns))}
    parts.update(tables or {})
    stage = staging_dir(path)
    try:
        entries = {}
        for tname, (tschema, tcols) in parts.items():
            tdir = stage / "stream" if tname == "stream" else stage / "tables" / tname
            writer = TableWriter(tdir, tschema)
            try:
                writer.append(tcols)
            except BaseException:
                writer.abort()
                raise
            entry = writer.close()
            if parquet:
                (tdir / "parquet").mkdir()
                write_parquet(tschema, tcols, tdir / "parquet" / "part-00000.parquet")
                entry["parquet"] = ["parquet/part-00000.parquet"]
            entries[tname] = entry
        stream = entries.pop("stream")
        manifest = build_manifest(workload, path.name, dict(params or {}), stream, entries)
        publish(stage, path, manifest)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return open_dataset(path)


def listing(root: str | Path) -> str:
    """``scabbard data list``: every dataset under ``root`` (``<workload>/<name>``) with its
    rows, MB and checksum, a damaged one's error instead; a line saying there are none."""
    root = Path(root)
    found = sorted(p.parent for p in root.glob("*/*/manifest.json"))
    if not found:
        return f"no datasets under {root}/ (make them with `scabbard datagen`)"
    lines = [f"{'dataset':<36} {'rows':>12} {'MB':>9}  checksum"]
    for path in found:
        name = str(path.relative_to(root))
        try:
            ds = open_dataset(path)
            lines.append(f"{name:<36} {ds.rows:>12,} {ds.stream.nbytes / 1e6:>9.1f}  "
                         f"{ds.checksum[:19]}")
        except DatasetError as e:
            lines.append(f"{name:<36} INVALID: {e}")
    return "\n".join(lines)
