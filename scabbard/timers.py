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
stage          the dispatcher's share of persisting a batch:   tuple
               its p-unit appended to the ingress p-stream
               (inside ``dispatch``)
ingress        an ingress partition cuts one of its batches    tuple
               and hands it to the preparation pool
append         an ingress partition's turn: the batch staged   tuple
               in order (appended to the ingress p-stream)
pushup         persistence push-up's selection and projection  source tuple
               of a batch, before it is persisted
profile        adaptive compression's statistics of a batch    tuple
               and its decisions (one batch at a time)
compress       a batch's columns compressed                    tuple
encode         a batch encoded as a segment (copied and        tuple
               checksummed into its aligned buffer)
write          one write of the group-commit writer            byte
fragment       a worker runs a task's fragment function        tuple
select         a stateless query's kernel: each surviving      tuple (and the
               tuple's row number (inside ``fragment``)        warm-up's rows)
gather         a stateless query's survivors: their columns    tuple
               gathered, their positions written (inside
               ``fragment``)
boundary       a worker computes the windows between two       tuple of the later
               long tasks                                      task
assembly       the ordered assembly of one task (serial;       tuple
               boundaries it computes itself included)
partition      a partition of a partitioned assembly run on    nothing (0): its
               a pool thread (the first runs in ``assembly``)  task's assembly counts
sink           results handed to the exactly-once sink (on     result row
               the assembling thread: inside ``assembly``)
checkpoint     a checkpoint's steps after its state p-units     nothing (0)
               were acknowledged, on the controller's thread:
               the sink's epoch prepared, the record written,
               committed, released (its snapshot is taken in
               ``assembly``; its state p-units are ``encode``)
=============  ==============================================  ===================

    span = timers.start()
    ... the part's work ...
    timers.stop(span, "fragment", len(batch))
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from typing import Protocol

PARTS = ("source", "dispatch", "stage", "ingress", "append", "pushup", "profile", "compress",
         "encode", "write", "fragment", "select", "gather", "boundary", "assembly", "partition",
         "sink", "checkpoint")
# timed inside another part (``dispatch``, ``ingress``, ``fragment`` or ``assembly``): not
# added up
NESTED = ("source", "stage", "select", "gather", "sink")


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
        close = getattr(recorder, "close", None)
        if close is not None:
            close()


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


class Totals:
    """A :class:`Recorder` that keeps each part's sums: CPU seconds, wall seconds, calls and
    what they counted; and the process's CPU time over the recording (:meth:`process_s`).
    ``with timers.recording(Totals()) as t: ...``, then :meth:`per_tuple`."""

    def __init__(self):
        self.cpu_s = dict.fromkeys(PARTS, 0.0)
        self.wall_s = dict.fromkeys(PARTS, 0.0)
        self.calls = dict.fromkeys(PARTS, 0)
        self.counts = dict.fromkeys(PARTS, 0)
        self._lock = threading.Lock()
        self._cpu0 = _process_cpu_s()
        self._cpu1: float | None = None

    def record(self, part: str, cpu_s: float, wall_s: float, count: int, long: bool) -> None:
        with self._lock:
            self.cpu_s[part] += cpu_s
            self.wall_s[part] += wall_s
            self.calls[part] += 1
            self.counts[part] += count

    def close(self) -> None:
        """The recording ended (the process's CPU time is read up to now)."""
        self._cpu1 = _process_cpu_s()

    @property
    def process_s(self) -> float:
        """CPU seconds the whole process spent from this recorder's creation to :meth:`close`
        (or now): every thread, timed parts or not."""
        return (self._cpu1 if self._cpu1 is not None else _process_cpu_s()) - self._cpu0

    def per_tuple(self, tuples: int) -> dict[str, float]:
        """Nanoseconds of CPU per *input* tuple of each part, nested parts included (they are
        also inside the part that calls them), and ``other``: the process's CPU outside every
        part (queues, bookkeeping, the metrics thread, start and end of the run)."""
        n = max(1, tuples)
        out = {p: self.cpu_s[p] / n * 1e9 for p in PARTS}
        timed = sum(self.cpu_s[p] for p in PARTS if p not in NESTED)
        out["other"] = max(0.0, self.process_s - timed) / n * 1e9
        return out


def _process_cpu_s() -> float:
    t = os.times()
    return t.user + t.system
