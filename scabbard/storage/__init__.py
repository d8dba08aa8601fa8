"""BlockManager, segment format, async O_DIRECT I/O (DESIGN.md §7).

The CheckpointController arrives with the checkpoint issue.
"""

from scabbard.storage.blockmanager import (
    BlockManager,
    StorageConfig,
    StorageFull,
    StorageLocked,
    TrimmedError,
)
from scabbard.storage.segment import CorruptSegment, StorageError

__all__ = ["BlockManager", "CorruptSegment", "StorageConfig", "StorageError", "StorageFull",
           "StorageLocked", "TrimmedError"]
