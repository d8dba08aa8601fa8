"""Incremental and eventual checkpoints: closed panes written once as pane units,
records that list them, their GC, recovery from them - and that recovery loads exactly what a
full checkpoint at the same task holds."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from ftkit import CFG, SMALL, StopAfter, damage_segment, failure_free, query, records

from scabbard.batch import Batch
from scabbard.check import Explorer, Settings
from scabbard.engine.assembly import fold_partials
from scabbard.engine.runtime import Engine
from scabbard.ft.panes import FANOUT, PaneLog, count_panes
from scabbard.ft.recovery import run_fault_tolerant
from scabbard.ft.report import loaded_phrase
from scabbard.ft.sinks import ClockedSink, TransactionalSink, read_output
from scabbard.ft.state import QueryState, state_schema
from scabbard.ft.verify import compare
from scabbard.outputs import read_metrics
from scabbard.pog.checkpoint import CheckpointError, CheckpointStore
from scabbard.storage import BlockManager, StorageConfig


def ft_run(q, ds, root, mode, k=None, recover=False, sink=ClockedSink, **kw):
    """A run with a checkpoint every 3 tasks (the same tasks in every mode), stopped after ``k``
    batches (None: to the end of its input)."""
    return run_fault_tolerant(q, ds, root / "storage", sink(root / "output"), CFG,
                              interval=None, every_tasks=3, layout=SMALL,
                              recover=recover, checkpoint_mode=None if recover else mode,
                              wrap_source=(lambda s: StopAfter(s, k)) if k else None, **kw)


def loaded_states(q, ds, root, mode, persist_at=()) -> dict:
    """Every record still loadable in ``root``: its task -> (edges per window, join state)."""
    plan = Engine(q, ds.tables, CFG, cut_after=persist_at).plan
    with BlockManager(root / "storage", SMALL) as bm:
        state = QueryState(plan, bm, persist_at, mode)
        out = {}
        for rec in CheckpointStore(root / "storage" / "checkpoints").records()[:2]:
            out[rec.seq] = state.load_state(rec)
        return out


def assert_same_state(a: dict, b: dict, branches) -> None:
    """The same windows' partials in each record: one row per (pane, group) once folded (a
    window operator folds the tasks' partials it holds as they grow, at points a full and an
    incremental record need not share), the same values."""
    assert a.keys() == b.keys() and a
    for seq in a:
        (ea, ga), (eb, gb) = a[seq], b[seq]
        for branch, x, y in zip(branches, ea, eb, strict=True):
            x, y = fold_partials(branch, x), fold_partials(branch, y)
            for f in ("pane", "keys", "cnt", "ints", "floats"):
                assert np.array_equal(getattr(x, f), getattr(y, f)), (seq, f)
        assert ga.keys() == gb.keys()
        for op in ga:
            assert ga[op]["watermarks"] == gb[op]["watermarks"]
            for sa, sb in zip(ga[op]["pending"], gb[op]["pending"], strict=True):
                for col in sa:
                    assert np.array_equal(sa[col], sb[col]), (seq, op, col)


# -- the pane log --------------------------------------------------------------------------------
def _cols(panes: list[int], per_pane: int = 2) -> tuple:
    pane = np.repeat(np.array(panes, np.int64), per_pane)
    return (pane, np.arange(len(pane), dtype=np.int64), np.ones(len(pane), np.int64),
            np.arange(len(pane), dtype=np.float64))


def _log(bm):
    from scabbard.schema import Field, Schema

    schema = Schema("state-w", (Field("pane", "int64"), Field("k0", "int64"),
                                Field("cnt", "int64"), Field("f0", "float64")), stream=False)
    return PaneLog(schema, bm)


def test_a_pane_log_lists_runs_prunes_and_restores(tmp_path):
    with BlockManager(tmp_path, SMALL) as bm:
        log = _log(bm)
        w = log.save(_cols([3, 4, 6]), upto=7, clock=100)
        assert (w.panes, w.units, w.bytes) == (3, 1, 6 * 32)
        [f.result() for f in w.futures]
        assert log.listed(4, 7) == [{"stream": "state-w", "first": 2, "end": 6, "panes": [4, 7]}]
        assert log.listed(5, 6) == [{"stream": "state-w", "first": 4, "end": 4, "panes": [5, 5]}]
        nothing = log.save(tuple(c[:0] for c in _cols([7])), upto=7, clock=101)  # no rows
        assert nothing.units == 0 and len({len(a) for a in log.index}) == 1
        with pytest.raises(ValueError, match="saved again"):
            log.save(_cols([6]), upto=8, clock=101)
        log.save(_cols([7, 8]), upto=9, clock=102)
        log.prune(4)
        runs = log.listed(0, 9)
        assert runs == [{"stream": "state-w", "first": 2, "end": 10, "panes": [4, 9]}]
        bm.flush()
        got = [b for b in bm.load(log.sid, 2, 10)]
        pane = np.concatenate([b.columns[0] for b in got])
        assert pane.tolist() == [4, 4, 6, 6, 7, 7, 8, 8]
        meta = bm.read_with_meta(log.sid, 0)[1].view(np.int64)
        assert meta.tolist() == [100, 3, 7, 0]  # the unit's clock, its panes 3 .. 6, its name
        # after a recovery from a record that listed them, the units after it start a new run
        again = _log(bm)
        again.restore(runs, [pane], saved_to=9)
        assert again.next == 10 and again.saved_to == 9
        again.save(_cols([9]), upto=10, clock=103)
        assert again.listed(6, 10) == [
            {"stream": "state-w", "first": 4, "end": 12, "panes": [6, 10]}]


def test_pane_units_are_cut_at_pane_boundaries_to_fit_a_file(tmp_path):
    with BlockManager(tmp_path, StorageConfig(file_bytes=1 << 16, pool_files=2)) as bm:
        log = _log(bm)  # a unit holds at most 512 rows of 32 bytes here
        w = log.save(_cols(list(range(100)), per_pane=30), upto=100, clock=1)
        bm.flush()
        firsts = [b.columns[0] for b in bm.load(log.sid)]
        assert w.units == 1 and len(firsts) == 6  # 17 panes (510 rows) a segment, none split
        assert all(a[-1] < b[0] for a, b in zip(firsts, firsts[1:], strict=False))
        assert count_panes(np.concatenate(firsts)) == 100


def test_small_units_are_merged_size_tiered_and_load_the_same_rows(tmp_path):
    """One pane closed per checkpoint: FANOUT units of a level become one of the next, so a
    window of 200 panes is held by a few units (not 200), each pane written a few times (not
    once per checkpoint), and the listed runs hold exactly the window's rows."""
    from scabbard.ft.panes import FANOUT

    truth = _cols(list(range(400)), per_pane=3)
    rows = lambda lo, hi: tuple(c[(truth[0] >= lo) & (truth[0] < hi)] for c in truth)  # noqa: E731
    window, written = 200, 0
    with BlockManager(tmp_path, SMALL) as bm:
        log = _log(bm)
        for last in range(1, 400):  # the checkpoint at pane `last`: pane last - 1 closed
            lo = max(0, last - window + 1)
            written += log.save(rows(last - 1, last), last, clock=last).panes
            while (m := log.to_merge(lo, last)) is not None:
                written += log.consolidate(rows(m[0], m[1]), m[0], m[1], last, m[2]).panes
            runs = log.listed(lo, last)
            log.prune(lo)
        bm.flush()
        got = [np.concatenate([b.columns[0] for b in bm.load_bulk(log.sid, r["first"], r["end"])])
               for r in runs if r["end"] > r["first"]]
        assert np.array_equal(np.concatenate(got), rows(lo, last)[0])
        assert log.units_in(lo, last) <= (FANOUT - 1) * 3 + 1
        assert written < 4 * 400  # a window per checkpoint would be ~ 200 x 400


# -- incremental = full ----------------------------------------------------------------------------
@pytest.mark.parametrize("name, assembly, persist_at", [
    ("SG1", "serial", ()), ("LRB1", "serial", ()), ("SG3", "serial", ()),
    ("LRB3", "partitioned:2", ()), ("LRB1", "serial", ("window0",)),
])
def test_incremental_and_full_checkpoints_recover_the_same_state(tiny, tmp_path, name, assembly,
                                                                 persist_at):
    """The same input, checkpoints at the same tasks, stopped, recovered, run to the end: both
    modes commit the failure-free output, and every record still loadable holds the same
    partials, row for row - while incremental writes far fewer bytes."""
    import dataclasses

    q, ds = query(name, tiny)
    n = 20 * ds.rows
    cfg = dataclasses.replace(CFG, assembly=assembly)
    state, written = {}, {}
    for mode in ("full", "incremental"):
        root = tmp_path / mode

        def run(k=None, root=root, **kw):
            return run_fault_tolerant(
                q, ds, root / "storage", ClockedSink(root / "output"), cfg, interval=None,
                every_tasks=3, layout=SMALL, persist_at=persist_at,
                wrap_source=(lambda s: StopAfter(s, k)) if k else None, **kw)
        first = run(40, checkpoint_mode=mode, max_tuples=n)
        rest = run(20, recover=True)
        assert rest.resumed_from is not None
        state[mode] = loaded_states(q, ds, root, mode, persist_at)  # mid-stream, after recovery
        last = run(recover=True)
        written[mode] = sum(r.state_bytes_written for r in (first, rest, last))
        v = compare(read_output(root / "output"), failure_free(q, ds, n), q.schema)
        assert v.ok, (mode, v)
    branches = Engine(q, ds.tables, CFG, cut_after=persist_at).plan.branches
    assert_same_state(state["full"], state["incremental"], branches)
    if name in ("SG1", "LRB1"):  # long windows (SG3's state is mostly its join's; LRB3's
        assert written["incremental"] * 2 < written["full"], written  # window is one pane)


def test_pane_units_leave_with_their_windows(tiny, tmp_path):
    """A long incremental run: the pane stream is trimmed below what the older of the two
    newest records needs, so its files return to the pool; each checkpoint writes the panes
    closed since the last one, not the window."""
    q, ds = query("LRB1", tiny)
    r = ft_run(q, ds, tmp_path, "incremental", max_tuples=60 * ds.rows)
    recs = records(tmp_path / "storage")
    schema = state_schema(Engine(q, ds.tables, CFG).plan.branches[0])
    with BlockManager(tmp_path / "storage", SMALL) as bm:
        bm.stream(schema.name, schema)
        panes = bm.stats()["streams"]["state-window0"]
    runs = [p for p in recs[1].state if p["stream"] == "state-window0" and "panes" in p]
    assert 0 < panes["start"] <= runs[0]["first"]  # released, but not what it relies on
    window_bytes = sum(p["end"] - p["first"] for p in runs) * schema.row_bytes
    assert r.state_bytes_written > 5 * window_bytes
    assert panes["files"] <= 2 * window_bytes / SMALL.file_bytes + 2  # two windows' worth
    window = Engine(q, ds.tables, CFG).plan.branches[0].panes
    written = [c.operator["written"]["panes"] for c in r.checkpoints[5:]]
    assert max(written) < window / 2, written  # never the whole window again
    assert recs[0].operator["written"]["mode"] == "incremental"


def test_a_damaged_pane_unit_of_the_newest_checkpoint_falls_back(tiny, tmp_path):
    """The newest record's own pane units are damaged on disk: the older record, which does not
    list them, is recovered from, and the output is exact."""
    q, ds = query("SG1", tiny)
    n = 30 * ds.rows
    ft_run(q, ds, tmp_path, "incremental", k=30, max_tuples=n)
    newest, older = records(tmp_path / "storage")[:2]
    mine = [p for p in newest.state if p["stream"] == "state-window0" and "panes" in p][-1]
    theirs = [p for p in older.state if p["stream"] == "state-window0" and "panes" in p][-1]
    assert mine["end"] > theirs["end"]
    schema = state_schema(Engine(q, ds.tables, CFG).plan.branches[0])
    damage_segment(tmp_path / "storage", schema, mine["end"] - 1)
    r = ft_run(q, ds, tmp_path, "incremental", recover=True)
    assert r.resumed_from == older.id
    assert compare(read_output(tmp_path / "output"), failure_free(q, ds, n), q.schema).ok


def test_a_recovery_in_another_checkpoint_mode_is_refused(tiny, tmp_path):
    q, ds = query("SG1", tiny)
    ft_run(q, ds, tmp_path, "incremental", k=10, max_tuples=10 * ds.rows)
    with pytest.raises(CheckpointError, match="checkpoint_mode 'incremental' recorded, 'full'"):
        run_fault_tolerant(q, ds, tmp_path / "storage", ClockedSink(tmp_path / "output"), CFG,
                           recover=True, layout=SMALL, checkpoint_mode="full")


# -- eventual ------------------------------------------------------------------------------------
def test_eventual_steps_save_closed_panes_between_records(tiny, tmp_path):
    """Records far apart (every 12 tasks), a step after every task (CI 0 ms would be every
    task; 0.001 ms is as good here): each record's closed panes were written by the steps,
    and the run recovers exactly."""
    q, ds = query("LRB1", tiny)
    n = 40 * ds.rows
    r = run_fault_tolerant(q, ds, tmp_path / "storage", TransactionalSink(tmp_path / "output"),
                           CFG, interval=None, every_tasks=12, layout=SMALL,
                           max_tuples=n, checkpoint_mode="eventual", step_ms=0.001,
                           wrap_source=lambda s: StopAfter(s, 150))
    steps = [c.operator["written"] for c in r.checkpoints[2:]]
    assert all(w["step_bytes"] > 0 and w["mode"] == "eventual" for w in steps), steps
    ft_run(q, ds, tmp_path, "eventual", recover=True, sink=TransactionalSink)
    assert compare(read_output(tmp_path / "output"), failure_free(q, ds, n), q.schema).ok


@pytest.mark.parametrize("name", ["SG1", "CM1", "LRB1", "YSB"])
def test_an_eventual_recovery_resumes_from_the_newest_step_after_its_record(tiny, tmp_path,
                                                                            name):
    """A step after every task, a record every 12: with the clocked sink a recovery resumes
    from the newest step whose results are all in the sink (its open part), not from the
    record, replays less, and writes the failure-free output; recovered again, it resumes
    from the first recovery's steps.  The transactional sink resumes from the record."""
    q, ds = query(name, tiny)
    n = 60 * ds.rows
    kw = dict(interval=None, every_tasks=12, layout=SMALL, max_tuples=n,
              checkpoint_mode="eventual", step_ms=0.001)
    for sink in (ClockedSink, TransactionalSink):
        root = tmp_path / sink.__name__
        run_fault_tolerant(q, ds, root / "storage", sink(root / "output"), CFG,
                           wrap_source=lambda s: StopAfter(s, 70), **kw)
        cut = records(root / "storage")[0].input_end
        r = run_fault_tolerant(q, ds, root / "storage", sink(root / "output"), CFG,
                               recover=True, layout=SMALL, wrap_source=lambda s: StopAfter(s, 9))
        if sink is ClockedSink:
            assert r.replayed_from > cut and r.loaded["step"] == r.replayed_from
            assert r.loaded["replay_tuples"] < r.source_start - cut
            cut2 = records(root / "storage")[0].input_end
            r2 = ft_run(q, ds, root, "eventual", recover=True, sink=sink)
            assert r2.replayed_from > cut2 and r2.loaded["step"] == r2.replayed_from
        else:
            assert r.replayed_from == cut and "step" not in r.loaded
            ft_run(q, ds, root, "eventual", recover=True, sink=sink)
        assert compare(read_output(root / "output"), failure_free(q, ds, n), q.schema).ok


def test_a_step_is_resumed_from_only_once_the_sink_holds_its_tasks_results(tiny, tmp_path):
    """The newest step whose task's results are all in the sink - every window up to the last
    one its results reached, or a later task's results - or none; never the record's cut or
    earlier, never past the stored input."""
    from scabbard.ft import steppoints

    q, ds = query("SG1", tiny)
    run_fault_tolerant(q, ds, tmp_path / "storage", ClockedSink(tmp_path / "output"), CFG,
                       interval=None, every_tasks=12, layout=SMALL, max_tuples=60 * ds.rows,
                       checkpoint_mode="eventual", step_ms=0.001,
                       wrap_source=lambda s: StopAfter(s, 70))
    rec = records(tmp_path / "storage")[0]
    plan = Engine(q, ds.tables, CFG).plan
    with BlockManager(tmp_path / "storage", SMALL) as bm:
        state = QueryState(plan, bm, (), "eventual")
        end, none = 1 << 40, np.iinfo(np.int64).min  # the stored input's end (all of it here)

        loaded = state.load_state(rec)[0][0]

        def at(input_end, window_end=none, stored=end):
            return steppoints.newest(state, rec, loaded, {"input_end": input_end,
                                                          "window_end": window_end}, stored)[0]
        newest = at(1 << 40)
        assert newest is not None and newest.input_end > rec.input_end
        assert at(0, 1 << 60).input_end == newest.input_end  # every window is in
        assert at(rec.input_end + 1) is None and at(0) is None
        mid = at(newest.input_end)
        assert mid is not None and rec.input_end < mid.input_end < newest.input_end
        assert at(1 << 40, stored=mid.input_end).input_end == mid.input_end
        pane = newest.edges.pane
        assert np.array_equal(pane, np.sort(pane)) and len(newest.runs) == len(newest.panes)
        assert pane[0] >= pane[-1] - plan.branches[0].panes + 1  # what the open windows need


def test_an_eventual_recovery_reports_the_extent_it_read_after_its_record(tiny, tmp_path):
    """CEC's extent: what the steps wrote after everything the record lists (pane units and
    open parts) is all a recovery reads of the window's state stream to find its step - not
    the window's units the record lists, loaded already - more, the more steps came after
    the record; its scan is timed beside the state load."""
    q, ds = query("SG1", tiny)
    got = {}
    for stop in (64, 70):  # the newest record after task 60 in both
        root = tmp_path / str(stop)
        r0 = run_fault_tolerant(q, ds, root / "storage", ClockedSink(root / "output"), CFG,
                                interval=None, every_tasks=12, layout=SMALL,
                                max_tuples=60 * ds.rows, checkpoint_mode="eventual",
                                step_ms=0.001, wrap_source=lambda s, k=stop: StopAfter(s, k))
        rec = records(root / "storage")[0]
        plan = Engine(q, ds.tables, CFG).plan
        with BlockManager(root / "storage", SMALL) as bm:
            log = QueryState(plan, bm, (), "eventual").windows[0].log
            listed = [p for p in rec.state if p["stream"] == log.schema.name]
            end = bm.durable_end(log.sid)
            rows = sum(len(b) for b in bm.load(log.sid, max(p["end"] for p in listed), end))
            whole = sum(len(b) for b in bm.load(log.sid, min(p["first"] for p in listed), end))
        r = run_fault_tolerant(q, ds, root / "storage", ClockedSink(root / "output"), CFG,
                               recover=True, layout=SMALL, wrap_source=lambda s: StopAfter(s, 1))
        assert r.loaded["step"] > rec.input_end and r.loaded["scan_ms"] > 0
        assert r.loaded["extent_rows"] == rows > 0 and rows < whole
        assert r.loaded["extent_bytes"] == rows * log.schema.row_bytes
        assert r0.steps >= stop and r.loaded["extent_opens"] >= stop - 60
        assert f"extent after the record: {rows:,} rows" in loaded_phrase(r.loaded)
        got[stop] = (rec.input_end, r.loaded["extent_rows"], r.loaded["extent_opens"])
    assert got[64][0] == got[70][0]
    assert got[64][1] < got[70][1] and got[64][2] < got[70][2]


def test_eventual_bounds_force_steps_and_records(tiny, tmp_path):
    """Q: with steps never due by time, more than 4 unsaved closed panes force one; U: with
    records never due by time, more than 20,000 tuples since the last cut ask for one."""
    q, ds = query("SG1", tiny)
    r = run_fault_tolerant(q, ds, tmp_path / "storage", ClockedSink(tmp_path / "output"), CFG,
                           interval=3600.0, layout=SMALL, max_tuples=20 * ds.rows,
                           checkpoint_mode="eventual", step_ms=3.6e6, max_unsaved_panes=4,
                           max_replay_tuples=20_000, metrics_log=tmp_path / "m.jsonl")
    assert r.checkpoints  # only U asked for them
    assert all(c.operator["written"]["step_bytes"] > 0 for c in r.checkpoints)  # only Q did
    m = read_metrics(tmp_path / "m.jsonl")
    ck = m[m["event"] == "checkpoint"]
    assert (ck["mode"] == "eventual").all() and (ck["panes"] >= 0).all()


def test_eventual_steps_follow_ci_q_and_u():
    """The policy on its own, with a clock the test moves: a step when CI passed or more than
    Q panes wait; a record asked for once more than U tuples came since the last cut."""
    from types import SimpleNamespace

    from scabbard.ft.eventual import EventualPolicy, EventualSteps

    now = [0.0]
    calls = []
    state = SimpleNamespace(unsaved=0)
    state.unsaved_panes = lambda: state.unsaved
    state.step = lambda: calls.append("step") or SimpleNamespace(units=1)
    controller = SimpleNamespace(request=lambda: calls.append("record"))
    steps = EventualSteps(EventualPolicy(10.0, 3, 1000), state, controller, cut_at=500,
                          clock=lambda: now[0])

    def task(end, marker=None):
        calls.clear()
        steps.after_task(SimpleNamespace(end_offset=end, marker=marker))
        return list(calls)
    assert task(900) == []
    now[0] = 0.0099
    assert task(1400) == []  # 9.9 ms < CI; 900 tuples <= U
    now[0] = 0.0101
    assert task(1600) == ["step", "record"]  # CI passed; 1,100 tuples > U
    state.unsaved = 4
    assert task(1700) == ["step", "record"]  # Q passed (no CI yet)
    state.unsaved = 0
    assert task(1800, marker=object()) == []  # the record's cut
    assert (steps.steps, steps.forced) == (2, 1)


# -- metrics -------------------------------------------------------------------------------------
def test_recovery_reports_what_it_loaded_and_replays(tiny, tmp_path):
    q, ds = query("LRB1", tiny)
    ft_run(q, ds, tmp_path, "incremental", k=40, max_tuples=20 * ds.rows)  # > 300 s of input
    rec = records(tmp_path / "storage")[0]
    r = ft_run(q, ds, tmp_path, "incremental", recover=True, metrics_log=tmp_path / "m.jsonl")
    window = Engine(q, ds.tables, CFG).plan.branches[0].panes
    listed = [p for p in rec.state if "panes" in p and p["end"] > p["first"]]
    assert r.loaded["panes"] == window and r.loaded["runs"] == len(listed)
    assert len(listed) <= 2 * (FANOUT - 1) * 3  # tiered: a few units per level, not a pane each
    rows = sum(p["end"] - p["first"] for p in rec.state)
    assert r.loaded["bytes"] == rows * state_schema(
        Engine(q, ds.tables, CFG).plan.branches[0]).row_bytes
    m = read_metrics(tmp_path / "m.jsonl")
    replayed = m[(m["event"] == "recovery") & (m["phase"] == "replay_dispatched")].iloc[0]
    assert r.loaded["replay_tuples"] == replayed["offset"] - rec.input_end > 0
    resume = m[(m["event"] == "recovery") & (m["phase"] == "resume")].iloc[0]
    assert resume["state_panes"] == window and resume["state_bytes"] == r.loaded["bytes"]
    assert resume["checkpoint_mode"] == "incremental"


def test_run_prints_the_state_written_and_loaded(tiny, tmp_path):
    ds = tiny["sg"]
    base = [sys.executable, "-m", "scabbard", "run", "--query", "SG1", "--data", str(ds.path),
            "--storage", str(tmp_path / "s"), "--output", str(tmp_path / "o"), "--quiet",
            "--batch", "4000", "--max-tuples", str(20 * ds.rows)]
    r = subprocess.run(base + ["--checkpoint-mode", "eventual", "--checkpoint-period", "20",
                               "--checkpoint-step", "5", "--rate", str(20 * ds.rows)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "(eventual)" in r.stdout and "checkpoints (eventual): state written" in r.stdout
    assert "panes per checkpoint" in r.stdout
    bad = subprocess.run(base + ["--checkpoint-interval", "1", "--checkpoint-step", "5"],
                         capture_output=True, text=True)
    assert bad.returncode != 0
    assert bad.stderr.strip().splitlines()[-1].endswith(
        "--checkpoint-step goes with --checkpoint-mode eventual"), bad.stderr
    both = subprocess.run(base + ["--checkpoint-mode", "eventual", "--checkpoint-interval", "1",
                                  "--checkpoint-period", "20"], capture_output=True, text=True)
    assert both.returncode != 0 and "use one" in both.stderr and "Traceback" not in both.stderr


# -- crash states ----------------------------------------------------------------------------------
def test_incremental_checkpoints_survive_every_explored_crash_state(tiny):
    """Machine durability: the pane units a record lists are flushed before it, so no crash
    state - torn or dropped unit writes included - recovers wrongly (the command's flag)."""
    r = subprocess.run([sys.executable, "-m", "scabbard", "check", "crash-states", "--query",
                        "LRB1", "--sink", "transactional", "--states", "16", "--seed", "7",
                        "--tuples", "30000", "--checkpoint-mode", "incremental",
                        "--data", str(tiny["lrb"].path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "incremental checkpoints" in r.stdout
    assert "16 crash states explored" in r.stdout and " 0 violations" in r.stdout


def test_the_explorer_checks_eventual_checkpoints_too(tiny):
    s = Settings("SG1", sink="clocked", durability="machine", states=12, tuples=30_000,
                 seed=8, checkpoint_mode="eventual")
    rep = Explorer(s, tiny["sg"]).explore()
    assert rep.explored == 12 and rep.ok, rep.summary()


def test_a_record_lists_units_in_flight_only_once_they_are_acknowledged(tmp_path):
    """A pane unit still being written is among the futures a record waits for."""
    import threading

    from scabbard.storage.fileio import OS

    gate = threading.Event()

    class SlowIO(type(OS)):
        def pwritev(self, fd, bufs, pos):
            gate.wait(10)
            return super().pwritev(fd, bufs, pos)

    with BlockManager(tmp_path, SMALL, SlowIO()) as bm:
        log = _log(bm)
        w = log.save(_cols([1, 2]), upto=3, clock=5)
        pending = log.pending()
        assert pending == w.futures and not any(f.done() for f in pending)
        gate.set()
        [f.result() for f in pending]
        assert log.pending() == []


def test_batches_of_the_pane_stream_carry_their_clock(tmp_path):
    with BlockManager(tmp_path, SMALL) as bm:
        log = _log(bm)
        log.save(_cols([10, 11]), upto=12, clock=777)
        bm.flush()
        batch, meta = bm.read_with_meta(log.sid, 0)
        assert isinstance(batch, Batch) and meta.view(np.int64).tolist() == [777, 10, 12, 0]
        assert json.dumps(log.listed(10, 12))  # a record can hold it


def test_a_pane_unit_over_several_segments_names_itself_in_each(tmp_path):
    """A unit larger than a segment is cut at pane boundaries; every segment carries the
    unit's first offset, so a recovery can put a pane cut over two segments back together
    (steppoints) and never mix it with another unit's rows of that pane."""
    with BlockManager(tmp_path, SMALL) as bm:
        log = _log(bm)
        log.save(_cols([1]), upto=2, clock=5)
        log.save(_cols([2, 3, 4], per_pane=6000), upto=5, clock=9)
        bm.flush()
        metas = [m.view(np.int64).tolist() for _, m in bm.load(log.sid, with_meta=True)]
        assert len(metas) >= 3 and metas[0] == [5, 1, 2, 0]
        assert {m[3] for m in metas[1:]} == {2} and {m[0] for m in metas[1:]} == {9}


def test_a_kill_campaign_counts_the_recoveries_that_resumed_from_a_step(tmp_path):
    from scabbard.experiments.kills import recoveries

    log = tmp_path / "metrics.jsonl"
    events = [{"event": "recovery", "phase": "resume", "state_replay_tuples": 9000},
              {"event": "recovery", "phase": "resume", "state_replay_tuples": 1000,
               "state_step": 5000},
              {"event": "recovery", "phase": "replayed", "state_step": 1},
              {"event": "checkpoint", "mode": "eventual"}]
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert recoveries(log) == {"from_step": 1, "replay_median": 5000.0}
    assert recoveries(tmp_path / "none.jsonl") == {"from_step": 0, "replay_median": None}


# -- notebook 12's measurements --------------------------------------------------------------------
def test_steady_state_counts_only_checkpoints_past_the_backlog():
    from types import SimpleNamespace

    from scabbard.experiments.incremental import steady

    def ck(end, done, nbytes, panes):
        return SimpleNamespace(input_end=end, completed=done, bytes=nbytes,
                               operator={"written": {"panes": panes}})
    cks = [ck(50, 1.0, 10_000, 300), ck(150, 2.0, 900, 4), ck(250, 3.0, 100, 2),
           ck(350, 4.0, 200, 2)]
    got = steady(cks, after=100)  # the first past the backlog only marks the start
    assert got == {"bytes_per_s": 300 / 2.0, "panes": 2.0}
    assert np.isnan(steady(cks, after=300)["bytes_per_s"])


def test_a_backlogged_source_has_its_input_waiting(tiny):
    from scabbard.engine import Replay
    from scabbard.engine.sources import ReplaySource
    from scabbard.experiments.incremental import backlogged, event_rate, window_s

    ds = tiny["lrb"]
    assert window_s("LRB1", ds) == 300.0 and window_s("SG1", tiny["sg"]) == 3600.0
    assert 200 < event_rate(ds) < 300  # tiny: 250 tuples per event second
    src = backlogged(1000)(ReplaySource(ds, 100, Replay(rate=100.0), started_at=50.0))
    assert src.started_at == 40.0  # 1,000 tuples at 100/s arrived 10 s early


def test_cec_recovery_time_ends_with_the_replay_or_the_state_load():
    import pandas as pd

    from scabbard.experiments.cec import recovery_ms, response

    ev = pd.DataFrame([{"event": "phase", "phase": "started", "wall": 10.0},
                       {"event": "phase", "phase": "state_loaded", "wall": 10.2},
                       {"event": "recovery", "phase": "replayed", "wall": 10.5}])
    assert recovery_ms(ev) == pytest.approx(500.0)
    assert recovery_ms(ev.iloc[:2]) == pytest.approx(200.0)
    samples = [{"t": t, "tuples_per_s": 1.0, "latency_ms": {"p50": t, "p95": 2 * t}}
               for t in (0.5, 1.0, 2.0, 3.0)]
    assert response(samples, after=1.0) == {"p50_ms": 2.0, "p95_ms": 4.0, "tuples_per_s": 1.0}


def test_cec_tables_keep_each_configurations_median_over_its_rounds(tmp_path):
    """Rounds of the same configuration fold into their median (a sweep's keys may be NaN:
    native and no FT have no CP); the figure draws every sweep's four panels, and the
    response's p95 against native's beside its median (where CEC's Fig. 8 shape shows
    here); runs without a p95 still draw."""
    import pandas as pd

    from scabbard.experiments.cec import plot, summary

    rows = []
    for k, (p50, extent) in enumerate(((10.0, 100), (12.0, 300), (11.0, 200))):
        rows += [{"sweep": "native", "round": k, "p50_ms": 10.0, "p95_ms": 20.0},
                 {"sweep": "no FT", "round": k, "p50_ms": 9.0, "p95_ms": 18.0},
                 {"sweep": "CP", "round": k, "period_ms": 25.0, "p50_ms": p50,
                  "p95_ms": 2 * p50 + 4,
                  "extent_rows": extent, "ec_load_ms": 1.0, "replay_mb": 0.0},
                 {"sweep": "Q", "round": k, "period_ms": 1000.0, "max_unsaved_panes": 8,
                  "p50_ms": 10.0, "steps": 5 + k, "extent_rows": extent, "ec_load_ms": 2.0,
                  "replay_mb": 1.0}]
    got = summary(pd.DataFrame(rows)).set_index("sweep")
    assert (got["rounds"] == 3).all() and list(got.index) == ["native", "no FT", "CP", "Q"]
    assert got.loc["CP", "p50_ms"] == 11.0 and got.loc["CP", "extent_rows"] == 200
    assert got.loc["CP", "response vs native"] == pytest.approx(1.1)
    assert got.loc["CP", "p95 vs native"] == pytest.approx(1.3)
    assert got.loc["Q", "steps"] == 6 and got.loc["Q", "max_unsaved_panes"] == 8
    assert np.isnan(got.loc["native", "period_ms"])
    fig = plot(pd.DataFrame(rows), str(tmp_path))
    assert sum(ax.get_visible() for ax in fig.axes) == 8  # CP and Q: four each; no U runs
    assert (tmp_path / "cec_tradeoff.png").stat().st_size > 10_000
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert "eventual, p50, median of 3" in labels and "eventual, p95" in labels
    p95 = [c for c in fig.axes[0].containers if c.get_label() == "eventual, p95"][0]
    assert list(p95.lines[0].get_ydata()) == [pytest.approx(1.3)]
    bare = plot(pd.DataFrame(rows).drop(columns="p95_ms"))
    assert "eventual, p95" not in bare.axes[0].get_legend_handles_labels()[1]


def test_bench_kills_and_the_controller_take_the_checkpoint_mode(tmp_path):
    from scabbard.cli import build_parser
    from scabbard.cli.settings import settings_from
    from scabbard.experiments import kills
    from scabbard.ft.controller import Controller, campaign_config

    args = build_parser("bench").parse_args(["bench", "kills", "--queries", "sg1", "lrb1",
                                             "--checkpoint-mode", "eventual"])
    plan = kills.plan(settings_from(kills.Settings, args))
    assert {c.checkpoint_mode for c in plan} == {"eventual"} and "eventual" in plan[0].name
    with pytest.raises(ValueError, match="checkpoint_mode"):
        kills.Settings(checkpoint_mode="sometimes")
    c = Controller(campaign_config(
        "SG1", tmp_path, tmp_path, max_tuples=10,
        checkpoint_mode="eventual", step_ms=5, max_replay_tuples=1000))
    cmd = " ".join(c.command(recover=False))
    assert "--checkpoint-mode eventual --checkpoint-step 5 --max-replay-tuples 1000" in cmd
    plain = Controller(campaign_config("SG1", tmp_path, tmp_path, max_tuples=10))
    assert "--checkpoint-mode" not in " ".join(plain.command(False))


def test_a_damaged_pane_unit_both_kept_records_share_stops_the_recovery_loudly(tiny, tmp_path):
    """A unit written once is relied on by every record whose windows hold its panes: damaged,
    no kept record can be recovered from.  The recovery stops with one line naming the damage
    - it never resumes without the pane - and the output committed before stays exact."""
    q, ds = query("SG1", tiny)
    n = 30 * ds.rows
    ft_run(q, ds, tmp_path, "incremental", k=30, max_tuples=n)
    newest, older = records(tmp_path / "storage")[:2]
    runs = [[(p["first"], p["end"]) for p in r.state if p["stream"] == "state-window0"
             and "panes" in p and p["end"] > p["first"]] for r in (newest, older)]
    shared = [(max(a[0], b[0]), min(a[1], b[1])) for a in runs[0] for b in runs[1]
              if max(a[0], b[0]) < min(a[1], b[1])]  # offsets of units both records list
    assert shared, runs
    schema = state_schema(Engine(q, ds.tables, CFG).plan.branches[0])
    damage_segment(tmp_path / "storage", schema, shared[0][0])
    before = read_output(tmp_path / "output")
    with pytest.raises(CheckpointError) as e:
        ft_run(q, ds, tmp_path, "incremental", recover=True)
    assert "\n" not in str(e.value)
    assert "state-window0" in str(e.value) and "cannot be recovered" in str(e.value)
    after = read_output(tmp_path / "output")
    v = compare(after, failure_free(q, ds, n), q.schema)  # what is there is exact
    assert (v.duplicated, v.different) == (0, 0) and len(after) == len(before), v


def test_a_record_listing_a_stream_this_build_does_not_keep_is_refused(tiny, tmp_path):
    """Pane units lived in a stream of their own (``panes-<id>``) before they moved into the
    operator's state stream: a record that lists such a stream is refused whole, never loaded
    without those panes."""
    import dataclasses

    q, ds = query("SG1", tiny)
    ft_run(q, ds, tmp_path, "incremental", k=20, max_tuples=20 * ds.rows)
    rec = records(tmp_path / "storage")[0]
    old = dataclasses.replace(rec, state=[
        dict(p, stream="panes-window0") if "panes" in p else p for p in rec.state])
    plan = Engine(q, ds.tables, CFG).plan
    with BlockManager(tmp_path / "storage", SMALL) as bm:
        state = QueryState(plan, bm, (), "incremental")
        state.load_state(rec)  # as written: loads
        with pytest.raises(ValueError, match="lists state in panes-window0, a stream this build"):
            state.load_state(old)


def test_a_window_operator_holds_its_windows_groups_not_every_tasks_partials(tiny, tmp_path,
                                                                           monkeypatch):
    """A window many tasks span (YSB's 10 s windows in tasks of 128 tuples): its checkpoints
    hold the partials folded by (pane, group) once they have doubled, far fewer rows than
    every task's - and recover the failure-free output."""
    import dataclasses

    from scabbard.ft import state as ft_state

    q, ds = query("YSB", tiny)
    n, cfg = 4 * ds.rows, dataclasses.replace(CFG, batch_rows=128)
    held = {}
    for fold in (256, 1 << 40):
        monkeypatch.setattr(ft_state, "FOLD_ROWS", fold)
        root = tmp_path / str(fold)

        def run(k=None, root=root, **kw):
            return run_fault_tolerant(
                q, ds, root / "storage", ClockedSink(root / "output"), cfg, interval=None,
                every_tasks=3, layout=SMALL,
                wrap_source=(lambda s: StopAfter(s, k)) if k else None, **kw)
        first = run(400, max_tuples=n)
        held[fold] = max(c.bytes for c in first.checkpoints)
        run(recover=True)
        v = compare(read_output(root / "output"), failure_free(q, ds, n), q.schema)
        assert v.ok, (fold, v)
    assert held[256] * 4 < held[1 << 40], held


def test_a_fold_reads_the_engines_own_window_state_where_it_keeps_one(tiny, tmp_path,
                                                                      monkeypatch):
    """A window operator folds the partials it holds by reading out the engine's serial window
    state (which has folded the same partials already), not by feeding them to a fresh state
    again; a partitioned assembly keeps its state split, so there they are fed again.  Either
    way the checkpoints hold the same rows and recover the failure-free output."""
    import dataclasses

    from scabbard.ft import state as ft_state

    q, ds = query("YSB", tiny)
    n = 4 * ds.rows
    monkeypatch.setattr(ft_state, "FOLD_ROWS", 256)
    fed, feed = [], ft_state.fold_partials
    monkeypatch.setattr(ft_state, "fold_partials", lambda *a: fed.append(1) or feed(*a))
    held = {}
    for assembly in ("serial", "partitioned:2"):
        cfg = dataclasses.replace(CFG, batch_rows=128, assembly=assembly)
        root = tmp_path / assembly[:4]
        fed.clear()

        def run(k=None, root=root, cfg=cfg, **kw):
            return run_fault_tolerant(
                q, ds, root / "storage", ClockedSink(root / "output"), cfg, interval=None,
                every_tasks=3, layout=SMALL,
                wrap_source=(lambda s: StopAfter(s, k)) if k else None, **kw)
        first = run(400, max_tuples=n)
        held[assembly] = [c.bytes for c in first.checkpoints], len(fed)
        run(recover=True)
        v = compare(read_output(root / "output"), failure_free(q, ds, n), q.schema)
        assert v.ok, (assembly, v)
    assert held["serial"][1] == 0 < held["partitioned:2"][1], held
    assert held["serial"][0] == held["partitioned:2"][0], held
