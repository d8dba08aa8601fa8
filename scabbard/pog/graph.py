"""The persistent operator graph (POG): its p-streams and the markers sent through them.

Paper Table 1: ``insert_retain_marker(stream)`` and the feedback channel for
release markers.  Checkpoint markers (``insert_checkpoint_marker``) and
ft-operators arrive with the checkpoint issue; this graph holds what the
persistent-streams layer needs.
"""

from __future__ import annotations

from scabbard.pog.markers import Marker, MarkerKind
from scabbard.pog.pstream import PStream
from scabbard.schema import Schema
from scabbard.storage.blockmanager import BlockManager


class POG:
    def __init__(self, storage: BlockManager | None = None):
        self.storage = storage
        self.streams: dict[str, PStream] = {}
        self.released: dict[str, int] = {}

    def pstream(self, name: str, schema: Schema, start: int = 0, max_units: int = 64) -> PStream:
        if name in self.streams:
            raise ValueError(f"the graph already has a p-stream {name!r}")
        s = PStream(name, schema, self.storage, start, max_units)
        self.streams[name] = s
        return s

    def insert_retain_marker(self, stream: str) -> None:
        """The next p-unit written to ``stream`` is persisted before it is readable."""
        self.streams[stream].on_marker(Marker(MarkerKind.RETAIN, stream))

    def send_release(self, stream: str, reader: str, offset: int) -> int:
        """Feedback channel: ``reader``'s results below ``offset`` are committed; trim."""
        self.released[stream] = offset
        return self.streams[stream].trim_from(reader, offset, is_persistent=True)
