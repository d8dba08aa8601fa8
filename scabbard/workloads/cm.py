"""Cluster Monitoring (CM, Google cluster trace task events): 12 attributes in a 64-byte row.

Specification followed (Google ``clusterdata-2011-2`` ``task_events`` table,
``google/cluster-data`` schema document; WORKLOADS §4): a task event has a
timestamp, job id, task index, machine id, event type (0 SUBMIT, 1 SCHEDULE,
2 EVICT, 3 FAIL, 4 FINISH, 5 KILL), user, scheduling class ("category", 0..3),
priority, normalised CPU, RAM and disk requests in [0, 1], and a
different-machines constraint.  The 12 attributes and their order are
LightSaber's (``ClusterMonitoring.h``); their value distributions are those
measured on LightSaber's trace sample (WORKLOADS §4.3):

* event types 0:32.6% 1:32.4% 2:1.2% 3:0.49% 4:27.3% 5:6.0%; the machine id is
  -1 for SUBMIT events and for most KILLs (the task was never placed), else one
  of ``--machines`` (12,500 in the trace);
* jobs start at a steady rate (one per ~70 events) and events of recent jobs are
  more frequent: a job's age in jobs is a bounded Zipf(1), so the number of events
  per job is heavy-tailed; tasks per job are heavy-tailed too (median 3, max ~3,100);
* per job: user (74 users; the top three own 63%, 12% and 7% of events),
  scheduling class 0:81.3% 1:3.6% 2:14.9% 3:0.27%, priority 0:24% 1:1.3% 2:72.8%
  8:0.4% 9:1.5% 10:0.07%, discrete CPU and RAM request sizes (0.025 for 63% of
  CPU requests, 0.033 for 58% of RAM requests), 64% with the constraint set;
  disk requests are 0 for 99.1% of events.
* Arrivals are bursty, as in the trace (1..2,120 events per second in the
  sample): the stream is cut into blocks of 256 events whose durations are
  log-normal (sigma 1.2), scaled so that the mean rate is ``--rate``.

Departures: a task's events are not sequenced into a lifecycle (SUBMIT before
SCHEDULE before FINISH for the same task); ids are synthetic (job ids from
6,250,000,000 upwards, as the trace's are large and increasing); requests are
per job, not per task; time is ms since the stream start (the trace uses µs
since 600 s before the trace start).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from scabbard.query import Query, avg, col, sum_
from scabbard.schema import Field, Schema
from scabbard.workloads._expr import F, choice, log_uniform_rank, numpy_rng, randint, uniform
from scabbard.workloads.generator import BuildContext, Option, WorkloadSpec

EVENT_TYPES = ("SUBMIT", "SCHEDULE", "EVICT", "FAIL", "FINISH", "KILL")
EVENT_WEIGHTS = (32.6, 32.4, 1.2, 0.49, 27.3, 6.0)
CATEGORY_WEIGHTS = (81.3, 3.6, 14.9, 0.27)
PRIORITIES = (0, 1, 2, 8, 9, 10)
PRIORITY_WEIGHTS = (24.0, 1.3, 72.8, 0.4, 1.5, 0.07)
CPU_SIZES = (0.025, 0.016, 0.013, 0.009, 0.063, 0.031, 0.125, 0.25)
CPU_WEIGHTS = (63.0, 12.0, 8.5, 6.0, 3.0, 4.0, 2.5, 1.0)
RAM_SIZES = (0.033, 0.016, 0.008, 0.062, 0.124, 0.005)
RAM_WEIGHTS = (58.0, 20.0, 8.0, 8.0, 4.0, 2.0)
USERS = 74
EVENTS_PER_JOB = 70
ACTIVE_JOB_SPAN_S = 600
MAX_TASKS = 3100
BLOCK_ROWS = 256
BURST_SIGMA = 1.2
FIRST_JOB_ID = 6_250_000_000

SCHEMA = Schema(
    "cm",
    (
        Field("timestamp", "int64", "event time (ms)"),
        Field("job_id", "int64", "job id"),
        Field("task_id", "int64", "task index within the job"),
        Field("machine_id", "int64", "machine id, -1 if not placed"),
        Field("event_type", "int32", "task event type", EVENT_TYPES),
        Field("user_id", "int32", "user (hashed in the trace)"),
        Field("category", "int32", "scheduling class 0..3"),
        Field("priority", "int32", "priority 0..11"),
        Field("cpu", "float32", "normalised CPU request"),
        Field("ram", "float32", "normalised RAM request"),
        Field("disk", "float32", "normalised disk request"),
        Field("constraints", "int32", "different-machines constraint (0/1)"),
    ),
    description="Google cluster trace task events",
)


def user_ids(seed: int) -> list[int]:
    """74 distinct user numbers in 6..511, as the trace sample's hashed users."""
    rng = numpy_rng(seed, "cm.users")
    return sorted(int(x) for x in rng.choice(np.arange(6, 512), USERS, replace=False))


def user_weights() -> list[float]:
    tail = [0.8**k for k in range(USERS - 3)]
    scale = 18.0 / sum(tail)
    return [63.0, 12.0, 7.0] + [w * scale for w in tail]


def block_timeline(seed: int, rows: int, duration_ms: float) -> np.ndarray:
    """Start (ms) of each block of 256 events; block lengths are log-normal, summing to the duration.

    Returns ``blocks + 1`` boundaries; block b spans [bounds[b], bounds[b+1]).
    """
    blocks = math.ceil(rows / BLOCK_ROWS)
    rng = numpy_rng(seed, "cm.bursts")
    lengths = rng.lognormal(0.0, BURST_SIGMA, blocks)
    # the last block may be short: weigh it by its share of events
    last = rows - (blocks - 1) * BLOCK_ROWS
    lengths[-1] *= last / BLOCK_ROWS
    bounds = np.concatenate([[0.0], np.cumsum(lengths)])
    return bounds * (duration_ms / bounds[-1])


def job_table(ctx: BuildContext, jobs: int):
    """One row per job with its attributes; broadcast to the events (computed once per job)."""
    seed = ctx.seed
    job = F.col("id")
    tasks = F.lit(1) + F.floor(F.exp(F.pow(uniform(seed, "cm.tasks", job), 3) * math.log(MAX_TASKS)))
    return ctx.spark.range(0, jobs, 1, 1).select(
        job.alias("job"),
        tasks.cast("long").alias("tasks"),
        choice(uniform(seed, "cm.user", job), user_ids(seed), user_weights()).cast("int").alias("user_id"),
        choice(uniform(seed, "cm.category", job), [0, 1, 2, 3], list(CATEGORY_WEIGHTS))
        .cast("int").alias("category"),
        choice(uniform(seed, "cm.priority", job), list(PRIORITIES), list(PRIORITY_WEIGHTS))
        .cast("int").alias("priority"),
        choice(uniform(seed, "cm.cpu", job), list(CPU_SIZES), list(CPU_WEIGHTS)).cast("float").alias("cpu"),
        choice(uniform(seed, "cm.ram", job), list(RAM_SIZES), list(RAM_WEIGHTS)).cast("float").alias("ram"),
        (uniform(seed, "cm.constraints", job) < 0.638).cast("int").alias("constraints"),
    )


def build(ctx: BuildContext) -> dict:
    p, seed = ctx.params, ctx.seed
    spark = ctx.spark
    bounds = block_timeline(seed, p.rows, p.duration * 1000.0)
    n_blocks = len(bounds) - 1
    blocks = spark.createDataFrame(
        pd.DataFrame({"blk": np.arange(n_blocks, dtype=np.int64), "start": bounds[:-1],
                      "span": np.diff(bounds)})
    )
    i = F.col("id")
    last_rows = p.rows - (n_blocks - 1) * BLOCK_ROWS
    rows_in_block = F.when(F.col("blk") == n_blocks - 1, F.lit(last_rows)).otherwise(BLOCK_ROWS)
    df = ctx.range(p.rows).withColumn("blk", F.floor(i / BLOCK_ROWS).cast("long"))
    df = df.join(F.broadcast(blocks), "blk").select(
        i,
        F.floor(
            F.col("start") + F.col("span") * (i % BLOCK_ROWS) / rows_in_block
        ).cast("long").alias("timestamp"),
    )

    jobs_per_s = p.rate / EVENTS_PER_JOB
    span_jobs = max(1, int(jobs_per_s * ACTIVE_JOB_SPAN_S))
    newest = F.floor(F.col("timestamp") / 1000.0 * jobs_per_s).cast("long")
    age = log_uniform_rank(uniform(seed, "cm.job_age", i), span_jobs)
    df = df.select(i, "timestamp", F.greatest(F.lit(0), newest - age).alias("job"))
    df = df.join(F.broadcast(job_table(ctx, int(p.duration * jobs_per_s) + 1)), "job")
    event_type = choice(uniform(seed, "cm.event", i), list(range(6)), list(EVENT_WEIGHTS))
    task = randint(seed, "cm.task", F.col("tasks"), i)
    unplaced = (F.col("event_type") == 0) | (
        (F.col("event_type") == 5) & (uniform(seed, "cm.kill_placed", i) < 0.8)
    )
    machine = F.lit(100_000) + randint(seed, "cm.machine", p.option("machines"), F.col("job"),
                                       F.col("task_id")) * 97
    disk = F.when(uniform(seed, "cm.disk", i) < 0.991, F.lit(0.0)).otherwise(
        uniform(seed, "cm.disk_size", i) * 0.006
    )
    df = df.select("*", event_type.alias("event_type"), task.alias("task_id"))
    stream = df.select(
        F.col("timestamp"),
        (F.lit(FIRST_JOB_ID) + F.col("job")).alias("job_id"),
        F.col("task_id"),
        F.when(unplaced, F.lit(-1)).otherwise(machine).cast("long").alias("machine_id"),
        F.col("event_type").cast("int").alias("event_type"),
        "user_id",
        "category",
        "priority",
        "cpu",
        "ram",
        disk.cast("float").alias("disk"),
        "constraints",
    )
    return {"stream": stream}


SPEC = WorkloadSpec(
    name="cm",
    title="Cluster Monitoring (Google cluster trace)",
    schema=SCHEMA,
    default_rate=200,
    durations={"tiny": 120, "small": 5000, "full": 160000},
    options=(Option("machines", int, 12_500, "machines in the cluster", minimum=1),),
    build=build,
)


# -- the paper's queries (Table 3) ---------------------------------------------------------------
def cm1() -> Query:
    """CM1: total CPU requested per scheduling class.

    SELECT category, SUM(cpu) AS sum_cpu
    FROM cm [RANGE 60 SECONDS SLIDE 1 SECOND]
    GROUP BY category
    """
    return (Query.stream(SCHEMA, "cm").select("category", "cpu")
            .window(60, 1).group_by("category").aggregate(sum_("cpu").alias("sum_cpu"))
            .named("CM1", cm1.__doc__))


def cm2() -> Query:
    """CM2: average CPU request of each job's failing tasks.

    SELECT job_id, AVG(cpu) AS avg_cpu
    FROM cm [RANGE 60 SECONDS SLIDE 1 SECOND]
    WHERE event_type = 'FAIL'
    GROUP BY job_id
    (the paper says avg; LightSaber's code computes sum)
    """
    return (Query.stream(SCHEMA, "cm").where(col("event_type") == "FAIL").select("job_id", "cpu")
            .window(60, 1).group_by("job_id").aggregate(avg("cpu").alias("avg_cpu"))
            .named("CM2", cm2.__doc__))


QUERIES = {"CM1": cm1, "CM2": cm2}
