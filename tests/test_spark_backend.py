"""The Spark Structured Streaming backend gives the engine's window results, query by query."""

import numpy as np
import pytest
from ftkit import campaign

import reference as ref
from scabbard import queries
from scabbard.engine import CollectSink, run_query
from scabbard.peers.spark import MANY_WINDOWS, STATE_STORES, run_spark, windows_per_tuple
from scabbard.query import Query, col

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def both(q, ds, spark, tmp_path):
    sink = CollectSink()
    run_query(q, ds, sink=sink)
    cols = sink.columns()
    engine = ref.to_frame(q.schema, [cols[n] for n in q.schema.names])
    run = run_spark(q, ds, spark=spark, workdir=tmp_path)
    spark_rows = ref.to_frame(q.schema, [run.columns[n] for n in q.schema.names])
    return engine, spark_rows, run


# LRB1 and SG2 (300 and 128 windows per tuple in Spark: a minute each here) and SG3's hour
# windows run with `make campaign`
@pytest.mark.parametrize("name", [n if n not in ("LRB1", "SG2") else campaign(n)
                                  for n in queries.NAMES if n not in ("SG1", "SG3")])
def test_spark_and_engine_agree(spark, tiny, tmp_path, name):
    q = queries.get(name)
    engine, spark_rows, run = both(q, tiny[queries.workload_of(name)], spark, tmp_path)
    assert len(engine) > 0
    ref.assert_same_results(spark_rows, engine, q.schema)
    assert (tmp_path / "checkpoint0" / "offsets").is_dir(), "the streaming query kept a checkpoint"


def test_spark_on_rocksdb_and_engine_agree_on_darwin(spark, tiny, tmp_path):
    """Darwin's peer: Spark's RocksDB state store provider (state on the local disk) gives
    the engine's windows on Darwin's micro-benchmark, and its checkpoint holds RocksDB's
    files, not the default store's deltas."""
    q = queries.get("DARWIN")
    sink = CollectSink()
    run_query(q, tiny["darwin"], sink=sink)
    cols = sink.columns()
    engine = ref.to_frame(q.schema, [cols[n] for n in q.schema.names])
    run = run_spark(q, tiny["darwin"], spark=spark, workdir=tmp_path, state_store="rocksdb")
    ref.assert_same_results(ref.to_frame(q.schema, [run.columns[n] for n in q.schema.names]),
                            engine, q.schema)
    state = list((tmp_path / "checkpoint0" / "state").rglob("*"))
    assert any(p.suffix == ".sst" for p in state) and not any(p.suffix == ".delta" for p in state)
    assert spark.conf.get("spark.sql.streaming.stateStore.providerClass", None) in \
        (None, STATE_STORES["memory"]), "the session keeps its own store afterwards"


@pytest.fixture(scope="module")
def sg_hour(spark, tmp_path_factory):
    # a 3600-s window makes Spark copy every tuple 3,600 times: a smaller dataset
    from scabbard.workloads import sg

    return sg.SPEC.generate(duration=10, rate=50, out=tmp_path_factory.mktemp("sg-hour"),
                            spark=spark, progress=False)


@pytest.mark.parametrize("name", ["SG1", campaign("SG3")])
def test_spark_and_engine_agree_on_the_hour_windows(spark, sg_hour, tmp_path, name):
    q = queries.get(name)
    assert windows_per_tuple(q) == 3600 > MANY_WINDOWS  # so Spark interprets the plan
    spark.conf.set("spark.sql.codegen.wholeStage", "true")
    engine, spark_rows, _ = both(q, sg_hour, spark, tmp_path / "work")
    assert len(engine) > 0
    ref.assert_same_results(spark_rows, engine, q.schema)
    # the settings were the run's: the session has its own again
    assert spark.conf.get("spark.sql.codegen.wholeStage") == "true"
    assert spark.conf.get("spark.sql.codegen.factoryMode", None) is None


def test_windows_per_tuple():
    assert {n: windows_per_tuple(queries.get(n)) for n in ("CM1", "SG1", "SG2", "LRB1", "YSB")} \
        == {"CM1": 60, "SG1": 3600, "SG2": 128, "LRB1": 300, "YSB": 1}


def test_spark_rejects_a_dataset_of_another_workload(spark, tiny):
    with pytest.raises(ValueError, match="reads 'cm' data"):
        run_spark(queries.get("CM1"), tiny["lrb"], spark=spark)


# -- stateless queries and count-based windows -------------------------------------------
@pytest.fixture(scope="module")
def lrb_parts(spark, tmp_path_factory):
    """An LRB stream in three Parquet files: offsets cross file boundaries."""
    from scabbard.workloads import lrb

    return lrb.SPEC.generate(duration=40, rate=400, partitions=3, spark=spark, progress=False,
                             out=tmp_path_factory.mktemp("lrb-parts"))


def in_order(a, b, schema):
    """The same rows in the same order, exactly."""
    assert len(a) == len(b)
    for n in schema.names:
        assert np.array_equal(a[n].to_numpy(), b[n].to_numpy()), n


@pytest.mark.parametrize("name", ["PF-MOD2", "PF-FALSE", "LRB-ROWS"])
def test_spark_runs_stateless_queries_and_count_windows(spark, tiny, tmp_path, name):
    q = queries.get(name)
    engine, spark_rows, _ = both(q, tiny[queries.workload_of(name)], spark, tmp_path)
    assert len(engine) > 0 or name == "PF-FALSE"
    if q.schema.stream:  # read back in input order, by each row's offset
        in_order(spark_rows, engine, q.schema)
    else:
        ref.assert_same_results(spark_rows, engine, q.schema, rtol=1e-6)


def test_spark_numbers_tuples_by_offset_across_parquet_files(spark, lrb_parts, tmp_path):
    """Spark has no count-based window in streaming: its event time is each tuple's offset
    (the first offset of its file plus its row in the file), and then its windows are the
    engine's."""
    assert len(lrb_parts.stream.entry["parquet"]) == 3
    rows = queries.get("LRB-ROWS")
    engine, spark_rows, _ = both(rows, lrb_parts, spark, tmp_path / "rows")
    assert len(engine) > 10
    ref.assert_same_results(spark_rows, engine, rows.schema, rtol=1e-6)
    fast = (Query.stream(rows.source.schema, "lrb").where(col("speed") > 60)
            .select("vehicle", "speed", segment=col("position") // 5280).named("fast"))
    engine, spark_rows, _ = both(fast, lrb_parts, spark, tmp_path / "fast")
    assert len(engine) > 0
    in_order(spark_rows, engine, fast.schema)
