"""How the engine runs a query: :class:`EngineConfig`, its limits and the assembly modes."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from scabbard.engine import memory


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "scabbard" / "codegen"


# threads of one process: beyond this a run fails to start its threads (100,000 did, with a
# traceback) long before the cores could use them
MAX_WORKERS = 1024


@dataclass(frozen=True)
class EngineConfig:
    """How the engine runs a query.  ``batch_rows=None`` sizes batches from the data."""

    workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    batch_rows: int | None = None
    queue_depth: int | None = None
    cache_dir: Path = field(default_factory=default_cache_dir)
    metrics_interval: float = 0.5
    # the windows no task computes alone: one sequential state per branch ("serial"), its
    # groups split by key between partitions run at once ("partitioned[:P]", P = workers), or
    # the dataflow where a task's keys are many, partitioned where that is expected to help
    # ("auto": engine/layout.py, Engine.assembly_parts); or the
    # window operator as PipeFabric's partitioned dataflow ("dataflow[:P]", engine/dataflow.py:
    # its input routed by key to P partition threads; P planned from the first batch)
    assembly: str = "auto"
    # the source read by this many threads (parallel ingress, engine/ingress.py); None: one
    # per INGRESS_WORKERS workers (Engine.ingress_partitions)
    ingress_partitions: int | None = None
    # bytes the window state may hold in memory, shared by the window branches; beyond it key
    # partitions go to disk (engine/spill.py).  None: no limit
    state_memory: int | None = None
    # where the spilled state goes: a factory of a SpillStore per window operator (engine/ports;
    # scabbard.ft.spillstore.disk_spill(folder) keeps it on disk)
    spill: object = field(default=None, compare=False, repr=False)
    # adaptive query compilation (engine/adaptive.py): each branch's kernels
    # profiled, specialised and swapped while the query runs.  None: the generic kernels
    adaptive: object = None
    # the process's allocator (engine/memory.py): "reuse" keeps freed task memory for the next
    # task, "system" leaves glibc's defaults; applied by a process's first engine
    allocator: str = "reuse"

    def __post_init__(self) -> None:
        if not 1 <= self.workers <= MAX_WORKERS:
            raise ValueError(f"workers must be between 1 and {MAX_WORKERS} (threads of one "
                             f"process; this machine has {os.cpu_count()} cores), got "
                             f"{self.workers}")
        p = self.ingress_partitions
        if p is not None and (not isinstance(p, int) or isinstance(p, bool) or p < 1):
            raise ValueError(f"ingress_partitions must be a whole number >= 1, got {p!r}")
        parse_assembly(self.assembly)
        if self.allocator not in memory.MODES:
            raise ValueError(f"allocator must be one of {', '.join(memory.MODES)}, "
                             f"got {self.allocator!r}")
        if self.state_memory is not None:
            from scabbard.engine.spill import MIN_STATE_MEMORY

            if self.state_memory < MIN_STATE_MEMORY:
                raise ValueError(f"a state memory budget of {self.state_memory:,} bytes is "
                                 f"too small to hold even one key partition's working set "
                                 f"(at least {MIN_STATE_MEMORY >> 20} MiB per window branch)")
            if self.spill is None:
                raise ValueError("a state memory budget needs a spill store: EngineConfig("
                                 "spill=scabbard.ft.spillstore.disk_spill(folder))")
        if self.batch_rows is not None and self.batch_rows < 1:
            raise ValueError(f"batch_rows must be >= 1, got {self.batch_rows}")


ASSEMBLY_MODES = ("serial", "partitioned", "auto", "dataflow")
# by default, one ingress partition per this many workers: the dispatcher's share of a tuple
# (the persisted input's push-up, codecs and p-unit; 2-7 ns here) is at most a quarter
# of the cheapest query's work on the other threads (CM2: fragment and codecs, ~6 ns), so a
# quarter of the workers' count keeps the ingress ahead of them (scabbard sim run
# --ingress-partitions); below 8 workers one, the dispatcher's own path
INGRESS_WORKERS = 4
AUTO_MIN_WORKERS = 4  # `auto` partitions from this many workers on (see Engine.assembly_parts)


def parse_assembly(text: str) -> tuple[str, int | None]:
    """``serial`` | ``partitioned[:P]`` | ``auto`` | ``dataflow[:P]`` -> (mode, P or None)."""
    mode, _, n = str(text).partition(":")
    if mode not in ASSEMBLY_MODES or (mode not in ("partitioned", "dataflow") and n):
        raise ValueError(f"assembly must be serial, partitioned[:P], auto or dataflow[:P], "
                         f"got {text!r}")
    if not n:
        return mode, None
    if not n.isdigit() or int(n) < 1:
        raise ValueError(f"{mode}:P needs a whole number of partitions >= 1, got {n!r}")
    return mode, int(n)
