"""Aggregate constructors: ``count()``, ``sum(x)``, ``avg(x)``, ``min(x)``, ``max(x)``.

``x`` is a column name or an expression; ``.alias(name)`` names the result column
(default ``<fn>_<column>``, or ``count``).
"""

from __future__ import annotations

from scabbard.query.expr import Expr, as_expr
from scabbard.query.plan import Agg


def _agg(fn: str, x: str | Expr | None) -> Agg:
    return Agg(fn, None if x is None else as_expr(x))


def count() -> Agg:
    """count(*): tuples per window and group."""
    return Agg("count")


def sum(x: str | Expr) -> Agg:  # noqa: A001 - the aggregate's name in every query language
    return _agg("sum", x)


def avg(x: str | Expr) -> Agg:
    return _agg("avg", x)


def min(x: str | Expr) -> Agg:  # noqa: A001
    return _agg("min", x)


def max(x: str | Expr) -> Agg:  # noqa: A001
    return _agg("max", x)
