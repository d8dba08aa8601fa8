"""``scabbard bench cluster``: local mode vs a standalone cluster on this machine (docs/design.md).

The same two jobs, in one run, on Spark in local mode (``local[<workers>]``: one JVM, one
task thread per core) and on a standalone cluster started for the run (a master and
``workers`` workers of one core each, on 127.0.0.1, stopped afterwards even on failure):

1. generation: ``tuples`` rows of ``workload`` written to a ``file://`` URI by the executors
   (Parquet, then the replay columns as a Spark job) - the tuples per second of the whole
   :func:`~scabbard.workloads.generator.generate`;
2. one query (``query``) on that dataset with the Spark backend, its work folder and results
   at the URI, nothing collected - the tuples per second of its streaming part.

Each session first runs one round untimed (class loading, and the JIT compilation each
executor JVM does for itself), so the timed rounds measure the work, not the start;
``rounds`` timed rounds follow, the median kept.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from scabbard import paths, queries, workloads


@dataclass(frozen=True)
class Settings:
    workload: str = "ysb"
    tuples: int = 2_000_000
    query: str = "YSB"
    workers: int = 2
    rounds: int = 3
    work: str = field(default_factory=lambda: str(paths.data_root() / "bench-cluster"))

    def __post_init__(self):
        if self.workload not in workloads.NAMES:
            raise ValueError(f"--workload: one of {', '.join(workloads.NAMES)}")
        if self.query not in queries.NAMES:
            raise ValueError(f"--query: one of {', '.join(queries.NAMES)}")
        if queries.workload_of(self.query) != self.workload:
            raise ValueError(f"--query {self.query} reads {queries.workload_of(self.query)} data, "
                             f"not --workload {self.workload}")
        if self.tuples < 1000 or self.workers < 1 or self.rounds < 1:
            raise ValueError("--tuples must be >= 1000, --workers and --rounds >= 1")


def _measure(spark, label: str, settings: Settings, log: Callable[[str], None]) -> dict:
    """Warm up, then generate and query ``rounds`` times on ``spark``; one row of medians."""
    from scabbard.hadoopfs import to_uri
    from scabbard.peers.spark import Results, run_spark
    from scabbard.workloads.generator import Datagen, generate, make_params

    spec = workloads.get(settings.workload).SPEC
    root = Path(settings.work).absolute() / label
    shutil.rmtree(root, ignore_errors=True)
    out = to_uri(root / "data")
    query = queries.get(settings.query)
    params = make_params(spec, duration=settings.tuples / spec.default_rate, rate=spec.default_rate)
    gen, runs = [], []
    for r in range(settings.rounds + 1):  # round 0 warms the JVMs up (each executor its own)
        t0 = time.perf_counter()
        ds = generate(spec, params,
                      Datagen(out=out, name="bench", force=True, spark=spark, progress=False))
        seconds = time.perf_counter() - t0
        run = run_spark(query, ds, spark=spark, workdir=to_uri(root / f"work{r}"),
                        results=Results(to_uri(root / f"work{r}" / "result"), False))
        log(f"  {label} round {r}{' (warm-up, not counted)' if r == 0 else ''}: generate "
            f"{ds.rows / seconds / 1e6:.3f} M tuples/s ({seconds:.1f} s), {query.name} "
            f"{run.tuples_per_s / 1e6:.3f} M tuples/s ({run.seconds:.1f} s streaming, "
            f"{run.rows:,} result rows)")
        if r > 0:
            gen.append(seconds)
            runs.append(run)
    gen_s = statistics.median(gen)
    query_s = statistics.median(r.seconds for r in runs)
    spread = max((max(x) - min(x)) / statistics.median(x)
                 for x in (gen, [r.seconds for r in runs]))
    shutil.rmtree(root, ignore_errors=True)
    return {"spark": label, "master": spark.sparkContext.master,
            "cores": spark.sparkContext.defaultParallelism, "rows": ds.rows,
            "gen_seconds": gen_s, "gen_M_tuples_per_s": ds.rows / gen_s / 1e6,
            "gen_MB_per_s": ds.rows * ds.schema.row_bytes / gen_s / 1e6, "query": query.name,
            "query_seconds": query_s, "query_M_tuples_per_s": ds.rows / query_s / 1e6,
            "result_rows": runs[-1].rows, "load": os.getloadavg()[0], "spread": spread}


def run(settings: Settings = Settings(), log: Callable[[str], None] = print) -> pd.DataFrame:
    """Local mode, then the standalone cluster; one row each (see the module)."""
    from scabbard.sparksession import SparkSettings, get_spark
    from scabbard.standalone import ClusterSettings, StandaloneCluster

    shuffle = 2 * settings.workers
    rows = []
    log(f"local[{settings.workers}]: one JVM, {settings.workers} task threads")
    spark = get_spark(SparkSettings(master=f"local[{settings.workers}]",
                                    app_name="scabbard-bench-cluster",
                                    shuffle_partitions=shuffle))
    try:
        rows.append(_measure(spark, "local", settings, log))
    finally:
        spark.stop()
    folder = Path(settings.work).absolute() / "cluster-daemons"
    log(f"standalone cluster: a master and {settings.workers} workers of 1 core on 127.0.0.1 "
        f"(in {folder})")
    with StandaloneCluster(ClusterSettings(folder=folder, workers=settings.workers, cores=1,
                                           port=0, ui_port=0)) as cluster:
        spark = get_spark(SparkSettings(master=cluster.master_url,
                                        app_name="scabbard-bench-cluster",
                                        shuffle_partitions=shuffle))
        try:
            rows.append(_measure(spark, "cluster", settings, log))  # data in work/cluster
        finally:
            spark.stop()
    return pd.DataFrame(rows)


def summary(table: pd.DataFrame) -> str:
    """The figures side by side, and the cluster's rate relative to local mode."""
    cols = ["spark", "master", "cores", "rows", "gen_M_tuples_per_s", "gen_MB_per_s", "query",
            "query_M_tuples_per_s", "result_rows"]
    text = table[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}")
    local, cluster = table.iloc[0], table.iloc[-1]
    return (f"{text}\n\ncluster / local: generation "
            f"{cluster.gen_M_tuples_per_s / local.gen_M_tuples_per_s:.2f}x, "
            f"{local.query} {cluster.query_M_tuples_per_s / local.query_M_tuples_per_s:.2f}x")


def note(table: pd.DataFrame) -> str:
    """What the figures are and what limits them on this machine."""
    local, cluster = table.iloc[0], table.iloc[-1]
    gen = cluster.gen_M_tuples_per_s / local.gen_M_tuples_per_s
    qry = cluster.query_M_tuples_per_s / local.query_M_tuples_per_s
    rounds = (f"; between rounds the times varied by up to {table.spread.max():.0%}"
              if len(table) and table.spread.max() > 0 else "")
    return (
        f"The cluster ran at {gen:.2f}x local mode's generation rate and {qry:.2f}x its "
        f"{local.query} throughput{rounds} (load average up to {table.load.max():.1f} on "
        f"{os.cpu_count()} cores, other work included).  Both had the same {os.cpu_count()} "
        f"cores, so neither can scale here: both are bound by those cores - shared with "
        f"everything else on the machine - and, at {local.rows:,} rows, in part by Spark's "
        f"fixed costs per job and per micro-batch (planning, scheduling, state-store commits, "
        f"checkpoint files).  What differs is how the cores are used: local "
        f"mode runs the driver and {local.cores} task threads in one JVM (one heap, one "
        f"garbage collector); the cluster runs one task in each of {cluster.cores} executor "
        f"JVMs beside the driver's, a master and the workers, with shuffles and task results "
        f"crossing processes over loopback.  A cluster adds throughput with cores and machines "
        f"local mode does not have - what it is for; here it shows the same commands running "
        f"with the executors, not the driver, reading and writing every byte.")
