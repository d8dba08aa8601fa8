"""The records a task leaves for the ordered assembly: its result and its pane partials."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


@dataclass
class BranchPart:
    """One branch's share of a task: its panes, whether it has windows of its own (``long``:
    it spans more than two windows' worth of panes; then ``internal`` holds them, through the
    branch's fused operators), and the pane partials at its two edges."""

    first_pane: int
    last_pane: int
    long: bool
    head: Edges
    tail: Edges
    internal: dict | None
    # the head's partials by key partition (a partitioned assembly's; split by the fragment,
    # on a worker, so the serial assembly need not)
    split: list[Edges] | None = None


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

    @property
    def long(self) -> bool:
        """Every branch has windows of its own in this task."""
        return all(p.long for p in self.parts)


def task_edges(partials, lo: int, hi: int) -> Edges:
    pane, gid, cnt, iv, fv, gkeys = partials
    return Edges(pane[lo:hi], gkeys[gid[lo:hi]], cnt[lo:hi], iv[lo:hi], fv[lo:hi])


def empty_edges(key_width: int, ints: int, floats: int) -> Edges:
    return Edges(np.zeros(0, np.int64), np.zeros((0, key_width), np.int64),
                 np.zeros(0, np.int64), np.zeros((0, ints), np.int64),
                 np.zeros((0, floats), np.float64))
