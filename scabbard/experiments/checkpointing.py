"""Notebook 03 / ``scabbard bench checkpoints``: what fault tolerance costs (paper Table 4, Fig. 7a).

Per query, on the same data and in one run, the configurations side by side, each with 1 and
2 workers (``worker_counts``):

* **no FT** - the query alone, input in memory, results counted and dropped;
* **no FT, written** - the same, its results written to a Parquet file: the fair baseline of
  a fault-tolerant run, which writes its results too (through its exactly-once sink);
* **checkpoints** (the paper's *Scabbard-Chk*) - the operator state checkpointed every
  ``interval`` seconds, asynchronously, into state p-units; the input is not persisted
  (the source can replay it) and results are dropped, so the difference to *no FT* is what
  checkpointing costs;
* **raw persisted ingest** - no query: the input persisted raw into the ingress p-stream
  as *FT, raw input* persists it (the same tasks, machine durability), what the disk and the
  write path allow - with *no FT, written*, the ceiling of *FT, raw input*;
* **FT, raw input** - everything recovery relies on: checkpoints, the ingress p-stream
  persisted as it comes (every attribute, no codec), results stored with their clock (the
  clocked exactly-once sink), machine durability (``fdatasync`` before every
  acknowledgement and record);
* **Scabbard** - the paper's configuration: the same, with persistence push-up (σ and π
  below the ingress p-stream) and the adaptive codecs (re-chosen every
  ``compression_interval`` seconds);
* **Scabbard, no disk** (only when named) - the same, the ingress p-stream's writes
  discarded: each segment built, checksummed and acknowledged, not written (Fig. 11's
  emulated device).  Between it and *Scabbard* lies what writing to the disk costs the run.

Every run records the CPU time of the engine's parts (:mod:`scabbard.timers`), so each row
carries the part's nanoseconds per *input* tuple: what the fault-tolerant path costs, stage
by stage, and on which thread.  Reported: throughput, the overheads of FT over *no FT,
written*, 2 workers over 1, bytes persisted per input tuple, the average state size and
checkpoint time (marker at dispatch -> record durable) and the paper's Table 4 beside them.
``rounds`` > 1 interleaves the configurations and keeps the median, which damps the noise of
a 2-core machine; an unmeasured run first pages the dataset in and loads the compiled code.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

from scabbard import queries, timers
from scabbard.engine import EngineConfig, NullSink, Replay, run_query
from scabbard.experiments import (
    Common,
    finish,
    prepared_dataset,
    save_tables,
    scratch,
    wide,
)
from scabbard.ft.config import PersistConfig
from scabbard.ft.modes import INTERVAL
from scabbard.ft.recovery import run_fault_tolerant
from scabbard.ft.sinks import ClockedSink, DiscardSink
from scabbard.outputs import sink_for
from scabbard.storage import StorageConfig

CONFIGS = ("no_ft", "no_ft_written", "checkpoints", "ingest", "ft_raw", "scabbard")
# measured only when asked for: Scabbard with its input p-stream's writes discarded - each
# segment built, checksummed and acknowledged, not written (the emulated device of Fig. 11),
# its checkpoints and results stored as before.  Beside "scabbard" it tells what the disk's
# writes cost the run from what building what is written costs.
NO_DISK = "scabbard_nodisk"
MEASURABLE = (*CONFIGS, NO_DISK)
PERSISTING = ("ft_raw", "scabbard", NO_DISK)  # the fault-tolerant runs that persist their input
WARM_S = 0.5  # each configuration's unmeasured first run, wall seconds
LABELS = {"no_ft": "no FT", "no_ft_written": "no FT, results written",
          "checkpoints": "checkpoints only (Scabbard-Chk)",
          "ingest": "raw persisted ingest, no query", "ft_raw": "FT, raw input",
          "scabbard": "Scabbard (push-up + adaptive codecs)",
          NO_DISK: "Scabbard, input writes discarded (no disk)"}
# the parts a run's table shows (ns per input tuple), in the order a tuple meets them
PARTS = ("dispatch", "stage", "pushup", "profile", "compress", "encode", "fragment", "boundary",
         "assembly", "sink", "checkpoint", "other")

# Table 4 of the paper (16 cores, 1 s interval, Scabbard-Chk): state MB, avg checkpoint ms,
# throughput overhead.  SM is not in the paper's table.
PAPER = pd.DataFrame(
    [("CM1", 18, 25.7, 0.04), ("CM2", 10, 44.3, 0.09), ("SG1", 2, 89.6, 0.01),
     ("SG2", 41, 68.6, 0.07), ("SG3", 115, 103.6, 0.02), ("LRB1", 114, 122.7, 0.05),
     ("LRB2", 105, 168.6, 0.14), ("LRB3", 143, 361.0, 0.01), ("YSB", 23, 23.1, 0.06),
     ("NQ", 27, 49.1, 0.04)],
    columns=["query", "paper_state_mb", "paper_checkpoint_ms", "paper_overhead"])


@dataclass(frozen=True)
class Settings(Common):
    queries: Sequence[str] = field(default=queries.NAMES)
    seconds: float = 5.0  # wall seconds per run
    interval: float = INTERVAL  # checkpoint interval
    worker_counts: Sequence[int] = (1, 2)
    configs: Sequence[str] = CONFIGS
    compression_interval: float = 0.5  # Scabbard's adaptive codecs decide this often
    rounds: int = 1
    storage_dir: str | None = None  # default: a scratch folder next to the data

    def __post_init__(self) -> None:
        if isinstance(self.worker_counts, int):
            object.__setattr__(self, "worker_counts", (self.worker_counts,))
        if not self.worker_counts or any(w < 1 for w in self.worker_counts):
            raise ValueError(f"worker counts must be >= 1, got {list(self.worker_counts)}")
        unknown = [c for c in self.configs if c not in MEASURABLE]
        if unknown or not self.configs:
            raise ValueError(f"unknown configurations {unknown}; choose from "
                             f"{', '.join(MEASURABLE)}")


def measure(query: str, config: str, workers: int, ds, folder: Path,
            settings: Settings) -> dict:
    """One run of ``query`` in ``config`` on ``workers`` workers: its throughput, checkpoints,
    bytes persisted and the CPU of each part per input tuple (``ns_<part>``)."""
    q = queries.get(query)
    cfg = EngineConfig(workers=workers)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    out: dict = {"checkpoints": 0, "persisted_bytes_per_tuple": 0.0}
    written = 0  # every byte the run stored: its input, state and results
    steady = SecondHalf()
    with timers.recording(timers.Totals()) as totals:
        if config == "ingest":
            from scabbard.engine.runtime import Engine
            from scabbard.experiments.ingest import ingest

            layout = StorageConfig(sync=True)  # machine durability, as the FT runs
            engine = Engine(q, ds.tables, cfg)
            rows = engine.task_rows(ds, None, engine.unit_rows(layout.file_bytes,
                                                               layout.data_start))
            if engine.raw_tasks_in_pieces:  # the FT run's p-units: its tasks' pieces
                rows = min(rows, engine.piece_rows(layout.file_bytes, layout.data_start))
            r = ingest(query, ds, PersistConfig(folder / "storage", layout=layout),
                       Replay(duration=settings.seconds), cfg, batch_rows=rows,
                       progress=steady.sample)
            summary = SimpleNamespace(tuples=r.tuples, tuples_per_s=r.tuples_per_s,
                                      seconds=r.seconds, result_rows=0)
            out.update(persisted_bytes_per_tuple=r.disk_bytes / max(1, r.tuples))
            written = r.disk_bytes
        elif config in ("no_ft", "no_ft_written"):
            sink = sink_for(folder / "results.parquet") if config == "no_ft_written" \
                else NullSink()
            rep = run_query(q, ds, sink, cfg, replay=Replay(duration=settings.seconds),
                            watch=[steady.watch])
            summary, rows = rep.summary, rep.batch_rows
            written = _folder_bytes(folder)
        else:
            full = config != "checkpoints"
            sink = ClockedSink(folder / "output") if full else DiscardSink(folder / "output")
            reduced = config in ("scabbard", NO_DISK)
            discard = {"layout": StorageConfig(discard=True)} if config == NO_DISK else {}
            r = run_fault_tolerant(q, ds, folder / "storage", sink, cfg, **discard,
                                   interval=settings.interval, duration=settings.seconds,
                                   persist_input=full, durability="machine", push_up=reduced,
                                   compression="adaptive" if reduced else None,
                                   compression_interval=settings.compression_interval,
                                   watch=[steady.watch])
            summary, rows = r.run.summary, r.run.batch_rows
            ck = r.checkpoints
            out.update(checkpoints=len(ck),
                       state_mb=float(np.mean([c.bytes for c in ck])) / 1e6 if ck
                       else float("nan"),
                       checkpoint_ms=float(np.mean([c.duration_s for c in ck])) * 1e3 if ck
                       else float("nan"),
                       persisted_bytes_per_tuple=r.written_bytes / max(1, summary.tuples))
            written = r.written_bytes + getattr(getattr(sink, "bm", None), "bytes_written", 0)
    shutil.rmtree(folder, ignore_errors=True)
    per = totals.per_tuple(summary.tuples)
    out.update(tuples_per_s=summary.tuples_per_s,
               steady_tuples_per_s=steady.rate(summary.tuples, summary.seconds),
               result_rows_per_s=summary.result_rows
               / max(summary.seconds, 1e-9), batch_rows=rows,
               cpu_ns_per_tuple=totals.process_s / max(1, summary.tuples) * 1e9,
               cores=totals.process_s / max(summary.seconds, 1e-9),
               disk_mb_per_s=written / max(summary.seconds, 1e-9) / 1e6,
               **{f"ns_{p}": per[p] for p in PARTS})
    return out


class SecondHalf:
    """A run's throughput over its second half, from its progress samples: from the first
    sample at or after half its seconds to its end.  Every configuration is measured alike;
    beside the whole run's figure it tells a start from a steady state - a fault-tolerant
    run keeps its input until two checkpoints are recorded, so its first seconds write into
    new pool files (ext4 converts their unwritten extents as it goes: 2.1 against 3.3 GB/s
    here once files are reused), where raw ingest, releasing each p-unit once stored,
    reuses its few files from the start."""

    def __init__(self):
        self.samples: list[tuple[float, int]] = []

    def sample(self, tuples: int, t: float) -> None:
        self.samples.append((t, tuples))

    def watch(self, line: dict) -> None:
        """A metrics watcher (:class:`scabbard.engine.metrics.Metrics`): its samples."""
        if line["event"] == "sample":
            self.sample(line["tuples"], line["t"])

    def rate(self, tuples: int, seconds: float) -> float:
        """Tuples a second from the first sample at or after ``seconds / 2`` to the end (the
        run's ``tuples`` in ``seconds``); NaN without one."""
        later = [(t, n) for t, n in self.samples if seconds / 2 <= t < seconds]
        if not later:
            return float("nan")
        t, n = later[0]
        return (tuples - n) / (seconds - t)


def _folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def run(settings: Settings, log=print) -> pd.DataFrame:
    """Every query in every configuration and worker count (``rounds`` times, each round
    starting one configuration later, so that none is always first): one row per run."""
    runs = [(c, w) for w in settings.worker_counts for c in settings.configs]
    rows = []
    with scratch(settings.storage_dir, settings.data_dir, "scabbard-checkpoints-") as root:
        for q in settings.queries:
            ds = prepared_dataset(q, settings.scale, settings.data_dir,
                                  max(settings.worker_counts), settings.seconds)
            # each configuration once, unmeasured: its kernels compiled (a fresh cache) or
            # loaded, the data paged in - a fresh machine's first run of the copy-and-hash
            # kernels spent nearly all of its 3 s compiling them (CM1 raw: 1 M tuples/s)
            warm = dataclasses.replace(settings, seconds=min(WARM_S, settings.seconds))
            for config in settings.configs:
                measure(q, config, 1, ds, root / f"{q}-{config}-warm", warm)
                shutil.rmtree(root / f"{q}-{config}-warm", ignore_errors=True)
            for rnd in range(settings.rounds):
                k = rnd % len(runs)
                for config, w in (*runs[k:], *runs[:k]):
                    m = measure(q, config, w, ds, root / f"{q}-{config}-{w}", settings)
                    rows.append({"query": q, "config": config, "workers": w, "round": rnd, **m})
                    extra = (f"  {m['checkpoints']} checkpoints, avg {m['checkpoint_ms']:.1f} ms"
                             if m["checkpoints"] else "")
                    stored = (f", {m['persisted_bytes_per_tuple']:.2f} B/tuple persisted"
                              if m["persisted_bytes_per_tuple"] else "")
                    log(f"{q:5} {config:14} {w} workers {m['tuples_per_s'] / 1e6:9.2f} M tuples/s"
                        f" (second half {m['steady_tuples_per_s'] / 1e6:.2f}){stored}{extra}")
    return pd.DataFrame(rows)


def _medians(runs: pd.DataFrame) -> pd.DataFrame:
    return runs.groupby(["query", "config", "workers"], sort=False).median(numeric_only=True)


def summary(runs: pd.DataFrame, workers: int | None = None) -> pd.DataFrame:
    """Table 4 on this machine at ``workers`` (default: the most measured), one row per query:
    each configuration's throughput, the overheads against *no FT, written*, the scaling from
    the fewest workers, bytes persisted, checkpoint time, and the paper's figures beside."""
    med = _medians(runs)
    counts = sorted(runs["workers"].unique())
    w = workers or counts[-1]
    at = med.xs(w, level="workers")
    tput = at["tuples_per_s"].unstack("config") / 1e6
    out = pd.DataFrame(index=tput.index)
    for c in MEASURABLE:
        if c in tput:
            out[f"{LABELS[c]} M tuples/s"] = tput[c]
    base = "no_ft_written" if "no_ft_written" in tput else "no_ft"
    for c in ("checkpoints", *PERSISTING):
        if c in tput and base in tput:
            ref = "no_ft" if c == "checkpoints" and "no_ft" in tput else base
            out[f"{LABELS[c]} overhead"] = 1 - tput[c] / tput[ref]
    if len(counts) > 1 and w != counts[0]:
        low = med.xs(counts[0], level="workers")["tuples_per_s"].unstack("config") / 1e6
        for c in ("no_ft", "ft_raw", "scabbard"):
            if c in tput and c in low:
                out[f"{LABELS[c]} {w} / {counts[0]} workers"] = tput[c] / low[c]
    if {"ft_raw", "ingest", base} <= set(tput):  # raw FT against its two ceilings
        out[f"{LABELS['ft_raw']} / lower of no FT written and ingest"] = \
            tput["ft_raw"] / np.minimum(tput[base], tput["ingest"])
        if "steady_tuples_per_s" in at:  # the same, each run's second half
            half = at["steady_tuples_per_s"].unstack("config")
            out[f"{LABELS['ft_raw']} / lower of no FT written and ingest, second halves"] = \
                half["ft_raw"] / np.minimum(half[base], half["ingest"])
    for c in PERSISTING:
        if c in tput:
            b = at["persisted_bytes_per_tuple"].unstack("config")[c]
            out[f"{LABELS[c]} B/tuple persisted"] = b
    ck = at["checkpoint_ms"].unstack("config") if "checkpoint_ms" in at else pd.DataFrame()
    for c in ("checkpoints", *PERSISTING):
        if c in ck:
            out[f"{LABELS[c]} checkpoint ms"] = ck[c]
    if "checkpoints" in tput:
        out["state MB"] = at["state_mb"].unstack("config")["checkpoints"]
    out = out.reset_index().merge(PAPER, on="query", how="left")
    return out.rename(columns={"paper_state_mb": "paper state MB",
                               "paper_checkpoint_ms": "paper checkpoint ms",
                               "paper_overhead": "paper overhead"})


def parts(runs: pd.DataFrame) -> pd.DataFrame:
    """The CPU of each part in ns per input tuple (medians of the rounds), one row per query,
    configuration and worker count, with the throughput beside, the cores the process kept
    busy (its CPU seconds per second: a run on 1 worker uses the other core too, for the
    storage's and the sink's threads) and the bytes it stored per second (input, state and
    results: where they reach raw ingest's rate, the run is bound by the disk; without a
    disk, the input's bytes built and acknowledged as if written)."""
    med = _medians(runs)
    cols = ["tuples_per_s", "steady_tuples_per_s", "batch_rows", "cpu_ns_per_tuple",
            *[f"ns_{p}" for p in PARTS], "cores", "disk_mb_per_s"]
    out = med[[c for c in cols if c in med]].reset_index()
    out["M tuples/s"] = out.pop("tuples_per_s") / 1e6
    if "steady_tuples_per_s" in out:
        out["2nd half"] = out.pop("steady_tuples_per_s") / 1e6
    return out.rename(columns={f"ns_{p}": p for p in PARTS} | {"cpu_ns_per_tuple": "CPU ns",
                                                                "disk_mb_per_s": "disk MB/s"})


def headline(table: pd.DataFrame) -> str:
    """The target lines: the median overheads across the queries."""
    lines = []
    ck = f"{LABELS['checkpoints']} overhead"
    if ck in table:
        lines.append(f"median checkpoint overhead across {len(table)} queries: "
                     f"{table[ck].median():.1%} (paper 1-14%)")
    share = f"{LABELS['ft_raw']} / lower of no FT written and ingest"
    if share in table:
        lines.append(f"{LABELS['ft_raw']}: {table[share].min():.0%}-{table[share].max():.0%} of "
                     f"the lower of no FT writing its results and raw persisted ingest "
                     f"(median {table[share].median():.0%})")
    half = f"{share}, second halves"
    if half in table:
        lines.append(f"{LABELS['ft_raw']}, each run's second half: "
                     f"{table[half].min():.0%}-{table[half].max():.0%} "
                     f"(median {table[half].median():.0%})")
    for c in ("checkpoints", *PERSISTING):
        col = f"{LABELS[c]} checkpoint ms"
        if col in table and table[col].notna().any():
            worst = table[col].idxmax()
            lines.append(f"{LABELS[c]}: checkpoints take {table[col].median():.0f} ms on "
                         f"average (median of the queries; longest {table.loc[worst, col]:.0f}"
                         f" ms, {table.loc[worst, 'query']})")
    for c in PERSISTING:
        col = f"{LABELS[c]} overhead"
        if col in table:
            lines.append(f"{LABELS[c]}: median overhead {table[col].median():.1%} against no FT "
                         f"writing its results (worst {table[col].max():.1%}, "
                         f"{table.loc[table[col].idxmax(), 'query']})")
    return "\n".join(lines)


def save(runs: pd.DataFrame, output_dir: str | Path) -> Path:
    return save_tables(output_dir, results=summary(runs), parts=parts(runs), runs=runs)


def plot(table: pd.DataFrame, output_dir: str | None = None):
    """Throughput per configuration, and checkpoint time against state size (ours, paper's)."""
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 4))
    x = np.arange(len(table))
    bars = [(f"{LABELS[c]} M tuples/s", LABELS[c]) for c in CONFIGS
            if f"{LABELS[c]} M tuples/s" in table]
    w = 0.8 / max(1, len(bars))
    at = {}
    for i, (col, label) in enumerate(bars):
        at[col] = x + (i - (len(bars) - 1) / 2) * w
        ax.bar(at[col], table[col], w, label=label)
    over, top = f"{LABELS['scabbard']} overhead", f"{LABELS['scabbard']} M tuples/s"
    if over in table and top in at:
        for xi, ov, y in zip(at[top], table[over], table[top], strict=True):
            ax.annotate(f"{-ov:+.0%}", (xi, y), ha="center", va="bottom", fontsize=7)
    ax.set_yscale("log")
    ax.set_xticks(x, table["query"])
    ax.set_ylabel("M tuples/s")
    ax.set_title("Throughput (label: Scabbard against no FT writing its results)")
    ax.legend(fontsize=7)
    if "state MB" in table:
        ms = f"{LABELS['checkpoints']} checkpoint ms"
        bx.scatter(table["state MB"], table[ms], label="this machine")
        bx.scatter(table["paper state MB"], table["paper checkpoint ms"], marker="x",
                   label="paper (16 cores, SSD)")
        for _, r in table.iterrows():
            bx.annotate(r["query"], (r["state MB"], r[ms]), fontsize=7)
        bx.set_xscale("symlog", linthresh=1)
        bx.set_xlabel("state per checkpoint (MB)")
        bx.set_ylabel("avg checkpoint time (ms)")
        bx.set_title("Checkpoint time vs state size (checkpoints only)")
        bx.legend(fontsize=8)
    return finish(fig, output_dir, "checkpointing.png", dpi=120)


def bench(settings: Settings, out: Path, log=print) -> int:
    """``scabbard bench checkpoints``: the runs, the table, the CPU per part, the headline,
    the tables and figure in ``out``."""
    runs = run(settings, log=log)
    table = summary(runs)
    with wide():
        log("\n" + table.round(3).T.to_string(header=False))
        log("\nCPU per input tuple, ns (medians):\n" + parts(runs).round(2).to_string(index=False))
    log(headline(table))
    csv = save(runs, out)
    plot(table, out)
    log(f"\nresults: {csv}, figure: {Path(out) / 'checkpointing.png'}")
    return 0
