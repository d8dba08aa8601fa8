"""``scabbard bench peers`` (Fig. 7a and Fig. 8): a peer's crash fails its query only, the
Spark session is sized for the machine, progress estimates what is left, and the engine's
ingest is measured raw and reduced (push-up + adaptive compression)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scabbard.engine import Replay
from scabbard.experiments import comparison
from scabbard.experiments.ingest import ingest
from scabbard.experiments.progress import Progress, Step, guesses_from
from scabbard.ft.config import PersistConfig
from scabbard.sparksession import sized_for_machine

CHILD = Path(__file__).with_name("peer_kill_child.py")


def test_the_spark_session_is_sized_for_the_machine_unless_told():
    s = sized_for_machine(16, 24 << 30)
    assert (s.master, s.driver_memory, s.shuffle_partitions) == ("local[16]", "12g", 32)
    assert sized_for_machine(2, 1 << 29).driver_memory == "1g"  # never below 1 GiB
    assert sized_for_machine(64, 1 << 40).driver_memory == "64g"
    s = sized_for_machine(2, 24 << 30, driver_memory="6G", shuffle_partitions=3)
    assert (s.driver_memory, s.shuffle_partitions) == ("6g", 3)
    with pytest.raises(ValueError, match="such as 4g"):
        sized_for_machine(2, 1 << 30, driver_memory="lots")
    with pytest.raises(ValueError, match="such as 8g"):
        comparison.Settings(spark_memory="8 GB")


def test_progress_estimates_what_is_left_from_the_steps_done(tmp_path):
    t = [0.0]
    lines: list[str] = []
    p = Progress([Step("CM1 engine", "engine", 10), Step("CM1 Spark-FT", "spark", 30),
                  Step("CM2 engine", "engine", 10), Step("CM2 Spark-FT", "spark", 30)],
                 lines.append, now=lambda: t[0])
    assert p.left_s() == 80
    p.start("CM1 engine")
    t[0] = 4.0  # the engine took 4 s, not 10: the other engine step is guessed 4 s
    p.start("CM1 Spark-FT")
    assert lines[-1] == "[2/4  0:04 elapsed, about 1:04 left] CM1 Spark-FT"
    t[0] = 64.0  # Spark took 60 s, not 30
    p.start("CM2 engine")
    assert lines[-1] == "[3/4  1:04 elapsed, about 1:04 left] CM2 engine"
    p.note("a line about it")
    assert lines[-1] == "    CM2 engine: a line about it"
    p.finish()
    p.save(tmp_path / "steps.json")


def test_guesses_from_a_last_run_are_scaled_by_how_this_one_compares(tmp_path):
    (tmp_path / "steps.json").write_text('{"CM1 Spark-FT": 20, "SG1 Spark-FT": 200}')
    steps = [Step("CM1 Spark-FT", "spark", 30), Step("SG1 Spark-FT", "spark", 30),
             Step("YSB Spark-FT", "spark", 30)]
    got = guesses_from(steps, tmp_path / "steps.json")
    assert [s.guess_s for s in got] == [20, 200, 30]
    assert guesses_from(steps, tmp_path / "missing.json") == steps
    t = [0.0]
    p = Progress(got, lambda line: None, now=lambda: t[0])
    p.start("CM1 Spark-FT")
    t[0] = 40.0  # twice the last run's time: SG1 is expected to take 400 s, YSB 60
    p.start("SG1 Spark-FT")
    assert p.left_s() == 460


def test_a_failure_is_one_line_saying_why():
    e = RuntimeError("the Flink job failed (exit code 1); its stderr ends:\nsome log line\n"
                     "Caused by: java.lang.OutOfMemoryError: Java heap space\n\tat a.b(C.java)")
    assert comparison.reason(e) == ("RuntimeError: Caused by: java.lang.OutOfMemoryError: "
                                    "Java heap space")
    runs = pd.DataFrame([
        {"query": "CM1", "system": "no_ft", "tuples_per_s": 2e6, "p50_ms": 1.0},
        {"query": "CM1", "system": "ft", "tuples_per_s": 1e6, "p50_ms": 2.0},
        {"query": "CM1", "system": "spark_ft", "tuples_per_s": np.nan, "error": "boom"}])
    table = comparison.summary(runs)
    assert table.loc[0, "failed"] == "Spark-FT: boom"
    assert comparison.result_line("CM1", runs.to_dict("records")) == (
        "CM1   engine, no FT     2.00  engine with FT     1.00  Spark-FT   failed  M tuples/s")
    assert np.isnan(table.loc[0, "FT / Spark-FT (target >= 50x)"])


def test_the_reduced_ingest_counts_source_tuples_and_writes_fewer_bytes(tiny, tmp_path):
    ds = tiny["lrb"]  # LRB1's push-up keeps some columns of every tuple
    raw = ingest("LRB1", ds, PersistConfig(tmp_path / "raw"), Replay(max_tuples=200_000))
    red = ingest("LRB1", ds, PersistConfig(tmp_path / "red", push_up=True, compression="adaptive"),
                 Replay(max_tuples=200_000))
    assert raw.tuples == red.tuples >= 200_000
    assert red.disk_bytes < raw.disk_bytes / 2


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.crash
def test_a_killed_spark_jvm_fails_its_query_only_and_the_next_query_gets_its_figure(
        tiny, data_root, tmp_path):
    out = tmp_path / "runs.json"
    r = subprocess.run([sys.executable, str(CHILD), str(data_root), str(out), "CM1", "CM2"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    got = json.loads(out.read_text())
    assert [k["query"] for k in got["killed"]] == ["CM1"]
    spark = {row["query"]: row for row in got["runs"] if row["system"] == "spark_ft"}
    assert "killed by signal 9" in spark["CM1"]["error"]
    assert "killed by signal 9" in got["failed"]["CM1"] and got["failed"]["CM2"] == ""
    assert spark["CM2"].get("error") is None and spark["CM2"]["tuples_per_s"] > 0
    assert "a fresh JVM: the last one died" in r.stdout  # CM2 started a new session
    engine = [row for row in got["runs"] if row["system"] in ("no_ft", "ft")]
    assert len(engine) == 4 and all(row["tuples_per_s"] > 0 for row in engine)
