"""What the storage layer cannot do, each with what to do about it."""

from __future__ import annotations

from scabbard.errors import Failure


class StorageError(Failure, RuntimeError):
    """Anything the storage layer cannot do, with what to do about it."""


class FormatVersionError(StorageError):
    """Data written by another version of the on-disk format: refused, never taken for damage
    (which would hide it) nor for free space (which would overwrite it)."""


class CorruptSegment(StorageError):
    """A segment that is torn, truncated, zero-filled or damaged."""

    def __init__(self, where: str, position: int, problem: str):
        self.where, self.position, self.problem = where, position, problem
        super().__init__(f"corrupt segment in {where} at byte {position}: {problem}")


class StorageFull(StorageError):
    """No space for another pool file (disk full or the configured cap reached)."""


class StorageLocked(StorageError):
    """Another engine owns the storage folder."""


class TrimmedError(StorageError):
    """The requested offset was released (garbage-collected)."""




class UnitTooLarge(StorageError):
    """A p-unit that must stay whole (a window's results) does not fit a pool file;
    ``needed``: the pool-file size that would hold it."""

    def __init__(self, message: str, needed: int):
        super().__init__(message)
        self.needed = needed
