"""The crash-state explorer: its model of a POSIX file system after a machine crash, and a
small exploration of real runs for both exactly-once sinks."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest
from ftkit import campaign

from scabbard.check import Explorer, FileSystemModel, Settings
from scabbard.check.model import CrashState
from scabbard.storage.fileio import Op


def _ops() -> list[Op]:
    """A folder made and its parent flushed; a file written and flushed, then written again
    (two pages) and renamed, unflushed."""
    return [
        Op("mkdir", "d"),
        Op("syncdir", ""),  # the folder's name: else reordered directories may lose it
        Op("create", "d/.a.tmp", 1),
        Op("write", "d/.a.tmp", 1, 0, b"A" * 8192),
        Op("sync", "d/.a.tmp", 1),
        Op("rename", "d/.a.tmp", dst="d/a"),
        Op("syncdir", "d"),
        Op("write", "d/a", 1, 0, b"B" * 8192),
        Op("create", "d/b", 2),
        Op("write", "d/b", 2, 0, b"C" * 10),
    ]


def test_flushed_data_and_flushed_names_survive_every_crash(tmp_path):
    m = FileSystemModel(_ops())
    states = list(m.sample(200, random.Random(1)))
    assert len({s.digest() for s in states}) == len(states)
    for k, s in enumerate(states):
        m.materialize(s, tmp_path / str(k))
        root = tmp_path / str(k)
        if s.at >= 7:  # the rename was flushed with its directory: 'a' exists, whole
            data = (root / "d" / "a").read_bytes()
            assert len(data) == 8192
            # each page is the later, unflushed write (B) up to a sector boundary, then the
            # flushed one (A): torn by page, and inside a page after a sector
            for page in (data[:4096], data[4096:]):
                b = len(page) - len(page.lstrip(b"B"))
                assert b % 512 == 0 and page[b:] == b"A" * (4096 - b)
        assert not (root / "d" / ".a.tmp").exists() or s.at < 7


def test_unflushed_writes_can_be_dropped_kept_or_torn(tmp_path):
    m = FileSystemModel(_ops())
    seen = set()
    for k, s in enumerate(m.sample(200, random.Random(2))):
        if s.at != len(m.ops):
            continue
        m.materialize(s, tmp_path / str(k))
        data = (tmp_path / str(k) / "d" / "a").read_bytes()
        seen.add((data[:4096] == b"B" * 4096, data[4096:] == b"B" * 4096))
        seen.add(("inside", any(b"A" in pg and b"B" in pg for pg in (data[:4096], data[4096:]))))
        b = tmp_path / str(k) / "d" / "b"
        seen.add(("b", b.exists()))
    assert {(False, False), (True, True), ("b", True), ("b", False)} <= seen
    assert (True, False) in seen or (False, True) in seen  # torn by page
    assert ("inside", True) in seen  # torn inside a page, after a sector


def test_names_persist_as_a_prefix_at_least_up_to_a_flushed_directory(tmp_path):
    m = FileSystemModel(_ops())
    p = m.point(len(m.ops))
    assert p.forced == 3  # mkdir, create, rename: forced by the flush of d
    s = CrashState(len(m.ops), p.forced, (), "test")
    m.materialize(s, tmp_path)
    assert (tmp_path / "d" / "a").exists() and not (tmp_path / "d" / "b").exists()


@pytest.mark.parametrize("query, sink", [("CM1", "clocked"), ("LRB3", "transactional")])
def test_machine_durability_survives_every_explored_crash_state(tiny, query, sink):
    from scabbard.queries import workload_of

    ds = tiny[workload_of(query)]
    s = Settings(query, sink=sink, durability="machine", states=40, tuples=30_000, seed=3)
    rep = Explorer(s, ds).explore()
    assert rep.explored == 40
    assert set(rep.kinds) == {"all kept", "all dropped", "one dropped", "random", "reordered"}
    assert rep.ok, rep.summary()


def test_machine_durability_survives_crash_states_with_p_streams_between_operators(tiny):
    """SG3 with a p-stream on every edge (both windows' outputs and the one before the sink):
    machine crashes that tear or drop the channels' writes recover exactly."""
    s = Settings("SG3", sink="transactional", durability="machine", states=30, tuples=30_000,
                 seed=5, persist_at=("window0", "window1", "join0"))
    rep = Explorer(s, tiny["sg"]).explore()
    assert rep.explored == 30 and rep.ok, rep.summary()
    assert rep.operations > 300  # the channels' writes are among the recorded operations


def test_the_explorer_grows_its_pool_files_for_a_window_that_needs_them(tiny, monkeypatch):
    """A p-stream on an edge keeps each window's results whole in one p-unit: when one does
    not fit the explorer's small pool files, the run is recorded again with files that hold
    it (LRB3's window0 on the small dataset needed that), and its crash states recover."""
    from scabbard.check import crashstates
    from scabbard.storage import StorageConfig

    monkeypatch.setattr(crashstates, "STORAGE", StorageConfig(file_bytes=16 << 10, pool_files=2,
                                                              bulk_bytes=8 << 10))
    s = Settings("LRB3", sink="clocked", durability="machine", states=4, tuples=10_000, seed=2,
                 persist_at=("window0",))
    ex = Explorer(s, tiny["lrb"])
    rep = ex.explore()
    assert ex.storage.file_bytes > 16 << 10
    assert rep.explored == 4 and rep.ok, rep.summary()


@pytest.mark.parametrize("states", [8, pytest.param(30, marks=pytest.mark.campaign)])
def test_crash_states_between_the_pieces_of_windows_over_several_clocked_log_files(
        tiny, monkeypatch, states):
    """The clocked sink's log files made small (32 KiB) so that LRB2's windows each fill
    several: machine crashes that keep some pieces of a window and drop or tear the rest
    leave only whole windows committed, and recover exactly (8 states of each kind's
    first draws; 30 in the campaign: each state recovers LRB2, ~8 s)."""
    import dataclasses

    from scabbard.ft.sinks import ClockedSink

    small = dataclasses.replace(ClockedSink.CONFIG, file_bytes=32 << 10, bulk_bytes=16 << 10)
    monkeypatch.setattr(ClockedSink, "CONFIG", small)
    s = Settings("LRB2", sink="clocked", durability="machine", states=states, tuples=20_000,
                 seed=7)
    ex = Explorer(s, tiny["lrb"])
    fits = (small.file_bytes - small.data_start - small.align) // ex.query.schema.row_bytes
    assert ex.expected().groupby("window_end").size().max() > 2 * fits  # over several files
    rep = ex.explore()
    assert rep.explored == states and rep.ok, rep.summary()
    assert set(rep.kinds) == {"all kept", "all dropped", "one dropped", "random", "reordered"}


@pytest.mark.parametrize("query, sink", [("CM1", "transactional"), ("YSB", "clocked")])
def test_machine_durability_survives_crash_states_with_parallel_ingress(tiny, query, sink):
    """The input appended by three ingress partitions in turn, compressed after
    push-up: every explored machine crash recovers exactly (the recoveries read the source
    with three partitions again)."""
    from scabbard.queries import workload_of

    s = Settings(query, sink=sink, durability="machine", states=40, tuples=30_000, seed=7,
                 push_up=True, compression="default", ingress_partitions=3)
    rep = Explorer(s, tiny[workload_of(query)]).explore()
    assert rep.explored == 40 and rep.ok, rep.summary()
    assert "3 ingress partitions" in rep.summary()


def test_machine_durability_survives_crash_states_with_the_adaptive_codecs(tiny):
    """SM after push-up with the adaptive codecs re-picked at every batch of the recorded run
    (its clock and power readings go to deltas in blocks): every explored machine crash,
    segments torn or dropped, recovers exactly."""
    s = Settings("SM", sink="clocked", durability="machine", states=30, tuples=30_000, seed=11,
                 push_up=True, compression="adaptive")
    rep = Explorer(s, tiny["sm"]).explore()
    assert rep.explored == 30 and rep.ok, rep.summary()


@pytest.mark.parametrize("mode, sink", [("eventual", "clocked"),
                                        campaign("incremental", "transactional")])
def test_machine_durability_survives_crash_states_of_spilled_state(tiny, mode, sink):
    """LRB1 (sliding) with its window state under the smallest budget - partitions spilled,
    read back, their closed panes written once by steps and markers, the records listing
    the units - every explored machine crash recovers exactly."""
    from scabbard.engine.spill import MIN_STATE_MEMORY

    s = Settings("LRB1", sink=sink, durability="machine", states=16, tuples=20_000, seed=5,
                 batch_rows=997, checkpoint_mode=mode, state_memory=MIN_STATE_MEMORY)
    rep = Explorer(s, tiny["lrb"]).explore()
    assert rep.explored == 16 and rep.ok, rep.summary()
    assert rep.spilled["spills"] > 0 and rep.spilled["reloads"] > 0, rep.spilled


def test_process_durability_is_shown_to_lose_results_after_a_machine_crash(tiny):
    """The explorer can fail: with nothing flushed, states where a record outlives the state
    or output it names exist, and recovery from them is wrong."""
    s = Settings("CM1", sink="clocked", durability="process", states=60, tuples=30_000, seed=3)
    rep = Explorer(s, tiny["cm"]).explore()
    assert rep.violations, rep.summary()
    assert "crash after operation" in rep.violations[0].log


def test_the_command_prints_the_exploration(tiny):
    r = subprocess.run([sys.executable, "-m", "scabbard", "check", "crash-states", "--query",
                        "YSB", "--states", "6", "--tuples", "20000", "--push-up",
                        "--compression", "adaptive", "--data", str(tiny["ysb"].path)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "6 crash states explored" in r.stdout and "0 violations" in r.stdout


def test_name_operations_may_reorder_across_directories_unless_a_flush_orders_them(tmp_path):
    """ALICE's model: 'first' was created before 'second', in another directory; only the
    second's directory was flushed.  A journal keeps both (a prefix); reordered directories
    may keep the second alone - and never lose what its directory's flush made durable."""
    ops = [Op("mkdir", "d1"), Op("mkdir", "d2"), Op("syncdir", ""),
           Op("create", "d1/first", 1), Op("write", "d1/first", 1, 0, b"1" * 10),
           Op("sync", "d1/first", 1),
           Op("create", "d2/second", 2), Op("write", "d2/second", 2, 0, b"2" * 10),
           Op("sync", "d2/second", 2), Op("syncdir", "d2")]
    m = FileSystemModel(ops)
    seen = set()
    for k, s in enumerate(m.sample(300, random.Random(3))):
        if s.at != len(ops):
            continue
        m.materialize(s, tmp_path / str(k))
        first = (tmp_path / str(k) / "d1" / "first").exists()
        second = (tmp_path / str(k) / "d2" / "second").exists()
        assert second  # its directory was flushed
        seen.add((s.how == "reordered", first))
    assert (False, False) not in seen  # a journal keeps what came before a forced name
    assert (True, False) in seen  # reordered: the first name lost, the later one kept


@pytest.mark.parametrize("query, sink", [("LRB1", "clocked"), ("SG2", "transactional")])
def test_machine_durability_survives_crash_states_of_the_partitioned_dataflow(
        tiny, monkeypatch, query, sink):
    """The window operator as PipeFabric's partitioned dataflow (--assembly dataflow:2, as
    auto runs it where tasks hold 2^19 keys or more), its crash states' recoveries crashed in
    turn: every committed output a prefix of the serial engine's failure-free output, every
    recovery - the checkpointed pane partials routed back to the partitions - exact."""
    from scabbard.engine import dataflow
    from scabbard.queries import workload_of

    ran = []
    real = dataflow.DataflowExecution.run
    monkeypatch.setattr(dataflow.DataflowExecution, "run",
                        lambda self: ran.append(self.flow.parts) or real(self))
    s = Settings(query, sink=sink, durability="machine", states=12, tuples=20_000, seed=5,
                 batch_rows=997, assembly="dataflow:2", nested=1)
    rep = Explorer(s, tiny[workload_of(query)]).explore()
    assert rep.explored == 12 and rep.ok, rep.summary()
    assert rep.nested[1] >= 6 and "--assembly dataflow:2" in rep.summary()
    # the recorded run, the crash states' recoveries and theirs: all through the partitions
    assert len(ran) >= 1 + 12 and set(ran) == {2}


def test_larger_pool_files_keep_a_recorded_runs_long_tasks_whole(tiny, tmp_path):
    """``file_mib``: a task's input is cut to a p-unit of a pool file - 1 MiB files cut LRB1's
    50,000-tuple tasks, 4 MiB ones hold them (so that a run whose tasks are long enough for
    auto's dataflow can be explored)."""
    from scabbard.ft.runfile import recorded_run

    for mib, cut in ((1, True), (4, False)):
        s = Settings("LRB1", states=1, tuples=60_000, batch_rows=50_000, file_mib=mib)
        Explorer(s, tiny["lrb"], tmp_path / f"f{mib}").record()
        rows = recorded_run(tmp_path / f"f{mib}" / "recorded" / "storage")["batch_rows"]
        assert (rows < 50_000) == cut, (mib, rows)
    with pytest.raises(ValueError, match="file_mib"):
        Settings("LRB1", file_mib=0)
    from scabbard.check import crashstates

    rep = crashstates.Report(Settings("DARWIN", file_mib=32), layout={"chosen": "dataflow:2"})
    assert "32 MiB pool files, window state dataflow:2 (auto)" in rep.summary()


def test_a_crash_during_recovery_nested_two_levels_recovers_exactly(tiny):
    """``nested``: each crash state's recovery is recorded and crashed in turn (a machine
    crash during the recovery), and so is the recovery of that - every state's committed
    output a prefix, every recovery exact."""
    s = Settings("CM1", sink="transactional", durability="machine", states=12, tuples=30_000,
                 seed=3, nested=2)
    rep = Explorer(s, tiny["cm"]).explore()
    assert rep.ok, rep.summary()
    assert rep.nested[1] >= 12 and rep.nested[2] >= 12, rep.nested
    assert "crash states inside recoveries at level 2" in rep.summary()


def test_crashes_during_recovery_are_found_where_nothing_is_flushed(tiny):
    """The nested mode can fail: with process durability (nothing flushed) a crash during a
    recovery leaves states that break exactly-once."""
    s = Settings("CM1", sink="transactional", durability="process", states=40, tuples=30_000,
                 seed=3, nested=2)
    rep = Explorer(s, tiny["cm"]).explore()
    assert any(v.problem.startswith("crash during recovery") for v in rep.violations), \
        rep.summary()


def test_record_existing_lays_a_durable_base_with_no_crash_point_inside(tmp_path):
    from scabbard.storage import RecordingIO

    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_bytes(b"xyz")
    io = RecordingIO(tmp_path)
    base = io.record_existing()
    with open(tmp_path / "g", "wb"):
        pass
    fd = io.open(tmp_path / "a" / "b" / "f", os.O_WRONLY)
    io.pwritev(fd, [b"Q"], 0)
    io.close(fd)
    model = FileSystemModel(io.ops, start=base)
    assert all(p > base for p in model.crash_points())
    state = CrashState(len(io.ops), len([o for o in io.ops if o.is_meta]),
                       tuple((i, ()) for i in range(base, len(io.ops))), "all dropped")
    out = tmp_path.parent / "materialized"
    model.materialize(state, out)
    assert (out / "a" / "b" / "f").read_bytes() == b"xyz"  # the base survives any crash


# -- mutations: a flush removed must be caught by the explorer ---------------------------------
def _without_flush(kind: str, where: str | None = None):
    """A RecordingIO that skips (and so does not log) a kind of flush: every file's data
    (``data``), or one directory's (``dir``, its path in the recording)."""
    from scabbard.storage import RecordingIO

    class Mutant(RecordingIO):
        def fsync(self, fd):
            if kind != "data":
                super().fsync(fd)

        fdatasync = fsync

        def fsync_dir(self, path):
            if not (kind == "dir" and self._rel(path) == where):
                super().fsync_dir(path)

    return Mutant


# (sink, flush removed, where, states, tuples): the records' folder matters once GC released
# input a lost record needed - a run long enough for that (150,000 tuples: 1 MiB pool files)
MUTATIONS = [
    ("clocked", "data", None, 150, 30_000), ("transactional", "data", None, 150, 30_000),
    ("transactional", "dir", "storage/pool", 300, 30_000),  # the acknowledged-input check
    *(campaign(sink, "dir", d, 600, 30_000) for sink, d in (
        ("clocked", "."), ("clocked", "storage"), ("clocked", "storage/pool"),
        ("clocked", "output"), ("clocked", "output/log"), ("clocked", "output/log/pool"),
        ("transactional", "."), ("transactional", "storage"), ("transactional", "output"),
        ("transactional", "output/pending"), ("transactional", "output/committed"))),
    *(campaign(sink, "dir", "storage/checkpoints", 300, 150_000)
      for sink in ("clocked", "transactional")),
]


@pytest.mark.parametrize("sink, kind, where, states, tuples", MUTATIONS)
def test_removing_a_flush_is_caught(tiny, monkeypatch, sink, kind, where, states, tuples):
    """The mutation table (CM1, both sinks): with the data flushes or one directory's flush
    removed from the recorded run, some crash state breaks exactly-once - or reads input
    from the source again that was acknowledged as persisted (a lost pool file).  The
    default run keeps three cells; ``make campaign`` every directory."""
    import scabbard.check.crashstates as cs

    monkeypatch.setattr(cs, "RecordingIO", _without_flush(kind, where))
    s = Settings("CM1", sink=sink, durability="machine", states=states, tuples=tuples, seed=7)
    rep = Explorer(s, tiny["cm"]).explore()
    assert rep.violations, f"removing the {where or 'data'} flush was not caught: {rep.summary()}"


def test_explore_says_what_it_records_and_its_progress_every_twentieth(monkeypatch):
    """``scabbard check crash-states``'s lines (scabbard.check.crashstates.explore)."""
    from types import SimpleNamespace

    from scabbard.check import crashstates

    class Fake:
        def __init__(self, settings, dataset):
            self.s = settings

        def explore(self, progress):
            rep = crashstates.Report(self.s)
            for n in range(1, self.s.states + 1):
                rep.explored = n
                progress(rep)
            return rep

    monkeypatch.setattr(crashstates, "Explorer", Fake)
    lines = []
    rep = crashstates.explore(Settings("CM1", states=45), SimpleNamespace(path="d"), lines.append)
    assert rep.explored == 45 and rep.ok
    assert lines[0] == ("recording a 60,000-tuple run of CM1 (clocked sink, machine durability) "
                        "on d, then exploring 45 crash states")
    assert [int(x.split()[0]) for x in lines[1:]] == [2 * i for i in range(1, 23)] + [45]
    assert all(x.split()[1:4:2] == ["states", "violations"] for x in lines[1:])
