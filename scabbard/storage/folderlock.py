"""The one lock of a folder an engine writes (a storage folder, an exactly-once output): an
exclusive ``flock`` on a file in it holding the owner's pid, so that a second engine is
refused in one line, and a killed one's lock goes with its process."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from scabbard.storage.errors import StorageLocked


def lock(file: str | Path, what: str) -> int:
    """Take ``file``'s lock for this process (its descriptor, for :func:`unlock`); raises
    :class:`StorageLocked` naming ``what`` and the holder's pid when another holds it."""
    fd = os.open(file, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise StorageLocked(f"{what} is in use by another engine (pid {holder}); stop it or "
                            f"choose another folder") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def unlock(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
