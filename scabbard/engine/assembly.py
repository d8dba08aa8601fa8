"""The sequential window state of one branch, for the windows no task computes alone."""

from __future__ import annotations

import numpy as np

from scabbard import timers
from scabbard.engine import physical
from scabbard.engine.tasks import INT64_MIN, BranchPart, Edges, take_rows
from scabbard.kernels import assembler as ka
from scabbard.kernels import combine as kc
from scabbard.kernels import hashtable as ht
from scabbard.kernels import rows as kr
from scabbard.kernels import window as kw
from scabbard.kernels.aggregate import key_ids


def at_once(pool, fn, args: list[tuple]) -> list:
    """``fn(*a)`` for every ``a`` of ``args`` at once: the first on the calling thread, the
    others on ``pool`` (their CPU time counted as ``partition``); the results in order."""
    def timed(*a):
        span = timers.start()
        try:
            return fn(*a)
        finally:
            timers.stop(span, "partition", 0)
    later = [pool.submit(timed, *a) for a in args[1:]]
    first = fn(*args[0])
    return [first] + [f.result() for f in later]


def windows_between(b: physical.Branch, tail: Edges, head: Edges, lo: int, hi: int,
                    key_dtypes=None) -> tuple:
    """Branch ``b``'s windows ending at panes ``lo..hi`` from one long task's ``tail`` and
    the next long task's ``head``: the windows neither task computes alone, independent of
    every other task (``key_dtypes``: typed keys, see
    :func:`scabbard.kernels.window.windows_from_partials`)."""
    gid, gkeys = key_ids(np.concatenate([tail.keys, head.keys]))
    return kw.windows_from_partials(
        (np.concatenate([tail.pane, head.pane]), gid, np.concatenate([tail.cnt, head.cnt]),
         np.concatenate([tail.ints, head.ints]), np.concatenate([tail.floats, head.floats]),
         gkeys), b.iops, b.fops, b.panes, b.slide_ms, lo, hi, b.select, key_dtypes)


class BranchAssembler:
    """The sequential window state of one branch across tasks.

    Used for the windows no task can compute alone when they cannot be computed
    in parallel: around short tasks, and at the start.  A long task leaves its
    tail here as *pending*; it is loaded into the state only if the next task
    needs the sequential path.
    """

    def __init__(self, branch: physical.Branch, groups: int = 64, rows: int = 1024):
        """Room for ``groups`` groups and ``rows`` pane partials and result rows before the
        arrays grow (a partition reloaded from disk: what it reads; a spilled one's: none)."""
        self.b = branch
        k = branch.key_width
        ni, nf = len(branch.iops), len(branch.fops)
        self.ws, self.dqi, self.dqf = kw.empty_window_state(groups, ni, nf)
        self.table = ht.empty_key_table(k, groups)
        self.fifo = ka.empty_pane_fifo(ni, nf, rows)
        self.out = kr.empty_result_rows(k, ni, nf, rows)
        self.cur = np.array([INT64_MIN], dtype=np.int64)
        self.sel = kr.selection(*branch.select)
        self.pending: tuple[Edges, int] | None = None  # a long task's tail, not yet loaded
        self.copy = True  # rows returned in arrays of their own (else views of `out`)

    def _feed(self, e: Edges, emit: bool, upto: int, m: int) -> int:
        b = self.b
        (self.ws, self.dqi, self.dqf, self.table, self.fifo, self.out, m) = ka.assemble_partials(
            self.ws, self.dqi, self.dqf, self.table, self.fifo, self.out, self.cur, e.pane,
            e.keys, e.cnt, e.ints, e.floats, b.iops, b.fops, b.panes, b.slide_ms, emit, upto, m,
            self.sel)
        return m

    def _raw(self, m: int):
        if not self.copy:  # a partition's: merged (copied) before the buffers are used again
            return tuple(a[:m] for a in self.out)
        return tuple(a[:m].copy() for a in self.out)

    def _load_pending(self) -> None:
        """Make the state the window of the pending tail (its windows were emitted already)."""
        if self.pending is None:
            return
        tail, last_pane = self.pending
        self.pending = None
        ka.reset_assembly(self.ws, self.dqi, self.dqf, self.fifo)
        self.table = ht.empty_key_table(self.b.key_width, tail_groups(tail.pane))
        self._feed(tail, False, last_pane, 0)

    def task(self, part: BranchPart, emit: bool = True):
        """The windows of a task's ``part`` it could not compute alone, sequentially
        (``emit`` False: only the window state follows - recovery, the windows are stored
        downstream already)."""
        self._load_pending()
        if part.long:
            raw = self._raw(self._feed(part.edges(), emit, part.first_pane + self.b.panes, 0))
            self.pending = (part.tail, part.last_pane)
            return raw
        return self._raw(self._feed(part.edges(), emit, part.last_pane, 0))

    def skip(self, part: BranchPart) -> None:
        """The part's leading windows were computed in parallel; keep only its tail."""
        self.pending = (part.tail, part.last_pane)

    def partials(self) -> Edges:
        """The window state as pane partials: one row per (pane, group) of its windows, in
        pane order (what feeding them to a fresh state rebuilds)."""
        self._load_pending()
        return Edges(*ka.pane_fifo_partials(self.fifo, self.table))

    def flush(self):
        self._load_pending()
        b = self.b
        if self.cur[0] == INT64_MIN:
            return self._raw(0)
        self.out, m = ka.flush_windows(self.ws, self.dqi, self.dqf, self.table, self.fifo,
                                       self.out, self.cur, b.iops, b.fops, b.panes, b.slide_ms,
                                       self.sel)
        return self._raw(m)


def tail_groups(pane: np.ndarray) -> int:
    """Room for the groups of pane partials (in pane order) from the start: their rows over
    their panes - every group in each pane, at least (a window of 10 M groups, a recovery's
    restored one, loaded in 3.3-3.6 s grown from 64 slots, 1.6-2.1 s sized)."""
    n = len(pane)
    panes = 1 + int(np.count_nonzero(pane[1:] != pane[:-1])) if n else 1
    return max(64, n // panes)


def fold_partials(branch: physical.Branch, e: Edges, rows: int = 0) -> Edges:
    """Pane partials (in pane order) folded into one row per (pane, group): what feeding them
    to a fresh window state keeps of them - the same windows from fewer rows (the tasks'
    partials a checkpoint keeps of a window many tasks span).  Panes older than the windows
    of the last pane need are dropped.  ``rows``: about the rows it will give (the last
    fold's), the combiner's room from the start."""
    folded = combine_partials(branch, [e], rows)
    if not len(folded.pane):
        return folded
    lo = int(folded.pane[-1]) - branch.panes + 1
    return folded if folded.pane[0] >= lo else folded.slice(int(np.searchsorted(folded.pane, lo)))


def combine_partials(branch: physical.Branch, pieces: list[Edges], groups: int = 0) -> Edges:
    """The pane partials of ``pieces`` (one after the other) combined into one row per
    (pane, group), in pane order (:mod:`scabbard.kernels.combine`): what a window state fed
    them holds, from as many rows as it has groups.  ``groups``: about the rows it will
    give."""
    out = Edges(*kc.combine_partials([(e.pane, e.keys, e.cnt, e.ints, e.floats)
                                      for e in pieces], branch.iops, branch.fops, groups))
    if len(out.pane) > 1 and not bool(np.all(out.pane[1:] >= out.pane[:-1])):
        order = np.argsort(out.pane, kind="stable")
        out = Edges(*(take_rows(x, order) for x in (out.pane, out.keys, out.cnt, out.ints,
                                                    out.floats)))
    return out


def partition_columns(branch: physical.Branch) -> np.ndarray | None:
    """The key words a branch's groups are partitioned by, or None if it cannot be: all of
    its keys; a fused per-window count's keys (each of its values must live in one partition,
    whose count is then complete); nothing for a global aggregate (one group)."""
    if branch.key_width == 0:
        return None
    if branch.select[0] == kr.ROLLUP_COUNT:
        return np.array(branch.select[2:], dtype=np.int64)
    return np.arange(branch.key_width, dtype=np.int64)


def merge_windows(raws: list[tuple]) -> tuple:
    """The partitions' window rows as one, in window order (each partition's are): window by
    window, each partition's rows of it (:func:`scabbard.kernels.assembler.merge_rows`, one
    pass).  Always arrays of their own (the partitions' may be views of buffers they use
    again)."""
    raws = [r for r in raws if len(r[1])] or raws[:1]
    if len(raws) == 1:
        return tuple(c.copy() for c in raws[0])
    return ka.merge_rows(*(tuple(np.ascontiguousarray(r[c]) for r in raws) for c in range(6)))


def split_edges(e: Edges, cols: np.ndarray, parts: int) -> list[Edges]:
    """``e``'s pane partials by partition (:func:`scabbard.kernels.assembler.partition_rows`),
    each in pane order: each column gathered once in partition order, the partitions views of
    its slices (who keeps one past the task copies it: it holds the whole gathered column)."""
    order, starts = ka.partition_rows(e.keys, cols, parts)
    pane, keys, cnt, ints, floats = (take_rows(x, order)
                                     for x in (e.pane, e.keys, e.cnt, e.ints, e.floats))
    return [Edges(pane[lo:hi], keys[lo:hi], cnt[lo:hi], ints[lo:hi], floats[lo:hi])
            for lo, hi in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True)]


def split_head(part, cols: np.ndarray, parts: int, alone: bool = False) -> None:
    """``part``'s head by partition (:func:`split_edges`) into ``part.split``; ``alone``: the
    split alone holds them then (``head`` None: a task in flight keeps one copy of its
    partials, not two - a spilling assembly's, which reads nothing else)."""
    part.split = split_edges(part.head, cols, parts)
    if alone:
        part.head = None


class PartitionedAssembler:
    """A branch's sequential window state split into partitions by a hash of the group keys
    (PipeFabric's partitioned parallelism).

    Each partition is a :class:`BranchAssembler` over its own groups; a task's pane partials
    are split between them and the partitions run at once, one on the calling thread and the
    others on ``pool``.  Every partition closes the same panes for a task, so the task's end is
    each one's punctuation: an idle partition (no partial of the task) still moves its windows
    on, and the merge takes the partitions' rows in window-end order once all have reached
    it.  Same interface as :class:`BranchAssembler`.
    """

    def __init__(self, branch: physical.Branch, parts: int, pool):
        cols = partition_columns(branch)
        if cols is None or parts < 2:
            raise ValueError(f"{branch.id}: partitioned assembly needs group keys and 2+ parts")
        self.b, self.cols, self.pool = branch, cols, pool
        self.parts = [BranchAssembler(branch) for _ in range(parts)]
        for a in self.parts:
            a.copy = False

        # a long task's tail (or a checkpoint's), split between the partitions only if a
        # later task needs the sequential path
        self.pending: tuple[Edges, int] | None = None

    def _distribute(self) -> None:
        if self.pending is None:
            return
        tail, last_pane = self.pending
        self.pending = None
        for a, e in zip(self.parts, self._split(tail), strict=True):
            a.pending = (e, last_pane)

    def _split(self, e: Edges) -> list[Edges]:
        return split_edges(e, self.cols, len(self.parts))

    def _split_of(self, part: BranchPart, keep: bool = False) -> list[Edges]:
        """``part``'s head by partition: split by the fragment, on a worker, if it could;
        ``keep``: a split made here stays on ``part`` (not for a long task's: it would hold
        its head twice while it waits for the next task)."""
        if part.split is not None and len(part.split) == len(self.parts):
            return part.split
        split = self._split(part.edges())
        if keep:
            part.split = split
        return split

    def _each(self, fn, *per_part) -> list:
        """``fn(assembler, *args)`` for every partition at once; their results in order."""
        return at_once(self.pool, fn, list(zip(self.parts, *per_part, strict=True)))

    def task(self, part: BranchPart, emit: bool = True):
        self._distribute()

        def run(a, head):
            raw = a.task(BranchPart(part.first_pane, part.last_pane, part.long, head, part.tail,
                                    None), emit)
            a.pending = None  # a long task's tail stays whole here until it is needed
            return raw
        heads = self._split_of(part)
        raw = merge_windows(self._each(run, heads))
        if part.long:
            self.pending = (part.tail, part.last_pane)
        return raw

    def skip(self, part: BranchPart) -> None:
        self.pending = (part.tail, part.last_pane)

    def flush(self):
        self._distribute()
        return merge_windows(self._each(BranchAssembler.flush))
