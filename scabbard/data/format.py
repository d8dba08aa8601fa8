"""The replay format: one contiguous little-endian file per column, plus a JSON manifest.

Layout of a dataset folder::

    <dataset>/manifest.json                  written last; its presence means "complete"
    <dataset>/stream/columns/<field>.bin     the stream, one file per field
    <dataset>/stream/parquet/part-*.parquet  the same rows as Spark wrote them
    <dataset>/tables/<name>/...              side tables (e.g. YSB's ad -> campaign relation)

A column file holds ``rows * itemsize`` bytes and nothing else, so numpy can
memory-map it (``np.memmap(path, dtype, mode="r", shape=...)``) and the engine
can replay it without parsing.  Each column's SHA-256 is in the manifest; the
dataset checksum is the SHA-256 over all column hashes in order.

Writers build a dataset in a hidden staging folder next to its final place and
rename it into place only when the manifest is written (:func:`publish`), so an
interrupted run never leaves a folder that looks complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

import numpy as np

from scabbard.errors import EXIT_FAILURE, UserError
from scabbard.schema import Schema

FORMAT = "scabbard-replay"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"


class DatasetError(UserError):
    """A dataset folder is missing, incomplete, corrupt or does not match what was asked for
    (bad input: regenerate it or name another; exit 2)."""


class DatasetDamaged(DatasetError):
    """A dataset's files no longer match their checksums (``--verify``): what was found is a
    failure of the data, not a mistaken command (exit 1)."""

    exit_code = EXIT_FAILURE


def column_file(table_dir: Path, name: str) -> Path:
    return table_dir / "columns" / f"{name}.bin"


def combine_checksums(hashes: list[str]) -> str:
    h = hashlib.sha256()
    for x in hashes:
        h.update(x.encode())
        h.update(b"\n")
    return "sha256:" + h.hexdigest()


class TableWriter:
    """Streams column arrays of one table into its column files, hashing as it goes."""

    def __init__(self, table_dir: Path, schema: Schema):
        self.table_dir = Path(table_dir)
        self.schema = schema
        (self.table_dir / "columns").mkdir(parents=True, exist_ok=True)
        self._files = [open(column_file(self.table_dir, f.name), "wb")  # noqa: SIM115 (closed in close/abort)
                       for f in schema.fields]
        self._hashes = [hashlib.sha256() for _ in schema.fields]
        self.rows = 0
        self.first_time: int | None = None
        self.last_time: int | None = None

    def append(self, columns: tuple[np.ndarray, ...]) -> None:
        n = self.schema.check_columns(columns)
        if n == 0:
            return
        if self.schema.stream:
            ts = columns[0]
            if (self.last_time is not None and ts[0] < self.last_time) or np.any(ts[1:] < ts[:-1]):
                raise DatasetError(
                    f"{self.schema.name}: event timestamps decrease near row {self.rows}; "
                    "a stream must arrive in event-time order"
                )
            if self.first_time is None:
                self.first_time = int(ts[0])
            self.last_time = int(ts[-1])
        for f, h, col in zip(self._files, self._hashes, columns, strict=True):
            buf = memoryview(np.ascontiguousarray(col)).cast("B")
            f.write(buf)
            h.update(buf)
        self.rows += n

    def close(self) -> dict:
        """Flush and fsync the column files; return this table's manifest entry."""
        for f in self._files:
            f.flush()
            os.fsync(f.fileno())
            f.close()
        return table_entry(self.schema, self.rows, [h.hexdigest() for h in self._hashes],
                           self.first_time, self.last_time)

    def abort(self) -> None:
        for f in self._files:
            f.close()


def build_manifest(
    workload: str, name: str, params: dict, stream: dict, tables: dict[str, dict], **extra
) -> dict:
    """The manifest of a dataset from its tables' entries (see :meth:`TableWriter.close`)."""
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "workload": workload,
        "name": name,
        **{k: v for k, v in extra.items() if k != "run"},
        "params": params,
        "rows": stream["rows"],
        "checksum": combine_checksums([stream["checksum"]] + [t["checksum"] for t in tables.values()]),
        "stream": stream,
        "tables": tables,
        **({"run": extra["run"]} if "run" in extra else {}),
    }


def table_entry(
    schema: Schema, rows: int, sha256: list[str], first_time: int | None, last_time: int | None
) -> dict:
    """A table's manifest entry: schema, rows, one record per column file, checksum."""
    columns = [
        {
            "name": f.name,
            "dtype": f.dtype,
            "file": str(column_file(Path("."), f.name)),
            "bytes": rows * f.itemsize,
            "sha256": h,
        }
        for f, h in zip(schema.fields, sha256, strict=True)
    ]
    entry = {
        "schema": schema.to_dict(),
        "schema_fingerprint": schema.fingerprint,
        "rows": rows,
        "columns": columns,
        "checksum": combine_checksums(sha256),
    }
    if schema.stream:
        entry["event_time"] = {"first": first_time, "last": last_time, "unit": "ms"}
    return entry


def hash_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(16 << 20):
            h.update(chunk)
    return h.hexdigest()


def hash_columns(table_dir: Path, schema: Schema, threads: int = 4) -> list[str]:
    """SHA-256 of every column file of a table (in parallel; hashlib releases the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    paths = [column_file(Path(table_dir), f.name) for f in schema.fields]
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(hash_file, paths))


def staging_dir(final: Path) -> Path:
    """A fresh hidden folder beside ``final`` to build a dataset in."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    stage = final.parent / f".{final.name}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    stage.mkdir()
    return stage


def write_json_atomic(path: Path, obj: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=False)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def fsync_dir(path: Path) -> None:
    """Make a rename or new file in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(stage: Path, final: Path, manifest: dict) -> None:
    """Write the manifest into ``stage`` and move it to ``final`` (replacing an old one).

    Step 1: the manifest goes into the staging folder (fsync'd).
    Step 2: an existing ``final`` is first renamed aside, so a crash leaves
    either the old complete dataset, the new one, or none - never a mix.
    Step 3: the staging folder is renamed to ``final``; the old one is removed.
    """
    stage, final = Path(stage), Path(final)
    # Step 1
    write_json_atomic(stage / MANIFEST, manifest)
    fsync_dir(stage)
    # Step 2
    old = None
    if final.exists():
        old = final.parent / f".{final.name}.old-{uuid.uuid4().hex[:8]}"
        os.rename(final, old)
    # Step 3
    os.rename(stage, final)
    fsync_dir(final.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_stages(parent: Path) -> list[Path]:
    """Delete staging folders whose writer process is gone; return what was removed."""
    removed = []
    if not Path(parent).is_dir():
        return removed
    for p in Path(parent).iterdir():
        if not (p.is_dir() and p.name.startswith(".")):
            continue
        if ".old-" in p.name:
            stale = True
        elif ".partial-" in p.name:
            pid = p.name.rsplit(".partial-", 1)[1].split("-", 1)[0]
            stale = not (pid.isdigit() and _pid_alive(int(pid)))
        else:
            continue
        if stale:
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed
