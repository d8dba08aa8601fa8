"""Pane state p-units: incremental, window-granular checkpoints (issue 18, the CEC seed).

With in-order input a pane that has closed - a tuple of a later pane was assembled - never
changes again.  In ``incremental`` (and ``eventual``) checkpoint mode a window operator's
closed panes are therefore written **once**, as immutable state p-units of the p-stream
``panes-<id>`` (one per ft-operator), instead of every checkpoint rewriting every pane its
open windows still need (``full``, the paper's scheme):

* a **pane unit** holds the partials (pane, key, count, int and float partial aggregates) of
  whole consecutive panes, in pane order, with its clock - the input offset its content
  reflects - and its pane range in the segment's metadata words ``(clock, first pane, end
  pane)``; the stream is the ft-operator's, so a unit is (ft-operator, pane, clock);
* a **checkpoint record** lists, per window operator, the runs of pane units it relies on -
  the panes ``L - range/slide + 1 .. L - 1`` its open windows still need, as offset ranges of
  the pane stream (``{"stream": "panes-<id>", "first", "end", "panes": [lo, hi]}``) - plus
  the open pane ``L``'s partials, written with the checkpoint to ``state-<id>`` as before;
* **GC**: a pane unit is released once it has left every window of the older of the two
  newest records (the controller's Step 7 trims the pane stream below that record's first
  listed offset; units are appended in pane order, so this is a prefix);
* **recovery** loads the listed runs and the open part at once (a pool) and concatenates
  them: the same pane partials, row for row, as a full checkpoint at the same task holds.

:class:`PaneLog` is one operator's pane stream and its index (pane -> offsets).  Writes are
appended at the log's own next offset, so several may be in flight (eventual mode's steps,
:mod:`scabbard.ft.eventual`); a record waits for every unit still in flight.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from scabbard import faults
from scabbard.batch import Batch
from scabbard.schema import Schema
from scabbard.storage import BlockManager

MODES = ("full", "incremental", "eventual")


def pane_schema(state: Schema, op_id: str) -> Schema:
    """The pane units of a window operator: its state rows, in a stream of their own."""
    return Schema(f"panes-{op_id}", state.fields, stream=False)


def count_panes(pane: np.ndarray) -> int:
    """How many distinct panes a pane-sorted column holds."""
    return 0 if not len(pane) else 1 + int(np.count_nonzero(pane[1:] != pane[:-1]))


@dataclass
class Written:
    """What one write handed to storage."""

    parts: list = field(default_factory=list)  # {"stream", "first", "end"[, "panes"]}
    futures: list = field(default_factory=list)  # Future per p-unit
    bytes: int = 0
    panes: int = 0
    units: int = 0

    def add(self, other: Written) -> None:
        self.parts += other.parts
        self.futures += other.futures
        self.bytes += other.bytes
        self.panes += other.panes
        self.units += other.units


class PaneLog:
    """One window operator's pane units: the stream, where each pane is in it, what is saved.

    ``saved_to``: every closed pane below it that an open window still needs is written
    (None: nothing yet).  The index holds, per written pane, the offsets of its rows.
    """

    def __init__(self, schema: Schema, storage: BlockManager):
        self.schema, self.bm = schema, storage
        self.sid = storage.stream(schema.name, schema)
        self.next = storage.durable_end(self.sid)  # appends go here (several may be in flight)
        self.saved_to: int | None = None
        self.index = (np.zeros(0, np.int64),) * 3  # pane, first offset, end offset
        self.inflight: list[Future] = []
        self.lock = threading.Lock()

    # -- writing -------------------------------------------------------------------------------
    def save(self, cols: tuple, upto: int, clock: int) -> Written:
        """Append the closed panes' rows ``cols`` (pane-sorted, every pane below ``upto``) as
        pane units; ``upto`` becomes ``saved_to``."""
        out = Written()
        with self.lock:
            pane = cols[0]
            if len(pane):
                if self.saved_to is not None and pane[0] < self.saved_to:
                    raise ValueError(f"{self.schema.name}: pane {pane[0]} saved again "
                                     f"(saved to {self.saved_to})")
                for lo, hi in _units(pane, max(1, (self.bm.config.file_bytes // 4)
                                               // self.schema.row_bytes)):
                    batch = Batch(self.schema, tuple(np.ascontiguousarray(c[lo:hi]) for c in cols),
                                  self.next)
                    meta = np.array([clock, pane[lo], pane[hi - 1] + 1], np.int64).view(np.uint64)
                    f = self.bm.append(self.sid, batch, 0, meta)
                    out.futures.append(f)
                    out.bytes += batch.column_bytes
                    out.units += 1
                    self.next = batch.end
                starts = np.flatnonzero(np.r_[True, pane[1:] != pane[:-1]])
                ends = np.r_[starts[1:], len(pane)]
                first = self.next - len(pane)
                self._extend(pane[starts], first + starts, first + ends)
                out.panes = len(starts)
            self.saved_to = upto if self.saved_to is None else max(self.saved_to, upto)
            self.inflight = _unsettled(self.inflight) + out.futures
        if out.futures:
            faults.crashpoint("checkpoint_step")
        return out

    def _extend(self, panes, firsts, ends) -> None:
        p, f, e = self.index
        self.index = (np.concatenate([p, panes]), np.concatenate([f, firsts]),
                      np.concatenate([e, ends]))

    def pending(self) -> list[Future]:
        """Every unit still in flight (a record that lists units waits for them)."""
        with self.lock:
            self.inflight = _unsettled(self.inflight)
            return list(self.inflight)

    # -- what a record relies on -----------------------------------------------------------------
    def listed(self, lo: int, hi: int) -> list[dict]:
        """The runs of units holding panes ``lo .. hi - 1`` (contiguous offset ranges).  With
        none, one empty part at where they would begin (what GC trims below)."""
        with self.lock:
            p, f, e = self.index
            i0, i1 = int(np.searchsorted(p, lo)), int(np.searchsorted(p, hi))
            if i0 == i1:
                at = int(f[i0]) if i0 < len(p) else self.next
                return [{"stream": self.schema.name, "first": at, "end": at, "panes": [lo, lo]}]
            breaks = np.flatnonzero(f[i0 + 1:i1] != e[i0:i1 - 1]) + i0 + 1
            bounds = [i0, *breaks.tolist(), i1]
            return [{"stream": self.schema.name, "first": int(f[a]), "end": int(e[b - 1]),
                     "panes": [int(p[a]), int(p[b - 1]) + 1]}
                    for a, b in zip(bounds, bounds[1:], strict=False)]

    def prune(self, lo: int) -> None:
        """Forget the panes below ``lo`` (no later checkpoint needs them)."""
        with self.lock:
            p, f, e = self.index
            i = int(np.searchsorted(p, lo))
            self.index = (p[i:], f[i:], e[i:])

    def restore(self, parts: list[dict], panes: list[np.ndarray], saved_to: int) -> None:
        """After recovery: the index of the units ``parts`` (whose rows' panes were loaded)."""
        with self.lock:
            self.index = (np.zeros(0, np.int64),) * 3
            for part, pane in zip(parts, panes, strict=True):
                if not len(pane):
                    continue
                starts = np.flatnonzero(np.r_[True, pane[1:] != pane[:-1]])
                ends = np.r_[starts[1:], len(pane)]
                self._extend(pane[starts], part["first"] + starts, part["first"] + ends)
            self.saved_to = saved_to
            self.next = max(self.next, self.bm.durable_end(self.sid))


def _unsettled(futures: list[Future]) -> list[Future]:
    """The writes not acknowledged: in flight, or failed (a failure is never forgotten)."""
    return [f for f in futures if not f.done() or f.exception() is not None]


def _units(pane: np.ndarray, per: int):
    """Row ranges of about ``per`` rows each, cut at pane boundaries (a pane larger than
    ``per`` is cut too: a unit must fit a pool file)."""
    n, lo = len(pane), 0
    while lo < n:
        hi = min(n, lo + per)
        if hi < n:
            start = int(np.searchsorted(pane, pane[hi], "left"))
            if start > lo:
                hi = start
        yield lo, hi
        lo = hi
