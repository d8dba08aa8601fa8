"""Integer codecs of the paper's Table 2 (§5, §5.1): base-delta, delta-of-delta, null
suppression (byte- and bit-aligned) and, beyond the table, deltas packed in blocks here;
Simple-8b and Var-Byte in :mod:`scabbard.compression.varlen`, run-length encoding in
:mod:`scabbard.compression.rle`.
The payload layouts of all eight are below; shared code is in ``_intcore``.

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
* ``delta``: ``i64`` first value, then the ``b = ceil((n-1)/128)`` blocks' widths, one byte
  each, zero-padded to whole words, then each block of (up to) 128 codes
  ``zigzag(v[i]-v[i-1])`` (wrapping mod 2**64; zigzag for every dtype, as a step may be
  negative) packed at its block's width, a block starting on a new word.
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

from scabbard.compression import _bits
from scabbard.compression._bits import U64, bit_width, packed_words
from scabbard.compression._intcore import (
    _check_width,
    _code,
    _column,
    _header,
    _min_max,
    _narrow,
    _ns_bit_decode,
    _ns_bit_encode,
    _or_codes,
    _packed,
    _start,
    _uncode,
    _unpacked,
    _words,
)
from scabbard.compression.base import (
    INTEGER,
    Codec,
    CodecError,
    Unfit,
    numpy_dtype,
    register,
)
from scabbard.kernels._jit import inline, kernel


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
DOD_PLEN = np.array([1, 2, 3, 4, 5, 5], np.int64)
_DOD_PREFIX = np.array([0, 1, 3, 7, 15, 31], np.uint64)
DOD_VLEN = np.array([0, 3, 7, 12, 32, 64], np.int64)
_DOD_MASK = np.array([(1 << b) - 1 for b in DOD_VLEN], np.uint64)
DOD_BUCKET = np.array([0] + [1] * 3 + [2] * 4 + [3] * 5 + [4] * 20 + [5] * 32, np.int64)


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
        t = DOD_BUCKET[bit_width(c)]
        if t < 5:
            plen = DOD_PLEN[t]
            bits = _DOD_PREFIX[t] | (c << U64(plen))
            nb = plen + DOD_VLEN[t]
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
            p += plen + DOD_VLEN[t]
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


# -- deltas packed in blocks (FastPFor's "delta + binary packing") ----------------------------
DELTA_BLOCK = 128  # codes a width covers: 2 * width words when the block is full


DELTA_KINDS = {"int64": 0, "int32": 1, "uint32": 2}  # the dtypes delta reads as they lie


@kernel
def _delta_encode(raw, kind, out):
    """``out``: the first value, the block widths' words, the packed blocks; returns the
    words used.  ``raw``: the column's bytes, read as :data:`DELTA_KINDS` ``kind`` - a narrow
    column is not widened first (its cast cost SM's run a tenth of its CPU), and the kernel
    keeps one compiled signature all the same."""
    if kind == 0:
        return _delta_body(raw.view(np.int64), out)
    if kind == 1:
        return _delta_body(raw.view(np.int32), out)
    return _delta_body(raw.view(np.uint32), out)


@inline
def _delta_body(v, out):
    n = v.shape[0]
    out[0] = U64(np.int64(v[0]))
    blocks = (n - 1 + DELTA_BLOCK - 1) // DELTA_BLOCK
    head = 1 + (blocks + 7) // 8
    for k in range(1, head):
        out[k] = U64(0)
    codes = np.empty(DELTA_BLOCK, np.uint64)
    j = head
    for b in range(blocks):
        lo = 1 + b * DELTA_BLOCK
        m = min(DELTA_BLOCK, n - lo)
        seen = U64(0)
        for i in range(m):
            c = _zz_u(U64(np.int64(v[lo + i])) - U64(np.int64(v[lo + i - 1])))
            codes[i] = c
            seen |= c
        width = bit_width(seen)
        out[1 + b // 8] |= U64(width) << U64(8 * (b % 8))
        _bits._pack(codes[:m], width, out[j:])
        j += (m * width + 63) // 64
    return j


@kernel
def _delta_decode(words, widths, out):
    """Inverse of :func:`_delta_encode` (``widths`` checked and the payload's size with them)."""
    n = out.shape[0]
    prev = words[0]
    out[0] = np.int64(prev)
    j = 1 + (widths.shape[0] + 7) // 8
    codes = np.empty(DELTA_BLOCK, np.uint64)
    for b in range(widths.shape[0]):
        lo = 1 + b * DELTA_BLOCK
        m = min(DELTA_BLOCK, n - lo)
        width = np.int64(widths[b])
        _bits._unpack(words[j:], m, width, codes)
        j += (m * width + 63) // 64
        for i in range(m):
            prev += _unzz_u(codes[i])
            out[lo + i] = np.int64(prev)


@register
@dataclass(frozen=True)
class Delta(Codec):
    """Each value as its step from the one before, bit-packed in blocks of 128 at the block's
    own width: a reading that wanders (a random walk: SM's power readings) costs the bits
    of its steps, where base-delta pays for the batch's range and delta-of-delta for the
    change of the steps (which is wider than the steps themselves for such a walk)."""

    codec_id: ClassVar[int] = 13
    name: ClassVar[str] = "delta"
    accepts: ClassVar[frozenset[str]] = INTEGER

    takes_shift: ClassVar[bool] = True  # encode(values, shift): the steps do not move

    def encode(self, values: np.ndarray, shift: int = 0) -> np.ndarray:
        """``values + shift`` encoded (``shift``: a replayed copy's deferred timestamp shift,
        which only the first value takes)."""
        if shift and np.asarray(values).dtype != np.int64:
            raise CodecError(f"{self.name}: a shift applies to int64 columns, not "
                             f"{np.asarray(values).dtype}")
        values = np.asarray(values)
        if values.dtype.name in DELTA_KINDS and values.ndim == 1:
            v = np.ascontiguousarray(values)  # read as it lies, narrow or not
            self.check_dtype(v.dtype.name)
        else:
            v, _ = _column(self, values)
        if not len(v):
            return np.zeros(0, np.uint8)
        blocks = -(-(len(v) - 1) // DELTA_BLOCK)
        out = np.empty(1 + -(-blocks // 8) + packed_words(len(v) - 1, 64) + blocks, np.uint64)
        used = _delta_encode(v.view(np.uint8), DELTA_KINDS[v.dtype.name], out)
        if shift:
            out[0] = np.uint64((int(v[0]) + shift) & 0xFFFF_FFFF_FFFF_FFFF)
        return out[:used].copy().view(np.uint8)

    def decode(self, payload: np.ndarray, count: int, dtype: str) -> np.ndarray:
        if (p := _start(self, payload, count, dtype)) is None:
            return np.zeros(0, numpy_dtype(dtype))
        blocks = -(-(count - 1) // DELTA_BLOCK)
        head = 1 + -(-blocks // 8)
        if p.nbytes < 8 * head:
            raise CodecError(f"{self.name}: payload of {p.nbytes} bytes, expected at least "
                             f"{8 * head} for {count} values")
        widths = np.array(p[8:8 + blocks], np.int64)
        sizes = np.full(blocks, DELTA_BLOCK, np.int64)
        if blocks:
            sizes[-1] = count - 1 - DELTA_BLOCK * (blocks - 1)
        if (widths > 64).any() or p.nbytes != 8 * (head + int(((sizes * widths + 63) // 64).sum())):
            raise CodecError(f"{self.name}: {p.nbytes} bytes do not hold {count} values in "
                             f"blocks of the widths they give")
        out = np.empty(count, np.int64)
        _delta_decode(_words(p, 0, p.nbytes // 8, self.name), widths, out)
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


