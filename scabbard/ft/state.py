"""The query's state as an ft-operator: checkpointed and restored (paper §3.2).

After task ``k`` is assembled every window of branch ``b`` ending before its last pane
``L_b`` has been emitted, and what the open windows still need is, per branch, the pane
partials (pane, key, count, int and float partial aggregates) of panes
``L_b - range/slide + 1 .. L_b`` - the paper's *partial window results*.  Above the
branches, a window join holds the rows of each input the other has not covered yet, and
the two watermarks.  That is the whole state: the windows still to come are a function of
it and of the input after task ``k``.  Assembly keeps references to those partials (long
tasks leave them as their tail; short ones add their whole partials), so
``prepare_checkpoint`` is a copy of a few references on the assembly thread (and the
join's rows, concatenated); ``checkpoint`` writes one state p-unit per branch to the
p-stream ``state-<branch>`` and per join input to ``state-<join>-<side>`` of the same
BlockManager, asynchronously.

``load_state`` reads them back (verified segments) for recovery.
"""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np

from scabbard.batch import Batch
from scabbard.engine.tasks import Edges
from scabbard.pog.checkpoint import CheckpointRecord, FTOperator, Snapshot
from scabbard.pog.markers import Marker
from scabbard.pog.punit import Kind, PUnit
from scabbard.schema import Field, Schema
from scabbard.storage import BlockManager


def state_schema(branch, i: int) -> Schema:
    k, ni, nf = branch.key_width, len(branch.iops), len(branch.fops)
    fields = ([Field("pane", "int64")] + [Field(f"k{j}", "int64") for j in range(k)]
              + [Field("cnt", "int64")] + [Field(f"i{j}", "int64") for j in range(ni)]
              + [Field(f"f{j}", "float64") for j in range(nf)])
    return Schema(f"state-{i}", tuple(fields), stream=False)


def join_state_schema(op, side: int) -> Schema:
    """The rows of one input of a window join, as its state stream stores them."""
    node = op.node.left if side == 0 else op.node.right
    return Schema(f"state-{op.id}-{'lr'[side]}", node.schema.fields, stream=False)


class QueryState(FTOperator):
    """Per branch, the pane partials an open window still needs, tracked task by task; the
    operator graph's state (the joins' waiting rows) captured at a marker."""

    def __init__(self, plan, storage: BlockManager):
        super().__init__()
        self.branches, self.bm = plan.branches, storage
        self.joins = [op for op in plan.graph if op.kind == "join"]
        self.schemas = [state_schema(b, i) for i, b in enumerate(self.branches)]
        self.schemas += [join_state_schema(op, s) for op in self.joins for s in (0, 1)]
        self.sids = [storage.stream(s.name, s) for s in self.schemas]
        self.recent: list[list] = [[] for _ in self.branches]
        self.seq, self.last_ts = -1, 0
        self.graph = None  # the engine's operator graph (its state is read at a marker)
        self.clock: dict = {}  # the output's clock after the last assembled task

    # -- tracking (assembly thread) -------------------------------------------------------------
    def after_task(self, r, clock: dict | None = None, graph=None) -> None:
        for i, b in enumerate(self.branches):
            part = r.parts[i]
            if part.long:
                self.recent[i] = [part.tail]
            else:
                lo = part.last_pane - b.panes + 1
                keep = [e for e in self.recent[i] if len(e.pane) and e.pane[-1] >= lo]
                if len(part.head.pane):
                    keep.append(part.head)
                self.recent[i] = keep
        self.seq, self.pv_in, self.last_ts = r.seq, r.end_offset, r.last_ts
        if clock is not None:
            self.clock = clock
        if graph is not None:
            self.graph = graph

    def restore(self, seq: int, input_end: int, last_ts: int, edges: list) -> None:
        self.recent = [[e] for e in edges]
        self.seq, self.pv_in, self.last_ts = seq, input_end, last_ts

    # -- FTOperator -----------------------------------------------------------------------------
    def prepare_checkpoint(self, marker: Marker) -> Snapshot:
        graph = self.graph.snapshot() if self.graph is not None else {}
        joins = [graph[op.id] for op in self.joins]
        return Snapshot(self.seq, self.pv_in, dict(self.clock),
                        [list(r) for r in self.recent] + [j["pending"] for j in joins],
                        {"last_ts": self.last_ts, "checkpoint_id": marker.checkpoint_id,
                         "graph": {op.id: {"watermarks": [int(w) for w in j["watermarks"]],
                                           "emitted": j["emitted"]}
                                   for op, j in zip(self.joins, joins, strict=True)}})

    def _cut(self, i: int, parts: list, last_ts: int) -> Edges:
        b = self.branches[i]
        e = Edges(*(np.concatenate([getattr(p, f) for p in parts]) if parts
                    else np.zeros((0,) + shape, dtype)
                    for f, shape, dtype in (
                        ("pane", (), np.int64), ("keys", (b.key_width,), np.int64),
                        ("cnt", (), np.int64), ("ints", (len(b.iops),), np.int64),
                        ("floats", (len(b.fops),), np.float64))))
        lo = int(np.searchsorted(e.pane, last_ts // b.slide_ms - b.panes + 1))
        return Edges(e.pane[lo:], e.keys[lo:], e.cnt[lo:], e.ints[lo:], e.floats[lo:])

    def _columns(self, i: int, snap: Snapshot) -> tuple:
        """The ``i``-th state stream's columns in the snapshot."""
        if i < len(self.branches):
            e = self._cut(i, snap.parts[i], snap.operator["last_ts"])
            return tuple([e.pane] + [e.keys[:, j] for j in range(e.keys.shape[1])] + [e.cnt]
                         + [e.ints[:, j] for j in range(e.ints.shape[1])]
                         + [e.floats[:, j] for j in range(e.floats.shape[1])])
        j, side = divmod(i - len(self.branches), 2)
        cols = snap.parts[len(self.branches) + j][side]
        return tuple(cols[n] for n in self.schemas[i].names)

    def checkpoint(self, snap: Snapshot) -> tuple[list[dict], list[Future], int]:
        parts, futures, nbytes = [], [], 0
        cid = snap.operator["checkpoint_id"]
        for i, (sid, schema) in enumerate(zip(self.sids, self.schemas, strict=True)):
            first = self.bm.durable_end(sid)
            batch = Batch(schema, tuple(np.ascontiguousarray(c) for c in self._columns(i, snap)),
                          first)
            # cut into p-units that fit the pool's files
            per = max(1, (self.bm.config.file_bytes // 4) // schema.row_bytes)
            for lo in range(0, len(batch), per):
                part = batch.slice(lo, min(len(batch), lo + per))
                unit = PUnit(schema.name, cid, part, kind=Kind.STATE, persistent=True)
                futures.append(self.bm.append(sid, unit.batch, cid, unit.meta_words()))
                nbytes += part.column_bytes
            parts.append({"stream": schema.name, "first": first, "end": first + len(batch)})
        return parts, futures, nbytes

    def _load(self, i: int, rec: CheckpointRecord) -> list[np.ndarray]:
        part = rec.state[i]
        got = list(self.bm.load(self.sids[i], part["first"], part["end"]))
        if sum(len(x) for x in got) != part["end"] - part["first"]:
            raise FileNotFoundError(f"state of checkpoint {rec.id}, {self.schemas[i].name}: "
                                    f"{sum(len(x) for x in got)} of "
                                    f"{part['end'] - part['first']} rows stored")
        return [np.concatenate([x.columns[j] for x in got]) if got else
                (np.zeros((0, 2), np.uint64) if f.dtype == "uuid" else np.zeros(0, f.numpy_dtype))
                for j, f in enumerate(self.schemas[i].fields)]

    def load_state(self, rec: CheckpointRecord) -> tuple[list, dict]:
        """The checkpoint's partials per branch and the operator graph's state (raises
        CorruptSegment/TrimmedError if damaged)."""
        if len(rec.state) != len(self.schemas):
            raise ValueError(f"checkpoint {rec.id} holds {len(rec.state)} state streams, the "
                             f"query {len(self.schemas)}")
        edges = []
        for i, b in enumerate(self.branches):
            cols = self._load(i, rec)
            k, ni, n = b.key_width, len(b.iops), len(cols[0])
            edges.append(Edges(cols[0], _matrix(cols[1:1 + k], n, np.int64), cols[1 + k],
                               _matrix(cols[2 + k:2 + k + ni], n, np.int64),
                               _matrix(cols[2 + k + ni:], n, np.float64)))
        graph = {}
        saved = rec.operator.get("graph", {})
        for j, op in enumerate(self.joins):
            pending = []
            for side in (0, 1):
                i = len(self.branches) + 2 * j + side
                pending.append(dict(zip(self.schemas[i].names, self._load(i, rec), strict=True)))
            graph[op.id] = dict(saved[op.id], pending=pending)
        return edges, graph

    def trim(self, state: list) -> None:
        for sid, part in zip(self.sids, state, strict=True):
            self.bm.trim(sid, part["first"])


def _matrix(cols: list, n: int, dtype) -> np.ndarray:
    return np.stack(cols, axis=1) if cols else np.zeros((n, 0), dtype)
