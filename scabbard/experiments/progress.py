"""Progress of a long benchmark: which step runs, the time so far and an estimate of what is
left, one line per step.

A benchmark lists its steps up front (:class:`Step`: a label, a kind, e.g. ``engine``,
``spark_ft``, and a guess of its seconds); the estimate of what is left is, per remaining
step, its guess scaled by how the finished steps of its kind compared with theirs (the mean
time they took, when the guesses of a kind are all one prior).  Guesses from an earlier run
(:func:`guesses_from`, the times :meth:`Progress.save` wrote) make the estimate right from
the start, heavy steps included.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Step:
    label: str  # what the line names: "LRB2 Spark-FT"
    kind: str  # steps of one kind take about as long as each other
    guess_s: float  # before any step of the kind has finished


def guesses_from(steps: Sequence[Step], path: str | Path) -> list[Step]:
    """``steps`` with the seconds an earlier run's steps of the same label took (a file
    :meth:`Progress.save` wrote) as their guesses; as they are without that file."""
    try:
        took = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return list(steps)
    return [dataclasses.replace(s, guess_s=float(took[s.label])) if isinstance(
        took.get(s.label), int | float) and took[s.label] > 0 else s for s in steps]


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
        self.took: dict[str, float] = {}  # label -> seconds, of the steps finished
        self.running: tuple[Step, float] | None = None

    def left_s(self) -> float:
        """Estimated seconds left for the steps not finished (the running one counted whole,
        less the time it has run)."""
        took: dict[str, float] = {}
        guessed: dict[str, float] = {}
        for label, seconds in self.took.items():
            kind = self.steps[label].kind
            took[kind] = took.get(kind, 0.0) + seconds
            guessed[kind] = guessed.get(kind, 0.0) + self.steps[label].guess_s

        def expect(s: Step) -> float:
            return s.guess_s * (took[s.kind] / guessed[s.kind] if guessed.get(s.kind) else 1.0)

        left = sum(expect(s) for s in self.steps.values() if s.label not in self.took)
        if self.running is not None:
            step, started = self.running
            left -= min(self.now() - started, expect(step))
        return max(0.0, left)

    def start(self, label: str) -> None:
        self.finish()
        step = self.steps[label]
        self.running = (step, self.now())
        n = len(self.took) + 1
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
        self.took[step.label] = self.now() - started
        self.running = None

    def save(self, path: str | Path) -> None:
        """The seconds each finished step took, by label (for :func:`guesses_from`)."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps({k: round(v, 2) for k, v in self.took.items()},
                                         indent=1))

    @property
    def elapsed_s(self) -> float:
        return self.now() - self.t0
