"""Codecs for any column: dictionary encoding, Snappy and LZ4 (paper §5, Table 2).

**dictionary** (codec 9; Table 2's "Dictionary").  An open-addressing hash table
(numba; a power-of-two number of slots, linear probing, at most a quarter full) maps each
distinct value to a code, in order of first appearance.  Values are compared by bit
pattern: ints sign- or zero-extended to 64 bits, floats by their bits (so every
NaN payload and -0.0 is a value of its own), uuids by both words.  The table starts
small and doubles (rehashing the distinct values) when a quarter full.  Payload::

    u32 d                       number of distinct values (little-endian)
    d values, raw               in the column's dtype (16 bytes each for a uuid)
    codes                       n codes of w = bit_width(d - 1) bits each, packed
                                LSB-first (as :mod:`scabbard.compression._bits`
                                packs), ceil(n * w / 8) bytes

Parameter ``max_distinct`` (``<I``): 0 is the generic codec; a positive value makes a
specialised one whose ``encode`` raises :class:`~scabbard.compression.base.Unfit` once
a batch has more distinct values (the adaptive selector's "few distinct values").

**snappy** (codec 11; Table 2's "Snappy") and **lz4** (codec 12): the column's
little-endian bytes in the raw Snappy format (which starts with the uncompressed
length) and the LZ4 block format (no stored size: the segment gives the count, hence
the length), both through ``cramjam`` (one library for the two; byte for byte what
python-snappy and python-lz4 write).  The payload is the library's output as it is;
decoding writes straight into the column's array.  LightSaber applies Snappy to whole batches; LZ4 it installs but
never uses - here both are per-column fallbacks that take any dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import cramjam
import numpy as np

from scabbard.compression._bits import _pack, unpack
from scabbard.compression.base import (
    ANY,
    Codec,
    CodecError,
    Unfit,
    column_shape,
    numpy_dtype,
    register,
)
from scabbard.kernels._jit import inline, kernel

U64 = np.uint64
_GOLDEN = U64(0x9E3779B97F4A7C15)  # 2**64 / golden ratio (Fibonacci hashing)
_MIX = U64(0xC2B2AE3D27D4EB4F)
_FIRST_SLOTS = 256  # 64 let CM's 8 cpu levels collide: 2.01 -> 1.63 ns a value, none slower


# -- hash table kernels ----------------------------------------------------------------------
class CodeTable(NamedTuple):
    """The dictionary's open-addressing table, as its kernels take it: per slot the key's
    first and second word (``b``: one slot when keys are one word) and its code (-1: empty);
    ``shift`` places a key (:func:`_slot`: ``2**(64 - shift)`` slots)."""

    a: np.ndarray
    b: np.ndarray
    code: np.ndarray
    shift: int

    @staticmethod
    def empty(slots: int, wide: bool) -> CodeTable:
        return CodeTable(np.empty(slots, np.uint64), np.empty(slots if wide else 1, np.uint64),
                         np.full(slots, -1, np.int32), 65 - slots.bit_length())



@inline
def _slot(a, b, shift):
    """The home slot of key (a, b) in a table of ``2**(64 - shift)`` slots."""
    h = a ^ (b * _MIX)
    h ^= h >> U64(29)
    return np.int64((h * _GOLDEN) >> U64(shift))


@kernel
def _dictionary_encode(keys, start, limit, table, codes, first, nd):
    """Give rows ``start..`` of ``keys`` (n x k uint64, k 1 or 2) their codes, adding
    unseen keys to ``table`` (a :class:`CodeTable`) as codes ``nd, nd + 1, ...`` with their
    first row in ``first``.  Stops at a row with a new key once there are ``limit`` distinct
    keys; returns (that row, or n, and nd)."""
    ta, tb, tcode, shift = table
    n = keys.shape[0]
    wide = keys.shape[1] == 2
    mask = tcode.shape[0] - 1
    for i in range(start, n):  # (a "same as the last row" shortcut made it 3x slower)
        a = keys[i, 0]
        b = keys[i, 1] if wide else U64(0)
        h = _slot(a, b, shift)
        while True:
            c = tcode[h]
            if c < 0:
                if nd >= limit:
                    return i, nd
                c = nd
                tcode[h] = c
                ta[h] = a
                if wide:
                    tb[h] = b
                first[nd] = i
                nd += 1
                break
            if ta[h] == a and (not wide or tb[h] == b):
                break
            h = (h + 1) & mask
        codes[i] = np.uint32(c)
    return n, nd


@kernel
def _dictionary_encode_narrow(keys, start, limit, table, codes, first, nd):
    """:func:`_dictionary_encode` of a column of one-word keys as they are (``keys``: the
    column's uint32 or uint64 view, no widened copy), codes as uint32."""
    ta, _, tcode, shift = table
    n = keys.shape[0]
    mask = tcode.shape[0] - 1
    for i in range(start, n):
        a = U64(keys[i])
        h = _slot(a, U64(0), shift)
        while True:
            c = tcode[h]
            if c < 0:
                if nd >= limit:
                    return i, nd
                c = nd
                tcode[h] = c
                ta[h] = a
                first[nd] = i
                nd += 1
                break
            if ta[h] == a:
                break
            h = (h + 1) & mask
        codes[i] = np.uint32(c)
    return n, nd


@kernel
def _dictionary_rehash_narrow(keys, first, nd, table):
    ta, _, tcode, shift = table
    mask = tcode.shape[0] - 1
    for c in range(nd):
        a = U64(keys[first[c]])
        h = _slot(a, U64(0), shift)
        while tcode[h] >= 0:
            h = (h + 1) & mask
        tcode[h] = c
        ta[h] = a


@kernel
def _dictionary_rehash(keys, first, nd, table):
    """Insert the ``nd`` distinct keys (rows ``first[:nd]``) into an empty ``table``."""
    ta, tb, tcode, shift = table
    wide = keys.shape[1] == 2
    mask = tcode.shape[0] - 1
    for c in range(nd):
        a = keys[first[c], 0]
        b = keys[first[c], 1] if wide else U64(0)
        h = _slot(a, b, shift)
        while tcode[h] >= 0:
            h = (h + 1) & mask
        tcode[h] = c
        ta[h] = a
        if wide:
            tb[h] = b


# -- public wrappers -------------------------------------------------------------------------

def _keys(values: np.ndarray) -> np.ndarray:
    """A column as an (n, k) uint64 key array: 64-bit columns and uuids as they are,
    32-bit ones widened (ints by value, float32 by bit pattern)."""
    values = np.ascontiguousarray(values)
    if values.ndim == 2:
        return values.view(np.uint64)
    kind, size = values.dtype.kind, values.dtype.itemsize
    if size == 8:
        keys = values.view(np.uint64)
    elif kind == "f":
        keys = values.view(np.uint32).astype(np.uint64)
    else:  # int32 sign-extends, uint32 zero-extends: equal keys iff equal values
        keys = values.astype(np.int64).view(np.uint64)
    return keys.reshape(-1, 1)


def dictionary_codes(values: np.ndarray, max_distinct: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(codes as uint32, the row of each distinct value's first appearance).  With
    ``max_distinct`` > 0, raises :class:`Unfit` when the column has more distinct values."""
    keys = _keys(values)
    n, k = keys.shape
    cap = min(n, max_distinct) if max_distinct > 0 else n
    codes = np.empty(n, np.uint32)
    first = np.empty(cap, np.int64)
    # small: few distinct values stay in L1 (pre-sizing was 1.5x slower); a quarter full at
    # most, so that few probes collide (uuids of YSB's 1,000 ads: 6.9 -> 4.3 ns a value)
    slots = _FIRST_SLOTS
    row, nd = 0, 0
    while True:
        table = CodeTable.empty(slots, k == 2)
        if nd:
            _dictionary_rehash(keys, first, nd, table)
        row, nd = _dictionary_encode(keys, row, min(cap, slots // 4), table, codes, first, nd)
        if row == n:
            return codes, first[:nd]
        if nd == max_distinct:
            raise Unfit(f"dictionary: over {max_distinct} distinct values")
        slots *= 2


def code_width(distinct: int) -> int:
    """Bits a code takes when there are ``distinct`` values (0 for at most one)."""
    return max(distinct - 1, 0).bit_length()


def _narrow_codes(keys: np.ndarray, max_distinct: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`dictionary_codes` of one-word keys read where they are, codes as uint32 (half
    the memory of uint64 codes, and no widened copy of the column)."""
    n = len(keys)
    cap = min(n, max_distinct) if max_distinct > 0 else n
    codes = np.empty(n, np.uint32)
    first = np.empty(cap, np.int64)
    slots, row, nd = _FIRST_SLOTS, 0, 0
    while True:
        table = CodeTable.empty(slots, False)
        if nd:
            _dictionary_rehash_narrow(keys, first, nd, table)
        row, nd = _dictionary_encode_narrow(keys, row, min(cap, slots // 4), table, codes,
                                            first, nd)
        if row == n:
            return codes, first[:nd]
        if nd == max_distinct:
            raise Unfit(f"dictionary: over {max_distinct} distinct values")
        slots *= 2


def dictionary_encode(values: np.ndarray, max_distinct: int = 0) -> np.ndarray:
    """The ``dictionary`` payload of a column (layout in the module docstring).  A column of
    one-word values (ints and floats by their bits: 4-byte ones by their own bits, as
    zero-extended, which tells the same values apart as the sign-extended keys of
    :func:`_keys`) is coded where it lies, in uint32 codes, and the payload written into one
    buffer."""
    values = np.ascontiguousarray(values)
    if values.ndim == 1 and values.dtype.itemsize in (4, 8) and len(values) < 1 << 32:
        keys = values.view(np.uint32 if values.dtype.itemsize == 4 else np.uint64)
        codes, first = _narrow_codes(keys, max_distinct)
    else:
        codes, first = dictionary_codes(values, max_distinct)
    nd, n = len(first), len(codes)
    width = code_width(nd)
    head = 4 + nd * values[:1].nbytes
    packed = (n * width + 7) // 8
    out = np.empty(head + packed, np.uint8)
    out[:4] = np.array([nd], "<u4").view(np.uint8)
    out[4:head] = values[first].reshape(-1).view(np.uint8)
    if packed:
        words = np.zeros((n * width + 63) // 64, np.uint64)
        _pack(codes, width, words)
        out[head:] = words.view(np.uint8)[:packed]
    return out


def dictionary_decode(payload: np.ndarray, count: int, dtype: str) -> np.ndarray:
    """The ``count`` values of schema dtype ``dtype`` a ``dictionary`` payload holds."""
    dt = numpy_dtype(dtype)
    row_bytes = dt.itemsize * (2 if dtype == "uuid" else 1)
    if len(payload) < 4:
        raise CodecError(f"dictionary: a payload of {len(payload)} bytes has no header")
    nd = int(payload[:4].view("<u4")[0])
    width = code_width(nd)
    at = 4 + nd * row_bytes
    code_bytes = (count * width + 7) // 8
    if len(payload) != at + code_bytes or (count and not nd):
        raise CodecError(f"dictionary: {len(payload)} bytes cannot hold {nd} distinct "
                         f"{dtype} values and {count} codes of {width} bits")
    distinct = payload[4:at].copy().view(dt).reshape(column_shape(dtype, nd))
    words = np.zeros((code_bytes + 7) // 8, np.uint64)
    words.view(np.uint8)[:code_bytes] = payload[at:]
    codes = unpack(words, count, width).view(np.int64)
    try:
        return np.take(distinct, codes, axis=0)
    except IndexError as e:
        raise CodecError(f"dictionary: a code beyond its {nd} values") from e


def _column_bytes(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values).reshape(-1).view(np.uint8)


def _decompressed_into(decompress_into, payload: np.ndarray, count: int, dtype: str,
                       codec: str) -> np.ndarray:
    """The ``count`` values a library payload holds, decompressed straight into a new column
    array; a damaged payload, or one of another length, is a :class:`CodecError`."""
    out = np.empty(column_shape(dtype, count), numpy_dtype(dtype))
    flat = out.reshape(-1).view(np.uint8)
    try:
        got = decompress_into(np.ascontiguousarray(payload, np.uint8), flat)
    except (cramjam.DecompressionError, ValueError) as e:
        raise CodecError(f"{codec}: a damaged payload ({e})") from e
    if got != len(flat):
        raise CodecError(f"{codec}: {got} bytes decompressed for {count} {dtype} values, "
                         f"expected {len(flat)}")
    return out


# -- codecs ----------------------------------------------------------------------------------

@register
@dataclass(frozen=True)
class Dictionary(Codec):
    """Distinct values once, then each row's code at the minimal bit width (§5, Table 2)."""

    codec_id: ClassVar[int] = 9
    name: ClassVar[str] = "dictionary"
    accepts: ClassVar[frozenset[str]] = ANY
    layout: ClassVar[str] = "<I"

    max_distinct: int = 0  # 0: any number (generic); > 0: Unfit beyond it

    def __post_init__(self) -> None:
        if not (isinstance(self.max_distinct, int) and 0 <= self.max_distinct < 2**32):
            raise CodecError(f"dictionary: max_distinct must be 0..2**32-1, "
                             f"not {self.max_distinct!r}")

    @property
    def specialised(self) -> bool:
        return self.max_distinct > 0

    def encode(self, values: np.ndarray) -> np.ndarray:
        self.check_dtype(_schema_dtype(values))
        return dictionary_encode(values, self.max_distinct)

    def decode(self, payload: np.ndarray, count: int, dtype: str) -> np.ndarray:
        self.check_dtype(dtype)
        return dictionary_decode(np.asarray(payload, np.uint8).reshape(-1), count, dtype)

    @classmethod
    def examples(cls) -> list[Codec]:
        return [cls(), cls(max_distinct=1024)]


@register
@dataclass(frozen=True)
class Snappy(Codec):
    """The column's bytes in the raw Snappy format (§5, Table 2)."""

    codec_id: ClassVar[int] = 11
    name: ClassVar[str] = "snappy"
    accepts: ClassVar[frozenset[str]] = ANY
    library_format: ClassVar[bool] = True

    def encode(self, values: np.ndarray) -> np.ndarray:
        self.check_dtype(_schema_dtype(values))
        return np.frombuffer(cramjam.snappy.compress_raw(_column_bytes(values)), np.uint8)

    def decode(self, payload: np.ndarray, count: int, dtype: str) -> np.ndarray:
        self.check_dtype(dtype)
        return _decompressed_into(cramjam.snappy.decompress_raw_into, payload, count, dtype,
                                  self.name)


@register
@dataclass(frozen=True)
class Lz4(Codec):
    """The column's bytes as one LZ4 block (no stored size)."""

    codec_id: ClassVar[int] = 12
    name: ClassVar[str] = "lz4"
    accepts: ClassVar[frozenset[str]] = ANY
    library_format: ClassVar[bool] = True

    def encode(self, values: np.ndarray) -> np.ndarray:
        self.check_dtype(_schema_dtype(values))
        return np.frombuffer(cramjam.lz4.compress_block(_column_bytes(values), store_size=False),
                             np.uint8)

    def decode(self, payload: np.ndarray, count: int, dtype: str) -> np.ndarray:
        self.check_dtype(dtype)

        def into(data, out):
            return cramjam.lz4.decompress_block_into(data, out, output_len=len(out))

        return _decompressed_into(into, payload, count, dtype, self.name)


def _schema_dtype(values: np.ndarray) -> str:
    """The schema dtype name of a column array ("uuid" for an (n, 2) uint64 one)."""
    return "uuid" if values.ndim == 2 else values.dtype.name
