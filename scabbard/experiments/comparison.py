"""Notebook 09 / ``scabbard bench peers``: the engine beside the fault-tolerant peers (paper
Fig. 7a and 7b), on this machine, in one run and on the same generated data.

Per query:

* **no FT** - the engine, input in memory, results discarded (the paper's LightSaber bar);
* **FT** - the engine with everything recovery needs: the input persisted to its ingress
  p-stream, checkpoints every ``interval`` seconds, results through the clocked
  exactly-once sink (the paper's Scabbard bar);
* **Spark-FT** - Spark Structured Streaming with a checkpoint location
  (:mod:`scabbard.peers.spark`);
* **Flink-FT** - Flink SQL with checkpoints every ``interval`` seconds, in its own
  environment (:mod:`scabbard.peers.flink`), where ``.venv-flink`` exists.

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
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from scabbard import queries
from scabbard.engine import EngineConfig, NullSink, run_query
from scabbard.experiments import finish, prepared_dataset, save_tables, scratch
from scabbard.experiments.engine_throughput import peer_dataset
from scabbard.ft.recovery import run_fault_tolerant
from scabbard.ft.sinks import ClockedSink

logger = logging.getLogger(__name__)

SYSTEMS = (("no_ft", "engine, no FT"), ("ft", "engine with FT"), ("spark_ft", "Spark-FT"),
           ("flink_ft", "Flink-FT"))
PAPER = ("16 cores: Scabbard within 11% of LightSaber (no FT) on SG3, LRB1-3; 12-69% below on "
         "CM1-2, SG1-2, NQ; up to 2x on YSB; >= 10x Flink-FT on every query; median latency "
         "< 50 ms on all but LRB3 (< 1 s).")


@dataclass(frozen=True)
class Settings:
    queries: Sequence[str] = field(default=queries.NAMES)
    scale: str = "small"
    data_dir: str = "data"
    seconds: float = 5.0  # per engine run
    interval: float = 1.0  # checkpoints, engine and peers
    workers: int = 2
    spark: bool = True
    flink: bool = True  # where .venv-flink exists (scripts/setup-flink.sh)
    peer_max_copies: int = 40_000_000
    latency_fraction: float = 0.8
    storage_dir: str | None = None


def _engine(query: str, ds, settings: Settings, folder: Path, ft: bool,
            rate: float | None = None):
    q = queries.get(query)
    cfg = EngineConfig(workers=settings.workers)
    if not ft:
        return run_query(q, ds, NullSink(), cfg, duration=settings.seconds, rate=rate).summary
    shutil.rmtree(folder, ignore_errors=True)
    r = run_fault_tolerant(q, ds, folder / "storage", ClockedSink(folder / "output"), cfg,
                           interval=settings.interval, duration=settings.seconds, rate=rate)
    shutil.rmtree(folder, ignore_errors=True)
    return r.run.summary


def measure(query: str, ds, settings: Settings, root: Path, spark=None) -> list[dict]:
    """One row per system that ran: tuples/s (and, for the engine, latency percentiles)."""
    rows = []
    for ft in (False, True):
        key = "ft" if ft else "no_ft"
        s = _engine(query, ds, settings, root / key, ft)
        lat = _engine(query, ds, settings, root / key, ft,
                      rate=settings.latency_fraction * s.tuples_per_s).latency_ms
        rows.append({"query": query, "system": key, "tuples_per_s": s.tuples_per_s,
                     **{f"{p}_ms": v for p, v in lat.items()}})
    with tempfile.TemporaryDirectory(prefix="scabbard-peers-", dir=root) as tmp:
        data = peer_dataset(query, ds, Path(tmp), settings.peer_max_copies)
        if settings.spark:
            rows.append(_peer(query, "spark_ft", lambda: _spark(query, data, spark, tmp)))
        if settings.flink:
            rows.append(_peer(query, "flink_ft", lambda: _flink(query, data, settings, tmp)))
    return rows


def _spark(query: str, data, spark, tmp: str) -> dict:
    from scabbard.peers.spark import run_spark

    run = run_spark(queries.get(query), data, spark=spark, workdir=Path(tmp) / "spark",
                    collect=False)
    return {"tuples_per_s": run.tuples_per_s, "peer_tuples": run.tuples}


def _flink(query: str, data, settings: Settings, tmp: str) -> dict:
    from scabbard.peers.flink import run_flink

    run = run_flink(queries.get(query), data, workdir=Path(tmp) / "flink",
                    checkpoint_interval_s=settings.interval)
    return {"tuples_per_s": run.tuples_per_s, "peer_tuples": run.tuples,
            "checkpoints": run.checkpoints}


def _peer(query: str, system: str, measure_peer) -> dict:
    """A peer's row; a peer that fails on one query (e.g. out of memory) is recorded as
    failed - with its error - and the comparison goes on with the next."""
    try:
        return {"query": query, "system": system, **measure_peer()}
    except Exception as e:  # noqa: BLE001 - reported in the table, never hidden
        logger.warning("%s failed on %s: %s", system, query, e)
        return {"query": query, "system": system, "tuples_per_s": float("nan"),
                "error": f"{type(e).__name__}: {str(e)[:200]}"}


def run(settings: Settings, log=print) -> pd.DataFrame:
    from scabbard.peers.flink import flink_available

    if settings.flink and not flink_available():
        log("Flink-FT skipped: no .venv-flink here (scripts/setup-flink.sh creates it)")
        settings = Settings(**{**settings.__dict__, "flink": False})
    spark = None
    if settings.spark:
        from scabbard.sparksession import get_spark

        spark = get_spark()
    rows = []
    with scratch(settings.storage_dir, settings.data_dir, "scabbard-comparison-") as root:
        for q in settings.queries:
            ds = prepared_dataset(q, settings.scale, settings.data_dir, settings.workers,
                                  settings.seconds)
            got = measure(q, ds, settings, root, spark)
            rows += got
            by = {r["system"]: r["tuples_per_s"] / 1e6 for r in got}
            log(f"{q:5} " + "  ".join(f"{name} {by[k]:8.2f}" for k, name in SYSTEMS if k in by)
                + "  M tuples/s")
    return pd.DataFrame(rows)


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Fig. 7a as a table: M tuples/s per system and query, FT's cost, FT over each peer."""
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
    ax.set_title("Throughput (Fig. 7a)")
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
    bx.set_title("Engine latency at 80% of its rate (Fig. 7b)")
    bx.legend(fontsize=8)
    return finish(fig, output_dir, "system_comparison.png")
