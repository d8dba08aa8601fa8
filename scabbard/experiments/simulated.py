"""Notebook 08: the paper's hardware, simulated from costs measured here (docs/design.md).

This machine has 2 cores and one local disk.  The calibrated model
(:mod:`scabbard.sim`) redraws the figures that need the paper's machines:

* **Fig. 7a** on 16 cores and the paper's SSD (950 MB/s): per query, the engine without
  fault tolerance and with it (input persisted, compressed, checkpoints every second);
  the overhead beside the paper's;
* **Fig. 11** on the same SSD: the six data-reduction configurations of notebook 06
  (no-opt, push-up only, compression only, both lossless, both lossy, both without a
  disk) for the queries the paper found disk-bound;
* **Fig. 13**: ingest over 100 Gb/s (the paper's Server C: 1.5 GB/s SSD), with and
  without data reduction, for 1..16 cores, and the cores each query needs to saturate
  the link;
* **Fig. 14**: remote block storage (700 MB/s, 16k IOPS of up to 256 KiB) against no
  disk, for several batch sizes: throughput and 75th-percentile latency.

Every figure is a table first (:func:`fig7a`, :func:`fig11`, :func:`fig13`,
:func:`fig14`), each row one simulated run, then a plot; :class:`WhatIf` is the
ipywidgets panel that answers "what would this query get on that machine?".

The configurations a calibration has no costs for (an older calibration without the
push-up schemes) are left out of a table and named in its ``note`` column.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from scabbard import queries
from scabbard.experiments import finish, save_tables
from scabbard.ft.modes import INTERVAL
from scabbard.sim import PAPER_REMOTE_STORAGE, PAPER_SSD, Calibration, Hardware, SimConfig, simulate
from scabbard.sim import load as load_calibration

# The paper's Server C (§6.1, §6.6): 1.5 GB/s SSD, 90k IOPS; 100 Gb/s RDMA ingest.
PAPER_SERVER_C = Hardware(cores=16, disk_write_mb_s=1500.0, disk_iops=90_000,
                          network_mb_s=100e9 / 8 / 1e6, name="paper: Server C, 100 Gb/s ingest")
PAPER_SERVER_B = replace(PAPER_REMOTE_STORAGE, cores=8)  # c5.4xlarge: 8 cores, EBS
NO_DISK = 1e7  # MB/s: a device that is never the bottleneck ("no disk")

# Fig. 7a: the paper's throughput drop of Scabbard against LightSaber (no FT), in %.
PAPER_OVERHEAD_PCT = {"CM1": 69, "CM2": 45, "SG1": 12, "SG2": 23, "SG3": 11, "LRB1": 11,
                      "LRB2": 11, "LRB3": 11, "YSB": 50, "NQ": 28}
FIG11_QUERIES = ("CM1", "CM2", "SG1", "YSB", "NQ", "SM")
# Fig. 11's configurations -> (compression scheme of the calibration, no disk)
FIG11_CONFIGS = {"no-opt": ("none", False), "p-pu": ("push-up", False),
                 "only-cmp": ("default", False), "both-lossless": ("push-up+default", False),
                 "both-lossy": ("push-up+lossy", False),
                 "both-no-disk": ("push-up+default", True)}
FIG14_QUERIES = ("CM1", "CM2", "SG1", "YSB", "LRB1", "NQ")
PAPER = {
    "7a": "16 cores: Scabbard < 11% below no-FT on SG3, LRB1-3; 69% CM1, 45% CM2, 12% SG1, "
          "23% SG2, up to 2x YSB, 28% NQ",
    "11": "no-opt ~ the disk (780 MB/s); both 7-50x no-opt; lossy +20-40% on CM1, SG1; "
          "no disk 1.2-4x",
    "13": "memory-bound queries saturate 100 Gb/s with < 6 cores; data reduction +65% on SG2-3",
    "14": "CM1-2, SG1, YSB IOPS-bound: bigger batches, up to 12x p75 latency; others < 2x",
}


def _progress(items, desc: str):
    """``items`` with a progress bar (simulating a full figure takes minutes)."""
    from scabbard.progress import bar

    return bar(list(items), desc=desc, unit="query", leave=False)


def default_calibration() -> Path:
    """This machine's calibration (``scabbard sim calibrate`` writes it), else the package's -
    with a warning when that was measured on another machine."""
    from scabbard import paths
    from scabbard.sim.machine import warn_if_elsewhere

    path = paths.calibration()
    warn_if_elsewhere(path)
    return path


@dataclass(frozen=True)
class Settings:
    calibration: str | None = None  # None: this machine's, else the package's (default_calibration)
    queries: Sequence[str] = field(default=queries.NAMES)
    seconds: float = 10.0  # simulated seconds of input per run
    interval: float = INTERVAL  # checkpoint interval, seconds
    cores: Sequence[int] = (1, 2, 4, 6, 8, 12, 16)  # Fig. 13's sweep
    batches_kib: Sequence[int] = (256, 1024, 4096, 16384)  # Fig. 14: KiB per task
    output_dir: str | None = None

    def load(self) -> Calibration:
        return load_calibration(self.calibration or default_calibration())


def _row(r, **keys) -> dict:
    s = r.summary
    return {**keys, "tuples_per_s": r.steady_tuples_per_s or s.tuples_per_s,
            "mb_per_s": (r.steady_tuples_per_s or s.tuples_per_s) * s.row_bytes / 1e6,
            "latency_p50_ms": s.latency_ms.get("p50"), "latency_p75_ms": s.latency_ms.get("p75"),
            "latency_p95_ms": s.latency_ms.get("p95"),
            "written_mb_s": r.written_bytes / 1e6 / max(s.seconds, 1e-9),
            "cores_busy": r.utilisation.get("cores"), "disk_busy": r.utilisation.get("disk"),
            "wall_s": r.wall_s}


def _names(cal: Calibration, wanted: Sequence[str]) -> tuple[list[str], list[str]]:
    have = [q.upper() for q in wanted if q.upper() in cal.queries]
    return have, [q for q in wanted if q.upper() not in cal.queries]


# -- Fig. 7a ---------------------------------------------------------------------------------------
def fig7a(cal: Calibration, s: Settings, hardware: Hardware = PAPER_SSD) -> pd.DataFrame:
    """Per query on 16 cores: no FT, and FT (persisted, reduced input; checkpoints)."""
    rows = []
    names, _ = _names(cal, s.queries)
    for q in _progress(names, "Fig. 7a"):
        base = SimConfig(q, workers=hardware.cores, duration=s.seconds)
        no_ft = simulate(cal, base, hardware)
        scheme = cal.costs(q).best_scheme
        ft = simulate(cal, replace(base, persist=True, compression=scheme,
                                   checkpoint_interval=s.interval), hardware)
        for system, r in (("no FT", no_ft), ("Scabbard", ft)):
            rows.append(_row(r, query=q, system=system, scheme=scheme if r is ft else "",
                             paper_overhead_pct=PAPER_OVERHEAD_PCT.get(q)))
    return pd.DataFrame(rows)


def overheads(table: pd.DataFrame) -> pd.DataFrame:
    """Fig. 7a as one row per query: both throughputs and the drop, beside the paper's."""
    t = table.pivot(index="query", columns="system", values="tuples_per_s")
    out = pd.DataFrame({"no_ft_M": t["no FT"] / 1e6, "ft_M": t["Scabbard"] / 1e6})
    out["overhead_pct"] = (1 - t["Scabbard"] / t["no FT"]) * 100
    out["paper_overhead_pct"] = [PAPER_OVERHEAD_PCT.get(q) for q in out.index]
    order = [q for q in dict.fromkeys(table["query"])]
    return out.reindex(order).reset_index()


# -- Fig. 11 ---------------------------------------------------------------------------------------
def fig11(cal: Calibration, s: Settings, hardware: Hardware = PAPER_SSD) -> pd.DataFrame:
    rows = []
    names, _ = _names(cal, [q for q in s.queries if q.upper() in FIG11_QUERIES] or FIG11_QUERIES)
    for q in _progress(names, "Fig. 11"):
        persist = cal.costs(q).persist
        for config, (scheme, no_disk) in FIG11_CONFIGS.items():
            if scheme not in persist:
                rows.append({"query": q, "config": config, "scheme": scheme,
                             "note": f"not calibrated ({scheme}): calibrate again"})
                continue
            hw = replace(hardware, disk_write_mb_s=NO_DISK, disk_iops=None) if no_disk \
                else hardware
            r = simulate(cal, SimConfig(q, workers=hw.cores, persist=True, compression=scheme,
                                        checkpoint_interval=s.interval, duration=s.seconds), hw)
            rows.append(_row(r, query=q, config=config, scheme=scheme, note="",
                             stored_bytes_per_tuple=persist[scheme].stored_bytes_per_tuple))
    return pd.DataFrame(rows)


# -- Fig. 13 ---------------------------------------------------------------------------------------
def fig13(cal: Calibration, s: Settings, hardware: Hardware = PAPER_SERVER_C) -> pd.DataFrame:
    """Input over the network; per query, reduction and core count: GB/s ingested."""
    rows = []
    names, _ = _names(cal, s.queries)
    for q in _progress(names, "Fig. 13"):
        for reduction, scheme in (("no-opt", "none"), ("reduced", cal.costs(q).best_scheme)):
            for n in s.cores:
                hw = replace(hardware, cores=n)
                r = simulate(cal, SimConfig(q, workers=n, persist=True, compression=scheme,
                                            checkpoint_interval=s.interval,
                                            duration=s.seconds), hw)
                row = _row(r, query=q, reduction=reduction, scheme=scheme, cores=n)
                row["gb_per_s"] = row["mb_per_s"] / 1e3
                row["link_share"] = row["mb_per_s"] / hardware.network_mb_s
                rows.append(row)
    return pd.DataFrame(rows)


def cores_to_saturate(table: pd.DataFrame, share: float = 0.95) -> pd.DataFrame:
    """Per query and reduction: the fewest cores reaching ``share`` of the link (None:
    none of the sweep), and the best GB/s."""
    out = []
    for (q, red), g in table.groupby(["query", "reduction"], sort=False):
        hit = g[g["link_share"] >= share]
        out.append({"query": q, "reduction": red,
                    "cores_to_saturate": int(hit["cores"].min()) if len(hit) else None,
                    "best_gb_per_s": g["gb_per_s"].max()})
    t = pd.DataFrame(out)
    best = t.pivot(index="query", columns="reduction", values="best_gb_per_s")
    gain = (best["reduced"] / best["no-opt"] - 1) * 100
    t["reduction_gain_pct"] = [gain[q] if r == "reduced" else np.nan
                               for q, r in zip(t["query"], t["reduction"], strict=True)]
    return t


# -- Fig. 14 ---------------------------------------------------------------------------------------
def fig14(cal: Calibration, s: Settings,
          hardware: Hardware = PAPER_SERVER_B) -> pd.DataFrame:
    """Remote block storage against no disk, per batch size (the c5.4xlarge: 8 cores)."""
    rows = []
    names, _ = _names(cal, [q for q in s.queries if q.upper() in FIG14_QUERIES] or FIG14_QUERIES)
    for q in _progress(names, "Fig. 14"):
        costs = cal.costs(q)
        scheme = cal.costs(q).best_scheme
        for kib in s.batches_kib:
            batch = max(1, int(kib * 1024 // costs.row_bytes))
            for storage in ("remote", "no disk"):
                hw = hardware if storage == "remote" else replace(
                    hardware, disk_write_mb_s=NO_DISK, disk_iops=None, disk_latency_ms=0.0)
                r = simulate(cal, SimConfig(q, workers=hw.cores, batch_rows=batch, persist=True,
                                            compression=scheme, checkpoint_interval=s.interval,
                                            duration=s.seconds), hw)
                rows.append(_row(r, query=q, storage=storage, batch_kib=kib, batch_rows=batch,
                                 scheme=scheme))
    return pd.DataFrame(rows)


def latency_cost(table: pd.DataFrame) -> pd.DataFrame:
    """Per query: the smallest batch at which remote storage keeps 90% of the no-disk
    throughput, and its p75 latency against no disk's at the smallest batch."""
    out = []
    for q, g in table.groupby("query", sort=False):
        remote = g[g["storage"] == "remote"].set_index("batch_kib")
        local = g[g["storage"] == "no disk"].set_index("batch_kib")
        ok = remote.index[remote["tuples_per_s"] >= 0.9 * local["tuples_per_s"]]
        kib = int(ok.min()) if len(ok) else int(remote.index.max())
        first = int(remote.index.min())
        out.append({"query": q, "batch_kib_needed": kib,
                    "throughput_kept_pct": 100 * remote.loc[first, "tuples_per_s"]
                    / local.loc[first, "tuples_per_s"],
                    "p75_ms_no_disk": local.loc[first, "latency_p75_ms"],
                    "p75_ms_remote": remote.loc[kib, "latency_p75_ms"],
                    "p75_increase": remote.loc[kib, "latency_p75_ms"]
                    / local.loc[first, "latency_p75_ms"]})
    return pd.DataFrame(out)


# -- all four --------------------------------------------------------------------------------------
def run(s: Settings) -> dict[str, pd.DataFrame]:
    cal = s.load()
    tables = {"fig7a": fig7a(cal, s), "fig11": fig11(cal, s), "fig13": fig13(cal, s),
              "fig14": fig14(cal, s)}
    if s.output_dir:
        save_tables(s.output_dir, results=overheads(tables["fig7a"]), **tables)
    return tables


def plot(tables: dict[str, pd.DataFrame], output_dir: str | None = None):
    """Four panels: Fig. 7a, 11, 13 and 14 as simulated."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(15, 9))
    a, b, c, d = axes.ravel()
    _bars(a, tables["fig7a"], "system", "tuples_per_s", 1e6, "M tuples/s (log)",
          "Fig. 7a on 16 cores, 950 MB/s SSD")
    t11 = tables["fig11"]
    _bars(b, t11[t11["note"] == ""] if "note" in t11 else t11, "config", "tuples_per_s", 1e6,
          "M tuples/s (log)", "Fig. 11 on the paper's SSD")
    t13 = tables["fig13"]
    for (q, red), g in t13.groupby(["query", "reduction"], sort=False):
        c.plot(g["cores"], g["gb_per_s"], marker="o", ms=3,
               ls="-" if red == "reduced" else ":", label=f"{q} {red}")
    link = PAPER_SERVER_C.network_mb_s / 1e3
    c.axhline(link, color="k", lw=1)
    c.text(1, link * 1.02, "100 Gb/s", fontsize=8)
    c.set(xlabel="cores", ylabel="GB/s ingested", title="after the paper's Fig. 13, simulated: ingest over 100 Gb/s")
    c.legend(fontsize=6, ncol=3)
    t14 = tables["fig14"]
    for (q, st), g in t14.groupby(["query", "storage"], sort=False):
        d.plot(g["batch_kib"], g["latency_p75_ms"], marker="o", ms=3,
               ls="-" if st == "remote" else ":", label=f"{q} {st}")
    d.set(xscale="log", yscale="log", xlabel="batch KiB", ylabel="p75 latency ms",
          title="after the paper's Fig. 14, simulated: remote block storage (700 MB/s, 16k IOPS)")
    d.legend(fontsize=6, ncol=3)
    return finish(fig, output_dir, "simulated_hardware.png")


def _bars(ax, t: pd.DataFrame, by: str, value: str, scale: float, ylabel: str, title: str):
    qs = list(dict.fromkeys(t["query"]))
    cs = list(dict.fromkeys(t[by]))
    x = np.arange(len(qs))
    w = 0.8 / max(len(cs), 1)
    for i, cname in enumerate(cs):
        r = t[t[by] == cname].set_index("query").reindex(qs)
        ax.bar(x + (i - (len(cs) - 1) / 2) * w, r[value] / scale, w, label=cname)
    ax.set_xticks(x, qs, fontsize=8)
    ax.set(yscale="log", ylabel=ylabel, title=title)
    ax.legend(fontsize=7, ncol=2)


# -- the what-if panel -----------------------------------------------------------------------------
class WhatIf:
    """ipywidgets: a query and a machine in, predicted throughput and recovery out."""

    def __init__(self, calibration: Calibration | str | Path | None = None,
                 query: str = "LRB1"):
        import ipywidgets as w

        self.cal = calibration if isinstance(calibration, Calibration) else \
            load_calibration(calibration or default_calibration())
        names = list(self.cal.queries)
        style = {"description_width": "120px"}
        self.query = w.Dropdown(options=names, value=query if query in names else names[0],
                                description="query", style=style)
        self.cores = w.IntSlider(value=16, min=1, max=64, description="cores", style=style)
        self.speed = w.FloatLogSlider(value=1.0, base=2, min=-2, max=2, step=0.25,
                                      description="core speed x", style=style)
        self.disk = w.FloatLogSlider(value=950, base=10, min=1, max=5, description="disk MB/s",
                                     style=style)
        self.iops = w.FloatLogSlider(value=72_000, base=10, min=3, max=6, description="IOPS",
                                     style=style)
        self.network = w.FloatLogSlider(value=0, base=10, min=-1, max=2.7,
                                        description="network Gb/s", style=style)
        self.local = w.Checkbox(value=True, description="local source (no network)")
        self.interval = w.FloatSlider(value=1.0, min=0.1, max=10, step=0.1,
                                      description="checkpoint s", style=style)
        schemes = list(self.cal.costs(self.query.value).persist)
        self.scheme = w.Dropdown(options=schemes, value=self.cal.costs(self.query.value).best_scheme,
                                 description="codecs", style=style)
        self.fail = w.Checkbox(value=True, description="kill at half time")
        self.seconds = w.FloatSlider(value=10, min=2, max=60, step=1,
                                     description="seconds", style=style)
        self.button = w.Button(description="Simulate", button_style="primary")
        self.out = w.Output()
        self.out.add_class("scabbard-whatif-output")
        self.button.on_click(lambda _: self.show())
        self.query.observe(self._schemes, names="value")
        # every control redraws (a slider when it is let go): the chart follows the machine
        controls = (self.cores, self.speed, self.disk, self.iops, self.network, self.local,
                    self.interval, self.scheme, self.fail, self.seconds)
        for control in controls:
            if hasattr(control, "continuous_update"):
                control.continuous_update = False
            control.observe(lambda _: self.show(), names="value")
        for control in (self.query, *controls):  # wide enough for a label, track and readout
            control.layout.width = "340px"
        self.widget = w.VBox([w.HBox([w.VBox([self.query, self.cores, self.speed, self.disk,
                                              self.iops]),
                                      w.VBox([self.network, self.local, self.interval,
                                              self.scheme]),
                                      w.VBox([self.seconds, self.fail, self.button])],
                                     layout=w.Layout(flex_flow="row wrap")),  # never cut off
                              self.out])
        self.widget.add_class("scabbard-whatif")

    def _schemes(self, change) -> None:
        self.scheme.options = list(self.cal.costs(change["new"]).persist)
        self.scheme.value = self.cal.costs(change["new"]).best_scheme

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)
        self.show()

    def hardware(self) -> Hardware:
        return Hardware(cores=self.cores.value, core_speed=self.speed.value,
                        disk_write_mb_s=self.disk.value,
                        disk_iops=self.iops.value,
                        network_mb_s=None if self.local.value else self.network.value * 125.0,
                        name="what-if")

    def simulate(self):
        """The panel's machine and run: the simulated result."""
        secs = self.seconds.value
        cfg = SimConfig(self.query.value, workers=self.cores.value, persist=True,
                        compression=self.scheme.value, checkpoint_interval=self.interval.value,
                        duration=secs, fail_at=secs / 2 if self.fail.value else None)
        return simulate(self.cal, cfg, self.hardware())

    def show(self) -> None:
        """Simulate; the description and the chart replace the last ones in the output area
        (its ``outputs`` set, so it works from a callback, a cell or any thread)."""
        import base64
        import io

        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        from scabbard.sim.report import describe

        def text(line: str) -> dict:
            return {"output_type": "stream", "name": "stdout", "text": line + "\n"}

        try:
            r = self.simulate()
        except ValueError as e:
            self.out.outputs = (text(f"cannot simulate that: {e}"),)
            return
        tl = r.timeline
        fig = Figure(figsize=(10, 3))
        FigureCanvasAgg(fig)
        ax = fig.subplots()
        ax.plot(tl["t"], tl["tuples_per_s"] / 1e6, label="M tuples/s")
        ax.set(xlabel="simulated s", ylabel="M tuples/s")
        bx = ax.twinx()
        bx.plot(tl["t"], tl["latency_p50_ms"], color="tab:red", lw=1, label="p50 ms")
        bx.set_ylabel("p50 latency ms")
        if r.recovery:
            ax.axvline(r.recovery["failed_at"], color="k", ls="--", lw=1)
        fig.tight_layout()
        png = io.BytesIO()
        fig.savefig(png, format="png", dpi=90)
        self.out.outputs = (text(describe(r)), {
            "output_type": "display_data", "metadata": {},
            "data": {"image/png": base64.b64encode(png.getvalue()).decode(),
                     "text/plain": f"{self.query.value} on {self.cores.value} cores"}})
