"""Notebook 15 (c) / ``scabbard bench interquery``: PipeFabric's Fig. 7 on this machine.

PipeFabric (Pohl, GvDB 2019, §6.2 and Fig. 7) runs one query per thread, each on its own
copy of the input (the selection ``false``: nothing forwarded), and the total throughput
grows almost linearly with the threads - 8 to 256 on a 64-core Xeon Phi, to 1.3 billion
tuples/s.

Here ``n`` copies of the same query run at once in one process, each with its own source
over the same dataset, its own dispatcher, assembly and sink (results dropped), in two ways:

* ``separate`` - PipeFabric's: each query on an engine of its own with one worker thread (n
  queries: n workers);
* ``shared`` - one engine's ``shared_workers`` worker threads run every query's tasks
  (:mod:`scabbard.engine.shared`): the threads stay as many as the cores whatever n.

Both run for ``seconds``; the counts and the two ways alternate round by round and the median
of the rounds is kept.  ``run`` returns one row per (way, queries, round): the total tuples a
second of all the queries and the slowest and fastest query's; ``summary`` the medians and
the scaling against one query; ``plot`` draws total throughput against the number of queries.
On this 2-core machine the total can grow up to two queries and is flat after - the paper's
line, cut at the cores.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from scabbard import queries, workloads
from scabbard.engine import EngineConfig, NullSink, Replay, run_query
from scabbard.engine.shared import Together, at_once, run_together
from scabbard.experiments import Common, finish, save_tables

WAYS = ("separate", "shared")


@dataclass(frozen=True)
class Settings(Common):
    query: str = "PF-FALSE"
    counts: Sequence[int] = (1, 2, 4, 8)
    shared_workers: int = 2
    seconds: float = 2.0
    rounds: int = 3
    output_dir: str = "."

    def __post_init__(self) -> None:
        object.__setattr__(self, "query", self.query.upper())
        object.__setattr__(self, "counts", tuple(self.counts))
        queries.get(self.query)  # an unknown query fails here, before any run
        if not self.counts or min(self.counts) < 1 or self.shared_workers < 1:
            raise ValueError("counts and shared_workers must be at least 1")
        if self.seconds <= 0 or self.rounds < 1:
            raise ValueError("seconds must be positive and rounds at least 1")


def _separate(name: str, ds, n: int, seconds: float) -> list:
    """``n`` engines of one worker each, at once; their reports."""
    def one():
        return run_query(queries.get(name), ds, NullSink(), EngineConfig(workers=1),
                         replay=Replay(duration=seconds))
    return at_once([one] * n)


def run(settings: Settings, log=print) -> pd.DataFrame:
    """Every count of queries both ways, ``rounds`` times, interleaved; saved as
    ``interquery_runs.csv`` and ``interquery.csv`` in the output folder."""
    s = settings
    ds = workloads.dataset(queries.workload_of(s.query), s.scale, root=str(s.data_dir))
    run_query(queries.get(s.query), ds, NullSink(), EngineConfig(workers=1),
              Replay(duration=min(0.5, s.seconds)))  # code loaded and data paged in, unmeasured
    rows = []
    for k in range(s.rounds):
        for n in s.counts:
            for way in WAYS:
                t0 = time.perf_counter()
                if way == "shared":
                    reports = run_together([Together(queries.get(s.query), ds)] * n,
                                           s.shared_workers, duration=s.seconds)
                else:
                    reports = _separate(s.query, ds, n, s.seconds)
                wall = time.perf_counter() - t0
                each = [r.summary.tuples_per_s for r in reports]
                tuples = sum(r.summary.tuples for r in reports)
                seconds = max(r.summary.seconds for r in reports)
                rows.append({"way": way, "queries": n, "round": k, "tuples": tuples,
                             "tuples_per_s": tuples / seconds, "slowest": min(each),
                             "fastest": max(each), "wall_s": wall,
                             "threads": s.shared_workers if way == "shared" else n})
                log(f"round {k + 1}/{s.rounds}  {n} x {s.query} {way:8s} "
                    f"{tuples / seconds / 1e6:9.1f} M tuples/s in all")
    runs = pd.DataFrame(rows)
    save_tables(s.output_dir, interquery=summary(runs), interquery_runs=runs)
    return runs


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per way and number of queries: the medians of the rounds - total M tuples/s, the
    slowest and fastest query's - and the total against the fewest queries' the same way."""
    g = runs.groupby(["way", "queries"], sort=False)
    out = g[["tuples_per_s", "slowest", "fastest"]].median() / 1e6
    out.columns = ["total_Mtps", "slowest_Mtps", "fastest_Mtps"]
    out["spread_Mtps"] = (g["tuples_per_s"].max() - g["tuples_per_s"].min()) / 1e6
    out = out.reset_index().sort_values(["way", "queries"], kind="stable", ignore_index=True)
    fewest = out.groupby("way")["total_Mtps"].transform("first")
    out["scaling"] = out["total_Mtps"] / fewest
    return out


def plot(runs: pd.DataFrame, output_dir: str | None = None):
    """Total throughput against the number of queries, each way (medians, the rounds'
    range as a band)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for way, g in runs.groupby("way", sort=False):
        by = g.groupby("queries")["tuples_per_s"]
        n = np.array(sorted(g["queries"].unique()))
        ax.plot(n, by.median().loc[n] / 1e6, "o-", label=way)
        ax.fill_between(n, by.min().loc[n] / 1e6, by.max().loc[n] / 1e6, alpha=0.2)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("queries at once")
    ax.set_ylabel("total M tuples/s")
    ax.set_ylim(bottom=0)
    ax.set_title("PipeFabric's Fig. 7: inter-query parallelism (after the paper's)")
    ax.legend(fontsize=8)
    return finish(fig, output_dir, "interquery.png")
