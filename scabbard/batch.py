"""Columnar batches: one contiguous numpy array per field plus the stream offset.

A :class:`Batch` is the unit that flows through the engine (docs/design.md): the
source cuts a stream into batches, kernels take their arrays, p-streams persist
them.  ``offset`` is the logical position of the batch's first tuple in its
stream; offsets only increase along a stream.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from scabbard.schema import Schema, SchemaError


@dataclass(frozen=True)
class Batch:
    schema: Schema
    columns: tuple[np.ndarray, ...]
    offset: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", tuple(self.columns))
        if self.offset < 0:
            raise SchemaError(f"batch offset must be >= 0, got {self.offset}")
        self.schema.check_columns(self.columns)

    @classmethod
    def from_arrays(
        cls,
        schema: Schema,
        arrays: Mapping[str, np.ndarray] | Sequence[np.ndarray],
        offset: int = 0,
    ) -> Batch:
        """Build a batch, converting each array to its field's dtype (copying only if needed)."""
        if isinstance(arrays, Mapping):
            missing = [n for n in schema.names if n not in arrays]
            extra = [n for n in arrays if n not in schema]
            if missing or extra:
                raise SchemaError(
                    f"schema {schema.name!r}: missing columns {missing}, unknown columns {extra}"
                )
            arrays = [arrays[n] for n in schema.names]
        cols = tuple(
            np.ascontiguousarray(a, dtype=f.numpy_dtype)
            for f, a in zip(schema.fields, arrays, strict=True)
        )
        return cls(schema, cols, offset)

    def __len__(self) -> int:
        return len(self.columns[0])

    @property
    def end(self) -> int:
        """Offset one past the last tuple."""
        return self.offset + len(self)

    @property
    def timestamps(self) -> np.ndarray:
        return self.columns[0]

    @property
    def nbytes(self) -> int:
        """Size in the paper's row layout (row_bytes per tuple)."""
        return len(self) * self.schema.row_bytes

    @property
    def column_bytes(self) -> int:
        """Size in memory: the bytes of its columns (nothing deferred is made)."""
        return sum(self.column_nbytes())

    def column_nbytes(self) -> tuple[int, ...]:
        """Each column's bytes, without making a deferred column."""
        return tuple(c.nbytes for c in self.columns)

    def column_parts(self, i: int) -> list[tuple[np.ndarray, int]]:
        """Column ``i`` as consecutive zero-copy pieces ``(array, add)``: its values are the
        arrays one after the other, ``add`` added to each value of its piece (a replayed
        copy's deferred timestamp shift; 0 elsewhere) - what a writer copies from without
        making the column."""
        return [(self.columns[i], 0)]

    def at(self, offset: int) -> Batch:
        """The same tuples at stream offset ``offset`` (zero-copy; nothing deferred is made)."""
        return Batch(self.schema, self.columns, offset)

    def select(self, schema: Schema, indices: Sequence[int]) -> Batch:
        """Columns ``indices`` as a batch of ``schema`` (zero-copy; a deferred shift stays
        deferred: the timestamp, column 0, must stay column 0)."""
        return Batch(schema, tuple(self.columns[i] for i in indices), self.offset)

    def column_array(self, i: int) -> np.ndarray:
        """Column ``i`` as one array, made from its pieces if it is deferred or in pieces
        (only this column: a reader of a few columns makes no other)."""
        parts = self.column_parts(i)
        if len(parts) == 1 and not parts[0][1]:
            return parts[0][0]
        out = np.empty((len(self),) + parts[0][0].shape[1:], parts[0][0].dtype)
        at = 0
        for a, add in parts:
            if add:
                np.add(a, add, out=out[at:at + len(a)])
            else:
                out[at:at + len(a)] = a
            at += len(a)
        return out

    def column(self, name: str) -> np.ndarray:
        return self.columns[self.schema.index(name)]

    def event_time(self) -> tuple[np.ndarray, int]:
        """The timestamps as ``(array, shift)``: each tuple's is ``array[i] + shift``.  A
        plain batch's shift is 0; a :class:`ReplayBatch` defers its own."""
        return self.timestamps, 0

    def segments(self) -> tuple[Batch, ...]:
        """The batch as consecutive zero-copy pieces, each with a single timestamp shift: the
        batch itself, or a :class:`SpanBatch`'s parts."""
        return (self,)

    def event_edges(self) -> tuple[int, int]:
        """The first and the last tuple's event time (a non-empty batch), read without
        making a deferred column."""
        parts = self.segments()
        ts, shift = parts[0].event_time()
        first = int(ts[0]) + shift
        ts, shift = parts[-1].event_time()
        return first, int(ts[-1]) + shift

    def writable_copy(self) -> Batch:
        """The batch with every column copied into writable memory of its own (what a batch
        read back from storage is made of; a dataset's columns are read-only)."""
        return Batch(self.schema, tuple(np.array(c) for c in self.columns), self.offset)

    def slice(self, start: int, stop: int) -> Batch:
        """Zero-copy view of rows [start, stop) of this batch."""
        n = len(self)
        if not 0 <= start <= stop <= n:
            raise IndexError(f"slice [{start}, {stop}) out of range for a batch of {n} rows")
        return Batch(self.schema, tuple(c[start:stop] for c in self.columns), self.offset + start)

    def to_pandas(self):
        """A DataFrame view for humans: uuid columns become hex strings, codes stay codes."""
        import pandas as pd

        data = {}
        for f, col in zip(self.schema.fields, self.columns, strict=True):
            data[f.name] = uuid_hex(col) if f.dtype == "uuid" else col
        return pd.DataFrame(data, index=pd.RangeIndex(self.offset, self.end, name="offset"))


class ReplayBatch(Batch):
    """A batch of a replayed copy of a dataset: its timestamps are the dataset's plus
    ``shift``, added when the timestamp column is first read (then kept).

    The shift is a pass over every tuple.  Made by the source, it is a serial stage's
    work (the dispatcher's, 0.3-0.9 ns a tuple here); deferred, a reader that needs only
    the windows' panes - the fragment, through :meth:`event_time` - adds it where it cuts
    them, at no cost, and the column itself is never made.  Every other reader sees the
    shifted column, as from a plain :class:`Batch`.
    """

    def __init__(self, schema: Schema, columns: Sequence[np.ndarray], offset: int = 0,
                 shift: int = 0):
        # not the dataclass's __init__: ``columns`` is a property here
        raw = tuple(columns)
        schema.check_columns(raw)
        if offset < 0:
            raise SchemaError(f"batch offset must be >= 0, got {offset}")
        object.__setattr__(self, "schema", schema)
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "_raw", raw)
        object.__setattr__(self, "_shift", int(shift))
        object.__setattr__(self, "_columns", None)

    @property
    def columns(self) -> tuple[np.ndarray, ...]:  # type: ignore[override]
        cols = self._columns
        if cols is None:  # two threads may both shift: the same result, either kept
            cols = (np.add(self._raw[0], self._shift),) + self._raw[1:]
            object.__setattr__(self, "_columns", cols)
        return cols

    def __len__(self) -> int:
        return len(self._raw[0])

    def column_nbytes(self) -> tuple[int, ...]:
        return tuple(c.nbytes for c in self._raw)  # the shift changes no size: nothing made

    def column_parts(self, i: int) -> list[tuple[np.ndarray, int]]:
        if i == 0 and self._columns is None:
            return [(self._raw[0], self._shift)]
        return [(self.columns[i] if i == 0 else self._raw[i], 0)]

    def at(self, offset: int) -> Batch:
        b = ReplayBatch(self.schema, self._raw, offset, self._shift)
        object.__setattr__(b, "_columns", self._columns)
        return b

    def slice(self, start: int, stop: int) -> Batch:
        """Zero-copy view of rows [start, stop), its shift still deferred."""
        n = len(self)
        if not 0 <= start <= stop <= n:
            raise IndexError(f"slice [{start}, {stop}) out of range for a batch of {n} rows")
        if self._columns is not None:
            return super().slice(start, stop)
        return ReplayBatch(self.schema, tuple(c[start:stop] for c in self._raw),
                           self.offset + start, self._shift)

    def select(self, schema: Schema, indices: Sequence[int]) -> Batch:
        if self._columns is not None or not indices or indices[0] != 0:
            return super().select(schema, indices)
        return ReplayBatch(schema, tuple(self._raw[i] for i in indices), self.offset,
                           self._shift)

    def column(self, name: str) -> np.ndarray:
        i = self.schema.index(name)
        return self.columns[0] if i == 0 else self._raw[i]

    def event_time(self) -> tuple[np.ndarray, int]:
        if self._columns is not None:
            return self._columns[0], 0
        return self._raw[0], self._shift


class SpanBatch(Batch):
    """A batch across the end of a replayed dataset: consecutive batches (``parts``, each a
    zero-copy view of one copy, with that copy's deferred shift) as one.

    A task may then hold more tuples than one copy of a small dataset.  Its columns are made
    (the parts' columns joined, the shifts added) on first read; a reader that goes part by
    part through :meth:`segments` - a global aggregate's fragment - never makes them.
    """

    def __init__(self, schema: Schema, parts: Sequence[Batch], offset: int = 0):
        parts = tuple(parts)
        if not parts:
            raise SchemaError("a span batch needs at least one part")
        if offset < 0:
            raise SchemaError(f"batch offset must be >= 0, got {offset}")
        object.__setattr__(self, "schema", schema)
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "_parts", parts)
        object.__setattr__(self, "_columns", None)

    @property
    def columns(self) -> tuple[np.ndarray, ...]:  # type: ignore[override]
        cols = self._columns
        if cols is None:  # two threads may both join them: the same result, either kept
            cols = tuple(np.concatenate([p.columns[j] for p in self._parts])
                         for j in range(len(self.schema.fields)))
            object.__setattr__(self, "_columns", cols)
        return cols

    def __len__(self) -> int:
        return sum(len(p) for p in self._parts)

    def segments(self) -> tuple[Batch, ...]:
        return self._parts

    def column_nbytes(self) -> tuple[int, ...]:
        per = [p.column_nbytes() for p in self._parts]
        return tuple(sum(x) for x in zip(*per, strict=True))

    def column_parts(self, i: int) -> list[tuple[np.ndarray, int]]:
        if self._columns is not None:
            return [(self._columns[i], 0)]
        return [piece for p in self._parts for piece in p.column_parts(i)]

    def at(self, offset: int) -> Batch:
        b = SpanBatch(self.schema, self._parts, offset)
        object.__setattr__(b, "_columns", self._columns)
        return b

    def select(self, schema: Schema, indices: Sequence[int]) -> Batch:
        if self._columns is not None:
            return super().select(schema, indices)
        return SpanBatch(schema, [p.select(schema, indices) for p in self._parts], self.offset)


def uuid_hex(col: np.ndarray) -> np.ndarray:
    """Render a uuid column ((n, 2) uint64 words holding the raw 16 bytes) as canonical strings."""
    raw = np.ascontiguousarray(col).view(np.uint8).reshape(-1, 16)
    out = []
    for row in raw:
        h = row.tobytes().hex()
        out.append(f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
    return np.array(out, dtype=object)
