"""A fault-tolerant run, and its recovery after a crash (paper §3.2, Alg. 1, Fig. 10).

``run_fault_tolerant`` persists the ingress p-stream, checkpoints the operator
every ``interval`` seconds and writes results to an exactly-once sink.  With
``recover=True`` it continues a run that was killed, from the same storage and
output folders, in the paper's four steps:

1. **progress recovery** - the newest usable checkpoint record (damaged ones
   are skipped, loudly; falling back is possible because input is released
   only below the older of the two newest checkpoints) and the sink's
   committed clock;
2. **upstream requesting** - the input offset to replay from (the
   checkpoint's), checked to be still stored;
3. **data recovery** - the operator state loaded from its state p-units;
4. **upstream replay** - the persisted input after the checkpoint runs again
   as tasks, results the sink already committed are dropped, and then the
   source continues where the stored input ends.

With ``persist_input=False`` (the paper's *Scabbard-Chk*, Table 4) only the operator
state is checkpointed: the input is not persisted, and on recovery it is requested again
from the source - the dataset, replayable from any offset, plays the upstream system that
kept it.

Each phase is logged with its wall-clock time to the metrics log (``recovery``
events), from the moment the process was spawned (``SCABBARD_SPAWNED_AT``, set
by :class:`scabbard.engine.controller.Controller`).
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from scabbard.compression.policy import Compression
from scabbard.data import Dataset
from scabbard.engine.ft import QueryState
from scabbard.engine.metrics import Metrics
from scabbard.engine.output import ExactlyOnceSink
from scabbard.engine.runtime import (
    INGRESS,
    READER,
    Engine,
    EngineConfig,
    FaultTolerance,
    RunReport,
    _Edges,
)
from scabbard.engine.sources import ReplaySource
from scabbard.pog import POG
from scabbard.pog.checkpoint import CheckpointController, CheckpointError, CheckpointStore
from scabbard.query import Query
from scabbard.storage import BlockManager, StorageConfig, StorageError

log = logging.getLogger(__name__)
RUN_FILE = "run.json"


class StandbyReleased(Exception):
    """A warm standby was told it will not be needed (it exits without touching storage)."""


def _run_file(storage: Path, query: Query, recover: bool, params: dict) -> dict:
    path = storage / RUN_FILE
    if recover:
        if not path.is_file():
            raise CheckpointError(f"{storage} holds no run to recover ({RUN_FILE} is missing); "
                                  f"start one without --recover")
        have = json.loads(path.read_text())
        if have["query"] != query.name:
            raise CheckpointError(f"{storage} holds a run of {have['query']}, not {query.name}")
        return have
    if path.is_file():
        raise CheckpointError(f"{storage} already holds a run of "
                              f"{json.loads(path.read_text())['query']}: add --recover to "
                              f"continue it, or choose an empty --storage folder")
    storage.mkdir(parents=True, exist_ok=True)
    doc = {"query": query.name, "started_at": time.time(), **params}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, path)
    return doc


def run_fault_tolerant(query: Query, dataset: Dataset, storage: str | Path,
                       sink: ExactlyOnceSink, config: EngineConfig | None = None,
                       interval: float | None = 1.0, recover: bool = False,
                       rate: float | None = None, duration: float | None = None,
                       max_tuples: int | None = None, metrics_log: str | Path | None = None,
                       on_sample=None, storage_config: StorageConfig | None = None,
                       persist_input: bool = True, standby=None, push_up: bool = False,
                       compression: str = "none", lossy_decimals: int | None = None,
                       compression_interval: float = 4.0, aligned: bool = False,
                       wrap_source=None) -> FTReport:
    """Run ``query`` with persisted input, checkpoints and exactly-once output (or recover).

    ``push_up``, ``compression``, ``lossy_decimals``: the data reduction before the ingress
    p-stream (§3.4, §5; see :func:`scabbard.engine.run_query`).  A run is recovered with
    the reduction it was started with (it is recorded with the run).

    ``standby``: called once the code is loaded and before the storage is touched; it returns
    when this process should take over (a warm standby, started ahead of a failure, waits
    there - see :class:`scabbard.engine.controller.Controller`).

    ``aligned``: Flink-style aligned checkpoints (see :class:`FaultTolerance`); the paper's
    Flink++ pairs them with the transactional sink.  ``wrap_source(source)``: a source in
    front of the replay (e.g. :class:`scabbard.peers.synclog.LoggedSource`, Flink++'s stream
    persistence through Kafka++).
    """
    storage = Path(storage)
    phases = {"spawned": float(os.environ.get("SCABBARD_SPAWNED_AT", "nan")),
              "started": time.time()}
    if push_up and not persist_input:
        raise ValueError("persistence push-up needs persisted input (it moves operators below "
                         "the ingress p-stream); without it the source replays the input")
    engine = Engine(query, dataset.tables, config, push_up=push_up)
    reduction = {"push_up": push_up, "compression": compression, "lossy_decimals": lossy_decimals}
    params = {"batch_rows": engine.batch_rows_for(ReplaySource(dataset, 1).tuples_per_ms()),
              "rate": rate, "max_tuples": max_tuples, "persist_input": persist_input,
              **reduction}
    # compiled code from numba's on-disk cache (a full batch: the long-task path too)
    engine.warm_up(ReplaySource(dataset, params["batch_rows"]).peek())
    phases["code_loaded"] = time.time()
    if standby is not None:
        standby()
        phases["activated"] = time.time()
    run = _run_file(storage, query, recover, params)
    persist_input = run.get("persist_input", True)  # a recovered run keeps its mode
    had = {k: run.get(k, v if k != "push_up" else False) for k, v in reduction.items()}
    if recover and had["push_up"] != push_up:
        raise CheckpointError(f"{storage} holds a run {'with' if had['push_up'] else 'without'} "
                              f"persistence push-up: recover it the same way "
                              f"({'add' if had['push_up'] else 'drop'} --push-up)")
    metrics = Metrics(dataset.schema.row_bytes, metrics_log, engine.config.metrics_interval,
                      on_sample)
    with BlockManager(storage, storage_config) as bm:
        pog = POG(bm)
        scheme = had["compression"] or "none"
        compress = Compression.scheme(engine.input_schema, scheme, had["lossy_decimals"],
                                      on_event=metrics.event,
                                      **({"interval": compression_interval}
                                         if scheme == "adaptive" else {}))
        ingress = pog.pstream(INGRESS, engine.input_schema, max_units=64,
                              max_bytes=8 * bm.config.bulk_bytes,
                              compress=compress) if persist_input else None
        state = QueryState(engine.plan.branches, bm, _Edges)
        store = CheckpointStore(storage / "checkpoints")
        resume, replay_from, skipped = None, None, []
        records = store.records() if recover else []
        if recover:
            stored_from = bm.start(ingress.stream_id) if persist_input else 0
            for rec in records:
                try:
                    if stored_from > rec.input_end:
                        raise CheckpointError(f"its input from offset {rec.input_end} was "
                                              f"released (stored from {stored_from})")
                    resume = (rec, state.load_state(rec))
                    break
                except (StorageError, CheckpointError, FileNotFoundError, ValueError) as e:
                    log.warning("checkpoint %d is not usable (%s); trying an older one", rec.id, e)
                    skipped.append(rec.id)
            if resume is None and stored_from > 0:
                raise CheckpointError(
                    f"no usable checkpoint in {storage / 'checkpoints'} and the input before "
                    f"offset {stored_from} was released: this run cannot be recovered")
            replay_from = resume[0].input_end if resume else stored_from
            if hasattr(sink, "recover"):
                sink.recover(records[0].id if records else 0)
        sink.open(engine.schema)
        committed = sink.committed()["window_end"]
        phases["state_loaded"] = time.time()
        controller = CheckpointController(
            store, state, interval, sink=sink,
            release=(lambda off: pog.send_release(INGRESS, READER, off)) if persist_input else None,
            trim_state=state.trim, on_event=metrics.event)
        # with persisted input: replay what is stored, then continue the source after it;
        # without: the source itself starts again at the checkpoint's offset
        ft = FaultTolerance(state, controller, committed, resume,
                            replay_from if persist_input else None, aligned=aligned)
        source_start = _source_position(ingress) if persist_input else (replay_from or 0)
        source = ReplaySource(dataset, run["batch_rows"], rate=run["rate"], duration=duration,
                              max_tuples=run["max_tuples"], loop=True, start=source_start,
                              started_at=run["started_at"])
        if wrap_source is not None:
            source = wrap_source(source)

        def on_start() -> None:
            for name, at in phases.items():
                metrics.event("phase", phase=name, wall=at)
            if recover:
                metrics.event("recovery", phase="resume",
                              checkpoint=resume[0].id if resume else None,
                              replay_from=replay_from, replay_to=source_start,
                              committed_window_end=committed,
                              skipped=skipped)

        metrics.on_start = on_start
        report = engine.run(source, sink, pog=pog, ft=ft, metrics=metrics)
        if report.summary.tuples and (run["max_tuples"] is not None
                                      and source.exhausted):
            done = dict(run, completed=time.time())
            (storage / RUN_FILE).write_text(json.dumps(done, indent=1))
        return FTReport(report, list(controller.stats.completed), controller.stats.failed,
                        resume[0].id if resume else None, replay_from)


def _source_position(ingress) -> int:
    """Where the source continues: after the input the ingress p-stream reflects - its last
    p-unit's vector clock (after push-up dropped tuples, p-stream offsets are not source
    offsets)."""
    clock = ingress.last_clock()
    if clock is not None:
        return clock[0]
    if ingress.end:  # everything stored was released: nothing to tell where the source was
        raise CheckpointError(f"the ingress p-stream holds no p-unit to say where its source "
                              f"stopped (its end is {ingress.end})")
    return 0


@dataclass(frozen=True)
class FTReport:
    run: RunReport
    checkpoints: list  # CheckpointRecord, in order
    failed_checkpoints: int
    resumed_from: int | None  # checkpoint id, when recovering
    replayed_from: int | None  # input offset, when recovering
