"""The POG simulator: the engine as a discrete-event model, one event per task (docs/design.md).

What runs, as in :mod:`scabbard.engine.runtime` (paper §2.3, §4.1) and
:mod:`scabbard.ft.recovery` (§3.2):

* the **source** hands out batches of ``batch_rows`` tuples - at the input ``rate``,
  through the **network** link if the hardware has one, as fast as taken otherwise; the
  **dispatcher** thread pays the source's cost per batch on a core;
* with **persisted input** (§3.1) each batch is compressed on a pool of ``workers``
  threads (in order, ``2 x workers`` in flight), appended to the ingress p-stream
  (which holds a bounded number of p-units ahead of its reader), encoded (copy and
  checksum) on the BlockManager's encoder threads, and written by the stream's writer
  in bulk (group commit, up to ``bulk_bytes`` a write) to the **disk**; a task is
  dispatched only once its p-unit is durable;
* ``workers`` worker threads take tasks from a bounded queue and run the fragment
  function on a core; whichever finishes the next task in order assembles it and
  every following finished one (the serial **assembly**), still on its core - or, with
  ``assembly_parts`` P > 1 (``--assembly partitioned:P``), its share of P key partitions
  plus the split and merge there, the other P - 1 partitions at once on other cores; or,
  with ``dataflow_parts`` P (``--assembly dataflow:P``), P partition threads fed by key and a
  merge instead of the workers (:mod:`scabbard.sim.dataflow`);
* every ``checkpoint_interval`` seconds a **checkpoint marker** goes with the next
  dispatched task; when that task is assembled the state is cut (a copy, on the
  assembling core) and written asynchronously as state p-units, then the record is
  committed; input below the older of the two newest checkpoints is released (GC);
* at ``fail_at`` the engine process dies (**fail-stop**: everything not durable is
  lost) and recovers (:meth:`_Run.recover`).

Every thread shares the hardware's cores (:class:`~scabbard.sim.resources.CPU`); every
cost is a measured one (:class:`~scabbard.sim.config.Calibration`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import simpy

from scabbard.engine.metrics import Summary, percentiles_ms
from scabbard.sim.config import MB, Calibration, Hardware, SimConfig
from scabbard.sim.dataflow import DataflowThreads
from scabbard.sim.ingress import ParallelIngress
from scabbard.sim.pstream import END, PStreamThreads, Task
from scabbard.sim.resources import CPU, Disk, Queue, Semaphore, Signal
from scabbard.sim.result import SimResult, steady_rate, timeline


def simulate(calibration: Calibration, config: SimConfig,
             hardware: Hardware | None = None) -> SimResult:
    """Simulate ``config`` on ``hardware`` (default: the calibrated machine) with the
    measured costs of ``calibration``."""
    return _Run(calibration, config, hardware or calibration.hardware).run()


class _Run:
    """One simulated run: the device, the input, what is durable, and the engine's lives."""

    def __init__(self, cal: Calibration, cfg: SimConfig, hw: Hardware):
        self.cal, self.cfg, self.hw = cal, cfg, hw
        self.costs = cal.costs(cfg.query)
        self.sys = cal.system
        if cfg.persist and cfg.compression not in self.costs.persist:
            raise ValueError(f"the calibration of {cfg.query} has no costs for compression "
                             f"{cfg.compression!r}")
        self.env = simpy.Environment()
        self.disk = Disk(self.env, hw)
        self.batch = cfg.batch_rows or self.costs.batch_rows
        self.input_end = cfg.max_tuples if cfg.max_tuples is not None else math.inf
        self.link_free = 0.0
        self.wire_s_tuple = (self.costs.row_bytes / (hw.network_mb_s * MB)
                             if hw.network_mb_s else 0.0)
        # what survives a failure
        self.durable_end = 0  # the ingress p-stream's durable offset
        self.stored_from = 0  # released (GC'd) below
        self.pool_written = 0.0  # bytes of the storage pool ever written (beyond: fresh files)
        self.checkpoints: list[dict] = []
        self.next_checkpoint = 1
        # what the metrics log would show
        self.done_t: list[float] = []
        self.done_n: list[int] = []
        self.done_lat: list[float] = []
        self.recovery: dict = {}
        self.cpus: list[CPU] = []
        self.input_stopped_at: float | None = None
        self.finished = False  # the last life's workers are done
        self.engine: _Engine | None = None

    # -- the input ----------------------------------------------------------------------------
    def arrival(self, offset: int, n: int) -> tuple[float, float | None]:
        """When batch ``offset .. offset + n`` is at the engine, and its ingest stamp (the
        arrival of its middle tuple with a rate; None: when the dispatcher takes it)."""
        rate, lead = self.cfg.rate, self.cfg.source_lead
        ready = (offset + n) / rate - lead if rate else 0.0
        stamp = (offset + n / 2) / rate - lead if rate else None
        if self.wire_s_tuple:
            self.link_free = max(self.link_free, ready) + n * self.wire_s_tuple
            ready = self.link_free
        return ready, stamp

    def batch_at(self, offset: int, end: float) -> int:
        """The source's batch from ``offset``: ``batch`` tuples, never past ``end`` nor across
        the end of a copy of the dataset (as ``ReplaySource`` cuts them)."""
        n = min(self.batch, end - offset)
        rows = self.costs.dataset_rows
        if rows:
            n = min(n, rows - offset % rows)
        return int(n)

    def input_over(self, offset: int) -> bool:
        return offset >= self.input_end or (self.cfg.max_tuples is None
                                            and self.env.now >= self.cfg.duration)

    def record(self, task: Task) -> None:
        now = self.env.now
        self.done_t.append(now)
        self.done_n.append(task.n)
        self.done_lat.append(now - task.ingest)

    # -- the run --------------------------------------------------------------------------------
    def run(self) -> SimResult:
        wall = time.perf_counter()
        self.engine = _Engine(self, offset=0)
        self.engine.start()
        if self.cfg.fail_at is not None:
            self.env.process(self.fail(self.cfg.fail_at))
        load = self.hw.background_cores
        for _ in range(math.ceil(load)):
            self.env.process(self.background(load / math.ceil(load)))
        self.env.run()
        return self.result(time.perf_counter() - wall)

    def background(self, share: float, period: float = 0.01):
        """Another process: ``share`` of a core's work every ``period``, on the cores the
        engine runs on (while it runs)."""
        while not self.finished:
            self.env.process(self.engine.cpu.run(share * period, "background"))
            yield self.env.timeout(period)

    def fail(self, at: float):
        yield self.env.timeout(at)
        if self.input_stopped_at is not None and not self.engine.busy():
            return  # the run was over before the failure
        self.engine.kill()
        self.env.process(self.recover())

    def recover(self):
        """Fail-stop recovery (paper §3.2, :func:`scabbard.ft.recovery.run_fault_tolerant`):

        1. restart: a new process starts, then loads the compiled code on a thread while
        2. progress recovery and data recovery run: the storage is opened, the newest complete
           checkpoint found and its state p-units read back and rebuilt (both must be done);
        3. upstream replay: the input stored after the checkpoint runs again as tasks (read
           back from the disk and decoded), then the source continues after it; without
           persisted input the source itself is asked again from the checkpoint's offset.
        """
        env, cfg, sysc = self.env, self.cfg, self.sys
        rec = self.recovery
        rec["failed_at"] = env.now
        ckpt = self.checkpoints[-1] if self.checkpoints else None
        replay_from = ckpt["input_end"] if ckpt else self.stored_from
        replay_to = self.durable_end if cfg.persist else self.engine.offset
        rec.update(checkpoint=ckpt["id"] if ckpt else None, replay_from=replay_from,
                   replay_to=replay_to, replayed_tuples=max(0, replay_to - replay_from))
        # Step 1: restart
        yield env.timeout(sysc.process_start_s)
        code = env.timeout(self.costs.code_load_s)  # on its own thread, meanwhile
        rec["restart_init_s"] = env.now - rec["failed_at"] + self.costs.code_load_s
        t = env.now
        # Step 2: progress recovery, state load
        yield env.timeout(sysc.storage_open_s)
        state = ckpt["state_bytes"] if ckpt else 0.0
        if state:
            yield from self.disk.request(state, write=False, slots=Semaphore(env, 1))
        yield env.timeout(self.costs.state_load_s if ckpt else 0.0)
        rec["state_load_s"] = env.now - t
        yield code
        rec["state_loaded_at"] = env.now
        # Step 3: upstream replay, then the source
        self.engine = _Engine(self, offset=replay_to if cfg.persist else replay_from,
                              replay=(replay_from, replay_to) if cfg.persist else None,
                              replay_until=replay_to)
        self.engine.start()

    def replayed(self) -> None:
        rec = self.recovery
        rec["replayed_at"] = self.env.now
        rec["replay_s"] = self.env.now - rec["state_loaded_at"]
        rec["recovery_s"] = self.env.now - rec["failed_at"]

    # -- the outcome ---------------------------------------------------------------------------
    def result(self, wall: float) -> SimResult:
        cfg, costs = self.cfg, self.costs
        t = np.asarray(self.done_t)
        n = np.asarray(self.done_n, dtype=np.int64)
        lat = np.asarray(self.done_lat)
        end = float(t[-1]) if len(t) else 0.0
        summary = Summary(int(n.sum()), end, 0, len(n), costs.row_bytes, percentiles_ms(lat))
        horizon = cfg.fail_at or self.input_stopped_at or end
        steady = steady_rate(t, n, 0.2 * horizon, 0.8 * horizon)
        cpu_busy: dict[str, float] = {}
        for c in self.cpus:
            for k, v in c.busy.items():
                cpu_busy[k] = cpu_busy.get(k, 0.0) + v
        span = max(end, 1e-12) * self.hw.cores
        util = {f"cores_{k}": round(v / span, 4) for k, v in cpu_busy.items()}
        util["cores"] = round(sum(v for k, v in cpu_busy.items() if k != "background") / span, 4)
        util["disk"] = round(self.disk.busy / max(end, 1e-12), 4)
        return SimResult(cfg, self.hw, summary, steady, timeline(t, n, lat, cfg, costs.row_bytes),
                         int(self.disk.bytes_written), pd.DataFrame(
                             self.checkpoints, columns=["id", "started", "completed",
                                                        "duration_ms", "state_bytes",
                                                        "input_end"]),
                         dict(self.recovery), util, wall)


@dataclass
class _Checkpointing:
    interval: float
    requested: bool = False
    inflight: int | None = None
    recent: list = field(default_factory=list)  # the two newest complete checkpoints


class _Engine(PStreamThreads):
    """One life of the engine process: its threads, queues and in-memory state."""

    def __init__(self, run: _Run, offset: int, replay: tuple[int, int] | None = None,
                 replay_until: int | None = None):
        self.run, self.env = run, run.env
        cfg, hw, sysc = run.cfg, run.hw, run.sys
        self.cfg, self.costs, self.sys = cfg, run.costs, sysc
        self.cpu = CPU(self.env, hw.cores, hw.core_speed)
        run.cpus.append(self.cpu)
        self.slots = Semaphore(self.env, hw.queue_depth)  # this process's outstanding I/Os
        w = cfg.workers
        self.tasks = Queue(self.env, 2 * w)  # EngineConfig.queue_depth default
        self.window = Semaphore(self.env, 4 * w)  # dispatched, not yet assembled
        self.offset = offset  # the source's next offset
        self.replay, self.replay_until = replay, replay_until
        self.replay_done = replay_until is None
        # a recovered process: its first task pays what the warm-up did not load
        self.warmup = self.costs.restart_warmup_s if replay_until is not None else 0.0
        self.seq = 0
        self.next = 0
        self.done: dict[int, Task] = {}
        self.assembling = False
        self.outstanding = 0
        self.workers_left = cfg.workers
        self.flow = DataflowThreads(self, cfg.dataflow_parts) if cfg.dataflow_parts else None
        self.procs: list[simpy.Process] = []
        self.ft = _Checkpointing(cfg.checkpoint_interval) if cfg.checkpoint_interval else None
        if self.ft is not None:
            self.ft.recent = list(run.checkpoints[-1:])
        self.input_done = False
        # per task costs, seconds
        # persisted input: the replay's timestamps shifted where the batch is persisted
        self.src_s = (self.costs.source_ns_tuple
                      + (self.costs.shift_ns_tuple if cfg.persist else 0.0)) * 1e-9
        if cfg.persist:
            p = self.costs.persist[cfg.compression]
            self.stored_tuple = p.stored_bytes_per_tuple
            self.compress_s, self.encode_s = p.compress_ns * 1e-9, p.encode_ns * 1e-9
            self.append_s = p.append_ns * 1e-9
            # read back in recovery: into fresh buffers (page faults), verified, decoded
            self.decode_s = (p.decode_ns + p.stored_bytes_per_tuple * sysc.read_cpu_ns_byte) * 1e-9
            # the p-stream holds its p-units' raw columns in memory until its reader takes
            # them (after push-up: the kept tuples and attributes)
            raw = self.costs.persist["push-up" if cfg.compression.startswith("push-up")
                                     else "none"].stored_bytes_per_tuple
            self.unit_bytes_tuple = raw
            self.held_units, self.held_bytes = 0, 0.0
            self.waiting = 0  # appended, not yet taken by the reader
            self.bulk = sysc.bulk_bytes if cfg.bulk_bytes is None else cfg.bulk_bytes
            self.comp_q = Queue(self.env)
            self.comp_order: list[Task] = []
            self.compressed = Signal(self.env)
            self.enc_q = Queue(self.env)
            self.pending: list[Task | None] = []
            self.writer_wake = Signal(self.env)
            self.durable: list[Task] = []
            self.stored = Signal(self.env)
        # persistence push-up: the tasks hold only what the pushed-up operators kept
        self.work = self.costs.persist[cfg.compression].work if cfg.persist else 1.0
        none = self.costs.persist["none"]
        self.state_encode_s_byte = none.encode_ns / none.stored_bytes_per_tuple * 1e-9
        # the CPU of no timed part (the workers' and pools' own bookkeeping): on the workers
        self.other_s = (self.costs.other_ns_tuple + (self.costs.persist[cfg.compression].other_ns
                                                     if cfg.persist else 0.0)) * 1e-9

    # -- life and death ---------------------------------------------------------------------------
    def spawn(self, gen) -> None:
        self.procs.append(self.env.process(self._guard(gen)))

    @staticmethod
    def _guard(gen):
        try:
            yield from gen
        except simpy.Interrupt:
            return

    def start(self) -> None:
        cfg = self.cfg
        if self.flow is not None:  # the partitioned dataflow's threads (sim/dataflow.py)
            self.flow.start()
        for _ in range(cfg.workers if self.flow is None else 0):
            self.spawn(self.worker())
        self.spawn(self.dispatcher())
        if cfg.persist:
            for _ in range(self.sys.encode_threads):
                self.spawn(self.encoder())
            self.spawn(self.writer())
            if cfg.compression != "none":
                for _ in range(cfg.workers):
                    self.spawn(self.compressor())
        if self.ft is not None:
            self.spawn(self.timer())
        if not self.replay_done and self.offset >= self.replay_until and (
                self.replay is None or self.replay[0] >= self.replay[1]):
            self.replay_done = True  # nothing to replay
            self.run.replayed()

    def kill(self) -> None:
        for p in self.procs:
            if p.is_alive:
                p.interrupt("fail-stop")

    def busy(self) -> bool:
        return any(p.is_alive for p in self.procs)

    # -- the dispatcher -------------------------------------------------------------------------
    def dispatcher(self):
        env, run = self.env, self.run
        if self.replay is not None:
            yield from self.replay_stored()
        if self.cfg.ingress_partitions > 1:  # the source read by partitions (sim/ingress.py)
            yield from ParallelIngress(self, self.cfg.ingress_partitions).dispatcher()
        while self.cfg.ingress_partitions == 1 and not run.input_over(self.offset):
            n = run.batch_at(self.offset, run.input_end)
            ready, stamp = run.arrival(self.offset, n)
            if ready > env.now:
                yield env.timeout(ready - env.now)
            yield from self.cpu.run(n * self.src_s, "source")
            task = self.make_task(self.offset, n, stamp)
            self.offset += n
            if not self.cfg.persist:
                yield from self.dispatch(task)
            elif self.cfg.compression == "none":
                yield from self.persist(task)
            else:  # prepared(): a pool reduces/compresses, taken in order, 2 x workers ahead
                self.comp_order.append(task)
                yield from self.comp_q.put(task)
                while self.comp_order and (len(self.comp_order) > 2 * self.cfg.workers
                                           or self.comp_order[0].compressed):
                    yield from self.persist_head()
        if run.input_stopped_at is None:
            run.input_stopped_at = env.now
        self.input_done = True
        if self.cfg.persist:
            while self.comp_order:
                yield from self.persist_head()
            while self.waiting:
                yield from self.take()
            self.pending.append(END)  # the writer stops
            self.writer_wake.notify()
        yield from self.finish_dispatch()

    def make_task(self, offset: int, n: int, stamp: float | None) -> Task:
        """The source's batch at ``offset`` (ingest stamp: its arrival with a rate, else
        now); numbered when dispatched."""
        return Task(-1, offset, n, stamp if stamp is not None else self.env.now)

    def dispatch(self, task: Task):
        """A task for the workers (its p-unit durable, if persisted); a checkpoint marker
        goes with it if one is due."""
        task.seq = self.seq
        self.seq += 1
        ft = self.ft
        if ft is not None and ft.requested and ft.inflight is None:
            ft.requested = False
            ft.inflight = task.marker = self.run.next_checkpoint
            self.run.next_checkpoint += 1
        yield from self.window.acquire()
        self.outstanding += 1
        if self.flow is not None:
            yield from self.flow.hand_out(task)
        else:
            yield from self.tasks.put(task)

    def finish_dispatch(self):
        if self.flow is not None:
            yield from self.flow.finish()
        for _ in range(self.cfg.workers if self.flow is None else 0):
            yield from self.tasks.put(END)

    def replay_stored(self):
        """Recovery: the stored input after the checkpoint, read back (``io_threads``
        reads ahead, as ``BlockManager.load``) and dispatched in order."""
        env, run = self.env, self.run
        lo, hi = self.replay
        units = []
        off = lo
        while off < hi:  # p-units as they were written: one per batch
            n = run.batch_at(off, hi)
            units.append(Task(len(units), off, n, None))
            off += n
        if not units:
            return
        ready: dict[int, Task] = {}
        arrived = Signal(env)
        ahead = Semaphore(env, 2 * self.sys.io_threads)
        todo = list(reversed(units))

        def reader():
            while todo:
                t = todo.pop()
                yield from ahead.acquire()
                yield from run.disk.request(t.n * self.stored_tuple, write=False,
                                            slots=self.slots)
                yield from self.cpu.run(t.n * self.decode_s, "replay read")
                ready[t.seq] = t
                arrived.notify()

        for _ in range(self.sys.io_threads):
            self.spawn(reader())
        for i, t in enumerate(units):
            while i not in ready:
                yield from arrived.wait()
            del ready[i]
            ahead.release()
            _, stamp = run.arrival(t.offset, t.n)
            t.ingest = stamp if stamp is not None else env.now
            t.replay = True
            yield from self.dispatch(t)

    # -- workers and assembly -----------------------------------------------------------------------
    def worker(self):
        cpu, costs = self.cpu, self.costs
        while True:
            task = yield from self.tasks.get()
            if task is END:
                self.workers_left -= 1
                if not self.workers_left and self.input_done:
                    self.run.finished = True
                return
            yield from cpu.acquire()
            # the engine's other threads busy meanwhile (same process: allocator, memory)
            shared = costs.fragment_shared if cpu.in_use > 1 else 1.0
            warmup, self.warmup = self.warmup, 0.0
            split = costs.split_s(task.n, self.cfg.assembly_parts)
            fragment = costs.fragment_s(task.n, self.cfg.adaptive_kernels)
            yield from cpu.work((fragment * shared + split) * self.work + warmup,
                                "fragment")
            yield from cpu.work(task.n * self.other_s, "other")
            self.done[task.seq] = task
            if not self.assembling:  # drain(): assemble every finished task in order
                self.assembling = True
                while self.next in self.done:
                    t = self.done.pop(self.next)
                    yield from self.assemble(t)
                    if t.marker is not None:
                        yield from self.on_marker(t)
                    self.assembled(t)
                    self.next += 1
                self.assembling = False
            cpu.release()

    def assemble(self, t: Task):
        """A task's assembly on the assembling core; partitioned (``assembly_parts``), the
        other partitions at once on other cores, waited for."""
        mine, each = self.costs.assembly_parts_s(t.n, self.cfg.assembly_parts)
        others = []
        if each > 0:
            for _ in range(self.cfg.assembly_parts - 1):
                others.append(self.env.process(self._guard(
                    self.cpu.run(each * self.work, "partition"))))
                self.procs.append(others[-1])
        yield from self.cpu.work(mine * self.work, "assembly")
        if others:  # a thread waiting for its partitions holds no core
            self.cpu.release()
            yield self.env.all_of(others)
            yield from self.cpu.acquire()

    def assembled(self, t: Task) -> None:
        run = self.run
        run.record(t)
        self.window.release()
        self.outstanding -= 1
        if self.cfg.persist and self.ft is None:  # released once no open window needs it
            run.stored_from = max(run.stored_from, t.end - self.costs.horizon_tuples)
        if not self.replay_done and t.end >= self.replay_until:
            self.replay_done = True
            run.replayed()

    # -- checkpoints (Alg. 1, §3.2) -----------------------------------------------------------------
    def timer(self):
        while not self.input_done:
            yield self.env.timeout(self.ft.interval)
            self.ft.requested = True

    def on_marker(self, t: Task):
        """The marker's task is assembled: the state is cut here (on the assembling core),
        then written asynchronously."""
        started = self.env.now
        state = self.costs.state_bytes
        yield from self.cpu.work(state * self.sys.copy_ns_byte * 1e-9, "checkpoint")
        self.spawn(self.checkpoint(t.marker, t.end, started, state))

    def checkpoint(self, cid: int, input_end: int, started: float, state: float):
        """1. encode the state p-units; 2. write them; 3. commit the record; 4. release
        the input below the older of the two newest checkpoints (GC)."""
        env, run = self.env, self.run
        # Step 1
        yield from self.cpu.run(state * self.state_encode_s_byte, "checkpoint")
        # Step 2
        if state:
            yield from run.disk.request(state, write=True, slots=self.slots)
        # Step 3
        yield env.timeout(self.sys.record_s)
        rec = {"id": cid, "started": started, "completed": env.now,
               "duration_ms": (env.now - started) * 1e3, "state_bytes": state,
               "input_end": input_end}
        run.checkpoints.append(rec)
        # Step 4
        self.ft.recent = (self.ft.recent + [rec])[-2:]
        run.stored_from = max(run.stored_from, self.ft.recent[0]["input_end"])
        self.ft.inflight = None
