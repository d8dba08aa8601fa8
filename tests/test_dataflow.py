"""PipeFabric's partitioned dataflow (:mod:`scabbard.engine.dataflow`): partition operators
on threads of their own, fed by key from the source, merged in order with punctuations -
the serial engine's results, and an idle partition never holds the merge back."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from scabbard import queries
from scabbard.batch import Batch
from scabbard.engine import Replay, run_query
from scabbard.engine.flowrun import PartitionedDataflow, run_partitioned
from scabbard.engine.sinks import CollectSink
from scabbard.engine.sources import ArraySource, ReplaySource, SourceBatch
from scabbard.query.expr import QueryError
from tests.reference import assert_same_results


def _frame(flow: PartitionedDataflow) -> pd.DataFrame:
    schema, got = flow.plan.schema, flow.report.results
    cols = {n: np.concatenate([c[n] for c in got]) if got else schema.field(n).empty(0)
            for n in schema.names}
    return Batch(schema, tuple(cols[n] for n in schema.names)).to_pandas()


def _serial(q, ds, source) -> pd.DataFrame:
    sink = CollectSink()
    run_query(q, ds, sink, source=source)
    return sink.to_pandas()


@pytest.mark.parametrize("name", ["SG2", "LRB1", "LRB2", "NQ", "LRB-ROWS"])
@pytest.mark.parametrize("parts, batch", [(1, 997), (2, 997), (3, 997), (2, 1 << 16)])
def test_the_partitioned_dataflow_gives_the_serial_engines_results(tiny, name, parts, batch):
    """Two replayed copies (the second's times shifted) in batches of 997 tuples, or of 64 k
    (most longer than a window: their own windows computed from their partials, the
    windows between two long batches from the first's tail and the second's head, others
    through each partition's state): every window's rows those of the serial engine,
    whatever the partitions."""
    q, ds = queries.get(name), tiny[queries.workload_of(name)]
    replay = Replay(max_tuples=2 * ds.rows)
    want = _serial(q, ds, ReplaySource(ds, batch, replay))
    flow = PartitionedDataflow(q, ds, parts, collect=True)
    report = flow.run(ReplaySource(ds, batch, replay))
    if batch > 1000 and name == "LRB2":  # the others' windows outlast a tiny copy
        assert report.long_batches > 0
    assert report.tuples == 2 * ds.rows and sum(report.per_partition) == report.tuples
    assert len(want) > 0 and report.result_rows == len(want)
    assert_same_results(_frame(flow), want, flow.plan.schema)
    ends = np.concatenate([c["window_end"] for c in report.results])
    assert np.all(ends[1:] >= ends[:-1])  # merged in window order


@pytest.mark.parametrize("view_rows", [0, 1 << 30])
def test_the_merge_orders_pieces_by_window_as_views_or_one_gathered_piece(monkeypatch,
                                                                          view_rows):
    """Each partition's pieces are in window order; the merge hands on every window's rows
    partition by partition - as views of the pieces where windows have many rows, else
    gathered into one piece - and loses, adds or reorders no row within a window's piece."""
    from scabbard.engine import dataflow

    monkeypatch.setattr(dataflow, "VIEW_ROWS", view_rows)
    pieces = [{"window_end": np.array([1, 1, 3, 3, 3, 7]), "v": np.arange(6)},
              {"window_end": np.array([3, 5, 5]), "v": np.arange(10, 13)},
              {"window_end": np.array([7, 8]), "v": np.arange(20, 22)}]
    for c in pieces:  # a column of two words a row (a uuid's) and a float column
        c["u"], c["f"] = np.stack([c["v"], -c["v"]], axis=1).astype(np.uint64), c["v"] / 4
    out = dataflow.in_window_order(pieces)
    end = np.concatenate([c["window_end"] for c in out])
    v = np.concatenate([c["v"] for c in out])
    assert end.tolist() == [1, 1, 3, 3, 3, 3, 5, 5, 7, 7, 8]
    assert v.tolist() == [0, 1, 2, 3, 4, 10, 11, 12, 5, 20, 21]
    assert np.array_equal(np.concatenate([c["u"] for c in out]),
                          np.stack([v, -v], axis=1).astype(np.uint64))
    assert np.concatenate([c["f"] for c in out]).tolist() == (v / 4).tolist()
    if view_rows == 0:  # a piece per window and partition, each a view of its piece
        owner = [pieces[i] for i in (0, 0, 1, 1, 0, 2, 2)]
        assert len(out) == len(owner)
        assert all(np.shares_memory(c["v"], p["v"]) for c, p in zip(out, owner, strict=True))
    else:
        assert len(out) == 1


def test_small_pieces_go_to_the_sink_joined_and_large_ones_as_they_are():
    from scabbard.engine.dataflow import coalesce

    sizes = [10, 30, 100, 5, 5, 60, 1]
    pieces, at = [], 0
    for n in sizes:
        pieces.append({"window_end": np.arange(at, at + n), "v": np.arange(at, at + n) * 2})
        at += n
    out = coalesce(pieces, least=64)
    assert [len(c["window_end"]) for c in out] == [40, 100, 70, 1]
    assert np.shares_memory(out[1]["v"], pieces[2]["v"])  # large: the piece itself
    assert np.array_equal(np.concatenate([c["v"] for c in out]), np.arange(at) * 2)
    assert coalesce([], 64) == []


def test_route_gives_every_tuple_to_one_partition_in_input_order(tiny):
    q, ds = queries.get("LRB2"), tiny["lrb"]
    flow = PartitionedDataflow(q, ds, 3)
    batch = ReplaySource(ds, 5000).peek()
    rows = flow.router.route(batch, 3)
    assert all(np.all(np.diff(r) > 0) for r in rows)
    assert np.array_equal(np.sort(np.concatenate(rows)), np.arange(len(batch)))
    assert all(len(r) for r in rows)  # LRB's thousands of keys reach each of the three
    # a key's tuples in one partition: the vehicles of partition 0 are nobody else's
    vehicle = batch.column("vehicle")
    assert not set(vehicle[rows[0]].tolist()) & set(vehicle[rows[1]].tolist())


@pytest.mark.parametrize("short_rows", [None, 0])
def test_row_numbers_route_in_four_bytes_where_a_batch_allows_and_give_the_same_windows(
        tiny, monkeypatch, short_rows):
    """A batch's row numbers go to the partitions as int32 (half the bytes to write and read),
    as int64 beyond that - the partitions' windows the same either way."""
    from scabbard.engine import routing

    if short_rows is not None:
        monkeypatch.setattr(routing, "SHORT_ROWS", short_rows)
    q, ds = queries.get("LRB1"), tiny["lrb"]
    flow = PartitionedDataflow(q, ds, 2, collect=True)
    batch = ReplaySource(ds, 5000).peek()
    assert {r.dtype for r in flow.router.route(batch, 2)} == \
        {np.dtype(np.int64 if short_rows == 0 else np.int32)}
    replay = Replay(max_tuples=2 * ds.rows)
    want = _serial(q, ds, ReplaySource(ds, 2000, replay))
    flow.run(ReplaySource(ds, 2000, replay))
    assert len(want) > 0
    assert_same_results(_frame(flow), want, flow.plan.schema)


@pytest.mark.parametrize("name", ["SG2", "LRB1", "NQ", "CM2"])
def test_the_routing_kernel_routes_as_route_rows_routes_the_keys(tiny, name):
    # the generated kernel's partitions, listed by scatter_rows, give each partition the rows
    # route_rows gives it from the tuples' keys: the partition a recovery routes a key's
    # checkpointed state to (CM2: a selection drops rows, which go to no partition)
    from scabbard.kernels import assembler as ka

    flow = PartitionedDataflow(queries.get(name), tiny[queries.workload_of(name)], 2)
    batch = ReplaySource(tiny[queries.workload_of(name)], 5000).peek()
    idx, keys = flow.router.keys(batch)
    for parts in (1, 2, 3, 4, 5, 7):  # up to four partitions counted in registers, more not
        routed, starts = ka.route_rows(idx, keys, parts)
        got = flow.router.route(batch, parts)
        assert len(got) == parts and sum(map(len, got)) == len(idx) > 0
        for p, rows in enumerate(got):
            assert np.array_equal(rows, routed[starts[p]:starts[p + 1]])
    from scabbard.kernels._check import KernelArgumentError

    with pytest.raises(KernelArgumentError, match="scatter_rows"):  # lists one row short
        ka.scatter_rows(np.zeros(5, np.uint8), np.empty((2, 4), np.int32), np.zeros(2, np.int64))


@pytest.mark.parametrize("parts", [1, 2])
def test_a_dataflow_compiles_the_routing_kernel_its_partitions_need_and_no_other(tiny, parts):
    """P = 1 routes by the selections alone, P > 1 hashes the keys: each kernel is compiled
    (or loaded from the cache) ahead of the run where it is needed, the other never; the keys'
    kernel only where P is planned from them."""
    flow = PartitionedDataflow(queries.get("SG2"), tiny["sg"], parts)
    made = {k for k in ("kernel", "routing", "selecting") if k in vars(flow.router)}
    assert made == {"routing" if parts > 1 else "selecting"}


@pytest.mark.parametrize("name", ["SG2", "LRB1", "NQ"])
def test_a_partition_reads_its_rows_in_place_as_the_kernel_reads_them_copied(tiny, name):
    """The front kernel in gather mode over a partition's row numbers writes what the
    branch's own kernel writes over those rows copied out of the batch."""
    from scabbard.engine.tasks import front_outputs

    q, ds = queries.get(name), tiny[queries.workload_of(name)]
    flow = PartitionedDataflow(q, ds, 2)
    b, batch = flow.branch, ReplaySource(ds, 5000).peek()
    ts, _ = flow.axis(batch)
    dims = (b.key_width, len(b.iops), len(b.fops))
    for rows in flow.router.route(batch, 2):
        n = len(rows)
        got, want = front_outputs(n, *dims), front_outputs(n, *dims)
        m = flow.kernel(n, rows, ts, *(batch.column(c) for c in b.input_columns),
                        *flow.rel_args, *got)
        copied = (np.take(batch.column(c), rows, axis=0) for c in b.input_columns)
        assert m == b.kernel(flow.cache_dir)(n, ts[rows], *copied, *flow.rel_args, *want) > 0
        assert all(np.array_equal(x[:m], y[:m]) for x, y in zip(got, want, strict=True))


def _one_key(ds, n: int) -> list[Batch]:
    """LRB's first ``n``-tuple batches with every tuple one vehicle's on one segment."""
    t = ds.stream
    cols = {f: np.array(t.column(f)) for f in t.schema.names}
    for name in ("vehicle", "highway", "direction", "position"):
        cols[name][:] = cols[name][0]
    whole = Batch(t.schema, tuple(cols[f] for f in t.schema.names))
    return [Batch(t.schema, tuple(c[lo:lo + n] for c in whole.columns), lo)
            for lo in range(0, t.rows, n)]


class _Gated(ArraySource):
    """Stops after batch ``gate`` until the dataflow has handed on a result row: windows
    must flow while the input is still coming (the test fails after ``patience`` s)."""

    def __init__(self, batches, gate: int, patience: float = 120.0):
        super().__init__(batches)
        self.gate, self.patience, self.flow, self.waited = gate, patience, None, None

    def batches(self):
        for seq, b in enumerate(self._batches):
            yield SourceBatch(seq, b, time.perf_counter())
            if seq == self.gate:
                deadline = time.monotonic() + self.patience
                while self.flow.report.result_rows == 0 and time.monotonic() < deadline:
                    time.sleep(0.01)
                self.waited = self.flow.report.result_rows


def test_idle_partitions_do_not_hold_the_merge_back(tiny):
    """Every tuple has one key, so three of four partitions never get one: each batch's end
    still moves their windows on, and the windows the busy partition closes are handed on
    before the next batch arrives - with the serial engine's results."""
    q, ds = queries.get("LRB2"), tiny["lrb"]
    batches = _one_key(ds, 997)
    assert len(batches) > 8
    want = _serial(q, ds, ArraySource(batches))
    flow = PartitionedDataflow(q, ds, 4, collect=True)
    source = _Gated(batches, gate=len(batches) // 2)
    source.flow = flow
    report = flow.run(source)
    assert sorted(report.per_partition)[:3] == [0, 0, 0]
    assert source.waited > 0, "no window handed on while the input was still coming"
    assert_same_results(_frame(flow), want, flow.plan.schema)


def test_the_planner_gives_one_key_one_partition_and_spread_keys_a_worker_each(tiny, tmp_path):
    """Without a partition count the dataflow plans one from its first batch: LRB2's
    thousands of vehicles spread over both workers' partitions; a dataset whose tuples are
    one vehicle's gets one partition (a second would idle); the plan's rule on its own."""
    from scabbard.data import write_dataset
    from scabbard.engine import EngineConfig
    from scabbard.engine.routing import plan_parts

    q, ds = queries.get("LRB2"), tiny["lrb"]
    flow = PartitionedDataflow(q, ds, None, config=EngineConfig(workers=2))
    assert flow.parts == 2 and flow.loads[0] == 1.0 and flow.loads[1] < 0.6
    one = _one_key(ds, ds.rows)[0]
    single = write_dataset(tmp_path / "one", one.schema, one.columns, workload="lrb",
                           parquet=False)
    flow = PartitionedDataflow(q, single, None, config=EngineConfig(workers=2))
    assert flow.parts == 1 and flow.loads == [1.0, 1.0]
    report = run_partitioned(q, single, None, config=EngineConfig(workers=2))
    assert report.parts == 1 and report.tuples == ds.rows
    assert plan_parts([1.0, 0.5, 0.34, 0.25]) == 4
    assert plan_parts([1.0, 0.52, 0.5, 0.49]) == 2  # within 10 % of the fastest
    assert plan_parts([1.0, 0.9]) == 1


def _four_second_windows(having: bool):
    """LRB1's shape (a HAVING the partitions apply) or NQ's (a keep-max the merge runs) over
    4 s windows of LRB's reports, which tiny batches outlast."""
    from scabbard.query import Query, avg, col, count
    from scabbard.workloads.lrb import SCHEMA

    q = (Query.stream(SCHEMA, "lrb")
         .select("highway", "direction", "speed", segment=col("position") // 5280)
         .window(4, 1).group_by("highway", "direction", "segment"))
    if having:
        return q.aggregate(avg("speed").alias("avg_speed")).having(col("avg_speed") < 60)
    return q.aggregate(count().alias("reports")).keep_max("reports")


@pytest.mark.parametrize("having", [True, False], ids=["having", "keep_max"])
@pytest.mark.parametrize("one_key", [False, True], ids=["keys", "one_key"])
def test_long_batches_cut_mid_pane_give_the_serial_engines_results(tiny, having, one_key):
    """Batches of 2,003 tuples (8 s of tiny LRB: longer than a 4 s window and two panes,
    each cut inside a pane, so two batches share one) over 3 partitions: the windows between
    two long batches come from the first's tail and the second's head, with a HAVING the
    partitions apply or a keep-max the merge runs - and, every tuple one key's, two
    partitions idle through long batches.  Every window's rows are the serial engine's, in
    window order."""
    q, ds = _four_second_windows(having), tiny["lrb"]

    def source():
        if one_key:
            return ArraySource(_one_key(ds, 2003))
        return ReplaySource(ds, 2003, Replay(max_tuples=2 * ds.rows))

    want = _serial(q, ds, source())
    flow = PartitionedDataflow(q, ds, 3, collect=True)
    report = flow.run(source())
    assert report.long_batches >= 3 * 10  # every partition's, idle or not
    assert len(want) > 0 and report.result_rows == len(want)
    assert_same_results(_frame(flow), want, flow.plan.schema)
    ends = np.concatenate([c["window_end"] for c in report.results])
    assert np.all(ends[1:] >= ends[:-1])
    if one_key:
        assert sorted(report.per_partition)[:2] == [0, 0]


@pytest.mark.parametrize("name, why", [("SG1", "global aggregate"), ("SG3", "one window"),
                                       ("LRB3", "per-window count"), ("YSB", "RelationJoin")])
def test_queries_whose_groups_cannot_be_routed_are_refused(tiny, name, why):
    q, ds = queries.get(name), tiny[queries.workload_of(name)]
    with pytest.raises(QueryError, match=why):
        PartitionedDataflow(q, ds, 2)


def test_a_p_stream_on_an_edge_a_budget_or_adaptive_kernels_are_refused(tiny):
    """The dataflow persists its input only and holds its state in memory with the generic
    kernels: anything else is one line's error before a thread starts."""
    from scabbard.engine import EngineConfig
    from scabbard.engine.adaptive import AdaptivePolicy
    from scabbard.engine.dataflow import Dataflow
    from scabbard.engine.runtime import Engine

    q, ds = queries.get("LRB1"), tiny["lrb"]
    cut = Engine(q, ds.tables, cut_after=frozenset({"window0"}))
    with pytest.raises(QueryError, match="persists its input only"):
        Dataflow(cut, 2)
    adaptive = Engine(q, ds.tables, EngineConfig(adaptive=AdaptivePolicy()))
    with pytest.raises(QueryError, match="generic kernels"):
        Dataflow(adaptive, 2)


def test_a_fault_tolerant_dataflow_of_a_query_it_cannot_route_makes_nothing(tiny, tmp_path):
    """A global aggregate as a fault-tolerant dataflow: refused in one line before a storage
    or an output folder is made."""
    from scabbard.engine import EngineConfig
    from scabbard.ft.recovery import run_fault_tolerant
    from scabbard.ft.sinks import ClockedSink

    q, ds = queries.get("SG1"), tiny["sg"]
    with pytest.raises(QueryError, match="global aggregate"):
        run_fault_tolerant(q, ds, tmp_path / "store", ClockedSink(tmp_path / "out"),
                           EngineConfig(workers=2, assembly="dataflow"), interval=0.1)
    assert not (tmp_path / "store").exists() and not (tmp_path / "out").exists()


def test_a_replay_for_a_duration_runs_through_the_partitions(tiny):
    ds = tiny["lrb"]
    report = run_partitioned(queries.get("LRB1"), ds, 2, Replay(max_tuples=3 * ds.rows))
    assert report.tuples == 3 * ds.rows and report.batches >= 3
    assert "2 partitions" in str(report)


def test_the_partitioned_bench_runs_the_dataflow_beside_the_engine(tiny, tmp_path):
    """``scabbard bench partitioned``'s measurement with ``dataflow`` among its modes: a row
    per worker count where the groups can be routed, a line saying why not where not."""
    from scabbard.experiments import partitioned as exp

    s = exp.Settings(rows=20_000, keys=100, rate=5_000, seconds=0.3, workers=(1, 2),
                     assembly=("serial", exp.DATAFLOW))
    ds = exp.skew_dataset("uniform", s, tmp_path)
    lines = []
    rows = exp._measure(exp.skew_query(s), ds, "skew:uniform", s, lines.append)
    flows = [r for r in rows if r["assembly"] == exp.DATAFLOW]
    assert [r["workers"] for r in flows] == [1, 2]
    assert all(r["tuples_per_s"] > 0 and r["result_rows"] > 0 for r in flows)
    # where the CPU went: the process's a tuple and its cores, every run; the dataflow's
    # threads apart (the partitions' work is most of the process's)
    assert all(r["cpu_ns"] > 0 and r["cores"] > 0 for r in rows)
    assert all(0 < r["partitions_ns"] < r["cpu_ns"] and r["merge_ns"] > 0 for r in flows)
    assert not any("partitions_ns" in r for r in rows if r["assembly"] == "serial")
    cpu = exp.parts(pd.DataFrame(rows))
    assert list(cpu[["assembly", "workers"]].itertuples(index=False, name=None)) == \
        [("serial", 1), ("serial", 2), (exp.DATAFLOW, 1), (exp.DATAFLOW, 2)]
    assert cpu["partitions_ns"].isna().tolist() == [True, True, False, False]
    sg1 = exp._measure(queries.get("SG1"), tiny["sg"], "SG1", s, lines.append)
    assert {r["assembly"] for r in sg1} == {"serial"}  # a global aggregate: one group
    assert any("dataflow" in line and "not run" in line for line in lines)


def test_the_partitioned_bench_keeps_the_median_of_its_rounds_and_their_range():
    from scabbard.experiments import partitioned as exp

    runs = pd.DataFrame({"workload": ["NQ"] * 6, "assembly": ["serial"] * 3 + ["dataflow"] * 3,
                         "workers": [2] * 6, "round": [0, 1, 2] * 2,
                         "tuples_per_s": [40e6, 50e6, 44e6, 30e6, 45e6, 46e6]})
    c = exp.comparison(runs).iloc[0]
    assert c["serial_2w_Mtps"] == 44 and c["dataflow_2w_Mtps"] == 45
    assert c["serial_2w_range"] == "40.0-50.0" and c["dataflow_2w_range"] == "30.0-46.0"
    assert c["dataflow_vs_serial_2w"] == pytest.approx(45 / 44)
    assert "serial_2w_range" not in exp.comparison(runs[runs["round"] == 0])


def test_the_partitioned_benchs_cpu_table_keeps_each_configurations_medians():
    from scabbard.experiments import partitioned as exp

    nan = np.nan
    runs = pd.DataFrame({"workload": ["NQ"] * 6, "assembly": ["serial"] * 3 + ["dataflow"] * 3,
                         "workers": [2] * 6, "tuples_per_s": [40e6, 44e6, 20e6, 30e6, 34e6, 35e6],
                         "cpu_ns": [50.0, 52.0, 90.0, 58.0, 62.0, 61.0],
                         "cores": [1.9, 2.0, 1.2, 1.8, 1.84, 1.5],
                         "route_ns": [nan] * 3 + [1.0, 2.0, 9.0],
                         "partitions_ns": [nan] * 3 + [50.0, 54.0, 70.0],
                         "merge_ns": [nan] * 3 + [4.0, 5.0, 4.5]})
    t = exp.parts(runs).set_index("assembly")
    assert t.loc["serial", "M tuples/s"] == 40 and t.loc["dataflow", "M tuples/s"] == 34
    assert t.loc["serial", "cpu_ns"] == 52 and t.loc["dataflow", "cores"] == 1.8
    assert t.loc["dataflow", "partitions_ns"] == 54 and t.loc["dataflow", "route_ns"] == 2
    assert np.isnan(t.loc["serial", "merge_ns"])


def test_a_failing_partition_fails_the_run_and_every_thread_ends(tiny, monkeypatch):
    """A partition that raises: the run raises its error, no partition or merge thread is
    left behind (each stops within its wait), and a flow runs once."""
    import threading

    from scabbard.engine import dataflow as dataflow_run

    calls = []
    windows = dataflow_run._Partition.windows

    def failing(self, *a):
        calls.append(self.p)
        if len(calls) == 5:
            raise RuntimeError("disk on fire")
        return windows(self, *a)

    monkeypatch.setattr(dataflow_run._Partition, "windows", failing)
    q, ds = queries.get("LRB2"), tiny["lrb"]
    flow = PartitionedDataflow(q, ds, 3)
    with pytest.raises(RuntimeError, match="disk on fire"):
        flow.run(ReplaySource(ds, 997, Replay(max_tuples=4 * ds.rows)))
    alive = [t.name for t in threading.enumerate()
             if t.name.startswith(("scabbard-partition", "scabbard-merge"))]
    assert alive == []
    with pytest.raises(RuntimeError, match="runs once"):
        flow.run(ReplaySource(ds, 997))


@pytest.mark.parametrize("name, kind, mode", [
    ("LRB2", "clocked", "full"), ("LRB1", "transactional", "incremental"),
    ("SG2", "clocked", "eventual"), ("NQ", "transactional", "full")])
def test_a_fault_tolerant_dataflow_stopped_and_recovered_gives_the_failure_free_output(
        tiny, tmp_path, name, kind, mode):
    """Persisted input, a checkpoint every 3 tasks, an exactly-once sink: stopped after every
    sixth of the input and recovered, each incarnation another assembly - 3 partitions, 2,
    the serial engine, as many as planned, ... (a checkpoint's state is the serial engine's:
    any P, or none, takes it on, routed by key) - and the committed output is the
    failure-free run's."""
    import itertools

    from ftkit import SMALL, StopAfter, failure_free

    from scabbard.engine import EngineConfig
    from scabbard.ft.recovery import run_fault_tolerant
    from scabbard.ft.runfile import recorded_run
    from scabbard.ft.sinks import ClockedSink, TransactionalSink, read_output
    from scabbard.ft.verify import compare

    q, ds = queries.get(name), tiny[queries.workload_of(name)]
    # LRB2's tasks longer than a window and two panes (their own windows; the state a
    # checkpoint takes: their tails); LRB2 emits ~30 rows a tuple: fewer tuples
    copies, batch = (6, 10_000) if name == "LRB2" else (20, 4000)
    n, store, out = copies * ds.rows, tmp_path / "store", tmp_path / "out"
    stop = max(1, n // batch // 6)  # tasks an incarnation reads from the source
    sink = {"clocked": ClockedSink, "transactional": TransactionalSink}[kind]
    assemblies = itertools.cycle(["dataflow:3", "dataflow:2", "serial", "dataflow"])
    resumed = []

    def run(**kw):
        assembly = next(assemblies)
        cfg = EngineConfig(workers=2, batch_rows=batch, assembly=assembly)
        r = run_fault_tolerant(q, ds, store, sink(out), cfg, interval=None, every_tasks=3,
                               layout=SMALL, wrap_source=lambda s: StopAfter(s, stop), **kw)
        resumed.append((assembly, r.resumed_from))

    run(max_tuples=n, checkpoint_mode=mode)
    while not recorded_run(store).get("completed"):
        run(recover=True)
        assert len(resumed) < 20
    assert len(resumed) >= 6
    # dataflows resumed from checkpoints a dataflow took, and from the serial engine's
    assert all(c is not None for _, c in resumed[1:])
    v = compare(read_output(out), failure_free(q, ds, n), q.schema)
    assert v.ok, v


def test_the_partitioned_benchs_figure_draws_each_configurations_median_and_range(tmp_path):
    """A bar per (assembly, workers) and workload: the rounds' median, their range as the
    whisker - at one workload too, without a warning (bars of one value each)."""
    import warnings

    import pandas as pd
    from matplotlib.container import BarContainer

    from scabbard.experiments import partitioned as exp

    table = pd.DataFrame([{"workload": "SG2", "assembly": a, "workers": 2,
                           "tuples_per_s": t * 1e6} for a, ts in (("serial", (30, 34, 32)),
                                                                   (exp.DATAFLOW, (25, 27)))
                          for t in ts])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = exp.plot(table, str(tmp_path))
    bars = [c for c in fig.axes[0].containers if isinstance(c, BarContainer)]
    assert [[b.get_height() for b in c] for c in bars] == [[32.0], [26.0]]
