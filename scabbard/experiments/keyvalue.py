"""Notebook 13 (d) / ``scabbard bench keyvalue``: Darwin's Figs. 1 and 3 on this machine.

Darwin (CIDR 2022, §2) opens with two micro-benchmarks of state stores: insert and get
throughput against the number of records a store holds (Fig. 1: TBB in memory, Viper on
PMem, RocksDB on SSD), and inserts of single records against records in groups of 50
(Fig. 3).  Here, in one process and one thread, on this machine's disk:

* ``keystore`` - the engine's per-key store (:class:`scabbard.storage.keystore.KeyStore`:
  Viper's shape, a log of records written in groups and an index in memory);
* ``rocksdb`` - RocksDB in the same process through ``rocksdict`` (its default options:
  a write-ahead log, not synced per write - like the keystore between checkpoints).

Records are an 8-byte key and ``width`` float64 words (5: 48 bytes, the paper's 50).  Each
store is prefilled with ``keys`` records, then ``ops`` new records are inserted and ``ops``
existing keys (uniformly drawn) are read, ``batch`` at a call (a write batch and a multi-get
for RocksDB, the values decoded into an array as the keystore returns them).  Fig. 3's
inserts: ``individual_ops`` records one at a call, then in calls of ``group``.  Every
(key count, store) is run ``rounds`` times, the stores alternating which goes first.

``run`` returns one row per (keys, store, round, operation); ``summary`` the medians side by
side with the keystore's ratio over RocksDB; ``plot`` both figures.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from scabbard.experiments import Common, caption, finish, save_tables, scratch

STORES = ("keystore", "rocksdb")
LABELS = {"keystore": "keystore (log + index, this engine)", "rocksdb": "RocksDB (rocksdict)"}
OPS = ("insert", "get", "insert, one a call", "insert, groups")


@dataclass(frozen=True)
class Settings(Common):
    record_counts: Sequence[int] = (100_000, 1_000_000, 10_000_000)
    stores: Sequence[str] = STORES
    ops: int = 1_000_000  # inserts and gets measured after the prefill
    batch: int = 10_000  # records a call (Fig. 1)
    individual_ops: int = 100_000  # Fig. 3's inserts, one a call and in groups
    group: int = 50  # Fig. 3's group
    width: int = 5  # float64 words a value
    rounds: int = 3
    storage_dir: str | None = None  # the stores' folder (None: a scratch folder by the data)
    output_dir: str = "."

    def __post_init__(self) -> None:
        object.__setattr__(self, "record_counts", tuple(int(k) for k in self.record_counts))
        object.__setattr__(self, "stores", tuple(self.stores))
        bad = [s for s in self.stores if s not in STORES]
        if bad:
            raise ValueError(f"unknown store {bad[0]!r} (choose from {', '.join(STORES)})")
        if not self.record_counts or min(self.record_counts) < 1:
            raise ValueError("key counts: at least one, each >= 1")
        if min(self.ops, self.batch, self.individual_ops, self.group, self.width,
               self.rounds) < 1:
            raise ValueError("ops, batch, individual ops, group, width and rounds: each >= 1")


class _Keystore:
    def __init__(self, folder: Path, width: int | None, durability: str = "process"):
        from scabbard.storage.keystore import KeyStore

        # process durability while inserting and reading, like RocksDB's unsynced write-ahead
        # log; Fig. 2's checkpoints flush what they cover (machine durability)
        self.store = KeyStore(folder, width, durability=durability)

    def put(self, keys: np.ndarray, values: np.ndarray) -> None:
        self.store.put(keys, values)

    def get(self, keys: np.ndarray) -> np.ndarray:
        return self.store.get(keys)[0]

    def close(self) -> None:
        self.store.close()


class _Rocks:
    def __init__(self, folder: Path, width: int):
        from rocksdict import Options, Rdict, WriteBatch

        self.width, self.batch_type = width, WriteBatch
        self.db = Rdict(str(folder), Options(raw_mode=True))

    def put(self, keys: np.ndarray, values: np.ndarray) -> None:
        kb, vb, vw = keys.astype(">i8").tobytes(), values.tobytes(), 8 * self.width
        if keys.size == 1:
            self.db.put(kb, vb)
            return
        wb = self.batch_type(raw_mode=True)
        for i in range(keys.size):
            wb.put(kb[8 * i:8 * i + 8], vb[vw * i:vw * (i + 1)])
        self.db.write(wb)

    def get(self, keys: np.ndarray) -> np.ndarray:
        kb = keys.astype(">i8").tobytes()
        got = self.db.get([kb[8 * i:8 * i + 8] for i in range(keys.size)])
        return np.frombuffer(b"".join(got), np.float64).reshape(keys.size, self.width)

    def close(self) -> None:
        self.db.close()


OPENERS = {"keystore": _Keystore, "rocksdb": _Rocks}


def _timed(calls: Callable[[], None]) -> float:
    t = time.perf_counter()
    calls()
    return time.perf_counter() - t


def _folder_mb(folder: Path) -> float:
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file()) / 2**20


def measure(store: str, keys: int, s: Settings, folder: Path, seed: int = 0) -> list[dict]:
    """One store prefilled with ``keys`` records in ``folder``, then each operation timed:
    a row per operation (ops, seconds, ops per second, the store's MB on disk)."""
    rng = np.random.default_rng(seed)
    db = OPENERS[store](folder, s.width)
    rows = []

    def each(n: int, step: int, call: Callable[[int, int], None]) -> float:
        return _timed(lambda: [call(i, min(n, i + step)) for i in range(0, n, step)])

    try:
        order = rng.permutation(keys).astype(np.int64)
        values = rng.standard_normal((min(keys, 1 << 20), s.width))

        def fill(i, j):
            db.put(order[i:j], values[np.arange(i, j) % len(values)])

        each(keys, s.batch, fill)
        new = np.arange(keys, keys + s.ops, dtype=np.int64)
        fresh = rng.standard_normal((min(s.ops, 1 << 20), s.width))
        timed = {"insert": (s.ops, each(s.ops, s.batch, lambda i, j: db.put(
            new[i:j], fresh[np.arange(i, j) % len(fresh)])))}
        wanted = rng.integers(0, keys, s.ops).astype(np.int64)
        timed["get"] = (s.ops, each(s.ops, s.batch, lambda i, j: db.get(wanted[i:j])))
        more = np.arange(keys + s.ops, keys + s.ops + 2 * s.individual_ops, dtype=np.int64)
        one, grouped = more[:s.individual_ops], more[s.individual_ops:]
        timed["insert, one a call"] = (s.individual_ops, each(
            s.individual_ops, 1, lambda i, j: db.put(one[i:j], fresh[i % len(fresh)][None])))
        timed["insert, groups"] = (s.individual_ops, each(
            s.individual_ops, s.group, lambda i, j: db.put(
                grouped[i:j], fresh[np.arange(i, j) % len(fresh)])))
        got = db.get(order[:1000])  # what was written reads back
        if not np.array_equal(got, values[np.arange(1000) % len(values)]):
            raise RuntimeError(f"{store}: the prefilled values do not read back")
    finally:
        db.close()
    mb = _folder_mb(folder)
    for op, (n, sec) in timed.items():
        rows.append({"keys": keys, "store": store, "op": op, "ops": n, "seconds": sec,
                     "ops_per_s": n / sec, "disk_mb": mb})
    return rows


def run(s: Settings, log: Callable[[str], None] = print) -> pd.DataFrame:
    """Every store at every key count, ``rounds`` times (a fresh store each), interleaved."""
    out = []
    with scratch(s.storage_dir, s.data_dir, "scabbard-keyvalue-") as root:
        for keys in s.record_counts:
            for rnd in range(s.rounds):
                k = rnd % len(s.stores)
                for store in (*s.stores[k:], *s.stores[:k]):
                    folder = root / f"{store}-{keys}"
                    shutil.rmtree(folder, ignore_errors=True)
                    rows = measure(store, keys, s, folder, seed=rnd)
                    shutil.rmtree(folder, ignore_errors=True)
                    for r in rows:
                        out.append({**r, "round": rnd})
                    by = {r["op"]: r["ops_per_s"] / 1e6 for r in rows}
                    log(f"{keys:>11,} keys  {store:<9} round {rnd + 1}: "
                        + ", ".join(f"{op} {v:.2f}" for op, v in by.items()) + " M ops/s")
    runs = pd.DataFrame(out)
    save_tables(s.output_dir, keyvalue=summary(runs), keyvalue_runs=runs)
    return runs


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per key count and operation: each store's median M ops/s (and its lowest and highest
    round), and the keystore's median over RocksDB's."""
    g = runs.groupby(["keys", "op", "store"])["ops_per_s"]
    t = pd.DataFrame({"median": g.median(), "min": g.min(), "max": g.max()}) / 1e6
    wide = t.unstack("store")
    wide.columns = [f"{store} {stat}" for stat, store in wide.columns]
    wide = wide.reset_index()
    wide["op"] = pd.Categorical(wide["op"], OPS, ordered=True)
    wide = wide.sort_values(["keys", "op"]).reset_index(drop=True)
    if {"keystore median", "rocksdb median"} <= set(wide.columns):
        wide["keystore / rocksdb"] = wide["keystore median"] / wide["rocksdb median"]
    return wide


def _spread(ax, grouped, label: str, scale: float = 1.0) -> None:
    """One line of medians over the groups, each round's lowest to highest as a bar."""
    med, lo, hi = (x.to_numpy() * scale for x in (grouped.median(), grouped.min(),
                                                   grouped.max()))
    ax.errorbar(grouped.median().index.to_numpy(), med, yerr=[med - lo, hi - med], marker="o",
                capsize=3, label=label)


def plot(runs: pd.DataFrame, output_dir: str | None = None):
    """After Darwin's Fig. 1 (insert and get throughput against the records held, left two)
    and Fig. 3 (single records against groups, at the largest key count, right): medians,
    each round's lowest to highest as a bar."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8))
    for ax, op in zip(axes[:2], ("insert", "get"), strict=False):
        for store in [x for x in STORES if x in set(runs["store"])]:
            _spread(ax, runs[(runs["store"] == store) & (runs["op"] == op)].groupby("keys")[
                "ops_per_s"], LABELS[store], 1e-6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("records in the store")
        ax.set_ylabel("M ops/s")
        ax.set_title(f"{op}s (after Darwin's Fig. 1)")
    axes[0].legend(fontsize=7)
    ax = axes[2]
    last = runs[runs["keys"] == runs["keys"].max()]
    stores = [x for x in STORES if x in set(last["store"])]
    ops = ["insert, one a call", "insert, groups"]
    x, w = np.arange(len(stores)), 0.38
    for j, op in enumerate(ops):
        g = last[last["op"] == op].groupby("store")["ops_per_s"]
        med = [g.median().get(st, np.nan) / 1e6 for st in stores]
        lo = [m - g.min().get(st, np.nan) / 1e6 for st, m in zip(stores, med, strict=False)]
        hi = [g.max().get(st, np.nan) / 1e6 - m for st, m in zip(stores, med, strict=False)]
        ax.bar(x + (j - 0.5) * w, med, w, yerr=[lo, hi], capsize=3,
               label="single records" if j == 0 else "records in groups")
    ax.set_xticks(x, stores)
    ax.set_yscale("log")
    ax.set_ylabel("M inserts/s")
    ax.set_title("grouped access (after Darwin's Fig. 3)")
    ax.legend(fontsize=7)
    caption(fig, f"one process, one thread; medians of {runs['round'].nunique()} rounds")
    return finish(fig, output_dir, "keyvalue.png")


# -- Darwin's Fig. 2: checkpoint and recovery against the state's size --------------------------
RECOVERY_STORES = ("memory", "keystore", "rocksdb")
RECOVERY_LABELS = {"memory": "in memory, written whole (TBB's role)",
                   "keystore": "keystore (log + index)", "rocksdb": "RocksDB (rocksdict)"}


def _evict(folder: Path) -> None:
    """Drop the folder's files from the page cache (they are flushed): a recovery reads them
    from the disk, as after a machine's restart."""
    for p in folder.rglob("*"):
        if p.is_file():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


class _Memory:
    """The state in memory (keys, values and a hash index): a checkpoint writes it whole to
    one file, a recovery reads it back and builds the index again."""

    def __init__(self, folder: Path, width: int):
        folder.mkdir(parents=True, exist_ok=True)
        self.path, self.width = folder / "state", width
        self.keys, self.values = np.empty(0, np.int64), np.empty((0, width))

    def fill(self, keys: np.ndarray, values: np.ndarray) -> None:
        self.keys, self.values = keys, values
        self._index()

    def _index(self) -> None:
        from scabbard.kernels import keystore as k

        cap = 1024
        while 2 * self.keys.size > cap:
            cap *= 2
        self.slot_keys = np.full(cap, k.EMPTY, np.int64)
        self.slot_records = np.zeros(cap, np.int64)
        self.none = np.full(1, k.EMPTY, np.int64)  # an empty delta (see the keystore)
        k.index_put(self.slot_keys, self.slot_records, np.zeros(cap // k.PAGE_SLOTS, np.uint8),
                    self.none, self.keys, 0)

    def checkpoint(self) -> None:
        with open(self.path, "wb") as f:
            f.write(np.int64(self.keys.size).tobytes())
            f.write(self.keys.tobytes())
            f.write(self.values.tobytes())
            f.flush()
            os.fdatasync(f.fileno())

    def recover(self) -> None:
        raw = np.fromfile(self.path, np.int64)
        n = int(raw[0])
        self.keys = raw[1:1 + n]
        self.values = raw[1 + n:].view(np.float64).reshape(n, self.width)
        self._index()

    def get(self, keys: np.ndarray) -> np.ndarray:
        from scabbard.kernels import keystore as k

        at = np.empty(keys.size, np.int64)
        k.index_find(self.slot_keys, self.slot_records, self.none, self.none, keys, at)
        return self.values[at]

    def close(self) -> None:
        pass


def _recovery_one(store: str, records: int, s: Settings, folder: Path, seed: int) -> dict:
    """One store of ``records`` records: filled (the keystore checkpointing every ``s.ops``
    records, as a running engine would), then ``s.ops`` of its keys updated and a
    checkpoint taken (timed: what a checkpoint of a store that size writes), its files
    evicted from the page cache, closed, recovered (timed), and 1,000 random reads (timed).
    The keystore's index file catches up at the end of the fill, so its recovery reads the
    updates' records back (its most, ``index_every``, is more); the catch-up that writes
    them into the index file is timed too, after the reads."""
    rng = np.random.default_rng(seed)
    keys = rng.permutation(records).astype(np.int64)
    values = rng.standard_normal((records, s.width))
    updated = np.unique(rng.integers(0, records, min(s.ops, records)))
    rng.shuffle(updated)
    fresh = rng.standard_normal((updated.size, s.width))
    probe = rng.integers(0, records, 1000)
    catch_up_s, scanned = float("nan"), 0
    if store == "memory":
        db = _Memory(folder, s.width)
        db.fill(keys, values)
        values[updated] = fresh
        db.values = values  # the same arrays: updated in place
        checkpoint_s = _timed(db.checkpoint)
    else:
        db = (_Keystore(folder, s.width, "machine") if store == "keystore"
              else OPENERS[store](folder, s.width))
        for i in range(0, records, s.batch):
            db.put(keys[i:i + s.batch], values[i:i + s.batch])
            if store == "keystore" and (i // s.batch + 1) % max(1, s.ops // s.batch) == 0:
                db.store.checkpoint()
        if store == "keystore":
            db.store.checkpoint(index=True)
        for i in range(0, updated.size, s.batch):
            db.put(keys[updated[i:i + s.batch]], fresh[i:i + s.batch])
        values[updated] = fresh
        checkpoint_s = _timed(lambda: db.store.checkpoint(index=False) if store == "keystore"
                              else db.db.flush(True))
        db.close()
    _evict(folder)
    t = time.perf_counter()
    if store == "memory":
        db.recover()
    else:
        db = (OPENERS[store](folder, s.width) if store == "rocksdb"
              else _Keystore(folder, None, "machine"))
    recovery_s = time.perf_counter() - t
    first_s = _timed(lambda: db.get(keys[probe]))
    got = db.get(keys[probe])
    if store == "keystore":
        scanned = db.store.scanned
        catch_up_s = _timed(lambda: db.store.checkpoint(index=True))
    db.close()
    if not np.array_equal(got, values[probe]):
        raise RuntimeError(f"{store}: the recovered state is not the state checkpointed")
    return {"records": records, "state_mb": records * (8 + 8 * s.width) / 2**20,
            "store": store, "checkpoint_s": checkpoint_s, "recovery_s": recovery_s,
            "first_reads_ms": first_s * 1e3, "records_read_back": scanned,
            "index_catch_up_s": catch_up_s, "disk_mb": _folder_mb(folder)}


def recovery(s: Settings, log: Callable[[str], None] = print) -> pd.DataFrame:
    """After Darwin's Fig. 2: per state size (``s.record_counts``) and store, the time of a
    checkpoint after ``s.ops`` updates and of a recovery, ``rounds`` times, interleaved."""
    out = []
    with scratch(s.storage_dir, s.data_dir, "scabbard-kv-recovery-") as root:
        for records in s.record_counts:
            for rnd in range(s.rounds):
                k = rnd % len(RECOVERY_STORES)
                for store in (*RECOVERY_STORES[k:], *RECOVERY_STORES[:k]):
                    folder = root / f"{store}-{records}"
                    shutil.rmtree(folder, ignore_errors=True)
                    row = _recovery_one(store, records, s, folder, seed=rnd)
                    shutil.rmtree(folder, ignore_errors=True)
                    out.append({**row, "round": rnd})
                    more = (f", {row['records_read_back']:,} records read back, index "
                            f"catch-up {row['index_catch_up_s']:.3f} s" if store == "keystore"
                            else "")
                    log(f"{records:>11,} records ({row['state_mb']:,.0f} MB)  {store:<9} round "
                        f"{rnd + 1}: checkpoint {row['checkpoint_s']:.3f} s, recovery "
                        f"{row['recovery_s']:.3f} s, first 1,000 reads "
                        f"{row['first_reads_ms']:.1f} ms{more}")
    runs = pd.DataFrame(out)
    save_tables(s.output_dir, keyvalue_recovery=recovery_summary(runs),
                keyvalue_recovery_runs=runs)
    return runs


def recovery_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per state size and store: the medians (and the rounds' range) of the checkpoint and
    the recovery, seconds."""
    g = runs.groupby(["records", "state_mb", "store"])
    t = g.agg(checkpoint_s=("checkpoint_s", "median"), recovery_s=("recovery_s", "median"),
              recovery_min_s=("recovery_s", "min"), recovery_max_s=("recovery_s", "max"),
              first_reads_ms=("first_reads_ms", "median"),
              records_read_back=("records_read_back", "median"),
              index_catch_up_s=("index_catch_up_s", "median"), disk_mb=("disk_mb", "median"))
    return t.reset_index()


def plot_recovery(runs: pd.DataFrame, output_dir: str | None = None):
    """After Darwin's Fig. 2: checkpoint (left) and recovery (right) time against the state's
    size, per store; medians, each round's lowest to highest as a bar."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, col, title in ((axes[0], "checkpoint_s", "checkpoint"),
                           (axes[1], "recovery_s", "recovery (the state opened)")):
        for store in [x for x in RECOVERY_STORES if x in set(runs["store"])]:
            _spread(ax, runs[runs["store"] == store].groupby("state_mb")[col],
                    RECOVERY_LABELS[store])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("state, MB (48-byte records)")
        ax.set_ylabel("seconds")
        ax.set_title(f"{title} (after Darwin's Fig. 2)")
    axes[0].legend(fontsize=7)
    caption(fig, f"one process, one thread; files evicted from the page cache before each "
                 f"recovery; medians of {runs['round'].nunique()} rounds")
    return finish(fig, output_dir, "keyvalue_recovery.png")
