"""The operators above the branches, run in window order on complete windows (DESIGN.md §14).

Each branch (a window aggregation over the source) leaves its complete windows, through
the stateless operators fused above it, at one operator's output.  What reads that output
and is not fused - a join, what is above a join, what is above an edge a p-stream sits on -
runs here, serially, in the order windows complete.

Every batch pushed in carries a **watermark**: every window of that stream ending at or
before it is complete (a batch may be empty: the watermark still advances, so an operator
whose other input is idle learns that no more rows of a window will come).  ``None``: no
progress beyond the rows themselves.

A :class:`JoinState` (the window join of SG3) holds the rows of each input that the other
input has not yet covered, and emits the windows both watermarks passed, in window order.
Its state - those rows and the two watermarks - is what a checkpoint of the join keeps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


@dataclass
class JoinState:
    """A window join's inputs not yet joined: per side, rows (in window order) and the
    watermark; windows up to the smaller watermark are joined and forgotten."""

    op: physical.Operator
    pending: list[list[dict]] = field(default_factory=lambda: [[], []])
    watermarks: list[int] = field(default_factory=lambda: [INT64_MIN, INT64_MIN])
    emitted: int = INT64_MIN  # the watermark of the last output

    def push(self, port: int, cols: dict, watermark: int | None) -> tuple[dict, int] | None:
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
        return self.op.apply(*sides), bound

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


class OperatorGraph:
    """Routes the branches' complete windows through the operators of ``plan.graph`` to the
    sink.  Not thread-safe: the ordered assembly calls it, one task at a time."""

    def __init__(self, plan: physical.PhysicalPlan):
        self.plan = plan
        self.joins = {op.id: JoinState(op) for op in plan.graph if op.kind == "join"}

    def push(self, producer: str, cols: dict, watermark: int | None) -> list[dict]:
        """``producer``'s next complete windows; returns what reaches the sink, in order."""
        out: list[dict] = []
        self._route(producer, cols, watermark, out)
        return out

    def _route(self, producer: str, cols: dict, watermark: int | None, out: list) -> None:
        target = self.plan.operators[producer].output
        if target == "sink":
            if len(cols["window_end"]):
                out.append(cols)
            return
        op = self.plan.operators[target]
        if op.id in self.joins:
            got = self.joins[op.id].push(op.inputs.index(producer), cols, watermark)
            if got is not None:
                self._route(op.id, got[0], got[1], out)
            return
        if not len(cols["window_end"]):
            self._route(op.id, empty_columns(op.node.schema), watermark, out)
            return
        self._route(op.id, op.apply(cols), watermark, out)

    def snapshot(self) -> dict:
        return {k: j.snapshot() for k, j in self.joins.items()}

    def restore(self, snap: dict) -> None:
        for k, s in snap.items():
            self.joins[k].restore(s)
