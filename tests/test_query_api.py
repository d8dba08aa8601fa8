"""The query API: plans print, and bad queries fail at build time with a message naming the problem."""

import pytest

from scabbard import queries
from scabbard.query import Query, QueryError, Relation, avg, col, count, max_, min_, sum_
from scabbard.workloads import cm, lrb, sg, ysb


def cm_stream():
    return Query.stream(cm.SCHEMA, "cm")


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: cm_stream().where(col("nope") > 1), "unknown column 'nope'"),
        (lambda: cm_stream().select("cpu", "missing"), "unknown column 'missing'"),
        (lambda: cm_stream().where(col("cpu") + 1), "a filter needs a condition"),
        (lambda: cm_stream().where(col("event_type") == "BOOM"), "no category 'BOOM'"),
        (lambda: cm_stream().window(1, 2), "slide (2000 ms) is larger than its range"),
        (lambda: cm_stream().window(0), "window sizes must be positive"),
        (lambda: cm_stream().window(-5, 1), "window sizes must be positive"),
        (lambda: cm_stream().window(60, 7), "must be a multiple of its slide"),
        (lambda: cm_stream().window(60, 1).group_by("cpu").aggregate(count()),
         "group keys must be integers or uuids"),
        (lambda: cm_stream().window(60, 1).aggregate(), "at least one aggregate"),
        (lambda: Query.stream(ysb.SCHEMA).window(10).aggregate(sum_("ad_id")),
         "cannot aggregate a uuid column"),
        (lambda: cm_stream().window(60, 1).aggregate(count(), count()), "duplicate output column"),
        (lambda: cm_stream().window(60, 1).aggregate(count()).where(col("count") > 1),
         "applies to the input stream"),
        (lambda: cm_stream().having(col("cpu") > 1), "applies to a windowed result"),
        (lambda: cm_stream().window(60, 1).aggregate(count()).having(col("nope") > 1),
         "unknown column 'nope'"),
        (lambda: cm_stream().window(60, 1).aggregate(count()).keep_max("nope"), "unknown column"),
        (lambda: Query.stream(ysb.SCHEMA).where(col("ad_id") < col("page_id")), "cannot compare"),
        (lambda: Query.stream(ysb.SCHEMA).join(Relation("r", ysb.AD_CAMPAIGN), on="ad_id",
                                               columns="nope"), "has no column 'nope'"),
        (lambda: Query.stream(ysb.SCHEMA).join(Relation("r", ysb.AD_CAMPAIGN), on=("event_type", "ad_id"),
                                               columns="campaign_id"), "different types"),
        (lambda: cm_stream().window(60, 1).aggregate(count()).join_windows(
            cm_stream().window(30, 2).aggregate(sum_("cpu"))), "the slides differ"),
        (lambda: cm_stream().window(60, 1).aggregate(count()).join_windows(
            Query.stream(sg.SCHEMA).window(60, 1).aggregate(sum_("value"))), "same source"),
        (lambda: cm_stream().window(60, 1).aggregate(count()).join_windows(
            cm_stream().window(60, 1).aggregate(count())), "on both sides"),
        (lambda: cm_stream().where((col("cpu") > 1) and (col("ram") > 1)), "no truth value"),
    ],
)
def test_bad_queries_fail_at_build_time(build, message):
    with pytest.raises(QueryError) as e:
        build()
    assert message in str(e.value)


def test_result_schema_names_and_types():
    q = (Query.stream(lrb.SCHEMA).window(30, 1).group_by("highway", seg=col("position") // 5280)
         .aggregate(count(), sum_("speed"), avg("vehicle"), min_("speed").alias("slowest"),
                    max_("vehicle")))
    s = q.schema
    assert s.names == ("window_start", "window_end", "highway", "seg", "count", "sum_speed",
                       "avg_vehicle", "slowest", "max_vehicle")
    assert [f.dtype for f in s.fields] == ["int64", "int64", "int32", "int64", "int64", "float64",
                                          "float64", "float32", "int32"]


def test_every_paper_query_is_registered_and_explains_itself():
    assert len(queries.NAMES) == 11
    for name in queries.NAMES:
        q = queries.get(name)
        assert q.name == name
        text = q.explain()
        assert text.startswith(name) and "Source[" in text and "ω(" in text
        assert "SELECT" in q.description
    assert queries.get("lrb1").name == "LRB1"
    with pytest.raises(queries.UnknownQueryError, match="unknown query 'Q9'"):
        queries.get("Q9")


def test_windows_in_seconds_and_tumbling_default():
    q = cm_stream().window(10).aggregate(count())
    w = q.node.window
    assert (w.range_ms, w.slide_ms, w.tumbling, w.panes) == (10_000, 10_000, True, 1)
    assert cm_stream().window(0.5, 0.25).aggregate(count()).node.window.panes == 2


def test_a_querys_dataset_is_the_one_named_or_its_small_one_generated_first(tmp_path,
                                                                            monkeypatch):
    """queries.dataset (what ``scabbard run`` reads): ``--data``'s folder, else the
    workload's small dataset under the root, generated (and said so) when missing."""
    from types import SimpleNamespace

    import numpy as np

    from scabbard.data import DatasetError, write_dataset

    def generate(scale, out, log):
        log("generated")
        cols = tuple(np.zeros(3, dtype=f.numpy_dtype) if f.dtype != "uuid"
                     else np.zeros((3, 2), dtype=np.uint64) for f in cm.SCHEMA.fields)
        write_dataset(tmp_path / "root" / "cm" / scale, cm.SCHEMA, cols, workload="cm")

    fake = SimpleNamespace(SCHEMA=cm.SCHEMA, SPEC=SimpleNamespace(generate=generate))
    monkeypatch.setattr(queries.workloads, "get", lambda name: fake)
    lines = []  # explain's: a missing default is none, not generated
    assert queries.dataset("CM1", None, tmp_path / "root", log=lines.append,
                           generate=False) is None and lines == []
    ds = queries.dataset("CM1", None, tmp_path / "root", log=lines.append)
    assert ds.rows == 3 and ds.path == tmp_path / "root" / "cm" / "small"
    assert lines == [f"{ds.path} not found: generating it (scabbard datagen cm --scale small)",
                     "generated"]
    assert queries.dataset("CM1", None, tmp_path / "root", log=lines.append).rows == 3
    assert len(lines) == 2  # there now: not generated again
    assert queries.dataset("CM2", str(ds.path), "elsewhere").path == ds.path
    with pytest.raises(DatasetError):
        queries.dataset("CM1", str(tmp_path / "none"))
