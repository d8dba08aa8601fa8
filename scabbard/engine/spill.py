"""Window state under a memory budget: key partitions spilled as state p-units.

Darwin (CIDR 2022, §3-4) keeps a stream engine going when its state outgrows memory, by
moving state between memory and the local disk in *groups* - whole panes, whole key
partitions - rather than key by key, because a window touches its state in a known order.
Here a branch's sequential window state (:mod:`scabbard.engine.assembly`) is split by a hash
of the group keys into :data:`PARTS` partitions (as the key-partitioned assembly splits them),
and ``EngineConfig.state_memory`` bounds the bytes their arrays hold:

* **spill**: when the partitions in memory hold more than the budget, the largest ones are
  written out - the pane partials of their windows (:func:`export`: one row per group and
  pane, the partition's whole window state) as state p-units of the branch's spill store -
  the port :class:`~scabbard.engine.ports.SpillStore`; :mod:`scabbard.ft.spillstore` keeps
  them in a BlockManager p-stream, the same rows as a checkpoint's - and their arrays are
  dropped;
* **while spilled**, a partition's share of each task's partials is kept as long as the task
  closes no pane of it (no window of it ends): small shares wait in memory, then go to the
  stream as units of their own.  A tumbling 60 s window (Darwin's micro-benchmark) closes
  a pane once a minute, so between two closes its state is written once and read once;
* **compaction** (:mod:`scabbard.engine.compaction`): at many keys a share holds a partial
  per tuple, so a spilled partition's units would grow to every tuple since the spill; once
  they hold 3 to 5 times (by the partition) the rows they held when last written whole,
  they are read back and combined per (pane, group) on a thread of their own, and written
  again in their place.  What a reload reads and holds, and what a checkpoint lists, stay
  within a few times the state;
* **reload**: a task that closes panes needs the partition's windows: its units are read
  back a run at a time (the store reads runs of adjacent units at once), each combined with
  the rows before into one row per (pane, group) (:mod:`scabbard.kernels.combine`,
  :meth:`~scabbard.engine.compaction.Compacting._gather`), and fed into a fresh state
  without emitting (the windows they close were emitted before the spill), then the task's
  share runs as usual.
  Spilled partitions are reloaded and run one at a time, so memory holds the budget plus
  one partition, never the whole state; the partition read back starts with room for its
  combined rows and the task's share, and a spilled one keeps an empty state of a few rows;
* **read ahead**: the units of the next partition to reload are read and combined on a
  thread of their own while the one before runs (the first's while the partitions in memory
  run), in the order the windows need them - memory holds one partition's combined rows
  more, and the combine's work is off the assembly's thread;
* the units a reload consumed are released (the stream is trimmed below the oldest unit
  still needed);
* **emit**: a task that closes one window hands its rows on partition by partition as each
  is run (:meth:`SpillingAssembler.pieces`, in the order the merged window would have), so
  no partition's buffers wait for the others and no merged copy of the window is made; so
  does the end of the stream's open window when it is the only one (a tumbling window's:
  :meth:`SpillingAssembler.flush_pieces`).

The budget covers the window state's arrays (capacity, as the process's resident memory sees
them) and the shares waiting in memory; the rest of the engine - tasks in flight, input
batches, result rows - is a fixed overhead beside it.  Results are those of the unlimited
run, whatever the budget (tests).

**Checkpoints** (fault tolerance, :mod:`scabbard.ft.spillstore`): the same units are the
state's checkpoint.  At a marker (:meth:`SpillingAssembler.mark`) a spilled partition writes
its waiting shares and lists its units - already on disk, not written again - and a
partition in memory is written out as units (a copy: it stays in memory); the store keeps
what the checkpoint lists until a newer one no longer needs it.  With incremental (and
eventual) checkpoints (``store.incremental``) a partition in memory writes its closed panes
once - a unit kept (:class:`Saved`) while an open window needs it, listed again by every
record after, reused by a spill - and only its open panes at each marker; eventual mode's
steps write the panes closed since (:meth:`SpillingAssembler.save_closed`).  Recovery
(:meth:`SpillingAssembler.resume`) starts with every partition spilled at the units the
checkpoint listed, so nothing is read before the windows need it and memory stays within the
budget while the input is replayed.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from scabbard.engine.assembly import BranchAssembler, PartitionedAssembler, merge_windows
from scabbard.engine.compaction import Compacting
from scabbard.engine.ports import SpillStore
from scabbard.engine.tasks import (
    INT64_MIN,
    BranchPart,
    Edges,
    concat_edges,
)

PARTS = 64  # key partitions of a branch's state under a budget
# a spilled partition's shares kept in memory up to this many bytes at least - up to a
# quarter of the budget over all partitions: the unit written then is larger, and a large
# state's stream holds fewer segments (DARWIN, 10 M keys, 2.3 GB spilled under 256 MiB: 27 k
# segments of 64 KiB, whose headers opening the storage reads - 4.6 s - and which the
# checkpoint records list - 0.6 MB of JSON each)
WAITING = 64 << 10
# the smallest budget: every partition's waiting shares, twice (the working set of a
# reload - one partition - comes on top, as the run's fixed overhead)
MIN_STATE_MEMORY = 2 * PARTS * WAITING
def assembler_bytes(a: BranchAssembler) -> int:
    """Bytes the arrays of one partition's window state hold (their capacity)."""
    return sum(x.nbytes for group in (a.ws, a.dqi, a.dqf, a.table, a.fifo, a.out)
               for x in group)


@dataclass
class Saved:
    """A partition in memory's closed panes already written (incremental checkpoints): every
    closed pane below ``upto`` its open windows need is in ``units`` - offset ranges, each
    with the panes ``[lo, hi)`` it holds."""

    upto: int
    units: list = field(default_factory=list)  # (first, end, first pane, end pane)

    def ranges(self) -> list[tuple[int, int]]:
        return [(f, e) for f, e, _, _ in self.units]


@dataclass
class Spilled:
    """A partition on disk: the open pane it stopped at, its units, its waiting shares, and
    the rows its units held when last written whole (by a spill or a compaction)."""

    cur: int
    units: list = field(default_factory=list)
    waiting: list = field(default_factory=list)
    waiting_bytes: int = 0
    base: int = 0
    compacting: tuple | None = None  # (units read, future): engine/compaction.py

    def rows(self) -> int:
        return sum(end - first for first, end in self.units)


class SpillingAssembler(Compacting, PartitionedAssembler):
    """A branch's key-partitioned window state held within ``budget`` bytes (see the module).

    Same interface as :class:`BranchAssembler`.  ``stats``: spills, reloads, bytes written and
    read back, the largest state held in memory."""

    def __init__(self, branch, parts: int, pool, budget: int, threads: int = 1,
                 open_store=None):
        super().__init__(branch, parts, pool)
        if budget < MIN_STATE_MEMORY:
            raise ValueError(f"a state memory budget of {budget:,} bytes is too small to hold "
                             f"even one partition's working set (at least "
                             f"{MIN_STATE_MEMORY >> 20} MiB per window branch)")
        if open_store is None:
            raise ValueError("a state memory budget needs a spill store: EngineConfig(spill=...), "
                             "e.g. scabbard.ft.spillstore.disk_spill(folder)")
        self.budget, self.threads, self.open_store = budget, max(1, threads), open_store
        self.unit_bytes = max(WAITING, budget // (4 * parts))  # see WAITING
        k, ni, nf = branch.key_width, len(branch.iops), len(branch.fops)
        self.unit_rows = self.unit_bytes // (8 * (2 + k + ni + nf))  # a unit's partials
        self.store: SpillStore | None = None
        self.spilled: dict[int, Spilled] = {}
        self.saved: dict[int, Saved] = {}  # partitions in memory: closed panes written once
        # what one partial row can add: a window entry and a group (state, keys, table
        # slots), doubled as arrays grow by doubling
        self.row_bytes = 2 * (8 * (3 + ni + nf) + 8 * (2 + ni + 2 * nf) + 8 * (k + 4))
        self.grown = 0
        self.stats = {"spills": 0, "reloads": 0, "compactions": 0, "peak_bytes": 0,
                      "budget": budget}
        self._reader: ThreadPoolExecutor | None = None  # reads the next partition ahead
        self.upto = INT64_MIN  # the pane the last task closed the panes before

    # -- the budget ----------------------------------------------------------------------------
    def held(self) -> tuple[list[int], int]:
        """Bytes per partition in memory (0 if spilled), and the waiting shares' bytes."""
        sizes = [0 if i in self.spilled else assembler_bytes(a) for i, a in enumerate(self.parts)]
        return sizes, sum(s.waiting_bytes for s in self.spilled.values())

    def _enforce(self, force: bool = False) -> None:
        """Spill the largest partitions while memory holds more than the budget (down to half
        of it: arrays grow by doubling, so the partitions left may together double before
        the next check).  Checked once the partials fed since the last check could have
        added a sixteenth of the budget."""
        if not force and self.grown * self.row_bytes < self.budget // 16:
            return
        self.grown = 0
        sizes, waiting = self.held()
        total = sum(sizes) + waiting
        self.stats["peak_bytes"] = max(self.stats["peak_bytes"], total)
        if total <= self.budget * 3 // 4:
            return
        for i in np.argsort(sizes)[::-1]:
            if total <= self.budget // 2 or sizes[i] == 0:
                break
            total -= sizes[i] - self._spill(int(i))

    def _spill(self, i: int) -> int:
        """Partition ``i`` to disk; the bytes its fresh (empty) state holds."""
        a = self.parts[i]
        state = a.partials()
        self.parts[i] = fresh = self._fresh()
        if not len(state.pane):  # an empty window: only its arrays' room goes
            fresh.cur[0] = a.cur[0]
            self._forget(i)
            return assembler_bytes(fresh)
        units, _ = self._write(i, state)
        self.saved.pop(i, None)  # its closed panes' units are the spilled partition's now
        self.spilled[i] = Spilled(int(a.cur[0]), units, base=len(state.pane))
        self.stats["spills"] += 1
        return assembler_bytes(fresh)

    def _fresh(self, rows: int = 0) -> BranchAssembler:
        """An empty partition with room for ``rows`` pane partials (a spilled one's: none -
        its arrays are 64 partitions' overhead beside the budget - a reloaded one's: the rows
        it reads and the task's share, so that it does not grow to twice them by doubling)."""
        groups = rows // self.b.panes  # a tumbling window's partials are its groups
        a = BranchAssembler(self.b, groups=max(16, groups), rows=max(16, rows))
        a.copy = False
        return a

    def _wait(self, i: int, e: Edges) -> None:
        """A task's share ``e`` of spilled partition ``i`` (it closes none of its panes)."""
        if not len(e.pane):
            return
        self._applied(i)
        s = self.spilled[i]
        cols = (e.pane, e.keys, e.cnt, e.ints, e.floats)
        size = sum(x.nbytes for x in cols)
        if not s.waiting and size >= self.unit_bytes:  # a unit of its own at once
            s.units += self.store.write(e)
            self._compact_if_grown(i)
            return
        # a view of the task's split columns: a copy, so that it holds none of the rest
        s.waiting.append(Edges(*(x.copy() for x in cols)))
        s.waiting_bytes += size
        if s.waiting_bytes >= self.unit_bytes:
            b = self.b
            s.units += self.store.write(concat_edges(s.waiting, b.key_width, len(b.iops),
                                                     len(b.fops)))
            s.waiting, s.waiting_bytes = [], 0
            self._compact_if_grown(i)

    def _read(self, i: int) -> Future:
        """Spilled partition ``i``'s units and waiting shares, read and combined on the
        reader thread (:meth:`_gather`)."""
        if self._reader is None:
            self._reader = ThreadPoolExecutor(1, thread_name_prefix="spill-read")
        s = self.spilled[i]
        return self._reader.submit(self._gather, list(s.units), s.cur, s.base, list(s.waiting))

    def _reloaded(self, indices: list[int], shares: dict[int, int] | None = None):
        """The spilled partitions ``indices`` back in memory one after the other, as the
        caller iterates (it runs each before it asks for the next); the units of each are
        read while the caller works on the one before - the first's from this call on.
        ``shares``: the rows the caller feeds each after (a task's).  Their compactions
        not begun are cancelled first (a reload combines the units anyway; one done would
        wait to be written while they are reloaded)."""
        for i in indices:
            self._settle(i)
        ahead = self._read(indices[0]) if indices else None

        def each(ahead):
            for k, i in enumerate(indices):
                e = ahead.result()
                ahead = self._read(indices[k + 1]) if k + 1 < len(indices) else None
                a = self._reload(i, e, (shares or {}).get(i, 0))
                del e  # (fed: not held while the caller runs the partition)
                yield i, a
        return each(ahead)

    def _reload(self, i: int, e: Edges | None, share: int = 0) -> BranchAssembler:
        """Partition ``i`` back in memory: ``e``, its units and waiting shares combined
        (:meth:`_read`), fed to a fresh state that closes the panes before the one it
        stopped at without emitting.  DARWIN at 10^7 keys: 156 k groups a partition."""
        s = self.spilled.pop(i)
        old = self.parts[i]  # a spilled partition's: an empty state, fed nothing since
        assert old.pending is None and old.cur[0] == INT64_MIN, "a spilled partition was fed"
        self.parts[i] = a = self._fresh((len(e.pane) if e is not None else 0) + share)
        if e is not None:
            a._feed(e, False, s.cur, 0)
        if e is None and a.cur[0] < s.cur:  # an empty partition of a checkpoint: the open
            a.cur[0] = s.cur  # pane only
        self.stats["reloads"] += 1
        return a

    # -- checkpoints ---------------------------------------------------------------------------------
    def _open(self) -> SpillStore:
        if self.store is None:
            self.store = self.open_store(self.b)
            self.store.attach(self)
        return self.store

    def mark(self, marker) -> None:
        """The state as of ``marker`` (after the marked task) to the store, per key partition:
        a spilled one's units (its waiting shares written first), a partition in memory
        written out one at a time (it stays in memory)."""
        self._distribute()
        store, b = self._open(), self.b
        parts, copies = {}, []
        for i, a in enumerate(self.parts):
            self._settle(i)
            s = self.spilled.get(i)
            if s is not None:
                if s.waiting:
                    s.units += store.write(concat_edges(s.waiting, b.key_width, len(b.iops),
                                                        len(b.fops)))
                    s.waiting, s.waiting_bytes = [], 0
                parts[i] = list(s.units)
            else:
                parts[i], written = self._write(i, a.partials())
                copies += written
        store.snapshot(marker, parts)
        store.release(copies)  # the engine needs no copy: the checkpoint keeps them
        self._enforce(force=True)  # (a long task's tail, distributed, may be over the budget)

    def _write(self, i: int, e: Edges) -> tuple[list, list]:
        """Partition ``i``'s window state ``e`` (in memory) to the store: the units that hold
        it, and those of them written now that nothing keeps (the open panes').  With
        incremental checkpoints (``store.incremental``) its closed panes are written once -
        those since the last write become a unit of their own, kept while an open window
        needs them - and only the open panes' rows are written every time."""
        store = self._open()
        if not store.incremental:
            written = store.write(e) if len(e.pane) else []
            return written, written
        cut, _ = self._save(i, e)
        written = store.write(e.slice(cut)) if cut < len(e.pane) else []
        return self.saved[i].ranges() + written, written

    def _save(self, i: int, e: Edges) -> tuple[int, int]:
        """Write partition ``i``'s closed panes ``e`` holds that no unit holds yet (panes
        below :attr:`upto`, none of them changes again), forget the units no open window
        needs; the row where ``e``'s open panes start, and the units written."""
        lo = self._needed()
        saved = self.saved.setdefault(i, Saved(lo))
        upto = max(saved.upto, self.upto)  # (never below what is written already)
        start = int(np.searchsorted(e.pane, max(saved.upto, lo)))
        cut = int(np.searchsorted(e.pane, upto))
        written = self.store.write(e.slice(start, cut)) if cut > start else []
        saved.units += [(f, end, int(e.pane[start]), int(e.pane[cut - 1]) + 1)
                        for f, end in written]
        saved.upto = upto
        gone = [u for u in saved.units if u[3] <= lo]
        if gone:
            saved.units = [u for u in saved.units if u[3] > lo]
            self.store.release([u[:2] for u in gone])
        return cut, len(written)

    def _needed(self) -> int:
        """The first pane an open window needs (no task yet: the first there is)."""
        return max(self.upto, INT64_MIN + self.b.panes) - self.b.panes + 1

    def _forget(self, i: int) -> None:
        """Partition ``i``'s closed panes' units are not its any more."""
        saved = self.saved.pop(i, None)
        if saved is not None and saved.units:
            self.store.release(saved.ranges())

    def save_closed(self) -> int:
        """Eventual checkpoints' step (between two markers, on the assembly's thread): every
        partition in memory's panes closed since its last write, written now; the units.
        Not after a long task: its tail is the whole state, not distributed yet (loading it
        here would hold it all in memory, over the budget) - the next marker writes it."""
        if not getattr(self._open(), "incremental", False) or self.pending is not None:
            return 0
        n = 0
        for i, a in enumerate(self.parts):
            saved = self.saved.get(i)
            if i in self.spilled or a.pending is not None or (
                    saved is not None and saved.upto >= self.upto):
                continue
            n += self._save(i, a.partials())[1]
        return n

    def unsaved_panes(self) -> int:
        """The most closed panes a partition in memory holds that no unit does (eventual
        checkpoints' Q; 0 after a long task, whose tail the next marker writes)."""
        if self.pending is not None:
            return 0
        lo = self._needed()
        saved = [self.saved[i].upto if i in self.saved else lo
                 for i in range(len(self.parts)) if i not in self.spilled]
        return max([self.upto - max(lo, s) for s in saved] + [0])

    def resume(self, parts: dict, last_pane: int) -> None:
        """Start from a checkpoint's state (:meth:`mark`): every partition spilled at the
        units listed for it, the open pane ``last_pane`` (the checkpoint's)."""
        self._open()
        self._settle_all()
        self.pending = None
        self.spilled = {i: Spilled(last_pane, [tuple(r) for r in parts.get(i, ())])
                        for i in range(len(self.parts))}
        for s in self.spilled.values():
            s.base = s.rows()
        self.saved = {}
        self.parts = [self._fresh() for _ in self.parts]  # every one on disk
        self.upto = last_pane

    # -- the assembler's interface -----------------------------------------------------------------
    def _distribute(self) -> None:
        super()._distribute()
        for i in [i for i in self.spilled if self.parts[i].pending is not None]:
            self._settle(i)
            s = self.spilled.pop(i)  # a long task's tail is the whole state: the spill is old
            self.store.release(s.units)
        for i in [i for i in self.saved if self.parts[i].pending is not None]:
            self._forget(i)  # (so are the closed panes written before it)

    def skip(self, part: BranchPart) -> None:
        super().skip(part)
        self.upto = part.last_pane

    def _run(self, indices: list[int], fn) -> dict[int, tuple]:
        """``fn(i)`` for the partitions ``indices``, spread over ``threads`` (a group each)."""
        groups = [indices[j::self.threads] for j in range(self.threads)]
        groups = [g for g in groups if g]
        if not groups:
            return {}

        def some(g):
            return {i: fn(i) for i in g}
        later = [self.pool.submit(some, g) for g in groups[1:]] if self.pool is not None \
            else []
        out = some(groups[0]) if self.pool is not None else {
            i: fn(i) for g in groups for i in g}
        for f in later:
            out.update(f.result())
        return out

    def task(self, part: BranchPart, emit: bool = True):
        """A task's windows, as one set of rows (see :meth:`_slices`, :meth:`_pieces`)."""
        raws = []
        for p in self._slices(part):
            got = list(self._pieces(p, emit))
            raws.append(merge_windows(got) if got else
                        tuple(c[:0].copy() for c in self.parts[0].out))  # all on disk
        if len(raws) == 1:
            return raws[0]
        return tuple(np.concatenate([r[c] for r in raws]) for c in range(len(raws[0])))

    def streams(self, part: BranchPart) -> bool:
        """Whether :meth:`pieces` gives ``part``'s windows in the order :meth:`task` would: a
        short task that closes at most one window end (every row of it one window's)."""
        return not part.long and part.last_pane - self.upto <= 1

    def pieces(self, part: BranchPart):
        """The windows of a task that :meth:`streams`, key partition by key partition as each
        is run, in :meth:`task`'s order: a reloaded partition's rows leave before the next
        partition comes back, so a window of many keys is never in memory whole.  Each piece
        in arrays of its own (a partition's rows are views of buffers it uses again)."""
        for p in self._slices(part):
            for raw in self._pieces(p, True):
                yield tuple(c.copy() for c in raw)

    def _slices(self, part: BranchPart):
        """A short task whose partials could add more than an eighth of the budget to the
        partitions in memory, in slices of its partials (each closing the panes before the
        next slice's first: the same windows), the budget enforced after each; else the
        task.  (A spilled partition's share waits, within its own bound, or is reloaded and
        run alone, the budget enforced after it.)"""
        n = part.rows
        rows = max(1, self.budget // 16 // self.row_bytes)
        if part.long or n <= rows:
            yield part
            return
        self._distribute()
        split = self._split_of(part, keep=True)  # (short: the slices or the whole use it)
        if sum(len(e.pane) for i, e in enumerate(split) if i not in self.spilled) <= rows:
            yield part
            return
        # the partials in pane order, each partition's rows of a pane in partition order (as
        # BranchPart.edges): a slice of them is a range of each partition's own rows
        owner = np.repeat(np.arange(len(split)), [len(e.pane) for e in split])
        panes = np.concatenate([e.pane for e in split])
        order = np.argsort(panes, kind="stable")
        owners, at = owner[order], [np.zeros(len(split), np.int64)]
        for lo in range(rows, n, rows):  # each partition's rows before each cut
            at.append(at[-1] + np.bincount(owners[lo - rows:lo], minlength=len(split)))
        at.append(np.array([len(e.pane) for e in split]))
        for k in range(len(at) - 1):
            lo, hi = at[k], at[k + 1]
            cut = int(hi.sum())
            last = part.last_pane if cut == n else int(panes[order[cut]])
            yield BranchPart(part.first_pane, last, False, None, part.tail, None,
                             [e.slice(a, b) for e, a, b in zip(split, lo, hi, strict=True)])

    def _pieces(self, part: BranchPart, emit: bool):
        """Each key partition's windows of ``part`` in partition order (none where it has
        no rows): the partitions in memory run at once, then each spilled one whose windows
        end is reloaded, run, and held to the budget, one at a time."""
        self._distribute()
        heads = self._split_of(part)

        def run(i: int):
            a = self.parts[i]
            raw = a.task(BranchPart(part.first_pane, part.last_pane, part.long, heads[i],
                                    part.tail, None), emit)
            a.pending = None
            return raw
        later = []
        for i, s in list(self.spilled.items()):
            if not part.long and part.last_pane <= s.cur:
                self._wait(i, heads[i])  # no window of it ends: it stays on disk
            else:
                later.append(i)
        later.sort()
        reloaded = self._reloaded(later, {i: len(heads[i].pane) for i in later})
        raws = self._run([i for i in range(len(self.parts))
                          if i not in self.spilled], run)
        back = set(later)
        for i in range(len(self.parts)):
            if i in back:  # one at a time: the budget plus one partition in memory
                j, _ = next(reloaded)
                assert j == i
                raw = run(i)
            else:
                raw = raws.pop(i, None)
            if raw is not None and len(raw[1]):
                yield raw
            if i in back:
                self._enforce(force=True)
        self.upto = part.last_pane
        if part.long:
            self.pending = (part.tail, part.last_pane)
        self.grown += part.rows
        self._enforce()

    def flush(self):
        """The end of the stream: the windows every partition holds, merged in window order."""
        return merge_windows(list(self._flushed()))

    def flushes_in_pieces(self) -> bool:
        """Whether :meth:`flush_pieces` gives the end's windows in :meth:`flush`'s order: a
        tumbling window's (every partition holds at most the one window the last pane is
        in - each partition's windows close with the stream's time, spilled or not)."""
        return self.b.panes == 1

    def flush_pieces(self):
        """The end of the stream's windows key partition by key partition, each reloaded,
        flushed and let go before the next comes back - a window of many keys is never in
        memory whole, as with :meth:`pieces`.  Only where :meth:`flushes_in_pieces`: a
        piece holding another window than the first's is an error of the engine's."""
        end = None
        for raw in self._flushed():
            if not len(raw[1]):
                continue
            ends = np.unique(raw[1])
            if end is None:
                end = ends[0]
            if len(ends) != 1 or ends[0] != end:
                raise AssertionError(f"the end of the stream's windows in pieces: a partition "
                                     f"holds windows ending at {ends.tolist()}, not {end}")
            yield raw

    def _flushed(self):
        """Each partition's windows at the end of the stream, in partition order, as views of
        buffers no one uses again: the spilled ones reloaded in turn, each partition replaced
        by an empty one once flushed (its memory goes)."""
        self._distribute()
        reloaded = self._reloaded(sorted(self.spilled))
        for i in range(len(self.parts)):
            if i in self.spilled:
                next(reloaded)
            self._forget(i)
            raw = self.parts[i].flush()
            self.parts[i] = self._fresh()
            yield raw

    def close(self) -> None:
        self._stop_compacting()
        if self._reader is not None:
            self._reader.shutdown()
            self._reader = None
        if self.store is not None:
            self.stats.update(spilled_bytes=self.store.bytes_written,
                              reloaded_bytes=self.store.bytes_read)
            self.store.close()
            self.store = None
