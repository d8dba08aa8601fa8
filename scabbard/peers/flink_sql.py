"""A logical plan compiled to Flink SQL (the Flink peer's compiler, no PyFlink needed).

The statements read the CSV files :mod:`scabbard.peers.flink` exports and write
the result rows as CSV.  Every plan node becomes a temporary view:

* the source table derives the event-time attribute ``__rt`` from ``timestamp``
  (ms) with a watermark 1 ms behind it: the data arrive in event-time order, and
  the millisecond keeps a later tuple with the *same* timestamp from being late;
* σ and π are ``WHERE`` and ``SELECT``; ⋈ with a static relation is an
  event-time temporal join on the relation's key (a regular join would lose the
  time attribute the window needs; the relation rows are valid from long before
  the stream starts, so every tuple sees all of them);
* ω γ α is a ``HOP`` (``TUMBLE`` when range = slide) window table-valued
  function grouped by ``window_start, window_end, window_time`` and the keys;
* the per-window operators stay window operators, so the whole job is
  append-only: having is ``WHERE``, a per-window aggregate groups the windowed
  result again by its window columns (Flink's cascading window aggregation),
  keep-max and the window join are Flink window joins (keep-max joins the
  result with its per-window maximum; Flink's window Top-N knows only
  ``ROW_NUMBER``, which would drop ties).

A stateless plan (σ, π, ⋈ relation only) is its views and the insert of its rows (in no
particular order: the job runs in parallel).  A count-based window (ROWS) is a window over
each tuple's offset in the stream, exported as the last CSV column and read as event-time
milliseconds: ``HOP(slide M ms, range N ms)`` over it is the window of N tuples sliding by M,
exactly as the engine numbers tuples (Flink SQL has no count-based window of its own).

Types follow the plan's rules, not Flink's: integer arithmetic in ``BIGINT``,
anything with a float in ``DOUBLE``, ``/`` always ``DOUBLE``, ``//`` and ``%``
with floor semantics, sums of integers in ``BIGINT`` and of floats in ``DOUBLE``,
averages in ``DOUBLE`` (Flink's ``AVG`` of an ``INT`` is an ``INT``).  A uuid is
two ``BIGINT`` words, ``<name>__0`` and ``<name>__1`` (its uint64 words, as
int64); grouping, joining and comparing use both.
"""

from __future__ import annotations

from dataclasses import dataclass

from scabbard.query import Query, QueryError
from scabbard.query.expr import FLOAT_TYPES, INT_TYPES, BinOp, BoolOp, Cmp, Col, Expr, Lit, Not
from scabbard.query.plan import (
    Agg,
    Filter,
    Having,
    KeepMax,
    Node,
    PerWindowAggregate,
    Project,
    RelationJoin,
    Source,
    WindowAggregate,
    WindowJoin,
    stateless,
)
from scabbard.schema import Field, Schema

ROWTIME = "__rt"
OFFSET = "__offset"  # a tuple's offset in the stream (count-based windows' event time)
WINDOW_COLUMNS = ("window_start", "window_end", "window_time")
# the relations' rows are valid from this event time on (ms; long before any stream tuple)
RELATION_TIME_MS = -(10**12)
SQL_TYPES = {"int32": "INT", "int64": "BIGINT", "uint32": "BIGINT", "float32": "FLOAT",
             "float64": "DOUBLE", "uuid": "BIGINT"}


def q(name: str) -> str:
    """A quoted identifier (``timestamp`` and friends are reserved words)."""
    return f"`{name}`"


def flat_names(f: Field) -> list[str]:
    """The SQL columns of a field: one, or a uuid's two words."""
    return [f"{f.name}__0", f"{f.name}__1"] if f.dtype == "uuid" else [f.name]


def table_columns(schema: Schema) -> list[tuple[str, str]]:
    """(column, SQL type) of a schema's CSV layout (see :func:`scabbard.peers.flink.export_csv`)."""
    return [(n, SQL_TYPES[f.dtype]) for f in schema.fields for n in flat_names(f)]


def subset(schema: Schema, names) -> Schema:
    """The fields of ``schema`` named in ``names``, in schema order."""
    keep = set(names)
    return Schema(schema.name, tuple(f for f in schema.fields if f.name in keep),
                  stream=schema.stream)


def interval(ms: int) -> str:
    return f"INTERVAL '{ms // 1000}.{ms % 1000:03d}' SECOND(9, 3)"


def epoch_ms(ts_sql: str) -> str:
    """Milliseconds since the epoch of a window's ``TIMESTAMP(3)`` bound (session time zone UTC).

    Flink casts no timestamp to a number; both terms truncate toward zero, so
    their sum is exact for times before 1970 too.
    """
    return (f"(TIMESTAMPDIFF(SECOND, TIMESTAMP '1970-01-01 00:00:00', {ts_sql}) * 1000 "
            f"+ EXTRACT(MILLISECOND FROM {ts_sql}))")


# -- expressions -------------------------------------------------------------------------------
def expr_sql(expr: Expr, schema: Schema, ref=q) -> str:
    """Flink SQL computing ``expr`` over a relation with ``schema`` (categories resolved).

    ``ref(column)`` is the SQL naming a column; a windowed relation's
    ``window_start`` / ``window_end`` are read as epoch milliseconds.
    """
    if isinstance(expr, Col):
        t = expr.dtype(schema)
        if t == "uuid":
            raise QueryError(f"{expr.name!r} is a uuid: the Flink peer compares uuids with == "
                             "and != only")
        if expr.name in ("window_start", "window_end") and not schema.stream:
            return epoch_ms(ref(expr.name))
        return ref(expr.name)
    if isinstance(expr, Lit):
        v = expr.value
        if isinstance(v, bool):
            return "TRUE" if v else "FALSE"
        if isinstance(v, int):
            return f"CAST({v} AS BIGINT)"
        if isinstance(v, float):
            if v != v or v in (float("inf"), float("-inf")):
                raise QueryError(f"the Flink peer cannot write the literal {v!r}")
            return f"CAST({v!r} AS DOUBLE)"
        raise QueryError(f"string literal {v!r} outside a comparison with a coded column")
    if isinstance(expr, BinOp):
        return _arith(expr, schema, ref)
    if isinstance(expr, Cmp):
        r = expr.resolved(schema)
        op = {"==": "=", "!=": "<>"}.get(r.op, r.op)
        if r.left.dtype(schema) == "uuid":
            if not (isinstance(r.left, Col) and isinstance(r.right, Col)):
                raise QueryError(f"{expr!r}: the Flink peer compares uuid columns only")
            words = [f"{ref(a)} {op} {ref(b)}" for a, b in
                     zip(_uuid_words(r.left.name), _uuid_words(r.right.name), strict=True)]
            return "(" + (" AND " if op == "=" else " OR ").join(words) + ")"
        return f"({expr_sql(r.left, schema, ref)} {op} {expr_sql(r.right, schema, ref)})"
    if isinstance(expr, BoolOp):
        joiner = " AND " if expr.op == "and" else " OR "
        return "(" + joiner.join(expr_sql(a, schema, ref) for a in expr.args) + ")"
    if isinstance(expr, Not):
        return f"(NOT {expr_sql(expr.arg, schema, ref)})"
    raise QueryError(f"cannot compile {expr!r} for Flink")


def _uuid_words(name: str) -> tuple[str, str]:
    return f"{name}__0", f"{name}__1"


def _arith(expr: BinOp, schema: Schema, ref) -> str:
    out = expr.dtype(schema)
    a, b = expr_sql(expr.left, schema, ref), expr_sql(expr.right, schema, ref)
    ints = out == "int64"
    if expr.op == "/" or not ints:
        a, b = f"CAST({a} AS DOUBLE)", f"CAST({b} AS DOUBLE)"
    else:
        a, b = f"CAST({a} AS BIGINT)", f"CAST({b} AS BIGINT)"
    if expr.op in ("+", "-", "*", "/"):
        return f"({a} {expr.op} {b})"
    if ints:  # floor semantics, exact: Flink's / and MOD truncate toward zero
        mod = f"MOD(MOD({a}, {b}) + {b}, {b})"
        return mod if expr.op == "%" else f"(({a} - {mod}) / {b})"
    floor = f"FLOOR({a} / {b})"
    return floor if expr.op == "//" else f"({a} - {b} * {floor})"


def _agg_sql(agg: Agg, input_name: str | None, schema: Schema) -> str:
    if agg.fn == "count":
        return "COUNT(*)"
    x = q(input_name)
    t = agg.input_dtype(schema)
    if agg.fn == "avg":
        return f"AVG(CAST({x} AS DOUBLE))"
    if agg.fn == "sum":
        return f"SUM(CAST({x} AS {'DOUBLE' if t in FLOAT_TYPES else 'BIGINT'}))"
    return f"{agg.fn.upper()}({x})"


# -- the plan ---------------------------------------------------------------------------------
def _stream_needs(node: Node, wanted: set[str]) -> set[str]:
    """Source columns a stream prefix needs to produce the columns ``wanted`` of ``node``."""
    if isinstance(node, Source):
        return wanted | {"timestamp"}
    if isinstance(node, Filter):
        return _stream_needs(node.input, wanted | node.predicate.columns())
    if isinstance(node, Project):  # its view computes every column it lists
        return _stream_needs(node.input, set().union(*(e.columns() for _, e in node.columns)))
    if isinstance(node, RelationJoin):
        added = set(node.columns)
        return _stream_needs(node.input, (wanted - added) | {node.left})
    raise QueryError(f"{node.label()} cannot come before the window aggregation")


def _windowed_needs(node: Node) -> set[str]:
    if isinstance(node, WindowAggregate):
        used = set().union(set(), *(e.columns() for _, e in node.keys),
                           *(a.expr.columns() for a in node.aggs if a.expr is not None))
        return _stream_needs(node.input, used)
    return set().union(*(_windowed_needs(c) for c in node.children))


def read_columns(query: Query) -> tuple[str, ...]:
    """The stream fields the query reads, in schema order: the only ones exported for Flink.

    (The engine touches only these columns too; a columnar format would give Flink
    the same by projection push-down.  CSV decoding is Flink's bottleneck here.)
    """
    root = query.node
    needed = (_stream_needs(root, set(root.schema.names)) if stateless(root)
              else _windowed_needs(root))
    return tuple(n for n in query.source.schema.names if n in needed)


def counts_rows(query: Query) -> bool:
    """The query's windows count tuples: the exported stream then carries each tuple's offset
    as its last column, :data:`OFFSET`."""
    return any(w.window.rows for w in _windows(query.node))


def _windows(node: Node) -> list[WindowAggregate]:
    if isinstance(node, WindowAggregate):
        return [node]
    return [w for c in node.children for w in _windows(c)]


@dataclass(frozen=True)
class FlinkSQL:
    """The statements of one query: tables and views (``ddl``), then one ``insert``."""

    query: str
    ddl: tuple[str, ...]
    insert: str
    sink_columns: tuple[str, ...]  # the CSV columns of the result, in order

    @property
    def statements(self) -> tuple[str, ...]:
        return (*self.ddl, self.insert)


def _csv_table(name: str, columns, path: str, extra: str = "") -> str:
    cols = ",\n  ".join(f"{q(c)} {t}" for c, t in columns)
    return (f"CREATE TEMPORARY TABLE {q(name)} (\n  {cols}{extra}\n) WITH (\n"
            f"  'connector' = 'filesystem', 'path' = '{path}', 'format' = 'csv',\n"
            "  'csv.ignore-parse-errors' = 'false')")


class _Compiler:
    def __init__(self, prefix: str, stream_path: str, relation_paths: dict,
                 columns: tuple[str, ...] | None, rows: bool = False):
        self.prefix, self.rows = prefix, rows
        self.columns = columns
        self.stream_path = stream_path
        self.relation_paths = relation_paths
        self.ddl: list[str] = []
        self.relations: dict[tuple[str, str], str] = {}
        self.views = 0
        self.source: str | None = None

    def view(self, select: str) -> str:
        name = f"{self.prefix}v{self.views}"
        self.views += 1
        self.ddl.append(f"CREATE TEMPORARY VIEW {q(name)} AS\n{select}")
        return name

    # -- tables
    def source_table(self, node: Source) -> str:
        if self.source is None:
            self.source = f"{self.prefix}stream"
            # count-based windows: event time is the tuple's offset (1 ms per tuple)
            axis = OFFSET if self.rows else "timestamp"
            extra = (f",\n  {q(ROWTIME)} AS TO_TIMESTAMP_LTZ({q(axis)}, 3),\n"
                     f"  WATERMARK FOR {q(ROWTIME)} AS {q(ROWTIME)} - INTERVAL '0.001' SECOND")
            schema = subset(node.schema, self.columns) if self.columns else node.schema
            columns = table_columns(schema) + ([(OFFSET, "BIGINT")] if self.rows else [])
            self.ddl.append(_csv_table(self.source, columns, self.stream_path, extra))
        return self.source

    def relation_table(self, node: RelationJoin) -> str:
        key = (node.relation.name, node.right)
        if key not in self.relations:
            if node.relation.name not in self.relation_paths:
                raise QueryError(f"{node.label()}: no data for relation {node.relation.name!r}")
            name = f"{self.prefix}rel_{node.relation.name}_{node.right}"
            rel = node.relation.schema
            pk = ", ".join(q(c) for c in flat_names(rel.field(node.right)))
            extra = (f",\n  {q(ROWTIME)} AS TO_TIMESTAMP_LTZ({RELATION_TIME_MS}, 3),\n"
                     f"  WATERMARK FOR {q(ROWTIME)} AS {q(ROWTIME)},\n"
                     f"  PRIMARY KEY ({pk}) NOT ENFORCED")
            self.ddl.append(_csv_table(name, table_columns(rel),
                                       self.relation_paths[node.relation.name], extra))
            self.relations[key] = name
        return self.relations[key]

    # -- nodes
    def compile(self, node: Node) -> str:
        """The view (or table) holding ``node``'s rows."""
        if isinstance(node, Source):
            return self.source_table(node)
        if isinstance(node, Filter | Having):
            src = self.compile(node.input)
            pred = expr_sql(node.predicate, node.input.schema)
            return self.view(f"SELECT * FROM {q(src)} WHERE {pred}")
        if isinstance(node, Project):
            return self.project(node)
        if isinstance(node, RelationJoin):
            return self.relation_join(node)
        if isinstance(node, WindowAggregate):
            return self.window_aggregate(node)
        if isinstance(node, PerWindowAggregate):
            return self.per_window_aggregate(node)
        if isinstance(node, KeepMax):
            return self.keep_max(node)
        if isinstance(node, WindowJoin):
            return self.window_join(node)
        raise QueryError(f"{node.label()}: the Flink peer has no translation for this operator")

    def _named(self, pairs, schema: Schema) -> list[str]:
        """``expr AS name`` items (a uuid column as its two words)."""
        items = []
        for name, e in pairs:
            if isinstance(e, Col) and e.dtype(schema) == "uuid":
                items += [f"{q(w)} AS {q(n)}" for w, n in
                          zip(_uuid_words(e.name), _uuid_words(name), strict=True)]
            else:
                items.append(f"{expr_sql(e, schema)} AS {q(name)}")
        return items

    def project(self, node: Project) -> str:
        src = self.compile(node.input)
        items = [q("timestamp"), q(ROWTIME), *self._named(node.columns, node.input.schema)]
        return self.view(f"SELECT {', '.join(items)} FROM {q(src)}")

    def relation_join(self, node: RelationJoin) -> str:
        src = self.compile(node.input)
        rel = self.relation_table(node)
        lt, rt = node.input.schema.field(node.left), node.relation.schema.field(node.right)
        on = " AND ".join(f"s.{q(a)} = r.{q(b)}"
                          for a, b in zip(flat_names(lt), flat_names(rt), strict=True))
        added = [f"r.{q(w)}" for c in node.columns
                 for w in flat_names(node.relation.schema.field(c))]
        return self.view(f"SELECT s.*, {', '.join(added)} FROM {q(src)} AS s\n"
                         f"JOIN {q(rel)} FOR SYSTEM_TIME AS OF s.{q(ROWTIME)} AS r ON {on}")

    def _grouped(self, src: str, keys, aggs, schema: Schema, extra: list[str]) -> tuple[str, list]:
        """A view of ``src`` with ``extra`` columns, the keys and the aggregates' inputs."""
        items = [*extra, *self._named(keys, schema)]
        inputs = []
        for i, a in enumerate(aggs):
            if a.fn == "count":
                inputs.append(None)
            else:
                inputs.append(f"__a{i}")
                items.append(f"{expr_sql(a.expr, schema)} AS {q(f'__a{i}')}")
        return self.view(f"SELECT {', '.join(items)} FROM {q(src)}"), inputs

    def _aggregate(self, table_sql: str, keys, aggs, inputs, schema: Schema) -> str:
        key_cols = [q(c) for n, e in keys for c in
                    (_uuid_words(n) if e.dtype(schema) == "uuid" else (n,))]
        wins = [q(c) for c in WINDOW_COLUMNS]
        aggs_sql = [f"{_agg_sql(a, i, schema)} AS {q(a.name)}"
                    for a, i in zip(aggs, inputs, strict=True)]
        group = ", ".join(wins + key_cols)
        return self.view(f"SELECT {', '.join(wins + key_cols + aggs_sql)}\nFROM {table_sql}\n"
                         f"GROUP BY {group}")

    def window_aggregate(self, node: WindowAggregate) -> str:
        src = self.compile(node.input)
        schema = node.input.schema
        narrow, inputs = self._grouped(src, node.keys, node.aggs, schema, [q(ROWTIME)])
        w = node.window
        tvf = (f"TUMBLE(TABLE {q(narrow)}, DESCRIPTOR({q(ROWTIME)}), {interval(w.range_ms)})"
               if w.tumbling else
               f"HOP(TABLE {q(narrow)}, DESCRIPTOR({q(ROWTIME)}), {interval(w.slide_ms)}, "
               f"{interval(w.range_ms)})")
        return self._aggregate(f"TABLE({tvf})", node.keys, node.aggs, inputs, schema)

    def per_window_aggregate(self, node: PerWindowAggregate) -> str:
        src = self.compile(node.input)
        schema = node.input.schema
        narrow, inputs = self._grouped(src, node.keys, node.aggs, schema,
                                       [q(c) for c in WINDOW_COLUMNS])
        return self._aggregate(q(narrow), node.keys, node.aggs, inputs, schema)

    def keep_max(self, node: KeepMax) -> str:
        src = self.compile(node.input)
        wins = ", ".join(q(c) for c in WINDOW_COLUMNS)
        peak = self.view(f"SELECT {wins}, MAX({q(node.column)}) AS {q('__max')} FROM {q(src)}\n"
                         f"GROUP BY {wins}")
        return self.view(f"SELECT l.* FROM {q(src)} AS l JOIN {q(peak)} AS m\n"
                         f"ON l.window_start = m.window_start AND l.window_end = m.window_end\n"
                         f"AND l.{q(node.column)} = m.{q('__max')}")

    def window_join(self, node: WindowJoin) -> str:
        left, right = self.compile(node.left), self.compile(node.right)
        ls, rs = node.left.schema, node.right.schema
        on = ["l.window_end = r.window_end"]  # the sides' ranges may differ (SG3)
        on += [f"l.{q(c)} = r.{q(c)}" for k in node.on for c in flat_names(ls.field(k))]
        cols = [f"l.{q(c)}" for c in WINDOW_COLUMNS]
        cols += [f"l.{q(c)}" for f in ls.fields[2:] for c in flat_names(f)]
        cols += [f"r.{q(c)}" for f in rs.fields[2:] if f.name not in node.on
                 for c in flat_names(f)]
        joined = self.view(f"SELECT {', '.join(cols)} FROM {q(left)} AS l JOIN {q(right)} AS r\n"
                           f"ON {' AND '.join(on)}")
        if node.predicate is None:
            return joined
        return self.view(f"SELECT * FROM {q(joined)} WHERE {expr_sql(node.predicate, node.schema)}")


def sink_columns(schema: Schema) -> list[tuple[str, str]]:
    """(column, SQL type) of the result CSV: window bounds in ms, floats as DOUBLE."""
    out = []
    for f in schema.fields:
        t = "DOUBLE" if f.dtype in FLOAT_TYPES else "BIGINT"
        out += [(n, t) for n in flat_names(f)]
    return out


def flink_sql(query: Query, stream_path: str, relation_paths: dict[str, str], output_path: str,
              prefix: str = "", columns: tuple[str, ...] | None = None) -> FlinkSQL:
    """Compile ``query`` to Flink SQL over exported CSV files.

    ``stream_path``/``relation_paths``/``output_path`` are ``file://`` URIs (a file or
    a folder); ``prefix`` names this query's tables and views apart from others'
    in the same session; ``columns``: the stream fields the CSV holds (default: all;
    :func:`read_columns` is what the query needs).  Raises :class:`QueryError` for a plan the peer cannot run
    with the engine's semantics.
    """
    for f in query.schema.fields:
        if f.dtype not in INT_TYPES | FLOAT_TYPES | {"uuid"}:
            raise QueryError(f"{query.name}: result column {f.name!r} is a {f.dtype}")
    c = _Compiler(prefix, stream_path, relation_paths, columns, counts_rows(query))
    root = c.compile(query.node)
    sink = f"{prefix}result"
    cols = sink_columns(query.schema)
    c.ddl.append(_csv_table(sink, cols, output_path))
    items = []
    for f in query.schema.fields:
        if f.name in ("window_start", "window_end"):
            items.append(f"{epoch_ms(q(f.name))} AS {q(f.name)}")
        elif f.dtype in FLOAT_TYPES:
            items.append(f"CAST({q(f.name)} AS DOUBLE) AS {q(f.name)}")
        else:
            items += [q(n) for n in flat_names(f)]
    insert = f"INSERT INTO {q(sink)}\nSELECT {', '.join(items)} FROM {q(root)}"
    return FlinkSQL(query.name, tuple(c.ddl), insert, tuple(n for n, _ in cols))
