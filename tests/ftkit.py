"""Tools for the fault-tolerance tests: a run stopped at a chosen task, failing file I/O,
damaged checkpoint state, a real small file system."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from pathlib import Path

import pytest

from scabbard import queries
from scabbard.engine import CollectSink, EngineConfig, Replay, run_query
from scabbard.engine.runtime import Engine
from scabbard.engine.sources import StopAfter
from scabbard.ft.state import state_schema
from scabbard.pog.checkpoint import CheckpointRecord, CheckpointStore
from scabbard.storage import BlockManager, FileIO, StorageConfig
from scabbard.storage import segment as seg_fmt


def campaign(*values):
    """A matrix cell beyond the one per feature the default run keeps (`make campaign`)."""
    return pytest.param(*values, marks=pytest.mark.campaign)


SMALL = StorageConfig(file_bytes=1 << 20, pool_files=2, bulk_bytes=1 << 18)
CFG = EngineConfig(workers=2, batch_rows=4000)


def failure_free(q, ds, n):
    sink = CollectSink()
    run_query(q, ds, sink=sink, replay=Replay(max_tuples=n), config=CFG)
    return sink.to_pandas()


class FailingIO(FileIO):
    """Real file I/O whose ``k``-th write matching ``match(path, pos, bufs)`` fails with
    ``err`` (a failed device write, a full disk)."""

    def __init__(self, match, k: int = 1, err: int = errno.EIO):
        self.match, self.left, self.err = match, k, err
        self.paths: dict[int, str] = {}
        self.failed = 0

    def open(self, path, flags, mode=0o644):
        fd = super().open(path, flags, mode)
        self.paths[fd] = str(path)
        return fd

    def pwritev(self, fd, bufs, pos):
        if self.left > 0 and self.match(self.paths.get(fd, ""), pos, bufs):
            self.left -= 1
            if self.left == 0:
                self.failed += 1
                raise OSError(self.err, os.strerror(self.err))
        return super().pwritev(fd, bufs, pos)


def records(store: Path) -> list[CheckpointRecord]:
    """The readable checkpoint records of a storage folder, newest first."""
    return CheckpointStore(Path(store) / "checkpoints").records()


def damage_state(store: Path, rec: CheckpointRecord, q, ds) -> None:
    """Flip a payload byte of the record's first non-empty state p-unit: its record still
    reads, its state does not load."""
    schemas = {s.name: s for s in map(state_schema, Engine(q, ds.tables, CFG).plan.branches)}
    for part in rec.state:
        if part["end"] > part["first"] and part["stream"] in schemas:
            damage_segment(store, schemas[part["stream"]], part["first"])
            return
    raise AssertionError(f"checkpoint {rec.id} holds no state to damage")


def damage_segment(store: Path, schema, offset: int) -> None:
    """Flip the first payload byte of the stored segment holding ``offset`` of the stream
    ``schema.name`` (its checksum then fails)."""
    with BlockManager(store, SMALL) as bm:
        sid = bm.stream(schema.name, schema)
        f, seg = bm._locate(bm._by_id[sid], offset)
        head = seg_fmt.parse_header(bm._pread(f, seg.pos, seg_fmt.PAGE))
        at = seg.pos + head.header_len
    with open(f.path, "r+b") as fh:
        fh.seek(at)
        b = fh.read(1)
        fh.seek(at)
        fh.write(bytes([b[0] ^ 0xFF]))


def damage_record(store: Path, rec: CheckpointRecord) -> None:
    """Edit a record so that its checksum fails (it is skipped as damaged)."""
    p = Path(store) / "checkpoints" / f"ckpt-{rec.id:08d}.json"
    p.write_text(p.read_text().replace('"seq": ', '"seq": 1'))


@contextlib.contextmanager
def tmpfs(where: Path, size: str):
    """A real file system of ``size`` (tmpfs) at ``where``: 'disk full' is the kernel's ENOSPC.
    Yields a function that grows it (frees space).  Root only."""
    import pytest

    where.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                       capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")

    def grow(new: str) -> None:
        subprocess.run(["mount", "-o", f"remount,size={new}", str(where)], check=True)

    try:
        yield grow
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def query(name: str, tiny):
    return queries.get(name), tiny[queries.workload_of(name)]


def committed_epochs(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((Path(out) / "committed").glob("*.seg"))}


__all__ = ["CFG", "SMALL", "FailingIO", "StopAfter", "committed_epochs", "damage_record",
           "damage_segment", "damage_state", "failure_free", "query", "records", "tmpfs"]
