"""Notebook 14 / ``scabbard bench state-size``: the engine's throughput against the number of
distinct keys, per layout of its window state (after Grizzly's Fig. 11, SIGMOD 2020 §7.3.4).

Grizzly scales YSB's campaign ids from 1 to 10^7 and plots the throughput of each system as
its state grows; its §6.2.3 chooses between a table per thread and a shared one by the keys
profiled.  Here a synthetic stream (an 8-byte key drawn uniformly from ``keys``, a value),
counted and summed per key in 10 s tumbling windows (YSB's shape with the join taken out),
runs on the engine four ways, side by side (:mod:`scabbard.engine.layout`):

* ``per-task``: the task-parallel engine, every task's partials merged by the assembler
  (``--assembly serial``: Grizzly's table per thread);
* ``per-key``: the partitioned dataflow, each key's state in one partition a worker
  (``--assembly dataflow:W``: the keys held once, as in a shared table);
* ``auto``: the engine's default, which estimates a task's keys on the first tuples and picks
  one of the two (the row says which);
* ``adaptive``: ``per-task`` with Grizzly's adaptive kernels (a dense array over the keys'
  range where it holds them).

``rounds`` rounds, each starting one layout later; the median and the spread are kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from scabbard.experiments import Common, finish, save_tables

LAYOUTS = ("per-task", "per-key", "auto", "adaptive")
WINDOWS = 3  # the fewest windows' tuples a run reads
ROWS = {"tiny": 1 << 17}  # each dataset's tuples by scale (others: 8 M)


@dataclass(frozen=True)
class Settings(Common):
    key_counts: Sequence[int] = (1, 100, 10_000, 100_000, 1_000_000, 10_000_000)
    layouts: Sequence[str] = LAYOUTS
    rows: int | None = None  # the datasets' tuples, replayed (times shifted); None: ROWS
    rate: int = 1_000_000  # tuples per second of event time: 10 M tuples a window
    window_s: int = 10
    workers: int = 2
    seconds: float = 3.0
    rounds: int = 3
    output_dir: str = "."
    seed: int = 0
    zipf_s: float = 1.2  # (the datasets' names; the keys here are uniform)

    def __post_init__(self) -> None:
        for name in ("key_counts", "layouts"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.rows is None:
            object.__setattr__(self, "rows", ROWS.get(self.scale, 8_000_000))
        bad = [x for x in self.layouts if x not in LAYOUTS]
        if bad:
            raise ValueError(f"unknown layout {bad[0]!r} (choose from {', '.join(LAYOUTS)})")
        if min(self.key_counts, default=0) < 1 or min(self.rows, self.rate, self.window_s,
                                                       self.workers, self.rounds) < 1:
            raise ValueError("key counts, rows, rate, window_s, workers and rounds must be "
                             "positive")
        if self.seconds <= 0:
            raise ValueError(f"seconds must be positive, got {self.seconds}")


def config(layout: str, s: Settings):
    """The engine's configuration for ``layout``."""
    from scabbard.engine import EngineConfig
    from scabbard.engine.adaptive import AdaptivePolicy

    assembly = {"per-task": "serial", "per-key": f"dataflow:{s.workers}"}.get(layout, "auto")
    return EngineConfig(workers=s.workers, assembly=assembly,
                        adaptive=AdaptivePolicy() if layout == "adaptive" else None)


def _query(s: Settings):
    from scabbard.experiments.partitioned import SKEW_SCHEMA
    from scabbard.query import Query, count, sum_

    return (Query.stream(SKEW_SCHEMA, "skewed").window(s.window_s).group_by("key")
            .aggregate(count(), sum_("value")).named("KEYS"))


def run(settings: Settings, log=print) -> pd.DataFrame:
    """Every key count under every layout, ``rounds`` interleaved rounds: one row per run
    (the layout ``auto`` chose in ``chosen``); saved as ``runs.csv`` with ``summary.csv``.
    Each key count is measured in a process of its own: the memory a run of 10^7 keys leaves
    to the allocator would otherwise weigh on the next ones (one process for every count held
    18 GB by the last, and its runs spread 2-5 M tuples/s)."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    out = []
    for k in settings.key_counts:
        log(f"{k:>11,} keys: measuring in a process of its own ...")
        with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
            rows = pool.submit(measure, settings, k).result()
        for row in rows:
            log(f"{k:>11,} keys  {row['layout']:9s} round {row['round']}  "
                f"{row['tuples_per_s'] / 1e6:8.2f} M tuples/s"
                + (f"  ({row['chosen']})" if row["chosen"] else ""))
        out += rows
    runs = pd.DataFrame(out)
    save_tables(settings.output_dir, runs=runs, summary=summary(runs))
    return runs


def measure(s: Settings, k: int) -> list[dict]:
    """``k`` keys' rows of :func:`run`: every layout's kernels loaded (or compiled) by a run
    of its own first, then ``rounds`` rounds, each starting one layout later, every run over
    the same tuples."""
    from scabbard.engine import NullSink, Replay, run_query
    from scabbard.experiments.partitioned import skew_dataset

    q, out = _query(s), []
    ds = skew_dataset("uniform", SimpleNamespace(keys=k, rows=s.rows, rate=s.rate,
                                                zipf_s=s.zipf_s, seed=s.seed),
                      Path(s.data_dir) / "skewed")
    speed = min(run_query(q, ds, NullSink(), config(layout, s),
                          Replay(duration=min(1.0, s.seconds))).summary.tuples_per_s
                for layout in s.layouts)
    # each run ``seconds`` long at the slowest layout's speed, and WINDOWS windows at least: a
    # run shorter than a window (10^7 keys: 10 M tuples, 3 s) measures where its windows end
    replay = Replay(max_tuples=int(max(speed * s.seconds, WINDOWS * s.window_s * s.rate)))
    for r in range(s.rounds):
        for j in range(len(s.layouts)):
            layout = s.layouts[(j + r) % len(s.layouts)]
            starts: list[dict] = []
            rep = run_query(q, ds, NullSink(), config(layout, s), replay,
                            watch=[lambda line, st=starts: st.append(line)
                                   if line.get("event") == "start" else None])
            chosen = (starts[0].get("layout") or {}).get("chosen", "per-task") \
                if layout == "auto" and starts else ""
            out.append({"keys": k, "layout": layout, "round": r, "chosen": chosen,
                        "tuples_per_s": rep.summary.tuples_per_s,
                        "batch_rows": rep.batch_rows, "seconds": round(rep.summary.seconds, 3)})
    return out


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per key count: each layout's median M tuples/s (min-max), ``auto``'s choice, and the
    per-key over per-task."""
    g = runs.groupby(["keys", "layout"], sort=False)["tuples_per_s"]
    med = (g.median() / 1e6).unstack("layout")
    lo, hi = (g.min() / 1e6).unstack("layout"), (g.max() / 1e6).unstack("layout")
    out = pd.DataFrame(index=med.index)
    for layout in dict.fromkeys(runs["layout"]):
        out[f"{layout} M/s"] = med[layout].round(2)
        out[f"{layout} spread"] = [f"{a:.1f}-{b:.1f}" for a, b in zip(lo[layout], hi[layout],
                                                                     strict=True)]
    if "auto" in set(runs["layout"]):
        chosen = runs[runs["layout"] == "auto"].groupby("keys")["chosen"]
        out["auto chose"] = chosen.agg(lambda c: "/".join(sorted(set(c))))
    if {"per-task", "per-key"} <= set(runs["layout"]):
        out["per-key / per-task"] = (med["per-key"] / med["per-task"]).round(2)
    return out.reset_index()


def plot(runs: pd.DataFrame, output_dir: str | None = None):
    """Median throughput against the distinct keys (log-log), a line per layout, the runs'
    spread as a band."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for layout, g in runs.groupby("layout", sort=False):
        st = g.groupby("keys")["tuples_per_s"].agg(["median", "min", "max"]) / 1e6
        ax.plot(st.index, st["median"], "o-", label=layout)
        ax.fill_between(st.index, st["min"], st["max"], alpha=0.2)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("distinct keys")
    ax.set_ylabel("M tuples/s")
    ax.set_title("throughput against state size, per layout (after Grizzly's Fig. 11)")
    ax.legend(fontsize=8)
    return finish(fig, output_dir, "state_size.png")
