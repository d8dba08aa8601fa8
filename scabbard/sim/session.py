"""The ``scabbard sim`` commands' work, given their flags' values: which calibration, which
queries, the calibration measured and kept, the hardware a run simulates on, one query
simulated and described (:mod:`scabbard.cli.sim` parses the flags; notebook code can call the
same functions).

An input a person can fix is a :class:`scabbard.errors.FlagError` (one line, exit 2), as the
command line's own; a configuration the simulator refuses is its ``ValueError``, which the
command line names in its flags.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

from scabbard import paths
from scabbard.errors import FlagError
from scabbard.ft.modes import INTERVAL
from scabbard.sim import report
from scabbard.sim.config import Calibration, Hardware, SimConfig
from scabbard.usage import Usage

# the commands' texts (their flags: scabbard.cli.sim)
SIM = Usage(
    "the POG simulator: calibrate it here, validate it, run it on other hardware",
    "A discrete-event model of the engine (cores, task queue, fragment and assembly costs, "
    "codecs, disk bandwidth/IOPS/latency, network ingest, asynchronous checkpoints, fail-stop "
    "recovery) with costs measured on this machine.  It answers what the engine would do on "
    "hardware this machine is not: 16 cores, the paper's SSD, remote block storage, 100 Gb/s "
    "ingest.")
CALIBRATE = Usage(
    "measure the engine's costs on this machine, per query, into a calibration file",
    "Time the real engine's parts inside real runs on each query's dataset (source, fragment "
    "function, boundary windows, assembly), the codecs and the segment encoding per "
    "compression scheme, the disk (bandwidth, small-write latency), a checkpoint's state size, "
    "the state load and a process restart.  Writes a JSON file with the machine's description "
    "and the date; every cost in it is measured.",
    "Takes about 20-30 s per query; waits for other processes to leave the cores alone.")
SPEED = Usage(
    "how long the model takes: 60 s of a 16-core run per query (target < 10 s)",
    "Per query, simulate SECONDS of a fault-tolerant run (persisted, compressed input; "
    "checkpoints every second) on the paper's 16-core SSD machine with the calibrated costs, "
    "and print the simulated tasks, the wall time it took and the target.")
RUN = Usage(
    "simulate one query on a machine you describe; print the predicted metrics",
    "Simulate QUERY with the calibrated costs on this machine's hardware (measured at "
    "calibration) or a preset, with any part changed by the flags below.  Prints throughput, "
    "latency percentiles, bytes written, checkpoints, recovery phases (with --fail-at) and what "
    "kept the cores and the disk busy.",
    "Presets: this (the calibrated machine), paper-ssd (16 cores, 950 MB/s, 72k IOPS), "
    "paper-remote (16 cores, remote block storage: 700 MB/s, 16k IOPS of 256 KiB, 1 ms), "
    "paper-rdma (paper-ssd with 100 Gb/s ingest).")

# the hardware ``scabbard sim run --preset`` starts from
PRESETS = ("this", "paper-ssd", "paper-remote", "paper-rdma")


def query_names(names: list[str] | None) -> list[str] | None:
    """The queries ``names`` in upper case (None: none given); an unknown one is a
    :class:`FlagError`."""
    from scabbard import queries

    if not names:
        return None
    out = []
    for n in names:
        try:
            queries.workload_of(n)
        except queries.UnknownQueryError as e:
            raise FlagError(str(e)) from None
        out.append(n.upper())
    return out


def calibration(path: str | None) -> Calibration:
    """The calibration at ``path`` (None: :func:`scabbard.paths.calibration`); a missing or
    unusable file is a :class:`FlagError` saying what to do.  :func:`warn_elsewhere` says,
    once the command's arguments are checked, when it was measured on another machine."""
    from scabbard.sim.config import load

    path = path or str(paths.calibration())
    try:
        return load(path)
    except FileNotFoundError as e:
        raise FlagError(str(e)) from None
    except (ValueError, KeyError, TypeError) as e:
        raise FlagError(f"{path} is not a usable calibration file ({e}): calibrate "
                        "again") from None


def warn_elsewhere(path: str | None, cal: Calibration) -> None:
    """A warning on stderr when the calibration at ``path`` (None: this machine's) was
    measured on another machine."""
    from scabbard.sim.machine import elsewhere_warning

    warning = elsewhere_warning(path or str(paths.calibration()), cal.machine)
    if warning:
        print(f"scabbard: warning: {warning}", file=sys.stderr)


def calibration_file(output: str | None, replace_shipped: bool) -> Path:
    """Where ``scabbard sim calibrate`` writes: ``output``, else the package's own file
    (``replace_shipped``), else this machine's."""
    if output:
        return Path(output)
    return paths.shipped_calibration() if replace_shipped else paths.local_calibration()


def calibrate_into(out: Path, names: list[str] | None, scale: str, data_dir: str,
                   seconds: float, quiet_timeout: float) -> Calibration:
    """Measure the queries ``names`` (None: all) and write the calibration to ``out``, with
    the queries already in it and not measured now kept (a file of an older format is
    replaced); the calibration written."""
    from scabbard.sim.calibrate import calibrate
    from scabbard.sim.config import load, merge, save
    from scabbard.sim.machine import Quiet

    cal = calibrate(names, scale=scale, data_dir=data_dir, seconds=seconds, out=None,
                    quiet=Quiet(timeout=quiet_timeout))
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.is_file():
        with contextlib.suppress(ValueError, KeyError, TypeError):  # an old format: replaced
            cal = merge(load(out), cal)
    save(cal, out)
    return cal


def hardware(preset: str, cal: Calibration, changes: dict) -> Hardware:
    """The hardware of ``preset`` (one of :data:`PRESETS`; ``this``: the calibrated machine)
    with the fields ``changes`` names replaced; ValueError if the result is no machine."""
    from scabbard.sim import config

    base = {"this": cal.hardware, "paper-ssd": config.PAPER_SSD,
            "paper-remote": config.PAPER_REMOTE_STORAGE,
            "paper-rdma": config.PAPER_RDMA_INGEST}[preset]
    return replace(base, **changes)


def simulate_query(cal: Calibration, path: str | None, query: str, hw: Hardware,
                   changes: dict):
    """``scabbard sim run``: ``query`` simulated on ``hw`` with the calibration ``cal`` (read
    from ``path``) and the run's fields ``changes`` names - by default the cores as workers,
    persisted input, checkpoints every second (an interval of 0: none); the simulator's
    result (:func:`describe` gives its text).  A configuration the simulator refuses is its
    ValueError, raised before it runs."""
    from scabbard.sim.model import simulate

    run = {"workers": hw.cores, "persist": True, "checkpoint_interval": INTERVAL, **changes}
    if run["checkpoint_interval"] == 0:
        run["checkpoint_interval"] = None  # --checkpoint-interval 0: no checkpoints
    cfg = SimConfig(query, **run)
    cal.costs(query)
    warn_elsewhere(path, cal)
    return simulate(cal, cfg, hw)


def describe(result, as_json: bool = False, timeline: bool = False) -> str:
    """What ``scabbard sim run`` prints of ``result``: :func:`scabbard.sim.report.describe`
    (and the 0.5 s timeline), or JSON - in which a float that is not finite is null (JSON
    has no NaN)."""
    if as_json:
        return json.dumps(_finite(result.as_dict()), indent=1, default=str)
    text = report.describe(result)
    if timeline:
        text += "\n\n" + result.timeline.to_string(index=False,
                                                    float_format=lambda v: f"{v:,.2f}")
    return text


def _finite(v):
    """``v`` with every float that is not finite (NaN, infinity) as None, in lists and dicts."""
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_finite(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):  # (NumPy's float64 is a float)
        return None
    return v
