"""The sequential window state of one branch, for the windows no task computes alone."""

from __future__ import annotations

import numpy as np

from scabbard.engine import physical
from scabbard.engine.tasks import INT64_MIN, BranchPart, Edges
from scabbard.kernels import hashtable as ht
from scabbard.kernels import window as kw


class BranchAssembler:
    """The sequential window state of one branch across tasks.

    Used for the windows no task can compute alone when they cannot be computed
    in parallel: around short tasks, and at the start.  A long task leaves its
    tail here as *pending*; it is loaded into the state only if the next task
    needs the sequential path.
    """

    def __init__(self, branch: physical.Branch):
        self.b = branch
        k = branch.key_width
        ni, nf = len(branch.iops), len(branch.fops)
        self.ws, self.dqi, self.dqf = kw.ws_new(64, ni, nf)
        self.table = ht.new_table(k, 64)
        self.fifo = kw.fifo_new(ni, nf)
        self.out = kw.out_new(k, ni, nf, 1024)
        self.cur = np.array([INT64_MIN], dtype=np.int64)
        self.sel = kw.selection(*branch.select)
        self.pending: tuple[Edges, int] | None = None  # a long task's tail, not yet loaded

    def _feed(self, e: Edges, emit: bool, upto: int, m: int) -> int:
        b = self.b
        (self.ws, self.dqi, self.dqf, self.table, self.fifo, self.out, m) = kw.asm_feed(
            self.ws, self.dqi, self.dqf, self.table, self.fifo, self.out, self.cur, e.pane,
            e.keys, e.cnt, e.ints, e.floats, b.iops, b.fops, b.panes, b.slide_ms, emit, upto, m,
            self.sel)
        return m

    def _raw(self, m: int):
        return tuple(a[:m].copy() for a in self.out)

    def _load_pending(self) -> None:
        """Make the state the window of the pending tail (its windows were emitted already)."""
        if self.pending is None:
            return
        tail, last_pane = self.pending
        self.pending = None
        kw.asm_reset(self.ws, self.dqi, self.dqf, self.fifo)
        self.table = ht.new_table(self.b.key_width, 64)
        self._feed(tail, False, last_pane, 0)

    def task(self, part: BranchPart, emit: bool = True):
        """The windows of a task's ``part`` it could not compute alone, sequentially
        (``emit`` False: only the window state follows - recovery, the windows are stored
        downstream already)."""
        self._load_pending()
        if part.long:
            raw = self._raw(self._feed(part.head, emit, part.first_pane + self.b.panes, 0))
            self.pending = (part.tail, part.last_pane)
            return raw
        return self._raw(self._feed(part.head, emit, part.last_pane, 0))

    def skip(self, part: BranchPart) -> None:
        """The part's leading windows were computed in parallel; keep only its tail."""
        self.pending = (part.tail, part.last_pane)

    def flush(self):
        self._load_pending()
        b = self.b
        if self.cur[0] == INT64_MIN:
            return self._raw(0)
        self.out, m = kw.asm_flush(self.ws, self.dqi, self.dqf, self.table, self.fifo, self.out,
                                   self.cur, b.iops, b.fops, b.panes, b.slide_ms, self.sel)
        return self._raw(m)
