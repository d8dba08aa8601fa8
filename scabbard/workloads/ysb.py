"""Yahoo Streaming Benchmark (YSB): ad events, 7 attributes in a 128-byte row.

Specification followed (``yahoo/streaming-benchmarks``, ``data/src/setup/core.clj``
and the README's "The Test"):

* 100 campaigns x 10 ads; each campaign owns 10 consecutive ads of the ad list
  (``(partition 10 ads)``); ids are random UUIDs.  The ad -> campaign relation is
  the side table ``ad_campaign`` (what the benchmark keeps in Redis).
* An event has ``user_id``, ``page_id``, ``ad_id``, ``ad_type`` (banner, modal,
  sponsored-search, mail, mobile), ``event_type`` (view, click, purchase),
  ``event_time`` and ``ip_address``.  Every categorical choice is uniform
  (``rand-nth``); in real-time mode user and page ids are drawn from 100 UUIDs
  each.  ``event_time`` is the scheduled emission time ``n / throughput``, so
  events are evenly spaced at ``--rate`` per second.
* The query (``scabbard.workloads.ysb`` queries, DESIGN §4): views only, join
  ad -> campaign, count per campaign per 10 s tumbling window.

Layout follows SABER's numeric YSB variant (LIGHTSABER_NOTES §2.9, WORKLOADS §2.2):
three 16-byte UUIDs, three 4-byte ints, padded to the paper's 128-byte row.

Departures:

* UUIDs are derived from the seed (``_expr.uuid4_bytes``), not from a system
  random source, so datasets are reproducible.
* ``ad_type`` and ``event_type`` are stored as integer codes (the schema names
  the strings), ``ip_address`` as the IPv4 integer of the spec's constant
  "1.2.3.4"; the JSON encoding of the original events is not reproduced.
* The optional event-time skew and late events of ``--with-skew`` are not
  generated: events arrive in event-time order, as the paper assumes (§2.3).
"""

from __future__ import annotations

from scabbard.query import Query, Relation, col, count
from scabbard.schema import Field, Schema
from scabbard.workloads._expr import F, T, evenly_spaced_ms, pick, randint, uuid_table
from scabbard.workloads.generator import BuildContext, Option, WorkloadSpec

EVENT_TYPES = ("view", "click", "purchase")
AD_TYPES = ("banner", "modal", "sponsored-search", "mail", "mobile")
ADS_PER_CAMPAIGN = 10
USERS = 100
PAGES = 100
IP_ADDRESS = 0x01020304  # "1.2.3.4"

SCHEMA = Schema(
    "ysb",
    (
        Field("timestamp", "int64", "event time (ms since the stream started)"),
        Field("user_id", "uuid", "user (one of 100)"),
        Field("page_id", "uuid", "page (one of 100)"),
        Field("ad_id", "uuid", "ad (one of campaigns x 10)"),
        Field("ad_type", "int32", "ad type", AD_TYPES),
        Field("event_type", "int32", "event type", EVENT_TYPES),
        Field("ip_address", "int32", "IPv4 address"),
    ),
    row_bytes=128,
    description="Yahoo Streaming Benchmark ad events",
)

AD_CAMPAIGN = Schema(
    "ysb_ad_campaign",
    (
        Field("ad_id", "uuid", "ad"),
        Field("campaign_id", "uuid", "the campaign owning the ad"),
    ),
    stream=False,
    description="YSB's static ad -> campaign relation",
)


def build(ctx: BuildContext) -> dict:
    p, seed = ctx.params, ctx.seed
    campaigns = p.option("campaigns")
    n_ads = campaigns * ADS_PER_CAMPAIGN
    users = uuid_table(seed, "ysb.user", USERS)
    pages = uuid_table(seed, "ysb.page", PAGES)
    ads = uuid_table(seed, "ysb.ad", n_ads)
    camps = uuid_table(seed, "ysb.campaign", campaigns)

    i = F.col("id")
    stream = ctx.range(p.rows).select(
        evenly_spaced_ms(i, p.rate).alias("timestamp"),
        pick(users, randint(seed, "ysb.user", USERS, i)).alias("user_id"),
        pick(pages, randint(seed, "ysb.page", PAGES, i)).alias("page_id"),
        pick(ads, randint(seed, "ysb.ad", n_ads, i)).alias("ad_id"),
        randint(seed, "ysb.ad_type", len(AD_TYPES), i).cast("int").alias("ad_type"),
        randint(seed, "ysb.event_type", len(EVENT_TYPES), i).cast("int").alias("event_type"),
        F.lit(IP_ADDRESS).cast("int").alias("ip_address"),
    )
    relation = ctx.spark.createDataFrame(
        [(ads[a], camps[a // ADS_PER_CAMPAIGN]) for a in range(n_ads)],
        T.StructType([
            T.StructField("ad_id", T.BinaryType(), False),
            T.StructField("campaign_id", T.BinaryType(), False),
        ]),
    ).coalesce(1)
    return {"stream": stream, "ad_campaign": relation}


SPEC = WorkloadSpec(
    name="ysb",
    title="Yahoo Streaming Benchmark",
    schema=SCHEMA,
    tables={"ad_campaign": AD_CAMPAIGN},
    default_rate=10_000,
    durations={"tiny": 30, "small": 100, "full": 3200},
    rates={"tiny": 1000},
    options=(Option("campaigns", int, 100, "number of campaigns (10 ads each)", minimum=1),),
    build=build,
)


# -- the paper's query (Table 3) ---------------------------------------------------------------
def ysb() -> Query:
    """YSB: views per campaign every 10 seconds.

    SELECT r.campaign_id, COUNT(*) AS views
    FROM ysb [RANGE 10 SECONDS SLIDE 10 SECONDS] e, ad_campaign r
    WHERE e.event_type = 'view' AND e.ad_id = r.ad_id
    GROUP BY r.campaign_id
    """
    return (Query.stream(SCHEMA, "ysb").where(col("event_type") == "view").select("ad_id")
            .join(Relation("ad_campaign", AD_CAMPAIGN), on="ad_id", columns="campaign_id")
            .window(10).group_by("campaign_id").aggregate(count().alias("views"))
            .named("YSB", ysb.__doc__))


QUERIES = {"YSB": ysb}
