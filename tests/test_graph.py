"""The operator graph above the branches: stable operator ids, fusion, the window join's
buffering by watermarks, and its state through a checkpoint (no Spark needed)."""

import numpy as np
import pytest

from scabbard import queries
from scabbard.engine import physical
from scabbard.engine.graph import OperatorGraph, empty_columns
from scabbard.engine.tasks import INT64_MAX, INT64_MIN, BranchPart, TaskResult, empty_edges
from scabbard.query import QueryError


def test_operators_have_stable_ids_in_plan_order():
    ids = {n: list(physical.operators(queries.get(n).node)) for n in ("SG3", "LRB3", "NQ", "LRB1")}
    assert ids == {"SG3": ["window0", "window1", "join0"], "LRB3": ["window0", "per_window0"],
                   "NQ": ["window0", "keep_max0"], "LRB1": ["window0", "having0"]}
    ops = physical.operators(queries.get("SG3").node)
    assert ops["join0"].inputs == ("window0", "window1") and ops["join0"].output == "sink"
    assert ops["window1"].node.window.range_ms == 3_600_000 and ops["window1"].output == "join0"


def test_stateless_operators_fuse_above_their_branch_unless_an_edge_must_stay():
    p = physical.plan(queries.get("LRB3").node)
    assert [op.id for op in p.chains[0]] == ["per_window0"] and p.graph == ()
    cut = physical.plan(queries.get("LRB3").node, unfused=frozenset({"window0"}))
    assert cut.chains == ((),) and [op.id for op in cut.graph] == ["per_window0"]
    sg3 = physical.plan(queries.get("SG3").node)
    assert sg3.chains == ((), ()) and [op.id for op in sg3.graph] == ["join0"]
    with pytest.raises(QueryError, match="no operator window7"):
        physical.plan(queries.get("LRB3").node, unfused=frozenset({"window7"}))



def test_a_keep_max_right_above_a_window_is_fused_into_its_emission_unless_persisted():
    from scabbard.kernels import rows as kr
    from scabbard.query import Query, count
    from scabbard.query import sum as sum_
    from scabbard.workloads.nexmark import SCHEMA

    assert physical.plan(queries.get("NQ").node).branches[0].select == (kr.MAX_COUNT, 0)
    cut = physical.plan(queries.get("NQ").node, unfused=frozenset({"window0"}))
    assert cut.branches[0].select == (kr.ALL_GROUPS, 0)  # the p-stream holds every group
    assert physical.plan(queries.get("LRB3").node).branches[0].select[0] != kr.MAX_COUNT
    base = Query.stream(SCHEMA, "nexmark").window(60, 1).group_by("auction")
    total = physical.plan(base.aggregate(count().alias("n"), sum_("price").alias("total"))
                          .keep_max("total").node)
    assert total.branches[0].select == (kr.MAX_INT, 0)


def test_a_per_window_count_by_some_keys_is_fused_into_the_emission_unless_persisted():
    """LRB3 counts LRB2's groups per (highway, direction, segment): the emission writes those
    counts, the per-window operator does not run again, and the results stay the operator's."""
    from scabbard.kernels import rows as kr
    from scabbard.query import col, count
    from scabbard.query import sum as sum_
    from scabbard.workloads import lrb

    p = physical.plan(queries.get("LRB3").node)
    b = p.branches[0]
    # LRB2's keys are vehicle, highway, direction, segment: words 1, 2, 3
    assert (b.select, b.emitted) == ((kr.ROLLUP_COUNT, 0, 1, 2, 3), "per_window0")
    assert p.top(0) == "per_window0"  # the edge it feeds is still the operator's
    # a p-stream on LRB2's rows keeps every row
    c = physical.plan(queries.get("LRB3").node, unfused=frozenset({"window0"})).branches[0]
    assert (c.select, c.emitted) == ((kr.ALL_GROUPS, 0), None)
    # not a count of groups by plain keys: the operator runs on the rows as before
    lrb2 = lrb.lrb2().per_window()
    for q in (lrb2.group_by("segment").aggregate(sum_("reports").alias("r")),
              lrb2.group_by(seg2=col("segment") // 2).aggregate(count().alias("n"))):
        b = physical.plan(q.node).branches[0]
        assert (b.select, b.emitted) == ((kr.ALL_GROUPS, 0), None)
    # by the keys in another order, and by none: fused
    b = physical.plan(lrb2.group_by("segment", "vehicle").aggregate(count().alias("n")).node)
    assert b.branches[0].select == (kr.ROLLUP_COUNT, 0, 3, 0)
    b = physical.plan(lrb2.group_by().aggregate(count().alias("n")).node)
    assert b.branches[0].select == (kr.ROLLUP_COUNT, 0)

def _rows(schema, ends, **values):
    cols = empty_columns(schema)
    n = len(ends)
    cols = {k: np.zeros(n, v.dtype) if v.ndim == 1 else np.zeros((n, 2), v.dtype)
            for k, v in cols.items()}
    cols["window_end"] = np.asarray(ends, np.int64)
    cols["window_start"] = cols["window_end"] - 128_000
    for k, v in values.items():
        cols[k] = np.asarray(v, dtype=cols[k].dtype)
    return cols


def _through(g: OperatorGraph, producer: str, cols, watermark):
    g.push(producer, cols, watermark, {"input_end": 0})
    return [what for kind, what, _ in g.pump() if kind == "data"]


def test_the_join_waits_for_both_watermarks_and_emits_in_window_order():
    plan = physical.plan(queries.get("SG3").node)
    local, global_ = (plan.operators[i].node.schema for i in ("window0", "window1"))
    g = OperatorGraph(plan)
    # the local side runs ahead: nothing is joined until the global side passes its windows
    assert _through(g, "window0", _rows(local, [1000, 1000, 2000], plug=[1, 2, 1],
                                        local_avg=[5.0, 1.0, 9.0]), 2000) == []
    out = _through(g, "window1", _rows(global_, [1000], global_avg=[2.0]), 1000)
    assert [c["plug"].tolist() for c in out] == [[1]]  # window 1000: plug 1 above 2.0
    snap = g.snapshot()
    j = snap["join0"]
    assert j["watermarks"] == [2000, 1000] and j["pending"][0]["window_end"].tolist() == [2000]
    # an empty batch still moves the watermark: window 2000 has no global row, so no result
    assert _through(g, "window1", _rows(global_, []), 3000) == []
    assert g.snapshot()["join0"]["pending"][0]["window_end"].tolist() == []
    again = OperatorGraph(plan)
    again.restore(snap)
    out = _through(again, "window1", _rows(global_, [2000], global_avg=[3.0]), INT64_MAX)
    assert [(c["window_end"].tolist(), c["local_avg"].tolist()) for c in out] == [([2000], [9.0])]


def test_a_joins_waiting_rows_are_checkpointed_and_load_back(tmp_path):
    from scabbard.ft.state import QueryState
    from scabbard.pog.checkpoint import CheckpointRecord
    from scabbard.pog.markers import Marker, MarkerKind
    from scabbard.storage import BlockManager

    plan = physical.plan(queries.get("SG3").node)
    local = plan.operators["window0"].node.schema
    g = OperatorGraph(plan)
    _through(g, "window0", _rows(local, [1000, 2000, 2000], plug=[1, 2, 3], household=[4, 5, 6],
                                 local_avg=[1.5, 2.5, 3.5]), 2000)
    marker = Marker(MarkerKind.CHECKPOINT, "input", checkpoint_id=7)
    with BlockManager(tmp_path / "store") as bm:
        state = QueryState(plan, bm)
        # the marker's task assembled (the windows take it), then it reaches the join and
        # passes the sink
        parts = [BranchPart(2, 2, False, empty_edges(b.key_width, len(b.iops), len(b.fops)),
                            empty_edges(b.key_width, len(b.iops), len(b.fops)), None)
                 for b in plan.branches]
        state.after_task(TaskResult(5, 100, 0.0, parts, 100, 2999, marker), {}, g)
        assert not state.complete()
        state.reached("join0", g.snapshot()["join0"], {"in": {}, "out": {}})
        state.reached("sink", {"input_end": 100, "window_end": 1000}, {"in": {}, "out": {}})
        assert state.complete()
        snap = state.prepare_checkpoint(marker)
        parts, futures, nbytes = state.checkpoint(snap)
        for f in futures:
            f.result()
        rec = CheckpointRecord(7, snap.seq, snap.input_end, snap.output, parts, snap.operator,
                               nbytes, 0.0, 0.0)
    assert [p["stream"] for p in parts] == ["state-window0", "state-window1", "state-join0-l",
                                            "state-join0-r"]
    with BlockManager(tmp_path / "store") as bm:
        edges, graph = QueryState(plan, bm).load_state(rec)
    assert len(edges) == 2 and graph["join0"]["watermarks"] == [2000, INT64_MIN]
    rows = graph["join0"]["pending"][0]
    assert rows["plug"].tolist() == [1, 2, 3] and rows["local_avg"].tolist() == [1.5, 2.5, 3.5]
    assert rows["household"].tolist() == [4, 5, 6]
    assert len(graph["join0"]["pending"][1]["global_avg"]) == 0  # the global side held none


class _Marker:
    def __init__(self, cid):
        self.checkpoint_id = cid


class _Stored:
    """A store that persists nothing (a future set at once), so channels behave as persisted."""

    def __init__(self):
        self.start = {"end": 0, "consumed": 0, "skip_through": INT64_MIN, "replay": []}
        self.written, self.taken_offsets = [], []

    def write(self, cols, offset, watermark, clock):
        from concurrent.futures import Future

        f = Future()
        f.set_result(None)
        self.written.append(offset)
        return f

    def taken(self, item):
        self.taken_offsets.append(item.offset)


def _sg3_graph(stores=None):
    plan = physical.plan(queries.get("SG3").node, unfused=frozenset(stores or ()))
    reports = []
    g = OperatorGraph(plan, stores, lambda *a: reports.append(a))
    local, global_ = (plan.operators[i].node.schema for i in ("window0", "window1"))
    return g, reports, local, global_


def _events(g):
    return [(k, w if k == "marker" else w["window_end"].tolist()) for k, w, _ in g.pump()]


@pytest.mark.parametrize("first", ["window0", "window1"])
def test_alg1_snapshots_at_the_first_marker_forwards_it_and_records_the_other_input(first):
    """SG3's join has two inputs; whichever marker comes first, the snapshot is the join's
    state then, the marker goes on to the sink at once, and what the other input delivers
    before its own marker is recorded into the snapshot (Chandy-Lamport's channel state)."""
    g, reports, local, global_ = _sg3_graph()
    second = "window1" if first == "window0" else "window0"
    rows = {"window0": _rows(local, [1000, 2000], plug=[1, 1], local_avg=[5.0, 6.0]),
            "window1": _rows(global_, [1000, 2000], global_avg=[2.0, 2.0])}
    g.push(first, rows[first], 2000, {"input_end": 10})
    m = _Marker(4)
    g.mark(first, m)
    assert _events(g) == [("marker", m)] and reports == []  # forwarded at the first marker
    g.push(second, rows[second], 2000, {"input_end": 10})  # before its marker: recorded
    assert _events(g) == [("data", [1000, 2000])]  # ... and processed
    g.mark(second, m)
    assert _events(g) == [] and len(reports) == 1
    where, marker, snap, pv = reports[0]
    assert (where, marker) == ("join0", m)
    port = 0 if second == "window0" else 1
    assert snap["pending"][port]["window_end"].tolist() == [1000, 2000]  # recorded
    assert snap["pending"][1 - port]["window_end"].tolist() == [1000, 2000]  # the state then
    assert snap["emitted"] == INT64_MIN  # nothing was joined before the snapshot
    again = OperatorGraph(g.plan)  # restored from it, the same windows come out again
    again.restore({"join0": snap})
    again.push(first, _rows(local if first == "window0" else global_, []), 3000, {})
    again.push(second, _rows(local if second == "window0" else global_, []), 3000, {})
    assert [e for e in _events(again) if e[0] == "data"] == [("data", [1000, 2000])]


def test_alg1_does_not_record_an_input_its_p_stream_replays():
    store = _Stored()
    g, reports, local, global_ = _sg3_graph({"window1": store})
    m = _Marker(1)
    g.mark("window0", m)
    g.push("window1", _rows(global_, [1000], global_avg=[2.0]), 1000, {"input_end": 5})
    g.mark("window1", m)
    g.pump()
    (where, _, snap, pv), = reports
    assert snap["pending"][1]["window_end"].tolist() == []  # the p-stream has it
    assert pv["in"] == {"window1": 0}  # where its replay starts: before that batch
    assert store.written == [0] and store.taken_offsets == [0]


def test_a_batch_goes_past_the_channels_only_where_nothing_could_come_between():
    """A piece of the sink's own producer may go to the sink at once (its caller emits it)
    when its edge is not persisted and nothing waits in it - then the clocks move as taking
    it would; never past a waiting marker, a persisted edge or an operator."""
    plan = physical.plan(queries.get("LRB1").node)
    g = OperatorGraph(plan)
    top = plan.top(0)
    assert g.sink is g.channels[top]
    assert g.passes(top, {"input_end": 7, "piece": True})
    assert g.clock["input_end"] == 7 and g.sink.seen == {"input_end": 7}
    g.mark(top, _Marker(1))  # waiting: the piece must follow it through the channel
    assert not g.passes(top, {"input_end": 9, "piece": True})
    assert g.clock["input_end"] == 7
    assert [k for k, *_ in g.pump()] == ["marker"] and g.passes(top, {"input_end": 9})
    assert g.clock["input_end"] == 9
    stored = OperatorGraph(physical.plan(queries.get("LRB1").node, unfused=frozenset({top})),
                           {top: _Stored()})
    assert not stored.passes(top, {"input_end": 1})  # persisted: stored before it is read
    sg3, *_ = _sg3_graph()
    assert not sg3.passes("window0", {"input_end": 1})  # the join's input, not the sink's


def test_the_sinks_progress_is_taken_where_the_marker_is_not_where_the_pump_ends():
    """A marker between two stored batches of the channel before the sink: the sink's
    position at the marker is after the first, even when one pump moves both (a checkpoint
    that placed it after the second lost those results when recovered)."""
    store = _Stored()
    plan = physical.plan(queries.get("LRB3").node, unfused=frozenset({"per_window0"}))
    schema = plan.operators["per_window0"].node.schema
    g = OperatorGraph(plan, {"per_window0": store})
    g.push("per_window0", _rows(schema, [1000, 1000]), 1000, {})
    g.mark("per_window0", _Marker(3))
    g.push("per_window0", _rows(schema, [2000, 2000, 2000]), 2000, {})
    events = g.pump()
    assert [e[0] for e in events] == ["data", "marker", "data"]
    assert events[1][2]["in"] == {"per_window0": 2}


def _sg3_join():
    return next(op.node for op in physical.plan(queries.get("SG3").node).operators.values()
                if op.kind == "join")


def _sg3_sides(node, rng, empty_right: bool, most: int = 6):
    """Left rows (up to ``most`` per window) and a right side with one row for 70 % of the
    windows (none if ``empty_right``), in window order."""
    ends = np.sort(rng.choice(np.arange(1000, 1100) * 1000, size=int(rng.integers(0, 40)),
                              replace=False))
    lw = np.repeat(ends, rng.integers(0, most, len(ends)))
    keep_right = rng.random(len(ends)) < 0.7
    rw = ends[:0] if empty_right else ends[keep_right]
    left = {"window_start": lw - 128_000, "window_end": lw,
            "plug": rng.integers(0, 9, len(lw)).astype(np.int32),
            "household": rng.integers(0, 9, len(lw)).astype(np.int32),
            "house": rng.integers(0, 9, len(lw)).astype(np.int32),
            "local_avg": rng.random(len(lw))}
    right = {"window_start": rw - 3_600_000, "window_end": rw, "global_avg": rng.random(len(rw))}
    left = {f.name: left[f.name].astype(f.numpy_dtype) for f in node.left.schema.fields}
    return left, right


def _assert_same_rows(got: dict, want: dict, node) -> None:
    assert list(got) == list(want) == list(node.schema.names)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
        assert got[name].dtype == want[name].dtype, name


@pytest.mark.parametrize("seed", range(6))
def test_the_lookup_join_of_one_row_per_window_equals_the_hash_join(seed):
    """SG3's join (a global aggregate on the right: one row per window, no keys) takes the
    lookup path; on windows that one side lacks, rows the predicate drops, and empty sides,
    it gives the hash join's rows in the same order."""
    rng = np.random.default_rng(seed)
    node = _sg3_join()
    left, right = _sg3_sides(node, rng, empty_right=seed == 0)
    _assert_same_rows(physical.join_one_per_window(node, left, right),
                      physical.join_hashed(node, left, right), node)


@pytest.mark.parametrize("seed", range(4))
def test_the_lookup_join_in_pieces_at_once_gives_the_same_rows_in_order(seed, monkeypatch):
    """With threads to run on, a large left side is cut into contiguous pieces joined at once:
    the pieces, one after the other, are the join's rows in window order, and no window is
    cut between two pieces (a clocked sink commits a piece's last window whole)."""
    from concurrent.futures import ThreadPoolExecutor

    from scabbard.engine.assembly import at_once

    monkeypatch.setattr(physical, "JOIN_PIECE_ROWS", 16)
    rng = np.random.default_rng(seed)
    node = _sg3_join()
    left, right = _sg3_sides(node, rng, empty_right=seed == 0, most=12)
    with ThreadPoolExecutor(2) as pool:
        pieces = physical.window_join(node, left, right,
                                      (lambda fn, args: at_once(pool, fn, args), 3))
    n = len(left["window_end"])
    assert len(pieces) == 1 if n < 32 else len(pieces) > 1 or n < 64  # windows of < 12 rows
    ends = [p["window_end"] for p in pieces if len(p["window_end"])]
    assert all(a[-1] < b[0] for a, b in zip(ends, ends[1:], strict=False)), "a window cut in two"
    _assert_same_rows(physical.concat_pieces(pieces), physical.join_hashed(node, left, right),
                      node)


def test_checkpoint_records_are_ordered_by_their_id_past_ten_to_the_eighth(tmp_path):
    """Record files are named with 8 padded digits; from id 10^8 on the name is wider, and the
    records are still ordered by id: the newest is kept by the keep-3 rotation and taken as
    the decision, the oldest removed."""
    from scabbard.pog.checkpoint import CheckpointRecord, CheckpointStore

    store = CheckpointStore(tmp_path / "checkpoints")
    ids = [99_999_998, 99_999_999, 100_000_000, 100_000_001]
    for cid in ids:
        store.record(CheckpointRecord(cid, cid, cid, {}, [], {}, 0, 0.0, 1.0))
    assert [r.id for r in store.records()] == ids[:0:-1]
    assert store.latest_id() == store.highest_id() == 100_000_001
    assert not (tmp_path / "checkpoints" / "ckpt-99999998.json").exists()
