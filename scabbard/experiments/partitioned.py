"""Notebook 15 / ``scabbard bench partitioned``: serial vs key-partitioned assembly vs a
partitioned dataflow.

PipeFabric scales a stateful operator by partitioning its stream by key and merging the
partitions' outputs in order.  Here the windows no task computes alone - every window of a
query whose window spans more than a task - come from one sequential state per window
operator (``serial``) or from P states, each holding the groups whose key hashes to it, run at
once and merged by window end (``partitioned``); or the query runs as PipeFabric's
partitioned dataflow (``dataflow``, :mod:`scabbard.engine.dataflow`): its input routed by key
to a partition thread per worker, each with its own window state, merged in order.

Two measurements, each in one run, side by side:

* **skew**: a synthetic stream (8-byte key, one float) at ``rate`` tuples per second of event
  time, its keys drawn from one key, a Zipf distribution or uniformly over ``keys`` keys; the
  query counts and sums per key over a sliding window of ``range_s`` / ``slide_s``.  One key
  leaves every partition but one idle; Zipf puts most tuples in a few partitions' groups.
* **queries**: the paper's queries whose assembly is sequential, with 1 and 2 workers.

``run`` returns one tidy row per (workload, assembly, workers); ``comparison`` the medians side
by side; ``parts`` where each configuration's CPU went - the process's CPU per input tuple and
the cores it kept busy (CPU over wall time) and, for the dataflow, its routing, partitions and
merge (their threads' CPU); ``plot`` draws the throughput.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter, process_time

import numpy as np
import pandas as pd

from scabbard import queries, workloads
from scabbard.data import Dataset, write_dataset
from scabbard.engine import EngineConfig, NullSink, Replay, run_query
from scabbard.experiments import (
    Common,
    finish,
    save_tables,
    simulated_cores_figure,
)
from scabbard.ft.modes import INTERVAL
from scabbard.query import Query, count, sum_
from scabbard.schema import Field, Schema

SKEW_SCHEMA = Schema("skewed", (
    Field("timestamp", "int64", "event time (ms)"),
    Field("key", "int64", "group key"),
    Field("value", "float64", "summed value"),
))
DISTRIBUTIONS = ("one", "zipf", "uniform")
DATAFLOW = "dataflow"


@dataclass(frozen=True)
class Settings(Common):
    distributions: Sequence[str] = DISTRIBUTIONS
    keys: int = 100_000  # distinct keys of zipf and uniform
    zipf_s: float = 1.2
    rows: int = 2_000_000
    rate: int = 200_000  # tuples per second of event time
    range_s: int = 16
    slide_s: int = 1
    queries: Sequence[str] = ("SG2", "SG3", "NQ", "LRB2", "LRB3")
    # "dataflow": PipeFabric's partitioned dataflow (scabbard.engine.dataflow), a partition
    # thread a worker; the others are the task-parallel engine's assembly modes
    assembly: Sequence[str] = ("serial", "partitioned", DATAFLOW)
    workers: Sequence[int] = (1, 2)
    seconds: float = 4.0
    output_dir: str = "."
    seed: int = 0
    rounds: int = 1  # runs per configuration, each round starting one later; the median kept

    def __post_init__(self) -> None:
        for name in ("distributions", "queries", "assembly", "workers"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "queries", tuple(q.upper() for q in self.queries))
        bad = [d for d in self.distributions if d not in DISTRIBUTIONS]
        if bad:
            raise ValueError(f"unknown key distribution {bad[0]!r} (choose from "
                             f"{', '.join(DISTRIBUTIONS)})")
        for q in self.queries:
            queries.workload_of(q)
        for mode in self.assembly:
            if mode != DATAFLOW:
                EngineConfig(assembly=mode)
        if min(self.keys, self.rows, self.rate, self.range_s, self.slide_s, self.rounds) < 1:
            raise ValueError("keys, rows, rate, range_s, slide_s and rounds must be positive")


def skew_query(s: Settings) -> Query:
    return (Query.stream(SKEW_SCHEMA, "skewed").window(s.range_s, s.slide_s).group_by("key")
            .aggregate(count(), sum_("value")).named("SKEW"))


def skewed_keys(distribution: str, n: int, keys: int, zipf_s: float, rng) -> np.ndarray:
    """``n`` keys: all 0 (``one``), Zipf(``zipf_s``) ranks folded into ``keys``, or uniform."""
    if distribution == "one":
        return np.zeros(n, dtype=np.int64)
    if distribution == "zipf":
        ranks = rng.zipf(zipf_s, n) - 1
        return (ranks % keys).astype(np.int64) * 7919  # spread: key values, not ranks
    return rng.integers(0, keys, n, dtype=np.int64) * 7919


def skew_dataset(distribution: str, s: Settings, folder: Path) -> Dataset:
    path = folder / (f"{distribution}-k{s.keys}-n{s.rows}-r{s.rate}-z{s.zipf_s:g}-seed{s.seed}"
                     if distribution != "one" else f"one-n{s.rows}-r{s.rate}")
    if (path / "manifest.json").exists():
        from scabbard.data import open_dataset

        return open_dataset(path, schema=SKEW_SCHEMA)
    rng = np.random.default_rng(s.seed)
    ts = (np.arange(s.rows, dtype=np.int64) * 1000) // s.rate
    cols = (ts, skewed_keys(distribution, s.rows, s.keys, s.zipf_s, rng),
            rng.random(s.rows))
    return write_dataset(path, SKEW_SCHEMA, cols, workload="skewed", parquet=False,
                         params={"distribution": distribution, "keys": s.keys, "rate": s.rate})


def _measure(q: Query, ds: Dataset, workload: str, s: Settings, log) -> list[dict]:
    """Every (assembly, workers) configuration, ``s.rounds`` times interleaved (each round
    starting one configuration later); a row a run."""
    run_query(q, ds, NullSink(), EngineConfig(workers=1), Replay(duration=min(1.0, s.seconds)))  # warm
    configs = [(mode, w) for mode in s.assembly for w in s.workers]
    if DATAFLOW in s.assembly and not _routable(q, ds, s, log):
        configs = [c for c in configs if c[0] != DATAFLOW]
    rows = []
    for r in range(s.rounds):
        at = r % len(configs)
        for mode, w in configs[at:] + configs[:at]:
            cpu, wall = process_time(), perf_counter()
            if mode == DATAFLOW:
                row = _dataflow(q, ds, w, s)
            else:
                rep = run_query(q, ds, NullSink(), EngineConfig(workers=w, assembly=mode),
                                replay=Replay(duration=s.seconds))
                m = rep.summary
                row = {"tuples": m.tuples, "tuples_per_s": m.tuples_per_s,
                       "result_rows": m.result_rows, "batch_rows": rep.batch_rows,
                       "seconds": round(m.seconds, 3)}
            cpu, wall = process_time() - cpu, perf_counter() - wall
            per = 1e9 / max(row["tuples"], 1)  # ns a tuple from seconds
            row.update(cpu_ns=cpu * per, cores=cpu / max(wall, 1e-9))
            row.update({f"{k}_ns": v * per for k, v in row.pop("cpu_s", {}).items()})
            rows.append({"workload": workload, "assembly": mode, "workers": w, "round": r,
                         **row})
            log(f"{workload:12s} {mode:14s} {w} worker(s) "
                f"{row['tuples_per_s'] / 1e6:8.2f} M tuples/s")
    return rows


def _routable(q: Query, ds: Dataset, s: Settings, log) -> bool:
    """Whether the query runs as a partitioned dataflow (else said in the log); if so, its
    kernels compiled or loaded before the clock starts, as the engine's are."""
    from scabbard.engine.flowrun import PartitionedDataflow
    from scabbard.query.expr import QueryError

    try:
        warm = PartitionedDataflow(q, ds, 1)
    except QueryError as e:
        log(f"{q.name:12s} {DATAFLOW:14s} not run: {e}")
        return False
    warm.run(warm.source(ds, Replay(duration=min(1.0, s.seconds))))
    return True


def _dataflow(q: Query, ds: Dataset, parts: int, s: Settings) -> dict:
    """One run of the query as a partitioned dataflow of ``parts`` partition threads."""
    from scabbard.engine.flowrun import PartitionedDataflow

    flow = PartitionedDataflow(q, ds, parts)
    source = flow.source(ds, Replay(duration=s.seconds))
    r = flow.run(source)
    return {"tuples": r.tuples, "tuples_per_s": r.tuples_per_s, "result_rows": r.result_rows,
            "batch_rows": source.batch_rows, "seconds": round(r.seconds, 3),
            "cpu_s": {"route": r.cpu.route, "partitions": sum(r.cpu.partitions),
                      "merge": r.cpu.merge}}


def run(settings: Settings, log=print) -> pd.DataFrame:
    """Every workload under every assembly mode and worker count; saved as results.csv."""
    s = settings
    rows = []
    scratch = Path(s.data_dir) / "skewed"
    for d in s.distributions:
        rows += _measure(skew_query(s), skew_dataset(d, s, scratch), f"skew:{d}", s, log)
    for name in s.queries:
        ds = workloads.dataset(queries.workload_of(name), s.scale, s.data_dir)
        rows += _measure(queries.get(name), ds, name, s, log)
    table = pd.DataFrame(rows)
    save_tables(s.output_dir, results=table, comparison=comparison(table))
    return table


def comparison(table: pd.DataFrame) -> pd.DataFrame:
    """Per workload: the median throughput per (assembly, workers) - with its runs' min-max
    where there were several rounds - and each mode's 2-vs-1-worker scaling and gain over
    serial with the same workers (of the medians)."""
    def wide(how: str) -> pd.DataFrame:
        w = table.pivot_table(index="workload", columns=["assembly", "workers"],
                              values="tuples_per_s", sort=False, aggfunc=how) / 1e6
        w.columns = [f"{a}_{n}w_Mtps" for a, n in w.columns]
        return w

    out = wide("median")
    if table.get("round", pd.Series([0])).nunique() > 1:
        lo, hi = wide("min"), wide("max")
        for c in list(out.columns):
            out.insert(out.columns.get_loc(c) + 1, c.replace("_Mtps", "_range"),
                       [f"{a:.1f}-{b:.1f}" for a, b in zip(lo[c], hi[c], strict=True)])
    out = out.reset_index()
    modes = list(dict.fromkeys(table["assembly"]))
    for a in modes:
        if f"{a}_1w_Mtps" in out and f"{a}_2w_Mtps" in out:
            out[f"{a}_scaling"] = out[f"{a}_2w_Mtps"] / out[f"{a}_1w_Mtps"]
    for a in modes[1:]:
        for w in sorted(set(table["workers"])):
            if f"{a}_{w}w_Mtps" in out and f"{modes[0]}_{w}w_Mtps" in out:
                out[f"{a}_vs_{modes[0]}_{w}w"] = out[f"{a}_{w}w_Mtps"] / out[f"{modes[0]}_{w}w_Mtps"]
    return out


# where a configuration's CPU went, per input tuple (``parts``): the process's, and the
# dataflow's threads'
CPU_PARTS = ("cpu_ns", "cores", "route_ns", "partitions_ns", "merge_ns")


def parts(table: pd.DataFrame) -> pd.DataFrame:
    """Per workload, assembly and worker count, the medians of the runs' CPU per input tuple
    (ns, the whole process), the cores the run kept busy and, for the dataflow, its threads'
    CPU per input tuple: the dispatcher's routing, the partitions' (all of them) and the
    merge's.  A configuration that scales less than its CPU grows spent more CPU a tuple, or
    left cores idle: which of the two, this says."""
    cols = [c for c in CPU_PARTS if c in table]
    out = table.groupby(["workload", "assembly", "workers"], sort=False)[cols].median()
    out.insert(0, "M tuples/s", table.groupby(["workload", "assembly", "workers"],
                                              sort=False)["tuples_per_s"].median() / 1e6)
    return out.reset_index()


def plot(table: pd.DataFrame, output_dir: str | None = None):
    """Throughput per workload: a bar per (assembly, workers), its median, the runs' min-max
    as an error bar."""
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(table["workload"]))
    configs = list(dict.fromkeys(zip(table["assembly"], table["workers"], strict=True)))
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(names)), 3.8))
    width = 0.8 / len(configs)
    x = np.arange(len(names))
    for k, (a, w) in enumerate(configs):
        g = table[(table["assembly"] == a) & (table["workers"] == w)].groupby("workload")
        med, lo, hi = (getattr(g["tuples_per_s"], f)().reindex(names).to_numpy() / 1e6
                       for f in ("median", "min", "max"))
        ax.bar(x + (k - (len(configs) - 1) / 2) * width, med, width,
               yerr=[med - lo, hi - med], capsize=2, label=f"{a}, {w} worker(s)")
    ax.set_xticks(x, names, rotation=30)
    ax.set_yscale("log")
    ax.set_ylabel("M tuples/s")
    ax.set_title("Serial vs key-partitioned assembly")
    ax.legend(fontsize=8)
    return finish(fig, output_dir, "partitioned.png")


# -- 1 to 16 cores, simulated ----------------------------------------------------------------------
# a serial assembly cheaper than this (ns a tuple) binds only beyond 1 G tuples/s: nothing to gain
SERIAL_MATTERS_NS = 1.0

def simulated(calibration: str | Path | None, names: Sequence[str], cores: Sequence[int] = (1, 2, 4, 8, 16),
              seconds: float = 10.0, interval: float = INTERVAL, data_dir: str | Path | None = None,
              scale: str = "small") -> pd.DataFrame:
    """Per query and core count on the paper's server (16 cores, its SSD), fault tolerance on
    (input persisted as Scabbard persists it, checkpoints every ``interval``; the source read
    by as many ingress partitions as the engine uses by default): throughput with
    the serial assembly, with one assembly partition per core, and as a partitioned dataflow
    of one partition thread per core - the calibrated simulator, whose partitioned costs were
    measured here (``scabbard sim calibrate``; None: this package's calibration,
    ``scabbard.paths.calibration()``).  A query the calibration has no dataflow costs for has
    them measured now on its dataset under ``data_dir`` (None: no dataflow line)."""
    from dataclasses import replace

    from scabbard.engine.runtime import INGRESS_WORKERS
    from scabbard.experiments.simulated import default_calibration
    from scabbard.sim import PAPER_SSD, SimConfig, simulate
    from scabbard.sim import load as load_calibration
    from scabbard.sim.config import DataflowCosts
    from scabbard.sim.dataflow import measure_dataflow

    cal = load_calibration(calibration or default_calibration())
    rows = []
    for q in [n.upper() for n in names if n.upper() in cal.queries]:
        costs = cal.costs(q)
        if costs.dataflow is None and data_dir is not None:
            measured = measure_dataflow(q, scale, data_dir, most=max(cores))
            if measured is not None:
                costs = cal.queries[q] = replace(costs, dataflow=DataflowCosts(**measured))
        for n in cores:
            hw = replace(PAPER_SSD, cores=n)
            for mode, parts in (("serial", 1), ("partitioned", n), (DATAFLOW, n)):
                if mode == "partitioned" and (costs.partition_share <= 0
                                              or costs.assembly_ns_tuple < SERIAL_MATTERS_NS):
                    continue  # nothing to partition, or a serial part that cannot bind
                if mode == DATAFLOW and (costs.dataflow is None
                                         or n > len(costs.dataflow.shares)):
                    continue  # not measured (or not for this many partitions)
                cfg = SimConfig(q, workers=n, persist=True, compression=costs.best_scheme,
                                checkpoint_interval=interval, duration=seconds,
                                assembly_parts=parts if mode == "partitioned" else 1,
                                dataflow_parts=parts if mode == DATAFLOW else 0,
                                ingress_partitions=max(1, n // INGRESS_WORKERS))
                r = simulate(cal, cfg, hw)
                busy = r.utilisation
                rows.append({"query": q, "cores": n, "assembly": mode,
                             "tuples_per_s": r.steady_tuples_per_s or r.summary.tuples_per_s,
                             "assembly_core_busy": n * busy.get("cores_assembly", 0.0),
                             # the dispatcher's reading, or the ingress partitions' threads
                             "source_core_busy": n * (busy.get("cores_source", 0.0)
                                                      + busy.get("cores_ingress", 0.0)),
                             # the dataflow's routing (the dispatcher's) and its partitions'
                             "route_core_busy": n * busy.get("cores_route", 0.0),
                             "partition_cores_busy": n * busy.get("cores_partition", 0.0),
                             "disk_busy": busy.get("disk", 0.0)})
    table = pd.DataFrame(rows)
    if len(table):
        one = table[table["cores"] == min(cores)].set_index(["query", "assembly"])["tuples_per_s"]
        table["scaling"] = [t / one.get((q, a), np.nan) for q, a, t in
                            zip(table["query"], table["assembly"], table["tuples_per_s"],
                                strict=True)]
    return table


def plot_simulated(table: pd.DataFrame, output_dir: str | None = None):
    """Simulated throughput against cores, per query: serial (dashed) and partitioned."""

    def draw(ax):
        for k, (q, g) in enumerate(table.groupby("query", sort=False)):
            color = f"C{k % 10}"
            for mode, style in (("serial", "--"), ("partitioned", "-"), (DATAFLOW, ":")):
                sel = g[g["assembly"] == mode]
                if len(sel):
                    ax.plot(sel["cores"], sel["tuples_per_s"] / 1e6, style, color=color,
                            marker="o", label=f"{q} {mode}"
                            if mode != "serial" or len(g) == len(sel) else None)

    return simulated_cores_figure(output_dir, "partitioned_simulated.png",
                                  "Serial (dashed) vs partitioned assembly vs dataflow (dotted), "
                                  "1-16 cores", draw)
