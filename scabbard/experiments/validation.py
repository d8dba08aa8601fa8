"""``scabbard sim validate``: the real engine and the simulator, same configurations, side by side.

Per query, on this machine, each configuration of :data:`CONFIGS` runs for real
(:func:`scabbard.engine.run_query`, the dataset replayed for ``seconds``) and is
simulated with the calibrated costs on the calibrated machine; then one fault-tolerant
run is killed (SIGKILL) and recovered as notebook 04 does
(:func:`scabbard.experiments.recovery.run`: input at half the sustainable rate,
checkpoints every second), and the same run, killed at the same moment, is simulated.

The table has one row per (query, configuration, metric): predicted, measured, the
error in % of the measured value, and whether it is within the targets -
throughput within 15 %, recovery time within 25 %.  Every real run also records how
many cores other processes kept busy meanwhile (``background_cores``) and how many the
hypervisor took (``stolen_cores``, steal time): on a shared machine the engine had less
than the model's cores, and the prediction beside it is made for the machine as the run
found it (``predicted_idle``: for an idle one).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from scabbard.experiments import Common, prepared_dataset, recovery, scratch
from scabbard.ft.modes import INTERVAL
from scabbard.sim.config import Calibration, SimConfig, load
from scabbard.sim.machine import LoadMeter, Quiet, speed_probe, wait_quiet
from scabbard.sim.model import simulate
from scabbard.usage import Usage

USAGE = Usage(  # scabbard sim validate
    "run the real engine and the simulator on the same configurations; compare",
    "Per query: 1 and 2 workers, without and with persisted input, compression none and "
    "default - each run for real and simulated - then one fault-tolerant run killed (SIGKILL) "
    "and recovered, and the same run simulated.  Prints predicted vs measured with the error in "
    "%; targets: throughput within 15 %, recovery time within 25 %.",
    "About two minutes per query (three runs of each configuration).  Rows measured while "
    "other processes kept cores busy say so (background_cores).")

TARGETS = {"tuples/s": 15.0, "recovery s": 25.0}  # |error| % the issue asks for


@dataclass(frozen=True)
class RunConfig:
    name: str
    workers: int
    persist: bool = False
    compression: str = "none"
    ingress: int = 1  # ingress partitions


CONFIGS = (RunConfig("1 worker", 1), RunConfig("2 workers", 2),
           RunConfig("1 worker, persisted input", 1, persist=True),
           RunConfig("2 workers, persisted input", 2, persist=True),
           RunConfig("2 workers, persisted input, compressed", 2, persist=True,
                     compression="default"),
           RunConfig("2 workers, persisted, compressed, 2 ingress", 2, persist=True,
                     compression="default", ingress=2))


@dataclass(frozen=True)
class Settings(Common):
    queries: Sequence[str] = ("CM1", "LRB1", "YSB")
    seconds: float = field(default=3.0, metadata={"help": "wall seconds per real run"})
    configs: Sequence[RunConfig] = field(default=CONFIGS)
    kill: bool = field(default=True, metadata={"help": "throughput only, no kill"})
    kill_at: float = 5.0  # seconds after the process started
    kill_seconds: float = 12.0  # of input, at half the sustainable rate
    kill_batch: int = 262_144
    interval: float = INTERVAL
    quiet_cores: float = 0.25  # wait for other processes to use at most this many cores
    quiet_timeout: float = 60.0
    retries: int = field(default=2, metadata={"help": (
        "runs measured while other processes kept the cores busy are repeated up to this many "
        "times")})
    probe: bool = field(default=False, metadata={"help": (
        "scale the CPU costs by how fast a speed probe finds the cores now against at "
        "calibration (off by default: on this shared host the probe varied by 50%% within "
        "minutes and made predictions worse)")})
    repeats: int = field(default=3, metadata={"help": (
        "real runs per configuration; their median is compared")})
    work_dir: str | None = None

    def __post_init__(self) -> None:
        if not self.seconds > 0:
            raise ValueError(f"seconds must be positive, got {self.seconds}")
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {self.repeats}")
        if self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries}")


def _row(query: str, config: str, metric: str, predicted: float, measured: float,
         idle: float | None = None, load: LoadMeter | None = None, note: str = "") -> dict:
    err = (predicted - measured) / measured * 100 if measured else float("nan")
    target = TARGETS.get(metric)
    return {"query": query, "config": config, "metric": metric, "predicted": predicted,
            "measured": measured, "error_pct": err, "target_pct": target,
            "within": bool(abs(err) <= target) if target is not None and np.isfinite(err)
            else None,
            "predicted_idle": predicted if idle is None else idle,
            "background_cores": None if load is None else round(load.background_cores, 2),
            "stolen_cores": None if load is None else round(load.stolen_cores, 2),
            "engine_cores": None if load is None else round(load.own_cores, 2), "note": note}


def _shared(cal: Calibration, load: LoadMeter, speed: float = 1.0):
    """The calibrated machine with the cores other processes kept busy during a run, and
    those the hypervisor took (steal time): the engine did not have them either; its cores
    at ``speed`` (the speed probe now against at calibration)."""
    bg = min(load.background_cores + load.stolen_cores, cal.hardware.cores - 0.05)
    return replace(cal.hardware, background_cores=bg if bg > 0.05 else 0.0, core_speed=speed)


def core_speed(cal: Calibration, query: str | None = None, log=print) -> float:
    """This machine's cores now against when ``cal`` measured ``query`` (the calibration's
    median without a query; 1.0 without a probe in the calibration): a shared host is not
    equally fast all day."""
    then = cal.machine.get("probe_ns")
    if query is not None:
        then = cal.costs(query).measured.get("probe_ns", then)
    if not then:
        return 1.0
    now = speed_probe()
    speed = then / now
    if abs(speed - 1) > 0.05:
        log(f"  (the cores run at {speed:.0%} of their speed at calibration: "
            f"probe {now:.1f} ns against {then:.1f}; the model is told so)")
    return speed


def _real_run(query: str, ds, rc: RunConfig, seconds: float, folder: Path):
    from scabbard import queries
    from scabbard.engine import EngineConfig, NullSink, Replay
    from scabbard.ft.config import PersistConfig
    from scabbard.ft.ingress import run_persisted

    shutil.rmtree(folder, ignore_errors=True)
    with LoadMeter() as load:
        persist = PersistConfig(folder, compression=rc.compression) if rc.persist else None
        rep = run_persisted(queries.get(query), ds, persist, NullSink(),
                            EngineConfig(workers=rc.workers, ingress_partitions=rc.ingress),
                            Replay(duration=seconds))
    shutil.rmtree(folder, ignore_errors=True)
    s = rep.summary
    return ({"tuples_per_s": s.tuples_per_s, "p50_ms": s.latency_ms["p50"],
             "written_bytes": rep.written_bytes, "seconds": s.seconds}, load)


def _least_disturbed(measure, settings: Settings, log):
    """``measure()`` -> (result, LoadMeter); repeated while others disturbed it (up to
    ``retries`` times); the least disturbed attempt is kept."""
    best = None
    for _ in range(settings.retries + 1):
        wait_quiet(Quiet(settings.quiet_cores, settings.quiet_timeout), log)
        got = measure()
        if best is None or (got[1].background_cores + got[1].stolen_cores
                            < best[1].background_cores + best[1].stolen_cores):
            best = got
        if got[1].background_cores + got[1].stolen_cores <= settings.quiet_cores:
            break
    return best


def validate_throughput(cal: Calibration, query: str, settings: Settings, root: Path,
                        log=print) -> list[dict]:
    """Each configuration of ``settings.configs``, for real and simulated: on the machine as
    the run found it (other processes' load measured meanwhile) and on an idle one."""

    ds = prepared_dataset(query, settings.scale, settings.data_dir, 2, 1.0)
    rows = []
    for rc in settings.configs:
        wait_quiet(Quiet(settings.quiet_cores, settings.quiet_timeout), log)
        speed = core_speed(cal, query, log) if settings.probe else 1.0
        # the median of ``repeats`` runs: one run of a few seconds on a shared host varies
        # by tens of % (other machines' steal time); ``spread_pct`` says by how much
        runs = sorted((_least_disturbed(
            lambda rc=rc: _real_run(query, ds, rc, settings.seconds, root / f"{query}-run"),
            settings, log) for _ in range(settings.repeats)),
            key=lambda r: r[0]["tuples_per_s"])
        real, load = runs[len(runs) // 2]
        spread = (runs[-1][0]["tuples_per_s"] - runs[0][0]["tuples_per_s"]) \
            / max(real["tuples_per_s"], 1e-9) * 100
        cfg = SimConfig(query, workers=rc.workers, persist=rc.persist, compression=rc.compression,
                        duration=real["seconds"], ingress_partitions=rc.ingress)
        sim, idle = simulate(cal, cfg, _shared(cal, load, speed)), simulate(cal, cfg)
        tput = _row(query, rc.name, "tuples/s", sim.tuples_per_s, real["tuples_per_s"],
                    idle.tuples_per_s, load, note=f"median of {len(runs)} runs")
        tput["spread_pct"] = round(spread, 1)
        tput["core_speed"] = round(speed, 3)
        rows.append(tput)
        rows.append(_row(query, rc.name, "latency p50 ms", sim.summary.latency_ms["p50"],
                         real["p50_ms"], idle.summary.latency_ms["p50"], load))
        if rc.persist:
            mb = [r.written_bytes / r.summary.seconds / 1e6 for r in (sim, idle)]
            rows.append(_row(query, rc.name, "MB written/s", mb[0],
                             real["written_bytes"] / real["seconds"] / 1e6, mb[1], load))
        bg = load.background_cores + load.stolen_cores
        log(f"{query:5} {rc.name:40} predicted {sim.tuples_per_s / 1e6:8.2f}  measured "
            f"{real['tuples_per_s'] / 1e6:8.2f} M tuples/s  ({tput['error_pct']:+.1f} %; "
            f"{len(runs)} runs, spread {spread:.0f} %"
            f"{f'; others kept {bg:.1f} cores busy' if bg > settings.quiet_cores else ''})")
    return rows


def _first_life(out) -> tuple[float, float]:
    """Of the incarnation that was killed: seconds from its start of processing to the kill,
    and how long its input had been arriving before (from the run's start: code loading)."""
    ev = out.events
    start = float(ev[(ev["event"] == "start") & (ev["t"] < 0)]["t"].iloc[0])
    started = ev[(ev["event"] == "phase") & (ev["phase"] == "started") & (ev["t"] < 0)]
    lead = start - float(started["t"].iloc[0]) if len(started) else 0.0
    return -start, max(0.0, lead)


def _same_moment(out, free, fail_at: float) -> float:
    """The simulated kill at the same moment of the checkpoint protocol as the real one:
    as long after the same (k-th) completed checkpoint - what is replayed depends on it.
    ``free``: the simulated run without a failure."""
    ev = out.events
    before = ev[(ev["event"] == "checkpoint") & (ev["t"] < 0)]
    ck = free.checkpoints
    if before.empty or len(ck) < len(before):
        return fail_at
    return float(ck["completed"].iloc[len(before) - 1]) - float(before["t"].iloc[-1])


def validate_recovery(cal: Calibration, query: str, settings: Settings, root: Path,
                      log=print) -> list[dict]:
    """One kill and recovery, for real (notebook 04's experiment) and simulated."""

    wait_quiet(Quiet(settings.quiet_cores, settings.quiet_timeout), log)
    speed = core_speed(cal, query, log) if settings.probe else 1.0
    rs = recovery.Settings(query=query, scale=settings.scale, data_dir=settings.data_dir,
                           load=0.5, interval=settings.interval, seconds=settings.kill_seconds,
                           kill_at=settings.kill_at, batch=settings.kill_batch, workers=2,
                           work_dir=str(root / f"{query}-kill"))
    with LoadMeter() as load:
        out = recovery.run(rs, log=lambda s: log("  " + s))
    shutil.rmtree(root / f"{query}-kill", ignore_errors=True)
    ph = out.phases
    if not ph:
        return [_row(query, "kill", "recovery s", float("nan"), float("nan"), load=load,
                     note="the run ended before the kill")]
    hw = _shared(cal, load, speed)
    base = SimConfig(query, workers=2, batch_rows=settings.kill_batch, persist=True,
                     checkpoint_interval=settings.interval, duration=3.0)
    ft, ft_idle = simulate(cal, base, hw), simulate(cal, base)
    fail_at, lead = _first_life(out)
    run = replace(base, rate=out.rate, source_lead=lead,
                  max_tuples=int(out.rate * settings.kill_seconds),
                  duration=settings.kill_seconds + 60)
    fail_at = _same_moment(out, simulate(cal, run, hw), fail_at)
    sim = simulate(cal, replace(run, fail_at=fail_at), hw)
    idle = simulate(cal, replace(run, fail_at=fail_at)).recovery
    rec = sim.recovery
    resume = out.events[(out.events["event"] == "recovery") & (out.events["phase"] == "resume")]
    replayed = (float(resume["replay_to"].iloc[0] - resume["replay_from"].iloc[0])
                if len(resume) else float("nan"))
    measured_init = ph["code loading"][1] if "code loading" in ph else float("nan")
    def phase(name: str, measured: float, note: str = "") -> dict:
        return _row(query, "kill", name.replace("_s", " s").replace("_", " "),
                    rec.get(name, np.nan), measured, idle.get(name, np.nan), load, note)

    rows = [_row(query, "FT (persisted input, checkpoints), 2 workers", "tuples/s",
                 ft.tuples_per_s, out.sustainable or float("nan"), ft_idle.tuples_per_s, load),
            phase("restart_init_s", measured_init, "process start + code loading"),
            phase("state_load_s", ph["state load"][1] - ph["state load"][0]),
            phase("replayed_tuples", replayed, "the simulated kill as long after the same "
                  "checkpoint"),
            phase("replay_s", ph["replay"][1] - ph["replay"][0]),
            phase("recovery_s", ph["replay"][1], "kill -> replay done")]
    ck = out.events[out.events["event"] == "checkpoint"]
    if len(ck) and len(sim.checkpoints):
        rows.append(_row(query, "kill", "checkpoint ms",
                         float(sim.checkpoints["duration_ms"].median()),
                         float(ck["duration_ms"].median()), load=load))
    log(f"{query:5} kill at {fail_at:.2f} s: recovery predicted {rows[5]['predicted']:.3f} s, "
        f"measured {rows[5]['measured']:.3f} s ({rows[5]['error_pct']:+.1f} %)")
    return rows


def validate(queries: Sequence[str] | None = None,
             calibration: str | Path | Calibration | None = None,
             settings: Settings | None = None, log=print) -> pd.DataFrame:
    """Predicted vs measured on this machine, one row per (query, configuration, metric)."""

    settings = settings or Settings()
    if queries is not None:
        settings = replace(settings, queries=tuple(q.upper() for q in queries))
    if calibration is None:  # this machine's, else the package's
        from scabbard import paths

        calibration = paths.calibration()
    cal = calibration if isinstance(calibration, Calibration) else load(calibration)
    for q in settings.queries:
        cal.costs(q)  # fail before running anything when a query was not calibrated
    rows = []
    with scratch(settings.work_dir, settings.data_dir, "scabbard-validate-") as root:
        for q in settings.queries:
            rows += validate_throughput(cal, q, settings, root, log)
            if settings.kill:
                rows += validate_recovery(cal, q, settings, root, log)
    return pd.DataFrame(rows)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per metric with a target: rows, median and largest |error| %, rows within target."""
    t = table[table["target_pct"].notna()].copy()
    t["abs_error_pct"] = t["error_pct"].abs()
    return t.groupby("metric").agg(rows=("error_pct", "size"),
                                   median_abs_error_pct=("abs_error_pct", "median"),
                                   max_abs_error_pct=("abs_error_pct", "max"),
                                   within=("within", "sum"),
                                   target_pct=("target_pct", "first")).reset_index()


def format_table(table: pd.DataFrame) -> str:
    """The table as text: throughput in M tuples/s, times in s or ms."""
    t = table.copy()
    scale = np.where(t["metric"] == "tuples/s", 1e-6, 1.0)
    t["predicted"] = t["predicted"] * scale
    t["measured"] = t["measured"] * scale
    t["metric"] = t["metric"].replace({"tuples/s": "M tuples/s"})
    t["predicted_idle"] = t["predicted_idle"] * scale
    cols = ["query", "config", "metric", "predicted", "measured", "error_pct", "within",
            "predicted_idle", "spread_pct", "core_speed", "background_cores", "stolen_cores",
            "engine_cores"]
    return t[cols].to_string(index=False, float_format=lambda v: f"{v:,.3f}",
                             na_rep="-")


def report(table: pd.DataFrame) -> str:
    """``scabbard sim validate``'s text: a blank line, the table (:func:`format_table`), a
    blank line, the summary per metric (:func:`summary`)."""
    return "\n".join(["", format_table(table), "",
                      summary(table).to_string(index=False, float_format=lambda v: f"{v:.1f}")])


def save_csv(table: pd.DataFrame, csv: str) -> str:
    """The table written to ``csv`` (its folder made); the line that says so."""
    Path(csv).parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(csv, index=False)
    return f"written to {csv}"
