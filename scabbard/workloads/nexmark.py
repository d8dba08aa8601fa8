"""NEXMark (NQ): an online auction's bids, 9 attributes in a 128-byte row, with auctions and persons.

Specification followed (the Apache Beam NEXMark generator, which nexmark-flink
ports; WORKLOADS §3):

* One event sequence with persons : auctions : bids = 1 : 3 : 46 in every 50
  events (event number ``e``: ``e mod 50`` = 0 person, 1-3 auction, else bid).
  Person and auction ids are dense and increase with time (``FIRST_PERSON_ID`` =
  ``FIRST_AUCTION_ID`` = 1000); events are evenly spaced in event time.
* Hot-item skew, Beam's defaults: a bid goes to the *hot* auction (the newest
  multiple of 100 among auction ids) with probability 1/2, else to one of the
  last 100 in-flight auctions (plus a lead of 10; ``--auctions N`` sets how many are in
  flight, the key space of NQ: Darwin's larger-than-memory state); the bidder is the hot bidder
  with probability 3/4, else one of the last 1,000 active people (lead 10).
  Auction sellers are hot with probability 3/4.  Prices are log-uniform
  ``round(10^(6u) * 100)`` cents; categories 10..14; an auction expires within
  twice the time in which 100 more auctions are created.
* Bids have nexmark-flink's fields: auction, bidder, price, channel (Google,
  Facebook, Baidu, Apple with probability 1/2, else one of 10,000 "channel-N"),
  url, date_time and the ``extra`` padding string (of 54..81 bytes for bids).
* The stream is the bids (what Query 5, "hot items", reads).  Auctions and
  persons are side tables ``auctions`` and ``persons``, covering every id a bid
  can reference.

``--rate`` is bids per second; all events together arrive at ``rate * 50/46``.

Departures: random draws are counter-based hashes of (seed, event number), not
``java.util.Random(eventId)``, so values differ from Beam's event by event but
follow the same distributions; strings are not materialised - ``url`` is the id
of the channel's URL (one per channel, as nexmark-flink's cache), ``extra`` is
the length of the padding string, names/cities/states are coded; the event-rate
shape is constant (Beam's default is a sine wave); no out-of-order events.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from scabbard.query import Query, count
from scabbard.schema import Field, Schema
from scabbard.workloads._expr import F, randint, round_half_up, uniform
from scabbard.workloads.generator import BuildContext, Option, WorkloadSpec

if TYPE_CHECKING:
    from pyspark.sql import Column

TOTAL_PROPORTION = 50
PERSON_PROPORTION = 1
AUCTION_PROPORTION = 3
BID_PROPORTION = 46
FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
HOT_AUCTION_RATIO = 100
HOT_BIDDER_RATIO = 100
HOT_SELLER_RATIO = 100
HOT_AUCTION_ODDS = 2  # P(hot auction) = 1 - 1/2
HOT_BIDDER_ODDS = 4  # P(hot bidder) = 1 - 1/4
HOT_SELLER_ODDS = 4
IN_FLIGHT_AUCTIONS = 100
ACTIVE_PEOPLE = 1000
AUCTION_ID_LEAD = 10
PERSON_ID_LEAD = 10
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
COLD_CHANNELS = 10_000
AVG_BID_BYTES = 100
BASE_TIME_MS = 1_436_918_400_000  # 2015-07-15T00:00:00Z: date_time = BASE_TIME_MS + timestamp
FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah",
               "Deiter", "Walter")
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris")
CITIES = ("Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond",
          "Seattle", "Kent", "Cheyenne")
STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")

SCHEMA = Schema(
    "nexmark_bid",
    (
        Field("timestamp", "int64", "event time (ms since the stream started)"),
        Field("auction", "int64", "auction id"),
        Field("bidder", "int64", "person id of the bidder"),
        Field("price", "int64", "price (cents)"),
        Field("channel", "int32", "0-3: Google, Facebook, Baidu, Apple; 4+n: channel-n"),
        Field("url", "int32", "id of the channel's URL"),
        Field("date_time", "int64", "NEXMark dateTime (ms since the Unix epoch)"),
        Field("event_id", "int64", "NEXMark event number"),
        Field("extra", "int32", "bytes of the extra padding string"),
    ),
    row_bytes=128,
    description="NEXMark bids",
)

AUCTIONS = Schema(
    "nexmark_auction",
    (
        Field("timestamp", "int64", "event time the auction opened (ms)"),
        Field("id", "int64", "auction id"),
        Field("seller", "int64", "person id of the seller"),
        Field("category", "int64", "category 10..14"),
        Field("initial_bid", "int64", "cents"),
        Field("reserve", "int64", "cents"),
        Field("expires", "int64", "event time the auction closes (ms)"),
        Field("event_id", "int64", "NEXMark event number"),
    ),
    description="NEXMark auctions",
)

PERSONS = Schema(
    "nexmark_person",
    (
        Field("timestamp", "int64", "event time the person joined (ms)"),
        Field("id", "int64", "person id"),
        Field("name", "int32", "first x last name",
              tuple(f"{a} {b}" for a in FIRST_NAMES for b in LAST_NAMES)),
        Field("city", "int32", "city", CITIES),
        Field("state", "int32", "state", STATES),
        Field("event_id", "int64", "NEXMark event number"),
    ),
    description="NEXMark persons",
)


FIRST_BID_EVENT = PERSON_PROPORTION + AUCTION_PROPORTION


def _event_time(e: Column, event_rate: float) -> Column:
    """ms of event time of event number ``e``; time 0 is the first bid (event 4)."""
    shifted = F.greatest(e - FIRST_BID_EVENT, F.lit(0)).cast("double")
    return F.floor(shifted * F.lit(1000.0 / event_rate)).cast("long")


def _last_base0_person(e: Column) -> Column:
    return F.floor(e / TOTAL_PROPORTION).cast("long")


def _last_base0_auction(e: Column) -> Column:
    epoch = F.floor(e / TOTAL_PROPORTION).cast("long")
    off = e % TOTAL_PROPORTION
    return (
        F.when(off < PERSON_PROPORTION, (epoch - 1) * AUCTION_PROPORTION + AUCTION_PROPORTION - 1)
        .when(off >= PERSON_PROPORTION + AUCTION_PROPORTION, epoch * AUCTION_PROPORTION + AUCTION_PROPORTION - 1)
        .otherwise(epoch * AUCTION_PROPORTION + off - PERSON_PROPORTION)
    )


def _next_base0_person(seed: int, tag: str, e: Column) -> Column:
    people = _last_base0_person(e) + 1
    active = F.least(people, F.lit(ACTIVE_PEOPLE))
    return people - active + randint(seed, tag, active + PERSON_ID_LEAD, e)


def _next_base0_auction(seed: int, tag: str, e: Column, in_flight: int) -> Column:
    newest = _last_base0_auction(e)
    oldest = F.greatest(newest - in_flight, F.lit(0))
    return oldest + randint(seed, tag, newest - oldest + 1 + AUCTION_ID_LEAD, e)


def _price(seed: int, tag: str, e: Column) -> Column:
    return round_half_up(F.pow(F.lit(10.0), uniform(seed, tag, e) * 6.0) * 100.0)


def build(ctx: BuildContext) -> dict:
    p, seed = ctx.params, ctx.seed
    event_rate = p.rate * TOTAL_PROPORTION / BID_PROPORTION
    k = F.col("id")
    first_bid = FIRST_BID_EVENT
    e = F.floor(k / BID_PROPORTION).cast("long") * TOTAL_PROPORTION + first_bid + k % BID_PROPORTION
    bids = ctx.range(p.rows).select(e.alias("e"))
    e = F.col("e")
    hot_auction = (F.floor(_last_base0_auction(e) / HOT_AUCTION_RATIO) * HOT_AUCTION_RATIO).cast("long")
    auction = F.when(
        randint(seed, "nq.hot_auction", HOT_AUCTION_ODDS, e) > 0, hot_auction
    ).otherwise(_next_base0_auction(seed, "nq.auction", e, p.option("auctions")))
    hot_bidder = (F.floor(_last_base0_person(e) / HOT_BIDDER_RATIO) * HOT_BIDDER_RATIO + 1).cast("long")
    bidder = F.when(
        randint(seed, "nq.hot_bidder", HOT_BIDDER_ODDS, e) > 0, hot_bidder
    ).otherwise(_next_base0_person(seed, "nq.bidder", e))
    channel = F.when(
        uniform(seed, "nq.hot_channel", e) < 0.5, randint(seed, "nq.channel", len(HOT_CHANNELS), e)
    ).otherwise(len(HOT_CHANNELS) + randint(seed, "nq.cold_channel", COLD_CHANNELS, e))
    extra_avg = AVG_BID_BYTES - 4 * 8
    extra = F.floor((F.lit(0.8) + 0.4 * uniform(seed, "nq.extra", e)) * extra_avg)
    ts = _event_time(e, event_rate)
    stream = bids.select(
        ts.alias("timestamp"),
        (auction + FIRST_AUCTION_ID).alias("auction"),
        (bidder + FIRST_PERSON_ID).alias("bidder"),
        _price(seed, "nq.price", e).alias("price"),
        channel.cast("int").alias("channel"),
        channel.cast("int").alias("url"),
        (ts + BASE_TIME_MS).alias("date_time"),
        e.alias("event_id"),
        extra.cast("int").alias("extra"),
    )

    # Side tables: every auction and person a bid can reference (ids up to the newest + lead).
    last_event = (p.rows - 1) // BID_PROPORTION * TOTAL_PROPORTION + first_bid + (p.rows - 1) % BID_PROPORTION
    epochs = last_event // TOTAL_PROPORTION + 1
    n_auctions = epochs * AUCTION_PROPORTION + AUCTION_ID_LEAD
    n_persons = epochs * PERSON_PROPORTION + PERSON_ID_LEAD

    a = F.col("id")
    ae = F.floor(a / AUCTION_PROPORTION).cast("long") * TOTAL_PROPORTION + PERSON_PROPORTION + a % AUCTION_PROPORTION
    auctions = ctx.range(n_auctions).select(a, ae.alias("e"))
    e = F.col("e")
    hot_seller = (F.floor(_last_base0_person(e) / HOT_SELLER_RATIO) * HOT_SELLER_RATIO).cast("long")
    seller = F.when(
        randint(seed, "nq.hot_seller", HOT_SELLER_ODDS, e) > 0, hot_seller
    ).otherwise(_next_base0_person(seed, "nq.seller", e))
    horizon_ms = p.option("auctions") * TOTAL_PROPORTION / AUCTION_PROPORTION * 1000.0 / event_rate
    ats = _event_time(e, event_rate)
    initial = _price(seed, "nq.initial_bid", e)
    auctions = auctions.select(
        ats.alias("timestamp"),
        (F.col("id") + FIRST_AUCTION_ID).alias("id"),
        (seller + FIRST_PERSON_ID).alias("seller"),
        (FIRST_CATEGORY_ID + randint(seed, "nq.category", NUM_CATEGORIES, e)).alias("category"),
        initial.alias("initial_bid"),
        (initial + _price(seed, "nq.reserve", e)).alias("reserve"),
        (ats + 1 + randint(seed, "nq.expires", max(1, math.floor(2 * horizon_ms)), e)).alias("expires"),
        e.alias("event_id"),
    )

    pe = F.col("id") * TOTAL_PROPORTION
    persons = ctx.range(n_persons).select(
        _event_time(pe, event_rate).alias("timestamp"),
        (F.col("id") + FIRST_PERSON_ID).alias("id"),
        randint(seed, "nq.name", len(FIRST_NAMES) * len(LAST_NAMES), pe).cast("int").alias("name"),
        randint(seed, "nq.city", len(CITIES), pe).cast("int").alias("city"),
        randint(seed, "nq.state", len(STATES), pe).cast("int").alias("state"),
        pe.alias("event_id"),
    )
    return {"stream": stream, "auctions": auctions, "persons": persons}


SPEC = WorkloadSpec(
    name="nexmark",
    title="NEXMark",
    schema=SCHEMA,
    tables={"auctions": AUCTIONS, "persons": PERSONS},
    default_rate=10_000,
    durations={"tiny": 30, "small": 100, "full": 3200},
    rates={"tiny": 1000},
    options=(Option("auctions", int, IN_FLIGHT_AUCTIONS,
                    "auctions in flight that the bids not for the hot auction go to (Beam's "
                    "numInFlightAuctions): NQ's key space, up to the auctions created so far",
                    minimum=1),),
    build=build,
)


# -- the paper's query (Table 3) ---------------------------------------------------------------
def nq() -> Query:
    """NQ: NEXMark query 5, hot items - the auctions with the most bids.

    SELECT auction, COUNT(*) AS bids
    FROM bid [RANGE 60 SECONDS SLIDE 1 SECOND]
    GROUP BY auction
    HAVING bids >= ALL (SELECT COUNT(*) FROM bid [RANGE 60 SECONDS SLIDE 1 SECOND] GROUP BY auction)
    """
    return (Query.stream(SCHEMA, "nexmark").select("auction").window(60, 1).group_by("auction")
            .aggregate(count().alias("bids")).keep_max("bids").named("NQ", nq.__doc__))


QUERIES = {"NQ": nq}
