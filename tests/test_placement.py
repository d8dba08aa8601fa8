"""P-streams on any edge (paper §3.1, docs/design.md): every placement gives the failure-free
results, through a stop and a recovery; the stored channels are replayed, not recomputed
twice; GC trims them; a kill during a checkpoint and during recovery stays exactly once."""

from __future__ import annotations

import pytest
from ftkit import CFG, SMALL, StopAfter, campaign, failure_free, query

import reference as ref
from scabbard import queries
from scabbard.engine import physical
from scabbard.ft.channels import resolve, stream_name
from scabbard.ft.recovery import run_fault_tolerant
from scabbard.ft.sinks import ClockedSink, TransactionalSink, read_output
from scabbard.ft.verify import compare
from scabbard.query import QueryError
from scabbard.storage import BlockManager

pytestmark = [pytest.mark.spark, pytest.mark.crash]

PLACEMENTS = [
    ("LRB3", ("window0",), True), ("LRB3", ("output",), False),
    ("SG3", ("window0",), True), ("SG3", ("window1",), False),
    ("SG3", ("window0", "window1", "output"), True),
    ("NQ", ("window0",), True), ("YSB", ("output",), True),
]


def run(q, ds, store, sink, *, k=None, recover=False, **kw):
    return run_fault_tolerant(q, ds, store, sink, CFG, interval=None, layout=SMALL,
                              every_tasks=2, recover=recover,
                              wrap_source=None if k is None else (lambda s: StopAfter(s, k)),
                              **kw)


@pytest.mark.parametrize("name, at, ingress", PLACEMENTS)
@pytest.mark.parametrize("sink", ["clocked", "transactional"])
def test_every_placement_gives_the_failure_free_results_through_a_recovery(
        tiny, tmp_path, name, at, ingress, sink):
    q, ds = query(name, tiny)
    n = 3 * ds.rows
    store, out = tmp_path / "store", tmp_path / "out"
    make = ClockedSink if sink == "clocked" else TransactionalSink
    kw = {"persist_at": at, "persist_input": ingress, "max_tuples": n}
    first = run(q, ds, store, make(out), k=9, **kw)
    assert first.checkpoints, "the stopped run checkpointed"
    run(q, ds, store, make(out), recover=True, **kw)
    v = compare(read_output(out), failure_free(q, ds, n), q.schema)
    assert v.ok, v
    assert stored(q, store, at), "every placed edge stored what it carried"


def stored(q, store, at) -> bool:
    ops = physical.operators(q.node)
    with BlockManager(store, SMALL) as bm:
        return all(bm.durable_end(bm.stream(stream_name(e), ops[e].node.schema)) > 0
                   for e in resolve(q.node, at))


def test_a_channel_p_stream_is_trimmed_below_what_its_reader_no_longer_needs(tiny, tmp_path):
    q, ds = query("LRB3", tiny)
    store = tmp_path / "store"
    run(q, ds, store, ClockedSink(tmp_path / "out"), persist_at=("window0",),
        max_tuples=20 * ds.rows)
    schema = physical.operators(q.node)["window0"].node.schema
    with BlockManager(store, SMALL) as bm:
        sid = bm.stream(stream_name("window0"), schema)
        assert bm.durable_end(sid) > 0 and bm.start(sid) > 0  # released from the front


def test_an_unknown_edge_is_a_clear_error(tiny, tmp_path):
    q, ds = query("LRB3", tiny)
    with pytest.raises(QueryError, match="no edge 'join0'.*window0, per_window0"):
        run(q, ds, tmp_path / "s", ClockedSink(tmp_path / "o"), persist_at=("join0",))


def test_the_results_equal_the_reference_with_every_edge_persisted(tiny, tmp_path):
    q, ds = query("SG3", tiny)
    out = tmp_path / "out"
    run(q, ds, tmp_path / "s", ClockedSink(out), persist_at=("window0", "window1", "output"))
    got = read_output(out)
    want = ref.evaluate(q.node, {n: ds.column(n) for n in ds.schema.names}, ds.tables)
    ref.assert_same_results(got, want, q.schema)


def test_results_carry_the_full_vector_clock(tiny, tmp_path):
    """Every committed result's clock has an entry per persisted channel it depends on."""
    q, ds = query("SG3", tiny)
    out = tmp_path / "out"
    run(q, ds, tmp_path / "s", ClockedSink(out), persist_at=("window0", "window1"),
        max_tuples=2 * ds.rows)
    sink = ClockedSink(out)
    sink.bind(sink.io, sink.durability, ("window0", "window1"))
    sink.open(q.schema)
    clock = sink.committed()
    sink.close()
    assert set(clock) == {"input_end", "window_end", "window0", "window1"}
    assert clock["window0"] > 0 and clock["window1"] > 0 and clock["input_end"] == 2 * ds.rows


KILLED = [("LRB3", ("window0",)), ("SG3", ("window0", "window1", "output"))]


@pytest.mark.slow
@pytest.mark.parametrize("name, at, sink", [
    (*KILLED[1], "transactional"), campaign(*KILLED[1], "clocked"),
    *(campaign(*k, sink) for k in KILLED[:1] for sink in ("clocked", "transactional"))])
def test_kills_during_a_checkpoint_and_during_recovery_with_intermediate_p_streams(
        tiny, tmp_path, name, at, sink):
    """The engine process SIGKILLs itself with a checkpoint's state handed to storage, in the
    middle of a recovery's replay, and between a record and its commit - with p-streams on
    the edges between operators: exactly once."""
    from scabbard.ft.controller import Controller, campaign_config

    ds = tiny[queries.workload_of(name)]
    n = 60 * ds.rows  # paced over 5 s, so that all three crash points land
    c = Controller(campaign_config(
        name, ds.path, tmp_path, max_tuples=n, batch_rows=4000, rate=n / 5,
        persist_at=at, interval=0.2, sink=sink))
    camp = c.run([], crash_at=["checkpoint_state:2", "recovery_replay", "checkpoint_commit:2"])
    assert camp.crashes == 3, camp
    assert camp.verdict.ok, camp.verdict


@pytest.mark.slow
@pytest.mark.parametrize("name, at", [KILLED[0], campaign(*KILLED[1])])
def test_random_kills_with_intermediate_p_streams(tiny, tmp_path, name, at):
    import random

    from scabbard.ft.controller import Controller, campaign_config

    ds = tiny[queries.workload_of(name)]
    rng = random.Random(name)
    n = 80 * ds.rows  # paced over 6 s, so that a kill at 1.2-3 s lands
    c = Controller(campaign_config(
        name, ds.path, tmp_path, max_tuples=n, batch_rows=4000, rate=n / 6,
        persist_at=at,
        interval=0.2, sink="transactional" if name == "SG3" else "clocked"))
    camp = c.run([rng.uniform(1.2, 3.0) for _ in range(3)])
    assert camp.kills >= 1, "the run finished before any kill: make it longer"
    assert camp.verdict.ok, camp.verdict


def _lrb3_measured(window_bytes=1320.0):
    from scabbard.ft.placement import Measured

    return Measured("LRB3", 1000, {"ingress": 32.0, "window0": window_bytes,
                                   "per_window0": 8.0},
                    {"ingress": 1.0, "window0": 30.0, "per_window0": 0.2}, 1e6,
                    build_s_tuple=200e-9, emit_s_tuple=5000e-9,
                    chains={"window0": ("per_window0",)})


def test_the_cost_model_prices_bytes_state_and_recovery():
    from scabbard.ft import placement as pl

    m = _lrb3_measured()
    plain = pl.estimate(m, ("ingress",), 1e6, 1.0)
    out = pl.estimate(m, ("ingress", "output"), 1e6, 1.0)
    assert plain.bytes_per_s == 32e6 and out.bytes_per_s == 40e6
    assert out.placement == ("ingress", "per_window0")  # "output" is the root's edge
    # stored downstream: the replay only rebuilds the windows' state (no emission), and the
    # channel's rows since the checkpoint are read back
    back = 0.2 * 1e6 * physical.operators(queries.get("LRB3").node)[
        "per_window0"].node.schema.payload_bytes * m.channel_s_byte
    assert plain.recovery_s - out.recovery_s == pytest.approx(1e6 * 5000e-9 - back)
    assert pl.estimate(m, ("per_window0",), 1e6, 1.0).source_buffer_bytes == 32e6
    assert len(pl.placements(queries.get("LRB3"), with_ingress=True)) == 4


def test_every_persisted_channel_is_priced_at_the_rows_it_replays():
    """Recovery reads a persisted channel back from its consumer's position: LRB3's window0
    (30 rows an input tuple here) costs its rows times their bytes at the measured rate, at an
    interval's input or where a crash left it."""
    from scabbard.ft import placement as pl

    m = _lrb3_measured()
    row = physical.operators(queries.get("LRB3").node)["window0"].node.schema.payload_bytes
    alone = pl.estimate(m, ("ingress",), 1e6, 1.0)
    both = pl.estimate(m, ("ingress", "window0"), 1e6, 1.0)
    saved = 1e6 * 5000e-9  # window0's output is stored: not emitted again
    assert both.recovery_s - alone.recovery_s == pytest.approx(
        1e6 * 30.0 * row * m.channel_s_byte - saved)
    at = {"replay_tuples": 1e5, "state_bytes": 2e6}
    none = pl.estimate(m, ("ingress", "window0"), 1e6, 1.0, channel_rows={"window0": 0}, **at)
    some = pl.estimate(m, ("ingress", "window0"), 1e6, 1.0, channel_rows={"window0": 4e6}, **at)
    assert some.recovery_s - none.recovery_s == pytest.approx(4e6 * row * m.channel_s_byte)
    assert none.state_bytes == 2e6


def test_auto_recovers_fastest_within_half_the_disk_and_writes_least_among_equals():
    from scabbard.ft import placement as pl

    m = _lrb3_measured()
    assert pl.choose(m, 1e6, 1.0).placement == ("ingress", "per_window0")
    # window0's raw output (1.3 GB/s here) would take the disk: never chosen; at a rate where
    # it fits, per_window0 still wins - the same recovery for fewer bytes
    assert pl.choose(m, 1e5, 1.0).placement == ("ingress", "per_window0")
    # nothing fits half of a slow disk: the input alone
    assert pl.choose(m, 1e6, 1.0, write_mb_s=10).placement == ("ingress",)


def test_measured_edges_are_the_queries_own_selectivities_in_steady_state(tiny):
    """The bytes an edge carries are measured between the sample's first and last checkpoint:
    the open windows a sample's end would flush do not count, so a sample and one four times
    longer agree, and the whole short run (its end flushed: 12% more rows here) counts more;
    the recovery's costs are measured."""
    from scabbard.engine import CollectSink, Replay, run_query
    from scabbard.ft import placement as pl

    q, ds = query("LRB3", tiny)
    n = 2 * ds.rows
    short, long = pl.measure("LRB3", ds, tuples=n), pl.measure("LRB3", ds, tuples=4 * n)
    assert short.bytes_per_tuple["ingress"] == ds.schema.row_bytes
    for e in ("window0", "per_window0"):
        assert short.rows_per_tuple[e] == pytest.approx(long.rows_per_tuple[e], rel=0.15), e
    sink = CollectSink()
    run_query(q, ds, sink=sink, replay=Replay(max_tuples=n))  # the whole run, its end flushed
    assert sink.rows / n > 1.05 * short.rows_per_tuple["per_window0"]
    assert short.rows_per_tuple["window0"] > short.rows_per_tuple["per_window0"] > 0
    assert short.state_bytes > 0 and short.build_s_tuple > 0 and short.emit_s_tuple > 0
    assert short.replay_s_tuple > 0 and short.load_s_byte > 0 and short.channel_s_byte > 0


def test_run_with_auto_placement_records_it_and_a_recovery_keeps_it(tiny, tmp_path):
    import json
    import subprocess
    import sys

    ds = tiny["lrb"]
    base = [sys.executable, "-m", "scabbard", "run", "--query", "LRB3", "--data", str(ds.path),
            "--storage", str(tmp_path / "s"), "--output", str(tmp_path / "o"),
            "--checkpoint-interval", "0.5", "--placement", "auto", "--quiet"]
    out = subprocess.run(base + ["--max-tuples", str(2 * ds.rows)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "placement (auto" in out.stdout
    assert json.loads((tmp_path / "s" / "run.json").read_text())["persist_at"] == ["per_window0"]
    again = subprocess.run(base + ["--max-tuples", str(2 * ds.rows), "--recover"],
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "the run's own (ingress, per_window0)" in again.stdout
    bad = subprocess.run(base + ["--persist-at", "window0"], capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "use one" in bad.stderr


def test_checkpoints_record_the_dependencies_gc_walks(tiny, tmp_path):
    """Each record names, per operator, the p-units its state newly depends on (Fig. 4):
    consecutive records' dependencies chain, and GC trims a channel below them."""
    from ftkit import records

    q, ds = query("LRB3", tiny)
    store = tmp_path / "store"
    run(q, ds, store, ClockedSink(tmp_path / "out"), persist_at=("window0",),
        max_tuples=4 * ds.rows)
    newer, older = records(store)[:2]
    deps = newer.operator["dependencies"]
    assert [d["stream"] for d in deps["window0"]] == ["input"]
    assert [d["stream"] for d in deps["per_window0"]] == ["edge-window0"]
    assert deps["per_window0"][0]["first"] == older.operator["dependencies"]["per_window0"][0][
        "end"] < deps["per_window0"][0]["end"]
    assert deps["window0"][0]["end"] == newer.input_end


@pytest.mark.parametrize("name", queries.NAMES)
def test_every_query_with_every_placement_gives_the_failure_free_results(tiny, tmp_path, name):
    """All placements of the query's p-streams (the input and every operator's output, each
    on or off), each a fault-tolerant run compared with the failure-free engine (itself equal
    to Spark: test_spark_backend)."""
    from scabbard.ft.placement import INGRESS, placements

    q, ds = query(name, tiny)
    n = ds.rows if name not in ("SG1", "SG3") else ds.rows // 2  # the hour window is dear
    want = failure_free(q, ds, n)
    for k, p in enumerate(placements(q)):
        out = tmp_path / f"out{k}"
        run(q, ds, tmp_path / f"s{k}", ClockedSink(out), max_tuples=n,
            persist_at=tuple(e for e in p if e != INGRESS), persist_input=INGRESS in p)
        v = compare(read_output(out), want, q.schema)
        assert v.ok, (p, v)


def test_a_plain_recover_takes_the_placement_its_run_recorded(tiny, tmp_path):
    """A run started with ``--persist-at`` is recovered by a plain ``--recover`` (the placement
    comes from run.json, as every other setting); another placement is refused in one line."""
    import subprocess
    import sys

    ds = tiny["lrb"]
    base = [sys.executable, "-m", "scabbard", "run", "--query", "LRB3", "--data", str(ds.path),
            "--storage", str(tmp_path / "s"), "--output", str(tmp_path / "o"),
            "--checkpoint-interval", "0.5", "--quiet", "--max-tuples", str(2 * ds.rows)]
    first = subprocess.run(base + ["--persist-at", "ingress,per_window0"], capture_output=True,
                           text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    again = subprocess.run(base + ["--recover"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    other = subprocess.run(base + ["--recover", "--persist-at", "ingress"], capture_output=True,
                           text=True, timeout=300)
    assert other.returncode != 0 and other.stderr.count("\n") == 1, other.stderr
    assert "persist_at ['per_window0'] recorded, [] given" in other.stderr


def test_the_ingress_is_priced_at_what_push_up_and_the_codecs_store(tiny):
    """With push-up (and compression) the ingress p-stream stores a few bytes of YSB's 68 a
    tuple: the placement model prices that, not the raw rows."""
    from scabbard.engine.pushup import footprint
    from scabbard.ft import placement as pl

    q, ds = query("YSB", tiny)
    raw = pl.measure("YSB", ds, tuples=ds.rows)
    pushed = pl.measure("YSB", ds, tuples=ds.rows, push_up=True, compression="none")
    packed = pl.measure("YSB", ds, tuples=ds.rows, push_up=True, compression="adaptive")
    fp = footprint(q, ds, rows=ds.rows, lossy_decimals=None)
    assert raw.bytes_per_tuple["ingress"] == ds.schema.payload_bytes == 68
    assert pushed.bytes_per_tuple["ingress"] == pytest.approx(fp.pushed_bytes)
    assert packed.bytes_per_tuple["ingress"] == pytest.approx(fp.compressed["default"])
    assert packed.bytes_per_tuple["ingress"] < pushed.bytes_per_tuple["ingress"] < 68
    rate, interval = 1e6, 1.0
    assert pl.estimate(packed, ("ingress",), rate, interval).bytes_per_s < \
        pl.estimate(raw, ("ingress",), rate, interval).bytes_per_s / 8


def _metrics_of_one_kill(state_bytes=None):
    """A metrics log's rows around a kill at wall 100.0 and the recovery after it (as the
    engine writes them: its start, then its phases, then the recovery's)."""
    import pandas as pd

    resume = {"event": "recovery", "wall": 100.61, "phase": "resume", "replay_from": 1000,
              "replay_to": 6000, "state_load_ms": 3.0, "state_channel_rows": {"window0": 40}}
    if state_bytes is not None:
        resume["state_bytes"] = state_bytes
    rows = [{"event": "sample", "wall": 99.5 + 0.1 * k, "tuples_per_s": 1e5,
             "latency_p50_ms": 10.0} for k in range(5)]
    rows += [{"event": "start", "wall": 100.62}]
    rows += [{"event": "phase", "wall": w, "phase": p} for p, w in (
        ("spawned", 100.05), ("started", 100.4), ("loading", 100.41), ("state_loaded", 100.45),
        ("code_loaded", 100.6))]
    rows += [resume, {"event": "recovery", "wall": 100.7, "phase": "replayed"}]
    rows += [{"event": "sample", "wall": 100.8 + 0.1 * k, "tuples_per_s": 1e5,
              "latency_p50_ms": 10.0} for k in range(5)]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("state", [2e6, None])
def test_notebook_11_reads_each_kills_recovery_from_the_metrics_log(state):
    """What a kill's recovery cost (its state and channels loaded, then its replay) and where
    the kill left the run, from the metrics log; a kill before the first checkpoint has no
    state (it was a KeyError in the tiny notebook run)."""
    from scabbard.experiments.placement import _crashes

    (c,) = _crashes(_metrics_of_one_kill(state), [100.0])
    assert c["replay_ms"] == pytest.approx(100.0) and c["state_load_ms"] == 3.0
    assert c["recovery_ms"] == pytest.approx(103.0)
    assert c["restart_ms"] == pytest.approx(600.0)  # kill -> code loaded: every placement's
    assert c["replay_tuples"] == 5000 and c["channel_rows"] == {"window0": 40}
    assert c["state_bytes"] == (state or 0.0)


def test_notebook_11_tables_leave_out_a_placement_no_kill_landed_on():
    """A kill that lands after a short run ended leaves its placement without a recovery: the
    tables rank the others (they raised a KeyError)."""
    import numpy as np
    import pandas as pd

    from scabbard.experiments.placement import auto_against_best, best, predicted_vs_measured

    t = pd.DataFrame({"query": ["LRB3"] * 2, "placement": ["ingress", "ingress+per_window0"],
                      "auto": [False, True], "recoveries": [1, 0],
                      "recovery_ms": [40.0, np.nan], "recovery_min_ms": [40.0, np.nan],
                      "recovery_max_ms": [40.0, np.nan], "predicted_recovery_ms": [50.0, np.nan],
                      "mb_per_s_persisted": [9.6, 12.0], "predicted_mb_per_s": [9.6, 12.0],
                      "restart_ms": [700.0, np.nan], "tuples_per_s": [4e6, 4e6],
                      "checkpoint_mb": [1.4, 1.4]})
    assert list(best(t)["placement"]) == ["ingress", "ingress", "ingress+per_window0"]
    assert auto_against_best(t)["auto / best"].isna().all()
    assert predicted_vs_measured(t)["predicted / measured"].iloc[0] == pytest.approx(1.25)


def test_explain_query_without_a_dataset_gives_the_plans_and_how_to_make_one(tmp_path):
    from scabbard.ft.placement import explain_query

    parts = list(explain_query("CM1", None, tmp_path, 1000, 2, 0.0, 0.0))
    assert len(parts) == 2 and "push-up" in parts[0]
    assert parts[1] == (f"(no dataset at {tmp_path / 'cm' / 'small'}: generate one with "
                        "'scabbard datagen cm' or pass --data to measure selectivity and "
                        "compression)")
