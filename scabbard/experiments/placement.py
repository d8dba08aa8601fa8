"""Notebook 11: where to persist - every placement of the p-streams, measured (paper §3.1, §3.4).

Per query with more than one operator and per placement (the set of edges p-streams sit on;
the input always among them here: the source is not assumed to replay), real fault-tolerant
runs of the engine:

* **throughput** - the query with the placement, checkpoints every ``interval`` s, no rate
  limit, for ``seconds``; its checkpoints' size and time;
* **bytes persisted per second** and **recovery** - the query as its own process with its
  input at ``rate`` tuples/s, killed with SIGKILL ``kills`` times (the first ``kill_at`` s
  in) and recovered each time: the bytes each p-stream stored over the run, and each
  recovery's state load and replay (from the metrics log; process start, code loading and
  the storage's opening are the same for every placement), their median;

beside the cost model's estimate (:mod:`scabbard.ft.placement`), priced at where each kill
left the run, and its choice (``auto``) against the measured best.  Every run's output is
checked exactly once against a failure-free run.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from scabbard import queries, workloads
from scabbard.engine import EngineConfig, physical
from scabbard.experiments import Common, finish, scratch
from scabbard.experiments.recovery import breakdown
from scabbard.ft import placement as pl
from scabbard.ft.channels import stream_name
from scabbard.ft.controller import Controller, campaign_config
from scabbard.ft.modes import INTERVAL
from scabbard.ft.recovery import run_fault_tolerant
from scabbard.ft.sinks import DiscardSink
from scabbard.storage import BlockManager

QUERIES = ("LRB3", "SG3", "NQ", "YSB")


@dataclass(frozen=True)
class Settings(Common):
    queries: Sequence[str] = field(default=QUERIES)
    rate: float = 300_000.0  # input tuples/s of the killed runs
    interval: float = INTERVAL
    seconds: float = 3.0  # of the unpaced run per placement
    run_seconds: float = 12.0  # of the paced, killed run
    kill_at: float = 4.0
    workers: int = 2
    batch: int = 65_536
    placements: Sequence[tuple] | None = None  # None: every one that persists the input
    work_dir: str | None = None
    kills: int = 5  # per placement: the first at kill_at, the others spread over the rest

    def __post_init__(self) -> None:
        if not 0 < self.kill_at < self.run_seconds:
            raise ValueError(f"kill_at must lie within the run ({self.run_seconds} s)")
        if self.kills < 1:
            raise ValueError("kills must be at least 1")
        for name in self.queries:
            queries.workload_of(name)

    def kill_delays(self) -> list[float]:
        """Seconds from each incarnation's start to its kill."""
        rest = (self.run_seconds - self.kill_at) / self.kills
        return [self.kill_at] + [rest] * (self.kills - 1)


def _stored_bytes(storage: Path, query, placement: tuple[str, ...], row_bytes: int) -> float:
    """What the placement's p-streams stored over the whole run (their ends, in bytes: the
    fields, not the paper's padded rows: NEXMark's 60 bytes a tuple, not 128)."""
    ops = physical.operators(query.node)
    total = 0.0
    with BlockManager(storage) as bm:
        for e in placement:
            if e == pl.INGRESS:
                total += bm.durable_end(bm.stream("input", query.source.schema)) * row_bytes
            else:
                schema = ops[e].node.schema
                total += bm.durable_end(bm.stream(stream_name(e), schema)) * \
                    schema.payload_bytes
    return total


def measure_placement(name: str, ds, placement: tuple[str, ...], s: Settings,
                      root: Path) -> dict:
    """One placement's throughput, bytes and checkpoints, and its recoveries from ``s.kills``
    kills: ``crashes`` holds each one's recovery as measured (the state and channels loaded,
    the input replayed) and where the kill left the run (for the cost model)."""
    q = queries.get(name)
    inner = tuple(e for e in placement if e != pl.INGRESS)
    ingress = pl.INGRESS in placement
    folder = root / f"{name}-{'+'.join(placement) or 'none'}"
    shutil.rmtree(folder, ignore_errors=True)
    # throughput and checkpoints, unpaced
    r = run_fault_tolerant(q, ds, folder / "fast" / "storage", DiscardSink(folder / "fast" / "out"),
                           EngineConfig(workers=s.workers, batch_rows=s.batch),
                           interval=s.interval, duration=s.seconds, persist_at=inner,
                           persist_input=ingress)
    ck = r.checkpoints
    # bytes and recovery, paced and killed
    n = int(s.rate * s.run_seconds)
    c = Controller(campaign_config(
        name, ds.path, folder / "killed", max_tuples=n, workers=s.workers, batch_rows=s.batch,
        rate=s.rate, metrics_interval=0.1, persist_at=tuple(inner),
        interval=s.interval, persist_input=None if ingress else False))
    camp = c.run(s.kill_delays())
    stored = _stored_bytes(c.storage, q, placement, ds.schema.payload_bytes)
    from scabbard.outputs import read_metrics

    crashes = _crashes(read_metrics(c.metrics_log), camp.kill_walls)
    shutil.rmtree(folder, ignore_errors=True)
    return {"query": name, "placement": "+".join(placement) or "(none)",
            "tuples_per_s": r.run.summary.tuples_per_s,
            "mb_per_s_persisted": stored / 1e6 / s.run_seconds,
            "bytes_per_tuple": stored / max(1, n),
            "checkpoint_mb": float(np.median([x.bytes for x in ck])) / 1e6 if ck else np.nan,
            "checkpoint_ms": float(np.median([x.duration_s for x in ck])) * 1e3 if ck else np.nan,
            "kills": camp.kills, "exactly_once": bool(camp.verdict and camp.verdict.ok),
            "crashes": crashes}


def _crashes(m: pd.DataFrame, kill_walls: list[float]) -> list[dict]:
    """Per kill: the recovery's state load (state and channels, from its ``resume`` event)
    plus its replay (until the input stored before the kill was processed), the restart
    before it (process start, code loading, the storage's opening: the same for every
    placement), and where the kill left the run: the checkpoint's state, the input stored
    after it, the rows of each channel past its consumer."""
    events = m[m["event"] != "sample"]
    samples = m[m["event"] == "sample"].reset_index(drop=True)
    out = []
    for k, wall in enumerate(kill_walls):
        until = kill_walls[k + 1] if k + 1 < len(kill_walls) else None
        ev = events.assign(t=lambda d, w=wall: d["wall"] - w).reset_index(drop=True)
        phases = breakdown(samples.assign(t=samples["wall"] - wall), ev,
                           until=None if until is None else until - wall)
        after = ev[(ev.get("phase") == "resume") & (ev["t"] > 0)]
        if until is not None:
            after = after[after["t"] < until - wall]
        if not len(after) or "replay" not in phases:
            continue
        at = after.iloc[0]
        state = at.get("state_bytes")  # none before the first checkpoint
        state = 0.0 if state is None or pd.isna(state) else float(state)
        replay_s = phases["replay"][1] - phases["replay"][0]
        rows = at.get("state_channel_rows")
        out.append({"recovery_ms": float(at["state_load_ms"]) + replay_s * 1e3,
                    "state_load_ms": float(at["state_load_ms"]), "replay_ms": replay_s * 1e3,
                    "restart_ms": phases["replay"][0] * 1e3,
                    "replay_tuples": float(at["replay_to"] - at["replay_from"]),
                    "channel_rows": rows if isinstance(rows, dict) else {},
                    "state_bytes": state})
    return out


def _with_model(row: dict, model: pl.Measured, p: tuple[str, ...], s: Settings) -> dict:
    """The row with the cost model beside the measurement: bytes per second at the rate, and
    each crash's recovery priced where that kill left the run - medians over the kills."""
    crashes = row.pop("crashes")
    est = pl.estimate(model, p, s.rate, s.interval)
    for c in crashes:
        c["predicted_ms"] = 1e3 * pl.estimate(
            model, p, s.rate, s.interval, replay_tuples=c["replay_tuples"],
            channel_rows=c["channel_rows"], state_bytes=c["state_bytes"]).recovery_s

    def median(key: str) -> float:
        return float(np.median([c[key] for c in crashes])) if crashes else np.nan

    return row | {"recoveries": len(crashes), "recovery_ms": median("recovery_ms"),
                  "recovery_min_ms": min((c["recovery_ms"] for c in crashes), default=np.nan),
                  "recovery_max_ms": max((c["recovery_ms"] for c in crashes), default=np.nan),
                  "predicted_recovery_ms": median("predicted_ms"),
                  "state_load_ms": median("state_load_ms"), "replay_ms": median("replay_ms"),
                  "restart_ms": median("restart_ms"), "replay_tuples": median("replay_tuples"),
                  "predicted_mb_per_s": est.bytes_per_s / 1e6,
                  "predicted_recovery_interval_ms": est.recovery_s * 1e3}


def run(settings: Settings, log=print) -> pd.DataFrame:
    rows = []
    with scratch(settings.work_dir, settings.data_dir, "scabbard-placement-") as root:
        for name in settings.queries:
            q = queries.get(name)
            ds = workloads.dataset(queries.workload_of(name), settings.scale,
                                   root=settings.data_dir)
            model = pl.measure(name, ds, tuples=min(ds.rows, 1 << 19), workers=settings.workers,
                               workdir=str(root))
            auto = pl.choose(model, settings.rate, settings.interval).placement
            options = settings.placements or pl.placements(q, with_ingress=True)
            for p in options:
                p = tuple(p)
                if any(e not in pl.edges(q) for e in p):
                    continue
                row = _with_model(measure_placement(name, ds, p, settings, root), model, p,
                                  settings) | {"auto": p == auto}
                rows.append(row)
                log(f"{name:5} {row['placement']:<32} {row['tuples_per_s'] / 1e6:6.2f} M t/s  "
                    f"{row['mb_per_s_persisted']:8.1f} MB/s persisted  checkpoint "
                    f"{row['checkpoint_mb']:6.2f} MB {row['checkpoint_ms']:6.1f} ms  recovery "
                    f"{row['recovery_ms']:6.0f} ms (predicted {row['predicted_recovery_ms']:6.0f},"
                    f" restart {row['restart_ms']:4.0f}){'  (auto)' if row['auto'] else ''}  "
                    f"{'exactly once' if row['exactly_once'] else 'MISMATCH'}")
    return pd.DataFrame(rows)


def predicted_vs_measured(table: pd.DataFrame) -> pd.DataFrame:
    """Per query and placement: the recovery the cost model predicts (priced at where each
    kill left the run) beside the one measured (medians over the kills, with their range),
    their ratio, and the bytes per second both ways."""
    t = table
    return pd.DataFrame({
        "query": t["query"], "placement": t["placement"], "auto": t["auto"],
        "kills": t["recoveries"],
        "recovery ms": t["recovery_ms"],
        "range ms": [f"{lo:.0f}-{hi:.0f}" for lo, hi in zip(t["recovery_min_ms"],
                                                             t["recovery_max_ms"], strict=True)],
        "predicted ms": t["predicted_recovery_ms"],
        "predicted / measured": t["predicted_recovery_ms"] / t["recovery_ms"],
        "MB/s persisted": t["mb_per_s_persisted"], "predicted MB/s": t["predicted_mb_per_s"],
        "restart ms (all placements)": t["restart_ms"]})


def auto_against_best(table: pd.DataFrame) -> pd.DataFrame:
    """Per query: the auto placement's measured recovery against the fastest measured among
    those that leave half the disk free (auto's own rule), as a ratio."""
    out = []
    for name, g in table.groupby("query", sort=False):
        fits = g[(g["mb_per_s_persisted"] <= 0.5 * pl.WRITE_MB_S) & g["recovery_ms"].notna()]
        if fits.empty or not g["auto"].any():  # no kill landed (a run shorter than its kills)
            continue
        best_row = fits.loc[fits["recovery_ms"].idxmin()]
        a = g[g["auto"]].iloc[0]
        out.append({"query": name, "auto": a["placement"], "auto ms": a["recovery_ms"],
                    "measured best": best_row["placement"], "best ms": best_row["recovery_ms"],
                    "auto / best": a["recovery_ms"] / best_row["recovery_ms"]})
    return pd.DataFrame(out)


def best(table: pd.DataFrame) -> pd.DataFrame:
    """Per query: the placement that persists fewest bytes per second and the one that
    recovers fastest, with their figures, and the auto choice."""
    out = []
    for name, g in table.groupby("query", sort=False):
        recovered = g[g["recovery_ms"].notna()]  # a placement no kill landed on has none
        for what, row in (("fewest bytes/s", g.loc[g["mb_per_s_persisted"].idxmin()]),
                          ("fastest recovery", recovered.loc[recovered["recovery_ms"].idxmin()]
                           if len(recovered) else None),
                          ("auto", g[g["auto"]].iloc[0] if g["auto"].any() else None)):
            if row is not None:
                out.append({"query": name, "which": what, "placement": row["placement"],
                            "MB/s persisted": row["mb_per_s_persisted"],
                            "recovery ms": row["recovery_ms"],
                            "M tuples/s": row["tuples_per_s"] / 1e6,
                            "checkpoint MB": row["checkpoint_mb"]})
    return pd.DataFrame(out)


def plot(table: pd.DataFrame, output_dir: str | None = None):
    """Per query: bytes persisted per second against recovery time, one point per
    placement (the cost model's choice ringed)."""
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(table["query"]))
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.6), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        g = table[table["query"] == name]
        ax.scatter(g["mb_per_s_persisted"], g["recovery_ms"], color="#4c72b0")
        for _, r in g.iterrows():
            ax.annotate(r["placement"].replace("ingress", "in"), (r["mb_per_s_persisted"],
                                                                   r["recovery_ms"]),
                        fontsize=7, xytext=(3, 3), textcoords="offset points")
        a = g[g["auto"]]
        ax.scatter(a["mb_per_s_persisted"], a["recovery_ms"], s=160, facecolors="none",
                   edgecolors="#c44e52", label="auto")
        ax.set_xscale("symlog")
        ax.set_title(name)
        ax.set_xlabel("MB/s persisted")
        ax.set_ylabel("recovery ms (state load + replay)")
        ax.legend(loc="upper right", fontsize=8)
    return finish(fig, output_dir, "placement.png")


def edges(settings: Settings) -> pd.DataFrame:
    """Per query and edge of its graph: what it carries per input tuple (measured on a
    sample), where it goes, and whether the cost model places a p-stream on it."""
    rows = []
    with scratch(settings.work_dir, settings.data_dir, "scabbard-placement-") as root:
        for name in settings.queries:
            q = queries.get(name)
            ds = workloads.dataset(queries.workload_of(name), settings.scale,
                                   root=settings.data_dir)
            m = pl.measure(name, ds, tuples=min(ds.rows, 1 << 19), workers=settings.workers,
                           workdir=str(root))
            auto = pl.choose(m, settings.rate, settings.interval).placement
            ops = physical.operators(q.node)
            for e in pl.edges(q):
                rows.append({"query": name, "edge": e,
                             "from": "source" if e == pl.INGRESS else e,
                             "to": ",".join(o.id for o in ops.values() if o.inputs == ("source",))
                             if e == pl.INGRESS else ops[e].output,
                             "label": "" if e == pl.INGRESS else ops[e].node.label(),
                             "bytes_per_tuple": m.bytes_per_tuple[e],
                             "rows_per_tuple": m.rows_per_tuple[e], "auto": e in auto})
    return pd.DataFrame(rows)


def draw(table: pd.DataFrame, output_dir: str | None = None):
    """Each query's operator graph, left to right: the edges with their bytes per input
    tuple, the ones the cost model places a p-stream on in red."""
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(table["query"]))
    fig, axes = plt.subplots(len(names), 1, figsize=(9, 2.2 * len(names)), squeeze=False)
    for ax, name in zip(axes[:, 0], names, strict=True):
        g = table[table["query"] == name]
        depth = {"source": 0}
        for _ in range(len(g) + 1):  # longest path from the source
            for _, r in g.iterrows():
                for t in r["to"].split(","):
                    if r["from"] in depth:
                        depth[t] = max(depth.get(t, 0), depth[r["from"]] + 1)
        layers: dict[int, list[str]] = {}
        for node, d in sorted(depth.items(), key=lambda x: x[1]):
            layers.setdefault(d, []).append(node)
        pos = {n: (d, k - (len(ns) - 1) / 2) for d, ns in layers.items() for k, n in
               enumerate(ns)}
        for _, r in g.iterrows():
            for t in r["to"].split(","):
                (x0, y0), (x1, y1) = pos[r["from"]], pos[t]
                ax.annotate("", (x1 - 0.12, y1), (x0 + 0.12, y0),
                            arrowprops={"arrowstyle": "->", "lw": 2.5 if r["auto"] else 1,
                                        "color": "#c44e52" if r["auto"] else "#555555"})
                ax.text((x0 + x1) / 2, (y0 + y1) / 2 + 0.08, f"{r['bytes_per_tuple']:.3g} B",
                        ha="center", fontsize=8,
                        color="#c44e52" if r["auto"] else "#333333")
        for n, (x, y) in pos.items():
            ax.text(x, y, n, ha="center", va="center", fontsize=9,
                    bbox={"boxstyle": "round", "fc": "#eaeaf2", "ec": "#888888"})
        ax.set_xlim(-0.4, max(depth.values()) + 0.4)
        ax.set_ylim(-1.2, 1.2)
        ax.set_title(f"{name}: bytes per input tuple on each edge (red: auto placement)",
                     fontsize=10)
        ax.axis("off")
    return finish(fig, output_dir, "graphs.png")
