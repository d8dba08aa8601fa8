"""The records a task leaves for the ordered assembly: its result and its pane partials."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

INT64_MIN = np.iinfo(np.int64).min


@dataclass
class Edges:
    """Pane partials of one branch at a task's edges, keyed (not by task-local gid)."""

    pane: np.ndarray
    keys: np.ndarray
    cnt: np.ndarray
    ints: np.ndarray
    floats: np.ndarray


@dataclass
class TaskResult:
    seq: int
    tuples: int
    ingest_time: float
    first_pane: int
    last_pane: int
    long: bool  # has windows of its own (then ``internal`` holds them)
    heads: list[Edges]
    tails: list[Edges]
    internal: dict | None
    end_offset: int = 0  # input offset one past the task's batch
    last_ts: int = 0
    marker: object = None  # a checkpoint marker that followed this task's batch


def task_edges(partials, lo: int, hi: int) -> Edges:
    pane, gid, cnt, iv, fv, gkeys = partials
    return Edges(pane[lo:hi], gkeys[gid[lo:hi]], cnt[lo:hi], iv[lo:hi], fv[lo:hi])
