"""Variable-length integer codecs of the paper's Table 2 (§5.1): Simple-8b and Var-Byte;
their payload layouts are in :mod:`scabbard.compression.ints`' docstring."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from scabbard.compression._bits import U64, bit_width
from scabbard.compression._intcore import (
    _code,
    _column,
    _narrow,
    _start,
    _uncode,
    _words,
)
from scabbard.compression.base import (
    INTEGER,
    Codec,
    CodecError,
    numpy_dtype,
    register,
)
from scabbard.kernels._jit import kernel

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
