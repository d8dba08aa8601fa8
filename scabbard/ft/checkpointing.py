"""Checkpoints as an assembly listener: how the checkpoint controller plugs into the engine.

:class:`CheckpointListener` is the engine core's
:class:`~scabbard.engine.ports.AssemblyListener` for a fault-tolerant run: at dispatch it
hands out the controller's checkpoint markers; after each assembled task it updates the
operators' state (:class:`scabbard.ft.state.QueryState`); as the marker reaches the windows
(its task assembled), each operator of the graph (Alg. 1) and the sink (the epoch's cut),
it collects the checkpoint's parts, and once all are in starts that checkpoint; it reports
the end of a recovery's replay; at the end of the run it
stops the controller, whose error - if any part of the machinery failed - ends the run.
With ``align`` the dispatcher waits at every marker until its task was assembled (Flink's
aligned checkpoints, the paper's Flink++).  ``steps`` (eventual checkpoint mode,
:class:`scabbard.ft.eventual.EventualSteps`) hears of every assembled task after the state
followed it: it saves closed panes between records and enforces the bounds Q and U.
"""

from __future__ import annotations

from scabbard.engine.tasks import INT64_MIN


class CheckpointListener:
    def __init__(self, state, controller, metrics, align: bool = False, first_seq: int = 0,
                 steps=None):
        self.state, self.controller, self.metrics, self.align = state, controller, metrics, align
        self.steps = steps
        self.first_seq = first_seq  # the first task this run dispatches
        self.replay_last = -1

    def start(self, running, states: list) -> None:
        self.state.window_states(states)
        self.controller.running = running
        self.controller.start()

    def marker(self):
        return self.controller.marker()

    def replayed(self, tasks: int, offset: int) -> None:
        """The stored input after the checkpoint was handed out as ``tasks`` tasks."""
        self.replay_last = self.first_seq + tasks - 1
        self.metrics.event("recovery", phase="replay_dispatched", offset=offset,
                           tasks=self.first_seq + tasks)
        if tasks == 0:  # nothing stored after the checkpoint: the replay is done already
            self.metrics.event("recovery", phase="replayed", tasks=self.first_seq)

    def assembled(self, r, clock: dict, graph) -> None:
        """Task ``r`` was assembled: the windows' state follows it; with a marker, they took
        it (their part of the checkpoint)."""
        self.state.after_task(r, clock, graph)
        if r.marker is not None:
            self._check(r.marker)
        if r.seq == self.replay_last:
            self.metrics.event("recovery", phase="replayed", tasks=r.seq + 1)

    def pumped(self, r, clock: dict) -> None:
        """Task ``r``'s results went to the sink: eventual mode's step comes now, so that a
        step a recovery may resume from knows the last window it handed on."""
        if self.steps is not None:
            self.state.emitted = clock.get("window_end", INT64_MIN)
            self.steps.after_task(r)

    def reached(self, where: str, marker, snapshot, pv: dict) -> None:
        """An operator of the graph took the marker on every input, or it passed the sink."""
        if where == "sink":
            self.controller.cut(marker.checkpoint_id)
        self.state.reached(where, snapshot, pv)
        self._check(marker)

    def _check(self, marker) -> None:
        if self.state.complete():
            self.controller.on_marker(marker)

    def dropped(self, marker) -> None:
        self.controller.abandon(marker.checkpoint_id)

    def stop(self, failed: bool) -> None:
        if not failed:  # nothing commits before a recovery's spilled state is verified
            try:
                self.state.verified()
            except BaseException:
                self.controller.stop(wait=False)
                raise
        self.controller.stop(wait=not failed)
