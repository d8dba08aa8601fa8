"""The operators above the branches, fed through channels, in window order (docs/design.md).

Each branch (a window aggregation over the source) leaves its complete windows, through the
stateless operators fused above it, at one operator's output.  Every output edge that leads
to an operator not fused with it - a join, what is above a join, what is above an edge a
p-stream sits on - or to the sink is a :class:`Channel`: a FIFO of :class:`Item`\\ s, each a
batch of complete windows or a checkpoint marker.

* Every batch carries a **watermark**: every window of that stream ending at or before it is
  complete (a batch may be empty: the watermark still advances, so an operator whose other
  input is idle learns that no more rows of a window will come).  ``None``: no progress
  beyond the rows themselves.  And a **clock**: how far into the input (``input_end``) and
  into each persisted channel it reflects - one entry per upstream p-stream it depends on.
* A channel may be **persisted** (a p-stream sits on the edge, paper §3.1): every batch is
  handed to the channel's ``store`` (the fault-tolerance wing's p-stream) and is read
  downstream only once that says it is stored.
* **Markers** travel in the channels with the data.  An operator runs Alg. 1 (§3.2): the
  first checkpoint marker on any input snapshots its state and is forwarded at once; from
  then on, batches arriving on an input whose marker has not come yet are recorded (unless
  that input is persisted: its p-stream replays them); once the marker came on every input,
  the snapshot with what was recorded is reported (``on_marker``).

:class:`OperatorGraph` is not thread-safe: its caller (the ordered assembly) serialises it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from scabbard.engine import physical
from scabbard.engine.tasks import INT64_MIN
from scabbard.schema import Schema


def empty_columns(schema: Schema) -> dict[str, np.ndarray]:
    return {f.name: np.zeros((0, 2), np.uint64) if f.dtype == "uuid"
            else np.zeros(0, f.numpy_dtype) for f in schema.fields}


def concat_columns(parts: list[dict], schema: Schema) -> dict[str, np.ndarray]:
    parts = [p for p in parts if len(p["window_end"])]
    if not parts:
        return empty_columns(schema)
    if len(parts) == 1:
        return parts[0]
    return {n: np.concatenate([p[n] for p in parts]) for n in schema.names}


def split_columns(cols: dict, upto: int) -> tuple[dict, dict]:
    """The rows whose window ends at or before ``upto``, and the rest (rows in window order)."""
    k = int(np.searchsorted(cols["window_end"], upto, side="right"))
    return {n: v[:k] for n, v in cols.items()}, {n: v[k:] for n, v in cols.items()}


# a batch's flags beside its clock, not part of it: ``piece`` - more rows of its last window
# follow (see Execution.emit)
ITEM_FLAGS = ("piece",)


def clock_only(clock: dict) -> dict:
    """``clock`` without a batch's flags."""
    return {k: v for k, v in clock.items() if k not in ITEM_FLAGS}


def merge_clocks(*clocks: dict) -> dict:
    out: dict = {}
    for c in clocks:
        for k, v in c.items():
            out[k] = max(out.get(k, v), v)
    return out


@dataclass
class Item:
    """What travels in a channel: a batch of complete windows, or a marker (``cols`` None)."""

    cols: dict | None
    watermark: int | None = None
    clock: dict = field(default_factory=dict)
    marker: object = None
    stored: Future | None = None  # a persisted batch: its Future (read once done)
    offset: int = 0  # a persisted batch: its first row in the channel's p-stream
    replayed: bool = False  # read back from the p-stream after a crash

    @property
    def ready(self) -> bool:
        return self.stored is None or self.stored.done()

    def check(self) -> None:
        """Raise the store's error, if storing failed."""
        if self.stored is not None:
            self.stored.result()


class Store(Protocol):
    """A persisted channel's p-stream, as the fault-tolerance wing provides it.  ``start``:
    ``end`` (its end), ``consumed`` (where the reader is), ``skip_through`` (windows stored
    already: after a crash, not written again) and ``replay`` (stored items the reader has
    not taken, after a crash)."""

    start: dict

    def write(self, cols: dict, offset: int, watermark: int | None, clock: dict) -> Future:
        """Persist a batch at ``offset``; the future resolves once it is stored."""

    def taken(self, item: Item) -> None:
        """The reader took ``item`` (a stored batch, or one replayed after a crash)."""


class Channel:
    """The edge out of operator ``name``: a FIFO of items; persisted when it has a
    :class:`Store` (a batch is read only once stored)."""

    def __init__(self, name: str, schema: Schema, store: Store | None = None,
                 on_stored: Callable[[], None] | None = None):
        self.name, self.schema, self.store = name, schema, store
        self.on_stored = on_stored  # called (on the writer's thread) once a batch is stored
        self.items: deque[Item] = deque()
        self.end = 0  # persisted: rows written to the p-stream (its end)
        self.consumed = 0  # persisted: rows the reader has taken
        self.skip_through = INT64_MIN  # windows ending at or before it are stored already
        self.seen: dict = {}  # the clocks of the batches taken so far, merged
        if store is not None:  # where the p-stream is: fresh, or resumed after a crash
            start = store.start
            self.end, self.consumed = start["end"], start["consumed"]
            self.skip_through = start["skip_through"]
            self.items.extend(start["replay"])

    @property
    def persisted(self) -> bool:
        return self.store is not None

    def put(self, cols: dict, watermark: int | None, clock: dict) -> None:
        if self.store is not None and len(cols["window_end"]):
            if cols["window_end"][-1] <= self.skip_through:  # recovery: stored before the crash
                return
            if cols["window_end"][0] <= self.skip_through:
                cols = split_columns(cols, self.skip_through)[1]
            n = len(cols["window_end"])
            clock = dict(clock, **{self.name: self.end + n})
            item = Item(cols, watermark, clock, offset=self.end,
                        stored=self.store.write(cols, self.end, watermark, clock))
            if self.on_stored is not None:
                item.stored.add_done_callback(lambda _: self.on_stored())
            self.end += n
            self.items.append(item)
            return
        self.items.append(Item(cols, watermark, clock))

    def mark(self, marker) -> None:
        self.items.append(Item(None, marker=marker))

    def ready(self) -> bool:
        return bool(self.items) and self.items[0].ready

    def take(self) -> Item:
        item = self.items.popleft()
        item.check()
        if item.cols is not None:  # (a batch's flags are its own)
            self.seen = merge_clocks(self.seen, clock_only(item.clock))
            if self.store is not None and len(item.cols["window_end"]):
                self.store.taken(item)
                self.consumed = item.offset + len(item.cols["window_end"])
        return item


@dataclass
class JoinState:
    """A window join's inputs not yet joined: per side, rows (in window order) and the
    watermark; windows up to the smaller watermark are joined and forgotten."""

    op: physical.Operator
    parallel: tuple | None = None  # see physical.window_join
    pending: list[list[dict]] = field(default_factory=lambda: [[], []])
    watermarks: list[int] = field(default_factory=lambda: [INT64_MIN, INT64_MIN])
    emitted: int = INT64_MIN  # the watermark of the last output

    def push(self, port: int, cols: dict, watermark: int | None) -> tuple[list, int] | None:
        """The joined rows (in pieces, in window order) once both watermarks passed the last
        join, up to the smaller one."""
        if len(cols["window_end"]):
            self.pending[port].append(cols)
        if watermark is not None and watermark > self.watermarks[port]:
            self.watermarks[port] = watermark
        bound = min(self.watermarks)
        if bound <= self.emitted:
            return None
        node = self.op.node
        sides = []
        for i, schema in enumerate((node.left.schema, node.right.schema)):
            ready, rest = split_columns(concat_columns(self.pending[i], schema), bound)
            self.pending[i] = [rest] if len(rest["window_end"]) else []
            sides.append(ready)
        self.emitted = bound
        return physical.window_join(node, *sides, self.parallel), bound

    def snapshot(self) -> dict:
        """The state, by reference to immutable arrays: each side's rows and watermark."""
        node = self.op.node
        return {"watermarks": list(self.watermarks), "emitted": self.emitted,
                "pending": [concat_columns(list(self.pending[i]), s)
                            for i, s in enumerate((node.left.schema, node.right.schema))]}

    def restore(self, snap: dict) -> None:
        self.watermarks = list(snap["watermarks"])
        self.emitted = snap["emitted"]
        self.pending = [[p] if len(p["window_end"]) else [] for p in snap["pending"]]


def record_into(snap: dict, port: int, item: Item, schema: Schema) -> dict:
    """A join's snapshot with a batch its input ``port`` delivered after the snapshot and
    before that input's marker (Chandy-Lamport's channel state): as if the join had taken
    it without emitting."""
    pending = list(snap["pending"])
    pending[port] = concat_columns([pending[port], item.cols], schema)
    marks = list(snap["watermarks"])
    if item.watermark is not None:
        marks[port] = max(marks[port], item.watermark)
    return dict(snap, pending=pending, watermarks=marks)


def progress(inputs: list[Channel], output: Channel | None) -> dict:
    """An operator's progress vectors in its persisted channels: ``in`` - how far it read
    each persisted input; ``out`` - how far its persisted output was written."""
    pv = {"in": {ch.name: ch.consumed for ch in inputs if ch.persisted}, "out": {}}
    if output is not None and output.persisted:
        pv["out"][output.name] = output.end
    return pv


class GraphOperator:
    """One operator of the graph with Alg. 1's bookkeeping: which inputs delivered the
    marker, the snapshot taken at the first, the channel state recorded since."""

    def __init__(self, op: physical.Operator, inputs: list[Channel], output: Channel,
                 parallel: tuple | None = None):
        self.op, self.inputs, self.output = op, inputs, output
        self.join = JoinState(op, parallel) if op.kind == "join" else None
        self.marked: set[int] = set()
        self.snap: dict | None = None
        self.pv: dict = {}

    def take(self, port: int, item: Item, on_marker) -> None:
        if item.cols is None:
            self._marker(port, item.marker, on_marker)
            return
        ch = self.inputs[port]
        if self.marked and port not in self.marked and not ch.persisted:
            schema = self.op.node.children[port].schema
            self.snap = record_into(self.snap, port, item, schema)
        self._data(port, item)

    def _marker(self, port: int, marker, on_marker) -> None:
        if not self.marked:  # the first: snapshot (I, R, Θ) and forward at once
            self.snap = self.join.snapshot() if self.join is not None else {}
            self.pv = progress(self.inputs, self.output)
            self.output.mark(marker)
        self.marked.add(port)
        if len(self.marked) == len(self.inputs):  # on every input: the checkpoint task
            on_marker(self.op.id, marker, self.snap, self.pv)
            self.marked, self.snap, self.pv = set(), None, {}

    def _data(self, port: int, item: Item) -> None:
        cols, watermark, clock = item.cols, item.watermark, item.clock
        if self.join is not None:
            got = self.join.push(port, cols, watermark)
            if got is None:
                return
            pieces, watermark = got
            clock = merge_clocks(*(c.seen for c in self.inputs), clock)
            for piece in pieces[:-1]:
                self.output.put(piece, None, clock)
            cols = pieces[-1]
        elif len(cols["window_end"]):
            cols = self.op.apply(cols)
        else:
            cols = empty_columns(self.op.node.schema)
        self.output.put(cols, watermark, clock)


class OperatorGraph:
    """The channels and the operators of ``plan.graph``, from the branches to the sink.

    ``stores``: per persisted edge (by the id of the operator whose output it is), the
    wing's :class:`Store`; ``on_marker(where, marker, snapshot, pv)``:
    an operator's Alg. 1 completed (``where`` an operator id; ``pv`` its :func:`progress`
    at the first marker); ``on_stored()``: a persisted batch was stored (it may move on).  :meth:`pump` moves what can
    move and returns what reaches the sink, in order: ``("data", cols, clock)`` and
    ``("marker", marker, pv)`` (the sink's :func:`progress` at the marker).  ``parallel``:
    ``(run, ways)``, how a join may run pieces of its input at once
    (:func:`physical.window_join`)."""

    def __init__(self, plan: physical.PhysicalPlan, stores: dict | None = None,
                 on_marker: Callable | None = None, on_stored: Callable | None = None,
                 parallel: tuple | None = None):
        self.plan = plan
        stores = stores or {}
        ops = plan.operators
        self.channels: dict[str, Channel] = {}
        producers = plan.producers + [op.id for op in plan.graph]
        for p in producers:
            self.channels[p] = Channel(p, ops[p].node.schema, stores.get(p), on_stored)
        self.operators = [GraphOperator(op, [self.channels[i] for i in op.inputs],
                                        self.channels[op.id], parallel) for op in plan.graph]
        root = [p for p in producers if ops[p].output == "sink"]
        self.sink = self.channels[root[0]]
        self.on_marker = on_marker or (lambda *a: None)
        self.clock: dict = {}  # of the last batch that reached the sink
        self._passed: dict | None = None  # the clock :meth:`passes` merged last

    def push(self, producer: str, cols: dict, watermark: int | None, clock: dict) -> None:
        """``producer``'s next complete windows (a branch's chain top)."""
        self.channels[producer].put(cols, watermark, clock)

    def mark(self, producer: str, marker) -> None:
        self.channels[producer].mark(marker)

    def stored_through(self, channel: str) -> int:
        """The last window the first persisted channel from ``channel`` to the sink holds."""
        while channel != "sink":
            ch = self.channels.get(channel)
            if ch is not None and ch.persisted:
                return ch.skip_through
            channel = self.plan.operators[channel].output
        return INT64_MIN

    def passes(self, producer: str, clock: dict) -> bool:
        """Whether a batch of ``producer``'s with ``clock`` goes to the sink past the channels
        (its caller emits it): the sink's own producer, its edge not persisted, nothing
        waiting in it.  If so, the clocks move as taking it from the channel moves them."""
        ch = self.channels[producer]
        if ch is not self.sink or ch.store is not None or ch.items:
            return False
        if clock is not self._passed:  # (merging a clock again changes nothing)
            ch.seen = merge_clocks(ch.seen, clock_only(clock))
            self.clock = merge_clocks(self.clock, clock)
            self._passed = clock
        return True

    def ready(self) -> bool:
        return any(ch.ready() for ch in self.channels.values())

    def pump(self) -> list[tuple]:
        out: list[tuple] = []
        moved = True
        while moved:
            moved = False
            for g in self.operators:
                for port, ch in enumerate(g.inputs):
                    while ch.ready():
                        g.take(port, ch.take(), self.on_marker)
                        moved = True
            while self.sink.ready():
                item = self.sink.take()
                if item.cols is None:  # the sink's progress is where the marker is
                    out.append(("marker", item.marker, progress([self.sink], None)))
                else:
                    self.clock = merge_clocks(self.clock, item.clock)
                    if len(item.cols["window_end"]):
                        out.append(("data", item.cols, item.clock))
                moved = True
        return out

    def pending(self) -> int:
        """Items still in the channels (persisted ones waiting to be stored, or blocked)."""
        return sum(len(ch.items) for ch in self.channels.values())

    def backlog(self) -> tuple[int, Item | None]:
        """Bytes of the batches waiting to be stored, and the oldest such batch."""
        total, oldest = 0, None
        for ch in self.channels.values():
            for item in ch.items:
                if not item.ready:
                    total += sum(v.nbytes for v in item.cols.values())
                    oldest = oldest or item
        return total, oldest

    def snapshot(self) -> dict:
        return {g.op.id: g.join.snapshot() for g in self.operators if g.join is not None}

    def restore(self, snap: dict) -> None:
        for g in self.operators:
            if g.join is not None and g.op.id in snap:
                g.join.restore(snap[g.op.id])
