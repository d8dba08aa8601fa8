"""The POG simulator on cases checkable by hand (issue 8), its files, its CLI and its errors.

Costs are given, not measured, so every expected figure follows from them: a disk-bound
pipeline runs at bandwidth / bytes per tuple, an IOPS-bound one at IOPS x batch size, a
CPU-bound one N times faster on N cores until the serial assembler binds (1 / assembly
cost), and recovery takes restart + state load + replay.  The slow tests calibrate on
real data with the real engine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import replace

import pytest

from scabbard.cli.sim import add_parser
from scabbard.ft.config import PersistConfig
from scabbard.sim import (
    PAPER_SSD,
    Calibration,
    Hardware,
    PersistCosts,
    QueryCosts,
    SimConfig,
    SystemCosts,
    load,
    save,
    simulate,
)

FAST_DISK = 1e9  # MB/s: never the bottleneck


def calibration(fragment_ns=100.0, assembly_ns=0.0, source_ns=0.0, batch=10_000, row_bytes=64,
                stored=64.0, state_bytes=0.0, state_load_s=0.0, code_load_s=0.0,
                process_start_s=0.0, cores=1, **system) -> Calibration:
    q = QueryCosts("CM1", row_bytes, batch, source_ns, 0.0, fragment_ns, 0.0, assembly_ns,
                   {"none": PersistCosts(stored, 0.0, 0.0, 0.0),
                    "default": PersistCosts(stored / 4, 10.0, 0.0, 0.0)},
                   state_bytes=state_bytes, state_load_s=state_load_s, code_load_s=code_load_s)
    sysc = SystemCosts(**{"process_start_s": process_start_s, "storage_open_s": 0.0,
                          "record_s": 0.0, "copy_ns_byte": 0.0, "io_cpu_ns_byte": 0.0,
                          "read_cpu_ns_byte": 0.0, **system})
    return Calibration(Hardware(cores=cores, disk_write_mb_s=FAST_DISK), sysc, {"CM1": q},
                       {"cpu": "hand-made"}, "2026-01-01T00:00:00+00:00")


def within(value: float, expected: float, rel: float) -> bool:
    return abs(value - expected) <= rel * expected


# -- the hand-checkable cases ------------------------------------------------------------
def test_disk_bound_throughput_is_bandwidth_over_bytes_per_tuple():
    cal = calibration(fragment_ns=10.0, stored=64.0)
    for mb_s in (32.0, 64.0, 200.0):
        hw = Hardware(cores=4, disk_write_mb_s=mb_s)
        r = simulate(cal, SimConfig("CM1", workers=4, persist=True, duration=20.0), hw)
        assert within(r.steady_tuples_per_s, mb_s * 1e6 / 64.0, 0.01), (mb_s, r.steady_tuples_per_s)
        assert r.utilisation["disk"] > 0.97
    # compression cuts the bytes per tuple: the same disk carries 4x the tuples
    hw = Hardware(cores=4, disk_write_mb_s=64.0)
    r = simulate(cal, SimConfig("CM1", workers=4, persist=True, compression="default",
                                duration=20.0), hw)
    assert within(r.steady_tuples_per_s, 64e6 / 16.0, 0.01)


def test_writes_into_fresh_pool_files_run_at_their_own_bandwidth():
    # input released as soon as its task is assembled: the pool's files are reused
    cal = calibration(fragment_ns=10.0, stored=64.0)
    hw = Hardware(cores=4, disk_write_mb_s=64.0, disk_fresh_write_mb_s=32.0)
    cfg = SimConfig("CM1", workers=4, persist=True, duration=20.0)
    assert within(simulate(cal, cfg, hw).steady_tuples_per_s, 1e6, 0.02)
    # input an open window needs for longer than the run: every byte goes to a new file
    cal = dataclasses.replace(cal, queries={"CM1": dataclasses.replace(
        cal.costs("CM1"), horizon_tuples=10**12)})
    assert within(simulate(cal, cfg, hw).steady_tuples_per_s, 0.5e6, 0.02)


def test_iops_bound_throughput_is_iops_times_batch_size():
    cal = calibration(fragment_ns=10.0)
    for batch, iops in ((1000, 200.0), (4000, 100.0)):
        hw = Hardware(cores=2, disk_write_mb_s=FAST_DISK, disk_iops=iops)
        # one write per p-unit (no group commit)
        cfg = SimConfig("CM1", workers=2, persist=True, batch_rows=batch, bulk_bytes=0,
                        duration=20.0)
        r = simulate(cal, cfg, hw)
        assert within(r.steady_tuples_per_s, iops * batch, 0.01), (batch, r.steady_tuples_per_s)
        # with group commit, on a device that counts an I/O per batch-sized block
        hw = dataclasses.replace(hw, io_bytes=batch * 64)
        r = simulate(cal, dataclasses.replace(cfg, bulk_bytes=None), hw)
        assert within(r.steady_tuples_per_s, iops * batch, 0.01), (batch, r.steady_tuples_per_s)


def test_faster_cores_divide_every_measured_cpu_cost():
    cal = calibration(fragment_ns=100.0)  # 10 M tuples/s per core at speed 1
    for speed in (0.5, 2.0):
        hw = Hardware(cores=2, disk_write_mb_s=FAST_DISK, core_speed=speed)
        r = simulate(cal, SimConfig("CM1", workers=2, duration=2.0), hw)
        assert within(r.steady_tuples_per_s, 2e7 * speed, 0.01), (speed, r.steady_tuples_per_s)


def test_cpu_bound_throughput_scales_with_cores():
    cal = calibration(fragment_ns=100.0)  # 10 M tuples/s per core
    for cores in (1, 2, 4, 8, 16):
        hw = Hardware(cores=cores, disk_write_mb_s=FAST_DISK)
        r = simulate(cal, SimConfig("CM1", workers=cores, duration=2.0), hw)
        assert within(r.steady_tuples_per_s, cores * 1e7, 0.01), (cores, r.steady_tuples_per_s)


def test_the_serial_assembler_caps_throughput_at_one_over_its_cost():
    cal = calibration(fragment_ns=100.0, assembly_ns=20.0)  # assembly: at most 50 M tuples/s
    for cores, expected in ((1, 1e9 / 120), (2, 2e9 / 120), (16, 1e9 / 20)):
        hw = Hardware(cores=cores, disk_write_mb_s=FAST_DISK)
        r = simulate(cal, SimConfig("CM1", workers=cores, duration=2.0), hw)
        assert within(r.steady_tuples_per_s, expected, 0.02), (cores, r.steady_tuples_per_s)
    assert r.utilisation["cores_assembly"] * 16 > 0.97  # one core, always assembling


def test_adaptive_kernels_take_the_saving_the_calibration_measured_off_each_fragment():
    """Fragments of 100 ns a tuple whose optimised variants saved 60: 25 M tuples/s a core
    with --adaptive-kernels against 10 M without; a query whose variant lost its trial (a
    saving of 0) runs as before, and a saving beyond the fragment never makes it free."""
    cal = calibration(fragment_ns=100.0)
    fast = replace(cal, queries={"CM1": replace(cal.costs("CM1"), adaptive_saving_ns_tuple=60.0)})
    for cores in (1, 4):
        hw = Hardware(cores=cores, disk_write_mb_s=FAST_DISK)
        cfg = SimConfig("CM1", workers=cores, duration=2.0, adaptive_kernels=True)
        assert within(simulate(fast, cfg, hw).steady_tuples_per_s, cores * 2.5e7, 0.01)
        assert within(simulate(cal, cfg, hw).steady_tuples_per_s, cores * 1e7, 0.01)
        assert within(simulate(fast, replace(cfg, adaptive_kernels=False), hw)
                      .steady_tuples_per_s, cores * 1e7, 0.01)
    c = replace(cal.costs("CM1"), adaptive_saving_ns_tuple=500.0)
    assert c.fragment_s(1000, adaptive=True) == 0.0 and c.fragment_s(1000) == 1e-4
    with pytest.raises(ValueError, match="adaptive_saving_ns_tuple"):
        replace(c, adaptive_saving_ns_tuple=-1.0)


def test_a_partitioned_assembly_runs_its_share_on_as_many_cores_as_partitions():
    """Assembly of 20 ns a tuple, 1.25x that partitioned (split and merge), 90 % of it run by
    the partitions at once: with P partitions the assembling core holds 2.5 + 22.5 / P ns a
    tuple of it; 16 cores of 100 ns fragments then reach the fragments' bound, not the
    assembler's 50 M tuples/s."""
    cal = calibration(fragment_ns=100.0, assembly_ns=20.0)
    cal.queries["CM1"] = replace(cal.costs("CM1"), partition_overhead=1.25, partition_share=0.9)
    hw = Hardware(cores=16, disk_write_mb_s=FAST_DISK)
    serial = simulate(cal, SimConfig("CM1", workers=16, duration=2.0), hw)
    assert within(serial.steady_tuples_per_s, 1e9 / 20, 0.02)
    parted = simulate(cal, SimConfig("CM1", workers=16, duration=2.0, assembly_parts=8), hw)
    # per tuple: 100 ns of fragment + 25 ns of assembly CPU over 16 cores, the assembling
    # core's 2.5 + 22.5 / 8 = 5.3 ns a tuple far from binding; within 10 % of that bound (the
    # assembling worker holds its core while its partitions wait for cores)
    bound = 16e9 / 125
    assert 0.9 * bound <= parted.steady_tuples_per_s <= bound, parted.steady_tuples_per_s
    assert parted.utilisation["cores_partition"] > 0
    one = simulate(cal, SimConfig("CM1", workers=1, duration=2.0, assembly_parts=4),
                   Hardware(cores=1, disk_write_mb_s=FAST_DISK))
    assert within(one.steady_tuples_per_s, 1e9 / 125, 0.02)  # one core: only the overhead
    # the fragments' split of their partials between the partitions costs them too
    cal.queries["CM1"] = replace(cal.costs("CM1"), partition_fragment_ns_tuple=25.0)
    one = simulate(cal, SimConfig("CM1", workers=1, duration=2.0, assembly_parts=4),
                   Hardware(cores=1, disk_write_mb_s=FAST_DISK))
    assert within(one.steady_tuples_per_s, 1e9 / 150, 0.02)


def test_parallel_ingress_splits_the_dispatchers_work_between_its_partitions():
    """The dispatcher's 10 ns a tuple caps one at 100 M tuples/s however many cores; N ingress
    partitions take 1/N of the batches each, and the 16 cores bind (110 ns of CPU a tuple in
    all); what stays on the dispatcher - 100 us a task of 10,000 tuples - caps it again at
    100 M tuples/s, and so does a turn (the appends in order) of 5 ns a tuple at 200 M."""
    cal = calibration(fragment_ns=100.0, source_ns=10.0)
    hw = Hardware(cores=16, disk_write_mb_s=FAST_DISK)
    one = simulate(cal, SimConfig("CM1", workers=16, duration=2.0), hw)
    assert within(one.steady_tuples_per_s, 1e8, 0.02), one.steady_tuples_per_s
    assert one.serial_stages()["dispatcher"] > 0.97
    for n in (2, 4):
        r = simulate(cal, SimConfig("CM1", workers=16, duration=2.0, ingress_partitions=n), hw)
        assert within(r.steady_tuples_per_s, 16e9 / 110, 0.03), (n, r.steady_tuples_per_s)
        stages = r.serial_stages()
        assert within(stages["ingress partition"], 10 / n * r.summary.tuples_per_s / 1e9, 0.05)
        assert stages["dispatcher"] == 0.0
    q = replace(cal.costs("CM1"), fragment_ns_tuple=10.0, dispatch_ns_task=100_000.0)
    cal.queries["CM1"] = q
    r = simulate(cal, SimConfig("CM1", workers=16, duration=2.0, ingress_partitions=4), hw)
    assert within(r.steady_tuples_per_s, 1e8, 0.02), r.steady_tuples_per_s
    assert r.serial_stages()["dispatcher"] > 0.97
    # persisted: one partition appends too (15 ns a tuple on the dispatcher); several take
    # turns at appending (5 ns a tuple, one batch at a time)
    persist = {"none": PersistCosts(64.0, 0.0, 0.0, 0.0, append_ns=5.0, turn_ns=5.0,
                                    dispatch_ns_task=0.0)}
    cal.queries["CM1"] = replace(q, fragment_ns_tuple=20.0, dispatch_ns_task=0.0, persist=persist)
    one = simulate(cal, SimConfig("CM1", workers=16, duration=2.0, persist=True), hw)
    assert within(one.steady_tuples_per_s, 1e9 / 15, 0.02), one.steady_tuples_per_s
    for n in (2, 8):
        r = simulate(cal, SimConfig("CM1", workers=16, duration=2.0, persist=True,
                                    ingress_partitions=n), hw)
        assert within(r.steady_tuples_per_s, 2e8, 0.03), (n, r.steady_tuples_per_s)
        assert r.serial_stages()["turn"] > 0.97


def test_other_processes_take_their_cores_from_the_engine():
    cal = calibration(fragment_ns=100.0)
    for busy, expected in ((0.0, 2e7), (0.5, 1.5e7), (1.0, 1e7)):
        hw = Hardware(cores=2, disk_write_mb_s=FAST_DISK, background_cores=busy)
        r = simulate(cal, SimConfig("CM1", workers=2, duration=3.0), hw)
        assert within(r.steady_tuples_per_s, expected, 0.02), (busy, r.steady_tuples_per_s)
        assert r.utilisation.get("cores_background", 0.0) * 2 == pytest.approx(busy, abs=0.02)
    # one worker cannot use more than a core anyway: a busy second core costs it nothing
    hw = Hardware(cores=2, disk_write_mb_s=FAST_DISK, background_cores=1.0)
    r = simulate(cal, SimConfig("CM1", workers=1, duration=3.0), hw)
    assert within(r.steady_tuples_per_s, 1e7, 0.02)


@pytest.mark.parametrize("ingress", [1, 3])
def test_recovery_time_is_restart_then_code_and_state_loading_at_once_then_replay(ingress):
    # 1 core at 100 ns/tuple, input at half that (5 M/s), checkpoints every second, 20 MB of
    # state read at 200 MB/s (+ 50 ms to rebuild it), the stored input read back at 10 GB/s;
    # the source read by the dispatcher or by three ingress partitions
    cal = calibration(fragment_ns=100.0, state_bytes=20e6, state_load_s=0.05,
                      code_load_s=0.3, process_start_s=0.2)
    hw = Hardware(cores=1, disk_write_mb_s=10_000.0, disk_read_mb_s=10_000.0)
    cfg = SimConfig("CM1", workers=1, persist=True, checkpoint_interval=1.0, rate=5e6,
                    duration=6.0, fail_at=3.5, ingress_partitions=ingress)
    r = simulate(cal, cfg, hw)
    rec = r.recovery
    assert rec["failed_at"] == pytest.approx(3.5)
    assert rec["restart_init_s"] == pytest.approx(0.2 + 0.3)
    assert rec["state_load_s"] == pytest.approx(20e6 / 10_000e6 + 0.05)
    # the checkpoint taken at ~3 s holds the input up to ~15 M; the rest stored at the failure
    # (~17.5 M) is replayed at the engine's 10 M tuples/s
    assert rec["replay_from"] == pytest.approx(15e6, abs=2 * 10_000)
    assert rec["replayed_tuples"] == pytest.approx(2.5e6, abs=2 * 10_000)
    replay = rec["replayed_tuples"] * 100e-9
    assert rec["replay_s"] == pytest.approx(replay, rel=0.02)
    # the code loads on a thread while the state loads: the longer of the two counts
    assert rec["recovery_s"] == pytest.approx(0.2 + max(0.3, rec["state_load_s"])
                                              + rec["replay_s"])
    slow = simulate(dataclasses.replace(cal, queries={"CM1": dataclasses.replace(
        cal.costs("CM1"), state_load_s=0.6)}), cfg, hw).recovery
    assert slow["state_load_s"] == pytest.approx(20e6 / 10_000e6 + 0.6)
    assert slow["recovery_s"] == pytest.approx(0.2 + slow["state_load_s"] + slow["replay_s"])
    # afterwards the backlog is worked off: every input tuple ends up processed
    assert r.summary.tuples >= 30e6
    # catching up after the failure, above the rate (the samples after it, not the last three:
    # how soon the backlog is gone depends on the recovery's length)
    assert r.timeline.loc[r.timeline["t"] > 3.5, "tuples_per_s"].max() > 5e6


def test_a_recovered_process_pays_its_warm_up_once():
    base = calibration(fragment_ns=100.0, state_bytes=20e6)
    cal = dataclasses.replace(base, queries={"CM1": dataclasses.replace(
        base.costs("CM1"), restart_warmup_s=0.25)})
    hw = Hardware(cores=1, disk_write_mb_s=10_000.0)
    cfg = SimConfig("CM1", workers=1, persist=True, checkpoint_interval=1.0, rate=5e6,
                    duration=6.0, fail_at=3.5)
    cold, warm = simulate(cal, cfg, hw).recovery, simulate(base, cfg, hw).recovery
    assert cold["replayed_tuples"] == warm["replayed_tuples"]
    assert cold["replay_s"] == pytest.approx(warm["replay_s"] + 0.25, rel=0.01)


def test_recovery_without_persisted_input_asks_the_source_again():
    cal = calibration(fragment_ns=100.0, state_bytes=1e6)
    hw = Hardware(cores=1, disk_write_mb_s=10_000.0)
    cfg = SimConfig("CM1", workers=1, checkpoint_interval=1.0, rate=5e6, duration=6.0,
                    fail_at=3.5)
    rec = simulate(cal, cfg, hw).recovery
    assert rec["replayed_tuples"] == pytest.approx(2.5e6, abs=2 * 10_000)
    assert rec["replay_s"] == pytest.approx(rec["replayed_tuples"] * 100e-9, rel=0.02)


def test_checkpoints_every_interval_and_their_duration():
    # the state's copy, encode and write are the checkpoint's time: 10 MB at 100 MB/s + 5 ms
    cal = calibration(fragment_ns=10.0, state_bytes=10e6, record_s=0.005)
    hw = Hardware(cores=2, disk_write_mb_s=100.0)
    r = simulate(cal, SimConfig("CM1", workers=2, checkpoint_interval=1.0, duration=5.5), hw)
    ck = r.checkpoints
    assert list(ck["id"]) == [1, 2, 3, 4, 5]
    assert ck["started"].diff().dropna().tolist() == pytest.approx([1.0] * 4, abs=0.01)
    assert ck["duration_ms"].tolist() == pytest.approx([105.0] * 5, rel=0.01)
    assert r.written_bytes == pytest.approx(5 * 10e6)


def test_network_ingest_bounds_throughput():
    cal = calibration(fragment_ns=10.0, row_bytes=100)
    hw = Hardware(cores=8, disk_write_mb_s=FAST_DISK, network_mb_s=500.0)
    r = simulate(cal, SimConfig("CM1", workers=8, duration=5.0), hw)
    assert within(r.steady_tuples_per_s, 500e6 / 100, 0.01)


def test_results_have_the_engines_shape():
    cal = calibration(fragment_ns=100.0)
    r = simulate(cal, SimConfig("CM1", workers=1, duration=2.0, rate=1e6))
    assert r.hardware == cal.hardware  # the calibrated machine by default
    assert set(r.summary.latency_ms) == {"p5", "p25", "p50", "p75", "p95"}
    assert r.summary.tuples == pytest.approx(2e6, rel=0.01)
    assert list(r.timeline.columns[:4]) == ["t", "tuples", "tuples_per_s", "mb_per_s"]
    assert r.timeline["t"].iloc[0] == pytest.approx(0.5)
    middle = r.timeline["tuples_per_s"].iloc[1:-1].tolist()
    assert len(middle) >= 2 and middle == pytest.approx([1e6] * len(middle), rel=0.01)
    # at the input rate: a task waits for its batch (half of it, on average) and is processed
    assert r.summary.latency_ms["p50"] == pytest.approx(5 + 1, rel=0.05)
    assert json.dumps(r.as_dict(), default=str)


def test_sixty_seconds_of_sixteen_cores_run_to_the_end():
    # how long it takes is printed by `scabbard sim speed` (make sim), not asserted here
    cal = calibration(fragment_ns=20.0, assembly_ns=0.1, source_ns=1.5, batch=262_144,
                      state_bytes=20e6)
    cfg = SimConfig("CM1", workers=16, persist=True, compression="default",
                    checkpoint_interval=1.0, duration=60.0)
    r = simulate(cal, cfg, dataclasses.replace(PAPER_SSD, disk_write_mb_s=20_000.0))
    assert r.summary.seconds >= 60.0
    assert r.summary.tasks > 100_000  # CPU-bound at ~500 M tuples/s: a real load of events
    assert len(r.checkpoints) >= 55  # one a second


def test_cli_speed_prints_the_wall_time_per_query(tmp_path, capsys):
    path = save(calibration(batch=262_144), tmp_path / "cal.json")
    assert _sim_cli(["sim", "speed", "--calibration", str(path), "--seconds", "2"]) == 0
    out = capsys.readouterr().out
    assert "CM1" in out and "wall" in out and "slowest" in out


# -- files, CLI, errors --------------------------------------------------------------------------------
def test_calibration_file_round_trips(tmp_path):
    cal = calibration(fragment_ns=12.5, assembly_ns=0.25, state_bytes=3e6)
    path = save(cal, tmp_path / "cal" / "calibration.json")
    back = load(path)
    assert back == cal
    doc = json.loads(path.read_text())
    assert doc["machine"] == {"cpu": "hand-made"} and doc["created"].startswith("2026")
    doc["format"] = 0
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="calibrate again"):
        load(path)
    with pytest.raises(FileNotFoundError, match="scabbard sim calibrate"):
        load(tmp_path / "missing.json")


@pytest.mark.parametrize("make, message", [
    (lambda: Hardware(cores=0, disk_write_mb_s=100.0), "cores must be an integer >= 1"),
    (lambda: Hardware(cores=2, disk_write_mb_s=-1.0), "disk_write_mb_s must be a positive"),
    (lambda: Hardware(cores=2, disk_write_mb_s=100.0, disk_iops=0), "disk_iops must be"),
    (lambda: Hardware(cores=2, disk_write_mb_s=float("nan")), "disk_write_mb_s must be"),
    (lambda: SimConfig("Q99", workers=1), "unknown query 'Q99'"),
    (lambda: SimConfig("CM1", workers=0), "workers must be an integer >= 1"),
    (lambda: SimConfig("CM1", workers=1, compression="zip"), "compression must be one of"),
    (lambda: SimConfig("CM1", workers=1, compression="default"), "set persist=True"),
    (lambda: SimConfig("CM1", workers=1, fail_at=1.0), "needs a fault-tolerant run"),
    (lambda: SimConfig("CM1", workers=1, checkpoint_interval=1.0, fail_at=20.0),
     "must come before the end"),
    (lambda: SimConfig("CM1", workers=1, duration=-2.0), "duration must be a positive"),
    (lambda: SimConfig("CM1", workers=1, ingress_partitions=0),
     "ingress_partitions must be an integer >= 1"),
    (lambda: PersistCosts(64.0, 0.0, 0.0, 0.0, turn_ns=-1.0), "turn_ns must be >= 0"),
])
def test_bad_input_raises_a_clear_value_error(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_a_query_the_calibration_lacks_is_a_clear_error():
    with pytest.raises(ValueError, match=r"no costs for query 'LRB1'.*calibrate --queries LRB1"):
        simulate(calibration(), SimConfig("LRB1", workers=1))


def _sim_cli(argv):
    parser = argparse.ArgumentParser(prog="scabbard")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_run_prints_the_predicted_metrics(tmp_path, capsys):
    path = save(calibration(fragment_ns=50.0, state_bytes=1e6), tmp_path / "cal.json")
    code = _sim_cli(["sim", "run", "--query", "cm1", "--calibration", str(path), "--cores", "4",
                     "--disk-mb-s", "100", "--duration", "3", "--fail-at", "1.5"])
    out = capsys.readouterr().out
    assert code == 0
    assert "CM1 on 4 cores (4 workers), disk 100 MB/s" in out
    assert "M tuples/s" in out and "recovery" in out and "checkpoints" in out
    code = _sim_cli(["sim", "run", "--query", "CM1", "--calibration", str(path), "--preset",
                     "paper-rdma", "--no-persist", "--json", "--duration", "1"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["hardware"]["cores"] == 16 and doc["hardware"]["network_mb_s"] == 12_500.0
    assert doc["config"]["persist"] is False


@pytest.mark.parametrize("flags, message", [
    (["--cores", "0"], "--cores must be an integer >= 1"),
    (["--disk-mb-s", "-5"], "--disk-mb-s must be a positive number"),
    (["--query", "Q7"], "unknown query 'Q7'"),
    (["--duration", "0"], "--sim-seconds must be a positive number"),
    (["--ingress-partitions", "0"], "--ingress-partitions must be an integer >= 1"),
])
def test_cli_run_rejects_bad_flags(tmp_path, flags, message):
    from scabbard.cli import CLIError

    path = save(calibration(), tmp_path / "cal.json")
    with pytest.raises(CLIError, match=message):
        _sim_cli(["sim", "run", "--query", "CM1", "--calibration", str(path), *flags])


@pytest.mark.parametrize("argv, message", [
    (["calibrate", "--queries", "XX1"], "unknown query 'XX1'"),
    (["calibrate", "--seconds", "0"], "--duration must be positive"),
    (["validate", "--queries", "CM1", "--duration", "-1"], "--duration must be positive"),
    (["validate", "--queries", "CM1", "--retries", "-1"], "--retries must be >= 0"),
    (["validate", "--queries", "CM1", "--repeats", "0"], "--repeats must be >= 1"),
    (["validate", "--queries", "CM1"], "no calibration file"),
])
def test_cli_calibrate_and_validate_reject_bad_input_before_measuring(tmp_path, argv, message):
    from scabbard.cli import CLIError

    extra = ["--calibration", str(tmp_path / "none.json")] if argv[0] == "validate" else \
        ["--out", str(tmp_path / "cal.json")]
    with pytest.raises(CLIError, match=message):
        _sim_cli(["sim", *argv, *extra])


def test_cli_run_without_a_calibration_says_how_to_make_one(tmp_path):
    from scabbard.cli import CLIError

    with pytest.raises(CLIError, match="scabbard sim calibrate"):
        _sim_cli(["sim", "run", "--query", "CM1", "--calibration", str(tmp_path / "no.json")])


def test_cli_help_describes_every_subcommand(capsys):
    for sub in ("calibrate", "validate", "run"):
        with pytest.raises(SystemExit):
            _sim_cli(["sim", sub, "--help"])
        out = capsys.readouterr().out
        assert "usage: scabbard sim " + sub in out
    with pytest.raises(SystemExit):
        _sim_cli(["sim", "--help"])
    assert "discrete-event model" in capsys.readouterr().out


# -- with the real engine ------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.spark
def test_calibrate_on_real_data_then_simulate(tiny, data_root, tmp_path):
    from scabbard.sim.calibrate import calibrate
    from scabbard.sim.machine import Quiet

    cal = calibrate(["CM1"], scale="tiny", data_dir=data_root, seconds=0.4,
                    out=tmp_path / "cal.json", quiet=Quiet(timeout=5))
    assert load(tmp_path / "cal.json") == cal
    c = cal.costs("CM1")
    assert c.fragment_ns_tuple > 0 and c.batch_rows > 0 and c.row_bytes == 64
    assert c.persist["default"].stored_bytes_per_tuple < c.persist["none"].stored_bytes_per_tuple
    assert cal.hardware.disk_write_mb_s > 0 and cal.system.process_start_s > 0
    assert cal.machine["cores"] >= 1 and cal.created
    # CM1's adaptive kernels (a dense array for its few keys): both variants timed in one run
    k = c.measured["adaptive"]["kernels"]["window0"]
    assert k["generic_ns_row"] > 0 and k["swaps"] >= 1
    assert c.adaptive_saving_ns_tuple == (max(0.0, k["generic_ns_row"] - k["optimised_ns_row"])
                                          if k["kept"] else 0.0)
    r = simulate(cal, SimConfig("CM1", workers=1, duration=2.0))
    # same machine, same costs: the prediction is the engine's order of magnitude (the
    # validation table is where the accuracy is shown, on a quiet machine). The engine's
    # figure is its tuples per second of CPU, like the costs the simulator takes: a busy
    # machine stretches the run's wall time, not the CPU its threads spent
    engine = c.measured["tuples_per_cpu_s_1_worker"]
    assert engine / 3 < r.tuples_per_s < engine * 3


def test_scabbard_persists_with_the_lossless_push_up_scheme_that_stores_fewer_bytes():
    cal = calibration()
    c = cal.costs("CM1")
    assert c.best_scheme == "default"  # no push-up calibrated
    adaptive = PersistCosts(1.0, 12.0, 0.0, 0.0)
    for bytes_default, best in ((2.0, "push-up+adaptive"), (0.5, "push-up+default")):
        persist = {**c.persist, "push-up+default": PersistCosts(bytes_default, 10.0, 0.0, 0.0),
                   "push-up+adaptive": adaptive}
        assert replace(c, persist=persist).best_scheme == best


def test_the_adaptive_scheme_is_calibrated_with_its_picks_for_the_data(tiny, data_root):
    """YSB's ad ids are uuids of a thousand ads: the default scheme's generic byte codec
    against the dictionary the adaptive scheme's rules pick for them."""
    from scabbard.sim.calibrate import measure_persistence

    got = measure_persistence("YSB", "tiny", data_root, tasks=3,
                              schemes=("push-up+default", "push-up+adaptive"))
    default, adaptive = (got[s]["stored_bytes_per_tuple"] for s in
                         ("push-up+default", "push-up+adaptive"))
    assert 0 < adaptive < default / 2, got


@pytest.mark.spark
def test_the_probe_hears_every_timed_part_of_a_persisted_run(tiny, tmp_path):
    """The engine's timers (scabbard.timers) report every part while a Probe records, and
    nothing once it stopped: what calibration is measured with."""
    from scabbard import queries, timers
    from scabbard.engine import EngineConfig, NullSink, Replay
    from scabbard.ft.ingress import run_persisted
    from scabbard.sim.instrument import Probe

    ds = tiny["ysb"]  # 10 s tumbling windows over 30 s of data: a task of one copy is long
    probe = Probe()
    with probe.recording():  # one worker: it computes each boundary as its next task ends
        run_persisted(queries.get("YSB"), ds,
                      PersistConfig(tmp_path / "store", compression="default"), NullSink(),
                      EngineConfig(workers=1, batch_rows=ds.rows), Replay(max_tuples=3 * ds.rows))
    counted = {p: probe.cpu_s(p)[1] for p in timers.PARTS}
    n = 3 * ds.rows
    assert counted["fragment"] == counted["compress"] == counted["encode"] == n
    assert counted["assembly"] == n and counted["boundary"] == 2 * ds.rows
    assert n <= counted["source"] <= n + ds.rows  # and the batch peeked at first
    assert counted["dispatch"] == n and counted["ingress"] == counted["append"] == 0
    assert [c[2] for c in probe.calls["fragment"]] == [True] * 3
    assert counted["write"] >= n * 16 and sum(b for b, _ in probe.writes) == counted["write"]
    before = {p: len(c) for p, c in probe.calls.items()}
    run_persisted(queries.get("YSB"), ds, PersistConfig(tmp_path / "store2", compression="default"),
                  NullSink(), EngineConfig(workers=1, batch_rows=4096))
    assert {p: len(c) for p, c in probe.calls.items()} == before
    with (probe.recording(), pytest.raises(RuntimeError, match="one at a time"),
          timers.recording(Probe())):
        pass


@pytest.mark.spark
def test_the_probe_times_the_ingress_partitions_and_the_dispatcher_apart(tiny, tmp_path):
    """With ingress partitions their threads report each batch they cut (``ingress``) and
    append in turn (``append``), the dispatcher what it hands out (``dispatch``): what the
    model's partitions, turn and dispatcher are calibrated with."""
    from scabbard import queries
    from scabbard.sim.instrument import Probe, timed_config, timed_run

    ds = tiny["cm"]
    r = timed_run("CM1", ds, timed_config(1, 997, ingress=2), 0.5,
                  PersistConfig(tmp_path / "store", compression="default"))
    assert r["ingress_s"] > 0 and r["append_s"] > 0 and r["dispatch_task_s"] > 0
    probe = Probe()
    from scabbard.engine import EngineConfig, NullSink, Replay
    from scabbard.ft.ingress import run_persisted

    with probe.recording():
        run_persisted(queries.get("CM1"), ds,
                      PersistConfig(tmp_path / "again", compression="default"), NullSink(),
                      EngineConfig(workers=1, batch_rows=997, ingress_partitions=3),
                      Replay(max_tuples=2 * ds.rows))
    counted = {p: probe.cpu_s(p)[1] for p in probe.calls}
    n = 2 * ds.rows
    assert counted["ingress"] == counted["append"] == counted["dispatch"] == n
    assert n <= counted["source"] <= n + 997  # cut by the partitions (and the peek)


def test_notebook_15s_simulated_cores_read_the_source_as_the_engine_would():
    """Notebook 15 (b) predicts the engine as it runs by default: on 16 cores the source is
    read by 16 // INGRESS_WORKERS ingress partitions, not by the dispatcher alone."""
    from scabbard.engine.runtime import INGRESS_WORKERS
    from scabbard.experiments import partitioned
    from scabbard.experiments.simulated import default_calibration
    from scabbard.sim import load

    cal = load(default_calibration())
    got = partitioned.simulated(None, ["CM2"], cores=(16,), seconds=2.0)
    costs = cal.costs("CM2")

    def predicted(ingress: int) -> float:
        cfg = SimConfig("CM2", workers=16, persist=True, compression=costs.best_scheme,
                        checkpoint_interval=1.0, duration=2.0, ingress_partitions=ingress)
        r = simulate(cal, cfg, replace(PAPER_SSD, cores=16))
        return r.steady_tuples_per_s or r.summary.tuples_per_s
    assert INGRESS_WORKERS < 16
    assert got["tuples_per_s"].iloc[0] == pytest.approx(predicted(16 // INGRESS_WORKERS))
    assert got["tuples_per_s"].iloc[0] != pytest.approx(predicted(1))


def test_calibrate_writes_this_machines_file_and_a_calibration_from_elsewhere_warns(
        tmp_path, monkeypatch):
    """`sim calibrate` writes experiments/calibration.json, not the package's file (unless
    --replace-shipped), and the simulator then uses it; a calibration measured on another
    machine is used with a warning naming the difference."""
    import json
    import warnings

    from scabbard import paths
    from scabbard.sim.machine import describe, warn_if_elsewhere

    monkeypatch.setenv("SCABBARD_HOME", str(tmp_path))
    assert paths.calibration() == paths.shipped_calibration()  # none made here yet
    mine = paths.local_calibration()
    mine.parent.mkdir(parents=True)
    doc = json.loads(paths.shipped_calibration().read_text())
    mine.write_text(json.dumps(dict(doc, machine=describe())))
    assert paths.calibration() == mine
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_if_elsewhere(mine) == ""  # this machine: no word
    other = tmp_path / "other.json"
    other.write_text(json.dumps(dict(doc, machine=dict(describe(), cpu="Some Other CPU"))))
    with pytest.warns(UserWarning, match="measured on another machine .*cpu Some Other CPU"):
        warn_if_elsewhere(other)


# -- the commands' work (scabbard.sim.session) ---------------------------------------------------
def test_calibrate_into_keeps_the_queries_it_did_not_measure(tmp_path, monkeypatch):
    from scabbard.sim import calibrate, session

    old = calibration()
    old = replace(old, queries={"LRB1": replace(old.queries["CM1"], query="LRB1")})
    path = save(old, tmp_path / "cal.json")
    monkeypatch.setattr(calibrate, "calibrate", lambda *a, **kw: calibration(fragment_ns=7.0))
    cal = session.calibrate_into(path, ["CM1"], "tiny", str(tmp_path), 1.0, 1.0)
    assert set(cal.queries) == {"CM1", "LRB1"} and load(path) == cal
    assert cal.queries["CM1"] == calibration(fragment_ns=7.0).queries["CM1"]
    path.write_text('{"format": 0}')  # an old format: replaced, not merged
    assert set(session.calibrate_into(path, ["CM1"], "tiny", "", 1.0, 1.0).queries) == {"CM1"}


def test_simulate_query_defaults_to_the_cores_persisted_input_and_checkpoints(tmp_path):
    from scabbard.sim import session

    cal = calibration()
    hw = session.hardware("paper-ssd", cal, {"cores": 4})
    assert hw.cores == 4 and hw.disk_write_mb_s == PAPER_SSD.disk_write_mb_s
    assert session.hardware("this", cal, {}) == cal.hardware
    def strict(c):  # JSON has no NaN or Infinity
        raise AssertionError(f"{c} in the JSON")

    result = session.simulate_query(cal, None, "CM1", hw, {"duration": 2.0})
    doc = json.loads(session.describe(result, as_json=True), parse_constant=strict)
    assert doc["config"]["workers"] == 4 and doc["config"]["persist"] is True
    assert doc["config"]["checkpoint_interval"] == 1.0
    doc = json.loads(session.describe(session.simulate_query(cal, None, "CM1", hw, {
        "duration": 2.0, "checkpoint_interval": 0}), as_json=True), parse_constant=strict)
    assert doc["config"]["checkpoint_interval"] is None
    text = session.describe(result, timeline=True)
    assert text.startswith("CM1 on 4 cores") and "\n\n" in text and "tuples_per_s" in text
    with pytest.raises(ValueError, match="SimConfig.workers"):
        session.simulate_query(cal, None, "CM1", hw, {"workers": 0})
    assert session._finite({"a": float("nan"), "b": (float("-inf"), 1.0, "x")}) == {
        "a": None, "b": [None, 1.0, "x"]}


def test_the_validation_report_shows_the_table_the_summary_and_writes_the_csv(tmp_path):
    import pandas as pd

    from scabbard.experiments import validation

    rows = [validation._row("CM1", "1w", "tuples/s", 2e6, 2.1e6),
            validation._row("CM1", "2w", "tuples/s", 4e6, 3e6)]
    table = pd.DataFrame([{**r, "spread_pct": 1.0, "core_speed": 1.0} for r in rows])
    text = validation.report(table)
    assert text.startswith("\n") and "M tuples/s" in text and "written" not in text
    assert text.split("\n\n")[1].splitlines()[0].split() == [
        "metric", "rows", "median_abs_error_pct", "max_abs_error_pct", "within", "target_pct"]
    line = validation.save_csv(table, str(tmp_path / "out" / "v.csv"))
    assert line == f"written to {tmp_path / 'out' / 'v.csv'}"
    assert len(pd.read_csv(tmp_path / "out" / "v.csv")) == 2
