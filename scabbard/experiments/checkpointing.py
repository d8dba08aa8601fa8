"""Notebook 03 / ``scabbard bench checkpoints``: what checkpointing costs (paper Table 4).

Per query, in one run and on the same data, three configurations back to back:

* **no FT** - the query alone, input in memory, results discarded;
* **checkpoints** (the paper's *Scabbard-Chk*) - the operator state checkpointed every
  ``interval`` seconds, asynchronously, into state p-units; the input is not persisted
  (the source can replay it) and results are dropped, as in the no-FT run, so the
  difference is what checkpointing costs;
* **full FT** - everything recovery in notebook 04 relies on: checkpoints, the ingress
  p-stream persisted, results stored with their clock (the clocked exactly-once sink),
  twice: with ``process`` durability (survives the engine being killed: nothing is
  flushed) and with ``machine`` durability, the default (survives power loss: every write
  a record or an acknowledgement depends on is flushed first - ``fdatasync`` after each
  group-commit write, directories fsynced).  Their ratio is what surviving power loss costs.

Reported: throughput of each, the overhead of checkpoints and of full FT over no FT,
the average state size and checkpoint time (marker at dispatch -> record durable), and
the paper's Table 4 beside them.  ``rounds`` > 1 interleaves the configurations and
keeps the median, which damps the noise of a 2-core machine; an unmeasured run first pages
the dataset in and loads the compiled code.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from scabbard import queries
from scabbard.engine import EngineConfig, NullSink, run_query
from scabbard.experiments import default_data_dir, finish, interleaved_runs, save_tables
from scabbard.ft.recovery import run_fault_tolerant
from scabbard.ft.sinks import ClockedSink, DiscardSink

CONFIGS = ("no_ft", "checkpoints", "full_ft_process", "full_ft")

# Table 4 of the paper (16 cores, 1 s interval, Scabbard-Chk): state MB, avg checkpoint ms,
# throughput overhead.  SM is not in the paper's table.
PAPER = pd.DataFrame(
    [("CM1", 18, 25.7, 0.04), ("CM2", 10, 44.3, 0.09), ("SG1", 2, 89.6, 0.01),
     ("SG2", 41, 68.6, 0.07), ("SG3", 115, 103.6, 0.02), ("LRB1", 114, 122.7, 0.05),
     ("LRB2", 105, 168.6, 0.14), ("LRB3", 143, 361.0, 0.01), ("YSB", 23, 23.1, 0.06),
     ("NQ", 27, 49.1, 0.04)],
    columns=["query", "paper_state_mb", "paper_checkpoint_ms", "paper_overhead"])


@dataclass(frozen=True)
class Settings:
    queries: Sequence[str] = field(default=queries.NAMES)
    scale: str = "small"
    data_dir: str = field(default_factory=default_data_dir)
    seconds: float = 5.0  # wall seconds per configuration
    interval: float = 1.0  # checkpoint interval
    workers: int = 2
    rounds: int = 1
    storage_dir: str | None = None  # default: a scratch folder next to the data


def measure(query: str, config: str, ds, folder: Path, settings: Settings) -> dict:
    """One run of ``query`` in ``config``; its throughput and checkpoints."""
    q = queries.get(query)
    cfg = EngineConfig(workers=settings.workers)
    if config == "no_ft":
        rep = run_query(q, ds, NullSink(), cfg, duration=settings.seconds)
        return {"tuples_per_s": rep.summary.tuples_per_s, "checkpoints": 0}
    shutil.rmtree(folder, ignore_errors=True)
    full = config.startswith("full_ft")
    sink = ClockedSink(folder / "output") if full else DiscardSink(folder / "output")
    r = run_fault_tolerant(q, ds, folder / "storage", sink, cfg,
                           interval=settings.interval, duration=settings.seconds,
                           persist_input=full,
                           durability="process" if config == "full_ft_process" else "machine")
    shutil.rmtree(folder, ignore_errors=True)
    ck = r.checkpoints
    return {"tuples_per_s": r.run.summary.tuples_per_s, "checkpoints": len(ck),
            "state_mb": float(np.mean([c.bytes for c in ck])) / 1e6 if ck else float("nan"),
            "checkpoint_ms": float(np.mean([c.duration_s for c in ck])) * 1e3 if ck
            else float("nan")}


def run(settings: Settings, log=print) -> pd.DataFrame:
    """Every query in every configuration (``rounds`` times, interleaved): one row per run."""
    rows = []
    for q, ds, rnd, config, folder in interleaved_runs(settings, CONFIGS, "scabbard-checkpoints-"):
        m = measure(q, config, ds, folder, settings)
        rows.append({"query": q, "config": config, "round": rnd, **m})
        extra = (f"  {m['checkpoints']} checkpoints, state {m['state_mb']:.2f} MB, "
                 f"avg {m['checkpoint_ms']:.1f} ms" if m["checkpoints"] else "")
        log(f"{q:5} {config:12} {m['tuples_per_s'] / 1e6:8.2f} M tuples/s{extra}")
    return pd.DataFrame(rows)


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Table 4 on this machine, one row per query, the paper's figures beside."""
    med = runs.groupby(["query", "config"], sort=False).median(numeric_only=True)
    tput = med["tuples_per_s"].unstack("config")
    chk = med.xs("checkpoints", level="config")
    out = pd.DataFrame({
        "no FT M tuples/s": tput["no_ft"] / 1e6,
        "checkpoints M tuples/s": tput["checkpoints"] / 1e6,
        "checkpoint overhead": 1 - tput["checkpoints"] / tput["no_ft"],
        "full FT M tuples/s": tput["full_ft"] / 1e6,
        "full FT overhead": 1 - tput["full_ft"] / tput["no_ft"],
        "full FT process M tuples/s": tput["full_ft_process"] / 1e6,
        "machine durability cost": 1 - tput["full_ft"] / tput["full_ft_process"],
        "full FT checkpoint ms (process)":
            med.xs("full_ft_process", level="config")["checkpoint_ms"],
        "full FT checkpoint ms (machine)": med.xs("full_ft", level="config")["checkpoint_ms"],
        "state MB": chk["state_mb"],
        "checkpoint ms": chk["checkpoint_ms"],
        "checkpoints": chk["checkpoints"],
    }).reset_index()
    out = out.merge(PAPER, on="query", how="left")
    return out.rename(columns={"paper_state_mb": "paper state MB",
                               "paper_checkpoint_ms": "paper checkpoint ms",
                               "paper_overhead": "paper overhead"})


def headline(table: pd.DataFrame) -> str:
    """The target line: median checkpoint overhead across the queries (target <= 15%)."""
    med = table["checkpoint overhead"].median()
    return (f"median checkpoint overhead across {len(table)} queries: {med:.1%} "
            f"(target <= 15%; paper 1-14%); median full-FT overhead "
            f"{table['full FT overhead'].median():.1%}; machine durability (flushed) costs "
            f"{table['machine durability cost'].median():.1%} of full-FT throughput over "
            f"process durability (median)")


def save(runs: pd.DataFrame, output_dir: str | Path) -> Path:
    return save_tables(output_dir, results=summary(runs), runs=runs)


def plot(table: pd.DataFrame, output_dir: str | None = None):
    """Throughput per configuration, and checkpoint time against state size (ours, paper's)."""
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 4))
    x = np.arange(len(table))
    w = 0.2
    bars = [("no FT M tuples/s", "no FT"),
            ("checkpoints M tuples/s", "checkpoints every interval"),
            ("full FT process M tuples/s", "+ persisted input, process durability"),
            ("full FT M tuples/s", "+ persisted input, machine durability")]
    for i, (col, label) in enumerate(bars):
        ax.bar(x + (i - 1.5) * w, table[col], w, label=label)
    for xi, ov in zip(x, table["checkpoint overhead"], strict=True):
        ax.annotate(f"{-ov:+.0%}", (xi, table["no FT M tuples/s"].iloc[xi]), ha="center", va="bottom",
                    fontsize=7)
    ax.set_yscale("log")
    ax.set_xticks(x, table["query"])
    ax.set_ylabel("M tuples/s")
    ax.set_title("Throughput; label: change with checkpoints")
    ax.legend(fontsize=8)
    bx.scatter(table["state MB"], table["checkpoint ms"], label="this machine")
    bx.scatter(table["paper state MB"], table["paper checkpoint ms"], marker="x",
               label="paper (16 cores, SSD)")
    for _, r in table.iterrows():
        bx.annotate(r["query"], (r["state MB"], r["checkpoint ms"]), fontsize=7)
    bx.set_xscale("symlog", linthresh=1)
    bx.set_xlabel("state per checkpoint (MB)")
    bx.set_ylabel("avg checkpoint time (ms)")
    bx.set_title("Checkpoint time vs state size")
    bx.legend(fontsize=8)
    return finish(fig, output_dir, "checkpointing.png", dpi=120)
