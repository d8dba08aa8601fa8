"""BlockManager, segment format, async O_DIRECT I/O, CheckpointController. DESIGN.md §7."""
