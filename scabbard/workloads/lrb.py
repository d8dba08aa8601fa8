"""Linear Road (LRB): vehicle position reports, 7 attributes in a 32-byte row.

Specification followed (Linear Road benchmark, Arasu et al. VLDB 2004; the
Brandeis overview; the Walmart ``LinearGenerator`` constants, WORKLOADS §1):

* ``L`` expressways (``--xways``; default one per 1,000 reports/s, about the
  average rate of one full-scale expressway), each 100 one-mile segments of
  5,280 ft in two directions (0 east, 1 west); lanes 0 entrance ramp, 1-3 travel,
  4 exit ramp; positions 0..527,999 ft; speeds 0..100 mph.
* Every vehicle on the road emits a position report every 30 s, from its entry
  (on the entrance lane, at most 40 mph) to its exit (on the exit lane, 10 mph).
  A vehicle enters at the first foot of its entry segment (east) or the last
  (west) and travels at least two segments.
* Travel speed: the 70 mph limit +- 10 mph per vehicle, reduced by congestion
  of 0-50 mph per (expressway, direction, segment) that changes every 5 minutes -
  so some segments average under 40 mph, which is what LRB1's HAVING detects.
* Only type-0 (position) reports, with LightSaber's seven attributes
  (timestamp, vehicle, speed, highway, lane, direction, position); the segment
  is ``position / 5280``, as in the paper's queries.

How rows are produced without per-vehicle state: ``--rate`` reports arrive each
second.  Report slot ``j`` of second ``t`` belongs to a "road slot" ``(t mod 30, j)``
that hosts one vehicle after another, so each vehicle reports exactly every 30 s.
A road slot is cut into blocks of 40 reports holding two vehicles whose trip
lengths split the block at random (2..38 reports each); blocks are shifted per
slot so vehicles do not all enter together.  Everything about a vehicle is a
hash of its id.

Departures from the specification:

* The rate is constant (``--rate`` reports every second) rather than ramping
  up and down over a 3-hour simulation; the road starts full.
* Positions advance at the vehicle's mean travel speed; the reported speed adds
  the segment's congestion and noise, so speed and position are not integrated
  from each other (a closed form per report, no car-following physics).
* No accidents, no re-entrant vehicles, and no type-2/3/4 query requests (the
  paper's queries read position reports only).
* Timestamps are in ms of event time (whole seconds, as LRB's Time field).
"""

from __future__ import annotations

import math

from scabbard.query import Query, avg, col, count
from scabbard.schema import Field, Schema
from scabbard.workloads._expr import F, choice, randint, uniform
from scabbard.workloads.generator import BuildContext, DatagenError, GenParams, Option, WorkloadSpec

SEGMENTS = 100
FEET_PER_SEGMENT = 5280
ROAD_FEET = SEGMENTS * FEET_PER_SEGMENT
REPORT_INTERVAL_S = 30
BLOCK_REPORTS = 40  # a road slot holds two vehicles per block of 40 reports (20 minutes)
SPEED_LIMIT = 70
SPEED_FUDGE = 10
ENTRANCE_MAX_SPEED = 40
EXIT_SPEED = 10
CONGESTION_MPH = (0, 10, 20, 30, 40, 50)
CONGESTION_WEIGHTS = (0.40, 0.20, 0.15, 0.10, 0.10, 0.05)
CONGESTION_PERIOD_S = 300
REPORTS_PER_XWAY = 1000  # default reports/s per expressway when --xways is not given
FEET_PER_S_PER_MPH = 5280 / 3600

SCHEMA = Schema(
    "lrb",
    (
        Field("timestamp", "int64", "event time (ms), whole seconds"),
        Field("vehicle", "int32", "vehicle id"),
        Field("speed", "float32", "speed (mph, 0..100)"),
        Field("highway", "int32", "expressway (0..L-1)"),
        Field("lane", "int32", "lane: 0 entrance, 1-3 travel, 4 exit"),
        Field("direction", "int32", "0 east, 1 west"),
        Field("position", "int32", "position (feet, 0..527999)"),
    ),
    description="Linear Road position reports",
)


def xways(params: GenParams) -> int:
    """The number of expressways: ``--xways``, or one per 1,000 reports/s."""
    return params.option("xways") or max(1, math.ceil(params.rate / REPORTS_PER_XWAY))


def check(params: GenParams) -> None:
    if not params.rate.is_integer():
        raise DatagenError(f"lrb: --rate is reports per second and must be whole, got {params.rate:g}")
    per_second = int(params.rate)
    slots = REPORT_INTERVAL_S * per_second
    rounds = math.ceil(params.duration / REPORT_INTERVAL_S) + BLOCK_REPORTS
    max_vehicle = ((rounds // BLOCK_REPORTS + 1) * slots + slots) * 2
    if max_vehicle >= 2**31:
        raise DatagenError(
            f"lrb: {params.rate:g} reports/s for {params.duration:g} s needs more vehicle ids "
            "than int32 holds; shorten --duration or lower --rate"
        )


def build(ctx: BuildContext) -> dict:
    p, seed = ctx.params, ctx.seed
    per_second = int(p.rate)
    n_xways = xways(p)
    i = F.col("id")
    t = F.floor(i / per_second).cast("long")  # second of event time
    j = i % per_second  # report slot within the second
    road_slot = (t % REPORT_INTERVAL_S) * per_second + j
    shifted = F.floor(t / REPORT_INTERVAL_S) + randint(seed, "lrb.shift", BLOCK_REPORTS, road_slot)
    block = F.floor(shifted / BLOCK_REPORTS).cast("long")
    q = shifted % BLOCK_REPORTS
    first_len = F.lit(2) + randint(seed, "lrb.split", BLOCK_REPORTS - 3, road_slot, block)
    second = q >= first_len
    k = F.when(second, q - first_len).otherwise(q)  # report number within the trip
    n = F.when(second, F.lit(BLOCK_REPORTS) - first_len).otherwise(first_len)  # trip length
    vehicle = (block * (REPORT_INTERVAL_S * per_second) + road_slot) * 2 + second.cast("long")

    df = ctx.range(p.rows).select(
        i,
        t.alias("t"),
        vehicle.alias("vehicle"),
        k.alias("k"),
        n.alias("n"),
    )
    v = F.col("vehicle")
    direction = randint(seed, "lrb.dir", 2, v)
    cruise = F.lit(SPEED_LIMIT - SPEED_FUDGE) + uniform(seed, "lrb.cruise", v) * (2 * SPEED_FUDGE)
    mean_congestion = sum(m * w for m, w in zip(CONGESTION_MPH, CONGESTION_WEIGHTS, strict=True))
    feet_per_report = (cruise - F.lit(mean_congestion)) * (REPORT_INTERVAL_S * FEET_PER_S_PER_MPH)
    trip_feet = feet_per_report * (F.col("n") - 1)
    trip_segments = F.ceil(trip_feet / FEET_PER_SEGMENT).cast("long")
    entry_segment = randint(seed, "lrb.entry", F.lit(SEGMENTS) - trip_segments, v)
    travelled = feet_per_report * F.col("k")
    east_pos = entry_segment * FEET_PER_SEGMENT + travelled
    west_pos = (F.lit(SEGMENTS) - entry_segment) * FEET_PER_SEGMENT - 1 - travelled
    position = F.floor(F.when(direction == 0, east_pos).otherwise(west_pos))
    position = F.greatest(F.lit(0), F.least(F.lit(ROAD_FEET - 1), position)).cast("long")
    df = df.select(
        "id", "t", "vehicle", "k", "n",
        randint(seed, "lrb.xway", n_xways, v).alias("highway"),
        direction.alias("direction"),
        cruise.alias("cruise"),
        position.alias("position"),
    )

    segment = F.floor(F.col("position") / FEET_PER_SEGMENT)
    congestion = choice(
        uniform(seed, "lrb.congestion", F.col("highway"), F.col("direction"), segment,
                F.floor(F.col("t") / CONGESTION_PERIOD_S)),
        list(CONGESTION_MPH),
        list(CONGESTION_WEIGHTS),
    )
    noise = (uniform(seed, "lrb.noise", F.col("id")) - 0.5) * 10.0
    travel_speed = F.least(F.col("cruise"), F.lit(SPEED_LIMIT) - congestion) + noise
    entry_speed = F.lit(EXIT_SPEED) + uniform(seed, "lrb.entry_speed", F.col("vehicle")) * (
        ENTRANCE_MAX_SPEED - EXIT_SPEED
    )
    first = F.col("k") == 0
    last = F.col("k") == F.col("n") - 1
    speed = (
        F.when(first, entry_speed)
        .when(last, F.lit(float(EXIT_SPEED)))
        .otherwise(F.greatest(F.lit(0.0), F.least(F.lit(100.0), travel_speed)))
    )
    lane = (
        F.when(first, F.lit(0))
        .when(last, F.lit(4))
        .otherwise(F.lit(1) + randint(seed, "lrb.lane", 3, F.col("id")))
    )
    stream = df.select(
        (F.col("t") * 1000).alias("timestamp"),
        F.col("vehicle").cast("int").alias("vehicle"),
        F.floor(speed).cast("float").alias("speed"),
        F.col("highway").cast("int").alias("highway"),
        lane.cast("int").alias("lane"),
        F.col("direction").cast("int").alias("direction"),
        F.col("position").cast("int").alias("position"),
    )
    return {"stream": stream}


SPEC = WorkloadSpec(
    name="lrb",
    title="Linear Road",
    schema=SCHEMA,
    default_rate=1000,
    durations={"tiny": 120, "small": 1000, "full": 32000},
    rates={"tiny": 250},
    options=(
        Option("xways", int, 0, "expressways (0: one per 1,000 reports/s)", minimum=0),
    ),
    check=check,
    build=build,
)


# -- the paper's queries (Table 3) ---------------------------------------------------------------
def _reports() -> Query:
    return Query.stream(SCHEMA, "lrb")


def lrb1() -> Query:
    """LRB1: congested road segments.

    SELECT highway, direction, position / 5280 AS segment, AVG(speed) AS avg_speed
    FROM lrb [RANGE 300 SECONDS SLIDE 1 SECOND]
    GROUP BY highway, direction, segment
    HAVING avg_speed < 40
    """
    return (_reports()
            .select("highway", "direction", "speed", segment=col("position") // FEET_PER_SEGMENT)
            .window(300, 1).group_by("highway", "direction", "segment")
            .aggregate(avg("speed").alias("avg_speed"))
            .having(col("avg_speed") < 40).named("LRB1", lrb1.__doc__))


def lrb2() -> Query:
    """LRB2: reports of each vehicle in each segment.

    SELECT vehicle, highway, direction, position / 5280 AS segment, COUNT(*) AS reports
    FROM lrb [RANGE 30 SECONDS SLIDE 1 SECOND]
    GROUP BY vehicle, highway, direction, segment
    """
    return (_reports()
            .select("vehicle", "highway", "direction", segment=col("position") // FEET_PER_SEGMENT)
            .window(30, 1).group_by("vehicle", "highway", "direction", "segment")
            .aggregate(count().alias("reports")).named("LRB2", lrb2.__doc__))


def lrb3() -> Query:
    """LRB3: vehicles per segment - the count of counts of the paper's Fig. 2.

    SELECT highway, direction, segment, COUNT(vehicle) AS vehicles
    FROM (LRB2) [RANGE 1 SLIDE 1]          -- each window of LRB2's result stream
    GROUP BY highway, direction, segment
    """
    return (lrb2().per_window().group_by("highway", "direction", "segment")
            .aggregate(count().alias("vehicles")).named("LRB3", lrb3.__doc__))


def lrb_rows() -> Query:
    """LRB-ROWS: a count-based window - the average speed and the reports per expressway and
    direction over the last 4,096 position reports, every 1,024 reports (tuples numbered by
    their offset in the stream).

    SELECT highway, direction, AVG(speed) AS avg_speed, COUNT(*) AS reports
    FROM lrb [ROWS 4096 SLIDE 1024]
    GROUP BY highway, direction
    """
    return (_reports().window_rows(4096, 1024).group_by("highway", "direction")
            .aggregate(avg("speed").alias("avg_speed"), count().alias("reports"))
            .named("LRB-ROWS", lrb_rows.__doc__))


QUERIES = {"LRB1": lrb1, "LRB2": lrb2, "LRB3": lrb3, "LRB-ROWS": lrb_rows}
