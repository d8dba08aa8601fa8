"""What the simulator is told: the hardware, the measured costs, and the run.

Three frozen objects (docs/design.md):

* :class:`Hardware` - the machine: cores, the disk (write and read bandwidth, IOPS and
  the size one I/O counts for, per-request latency, queue depth) and the network the
  input arrives over (None: a local source).  Hypothetical machines are inputs;
  :data:`PAPER_SSD` and :data:`PAPER_REMOTE_STORAGE` are the paper's (§6.1, §6.6).
* :class:`QueryCosts` and :class:`Calibration` - what each piece of the engine costs on
  one core of the calibrated machine, per query, as measured by
  :func:`scabbard.sim.calibrate.calibrate` with the real code; saved as JSON
  (:func:`save`, :func:`load`) with the machine it was measured on and the date.
* :class:`SimConfig` - the run: query, workers, batch size, persisted input and its
  compression, checkpoint interval, duration, input rate, a fail-stop moment.

Every constructor validates and raises :class:`ValueError` with the bad field named.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from scabbard.ft.flags import Group, flag

MB = 1e6
# how the input is persisted, with measured costs: raw, the default codecs, and after
# persistence push-up (σ, π below the p-stream, §3.4) raw, with the codecs, or lossy
SCHEMES = ("none", "default", "push-up", "push-up+default", "push-up+adaptive", "push-up+lossy")
FORMAT_VERSION = 1


def _positive(owner: str, **values) -> None:
    for name, v in values.items():
        if v is not None and not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
            raise ValueError(f"{owner}.{name} must be a positive number, got {v!r}")


def _non_negative(owner: str, **values) -> None:
    for name, v in values.items():
        if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
            raise ValueError(f"{owner}.{name} must be >= 0, got {v!r}")


def kib(text: str) -> int:
    """``--io-kb``'s value: KiB, as bytes."""
    return int(float(text) * 1024)


def gbps(text: str) -> float:
    """``--network-gbps``'s value: Gbit/s, as MB/s."""
    return float(text) * 1e9 / 8 / MB


def _hw(name: str, help: str, type=float, metavar: str | None = None) -> dict:
    """A :class:`Hardware` field's flag (``scabbard sim run``; :mod:`scabbard.ft.flags`)."""
    return flag(name, help, Group.HARDWARE, type=type, metavar=metavar)


def _run(name: str, help: str, negatable: bool = False, choices=None) -> dict:
    """A :class:`SimConfig` field set by the engine's flag of that name (``scabbard sim run``:
    declared by the run's configuration or the commands' shared flags)."""
    return flag(name, help, Group.SIM_RUN, shared=True, negatable=negatable, choices=choices)


@dataclass(frozen=True)
class Hardware:
    """A machine to simulate.  Bandwidths in MB/s (10^6 bytes/s).

    The disk serves requests one after the other at ``disk_write_mb_s`` (reads at
    ``disk_read_mb_s``), each occupying it for ``max(bytes / bandwidth, ios / disk_iops)``
    where a request counts ``ceil(bytes / io_bytes)`` I/Os (one if ``io_bytes`` is None;
    remote block storage counts I/Os of up to 256 KiB); ``disk_latency_ms`` is added to
    every request and overlaps with the others, ``queue_depth`` requests at a time.
    ``network_mb_s``: the link the input arrives over (None: the source is local).
    ``background_cores``: other processes keep this many cores busy on average (a shared
    machine: their work arrives every 10 ms and queues for the cores like the engine's).
    ``disk_fresh_write_mb_s``: writes into space never written before - new pool files,
    allocated but unwritten (the file system converts their extents); None: as the others.
    ``core_speed``: how fast a core is against the calibrated machine's (2.0: every
    measured CPU cost takes half the time) - a faster CPU, or this machine at a slower
    moment (:func:`scabbard.sim.machine.speed_probe`).
    """

    cores: int = field(metadata=_hw("--cores", "cores", int))
    disk_write_mb_s: float = field(metadata=_hw("--disk-mb-s", "disk write bandwidth, MB/s",
                                                metavar="MB_S"))
    disk_read_mb_s: float | None = field(default=None, metadata=_hw(  # None: as the write's
        "--disk-read-mb-s", "disk read bandwidth, MB/s (default: as the write bandwidth)",
        metavar="MB_S"))
    disk_fresh_write_mb_s: float | None = None
    disk_iops: float | None = field(default=None, metadata=_hw("--iops", "disk IOPS cap"))
    io_bytes: int | None = field(default=None, metadata=_hw(  # None: any size is one I/O
        "--io-kb", "KiB one I/O covers for the IOPS count (remote block storage: 256)", kib,
        "KIB"))
    disk_latency_ms: float = field(default=0.0, metadata=_hw(
        "--disk-latency-ms", "latency per request", metavar="MS"))
    queue_depth: int = field(default=32, metadata=_hw(
        "--queue-depth", "requests outstanding per process", int))
    network_mb_s: float | None = field(default=None, metadata=_hw(
        "--network-gbps", "the input arrives over a link of this many Gbit/s (default: local)",
        gbps, "GBPS"))
    background_cores: float = 0.0
    core_speed: float = field(default=1.0, metadata=_hw(  # relative to the calibrated machine's
        "--core-speed", "each core's speed against the calibrated machine's (2: twice as fast)",
        metavar="X"))
    name: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.cores, int) or isinstance(self.cores, bool) or self.cores < 1:
            raise ValueError(f"Hardware.cores must be an integer >= 1, got {self.cores!r}")
        _positive("Hardware", disk_write_mb_s=self.disk_write_mb_s,
                  disk_read_mb_s=self.disk_read_mb_s, disk_iops=self.disk_iops,
                  disk_fresh_write_mb_s=self.disk_fresh_write_mb_s,
                  io_bytes=self.io_bytes, network_mb_s=self.network_mb_s,
                  core_speed=self.core_speed)
        _non_negative("Hardware", disk_latency_ms=self.disk_latency_ms,
                      background_cores=self.background_cores)
        if self.background_cores >= self.cores:
            raise ValueError(f"Hardware.background_cores ({self.background_cores}) leaves none of "
                             f"the {self.cores} cores to the engine")
        if not isinstance(self.queue_depth, int) or self.queue_depth < 1:
            raise ValueError(f"Hardware.queue_depth must be an integer >= 1, "
                             f"got {self.queue_depth!r}")

    @property
    def read_mb_s(self) -> float:
        return self.disk_read_mb_s or self.disk_write_mb_s


# The paper's machines (§6.1; §6.6 for remote storage and ingest): hardware parameters
# are inputs, not measurements of this machine.
PAPER_SSD = Hardware(cores=16, disk_write_mb_s=950.0, disk_iops=72_000, name="paper: 16 cores, SSD")
PAPER_REMOTE_STORAGE = Hardware(cores=16, disk_write_mb_s=700.0, disk_iops=16_000,
                                io_bytes=256 << 10, disk_latency_ms=1.0,
                                name="paper: remote block storage")
PAPER_RDMA_INGEST = replace(PAPER_SSD, network_mb_s=100e9 / 8 / MB,
                            name="paper: 100 Gb/s RDMA ingest")


@dataclass(frozen=True)
class PersistCosts:
    """Persisting the input under one compression scheme, per input tuple."""

    stored_bytes_per_tuple: float  # segment bytes (headers, padding, compressed columns)
    compress_ns: float  # the codecs (0 for "none"), on the compression pool
    encode_ns: float  # the segment: copy and checksum, on the BlockManager's encoder pool
    decode_ns: float  # reading it back: checksum verified, columns decompressed
    append_ns: float = 0.0  # the dispatcher's share: p-units, retain markers, deliveries
    # the tasks' work (fragments, assembly) relative to the full input's: below 1 after
    # persistence push-up, whose tasks hold only the tuples and attributes it kept
    work: float = 1.0
    other_ns: float = 0.0  # CPU no timed part accounts for, beyond the unpersisted run's
    # with ingress partitions: a partition's turn (its p-unit appended in order: serial) per
    # tuple, and the dispatcher's per task (p-units read, tasks handed out); None: not measured
    turn_ns: float | None = None
    dispatch_ns_task: float | None = None

    def __post_init__(self) -> None:
        _positive("PersistCosts", stored_bytes_per_tuple=self.stored_bytes_per_tuple,
                  work=self.work)
        _non_negative("PersistCosts", compress_ns=self.compress_ns, encode_ns=self.encode_ns,
                      decode_ns=self.decode_ns, append_ns=self.append_ns, other_ns=self.other_ns,
                      **{k: v for k, v in (("turn_ns", self.turn_ns),
                                           ("dispatch_ns_task", self.dispatch_ns_task))
                         if v is not None})


@dataclass(frozen=True)
class DataflowCosts:
    """A query as PipeFabric's partitioned dataflow (``--assembly dataflow:P``), per input
    tuple, measured with two partitions (:func:`scabbard.sim.dataflow.measure_dataflow`):
    the dispatcher's routing, the partitions' work in all (front, pane aggregation, their
    windows), the merge's; and the partitions' shares of the tuples for 1, 2, ...
    partitions, the router's on the dataset's first batches."""

    route_ns: float
    partitions_ns: float
    merge_ns: float
    shares: list[list[float]]

    def __post_init__(self) -> None:
        _non_negative("DataflowCosts", route_ns=self.route_ns,
                      partitions_ns=self.partitions_ns, merge_ns=self.merge_ns)
        if not self.shares or any(len(s) != p for p, s in enumerate(self.shares, 1)):
            raise ValueError("DataflowCosts.shares: a share a partition, for 1, 2, ... "
                             "partitions")

    def shares_of(self, parts: int) -> list[float]:
        """The ``parts`` partitions' shares of the tuples (measured up to len(shares))."""
        if parts > len(self.shares):
            raise ValueError(f"the calibration measured the dataflow's shares up to "
                             f"{len(self.shares)} partitions, not {parts}")
        return self.shares[parts - 1]


@dataclass(frozen=True)
class QueryCosts:
    """Measured costs of one query on one core (ns; ``*_task`` per task, ``*_tuple`` per tuple).

    A task of ``n`` tuples costs ``fragment_ns_task + n * fragment_ns_tuple`` on a worker
    (the fragment function and the boundary windows: parallel) and
    ``assembly_ns_task + n * assembly_ns_tuple`` in assembly (serial, in task order).
    A task of fewer than ``long_rows`` tuples is *short* - it spans too few panes to have
    windows of its own, and the assembler computes them all - and costs ``n`` times the
    ``short_*`` figures, measured on such tasks (when the calibration found the regime).
    ``fragment_shared``: the fragment's cost while the engine's other threads keep cores
    busy, relative to running alone (one process: its allocator, page faults and memory
    traffic; measured with two workers).
    """

    query: str
    row_bytes: int  # the paper's layout (Table 3): what throughput in MB/s counts
    batch_rows: int  # the engine's default task size for this query's data
    source_ns_tuple: float  # the dispatcher's thread: the source's batch, tasks handed out
    fragment_ns_task: float
    fragment_ns_tuple: float
    assembly_ns_task: float
    assembly_ns_tuple: float
    persist: dict[str, PersistCosts]  # compression scheme -> costs
    state_bytes: float  # operator state per checkpoint
    state_load_s: float  # its p-units rebuilt in recovery (CPU: the disk's read time apart)
    code_load_s: float  # a new process: the query's compiled code and data opened
    fragment_shared: float = 1.0
    horizon_tuples: int = 0  # input an open window may still need (released beyond: GC)
    restart_warmup_s: float = 0.0  # a new process's first tasks, beyond their parts
    long_rows: int = 0
    # the dataset's rows: the source replays it in copies and a batch never spans two
    # (``ReplaySource``), so tasks are at most this long (0: an unbounded stream)
    dataset_rows: int = 0
    short_fragment_ns_tuple: float | None = None
    short_assembly_ns_tuple: float | None = None
    # key-partitioned assembly (``--assembly partitioned``), measured with two partitions:
    # its CPU against the serial assembly's (the split and the merge), and the share of it
    # the partitions run at once (the rest stays on the assembling core); 0: the query's
    # windows cannot be partitioned (no group keys)
    partition_overhead: float = 1.0
    partition_share: float = 0.0
    partition_fragment_ns_tuple: float = 0.0  # the fragment's split of its partials, per tuple
    # the CPU of no timed part (the workers' and pools' bookkeeping), per tuple: parallel
    other_ns_tuple: float = 0.0
    # parallel ingress (``--ingress-partitions``), measured with two partitions: an ingress
    # partition's thread per tuple (its batches cut and handed on) and the dispatcher's per
    # task (taking them in order, handing them out); None: not measured (the dispatcher's
    # ``source_ns_tuple`` split between the partitions, nothing left to it)
    ingress_ns_tuple: float | None = None
    dispatch_ns_task: float | None = None
    # adaptive kernels (``--adaptive-kernels``): the fragment's time per tuple the optimised
    # variants save once swapped in (0: none kept - nothing to specialise, or it lost its trial)
    adaptive_saving_ns_tuple: float = 0.0
    measured: dict = field(default_factory=dict)  # the engine's own figures, for reference
    # a replayed copy's timestamps shifted, per tuple: paid where a batch is persisted (the
    # dispatcher, or an ingress partition); a run that only computes defers it to the
    # fragment, which adds the shift at no cost (``scabbard.batch.ReplayBatch``)
    shift_ns_tuple: float = 0.0
    # as a partitioned dataflow (None: not measured, or its groups cannot be routed)
    dataflow: DataflowCosts | None = None

    def __post_init__(self) -> None:
        if isinstance(self.dataflow, dict):
            object.__setattr__(self, "dataflow", DataflowCosts(**self.dataflow))
        _positive("QueryCosts", row_bytes=self.row_bytes, batch_rows=self.batch_rows,
                  fragment_shared=self.fragment_shared)
        _non_negative("QueryCosts", source_ns_tuple=self.source_ns_tuple,
                      fragment_ns_task=self.fragment_ns_task,
                      fragment_ns_tuple=self.fragment_ns_tuple,
                      assembly_ns_task=self.assembly_ns_task,
                      assembly_ns_tuple=self.assembly_ns_tuple, state_bytes=self.state_bytes,
                      state_load_s=self.state_load_s, code_load_s=self.code_load_s,
                      horizon_tuples=self.horizon_tuples,
                      restart_warmup_s=self.restart_warmup_s,
                      partition_overhead=self.partition_overhead,
                      partition_fragment_ns_tuple=self.partition_fragment_ns_tuple,
                      other_ns_tuple=self.other_ns_tuple,
                      adaptive_saving_ns_tuple=self.adaptive_saving_ns_tuple,
                      shift_ns_tuple=self.shift_ns_tuple,
                      **{k: v for k, v in (("ingress_ns_tuple", self.ingress_ns_tuple),
                                           ("dispatch_ns_task", self.dispatch_ns_task))
                         if v is not None})
        if not 0.0 <= self.partition_share <= 1.0:
            raise ValueError(f"QueryCosts({self.query}).partition_share must be in [0, 1], "
                             f"got {self.partition_share!r}")
        if "none" not in self.persist:
            raise ValueError(f"QueryCosts({self.query}).persist needs the 'none' scheme")
        object.__setattr__(self, "persist", {k: v if isinstance(v, PersistCosts)
                                             else PersistCosts(**v)
                                             for k, v in self.persist.items()})

    @property
    def best_scheme(self) -> str:
        """How Scabbard would persist this query's input: push-up and the lossless codecs
        where calibrated - the default ones or the adaptive scheme's picks, whichever stores
        fewer bytes - else the codecs, else raw."""
        pushed = [s for s in ("push-up+default", "push-up+adaptive") if s in self.persist]
        if pushed:
            return min(pushed, key=lambda s: self.persist[s].stored_bytes_per_tuple)
        return next(s for s in ("default", "none") if s in self.persist)

    def _short(self, n: int) -> bool:
        return n < self.long_rows and self.short_fragment_ns_tuple is not None

    def fragment_s(self, n: int, adaptive: bool = False) -> float:
        """A task of ``n`` tuples on a worker; ``adaptive``: with the optimised variants."""
        saving = self.adaptive_saving_ns_tuple if adaptive else 0.0
        if self._short(n):
            return n * max(0.0, self.short_fragment_ns_tuple - saving) * 1e-9
        return (self.fragment_ns_task + n * max(0.0, self.fragment_ns_tuple - saving)) * 1e-9

    def split_s(self, n: int, parts: int) -> float:
        """What a fragment spends splitting its partials between ``parts`` partitions."""
        if parts < 2 or self.partition_share <= 0:
            return 0.0
        return n * self.partition_fragment_ns_tuple * 1e-9

    def assembly_parts_s(self, n: int, parts: int) -> tuple[float, float]:
        """A task's assembly split into ``parts`` partitions: (seconds on the assembling core,
        seconds on each of the other ``parts - 1``)."""
        c = self.assembly_s(n)
        if parts < 2 or self.partition_share <= 0:
            return c, 0.0
        c *= self.partition_overhead
        each = c * self.partition_share / parts
        return c * (1.0 - self.partition_share) + each, each

    def ingress_s(self, n: int, parts: int, scheme: str | None) -> tuple[float, float, float]:
        """Seconds of the source's batch of ``n`` tuples read by ``parts`` ingress threads,
        persisted under ``scheme`` (None: not persisted): (on its partition's thread, in its
        turn, on the dispatcher).  One partition: the dispatcher does it all."""
        p = self.persist[scheme] if scheme is not None else None
        append = p.append_ns if p is not None else 0.0
        shift = self.shift_ns_tuple if p is not None else 0.0
        if parts < 2:
            return 0.0, 0.0, n * (self.source_ns_tuple + shift + append) * 1e-9
        ingress = (self.source_ns_tuple if self.ingress_ns_tuple is None
                   else self.ingress_ns_tuple) + shift
        turn = 0.0 if p is None else (append if p.turn_ns is None else p.turn_ns)
        task = (self.dispatch_ns_task if p is None or p.dispatch_ns_task is None
                else p.dispatch_ns_task) or 0.0
        return n * ingress * 1e-9, n * turn * 1e-9, task * 1e-9

    def assembly_s(self, n: int) -> float:
        if self._short(n):
            return n * self.short_assembly_ns_tuple * 1e-9
        return (self.assembly_ns_task + n * self.assembly_ns_tuple) * 1e-9


@dataclass(frozen=True)
class SystemCosts:
    """Costs that do not depend on the query (measured once per machine)."""

    process_start_s: float  # spawn -> interpreter up and the engine's modules imported
    storage_open_s: float  # the storage folder reopened, checkpoint records read
    record_s: float  # a checkpoint record written and fsynced (the commit)
    copy_ns_byte: float  # memory copy (the checkpoint's cut of the state partials)
    io_cpu_ns_byte: float  # CPU an I/O thread spends per byte written (O_DIRECT)
    read_cpu_ns_byte: float  # ... per byte read back into a fresh buffer (recovery's replay)
    encode_threads: int = 2  # the BlockManager's (StorageConfig)
    io_threads: int = 2
    bulk_bytes: int = 32 << 20  # group commit: the largest write
    pstream_units: int = 64  # p-units a p-stream holds in memory ahead of its reader
    pstream_bytes: int = 256 << 20  # ... and bytes (of their raw columns)

    def __post_init__(self) -> None:
        _non_negative("SystemCosts", process_start_s=self.process_start_s,
                      storage_open_s=self.storage_open_s, record_s=self.record_s,
                      copy_ns_byte=self.copy_ns_byte, io_cpu_ns_byte=self.io_cpu_ns_byte,
                      read_cpu_ns_byte=self.read_cpu_ns_byte)
        _positive("SystemCosts", encode_threads=self.encode_threads,
                  io_threads=self.io_threads, bulk_bytes=self.bulk_bytes,
                  pstream_units=self.pstream_units, pstream_bytes=self.pstream_bytes)


@dataclass(frozen=True)
class Calibration:
    """Measured costs of this machine: per query, and the query-independent ones."""

    hardware: Hardware  # the calibrated machine as measured (disk bandwidth, latency, IOPS)
    system: SystemCosts
    queries: dict[str, QueryCosts]
    machine: dict = field(default_factory=dict)  # CPU model, kernel, Python, numba...
    created: str = ""  # ISO date and time of the measurement

    def costs(self, query: str) -> QueryCosts:
        key = query.upper()
        if key not in self.queries:
            raise ValueError(f"the calibration has no costs for query {query!r} (it has "
                             f"{', '.join(self.queries) or 'none'}): run `scabbard sim "
                             f"calibrate --queries {key}`")
        return self.queries[key]


@dataclass(frozen=True)
class SimConfig:
    """One simulated run (the engine's ``run_query``/``run_fault_tolerant`` arguments).

    ``checkpoint_interval`` (seconds) makes it a fault-tolerant run; ``persist`` stores the
    input in the ingress p-stream (compressed with ``compression``); ``fail_at`` kills the
    engine (fail-stop) at that simulated second and recovers it; ``rate`` caps the input
    (tuples/s; None: as fast as the engine takes it); ``duration``: seconds of input;
    ``max_tuples``: stop the input after that many tuples instead; ``source_lead``: seconds
    the input has been arriving before the engine starts (a backlog waits for it - the
    engine's restartable source counts arrivals from the run's start, before code loading).
    """

    query: str
    workers: int = field(metadata=_run("--workers", "worker threads (default: the cores)"))
    # None: the engine's default for the query (calibrated)
    batch_rows: int | None = field(default=None, metadata=_run(
        "--batch", "tuples per task (default: the engine's for the query)"))
    persist: bool = field(default=False, metadata=_run(
        "--persist-input", "persist the input in the ingress p-stream (default) or not",
        negatable=True))
    compression: str = field(default="none", metadata=_run(
        "--compression", "how the input is persisted: raw (none), the default codecs, or "
        "after persistence push-up (raw, codecs, lossy floats); default: none", choices=SCHEMES))
    checkpoint_interval: float | None = field(default=None, metadata=_run(
        "--checkpoint-interval", "checkpoint every SECONDS (default 1; 0: no checkpoints)"))
    duration: float = field(default=10.0, metadata=_run(
        "--sim-seconds", "simulated seconds of input (default 10)"))
    rate: float | None = field(default=None, metadata=_run(
        "--rate", "input rate cap, tuples/s"))
    fail_at: float | None = field(default=None, metadata=flag(
        "--fail-at", "kill the engine at this simulated second and recover", Group.SIM_RUN,
        type=float, metavar="SECONDS"))
    max_tuples: int | None = None
    bulk_bytes: int | None = None  # group commit's largest write (None: the engine's)
    source_lead: float = 0.0
    timeline_interval: float = 0.5
    # the engine's --assembly: its windows' groups split between this many partitions, run
    # at once (1: serial)
    assembly_parts: int = field(default=1, metadata=flag(
        "--assembly-parts", "the engine's --assembly partitioned:P (the windows' groups split "
        "between P partitions run at once; default 1: serial)", Group.SIM_RUN, type=int,
        metavar="P"))
    # the engine's --ingress-partitions: the source read by this many threads (1: the
    # dispatcher reads it)
    ingress_partitions: int = field(default=1, metadata=_run(
        "--ingress-partitions", "the engine's --ingress-partitions: the source read by N "
        "threads, each cutting its batches and appending them in turn, the dispatcher only "
        "handing tasks out (default 1: the dispatcher does it all)"))
    # the engine's --adaptive-kernels: the fragments in their optimised variants (what the
    # calibration measured them to save; the profiling and trial tasks are not modelled)
    adaptive_kernels: bool = field(default=False, metadata=_run(
        "--adaptive-kernels", "the engine's --adaptive-kernels: each fragment at the time its "
        "optimised variant took in the calibration (filters reordered, dense aggregation; "
        "nothing saved where the variant lost its trial)"))
    # the engine's --assembly dataflow:P - P partition threads fed by key from the dispatcher,
    # merged in order (0: the task-parallel engine; sim/dataflow.py)
    dataflow_parts: int = field(default=0, metadata=flag(
        "--dataflow-parts", "the engine's --assembly dataflow:P: P partition threads fed by "
        "key from the dispatcher, merged in order (its costs from `scabbard sim calibrate`; "
        "default 0: the task-parallel engine)", Group.SIM_RUN, type=int, metavar="P"))

    def __post_init__(self) -> None:
        from scabbard.queries import NAMES

        if not isinstance(self.query, str) or self.query.upper() not in NAMES:
            raise ValueError(f"SimConfig.query: unknown query {self.query!r} (choose from "
                             f"{', '.join(NAMES)})")
        object.__setattr__(self, "query", self.query.upper())
        if not isinstance(self.workers, int) or self.workers < 1:
            raise ValueError(f"SimConfig.workers must be an integer >= 1, got {self.workers!r}")
        if not isinstance(self.assembly_parts, int) or self.assembly_parts < 1:
            raise ValueError(f"SimConfig.assembly_parts must be an integer >= 1, "
                             f"got {self.assembly_parts!r}")
        if not isinstance(self.dataflow_parts, int) or self.dataflow_parts < 0:
            raise ValueError(f"SimConfig.dataflow_parts must be an integer >= 0, "
                             f"got {self.dataflow_parts!r}")
        if self.dataflow_parts and (self.assembly_parts > 1 or self.adaptive_kernels):
            raise ValueError("SimConfig.dataflow_parts runs the generic kernels and no "
                             "assembly partitions, as the engine's dataflow does: leave "
                             "SimConfig.assembly_parts at 1 and SimConfig.adaptive_kernels "
                             "off")
        if not isinstance(self.ingress_partitions, int) or self.ingress_partitions < 1:
            raise ValueError(f"SimConfig.ingress_partitions must be an integer >= 1, "
                             f"got {self.ingress_partitions!r}")
        if self.batch_rows is not None and (not isinstance(self.batch_rows, int)
                                            or self.batch_rows < 1):
            raise ValueError(f"SimConfig.batch_rows must be an integer >= 1, "
                             f"got {self.batch_rows!r}")
        if self.compression not in SCHEMES:
            raise ValueError(f"SimConfig.compression must be one of {', '.join(SCHEMES)}, got "
                             f"{self.compression!r}")
        if self.compression != "none" and not self.persist:
            raise ValueError("SimConfig.compression applies to the persisted input: set "
                             "persist=True")
        _positive("SimConfig", checkpoint_interval=self.checkpoint_interval,
                  duration=self.duration, rate=self.rate, max_tuples=self.max_tuples,
                  timeline_interval=self.timeline_interval)
        _non_negative("SimConfig", source_lead=self.source_lead)
        if self.bulk_bytes is not None and self.bulk_bytes < 0:
            raise ValueError(f"SimConfig.bulk_bytes must be >= 0, got {self.bulk_bytes}")
        if self.fail_at is not None:
            _positive("SimConfig", fail_at=self.fail_at)
            if self.checkpoint_interval is None:
                raise ValueError("SimConfig.fail_at needs a fault-tolerant run: set "
                                 "SimConfig.checkpoint_interval")
            if self.max_tuples is None and self.fail_at >= self.duration:
                raise ValueError(f"SimConfig.fail_at ({self.fail_at}) must come before the "
                                 f"end of the input (duration {self.duration})")


# -- files ------------------------------------------------------------------------------------------
def to_dict(cal: Calibration) -> dict:
    return {"format": FORMAT_VERSION, "created": cal.created, "machine": cal.machine,
            "hardware": asdict(cal.hardware), "system": asdict(cal.system),
            "queries": {k: asdict(v) for k, v in cal.queries.items()}}


def from_dict(doc: dict) -> Calibration:
    if doc.get("format") != FORMAT_VERSION:
        raise ValueError(f"calibration format {doc.get('format')!r} is not "
                         f"{FORMAT_VERSION}: calibrate again")
    known = {f.name for f in fields(QueryCosts)}
    return Calibration(Hardware(**doc["hardware"]), SystemCosts(**doc["system"]),
                       {k: QueryCosts(**{f: v for f, v in q.items() if f in known})
                        for k, q in doc["queries"].items()},
                       doc.get("machine", {}), doc.get("created", ""))


def save(cal: Calibration, path: str | Path) -> Path:
    """Write ``cal`` as JSON, atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(to_dict(cal), indent=1, sort_keys=False))
    os.replace(tmp, path)
    return path


def load(path: str | Path) -> Calibration:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no calibration file {path}: run `scabbard sim calibrate` first")
    return from_dict(json.loads(path.read_text()))


def merge(old: Calibration, new: Calibration) -> Calibration:
    """``new`` with the queries of ``old`` it did not measure (machine figures from ``new``)."""
    return replace(new, queries={**old.queries, **new.queries})
