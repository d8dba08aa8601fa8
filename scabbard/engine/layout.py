"""Where ``--assembly auto`` keeps a window operator's state, chosen by the keys it will hold
(Grizzly, SIGMOD 2020, §6.2.3).

Grizzly keeps a window aggregation's state in one table its threads share or in a table per
thread merged later, and chooses by the key distribution its instrumented code profiled: a
table per thread while most accesses hit the cache, shared when the keys outgrow it (and
back when a heavy hitter makes the shared one contend).  The engine's two layouts:

* **per task** (the task-parallel engine, :mod:`scabbard.engine.execution`): every task
  aggregates its rows into partials of its own, as many as the task's distinct keys, which
  the assembler merges into the window state in task order;
* **per key** (the partitioned dataflow, :mod:`scabbard.engine.dataflow`): each key's state
  in one of P partitions, each partition's table holding its share of the keys.

Per task wins while a task's partials are few (one key: every partition but one would be
idle); per key once a task's distinct keys make its table miss the cache and every task's
partials are as many as its rows.  ``auto`` (the default) estimates, on the stream's first
:data:`SAMPLE_ROWS` tuples, how many distinct keys a task's table holds (:func:`sampled_keys`:
the keys the tuples are drawn from, :func:`estimated_keys`, from those of the sample's first
half and of all of it; and those of them among a task's tuples of one pane,
:func:`table_rows`), and runs the dataflow when they are at least :data:`DATAFLOW_GROUPS` and
the router spreads them over two partitions or more
(:func:`~scabbard.engine.routing.plan_parts`: no heavy hitter holds one partition's work) -
on a query the dataflow can run (:func:`~scabbard.engine.dataflow.check_dataflow`).  The
choice is in the ``start`` event of the run's metrics log (``layout``).
"""

from __future__ import annotations

import math

import numpy as np

SAMPLE_ROWS = 1 << 16  # the stream's first tuples the keys are estimated on
# a task's distinct keys from which the dataflow's per-key state runs faster than per-task
# partials (`scabbard bench state-size` on 2 cores, 10 s windows, 4 M-row tasks, medians of
# two runs of 3 rounds: 10^6 keys 1.15-1.49x, 10^7 2.0-3.2x; 10^5 0.85-0.89x)
DATAFLOW_GROUPS = 1 << 19


def estimated_keys(half: int, whole: int, rows: int) -> float:
    """The distinct keys of the population ``rows`` tuples were drawn from, given the distinct
    keys among the first half of them (``half``) and among all (``whole``), as if each tuple's
    key were drawn uniformly: ``m`` draws of ``K`` keys show ``K (1 - exp(-m / K))``, so
    ``whole / half - 1 = exp(-rows / 2K)``.  Infinite where no key repeats at all."""
    if half <= 0 or rows <= 0:
        return 0.0
    r = whole / half - 1.0
    if r >= 1.0:
        return math.inf
    if r <= 0.0:
        return float(whole)
    return max(float(whole), rows / (2.0 * -math.log(r)))


def task_keys(keys: float, rows: float) -> float:
    """The distinct keys expected among ``rows`` tuples drawn uniformly from ``keys``."""
    if keys <= 0 or rows <= 0:
        return 0.0
    return rows if math.isinf(keys) else keys * -math.expm1(-rows / keys)


def distinct_rows(keys: np.ndarray) -> int:
    """How many distinct rows an int64 key matrix holds."""
    return len(np.unique(keys, axis=0)) if len(keys) else 0


def sample_keys(engine, sample) -> list[tuple[int, int] | None]:
    """Per branch of ``engine``, the distinct keys of the first half of ``sample`` and of all
    of it (None: no sample, or one spanning windows of its own)."""
    none = [None] * len(engine.plan.branches)
    if sample is None or not len(sample):
        return none
    engine.warm_up(sample)
    if engine.reduce is not None:
        sample = engine.reduce(sample)
    if len(sample) < 2:  # (what push-up keeps of it)
        return none
    adaptive, engine.adaptive = engine.adaptive, None  # the generic kernels: no task of
    try:  # the adaptive phases (as fragment_cost's probe)
        halves = [engine._fragment(0, sample.slice(0, n), 0.0).parts
                  for n in (len(sample) // 2, len(sample))]
    finally:
        engine.adaptive = adaptive
    return [None if any(h[i].long for h in halves)
            else tuple(len(np.unique(np.concatenate([h[i].edges().keys, h[i].tail.keys]),
                                     axis=0)) for h in halves)
            for i in range(len(engine.plan.branches))]


def table_rows(engine, batch_rows: int) -> float:
    """The most tuples a task's table takes: a task's partials are made pane by pane (in
    pane order), so a task's tuples of one pane at most - keys that drift from pane to pane,
    as NQ's auctions, fill no more of it than a pane's tuples."""
    b, per_ms = engine.plan.branches[0], getattr(engine, "tuples_per_ms", None)
    return min(batch_rows, batch_rows if per_ms is None
               else b.slide_ms * engine._per_unit(b, per_ms))


def sampled_keys(flow, sample, rows: float) -> tuple[float, float]:
    """The distinct keys the sample's tuples were drawn from (:func:`estimated_keys`) and
    how many of them a task's table of ``rows`` tuples holds (those passing the
    selections)."""
    idx, keys = flow.router.keys(sample)
    m = len(idx)
    if m < 2:
        return 0.0, 0.0
    est = estimated_keys(distinct_rows(keys[: m // 2]), distinct_rows(keys), m)
    return est, task_keys(est, rows * m / len(sample))


def auto_dataflow(engine, feed):
    """The partitioned dataflow (:class:`~scabbard.engine.dataflow.Dataflow`) ``auto`` runs
    ``engine``'s query as on ``feed``'s tasks, or None: the task-parallel engine (see the
    module).  The feed's first batch is read only where a task may hold that many keys;
    where they were estimated, ``engine.layout`` says what was estimated and chosen (the
    run's ``start`` event shows it)."""
    from scabbard.engine.dataflow import Dataflow, check_dataflow
    from scabbard.query.expr import QueryError

    if engine.config.workers < 2 or (feed.batch_rows or 0) < DATAFLOW_GROUPS:
        return None
    try:
        check_dataflow(engine)
    except QueryError:
        return None
    rows = table_rows(engine, feed.batch_rows)
    if rows < DATAFLOW_GROUPS:
        return None
    sample = feed.peek()
    if sample is None or not len(sample):
        return None
    sample = sample.slice(0, min(len(sample), SAMPLE_ROWS))
    # first, with the kernels the run loads anyway: do the sample's keys repeat so little
    # that they may be DATAFLOW_GROUPS? (K keys, m draws: whole / half = 1 + e^(-m / 2K))
    counts = sample_keys(engine, sample)[0]
    if counts is None or \
            counts[1] < counts[0] * (1 + math.exp(-len(sample) / (2 * DATAFLOW_GROUPS))):
        return None
    flow = Dataflow(engine, None, sample)
    est, per_task = sampled_keys(flow, sample, rows)
    chosen = per_task >= DATAFLOW_GROUPS and flow.parts >= 2
    engine.layout = {"keys": None if math.isinf(est) else round(est),
                     "task_keys": round(per_task), "parts": flow.parts,
                     "chosen": f"dataflow:{flow.parts}" if chosen else "per-task"}
    return flow if chosen else None
