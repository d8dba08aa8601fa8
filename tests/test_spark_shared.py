"""Datasets and Spark runs at URIs, in local mode (the test session's Spark): generation by the
executors gives the local bytes; the Spark backend reads the dataset's Parquet where it is,
keeps its work folder at a URI, writes results from the executors and resumes there; the
settings a session starts with; clear errors for locations the executors cannot write."""

from __future__ import annotations

import pytest
from sharedkit import content, engine_frame

import reference as ref
from scabbard import queries, workloads
from scabbard.cli import main
from scabbard.data import DatasetError
from scabbard.data.parquet import read_parquet
from scabbard.data.shared import open_shared_dataset
from scabbard.hadoopfs import SharedFS, is_uri, join, local_path, to_uri
from scabbard.peers.spark import run_spark
from scabbard.sparksession import SparkSettings, driver_configuration
from scabbard.workloads.generator import Datagen, generate, make_params


# -- no Spark needed ----------------------------------------------------------------------------
def test_locations_and_uris(tmp_path):
    assert to_uri(tmp_path) == tmp_path.as_uri() and not is_uri(str(tmp_path))
    assert to_uri("hdfs://nn:8020/data/") == "hdfs://nn:8020/data" and is_uri("s3a://b/x")
    assert join("file:///a/", "b", "/c/") == "file:///a/b/c"
    assert local_path("file:///tmp/x y") == local_path("/tmp/x y")
    assert local_path("hdfs://nn/x") is None


def test_the_driver_settings_a_session_starts_with():
    env, conf = driver_configuration(SparkSettings(master="local[2]"))
    assert conf["spark.ui.enabled"] == "false" and env["SPARK_LOCAL_IP"] == "127.0.0.1"
    # the UI binds where SPARK_LOCAL_IP says: loopback unless told otherwise
    env, conf = driver_configuration(SparkSettings(master="spark://127.0.0.1:7077", ui="127.0.0.1"))
    assert conf["spark.ui.enabled"] == "true" and env["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert conf["spark.driver.host"] == "127.0.0.1"
    env, conf = driver_configuration(SparkSettings(master="local[2]", ui="0.0.0.0"))
    assert env["SPARK_LOCAL_IP"] == "0.0.0.0"
    # on a remote cluster the driver announces the address on the route to the master
    env, conf = driver_configuration(SparkSettings(master="spark://192.0.2.7:7077", ui="127.0.0.1"))
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1" and conf["spark.driver.host"] != "127.0.0.1"
    env, conf = driver_configuration(SparkSettings(master="spark://192.0.2.7:7077"))
    assert conf["spark.ui.enabled"] == "false" and "SPARK_LOCAL_IP" not in env
    assert conf["spark.driver.host"] not in ("127.0.0.1", "localhost")
    # --conf comes last and wins; spark.pyspark.python names the executors' Python
    env, conf = driver_configuration(SparkSettings(
        master="spark://192.0.2.7:7077", extra=(("spark.driver.host", "10.0.0.5"),
                                                ("spark.pyspark.python", "/opt/py/bin/python"))))
    assert conf["spark.driver.host"] == "10.0.0.5" and "SPARK_LOCAL_IP" not in env
    assert env["PYSPARK_PYTHON"] == "/opt/py/bin/python"


@pytest.mark.parametrize("args, message", [
    (["--backend", "spark", "--conf", "spark.executor.memory"], "expected KEY=VALUE"),
    (["--backend", "spark", "--master", "spark://127.0.0.1:7077"], "give --workdir URI"),
    (["--workdir", "/tmp/w"], "--workdir apply to --backend spark"),
    (["--spark-ui"], "--spark-ui apply to --backend spark"),
])
def test_spark_backend_flags_are_checked(capsys, args, message):
    assert main(["run", "--query", "YSB", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("scabbard: error: ") and message in err


def test_bench_cluster_flags_are_its_settings(capsys):
    from scabbard.cli import build_parser
    from scabbard.cli.settings import settings_from
    from scabbard.experiments import scaleout

    parser = build_parser("bench")
    assert settings_from(scaleout.Settings, parser.parse_args(["bench", "cluster"])) == \
        scaleout.Settings()
    s = settings_from(scaleout.Settings, parser.parse_args(
        ["bench", "cluster", "--workload", "lrb", "--query", "lrb1", "--tuples", "5000"]))
    assert (s.workload, s.query, s.tuples) == ("lrb", "LRB1", 5000)
    assert main(["bench", "cluster", "--query", "CM1"]) == 2
    assert "--query CM1 reads cm data, not --workload ysb" in capsys.readouterr().err


# -- generation at a URI -------------------------------------------------------------------------

@pytest.mark.spark
@pytest.mark.parametrize("name, partitions", [("sg", None), ("ysb", 3)])
def test_generation_at_a_uri_is_written_by_the_executors_and_identical(spark, tiny, tmp_path,
                                                                       name, partitions):
    spec = workloads.get(name).SPEC
    ds = generate(spec, make_params(spec, scale="tiny"),
                  Datagen(out=(tmp_path / "d").as_uri(), partitions=partitions, spark=spark,
                          progress=False))
    parts = ds.manifest["run"]["partitions"]
    assert parts == (partitions or tiny[name].manifest["run"]["partitions"])
    if partitions is None:  # the same partitions: the very same manifest
        assert {k: v for k, v in ds.manifest.items() if k != "run"} == \
            {k: v for k, v in tiny[name].manifest.items() if k != "run"}
    assert content(ds.manifest) == content(tiny[name].manifest)
    ds.verify()
    files = [ds.stream.path / f for f in ds.stream.entry["parquet"]]
    assert [f.name for f in files] == [f"part-{k:05d}.parquet" for k in range(parts)]
    times = [f.stat().st_mtime for f in files]
    assert times == sorted(times) and len(set(times)) == parts
    assert [p.name for p in ds.path.rglob("*") if p.name.startswith((".", "_"))] == []
    # the same again is kept; a different dataset under the name is not overwritten
    again = generate(spec, make_params(spec, scale="tiny"),
                     Datagen(out=(tmp_path / "d").as_uri(), spark=spark, progress=False))
    assert again.manifest["run"]["created"] == ds.manifest["run"]["created"]
    from scabbard.workloads.generator import DatagenError

    with pytest.raises(DatagenError, match="already holds a dataset with other parameters"):
        generate(spec, make_params(spec, scale="tiny", seed=5),
                 Datagen(out=(tmp_path / "d").as_uri(), name="tiny", spark=spark, progress=False))


@pytest.mark.spark
def test_a_dataset_at_a_uri_is_read_and_checked_through_the_driver(spark, tiny, tmp_path):
    import shutil

    fs = SharedFS(spark)
    uri = to_uri(tiny["ysb"].path)
    shared = open_shared_dataset(fs, uri, workloads.get("ysb").SCHEMA)
    assert shared.rows == tiny["ysb"].rows and shared.checksum == tiny["ysb"].checksum
    assert shared.stream.parquet_folder == join(uri, "stream", "parquet")
    assert set(shared.tables) == {"ad_campaign"}
    with pytest.raises(DatasetError, match="does not match 'lrb'"):
        open_shared_dataset(fs, uri, workloads.get("lrb").SCHEMA)
    broken = tmp_path / "ysb"
    shutil.copytree(tiny["ysb"].path, broken)
    column = broken / "stream" / "columns" / "ad_id.bin"
    column.write_bytes(column.read_bytes()[:-16])
    with pytest.raises(DatasetError, match="does not match"):
        open_shared_dataset(fs, broken.as_uri())
    (broken / "manifest.json").write_text("{")
    with pytest.raises(DatasetError, match="not valid JSON"):
        open_shared_dataset(fs, broken.as_uri())


# -- the Spark backend at URIs -------------------------------------------------------------------
@pytest.mark.spark
def test_several_micro_batches_read_the_files_in_event_time_order(spark, tmp_path):
    from scabbard.workloads import ysb

    ds = generate(ysb.SPEC, make_params(ysb.SPEC, scale="tiny"),
                  Datagen(out=tmp_path / "d", partitions=4, spark=spark, progress=False))
    q = queries.get("YSB")
    run = run_spark(q, ds, spark=spark, workdir=tmp_path / "w", max_files_per_trigger=1)
    commits = [p for p in (tmp_path / "w" / "checkpoint0" / "commits").iterdir() if p.name.isdigit()]
    assert len(commits) >= 5  # four micro-batches of data, then the sentinel's
    got = ref.to_frame(q.schema, [run.columns[n] for n in q.schema.names])
    ref.assert_same_results(got, engine_frame(q, ds), q.schema)
    # started again on the same work folder, the finished run reads nothing new
    again = run_spark(q, ds, spark=spark, workdir=tmp_path / "w", max_files_per_trigger=1)
    assert again.rows_read == (0,)
    ref.assert_same_results(ref.to_frame(q.schema, [again.columns[n] for n in q.schema.names]),
                            got, q.schema)


@pytest.mark.spark
def test_a_run_at_uris_writes_its_results_from_the_executors(tiny, tmp_path, capsys):
    work = (tmp_path / "w").as_uri()
    assert main(["run", "--query", "CM2", "--backend", "spark", "--data", to_uri(tiny["cm"].path),
                 "--workdir", work]) == 0
    out = capsys.readouterr().out
    assert f"written by the executors -> {work}/result" in out
    q = queries.get("CM2")
    got = ref.to_frame(q.schema, list(read_parquet(q.schema, tmp_path / "w" / "result")))
    assert f"results: {len(got):,} rows" in out and len(got) > 0
    ref.assert_same_results(got, engine_frame(q, tiny["cm"]), q.schema)
    assert (tmp_path / "w" / "checkpoint0" / "offsets").is_dir()
    assert list((tmp_path / "w" / "sentinel").glob("part-*.parquet"))


@pytest.mark.spark
def test_locations_the_executors_cannot_write_are_one_line(spark, tiny, tmp_path, capsys):
    # /proc takes no new folders, whoever asks - root included
    assert main(["run", "--query", "YSB", "--backend", "spark", "--data", str(tiny["ysb"].path),
                 "--workdir", "file:///proc/scabbard-workdir"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("scabbard: error: --workdir file:///proc/scabbard-workdir: the Spark "
                          "job's executors cannot write there (") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert main(["datagen", "sg", "--scale", "tiny", "--out", "file:///proc/scabbard-data",
                 "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "--data-root file:///proc/scabbard-data/sg: the Spark job's executors cannot write" in err
    assert main(["datagen", "sg", "--scale", "tiny", "--out", "nosuchfs://bucket/data",
                 "--no-progress"]) == 1
    assert "cannot write there" in capsys.readouterr().err
