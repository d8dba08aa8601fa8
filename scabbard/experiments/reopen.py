"""``scabbard bench reopen``: opening a storage folder by its sealed files' segment indexes
against scanning every segment header (scabbard/storage/fileindex.py; Darwin's state that
needs no reload at recovery).

Per stored size, one folder is filled once with a stream of small segments (spilled state's
units are 64 KiB and up), then opened ``rounds`` times each way, alternating: with its
indexes removed (the scan every opening made before them; it writes them anew) and with
them.  With ``cold`` the page cache is dropped before each opening (root only; else the
table says the cache was warm).  The tail each opening verifies in full (one read of up to
the writer's bulk size) is the same both ways.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from scabbard.experiments import Common, finish, save_tables, scratch

ROW_BYTES = 32  # four int64 columns


@dataclass(frozen=True)
class Settings(Common):
    sizes_mb: Sequence[int] = (256, 1024, 2048)
    segment_kib: int = 64
    rounds: int = 3
    cold: bool = True
    work_dir: str | None = None
    output_dir: str | None = None

    def __post_init__(self) -> None:
        if not self.sizes_mb or min(self.sizes_mb) < 1:
            raise ValueError(f"sizes_mb must be >= 1 each, got {list(self.sizes_mb)}")
        if self.segment_kib < 1 or self.rounds < 1:
            raise ValueError(f"segment_kib and rounds must be >= 1, got {self.segment_kib} "
                             f"and {self.rounds}")


def _schema():
    from scabbard.schema import Field, Schema

    return Schema("reopen", tuple(Field(n, "int64") for n in ("timestamp", "a", "b", "c")))


def fill(store: Path, size_mb: int, segment_kib: int) -> int:
    """A stream of ``size_mb`` MB in segments of about ``segment_kib`` KiB; its tuples."""
    from scabbard.batch import Batch
    from scabbard.storage.blockmanager import BlockManager

    schema, rows = _schema(), max(1, (segment_kib << 10) // ROW_BYTES - 128)
    cols = [np.arange(rows, dtype=np.int64)] * 4
    off = 0
    with BlockManager(store) as bm:
        sid = bm.stream("s", schema)
        while off * ROW_BYTES < size_mb * 1e6:
            bm.append(sid, Batch.from_arrays(schema, cols, off))
            off += rows
    return off


def drop_caches() -> bool:
    """Drop the page cache (what the folder's files held); False when not allowed."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        return False
    return True


def open_once(store: Path, how: str, cold: bool) -> dict:
    """Open ``store`` (``how``: ``scan`` without its indexes, or ``index``) and its stream."""
    from scabbard.storage import fileindex
    from scabbard.storage.blockmanager import BlockManager

    if how == "scan":
        shutil.rmtree(store / fileindex.FOLDER, ignore_errors=True)
    dropped = drop_caches() if cold else False
    t0 = time.perf_counter()
    with BlockManager(store) as bm:
        sid = bm.stream("s", _schema())
        ms = (time.perf_counter() - t0) * 1e3
        st = bm.stats()["streams"]["s"]
        segments = sum(len(f.segs) for f in bm._by_id[sid].files)
    return {"how": how, "open_ms": ms, "files": st["files"], "segments": segments,
            "tuples": st["durable"], "cold": dropped}


def run(settings: Settings, log=print) -> pd.DataFrame:
    rows = []
    for size in settings.sizes_mb:
        with scratch(settings.work_dir, settings.data_dir, "scabbard-reopen-") as root:
            store = root / "store"
            shutil.rmtree(store, ignore_errors=True)
            tuples = fill(store, size, settings.segment_kib)
            for rnd in range(settings.rounds):
                for how in ("scan", "index"):
                    r = open_once(store, how, settings.cold)
                    if r["tuples"] != tuples:
                        raise RuntimeError(f"opened {r['tuples']:,} of {tuples:,} tuples")
                    rows.append({"stored_mb": size, "round": rnd, **r})
                    log(f"{size:>6,} MB  {r['files']:>4} files  {r['segments']:>7,} segments  "
                        f"{how:5s} {r['open_ms']:9.1f} ms"
                        f"{'' if r['cold'] else '  (page cache warm)'}")
            if settings.work_dir:
                shutil.rmtree(store, ignore_errors=True)
    runs = pd.DataFrame(rows)
    if settings.output_dir:
        save_tables(settings.output_dir, results=table(runs), runs=runs)
    return runs


def table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per stored size: each way's median opening and its spread, and scan over index."""
    g = runs.groupby(["stored_mb", "how"])["open_ms"]
    t = g.median().unstack("how")
    lo, hi = g.min().unstack("how"), g.max().unstack("how")
    out = pd.DataFrame({
        "stored_mb": t.index, "segments": runs.groupby("stored_mb")["segments"].max().values,
        "scan_ms": t["scan"].values,
        "scan_range": [f"{a:.0f}-{b:.0f}" for a, b in zip(lo["scan"], hi["scan"], strict=True)],
        "index_ms": t["index"].values,
        "index_range": [f"{a:.0f}-{b:.0f}" for a, b in zip(lo["index"], hi["index"],
                                                             strict=True)],
        "scan_over_index": (t["scan"] / t["index"]).values})
    return out.reset_index(drop=True)


def plot(runs: pd.DataFrame, output_dir: str | None = None):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for how, label in (("scan", "every segment header scanned"),
                       ("index", "the sealed files' indexes")):
        d = runs[runs["how"] == how].groupby("stored_mb")["open_ms"]
        med = d.median()
        ax.errorbar(med.index / 1e3, med.values, fmt="o-", capsize=3, label=label,
                    yerr=[med.values - d.min().values, d.max().values - med.values])
    ax.set_yscale("log")
    ax.set_xlabel("stored (GB)")
    ax.set_ylabel("opening the storage (ms)")
    ax.set_title("opening a storage folder: segment indexes vs scan", fontsize=10)
    ax.legend(fontsize=8)
    return finish(fig, output_dir, "reopen.png")

