"""Notebook 04: a kill, live - throughput and latency across a failure (paper Fig. 10).

The query runs fault-tolerantly as its own process (persisted input, checkpoints every
``interval`` s, clocked exactly-once output) with its input arriving at ``load`` times
its sustainable rate - measured first, in the same configuration - so it can catch up
after a failure.  :class:`scabbard.ft.controller.Controller` kills it with SIGKILL
``kill_at`` seconds in and restarts it with ``--recover``, cold (a new process) or from a
warm standby; the output is then compared with a failure-free run.

The recovery breakdown, from the kill: process start (spawn -> interpreter and imports
done), code loading (compiled kernels from numba's on-disk cache) and - at the same time, on
the other core - state load (storage and output opened, checkpoint state read), replay (the stored input after the
checkpoint re-processed) and catch-up (until latency is back to its pre-failure level:
the first sample whose median latency is within ``caught_up_factor`` of the median before
the kill).  With a standby, process start and code loading happened before the failure.

The same experiment driven by hand - Start, Kill whenever, watch the timeline live - is
:class:`scabbard.experiments.recovery_panel.Panel`; it draws with :func:`outcome` and :func:`plot`
from a live metrics log (``now``: the phases under way end there).
"""

from __future__ import annotations

import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from scabbard import queries, workloads
from scabbard.engine import EngineConfig
from scabbard.experiments import Common, finish, scratch, wide
from scabbard.ft.controller import Campaign, Controller, campaign_config
from scabbard.ft.modes import INTERVAL
from scabbard.ft.recovery import run_fault_tolerant
from scabbard.ft.sinks import ClockedSink
from scabbard.outputs import read_metrics

PHASES = ("process start", "code loading", "state load", "replay", "catch-up")
# "restart": a live run between a kill and the restarted engine's first event, whose
# phases (process start, code loading, state load) are known only once it has started
COLORS = dict(zip(PHASES + ("restart",),
                  ("#dd8452", "#c44e52", "#8172b3", "#55a868", "#ccb974", "#999999"), strict=True))
# Fig. 10 of the paper (LRB1, half the sustainable rate, EBS): ~360 ms initialisation
# (memory pre-allocation, precompiled code), ~100 ms recovery, latency at its pre-failure
# level within 2 s.
PAPER = {"init_ms": 360.0, "recovery_ms": 100.0, "caught_up_ms": 2000.0}


@dataclass(frozen=True)
class Settings(Common):
    query: str = "LRB1"
    load: float = 0.5  # input rate as a share of the sustainable rate
    rate: float | None = None  # tuples/s; None: load x the measured sustainable rate
    interval: float = INTERVAL  # checkpoint interval, s
    seconds: float = 12.0  # length of the input at the rate, s
    kill_at: float | None = 5.0  # seconds after the start; None: no kill
    batch: int | None = 262_144  # tuples per task (small: latency is the point here)
    workers: int = 2
    standby: bool = False
    metrics_interval: float = 0.1
    caught_up_factor: float = 1.25
    adaptive_kernels: bool = False  # every incarnation's --adaptive-kernels
    work_dir: str | None = None  # default: a scratch folder next to the data
    rounds: int = 3  # kills of each kind (scabbard bench restart)

    def __post_init__(self) -> None:
        if not (isinstance(self.rounds, int) and self.rounds >= 1):
            raise ValueError(f"rounds must be a whole number >= 1, got {self.rounds!r}")


@dataclass
class Outcome:
    settings: Settings
    rate: float
    sustainable: float | None
    campaign: Campaign
    samples: pd.DataFrame  # t: seconds relative to the kill (or the start)
    events: pd.DataFrame
    phases: dict = field(default_factory=dict)  # name -> (start, end) seconds after the kill
    origin: float = 0.0  # wall clock of t = 0
    recoveries: list = field(default_factory=list)  # each kill's phases, in t

    @property
    def exactly_once(self) -> bool:
        """The output compared with a failure-free run's: nothing lost, duplicated or
        different."""
        return bool(self.campaign.verdict and self.campaign.verdict.ok)


class NoSamples(ValueError):
    """The metrics log holds no sample yet (a live panel asks before the engine sampled)."""


_SUSTAINABLE: dict[tuple, float] = {}  # measured rates of this process (a kernel session)
_SUSTAINABLE_LOCK = threading.Lock()


def sustainable_rate(settings: Settings, ds, folder: Path, seconds: float = 3.0) -> float:
    """The query's throughput with full fault tolerance and no rate limit (tuples/s)."""
    shutil.rmtree(folder, ignore_errors=True)
    try:
        r = run_fault_tolerant(queries.get(settings.query), ds, folder / "storage",
                               ClockedSink(folder / "output"),
                               EngineConfig(workers=settings.workers, batch_rows=settings.batch),
                               interval=settings.interval, duration=seconds)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return r.run.summary.tuples_per_s


def measured_rate(settings: Settings, ds, folder: Path) -> tuple[float, bool]:
    """:func:`sustainable_rate`, measured once per query, dataset, workers and batch in this
    process (a kernel session) and then reused; ``(rate, reused)``."""
    key = (settings.query, str(Path(ds.path).resolve()), settings.workers, settings.batch)
    with _SUSTAINABLE_LOCK:  # two panels starting at once measure once
        if key in _SUSTAINABLE:
            return _SUSTAINABLE[key], True
        _SUSTAINABLE[key] = sustainable_rate(settings, ds, folder)
        return _SUSTAINABLE[key], False


def controller(settings: Settings, ds, rate: float, folder: Path) -> Controller:
    shutil.rmtree(folder, ignore_errors=True)
    return Controller(campaign_config(
        settings.query, ds.path, folder, max_tuples=int(rate * settings.seconds),
        workers=settings.workers, batch_rows=settings.batch, rate=rate,
        metrics_interval=settings.metrics_interval, adaptive_kernels=settings.adaptive_kernels,
        interval=settings.interval), standby=settings.standby)


def run(settings: Settings, log=print) -> Outcome:
    """Measure the sustainable rate (unless given), run at ``load`` of it, kill, recover."""
    ds = workloads.dataset(queries.workload_of(settings.query), settings.scale,
                           root=settings.data_dir)
    with scratch(settings.work_dir, settings.data_dir, "scabbard-recovery-") as root:
        sustainable = None
        rate = settings.rate
        if rate is None:
            sustainable, reused = measured_rate(settings, ds, root / "sustainable")
            rate = settings.load * sustainable
            log(f"{settings.query}: sustainable {sustainable / 1e6:.2f} M tuples/s with fault "
                f"tolerance{' (measured before in this session)' if reused else ''}; "
                f"input at {settings.load:.0%}: {rate / 1e6:.2f} M tuples/s")
        c = controller(settings, ds, rate, root / "run")
        camp = c.run([settings.kill_at] if settings.kill_at is not None else [])
        log(f"{camp.kills} kill(s), {camp.restarts} restart(s)"
            + (" from a warm standby" if camp.standby_takeovers else "")
            + f"; {camp.verdict}")
        return outcome(settings, rate, sustainable, camp, c.metrics_log)


def outcome(settings: Settings, rate: float, sustainable: float | None, camp: Campaign,
            metrics_log: Path, origin: float | None = None, now: float | None = None) -> Outcome:
    """Read the metrics log of a campaign into a timeline and a recovery breakdown.

    Times are seconds from ``origin`` (wall clock; default: the first kill, else the first
    record).  ``now`` (wall clock): the campaign is live, each recovery under way is drawn up
    to it.  ``phases`` is always the first kill's, in seconds after that kill."""
    m = read_metrics(metrics_log)
    if m.empty or "event" not in m:
        raise NoSamples(f"no metrics record in {metrics_log} yet")
    if origin is None:
        origin = camp.kill_walls[0] if camp.kill_walls else float(m["wall"].min())
    samples = m[m["event"] == "sample"].assign(t=lambda d: d["wall"] - origin)
    if samples.empty:
        raise NoSamples(f"no metrics sample in {metrics_log} yet")
    events = m[m["event"] != "sample"].assign(t=lambda d: d["wall"] - origin)
    out = Outcome(settings, rate, sustainable, camp, samples.reset_index(drop=True),
                  events.reset_index(drop=True), origin=origin)
    kills = [k - origin for k in camp.kill_walls]
    live = None if now is None else now - origin
    out.recoveries = [breakdown(out.samples, out.events, settings.caught_up_factor, kill=k,
                                now=live, until=kills[i + 1] if i + 1 < len(kills) else None)
                      for i, k in enumerate(kills)]
    if kills:
        first = breakdown(out.samples, out.events, settings.caught_up_factor, kill=kills[0],
                          until=kills[1] if len(kills) > 1 else None)
        out.phases = {name: tuple(x - kills[0] for x in span) if name in PHASES else span
                      for name, span in first.items()}
    return out


def _incarnation_after_kill(events: pd.DataFrame, kill: float = 0.0,
                            until: float | None = None) -> dict:
    """Phase and recovery times of the incarnation that recovered from the kill at ``kill``:
    the events from the first ``start`` after it (before ``until``) to the next ``start``."""
    starts = events.index[events["event"] == "start"]
    t = events.loc[starts, "t"]
    after = starts[(t > kill) & (t < until if until is not None else True)]
    if not len(after):
        return {}
    later = starts[starts > after[0]]
    block = events.loc[after[0]:later[0] - 1] if len(later) else events.loc[after[0]:]
    block = block[block["event"].isin(["phase", "recovery"])]
    return dict(zip(block["phase"], block["t"], strict=True))


def breakdown(samples: pd.DataFrame, events: pd.DataFrame, factor: float = 1.25,
              kill: float = 0.0, now: float | None = None, until: float | None = None) -> dict:
    """Recovery phases of the kill at ``kill`` as ``name -> (start, end)``, in the samples'
    time (seconds; by default the kill is at 0).

    With ``now`` (the run is live) a phase under way ends at ``now``: ``restart`` from the
    kill until the restarted engine reports its phases (all at once, when it starts), then
    ``replay`` until it reports the replay done, then ``catch-up`` until latency is back.
    ``until``: the next kill, where every phase of this recovery stops.  ``_under_way``
    names the phase still going on at ``now``, if any."""
    at = _incarnation_after_kill(events, kill, until)
    end_of = until if now is None else now if until is None else min(now, until)
    if "state_loaded" not in at:  # restarting (live), or killed again before it started
        if end_of is None or end_of <= kill:
            return {}
        return {"restart": (kill, end_of)} | ({"_under_way": "restart"} if end_of == now else {})
    before = samples[(samples["t"] < kill) & (samples["t"] > kill - 3.0)]
    level = float(np.nanmedian(before["latency_p50_ms"])) if len(before) else float("nan")
    standby = "activated" in at
    phases = {}
    if not standby:
        phases["process start"] = (kill, at["started"])
        phases["code loading"] = (at["started"], at["code_loaded"])
    # a cold restart loads the code on a thread while the state loads ("loading": when the
    # storage was opened; a log before it had the two one after the other)
    load_from = at.get("loading", at["activated"] if standby else at["code_loaded"])
    phases["state load"] = (max(kill, load_from), at["state_loaded"])
    ready = at["state_loaded"] if standby else max(at["state_loaded"], at["code_loaded"])
    replaying = "replayed" not in at and now is not None
    end = at.get("replayed", end_of if replaying else ready)
    phases["replay"] = (ready, end)
    after = samples[(samples["t"] > end) & (samples["tuples_per_s"] > 0)]
    if until is not None:
        after = after[after["t"] < until]
    ok = after[after["latency_p50_ms"] <= factor * level]
    if len(ok) and not replaying:
        phases["catch-up"] = (end, float(ok["t"].iloc[0]))
    elif now is not None and not replaying and end_of > end:
        phases["catch-up"] = (end, end_of)
    under_way = "replay" if replaying else "catch-up" if "catch-up" in phases else None
    if under_way is not None and phases[under_way][1] == now:
        phases["_under_way"] = under_way
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
                            exactly_once=out.exactly_once)
    s.to_csv(d / "results.csv", index=False)
    out.samples.to_csv(d / "timeline.csv", index=False)
    return d / "results.csv"


def plot(out: Outcome, output_dir: str | None = None, fig=None):
    """Throughput and median latency over time, each kill and its recovery phases marked."""
    if fig is None:
        import matplotlib.pyplot as plt

        fig = plt.figure(figsize=(11, 5.5))
    Timeline(fig).update(out)
    from scabbard.experiments import caption

    caption(fig, f"{out.settings.scale} scale, one kill (SIGKILL), after the paper's Fig. 10")
    return finish(fig, output_dir, "recovery.png", dpi=120)


class Timeline:
    """The figure of :func:`plot` and the kill panel's live chart: throughput and latency
    over time, each kill (red) and its recovery phases (shaded).  The artists are made once and
    :meth:`update` moves them to a new :class:`Outcome`, so a live chart redraws in ~0.1 s of
    CPU (a new figure each time took 0.3-0.5 s on this 2-core machine beside the engine).

    Latency is on a log scale over the samples that measured one (a sample with no result has
    latency 0 or none): those have no point, and with none at all the axis says so."""

    def __init__(self, fig):
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
        from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

        fig.clear()
        self.fig = fig
        self.ax, self.bx = ax, bx = fig.subplots(2, 1, sharex=True)
        (self.tput,) = ax.plot([], [], lw=1.2, color="C0")
        self.rate = ax.axhline(0.0, color="grey", ls=":", lw=1)
        (self.p50,) = bx.plot([], [], lw=1.2, color="C0")
        self.band = None  # p25-p75, remade each update
        self.marks: list = []  # kills and phases, remade each update
        ax.set_ylabel("M tuples/s")
        bx.set_yscale("log")
        bx.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0), numticks=8))
        bx.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        bx.yaxis.set_minor_locator(NullLocator())
        bx.set_ylabel("latency (ms)")
        self.empty = bx.text(0.5, 0.5, "no latency measured yet", transform=bx.transAxes,
                             ha="center", va="center", color="grey", visible=False)
        ax.legend(handles=[Line2D([], [], color="grey", ls=":", label="input rate"),
                           Line2D([], [], color="red", lw=1.5, label="kill"),
                           Patch(color="C0", alpha=0.25, lw=0, label="latency p25-p75")]
                  + [Patch(color=COLORS[n], alpha=0.3, lw=0, label=n)
                     for n in PHASES + ("restart",)],
                  loc="upper left", fontsize=7, ncol=5)

    def update(self, out: Outcome) -> None:
        ax, bx, s = self.ax, self.bx, out.samples
        t = s["t"].to_numpy(dtype=float)
        tput = s["tuples_per_s"].to_numpy(dtype=float) / 1e6
        self.tput.set_data(*_with_downtime(t, tput))
        self.rate.set_ydata([out.rate / 1e6] * 2)
        none = pd.Series(np.nan, index=s.index)
        lat = {q: s.get(f"latency_{q}_ms", none).where(lambda x: x > 0).to_numpy(dtype=float)
               for q in ("p25", "p50", "p75")}
        self.p50.set_data(*_with_downtime(t, lat["p50"], np.nan))
        if self.band is not None:
            self.band.remove()
            self.band = None
        lo, hi = (_with_downtime(t, lat[q], np.nan) for q in ("p25", "p75"))
        both = np.isfinite(lo[1]) & np.isfinite(hi[1])
        if both.any():
            self.band = bx.fill_between(lo[0], lo[1], hi[1], where=both, color="C0",
                                        alpha=0.25, lw=0)
        for mark in self.marks:
            mark.remove()
        self.marks = []
        kills = [k - out.origin for k in out.campaign.kill_walls]
        ends = [*t[-1:], *kills]
        for axis in (ax, bx):
            self.marks += [axis.axvline(k, color="red", lw=1.5) for k in kills]
            for phases in out.recoveries or ([out.phases] if out.phases else []):
                for name in PHASES + ("restart",):
                    if name in phases:
                        self.marks.append(axis.axvspan(*phases[name], color=COLORS[name],
                                                       alpha=0.3, lw=0))
                        ends.append(phases[name][1])
        ax.set_xlim(min([0.0, *t[:1]]) - 0.2, max([1.0, *ends]) + 0.2)  # a kill at 0 shows
        # headroom above the line for the legend
        ax.set_ylim(0.0, 1.5 * max(out.rate / 1e6, float(np.nanmax(tput, initial=0.0)), 1e-3))
        measured = np.concatenate([v[np.isfinite(v)] for v in lat.values()])
        self.empty.set_visible(not len(measured))
        bx.set_ylim(*((measured.min() / 1.5, measured.max() * 1.5) if len(measured)
                      else (1.0, 1000.0)))
        at_kill = bool(kills) and out.origin == out.campaign.kill_walls[0]
        bx.set_xlabel("seconds after the kill" if at_kill else "seconds since the start")
        v = out.campaign.verdict
        ax.set_title(f"{out.settings.query} at {out.rate / 1e6:.2f} M tuples/s, checkpoints every "
                     f"{out.settings.interval:g} s, "
                     f"{'warm standby' if out.settings.standby else 'cold'} restart"
                     + (f" - {v}" if v else ""), fontsize=9)


def _gaps(t: np.ndarray) -> tuple[np.ndarray, float]:
    """Where no process was sampling: the indices after which the next sample is more than
    three sampling steps later (a kill, then the restart's first sample), and the step."""
    if len(t) < 3:
        return np.zeros(0, np.int64), 0.0
    step = float(np.median(np.diff(t)))
    return np.flatnonzero(np.diff(t) > 3 * step), step


def outage_segments(t: np.ndarray) -> np.ndarray:
    """Each sample's segment: 0 until the first outage, then 1, ... - a line drawn per
    segment breaks where no process was running."""
    seg = np.zeros(len(t), np.int64)
    for i in _gaps(np.asarray(t, dtype=float))[0]:
        seg[i + 1:] += 1
    return seg


def _with_downtime(t: np.ndarray, y: np.ndarray, fill: float = 0.0
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``fill`` (zero throughput, no latency: NaN) where no process was sampling (between a
    kill and the restart's first sample), instead of a line drawn across the gap."""
    gaps, step = _gaps(t)
    if not len(gaps):
        return t, y
    y = y.astype(float)
    for i in gaps[::-1]:
        t = np.insert(t, i + 1, [t[i] + step, t[i + 1] - step])
        y = np.insert(y, i + 1, [fill, fill])
    return t, y


def restarts(settings: Settings, rounds: int = 3, log=print) -> pd.DataFrame:
    """``rounds`` kills of ``settings``' run recovered by a cold restart and by a warm
    standby, in turn (``scabbard bench restart``): one row per recovery and phase, in ms."""
    from dataclasses import replace

    rows = []
    for k in range(rounds):
        for standby in (False, True):
            out = run(replace(settings, standby=standby), log=lambda *_: None)
            mode = "warm standby" if standby else "cold restart"
            replayed = replay_tuples(out)
            for r in summary(out).to_dict("records"):
                rows.append({"round": k, "restart": mode, "phase": r["phase"], "ms": r["ms"],
                             "replay_tuples": replayed, "exactly_once": out.exactly_once})
            ms = {r["phase"]: r["ms"] for r in rows if r["round"] == k and r["restart"] == mode}
            total = next((v for p, v in ms.items() if p.startswith("kill -> recovered")),
                         float("nan"))
            log(f"round {k + 1}/{rounds}, {mode}: kill -> recovered {total:.0f} ms (replay of "
                f"{replayed / 1e6:.2f} M tuples in {ms.get('replay', float('nan')):.0f} ms), "
                f"exactly once: {out.exactly_once}")
    return pd.DataFrame(rows)


def replay_tuples(out: Outcome) -> float:
    """The input tuples the first kill's recovery replayed (stored after its checkpoint)."""
    ev = out.events
    if not out.campaign.kill_walls or "state_replay_tuples" not in ev:
        return float("nan")
    kill = out.campaign.kill_walls[0] - out.origin
    rec = ev[(ev["event"] == "recovery") & (ev["phase"] == "resume") & (ev["t"] > kill)]
    return float(rec["state_replay_tuples"].iloc[0]) if len(rec) else float("nan")


def restart_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per restart and phase: the median ms and the spread (min - max) over the rounds."""
    g = runs.groupby(["restart", "phase"], sort=False)["ms"]
    out = pd.DataFrame({"median ms": g.median(), "min ms": g.min(), "max ms": g.max(),
                        "rounds": g.count()})
    if "replay_tuples" in runs:  # what the replays had to do: the input after the checkpoint
        replayed = runs.groupby(["restart", "phase"], sort=False)["replay_tuples"].median()
        out["replay M tuples (median)"] = replayed / 1e6
    return out.reset_index()


def bench_restarts(settings: Settings, out: Path, log=print) -> int:
    """``scabbard bench restart``: ``settings.rounds`` kills of each kind, their phases
    (medians), the runs in ``out``/restarts.csv; 1 if any recovery was not exactly once."""
    runs = restarts(settings, settings.rounds, log=log)
    with wide():
        log("\n" + restart_summary(runs).round(1).to_string(index=False))
    Path(out).mkdir(parents=True, exist_ok=True)
    runs.to_csv(Path(out) / "restarts.csv", index=False)
    log(f"\nresults: {Path(out) / 'restarts.csv'}")
    return 0 if runs["exactly_once"].all() else 1
