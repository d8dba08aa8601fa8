"""Open a run from its :class:`~scabbard.ft.config.RunConfig`, fresh or recovering.

:func:`open_run` is the one entry point the command line uses: a query in memory
(:func:`scabbard.engine.run_query`), with its input persisted
(:func:`scabbard.ft.ingress.run_persisted`), or fault-tolerant
(:func:`scabbard.ft.recovery.open_fault_tolerant`), as the configuration says.
"""

from __future__ import annotations

from collections.abc import Sequence

from scabbard import queries, workloads
from scabbard.data import Dataset, dataset_path, open_dataset
from scabbard.engine import EngineConfig, RunReport, Sink
from scabbard.ft.config import RunConfig
from scabbard.ft.ingress import run_persisted
from scabbard.ft.recovery import FTReport, Hooks, open_fault_tolerant
from scabbard.ft.spillstore import disk_spill
from scabbard.outputs import metrics_log


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
