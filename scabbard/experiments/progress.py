"""Progress of a long benchmark: which step runs, the time so far and an estimate of what is
left, one line per step.

A benchmark lists its steps up front (:class:`Step`: a label and a kind, e.g. ``engine``,
``spark_ft``); the estimate of what is left is, per remaining step, the mean time the steps
of its kind took so far, or the benchmark's prior guess for a kind none of whose steps has
finished yet.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    label: str  # what the line names: "LRB2 Spark-FT"
    kind: str  # steps of one kind take about as long as each other
    guess_s: float  # before any step of the kind has finished


def clock(seconds: float) -> str:
    """``seconds`` as h:mm:ss (or m:ss)."""
    s = round(seconds)
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m}:{s % 60:02d}"


class Progress:
    """``start(label)`` before each step of ``steps`` (in any order; each once) logs
    ``[n/N  0:42 elapsed, about 3:10 left] label``; :meth:`note` logs a line about the
    running step.  Steps are matched by label."""

    def __init__(self, steps: Sequence[Step], log: Callable[[str], None] = print,
                 now: Callable[[], float] = time.perf_counter):
        self.steps = {s.label: s for s in steps}
        self.log, self.now = log, now
        self.t0 = now()
        self.took: dict[str, list[float]] = {}
        self.done: set[str] = set()
        self.running: tuple[Step, float] | None = None

    def left_s(self) -> float:
        """Estimated seconds left for the steps not finished (the running one counted whole,
        less the time it has run)."""
        def mean(kind: str, guess: float) -> float:
            got = self.took.get(kind)
            return sum(got) / len(got) if got else guess

        left = sum(mean(s.kind, s.guess_s) for s in self.steps.values()
                   if s.label not in self.done)
        if self.running is not None:
            step, started = self.running
            left -= min(self.now() - started, mean(step.kind, step.guess_s))
        return max(0.0, left)

    def start(self, label: str) -> None:
        self.finish()
        step = self.steps[label]
        self.running = (step, self.now())
        n = len(self.done) + 1
        self.log(f"[{n}/{len(self.steps)}  {clock(self.now() - self.t0)} elapsed, about "
                 f"{clock(self.left_s())} left] {label}")

    def note(self, text: str) -> None:
        label = self.running[0].label if self.running else "-"
        self.log(f"    {label}: {text}")

    def finish(self) -> None:
        """The running step ended (:meth:`start` calls it for the previous one)."""
        if self.running is None:
            return
        step, started = self.running
        self.took.setdefault(step.kind, []).append(self.now() - started)
        self.done.add(step.label)
        self.running = None

    @property
    def elapsed_s(self) -> float:
        return self.now() - self.t0
