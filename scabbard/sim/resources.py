"""The simulator's shared resources: cores, bounded queues, counting semaphores, the disk.

Written on SimPy's event core, lean on purpose: a request that can be served at once
costs no event (only waiting does), so a task costs a handful of events and a minute
of a 16-core machine simulates in seconds.  Every operation that may wait is a
generator used with ``yield from``.
"""

from __future__ import annotations

import math
from collections import deque

import simpy

from scabbard.sim.config import MB, Hardware


class Queue:
    """A bounded FIFO channel (``capacity`` None: unbounded)."""

    def __init__(self, env: simpy.Environment, capacity: int | None = None):
        self.env, self.capacity = env, capacity
        self.items: deque = deque()
        self.getters: deque[simpy.Event] = deque()
        self.putters: deque[simpy.Event] = deque()

    def put(self, item):
        while self.capacity is not None and len(self.items) >= self.capacity:
            ev = self.env.event()
            self.putters.append(ev)
            yield ev
        if self.getters:
            self.getters.popleft().succeed(item)
        else:
            self.items.append(item)

    def put_nowait(self, item) -> None:
        """:meth:`put` into an unbounded queue: it never waits."""
        if self.capacity is not None:
            raise RuntimeError("put_nowait is for unbounded queues")
        if self.getters:
            self.getters.popleft().succeed(item)
        else:
            self.items.append(item)

    def get(self):
        if self.items:
            item = self.items.popleft()
            if self.putters:
                self.putters.popleft().succeed()
            return item
        ev = self.env.event()
        self.getters.append(ev)
        return (yield ev)


class Semaphore:
    """A counting semaphore: :meth:`acquire` waits, first come first served, while
    ``count`` is 0."""

    def __init__(self, env: simpy.Environment, count: int):
        self.env, self.count = env, count
        self.waiting: deque[simpy.Event] = deque()

    def acquire(self):
        if self.count > 0:
            self.count -= 1
            return
        ev = self.env.event()
        self.waiting.append(ev)
        yield ev

    def release(self) -> None:
        if self.waiting:
            self.waiting.popleft().succeed()  # the unit passes straight to the next waiter
        else:
            self.count += 1


class CPU(Semaphore):
    """``cores`` cores shared by every thread of the engine: non-preemptive, first come
    first served (the OS time-slices; over a task the work done per core is the same)."""

    def __init__(self, env: simpy.Environment, cores: int, speed: float = 1.0):
        super().__init__(env, cores)  # ``count``: the free cores
        self.cores = cores
        self.speed = speed  # measured costs are divided by it (background work is not)
        self.busy: dict[str, float] = {}
        self.foreign = 0  # cores held by other processes' work (``run(..., "background")``)

    @property
    def in_use(self) -> int:
        """Cores the engine's own threads hold."""
        return self.cores - self.count - self.foreign

    def work(self, seconds: float, what: str):
        """Hold a core (already acquired) for ``seconds`` of the calibrated machine's."""
        if seconds > 0:
            if what != "background":
                seconds /= self.speed
            self.busy[what] = self.busy.get(what, 0.0) + seconds
            yield self.env.timeout(seconds)

    def run(self, seconds: float, what: str):
        """Acquire a core, work ``seconds`` on it, release it."""
        if seconds <= 0:
            return
        yield from self.acquire()
        foreign = what == "background"
        self.foreign += foreign
        yield from self.work(seconds, what)
        self.foreign -= foreign
        self.release()


class Signal:
    """A condition processes wait on until someone calls :meth:`notify`."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.waiting: list[simpy.Event] = []

    def wait(self):
        ev = self.env.event()
        self.waiting.append(ev)
        yield ev

    def notify(self) -> None:
        waiting, self.waiting = self.waiting, []
        for ev in waiting:
            ev.succeed()


class Disk:
    """One device: requests are served in order, each occupying it for
    ``max(bytes / bandwidth, ios / IOPS)``; a fixed latency is added to each and overlaps
    with the others, at most ``queue_depth`` requests of a process outstanding (its
    ``slots``: a process that dies takes its own with it) (:class:`Hardware`)."""

    def __init__(self, env: simpy.Environment, hw: Hardware):
        self.env, self.hw = env, hw
        self.write_bps = hw.disk_write_mb_s * MB
        self.fresh_bps = (hw.disk_fresh_write_mb_s or hw.disk_write_mb_s) * MB
        self.read_bps = hw.read_mb_s * MB
        self.latency = hw.disk_latency_ms / 1e3
        self.free_at = 0.0
        self.busy = 0.0
        self.bytes_written = 0
        self.bytes_read = 0
        self.requests = 0
        self.ios = 0

    def occupancy(self, nbytes: float, write: bool = True,
                  fresh: float = 0.0) -> tuple[float, int]:
        """Seconds the device is busy with a request (``fresh`` of its bytes into space
        never written before) and the I/Os it counts for."""
        ios = 1 if self.hw.io_bytes is None else max(1, math.ceil(nbytes / self.hw.io_bytes))
        if write:
            t = (nbytes - fresh) / self.write_bps + fresh / self.fresh_bps
        else:
            t = nbytes / self.read_bps
        if self.hw.disk_iops:
            t = max(t, ios / self.hw.disk_iops)
        return t, ios

    def request(self, nbytes: float, write: bool, slots: Semaphore, fresh: float = 0.0):
        yield from slots.acquire()
        occ, ios = self.occupancy(nbytes, write, fresh)
        now = self.env.now
        start = max(now, self.free_at)
        self.free_at = start + occ
        self.busy += occ
        self.requests += 1
        self.ios += ios
        if write:
            self.bytes_written += nbytes
        else:
            self.bytes_read += nbytes
        yield self.env.timeout(self.free_at + self.latency - now)
        slots.release()
