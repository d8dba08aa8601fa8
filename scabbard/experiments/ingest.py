"""``scabbard ingest`` / ``scabbard bench ingest`` / notebook 02: persisted ingest vs the disk.

The first half of the paper's Fig. 1 / Fig. 8.  On this machine, in one run:

1. the device's sequential ``O_DIRECT`` write bandwidth (:func:`disk_bandwidth`);
2. per query, **pure ingest with persistence**: the query's dataset replayed
   into its ingress p-stream in the query's batch size, each p-unit behind a
   retain marker (so stored before it is readable), read by one reader that
   releases what it read (so the file pool is reused) - tuples/s and MB/s;
   twice: **raw** (every column as it is) and **reduced**, as the paper's
   Scabbard persists - persistence push-up (the query's σ and π before the
   p-stream, §3.4) and adaptive compression (§5) on the workers' threads;
3. per query, the **query with persisted ingress** (``scabbard run
   --persist-input``): what persistence leaves of the engine's throughput.

Tuples/s counts source tuples (the reduced ingest stores fewer, narrower ones).  MB/s
counts the bytes written to disk (segment headers and alignment included) and,
separately, the paper's row bytes of the source tuples.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from scabbard import queries, workloads
from scabbard.compression.policy import Compression
from scabbard.data import Dataset
from scabbard.engine import Engine, EngineConfig, NullSink, Replay, ReplaySource
from scabbard.engine.metrics import percentiles_ms
from scabbard.experiments import Common, finish
from scabbard.experiments import scratch as scratch_dir
from scabbard.experiments.progress import Progress, Step
from scabbard.ft.config import PersistConfig
from scabbard.ft.ingress import persisted_in_order, run_persisted
from scabbard.peers import broker, synclog
from scabbard.pog import POG, PUnit
from scabbard.storage import BlockManager
from scabbard.storage.diskbench import disk_bandwidth


@dataclass(frozen=True)
class IngestResult:
    query: str
    tuples: int
    seconds: float
    row_bytes: int
    disk_bytes: int
    pool_bytes: int
    io_mode: str
    latency_ms: dict = field(default_factory=dict)  # batch produced -> stored, per p-unit
    stored_tuples: int | None = None  # after push-up: the tuples that survived it

    @property
    def tuples_per_s(self) -> float:
        return self.tuples / self.seconds

    @property
    def disk_mb_s(self) -> float:
        return self.disk_bytes / self.seconds / 1e6

    @property
    def row_mb_s(self) -> float:
        return self.tuples * self.row_bytes / self.seconds / 1e6

    def __str__(self) -> str:
        return (f"{self.query} ingest: {self.tuples:,} tuples in {self.seconds:.2f} s = "
                f"{self.tuples_per_s / 1e6:.2f} M tuples/s, {self.disk_mb_s:,.0f} MB/s to disk "
                f"({self.row_mb_s:,.0f} MB/s of {self.row_bytes}-byte rows), {self.io_mode}; "
                f"pool {self.pool_bytes / 1e6:.0f} MB")


def batch_rows_for(query: str, ds: Dataset) -> int:
    """The batch (p-unit) size the engine would use for ``query`` on ``ds``."""
    engine = Engine(queries.get(query), ds.tables)
    return engine.batch_rows_for(ReplaySource(ds, 1).tuples_per_ms())


INGEST = EngineConfig(workers=2, ingress_partitions=1)  # ingest's threads by default
FIVE_SECONDS = Replay(duration=5.0)


def ingest_for(query: str, ds: Dataset, store: Path, seconds: float, ingress_partitions: int,
               batch_rows: int | None = None, log=print) -> str:
    """``scabbard ingest``: :func:`ingest` of ``ds`` replayed for ``seconds`` into ``store``
    with ``ingress_partitions`` reading the source; ``log`` is given the line it starts with
    and one with the rate so far every second; the result's line, naming ``store``."""
    import dataclasses

    log(f"ingest of {ds.path} for {query} into {store} for {seconds:g} s")
    r = ingest(query, ds, PersistConfig(store), Replay(duration=seconds),
               dataclasses.replace(INGEST, ingress_partitions=ingress_partitions),
               batch_rows=batch_rows,
               progress=lambda n, t: log(f"  {t:6.1f} s  {n / t / 1e6:8.2f} M tuples/s"))
    return f"\n{r} in {store}"


def synclog_bench(names: Sequence[str], scale: str, root: Path, seconds: float,
                  batch_kib: int, producers: int, sweep_query: str, log=print) -> None:
    """``scabbard bench synclog``: the synchronous log's ingest
    (:func:`scabbard.peers.synclog.ingest`) of each query's dataset at ``scale`` under
    ``root`` for ``seconds``, ``batch_kib`` KiB a batch, ``producers`` threads; then for
    ``sweep_query`` (``NONE``: none) batches of 64 KiB to 16 MiB; a line each to ``log``
    (:meth:`~scabbard.peers.synclog.SyncLogResult.line`).  Partitions in a scratch folder
    under ``root``, removed after."""
    import tempfile

    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="scabbard-synclog-", dir=root) as folder:
        for q in names:
            ds = workloads.dataset(queries.workload_of(q), scale, root=str(root))
            log(synclog.ingest(q, ds, folder, seconds, batch_kib << 10, producers).line())
        if sweep_query != "NONE":
            ds = workloads.dataset(queries.workload_of(sweep_query), scale, root=str(root))
            log(f"\nbatch size sweep, {sweep_query}:")
            for kb in (64, 256, 1024, 4096, 16384):
                log(synclog.ingest(sweep_query, ds, folder, seconds, kb << 10, producers).line())


def ingest(query: str, ds: Dataset, persist: PersistConfig, replay: Replay = FIVE_SECONDS,
           engine: EngineConfig = INGEST, *, batch_rows: int | None = None,
           progress=None) -> IngestResult:
    """Persist ``ds`` replayed as ``replay`` says (endlessly for 5 s by default) into an
    ingress p-stream as ``persist`` says; no query runs.

    ``persist.push_up``: the query's operators that persistence push-up moves before the
    p-stream (§3.4) reduce each batch first; ``persist.compression``: a scheme of
    :data:`scabbard.compression.policy.SCHEMES` encodes it (``adaptive``: the paper's,
    deciding every ``compression_interval`` seconds); both on the ``engine``'s workers, as in
    its persisted feed.  ``engine.ingress_partitions``: ingress partitions reading the
    source, each appending its own batches in turn
    (:func:`scabbard.ft.ingress.persisted_in_order`).  The tuples counted are the source's,
    the disk bytes those the storage wrote."""
    compression = persist.compression or "none"
    engine = Engine(queries.get(query), ds.tables, engine, push_up=persist.push_up)
    rows = batch_rows or engine.batch_rows_for(ReplaySource(ds, 1).tuples_per_ms())
    source = ReplaySource(ds, rows, replay)
    with BlockManager(persist.storage, persist.layout) as bm:
        pog = POG(bm)
        # a few p-units in flight: enough to overlap writes, few enough that the latency is the
        # write path's, not a queue's (64 in flight: the same throughput, 2-10x the latency)
        stream = pog.pstream("input", engine.input_schema, max_units=8,
                             max_bytes=8 * bm.config.bulk_bytes,
                             compress=Compression.scheme(
                                 engine.input_schema, compression,
                                 ordered_time=source.ordered,
                                 **({"interval": persist.compression_interval}
                                    if compression == "adaptive" else {})))
        feed = engine.feed(source, stream.compress)
        start_bytes, tuples, stored = bm.bytes_written, 0, 0
        t0 = last = time.perf_counter()
        produced: dict[int, float] = {}
        waits: list[float] = []

        def batches():
            nonlocal tuples
            for t in feed.tasks():
                tuples += len(t.batch) if t.source_tuples is None else t.source_tuples
                produced[t.seq] = time.perf_counter()
                yield t.seq, t.batch, t.source_end, t.stored

        def deliver(u: PUnit) -> bool:
            nonlocal last, stored
            pog.send_release("input", "ingest", u.end)
            stored += len(u)
            now = time.perf_counter()
            waits.append(now - produced.pop(u.batch_id, now))
            if progress and now - last >= 1.0:
                last = now
                progress(tuples, now - t0)
            return True

        if feed.partitions == 1:
            pog.persist_ingress("input", "ingest", batches(), deliver)
        else:
            def staged(p) -> None:  # in the partition's turn, right before its append
                nonlocal tuples
                tuples += len(p.batch) if p.source_tuples is None else p.source_tuples
                produced[p.seq] = time.perf_counter()

            for _, u in persisted_in_order(pog, "input", "ingest", feed, staged):
                deliver(u)
        secs = time.perf_counter() - t0
        return IngestResult(query, tuples, secs, ds.schema.payload_bytes,
                            bm.bytes_written - start_bytes, bm.pool_bytes, bm.io_mode,
                            percentiles_ms(waits), stored)


@dataclass(frozen=True)
class Settings(Common):
    queries: Sequence[str] = field(default=queries.NAMES)
    seconds: float = 5.0
    storage_dir: str | None = None  # default: a scratch folder next to the data
    disk_bytes: int = 1 << 30
    with_query: bool = True
    workers: int = 2
    peers: bool = True  # also the broker (RabbitMQ Streams) and the synchronous log (Kafka++)
    producers: int = 2  # the peers' producers (partitions / streams)
    synclog_batch_kib: int = 1024
    reduced: bool = True  # also the paper's Scabbard: push-up + adaptive compression
    # the adaptive compression's decision interval: well within a run, so that its picks are
    # what a run of a few seconds measures (at the engine's 4 s, 4 of a 5 s run's seconds
    # were the first codecs')
    compression_interval: float = 0.5
    # ingress partitions (the source read by N threads): the first gives the table's figures,
    # each other one is measured beside it (columns ``..._p<N>``)
    ingress: Sequence[int] = (1,)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ingress", tuple(self.ingress))
        if not self.ingress or any(not isinstance(n, int) or n < 1 for n in self.ingress):
            raise ValueError(f"ingress partitions must be whole numbers >= 1, got "
                             f"{self.ingress!r}")


def steps(settings: Settings) -> list[Step]:
    """The runs per query, for :class:`~scabbard.experiments.progress.Progress`."""
    runs = ((1 + settings.reduced + 2 * settings.with_query) * len(settings.ingress)
            + 2 * settings.peers)
    return [Step(f"{q} ingest", "ingest", runs * settings.seconds + 2) for q in settings.queries]


def run(settings: Settings, log=print, progress: Progress | None = None
        ) -> tuple[dict, pd.DataFrame]:
    """Disk bandwidth, then per query pure ingest and the query with persisted ingress.
    ``progress``: a :class:`Progress` over (at least) :func:`steps` (by default its own)."""
    progress = progress or Progress(steps(settings), log)
    with scratch_dir(settings.storage_dir, settings.data_dir, "scabbard-ingest-") as scratch:
        bw = disk_bandwidth(scratch, settings.disk_bytes)
        disk = {"write_mb_s": bw.write_mb_s, "first_write_mb_s": bw.first_write_mb_s,
                "read_mb_s": bw.read_mb_s, "o_direct": bw.direct}
        log(f"disk: O_DIRECT sequential write {bw.write_mb_s:,.0f} MB/s (first write into new "
            f"space {bw.first_write_mb_s:,.0f} MB/s), read "
            f"{bw.read_mb_s:,.0f} MB/s ({bw.bytes >> 20} MiB in {bw.block >> 20} MiB blocks)")
        rows = []
        with contextlib.ExitStack() as stack:
            node = _broker(stack, scratch, log) if settings.peers else None
            for q in settings.queries:
                progress.start(f"{q} ingest")
                row, line = _measure(q, settings, scratch, bw, node)
                log(line)
                rows.append(row)
            progress.finish()
        return disk, pd.DataFrame(rows)


def _broker(stack: contextlib.ExitStack, scratch: Path, log):
    """A private RabbitMQ node for the run, or None - with a note - where it is not
    installed or does not start (the rest of the figure runs without it)."""
    if not broker.installed():
        log("note: the broker (RabbitMQ Streams) is skipped: not installed here (`make peers` "
            "installs the Debian package rabbitmq-server; needs root)")
        return None
    try:
        return stack.enter_context(broker.RabbitMQ(scratch / "rabbitmq"))
    except broker.BrokerError as e:
        log(f"note: the broker (RabbitMQ Streams) is skipped: it did not start ({e})")
        return None


def _measure(q: str, settings: Settings, scratch: Path, bw, node) -> tuple[dict, str]:
    """One query: our persisted ingest, the peers' ingest, the query without/with persistence."""
    ds = workloads.dataset(queries.workload_of(q), settings.scale, root=settings.data_dir)
    first = settings.ingress[0]
    r, d = _ours(q, ds, settings, scratch, first)
    row = {"query": q, "ingest_tuples_per_s": r.tuples_per_s,
           "ingest_disk_mb_s": r.disk_mb_s, "ingest_row_mb_s": r.row_mb_s,
           "ingest_p50_ms": r.latency_ms["p50"], "ingest_p95_ms": r.latency_ms["p95"],
           "of_disk": r.disk_mb_s / bw.write_mb_s, "pool_mb": r.pool_bytes / 1e6,
           "io_mode": r.io_mode}
    line = (f"{q:5} ingest {r.tuples_per_s / 1e6:7.2f} M tuples/s  {r.disk_mb_s:7,.0f} MB/s "
            f"to disk ({row['of_disk']:.0%} of the disk)")
    if d is not None:
        row.update({"reduced_tuples_per_s": d.tuples_per_s, "reduced_disk_mb_s": d.disk_mb_s,
                    "reduced_row_mb_s": d.row_mb_s, "reduced_p50_ms": d.latency_ms["p50"],
                    "reduced_p95_ms": d.latency_ms["p95"],
                    "reduced_kept": d.stored_tuples / max(1, d.tuples),
                    "reduced_bytes_per_tuple": d.disk_bytes / max(1, d.tuples)})
        line += _reduced_line(d)
    if settings.peers:
        folder = scratch / f"{q}-synclog"
        folder.mkdir(parents=True, exist_ok=True)
        k = synclog.ingest(q, ds, folder, settings.seconds, settings.synclog_batch_kib << 10,
                           settings.producers)
        shutil.rmtree(folder, ignore_errors=True)
        row.update({"synclog_tuples_per_s": k.tuples_per_s, "synclog_disk_mb_s": k.disk_mb_s,
                    "synclog_p50_ms": k.latency_ms["p50"], "synclog_p95_ms": k.latency_ms["p95"],
                    "synclog_row_mb_s": k.tuples_per_s * ds.schema.row_bytes / 1e6})
        line += f"  | Kafka++ {k.tuples_per_s / 1e6:6.2f}"
    if node is not None:
        b = broker.ingest(node, q, ds, settings.seconds, settings.producers)
        broker.delete_streams(node, b.streams)
        row.update({"broker_tuples_per_s": b.tuples_per_s, "broker_row_mb_s": b.row_mb_s,
                    "broker_p50_ms": b.latency_ms["p50"],
                    "broker_p95_ms": b.latency_ms["p95"]})
        best = max(r.tuples_per_s, row.get("reduced_tuples_per_s", 0.0))
        line += (f", broker {b.tuples_per_s / 1e6:6.2f} M tuples/s (ours "
                 f"{best / b.tuples_per_s:5.1f}x the broker)")
    if settings.with_query:
        row.update(_query(q, ds, settings, scratch, first))
        line += (f"  | query {row['query_memory_tuples_per_s'] / 1e6:7.2f} -> "
                 f"{row['query_persisted_tuples_per_s'] / 1e6:7.2f} M tuples/s persisted")
    if len(settings.ingress) > 1:
        line += f"  [{_partitions(first)}]"
    for n in settings.ingress[1:]:  # the same measured beside it, with n ingress partitions
        extra, more = _beside(q, ds, settings, scratch, n)
        row.update(extra)
        line += "\n" + more
    return row, line


def _ours(q: str, ds: Dataset, settings: Settings, scratch: Path, partitions: int,
          sfx: str = "") -> tuple:
    """Our persisted ingest with ``partitions`` ingress partitions: raw, and with push-up +
    adaptive codecs when ``settings.reduced`` (else None); each into a folder removed after."""
    def one(name: str, **kw):
        folder = scratch / f"{q}-{name}{sfx}"
        got = ingest(q, ds, PersistConfig(folder, **kw), Replay(duration=settings.seconds),
                     EngineConfig(workers=settings.workers, ingress_partitions=partitions))
        shutil.rmtree(folder, ignore_errors=True)
        return got

    raw = one("ingest")
    return raw, (one("reduced", push_up=True, compression="adaptive",
                     compression_interval=settings.compression_interval)
                 if settings.reduced else None)


def _reduced_line(d) -> str:
    return f"  | push-up + adaptive {d.tuples_per_s / 1e6:7.2f} M tuples/s {d.disk_mb_s:6,.0f} MB/s"


def _partitions(n: int) -> str:
    return f"{n} ingress partition" + ("s" if n != 1 else "")


def _query(q: str, ds: Dataset, settings: Settings, scratch: Path, partitions: int,
           suffix: str = "") -> dict:
    """The query's throughput in memory and with --persist-input."""
    cfg = EngineConfig(workers=settings.workers, ingress_partitions=partitions)
    out = {}
    for persist in (False, True):
        stored = PersistConfig(scratch / f"{q}-run") if persist else None
        rep = run_persisted(queries.get(q), ds, stored, NullSink(), cfg,
                            Replay(duration=settings.seconds))
        key = "query_persisted" if persist else "query_memory"
        out[f"{key}_tuples_per_s{suffix}"] = rep.summary.tuples_per_s
        out[f"{key}_p50_ms{suffix}"] = rep.summary.latency_ms["p50"]
    shutil.rmtree(scratch / f"{q}-run", ignore_errors=True)
    return out


def _beside(q: str, ds: Dataset, settings: Settings, scratch: Path, n: int
            ) -> tuple[dict, str]:
    """Our own ingest (and the query) again with ``n`` ingress partitions: columns
    ``..._p<n>`` and a line under the query's."""
    sfx = f"_p{n}"
    r, d = _ours(q, ds, settings, scratch, n, sfx)
    row = {f"ingest_tuples_per_s{sfx}": r.tuples_per_s, f"ingest_disk_mb_s{sfx}": r.disk_mb_s,
           f"ingest_p50_ms{sfx}": r.latency_ms["p50"]}
    line = (f"{'':5} ingest {r.tuples_per_s / 1e6:7.2f} M tuples/s  {r.disk_mb_s:7,.0f} MB/s "
            f"to disk")
    if d is not None:
        row[f"reduced_tuples_per_s{sfx}"] = d.tuples_per_s
        line += _reduced_line(d)
    if settings.with_query:
        row.update(_query(q, ds, settings, scratch, n, sfx))
        line += (f"  | query {row[f'query_memory_tuples_per_s{sfx}'] / 1e6:7.2f} -> "
                 f"{row[f'query_persisted_tuples_per_s{sfx}'] / 1e6:7.2f} M tuples/s persisted")
    return row, line + f"  [{_partitions(n)}]"


def save(disk: dict, table: pd.DataFrame, output_dir: str | Path) -> Path:
    """``results.csv`` (one row per query, the disk's figures on each) into ``output_dir``."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    table.assign(**{f"disk_{k}": v for k, v in disk.items()}).to_csv(out / "results.csv",
                                                                       index=False)
    return out / "results.csv"


# The paper's Fig. 1/8 (16-core server, 950 MB/s SSD): Scabbard's persisted ingest reached
# 780 MB/s, 82% of the disk; the paper's Kafka reached ~100x less.
PAPER = {"disk_mb_s": 950.0, "ingest_mb_s": 780.0}
PAPER_PEERS = ("Kafka: at most ~4 M tuples/s on every query, far from the SSD's bandwidth; "
               "Scabbard >= 100x Kafka; Kafka++ close to Scabbard on SG2-3 and LRB2-3, with 7x "
               "Scabbard's latency (large batches to amortise synchronous writes).")
SYSTEMS = (("ingest", "Scabbard raw (p-stream)"),
           ("reduced", "Scabbard (push-up + adaptive compression)"),
           ("synclog", "Kafka++ (synchronous log, LZ4)"), ("broker", "broker (RabbitMQ Streams)"))


def summary(disk: dict, table: pd.DataFrame) -> pd.DataFrame:
    """The table a reader wants: per query, ingest tuples/s and MB/s to disk (raw, and
    reduced as the paper's Scabbard persists) and their share of the disk, the peers', the
    ratios to the broker; and what persisting the input leaves of the query's throughput."""
    out = pd.DataFrame({
        "query": table["query"],
        "raw M tuples/s": table["ingest_tuples_per_s"] / 1e6,
        "raw MB/s to disk": table["ingest_disk_mb_s"],
        "raw % of disk (overwrite)": 100 * table["ingest_disk_mb_s"] / disk["write_mb_s"],
        "raw % of disk (first write)": (100 * table["ingest_disk_mb_s"]
                                        / disk["first_write_mb_s"]),
    })
    reduced = "reduced_tuples_per_s" in table
    if reduced:
        out["reduced M tuples/s"] = table["reduced_tuples_per_s"] / 1e6
        out["reduced MB/s to disk"] = table["reduced_disk_mb_s"]
        out["reduced: tuples kept"] = table["reduced_kept"]
        out["reduced: bytes/tuple on disk"] = table["reduced_bytes_per_tuple"]
    if "synclog_tuples_per_s" in table:
        out["Kafka++ M tuples/s"] = table["synclog_tuples_per_s"] / 1e6
        out["Kafka++ MB/s to disk"] = table["synclog_disk_mb_s"]
        best = "reduced" if reduced else "raw"
        out[f"{best} / Kafka++"] = (table[f"{'reduced' if reduced else 'ingest'}_tuples_per_s"]
                                    / table["synclog_tuples_per_s"])
    if "broker_tuples_per_s" in table:
        out["broker M tuples/s"] = table["broker_tuples_per_s"] / 1e6
        out["broker MB/s (rows)"] = table["broker_row_mb_s"]
        out["raw / broker"] = table["ingest_tuples_per_s"] / table["broker_tuples_per_s"]
        if reduced:
            out["reduced / broker (target >= 100x)"] = (table["reduced_tuples_per_s"]
                                                        / table["broker_tuples_per_s"])
    if "synclog_tuples_per_s" in table:
        for key, name in (("ingest", "raw"), ("reduced", "reduced"), ("synclog", "Kafka++"),
                          ("broker", "broker")):
            if f"{key}_p50_ms" in table:
                out[f"{name} p50 ms"] = table[f"{key}_p50_ms"]
    if "query_memory_tuples_per_s" in table:
        out["query M tuples/s"] = table["query_memory_tuples_per_s"] / 1e6
        out["query persisted M tuples/s"] = table["query_persisted_tuples_per_s"] / 1e6
        out["persisted / memory"] = (table["query_persisted_tuples_per_s"]
                                     / table["query_memory_tuples_per_s"])
    for col in table.columns:  # other numbers of ingress partitions, measured beside
        key, _, n = col.rpartition("_tuples_per_s_p")
        if n.isdigit():
            name = {"ingest": "raw", "reduced": "reduced", "query_memory": "query",
                    "query_persisted": "query persisted"}[key]
            out[f"{name} M tuples/s, {_partitions(int(n))}"] = table[col] / 1e6
    return out


def broker_ratio(table: pd.DataFrame) -> str:
    """The Fig. 8 target line: the reduced ingest (else the raw one) over the broker."""
    col = next((c for c in ("reduced / broker (target >= 100x)", "raw / broker")
                if c in table), None)
    if col is None:
        return "no broker ran"
    r = table[col]
    return (f"{col.split(' (')[0]}: min {r.min():.0f}x, median {r.median():.0f}x "
            f"({(r >= 100).sum()}/{len(r)} queries >= 100x)")


def plot(disk: dict, table: pd.DataFrame, output_dir: str | None = None):
    """Paper Fig. 1/8a: ingest per query in tuples/s, and in MB/s to disk against the disk's
    bandwidth (with the peers when measured; the broker's MB/s are its rows'); Fig. 8b: their
    acknowledgement latency; and the query's throughput in memory vs with its input
    persisted."""
    import matplotlib.pyplot as plt

    with_query = "query_memory_tuples_per_s" in table
    systems = [(k, n) for k, n in SYSTEMS if f"{k}_p50_ms" in table]
    panels = 2 + (len(systems) > 1) + with_query
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.2), squeeze=False)
    axes = list(axes[0])
    x = np.arange(len(table))
    w = 0.8 / len(systems)
    ax = axes.pop(0)
    for i, (key, name) in enumerate(systems):
        ax.bar(x + (i - (len(systems) - 1) / 2) * w, table[f"{key}_tuples_per_s"] / 1e6, w,
               label=name)
    ax.set_yscale("log")
    ax.set_xticks(x, table["query"])
    ax.set_ylabel("M tuples/s (source tuples)")
    ax.set_title("Persisted ingest per query (after the paper's Fig. 8a)")
    ax.legend(loc="lower right", fontsize=7)
    ax = axes.pop(0)
    for i, (key, name) in enumerate(systems):
        col = f"{key}_disk_mb_s" if f"{key}_disk_mb_s" in table else f"{key}_row_mb_s"
        ax.bar(x + (i - (len(systems) - 1) / 2) * w, table[col], w,
               label=name + ("" if col.endswith("disk_mb_s") else ", its rows' MB/s"))
    ax.axhline(disk["write_mb_s"], color="#c44e52", ls="--",
               label=f"disk, O_DIRECT overwrite {disk['write_mb_s']:,.0f} MB/s")
    ax.axhline(disk["first_write_mb_s"], color="#dd8452", ls=":",
               label=f"disk, first write {disk['first_write_mb_s']:,.0f} MB/s")
    ax.set_yscale("log")
    ax.set_xticks(x, table["query"])
    ax.set_ylabel("MB/s written to disk")
    ax.set_title("Persisted ingest against the disk (after the paper's Fig. 1, 8a)")
    ax.legend(loc="lower right", fontsize=7)
    if len(systems) > 1:
        ax = axes.pop(0)
        for i, (key, name) in enumerate(systems):
            p50, p95 = table[f"{key}_p50_ms"], table[f"{key}_p95_ms"]
            ax.bar(x + (i - (len(systems) - 1) / 2) * w, p50, w, label=name,
                   yerr=[np.zeros(len(p50)), (p95 - p50).clip(lower=0)], capsize=2)
        ax.set_yscale("log")
        ax.set_xticks(x, table["query"])
        ax.set_ylabel("ms, p50 (whisker: p95)")
        ax.set_title("Latency: batch produced -> persisted and acknowledged (after the paper's Fig. 8b)")
        ax.legend(fontsize=7)
    if with_query:
        ax = axes.pop(0)
        w2 = 0.4
        ax.bar(x - w2 / 2, table["query_memory_tuples_per_s"] / 1e6, w2, label="input in memory")
        ax.bar(x + w2 / 2, table["query_persisted_tuples_per_s"] / 1e6, w2,
               label="input persisted (--persist-input)")
        ax.set_yscale("log")
        ax.set_xticks(x, table["query"])
        ax.set_ylabel("M tuples/s")
        ax.set_title("Query throughput")
        ax.legend(fontsize=8)
    return finish(fig, output_dir, "ingest.png", dpi=120)


def bench(settings: Settings, out: Path, log=print) -> int:
    """``scabbard bench ingest``: the runs, their summary, the table and figure in ``out``."""
    disk, table = run(settings, log=log)
    log("\n" + summary(disk, table).round(2).to_string(index=False))
    csv = save(disk, table, out)
    plot(disk, table, out)
    log(f"\nresults: {csv}, figure: {Path(out) / 'ingest.png'}")
    return 0
