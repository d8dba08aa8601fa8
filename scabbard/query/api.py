"""The fluent query API.

    from scabbard.query import Query, col, avg
    from scabbard.workloads import lrb

    LRB1 = (Query.stream(lrb.SCHEMA, "lrb")
            .select("highway", "direction", "speed", segment=col("position") // 5280)
            .window(range=300, slide=1)                       # seconds of event time
            .group_by("highway", "direction", "segment")
            .aggregate(avg("speed").alias("avg_speed"))
            .having(col("avg_speed") < 40)
            .named("LRB1"))
    print(LRB1.explain())

A query that stops before ``window()`` is *stateless* (σ, π and ⋈ with a relation only,
PipeFabric's Table 1): its result is the selected, projected tuples, in input order.

    EVEN = Query.stream(sg.SCHEMA, "sg").where(col("id") % 2 == 0).named("EVEN")

Each step builds a plan node (``scabbard.query.plan``), which validates itself:
a bad query raises :class:`QueryError` at the step that makes it bad.
"""

from __future__ import annotations

import inspect

from scabbard.query.expr import Col, Expr, QueryError, as_expr
from scabbard.query.plan import (
    Agg,
    Filter,
    Having,
    KeepMax,
    Node,
    PerWindowAggregate,
    Project,
    Relation,
    RelationJoin,
    Source,
    Window,
    WindowAggregate,
    WindowJoin,
)
from scabbard.schema import Schema


def _named_exprs(cols, named) -> tuple[tuple[str, Expr], ...]:
    out = []
    for c in cols:
        if isinstance(c, str):
            out.append((c, Col(c)))
        elif isinstance(c, Col):
            out.append((c.name, c))
        else:
            raise QueryError(f"{c!r} needs a name: pass it as name=expression")
    out.extend((n, as_expr(e)) for n, e in named.items())
    return tuple(out)


class Query:
    """A query under construction, or finished: a logical plan plus a name."""

    def __init__(self, node: Node, name: str = "query", description: str = ""):
        self.node = node
        self.name = name
        self.description = description

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def stream(cls, schema: Schema, name: str | None = None) -> Query:
        """Start from a stream with ``schema`` (field 0 the event timestamp)."""
        return cls(Source(schema, name or schema.name), name or schema.name)

    def _next(self, node: Node) -> Query:
        return Query(node, self.name, self.description)

    @property
    def windowed(self) -> bool:
        return not self.node.schema.stream

    def _before_window(self, what: str) -> None:
        if self.windowed:
            raise QueryError(f"{what} applies to the input stream, before window(); "
                             "after aggregate() use having()")

    def _after_window(self, what: str) -> None:
        if not self.windowed:
            raise QueryError(f"{what} applies to a windowed result: call window(...).aggregate(...) first")

    def where(self, predicate: Expr) -> Query:
        """σ on the input stream."""
        self._before_window("where()")
        return self._next(Filter(self.node, predicate))

    def select(self, *cols, **named) -> Query:
        """π: keep these columns (names or ``name=expression``); the timestamp always stays."""
        self._before_window("select()")
        return self._next(Project(self.node, _named_exprs(cols, named)))

    def join(self, relation: Relation, on: str | tuple[str, str], columns) -> Query:
        """⋈ with a static relation: ``on`` is a column name, or (stream column, relation column)."""
        self._before_window("join()")
        left, right = (on, on) if isinstance(on, str) else on
        cols = (columns,) if isinstance(columns, str) else tuple(columns)
        return self._next(RelationJoin(self.node, relation, left, right, cols))

    def window(self, range: float, slide: float | None = None) -> WindowedQuery:
        """ω(range, slide) in seconds of event time; tumbling when ``slide`` is omitted."""
        self._before_window("window()")
        return WindowedQuery(self, Window.seconds(range, range if slide is None else slide))

    def window_rows(self, rows: int, slide: int | None = None) -> WindowedQuery:
        """A count-based window (ROWS): ``rows`` tuples, sliding by ``slide`` tuples (tumbling
        when omitted).  Tuples are numbered by their offset in the input stream, so a window
        is the same on every replay and after a recovery; ``window_start`` / ``window_end``
        of a result are offsets (see :class:`~scabbard.query.plan.Window`)."""
        self._before_window("window_rows()")
        return WindowedQuery(self, Window.count(rows, rows if slide is None else slide))

    # -- on windowed results ----------------------------------------------------------------
    def having(self, predicate: Expr) -> Query:
        """σ over the aggregates of each result row."""
        self._after_window("having()")
        return self._next(Having(self.node, predicate))

    def keep_max(self, column: str) -> Query:
        """Per window, only the rows whose ``column`` equals the window's maximum."""
        self._after_window("keep_max()")
        return self._next(KeepMax(self.node, column))

    def per_window(self) -> PerWindowBuilder:
        """Aggregate each window's result rows again (a tumbling window over the results)."""
        self._after_window("per_window()")
        return PerWindowBuilder(self)

    def join_windows(self, other: Query, on=(), where: Expr | None = None) -> Query:
        """⋈ with another windowed result of the same stream, window by window."""
        self._after_window("join_windows()")
        other._after_window("join_windows()")
        keys = (on,) if isinstance(on, str) else tuple(on)
        return self._next(WindowJoin(self.node, other.node, keys, where))

    # -- naming and inspection ---------------------------------------------------------------
    def named(self, name: str, description: str = "") -> Query:
        return Query(self.node, name, description or self.description)

    @property
    def schema(self) -> Schema:
        return self.node.schema

    @property
    def source(self) -> Source:
        return self.node.source()

    def explain(self) -> str:
        """The plan as an indented tree, under the query's name and description."""
        desc = inspect.cleandoc(self.description) if self.description else ""
        head = desc if desc.startswith(self.name) else f"{self.name}: {desc}" if desc else self.name
        return head + "\n" + self.node.explain(1)

    def __repr__(self) -> str:
        return f"<Query {self.name}>"


class WindowedQuery:
    """After ``window()``: choose the group-by keys, then the aggregates."""

    def __init__(self, query: Query, window: Window, keys: tuple = ()):
        self._query, self._window, self._keys = query, window, keys

    def group_by(self, *keys, **named) -> WindowedQuery:
        """γ: group keys - names or ``name=expression`` (integers or uuids)."""
        return WindowedQuery(self._query, self._window, _named_exprs(keys, named))

    def aggregate(self, *aggs: Agg) -> Query:
        """α: one or more of count(), sum(x), avg(x), min(x), max(x)."""
        for a in aggs:
            if not isinstance(a, Agg):
                raise QueryError(f"aggregate() takes count()/sum()/avg()/min()/max(), got {a!r}")
        q = self._query
        return q._next(WindowAggregate(q.node, self._window, self._keys, tuple(aggs)))


class PerWindowBuilder:
    def __init__(self, query: Query, keys: tuple = ()):
        self._query, self._keys = query, keys

    def group_by(self, *keys, **named) -> PerWindowBuilder:
        return PerWindowBuilder(self._query, _named_exprs(keys, named))

    def aggregate(self, *aggs: Agg) -> Query:
        q = self._query
        return q._next(PerWindowAggregate(q.node, self._keys, tuple(aggs)))
