"""Sensor Monitoring (SM, DEBS 2012 Grand Challenge): manufacturing sensors, 14 attributes in 64 bytes.

Specification followed (DEBS 2012 Grand Challenge, ``CDataPoint`` schema;
WORKLOADS §6; LightSaber's ``ManufacturingEquipment.h``, whose query the paper
calls SM):

* Readings of one manufacturing machine at 100 Hz (``--rate``); inter-arrival
  times deviate from the nominal 10 ms (here by up to +-40%).
* Attributes, in LightSaber's order: timestamp, message index (consecutive),
  ``mf01``-``mf03`` (electrical power of main phases 1-3), ``pc13``-``pc15`` (anode
  current drop, cells 1-3), ``pc25``-``pc27`` (anode voltage drop, cells 1-3,
  unsigned), ``res`` (unsigned) and the first two binary chemical-additive
  signals ``bm05`` (sensor) and ``bm06`` (release valve).  4 x 8 + 12 x 4 = 64 bytes.
* Values follow the measured shape of the challenge data (WORKLOADS §6.2):
  ``mf01``/``mf02``/``mf03`` wander around 13,053 / 14,378 / 8,089 with standard
  deviations ~360 / ~410 / ~200 and small steps between readings (sd ~20 / 23 / 5),
  ``mf01`` and ``mf02`` move together (correlation ~0.99) and share rare spikes of
  +1,000..5,000; ``pc13``/``pc14``/``pc15`` stay within 53-86 / 172-206 / 136-171;
  ``pc25``-``pc27`` and ``res`` are 0, as in the recorded data.  ``bm05`` switches
  in 10 s phases and the valve ``bm06`` follows it one phase later (the delay
  the challenge's Query 1 measures).

Distribution change (``--change-at S``, for the paper's Fig. 12): from event time
S seconds on, the machine idles: the integer readings ``mf01``-``mf03`` and
``pc13``-``pc15`` drop to small values in 0..15 that stay constant for runs of
14 readings - the second buffer of LightSaber's ``--adaptive-data`` mode.  A codec
specialised on the first regime (e.g. base-delta around 13,000) sees values
outside its assumption and must fall back; the new regime compresses better.

Departures: the signals are smooth random curves (value noise with 1 s knots),
not recordings; the 44 further boolean signals of the challenge are not stored
(LightSaber parses only the first 12 columns either).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scabbard.query import Query, avg
from scabbard.schema import Field, Schema
from scabbard.workloads._expr import F, normal, randint, round_half_up, uniform
from scabbard.workloads.generator import BuildContext, DatagenError, GenParams, Option, WorkloadSpec

if TYPE_CHECKING:
    from pyspark.sql import Column

JITTER = 0.8  # inter-arrival times vary by +-40% of the nominal interval
SPIKE_PROBABILITY = 0.003  # per 1 s knot
IDLE_RUN = 14
IDLE_VALUES = 16
BM_PHASE_S = 10

SCHEMA = Schema(
    "sm",
    (
        Field("timestamp", "int64", "event time (ms)"),
        Field("message_index", "int64", "consecutive message number"),
        Field("mf01", "int32", "electrical power, main phase 1"),
        Field("mf02", "int32", "electrical power, main phase 2"),
        Field("mf03", "int32", "electrical power, main phase 3"),
        Field("pc13", "int32", "anode current drop detection, cell 1"),
        Field("pc14", "int32", "anode current drop detection, cell 2"),
        Field("pc15", "int32", "anode current drop detection, cell 3"),
        Field("pc25", "uint32", "anode voltage drop detection, cell 1"),
        Field("pc26", "uint32", "anode voltage drop detection, cell 2"),
        Field("pc27", "uint32", "anode voltage drop detection, cell 3"),
        Field("res", "uint32", "reserved"),
        Field("bm05", "int32", "chemical additive sensed (0/1)"),
        Field("bm06", "int32", "chemical additive release valve open (0/1)"),
    ),
    description="DEBS 2012 manufacturing equipment sensors",
)


def check(params: GenParams) -> None:
    change = params.option("change_at")
    if change is not None and not 0 <= change <= params.duration:
        raise DatagenError(
            f"sm: --change-at must lie within the dataset's 0..{params.duration:g} s, got {change:g}"
        )


SMOOTH = ("common", "mf01", "mf02", "mf03", "pc13", "pc14", "pc15")


def knot_table(ctx: BuildContext, knots: int):
    """One row per 1 s knot: the smooth signals' values at the knot and the next, and spikes.

    Computed once per knot and broadcast to the rows (instead of per row), which
    keeps the generator fast; interpolation between the two values is per row.
    """
    seed = ctx.seed
    k = F.col("id")
    cols = [k.alias("knot")]
    for name in SMOOTH:
        cols.append(normal(seed, f"sm.{name}", k).alias(f"{name}_a"))
        cols.append(normal(seed, f"sm.{name}", k + 1).alias(f"{name}_b"))
    cols.append(
        F.when(uniform(seed, "sm.spike", k) < SPIKE_PROBABILITY,
               F.lit(1000.0) + 4000.0 * uniform(seed, "sm.spike_size", k))
        .otherwise(F.lit(0.0)).alias("spike")
    )
    return ctx.spark.range(0, knots, 1, 1).select(*cols)


def build(ctx: BuildContext) -> dict:
    p, seed = ctx.params, ctx.seed
    interval_ms = 1000.0 / p.rate
    knot_rows = max(1, int(round(p.rate)))  # one knot per second of readings
    i = F.col("id")
    jitter = (uniform(seed, "sm.jitter", i) - 0.5) * (JITTER * interval_ms)
    ts = F.greatest(F.lit(0), F.floor(i.cast("double") * interval_ms + jitter)).cast("long")
    df = ctx.range(p.rows).select(
        i, ts.alias("timestamp"), F.floor(i / knot_rows).cast("long").alias("knot"),
        ((i % knot_rows) / float(knot_rows)).alias("frac"),
    )
    knots = knot_table(ctx, (p.rows - 1) // knot_rows + 1)
    df = df.join(F.broadcast(knots), "knot")
    frac = F.col("frac")

    def smooth(name: str) -> Column:
        """Value noise: N(0,1) at each knot, linearly interpolated between knots."""
        return F.col(f"{name}_a") * (F.lit(1.0) - frac) + F.col(f"{name}_b") * frac

    common, spike = smooth("common"), F.col("spike")
    mf01 = 13053 + 360 * (0.99 * common + 0.14 * smooth("mf01")) + 12 * normal(seed, "sm.n1", i) + spike
    mf02 = 14378 + 410 * (0.99 * common + 0.14 * smooth("mf02")) + 14 * normal(seed, "sm.n2", i) + 1.1 * spike
    mf03 = 8089 + 196 * smooth("mf03") + 3 * normal(seed, "sm.n3", i)

    def bounded(name: str, mean: float, sd: float, lo: int, hi: int) -> Column:
        raw = mean + sd * smooth(name) + 1.5 * normal(seed, f"sm.{name}.n", i)
        return F.greatest(F.lit(lo), F.least(F.lit(hi), round_half_up(raw)))

    readings = {
        "mf01": round_half_up(mf01),
        "mf02": round_half_up(mf02),
        "mf03": round_half_up(mf03),
        "pc13": bounded("pc13", 70, 5, 53, 86),
        "pc14": bounded("pc14", 190, 5, 172, 206),
        "pc15": bounded("pc15", 152, 5, 136, 171),
    }
    change = p.option("change_at")
    if change is not None:
        idle = F.col("timestamp") >= F.lit(int(round(change * 1000)))
        run = F.floor(i / IDLE_RUN)
        readings = {
            name: F.when(idle, randint(seed, f"sm.idle.{name}", IDLE_VALUES, run)).otherwise(expr)
            for name, expr in readings.items()
        }
    phase = F.floor(F.col("timestamp") / (BM_PHASE_S * 1000)).cast("long")
    sensed = uniform(seed, "sm.bm05", phase) < 0.3
    valve = uniform(seed, "sm.bm05", phase - 1) < 0.3
    zero = F.lit(0).cast("long")
    stream = df.select(
        "timestamp",
        F.col("id").alias("message_index"),
        *[expr.cast("int").alias(name) for name, expr in readings.items()],
        zero.alias("pc25"),
        zero.alias("pc26"),
        zero.alias("pc27"),
        zero.alias("res"),
        sensed.cast("int").alias("bm05"),
        valve.cast("int").alias("bm06"),
    )
    return {"stream": stream}


SPEC = WorkloadSpec(
    name="sm",
    title="Sensor Monitoring (DEBS 2012)",
    schema=SCHEMA,
    default_rate=100,
    durations={"tiny": 300, "small": 10_000, "full": 320_000},
    options=(
        Option("change_at", float, None,
               "event time (s) at which the integer readings change distribution (Fig. 12)",
               minimum=0),
    ),
    check=check,
    build=build,
)


# -- the paper's query (Table 3) ---------------------------------------------------------------
def sm() -> Query:
    """SM: running averages of the three power phases (LightSaber's ME1).

    SELECT AVG(mf01), AVG(mf02), AVG(mf03)
    FROM sm [RANGE 60 SECONDS SLIDE 1 SECOND]
    """
    return (Query.stream(SCHEMA, "sm").select("mf01", "mf02", "mf03").window(60, 1)
            .aggregate(avg("mf01"), avg("mf02"), avg("mf03")).named("SM", sm.__doc__))


QUERIES = {"SM": sm}
