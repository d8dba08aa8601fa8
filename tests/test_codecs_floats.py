"""Codec-specific tests of ``xor`` and ``lossy_float`` (scabbard/compression/floats.py).

The shared kit (test_codecs.py) checks the contract; here: the XOR stream against a
slow bit-by-bit reference of the documented layout, its cost on constant and smooth
series, and the lossy codec's rounding, error bound and refusals, against exact
rational arithmetic (``fractions.Fraction``)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from scabbard.compression import CodecError, Unfit, codec_class, codec_from_params
from scabbard.compression.base import Raw
from scabbard.compression.floats import LossyFloat, Xor, quantise

FLOATS = ["float32", "float64"]
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True)


# -- slow references -------------------------------------------------------------------------

def gorilla_reference(bits: list[int], policy: str = "ours") -> bytes:
    """The XOR stream of the module docstring, bit by bit with Python ints.  ``policy``
    picks when a fitting window is reused: "ours" (unless 12+ bits dearer), "gorilla"
    (always), "new" (never) - any choice must decode."""
    stream, pos = 0, 0
    prev, window = 0, None

    def put(value: int, nbits: int) -> None:
        nonlocal stream, pos
        assert 0 <= value < 1 << nbits
        stream |= value << pos
        pos += nbits

    for v in bits:
        x, prev = v ^ prev, v
        if x == 0:
            put(0, 1)
            continue
        lz = 64 - x.bit_length()
        tz = (x & -x).bit_length() - 1
        m = 64 - lz - tz
        fits = window is not None and lz >= window[0] and tz >= window[1]
        if fits and (policy == "gorilla" or (policy == "ours" and window[2] <= m + 12)):
            put(1, 1), put(0, 1), put(x >> window[1], window[2])
        else:
            put(1, 1), put(1, 1), put(lz, 6), put(m - 1, 6), put(x >> tz, m)
            window = (lz, tz, m)
    return stream.to_bytes((pos + 7) // 8, "little")


def bit_list(values: np.ndarray) -> list[int]:
    uint = np.uint32 if values.dtype.itemsize == 4 else np.uint64
    return [int(b) for b in values.view(uint)]


def nearest_float(r: Fraction, dtype: str) -> float:
    """The float of ``dtype`` nearest to the rational ``r`` (ties to an even mantissa)."""
    ftype = np.dtype(dtype).type
    uint = np.uint32 if np.dtype(dtype).itemsize == 4 else np.uint64
    near = ftype(float(r))  # within an ulp or two of the answer
    cands = [near]
    for direction in (np.inf, -np.inf):
        c = near
        for _ in range(2):
            c = np.nextafter(c, ftype(direction))
            cands.append(c)

    def key(c):
        return abs(Fraction(float(c)) - r), int(np.array([c]).view(uint)[0]) & 1

    return float(min(cands, key=key))


def float_arrays(dtype: str, **kw):
    dt = np.dtype(dtype)
    elems = st.floats(width=dt.itemsize * 8, **kw)
    return hnp.arrays(dt, st.integers(0, 200), elements=elems)


# -- xor ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
@SETTINGS
@given(data=st.data())
def test_xor_stream_is_the_documented_layout(dtype, data):
    values = data.draw(st.one_of(float_arrays(dtype),
                                 float_arrays(dtype, min_value=-4, max_value=4, allow_subnormal=False)
                                 .map(lambda a: np.round(a, 1).astype(a.dtype))))
    assert Xor().encode(values).tobytes() == gorilla_reference(bit_list(values))


@pytest.mark.parametrize("policy", ["gorilla", "new"])
@pytest.mark.parametrize("dtype", FLOATS)
@SETTINGS
@given(data=st.data())
def test_xor_decodes_any_window_choice(dtype, policy, data):
    values = data.draw(float_arrays(dtype))
    payload = np.frombuffer(gorilla_reference(bit_list(values), policy), np.uint8)
    got = Xor().decode(payload, len(values), dtype)
    assert got.tobytes() == values.tobytes() and got.dtype == values.dtype


@pytest.mark.parametrize("dtype", FLOATS)
def test_xor_constant_series_costs_one_bit_a_value(dtype):
    n = 10_000
    payload = Xor().encode(np.full(n, 21.37, dtype))
    first = 2 + 12 + (32 if dtype == "float32" else 64)
    assert len(payload) == (first + (n - 1) + 7) // 8


def test_xor_compresses_a_slowly_varying_reading():
    rng = np.random.default_rng(3)
    n = 100_000
    walk = np.round(20 + np.cumsum(rng.choice([-0.01, 0.0, 0.0, 0.01], n)), 2)
    payload = Xor().encode(walk)
    assert 8 * len(payload) / n < 40  # Gorilla's sweet spot: many repeats, close values
    assert Xor().decode(payload, n, "float64").tobytes() == walk.tobytes()


def test_xor_keeps_leading_zeros_beyond_31_and_full_width_xors():
    """LightSaber caps leading zeros at 31 (5 bits); 6-bit fields lose nothing."""
    bits = np.array([0x3FF0000000000000, 0x3FF0000000FF0000, 0x3FF0000000000001,
                     0xBFF0000000000000, 0x7FF0000000000001, 0x8000000000000000,
                     0x0000000000000001, 0xFFFFFFFFFFFFFFFF, 0x0000000000000001], np.uint64)
    values = bits.view(np.float64)
    payload = Xor().encode(values)
    assert Xor().decode(payload, len(values), "float64").view(np.uint64).tolist() == bits.tolist()
    assert payload.tobytes() == gorilla_reference(bits.tolist())


def test_xor_rejects_damaged_streams():
    values = np.linspace(0, 1, 50)
    payload = Xor().encode(values)
    with pytest.raises(CodecError):
        Xor().decode(payload[:-3], 50, "float64")  # runs out
    with pytest.raises(CodecError):
        Xor().decode(np.concatenate([payload, np.zeros(2, np.uint8)]), 50, "float64")
    with pytest.raises(CodecError):
        Xor().decode(np.array([0b01], np.uint8), 1, "float64")  # reuse before any window


def test_xor_refuses_integer_columns():
    with pytest.raises(CodecError):
        Xor().encode(np.arange(4))


# -- lossy_float ------------------------------------------------------------------------------

def exact_round(x: float, decimals: int) -> Fraction:
    return Fraction(x) * 10 ** decimals


@pytest.mark.parametrize("decimals", [0, 2, 3, 12])
@pytest.mark.parametrize("dtype", FLOATS)
@SETTINGS
@given(data=st.data())
def test_lossy_float_rounds_exactly_and_decodes_to_the_nearest_float(dtype, decimals, data):
    """q is a nearest integer of the exact x * 10**d; decoding is q / 10**d rounded once."""
    s = 10 ** decimals
    ftype = np.dtype(dtype).type
    lim = min(1e6, 2.0 ** 52 / s)  # inside the range that fits
    near_ties = st.integers(-int(lim * s) + 1, int(lim * s) - 1).map(lambda k: (k + 0.5) / s)
    elements = st.one_of(st.floats(-lim, lim), near_ties,
                         near_ties.map(lambda v: float(np.nextafter(v, np.inf))),
                         near_ties.map(lambda v: float(np.nextafter(v, -np.inf))))
    values = data.draw(hnp.arrays(np.dtype(dtype), st.integers(1, 40),
                                  elements=elements.map(lambda v: float(ftype(v)))))
    codec = LossyFloat(decimals=decimals, inner=Raw())
    q = quantise(values, decimals)
    for x, qi in zip(values.tolist(), q.tolist(), strict=True):
        assert abs(exact_round(x, decimals) - qi) <= Fraction(1, 2), (x, qi)
    got = codec.decode(codec.encode(values), len(values), dtype)
    assert got.dtype == values.dtype
    for qi, y in zip(q.tolist(), got.tolist(), strict=True):
        assert y == nearest_float(Fraction(qi, s), dtype)


@pytest.mark.parametrize("decimals", [0, 2, 5, 12])
@pytest.mark.parametrize("dtype", FLOATS)
@SETTINGS
@given(data=st.data())
def test_lossy_float_error_bound_holds(dtype, decimals, data):
    ftype = np.dtype(dtype).type
    limit = 2.0 ** 52 / 10 ** decimals  # |q| up to 2**52: decode rounding at its largest
    values = data.draw(hnp.arrays(np.dtype(dtype), st.integers(0, 100), elements=st.floats(
        -limit, limit).map(lambda v: float(ftype(v)))))
    codec = LossyFloat(decimals=decimals)
    got = codec.decode(codec.encode(values), len(values), dtype)
    err = np.abs(got.astype(np.float64) - values.astype(np.float64))
    assert np.all(err <= codec.max_error(dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_lossy_float_bound_is_tight(dtype):
    """Where the floats' spacing is 2**-7 (just over 0.01 / 2), two decimals can cost more
    than 0.005: the bound's second term is needed, and nearly reached."""
    start = 65536.0 if dtype == "float32" else 2.0 ** 45
    values = start + np.arange(20_000) * 2.0 ** -7
    values = values.astype(dtype)
    codec = LossyFloat(decimals=2, inner=Raw())
    got = codec.decode(codec.encode(values), len(values), dtype)
    worst = np.abs(got.astype(np.float64) - values.astype(np.float64)).max()
    bound = codec.max_error(dtype)
    assert 0.005 < worst <= bound and worst >= 0.85 * bound


def test_lossy_float_error_at_ordinary_magnitudes_is_half_a_step():
    rng = np.random.default_rng(5)
    values = rng.uniform(-1000, 1000, 100_000)
    codec = LossyFloat(decimals=3, inner=Raw())
    got = codec.decode(codec.encode(values), len(values), "float64")
    assert np.abs(got - values).max() <= 0.0005 * (1 + 1e-9)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 1e14, -1e14, 3e38])
def test_lossy_float_refuses_what_has_no_exact_integer(dtype, bad):
    codec = LossyFloat(decimals=2, inner=Raw())
    assert codec.specialised
    values = np.array([1.0, 2.0, bad, 3.0], dtype)
    with pytest.raises(Unfit):
        codec.encode(values)


def test_lossy_float_range_edge():
    codec = LossyFloat(decimals=2, inner=Raw())
    below = np.array([(2.0 ** 53 - 2) / 100])  # q just under 2**53
    assert codec.decode(codec.encode(below), 1, "float64")[0] == pytest.approx(below[0])
    with pytest.raises(Unfit):
        codec.encode(np.array([(2.0 ** 53 + 4) / 100]))


def test_lossy_float_parameters_and_inner_codec():
    inner = codec_class("ns_bit")(width=20) if _has("ns_bit") else Raw()
    codec = LossyFloat(decimals=7, inner=inner)
    again = codec_from_params(codec.codec_id, codec.to_params())
    assert again == codec and again.decimals == 7 and again.inner == inner
    assert LossyFloat().inner_codec().name == "base_delta"
    for bad in (-1, 13):
        with pytest.raises(CodecError):
            LossyFloat(decimals=bad)
    with pytest.raises(CodecError):
        LossyFloat(inner=Xor())  # not an integer codec


def test_lossy_float_payload_is_the_inner_codecs():
    values = np.array([1.234, 5.678, -9.5], np.float64)
    codec = LossyFloat(decimals=2, inner=Raw())
    assert codec.encode(values).view(np.int64).tolist() == [123, 568, -950]


def _has(name: str) -> bool:
    try:
        codec_class(name)
    except CodecError:
        return False
    return True
