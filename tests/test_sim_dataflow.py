"""The partitioned dataflow in the simulator (scabbard/sim/dataflow.py): on hand-made costs
each figure follows from them - the busiest partition, the dispatcher's routing or the merge
binds - and its costs measured on the real dataflow."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scabbard.sim import Hardware, simulate
from scabbard.sim.config import DataflowCosts, SimConfig
from tests.test_simulated import calibration


def even(most: int) -> list[list[float]]:
    return [[1.0 / p] * p for p in range(1, most + 1)]


def one_key(most: int) -> list[list[float]]:
    return [[1.0] + [0.0] * (p - 1) for p in range(1, most + 1)]


def flow_cal(shares, route_ns=1.0, partitions_ns=100.0, merge_ns=1.0):
    cal = calibration(queries=("SG2",))
    cal.queries["SG2"] = replace(cal.costs("SG2"), dataflow=DataflowCosts(
        route_ns, partitions_ns, merge_ns, shares))
    return cal


def rate(cal, cores: int, parts: int) -> float:
    r = simulate(cal, SimConfig("SG2", workers=cores, duration=2.0, dataflow_parts=parts),
                 Hardware(cores=cores, disk_write_mb_s=1000.0))
    return r.steady_tuples_per_s


def test_even_keys_scale_with_the_partitions_until_the_routing_binds():
    """100 ns of partition work a tuple: P partitions on P cores take P x 10 M tuples/s
    (a core each, the dispatcher's 1 ns beside); at 16 the dispatcher's 10 ns of routing
    (100 M tuples/s) binds, not the partitions (160 M)."""
    cal = flow_cal(even(16))
    assert rate(cal, 1, 1) == pytest.approx(1e7, rel=0.05)
    assert rate(cal, 4, 4) == pytest.approx(4e7, rel=0.05)
    bound = flow_cal(even(16), route_ns=10.0)
    assert rate(bound, 16, 16) == pytest.approx(1e8, rel=0.05)


def test_one_key_leaves_every_partition_but_one_idle():
    cal = flow_cal(one_key(16))
    assert rate(cal, 16, 16) == pytest.approx(rate(cal, 1, 1), rel=0.05)


def test_the_merge_binds_when_it_is_the_slowest():
    cal = flow_cal(even(16), merge_ns=20.0)  # 50 M tuples/s on its one thread
    assert rate(cal, 16, 16) == pytest.approx(5e7, rel=0.05)


def test_a_dataflow_without_costs_or_beyond_the_measured_shares_is_refused():
    with pytest.raises(ValueError, match="calibration of SG2 has no dataflow costs"):
        rate(calibration(queries=("SG2",)), 2, 2)
    with pytest.raises(ValueError, match="shares up to 4 partitions, not 8"):
        rate(flow_cal(even(4)), 8, 8)
    with pytest.raises(ValueError, match="a share a partition"):
        DataflowCosts(1.0, 1.0, 1.0, [[1.0], [1.0]])


def test_the_simulated_cores_figure_draws_the_dataflow_beside_the_engine(tmp_path):
    from scabbard.experiments import partitioned as exp
    from scabbard.sim import save

    t = exp.simulated(save(flow_cal(one_key(16)), tmp_path / "cal.json"), ["SG2"],
                      cores=(1, 16), seconds=2.0)
    got = t.set_index(["assembly", "cores"])["tuples_per_s"]
    assert set(got.index) == {("serial", 1), ("serial", 16), ("dataflow", 1), ("dataflow", 16)}
    assert got[("dataflow", 16)] < 1.1 * got[("dataflow", 1)]  # one key: one partition works
    assert got[("serial", 16)] > 4 * got[("dataflow", 16)]  # the engine splits a key's tuples
    exp.plot_simulated(t, output_dir=str(tmp_path))
    assert (tmp_path / "partitioned_simulated.png").is_file()


def test_the_dataflow_costs_are_measured_on_the_real_dataflow(tiny, data_root):
    from scabbard.sim.dataflow import measure_dataflow

    got = measure_dataflow("SG2", "tiny", data_root, seconds=0.5, most=4)
    assert got["route_ns"] > 0 and got["partitions_ns"] > 0 and got["merge_ns"] > 0
    assert [len(s) for s in got["shares"]] == [1, 2, 3, 4]
    assert all(sum(s) == pytest.approx(1.0) for s in got["shares"])
    DataflowCosts(**got)
    assert measure_dataflow("YSB", "tiny", data_root, seconds=0.5) is None  # a join's key


def test_a_recovered_dataflow_pays_the_restart_warm_up():
    """A recovered life's first task pays what the warm-up did not load, on a partition as
    on a worker: the recovery takes that much longer."""
    def recovery_s(warmup: float) -> float:
        cal = flow_cal(even(2))
        cal.queries["SG2"] = replace(cal.costs("SG2"), restart_warmup_s=warmup)
        cfg = SimConfig("SG2", workers=2, dataflow_parts=2, persist=True,
                        checkpoint_interval=0.5, duration=3.0, fail_at=1.5)
        return simulate(cal, cfg, Hardware(cores=2, disk_write_mb_s=1000.0)).recovery[
            "recovery_s"]

    assert recovery_s(0.5) - recovery_s(0.0) == pytest.approx(0.5, abs=0.05)


def test_the_dataflow_is_refused_with_assembly_partitions_or_adaptive_kernels():
    for other in ({"assembly_parts": 2}, {"adaptive_kernels": True}):
        with pytest.raises(ValueError, match="generic kernels and no assembly partitions"):
            SimConfig("SG2", workers=2, dataflow_parts=2, **other)


def test_a_checked_key_stores_arrays_are_not_held_once_it_is_gone():
    """The key store's wrappers remember the arrays they checked (scabbard.kernels._check.
    Checked) weakly: a closed store's index is freed, and new arrays are checked again."""
    import gc
    import weakref

    import numpy as np

    from scabbard.kernels import _check as check

    seen = check.Checked()
    a, b = np.zeros(4), np.zeros(4)
    seen.passed(a, b)
    assert seen.seen(a, b) and not seen.seen(b, a)
    gone = weakref.ref(a)
    del a
    gc.collect()
    assert gone() is None  # not kept alive by the check
    assert not seen.seen(np.zeros(4), b)
    seen.passed(b, None)
    assert seen.seen(b, None) and not seen.seen(b, np.zeros(1))
    c = np.zeros(2)
    seen.passed(b, c)
    del c
    gc.collect()
    assert not seen.seen(b, None)  # a freed array is not the None a call gives
