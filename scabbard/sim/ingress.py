"""Parallel ingress in the model (``SimConfig.ingress_partitions`` = N > 1), as
:mod:`scabbard.engine.ingress` runs it.

* The source's batches are numbered from the life's first offset; batch ``j`` belongs to
  partition ``j mod N``.  Each partition is a thread: it waits until the batch may start
  (within ``lookahead`` batches of the oldest one not staged - not handed out, without
  persistence; with a rate, until it arrived), cuts it on a core (``ingress_ns_tuple``: its share of what the dispatcher did),
  and hands it on - up to ``2 x workers / N`` of its batches in preparation at once.
* A batch in preparation is compressed on the shared pool (when the input is compressed),
  then waits for its **turn** (batch ``j`` after ``j - 1``): the thread holding the turn
  waits for room in the ingress p-stream and appends the p-unit on a core
  (``turn_ns``: serial, one batch at a time), which the BlockManager encodes and writes
  behind as before.  Without persistence the turn only hands the batch on.
* The **dispatcher** takes the batches in order - the stored p-units, with persistence - and
  pays ``dispatch_ns_task`` per task on a core before handing it out.
"""

from __future__ import annotations

import math

from scabbard.sim.resources import Semaphore, Signal


class ParallelIngress:
    """The partitions and the dispatcher's side of one engine life (:class:`_Engine`)."""

    def __init__(self, engine, partitions: int):
        self.e, self.n = engine, partitions
        run, cfg = engine.run, engine.cfg
        self.first = engine.offset  # the life's first source offset
        self.plan: list[tuple[int, int]] = []  # (offset, tuples) of batch j
        self.next_offset = engine.offset
        self.turn = 0  # the next batch to stage
        self.end = math.inf  # the first batch past the stream (duration, max_tuples)
        self.outputs: dict[int, object] = {}  # staged, not yet taken (no persistence)
        self.taken = 0  # batches the dispatcher has taken (or that nothing was staged for)
        self.appended = 0  # p-units appended to the ingress p-stream
        self.lookahead = max(2 * cfg.workers, 2 * partitions)
        self.ahead = max(1, -(-2 * cfg.workers // partitions))
        self.turns: dict = {}  # batch -> the event its preparation waits on for its turn
        self.admit = Signal(engine.env)  # the dispatcher took a batch, or the end moved
        self.staged = Signal(engine.env)  # a batch was staged, or the end moved
        self.room = Signal(engine.env)  # the p-stream's reader took a p-unit
        self.scheme = cfg.compression if cfg.persist else None
        self.run = run

    def batch(self, j: int) -> tuple[int, int] | None:
        """Batch ``j``'s (offset, tuples), or None past the end of the input's tuples."""
        run = self.run
        while len(self.plan) <= j:
            if self.next_offset >= run.input_end:
                return None
            n = run.batch_at(self.next_offset, run.input_end)
            self.plan.append((self.next_offset, n))
            self.next_offset += n
        return self.plan[j]

    def _end_at(self, j: int) -> None:
        if j < self.end:
            self.end = j
            for b in [b for b in self.turns if b >= j]:  # never staged: they end
                self.turns.pop(b).succeed()
        self.admit.notify()
        self.staged.notify()
        if self.scheme is not None:
            self.e.stored.notify()  # the dispatcher may be waiting for a p-unit to come

    def _pass_turn(self) -> None:
        self.turn += 1
        ev = self.turns.pop(self.turn, None)
        if ev is not None:
            ev.succeed()
        if self.scheme is not None:
            self.admit.notify()

    @property
    def floor(self) -> int:
        """The oldest batch not handed out: the turn's, with persistence (an appended p-unit
        belongs to the p-stream, whose room bounds it), else the dispatcher's next."""
        return self.turn if self.scheme is not None else self.taken

    # -- a partition ------------------------------------------------------------------------------
    def partition(self, k: int):
        e, run = self.e, self.run
        mine = Semaphore(e.env, self.ahead)
        j = k
        while True:
            while j >= self.floor + self.lookahead and j < self.end:
                yield from self.admit.wait()
            b = self.batch(j)
            if j >= self.end or b is None or run.input_over(b[0]):
                self._end_at(j)
                return
            offset, n = b
            ready, stamp = run.arrival(offset, n)
            if ready > e.env.now:
                yield e.env.timeout(ready - e.env.now)
            cut, _, _ = e.costs.ingress_s(n, self.n, self.scheme)
            yield from e.cpu.run(cut, "ingress")
            task = e.make_task(offset, n, stamp)
            yield from mine.acquire()
            e.spawn(self.prepare(j, task, mine))
            j += self.n

    def prepare(self, j: int, task, mine: Semaphore):
        """Batch ``j`` in preparation: compressed on the pool, then staged in its turn."""
        e = self.e
        if self.scheme is not None and e.cfg.compression != "none":
            yield from e.comp_q.put(task)
            while not task.compressed:
                yield from e.compressed.wait()
        if self.turn != j and j < self.end:
            ev = self.turns[j] = e.env.event()
            yield ev
        mine.release()
        if j >= self.end:
            return
        if self.scheme is not None:
            nbytes = task.n * e.unit_bytes_tuple
            while not e.has_room(nbytes):
                yield from self.room.wait()
            _, turn, _ = e.costs.ingress_s(task.n, self.n, self.scheme)
            yield from e.cpu.run(turn, "append")
            e.append(task)
            self.appended += 1
        else:
            self.outputs[j] = task
        e.offset = task.end  # where the source continues (checkpoint-only recovery)
        self._pass_turn()
        self.staged.notify()

    # -- the dispatcher ---------------------------------------------------------------------------
    def dispatcher(self):
        """Take the batches in order (the stored p-units) and hand them out."""
        e = self.e
        for k in range(self.n):
            e.spawn(self.partition(k))
        while True:
            if self.scheme is not None:
                if not e.durable:
                    if self.turn >= self.end and self.appended == self.taken:
                        return
                    yield from e.stored.wait()
                    continue
                task = e.durable.pop(0)
                e.took(task)
                self.room.notify()
            else:
                if self.taken not in self.outputs:
                    if self.taken >= self.end:
                        return
                    yield from self.staged.wait()
                    continue
                task = self.outputs.pop(self.taken)
            self.taken += 1
            self.admit.notify()
            _, _, task_s = e.costs.ingress_s(task.n, self.n, self.scheme)
            yield from e.cpu.run(task_s, "dispatch")
            yield from e.dispatch(task)
