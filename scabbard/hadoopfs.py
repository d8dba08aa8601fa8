"""Locations every machine of a cluster reaches: URIs, and the driver's view of them.

On a cluster, what the driver and the executors share - a dataset, a query's work folder,
its checkpoint location, its results - lives at a URI each of them can reach: a folder
mounted at the same path everywhere (``file:///shared/data``), HDFS (``hdfs://nn:8020/x``),
an object store (``s3a://bucket/x``).  The executors read and write the data; the driver
only touches metadata there (listings, renames, modification times, a manifest), through
:class:`SharedFS`: the Hadoop ``FileSystem`` client and configuration Spark's own jobs use,
so every scheme Spark supports works the same way.

A plain path (``data``, ``/tmp/x``) is a folder on the driver's machine: ``file://`` of its
absolute path.  With a cluster it must be a folder every machine mounts at that path.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from scabbard.errors import Failure

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


class SharedFSError(Failure, OSError):
    """A shared location cannot be read or written (one line: the location and the cause)."""


def is_uri(location: str | Path) -> bool:
    """Whether ``location`` names a scheme (``file:``, ``hdfs:``, ``s3a:``) rather than a path."""
    return isinstance(location, str) and bool(_SCHEME.match(location)) and not (
        len(location) > 1 and location[1] == ":")  # not a Windows drive letter


def to_uri(location: str | Path) -> str:
    """``location`` as a URI without a trailing slash: a plain path becomes ``file://``."""
    if is_uri(location):
        uri = str(location)
        return uri if uri.endswith(":///") else uri.rstrip("/")
    return Path(location).expanduser().absolute().as_uri()


def join(uri: str, *parts: str) -> str:
    """``uri`` with ``parts`` appended as path segments."""
    return "/".join([to_uri(uri), *(p.strip("/") for p in parts)])


def local_path(location: str | Path) -> Path | None:
    """The driver-local path of a plain path or ``file:`` URI; None for other schemes."""
    if not is_uri(location):
        return Path(location).expanduser().absolute()
    parsed = urlparse(str(location))
    if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
        return None
    return Path(unquote(parsed.path))


def root_cause(error: BaseException) -> str:
    """One line naming the innermost Java exception behind a Spark/py4j error (or ``error``)."""
    java = getattr(error, "java_exception", None) or getattr(error, "_origin", None)
    if java is None:
        return " ".join(str(error).split())[:500]
    try:
        while java.getCause() is not None:
            java = java.getCause()
        text = java.toString()
    except Exception:  # noqa: BLE001 - the py4j connection itself may be gone
        text = str(error)
    return " ".join(str(text).split())[:500]


@dataclass(frozen=True)
class Entry:
    """One listing entry."""

    uri: str
    name: str
    is_dir: bool
    size: int
    mtime_ms: int


class SharedFS:
    """Metadata operations on shared URIs from the driver, through Spark's Hadoop client."""

    def __init__(self, spark):
        self._jvm = spark._jvm
        self._conf = spark._jsc.hadoopConfiguration()

    def _fs(self, uri: str):
        path = self._jvm.org.apache.hadoop.fs.Path(to_uri(uri))
        fs = path.getFileSystem(self._conf)
        if self._jvm.org.apache.hadoop.fs.ChecksumFileSystem._java_lang_class.isInstance(fs):
            # a mounted folder: its files as they are, no hidden .crc files made or moved
            fs = fs.getRawFileSystem()
        return fs, path

    def _call(self, what: str, uri: str, op):
        try:
            fs, path = self._fs(uri)
            return op(fs, path)
        except SharedFSError:
            raise
        except Exception as e:  # noqa: BLE001 - py4j errors carry the Java cause
            raise SharedFSError(f"cannot {what} {uri}: {root_cause(e)}") from None

    def exists(self, uri: str) -> bool:
        return bool(self._call("look up", uri, lambda fs, p: fs.exists(p)))

    def is_dir(self, uri: str) -> bool:
        return bool(self._call("look up", uri, lambda fs, p: fs.exists(p) and fs.getFileStatus(p).isDirectory()))

    def mkdirs(self, uri: str) -> None:
        if not self._call("create folder", uri, lambda fs, p: fs.mkdirs(p)):
            raise SharedFSError(f"cannot create folder {uri}")

    def list(self, uri: str) -> list[Entry]:
        """The entries of folder ``uri``, by name."""
        def ls(fs, p):
            out = []
            for s in fs.listStatus(p):
                path = s.getPath()
                out.append(Entry(path.toString(), path.getName(), bool(s.isDirectory()),
                                 int(s.getLen()), int(s.getModificationTime())))
            return sorted(out, key=lambda e: e.name)

        return self._call("list", uri, ls)

    def rename(self, source: str, target: str) -> None:
        def mv(fs, p):
            return fs.rename(p, self._jvm.org.apache.hadoop.fs.Path(to_uri(target)))

        if not self._call("rename", source, mv):
            raise SharedFSError(f"cannot rename {source} to {target}")

    def delete(self, uri: str, recursive: bool = True) -> None:
        self._call("delete", uri, lambda fs, p: fs.delete(p, recursive))

    def read_bytes(self, uri: str) -> bytes:
        def read(fs, p):
            stream = fs.open(p)
            try:
                data = self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream)
            finally:
                stream.close()
            return bytes(data)

        return self._call("read", uri, read)

    def read_text(self, uri: str) -> str:
        return self.read_bytes(uri).decode()

    def write_bytes(self, uri: str, data: bytes) -> None:
        """Create (or replace) ``uri`` with ``data``; durable once this returns (hsync)."""
        def write(fs, p):
            stream = fs.create(p, True)
            try:
                stream.write(bytearray(data))
                stream.hsync()
            finally:
                stream.close()

        self._call("write", uri, write)

    def write_text(self, uri: str, text: str) -> None:
        self.write_bytes(uri, text.encode())

    def set_mtime(self, uri: str, mtime_ms: int) -> None:
        self._call("set the time of", uri, lambda fs, p: fs.setTimes(p, int(mtime_ms), -1))


def check_executors_can_write(spark, uri: str, flag: str) -> None:
    """Raise :class:`SharedFSError` (naming ``flag``) unless a Spark job can write into
    ``uri`` - the way the executors write data there (Hadoop's output committer: the driver
    sets the job up, each task writes its file, the driver commits) - then remove the probe."""
    import uuid

    probe = join(uri, f".scabbard-write-test-{uuid.uuid4().hex[:8]}")
    tasks = max(2, spark.sparkContext.defaultParallelism)
    try:
        (spark.range(0, tasks, 1, tasks).selectExpr("cast(id as string) as value")
         .write.mode("overwrite").text(probe))
    except Exception as e:  # noqa: BLE001 - a Java error; its cause is the message
        raise SharedFSError(f"{flag} {uri}: the Spark job's executors cannot write there "
                            f"({root_cause(e)})") from None
    finally:
        with contextlib.suppress(SharedFSError):
            SharedFS(spark).delete(probe)
