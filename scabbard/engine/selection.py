"""Stateless queries: σ, π and ⋈ with a relation, nothing stateful (PipeFabric's Table 1).

A stateless plan is one operator of the graph (``select0``) between the source and the sink.
It compiles to one generated numba kernel (:mod:`scabbard.kernels.codegen`, in ``index``
mode): per surviving tuple its row number in the batch, and every *derived* result column
(a computed π expression, a relation's column).  The *plain* result columns - source
attributes passed through, renamed or not - are gathered from the batch by those row
numbers, or passed on as they are (no copy) when every tuple survived.  Without a filter or
a relation probe and with nothing derived, no kernel runs at all.

Each task's surviving rows go to the sink in input order; there are no windows to assemble.
A result row's *position* is its tuple's input offset plus one: it stands where a windowed
result's window end does - in the output's clock (the exactly-once sinks drop, after a
recovery, every row at or below the committed position), in the channel's watermark, in the
result columns under the key ``window_end`` (never written: a stateless result has no such
column, and one must not be named so).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scabbard import timers
from scabbard.batch import Batch
from scabbard.engine import frontcode
from scabbard.kernels.codegen import FrontSpec, compile_front
from scabbard.query.expr import QueryError
from scabbard.query.plan import Node, RelationJoin, stateless
from scabbard.schema import Field

POSITION = "window_end"  # the result columns' key of each row's position (see the module)
FLOATS = ("float32", "float64")


@dataclass(frozen=True)
class Column:
    """One result column: gathered from source column ``source``, or read from the kernel's
    int64 words ``[slot, slot + width)`` (integers, uuids) or float ``slot`` (floats)."""

    field: Field
    source: str | None
    slot: int = 0

    @property
    def width(self) -> int:
        return 2 if self.field.dtype == "uuid" else 1


@dataclass
class Selection:
    """A stateless query compiled (see the module): the kernel's spec and the result columns."""

    node: Node
    spec: FrontSpec
    input_columns: tuple[str, ...]
    relations: tuple[tuple[RelationJoin, tuple[str, ...]], ...]
    columns: tuple[Column, ...]
    id: str = "select0"
    _kernel: object = None

    @property
    def needs_kernel(self) -> bool:
        """Something to compute per tuple: a filter, a relation probe or a derived column."""
        return bool(self.spec.steps or self.spec.keys or self.spec.floats)

    def kernel(self, cache_dir: Path):
        if self._kernel is None and self.needs_kernel:
            self._kernel = compile_front(self.spec, cache_dir)
        return self._kernel

    def select(self, batch: Batch, relation_args: tuple, cache_dir: Path) -> dict:
        """The batch's surviving rows as result columns, in input order, with their positions
        (key :data:`POSITION`)."""
        n = len(batch)
        cols = {f.name: c for f, c in zip(batch.schema.fields, batch.columns, strict=True)}
        m, idx = n, None
        span = timers.start()
        if self.needs_kernel:
            idx = np.empty(n, dtype=np.int64)
            o_keys = np.empty((n, len(self.spec.keys)), dtype=np.int64)
            o_f = np.empty((n, len(self.spec.floats)), dtype=np.float64)
            m = self.kernel(cache_dir)(n, batch.timestamps, *(cols[c] for c in self.input_columns),
                                       *relation_args, idx, o_keys, np.empty((n, 0), np.int64),
                                       o_f)
        timers.stop(span, "select", n)
        span = timers.start()
        every = m == n  # every tuple survived: the plain columns pass as they are
        rows = None if every else idx[:m]
        out = {}
        for c in self.columns:
            f = c.field
            if c.source is not None:
                out[f.name] = cols[c.source] if every else cols[c.source][rows]
            elif f.dtype == "uuid":
                out[f.name] = np.ascontiguousarray(o_keys[:m, c.slot:c.slot + 2]).view(np.uint64)
            elif f.dtype in FLOATS:
                out[f.name] = o_f[:m, c.slot].astype(f.numpy_dtype)
            else:
                out[f.name] = o_keys[:m, c.slot].astype(f.numpy_dtype)
        if idx is None:
            out[POSITION] = np.arange(batch.offset + 1, batch.end + 1, dtype=np.int64)
        else:  # the row numbers become the positions in place (a fresh page costs here)
            out[POSITION] = np.add(idx[:m], batch.offset + 1, out=idx[:m])
        timers.stop(span, "gather", n)
        return out


def make_selection(root: Node) -> Selection:
    """Compile a stateless plan (:func:`scabbard.query.plan.stateless`)."""
    if not stateless(root):
        raise QueryError(f"{root.label()}: not a stateless plan (σ, π and ⋈ relation only)")
    schema = root.schema
    if POSITION in schema or "window_start" in schema:
        raise QueryError("a stateless query's result cannot have a column named window_start or "
                         "window_end (they name windows); alias it")
    f = frontcode.front(root)
    src = root.source().schema
    plain = {frontcode.column_code(s.name, s.dtype): s.name for s in src.fields}
    keys, floats, columns = [], [], []
    for field in schema.fields:
        code = f.env[field.name]
        if code in plain:
            columns.append(Column(field, plain[code]))
            continue
        f.codes.append(code)
        if field.dtype in FLOATS:
            columns.append(Column(field, None, len(floats)))
            floats.append(code.text)
        else:
            columns.append(Column(field, None, len(keys)))
            keys.extend(code.text if code.uuid else [code.text])
    inputs, relations = frontcode.inputs(f, src)
    spec = FrontSpec(columns=inputs, relations=tuple(cols for _, cols in relations),
                     steps=tuple(f.steps), keys=tuple(keys), ints=(), floats=tuple(floats),
                     index=True)
    return Selection(root, spec, inputs, relations, tuple(columns))
