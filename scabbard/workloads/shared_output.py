"""Generation onto a URI a cluster shares: :func:`generate` when the output is a URI or the
master is a cluster (docs/design.md).

The dataset is the one a local run writes - the same Parquet rows, the same column files,
the same manifest and checksum - but the executors write it and the driver never touches a
row.  The steps mirror the local ones:

1. the executors must be able to write ``<out>/<workload>`` (a Spark job tries), and an
   identical dataset already there is kept;
2. the Spark job(s) write Parquet into a hidden staging folder beside the final one;
3. the driver renames the part files by partition (``part-00000.parquet``...), removes the
   committer's marker files and gives the part files modification times in partition
   order, so that a file stream reads them in event-time order;
4. the replay columns are a Spark job too, one task per column
   (:mod:`scabbard.data.columns_job`);
5. an existing dataset is renamed aside, the staging folder renamed into place, the
   manifest - what marks a dataset complete - written into it, the old one removed.  The
   manifest comes last because a rename is atomic on HDFS and a mounted folder but a copy
   on an object store: a reader may see a half-copied folder there, never with a manifest.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from scabbard.data import open_dataset
from scabbard.data.columns_job import write_columns
from scabbard.data.format import MANIFEST, DatasetError, build_manifest
from scabbard.data.parquet import spark_parquet_writer
from scabbard.data.shared import SharedDataset, open_shared_dataset
from scabbard.hadoopfs import SharedFS, join, local_path, to_uri


def existing_dataset(fs: SharedFS, final: str, spec, params: dict,
                     fingerprint: str) -> tuple[str, SharedDataset | None]:
    """What is at ``final``: ("none"|"same"|"stale"|"different", dataset), as the local
    generator decides it (``spec`` a WorkloadSpec, ``params`` its parameters as a dict)."""
    if not fs.exists(final):
        return "none", None
    try:
        ds = open_shared_dataset(fs, final, spec.schema)
    except DatasetError:
        return "stale", None
    if ds.manifest.get("workload") != spec.name or ds.params != params:
        return "different", ds
    if (ds.manifest.get("generator_version") == spec.version
            and ds.manifest.get("generator_code") == fingerprint):
        return "same", ds
    return "stale", ds


def tidy_parquet(fs: SharedFS, folder: str, table: str) -> list[str]:
    """Step 3: part files named by partition, in modification-time order; nothing else."""
    def index(name: str) -> int:
        return int(name.split("-")[1].split(".")[0])

    parts = sorted((e for e in fs.list(folder) if e.name.startswith("part-")),
                   key=lambda e: index(e.name))
    if not parts:
        raise DatasetError(f"{folder}: Spark wrote no Parquet part files for {table!r}")
    files = []
    for e in parts:
        target = join(folder, f"part-{index(e.name):05d}.parquet")
        if e.name != target.rsplit("/", 1)[1]:
            fs.rename(e.uri, target)
        files.append(target)
    for e in fs.list(folder):  # _SUCCESS, and the .crc files of Hadoop's local file system
        if e.name.startswith((".", "_")):
            fs.delete(e.uri)
    start = int(time.time() * 1000) - 1000 * len(files)
    for k, f in enumerate(files):
        fs.set_mtime(f, start + 1000 * k)
    return files


@dataclass(frozen=True)
class Origin:
    """What a dataset's manifest says made it: the generator's ``params``, its code's
    ``fingerprint``, and the ``run`` (master, partitions, Parquet codec)."""

    params: dict
    fingerprint: str
    run: dict


def generate_shared(spec, frames: Mapping, spark, final: str, origin: Origin,
                    log: Callable[[str], None]):
    """Write the dataset of ``frames`` (the Spark DataFrames ``spec.build`` returned) to the
    URI ``final`` (steps 2-5 of the module), Parquet compressed with
    ``origin.run["parquet_codec"]``; ``origin`` goes into the manifest.

    Returns the local :class:`~scabbard.data.Dataset` for a ``file:`` URI, else a
    :class:`~scabbard.data.shared.SharedDataset`.
    """
    fs = SharedFS(spark)
    parquet_codec = origin.run["parquet_codec"]
    parent, name = final.rsplit("/", 1)
    for e in fs.list(parent):  # what an interrupted publish left aside
        if e.name.startswith(f".{name}.old-"):
            fs.delete(e.uri)
    stage = join(parent, f".{name}.partial-{socket.gethostname()}-{os.getpid()}-"
                         f"{uuid.uuid4().hex[:8]}")
    try:
        t0 = time.perf_counter()
        tables = {}
        for tname, df in frames.items():
            schema = spec.schema if tname == "stream" else spec.tables[tname]
            tdir = join(stage, "stream") if tname == "stream" else join(stage, "tables", tname)
            if df.columns != list(schema.names):
                raise RuntimeError(f"{spec.name}:{tname}: build produced columns {df.columns}, "
                                   f"expected {list(schema.names)}")
            spark_parquet_writer(df, parquet_codec).parquet(join(tdir, "parquet"))  # Step 2
            tables[tname] = (tdir, schema, tuple(tidy_parquet(fs, join(tdir, "parquet"), tname)))
        entries = write_columns(spark, tables)  # Step 4
        for tname, (tdir, _, files) in tables.items():
            entries[tname]["parquet"] = [f[len(tdir) + 1:] for f in files]
        t_total = time.perf_counter() - t0
        manifest = build_manifest(
            spec.name, name, origin.params, entries.pop("stream"), entries, title=spec.title,
            generator_version=spec.version, generator_code=origin.fingerprint,
            run={"created": datetime.now(UTC).isoformat(timespec="seconds"), **origin.run,
                 "spark_version": spark.version, "seconds_total": round(t_total, 3)})
        # Step 5
        old = None
        if fs.exists(final):
            old = join(parent, f".{name}.old-{uuid.uuid4().hex[:8]}")
            fs.rename(final, old)
        fs.rename(stage, final)
        fs.write_text(join(final, MANIFEST), json.dumps(manifest, indent=2) + "\n")
        if old is not None:
            fs.delete(old)
    except BaseException:
        with contextlib.suppress(Exception):  # the original error is the one to report
            fs.delete(stage)
            if not fs.exists(join(final, MANIFEST)):
                fs.delete(final)  # renamed into place, but never completed
        raise
    rows = manifest["rows"]
    log(f"{spec.name}: {rows:,} rows in {t_total:.1f} s ({rows / t_total / 1e6:.2f} M tuples/s) "
        f"-> {final}")
    return opened(fs, final, spec.schema)


def opened(fs: SharedFS, uri: str, schema):
    """The dataset at ``uri``: a local Dataset for a ``file:`` URI, else a SharedDataset."""
    path = local_path(uri)
    if path is not None:
        return open_dataset(path, schema=schema)
    return open_shared_dataset(fs, to_uri(uri), schema)
