"""Shared parts of the integer codecs (:mod:`scabbard.compression.ints`,
:mod:`scabbard.compression.varlen`): the unsigned code of a value, column widening and
narrowing, payload headers, and fixed-width packing of codes."""

from __future__ import annotations

import numpy as np

from scabbard.compression._bits import U64, packed_words, unzigzag, zigzag
from scabbard.compression.base import Codec, CodecError, Unfit, numpy_dtype
from scabbard.kernels._jit import inline, kernel

ALL_ONES = U64(0xFFFFFFFFFFFFFFFF)


# -- shared helpers ---------------------------------------------------------------------------
@inline
def _code(v, zz):
    """The unsigned code of an int64 value: zigzag for signed columns, else its bits."""
    return zigzag(v) if zz else U64(v)


@inline
def _uncode(u, zz):
    return unzigzag(u) if zz else np.int64(u)


@inline
def _mask(width):
    return ALL_ONES if width >= 64 else (U64(1) << U64(width)) - U64(1)


def _column(codec: Codec, values: np.ndarray) -> tuple[np.ndarray, bool]:
    """The column as a contiguous int64 array (read where it lies when it is one: a
    dataset's read-only view is not copied), and whether it takes zigzag."""
    values = np.asarray(values)
    if values.ndim != 1:
        raise CodecError(f"{codec.name} encodes 1-D columns, got shape {values.shape}")
    codec.check_dtype(values.dtype.name)
    if values.dtype == np.int64:
        return np.require(values, np.int64, "CA"), True
    return values.astype(np.int64), values.dtype.name != "uint32"


def _bytes(payload: np.ndarray) -> np.ndarray:
    """The payload as a contiguous, writable uint8 array (one kernel signature)."""
    return np.require(np.asarray(payload).reshape(-1).view(np.uint8), np.uint8, "CAW")


def _words(payload: np.ndarray, start: int, nwords: int, name: str) -> np.ndarray:
    """``nwords`` uint64 words of the payload from byte ``start`` (copied if unaligned)."""
    end = start + 8 * nwords
    if payload.nbytes < end:
        raise CodecError(f"{name}: payload of {payload.nbytes} bytes, expected {end}")
    return np.require(payload[start:end].view(np.uint64), np.uint64, "CAW")


def _narrow(wide: np.ndarray, dtype: str) -> np.ndarray:
    return wide.astype(numpy_dtype(dtype), copy=False)


def _header(tag: int, base: int = 0, words: int = 1) -> np.ndarray:
    """The first words of a payload: ``u8 tag, 7 zero bytes`` and, for two, ``i64 base``."""
    head = np.zeros(words, np.uint64)
    head[0] = tag
    if words > 1:
        head[1:2].view(np.int64)[0] = base
    return head


def _start(codec: Codec, payload: np.ndarray, count: int, dtype: str) -> np.ndarray | None:
    """Common decode checks; None when there is nothing to decode (count 0)."""
    codec.check_dtype(dtype)
    payload = _bytes(payload)
    if count < 0 or (count == 0) != (payload.nbytes == 0):
        raise CodecError(f"{codec.name}: {payload.nbytes} bytes for {count} values")
    return payload if count else None


# -- fixed-width packing of codes (base-delta, NS-bit, RLE lengths) -----------------------------
@kernel
def _or_codes(v, zz):
    m = U64(0)
    for i in range(v.shape[0]):
        m |= _code(v[i], zz)
    return m


@kernel
def _min_max(v):
    lo = v[0]
    hi = v[0]
    for i in range(1, v.shape[0]):
        x = v[i]
        lo = min(lo, x)
        hi = max(hi, x)
    return lo, hi


@kernel
def _pack_codes(v, zz, base, width, out):
    """Pack ``code(v[i]) - base`` at ``width`` bits into ``out`` (§5.1: null suppression and
    base-delta); return the OR of the packed codes so a specialised codec can check its
    width after the one pass (a wider code garbles only its own bits)."""
    b = U64(base)
    seen = U64(0)
    acc = U64(0)
    filled = 0
    j = 0
    for i in range(v.shape[0]):
        c = _code(v[i], zz) - b
        seen |= c
        acc |= c << U64(filled)
        filled += width
        if filled >= 64:
            out[j] = acc
            j += 1
            filled -= 64
            acc = (c >> U64(width - filled)) if filled > 0 else U64(0)
    if filled > 0:
        out[j] = acc
    return seen


@kernel
def _unpack_codes(words, zz, base, width, out):
    b = U64(base)
    if width == 0:
        x = _uncode(b, zz)
        for i in range(out.shape[0]):
            out[i] = x
        return
    mask = _mask(width)
    bit = 0
    j = 0
    for i in range(out.shape[0]):
        c = words[j] >> U64(bit)
        if 64 - bit < width:
            c |= words[j + 1] << U64(64 - bit)
        out[i] = _uncode((c & mask) + b, zz)
        bit += width
        if bit >= 64:
            bit -= 64
            j += 1


def _packed(v: np.ndarray, zz: bool, base: int, width: int, head: np.ndarray) -> tuple:
    """``head`` then the packed codes, as a uint8 payload; and the OR of the codes."""
    out = np.empty(len(head) + packed_words(len(v), width), np.uint64)
    out[:len(head)] = head
    seen = _pack_codes(v, zz, base, width, out[len(head):])
    return out.view(np.uint8), int(seen)


def _unpacked(payload: np.ndarray, count: int, zz: bool, base: int, width: int, head: int,
              name: str) -> np.ndarray:
    nwords = packed_words(count, width)
    if not 0 <= width <= 64 or payload.nbytes != head + 8 * nwords:
        raise CodecError(f"{name}: {payload.nbytes} bytes do not hold {count} values of "
                         f"{width} bits")
    words = _words(payload, head, nwords, name)
    out = np.empty(count, np.int64)
    _unpack_codes(words, zz, base, width, out)
    return out


def _check_width(name: str, width: int) -> None:
    if not 0 <= width <= 64:
        raise CodecError(f"{name}: width {width} is not in 0..64")

def _ns_bit_encode(v: np.ndarray, zz: bool, width: int, who: str) -> np.ndarray:
    """The ``ns_bit`` payload of int64 ``v`` (also RLE's run lengths, ``zz=False``)."""
    if width == 0:
        width = int(_or_codes(v, zz)).bit_length()
    payload, seen = _packed(v, zz, 0, width, _header(width))
    if seen >> width:
        raise Unfit(f"{who}: a value needs more than {width} bits")
    return payload


def _ns_bit_decode(p: np.ndarray, count: int, zz: bool, name: str) -> np.ndarray:
    width = int(_words(p, 0, 1, name)[0])
    return _unpacked(p, count, zz, 0, width, 8, name)
