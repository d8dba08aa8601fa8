"""The logical plan: immutable operator nodes, each knowing and validating its output schema.

Nodes (paper notation): Source, Filter (σ), Project (π), RelationJoin (⋈ with a
static relation), WindowAggregate (ω + γ + α), and the per-window operators that
run on a windowed result stream: Having (σ over aggregates), KeepMax (⋈ with the
window's α max, NEXMark Q5), PerWindowAggregate (γ α over each window's results,
LRB3's count of count) and WindowJoin (⋈ of two windowed results, SG3).

A plan without a window aggregation is *stateless* (:func:`stateless`): σ, π and ⋈ with
a relation over the source, its result the surviving tuples in input order.

Every node computes its schema in ``__post_init__`` - so constructing a bad plan
raises :class:`QueryError` at once, naming the problem.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from scabbard.query.expr import NUMERIC, Col, Expr, QueryError, resolve
from scabbard.schema import Field, Schema, SchemaError

AGG_FUNCTIONS = ("count", "sum", "avg", "min", "max")
WINDOW_FIELDS = (Field("window_start", "int64", "window start (ms, inclusive)"),
                 Field("window_end", "int64", "window end (ms, exclusive)"))


@dataclass(frozen=True)
class Window:
    """A window ω(range, slide); tumbling when range == slide.

    An event-time window counts milliseconds of event time.  A count-based window (``rows``,
    ROWS semantics) counts tuples: its axis is each tuple's offset in the input stream (its
    global position, the same on every replay), so ``range_ms`` / ``slide_ms`` are then
    numbers of tuples and a window's ``window_start`` / ``window_end`` are offsets.  Tuples
    a selection below the window drops keep their numbers (a window holds at most ``range``
    of the tuples it aggregates)."""

    range_ms: int
    slide_ms: int
    rows: bool = False

    def __post_init__(self) -> None:
        unit = "tuples" if self.rows else "ms"
        if self.range_ms <= 0 or self.slide_ms <= 0:
            raise QueryError(f"window sizes must be positive, got range {self.range_ms} {unit}, "
                             f"slide {self.slide_ms} {unit}")
        if self.slide_ms > self.range_ms:
            raise QueryError(f"window slide ({self.slide_ms} {unit}) is larger than its range "
                             f"({self.range_ms} {unit}): tuples would fall between windows")
        if self.range_ms % self.slide_ms:
            raise QueryError(f"window range ({self.range_ms} {unit}) must be a multiple of its "
                             f"slide ({self.slide_ms} {unit}): windows are assembled from "
                             f"slide-sized panes")

    @classmethod
    def seconds(cls, range_s: float, slide_s: float) -> Window:
        r, s = range_s * 1000, slide_s * 1000
        if r != int(r) or s != int(s):
            raise QueryError(f"window sizes must be whole milliseconds, got {range_s} s / {slide_s} s")
        return cls(int(r), int(s))

    @classmethod
    def count(cls, rows: int, slide: int) -> Window:
        """A count-based window of ``rows`` tuples sliding by ``slide`` tuples."""
        for name, v in (("rows", rows), ("slide", slide)):
            if isinstance(v, bool) or not isinstance(v, int | np.integer):
                raise QueryError(f"a count-based window's {name} is a whole number of tuples, "
                                 f"got {v!r}")
        return cls(int(rows), int(slide), rows=True)

    @property
    def panes(self) -> int:
        """Panes per window (range / slide)."""
        return self.range_ms // self.slide_ms

    @property
    def tumbling(self) -> bool:
        return self.range_ms == self.slide_ms

    def __str__(self) -> str:
        if self.rows:
            return f"ω_rows({self.range_ms:,} tuples, {self.slide_ms:,} tuples)"
        return f"ω({self.range_ms / 1000:g} s, {self.slide_ms / 1000:g} s)"


@dataclass(frozen=True)
class Relation:
    """A static relation (side table) the query joins with, bound to data at run time by name."""

    name: str
    schema: Schema


@dataclass(frozen=True, eq=False)
class Agg:
    """An aggregate function α over an expression (``count`` takes none)."""

    fn: str
    expr: Expr | None = None
    as_name: str | None = None

    def __post_init__(self) -> None:
        if self.fn not in AGG_FUNCTIONS:
            raise QueryError(f"unknown aggregate {self.fn!r} (known: {', '.join(AGG_FUNCTIONS)})")
        if self.fn != "count" and self.expr is None:
            raise QueryError(f"{self.fn} needs an input expression")

    def alias(self, name: str) -> Agg:
        """This aggregate with its result column called ``name``."""
        return Agg(self.fn, self.expr, name)

    @property
    def name(self) -> str:
        if self.as_name:
            return self.as_name
        if self.expr is None:
            return "count"
        inner = self.expr.name if isinstance(self.expr, Col) else "expr"
        return f"{self.fn}_{inner}"

    def input_dtype(self, schema: Schema) -> str | None:
        if self.expr is None:
            return None
        t = self.expr.dtype(schema)
        if t not in NUMERIC:
            raise QueryError(f"{self.fn}({self.expr!r}): cannot aggregate a {t} column; "
                             "aggregates need a number")
        return t

    def output_dtype(self, schema: Schema) -> str:
        t = self.input_dtype(schema)
        if self.fn == "count":
            return "int64"
        if self.fn == "avg":
            return "float64"
        if self.fn == "sum":
            return "float64" if t in ("float32", "float64") else "int64"
        return t  # min / max keep the input type

    def __repr__(self) -> str:
        inner = "*" if self.expr is None else repr(self.expr)
        return f"{self.fn}({inner}) AS {self.name}"


class Node:
    """Base of plan nodes."""

    schema: Schema

    @property
    def children(self) -> tuple[Node, ...]:
        return ()

    def label(self) -> str:
        raise NotImplementedError

    def explain(self, indent: int = 0) -> str:
        lines = ["  " * indent + self.label()]
        for c in self.children:
            lines.append(c.explain(indent + 1))
        return "\n".join(lines)

    def source(self) -> Source:
        """The stream this plan reads (every plan here has exactly one)."""
        sources = {id(s): s for s in _sources(self)}
        if len(sources) != 1:
            raise QueryError("a query reads exactly one source stream")
        return next(iter(sources.values()))


def _sources(node: Node):
    if isinstance(node, Source):
        yield node
    for c in node.children:
        yield from _sources(c)


def _check_names(where: str, names: list[str]) -> None:
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise QueryError(f"{where}: duplicate output column names {dupes}; use .alias()")


def _typed_fields(pairs, schema: Schema) -> tuple[Field, ...]:
    fields = []
    for name, e in pairs:
        t = e.dtype(schema)
        if t in ("bool", "str"):
            raise QueryError(f"column {name!r} = {e!r} is a {t}; only numbers and uuids are columns")
        fields.append(Field(name, t))
    return tuple(fields)


def _window_result_schema(keys, aggs, src: Schema) -> Schema:
    """``window_start, window_end, keys..., aggregates...`` of a grouped window aggregate."""
    if not aggs:
        raise QueryError("aggregate: name at least one aggregate (count, sum, avg, min, max)")
    key_fields = _typed_fields(keys, src)
    for f in key_fields:
        if f.dtype in ("float32", "float64"):
            raise QueryError(f"group_by: {f.name!r} is a {f.dtype}; group keys must be "
                             "integers or uuids")
    agg_fields = tuple(Field(a.name, a.output_dtype(src)) for a in aggs)
    _check_names("aggregate", ["window_start", "window_end", *(f.name for f in key_fields),
                               *(f.name for f in agg_fields)])
    return Schema("window_result", (*WINDOW_FIELDS, *key_fields, *agg_fields), stream=False)


@dataclass(frozen=True)
class Source(Node):
    schema: Schema
    name: str

    def __post_init__(self) -> None:
        if not self.schema.stream:
            raise QueryError(f"{self.schema.name!r} is not a stream schema")

    def label(self) -> str:
        return f"Source[{self.name}: {len(self.schema)} attributes, {self.schema.size_label}]"


@dataclass(frozen=True, eq=False)
class Filter(Node):
    input: Node
    predicate: Expr
    schema: Schema = field(init=False)

    def __post_init__(self) -> None:
        t = self.predicate.dtype(self.input.schema)
        if t != "bool":
            raise QueryError(f"where({self.predicate!r}): a filter needs a condition, got a {t}")
        object.__setattr__(self, "schema", self.input.schema)

    @property
    def children(self):
        return (self.input,)

    def resolved_predicate(self) -> Expr:
        return resolve(self.predicate, self.input.schema)

    def label(self) -> str:
        return f"σ[{self.predicate!r}]"


@dataclass(frozen=True, eq=False)
class Project(Node):
    """π: keeps the timestamp and the named columns (plain or computed)."""

    input: Node
    columns: tuple[tuple[str, Expr], ...]
    schema: Schema = field(init=False)

    def __post_init__(self) -> None:
        src = self.input.schema
        names = [n for n, _ in self.columns]
        if "timestamp" in names:
            raise QueryError("project: 'timestamp' is always kept; do not list it")
        _check_names("project", ["timestamp", *names])
        fields = (src.field("timestamp"), *_typed_fields(self.columns, src))
        try:
            schema = Schema(f"{src.name}_projected", fields)
        except SchemaError as e:
            raise QueryError(f"project: {e}") from None
        object.__setattr__(self, "schema", schema)

    @property
    def children(self):
        return (self.input,)

    def label(self) -> str:
        cols = ", ".join(n if isinstance(e, Col) and e.name == n else f"{e!r} AS {n}"
                         for n, e in self.columns)
        return f"π[{cols}]"


@dataclass(frozen=True, eq=False)
class RelationJoin(Node):
    """⋈ with a static relation on ``left`` = ``right``; adds the relation's ``columns``."""

    input: Node
    relation: Relation
    left: str
    right: str
    columns: tuple[str, ...]
    schema: Schema = field(init=False)

    def __post_init__(self) -> None:
        src, rel = self.input.schema, self.relation.schema
        lt = Col(self.left).dtype(src)
        if self.right not in rel:
            raise QueryError(f"join: relation {self.relation.name!r} has no column {self.right!r} "
                             f"(columns: {', '.join(rel.names)})")
        rt = rel.field(self.right).dtype
        if lt != rt and not (lt in NUMERIC and rt in NUMERIC and "float" not in lt + rt):
            raise QueryError(f"join: {self.left!r} ({lt}) and {self.relation.name}.{self.right} "
                             f"({rt}) have different types")
        extra = []
        for c in self.columns:
            if c not in rel:
                raise QueryError(f"join: relation {self.relation.name!r} has no column {c!r}")
            if c in src:
                raise QueryError(f"join: column {c!r} is in both the stream and the relation")
            extra.append(rel.field(c))
        object.__setattr__(self, "schema", Schema(f"{src.name}_joined", (*src.fields, *extra)))

    @property
    def children(self):
        return (self.input,)

    def label(self) -> str:
        return (f"⋈[{self.left} = {self.relation.name}.{self.right}; "
                f"adds {', '.join(self.columns)}]")


@dataclass(frozen=True, eq=False)
class WindowAggregate(Node):
    """ω + γ + α: per window and group, the aggregates; one result row per (window, group)."""

    input: Node
    window: Window
    keys: tuple[tuple[str, Expr], ...]
    aggs: tuple[Agg, ...]
    schema: Schema = field(init=False)

    def __post_init__(self) -> None:
        src = self.input.schema
        object.__setattr__(self, "schema", _window_result_schema(self.keys, self.aggs, src))

    @property
    def children(self):
        return (self.input,)

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.keys)

    def label(self) -> str:
        keys = ", ".join(n if isinstance(e, Col) and e.name == n else f"{e!r} AS {n}"
                         for n, e in self.keys)
        aggs = ", ".join(repr(a) for a in self.aggs)
        return f"{self.window} γ[{keys or '-'}] α[{aggs}]"


def stateless(node: Node) -> bool:
    """The plan is σ, π and ⋈ with relations over its source, nothing else (no window)."""
    while isinstance(node, Filter | Project | RelationJoin):
        node = node.input
    return isinstance(node, Source)


def windowed_root(node: Node) -> WindowAggregate:
    """The window aggregation a per-window operator works on."""
    while not isinstance(node, WindowAggregate):
        if isinstance(node, WindowJoin):
            return windowed_root(node.left)
        kids = node.children
        if not kids:
            raise QueryError("this operator needs a windowed result: aggregate first")
        node = kids[0]
    return node


@dataclass(frozen=True, eq=False)
class Having(Node):
    """σ over a windowed result (e.g. LRB1's ``HAVING avg(speed) < 40``)."""

    input: Node
    predicate: Expr
    schema: Schema = field(init=False)

    def __post_init__(self) -> None:
        windowed_root(self.input)
        t = self.predicate.dtype(self.input.schema)
        if t != "bool":
            raise QueryError(f"having({self.predicate!r}) needs a condition, got a {t}")
        object.__setattr__(self, "schema", self.input.schema)

    @property
    def children(self):
        return (self.input,)

    def label(self) -> str:
        return f"σ_having[{self.predicate!r}]"


@dataclass(frozen=True, eq=False)
class KeepMax(Node):
    """Per window, the rows whose ``column`` equals the window's maximum.

    CQL: ``... WHERE num >= ALL (SELECT num ...)`` - the ⋈ of a window's results with
    their α max (NEXMark Q5, hot items).
    """

    input: Node
    column: str
    schema: Schema = field(init=False)

    def __post_init__(self) -> None:
        windowed_root(self.input)
        t = Col(self.column).dtype(self.input.schema)
        if t not in NUMERIC:
            raise QueryError(f"keep_max({self.column!r}): a {t} column has no maximum")
        object.__setattr__(self, "schema", self.input.schema)

    @property
    def children(self):
        return (self.input,)

    def label(self) -> str:
        return f"⋈ α max[{self.column} = max({self.column}) per window]"


@dataclass(frozen=True, eq=False)
class PerWindowAggregate(Node):
    """γ α over each window's result rows (a tumbling window on the result stream, LRB3)."""

    input: Node
    keys: tuple[tuple[str, Expr], ...]
    aggs: tuple[Agg, ...]
    schema: Schema = field(init=False)

    def __post_init__(self) -> None:
        windowed_root(self.input)
        src = self.input.schema
        for n, _ in self.keys:
            if n in ("window_start", "window_end"):
                raise QueryError(f"group_by: {n!r} is implicit in a per-window aggregate")
        object.__setattr__(self, "schema", _window_result_schema(self.keys, self.aggs, src))

    @property
    def children(self):
        return (self.input,)

    def label(self) -> str:
        keys = ", ".join(n for n, _ in self.keys)
        return f"ω(1 result window) γ[{keys or '-'}] α[{', '.join(map(repr, self.aggs))}]"


@dataclass(frozen=True, eq=False)
class WindowJoin(Node):
    """⋈ of two windowed result streams, window by window: a result row of one side meets the
    rows of the other side that end at the same time (``[RANGE 1 SLIDE 1]`` on the result
    streams), on equal ``on`` keys and ``predicate``.  The two sides may have different
    ranges (SG3 joins a 3600 s and a 128 s window) but slide alike; the left side's window
    bounds are kept."""

    left: Node
    right: Node
    on: tuple[str, ...]
    predicate: Expr | None
    schema: Schema = field(init=False)

    def __post_init__(self) -> None:
        lw, rw = windowed_root(self.left), windowed_root(self.right)
        if lw.window.rows != rw.window.rows:
            raise QueryError("join_windows: one side counts tuples, the other event time; "
                             "join windows of one kind")
        if lw.window.slide_ms != rw.window.slide_ms:
            raise QueryError(f"join_windows: the slides differ ({lw.window} vs {rw.window}): "
                             f"the two result streams must end windows at the same times")
        if self.left.source() != self.right.source():
            raise QueryError("join_windows: both sides must read the same source stream")
        ls, rs = self.left.schema, self.right.schema
        for k in self.on:
            for side, s in (("left", ls), ("right", rs)):
                if k not in s:
                    raise QueryError(f"join_windows: {side} side has no column {k!r}")
            if ls.field(k).dtype != rs.field(k).dtype:
                raise QueryError(f"join_windows: {k!r} has different types on the two sides")
        right_fields = [f for f in rs.fields[2:] if f.name not in self.on]
        clash = sorted({f.name for f in right_fields} & set(ls.names))
        if clash:
            raise QueryError(f"join_windows: columns {clash} are on both sides; alias one side")
        schema = Schema("window_result", (*ls.fields, *right_fields), stream=False)
        if self.predicate is not None and self.predicate.dtype(schema) != "bool":
            raise QueryError(f"join_windows: {self.predicate!r} is not a condition")
        object.__setattr__(self, "schema", schema)

    @property
    def children(self):
        return (self.left, self.right)

    def label(self) -> str:
        on = " and ".join(["l.window_end = r.window_end"] + [f"l.{k} = r.{k}" for k in self.on])
        pred = repr(self.predicate) if self.predicate is not None else ""
        cond = " and ".join(x for x in (on, pred) if x)
        return f"⋈ per window[{cond}]"
