"""The operator graph above the branches: stable operator ids, fusion, the window join's
buffering by watermarks, and its state through a checkpoint (no Spark needed)."""

import numpy as np
import pytest

from scabbard import queries
from scabbard.engine import physical
from scabbard.engine.graph import OperatorGraph, empty_columns
from scabbard.engine.tasks import INT64_MAX
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


def test_the_join_waits_for_both_watermarks_and_emits_in_window_order():
    plan = physical.plan(queries.get("SG3").node)
    local, global_ = (plan.operators[i].node.schema for i in ("window0", "window1"))
    g = OperatorGraph(plan)
    # the local side runs ahead: nothing is joined until the global side passes its windows
    assert g.push("window0", _rows(local, [1000, 1000, 2000], plug=[1, 2, 1],
                                   local_avg=[5.0, 1.0, 9.0]), 2000) == []
    out = g.push("window1", _rows(global_, [1000], global_avg=[2.0]), 1000)
    assert [c["plug"].tolist() for c in out] == [[1]]  # window 1000: plug 1 above 2.0
    snap = g.snapshot()
    j = snap["join0"]
    assert j["watermarks"] == [2000, 1000] and j["pending"][0]["window_end"].tolist() == [2000]
    # an empty batch still moves the watermark: window 2000 has no global row, so no result
    assert g.push("window1", _rows(global_, []), 3000) == []
    assert g.snapshot()["join0"]["pending"][0]["window_end"].tolist() == []
    again = OperatorGraph(plan)
    again.restore(snap)
    out = again.push("window1", _rows(global_, [2000], global_avg=[3.0]), INT64_MAX)
    assert [(c["window_end"].tolist(), c["local_avg"].tolist()) for c in out] == [([2000], [9.0])]


def test_a_joins_waiting_rows_are_checkpointed_and_load_back(tmp_path):
    from scabbard.ft.state import QueryState
    from scabbard.pog.checkpoint import CheckpointRecord
    from scabbard.pog.markers import Marker, MarkerKind
    from scabbard.storage import BlockManager

    plan = physical.plan(queries.get("SG3").node)
    local = plan.operators["window0"].node.schema
    g = OperatorGraph(plan)
    g.push("window0", _rows(local, [1000, 2000, 2000], plug=[1, 2, 3], household=[4, 5, 6],
                            local_avg=[1.5, 2.5, 3.5]), 2000)
    with BlockManager(tmp_path / "store") as bm:
        state = QueryState(plan, bm)
        state.graph = g
        snap = state.prepare_checkpoint(Marker(MarkerKind.CHECKPOINT, "input", checkpoint_id=7))
        parts, futures, nbytes = state.checkpoint(snap)
        for f in futures:
            f.result()
        rec = CheckpointRecord(7, snap.seq, snap.input_end, snap.output, parts, snap.operator,
                               nbytes, 0.0, 0.0)
    assert [p["stream"] for p in parts] == ["state-0", "state-1", "state-join0-l",
                                            "state-join0-r"]
    with BlockManager(tmp_path / "store") as bm:
        edges, graph = QueryState(plan, bm).load_state(rec)
    assert len(edges) == 2 and graph["join0"]["watermarks"] == [2000, g.joins["join0"].watermarks[1]]
    rows = graph["join0"]["pending"][0]
    assert rows["plug"].tolist() == [1, 2, 3] and rows["local_avg"].tolist() == [1.5, 2.5, 3.5]
    assert rows["household"].tolist() == [4, 5, 6]
    assert len(graph["join0"]["pending"][1]["global_avg"]) == 0  # the global side held none
