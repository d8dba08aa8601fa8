"""The replay format: writing, validating reader, corruption, atomic publication, Parquet round trip."""

import contextlib
import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from scabbard import workloads
from scabbard.data import DatasetError, open_dataset, write_dataset
from scabbard.data.format import TableWriter, remove_stale_stages, staging_dir
from scabbard.data.parquet import columns_to_arrow, read_parquet, write_parquet
from scabbard.schema import Field, Schema

YSB = workloads.get("ysb")
SM = workloads.get("sm")


def random_columns(schema, n, seed=1):
    rng = np.random.default_rng(seed)
    cols = []
    for f in schema.fields:
        if f.name == "timestamp":
            cols.append(np.sort(rng.integers(0, 10**6, n)).astype(np.int64))
        elif f.dtype == "uuid":
            cols.append(rng.integers(0, 2**64, (n, 2), dtype=np.uint64))
        elif f.dtype.startswith("float"):
            cols.append(rng.standard_normal(n).astype(f.numpy_dtype))
        else:
            info = np.iinfo(f.numpy_dtype)
            cols.append(rng.integers(info.min, info.max, n, dtype=f.numpy_dtype, endpoint=True))
    return tuple(cols)


@pytest.fixture
def ysb_dataset(tmp_path):
    cols = random_columns(YSB.SCHEMA, 1000)
    rel = random_columns(YSB.AD_CAMPAIGN, 20, seed=2)
    ds = write_dataset(tmp_path / "ysb" / "x", YSB.SCHEMA, cols,
                       tables={"ad_campaign": (YSB.AD_CAMPAIGN, rel)}, workload="ysb")
    return ds, cols, rel


def test_written_dataset_reads_back_zero_copy(ysb_dataset):
    ds, cols, rel = ysb_dataset
    assert ds.rows == 1000 and ds.workload == "ysb"
    for f, c in zip(ds.schema.fields, cols, strict=True):
        np.testing.assert_array_equal(ds.column(f.name), c)
        assert isinstance(ds.column(f.name), np.memmap)
    np.testing.assert_array_equal(ds.table("ad_campaign").column("campaign_id"), rel[1])
    batches = list(ds.batches(300))
    assert [len(b) for b in batches] == [300, 300, 300, 100]
    assert [b.offset for b in batches] == [0, 300, 600, 900]
    assert np.shares_memory(batches[1].column("ad_id"), ds.column("ad_id"))
    ds.verify()


def test_column_files_are_plain_little_endian_arrays(ysb_dataset):
    ds = ysb_dataset[0]
    raw = np.fromfile(ds.path / "stream" / "columns" / "timestamp.bin", dtype="<i8")
    np.testing.assert_array_equal(raw, ds.column("timestamp"))
    uuids = np.fromfile(ds.path / "stream" / "columns" / "ad_id.bin", dtype="<u8").reshape(-1, 2)
    np.testing.assert_array_equal(uuids, ds.column("ad_id"))


def test_expected_schema_mismatch_is_named(ysb_dataset):
    ds = ysb_dataset[0]
    with pytest.raises(DatasetError, match="does not match 'sm'.*missing"):
        open_dataset(ds.path, schema=SM.SCHEMA)
    assert open_dataset(ds.path, schema=YSB.SCHEMA).rows == 1000


def _manifest(ds):
    return json.loads((ds.path / "manifest.json").read_text())


def _rewrite(ds, manifest):
    (ds.path / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    "corrupt, message",
    [
        (lambda m: "{ not json", "not valid JSON"),
        (lambda m: {**m, "format": "other"}, "not a scabbard-replay manifest"),
        (lambda m: {**m, "format_version": 99}, "format version 99 is not supported"),
        (lambda m: {k: v for k, v in m.items() if k != "stream"}, "missing 'stream'"),
        (lambda m: {**m, "stream": {**m["stream"], "rows": 1001}}, "size .* does not match 1001 rows"),
        (lambda m: {**m, "stream": {**m["stream"], "rows": -1}}, "bad row count"),
        (lambda m: {**m, "stream": {**m["stream"], "schema_fingerprint": "0" * 16}},
         "does not match its fingerprint"),
        (lambda m: {**m, "stream": {**m["stream"], "columns": m["stream"]["columns"][:-1]}},
         "do not match its schema"),
        (lambda m: [], "expected a JSON object"),
    ],
)
def test_corrupt_manifests_are_rejected_with_a_clear_message(ysb_dataset, corrupt, message):
    ds = ysb_dataset[0]
    bad = corrupt(_manifest(ds))
    if isinstance(bad, str):
        (ds.path / "manifest.json").write_text(bad)
    else:
        _rewrite(ds, bad)
    with pytest.raises(DatasetError, match=message):
        open_dataset(ds.path)


def test_truncated_or_missing_column_files_are_detected(ysb_dataset):
    ds = ysb_dataset[0]
    col = ds.path / "stream" / "columns" / "event_type.bin"
    with open(col, "r+b") as f:
        f.truncate(3000)
    with pytest.raises(DatasetError, match=r"event_type.bin: size 3000 B does not match 1000 rows"):
        open_dataset(ds.path)
    col.unlink()
    with pytest.raises(DatasetError, match="column file of stream.event_type is missing"):
        open_dataset(ds.path)


def test_verify_detects_a_flipped_bit(ysb_dataset):
    ds = ysb_dataset[0]
    col = ds.path / "tables" / "ad_campaign" / "columns" / "campaign_id.bin"
    data = bytearray(col.read_bytes())
    data[37] ^= 0x10
    col.write_bytes(bytes(data))
    open_dataset(ds.path, verify=False)  # sizes still fine (checksums not verified)
    with pytest.raises(DatasetError, match="campaign_id.bin: checksum mismatch"):
        open_dataset(ds.path, verify=True)


def test_folder_without_manifest_is_not_a_dataset(tmp_path):
    (tmp_path / "sg").mkdir()
    with pytest.raises(DatasetError, match="no such dataset folder"):
        open_dataset(tmp_path / "sg" / "small")
    (tmp_path / "sg" / "small").mkdir()
    with pytest.raises(DatasetError, match="no manifest.json"):
        open_dataset(tmp_path / "sg" / "small")


def test_a_failed_write_leaves_nothing_that_looks_complete(tmp_path):
    cols = list(random_columns(SM.SCHEMA, 50))
    cols[0] = cols[0][::-1].copy()  # timestamps out of order: the writer refuses
    with pytest.raises(DatasetError, match="event timestamps decrease"):
        write_dataset(tmp_path / "sm" / "bad", SM.SCHEMA, tuple(cols))
    assert not (tmp_path / "sm" / "bad").exists()
    assert list((tmp_path / "sm").iterdir()) == []


def test_publishing_replaces_an_old_dataset_whole(tmp_path):
    path = tmp_path / "sm" / "d"
    first = write_dataset(path, SM.SCHEMA, random_columns(SM.SCHEMA, 10, seed=1))
    second = write_dataset(path, SM.SCHEMA, random_columns(SM.SCHEMA, 20, seed=2))
    assert second.rows == 20 and second.checksum != first.checksum
    assert sorted(p.name for p in (tmp_path / "sm").iterdir()) == ["d"]


def test_stale_staging_folders_of_dead_writers_are_removed(tmp_path):
    mine = staging_dir(tmp_path / "x")  # this process is alive: kept
    dead = tmp_path / ".y.partial-999999999-abcd"
    dead.mkdir()
    removed = remove_stale_stages(tmp_path)
    assert removed == [dead] and mine.exists()


def test_empty_table_round_trips(tmp_path):
    ds = write_dataset(tmp_path / "sm" / "empty", SM.SCHEMA, SM.SCHEMA.empty_columns(0))
    assert ds.rows == 0 and len(ds.column("mf01")) == 0 and list(ds.batches(10)) == []


@pytest.mark.parametrize("name", ["ysb", "sm", "nexmark"])
def test_replay_parquet_replay_round_trip_is_lossless(tmp_path, name):
    schema = workloads.get(name).SCHEMA
    cols = random_columns(schema, 500)
    write_parquet(schema, cols, tmp_path / "a.parquet")
    back = read_parquet(schema, tmp_path / "a.parquet")
    for a, b in zip(cols, back, strict=True):
        np.testing.assert_array_equal(a, b)
    # Spark-compatible types: uint32 as int64, uuid as binary
    pschema = pq.read_schema(tmp_path / "a.parquet")
    for f in schema.fields:
        t = str(pschema.field(f.name).type)
        assert t == {"uint32": "int64", "uuid": "binary"}.get(f.dtype, f.dtype.replace("float32", "float"))
    ds = write_dataset(tmp_path / name / "x", schema, cols)
    again = write_dataset(tmp_path / name / "y", schema,
                          read_parquet(schema, ds.path / "stream" / "parquet"))
    assert again.checksum == ds.checksum


def test_parquet_with_values_outside_the_schema_is_rejected(tmp_path):
    schema = Schema("t", (Field("timestamp", "int64"), Field("u", "uint32")))
    import pyarrow as pa

    table = pa.table({"timestamp": pa.array([0, 1], pa.int64()), "u": pa.array([1, -5], pa.int64())})
    pq.write_table(table, tmp_path / "bad.parquet")
    with pytest.raises(DatasetError, match="outside the uint32 range"):
        read_parquet(schema, tmp_path / "bad.parquet")
    assert columns_to_arrow(schema, (np.array([0], np.int64), np.array([7], np.uint32))).num_rows == 1


def test_table_writer_streams_in_pieces(tmp_path):
    schema = SM.SCHEMA
    cols = random_columns(schema, 100)
    w = TableWriter(tmp_path / "t", schema)
    w.append(tuple(c[:40] for c in cols))
    w.append(tuple(c[40:] for c in cols))
    entry = w.close()
    assert entry["rows"] == 100
    assert entry["event_time"] == {"first": int(cols[0][0]), "last": int(cols[0][-1]), "unit": "ms"}
    size = os.path.getsize(tmp_path / "t" / "columns" / "mf01.bin")
    assert size == 400


def _stream_col(m, i, **change):
    cols = [dict(c) for c in m["stream"]["columns"]]
    cols[i].update(change)
    return {**m, "stream": {**m["stream"], "columns": cols}}


@pytest.mark.parametrize(
    "corrupt, message",
    [
        # column files outside the dataset: never memory-mapped
        (lambda m: _stream_col(m, 0, file="../../ysb/x/stream/columns/timestamp.bin"),
         r"column 0 of table 'stream' 'file' must be a relative path inside"),
        (lambda m: _stream_col(m, 1, file="/etc/passwd"), r"column 1 .* relative path inside"),
        (lambda m: _stream_col(m, 1, file="columns/../../x.bin"), "relative path inside"),
        (lambda m: _stream_col(m, 1, file=""), "relative path inside"),
        (lambda m: _stream_col(m, 1, file="columns\\x.bin"), "relative path inside"),
        (lambda m: {**m, "tables": {"../../escape": m["tables"]["ad_campaign"]}},
         "table name '../../escape' must be a plain folder name"),
        (lambda m: {**m, "tables": {".hidden": m["tables"]["ad_campaign"]}}, "plain folder name"),
        # wrong types, each named
        (lambda m: _stream_col(m, 2, file=7), r"column 2 of table 'stream' 'file' must be a string"),
        (lambda m: _stream_col(m, 2, bytes="8000"), r"'bytes' must be an integer, got str"),
        (lambda m: _stream_col(m, 2, bytes=True), r"'bytes' must be an integer, got bool"),
        (lambda m: {**m, "stream": {**m["stream"], "columns": "all"}},
         r"'columns' of table 'stream' must be a list"),
        (lambda m: {**m, "stream": {**m["stream"], "columns": ["a"] * 7}},
         r"column 0 of table 'stream' must be an object"),
        (lambda m: {**m, "stream": {**m["stream"], "rows": True}}, "bad row count True"),
        (lambda m: {**m, "stream": {**m["stream"], "rows": "1000"}}, "bad row count"),
        (lambda m: {**m, "stream": {**m["stream"], "schema": [1, 2]}},
         r"the schema of table 'stream' must be an object"),
        (lambda m: {**m, "params": [1]}, r"'params' must be an object"),
        (lambda m: {**m, "tables": []}, r"'tables' must be an object"),
        (lambda m: {**m, "stream": 5}, r"'stream' must be an object"),
        (lambda m: {**m, "workload": None}, r"'workload' must be a string"),
        (lambda m: _stream_col(m, 3, name=None), r"column 3 of table 'stream' 'name'"),
    ],
)
def test_hostile_or_malformed_manifests_are_refused_naming_the_field(ysb_dataset, corrupt,
                                                                       message):
    ds = ysb_dataset[0]
    _rewrite(ds, corrupt(_manifest(ds)))
    with pytest.raises(DatasetError, match=message):
        open_dataset(ds.path)


def test_a_column_file_that_links_out_of_the_dataset_is_refused(ysb_dataset, tmp_path):
    ds = ysb_dataset[0]
    outside = tmp_path / "secret.bin"
    col = ds.path / "stream" / "columns" / "timestamp.bin"
    outside.write_bytes(col.read_bytes())
    col.unlink()
    col.symlink_to(outside)
    with pytest.raises(DatasetError, match="leads outside the table folder"):
        open_dataset(ds.path)


def _mutations(doc, path=()):
    """Every (path, value) in a JSON document."""
    yield path, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _mutations(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _mutations(v, path + (i,))


def _set(doc, path, value):
    if not path:
        return value
    doc = json.loads(json.dumps(doc))
    node = doc
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return doc


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-5, 10**6) | st.text(max_size=12)
                     | st.sampled_from(["..", "/etc/passwd", "../x", "columns/../../y"]),
                     lambda kids: st.lists(kids, max_size=3)
                     | st.dictionaries(st.text(max_size=6), kids, max_size=3), max_leaves=6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@seed(20261124)
@given(data=st.data())
def test_any_manifest_opens_or_fails_with_a_dataset_error(ysb_dataset, data):
    """A manifest with any value replaced by any JSON value: it opens, or DatasetError - never
    another exception."""
    ds = ysb_dataset[0]
    good = _manifest(ds)
    try:
        where = data.draw(st.sampled_from([p for p, _ in _mutations(good)]))
        _rewrite(ds, _set(good, where, data.draw(_JSON)))
        with contextlib.suppress(DatasetError):
            open_dataset(ds.path)
    finally:
        _rewrite(ds, good)


def test_listing_shows_each_dataset_and_a_damaged_one_as_invalid(ysb_dataset, tmp_path):
    from scabbard.data import listing

    assert listing(tmp_path / "none") == (f"no datasets under {tmp_path / 'none'}/ (make them "
                                          "with `scabbard datagen`)")
    ds = ysb_dataset[0]
    lines = listing(tmp_path).splitlines()
    assert lines[0].split() == ["dataset", "rows", "MB", "checksum"]
    assert lines[1].split() == ["ysb/x", "1,000", f"{ds.stream.nbytes / 1e6:.1f}",
                                ds.checksum[:19]]
    (ds.path / "stream" / "columns" / "timestamp.bin").write_bytes(b"")
    assert listing(tmp_path).splitlines()[1].startswith(f"{'ysb/x':<36} INVALID: ")


def test_check_dataset_opens_it_against_its_workloads_schema(ysb_dataset):
    ds = ysb_dataset[0]
    assert workloads.check_dataset(ds) == (f"{ds.path}: ysb 1,000 rows, 1 side tables; sizes "
                                           "and schema valid (--verify for checksums)")
    assert workloads.check_dataset(ds, verify=True).endswith("; checksums verified")
    other = write_dataset(ds.path.parent / "y", SM.SCHEMA, random_columns(SM.SCHEMA, 10),
                          workload="ysb")
    with pytest.raises(DatasetError, match="schema does not match"):
        workloads.check_dataset(other)
