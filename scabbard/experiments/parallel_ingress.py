"""Notebook 15, parallel ingress: the memory-bound queries on 1 to 16 simulated cores
with fault tolerance, the source read by the dispatcher vs by several ingress partitions.

With one ingress partition one thread - the dispatcher - reads the source (the replay's
timestamps shifted, a pass over every tuple), appends every batch to the ingress p-stream and
hands every task out; on 16 cores the queries whose tasks are cheap wait for it.  With N
partitions (``scabbard run --ingress-partitions N``; the engine's default is one per 4 workers)
each partition cuts its share of the batches and appends them in its turn, and the dispatcher
only hands tasks out.  The calibrated simulator (:mod:`scabbard.sim`, costs measured here by
``scabbard sim calibrate``: the dispatcher's thread, the partitions', their turns) on the
paper's server: for each run the throughput and what holds it - a serial stage whose thread
is busy all the time, the disk, or the cores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pandas as pd

from scabbard.experiments import simulated_cores_figure
from scabbard.ft.modes import INTERVAL

# the queries whose tasks cost a few tens of ns a tuple and whose windows need no serial
# assembly to speak of: their throughput on many cores is the ingress's and the disk's
MEMORY_BOUND = ("CM1", "CM2", "SG1", "LRB1", "YSB", "SM")
HELD = 0.95  # a stage busy this share of the time (of its thread, or the disk) holds the run


def default_partitions(cores: int) -> int:
    """The engine's default: one ingress partition per ``INGRESS_WORKERS`` workers."""
    from scabbard.engine.runtime import INGRESS_WORKERS

    return max(1, cores // INGRESS_WORKERS)


def held_by(result) -> str:
    """What holds a simulated run: its busiest serial stage if that stage's thread never
    rests, else the disk if it never rests, else the cores if they are nearly all busy, else
    nothing (the input)."""
    stages = result.serial_stages()
    stage, busy = max(stages.items(), key=lambda kv: kv[1])
    if busy >= HELD:
        return stage
    if result.utilisation["disk"] >= HELD:
        return "disk"
    if result.utilisation["cores"] >= 0.9:
        return "cores"
    return "input"


def simulated(calibration: str | Path | None, names: Sequence[str] = MEMORY_BOUND,
              cores: Sequence[int] = (1, 2, 4, 8, 16), seconds: float = 10.0,
              interval: float = INTERVAL, partitions: int | None = None) -> pd.DataFrame:
    """Per query and core count on the paper's server (its SSD), fault tolerance on (the input
    persisted as Scabbard persists it, checkpoints every ``interval``): one ingress partition
    and ``partitions`` of them (None: the engine's default for that many workers; skipped
    where it is one).  One row per run: throughput, what holds it, each serial stage's
    share of its thread."""
    from scabbard.experiments.simulated import default_calibration
    from scabbard.sim import PAPER_SSD, SimConfig, simulate
    from scabbard.sim import load as load_calibration

    cal = load_calibration(calibration or default_calibration())
    rows = []
    for q in [n.upper() for n in names if n.upper() in cal.queries]:
        scheme = cal.costs(q).best_scheme
        for n in cores:
            many = partitions or default_partitions(n)
            for parts in dict.fromkeys((1, many)):
                cfg = SimConfig(q, workers=n, persist=True, compression=scheme,
                                checkpoint_interval=interval, duration=seconds,
                                ingress_partitions=parts)
                r = simulate(cal, cfg, replace(PAPER_SSD, cores=n))
                rows.append({"query": q, "cores": n, "ingress_partitions": parts,
                             "tuples_per_s": r.steady_tuples_per_s or r.summary.tuples_per_s,
                             "held_by": held_by(r), "disk_busy": r.utilisation["disk"],
                             **{f"{k}_busy": v for k, v in r.serial_stages().items()}})
    return pd.DataFrame(rows)


def at_cores(table: pd.DataFrame, cores: int = 16, target: float = 400e6) -> pd.DataFrame:
    """The table at ``cores``: per query, one ingress partition against several, what holds
    each, and whether it reaches ``target`` tuples/s."""
    sel = table[table["cores"] == cores]
    out = []
    for q, g in sel.groupby("query", sort=False):
        one, many = g.iloc[0], g.iloc[-1]
        n = int(many["ingress_partitions"])
        out.append({"query": q, "M tuples/s, 1 partition": one["tuples_per_s"] / 1e6,
                    "held by (1)": one["held_by"],
                    f"M tuples/s, {n} partitions": many["tuples_per_s"] / 1e6,
                    f"held by ({n})": many["held_by"],
                    "gain": many["tuples_per_s"] / one["tuples_per_s"],
                    f">= {target / 1e6:.0f} M": many["tuples_per_s"] >= target})
    return pd.DataFrame(out)


def plot_simulated(table: pd.DataFrame, output_dir: str | None = None):
    """Simulated throughput against cores per query: one ingress partition (dashed) and the
    engine's default number of them (solid)."""

    def draw(ax):
        for k, (q, g) in enumerate(table.groupby("query", sort=False)):
            one = g[g["ingress_partitions"] == 1]
            many = g.groupby("cores", sort=True).last().reset_index()
            color = f"C{k % 10}"
            ax.plot(one["cores"], one["tuples_per_s"] / 1e6, "--", color=color, marker="o")
            ax.plot(many["cores"], many["tuples_per_s"] / 1e6, "-", color=color, marker="o",
                    label=q)

    return simulated_cores_figure(output_dir, "parallel_ingress_simulated.png",
                                  "One ingress partition (dashed) vs one per 4 cores (solid)", draw)
