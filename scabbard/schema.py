"""Schemas: ordered, typed fields with the paper's row sizes (Table 3, docs/design.md).

A :class:`Schema` is what every other part of the workbench agrees on: the Spark
generators write it, the replay format stores one file per field, the engine's
kernels take one numpy array per field, and the persisted segments record its
fingerprint.

Field 0 of a stream schema is the event timestamp, an ``int64`` in milliseconds
of event time since the start of the dataset.  ``row_bytes`` is the size of one
tuple in the C layout the paper measures (the LightSaber structs, padding
included), a labelled reference only: "MB/s" and "bytes persisted per tuple" are computed
from ``payload_bytes``, the bytes the engine stores (YSB: 68, not the paper's 128).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from scabbard.errors import UserError

# name -> (numpy dtype of one value, values per row in the column array, bytes per row)
# A "uuid" is 16 raw bytes (RFC 4122 byte order) held as two uint64 words per row.
_TYPES: dict[str, tuple[np.dtype, int, int]] = {
    "int32": (np.dtype("<i4"), 1, 4),
    "int64": (np.dtype("<i8"), 1, 8),
    "uint32": (np.dtype("<u4"), 1, 4),
    "float32": (np.dtype("<f4"), 1, 4),
    "float64": (np.dtype("<f8"), 1, 8),
    "uuid": (np.dtype("<u8"), 2, 16),
}
NUMERIC_TYPES = frozenset({"int32", "int64", "uint32", "float32", "float64"})
TIME_UNIT = "ms"


class SchemaError(UserError, ValueError):
    """A schema is malformed, or data does not match it."""


@dataclass(frozen=True)
class Field:
    """One attribute.

    ``categories`` names the values of a coded enumeration: value ``i`` of the
    column means ``categories[i]`` (e.g. YSB's event types).
    """

    name: str
    dtype: str
    description: str = ""
    categories: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise SchemaError(f"field name {self.name!r} is not an identifier")
        if self.dtype not in _TYPES:
            raise SchemaError(
                f"field {self.name!r}: unknown type {self.dtype!r} (known: {', '.join(_TYPES)})"
            )
        if self.categories and self.dtype not in ("int32", "int64"):
            raise SchemaError(f"field {self.name!r}: only integer fields can carry categories")

    @property
    def numpy_dtype(self) -> np.dtype:
        """dtype of one element of this field's column array."""
        return _TYPES[self.dtype][0]

    @property
    def width(self) -> int:
        """Elements per row in the column array (2 for uuid, else 1)."""
        return _TYPES[self.dtype][1]

    @property
    def itemsize(self) -> int:
        """Bytes one value of this field takes."""
        return _TYPES[self.dtype][2]

    @property
    def is_numeric(self) -> bool:
        return self.dtype in NUMERIC_TYPES

    def column_shape(self, rows: int) -> tuple[int, ...]:
        return (rows,) if self.width == 1 else (rows, self.width)

    def empty(self, rows: int) -> np.ndarray:
        return np.empty(self.column_shape(rows), dtype=self.numpy_dtype)

    def to_dict(self) -> dict:
        d = {"name": self.name, "dtype": self.dtype}
        if self.description:
            d["description"] = self.description
        if self.categories:
            d["categories"] = list(self.categories)
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> Field:
        return cls(
            name=d["name"],
            dtype=d["dtype"],
            description=d.get("description", ""),
            categories=tuple(d.get("categories", ())),
        )


@dataclass(frozen=True)
class Schema:
    """An ordered list of fields, with the paper's row size.

    ``stream`` schemas must start with the ``int64`` event timestamp; side tables
    (e.g. YSB's ad -> campaign relation) need not.  ``row_bytes`` defaults to the
    sum of the field sizes; a larger value models the C struct's trailing padding.
    """

    name: str
    fields: tuple[Field, ...]
    row_bytes: int = 0
    stream: bool = True
    description: str = ""
    _index: Mapping[str, int] = field(init=False, repr=False, compare=False)
    _fingerprint: str = field(init=False, repr=False, compare=False, default="")
    _checks: tuple = field(init=False, repr=False, compare=False, default=())
    _names: tuple = field(init=False, repr=False, compare=False, default=())

    def __post_init__(self) -> None:
        fields = tuple(self.fields)
        object.__setattr__(self, "fields", fields)
        if not fields:
            raise SchemaError(f"schema {self.name!r} has no fields")
        names = [f.name for f in fields]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise SchemaError(f"schema {self.name!r}: duplicate field names {dupes}")
        if self.stream and (fields[0].name != "timestamp" or fields[0].dtype != "int64"):
            raise SchemaError(
                f"schema {self.name!r}: field 0 of a stream must be 'timestamp' of type int64, "
                f"got {fields[0].name!r} of type {fields[0].dtype}"
            )
        payload = sum(f.itemsize for f in fields)
        if self.row_bytes == 0:
            object.__setattr__(self, "row_bytes", payload)
        elif self.row_bytes < payload:
            raise SchemaError(
                f"schema {self.name!r}: row_bytes={self.row_bytes} is smaller than its "
                f"fields' {payload} bytes"
            )
        object.__setattr__(self, "_index", {n: i for i, n in enumerate(names)})
        object.__setattr__(self, "_names", tuple(names))  # (read for every batch made)
        canon = {
            "fields": [(f.name, f.dtype) for f in fields],
            "row_bytes": self.row_bytes,
            "stream": self.stream,
        }
        blob = json.dumps(canon, sort_keys=True, separators=(",", ":")).encode()
        object.__setattr__(self, "_fingerprint", hashlib.sha256(blob).hexdigest()[:16])
        object.__setattr__(self, "_checks", tuple((f.numpy_dtype, f.width) for f in fields))

    # -- lookup -------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        return self._names

    @property
    def payload_bytes(self) -> int:
        """Bytes of the fields themselves, without padding."""
        return sum(f.itemsize for f in self.fields)

    @property
    def padding_bytes(self) -> int:
        return self.row_bytes - self.payload_bytes

    @property
    def size_label(self) -> str:
        """The bytes a tuple is stored in - every bytes-per-tuple and MB/s figure uses these -
        with the paper's padded C struct beside them where it is larger (YSB: "68 B/tuple
        (the paper's struct: 128 B)")."""
        own = f"{self.payload_bytes} B/tuple"
        return own if not self.padding_bytes else f"{own} (the paper's struct: {self.row_bytes} B)"

    def __len__(self) -> int:
        return len(self.fields)

    def __iter__(self):
        return iter(self.fields)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def index(self, name: str) -> int:
        try:
            return self._index[name]
        except KeyError:
            raise SchemaError(
                f"schema {self.name!r} has no field {name!r} (fields: {', '.join(self.names)})"
            ) from None

    def field(self, name: str) -> Field:
        return self.fields[self.index(name)]

    # -- identity and serialisation -------------------------------------------
    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "fields": [f.to_dict() for f in self.fields],
            "row_bytes": self.row_bytes,
            "stream": self.stream,
            "time_unit": TIME_UNIT if self.stream else None,
            "description": self.description,
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> Schema:
        return cls(
            name=d["name"],
            fields=tuple(Field.from_dict(f) for f in d["fields"]),
            row_bytes=int(d["row_bytes"]),
            stream=bool(d.get("stream", True)),
            description=d.get("description", ""),
        )

    @property
    def fingerprint(self) -> str:
        """A short hash of names, types and row size: what segments and manifests record
        (made once, with the schema)."""
        return self._fingerprint

    # -- helpers for data ---------------------------------------------------
    def empty_columns(self, rows: int) -> tuple[np.ndarray, ...]:
        return tuple(f.empty(rows) for f in self.fields)

    def check_columns(self, columns: Iterable[np.ndarray]) -> int:
        """Validate column arrays against this schema; return the row count.  (Every batch
        is checked as it is made: the common case - each column an array of its field's
        dtype and shape, all of one length - is decided in one pass of cheap tests.)"""
        columns = tuple(columns)
        if len(columns) == len(self._checks):
            rows = -1
            for (dt, width), col in zip(self._checks, columns):  # noqa: B905 - same length
                if type(col) is not np.ndarray or col.dtype != dt:
                    break
                shape = col.shape
                if (len(shape) != 1 if width == 1 else shape[1:] != (width,)) \
                        or (rows >= 0 and shape[0] != rows):
                    break
                rows = shape[0]
            else:
                return max(rows, 0)
        if len(columns) != len(self.fields):
            raise SchemaError(
                f"schema {self.name!r} has {len(self.fields)} fields, got {len(columns)} columns"
            )
        rows = None
        for f, col in zip(self.fields, columns, strict=True):
            if not isinstance(col, np.ndarray):
                raise SchemaError(f"column {f.name!r} is a {type(col).__name__}, not an ndarray")
            n = len(col)
            if col.dtype != f.numpy_dtype or col.shape != f.column_shape(n):
                raise SchemaError(
                    f"column {f.name!r}: expected dtype {f.numpy_dtype} and shape "
                    f"{f.column_shape(n)}, got {col.dtype} and {col.shape}"
                )
            if rows is None:
                rows = n
            elif n != rows:
                raise SchemaError(f"column {f.name!r} has {n} rows, expected {rows}")
        return rows or 0

    def describe(self):
        """A table of the fields (name, type, bytes, description) for notebooks."""
        import pandas as pd

        rows = [
            {
                "#": i,
                "field": f.name,
                "type": f.dtype,
                "bytes": f.itemsize,
                "description": f.description
                + (f" [{', '.join(f.categories)}]" if f.categories else ""),
            }
            for i, f in enumerate(self.fields)
        ]
        if self.padding_bytes:
            rows.append(
                {"#": "", "field": "(padding)", "type": "", "bytes": self.padding_bytes,
                 "description": "C struct padding up to the paper's row size"}
            )
        return pd.DataFrame(rows)
