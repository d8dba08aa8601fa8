"""The simulated engine's tasks and its persisted input's threads (§3.1, §4.2): the
compressors, the dispatcher's appends to the ingress p-stream, the encoders and the
group-committing writer.  :class:`PStreamThreads` is a part of the model's engine
(:class:`scabbard.sim.model._Engine` derives from it; its state is the engine's)."""

from __future__ import annotations

END = None  # the end-of-input sentinel that flows through the pipeline


class Task:
    __slots__ = ("seq", "offset", "n", "ingest", "marker", "encoded", "compressed", "replay")

    def __init__(self, seq: int, offset: int, n: int, ingest: float | None):
        self.seq, self.offset, self.n, self.ingest = seq, offset, n, ingest
        self.marker: int | None = None
        self.encoded = self.compressed = self.replay = False

    @property
    def end(self) -> int:
        return self.offset + self.n


class PStreamThreads:
    """The ingress p-stream's threads of one engine life (their state: the engine's)."""

    # -- persistence (§3.1, §4.2) -----------------------------------------------------------------
    def compressor(self):
        while True:
            task = yield from self.comp_q.get()
            yield from self.cpu.run(task.n * self.compress_s, "compression")
            task.compressed = True
            self.compressed.notify()

    def persist_head(self):
        head = self.comp_order[0]
        while not head.compressed:
            yield from self.compressed.wait()
        self.comp_order.pop(0)
        yield from self.persist(head)

    def persist(self, task: Task):
        """``POG.persist_ingress`` on the dispatcher's thread: wait (taking p-units) while the
        p-stream has no room; append the p-unit (retain marker; encoded and written
        behind); then hand every p-unit already stored to the workers."""
        while not self.has_room(task.n * self.unit_bytes_tuple):
            yield from self.take()
        yield from self.cpu.run(task.n * self.append_s, "append")
        self.append(task)
        while self.durable:
            yield from self.take()

    def has_room(self, nbytes: float) -> bool:
        """The ingress p-stream holds a p-unit of ``nbytes`` more without waiting."""
        return not self.waiting or (self.held_units < self.sys.pstream_units
                                    and self.held_bytes + nbytes <= self.sys.pstream_bytes)

    def append(self, task: Task) -> None:
        """The p-unit is in the p-stream, behind its retain marker: encoded and written."""
        self.held_units += 1
        self.held_bytes += task.n * self.unit_bytes_tuple
        self.waiting += 1
        self.enc_q.put_nowait(task)
        self.pending.append(task)
        self.writer_wake.notify()

    def took(self, task: Task) -> None:
        """The p-stream's reader took a stored p-unit."""
        self.waiting -= 1
        self.held_units -= 1
        self.held_bytes -= task.n * self.unit_bytes_tuple

    def take(self):
        """The p-stream's reader: the next stored p-unit (waiting for it) becomes a task."""
        while not self.durable:
            yield from self.stored.wait()
        task = self.durable.pop(0)
        self.took(task)
        yield from self.dispatch(task)

    def encoder(self):
        while True:
            task = yield from self.enc_q.get()
            yield from self.cpu.run(task.n * self.encode_s, "encode")
            task.encoded = True
            self.writer_wake.notify()

    def writer(self):
        """Group commit: the pending segments, up to ``bulk`` bytes, in one write."""
        run = self.run
        while True:
            while not self.pending:
                yield from self.writer_wake.wait()
            if self.pending[0] is END:
                return
            chunk = [self.pending.pop(0)]
            size = chunk[0].n * self.stored_tuple
            while (self.pending and self.pending[0] is not END
                   and size + self.pending[0].n * self.stored_tuple <= self.bulk):
                chunk.append(self.pending.pop(0))
                size += chunk[-1].n * self.stored_tuple
            while not all(t.encoded for t in chunk):
                yield from self.writer_wake.wait()
            yield from self.cpu.run(size * self.sys.io_cpu_ns_byte * 1e-9, "io")
            # the input kept (not yet released) beyond what the pool ever held: fresh files
            kept = (chunk[-1].end - run.stored_from) * self.stored_tuple
            fresh = min(size, max(0.0, kept - run.pool_written))
            run.pool_written = max(run.pool_written, kept)
            yield from run.disk.request(size, write=True, slots=self.slots, fresh=fresh)
            run.durable_end = chunk[-1].end
            self.durable.extend(chunk)
            self.stored.notify()
