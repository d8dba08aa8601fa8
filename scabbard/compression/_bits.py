"""Bit-level building blocks shared by the codecs: zigzag, bit widths, fixed-width packing.

Kernels take ``uint64``/``int64`` arrays only (narrower columns are widened by the
public wrappers), so each is compiled once.  Packing is LSB-first into little-endian
``uint64`` words: value ``i`` occupies bits ``[i*w, (i+1)*w)`` of the word stream.
"""

from __future__ import annotations

import numpy as np
from numba.cpython.unsafe.numbers import leading_zeros

from scabbard.kernels._jit import inline, kernel

U64 = np.uint64


@inline
def zigzag(v):
    """int64 -> uint64, small magnitudes to small codes: 0, -1, 1, -2 -> 0, 1, 2, 3."""
    return U64((v << 1) ^ (v >> 63))


@inline
def unzigzag(u):
    return np.int64(u >> U64(1)) ^ -np.int64(u & U64(1))


@inline
def bit_width(u):
    """Bits needed for the unsigned value ``u`` (0 for 0): one ``ctlz`` instruction."""
    return 64 - np.int64(leading_zeros(U64(u)))


@kernel
def _max_bits(u):
    m = U64(0)
    for i in range(u.shape[0]):
        m |= u[i]
    return bit_width(m)


def max_bits(u: np.ndarray) -> int:
    """Bits needed for the largest value of a uint64 array (an OR over it, one pass)."""
    return int(_max_bits(u)) if len(u) else 0


def packed_words(n: int, width: int) -> int:
    return (n * width + 63) // 64


@kernel
def _pack(u, width, out):
    if width == 0:
        return
    acc = U64(0)
    filled = 0
    j = 0
    for i in range(u.shape[0]):
        v = u[i]
        acc |= v << U64(filled)
        filled += width
        if filled >= 64:
            out[j] = acc
            j += 1
            filled -= 64
            acc = (v >> U64(width - filled)) if filled > 0 else U64(0)
    if filled > 0:
        out[j] = acc


@kernel
def _unpack(words, n, width, out):
    if width == 0:
        for i in range(n):
            out[i] = U64(0)
        return
    mask = U64(0xFFFFFFFFFFFFFFFF) if width == 64 else (U64(1) << U64(width)) - U64(1)
    bit = 0
    j = 0
    for i in range(n):
        v = words[j] >> U64(bit)
        got = 64 - bit
        if got < width:
            v |= words[j + 1] << U64(got)
        out[i] = v & mask
        bit += width
        if bit >= 64:
            bit -= 64
            j += 1


def pack(u: np.ndarray, width: int) -> np.ndarray:
    """Pack uint64 values of at most ``width`` bits (0..64) into uint64 words."""
    out = np.zeros(packed_words(len(u), width), np.uint64)
    _pack(np.ascontiguousarray(u, np.uint64), width, out)
    return out


def unpack(words: np.ndarray, n: int, width: int) -> np.ndarray:
    out = np.empty(n, np.uint64)
    if n and len(words) < packed_words(n, width):
        raise ValueError(f"{len(words)} words cannot hold {n} values of {width} bits")
    _unpack(np.ascontiguousarray(words, np.uint64), n, width, out)
    return out
