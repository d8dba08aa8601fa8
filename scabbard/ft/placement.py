"""Where to persist: the edges of the operator graph, what each costs, and a choice (§3.1, §3.4).

A *placement* is the set of edges p-streams sit on: ``ingress`` (the input) and the output
edge of any operator (named by its id; the root's is the one before the sink).  Everything
downstream of a p-stream stays fault-tolerant whatever the placement: every stateful
operator is an ft-operator and is checkpointed; the placement decides what is *stored* as it
flows, and so what a recovery reads back instead of recomputing.

:func:`measure` runs the query fault-tolerantly on a sample of its dataset with a p-stream
on every edge and measures, per input tuple: the bytes each edge carries (the operators'
selectivities, as push-up measures the ingress's), the state a checkpoint writes, and the
CPU of the windows' state building (fragments) apart from their emission (boundaries,
assembly, the graph) - with the engine's own timers.

:func:`estimate` prices a placement at an input rate and checkpoint interval:

* **bytes persisted per second** - the rate times the placed edges' bytes per tuple;
* **state checkpointed** - the same for every placement (every ft-operator is checkpointed);
* **recovery** - the state read back, then the input since the checkpoint (one interval)
  processed again: its state building always; its emission only where the windows' output
  is not stored downstream already (a p-stream on a branch's way to the sink holds what
  the branch emitted before the crash: it is replayed from disk, not recomputed - each
  branch weighted by the rows it emits); read from the ingress p-stream if placed, else
  asked again from the source, which must then buffer an interval of input.

:func:`choose` (``--placement auto``): among the placements that persist the input (the
source is not assumed replayable) and leave the disk's write bandwidth at least half free
(persisting then costs no throughput), the one that recovers fastest; ties go to fewer
bytes.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scabbard import queries, timers
from scabbard.data import Dataset
from scabbard.engine import EngineConfig, physical
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
    p-stream on every edge and checkpoints every few tasks; measure what each edge carries,
    the state per checkpoint and the CPU split.  With ``push_up``, the ingress carries what
    push-up keeps, compressed by the default codecs unless ``compression`` is none (the
    adaptive scheme is priced as the default one, its starting point): measured on the same
    tuples (:func:`scabbard.engine.pushup.footprint`)."""
    q = queries.get(query_name)
    every = [e for e in edges(q) if e != INGRESS]
    folder = Path(tempfile.mkdtemp(prefix="scabbard-placement-", dir=workdir))
    layout = StorageConfig(file_bytes=64 << 20, pool_files=4)
    count = _Count()
    try:
        with timers.recording(count):
            r = run_fault_tolerant(q, dataset, folder / "storage", DiscardSink(folder / "out"),
                                   EngineConfig(workers=workers,
                                                batch_rows=max(1024, tuples // 16)),
                                   interval=None, every_tasks=4, max_tuples=tuples,
                                   persist_at=tuple(every), durability="process",
                                   storage_config=layout)
        n = r.run.summary.tuples
        ops = physical.operators(q.node)
        rows, nbytes = {INGRESS: float(n)}, {INGRESS: n * ingress_bytes(q, dataset, tuples,
                                                                         push_up, compression)}
        with BlockManager(folder / "storage", layout) as bm:
            for e in every:
                schema = ops[e].node.schema
                got = bm.durable_end(bm.stream(stream_name(e), schema))
                rows[e], nbytes[e] = float(got), float(got * schema.payload_bytes)
        states = [c.bytes for c in r.checkpoints] or [0]
        plan = physical.plan(q.node)
        chains = {b.id: tuple(o.id for o in c) for b, c in zip(plan.branches, plan.chains,
                                                                strict=True)}
        return Measured(q.name, n, {e: v / n for e, v in nbytes.items()},
                        {e: v / n for e, v in rows.items()}, float(np.median(states)),
                        count.cpu["build"] / n, count.cpu["emit"] / n, chains)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


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
             read_mb_s: float = READ_MB_S, row_bytes: int | None = None) -> Estimate:
    """The cost of ``placement`` at ``rate`` input tuples/s and one checkpoint every
    ``interval`` seconds (see the module)."""
    q = queries.get(m.query)
    placement = tuple(q_ if q_ != OUTPUT else _root(q) for q_ in placement)
    per_tuple = sum(m.bytes_per_tuple[e] for e in placement)
    replay = rate * interval
    stored = _stored_downstream(m, placement, q)
    cpu = replay * (m.build_s_tuple + (1 - stored) * m.emit_s_tuple)
    read = m.state_bytes / (read_mb_s * 1e6)
    if INGRESS in placement:
        read += replay * m.bytes_per_tuple[INGRESS] / (read_mb_s * 1e6)
    buffer = 0.0 if INGRESS in placement else replay * m.bytes_per_tuple[INGRESS]
    return Estimate(placement, rate * per_tuple, m.state_bytes, read + cpu, buffer)


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
