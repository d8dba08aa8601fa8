"""Notebook 09 / ``scabbard bench peers``: the engine beside the fault-tolerant peers (paper
Fig. 7a and 7b), on this machine, in one run and on the same generated data.

Per query:

* **no FT** - the engine, input in memory, results discarded (the paper's LightSaber bar);
* **FT** - the engine with everything recovery needs: the input persisted to its ingress
  p-stream, checkpoints every ``interval`` seconds, results through the clocked
  exactly-once sink (the paper's Scabbard bar);
* **Spark-FT** - Spark Structured Streaming with a checkpoint location
  (:mod:`scabbard.peers.spark`), in one local session sized for the machine
  (:class:`SparkPeer`: half the available memory as the driver's heap, two shuffle
  partitions per core, or ``spark_memory`` / ``spark_partitions``);
* **Flink-FT** - Flink SQL with checkpoints every ``interval`` seconds, in its own
  environment (:mod:`scabbard.peers.flink`), where ``.venv-flink`` exists.

A peer that fails on a query is recorded as failed, with why, and the comparison goes on:
every query still gets a row per peer.  When the failure killed the peer's JVM (Spark's
driver running out of heap exits the JVM), the next query starts a fresh Spark session;
each Flink run has a JVM (a mini-cluster) of its own anyway.

The peers run the same plan on the same dataset (a prefix of it for sliding windows: they
copy every tuple into each of its windows, see
:func:`~scabbard.experiments.engine_throughput.peer_dataset`) and report their processing
time, source to complete windows, without JVM start.  Latency (Fig. 7b) is the engine's, no
FT and FT, each at ``latency_fraction`` of the rate it sustained: per task, from the
arrival of its batch to its results (the peers process a bounded input as fast as they can,
so they have no comparable per-tuple latency).
"""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from scabbard import queries
from scabbard.engine import EngineConfig, NullSink, Replay, run_query
from scabbard.experiments import (
    Common,
    finish,
    prepared_dataset,
    save_tables,
    scratch,
)
from scabbard.experiments.engine_throughput import peer_dataset
from scabbard.experiments.progress import Progress, Step
from scabbard.ft.modes import INTERVAL
from scabbard.ft.recovery import run_fault_tolerant
from scabbard.ft.sinks import ClockedSink

logger = logging.getLogger(__name__)

SYSTEMS = (("no_ft", "engine, no FT"), ("ft", "engine with FT"), ("spark_ft", "Spark-FT"),
           ("flink_ft", "Flink-FT"))
PAPER = ("16 cores: Scabbard within 11% of LightSaber (no FT) on SG3, LRB1-3; 12-69% below on "
         "CM1-2, SG1-2, NQ; up to 2x on YSB; >= 10x Flink-FT on every query; median latency "
         "< 50 ms on all but LRB3 (< 1 s).")


@dataclass(frozen=True)
class Settings(Common):
    queries: Sequence[str] = field(default=queries.NAMES)
    seconds: float = 5.0  # per engine run
    interval: float = INTERVAL  # checkpoints, engine and peers
    workers: int = 2
    spark: bool = True
    flink: bool = True  # where .venv-flink exists (scripts/setup-flink.sh)
    peer_max_copies: int = 40_000_000
    latency_fraction: float = 0.8
    storage_dir: str | None = None
    spark_memory: str = "auto"  # the Spark driver's heap, e.g. 8g; auto: half the free memory
    spark_partitions: int = 0  # Spark's shuffle partitions; 0: two per core

    def __post_init__(self) -> None:
        if not re.fullmatch(r"auto|\d+[kmgt]?", self.spark_memory.lower()):
            raise ValueError(f"Spark's memory is 'auto' or a size such as 8g, not "
                             f"{self.spark_memory!r}")
        if self.spark_partitions < 0 or not self.seconds > 0:
            raise ValueError("Spark's shuffle partitions must be >= 0 (0: two per core) and "
                             "the seconds per run positive")


class SparkPeer:
    """The Spark-FT peer's session across the queries: started when a query first needs it,
    sized for the machine unless the settings say otherwise; after a failed query, a dead
    JVM is discarded (and why it died kept for the table) so the next query gets a fresh
    session."""

    def __init__(self, settings: Settings, note: Callable[[str], None] = print):
        from scabbard.sparksession import machine_resources, sized_for_machine

        self.config = sized_for_machine(
            *machine_resources(), app_name="scabbard-peers",
            driver_memory=None if settings.spark_memory.lower() == "auto" else settings.spark_memory,
            shuffle_partitions=settings.spark_partitions or None)
        self.note, self.spark, self.pid, self.starts = note, None, None, 0
        self.owned = False  # started here (else the process's own session: never stopped here)

    def session(self):
        from pyspark.sql import SparkSession

        from scabbard.sparksession import get_spark, jvm_pid, spark_alive

        if self.spark is None and (s := SparkSession.getActiveSession()) and spark_alive(s):
            self.note("using this process's Spark session")
            self.spark, self.pid = s, jvm_pid(s)
        if self.spark is None:
            c = self.config
            self.note(f"starting Spark ({c.master}, driver memory {c.driver_memory}, "
                      f"{c.shuffle_partitions} shuffle partitions"
                      + (", a fresh JVM: the last one died)" if self.starts else ")"))
            self.spark = get_spark(c)
            self.pid, self.starts, self.owned = jvm_pid(self.spark), self.starts + 1, True
        return self.spark

    def jvm_died(self) -> str | None:
        """After a failed run: None if the session's JVM lives, else why it died (the session
        is then discarded)."""
        from scabbard.sparksession import discard_spark, jvm_exit, spark_alive

        if self.spark is None or spark_alive(self.spark):
            return None
        why = jvm_exit(self.spark)
        discard_spark(self.spark)
        self.spark = self.pid = None
        return why

    def stop(self) -> None:
        from scabbard.sparksession import discard_spark

        if self.spark is not None and self.owned:
            discard_spark(self.spark)
        self.spark = self.pid = None


def _engine(query: str, ds, settings: Settings, folder: Path, ft: bool,
            rate: float | None = None):
    q = queries.get(query)
    cfg = EngineConfig(workers=settings.workers)
    if not ft:
        return run_query(q, ds, NullSink(), cfg, Replay(rate=rate, duration=settings.seconds)).summary
    shutil.rmtree(folder, ignore_errors=True)
    r = run_fault_tolerant(q, ds, folder / "storage", ClockedSink(folder / "output"), cfg,
                           interval=settings.interval, duration=settings.seconds, rate=rate)
    shutil.rmtree(folder, ignore_errors=True)
    return r.run.summary


def measure(query: str, ds, settings: Settings, root: Path, spark: SparkPeer | None = None,
            progress: Progress | None = None, on_peer_start=None) -> list[dict]:
    """One row per system: tuples/s (and, for the engine, latency percentiles); a peer that
    failed has NaN and its ``error``.  ``on_peer_start(query, system, pid)`` hears of each
    peer's run as it starts (``pid``: the Spark driver's JVM; None for Flink, whose JVM the
    run itself starts)."""
    progress = progress or Progress(steps(Settings(queries=(query,), spark=spark is not None,
                                                    flink=settings.flink)), log=logger.info)
    on_peer_start = on_peer_start or (lambda q, system, pid: None)
    rows = []
    progress.start(f"{query} engine")
    for ft in (False, True):
        key = "ft" if ft else "no_ft"
        s = _engine(query, ds, settings, root / key, ft)
        lat = _engine(query, ds, settings, root / key, ft,
                      rate=settings.latency_fraction * s.tuples_per_s).latency_ms
        rows.append({"query": query, "system": key, "tuples_per_s": s.tuples_per_s,
                     **{f"{p}_ms": v for p, v in lat.items()}})
    with tempfile.TemporaryDirectory(prefix="scabbard-peers-", dir=root) as tmp:
        data = peer_dataset(query, ds, Path(tmp), settings.peer_max_copies)
        if spark is not None:
            progress.start(f"{query} Spark-FT")

            def run_spark_peer():
                session = spark.session()
                on_peer_start(query, "spark_ft", spark.pid)
                return _spark(query, data, session, tmp)

            rows.append(_peer(query, "spark_ft", run_spark_peer, spark.jvm_died))
        if settings.flink:
            progress.start(f"{query} Flink-FT")
            on_peer_start(query, "flink_ft", None)
            rows.append(_peer(query, "flink_ft", lambda: _flink(query, data, settings, tmp)))
    progress.finish()
    return rows


def _spark(query: str, data, spark, tmp: str) -> dict:
    from scabbard.peers.spark import Results, run_spark

    run = run_spark(queries.get(query), data, spark=spark, workdir=Path(tmp) / "spark",
                    results=Results(collect=False))
    return {"tuples_per_s": run.tuples_per_s, "peer_tuples": run.tuples}


def _flink(query: str, data, settings: Settings, tmp: str) -> dict:
    """One Flink job in a mini-cluster of its own JVM (a JVM that dies fails this query
    only), one task slot per core, as Spark's ``local[cores]``."""
    from scabbard.peers.flink import run_flink
    from scabbard.sparksession import machine_resources

    run = run_flink(queries.get(query), data, workdir=Path(tmp) / "flink",
                    checkpoint_interval_s=settings.interval, parallelism=machine_resources()[0])
    return {"tuples_per_s": run.tuples_per_s, "peer_tuples": run.tuples,
            "checkpoints": run.checkpoints}


def _peer(query: str, system: str, measure_peer, jvm_died=lambda: None) -> dict:
    """A peer's row; a peer that fails on one query (e.g. out of memory) is recorded as
    failed - with why, in one line - and the comparison goes on with the next."""
    try:
        return {"query": query, "system": system, **measure_peer()}
    except Exception as e:  # noqa: BLE001 - reported in the table, never hidden
        died = jvm_died()
        error = f"{died}: {reason(e)}" if died else reason(e)
        logger.warning("%s failed on %s: %s", system, query, error)
        return {"query": query, "system": system, "tuples_per_s": float("nan"),
                "error": error[:240]}


def reason(e: BaseException) -> str:
    """An exception in one line: its type and, of its message (a JVM's may hold pages of
    stack), the first line naming a Java exception or error, else its first line."""
    lines = [ln.strip() for ln in str(e).splitlines()
             if ln.strip() and not ln.startswith("\tat ")]
    java = [ln for ln in lines if re.search(r"\w(Exception|Error)\b", ln)]
    text = (java or lines or [""])[0]
    return f"{type(e).__name__}: {text[:200]}".rstrip(": ")


def steps(settings: Settings) -> list[Step]:
    """The comparison's steps per query, for :class:`Progress` (guesses: the engine's four
    runs, a Spark run with its share of the JVM start, a Flink job with its JVM)."""
    out = []
    for q in settings.queries:
        out.append(Step(f"{q} engine", "engine", 4 * settings.seconds + 3))
        if settings.spark:
            out.append(Step(f"{q} Spark-FT", "spark_ft", 30.0))
        if settings.flink:
            out.append(Step(f"{q} Flink-FT", "flink_ft", 30.0))
    return out


def run(settings: Settings, log=print, progress: Progress | None = None,
        on_peer_start=None) -> pd.DataFrame:
    """Every query of ``settings``: one row per system (see :func:`measure`).  ``progress``:
    a :class:`Progress` over (at least) :func:`steps`, e.g. one spanning several experiments;
    by default one of this run's steps, logging to ``log``."""
    from scabbard.peers.flink import flink_available

    if settings.flink and not flink_available():
        log("note: Flink-FT is skipped: not installed here (no .venv-flink; `make peers` or "
            "scripts/setup-flink.sh creates it)")
        settings = Settings(**{**settings.__dict__, "flink": False})
    progress = progress or Progress(steps(settings), log)
    spark = SparkPeer(settings, progress.note) if settings.spark else None
    rows = []
    try:
        with scratch(settings.storage_dir, settings.data_dir, "scabbard-comparison-") as root:
            for q in settings.queries:
                ds = prepared_dataset(q, settings.scale, settings.data_dir, settings.workers,
                                      settings.seconds)
                got = measure(q, ds, settings, root, spark, progress, on_peer_start)
                rows += got
                log(result_line(q, got))
    finally:
        if spark is not None:
            spark.stop()
    return pd.DataFrame(rows)


def result_line(query: str, rows: list[dict]) -> str:
    """One query's figures, M tuples/s per system; a failed peer: 'failed'."""
    by = {r["system"]: r for r in rows}
    return f"{query:5} " + "  ".join(
        f"{name} " + ("  failed" if isinstance(by[k].get("error"), str)
                      else f"{by[k]['tuples_per_s'] / 1e6:8.2f}")
        for k, name in SYSTEMS if k in by) + "  M tuples/s"


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Fig. 7a as a table: M tuples/s per system and query, FT's cost, FT over each peer;
    a peer that failed on a query has no figure there and says why in ``failed``."""
    t = runs.pivot(index="query", columns="system", values="tuples_per_s") / 1e6
    t = t.reindex([q for q in runs["query"].unique()])
    out = pd.DataFrame(index=t.index)
    for key, name in SYSTEMS:
        if key in t:
            out[f"{name} M tuples/s"] = t[key]
    out["FT vs no FT"] = t["ft"] / t["no_ft"] - 1
    for key, name in SYSTEMS[2:]:
        if key in t:
            out[f"FT / {name} (target >= 50x)"] = t["ft"] / t[key]
    lat = runs.set_index(["query", "system"])["p50_ms"].unstack("system")
    for key in ("no_ft", "ft"):
        out[f"{dict(SYSTEMS)[key]} p50 ms"] = lat[key].reindex(t.index)
    out["failed"] = ""
    if "error" in runs:
        names = dict(SYSTEMS)
        for q, got in runs.dropna(subset=["error"]).groupby("query", sort=False):
            out.loc[q, "failed"] = "; ".join(f"{names[r.system]}: {r.error}"
                                             for r in got.itertuples())
    return out.reset_index()


def headline(table: pd.DataFrame) -> str:
    ratios = [c for c in table.columns if c.startswith("FT / ")]
    parts = [f"{c.split(' (')[0]}: min {table[c].min():.0f}x, median {table[c].median():.0f}x "
             f"({(table[c] >= 50).sum()}/{len(table)} queries >= 50x)" for c in ratios]
    return "; ".join(parts) if parts else "no peer ran"


def save(runs: pd.DataFrame, output_dir: str | Path) -> Path:
    return save_tables(output_dir, results=summary(runs), runs=runs)


def plot(runs: pd.DataFrame, output_dir: str | None = None):
    """Fig. 7a: throughput per system and query (log scale); Fig. 7b: the engine's latency
    candlesticks (p5-p95 whiskers, p25-p75 box, p50 line), no FT and FT."""
    import matplotlib.pyplot as plt

    qs = list(runs["query"].unique())
    systems = [(k, n) for k, n in SYSTEMS if k in set(runs["system"])]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(14, 4.2))
    x = np.arange(len(qs))
    w = 0.8 / len(systems)
    for i, (key, name) in enumerate(systems):
        r = runs[runs["system"] == key].set_index("query").reindex(qs)
        ax.bar(x + (i - (len(systems) - 1) / 2) * w, r["tuples_per_s"] / 1e6, w, label=name)
    ax.set_yscale("log")
    ax.set_xticks(x, qs, rotation=45)
    ax.set_ylabel("M tuples/s")
    ax.set_title("Throughput (after the paper's Fig. 7a)")
    ax.legend(fontsize=8)
    for i, key in enumerate(("no_ft", "ft")):
        r = runs[runs["system"] == key].set_index("query").reindex(qs)
        pos = x + (i - 0.5) * 0.35
        stats = [{"whislo": a, "q1": b, "med": c, "q3": d, "whishi": e, "label": q}
                 for q, a, b, c, d, e in zip(qs, r["p5_ms"], r["p25_ms"], r["p50_ms"],
                                             r["p75_ms"], r["p95_ms"], strict=True)]
        bp = bx.bxp(stats, positions=pos, widths=0.3, showfliers=False, patch_artist=True,
                    medianprops={"color": "black"})
        for box in bp["boxes"]:
            box.set_facecolor(f"C{i}")
        bx.plot([], [], color=f"C{i}", lw=6, label=dict(SYSTEMS)[key])
    bx.set_yscale("log")
    bx.set_xticks(x, qs, rotation=45)
    bx.set_ylabel("ms")
    bx.set_title("Engine latency at 80% of its rate (after the paper's Fig. 7b)")
    bx.legend(fontsize=8)
    return finish(fig, output_dir, "system_comparison.png")


def bench_peers(s7: Settings, out: Path, log=print) -> int:
    """``scabbard bench peers``: Fig. 7a (the engine with fault tolerance against the FT
    peers) and Fig. 8 (persisted ingest against Kafka++ and the broker) side by side, with
    the progress of every step, the tables and figures in ``out``."""
    import dataclasses

    from scabbard.experiments import ingest
    from scabbard.experiments.progress import Progress, clock, guesses_from
    from scabbard.peers.flink import flink_available

    if s7.flink and not flink_available():
        log("note: Flink-FT is skipped: not installed here (no .venv-flink; `make peers` or "
            "scripts/setup-flink.sh creates it)")
        s7 = dataclasses.replace(s7, flink=False)
    s8 = ingest.Settings(queries=s7.queries, scale=s7.scale, seconds=s7.seconds,
                         with_query=False, disk_bytes=256 << 20, workers=s7.workers)
    out = Path(out)
    history = out / "steps.json"  # what each step took in the last run here
    progress = Progress(guesses_from(steps(s7) + ingest.steps(s8), history), log)
    log(f"{len(progress.steps)} steps over {len(s7.queries)} queries; about "
        f"{clock(progress.left_s())} in all, as first guessed"
        + (f" from the last run's {history}" if history.exists() else "")
        + " (each step's line updates it)")
    log("== Fig. 7a: throughput with fault tolerance, the engine vs the FT peers ==")
    runs = run(s7, log=log, progress=progress)
    fig7 = summary(runs)
    log("\n== Fig. 8: persisted ingest, the engine vs Kafka++ vs the broker ==")
    disk, table = ingest.run(s8, log=log, progress=progress)
    fig8 = ingest.summary(disk, table)
    log(f"\nall done in {clock(progress.elapsed_s)}")
    progress.save(history)
    log("\n== Fig. 7a (M tuples/s; FT over each peer) ==")
    log(_fig7_table(fig7, runs).T.to_string())
    for row in fig7[fig7["failed"] != ""].itertuples():
        log(f"failed on {row.query}: {row.failed}")
    log(f"\n== Fig. 8 (M tuples/s of source tuples, MB/s written to disk; disk: O_DIRECT "
        f"write {disk['write_mb_s']:,.0f} MB/s, first write {disk['first_write_mb_s']:,.0f} "
        f"MB/s) ==")
    log(fig8.set_index("query").round(2).T.to_string())
    log(f"\nFig. 7a: {headline(fig7)}")
    log(f"Fig. 8: {ingest.broker_ratio(fig8)}")
    log(f"paper: {PAPER}\npaper: {ingest.PAPER_PEERS}")
    out.mkdir(parents=True, exist_ok=True)
    side = fig7.merge(fig8, on="query")
    side.to_csv(out / "side_by_side.csv", index=False)
    save(runs, out / "fig7a")
    ingest.save(disk, table, out / "fig8")
    plot(runs, out / "fig7a")
    ingest.plot(disk, table, out / "fig8")
    log(f"\nresults: {out / 'side_by_side.csv'}, figures: {out}/fig7a, {out}/fig8")
    return 0


def _fig7_table(fig7, runs):
    """Fig. 7a's figures for printing, per query: a peer that failed says ``failed`` (why is
    printed below the table)."""
    shown = fig7.drop(columns="failed").set_index("query").round(2).astype(object)
    if "error" in runs:
        for r in runs.dropna(subset=["error"]).itertuples():
            shown.loc[r.query, f"{dict(SYSTEMS)[r.system]} M tuples/s"] = "failed"
    return shown
