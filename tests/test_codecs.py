"""The shared codec test kit (STYLE.md rule 3): every registered codec, every dtype it
accepts, round trip on random and extreme inputs, configuration and header-parameter
round trips, golden bytes.  A codec-specific test belongs in its own file; this one
knows only the contract."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from scabbard.compression import Codec, Unfit, codec_from_config, codec_from_params, registered
from scabbard.compression.base import CodecError, column_shape, numpy_dtype

GOLDEN = Path(__file__).parent / "golden" / "codecs"
# the paper's Table 2 plus the decimal-precision lossy float, block-packed deltas and the
# library fallbacks
EXPECTED = {"raw", "base_delta", "delta_of_delta", "delta", "ns_byte", "ns_bit", "simple8b", "varbyte",
            "rle", "xor", "dictionary", "lossy_float", "snappy", "lz4"}

EXAMPLES = [(cls.__name__, c) for cls in registered() for c in cls.examples()]
CASES = [(f"{c}-{dt}", c, dt) for _, c in EXAMPLES for dt in sorted(c.accepts)]
IDS = [k for k, _, _ in CASES]


def _nans(dt: np.dtype) -> np.ndarray:
    """Quiet and signalling NaNs with payloads, both signs: their bits must survive."""
    if dt.itemsize == 8:
        bits = [0x7FF8000000000001, 0xFFF8000000000000, 0x7FF0000000000001, 0xFFFFFFFFFFFFFFFF]
        return np.array(bits, np.uint64).view(dt)
    return np.array([0x7FC00001, 0xFFC00000, 0x7F800001, 0xFFFFFFFF], np.uint32).view(dt)


def _extremes(dtype: str) -> list[np.ndarray]:
    dt = numpy_dtype(dtype)
    if dtype == "uuid":
        top = np.iinfo(np.uint64).max
        return [np.array([[0, 0], [top, top], [0, top], [top, 0], [1, 2], [1, 2]], dt)]
    if dtype in ("float32", "float64"):
        fi = np.finfo(dt)
        return [np.array([0.0, -0.0, np.nan, np.inf, -np.inf, fi.max, fi.min, fi.tiny,
                          -fi.tiny, fi.smallest_subnormal, 1.5, 1.5, -2.25], dt),
                _nans(dt)]
    ii = np.iinfo(dt)
    return [np.array([ii.min, ii.max, 0, -1 if ii.min < 0 else 1, ii.max, ii.min, ii.min], dt),
            np.array([ii.max, ii.min] * 40, dt),  # the largest deltas, both signs
            np.arange(1000, 0, -3).astype(dt),  # negative deltas
            np.full(300, ii.max, dt)]


def _values(dtype: str):
    dt = numpy_dtype(dtype)
    shape = st.integers(0, 300).map(lambda n: column_shape(dtype, n))
    if dtype in ("float32", "float64"):
        elems = st.floats(width=dt.itemsize * 8, allow_nan=True, allow_infinity=True)
    else:
        elems = st.integers(int(np.iinfo(dt).min), int(np.iinfo(dt).max))
    small = st.integers(-3, 3) if dtype not in ("uint32", "uuid") else st.integers(0, 3)
    smooth = st.lists(small, max_size=300).map(
        lambda d: (np.cumsum(np.array(d, np.int64)) + 1000).astype(dt)
        .reshape(column_shape(dtype, len(d))) if dtype != "uuid" else
        np.repeat((np.array(d, np.int64) % 4).astype(dt), 2).reshape(len(d), 2))
    return st.one_of(hnp.arrays(dt, shape, elements=elems), smooth,
                     st.sampled_from(_extremes(dtype)))


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-exact equality (NaN payloads and -0.0 included)."""
    return a.dtype == b.dtype and a.shape == b.shape and \
        np.array_equal(np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))


def _round_trip(codec: Codec, dtype: str, values: np.ndarray) -> None:
    values = np.ascontiguousarray(values)
    try:
        payload = codec.encode(values)
    except Unfit:
        assert codec.specialised, f"{codec} is generic but refused a {dtype} batch"
        return
    assert payload.dtype == np.uint8 and payload.ndim == 1
    got = codec.decode(payload.copy(), len(values), dtype)
    if codec.lossless:
        assert _same(got, values), f"{codec} on {dtype}: {values[:8]} -> {got[:8]}"
    else:
        assert got.dtype == values.dtype and got.shape == values.shape
        bound = codec.max_error(dtype)
        err = np.abs(got.astype(np.float64) - values.astype(np.float64))
        assert np.all(err <= bound), f"{codec}: error {err.max()} over its bound {bound}"


def test_every_codec_is_registered_with_a_unique_id():
    names = {c.name for c in registered()}
    assert names >= EXPECTED, f"missing: {sorted(EXPECTED - names)}"
    ids = [c.codec_id for c in registered()]
    assert len(ids) == len(set(ids)) and all(0 <= i < 0xFFFF for i in ids)


@pytest.mark.parametrize("name,codec", EXAMPLES, ids=[str(c) for _, c in EXAMPLES])
def test_config_and_header_params_round_trip(name, codec):
    assert codec_from_config(json.loads(json.dumps(codec.get_config()))) == codec
    params = codec.to_params()
    assert len(params) == 24
    assert codec_from_params(codec.codec_id, params) == codec


@pytest.mark.parametrize("key,codec,dtype", CASES, ids=IDS)
def test_round_trip_of_extremes_and_empty(key, codec, dtype):
    for values in [*_extremes(dtype), np.zeros(column_shape(dtype, 0), numpy_dtype(dtype))]:
        _round_trip(codec, dtype, values)


@pytest.mark.parametrize("key,codec,dtype", CASES, ids=IDS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize=True)
@given(data=st.data())
def test_round_trip_property(key, codec, dtype, data):
    _round_trip(codec, dtype, data.draw(_values(dtype)))


def golden_input(dtype: str) -> np.ndarray:
    """A fixed, deterministic column: runs, a trend, noise and an extreme or two."""
    rng = np.random.default_rng(7)
    n = 500
    if dtype == "uuid":
        return rng.integers(0, 5, (n, 2)).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    base = np.repeat(np.arange(n // 5), 5)[:n] * 3 + rng.integers(0, 4, n)
    if dtype in ("float32", "float64"):
        return (base / 100.0).astype(numpy_dtype(dtype))
    return base.astype(numpy_dtype(dtype))


def golden_path(codec: Codec, dtype: str) -> Path:
    cfg = json.dumps(codec.get_config(), sort_keys=True)
    tag = "".join(ch if ch.isalnum() else "_" for ch in cfg)[:120]
    return GOLDEN / f"{codec.name}-{dtype}-{tag}.bin"


def write_golden() -> int:
    """Write the golden files (``python tests/test_codecs.py --write-golden``): only when a
    codec's format changes on purpose - old segments on disk then no longer decode."""
    GOLDEN.mkdir(parents=True, exist_ok=True)
    n = 0
    for _, codec, dtype in CASES:
        golden_path(codec, dtype).write_bytes(codec.encode(golden_input(dtype)).tobytes())
        n += 1
    return n


@pytest.mark.parametrize("key,codec,dtype", CASES, ids=IDS)
def test_golden_bytes(key, codec, dtype):
    """The on-disk format never changes by accident: segments written by an older build
    must decode.  Missing files are an error, not written here."""
    path = golden_path(codec, dtype)
    assert path.is_file(), f"no golden file {path.name}: run python tests/test_codecs.py --write-golden"
    want = np.frombuffer(path.read_bytes(), np.uint8)
    values = golden_input(dtype)
    if not codec.library_format:
        assert np.array_equal(codec.encode(values), want), f"{codec} on {dtype}: bytes changed"
    got = codec.decode(want.copy(), len(values), dtype)
    if codec.lossless:
        assert _same(got, values)


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--write-golden"]:
        print(f"wrote {write_golden()} golden files to {GOLDEN}")
    else:
        sys.exit("usage: python tests/test_codecs.py --write-golden")


@pytest.mark.parametrize("run", [1, 2, 3000])
def test_rle_takes_a_deferred_shift_as_if_it_were_added(run):
    """RLE of ``values`` with ``shift`` is byte for byte RLE of ``values + shift`` (a replayed
    copy's timestamps are encoded where they lie); runs of one, two and thousands (the two
    run finders)."""
    from scabbard.compression.rle import RunLength

    rng = np.random.default_rng(run)
    v = np.repeat(np.cumsum(rng.integers(0, 5, 4000)), run)[:50_000].astype(np.int64)
    for codec in RunLength.examples():
        assert codec.encode(v, shift=123_456_789).tobytes() == codec.encode(v + 123_456_789).tobytes()
        assert np.array_equal(codec.decode(codec.encode(v, shift=-7), len(v), "int64"), v - 7)


def test_a_replayed_copys_timestamps_are_stored_shifted_without_being_made():
    """The compression of a replayed copy (its timestamp shift deferred): the RLE payload and,
    where a codec stores no less than raw, the raw column both hold the shifted values."""
    from scabbard.batch import ReplayBatch
    from scabbard.compression.policy import Compression, RawColumn
    from scabbard.compression.rle import RunLength
    from scabbard.schema import Field, Schema

    schema = Schema("s", (Field("timestamp", "int64"), Field("v", "int64")), row_bytes=16)
    ts = np.repeat(np.arange(100, dtype=np.int64), 50)
    b = ReplayBatch(schema, (ts, np.arange(len(ts), dtype=np.int64) * 7919 % 1000), 0, 10_000)
    comp = Compression(schema, (RunLength(), RunLength()))
    (c0, p0), _ = comp(b)
    assert isinstance(c0, RunLength) and np.array_equal(c0.decode(p0, len(b), "int64"), ts + 10_000)
    # runs of one over the whole int64 range: RLE would store more than raw
    wide = np.random.default_rng(0).integers(-2**63, 2**63 - 1, 5000, dtype=np.int64)
    (c2, p2), _ = comp(ReplayBatch(schema, (wide, ts), 0, 10_000))
    assert isinstance(p2, RawColumn) and p2.parts[0][1] == 10_000  # shift added as it is copied
    assert np.array_equal(p2.parts[0][0], wide)



def test_delta_takes_a_deferred_shift_as_if_it_were_added():
    """Delta of ``values`` with ``shift`` is byte for byte delta of ``values + shift`` (only
    the first value moves); a shift of a narrow column is refused."""
    from scabbard.compression.ints import Delta

    ts = np.cumsum(np.random.default_rng(3).integers(0, 9, 10_000)).astype(np.int64)
    assert Delta().encode(ts, shift=-42).tobytes() == Delta().encode(ts - 42).tobytes()
    assert np.array_equal(Delta().decode(Delta().encode(ts, shift=7), len(ts), "int64"), ts + 7)
    with pytest.raises(CodecError, match="shift"):
        Delta().encode(ts.astype(np.int32), shift=1)
