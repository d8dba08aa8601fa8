"""Larger-than-memory state (issue 19, the Darwin seed): its workload, on the engine."""

import numpy as np
import pytest

import reference as ref
from scabbard import queries
from scabbard.engine import CollectSink, EngineConfig, run_query
from scabbard.ft.spillstore import disk_spill

pytestmark = pytest.mark.spark  # the tiny datasets come from the Spark generators


@pytest.mark.parametrize("assembly, workers", [("serial", 1), ("partitioned:3", 2)])
def test_darwin_matches_the_reference(tiny, assembly, workers):
    q, ds = queries.get("DARWIN"), tiny["darwin"]
    sink = CollectSink()
    run_query(q, ds, sink=sink, config=EngineConfig(workers=workers, batch_rows=4096,
                                                    assembly=assembly))
    cols = sink.columns()
    got = ref.to_frame(q.schema, [cols[n] for n in q.schema.names])
    want = ref.evaluate(q.node, {n: ds.column(n) for n in ds.schema.names}, ds.tables)
    assert len(want) > 50_000  # a group per key each window saw: the state is the key space
    assert np.all(np.diff(cols["window_end"]) >= 0)
    ref.assert_same_results(got, want, q.schema)


# -- the window state under a memory budget ----------------------------------------------------
def _run(q, ds, **config):
    sink = CollectSink()
    report = run_query(q, ds, sink=sink, config=EngineConfig(**config))
    cols = sink.columns()
    return ref.to_frame(q.schema, [cols[n] for n in q.schema.names]), report


@pytest.mark.parametrize("name, batch_rows", [
    ("DARWIN", 997),  # tumbling: a spilled partition waits on disk until its window closes
    ("DARWIN", 20_000),  # long tasks: a task's tail replaces the spilled state
    ("LRB1", 4096),  # sliding (300/1): every task closes panes, every partition comes back
    ("NQ", 4096), ("SG2", 4096), ("YSB", 4096)])
def test_any_state_budget_gives_the_unlimited_results(tiny, tmp_path, name, batch_rows):
    """A budget far below the state (the smallest allowed) spills key partitions to disk and
    reads them back; the windows are the unlimited run's, row for row, and the spilled state
    is gone after the run."""
    from scabbard.engine.spill import MIN_STATE_MEMORY

    q, ds = queries.get(name), tiny[queries.workload_of(name)]
    want, _ = _run(q, ds, workers=2, batch_rows=batch_rows)
    got, report = _run(q, ds, workers=2, batch_rows=batch_rows, state_memory=MIN_STATE_MEMORY,
                       spill=disk_spill(tmp_path))
    assert len(want) > 0
    ref.assert_same_results(got, want, q.schema)
    assert list(tmp_path.iterdir()) == [], "the spilled state is removed at the end"
    if name == "DARWIN" and batch_rows < 10_000:
        (stats,) = report.spilled.values()
        assert stats["spills"] > 10 and stats["reloads"] > 10
        assert stats["spilled_bytes"] == stats["reloaded_bytes"] > 0


def test_darwin_state_is_held_within_its_budget(tiny, tmp_path):
    """The partitions in memory never hold much more than the budget (checked every
    sixteenth of it, then brought to three quarters), while the state is far larger."""
    from scabbard.engine.spill import MIN_STATE_MEMORY

    q, ds = queries.get("DARWIN"), tiny["darwin"]
    _, free = _run(q, ds, workers=1, batch_rows=997, assembly="partitioned:64")
    _, report = _run(q, ds, workers=1, batch_rows=997, state_memory=MIN_STATE_MEMORY,
                     spill=disk_spill(tmp_path))
    (stats,) = report.spilled.values()
    assert stats["peak_bytes"] <= MIN_STATE_MEMORY * 1.25
    assert stats["spilled_bytes"] > MIN_STATE_MEMORY // 8


def test_a_budget_too_small_for_one_partition_is_refused_at_start(tiny):
    from scabbard.engine.spill import MIN_STATE_MEMORY

    with pytest.raises(ValueError, match="too small to hold even one key partition"):
        EngineConfig(state_memory=MIN_STATE_MEMORY - 1, spill=disk_spill())
    with pytest.raises(ValueError, match="needs a spill store"):
        EngineConfig(state_memory=MIN_STATE_MEMORY)
