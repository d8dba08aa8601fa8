"""This machine: what it is, and how busy other processes keep it.

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
import time
import warnings
from dataclasses import dataclass
from pathlib import Path


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


def wait_quiet(max_cores: float = 0.25, timeout: float = 120.0, log=None) -> float:
    """Wait (up to ``timeout`` s) until other processes use at most ``max_cores``; returns
    the last background load seen (measurements proceed after the timeout, noted)."""
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
