"""One frozen configuration per run (docs/design.md, STYLE.md rule 7).

:class:`RunConfig` says what to run (query, data, rate, limits, workers, batch size);
:class:`PersistConfig` whether and how its input is persisted (storage folder, push-up,
compression); :class:`FTConfig` whether it is fault-tolerant (exactly-once output, sink,
checkpoint interval, durability, crash point).  Each validates its own fields and raises
:class:`ConfigError` with one line naming the field.  A field a flag of ``scabbard run`` sets
carries the flag and its help (:mod:`scabbard.ft.flags` makes the flags from them);
:meth:`RunConfig.argv` writes a configuration back as flags, :meth:`RunConfig.of` builds one
from its fields' names, and :func:`scabbard.ft.run.open_run` opens a run from it, fresh or
recovering.  Nothing here reads the environment.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from scabbard.compression.policy import SCHEMES
from scabbard.errors import UserError
from scabbard.faults import POINTS
from scabbard.ft.flags import Group, field_argv, flag, parse_bytes
from scabbard.ft.modes import (
    CHECKPOINT_MODES,
    DURABILITIES,
    EXACTLY_ONCE_SINKS,
    INTERVAL,
    SINKS,
)
from scabbard.storage import StorageConfig

MAX_INTERVAL = 86_400.0  # a checkpoint at least once a day
# where each field's flag is listed in 'scabbard run --help'
_IN, _ENG, _PER, _FT, _OUT = (Group.INPUT, Group.ENGINE, Group.PERSISTENCE,
                              Group.FAULT_TOLERANCE, Group.OUTPUT)


class ConfigError(UserError, ValueError):
    """A configuration that cannot be run: ``field`` and what is wrong with it (``problem``);
    the CLI names the flag the field maps onto."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field} {problem}")
        self.field, self.problem = field, problem


def recorded(meta: dict | None = None, **values) -> dict:
    """A field's metadata (``meta``: its flag's) marked as a setting ``run.json`` records and
    a recovery repeats or leaves out (:mod:`scabbard.ft.runfile`); ``new=``: what a fresh run
    records where the field is None, ``old=``: what a record of an older build without the
    field had."""
    return {**(meta or {}), "recorded": values}


def _positive(name: str, value, integer: bool = False) -> None:
    if value is None:
        return
    if integer:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(name, f"must be >= 1, got {value!r}")
    elif not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ConfigError(name, f"must be positive, got {value!r}")


@dataclass(frozen=True)
class PersistConfig:
    """The ingress p-stream persisted in ``storage`` (``--persist-input``, ``--storage``)."""

    storage: Path = field(metadata=flag(
        "--storage", "storage folder for --persist-input / checkpoints (default: "
        "storage/<QUERY>-<time> in the project folder)", _PER, metavar="DIR"))
    push_up: bool = field(default=False, metadata=recorded(old=False, meta=flag(
        "--push-up", "persistence push-up (paper §3.4): selections and projections run before "
        "the ingress p-stream, which then stores only the tuples and attributes the query "
        "needs (see 'scabbard explain')", _PER)))
    # None: "none", or as recorded (recovery)
    compression: str | None = field(default=None, metadata=recorded(
        new="none", old="none", meta=flag(
        "--compression", "compress the persisted p-stream per column (§5): default = the "
        "paper's starting scheme (delta-of-delta timestamps, Simple-8b ints, XOR floats); "
        "adaptive = profile and switch codecs while running (default none; a recovery takes "
        "the run's own)", _PER, choices=SCHEMES)))
    lossy_decimals: int | None = field(default=None, metadata=recorded(meta=flag(
        "--lossy-decimals", "with --compression: store float columns with N decimals (error "
        "<= 0.5e-N), as integers; batches that cannot be (NaN, inf) fall back to lossless XOR",
        _PER, type=int, metavar="N")))
    compression_interval: float = field(default=4.0, metadata=flag(
        "--compression-interval", "with --compression adaptive: seconds between re-selections "
        "(default 4, the paper's)", _PER, type=float, metavar="SECONDS"))
    layout: StorageConfig = field(default_factory=StorageConfig)  # the pool's files
    # --persist-at: edges between operators with p-streams (the command's own flag: it also
    # names the ingress, which is FTConfig.persist_input)
    persist_at: tuple[str, ...] = field(default=(), metadata=recorded())

    def __post_init__(self) -> None:
        object.__setattr__(self, "storage", Path(self.storage))
        if self.compression is not None and self.compression not in SCHEMES:
            raise ConfigError("compression", f"must be one of {', '.join(SCHEMES)}, got "
                                             f"{self.compression!r}")
        _positive("compression_interval", self.compression_interval)
        if isinstance(self.persist_at, str) or not all(
                isinstance(e, str) and e for e in self.persist_at):
            raise ConfigError("persist_at", f"must be edge names, got {self.persist_at!r}")
        object.__setattr__(self, "persist_at", tuple(self.persist_at))
        if self.lossy_decimals is not None:
            if self.compression in (None, "none"):
                raise ConfigError("lossy_decimals", "goes with compression default or adaptive")
            if not (isinstance(self.lossy_decimals, int) and 0 <= self.lossy_decimals <= 9):
                raise ConfigError("lossy_decimals", f"must be 0..9, got {self.lossy_decimals!r}")

    @property
    def reduces(self) -> bool:
        return self.push_up or self.compression not in (None, "none")


@dataclass(frozen=True)
class FTConfig:
    """Fault tolerance: checkpoints and exactly-once output to ``output``."""

    output: Path  # --output (the command's own flag: without fault tolerance a results file)
    sink: str = field(default="clocked", metadata=recorded(meta=flag(
        "--sink", "the exactly-once sink: clocked (default: results stored at once with their "
        "vector clock, duplicates dropped on replay) or transactional (two-phase commit with "
        "each checkpoint)", _FT, choices=EXACTLY_ONCE_SINKS)))
    # None: none on a timer (every_tasks, or eventual's steps)
    interval: float | None = field(default=INTERVAL, metadata=flag(
        "--checkpoint-interval", "fault tolerance: persist the input, checkpoint the operator "
        "every SECONDS, write exactly-once output to the --output folder (implies "
        "--persist-input)", _FT, type=float, metavar="SECONDS"))
    every_tasks: int | None = None  # a checkpoint every that many tasks (deterministic)
    # None: machine, or as recorded (recovery)
    durability: str | None = field(default=None, metadata=recorded(
        new="machine", old="process", meta=flag(
        "--durability", "with --checkpoint-interval: machine (the default) flushes everything "
        "a checkpoint record or an acknowledgement depends on to the device first (fdatasync "
        "after the O_DIRECT writes, directories fsynced): the run survives power loss; "
        "process only survives the engine being killed", _FT, choices=DURABILITIES)))
    # False: --checkpoint-only; None: as recorded / True
    persist_input: bool | None = field(default=None, metadata=recorded(new=True, old=True))
    aligned: bool = False  # Flink-style aligned checkpoints (the paper's Flink++)
    crash_at: str | None = field(default=None, metadata=flag(
        "--crash-at", "failure injection (the test harness and scabbard.ft.controller use "
        "it): SIGKILL this process the K-th time it reaches POINT - " + ", ".join(POINTS),
        _FT, metavar="POINT[:K]"))
    # when the process was spawned (the controller's: recovery phases count from it)
    spawned_at: float | None = field(default=None, metadata=flag(
        "--spawned-at", argparse.SUPPRESS, _FT, type=float, metavar="UNIX_TIME"))
    # None: full, or as recorded (recovery)
    checkpoint_mode: str | None = field(default=None, metadata=recorded(
        new="full", old="full", meta=flag(
        "--checkpoint-mode", "with --checkpoint-interval: full (the default) writes every "
        "pane the open windows need at every checkpoint; incremental writes a closed pane "
        "once, as an immutable pane unit, and a checkpoint only the panes closed since and the "
        "open one; eventual (CEC) also saves closed panes in steps every --checkpoint-step ms "
        "between the records, one every --checkpoint-period (a recovery takes the run's own)",
        _FT, choices=CHECKPOINT_MODES)))
    step_ms: float = field(default=10.0, metadata=flag(
        "--checkpoint-step", "--checkpoint-mode eventual: save the panes closed since the last "
        "save every MS milliseconds, CEC's CI (default 10)", _FT, type=float, metavar="MS"))
    max_unsaved_panes: int | None = field(default=None, metadata=flag(
        "--max-unsaved-panes", "--checkpoint-mode eventual: a step at once when more than Q "
        "closed panes are not saved yet", _FT, type=int, metavar="Q"))
    max_replay_tuples: int | None = field(default=None, metadata=flag(
        "--max-replay-tuples", "--checkpoint-mode eventual: a record at the next task when "
        "more than U input tuples came since the last record's cut (bounds what recovery "
        "replays)", _FT, type=int, metavar="U"))

    def __post_init__(self) -> None:
        object.__setattr__(self, "output", Path(self.output))
        if self.sink not in SINKS:
            raise ConfigError("sink", f"must be one of {', '.join(SINKS)}, got {self.sink!r}")
        if self.interval is not None and not (
                isinstance(self.interval, int | float)
                and 0 < self.interval <= min(MAX_INTERVAL, threading.TIMEOUT_MAX)):
            raise ConfigError("interval", f"must be in (0, {MAX_INTERVAL:,.0f}] seconds, got "
                                          f"{self.interval!r}")
        _positive("every_tasks", self.every_tasks, integer=True)
        if self.durability is not None and self.durability not in DURABILITIES:
            raise ConfigError("durability", f"must be process or machine, got "
                                            f"{self.durability!r}")
        if self.checkpoint_mode is not None and self.checkpoint_mode not in CHECKPOINT_MODES:
            raise ConfigError("checkpoint_mode", f"must be one of {', '.join(CHECKPOINT_MODES)}, "
                                                 f"got {self.checkpoint_mode!r}")
        _positive("step_ms", self.step_ms)
        _positive("max_unsaved_panes", self.max_unsaved_panes, integer=True)
        _positive("max_replay_tuples", self.max_replay_tuples, integer=True)
        if self.checkpoint_mode in ("full", "incremental") and (
                self.step_ms != 10.0 or self.max_unsaved_panes or self.max_replay_tuples):
            raise ConfigError("checkpoint_mode", "must be eventual for a checkpoint step, "
                                                 "max_unsaved_panes or max_replay_tuples")
        if self.crash_at is not None:
            name, _, k = self.crash_at.partition(":")
            if name not in POINTS or (k and not (k.isdigit() and int(k) >= 1)):
                raise ConfigError("crash_at", f"must be NAME[:K] with NAME one of "
                                              f"{', '.join(POINTS)}, got {self.crash_at!r}")


@dataclass(frozen=True)
class RunConfig:
    """One run of a query: what, on which data, how fast, how long, on how many workers."""

    query: str
    data: Path | None = None  # the dataset folder (None: the query's small default)
    rate: float | None = field(default=None, metadata=recorded(meta=flag(
        "--rate", "input rate limit, tuples per second", _IN, type=float)))
    duration: float | None = field(default=None, metadata=flag(
        "--duration", "replay the dataset endlessly for this long (wall time)", _IN, type=float,
        metavar="SECONDS"))
    max_tuples: int | None = field(default=None, metadata=recorded(meta=flag(
        "--max-tuples", "stop after this many input tuples", _IN, type=int)))
    workers: int | None = field(default=None, metadata=flag(
        "--workers", "worker threads (default: one per core)", _ENG, type=int))
    batch_rows: int | None = field(default=None, metadata=recorded(meta=flag(
        "--batch", "tuples per task (default: per query)", _ENG, type=int, metavar="ROWS")))
    metrics_interval: float = field(default=0.5, metadata=flag(
        "--metrics-interval", "seconds between metrics samples (default 0.5)", _OUT, type=float,
        metavar="SECONDS"))
    metrics_log: Path | None = field(default=None, metadata=flag(
        "--metrics-log", "JSON-lines metrics log (live samples)", _OUT, type=Path,
        metavar="PATH"))
    verify: bool | str = "once"  # the dataset's checksums: once per change, True always, False
    persist: PersistConfig | None = None
    ft: FTConfig | None = None
    assembly: str = field(default="auto", metadata=flag(
        "--assembly", "the windows no task computes alone: serial (one state per window "
        "operator), partitioned[:P] (its groups split by key hash between P partitions "
        "assembled at once, merged in window order; P: --workers) or auto (default: "
        "the dataflow below where a task is estimated to hold 2^19 keys or more and they "
        "spread over 2+ partitions; else partitioned with 4+ workers where tasks are too "
        "short for windows of their own, else serial); or dataflow[:P]: the window "
        "operator as PipeFabric's partitioned dataflow, its input routed by key to P "
        "partition threads (default: planned from the first batch, at most --workers), "
        "merged in order - with fault tolerance too",
        _ENG, metavar="MODE"))
    ingress_partitions: int | None = field(default=None, metadata=flag(
        "--ingress-partitions", "read the source with N threads, each its share of the "
        "batches (split by offset ranges), each appending its own to the ingress p-stream in "
        "turn, so that no one thread touches every tuple (default: one per 4 workers; 1: the "
        "dispatcher reads it).  A recovery may use another N", _ENG, type=int, metavar="N"))
    state_memory: int | None = field(default=None, metadata=recorded(meta=flag(
        "--state-memory", "hold at most this much window state in memory (e.g. 256M, 2G): "
        "key partitions beyond it are spilled to disk as state p-units and read back when "
        "their windows close (default: no limit; at least 8M per window operator).  With "
        "fault tolerance the spilled units go to --storage and are the checkpoint's state: a "
        "checkpoint lists them and writes only the partitions in memory (with --checkpoint-mode "
        "incremental or eventual only their open panes, closed panes once), and recovery "
        "reads them back as the windows close", _ENG, type=parse_bytes, metavar="BYTES")))
    spill_dir: Path | None = field(default=None, metadata=flag(
        "--spill-dir", "where --state-memory spills without fault tolerance (default: the "
        "system's temporary folder)", _ENG, type=Path, metavar="DIR"))
    adaptive_kernels: bool = field(default=False, metadata=flag(
        "--adaptive-kernels", "adaptive query compilation (Grizzly): each window operator's "
        "kernels run generic, then instrumented (filter selectivities, key ranges), then "
        "optimised for what was seen (filters by selectivity, a dense array for a small key "
        "range), compiled in the background and swapped while the query runs; a task that "
        "breaks an assumption is run again generically and the operator profiles anew "
        "(results never change).  Kernel events go to --metrics-log", _ENG))

    def __post_init__(self) -> None:
        from scabbard import queries

        try:
            queries.workload_of(self.query)
        except queries.UnknownQueryError as e:
            raise ConfigError("query", str(e)) from None
        for name in ("rate", "duration", "metrics_interval"):
            _positive(name, getattr(self, name))
        for name in ("max_tuples", "workers", "batch_rows", "ingress_partitions"):
            _positive(name, getattr(self, name), integer=True)
        from scabbard.engine.runtime import MAX_WORKERS, parse_assembly

        if self.workers is not None and self.workers > MAX_WORKERS:
            raise ConfigError("workers", f"must be at most {MAX_WORKERS} (threads of one "
                                         f"process), got {self.workers}")

        try:
            mode, _ = parse_assembly(self.assembly)
        except ValueError as e:
            raise ConfigError("assembly", str(e).removeprefix("assembly ")) from None
        if mode == "dataflow" and (self.state_memory is not None or self.adaptive_kernels):
            raise ConfigError("assembly", "dataflow holds its window state in memory and runs "
                                          "the generic kernels: not with --state-memory or "
                                          "--adaptive-kernels")
        if self.state_memory is not None:
            from scabbard.engine.spill import MIN_STATE_MEMORY

            if self.state_memory < MIN_STATE_MEMORY:
                raise ConfigError("state_memory", f"{self.state_memory:,} bytes is too small "
                                                  f"to hold even one key partition's working "
                                                  f"set (at least {MIN_STATE_MEMORY >> 20} MiB "
                                                  f"per window branch)")
        if self.ft is not None:
            if self.persist is None:
                raise ConfigError("persist", "is needed by fault tolerance (a storage folder "
                                             "to recover from)")
            if self.ft.persist_input is False and self.persist.reduces:
                raise ConfigError("persist", "cannot reduce input that is not persisted "
                                             "(checkpoint-only): drop push-up and compression")

    def engine_config(self, spill=None):
        """The engine's settings of this run (:class:`~scabbard.engine.EngineConfig`); ``spill``:
        where window state beyond ``state_memory`` goes (needed with a budget)."""
        from scabbard.engine import EngineConfig
        from scabbard.engine.adaptive import AdaptivePolicy

        return EngineConfig(workers=self.workers or os.cpu_count() or 1,
                            batch_rows=self.batch_rows, metrics_interval=self.metrics_interval,
                            assembly=self.assembly, ingress_partitions=self.ingress_partitions,
                            state_memory=self.state_memory, spill=spill,
                            adaptive=AdaptivePolicy() if self.adaptive_kernels else None)

    @property
    def replay(self):
        """How the run reads its dataset (:class:`~scabbard.engine.Replay`): once, or
        endlessly for ``duration`` or up to ``max_tuples``, at most ``rate`` a second."""
        from scabbard.engine import Replay

        return Replay(rate=self.rate, duration=self.duration, max_tuples=self.max_tuples)

    def argv(self) -> list[str]:
        """The ``scabbard run`` flags that make this configuration (the inverse of the
        command's reading of them; the process controller starts engines with it).  A
        setting with no flag (``FTConfig.every_tasks``, ``aligned``, a storage layout of
        its own) cannot be written: ValueError names it."""
        out = ["--query", self.query]
        if self.data is not None:
            out += ["--data", str(self.data)]
        if self.verify != "once":
            out.append("--verify" if self.verify is True else "--no-verify")
        out += field_argv(self, skip=("query", "data", "verify"))
        p, ft = self.persist, self.ft
        if p is not None:
            if p.layout != StorageConfig():
                raise ValueError("PersistConfig.layout has no flag: a run with a storage "
                                 "layout of its own cannot be started from the command line")
            out += field_argv(p, skip=("layout", "persist_at"))
            if ft is None:
                if p.persist_at:
                    raise ValueError("PersistConfig.persist_at goes with fault tolerance")
                out.append("--persist-input")
        if ft is not None:
            if ft.interval is None:
                raise ValueError("FTConfig.interval None has no flag: a run started from the "
                                 "command line checkpoints on a timer")
            out += ["--output", str(ft.output), "--checkpoint-interval", str(ft.interval)]
            out += field_argv(ft, skip=("output", "interval", "persist_input"))
            ingress = ft.persist_input is not False
            if p is not None and p.persist_at:
                out += ["--persist-at", ",".join((("ingress",) if ingress else ())
                                                 + p.persist_at)]
            elif not ingress:
                out.append("--checkpoint-only")
        return out

    @classmethod
    def of(cls, query: str, **fields) -> RunConfig:
        """A configuration from its fields by name, wherever each sits: ``rate`` on the run,
        ``push_up`` on its :class:`PersistConfig`, ``interval`` on its :class:`FTConfig`
        (the names are unique across the three).  A persistence field makes the run
        persisted (``storage`` is then needed); a fault-tolerance field makes it
        fault-tolerant (``output`` is then needed).  An unknown name is a TypeError."""
        parts: dict[type, dict] = {cls: {}, PersistConfig: {}, FTConfig: {}}
        names = {f.name: c for c in parts for f in dataclasses.fields(c)}
        for name, value in fields.items():
            if name not in names or name in ("persist", "ft"):
                raise TypeError(f"RunConfig.of got an unknown setting {name!r}")
            parts[names[name]][name] = value
        ft = FTConfig(**parts[FTConfig]) if parts[FTConfig] else None
        persist = PersistConfig(**parts[PersistConfig]) if parts[PersistConfig] or ft else None
        return cls(query, **parts[cls], persist=persist, ft=ft)
