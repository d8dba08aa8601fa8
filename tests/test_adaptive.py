"""Profiling, adaptive selection and deoptimisation (paper §5.2), and mixed-codec segments."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scabbard.batch import Batch
from scabbard.compression import codec_class, registered
from scabbard.compression.adaptive import AdaptiveCompression, by_cost, by_rules, candidates
from scabbard.compression.policy import Compression
from scabbard.compression.profile import ColumnProfile
from scabbard.schema import Field, Schema
from scabbard.storage import BlockManager, StorageConfig
from scabbard.storage import segment as seg_fmt

SCHEMA = Schema("t", (Field("timestamp", "int64"), Field("k", "int32"), Field("v", "float64"),
                      Field("u", "uuid")), row_bytes=40)


def _batch(offset: int, n: int, k_hi: int = 100, seed: int = 0) -> Batch:
    rng = np.random.default_rng(seed + offset)
    ts = np.arange(offset, offset + n, dtype=np.int64) // 4 * 10
    k = rng.integers(0, k_hi, n).astype(np.int32)
    v = np.round(rng.normal(50, 5, n), 2)
    u = np.repeat(rng.integers(0, 3, (n, 1)).astype(np.uint64), 2, axis=1)
    return Batch.from_arrays(SCHEMA, [ts, k, v, u], offset)


def test_profile_of_hand_checkable_columns():
    p = ColumnProfile("int64")
    p.add(np.repeat(np.arange(10, dtype=np.int64) * 5, 8))  # runs of 8, values 0..45
    assert (p.min, p.max, p.rows, p.distinct) == (0, 45, 80, 10)
    assert p.avg_run == 8.0 and p.range_bits == 6 and p.value_bits == 7  # zigzag(45) = 90
    assert p.delta_bits == 4 and p.mean_step_bits == 4 * 9 / 79  # nine steps of 5 (zigzag 10)
    # the block of 79 steps at its widest (4 bits); the steps' changes: each of the 9 jumps
    # a +5 then a -5 (zigzag 10 and 9: '110' + 7 bits each), the other 61 a 0 (1 bit)
    assert p.block_bits == 79 * 4
    assert p.dod_bits == 9 * (10 + 10) + (79 - 18) * 1
    q = ColumnProfile("int64")
    q.add(np.arange(0, 1000, 10, dtype=np.int64))
    assert q.regular == 1.0 and q.avg_run == 1.0
    f = ColumnProfile("float64")
    f.add(np.array([1.25, 3.5, 2.0]))
    assert f.decimals == 2 and (f.fmin, f.fmax) == (1.25, 3.5)
    f.add(np.array([np.nan]))
    assert f.decimals == -1  # a non-finite value: no decimal precision represents it


@pytest.mark.parametrize("column", [
    np.arange(0, 50_000, 7, dtype=np.int64),  # a counter
    (10_000 + np.cumsum(np.random.default_rng(1).integers(-20, 21, 5000))).astype(np.int64),
    np.random.default_rng(2).integers(0, 4, 5000).astype(np.int64),  # a lane taking turns
    np.random.default_rng(3).integers(-(1 << 62), 1 << 62, 3000, dtype=np.int64),  # noise
], ids=["counter", "walk", "lanes", "noise"])
def test_the_profile_measures_the_step_codecs_sizes(column):
    """What the rules weigh is what the codecs write: the payload less its first value, the
    delta codec's width bytes and the last word's padding; batches add up."""
    whole = ColumnProfile("int64")
    block_bits = dod_bits = 0
    for part in (column[:2000], column[2000:]):
        p = ColumnProfile("int64")
        p.add(part)
        whole.add(part)
        blocks = -(-(len(part) - 1) // 128)
        delta = codec_class("delta")().encode(part).nbytes * 8 - 64 - 64 * -(-blocks // 8)
        dod = codec_class("delta_of_delta")().encode(part).nbytes * 8 - 64
        assert p.block_bits <= delta < p.block_bits + 64  # a partial last block rounds up
        assert p.dod_bits <= dod < p.dod_bits + 64
        block_bits, dod_bits = block_bits + p.block_bits, dod_bits + p.dod_bits
    assert (whole.block_bits, whole.dod_bits) == (block_bits, dod_bits)
    assert whole.delta_value_bits == block_bits / (len(column) - 2)


def test_rules_pick_the_papers_codecs():
    ts = ColumnProfile("int64")
    ts.add(np.arange(0, 10_000, 5, dtype=np.int64))
    assert by_rules(ts, True, None).name == "delta_of_delta"
    runs = ColumnProfile("int32")
    runs.add(np.repeat(np.arange(50, dtype=np.int32), 20))
    pick = by_rules(runs, False, None)
    assert pick.name == "rle" and pick.inner.name == "ns_bit" and pick.inner.width == 8
    walk = ColumnProfile("int32")  # a slowly wandering reading: steps far narrower than values
    walk.add((10_000 + np.cumsum(np.random.default_rng(1).integers(-20, 21, 5000)))
             .astype(np.int32))
    assert by_rules(walk, False, None).name == "delta"  # its steps, not their changes
    counter = ColumnProfile("int64")  # steps that repeat: their changes cost a bit, the
    counter.add(np.arange(10**6, 10**6 + 5000, dtype=np.int64))  # steps two: one bit is not
    assert by_rules(counter, False, None).name == "delta"  # worth delta-of-delta's CPU
    clock = ColumnProfile("int64")  # a clock every 40 ms: steps of 7 bits, their changes 1
    clock.add(np.arange(0, 40 * 5000, 40, dtype=np.int64))
    assert by_rules(clock, False, None).name == "delta_of_delta"
    jitter = ColumnProfile("int64")  # a clock read every 2-23 ms (SM): its steps
    jitter.add(np.cumsum(np.random.default_rng(5).integers(2, 24, 5000)))
    assert by_rules(jitter, True, None).name == "delta"
    noise = ColumnProfile("int32")
    noise.add(np.random.default_rng(2).integers(0, 1 << 14, 5000).astype(np.int32))
    assert by_rules(noise, False, None) == codec_class("ns_bit")(width=16)
    floats = ColumnProfile("float64")
    floats.add(np.linspace(0, 1, 100))
    assert by_rules(floats, False, None).name == "xor"
    assert by_rules(floats, False, 2).name == "lossy_float"
    levels = ColumnProfile("float32")  # a reading of few levels (CM's cpu): a dictionary
    levels.add(np.random.default_rng(3).choice(np.float32([0.009, 0.013, 0.025, 0.25]), 5000))
    pick = by_rules(levels, False, None)
    assert pick.name == "dictionary"
    odd = np.float32([0.0, -0.0, np.nan, 0.25, -0.0])  # exact: its bits, -0.0 and NaN kept
    back = pick.decode(pick.encode(odd), len(odd), "float32")
    assert (back.view(np.uint32) == odd.view(np.uint32)).all()


def test_cost_model_prefers_raw_on_an_infinitely_fast_disk_and_compression_on_a_slow_one():
    col = np.repeat(np.arange(1000, dtype=np.int64), 50)
    p = ColumnProfile("int64")
    p.add(col)
    opts = candidates(p, False, None)
    fast, _ = by_cost(col, opts, disk_bytes_per_s=1e30)
    slow, trials = by_cost(col, opts, disk_bytes_per_s=1e6)
    assert fast.name == "raw"
    assert slow.name != "raw" and min(t.bytes for t in trials) < col.nbytes / 10


def test_distribution_change_falls_back_then_respecialises_without_a_wrong_value():
    c = Compression.scheme(SCHEMA, "adaptive", interval=1e-9, profile_every=1)
    assert isinstance(c, AdaptiveCompression)
    stored = []
    for i in range(4):  # k in 0..99: learns ns_bit of ~8 bits
        stored.append((_batch(i * 1000, 1000), c(_batch(i * 1000, 1000))))
    k_codec = c.codecs[1]
    assert k_codec.name == "ns_bit" and 0 < k_codec.width <= 9
    before = c.stats["k"].fallbacks
    wide = _batch(4000, 1000, k_hi=1 << 20)  # the distribution changes: k needs ~21 bits
    c.interval = 1e9  # no decision for one batch: the specialised codec meets the new data
    out = c(wide)
    stored.append((wide, out))
    assert c.stats["k"].fallbacks == before + 1  # deoptimised: generic codec for that batch
    assert out[1][0].name == "simple8b"
    c.interval = 1e-9
    later = _batch(5000, 1000, k_hi=1 << 20)
    stored.append((later, c(later)))
    assert c.codecs[1].name == "ns_bit" and c.codecs[1].width > 20  # specialised again
    assert c.stats["k"].fallbacks == before + 1
    for b, cols in stored:  # every batch decodes to exactly what was written
        seg = seg_fmt.encode(b, stream_id=1, epoch=1, batch_id=0, stored=cols)
        _, back = seg_fmt.decode(seg, SCHEMA)
        for x, y in zip(b.columns, back.columns, strict=True):
            assert np.array_equal(x.view(np.uint8), y.view(np.uint8))


def test_after_the_first_decision_profiling_is_spread_over_the_interval():
    """Until the first decision every ``profile_every``-th batch is profiled; then at most
    PROFILES_PER_INTERVAL batches an interval (here none: the interval is long), and the batch
    after a deoptimisation (its data changed) - profiling runs under the scheme's lock, a
    serial stage that every 4th batch had made of it."""
    from scabbard.compression.adaptive import FIRST_DECISION

    c = Compression.scheme(SCHEMA, "adaptive", interval=1e9, profile_every=1)
    for i in range(FIRST_DECISION):
        c(_batch(i * 1000, 1000))
    assert c.decisions == 1 and c.codecs[1].name == "ns_bit"
    for i in range(FIRST_DECISION, 40):
        c(_batch(i * 1000, 1000))
    assert c.profiles[1].batches == 0  # 36 batches, none profiled
    c(_batch(40_000, 1000, k_hi=1 << 20))  # k no longer fits its codec: deoptimised
    c(_batch(41_000, 1000, k_hi=1 << 20))  # profiled
    assert c.stats["k"].fallbacks >= 1 and c.profiles[1].batches == 1
    assert c.profiles[1].value_bits > 16


_CODECS = [c for cls in registered() for c in cls.examples()]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize=True)
@given(st.data())
def test_mixed_codec_segments_round_trip(data):
    n = data.draw(st.integers(0, 400))
    b = _batch(data.draw(st.integers(0, 10_000)), n, k_hi=data.draw(st.sampled_from([2, 1 << 30])))
    stored = []
    for f, col in zip(SCHEMA.fields, b.columns, strict=True):
        fits = [c for c in _CODECS if f.dtype in c.accepts and c.lossless and not c.specialised]
        codec = data.draw(st.sampled_from(fits))
        stored.append((codec, codec.encode(col)))
    seg = seg_fmt.encode(b, stream_id=3, epoch=2, batch_id=1, stored=stored)
    h, back = seg_fmt.decode(seg, SCHEMA)
    assert [c.codec for c in h.columns] == [c.codec_id for c, _ in stored]
    for x, y in zip(b.columns, back.columns, strict=True):
        assert np.array_equal(x.view(np.uint8), y.view(np.uint8))


def test_a_stream_whose_codecs_change_reads_back_and_reopens(tmp_path):
    """Segments of one stream written under several codec choices (and raw) all decode -
    also after the storage is closed and opened again, as recovery does."""
    cfg = StorageConfig(file_bytes=256 * 1024, pool_files=2, io_threads=2, bulk_bytes=64 * 1024)
    c = Compression.scheme(SCHEMA, "adaptive", interval=1e9, profile_every=1)
    written = []
    with BlockManager(tmp_path, cfg) as bm:
        sid = bm.stream("s", SCHEMA)
        for i in range(12):
            b = _batch(i * 500, 500, k_hi=100 if i < 6 else 1 << 25)
            bm.append(sid, b, i, compress=None if i % 5 == 4 else c).result()
            written.append(b)
            if i in (2, 8):  # decisions: specialise on small k, then again on wide k
                c.decide()
    # the clock (4 rows a tick) to deltas, k to ns_bit twice (its width), u to a dictionary
    assert [(s.column, s.codec.split("(")[0]) for s in c.swaps] == [
        ("timestamp", "delta"), ("k", "ns_bit"), ("u", "dictionary"), ("k", "ns_bit")]
    assert c.decisions == 2 and c.stats["k"].fallbacks >= 1
    with BlockManager(tmp_path, cfg) as bm:
        sid = bm.stream("s", SCHEMA)
        back = list(bm.load(sid))
    assert sum(len(b) for b in back) == 6000
    for col in range(4):
        want = np.concatenate([b.columns[col] for b in written])
        got = np.concatenate([b.columns[col] for b in back])
        assert np.array_equal(want.view(np.uint8), got.view(np.uint8))


def test_unknown_selector_is_refused():
    with pytest.raises(ValueError, match="rules, cost"):
        Compression.scheme(SCHEMA, "adaptive", selector="magic")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3000), st.integers(-10**6, 10**6)), min_size=1,
                max_size=4), st.sampled_from([None, 64, 1000]), st.integers(0, 10**6))
def test_a_column_in_shifted_pieces_profiles_as_the_column_made(pieces, sample, at):
    """The adaptive scheme profiles a replayed batch's timestamps in their pieces, their
    shifts deferred (nothing made): the same statistics as the made column's, its range
    always the whole batch's."""
    rng = np.random.default_rng(len(pieces) + (sample or 0))
    parts = [(np.cumsum(rng.integers(0, 4, n)).astype(np.int64), add) for n, add in pieces]
    made = np.concatenate([a + add for a, add in parts])
    by_parts, whole = ColumnProfile("int64"), ColumnProfile("int64")
    by_parts.add_parts(parts, step_codecs=True, sample=sample, at=at)
    whole.add(made, step_codecs=True, sample=sample, at=at)
    assert by_parts == whole
    assert (whole.min, whole.max) == (int(made.min()), int(made.max()))
