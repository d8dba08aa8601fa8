"""Parallel ingress: the source split by offset ranges between partitions, each read
and appended by its own thread - the same stream as one dispatcher reading it, a prefix without
a hole whenever it stops, the ingress p-stream in order, recovery with another number."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scabbard.batch import Batch
from scabbard.data import Table
from scabbard.engine import Engine, EngineConfig, Replay, ReplaySource
from scabbard.engine.feeds import SourceFeed
from scabbard.engine.ingress import PartitionedFeed
from scabbard.ft.config import PersistConfig
from scabbard.schema import Field, Schema

SCHEMA = Schema("ingress-test", (Field("timestamp", "int64"), Field("key", "int64"),
                                 Field("value", "float64")))


def table(rows: int, seed: int = 0) -> Table:
    rng = np.random.default_rng(seed)
    cols = (np.sort(rng.integers(0, 10 * rows, rows)).astype(np.int64),
            rng.integers(0, 50, rows).astype(np.int64), rng.random(rows))
    return Table("stream", Path("."), SCHEMA, rows, cols, {"columns": []})


def stream_of(tasks) -> tuple[list[tuple], list[np.ndarray]]:
    """(offset, rows, source tuples, source end) per task, and the concatenated columns."""
    tasks = list(tasks)
    meta = [(t.batch.offset, len(t.batch), t.source_tuples, t.source_end) for t in tasks]
    cols = [np.concatenate([t.batch.columns[i] for t in tasks]) if tasks else np.zeros(0)
            for i in range(len(SCHEMA.fields))]
    return meta, cols


def contiguous(meta, start: int) -> bool:
    ends = [start] + [o + n for o, n, *_ in meta]
    return all(o == e for (o, *_), e in zip(meta, ends, strict=False))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.integers(1, 900), batch=st.integers(1, 300), parts=st.integers(2, 5),
       start=st.integers(0, 1500), extra=st.integers(1, 2500), loop=st.booleans(),
       workers=st.integers(1, 3), drop=st.sampled_from([None, 3, 7]))
def test_partitions_give_the_stream_one_dispatcher_gives(rows, batch, parts, start, extra, loop,
                                                         workers, drop):
    """Any batch size, start, end, number of partitions; with a selection that leaves whole
    batches empty (``drop``: keys below it survive; their source tuples count with the next
    task's), as persistence push-up's."""
    t = table(rows)
    if not loop:
        start = min(start, rows)

    def source():
        return ReplaySource(t, batch, Replay(max_tuples=start + extra, loop=loop), start=start)

    reduce = None if drop is None else (
        lambda b: b.slice(0, 0) if int(b.column("key")[0]) % drop == 0 else b)
    one, many = source(), source()
    want = stream_of(SourceFeed(one, reduce, None, workers).tasks())
    got = stream_of(PartitionedFeed(many, parts, reduce, None, workers).tasks())
    assert got[0] == want[0]
    for g, w in zip(got[1], want[1], strict=True):
        np.testing.assert_array_equal(g, w)
    assert many.exhausted and one.exhausted
    if drop is None:
        assert contiguous(got[0], start)


class TracedSource(ReplaySource):
    """A replay source that notes which thread cut which batch."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.cut_by: dict[int, int] = {}

    def cut(self, seq, r, origin, sleep=None):
        self.cut_by[r[0]] = threading.get_ident()
        return super().cut(seq, r, origin) if sleep is None else super().cut(seq, r, origin,
                                                                              sleep)


def test_no_single_thread_reads_every_tuple():
    """Batch j is cut by partition j mod N's thread, never by the thread taking the tasks."""
    src = TracedSource(table(5000), 100, Replay(loop=False))
    feed = PartitionedFeed(src, 3, workers=2)
    tasks = list(feed.tasks())
    assert len(tasks) == 50 and feed.exhausted
    me = threading.get_ident()
    by_batch = [src.cut_by[t.batch.offset] for t in tasks]
    assert me not in by_batch
    assert len(set(by_batch)) == 3
    for j, ident in enumerate(by_batch):
        assert ident == by_batch[j % 3]  # the same partition every third batch


def test_a_duration_ends_the_stream_on_a_prefix_without_a_hole():
    """However the partitions' threads are scheduled, what they hand out when the duration
    ends is the stream from its start, not exhausted."""
    src = ReplaySource(table(1000), 64, Replay(rate=200_000.0, duration=0.2), start=37)
    feed = PartitionedFeed(src, 4)
    meta, _ = stream_of(feed.tasks())
    assert contiguous(meta, 37)
    assert not feed.exhausted and not src.exhausted


def test_stop_ends_the_feed_and_its_threads():
    src = ReplaySource(table(1000), 10, Replay(loop=True))  # endless
    feed = PartitionedFeed(src, 3, transform=lambda b: [b.columns], workers=2)
    tasks = feed.tasks()
    first = [next(tasks) for _ in range(5)]
    feed.stop()
    rest = list(tasks)
    meta, _ = stream_of(first + rest)
    assert contiguous(meta, 0) and not feed.exhausted
    assert not any(t.name.startswith("ingress-") for t in threading.enumerate())


def test_a_partitions_error_reaches_the_dispatcher():
    def reduce(b: Batch) -> Batch:
        if b.offset >= 500:
            raise RuntimeError("bad batch at 500")
        return b

    feed = PartitionedFeed(ReplaySource(table(1000), 50, Replay(loop=False)), 3, reduce, None, 2)
    with pytest.raises(RuntimeError, match="bad batch at 500"):
        list(feed.tasks())
    assert not any(t.name.startswith("ingress-") for t in threading.enumerate())


def test_the_engine_partitions_by_its_workers_unless_told():
    from scabbard import queries

    q = queries.get("CM1")

    def parts(workers, n=None, source=None):
        e = Engine(q, {}, EngineConfig(workers=workers, ingress_partitions=n))
        return e.ingress_partitions(source)

    assert [parts(w) for w in (1, 2, 4, 7, 8, 16)] == [1, 1, 1, 1, 2, 4]
    assert parts(2, 3) == 3
    wrapped = type("Wrapped", (), {"batches": lambda self: iter(()),
                                   "__getattr__": lambda self, n: getattr(src, n)})()
    src = ReplaySource(table(10), 5)
    assert parts(16, 4, src) == 4 and parts(16, 4, wrapped) == 1  # not split through a wrapper
    with pytest.raises(ValueError, match="ingress_partitions"):
        EngineConfig(ingress_partitions=0)


def test_partitions_append_the_ingress_pstream_in_order(tmp_path):
    """Every partition appends its batches itself, compressed, each in its turn: the stored
    p-stream is the source's stream, one p-unit per batch at consecutive offsets."""
    from scabbard.compression.policy import Compression
    from scabbard.ft.ingress import persisted_in_order
    from scabbard.pog import POG
    from scabbard.storage import BlockManager, StorageConfig

    t = table(3000)
    cfg = StorageConfig(file_bytes=1 << 20, pool_files=2, bulk_bytes=1 << 16)
    with BlockManager(tmp_path, cfg) as bm:
        pog = POG(bm)
        s = pog.pstream("input", SCHEMA, max_units=4, max_bytes=1 << 15,
                        compress=Compression.scheme(SCHEMA, "default"))
        feed = PartitionedFeed(ReplaySource(t, 97, Replay(max_tuples=7000)), 3,
                               transform=s.compress, workers=2)
        units = [u for _, u in persisted_in_order(pog, "input", "query", feed)]
        cuts = [r[0] for r in ReplaySource(t, 97, Replay(max_tuples=7000)).ranges()]
        assert [u.offset for u in units] == cuts  # a batch never spans two copies
        assert units[-1].end == 7000 and all(u.vector_clock == (u.end,) for u in units)
        stored = list(bm.load(s.stream_id))
    want = stream_of(SourceFeed(ReplaySource(t, 97, Replay(max_tuples=7000))).tasks())[1]
    for i, w in enumerate(want):
        np.testing.assert_array_equal(np.concatenate([b.columns[i] for b in stored]), w)


# -- with the tiny datasets (Spark generators) -----------------------------------------------------
@pytest.mark.spark
def test_recovery_with_another_number_of_partitions(tiny, tmp_path):
    """A fault-tolerant run stopped and recovered again and again, each incarnation reading
    the source with another number of partitions (3, 1, 2, ...), with push-up and the codecs:
    the failure-free output, exactly once."""
    from ftkit import SMALL, failure_free

    from scabbard import queries
    from scabbard.ft.recovery import run_fault_tolerant
    from scabbard.ft.sinks import ClockedSink, read_output
    from scabbard.ft.verify import compare
    from scabbard.outputs import read_metrics

    q = queries.get("YSB")
    ds = tiny["ysb"]
    n = 150 * ds.rows
    store, out = tmp_path / "store", tmp_path / "out"

    def cfg(parts):
        return EngineConfig(workers=2, batch_rows=4000, ingress_partitions=parts)

    def completed() -> bool:
        return "completed" in json.loads((store / "run.json").read_text())

    # paced so that the first 0.4 s never reach the end of the input, however fast the machine
    log = tmp_path / "metrics.jsonl"
    r = run_fault_tolerant(q, ds, store, ClockedSink(out), cfg(3), interval=0.02, max_tuples=n,
                           rate=n / 2.0, duration=0.4, layout=SMALL, push_up=True,
                           compression="adaptive", compression_interval=0.1, metrics_log=log)
    assert r.checkpoints and not completed()
    resumed, k = [], 0
    while not completed():
        parts = (1, 2, 3)[k % 3]
        k += 1
        r = run_fault_tolerant(q, ds, store, ClockedSink(out), cfg(parts), interval=0.02,
                               recover=True, duration=0.4, layout=SMALL, push_up=True,
                               metrics_log=log)
        resumed.append(r.resumed_from)
        assert k < 100
    assert any(c is not None for c in resumed)
    starts = read_metrics(log)
    used = list(starts[starts["event"] == "start"]["ingress_partitions"])
    assert used[:4] == [3, 1, 2, 3][:len(used[:4])] and len(used) >= 3, used
    v = compare(read_output(out), failure_free(q, ds, n), q.schema)
    assert v.ok, v


@pytest.mark.spark
def test_pure_ingest_with_partitions_stores_what_one_dispatcher_stores(tiny, tmp_path):
    """``scabbard ingest`` / bench ingest with three partitions: the same source tuples, the
    same p-units, the same bytes on disk (push-up and the default codecs)."""
    from scabbard.experiments.ingest import ingest

    ds = tiny["lrb"]
    one = ingest("LRB1", ds, PersistConfig(tmp_path / "one", True, "default"),
                 Replay(max_tuples=200_000), batch_rows=3000)
    three = ingest("LRB1", ds, PersistConfig(tmp_path / "three", True, "default"),
                   Replay(max_tuples=200_000), EngineConfig(workers=2, ingress_partitions=3),
                   batch_rows=3000)
    assert one.tuples == three.tuples == 200_000
    assert one.stored_tuples == three.stored_tuples and one.disk_bytes == three.disk_bytes
    assert len(three.latency_ms) and three.latency_ms["p50"] >= 0


def test_the_checkpoints_bench_shows_the_cores_used_and_every_byte_stored(tiny, data_root):
    """``bench checkpoints``'s per-part table: each run's busy cores (CPU seconds a second) and
    the bytes it stored a second - a fault-tolerant run's results counted with its input (CM2
    writes a result row every few tuples), the baseline's Parquet file, ingest's input."""
    from scabbard import queries
    from scabbard.experiments import checkpointing as exp

    s = exp.Settings(queries=("CM2",), seconds=0.6, worker_counts=(1,),
                     configs=("no_ft_written", "ingest", "ft_raw"), scale="tiny",
                     data_dir=str(data_root))
    runs = exp.run(s, log=lambda *_: None)
    parts = exp.parts(runs).set_index("config")
    assert (parts["cores"] > 0.2).all() and (parts["disk MB/s"] > 0).all(), parts
    ft = runs.set_index("config").loc["ft_raw"]
    stored = ft["disk_mb_per_s"] * 1e6 / ft["tuples_per_s"]  # bytes a tuple, results included
    results = ft["result_rows_per_s"] / ft["tuples_per_s"] * queries.get("CM2").schema.row_bytes
    assert results > 0 and stored >= ft["persisted_bytes_per_tuple"] + 0.9 * results, (stored, ft)


def test_the_checkpoints_bench_measures_scabbard_without_its_disk_only_when_asked(
        tiny, data_root, monkeypatch):
    """``--configs scabbard_nodisk``: Scabbard's run with its input p-stream's writes discarded
    (every pool file of its storage left unwritten, where Scabbard's holds its input), beside
    Scabbard's own, with its overhead in the table; not among the default configurations."""
    from scabbard.experiments import checkpointing as exp

    assert exp.NO_DISK not in exp.Settings().configs
    written = {}
    real = exp.run_fault_tolerant

    def run(q, ds, storage, *args, **kw):
        r = real(q, ds, storage, *args, **kw)
        pool = sorted((Path(storage) / "pool").glob("*.seg"))
        written[bool(kw.get("layout"))] = pool and any(np.any(np.fromfile(f, np.uint8))
                                                       for f in pool)
        return r

    monkeypatch.setattr(exp, "run_fault_tolerant", run)
    s = exp.Settings(queries=("CM2",), seconds=0.6, worker_counts=(1,),
                     configs=("no_ft_written", "scabbard", exp.NO_DISK), scale="tiny",
                     data_dir=str(data_root))
    runs = exp.run(s, log=lambda *_: None)
    assert written == {False: True, True: False}
    table = exp.summary(runs)
    assert (runs.set_index("config").loc[exp.NO_DISK, "tuples_per_s"] > 0).all()
    assert f"{exp.LABELS[exp.NO_DISK]} overhead" in table


def test_a_runs_second_half_is_measured_from_its_first_sample_past_half_its_seconds():
    """``bench checkpoints``'s second-half throughput: from the first progress sample at or
    after half the run to its end; events are not samples; a run with none past its half has
    no second-half figure."""
    from scabbard.experiments.checkpointing import SecondHalf

    h = SecondHalf()
    for t, n in ((0.5, 10), (1.0, 30), (1.5, 60), (2.0, 100)):
        h.watch({"event": "sample", "t": t, "tuples": n})
    h.watch({"event": "checkpoint", "t": 1.3, "tuples": 999})
    assert h.rate(140, 2.4) == pytest.approx((140 - 60) / (2.4 - 1.5))
    assert np.isnan(h.rate(140, 5.0))  # nothing at or after 2.5 s
    p = SecondHalf()
    p.sample(50, 1.0)  # ingest's progress(tuples, seconds)
    assert p.rate(150, 1.5) == pytest.approx(100 / 0.5)


def test_a_replay_source_says_whether_its_event_times_are_in_order():
    """``ReplaySource.ordered``: the table's timestamps never decrease and a replayed copy
    starts after the last (the first timestamp >= 0) - what lets the ingress's run-length
    codec gallop over them; a table made otherwise is not taken at its word."""
    good = table(5000)
    assert ReplaySource(good, 1000).ordered
    ts, key, value = good.columns
    down = ts.copy()
    down[2500], down[2501] = down[2501] + 1, down[2500]  # one pair out of order
    for bad in (down, ts - ts[-1]):  # out of order; negative: a copy would start before
        t = Table("stream", Path("."), SCHEMA, 5000, (bad, key, value), {"columns": []})
        assert not ReplaySource(t, 1000).ordered
    from scabbard.experiments.grizzly import ChangedReplay  # Fig. 12's: both column sets

    cols = (ts.copy(), key.copy(), value.copy())
    assert ChangedReplay(good, cols, cols, batch_rows=1000).ordered
    assert not ChangedReplay(good, cols, (down, key.copy(), value.copy()), batch_rows=1000).ordered


def test_only_the_event_times_of_an_ordered_stream_are_encoded_as_ordered():
    """``Compression(ordered_time=True)`` tells the codec of the first column (the event
    times) and no other; without it no codec is told."""
    from scabbard.compression.policy import Compression
    from scabbard.compression.rle import RunLength

    told = []

    class Spy(RunLength):
        def encode(self, values, shift=0, ordered=False):
            told.append(ordered)
            return super().encode(values, shift, ordered)

    b = table(4000).batch(0, 4000)
    for ordered in (True, False):
        told.clear()
        c = Compression(SCHEMA, (Spy(), Spy(), RunLength()), ordered_time=ordered)
        stored = c(b)
        assert told == [ordered, False]
        assert [codec.name for codec, _ in stored][:2] == ["rle", "rle"]


def test_the_synclog_bench_runs_each_query_then_the_sweep(tmp_path, monkeypatch):
    """``scabbard bench synclog`` (experiments.ingest.synclog_bench): a line per query, then
    the batch sizes of the sweep (none for NONE); the scratch partitions removed after."""
    from scabbard import workloads
    from scabbard.experiments.ingest import synclog_bench
    from scabbard.peers import synclog

    monkeypatch.setattr(workloads, "dataset", lambda name, scale, root: name)
    monkeypatch.setattr(synclog, "ingest", lambda q, ds, folder, secs, size, producers:
                        synclog.SyncLogResult(q, size, producers, 1, 1.0, 1, 1,
                                              {"p50": 0.0, "p95": 0.0}))
    lines = []
    synclog_bench(["CM1", "YSB"], "tiny", tmp_path / "d", 1.0, 8, 2, "SG1", log=lines.append)
    assert [x.split()[:3] for x in lines] == [
        ["CM1", "batch", "8"], ["YSB", "batch", "8"], ["batch", "size", "sweep,"],
        *[["SG1", "batch", str(kb)] for kb in (64, 256, 1024, 4096, 16384)]]
    assert lines[2] == "\nbatch size sweep, SG1:" and list((tmp_path / "d").iterdir()) == []
    lines.clear()
    synclog_bench(["CM1"], "tiny", tmp_path / "d", 1.0, 8, 2, "NONE", log=lines.append)
    assert len(lines) == 1
