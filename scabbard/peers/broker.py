"""A real persistent message broker, standing in for Kafka (paper §6.3, Fig. 1 and Fig. 8).

Kafka itself cannot be installed here (no Maven Central, no archive downloads).  Of the
brokers the Debian packages offer, **RabbitMQ Streams** is the most Kafka-like: an
append-only, segmented log per stream on disk, numeric offsets, retention by size or age,
publisher confirms, and replay from any offset.  NATS JetStream (2.9) acknowledges before it
syncs and has no per-write sync option; Redis Streams keeps the stream in memory (its
``appendfsync always`` log is for recovery only).  RabbitMQ confirms a publish once the
chunk is written to the stream's segment file - in the OS page cache, replicated to nothing
on one node - which is what Kafka's default (``acks=all``, no ``flush.messages``) gives too.
Found here: after a clean stop the streams come back whole; after a ``kill -9`` within the
first minutes of a new node, 3.10.8's stream coordinator did not come back (its Raft
directory lives in DETS tables, saved to disk every 3 minutes), so its streams stayed
unavailable - a broker's crash recovery has its own failure modes.

:class:`RabbitMQ` starts a private broker node: its own data folder, node name, Erlang
cookie, port mapper (epmd) on its own port, every listener on 127.0.0.1, the
``rabbitmq_stream`` plugin.  The port mapper is started by :class:`RabbitMQ` as its own child
(the node is told not to start one): Erlang's own ``epmd -daemon`` leaves the node's process
group, and ``epmd -kill`` is refused while the killed node is still registered, so it could
outlive :meth:`RabbitMQ.stop`.  It is a context manager and also stops at interpreter exit, so
a failed run leaves no broker behind.  ``scripts/setup-peers.sh`` installs the package.

:func:`ingest` is Fig. 1's broker bar: ``producers`` producers, one stream each (Kafka's
partitions), publish the query's tuples as C-layout rows, ``tuples_per_message`` rows per
message (Kafka's record batch; one Python call per tuple would measure the client, not
the broker), with at most ``in_flight`` unconfirmed messages each.  A tuple counts once its
message is confirmed; the latency is publish to confirm.  :func:`read_stream` reads a
stream back from its first offset.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scabbard.engine.metrics import PEER_PERCENTILES, percentiles_ms
from scabbard.errors import Failure
from scabbard.peers.synclog import from_rows, to_rows

SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
USER = PASSWORD = "guest"  # RabbitMQ's default user, refused from anywhere but loopback


class BrokerError(Failure, RuntimeError):
    """The broker is missing, does not start, or refused a publish."""


def installed() -> bool:
    return Path(SERVER).exists() and shutil.which("epmd") is not None


def _run(coro):
    """Run a coroutine to its end - also from a thread whose event loop is already running
    (a Jupyter kernel's): then on a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(1, thread_name_prefix="rstream") as pool:
        return pool.submit(asyncio.run, coro).result()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


class RabbitMQ:
    """A private RabbitMQ node with the stream plugin, on loopback, in ``folder``.

    ``folder`` (default: a temporary folder, removed at stop) holds the node's data, logs
    and configuration; with ``keep=True`` the data survive :meth:`stop`, and a new
    ``RabbitMQ(folder)`` starts on them (the streams and their messages are still there).
    """

    def __init__(self, folder: str | Path | None = None, keep: bool = False,
                 start_timeout: float = 60.0):
        if not installed():
            raise BrokerError("RabbitMQ is not installed: run scripts/setup-peers.sh (it installs "
                              "the Debian package rabbitmq-server with apt-get)")
        self._own = folder is None
        self.folder = Path(folder or tempfile.mkdtemp(prefix="scabbard-rabbitmq-")).resolve()
        self.keep = keep
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen | None = None
        self.epmd: subprocess.Popen | None = None
        self.stream_port = self.amqp_port = self.dist_port = self.epmd_port = 0

    # -- lifecycle ---------------------------------------------------------------------
    def _env(self) -> dict:
        f = self.folder
        env = dict(os.environ)
        env.update({
            "HOME": str(f),  # the Erlang cookie lives here, not in the user's home
            "RABBITMQ_NODENAME": f"scabbard{self.stream_port}@localhost",
            "RABBITMQ_MNESIA_BASE": str(f / "mnesia"),
            "RABBITMQ_LOG_BASE": str(f / "log"),
            "RABBITMQ_CONFIG_FILE": str(f / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(f / "advanced.config"),  # absent: none
            "RABBITMQ_CONF_ENV_FILE": str(f / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(f / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(f / "rabbitmq.pid"),
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS":
                "-kernel inet_dist_use_interface {127,0,0,1} -start_epmd false",
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "ERL_EPMD_PORT": str(self.epmd_port),
        })
        return env

    def start(self) -> RabbitMQ:
        if self.proc is not None:
            return self
        self.folder.mkdir(parents=True, exist_ok=True)
        ports = self.folder / "ports"
        if ports.exists():  # a kept node restarts under the same name and ports
            self.stream_port, self.amqp_port, self.dist_port, self.epmd_port = map(
                int, ports.read_text().split())
        else:
            self.stream_port, self.amqp_port, self.dist_port, self.epmd_port = (
                _free_port() for _ in range(4))
            ports.write_text(f"{self.stream_port} {self.amqp_port} {self.dist_port} "
                             f"{self.epmd_port}\n")
        (self.folder / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.amqp_port}\n"
            f"stream.listeners.tcp.default = 127.0.0.1:{self.stream_port}\n"
            "log.console = false\nlog.file.level = warning\n")
        (self.folder / "enabled_plugins").write_text("[rabbitmq_stream].\n")
        (self.folder / "rabbitmq-env.conf").touch()  # never the machine's /etc/rabbitmq ones
        log = open(self.folder / "server.out", "ab")  # noqa: SIM115 - the broker's lifetime
        try:
            self.epmd = subprocess.Popen(
                ["epmd", "-port", str(self.epmd_port), "-address", "127.0.0.1"],
                env=self._env(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
            deadline = time.monotonic() + self.start_timeout
            while not _listening(self.epmd_port):  # the node registers with it as it boots
                if self.epmd.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise BrokerError(f"RabbitMQ's port mapper (epmd) did not start on port "
                                      f"{self.epmd_port}:\n{self._log_tail()}")
                time.sleep(0.05)
            self.proc = subprocess.Popen([SERVER], env=self._env(), cwd=self.folder, stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        finally:
            log.close()
        atexit.register(self.stop)
        deadline = time.monotonic() + self.start_timeout
        while not (_listening(self.stream_port) and self._answers()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self._log_tail()
                self.stop()
                raise BrokerError(f"RabbitMQ did not start within {self.start_timeout:.0f} s:\n"
                                  f"{tail}")
            time.sleep(0.2)
        return self

    def _answers(self, timeout: float = 3.0) -> bool:
        """Whether the stream listener completes a client handshake (it opens before the node
        has finished booting, and after a crash before its streams are recovered)."""
        from rstream import Producer

        async def handshake() -> None:
            producer = Producer("127.0.0.1", self.stream_port, username=USER, password=PASSWORD)
            try:
                await producer.start()
            finally:
                await producer.close()

        try:
            _run(asyncio.wait_for(handshake(), timeout))
            return True
        except Exception:  # noqa: BLE001 - refused, reset, timed out: not ready yet
            return False

    def _log_tail(self, lines: int = 20) -> str:
        out = self.folder / "server.out"
        return "\n".join(out.read_text(errors="replace").splitlines()[-lines:]) if out.exists() \
            else "(no output)"

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the node (SIGTERM: an orderly shutdown; SIGKILL after ``timeout``), then its
        port mapper; remove the folder unless it is kept."""
        proc, self.proc = self.proc, None
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            # the node's own children (erl_child_setup, inet_gethost) share its group
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        epmd, self.epmd = self.epmd, None
        if epmd is not None:  # ours, not a daemon: killed and reaped, so its port is closed
            epmd.kill()
            epmd.wait()
        atexit.unregister(self.stop)
        if self._own and not self.keep:
            shutil.rmtree(self.folder, ignore_errors=True)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __enter__(self) -> RabbitMQ:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# -- producing and consuming ------------------------------------------------------------
@dataclass(frozen=True)
class BrokerResult:
    query: str
    producers: int
    tuples_per_message: int
    tuples: int  # confirmed
    seconds: float
    row_bytes: int
    latency_ms: dict  # publish -> confirm, per call: p5 p25 p50 p75 p95 p99
    streams: tuple = ()

    @property
    def tuples_per_s(self) -> float:
        return self.tuples / self.seconds

    @property
    def row_mb_s(self) -> float:
        return self.tuples * self.row_bytes / self.seconds / 1e6


@dataclass(frozen=True)
class Publishing:
    """How a producer publishes: ``tuples_per_message`` rows in a message,
    ``messages_per_call`` messages in one publish frame (a call), at most ``in_flight``
    messages sent and not yet confirmed."""

    tuples_per_message: int = 256
    messages_per_call: int = 16
    in_flight: int = 256


async def _produce(broker: RabbitMQ, stream: str, table, lo: int, seconds: float,
                   publishing: Publishing, latencies: list, max_tuples: int | None) -> int:
    """Publish rows from ``lo`` on, wrapping around, until ``seconds`` pass; confirmed tuples.

    Each call sends ``messages_per_call`` messages in one publish frame; a call's latency
    is from the frame's send to the confirm of its last message."""
    from rstream import Producer, RawMessage

    per_message, messages_per_call = publishing.tuples_per_message, publishing.messages_per_call
    in_flight = publishing.in_flight
    row = table.schema.row_bytes
    call_rows = per_message * messages_per_call
    slots = asyncio.Semaphore(max(1, in_flight // messages_per_call))
    calls: dict[int, list] = {}  # call -> [unconfirmed messages, tuples, sent at]
    confirmed = 0
    failed: list[str] = []
    next_id = messages_per_call  # call k holds ids k*messages_per_call + 0, 1, ...

    def on_confirm(status) -> None:
        nonlocal confirmed
        if not status.is_confirmed:
            failed.append(f"publish {status.message_id} refused (code {status.response_code})")
        call = calls.get(status.message_id // messages_per_call)
        if call is None:
            return
        call[0] -= 1
        if call[0] == 0:
            del calls[status.message_id // messages_per_call]
            latencies.append(time.perf_counter() - call[2])
            confirmed += call[1]
            slots.release()

    async with Producer("127.0.0.1", broker.stream_port, username=USER, password=PASSWORD,
                        connection_name=f"scabbard-{stream}") as producer:
        await producer.create_stream(stream, exists_ok=True)
        stop = time.perf_counter() + seconds
        total = 0
        while time.perf_counter() < stop and not failed and (
                max_tuples is None or total < max_tuples):
            hi = min(lo + call_rows, table.rows)
            if max_tuples is not None:
                hi = min(hi, lo + max_tuples - total)
            rows = to_rows(table.batch(lo, hi))  # serialization is on the record's path
            msgs = []
            for a in range(0, hi - lo, per_message):
                m = RawMessage(rows[a * row:(a + per_message) * row].tobytes())
                m.publishing_id = next_id
                next_id += 1
                msgs.append(m)
            next_id += (-next_id) % messages_per_call  # the next call starts on a multiple
            await slots.acquire()
            calls[msgs[0].publishing_id // messages_per_call] = [
                len(msgs), hi - lo, time.perf_counter()]
            await producer.send_batch(stream, msgs, on_publish_confirm=on_confirm)
            total += hi - lo
            lo = 0 if hi >= table.rows else hi
        deadline = time.monotonic() + 60
        while calls and not failed and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
    if failed:
        raise BrokerError(failed[0])
    if calls:
        raise BrokerError(f"{len(calls)} publishes on {stream} were never confirmed")
    return confirmed


def ingest(broker: RabbitMQ, query: str, dataset, seconds: float = 3.0, producers: int = 2,
           publishing: Publishing = Publishing(), max_tuples: int | None = None,
           prefix: str = "scabbard") -> BrokerResult:
    """Publish the dataset's tuples through ``producers`` streams for ``seconds``."""
    table = dataset.stream
    latencies: list[float] = []
    names = [f"{prefix}-{query.lower()}-{i}" for i in range(producers)]

    async def main() -> list[int]:
        return await asyncio.gather(*(
            _produce(broker, name, table, (i * table.rows // producers), seconds, publishing,
                     latencies, None if max_tuples is None else max_tuples // producers)
            for i, name in enumerate(names)))

    t0 = time.perf_counter()
    counts = _run(main())
    secs = time.perf_counter() - t0
    return BrokerResult(query, producers, publishing.tuples_per_message, sum(counts), secs,
                        table.schema.row_bytes, percentiles_ms(latencies, PEER_PERCENTILES), tuple(names))


def delete_streams(broker: RabbitMQ, streams) -> None:
    """Delete ``streams`` and their segment files (a benchmark frees the disk it used)."""
    from rstream import Producer

    async def main() -> None:
        async with Producer("127.0.0.1", broker.stream_port, username=USER,
                            password=PASSWORD) as producer:
            for name in streams:
                await producer.delete_stream(name, missing_ok=True)

    _run(main())


def read_stream(broker: RabbitMQ, stream: str, schema, timeout: float = 30.0):
    """Every row of ``stream`` from its first offset, as a :class:`~scabbard.batch.Batch`
    (messages in offset order; the stream is read until it has been idle for 0.5 s).
    After a restart a stream is unavailable until the node has recovered it: retried."""
    from rstream import AMQPMessage, Consumer, ConsumerOffsetSpecification, OffsetType
    from rstream.exceptions import StreamNotAvailable

    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout

    async def main() -> None:
        async with Consumer("127.0.0.1", broker.stream_port, username=USER,
                            password=PASSWORD) as consumer:
            last = time.monotonic()

            def on_message(msg: AMQPMessage, ctx) -> None:
                nonlocal last
                chunks.append(bytes(msg))
                last = time.monotonic()

            while True:
                try:
                    await consumer.subscribe(stream, on_message, decoder=None,
                                             offset_specification=ConsumerOffsetSpecification(
                                                 OffsetType.FIRST, None))
                    break
                except StreamNotAvailable:
                    if time.monotonic() > deadline:
                        raise BrokerError(f"stream {stream!r} still unavailable after "
                                          f"{timeout:.0f} s") from None
                    await asyncio.sleep(0.2)
            last = time.monotonic()
            runner = asyncio.create_task(consumer.run())
            while time.monotonic() - last < 0.5 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner

    _run(main())
    rows = np.frombuffer(b"".join(chunks), np.uint8)
    return from_rows(schema, rows)
