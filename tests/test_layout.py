"""``--assembly auto`` chooses the window state's layout by the keys a task will hold
(scabbard.engine.layout: per-task partials, or the partitioned dataflow's per-key state)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scabbard.data import write_dataset
from scabbard.engine import EngineConfig, run_query
from scabbard.engine.layout import DATAFLOW_GROUPS, estimated_keys, task_keys
from scabbard.engine.sinks import CollectSink
from scabbard.ft.report import layout_lines
from scabbard.query import Query, count, sum_
from scabbard.schema import Field, Schema

SCHEMA = Schema("keyed", (
    Field("timestamp", "int64", "event time (ms)"),
    Field("key", "int64", "group key"),
    Field("value", "float64", "summed value"),
))
ROWS = 1 << 20


def keys_said(layout: dict) -> str:
    return "all but unique" if layout["keys"] is None else f"~{layout['keys']:,}"


def _query(slide: int = 10) -> Query:
    return (Query.stream(SCHEMA, "keyed").window(10, slide).group_by("key")
            .aggregate(count(), sum_("value")).named("KEYED"))


def _dataset(tmp_path, name: str, keys: np.ndarray, seconds: int = 20):
    rng = np.random.default_rng(1)
    ts = np.arange(len(keys), dtype=np.int64) * seconds * 1000 // len(keys)  # 10 s windows
    return write_dataset(tmp_path / name, SCHEMA, (ts, keys, rng.random(len(keys))),
                         workload="keyed", parquet=False)


def _run(ds, slide: int = 10, **config):
    starts, sink = [], CollectSink()
    report = run_query(_query(slide), ds, sink,
                       EngineConfig(workers=2, batch_rows=1 << 19, **config),
                       watch=[lambda line: starts.append(line)
                              if line.get("event") == "start" else 0])
    assert report.layout == starts[0]["layout"]
    frame = sink.to_pandas().sort_values(["window_end", "key"]).reset_index(drop=True)
    return report, frame


@pytest.mark.parametrize("keys", [1_000, 100_000, 1_000_000, 10_000_000])
def test_the_keys_a_stream_holds_are_estimated_from_a_samples_two_halves(keys):
    rng = np.random.default_rng(keys)
    drawn = rng.integers(0, keys, 1 << 16)
    half, whole = (len(np.unique(drawn[:n])) for n in (1 << 15, 1 << 16))
    est = estimated_keys(half, whole, 1 << 16)
    assert abs(est / keys - 1) < 0.15, (keys, est)
    assert task_keys(est, 1 << 22) == pytest.approx(keys * -math.expm1(-(1 << 22) / keys),
                                                      rel=0.15)
    assert estimated_keys(10, 20, 20) == math.inf and task_keys(math.inf, 7) == 7
    assert estimated_keys(10, 10, 100) == 10


def test_auto_runs_the_dataflow_where_a_tasks_keys_are_many_with_the_same_results(tmp_path):
    """Keys all but unique: a task of 2^19 tuples holds ~2^19 groups - the dataflow, its
    partitions a worker each; its results are the task-parallel engine's."""
    spread = _dataset(tmp_path, "spread", np.arange(ROWS, dtype=np.int64) * 7919 % (1 << 40))
    report, got = _run(spread)
    layout = report.layout
    assert layout["chosen"] == "dataflow:2" and layout["task_keys"] >= DATAFLOW_GROUPS
    assert layout_lines(report) == [f"window state: dataflow:2 (keys {keys_said(layout)}, "
                                    f"~{layout['task_keys']:,} a task; engine/layout.py)"]
    serial, want = _run(spread, assembly="serial")
    assert serial.layout is None and layout_lines(serial) == [] and len(want) == ROWS
    assert got.equals(want)


def test_auto_keeps_per_task_partials_for_few_keys_a_heavy_hitter_or_keys_that_drift(tmp_path):
    """A thousand keys: a task's partials are few.  All but unique keys, 95 % of the tuples
    on one: a second partition would take 5 % of the work - one partition, so per task.
    Unique keys in sliding windows of 1 s panes: a pane holds 10,486 of them, and so does a
    task's table - per task, though the keys never repeat."""
    rng = np.random.default_rng(2)
    few = _dataset(tmp_path, "few", rng.integers(0, 1_000, ROWS) * 7919)
    report, _ = _run(few)
    assert report.layout is None  # not even estimated: the sample's keys repeat
    heavy_keys = np.where(rng.random(ROWS) < 0.95, 0, np.arange(ROWS, dtype=np.int64) + 1)
    report, got = _run(_dataset(tmp_path, "heavy", heavy_keys))
    assert report.layout["chosen"] == "per-task" and report.layout["parts"] == 1
    assert got["count"].sum() == ROWS
    drifting = _dataset(tmp_path, "drift", np.arange(ROWS // 4, dtype=np.int64), seconds=25)
    report, got = _run(drifting, slide=1)
    assert report.layout is None  # not even sampled: a pane's tuples are too few
    assert got["count"].sum() == 10 * ROWS // 4


def test_the_state_size_bench_runs_every_layout_and_says_what_auto_chose(tmp_path):
    from scabbard.experiments import statesize

    s = statesize.Settings(key_counts=(10, 5_000), rows=1 << 17, rate=100_000, seconds=0.2,
                           rounds=2, data_dir=str(tmp_path / "data"),
                           output_dir=str(tmp_path / "out"))
    runs = statesize.run(s, log=lambda *_: None)
    assert len(runs) == 2 * 2 * len(statesize.LAYOUTS)
    assert (runs["tuples_per_s"] > 0).all()
    assert set(runs.loc[runs["layout"] == "auto", "chosen"]) == {"per-task"}
    table = statesize.summary(runs)
    assert list(table["keys"]) == [10, 5_000] and "per-key / per-task" in table
    statesize.plot(runs, s.output_dir)
    assert (tmp_path / "out" / "state_size.png").exists()
    assert (tmp_path / "out" / "runs.csv").exists()
    with pytest.raises(ValueError, match="unknown layout"):
        statesize.Settings(layouts=("shared",))


def test_a_fault_tolerant_run_auto_lays_out_per_key_stopped_and_recovered_is_exactly_once(
        tmp_path):
    """Persisted input, a checkpoint every task, the exactly-once sink: stopped after each
    task and recovered, the incarnations by turns ``auto`` (which lays the state out per key:
    the dataflow) and the serial engine; the committed output is the failure-free run's."""
    from ftkit import StopAfter, failure_free

    from scabbard import queries
    from scabbard.ft.recovery import run_fault_tolerant
    from scabbard.ft.runfile import recorded_run
    from scabbard.ft.sinks import ClockedSink, read_output
    from scabbard.ft.verify import compare
    from scabbard.workloads.darwin import SCHEMA as DARWIN

    q = queries.get("DARWIN")  # (a recovery finds its query by name)
    keys = np.arange(ROWS, dtype=np.int64) * 7919 % (1 << 40)
    ts = np.arange(ROWS, dtype=np.int64) * 120_000 // ROWS  # two 60 s windows
    ds = write_dataset(tmp_path / "darwin", DARWIN, (ts, keys, keys % 1000), workload="darwin",
                       parquet=False)
    n, store, out = 2 * ROWS, tmp_path / "store", tmp_path / "out"
    layouts = []

    def run(assembly, **kw):
        cfg = EngineConfig(workers=2, batch_rows=1 << 19, assembly=assembly)
        r = run_fault_tolerant(q, ds, store, ClockedSink(out), cfg, interval=None,
                               every_tasks=1, wrap_source=lambda s: StopAfter(s, 1), **kw)
        layouts.append((assembly, (r.run.layout or {}).get("chosen")))

    run("auto", max_tuples=n)
    while not recorded_run(store).get("completed"):
        run("serial" if len(layouts) % 2 else "auto", recover=True)
        assert len(layouts) < 12
    assert len(layouts) >= 4
    assert {c for a, c in layouts if a == "auto"} == {"dataflow:2"}
    v = compare(read_output(out), failure_free(q, ds, n), q.schema)
    assert v.ok, v
