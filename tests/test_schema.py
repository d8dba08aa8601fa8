import numpy as np
import pytest

from scabbard import workloads
from scabbard.batch import Batch
from scabbard.schema import Field, Schema, SchemaError

# The paper's Table 3: attributes / bytes per row.
TABLE_3 = {"cm": (12, 64), "sg": (7, 32), "lrb": (7, 32), "ysb": (7, 128), "nexmark": (9, 128),
           "sm": (14, 64)}


@pytest.mark.parametrize("name", workloads.NAMES)
def test_schemas_match_table_3(name):
    schema = workloads.get(name).SCHEMA
    attrs, row_bytes = TABLE_3[name]
    assert len(schema.fields) == attrs
    assert schema.row_bytes == row_bytes
    assert schema.fields[0].name == "timestamp" and schema.fields[0].dtype == "int64"


def test_every_workload_is_registered_and_named_in_the_paper():
    assert set(workloads.NAMES) == set(TABLE_3)
    assert workloads.get("NQ") is workloads.get("nexmark")
    with pytest.raises(workloads.UnknownWorkloadError, match="unknown workload 'foo'"):
        workloads.get("foo")


def test_row_bytes_defaults_to_the_fields_and_may_add_padding():
    s = Schema("s", (Field("timestamp", "int64"), Field("a", "int32")))
    assert s.row_bytes == 12 and s.padding_bytes == 0
    p = Schema("p", (Field("timestamp", "int64"), Field("a", "uuid")), row_bytes=32)
    assert p.payload_bytes == 24 and p.padding_bytes == 8
    with pytest.raises(SchemaError, match="smaller than"):
        Schema("x", (Field("timestamp", "int64"), Field("a", "int64")), row_bytes=8)


@pytest.mark.parametrize(
    "fields, message",
    [
        ((), "no fields"),
        ((Field("a", "int32"),), "field 0 of a stream must be 'timestamp'"),
        ((Field("timestamp", "int32"),), "of type int64"),
        ((Field("timestamp", "int64"), Field("a", "int32"), Field("a", "int64")), "duplicate"),
    ],
)
def test_malformed_schemas_are_rejected(fields, message):
    with pytest.raises(SchemaError, match=message):
        Schema("bad", fields)


def test_bad_fields_are_rejected():
    with pytest.raises(SchemaError, match="unknown type"):
        Field("a", "int8")
    with pytest.raises(SchemaError, match="identifier"):
        Field("a b", "int32")
    with pytest.raises(SchemaError, match="categories"):
        Field("a", "float32", categories=("x",))


@pytest.mark.parametrize("name", workloads.NAMES)
def test_schema_dict_round_trip_keeps_the_fingerprint(name):
    schema = workloads.get(name).SCHEMA
    again = Schema.from_dict(schema.to_dict())
    assert again == schema
    assert again.fingerprint == schema.fingerprint


def test_fingerprint_changes_with_types_names_and_size():
    base = Schema("s", (Field("timestamp", "int64"), Field("a", "int32")))
    assert base.fingerprint != Schema("s", (Field("timestamp", "int64"), Field("a", "int64"))).fingerprint
    assert base.fingerprint != Schema("s", (Field("timestamp", "int64"), Field("b", "int32"))).fingerprint
    assert base.fingerprint != Schema("s", base.fields, row_bytes=16).fingerprint


def test_check_columns_names_the_bad_column():
    s = workloads.get("lrb").SCHEMA
    cols = list(s.empty_columns(4))
    assert s.check_columns(cols) == 4
    cols[2] = np.zeros(4, dtype=np.float64)
    with pytest.raises(SchemaError, match="'speed'"):
        s.check_columns(cols)
    cols = list(s.empty_columns(4))
    cols[3] = cols[3][:3]
    with pytest.raises(SchemaError, match="'highway' has 3 rows"):
        s.check_columns(cols)


def test_batch_views_and_offsets():
    s = workloads.get("ysb").SCHEMA
    n = 10
    arrays = {f.name: np.arange(n * f.width).reshape(f.column_shape(n)) for f in s.fields}
    b = Batch.from_arrays(s, arrays, offset=100)
    assert len(b) == n and b.end == 110 and b.nbytes == n * 128
    part = b.slice(2, 5)
    assert part.offset == 102 and len(part) == 3
    assert np.shares_memory(part.column("ad_id"), b.column("ad_id"))
    assert part.column("ad_id").shape == (3, 2)
    df = part.to_pandas()
    assert list(df.index) == [102, 103, 104] and len(df.loc[102, "user_id"]) == 36
    with pytest.raises(SchemaError, match="missing columns"):
        Batch.from_arrays(s, {"timestamp": np.zeros(1)})
    with pytest.raises(IndexError):
        b.slice(5, 11)
