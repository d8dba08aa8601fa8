"""BlockManager, segment format, async O_DIRECT I/O, the one I/O interface (docs/design.md)."""

from scabbard.storage.blockmanager import (
    BlockManager,
    StorageConfig,
    StorageFull,
    StorageLocked,
    TrimmedError,
)
from scabbard.storage.errors import (
    CorruptSegment,
    FormatVersionError,
    StorageError,
    UnitTooLarge,
)
from scabbard.storage.fileio import OS, Durability, FileIO, RecordingIO, write_atomic

__all__ = ["OS", "BlockManager", "CorruptSegment", "Durability", "FileIO", "FormatVersionError",
           "RecordingIO", "StorageConfig", "StorageError", "StorageFull", "StorageLocked",
           "TrimmedError", "UnitTooLarge", "write_atomic"]
