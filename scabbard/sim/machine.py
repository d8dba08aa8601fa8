"""This machine: what it is, how busy other processes keep it, and what its disk and memory
cost the engine (:func:`measure_system`).

Calibration and validation measure wall-clock behaviour on a machine that may be
shared; :class:`LoadMeter` measures the CPU other processes used meanwhile
(``/proc/stat`` busy time minus this process's and its children's), so every
measurement can say how many cores it really had, and :func:`wait_quiet` waits for
a moment when others leave the cores alone.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import statistics
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MiB = 1 << 20


def describe() -> dict:
    """CPU model, cores, kernel, and the versions that change the measured costs."""
    import numba
    import numpy

    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": model or platform.processor(), "cores": os.cpu_count() or 1,
            "kernel": platform.release(), "python": platform.python_version(),
            "numpy": numpy.__version__, "numba": numba.__version__}


def elsewhere(measured: dict) -> str:
    """How the machine a calibration was ``measured`` on differs from this one (CPU model,
    cores, kernel); "" when it is this kind of machine (or the calibration does not say)."""
    here = describe()
    return "; ".join(f"{k} {measured[k]}, here {here[k]}" for k in ("cpu", "cores", "kernel")
                     if k in measured and measured[k] != here[k])


def elsewhere_warning(path, measured: dict | None = None) -> str:
    """The warning that the calibration at ``path`` (its ``machine`` entry: ``measured``, read
    from the file if not given) was measured on another machine; "" when it was not."""
    if measured is None:
        try:
            measured = json.loads(Path(path).read_text()).get("machine", {})
        except (OSError, ValueError, AttributeError):
            return ""
    other = elsewhere(measured)
    return (f"the simulator's calibration {path} was measured on another machine ({other}): "
            f"its figures are that machine's; `scabbard sim calibrate` measures this one "
            f"(~5 min)") if other else ""


def warn_if_elsewhere(path) -> str:
    """:func:`elsewhere_warning` as a ``UserWarning`` (a notebook shows it under the cell)."""
    text = elsewhere_warning(path)
    if text:
        warnings.warn(text, UserWarning, stacklevel=2)
    return text


def _jiffies() -> tuple[float, float] | None:
    """(busy, stolen) jiffies of all cores since boot: stolen is the time the hypervisor
    ran something else while this virtual machine wanted its cores."""
    try:
        with open("/proc/stat") as f:
            parts = f.readline().split()
    except OSError:
        return None
    vals = [float(v) for v in parts[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0.0)  # idle + iowait
    steal = vals[7] if len(vals) > 7 else 0.0
    return sum(vals[:8]) - idle - steal, steal


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@dataclass
class LoadMeter:
    """``with LoadMeter() as m: ...`` -> ``m.background_cores``: the cores other processes
    kept busy on average meanwhile; ``m.stolen_cores``: the cores the hypervisor gave to
    other machines while this one wanted them (steal time; a shared host); 0 where
    ``/proc/stat`` is missing."""

    background_cores: float = 0.0
    own_cores: float = 0.0
    stolen_cores: float = 0.0

    def __enter__(self) -> LoadMeter:
        self._t = time.perf_counter()
        self._start = _jiffies()
        self._own = _own_cpu_s()
        return self

    def __exit__(self, *exc) -> None:
        wall = max(time.perf_counter() - self._t, 1e-9)
        own = _own_cpu_s() - self._own
        end = _jiffies()
        self.own_cores = own / wall
        if end is None or self._start is None:
            return
        tick = os.sysconf("SC_CLK_TCK")
        total = (end[0] - self._start[0]) / tick
        self.background_cores = max(0.0, (total - own) / wall)
        self.stolen_cores = max(0.0, (end[1] - self._start[1]) / tick / wall)


def background_load(seconds: float = 1.0) -> float:
    """Cores busy with other processes' work over the next ``seconds``."""
    with LoadMeter() as m:
        time.sleep(seconds)
    return m.background_cores


@dataclass(frozen=True)
class Quiet:
    """A quiet enough machine: other processes keep at most ``cores`` busy; measurements wait
    for it up to ``timeout`` seconds."""

    cores: float = 0.25
    timeout: float = 120.0


QUIET = Quiet()


def wait_quiet(quiet: Quiet = QUIET, log=None) -> float:
    """Wait (up to ``quiet.timeout`` s) until other processes use at most ``quiet.cores``;
    returns the last background load seen (measurements proceed after the timeout, noted)."""
    max_cores, timeout = quiet.cores, quiet.timeout
    deadline = time.monotonic() + timeout
    said = False
    while True:
        load = background_load(1.0)
        if load <= max_cores or time.monotonic() >= deadline:
            return load
        if log is not None and not said:
            log(f"  (other processes keep {load:.1f} cores busy: waiting up to "
                f"{timeout:.0f} s for a quiet machine)")
            said = True


# -- how fast the cores are right now ------------------------------------------------------------------
def _probe_kernel():
    import numba

    @numba.njit(cache=True, nogil=True)
    def kernel(keys, values, table):  # a pane aggregation in small: hash, probe, add
        mask = len(table) - 1
        acc = 0.0
        for i in range(len(keys)):
            h = (keys[i] * 0x9E3779B97F4A7C15) & mask
            table[h] += values[i]
            acc += table[(h + 1) & mask]
        return acc

    return kernel


def speed_probe(repeats: int = 5, n: int = 4_000_000) -> float:
    """ns per element of a fixed kernel in the engine's style (hash, probe, aggregate over
    arrays larger than the caches): the least disturbed of ``repeats`` timings.  The same
    machine gives different figures at different times on a shared host (other virtual
    machines' load, frequency); the ratio of two probes scales the calibrated CPU costs
    (:attr:`scabbard.sim.config.Hardware.core_speed`)."""
    import numpy as np

    kernel = _probe_kernel()
    rng = np.random.default_rng(7)
    keys = rng.integers(0, 1 << 40, n, dtype=np.int64)
    values = rng.random(n)
    table = np.zeros(1 << 21, dtype=np.float64)  # 16 MiB
    kernel(keys[:1000], values[:1000], table)  # compiled (or loaded from the cache)
    best = math.inf
    for _ in range(repeats):
        t = time.perf_counter()
        kernel(keys, values, table)
        best = min(best, time.perf_counter() - t)
    return best / n * 1e9


# -- per machine -------------------------------------------------------------------------------------
def _small_write_latency(folder: Path, seconds: float = 0.5) -> float:
    """Median seconds of one 4 KiB O_DIRECT write (queue depth 1)."""
    from scabbard.storage.segment import aligned_empty

    path = folder / f".latency-{os.getpid()}"
    buf = aligned_empty(4096)
    buf[:] = 0x5A
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_DIRECT", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    times = []
    try:
        os.posix_fallocate(fd, 0, 64 * MiB)
        end = time.perf_counter() + seconds
        pos = 0
        while time.perf_counter() < end:
            t = time.perf_counter()
            os.pwrite(fd, buf, pos)
            times.append(time.perf_counter() - t)
            pos = (pos + 4096) % (64 * MiB)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return statistics.median(times)


def _record_s(folder: Path, repeat: int = 10) -> float:
    """Median seconds to commit a checkpoint record (temp file, fsync, rename, dir fsync)."""
    from scabbard.pog.checkpoint import CheckpointRecord, CheckpointStore

    store = CheckpointStore(folder / "records")
    times = []
    for i in range(1, repeat + 1):
        rec = CheckpointRecord(i, i, i, {}, [{"stream": "state-0", "first": 0, "end": 1}],
                               {"last_ts": 0}, 1, 0.0, 0.0)
        t = time.perf_counter()
        store.record(rec)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _copy_ns_byte(nbytes: int = 64 * MiB) -> float:
    parts = [np.ones(nbytes // 8 // 16, dtype=np.int64) for _ in range(16)]
    np.concatenate(parts)
    t = time.thread_time()
    for _ in range(3):
        np.concatenate(parts)
    return (time.thread_time() - t) / 3 / nbytes * 1e9


def _pool_writes(folder: Path, total: int = 768 * MiB, unit: int = 16 * MiB) -> dict:
    """The BlockManager's own writes (O_DIRECT, bulk, into its pool files): ``total`` bytes
    into a new folder - every file fresh, allocated but never written - then, the stream
    trimmed, as much again into the recycled files.  Per pass, every write's bytes and
    wall time (:func:`fit_writes`)."""
    from scabbard.batch import Batch
    from scabbard.schema import Field, Schema
    from scabbard.sim.instrument import Probe
    from scabbard.storage import BlockManager

    schema = Schema("pool-bench", (Field("timestamp", "int64"), Field("value", "int64")))
    rows = unit // 16
    cols = (np.arange(rows, dtype=np.int64), np.full(rows, 0x5A5A, dtype=np.int64))
    passes = {}
    with BlockManager(folder / "pool-bench") as bm:
        sid = bm.stream("bench", schema)
        offset = 0
        for name in ("fresh", "recycled"):
            probe = Probe()
            with probe.recording():
                futures = []
                for _ in range(total // unit):
                    futures.append(bm.append(sid, Batch(schema, cols, offset)))
                    offset += rows
                for f in futures:
                    f.result()
            passes[name] = probe.writes
            bm.trim(sid, offset)  # every file back to the pool
    return passes


def measure_system(data_dir: str | Path = "data", disk_mb: int = 512) -> dict:
    """Disk bandwidth and write latency, the CPU an O_DIRECT write costs, a checkpoint
    record's commit and memory copy speed - in a scratch folder next to the data."""
    from scabbard.storage.diskbench import disk_bandwidth

    folder = Path(tempfile.mkdtemp(prefix="scabbard-calibrate-", dir=str(data_dir)))
    try:
        t = time.thread_time()
        bw = disk_bandwidth(folder, total=disk_mb * MiB)
        cpu = time.thread_time() - t
        latency = _small_write_latency(folder)
        record = _record_s(folder)
        pool = _pool_writes(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    (recycled, lat), (fresh, _) = fit_writes(pool["recycled"]), fit_writes(pool["fresh"])
    return {"disk_write_mb_s": bw.write_mb_s, "disk_read_mb_s": bw.read_mb_s,
            "first_write_mb_s": bw.first_write_mb_s,
            "pool_write_mb_s": recycled, "pool_fresh_write_mb_s": fresh, "pool_latency_ms": lat,
            "direct": bw.direct,
            # two write passes and one read pass over ``bytes``
            "io_cpu_ns_byte": cpu / (3 * bw.bytes) * 1e9,
            "disk_latency_ms": max(0.0, latency - 4096 / (bw.write_mb_s * 1e6)) * 1e3,
            "record_s": record, "copy_ns_byte": _copy_ns_byte()}


def fit_writes(writes: list[tuple[int, float]]) -> tuple[float | None, float | None]:
    """Bandwidth (MB/s) and per-request latency (ms) of the disk as the engine's writers
    got it: ``seconds = latency + bytes / bandwidth``, least squares over their writes
    (bulk writes of different sizes); the mean rate alone where the fit is not sane."""
    if not writes:
        return None, None
    b = np.array([w[0] for w in writes], dtype=float)
    t = np.array([w[1] for w in writes], dtype=float)
    mean_mb_s = b.sum() / t.sum() / 1e6
    if len(b) < 8 or np.ptp(b) < 0.5 * b.mean():
        return float(mean_mb_s), None
    slope, latency = np.polyfit(b, t, 1)
    if slope <= 0 or latency < 0:
        return float(mean_mb_s), None
    return float(1 / slope / 1e6), float(latency * 1e3)
