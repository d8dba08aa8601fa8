"""Where to persist: the edges of the operator graph, what each costs, and a choice (§3.1, §3.4).

A *placement* is the set of edges p-streams sit on: ``ingress`` (the input) and the output
edge of any operator (named by its id; the root's is the one before the sink).  Everything
downstream of a p-stream stays fault-tolerant whatever the placement: every stateful
operator is an ft-operator and is checkpointed; the placement decides what is *stored* as it
flows, and so what a recovery reads back instead of recomputing.

:func:`measure` runs the query fault-tolerantly on a sample of its dataset with a p-stream
on every edge, stops it part-way (as a crash would) and recovers it in a process of its own,
then the same with the input alone persisted, and measures, per input
tuple: the bytes each edge carries in steady state (between the first and the last
checkpoint: neither the windows filling at the start nor the open windows a sample's end
flushes count), the state a checkpoint writes, the CPU of the windows' state building
(fragments) apart from their emission (boundaries, assembly, the graph) - with the engine's
own timers - and, from the recoveries, what loading a byte of state, reading back a byte of
a persisted channel and replaying an input tuple cost.

:func:`estimate` prices a placement at an input rate and checkpoint interval:

* **bytes persisted per second** - the rate times the placed edges' bytes per tuple;
* **state checkpointed** - the same for every placement (every ft-operator is checkpointed);
* **recovery** - the state loaded, then the input since the checkpoint (one interval)
  processed again: its state building always; its emission only where the windows' output
  is not stored downstream already (a p-stream on a branch's way to the sink holds what
  the branch emitted before the crash: it is replayed from disk, not recomputed - each
  branch weighted by the rows it emits); read from the ingress p-stream if placed, else
  asked again from the source, which must then buffer an interval of input.  Every
  persisted channel is read back from its consumer's position at the checkpoint: the rows
  it carried since (LRB3's ``window0``, 30 rows an input tuple, costs more to read back than
  the input it came from).  The process start and the code loading are the same for every
  placement and left out.

:func:`choose` (``--placement auto``): among the placements that persist the input (the
source is not assumed replayable) and leave the disk's write bandwidth at least half free
(persisting then costs no throughput), the one that recovers fastest; ties go to fewer
bytes.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scabbard import queries, timers
from scabbard.data import Dataset
from scabbard.engine import EngineConfig, physical
from scabbard.engine.sources import StopAfter
from scabbard.errors import FlagError
from scabbard.ft.channels import OUTPUT, stream_name
from scabbard.ft.recovery import run_fault_tolerant
from scabbard.ft.sinks import DiscardSink
from scabbard.storage import BlockManager, StorageConfig

INGRESS = "ingress"
READ_MB_S = 1200.0  # O_DIRECT reads on this kind of machine (PEERS.md): state and replay
WRITE_MB_S = 1500.0  # O_DIRECT sequential writes on this kind of machine (PEERS.md)


def edges(query) -> list[str]:
    """Every edge of the query's graph: the ingress, then each operator's output (a stateless
    query's one operator feeds the sink, which stores its output already)."""
    ops = physical.operators(query.node)
    return [INGRESS, *(k for k, op in ops.items() if op.kind != "select")]


def placements(query, with_ingress: bool | None = None) -> list[tuple[str, ...]]:
    """Every placement (``with_ingress``: only those that persist the input, or only those
    that do not)."""
    names = edges(query)
    out = []
    for k in range(len(names) + 1):
        for p in itertools.combinations(names, k):
            if with_ingress is None or (INGRESS in p) == with_ingress:
                out.append(p)
    return out


class _Count:
    """A timers recorder: CPU seconds of the windows' state building and of their emission."""

    def __init__(self):
        self.cpu = {"build": 0.0, "emit": 0.0}

    def record(self, part: str, cpu_s: float, wall_s: float, count: int, long: bool) -> None:
        if part == "fragment":
            self.cpu["build"] += cpu_s
        elif part in ("boundary", "assembly"):
            self.cpu["emit"] += cpu_s


@dataclass(frozen=True)
class Measured:
    """A query's edges and costs, per input tuple, measured on ``tuples`` of its dataset."""

    query: str
    tuples: int
    bytes_per_tuple: dict[str, float]  # edge -> bytes it carries per input tuple
    rows_per_tuple: dict[str, float]
    state_bytes: float  # per checkpoint (the median)
    build_s_tuple: float  # CPU of the windows' state building per tuple
    emit_s_tuple: float  # CPU of the emission (assembly, boundaries, graph) per tuple
    chains: dict[str, tuple[str, ...]] = field(default_factory=dict)  # branch -> its path up
    # from the sample's recovery: seconds to load a byte of checkpointed state, and to read
    # back a byte of a persisted channel (its stored units decoded for the consumer)
    load_s_byte: float = 1 / (READ_MB_S * 1e6)
    channel_s_byte: float = 1 / (READ_MB_S * 1e6)
    # and the wall seconds of replaying an input tuple stored after the checkpoint with the
    # input alone persisted (read back, state built, every window emitted again); None: the
    # CPU of building and emitting
    replay_s_tuple: float | None = None

    def describe(self, query) -> list[str]:
        """The graph as text: each edge with its bytes per input tuple."""
        ops = physical.operators(query.node)
        lines = [f"  source --[ingress {self.bytes_per_tuple[INGRESS]:9.2f} B]--> "
                 f"{', '.join(o.id for o in ops.values() if o.inputs == ('source',))}"]
        for op in ops.values():
            b = self.bytes_per_tuple.get(op.id)  # a stateless query's output: the sink's
            carried = "   output  " if b is None else f"{b:9.2f} B"
            lines.append(f"  {op.id:<12} --[{carried}]--> {op.output:<12} {op.node.label()}")
        return lines


def measure(query_name: str, dataset: Dataset, tuples: int = 1 << 20, workers: int = 2,
            workdir: str | Path | None = None, push_up: bool = False,
            compression: str | None = None) -> Measured:
    """Run the query on the first ``tuples`` of ``dataset`` (replayed if shorter) with a
    p-stream on every edge and a checkpoint every four of its sixteen tasks, stopped after
    fifteen and recovered, then with the input alone persisted and one checkpoint half-way,
    stopped and recovered; measure
    what each edge carries (in steady state), the state per checkpoint, the CPU split and the
    recovery's costs.  With ``push_up``, the ingress carries
    what push-up keeps, compressed by the default codecs unless ``compression`` is none (the
    adaptive scheme is priced as the default one, its starting point): measured on the same
    tuples (:func:`scabbard.engine.pushup.footprint`)."""
    q = queries.get(query_name)
    every = [e for e in edges(q) if e != INGRESS]
    folder = Path(tempfile.mkdtemp(prefix="scabbard-placement-", dir=workdir))
    layout = StorageConfig(file_bytes=64 << 20, pool_files=4)
    count = _Count()

    args = {"query": q.name, "data": str(dataset.path), "storage": str(folder / "storage"),
            "out": str(folder / "out"), "workers": workers, "tuples": tuples,
            "persist_at": every, "pool_file_bytes": layout.file_bytes}
    try:
        with timers.recording(count):
            r = _sample_run(dataset, args, wrap_source=lambda s: StopAfter(s, _TASKS - 1))
        n = r.run.summary.tuples
        ops = physical.operators(q.node)
        rows = _steady_rows(r.checkpoints, every)
        if rows is None:  # too few checkpoints: the whole stopped run
            with BlockManager(folder / "storage", layout) as bm:
                rows = {e: bm.durable_end(bm.stream(stream_name(e), ops[e].node.schema)) / n
                        for e in every}
        rows[INGRESS] = 1.0
        per_tuple = {e: rows[e] * ops[e].node.schema.payload_bytes for e in every}
        per_tuple[INGRESS] = ingress_bytes(q, dataset, tuples, push_up, compression)
        back = _cold_recovery(args)
        # the same with the input alone persisted: its replay emits every window again (one
        # checkpoint, half-way: seven tasks replayed, not three, as a crash an interval after
        # its checkpoint replays more than a few tasks - a replay's start costs the same)
        alone = dict(args, storage=str(folder / "alone" / "storage"),
                     out=str(folder / "alone" / "out"), persist_at=[], every_tasks=_TASKS // 2)
        _sample_run(dataset, alone, wrap_source=lambda s: StopAfter(s, _TASKS - 1))
        emitting = _cold_recovery(alone)
        states = [c.bytes for c in r.checkpoints] or [0]
        plan = physical.plan(q.node)
        chains = {b.id: tuple(o.id for o in c) for b, c in zip(plan.branches, plan.chains,
                                                                strict=True)}
        return Measured(q.name, n, per_tuple, rows, float(np.median(states)),
                        count.cpu["build"] / n, count.cpu["emit"] / n, chains,
                        **_recovery_costs(back, emitting, ops))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


_TASKS = 16  # of the sample run


def _sample_run(dataset: Dataset, args: dict, **kw):
    """The sample's fault-tolerant run (or, with ``recover=True``, its recovery)."""
    return run_fault_tolerant(queries.get(args["query"]), dataset, args["storage"],
                              DiscardSink(args["out"]),
                              EngineConfig(workers=args["workers"],
                                           batch_rows=max(1024, args["tuples"] // _TASKS)),
                              interval=None, every_tasks=args.get("every_tasks", 4),
                              max_tuples=args["tuples"],
                              persist_at=tuple(args["persist_at"]), durability="machine",
                              layout=StorageConfig(file_bytes=args["pool_file_bytes"],
                                                           pool_files=4), **kw)


def _cold_recovery(args: dict) -> dict:
    """The stopped sample recovered by a process of its own, as after a crash: its state is
    read while the code loads on another thread, as in every cold restart (in this process,
    with the code loaded, it measured a half to a third of a cold restart's).  Returns the
    recovery's report of what it loaded, with its replay's wall seconds."""
    code = ("import json, sys\n"
            "from scabbard.data import open_dataset\n"
            "from scabbard.ft.placement import _sample_run\n"
            "a = json.loads(sys.argv[1])\n"
            "r = _sample_run(open_dataset(a['data'], verify=False), a, recover=True,\n"
            "                metrics_log=a['metrics'])\n"
            "print(json.dumps(r.loaded))")
    args = dict(args, metrics=str(Path(args["storage"]).parent / "recovery.jsonl"))
    done = subprocess.run([sys.executable, "-c", code, json.dumps(args)], capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"the placement sample's recovery failed: "
                           f"{done.stderr.strip().splitlines()[-1:]}")
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    walls = {}
    with open(args["metrics"]) as f:
        for line in f:
            e = json.loads(line)
            if e.get("phase") in ("state_loaded", "code_loaded", "replayed"):
                walls[e["phase"]] = e.get("wall")
    if {"state_loaded", "code_loaded", "replayed"} <= walls.keys():
        loaded["replay_s"] = walls["replayed"] - max(walls["state_loaded"], walls["code_loaded"])
    return loaded


def _steady_rows(records: list, every: list[str]) -> dict[str, float] | None:
    """Rows each operator emitted per input tuple between the first and the last checkpoint
    (their records hold where each operator's output stood): None with fewer than two."""
    if len(records) < 2 or records[-1].input_end <= records[0].input_end:
        return None
    a, b = records[0], records[-1]
    span = b.input_end - a.input_end

    def out(rec, e: str) -> int:
        return int(rec.operator["pv"][e]["out"][e])

    return {e: (out(b, e) - out(a, e)) / span for e in every}


def _recovery_costs(loaded: dict, emitting: dict, ops) -> dict[str, float]:
    """Seconds per byte of state loaded and of channel units read back, from the report of a
    recovery with every edge persisted (a part that read nothing keeps the default); and per
    input tuple replayed, from one with the input alone persisted (``emitting``: every
    window's output computed again)."""
    out = {}
    channel_s = loaded.get("channel_ms", 0.0) / 1e3
    state_s = loaded.get("load_ms", 0.0) / 1e3 - channel_s
    if loaded.get("bytes"):
        out["load_s_byte"] = state_s / loaded["bytes"]
    channel_bytes = sum(rows * ops[e].node.schema.payload_bytes
                        for e, rows in loaded.get("channel_rows", {}).items())
    if channel_bytes:
        out["channel_s_byte"] = channel_s / channel_bytes
    if emitting.get("replay_tuples") and "replay_s" in emitting:
        out["replay_s_tuple"] = emitting["replay_s"] / emitting["replay_tuples"]
    return out


def ingress_bytes(query, dataset: Dataset, tuples: int, push_up: bool,
                  compression: str | None) -> float:
    """Bytes the ingress p-stream stores per input tuple: every field of every tuple, or
    with ``push_up`` what push-up keeps, compressed unless ``compression`` is none."""
    if not push_up:
        return float(dataset.schema.payload_bytes)
    from scabbard.engine.pushup import footprint

    fp = footprint(query, dataset, rows=tuples, lossy_decimals=None)
    if compression in (None, "none") or "default" not in fp.compressed:
        return float(fp.pushed_bytes or 0.0)
    return float(fp.compressed["default"])


@dataclass(frozen=True)
class Estimate:
    placement: tuple[str, ...]
    bytes_per_s: float
    state_bytes: float
    recovery_s: float
    source_buffer_bytes: float  # what the source must keep per interval (input not placed)

    @property
    def label(self) -> str:
        return "+".join(self.placement) or "(none)"


def _stored_downstream(m: Measured, placement: tuple[str, ...], query) -> float:
    """The share of the windows' emission (weighted by the rows each branch emits) that a
    p-stream on the branch's way to the sink holds already at a crash."""
    ops = physical.operators(query.node)
    held = total = 0.0
    for branch in m.chains:
        weight = m.rows_per_tuple[branch]
        total += weight
        cur = branch
        while cur != "sink":
            if cur in placement:
                held += weight
                break
            cur = ops[cur].output
    return held / total if total else 0.0


def estimate(m: Measured, placement: tuple[str, ...], rate: float, interval: float,
             read_mb_s: float = READ_MB_S, replay_tuples: float | None = None,
             channel_rows: dict[str, float] | None = None,
             state_bytes: float | None = None) -> Estimate:
    """The cost of ``placement`` at ``rate`` input tuples/s and one checkpoint every
    ``interval`` seconds (see the module): a crash an interval after a checkpoint of the
    sample's size, unless ``replay_tuples`` (input since the checkpoint), ``channel_rows``
    (rows each persisted channel holds past its consumer's position) and ``state_bytes``
    (the checkpoint's) say where a crash left the run."""
    q = queries.get(m.query)
    placement = tuple(q_ if q_ != OUTPUT else _root(q) for q_ in placement)
    per_tuple = sum(m.bytes_per_tuple[e] for e in placement)
    replay = rate * interval if replay_tuples is None else replay_tuples
    stored = _stored_downstream(m, placement, q)
    if m.replay_s_tuple is not None and INGRESS in placement:
        # what is stored downstream is not emitted again: its share of the CPU saved
        share = m.emit_s_tuple / (m.build_s_tuple + m.emit_s_tuple or 1.0)
        cpu = replay * m.replay_s_tuple * (1 - stored * share)
    else:
        cpu = replay * (m.build_s_tuple + (1 - stored) * m.emit_s_tuple)
        if INGRESS in placement:
            cpu += replay * m.bytes_per_tuple[INGRESS] / (read_mb_s * 1e6)
    state = m.state_bytes if state_bytes is None else state_bytes
    read = state * m.load_s_byte
    ops = physical.operators(q.node)
    for e in placement:
        if e != INGRESS:
            rows = replay * m.rows_per_tuple[e] if channel_rows is None else \
                channel_rows.get(e, 0.0)
            read += rows * ops[e].node.schema.payload_bytes * m.channel_s_byte
    buffer = 0.0 if INGRESS in placement else replay * m.bytes_per_tuple[INGRESS]
    return Estimate(placement, rate * per_tuple, state, read + cpu, buffer)


def _root(query) -> str:
    return next(o.id for o in physical.operators(query.node).values() if o.output == "sink")


def choose(m: Measured, rate: float, interval: float, write_mb_s: float = WRITE_MB_S,
           share: float = 0.5) -> Estimate:
    """``--placement auto``: among the placements that persist the input, those whose bytes
    per second take at most ``share`` of the disk's write bandwidth (persisting then costs
    no throughput); of them the one that recovers fastest (within a millisecond), then the
    one that writes least.  If none fits, the input alone."""
    q = queries.get(m.query)
    options = [estimate(m, p, rate, interval) for p in placements(q, with_ingress=True)]
    fits = [e for e in options if e.bytes_per_s <= share * write_mb_s * 1e6]
    if not fits:
        return estimate(m, (INGRESS,), rate, interval)
    return min(fits, key=lambda e: (round(e.recovery_s, 3), e.bytes_per_s))


def explain(query, m: Measured, rate: float, interval: float) -> list[str]:
    """The operator graph's edges with the bytes each carries (``m``), then every placement's
    persisted rate and recovery time at ``rate`` tuples/s and a checkpoint every
    ``interval`` s, the one :func:`choose` picks marked: ``scabbard explain``'s table."""
    best = choose(m, rate, interval)
    lines = [f"operator graph of {query.name}: the edges p-streams may sit on, with the bytes "
             f"each carries per input tuple (measured on {m.tuples:,} tuples):",
             *m.describe(query), "",
             f"placements at {rate:,.0f} tuples/s, a checkpoint every {interval:g} s "
             f"(state {m.state_bytes / 1e6:.2f} MB each):",
             f"  {'placement':<44}{'MB/s persisted':>16}{'recovery ms':>13}"]
    for p in placements(query):
        e = estimate(m, p, rate, interval)
        mark = "  <- auto" if p == best.placement else ""
        lines.append(f"  {e.label:<44}{e.bytes_per_s / 1e6:16.1f}{e.recovery_s * 1e3:13.0f}{mark}")
    lines.append("  (without ingress the source replays: it must keep an interval of input)")
    return lines


def auto(query_name: str, dataset: Dataset, persist, rate: float,
         interval: float) -> tuple[tuple[str, ...], str]:
    """``scabbard run --placement auto``: the edges :func:`choose` picks at ``rate`` tuples/s
    and a checkpoint every ``interval`` s, measured (:func:`measure`) on up to 262,144 tuples
    of ``dataset`` with ``persist``'s push-up and compression, scratch files beside its
    storage; with the line that says so."""
    m = measure(query_name, dataset, tuples=min(dataset.rows, 1 << 18),
                workdir=str(persist.storage.parent), push_up=persist.push_up,
                compression=persist.compression)
    best = choose(m, rate, interval)
    return tuple(best.placement), (
        f"placement (auto, at {rate:,.0f} tuples/s): {best.label} - "
        f"{best.bytes_per_s / 1e6:.1f} MB/s persisted, recovery ~{best.recovery_s * 1e3:.0f} ms")


def explain_query(name: str, data: str | None, root: Path, sample: int,
                  lossy_decimals: int, rate: float, interval: float) -> Iterator[str]:
    """``scabbard explain``'s text, part by part as each is measured: query ``name``'s plan
    before and after push-up with the bytes persisted per input tuple
    (:func:`scabbard.engine.pushup.explain`, measured on the first ``sample`` tuples of the
    dataset ``data``, else of its small one under ``root`` if generated; floats also with
    ``lossy_decimals``, -1: not), then - with a dataset - a blank line and the placements
    priced at ``rate`` tuples/s and a checkpoint every ``interval`` s (:func:`explain`);
    without one, how to make one.  A rate or interval not positive is a FlagError, raised
    after the plans (as the placements are only priced with a dataset)."""
    from scabbard.data import dataset_path
    from scabbard.engine.pushup import explain as plans
    from scabbard.engine.pushup import footprint

    query = queries.get(name)
    ds = queries.dataset(name, data, root, generate=False)
    decimals = None if lossy_decimals < 0 else lossy_decimals
    yield plans(query, footprint(query, ds, rows=sample, lossy_decimals=decimals))
    if ds is None:
        workload = queries.workload_of(name)
        yield (f"(no dataset at {dataset_path(root, workload, 'small')}: generate one with "
               f"'scabbard datagen {workload}' or pass --data to measure selectivity and "
               f"compression)")
        return
    yield ""
    if not (rate > 0 and interval > 0):
        raise FlagError("--rate and --checkpoint-interval must be positive")
    m = measure(query.name, ds, tuples=min(sample, 1 << 19))
    yield "\n".join(explain(query, m, rate, interval))
