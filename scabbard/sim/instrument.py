"""CPU time of the engine's parts, call by call, inside the engine's own runs.

:func:`timed_run` runs the engine as usual - its worker threads, their allocations, the
dispatcher, the BlockManager's encoder and I/O threads - with a :class:`Probe` installed on
the timers the engine exposes (:mod:`scabbard.timers`: source, fragment, boundary,
assembly, compress, encode, write).  Each call is timed with ``time.thread_time`` (what the
calling thread's core spent, whatever else the machine does); writes also in wall time - one
writer per stream, so their sum is the time the device took for them: its bandwidth as the
engine uses it (O_DIRECT, bulk writes into the pool's files).  The dispatcher's thread is
timed whole (``dispatch``: the source it cuts, the p-units it appends and reads, handing
tasks out), as are the ingress partitions' threads (``ingress``, ``append``).  ``other``: the
process's CPU time over the run (from its first batch on) not spent in any of them - the
workers' and pools' own bookkeeping, queues, the metrics thread.
"""

from __future__ import annotations

import os
import threading

import numpy as np

from scabbard import timers


def _process_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


class Probe:
    """The parts' calls: part -> [(cpu seconds, count, task was long)]; a
    :class:`scabbard.timers.Recorder`."""

    def __init__(self):
        self.calls: dict[str, list[tuple[float, int, bool]]] = {k: [] for k in timers.PARTS}
        self.cpu_at_start: float | None = None
        self.writes: list[tuple[int, float]] = []  # (bytes, wall seconds) of each write
        self._lock = threading.Lock()

    def record(self, part: str, cpu_s: float, wall_s: float, count: int, long: bool) -> None:
        with self._lock:
            if part == "source" and self.cpu_at_start is None:
                self.cpu_at_start = _process_cpu_s() - cpu_s
            self.calls[part].append((cpu_s, count, long))
            if part == "write":
                self.writes.append((count, wall_s))

    def recording(self):
        """Record the engine's timers while the block runs."""
        return timers.recording(self)

    def cpu_s(self, part: str, skip: int = 0) -> tuple[float, int]:
        """Total CPU seconds and count of ``part``'s calls (the first ``skip`` left out)."""
        c = self.calls[part][skip:]
        return sum(x[0] for x in c), sum(x[1] for x in c)


def timed_config(workers: int, rows: int, assembly: str = "serial", ingress: int = 1,
                 adaptive: bool = False):
    """The engine of a timed run: ``workers``, ``rows`` per task, the ``assembly`` mode,
    ``ingress`` partitions, adaptive kernels compiled on the task's thread (``adaptive``)."""
    from scabbard.engine import EngineConfig
    from scabbard.engine.adaptive import AdaptivePolicy

    return EngineConfig(workers=workers, batch_rows=rows, assembly=assembly,
                        ingress_partitions=ingress,
                        adaptive=AdaptivePolicy(background=False) if adaptive else None)


def timed_run(query: str, ds, engine, seconds: float, persist=None,
              tuples: int | None = None) -> dict:
    """``run_persisted`` for ``seconds`` (NullSink, the ``engine``'s settings - see
    :func:`timed_config`; with a :class:`~scabbard.ft.config.PersistConfig`, the input
    persisted as it says) with its parts timed:
    seconds of CPU per tuple of each part, the throughput, the bytes written per tuple.
    ``work_s``: the fragments, boundaries and assembly per *input* tuple (with push-up the
    tasks hold only what the pushed-up operators kept).  With a partitioned assembly,
    ``partition_s`` is the CPU its pool threads spent per tuple (the first partition's is in
    ``assembly_s``).  With ingress partitions (parallel ingress), ``dispatch_s`` is the
    dispatcher's thread per tuple (the source it cuts itself included), ``ingress_s`` the
    partitions' threads and ``append_s`` their turns (per tuple), ``dispatch_task_s`` the
    dispatcher per task.  ``other_s``: the CPU of no timed part.  With adaptive kernels
    compiled on the task's thread (a variant is swapped in after as many tasks in every
    run), ``kernels`` holds each branch's variants and their time per row.  ``tuples``: run for that many tuples instead of ``seconds``."""
    from scabbard import queries
    from scabbard.engine import NullSink, Replay
    from scabbard.ft.ingress import run_persisted

    probe = Probe()
    with probe.recording():
        rep = run_persisted(queries.get(query), ds, persist, NullSink(), engine,
                            Replay(duration=None if tuples else seconds, max_tuples=tuples))
        cpu_total = _process_cpu_s() - (probe.cpu_at_start or _process_cpu_s())
    rows = engine.batch_rows
    frag, n = probe.cpu_s("fragment")
    n = max(n, 1)
    per = {p: probe.cpu_s(p)[0] for p in probe.calls}
    per["fragment"] = frag
    per["assembly"], _ = probe.cpu_s("assembly", skip=1)  # the first starts from nothing
    asm_n = max(1, probe.cpu_s("assembly", skip=1)[1])
    written = sum(c[1] for c in probe.calls["write"])
    accounted = sum(probe.cpu_s(p)[0] for p in probe.calls if p not in timers.NESTED)
    dispatch, dispatched = probe.cpu_s("dispatch")
    tasks_dispatched = max(1, len(probe.calls["dispatch"]))
    longs = [c[2] for c in probe.calls["fragment"]]
    return {
        "rows": rows, "workers": engine.workers, "tuples": rep.summary.tuples,
        "work_s": (frag + per["boundary"] + per["assembly"]) / max(1, rep.summary.tuples),
        "tuples_per_s": rep.summary.tuples_per_s,
        # the same run's tuples per second of the process's CPU: what the wall figure would
        # be with every thread on a core of its own and nothing else on the machine
        "tuples_per_cpu_s": rep.summary.tuples / cpu_total if cpu_total > 0 else 0.0,
        "source_s": per["source"] / n, "parallel_s": (frag + per["boundary"]) / n,
        "assembly_s": per["assembly"] / asm_n, "partition_s": per["partition"] / asm_n,
        "compress_s": per["compress"] / n,
        "encode_s": per["encode"] / n, "write_s_byte": per["write"] / max(1, written),
        "writes": list(probe.writes),
        "written_per_tuple": rep.written_bytes / max(1, rep.summary.tuples),
        "other_s": max(0.0, cpu_total - accounted) / n,
        "dispatch_s": dispatch / max(1, dispatched),
        "dispatch_task_s": dispatch / tasks_dispatched,
        "ingress_s": per["ingress"] / n, "append_s": per["append"] / n,
        "task_rows": float(np.mean([c[1] for c in probe.calls["fragment"]]))
        if longs else float(rows),
        "long": float(np.mean(longs)) if longs else 0.0, "tasks": len(longs),
        "kernels": rep.kernels,
    }
