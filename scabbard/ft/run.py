"""Open a run from its :class:`~scabbard.ft.config.RunConfig`, fresh or recovering.

:func:`open_run` is the one entry point of every run: a query in memory
(:func:`scabbard.engine.run_query`), with its input persisted
(:func:`scabbard.ft.ingress.run_persisted`), or fault-tolerant
(:func:`scabbard.ft.recovery.open_fault_tolerant`), as the configuration says;
:func:`run_and_report` is ``scabbard run``'s: :func:`open_run` with the progress lines, the
warm standby's handshake and the closing summary the command prints.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from scabbard import queries, workloads
from scabbard.data import Dataset, dataset_path, open_dataset
from scabbard.engine import EngineConfig, RunReport, Sink
from scabbard.ft.config import RunConfig
from scabbard.ft.ingress import run_persisted
from scabbard.ft.recovery import FTReport, Hooks, StandbyReleased, open_fault_tolerant
from scabbard.ft.spillstore import disk_spill
from scabbard.outputs import metrics_log
from scabbard.progress import say


def dataset_of(config: RunConfig) -> Dataset:
    """The dataset ``config`` names (checked against the query's schema; checksums verified
    with ``config.verify``); the query's small default must exist."""
    schema = workloads.get(queries.workload_of(config.query)).SCHEMA
    path = config.data or dataset_path("data", queries.workload_of(config.query), "small")
    return open_dataset(path, schema=schema, verify=config.verify)


def engine_config(config: RunConfig) -> EngineConfig:
    """The engine's settings of a run without fault tolerance (state beyond its budget
    spilled to ``config.spill_dir``)."""
    return config.engine_config(disk_spill(config.spill_dir) if config.state_memory else None)


def open_run(config: RunConfig, *, recover: bool = False, dataset: Dataset | None = None,
             sink: Sink | None = None, watch: Sequence = (), standby=None
             ) -> RunReport | FTReport:
    """Run what ``config`` says.  ``sink``: where results go without fault tolerance (with it,
    the exactly-once sink of ``config.ft``); ``watch``: callables given each metrics line
    (the configuration's metrics log is written beside them); ``standby``: see
    :func:`~scabbard.ft.recovery.open_fault_tolerant`."""
    ds = dataset or dataset_of(config)
    if config.ft is not None:
        return open_fault_tolerant(config, ds, recover=recover,
                                   hooks=Hooks(standby=standby, watch=watch))
    return run_persisted(queries.get(config.query), ds, config.persist, sink,
                         engine_config(config), config.replay,
                         watch=(*metrics_log(config.metrics_log), *watch))



def run_and_report(config: RunConfig, ds: Dataset, output: str | None = None, *,
                   recover: bool = False, standby: bool = False, quiet: bool = False,
                   log: Callable[[str], None] = say) -> None:
    """``scabbard run`` on the engine: :func:`open_run` with each line ``log`` is given - a
    line for each metrics sample unless ``quiet`` (:func:`scabbard.ft.report.progress_line`),
    before the run what it persists (or the fault-tolerant run's start) and after it the
    summary (:mod:`scabbard.ft.report`).  ``output``: the results file of a run without
    fault tolerance.  ``standby`` (with ``recover``): a warm standby's handshake with the
    process controller (:mod:`scabbard.ft.controller`) first - 'standby: ready', then a line
    on stdin; stdin closed: it ends saying so, without touching the storage."""
    from scabbard.engine.metrics import samples_to
    from scabbard.ft.report import ft_start_line, ft_summary, progress_line, run_summary
    from scabbard.outputs import sink_for

    def progress(sample: dict) -> None:
        if not quiet:
            log(progress_line(sample))

    watch = (samples_to(progress),)
    if config.ft is None:
        if config.persist is not None:
            log(f"persisting the input to {config.persist.storage}")
        log("\n".join(run_summary(open_run(config, dataset=ds, sink=sink_for(output),
                                            watch=watch), output)))
        return
    log(ft_start_line(config, recover))
    try:
        r = open_run(config, recover=recover, dataset=ds, watch=watch,
                     standby=_standby(log) if standby else None)
    except StandbyReleased:
        log("standby: released without taking over")
        return
    log("\n".join(ft_summary(r, config.ft.output, recover)))


def _standby(log: Callable[[str], None]) -> Callable[[], None]:
    """The warm standby's handshake: say it is ready, wait for a line on stdin (closed:
    :class:`~scabbard.ft.recovery.StandbyReleased`, the controller has no failure for it)."""
    def standby() -> None:
        log("standby: ready")
        if not sys.stdin.readline():
            raise StandbyReleased

    return standby
