"""Stateless queries (σ, π, ⋈ relation: PipeFabric's Table 1) and count-based windows (ROWS)
through the engine, push-up and fault tolerance (item 4).

* results equal the reference's - a stateless query's in input order - on random streams cut
  into any batches (hypothesis), and on the tiny datasets for the named queries;
* a stateless result's position (its clock) is its tuple's input offset + 1: the sinks store
  it, recovery drops what was committed at or below it; a count-based window numbers tuples
  by their input offset, so replays and recoveries cut the same windows;
* stopped and recovered runs, and real SIGKILLs (kill campaigns) with both exactly-once
  sinks: exactly once, and for a stateless query every committed clock is its last row's
  position.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pandas as pd
import pytest
from ftkit import CFG, SMALL, campaign, failure_free
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reference as ref
from scabbard import queries
from scabbard.batch import Batch
from scabbard.engine import (
    ArraySource,
    CollectSink,
    Engine,
    EngineConfig,
    NullSink,
    Replay,
    run_query,
)
from scabbard.engine.physical import plan
from scabbard.ft.controller import Controller, campaign_config
from scabbard.ft.recovery import run_fault_tolerant
from scabbard.ft.sinks import ClockedSink, TransactionalSink, read_output
from scabbard.ft.verify import compare
from scabbard.pog.checkpoint import CheckpointStore
from scabbard.query import Query, QueryError, avg, col, count, lit, max_, min_, sum_
from scabbard.query.optimize import push_up
from scabbard.schema import Field, Schema
from scabbard.storage import BlockManager
from scabbard.storage import segment as seg_fmt

S = Schema("s", (Field("timestamp", "int64"), Field("key", "int64"), Field("v", "float32"),
                 Field("k2", "int32"), Field("u", "uuid")))


def stream(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"timestamp": np.sort(rng.integers(0, 5 * n + 1, n)).astype(np.int64),
            "key": rng.integers(-50, 1000, n).astype(np.int64),
            "v": rng.normal(size=n).astype(np.float32),
            "k2": rng.integers(0, 4, n).astype(np.int32),
            "u": rng.integers(0, 2**63, (n, 2)).astype(np.uint64)}


def batches(cols: dict, cuts: list[int]) -> list[Batch]:
    """The stream cut at ``cuts`` into consecutive batches (offsets 0, ...)."""
    n = len(cols["timestamp"])
    bounds = [0, *sorted({c for c in cuts if 0 < c < n}), n]
    return [Batch(S, tuple(cols[f.name][a:b] for f in S.fields), a)
            for a, b in zip(bounds, bounds[1:], strict=False)]


def run(q, parts, workers=2, assembly="auto", push=False) -> pd.DataFrame:
    engine = Engine(q, config=EngineConfig(workers=workers, batch_rows=len(parts[0]),
                                           assembly=assembly), push_up=push)
    sink = CollectSink()
    source = ArraySource(parts)
    engine.run(engine.feed(source) if push else source, sink)
    cols = sink.columns()
    return ref.to_frame(q.schema, [cols[n] for n in q.schema.names])


def assert_in_order(got: pd.DataFrame, want: pd.DataFrame, schema, rtol: float = 1e-6) -> None:
    """The same rows in the same order (floats to ``rtol``)."""
    assert len(got) == len(want), f"{len(got)} rows, expected {len(want)}"
    for f in schema.fields:
        a, b = got[f.name].to_numpy(), want[f.name].to_numpy()
        if "float" in f.dtype:
            np.testing.assert_allclose(a.astype(float), b.astype(float), rtol=rtol, err_msg=f.name)
        else:
            assert list(a) == list(b), f"column {f.name} differs"


STATELESS = {
    "mod": lambda m, r: Query.stream(S).where(col("key") % m == r),
    "true": lambda m, r: Query.stream(S).where(lit(True)),
    "false": lambda m, r: Query.stream(S).where(lit(False)),
    "all": lambda m, r: Query.stream(S),
    "derived": lambda m, r: (Query.stream(S).select("u", "v", kk=col("key") * m, w=col("v") * 2.5)
                             .where(col("kk") % 7 > r)),
    "renamed": lambda m, r: Query.stream(S).select("v", id=col("key")).where(col("id") > 100 * r),
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(sorted(STATELESS)), m=st.integers(2, 3), r=st.integers(0, 1),
       n=st.integers(1, 3000), cuts=st.lists(st.integers(1, 2999), max_size=8),
       workers=st.integers(1, 2), push=st.booleans(), seed=st.integers(0, 2**16))
def test_stateless_queries_give_the_reference_rows_in_input_order(kind, m, r, n, cuts, workers,
                                                                  push, seed):
    q = STATELESS[kind](m, r)
    cols = stream(n, seed)
    got = run(q, batches(cols, cuts), workers, push=push)
    assert_in_order(got, ref.evaluate(q.node, cols, {}).reset_index(drop=True), q.schema)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(slide=st.integers(1, 40), panes=st.integers(1, 4), selective=st.booleans(),
       n=st.integers(1, 3000), cuts=st.lists(st.integers(1, 2999), max_size=8),
       workers=st.integers(1, 2), assembly=st.sampled_from(["serial", "partitioned:2"]),
       seed=st.integers(0, 2**16))
def test_count_windows_give_the_reference_windows(slide, panes, selective, n, cuts, workers,
                                                   assembly, seed):
    """Windows of ``panes * slide`` tuples sliding by ``slide``, numbered by input offset; a
    selection below leaves gaps, never renumbers; any batching (long and short tasks)."""
    base = Query.stream(S).where(col("key") % 3 != 0) if selective else Query.stream(S)
    q = (base.window_rows(panes * slide, slide).group_by("k2")
         .aggregate(count(), sum_("key"), min_("v"), max_("v"), avg("v")))
    cols = stream(n, seed)
    got = run(q, batches(cols, cuts), workers, assembly)
    ref.assert_same_results(got, ref.evaluate(q.node, cols, {}), q.schema, rtol=1e-6)


def test_count_windows_are_numbered_by_input_offset():
    cols = stream(10, 0)
    q = Query.stream(S).window_rows(4, 2).aggregate(count(), sum_("key"))
    got = run(q, batches(cols, [3, 7]))
    assert list(got["window_end"]) == [2, 4, 6, 8, 10, 12]  # the last one holds tuples 8, 9
    assert list(got["window_start"]) == [-2, 0, 2, 4, 6, 8]
    assert list(got["count"]) == [2, 4, 4, 4, 4, 2]
    assert got["sum_key"].iloc[1] == cols["key"][0:4].sum()


def test_a_count_window_and_an_event_time_window_do_not_mix():
    rows = Query.stream(S).window_rows(10).aggregate(count().alias("a"))
    time = Query.stream(S).window(10).aggregate(count().alias("b"))
    with pytest.raises(QueryError, match="one kind"):
        rows.join_windows(time)
    with pytest.raises(QueryError, match="whole number of tuples"):
        Query.stream(S).window_rows(2.5)
    with pytest.raises(QueryError, match="multiple of its slide"):
        Query.stream(S).window_rows(10, 3)
    with pytest.raises(QueryError, match="applies to the input stream"):
        rows.window_rows(5)


def test_plans_and_explain():
    q = queries.get("PF-MOD2")
    assert q.schema.stream and q.schema.names == queries.get("SG1").source.schema.names
    p = plan(q.node)
    assert p.branches == () and p.selection is not None and list(p.operators) == ["select0"]
    assert p.producers == ["select0"] and "σ[((id % 2) == 0)]" in q.explain()
    rows = queries.get("LRB-ROWS")
    assert "ω_rows(4,096 tuples, 1,024 tuples)" in rows.explain() and plan(rows.node).rows
    with pytest.raises(QueryError, match="named window_start or window_end"):
        plan(Query.stream(S).select(window_end=col("key")).node)


def test_push_up_moves_a_stateless_querys_selection_but_none_below_a_count_window():
    q = Query.stream(S).select("v", kk=col("key") * 2).where(col("kk") > 5)
    p = push_up(q.node)
    assert repr(p.predicate) == repr(col("key") * 2 > 5)
    assert p.columns == ("timestamp", "key", "v") and "σ" not in p.plan.explain()
    whole = push_up(Query.stream(S).where(col("key") > 5).node)
    assert whole.columns == S.names and whole.plan.schema.names == S.names  # every attribute
    rows = push_up(Query.stream(S).where(col("key") > 5).window_rows(10).group_by("k2")
                   .aggregate(count()).node)
    assert rows.predicate is None and "σ" in rows.plan.explain()  # offsets stay the source's
    assert rows.columns == ("timestamp", "key", "k2")


def test_the_clocked_sink_positions_every_piece_of_a_stateless_batch(tmp_path):
    """A stateless batch over one log file is stored in pieces, each with its own last row's
    position as its clock (rows are not windows: any cut is whole)."""
    schema = queries.get("PF-TRUE").schema
    n = ClockedSink.CONFIG.file_bytes // schema.row_bytes + 12_345
    cols = tuple(np.arange(n).astype(f.numpy_dtype) for f in schema.fields)
    ends = np.arange(1, n + 1, dtype=np.int64) * 3  # positions: every third input tuple
    sink = ClockedSink(tmp_path)
    sink.open(schema)
    sink.write_clocked(Batch(schema, cols), {"input_end": 3 * n, "window_end": int(ends[-1])},
                       ends)
    sink.close()
    clocks = output_clocks(tmp_path, schema)
    assert len(clocks) >= 2 and clocks[-1] == (n, 3 * n)
    assert all(c == 3 * rows for rows, c in clocks)


def test_table1_puts_the_medians_beside_the_papers_ratios():
    from scabbard.experiments import pipefabric as pf

    runs = pd.DataFrame([{"query": q, "workers": w, "round": k, "tuples": 1000,
                          "result_rows": int(1000 * pf.PAPER[q][1]),
                          "tuples_per_s": (i + 1) * w * 1e6 * (1 + k % 2 * 99)}
                         for k in range(3) for w in (1, 2)
                         for i, q in enumerate(queries.TABLE1)])
    t = pf.table1(runs).set_index("query")
    assert list(t.index) == list(queries.TABLE1)
    np.testing.assert_allclose(t["paper_ratio"], [1, 937 / 720, 1160 / 720, 1390 / 720])
    np.testing.assert_allclose(t["measured_selectivity"], [1, 0.5, 0.1, 0])
    np.testing.assert_allclose(t["2w_Mtps"], [2, 4, 6, 8])  # the median of 1, 100, 1 (x w)
    np.testing.assert_allclose(t["1w_ratio"], [1, 2, 3, 4])
    with pytest.raises(ValueError, match="not in PipeFabric's Table 1"):
        pf.Settings(queries=["CM1"])


def test_the_parts_of_table1_add_up_to_the_cpu_of_a_run():
    from scabbard.experiments import pipefabric as pf

    # the engine's figures: ``fragment`` includes the selection's kernel and gather
    parts = {f"ns_{p}": v for p, v in zip(pf.PARTS, (0.5, 3.0, 4.5, 0.2, 0.1, 0.2),
                                          strict=True)}
    runs = pd.DataFrame([{"query": "PF-MOD2", "workers": 1, "round": k,
                          "tuples_per_s": 2e8 * (1 + k), "cpu_ns": 5.0, **parts}
                         for k in range(3)])
    t = pf.parts(runs).iloc[0]
    assert t["fragment"] == pytest.approx(1.0) and t["M tuples/s"] == 400
    assert sum(t[p] for p in pf.PARTS) == pytest.approx(t["CPU ns"])


@pytest.mark.spark
def test_a_selections_kernel_and_gather_are_timed_inside_its_tasks(tiny):
    """``select`` and ``gather`` are parts of every task of a stateless query (Table 1's
    per-part costs), counted per input tuple and inside ``fragment``."""
    from scabbard import timers

    ds = tiny["sg"]
    cfg = EngineConfig(workers=2, batch_rows=997)
    run_query(queries.get("PF-MOD2"), ds, NullSink(), cfg)  # its kernel loaded, unmeasured
    with timers.recording(timers.Totals()) as t:
        r = run_query(queries.get("PF-MOD2"), ds, CollectSink(), cfg,
                      Replay(max_tuples=3 * ds.rows))
    n = r.summary.tuples
    assert n == 3 * ds.rows and r.summary.result_rows == n // 2
    assert t.counts["fragment"] == n  # tasks of at most 997 rows, cut at every copy
    # and the warm-up's rows (a task's, once before the run: not inside a timed fragment)
    assert t.counts["select"] == t.counts["gather"] == n + 997
    assert t.calls["select"] == t.calls["gather"] == t.calls["fragment"] + 1
    assert 0 < t.cpu_s["select"] + t.cpu_s["gather"] <= t.cpu_s["fragment"]


# -- the named queries on the tiny datasets ----------------------------------------------------------
def output_clocks(out, schema) -> list[tuple[int, int]]:
    """Per committed piece of an exactly-once output: (rows committed through it, its clock's
    position, ``window_end``)."""
    got, rows = [], 0
    if (out / "log").is_dir():  # clocked: one segment per piece
        with BlockManager(out / "log", ClockedSink.CONFIG) as bm:
            sid = bm.stream("results", schema)
            for p in bm.load(sid):
                rows += len(p)
                got.append((rows, int(bm.read_with_meta(sid, p.offset)[1].view(np.int64)[1])))
        return got
    for f in sorted((out / "committed").glob("*.seg")):  # transactional: one per epoch
        head, batch = seg_fmt.decode(np.fromfile(f, np.uint8), schema, str(f))
        rows += len(batch)
        got.append((rows, int(np.asarray(head.meta, np.uint64).view(np.int64)[1])))
    return got


def sg_positions(ds, out: pd.DataFrame) -> np.ndarray:
    """Each SG result row's input offset + 1, from the row itself: its measurement id is its
    row in the dataset, and its timestamp says which replay of the dataset it came from."""
    ids = out["id"].to_numpy().astype(np.int64)
    step = int(ds.column("timestamp")[-1]) + 1
    copy = (out["timestamp"].to_numpy() - ds.column("timestamp")[ids]) // step
    return copy * ds.rows + ids + 1


@pytest.mark.spark
@pytest.mark.parametrize("name", [*queries.TABLE1, "LRB-ROWS"])
@pytest.mark.parametrize("batch_rows, workers, push, ingress", [
    (None, 2, False, 1), (997, 1, True, 1), (4096, 2, True, 1),
    # the source read by several ingress partitions
    (997, 2, True, 3), (4096, 2, False, 2)])
def test_named_queries_match_the_reference(tiny, name, batch_rows, workers, push, ingress):
    q, ds = queries.get(name), tiny[queries.workload_of(name)]
    sink = CollectSink()
    run_query(q, ds, sink=sink, config=EngineConfig(workers=workers, batch_rows=batch_rows,
                                                    ingress_partitions=ingress),
              replay=Replay(max_tuples=2 * ds.rows + 77), push_up=push)  # replayed: offsets go on
    looped = {n: np.concatenate([ds.column(n)] * 3)[:2 * ds.rows + 77] for n in ds.schema.names}
    step = int(ds.column("timestamp")[-1]) + 1
    looped["timestamp"] += (np.arange(len(looped["timestamp"])) // ds.rows) * step
    want = ref.evaluate(q.node, looped, ds.tables)
    got = sink.to_pandas()
    if q.schema.stream:
        assert_in_order(ref.to_frame(q.schema, [got[n] for n in q.schema.names]),
                        want.reset_index(drop=True), q.schema, rtol=0)
    else:
        ref.assert_same_results(got, want, q.schema, rtol=1e-6)
    assert len(want) > 0 or name == "PF-FALSE"


@pytest.mark.spark
def test_the_command_line_runs_them(tiny, tmp_path):
    import subprocess
    import sys

    import pyarrow.parquet as pq

    ds, out = tiny["sg"], tmp_path / "pf.parquet"
    base = [sys.executable, "-m", "scabbard", "run", "--data", str(ds.path), "--quiet"]
    r = subprocess.run([*base, "--query", "pf-mod10", "--out", str(out)], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert pq.read_table(out).num_rows == ds.rows // 10 and "PF-MOD10" in r.stdout
    r = subprocess.run([*base, "--query", "PF-MOD2", "--checkpoint-interval", "1", "--storage",
                        str(tmp_path / "s"), "--output", str(tmp_path / "o"), "--persist-at",
                        "ingress,output"], capture_output=True, text=True)
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1
    assert "only edge to persist is its input" in r.stderr


def completed(store) -> bool:
    return "completed" in json.loads((store / "run.json").read_text())


@pytest.mark.spark
@pytest.mark.parametrize("name, kind, persist, push", [
    ("PF-MOD2", ClockedSink, True, False), ("PF-MOD10", TransactionalSink, True, True),
    ("PF-MOD2", TransactionalSink, False, False),  # checkpoint-only: the source replays
    ("LRB-ROWS", ClockedSink, True, True), ("LRB-ROWS", TransactionalSink, False, False)])
def test_stopped_and_recovered_runs_give_the_failure_free_output(tiny, tmp_path, name, kind,
                                                                  persist, push):
    q, ds = queries.get(name), tiny[queries.workload_of(name)]
    n = 40 * ds.rows
    store, out = tmp_path / "store", tmp_path / "out"
    # paced so that the first 0.4 s never reach the end of the input, however fast the machine
    r = run_fault_tolerant(q, ds, store, kind(out), CFG, interval=0.02, max_tuples=n,
                           rate=n / 2.0, duration=0.4, layout=SMALL,
                           persist_input=persist, push_up=push)
    assert r.checkpoints and not completed(store)
    if q.schema.stream:  # a stateless query's checkpoint is its progress: no state at all
        assert all(rec.state == [] for rec in CheckpointStore(store / "checkpoints").records())
    resumed = []
    while not completed(store):
        r = run_fault_tolerant(q, ds, store, kind(out), CFG, interval=0.02, recover=True,
                               duration=0.4, layout=SMALL, push_up=push)
        resumed.append(r.resumed_from)
        assert len(resumed) < 100
    assert any(c is not None for c in resumed)
    got, want = read_output(out), failure_free(q, ds, n)
    v = compare(got, want, q.schema)
    assert v.ok and v.compared == len(want), v
    if q.schema.stream:
        assert_in_order(got, want, q.schema, rtol=0)


def test_a_stateless_outputs_prefix_is_its_first_rows_in_order():
    from scabbard.ft.verify import prefix_problem as _prefix_problem

    schema = queries.get("PF-TRUE").schema
    want = pd.DataFrame({f.name: np.arange(6).astype(f.numpy_dtype) for f in schema.fields})
    assert _prefix_problem(want.iloc[:3], want, schema) is None
    assert "another order" in _prefix_problem(want.iloc[[1, 0, 2]], want, schema)
    assert _prefix_problem(want.iloc[[0, 1, 1]], want, schema) is not None  # a duplicate
    assert _prefix_problem(want.iloc[[0, 2]], want, schema) is not None  # a gap


@pytest.mark.spark
@pytest.mark.parametrize("name, sink, push", [("PF-MOD10", "clocked", False),
                                              ("PF-MOD2", "transactional", True),
                                              ("LRB-ROWS", "clocked", False)])
def test_machine_crash_states_recover_exactly(tiny, name, sink, push):
    """Every explored machine-crash state holds a prefix of the failure-free output (a
    stateless query's: its first rows, in order) and recovers to exactly it."""
    from scabbard.check.crashstates import Explorer, Settings

    s = Settings(name, sink=sink, durability="machine", states=30, tuples=30_000, seed=3,
                 push_up=push)
    rep = Explorer(s, tiny[queries.workload_of(name)]).explore()
    assert rep.explored == 30 and rep.ok, rep.summary()


# -- real SIGKILLs ------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.parametrize("name, sink, push", [("PF-MOD10", "clocked", True),
                                              ("LRB-ROWS", "transactional", True),
                                              campaign("PF-MOD10", "clocked", False),
                                              campaign("PF-MOD2", "transactional", False),
                                              campaign("LRB-ROWS", "clocked", False)])
def test_kill_campaign(tiny, tmp_path, name, sink, push):
    """SIGKILL the engine process at random moments, recover, compare with a failure-free run:
    exactly once.  A stateless query's output is the failure-free one in order, and the clock
    of every committed piece is its last row's position: the input offset + 1 of its tuple
    (with push-up, the offset in the ingress p-stream, which holds exactly the result rows)."""
    ds = tiny[queries.workload_of(name)]
    rng = random.Random(f"{name}-{sink}-{push}")
    n = 120 * ds.rows  # paced to last ~6 s on any machine, so that a kill at 1.2-3 s lands
    c = Controller(campaign_config(
        name, ds.path, tmp_path, max_tuples=n, batch_rows=4000, rate=n / 6,
        push_up=push, interval=0.2, sink=sink))
    camp = c.run([rng.uniform(1.2, 3.0) for _ in range(3)])
    assert camp.kills >= 1, "the run finished before any kill: make it longer"
    assert camp.verdict.ok, camp.verdict
    q = queries.get(name)
    if not q.schema.stream:
        return
    got = read_output(c.output)
    assert_in_order(got, c.expected(), q.schema, rtol=0)
    positions = np.arange(1, len(got) + 1) if push else sg_positions(ds, got)
    clocks = output_clocks(c.output, q.schema)
    assert len(clocks) > 1 and clocks[-1][0] == len(got)
    assert all(clock == positions[rows - 1] for rows, clock in clocks), clocks[:5]
