"""Columnar batches: one contiguous numpy array per field plus the stream offset.

A :class:`Batch` is the unit that flows through the engine (DESIGN.md §3): the
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
        """Size in memory: the bytes of its columns."""
        return sum(c.nbytes for c in self.columns)

    def column(self, name: str) -> np.ndarray:
        return self.columns[self.schema.index(name)]

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


def uuid_hex(col: np.ndarray) -> np.ndarray:
    """Render a uuid column ((n, 2) uint64 words holding the raw 16 bytes) as canonical strings."""
    raw = np.ascontiguousarray(col).view(np.uint8).reshape(-1, 16)
    out = []
    for row in raw:
        h = row.tobytes().hex()
        out.append(f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
    return np.array(out, dtype=object)
