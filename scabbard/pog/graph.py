"""The persistent operator graph (POG): its p-streams and the markers sent through them.

Paper Table 1: ``insert_retain_marker(stream)`` and the feedback channel for
release markers.  Checkpoint markers (``insert_checkpoint_marker``) and
ft-operators arrive with the checkpoint issue; this graph holds what the
persistent-streams layer needs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future

from scabbard import timers
from scabbard.batch import Batch
from scabbard.pog.markers import Marker, MarkerKind
from scabbard.pog.pstream import PStream
from scabbard.pog.punit import PUnit
from scabbard.schema import Schema
from scabbard.storage.blockmanager import BlockManager


class POG:
    def __init__(self, storage: BlockManager | None = None):
        self.storage = storage
        self.streams: dict[str, PStream] = {}
        self.released: dict[str, int] = {}

    def pstream(self, name: str, schema: Schema, start: int = 0, max_units: int = 64,
                max_bytes: int = 256 << 20, compress=None) -> PStream:
        if name in self.streams:
            raise ValueError(f"the graph already has a p-stream {name!r}")
        s = PStream(name, schema, self.storage, start, max_units, max_bytes, compress)
        self.streams[name] = s
        return s

    def insert_retain_marker(self, stream: str) -> None:
        """The next p-unit written to ``stream`` is persisted before it is readable."""
        self.streams[stream].on_marker(Marker(MarkerKind.RETAIN, stream))

    def send_release(self, stream: str, reader: str, offset: int) -> int:
        """Feedback channel: ``reader``'s results below ``offset`` are committed; trim."""
        self.released[stream] = offset
        return self.streams[stream].trim_from(reader, offset, is_persistent=True)

    def append(self, stream: str, batch_id: int, b: Batch, source_end: int | None = None,
               stored: tuple | None = None, encoded=None) -> PUnit:
        """Write batch ``batch_id`` at the end of the ingress p-stream ``stream``, behind a
        retain marker (stored before it is readable); returns its p-unit.  Appends go in
        order: one at a time, each at the offset the last one ended (several ingress
        partitions take turns).  The *source end* - how far into the source the p-unit
        reflects, its vector clock - differs from the p-stream's own offsets when operators
        moved below the p-stream (push-up) dropped tuples; None means "the p-unit's end".
        ``stored``: the batch's columns already compressed (see :meth:`PUnit.compress`), or
        None; ``encoded``: its segment made already but for the header
        (:class:`~scabbard.storage.segment.Payload`), or None.  Blocks while the stream has
        no room (:meth:`PStream.has_room`)."""
        return self.stage(stream, batch_id, b, source_end, stored, encoded)[0]

    def stage(self, stream: str, batch_id: int, b: Batch, source_end: int | None = None,
              stored: tuple | None = None, encoded=None) -> tuple[PUnit, Future]:
        """:meth:`append`, with the future that resolves once the p-unit is stored."""
        span = timers.start()
        s = self.streams[stream]
        offset = s.end
        clock = (offset + len(b) if source_end is None else source_end,)
        unit = PUnit(stream, batch_id, b.at(offset), clock, persistent=True, stored=stored,
                     encoded=encoded)
        self.insert_retain_marker(stream)
        done = s.write(unit, batch_id, offset)
        timers.stop(span, "stage", len(b))
        return unit, done

    def persisted(self, stream: str, reader: str, batches: Iterable[tuple],
                  operator=None) -> Iterator[PUnit]:
        """Write ``batches`` (batch id, batch, source end, stored) into the ingress p-stream
        ``stream`` (:meth:`append`), and yield every p-unit once it is stored, in order.

        Writing runs ahead of the consumer by what the stream holds in memory
        (``max_units``/``max_bytes``), so disk writes and downstream work overlap.
        """
        s = self.streams[stream]
        s.subscribe(operator, reader, s.end)
        waiting = 0
        for batch_id, b, source_end, stored in batches:
            while waiting and not s.has_room(b.column_bytes):
                waiting -= 1
                yield s.read(reader, timeout=None)
            self.append(stream, batch_id, b, source_end, stored)
            waiting += 1
            while waiting and (u := s.read(reader, timeout=0)) is not None:
                waiting -= 1
                yield u
        while waiting:
            waiting -= 1
            yield s.read(reader, timeout=None)

    def persist_ingress(self, stream: str, reader: str, batches: Iterable[tuple],
                        deliver: Callable[[PUnit], bool], operator=None) -> bool:
        """:meth:`persisted`, handing every stored p-unit to ``deliver``; ``deliver`` returns
        False to stop, and so does this function then."""
        for u in self.persisted(stream, reader, batches, operator):
            if deliver(u) is False:
                return False
        return True
