"""Crash points: a process kills itself with SIGKILL at a named place (failure injection).

A random kill rarely lands inside a 5 ms checkpoint write; a crash point makes it land
there.  ``SCABBARD_CRASH_AT=NAME[:K]`` in the environment of an engine process sends
SIGKILL to itself the K-th time (default: first) it reaches ``crashpoint(NAME)``.  The
kill is as real as the Controller's - no handler runs, nothing is flushed.

Points: ``checkpoint_state`` (state p-units handed to storage, record not yet written),
``checkpoint_record`` (record written to its temporary file, not yet renamed into place),
``checkpoint_commit`` (record in place, the sink's epoch not yet committed: between the two
phases of two-phase commit), ``recovery_replay`` (recovering: state loaded, the stored input
half replayed).
"""

from __future__ import annotations

import os
import signal
import threading

POINTS = ("checkpoint_state", "checkpoint_record", "checkpoint_commit", "recovery_replay")
_spec = os.environ.get("SCABBARD_CRASH_AT", "")
_name, _, _k = _spec.partition(":")
_left = int(_k or 1)
_lock = threading.Lock()
if _name and _name not in POINTS:
    raise ValueError(f"SCABBARD_CRASH_AT={_spec!r}: unknown point (choose from {', '.join(POINTS)})")


def crashpoint(name: str) -> None:
    global _left
    if name != _name:
        return
    with _lock:
        _left -= 1
        if _left == 0:
            os.kill(os.getpid(), signal.SIGKILL)
