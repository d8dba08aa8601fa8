"""Adaptive query compilation (the Grizzly seed): generic, instrumented and optimised
kernels, swapped while the query runs, with deoptimisation."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reference as ref
from scabbard import outputs, queries
from scabbard.engine import CollectSink, EngineConfig, Replay, run_query
from scabbard.engine.adaptive import AdaptivePolicy
from scabbard.engine.sources import ReplaySource
from scabbard.kernels.aggregate import (
    DENSE_MAX,
    MAX,
    MIN,
    SUM,
    dense_pane_aggregate,
    key_range,
    pane_aggregate,
)

# deterministic: every variant compiled on the task's thread, profiling after one task, and a
# swapped-in variant kept untried and not watched for its cost (both time tasks: see their
# own tests)
SYNC = AdaptivePolicy(warm_tasks=1, profile_tasks=2, reprofile=8, background=False,
                      trial_tasks=0, slowdown=0)


def _assert_dense(got, want, short: bool) -> None:
    """A dense aggregation's partials are the hash aggregation's, row for row, or (``short``:
    a range short of the keys) None - its guard failed."""
    if short:
        assert got is None
        return
    assert len(got) == len(want)
    for a, w in zip(got, want, strict=True):
        assert np.array_equal(a, w)


# -- the kernels -----------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 400), k=st.integers(1, 3), spans=st.lists(st.integers(1, 12), min_size=3,
                                                                  max_size=3),
       lo=st.integers(-50, 50), slide=st.sampled_from([1, 7, 100]), seed=st.integers(0, 99),
       outside=st.booleans())
def test_dense_aggregation_is_the_hash_aggregation_or_deoptimises(n, k, spans, lo, slide, seed,
                                                                  outside):
    """Inside its range the dense array gives the hash table's partials, row for row (group
    ids in order of first appearance); one key outside the range fails the guard (None), and
    the hash aggregation is what the engine then runs."""
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 500, n)).astype(np.int64)
    span = np.array(spans[:k], dtype=np.int64)
    keys = (lo + rng.integers(0, span, (n, k))).astype(np.int64)
    if outside:
        keys[rng.integers(0, n), rng.integers(0, k)] = lo + span[0] + 3 if k == 1 else lo - 1
    ivals = rng.integers(-9, 9, (n, 2)).astype(np.int64)
    fvals = rng.normal(0, 1, (n, 2))
    iops, fops = np.array([SUM, MIN]), np.array([MAX, SUM])
    want = pane_aggregate(ts, keys, ivals, fvals, iops, fops, slide, ordered=True)
    got = dense_pane_aggregate(ts, keys, ivals, fvals, iops, fops, slide, [lo] * k, span)
    _assert_dense(got, want, outside)


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(0, 300), k=st.integers(1, 3), seed=st.integers(0, 99))
def test_the_key_range_is_each_words_smallest_and_largest(rows, k, seed):
    """``key_range`` (every instrumented task's pass over its keys): numpy's min and max per
    word, on a slice of a larger buffer as the fronts' outputs are; no rows: lo > hi."""
    buf = np.random.default_rng(seed).integers(-(1 << 62), 1 << 62, (rows + 7, k))
    lo, hi = key_range(buf[:rows])
    if rows:
        assert list(lo) == list(buf[:rows].min(axis=0)) and list(hi) == list(buf[:rows].max(axis=0))
    else:
        assert (lo > hi).all()


def test_a_dense_range_beyond_its_limit_is_refused():
    keys = np.zeros((4, 2), dtype=np.int64)
    ts = np.arange(4, dtype=np.int64)
    with pytest.raises(ValueError, match="at most"):
        dense_pane_aggregate(ts, keys, np.zeros((4, 0), np.int64), np.zeros((4, 0)),
                             np.zeros(0, np.int64), np.zeros(0, np.int64), 1, [0, 0],
                             [DENSE_MAX, 2])
    lo, hi = key_range(np.array([[3, -1], [5, -7]], dtype=np.int64))
    assert list(lo) == [3, -7] and list(hi) == [5, -1]


def _two_filters():
    """A CM query with two filters in a row: the first passes most rows, the second few."""
    from scabbard.query import Query, col, count
    from scabbard.workloads.cm import SCHEMA

    return (Query.stream(SCHEMA, "cm").where(col("cpu") >= 0.0).where(col("event_type") == "FAIL")
            .select("job_id", "cpu").window(10, 1).group_by("job_id")
            .aggregate(count().alias("n")).named("CM-2F"))


def test_the_workers_of_an_engine_may_ask_for_the_same_new_kernel_at_once(tiny, tmp_path,
                                                                           monkeypatch):
    """Two workers reached the same uncompiled kernel together on a fresh machine, and one of
    them lost its source file to the other's rename (CI, stop 38): the kernel is made once."""
    import threading

    from scabbard.engine.runtime import Engine
    from scabbard.kernels import codegen

    spec = Engine(_two_filters(), tiny["cm"].tables).plan.branches[0].spec
    monkeypatch.setattr(codegen, "_LOADED", {})  # as a fresh process finds it
    start, got, errors = threading.Barrier(8), [], []

    def ask():
        start.wait()
        try:
            got.append(codegen.compile_front(spec, tmp_path))
        except Exception as e:  # noqa: BLE001 - the failure this test looks for
            errors.append(e)
    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(got) == 8 and len({id(k) for k in got}) == 1
    assert sorted(p.name for p in tmp_path.glob("front_*")) == [f"front_{spec.digest}.py"]


def test_instrumented_and_reordered_fronts_give_the_generic_rows(tiny, tmp_path):
    """The instrumented kernel counts each filter of a run on every row that reaches it; the
    reordered kernel (most selective first) keeps exactly the generic kernel's rows."""
    import dataclasses

    from scabbard.engine.runtime import Engine
    from scabbard.kernels.codegen import compile_front

    ds = tiny["cm"]
    e = Engine(_two_filters(), ds.tables)
    b = e.plan.branches[0]
    spec = b.spec
    assert spec.runs() == [[0, 1]]
    cols = {f.name: c for f, c in zip(ds.schema.fields, ds.stream.columns, strict=True)}
    inputs = [np.ascontiguousarray(cols[c]) for c in b.input_columns]
    ts = np.ascontiguousarray(cols["timestamp"])
    n = len(ts)

    def run(kernel, *extra):
        out = (np.empty(n, np.int64), np.empty((n, b.key_width), np.int64),
               np.empty((n, len(b.iops)), np.int64), np.empty((n, len(b.fops)), np.float64))
        m = kernel(n, ts, *inputs, *out, *extra)
        return [o[:m] for o in out]
    generic = run(b.kernel(tmp_path))
    counts = np.zeros(2 * len(spec.steps), dtype=np.int64)
    profiled = run(compile_front(dataclasses.replace(spec, profile=True), tmp_path), counts)
    swapped = run(compile_front(spec.reordered([1, 0]), tmp_path))
    for a, g, s in zip(generic, profiled, swapped, strict=True):
        assert np.array_equal(a, g) and np.array_equal(a, s)
    assert counts[0] == n  # every row reaches the run
    assert counts[1] == np.count_nonzero(cols["cpu"] >= 0.0)
    fail = int(np.count_nonzero(cols["event_type"] == 3))
    assert counts[3] == fail and 0 < fail < n // 2
    with pytest.raises(ValueError, match="permutation"):
        spec.reordered([0, 0])


# -- the engine --------------------------------------------------------------------------------------
def _run(q, ds, adaptive, source=None, metrics_log=None, batch_rows=997):
    sink = CollectSink()
    report = run_query(q, ds, sink=sink, source=source, watch=outputs.metrics_log(metrics_log),
                       config=EngineConfig(workers=2, batch_rows=batch_rows, adaptive=adaptive))
    cols = sink.columns()
    return ref.to_frame(q.schema, [cols[n] for n in q.schema.names]), report


@pytest.mark.parametrize("name", queries.NAMES)
def test_every_query_gives_the_same_results_with_adaptive_kernels(tiny, name):
    """Generic, then instrumented, then optimised tasks: the same windows as the generic
    kernels alone; the branches whose keys lie in a small range run optimised."""
    q, ds = queries.get(name), tiny[queries.workload_of(name)]
    want, _ = _run(q, ds, None)
    got, report = _run(q, ds, SYNC)
    ref.assert_same_results(got, want, q.schema)
    tasks = {b: sum(s[v] for v in ("generic", "instrumented", "optimised"))
             for b, s in report.kernels.items()}
    assert all(t > 5 for t in tasks.values()), tasks
    if name in ("CM1", "SG2", "LRB1", "YSB"):  # small key ranges (YSB: relation codes)
        st_ = report.kernels["window0"]
        assert st_["swaps"] >= 1, st_
        if name != "SG2":  # (a task of 997 SG rows sees a few houses: SG2's range grows)
            assert st_["optimised"] > st_["instrumented"], st_


def _kernel_events(q, ds, policy, source, tmp_path):
    """``q`` over ``source()`` with adaptive kernels (``policy``), its windows checked against
    a generic run over the same data: the report, the metrics log's kernel events and the
    windows."""
    want, _ = _run(q, ds, None, source())
    log = tmp_path / "metrics.jsonl"
    got, report = _run(q, ds, policy, source(), metrics_log=log)
    ref.assert_same_results(got, want, q.schema)
    events = [json.loads(line) for line in log.read_text().splitlines()]
    return report, [e for e in events if e["event"] == "kernel"], want


class KeyShift(ReplaySource):
    """The dataset replayed, a key column moved by ``by`` from the second copy on: the keys
    leave the range profiled on the first copy at a known task."""

    def __init__(self, dataset, column: str, by: int, **kw):
        super().__init__(dataset, **kw)
        self.at = [f.name for f in dataset.schema.fields].index(column)
        self.by = by

    def _batch(self, lo, hi, copy, offset):
        b = super()._batch(lo, hi, copy, offset)
        if copy < 1:
            return b
        cols = list(b.columns)
        cols[self.at] = cols[self.at] + self.by
        return type(b)(b.schema, tuple(cols), offset)


def _shifted_run(tiny, name: str, column: str, by: int, tmp_path, **policy):
    """``name`` over two copies of its data, ``column`` moved by ``by`` in the second, with
    adaptive kernels (compiled at once, no trial): its windows checked against a generic run
    over the same data; the report and the metrics log's kernel events."""
    q, ds = queries.get(name), tiny[queries.workload_of(name)]
    policy = AdaptivePolicy(**{"warm_tasks": 1, "profile_tasks": 2, "reprofile": 1000,
                               "slowdown": 0,
                               "background": False, "trial_tasks": 0, **policy})

    def source():
        return KeyShift(ds, column, by, batch_rows=997, replay=Replay(max_tuples=2 * ds.rows))
    return _kernel_events(q, ds, policy, source, tmp_path)[:2]


def test_keys_leaving_the_range_deoptimise_and_reoptimise(tiny, tmp_path):
    """CM1's categories move by 1,000 halfway: the optimised task fails its guard, is
    aggregated again generically (the same windows as a generic run over the same data), the
    branch profiles anew and swaps in a variant for the new range; every step is a kernel
    event of the metrics log."""
    report, kernel = _shifted_run(tiny, "CM1", "category", 1000, tmp_path, margin=0.0)
    st_ = report.kernels["window0"]
    assert st_["deopts"] >= 1 and st_["swaps"] >= 2, st_
    assert [e["action"] for e in kernel[:3]] == ["profile", "optimise", "swap"]
    # (a category the profile did not see may deoptimise earlier: the margin is 0 here)
    shift = next(i for i, e in enumerate(kernel)
                 if e["action"] == "deopt" and e["seen"]["hi"][0] >= 1000)
    again = [e for e in kernel[shift:] if e["action"] == "swap"]
    assert again
    dense = again[0]["plan"]["dense"]  # the new range: the moved categories, not the old
    assert 100 < dense["lo"][0] <= 1000 < dense["lo"][0] + dense["span"][0], dense


def test_background_compilation_swaps_while_the_generic_kernels_run(tiny):
    """The default policy: the optimised variant compiles on a thread of its own; the run
    goes on meanwhile and the results are the generic ones."""
    q, ds = queries.get("LRB1"), tiny["lrb"]
    want, _ = _run(q, ds, None, batch_rows=499)
    got, report = _run(q, ds, AdaptivePolicy(), batch_rows=499)
    ref.assert_same_results(got, want, q.schema)
    assert report.kernels["window0"]["instrumented"] >= 4


@pytest.mark.parametrize("optimised_is", ["slower", "faster"])
def test_the_trial_keeps_the_faster_variant(tiny, tmp_path, monkeypatch, optimised_is):
    """After a swap, optimised and generic tasks alternate and are timed; the faster stays.
    The timings are scaled here (x50 or /50 for the optimised tasks), so the verdict does not
    depend on this machine.  A rejected plan is not compiled again when the next profile asks
    for the same one; the results are the generic kernels' either way."""
    from scabbard.engine.adaptive import AdaptiveBranch

    timed = AdaptiveBranch._timed
    scale = 50.0 if optimised_is == "slower" else 1 / 50

    def scaled(self, kind, trial, ns, n):
        return timed(self, kind, trial, ns * scale if kind == "optimised" else ns, n)
    monkeypatch.setattr(AdaptiveBranch, "_timed", scaled)
    q, ds = queries.get("CM1"), tiny["cm"]
    policy = AdaptivePolicy(warm_tasks=1, profile_tasks=2, reprofile=4, trial_tasks=2,
                            background=False, slowdown=0)  # the trial alone

    def source():
        return ReplaySource(ds, batch_rows=997, replay=Replay(max_tuples=3 * ds.rows))
    report, kernel, _ = _kernel_events(q, ds, policy, source, tmp_path)
    actions = [e["action"] for e in kernel if e.get("branch") == "window0"]
    st_ = report.kernels["window0"]
    assert actions[:3] == ["profile", "optimise", "swap"], actions
    verdict = next(e for e in kernel if e["action"] in ("keep", "reject"))
    if optimised_is == "slower":
        assert verdict["action"] == "reject"
        assert verdict["optimised_ns_row"] > verdict["generic_ns_row"]
        assert st_["rejects"] >= 1 and st_["swaps"] == 1, st_  # not compiled again
        again = [e for e in kernel if e["action"] == "optimise" and "rejected" in e]
        assert again, actions  # the next profile asked for it and was refused
        assert st_["generic"] > 2 * st_["optimised"], st_
    else:
        assert verdict["action"] == "keep"
        assert st_["rejects"] == 0 and st_["optimised"] > st_["generic"], st_


def test_a_variant_that_grows_slower_is_taken_back_and_profiled_anew(tiny, tmp_path,
                                                                     monkeypatch):
    """The optimised variant watches its own cost per row: its first tasks set its measure;
    once its latest tasks' median is ``slowdown`` times that (the data changed under it and
    no guard failed), it is taken back (a ``slower`` event), the branch profiles anew and
    swaps a variant in again.  The times are set here (1 ns a row, then 10 from the 17th
    watched task on), so the verdict does not depend on this machine; results never change."""
    import threading

    from scabbard.engine.adaptive import AdaptiveBranch

    watch, seen, order = AdaptiveBranch.watch, [], threading.Lock()

    def timed(self, ns, n, variant):
        with order:  # the two workers' tasks watched in the order their times are set
            seen.append(ns)
            return watch(self, 10.0 if len(seen) > 16 else 1.0, n, variant)
    monkeypatch.setattr(AdaptiveBranch, "watch", timed)
    q, ds = queries.get("CM1"), tiny["cm"]
    policy = AdaptivePolicy(warm_tasks=1, profile_tasks=2, reprofile=1000, background=False,
                            trial_tasks=0, slowdown=1.5, watch_tasks=4)

    def source():
        return ReplaySource(ds, batch_rows=997, replay=Replay(max_tuples=2 * ds.rows))
    report, kernel, _ = _kernel_events(q, ds, policy, source, tmp_path)
    actions = [e["action"] for e in kernel]
    assert actions[:3] == ["profile", "optimise", "swap"], actions
    slower = [e for e in kernel if e["action"] == "slower"]
    assert slower and report.kernels["window0"]["slower"] == len(slower), actions
    first = slower[0]
    # the latest four: 1, 1, 10, 10 - a median of 5.5 > 1.5 x 1 (one 10: 1.0, not yet)
    assert first["kept_ns_row"] == 1.0 and first["recent_ns_row"] == 5.5, first
    # profiled anew (instrumented tasks, no event) and swapped in again; the new variant's
    # measure is 10 ns a row, which it keeps: taken back once
    after = actions[actions.index("slower") + 1:]
    assert after[:2] == ["optimise", "swap"], after
    assert len(slower) == 1, actions


def test_tasks_of_another_size_put_the_variant_on_trial_again(tiny, tmp_path):
    """A time per row holds for one size of task: an optimised variant kept by a trial on
    tasks of 1,000 rows goes on trial again when ``watch_tasks`` tasks in a row hold 2,500 (a
    ``retrial``; one - a replayed copy's short last task - is not measured), and one kept
    untried takes its measure anew (no ``slower`` from a size change)."""
    from scabbard.engine.adaptive import OPTIMISED, TRIAL, AdaptiveBranch, Plan
    from scabbard.engine.runtime import Engine

    b = Engine(queries.get("CM1"), tiny["cm"].tables).plan.branches[0]
    for trial_tasks, then in ((2, TRIAL), (0, OPTIMISED)):
        a = AdaptiveBranch(b, 0, tmp_path, AdaptivePolicy(trial_tasks=trial_tasks,
                                                          watch_tasks=2), None)
        events = []
        a.on_event = lambda kind, events=events, **f: events.append(f["action"])
        variant = (None, Plan(None, (0,), (10,)))
        a.variant, a.plan = variant, variant[1]
        a._enter(OPTIMISED)
        a.kept_ns, a.kept_n = (1.0, 1000) if trial_tasks else (None, 0)
        for _ in range(4):
            a.watch(1.0, 1000, variant)
        assert a.phase == OPTIMISED and a.kept_ns == 1.0 and not events
        a.watch(9.0, 2500, variant)  # one larger task (a copy's tail): not measured
        assert a.phase == OPTIMISED and not events and a.kept_ns == 1.0
        a.watch(1.0, 1000, variant)
        a.watch(9.0, 2500, variant)  # larger tasks, slower per row, two in a row
        a.watch(9.0, 2500, variant)
        assert a.phase == then and a.stats["slower"] == 0
        assert events == ["retrial"]
        if then == OPTIMISED:  # measured anew on the larger tasks
            for _ in range(2):
                a.watch(9.0, 2500, variant)
            assert a.kept_ns == 9.0 and a.stats["slower"] == 0


def test_a_policy_must_make_sense():
    with pytest.raises(ValueError, match="generic or instrumented"):
        AdaptivePolicy(force="optimised")
    with pytest.raises(ValueError, match="dense_max"):
        AdaptivePolicy(dense_max=DENSE_MAX + 1)
    with pytest.raises(ValueError, match="tasks"):
        AdaptivePolicy(trial_tasks=-1)
    with pytest.raises(ValueError, match="slowdown"):
        AdaptivePolicy(slowdown=0.9)


@pytest.mark.slow
@pytest.mark.crash
def test_kills_with_variant_swaps(tiny, tmp_path):
    """Real processes with adaptive kernels, SIGKILLed inside a checkpoint's write, in a
    recovery's replay and at random: each incarnation profiles and swaps anew (its compiled
    variants come from the on-disk cache), and the output is exactly the failure-free run's."""
    import random

    from scabbard.ft.controller import Controller, campaign_config

    ds = tiny["lrb"]
    n = 120 * ds.rows
    c = Controller(campaign_config(
        "LRB1", ds.path, tmp_path, max_tuples=n, batch_rows=4000, rate=n / 6,
        adaptive_kernels=True, metrics_interval=0.2, interval=0.2))
    rng = random.Random(20)
    camp = c.run([None, None, rng.uniform(1.2, 3.0)],
                 crash_at=["checkpoint_state:3", "recovery_replay"])
    assert camp.crashes == 2 and camp.kills >= 2, camp
    assert camp.verdict.ok, camp.verdict
    swaps = [json.loads(line) for line in c.metrics_log.read_text().splitlines()
             if '"kernel"' in line and '"swap"' in line]
    assert swaps, "no incarnation ran optimised kernels"


@pytest.mark.parametrize("name", ["CM1", "LRB1", "SG2"])
def test_the_fused_kernel_is_the_generic_fragment_or_fails_its_guard(tiny, tmp_path, name):
    """The optimised variant - front and dense aggregation in one generated loop - writes the
    generic kernels' pane partials row for row; a range one short of the keys seen fails its
    guard (None) instead of writing anything wrong."""
    from scabbard.engine.adaptive import Plan, run_fused
    from scabbard.kernels.codegen import DenseSpec, compile_front

    b, _, ts, inputs, want = _fragment_of(tiny, tmp_path, name)
    lo, hi = key_range(want[-1])  # the task's group keys: the keys seen
    for short, span in ((0, hi - lo + 1), (1, hi - lo)):
        if short and not np.any(hi > lo):
            continue
        plan = Plan(None, tuple(int(x) for x in lo), tuple(max(1, int(x)) for x in span))
        spec = DenseSpec(b.spec, tuple(int(x) for x in b.iops), tuple(int(x) for x in b.fops),
                         int(b.slide_ms), plan.lo, plan.span)
        got = run_fused(compile_front(spec, tmp_path), b, plan, len(ts), (ts, 0), inputs, ())
        _assert_dense(got, want, short)


def test_folded_constants_give_the_generic_rows_or_fail_their_guard(tiny, tmp_path):
    """LRB's highway is one value: folded into LRB1's front kernel, and into its fused dense
    kernel, as a literal - the generic rows and partials, row for row; a row with another
    highway fails the guard (-1 / None) instead of writing anything wrong."""
    from scabbard.engine.adaptive import Plan, column_ranges, run_fused
    from scabbard.engine.runtime import Engine
    from scabbard.kernels.codegen import DenseSpec, compile_front

    q, ds = queries.get("LRB1"), tiny["lrb"]
    b = Engine(q, ds.tables).plan.branches[0]
    cols = {f.name: c for f, c in zip(ds.schema.fields, ds.stream.columns, strict=True)}
    inputs = tuple(np.ascontiguousarray(cols[c]) for c in b.input_columns)
    ts = np.ascontiguousarray(cols["timestamp"])
    n = len(ts)
    ranges = dict(zip(b.spec.columns, column_ranges(inputs), strict=True))
    assert ranges["highway"][1:] == (0, 0) and ranges["speed"] is None  # a float column
    consts = (("highway", ranges["highway"][0], 0),)
    folded = b.spec.folded(consts)
    assert "c_highway[i]" not in "".join(folded.keys) and folded.consts == consts

    def front(kernel, data):
        out = (np.empty(n, np.int64), np.empty((n, b.key_width), np.int64),
               np.empty((n, len(b.iops)), np.int64), np.empty((n, len(b.fops)), np.float64))
        m = kernel(n, ts, *data, *out)
        return m, [o[:max(m, 0)] for o in out]
    m, want = front(b.kernel(tmp_path), inputs)
    got_m, got = front(compile_front(folded, tmp_path), inputs)
    assert got_m == m and all(np.array_equal(a, w) for a, w in zip(got, want, strict=True))
    lo, hi = key_range(want[1])
    plan = Plan(None, tuple(int(x) for x in lo), tuple(int(x) for x in hi - lo + 1), consts)
    dense = compile_front(DenseSpec(folded, tuple(int(x) for x in b.iops),
                                    tuple(int(x) for x in b.fops), int(b.slide_ms), plan.lo,
                                    plan.span), tmp_path)
    partials = pane_aggregate(*want, b.iops, b.fops, b.slide_ms, ordered=True)
    fused = run_fused(dense, b, plan, n, (ts, 0), inputs, ())
    assert all(np.array_equal(a, w) for a, w in zip(fused, partials, strict=True))
    moved = list(inputs)
    j = b.spec.columns.index("highway")
    moved[j] = moved[j].copy()
    moved[j][n // 2] = 1  # one row on another highway
    assert front(compile_front(folded, tmp_path), tuple(moved))[0] == -1
    assert run_fused(dense, b, plan, n, (ts, 0), tuple(moved), ()) is None
    with pytest.raises(ValueError, match="folded columns"):
        b.spec.folded((("lane", "int32", 0),))


def test_a_folded_constant_that_changes_deoptimises_and_folds_the_new_value(tiny, tmp_path):
    """LRB1's highway moves from 0 to 1 with the second copy of the data: the optimised task
    fails its guard and runs again generically (the windows of a generic run over the same
    data), the branch profiles anew and folds highway 1."""
    report, kernel = _shifted_run(tiny, "LRB1", "highway", 1, tmp_path)
    swaps = [e["plan"] for e in kernel if e["action"] == "swap"]
    assert swaps[0]["constants"] == {"highway": 0}, swaps
    deopt = next(e for e in kernel if e["action"] == "deopt")
    assert deopt["reason"] == "a folded constant changed", deopt
    assert deopt["columns"]["highway"][1] == 1, deopt
    assert any(p["constants"] == {"highway": 1} for p in swaps[1:]), swaps
    assert report.kernels["window0"]["deopts"] >= 1


def test_the_profile_puts_the_more_selective_filter_first(tmp_path):
    """Fig. 13's experiment: the instrumented kernel's counts pick the order with the filter
    that passes fewer rows first, on either side of the crossing."""
    from scabbard.experiments.grizzly import predicates

    t = predicates(selectivities=(0.05, 0.95), rows=1 << 16, reps=1, cache_dir=str(tmp_path),
                   log=lambda s: None)
    assert list(t["picked"]) == ["a first", "b first"]
    assert (t["adaptive"] > 0).all()


@pytest.mark.slow
@pytest.mark.crash
def test_a_kill_is_recovered_with_adaptive_kernels_beside_the_generic_ones(tiny, data_root,
                                                                           tmp_path):
    """`bench adaptive`'s recovery part: notebook 04's kill of LRB1, once with the generic
    kernels and once with --adaptive-kernels (real processes, SIGKILL): both exactly once,
    every phase of each restart measured, the table saved."""
    from scabbard.experiments import grizzly

    s = grizzly.Settings(queries=("LRB1",), rounds=1, scale="tiny", data_dir=str(data_root),
                         output_dir=str(tmp_path))
    runs = grizzly.recovery(s, log=lambda *_: None, rate=2e6, seconds=5.0, kill_at=2.0,
                            batch=20_000, interval=0.3)
    assert list(runs["variant"]) == ["generic", "adaptive"]
    assert runs["exactly_once"].all()
    for phase in ("process start", "code loading", "state load", "replay",
                  "kill -> recovered (replay done)"):
        assert (runs[phase] > 0).all(), (phase, runs)
    assert (tmp_path / "recovery.csv").is_file()
    assert not list(data_root.parent.glob("scabbard-grizzly-recovery-*"))


def test_a_generated_kernel_is_another_file_once_the_kernels_change(tmp_path, monkeypatch):
    """Numba's cache checks only a generated kernel's own file, not the kernels it calls nor
    the types it takes: an older package's cache index (a relation's key table a plain tuple)
    failed to load in a newer one and the reverse.  The source names the kernels it was
    generated against, so a change to any of them makes it another file."""
    import shutil

    from scabbard.engine.selection import make_selection
    from scabbard.kernels import codegen

    spec = make_selection(queries.get("PF-MOD2").node).spec
    before = spec.digest
    assert f"scabbard.kernels {codegen.kernels_digest()}" in spec.source()
    copy = tmp_path / "kernels"
    shutil.copytree(codegen._KERNELS, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(codegen, "_KERNELS", copy)
    codegen.kernels_digest.cache_clear()
    try:
        assert spec.digest == before  # the same files: the same kernel
        (copy / "hashtable.py").write_text((copy / "hashtable.py").read_text() + "# changed\n")
        codegen.kernels_digest.cache_clear()
        assert spec.digest != before
    finally:
        monkeypatch.undo()
        codegen.kernels_digest.cache_clear()
    assert spec.digest == before


def _fragment_of(tiny, tmp_path, name: str, shift: int = 0):
    """``name``'s branch on its whole tiny dataset: the engine's branch, its relation
    arguments, timestamps and inputs, and the generic fragment's pane partials (event times
    shifted by ``shift``, as a replayed copy's)."""
    from scabbard.engine.runtime import Engine

    q, ds = queries.get(name), tiny[queries.workload_of(name)]
    e = Engine(q, ds.tables)
    b, rel_args = e.plan.branches[0], e._relation_args[0]
    cols = {f.name: c for f, c in zip(ds.schema.fields, ds.stream.columns, strict=True)}
    inputs = tuple(np.ascontiguousarray(cols[c]) for c in b.input_columns)
    ts = np.ascontiguousarray(cols["timestamp"])
    n = len(ts)
    out = (np.empty(n, np.int64), np.empty((n, b.key_width), np.int64),
           np.empty((n, len(b.iops)), np.int64), np.empty((n, len(b.fops)), np.float64))
    m = b.kernel(tmp_path)(n, ts, *inputs, *rel_args, *out)
    want = pane_aggregate(*(o[:m] for o in out), b.iops, b.fops, b.slide_ms, ordered=True,
                          shift=shift)
    return b, rel_args, ts, inputs, want


SHIFT = 3_600_000 + 4_321  # a replayed copy's event times: the data's plus this


def test_ysb_groups_by_the_code_of_the_joined_campaign(tiny, tmp_path):
    """YSB's keys are uuids (no dense range), but each is the campaign of the ad's relation
    row: the campaigns get codes in the order of the relation's rows (campaign c owns ads
    10c..10c+9, so its code is c), and the fused kernel indexed by the code writes the generic
    fragment's pane partials row for row (on a replayed copy: its event times shifted); a code
    range one short fails its guard."""
    from scabbard.engine.adaptive import Plan, RelationCodes, fused_args, run_fused
    from scabbard.kernels.codegen import DenseSpec, compile_front
    from scabbard.workloads.ysb import ADS_PER_CAMPAIGN

    b, rel_args, ts, inputs, want = _fragment_of(tiny, tmp_path, "YSB", SHIFT)
    codes = RelationCodes.of_branch(b.spec, rel_args)
    campaigns = tiny["ysb"].table("ad_campaign").rows // ADS_PER_CAMPAIGN
    assert codes is not None and len(codes) == campaigns
    assert np.array_equal(codes.codes, np.arange(campaigns * ADS_PER_CAMPAIGN) // ADS_PER_CAMPAIGN)
    assert codes.range_of(want[-1]) == (0, campaigns - 1)
    for short in (0, 1):
        plan = Plan(None, (short,), (campaigns - short,), coded=codes.relation)
        spec = DenseSpec(b.spec, tuple(int(x) for x in b.iops), tuple(int(x) for x in b.fops),
                         int(b.slide_ms), plan.lo, plan.span, plan.coded)
        got = run_fused(compile_front(spec, tmp_path), b, plan, len(ts), (ts, SHIFT), inputs,
                        fused_args(plan, rel_args, codes))
        _assert_dense(got, want, short)


def test_keys_with_no_relation_behind_them_get_no_codes(tiny):
    """CM1's keys are a column of the stream: no relation codes (its dense range is the
    keys' own)."""
    from scabbard.engine.adaptive import RelationCodes
    from scabbard.engine.runtime import Engine

    e = Engine(queries.get("CM1"), tiny["cm"].tables)
    assert RelationCodes.of_branch(e.plan.branches[0].spec, e._relation_args[0]) is None


def test_ten_times_more_campaigns_deoptimise_and_reoptimise_ysb(tiny, tmp_path):
    """Grizzly's Fig. 12 on YSB: the first copy's events see 10 of the campaigns, the second
    all of them. The variant indexed by the 10 campaigns' codes fails its guard at the first
    new campaign, the task is aggregated again generically (the windows of a generic run over
    the same events), and the branch profiles anew and swaps in a variant for all the codes."""
    from scabbard.experiments.grizzly import MoreCampaigns

    q, ds = queries.get("YSB"), tiny["ysb"]
    policy = AdaptivePolicy(warm_tasks=1, profile_tasks=2, reprofile=1000, background=False,
                            trial_tasks=0, margin=0.0, slowdown=0)

    def source():
        return MoreCampaigns(ds, 10, from_copy=1, batch_rows=997,
                             replay=Replay(max_tuples=2 * ds.rows))
    report, kernel, want = _kernel_events(q, ds, policy, source, tmp_path)
    assert want["campaign_id"].nunique() == tiny["ysb"].table("ad_campaign").rows // 10
    swaps = [e["plan"]["dense"] for e in kernel if e["action"] == "swap"]
    assert swaps and swaps[0]["by_relation_row"] == 0, swaps
    campaigns = tiny["ysb"].table("ad_campaign").rows // 10
    first = swaps[0]["lo"][0] + swaps[0]["span"][0]
    assert first <= max(1, campaigns // 10), swaps[0]  # the ten campaigns' codes (0..9 of 100)
    assert report.kernels["window0"]["deopts"] >= 1
    assert any(e["action"] == "deopt" for e in kernel)
    assert swaps[-1]["lo"][0] + swaps[-1]["span"][0] > first, swaps  # the new codes


def test_the_filter_order_follows_selectivities_that_change(tmp_path):
    """Grizzly's Fig. 13 on the engine: filter a passes 5 % of the rows, then 95 %, then 5 %
    again (b the rest). The query's order (a first) is the profile's at first, so nothing is
    optimised; once a passes most rows the periodic profile puts b first; when a is selective
    again, the query's order comes back. The windows are the generic kernels' throughout."""
    from scabbard.engine import CollectSink, Engine
    from scabbard.experiments.grizzly import Selectivities, two_filters

    def run(adaptive, log=None):
        src = Selectivities((0.05, 0.95, 0.05), phase_rows=1 << 16, rows=1 << 15,
                            batch_rows=1 << 12)
        # one worker: tasks profiled in order (two interleave the phases' last and first
        # tasks in one profile, and its verdict on the boundary with them)
        e = Engine(two_filters("a"), {}, EngineConfig(workers=1, batch_rows=1 << 12,
                                                      adaptive=adaptive))
        sink = CollectSink()
        e.run(src, sink, e.metrics(outputs.metrics_log(log)))
        return sink.columns()

    want = run(None)
    log = tmp_path / "metrics.jsonl"
    got = run(AdaptivePolicy(warm_tasks=1, profile_tasks=2, reprofile=4, background=False,
                             trial_tasks=0, slowdown=0), log)
    for c in want:
        assert np.array_equal(got[c], want[c]), c
    assert want["rows"].sum() < 0.2 * 3 * (1 << 16)  # one of the two filters is selective
    kernel = [e for e in map(json.loads, log.read_text().splitlines()) if e["event"] == "kernel"]
    swaps = [(e["task"], e["plan"]["filter_order"]) for e in kernel if e["action"] == "swap"]
    phase = 1 << 4  # tasks per phase
    assert swaps and swaps[0][1] == [1, 0] and phase <= swaps[0][0] < 2 * phase, swaps
    back = [t for t, order in swaps if order is None]
    assert back and 2 * phase <= back[0] < 3 * phase, swaps


def test_fig13_over_time_runs_every_order_over_the_same_phases(tmp_path):
    """``reacting``: the adaptive run and each fixed order over the same phases (by rows),
    each run's samples and phase starts, the adaptive run's kernel events, and the figure."""
    from scabbard.experiments.grizzly import ORDERS, plot_reacting, reacting

    table, events, changed = reacting((0.05, 0.95), phase_rows=1 << 17, rows=1 << 15,
                                      batch_rows=1 << 12, output_dir=tmp_path,
                                      log=lambda *_: None)
    assert set(changed) == set(ORDERS) and {"t", "tuples_per_s", "order"} <= set(table)
    assert all(len(v) == 2 and v[0] <= v[1] for v in changed.values()), changed
    assert len(events) and events["action"].iloc[0] == "profile"
    plot_reacting(table, events, changed, output_dir=tmp_path)
    assert (tmp_path / "reacting.png").is_file() and (tmp_path / "reacting.csv").is_file()
    with pytest.raises(ValueError, match="unknown order"):
        reacting((0.5,), 1 << 12, orders=("c first",))


def test_a_stage_lasts_its_seconds_whatever_its_tasks(tiny):
    """``stage_seconds``: the generic stage lasts at least that long - a run shorter than it
    never profiles, however many tasks it ran (and with none, it profiles after its warm
    tasks)."""
    q, ds = queries.get("CM1"), tiny["cm"]
    src = ReplaySource(ds, batch_rows=997, replay=Replay(max_tuples=ds.rows))
    _, report = _run(q, ds, AdaptivePolicy(stage_seconds=1e6, background=False), src)
    st_ = report.kernels["window0"]
    assert st_["generic"] > 20 and st_["instrumented"] == st_["optimised"] == 0, st_
    src = ReplaySource(ds, batch_rows=997, replay=Replay(max_tuples=ds.rows))
    _, report = _run(q, ds, AdaptivePolicy(stage_seconds=0, background=False), src)
    assert report.kernels["window0"]["instrumented"] > 0
    with pytest.raises(ValueError, match="stage_seconds"):
        AdaptivePolicy(stage_seconds=-1)


# -- the sampled profile ---------------------------------------------------------------------------
def test_a_large_task_is_profiled_on_spread_slices_and_a_small_one_whole():
    p = AdaptivePolicy(sample=0.125, sample_slices=16, sample_min_rows=1000)
    assert p.slices(1000) == [(0, 1000)]
    assert AdaptivePolicy(sample=1.0).slices(1 << 22) == [(0, 1 << 22)]
    n = 1_000_003
    s = p.slices(n)
    assert len(s) == 16 and s[0][0] == 0 and s[-1][1] == n
    assert all(0 <= a < z <= n for a, z in s)
    assert all(z <= a2 for (_, z), (a2, _) in zip(s, s[1:], strict=False))  # in order, apart
    assert sum(z - a for a, z in s) == pytest.approx(n / 8, rel=0.01)
    with pytest.raises(ValueError):
        AdaptivePolicy(sample=0)


@pytest.mark.parametrize("distinct", [1, 10, 1000, 100_000])
def test_the_sample_estimates_the_distinct_keys_and_the_heaviest_one(distinct):
    """Uniform keys over ``distinct`` values, an eighth of 800 k rows sampled: the estimate
    within a factor of two; one key given half the rows is seen holding about half."""
    from scabbard.engine.profile import distinct_keys

    rng = np.random.default_rng(distinct)
    rows = 800_000
    keys = rng.integers(0, distinct, rows).reshape(-1, 1)
    est, top = distinct_keys(keys[::8], rows)
    assert distinct / 2 <= est <= 2 * distinct, (distinct, est)
    assert top == pytest.approx(1 / distinct, rel=0.5) if distinct <= 10 else top < 0.01
    heavy = np.where(rng.random(rows) < 0.5, 7, keys[:, 0]).reshape(-1, 1)
    share = 0.5 + (0.5 / distinct if distinct > 7 else 0)  # key 7 also drawn uniformly, or not
    assert distinct_keys(heavy[::8], rows)[1] == pytest.approx(share, abs=0.02)
    two_words = np.column_stack([keys[:, 0] % 2, keys[:, 0]])  # a uuid-like key of 2 words
    assert distinct_keys(two_words[::8], rows)[0] == pytest.approx(est)


@pytest.mark.parametrize("name", ["CM1", "YSB"])
def test_a_sampled_profile_gives_the_generic_windows_and_says_what_it_saw(tiny, name, tmp_path):
    """Every task sampled (a quarter of its rows, in four slices): the windows are the generic
    kernels', a variant is still swapped in, and the profile in the ``optimise`` event counts
    fewer rows sampled than it saw, with its distinct keys."""
    q, ds = queries.get(name), tiny[queries.workload_of(name)]
    policy = dataclasses.replace(SYNC, sample=0.25, sample_slices=4, sample_min_rows=0)
    report, kernel, _ = _kernel_events(
        q, ds, policy, lambda: ReplaySource(ds, batch_rows=4093), tmp_path)
    assert report.kernels["window0"]["swaps"] >= 1
    profile = next(e["profile"] for e in kernel if e["action"] == "optimise")
    assert 0 < profile["sampled"] < profile["rows"] or profile["rows"] == 0
    assert profile["distinct_keys"] >= 1 and 0 < profile["top_key_share"] <= 1
