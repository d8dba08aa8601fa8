"""The records a task leaves for the ordered assembly: its result and its pane partials."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from scabbard.schema import Field, Schema

INT64_MIN = np.iinfo(np.int64).min
INT64_MAX = np.iinfo(np.int64).max


@dataclass
class Edges:
    """Pane partials of one branch at a task's edges, keyed (not by task-local gid)."""

    pane: np.ndarray
    keys: np.ndarray
    cnt: np.ndarray
    ints: np.ndarray
    floats: np.ndarray

    def slice(self, lo: int, hi: int | None = None) -> Edges:
        """Rows ``lo`` to ``hi`` (to the end: None), views."""
        return Edges(self.pane[lo:hi], self.keys[lo:hi], self.cnt[lo:hi], self.ints[lo:hi],
                     self.floats[lo:hi])


@dataclass
class BranchPart:
    """One branch's share of a task: its panes, whether it has windows of its own (``long``:
    it spans at least ``Branch.long_panes``, a window and two panes; then ``internal`` holds
    them, through the branch's fused operators), and the pane partials at its two edges."""

    first_pane: int
    last_pane: int
    long: bool
    head: Edges | None  # None: ``split`` alone holds them (a task under a state budget's)
    tail: Edges
    internal: dict | None
    # the head's partials by key partition (a partitioned assembly's; split by the fragment,
    # on a worker, so the serial assembly need not)
    split: list[Edges] | None = None

    @property
    def rows(self) -> int:
        """The head's pane partials."""
        return len(self.head.pane) if self.head is not None else \
            sum(len(e.pane) for e in self.split)

    def edges(self) -> Edges:
        """The head's partials in pane order (from ``split`` where the fragment kept only it:
        each partition's rows of a pane in partition order)."""
        if self.head is not None:
            return self.head
        s = self.split[0]
        return merge_by_pane(self.split, s.keys.shape[1], s.ints.shape[1], s.floats.shape[1])


@dataclass
class TaskResult:
    seq: int
    tuples: int
    ingest_time: float
    parts: list[BranchPart]  # per branch of the plan
    end_offset: int = 0  # input offset one past the task's batch
    last_ts: int = 0
    marker: object = None  # a checkpoint marker that followed this task's batch
    rows: dict | None = None  # a stateless query's: the batch's surviving rows, in order
    staged: object = None  # its input as a UnitWriter stored it (assembled once durable)
    empty: bool = False  # nothing of its input survived push-up: no windows, no parts
    waiting: bool = False  # the assembly waits for its input to be durable (kicked then)

    @property
    def long(self) -> bool:
        """Every branch has windows of its own in this task."""
        return all(p.long for p in self.parts)


def task_edges(partials, lo: int, hi: int) -> Edges:
    pane, gid, cnt, iv, fv, gkeys = partials
    return Edges(pane[lo:hi], take_rows(gkeys, gid[lo:hi]), cnt[lo:hi], iv[lo:hi], fv[lo:hi])


def take_rows(a: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``a[rows]``: the rows of ``a`` (a matrix, or a vector) ``rows`` names, in their order.
    ``np.take`` along the first axis - indexing a matrix by an array gathered 10-12 ns a row
    here (three int64 key words, 700 k rows), ``take`` 1.3-2.8: the task edges of SG2's
    sliding windows, 10 % of its workers' time."""
    return np.take(a, rows, axis=0)


def empty_edges(key_width: int, ints: int, floats: int) -> Edges:
    return Edges(np.zeros(0, np.int64), np.zeros((0, key_width), np.int64),
                 np.zeros(0, np.int64), np.zeros((0, ints), np.int64),
                 np.zeros((0, floats), np.float64))


# -- pane partials as stored columns (state p-units: checkpoints, pane units, spilled state) --
def partials_schema(branch, name: str) -> Schema:
    """A branch's pane partials as a stream stores them: pane, key words, count, int and
    float partial aggregates, one column each."""
    k, ni, nf = branch.key_width, len(branch.iops), len(branch.fops)
    fields = ([Field("pane", "int64")] + [Field(f"k{j}", "int64") for j in range(k)]
              + [Field("cnt", "int64")] + [Field(f"i{j}", "int64") for j in range(ni)]
              + [Field(f"f{j}", "float64") for j in range(nf)])
    return Schema(name, tuple(fields), stream=False)


def edges_columns(e: Edges) -> tuple:
    """``e`` as the columns of :func:`partials_schema`."""
    return tuple([e.pane] + [e.keys[:, j] for j in range(e.keys.shape[1])] + [e.cnt]
                 + [e.ints[:, j] for j in range(e.ints.shape[1])]
                 + [e.floats[:, j] for j in range(e.floats.shape[1])])


def _matrix(cols: list, n: int, dtype) -> np.ndarray:
    if len(cols) == 1 and cols[0].flags.c_contiguous:  # one column: a view, not a copy
        return cols[0].reshape(n, 1)
    return np.stack(cols, axis=1) if cols else np.zeros((n, 0), dtype)


def columns_edges(branch, cols) -> Edges:
    """The columns of :func:`partials_schema` as :class:`Edges` (the inverse of
    :func:`edges_columns`)."""
    k, ni, n = branch.key_width, len(branch.iops), len(cols[0])
    return Edges(cols[0], _matrix(cols[1:1 + k], n, np.int64), cols[1 + k],
                 _matrix(cols[2 + k:2 + k + ni], n, np.int64),
                 _matrix(cols[2 + k + ni:], n, np.float64))


def concat_edges(parts: list[Edges], key_width: int, ints: int, floats: int) -> Edges:
    """Several :class:`Edges` (each in pane order, one after the other) as one."""
    if not parts:
        return empty_edges(key_width, ints, floats)
    if len(parts) == 1:
        return parts[0]
    return Edges(*(np.concatenate([getattr(p, f) for p in parts])
                   for f in ("pane", "keys", "cnt", "ints", "floats")))


def merge_by_pane(parts: list[Edges], key_width: int, ints: int, floats: int) -> Edges:
    """Several :class:`Edges`, each in pane order, as one in pane order (stable: a pane's rows
    in the parts' order)."""
    e = concat_edges(parts, key_width, ints, floats)
    if len(e.pane) > 1 and np.any(e.pane[1:] < e.pane[:-1]):
        order = np.argsort(e.pane, kind="stable")
        e = Edges(*(getattr(e, f.name)[order] for f in fields(Edges)))
    return e


def unit_runs(units: list[tuple[int, int]], rows: int) -> list[list[tuple[int, int]]]:
    """Offset ranges of stored units, in order, in runs of consecutive ones: a run closed once
    it holds ``rows`` rows or more (what a spilled partition's reload or compaction reads at
    once, :meth:`~scabbard.engine.compaction.Compacting._gather`; what a spill read has in
    flight together, :meth:`scabbard.ft.spillstore.DiskSpill.read`)."""
    runs, n = [[]], 0
    for first, end in units:
        if n >= rows:
            runs, n = [*runs, []], 0
        runs[-1].append((first, end))
        n += end - first
    return runs if runs[0] else []


def front_outputs(n: int, k: int, ni: int, nf: int) -> tuple[np.ndarray, ...]:
    """Room for a front kernel's output of ``n`` rows: timestamps, ``k`` key words, ``ni``
    int and ``nf`` float aggregate inputs per row."""
    return (np.empty(n, dtype=np.int64), np.empty((n, k), dtype=np.int64),
            np.empty((n, ni), dtype=np.int64), np.empty((n, nf), dtype=np.float64))
