"""A spilled key partition's units compacted on a thread of their own (Darwin's state under a
budget, :mod:`scabbard.engine.spill`).

While a partition is spilled, each task's share of it goes to the spill store as units; at
many keys a share holds a partial per tuple, so the units would grow to every tuple since the
spill (DARWIN at 10^7 keys: 9 partials a key a window).  Once they hold :data:`COMPACT` times
the rows they held when last written whole, the units are read back and combined per (pane,
group) (:func:`~scabbard.engine.assembly.combine_partials`) on the compaction thread, while
the engine goes on; the next time the assembly's thread touches the partition it writes the
combined rows in place of the units they were read from (:meth:`Compacting._applied`) - the
units written since stay behind them.  What a reload reads and holds, and what a checkpoint
lists, stay within a few times the state.

Only the assembly's thread writes to the store and changes a partition's units; the
compaction thread reads (the read releases the units it read: a checkpoint that listed them
keeps them) and combines.  Where the assembly needs a partition's units as they are - a
reload, a checkpoint's list, a long task's tail that replaces them - a compaction not begun
is cancelled (the units stay; it is asked for again at the next share) and one under way is
waited for (:meth:`Compacting._settle`).  Once the units written behind a compaction hold
its bound again, the share's task waits for it (back-pressure): a partition's units never
hold much more than twice the bound.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from scabbard.engine.assembly import combine_partials
from scabbard.engine.tasks import Edges, unit_runs

# a spilled partition's units are compacted (read back, combined per (pane, group), written
# again) once they hold this many times the rows they held when last written whole
COMPACT = 4
# (3 to 5 times, by the partition: keys spread evenly over the partitions fill them alike, and
# a bound the same for all would have every partition compacted within a few tasks, one burst
# of 64 - DARWIN at 10^7 keys, ~0.1 s each - where different bounds spread them out)
# a share's task waits for its partition's compaction under way once the units written since
# it was asked for hold this fraction of the bound: what a reload reads stays within about
# (1 + 1/BEHIND) times what it would with every compaction done at once.  DARWIN within
# 16 MiB (`scabbard bench state --systems engine-spill`): at 4, as slow as compacting on the
# assembly's thread (window p95 at 10^7 keys 445 ms against 452-492); at 1, 254 ms, and
# 30-70 MB more at the peak
BEHIND = 1
# compactions asked for and not yet applied, at most: one running and one waiting its turn.
# A compaction done waits to be written until its partition's next share; with no bound, a
# share's task waiting for its own (BEHIND) behind a queue of others held all of theirs -
# DARWIN at 10^7 keys: 12 at once, 59 MB
QUEUED = 2
# a spilled partition's units are read back and combined a run at a time, each of about
# this many times the rows they held when last written whole, or half the budget's bytes if
# more (:meth:`Compacting._gather`): memory holds one run, the rows combined so far and the
# combine's working copy of both (~80 bytes a row for DARWIN), not every unit.  DARWIN within
# 16 MiB at 10^7 keys: a reload read up to ~1 M rows (32 MB) and its combine held 80 MB;
# in runs, the combine works ~1.5 times as much (at 10^6 keys the units fit one run)
GATHER = 2


class Compacting:
    """The compaction of :class:`~scabbard.engine.spill.SpillingAssembler`'s spilled
    partitions (see the module): ``self.spilled`` (index -> ``Spilled``), ``self.store``,
    ``self.unit_rows``, ``self.unit_bytes``, ``self.budget``, ``self.b`` (the branch) and
    ``self.stats`` are the assembler's."""

    _compactor: ThreadPoolExecutor | None = None
    _queued: tuple = ()  # the partitions whose compaction is asked for and not applied, in order

    def _bound(self, i: int) -> int:
        """The rows spilled partition ``i``'s units may hold before they are compacted:
        :data:`COMPACT` times what they held when last written whole, give or take a
        quarter by the partition (see :data:`COMPACT`)."""
        s = self.spilled[i]
        return int(COMPACT * (0.75 + 0.5 * i / len(self.parts)) * max(s.base, self.unit_rows))

    def _compact_if_grown(self, i: int) -> None:
        """Spilled partition ``i``'s units, once they hold more than its bound
        (:meth:`_bound`), compacted on the compaction thread; if a compaction is under way
        and the units written since hold a :data:`BEHIND`-th of the bound, it is waited for
        first."""
        for j in self._queued:  # (those done: their rows leave memory)
            self._applied(j)
        s = self.spilled[i]
        if s.compacting is not None:
            behind = sum(end - first for first, end in s.units[s.compacting[0]:])
            if behind <= self._bound(i) // BEHIND:
                return
            self._settle(i, cancel=False)
        if s.rows() <= self._bound(i):
            return
        if len(self._queued) >= QUEUED:  # asked for again at its next share, unless its
            if s.rows() <= 2 * self._bound(i):  # units hold twice the bound: then the
                return  # oldest compaction is waited for
            self._settle(self._queued[0], cancel=False)
        if self._compactor is None:
            self._compactor = ThreadPoolExecutor(1, thread_name_prefix="spill-compact")
        units, cur, base = list(s.units), s.cur, s.base
        s.compacting = (len(units), self._compactor.submit(self._compact, units, cur, base))
        self._queued = (*self._queued, i)

    def _compact(self, units: list, cur: int, base: int) -> Edges | None:
        """On the compaction thread: ``units`` read and combined."""
        return self._gather(units, cur, base)

    def _gather(self, units: list, cur: int, base: int, waiting: list = ()) -> Edges | None:
        """A spilled partition's ``units`` and ``waiting`` shares as one row per (pane,
        group) (:meth:`_combined`): the units read a run at a time (:data:`GATHER` times
        ``base`` rows, or half the budget's bytes if more), each run combined with the rows
        before it - memory holds one run and the rows combined so far (and the combine's
        working copy of them), not every unit at once.  On the read-ahead's and the
        compaction's threads."""
        most = max(GATHER * max(base, self.unit_rows),
                   self.unit_rows * (self.budget // 2) // self.unit_bytes)
        runs = unit_runs(units, most) or [[]]  # (no unit: the waiting shares alone)
        acc = None
        for k, run in enumerate(runs):  # (the waiting shares with the last run)
            pieces = [acc, self.store.read(run) if run else None,
                      *(waiting if k + 1 == len(runs) else ())]
            acc = self._combined(cur, base, [x for x in pieces if x is not None])
        return acc

    def _applied(self, i: int) -> None:
        """Spilled partition ``i``'s compaction, if it is done: its combined rows written in
        place of the units it read (the units written since stay behind them)."""
        s = self.spilled.get(i)
        if s is None or s.compacting is None or not s.compacting[1].done():
            return
        n, fut = s.compacting
        self._unqueue(s, i)
        e = fut.result()  # (a failure - a damaged unit, a full disk - is the engine's)
        s.units = (self.store.write(e) if e is not None else []) + s.units[n:]
        s.base = len(e.pane) if e is not None else 0
        self.stats["compactions"] += 1

    def _settle(self, i: int, cancel: bool = True) -> None:
        """Spilled partition ``i``'s units as they are to be read or listed: its compaction
        cancelled if it has not begun (and ``cancel``), else waited for and applied."""
        s = self.spilled.get(i)
        if s is None or s.compacting is None:
            return
        if cancel and s.compacting[1].cancel():
            self._unqueue(s, i)
            return
        s.compacting[1].exception()  # (waits; a failure is raised as it is applied)
        self._applied(i)

    def _unqueue(self, s, i: int) -> None:
        """Spilled partition ``i`` (``s``) has no compaction asked for any more."""
        s.compacting = None
        self._queued = tuple(j for j in self._queued if j != i)

    def _settle_all(self) -> None:
        for i in list(self.spilled):
            self._settle(i)

    def _combined(self, cur: int, base: int, pieces: list[Edges]) -> Edges | None:
        """The pieces of a spilled partition that stopped at pane ``cur`` - its units (read)
        and waiting shares, every task's share since it was last written whole (``base``
        rows) - as one row per (pane, group) the open windows need (the pieces are not
        concatenated), or None if none."""
        lo = cur - self.b.panes + 1  # panes before it no open window needs (an older unit's)
        pieces = [e.slice(int(np.searchsorted(e.pane, lo))) for e in pieces]
        pieces = [e for e in pieces if len(e.pane)]
        return combine_partials(self.b, pieces, base) if pieces else None

    def _stop_compacting(self) -> None:
        if self._compactor is not None:
            self._compactor.shutdown(wait=True, cancel_futures=True)
            self._compactor = None
        self._queued = ()
