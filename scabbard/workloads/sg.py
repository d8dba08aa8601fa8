"""Smart Grid (SG, DEBS 2014 Grand Challenge): smart-plug readings, 7 attributes in a 32-byte row.

Specification followed (DEBS 2014 Grand Challenge; WORKLOADS §5):

* Houses -> households (numbered within their house) -> plugs (numbered within
  their household); the challenge data has 40 houses and 2,125 plugs, the
  defaults of ``--houses`` and ``--plugs``.
* Every plug has two sensors and reports both in the same second: property 0 is
  *work*, the cumulative energy in kWh (monotone per plug), property 1 is *load*,
  the current power in W.
* The seven attributes are the challenge's CSV columns ``id, timestamp, value,
  property, plug_id, household_id, house_id`` (ids unsigned 32-bit, value a
  32-bit float), reordered so that the timestamp comes first, as the paper's
  field 0.  That is exactly 32 bytes - the paper's row size.
* Load values follow the measured shape of the challenge data (LightSaber's
  sample, WORKLOADS §5.2): about 63% zeros (appliances off); when on, a per-plug
  level that is log-normal across plugs (median ~24 W, heavy upper tail, capped
  at 3 kW) with +-10% noise.  Appliances switch on and off per minute.
  Work values start at a log-normal per-plug meter reading (median ~3 kWh) and
  grow with the plug's mean load.

How rows are produced: ``--rate`` readings arrive each second, two per plug, so
``rate / 2`` plugs report per second; the reporting plugs rotate through all
plugs, so each plug reports every ``2 * plugs / rate`` seconds (every second when
``rate = 2 * plugs``, as in the challenge).

Departures: timestamps are ms since the stream start (the challenge has Unix
seconds; LightSaber normalises them the same way); meters never reset; there
are no malformed or missing readings; household sizes vary per house (3..10
plugs per household) rather than following the real homes.
"""

from __future__ import annotations

import math

from scabbard.query import Query, avg, col, lit
from scabbard.schema import Field, Schema
from scabbard.workloads._expr import F, normal, randint, uniform
from scabbard.workloads.generator import BuildContext, DatagenError, GenParams, Option, WorkloadSpec

PROPERTIES = ("work", "load")
ON_PROBABILITY = 0.37
LOAD_MEDIAN_W = 24.4
LOAD_SIGMA = 1.6
LOAD_CAP_W = 3000.0
WORK_MEDIAN_KWH = 3.0
WORK_SIGMA = 1.5
SWITCH_PERIOD_S = 60

SCHEMA = Schema(
    "sg",
    (
        Field("timestamp", "int64", "event time (ms), whole seconds"),
        Field("value", "float32", "work (kWh, cumulative) or load (W)"),
        Field("property", "int32", "which sensor", PROPERTIES),
        Field("plug", "int32", "plug id, unique within its household"),
        Field("household", "int32", "household id, unique within its house"),
        Field("house", "int32", "house id"),
        Field("id", "uint32", "measurement id"),
    ),
    description="DEBS 2014 smart-plug readings",
)


def check(params: GenParams) -> None:
    if not params.rate.is_integer():
        raise DatagenError(f"sg: --rate is readings per second and must be whole, got {params.rate:g}")
    if params.option("houses") > params.option("plugs"):
        raise DatagenError("sg: --houses must not exceed --plugs")


def build(ctx: BuildContext) -> dict:
    p, seed = ctx.params, ctx.seed
    per_second = int(p.rate)
    plugs, houses = p.option("plugs"), p.option("houses")
    plugs_per_second = math.ceil(per_second / 2)
    i = F.col("id")
    t = F.floor(i / per_second).cast("long")
    j = i % per_second
    g = (t * plugs_per_second + F.floor(j / 2)) % plugs  # global plug number
    df = ctx.range(p.rows).select(i, t.alias("t"), (j % 2).alias("property"), g.alias("g"))
    g = F.col("g")
    house = F.floor(g * houses / plugs).cast("long")
    first_of_house = F.floor((house * plugs + houses - 1) / houses).cast("long")
    q = g - first_of_house
    per_household = F.lit(3) + randint(seed, "sg.household_size", 8, house)
    household = F.floor(q / per_household)
    plug = q % per_household

    level = F.least(
        F.lit(LOAD_CAP_W),
        F.exp(F.lit(math.log(LOAD_MEDIAN_W)) + F.lit(LOAD_SIGMA) * normal(seed, "sg.level", g)),
    )
    on = uniform(seed, "sg.on", g, F.floor(F.col("t") / SWITCH_PERIOD_S)) < ON_PROBABILITY
    noisy = level * (F.lit(1.0) + 0.1 * normal(seed, "sg.noise", F.col("id")))
    load = F.when(on, F.least(F.lit(LOAD_CAP_W), F.greatest(F.lit(0.0), noisy))).otherwise(F.lit(0.0))
    meter0 = F.exp(F.lit(math.log(WORK_MEDIAN_KWH)) + F.lit(WORK_SIGMA) * normal(seed, "sg.meter", g))
    work = meter0 + level * ON_PROBABILITY * F.col("t") / 3.6e6
    value = F.when(F.col("property") == 0, work).otherwise(load)

    stream = df.select(
        (F.col("t") * 1000).alias("timestamp"),
        value.cast("float").alias("value"),
        F.col("property").cast("int").alias("property"),
        plug.cast("int").alias("plug"),
        household.cast("int").alias("household"),
        house.cast("int").alias("house"),
        (F.col("id") % (2**32)).alias("id"),
    )
    return {"stream": stream}


SPEC = WorkloadSpec(
    name="sg",
    title="Smart Grid (DEBS 2014)",
    schema=SCHEMA,
    default_rate=4250,  # every one of the 2,125 plugs reports work and load each second
    durations={"tiny": 120, "small": 240, "full": 7530},
    rates={"tiny": 250},
    options=(
        Option("plugs", int, 2125, "smart plugs (DEBS 2014: 2,125)", minimum=1),
        Option("houses", int, 40, "houses (DEBS 2014: 40)", minimum=1),
    ),
    check=check,
    build=build,
)


# -- the paper's queries (Table 3) ---------------------------------------------------------------
def sg1() -> Query:
    """SG1: the global average load over the last hour.

    SELECT AVG(value) AS avg_value
    FROM sg [RANGE 3600 SECONDS SLIDE 1 SECOND]
    (work and load readings together, as LightSaber's code)
    """
    return (Query.stream(SCHEMA, "sg").select("value").window(3600, 1)
            .aggregate(avg("value").alias("avg_value")).named("SG1", sg1.__doc__))


def sg2() -> Query:
    """SG2: the average of each plug.

    SELECT plug, household, house, AVG(value) AS avg_value
    FROM sg [RANGE 128 SECONDS SLIDE 1 SECOND]
    GROUP BY plug, household, house
    """
    return (Query.stream(SCHEMA, "sg").select("value", "plug", "household", "house")
            .window(128, 1).group_by("plug", "household", "house")
            .aggregate(avg("value").alias("avg_value")).named("SG2", sg2.__doc__))


def sg3() -> Query:
    """SG3: plugs whose average exceeds the global average (joins SG1's and SG2's results).

    global = SG1: SELECT AVG(value) AS global_avg FROM sg [RANGE 3600 SECONDS SLIDE 1 SECOND]
    local  = SG2: SELECT plug, household, house, AVG(value) AS local_avg
             FROM sg [RANGE 128 SECONDS SLIDE 1 SECOND] GROUP BY plug, household, house
    SELECT l.*, g.global_avg FROM local [RANGE 1 SLIDE 1] l, global [RANGE 1 SLIDE 1] g
    WHERE l.window_end = g.window_end AND l.local_avg > g.global_avg
    """
    src = Query.stream(SCHEMA, "sg")
    local = (src.select("value", "plug", "household", "house").window(128, 1)
             .group_by("plug", "household", "house").aggregate(avg("value").alias("local_avg")))
    global_ = src.select("value").window(3600, 1).aggregate(avg("value").alias("global_avg"))
    return (local.join_windows(global_, where=col("local_avg") > col("global_avg"))
            .named("SG3", sg3.__doc__))


# -- PipeFabric's Table 1 (Pohl, GvDB 2019): one selection, four selectivities ---------------------
SELECTIVITIES = {"TRUE": lit(True), "MOD2": col("id") % 2 == 0, "MOD10": col("id") % 10 == 0,
                 "FALSE": lit(False)}


def pipefabric(selectivity: str) -> Query:
    """PF-<selectivity>: PipeFabric's Table 1 - a stateless selection forwarding the readings
    that satisfy a predicate on the key (the measurement id, consecutive numbers): ``true``
    (100%), ``key mod 2`` (50%), ``key mod 10`` (10%), ``false`` (0%).

    SELECT * FROM sg WHERE <predicate>
    """
    pred = SELECTIVITIES[selectivity]
    return Query.stream(SCHEMA, "sg").where(pred).named(
        f"PF-{selectivity}", f"PF-{selectivity}: SELECT * FROM sg WHERE {pred!r} "
        f"(PipeFabric's Table 1)")


QUERIES = {"SG1": sg1, "SG2": sg2, "SG3": sg3,
           **{f"PF-{k}": (lambda k=k: pipefabric(k)) for k in SELECTIVITIES}}
