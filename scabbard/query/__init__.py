"""Fluent query API -> logical plan (docs/design.md).

    from scabbard.query import Query, col, count, avg
    q = Query.stream(schema).where(col("x") > 3).window(60, 1).group_by("k").aggregate(count())

See :mod:`scabbard.query.api` for the builder and :mod:`scabbard.query.plan` for the nodes.
"""

from scabbard.query.aggregates import avg, count, max, min, sum  # noqa: A004
from scabbard.query.api import Query
from scabbard.query.expr import Expr, QueryError, col, lit
from scabbard.query.plan import Agg, Relation, Window

sum_, min_, max_ = sum, min, max

__all__ = ["Agg", "Expr", "Query", "QueryError", "Relation", "Window", "avg", "col", "count",
           "lit", "max", "max_", "min", "min_", "sum", "sum_"]
