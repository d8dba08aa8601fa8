"""Notebook 07: adaptive compression across a change of the data (paper Fig. 12).

SM runs with its input persisted (after push-up: the timestamp and ``mf01``-``mf03``)
while the integer readings change distribution ``change_at`` seconds into the run;
three schemes side by side: **adaptive** (profiles, re-selects every ``interval``
seconds, specialises, falls back per batch when the data breaks the specialisation),
**default** (the paper's starting codecs, never changed) and **none** (raw).

The data: the machine idles first - readings in 0..15, constant for runs of 14 (the SM
generator's ``change_at`` regime) - and then works - readings around 8,000-15,000.
The paper changes the other way round; its base-delta used a fixed base, which the
drop broke.  Ours takes each batch's minimum as the base, so a drop breaks nothing,
while a rise breaks the bit width learned on the idle data: the experiment shows
that deoptimisation.  The same seeded timestamps run through both regimes.

``disk_mb_s`` emulates a device with the paper's bandwidth per core, so that what
compression saves shows in the throughput (on this machine's disk the CPU decides).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from scabbard import queries, workloads
from scabbard.data import Dataset
from scabbard.engine import EngineConfig, NullSink, Replay
from scabbard.engine.runtime import Engine
from scabbard.engine.sources import ReplaySource
from scabbard.experiments import Common, finish, save_tables, scratch
from scabbard.ft.config import PersistConfig
from scabbard.ft.ingress import run_persisted
from scabbard.outputs import metrics_log, read_metrics
from scabbard.storage import StorageConfig

SCHEMES = ("adaptive", "default", "none")


class RegimeChange(ReplaySource):
    """Replays ``first`` for ``after`` wall seconds, then ``then``: two datasets with the
    same rows and timestamps, so only the values change (at a batch boundary)."""

    def __init__(self, first: Dataset, then: Dataset, after: float, **kw):
        super().__init__(first, **kw)
        a, b = first.stream, then.stream
        if a.rows != b.rows or not np.array_equal(a.column("timestamp"), b.column("timestamp")):
            raise ValueError("the two regimes must have the same rows and timestamps")
        self._then = b.columns
        self._t0: float | None = None  # when batches() started
        self.after = after
        self.changed_at: float | None = None  # seconds into the run, once it happened

    def batches(self):
        self._t0 = time.perf_counter()
        yield from super().batches()

    def _batch(self, lo: int, hi: int, copy: int, offset: int):
        b = super()._batch(lo, hi, copy, offset)
        if self._t0 is None:  # peek() before the run: the first regime
            return b
        now = time.perf_counter() - self._t0
        if self.changed_at is None and now < self.after:
            return b
        if self.changed_at is None:
            self.changed_at = now
        cols = [b.columns[0], *(c[lo:hi] for c in self._then[1:])]
        return type(b)(b.schema, tuple(cols), offset)


@dataclass(frozen=True)
class Settings(Common):
    schemes: Sequence[str] = field(default=SCHEMES)
    seconds: float = 20.0
    change_at: float = 10.0  # wall seconds into each run
    interval: float = 4.0  # adaptive re-selection (the paper's 4 s)
    workers: int = 2
    disk_mb_s: float | None = 100.0  # emulated device (None: the real disk)
    metrics_interval: float = 0.5
    storage_dir: str | None = None


def regimes(settings: Settings) -> tuple[Dataset, Dataset]:
    """(idle, working) SM datasets of the same seed and scale."""
    spec = workloads.get("sm").SPEC
    working = workloads.dataset("sm", settings.scale, root=settings.data_dir)
    idle = spec.generate(scale=settings.scale, options={"change_at": 0.0}, out=settings.data_dir,
                         progress=False)
    return idle, working


def run_scheme(scheme: str, idle: Dataset, working: Dataset, folder: Path,
               s: Settings) -> tuple[pd.DataFrame, pd.DataFrame, float | None]:
    """One run: its metrics samples, its codec events, and when the data changed."""
    q = queries.get("SM")
    cfg = EngineConfig(workers=s.workers, metrics_interval=s.metrics_interval)
    rows = Engine(q, {}, cfg).batch_rows_for(ReplaySource(working, 1).tuples_per_ms())
    source = RegimeChange(idle, working, s.change_at, batch_rows=rows,
                          replay=Replay(duration=s.seconds))
    shutil.rmtree(folder, ignore_errors=True)
    log = folder / "metrics.jsonl"
    # an emulated device takes small bulk writes and a short queue (see notebook 06's)
    storage = StorageConfig(write_bytes_per_s=s.disk_mb_s * 1e6, bulk_bytes=4 << 20,
                            max_pending_bytes=16 << 20) if s.disk_mb_s else StorageConfig()
    persist = PersistConfig(folder / "storage", True, scheme, compression_interval=s.interval,
                            layout=storage)
    run_persisted(q, working, persist, NullSink(), cfg, watch=metrics_log(log), source=source)
    m = read_metrics(log)
    samples = m[m["event"] == "sample"] if "event" in m else m
    events = m[m["event"].isin(["codec", "fallback"])] if "event" in m else m.iloc[:0]
    shutil.rmtree(folder, ignore_errors=True)
    return samples, events, source.changed_at


def run(settings: Settings, log=print) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per scheme, the throughput timeline (one row per sample) and the codec events."""
    idle, working = regimes(settings)
    timeline, events = [], []
    with scratch(settings.storage_dir, settings.data_dir, "scabbard-fig12-") as root:
        for scheme in settings.schemes:
            samples, ev, changed = run_scheme(scheme, idle, working, root / scheme, settings)
            timeline.append(pd.DataFrame({"scheme": scheme, "t": samples["t"],
                                          "tuples_per_s": samples["tuples_per_s"],
                                          "changed_at": changed}))
            if len(ev):
                events.append(ev.assign(scheme=scheme))
            before = samples[samples["t"] < (changed or np.inf)]["tuples_per_s"].median()
            after = samples[samples["t"] >= (changed or np.inf)]["tuples_per_s"].median()
            log(f"{scheme:9} before the change {before / 1e6:7.2f} M tuples/s, after "
                f"{after / 1e6:7.2f}; {len(ev)} codec events")
    ev = pd.concat(events, ignore_index=True) if events else pd.DataFrame(
        columns=["scheme", "t", "event", "column", "codec"])
    keep = [c for c in ("scheme", "t", "event", "column", "codec", "to", "reason", "why")
            if c in ev]
    return pd.concat(timeline, ignore_index=True), ev[keep]


def phases(timeline: pd.DataFrame, events: pd.DataFrame, interval: float) -> pd.DataFrame:
    """Per scheme, median throughput in each phase: before the change, between the change
    and the next adaptive decision, and after it."""
    out = []
    for scheme, t in timeline.groupby("scheme", sort=False):
        c = t["changed_at"].iloc[0]
        swaps = events[(events["scheme"] == scheme) & (events["event"] == "codec")
                       & (events["t"] > c)] if len(events) else events
        respec = float(swaps["t"].min()) if len(swaps) else c + interval
        parts = {"before change": t[t["t"] < c], "after change": t[(t["t"] >= c) & (t["t"] < respec)],
                 "after re-selection": t[t["t"] >= respec]}
        row = {"scheme": scheme, "change at s": c, "re-selected at s": respec if len(swaps)
               else float("nan")}
        for name, part in parts.items():
            row[f"{name} M tuples/s"] = part["tuples_per_s"].median() / 1e6
        fb = events[(events["scheme"] == scheme) & (events["event"] == "fallback")] \
            if len(events) else events
        row["fallback batches"] = len(fb)
        out.append(row)
    return pd.DataFrame(out)


def save(timeline: pd.DataFrame, events: pd.DataFrame, table: pd.DataFrame,
         output_dir: str | Path) -> Path:
    return save_tables(output_dir, results=table, timeline=timeline, codec_events=events)


def plot(timeline: pd.DataFrame, events: pd.DataFrame, output_dir: str | None = None):
    """Fig. 12: throughput over time per scheme; the change, codec swaps (|) and the
    batches that fell back (x) marked."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4.5))
    for scheme, t in timeline.groupby("scheme", sort=False):
        line, = ax.plot(t["t"], t["tuples_per_s"] / 1e6, label=scheme)
        c = t["changed_at"].iloc[0]
        ax.axvline(c, color=line.get_color(), ls=":", lw=1)
        ev = events[events["scheme"] == scheme] if len(events) else events
        top = t["tuples_per_s"].max() / 1e6
        for kind, marker in (("codec", "|"), ("fallback", "x")):
            e = ev[ev["event"] == kind] if len(ev) else ev
            if len(e):
                ax.plot(e["t"], np.full(len(e), top * (1.05 if kind == "codec" else 1.1)),
                        marker, color=line.get_color(), ms=9, ls="none")
    ax.plot([], [], "k|", label="codec swapped in")
    ax.plot([], [], "kx", label="batch fell back")
    ax.plot([], [], "k:", label="data changes")
    ax.set_xlabel("seconds")
    ax.set_ylabel("M tuples/s")
    ax.set_title("SM with adaptive, default and no compression across a change of the data "
                 "(paper Fig. 12)")
    ax.legend(fontsize=8, ncol=3)
    return finish(fig, output_dir, "adaptive_compression.png")
