"""Notebook 12 (b): CEC's trade-off - the checkpoint period against response and recovery time.

The seed (continuous eventual checkpointing, CEC) sweeps its checkpoint period
CP from 25 to 250 ms with a step every CI = 10 ms on an aggregate over long windows, and
reports the operator's response time (native, without checkpoints: 16.5; CP 100 ms: 18.5;
50 ms: 21.5; 25 ms: 32.5 - in the excerpt's units; CP 250 ms close to native) and that a
longer CP means a longer extent to replay and load (EC-load estimated 2 s at CP 25 ms to
5 s at 250 ms).  Here the same sweep with ``--checkpoint-mode eventual`` (steps every CI
save closed panes, a record - the cut recovery resumes from - every CP), on a long-window
query with full fault tolerance (persisted input, clocked exactly-once output, machine
durability):

* the input comes at ``speedup`` x the dataset's event rate; response time is the result
  latency (a tuple's arrival to its window's result), the median over the metrics samples
  once the first window is full (``range / speedup`` wall seconds in);
* **native** (CEC's baseline: the operator without checkpoints): the same fault-tolerant
  engine, its input persisted and its output through the clocked exactly-once sink, with no
  checkpoint - so the sweep isolates what the checkpoint period costs; **no FT**, the engine
  without persistence or the exactly-once sink, is beside it for scale;
* each run stops mid-stream, half a period after a record was due, and is recovered in this
  process: the state loaded (bytes, ms), the input replayed (tuples, MB) and the recovery
  time (the start of the recovery to the last replayed task assembled);
* the same against U (``max_replay_tuples``) and against Q (``max_unsaved_panes``), both at
  the longest CP with CI as long, so that the bound, not the clock, brings the records (U)
  and the steps (Q): where the window is the query's only state, a recovery resumes from the
  newest step after the record (:mod:`scabbard.ft.steppoints`), so what it replays follows
  how often the steps come;
* what a recovery reads after its record to find that step is CEC's **extent** (rows of the
  window's state stream: pane units and the steps' open parts) and **EC-load** is the state
  load and that scan; with the steps the run wrote (CEC's checkpoint tuples produced) and the
  input replayed, these are the four metrics of the excerpt's Figs. 6 (Q) and 7 (U), and the
  extent against CP is its Fig. 9;
* every run ``rounds`` times, the rounds interleaved; the tables keep the medians, the figure
  draws the range.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from scabbard import queries
from scabbard.engine import EngineConfig, NullSink, Replay, run_query
from scabbard.engine.metrics import samples_to
from scabbard.engine.sources import ReplaySource
from scabbard.experiments import (
    Common,
    finish,
    prepared_dataset,
    save_tables,
    scratch,
)
from scabbard.experiments.incremental import event_rate, window_s
from scabbard.ft.recovery import run_fault_tolerant
from scabbard.ft.sinks import ClockedSink
from scabbard.outputs import read_metrics

# the excerpt's Fig. 8 (operator response time per CP, CI = 10 ms; 250 ms "approximates"
# native) and its estimate of EC-load time from its Q and U experiments
PAPER = pd.DataFrame({"period_ms": [np.nan, 25, 50, 100, 250],
                      "paper_response": [16.5, 32.5, 21.5, 18.5, 16.5]})
PAPER_LOAD_S = {25: 2.0, 250: 5.0}


@dataclass(frozen=True)
class Settings(Common):
    query: str = "LRB1"
    periods_ms: Sequence[float] = field(default=(25, 50, 100, 250, 1000))  # CP
    step_ms: float = 10.0  # CI
    replay_bounds: Sequence[int] = field(default=(10_000, 50_000, 200_000))  # U, at max CP
    # Q, at the longest CP with CI as long: the steps (and the points a recovery resumes
    # from, ft/steppoints.py) then come when more than Q closed panes wait
    unsaved_bounds: Sequence[int] = field(default=(1, 8, 64))
    speedup: float = 100.0  # event seconds per wall second
    seconds: float = 4.0  # wall seconds measured, once the first window is full
    task_ms: float = 10.0  # input per task, wall ms at the rate (markers go with tasks)
    workers: int = 2
    storage_dir: str | None = None
    rounds: int = 3

    def __post_init__(self) -> None:
        if not (self.step_ms > 0 and self.speedup > 0 and self.seconds > 0
                and self.task_ms > 0 and all(p > 0 for p in self.periods_ms)):
            raise ValueError("periods, step, speedup, seconds and task_ms must be positive")
        if self.rounds < 1 or not all(b > 0 for b in (*self.replay_bounds,
                                                       *self.unsaved_bounds)):
            raise ValueError("rounds, U and Q must be at least 1")


@dataclass(frozen=True)
class Pace:
    """The input: its rate, tuples per task, wall seconds until the first window is full."""

    rate: float
    batch: int
    fill: float


def _samples() -> tuple[list, tuple]:
    """The metrics samples of a run, and the watchers that collect them."""
    got: list = []
    return got, (samples_to(got.append),)


def response(samples: list, after: float) -> dict:
    """Median over the metrics samples after ``after`` s of their latency percentiles."""
    s = [x for x in samples if x["t"] >= after and x["tuples_per_s"] > 0]
    out = {f"{p}_ms": float(np.nanmedian([x["latency_ms"][p] for x in s])) if s
           else float("nan") for p in ("p50", "p95")}
    out["tuples_per_s"] = float(np.median([x["tuples_per_s"] for x in s])) if s else 0.0
    return out


def no_ft(query: str, ds, pace: Pace, settings: Settings) -> dict:
    """No fault tolerance (nothing persisted, results dropped), the same input."""
    samples, on = _samples()
    src = ReplaySource(ds, pace.batch, Replay(rate=pace.rate, duration=pace.fill + settings.seconds))
    run_query(queries.get(query), ds, NullSink(), _config(settings, pace), watch=on,
              source=src)
    return {"sweep": "no FT", **response(samples, pace.fill)}


def native(query: str, ds, folder: Path, pace: Pace, settings: Settings) -> dict:
    """CEC's native: the fault-tolerant engine as the sweep runs it - input persisted,
    results through the clocked sink - with no checkpoint, the same input."""
    shutil.rmtree(folder, ignore_errors=True)
    samples, on = _samples()
    r = run_fault_tolerant(queries.get(query), ds, folder / "storage",
                           ClockedSink(folder / "output"), _config(settings, pace),
                           interval=None, rate=pace.rate, duration=pace.fill + settings.seconds,
                           watch=on)
    shutil.rmtree(folder, ignore_errors=True)
    return {"sweep": "native", **response(samples, pace.fill), "records": len(r.checkpoints)}


def _config(settings: Settings, pace: Pace) -> EngineConfig:
    return EngineConfig(workers=settings.workers, batch_rows=pace.batch, metrics_interval=0.1)


def measure(query: str, ds, folder: Path, pace: Pace, settings: Settings, period_ms: float,
            bound: int | None, unsaved: int | None = None) -> dict:
    """One eventual run, stopped mid-stream, then recovered here.  ``bound``: U; ``unsaved``:
    Q; either with CI as long as CP (the records come when U says, the steps when Q does)."""
    shutil.rmtree(folder, ignore_errors=True)
    q, cfg = queries.get(query), _config(settings, pace)
    samples, on = _samples()
    kw = {"max_replay_tuples": bound} if bound else {}
    if unsaved:
        kw["max_unsaved_panes"] = unsaved
    r = run_fault_tolerant(q, ds, folder / "storage", ClockedSink(folder / "output"), cfg,
                           interval=period_ms / 1e3, rate=pace.rate,  # stopped mid-period:
                           duration=pace.fill + settings.seconds + period_ms / 2e3,
                           checkpoint_mode="eventual",
                           step_ms=period_ms if unsaved or bound else settings.step_ms,
                           watch=on, **kw)
    row = {"period_ms": period_ms, "max_replay_tuples": bound, "max_unsaved_panes": unsaved,
           **response(samples, pace.fill), "records": len(r.checkpoints), "steps": r.steps,
           "state_mb_per_s": r.state_bytes_written / r.run.summary.seconds / 1e6}
    log = folder / "recovery.jsonl"
    back = run_fault_tolerant(q, ds, folder / "storage", ClockedSink(folder / "output"), cfg,
                              interval=period_ms / 1e3, recover=True, duration=0.5,
                              metrics_log=log, **kw)
    got = back.loaded
    row.update(load_ms=got.get("load_ms"), state_mb=got.get("bytes", 0) / 1e6,
               scan_ms=got.get("scan_ms", 0.0), extent_rows=got.get("extent_rows", 0),
               extent_mb=got.get("extent_bytes", 0) / 1e6,
               ec_load_ms=(got.get("load_ms") or 0.0) + got.get("scan_ms", 0.0),
               from_step=back.loaded.get("step") is not None,
               replay_tuples=back.loaded.get("replay_tuples"),
               replay_mb=(back.loaded.get("replay_tuples") or 0) * ds.schema.row_bytes / 1e6,
               recovery_ms=recovery_ms(read_metrics(log)))
    shutil.rmtree(folder, ignore_errors=True)
    return row


def recovery_ms(events: pd.DataFrame) -> float:
    """From the recovery's start to its last replayed task assembled (or its state loaded,
    with nothing to replay)."""
    phase = events[events["event"] == "phase"].set_index("phase")["wall"]
    rec = events[(events["event"] == "recovery") & (events.get("phase") == "replayed")]
    end = rec["wall"].iloc[0] if len(rec) else phase["state_loaded"]
    return (end - phase["started"]) * 1e3


def run(settings: Settings, log=print) -> pd.DataFrame:
    """No FT, native, every CP, every U, every Q, ``rounds`` times interleaved: a row each."""
    q = settings.query
    rows = []
    with scratch(settings.storage_dir, settings.data_dir, "scabbard-cec-") as root:
        ds = prepared_dataset(q, settings.scale, settings.data_dir, settings.workers,
                              settings.seconds)
        rate = settings.speedup * event_rate(ds)
        pace = Pace(rate, max(64, int(rate * settings.task_ms / 1e3)),
                    window_s(q, ds) / settings.speedup)
        top = max(settings.periods_ms)
        plan = [("CP", p, None, None) for p in settings.periods_ms] + [
            ("U", top, u, None) for u in settings.replay_bounds] + [
            ("Q", top, None, n) for n in settings.unsaved_bounds]
        for k in range(settings.rounds):
            rows.append({**no_ft(q, ds, pace, settings), "query": q, "round": k})
            rows.append({**native(q, ds, root / "native", pace, settings), "query": q,
                         "round": k})
            log(f"{q} round {k + 1} of {settings.rounds} at {rate:,.0f} tuples/s, "
                f"{pace.batch:,} a task, measured after {pace.fill:.1f} s: native (no "
                f"checkpoint) p50 {rows[-1]['p50_ms']:.1f} ms, p95 {rows[-1]['p95_ms']:.1f} "
                f"ms; no FT p50 {rows[-2]['p50_ms']:.1f} ms")
            for sweep, period, bound, unsaved in plan:
                row = measure(q, ds, root / f"{sweep}-{period}-{bound}-{unsaved}", pace,
                              settings, period, bound, unsaved)
                rows.append({"sweep": sweep, "query": q, "round": k, **row})
                log(f"{q} CP {period:6g} ms U {bound or '-':>8} Q {unsaved or '-':>4}: p50 "
                    f"{row['p50_ms']:7.1f} ms, {row['records']} records, {row['steps']} "
                    f"steps; extent {row['extent_rows']:,} rows, EC-load "
                    f"{row['ec_load_ms']:.1f} ms, {row['replay_tuples'] or 0:,} tuples "
                    f"replayed{' from a step' if row['from_step'] else ''}, recovery "
                    f"{row['recovery_ms']:.1f} ms")
    return pd.DataFrame(rows)


KEYS = ["sweep", "period_ms", "max_replay_tuples", "max_unsaved_panes"]
METRICS = ["p50_ms", "p95_ms", "records", "steps", "state_mb_per_s", "load_ms", "scan_ms",
           "ec_load_ms", "extent_rows", "extent_mb", "replay_tuples", "replay_mb",
           "recovery_ms"]


def medians(runs: pd.DataFrame) -> pd.DataFrame:
    """Each configuration's medians over its rounds (``rounds``: how many)."""
    d = runs.copy()
    for k in KEYS[1:]:  # NaN keys would drop out of a groupby
        d[k] = d[k].fillna(-1) if k in d else -1
    cols = [c for c in METRICS if c in d]
    out = d.groupby(KEYS, sort=False)[cols].median()
    out["rounds"] = d.groupby(KEYS, sort=False).size()
    out = out.reset_index()
    for k in KEYS[1:]:
        out[k] = out[k].where(out[k] != -1)
    return out


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    """The medians over the rounds: the CP sweep beside the excerpt's response times (both
    relative to native: no checkpoint; no FT beside them), then the U and Q sweeps."""
    m = medians(runs)
    nat = m[m["sweep"] == "native"].iloc[0]
    m["response vs native"] = m["p50_ms"] / nat["p50_ms"]
    if "p95_ms" in m:
        m["p95 vs native"] = m["p95_ms"] / nat["p95_ms"]
    paper = PAPER.assign(paper_vs_native=PAPER["paper_response"] / 16.5)
    out = m.merge(paper, on="period_ms", how="left")
    out.loc[~out["sweep"].isin(["CP", "native"]), "paper_vs_native"] = np.nan  # (the
    # excerpt's Fig. 8 has neither no FT nor the bounds)
    cols = ["sweep", "period_ms", "max_replay_tuples", "max_unsaved_panes", "rounds",
            "p50_ms", "p95_ms", "response vs native", "p95 vs native", "paper_vs_native",
            "records", "steps",
            "state_mb_per_s", "extent_rows", "extent_mb", "load_ms", "scan_ms", "ec_load_ms",
            "replay_tuples", "replay_mb", "recovery_ms"]
    return out[[c for c in cols if c in out]]


def save(runs: pd.DataFrame, output_dir: str | Path) -> Path:
    """``cec_results.csv`` and ``cec_runs.csv`` (notebook 12's results.csv is part (a)'s)."""
    return save_tables(output_dir, cec_results=summary(runs), cec_runs=runs)


def bench(settings: Settings, out: Path, log=print) -> int:
    """``scabbard bench cec``: the sweeps, their medians, the tables and figure in ``out``."""
    runs = run(settings, log=log)
    log("\n" + summary(runs).round(2).to_string(index=False))
    csv = save(runs, out)
    plot(runs, out)
    log(f"\nresults: {csv}, figure: {Path(out) / 'cec_tradeoff.png'}")
    return 0


# each row of the figure: a sweep, its x, and its four panels (metric, label), after the
# excerpt's Figs. 8-9 (CP) and 6-7 (Q, U: the same four metrics)
ROWS = (("CP", "period_ms", "checkpoint period CP (ms)",
         (("response", "response time / native's (Fig. 8)"),
          ("extent_rows", "extent, state rows read (Fig. 9)"),
          ("ec_load_ms", "EC-load ms (state load + scan)"), ("replay_mb", "replayed MB"))),
        ("Q", "max_unsaved_panes", "Q (closed panes left unsaved; CI = CP)",
         (("steps", "steps written (Fig. 6)"), ("extent_rows", "extent, state rows read"),
          ("ec_load_ms", "EC-load ms"), ("replay_mb", "replayed MB"))),
        ("U", "max_replay_tuples", "U (tuples to replay; CI = CP)",
         (("records", "records written (Fig. 7)"), ("extent_rows", "extent, state rows read"),
          ("ec_load_ms", "EC-load ms"), ("replay_mb", "replayed MB"))))


def plot(runs: pd.DataFrame, output_dir: str | None = None):
    """The sweeps in the excerpt's shape: a row per sweep (CP, Q, U), the median of the
    rounds with their range; the CP row's response beside the excerpt's Fig. 8."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(ROWS), 4, figsize=(20, 4.2 * len(ROWS)))
    d = runs.copy()
    nat = d[d["sweep"] == "native"]
    d["response"] = d["p50_ms"] / nat["p50_ms"].median()
    if "p95_ms" in d:
        d["response_p95"] = d["p95_ms"] / nat["p95_ms"].median()
    for row, (sweep, x, xlabel, panels) in zip(axes, ROWS, strict=True):
        part = d[d["sweep"] == sweep]
        for ax, (metric, label) in zip(row, panels, strict=True):
            if not len(part):  # (runs of an older build: no such sweep)
                ax.set_visible(False)
                continue
            g = part.groupby(x)[metric]
            mid, lo, hi = g.median(), g.min(), g.max()
            ax.errorbar(mid.index.to_numpy(), mid.to_numpy(),
                        yerr=[(mid - lo).to_numpy(), (hi - mid).to_numpy()], fmt="o-",
                        capsize=3, label=f"eventual{', p50' if metric == 'response' else ''}"
                        f", median of {part['round'].nunique()}" if "round" in part
                        else "eventual")
            ax.set_xscale("log")
            ax.set_xticks(mid.index.to_numpy(), [f"{t:g}" for t in mid.index])
            ax.minorticks_off()
            if metric != "response":
                ax.set_ylim(bottom=0)
            ax.set_xlabel(xlabel)
            ax.set_ylabel(label)
            ax.set_title(f"{label.split(' (')[0]} vs {sweep}")
        if sweep == "CP" and len(part):
            _fig8(row[0], d)
    return finish(fig, output_dir, "cec_tradeoff.png")


def _fig8(ax, d: pd.DataFrame) -> None:
    """The response panel's p95 (against native's p95) and references: native (grey), no
    FT, and the excerpt's Fig. 8."""
    if "response_p95" in d:
        g = d[d["sweep"] == "CP"].groupby("period_ms")["response_p95"]
        mid = g.median()
        ax.errorbar(mid.index.to_numpy(), mid.to_numpy(), fmt="s--", capsize=3, color="C1",
                    yerr=[(mid - g.min()).to_numpy(), (g.max() - mid).to_numpy()],
                    label="eventual, p95")
    ax.axhline(1.0, color="grey", lw=0.8)
    free = d[d["sweep"] == "no FT"]
    if len(free):
        ax.axhline(free["response"].median(), color="C7", lw=0.8, ls=":", label="no FT, p50")
    paper = PAPER.dropna()
    ax.plot(paper["period_ms"], paper["paper_response"] / 16.5, "kx:", label="CEC (excerpt)")
    ticks = sorted(set(d.loc[d["sweep"] == "CP", "period_ms"]) | set(paper["period_ms"]))
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_title("Response time vs CP (grey: native, no checkpoint)")
    ax.legend(fontsize=8)
