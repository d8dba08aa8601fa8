"""What a simulated run produced, in the engine's terms (docs/design.md).

:class:`SimResult` carries the engine's :class:`~scabbard.engine.metrics.Summary` and a
timeline with the columns of the engine's metrics log samples
(:func:`scabbard.outputs.read_metrics`), so a notebook draws either the same way.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from scabbard.engine.metrics import PERCENTILES, Summary, percentiles_ms
from scabbard.sim.config import MB, Hardware, SimConfig


@dataclass(frozen=True)
class SimResult:
    """What a simulated run produced, in the engine's terms (:class:`Summary`, the metrics
    log's sample columns)."""

    config: SimConfig
    hardware: Hardware
    summary: Summary
    steady_tuples_per_s: float  # over the middle 60 % of the input (before any failure)
    timeline: pd.DataFrame  # per interval: t, tuples, tuples_per_s, mb_per_s, latency_p*_ms
    written_bytes: int
    checkpoints: pd.DataFrame  # id, started, completed, duration_ms, state_bytes, input_end
    recovery: dict  # phases of the recovery (seconds), when the run failed
    utilisation: dict  # share of the cores busy, per activity; of the disk
    wall_s: float  # wall time the simulation took

    @property
    def tuples_per_s(self) -> float:
        return self.summary.tuples_per_s

    def serial_stages(self) -> dict[str, float]:
        """How busy each stage that runs on one thread at a time kept its thread (1.0: it
        held the run back): the dispatcher (with one ingress partition: the source and the
        appends too), each ingress partition, the partitions' turn (appends in order), the
        ordered assembly, the group-commit writer."""
        u, cores = self.utilisation, self.hardware.cores
        parts = self.config.ingress_partitions

        def share(*labels: str) -> float:
            return sum(u.get(f"cores_{k}", 0.0) for k in labels) * cores

        out = {"dispatcher": share("source", "dispatch") + (share("append") if parts == 1
                                                            else 0.0)}
        if parts > 1:
            out["ingress partition"] = share("ingress") / parts
            out["turn"] = share("append")
        out["assembly"] = share("assembly")
        out["writer"] = share("io")
        return {k: round(v, 4) for k, v in out.items()}

    def as_dict(self) -> dict:
        ck = self.checkpoints
        return {"config": asdict(self.config), "hardware": asdict(self.hardware),
                "summary": self.summary.as_dict(),
                "steady_tuples_per_s": round(self.steady_tuples_per_s, 1),
                "written_bytes": self.written_bytes,
                "checkpoints": len(ck),
                "checkpoint_ms_mean": float(ck["duration_ms"].mean()) if len(ck) else None,
                "recovery": self.recovery, "utilisation": self.utilisation,
                "serial_stages": self.serial_stages(),
                "wall_s": round(self.wall_s, 3)}


def steady_rate(t: np.ndarray, n: np.ndarray, lo: float, hi: float) -> float:
    """Tuples/s in ``[lo, hi)``: the slope of the cumulative tuple count against time
    (least squares), exact even when tasks complete in bursts (group commit)."""
    cum = np.cumsum(n)
    inside = (t >= lo) & (t < hi)
    if inside.sum() < 3 or hi <= lo:
        return float(n[inside].sum()) / (hi - lo) if hi > lo else 0.0
    x, y = t[inside], cum[inside].astype(float)
    if np.ptp(x) <= 0:
        return 0.0
    return float(np.polyfit(x, y, 1)[0])


def timeline(t: np.ndarray, n: np.ndarray, lat: np.ndarray, cfg: SimConfig,
              row_bytes: int) -> pd.DataFrame:
    """Samples every ``timeline_interval`` s, as the engine's metrics log has them."""
    step = cfg.timeline_interval
    bins = int(math.ceil(t[-1] / step)) if len(t) else 0
    idx = np.minimum((t / step).astype(np.int64), max(bins - 1, 0)) if len(t) else t
    tuples = np.bincount(idx, weights=n, minlength=bins) if len(t) else np.zeros(0)
    rows = []
    order = np.argsort(idx, kind="stable")
    cuts = np.searchsorted(idx[order], np.arange(bins + 1))
    total = 0
    for b in range(bins):
        total += int(tuples[b])
        sel = lat[order[cuts[b]:cuts[b + 1]]]
        pct = percentiles_ms(sel)
        rows.append({"t": round((b + 1) * step, 6), "tuples": total,
                     "tuples_per_s": tuples[b] / step, "mb_per_s": tuples[b] / step * row_bytes / MB,
                     **{f"latency_p{p}_ms": pct[f"p{p}"] for p in PERCENTILES}})
    return pd.DataFrame(rows, columns=["t", "tuples", "tuples_per_s", "mb_per_s"]
                        + [f"latency_p{p}_ms" for p in PERCENTILES])
