"""Integer codecs of the paper's Table 2 (§5, §5.1): base-delta, delta-of-delta, null
suppression (byte- and bit-aligned), Simple-8b, Var-Byte and run-length encoding.

Every kernel sees ``int64`` arrays only: the public wrappers widen ``int32``/``uint32``
columns (one compiled signature per kernel) and narrow the decoded column back.
"Zigzag" maps signed values to unsigned codes (0, -1, 1, -2 -> 0, 1, 2, 3); it is applied
to ``int32``/``int64`` columns only - a ``uint32`` value is its own code.  Bit streams are
LSB-first in little-endian ``uint64`` words (as :mod:`scabbard.compression._bits`).  An
empty column is an empty payload for every codec.

Payload layouts (``n`` values; all multi-byte fields little-endian):

* ``base_delta``: ``u8 width, 7 zero bytes, i64 base`` (the batch minimum), then the
  ``ceil(n*width/64)`` words of ``v - base`` (as uint64) packed at ``width`` bits.
* ``delta_of_delta``: ``i64`` first value, then a bit stream of ``n-1`` codes of
  ``zigzag((v[i]-v[i-1]) - (v[i-1]-v[i-2]))`` (the delta before the first counts as 0;
  all arithmetic wraps mod 2**64), each a prefix and a payload: ``0`` (the value 0, 1 bit),
  ``10`` + 3 bits, ``110`` + 7, ``1110`` + 12, ``11110`` + 32, ``11111`` + 64 (any value),
  prefix bits written first.
* ``ns_byte``: ``u8 k, 7 zero bytes``, then every code in ``k`` bytes, ``k`` in 1, 2, 4, 8.
* ``ns_bit``: ``u8 width, 7 zero bytes``, then the codes packed at ``width`` bits.
* ``simple8b``: words with a selector in bits 60-63 and 60 payload bits: selector 0 = the
  payload's count of raw 64-bit codes follows in as many words, 1 = a run of payload
  zeros, 2..15 = 60x1, 30x2, 20x3, 15x4, 12x5, 10x6, 8x7, 7x8, 6x10, 5x12, 4x15, 3x20,
  2x30, 1x60 bit codes, LSB-first (the last word may hold fewer than its count).
* ``varbyte``: every code in LEB128 (7 data bits per byte, low bits first, high bit set
  on every byte but a value's last).
* ``rle``: ``u64 runs, u64 m``, the inner codec's payload of the run values (``m`` bytes,
  zero-padded to a multiple of 8), then the run lengths minus one in the ``ns_bit``
  layout (unsigned: no zigzag).  Floats are compared and stored as their bit patterns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros

from scabbard.compression._bits import U64, bit_width, packed_words, unzigzag, zigzag
from scabbard.compression.base import (
    FLOAT,
    INTEGER,
    Codec,
    CodecError,
    Nested,
    Unfit,
    numpy_dtype,
    register,
)
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
    """The column as a contiguous, writable int64 array, and whether it takes zigzag."""
    values = np.asarray(values)
    if values.ndim != 1:
        raise CodecError(f"{codec.name} encodes 1-D columns, got shape {values.shape}")
    codec.check_dtype(values.dtype.name)
    if values.dtype == np.int64:
        return np.require(values, np.int64, "CAW"), True
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


# -- base-delta --------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Width(Codec):
    """A codec with one bit width: 0 = measured per batch (generic), > 0 = fixed (specialised,
    :class:`Unfit` when a value needs more bits)."""

    layout: ClassVar[str] = "<B"
    example_widths: ClassVar[tuple[int, ...]] = (12,)

    width: int = 0

    def __post_init__(self):
        _check_width(self.name, self.width)

    @property
    def specialised(self) -> bool:
        return self.width > 0

    @classmethod
    def examples(cls) -> list[Codec]:
        return [cls(), *(cls(width=w) for w in cls.example_widths)]


@register
@dataclass(frozen=True)
class BaseDelta(_Width):
    """Values as unsigned offsets from the batch minimum, bit-packed (Table 2, [84]).

    ``width=0`` measures the offsets' width per batch; ``width>0`` is the specialised codec
    a profile learns (§5.2): a batch whose range needs more bits is :class:`Unfit`.
    """

    codec_id: ClassVar[int] = 1
    name: ClassVar[str] = "base_delta"
    accepts: ClassVar[frozenset[str]] = INTEGER
    example_widths: ClassVar[tuple[int, ...]] = (12, 33)

    def encode(self, values: np.ndarray) -> np.ndarray:
        v, _ = _column(self, values)
        if not len(v):
            return np.zeros(0, np.uint8)
        lo, hi = _min_max(v)
        need = (int(hi) - int(lo)).bit_length()
        if self.width and need > self.width:
            raise Unfit(f"{self}: range {int(hi) - int(lo)} needs {need} bits")
        width = self.width or need
        return _packed(v, False, int(lo), width, _header(width, int(lo), 2))[0]

    def decode(self, payload: np.ndarray, count: int, dtype: str) -> np.ndarray:
        if (p := _start(self, payload, count, dtype)) is None:
            return np.zeros(0, numpy_dtype(dtype))
        head = _words(p, 0, 2, self.name)
        width, base = int(head[0]), int(head[1:].view(np.int64)[0])
        return _narrow(_unpacked(p, count, False, base, width, 16, self.name), dtype)


# -- delta-of-delta (Gorilla timestamps) --------------------------------------------------------
# bucket t: prefix of t one bits and a zero (t < 5; '11111' for t = 5), then VLEN[t] bits
_DOD_PLEN = np.array([1, 2, 3, 4, 5, 5], np.int64)
_DOD_PREFIX = np.array([0, 1, 3, 7, 15, 31], np.uint64)
_DOD_VLEN = np.array([0, 3, 7, 12, 32, 64], np.int64)
_DOD_MASK = np.array([(1 << b) - 1 for b in _DOD_VLEN], np.uint64)
_DOD_BUCKET = np.array([0] + [1] * 3 + [2] * 4 + [3] * 5 + [4] * 20 + [5] * 32, np.int64)


@inline
def _zz_u(d):
    """Zigzag of a uint64 holding an int64's bits (all in unsigned, wrapping arithmetic)."""
    return (d << U64(1)) ^ (U64(0) - (d >> U64(63)))


@inline
def _unzz_u(c):
    return (c >> U64(1)) ^ (U64(0) - (c & U64(1)))


@kernel
def _dod_encode(v, out):
    """Delta-of-delta codes with a prefix code (§5.1, Gorilla [85]); returns words used."""
    out[0] = U64(v[0])
    prev = U64(v[0])
    pdelta = U64(0)
    acc = U64(0)
    filled = 0
    j = 1
    for i in range(1, v.shape[0]):
        x = U64(v[i])
        d = x - prev
        c = _zz_u(d - pdelta)
        prev = x
        pdelta = d
        t = _DOD_BUCKET[bit_width(c)]
        if t < 5:
            plen = _DOD_PLEN[t]
            bits = _DOD_PREFIX[t] | (c << U64(plen))
            nb = plen + _DOD_VLEN[t]
        else:  # the prefix alone, then the 64-bit code below
            bits = U64(31)
            nb = 5
        acc |= bits << U64(filled)
        filled += nb
        if filled >= 64:
            out[j] = acc
            j += 1
            filled -= 64
            acc = (bits >> U64(nb - filled)) if filled > 0 else U64(0)
        if t == 5:
            acc |= c << U64(filled)
            out[j] = acc
            j += 1
            acc = (c >> U64(64 - filled)) if filled > 0 else U64(0)
    if filled > 0:
        out[j] = acc
        j += 1
    return j


@inline
def _window(words, p, nw):
    """64 bits of the stream from bit ``p`` (bits past the last word are garbage)."""
    j = p >> 6
    b = U64(p & 63)
    jn = j + 1 if j + 1 < nw else j
    return (words[j] >> b) | ((words[jn] << U64(1)) << (U64(63) - b))


@kernel
def _dod_decode(words, out):
    """Inverse of :func:`_dod_encode`; runs of zero codes are decoded a word at a time.
    Returns the bits read, or -1 if the stream ends early (a damaged payload)."""
    n = out.shape[0]
    nw = words.shape[0]
    prev = words[0]
    out[0] = np.int64(prev)
    pdelta = U64(0)
    p = 64
    i = 1
    while i < n:
        if p >= 64 * nw:
            return -1
        win = _window(words, p, nw)
        if win & U64(1) == U64(0):  # a run of 'same delta' codes
            z = min(np.int64(trailing_zeros(win)), n - i)
            for k in range(z):
                prev += pdelta
                out[i + k] = np.int64(prev)
            i += z
            p += z
            continue
        t = min(np.int64(trailing_zeros(~win)), 5)
        if t < 5:
            plen = t + 1
            c = (win >> U64(plen)) & _DOD_MASK[t]
            p += plen + _DOD_VLEN[t]
        else:
            p += 5
            if p >= 64 * nw:
                return -1
            c = _window(words, p, nw)
            p += 64
        pdelta += _unzz_u(c)
        prev += pdelta
        out[i] = np.int64(prev)
        i += 1
    return p


@register
@dataclass(frozen=True)
class DeltaOfDelta(Codec):
    """Gorilla-style timestamps: regular intervals cost one bit a value (Table 2, [85])."""

    codec_id: ClassVar[int] = 2
    name: ClassVar[str] = "delta_of_delta"
    accepts: ClassVar[frozenset[str]] = INTEGER

    def encode(self, values: np.ndarray) -> np.ndarray:
        v, _ = _column(self, values)
        if not len(v):
            return np.zeros(0, np.uint8)
        out = np.empty(2 + packed_words(len(v) - 1, 69), np.uint64)  # 69 bits: the worst code
        used = _dod_encode(v, out)
        return out[:used].copy().view(np.uint8)

    def decode(self, payload: np.ndarray, count: int, dtype: str) -> np.ndarray:
        if (p := _start(self, payload, count, dtype)) is None:
            return np.zeros(0, numpy_dtype(dtype))
        if p.nbytes % 8 or p.nbytes < 8:
            raise CodecError(f"{self.name}: payload of {p.nbytes} bytes is not whole words")
        words = _words(p, 0, p.nbytes // 8, self.name)
        out = np.empty(count, np.int64)
        used = _dod_decode(words, out)
        if used < 0 or used > 64 * len(words) or (used + 63) // 64 != len(words):
            raise CodecError(f"{self.name}: {count} values do not fill the {p.nbytes} bytes")
        return _narrow(out, dtype)


# -- null suppression, byte-aligned ------------------------------------------------------------
@kernel
def _ns_byte_encode(v, zz, k, out):
    """Every code in ``k`` bytes (§5.1, "word-aligned NS"); returns the OR of the codes."""
    seen = U64(0)
    n = v.shape[0]
    if k == 1:
        for i in range(n):
            c = _code(v[i], zz)
            seen |= c
            out[i] = np.uint8(c)
    elif k == 2:
        o2 = out.view(np.uint16)
        for i in range(n):
            c = _code(v[i], zz)
            seen |= c
            o2[i] = np.uint16(c)
    elif k == 4:
        o4 = out.view(np.uint32)
        for i in range(n):
            c = _code(v[i], zz)
            seen |= c
            o4[i] = np.uint32(c)
    else:
        o8 = out.view(np.uint64)
        for i in range(n):
            c = _code(v[i], zz)
            seen |= c
            o8[i] = c
    return seen


@kernel
def _ns_byte_decode(data, zz, k, out):
    n = out.shape[0]
    if k == 1:
        for i in range(n):
            out[i] = _uncode(U64(data[i]), zz)
    elif k == 2:
        d2 = data.view(np.uint16)
        for i in range(n):
            out[i] = _uncode(U64(d2[i]), zz)
    elif k == 4:
        d4 = data.view(np.uint32)
        for i in range(n):
            out[i] = _uncode(U64(d4[i]), zz)
    else:
        d8 = data.view(np.uint64)
        for i in range(n):
            out[i] = _uncode(d8[i], zz)


_NBYTES = (1, 2, 4, 8)


@register
@dataclass(frozen=True)
class NullSuppressionByte(Codec):
    """Leading zero bytes dropped: every value in the same 1, 2, 4 or 8 bytes (Table 2).

    ``nbytes=0`` takes the fewest bytes that fit the batch; ``nbytes>0`` is specialised.
    """

    codec_id: ClassVar[int] = 3
    name: ClassVar[str] = "ns_byte"
    accepts: ClassVar[frozenset[str]] = INTEGER
    layout: ClassVar[str] = "<B"

    nbytes: int = 0

    def __post_init__(self):
        if self.nbytes not in (0, *_NBYTES):
            raise CodecError(f"{self.name}: nbytes {self.nbytes} is not 0, 1, 2, 4 or 8")

    @property
    def specialised(self) -> bool:
        return self.nbytes > 0

    @classmethod
    def examples(cls) -> list[Codec]:
        return [cls(), cls(nbytes=2), cls(nbytes=4)]

    def encode(self, values: np.ndarray) -> np.ndarray:
        v, zz = _column(self, values)
        if not len(v):
            return np.zeros(0, np.uint8)
        need = 0 if self.nbytes else int(_or_codes(v, zz)).bit_length()
        k = self.nbytes or next(k for k in _NBYTES if need <= 8 * k)
        out = np.zeros(8 + k * len(v), np.uint8)
        out[0] = k
        seen = int(_ns_byte_encode(v, zz, k, out[8:]))
        if seen >> (8 * k):
            raise Unfit(f"{self}: a value needs more than {k} bytes")
        return out

    def decode(self, payload: np.ndarray, count: int, dtype: str) -> np.ndarray:
        if (p := _start(self, payload, count, dtype)) is None:
            return np.zeros(0, numpy_dtype(dtype))
        k = int(p[0]) if p.nbytes else 0
        if k not in _NBYTES or p.nbytes != 8 + k * count:
            raise CodecError(f"{self.name}: {p.nbytes} bytes do not hold {count} values "
                             f"of {k} bytes")
        out = np.empty(count, np.int64)
        _ns_byte_decode(p[8:], dtype != "uint32", k, out)
        return _narrow(out, dtype)


# -- null suppression, bit-aligned -------------------------------------------------------------
@register
@dataclass(frozen=True)
class NullSuppressionBit(_Width):
    """Leading zero bits dropped: every value packed at one bit width (Table 2).

    ``width=0`` measures the batch's width; ``width>0`` is specialised (:class:`Unfit`
    when a value needs more bits).
    """

    codec_id: ClassVar[int] = 4
    name: ClassVar[str] = "ns_bit"
    accepts: ClassVar[frozenset[str]] = INTEGER
    example_widths: ClassVar[tuple[int, ...]] = (12, 40)

    def encode(self, values: np.ndarray) -> np.ndarray:
        v, zz = _column(self, values)
        if not len(v):
            return np.zeros(0, np.uint8)
        return _ns_bit_encode(v, zz, self.width, str(self))

    def decode(self, payload: np.ndarray, count: int, dtype: str) -> np.ndarray:
        if (p := _start(self, payload, count, dtype)) is None:
            return np.zeros(0, numpy_dtype(dtype))
        return _narrow(_ns_bit_decode(p, count, dtype != "uint32", self.name), dtype)


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


# -- Simple-8b ---------------------------------------------------------------------------------
# selector -> values per word and their bits (0: raw words follow, 1: a run of zeros)
_S8_N = np.array([0, 0, 60, 30, 20, 15, 12, 10, 8, 7, 6, 5, 4, 3, 2, 1], np.int64)
_S8_B = np.array([0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 20, 30, 60], np.int64)
# bit width (0..64) -> the densest selector holding it; and how many values that selector takes
_S8_FOR_BITS = np.array([min(s for s in range(2, 16) if _S8_B[s] >= b) for b in range(61)]
                        + [0] * 4, np.int64)
_S8_CAP = _S8_N[_S8_FOR_BITS]
# k codes that fit a word of more -> the selector with the most values, at most k
_S8_FOR_COUNT = np.array([0] + [min(s for s in range(2, 16) if _S8_N[s] <= k)
                                for k in range(1, 61)], np.int64)
_S8_ZERO_RUN = 60  # a zero run this long takes a run word (a 60x1 word holds no more)
_MASK60 = U64((1 << 60) - 1)


@kernel
def _s8_encode(v, zz, out):
    """Greedy Simple-8b (§5.1, [5]): each word takes as many codes as fit; returns words."""
    n = v.shape[0]
    i = 0
    j = 0
    while i < n:
        c = _code(v[i], zz)
        if c == U64(0):
            z = 1
            while i + z < n and _code(v[i + z], zz) == U64(0):
                z += 1
            if z >= _S8_ZERO_RUN:
                out[j] = (U64(1) << U64(60)) | U64(z)
                j += 1
                i += z
                continue
        if bit_width(c) > 60:
            r = 1
            while i + r < n and bit_width(_code(v[i + r], zz)) > 60:
                r += 1
            out[j] = U64(r)
            for k in range(r):
                out[j + 1 + k] = _code(v[i + k], zz)
            j += 1 + r
            i += r
            continue
        m = 0  # the width of the k codes taken so far, which fit one word
        k = 0
        while i + k < n:
            wider = max(m, bit_width(_code(v[i + k], zz)))
            if k + 1 > _S8_CAP[wider]:
                break
            m = wider
            k += 1
            if k == _S8_CAP[m]:
                break
        if k == _S8_CAP[m] or i + k == n:
            sel = _S8_FOR_BITS[m]
        else:
            sel = _S8_FOR_COUNT[k]
            k = _S8_N[sel]
        b = U64(_S8_B[sel])
        w = U64(sel) << U64(60)
        s = U64(0)
        for t in range(k):
            w |= _code(v[i + t], zz) << s
            s += b
        out[j] = w
        j += 1
        i += k
    return j


@kernel
def _s8_decode(words, zz, out):
    """Inverse of :func:`_s8_encode`; returns the words read, -1 on a damaged payload."""
    n = out.shape[0]
    nw = words.shape[0]
    i = 0
    j = 0
    while i < n:
        if j >= nw:
            return -1
        w = words[j]
        j += 1
        sel = np.int64(w >> U64(60))
        payload = w & _MASK60
        if sel == 0:
            if payload > U64(n - i) or payload > U64(nw - j):
                return -1
            r = np.int64(payload)
            for k in range(r):
                out[i + k] = _uncode(words[j + k], zz)
            j += r
            i += r
        elif sel == 1:
            if payload > U64(n - i):
                return -1
            zero = _uncode(U64(0), zz)
            for k in range(np.int64(payload)):
                out[i + k] = zero
            i += np.int64(payload)
        else:
            b = U64(_S8_B[sel])
            mask = (U64(1) << b) - U64(1)
            k = min(_S8_N[sel], n - i)
            s = U64(0)
            for t in range(k):
                out[i + t] = _uncode((w >> s) & mask, zz)
                s += b
            i += k
    return j


@register
@dataclass(frozen=True)
class Simple8b(Codec):
    """Simple-8b: as many equal-width codes as fit 60 bits per word (Table 2, [5])."""

    codec_id: ClassVar[int] = 5
    name: ClassVar[str] = "simple8b"
    accepts: ClassVar[frozenset[str]] = INTEGER

    def encode(self, values: np.ndarray) -> np.ndarray:
        v, zz = _column(self, values)
        if not len(v):
            return np.zeros(0, np.uint8)
        out = np.empty(len(v) + (len(v) + 1) // 2 + 1, np.uint64)  # worst: raw, small, raw...
        used = _s8_encode(v, zz, out)
        return out[:used].copy().view(np.uint8)

    def decode(self, payload: np.ndarray, count: int, dtype: str) -> np.ndarray:
        if (p := _start(self, payload, count, dtype)) is None:
            return np.zeros(0, numpy_dtype(dtype))
        if p.nbytes % 8:
            raise CodecError(f"{self.name}: payload of {p.nbytes} bytes is not whole words")
        words = _words(p, 0, p.nbytes // 8, self.name)
        out = np.empty(count, np.int64)
        if _s8_decode(words, dtype != "uint32", out) != len(words):
            raise CodecError(f"{self.name}: {count} values do not fill the {p.nbytes} bytes")
        return _narrow(out, dtype)


# -- Var-Byte ----------------------------------------------------------------------------------
_VB_LEN = np.array([1] + [(b + 6) // 7 for b in range(1, 65)], np.int64)  # bytes per bit width


@kernel
def _varbyte_size(v, zz):
    s = 0
    for i in range(v.shape[0]):
        s += _VB_LEN[bit_width(_code(v[i], zz))]
    return s


@kernel
def _varbyte_encode(v, zz, out):
    """LEB128 (§5.1, [30]): 7 bits a byte, the high bit set while more bytes follow."""
    j = 0
    for i in range(v.shape[0]):
        c = _code(v[i], zz)
        while c >= U64(0x80):
            out[j] = np.uint8((c & U64(0x7F)) | U64(0x80))
            c >>= U64(7)
            j += 1
        out[j] = np.uint8(c)
        j += 1


@kernel
def _varbyte_decode(data, zz, out):
    """Returns the bytes read, -1 on a damaged payload (cut short, or a value over 10 bytes).
    While 10 bytes are left (the longest value) the bytes are read without bound checks."""
    m = data.shape[0]
    n = out.shape[0]
    i = 0
    j = 0
    while i < n and j + 10 <= m:
        b = data[j]
        j += 1
        c = U64(b & 0x7F)
        s = U64(0)
        while b >= 0x80:
            s += U64(7)
            if s > U64(63):
                return -1
            b = data[j]
            j += 1
            c |= U64(b & 0x7F) << s
        out[i] = _uncode(c, zz)
        i += 1
    while i < n:
        c = U64(0)
        s = U64(0)
        while True:
            if j >= m or s > U64(63):
                return -1
            b = data[j]
            j += 1
            c |= U64(b & 0x7F) << s
            if b < 0x80:
                break
            s += U64(7)
        out[i] = _uncode(c, zz)
        i += 1
    return j


@register
@dataclass(frozen=True)
class VarByte(Codec):
    """Var-Byte: every value in as many bytes as its 7-bit groups (Table 2, [30])."""

    codec_id: ClassVar[int] = 6
    name: ClassVar[str] = "varbyte"
    accepts: ClassVar[frozenset[str]] = INTEGER

    def encode(self, values: np.ndarray) -> np.ndarray:
        v, zz = _column(self, values)
        out = np.empty(_varbyte_size(v, zz), np.uint8)
        _varbyte_encode(v, zz, out)
        return out

    def decode(self, payload: np.ndarray, count: int, dtype: str) -> np.ndarray:
        if (p := _start(self, payload, count, dtype)) is None:
            return np.zeros(0, numpy_dtype(dtype))
        out = np.empty(count, np.int64)
        if _varbyte_decode(p, dtype != "uint32", out) != p.nbytes:
            raise CodecError(f"{self.name}: {count} values do not fill the {p.nbytes} bytes")
        return _narrow(out, dtype)


# -- run-length encoding ---------------------------------------------------------------------
@kernel
def _count_runs(v):
    r = 1
    for i in range(1, v.shape[0]):
        r += v[i] != v[i - 1]
    return r


@kernel
def _find_runs(v, values, lengths):
    """Run values and run lengths minus one (§5.1, RLE [92]); ``lengths`` comes zeroed."""
    k = 0
    values[0] = v[0]
    for i in range(1, v.shape[0]):
        same = v[i] == v[i - 1]
        k += 1 - same
        values[k] = v[i]
        lengths[k] += same


@kernel
def _expand_runs(values, lengths, out):
    """Inverse of :func:`_find_runs`; False if the lengths do not add up to ``out``."""
    n = out.shape[0]
    i = 0
    for k in range(values.shape[0]):
        r = lengths[k] + 1
        if r > n - i:
            return False
        x = values[k]
        for t in range(r):
            out[i + t] = x
        i += r
    return i == n


_BITS_OF = {"float32": "int32", "float64": "int64"}  # what a float's bit pattern is stored as


@register
@dataclass(frozen=True)
class RunLength(Nested):
    """Runs of equal values as (value, length) pairs (Table 2, [92]): the run values go to
    the ``inner`` codec, the lengths to generic bit-aligned NS.

    Floats are compared as bit patterns (NaN payloads, -0.0 survive).  The inner codec gets
    the run values in the column's dtype if it accepts it, else a float's bit patterns as
    ``int32``/``int64``.  ``inner=None`` is generic NS-bit for integers and base-delta for
    float bit patterns.  RLE is specialised iff its inner codec is.
    """

    codec_id: ClassVar[int] = 7
    name: ClassVar[str] = "rle"
    accepts: ClassVar[frozenset[str]] = INTEGER | FLOAT

    def __post_init__(self):
        if self.inner is not None and not (isinstance(self.inner, Codec)
                                           and self.inner.lossless):
            raise CodecError(f"{self.name}: inner codec {self.inner} is not a lossless codec")

    @property
    def specialised(self) -> bool:
        return self.inner is not None and self.inner.specialised

    @classmethod
    def examples(cls) -> list[Codec]:
        # specialised: base-delta at 63 bits refuses run values that span all 64 (extremes)
        return [cls(), cls(inner=Simple8b()), cls(inner=BaseDelta(width=63))]

    def _inner_for(self, dtype: str) -> tuple[Codec, str]:
        inner = self.inner or (NullSuppressionBit() if dtype in INTEGER else BaseDelta())
        if dtype in inner.accepts:
            return inner, dtype
        if _BITS_OF.get(dtype) in inner.accepts:
            return inner, _BITS_OF[dtype]
        raise CodecError(f"{self.name}: inner codec {inner} takes neither {dtype} nor its bits")

    def encode(self, values: np.ndarray) -> np.ndarray:
        values = np.asarray(values)
        dtype = values.dtype.name
        self.check_dtype(dtype)
        if values.ndim != 1:
            raise CodecError(f"{self.name} encodes 1-D columns, got shape {values.shape}")
        values = np.ascontiguousarray(values, numpy_dtype(dtype))
        if not len(values):
            return np.zeros(0, np.uint8)
        inner, inner_dtype = self._inner_for(dtype)
        bits = values.view(numpy_dtype(_BITS_OF.get(dtype, dtype)))
        v = np.require(bits, np.int64, "CAW") if bits.dtype == np.int64 else bits.astype(np.int64)
        runs = int(_count_runs(v))
        run_values = np.empty(runs, np.int64)
        lengths = np.zeros(runs, np.int64)
        _find_runs(v, run_values, lengths)
        stored = run_values.astype(numpy_dtype(_BITS_OF.get(dtype, dtype)), copy=False)
        held = inner.encode(stored.view(numpy_dtype(inner_dtype)))
        head = np.array([runs, held.nbytes], np.uint64)
        pad = np.zeros(-held.nbytes % 8, np.uint8)
        tail = _ns_bit_encode(lengths, False, 0, str(self))
        return np.concatenate([head.view(np.uint8), held, pad, tail])

    def decode(self, payload: np.ndarray, count: int, dtype: str) -> np.ndarray:
        if (p := _start(self, payload, count, dtype)) is None:
            return np.zeros(0, numpy_dtype(dtype))
        head = _words(p, 0, 2, self.name)
        runs, held = int(head[0]), int(head[1])
        end = 16 + held + (-held % 8)
        if not 0 < runs <= count or end > p.nbytes:
            raise CodecError(f"{self.name}: header of {runs} runs, {held} bytes in a "
                             f"{p.nbytes}-byte payload")
        inner, inner_dtype = self._inner_for(dtype)
        run_values = inner.decode(p[16:16 + held], runs, inner_dtype)
        if run_values.shape != (runs,):
            raise CodecError(f"{self.name}: inner codec {inner} decoded {run_values.shape}")
        lengths = _ns_bit_decode(p[end:], runs, False, self.name)
        bits = run_values.view(numpy_dtype(_BITS_OF.get(dtype, dtype)))
        out = np.empty(count, np.int64)
        if not _expand_runs(bits.astype(np.int64, copy=False), lengths, out):
            raise CodecError(f"{self.name}: run lengths do not add up to {count}")
        bits_dtype = numpy_dtype(_BITS_OF.get(dtype, dtype))
        return out.astype(bits_dtype, copy=False).view(numpy_dtype(dtype))
