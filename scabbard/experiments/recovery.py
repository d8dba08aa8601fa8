"""Notebook 04: a kill, live - throughput and latency across a failure (paper Fig. 10).

The query runs fault-tolerantly as its own process (persisted input, checkpoints every
``interval`` s, clocked exactly-once output) with its input arriving at ``load`` times
its sustainable rate - measured first, in the same configuration - so it can catch up
after a failure.  :class:`scabbard.ft.controller.Controller` kills it with SIGKILL
``kill_at`` seconds in and restarts it with ``--recover``, cold (a new process) or from a
warm standby; the output is then compared with a failure-free run.

The recovery breakdown, from the kill: process start (spawn -> interpreter and imports
done), code loading (compiled kernels from numba's on-disk cache), state load (storage
and output opened, checkpoint state read), replay (the stored input after the
checkpoint re-processed) and catch-up (until latency is back to its pre-failure level:
the first sample whose median latency is within ``caught_up_factor`` of the median before
the kill).  With a standby, process start and code loading happened before the failure.

:class:`Panel` is the same experiment driven by hand (ipywidgets): pick query, load and
interval, press Kill whenever, watch the timeline, read the verdict.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from scabbard import queries, workloads
from scabbard.engine import EngineConfig, read_metrics
from scabbard.experiments import finish, scratch
from scabbard.ft.controller import Campaign, Controller
from scabbard.ft.recovery import run_fault_tolerant
from scabbard.ft.sinks import ClockedSink

PHASES = ("process start", "code loading", "state load", "replay", "catch-up")
COLORS = dict(zip(PHASES, ("#dd8452", "#c44e52", "#8172b3", "#55a868", "#ccb974"), strict=True))
# Fig. 10 of the paper (LRB1, half the sustainable rate, EBS): ~360 ms initialisation
# (memory pre-allocation, precompiled code), ~100 ms recovery, latency at its pre-failure
# level within 2 s.
PAPER = {"init_ms": 360.0, "recovery_ms": 100.0, "caught_up_ms": 2000.0}


@dataclass(frozen=True)
class Settings:
    query: str = "LRB1"
    scale: str = "small"
    data_dir: str = "data"
    load: float = 0.5  # input rate as a share of the sustainable rate
    rate: float | None = None  # tuples/s; None: load x the measured sustainable rate
    interval: float = 1.0  # checkpoint interval, s
    seconds: float = 12.0  # length of the input at the rate, s
    kill_at: float | None = 5.0  # seconds after the start; None: no kill
    batch: int | None = 262_144  # tuples per task (small: latency is the point here)
    workers: int = 2
    standby: bool = False
    metrics_interval: float = 0.1
    caught_up_factor: float = 1.25
    work_dir: str | None = None  # default: a scratch folder next to the data


@dataclass
class Outcome:
    settings: Settings
    rate: float
    sustainable: float | None
    campaign: Campaign
    samples: pd.DataFrame  # t: seconds relative to the kill (or the start)
    events: pd.DataFrame
    phases: dict = field(default_factory=dict)  # name -> (start, end) seconds after the kill


def sustainable_rate(settings: Settings, ds, folder: Path, seconds: float = 3.0) -> float:
    """The query's throughput with full fault tolerance and no rate limit (tuples/s)."""
    shutil.rmtree(folder, ignore_errors=True)
    r = run_fault_tolerant(queries.get(settings.query), ds, folder / "storage",
                           ClockedSink(folder / "output"),
                           EngineConfig(workers=settings.workers, batch_rows=settings.batch),
                           interval=settings.interval, duration=seconds)
    shutil.rmtree(folder, ignore_errors=True)
    return r.run.summary.tuples_per_s


def controller(settings: Settings, ds, rate: float, folder: Path) -> Controller:
    shutil.rmtree(folder, ignore_errors=True)
    return Controller(settings.query, ds.path, folder, max_tuples=int(rate * settings.seconds),
                      workers=settings.workers, batch=settings.batch, rate=rate,
                      interval=settings.interval, standby=settings.standby,
                      metrics_interval=settings.metrics_interval)


def run(settings: Settings, log=print) -> Outcome:
    """Measure the sustainable rate (unless given), run at ``load`` of it, kill, recover."""
    ds = workloads.dataset(queries.workload_of(settings.query), settings.scale,
                           root=settings.data_dir)
    with scratch(settings.work_dir, settings.data_dir, "scabbard-recovery-") as root:
        sustainable = None
        rate = settings.rate
        if rate is None:
            sustainable = sustainable_rate(settings, ds, root / "sustainable")
            rate = settings.load * sustainable
            log(f"{settings.query}: sustainable {sustainable / 1e6:.2f} M tuples/s with fault "
                f"tolerance; input at {settings.load:.0%}: {rate / 1e6:.2f} M tuples/s")
        c = controller(settings, ds, rate, root / "run")
        camp = c.run([settings.kill_at] if settings.kill_at is not None else [])
        log(f"{camp.kills} kill(s), {camp.restarts} restart(s)"
            + (" from a warm standby" if camp.standby_takeovers else "")
            + f"; {camp.verdict}")
        return outcome(settings, rate, sustainable, camp, c.metrics_log)


def outcome(settings: Settings, rate: float, sustainable: float | None, camp: Campaign,
            metrics_log: Path) -> Outcome:
    """Read the metrics log of a campaign into a timeline and a recovery breakdown."""
    m = read_metrics(metrics_log)
    origin = camp.kill_walls[0] if camp.kill_walls else float(m["wall"].min())
    samples = m[m["event"] == "sample"].assign(t=lambda d: d["wall"] - origin)
    if samples.empty:  # the engine has not sampled yet (a live panel may ask that early)
        raise ValueError(f"no metrics sample in {metrics_log} yet")
    events = m[m["event"] != "sample"].assign(t=lambda d: d["wall"] - origin)
    out = Outcome(settings, rate, sustainable, camp, samples.reset_index(drop=True),
                  events.reset_index(drop=True))
    if camp.kill_walls:
        out.phases = breakdown(samples, events, settings.caught_up_factor)
    return out


def _incarnation_after_kill(events: pd.DataFrame) -> dict:
    """Phase and recovery times (seconds after the kill) of the incarnation that recovered:
    the events from the first ``start`` after the kill to the next ``start``."""
    starts = events.index[events["event"] == "start"]
    after = starts[events.loc[starts, "t"] > 0]
    if not len(after):
        return {}
    later = starts[starts > after[0]]
    block = events.loc[after[0]:later[0] - 1] if len(later) else events.loc[after[0]:]
    block = block[block["event"].isin(["phase", "recovery"])]
    return dict(zip(block["phase"], block["t"], strict=True))


def breakdown(samples: pd.DataFrame, events: pd.DataFrame, factor: float = 1.25) -> dict:
    """Recovery phases as ``name -> (start, end)`` in seconds after the kill."""
    at = _incarnation_after_kill(events)
    if "state_loaded" not in at:
        return {}
    before = samples[(samples["t"] < 0) & (samples["t"] > -3.0)]
    level = float(np.nanmedian(before["latency_p50_ms"])) if len(before) else float("nan")
    standby = "activated" in at
    phases = {}
    if not standby:
        phases["process start"] = (0.0, at["started"])
        phases["code loading"] = (at["started"], at["code_loaded"])
    load_from = at["activated"] if standby else at["code_loaded"]
    phases["state load"] = (max(0.0, load_from), at["state_loaded"])
    end = at.get("replayed", at["state_loaded"])
    phases["replay"] = (at["state_loaded"], end)
    after = samples[(samples["t"] > end) & (samples["tuples_per_s"] > 0)]
    ok = after[after["latency_p50_ms"] <= factor * level]
    if len(ok):
        phases["catch-up"] = (end, float(ok["t"].iloc[0]))
    phases["_off_path"] = ({"process start": at["started"] - at["spawned"],
                            "code loading": at["code_loaded"] - at["started"]}
                           if standby else {})
    return phases


def summary(out: Outcome) -> pd.DataFrame:
    """One row per recovery phase (ms), the totals, and the paper's figures."""
    ph = out.phases
    rows = [{"phase": name, "ms": 1e3 * (ph[name][1] - ph[name][0])} for name in PHASES
            if name in ph]
    for name, secs in ph.get("_off_path", {}).items():
        rows.append({"phase": f"{name} (standby, before the failure)", "ms": 1e3 * secs})
    if "state load" in ph:
        rows.append({"phase": "kill -> recovered (replay done)", "ms": 1e3 * ph["replay"][1],
                     "paper ms": PAPER["init_ms"] + PAPER["recovery_ms"]})
    if "catch-up" in ph:
        rows.append({"phase": "kill -> caught up (latency back)", "ms": 1e3 * ph["catch-up"][1],
                     "paper ms": PAPER["caught_up_ms"]})
    return pd.DataFrame(rows, columns=["phase", "ms", "paper ms"])


def save(out: Outcome, output_dir: str | Path) -> Path:
    d = Path(output_dir)
    d.mkdir(parents=True, exist_ok=True)
    s = summary(out).assign(query=out.settings.query, rate=out.rate,
                            standby=out.settings.standby,
                            exactly_once=bool(out.campaign.verdict and out.campaign.verdict.ok))
    s.to_csv(d / "results.csv", index=False)
    out.samples.to_csv(d / "timeline.csv", index=False)
    return d / "results.csv"


def plot(out: Outcome, output_dir: str | None = None, fig=None):
    """Throughput and median latency over time, the kill and the recovery phases marked."""
    import matplotlib.pyplot as plt

    if fig is None:
        fig = plt.figure(figsize=(11, 5.5))
    fig.clear()
    ax, bx = fig.subplots(2, 1, sharex=True)
    s = out.samples
    ax.plot(*_with_downtime(s["t"].to_numpy(), s["tuples_per_s"].to_numpy() / 1e6), lw=1.2)
    ax.axhline(out.rate / 1e6, color="grey", ls=":", lw=1, label="input rate")
    ax.set_ylabel("M tuples/s")
    bx.plot(s["t"], s["latency_p50_ms"], lw=1.2, label="p50")
    bx.fill_between(s["t"], s["latency_p25_ms"], s["latency_p75_ms"], alpha=0.25, lw=0,
                    label="p25-p75")
    bx.set_yscale("log")
    bx.set_ylabel("latency (ms)")
    bx.set_xlabel("seconds after the kill" if out.campaign.kill_walls else "seconds")
    for axis in (ax, bx):
        for k in out.campaign.kill_walls:
            axis.axvline(k - out.campaign.kill_walls[0], color="red", lw=1.5)
        for name in PHASES:
            if name in out.phases:
                lo, hi = out.phases[name]
                axis.axvspan(lo, hi, color=COLORS[name], alpha=0.3, lw=0,
                             label=name if axis is ax else None)
    ax.legend(loc="upper left", fontsize=8, ncol=3)
    bx.legend(loc="upper left", fontsize=8)
    v = out.campaign.verdict
    title = (f"{out.settings.query} at {out.rate / 1e6:.2f} M tuples/s, checkpoints every "
             f"{out.settings.interval:g} s, {'warm standby' if out.settings.standby else 'cold'} "
             f"restart")
    ax.set_title(title + (f" - {v}" if v else ""), fontsize=9)
    return finish(fig, output_dir, "recovery.png", dpi=120)


def _with_downtime(t: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zeros where no process was sampling (between a kill and the restart's first sample),
    instead of a line drawn across the gap."""
    if len(t) < 3:
        return t, y
    step = float(np.median(np.diff(t)))
    gaps = np.flatnonzero(np.diff(t) > 3 * step)
    for i in gaps[::-1]:
        t = np.insert(t, i + 1, [t[i] + step, t[i + 1] - step])
        y = np.insert(y, i + 1, [0.0, 0.0])
    return t, y


class Panel:
    """Failure injection by hand: pick query, load, interval; Start; Kill at any time."""

    def __init__(self, settings: Settings):
        import ipywidgets as w

        self.settings = settings
        self.query = w.Dropdown(options=list(queries.NAMES), value=settings.query,
                                description="query")
        self.load = w.FloatSlider(value=settings.load, min=0.1, max=0.9, step=0.05,
                                  description="load", readout_format=".0%")
        self.interval = w.FloatSlider(value=settings.interval, min=0.2, max=5.0, step=0.2,
                                      description="checkpoint s")
        self.seconds = w.FloatSlider(value=max(30.0, settings.seconds), min=5, max=120, step=5,
                                     description="input s")
        self.standby = w.Checkbox(value=settings.standby, description="warm standby")
        self.start_button = w.Button(description="Start", button_style="success")
        self.kill_button = w.Button(description="Kill (SIGKILL)", button_style="danger",
                                    disabled=True)
        self.status = w.HTML("press Start: the sustainable rate is measured first (3 s)")
        self.figure = w.Output()
        self.start_button.on_click(lambda _: self.start())
        self.kill_button.on_click(lambda _: self.kill())
        self.widget = w.VBox([w.HBox([self.query, self.load, self.interval]),
                              w.HBox([self.seconds, self.standby, self.start_button,
                                      self.kill_button]), self.status, self.figure])
        self.controller: Controller | None = None
        self._ended = threading.Event()  # the campaign ended: the refresher draws once more
        self._done = threading.Event()  # ... and has: the panel is idle again

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)

    def start(self) -> None:
        from dataclasses import replace

        s = replace(self.settings, query=self.query.value, load=self.load.value,
                    interval=self.interval.value, seconds=self.seconds.value,
                    standby=self.standby.value, kill_at=None)
        self.start_button.disabled = True
        self._done.clear()
        self._ended.clear()
        self._refresher = threading.Thread(target=self._refresh, args=(s,), daemon=True)
        self._refresher.start()
        threading.Thread(target=self._campaign, args=(s,), daemon=True).start()

    def kill(self) -> None:
        if self.controller is not None:
            self.controller.request_kill()

    def _campaign(self, s: Settings) -> None:
        try:
            ds = workloads.dataset(queries.workload_of(s.query), s.scale, root=s.data_dir)
            work = Path(s.work_dir or Path(s.data_dir) / "panel-recovery")
            sustainable = sustainable_rate(s, ds, work / "sustainable")
            rate = s.load * sustainable
            self.rate, self.sustainable = rate, sustainable  # before the refresher sees it
            self.controller = controller(s, ds, rate, work / "run")
            self.status.value = (f"running at {rate / 1e6:.2f} M tuples/s "
                                 f"({s.load:.0%} of {sustainable / 1e6:.2f}): press Kill")
            self.kill_button.disabled = False
            camp = self.controller.run([], timeout=s.seconds * 10 + 120)
            self.campaign = camp
            self.status.value = f"<b>{camp.kills} kill(s): {camp.verdict}</b>"
        except Exception as e:  # noqa: BLE001 - shown in the panel
            self.status.value = f"<b style='color:red'>failed: {e}</b>"
        finally:
            self.kill_button.disabled = True
            self._ended.set()
            self._refresher.join()  # the figure shows the end before the panel says done
            self.start_button.disabled = False
            self._done.set()

    def _refresh(self, s: Settings) -> None:
        import matplotlib.pyplot as plt

        fig = plt.figure(figsize=(11, 5.5))
        plt.close(fig)  # drawn into the Output widget only
        while not self._ended.wait(1.0):
            c = self.controller
            if c is None or not c.metrics_log.is_file():
                continue
            camp = c.campaign
            if camp is None:
                continue
            try:
                out = outcome(s, self.rate, self.sustainable, camp, c.metrics_log)
            except (KeyError, ValueError):
                continue  # no sample yet
            self._draw(out, fig)
        if getattr(self, "campaign", None) is not None and self.controller is not None:
            with contextlib.suppress(KeyError, ValueError):  # a run too short to sample
                self._draw(outcome(s, self.rate, self.sustainable, self.campaign,
                                   self.controller.metrics_log), fig)

    def _draw(self, out: Outcome, fig) -> None:
        from IPython.display import clear_output, display

        plot(out, fig=fig)
        with self.figure:
            clear_output(wait=True)
            display(fig)
