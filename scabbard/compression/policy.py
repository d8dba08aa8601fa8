"""Which codec compresses which column of a p-stream, batch by batch (paper §5.2).

:class:`Compression` is the compression operator placed before a p-stream (push-up,
§3.4): called with a batch, it returns each column's ``(codec, payload)``, which the
segment stores with the codec's id and parameters.  Its codecs can be swapped at any
time (the adaptive selector does so while the query runs); a batch that breaks a
specialised codec's assumption (:class:`~scabbard.compression.base.Unfit`) is
encoded with the column's generic codec instead - *deoptimisation* - and counted.

The paper's default scheme, used before anything is known of the data (§5.1):
delta-of-delta for the timestamp, Simple-8b for integers, XOR for floats, Snappy
for anything else.  ``lossy_decimals`` turns float columns into integers with that
many decimals (the user's stated error bound, §5.1), falling back to XOR for a batch
holding values it cannot represent (NaN, ±inf, too large).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np

from scabbard import timers
from scabbard.compression.base import FLOAT, INTEGER, Codec, Unfit, codec_class, codec_from_config
from scabbard.schema import Schema

SCHEMES = ("none", "default", "adaptive")
RAW = codec_class("raw")()
ADAPTIVE: list[type] = []  # the adaptive scheme's class, registered by its module


def generic_codec(dtype: str, timestamp: bool = False) -> Codec:
    """The paper's default codec for a column of ``dtype`` (lossless, never Unfit)."""
    if timestamp:
        return codec_class("delta_of_delta")()
    if dtype in INTEGER:
        return codec_class("simple8b")()
    if dtype in FLOAT:
        return codec_class("xor")()
    return codec_class("snappy")()


def lossy_codec(decimals: int) -> Codec:
    return codec_class("lossy_float")(decimals=decimals)


class RawColumn:
    """A column stored as it is, by reference: its pieces ``[(array, add)]`` (see
    :meth:`scabbard.batch.Batch.column_parts`), copied once - by the segment that stores
    them - instead of made into one array first.  ``nbytes``: what it stores."""

    __slots__ = ("parts", "nbytes")

    def __init__(self, parts):
        self.parts = list(parts)
        self.nbytes = sum(a.nbytes for a, _ in self.parts)

    def array(self) -> np.ndarray:
        """The column as one array (its pieces joined, their shifts added)."""
        if len(self.parts) == 1 and not self.parts[0][1]:
            return self.parts[0][0]
        return np.concatenate([a + add if add else a for a, add in self.parts])


@dataclass
class ColumnStats:
    """What one column's compression did so far."""

    raw_bytes: int = 0
    stored_bytes: int = 0
    seconds: float = 0.0
    fallbacks: int = 0
    batches: int = 0

    @property
    def ratio(self) -> float:
        return self.raw_bytes / self.stored_bytes if self.stored_bytes else float("nan")


@dataclass
class Swap:
    """One change of a column's codec (for the Fig. 12 timeline)."""

    at: float  # time.time()
    column: str
    codec: str
    reason: str


@dataclass
class Compression:
    """The per-column codecs of one p-stream; ``compression(batch)`` -> stored columns."""

    schema: Schema
    codecs: tuple[Codec, ...]
    fallbacks: tuple[Codec, ...] = ()
    stats: dict[str, ColumnStats] = field(default_factory=dict)
    swaps: list[Swap] = field(default_factory=list)
    on_event: object = None  # called as on_event(kind, **fields): "codec" swaps, "fallback"s
    # the stream's event times (its first column) never decrease in a batch - its source
    # checked them (:attr:`scabbard.engine.sources.ReplaySource.ordered`): a codec that can
    # use it (``takes_order``: run-length) finds their runs without reading them all
    ordered_time: bool = False

    def __post_init__(self) -> None:
        if len(self.codecs) != len(self.schema.fields):
            raise ValueError(f"{len(self.codecs)} codecs for {len(self.schema.fields)} columns")
        for f, c in zip(self.schema.fields, self.codecs, strict=True):
            c.check_dtype(f.dtype)
        if not self.fallbacks:
            self.fallbacks = tuple(generic_codec(f.dtype, i == 0 and self.schema.stream)
                                   for i, f in enumerate(self.schema.fields))
        self.stats = {f.name: ColumnStats() for f in self.schema.fields}
        self._lock = threading.RLock()  # the codecs (swaps) and a subclass's own state
        self._stats_lock = threading.Lock()

    @classmethod
    def scheme(cls, schema: Schema, name: str = "default", lossy_decimals: int | None = None,
               on_event=None, ordered_time: bool = False, **adaptive) -> Compression | None:
        """The compression of ``schema`` for a named scheme (None for ``"none"``); the
        adaptive scheme starts from the default one and re-selects as it goes
        (``adaptive``: options of :class:`~scabbard.compression.adaptive.AdaptiveCompression`).
        ``ordered_time``: see :attr:`ordered_time`."""
        if name not in SCHEMES:
            raise ValueError(f"unknown compression scheme {name!r} (choose from "
                             f"{', '.join(SCHEMES)})")
        if name == "none":
            return None
        codecs = []
        for i, f in enumerate(schema.fields):
            if lossy_decimals is not None and f.dtype in FLOAT:
                codecs.append(lossy_codec(lossy_decimals))
            else:
                codecs.append(generic_codec(f.dtype, i == 0 and schema.stream))
        if name == "adaptive":  # registered by scabbard.compression.adaptive (the package
            # imports it), which builds on this module: no import back
            return ADAPTIVE[0](schema, tuple(codecs), on_event=on_event,
                               ordered_time=ordered_time, lossy_decimals=lossy_decimals,
                               **adaptive)
        return cls(schema, tuple(codecs), on_event=on_event, ordered_time=ordered_time)

    def swap(self, column: str, codec: Codec, reason: str = "") -> None:
        """Use ``codec`` for ``column`` from the next batch on (the query keeps running)."""
        i = self.schema.index(column)
        codec.check_dtype(self.schema.fields[i].dtype)
        with self._lock:
            codecs = list(self.codecs)
            codecs[i] = codec
            self.codecs = tuple(codecs)  # one assignment: a running batch sees old or new
            self.swaps.append(Swap(time.time(), column, str(codec), reason))
        if self.on_event is not None:
            self.on_event("codec", column=column, codec=str(codec), reason=reason)

    def __call__(self, batch) -> list[tuple[Codec, np.ndarray | RawColumn]]:
        """Each column's ``(codec, payload)``; a column stored raw is a :class:`RawColumn`
        (its pieces where they are: the segment copies them once, a deferred timestamp
        shift added as it copies), so a batch's columns are never made to be stored."""
        span = timers.start()
        codecs = self.codecs
        out = []
        for i, (f, chosen, generic) in enumerate(zip(self.schema.fields, codecs, self.fallbacks,
                                                     strict=True)):
            st = self.stats[f.name]
            t0 = time.perf_counter()
            codec = chosen
            if codec.codec_id == RAW.codec_id:
                payload = RawColumn(batch.column_parts(i))
                raw_bytes = payload.nbytes
            else:
                parts = batch.column_parts(i)
                shifted = (len(parts) == 1 and parts[0][1] != 0
                           and getattr(codec, "takes_shift", False))
                # a codec that takes a deferred shift reads the column where it lies
                col = parts[0][0] if shifted else batch.column_array(i)
                raw_bytes = col.nbytes
                order = ({"ordered": True} if i == 0 and self.ordered_time and self.schema.stream
                         and getattr(codec, "takes_order", False) else {})
                try:
                    payload = codec.encode(col, shift=parts[0][1], **order) if shifted \
                        else codec.encode(col, **order)
                except Unfit as e:  # deoptimisation: this batch with the generic codec
                    if shifted:
                        col = batch.column_array(i)
                    codec, payload = generic, generic.encode(col)
                    with self._stats_lock:
                        st.fallbacks += 1
                    if self.on_event is not None:
                        self.on_event("fallback", column=f.name, codec=str(chosen),
                                      to=str(generic), why=str(e))
                if payload.nbytes > raw_bytes:  # never more than the values: a p-unit fits
                    codec, payload = RAW, RawColumn(parts if shifted else [(col, 0)])  # its
                    # file, whatever the data (a shifted column's shift added as it is copied)
            with self._stats_lock:  # batches may be compressed by several threads at once
                st.seconds += time.perf_counter() - t0
                st.raw_bytes += raw_bytes
                st.stored_bytes += payload.nbytes
                st.batches += 1
            out.append((codec, payload))
        timers.stop(span, "compress", len(batch))
        return out

    def describe(self) -> dict[str, str]:
        return {f.name: str(c) for f, c in zip(self.schema.fields, self.codecs, strict=True)}

    def config(self) -> list[dict]:
        return [c.get_config() for c in self.codecs]

    @classmethod
    def from_config(cls, schema: Schema, cfg: list[dict], on_event=None) -> Compression:
        return cls(schema, tuple(codec_from_config(c) for c in cfg), on_event=on_event)
