"""The p-unit: an immutable batch of tuples (or a part of operator state) with its lineage.

Paper Table 1 and §3.1.  A p-unit knows where it sits in its stream (offset,
count), the event-time range it covers, its **vector clock** - for each ingress
stream, the offset up to which it reflects that stream's input - and its
**dependencies** (the ranges of upstream p-units it was computed from), which
GC and recovery follow.  ``compress`` attaches the p-unit's columns as a
:class:`~scabbard.compression.policy.Compression` encodes them (``stored``: per column
``(codec, payload)``), which is what a persisting p-stream writes; the decoded batch
stays in the p-unit for the operators downstream, so ``decompress`` is only needed for
p-units read back from storage, and those come decoded.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

import numpy as np

from scabbard.batch import Batch


class Kind(Enum):
    DATA = 0
    STATE = 1


@dataclass(frozen=True)
class Dependency:
    stream: str
    first: int
    end: int


@dataclass(frozen=True)
class PUnit:
    stream: str
    batch_id: int
    batch: Batch
    vector_clock: tuple[int, ...] = ()
    dependencies: tuple[Dependency, ...] = ()
    persistent: bool = False
    kind: Kind = Kind.DATA
    stored: tuple | None = None  # the columns compressed for persistence, if compressed
    # the segment made already but for its header (storage.segment.Payload), if it was:
    # a worker made it, the p-stream's writer only seals and writes it
    encoded: object = None

    @property
    def offset(self) -> int:
        return self.batch.offset

    @property
    def end(self) -> int:
        return self.batch.end

    def __len__(self) -> int:
        return len(self.batch)

    @property
    def time_range(self) -> tuple[int, int]:
        ts = self.batch.timestamps
        return (int(ts[0]), int(ts[-1])) if len(ts) else (0, 0)

    def meta_words(self) -> np.ndarray:
        """Vector clock as uint64 words, as segments store it."""
        return np.asarray(self.vector_clock, dtype=np.uint64)

    def with_persistence(self, persistent: bool) -> PUnit:
        return self if self.persistent == persistent else replace(self, persistent=persistent)

    def compress(self, compression) -> PUnit:
        """This p-unit with its columns compressed by ``compression`` (batch -> stored)."""
        return replace(self, stored=tuple(compression(self.batch)))

    def decompress(self) -> PUnit:
        return self if self.stored is None else replace(self, stored=None)
