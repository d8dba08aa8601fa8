"""The query's stateful operators as ft-operators: checkpointed and restored (paper §3.2).

One :class:`~scabbard.pog.checkpoint.FTOperator` per stateful operator, with the operator's
stable id (``window0``, ``join0``, ...):

* :class:`WindowOperator` - a window aggregation over the source.  After task ``k`` is
  assembled every window ending before its last pane ``L`` has been emitted, and what the
  open windows still need is the pane partials (pane, key, count, int and float partial
  aggregates) of panes ``L - range/slide + 1 .. L`` - the paper's *partial window results*.
  Assembly keeps references to those partials (long tasks leave them as their tail; short
  ones add their whole partials), so its snapshot at a marker is a copy of a few
  references; its state p-units go to the p-stream ``state-<id>``.
  In ``incremental`` and ``eventual`` checkpoint mode its closed panes are written once, as
  pane units of the same stream (:mod:`scabbard.ft.panes`), and a checkpoint writes only the
  panes closed since and the open pane's partials.
* :class:`JoinOperator` - a window join: the rows of each input the other has not covered
  yet and the two watermarks, as of Alg. 1's first marker, with the rows recorded on the
  other input until its marker (``state-<id>-l``, ``state-<id>-r``).

:class:`QueryState` is the query's checkpoint as the controller sees it: it collects each
operator's part as the marker reaches it (the windows at the marker's task, the graph's
operators as Alg. 1 completes at each, the sink when the marker passes it) and is complete
when every part is in; ``checkpoint`` writes them all, asynchronously, and ``load_state``
reads them back (verified segments) for recovery.  The record keeps, per operator, its
progress vectors: ``pv_in`` (how far into the input, and into each persisted input
channel, its state reflects) and ``pv_out`` (how far into its persisted output channel).
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future

import numpy as np

from scabbard.engine.assembly import fold_partials
from scabbard.engine.tasks import (
    INT64_MIN,
    Edges,
    columns_edges,
    concat_edges,
    edges_columns,
    partials_schema,
)
from scabbard.ft.panes import MODES, PaneLog, Written, count_panes, write_units
from scabbard.pog.checkpoint import CheckpointRecord, FTOperator, Snapshot
from scabbard.pog.markers import Marker
from scabbard.pog.punit import Dependency
from scabbard.schema import Field, Schema
from scabbard.storage import BlockManager


def state_schema(branch) -> Schema:
    """The pane partials of a window operator, as its state stream stores them."""
    return partials_schema(branch, f"state-{branch.id}")


def join_state_schema(op, side: int) -> Schema:
    """The rows of one input of a window join, as its state stream stores them."""
    node = op.node.left if side == 0 else op.node.right
    return Schema(f"state-{op.id}-{'lr'[side]}", node.schema.fields, stream=False)


def _empty(f: Field) -> np.ndarray:
    return np.zeros((0, 2), np.uint64) if f.dtype == "uuid" else np.zeros(0, f.numpy_dtype)


class _Stored(FTOperator):
    """An ft-operator whose state is a few column sets, one state stream each."""

    def __init__(self, id: str, schemas: list[Schema], storage: BlockManager):
        super().__init__()
        self.id, self.schemas, self.bm = id, schemas, storage
        self.sids = [storage.stream(s.name, s) for s in schemas]

    def write(self, columns: list[tuple], cid: int) -> tuple[list[dict], list[Future], int]:
        """Each column set as state p-units of its stream (cut to fit the pool's files)."""
        parts, futures, nbytes = [], [], 0
        for sid, schema, cols in zip(self.sids, self.schemas, columns, strict=True):
            part, f, n = write_units(self.bm, sid, schema, cols, cid, self.bm.durable_end(sid))
            parts.append(part)
            futures += f
            nbytes += n
        return parts, futures, nbytes

    def read(self, parts: list[dict], cid: int) -> list[list[np.ndarray]]:
        return [read_part(self.bm, sid, schema, part, cid)
                for sid, schema, part in zip(self.sids, self.schemas, parts, strict=True)]

    def trim(self, parts: list[dict]) -> None:
        for sid, part in zip(self.sids, parts, strict=True):
            self.bm.trim(sid, part["first"])


def read_part(bm: BlockManager, sid: int, schema: Schema, part: dict, cid: int) -> list:
    """The columns of one listed range of a state stream (raises if not all stored)."""
    return part_columns(bm.load_bulk(sid, part["first"], part["end"]), schema, part, cid)


def part_columns(got: list, schema: Schema, part: dict, cid: int) -> list:
    """The columns of the batches ``got`` read for one listed range ``part`` (raises if the
    storage did not hold all of it)."""
    if sum(len(x) for x in got) != part["end"] - part["first"]:
        raise FileNotFoundError(f"state of checkpoint {cid}, {schema.name}: "
                                f"{sum(len(x) for x in got)} of "
                                f"{part['end'] - part['first']} rows stored")
    return [np.concatenate([x.columns[j] for x in got]) if got else _empty(f)
            for j, f in enumerate(schema.fields)]


FOLD_ROWS = 1 << 22  # a window operator's partials held (~128 MiB of Darwin's) before a fold


class WindowOperator(_Stored):
    """A window aggregation over the source: the pane partials its open windows need - the
    tasks' own (a snapshot takes them by reference), folded into one row per (pane, group)
    whenever they have doubled since the last fold (and hold :data:`FOLD_ROWS` or more), so
    that a window many tasks span is held as its groups, not as every task's partials.  The
    fold is the engine's own window state read out (``state``, :meth:`Lane.state
    <scabbard.engine.lanes.Lane.state>`: its serial assembler has folded the same partials
    already); where the engine keeps it split, the held partials fed to a fresh one."""

    def __init__(self, branch, storage: BlockManager, mode: str = "full"):
        super().__init__(branch.id, [state_schema(branch)], storage)
        self.branch = branch
        self.recent: list = []
        self.folded = 0  # rows of recent at its last fold
        self.state = None  # what gives the engine's window state (Lane.state), if it can
        self.log = None if mode == "full" else PaneLog(self.schemas[0], storage)
        self.opened = -1  # the input clock of the last eventual step's open part

    def after_task(self, part) -> None:
        if part.long:
            self.recent, self.folded = [part.tail], 0
            return
        lo = part.last_pane - self.branch.panes + 1
        keep = [e for e in self.recent if len(e.pane) and e.pane[-1] >= lo]
        if part.rows:
            keep.append(part.edges())
        self.recent = keep
        rows = sum(len(e.pane) for e in keep)
        if rows >= max(FOLD_ROWS, 2 * self.folded) and len(keep) > 1:
            b = self.branch
            e = self.state() if self.state is not None else fold_partials(
                b, concat_edges(keep, b.key_width, len(b.iops), len(b.fops)), self.folded)
            at = int(np.searchsorted(e.pane, lo))  # panes of windows emitted already: dropped
            self.recent = [Edges(*(x[at:].copy() for x in (e.pane, e.keys, e.cnt, e.ints,
                                                           e.floats))) if at else e]
            self.folded = len(self.recent[0].pane)

    def snapshot(self) -> list:
        return list(self.recent)

    def columns(self, recent: list, last_ts: int) -> tuple:
        """The rows of every pane the open windows need (a full checkpoint's)."""
        return self.rows(recent, last_ts // self.branch.slide_ms - self.branch.panes + 1)

    def rows(self, recent: list, lo: int) -> tuple:
        """The partials of panes ``lo`` and later, as the state stream's columns."""
        b = self.branch
        e = concat_edges([p for p in recent if len(p.pane) and p.pane[-1] >= lo],
                         b.key_width, len(b.iops), len(b.fops))
        return tuple(c[int(np.searchsorted(e.pane, lo)):] for c in edges_columns(e))

    # -- incremental: closed panes once, as pane units ------------------------------------------
    def _bounds(self, last_ts: int) -> tuple[int, int, int]:
        """(first pane an open window needs, the open pane, first pane not yet saved)."""
        last = last_ts // self.branch.slide_ms
        lo = last - self.branch.panes + 1
        saved = self.log.saved_to
        return lo, last, lo if saved is None else max(saved, lo)

    def unsaved(self, last_ts: int) -> int:
        """Closed panes the open windows need that no pane unit holds yet."""
        _, last, todo = self._bounds(last_ts)
        return max(0, last - todo)

    def step(self, recent: list, last_ts: int, clock: int, at: tuple | None = None) -> Written:
        """Save the panes closed since the last save (eventual mode's step); with ``at`` (the
        task assembled last, the last window end its results handed to the sink) the open
        pane's partials after them, a point a recovery may resume from
        (:mod:`scabbard.ft.steppoints`)."""
        _, last, todo = self._bounds(last_ts)
        if todo >= last and (at is None or clock == self.opened):
            return Written()  # nothing closed, and no input since the last open part
        cols = self.rows(recent, min(todo, last))
        cut = int(np.searchsorted(cols[0], last))
        out = self.log.save(tuple(c[:cut] for c in cols), last, clock) if todo < last \
            else Written()
        if at is not None:  # with no pane closed too (a tumbling window's only state)
            self.opened = clock
            out.add(self.log.write_open(tuple(c[cut:] for c in cols), last, clock, *at, last_ts))
        return out

    def write_incremental(self, recent: list, last_ts: int, cid: int, clock: int) -> Written:
        """The checkpoint's part: the closed panes not saved yet as pane units, the open
        pane's partials to ``state-<id>``; it lists the units it relies on."""
        lo, last, todo = self._bounds(last_ts)
        log = self.log
        cols = self.rows(recent, min(todo, last))
        cut = int(np.searchsorted(cols[0], last))
        out = log.save(tuple(c[:cut] for c in cols), last, clock)
        while (merge := log.to_merge(lo, last)) is not None:  # FANOUT units of a level: one
            got = self.rows(recent, merge[0])
            end = int(np.searchsorted(got[0], merge[1]))
            out.add(log.consolidate(tuple(c[:end] for c in got), *merge[:2], clock, merge[2]))
        part, futures, nbytes = log.write_part(tuple(c[cut:] for c in cols), cid)
        out.add(Written(log.listed(lo, last) + [part], futures, nbytes,
                        count_panes(cols[0][cut:])))
        self.log.prune(lo)
        out.futures = self.log.pending()  # the open part, and a step's units listed in flight
        return out

    def edges(self, cols: list[np.ndarray]) -> Edges:
        return columns_edges(self.branch, cols)

    def restore(self, edges: Edges, rec: CheckpointRecord | None = None) -> None:
        self.recent = [edges]
        if self.log is not None and rec is not None:  # the index of the units it listed
            runs = [p for p in rec.state if p["stream"] == self.log.schema.name and "panes" in p]
            at, panes = 0, []
            for p in runs:
                panes.append(edges.pane[at:at + p["end"] - p["first"]])
                at += p["end"] - p["first"]
            self.log.restore(runs, panes, rec.operator["last_ts"] // self.branch.slide_ms)


class SpilledWindow:
    """A window aggregation whose state is held under a memory budget
    (:mod:`scabbard.engine.spill`): its checkpoint is the units of its spill stream
    (:class:`~scabbard.ft.spillstore.DurableSpill`) the engine listed at the marker - spilled
    partitions' units already on disk, the partitions in memory written out then - and
    recovery resumes with every partition spilled at them, read back as windows close."""

    log = None  # no pane units: spilled state is written once already

    def __init__(self, branch, spills):
        self.branch, self.id, self.spills = branch, branch.id, spills
        self.name = f"spill-{branch.id}"

    @property
    def store(self):
        return self.spills(self.branch)

    def after_task(self, part) -> None:  # the state is the engine's, under its budget
        pass

    def step(self) -> Written:
        """Eventual mode's step: the partitions in memory's panes closed since they were last
        written, written now (the next marker lists them; their bytes count in its part)."""
        owner = self.store.owner
        return Written(units=owner.save_closed() if owner is not None else 0)

    def unsaved(self) -> int:
        owner = self.store.owner
        return owner.unsaved_panes() if owner is not None else 0

    def part(self, taken: tuple, cid: int) -> Written:
        """The record's entry: every partition's units, and the writes they wait for."""
        parts, futures, nbytes = taken
        units = [[i, f, e] for i, ranges in sorted(parts.items()) for f, e in ranges]
        entry = {"stream": self.name, "cid": cid, "units": units,
                 "first": min((u[1] for u in units), default=0),
                 "end": max((u[2] for u in units), default=0)}
        return Written([entry], futures, nbytes)

    @staticmethod
    def listed(entry: dict) -> dict[int, list[tuple[int, int]]]:
        parts: dict[int, list] = {}
        for i, f, e in entry["units"]:
            parts.setdefault(int(i), []).append((int(f), int(e)))
        return parts


class JoinOperator(_Stored):
    """A window join: each input's rows not yet joined, and the watermarks."""

    def __init__(self, op, storage: BlockManager):
        super().__init__(op.id, [join_state_schema(op, 0), join_state_schema(op, 1)], storage)
        self.op = op

    def columns(self, snap: dict) -> list[tuple]:
        return [tuple(snap["pending"][side][n] for n in self.schemas[side].names)
                for side in (0, 1)]


class QueryState(FTOperator):
    """The query's checkpoint: every stateful operator's part, collected as the marker
    reaches it (see the module)."""

    def __init__(self, plan, storage: BlockManager, channels: tuple[str, ...] = (),
                 mode: str = "full", spills=None, spilled: tuple[str, ...] = ()):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"checkpoint mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.plan, self.bm, self.mode = plan, storage, mode
        # the branches ``spilled`` hold their state under a budget, in ``spills``' stores
        self.windows = [SpilledWindow(b, spills) if b.id in spilled
                        else WindowOperator(b, storage, mode) for b in plan.branches]
        self.spilled = [w for w in self.windows if isinstance(w, SpilledWindow)]
        self.joins = [JoinOperator(op, storage) for op in plan.graph if op.kind == "join"]
        self.operators: dict[str, _Stored] = {
            o.id: o for o in [*self.windows, *self.joins] if isinstance(o, _Stored)}
        self.channels = tuple(channels)  # the persisted channels (by producer id)
        self.reporting = {op.id for op in plan.graph} | {"sink"}
        self.seq, self.last_ts = -1, 0
        self.graph = None  # the engine's operator graph
        self._parts: dict = {}  # the checkpoint in flight: what reached the marker so far
        self._reached: dict = {}  # (operator, stream) -> the end of its last dependency
        self.stepped = Written()  # eventual mode: the steps' writes since the last record
        # eventual mode: steps write the open pane too, points to resume from (steppoints)
        self.open_parts = False
        self.emitted = INT64_MIN  # the last window end handed to the sink (the listener's)
        self.loaded: dict = {}  # recovery: what load_state read
        self.loaded_spill: dict = {}  # recovery: per spilled window, its partitions' units
        # recovery: the spilled units the record lists, read back and verified behind the run;
        # no checkpoint commits before they are (the record before stays the fallback)
        self.verifying: list[Future] = []
        self.on_damage = lambda cid, err: None  # recovery: marks a record found damaged

    # -- tracking (the assembly's thread) ---------------------------------------------------------
    def window_states(self, states: list) -> None:
        """Per branch, what gives the engine's window state (see :class:`WindowOperator`)."""
        for w, state in zip(self.windows, states, strict=True):
            if isinstance(w, WindowOperator):
                w.state = state

    def after_task(self, r, clock: dict | None = None, graph=None) -> None:
        for w, part in zip(self.windows, r.parts, strict=True):
            w.after_task(part)
        self.seq, self.pv_in, self.last_ts = r.seq, r.end_offset, r.last_ts
        if graph is not None:
            self.graph = graph
        if r.marker is not None:  # the windows took the marker with this task
            pv = {}
            for i, w in enumerate(self.windows):
                top = self.plan.top(i)
                pv[w.id] = {"in": {"input": r.end_offset}, "out": {}}
                if top in self.channels and self.graph is not None:
                    pv[w.id]["out"][top] = self.graph.channels[top].end
            cid = r.marker.checkpoint_id
            self._parts = {"seq": r.seq, "input_end": r.end_offset, "last_ts": r.last_ts,
                           "windows": [w.store.take(cid) if isinstance(w, SpilledWindow)
                                       else w.snapshot() for w in self.windows], "pv": pv,
                           "graph": {}}

    def reached(self, where: str, snapshot, pv: dict) -> None:
        """The marker came on every input of ``where`` (an operator id, or ``sink``)."""
        if where == "sink":
            self._parts["output"] = snapshot
        else:
            self._parts["graph"][where] = snapshot
        self._parts["pv"][where] = pv

    def complete(self) -> bool:
        """Every part of the checkpoint in flight is in."""
        return "windows" in self._parts and self.reporting <= set(self._parts["pv"])

    def restore(self, rec: CheckpointRecord, edges: list,
                fallback: CheckpointRecord | None = None) -> None:
        """Resume from ``rec``: the windows' partials, and where its dependencies reached.
        ``fallback``: the record before it, which GC keeps until a new one commits (a
        spilled window keeps the units it lists as long)."""
        for w, e in zip(self.windows, edges, strict=True):
            if isinstance(w, SpilledWindow):
                w.store.adopt(self.loaded_spill[w.id], rec.id)
                self.verifying.append(w.store.verify_behind(rec.id, self.loaded_spill[w.id],
                                                            self.on_damage))
                entry = fallback and next((p for p in fallback.state if p["stream"] == w.name),
                                          None)
                if entry:
                    w.store.pin(w.listed(entry), fallback.id)
            else:
                w.restore(e, rec)
        self._resumed(rec, rec.seq, rec.input_end, rec.operator["last_ts"])

    def restore_step(self, rec: CheckpointRecord, point) -> None:
        """Resume from an eventual step after ``rec`` (a :class:`~scabbard.ft.steppoints.Point`:
        the one window's state after its task, the pane units it took them from)."""
        w = self.windows[0]
        w.recent, w.folded = [point.edges], 0
        w.log.restore(point.runs, point.panes, point.last_ts // w.branch.slide_ms)
        self._resumed(rec, point.seq, point.input_end, point.last_ts)

    def _resumed(self, rec: CheckpointRecord, seq: int, input_end: int, last_ts: int) -> None:
        self.seq, self.pv_in, self.last_ts = seq, input_end, last_ts
        for unit, deps in rec.operator.get("dependencies", {}).items():
            for d in deps:
                self._reached[(unit, d["stream"])] = d["end"]

    # -- FTOperator -----------------------------------------------------------------------------
    def prepare_checkpoint(self, marker: Marker) -> Snapshot:
        p, self._parts = self._parts, {}
        if "windows" not in p:
            raise RuntimeError(f"checkpoint {marker.checkpoint_id}: no operator took its marker")
        joins = [p["graph"][j.id] for j in self.joins]
        deps = self._dependencies(p["pv"])
        return Snapshot(p["seq"], p["input_end"], dict(p["output"]), p["windows"] + joins,
                        {"last_ts": p["last_ts"], "checkpoint_id": marker.checkpoint_id,
                         "pv": p["pv"],
                         "dependencies": {k: [dataclasses.asdict(d) for d in v]
                                          for k, v in deps.items()},
                         "graph": {j.id: {"watermarks": [int(w) for w in s["watermarks"]],
                                          "emitted": int(s["emitted"])}
                                   for j, s in zip(self.joins, joins, strict=True)}})

    def _dependencies(self, pv: dict) -> dict[str, list[Dependency]]:
        """Per operator (and the sink), the p-units of the streams it reads that this
        checkpoint's state newly depends on (Fig. 4): from where the previous checkpoint's
        reached to where this one's does.  Stateful operators are told (``set_dependencies``);
        the record keeps them all, and GC walks them (:func:`scabbard.ft.channels.release`)."""
        out = {}
        for unit, v in pv.items():
            deps = []
            for name, end in v.get("in", {}).items():
                stream = "input" if name == "input" else f"edge-{name}"
                deps.append(Dependency(stream, self._reached.get((unit, stream), 0), int(end)))
                self._reached[(unit, stream)] = int(end)
            out[unit] = deps
            if unit in self.operators:
                self.operators[unit].set_dependencies(deps)
        return out

    def unsaved_panes(self) -> int:
        """Closed panes the open windows need that no pane unit holds yet (eventual's Q)."""
        return sum(w.unsaved() if isinstance(w, SpilledWindow) else w.unsaved(self.last_ts)
                   for w in self.windows if w.log is not None or isinstance(w, SpilledWindow))

    def step(self) -> Written:
        """Eventual mode's step (on the assembly's thread): every window operator's panes
        closed since the last save, written as pane units now; the next record lists them."""
        out = Written()
        for w in self.windows:
            if isinstance(w, SpilledWindow):
                out.add(w.step())
            elif w.log is not None:
                out.add(w.step(w.recent, self.last_ts, self.pv_in,
                               (self.seq, self.emitted) if self.open_parts else None))
        self.stepped.add(Written(bytes=out.bytes, panes=out.panes, units=out.units))
        return out

    def checkpoint(self, snap: Snapshot) -> tuple[list[dict], list[Future], int]:
        cid, last_ts = snap.operator["checkpoint_id"], snap.operator["last_ts"]
        out = Written()
        for i, w in enumerate(self.windows):
            if isinstance(w, SpilledWindow):
                out.add(w.part(snap.parts[i], cid))
            elif w.log is None:
                cols = w.columns(snap.parts[i], last_ts)
                parts, futures, nbytes = w.write([cols], cid)
                out.add(Written(parts, futures, nbytes, count_panes(cols[0])))
            else:
                out.add(w.write_incremental(snap.parts[i], last_ts, cid, snap.input_end))
        for j, op in enumerate(self.joins):
            out.add(Written(*op.write(op.columns(snap.parts[len(self.windows) + j]), cid)))
        out.futures += self.verifying  # (done ones: nothing to wait for)
        steps, self.stepped = self.stepped, Written()
        snap.operator["written"] = {"mode": self.mode, "panes": out.panes + steps.panes,
                                    "units": out.units + steps.units,
                                    "step_bytes": steps.bytes}
        return out.parts, out.futures, out.bytes + steps.bytes

    def verified(self) -> int:
        """Wait for a recovery's verification of the spilled state it resumed with (raises
        DamagedCheckpoint); the bytes it read.  A run ends with this before its sink commits
        the rest of its output."""
        nbytes = sum(f.result() for f in self.verifying)
        if self.verifying:
            self.loaded["spill_verified_bytes"] = nbytes
        return nbytes

    def _by_operator(self, rec: CheckpointRecord) -> dict[str, list[list[dict]]]:
        """Per operator, per state stream of it, the parts the record lists (a window's pane
        units first, in pane order, then its open panes)."""
        if (self.mode == "full") != (rec.operator.get("written", {}).get("mode", "full") == "full"):
            raise ValueError(f"checkpoint {rec.id} was written in another checkpoint mode "
                             f"than {self.mode}")
        streams: dict[str, list[dict]] = {}
        for p in rec.state:
            streams.setdefault(p["stream"], []).append(p)
        out = {}
        for o in self.operators.values():
            missing = [s.name for s in o.schemas if s.name not in streams]
            if missing:
                raise ValueError(f"checkpoint {rec.id} holds no state stream {missing[0]} "
                                 f"(another query's)")
            out[o.id] = [streams[s.name] for s in o.schemas]
        known = {s.name for o in self.operators.values() for s in o.schemas} \
            | {w.name for w in self.spilled}
        unknown = sorted(set(streams) - known)
        if unknown:  # e.g. "panes-<id>": pane units in a stream of their own, as before 2026-11
            raise ValueError(f"checkpoint {rec.id} lists state in {unknown[0]}, a stream this "
                             f"build does not keep (written by another query or version)")
        return out

    def load_state(self, rec: CheckpointRecord) -> tuple[list, dict]:
        """The checkpoint's partials per window and the graph's state (raises
        CorruptSegment/TrimmedError/FileNotFoundError if damaged).  :attr:`loaded`: bytes,
        panes and pane units read."""
        parts = self._by_operator(rec)
        jobs = []  # (operator, stream index, part): every listed range read at once
        for o in self.operators.values():
            for k, listed in enumerate(parts[o.id]):
                jobs += [(o, k, p) for p in listed]
        # every operator's state p-units, read back at once (recovery's data recovery): the
        # device reads in parallel on the storage's I/O pool, what opening read from memory
        batches = self.bm.load_ranges([(o.sids[k], p["first"], p["end"]) for o, k, p in jobs])
        got: dict = {}
        for (o, k, p), b in zip(jobs, batches, strict=True):
            got.setdefault(o.id, [[] for _ in o.schemas])[k].append(
                part_columns(b, o.schemas[k], p, rec.id))
        cols = {o.id: [[c[0] if len(c) == 1 else np.concatenate(c)  # (one range: as read)
                        for c in zip(*got[o.id][k], strict=True)]
                       for k in range(len(o.schemas))] for o in self.operators.values()}
        edges, self.loaded_spill = [], {}
        for w in self.windows:
            if not isinstance(w, SpilledWindow):
                edges.append(w.edges(cols[w.id][0]))
                continue
            entry = next((p for p in rec.state if p["stream"] == w.name), None)
            if entry is None:
                raise ValueError(f"checkpoint {rec.id} holds no spilled state of {w.id} (a run "
                                 f"without a state memory budget)")
            # read back lazily, as the windows close, and verified behind the run once
            # resumed (restore): only that they are still stored is checked now
            self.loaded_spill[w.id] = w.listed(entry)
            w.store.check(self.loaded_spill[w.id])
            b = w.branch
            edges.append(concat_edges([], b.key_width, len(b.iops), len(b.fops)))
        graph = {}
        saved = rec.operator.get("graph", {})
        for op in self.joins:
            sides = cols[op.id]
            graph[op.id] = dict(saved[op.id], pending=[
                dict(zip(op.schemas[s].names, sides[s], strict=True)) for s in (0, 1)])
        self.loaded = {"bytes": sum(sum(c.nbytes for c in side) for v in cols.values()
                                    for side in v),
                       "panes": sum(count_panes(e.pane) for e in edges),
                       "runs": sum(1 for _, _, p in jobs if "panes" in p and p["end"] > p["first"]),
                       "parts": len(jobs)}
        return edges, graph

    def trim(self, state: list) -> None:
        """GC (Step 7): each state stream below the first offset ``state`` lists in it - a
        window's pane units once they left every window of that record."""
        first: dict[str, int] = {}
        for p in state:
            first[p["stream"]] = min(first.get(p["stream"], p["first"]), p["first"])
        for w in self.spilled:  # what only older checkpoints listed
            for p in state:
                if p["stream"] == w.name:
                    w.store.unpin_below(p["cid"])
        for o in self.operators.values():
            if all(s.name in first for s in o.schemas):  # a window's pane units included
                o.trim([{"first": first[s.name]} for s in o.schemas])
