"""Markers: control tuples that flow with the data (paper §3.2, Alg. 1).

* ``RETAIN`` - injected into an ingress p-stream; the p-unit written after it is
  persisted before it becomes readable downstream (Alg. 1 line 16).
* ``RELEASE`` - sent upstream on a feedback channel once the results that
  depend on a stream's data up to ``offset`` are committed; the p-stream trims
  everything below it, in bulk (optimistic, semantically partitioned GC, §3.3).
* ``CHECKPOINT`` - Chandy-Lamport markers (Alg. 1): the operator that has seen one on
  every input snapshots its state (:mod:`scabbard.pog.checkpoint`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class MarkerKind(Enum):
    CHECKPOINT = "checkpoint"
    RETAIN = "retain"
    RELEASE = "release"


@dataclass(frozen=True)
class Marker:
    kind: MarkerKind
    stream: str
    offset: int = 0  # RELEASE: trim below this offset
    reader: str = ""  # RELEASE: on whose behalf
    vector_clock: tuple[int, ...] = ()
    checkpoint_id: int = 0  # CHECKPOINT: which checkpoint
