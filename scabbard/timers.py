"""Timers the engine exposes: the CPU time of its parts, call by call.

The simulator (:mod:`scabbard.sim.instrument`) calibrates its costs inside the engine's own
runs.  The parts report here, and nothing is recorded unless a :class:`Recorder` is
installed with :func:`recording` - then each call costs two clock reads:

=============  ==============================================  ===================
part           where                                           counted per
=============  ==============================================  ===================
source         the replay source cuts a batch (the dispatcher  tuple
               or an ingress partition: inside ``dispatch``
               or ``ingress``)
dispatch       the dispatcher takes one task from its feed     tuple (source
               and hands it out (everything on its thread)     tuples it stands for)
ingress        an ingress partition cuts one of its batches    tuple
               and hands it to the preparation pool
append         an ingress partition's turn: the batch staged   tuple
               in order (appended to the ingress p-stream)
fragment       a worker runs a task's fragment function        tuple
boundary       a worker computes the windows between two       tuple of the later
               long tasks                                      task
assembly       the ordered assembly of one task (serial;       tuple
               boundaries it computes itself included)
partition      a partition of a partitioned assembly run on    nothing (0): its
               a pool thread (the first runs in ``assembly``)  task's assembly counts
compress       a batch's columns compressed                    tuple
encode         a batch encoded as a segment                    tuple
write          one write of the group-commit writer            byte
=============  ==============================================  ===================

    span = timers.start()
    ... the part's work ...
    timers.stop(span, "fragment", len(batch))
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Protocol

PARTS = ("source", "dispatch", "ingress", "append", "fragment", "boundary", "assembly",
         "partition", "compress", "encode", "write")
NESTED = ("source",)  # timed inside another part (``dispatch`` or ``ingress``): not added up


class Recorder(Protocol):
    def record(self, part: str, cpu_s: float, wall_s: float, count: int, long: bool) -> None:
        """One call of ``part``: its thread's CPU seconds, wall seconds, what it counted."""


_recorder: Recorder | None = None
_lock = threading.Lock()


@contextmanager
def recording(recorder: Recorder):
    """Send every part's calls to ``recorder`` while the block runs (one at a time)."""
    global _recorder
    with _lock:
        if _recorder is not None:
            raise RuntimeError("a recorder is installed already: timers record for one at a time")
        _recorder = recorder
    try:
        yield recorder
    finally:
        with _lock:
            _recorder = None


def start() -> tuple[float, float] | None:
    """The clocks now, if anything records (else None: :func:`stop` does nothing)."""
    if _recorder is None:
        return None
    return time.thread_time(), time.perf_counter()


def stop(span: tuple[float, float] | None, part: str, count: int, long: bool = False) -> None:
    """The call begun at ``span`` was one of ``part``, counting ``count``."""
    if span is None:
        return
    cpu, wall = time.thread_time() - span[0], time.perf_counter() - span[1]
    rec = _recorder
    if rec is not None:
        rec.record(part, cpu, wall, count, long)
