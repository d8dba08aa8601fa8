"""Darwin's micro-benchmark: 32-byte records, a 60 s tumbling sum per key.

Darwin (CIDR 2022, §4, Fig. 5) measures how a stream engine copes when its window state
outgrows memory with the simplest stateful query there is: records of a key and a value,
summed per key over 60 s tumbling windows, with the number of keys as the knob that sets
the state's size.  It is not one of the paper's Table 3 workloads (:data:`scabbard.workloads.NAMES`);
it is the workload of the larger-than-memory state experiments (notebook 13).

A record: ``timestamp`` (ms, evenly spaced at ``--rate``), ``key`` (uniform over
``--keys`` keys), ``value`` (uniform in [0, 1000)), in a 32-byte row as Darwin's.  The state
of one window is about one partial per key that the window saw: at ``keys`` keys and ``rate``
tuples per second, ``min(keys, 60 x rate)`` groups.

Departure: Darwin's records carry an 8-byte payload the query never reads; here the row is
padded to 32 bytes in the accounting (``row_bytes``) instead of storing it.
"""

from __future__ import annotations

from scabbard.query import Query, col, sum
from scabbard.schema import Field, Schema
from scabbard.workloads._expr import F, evenly_spaced_ms, randint
from scabbard.workloads.generator import BuildContext, Option, WorkloadSpec

WINDOW_S = 60
VALUES = 1000

SCHEMA = Schema(
    "darwin",
    (
        Field("timestamp", "int64", "event time (ms since the stream started)"),
        Field("key", "int64", "the record's key (uniform over --keys keys)"),
        Field("value", "int64", "the value summed (uniform in [0, 1000))"),
    ),
    row_bytes=32,
    description="Darwin's micro-benchmark records (key, value)",
)


def build(ctx: BuildContext) -> dict:
    p, seed = ctx.params, ctx.seed
    i = F.col("id")
    stream = ctx.range(p.rows).select(
        evenly_spaced_ms(i, p.rate).alias("timestamp"),
        randint(seed, "darwin.key", p.option("keys"), i).alias("key"),
        randint(seed, "darwin.value", VALUES, i).alias("value"),
    )
    return {"stream": stream}


SPEC = WorkloadSpec(
    name="darwin",
    title="Darwin micro-benchmark",
    schema=SCHEMA,
    default_rate=20_000,
    durations={"tiny": 180, "small": 600, "full": 3600},
    rates={"tiny": 500},
    options=(Option("keys", int, 100_000, "distinct keys (the state's size: up to 10^8)",
                    minimum=1),),
    build=build,
)


def darwin() -> Query:
    """DARWIN: the sum of the values per key every 60 seconds (Darwin's micro-benchmark).

    SELECT key, SUM(value) AS total
    FROM darwin [RANGE 60 SECONDS SLIDE 60 SECONDS]
    GROUP BY key
    """
    return (Query.stream(SCHEMA, "darwin").select("key", "value")
            .window(WINDOW_S).group_by("key").aggregate(sum(col("value")).alias("total"))
            .named("DARWIN", darwin.__doc__))


QUERIES = {"DARWIN": darwin}
