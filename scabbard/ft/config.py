"""One frozen configuration per run (docs/design.md, STYLE.md rule 7).

:class:`RunConfig` says what to run (query, data, rate, limits, workers, batch size);
:class:`PersistConfig` whether and how its input is persisted (storage folder, push-up,
compression); :class:`FTConfig` whether it is fault-tolerant (exactly-once output, sink,
checkpoint interval, durability, crash point).  Each validates its own fields and raises
:class:`ConfigError` with one line naming the field; the CLI's flags map onto them one to
one, and :func:`scabbard.ft.run.open_run` opens a run from a :class:`RunConfig`, fresh or
recovering.  Nothing here reads the environment.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from pathlib import Path

from scabbard.compression.policy import SCHEMES
from scabbard.errors import UserError
from scabbard.faults import POINTS
from scabbard.ft.modes import CHECKPOINT_MODES, DURABILITIES, INTERVAL, SINKS
from scabbard.storage import StorageConfig

MAX_INTERVAL = 86_400.0  # a checkpoint at least once a day


class ConfigError(UserError, ValueError):
    """A configuration that cannot be run: ``field`` and what is wrong with it (``problem``);
    the CLI names the flag the field maps onto."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field} {problem}")
        self.field, self.problem = field, problem


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

    storage: Path
    push_up: bool = False  # --push-up
    compression: str | None = None  # --compression; None: "none", or as recorded (recovery)
    lossy_decimals: int | None = None  # --lossy-decimals
    compression_interval: float = 4.0  # --compression-interval
    layout: StorageConfig = field(default_factory=StorageConfig)  # the pool's files
    persist_at: tuple[str, ...] = ()  # --persist-at: edges between operators with p-streams

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

    output: Path  # --output
    sink: str = "clocked"  # --exactly-once
    interval: float | None = INTERVAL  # --checkpoint-interval (None: none on a timer)
    every_tasks: int | None = None  # a checkpoint every that many tasks (deterministic)
    durability: str | None = None  # --durability; None: machine, or as recorded (recovery)
    persist_input: bool | None = None  # False: --checkpoint-only; None: as recorded / True
    aligned: bool = False  # Flink-style aligned checkpoints (the paper's Flink++)
    crash_at: str | None = None  # a crash point, NAME[:K] (scabbard.faults), for tests
    spawned_at: float | None = None  # when the process was spawned (recovery phases)
    # --checkpoint-mode: full (every checkpoint writes every pane its open windows need),
    # incremental (closed panes written once, as pane units) or eventual (CEC: incremental,
    # the panes saved in steps between records); None: full, or as recorded (recovery)
    checkpoint_mode: str | None = None
    step_ms: float = 10.0  # eventual: --checkpoint-step, CI (the period CP is ``interval``)
    max_unsaved_panes: int | None = None  # eventual: --max-unsaved-panes, Q (forces a step)
    max_replay_tuples: int | None = None  # eventual: --max-replay-tuples, U (forces a record)

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
    rate: float | None = None  # input tuples per second
    duration: float | None = None  # wall seconds (the dataset replayed until then)
    max_tuples: int | None = None  # input tuples (the dataset replayed until then)
    workers: int | None = None  # None: one per core
    batch_rows: int | None = None  # tuples per task (None: from the data)
    metrics_interval: float = 0.5
    metrics_log: Path | None = None
    verify: bool | str = "once"  # the dataset's checksums: once per change, True always, False
    persist: PersistConfig | None = None
    ft: FTConfig | None = None
    assembly: str = "auto"  # serial | partitioned[:P] | auto (EngineConfig.assembly)
    ingress_partitions: int | None = None  # None: by the workers (EngineConfig)
    state_memory: int | None = None  # bytes of window state in memory (EngineConfig)
    spill_dir: Path | None = None  # where state beyond it goes (None: the system's temp)
    adaptive_kernels: bool = False  # adaptive query compilation (EngineConfig.adaptive)

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
            parse_assembly(self.assembly)
        except ValueError as e:
            raise ConfigError("assembly", str(e).removeprefix("assembly ")) from None
        if self.state_memory is not None:
            from scabbard.engine.spill import MIN_STATE_MEMORY

            if self.ft is not None and self.ft.checkpoint_mode not in (None, "full"):
                raise ConfigError("state_memory", f"state under a memory budget is "
                                                  f"checkpointed by its spilled units, once "
                                                  f"each: checkpoint mode "
                                                  f"{self.ft.checkpoint_mode!r} does not apply")
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
