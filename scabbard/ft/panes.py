"""Pane state p-units: incremental, window-granular checkpoints (the CEC seed).

With in-order input a pane that has closed - a tuple of a later pane was assembled - never
changes again.  In ``incremental`` (and ``eventual``) checkpoint mode a window operator's
closed panes are therefore written **once**, as immutable state p-units of the
ft-operator's own state stream ``state-<id>``, instead of every checkpoint rewriting every
pane its open windows still need (``full``, the paper's scheme):

* a **pane unit** holds the partials (pane, key, count, int and float partial aggregates) of
  whole consecutive panes, in pane order, with its clock - the input offset its content
  reflects - its pane range and the unit's first offset (its name; a unit over several
  segments) in each segment's metadata words ``(clock, first pane, end pane, unit)``; the
  stream is the ft-operator's, so a unit is (ft-operator, pane, clock).  One
  stream, not one of their own beside it: a recovery opens (scans, verifies the tail of) one
  stream per operator, as with full checkpoints;
* a **checkpoint record** lists, per window operator, the runs of pane units it relies on -
  the panes ``L - range/slide + 1 .. L - 1`` its open windows still need, as offset ranges of
  the stream (``{"stream": "state-<id>", "first", "end", "panes": [lo, hi]}``) - plus the
  open pane ``L``'s partials, written with the checkpoint after them (a part without
  ``"panes"``);
* **merging** (size-tiered, as an LSM tree): one pane closed per checkpoint makes one small
  unit per checkpoint, and recovery would read thousands of segments.  A unit written by a
  checkpoint or a step is of level 0; once a window holds ``FANOUT`` units of one level, a
  checkpoint writes their panes again as one unit of the next level (from its snapshot, which
  holds them).  A window then lists at most about ``(FANOUT - 1) x log_FANOUT(panes)`` units,
  and each pane is written about ``log_FANOUT(panes closed per unit ... window)`` times, not
  once per checkpoint;
* **GC**: a pane unit is released once it has left every window of the older of the two
  newest records (the controller's Step 7 trims the stream below that record's *floor*: the
  lowest offset of any unit of its first pane or later - its own runs, and the units an
  eventual step wrote after its snapshot - or of its open part, if lower);
* **recovery** loads the listed runs and the open part at once (a pool) and concatenates
  them: the same pane partials, row for row, as a full checkpoint at the same task holds.

:class:`PaneLog` is one operator's pane units in its stream and their index (pane ->
offsets).  Every write to the stream - pane units and open parts - is appended at the log's
own next offset, so several may be in flight (eventual mode's steps,
:mod:`scabbard.ft.eventual`); a record waits for every unit still in flight.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from scabbard import faults
from scabbard.batch import Batch
from scabbard.ft.modes import CHECKPOINT_MODES
from scabbard.pog.punit import Kind, PUnit
from scabbard.schema import Schema
from scabbard.storage import BlockManager

MODES = CHECKPOINT_MODES
FANOUT = 8  # this many units of one level in a window are merged into one of the next
RESTORED = 1 << 30  # the level of the units a recovery found (never merged)
UNIT_WORDS = 4  # a pane unit segment's metadata words: (clock, first pane, end pane, unit)
OPEN_WORDS = 6  # an eventual step's open part's: (clock, pane, rows, seq, last_ts, emitted)


def count_panes(pane: np.ndarray) -> int:
    """How many distinct panes a pane-sorted column holds."""
    return 0 if not len(pane) else 1 + int(np.count_nonzero(pane[1:] != pane[:-1]))


def write_units(bm: BlockManager, sid: int, schema: Schema, cols: tuple, cid: int,
                first: int, meta: np.ndarray | None = None) -> tuple[dict, list[Future], int]:
    """``cols`` as state p-units of the stream ``sid`` from offset ``first`` on (cut to fit the
    pool's files), each with the metadata words ``meta`` if given: the part a record lists,
    the appends' futures, the bytes."""
    batch = Batch(schema, tuple(np.ascontiguousarray(c) for c in cols), first)
    futures, nbytes = [], 0
    per = max(1, (bm.config.file_bytes // 4) // schema.row_bytes)
    for lo in range(0, len(batch), per):
        part = batch.slice(lo, min(len(batch), lo + per))
        unit = PUnit(schema.name, cid, part, kind=Kind.STATE, persistent=True)
        futures.append(bm.append(sid, unit.batch, cid,
                                 unit.meta_words() if meta is None else meta))
        nbytes += part.column_bytes
    return {"stream": schema.name, "first": first, "end": first + len(batch)}, futures, nbytes


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
    """One window operator's pane units: where each pane is in its stream, what is saved.

    ``saved_to``: every closed pane below it that an open window still needs is written
    (None: nothing yet).  The index holds, per written pane, the offsets of its rows and the
    unit holding them; ``levels`` each unit's level (see the module: merging).
    """

    def __init__(self, schema: Schema, storage: BlockManager, fanout: int = FANOUT):
        self.schema, self.bm, self.fanout = schema, storage, fanout
        self.sid = storage.stream(schema.name, schema)
        self.next = storage.durable_end(self.sid)  # appends go here (several may be in flight)
        self.saved_to: int | None = None
        self.index = (np.zeros(0, np.int64),) * 4  # pane, first offset, end offset, unit
        self.levels: dict[int, int] = {}
        self.inflight: list[Future] = []
        self.lock = threading.Lock()

    # -- writing -------------------------------------------------------------------------------
    def save(self, cols: tuple, upto: int, clock: int) -> Written:
        """Append the closed panes' rows ``cols`` (pane-sorted, every pane below ``upto``) as
        a unit of level 0; ``upto`` becomes ``saved_to``."""
        with self.lock:
            pane = cols[0]
            if len(pane) and self.saved_to is not None and pane[0] < self.saved_to:
                raise ValueError(f"{self.schema.name}: pane {pane[0]} saved again "
                                 f"(saved to {self.saved_to})")
            out, entries = self._append(cols, clock, 0)
            self.index = tuple(np.concatenate([a, b]) for a, b in zip(self.index, entries,
                                                                         strict=True))
            self.saved_to = upto if self.saved_to is None else max(self.saved_to, upto)
        if out.futures:
            faults.crashpoint("checkpoint_step")
        return out

    def write_part(self, cols: tuple, cid: int) -> tuple[dict, list[Future], int]:
        """A checkpoint's open part ``cols`` appended to the stream in its turn, after the
        units: ``(part, futures, bytes)`` as :func:`write_units`."""
        with self.lock:
            part, futures, nbytes = write_units(self.bm, self.sid, self.schema, cols, cid,
                                                self.next)
            self.next = part["end"]
            self.inflight = _unsettled(self.inflight) + futures
        return part, futures, nbytes

    def write_open(self, cols: tuple, pane: int, clock: int, seq: int, emitted: int,
                   last_ts: int) -> Written:
        """An eventual step's open part: the open pane ``pane``'s partials ``cols`` after task
        ``seq`` (its input ended at ``clock``, its last tuple at ``last_ts``; ``emitted``: the
        last window end its results handed to the sink), appended after the units the step
        wrote - a point a recovery may resume from without a record
        (:mod:`scabbard.ft.steppoints`).  Its segments carry :data:`OPEN_WORDS` metadata
        words ``(clock, pane, rows, seq, last_ts, emitted)``; not in the index (not a closed
        pane)."""
        n = len(cols[0])
        if not n:
            return Written()
        meta = np.array([clock, pane, n, seq, last_ts, emitted], np.int64).view(np.uint64)
        with self.lock:
            part, futures, nbytes = write_units(self.bm, self.sid, self.schema, cols, 0,
                                                self.next, meta)
            self.next = part["end"]
            self.inflight = _unsettled(self.inflight) + futures
        faults.crashpoint("checkpoint_step")
        return Written(futures=futures, bytes=nbytes)

    def to_merge(self, lo: int, hi: int) -> tuple[int, int, int] | None:
        """Panes ``(first, end, level)`` of the lowest level with ``fanout`` units among those
        holding panes ``lo .. hi - 1`` (they follow each other), or None."""
        with self.lock:
            p, u = self.index[0], self.index[3]
            i0, i1 = int(np.searchsorted(p, lo)), int(np.searchsorted(p, hi))
            if i1 - i0 < 2:
                return None
            starts = i0 + np.flatnonzero(np.r_[True, u[i0 + 1:i1] != u[i0:i1 - 1]])
            levels = np.array([self.levels.get(int(x), 0) for x in u[starts]])
            for level in np.unique(levels):
                at = np.flatnonzero(levels == level)
                if len(at) >= self.fanout:
                    a, b = at[0], at[self.fanout - 1]
                    end = starts[b + 1] - 1 if b + 1 < len(starts) else i1 - 1
                    return max(lo, int(p[starts[a]])), int(p[end]) + 1, int(level) + 1
            return None

    def consolidate(self, cols: tuple, lo: int, upto: int, clock: int, level: int) -> Written:
        """Write the closed panes ``lo .. upto - 1`` again (``cols``: all their rows) as one
        unit of ``level``, which the index then points at instead of the old ones."""
        with self.lock:
            out, entries = self._append(cols, clock, level)
            p = self.index[0]
            keep = (p < lo) | (p >= upto)
            merged = [np.concatenate([a[keep], b]) for a, b in zip(self.index, entries,
                                                                     strict=True)]
            order = np.argsort(merged[0], kind="stable")
            self.index = tuple(a[order] for a in merged)
        if out.futures:
            faults.crashpoint("checkpoint_step")
        return out

    def _append(self, cols: tuple, clock: int, level: int) -> tuple[Written, tuple]:
        """``cols`` as one unit of ``level`` at the end of the stream (several segments if it
        does not fit one); its index entries."""
        out, pane = Written(), cols[0]
        unit = self.next  # a unit is named by its first offset
        if len(pane):
            self.levels[unit] = level
        for lo, hi in _units(pane, max(1, (self.bm.config.file_bytes // 4)
                                       // self.schema.row_bytes)):
            batch = Batch(self.schema, tuple(np.ascontiguousarray(c[lo:hi]) for c in cols),
                          self.next)
            meta = np.array([clock, pane[lo], pane[hi - 1] + 1, unit],
                            np.int64).view(np.uint64)
            out.futures.append(self.bm.append(self.sid, batch, 0, meta))
            out.bytes += batch.column_bytes
            self.next = batch.end
        out.units = int(len(pane) > 0)
        self.inflight = _unsettled(self.inflight) + out.futures
        if not len(pane):
            return out, (np.zeros(0, np.int64),) * 4
        starts = np.flatnonzero(np.r_[True, pane[1:] != pane[:-1]])
        ends = np.r_[starts[1:], len(pane)]
        first = self.next - len(pane)
        out.panes = len(starts)
        return out, (pane[starts], first + starts, first + ends, np.full(len(starts), unit))

    def pending(self) -> list[Future]:
        """Every unit still in flight (a record that lists units waits for them)."""
        with self.lock:
            self.inflight = _unsettled(self.inflight)
            return list(self.inflight)

    # -- what a record relies on -----------------------------------------------------------------
    def units_in(self, lo: int, hi: int) -> int:
        """How many units hold panes ``lo .. hi - 1``."""
        with self.lock:
            p, u = self.index[0], self.index[3]
            u = u[int(np.searchsorted(p, lo)):int(np.searchsorted(p, hi))]
            return 0 if not len(u) else 1 + int(np.count_nonzero(u[1:] != u[:-1]))

    def listed(self, lo: int, hi: int) -> list[dict]:
        """The runs of units holding panes ``lo .. hi - 1`` (contiguous offset ranges), and
        if lower, an empty part at the *floor*: the lowest offset any unit of pane ``lo`` or
        later has - what GC may trim below once this record is the older one kept."""
        with self.lock:
            p, f, e, _ = self.index
            i0, i1 = int(np.searchsorted(p, lo)), int(np.searchsorted(p, hi))
            breaks = np.flatnonzero(f[i0 + 1:i1] != e[i0:i1 - 1]) + i0 + 1
            bounds = [i0, *breaks.tolist(), i1] if i1 > i0 else []
            runs = [{"stream": self.schema.name, "first": int(f[a]), "end": int(e[b - 1]),
                     "panes": [int(p[a]), int(p[b - 1]) + 1]}
                    for a, b in zip(bounds, bounds[1:], strict=False)]
            floor = int(f[i0:].min()) if i0 < len(p) else self.next
            if not runs or floor < min(r["first"] for r in runs):
                runs.append({"stream": self.schema.name, "first": floor, "end": floor,
                             "panes": [lo, lo]})
            return runs

    def prune(self, lo: int) -> None:
        """Forget the panes below ``lo`` (no later checkpoint needs them)."""
        with self.lock:
            i = int(np.searchsorted(self.index[0], lo))
            self.index = tuple(a[i:] for a in self.index)
            alive = set(np.unique(self.index[3]).tolist())
            self.levels = {k: v for k, v in self.levels.items() if k in alive}

    def restore(self, parts: list[dict], panes: list[np.ndarray], saved_to: int) -> None:
        """After recovery: the index of the units ``parts`` (whose rows' panes were loaded);
        each run counts as one unit, of a level never merged again (it leaves the window)."""
        with self.lock:
            self.index = (np.zeros(0, np.int64),) * 4
            self.levels = {}
            for part, pane in zip(parts, panes, strict=True):
                if not len(pane):
                    continue
                starts = np.flatnonzero(np.r_[True, pane[1:] != pane[:-1]])
                ends = np.r_[starts[1:], len(pane)]
                self.levels[part["first"]] = RESTORED
                self.index = tuple(np.concatenate([a, b]) for a, b in zip(
                    self.index, (pane[starts], part["first"] + starts, part["first"] + ends,
                                 np.full(len(starts), part["first"])), strict=True))
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
