"""What a POSIX file system may hold after a machine crash (after CrashMonkey and ALICE).

Input: the operations a run issued, in order (:class:`scabbard.storage.fileio.Op`,
logged by a :class:`~scabbard.storage.fileio.RecordingIO`).  A *crash state* is
what the disk holds if the machine stops after the first ``at`` operations:

* **file data** - a write, extension or truncation of a file is durable once that
  file is flushed (``fsync``/``fdatasync``) later in the prefix; a write not yet
  flushed may have reached the disk whole, not at all, or **torn** - any subset of
  its 4 KiB pages, and of a page its first 512-byte sectors only (a device whose atomic
  unit is the sector: a page torn inside).  Unflushed writes persist independently of
  each other (the disk may reorder them).
* **names** - creations, renames, removals and ``mkdir``: a crash keeps a *prefix* of
  them, at least up to the last one its directory was flushed (``fsync`` of the
  directory) after - all of them in order (a journal: ext4, XFS), or, as ALICE's
  abstract model allows, a prefix *per directory*, the directories' operations reordered
  against each other unless a directory flush orders them.  A rename is atomic and
  belongs to its destination's directory.

:class:`CrashState` names one such state (the crash point, the persisted prefix
of name operations, and per unflushed write: kept, dropped or the pages kept);
:meth:`FileSystemModel.materialize` writes it out as real files.
"""

from __future__ import annotations

import hashlib
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from scabbard.storage.fileio import Op

PAGE = 4096
SECTOR = 512  # a page may be torn after any of its sectors
_DATA = ("write", "extend", "truncate")


def _parent(path: str) -> str:
    return os.path.dirname(path)


def _meta_dir(op: Op) -> str:
    """The directory whose flush makes ``op`` durable."""
    return _parent(op.dst if op.kind == "rename" else op.path)


@dataclass(frozen=True)
class CrashState:
    at: int  # operations issued before the crash
    meta_kept: int  # how many of the name operations before ``at`` persisted (a prefix)
    # per unflushed data operation (by index): None = kept whole, () = dropped,
    # a tuple of page numbers = torn, only those pages written; an entry (page, n) writes
    # only the page's first n bytes (whole sectors: torn inside the page)
    writes: tuple[tuple[int, tuple | None], ...] = ()
    how: str = ""  # "all kept", "all dropped", "random", "reordered"
    # reordered across directories: per directory, how many of its name operations
    # persisted (a prefix of each; then ``meta_kept`` is not used)
    dirs_kept: tuple[tuple[str, int], ...] = ()

    def digest(self) -> str:
        return hashlib.sha1(repr((self.at, self.meta_kept, self.writes, self.dirs_kept))
                            .encode()).hexdigest()


@dataclass
class _Point:
    """What is forced and what is open at one crash point."""

    at: int
    meta: list[int]  # indices of the name operations issued
    forced: int  # how many of them must persist
    pending: list[int]  # indices of data operations not yet flushed
    durable: set[int] = field(default_factory=set)  # data operations flushed
    by_dir: dict[str, list[int]] = field(default_factory=dict)  # name operations per directory
    forced_by_dir: dict[str, int] = field(default_factory=dict)  # ... forced by its flush


class FileSystemModel:
    """``ops``: the recorded operations; ``start``: how many of them are a base laid down
    before the recorded work (:meth:`RecordingIO.record_existing`) - no crash inside it."""

    def __init__(self, ops: list[Op], start: int = 0):
        self.ops, self.start = ops, start

    # -- crash points --------------------------------------------------------------------------
    def crash_points(self) -> list[int]:
        """Where a crash is worth trying: before every flush (the writes since the last one
        are all open), after every name operation (e.g. a record renamed into place), and at
        the end.  Crashes between two such points are covered by dropping writes."""
        pts = {len(self.ops)}
        for i, op in enumerate(self.ops):
            if op.kind in ("sync", "syncdir"):
                pts.add(i)
            elif op.is_meta:
                pts.add(i + 1)
        return sorted(p for p in pts if p > self.start)

    def point(self, at: int) -> _Point:
        ops = self.ops[:at]
        meta = [i for i, op in enumerate(ops) if op.is_meta]
        # name operations forced by a later flush of their directory, and all before them
        forced_upto = -1
        flushed_dirs: dict[str, int] = {}
        for i, op in enumerate(ops):
            if op.kind == "syncdir":  # the recording's root is logged as "."
                flushed_dirs["" if op.path == "." else op.path] = i
        for j in reversed(meta):
            d = _meta_dir(ops[j])
            if flushed_dirs.get(d, -1) > j:
                forced_upto = j
                break
        forced = sum(1 for j in meta if j <= forced_upto)
        last_sync: dict[int, int] = {}
        for i, op in enumerate(ops):
            if op.kind == "sync":
                last_sync[op.ino] = i
        durable, pending = set(), []
        for i, op in enumerate(ops):
            if op.kind in _DATA:
                (durable.add(i) if last_sync.get(op.ino, -1) > i else pending.append(i))
        by_dir: dict[str, list[int]] = {}
        for j in meta:
            by_dir.setdefault(_meta_dir(ops[j]), []).append(j)
        forced_by_dir = {d: sum(1 for j in js if flushed_dirs.get(d, -1) > j)
                         for d, js in by_dir.items()}
        return _Point(at, meta, forced, pending, durable, by_dir, forced_by_dir)

    def kept_names(self, state: CrashState, p: _Point) -> set[int]:
        """The name operations (indices) the crash state persisted."""
        if not state.dirs_kept:
            return set(p.meta[:state.meta_kept])
        kept = dict(state.dirs_kept)
        return {j for d, js in p.by_dir.items() for j in js[:kept.get(d, len(js))]}

    # -- sampling ------------------------------------------------------------------------------
    def sample(self, n: int, rng: random.Random):
        """Up to ``n`` distinct crash states, round robin over the crash points (in a shuffled
        order): at each, the state where every open write persisted (what a killed process
        leaves), the one where none did, ones where all but one did (the disk reordered
        them), and random ones (each open write kept, dropped or torn; a random prefix of the
        name operations) - mixed from the first round on, so a budget smaller than the points
        still sees every kind."""
        points = self.crash_points()
        rng.shuffle(points)
        seen: set[str] = set()
        cache: dict[int, _Point] = {}
        modes = ("all dropped", "one dropped", "random", "all kept", "reordered")
        for rnd in range(20 * max(1, -(-n // max(1, len(points))))):
            for k, at in enumerate(points):
                if len(seen) >= n:
                    return
                p = cache[at] if at in cache else cache.setdefault(at, self.point(at))
                how = modes[(rnd + k) % 5] if rnd < 5 else \
                    ("one dropped", "random", "reordered")[rnd % 3]
                s = self._state(p, how, rng)
                if s.digest() not in seen:
                    seen.add(s.digest())
                    yield s

    def _state(self, p: _Point, how: str, rng: random.Random) -> CrashState:
        if how == "reordered":  # each directory its own prefix (ALICE), open writes random
            dirs = tuple((d, rng.randint(p.forced_by_dir[d], len(js)))
                         for d, js in sorted(p.by_dir.items()))
            s = self._state(p, "random", rng)
            return CrashState(p.at, len(p.meta), s.writes, how, dirs)
        if how == "all kept":
            return CrashState(p.at, len(p.meta), (), how)
        if how == "all dropped":
            return CrashState(p.at, p.forced, tuple((i, ()) for i in p.pending), how)
        if how == "one dropped":  # every open write but one reached the disk (reordering)
            if not p.pending:
                return CrashState(p.at, rng.randint(p.forced, len(p.meta)), (), how)
            i = rng.choice(p.pending)
            return CrashState(p.at, len(p.meta), ((i, ()),), how)
        writes = []
        for i in p.pending:
            r = rng.random()
            if r < 0.5:
                continue  # kept
            if r < 0.8 or self.ops[i].kind != "write":
                writes.append((i, ()))
            else:
                keep = []
                for pg in _pages(self.ops[i]):
                    r = rng.random()
                    if r < 0.4:
                        keep.append(pg)
                    elif r < 0.6:  # torn inside the page, after a sector
                        keep.append((pg, SECTOR * rng.randint(1, PAGE // SECTOR - 1)))
                writes.append((i, tuple(keep)))
        meta_kept = rng.randint(p.forced, len(p.meta))
        return CrashState(p.at, meta_kept, tuple(writes), how)

    # -- building a state ----------------------------------------------------------------------
    def materialize(self, state: CrashState, target: Path) -> None:
        """Write the crash state's files under ``target`` (an empty folder)."""
        ops = self.ops[:state.at]
        p = self.point(state.at)
        choice = dict(state.writes)
        content: dict[int, bytearray] = {}
        for i, op in enumerate(ops):
            if op.kind not in _DATA or (i not in p.durable and choice.get(i) == ()):
                continue
            buf = content.setdefault(op.ino, bytearray())
            if op.kind == "truncate":
                del buf[op.size:]
            elif op.kind == "extend":
                if len(buf) < op.size:
                    buf.extend(bytes(op.size - len(buf)))
            else:
                keep = None if i in p.durable else choice.get(i)
                _write(buf, op, keep)
        names: dict[str, int] = {}
        dirs = {""}
        kept = self.kept_names(state, p)
        for j in p.meta:
            if j not in kept:
                continue
            op = ops[j]
            if op.kind == "mkdir" and _parent(op.path) in dirs:
                dirs.add(op.path)
            elif op.kind == "create" and _parent(op.path) in dirs:
                names[op.path] = op.ino
            elif op.kind == "rename" and op.path in names and _parent(op.dst) in dirs:
                names[op.dst] = names.pop(op.path)
            elif op.kind == "unlink":
                names.pop(op.path, None)
        target = Path(target)
        for d in sorted(dirs):
            (target / d).mkdir(parents=True, exist_ok=True)
        for path, ino in names.items():
            (target / path).write_bytes(bytes(content.get(ino, b"")))

    def describe(self, state: CrashState, around: int = 40) -> str:
        """The operation log up to the crash, the last ``around`` operations, marked."""
        p = self.point(state.at)
        choice = dict(state.writes)
        kept_meta = self.kept_names(state, p)
        lines = [f"crash after operation {state.at} of {len(self.ops)} ({state.how}); "
                 f"{len(kept_meta)} of {len(p.meta)} name operations persisted "
                 f"({p.forced} forced by directory flushes"
                 f"{', each directory its own prefix' if state.dirs_kept else ''})"]
        for i in range(max(0, state.at - around), state.at):
            op = self.ops[i]
            if op.is_meta:
                mark = "kept   " if i in kept_meta else "LOST   "
            elif op.kind in _DATA:
                if i in p.durable:
                    mark = "durable"
                elif i not in choice or choice[i] is None:
                    mark = "kept   "
                elif choice[i] == ():
                    mark = "DROPPED"
                else:
                    mark = f"TORN {len(choice[i])}/{len(_pages(op))}"
            else:
                mark = "       "
            lines.append(f"  {i:6d} {mark}  {op.describe()}")
        return "\n".join(lines)


def _pages(op: Op) -> list[int]:
    first, last = op.pos // PAGE, (op.pos + len(op.data) - 1) // PAGE
    return list(range(first, last + 1))


def _write(buf: bytearray, op: Op, pages: tuple | None) -> None:
    end = op.pos + len(op.data)
    if len(buf) < end:
        buf.extend(bytes(end - len(buf)))
    if pages is None:
        buf[op.pos:end] = op.data
        return
    for entry in pages:
        pg, upto = entry if isinstance(entry, tuple) else (entry, PAGE)
        lo, hi = max(op.pos, pg * PAGE), min(end, pg * PAGE + upto)
        if lo < hi:
            buf[lo:hi] = op.data[lo - op.pos:hi - op.pos]
