"""``scabbard sim calibrate``: the simulator's costs, measured on this machine with the real code.

Nothing here is a guess: each cost of :class:`~scabbard.sim.config.Calibration` is timed
on the engine's own functions, on the query's own data (docs/design.md).

Per query (:func:`calibrate_query`):

* inside real engine runs (:func:`measure_kernels`, :mod:`scabbard.sim.instrument`; the
  dataset replayed, NullSink), the CPU time (``time.thread_time``) of every call of the
  engine's timed parts (:mod:`scabbard.timers`): the dispatcher's thread (the source's
  batch, the p-units appended, tasks handed out), the fragment function and the boundary
  windows (parallel), the ordered assembly (serial), the codecs, the segment encoding and the
  writes, and what no part accounts for - at several batch sizes (a per-task and a per-tuple
  cost; *short* tasks apart), with two workers (what company costs a fragment), with the
  input persisted per compression scheme, and with two ingress partitions (their threads,
  their turns, what is left to the dispatcher);
* on batches replayed as the engine replays them (:func:`measure_persistence`): each
  scheme's bytes, and reading a segment back (verified, decompressed);
* a short fault-tolerant run (:func:`measure_fault_tolerance`): the state per checkpoint,
  the storage reopened and its stored input read back (the device's read bandwidth), then
  the run recovered for real by a new process (:func:`measure_recovery`): process start,
  code loading, state load and replay, as notebook 04's controller sees them.

Per machine (:func:`scabbard.sim.machine.measure_system`): the BlockManager's own bulk writes into fresh and
into recycled pool files (bandwidth and per-request latency), dd-like bandwidth
(:func:`scabbard.storage.diskbench.disk_bandwidth`, kept for reference), the latency of a
small O_DIRECT write, a checkpoint record's commit, memory copy speed.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from scabbard.sim.config import (
    Calibration,
    Hardware,
    PersistCosts,
    QueryCosts,
    SystemCosts,
    save,
)
from scabbard.sim.dataflow import measure_dataflow
from scabbard.sim.instrument import timed_config, timed_run
from scabbard.sim.machine import (
    QUIET,
    LoadMeter,
    Quiet,
    describe,
    measure_system,
    speed_probe,
    wait_quiet,
)
from scabbard.sim.persistence import engine_and_data as _engine_and_data
from scabbard.sim.persistence import measure_persistence

MiB = 1 << 20
# the fault-tolerant run's task size: as notebook 04's kill
# experiment and `scabbard sim validate` run theirs, so a recovery's replay is measured as
# it is then predicted
FT_BATCH = 262_144


# -- per query: kernels ---------------------------------------------------------------------------
def _shift_ns(ds, rows: int = 1 << 20) -> float:
    """ns a tuple to shift a replayed copy's timestamps (``ReplayBatch.columns``), the
    best of three passes over up to ``rows`` of the dataset's timestamp column."""
    ts = np.asarray(ds.column("timestamp"))[:rows]
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        np.add(ts, 1)
        best = min(best, time.perf_counter() - t)
    return best / max(1, len(ts)) * 1e9


def _fit(runs: list[dict], key: str) -> tuple[float, float]:
    """Per task and per tuple ns from runs at several batch sizes (``key``: seconds per
    tuple), least squares; all per tuple where no per-task share can be seen."""
    n = np.array([r["task_rows"] for r in runs])
    t = np.array([r[key] * r["task_rows"] for r in runs])  # seconds per task
    if len(runs) < 2 or np.ptp(n) <= 0:
        return 0.0, float(t.sum() / n.sum()) * 1e9
    per_tuple, per_task = np.polyfit(n, t, 1)
    if per_task < 0 or per_tuple < 0:  # noise: no per-task share to be seen
        return 0.0, float(t.sum() / n.sum()) * 1e9
    return float(per_task) * 1e9, float(per_tuple) * 1e9


def _partitioned(serial: dict, parted: dict | None) -> dict:
    """The partitioned assembly's costs against the serial one's (per tuple): its overhead
    and the share of it the partitions run at once, from a run with two partitions."""
    if parted is None or serial["assembly_s"] <= 0:
        return {"overhead": 1.0, "share": 0.0}
    each = parted["partition_s"]  # the second partition, on the pool thread
    total = parted["assembly_s"] + each
    if total <= 0:
        return {"overhead": 1.0, "share": 0.0}
    return {"overhead": total / serial["assembly_s"], "share": min(1.0, 2 * each / total),
            # the fragments split each task's partials by partition (on the workers)
            "fragment_ns_tuple": max(0.0, parted["parallel_s"] - serial["parallel_s"]) * 1e9,
            "assembly_ns_tuple": parted["assembly_s"] * 1e9,
            "partition_ns_tuple": each * 1e9}


def adaptive_saving(kernels: dict) -> float:
    """What adaptive kernels save per input tuple (ns), from a run's per-branch variant
    times: a branch whose optimised variant stayed (``kept``) saves the generic kernels'
    time per row less the optimised one's; a branch left generic saves nothing."""
    return sum(max(0.0, k["generic_ns_row"] - k["optimised_ns_row"])
               for k in kernels.values()
               if k.get("kept") and "generic_ns_row" in k and "optimised_ns_row" in k)


def measure_kernels(query: str, scale: str = "small", data_dir: str | Path = "data",
                    seconds: float = 2.0) -> dict:
    """Costs (ns) of ``query``'s tasks, timed inside real engine runs of ``seconds``
    (:func:`scabbard.sim.instrument.timed_run`): one worker at the default batch size, at
    twice it and at smaller sizes (the engine's smallest default, a quarter) - a per-task
    and a per-tuple cost over the sizes whose tasks are of the default's kind, per-tuple
    costs of *short* tasks (too few panes for windows of their own) where smaller ones are;
    two workers (this machine's cores: what company costs a fragment, and the engine's own
    throughput for reference); and one worker with the input persisted, per compression
    scheme (codec, segment encoding, write and the p-stream's bookkeeping, as the engine
    runs them)."""
    from scabbard.engine.assembly import partition_columns
    from scabbard.engine.runtime import MIN_BATCH
    from scabbard.engine.sources import ReplaySource
    from scabbard.ft.config import PersistConfig

    ds, engine = _engine_and_data(query, scale, data_dir)
    per_ms = ReplaySource(ds, 1).tuples_per_ms()
    rows = engine.batch_rows_for(per_ms)
    one = timed_config(1, rows)
    timed_run(query, ds, one, min(1.0, seconds))  # warm: pages of the dataset
    base = timed_run(query, ds, one, seconds)
    sizes = sorted({2 * rows, MIN_BATCH, max(1, rows // 4)} - {rows}, reverse=True)
    runs = [base] + [timed_run(query, ds, timed_config(1, n), seconds) for n in sizes]
    two = timed_run(query, ds, timed_config(2, rows), seconds)
    persisted = {}
    folder = Path(tempfile.mkdtemp(prefix="scabbard-calibrate-", dir=str(data_dir)))
    try:
        for scheme in ("none", "default"):
            # twice, the faster kept: one short run on a shared host can stall on the disk
            # or lose its core for a while (the least disturbed run is the engine's cost)
            tries = []
            for _ in range(2):
                tries.append(timed_run(query, ds, one, seconds,
                                       PersistConfig(folder / scheme, compression=scheme)))
                shutil.rmtree(folder / scheme, ignore_errors=True)
            persisted[scheme] = max(tries, key=lambda r: r["tuples_per_s"])
        pushed = timed_run(query, ds, one, seconds, PersistConfig(folder / "push-up", True))
        # parallel ingress, two partitions: the partitions' threads, the turn, the dispatcher
        two_in = timed_config(1, rows, ingress=2)
        ingress = {"none": timed_run(query, ds, two_in, seconds),
                   "default": timed_run(query, ds, two_in, seconds,
                                        PersistConfig(folder / "ingress", compression="default"))}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    # adaptive kernels: a first run compiles the optimised variants, the second
    # profiles, swaps and tries them - its variants' times per row; at least 32 tasks, the
    # phases before the optimised variant stays (warm, profile, trial) are 14
    compiled = timed_config(1, rows, adaptive=True)
    timed_run(query, ds, compiled, min(1.0, seconds))
    adaptive = timed_run(query, ds, compiled, seconds,
                         tuples=max(int(base["tuples_per_s"] * seconds), 32 * rows))
    # key-partitioned assembly, two partitions: the assembling thread runs the first and the
    # fixed part (split, merge, what cannot be partitioned), a pool thread the second
    parted = (timed_run(query, ds, timed_config(1, rows, "partitioned:2"), seconds)
              if any(partition_columns(b) is not None for b in engine.plan.branches) else None)
    kind = base["long"] > 0.5
    same = [r for r in runs if (r["long"] > 0.5) == kind and r["tasks"] >= 2]
    f_task, f_tuple = _fit(same, "parallel_s")
    a_task, a_tuple = _fit(same, "assembly_s")
    shared = two["parallel_s"] / base["parallel_s"] if base["parallel_s"] else 1.0
    out = {"row_bytes": ds.schema.row_bytes, "batch_rows": rows, "dataset_rows": ds.rows,
           # the dispatcher's thread, timed whole: the source's batch, tasks handed out
           "source_ns_tuple": base["dispatch_s"] * 1e9,
           # a replayed copy's timestamps shifted, per tuple: deferred in a run that only
           # computes (the fragment adds the shift), made by the thread that persists a batch
           "shift_ns_tuple": _shift_ns(ds),
           # the CPU of no timed part: the workers' and pools' own bookkeeping (parallel)
           "other_ns_tuple": base["other_s"] * 1e9,
           # two ingress partitions: a partition's thread per tuple (cut, handed on - the
           # turn included, when nothing is persisted), the dispatcher per task
           "ingress": {"ingress_ns_tuple": (ingress["none"]["ingress_s"]
                                            + ingress["none"]["append_s"]) * 1e9,
                       "dispatch_ns_task": ingress["none"]["dispatch_task_s"] * 1e9,
                       # persisted (the default codecs): the turn, and the dispatcher per task
                       "turn_ns": ingress["default"]["append_s"] * 1e9,
                       "persist_dispatch_ns_task": ingress["default"]["dispatch_task_s"] * 1e9,
                       "tuples_per_s": {k: v["tuples_per_s"] for k, v in ingress.items()}},
           "fragment_ns_task": f_task,
           "fragment_ns_tuple": f_tuple, "assembly_ns_task": a_task, "assembly_ns_tuple": a_tuple,
           # two workers on this machine's cores: what company costs a fragment (never
           # less than nothing: a faster run with company is noise)
           "fragment_shared": max(1.0, shared) if two["tasks"] >= 4 else 1.0,
           # input an open window may still need, in tuples (released beyond it: GC)
           "horizon_tuples": int(engine.horizon_ms * per_ms) + 1,
           "long_rows": 0, "short": None, "partitioned": _partitioned(base, parted),
           "adaptive": {"saving_ns_tuple": adaptive_saving(adaptive["kernels"]),
                        "kernels": adaptive["kernels"],
                        "tuples_per_s_1_worker": adaptive["tuples_per_s"]},
           # persistence push-up: the tasks' work per input tuple against the full input's
           "push_up_work": pushed["work_s"] / persisted["none"]["work_s"]
           if persisted["none"]["work_s"] and pushed["tuples"] else 1.0,
           "engine": {"tuples_per_s_1_worker": base["tuples_per_s"],
                      "tuples_per_cpu_s_1_worker": base["tuples_per_cpu_s"],
                      "tuples_per_s_2_workers": two["tuples_per_s"],
                      "fragment_ns_tuple_1_worker": base["parallel_s"] * 1e9,
                      "fragment_ns_tuple_2_workers": two["parallel_s"] * 1e9,
                      "assembly_ns_tuple_2_workers": two["assembly_s"] * 1e9,
                      "other_ns_tuple_1_worker": base["other_s"] * 1e9,
                      "sizes": {r["rows"]: {"fragment_ns_tuple": r["parallel_s"] * 1e9,
                                            "assembly_ns_tuple": r["assembly_s"] * 1e9,
                                            "long": r["long"]} for r in runs}},
           "persisted": {k: {"compress_ns": v["compress_s"] * 1e9,
                             "encode_ns": v["encode_s"] * 1e9,
                             # the dispatcher's thread beyond the unpersisted run's
                             "append_ns": max(0.0, v["dispatch_s"] - base["dispatch_s"]) * 1e9,
                             "other_ns": max(0.0, v["other_s"] - base["other_s"]) * 1e9,
                             "written_per_tuple": v["written_per_tuple"],
                             "write_cpu_ns_byte": v["write_s_byte"] * 1e9,
                             "writes": v["writes"],
                             "tuples_per_s_1_worker": v["tuples_per_s"]}
                         for k, v in persisted.items()}}
    short = [r for r in runs if kind and r["long"] < 0.5 and r["rows"] < rows]
    if short:  # smaller tasks are short: their costs are another regime
        n = sum(r["tuples"] for r in short)
        b = engine.plan.branches[0]
        out["long_rows"] = int(b.long_panes * b.slide_ms * per_ms) + 1
        out["short"] = {k: sum(r[k] * r["tuples"] for r in short) / n * 1e9 for k in
                        ("parallel_s", "assembly_s")}
        out["short"] = {"fragment_ns_tuple": out["short"]["parallel_s"],
                        "assembly_ns_tuple": out["short"]["assembly_s"]}
    return out


# -- per query: checkpoints, state load, restart ------------------------------------------------------
def _read_back(bm, stream: int, start: int, decode_ns: float, units: int = 6) -> dict:
    """Stored p-units read back one at a time, as recovery's replay reads them: the CPU
    per byte beyond decoding them (``decode_ns`` per tuple, measured in memory: what is
    left is the syscall and the fresh buffer's pages), and the device's read bandwidth
    (the wall time not spent on the CPU)."""
    cpu, device, nbytes, off = 0.0, 0.0, 0, start
    for _ in range(units):
        if off >= bm.durable_end(stream):
            break
        t, wall = time.thread_time(), time.perf_counter()
        batch, _ = bm.read_with_meta(stream, off)
        used = time.thread_time() - t
        device += max(0.0, time.perf_counter() - wall - used)
        cpu += used - len(batch) * decode_ns * 1e-9
        nbytes += batch.column_bytes
        off = batch.end
    return {"read_cpu_ns_byte": max(0.0, cpu / nbytes * 1e9) if nbytes else 0.0,
            "read_mb_s": nbytes / device / 1e6 if device > 0 else None}


def measure_fault_tolerance(query: str, scale: str = "small", data_dir: str | Path = "data",
                            seconds: float = 2.5, interval: float = 0.5,
                            read_mb_s: float | None = None, decode_ns: float = 0.0,
                            batch: int = FT_BATCH) -> dict:
    """A short fault-tolerant run (2 workers, the clocked exactly-once output the
    controller uses): state bytes per checkpoint, checkpoint time; the storage reopened,
    the newest checkpoint's state loaded and stored input read back, as recovery does;
    then the run recovered for real by a new process (:func:`measure_recovery`)."""
    from scabbard import queries
    from scabbard.engine import EngineConfig
    from scabbard.ft.ingress import INGRESS
    from scabbard.ft.recovery import run_fault_tolerant
    from scabbard.ft.sinks import ClockedSink
    from scabbard.ft.state import QueryState
    from scabbard.pog import POG
    from scabbard.pog.checkpoint import CheckpointStore
    from scabbard.storage import BlockManager

    ds, engine = _engine_and_data(query, scale, data_dir)
    folder = Path(tempfile.mkdtemp(prefix="scabbard-calibrate-", dir=str(data_dir)))
    try:
        r = run_fault_tolerant(queries.get(query), ds, folder / "storage",
                               ClockedSink(folder / "output"),
                               EngineConfig(workers=2, batch_rows=batch),
                               interval=interval, duration=seconds)
        ck = r.checkpoints
        if not ck:
            raise RuntimeError(f"{query}: no checkpoint completed in {seconds} s")
        t0 = time.perf_counter()
        with BlockManager(folder / "storage") as bm:
            pog = POG(bm)
            ingress = pog.pstream(INGRESS, engine.input_schema)
            state = QueryState(engine.plan, bm)
            rec = CheckpointStore(folder / "storage" / "checkpoints").records()[0]
            t1 = time.perf_counter()
            state.load_state(rec)
            t2 = time.perf_counter()
            replayed = sum(len(u) for u in ingress.load_stream(rec.input_end))
            t3 = time.perf_counter()
            read = _read_back(bm, ingress.stream_id, rec.input_end, decode_ns)
        disk_s = rec.bytes / (read_mb_s * 1e6) if read_mb_s else 0.0
        return {"state_bytes": float(np.median([c.bytes for c in ck])),
                "checkpoint_ms": float(np.median([c.duration_s for c in ck])) * 1e3,
                "checkpoints": len(ck), "ft_tuples_per_s": r.run.summary.tuples_per_s,
                "storage_open_s": t1 - t0, "state_load_in_process_s": t2 - t1,
                "state_disk_s": disk_s,
                "replay_read_tuples_per_s": replayed / max(1e-9, t3 - t2),
                "batch": batch,
                "recovery": measure_recovery(query, ds.path, folder, interval, batch=batch),
                **read}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def measure_recovery(query: str, data: Path, folder: Path, interval: float,
                     seconds: float = 1.0, batch: int | None = None) -> dict:
    """The fault-tolerant run in ``folder`` recovered as the controller recovers one: a new
    ``python -m scabbard run ... --recover`` process; its phases from its metrics log -
    process start, code loading, state load, and the replay of the input stored after the
    checkpoint (tuples and seconds)."""
    from scabbard.ft.config import RunConfig
    from scabbard.outputs import read_metrics

    log = folder / "recovery.jsonl"
    cfg = RunConfig.of(query, data=data, storage=folder / "storage", output=folder / "output",
                       interval=interval, sink="clocked", workers=2, duration=seconds,
                       metrics_log=log, batch_rows=batch, spawned_at=time.time())
    cmd = [sys.executable, "-m", "scabbard", "run", *cfg.argv(), "--recover", "--quiet"]
    subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300)
    m = read_metrics(log)
    at = dict(zip(m["phase"].dropna(), m.loc[m["phase"].notna(), "wall"], strict=True))
    resume = m[m["phase"] == "resume"].iloc[0]
    replayed = int(resume["replay_to"] - resume["replay_from"])
    return {"process_start_s": at["started"] - at["spawned"],
            "code_load_s": at["code_loaded"] - at["started"],
            "state_load_s": at["state_loaded"] - at.get("loading", at["code_loaded"]),
            "replayed_tuples": replayed,
            "replay_s": (at["replayed"] - max(at["state_loaded"], at["code_loaded"])
                         if "replayed" in at else 0.0)}


def _persist_costs(standalone: dict, in_run: dict | None,
                   like: dict | None = None, ingress: dict | None = None) -> PersistCosts:
    """The costs of persisting under one scheme: as the engine's threads spent them in a
    persisted run where there was one (codec, encoding, the dispatcher's bookkeeping, the
    bytes written), reading back as measured on its own.  A scheme without a run of its
    own (push-up) takes the dispatcher's bookkeeping of ``like``'s run: it is per p-unit.
    ``ingress``: the two-partition runs' (:func:`measure_kernels`), the turn's and the
    dispatcher's per p-unit work, for every scheme."""
    turn = {} if ingress is None else {"turn_ns": ingress["turn_ns"],
                                       "dispatch_ns_task": ingress["persist_dispatch_ns_task"]}
    if in_run is None or not in_run["written_per_tuple"]:
        ok = like is not None and like["written_per_tuple"]
        return PersistCosts(**standalone, append_ns=like["append_ns"] if ok else 0.0,
                            other_ns=like.get("other_ns", 0.0) if ok else 0.0, **turn)
    return PersistCosts(stored_bytes_per_tuple=in_run["written_per_tuple"],
                        compress_ns=in_run["compress_ns"], encode_ns=in_run["encode_ns"],
                        decode_ns=standalone["decode_ns"], append_ns=in_run["append_ns"],
                        other_ns=in_run.get("other_ns", 0.0), **turn)


def _restart_warmup(costs: QueryCosts, rec: dict, f: dict) -> float:
    """Seconds a recovered process's replay took beyond what its parts explain (s).

    The replay of a real recovery (:func:`measure_recovery`) against its parts on this
    machine's cores: reading back (disk, checksum, decoding, fresh buffers), the fragments
    (with company) and the serial assembly.  The rest is a new process's start-up cost -
    numba functions the warm-up did not load (the long-task path), a new heap faulting
    its pages in - charged once, to its first task.  Never negative."""
    n, batch = rec["replayed_tuples"], f.get("batch", costs.batch_rows)
    if n <= 0 or rec["replay_s"] <= 0:
        return 0.0
    cores = os.cpu_count() or 1
    none = costs.persist["none"]
    read_ns = none.decode_ns + none.stored_bytes_per_tuple * f["read_cpu_ns_byte"]
    cpu_ns = (costs.fragment_s(batch) * costs.fragment_shared + costs.assembly_s(batch)) \
        / batch * 1e9 + read_ns
    disk_ns = none.stored_bytes_per_tuple / (f["read_mb_s"] or math.inf) * 1e3
    per_tuple_ns = max(cpu_ns / min(cores, max(1, n // batch)), disk_ns,
                       costs.assembly_s(batch) / batch * 1e9)
    return max(0.0, rec["replay_s"] - n * per_tuple_ns * 1e-9)


def calibrate_query(query: str, scale: str = "small", data_dir: str | Path = "data",
                    tasks: int = 8, ft_seconds: float = 2.5, kernel_seconds: float = 2.0,
                    read_mb_s: float | None = None, log=print) -> tuple[QueryCosts, dict]:
    """Every cost of one query; the second value holds its process start and storage open."""
    t0 = time.perf_counter()
    k = measure_kernels(query, scale, data_dir, kernel_seconds)
    p = measure_persistence(query, scale, data_dir, tasks)
    f = measure_fault_tolerance(query, scale, data_dir, ft_seconds, read_mb_s=read_mb_s,
                                decode_ns=p["none"]["decode_ns"])
    flow = measure_dataflow(query, scale, data_dir, kernel_seconds)
    r = f["recovery"]
    measured = {"checkpoint_ms": f["checkpoint_ms"], "checkpoints": f["checkpoints"],
                "recovery": r,
                "persisted": {sch: {f: v for f, v in d.items() if f != "writes"}
                              for sch, d in k["persisted"].items()},
                "persist_standalone": p,
                "ft_tuples_per_s": f["ft_tuples_per_s"],
                "replay_read_tuples_per_s": f["replay_read_tuples_per_s"],
                "ingress_2_partitions": k["ingress"], "adaptive": k["adaptive"],
                **k["engine"]}
    short = k["short"] or {}
    costs = QueryCosts(
        query=query, row_bytes=k["row_bytes"], batch_rows=k["batch_rows"],
        dataset_rows=k["dataset_rows"],
        source_ns_tuple=k["source_ns_tuple"], shift_ns_tuple=k.get("shift_ns_tuple", 0.0),
        fragment_ns_task=k["fragment_ns_task"],
        fragment_ns_tuple=k["fragment_ns_tuple"], assembly_ns_task=k["assembly_ns_task"],
        assembly_ns_tuple=k["assembly_ns_tuple"],
        persist={s: replace(_persist_costs(v, k["persisted"].get(s), k["persisted"].get("default"),
                                           k["ingress"]),
                            work=k["push_up_work"] if s.startswith("push-up") else 1.0)
                 for s, v in p.items()},
        state_bytes=f["state_bytes"],
        # the real recovery's state load, but for the storage's opening and the disk's reads
        state_load_s=max(0.0, r["state_load_s"] - f["storage_open_s"] - f["state_disk_s"]),
        code_load_s=r["code_load_s"],
        fragment_shared=k["fragment_shared"], horizon_tuples=k["horizon_tuples"],
        long_rows=k["long_rows"], short_fragment_ns_tuple=short.get("fragment_ns_tuple"),
        short_assembly_ns_tuple=short.get("assembly_ns_tuple"),
        partition_overhead=k["partitioned"]["overhead"],
        partition_share=k["partitioned"]["share"],
        partition_fragment_ns_tuple=k["partitioned"].get("fragment_ns_tuple", 0.0),
        other_ns_tuple=k["other_ns_tuple"],
        ingress_ns_tuple=k["ingress"]["ingress_ns_tuple"],
        dispatch_ns_task=k["ingress"]["dispatch_ns_task"],
        adaptive_saving_ns_tuple=k["adaptive"]["saving_ns_tuple"],
        dataflow=flow, measured=measured)
    costs = replace(costs, restart_warmup_s=_restart_warmup(costs, r, f))
    log(f"{query:5} fragment {costs.fragment_ns_tuple:7.1f} ns/t (+{costs.fragment_ns_task / 1e3:7.1f}"
        f" us/task, x{costs.fragment_shared:.2f} shared)  assembly {costs.assembly_ns_tuple:6.2f} ns/t  source "
        f"{costs.source_ns_tuple:5.2f} ns/t  stored {p['none']['stored_bytes_per_tuple']:.1f} -> "
        f"{p.get('default', p['none'])['stored_bytes_per_tuple']:.1f} B/t  state "
        f"{f['state_bytes'] / 1e6:.2f} MB  ({time.perf_counter() - t0:.0f} s)")
    return costs, {"process_start_s": r["process_start_s"], "storage_open_s": f["storage_open_s"],
                   "read_cpu_ns_byte": f["read_cpu_ns_byte"], "read_mb_s": f["read_mb_s"],
                   "write_cpu_ns_byte": k["persisted"]["none"]["write_cpu_ns_byte"],
                   }


def _calibrate_query_in_child(kwargs: dict, log) -> tuple[QueryCosts, dict]:
    """:func:`calibrate_query` in a new process: each query starts from a clean heap (the
    big queries' runs leave gigabytes behind in one), as the engine's own runs do."""
    out = subprocess.run([sys.executable, "-m", "scabbard.sim.calibrate", json.dumps(kwargs)],
                         capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"calibrating {kwargs['query']} failed (exit {out.returncode}):\n"
                           + out.stderr[-3000:])
    lines = out.stdout.strip().splitlines()
    for line in lines[:-1]:
        log(line)
    doc = json.loads(lines[-1])
    return QueryCosts(**doc["costs"]), doc["extra"]


def calibrate(queries: Sequence[str] | None = None, scale: str = "small",
              data_dir: str | Path = "data", seconds: float = 2.0, tasks: int = 8,
              out: str | Path | None = None, quiet: Quiet = QUIET, log=print) -> Calibration:
    """Measure this machine and each query (default: all eleven); save to ``out``
    (None: not saved).  ``seconds``: each timed engine run (the fault-tolerant one at least
    2.5 s, for a few checkpoints); ``tasks``: batches per codec measurement.  Before each
    query it waits (up to ``quiet.timeout`` s) for other processes to leave the cores alone
    (at most ``quiet.cores`` busy)."""
    from scabbard import queries as qmod

    names = [q.upper() for q in (queries or qmod.NAMES)]
    for q in names:
        qmod.workload_of(q)  # unknown names fail before anything is measured
    if tasks < 2:
        raise ValueError(f"tasks must be >= 2, got {tasks}")
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds}")
    background = [wait_quiet(quiet, log)]
    s = measure_system(data_dir)
    log(f"disk: write {s['disk_write_mb_s']:,.0f} MB/s (the pool's bulk writes: "
        f"{s['pool_write_mb_s'] or 0:,.0f} MB/s, into fresh files "
        f"{s['pool_fresh_write_mb_s'] or 0:,.0f}), read {s['disk_read_mb_s']:,.0f} MB/s, "
        f"4 KiB write {s['disk_latency_ms']:.3f} ms; record commit {s['record_s'] * 1e3:.2f} ms")
    costs, extra, probes = {}, [], []
    for q in names:
        background.append(wait_quiet(quiet, log))
        probes.append(speed_probe())  # how fast the cores are while this query is measured
        with LoadMeter() as load:
            c, more = _calibrate_query_in_child(
                dict(query=q, scale=scale, data_dir=str(data_dir), tasks=tasks,
                     ft_seconds=max(2.5, seconds), kernel_seconds=seconds,
                     read_mb_s=s["disk_read_mb_s"]), log)
        # how much others disturbed the measurement (CPU times inflate on a shared machine)
        costs[q] = replace(c, measured={**c.measured,
                                        "background_cores": round(load.background_cores, 2),
                                        "stolen_cores": round(load.stolen_cores, 2),
                                        "probe_ns": round(probes[-1], 3)})
        extra.append(more)
    cores = os.cpu_count() or 1
    # the disk's write bandwidth as the engine's writers got it (diskbench's figures are
    # kept in ``machine``: a sequential dd-like pass is faster than the pool's bulk writes)
    reads = [e["read_mb_s"] for e in extra if e["read_mb_s"]]
    hw = Hardware(cores=cores, disk_write_mb_s=s["pool_write_mb_s"] or s["disk_write_mb_s"],
                  disk_fresh_write_mb_s=s["pool_fresh_write_mb_s"],
                  disk_read_mb_s=statistics.median(reads) if reads else s["disk_read_mb_s"],
                  disk_latency_ms=s["disk_latency_ms"] if s["pool_latency_ms"] is None
                  else s["pool_latency_ms"], name="this machine (measured)")
    system = SystemCosts(
        process_start_s=statistics.median(e["process_start_s"] for e in extra),
        storage_open_s=statistics.median(e["storage_open_s"] for e in extra),
        record_s=s["record_s"], copy_ns_byte=s["copy_ns_byte"],
        io_cpu_ns_byte=statistics.median(e["write_cpu_ns_byte"] for e in extra),
        read_cpu_ns_byte=statistics.median(e["read_cpu_ns_byte"] for e in extra))
    machine = {**describe(), "scale": scale, "direct_io": s["direct"],
               "diskbench_write_mb_s": s["disk_write_mb_s"],
               "diskbench_first_write_mb_s": s["first_write_mb_s"],
               "diskbench_read_mb_s": s["disk_read_mb_s"],
               "engine_read_mb_s": {q: e["read_mb_s"] for q, e in zip(costs, extra, strict=True)},
               "diskbench_latency_ms": s["disk_latency_ms"],
               "diskbench_cpu_ns_byte": s["io_cpu_ns_byte"],
               "background_cores_max": round(max(background), 2),
               # the speed probe's ns per element while the queries were measured: a
               # validation later scales the CPU costs by the ratio to its own probe
               "probe_ns": round(statistics.median(probes), 3)}
    cal = Calibration(hw, system, costs, machine,
                      datetime.now(UTC).isoformat(timespec="seconds"))
    if out is not None:
        save(cal, out)
        log(f"calibration of {len(costs)} queries written to {out}")
    return cal


if __name__ == "__main__":  # one query, for calibrate(): JSON arguments in, JSON costs out
    _costs, _extra = calibrate_query(**json.loads(sys.argv[1]))
    print(json.dumps({"costs": asdict(_costs), "extra": _extra}))
