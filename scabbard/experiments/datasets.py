"""Notebook 00: the six benchmark datasets of Table 3 - generate or load, summarise, plot.

``run`` returns one row per dataset (schema size, rows, event-time span, rate,
bytes, checksum) and saves it as ``results.csv``; ``plot`` draws, per dataset,
its arrival rate over event time and the distribution that characterises it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from scabbard import workloads
from scabbard.data import Dataset
from scabbard.experiments import Common

PLOT_ROWS = 2_000_000  # the plots look at (at most) the first rows of each dataset


@dataclass(frozen=True)
class Settings(Common):
    workloads: Sequence[str] = field(default=workloads.NAMES)
    generate: bool = True
    seed: int = 0
    output_dir: str = "."
    progress: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "workloads", tuple(self.workloads))
        for w in self.workloads:
            workloads.get(w)  # raises on an unknown name


def dataset_for(name: str, settings: Settings) -> Dataset:
    """The dataset of ``name`` at the settings' scale: generated if asked and missing."""
    return workloads.dataset(name, settings.scale, settings.data_dir, settings.seed,
                             generate=settings.generate, progress=settings.progress)


def summarize(ds: Dataset) -> dict:
    schema = ds.schema
    t = ds.manifest["stream"]["event_time"]
    span_s = max((t["last"] - t["first"]) / 1000.0, 1e-3) if ds.rows else 0.0
    return {
        "workload": ds.workload,
        "paper": workloads.PAPER_NAMES[ds.workload],
        "attributes": len(schema),
        "row_bytes": schema.payload_bytes,  # stored; the paper's struct beside it
        "paper_row_bytes": schema.row_bytes,
        "rows": ds.rows,
        "event_time_s": round(span_s, 3),
        "tuples_per_s": round(ds.rows / span_s, 1) if span_s else 0.0,
        "mb_rows": round(ds.stream.nbytes / 1e6, 2),
        "mb_stored": round(ds.stream.stored_bytes / 1e6, 2),
        "side_tables": ", ".join(f"{k} ({v.rows:,})" for k, v in ds.tables.items()) or "-",
        "checksum": ds.checksum[:23],
        "path": str(ds.path),
    }


def run(settings: Settings) -> tuple[pd.DataFrame, dict[str, Dataset]]:
    """Generate (or load) every dataset; return the summary table and the datasets."""
    datasets = {name: dataset_for(name, settings) for name in settings.workloads}
    table = pd.DataFrame([summarize(ds) for ds in datasets.values()])
    out = Path(settings.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "results.csv", index=False)
    return table, datasets


# -- plots --------------------------------------------------------------------------------------
def arrivals_per_second(ds: Dataset, limit: int = PLOT_ROWS) -> tuple[np.ndarray, np.ndarray]:
    """(second, tuples) of event time, over the first ``limit`` rows."""
    ts = np.asarray(ds.column("timestamp")[:limit])
    counts = np.bincount((ts - ts[0]) // 1000) if len(ts) else np.zeros(0, dtype=np.int64)
    return np.arange(len(counts)), counts


def _cm(ds, ax, n):
    et = np.asarray(ds.column("event_type")[:n])
    shares = np.bincount(et, minlength=6) / max(len(et), 1)
    ax.bar(workloads.get("cm").EVENT_TYPES, shares * 100)
    ax.set_ylabel("% of events")
    ax.tick_params(axis="x", labelrotation=45)
    ax.set_title("event types")


def _sg(ds, ax, n):
    prop = np.asarray(ds.column("property")[:n])
    load = np.asarray(ds.column("value")[:n])[prop == 1]
    on = load[load > 0]
    if len(on):
        ax.hist(on, bins=np.logspace(np.log10(max(on.min(), 0.1)), np.log10(on.max() + 1), 50))
        ax.set_xscale("log")
    ax.set_xlabel("load (W) when on")
    ax.set_title(f"load: {100 * np.mean(load == 0):.0f}% zeros")


def _lrb(ds, ax, n):
    speed = np.asarray(ds.column("speed")[:n])
    lane = np.asarray(ds.column("lane")[:n])
    for ln, label in [(0, "entrance"), (2, "travel (lane 2)"), (4, "exit")]:
        sel = speed[lane == ln]
        if len(sel):
            ax.hist(sel, bins=np.arange(0, 102, 2), histtype="step", density=True, label=label)
    ax.set_xlabel("speed (mph)")
    ax.legend(fontsize=7)
    ax.set_title("speed by lane")


def _ysb(ds, ax, n):
    et = np.asarray(ds.column("event_type")[:n])
    shares = np.bincount(et, minlength=3) / max(len(et), 1)
    ax.bar(workloads.get("ysb").EVENT_TYPES, shares * 100)
    ax.set_ylabel("% of events")
    ax.set_title("event types")


def _nexmark(ds, ax, n):
    auctions = np.asarray(ds.column("auction")[:n])
    _, counts = np.unique(auctions, return_counts=True)
    counts = np.sort(counts)[::-1]
    ax.loglog(np.arange(1, len(counts) + 1), counts)
    ax.set_xlabel("auction rank")
    ax.set_ylabel("bids")
    ax.set_title("hot items")


def _sm(ds, ax, n):
    m = min(n, 6000)
    ts = np.asarray(ds.column("timestamp")[:m]) / 1000.0
    for c in ("mf01", "mf02", "mf03"):
        ax.plot(ts, np.asarray(ds.column(c)[:m]), lw=0.6, label=c)
    ax.set_xlabel("event time (s)")
    ax.legend(fontsize=7)
    ax.set_title("power readings")


_DISTRIBUTION = {"cm": _cm, "sg": _sg, "lrb": _lrb, "ysb": _ysb, "nexmark": _nexmark, "sm": _sm}


def plot(datasets: dict[str, Dataset], output_dir: str | None = None, limit: int = PLOT_ROWS):
    """Per dataset: tuples per second of event time, and its characteristic distribution."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(datasets), 2, figsize=(10, 2.6 * len(datasets)), squeeze=False)
    for (name, ds), (left, right) in zip(datasets.items(), axes, strict=True):
        sec, counts = arrivals_per_second(ds, limit)
        left.plot(sec, counts, lw=0.7)
        left.set_ylim(0, max(1, counts.max()) * 1.1 if len(counts) else 1)
        left.set_title(f"{workloads.PAPER_NAMES[name]}: tuples per second of event time")
        left.set_xlabel("event time (s)")
        _DISTRIBUTION[name](ds, right, limit)
    fig.tight_layout()
    if output_dir is not None:
        fig.savefig(Path(output_dir) / "datasets.png", dpi=110)
    return fig
