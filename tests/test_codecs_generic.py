"""Codec-specific tests of ``dictionary``, ``snappy`` and ``lz4`` (compression/generic.py).

The shared kit (test_codecs.py) checks the contract; here: the dictionary payload
against a slow reference built with a Python dict, its size on few distinct values,
uuids and bit-pattern equality of floats, table growth, the specialised variant's
refusal, and what the library codecs do with repetitive and damaged input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from scabbard.compression import CodecError, Unfit, codec_from_params
from scabbard.compression.base import column_shape, numpy_dtype
from scabbard.compression.generic import Dictionary, Lz4, Snappy

DTYPES = ["int32", "int64", "uint32", "float32", "float64", "uuid"]
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True)


# -- slow reference ----------------------------------------------------------------------------

def dictionary_reference(values: np.ndarray) -> bytes:
    """The documented payload: u32 d, the distinct values in order of first appearance,
    then the codes LSB-first at bit_width(d - 1) bits - with a dict and Python ints."""
    raw = np.ascontiguousarray(values).tobytes()
    size = values.dtype.itemsize * (2 if values.ndim == 2 else 1)
    rows = [raw[i:i + size] for i in range(0, len(raw), size)]
    code_of: dict[bytes, int] = {}
    codes = [code_of.setdefault(r, len(code_of)) for r in rows]
    width = max(len(code_of) - 1, 0).bit_length()
    stream = sum(c << (i * width) for i, c in enumerate(codes))
    return (len(code_of).to_bytes(4, "little") + b"".join(code_of)
            + stream.to_bytes((len(codes) * width + 7) // 8, "little"))


def columns(dtype: str, max_size: int = 300):
    dt = numpy_dtype(dtype)
    n = st.integers(0, max_size)
    if dtype == "uuid":
        few = st.integers(0, 3).map(np.uint64)
        return hnp.arrays(dt, n.map(lambda k: (k, 2)), elements=few)
    if dt.kind == "f":
        anything = hnp.arrays(dt, n, elements=st.floats(width=dt.itemsize * 8))
        few = hnp.arrays(dt, n, elements=st.sampled_from([0.0, -0.0, 1.5, np.nan, np.inf]))
        return st.one_of(anything, few)
    info = np.iinfo(dt)
    anything = hnp.arrays(dt, n, elements=st.integers(int(info.min), int(info.max)))
    few = hnp.arrays(dt, n, elements=st.integers(0, 20))
    return st.one_of(anything, few)


# -- dictionary --------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@SETTINGS
@given(data=st.data())
def test_dictionary_payload_is_the_documented_layout(dtype, data):
    values = data.draw(columns(dtype))
    payload = Dictionary().encode(values)
    assert payload.tobytes() == dictionary_reference(values)
    got = Dictionary().decode(payload, len(values), dtype)
    assert got.shape == column_shape(dtype, len(values)) and got.tobytes() == values.tobytes()


@pytest.mark.parametrize("dtype", ["int32", "int64", "float64"])
def test_dictionary_of_ten_values_takes_four_bits_a_value_plus_the_table(dtype):
    rng = np.random.default_rng(11)
    n = 10_000
    values = rng.choice(np.array([3, -7, 12, 99, 0, 5, 42, 1000, -1, 8]), n).astype(dtype)
    payload = Dictionary().encode(values)
    table = 4 + 10 * np.dtype(dtype).itemsize
    assert len(payload) == table + n * 4 // 8
    assert Dictionary().decode(payload, n, dtype).tobytes() == values.tobytes()


def test_dictionary_of_one_value_stores_no_codes():
    payload = Dictionary().encode(np.full(5000, 7, np.int64))
    assert len(payload) == 4 + 8
    assert Dictionary().decode(payload, 5000, "int64").tolist() == [7] * 5000


def test_dictionary_on_uuids_compares_both_words():
    rng = np.random.default_rng(2)
    top = np.uint64(0xFFFFFFFFFFFFFFFF)
    pool = np.array([[1, 2], [2, 1], [1, 3], [top, 0], [0, top], [top, top]], np.uint64)
    values = pool[rng.integers(0, len(pool), 4000)]
    payload = Dictionary().encode(values)
    assert int(payload[:4].view("<u4")[0]) == len(pool)
    assert len(payload) == 4 + 16 * len(pool) + 4000 * 3 // 8
    got = Dictionary().decode(payload, len(values), "uuid")
    assert got.shape == (4000, 2) and np.array_equal(got, values)


def test_dictionary_tells_floats_apart_by_bit_pattern():
    nans = np.array([0x7FF8000000000000, 0x7FF8000000000001, 0xFFF8000000000000],
                    np.uint64).view(np.float64)
    values = np.concatenate([[0.0, -0.0, 0.0], nans, nans])
    payload = Dictionary().encode(values)
    assert int(payload[:4].view("<u4")[0]) == 5
    assert Dictionary().decode(payload, len(values), "float64").tobytes() == values.tobytes()


@pytest.mark.parametrize("distinct", [33, 40_000, 150_000])
def test_dictionary_table_grows(distinct):
    """Past the first table and past the pre-sized one: rehashing keeps every code."""
    rng = np.random.default_rng(distinct)
    pool = rng.permutation(np.arange(distinct, dtype=np.int64) * 7919 - 10**12)
    values = np.concatenate([pool, pool[rng.integers(0, distinct, 2 * distinct)]])
    payload = Dictionary().encode(values)
    assert int(payload[:4].view("<u4")[0]) == distinct
    assert np.array_equal(payload[4:4 + 8 * distinct].view(np.int64), pool)  # first appearance
    assert np.array_equal(Dictionary().decode(payload, len(values), "int64"), values)


def test_dictionary_with_a_distinct_cap_is_specialised():
    codec = Dictionary(max_distinct=4)
    assert codec.specialised and not Dictionary().specialised
    fits = np.array([5, 6, 7, 8, 5, 6], np.int32)
    assert codec.decode(codec.encode(fits), 6, "int32").tolist() == fits.tolist()
    assert codec.encode(fits).tobytes() == Dictionary().encode(fits).tobytes()  # same format
    with pytest.raises(Unfit):
        codec.encode(np.array([5, 6, 7, 8, 9], np.int32))
    assert codec_from_params(9, codec.to_params()) == codec
    with pytest.raises(CodecError):
        Dictionary(max_distinct=-1)


def test_dictionary_rejects_damaged_payloads():
    values = np.array([1, 2, 3, 1, 2, 3, 3], np.int64)
    payload = Dictionary().encode(values)
    for bad in (payload[:3], payload[:-1], np.concatenate([payload, [0]])):
        with pytest.raises(CodecError):
            Dictionary().decode(bad, len(values), "int64")
    forged = payload.copy()
    forged[4 + 3 * 8:] = 0xFF  # codes 3 with 3 distinct values
    with pytest.raises(CodecError):
        Dictionary().decode(forged, len(values), "int64")


# -- snappy and lz4 ----------------------------------------------------------------------------

LIBRARY = [Snappy(), Lz4()]


@pytest.mark.parametrize("codec", LIBRARY, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_library_codecs_shrink_repetitive_data(codec, dtype):
    rng = np.random.default_rng(4)
    block = rng.integers(0, 1000, column_shape(dtype, 64)).astype(numpy_dtype(dtype))
    values = np.concatenate([block] * 200)
    payload = codec.encode(values)
    assert len(payload) * 10 < values.nbytes  # (snappy's copies end at 64 bytes: <= ~21x)
    got = codec.decode(payload, len(values), dtype)
    assert got.tobytes() == values.tobytes() and got.flags.writeable


@pytest.mark.parametrize("codec", LIBRARY, ids=str)
def test_library_codecs_check_the_length_and_the_bytes(codec):
    values = np.arange(1000, dtype=np.int64)
    payload = codec.encode(values)
    with pytest.raises(CodecError):
        codec.decode(payload, 999, "int64")
    with pytest.raises(CodecError):
        codec.decode(payload, 1000, "int32")
    with pytest.raises(CodecError):
        codec.decode(np.full(40, 0xFF, np.uint8), 1000, "int64")


@pytest.mark.parametrize("codec", [Dictionary(), *LIBRARY], ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_decoded_columns_are_writable(codec, dtype):
    values = np.ones(column_shape(dtype, 10), numpy_dtype(dtype))
    payload = codec.encode(values)
    payload.flags.writeable = False  # e.g. a memory-mapped segment
    got = codec.decode(payload, 10, dtype)
    got[0] = 0
