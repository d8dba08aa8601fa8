"""Where the engine core meets what wraps it (docs/design.md): typed records and small ports.

The core (dispatcher, workers, ordered assembly) knows nothing of files.  Persistence and
fault tolerance (:mod:`scabbard.ft`) plug in here:

* a :class:`TaskFeed` is what the dispatcher reads - a source, or input persisted before it
  is processed, or stored input replayed after a crash;
* a :class:`UnitWriter` (a feed's ``writer``) persists a task's input from the worker that
  runs it, in task order, before its results may be assembled;
* an :class:`AssemblyListener` hears of every task in task order once its windows were
  emitted, and may attach a marker to a task before it is dispatched (checkpoints, GC);
* a sink that is a :class:`ClockedWriter` receives each result batch with its clock;
* a :class:`Resume` starts the assembly where a checkpoint left it;
* a :class:`SpillStore` keeps a window operator's state beyond its memory budget
  (``EngineConfig.spill``, a factory of one per window operator; :mod:`scabbard.ft.spillstore`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from scabbard.batch import Batch
from scabbard.schema import Schema


@dataclass(frozen=True, slots=True)
class Task:
    """One batch for the fragment function, and where it came from."""

    batch: Batch
    ingest_time: float  # time.perf_counter() units: when its (median) tuple arrived
    source_tuples: int | None = None  # the source tuples it stands for, if fewer survived
    source_end: int | None = None  # the source offset one past it (None: ``batch.end``)
    seq: int = 0  # the feed's own numbering
    stored: tuple | None = None  # the batch's columns compressed, for a feed that persists
    # the worker runs push-up on it and stores what is left through the feed's ``writer``
    # (a UnitWriter) before the fragment; its results are assembled once that is durable
    persist: bool = False


class TaskFeed(Protocol):
    """What the dispatcher reads, in order."""

    schema: Schema
    batch_rows: int
    exhausted: bool  # the stream ended (it was not stopped early)

    def peek(self) -> Batch: ...

    def tasks(self) -> Iterator[Task]: ...

    def stop(self) -> None: ...


class Staged(Protocol):
    """A task's input as a :class:`UnitWriter` stored it."""

    batch: Batch  # what the fragment reads: after push-up, at its offsets in the stream
    done: object  # a concurrent.futures.Future: resolved once it is durable (or failed)


class UnitWriter(Protocol):
    """Persists each task's input from the worker that runs it (a feed's ``writer``): its
    push-up, codecs and segment made on the worker's thread, in parallel, and its place in
    the stream taken in the feed's task order."""

    def write(self, seq: int, batch: Batch, reduce) -> Staged:
        """The feed's task ``seq`` (``batch`` as the source gave it; ``reduce``: push-up's
        batch -> batch, or None): returns once it is staged - every earlier task's input
        staged before it - with the batch the fragment reads.  Its results are assembled
        only once ``done``."""

    def assembled(self, staged: Staged) -> None:
        """The task whose input ``staged`` holds was assembled (in task order)."""

    def stop(self) -> None:
        """The run is over: a write waiting for its turn gives up."""


class AssemblyListener(Protocol):
    """Hears of every task once assembled, in task order; may mark tasks at dispatch."""

    align: bool  # the dispatcher waits at a marked task until it is assembled (a barrier)

    def start(self, running, states: list) -> None:
        """The run starts; ``running()`` is False once it failed; ``states``: per branch,
        what gives its window state as pane partials when called on the assembly's thread
        between tasks (:meth:`Lane.state <scabbard.engine.lanes.Lane.state>`), or None where
        the engine keeps it split."""

    def marker(self) -> object | None:
        """Before each task is dispatched: a marker for it to carry, or None."""

    def assembled(self, result, clock: dict, graph) -> None:
        """Task ``result`` was assembled and its windows emitted; ``clock`` is the output's
        ``{"input_end", "window_end"}`` after it; ``graph`` the operator graph
        (:class:`~scabbard.engine.graph.OperatorGraph`), whose ``snapshot()`` is its state
        now."""

    def pumped(self, result, clock: dict) -> None:
        """Task ``result``'s results were handed to the sink (the operator graph moved
        after it); ``clock`` is the output's clock after them."""

    def reached(self, where: str, marker, snapshot, pv: dict) -> None:
        """``marker`` came on every input of ``where`` - an operator of the graph, or
        ``"sink"`` (every result before the marker was emitted) - whose ``snapshot`` (an
        operator's state at the first marker, with the channel state recorded after it; the
        output's clock for the sink) and ``pv`` (its progress in persisted channels:
        :func:`~scabbard.engine.graph.progress`) belong to the marker's checkpoint (Alg. 1)."""

    def dropped(self, marker) -> None:
        """``marker`` never reached the windows: its task had no tuples left after push-up
        and no task came after it before the run ended (nothing of it was taken)."""

    def stop(self, failed: bool) -> None:
        """The run ends (``failed``: with an error); may raise its own error."""


@runtime_checkable
class ClockedWriter(Protocol):
    """A sink that stores each result batch with the clock of what it reflects.  The clock's
    ``window_end`` is the output's position after the batch: its last window's end, or for a
    stateless query its last row's input offset + 1; ``ends`` gives each row's position
    when the batch has no ``window_end`` column (a stateless query's)."""

    def write_clocked(self, batch: Batch, clock: dict, ends=None) -> None: ...


@dataclass(frozen=True)
class Resume:
    """Start as if task ``seq`` had just been assembled: its input ended at ``input_end``, its
    last tuple's event time was ``last_ts`` (each branch's last pane follows from it),
    ``edges`` (per branch) are the pane partials the open windows still need, ``graph`` the
    state of the operators above the branches (:meth:`OperatorGraph.snapshot`); ``clock`` is
    the output's clock at that point."""

    seq: int
    input_end: int
    last_ts: int
    edges: list
    clock: dict
    graph: dict = field(default_factory=dict)
    # per branch id whose state was spilled (a budget): per key partition, the units of the
    # branch's SpillStore that hold its state - read back when its first window closes
    spilled: dict = field(default_factory=dict)


class SpillStore(Protocol):
    """Where a window operator's state beyond its memory budget goes
    (:mod:`scabbard.engine.spill`): pane partials (:class:`~scabbard.engine.tasks.Edges`, in
    pane order) written as units and read back by their ranges, once."""

    bytes_written: int
    bytes_read: int
    # a checkpoint writes a partition in memory's closed panes once (its engine keeps their
    # units and lists them again) and its open panes every time; else the whole partition
    incremental: bool

    def attach(self, owner) -> None:
        """The engine's state that writes here (``owner.save_closed()``: its partitions in
        memory's closed panes written now - an eventual checkpoint's step)."""

    def write(self, e) -> list[tuple[int, int]]:
        """Append ``e``; the ranges that hold it."""

    def read(self, ranges: list[tuple[int, int]]):
        """The units ``ranges`` back, verified, as one ``Edges``; they are released."""

    def release(self, ranges: list[tuple[int, int]]) -> None:
        """The units ``ranges`` are not needed any more."""

    def snapshot(self, marker, parts: dict[int, list[tuple[int, int]]]) -> None:
        """The window state as of ``marker`` (a checkpoint's): per key partition, the units
        that hold it.  A store under fault tolerance keeps them until a newer checkpoint
        no longer needs them; a scratch store never sees a marker."""

    def close(self) -> None:
        """Remove everything the store holds."""
