"""A 64-bit checksum over 8-byte words, in numba (segments and file headers, docs/design.md).

The mixing follows the public xxHash64 design (four lanes over 32-byte stripes,
multiply-rotate rounds, an avalanche at the end).  Each round is a bijection of
the input word for a fixed lane state, and the lane state evolves by bijections,
so any change confined to one word always changes the result; multi-word
damage (torn writes, zero-filled blocks) is caught with probability 1 - 2**-64.
It runs at memory speed (~8 GB/s per core), faster than any disk it guards.
"""

from __future__ import annotations

import numpy as np

from scabbard.kernels._jit import inline, kernel

P1 = np.uint64(0x9E3779B185EBCA87)
P2 = np.uint64(0xC2B2AE3D27D4EB4F)
P3 = np.uint64(0x165667B19E3779F9)
P4 = np.uint64(0x85EBCA77C2B2AE63)
P5 = np.uint64(0x27D4EB2F165667C5)


@inline
def _rotl(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@inline
def _round(acc, w):
    acc = acc + w * P2
    acc = _rotl(acc, 31)
    return acc * P1


@inline
def _merge(h, v):
    h = h ^ _round(np.uint64(0), v)
    return h * P1 + P4


@inline
def _stripes(words, i, end, v1, v2, v3, v4):
    """The four-lane rounds over ``words[i:end]`` (``end - i`` a multiple of 4)."""
    while i < end:
        v1 = _round(v1, words[i])
        v2 = _round(v2, words[i + 1])
        v3 = _round(v3, words[i + 2])
        v4 = _round(v4, words[i + 3])
        i += 4
    return v1, v2, v3, v4


@inline
def _finish(words, i, seed, v1, v2, v3, v4):
    """Merge the lanes (if ``words`` had a stripe), fold in ``words[i:]``, avalanche."""
    n = words.shape[0]
    if n >= 4:
        h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
        h = _merge(h, v1)
        h = _merge(h, v2)
        h = _merge(h, v3)
        h = _merge(h, v4)
    else:
        h = seed + P5
    h = h + np.uint64(n * 8)
    while i < n:
        h = h ^ _round(np.uint64(0), words[i])
        h = _rotl(h, 27) * P1 + P4
        i += 1
    h = h ^ (h >> np.uint64(33))
    h = h * P2
    h = h ^ (h >> np.uint64(29))
    h = h * P3
    h = h ^ (h >> np.uint64(32))
    return h


@kernel
def _checksum(words, seed):
    s = np.uint64(seed)
    stripes = words.shape[0] - words.shape[0] % 4
    v1, v2, v3, v4 = _stripes(words, 0, stripes, s + P1 + P2, s + P2, s, s - P1)
    return _finish(words, stripes, s, v1, v2, v3, v4)


@kernel
def _copy_checksum(src, words, seed):
    """Copy ``src`` (words) to the front of ``words`` and hash ``words``, reading ``src`` once."""
    n = src.shape[0]
    s = np.uint64(seed)
    stripes = words.shape[0] - words.shape[0] % 4
    v1, v2, v3, v4 = s + P1 + P2, s + P2, s, s - P1
    full = min(n, stripes) - min(n, stripes) % 4
    for j in range(full // 4):  # not range(0, full, 4): numba's stepped range halves the speed
        i = 4 * j
        a = src[i]
        b = src[i + 1]
        c = src[i + 2]
        d = src[i + 3]
        words[i] = a
        words[i + 1] = b
        words[i + 2] = c
        words[i + 3] = d
        v1 = _round(v1, a)
        v2 = _round(v2, b)
        v3 = _round(v3, c)
        v4 = _round(v4, d)
    for k in range(full, n):
        words[k] = src[k]
    v1, v2, v3, v4 = _stripes(words, full, stripes, v1, v2, v3, v4)
    return _finish(words, stripes, s, v1, v2, v3, v4)


@kernel
def _copy_add_stripes(src, add, words, at, lanes):
    """Copy ``src + add`` (uint64 words; ``add`` 0: a plain copy) to ``words[at:]`` and fold
    every stripe of four words it completes - counted from ``words[0]`` - into ``lanes`` (the
    four lane states, updated in place): :func:`_copy_checksum` resumed part by part, so that
    a column made of several pieces (a replayed copy's shifted timestamps, a batch across
    copies) is copied and hashed in one pass.  A stripe begun by the part before is finished
    from ``words``, where that part left its first words."""
    n = src.shape[0]
    a = np.uint64(add)
    v1, v2, v3, v4 = lanes[0], lanes[1], lanes[2], lanes[3]
    i = 0
    while i < n and (at + i) % 4 != 0:  # the stripe the part before began
        words[at + i] = src[i] + a
        i += 1
        if (at + i) % 4 == 0 and at % 4 != 0:
            j = at + i - 4
            v1 = _round(v1, words[j])
            v2 = _round(v2, words[j + 1])
            v3 = _round(v3, words[j + 2])
            v4 = _round(v4, words[j + 3])
    first = i
    # a counted loop over views starting at 0 (indices the compiler knows are not negative):
    # twice the speed of a stepped one from an offset
    s4, d4 = src[first:], words[at + first:]
    for j in range((n - first) // 4):
        i = 4 * j
        w1 = s4[i] + a
        w2 = s4[i + 1] + a
        w3 = s4[i + 2] + a
        w4 = s4[i + 3] + a
        d4[i] = w1
        d4[i + 1] = w2
        d4[i + 2] = w3
        d4[i + 3] = w4
        v1 = _round(v1, w1)
        v2 = _round(v2, w2)
        v3 = _round(v3, w3)
        v4 = _round(v4, w4)
    i = first + (n - first) - (n - first) % 4
    while i < n:  # the start of a stripe the next part (or the end) finishes
        words[at + i] = src[i] + a
        i += 1
    lanes[0], lanes[1], lanes[2], lanes[3] = v1, v2, v3, v4


@kernel
def _finish_lanes(words, seed, lanes, done):
    """The checksum of ``words`` whose stripes below word ``done`` were folded into ``lanes``
    (a stripe the padded last word completes is folded here)."""
    stripes = words.shape[0] - words.shape[0] % 4
    v1, v2, v3, v4 = _stripes(words, done, stripes, lanes[0], lanes[1], lanes[2], lanes[3])
    return _finish(words, stripes, np.uint64(seed), v1, v2, v3, v4)


def checksum(buf, seed: int = 0) -> int:
    """Checksum of ``buf`` (bytes-like or array; its length a multiple of 8 bytes)."""
    a = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf
    a = a.reshape(-1).view(np.uint8)
    if a.nbytes % 8:
        raise ValueError(f"checksum needs a multiple of 8 bytes, got {a.nbytes}")
    return int(_checksum(a.view(np.uint64), np.uint64(seed)))


def copy_checksum(src: np.ndarray, dst: np.ndarray, seed: int = 0) -> int:
    """Copy the bytes of ``src`` into ``dst`` (its length ``src``'s rounded up to 8, the rest
    zeroed) and return ``checksum(dst, seed)`` - one pass over memory instead of two."""
    s = src.reshape(-1).view(np.uint8)
    n = s.nbytes
    if dst.nbytes != -(-n // 8) * 8:
        raise ValueError(f"destination of {dst.nbytes} bytes for {n} source bytes")
    whole = n - n % 8
    if whole < n:  # the last, partial word: its bytes, then zeros
        dst[whole:] = 0
        dst[whole:n] = s[whole:]
    return int(_copy_checksum(s[:whole].view(np.uint64), dst.view(np.uint64), np.uint64(seed)))


def copy_checksum_parts(parts, dst: np.ndarray, seed: int = 0) -> int:
    """:func:`copy_checksum` of a column given in pieces: ``parts`` is ``[(array, add)]``,
    the column being the arrays one after the other with ``add`` added to each value of its
    array (a replayed copy's timestamp shift; 0 for anything else).  Copied into ``dst`` and
    hashed in one pass where every piece but the last fills whole 8-byte words (and ``add``
    applies to 8-byte integers only); otherwise copied, then hashed."""
    srcs = [(p.reshape(-1).view(np.uint8), int(add), p.dtype.itemsize) for p, add in parts]
    n = sum(s.nbytes for s, _, _ in srcs)
    if dst.nbytes != -(-n // 8) * 8:
        raise ValueError(f"destination of {dst.nbytes} bytes for {n} source bytes")
    if any(add and size != 8 for _, add, size in srcs):
        raise ValueError("a shift applies to 8-byte integer columns only")
    if len(srcs) == 1 and not srcs[0][1]:
        return copy_checksum(srcs[0][0], dst, seed)
    if any(s.nbytes % 8 for s, _, _ in srcs[:-1]):  # a piece ends inside a word: two passes
        at = 0
        for s, add, _ in srcs:
            out = dst[at:at + s.nbytes]
            if add:
                np.add(s.view(np.int64), add, out=out.view(np.int64))
            else:
                out[:] = s
            at += s.nbytes
        dst[at:] = 0
        return checksum(dst, seed)
    words = dst.view(np.uint64)
    sd = np.uint64(seed)
    with np.errstate(over="ignore"):  # the lanes' start wraps, as in the kernels
        lanes = np.array([sd + P1 + P2, sd + P2, sd, sd - P1], np.uint64)
    at = 0
    for s, add, _ in srcs:
        whole = s.nbytes - s.nbytes % 8
        _copy_add_stripes(s[:whole].view(np.uint64), np.uint64(add % (1 << 64)), words,
                          at // 8, lanes)
        if whole < s.nbytes:  # the last piece's partial word: its bytes, then zeros
            dst[at + whole:] = 0
            dst[at + whole:at + s.nbytes] = s[whole:]
        at += s.nbytes
    done = (n // 8) - (n // 8) % 4  # stripes the whole words completed
    return int(_finish_lanes(words, sd, lanes, done))


@kernel
def _first_failing(words, starts, avail, expect, widths):
    """The first of the segments at word ``starts[i]`` of ``words`` (each ``avail[i]`` words
    long) whose header or payload does not verify, or ``len(starts)``: the checks of
    :func:`scabbard.storage.segment.decode` but the codecs', in one call (the header's
    fields by their 8-byte word, as that module's docstring lays them out).  ``expect``:
    the magic, the fingerprint's two words, the version, the fixed part's words;
    ``widths``: each column's bytes a row."""
    magic, fp0, fp1 = expect[0], expect[1], expect[2]
    version, fixed = np.int64(expect[3]), np.int64(expect[4])
    ncols = widths.shape[0]
    for i in range(starts.shape[0]):
        w, end = starts[i], avail[i]
        if end < fixed or words[w] != magic:
            return i
        h1 = words[w + 1]
        if np.int64(h1 & np.uint64(0xFFFF)) != version:
            return i
        hlen = np.int64(h1 >> np.uint64(32)) // 8  # header words (a multiple of 8 bytes)
        nc = np.int64(words[w + 2] >> np.uint64(32))
        meta = np.int64(words[w + 15] & np.uint64(0xFFFFFFFF))
        if nc != ncols or meta % 8 or hlen * 8 != np.int64(h1 >> np.uint64(32)) \
                or hlen != fixed + 6 * nc + meta // 8 or hlen > end:
            return i
        head = words[w:w + hlen].copy()
        head[13] = np.uint64(0)
        if _checksum(head, np.uint64(0)) != words[w + 13]:
            return i
        payload, seglen = np.int64(words[w + 9]), np.int64(words[w + 10])
        if words[w + 11] != fp0 or words[w + 12] != fp1 or payload % 8 \
                or seglen < hlen * 8 + payload or hlen * 8 + payload > end * 8:
            return i
        count = np.int64(words[w + 5])
        pos, total, d = w + hlen, 0, np.uint64(0)
        for j in range(nc):
            if np.int64(words[w + fixed + 6 * j + 1]) != count * widths[j]:  # raw length
                return i
            n = (np.int64(words[w + fixed + 6 * j + 2]) + 7) // 8  # stored, padded to a word
            total += n
            if total * 8 > payload:
                return i
            d = _checksum(words[pos:pos + n], d)
            pos += n
        if total * 8 != payload or d != words[w + 14]:
            return i
    return starts.shape[0]


def first_failing(words: np.ndarray, starts: np.ndarray, avail: np.ndarray, fixed: int,
                  fingerprint: bytes, widths: np.ndarray, magic: bytes, version: int) -> int:
    """:func:`_first_failing`'s checked wrapper (``fingerprint``, ``magic``: the header's raw
    16 and 8 bytes)."""
    if not (isinstance(words, np.ndarray) and words.dtype == np.uint64 and words.ndim == 1):
        raise ValueError("words must be a uint64 vector")
    starts = np.ascontiguousarray(starts, np.int64)
    avail = np.ascontiguousarray(avail, np.int64)
    if len(starts) != len(avail) or (len(starts) and (starts.min() < 0 or avail.min() < 0
                                                      or (starts + avail).max() > len(words))):
        raise ValueError("every segment must lie inside words")
    if len(fingerprint) != 16 or len(magic) != 8:
        raise ValueError("a 16-byte fingerprint and an 8-byte magic")
    expect = np.array([*np.frombuffer(magic + fingerprint, np.uint64), version, fixed],
                      np.uint64)
    return int(_first_failing(words, starts, avail, expect,
                              np.ascontiguousarray(widths, np.int64)))
