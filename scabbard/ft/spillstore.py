"""The spill store on disk: a window operator's spilled state as state p-units (issue 19).

The engine core holds its window state within ``EngineConfig.state_memory`` and writes what
does not fit to a :class:`~scabbard.engine.ports.SpillStore` (:mod:`scabbard.engine.spill`);
this is the store that keeps it on disk: a BlockManager p-stream of pane partials - the rows
a checkpoint's state holds - in a scratch folder of its own, removed at :meth:`close`.
:func:`disk_spill` is the factory ``EngineConfig(spill=...)`` takes.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np

from scabbard.batch import Batch
from scabbard.engine.tasks import Edges, columns_edges, concat_edges, edges_columns, partials_schema
from scabbard.storage import BlockManager, StorageConfig

SPILL_FILE = 16 << 20  # the spill stream's pool files
SPILL_PENDING = 8 << 20  # the spill stream's writes in flight (and buffers kept for reuse)


class DiskSpill:
    """A branch's spill stream: state p-units of pane partials, in a scratch folder of its own
    (removed at :meth:`close`)."""

    def __init__(self, branch, parent: str | Path | None = None):
        self.branch = branch
        self.folder = Path(tempfile.mkdtemp(prefix="scabbard-spill-", dir=parent))
        # writes wait (back-pressure) beyond a few MiB in flight, and as few buffers are kept
        # for reuse: the spill's own memory stays a small fixed overhead beside the budget
        self.bm = BlockManager(self.folder, StorageConfig(
            file_bytes=SPILL_FILE, pool_files=1, bulk_bytes=SPILL_PENDING // 2,
            max_pending_bytes=SPILL_PENDING))
        self.schema = partials_schema(branch, f"spill-{branch.id}")
        self.sid = self.bm.stream(self.schema.name, self.schema)
        self.next = 0
        self.live: dict[int, int] = {}  # first offset -> end, of every unit not yet read back
        self.bytes_written = self.bytes_read = 0

    def write(self, e: Edges) -> list[tuple[int, int]]:
        """Append ``e`` (pane-sorted) as units; their offset ranges."""
        cols, n = edges_columns(e), len(e.pane)
        per = max(1, (SPILL_FILE // 4) // self.schema.row_bytes)  # a segment fits a file
        ranges = []
        for lo in range(0, n, per):
            batch = Batch(self.schema, tuple(np.ascontiguousarray(c[lo:lo + per]) for c in cols),
                          self.next)
            self.bm.append(self.sid, batch)
            ranges.append((self.next, batch.end))
            self.live[self.next] = batch.end
            self.next = batch.end
            self.bytes_written += batch.column_bytes
        return ranges

    def read(self, ranges: list[tuple[int, int]]) -> Edges:
        """The units ``ranges`` back (verified), as one :class:`Edges`; they are released."""
        if not ranges:
            b = self.branch
            return concat_edges([], b.key_width, len(b.iops), len(b.fops))
        self.bm.flush(self.sid)  # every unit acknowledged before it is read
        batches = [x for first, end in ranges for x in self.bm.load_bulk(self.sid, first, end)]
        cols = [np.concatenate([x.columns[j] for x in batches])
                for j in range(len(self.schema.fields))]
        self.release(ranges)
        self.bytes_read += sum(x.column_bytes for x in batches)
        return columns_edges(self.branch, cols)

    def release(self, ranges: list[tuple[int, int]]) -> None:
        """The units ``ranges`` are not needed any more (whole files below the oldest unit
        still needed return to the pool)."""
        for first, _ in ranges:
            del self.live[first]
        self.bm.trim(self.sid, min(self.live, default=self.next))

    def close(self) -> None:
        try:
            self.bm.close()
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


def disk_spill(parent: str | Path | None = None):
    """``EngineConfig(spill=...)``: each window operator's spilled state in a scratch folder
    under ``parent`` (default: the system's temporary folder)."""
    return lambda branch: DiskSpill(branch, parent)
