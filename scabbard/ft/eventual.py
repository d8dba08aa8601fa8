"""Eventual checkpoints (``--checkpoint-mode eventual``): CEC's continuous checkpointing.

Continuous eventual checkpointing (CEC, the seed) checkpoints each window's
state on its own, a little at a time: a *step* every CI milliseconds, so that over a
*period* CP every window is checkpointed, and two bounds that force work when exceeded -
Q, the windows not yet checkpointed, and U, the tuples recovery would have to replay.  Here,
on top of pane units (:mod:`scabbard.ft.panes`):

* a **step** (every ``step_ms`` = CI, on the assembly's thread right after a task, so it
  sees a consistent window state) writes the panes closed since the last save as pane
  units - no marker, no sink, no record: closed panes never change, so they need no cut;
* a **record** - the consistent cut recovery resumes from (marker, the open panes'
  partials, the join state, the sink's epoch) - comes every period CP (the controller's
  ``interval``); it lists the pane units the steps wrote, so it writes only the open panes
  and the panes closed since the last step;
* **Q** (``max_unsaved_panes``): more closed panes than that not yet saved force a step
  now; **U** (``max_replay_tuples``): more input than that since the last record's cut
  asks for a record at the next task (what recovery replays is bounded by U plus the
  tasks in flight).

Where the window is the query's only state and the sink the clocked one, a step also writes
the open pane's partials (when panes closed, or input came since its last open part - a
tumbling window has no closed pane to save, its open pane is its whole state): a point a
recovery resumes from without a record (:mod:`scabbard.ft.steppoints`), so that what a
recovery replays follows CI and Q, not only CP.

A short CP makes recovery replay little and costs a record (and a sink epoch) every CP;
a long CP replays more; steps keep each record small whatever CP is.  A step's units are
acknowledged before any record that follows (``machine`` durability: flushed), and a step
whose write failed fails the next record (fail-stop).
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class EventualPolicy:
    step_ms: float = 10.0  # CI
    max_unsaved_panes: int | None = None  # Q
    max_replay_tuples: int | None = None  # U


class EventualSteps:
    """Runs the steps and enforces the bounds; told of every assembled task by the
    :class:`~scabbard.ft.checkpointing.CheckpointListener`."""

    def __init__(self, policy: EventualPolicy, state, controller, cut_at: int = 0,
                 clock=time.perf_counter):
        self.policy, self.state, self.controller, self.clock = policy, state, controller, clock
        self.cut_at = cut_at  # the input offset of the last record's cut (recovery: its own)
        self.last = clock()
        self.steps = self.forced = self.requested = 0

    def after_task(self, r) -> None:
        p = self.policy
        if r.marker is not None:  # a record's cut
            self.cut_at = r.end_offset
        now = self.clock()
        forced = p.max_unsaved_panes is not None \
            and self.state.unsaved_panes() > p.max_unsaved_panes
        if forced or (now - self.last) * 1e3 >= p.step_ms:
            self.last = now
            w = self.state.step()
            if w.units or w.bytes:  # closed panes saved, or an open part written
                self.steps += 1
                self.forced += forced
        if p.max_replay_tuples is not None and r.end_offset - self.cut_at > p.max_replay_tuples:
            self.requested += 1
            self.controller.request()
