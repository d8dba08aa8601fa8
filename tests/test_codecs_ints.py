"""Integer codecs (scabbard/compression/ints.py, varlen.py, rle.py): byte-exact against slow pure-Python
references of the payload layouts, hand-computed sizes, specialisation (Unfit exactly
when a value breaks the assumption), damaged payloads, and one kernel signature each.

The references below know only the layouts in the module docstring; they share no code
with the kernels (STYLE.md rule 2 - they would move to tests/reference.py)."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from scabbard.compression import (
    CodecError,
    Unfit,
    _bits,
    _intcore,
    codec_from_params,
    ints,
    rle,
    varlen,
)
from scabbard.compression.base import FLOAT, Codec
from scabbard.compression.ints import (
    BaseDelta,
    Delta,
    DeltaOfDelta,
    NullSuppressionBit,
    NullSuppressionByte,
)
from scabbard.compression.rle import RunLength
from scabbard.compression.varlen import Simple8b, VarByte

M64 = (1 << 64) - 1
INT_DTYPES = ["int32", "int64", "uint32"]
SEEDED = settings(max_examples=50, deadline=None, derandomize=True)


# -- slow references of the payload layouts ----------------------------------------------------
def signed64(x: int) -> int:
    x &= M64
    return x - (1 << 64) if x >> 63 else x


def code(v: int, dtype: str) -> int:
    """Zigzag for signed columns, the value itself for uint32."""
    return v if dtype == "uint32" else ((v << 1) ^ (v >> 63)) & M64


def uncode(c: int, dtype: str) -> int:
    return c if dtype == "uint32" else (c >> 1) ^ -(c & 1)


class Bits:
    """An LSB-first bit stream in little-endian 64-bit words, one bit at a time."""

    def __init__(self):
        self.acc, self.n = 0, 0

    def put(self, value: int, width: int) -> None:
        for b in range(width):
            self.acc |= ((value >> b) & 1) << self.n
            self.n += 1

    def words(self) -> bytes:
        return self.acc.to_bytes((self.n + 63) // 64 * 8, "little")


def ref_ns_bit(codes: list[int]) -> bytes:
    w = max(codes).bit_length()
    s = Bits()
    for c in codes:
        s.put(c, w)
    return bytes([w]) + bytes(7) + s.words()


def ref_base_delta(vals: list[int]) -> bytes:
    base = min(vals)
    w = (max(vals) - base).bit_length()
    s = Bits()
    for v in vals:
        s.put(v - base, w)
    return bytes([w]) + bytes(7) + base.to_bytes(8, "little", signed=True) + s.words()


def ref_ns_byte(codes: list[int]) -> bytes:
    k = next(k for k in (1, 2, 4, 8) if max(codes) < 1 << (8 * k))
    return bytes([k]) + bytes(7) + b"".join(c.to_bytes(k, "little") for c in codes)


def ref_varbyte(codes: list[int]) -> bytes:
    out = bytearray()
    for c in codes:
        while c >= 0x80:
            out.append(c & 0x7F | 0x80)
            c >>= 7
        out.append(c)
    return bytes(out)


DOD_BUCKETS = [(0, "0"), (3, "10"), (7, "110"), (12, "1110"), (32, "11110"), (64, "11111")]


def ref_dod(vals: list[int]) -> bytes:
    s = Bits()
    prev, pdelta = vals[0] & M64, 0
    for v in vals[1:]:
        d = (v - prev) & M64
        c = code(signed64(d - pdelta), "int64")
        prev, pdelta = v & M64, d
        width, prefix = next((w, p) for w, p in DOD_BUCKETS if c.bit_length() <= w)
        for bit in prefix:
            s.put(int(bit), 1)
        s.put(c, width)
    return vals[0].to_bytes(8, "little", signed=True) + (s.words() if s.n else b"")


def ref_delta(vals: list[int]) -> bytes:
    codes = [code(signed64(v - u), "int64") for u, v in zip(vals, vals[1:], strict=False)]
    blocks = [codes[k:k + 128] for k in range(0, len(codes), 128)]
    widths = [max(b).bit_length() for b in blocks]
    out = vals[0].to_bytes(8, "little", signed=True) + bytes(widths) + bytes(-len(widths) % 8)
    for b, w in zip(blocks, widths, strict=True):
        s = Bits()
        for c in b:
            s.put(c, w)
        out += s.words() if w else b""
    return out


S8 = [(60, 1), (30, 2), (20, 3), (15, 4), (12, 5), (10, 6), (8, 7), (7, 8), (6, 10), (5, 12),
      (4, 15), (3, 20), (2, 30), (1, 60)]  # selectors 2..15


def ref_simple8b(codes: list[int]) -> bytes:
    """Per word: >= 60 zeros -> a run word; a code over 60 bits -> a raw run; else the
    densest selector whose next values (as many as are left, at most its count) fit."""
    words, i, n = [], 0, len(codes)
    while i < n:
        z = 0
        while i + z < n and codes[i + z] == 0:
            z += 1
        r = 0
        while i + r < n and codes[i + r].bit_length() > 60:
            r += 1
        if z >= 60:
            words.append(1 << 60 | z)
            i += z
        elif r:
            words += [r, *codes[i:i + r]]
            i += r
        else:
            sel, (count, bits) = next((s, cb) for s, cb in enumerate(S8, 2)
                                      if all(c.bit_length() <= cb[1]
                                             for c in codes[i:i + cb[0]]))
            word = sel << 60
            for t, c in enumerate(codes[i:i + count]):
                word |= c << (t * bits)
            words.append(word)
            i += min(count, n - i)
    return b"".join(w.to_bytes(8, "little") for w in words)


def ref_rle(codec: RunLength, values: np.ndarray) -> bytes:
    bits = values.view(f"<i{values.itemsize}").tolist()
    run_values, lengths = [bits[0]], [0]
    for b in bits[1:]:
        if b == run_values[-1]:
            lengths[-1] += 1
        else:
            run_values.append(b)
            lengths.append(0)
    inner, inner_dtype = codec._inner_for(values.dtype.name)
    stored = np.array(run_values, f"<i{values.itemsize}").view(values.dtype)
    held = inner.encode(stored.view(inner_dtype)).tobytes()
    head = len(run_values).to_bytes(8, "little") + len(held).to_bytes(8, "little")
    return head + held + bytes(-len(held) % 8) + ref_ns_bit(lengths)


def reference(codec: Codec, values: np.ndarray) -> bytes:
    if not len(values):
        return b""
    vals = [int(x) for x in values] if values.dtype.kind in "iu" else None
    dtype = values.dtype.name
    codes = [code(v, dtype) for v in vals] if vals is not None else None
    return {BaseDelta: lambda: ref_base_delta(vals), DeltaOfDelta: lambda: ref_dod(vals),
            Delta: lambda: ref_delta(vals),
            NullSuppressionBit: lambda: ref_ns_bit(codes),
            NullSuppressionByte: lambda: ref_ns_byte(codes),
            Simple8b: lambda: ref_simple8b(codes), VarByte: lambda: ref_varbyte(codes),
            RunLength: lambda: ref_rle(codec, values)}[type(codec)]()


# -- inputs ------------------------------------------------------------------------------------
def int_columns(dtype: str, max_size: int = 400):
    dt = np.dtype(dtype)
    ii = np.iinfo(dt)
    any_value = st.integers(int(ii.min), int(ii.max))
    small = st.integers(max(int(ii.min), -40), 40)
    runs = st.lists(st.tuples(st.one_of(small, any_value), st.integers(1, 150)), max_size=12)
    return st.one_of(
        hnp.arrays(dt, st.integers(0, max_size), elements=any_value),
        hnp.arrays(dt, st.integers(0, max_size), elements=small),
        hnp.arrays(dt, st.integers(0, max_size),
                   elements=st.sampled_from([0, 0, 0, 1, int(ii.max), int(ii.min)])),
        runs.map(lambda rs: np.array([v for v, k in rs for _ in range(k)], dt)),
        st.lists(st.integers(-3, 3), max_size=max_size).map(
            lambda d: (np.cumsum(np.array(d, np.int64)) + 10**6 * 3).astype(dt)))


GENERIC = [BaseDelta(), DeltaOfDelta(), Delta(), NullSuppressionBit(), NullSuppressionByte(), Simple8b(),
           VarByte(), RunLength(), RunLength(inner=Simple8b()), RunLength(inner=VarByte())]


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("codec", GENERIC, ids=str)
@SEEDED
@given(data=st.data())
def test_payload_is_the_reference_layout_and_decodes(codec, dtype, data):
    values = data.draw(int_columns(dtype))
    payload = codec.encode(values)
    assert payload.tobytes() == reference(codec, values)
    got = codec.decode(payload.copy(), len(values), dtype)
    assert got.dtype == values.dtype and np.array_equal(got, values)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@SEEDED
@given(data=st.data())
def test_rle_of_floats_is_the_reference_layout(dtype, data):
    dt = np.dtype(dtype)
    bits = data.draw(int_columns("int32" if dt.itemsize == 4 else "int64"))
    values = bits.view(dt)  # every bit pattern: NaN payloads, -0.0, subnormals
    codec = RunLength()
    payload = codec.encode(values)
    assert payload.tobytes() == reference(codec, values)
    got = codec.decode(payload, len(values), dtype)
    assert np.array_equal(got.view(bits.dtype), bits)


# -- the fast bit width (_bits.bit_width is one ctlz now) -------------------------------------
@SEEDED
@given(hnp.arrays(np.uint64, st.integers(1, 50)))
def test_max_bits_is_the_bit_length_of_the_largest(u):
    assert _bits.max_bits(u) == int(u.max()).bit_length()


# -- delta-of-delta ----------------------------------------------------------------------------
def test_regular_timestamps_cost_one_bit_a_value():
    n = 100_000
    ts = 1_700_000_000_000 + 10 * np.arange(n, dtype=np.int64)
    payload = DeltaOfDelta().encode(ts)
    # first value, then the first delta (10: zigzag 20, '110' + 7 bits), then n-2 zero bits
    assert payload.nbytes == 8 + 8 * -(-(10 + n - 2) // 64)
    assert payload.nbytes * 8 / n < 1.01


@pytest.mark.parametrize("vals,bits", [
    ([5], 0),
    ([0, 1, 2, 3], 5 + 1 + 1),  # dod 1 (zigzag 2: '10' + 3), then 0, 0
    ([0, 3, 3], 5 + 5),  # dods 3 (zigzag 6), -3 (zigzag 5)
    ([0, 100, 100], 16 + 16),  # dods 100, -100: zigzag 200, 199 take the 12-bit bucket
    ([0, 1000], 16),
    ([0, 1 << 20], 37),
    ([0, 1 << 40], 69),
    ([np.iinfo(np.int64).max, np.iinfo(np.int64).min], 5),  # the delta wraps to +1
])
def test_delta_of_delta_bucket_sizes(vals, bits):
    v = np.array(vals, np.int64)
    payload = DeltaOfDelta().encode(v)
    assert payload.nbytes == 8 + 8 * -(-bits // 64)
    assert np.array_equal(DeltaOfDelta().decode(payload, len(v), "int64"), v)


def test_delta_of_delta_wraps_consistently_at_the_int64_extremes():
    ii = np.iinfo(np.int64)
    v = np.array([ii.max, ii.min, ii.max, ii.min, 0, ii.min, -1, ii.max, ii.max], np.int64)
    assert np.array_equal(DeltaOfDelta().decode(DeltaOfDelta().encode(v), len(v), "int64"), v)


# -- null suppression and base-delta: minimal widths, Unfit exactly past the width ------------
# -- deltas in blocks ----------------------------------------------------------------------------
def test_a_blocks_width_is_its_own_widest_step():
    """The first value, one width byte per block of 128 steps, each block at its width."""
    steps = np.r_[np.full(128, 3), np.full(128, -1000), np.zeros(128, np.int64), [7]]
    v = np.cumsum(np.r_[[42], steps]).astype(np.int64)
    payload = Delta().encode(v)
    # zigzag 6 -> 3 bits, 1999 -> 11 bits, 0 -> 0 bits (no words), 14 -> 4 bits
    assert payload[8:12].tolist() == [3, 11, 0, 4]
    assert payload.nbytes == 8 + 8 + 8 * (2 * 3 + 2 * 11 + 0 + 1)
    assert np.array_equal(Delta().decode(payload, len(v), "int64"), v)


def test_a_random_walk_costs_its_steps_not_its_range_or_their_changes():
    """SM's power readings wander (steps of sd ~20): block deltas beat both delta-of-delta
    (the change of the steps is wider than the steps) and base-delta (the batch's range)."""
    walk = (13_000 + np.cumsum(np.random.default_rng(4).normal(0, 20, 1 << 16))).astype(np.int32)
    bits = {c.name: c.encode(walk).nbytes * 8 / len(walk)
            for c in (Delta(), DeltaOfDelta(), BaseDelta())}
    assert bits["delta"] < 8 < bits["delta_of_delta"] and bits["delta"] < bits["base_delta"] - 4


@pytest.mark.parametrize("dtype", INT_DTYPES)
@SEEDED
@given(data=st.data())
def test_generic_widths_are_minimal(dtype, data):
    values = data.draw(int_columns(dtype).filter(len))
    codes = [code(int(v), dtype) for v in values]
    need = max(codes).bit_length()
    assert NullSuppressionBit().encode(values)[0] == need
    assert NullSuppressionByte().encode(values)[0] == next(k for k in (1, 2, 4, 8)
                                                           if need <= 8 * k)
    lo, hi = int(values.min()), int(values.max())
    p = BaseDelta().encode(values)
    assert p[0] == (hi - lo).bit_length() and p[8:16].view(np.int64)[0] == lo


@pytest.mark.parametrize("dtype", INT_DTYPES)
@SEEDED
@given(data=st.data(), width=st.integers(1, 64))
def test_specialised_codecs_refuse_exactly_what_does_not_fit(dtype, width, data):
    values = data.draw(int_columns(dtype, 60).filter(len))
    codes = [code(int(v), dtype) for v in values]
    nbytes = {1: 1, 2: 2, 3: 4, 4: 4}.get(-(-width // 8), 8)
    cases = [(NullSuppressionBit(width=width), max(codes).bit_length() > width),
             (NullSuppressionByte(nbytes=nbytes), max(codes).bit_length() > 8 * nbytes),
             (BaseDelta(width=width), (int(values.max()) - int(values.min())).bit_length()
              > width)]
    for codec, unfit in cases:
        assert codec.specialised
        if unfit:
            with pytest.raises(Unfit):
                codec.encode(values)
        else:
            got = codec.decode(codec.encode(values), len(values), dtype)
            assert np.array_equal(got, values)


def test_specialised_widths_are_stored_and_the_generic_codecs_never_refuse():
    v = np.array([3, 1, 2], np.int32)
    assert NullSuppressionBit(width=12).encode(v)[0] == 12
    assert NullSuppressionByte(nbytes=4).encode(v)[0] == 4
    assert BaseDelta(width=7).encode(v)[0] == 7
    for c in (NullSuppressionBit(), NullSuppressionByte(), BaseDelta(), RunLength()):
        assert not c.specialised
    assert RunLength(inner=NullSuppressionBit(width=3)).specialised
    with pytest.raises(Unfit):
        RunLength(inner=NullSuppressionBit(width=3)).encode(np.array([1, 1, 300], np.int64))


def test_uint32_is_not_zigzagged():
    v = np.array([0, 255, 2**32 - 1], np.uint32)
    assert NullSuppressionBit().encode(v)[0] == 32
    assert NullSuppressionByte().encode(v[:2])[0] == 1
    assert VarByte().encode(v[:2]).nbytes == 1 + 2


@pytest.mark.parametrize("kwargs", [{"width": 65}, {"width": -1}])
def test_bad_parameters_are_refused(kwargs):
    for cls in (NullSuppressionBit, BaseDelta):
        with pytest.raises(CodecError):
            cls(**kwargs)
    with pytest.raises(CodecError):
        NullSuppressionByte(nbytes=3)


# -- Simple-8b: sizes by hand (int64 codes are zigzag: v >= 0 -> 2v) ---------------------------
@pytest.mark.parametrize("vals,words,selectors", [
    ([0] * 240, 1, [1]),  # a zero run
    ([0] * 60, 1, [1]),  # the shortest run word (a 60x1 word would do as well)
    ([0] * 59, 1, [2]),  # too short for a run word: 60x1 with one pad
    ([0] * 1000 + [1], 2, [1, 3]),  # the lone 1 (code 2): the last word, 30x2 padded
    ([-1] * 60, 1, [2]),  # code 1: 60x1
    ([-1] * 61, 2, [2, 2]),
    ([1] * 30, 1, [3]),  # code 2: 30x2
    ([-1] * 10 + [31], 2, [7, 7]),  # 11 codes need 6 bits (code 62): 10x6 takes 10
    ([500] * 5, 1, [10]),  # code 1000: 10 bits -> 6x10 holds the 5, padded
    ([1 << 61], 2, [0]),  # 62-bit code: a raw run
    ([1 << 61, -(1 << 62), 1 << 61], 4, [0]),
    ([1 << 61, 0, 1 << 61], 5, [0, 15, 0]),
    ([2 ** 29 - 1, 2 ** 29 - 1, 1], 2, [14, 3]),  # 30-bit codes: 2x30, then the tail
])
def test_simple8b_sizes_by_hand(vals, words, selectors):
    v = np.array(vals, np.int64)
    p = Simple8b().encode(v)
    assert p.nbytes == 8 * words
    w = p.view(np.uint64)
    heads = [int(x) >> 60 for x in w]
    raw = [False] * len(w)
    for j, x in enumerate(w):  # skip the raw words after a selector-0 word
        if not raw[j] and int(x) >> 60 == 0:
            for k in range(1, int(x) + 1):
                raw[j + k] = True
    assert [h for h, r in zip(heads, raw, strict=True) if not r] == selectors
    assert np.array_equal(Simple8b().decode(p, len(v), "int64"), v)


def test_simple8b_packs_small_random_ints_five_to_a_word():
    v = np.random.default_rng(3).integers(512, 1001, 10_000)  # codes 1024..2000: 11 bits
    assert Simple8b().encode(v).nbytes == 8 * 2000


# -- Var-Byte ----------------------------------------------------------------------------------
@pytest.mark.parametrize("value,dtype,nbytes", [
    (0, "uint32", 1), (127, "uint32", 1), (128, "uint32", 2), (2**14 - 1, "uint32", 2),
    (2**14, "uint32", 3), (2**32 - 1, "uint32", 5),
    (-1, "int64", 1), (63, "int64", 1), (64, "int64", 2), (-64, "int64", 1), (-65, "int64", 2),
    (np.iinfo(np.int64).min, "int64", 10), (np.iinfo(np.int64).max, "int64", 10),
    (np.iinfo(np.int32).min, "int32", 5),
])
def test_varbyte_bytes_per_magnitude(value, dtype, nbytes):
    v = np.array([value] * 3, dtype)
    p = VarByte().encode(v)
    assert p.nbytes == 3 * nbytes
    assert all(b & 0x80 for b in p[:nbytes - 1]) and p[nbytes - 1] < 0x80
    assert np.array_equal(VarByte().decode(p, 3, dtype), v)


# -- run-length --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [*INT_DTYPES, "float32", "float64"])
def test_rle_of_long_runs_is_much_smaller_than_raw(dtype):
    v = np.repeat(np.arange(20), 5000).astype(dtype)
    p = RunLength().encode(v)
    assert p.nbytes < 400 and v.nbytes / p.nbytes > 1000  # 20 runs: float64 bits take 62
    assert np.array_equal(RunLength().decode(p, len(v), dtype), v)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1 << 40), st.integers(1, 3000)), min_size=1,
                max_size=60), st.integers(-(1 << 20), 1 << 20))
def test_rle_of_an_ordered_column_galloped_is_the_scanned_encoding(runs, shift):
    """Event times in order: the runs found by galloping (``ordered=True``) are the scan's,
    byte for byte - long runs and short ones (where galloping gives way to the scan)."""
    v = np.sort(np.repeat([x for x, _ in runs], [n for _, n in runs])).astype(np.int64)
    ordered = RunLength().encode(v, shift, ordered=True)
    assert np.array_equal(ordered, RunLength().encode(v, shift))
    assert np.array_equal(RunLength().decode(ordered, len(v), "int64"), v + shift)


def test_rle_told_a_column_is_ordered_where_a_run_is_followed_by_less_scans_it():
    """A column said to be in order whose run is followed by a smaller value (a source's
    check gone wrong) is scanned: encoded as it is, not as the galloping saw it."""
    from scabbard.compression.rle import _find_sorted_runs, non_decreasing, sorted_runs_cap

    v = np.concatenate([np.full(5000, 7), np.full(5000, 3), np.full(5000, 9)]).astype(np.int64)
    cap = sorted_runs_cap(len(v))
    assert _find_sorted_runs(v, np.empty(cap, np.int64), np.empty(cap, np.int64)) == -2
    p = RunLength().encode(v, ordered=True)
    assert np.array_equal(RunLength().decode(p, len(v), "int64"), v)
    assert not non_decreasing(v) and non_decreasing(np.sort(v)) and non_decreasing(v[:1])
    assert _find_sorted_runs(np.sort(v), np.empty(cap, np.int64), np.empty(cap, np.int64)) == 3


def test_rle_runs_are_bit_patterns():
    nan_a = np.array([0x7FF8000000000001], np.uint64).view(np.float64)[0]
    nan_b = np.array([0x7FF8000000000002], np.uint64).view(np.float64)[0]
    v = np.array([0.0, -0.0, nan_a, nan_a, nan_b, 1.0, 1.0], np.float64)
    p = RunLength().encode(v)
    assert int(p[:8].view(np.uint64)[0]) == 5  # 0.0 | -0.0 | nan_a nan_a | nan_b | 1.0 1.0
    got = RunLength().decode(p, len(v), "float64")
    assert np.array_equal(got.view(np.uint64), v.view(np.uint64))


class _FloatsSeen(Codec):
    """A raw float codec that records the dtypes it is given (not registered)."""

    codec_id = 0xFFF0
    name = "floats_seen"
    accepts = FLOAT
    seen: list = []

    def encode(self, values):
        self.seen.append(values.dtype.name)
        return np.ascontiguousarray(values).view(np.uint8).copy()

    def decode(self, payload, count, dtype):
        return payload.view(dtype)[:count].copy()


def test_rle_hands_floats_to_an_inner_codec_that_takes_them():
    inner = _FloatsSeen()
    v = np.array([1.5, 1.5, -0.0, np.inf], np.float32)
    codec = RunLength(inner=inner)
    got = codec.decode(codec.encode(v), 4, "float32")
    assert inner.seen[-1] == "float32" and np.array_equal(got.view(np.uint32), v.view(np.uint32))
    with pytest.raises(CodecError):
        codec.encode(np.array([1, 2], np.int64))  # the inner codec takes neither ints nor bits


def test_rle_params_keep_the_inner_codec():
    for codec in RunLength.examples():
        assert codec_from_params(codec.codec_id, codec.to_params()) == codec


# -- damaged payloads: a CodecError, never a crash or a wrong-length column -------------------
ALL = [c for cls in (BaseDelta, DeltaOfDelta, Delta, NullSuppressionBit, NullSuppressionByte, Simple8b,
                     VarByte, RunLength) for c in cls.examples()]


@pytest.mark.parametrize("codec", ALL, ids=str)
@SEEDED
@given(data=st.data())
def test_damaged_payloads_raise_codec_error(codec, data):
    values = data.draw(int_columns("int64", 200).filter(len))
    try:
        payload = codec.encode(values)
    except Unfit:
        return
    how = data.draw(st.sampled_from(["cut", "flip", "junk"]))
    if how == "cut":
        payload = payload[:data.draw(st.integers(0, max(0, payload.nbytes - 1)))]
    elif how == "flip" and payload.nbytes:
        payload = payload.copy()
        payload[data.draw(st.integers(0, payload.nbytes - 1))] ^= 1 << data.draw(
            st.integers(0, 7))
    else:
        payload = np.frombuffer(data.draw(st.binary(max_size=300)), np.uint8)
    count = data.draw(st.sampled_from([len(values), len(values) + 1, 1]))
    try:
        got = codec.decode(payload, count, "int64")
    except CodecError:
        return
    assert got.shape == (count,) and got.dtype == np.int64


@pytest.mark.parametrize("codec", ALL, ids=str)
def test_unaligned_readonly_payloads_decode(codec):
    v = (np.arange(1000, dtype=np.int64) // 7) * 3 - 400
    try:
        p = codec.encode(v)
    except Unfit:
        return
    buf = np.zeros(p.nbytes + 3, np.uint8)
    buf[3:] = p
    odd = buf[3:]
    odd.flags.writeable = False
    assert np.array_equal(codec.decode(odd, len(v), "int64"), v)


def test_every_kernel_compiles_one_signature():
    """Narrow columns are widened in Python: a cold numba cache compiles each kernel once.
    (400 distinct values: run-length encoding gives up its one-pass search for long runs and
    counts them - every kernel runs, whatever ran before in this process.)"""
    for dtype in [*INT_DTYPES, "float32", "float64"]:
        v = np.arange(400).astype(dtype)
        for c in ALL:
            if dtype in c.accepts:
                with contextlib.suppress(Unfit):
                    c.decode(c.encode(v), len(v), dtype)
    for w in (np.arange(400), np.repeat(np.arange(4), 1000)):  # ordered: too short, galloped
        ordered = RunLength().encode(w, ordered=True)
        assert np.array_equal(RunLength().decode(ordered, len(w), "int64"), w)
        assert rle.non_decreasing(w) and rle.non_decreasing(w.astype(np.int32))
    kernels = [f for m in (_intcore, ints, varlen, rle) for f in vars(m).values()
               if hasattr(f, "signatures") and f.targetoptions.get("inline") != "always"]
    kernels = list({id(f): f for f in kernels}.values())  # imported names counted once
    assert len(kernels) >= 10
    assert all(len(f.signatures) == 1 for f in kernels), {
        f.py_func.__name__: f.signatures for f in kernels if len(f.signatures) != 1}
