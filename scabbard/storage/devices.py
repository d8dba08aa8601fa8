"""Emulated devices (Fig. 11) as a wrapper of the file I/O: the BlockManager is unchanged.

* a **slower disk** - every write returns when a device of ``write_bytes_per_s`` would have
  finished it (writes of all the folder's streams queue on the one device);
* **no disk** (``discard``) - writes and flushes do nothing, so segments are built (encoded,
  checksummed) and acknowledged but nothing can be read back.
"""

from __future__ import annotations

import threading
import time

from scabbard.storage.fileio import FileIO


class EmulatedDevice(FileIO):
    """``inner``'s file operations, as if on a slower device or on none at all."""

    def __init__(self, inner: FileIO, write_bytes_per_s: float | None = None,
                 discard: bool = False):
        self.inner, self.rate, self.discard = inner, write_bytes_per_s, discard
        self._lock = threading.Lock()
        self._free_at = 0.0  # when the emulated device finishes what it was given

    def note(self, what: str, value: int) -> None:
        self.inner.note(what, value)

    def pwritev(self, fd, bufs, pos):
        n = sum(memoryview(b).nbytes for b in bufs)
        if not self.discard:
            self.inner.pwritev(fd, bufs, pos)
        if self.rate:
            with self._lock:
                now = time.monotonic()
                self._free_at = max(now, self._free_at) + n / self.rate
                wait = self._free_at - now
            if wait > 0:
                time.sleep(wait)
        return n

    def fdatasync(self, fd):
        if not self.discard:
            self.inner.fdatasync(fd)

    def fsync(self, fd):
        if not self.discard:
            self.inner.fsync(fd)

    # everything else is the inner device's
    def open(self, path, flags, mode=0o644):
        return self.inner.open(path, flags, mode)

    def reopen(self, fd, path, flags):
        self.inner.reopen(fd, path, flags)

    def close(self, fd):
        self.inner.close(fd)

    def preadv(self, fd, bufs, pos):
        return self.inner.preadv(fd, bufs, pos)

    def size(self, fd):
        return self.inner.size(fd)

    def fallocate(self, fd, offset, length):
        self.inner.fallocate(fd, offset, length)

    def ftruncate(self, fd, length):
        self.inner.ftruncate(fd, length)

    def replace(self, src, dst):
        self.inner.replace(src, dst)

    def unlink(self, path, missing_ok=False):
        self.inner.unlink(path, missing_ok)

    def mkdir(self, path):
        self.inner.mkdir(path)

    def fsync_dir(self, path):
        self.inner.fsync_dir(path)
