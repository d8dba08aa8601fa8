"""CPU time of the engine's parts, call by call, inside the engine's own runs.

:func:`timed_run` runs :func:`scabbard.engine.run_query` as usual - its worker threads,
their allocations, the dispatcher, the BlockManager's encoder and I/O threads - with the
functions those threads call wrapped for the run's duration (and restored after):

=============  ==================================================  ==========================
part           function                                            counted per
=============  ==================================================  ==========================
source         ``ReplaySource._batch`` (dispatcher)                tuple
fragment       ``Engine._fragment`` (workers)                      tuple
boundary       ``Engine._boundary`` (workers; the assembler's      tuple of the later task
               own count as assembly)
assembly       ``_Execution.assemble`` (serial)                    tuple
compress       ``Compression.__call__`` (compression pool)         tuple
encode         ``segment.encode`` (BlockManager encoder pool)      tuple
write          ``GroupCommitWriter._pwritev`` (I/O threads)        byte
=============  ==================================================  ==========================

Each call is timed with ``time.thread_time`` (what the calling thread's core spent,
whatever else the machine does); writes also in wall time - one writer per stream, so
their sum is the time the device took for them: its bandwidth as the engine uses it
(O_DIRECT, bulk writes into the pool's files).  ``other``: the process's CPU time over the run
(from its first batch on) not spent in any of them - dispatching, queues, the metrics
thread, the p-stream's bookkeeping.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np


def _process_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


class Probe:
    """The wrapped functions' calls: part -> [(cpu seconds, count, task was long)]."""

    def __init__(self):
        self.calls: dict[str, list[tuple[float, int, bool]]] = {
            k: [] for k in ("source", "fragment", "boundary", "assembly", "compress", "encode",
                            "write")}
        self._local = threading.local()
        self.cpu_at_start: float | None = None
        self.writes: list[tuple[int, float]] = []  # (bytes, wall seconds) of each write

    def _wrap(self, part: str, fn, count):
        calls, local, probe = self.calls[part], self._local, self

        def timed(*args, **kwargs):
            if part == "source" and probe.cpu_at_start is None:
                probe.cpu_at_start = _process_cpu_s()
            t, wall = time.thread_time(), time.perf_counter()
            nested = getattr(local, "assembling", False)
            if part == "assembly":
                local.assembling = True
            try:
                out = fn(*args, **kwargs)
            finally:
                if part == "assembly":
                    local.assembling = False
            if not (part == "boundary" and nested):
                calls.append((time.thread_time() - t, count(args, out),
                              bool(getattr(out, "long", False))))
                if part == "write":
                    probe.writes.append((calls[-1][1], time.perf_counter() - wall))
            return out

        return timed

    @contextmanager
    def patched(self):
        from scabbard.compression import policy
        from scabbard.engine import runtime, sources
        from scabbard.storage import segment, writer

        targets = [
            (sources.ReplaySource, "_batch", "source", lambda a, out: len(out)),
            (runtime.Engine, "_fragment", "fragment", lambda a, out: len(a[2])),
            (runtime.Engine, "_boundary", "boundary", lambda a, out: a[2].tuples),
            (runtime._Execution, "assemble", "assembly", lambda a, out: a[1].tuples),
            (policy.Compression, "__call__", "compress", lambda a, out: len(a[1])),
            (segment, "encode", "encode", lambda a, out: len(a[0])),
            (writer.GroupCommitWriter, "_pwritev", "write",
             lambda a, out: sum(b.nbytes for b in a[2])),
        ]
        saved = [(obj, name, obj.__dict__[name]) for obj, name, _, _ in targets]
        try:
            for obj, name, part, count in targets:
                setattr(obj, name, self._wrap(part, obj.__dict__[name], count))
            yield self
        finally:
            for obj, name, orig in saved:
                setattr(obj, name, orig)

    def cpu_s(self, part: str, skip: int = 0) -> tuple[float, int]:
        """Total CPU seconds and count of ``part``'s calls (the first ``skip`` left out)."""
        c = self.calls[part][skip:]
        return sum(x[0] for x in c), sum(x[1] for x in c)


def timed_run(query: str, ds, workers: int, rows: int, seconds: float,
              storage: str | Path | None = None, compression: str = "none",
              push_up: bool = False) -> dict:
    """``run_query`` for ``seconds`` (NullSink, ``rows`` per task; with ``storage``, the input
    persisted there, after persistence push-up with ``push_up``) with its parts timed:
    seconds of CPU per tuple of each part, the throughput, the bytes written per tuple.
    ``work_s``: the fragments, boundaries and assembly per *input* tuple (with push-up the
    tasks hold only what the pushed-up operators kept)."""
    from scabbard import queries
    from scabbard.engine import EngineConfig, NullSink
    from scabbard.ft.ingress import run_persisted

    probe = Probe()
    with probe.patched():
        rep = run_persisted(queries.get(query), ds, storage, NullSink(),
                            EngineConfig(workers=workers, batch_rows=rows), duration=seconds,
                            compression=compression, push_up=push_up)
        cpu_total = _process_cpu_s() - (probe.cpu_at_start or _process_cpu_s())
    # the first fragment call is the engine's warm-up (a few rows, before the clock)
    frag, n = probe.cpu_s("fragment", skip=1)
    n = max(n, 1)
    per = {p: probe.cpu_s(p)[0] for p in probe.calls}
    per["fragment"] = frag
    per["assembly"], _ = probe.cpu_s("assembly", skip=1)  # the first starts from nothing
    asm_n = max(1, probe.cpu_s("assembly", skip=1)[1])
    written = sum(c[1] for c in probe.calls["write"])
    accounted = sum(probe.cpu_s(p)[0] for p in probe.calls)
    longs = [c[2] for c in probe.calls["fragment"][1:]]
    return {
        "rows": rows, "workers": workers, "tuples": rep.summary.tuples,
        "work_s": (frag + per["boundary"] + per["assembly"]) / max(1, rep.summary.tuples),
        "tuples_per_s": rep.summary.tuples_per_s,
        "source_s": per["source"] / n, "parallel_s": (frag + per["boundary"]) / n,
        "assembly_s": per["assembly"] / asm_n, "compress_s": per["compress"] / n,
        "encode_s": per["encode"] / n, "write_s_byte": per["write"] / max(1, written),
        "writes": list(probe.writes),
        "written_per_tuple": rep.written_bytes / max(1, rep.summary.tuples),
        "other_s": max(0.0, cpu_total - accounted) / n,
        "task_rows": float(np.mean([c[1] for c in probe.calls["fragment"][1:]]))
        if longs else float(rows),
        "long": float(np.mean(longs)) if longs else 0.0, "tasks": len(longs),
    }
