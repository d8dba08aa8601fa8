"""Interactive charts (Altair) for the figures a person explores: timelines and latency
candlesticks.  Hover for the values, drag to pan, scroll to zoom (double-click resets).

Each chart builder returns an ``altair.Chart`` from an experiment's tidy tables; the
matplotlib figures of the experiment modules stay what is exported as PNG.  :func:`show`
displays a chart as HTML with the Vega libraries inlined (from ``vl-convert``), so the
chart works in JupyterLab, in the report's HTML rendering of the notebook and offline;
:func:`save` writes it as a standalone ``.html`` file next to the notebook's figures.
"""

from __future__ import annotations

import html
import uuid
from pathlib import Path

import numpy as np
import pandas as pd

WIDTH = 760


def _alt():
    import altair as alt

    alt.data_transformers.disable_max_rows()
    return alt


# -- the charts ---------------------------------------------------------------------------------
def recovery_timeline(out, title: str | None = None):
    """Notebook 04 (Fig. 10): throughput and median latency around the kill, the kill and
    the recovery phases shaded; ``out`` a :class:`scabbard.experiments.recovery.Outcome`."""
    from scabbard.experiments.recovery import COLORS, PHASES, _with_downtime, outage_segments

    alt = _alt()
    s = out.samples
    t = s["t"].to_numpy(dtype=float)
    data = pd.DataFrame({"seconds": t, "M tuples/s": s["tuples_per_s"] / 1e6,
                         "p50 ms": s["latency_p50_ms"], "p25 ms": s["latency_p25_ms"],
                         "p75 ms": s["latency_p75_ms"], "segment": outage_segments(t)})
    data = data.replace([np.inf, -np.inf], np.nan)
    data.loc[data["p50 ms"] <= 0, ["p50 ms", "p25 ms", "p75 ms"]] = np.nan  # no result yet
    # throughput is zero while no process runs (it drops at the kill, not a line across the
    # outage); latency is drawn per process (segment): no line where nothing was measured
    flow_t, flow = _with_downtime(t, data["M tuples/s"].to_numpy(dtype=float))
    flow = pd.DataFrame({"seconds": flow_t, "M tuples/s": flow})
    phases = pd.DataFrame([{"phase": n, "from": out.phases[n][0], "to": out.phases[n][1],
                            "ms": 1e3 * (out.phases[n][1] - out.phases[n][0])}
                           for n in PHASES if n in out.phases])
    kills = pd.DataFrame({"kill": [k - out.campaign.kill_walls[0]
                                   for k in out.campaign.kill_walls]})
    zoom = alt.selection_interval(bind="scales", encodings=["x"])
    x = alt.X("seconds:Q", title="seconds after the kill" if len(kills) else "seconds")
    tips = [alt.Tooltip("seconds:Q", format=".2f"), alt.Tooltip("M tuples/s:Q", format=".3f"),
            alt.Tooltip("p25 ms:Q", format=".1f"), alt.Tooltip("p50 ms:Q", format=".1f"),
            alt.Tooltip("p75 ms:Q", format=".1f")]

    def marks(layer):
        extra = []
        if len(phases):
            scale = alt.Scale(domain=list(phases["phase"]),
                              range=[COLORS[p] for p in phases["phase"]])
            extra.append(alt.Chart(phases).mark_rect(opacity=0.3).encode(
                x="from:Q", x2="to:Q", color=alt.Color("phase:N", scale=scale),
                tooltip=["phase:N", alt.Tooltip("ms:Q", format=".0f", title="ms")]))
        if len(kills):
            extra.append(alt.Chart(kills).mark_rule(color="red", size=2).encode(
                x="kill:Q", tooltip=[alt.Tooltip("kill:Q", format=".2f")]))
        return alt.layer(*extra, layer)

    throughput = marks(alt.Chart(flow).mark_line().encode(x=x, y=alt.Y("M tuples/s:Q"))
                       + alt.Chart(data).mark_point(size=12, filled=True).encode(
                           x=x, y="M tuples/s:Q", tooltip=tips).add_params(zoom))
    measured = data.dropna(subset=["p50 ms"])
    latency = marks(alt.Chart(measured).mark_area(opacity=0.25).encode(
        x=x, y=alt.Y("p25 ms:Q", scale=alt.Scale(type="log"), title="latency ms (p25-p50-p75)"),
        y2="p75 ms:Q", detail="segment:N") + alt.Chart(measured).mark_line(
        point=alt.OverlayMarkDef(size=12)).encode(x=x, y="p50 ms:Q", detail="segment:N",
                                                  tooltip=tips))
    v = out.campaign.verdict
    head = title or (f"{out.settings.query} at {out.rate / 1e6:.2f} M tuples/s, "
                     f"{'warm standby' if out.settings.standby else 'cold restart'}"
                     + (f" - {v}" if v else ""))
    return alt.vconcat(throughput.properties(width=WIDTH, height=180),
                       latency.properties(width=WIDTH, height=160),
                       title=head).resolve_scale(x="shared")


def adaptive_timeline(timeline: pd.DataFrame, events: pd.DataFrame):
    """Notebook 07 (Fig. 12): throughput over time per compression scheme; codec swaps
    and fallbacks as ticks (hover: which column, which codec)."""
    alt = _alt()
    data = timeline.assign(**{"M tuples/s": timeline["tuples_per_s"] / 1e6})
    zoom = alt.selection_interval(bind="scales", encodings=["x"])
    pick = alt.selection_point(fields=["scheme"], bind="legend")
    lines = alt.Chart(data).mark_line(point=alt.OverlayMarkDef(size=10)).encode(
        x=alt.X("t:Q", title="seconds"), y="M tuples/s:Q", color="scheme:N",
        opacity=alt.condition(pick, alt.value(1.0), alt.value(0.15)),
        tooltip=["scheme:N", alt.Tooltip("t:Q", format=".2f"),
                 alt.Tooltip("M tuples/s:Q", format=".3f")]).add_params(zoom, pick)
    layers = [lines]
    if len(events):
        ev = events[events["event"].isin(["codec", "fallback"])].copy()
        if len(ev):
            top = float(data["M tuples/s"].max())
            ev["y"] = np.where(ev["event"] == "codec", 1.05 * top, 1.1 * top)
            tips = [c for c in ("scheme", "event", "t", "column", "codec", "detail")
                    if c in ev.columns]
            ev = ev[tips + ["y"]].astype({c: str for c in tips if c not in ("t",)})
            layers.append(alt.Chart(ev).mark_point(shape="cross", size=60).encode(
                x="t:Q", y="y:Q", color="scheme:N", tooltip=tips))
    change = data.groupby("scheme", sort=False)["changed_at"].first().reset_index()
    layers.append(alt.Chart(change).mark_rule(strokeDash=[3, 3]).encode(
        x="changed_at:Q", color="scheme:N", tooltip=["scheme:N", "changed_at:Q"]))
    return alt.layer(*layers).properties(
        width=WIDTH, height=280,
        title="SM across a change of the data: adaptive vs default vs no compression "
              "(Fig. 12; crosses: codec swaps, fallbacks)")


def latency_candlesticks(runs: pd.DataFrame, systems=("no_ft", "ft")):
    """Notebook 09 (Fig. 7b): the engine's latency per query, p5-p95 whiskers, p25-p75 box,
    p50 tick, without and with fault tolerance (hover for the percentiles)."""
    from scabbard.experiments.comparison import SYSTEMS

    alt = _alt()
    names = dict(SYSTEMS)
    cols = ["p5_ms", "p25_ms", "p50_ms", "p75_ms", "p95_ms"]
    data = runs[runs["system"].isin(systems)].dropna(subset=["p50_ms"])
    data = data[["query", "system", *cols]].assign(system=lambda d: d["system"].map(names))
    tips = ["query:N", "system:N", *[alt.Tooltip(f"{c}:Q", format=".1f") for c in cols]]
    y = alt.Scale(type="log")
    base = alt.Chart(data).encode(x=alt.X("system:N", title=None, axis=alt.Axis(labels=False)),
                                  color="system:N", tooltip=tips)
    chart = alt.layer(
        base.mark_rule().encode(y=alt.Y("p5_ms:Q", scale=y, title="latency ms"), y2="p95_ms:Q"),
        base.mark_bar(size=14).encode(y="p25_ms:Q", y2="p75_ms:Q"),
        base.mark_tick(color="black", size=14).encode(y="p50_ms:Q"),
    ).properties(width=60, height=260)
    return chart.facet(column=alt.Column("query:N", title=None)).properties(
        title="Engine latency at 80% of its rate, no FT vs FT (after the paper's Fig. 7b)").interactive()


def throughput_cores(table: pd.DataFrame, x: str = "cores", y: str = "tuples_per_s",
                     color: str = "config", title: str = ""):
    """A throughput line per configuration against the cores (simulated what-ifs)."""
    alt = _alt()
    data = table.assign(**{"M tuples/s": table[y] / 1e6})
    return alt.Chart(data).mark_line(point=True).encode(
        x=alt.X(f"{x}:Q", title=x), y="M tuples/s:Q", color=f"{color}:N",
        tooltip=[f"{color}:N", f"{x}:Q", alt.Tooltip("M tuples/s:Q", format=".2f")],
    ).properties(width=WIDTH // 2, height=260, title=title).interactive()


# -- showing and saving -------------------------------------------------------------------------
def vega_bundle() -> str:
    """Vega, Vega-Lite and vega-embed as one script (from ``vl-convert``; built once, then
    kept in ``~/.cache/scabbard``: building it takes seconds)."""
    from altair.utils._importers import import_vl_convert, vl_version_for_vl_convert

    version = vl_version_for_vl_convert()
    cache = Path.home() / ".cache" / "scabbard" / f"vega-embed-{version}.js"
    if cache.is_file():
        return cache.read_text(encoding="utf-8")
    bundle = import_vl_convert().javascript_bundle(vl_version=version)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{uuid.uuid4().hex}.tmp")
        tmp.write_text(bundle, encoding="utf-8")
        tmp.replace(cache)
    except OSError:
        pass  # no cache: built again next time
    return bundle


def to_html(chart, full: bool = False) -> str:
    """The chart as HTML with Vega, Vega-Lite and vega-embed inlined (no network needed);
    several on one page load the libraries once.  ``full``: a standalone page."""
    import json

    div = f"vis-{uuid.uuid4().hex[:12]}"
    spec = json.dumps(chart.to_dict()).replace("</", "<\\/")
    body = (f'<div id="{div}"></div>\n'
            f'<script type="text/javascript">if (!window.vegaEmbed) {{ (function() {{\n'
            f'{vega_bundle()}\n}})(); }}</script>\n'
            f'<script type="text/javascript">vegaEmbed("#{div}", {spec}, '
            f'{{"mode": "vega-lite"}}).catch(console.error);</script>')
    if not full:
        return body
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>chart</title></head>"
            f"<body>{body}</body></html>")


class Shown:
    """What :func:`show` returns: a chart that renders itself as self-contained HTML."""

    def __init__(self, chart):
        self.chart = chart

    def _repr_html_(self) -> str:
        return to_html(self.chart)

    def __repr__(self) -> str:
        return f"<interactive chart: {html.escape(type(self.chart).__name__)}>"


def show(chart, output_dir: str | Path | None = None, name: str | None = None) -> Shown:
    """Display ``chart`` (the last expression of a cell); with ``output_dir`` and ``name``
    also save it there as ``<name>.html``."""
    if output_dir and name:
        save(chart, output_dir, name)
    return Shown(chart)


def save(chart, output_dir: str | Path, name: str) -> Path:
    out = Path(output_dir) / f"{name}.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(to_html(chart, full=True), encoding="utf-8")
    return out
