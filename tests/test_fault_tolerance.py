"""Checkpoints, recovery and exactly-once output - in process and under real SIGKILLs."""

from __future__ import annotations

import itertools
import json
import random
import time

import numpy as np
import pandas as pd
import pytest
from ftkit import CFG, SMALL, campaign, failure_free

from scabbard import queries
from scabbard.engine import EngineConfig
from scabbard.engine.runtime import Engine
from scabbard.ft.controller import Controller, campaign_config
from scabbard.ft.recovery import run_fault_tolerant
from scabbard.ft.sinks import ClockedSink, TransactionalSink, open_output, read_output
from scabbard.ft.verify import compare
from scabbard.pog.checkpoint import CheckpointError


def completed(storage) -> bool:
    return "completed" in json.loads((storage / "run.json").read_text())


@pytest.mark.parametrize("name, kind, persist, pieces", [
    ("CM1", ClockedSink, True, False), ("LRB1", TransactionalSink, True, False),
    ("NQ", ClockedSink, True, False),
    ("YSB", TransactionalSink, False, False),  # checkpoint-only: the source replays the input
    # raw input in tasks over several p-units each (Engine.raw_tasks_in_pieces): the stored
    # pieces replayed one by one
    ("CM1", ClockedSink, True, True), ("YSB", TransactionalSink, True, True),
])
def test_stopped_and_recovered_runs_give_the_failure_free_output(tiny, tmp_path, name, kind,
                                                                  persist, pieces):
    q = queries.get(name)
    ds = tiny[queries.workload_of(name)]
    n = 150 * ds.rows
    cfg = CFG
    if pieces:
        piece = Engine(q, ds.tables).piece_rows(SMALL.file_bytes, SMALL.data_start)
        cfg = EngineConfig(workers=2, batch_rows=3 * piece + 17)
        engine = Engine(q, ds.tables, cfg)
        rows = engine.task_rows(ds, n / 2.0, engine.unit_rows(SMALL.file_bytes,
                                                              SMALL.data_start))
        assert 2 * piece < rows and 20 * rows < n  # tasks of 3 p-units or more, many
    store, out = tmp_path / "store", tmp_path / "out"
    # paced so that the first 0.4 s never reach the end of the input, however fast the machine
    r = run_fault_tolerant(q, ds, store, kind(out), cfg, interval=0.02, max_tuples=n,
                           rate=n / 2.0, duration=0.4, layout=SMALL,
                           persist_input=persist)
    assert r.checkpoints and not completed(store)
    assert ("input" in json.loads((store / "streams.json").read_text())) == persist
    resumed = []
    while not completed(store):
        r = run_fault_tolerant(q, ds, store, kind(out), cfg, interval=0.02, recover=True,
                               duration=0.4, layout=SMALL)
        resumed.append(r.resumed_from)
        assert len(resumed) < 100
    assert any(c is not None for c in resumed)
    v = compare(read_output(out), failure_free(q, ds, n), q.schema)
    assert v.ok, v


def test_a_damaged_newest_checkpoint_falls_back_to_the_previous(tiny, tmp_path):
    q = queries.get("CM1")
    ds = tiny["cm"]
    n = 150 * ds.rows
    store, out = tmp_path / "store", tmp_path / "out"
    run_fault_tolerant(q, ds, store, ClockedSink(out), CFG, interval=0.02, max_tuples=n,
                       duration=0.5, layout=SMALL)
    records = sorted((store / "checkpoints").glob("ckpt-*.json"))
    assert len(records) >= 2
    newest = records[-1]
    newest.write_text(newest.read_text().replace('"seq": ', '"seq": 1'))  # edited: crc fails
    r = run_fault_tolerant(q, ds, store, ClockedSink(out), CFG, interval=0.02, recover=True,
                           layout=SMALL)
    assert r.resumed_from == int(records[-2].stem.split("-")[1])
    assert completed(store)
    assert compare(read_output(out), failure_free(q, ds, n), q.schema).ok


def test_no_usable_checkpoint_after_gc_fails_clearly(tiny, tmp_path):
    q = queries.get("CM1")
    ds = tiny["cm"]
    store, out = tmp_path / "store", tmp_path / "out"
    run_fault_tolerant(q, ds, store, ClockedSink(out), CFG, interval=0.02,
                       max_tuples=150 * ds.rows, duration=0.5, layout=SMALL)
    for p in (store / "checkpoints").glob("ckpt-*.json"):
        p.write_text("{ torn")
    with pytest.raises(CheckpointError, match="cannot be recovered"):
        run_fault_tolerant(q, ds, store, ClockedSink(out), CFG, recover=True,
                           layout=SMALL)


def test_recover_needs_a_run_and_a_new_run_needs_an_empty_folder(tiny, tmp_path):
    q = queries.get("CM1")
    ds = tiny["cm"]
    with pytest.raises(CheckpointError, match="no run to recover"):
        run_fault_tolerant(q, ds, tmp_path / "s", ClockedSink(tmp_path / "o"), CFG, recover=True)
    run_fault_tolerant(q, ds, tmp_path / "s", ClockedSink(tmp_path / "o"), CFG,
                       max_tuples=ds.rows, layout=SMALL)
    with pytest.raises(CheckpointError, match="already holds a run"):
        run_fault_tolerant(q, ds, tmp_path / "s", ClockedSink(tmp_path / "o"), CFG)


def test_verdict_counts_lost_duplicated_and_different_rows():
    schema = queries.get("CM2").schema
    want = pd.DataFrame({f.name: [1, 2, 3] if not f.dtype.startswith("float") else [0.5, 1.5, 2.5]
                         for f in schema.fields})
    assert compare(want, want, schema).ok
    got = pd.concat([want.iloc[[0, 0, 1]], want.iloc[[2]].assign(
        **{f.name: 9.0 for f in schema.fields if f.dtype.startswith("float")})])
    v = compare(got, want, schema)
    assert (v.lost, v.duplicated, v.different) == (0, 1, 1), v
    v = compare(want.iloc[[0]], want, schema)
    assert (v.lost, v.duplicated, v.different) == (2, 0, 0)


def test_unknown_exactly_once_kind():
    with pytest.raises(ValueError, match="clocked, transactional"):
        open_output("x", "nope")


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.parametrize("name", ["CM1", *map(campaign, ["LRB1", "LRB3", "YSB", "NQ"])])
def test_kill_campaign(tiny, tmp_path, name):
    """SIGKILL the engine process at random moments, recover, compare with a failure-free run."""
    ds = tiny[queries.workload_of(name)]
    rng = random.Random(name)
    n = 120 * ds.rows  # paced to last ~6 s on any machine, so that a kill at 1.2-3 s lands
    c = Controller(campaign_config(
        name, ds.path, tmp_path, max_tuples=n, batch_rows=4000, rate=n / 6,
        interval=0.2, sink="transactional" if name == "LRB3" else "clocked"))
    camp = c.run([rng.uniform(1.2, 3.0) for _ in range(3)])
    assert camp.kills >= 1, "the run finished before any kill: make it longer"
    assert camp.verdict.ok, camp.verdict


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.campaign  # the default run kills the partitioned assembly in crash_points_with_pane_units
def test_kill_campaign_with_key_partitioned_assembly(tiny, tmp_path):
    """The same with the sequential windows' groups split between three partitions:
    each incarnation splits the checkpointed window state between its partitions again, and
    LRB3's fused per-window count is partitioned by its own keys."""
    ds = tiny["lrb"]
    n = 120 * ds.rows
    c = Controller(campaign_config(
        "LRB3", ds.path, tmp_path, max_tuples=n, batch_rows=4000, rate=n / 6,
        assembly="partitioned:3", interval=0.2))
    assert "partitioned:3" in c.command(recover=False)
    camp = c.run([random.Random(21).uniform(1.2, 3.0) for _ in range(3)])
    assert camp.kills >= 1, "the run finished before any kill: make it longer"
    assert camp.verdict.ok, camp.verdict


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.parametrize("name, sink, reduce", [
    ("LRB2", "clocked", False), campaign("NQ", "transactional", True)])
def test_kill_campaign_with_a_partitioned_dataflow(tiny, tmp_path, name, sink, reduce):
    """SIGKILLs at random moments with the window operator as a partitioned dataflow of three
    partition threads: each incarnation routes the checkpointed window state back to its
    partitions by key, and the committed output is the failure-free run's."""
    ds = tiny[queries.workload_of(name)]
    n = (10 if name == "LRB2" else 120) * ds.rows  # LRB2: ~30 result rows a tuple
    c = Controller(campaign_config(
        name, ds.path, tmp_path, max_tuples=n, batch_rows=4000, rate=n / 6,
        assembly="dataflow:3", push_up=reduce, compression="adaptive" if reduce else "none",
        interval=0.2, sink=sink))
    assert "dataflow:3" in c.command(recover=False)
    camp = c.run([random.Random(name).uniform(1.2, 3.0) for _ in range(3)])
    assert camp.kills >= 1, "the run finished before any kill: make it longer"
    assert camp.verdict.ok, camp.verdict


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.parametrize("name, sink, assembly, reduce", [
    ("LRB1", "transactional", "auto", True), ("LRB-ROWS", "clocked", "auto", False),
    campaign("CM1", "clocked", "auto", False), campaign("YSB", "clocked", "auto", True),
    campaign("LRB3", "transactional", "partitioned:3", False),
    # a stateless selection; above, a count-based window (its windows by input offset)
    campaign("PF-MOD2", "transactional", "auto", True)])
def test_kill_campaign_with_parallel_ingress(tiny, tmp_path, name, sink, assembly, reduce):
    """SIGKILLs at random moments with the source read by several ingress partitions, each
    incarnation with another number than the one it recovers (3, 1, 2, ...: the stored input
    is one p-stream whatever wrote it), with both sinks, push-up and the adaptive codecs, and
    with the key-partitioned assembly."""
    ds = tiny[queries.workload_of(name)]
    n = 120 * ds.rows  # paced to last ~6 s on any machine, so that a kill at 1.2-3 s lands
    c = Controller(campaign_config(
        name, ds.path, tmp_path, max_tuples=n, batch_rows=4000, rate=n / 6, assembly=assembly,
        push_up=reduce, compression="adaptive" if reduce else "none", compression_interval=0.5,
        interval=0.2, sink=sink), ingress_partitions=(3, 1, 2))
    assert "--ingress-partitions" in c.command(recover=False)
    camp = c.run([random.Random(name).uniform(1.2, 3.0) for _ in range(3)])
    assert camp.kills >= 1, "the run finished before any kill: make it longer"
    assert camp.verdict.ok, camp.verdict


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.parametrize("name, sink, mode", [
    cell if cell in {("SG1", "transactional", "incremental"), ("LRB3", "clocked", "eventual")}
    else campaign(*cell)
    for cell in itertools.product(["SG1", "LRB1", "LRB3", "YSB"], ["clocked", "transactional"],
                                  ["incremental", "eventual"])])
def test_kill_campaign_with_incremental_checkpoints(tiny, tmp_path, name, sink, mode):
    """Random kills with pane units written once: incremental checkpoints, and
    eventual ones whose steps save panes every 5 ms between records."""
    ds = tiny[queries.workload_of(name)]
    rng = random.Random(f"{name}-{sink}-{mode}")
    n = 120 * ds.rows
    extra = {"step_ms": 5, "max_replay_tuples": 200_000} if mode == "eventual" else {}
    c = Controller(campaign_config(
        name, ds.path, tmp_path, max_tuples=n, batch_rows=4000, rate=n / 6,
        interval=0.2, sink=sink, checkpoint_mode=mode, **extra))
    assert f"--checkpoint-mode {mode}" in " ".join(c.command(recover=True))
    camp = c.run([rng.uniform(1.2, 3.0) for _ in range(3)])
    assert camp.kills >= 1, "the run finished before any kill: make it longer"
    assert camp.verdict.ok, camp.verdict


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.parametrize("sink", ["transactional", campaign("clocked")])
def test_crash_points_with_parallel_ingress(tiny, tmp_path, sink):
    """The forced crash points - inside a checkpoint's write, in the middle of a recovery's
    replay, between a record's write and its rename or commit - with ingress partitions
    (2, then 3, ...)."""
    ds = tiny["cm"]
    n = 150 * ds.rows
    c = Controller(campaign_config(
        "CM1", ds.path, tmp_path, max_tuples=n, batch_rows=4000, rate=n / 5,
        interval=0.2, sink=sink), ingress_partitions=(2, 3))
    last = "checkpoint_commit:2" if sink == "transactional" else "checkpoint_record:2"
    camp = c.run([], crash_at=["checkpoint_state:3", "recovery_replay", last])
    assert camp.crashes == 3, camp
    assert camp.verdict.ok, camp.verdict


_PIECES_CHILD = """
import json, sys
from scabbard import faults, queries
from scabbard.data import open_dataset
from scabbard.engine import EngineConfig
from scabbard.ft.recovery import run_fault_tolerant
from scabbard.ft.sinks import open_output
from scabbard.storage import StorageConfig
a = json.loads(sys.argv[1])
arm = faults.arm  # the run arms its FTConfig's crash point (none here): this one instead
faults.arm = lambda spec: arm(spec or a["crash_at"])
run_fault_tolerant(queries.get("CM1"), open_dataset(a["data"]), a["store"],
                   open_output(a["out"], a["sink"]), EngineConfig(workers=2, batch_rows=a["batch"]),
                   interval=0.02, max_tuples=a["n"], rate=a["n"] / 2.0, recover=a["recover"],
                   layout=StorageConfig(**a["layout"]))
"""


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.parametrize("sink", ["clocked", campaign("transactional")])
def test_crash_points_between_the_pieces_of_a_task(tiny, tmp_path, sink):
    """SIGKILL with a task's raw input partly handed to storage (a piece stored, the next not:
    the crash point ``ingress_piece``) in a fresh run, then in the middle of the recovery's
    replay of such pieces, then again in the recovered run: the output is the failure-free
    run's."""
    import subprocess
    import sys

    ds = tiny["cm"]
    q = queries.get("CM1")
    piece = Engine(q, ds.tables).piece_rows(SMALL.file_bytes, SMALL.data_start)
    batch, n = 3 * piece + 17, 150 * ds.rows
    store, out = tmp_path / "store", tmp_path / "out"
    layout = {"file_bytes": SMALL.file_bytes, "pool_files": SMALL.pool_files,
              "bulk_bytes": SMALL.bulk_bytes}
    for i, crash in enumerate(("ingress_piece:20", "recovery_replay", "ingress_piece:2")):
        arg = {"crash_at": crash, "data": str(ds.path), "store": str(store), "out": str(out),
               "sink": sink, "batch": batch, "n": n, "recover": i > 0, "layout": layout}
        child = subprocess.run([sys.executable, "-c", _PIECES_CHILD, json.dumps(arg)],
                               capture_output=True, text=True, timeout=300)
        assert child.returncode == -9, (crash, child.returncode, child.stderr[-2000:])
    while not completed(store):
        run_fault_tolerant(q, ds, store, open_output(out, sink),
                           EngineConfig(workers=2, batch_rows=batch), interval=0.02,
                           recover=True, layout=SMALL)
    v = compare(read_output(out), failure_free(q, ds, n), q.schema)
    assert v.ok, v


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.parametrize("mode", ["eventual", campaign("incremental")])
def test_crash_points_with_pane_units(tiny, tmp_path, mode):
    """Forced kills with pane units handed to storage and no record yet (by a checkpoint, or
    by an eventual step), with a checkpoint's state written, in the middle of a recovery's
    replay, and before a record's rename - on LRB1 with a p-stream on its window's output and
    the key-partitioned assembly."""
    ds = tiny["lrb"]
    n = 150 * ds.rows
    c = Controller(campaign_config(
        "LRB1", ds.path, tmp_path, max_tuples=n, batch_rows=4000, rate=n / 5,
        assembly="partitioned:2", persist_at=("window0",),
        interval=0.2, checkpoint_mode=mode, sink="transactional"))
    camp = c.run([], crash_at=["checkpoint_step:4", "recovery_replay", "checkpoint_state:2",
                               "checkpoint_step:7", "checkpoint_record:2"])
    assert camp.crashes == 5, camp
    assert camp.verdict.ok, camp.verdict


def test_clocked_sink_splits_a_batch_larger_than_a_log_file_at_window_ends(tmp_path):
    """A result batch over one 16 MiB log file is stored in pieces that each end with a
    window, every piece's clock naming its own last window - a crash between pieces leaves
    no window half-committed."""
    from scabbard.batch import Batch
    from scabbard.storage import BlockManager

    schema = queries.get("CM1").schema
    n = ClockedSink.CONFIG.file_bytes // schema.row_bytes + 123_457  # more than one file
    we = 1000 * (np.arange(n, dtype=np.int64) // 777)  # windows of 777 rows each
    cols = tuple(we if f.name == "window_end" else np.arange(n).astype(f.numpy_dtype)
                 for f in schema.fields)
    sink = ClockedSink(tmp_path)
    sink.open(schema)
    sink.write_clocked(Batch(schema, cols), {"input_end": 99, "window_end": int(we[-1])})
    sink.close()
    with BlockManager(tmp_path / "log", ClockedSink.CONFIG) as bm:
        sid = bm.stream("results", schema)
        pieces = list(bm.load(sid))
        clocks = [bm.read_with_meta(sid, p.offset)[1].view(np.int64) for p in pieces]
    assert len(pieces) >= 2 and sum(len(p) for p in pieces) == n
    for p, c in zip(pieces, clocks, strict=True):
        w = p.column("window_end")
        assert c[1] == w[-1]  # the piece's clock is its own last window
    for a, b in zip(pieces, pieces[1:], strict=False):
        assert b.column("window_end")[0] > a.column("window_end")[-1]  # no window split
    again = ClockedSink(tmp_path)
    again.open(schema)
    assert again.committed() == {"input_end": 99, "window_end": int(we[-1])}
    again.close()
    assert len(read_output(tmp_path)) == n


def _windows_of(sizes: list[int], schema, first_row: int = 0):
    """A batch of ``schema`` holding windows of these sizes (ends 1000, 2000, ...), its rows
    numbered from ``first_row`` in ``sum_cpu``."""
    from scabbard.batch import Batch

    we = 1000 * np.repeat(np.arange(1, len(sizes) + 1, dtype=np.int64), sizes)
    ids = np.arange(first_row, first_row + len(we))
    cols = {"window_start": we - 1000, "window_end": we, "category": np.zeros(len(we), np.int32),
            "sum_cpu": ids.astype(np.float64)}
    return Batch(schema, tuple(cols[f.name] for f in schema.fields)), we


def _clocked_pieces(path, schema) -> list[tuple[int, int, int]]:
    """Per stored piece of a clocked log: (its last row's window end, its clock's window end,
    the run that wrote it)."""
    from scabbard.storage import BlockManager

    with BlockManager(path / "log", ClockedSink.CONFIG) as bm:
        return [(int(b.column("window_end")[-1]), int(m.view(np.int64)[1]),
                 int(m.view(np.int64)[2]))
                for b, m in bm.load(bm.stream("results", schema), with_meta=True)]


def test_clocked_sink_stores_a_window_larger_than_a_log_file_in_pieces(tmp_path):
    """A window over one 16 MiB log file is cut inside it: the pieces that end inside it name
    only the windows before it in their clock, and it is read back whole."""
    schema = queries.get("CM1").schema
    big = 2 * ClockedSink.CONFIG.file_bytes // schema.row_bytes  # two files and more
    batch, we = _windows_of([1000, big, 1000], schema)
    sink = ClockedSink(tmp_path)
    sink.open(schema)
    sink.write_clocked(batch, {"input_end": 99, "window_end": 3000})
    sink.close()
    pieces = _clocked_pieces(tmp_path, schema)
    assert len(pieces) >= 3
    inside = [clock for last, clock, _ in pieces if last == 2000 and clock != 2000]
    assert inside and set(inside) == {1000}, pieces  # window 2000 incomplete: 1000 committed
    assert pieces[-1][:2] == (3000, 3000)
    got = read_output(tmp_path)
    np.testing.assert_array_equal(got["sum_cpu"], np.arange(len(we)))
    again = ClockedSink(tmp_path)
    again.open(schema)
    assert again.committed() == {"input_end": 99, "window_end": 3000}
    again.close()


def test_a_crash_inside_a_window_over_several_log_files_commits_none_of_it(tmp_path):
    """Stopped after the first piece of a window over several log files: the window is not
    committed (the reader shows the windows before it); the next run writes it again whole,
    and the reader keeps that copy only - every row exactly once."""
    schema = queries.get("CM1").schema
    big = 2 * ClockedSink.CONFIG.file_bytes // schema.row_bytes
    first, _ = _windows_of([500], schema)
    rest, we = _windows_of([500, big, 700], schema)
    rest = rest.slice(500, len(we))  # windows 2000 (big) and 3000, rows numbered on

    class Crash(Exception):
        pass

    sink = ClockedSink(tmp_path)
    sink.open(schema)
    sink.write_clocked(first, {"input_end": 10, "window_end": 1000})
    append, calls = sink.bm.append, []

    def dies_after_one(*a, **kw):
        if calls:
            raise Crash
        calls.append(1)
        return append(*a, **kw)
    sink.bm.append = dies_after_one
    with pytest.raises(Crash):
        sink.write_clocked(rest, {"input_end": 30, "window_end": 3000})
    sink.close()  # what was appended is stored: the first piece of window 2000
    assert [p[:2] for p in _clocked_pieces(tmp_path, schema)] == [(1000, 1000), (2000, 1000)]
    np.testing.assert_array_equal(read_output(tmp_path)["sum_cpu"], np.arange(500))

    again = ClockedSink(tmp_path)
    again.open(schema)
    assert again.committed()["window_end"] == 1000  # recovery replays window 2000 whole
    again.write_clocked(rest, {"input_end": 30, "window_end": 3000})
    again.close()
    runs = {run for *_, run in _clocked_pieces(tmp_path, schema)}
    assert len(runs) == 2
    got = read_output(tmp_path)
    np.testing.assert_array_equal(got["sum_cpu"], np.arange(len(we)))  # each row once, in order
    np.testing.assert_array_equal(got["window_end"], we)


@pytest.mark.slow
@pytest.mark.crash
def test_crash_points_during_a_checkpoint_write_and_during_recovery(tiny, tmp_path):
    """Forced SIGKILLs where random ones rarely land: with a checkpoint's state handed to
    storage but no record yet, in the middle of replay while recovering, and between the
    record's write and its rename."""
    ds = tiny["cm"]
    n = 150 * ds.rows  # paced to last ~5 s on any machine, so that all three crash points land
    c = Controller(campaign_config(
        "CM1", ds.path, tmp_path, max_tuples=n, batch_rows=4000, rate=n / 5,
        interval=0.2))
    camp = c.run([], crash_at=["checkpoint_state:3", "recovery_replay", "checkpoint_record:2"])
    assert camp.crashes == 3, camp
    assert camp.verdict.ok, camp.verdict


@pytest.mark.slow
@pytest.mark.crash
def test_a_warm_standby_takes_over_after_a_kill(tiny, tmp_path):
    """Each kill comes once the running incarnation checkpointed and a standby is ready
    (events, not a guess of how fast processes start here): both are served by the standby."""
    import threading

    ds = tiny["lrb"]
    n = 400 * ds.rows  # paced over 20 s: room for two kills however slowly processes start
    c = Controller(campaign_config(
        "LRB1", ds.path, tmp_path, max_tuples=n, batch_rows=4000, rate=n / 20,
        interval=0.2), standby=True, standby_after=0.3)
    out: dict = {}
    runner = threading.Thread(target=lambda: out.update(camp=c.run([])))
    runner.start()

    def newest() -> int:
        return max((int(p.stem[5:]) for p in (tmp_path / "storage" / "checkpoints")
                    .glob("ckpt-*.json")), default=0)

    seen = 0
    for kill in range(2):
        deadline = time.time() + 120
        while runner.is_alive() and not (newest() > seen and c.standby_ready()):
            assert time.time() < deadline, f"kill {kill}: no checkpoint and ready standby"
            time.sleep(0.01)
        seen = newest()
        c.request_kill()
        while runner.is_alive() and c.campaign.kills == kill:
            time.sleep(0.01)
    runner.join(300)
    camp = out["camp"]
    assert camp.kills == 2 and camp.standby_takeovers == 2, camp
    assert camp.verdict.ok, camp.verdict


@pytest.mark.slow
@pytest.mark.crash
def test_recovery_experiment_breaks_the_restart_into_phases(tiny, data_root, tmp_path):
    from scabbard.experiments import recovery as exp

    s = exp.Settings(query="CM1", scale="tiny", data_dir=str(data_root), rate=2e6, seconds=5.0,
                     kill_at=2.0, batch=20_000, interval=0.3, work_dir=str(tmp_path))
    out = exp.run(s, log=lambda *_: None)
    assert out.campaign.verdict.ok
    ph = out.phases
    for name in ("process start", "code loading", "state load", "replay"):
        lo, hi = ph[name]
        assert 0 <= lo <= hi < 5, (name, ph)
    # a cold restart loads its code on a thread while the state loads; the replay waits for both
    assert ph["process start"][1] <= ph["code loading"][0] + 1e-6
    assert ph["process start"][1] <= ph["state load"][0] + 1e-6
    assert max(ph["code loading"][1], ph["state load"][1]) <= ph["replay"][0] + 1e-6
    table = exp.summary(out)
    assert "kill -> recovered (replay done)" in set(table["phase"])


@pytest.mark.slow
@pytest.mark.crash
def test_the_notebook_panel_kills_on_demand_and_shows_the_verdict(tiny, data_root, tmp_path):
    """The widget panel of notebook 04, driven as a user would: Start, Kill, wait."""
    import threading
    import time

    from scabbard.experiments import recovery as exp
    from scabbard.experiments.recovery_panel import Panel

    s = exp.Settings(query="CM1", scale="tiny", data_dir=str(data_root), seconds=6.0,
                     batch=20_000, interval=0.3, work_dir=str(tmp_path))
    panel = Panel(s)
    panel.seconds.value = 6.0
    panel.start_button.click()
    deadline = time.time() + 120
    def checkpointed() -> bool:  # the run is under way: a checkpoint is recorded
        c = panel.run.controller
        return (c is not None and c.campaign is not None and c.metrics_log.is_file()
                and any((c.storage / "checkpoints").glob("ckpt-*.json")))

    while not checkpointed():
        assert time.time() < deadline and not panel.wait(0), panel.status.value
        time.sleep(0.05)
    panel.kill_button.click()
    assert panel.wait(180), panel.status.value
    assert panel.run.campaign.kills == 1, panel.status.value
    assert "exactly once" in panel.status.value and "0 lost" in panel.status.value
    assert panel.start_button.disabled is False
    # the last figure is drawn: nothing reads the run
    assert panel.run.frames >= 1 and bytes(panel.chart.value).startswith(b"\x89PNG")
    assert not [t for t in threading.enumerate() if t.name.startswith("panel-")]
    assert not panel.errors.value


def _wait_for(cond, proc, what: str, timeout: float = 120) -> None:
    """Wait for an event (a record on disk, a process exit); fail if the process ends first."""
    import time

    deadline = time.time() + timeout
    while not cond():
        assert proc.poll() is None, f"the engine exited ({proc.returncode}) before {what}"
        assert time.time() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.02)


def _run_to_completion(c: Controller) -> None:
    while not c.completed():
        c.start(recover=True)
        assert c.wait(300) == 0, c.log_tail()


@pytest.mark.slow
@pytest.mark.crash
def test_a_damaged_newest_state_falls_back_and_survives_a_second_kill(tiny, tmp_path):
    """Killed; the newest checkpoint's state p-unit is damaged on disk; the recovery falls back
    to the one before, checkpoints again, is killed too; the next recovery finishes exactly."""
    from ftkit import damage_state, records

    from scabbard.outputs import read_metrics

    ds = tiny["cm"]
    q = queries.get("CM1")
    n = 150 * ds.rows  # paced over ~6 s: the kills land while input is still coming
    c = Controller(campaign_config(
        "CM1", ds.path, tmp_path, max_tuples=n, batch_rows=4000, rate=n / 6,
        interval=0.1))
    c.start()
    _wait_for(lambda: len(records(c.storage)) >= 2, c.proc, "two checkpoints")
    c.kill()
    newest = records(c.storage)[0]
    damage_state(c.storage, newest, q, ds)
    c.start(recover=True)
    _wait_for(lambda: records(c.storage)[0].id > newest.id, c.proc, "a new checkpoint")
    c.kill()
    _run_to_completion(c)
    resumes = read_metrics(c.metrics_log)
    resumes = resumes[(resumes["event"] == "recovery") & (resumes["phase"] == "resume")]
    assert newest.id in resumes.iloc[0]["skipped"]  # the first recovery fell back
    assert c.verify().ok, c.verify()


@pytest.mark.slow
@pytest.mark.crash
def test_the_transactional_sink_killed_between_the_record_and_the_commit(tiny, tmp_path):
    """A kill after a checkpoint's record is in place but before its epoch is committed:
    recovery commits the decided epoch, never twice, never loses it."""
    ds = tiny["lrb"]
    n = 150 * ds.rows
    c = Controller(campaign_config(
        "LRB1", ds.path, tmp_path, max_tuples=n, batch_rows=4000, rate=n / 6,
        interval=0.2, sink="transactional"))
    camp = c.run([], crash_at=["checkpoint_commit:2", "checkpoint_commit:1",
                               "checkpoint_commit:3"])
    assert camp.crashes == 3, camp
    assert camp.verdict.ok, camp.verdict


@pytest.mark.slow
@pytest.mark.crash
def test_a_kill_during_a_fallback_recovery(tiny, tmp_path):
    """The newest state is damaged, and the recovery that falls back is itself killed in the
    middle of its replay: the next one still falls back and finishes exactly."""
    from ftkit import damage_state, records

    ds = tiny["cm"]
    q = queries.get("CM1")
    n = 150 * ds.rows
    c = Controller(campaign_config(
        "CM1", ds.path, tmp_path, max_tuples=n, batch_rows=4000, rate=n / 6,
        interval=0.1))
    c.start()
    _wait_for(lambda: len(records(c.storage)) >= 3, c.proc, "three checkpoints")
    c.kill()
    damage_state(c.storage, records(c.storage)[0], q, ds)
    c.start(recover=True, crash_at="recovery_replay")
    code = c.wait(300)
    assert code == -9, f"the recovery did not reach its crash point ({code}):\n{c.log_tail()}"
    _run_to_completion(c)
    assert c.verify().ok, c.verify()


def test_tasks_whose_input_push_up_empties_pass_their_marker_on(tiny, tmp_path):
    """With the input persisted by the workers, push-up runs in a task: a task nothing of
    whose input survives has no windows, and the checkpoint marker it was dispatched with
    goes on with the next task that has tuples (the same cut).  CM2 keeps 1 tuple in ~200:
    tasks of 64 source tuples are mostly empty; a marker every task.  The results equal
    the failure-free run's, through a stop and a recovery, and checkpoints complete."""
    from scabbard.engine import EngineConfig

    q, ds = queries.get("CM2"), tiny["cm"]
    n = 3 * ds.rows
    cfg = EngineConfig(workers=2, batch_rows=64)
    store, out = tmp_path / "store", tmp_path / "out"
    kw = {"layout": SMALL, "push_up": True, "interval": None, "every_tasks": 1}
    first = run_fault_tolerant(q, ds, store, ClockedSink(out), cfg, max_tuples=n,
                               rate=n / 1.0, duration=0.3, **kw)
    assert first.checkpoints and not completed(store)
    while not completed(store):
        r = run_fault_tolerant(q, ds, store, ClockedSink(out), cfg, recover=True, **kw)
        assert r.checkpoints
    v = compare(read_output(out), failure_free(q, ds, n), q.schema)
    assert v.ok, v


def test_a_global_aggregates_task_is_stored_in_pieces_and_recovers(tiny, tmp_path, monkeypatch):
    """A global aggregate's task (its fragment reads a batch piece by piece) is stored as
    p-units of at most ``UNIT_ROWS`` tuples, each with its own source clock, and read by
    the fragment as one span batch; a run stopped part-way recovers from them to the
    failure-free results (SM, push-up and the adaptive codecs)."""
    from scabbard.engine import EngineConfig
    from scabbard.ft import ingress
    from scabbard.storage import BlockManager

    monkeypatch.setattr(ingress, "UNIT_ROWS", 1000)
    q, ds = queries.get("SM"), tiny["sm"]
    n = 6 * ds.rows
    cfg = EngineConfig(workers=2, batch_rows=8192)
    store, out = tmp_path / "store", tmp_path / "out"
    kw = {"layout": SMALL, "push_up": True, "compression": "adaptive",
          "compression_interval": 0.05, "interval": None, "every_tasks": 2}
    run_fault_tolerant(q, ds, store, ClockedSink(out), cfg, max_tuples=n, rate=n / 1.0,
                       duration=0.3, **kw)
    assert not completed(store)
    with BlockManager(store, SMALL) as bm:
        sid = bm.stream("input", Engine(q, ds.tables, cfg, push_up=True).input_schema)
        sizes = {len(b) for b in bm.load(sid)}
    assert max(sizes) <= 1000 and len(sizes) > 1  # pieces, up to a copy's end
    while not completed(store):
        run_fault_tolerant(q, ds, store, ClockedSink(out), cfg, recover=True, **kw)
    v = compare(read_output(out), failure_free(q, ds, n), q.schema)
    assert v.ok, v


def test_engine_processes_start_from_the_package_compiled_to_bytecode(monkeypatch):
    """The Controller compiles the package before it starts an engine: with
    PYTHONDONTWRITEBYTECODE set an editable install writes no bytecode, and each restarted
    engine would compile every module from source first."""
    import importlib.util
    from pathlib import Path

    from scabbard.ft import controller, recovery

    pyc = Path(importlib.util.cache_from_source(recovery.__file__))
    pyc.unlink(missing_ok=True)
    monkeypatch.setattr(controller, "_bytecode_checked", False)
    controller.compiled_bytecode()
    assert pyc.is_file() and pyc.stat().st_mtime >= Path(recovery.__file__).stat().st_mtime


REPLAY_KERNELS = """
import gc, sys
import numpy as np
from numba.core.dispatcher import Dispatcher
from scabbard import queries
from scabbard.batch import Batch
from scabbard.data import open_dataset
from scabbard.engine.runtime import Engine
from scabbard.engine.sources import ReplaySource
from scabbard.storage import segment as seg_fmt
ds = open_dataset(sys.argv[1])
engine = Engine(queries.get("LRB1"), ds.tables)
batch = ReplaySource(ds, 4096).peek()
assert not batch.columns[0].flags.writeable
engine.warm_up(batch, writable=sys.argv[2] == "1")
seg_fmt.warm_up(batch)
replayed = Batch(batch.schema, tuple(np.array(c) for c in batch.columns), batch.offset)


def compiled():  # the kernels' signatures loaded or compiled so far, in every dispatcher
    return sum(len(d.overloads) for d in gc.get_objects() if isinstance(d, Dispatcher))


before = compiled()
engine._fragment(0, replayed, 0.0)
seg_fmt.encode_payload(replayed)
seg_fmt.encode_payload(batch)
print(compiled() - before)
"""


def test_a_recovery_loads_every_kernel_its_replay_runs_before_the_clock_starts(tiny):
    """A dataset's columns are read-only and the replay's (read back from storage) writable;
    numba compiles a kernel once for each.  A recovery's warm-up loads both, and the
    copy-and-hash kernels a persisting task runs: its first replayed task loads nothing (a
    process of its own: this one has loaded them all already)."""
    import subprocess
    import sys

    def loads(writable: bool) -> int:
        out = subprocess.run([sys.executable, "-c", REPLAY_KERNELS, str(tiny["lrb"].path),
                              "1" if writable else "0"], capture_output=True, text=True,
                             check=True)
        return int(out.stdout.split()[-1])

    assert loads(writable=True) == 0
    assert loads(writable=False) > 0  # without it the replay's first task loads its kernels


def test_run_and_report_logs_the_start_progress_and_a_released_standby(tmp_path, monkeypatch):
    """``scabbard run``'s lines (scabbard.ft.run.run_and_report): a warm standby says it is
    ready, waits for a line on stdin, and when stdin closes ends saying so; the progress lines
    come from the metrics samples unless quiet."""
    import io

    from scabbard.ft import run as ft_run
    from scabbard.ft.command import from_flags
    from scabbard.ft.report import progress_line

    sample = {"event": "sample", "t": 1.0, "tuples_per_s": 2e6, "mb_per_s": 3.0,
              "latency_ms": {"p50": 4.0}, "result_rows": 5}

    def open_run(config, *, recover=False, dataset=None, sink=None, watch=(), standby=None):
        for w in watch:
            w(sample)
        standby()
        raise AssertionError("the standby was not released")

    monkeypatch.setattr(ft_run, "open_run", open_run)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    from scabbard.cli import build_parser

    args = build_parser("run").parse_args(["run", "--query", "CM1", "--recover", "--storage",
                                           str(tmp_path / "s"), "--output", str(tmp_path / "o"),
                                           "--checkpoint-interval", "1"])
    config = from_flags(args)
    for quiet in (False, True):
        lines = []
        ft_run.run_and_report(config, None, recover=True, standby=True, quiet=quiet,
                              log=lines.append)
        assert lines[0].startswith("recovering a fault-tolerant run: storage")
        assert lines[1:] == [*([] if quiet else [progress_line(sample)]),
                             "standby: ready", "standby: released without taking over"]
    monkeypatch.setattr("sys.stdin", io.StringIO("go\n"))
    with pytest.raises(AssertionError, match="not released"):
        ft_run.run_and_report(config, None, recover=True, standby=True, log=lambda _: None)
