"""Larger-than-memory state (the Darwin seed): its workload, on the engine."""

import threading

import numpy as np
import pytest
from ftkit import campaign

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
    ("DARWIN", 4096),  # tasks above a slice: taken whole where the partitions are spilled
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


@pytest.mark.parametrize("batch_rows", [997, 4096])  # tasks below and above a slice
def test_darwin_state_is_held_within_its_budget(tiny, tmp_path, batch_rows):
    """The partitions in memory never hold much more than the budget (checked every
    sixteenth of it, then brought to three quarters), while the state is far larger."""
    from scabbard.engine.spill import MIN_STATE_MEMORY

    q, ds = queries.get("DARWIN"), tiny["darwin"]
    _, free = _run(q, ds, workers=1, batch_rows=batch_rows, assembly="partitioned:64")
    _, report = _run(q, ds, workers=1, batch_rows=batch_rows, state_memory=MIN_STATE_MEMORY,
                     spill=disk_spill(tmp_path))
    (stats,) = report.spilled.values()
    assert stats["peak_bytes"] <= MIN_STATE_MEMORY * 1.25
    assert stats["spilled_bytes"] > MIN_STATE_MEMORY // 8


def test_a_spill_folder_not_made_yet_is_made_at_the_first_spill(tiny, tmp_path):
    from scabbard.engine.spill import MIN_STATE_MEMORY

    q, ds = queries.get("DARWIN"), tiny["darwin"]
    _, report = _run(q, ds, workers=1, batch_rows=997, state_memory=MIN_STATE_MEMORY,
                     spill=disk_spill(tmp_path / "not" / "made"))
    (stats,) = report.spilled.values()
    assert stats["spills"] > 0 and (tmp_path / "not" / "made").is_dir()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_spill_store_that_fails_fails_the_run(tiny, workers):
    """A full disk at the first spill fails the run with its error - on one worker too,
    whose failure left the dispatcher waiting forever for room in the workers' queue."""
    from scabbard.engine.spill import MIN_STATE_MEMORY

    def full_disk(branch):
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        _run(queries.get("DARWIN"), tiny["darwin"], workers=workers, batch_rows=997,
             state_memory=MIN_STATE_MEMORY, spill=full_disk)


def _spilled_darwin_partition(tiny, tmp_path):
    """A SpillingAssembler of DARWIN's branch at the smallest budget, its partition 0 spilled
    at pane 10, and a share of it of a unit's rows over the same 500 keys (a share a unit)."""
    from scabbard.engine.runtime import Engine
    from scabbard.engine.spill import MIN_STATE_MEMORY, PARTS, Spilled, SpillingAssembler
    from scabbard.engine.tasks import Edges

    branch = Engine(queries.get("DARWIN"), tiny["darwin"].tables).plan.branches[0]
    a = SpillingAssembler(branch, PARTS, None, MIN_STATE_MEMORY, open_store=disk_spill(tmp_path))
    a._open()
    a.spilled[0] = Spilled(cur=10)
    n = a.unit_rows
    keys = (np.arange(n, dtype=np.int64) % 500).reshape(-1, 1)
    share = Edges(np.full(n, 10, np.int64), keys, np.ones(n, np.int64),
                  np.ones((n, len(branch.iops)), np.int64),
                  np.ones((n, len(branch.fops)), np.float64))
    return a, share


def _assert_holds_every_share(a, share, times: int, i: int = 0) -> None:
    """Partition ``i`` read back (its compaction waited for) holds each of the 500 keys'
    partials of ``times`` shares."""
    a._settle(i, cancel=False)
    a.parts[i] = a._reload(i, a._read(i).result())
    got = a.parts[i].partials()
    assert sorted(got.keys[:, 0].tolist()) == list(range(500))
    want = times * np.bincount(share.keys[:, 0], minlength=500)
    assert (got.cnt[np.argsort(got.keys[:, 0])] == want).all()


def test_a_spill_read_has_its_units_in_flight_together_and_returns_them_in_order(
        tiny, tmp_path, monkeypatch):
    """Many small units read back: the rows of every unit, in the order asked (not the
    order written), in as few storage reads as READ_BYTES allows - not one a unit."""
    from scabbard.ft import spillstore

    a, share = _spilled_darwin_partition(tiny, tmp_path)
    store = a.store
    written = []
    for k in range(40):  # 40 units of 50 rows, each with its own pane
        e = share.slice(0, 50)
        written += store.write(type(e)(e.pane + k, e.keys, e.cnt, e.ints, e.floats))
    calls = []
    load = store.bm.load_ranges
    monkeypatch.setattr(store.bm, "load_ranges", lambda ranges, *a, **k: (
        calls.append(len(ranges)), load(ranges, *a, **k))[1])
    monkeypatch.setattr(spillstore, "READ_BYTES", 10 * 50 * store.schema.row_bytes)
    wanted = written[20:] + written[:20]
    got = store.read(wanted)
    assert got.pane.tolist() == [10 + k for k in [*range(20, 40), *range(20)] for _ in range(50)]
    assert calls == [10, 10, 10, 10]  # ten units (READ_BYTES) a read, not one


def test_a_spilled_partitions_units_are_compacted_to_a_few_times_its_groups(tiny, tmp_path):
    """Shares of the same 500 keys spilled unit after unit (a share a unit, on disk): once a
    partition's units hold COMPACT times the rows they held when last written whole, they are
    read back and combined per (pane, key) on the compaction thread and written again in
    their place - so, each compaction waited for, they never hold more than that and a unit,
    not every share since the spill - and the partition read back holds each key's partials
    of every share."""
    from scabbard.engine.compaction import COMPACT

    a, share = _spilled_darwin_partition(tiny, tmp_path)
    most = 0
    for _ in range(40):
        a._wait(0, share)
        a._settle(0, cancel=False)  # (the event: the compaction done)
        most = max(most, a.spilled[0].rows())
    assert a.stats["compactions"] >= 5
    assert most <= COMPACT * max(500, len(share.pane)) + len(share.pane), most
    _assert_holds_every_share(a, share, 40)
    a.close()


def test_shares_wait_for_a_compaction_under_way_once_their_units_reach_its_bound(
        tiny, tmp_path):
    """A compaction that does not finish (its read held back) leaves the shares to go on as
    units - until the units written since hold a BEHIND-th of the compaction's bound: then
    the share's task waits for it (back-pressure), and the units never hold more than the
    bound, that fraction of it and two units.  Nothing is lost either way."""
    from scabbard.engine.compaction import BEHIND, COMPACT

    a, share = _spilled_darwin_partition(tiny, tmp_path)
    gate, waited, read, settle = threading.Event(), [], a.store.read, a._settle

    def held_read(ranges):
        if threading.current_thread().name.startswith("spill-compact"):
            gate.wait()
        return read(ranges)

    def settle_opening(i, cancel=True):
        if not cancel:
            waited.append(a.spilled[i].rows())
            gate.set()  # (the back-pressure's wait: the compaction may go on)
        return settle(i, cancel)
    a.store.read, a._settle = held_read, settle_opening
    bound, n = a._bound(0), len(share.pane)  # (the same with 500 keys' rows as base)
    assert bound >= COMPACT * 3 // 4 * max(500, n)
    most = 0
    try:
        for _ in range(40):
            a._wait(0, share)
            most = max(most, a.spilled[0].rows())
        assert waited and waited[0] > bound + bound // BEHIND, waited
        assert most <= bound + bound // BEHIND + 2 * n, most
        _assert_holds_every_share(a, share, 40)
    finally:
        gate.set()  # (a failure above leaves no compaction waiting)
        a.close()


def test_compactions_asked_for_and_not_applied_stay_within_queued(tiny, tmp_path):
    """While the compaction thread is held (its read waits), four spilled partitions cross
    their bounds: the first QUEUED get a compaction, the others are asked for again at a later
    share - done compactions never pile up waiting to be written (DARWIN at 10^7 keys: 12 at
    once, 59 MB).  Once let go, every partition holds every share."""
    from scabbard.engine.compaction import QUEUED
    from scabbard.engine.spill import Spilled

    a, share = _spilled_darwin_partition(tiny, tmp_path)
    for i in range(1, 4):
        a.spilled[i] = Spilled(cur=10)
    gate, read = threading.Event(), a.store.read

    def held_read(ranges):
        if threading.current_thread().name.startswith("spill-compact"):
            gate.wait()
        return read(ranges)
    a.store.read = held_read
    try:
        for _ in range(4):  # past each bound, within twice it
            for i in range(4):
                a._wait(i, share)
        assert all(a.spilled[i].rows() > a._bound(i) for i in range(4))
        assert [i for i in range(4) if a.spilled[i].compacting] == list(range(QUEUED))
        assert a._queued == tuple(range(QUEUED))
        gate.set()
        a._settle(QUEUED - 1, cancel=False)  # (the last asked for: the others are done)
        a._wait(QUEUED, share)  # applies the ones done, asks for the next
        assert a.stats["compactions"] == QUEUED and a._queued == (QUEUED,)
        for i in range(4):
            _assert_holds_every_share(a, share, 5 if i == QUEUED else 4, i)
    finally:
        gate.set()
        a.close()


def test_a_reload_reads_and_combines_a_spilled_partitions_units_a_run_at_a_time(
        tiny, tmp_path):
    """A spilled partition's units beyond half the budget are read back in runs of at most
    half the budget (or GATHER times its rows last written whole) and a unit, each combined
    with the rows before it: memory holds one run, not every unit - and the partition read
    back holds every share."""
    from scabbard.engine.compaction import GATHER

    a, share = _spilled_darwin_partition(tiny, tmp_path)
    s, reads, read = a.spilled[0], [], a.store.read
    for _ in range(100):  # units only: no compaction asked for
        s.units += a.store.write(share)

    def counted(ranges):
        reads.append(sum(end - first for first, end in ranges))
        return read(ranges)
    a.store.read = counted
    most = max(GATHER * a.unit_rows, a.unit_rows * (a.budget // 2) // a.unit_bytes)
    assert s.rows() > most
    try:
        a.parts[0] = a._reload(0, a._read(0).result())
        assert len(reads) >= 2 and sum(reads) == 100 * len(share.pane), reads
        assert max(reads) <= most + a.unit_rows, (reads, most)
        got = a.parts[0].partials()
        assert sorted(got.keys[:, 0].tolist()) == list(range(500))
        want = 100 * np.bincount(share.keys[:, 0], minlength=500)
        assert (got.cnt[np.argsort(got.keys[:, 0])] == want).all()
    finally:
        a.close()


@pytest.mark.parametrize("times", [1, 4, 16])
def test_a_larger_budget_spills_larger_units(tiny, times):
    """A spilled partition's shares wait in memory up to a quarter of the budget over all
    (64) partitions, then go out as one unit: 64 KiB at the smallest budget and twice
    it, 128 KiB at 4x, 512 KiB at 16x - fewer segments for the storage to open and the
    records to list."""
    from scabbard.engine.runtime import Engine
    from scabbard.engine.spill import MIN_STATE_MEMORY, PARTS, WAITING, Spilled, SpillingAssembler
    from scabbard.engine.tasks import empty_edges

    class Store:
        incremental = False  # (the port's: no checkpoints here)

        def __init__(self):
            self.units = []

        def attach(self, owner):  # (the port's: no checkpoints here)
            pass

        def write(self, e):
            self.units.append(sum(x.nbytes for x in (e.pane, e.keys, e.cnt, e.ints, e.floats)))
            return [(len(self.units) - 1, len(self.units))]

    budget = times * MIN_STATE_MEMORY
    want = max(WAITING, times * WAITING // 2)
    branch = Engine(queries.get("DARWIN"), tiny["darwin"].tables).plan.branches[0]
    a = SpillingAssembler(branch, PARTS, None, budget, open_store=lambda b: Store())
    a.store = a._open()
    a.spilled[0] = Spilled(cur=10)
    one = empty_edges(branch.key_width, len(branch.iops), len(branch.fops))
    share = type(one)(*(np.zeros((1000, *x.shape[1:]), x.dtype) for x in
                        (one.pane, one.keys, one.cnt, one.ints, one.floats)))
    size = sum(x.nbytes for x in (share.pane, share.keys, share.cnt, share.ints, share.floats))
    for _ in range(2 * want // size + 2):
        a._wait(0, share)
    assert a.unit_bytes == want and a.store.units, "the shares went out"
    assert min(a.store.units) >= want > size
    assert a.store.units[0] < want + size
    assert a.spilled[0].units == [(i, i + 1) for i in range(len(a.store.units))]


def test_a_budget_makes_tasks_of_its_own_size_down_to_the_spilling_floor(tiny):
    """Under a budget a task's partials are a small part of it: DARWIN's 60 s windows would
    take the engine's largest batch, a 16 MiB budget takes the spilling floor, a large one
    the part of the budget it allows."""
    from scabbard.engine import Engine
    from scabbard.engine.budget import SPILL_MIN_BATCH, TASK_ROW_BYTES
    from scabbard.engine.runtime import MAX_BATCH

    def rows(budget):
        e = Engine(queries.get("DARWIN"), tiny["darwin"].tables,
                   EngineConfig(state_memory=budget, spill=disk_spill() if budget else None))
        return e.batch_rows_for(40.0)  # Darwin's 40,000 tuples per second

    assert rows(None) == MAX_BATCH
    assert rows(16 << 20) == SPILL_MIN_BATCH
    assert rows(1 << 30) == (1 << 30) // (8 * TASK_ROW_BYTES)


def test_a_budget_makes_tasks_larger_when_a_sample_shows_few_keys(tiny):
    """A task's partials are one per key at most: when the stream's first rows show its keys
    saturating (DARWIN's with 100 keys), its tasks grow past the spilling floor - as far as
    their partials and their per-row arrays fit the budget; when every row is a key of its
    own (tiny's 100,000 keys), they stay at the floor."""
    from scabbard.batch import Batch
    from scabbard.engine import Engine
    from scabbard.engine.budget import FRAGMENT_ROW_BYTES, SPILL_MIN_BATCH
    from scabbard.engine.runtime import MAX_BATCH

    ds = tiny["darwin"]
    sample = ds.stream.batch(0, 1 << 15)
    few = Batch(sample.schema, (sample.columns[0], sample.columns[1] % 100, sample.columns[2]))

    def rows(budget, batch):
        e = Engine(queries.get("DARWIN"), ds.tables,
                   EngineConfig(state_memory=budget, spill=disk_spill()))
        return e.batch_rows_for(40.0, batch)

    assert rows(16 << 20, sample) == rows(16 << 20, None) == SPILL_MIN_BATCH
    assert rows(16 << 20, few) == (16 << 20) // FRAGMENT_ROW_BYTES > SPILL_MIN_BATCH
    assert rows(1 << 30, few) == MAX_BATCH
    # with a rate, a task is no larger than fills in FILL_S (its latency), the floor aside
    e = Engine(queries.get("DARWIN"), ds.tables,
               EngineConfig(state_memory=16 << 20, spill=disk_spill()))
    assert e.run_batch_rows(40.0, None, few) == (16 << 20) // FRAGMENT_ROW_BYTES
    assert e.run_batch_rows(40.0, 300_000.0, few) == SPILL_MIN_BATCH


def test_task_rows_under_a_budget_follow_the_sample_s_keys():
    from scabbard.engine.budget import (
        FRAGMENT_ROW_BYTES,
        SPILL_MIN_BATCH,
        TASK_ROW_BYTES,
        task_rows,
    )

    budget, want, pane = 64 << 20, 1 << 22, 2_400_000
    floor = budget // (8 * TASK_ROW_BYTES)
    assert task_rows(budget, want, None, pane) == floor  # one partial a row
    assert task_rows(budget, want, (30_000, 60_000), pane) == floor  # keys still coming
    assert task_rows(budget, want, (10_000, 10_500), pane) == budget // FRAGMENT_ROW_BYTES
    # saturated, but a task's partials over the panes it spans must fit: 40,000 keys a pane
    # leave room for 26 panes' partials; with 100-row panes, 2,500 rows
    assert task_rows(budget, want, (40_000, 40_000), 100) == floor
    assert task_rows(budget, want, (40_000, 40_000), 1 << 20) == budget // FRAGMENT_ROW_BYTES
    assert task_rows(1 << 20, want, (10, 10), pane) == SPILL_MIN_BATCH  # never below the floor
    assert task_rows(budget, 1 << 18, (10, 10), pane) == 1 << 18  # nor above the windows' size


def test_a_spilling_runs_task_holds_its_partials_once(tiny):
    """Under a budget the fragment splits a task's pane partials by key partition and keeps
    the split alone (a task in flight held both, and its fragment's arrays through views:
    at 1 M keys most of what a run held above its budget); merged back, the split is the
    task's partials, in pane order."""
    from scabbard.engine import Engine
    from scabbard.engine.spill import PARTS

    ds = tiny["darwin"]
    batch = ds.stream.batch(0, 1 << 14)

    def part(budget):
        e = Engine(queries.get("DARWIN"), ds.tables,
                   EngineConfig(state_memory=budget, spill=disk_spill() if budget else None))
        e.split_parts = [e.assembly_parts(0)]
        return e._fragment(0, batch, 0.0).parts[0]

    def rows(e):
        return sorted(zip(e.pane.tolist(), map(tuple, e.keys.tolist()), e.cnt.tolist(),
                          map(tuple, e.ints.tolist()), map(tuple, e.floats.tolist()),
                          strict=True))

    spilling, whole = part(16 << 20), part(None)
    assert not whole.long and whole.split is None and whole.rows > 1000
    assert spilling.head is None and len(spilling.split) == PARTS
    assert spilling.rows == whole.rows
    assert len(spilling.tail.pane) == 0 and spilling.tail.pane.base is None  # no view either
    got = spilling.edges()
    assert np.all(np.diff(got.pane) >= 0)
    assert rows(got) == rows(whole.head)


def test_a_spilled_partition_holds_next_to_nothing_and_a_reloaded_one_what_it_reads(
        tiny, tmp_path, monkeypatch):
    """A spilled partition's state in memory is an empty one of a few rows (64 partitions of
    it sit beside the budget); a partition read back starts with room for what it reads and
    the task's share, so its arrays do not double past them."""
    from types import SimpleNamespace

    from scabbard.engine import Engine, spill
    from scabbard.engine.assembly import BranchAssembler

    q, ds = queries.get("DARWIN"), tiny["darwin"]
    spilled, reloaded = [], []
    real_spill, real_reload = spill.SpillingAssembler._spill, spill.SpillingAssembler._reload

    def spill_(self, i):
        out = real_spill(self, i)
        spilled.append((spill.assembler_bytes(self.parts[i]),
                        spill.assembler_bytes(BranchAssembler(self.b))))
        return out

    def reload(self, i, units, share=0):
        s = self.spilled[i]
        rows = len(units.pane) + sum(len(w.pane) for w in s.waiting) + share
        a = real_reload(self, i, units, share)
        reloaded.append((rows, len(a.fifo.pane), len(a.ws.cnt), len(a.table.keys)))
        return a
    monkeypatch.setattr(spill.SpillingAssembler, "_spill", spill_)
    monkeypatch.setattr(spill.SpillingAssembler, "_reload", reload)
    run_query(q, ds, sink=CollectSink(), config=EngineConfig(
        workers=2, batch_rows=997, state_memory=spill.MIN_STATE_MEMORY,
        spill=disk_spill(tmp_path)))
    assert len(spilled) > 10 and all(mine * 8 < default for mine, default in spilled)
    # so is every partition of a recovery's state, all of them on disk until read back
    branch = Engine(q, ds.tables).plan.branches[0]
    a = spill.SpillingAssembler(branch, spill.PARTS, None, spill.MIN_STATE_MEMORY,
                                open_store=lambda b: SimpleNamespace(attach=lambda owner: None))
    a.resume({}, 7)
    default = spill.assembler_bytes(BranchAssembler(branch))
    assert all(spill.assembler_bytes(p) * 8 < default for p in a.parts)
    assert len(reloaded) > 10
    # DARWIN's window is one pane: a partial a group; the table's room at most twice the rows
    assert all(fifo <= max(16, rows) and groups <= max(16, rows) and table <= max(16, rows)
               for rows, fifo, groups, table in reloaded), reloaded[:5]


@pytest.mark.parametrize("name, budget, window", [("DARWIN", None, 8), ("DARWIN", 16 << 20, 3),
                                                   ("SG1", 16 << 20, 8)])
def test_a_spilling_run_dispatches_a_task_a_worker_and_one_more_ahead_of_assembly(
        tiny, monkeypatch, name, budget, window):
    """What the tasks in flight hold is outside the state's budget: when state spills, the
    workers run at most a task each and one more waits for the assembly (else: a queue of two
    a worker, and as many results waiting - SG1's global aggregate never spills)."""
    from scabbard.engine import execution

    made, init = [], execution.Execution.__init__

    def record(self, *args, **kw):
        init(self, *args, **kw)
        made.append(self.window._value)  # the tasks it lets be dispatched ahead of assembly

    monkeypatch.setattr(execution.Execution, "__init__", record)
    run_query(queries.get(name), tiny[queries.workload_of(name)], CollectSink(), EngineConfig(
        workers=2, state_memory=budget, spill=disk_spill() if budget else None))
    assert made == [window]


def test_a_budget_too_small_for_one_partition_is_refused_at_start(tiny):
    from scabbard.engine.spill import MIN_STATE_MEMORY

    with pytest.raises(ValueError, match="too small to hold even one key partition"):
        EngineConfig(state_memory=MIN_STATE_MEMORY - 1, spill=disk_spill())
    with pytest.raises(ValueError, match="needs a spill store"):
        EngineConfig(state_memory=MIN_STATE_MEMORY)


# -- fault tolerance: the spilled units are the checkpoint ------------------------------------------
def _ft(q, ds, root, k=None, sink=None, batch_rows=997, **kw):
    from ftkit import SMALL, StopAfter

    from scabbard.ft.recovery import run_fault_tolerant
    from scabbard.ft.sinks import ClockedSink

    return run_fault_tolerant(q, ds, root / "storage", (sink or ClockedSink)(root / "output"),
                              EngineConfig(workers=2, batch_rows=batch_rows), interval=None,
                              every_tasks=3, layout=SMALL,
                              wrap_source=(lambda s: StopAfter(s, k)) if k else None, **kw)


def _spilled_entries(root):
    from ftkit import records

    return [[p for p in rec.state if p["stream"].startswith("spill-")]
            for rec in records(root / "storage")]


def _damage_then_fall_back(q, ds, root, n, mine, theirs, older, which=-1, sink=None):
    """Damage a unit only the newest record (``mine``) lists, recover: the recovery resumes
    from the newest record (its units are not read up front), finds the damage behind the run
    before anything commits, marks the record and recovers again, from ``older``, in the same
    call; the output committed is the failure-free one."""
    from ftkit import damage_segment, failure_free

    from scabbard.engine.runtime import Engine
    from scabbard.engine.tasks import partials_schema
    from scabbard.ft.sinks import read_output
    from scabbard.ft.verify import compare

    only_mine = sorted(set(map(tuple, mine["units"])) - set(map(tuple, theirs["units"])))
    assert only_mine
    schema = partials_schema(Engine(q, ds.tables).plan.branches[0], "spill-window0")
    damage_segment(root / "storage", schema, only_mine[which][1])
    r = _ft(q, ds, root, recover=True, sink=sink)
    assert r.resumed_from == older.id
    assert r.damage, "the damage found is reported"
    v = compare(read_output(root / "output"), failure_free(q, ds, n), q.schema)
    assert v.ok, v
    return r


# LRB1 (sliding: every partition back at every pane, 25 s) with the campaign: the default run
# recovers LRB1's spilled state in test_a_recovery_keeps_what_the_record_before_it_lists
@pytest.mark.parametrize("name", ["DARWIN", campaign("LRB1")])
def test_spilled_state_is_the_checkpoint_and_recovers_exactly_once(tiny, tmp_path, name):
    """Checkpoints of a state far over its budget list the spilled units (not written again),
    a recovery resumes with every partition on disk and reads them back as windows close,
    and the committed output is the failure-free one - stopped twice mid-stream."""
    from ftkit import failure_free

    from scabbard.engine.spill import MIN_STATE_MEMORY
    from scabbard.ft.sinks import read_output
    from scabbard.ft.verify import compare

    q, ds = queries.get(name), tiny[queries.workload_of(name)]
    n = 2 * ds.rows
    first = _ft(q, ds, tmp_path, 40, max_tuples=n, state_memory=MIN_STATE_MEMORY)
    (st,) = first.run.spilled.values()
    assert st["spills"] > 0 and len(first.checkpoints) > 5
    (entry,) = _spilled_entries(tmp_path)[0]
    assert entry["units"] and {i for i, _, _ in entry["units"]} <= set(range(64))
    assert not [p for p in first.checkpoints[-1].state if p["stream"].startswith("state-")]
    rest = _ft(q, ds, tmp_path, 30, recover=True)
    assert rest.resumed_from is not None and rest.loaded["spill_verified_bytes"] > 0
    (st,) = rest.run.spilled.values()
    assert st["reloads"] > 0  # the resumed partitions came back from disk
    _ft(q, ds, tmp_path, recover=True)
    v = compare(read_output(tmp_path / "output"), failure_free(q, ds, n), q.schema)
    assert v.ok, v


@pytest.mark.parametrize("sink", ["clocked", "transactional"])
def test_a_window_whose_last_piece_is_filtered_out_is_committed_whole(tiny, tmp_path, sink):
    """Under a budget a window leaves key partition by key partition, each piece through the
    query's HAVING; a window whose last piece the filter empties is whole all the same - its
    clock moves on.  LRB1 (avg_speed < 40) in tasks of about one pane, so that every task
    closes one window, in pieces: the clock stayed at the window before, and where every
    window's last piece was empty no record named any window committed - a recovery lost
    every window the clocked log held (184 here, 1,007 on LRB1 at the small scale) and the
    transactional sink's last epoch had its last window written twice (61 here)."""
    from ftkit import failure_free

    from scabbard.engine.spill import MIN_STATE_MEMORY
    from scabbard.ft.sinks import TransactionalSink, read_output
    from scabbard.ft.verify import compare

    q, ds = queries.get("LRB1"), tiny["lrb"]
    n = ds.rows
    kind = TransactionalSink if sink == "transactional" else None
    pane_rows = 300  # tiny LRB: 250 reports a second
    first = _ft(q, ds, tmp_path, 10, max_tuples=n, state_memory=MIN_STATE_MEMORY, sink=kind,
                batch_rows=pane_rows)
    (st,) = first.run.spilled.values()
    assert st["spills"] > 0
    _ft(q, ds, tmp_path, recover=True, sink=kind, batch_rows=pane_rows)
    v = compare(read_output(tmp_path / "output"), failure_free(q, ds, n), q.schema)
    assert v.ok, v


def test_windows_go_whole_to_an_operator_of_the_graph_or_a_p_stream(tiny, tmp_path):
    """LRB3 with a p-stream after its window (``--persist-at window0``): the rollup that
    counts the vehicles of each segment is then an operator of the graph, which takes whole
    windows - a window under a budget must not reach it in key partitions' pieces (it counted
    each piece apart: 15,684 lost and 397,942 different of 29,262), nor be stored in pieces by
    the p-stream (whose recovery skips through the last window it stored)."""
    from ftkit import failure_free

    from scabbard.engine.spill import MIN_STATE_MEMORY
    from scabbard.ft.sinks import read_output
    from scabbard.ft.verify import compare

    q, ds = queries.get("LRB3"), tiny["lrb"]
    r = _ft(q, ds, tmp_path, max_tuples=ds.rows, state_memory=MIN_STATE_MEMORY,
            batch_rows=300, persist_at=("window0",))
    (st,) = r.run.spilled.values()
    assert st["spills"] > 0
    v = compare(read_output(tmp_path / "output"), failure_free(q, ds, ds.rows), q.schema)
    assert v.ok, v


def test_spilled_units_leave_once_no_checkpoint_lists_them(tiny, tmp_path):
    """GC: the spill stream is trimmed below what the two newest records and the partitions
    still on disk need, so a long run's spill files return to the pool."""
    from ftkit import SMALL, records

    from scabbard.engine.runtime import Engine
    from scabbard.engine.spill import MIN_STATE_MEMORY
    from scabbard.engine.tasks import partials_schema
    from scabbard.storage import BlockManager

    q, ds = queries.get("DARWIN"), tiny["darwin"]
    r = _ft(q, ds, tmp_path, max_tuples=4 * ds.rows, state_memory=MIN_STATE_MEMORY)
    (st,) = r.run.spilled.values()
    recs = records(tmp_path / "storage")
    oldest_needed = min(u[1] for p in _spilled_entries(tmp_path)[1] for u in p["units"])
    schema = partials_schema(Engine(q, ds.tables).plan.branches[0], "spill-window0")
    with BlockManager(tmp_path / "storage", SMALL) as bm:
        bm.stream(schema.name, schema)
        spill = bm.stats()["streams"]["spill-window0"]
    assert 0 < spill["start"] <= oldest_needed, (spill, oldest_needed)
    written = st["spilled_bytes"] + sum(c.bytes for c in recs)
    assert spill["files"] * SMALL.file_bytes < written / 2  # most of it was released


@pytest.mark.parametrize("which, kind", [(-1, "clocked"), (0, "clocked"), (0, "transactional")])
def test_a_damaged_spilled_unit_of_the_newest_checkpoint_falls_back(tiny, tmp_path, which,
                                                                    kind):
    """A unit only the newest record lists is damaged on disk: the recovery falls back to the
    older record (see ``_damage_then_fall_back``) instead of failing mid-run."""
    from ftkit import records

    from scabbard.engine.spill import MIN_STATE_MEMORY
    from scabbard.ft.sinks import ClockedSink, TransactionalSink

    sink = {"clocked": ClockedSink, "transactional": TransactionalSink}[kind]
    q, ds = queries.get("DARWIN"), tiny["darwin"]
    n = 2 * ds.rows
    _ft(q, ds, tmp_path, 40, max_tuples=n, state_memory=MIN_STATE_MEMORY, sink=sink)
    newest, older = records(tmp_path / "storage")[:2]
    (mine,), (theirs,) = _spilled_entries(tmp_path)[:2]
    r = _damage_then_fall_back(q, ds, tmp_path, n, mine, theirs, older, which, sink)
    if which == 0:  # not the stream's tail (which opening the storage checks): found lazily
        assert r.damage[0].startswith(f"checkpoint {newest.id}'s state is damaged"), r.damage


def test_a_recovery_keeps_what_the_record_before_it_lists(tiny, tmp_path):
    """A recovery reads partitions back (their units released) and stops before its first
    checkpoint; the record it resumed from is then found damaged: the next recovery falls
    back to the record before it, whose spilled units were kept for that."""
    from ftkit import records

    from scabbard.engine.spill import MIN_STATE_MEMORY

    q, ds = queries.get("LRB1"), tiny["lrb"]
    n = 2 * ds.rows
    # checkpoint-only: a recovery's source starts at the record's offset (no stored input
    # replayed), so two tasks after it come before the next record's marker
    _ft(q, ds, tmp_path, 40, max_tuples=n, state_memory=MIN_STATE_MEMORY, persist_input=False)
    newest, older = records(tmp_path / "storage")[:2]
    (mine,), (theirs,) = _spilled_entries(tmp_path)[:2]
    rest = _ft(q, ds, tmp_path, 2, recover=True)  # every task closes panes: reloads
    (st,) = rest.run.spilled.values()
    assert st["reloads"] > 0 and rest.resumed_from == newest.id
    assert records(tmp_path / "storage")[0].id == newest.id  # no record since
    # the first unit only it lists: not the stream's tail, whose damage opening the storage
    # finds (the recovery above may have written nothing after it)
    r = _damage_then_fall_back(q, ds, tmp_path, n, mine, theirs, older, which=0)
    assert r.damage[0].startswith(f"checkpoint {newest.id}'s state is damaged"), r.damage


# LRB2 (COUNT over a 30 s sliding window: a pane's partials counted twice or lost changes
# a result) with eventual steps; DARWIN (tumbling: no closed pane kept) incremental
@pytest.mark.parametrize("name, mode", [("LRB2", "eventual"), ("DARWIN", "incremental"),
                                        campaign("LRB1", "incremental")])
def test_spilled_state_with_incremental_or_eventual_checkpoints_recovers_exactly_once(
        tiny, tmp_path, name, mode):
    """Under a budget with incremental (or eventual) checkpoints a partition in memory's
    closed panes are written once and listed again by the records after (the open panes'
    rows every time); stopped twice mid-stream, the committed output is the failure-free
    one."""
    from ftkit import failure_free

    from scabbard.engine.spill import MIN_STATE_MEMORY
    from scabbard.ft.sinks import read_output
    from scabbard.ft.verify import compare

    q, ds = queries.get(name), tiny[queries.workload_of(name)]
    n = 2 * ds.rows
    first = _ft(q, ds, tmp_path, 40, max_tuples=n, state_memory=MIN_STATE_MEMORY,
                checkpoint_mode=mode)
    (st,) = first.run.spilled.values()
    assert st["spills"] > 0 and len(first.checkpoints) > 5
    if mode == "eventual" and name != "DARWIN":  # sliding: steps write the panes as they close
        assert sum(c.operator["written"]["units"] for c in first.checkpoints) > 0
    rest = _ft(q, ds, tmp_path, 30, recover=True)
    assert rest.resumed_from is not None
    _ft(q, ds, tmp_path, recover=True)
    v = compare(read_output(tmp_path / "output"), failure_free(q, ds, n), q.schema)
    assert v.ok, v


def test_incremental_checkpoints_of_spilled_state_write_closed_panes_once(tiny, tmp_path):
    """The same run under a budget with full and with incremental checkpoints: the
    incremental one's records list the same state (equal output) but write less of it - a
    sliding window's closed panes once, not at every checkpoint."""
    from scabbard.ft.sinks import read_output
    from scabbard.ft.verify import compare

    q, ds = queries.get("LRB1"), tiny["lrb"]
    runs = {}
    for mode in ("full", "incremental"):
        root = tmp_path / mode
        r = _ft(q, ds, root, max_tuples=2 * ds.rows, state_memory=64 << 20,
                checkpoint_mode=mode)
        (st,) = r.run.spilled.values()
        assert st["spills"] == 0  # all of it in memory: the records write it
        runs[mode] = (sum(c.bytes for c in r.checkpoints), len(r.checkpoints),
                      read_output(root / "output"))
    (full, nfull, out_full), (inc, ninc, out_inc) = runs["full"], runs["incremental"]
    assert nfull > 5 and ninc > 5
    assert inc / ninc < 0.6 * full / nfull, (inc, ninc, full, nfull)
    v = compare(out_inc, out_full, q.schema)
    assert v.ok, v


@pytest.mark.crash
def test_a_kill_between_the_pieces_of_a_spilled_window_loses_none_of_it(tiny, tmp_path):
    """Under a budget a window leaves in pieces, key partition by key partition; the clocked
    sink stores each as it comes.  Killed after the 5th piece of a window: the next run
    writes the whole window again and the output is exactly the failure-free run's."""
    from scabbard.engine.spill import MIN_STATE_MEMORY
    from scabbard.ft.controller import Controller, campaign_config

    ds = tiny["darwin"]
    n = 2 * ds.rows
    c = Controller(campaign_config(
        "DARWIN", ds.path, tmp_path, max_tuples=n, batch_rows=997, rate=n / 4,
        state_memory=MIN_STATE_MEMORY, interval=0.2, sink="clocked"))
    camp = c.run([None, None], crash_at=["sink_write:5", "sink_write:70"])
    assert camp.crashes == 2, camp
    assert camp.verdict.ok, camp.verdict


@pytest.mark.crash
@pytest.mark.parametrize("mode, sink", [("eventual", "clocked"),
                                        campaign("incremental", "transactional")])
def test_kills_with_closed_panes_of_spilled_state_written_once(tiny, tmp_path, mode, sink):
    """LRB1 (sliding: every window needs the closed panes of the last 30 s) under a budget
    with eventual (or incremental) checkpoints, real processes killed in a write of closed
    panes between two records (a step's, or a spill's), in a checkpoint's write, while a
    partition is read back, and in a recovery's replay: the output is exactly the
    failure-free run's."""
    from scabbard.engine.spill import MIN_STATE_MEMORY
    from scabbard.ft.controller import Controller, campaign_config

    ds = tiny["lrb"]
    n = 2 * ds.rows
    c = Controller(campaign_config(
        "LRB1", ds.path, tmp_path, max_tuples=n, batch_rows=997, rate=n / 4,
        state_memory=MIN_STATE_MEMORY, interval=0.2, sink=sink, checkpoint_mode=mode))
    camp = c.run([None] * 4, crash_at=["spill_write:25", "checkpoint_state:2",
                                       "spill_read:40", "recovery_replay"])
    assert camp.crashes == 4, camp
    assert camp.verdict.ok, camp.verdict


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.parametrize("sink", ["transactional", "clocked"])
def test_kills_while_state_is_spilled_and_read_back(tiny, tmp_path, sink):
    """Real processes, SIGKILLed while a key partition is evicted (its units handed to storage,
    no record yet), while a spilled partition is read back - in a run and in the first
    windows after a recovery - in a checkpoint's write and in a recovery's replay, then at
    random: the output is exactly the failure-free run's."""
    import random

    from scabbard.engine.spill import MIN_STATE_MEMORY
    from scabbard.ft.controller import Controller, campaign_config

    ds = tiny["darwin"]
    n = 4 * ds.rows
    c = Controller(campaign_config(
        "DARWIN", ds.path, tmp_path, max_tuples=n, batch_rows=997, rate=n / 6,
        state_memory=MIN_STATE_MEMORY, interval=0.2, sink=sink))
    rng = random.Random(19)
    camp = c.run([None] * 5 + [rng.uniform(1.0, 3.0)],
                 crash_at=["spill_write:40", "spill_read:3", "checkpoint_state:2",
                           "spill_read:30", "recovery_replay"])
    assert camp.crashes == 5, camp
    assert camp.verdict.ok, camp.verdict


def test_notebook_13a_gives_each_engine_runs_window_latency_percentiles(tiny, tmp_path):
    """`bench state`'s engine runs (a child process each) report their windows' latency
    percentiles beside throughput and memory; the table puts them side by side per key
    count, in memory and within the budget."""
    import pandas as pd

    from scabbard.engine.spill import MIN_STATE_MEMORY
    from scabbard.experiments import state

    ds = tiny["darwin"]
    s = state.Settings(key_counts=(1,), systems=("engine", "engine-spill"),
                       state_memory=MIN_STATE_MEMORY, data_dir=str(tmp_path))
    rows = []
    for system in s.systems:
        work = tmp_path / system
        work.mkdir()
        got = state.engine_run(system, ds.path, s, work)
        assert 0 < got["latency_p50_ms"] <= got["latency_p95_ms"], got
        rows.append({"keys": 1, "system": system, **got})
    table = state.latency(pd.DataFrame(rows))
    assert list(table.columns) == ["keys", "engine p50 ms", "engine-spill p50 ms",
                                   "engine p95 ms", "engine-spill p95 ms"]
    assert table.notna().all().all()


def test_bench_state_sets_the_spilling_engine_beside_each_rocksdb_peer():
    """Darwin's comparison is the engine whose state spills against the peers on RocksDB:
    the table gives that ratio beside the in-memory engine's, and what the spilling process
    holds beyond its budget, and what each engine run holds above its loaded code."""
    import pandas as pd

    from scabbard.experiments import state

    runs = pd.DataFrame([{"keys": 10, "system": s, "tuples_per_s": t} for s, t in (
        ("engine", 8e6), ("engine-spill", 4e6), ("spark-rocksdb", 0.5e6),
        ("flink-rocksdb", 0.25e6))])
    runs["peak_anon_mb"] = [300.0, 200.0, np.nan, np.nan]
    runs["budget_mb"] = [np.nan, 16.0, np.nan, np.nan]
    runs["start_anon_mb"] = [120.0, 110.0, np.nan, np.nan]  # its code loaded
    row = state.summary(runs).iloc[0]
    assert row["engine-spill anon above its start MB"] == 90
    assert row["engine anon above its start MB"] == 180
    assert row["engine-spill / spark-rocksdb"] == 8 and row["engine / spark-rocksdb"] == 16
    assert row["engine-spill anon over budget MB"] == 184
    assert "engine anon over budget MB" not in row  # no budget
    assert row["engine-spill / flink-rocksdb"] == 16 and row["spill / in memory"] == 0.5


def test_bench_states_figure_sets_each_runs_memory_against_the_budget_plus_64_mib(tmp_path):
    """Fig. 5's figure: throughput bars with the rounds' range, and beside them what each
    engine run held above its start against the budget + 64 MiB line (where measured)."""
    import pandas as pd

    from scabbard.experiments import state

    runs = pd.DataFrame([{"keys": k, "system": s, "round": r, "tuples_per_s": t * (1 + r)}
                         for k in (10, 1000) for r in (0, 1) for s, t in (
                             ("engine", 8e6), ("engine-spill", 4e6), ("spark-rocksdb", 5e5))])
    spill = runs["system"] == "engine-spill"
    runs["peak_anon_mb"] = np.where(runs["system"] == "spark-rocksdb", np.nan, 150.0)
    runs["start_anon_mb"] = runs["peak_anon_mb"] - np.where(spill, 40.0, 100.0)
    runs["budget_mb"] = np.where(spill, 16.0, np.nan)
    from matplotlib.container import BarContainer

    fig = state.plot(runs, str(tmp_path))
    ax, bx = fig.axes
    assert (tmp_path / "state.png").exists()

    def heights(axis):  # per system, its bars
        return [[b.get_height() for b in c] for c in axis.containers
                if isinstance(c, BarContainer)]
    assert heights(ax) == [[12.0, 12.0], [6.0, 6.0], [0.75, 0.75]]  # the rounds' medians
    assert heights(bx) == [[100.0, 100.0], [40.0, 40.0]]
    assert [line.get_ydata()[0] for line in bx.lines if line.get_linestyle() == "--"] == [80]
    one = state.plot(runs.drop(columns=["start_anon_mb"]))
    assert len(one.axes) == 1
    import warnings

    with warnings.catch_warnings():  # one key count: bars of one value each, said quietly
        warnings.simplefilter("error")
        state.plot(runs[runs["keys"] == 10])


def test_an_engine_run_of_bench_state_allocates_from_one_malloc_arena(tiny, tmp_path):
    """The run's memory sampler starts a thread before the engine does: the child applies
    the allocator first, so every thread shares one arena (each arena would keep its own
    peak: engine/memory.py) and the peak measured is the engine's."""
    from scabbard.engine.spill import MIN_STATE_MEMORY
    from scabbard.experiments import state

    s = state.Settings(key_counts=(1,), systems=("engine-spill",), state_memory=MIN_STATE_MEMORY,
                       data_dir=str(tmp_path))
    got = state.engine_run("engine-spill", tiny["darwin"].path, s, tmp_path)
    assert got["malloc_arenas"] == 1, got


def test_a_spilling_window_of_many_keys_leaves_partition_by_partition_in_the_same_order(
        tiny, tmp_path, monkeypatch):
    """A task that closes one window gives its rows key partition by key partition as each
    is run (a reloaded partition's rows leave before the next comes back): the same rows in
    the same order as the window merged whole."""
    from scabbard.engine import spill

    q, ds = queries.get("DARWIN"), tiny["darwin"]

    def rows(streaming: bool):
        if not streaming:
            monkeypatch.setattr(spill.SpillingAssembler, "streams", lambda self, part: False)
        sink, work = CollectSink(), tmp_path / str(streaming)
        work.mkdir()
        run_query(q, ds, sink=sink, config=EngineConfig(
            workers=2, batch_rows=997, state_memory=spill.MIN_STATE_MEMORY,
            spill=disk_spill(work)))
        monkeypatch.undo()
        return sink.columns()

    pieces = []
    real = spill.SpillingAssembler.pieces
    monkeypatch.setattr(spill.SpillingAssembler, "pieces",
                        lambda self, part: (pieces.append(len(r[1])) or r
                                            for r in real(self, part)))
    streamed = rows(True)
    merged = rows(False)
    assert len(pieces) > 10 and max(pieces) < len(streamed["window_end"]) // 10
    assert list(streamed) == list(merged)
    for name in merged:
        np.testing.assert_array_equal(streamed[name], merged[name], err_msg=name)


def test_a_spilling_windows_pieces_reach_the_sink_while_its_partitions_are_read_back(
        tiny, tmp_path, monkeypatch):
    """A window of many keys leaves partition by partition all the way to the sink: each
    piece is written while the window's later partitions are still to be read back (one
    piece behind, as the last carries the watermark), so the window is never whole in
    memory, in the operator graph's channels either."""
    from scabbard.engine import spill

    q, ds = queries.get("DARWIN"), tiny["darwin"]
    reloads, seen = [0], []
    real = spill.SpillingAssembler._reload

    def reload(self, i, *args):
        reloads[0] += 1
        return real(self, i, *args)
    monkeypatch.setattr(spill.SpillingAssembler, "_reload", reload)

    class Watching(CollectSink):
        def write(self, batch):
            super().write(batch)
            if len(batch):  # the window it ends with, and the partitions read back by then
                seen.append((int(batch.column("window_end")[-1]), reloads[0]))

    sink = Watching()
    run_query(q, ds, sink=sink, config=EngineConfig(
        workers=2, batch_rows=997, state_memory=spill.MIN_STATE_MEMORY,
        spill=disk_spill(tmp_path)))
    by_window: dict[int, set] = {}
    for end, n in seen:
        by_window.setdefault(end, set()).add(n)
    # every window whose pieces came back from disk reached the sink while they did
    assert len(by_window) > 2 and all(len(ns) > 10 for ns in list(by_window.values())[:-1])


def test_the_end_of_the_streams_spilling_window_leaves_partition_by_partition_in_order(
        tiny, tmp_path, monkeypatch):
    """At the end of the stream the window still open (a tumbling window's one) leaves key
    partition by key partition as each is reloaded and flushed, not merged whole first: the
    same rows in the same order as merged."""
    from scabbard.engine import spill

    q, ds = queries.get("DARWIN"), tiny["darwin"]
    pieces = []
    real = spill.SpillingAssembler.flush_pieces
    monkeypatch.setattr(spill.SpillingAssembler, "flush_pieces",
                        lambda self: (pieces.append(len(r[1])) or r for r in real(self)))

    def rows(in_pieces: bool):
        if not in_pieces:
            monkeypatch.setattr(spill.SpillingAssembler, "flushes_in_pieces", lambda self: False)
        sink, work = CollectSink(), tmp_path / str(in_pieces)
        work.mkdir()
        run_query(q, ds, sink=sink, config=EngineConfig(
            workers=2, batch_rows=997, state_memory=spill.MIN_STATE_MEMORY,
            spill=disk_spill(work)))
        return sink.columns()

    streamed = rows(True)
    last = int((streamed["window_end"] == streamed["window_end"][-1]).sum())
    assert len(pieces) > 10 and sum(pieces) == last and max(pieces) < last // 10
    n = len(pieces)
    merged = rows(False)
    assert len(pieces) == n and list(streamed) == list(merged)  # merged whole: no piece
    for name in merged:
        np.testing.assert_array_equal(streamed[name], merged[name], err_msg=name)


def test_take_rows_gathers_the_named_rows_of_a_matrix_or_a_vector_in_their_order():
    """``take_rows(a, rows)`` is ``a[rows]`` (a task's edge keys, a split's columns): repeats,
    any order, int32 row numbers, none at all; a row past the end is an error, not garbage."""
    from scabbard.engine.tasks import take_rows

    m = np.arange(30, dtype=np.int64).reshape(10, 3)
    v = np.linspace(0.0, 1.0, 10)
    for rows in (np.array([3, 0, 3, 9], np.int64), np.array([7, 1], np.int32),
                 np.zeros(0, np.int64)):
        for a in (m, v):
            got = take_rows(a, rows)
            assert got.shape == a[rows].shape and np.array_equal(got, a[rows])
    with pytest.raises(IndexError):
        take_rows(m, np.array([10]))


def test_a_windows_tail_is_loaded_into_a_table_sized_for_its_groups(tiny):
    """A window loaded into the sequential state at once (a recovery's restored window, a
    long task's tail when a short task follows) starts with room for its groups - its rows
    over its panes: the key table does not grow while it loads (10 M groups grown from 64
    slots took 3.3-3.6 s, sized 1.6-2.1 s)."""
    from scabbard.engine import Engine
    from scabbard.engine.assembly import BranchAssembler, tail_groups
    from scabbard.engine.tasks import Edges
    from scabbard.kernels import hashtable as ht

    b = Engine(queries.get("DARWIN"), tiny["darwin"].tables).plan.branches[0]
    g = 5_000
    keys = np.random.default_rng(0).permutation(g).astype(np.int64).reshape(g, 1)
    a = BranchAssembler(b)
    a.pending = (Edges(np.full(g, 5, np.int64), keys, np.ones(g, np.int64),
                       np.ones((g, len(b.iops)), np.int64),
                       np.ones((g, len(b.fops)), np.float64)), 5)
    a._load_pending()
    assert len(a.table.keys) == g and ht.live(a.table) == g  # sized once, never grown
    assert len(a.partials().pane) == g
    assert tail_groups(np.repeat(np.arange(3), 400)) == 400  # every group in each pane
    assert tail_groups(np.zeros(0, np.int64)) == tail_groups(np.arange(10)) == 64


def test_bench_state_recovery_runs_only_the_systems_named_and_refuses_others(
        tiny, tmp_path, monkeypatch):
    """Darwin's Fig. 2 at a state the in-memory engine cannot hold here runs the spilling
    engine alone (`--systems`, or `--in-memory-keys` below the key count); a system Fig. 2
    does not measure is refused before any dataset is made."""
    from scabbard.engine.spill import MIN_STATE_MEMORY
    from scabbard.errors import FlagError
    from scabbard.experiments import state

    made, logged = [], []
    monkeypatch.setattr(state, "dataset",
                        lambda keys, s, rate=None: made.append(keys) or tiny["darwin"])
    bad = state.Settings(key_counts=(1000,), systems=("engine", "spark-rocksdb"),
                         data_dir=str(tmp_path))
    with pytest.raises(FlagError, match="measures engine-ft and engine-ft-spill, not engine"):
        state.recovery(bad, log=logged.append)
    assert made == []
    with pytest.raises(ValueError, match="in-memory-keys"):
        state.Settings(in_memory_keys=-1)
    for systems, limit in ((("engine-ft-spill",), 0), (state.RECOVERY_SYSTEMS, 999)):
        s = state.Settings(key_counts=(1000,), systems=systems, in_memory_keys=limit,
                           state_memory=MIN_STATE_MEMORY, data_dir=str(tmp_path),
                           output_dir=str(tmp_path / "o"))
        runs = state.recovery(s, log=logged.append)
        assert list(runs["system"]) == ["engine-ft-spill"]
        assert runs["state_mb"].iloc[0] > 0 and runs["catch_up_s"].iloc[0] > 0
    assert made == [1000, 1000]
    assert sum("engine-ft not run: above --in-memory-keys 999" in line for line in logged) == 1


def test_darwins_fig2_datasets_see_each_key_twice_a_window_fig5s_keep_the_rate(monkeypatch):
    """Fig. 2's key count sets the state's size: a rate too low for it to fill a window is
    raised to a key count / 30 tuples a second; a rate above that is kept.  Fig. 5's
    datasets keep the rate asked (its figures were measured so)."""
    from scabbard.experiments import state
    from scabbard.workloads import darwin

    s = state.Settings(rate=1_600_000)
    assert state.rate_for(10_000_000, s) == 1_600_000
    assert state.rate_for(120_000_000, s) == 4_000_000
    assert state.rate_for(1000, state.Settings(rate=500)) == 500
    asked = []
    monkeypatch.setattr(type(darwin.SPEC), "generate",
                        lambda spec, **kw: asked.append((spec.name, kw["rate"])))
    state.dataset(120_000_000, s)
    state.dataset(120_000_000, s, state.rate_for(120_000_000, s))
    assert asked == [("darwin", 1_600_000), ("darwin", 4_000_000)]
