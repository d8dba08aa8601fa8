"""Notebook 12 (a) / ``scabbard bench incremental``: Table 4 with full, incremental and
eventual checkpoints side by side.

Per query, on the same data, one after the other:

* **no FT** - the query alone, results dropped (the baseline);
* per checkpoint mode (``full``, ``incremental``, ``eventual``: CEC's steps every 10 ms between
  the records, its overhead the excerpt's Fig. 5): the paper's *Scabbard-Chk* - the state
  checkpointed every ``interval`` seconds, input not persisted, results dropped - run flat out
  (throughput, its overhead over no FT, the checkpoint time, the state bytes written per
  second), then recovered in this process from its newest record: the state load time, and
  the storage opening (every stream's files scanned) with it;
* per checkpoint mode, **paced**: the input arrives at ``speedup`` times the dataset's own
  event rate (event seconds per wall second), with one window of it waiting at the start
  so that the windows are full at once; the state bytes written per second once the backlog
  was processed (the steady state: every checkpoint after it).

What incremental checkpoints save depends on how far event time moves between two
checkpoints: a full checkpoint writes every pane of the open windows (``range/slide``), an
incremental one the panes closed since the last (``speedup x interval / slide``), plus the
open pane and any state that is not panes (a join's).  Flat out, the engine moves event time
much faster than the window is long, so the two write about as much; paced near real time,
incremental writes a small fraction.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from scabbard import queries
from scabbard.engine import EngineConfig, NullSink, Replay, run_query
from scabbard.engine.runtime import Engine
from scabbard.engine.sources import ReplaySource
from scabbard.experiments import Common, finish, interleaved_runs, save_tables
from scabbard.experiments.checkpointing import PAPER
from scabbard.ft.modes import INTERVAL
from scabbard.ft.recovery import run_fault_tolerant
from scabbard.ft.sinks import DiscardSink
from scabbard.outputs import read_metrics

MODES = ("full", "incremental", "eventual")


@dataclass(frozen=True)
class Settings(Common):
    queries: Sequence[str] = field(default=queries.NAMES)
    seconds: float = 4.0  # wall seconds per run (paced: after the backlog)
    interval: float = INTERVAL  # checkpoint interval, seconds
    workers: int = 2
    rounds: int = 1
    speedup: float = 10.0  # paced runs: event seconds per wall second (0: no paced runs)
    storage_dir: str | None = None  # default: a scratch folder next to the data

    def __post_init__(self) -> None:
        if not (self.seconds > 0 and self.interval > 0 and self.speedup >= 0):
            raise ValueError("seconds and interval must be positive, speedup >= 0")


def window_s(query: str, ds) -> float:
    """The longest window of the query, in event seconds."""
    plan = Engine(queries.get(query), ds.tables, EngineConfig(workers=1)).plan
    return max(b.panes * b.slide_ms for b in plan.branches) / 1e3


def event_rate(ds) -> float:
    """The dataset's input tuples per event second."""
    return ReplaySource(ds, 1).tuples_per_ms() * 1e3


def backlogged(tuples: int):
    """A ``wrap_source`` whose input arrived ``tuples`` early: that much waits at the start
    (and waits for a recovery too), the rest comes at the source's rate."""
    def wrap(source):
        source.started_at = (source.started_at if source.started_at is not None
                             else time.time()) - tuples / source.rate
        return source
    return wrap


def steady(checkpoints: list, after: int) -> dict:
    """State bytes per second and panes per checkpoint over the records whose cut lies past
    input offset ``after`` (the first of them only marks the start)."""
    ck = [c for c in checkpoints if c.input_end > after]
    if len(ck) < 2:
        return {"bytes_per_s": float("nan"), "panes": float("nan")}
    span = ck[-1].completed - ck[0].completed
    return {"bytes_per_s": sum(c.bytes for c in ck[1:]) / max(span, 1e-9),
            "panes": float(np.mean([c.operator.get("written", {}).get("panes", 0)
                                    for c in ck[1:]]))}


def measure(query: str, mode: str, ds, folder: Path, settings: Settings) -> dict:
    """Flat out with ``mode`` checkpoints (Scabbard-Chk), then recovered from its newest record."""
    q, cfg = queries.get(query), EngineConfig(workers=settings.workers)
    if mode == "no_ft":
        rep = run_query(q, ds, NullSink(), cfg, replay=Replay(duration=settings.seconds))
        return {"tuples_per_s": rep.summary.tuples_per_s}
    shutil.rmtree(folder, ignore_errors=True)
    r = run_fault_tolerant(q, ds, folder / "storage", DiscardSink(folder / "output"), cfg,
                           interval=settings.interval, duration=settings.seconds,
                           persist_input=False, checkpoint_mode=mode)
    ck = r.checkpoints
    out = {"tuples_per_s": r.run.summary.tuples_per_s, "checkpoints": len(ck),
           "checkpoint_ms": float(np.mean([c.duration_s for c in ck])) * 1e3 if ck
           else float("nan"),
           "bytes_per_s": r.state_bytes_written / r.run.summary.seconds,
           "panes": float(np.mean([c.operator["written"]["panes"] for c in ck])) if ck
           else float("nan")}
    if ck:
        log = folder / "recovery.jsonl"
        back = run_fault_tolerant(q, ds, folder / "storage", DiscardSink(folder / "output"),
                                  cfg, interval=settings.interval, recover=True, duration=0.2,
                                  metrics_log=log)
        phase = read_metrics(log).query("event == 'phase'").set_index("phase")["wall"]
        out.update(load_ms=back.loaded.get("load_ms", float("nan")),
                   open_ms=(phase["state_loaded"] - phase.get("loading", phase["code_loaded"]))
                   * 1e3,
                   loaded_mb=back.loaded.get("bytes", 0) / 1e6)
    shutil.rmtree(folder, ignore_errors=True)
    return out


def measure_paced(query: str, mode: str, ds, folder: Path, settings: Settings,
                  flat_out: float) -> dict:
    """Paced at ``speedup`` x real time with a window of backlog (processed at about
    ``flat_out`` tuples/s, four times as long allowed): steady-state bytes/s over about
    ``seconds`` of input after it."""
    rate = settings.speedup * event_rate(ds)
    backlog = int(window_s(query, ds) * event_rate(ds))
    # several tasks per interval, but not so small that the backlog takes long
    batch = max(1024, int(rate * settings.interval / 8), backlog // 256)
    shutil.rmtree(folder, ignore_errors=True)
    r = run_fault_tolerant(queries.get(query), ds, folder / "storage",
                           DiscardSink(folder / "output"),
                           EngineConfig(workers=settings.workers, batch_rows=batch),
                           interval=settings.interval, rate=rate, persist_input=False,
                           max_tuples=backlog + int(rate * (settings.seconds + 2.0
                                                            + 4 * backlog / flat_out)),
                           checkpoint_mode=mode, wrap_source=backlogged(backlog))
    shutil.rmtree(folder, ignore_errors=True)
    got = steady(r.checkpoints, backlog)
    return {"paced_bytes_per_s": got["bytes_per_s"], "paced_panes": got["panes"]}


def run(settings: Settings, log=print) -> pd.DataFrame:
    """Every query: no FT and each mode flat out, each mode paced (``rounds`` times,
    interleaved); one row per run."""
    rows = []
    for q, ds, rnd, config, folder in interleaved_runs(settings, ("no_ft", *MODES),
                                                       "scabbard-incremental-"):
        m = measure(q, config, ds, folder, settings)
        if config != "no_ft" and settings.speedup:
            m.update(measure_paced(q, config, ds, folder.with_name(folder.name + "-paced"),
                                   settings, m["tuples_per_s"]))
        rows.append({"query": q, "config": config, "round": rnd, **m})
        log(_line(q, config, m))
    return pd.DataFrame(rows)


def _line(q: str, config: str, m: dict) -> str:
    line = f"{q:5} {config:12} {m['tuples_per_s'] / 1e6:8.2f} M tuples/s"
    if config != "no_ft":
        line += (f"  state {m['bytes_per_s'] / 1e6:8.3f} MB/s, {m['panes']:7.1f} panes, "
                 f"avg {m['checkpoint_ms']:6.1f} ms, load {m.get('load_ms', float('nan')):6.1f} ms")
        if "paced_bytes_per_s" in m:
            line += (f"  | paced {m['paced_bytes_per_s'] / 1e6:8.4f} MB/s, "
                     f"{m['paced_panes']:7.1f} panes")
    return line


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per query: the modes side by side, the ratios, the paper's Table 4."""
    med = runs.groupby(["query", "config"], sort=False).median(numeric_only=True)
    tput = med["tuples_per_s"].unstack("config")
    out = pd.DataFrame({"no FT M tuples/s": tput["no_ft"] / 1e6})
    for mode in MODES:
        m = med.xs(mode, level="config")
        out[f"{mode} overhead"] = 1 - tput[mode] / tput["no_ft"]
        out[f"{mode} checkpoint ms"] = m["checkpoint_ms"]
        out[f"{mode} MB/s"] = m["bytes_per_s"] / 1e6
        out[f"{mode} panes/checkpoint"] = m["panes"]
        out[f"{mode} load ms"] = m.get("load_ms")
        out[f"{mode} open+load ms"] = m.get("open_ms")
        if "paced_bytes_per_s" in m:
            out[f"{mode} paced MB/s"] = m["paced_bytes_per_s"] / 1e6
    out["written full/incremental"] = out["full MB/s"] / out["incremental MB/s"]
    if "full paced MB/s" in out:
        out["paced full/incremental"] = out["full paced MB/s"] / out["incremental paced MB/s"]
    out = out.reset_index().merge(PAPER, on="query", how="left")
    return out.rename(columns={"paper_state_mb": "paper state MB",
                               "paper_checkpoint_ms": "paper checkpoint ms",
                               "paper_overhead": "paper overhead"})


def headline(table: pd.DataFrame, speedup: float | None = None) -> str:
    line = (f"median throughput overhead at {len(table)} queries: full "
            f"{table['full overhead'].median():.1%}, incremental "
            f"{table['incremental overhead'].median():.1%} (target <= 5%), eventual "
            f"{table['eventual overhead'].median():.1%}; state written "
            f"full/incremental flat out: median {table['written full/incremental'].median():.1f}x")
    if "paced full/incremental" in table:
        line += (f"; paced at {speedup or '?'}x real time: median "
                 f"{table['paced full/incremental'].median():.1f}x (target >= 10x on SG1, LRB1)")
    return line


def save(runs: pd.DataFrame, output_dir: str | Path) -> Path:
    return save_tables(output_dir, results=summary(runs), runs=runs)


def plot(table: pd.DataFrame, output_dir: str | None = None):
    """State bytes written per second (flat out, paced) and throughput overhead per query."""
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 4))
    x = np.arange(len(table))
    cols = [c for c in (*[f"{m} MB/s" for m in MODES], *[f"{m} paced MB/s" for m in MODES])
            if c in table]
    w = 0.8 / len(cols)
    for i, col in enumerate(cols):
        ax.bar(x + (i - (len(cols) - 1) / 2) * w, table[col], w, label=col.replace(" MB/s", ""))
    ax.set_yscale("log")
    ax.set_xticks(x, table["query"])
    ax.set_ylabel("state MB written per second")
    ax.set_title("State written per checkpoint mode")
    ax.legend(fontsize=8)
    w = 0.8 / len(MODES)
    for i, mode in enumerate(MODES):
        bx.bar(x + (i - (len(MODES) - 1) / 2) * w, 100 * table[f"{mode} overhead"], w,
               label=mode)
    bx.scatter(x, 100 * table["paper overhead"], marker="x", color="k", label="paper (full)")
    bx.axhline(5, color="grey", lw=0.8, ls="--")
    bx.set_xticks(x, table["query"])
    bx.set_ylabel("throughput overhead %")
    bx.set_title("Checkpoint overhead (Scabbard-Chk, flat out; eventual: CEC's Fig. 5)")
    bx.legend(fontsize=8)
    return finish(fig, output_dir, "incremental_checkpoints.png")


def bench(settings: Settings, out: Path, log=print) -> int:
    """``scabbard bench incremental``: the modes side by side, the ratios, the tables and
    figure in ``out``."""
    runs = run(settings, log=log)
    table = summary(runs)
    log("\n" + table.round(3).set_index("query").T.to_string())
    log(headline(table, settings.speedup))
    csv = save(runs, out)
    plot(table, out)
    log(f"\nresults: {csv}, figure: {Path(out) / 'incremental_checkpoints.png'}")
    return 0
