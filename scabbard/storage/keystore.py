"""Darwin's per-key persistent state store: values in an append-only log, the index in a file.

Darwin (CIDR 2022, §3) keeps a stream operator's state in a storage-aware key-value store
(Viper's design: the records in a log on persistent storage, the index in DRAM) instead of
a byte-oriented one such as RocksDB.  :class:`KeyStore` is that store for int64 keys and
fixed-width values (``width`` float64 words - a window's aggregates):

* **grouped writes** - :meth:`~KeyStore.put` encodes the records into the log's tail in
  memory (numba, :mod:`scabbard.kernels.keystore`) and points the index at them; the tail
  is written to the log file in one ``pwritev`` when it holds ``group_bytes``;
* **per-key reads** - :meth:`~KeyStore.get` looks the keys up and reads each record where it
  is (the tail, or the log file through a read-only memory map), verifying it against its
  own check word and its key: a damaged record, or an index entry pointing elsewhere, is
  found when a key needs it, not by reading its group;
* **the index is a file** (``index-<slots>-<records>``), mapped copy-on-write: the slots a put changes
  are private pages of this process until a checkpoint writes them back (the index's
  changes - pages, not the whole index), so a recovery maps the file and needs not read it;
* **checkpoints** (:meth:`~KeyStore.checkpoint`) in two steps: (1) the tail written, the log
  flushed, ``store.json`` replaced with the records the checkpoint covers - the commit;
  (2) when ``index_every`` records have been appended since the index file last caught up
  (or the index has grown: a new file), the index's dirty pages written back and flushed,
  ``store.json`` replaced again saying the file now holds the index as of step (1);
* **recovery** is opening the folder: the index file mapped (none of it read), and the log
  between what it holds and what the last checkpoint covers (at most ``index_every``
  records) read in order into a *delta* index beside it - a lookup takes the newer record
  of the two, the next catch-up merges them - so its time does not grow with the state.
  Records written after the last checkpoint are not part of the state and are written over.

A crash in step (2) leaves index pages of two catch-ups (torn ones too); every entry points
at a record step (1) committed, and the delta holds each key updated since the older one at
its newest record, so the newer of the two is right.  A key a torn page left twice keeps
its newer record first in its probe order, and growing the index keeps the newer.
An update appends a new record (the log is not compacted
yet: an updated key's old records stay until the store is rewritten).  Every file
operation goes through a :class:`~scabbard.storage.fileio.FileIO` (the crash-state explorer
records them); reads go through memory maps and are not recorded.
"""

from __future__ import annotations

import json
import mmap
import os
from pathlib import Path

import numpy as np

from scabbard.kernels import keystore as k
from scabbard.storage.errors import FormatVersionError, StorageError
from scabbard.storage.fileio import OS, Durability, FileIO, write_atomic, write_new

FORMAT = 2
META = "store.json"
LOG = "log"
_INDEX_MAGIC = 0x5844_4E49_5344_4B02  # "KSDINDX", version 2
_HEAD = 512  # words of the index file's header page
_FIRST_SLOTS = 1024
_I64, _F64 = np.dtype(np.int64), np.dtype(np.float64)


def _random_access(mapped: np.memmap) -> np.ndarray:
    """A mapped file read a record or a slot at a time: no read-around (a page fault would
    read 128 KiB of the file for 64 bytes)."""
    mapped._mmap.madvise(mmap.MADV_RANDOM)
    return mapped.view(np.ndarray)


def _read_ahead(path: Path, offset: int = 0, length: int | None = None) -> None:
    """Read a file's range in order, 8 MiB at a time, into the page cache: what a mapped
    file's random page faults then find there (``posix_fadvise(WILLNEED)`` only queues the
    reads, and faults in random order wait behind them: 1.5 s against 0.05 s for 20,000
    pages of a 512 MiB index, measured)."""
    buf = bytearray(8 << 20)
    fd = os.open(path, os.O_RDONLY)
    try:
        end = os.fstat(fd).st_size if length is None else offset + length
        while offset < end:
            got = os.preadv(fd, [memoryview(buf)[:min(len(buf), end - offset)]], offset)
            if got <= 0:
                break
            offset += got
    finally:
        os.close(fd)


class CorruptStore(StorageError):
    """A record, an index entry or the store's description that fails its check."""


class KeyStore:
    """Per-key state of ``width`` float64 words a key, in ``folder`` (created, or recovered
    to its last checkpoint when it holds a store)."""

    def __init__(self, folder: str | Path, width: int | None = None, *, io: FileIO = OS,
                 durability: str | Durability = Durability.MACHINE,
                 group_bytes: int = 1 << 20, initial_bytes: int = 16 << 20,
                 index_every: int = 1 << 20):
        self.folder = Path(folder)
        self.io = io
        self.durability = Durability.of(durability)
        self.index_every = max(1, int(index_every))
        meta = self._read_meta()
        new = meta is None
        if new:
            if width is None or width < 1:
                raise ValueError(f"a new store needs a value width >= 1 (got {width})")
            meta = {"format": FORMAT, "width": int(width), "records": 0, "keys": 0,
                    "index": None, "index_records": 0}
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
        self.index_name = meta["index"]  # the index file, holding the index as of ...
        self.index_records = int(meta["index_records"])  # ... this record
        self.committed_keys = int(meta["keys"])  # keys in the state the checkpoint covers
        self.writes = self.bytes_written = self.checkpoints = self.index_pages_written = 0
        self.scanned = 0  # records the last recovery scanned into the index
        io.mkdir(self.folder)
        self.fd = io.open(self.folder / LOG, os.O_RDWR | os.O_CREAT)
        self.capacity = 0  # the log file's size in bytes (grown by doubling, mapped whole)
        self.log = np.empty(0, np.int64)
        self._map(max(io.size(self.fd), initial_bytes, self.records * 8 * self.record_words))
        self._recover()
        if new:
            if self.durability.flush:  # the folder's own name, in its parent
                io.fsync_dir(self.folder.parent)
            self.checkpoint()

    # -- writing ------------------------------------------------------------------------------
    def put(self, keys: np.ndarray, values: np.ndarray) -> None:
        """Store ``values[i]`` (``width`` float64 words) as ``keys[i]``'s value (a later
        duplicate in the same call wins)."""
        if keys.__class__ is not np.ndarray or keys.dtype is not _I64:
            keys = np.asarray(keys, np.int64)
        if values.__class__ is not np.ndarray or values.dtype is not _F64 or \
                not values.flags.c_contiguous:
            values = np.ascontiguousarray(values, np.float64)
        n = keys.size
        if keys.ndim != 1 or values.shape != (n, self.width):
            raise ValueError(f"keys: int64[n]; values: float64[n, {self.width}] (got "
                             f"{keys.shape} and {values.shape})")
        if n == 0:
            return
        if 2 * (self.count + n) > self.slot_keys.size:  # near full: count what is new
            new = k.count_new_keys(self.slot_keys, self.delta_keys, keys)
            if 2 * (self.count + new) > self.slot_keys.size:
                self._grow(self.count + new)
        rw = self.record_words
        first = self.records
        if n > self.group_records - self.tail_n:
            self._write_tail()
        if n > self.group_records:  # larger than a group: written as it is
            out, at = np.empty(n * rw, np.int64), 0
        else:
            out, at = self.tail, self.tail_n * rw
        added = k.append_records(self.slot_keys, self.slot_records, self.dirty,
                                 self.delta_keys, keys, values.view(np.int64), first, out, at)
        if added < 0:
            raise ValueError(f"key {k.EMPTY} is reserved (the index's free slot)")
        if out is self.tail:
            self.tail_n += n
        else:
            self._write(out, first)
            self.tail_first = first + n
        self.count += added
        self.records = first + n

    def _grow(self, keys: int) -> None:
        """An index of twice (or more) the slots, in memory until a checkpoint writes it as a
        new file (the old one stays what a recovery maps until then)."""
        cap = self.slot_keys.size
        while 2 * keys > cap:
            cap *= 2
        if self._index_map is not None and not self.index_file_stale:  # read in order
            self._index_map._mmap.madvise(mmap.MADV_SEQUENTIAL)
        self.slot_keys, self.slot_records = k.index_grow(self.slot_keys, self.slot_records, cap)
        self.dirty = np.ones(-(-cap // k.PAGE_SLOTS), np.uint8)
        self.index_file_stale = True

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
        self._log_map = np.memmap(self.folder / LOG, np.int64, "r", shape=(size // 8,))
        self.log = _random_access(self._log_map)

    # -- reading ------------------------------------------------------------------------------
    def get(self, keys: np.ndarray, out: np.ndarray | None = None) -> tuple[np.ndarray,
                                                                            np.ndarray]:
        """``(values, found)``: each key's value (float64[n, width]; a missing key's row is
        left as ``out`` had it, zeros by default) and whether the store holds it."""
        keys = np.asarray(keys, np.int64)
        if out is None:
            out = np.zeros((keys.size, self.width), np.float64)
        elif not (isinstance(out, np.ndarray) and out.dtype == np.float64
                  and out.shape == (keys.size, self.width)):
            raise ValueError(f"out: float64[{keys.size}, {self.width}] (a row a key), "
                             f"got {getattr(out, 'dtype', type(out).__name__)} "
                             f"{getattr(out, 'shape', '')}")
        records = np.empty(keys.size, np.int64)
        bad = k.read_values(self.slot_keys, self.slot_records, self.delta_keys,
                            self.delta_records, keys, self.log, self.tail, self.tail_first,
                            self.records, records, out.view(np.int64))
        if bad >= 0:
            raise CorruptStore(f"the record of key {keys[bad]} in {self.folder / LOG} (record "
                               f"{records[bad]}) fails its check: the store is damaged")
        return out, records >= 0

    def __len__(self) -> int:
        return self.count

    # -- checkpoints and recovery -------------------------------------------------------------
    def checkpoint(self, index: bool | None = None) -> dict:
        """Make the state as it is now the one a recovery finds (the commit: the tail
        written, the log flushed with ``machine`` durability, ``store.json`` replaced); then
        the index's changes - every ``index_every`` records or when the index has grown
        (``index`` None), now (True) or not this time (False, unless it grew)."""
        self._write_tail()
        if self.durability.flush:
            self.io.fdatasync(self.fd)
        self._write_meta()
        due = self.records - self.index_records >= self.index_every
        catch_up = self.index_file_stale or (due if index is None else index)
        pages = self._write_index() if catch_up else 0
        self.checkpoints += 1
        return {"records": self.records, "keys": self.count, "index_pages": pages}

    def _write_meta(self) -> None:
        write_atomic(self.io, self.folder / META, json.dumps(
            {"format": FORMAT, "width": self.width, "records": self.records,
             "keys": self.count, "index": self.index_name,
             "index_records": self.index_records}).encode(),
            self.durability)

    def _write_index(self) -> int:
        """The index's dirty pages into its file (a new file when it grew), flushed; then
        ``store.json`` says the file holds the index as of the committed records."""
        if self.delta_keys.size > 1:  # what the last recovery scanned joins the index
            if self._index_map is not None and not self.index_file_stale and \
                    self.delta_keys.size > self.dirty.size:
                # its keys fall on most pages: the index read in order first (one page
                # fault at a time, a cold index takes ~0.1 ms a page)
                _read_ahead(self.folder / self.index_name)
            if 2 * self.count > self.slot_keys.size:
                self._grow(self.count)
            k.merge_delta(self.slot_keys, self.slot_records, self.dirty, self.delta_keys,
                          self.delta_records)
            self._no_delta()
        old = self.index_name
        cap = self.slot_keys.size
        if self.index_file_stale:
            name = f"index-{cap}-{self.records}"  # never the name of the file in use
            head = np.zeros(_HEAD, np.int64)
            head[:2] = (_INDEX_MAGIC, cap)
            write_new(self.io, self.folder / name, b"".join(
                (head.tobytes(), self.slot_keys.tobytes(), self.slot_records.tobytes())),
                self.durability)
            pages = self.dirty.size
        else:
            name = old
            fd = self.io.open(self.folder / name, os.O_RDWR)
            try:
                pages = 0
                dirty = np.flatnonzero(self.dirty)
                # runs of consecutive dirty pages: one write for their keys, one for records
                cut = np.flatnonzero(np.diff(dirty) != 1) + 1
                for run in np.split(dirty, cut) if dirty.size else []:
                    a, b = int(run[0]) * k.PAGE_SLOTS, min(cap, (int(run[-1]) + 1) * k.PAGE_SLOTS)
                    self.io.pwritev(fd, [self.slot_keys[a:b]], (_HEAD + a) * 8)
                    self.io.pwritev(fd, [self.slot_records[a:b]], (_HEAD + cap + a) * 8)
                    pages += run.size
                if self.durability.flush:
                    self.io.fdatasync(fd)
            finally:
                self.io.close(fd)
        self.index_name, self.index_records = name, self.records
        self._write_meta()
        if old and old != name:
            self.io.unlink(self.folder / old, missing_ok=True)
        self.index_pages_written += pages
        self._map_index()  # this process's changed pages are the file's now
        return pages

    def _map_index(self) -> None:
        """The index file mapped copy-on-write (a put changes a private copy of the page)."""
        self._index_map = np.memmap(self.folder / self.index_name, np.int64, "c")
        words = _random_access(self._index_map)
        cap = (words.size - _HEAD) // 2
        if words.size < _HEAD + 2 * _FIRST_SLOTS or words[0] != _INDEX_MAGIC or \
                words[1] != cap or cap & (cap - 1):
            raise CorruptStore(f"{self.folder / self.index_name} is not the store's index")
        self.slot_keys = words[_HEAD:_HEAD + cap]
        self.slot_records = words[_HEAD + cap:]
        self.dirty = np.zeros(-(-cap // k.PAGE_SLOTS), np.uint8)
        self.index_file_stale = False

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
            int(meta["keys"])
            return meta
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptStore(f"{path} is not a store's description ({e})") from None

    def _no_delta(self) -> None:
        self.delta_keys = np.full(1, k.EMPTY, np.int64)
        self.delta_records = np.full(1, -1, np.int64)

    def _recover(self) -> None:
        """The index as of the last checkpoint: its file mapped (nothing of it read), and the
        log past what the file holds read in order into a delta index beside it - a lookup
        takes the newer record of the two; the next catch-up merges them."""
        self._no_delta()
        try:
            if self.index_name is None:
                raise FileNotFoundError
            self._map_index()
            first = self.index_records
        except (FileNotFoundError, ValueError, CorruptStore):  # none yet, or unusable
            self.slot_keys = np.full(_FIRST_SLOTS, k.EMPTY, np.int64)
            self.slot_records = np.zeros(_FIRST_SLOTS, np.int64)
            self.dirty = np.ones(_FIRST_SLOTS // k.PAGE_SLOTS, np.uint8)
            self.index_file_stale = True
            self._index_map = None
            first = 0
        self.count = self.committed_keys if first else 0
        if self.records > first:
            start, end = first * self.record_words * 8, self.records * self.record_words * 8
            self._advise(self._log_map, start, end, mmap.MADV_SEQUENTIAL)
            _read_ahead(self.folder / LOG, start, end - start)
            n = self.records - first
            cap = _FIRST_SLOTS
            while cap < 2 * n:
                cap *= 2
            # without an index file the scan builds the index itself, with one a delta
            into = (self.slot_keys, self.slot_records) if not first and \
                self.index_file_stale else (np.full(cap, k.EMPTY, np.int64),
                                            np.zeros(cap, np.int64))
            if into[0].size < cap:
                into = (np.full(cap, k.EMPTY, np.int64), np.zeros(cap, np.int64))
            added = np.zeros(1, np.int64)
            at = k.scan_records(self.log, first, self.records, self.width, into[0], into[1],
                                np.zeros(cap // k.PAGE_SLOTS + 1, np.uint8), added, n)
            if at < 0:
                raise CorruptStore(f"record {-1 - at} of {self.folder / LOG}, covered by the "
                                   f"last checkpoint, fails its check: the store is damaged")
            self._advise(self._log_map, start, end, mmap.MADV_RANDOM)
            if first or not self.index_file_stale:
                self.delta_keys, self.delta_records = into
                self.count = self.committed_keys
            else:
                self.slot_keys, self.slot_records = into
                self.dirty = np.ones(-(-into[0].size // k.PAGE_SLOTS), np.uint8)
                self.count = int(added[0])
        if 2 * self.count > self.slot_keys.size:
            self._grow(self.count)
        self.scanned = self.records - first

    @staticmethod
    def _advise(mapped: np.memmap, start: int, end: int, advice: int) -> None:
        """``madvise`` of bytes ``start .. end`` of a mapped file (whole pages)."""
        start = start // mmap.PAGESIZE * mmap.PAGESIZE
        if end > start:
            mapped._mmap.madvise(advice, start, end - start)

    # -- the end ------------------------------------------------------------------------------
    def stats(self) -> dict:
        return {"keys": self.count, "records": self.records, "writes": self.writes,
                "bytes_written": self.bytes_written, "log_bytes": self.records * 8 *
                self.record_words, "index_bytes": self.slot_keys.nbytes +
                self.slot_records.nbytes, "index_pages_written": self.index_pages_written,
                "checkpoints": self.checkpoints, "scanned_at_recovery": self.scanned}

    def close(self) -> None:
        """Close the files (what is not checkpointed is not kept)."""
        if self.fd >= 0:
            self.log = self._log_map = np.empty(0, np.int64)
            self._index_map = None
            self.slot_keys = self.slot_records = np.empty(0, np.int64)
            self.io.close(self.fd)
            self.fd = -1

    def __enter__(self) -> KeyStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
