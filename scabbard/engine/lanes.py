"""A run's jobs and lanes: a dispatched task, and one branch's ordered assembly with the
boundaries workers compute in parallel (used by :class:`~scabbard.engine.execution.Execution`)."""

from __future__ import annotations

from dataclasses import dataclass

from scabbard.batch import Batch
from scabbard.engine.assembly import BranchAssembler, PartitionedAssembler
from scabbard.engine.spill import SpillingAssembler
from scabbard.engine.tasks import TaskResult


@dataclass(slots=True)
class Job:
    """A dispatched task: its number, what it runs on, and the marker it carries; ``unit``:
    the feed's own number of a task whose input the worker persists (else None)."""

    seq: int
    batch: Batch
    ingest_time: float
    marker: object = None
    source_tuples: int | None = None
    unit: int | None = None


class Lane:
    """One branch's ordered assembly: its window state, the long tasks whose boundary with
    the next is not done yet, the boundaries computed (or being computed) by workers."""

    def __init__(self, i: int, branch, parts: int = 1, pool=None, budget: int | None = None,
                 threads: int = 1, spill=None):
        self.i, self.branch = i, branch
        if budget is not None:
            self.assembler = SpillingAssembler(branch, parts, pool, budget, threads, spill)
        else:
            self.assembler = (PartitionedAssembler(branch, parts, pool) if parts > 1
                              else BranchAssembler(branch))
        self.tails: dict[int, TaskResult] = {}  # long tasks whose next boundary is not done
        self.boundaries: dict[int, dict | None] = {}  # boundary k -> result columns
        self.claimed: set[int] = set()
        self.prev_long = False
        self.last_seq = -1  # the last task assembled in the lane (tasks with nothing skip)
        self.row_wise = False  # windows given in pieces as made (spilling state; Execution)

    def state(self):
        """What gives the branch's window state now as pane partials, one row per (pane,
        group) (:meth:`BranchAssembler.partials`; on the assembly's thread, between tasks):
        the serial assembler's; None where the state is split (partitioned or spilling)."""
        return self.assembler.partials if type(self.assembler) is BranchAssembler else None

    def pieces_reach_sink(self, plan, stores) -> bool:
        """Whether this lane's windows may leave in pieces as they are made: its state
        spills, and the pieces reach the sink only through fused HAVINGs - an operator of
        the graph (a HAVING left unfused by a p-stream, a rollup, a join) takes whole
        windows, and a persisted channel stores each batch as whole windows (its resume
        skips through the last one stored)."""
        top = plan.top(self.i)
        return (isinstance(self.assembler, SpillingAssembler)
                and all(op.kind == "having" for op in plan.chains[self.i]
                        if op.id != self.branch.emitted)
                and plan.operators[top].output == "sink" and top not in (stores or {}))

    def final_pieces(self, plan):
        """The end of the stream's windows as result columns, key partition by key partition
        as each is flushed, where they may leave as they are made and its state gives them in
        window order (a tumbling window's under a budget: never in memory whole); else None."""
        if not (self.row_wise and self.assembler.flushes_in_pieces()):
            return None
        return (plan.post(self.i, self.branch.finalize(raw))
                for raw in self.assembler.flush_pieces())

    def claim(self, r: TaskResult, results: dict) -> list[tuple[Lane, TaskResult, TaskResult]]:
        """Boundaries finished task ``r`` completes in this lane (call with the lock held)."""
        if not r.parts[self.i].long:
            return []
        jobs = []
        prev = self.tails.get(r.seq - 1)
        if prev is not None and r.seq not in self.claimed:
            self.claimed.add(r.seq)
            jobs.append((self, prev, r))
        nxt = results.get(r.seq + 1)
        if nxt is not None and not nxt.empty and nxt.parts[self.i].long \
                and r.seq + 1 not in self.claimed:
            self.claimed.add(r.seq + 1)
            jobs.append((self, r, nxt))
        return jobs

    def busy(self, r: TaskResult) -> bool:
        """A worker is computing ``r``'s boundary in this lane (call with the lock held)."""
        return (r.parts[self.i].long and self.prev_long and r.seq in self.claimed
                and r.seq not in self.boundaries)


def close_spilled(lanes: list[Lane]) -> dict:
    """Spilled state removed; per branch, what spilling did (empty without a budget)."""
    out = {}
    for lane in lanes:
        if isinstance(lane.assembler, SpillingAssembler):
            lane.assembler.close()
            out[lane.branch.id] = dict(lane.assembler.stats)
    return out
