"""P-streams on the edges between operators (paper §3.1, Table 1; docs/design.md).

A persisted edge is the output channel of one operator (named by its id: ``window0`` is
LRB2's window aggregation's output, which LRB3's per-window count reads; the root's output
edge is the one before the sink).  :class:`ChannelStore` is the engine's
:class:`~scabbard.engine.graph.Store` for it: each batch of complete windows is written to
the p-stream ``edge-<id>`` behind a retain marker and read by the consumer through the
p-stream (``read``) once stored.  A p-unit's metadata is its watermark, the last window it
completes and its vector clock: how far into the input and into every persisted channel it
reflects.

Recovery (:func:`resume_channels`): the consumer restarts at its position in the record
(its ``pv`` ``in``), the stored batches after it are replayed ahead of everything else, and
what the producer computes again up to the last stored window is not stored twice
(``skip_through``).  GC (:func:`release`): once a checkpoint is no longer the fallback,
release markers walk the graph from the sink upstream and trim every persisted channel
below what its consumer had read at that checkpoint, then the ingress.
"""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np

from scabbard.batch import Batch
from scabbard.engine import physical
from scabbard.engine.graph import Item
from scabbard.engine.tasks import INT64_MIN
from scabbard.pog import POG
from scabbard.pog.checkpoint import CheckpointRecord
from scabbard.pog.markers import Marker, MarkerKind
from scabbard.pog.punit import PUnit
from scabbard.query import QueryError
from scabbard.storage import UnitTooLarge

OUTPUT = "output"  # the name of the edge before the sink, whatever the root's id


def stream_name(channel: str) -> str:
    return f"edge-{channel}"


def edges(plan: physical.PhysicalPlan) -> list[str]:
    """The operator output edges of a plan, by producer id (the root's is the one before
    the sink)."""
    return list(plan.operators)


def resolve(plan_root, names) -> tuple[str, ...]:
    """Edge names (operator ids, or ``output`` for the edge before the sink) checked against
    the query's operators; ``ingress`` is the input's (persisted on its own)."""
    ops = physical.operators(plan_root)
    root = next(o.id for o in ops.values() if o.output == "sink")
    out = []
    for n in names:
        n = root if n == OUTPUT else n
        if n == "ingress":
            continue
        if n in ops and ops[n].kind == "select":
            raise QueryError(f"a stateless query's only edge to persist is its input (ingress): "
                             f"the output of {n} is the sink's, which stores it exactly once")
        if n not in ops:
            raise QueryError(f"no edge {n!r} in this query: its edges are ingress, "
                             f"{', '.join(ops)} (the output of each operator) and output")
        if n not in out:
            out.append(n)
    return tuple(sorted(out))


def consumer(plan: physical.PhysicalPlan, channel: str) -> str:
    return plan.operators[channel].output


class ChannelStore:
    """The p-stream of one persisted channel, as the engine's graph uses it."""

    def __init__(self, pog: POG, plan: physical.PhysicalPlan, channel: str,
                 layout: tuple[str, ...]):
        self.channel, self.layout = channel, layout
        self.schema = plan.operators[channel].node.schema
        self.reader = consumer(plan, channel)
        # the engine bounds what waits in the channel (its stored batches are read by the
        # consumer on the assembly's thread, so a p-stream that blocked its writer for room
        # would wait for itself)
        self.pstream = pog.pstream(stream_name(channel), self.schema, max_units=1 << 30,
                                   max_bytes=1 << 62)
        self.pstream.subscribe(None, self.reader, self.pstream.end)
        end = self.pstream.end
        self.start = {"end": end, "consumed": end, "skip_through": INT64_MIN, "replay": []}

    def meta(self, watermark: int | None, last: int, clock: dict) -> tuple[int, ...]:
        words = [INT64_MIN if watermark is None else watermark, last,
                 clock.get("input_end", 0)] + [clock.get(c, 0) for c in self.layout]
        return tuple(int(np.int64(w).view(np.uint64)) for w in words)

    def _pieces(self, cols: dict) -> list[tuple[int, int]]:
        """Row ranges of whole windows, each a p-unit that fits a pool file."""
        cfg = self.pstream.storage.config
        fits = max(1, (cfg.file_bytes - cfg.data_start - 2 * cfg.align)
                   // max(1, self.schema.row_bytes) - len(self.schema.fields))
        we = cols["window_end"]
        out, lo = [], 0
        while lo < len(we):
            hi = len(we)
            if hi - lo > fits:
                hi = int(np.searchsorted(we, we[lo + fits], side="left"))
                if hi <= lo:
                    rows = int(np.searchsorted(we, we[lo], side="right")) - lo
                    raise UnitTooLarge(f"channel {self.channel}: the results of one window "
                                       f"({rows:,} rows) exceed a {cfg.file_bytes:,}-byte "
                                       f"pool file", cfg.file_bytes * -(-rows // fits))
            out.append((lo, hi))
            lo = hi
        return out

    def write(self, cols: dict, offset: int, watermark: int | None, clock: dict) -> Future:
        """The batch as p-units of whole windows, each behind a retain marker; the future
        resolves once all are stored."""
        pieces = self._pieces(cols)
        done: Future = Future()
        left = [len(pieces)]

        def stored(f: Future) -> None:
            if done.done():
                return
            if f.exception() is not None:
                done.set_exception(f.exception())
                return
            left[0] -= 1
            if left[0] == 0:
                done.set_result(offset + len(cols["window_end"]))

        futures = []
        for k, (lo, hi) in enumerate(pieces):
            part = tuple(cols[n][lo:hi] for n in self.schema.names)
            last = k == len(pieces) - 1
            unit = PUnit(self.pstream.name, offset + lo, Batch(self.schema, part, offset + lo),
                         self.meta(watermark if last else None,
                                   int(cols["window_end"][hi - 1]), clock))
            self.pstream.on_marker(Marker(MarkerKind.RETAIN, self.pstream.name))
            futures.append(self.pstream.write(unit, offset + lo, offset + lo))
        for f in futures:
            f.add_done_callback(stored)
        return done

    def taken(self, item: Item) -> None:
        if item.replayed:
            return
        end = item.offset + len(item.cols["window_end"])
        at = item.offset
        while at < end:
            unit = self.pstream.read(self.reader, timeout=0)
            if unit is None or unit.offset != at:
                raise RuntimeError(f"channel {self.channel}: the reader takes offset {at}, the "
                                   f"p-stream has {None if unit is None else unit.offset}")
            at = unit.end

    def decode(self, unit: PUnit) -> Item:
        words = np.asarray(unit.vector_clock, np.uint64).view(np.int64)
        clock = {"input_end": int(words[2]), **{c: int(w) for c, w in zip(
            self.layout, words[3:], strict=False) if w}}
        clock[self.channel] = unit.end
        cols = dict(zip(self.schema.names, unit.batch.columns, strict=True))
        wm = None if words[0] == INT64_MIN else int(words[0])
        return Item(cols, wm, clock, offset=unit.offset, replayed=True)

    def resume(self, consumed: int) -> None:
        """Recovery: the reader restarts at ``consumed``, the stored batches after it are
        replayed, the stored windows are not written again (:attr:`start`).  A stream whose
        every stored unit below ``consumed`` was released (its pool files with them) carries on
        at ``consumed``: its offsets never go back below what the record depends on."""
        if self.pstream.end < consumed:
            self.pstream.restart_at(consumed)
            self.pstream.subscribe(None, self.reader, consumed)
        end = self.pstream.end
        replay = [self.decode(u) for u in self.pstream.load_stream(consumed)] \
            if end > consumed else []
        last = self.pstream.last_clock()
        skip = int(np.asarray(last, np.uint64).view(np.int64)[1]) if last else INT64_MIN
        self.start = {"end": end, "consumed": consumed, "skip_through": skip, "replay": replay}


def open_channels(pog: POG, plan: physical.PhysicalPlan,
                  names: tuple[str, ...]) -> dict[str, ChannelStore]:
    return {n: ChannelStore(pog, plan, n, names) for n in names}


def resume_channels(stores: dict[str, ChannelStore], rec: CheckpointRecord | None) -> None:
    """Recovery: every persisted channel resumes where its consumer was at ``rec`` (see
    :meth:`ChannelStore.resume`); without a record, at the beginning."""
    for name, store in stores.items():
        pv = rec.operator.get("pv", {}).get(store.reader, {}) if rec is not None else {}
        store.resume(int(pv.get("in", {}).get(name, 0)))


def release(pog: POG, plan: physical.PhysicalPlan, stores: dict[str, ChannelStore],
            rec: CheckpointRecord, ingress: tuple[str, str] | None) -> None:
    """GC below checkpoint ``rec`` (§3.3): its dependencies walked in reverse topological
    order - the sink's, then each operator's from the root down to the windows - each a
    release marker to the p-stream it names, trimming it below where the checkpoint's state
    reached (a reader releases at most what it read)."""
    deps = rec.operator.get("dependencies", {})
    order = ["sink", *reversed(list(plan.operators))]
    by_stream = {s.pstream.name: s for s in stores.values()}
    for unit in order:
        for d in deps.get(unit, []):
            if d["stream"] in by_stream:
                s = by_stream[d["stream"]]
                s.pstream.on_marker(Marker(MarkerKind.RELEASE, d["stream"], offset=d["end"],
                                           reader=s.reader))
            elif ingress is not None and d["stream"] == ingress[0]:
                pog.streams[ingress[0]].on_marker(Marker(MarkerKind.RELEASE, ingress[0],
                                                         offset=d["end"], reader=ingress[1]))
