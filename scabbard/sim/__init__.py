"""The POG simulator: a calibrated discrete-event model of the engine (docs/design.md).

    from scabbard.sim import PAPER_SSD, SimConfig, load, simulate

    cal = load(scabbard.paths.calibration())          # scabbard sim calibrate
    r = simulate(cal, SimConfig("LRB1", workers=16, persist=True, checkpoint_interval=1.0),
                 PAPER_SSD)
    print(r.summary.tuples_per_s, r.summary.latency_ms)

* :mod:`scabbard.sim.config` - :class:`Hardware`, :class:`Calibration`, :class:`SimConfig`;
* :mod:`scabbard.sim.model` - :func:`simulate` (SimPy, one event per task);
* :mod:`scabbard.sim.calibrate` - the costs, measured on this machine with the real code;
* :mod:`scabbard.experiments.validation` - the real engine and the model side by side (it
  runs experiments, so it lives with them: the simulator imports nothing of them);
* :mod:`scabbard.sim.session` - the work of ``scabbard sim calibrate|validate|speed|run``
  (:mod:`scabbard.cli.sim` parses their flags); :mod:`~scabbard.sim.report` the predictions
  as text.
"""

from scabbard.sim.config import (
    PAPER_RDMA_INGEST,
    PAPER_REMOTE_STORAGE,
    PAPER_SSD,
    Calibration,
    Hardware,
    PersistCosts,
    QueryCosts,
    SimConfig,
    SystemCosts,
    load,
    save,
)

__all__ = ["PAPER_RDMA_INGEST", "PAPER_REMOTE_STORAGE", "PAPER_SSD", "Calibration", "Hardware",
           "PersistCosts", "QueryCosts", "SimConfig", "SimResult", "SystemCosts", "load", "save",
           "simulate"]


def __getattr__(name: str):
    """``simulate`` and ``SimResult`` load SimPy and pandas: on first use, so that the
    commands which only name the simulator's settings (``scabbard run``, whose restart
    after a crash is timed) do not pay for them."""
    if name == "simulate":
        from scabbard.sim.model import simulate

        return simulate
    if name == "SimResult":
        from scabbard.sim.result import SimResult

        return SimResult
    raise AttributeError(f"module 'scabbard.sim' has no attribute {name!r}")
