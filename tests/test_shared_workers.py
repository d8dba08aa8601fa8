"""Several queries on one engine, sharing its workers (PipeFabric's inter-query parallelism,
``scabbard.engine.shared``): each query's results are what it gives alone."""

from __future__ import annotations

import threading

import pandas as pd
import pytest

from scabbard import queries
from scabbard.engine import CollectSink, EngineConfig, Replay, run_query
from scabbard.engine.execution import Execution
from scabbard.engine.shared import SharedWorkers, Together, run_together
from scabbard.engine.sources import ReplaySource

CFG = EngineConfig(workers=2, batch_rows=4000)


def alone(name: str, ds, n: int) -> pd.DataFrame:
    sink = CollectSink()
    run_query(queries.get(name), ds, sink=sink, replay=Replay(max_tuples=n), config=CFG)
    return sink.to_pandas()


def small(name: str, ds, n: int) -> Together:
    """The query over ``n`` tuples of ``ds`` in tasks of 4,000 (many tasks, interleaved)."""
    return Together(queries.get(name), ds, CollectSink(),
                    ReplaySource(ds, 4000, Replay(max_tuples=n)))


def test_queries_sharing_the_workers_give_their_results_alone(tiny):
    names = ("CM1", "CM2", "SG1", "YSB", "LRB1", "PF-MOD10", "NQ", "CM1")
    data = {"CM1": "cm", "CM2": "cm", "SG1": "sg", "YSB": "ysb", "LRB1": "lrb",
            "PF-MOD10": "sg", "NQ": "nexmark"}
    n = 60_000
    runs = [small(name, tiny[data[name]], n) for name in names]
    seen = set()
    original = Execution.work

    def work(self, item):  # which threads run the tasks
        seen.add(threading.current_thread().name)
        return original(self, item)

    Execution.work = work
    try:
        reports = run_together(runs, workers=2)
    finally:
        Execution.work = original
    assert seen == {"shared-worker-0", "shared-worker-1"}  # no run has workers of its own
    for name, r, report in zip(names, runs, reports, strict=True):
        assert report.query == name and report.summary.tuples == n
        got = r.sink.to_pandas()
        assert len(got), name
        pd.testing.assert_frame_equal(got, alone(name, tiny[data[name]], n), check_exact=False,
                                      rtol=1e-9, obj=name)


def test_a_failing_query_fails_the_call_after_the_others_end(tiny):
    class Broken(CollectSink):
        def write(self, batch):
            raise OSError("the sink's disk is full")

    good = small("CM1", tiny["cm"], 40_000)
    bad = Together(queries.get("SG1"), tiny["sg"], Broken(),
                   ReplaySource(tiny["sg"], 4000, replay=Replay(max_tuples=40_000)))
    with pytest.raises(OSError, match="disk is full"):
        run_together([good, bad], workers=2)
    pd.testing.assert_frame_equal(good.sink.to_pandas(), alone("CM1", tiny["cm"], 40_000),
                                  check_exact=False, rtol=1e-9)


def test_the_pool_refuses_no_workers_and_a_dataset_of_another_query(tiny):
    with pytest.raises(ValueError, match="workers must be >= 1"):
        SharedWorkers(0)
    with pytest.raises(ValueError, match="CM1 reads"):
        run_together([Together(queries.get("CM1"), tiny["sg"])], workers=1)


def test_fig7_summary_takes_medians_and_scales_against_one_query():
    from scabbard.experiments import interquery as iq

    runs = pd.DataFrame([{"way": way, "queries": n, "round": k,
                          "tuples_per_s": base * n ** 0.5 * 1e6 * (1 + k % 2 * 9),
                          "slowest": base * 1e6 / n ** 0.5, "fastest": base * 1e6}
                         for k in range(3) for way, base in (("separate", 100), ("shared", 200))
                         for n in (4, 1)])  # the fewest queries measured last
    t = iq.summary(runs).set_index(["way", "queries"])
    assert t.loc[("shared", 4), "total_Mtps"] == pytest.approx(400)  # the median of 1, 10, 1
    assert t.loc[("separate", 4), "scaling"] == pytest.approx(2.0)
    assert t.loc[("shared", 1), "spread_Mtps"] == pytest.approx(1800)
    assert t.loc[("separate", 4), "slowest_Mtps"] == pytest.approx(50)
    with pytest.raises(ValueError, match="at least 1"):
        iq.Settings(counts=(0, 2))
    with pytest.raises(Exception, match="Q9"):
        iq.Settings(query="Q9")
