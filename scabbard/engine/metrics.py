"""Throughput and latency metrics, sampled as lines a notebook can read while a query runs
(written to a JSON-lines log by :class:`scabbard.outputs.MetricsLog`).

Each line is one object.  ``{"event": "sample", ...}`` lines come every
``interval`` seconds: elapsed time, tuples so far, throughput over the interval
(tuples/s, MB/s of rows in the paper's layout), result rows, and the latency
percentiles (p5, p25, p50, p75, p95, in ms) of the tasks completed in the
interval.  Other events (``start``, ``end``, and later checkpoints and recovery
phases) are lines too.  :func:`scabbard.outputs.read_metrics` loads a log, tolerating
a line being written.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

PERCENTILES = (5, 25, 50, 75, 95)
PEER_PERCENTILES = PERCENTILES + (99,)  # the peers' acknowledgement latencies


def percentiles_ms(latencies_s, percentiles=PERCENTILES) -> dict[str, float]:
    """``{"p50": ms, ...}`` of latencies given in seconds (NaN when there are none)."""
    if len(latencies_s) == 0:
        return {f"p{p}": float("nan") for p in percentiles}
    values = np.percentile(np.asarray(latencies_s) * 1000.0, percentiles)
    return {f"p{p}": round(float(v), 3) for p, v in zip(percentiles, values, strict=True)}


@dataclass(frozen=True)
class Summary:
    tuples: int
    seconds: float
    result_rows: int
    tasks: int
    row_bytes: int
    latency_ms: dict

    @property
    def tuples_per_s(self) -> float:
        return self.tuples / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.tuples_per_s * self.row_bytes / 1e6

    def as_dict(self) -> dict:
        return {"tuples": self.tuples, "seconds": round(self.seconds, 4),
                "tuples_per_s": round(self.tuples_per_s, 1), "mb_per_s": round(self.mb_per_s, 2),
                "result_rows": self.result_rows, "tasks": self.tasks, "latency_ms": self.latency_ms}


class Metrics:
    """Collects per-task counts and latencies; a thread samples them every ``interval``
    seconds.  Each line - a sample, or an event (``start``, ``end``, checkpoints ...) - goes
    to every one of ``watch``, callables given the line's dict as it is made, one at a time
    (a metrics log file is one: :class:`scabbard.outputs.MetricsLog`; the engine writes no
    file).  Lines come once the run has started."""

    def __init__(self, row_bytes: int, interval: float = 0.5, watch: Sequence = ()):
        self.row_bytes = row_bytes
        self.interval = interval
        if watch is None or isinstance(watch, str | os.PathLike):
            raise TypeError(f"watch takes callables given each line, not {watch!r} (a metrics "
                            f"log file: scabbard.outputs.MetricsLog(path))")
        self.watch = tuple(watch)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.tuples = 0
        self.result_rows = 0
        self.tasks = 0
        self._latencies: list[float] = []
        self._window: list[float] = []
        self._started = False
        self._thread = None
        self.on_start = None  # called once the run started (to write events recorded earlier)

    def _emit(self, line: dict) -> None:
        if self._started and self.watch:
            with self._lock:
                for w in self.watch:
                    w(line)

    def event(self, name: str, **fields) -> None:
        """Send one event line (``start``, ``end``, ``checkpoint`` ...) to the watchers."""
        self._emit({"event": name, "wall": time.time(), "t": round(self.elapsed(), 4), **fields})

    def elapsed(self) -> float:
        return time.perf_counter() - self._start if hasattr(self, "_start") else 0.0

    def start(self, **fields) -> None:
        self._start = time.perf_counter()
        self._started = True
        self.event("start", **fields)
        if self.on_start is not None:
            self.on_start()
        self._last = (self._start, 0)
        self._thread = threading.Thread(target=self._run, name="metrics", daemon=True)
        self._thread.start()

    def record(self, tuples: int, latency_s: float, result_rows: int) -> None:
        with self._lock:
            self.tuples += tuples
            self.result_rows += result_rows
            self.tasks += 1
            self._latencies.append(latency_s)
            self._window.append(latency_s)

    def add_result_rows(self, rows: int) -> None:
        """Result rows not tied to a task (the final flush)."""
        with self._lock:
            self.result_rows += rows

    def sample(self) -> dict:
        now = time.perf_counter()
        with self._lock:
            window, self._window = self._window, []
            tuples, rows = self.tuples, self.result_rows
        t0, n0 = self._last
        self._last = (now, tuples)
        rate = (tuples - n0) / (now - t0) if now > t0 else 0.0
        return {"event": "sample", "wall": time.time(), "t": round(now - self._start, 4),
                "tuples": tuples, "tuples_per_s": round(rate, 1),
                "mb_per_s": round(rate * self.row_bytes / 1e6, 3), "result_rows": rows,
                "latency_ms": percentiles_ms(window)}

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._emit(self.sample())

    def stop(self, **fields) -> Summary:
        seconds = self.elapsed()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        summary = Summary(self.tuples, seconds, self.result_rows, self.tasks, self.row_bytes,
                          percentiles_ms(self._latencies))
        self.event("end", **summary.as_dict(), **fields)
        self._started = False
        return summary


def samples_to(fn) -> Callable[[dict], None]:
    """A watcher of a run's metrics that gives ``fn`` the samples only (not the events)."""
    def watch(line: dict) -> None:
        if line["event"] == "sample":
            fn(line)

    return watch


@dataclass(frozen=True)
class RunReport:
    query: str
    summary: Summary
    batch_rows: int
    workers: int
    written_bytes: int = 0  # persisted (segments acknowledged by the storage), if any
    spilled: dict = field(default_factory=dict)  # per branch under a state budget: spills...
    kernels: dict = field(default_factory=dict)  # per branch, adaptive kernels: tasks per variant
    layout: dict | None = None  # what --assembly auto estimated and chose (engine/layout.py)


@dataclass
class CpuSpent:
    """The CPU seconds a dataflow's run spent in its parts: routing (on the dispatcher's
    thread), each partition's thread and the merge's."""

    parts: int
    route: float = 0.0
    partitions: list[float] = field(default_factory=list)
    merge: float = 0.0

    def __post_init__(self):
        self.partitions = self.partitions or [0.0] * self.parts
