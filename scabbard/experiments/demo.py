"""The demo (``make demo``, ``scabbard demo``, notebook ``demo``): the workbench in a few
minutes, each part a call into the modules the figure notebooks use.

1. :func:`kill_and_recover` - a query runs fault-tolerantly as its own process (input
   persisted, checkpoints, clocked exactly-once output) at half its sustainable rate, is
   killed with SIGKILL half-way, restarted with ``--recover``, and its committed output is
   compared with a failure-free run: the exactly-once verdict and the recovery's phases
   (notebook 04, paper Fig. 10).
2. :func:`explain_pushup` - persistence push-up (paper §3.4): the plan before and after,
   and the bytes persisted per input tuple, measured on the dataset (``scabbard explain``).
3. :func:`breakdown` - what push-up and compression buy, measured: throughput and bytes
   written per tuple in the configurations of the paper's Fig. 11 (notebook 06), short runs.
4. :func:`what_if` - the calibrated simulator on the paper's 16-core SSD machine: the
   query's throughput without and with fault tolerance for 1 to 16 cores (notebook 08).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from scabbard import queries, workloads
from scabbard.experiments import Common, finish, scratch
from scabbard.ft.modes import INTERVAL


@dataclass(frozen=True)
class Settings(Common):
    query: str = "YSB"  # the killed run: one dataset for the whole demo (Fig. 10 used LRB1)
    explain_query: str = "YSB"  # push-up's largest saving: one event type of three, 2 of 7 fields
    load: float = 0.5  # the killed run's input rate, share of its sustainable rate
    interval: float = INTERVAL  # checkpoint interval, s
    seconds: float = 8.0  # length of the killed run's input at that rate
    kill_at: float = 4.0  # SIGKILL once this many seconds of the input were processed
    batch: int = 262_144  # tuples per task of the killed run
    breakdown_queries: Sequence[str] = ("YSB",)
    breakdown_configs: Sequence[str] = ("no-opt", "p-pu", "only-cmp", "both-lossless")
    breakdown_seconds: float = 3.0  # per run
    breakdown_rounds: int = 3  # each configuration this many times, interleaved: the spread
    sim_cores: Sequence[int] = (1, 2, 4, 8, 16)
    sim_seconds: float = 2.0  # simulated seconds per run
    calibration: str | None = None  # None: the package's (scabbard.paths.calibration)

    def __post_init__(self):
        for q in (self.query, self.explain_query, *self.breakdown_queries):
            queries.workload_of(q)  # an unknown query is a one-line error, before any run
        if not 0 < self.kill_at < self.seconds:
            raise ValueError(f"kill_at must lie within (0, seconds), got {self.kill_at}")


def workloads_needed(s: Settings) -> list[str]:
    names = [queries.workload_of(q) for q in (s.query, s.explain_query, *s.breakdown_queries)]
    return list(dict.fromkeys(names))


def datasets(s: Settings, generate: bool = True) -> pd.DataFrame:
    """The datasets the demo reads (generated with Spark where missing): one row each."""
    rows = []
    for name in workloads_needed(s):
        t0 = time.perf_counter()
        ds = workloads.dataset(name, s.scale, root=s.data_dir, generate=generate)
        rows.append({"workload": name, "rows": ds.rows, "row bytes": ds.schema.row_bytes,
                     "MB": round(ds.stream.nbytes / 1e6, 1), "path": str(ds.path),
                     "seconds": round(time.perf_counter() - t0, 1)})
    return pd.DataFrame(rows)


# -- 1. a kill, recovered ------------------------------------------------------------------------
def kill_and_recover(s: Settings, log=print):
    """The killed and recovered run: a :class:`scabbard.experiments.recovery.Outcome`
    (its ``campaign.verdict`` is the exactly-once comparison).  The kill comes once the
    engine has processed ``kill_at`` seconds of its input and written a checkpoint - an
    event, not a time: a loaded machine starts the process later, but it is always killed
    in the middle of its run."""
    from scabbard.experiments import recovery

    rs = recovery.Settings(query=s.query, scale=s.scale, data_dir=s.data_dir, load=s.load,
                           interval=s.interval, seconds=s.seconds, kill_at=None, batch=s.batch)
    ds = workloads.dataset(queries.workload_of(s.query), s.scale, root=s.data_dir)
    with scratch(None, s.data_dir, "scabbard-demo-") as root:
        t0 = time.perf_counter()
        sustainable = recovery.sustainable_rate(rs, ds, root / "sustainable")
        rate = s.load * sustainable
        log(f"{s.query}: sustainable {sustainable / 1e6:.2f} M tuples/s with fault tolerance "
            f"(measured in {time.perf_counter() - t0:.0f} s); input at {s.load:.0%}: "
            f"{rate / 1e6:.2f} M tuples/s for {s.seconds:g} s")
        c = recovery.controller(rs, ds, rate, root / "run")
        done: dict = {}

        def campaign() -> None:
            try:
                done["campaign"] = c.run([], timeout=max(600.0, 20 * s.seconds))
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                done["error"] = e

        thread = threading.Thread(target=campaign, daemon=True)
        t0 = time.perf_counter()
        thread.start()
        when = _kill_mid_run(c, int(rate * s.kill_at), thread)
        thread.join()
        if "error" in done:
            raise done["error"]
        camp = done["campaign"]
        log(("killed with SIGKILL after " + when if when else "finished before the kill")
            + f"; {camp.restarts} restart(s); campaign and verification "
            f"{time.perf_counter() - t0:.0f} s; {camp.verdict}")
        return recovery.outcome(rs, rate, sustainable, camp, c.metrics_log)


def _kill_mid_run(c, tuples: int, thread: threading.Thread, poll: float = 0.1) -> str:
    """Request the kill once the running engine logged a checkpoint and ``tuples`` input
    tuples; what it had done then ('' if the run ended first)."""
    from scabbard.outputs import read_metrics

    while thread.is_alive():
        time.sleep(poll)
        if not c.metrics_log.is_file():
            continue
        m = read_metrics(c.metrics_log)
        if m.empty or "event" not in m:
            continue
        checkpoints = int((m["event"] == "checkpoint").sum())
        samples = m[m["event"] == "sample"]
        done = int(samples["tuples"].iloc[-1]) if len(samples) else 0
        if checkpoints and done >= tuples:
            c.request_kill()
            return f"{done:,} input tuples and {checkpoints} checkpoint(s)"
    return ""


def verdict(out) -> pd.DataFrame:
    """The exactly-once verdict of a killed run as a one-row table."""
    v = out.campaign.verdict
    row = {"query": out.settings.query, "input M tuples/s": round(out.rate / 1e6, 2),
           "kills (SIGKILL)": out.campaign.kills, "restarts": out.campaign.restarts,
           "exactly once": bool(v and v.ok)}
    if v is not None:
        row.update({"results compared": v.compared, "lost": v.lost,
                    "duplicated": v.duplicated, "different": v.different})
    return pd.DataFrame([row])


# -- 2. push-up, explained -----------------------------------------------------------------------
def explain_pushup(s: Settings, rows: int = 1 << 20) -> tuple[str, pd.DataFrame]:
    """``scabbard explain``'s text for ``explain_query`` and its bytes per input tuple."""
    from scabbard.engine.pushup import explain, footprint

    q = queries.get(s.explain_query)
    ds = workloads.dataset(queries.workload_of(q.name), s.scale, root=s.data_dir)
    fp = footprint(q, ds, rows=rows)
    table = [{"persisted": "before push-up (every attribute, raw)",
              "bytes per input tuple": float(fp.row_bytes)}]
    if fp.pushed_bytes is not None:
        table.append({"persisted": f"after push-up (kept {fp.selectivity:.0%} of the tuples, "
                                   f"{fp.kept_bytes} B each)",
                      "bytes per input tuple": fp.pushed_bytes})
    for scheme, b in fp.compressed.items():
        table.append({"persisted": f"after push-up + {scheme} compression",
                      "bytes per input tuple": b})
    t = pd.DataFrame(table)
    t["less than before"] = (fp.row_bytes / t["bytes per input tuple"]).map(lambda x: f"{x:.1f}x")
    return explain(q, fp), t


# -- 3. push-up and compression, measured --------------------------------------------------------
def breakdown(s: Settings, log=print) -> pd.DataFrame:
    """Notebook 06's runs (after the paper's Fig. 11): each configuration ``breakdown_rounds``
    times for ``breakdown_seconds``, interleaved - the tidy table of
    :func:`scabbard.experiments.optimization.run`, one row per run."""
    from scabbard.experiments import optimization

    return optimization.run(optimization.Settings(
        queries=tuple(s.breakdown_queries), configs=tuple(s.breakdown_configs), scale=s.scale,
        data_dir=s.data_dir, seconds=s.breakdown_seconds, rounds=s.breakdown_rounds), log=log)


# -- 4. 16 cores, simulated ----------------------------------------------------------------------
def what_if(s: Settings) -> pd.DataFrame:
    """The query on the paper's 16-core SSD machine, simulated for each of ``sim_cores``:
    without fault tolerance and with it (input persisted as Scabbard persists it -
    push-up and compression - and checkpoints every ``interval``)."""
    from scabbard.experiments.simulated import default_calibration
    from scabbard.sim import PAPER_SSD, SimConfig, simulate
    from scabbard.sim import load as load_calibration

    cal = load_calibration(s.calibration or default_calibration())
    scheme = cal.costs(s.query).best_scheme
    rows = []
    for n in s.sim_cores:
        hw = replace(PAPER_SSD, cores=n)
        base = SimConfig(s.query, workers=n, duration=s.sim_seconds)
        for config, cfg in (("no fault tolerance", base),
                            (f"fault tolerance ({scheme})",
                             replace(base, persist=True, compression=scheme,
                                     checkpoint_interval=s.interval))):
            r = simulate(cal, cfg, hw)
            rows.append({"cores": n, "config": config,
                         "tuples_per_s": r.steady_tuples_per_s or r.summary.tuples_per_s,
                         "latency_p50_ms": r.summary.latency_ms.get("p50"),
                         "cores_busy": r.utilisation.get("cores"),
                         "disk_busy": r.utilisation.get("disk")})
    return pd.DataFrame(rows)


def plot_what_if(table: pd.DataFrame, query: str, output_dir: str | None = None):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for config, t in table.groupby("config", sort=False):
        ax.plot(t["cores"], t["tuples_per_s"] / 1e6, marker="o", label=config)
    ax.set_xlabel("cores (the paper's server: 950 MB/s SSD)")
    ax.set_ylabel("M tuples/s (simulated)")
    ax.set_title(f"{query} on 1-16 cores, simulated from costs measured here", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return finish(fig, output_dir, "what_if_cores.png")


def run_demo(scale: str, data_dir: Path, runs_dir: Path | None = None, log=print) -> bool:
    """``scabbard demo``: the datasets it needs (generated with Spark on first use), then the
    demo notebook into a report under ``runs_dir`` (default: the project's runs folder);
    where the report and its figures are.  True if the notebook ran to its end."""
    from scabbard.experiments import report
    from scabbard.experiments.progress import clock
    from scabbard.experiments.reproduce import load_experiments, reproduce
    from scabbard.sparksession import stop_active_session

    t0 = time.perf_counter()
    params = load_experiments()["demo"].parameters(scale)
    s = Settings(scale=params.get("scale", scale), data_dir=str(data_dir))
    log(f"[demo] datasets ({', '.join(workloads_needed(s))}, scale {s.scale}) under {data_dir}")
    log(datasets(s).to_string(index=False))
    stop_active_session()  # its JVM is not needed while the notebook measures
    log(f"[demo] datasets ready in {clock(time.perf_counter() - t0)}; now the demo notebook")
    result = reproduce(only=["demo"], scale=scale, runs_dir=runs_dir, data_dir=data_dir,
                       log=log)
    (r,) = result.results
    log(f"\n[demo] {'done' if r.ok else 'FAILED: ' + r.error} in "
        f"{clock(time.perf_counter() - t0)}")
    log(f"report:   {result.run_dir / 'index.html'}")
    log(f"notebook: {r.output.with_suffix('.html')}")
    figures = report.figures(r.output.parent)
    charts = sorted(p for p in r.output.parent.rglob("*.html") if p.suffix == ".html"
                    and p != r.output.with_suffix(".html"))
    log("figures:  " + ", ".join(str(f.relative_to(r.output.parent)) for f in figures))
    log("interactive: " + ", ".join(str(c.relative_to(r.output.parent)) for c in charts))
    return r.ok

