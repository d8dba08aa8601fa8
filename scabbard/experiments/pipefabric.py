"""Notebook 15 (a) / ``scabbard bench selection``: PipeFabric's Table 1 on this machine.

PipeFabric (Pohl, GvDB 2019, §6 and Table 1) runs one stream query that applies a selection
to every input tuple and forwards the tuples that satisfy it to an empty UDF; four predicates
on the tuple's key - ``true``, ``key mod 2``, ``key mod 10``, ``false`` - reach 720 M, 937 M,
1.16 B and 1.39 B tuples/s on 256 threads of a Xeon Phi: 1 : 1.30 : 1.61 : 1.93 from
``true`` to ``false`` (less forwarded, less work).

Here the same selection is a stateless query (``PF-TRUE`` ... ``PF-FALSE``,
:func:`scabbard.workloads.sg.pipefabric`) on the SG dataset, whose measurement id is the
key (consecutive numbers: exactly 100, 50, 10 and 0 % survive), replayed for ``seconds``
with its results dropped (a :class:`~scabbard.engine.NullSink`: the empty UDF), with 1 and 2
workers.  The four queries alternate round by round, and the median of the rounds is kept,
so a neighbour's load on this shared machine falls on all of them alike.

``run`` returns one tidy row per (query, workers, round), with the CPU each part of the engine
spent per input tuple (:mod:`scabbard.timers`); ``table1`` puts the medians beside the paper's
figures and ratios; ``parts`` shows where the time goes per selectivity - the selection's
kernel (``select``), the survivors' columns gathered and their positions written
(``gather``), the rest of the task (``fragment``), the ordered hand-over to the sink
(``assembly``), the dispatcher and everything else; ``plot`` draws both ratios.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from scabbard import queries, timers, workloads
from scabbard.engine import EngineConfig, NullSink, Replay, run_query
from scabbard.experiments import Common, finish, save_tables

# the engine's parts a selection goes through (:mod:`scabbard.timers`), and the rest
PARTS = ("select", "gather", "fragment", "assembly", "dispatch", "other")
# PipeFabric's Table 1: predicate, selectivity, tuples/s on 256 threads (Xeon Phi KNL 7210)
PAPER = {"PF-TRUE": ("true", 1.0, 720e6), "PF-MOD2": ("key mod(2)", 0.5, 937e6),
         "PF-MOD10": ("key mod(10)", 0.1, 1.16e9), "PF-FALSE": ("false", 0.0, 1.39e9)}


@dataclass(frozen=True)
class Settings(Common):
    queries: Sequence[str] = queries.TABLE1
    workers: Sequence[int] = (1, 2)
    seconds: float = 2.0
    rounds: int = 3
    output_dir: str = "."

    def __post_init__(self) -> None:
        object.__setattr__(self, "queries", tuple(q.upper() for q in self.queries))
        object.__setattr__(self, "workers", tuple(self.workers))
        bad = [q for q in self.queries if q not in PAPER]
        if bad:
            raise ValueError(f"{bad[0]!r} is not in PipeFabric's Table 1 (choose from "
                             f"{', '.join(PAPER)})")
        if not self.queries or not self.workers or min(self.workers) < 1:
            raise ValueError("name at least one query and one worker count (>= 1)")
        if self.seconds <= 0 or self.rounds < 1:
            raise ValueError("seconds must be positive and rounds at least 1")


def run(settings: Settings, log=print) -> pd.DataFrame:
    """Every query with every worker count, ``rounds`` times, interleaved; saved as
    ``table1_runs.csv`` and ``table1.csv`` in the output folder."""
    s = settings
    ds = workloads.dataset("sg", s.scale, root=str(s.data_dir))
    for name in s.queries:  # compiled code loaded and the data paged in, unmeasured
        run_query(queries.get(name), ds, NullSink(), EngineConfig(workers=1),
                  replay=Replay(duration=min(0.5, s.seconds)))
    rows = []
    for k in range(s.rounds):
        for w in s.workers:
            for name in s.queries:
                with timers.recording(timers.Totals()) as totals:
                    r = run_query(queries.get(name), ds, NullSink(), EngineConfig(workers=w),
                                  replay=Replay(duration=s.seconds))
                m = r.summary
                per = totals.per_tuple(m.tuples)
                rows.append({"query": name, "predicate": PAPER[name][0], "workers": w,
                             "round": k, "tuples": m.tuples, "result_rows": m.result_rows,
                             "tuples_per_s": m.tuples_per_s, "batch_rows": r.batch_rows,
                             "cpu_ns": totals.process_s / max(1, m.tuples) * 1e9,
                             **{f"ns_{p}": per[p] for p in PARTS}})
                log(f"round {k + 1}/{s.rounds}  {name:9s} {w} worker(s) "
                    f"{m.tuples_per_s / 1e6:9.1f} M tuples/s")
    runs = pd.DataFrame(rows)
    save_tables(s.output_dir, table1=table1(runs), table1_runs=runs)
    return runs


def table1(runs: pd.DataFrame) -> pd.DataFrame:
    """Per query: the paper's predicate, selectivity, tuples/s and ratio to ``true``, beside
    the selectivity measured here and, per worker count, the median tuples/s and its ratio
    to the first query's (``true``)."""
    names = list(dict.fromkeys(runs["query"]))
    out = pd.DataFrame({"query": names,
                        "predicate": [PAPER[n][0] for n in names],
                        "selectivity": [PAPER[n][1] for n in names]})
    kept = runs.groupby("query")[["result_rows", "tuples"]].sum()
    out["measured_selectivity"] = [kept.loc[n, "result_rows"] / kept.loc[n, "tuples"]
                                   for n in names]
    paper = np.array([PAPER[n][2] for n in names])
    out["paper_Mtps"] = paper / 1e6
    out["paper_ratio"] = paper / paper[0]
    medians = runs.groupby(["query", "workers"])["tuples_per_s"].median()
    for w in sorted(set(runs["workers"])):
        mtps = np.array([medians.get((n, w), np.nan) for n in names]) / 1e6
        out[f"{w}w_Mtps"] = mtps
        out[f"{w}w_ratio"] = mtps / mtps[0]
    return out


def parts(runs: pd.DataFrame) -> pd.DataFrame:
    """Per query and worker count, the medians of CPU ns per input tuple: the whole process
    (``CPU ns``) and its parts (see the module); ``fragment`` here is what the task does
    besides ``select`` and ``gather``, so the parts add up to ``CPU ns``."""
    g = runs.groupby(["query", "workers"], sort=False)
    out = g[["tuples_per_s", "cpu_ns", *[f"ns_{p}" for p in PARTS]]].median()
    out["ns_fragment"] -= out["ns_select"] + out["ns_gather"]
    out["tuples_per_s"] /= 1e6
    names = {"tuples_per_s": "M tuples/s", "cpu_ns": "CPU ns"} | {f"ns_{p}": p for p in PARTS}
    return out.rename(columns=names).reset_index()


def plot(runs: pd.DataFrame, output_dir: str | None = None):
    """Throughput relative to ``true``, per selectivity: the paper's and each worker count's."""
    import matplotlib.pyplot as plt

    t = table1(runs)
    series = [("PipeFabric, 256 threads (paper)", t["paper_ratio"])]
    series += [(f"here, {c.split('w_')[0]} worker(s)", t[c]) for c in t if c.endswith("w_ratio")]
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    x = np.arange(len(t))
    width = 0.8 / len(series)
    for k, (label, ratio) in enumerate(series):
        ax.bar(x + (k - (len(series) - 1) / 2) * width, ratio, width, label=label)
    ax.set_xticks(x, [f"{p}\n({s:.0%})" for p, s in zip(t["predicate"], t["selectivity"],
                                                        strict=True)])
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_ylabel("throughput / throughput of 'true'")
    ax.set_title("PipeFabric's Table 1: a selection per selectivity")
    ax.legend(fontsize=8)
    return finish(fig, output_dir, "table1.png")
