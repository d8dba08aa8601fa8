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
events), from the moment the process was spawned (``FTConfig.spawned_at``, ``run
--spawned-at``, set by :class:`scabbard.ft.controller.Controller`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from scabbard import faults, queries
from scabbard.compression.policy import Compression
from scabbard.data import Dataset
from scabbard.engine.ports import Resume
from scabbard.engine.runtime import MIN_BATCH, Engine, EngineConfig, RunReport
from scabbard.engine.sources import Replay, ReplaySource
from scabbard.ft import channels, runfile, steppoints
from scabbard.ft.checkpointing import CheckpointListener
from scabbard.ft.codeload import CodeLoader
from scabbard.ft.config import ConfigError, RunConfig
from scabbard.ft.eventual import EventualPolicy, EventualSteps
from scabbard.ft.ingress import INGRESS, READER, PersistedFeed, ReplayFeed, ingress_stream
from scabbard.ft.runfile import RunMismatch, dataset_identity
from scabbard.ft.sinks import NO_WINDOW, ExactlyOnceSink, open_output
from scabbard.ft.spillstore import DurableSpills
from scabbard.ft.state import QueryState
from scabbard.outputs import metrics_log
from scabbard.pog import POG
from scabbard.pog.checkpoint import (
    CheckpointController,
    CheckpointError,
    CheckpointStore,
    Due,
    damaged_in,
)
from scabbard.query import Query
from scabbard.storage import BlockManager, StorageError, folderlock
from scabbard.storage.fileio import OS, Durability, FileIO

log = logging.getLogger(__name__)


class StandbyReleased(Exception):
    """A warm standby was told it will not be needed (it exits without touching storage)."""


def _own_output(sink: ExactlyOnceSink, run: dict, rec, recover: bool) -> None:
    """A new run claims its (empty) output folder.  A recovery checks that the folder is the
    run's output: not another run's, and holding every result its checkpoint ``rec``
    recorded as committed (not another, new folder; not emptied or replaced) - else the
    output would be split or lose results; one line naming the folder that holds them.
    Runs of older builds (no run id) are not checked."""
    token = run.get("run_id")
    if token is None:
        return
    if not recover:
        sink.claim(token)
        return
    where, owner = run.get("output", "?"), sink.owner()
    if owner is not None and owner != token:
        raise RunMismatch(f"output folder {sink.path} holds another run's results; this "
                              f"run's are in {where}: recover with --output {where}")
    have = sink.committed()["window_end"]
    want = rec.output.get("window_end", NO_WINDOW) if rec is not None else NO_WINDOW
    if have < want:  # (an unclaimed folder holding them all is a claim lost in a crash)
        held = f"it holds results up to window end {have}, checkpoint {rec.id} recorded them " \
               f"up to {want} as committed"
        if where != str(sink.path.resolve()):
            raise RunMismatch(f"this run's results are in {where}, not in {sink.path} "
                                  f"({held}): recover with --output {where}")
        raise CheckpointError(f"output folder {sink.path} lost results ({held}): emptied or "
                              f"replaced, this run's output cannot be completed exactly once")
    if owner is None:
        sink.claim(token)


@contextmanager
def _closed_on_error(sink: ExactlyOnceSink):
    """The sink closed (its folder's lock released) when the run fails before the engine
    runs it - recovery refused after the sink recovered its folder - as the engine closes it
    when a run fails: another run in this process may take the folder then."""
    try:
        yield
    except BaseException:
        sink.close()
        raise


@contextmanager
def _stopped(spills: DurableSpills):
    """A recovery's verification of its spilled state stopped when the run ends, however."""
    try:
        yield
    finally:
        spills.stop_verifying()


@dataclass(frozen=True)
class Hooks:
    """What a caller plugs into a fault-tolerant run beside its configuration.

    ``io``: the file operations (a :class:`~scabbard.storage.fileio.RecordingIO` for the
    crash-state explorer).  ``standby()``: called once the code is loaded and before the
    storage is touched; it returns when this process should take over (a warm standby,
    started ahead of a failure, waits there - see
    :class:`scabbard.ft.controller.Controller`).  ``watch``: callables given each metrics
    line (samples and events; the configuration's metrics log is written beside them).
    ``wrap_source(source)``: a source in front of the replay (e.g.
    :class:`scabbard.peers.synclog.LoggedSource`, Flink++'s stream persistence through
    Kafka++)."""

    io: FileIO = OS
    standby: object = None
    watch: Sequence = ()
    wrap_source: object = None


HOOKS = {f.name for f in dataclasses.fields(Hooks)}
# the engine's settings a configuration carries (the rest of EngineConfig is the process's)
_ENGINE_FIELDS = ("workers", "batch_rows", "metrics_interval", "assembly",
                  "ingress_partitions", "state_memory")


def run_fault_tolerant(query: Query, dataset: Dataset, storage: str | Path,
                       sink: ExactlyOnceSink, engine: EngineConfig | None = None, *,
                       recover: bool = False, **settings) -> FTReport:
    """:func:`open_fault_tolerant` with the configuration given by its fields' names (the
    Python shorthand of the tests and experiments): ``storage`` and ``sink`` (its folder and
    kind are the run's output), ``engine``'s workers, task size, metrics interval, assembly
    and ingress partitions, and ``settings`` - any field of :class:`RunConfig`,
    :class:`PersistConfig` or :class:`FTConfig` (``interval``, ``push_up``, ``layout``...)
    or of :class:`Hooks` (``io``, ``wrap_source``...), routed by name
    (:meth:`RunConfig.of`)."""
    engine = engine or EngineConfig()
    hooks = Hooks(**{k: settings.pop(k) for k in list(settings) if k in HOOKS})
    if engine.adaptive is not None:
        settings.setdefault("adaptive_kernels", True)
    if isinstance(settings.get("durability"), Durability):
        settings["durability"] = settings["durability"].value
    cfg = RunConfig.of(query.name, data=dataset.path, storage=storage, output=sink.path,
                       sink=sink.kind, **{k: getattr(engine, k) for k in _ENGINE_FIELDS
                                         if getattr(engine, k) is not None}, **settings)
    return open_fault_tolerant(cfg, dataset, recover=recover, sink=sink, hooks=hooks,
                               query=query)


def _settings_recorded(cfg: RunConfig, engine: Engine, dataset: Dataset, sink, persist_at,
                       recover: bool) -> dict:
    """What ``run.json`` records (:mod:`scabbard.ft.runfile`): a new run's settings, with
    their defaults filled in; for a recovery, the ones given (None: take the recorded one),
    compared with the record."""
    batch_rows = engine.config.batch_rows
    if not recover or batch_rows is not None:  # the tasks of the query in memory (one sizing
        # rule), each task's input at most a pool file of the ingress p-stream (one p-unit, or
        # pieces: Engine.task_rows) - a size given to a recovery cut as the run it recovers
        # cut it (a --batch beyond a pool file's p-unit was refused as another run's)
        layout = cfg.persist.layout
        batch_rows = engine.task_rows(dataset, cfg.rate, engine.unit_rows(
            layout.file_bytes, layout.data_start))
    want = {"dataset": dataset_identity(dataset), "output": str(sink.path.resolve()),
            **runfile.settings(cfg, fresh=not recover, batch_rows=batch_rows,
                               sink=sink.kind, persist_at=persist_at)}
    return want if recover else dict(
        want, loop=cfg.duration is not None or cfg.max_tuples is not None)


def open_fault_tolerant(cfg: RunConfig, dataset: Dataset, *, recover: bool = False,
                        sink: ExactlyOnceSink | None = None, hooks: Hooks = Hooks(),
                        query: Query | None = None) -> FTReport:
    """Run ``cfg.query`` with persisted input, checkpoints and exactly-once output (or recover).

    The dataset is read once, unless ``duration`` or ``max_tuples`` asks for more (then it
    is replayed with shifted timestamps), as :func:`scabbard.engine.run_query` does.

    ``cfg.persist``: where, and the data reduction before the ingress p-stream (§3.4, §5).
    ``cfg.ft.durability``: ``machine`` (the default: everything a record or an
    acknowledgement depends on is flushed first) or ``process`` (survives ``kill -9`` of the
    engine, not power loss).  ``sink``: the exactly-once sink (default: ``cfg.ft``'s, on its
    output folder); ``query``: the query, when the caller has it at hand (default: from
    ``cfg``); ``hooks``: what the caller plugs in (:class:`Hooks`).

    A run is recorded in ``<storage>/run.json`` with its dataset's identity (manifest
    checksum, schema, rows, parameters) and its settings; a recovery takes the recorded
    ones (None) and refuses other data or settings with a message naming each difference.

    ``cfg.ft.aligned``: Flink-style aligned checkpoints (at a marker the dispatcher waits
    until every task before it is assembled and the state snapshotted); the paper's Flink++
    pairs them with the transactional sink.  ``cfg.ft.every_tasks``: also a checkpoint every
    that many tasks (deterministic markers).

    A recovery that resumed from a record and then found the spilled state it lists damaged
    (read back lazily, verified behind the run: nothing commits before it is) marks the
    record and recovers again, falling back past it (:class:`DamagedCheckpoint`).
    """
    if cfg.ft is not None:
        faults.arm(cfg.ft.crash_at)  # once: a crash point's count runs over every attempt
    marked: dict[int, str] = {}
    while True:
        try:
            report = _open_once(cfg, dataset, recover, sink, hooks, query)
            return dataclasses.replace(report, damage=[*marked.values(), *report.damage])
        except Exception as e:
            damaged = damaged_in(e) if recover else None
            if damaged is None or damaged.cid in marked:  # (marked: never resumed from again)
                raise
            marked[damaged.cid] = str(damaged)
            sink = sink.fresh() if sink is not None else None  # the failed run closed it
            hooks = dataclasses.replace(hooks, standby=None)  # it took over already
            log.warning("%s: it is marked and the run recovers again, from an older one",
                        damaged)


def _open_once(cfg: RunConfig, dataset: Dataset, recover: bool, sink: ExactlyOnceSink | None,
               hooks: Hooks, query: Query | None) -> FTReport:
    """One attempt of :func:`open_fault_tolerant`."""
    ft, persist = cfg.ft, cfg.persist
    if ft is None or persist is None:
        raise ConfigError("a fault-tolerant run needs an FTConfig and a PersistConfig")
    query = query or queries.get(cfg.query)
    sink = sink if sink is not None else open_output(ft.output, ft.sink)
    io, storage = hooks.io, persist.storage
    phases = {"spawned": ft.spawned_at if ft.spawned_at is not None else float("nan"),
              "started": time.time()}
    if persist.push_up and ft.persist_input is False:
        raise ValueError("persistence push-up needs persisted input (it moves operators below "
                         "the ingress p-stream); without it the source replays the input")
    if dataset.schema.fingerprint != query.source.schema.fingerprint:
        raise ValueError(f"{query.name} reads {query.source.schema.name!r} data, but the dataset "
                         f"holds {dataset.schema.name!r}")
    persist_at = channels.resolve(query.node, persist.persist_at)
    budget = cfg.state_memory
    spills = DurableSpills()  # a budget's spilled state: in the run's storage, once open
    config = cfg.engine_config(spills if budget is not None else None)
    engine = Engine(query, dataset.tables, config, push_up=persist.push_up,
                    cut_after=persist_at)
    engine.check_assembly()  # before anything is made in the storage or output folders
    want = _settings_recorded(cfg, engine, dataset, sink, persist_at, recover)
    durable = Durability.of(want["durability"] or Durability.MACHINE)
    # compiled code from numba's on-disk cache (a full batch: the long-task path too).  A
    # warm standby loads it before it waits; a cold restart loads it on a thread of its own
    # while this one opens the storage and loads the state (LLVM's loading of the cached
    # objects and the storage's reads leave the interpreter lock: both cores work)
    code = CodeLoader(engine, ReplaySource(dataset, want["batch_rows"] or MIN_BATCH).peek(),
                       writable=recover or hooks.standby is not None)  # the replay's batches
    if hooks.standby is not None:
        code.join(phases)
        hooks.standby()
        phases["activated"] = time.time()
    else:
        code.start()
    phases["loading"] = time.time()
    # the storage folder's lock before run.json: two fresh runs started together on one
    # folder had both written it (the second's settings over the first's), then one failed
    if recover and not storage.is_dir():  # a mistaken path: nothing made
        raise RunMismatch(f"{storage} holds no run to recover (no such folder); start one "
                              f"without --recover")
    fresh = not storage.is_dir()
    io.mkdir(storage)
    if fresh and durable.flush:
        io.fsync_dir(storage.parent)
    held = folderlock.lock(storage / "LOCK", f"storage folder {storage}")
    try:  # until the BlockManager holds it
        run = runfile.open_run_file(storage, io, query.name, recover, want, durable)
        if recover and run.get("push_up", False) != persist.push_up:
            was = run.get("push_up")
            raise RunMismatch(f"{storage} holds a run {'with' if was else 'without'} "
                                  f"persistence push-up: recover it the same way "
                                  f"({'add' if was else 'drop'} --push-up)")
        cfg = runfile.as_run(cfg, run)  # a recovered run keeps its settings
        ft, persist = cfg.ft, cfg.persist
        durable = Durability.of(ft.durability)
        persist_input, mode = ft.persist_input, ft.checkpoint_mode or "full"
        budget = cfg.state_memory  # the run's state memory budget
        if budget is not None and engine.config.state_memory != budget:
            engine.config = dataclasses.replace(engine.config, state_memory=budget,
                                                spill=spills)
        spills.incremental = mode != "full"  # closed panes written once
        metrics = engine.metrics((*metrics_log(cfg.metrics_log), *hooks.watch))
        sink.bind(io, durable, persist_at)
        layout = dataclasses.replace(persist.layout, sync=durable.flush)
    except BaseException:
        folderlock.unlock(held)
        raise
    t_open = time.perf_counter()
    with BlockManager(storage, layout, io, lock=held) as bm, _closed_on_error(sink), \
            _stopped(spills):
        open_ms = round((time.perf_counter() - t_open) * 1e3, 2)  # the storage opened
        pog = POG(bm)
        scheme = persist.compression or "none"
        compress = Compression.scheme(engine.input_schema, scheme, persist.lossy_decimals,
                                      on_event=metrics.event,
                                      **({"interval": persist.compression_interval}
                                         if scheme == "adaptive" else {}))
        ingress = ingress_stream(pog, engine, compress) if persist_input else None
        stores = channels.open_channels(pog, engine.plan, persist_at)
        spills.bm = bm  # the spilled state in this storage: it is the checkpoint's
        state = QueryState(engine.plan, bm, persist_at, mode, spills,
                           tuple(b.id for i, b in enumerate(engine.plan.branches)
                                 if engine.spills(i)))
        store = CheckpointStore(storage / "checkpoints", io=io, durability=durable)
        state.on_damage = lambda cid, err: store.mark_damaged(cid, " ".join(str(err).split()))
        state.open_parts = steppoints.applies(state, persist_input, sink)
        if recover:
            t_load = time.perf_counter()
            resume, replay_from, skipped = _resume(storage, store, state, bm, ingress, sink)
            t_channels = time.perf_counter()
            channels.resume_channels(stores, resume[0] if resume else None)
            done = time.perf_counter()
            loaded = dict(state.loaded, open_ms=open_ms, load_ms=round((done - t_load) * 1e3, 2),
                          replay_tuples=ingress.end - replay_from if persist_input else None,
                          channel_rows={n: s.start["end"] - s.start["consumed"]
                                        for n, s in stores.items()},
                          channel_ms=round((done - t_channels) * 1e3, 2))
        else:
            resume, replay_from, skipped, loaded = None, None, [], {}
            if sink.holds_results():
                raise RunMismatch(f"{sink.path} already holds results of another run: "
                                      f"choose an empty --output folder")
        sink.open(engine.schema)
        if sink.visible:
            _own_output(sink, run, resume[0] if resume else None, recover)
        clock = sink.committed()
        committed = clock["window_end"]
        point = None  # an eventual step after the record to resume from (steppoints)
        if resume is not None and state.open_parts:
            t_scan = time.perf_counter()
            rec, (edges, _) = resume
            point, extent = steppoints.newest(state, rec, edges[0], clock, ingress.end)
            loaded.update(extent_rows=extent.rows, extent_bytes=extent.nbytes,
                          extent_opens=extent.opens,
                          scan_ms=round((time.perf_counter() - t_scan) * 1e3, 2))
            if point is not None:
                replay_from = point.input_end
                loaded.update(replay_tuples=ingress.end - replay_from, step=point.input_end,
                              step_units=point.units)
        damage = list(bm.torn) + list(getattr(sink, "torn", []))
        phases["state_loaded"] = time.time()
        code.join(phases)  # the run starts once both are in
        if not (recover and persist_input):
            bm.forget_tails()  # the state is in; nothing more is read back
        controller = CheckpointController(
            store, state, Due(ft.interval, ft.every_tasks), sink=sink,
            release=lambda rec: channels.release(pog, engine.plan, stores, rec,
                                                 (INGRESS, READER) if persist_input else None),
            trim_state=state.trim, on_event=metrics.event,
            resumed=resume[0] if resume else None)
        at = None
        if resume is not None:  # the assembly starts where the checkpoint left it
            rec, (edges, graph) = resume
            older = [r for r in store.records() if r.id < rec.id and store.damaged(r.id) is None]
            if point is None:
                state.restore(rec, edges, older[0] if older else None)
                at = Resume(rec.seq, rec.input_end, rec.operator["last_ts"], edges, rec.output,
                            graph, dict(state.loaded_spill))
            else:
                state.restore_step(rec, point)
                at = Resume(point.seq, point.input_end, point.last_ts, [point.edges],
                            dict(rec.output, input_end=point.input_end), graph)
        steps = EventualSteps(EventualPolicy(ft.step_ms, ft.max_unsaved_panes,
                                             ft.max_replay_tuples), state, controller,
                              cut_at=at.input_end if at is not None else 0) \
            if mode == "eventual" else None
        listener = CheckpointListener(state, controller, metrics, align=ft.aligned,
                                      first_seq=at.seq + 1 if at is not None else 0, steps=steps)
        # with persisted input: replay what is stored, then continue the source after it;
        # without: the source itself starts again at the checkpoint's offset
        source_start = _source_position(ingress) if persist_input else (replay_from or 0)
        source = ReplaySource(dataset, cfg.batch_rows,
                              Replay(rate=cfg.rate, duration=cfg.duration,
                                     max_tuples=cfg.max_tuples, loop=run.get("loop", True)),
                              source_start, run["started_at"], span=engine.spans_copies)
        if hooks.wrap_source is not None:
            source = hooks.wrap_source(source)
        if compress is not None:  # what its source checked of the event times' order
            compress.ordered_time = getattr(source, "ordered", False)
        feed = engine.feed(source)
        if persist_input:
            feed = PersistedFeed(pog, engine, source)
            if recover:
                def replayed(n: int) -> None:
                    bm.forget_tails()  # the stored input's tail, read at open, served the replay
                    listener.replayed(n, ingress.end)

                feed = ReplayFeed(ingress, replay_from, feed, source, replayed)

        def on_start() -> None:
            for name, wall in phases.items():
                metrics.event("phase", phase=name, wall=wall)
            for what in damage:
                metrics.event("storage_damage", detail=what)
            if recover:
                metrics.event("recovery", phase="resume",
                              checkpoint=resume[0].id if resume else None,
                              replay_from=replay_from, replay_to=source_start,
                              committed_window_end=committed,
                              skipped=skipped, checkpoint_mode=mode,
                              **{f"state_{k}": v for k, v in loaded.items()})

        metrics.on_start = on_start
        report = engine.run(feed, sink, metrics=metrics, listener=listener, resume=at,
                            emit_after=committed, stores=stores)
        if "spill_verified_bytes" in state.loaded:  # verified behind the run, now done
            loaded["spill_verified_bytes"] = state.loaded["spill_verified_bytes"]
        if source.exhausted:
            runfile.mark_completed(storage, io, run, durable)
        return FTReport(report, list(controller.stats.completed),
                        resume[0].id if resume else None, replay_from, damage, loaded, mode,
                        bm.bytes_written, source_start, steps.steps if steps else 0)


def _resume(storage: Path, store: CheckpointStore, state: QueryState, bm: BlockManager,
            ingress, sink) -> tuple:
    """Recovery steps 1-3: the newest checkpoint whose state loads and whose input is still
    stored (damaged ones are skipped, loudly), the input offset to replay from, the sink's
    decided epochs rolled forward.  Returns ``(resume, replay_from, skipped ids)``."""
    resume, skipped, why = None, [], []
    records = store.records()
    stored_from = bm.start(ingress.stream_id) if ingress is not None else 0
    for rec in records:
        try:
            if (why_damaged := store.damaged(rec.id)) is not None:
                raise CheckpointError(f"a recovery from it found its state damaged "
                                      f"({why_damaged})")
            if stored_from > rec.input_end:
                raise CheckpointError(f"its input from offset {rec.input_end} was "
                                      f"released (stored from {stored_from})")
            resume = (rec, state.load_state(rec))
            break
        except (StorageError, CheckpointError, FileNotFoundError, ValueError) as e:
            log.warning("checkpoint %d is not usable (%s); trying an older one", rec.id, e)
            skipped.append(rec.id)
            why.append(f"checkpoint {rec.id}: {' '.join(str(e).split())}")
    if resume is None and stored_from > 0:
        raise CheckpointError(
            f"no usable checkpoint in {storage / 'checkpoints'} "
            f"({'; '.join(why) or 'none was written'}) and the input before offset "
            f"{stored_from} was released: this run cannot be recovered")
    replay_from = resume[0].input_end if resume else stored_from
    sink.recover(records[0].id if records else 0)
    return resume, replay_from, skipped


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
    resumed_from: int | None  # checkpoint id, when recovering
    replayed_from: int | None  # input offset, when recovering
    damage: list = field(default_factory=list)  # torn or quarantined storage found on opening
    # recovering: state bytes, panes and pane-unit runs loaded, load ms (state and channels),
    # input tuples replayed, rows each persisted channel replays to its consumer and the ms
    # its stored units took to read back (within load ms); eventual mode's steps: the extent
    # read after the record to find one (rows, bytes, open parts; scan ms, beside load ms)
    loaded: dict = field(default_factory=dict)
    checkpoint_mode: str = "full"
    written_bytes: int = 0  # segment bytes the run's storage acknowledged (input, state, edges)
    source_start: int = 0  # where the source was read from (a recovery: after the stored input)
    steps: int = 0  # eventual steps that wrote something (closed panes or an open part)

    @property
    def state_bytes_written(self) -> int:
        """State bytes the checkpoints of this run wrote (an eventual run's steps included)."""
        return sum(c.bytes for c in self.checkpoints)
