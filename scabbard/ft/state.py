"""The window query as an ft-operator: its state, checkpointed and restored (paper §3.2).

After task ``k`` is assembled every window ending before its last pane ``L``
has been emitted, and what the open windows still need is, per branch, the
pane partials (pane, key, count, int and float partial aggregates) of panes
``L - range/slide + 1 .. L`` - the paper's *partial window results*.  That is
the whole operator state: the windows still to come are a function of it and
of the input after task ``k``.  Assembly keeps references to those partials
(long tasks leave them as their tail; short ones add their whole partials), so
``prepare_checkpoint`` is a copy of a few references on the assembly thread;
``checkpoint`` concatenates them and writes one state p-unit per branch to the
p-stream ``state-<branch>`` of the same BlockManager, asynchronously.

``load_state`` reads them back (verified segments) for recovery.
"""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np

from scabbard.batch import Batch
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


class QueryState(FTOperator):
    """Per branch, the pane partials an open window still needs, tracked task by task."""

    def __init__(self, branches, storage: BlockManager, edges_type):
        super().__init__()
        self.branches, self.bm, self._edges = branches, storage, edges_type
        self.schemas = [state_schema(b, i) for i, b in enumerate(branches)]
        self.sids = [storage.stream(s.name, s) for s in self.schemas]
        self.recent: list[list] = [[] for _ in branches]
        self.seq, self.last_pane, self.last_ts = -1, 0, 0
        self.clock: dict = {}  # the output's clock after the last assembled task

    # -- tracking (assembly thread) -------------------------------------------------------------
    def after_task(self, r, clock: dict | None = None) -> None:
        for i, b in enumerate(self.branches):
            if r.long:
                self.recent[i] = [r.tails[i]]
            else:
                lo = r.last_pane - b.panes + 1
                keep = [e for e in self.recent[i] if len(e.pane) and e.pane[-1] >= lo]
                if len(r.heads[i].pane):
                    keep.append(r.heads[i])
                self.recent[i] = keep
        self.seq, self.pv_in, self.last_pane, self.last_ts = (r.seq, r.end_offset, r.last_pane,
                                                              r.last_ts)
        if clock is not None:
            self.clock = clock

    def restore(self, seq: int, input_end: int, last_pane: int, last_ts: int, edges: list) -> None:
        self.recent = [[e] for e in edges]
        self.seq, self.pv_in, self.last_pane, self.last_ts = seq, input_end, last_pane, last_ts

    # -- FTOperator -----------------------------------------------------------------------------
    def prepare_checkpoint(self, marker: Marker) -> Snapshot:
        return Snapshot(self.seq, self.pv_in, dict(self.clock),
                        [list(r) for r in self.recent],
                        {"last_pane": self.last_pane, "last_ts": self.last_ts,
                         "checkpoint_id": marker.checkpoint_id})

    def _cut(self, i: int, parts: list, last_pane: int):
        b = self.branches[i]
        e = self._edges(*(np.concatenate([getattr(p, f) for p in parts]) if parts
                          else np.zeros((0,) + shape, dtype)
                          for f, shape, dtype in (
                              ("pane", (), np.int64), ("keys", (b.key_width,), np.int64),
                              ("cnt", (), np.int64), ("ints", (len(b.iops),), np.int64),
                              ("floats", (len(b.fops),), np.float64))))
        lo = int(np.searchsorted(e.pane, last_pane - b.panes + 1))
        return self._edges(e.pane[lo:], e.keys[lo:], e.cnt[lo:], e.ints[lo:], e.floats[lo:])

    def checkpoint(self, snap: Snapshot) -> tuple[list[dict], list[Future], int]:
        parts, futures, nbytes = [], [], 0
        cid = snap.operator["checkpoint_id"]
        for i, (sid, schema) in enumerate(zip(self.sids, self.schemas, strict=True)):
            e = self._cut(i, snap.parts[i], snap.operator["last_pane"])
            cols = ([e.pane] + [e.keys[:, j] for j in range(e.keys.shape[1])] + [e.cnt]
                    + [e.ints[:, j] for j in range(e.ints.shape[1])]
                    + [e.floats[:, j] for j in range(e.floats.shape[1])])
            first = self.bm.durable_end(sid)
            batch = Batch(schema, tuple(np.ascontiguousarray(c) for c in cols), first)
            # cut into p-units that fit the pool's files
            per = max(1, (self.bm.config.file_bytes // 4) // schema.row_bytes)
            for lo in range(0, len(batch), per):
                part = batch.slice(lo, min(len(batch), lo + per))
                unit = PUnit(schema.name, cid, part, kind=Kind.STATE, persistent=True)
                futures.append(self.bm.append(sid, unit.batch, cid, unit.meta_words()))
                nbytes += part.column_bytes
            parts.append({"stream": schema.name, "first": first, "end": first + len(batch)})
        return parts, futures, nbytes

    def load_state(self, rec: CheckpointRecord) -> list:
        """The checkpoint's partials per branch (raises CorruptSegment/TrimmedError if damaged)."""
        edges = []
        for i, (sid, part) in enumerate(zip(self.sids, rec.state, strict=True)):
            b = self.branches[i]
            got = list(self.bm.load(sid, part["first"], part["end"]))
            if sum(len(x) for x in got) != part["end"] - part["first"]:
                raise FileNotFoundError(f"state of checkpoint {rec.id}, branch {i}: "
                                        f"{sum(len(x) for x in got)} of "
                                        f"{part['end'] - part['first']} rows stored")
            cols = [np.concatenate([x.columns[j] for x in got]) if got else
                    np.zeros(0, f.numpy_dtype) for j, f in enumerate(self.schemas[i].fields)]
            k, ni, n = b.key_width, len(b.iops), len(cols[0])
            edges.append(self._edges(cols[0], _matrix(cols[1:1 + k], n, np.int64), cols[1 + k],
                                     _matrix(cols[2 + k:2 + k + ni], n, np.int64),
                                     _matrix(cols[2 + k + ni:], n, np.float64)))
        return edges

    def trim(self, state: list) -> None:
        for sid, part in zip(self.sids, state, strict=True):
            self.bm.trim(sid, part["first"])


def _matrix(cols: list, n: int, dtype) -> np.ndarray:
    return np.stack(cols, axis=1) if cols else np.zeros((n, 0), dtype)
