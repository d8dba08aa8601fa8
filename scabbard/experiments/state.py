"""Notebook 13 (b) / ``scabbard bench state``: Darwin's Fig. 5 on this machine.

Darwin (CIDR 2022, §4, Fig. 5) runs its micro-benchmark - a 60 s tumbling sum per key over
32-byte records, the number of keys setting the state's size - on engines whose state lives
in memory and on engines whose state lives in RocksDB on the local disk.  Here, per number
of keys, on the same dataset (:mod:`scabbard.workloads.darwin`, generated with Spark):

* the engine without fault tolerance: its state in memory, and held within ``state_memory``
  bytes (key partitions spilled to disk, :mod:`scabbard.engine.spill`); and with checkpoints
  every ``interval`` seconds, its state in memory or within the budget (the spilled units
  are then the checkpoint's state); each in a process of its own whose peak resident memory is
  measured (``wait4``), and its anonymous memory sampled (the dataset is memory-mapped: its
  pages count as resident but are the page cache's) - also above the anonymous memory it
  held once its code was loaded (a run of the first :data:`WARM_TUPLES` tuples, same
  settings), which is what the run itself holds: tasks in flight, state, buffers;
* Spark Structured Streaming with the RocksDB state store provider;
* Flink SQL with the embedded RocksDB state backend (its native library checked loaded).

Every run processes the whole dataset once; the peers' throughput is over their own
processing time (Spark: the streaming queries; Flink: the job's net runtime), not their
start-up.

``run`` returns one tidy row per (keys, system, round); ``summary`` the medians side by side
with the ratios; ``plot`` Fig. 5's bars.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from scabbard.experiments import default_data_dir, finish, save_tables
from scabbard.ft.modes import INTERVAL

SYSTEMS = ("engine", "engine-spill", "engine-ft", "engine-ft-spill", "spark-rocksdb",
           "flink-rocksdb")
LABELS = {"engine": "engine, in memory", "engine-spill": "engine, state within the budget",
          "engine-ft": "engine, in memory + checkpoints",
          "engine-ft-spill": "engine, within the budget + checkpoints",
          "spark-rocksdb": "Spark, RocksDB state", "flink-rocksdb": "Flink, RocksDB state"}


@dataclass(frozen=True)
class Settings:
    key_counts: Sequence[int] = (10_000, 1_000_000)
    systems: Sequence[str] = SYSTEMS
    event_seconds: float = 300.0  # the dataset: five 60 s windows
    rate: float = field(default=40_000.0, metadata={  # 2.4 M tuples per window
        "help": "the dataset's tuples per event second (a 60 s window holds 60 times as many)"})
    in_memory_keys: int = 0  # bench state-recovery: engine-ft at key counts up to this only
    rounds: int = 1
    workers: int = 2
    interval: float = INTERVAL  # engine-ft: checkpoint interval, seconds
    state_memory: int = 16 << 20  # engine-spill: the window state's memory budget, bytes
    data_dir: str = field(default_factory=default_data_dir)
    output_dir: str = "."

    def __post_init__(self) -> None:
        object.__setattr__(self, "key_counts", tuple(int(k) for k in self.key_counts))
        object.__setattr__(self, "systems", tuple(self.systems))
        bad = [s for s in self.systems if s not in SYSTEMS]
        if bad:
            raise ValueError(f"unknown system {bad[0]!r} (choose from {', '.join(SYSTEMS)})")
        if not self.key_counts or min(self.key_counts) < 1:
            raise ValueError("key counts: at least one, each >= 1")
        if self.event_seconds <= 0 or self.rate <= 0 or self.rounds < 1 or self.workers < 1:
            raise ValueError("event seconds and rate must be positive, rounds and workers >= 1")
        if self.in_memory_keys < 0:
            raise ValueError("--in-memory-keys: a key count, or 0 for every one")
        from scabbard.engine.spill import MIN_STATE_MEMORY

        if self.state_memory < MIN_STATE_MEMORY:
            raise ValueError(f"state memory: at least {MIN_STATE_MEMORY >> 20} MiB")


# a window's tuples at least this many times its key count: uniform keys drawn twice as often
# as there are keys leave 1 - e^-2 = 86 % of them in the window's state
WINDOW_DRAWS = 2


def rate_for(keys: int, s: Settings) -> float:
    """Fig. 2's dataset rate for ``keys`` keys: ``s.rate``, or more where a window would see
    fewer than :data:`WINDOW_DRAWS` tuples a key (there the key count is the state's size:
    4.3 GB at 1.2 x 10^8 keys needs 4 M tuples a second).  Fig. 5 (:func:`run`) keeps
    ``s.rate``, as its figures were measured."""
    from scabbard.workloads import darwin

    return max(s.rate, WINDOW_DRAWS * keys / darwin.WINDOW_S)


def dataset(keys: int, s: Settings, rate: float | None = None):
    """Darwin's records with ``keys`` keys at ``rate`` (default ``s.rate``), generated once,
    then reused."""
    from scabbard.workloads import darwin

    return darwin.SPEC.generate(duration=s.event_seconds, rate=rate or s.rate,
                                options={"keys": keys}, out=s.data_dir, progress=False)


# -- the engine, in a process of its own -------------------------------------------------------
def _child(spec: dict) -> dict:
    """One engine run (in the child process): the whole dataset once."""
    from scabbard import queries
    from scabbard.data import open_dataset
    from scabbard.engine import EngineConfig, NullSink, Replay, memory, run_query
    from scabbard.ft.spillstore import disk_spill

    q, ds = queries.get("DARWIN"), open_dataset(spec["data"])

    def config(work: str) -> EngineConfig:
        return EngineConfig(workers=spec["workers"], state_memory=spec.get("state_memory"),
                            spill=disk_spill(work) if spec.get("state_memory") else None)

    # the engine's code loaded (and little else: a run of a few tuples), then the run
    run_query(q, ds, NullSink(), config(str(Path(spec["work"]) / "warm")),
              Replay(max_tuples=WARM_TUPLES))
    start, cfg = AnonPeak.now(), config(spec["work"])
    anon = AnonPeak()
    checkpoint_ms = float("nan")
    if not spec["system"].startswith("engine-ft"):
        rep = run_query(q, ds, NullSink(), cfg)
    else:
        from scabbard.ft.recovery import run_fault_tolerant
        from scabbard.ft.sinks import DiscardSink

        work = Path(spec["work"])
        r = run_fault_tolerant(q, ds, work / "storage", DiscardSink(work / "output"), cfg,
                               interval=spec["interval"], persist_input=False)
        rep = r.run
        if r.checkpoints:
            checkpoint_ms = float(np.median([c.duration_s * 1e3 for c in r.checkpoints]))
    st = next(iter(rep.spilled.values()), {})
    summary = rep.summary
    return {"tuples": summary.tuples, "seconds": summary.seconds,
            "result_rows": summary.result_rows,
            # each window's latency: its result's time less its last tuple's ingest time
            **{f"latency_{p}_ms": summary.latency_ms.get(p, float("nan")) for p in LATENCY},
            "peak_anon_mb": anon.stop() / 2**20, "start_anon_mb": start / 2**20,
            "state_peak_mb": st.get("peak_bytes", float("nan")) / 2**20,
            "budget_mb": st.get("budget", float("nan")) / 2**20,
            "spilled_mb": st.get("spilled_bytes", 0) / 1e6, "checkpoint_ms": checkpoint_ms,
            "malloc_arenas": memory.arenas()}


class AnonPeak:
    """The largest anonymous resident memory of this process (``RssAnon``: not the pages of
    the memory-mapped dataset, which the kernel may drop at will), sampled every 20 ms."""

    def __init__(self):
        import threading

        self.peak, self._done = 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    @staticmethod
    def now() -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
        return 0

    def _sample(self) -> None:
        while not self._done.wait(0.02):
            self.peak = max(self.peak, self.now())

    def stop(self) -> int:
        self._done.set()
        self._thread.join()
        return max(self.peak, self.now())


LATENCY = ("p50", "p95")  # the latency percentiles notebook 13 (a) shows
WARM_TUPLES = 4096  # the run that loads the engine's code before the measured one


# the child: the allocator applied before anything starts a thread (pandas' imports do, and
# the memory sampler; engine/memory.py), then the run of :func:`_child`
CHILD = ("from scabbard.engine import memory; memory.tune()\n"
         "import json, sys\n"
         "from scabbard.experiments.state import _child\n"
         "print(json.dumps(_child(json.loads(sys.argv[1]))))")


def engine_run(system: str, data: Path, s: Settings, work: Path) -> dict:
    """An engine run in a child process: its figures and its peak resident memory."""
    spec = {"system": system, "data": str(data), "workers": s.workers, "interval": s.interval,
            "work": str(work),
            "state_memory": s.state_memory if system.endswith("-spill") else None}
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(spec)], stdout=out,
                                stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err = proc.stderr.read().decode(errors="replace")
        if proc.returncode != 0:
            raise RuntimeError(f"the {system} run failed (exit code {proc.returncode}): "
                               f"{err.strip().splitlines()[-1] if err.strip() else ''}")
        out.seek(0)
        got = json.loads(out.read().decode().strip().splitlines()[-1])
    return {**got, "peak_rss_mb": usage.ru_maxrss / 1024}  # KiB on Linux


def peer_run(system: str, ds, work: Path) -> dict:
    from scabbard import queries

    q = queries.get("DARWIN")
    if system == "spark-rocksdb":
        from scabbard.peers.spark import Results, run_spark

        r = run_spark(q, ds, workdir=work / "spark", state_store="rocksdb",
                      results=Results(work / "result", False))
        return {"tuples": r.tuples, "seconds": r.seconds, "result_rows": r.rows}
    from scabbard.peers.flink import run_flink

    r = run_flink(q, ds, workdir=work, state_backend="rocksdb", timeout_s=3600)
    return {"tuples": r.tuples, "seconds": r.seconds,
            "result_rows": len(next(iter(r.columns.values()), []))}


def run(settings: Settings, log=print) -> pd.DataFrame:
    """Every system on every key count, ``rounds`` times (systems alternating); saved as
    ``state_runs.csv`` and ``results.csv`` in the output folder."""
    s, rows = settings, []
    for keys in s.key_counts:
        ds = dataset(keys, s)
        for rnd in range(s.rounds):
            k = rnd % len(s.systems)
            for system in (*s.systems[k:], *s.systems[:k]):
                work = Path(tempfile.mkdtemp(prefix="scabbard-state-", dir=s.data_dir))
                try:
                    t0 = time.perf_counter()
                    got = engine_run(system, ds.path, s, work) if system.startswith("engine") \
                        else peer_run(system, ds, work)
                finally:
                    shutil.rmtree(work, ignore_errors=True)
                row = {"keys": keys, "system": system, "round": rnd, **got,
                       "tuples_per_s": got["tuples"] / got["seconds"],
                       "wall_s": time.perf_counter() - t0}
                rows.append(row)
                rss = (f", peak {row['peak_rss_mb']:6.0f} MB resident, {row['peak_anon_mb']:6.0f}"
                       f" MB anonymous, latency p95 {row['latency_p95_ms']:7.1f} ms"
                       if "peak_rss_mb" in row else "")
                log(f"{keys:>11,} keys  {system:14s} {row['tuples_per_s'] / 1e6:9.2f} M tuples/s"
                    f"{rss}  ({row['result_rows']:,} result rows, {row['wall_s']:.0f} s)")
    runs = pd.DataFrame(rows)
    save_tables(s.output_dir, results=summary(runs), state_runs=runs)
    return runs


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per key count: each system's median tuples/s (and the engine's peak memory), and the
    engine's throughput (in memory, and within the budget) over each RocksDB peer's."""
    med = runs.groupby(["keys", "system"]).median(numeric_only=True)
    tput = med["tuples_per_s"].unstack("system") / 1e6
    out = tput.rename(columns=lambda c: f"{c} M tuples/s")
    for what in ("peak_rss_mb", "peak_anon_mb", "state_peak_mb"):
        if what in med:
            got = med[what].unstack("system")
            for c in got.columns:
                if c.startswith("engine") and got[c].notna().any():
                    out[f"{c} {what.removesuffix('_mb').replace('_', ' ')} MB"] = got[c]
    if "budget_mb" in med:  # what the process holds beside the state's budget
        over = (med["peak_anon_mb"] - med["budget_mb"]).unstack("system")
        for c in over.columns:
            if over[c].notna().any():
                out[f"{c} anon over budget MB"] = over[c]
    if "start_anon_mb" in med:  # what the run holds above its loaded code
        above = (med["peak_anon_mb"] - med["start_anon_mb"]).unstack("system")
        for c in above.columns:
            if c.startswith("engine") and above[c].notna().any():
                out[f"{c} anon above its start MB"] = above[c]
    if "engine" in tput and "engine-spill" in tput:
        out["spill / in memory"] = tput["engine-spill"] / tput["engine"]
    if "engine-ft" in tput and "engine-ft-spill" in tput:
        out["spill / in memory, with checkpoints"] = tput["engine-ft-spill"] / tput["engine-ft"]
    if "checkpoint_ms" in med:
        got = med["checkpoint_ms"].unstack("system")
        for c in got.columns:
            if got[c].notna().any():
                out[f"{c} checkpoint ms"] = got[c]
    for peer in ("spark-rocksdb", "flink-rocksdb"):
        for engine in ("engine", "engine-spill"):  # Darwin's comparison: the spilling engine's
            if engine in tput and peer in tput:
                out[f"{engine} / {peer}"] = tput[engine] / tput[peer]
    return out.reset_index()


def latency(runs: pd.DataFrame) -> pd.DataFrame:
    """Notebook 13 (a): per key count, each engine system's window latency percentiles (ms,
    medians over rounds) - the engine runs the dataset as fast as it goes, so a window's
    latency is the time its last task spent queued and run, its assembly, and (spilling)
    the reload of the partitions it needs."""
    engine = runs[runs["system"].str.startswith("engine")]
    cols = [f"latency_{p}_ms" for p in LATENCY if f"latency_{p}_ms" in engine]
    med = engine.groupby(["keys", "system"])[cols].median().unstack("system")
    med.columns = [f"{system} {col.removeprefix('latency_').removesuffix('_ms')} ms"
                   for col, system in med.columns]
    return med.reset_index()


def plot(runs: pd.DataFrame, output_dir: str | None = None):
    """Darwin's Fig. 5: throughput per system, a group of bars per key count (log scale, the
    rounds' range as a bar's whisker); beside it, where the runs measured it, what each
    engine run held above its loaded code against the budget plus 64 MiB."""
    import matplotlib.pyplot as plt

    by = runs.groupby(["keys", "system"])
    above = runs.get("peak_anon_mb", np.nan) - runs.get("start_anon_mb", np.nan)
    memory = runs.assign(above=above).dropna(subset=["above"])
    if len(memory):
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 3.8), width_ratios=[3, 2])
    else:
        fig, ax = plt.subplots(figsize=(7, 3.8))
    tput = by["tuples_per_s"].agg(["median", "min", "max"]) / 1e6
    keys = sorted(runs["keys"].unique())
    _bars(ax, tput, keys, [c for c in SYSTEMS if c in tput.index.get_level_values("system")])
    ax.set_yscale("log")
    ax.set_ylabel("M tuples/s")
    ax.set_title("Darwin's micro-benchmark: a 60 s tumbling sum per key")
    ax.legend(fontsize=8)
    if len(memory):
        mem = memory.groupby(["keys", "system"])["above"].agg(["median", "min", "max"])
        _bars(bx, mem, keys, [c for c in SYSTEMS if c in mem.index.get_level_values("system")])
        budget = runs["budget_mb"].dropna() if "budget_mb" in runs else pd.Series(dtype=float)
        if len(budget):
            bx.axhline(budget.max() + 64, color="black", ls="--", lw=1,
                       label=f"budget + 64 MiB ({budget.max() + 64:.0f} MB)")
        bx.set_yscale("log")
        bx.set_ylabel("MB above the run's start")
        bx.set_title("anonymous memory above the run's start")
        bx.legend(fontsize=8)
    return finish(fig, output_dir, "state.png")


def _bars(ax, stats: pd.DataFrame, keys: list, systems: list) -> None:
    """A group of bars per key count, one per system: ``stats``' median, its min-max range
    as the whisker (indexed by key count and system)."""
    x, width = np.arange(len(keys)), 0.8 / max(1, len(systems))
    for j, c in enumerate(systems):
        got = stats.xs(c, level="system").reindex(keys)
        mid, lo, hi = (got[k].to_numpy() for k in ("median", "min", "max"))
        ax.bar(x + (j - (len(systems) - 1) / 2) * width, mid, width, label=LABELS[c],
               yerr=[mid - lo, hi - mid], capsize=2)
    ax.set_xticks(x, [f"{k:,} keys" for k in keys])


def plot_budget(runs: pd.DataFrame, output_dir: str | None = None):
    """Notebook 13 (a): as the state grows past the budget, the engine within the budget
    against the engine holding it all in memory - throughput (left) and anonymous memory
    (right), per key count."""
    import matplotlib.pyplot as plt

    med = runs.groupby(["keys", "system"]).median(numeric_only=True)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.6))
    for c in ("engine", "engine-spill"):
        if c not in med.index.get_level_values("system"):
            continue
        m = med.xs(c, level="system")
        ax.plot(m.index, m["tuples_per_s"] / 1e6, "o-", label=LABELS[c])
        bx.plot(m.index, m["peak_anon_mb"], "o-", label=LABELS[c])
    if "state_peak_mb" in med:
        m = med.xs("engine-spill", level="system") if "engine-spill" in \
            med.index.get_level_values("system") else None
        if m is not None:
            bx.plot(m.index, m["state_peak_mb"], "s--", label="window state held (spilling)")
    for a, label in ((ax, "M tuples/s"), (bx, "peak MB")):
        a.set_xscale("log")
        a.set_xlabel("distinct keys (the window state's size)")
        a.set_ylabel(label)
        a.legend(fontsize=8)
    ax.set_title("throughput")
    bx.set_title("anonymous memory (the dataset is memory-mapped)")
    return finish(fig, output_dir, "state_budget.png")


# -- notebook 13 (c): Darwin's Fig. 2 ----------------------------------------------------------
RECOVERY_SYSTEMS = ("engine-ft", "engine-ft-spill")
RECOVERY_BATCH = 1 << 16  # tuples per task in both systems: the same cut points


def recovery(settings: Settings, log=print) -> pd.DataFrame:
    """Darwin's Fig. 2 on this machine: per key count, the engine with checkpoints - its state
    in memory, or within ``state_memory`` (the spilled units are the checkpoint's state) - is
    stopped halfway through the dataset (a window half full, every ``1/8`` of the way a
    checkpoint), then recovered and run over the next window's end.  One row per (keys,
    system, round): the state the last checkpoint holds, the checkpoints' median duration
    and bytes written, the recovery's state load (for spilled state: the listed units found
    stored, none read) and the recovered run's processing time - which includes, for
    spilled state, reading each partition back as its first window closes and verifying
    every listed unit behind the run.  Saved as
    ``recovery.csv``."""
    from scabbard import queries
    from scabbard.engine import EngineConfig
    from scabbard.engine.runtime import Engine
    from scabbard.engine.sources import StopAfter
    from scabbard.engine.tasks import partials_schema
    from scabbard.ft.recovery import run_fault_tolerant
    from scabbard.ft.sinks import DiscardSink

    s, rows, q = settings, [], queries.get("DARWIN")
    systems = [x for x in RECOVERY_SYSTEMS if x in s.systems]
    if not systems:
        from scabbard.errors import FlagError

        raise FlagError(f"--systems: Darwin's Fig. 2 measures "
                        f"{' and '.join(RECOVERY_SYSTEMS)}, not {', '.join(s.systems)}")
    for keys in s.key_counts:
        rate = rate_for(keys, s)
        ds = dataset(keys, s, rate)
        if rate > s.rate:
            log(f"{keys:>11,} keys  at {rate:,.0f} tuples/s (a window sees twice as many tuples "
                f"as keys)")
        row_bytes = partials_schema(Engine(q, ds.tables).plan.branches[0], "x").row_bytes
        stop = max(2, ds.rows // 2 // RECOVERY_BATCH)  # halfway: a window half full
        every = max(1, stop // 8)  # a checkpoint every eighth of the way
        after = max(1, int(ds.rows * 0.15) // RECOVERY_BATCH)  # over the next window's end
        here = [x for x in systems if x != "engine-ft" or not 0 < s.in_memory_keys < keys]
        if len(here) < len(systems):
            log(f"{keys:>11,} keys  engine-ft not run: above --in-memory-keys "
                f"{s.in_memory_keys:,}")
        for rnd in range(s.rounds):
            for system in here:
                work = Path(tempfile.mkdtemp(prefix="scabbard-state-", dir=s.data_dir))
                budget = s.state_memory if system.endswith("-spill") else None

                def ft(k, work=work, budget=budget, ds=ds, every=every, **kw):
                    return run_fault_tolerant(
                        q, ds, work / "storage", DiscardSink(work / "output"),
                        EngineConfig(workers=s.workers, batch_rows=RECOVERY_BATCH),
                        interval=None, every_tasks=every, persist_input=False,
                        wrap_source=lambda src: StopAfter(src, k), state_memory=budget, **kw)
                try:
                    first = ft(stop)
                    last = first.checkpoints[-1]
                    units = [u for p in last.state for u in p.get("units", ())]
                    state_mb = (sum(e - f for _, f, e in units) * row_bytes if units
                                else last.bytes) / 1e6
                    t0 = time.perf_counter()
                    rec = ft(after, recover=True)
                    wall = time.perf_counter() - t0
                finally:
                    shutil.rmtree(work, ignore_errors=True)
                st = next(iter(rec.run.spilled.values()), {})
                row = {"keys": keys, "system": system, "round": rnd, "state_mb": state_mb,
                       "checkpoints": len(first.checkpoints),
                       "checkpoint_ms": float(np.median([c.duration_s * 1e3
                                                         for c in first.checkpoints])),
                       "checkpoint_written_mb": float(np.median([c.bytes for c in
                                                                 first.checkpoints])) / 1e6,
                       "open_ms": rec.loaded.get("open_ms", float("nan")),
                       "load_ms": rec.loaded.get("load_ms", float("nan")),
                       "catch_up_s": rec.run.summary.seconds, "recovery_wall_s": wall,
                       "reloaded_mb": st.get("reloaded_bytes", 0) / 1e6}
                rows.append(row)
                log(f"{keys:>11,} keys  {system:16s} state {state_mb:8.1f} MB  checkpoint "
                    f"{row['checkpoint_ms']:7.1f} ms ({row['checkpoint_written_mb']:.1f} MB)  "
                    f"storage opened {row['open_ms']:7.1f} ms  load {row['load_ms']:7.1f} ms  "
                    f"recovered run {row['catch_up_s']:.2f} s")
    runs = pd.DataFrame(rows)
    save_tables(s.output_dir, recovery=runs)
    return runs


def recovery_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per key count and system: the medians of :func:`recovery`'s figures."""
    cols = ["state_mb", "checkpoint_ms", "checkpoint_written_mb", "open_ms", "load_ms",
            "catch_up_s", "recovery_wall_s", "reloaded_mb"]
    return runs.groupby(["keys", "system"])[cols].median().reset_index()


def _count(k: int) -> str:
    """A key count, short: 1 M, 30 M, 10 k."""
    return f"{k / 1e6:g} M" if k >= 10**6 else f"{k / 1e3:g} k" if k >= 1000 else str(k)


def plot_recovery(runs: pd.DataFrame, output_dir: str | None = None):
    """Darwin's Fig. 2: checkpoint time (left), the recovery's storage opening and state load
    (middle) and the recovered run's processing time (right) against the number of keys (the
    state's size; the right panel's points say how many MB the last checkpoint held), state
    in memory vs spilled."""
    import matplotlib.pyplot as plt

    med = recovery_summary(runs)
    med["opened_loaded_ms"] = med["open_ms"] + med["load_ms"]
    keys = sorted(med["keys"].unique())
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8))
    for what, ax, title in (("checkpoint_ms", axes[0], "checkpoint (ms)"),
                            ("opened_loaded_ms", axes[1],
                             "recovery: storage opened + state loaded (ms)"),
                            ("catch_up_s", axes[2], "recovered run, to the next window (s)")):
        for system in RECOVERY_SYSTEMS:
            m = med[med["system"] == system].sort_values("keys")
            if not len(m):
                continue
            ax.plot(m["keys"], m[what], "o-", label=LABELS[system])
            if what == "catch_up_s":
                for x, y, mb in zip(m["keys"], m[what], m["state_mb"], strict=True):
                    ax.annotate(f"{mb:,.0f} MB", (x, y), textcoords="offset points",
                                xytext=(4, 4), fontsize=7)
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.margins(y=0.15)  # (room for the points' labels at the top)
        ax.set_xticks(keys, [_count(k) for k in keys])
        ax.set_xlabel("distinct keys (right: MB the last checkpoint lists)")
        ax.set_title(title, fontsize=10)
    axes[0].legend(fontsize=8, loc="upper left")  # one legend for the three panels
    return finish(fig, output_dir, "state_recovery.png")
