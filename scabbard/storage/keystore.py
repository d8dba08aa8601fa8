"""Darwin's per-key persistent state store: values in an append-only log, an index in memory.

Darwin (CIDR 2022, §3) keeps a stream operator's state in a storage-aware key-value store
(Viper's design: the records in a log on persistent storage, the index in DRAM) instead of
a byte-oriented one such as RocksDB.  :class:`KeyStore` is that store for int64 keys and
fixed-width values (``width`` float64 words - a window's aggregates):

* **grouped writes** - :meth:`~KeyStore.put` encodes the records into the log's tail in
  memory (numba, :mod:`scabbard.kernels.keystore`) and points the index at them; the tail
  is written to the log file in one ``pwritev`` when it holds ``group_bytes``;
* **per-key reads** - :meth:`~KeyStore.get` looks the keys up and reads each record where it
  is (the tail, or the log file through a read-only memory map), verifying it against its
  own check word: a damaged record is found when a key needs it, not by reading its group;
* **checkpoints** (:meth:`~KeyStore.checkpoint`) write the tail, flush the log and replace
  ``store.json`` (the records the checkpoint covers) atomically; now and then (when the log
  since the last snapshot outgrows the index) also the index itself, so that a recovery
  reads the snapshot and scans only the log written since - the index's changes;
* **recovery** is opening the folder: the index is the snapshot plus that scan; records
  written after the last checkpoint are not part of the state and are written over.

An update appends a new record (the log is not compacted yet: an updated key's old
records stay until the store is rewritten).  Every file operation goes through a
:class:`~scabbard.storage.fileio.FileIO` (the crash-state explorer can record it);
reads go through the memory map and are not recorded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from scabbard.kernels import keystore as k
from scabbard.storage.checksum import checksum
from scabbard.storage.errors import FormatVersionError, StorageError
from scabbard.storage.fileio import OS, Durability, FileIO, write_atomic, write_new

FORMAT = 1
META = "store.json"
LOG = "log"
_INDEX_MAGIC = 0x5844_4E49_5344_4B01  # "KSDINDX", version 1


class CorruptStore(StorageError):
    """A record, the index snapshot or the store's description that fails its check."""


class KeyStore:
    """Per-key state of ``width`` float64 words a key, in ``folder`` (created, or recovered
    to its last checkpoint when it holds a store)."""

    def __init__(self, folder: str | Path, width: int | None = None, *, io: FileIO = OS,
                 durability: str | Durability = Durability.MACHINE,
                 group_bytes: int = 1 << 20, initial_bytes: int = 16 << 20):
        self.folder = Path(folder)
        self.io = io
        self.durability = Durability.of(durability)
        meta = self._read_meta()
        if meta is None:
            if width is None or width < 1:
                raise ValueError(f"a new store needs a value width >= 1 (got {width})")
            meta = {"format": FORMAT, "width": int(width), "records": 0, "index": None,
                    "index_records": 0}
        elif width is not None and width != meta["width"]:
            raise StorageError(f"{self.folder} holds values of {meta['width']} words, not "
                               f"{width}: open it without a width, or use another folder")
        self.width = int(meta["width"])
        self.record_words = self.width + 2
        self.group_records = max(1, group_bytes // (8 * self.record_words))
        self.tail = np.empty(self.group_records * self.record_words, np.int64)
        self.tail_n = 0
        self.records = int(meta["records"])  # records in the log, the tail's included
        self.tail_first = self.records
        self.index_name = meta["index"]
        self.index_records = int(meta["index_records"])
        self.writes = self.bytes_written = self.checkpoints = 0
        io.mkdir(self.folder)
        self.fd = io.open(self.folder / LOG, os.O_RDWR | os.O_CREAT)
        self.capacity = 0  # the log file's size in bytes (grown by doubling, mapped whole)
        self.log = np.empty(0, np.int64)
        self._map(max(io.size(self.fd), initial_bytes, self.records * 8 * self.record_words))
        self._recover()
        if not (self.folder / META).exists():  # a new store: its description, empty
            if self.durability.flush:  # the folder's own name, in its parent
                io.fsync_dir(self.folder.parent)
            self.checkpoint()

    # -- writing ------------------------------------------------------------------------------
    def put(self, keys: np.ndarray, values: np.ndarray) -> None:
        """Store ``values[i]`` (``width`` float64 words) as ``keys[i]``'s value (a later
        duplicate in the same call wins)."""
        keys = np.asarray(keys, np.int64)
        values = np.asarray(values, np.float64)
        n = keys.size
        if keys.ndim != 1 or values.shape != (n, self.width):
            raise ValueError(f"keys: int64[n]; values: float64[n, {self.width}] (got "
                             f"{keys.shape} and {values.shape})")
        if n == 0:
            return
        if 2 * (self.count + n) > self.slot_keys.size:
            self._reserve(n)
        rw = self.record_words
        first = self.records
        if n > self.group_records - self.tail_n:
            self._write_tail()
        if n > self.group_records:  # larger than a group: written as it is
            out, at = np.empty(n * rw, np.int64), 0
        else:
            out, at = self.tail, self.tail_n * rw
        added = k.append_records(self.slot_keys, self.slot_records, keys,
                                 np.ascontiguousarray(values).view(np.int64), first, out, at)
        if added < 0:
            raise ValueError(f"key {k.EMPTY} is reserved (the index's free slot)")
        if out is self.tail:
            self.tail_n += n
        else:
            self._write(out, first)
            self.tail_first = first + n
        self.count += added
        self.records = first + n

    def _reserve(self, n: int) -> None:
        need = self.count + n
        if 2 * need > self.slot_keys.size:
            cap = self.slot_keys.size
            while 2 * need > cap:
                cap *= 2
            self.slot_keys, self.slot_records = k.index_grow(self.slot_keys, self.slot_records,
                                                             cap)

    def _write_tail(self) -> None:
        if self.tail_n:
            self._write(self.tail[:self.tail_n * self.record_words], self.tail_first)
            self.tail_first += self.tail_n
            self.tail_n = 0

    def _write(self, words: np.ndarray, first: int) -> None:
        at = first * self.record_words * 8
        end = at + words.nbytes
        if end > self.capacity:
            cap = self.capacity
            while end > cap:
                cap *= 2
            self._map(cap)
        self.io.pwritev(self.fd, [words], at)
        self.writes += 1
        self.bytes_written += words.nbytes

    def _map(self, size: int) -> None:
        """The log file at ``size`` bytes (sparse beyond what is written), mapped whole."""
        size = -(-size // 4096) * 4096
        if size > self.io.size(self.fd):
            self.io.ftruncate(self.fd, size)
        self.capacity = size
        self.log = np.memmap(self.folder / LOG, np.int64, "r", shape=(size // 8,)).view(
            np.ndarray)

    # -- reading ------------------------------------------------------------------------------
    def get(self, keys: np.ndarray, out: np.ndarray | None = None) -> tuple[np.ndarray,
                                                                            np.ndarray]:
        """``(values, found)``: each key's value (float64[n, width]; a missing key's row is
        left as ``out`` had it, zeros by default) and whether the store holds it."""
        keys = np.asarray(keys, np.int64)
        if out is None:
            out = np.zeros((keys.size, self.width), np.float64)
        records = np.empty(keys.size, np.int64)
        bad = k.read_values(self.slot_keys, self.slot_records, keys, self.log, self.tail,
                            self.tail_first, records, out.view(np.int64))
        if bad >= 0:
            raise CorruptStore(f"the record of key {keys[bad]} in {self.folder / LOG} (record "
                               f"{records[bad]}) fails its check: the store is damaged")
        return out, records >= 0

    def __len__(self) -> int:
        return self.count

    # -- checkpoints and recovery -------------------------------------------------------------
    def checkpoint(self) -> dict:
        """Make the state as it is now the one a recovery finds: the tail written, the log
        flushed (``machine`` durability), the index written when the log since its last
        snapshot holds more records than it has keys, ``store.json`` replaced."""
        self._write_tail()
        if self.durability.flush:
            self.io.fdatasync(self.fd)
        snapshot = self.records - self.index_records > max(self.count, 1 << 16)
        old = self.index_name
        if snapshot:
            self._write_index()
        write_atomic(self.io, self.folder / META, json.dumps(
            {"format": FORMAT, "width": self.width, "records": self.records,
             "index": self.index_name, "index_records": self.index_records,
             "keys": self.count}).encode(), self.durability)
        if snapshot and old:
            self.io.unlink(self.folder / old, missing_ok=True)
        self.checkpoints += 1
        return {"records": self.records, "keys": self.count, "index_written": snapshot}

    def _write_index(self) -> None:
        head = np.array([_INDEX_MAGIC, self.records, self.slot_keys.size, self.count], np.int64)
        body = np.concatenate([head, self.slot_keys, self.slot_records])
        data = body.tobytes() + np.int64(checksum(body)).tobytes()
        name = f"index-{self.records}"
        write_new(self.io, self.folder / name, data, self.durability)
        self.index_name, self.index_records = name, self.records

    def _read_meta(self) -> dict | None:
        path = self.folder / META
        if not path.exists():
            return None
        try:
            meta = json.loads(path.read_text())
            if meta.get("format") != FORMAT:
                raise FormatVersionError(f"{path}: a store of format {meta.get('format')!r}; "
                                         f"this version reads format {FORMAT}")
            int(meta["records"]), int(meta["width"]), int(meta["index_records"])
            return meta
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptStore(f"{path} is not a store's description ({e})") from None

    def _recover(self) -> None:
        """The index as of the last checkpoint: its snapshot, then the log written since."""
        loaded = self._load_index() if self.index_name else None
        if loaded is None:  # none yet, or damaged: the whole log rebuilds it
            self.index_records, self.count = 0, 0
            self.slot_keys = np.full(1024, k.EMPTY, np.int64)
            self.slot_records = np.zeros(1024, np.int64)
        self._reserve(self.records - self.index_records)
        end = k.scan_records(self.log, self.index_records, self.records, self.width,
                             self.slot_keys, self.slot_records)
        if end != self.records:
            raise CorruptStore(f"record {end} of {self.folder / LOG}, covered by the last "
                               f"checkpoint, fails its check: the store is damaged")
        self.count = int((self.slot_keys != k.EMPTY).sum())

    def _load_index(self) -> bool | None:
        path = self.folder / self.index_name
        try:
            words = np.fromfile(path, np.int64)
        except OSError:
            return None
        if words.size < 5 or words[0] != _INDEX_MAGIC or words[-1] != np.int64(
                checksum(words[:-1])) or words[1] != self.index_records:
            return None
        cap = int(words[2])
        if words.size != 4 + 2 * cap + 1:
            return None
        self.slot_keys = words[4:4 + cap].copy()
        self.slot_records = words[4 + cap:4 + 2 * cap].copy()
        self.count = int(words[3])
        return True

    # -- the end ------------------------------------------------------------------------------
    def stats(self) -> dict:
        return {"keys": self.count, "records": self.records, "writes": self.writes,
                "bytes_written": self.bytes_written, "log_bytes": self.records * 8 *
                self.record_words, "index_bytes": self.slot_keys.nbytes +
                self.slot_records.nbytes, "checkpoints": self.checkpoints}

    def close(self) -> None:
        """Close the files (what is not checkpointed is not kept)."""
        if self.fd >= 0:
            self.log = np.empty(0, np.int64)
            self.io.close(self.fd)
            self.fd = -1

    def __enter__(self) -> KeyStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
