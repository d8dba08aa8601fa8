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
* the same against U (``max_replay_tuples``) at the longest CP, and against Q
  (``max_unsaved_panes``) at the longest CP with CI as long: where the window is the query's
  only state, a recovery resumes from the newest step after the record
  (:mod:`scabbard.ft.steppoints`), so what it replays follows how often the steps come.
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

    def __post_init__(self) -> None:
        if not (self.step_ms > 0 and self.speedup > 0 and self.seconds > 0
                and self.task_ms > 0 and all(p > 0 for p in self.periods_ms)):
            raise ValueError("periods, step, speedup, seconds and task_ms must be positive")


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
    Q, with CI as long as CP (the steps come when Q says)."""
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
                           step_ms=period_ms if unsaved else settings.step_ms, watch=on, **kw)
    row = {"period_ms": period_ms, "max_replay_tuples": bound, "max_unsaved_panes": unsaved,
           **response(samples, pace.fill), "records": len(r.checkpoints),
           "state_mb_per_s": r.state_bytes_written / r.run.summary.seconds / 1e6}
    log = folder / "recovery.jsonl"
    back = run_fault_tolerant(q, ds, folder / "storage", ClockedSink(folder / "output"), cfg,
                              interval=period_ms / 1e3, recover=True, duration=0.5,
                              metrics_log=log, **kw)
    row.update(load_ms=back.loaded.get("load_ms"), state_mb=back.loaded.get("bytes", 0) / 1e6,
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
    """Native, every CP, every U: one row each."""
    q = settings.query
    rows = []
    with scratch(settings.storage_dir, settings.data_dir, "scabbard-cec-") as root:
        ds = prepared_dataset(q, settings.scale, settings.data_dir, settings.workers,
                              settings.seconds)
        rate = settings.speedup * event_rate(ds)
        pace = Pace(rate, max(64, int(rate * settings.task_ms / 1e3)),
                    window_s(q, ds) / settings.speedup)
        rows.append({**no_ft(q, ds, pace, settings), "query": q})
        rows.append({**native(q, ds, root / "native", pace, settings), "query": q})
        log(f"{q} at {rate:,.0f} tuples/s, {pace.batch:,} a task, measured after "
            f"{pace.fill:.1f} s: native (no checkpoint) p50 {rows[-1]['p50_ms']:.1f} ms, p95 "
            f"{rows[-1]['p95_ms']:.1f} ms; no FT p50 {rows[-2]['p50_ms']:.1f} ms")
        top = max(settings.periods_ms)
        plan = [("CP", p, None, None) for p in settings.periods_ms] + [
            ("U", top, u, None) for u in settings.replay_bounds] + [
            ("Q", top, None, n) for n in settings.unsaved_bounds]
        for sweep, period, bound, unsaved in plan:
            row = measure(q, ds, root / f"{sweep}-{period}-{bound}-{unsaved}", pace, settings,
                          period, bound, unsaved)
            rows.append({"sweep": sweep, "query": q, **row})
            log(f"{q} CP {period:6g} ms U {bound or '-':>8} Q {unsaved or '-':>4}: p50 "
                f"{row['p50_ms']:7.1f} ms, p95 {row['p95_ms']:7.1f} ms, {row['records']} "
                f"records; recovery {row['recovery_ms']:7.1f} ms (load {row['load_ms']:.1f} "
                f"ms, {row['replay_tuples'] or 0:,} tuples replayed"
                f"{' from a step' if row['from_step'] else ''})")
    return pd.DataFrame(rows)


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    """The CP sweep beside the excerpt's response times (both relative to native: no
    checkpoint; no FT beside them)."""
    nat = runs[runs["sweep"] == "native"].iloc[0]
    cp = runs[runs["sweep"].isin(["CP", "native", "no FT"])].copy()
    cp["response vs native"] = cp["p50_ms"] / nat["p50_ms"]
    paper = PAPER.assign(paper_vs_native=PAPER["paper_response"] / 16.5)
    out = cp.merge(paper, on="period_ms", how="left")
    out.loc[out["sweep"] == "no FT", "paper_vs_native"] = np.nan  # the excerpt has no such run
    cols = ["sweep", "period_ms", "p50_ms", "p95_ms", "response vs native", "paper_vs_native",
            "records", "state_mb_per_s", "load_ms", "replay_tuples", "replay_mb",
            "recovery_ms"]
    return out[[c for c in cols if c in out]]


def save(runs: pd.DataFrame, output_dir: str | Path) -> Path:
    """``cec_results.csv`` and ``cec_runs.csv`` (notebook 12's results.csv is part (a)'s)."""
    return save_tables(output_dir, cec_results=summary(runs), cec_runs=runs)


def plot(runs: pd.DataFrame, output_dir: str | None = None):
    """Response time vs CP (ours and the excerpt's, relative to native); recovery vs CP; vs U."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4))
    nat = runs[runs["sweep"] == "native"].iloc[0]
    cp = runs[runs["sweep"] == "CP"].sort_values("period_ms")
    ax = axes[0]
    for p, m in (("p50", "o-"), ("p95", "s--")):
        ax.plot(cp["period_ms"], cp[f"{p}_ms"] / nat["p50_ms"], m, label=f"eventual, {p}")
        ax.axhline(nat[f"{p}_ms"] / nat["p50_ms"], color="grey", lw=0.8,
                   ls="-" if p == "p50" else "--")
    free = runs[runs["sweep"] == "no FT"]
    if len(free):
        ax.axhline(free["p50_ms"].iloc[0] / nat["p50_ms"], color="C7", lw=0.8, ls=":",
                   label="no FT, p50")
    paper = PAPER.dropna()
    ax.plot(paper["period_ms"], paper["paper_response"] / 16.5, "kx:", label="CEC (excerpt)")
    ax.set_xscale("log")
    ticks = sorted(set(cp["period_ms"]) | set(paper["period_ms"]))
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("checkpoint period CP (ms)")
    ax.set_ylabel("response time / native p50")
    ax.set_title("Response time vs CP (grey: native, no checkpoint)")
    ax.legend(fontsize=8)
    for bx, (sweep, x, label) in zip(axes[1:], (("CP", "period_ms", "checkpoint period CP (ms)"),
                                                ("U", "max_replay_tuples", "U (tuples)"),
                                                ("Q", "max_unsaved_panes", "Q (panes; CI = CP)")),
                                     strict=True):
        d = runs[runs["sweep"] == sweep].sort_values(x)
        if not len(d):  # (runs of an older build: no Q sweep)
            bx.set_visible(False)
            continue
        bx.plot(d[x], d["recovery_ms"], "o-", label="recovery ms")
        bx.plot(d[x], d["load_ms"], "s-", label="state load ms")
        bx.set_xscale("log")
        bx.set_xlabel(label)
        bx.set_ylabel("ms")
        twin = bx.twinx()
        twin.plot(d[x], d["replay_mb"], "^:", color="C2", label="replayed MB")
        twin.set_ylabel("replayed MB")
        bx.legend(fontsize=8, loc="upper left")
        twin.legend(fontsize=8, loc="upper right")
        bx.set_title(f"Recovery vs {sweep}")
    return finish(fig, output_dir, "cec_tradeoff.png")
