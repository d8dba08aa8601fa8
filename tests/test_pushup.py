"""Persistence push-up (paper §3.4): the rewrite's rules, and that it changes no result."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
from ftkit import campaign

from scabbard import queries
from scabbard.batch import Batch
from scabbard.engine import CollectSink, run_query
from scabbard.engine.pushup import Reducer
from scabbard.ft.config import PersistConfig
from scabbard.ft.controller import Controller, campaign_config
from scabbard.ft.ingress import run_persisted
from scabbard.ft.verify import compare
from scabbard.outputs import read_metrics
from scabbard.query import Query
from scabbard.query.aggregates import count, max, sum  # noqa: A004
from scabbard.query.expr import Col
from scabbard.query.optimize import push_up
from scabbard.query.plan import Filter, Project, RelationJoin, Source
from scabbard.schema import Field, Schema

S = Schema("s", (Field("timestamp", "int64"), Field("a", "int64"), Field("b", "float64"),
                 Field("c", "int32"), Field("d", "int64")))
STATEFUL_LABELS = ("ω", "σ_having", "⋈ per window", "⋈ α max")


def _stateful(node) -> list[str]:
    """Labels of the stateful operators of a plan, top-down (what push-up must not move)."""
    out = [] if isinstance(node, Filter | Project | RelationJoin | Source) else [node.label()]
    for c in node.children:
        out += _stateful(c)
    return out


@pytest.mark.parametrize("name", queries.NAMES)
def test_push_up_never_moves_a_stateful_operator(name):
    q = queries.get(name)
    p = push_up(q.node)
    assert _stateful(p.plan) == _stateful(q.node)
    assert all(not m.startswith(STATEFUL_LABELS) for m in p.moved)
    assert p.columns[0] == "timestamp" and set(p.columns) <= set(p.source.names)
    assert p.plan.source().schema == p.schema


def test_selection_over_a_derived_attribute_moves_rewritten_over_the_source():
    q = (Query.stream(S).select("b", x=Col("a") * 2).where(Col("x") > 10)
         .window(1).aggregate(sum("b")))
    p = push_up(q.node)
    assert repr(p.predicate) == repr(Col("a") * 2 > 10)
    assert p.columns == ("timestamp", "a", "b")  # c, d pruned
    assert "σ" not in p.plan.explain()  # the filter ran before the p-stream


def test_a_having_filter_stays_above_the_window_and_keeps_its_inputs():
    q = (Query.stream(S).window(1).group_by("c")
         .aggregate(count().alias("n"), max("d")).having(Col("n") > 1))
    p = push_up(q.node)
    assert p.predicate is None and p.columns == ("timestamp", "c", "d")
    assert "σ_having" in p.plan.explain()


def test_two_branches_keep_what_either_needs_and_each_still_filters():
    base = Query.stream(S)
    left = base.where(Col("a") > 5).window(1).aggregate(count().alias("n"))
    right = base.where(Col("c") < 3).window(1).aggregate(count().alias("m"))
    p = push_up(left.join_windows(right).node)
    assert repr(p.predicate).startswith("(") and " or " in repr(p.predicate)
    assert p.plan.explain().count("σ[") == 2


def test_the_generated_filter_keeps_what_numpy_keeps(tmp_path):
    """Push-up's predicate as a branch-free generated kernel (the engine's path) keeps the
    rows numpy's mask keeps - on every query's predicate at selectivities from none to all,
    and on conjunctions and disjunctions."""
    rng = np.random.default_rng(7)
    n = 10_000
    cols = (np.arange(n, dtype=np.int64), rng.integers(-5, 20, n), rng.normal(size=n),
            rng.integers(0, 4, n).astype(np.int32), rng.integers(0, 2, n))
    batch = Batch(S, cols, 0)
    for where in (Col("a") > 5, (Col("a") > 5) & (Col("c") < 3), (Col("b") < 0) | (Col("d") == 1),
                  Col("a") > 100, Col("a") > -100):
        p = push_up(Query.stream(S).where(where).window(1).aggregate(count()).node)
        fast, slow = Reducer(p, tmp_path)(batch), Reducer(p)(batch)
        assert Reducer(p, tmp_path)._kernel is not None
        assert fast.schema == slow.schema and len(fast) == len(slow)
        for a, b in zip(fast.columns, slow.columns, strict=True):
            assert np.array_equal(a, b)
    for name in queries.NAMES:  # each paper query's own predicate compiles
        p = push_up(queries.get(name).node)
        if p.predicate is not None:
            assert Reducer(p, tmp_path)._kernel is not None, name


@pytest.mark.slow
@pytest.mark.parametrize("name", queries.NAMES)
def test_pushed_up_plan_gives_the_same_results(tiny, tmp_path, name):
    """Optimised plan on the reduced, compressed, persisted stream == the original plan."""
    ds = tiny[queries.workload_of(name)]
    q = queries.get(name)
    plain, reduced = CollectSink(), CollectSink()
    run_query(q, ds, sink=plain)
    r = run_persisted(q, ds, PersistConfig(tmp_path, push_up=True, compression="default"),
                      sink=reduced)
    assert r.summary.tuples == ds.rows  # throughput counts source tuples, not kept ones
    v = compare(reduced.to_pandas(), plain.to_pandas(), q.schema)
    assert v.ok and v.compared == len(plain.to_pandas()), v


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.parametrize("name,scheme", [("LRB1", "adaptive"), campaign("CM2", "default"),
                                         campaign("YSB", "adaptive")])
def test_kills_with_push_up_and_compression_stay_exactly_once(tiny, tmp_path, name, scheme):
    """Selections dropped tuples before the p-stream, so its offsets are not the source's:
    recovery replays the compressed reduced stream and the source continues after it.  With
    adaptive compression the codecs change every 0.3 s, so recovery reads segments of mixed
    codecs (and fallbacks)."""
    ds = tiny[queries.workload_of(name)]
    n = 120 * ds.rows
    c = Controller(campaign_config(
        name, ds.path, tmp_path, max_tuples=n, batch_rows=4000, rate=n / 8,
        push_up=True, compression=scheme, compression_interval=0.3,
        interval=0.2))
    # adaptive: each of two incarnations is killed once it has logged a codec swap of its own
    # (an event, not a guess of how fast processes start here), so recovery reads mixed codecs
    camp = (_kill_after_own_event(c, "codec", kills=2) if scheme == "adaptive"
            else c.run([2.5, 2.5]))
    assert camp.kills >= 1, camp
    assert camp.verdict.ok, camp.verdict
    if scheme == "adaptive":
        events = read_metrics(c.metrics_log)["event"]
        assert (events == "codec").sum() >= 2, "the codecs never changed: nothing mixed to read"


def _kill_after_own_event(c: Controller, event: str, kills: int):
    """Run ``c``'s campaign and kill each of its first ``kills`` incarnations once the metrics
    log holds an ``event`` after that incarnation's own ``start``; returns the campaign."""
    import threading

    out: dict = {}
    runner = threading.Thread(target=lambda: out.update(camp=c.run([])))
    runner.start()

    def since_last_start() -> int:
        if not c.metrics_log.is_file():
            return 0
        events = list(read_metrics(c.metrics_log).get("event", []))
        starts = [i for i, e in enumerate(events) if e == "start"]
        return 0 if not starts else events[starts[-1]:].count(event)

    try:
        for kill in range(kills):
            deadline = time.time() + 300
            while runner.is_alive() and not (c.campaign is not None and c.incarnation == kill + 1
                                             and since_last_start() > 0):
                assert time.time() < deadline, f"kill {kill}: no {event!r} event"
                time.sleep(0.02)
            if not runner.is_alive():
                break
            c.request_kill()
            while runner.is_alive() and c.campaign.kills == kill:
                time.sleep(0.01)
        runner.join(600)
    finally:
        if runner.is_alive():  # a failed wait: stop every process, verify nothing
            c.abort()
            runner.join(60)
    return out["camp"]


def test_explain_prints_both_plans_and_the_bytes(tiny):
    out = subprocess.run([sys.executable, "-m", "scabbard", "explain", "--query", "CM2",
                          "--data", str(tiny["cm"].path), "--sample", "20000"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    before, after = out.stdout.split("after push-up")
    assert "σ[(event_type == 'FAIL')]" in before.split("P-Stream")[0]  # above the p-stream
    assert "σ[(event_type == 'FAIL')]" in after.split("P-Stream")[1]  # now below it
    assert "no push-up, raw:" in out.stdout and "push-up, default:" in out.stdout


def test_bytes_per_tuple_are_the_bytes_stored_not_the_papers_padded_struct(tiny):
    """YSB's tuple is 68 bytes in the engine and on disk (raw); the paper's C struct pads it
    to 128, which is shown beside it, never counted as persisted or as MB/s."""
    from scabbard.engine.pushup import explain, footprint

    q = queries.get("YSB")
    text = explain(q, footprint(q, tiny["ysb"], rows=20_000))
    assert "no push-up, raw:                       68.00" in text
    assert "68 B/tuple (the paper's struct: 128 B)" in text
    r = run_query(q, tiny["ysb"], CollectSink())
    assert r.summary.mb_per_s == pytest.approx(r.summary.tuples_per_s * 68 / 1e6)


def test_a_plain_recover_takes_push_up_as_its_run_had_it(tiny, tmp_path):
    """Push-up comes from run.json like every other setting: a plain ``--recover`` of a run
    started with it continues with it; asking for it on a run without it is refused."""
    ds = tiny["cm"]
    base = [sys.executable, "-m", "scabbard", "run", "--query", "CM2", "--data", str(ds.path),
            "--checkpoint-interval", "0.5", "--max-tuples", str(2 * ds.rows), "--quiet"]
    with_it = base + ["--storage", str(tmp_path / "s"), "--output", str(tmp_path / "o")]
    first = subprocess.run(with_it + ["--push-up"], capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    again = subprocess.run(with_it + ["--recover"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    without = base + ["--storage", str(tmp_path / "s2"), "--output", str(tmp_path / "o2")]
    plain = subprocess.run(without, capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr
    wrong = subprocess.run(without + ["--recover", "--push-up"], capture_output=True, text=True,
                           timeout=300)
    assert wrong.returncode == 2 and "drop --push-up" in wrong.stderr, wrong.stderr
