"""The operators persistence push-up moved below the ingress p-stream, run on source batches.

:func:`scabbard.query.optimize.push_up` decides *what* moves (σ and π; compression is
the p-stream's :class:`~scabbard.compression.policy.Compression`); a :class:`Reducer`
applies it to each batch the source delivers, before the batch is persisted.  The
predicate is evaluated column-at-a-time by numpy (no Python loop per tuple) and the
kept attributes are compacted in one pass each.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scabbard import timers
from scabbard.batch import Batch
from scabbard.compression.base import FLOAT
from scabbard.compression.policy import Compression
from scabbard.data import Dataset
from scabbard.engine import frontcode
from scabbard.engine.physical import eval_numpy
from scabbard.kernels.codegen import FrontSpec, compile_front
from scabbard.query import Query, optimize
from scabbard.query.expr import QueryError, resolve
from scabbard.query.optimize import PushUp
from scabbard.schema import Schema


class Reducer:
    """Source batch -> the p-stream's batch: surviving tuples, kept attributes."""

    def __init__(self, pushup: PushUp, cache_dir: Path | None = None):
        """``cache_dir``: where the predicate's generated kernel is cached (the engine's
        :attr:`~scabbard.engine.runtime.EngineConfig.cache_dir`); None: numpy evaluates it."""
        self.pushup = pushup
        self.schema = pushup.schema
        src = pushup.source
        self._keep = [src.index(c) for c in pushup.columns]
        self._reads = sorted(pushup.predicate.columns()) if pushup.predicate is not None else []
        # what it keeps of every tuple is a zero-copy view (the timestamp stays first, so a
        # replayed copy's deferred shift stays deferred)
        self._view = not src.stream or (bool(self._keep) and self._keep[0] == 0)
        self._kernel, self._inputs = None, ()
        if pushup.predicate is not None and cache_dir is not None:
            self._kernel, self._inputs = _filter_kernel(pushup.predicate, src, cache_dir)

    def __call__(self, batch: Batch) -> Batch:
        """The kept attributes of the surviving tuples: the predicate evaluated on the columns
        it reads, the survivors' rows numbered once, and each kept column gathered by those
        numbers (numpy's boolean indexing cost 3.6-5.6 ns a tuple here; a gather ~0.2), a
        replayed copy's deferred timestamp shift added to the survivors only.  Only the kept
        and read columns are made; where every tuple survives, nothing is (a zero-copy view
        of the kept columns: the codecs and the segment read them where they are)."""
        span = timers.start()
        rows = None
        if self.pushup.predicate is not None and len(batch):
            src, n = batch.schema, len(batch)
            if self._kernel is not None:  # one pass: each survivor's row number
                idx = np.empty(n, np.int64)
                none = np.empty((n, 0), np.int64)
                m = self._kernel(n, idx, *(batch.column_array(src.index(c))
                                           for c in self._inputs),
                                 idx, none, none, np.empty((n, 0), np.float64))
                if m < n:
                    rows = idx[:m]
            else:
                env = {c: batch.column_array(src.index(c)) for c in self._reads}
                mask = np.broadcast_to(eval_numpy(self.pushup.predicate, env, src), (n,))
                if not mask.all():
                    rows = np.flatnonzero(mask)
        if rows is None and self._view:  # a projection: the kept columns as they are
            out = batch.select(self.schema, self._keep)
        else:
            cols = [batch.column_array(i) if rows is None else _gather(batch, i, rows)
                    for i in self._keep]
            out = Batch(self.schema, tuple(np.ascontiguousarray(c) for c in cols), batch.offset)
        timers.stop(span, "pushup", len(batch))
        return out


def _filter_kernel(predicate, source: Schema, cache_dir: Path):
    """The predicate as a generated kernel (:mod:`scabbard.kernels.codegen`, index mode: the
    row numbers of the tuples it keeps - numpy's mask, then its nonzero rows, cost 2.5-3x
    as much on YSB's) and the columns it reads; ``(None, ())`` where it cannot be generated
    (numpy evaluates it then)."""
    try:
        code = frontcode.gen(resolve(predicate, source),
                             {f.name: frontcode.column_code(f.name, f.dtype)
                              for f in source.fields})
    except QueryError:
        return None, ()
    columns = tuple(n for n in source.names if n in code.deps)
    spec = FrontSpec(columns=columns, relations=(), steps=(("filter", code.text),), keys=(),
                     ints=(), floats=(), index=True)  # index mode reads no timestamps
    return compile_front(spec, cache_dir), columns


def _gather(batch: Batch, i: int, rows: np.ndarray) -> np.ndarray:
    """Rows ``rows`` of column ``i`` (a deferred shift added to them alone)."""
    parts = batch.column_parts(i)
    if len(parts) > 1:
        return batch.column_array(i).take(rows, axis=0)
    a, add = parts[0]
    out = a.take(rows, axis=0)
    if add:
        out += add
    return out


@dataclass(frozen=True)
class Footprint:
    """Bytes persisted per *input* tuple, before and after push-up and compression."""

    query: str
    row_bytes: int  # before: every attribute of every tuple
    kept_bytes: int  # per tuple the p-stream keeps after push-up
    selectivity: float | None  # fraction of tuples kept (measured on a sample)
    compressed: dict[str, float]  # scheme -> bytes per input tuple after push-up + compression
    sample_rows: int = 0

    @property
    def pushed_bytes(self) -> float | None:
        return None if self.selectivity is None else self.kept_bytes * self.selectivity


def footprint(query: Query, dataset: Dataset | None = None, rows: int = 1 << 20,
              batch_rows: int = 1 << 16, lossy_decimals: int | None = 2) -> Footprint:
    """Measure what push-up and compression leave of the first ``rows`` tuples of
    ``dataset`` (without a dataset, only the attribute sizes are known)."""
    pushup = optimize.push_up(query.node)
    src = pushup.source
    if dataset is None:
        return Footprint(query.name, src.payload_bytes, pushup.bytes_per_kept_tuple, None, {})
    reduce = Reducer(pushup)
    schemes = {"default": Compression.scheme(pushup.schema, "default")}
    if lossy_decimals is not None and any(f.dtype in FLOAT for f in pushup.schema.fields):
        schemes[f"lossy ({lossy_decimals} decimals)"] = Compression.scheme(
            pushup.schema, "default", lossy_decimals)
    seen = kept = 0
    stored = dict.fromkeys(schemes, 0)
    for batch in dataset.batches(batch_rows, 0, min(rows, dataset.rows)):
        b = reduce(batch)
        seen += len(batch)
        kept += len(b)
        if len(b):
            for name, c in schemes.items():
                stored[name] += sum(p.nbytes for _, p in c(b))
    return Footprint(query.name, src.payload_bytes, pushup.bytes_per_kept_tuple,
                     kept / seen if seen else None,
                     {k: v / seen for k, v in stored.items()} if seen else {}, seen)


def explain(query: Query, fp: Footprint | None = None) -> str:
    """The plan before and after push-up, with the p-stream drawn where it persists, and
    the bytes persisted per input tuple (``scabbard explain``)."""
    pushup = optimize.push_up(query.node)
    src = pushup.source

    def with_pstream(plan_text: str, below: list[str]) -> str:
        out = []
        for line in plan_text.splitlines():
            if line.lstrip().startswith("Source["):
                pad = line[:len(line) - len(line.lstrip())]
                for k, text in enumerate(below):
                    out.append(pad + "  " * k + text)
                out.append(pad + "  " * len(below) + f"Source[{query.node.source().name}: "
                           f"{len(src)} attributes, {src.size_label}]")
            else:
                out.append(line)
        return "\n".join(out)

    before = with_pstream(query.node.explain(),
                          [f"P-Stream[{len(src)} attributes, {src.payload_bytes} B/tuple, raw]"])
    moved = [m for m in pushup.moved if not m.startswith("π")]
    after_ops = [f"P-Stream[{len(pushup.columns)} attributes, {pushup.bytes_per_kept_tuple} "
                 f"B/tuple]", "Compress[per column, chosen at run time]",
                 f"π[{', '.join(pushup.columns)}]"] + moved[::-1]
    after = with_pstream(pushup.plan.explain(), after_ops)
    lines = [f"{query.name} before push-up (the p-stream right after the source):", before, "",
             "after push-up (§3.4: σ, π and compression below the p-stream; stateful "
             "operators stay above it):", after, "", pushup.explain(), ""]
    fp = fp or footprint(query)
    lines.append("bytes persisted per input tuple:")
    lines.append(f"  {'no push-up, raw:':<36}{fp.row_bytes:8.2f}")
    if fp.selectivity is None:
        lines.append(f"  {'push-up, raw:':<36}{fp.kept_bytes:8.2f} per kept tuple (selectivity "
                     f"unknown without data: pass --data)")
    else:
        lines.append(f"  {'push-up, raw:':<36}{fp.pushed_bytes:8.2f}  ({fp.kept_bytes} B x "
                     f"selectivity {fp.selectivity:.3f}, measured on {fp.sample_rows:,} tuples)")
        for name, b in fp.compressed.items():
            lines.append(f"  {'push-up, ' + name + ':':<36}{b:8.2f}  "
                         f"({fp.row_bytes / b if b else float('inf'):.1f}x less than raw)")
    return "\n".join(lines)
