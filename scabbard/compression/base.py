"""The codec contract and the registry of codec ids (paper §5, Table 2; docs/design.md).

A codec compresses **one column of one batch**.  What a segment header stores per
column is the codec's id (``uint16``) and up to 24 bytes of *parameters*; from those
two alone :func:`codec_from_params` rebuilds the codec that decodes the column.  So a
stream may change codecs at any batch (adaptive selection, deoptimisation) and
every segment still decodes on its own - at recovery too.

Contract (after ``numcodecs.abc``, kept small):

* ``codec_id`` (class attribute, stable forever: it is on disk) and ``name``;
* ``accepts``: the schema dtypes it can encode; ``lossless``;
* ``encode(values) -> uint8 array`` - ``values`` is a column array as the schema
  holds it (``Field.numpy_dtype``, shape ``(n,)``, or ``(n, 2)`` for a uuid);
* ``decode(payload, count, dtype) -> column array`` of schema dtype ``dtype``;
* ``get_config() -> dict`` / ``from_config(dict)`` (JSON-able, for logs and reports);
* ``to_params() -> bytes`` / ``from_params(bytes)`` (the 24 header bytes);
* ``specialised`` (may raise :class:`Unfit`), ``examples()`` (instances to test and
  benchmark), and for a lossy codec ``max_error(dtype)``: the bound it guarantees.

A codec's fields are its parameters: a codec is a frozen dataclass whose fields
are packed with the class's ``layout`` (a :mod:`struct` format), and every field has
a default (the generic configuration).  A *specialised*
codec (e.g. null suppression with a fixed bit width learned by profiling) raises
:class:`Unfit` from ``encode`` when a batch breaks its assumption; the caller then
encodes that batch with a generic codec instead (deoptimisation, §5.2).
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from dataclasses import astuple, dataclass, fields
from typing import ClassVar

import numpy as np

PARAMS_BYTES = 24  # what a segment's column descriptor holds
INTEGER = frozenset({"int32", "int64", "uint32"})
FLOAT = frozenset({"float32", "float64"})
NUMBER = INTEGER | FLOAT
ANY = NUMBER | {"uuid"}
_DTYPES = {"int32": np.dtype("<i4"), "int64": np.dtype("<i8"), "uint32": np.dtype("<u4"),
           "float32": np.dtype("<f4"), "float64": np.dtype("<f8"), "uuid": np.dtype("<u8")}


class CodecError(ValueError):
    """A codec was asked for something it cannot do, or its payload is damaged."""


class Unfit(CodecError):
    """This batch breaks the specialised codec's assumption: encode it with another codec."""


def numpy_dtype(dtype: str) -> np.dtype:
    return _DTYPES[dtype]


def column_shape(dtype: str, count: int) -> tuple[int, ...]:
    return (count, 2) if dtype == "uuid" else (count,)


@dataclass(frozen=True)
class Codec(ABC):
    codec_id: ClassVar[int]
    name: ClassVar[str]
    accepts: ClassVar[frozenset[str]]
    lossless: ClassVar[bool] = True
    layout: ClassVar[str] = "<"  # struct format of the dataclass fields, in order
    # True when a library writes the bytes: a newer version may encode differently (old
    # payloads still decode), so only decoding is held to golden files
    library_format: ClassVar[bool] = False

    @abstractmethod
    def encode(self, values: np.ndarray) -> np.ndarray:
        """The column's bytes, compressed (a uint8 array)."""

    @abstractmethod
    def decode(self, payload: np.ndarray, count: int, dtype: str) -> np.ndarray:
        """The ``count`` values of schema dtype ``dtype`` that ``payload`` holds."""

    # -- configuration ---------------------------------------------------------------------
    def get_config(self) -> dict:
        cfg = {"id": self.name}
        for f in fields(self):
            v = getattr(self, f.name)
            cfg[f.name] = v.get_config() if isinstance(v, Codec) else v
        return cfg

    @classmethod
    def from_config(cls, cfg: dict) -> Codec:
        if cfg.get("id") != cls.name:
            raise CodecError(f"config of {cfg.get('id')!r} given to {cls.name}")
        kw = {}
        for f in fields(cls):
            if f.name in cfg:
                v = cfg[f.name]
                kw[f.name] = codec_from_config(v) if isinstance(v, dict) else v
        return cls(**kw)

    def to_params(self) -> bytes:
        out = struct.pack(self.layout, *astuple(self))
        if len(out) > PARAMS_BYTES:
            raise CodecError(f"{self.name}: {len(out)} parameter bytes, a header holds "
                             f"{PARAMS_BYTES}")
        return out.ljust(PARAMS_BYTES, b"\0")

    @classmethod
    def from_params(cls, params: bytes) -> Codec:
        params = params.ljust(PARAMS_BYTES, b"\0")  # an inner codec's come in 14 bytes
        size = struct.calcsize(cls.layout)
        return cls(*struct.unpack(cls.layout, params[:size]))

    @property
    def specialised(self) -> bool:
        """True if ``encode`` may raise :class:`Unfit` (it assumes something of the data)."""
        return False

    @classmethod
    def examples(cls) -> list[Codec]:
        """Configured instances the shared test kit and the benchmark run (generic first).
        Each must encode the kit's golden input of every dtype it accepts (no Unfit)."""
        return [cls()]

    def check_dtype(self, dtype: str) -> None:
        if dtype not in self.accepts:
            raise CodecError(f"{self.name} cannot encode a {dtype} column "
                             f"(it takes {', '.join(sorted(self.accepts))})")

    def __str__(self) -> str:
        args = ", ".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))
        return f"{self.name}({args})" if args else self.name


@dataclass(frozen=True)
class Nested(Codec, ABC):
    """A codec whose parameters include an inner codec (lossy float -> an integer codec,
    RLE -> a codec for its run values).  The inner codec's params take the last 16 bytes:
    ``layout`` packs this codec's own fields, then ``H`` (inner id) and ``14s``.
    ``inner=None`` means the subclass's fixed default inner codec - fixed forever, since
    payloads written with ``None`` are decoded with whatever it names."""

    inner: Codec | None = None

    def to_params(self) -> bytes:
        own = [getattr(self, f.name) for f in fields(self) if f.name != "inner"]
        inner = self.inner
        packed = struct.pack(self.layout, *own)
        if len(packed) > PARAMS_BYTES - 16:
            raise CodecError(f"{self.name}: own parameters take over {PARAMS_BYTES - 16} bytes")
        inner_params = inner.to_params() if inner is not None else b""
        if inner_params.rstrip(b"\0").__len__() > 14:
            raise CodecError(f"{self.name}: inner codec {inner} needs over 14 parameter bytes")
        tail = struct.pack("<H14s", inner.codec_id if inner else 0xFFFF, inner_params[:14])
        return packed.ljust(PARAMS_BYTES - 16, b"\0") + tail

    @classmethod
    def from_params(cls, params: bytes) -> Codec:
        params = params.ljust(PARAMS_BYTES, b"\0")
        names = [f.name for f in fields(cls) if f.name != "inner"]
        own = struct.unpack(cls.layout, params[:struct.calcsize(cls.layout)])
        inner_id, inner_params = struct.unpack("<H14s", params[PARAMS_BYTES - 16:])
        inner = None if inner_id == 0xFFFF else codec_from_params(inner_id, inner_params)
        return cls(**dict(zip(names, own, strict=True)), inner=inner)


_REGISTRY: dict[int, type[Codec]] = {}
_BY_NAME: dict[str, type[Codec]] = {}


def register(cls: type[Codec]) -> type[Codec]:
    """Class decorator: make ``cls`` findable by its id and name (ids never reused)."""
    for key, table in ((cls.codec_id, _REGISTRY), (cls.name, _BY_NAME)):
        if key in table and table[key] is not cls:
            raise CodecError(f"codec {key!r} registered twice ({table[key].__name__}, "
                             f"{cls.__name__})")
        table[key] = cls
    return cls


def codec_class(key: int | str) -> type[Codec]:
    table = _REGISTRY if isinstance(key, int) else _BY_NAME
    if key not in table:
        known = ", ".join(f"{c.codec_id}:{c.name}" for c in sorted(
            _REGISTRY.values(), key=lambda c: c.codec_id))
        raise CodecError(f"unknown codec {key!r} (known: {known})")
    return table[key]


def codec_from_params(codec_id: int, params: bytes) -> Codec:
    return codec_class(codec_id).from_params(params)


def codec_from_config(cfg: dict) -> Codec:
    return codec_class(cfg["id"]).from_config(cfg)


def registered() -> list[type[Codec]]:
    return sorted(_REGISTRY.values(), key=lambda c: c.codec_id)


@register
@dataclass(frozen=True)
class Raw(Codec):
    """The column's little-endian bytes as they are (codec 0: what segments held before)."""

    codec_id: ClassVar[int] = 0
    name: ClassVar[str] = "raw"
    accepts: ClassVar[frozenset[str]] = ANY

    def encode(self, values: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(values).reshape(-1).view(np.uint8)

    def decode(self, payload: np.ndarray, count: int, dtype: str) -> np.ndarray:
        dt = numpy_dtype(dtype)
        want = count * dt.itemsize * (2 if dtype == "uuid" else 1)
        if payload.nbytes != want:
            raise CodecError(f"raw {dtype} column: {payload.nbytes} bytes for {count} values, "
                             f"expected {want}")
        return payload.view(dt).reshape(column_shape(dtype, count))
