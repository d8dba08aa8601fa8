"""Float codecs: Gorilla XOR compression and decimal-precision lossy floats (paper §5).

**xor** (codec 8; Table 2's "XOR compression", after Gorilla).  Each value's bit
pattern (float64 as its 64 bits, float32 as its 32 bits widened to 64) is XORed
with the previous one (the first with 0), and the XOR ``x`` is written to an
LSB-first bit stream (bit ``k`` of the stream is bit ``k % 64`` of little-endian
word ``k // 64``, as in :mod:`scabbard.compression._bits`)::

    x == 0                      1 bit    0
    x fits the current window   2 bits   1, 0   then the window's m bits of x
    otherwise (a new window)    14 bits  1, 1, 6-bit lz, 6-bit (m - 1)
                                         then the m meaningful bits of x

where ``lz`` is x's leading-zero count (0..63, never capped) and ``m = 64 - lz - tz``
(1..64) its meaningful bits; the window is the (lz, tz) of the last new window, and
x fits it when it has at least as many leading and trailing zeros.  The encoder
opens a new window also when reusing the old one would cost over 12 bits more than
the new one (a choice of the encoder only; the decoder follows the control bits).
The payload is the stream's ``ceil(bits / 8)`` bytes; the value count comes from
the segment.  Every bit pattern round-trips: NaN payloads, -0.0, infinities,
subnormals.  (Gorilla and LightSaber store ``lz`` in 5 bits, capped at 31: the
meaningful bits then carry the extra zeros - at least 32 of them for every window
of a widened float32.  Six bits hold any count.)

**lossy_float** (codec 10; §5.1: floats are turned into integers at a fixed
decimal precision, LightSaber's "FloatMult").  ``q = round(x * 10**decimals)`` as
int64 (the nearest integer to the exact product, ties either way), encoded by an
inner integer codec (by default the registry's generic ``base_delta``); the payload
is the inner codec's payload as it is, and the inner codec's id and parameters ride
in this codec's header parameters (:class:`~scabbard.compression.base.Nested`),
after its own one byte: ``decimals`` (0..12).
Decoding gives ``q / 10**decimals`` rounded once to the column's dtype.  A batch with
NaN, an infinity or ``|q| >= 2**53`` (beyond the integers float64 holds exactly)
raises :class:`~scabbard.compression.base.Unfit`.  The error bound is derived at
:meth:`LossyFloat.max_error`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from numba.cpython.unsafe.numbers import leading_zeros, trailing_zeros

from scabbard.compression.base import (
    FLOAT,
    Codec,
    CodecError,
    Nested,
    Unfit,
    codec_class,
    numpy_dtype,
    register,
)
from scabbard.kernels._jit import inline, kernel

U64 = np.uint64
_ALL = U64(0xFFFFFFFFFFFFFFFF)
_MAX_BITS_PER_VALUE = 2 + 12 + 64  # a new window with 64 meaningful bits


# -- bit stream: LSB-first into little-endian uint64 words ---------------------------------

@inline
def _put(out, j, acc, filled, v, nbits):
    """Append the ``nbits`` (1..64) low bits of ``v`` (no bits above them) to the stream
    whose full words are ``out[:j]`` and whose open word ``acc`` holds ``filled`` (0..63)
    bits."""
    acc |= v << U64(filled)
    filled += nbits
    if filled >= 64:
        out[j] = acc
        j += 1
        filled -= 64
        acc = (v >> U64(nbits - filled)) if filled > 0 else U64(0)
    return j, acc, filled


@inline
def _peek(words, pos):
    """The 64 stream bits from bit ``pos`` on (``words`` padded past the stream's end)."""
    j = pos >> 6
    b = pos & 63
    w = words[j] >> U64(b)
    if b > 0:
        w |= words[j + 1] << U64(64 - b)
    return w


@inline
def _low(w, nbits):
    """The ``nbits`` (1..64) low bits of ``w``."""
    return w if nbits == 64 else w & ((U64(1) << U64(nbits)) - U64(1))


# -- xor kernels -----------------------------------------------------------------------------

@kernel
def _xor_encode(bits, out):
    """Gorilla XOR-encode the bit patterns ``bits`` (uint64) into ``out`` (uint64 words,
    room for 78 bits a value plus one word); returns the stream's length in bits."""
    prev = U64(0)
    plz = 65  # no window yet: nothing fits
    ptz = 0
    plen = 0
    j = 0
    acc = U64(0)
    filled = 0
    for i in range(bits.shape[0]):
        v = bits[i]
        x = v ^ prev
        prev = v
        if x == U64(0):
            filled += 1  # a 0 bit: the open word already holds it
            if filled == 64:
                out[j] = acc
                j += 1
                acc = U64(0)
                filled = 0
            continue
        lz = np.int64(leading_zeros(x))
        tz = np.int64(trailing_zeros(x))
        m = 64 - lz - tz
        if lz >= plz and tz >= ptz and plen <= m + 12:
            if plen <= 62:
                j, acc, filled = _put(out, j, acc, filled,
                                      U64(1) | ((x >> U64(ptz)) << U64(2)), plen + 2)
            else:
                j, acc, filled = _put(out, j, acc, filled, U64(1), 2)
                j, acc, filled = _put(out, j, acc, filled, x >> U64(ptz), plen)
        else:
            ctrl = U64(3) | (U64(lz) << U64(2)) | (U64(m - 1) << U64(8))
            if m <= 50:
                j, acc, filled = _put(out, j, acc, filled,
                                      ctrl | ((x >> U64(tz)) << U64(14)), m + 14)
            else:
                j, acc, filled = _put(out, j, acc, filled, ctrl, 14)
                j, acc, filled = _put(out, j, acc, filled, x >> U64(tz), m)
            plz = lz
            ptz = tz
            plen = m
    if filled > 0:
        out[j] = acc
    return j * 64 + filled


@kernel
def _xor_decode(words, nbits, out):
    """Decode ``out.shape[0]`` bit patterns from the stream of ``nbits`` bits in ``words``
    (padded with 2 zero words past it); returns the bits read, or -1 when the stream
    is damaged (it runs out, or a field is impossible)."""
    prev = U64(0)
    ptz = 0
    plen = 0
    pos = 0
    for i in range(out.shape[0]):
        w = _peek(words, pos)
        if (w & U64(1)) != U64(0):
            if (w & U64(2)) == U64(0):  # reuse the window
                if plen == 0:
                    return -1
                pos += 2
                w >>= U64(2)
                valid = 62
            else:  # a new window
                lz = np.int64((w >> U64(2)) & U64(63))
                plen = np.int64((w >> U64(8)) & U64(63)) + 1
                ptz = 64 - lz - plen
                if ptz < 0:
                    return -1
                pos += 14
                w >>= U64(14)
                valid = 50
            if plen > valid:  # the meaningful bits run past the peeked word
                w = _peek(words, pos)
            prev ^= _low(w, plen) << U64(ptz)
            pos += plen
        else:
            pos += 1
        if pos > nbits:
            return -1
        out[i] = prev
    return pos


# -- lossy float kernel ----------------------------------------------------------------------

_SPLITTER = 134217729.0  # 2**27 + 1: Veltkamp's split of a float64 into two 26-bit halves
_Q_LIMIT = 9007199254740992.0  # 2**53: |q| below it is an exact float64


@inline
def _product_error(a, b, p):
    """``a * b - p`` exactly, for ``p = fl(a * b)`` (Dekker's TwoProduct; no FMA needed)."""
    t = _SPLITTER * a
    ah = t - (t - a)
    al = a - ah
    t = _SPLITTER * b
    bh = t - (t - b)
    bl = b - bh
    return ((ah * bh - p) + ah * bl + al * bh) + al * bl


@kernel
def _quantise(x, scale, out):
    """``out[i]`` = the integer nearest to the exact ``x[i] * scale``; returns the index of
    the first value that is NaN, infinite or rounds to 2**53 or beyond, or -1."""
    for i in range(x.shape[0]):
        p = x[i] * scale
        q = np.rint(p)
        f = p - q  # exact: the fraction p lost
        if f == 0.5 or f == -0.5:  # fl(x * scale) is a tie: the exact product decides
            e = _product_error(x[i], scale, p)
            if f == 0.5 and e > 0.0:
                q += 1.0
            elif f == -0.5 and e < 0.0:
                q -= 1.0
        if not abs(q) < _Q_LIMIT:
            return i
        out[i] = np.int64(q)
    return -1


# -- public wrappers -------------------------------------------------------------------------

def _float_bits(values: np.ndarray) -> np.ndarray:
    """The bit patterns of a float32/float64 column as uint64 (float32 widened)."""
    values = np.ascontiguousarray(values)
    if values.dtype.itemsize == 4:
        return values.view(np.uint32).astype(np.uint64)
    return values.view(np.uint64)


def xor_encode(values: np.ndarray) -> np.ndarray:
    """The Gorilla XOR stream of a float column, as bytes (the ``xor`` payload)."""
    bits = _float_bits(values)
    out = np.empty((len(bits) * _MAX_BITS_PER_VALUE + 63) // 64 + 1, np.uint64)
    nbits = int(_xor_encode(bits, out))
    return out.view(np.uint8)[:(nbits + 7) // 8].copy()


def xor_decode(payload: np.ndarray, count: int, dtype: np.dtype) -> np.ndarray:
    """The ``count`` floats of ``dtype`` that the XOR stream ``payload`` holds."""
    nbytes = len(payload)
    words = np.zeros((nbytes + 7) // 8 + 2, np.uint64)
    words.view(np.uint8)[:nbytes] = payload
    bits = np.empty(count, np.uint64)
    used = int(_xor_decode(words, nbytes * 8, bits))
    if used < 0 or (used + 7) // 8 != nbytes:
        raise CodecError(f"xor: a damaged stream of {nbytes} bytes for {count} values")
    if dtype.itemsize == 4:
        if count and int(np.bitwise_or.reduce(bits)) >> 32:
            raise CodecError("xor: a float32 stream holds over 32 bits a value")
        return bits.astype(np.uint32).view(dtype)
    return bits.view(dtype)


def quantise(values: np.ndarray, decimals: int) -> np.ndarray:
    """``round(values * 10**decimals)`` as int64, exactly; raises :class:`Unfit` on NaN,
    infinities and values whose ``|q|`` reaches 2**53."""
    with np.errstate(invalid="ignore"):  # widening a signalling NaN: Unfit below anyway
        x = np.ascontiguousarray(values, np.float64)
    out = np.empty(len(x), np.int64)
    bad = int(_quantise(x, float(10 ** decimals), out))
    if bad >= 0:
        raise Unfit(f"lossy_float({decimals} decimals): value {x[bad]!r} at row {bad} has "
                    f"no exact int64 at that precision")
    return out


# -- codecs ----------------------------------------------------------------------------------

@register
@dataclass(frozen=True)
class Xor(Codec):
    """Gorilla XOR compression of float bit patterns (§5, Table 2); lossless, generic."""

    codec_id: ClassVar[int] = 8
    name: ClassVar[str] = "xor"
    accepts: ClassVar[frozenset[str]] = FLOAT

    def encode(self, values: np.ndarray) -> np.ndarray:
        self.check_dtype(values.dtype.name)
        return xor_encode(values)

    def decode(self, payload: np.ndarray, count: int, dtype: str) -> np.ndarray:
        self.check_dtype(dtype)
        return xor_decode(np.asarray(payload, np.uint8).reshape(-1), count, numpy_dtype(dtype))


# the integer codec of LossyFloat(inner=None); fixed forever, as payloads depend on it.
# Frame of reference: a reading near 20.00 costs the bits of its batch's range, not of 2000.
DEFAULT_INNER = "base_delta"
_MAX_DECIMALS = 12  # 10**d * a float32 is exact in float64 up to here (5**12 < 2**28)


@register
@dataclass(frozen=True)
class LossyFloat(Nested):
    """Floats kept to ``decimals`` decimal places as int64, then an integer codec (§5.1).

    ``inner=None`` means the registry's generic ``base_delta`` codec (looked up when
    used, so this module does not import the integer codecs).  Own
    parameter: ``decimals`` (0..12, one byte).
    """

    codec_id: ClassVar[int] = 10
    name: ClassVar[str] = "lossy_float"
    accepts: ClassVar[frozenset[str]] = FLOAT
    lossless: ClassVar[bool] = False
    layout: ClassVar[str] = "<B"

    # keyword-only, so that ``LossyFloat(decimals)`` - what Nested.from_params calls with
    # the unpacked own fields - fills ``decimals`` and not the inherited first field
    inner: Codec | None = field(default=None, kw_only=True)
    decimals: int = 2

    def __post_init__(self) -> None:
        if not (isinstance(self.decimals, int) and 0 <= self.decimals <= _MAX_DECIMALS):
            raise CodecError(f"lossy_float: decimals must be 0..{_MAX_DECIMALS}, "
                             f"not {self.decimals!r}")
        inner = self.inner
        if inner is not None and ("int64" not in inner.accepts or not inner.lossless):
            raise CodecError(f"lossy_float: inner codec {inner} is no lossless int64 codec")

    @property
    def specialised(self) -> bool:
        return True

    def inner_codec(self) -> Codec:
        """The integer codec of the quantised values (the default looked up now)."""
        return self.inner if self.inner is not None else codec_class(DEFAULT_INNER)()

    def max_error(self, dtype: str) -> float:
        """The largest ``|decoded - x|`` this codec allows for a ``dtype`` column.

        Encoding rounds exactly, so ``|x - q/s| <= 0.5/s`` (``s = 10**decimals``).
        Decoding rounds ``q/s`` once to the nearest float ``y`` of ``dtype`` (``q`` and
        ``s`` are exact in float64, and for float32 rounding through float64 first
        changes nothing while ``decimals <= 12`` and ``|q| < 2**53``).  Then ``y == x``
        or, if they lie on either side of ``q/s``, the gap ``g`` containing ``q/s`` is
        at most ``1/s`` long and ``|y - q/s| <= g/2``: a power of two ``h <= 0.5/s``.
        (On one side, ``|y - x| <= |x - q/s|``.)  So the bound is ``0.5/s + h``, ``h``
        the largest power of two not above ``0.5/s``: the same for both dtypes, since
        values that fit may lie where either dtype's spacing is ``2h`` (there the error
        reaches ``2h``; at ordinary magnitudes it stays near ``0.5/s``).  Rounded up
        to a float64.
        """
        self.check_dtype(dtype)
        half = 0.5 / 10 ** self.decimals
        h = 2.0 ** (math.frexp(half)[1] - 1)
        return math.nextafter(half + h, math.inf)

    def encode(self, values: np.ndarray) -> np.ndarray:
        self.check_dtype(values.dtype.name)
        return self.inner_codec().encode(quantise(values, self.decimals))

    def decode(self, payload: np.ndarray, count: int, dtype: str) -> np.ndarray:
        self.check_dtype(dtype)
        q = self.inner_codec().decode(payload, count, "int64")
        if q.shape != (count,):
            raise CodecError(f"lossy_float: inner codec gave {q.shape} values for {count}")
        return (q / float(10 ** self.decimals)).astype(numpy_dtype(dtype), copy=False)

    @classmethod
    def examples(cls) -> list[Codec]:
        inner = next((codec_class(n)() for n in ("delta_of_delta", "simple8b", "raw")
                      if _known(n)), None)
        return [cls(), cls(decimals=3), cls(decimals=2, inner=inner)]


def _known(name: str) -> bool:
    try:
        codec_class(name)
    except CodecError:
        return False
    return True
