"""Crash points: a process kills itself with SIGKILL at a named place (failure injection).

A random kill rarely lands inside a 5 ms checkpoint write; a crash point makes it land
there.  :func:`arm` (``FTConfig.crash_at``, ``scabbard run --crash-at NAME[:K]``, set by
the test harness and :class:`scabbard.ft.controller.Controller`) makes the process send
SIGKILL to itself the K-th time (default: first) it reaches ``crashpoint(NAME)``.  The
kill is as real as the Controller's - no handler runs, nothing is flushed.

Points: ``checkpoint_state`` (state p-units handed to storage, record not yet written),
``checkpoint_record`` (record written to its temporary file, not yet renamed into place),
``checkpoint_commit`` (record in place, the sink's epoch not yet committed: between the two
phases of two-phase commit), ``recovery_replay`` (recovering: state loaded, the stored input
half replayed), ``checkpoint_step`` (incremental and eventual checkpoint modes: pane units
handed to storage - by a checkpoint, or by an eventual step between records - the record
that lists them not yet written), ``spill_write`` (state under a memory budget: a key
partition's units handed to storage as it is evicted, or its waiting shares), ``spill_read``
(a spilled partition's units read back, before it is rebuilt: a prefetch), ``ingress_piece``
(a task stored in pieces: one piece of its input handed to storage, the next not yet),
``sink_write`` (the clocked sink: one piece of results stored, the next not yet - a window
emitted in pieces, key partition by key partition, is cut there).
"""

from __future__ import annotations

import os
import signal
import threading

POINTS = ("checkpoint_state", "checkpoint_record", "checkpoint_commit", "recovery_replay",
          "checkpoint_step", "spill_write", "spill_read", "ingress_piece", "sink_write")
_armed = {"name": "", "left": 0}
_lock = threading.Lock()


def arm(spec: str | None) -> None:
    """Crash at ``NAME[:K]`` (None or "": nowhere)."""
    name, _, k = (spec or "").partition(":")
    if name and name not in POINTS:
        raise ValueError(f"crash point {spec!r}: unknown (choose from {', '.join(POINTS)})")
    with _lock:
        _armed["name"], _armed["left"] = name, int(k or 1)


def crashpoint(name: str) -> None:
    if name != _armed["name"]:
        return
    with _lock:
        _armed["left"] -= 1
        if _armed["left"] == 0:
            os.kill(os.getpid(), signal.SIGKILL)
