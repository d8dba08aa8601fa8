"""The crash-state explorer: recover from every state a machine crash may leave (docs/design.md).

1. **record** - a short fault-tolerant run of the query, in this process, with every file
   operation of its storage, checkpoints and sink logged
   (:class:`~scabbard.storage.fileio.RecordingIO`); checkpoints every few tasks, so the
   run is the same on any machine.
2. **build** - crash states from that log (:class:`~scabbard.check.model.FileSystemModel`):
   every prefix up to a flush, with the writes not yet flushed dropped, kept or torn.
3. **check** each state, written out as real folders:

   * the committed output it holds is a *prefix* of the failure-free output - whole
     windows, in order, no duplicate, no other result;
   * recovery from it (``--recover``, or a fresh start where the run was never
     recorded, as :class:`~scabbard.ft.controller.Controller` does) continues to
     exactly the failure-free output.

A state that fails either check is a *violation*; the first one's operation log is
kept.  ``machine`` durability must give none; ``process`` durability (nothing
flushed) shows why it exists.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from scabbard import queries
from scabbard.check.model import CrashState, FileSystemModel
from scabbard.data import Dataset
from scabbard.engine import EngineConfig
from scabbard.engine.config import parse_assembly
from scabbard.ft.ingress import INGRESS
from scabbard.ft.modes import EXACTLY_ONCE_SINKS
from scabbard.ft.recovery import run_fault_tolerant
from scabbard.ft.runfile import recorded_run
from scabbard.ft.sinks import open_output, read_output
from scabbard.ft.verify import compare, failure_free, prefix_problem
from scabbard.storage import RecordingIO, StorageConfig, UnitTooLarge
from scabbard.usage import Usage

USAGE = Usage(  # scabbard check crash-states
    "recover from every state a machine crash may leave a run's files in",
    "Record every file operation (writes, flushes, renames, creations, removals) of a short "
    "fault-tolerant run of the query, build from that log the crash states a POSIX file system "
    "allows - every prefix up to a flush, with the writes not yet flushed kept, dropped or torn "
    "at 4 KiB, and a prefix of the name operations - and for each: check that the committed "
    "output is a prefix of the failure-free output (whole windows, no duplicate, no other "
    "result), recover, and check that the recovered run gives exactly the failure-free output.  "
    "Prints the states explored, the violations, and the first violation's operation log.",
    "Exit status 0: no violation; 1: violations found.  With --durability process (nothing "
    "flushed) violations are expected: they are why machine durability exists.")

STORAGE = StorageConfig(file_bytes=1 << 20, pool_files=2, bulk_bytes=1 << 18)
MAX_FILE = 64 << 20  # the largest pool file a recording grows to (a window's results)
STEP_EVERY_TASK = 1e-6  # eventual checkpoints' CI (ms) in a recording: a step after every task


@dataclass(frozen=True)
class Settings:
    """A crash-state exploration: the run recorded, and how many of its crash states (a
    field's ``help`` is its flag's in ``scabbard check crash-states``)."""

    query: str
    sink: str = field(default="clocked", metadata={"help": "the exactly-once sink"})
    durability: str = field(default="machine", metadata={"help": "the recorded run's durability"})
    states: int = field(default=1000, metadata={"help":
        "crash states to explore, sampled when there are more"})
    seed: int = field(default=0, metadata={"help": "seed of the sampling"})
    tuples: int = field(default=60_000, metadata={"help": "input tuples of the recorded run"})
    batch_rows: int = field(default=4000, metadata={"help": "tuples per task"})
    every_tasks: int = field(default=3, metadata={"help": "a checkpoint every N tasks"})
    workers: int = 2
    push_up: bool = field(default=False, metadata={"help": "persistence push-up (§3.4)"})
    compression: str = field(default="none", metadata={"help":
        "compress the persisted input (§5); adaptive: its codecs re-picked at every batch of "
        "the recorded run"})
    # the adaptive compression decides at every batch: the recorded run (a second or less)
    # holds every codec its rules pick, their swaps and fallbacks, as the same data gives
    compression_interval: float = 1e-6
    persist_at: tuple[str, ...] = ()  # p-streams between operators (--persist-at)
    ingress_partitions: int = field(default=1, metadata={"help":
        "the recorded run's source read by N threads, each appending its own batches in turn"})
    checkpoint_mode: str = field(default="full", metadata={"help":
        "the recorded run's checkpoints: full, incremental (closed panes written once, as pane "
        "units) or eventual (pane units also saved in steps between records - here a step "
        "after every task, and with the clocked sink each a point to resume from), as "
        "'scabbard run'"})
    state_memory: int | None = field(default=None, metadata={"help":
        "the recorded run's window state held within this budget (e.g. 8M), the rest spilled "
        "to its storage as the checkpoint's units, as 'scabbard run'"})
    nested: int = field(default=0, metadata={"help":
        "crash recoveries too: each crash state's recovery is recorded and N of its own crash "
        "states (a machine crash during the recovery) are checked and recovered in turn, "
        "whose recoveries are crashed the same way - two levels deep (0: recoveries run "
        "through)"})
    nested_depth: int = 2  # how deep ``nested`` goes
    file_mib: int = field(default=STORAGE.file_bytes >> 20, metadata={"help":
        "the recorded run's pool files, in MiB (each crash state copies them): a task's "
        "input is cut to what one holds, so tasks of 2^20 tuples need files of their size"})
    # the recorded run's and its recoveries' window state (--assembly, as 'scabbard run'):
    # dataflow[:P] explores PipeFabric's partitioned dataflow, which auto chooses only for
    # tasks of 2^19 keys or more; the failure-free output is the serial engine's either way
    assembly: str = "auto"

    def __post_init__(self) -> None:
        from scabbard.ft.panes import MODES

        if self.checkpoint_mode not in MODES:
            raise ValueError(f"checkpoint_mode must be one of {', '.join(MODES)}, got "
                             f"{self.checkpoint_mode!r}")
        if self.sink not in EXACTLY_ONCE_SINKS:
            raise ValueError(f"sink must be clocked or transactional, got {self.sink!r}")
        if self.durability not in ("process", "machine"):
            raise ValueError(f"durability must be process or machine, got {self.durability!r}")
        parse_assembly(self.assembly)
        if self.nested < 0 or self.nested_depth < 1:
            raise ValueError(f"nested must be >= 0 and nested_depth >= 1, got {self.nested} "
                             f"and {self.nested_depth}")
        for name in ("states", "tuples", "batch_rows", "every_tasks", "workers",
                     "ingress_partitions", "file_mib"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.state_memory is not None:
            from scabbard.engine.spill import MIN_STATE_MEMORY

            if self.state_memory < MIN_STATE_MEMORY:
                raise ValueError(f"state_memory must be at least {MIN_STATE_MEMORY >> 20} MiB, "
                                 f"got {self.state_memory:,} bytes")


@dataclass
class Violation:
    state: CrashState
    problem: str
    log: str  # the operation log up to the crash, marked


@dataclass
class Report:
    settings: Settings
    operations: int = 0
    crash_points: int = 0
    explored: int = 0
    violations: list[Violation] = field(default_factory=list)
    kinds: Counter = field(default_factory=Counter)  # "all kept" / "all dropped" / "random"
    seconds: float = 0.0
    nested: Counter = field(default_factory=Counter)  # level -> crash states inside recoveries
    per_point: Counter = field(default_factory=Counter)  # crash point -> states explored
    spilled: dict = field(default_factory=dict)  # the recorded run's spills and reloads
    layout: dict | None = None  # where the recorded run's --assembly auto kept the state

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> str:
        s = self.settings
        placed = f", p-streams at {', '.join(s.persist_at)}" if s.persist_at else ""
        if s.ingress_partitions > 1:
            placed += f", {s.ingress_partitions} ingress partitions"
        placed += f", {s.checkpoint_mode} checkpoints" if s.checkpoint_mode != "full" else ""
        placed += f", --assembly {s.assembly}" if s.assembly != "auto" else ""
        placed += f", {s.file_mib} MiB pool files" if s.file_mib != Settings.file_mib else ""
        if self.layout:
            placed += f", window state {self.layout['chosen']} (auto)"
        if s.state_memory:
            sp = self.spilled
            placed += (f", state within {s.state_memory >> 20} MiB ({sp.get('spills', 0):,} "
                       f"spills, {sp.get('reloads', 0):,} reloads recorded)")
        lines = [f"{s.query} {s.sink} sink{placed}, {s.durability} durability: "
                 f"{self.explored:,} crash "
                 f"states explored ({', '.join(f'{v} {k}' for k, v in sorted(self.kinds.items()))})"
                 f" from {self.operations:,} file operations, {self.crash_points:,} crash points "
                 f"({len(self.per_point):,} of them explored, "
                 f"{max(self.per_point.values(), default=0)} states at most at one)"
                 + "".join(f"; {n:,} crash states inside recoveries at level {lv}"
                           for lv, n in sorted(self.nested.items()))
                 + f"; {len(self.violations)} violations ({self.seconds:.0f} s)"]
        kinds = Counter(_kind(v.problem) for v in self.violations)
        example = {}
        for v in self.violations:
            example.setdefault(_kind(v.problem), v.problem)
        for kind, n in kinds.most_common():
            lines.append(f"  {n:5d} x {kind}")
            lines.append(f"          e.g. {example[kind][:240]}")
        if self.violations:
            v = self.violations[0]
            lines += ["", f"first violation: {v.problem}", v.log]
        return "\n".join(lines)


class Explorer:
    """Records one run of ``settings.query`` on ``dataset`` and checks its crash states."""

    def __init__(self, settings: Settings, dataset: Dataset, workdir: str | Path | None = None):
        self.s, self.ds = settings, dataset
        self.query = queries.get(settings.query)
        self._own = workdir is None
        self.dir = Path(tempfile.mkdtemp(prefix="scabbard-crash-states-")) if workdir is None \
            else Path(workdir)
        self.config = EngineConfig(workers=settings.workers, batch_rows=settings.batch_rows,
                                   ingress_partitions=settings.ingress_partitions,
                                   assembly=settings.assembly)
        # small files: each crash state copies them (STORAGE's unless file_mib asks otherwise)
        self.storage = STORAGE if settings.file_mib == Settings.file_mib else \
            dataclasses.replace(STORAGE, file_bytes=settings.file_mib << 20)
        self.report: Report | None = None

    def _run(self, root: Path, recover: bool, io=None):
        kw = {"io": io} if io is not None else {}
        if self.s.checkpoint_mode == "eventual" and not recover:
            kw["step_ms"] = STEP_EVERY_TASK  # every task, whatever the machine's speed
        return run_fault_tolerant(self.query, self.ds, root / "storage",
                           open_output(root / "output", self.s.sink), self.config,
                           interval=None, every_tasks=self.s.every_tasks, recover=recover,
                           max_tuples=None if recover else self.s.tuples,
                           layout=self.storage,
                           durability=None if recover else self.s.durability,
                           push_up=self.s.push_up, persist_at=self.s.persist_at,
                           compression=None if recover else self.s.compression,
                           compression_interval=self.s.compression_interval,
                           checkpoint_mode=None if recover else self.s.checkpoint_mode,
                           state_memory=self.s.state_memory, **kw)

    def expected(self) -> pd.DataFrame:
        return failure_free(self.query, self.ds, self.s.tuples,
                            replace(self.config, assembly="serial"))

    def record(self) -> FileSystemModel:
        """The recorded run's file operations.  Pool files stay small (each crash state
        copies them) unless one window's results, which a p-stream on an edge keeps whole,
        need larger ones: then the run is recorded again with files that hold them."""
        root = self.dir / "recorded"
        while True:
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            io = RecordingIO(root)
            try:
                r = self._run(root, recover=False, io=io)
                if self.report is not None:
                    self.report.layout = r.run.layout
                    for st in r.run.spilled.values():
                        for k in ("spills", "reloads"):
                            self.report.spilled[k] = self.report.spilled.get(k, 0) + st[k]
                return FileSystemModel(io.ops)
            except UnitTooLarge as e:
                if e.needed <= self.storage.file_bytes or e.needed > MAX_FILE:
                    raise
                size = self.storage.file_bytes
                while size < e.needed:
                    size *= 2
                self.storage = dataclasses.replace(self.storage, file_bytes=size)

    def check(self, model: FileSystemModel, state: CrashState, want: pd.DataFrame) -> str | None:
        """None if the state is fine, else what is wrong (one line)."""
        root = self.dir / "state"
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        model.materialize(state, root)
        problem = self._prefix(root, want)
        if problem:
            return problem
        return self._recovered(root, want, 1, acknowledged(model.ops[:state.at]))

    def _recovered(self, root: Path, want: pd.DataFrame, level: int,
                   acked: int = 0) -> str | None:
        """Recover the run in ``root`` and compare its output with ``want``; with
        ``nested``, the recovery is recorded and crashed too (see :class:`Settings`).
        ``acked``: how far into the source the input acknowledged before the crash reached -
        the recovery must not read the source before it (that input is the p-stream's)."""
        try:
            run = recorded_run(root / "storage")
            if run is None or "completed" not in run:
                if run is not None and self.s.nested and level <= self.s.nested_depth:
                    problem = self._crashed_recovery(root, want, level, acked)
                    if problem:
                        return problem
                else:
                    problem = _reread(self._run(root, recover=run is not None), acked)
                    if problem:
                        return problem
        except Exception as e:  # noqa: BLE001
            return f"recovery failed: {_line(e)}"
        try:
            after = read_output(root / "output")
        except Exception as e:  # noqa: BLE001
            return f"output unreadable after recovery: {_line(e)}"
        v = compare(after, want, self.query.schema)
        return None if v.ok else f"recovered output differs: {v}"

    def _crashed_recovery(self, root: Path, want: pd.DataFrame, level: int,
                          acked: int) -> str | None:
        """Run the recovery of ``root`` recorded (it completes there), then build ``nested``
        crash states of it - a machine crash during the recovery - and check each as a crash
        state of the run: its committed output a prefix, and its own recovery exact."""
        io = RecordingIO(root)
        base = io.record_existing()
        problem = _reread(self._run(root, recover=True, io=io), acked)
        if problem:
            return problem
        model = FileSystemModel(io.ops, start=base)
        for state in model.sample(self.s.nested, self._rng):
            self.report.nested[level] += 1
            sub = self.dir / f"nested-{level}"
            shutil.rmtree(sub, ignore_errors=True)
            sub.mkdir(parents=True)
            model.materialize(state, sub)
            problem = self._prefix(sub, want)
            if problem is None:
                problem = self._recovered(sub, want, level + 1,
                                          max(acked, acknowledged(model.ops[:state.at])))
            if problem is not None:
                return (f"crash during recovery (level {level}, {state.how}, at operation "
                        f"{state.at - base} of {len(model.ops) - base}): {problem}")
        return None

    def _prefix(self, root: Path, want: pd.DataFrame) -> str | None:
        if not (root / "output" / ".sink.json").exists():
            return None
        try:
            before = read_output(root / "output")
        except Exception as e:  # noqa: BLE001 - any failure to read it is the finding
            return f"committed output unreadable: {_line(e)}"
        problem = prefix_problem(before, want, self.query.schema)
        return problem and f"committed output is not a prefix of the failure-free output: {problem}"

    def explore(self, progress=None) -> Report:
        t0 = time.perf_counter()
        rep = self.report = Report(self.s)
        self._rng = random.Random(self.s.seed + 1)  # the crash states inside recoveries
        quiet = logging.getLogger("scabbard")
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)  # every state's failures are in the report, once
        try:
            want = self.expected()
            model = self.record()
            rep.operations, rep.crash_points = len(model.ops), len(model.crash_points())
            rng = random.Random(self.s.seed)
            for state in model.sample(self.s.states, rng):
                problem = self.check(model, state, want)
                rep.explored += 1
                rep.kinds[state.how] += 1
                rep.per_point[state.at] += 1
                if problem is not None:
                    rep.violations.append(Violation(state, problem,
                                                    model.describe(state) if not rep.violations
                                                    else ""))
                if progress is not None:
                    progress(rep)
        finally:
            quiet.setLevel(level)
            if self._own:
                shutil.rmtree(self.dir, ignore_errors=True)
        rep.seconds = time.perf_counter() - t0
        return rep


def _reread(rep, acked: int) -> str | None:
    """What is wrong if the run ``rep`` read the source before ``acked`` (input that was
    acknowledged as persisted before the crash: it is the p-stream's, not the source's)."""
    if rep.source_start >= acked:
        return None
    return (f"acknowledged input read from the source again: the input was acknowledged up "
            f"to source offset {acked}, the recovery read the source from {rep.source_start}")


def acknowledged(ops) -> int:
    """How far into the source the input acknowledged in ``ops`` reaches (the ingress
    p-stream's notes: a p-unit is acknowledged once durable)."""
    mark = f"acknowledged {INGRESS}"
    return max((op.pos for op in ops if op.kind == "note" and op.path == mark), default=0)


def _kind(problem: str) -> str:
    """A violation's class: what failed and, for a failure, the exception's type."""
    what, _, rest = problem.partition(": ")
    error = rest.split(":")[0] if rest[:1].isupper() and "Error" in rest.split(":")[0] else ""
    return f"{what} ({error})" if error else what


def _line(e: BaseException) -> str:
    return f"{type(e).__name__}: " + " ".join(str(e).split())[:300]


def explore(settings: Settings, dataset: Dataset, log=print) -> Report:
    """``scabbard check crash-states``: a line to ``log`` saying what is recorded and how many
    crash states are explored, then :meth:`Explorer.explore` with a progress line - states
    explored, violations, seconds since the start - every twentieth of ``settings.states``
    and at the last; its report."""
    t0 = time.perf_counter()
    log(f"recording a {settings.tuples:,}-tuple run of {settings.query} ({settings.sink} sink, "
        f"{settings.durability} durability) on {dataset.path}, then exploring "
        f"{settings.states:,} crash states")
    step = max(1, settings.states // 20)

    def progress(rep: Report) -> None:
        if rep.explored % step == 0 or rep.explored == settings.states:
            log(f"  {rep.explored:6,} states  {len(rep.violations):5,} violations  "
                f"{time.perf_counter() - t0:7.0f} s")

    return Explorer(settings, dataset).explore(progress)
