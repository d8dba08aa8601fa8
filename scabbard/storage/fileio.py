"""The one I/O interface of storage, checkpoints and sinks (docs/design.md).

Every file operation that a fault-tolerant run's recovery depends on - the
BlockManager's pool files, the checkpoint records, the sinks' output, the run's
metadata - goes through a :class:`FileIO`.  :data:`OS` performs them;
:class:`RecordingIO` performs them *and* logs each mutation (create, write,
extend, truncate, fsync/fdatasync, rename, unlink, mkdir, directory fsync), so
that :mod:`scabbard.check.crashstates` can rebuild every state a POSIX file
system may be left in by a machine crash in the middle of the run.  Reads are
not logged: they change nothing.

:class:`Durability` is the contract a run asks for:

* ``process`` - what is written survives the engine process being killed
  (``kill -9``): written data is in the kernel's page cache, nothing is flushed.
* ``machine`` - it survives power loss too: everything a checkpoint record or an
  acknowledgement depends on is flushed first (``fdatasync`` after the
  ``O_DIRECT`` writes, ``fsync`` of files and of the directories that name them).

:func:`write_atomic` is the one way metadata files (``run.json``,
``streams.json``, ``.sink.json``, checkpoint records) are written: a temporary
file, flushed, renamed over the old one, the directory flushed - so a crash
leaves the old file or the new one, never an empty or half-written one.
"""

from __future__ import annotations

import enum
import errno
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np


class Durability(enum.Enum):
    PROCESS = "process"
    MACHINE = "machine"

    @property
    def flush(self) -> bool:
        """Whether writes are flushed to the device before they are relied on."""
        return self is Durability.MACHINE

    @classmethod
    def of(cls, value: str | Durability) -> Durability:
        if isinstance(value, Durability):
            return value
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"unknown durability {value!r}; choose process or machine") from None


class FileIO:
    """The file operations of the fault-tolerance layers, performed on the real file system."""

    def note(self, what: str, value: int) -> None:
        """A fact about the run at this point of its operations (no file operation): a
        recording keeps it (:class:`RecordingIO`), e.g. how far the acknowledged input of
        a p-stream reaches, for the crash-state explorer to check against."""

    def open(self, path: str | Path, flags: int, mode: int = 0o644) -> int:
        return os.open(path, flags, mode)

    def reopen(self, fd: int, path: str | Path, flags: int) -> None:
        """Make ``fd`` refer to ``path`` opened anew with ``flags`` (e.g. without O_DIRECT)."""
        new = os.open(path, flags)
        try:
            os.dup2(new, fd)
        finally:
            os.close(new)

    def close(self, fd: int) -> None:
        os.close(fd)

    def pwritev(self, fd: int, bufs: list, pos: int) -> int:
        """Write all of ``bufs`` at ``pos``; a short write is completed (returns the bytes)."""
        total = sum(memoryview(b).nbytes for b in bufs)
        done = os.pwritev(fd, bufs, pos)
        if done < total:
            flat = np.concatenate([np.frombuffer(memoryview(b).cast("B"), np.uint8) for b in bufs])
            while done < total:
                n = os.pwrite(fd, flat[done:], pos + done)
                if n <= 0:
                    raise OSError(errno.EIO, f"write made no progress at byte {pos + done}")
                done += n
        return total

    def preadv(self, fd: int, bufs: list, pos: int) -> int:
        return os.preadv(fd, bufs, pos)

    def size(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def fdatasync(self, fd: int) -> None:
        os.fdatasync(fd)

    def fallocate(self, fd: int, offset: int, length: int) -> None:
        os.posix_fallocate(fd, offset, length)

    def ftruncate(self, fd: int, length: int) -> None:
        os.ftruncate(fd, length)

    def replace(self, src: str | Path, dst: str | Path) -> None:
        os.replace(src, dst)

    def unlink(self, path: str | Path, missing_ok: bool = False) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            if not missing_ok:
                raise

    def mkdir(self, path: str | Path) -> None:
        """Create ``path`` and its missing parents."""
        path = Path(path)
        if path.is_dir():
            return
        if not path.parent.is_dir():
            self.mkdir(path.parent)
        try:
            os.mkdir(path)
        except FileExistsError:
            if not path.is_dir():
                raise

    def fsync_dir(self, path: str | Path) -> None:
        """Make the creations, renames and removals in directory ``path`` durable."""
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


OS = FileIO()


def write_atomic(io: FileIO, path: str | Path, data: bytes, durability: Durability) -> None:
    """Replace ``path`` with ``data`` atomically: a temporary file beside it, written (and with
    ``machine`` durability flushed), renamed over ``path``, the directory flushed."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    write_new(io, tmp, data, durability)
    io.replace(tmp, path)
    if durability.flush:
        io.fsync_dir(path.parent)


def write_new(io: FileIO, path: str | Path, data: bytes, durability: Durability) -> None:
    """Write a new file (no rename): used where a temporary name is itself the protocol
    step, e.g. a checkpoint record's temporary file before its rename."""
    fd = io.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        io.pwritev(fd, [data], 0)
        if durability.flush:
            io.fsync(fd)
    finally:
        io.close(fd)


# -- recording -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Op:
    """One logged mutation.  ``path``/``dst`` are relative to the recorder's root; ``ino``
    names a file across renames (an inode); ``data`` is what a write wrote."""

    kind: str  # mkdir create write extend truncate sync rename unlink syncdir
    path: str = ""
    ino: int = -1
    pos: int = 0
    data: bytes = b""
    dst: str = ""
    size: int = 0

    @property
    def is_meta(self) -> bool:
        return self.kind in ("mkdir", "create", "rename", "unlink")

    def describe(self) -> str:
        if self.kind == "write":
            return f"write     #{self.ino} {self.path} [{self.pos}, {self.pos + len(self.data)})"
        if self.kind in ("extend", "truncate"):
            return f"{self.kind:9s} #{self.ino} {self.path} to {self.size}"
        if self.kind == "sync":
            return f"fsync     #{self.ino} {self.path}"
        if self.kind == "rename":
            return f"rename    {self.path} -> {self.dst}"
        if self.kind == "create":
            return f"create    #{self.ino} {self.path}"
        return f"{self.kind:9s} {self.path}"


class RecordingIO(FileIO):
    """Performs every operation and logs the mutations under ``root`` (see :class:`Op`)."""

    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        self.ops: list[Op] = []
        self._lock = threading.Lock()
        self._ino: dict[str, int] = {}  # relative path -> inode
        self._fds: dict[int, tuple[int, str]] = {}  # fd -> (inode, path at open)
        self._next = 0

    def _rel(self, path: str | Path) -> str | None:
        p = Path(os.path.abspath(path))
        try:
            return str(p.relative_to(self.root))
        except ValueError:
            return None

    def _log(self, op: Op) -> None:
        self.ops.append(op)

    def open(self, path, flags, mode=0o644):
        with self._lock:
            rel = self._rel(path)
            existed = os.path.exists(path)
            fd = super().open(path, flags, mode)
            if rel is None:
                return fd
            if not existed or rel not in self._ino:
                self._next += 1
                self._ino[rel] = self._next
                self._log(Op("create", rel, self._next))
                if existed:  # a file from before the recording: its bytes are the base
                    with open(path, "rb") as f:
                        self._log(Op("write", rel, self._next, 0, f.read()))
                    self._log(Op("sync", rel, self._next))
            ino = self._ino[rel]
            self._fds[fd] = (ino, rel)
            if flags & os.O_TRUNC:
                self._log(Op("truncate", rel, ino, size=0))
            return fd

    def close(self, fd):
        with self._lock:
            self._fds.pop(fd, None)
            super().close(fd)

    def pwritev(self, fd, bufs, pos):
        with self._lock:
            n = super().pwritev(fd, bufs, pos)
            if fd in self._fds:
                ino, rel = self._fds[fd]
                data = b"".join(bytes(memoryview(b).cast("B")) for b in bufs)
                self._log(Op("write", rel, ino, pos, data))
            return n

    def fallocate(self, fd, offset, length):
        with self._lock:
            super().fallocate(fd, offset, length)
            if fd in self._fds:
                ino, rel = self._fds[fd]
                self._log(Op("extend", rel, ino, size=offset + length))

    def ftruncate(self, fd, length):
        with self._lock:
            super().ftruncate(fd, length)
            if fd in self._fds:
                ino, rel = self._fds[fd]
                self._log(Op("truncate", rel, ino, size=length))

    def fsync(self, fd):
        with self._lock:
            super().fsync(fd)
            if fd in self._fds:
                ino, rel = self._fds[fd]
                self._log(Op("sync", rel, ino))

    fdatasync = fsync  # the model does not tell data from metadata of a file

    def replace(self, src, dst):
        with self._lock:
            super().replace(src, dst)
            a, b = self._rel(src), self._rel(dst)
            if a is not None and b is not None:
                if a in self._ino:
                    self._ino[b] = self._ino.pop(a)
                self._log(Op("rename", a, dst=b))

    def unlink(self, path, missing_ok=False):
        with self._lock:
            existed = os.path.exists(path)
            super().unlink(path, missing_ok)
            rel = self._rel(path)
            if rel is not None and existed:
                self._ino.pop(rel, None)
                self._log(Op("unlink", rel))

    def mkdir(self, path):
        path = Path(path)
        if path.is_dir():
            return
        if not path.parent.is_dir():
            self.mkdir(path.parent)
        with self._lock:
            try:
                os.mkdir(path)
            except FileExistsError:
                return
            rel = self._rel(path)
            if rel is not None:
                self._log(Op("mkdir", rel))

    def fsync_dir(self, path):
        with self._lock:
            super().fsync_dir(path)
            rel = self._rel(path)
            if rel is not None:
                self._log(Op("syncdir", rel))

    def note(self, what: str, value: int) -> None:
        with self._lock:
            self._log(Op("note", what, pos=value))

    def record_existing(self) -> int:
        """Log what ``root`` holds now as a durable base - every folder made, every file
        created and written whole and flushed, every folder flushed - so that a recording of
        work on an existing folder (a recovery) can be replayed from nothing; returns the
        number of base operations (crash points start after them)."""
        with self._lock:
            for d in sorted((p for p in self.root.rglob("*") if p.is_dir()),
                            key=lambda p: (len(p.parts), str(p))):
                self._log(Op("mkdir", self._rel(d)))
            for f in sorted(p for p in self.root.rglob("*") if p.is_file()):
                rel = self._rel(f)
                self._next += 1
                self._ino[rel] = self._next
                self._log(Op("create", rel, self._next))
                self._log(Op("write", rel, self._next, 0, f.read_bytes()))
                self._log(Op("sync", rel, self._next))
            for d in [self.root, *sorted(p for p in self.root.rglob("*") if p.is_dir())]:
                self._log(Op("syncdir", self._rel(d)))
            return len(self.ops)
