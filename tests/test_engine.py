"""The engine against the reference evaluator: all eleven queries, any batching, any worker count."""

import math

import numpy as np
import pandas as pd
import pytest
from ftkit import campaign
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reference as ref
from scabbard import queries
from scabbard.batch import Batch, ReplayBatch, SpanBatch
from scabbard.engine import (
    ArraySource,
    CollectSink,
    Engine,
    EngineConfig,
    Replay,
    ReplaySource,
    run_query,
    runtime,
)
from scabbard.ft.config import PersistConfig
from scabbard.outputs import read_metrics
from scabbard.query import Query, avg, col, count, max_, min_, sum_
from scabbard.schema import Field, Schema

pytestmark = pytest.mark.spark  # the tiny datasets come from the Spark generators


def engine_frame(query, sink):
    cols = sink.columns()
    return ref.to_frame(query.schema, [cols[n] for n in query.schema.names])


def expected(query, ds):
    return ref.evaluate(query.node, {n: ds.column(n) for n in ds.schema.names}, ds.tables)


_EXPECTED: dict = {}


def expected_once(query, ds):
    """:func:`expected`, computed once per query and dataset (SG3's hour window makes the
    reference explode every tuple into 3,600 windows)."""
    key = (query.name, str(ds.path))
    if key not in _EXPECTED:
        _EXPECTED[key] = expected(query, ds)
    return _EXPECTED[key]


@pytest.mark.parametrize("name", [n for n in queries.NAMES if n != "SG1"])
@pytest.mark.parametrize("batch_rows, workers, assembly, ingress", [
    (None, 2, "serial", 1), (4096, 2, "serial", 1), (997, 1, "serial", 1),
    # the sequential windows' groups split by key between partitions
    (4096, 2, "partitioned:3", 1), (997, 1, "partitioned", 1), (4096, 4, "auto", 1),
    # the source read by several ingress partitions
    (997, 2, "serial", 3), (4096, 2, "partitioned:3", 2), (None, 8, "auto", None)])
def test_paper_queries_match_the_reference(tiny, name, batch_rows, workers, assembly, ingress):
    q = queries.get(name)
    ds = tiny[queries.workload_of(name)]
    sink = CollectSink()
    report = run_query(q, ds, sink=sink, config=EngineConfig(workers=workers, batch_rows=batch_rows,
                                                               assembly=assembly,
                                                               ingress_partitions=ingress))
    assert report.summary.tuples == ds.rows
    ends = sink.columns()["window_end"]
    assert np.all(np.diff(ends) >= 0), "windows reach the sink in order"
    ref.assert_same_results(engine_frame(q, sink), expected_once(q, ds), q.schema)


def test_sg3_join_in_pieces_on_the_partitions_threads_matches_the_reference(tiny, monkeypatch):
    """With partitioned assembly, SG3's lookup join cuts its left side into pieces joined at
    once on the partitions' threads (here from 8 rows on): the same results, in order."""
    import threading

    from scabbard.engine import physical

    threads = set()
    lookup = physical.join_one_per_window

    def counted(*args):
        threads.add(threading.current_thread().name)
        return lookup(*args)
    monkeypatch.setattr(physical, "JOIN_PIECE_ROWS", 8)
    monkeypatch.setattr(physical, "join_one_per_window", counted)
    q, ds = queries.get("SG3"), tiny["sg"]
    sink = CollectSink()
    run_query(q, ds, sink=sink, config=EngineConfig(workers=2, batch_rows=4096,
                                                    assembly="partitioned:3"))
    assert any(t.startswith("partition") for t in threads), threads
    ends = sink.columns()["window_end"]
    assert np.all(np.diff(ends) >= 0), "windows reach the sink in order"
    ref.assert_same_results(engine_frame(q, sink), expected_once(q, ds), q.schema)


def test_sg1_hour_window_matches_the_reference(spark, tmp_path):
    from scabbard.workloads import sg

    ds = sg.SPEC.generate(duration=40, rate=100, out=tmp_path, spark=spark, progress=False)
    q = queries.get("SG1")
    for batch_rows in (None, 333):
        sink = CollectSink()
        run_query(q, ds, sink=sink, config=EngineConfig(workers=2, batch_rows=batch_rows))
        ref.assert_same_results(engine_frame(q, sink), expected(q, ds), q.schema)


def test_endless_replay_shifts_time_and_stops_at_the_limit(tiny):
    ds = tiny["cm"]
    q = queries.get("CM1")
    sink = CollectSink()
    report = run_query(q, ds, sink=sink, replay=Replay(max_tuples=3 * ds.rows + 5),
                       config=EngineConfig(batch_rows=5000))
    assert report.summary.tuples == 3 * ds.rows + 5
    ends = sink.columns()["window_end"]
    step = int(ds.column("timestamp")[-1]) + 1
    assert ends[-1] > 3 * step and np.all(np.diff(ends) >= 0)
    # the second copy's windows equal the first copy's, shifted by the replay step
    once = CollectSink()
    run_query(q, ds, sink=once)
    first = once.columns()
    cols = sink.columns()
    mid = (cols["window_end"] > step + 60_000) & (cols["window_end"] <= 2 * step)
    inner = (first["window_end"] > 60_000) & (first["window_end"] <= step)
    np.testing.assert_array_equal(np.sort(cols["window_end"][mid]) - step,
                                  np.sort(first["window_end"][inner]))


def test_a_replayed_copy_shifts_its_timestamps_where_they_are_read(tiny):
    ds = tiny["sg"]
    batches = [sb.batch for sb in ReplaySource(ds, 4000, Replay(max_tuples=2 * ds.rows)).batches()]
    b = next(b for b in batches if b.offset >= ds.rows)  # in the second copy
    assert isinstance(b, ReplayBatch)
    raw, shift = b.event_time()  # nothing shifted yet: the dataset's own timestamps
    step = int(ds.column("timestamp")[-1]) + 1
    lo = b.offset - ds.rows
    assert shift == step and np.shares_memory(raw, ds.column("timestamp"))
    np.testing.assert_array_equal(raw, ds.column("timestamp")[lo:lo + len(b)])
    value = b.column("value")  # another column: a view of the dataset
    assert np.shares_memory(value, ds.column("value"))
    np.testing.assert_array_equal(b.timestamps, raw + step)  # read: shifted, and kept
    assert b.column("timestamp") is b.timestamps and b.event_time()[1] == 0
    assert b.slice(1, 3).timestamps.tolist() == (raw[1:3] + step).tolist()
    # plain arrays over the dataset's maps: slicing a np.memmap runs a Python hook per slice
    for batch in batches[:2]:
        for name in ds.schema.names:
            assert type(batch.column(name)) is np.ndarray


@pytest.mark.parametrize("name", ["SG1", "CM2", "LRB1", "YSB"])
def test_deferred_replay_shifts_give_the_results_of_shifted_batches(tiny, name):
    """The fragment adds a replayed copy's shift where it cuts panes; the same stream with
    its timestamps shifted up front (plain batches) gives the same windows."""
    q = queries.get(name)
    ds = tiny[queries.workload_of(name)]
    n = 3 * ds.rows + 11
    deferred = [sb.batch for sb in ReplaySource(ds, 3000, Replay(max_tuples=n)).batches()]
    assert sum(isinstance(b, ReplayBatch) for b in deferred) >= 2
    shifted = [Batch(b.schema, b.columns, b.offset) for b in
               (sb.batch for sb in ReplaySource(ds, 3000, Replay(max_tuples=n)).batches())]
    runs = []
    for batches in (deferred, shifted):
        sink = CollectSink()
        run_query(q, ds, sink=sink, source=ArraySource(batches),
                  config=EngineConfig(workers=2, batch_rows=3000))
        runs.append(engine_frame(q, sink))
    assert len(runs[0]) > 0
    pd.testing.assert_frame_equal(runs[0], runs[1])
    # the fragments never made the shifted column of a copy's batch
    assert all(b._columns is None for b in deferred if isinstance(b, ReplayBatch))


@pytest.mark.parametrize("name", ["SG1", "SM"])
def test_a_global_aggregate_folded_in_pieces_gives_the_whole_tasks_results(tiny, name,
                                                                           monkeypatch):
    """A global aggregate's fragment runs its front kernel piece by piece and folds each
    piece on from the last partial: any piece size gives the same windows, bit for bit."""
    q = queries.get(name)
    ds = tiny[queries.workload_of(name)]
    runs = []
    for piece in (1 << 30, 97, 1000):
        monkeypatch.setattr(runtime, "PIECE_ROWS", piece)
        sink = CollectSink()
        run_query(q, ds, sink=sink, replay=Replay(max_tuples=2 * ds.rows + 7),
                  config=EngineConfig(workers=2, batch_rows=5000))
        runs.append(engine_frame(q, sink))
    assert len(runs[0]) > 10
    for other in runs[1:]:
        pd.testing.assert_frame_equal(other, runs[0], check_exact=True)


@pytest.mark.parametrize("name", ["CM2", "LRB2", "LRB3"])
def test_a_task_of_a_window_and_two_panes_has_windows_of_its_own(tiny, name):
    """A task long enough to hold one window whole past its first pane and before its last
    (``Branch.long_panes``) computes its windows in its fragment, and its boundaries with
    its neighbours are computed from the two tasks' edges: tasks of 1.5 windows (short while
    a task needed two windows, so every window went through the serial state) give the
    reference's results."""
    q = queries.get(name)
    ds = tiny[queries.workload_of(name)]
    engine = Engine(q, ds.tables, EngineConfig(workers=2))
    per_ms = ReplaySource(ds, 1).tuples_per_ms()
    b = engine.plan.branches[0]
    rows = int(1.5 * b.panes * b.slide_ms * per_ms)
    assert b.long_panes == b.panes + 2 < 1.5 * b.panes < 2 * b.panes
    source = ReplaySource(ds, rows)
    r = engine._fragment(0, source.peek(), 0.0)
    part = r.parts[0]
    assert part.long and part.internal is not None and len(part.internal["window_end"]) > 0
    assert part.last_pane - part.first_pane + 1 < 2 * b.panes  # short by the old rule
    sink = CollectSink()
    report = run_query(q, ds, sink=sink, config=EngineConfig(workers=2, batch_rows=rows))
    assert report.summary.tuples == ds.rows
    ref.assert_same_results(engine_frame(q, sink), expected_once(q, ds), q.schema)


def sizing(ds, name: str, **config):
    """What a run's batch size is chosen from: the data's tuples per ms, the stream's first
    rows (the probe's sample) and the query's engine."""
    return (ReplaySource(ds, 1).tuples_per_ms(), ReplaySource(ds, runtime.PROBE_ROWS).peek(),
            Engine(queries.get(name), ds.tables, EngineConfig(**config)))


def test_a_run_batches_larger_where_that_costs_no_latency(tiny):
    """A cheap fragment's run has tasks of TASK_WORK_S of work, up to THROUGHPUT_BATCH rows;
    at a rate only as large as fills in FILL_S, never below the windows' own size; an
    expensive fragment's, a set size's and a stateless query's stay."""
    ds = tiny["cm"]
    per_ms, sample, engine = sizing(ds, "CM2")
    own = engine.batch_rows_for(per_ms)
    assert own < runtime.THROUGHPUT_BATCH  # CM2's 4 windows' worth: the floor, MIN_BATCH
    assert engine.run_batch_rows(per_ms, None) == own  # nothing measured: its own
    cost = engine.fragment_cost(sample)
    assert 0 < cost < 1e-6
    # the size from a cost (the probe's noise is test_a_runs_task_size_is_a_power_of_two...)
    engine.fragment_cost = lambda batch: cost
    cheap = min(runtime.THROUGHPUT_BATCH, 1 << round(math.log2(runtime.TASK_WORK_S / cost)))
    unpaced = engine.run_batch_rows(per_ms, None, sample)
    assert unpaced == max(own, cheap)
    assert engine.run_batch_rows(per_ms, 1e6, sample) == own  # 2,000 rows in 2 ms: its own
    fixed = sizing(ds, "CM2", batch_rows=4000)[2]
    assert fixed.run_batch_rows(per_ms, None, sample) == 4000
    # a fragment of a quarter of a microsecond a tuple keeps the windows' own size
    slow = sizing(ds, "CM2")[2]
    slow.fragment_cost = lambda batch: 250e-9
    assert slow.run_batch_rows(per_ms, None, sample) == own


def test_a_runs_task_size_is_a_power_of_two_the_probes_noise_does_not_move(tiny):
    """The fragment's cost is probed on a fraction of a ms of work, +-15% from run to run:
    the task size is the power of two nearest the target, the same across that noise."""
    ds = tiny["cm"]
    per_ms, sample, engine = sizing(ds, "CM2")
    assert engine.batch_rows_for(per_ms) < 1 << 19 < runtime.THROUGHPUT_BATCH
    centre = runtime.TASK_WORK_S / (1 << 19)  # the cost whose target is 2^19 rows
    sizes = set()
    for noise in (0.87, 0.95, 1.0, 1.07, 1.15):
        engine.fragment_cost = lambda batch, c=centre * noise: c
        sizes.add(engine.run_batch_rows(per_ms, None, sample))
    assert sizes == {1 << 19}
    engine.fragment_cost = lambda batch: centre * 1.6  # 2^19 / 1.6 is nearer 2^18
    assert engine.run_batch_rows(per_ms, None, sample) == 1 << 18


def test_a_global_aggregates_tasks_run_on_across_the_replayed_copies(tiny):
    """A global aggregate's fragment reads a batch part by part, so its batches may run on
    past a small dataset's end (a SpanBatch); it gets tasks of GLOBAL_TASK_WORK_S, up to
    MAX_BATCH rows.  A keyed query and a two-branch query keep batches within a copy; with
    push-up the reducer makes what it keeps of a span batch whole, and tasks span copies as
    without it (the modes of a query run the same tasks)."""
    ds = tiny["sm"]
    per_ms, sample, engine = sizing(ds, "SM")
    assert engine.spans_copies
    assert 0 < engine.fragment_cost(sample) < 1e-6
    engine.fragment_cost = lambda batch: runtime.GLOBAL_TASK_WORK_S / (1 << 21)
    assert engine.run_batch_rows(per_ms, None, sample) == 1 << 21 > 4 * ds.rows
    engine.fragment_cost = lambda batch: 1e-12  # up to MAX_BATCH
    assert engine.run_batch_rows(per_ms, None, sample) == runtime.MAX_BATCH
    assert not Engine(queries.get("CM2"), tiny["cm"].tables, EngineConfig()).spans_copies
    assert not Engine(queries.get("SG3"), tiny["sg"].tables, EngineConfig()).spans_copies
    assert Engine(queries.get("SM"), ds.tables, EngineConfig(), push_up=True).spans_copies


def test_push_up_makes_only_what_it_keeps_of_a_span_batch_whole(tiny):
    """The reducer reads a span batch's pieces (each copy's deferred timestamp shift added as
    it joins them) and joins only the columns it keeps or its predicate reads: the same
    batch as from the stream's rows made whole, and the span batch's own columns never
    made."""
    ds = tiny["cm"]
    rows = ds.rows
    reduce = Engine(queries.get("CM2"), ds.tables, EngineConfig(), push_up=True).reduce
    span = next(iter(ReplaySource(ds, 2 * rows + 7, Replay(max_tuples=3 * rows),
                                  span=True).batches()))
    batch = span.batch
    assert isinstance(batch, SpanBatch)
    whole = Batch(batch.schema, tuple(np.concatenate([p.columns[j] for p in batch.segments()])
                                      for j in range(len(batch.schema.fields))), batch.offset)
    got, want = reduce(batch), reduce(whole)
    assert batch._columns is None and len(got) == len(want) > 0
    for a, b in zip(got.columns, want.columns, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_span_batch_is_its_copies_side_by_side_and_made_only_when_read(tiny):
    """A batch past a copy's end holds a zero-copy part per copy, each with its copy's
    shift; its columns, made on first read, are the stream's rows as a batch within the
    copies gives them."""
    ds = tiny["sm"]
    rows = ds.rows
    n = 3 * rows + 5
    spans = [sb.batch for sb in ReplaySource(ds, 2 * rows + 3, Replay(max_tuples=n),
                                             span=True).batches()]
    plain = [sb.batch for sb in ReplaySource(ds, 2 * rows + 3, Replay(max_tuples=n)).batches()]
    assert [len(b) for b in spans] == [2 * rows + 3, rows + 2]
    first = spans[0]
    assert isinstance(first, SpanBatch) and [len(p) for p in first.segments()] == [rows, rows, 3]
    assert [p.offset for p in first.segments()] == [0, rows, 2 * rows]
    assert first._columns is None
    step = int(ds.column("timestamp")[-1]) + 1
    assert first.event_edges() == (int(ds.column("timestamp")[0]), 2 * step +
                                   int(ds.column("timestamp")[2]))
    assert first._columns is None  # the edges made nothing
    for part in first.segments():  # views of the dataset, not copies
        raw = part._raw if isinstance(part, ReplayBatch) else part.columns
        assert all(np.shares_memory(c, d) for c, d in zip(raw, ds.stream.columns, strict=True))
    for j in range(len(ds.schema.fields)):  # the timestamps with each copy's shift
        np.testing.assert_array_equal(np.concatenate([b.columns[j] for b in spans]),
                                      np.concatenate([b.columns[j] for b in plain]))


@pytest.mark.parametrize("name", ["SG1", "SM"])
def test_a_global_aggregate_over_span_batches_gives_the_copy_by_copy_results(tiny, name):
    """Batches that run on across copies give, bit for bit, the windows of batches that stop
    at each copy's end, and the fragment never joins a span batch's parts."""
    q = queries.get(name)
    ds = tiny[queries.workload_of(name)]
    n = 5 * ds.rows + 7
    runs, made = [], []
    for span in (True, False):
        batches = [sb.batch for sb in ReplaySource(ds, 2 * ds.rows + 100, Replay(max_tuples=n),
                                                  span=span).batches()]
        sink = CollectSink()
        run_query(q, ds, sink=sink, source=ArraySource(batches),
                  config=EngineConfig(workers=2, batch_rows=2 * ds.rows + 100))
        runs.append(engine_frame(q, sink))
        made += [b._columns is not None for b in batches if isinstance(b, SpanBatch)]
    assert len(made) >= 2 and not any(made)
    assert len(runs[0]) > 10
    pd.testing.assert_frame_equal(runs[0], runs[1], check_exact=True)


def test_metrics_log_and_parquet_sink(tiny, tmp_path):
    ds = tiny["lrb"]
    q = queries.get("LRB1")
    out = tmp_path / "lrb1.parquet"
    log = tmp_path / "metrics.jsonl"
    from scabbard.outputs import MetricsLog, ParquetSink

    report = run_query(q, ds, sink=ParquetSink(out), replay=Replay(max_tuples=20 * ds.rows),
                       watch=(MetricsLog(log),),
                       config=EngineConfig(batch_rows=8192, metrics_interval=0.05))
    import pyarrow.parquet as pq

    table = pq.read_table(out)
    assert table.column_names == list(q.schema.names)
    assert table.num_rows == report.summary.result_rows > 0
    m = read_metrics(log)
    assert list(m["event"].iloc[[0, -1]]) == ["start", "end"]
    samples = m[m["event"] == "sample"]
    assert len(samples) >= 1 and {"latency_p50_ms", "tuples_per_s"} <= set(m.columns)
    assert m["tuples"].iloc[-1] == 20 * ds.rows
    assert report.summary.latency_ms["p50"] >= 0


def test_a_relation_must_be_bound(tiny):
    q = queries.get("YSB")
    from scabbard.query import QueryError

    with pytest.raises(QueryError, match="joins relation 'ad_campaign'"):
        Engine(q, relations={})


# -- random streams and random queries: any batching gives the one-batch answer ------------------
SCHEMA = Schema("rand", (Field("timestamp", "int64"), Field("k", "int32"), Field("x", "int64"),
                         Field("y", "float32")))


@st.composite
def random_runs(draw):
    n = draw(st.integers(1, 400))
    gaps = draw(st.lists(st.integers(0, 900), min_size=n, max_size=n))
    ts = np.cumsum(np.asarray(gaps, dtype=np.int64))
    k = np.asarray(draw(st.lists(st.integers(0, draw(st.sampled_from([0, 2, 40]))),
                                 min_size=n, max_size=n)), dtype=np.int32)
    x = np.asarray(draw(st.lists(st.integers(-50, 50), min_size=n, max_size=n)), dtype=np.int64)
    # Window sums of floats are maintained by adding and subtracting (compensated): exact to
    # ~1e-15 of the largest values that passed through the window, so values spanning 40
    # orders of magnitude (hypothesis likes 1e-38 next to 75) are outside what it promises.
    y = np.asarray(draw(st.lists(st.one_of(st.just(0.0), st.floats(2.0**-20, 100, width=32),
                                           st.floats(-100, -(2.0**-20), width=32)),
                                 min_size=n, max_size=n)), dtype=np.float32)
    slide = draw(st.sampled_from([0.5, 1, 2]))
    panes = draw(st.sampled_from([1, 3, 10]))
    grouped = draw(st.booleans())
    where = draw(st.booleans())
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=8))) - {n})
    workers = draw(st.sampled_from([1, 2]))
    return ts, k, x, y, slide, panes, grouped, where, cuts, workers


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(random_runs())
def test_random_queries_any_batching(run):
    ts, k, x, y, slide, panes, grouped, where, cuts, workers = run
    q = Query.stream(SCHEMA)
    if where:
        q = q.where(col("x") > -20)
    w = q.window(slide * panes, slide)
    if grouped:
        w = w.group_by("k")
    q = w.aggregate(count(), sum_("x"), avg("y"), min_("x"), max_("y"))
    columns = (ts, k, x, y)
    bounds = [0, *cuts, len(ts)]
    batches = [Batch(SCHEMA, tuple(c[a:b] for c in columns), a)
               for a, b in zip(bounds, bounds[1:], strict=False)]
    sink = CollectSink()
    Engine(q, config=EngineConfig(workers=workers)).run(ArraySource(batches), sink)
    want = ref.evaluate(q.node, dict(zip(SCHEMA.names, columns, strict=True)), {})
    ref.assert_same_results(engine_frame(q, sink), want, q.schema, rtol=1e-6)


@pytest.mark.parametrize("name, partitions", [("CM1", 1), ("YSB", 1), ("LRB1", 1),
                                               campaign("SG3", 1),  # (50 s: its hour window)
                                               ("CM1", 3), ("LRB1", 2)])
def test_persisted_ingress_gives_the_same_results_and_bounded_disk(tiny, tmp_path, name,
                                                                   partitions):
    """--persist-input: every batch is stored before processing; released input is trimmed
    (with several ingress partitions too, each appending its own batches)."""
    from scabbard.ft.ingress import run_persisted
    from scabbard.storage import BlockManager, StorageConfig

    q = queries.get(name)
    ds = tiny[queries.workload_of(name)]
    cfg = StorageConfig(file_bytes=1 << 20, pool_files=2, bulk_bytes=1 << 18)
    span = int(ds.column("timestamp")[-1]) + 1  # event time of one copy
    short = -(-2 * Engine(q, ds.tables).horizon_ms // span) + 1  # well past the window horizon
    pools = {}
    for copies in (short, 6 * short):
        sink = CollectSink()
        n = copies * ds.rows
        run_persisted(q, ds, PersistConfig(tmp_path / str(copies), layout=cfg), sink=sink,
                      config=EngineConfig(batch_rows=4000, ingress_partitions=partitions),
                      replay=Replay(max_tuples=n))
        with BlockManager(tmp_path / str(copies), cfg) as bm:
            pools[copies] = bm.pool_bytes
    plain = CollectSink()
    run_query(q, ds, sink=plain, replay=Replay(max_tuples=n), config=EngineConfig(batch_rows=4000))
    ref.assert_same_results(engine_frame(q, sink), engine_frame(q, plain), q.schema)
    # disk holds the window horizon plus the batches in flight, however long the run
    row = sum(f.itemsize for f in ds.schema.fields)
    horizon_rows = ds.rows * Engine(q, ds.tables).horizon_ms / span
    ingress = 8 * cfg.bulk_bytes  # the ingress p-stream's byte bound (run_query)
    in_flight = (2 * 2 + 2 + 2) * 4000  # task queue, workers, assembly
    # the files' granularity, and the spare file a growing pool makes ahead of its writer
    bound = (horizon_rows + in_flight) * row * 1.2 + ingress + 3 * cfg.file_bytes
    assert pools[6 * short] <= bound < n * row / 2, (pools, bound)
    with BlockManager(tmp_path / str(6 * short), cfg) as bm:
        sid = bm.stream("input", ds.schema)
        assert bm.durable_end(sid) == n  # everything was persisted...
        assert bm.start(sid) > 0  # ...and the old input released
        stored = list(bm.load(sid))
        assert stored[-1].end == n
        rows = np.arange(stored[0].offset, n) % ds.rows  # endless replay: row = offset mod rows
        for i, name_ in enumerate(ds.schema.names[1:], start=1):
            got = np.concatenate([b.columns[i] for b in stored])
            np.testing.assert_array_equal(got, np.asarray(ds.column(name_))[rows])


@pytest.mark.parametrize("name", ["CM1", "LRB1", "YSB"])
def test_a_raw_task_over_several_p_units_is_read_whole_with_the_same_results(tiny, tmp_path,
                                                                             name):
    """Raw persisted input: a task larger than a quarter of a pool file is stored as several
    p-units (its slices, each behind its retain marker) and its fragment reads the task's own
    batch whole - the results those of the same tasks in memory."""
    from scabbard.ft.ingress import run_persisted
    from scabbard.storage import BlockManager, StorageConfig

    q = queries.get(name)
    ds = tiny[queries.workload_of(name)]
    cfg = StorageConfig(file_bytes=1 << 20, pool_files=2, bulk_bytes=1 << 18)
    piece = Engine(q, ds.tables).piece_rows(cfg.file_bytes, cfg.data_start)
    config = EngineConfig(batch_rows=3 * piece + 17)
    engine = Engine(q, ds.tables, config)
    rows = engine.task_rows(ds, None, engine.unit_rows(cfg.file_bytes, cfg.data_start))
    assert engine.raw_tasks_in_pieces and 2 * piece < rows  # each task: 3 p-units or more
    n = 7 * rows + 123
    sink, plain = CollectSink(), CollectSink()
    run_persisted(q, ds, PersistConfig(tmp_path, layout=cfg), sink=sink, config=config,
                  replay=Replay(max_tuples=n))
    run_query(q, ds, sink=plain, replay=Replay(max_tuples=n), config=config)
    ref.assert_same_results(engine_frame(q, sink), engine_frame(q, plain), q.schema)
    with BlockManager(tmp_path, cfg) as bm:
        sid = bm.stream("input", ds.schema)
        assert bm.durable_end(sid) == n
        stored = list(bm.load(sid))
    assert stored and max(len(u) for u in stored) <= piece
    assert all(a.end == b.offset for a, b in zip(stored, stored[1:], strict=False))


def test_replay_resumes_at_any_offset_with_the_same_stream(tiny):
    ds = tiny["cm"]
    n = 3 * ds.rows + 17
    whole = [sb.batch for sb in ReplaySource(ds, 1000, Replay(max_tuples=n)).batches()]
    at = ds.rows + 1234  # inside the second copy: shifted timestamps
    rest = [sb.batch for sb in ReplaySource(ds, 700, Replay(max_tuples=n), start=at).batches()]
    assert rest[0].offset == at and rest[-1].end == n
    for i, _ in enumerate(ds.schema.fields):
        full = np.concatenate([b.columns[i] for b in whole])
        np.testing.assert_array_equal(np.concatenate([b.columns[i] for b in rest]), full[at:])


def test_rate_limited_replay_is_anchored_on_the_wall_clock(tiny):
    import time

    ds = tiny["cm"]
    started = time.time() - 2.0  # the feed began 2 s ago: 2 s of input is waiting
    src = ReplaySource(ds, 100, Replay(rate=10_000, max_tuples=30_000), start=100,
                       started_at=started)
    t = time.perf_counter()
    first = next(iter(src.batches()))
    assert time.perf_counter() - t < 0.5  # backlog: no waiting
    assert 1.9 < t - first.ingest_time < 2.2  # it arrived ~2 s ago


def sg3_by_definition(ds) -> pd.DataFrame:
    """The paper's SG3 straight from its definition, sharing nothing with the plan evaluator:
    per second t of event time, the global average of the hour before t (SG1) and each
    plug's average of the 128 s before t (SG2); the plugs above the global average."""
    ts = np.asarray(ds.column("timestamp")) // 1000
    value = np.asarray(ds.column("value"), dtype=np.float64)
    keys = ["plug", "household", "house"]
    df = pd.DataFrame({"s": ts, "v": value, **{k: np.asarray(ds.column(k)) for k in keys}})
    per_s = df.groupby("s").v.agg(["sum", "count"])
    glob = []
    for end in range(int(ts.min()) + 1, int(ts.max()) + 3601):
        inside = per_s.loc[end - 3600:end - 1]
        if inside["count"].sum():
            glob.append((end * 1000, inside["sum"].sum() / inside["count"].sum()))
    glob = pd.DataFrame(glob, columns=["window_end", "global_avg"])
    per_key = df.groupby([*keys, "s"]).v.agg(["sum", "count"]).reset_index()
    spread = pd.concat([per_key.assign(window_end=(per_key.s + 1 + r) * 1000)
                        for r in range(128)])
    local = spread.groupby(["window_end", *keys])[["sum", "count"]].sum().reset_index()
    local["local_avg"] = local["sum"] / local["count"]
    local["window_start"] = local.window_end - 128_000
    out = local.merge(glob, on="window_end")
    return out[out.local_avg > out.global_avg]


def test_sg3_is_the_papers_join_of_the_hour_and_the_plug_averages(tiny):
    """SG3 joins SG1's 3600 s/1 s global average with SG2's 128 s/1 s plug averages."""
    q = queries.get("SG3")
    ds = tiny["sg"]
    windows = sorted(op.node.window.range_ms for op in Engine(q, ds.tables).plan.operators.values()
                     if op.kind == "window")
    assert windows == [128_000, 3_600_000]
    sink = CollectSink()
    run_query(q, ds, sink=sink, config=EngineConfig(workers=2, batch_rows=3000))
    want = sg3_by_definition(ds)
    assert len(want) > 1000
    ref.assert_same_results(engine_frame(q, sink), want, q.schema)


WARM_CHILD = """
import sys
import numba
from scabbard import queries
from scabbard.data import open_dataset
from scabbard.engine import EngineConfig, NullSink, Replay, ReplaySource
from scabbard.engine.runtime import Engine
from scabbard.kernels import aggregate, assembler, hashtable, join, window
from scabbard.kernels import rows as result_rows

def compiled():
    return {f"{m.__name__}.{k}": len(d.signatures)
            for m in (aggregate, assembler, hashtable, join, result_rows, window)
            for k, d in vars(m).items() if isinstance(d, numba.core.registry.CPUDispatcher)}

name, path, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
ds = open_dataset(path)
engine = Engine(queries.get(name), ds.tables, EngineConfig(workers=1, batch_rows=rows))
source = ReplaySource(ds, rows, Replay(max_tuples=4 * ds.rows))
engine.warm_up(source.peek())
before = compiled()
report = engine.run(source, NullSink())
after = compiled()
print({k: (before.get(k, 0), n) for k, n in after.items() if n != before.get(k, 0)})
"""


# batches of more than two windows' worth of the tiny data: long tasks, boundaries between them
@pytest.mark.parametrize("name, rows", [("LRB2", 16_000), ("YSB", 25_000)])
def test_the_warm_up_compiles_every_kernel_a_run_calls(tiny, name, rows):
    """No kernel is compiled (or loaded from numba's cache) on the clock: the first long task
    and the first boundary between two long tasks would charge it to the measured run."""
    import subprocess
    import sys

    ds = tiny[queries.workload_of(name)]
    out = subprocess.run([sys.executable, "-c", WARM_CHILD, name, str(ds.path), str(rows)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "{}", out.stdout


def test_the_skew_experiment_draws_the_keys_it_names(tmp_path):
    """Notebook 15's streams: one key; Zipf, whose most frequent key holds far more tuples than
    uniform's; a bad distribution is refused before anything runs."""
    from scabbard.experiments import partitioned as exp

    rng = np.random.default_rng(0)
    one, zipf, uniform = (exp.skewed_keys(d, 100_000, 1000, 1.2, rng) for d in exp.DISTRIBUTIONS)
    assert set(one.tolist()) == {0}
    top = [np.unique(k, return_counts=True)[1].max() / len(k) for k in (zipf, uniform)]
    assert top[0] > 0.1 > 0.01 > top[1]
    assert len(np.unique(uniform)) == 1000
    with pytest.raises(ValueError, match="unknown key distribution 'pareto'"):
        exp.Settings(distributions=("pareto",))
    s = exp.Settings(rows=10_000, keys=10, rate=500)  # 20 s of a 16 s window
    ds = exp.skew_dataset("zipf", s, tmp_path)
    assert ds.rows == 10_000 and ds.batch(0, 10_000).columns[0][-1] == 19_998  # 500 tuples/s
    q = exp.skew_query(s)
    sink = CollectSink()
    run_query(q, ds, sink=sink, config=EngineConfig(workers=2, assembly="partitioned"))
    got = sink.to_pandas()
    assert got.groupby("window_end")["count"].sum().max() == 16 * 500  # a full 16 s window


def test_auto_assembly_partitions_the_branches_whose_tasks_are_short(tiny):
    """``auto``: one partition per worker for a keyed window longer than the tasks from 4
    workers on, one state for long tasks, a global window, or fewer workers."""
    from scabbard.engine import Engine
    from scabbard.engine.sources import ReplaySource

    def parts(name, workers, batch=None):
        ds = tiny[queries.workload_of(name)]
        e = Engine(queries.get(name), ds.tables,
                   EngineConfig(workers=workers, batch_rows=batch, assembly="auto"))
        rows = e.batch_rows_for(ReplaySource(ds, 1).tuples_per_ms())
        return [e.assembly_parts(i, rows) for i in range(len(e.plan.branches))]

    assert parts("SG2", 4, 4096) == [4]  # 128 panes: 4,096 tuples are far fewer
    assert parts("SG2", 2, 4096) == [1]  # 2 workers: the serial assembly keeps up
    assert parts("SG3", 6, 4096) == [6, 1]  # the hour's average has no keys
    assert parts("CM2", 4) == [1]  # the default batch holds 4 windows: tasks are long


def test_the_engine_bench_keeps_the_median_of_interleaved_rounds(tiny, monkeypatch):
    """``bench engine --rounds 3``: the worker counts take turns to go first, round by round,
    and each one's row is its median run, with the slowest and the fastest beside it."""
    from scabbard.experiments import engine_throughput as exp

    order, measured = [], {1: [], 2: []}
    real = exp.run_query

    def run(q, ds, **kw):
        order.append(kw["config"].workers)
        report = real(q, ds, **kw)
        measured[kw["config"].workers].append(report.summary.tuples_per_s)
        return report

    monkeypatch.setattr(exp, "run_query", run)
    s = exp.Settings(queries=("CM2",), scale="tiny", seconds=0.3, rounds=3, spark=False,
                     latency=False)
    rows = exp.measure_engine("CM2", tiny["cm"], s)
    assert order[1:] == [1, 2, 2, 1, 1, 2]  # after one unmeasured warm-up run
    assert [r["workers"] for r in rows] == [1, 2]
    for r in rows:
        assert r["rounds"] == 3 and r["min_tuples_per_s"] <= r["tuples_per_s"] <= r["max_tuples_per_s"]
        assert r["min_tuples_per_s"] < r["max_tuples_per_s"]  # three runs, not one thrice
        runs = measured[r["workers"]][-3:]
        assert r["tuples_per_s"] == pytest.approx(sorted(runs)[1])
