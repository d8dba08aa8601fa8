"""The Flink peer (PyFlink SQL in .venv-flink) gives the engine's window results, with checkpoints.

The Flink tests need ``scripts/setup-flink.sh``; without it they are skipped, unless
``SCABBARD_REQUIRE_PEERS`` is set (CI sets it), where they fail instead.  The
compiler's tests need no Flink.  To stay cheap, the queries compared run one after
the other in ONE JVM (about 40 s for the six).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import reference as ref
from scabbard import queries
from scabbard.data import write_dataset
from scabbard.engine import CollectSink, run_query
from scabbard.peers.flink import flink_available, run_flink, run_flink_many, run_job_script
from scabbard.peers.flink_sql import flink_sql
from scabbard.query import Query, QueryError, col, count, max_
from scabbard.workloads import cm, ysb


def cm_categories_per_window() -> Query:
    """A per-window aggregate over CM1's result (LRB3's shape; LRB3 itself costs Flink 10 s here)."""
    return (queries.get("CM1").per_window().aggregate(count().alias("categories"),
                                                      max_("sum_cpu").alias("peak"))
            .named("CM1-per-window"))


# a plain sliding window, σ + γ, the relation ⋈ (uuids), keep-max, the window join, and a
# per-window aggregate
COMPARED = {"CM1": "cm", "CM2": "cm", "YSB": "ysb", "NQ": "nexmark", "SG3": "sg",
            "CM1-per-window": "cm"}
# a stateless selection and a count-based window; Darwin's micro-benchmark.
# Their own JVM, after the others, with the RocksDB state backend (state on the local disk)
STATELESS_AND_ROWS = {"PF-MOD2": "sg", "LRB-ROWS": "lrb", "DARWIN": "darwin"}


def _query(name: str) -> Query:
    return cm_categories_per_window() if name == "CM1-per-window" else queries.get(name)


@pytest.fixture(scope="module")
def flink():
    if not flink_available():
        reason = ".venv-flink is missing: run scripts/setup-flink.sh"
        if os.environ.get("SCABBARD_REQUIRE_PEERS"):
            pytest.fail(f"SCABBARD_REQUIRE_PEERS is set but {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def flink_runs(flink, tiny, tmp_path_factory):
    """The compared queries over the tiny datasets, one JVM, checkpoints every second."""
    work = tmp_path_factory.mktemp("flink")
    pairs = [(_query(n), tiny[w]) for n, w in COMPARED.items()]
    runs = run_flink_many(pairs, workdir=work, timeout_s=300)
    return work, {r.query: r for r in runs}


def _java_processes_under(folder: Path) -> list[int]:
    """Pids of running processes whose command line names ``folder`` (our JVM's log file does)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(folder) in cmdline and "java" in cmdline:
            pids.append(int(proc.name))
    return pids


# -- with Flink ------------------------------------------------------------------------------------
@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("name", COMPARED)
def test_flink_and_engine_agree(flink_runs, tiny, name):
    _, runs = flink_runs
    q = _query(name)
    sink = CollectSink()
    run_query(q, tiny[COMPARED[name]], sink=sink)
    cols = sink.columns()
    engine = ref.to_frame(q.schema, [cols[n] for n in q.schema.names])
    got = ref.to_frame(q.schema, [runs[name].columns[n] for n in q.schema.names])
    assert len(engine) > 0
    ref.assert_same_results(got, engine, q.schema)


@pytest.mark.spark
@pytest.mark.slow
def test_flink_on_rocksdb_runs_a_stateless_query_a_count_window_and_darwin_as_the_engine(
        flink, tiny, tmp_path_factory):
    pairs = [(queries.get(n), tiny[w]) for n, w in STATELESS_AND_ROWS.items()]
    work = tmp_path_factory.mktemp("flink-rocksdb")
    runs = run_flink_many(pairs, workdir=work, timeout_s=300, state_backend="rocksdb")
    # the embedded RocksDB of flink-dist loaded here (run_flink_many checks the log for it)
    # and had its local folder in the run's (its files go when the job ends)
    assert {r.report["state_backend"] for r in runs} == {"rocksdb"}
    assert (work / "rocksdb").is_dir()
    for (q, ds), run in zip(pairs, runs, strict=True):
        sink = CollectSink()
        run_query(q, ds, sink=sink)
        cols = sink.columns()
        engine = ref.to_frame(q.schema, [cols[n] for n in q.schema.names])
        assert len(engine) > 0
        got = ref.to_frame(q.schema, [run.columns[n] for n in q.schema.names])
        ref.assert_same_results(got, engine, q.schema)  # Flink's rows in no particular order


@pytest.mark.spark
@pytest.mark.slow
def test_flink_job_was_checkpointed(flink_runs):
    work, runs = flink_runs
    run = runs["CM1"]
    assert run.checkpoints >= 1, run.report
    assert run.seconds > 0 and run.tuples > 0 and run.seconds_total >= run.seconds
    assert any((work / "checkpoints").rglob("*")), "nothing in the checkpoint folder"


@pytest.mark.slow
def test_a_failed_job_raises_and_leaves_no_jvm(flink, tmp_path):
    spec = {"parallelism": 1, "checkpoint_interval_s": 1.0, "report": str(tmp_path / "r.json"),
            "log_dir": str(tmp_path / "log"),
            "jobs": [{"name": "bad", "ddl": [], "inserts": ["INSERT INTO nowhere SELECT 1"],
                      "checkpoint_dir": str(tmp_path / "ckpt")}]}
    with pytest.raises(RuntimeError, match="(?s)Flink job failed.*nowhere"):
        run_job_script(spec, tmp_path, Path(".venv-flink").resolve(), timeout_s=120)
    assert list((tmp_path / "log").glob("*.log")), "the JVM never started: nothing was tested"
    assert _java_processes_under(tmp_path) == []


@pytest.mark.slow
def test_a_job_past_its_timeout_is_killed_with_its_jvm(flink, tmp_path):
    # an endless job: rows from a generator into a sink that drops them
    ddl = ["CREATE TABLE g (x INT) WITH ('connector' = 'datagen', 'rows-per-second' = '10')",
           "CREATE TABLE b (x INT) WITH ('connector' = 'blackhole')"]
    spec = {"parallelism": 1, "checkpoint_interval_s": 1.0, "report": str(tmp_path / "r.json"),
            "log_dir": str(tmp_path / "log"),
            "jobs": [{"name": "endless", "ddl": ddl, "inserts": ["INSERT INTO b SELECT x FROM g"],
                      "checkpoint_dir": str(tmp_path / "ckpt")}]}
    with pytest.raises(RuntimeError, match="timed out"):
        run_job_script(spec, tmp_path, Path(".venv-flink").resolve(), timeout_s=10)
    assert list((tmp_path / "log").glob("*.log")), "the JVM never started: nothing was tested"
    assert _java_processes_under(tmp_path) == []


@pytest.mark.spark
@pytest.mark.slow
def test_flink_rejects_a_dataset_of_another_workload(tiny):
    with pytest.raises(ValueError, match="reads 'cm' data"):
        run_flink(queries.get("CM1"), tiny["lrb"])


# -- the compiler (no Flink needed) ----------------------------------------------------------------
def test_every_paper_query_compiles():
    for name in queries.NAMES:
        sql = flink_sql(queries.get(name), "file:///in.csv", {"ad_campaign": "file:///r.csv"},
                        "file:///out")
        assert "INSERT INTO" in sql.insert and not any("UDF" in s for s in sql.statements)
    ysb_sql = "\n".join(flink_sql(queries.get("YSB"), "file:///in.csv",
                                  {"ad_campaign": "file:///r.csv"}, "file:///out").statements)
    assert "FOR SYSTEM_TIME AS OF" in ysb_sql and "TUMBLE(" in ysb_sql
    assert "HOP(" in "\n".join(flink_sql(queries.get("CM1"), "file:///in.csv", {},
                                         "file:///out").statements)


def test_a_stateless_plan_is_its_views_and_a_count_window_hops_over_the_offset():
    """A plan without a window aggregation is no longer refused - it is σ / π views
    and the insert of its rows; a count-based window is a HOP over each tuple's offset (the
    exported stream's last column) read as event-time milliseconds."""
    q = Query.stream(cm.SCHEMA, "cm").where(col("cpu") > 0.5).select("cpu", j=col("job_id") * 2)
    sql = flink_sql(q.named("no-window"), "file:///in.csv", {}, "file:///out")
    text = "\n".join(sql.statements)
    assert "WHERE" in text and "HOP(" not in text and "TUMBLE(" not in text
    assert sql.sink_columns == ("timestamp", "cpu", "j")
    rows = "\n".join(flink_sql(queries.get("LRB-ROWS"), "file:///in.csv", {},
                               "file:///out").statements)
    assert "TO_TIMESTAMP_LTZ(`__offset`, 3)" in rows and "`__offset` BIGINT" in rows
    assert "INTERVAL '1.024' SECOND(9, 3), INTERVAL '4.096' SECOND(9, 3)" in rows


def _small_ysb(folder: Path, ads: np.ndarray):
    """Four YSB views of ad 0, and a relation mapping ``ads`` to campaigns."""
    n = 4
    zeros = np.zeros((n, 2), np.uint64)
    stream = (np.arange(n, dtype=np.int64) * 1000, zeros, zeros, zeros,
              np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros(n, np.int32))
    campaigns = np.arange(2 * len(ads), dtype=np.uint64).reshape(-1, 2)
    return write_dataset(folder, ysb.SCHEMA, stream, workload="ysb", parquet=False,
                         tables={"ad_campaign": (ysb.AD_CAMPAIGN, (ads, campaigns))})


def test_a_relation_with_duplicate_keys_is_refused(tmp_path):
    # a temporal join keeps one relation row per key; an inner join would match both
    ds = _small_ysb(tmp_path / "ysb", np.zeros((2, 2), np.uint64))  # the same ad twice
    with pytest.raises(QueryError, match="duplicate"):
        run_flink(queries.get("YSB"), ds, workdir=tmp_path / "work")


def test_a_missing_flink_environment_names_the_setup_script(tmp_path):
    ds = _small_ysb(tmp_path / "ysb", np.arange(4, dtype=np.uint64).reshape(2, 2))
    with pytest.raises(RuntimeError, match="scripts/setup-flink.sh"):
        run_flink(queries.get("YSB"), ds, workdir=tmp_path / "work", venv=tmp_path / "nowhere")
