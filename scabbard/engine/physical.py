"""From a logical plan to what the engine runs: front-end kernels, aggregation slots, post-window steps.

A plan is cut where the paper cuts it (§2.3, §4.1):

* per **branch** (one ω γ α over the source; SG3 has two): the stateless prefix
  (σ, π, ⋈ relation) becomes one generated numba kernel (:class:`FrontSpec`), and
  the aggregates become int / float *slots* with SUM / MIN / MAX operations
  (count is always kept; avg = SUM slot / count);
* the operators above the window aggregation (having, keep-max, per-window
  aggregate, window join) become a **post-window** function that maps one batch
  of complete windows to final result rows.  All of them act window by window,
  so they run wherever windows complete: inside a task, or in the assembler;
* a plan without a window (σ, π, ⋈ relation only) is one stateless operator, a
  :class:`~scabbard.engine.selection.Selection`: each task's surviving rows, in input order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scabbard.engine import frontcode
from scabbard.engine.frontcode import gen
from scabbard.engine.selection import Selection, make_selection
from scabbard.kernels import rows as kr
from scabbard.kernels.aggregate import MAX, MIN, SUM
from scabbard.kernels.codegen import FrontSpec, compile_front
from scabbard.query.expr import BinOp, BoolOp, Cmp, Col, Expr, Lit, Not, QueryError, resolve
from scabbard.query.plan import (
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
    windowed_root,
)
from scabbard.schema import Schema

_OPS = {"sum": SUM, "avg": SUM, "min": MIN, "max": MAX}


# -- branches ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Output:
    """How one aggregate column is read from the window state."""

    name: str
    dtype: str
    fn: str
    slot: int  # index into the int or float slots (-1 for count)
    is_float: bool


@dataclass
class Branch:
    """One window aggregation over the source: its kernel spec, slots and outputs."""

    node: WindowAggregate
    spec: FrontSpec
    input_columns: tuple[str, ...]
    relations: tuple[tuple[RelationJoin, tuple[str, ...]], ...]
    key_fields: tuple  # output Fields of the group keys
    iops: np.ndarray
    fops: np.ndarray
    outputs: tuple[Output, ...]
    _kernel: object = None
    id: str = "window0"  # the operator's stable id (:func:`operators`)
    # what each window emits (:func:`scabbard.kernels.rows.emit_window_rows`): all groups, the
    # largest by one aggregate when a keep-max is fused right above (:func:`fuse_keep_max`),
    # or the count of groups per value of some keys (:func:`fuse_rollup_count`)
    select: tuple[int, ...] = (kr.ALL_GROUPS, 0)
    # the per-window count fused into the emission: the branch's rows are its result
    rollup: PerWindowAggregate | None = None
    emitted: str | None = None  # that operator's id (it does not run again)

    @property
    def key_width(self) -> int:
        return sum(2 if f.dtype == "uuid" else 1 for f in self.key_fields)

    @property
    def key_dtypes(self) -> tuple | None:
        """The type of each key word of the rows a task emits ("typed" keys,
        :func:`scabbard.kernels.window.windows_from_partials`): the result column's, a uuid's
        two words int64.  None: one int64 matrix - no keys, or a per-window count's rows."""
        if not self.key_fields or self.rollup is not None:
            return None
        return tuple(d for f in self.key_fields
                     for d in ((np.int64, np.int64) if f.dtype == "uuid" else (f.numpy_dtype,)))

    @property
    def slide_ms(self) -> int:
        return self.node.window.slide_ms

    @property
    def panes(self) -> int:
        return self.node.window.panes

    @property
    def long_panes(self) -> int:
        """The fewest panes a task spans to be *long*: to hold a window of its own, whole,
        past its first pane and before its last (either may be cut short by the task's
        edges).  Its windows are then computed by its fragment, and those it shares with
        each neighbour by a worker from the two tasks' edge partials; a shorter task's go
        through the branch's sequential state."""
        return self.panes + 2

    def kernel(self, cache_dir: Path):
        if self._kernel is None:
            self._kernel = compile_front(self.spec, cache_dir)
        return self._kernel

    def finalize(self, raw) -> dict[str, np.ndarray]:
        """Window-state rows -> result columns (window bounds, keys, aggregates)."""
        w_start, w_end, keys, cnt, ints, floats = raw
        cols = {"window_start": w_start, "window_end": w_end}
        if self.rollup is not None:  # the per-window count's rows: its keys, then counts
            fields = [self.rollup.schema.field(n) for n, _ in self.rollup.keys]
            cols.update(_key_columns(keys, fields))
            cols.update({a.name: cnt for a in self.rollup.aggs})
            return cols
        cols.update(_key_columns(keys, self.key_fields))
        for o in self.outputs:
            if o.fn == "count":
                cols[o.name] = cnt
                continue
            v = (floats if o.is_float else ints)[:, o.slot]
            cols[o.name] = v / cnt if o.fn == "avg" else v.astype(o.dtype)
        return cols


def _key_columns(keys, fields) -> dict[str, np.ndarray]:
    """Key columns from the key words of result rows (a uuid is two words): one int64 matrix,
    or a tuple of columns already of their fields' types (typed keys)."""
    if isinstance(keys, tuple):
        cols, k = {}, 0
        for f in fields:
            if f.dtype == "uuid":
                cols[f.name] = np.column_stack(keys[k:k + 2]).view(np.uint64)
                k += 2
            else:
                cols[f.name] = keys[k]
                k += 1
        return cols
    cols, words, plain = {}, [], []
    k = 0
    for f in fields:
        if f.dtype == "uuid":
            cols[f.name] = np.ascontiguousarray(keys[:, k:k + 2]).view(np.uint64)
            k += 2
        else:
            words.append(k)
            plain.append(f)
            k += 1
    split = kr.split_words(keys, words, [f.numpy_dtype for f in plain])
    cols.update({f.name: c for f, c in zip(plain, split, strict=True)})
    return {f.name: cols[f.name] for f in fields}


def make_branch(node: WindowAggregate) -> Branch:
    front = frontcode.front(node.input)
    keys = frontcode.group_key_codes(node, front)
    ints, floats = [], []
    iops, fops = [], []
    outputs = []
    slots: dict[tuple, tuple[bool, int]] = {}
    schema = node.input.schema
    for a in node.aggs:
        out_t = a.output_dtype(schema)
        if a.fn == "count":
            outputs.append(Output(a.name, out_t, "count", -1, False))
            continue
        value = gen(resolve(a.expr, schema), front.env)
        front.codes.append(value)
        code = value.text
        is_float = a.input_dtype(schema) in ("float32", "float64")
        op = _OPS[a.fn]
        if (op, code, is_float) not in slots:
            target, ops = (floats, fops) if is_float else (ints, iops)
            slots[(op, code, is_float)] = (is_float, len(target))
            target.append(code)
            ops.append(op)
        _, slot = slots[(op, code, is_float)]
        outputs.append(Output(a.name, out_t, a.fn, slot, is_float))
    # the kernel's ts argument is the window axis (the timestamps, or the tuples' offsets)
    columns, relations = frontcode.inputs(front, node.input.source().schema, ("timestamp",))
    spec = FrontSpec(
        columns=columns,
        relations=tuple(cols for _, cols in relations),
        steps=tuple(front.steps),
        keys=tuple(keys),
        ints=tuple(ints),
        floats=tuple(floats),
    )
    key_fields = tuple(node.schema.field(n) for n, _ in node.keys)
    return Branch(node, spec, columns, relations, key_fields,
                  np.array(iops, dtype=np.int64), np.array(fops, dtype=np.int64), tuple(outputs))


# -- post-window operators ----------------------------------------------------------------------
def eval_numpy(expr: Expr, cols: dict[str, np.ndarray], schema: Schema) -> np.ndarray:
    """Vectorised evaluation of ``expr`` over result columns."""
    expr = resolve(expr, schema)

    def ev(e):
        if isinstance(e, Col):
            return cols[e.name]
        if isinstance(e, Lit):
            return e.value
        if isinstance(e, BinOp):
            a, b = ev(e.left), ev(e.right)
            if e.op == "/":
                return np.true_divide(a, b)
            return {"+": np.add, "-": np.subtract, "*": np.multiply, "//": np.floor_divide,
                    "%": np.mod}[e.op](a, b)
        if isinstance(e, Cmp):
            a, b = ev(e.left), ev(e.right)
            if getattr(a, "ndim", 1) == 2 or getattr(b, "ndim", 1) == 2:  # uuids
                same = np.all(np.asarray(a) == np.asarray(b), axis=-1)
                return same if e.op == "==" else ~same
            return {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal,
                    ">": np.greater, ">=": np.greater_equal}[e.op](a, b)
        if isinstance(e, BoolOp):
            out = ev(e.args[0])
            for x in e.args[1:]:
                out = (np.logical_and if e.op == "and" else np.logical_or)(out, ev(x))
            return out
        if isinstance(e, Not):
            return np.logical_not(ev(e.arg))
        raise QueryError(f"cannot evaluate {e!r}")

    return np.asarray(ev(expr))


def concat_pieces(pieces: list[dict]) -> dict[str, np.ndarray]:
    """Pieces of the same columns, one after the other, as one."""
    if len(pieces) == 1:
        return pieces[0]
    return {k: np.concatenate([p[k] for p in pieces]) for k in pieces[0]}


def take(cols: dict[str, np.ndarray], index) -> dict[str, np.ndarray]:
    return {k: v[index] for k, v in cols.items()}


def window_segments(window_end: np.ndarray) -> np.ndarray:
    """Start offsets of each window's run of rows (rows come grouped by window)."""
    return kr.run_starts(np.ascontiguousarray(window_end, dtype=np.int64))


def _keep_max(cols: dict[str, np.ndarray], column: str) -> dict[str, np.ndarray]:
    v = cols[column]
    if len(v) == 0:
        return cols
    starts = window_segments(cols["window_end"])
    peak = np.maximum.reduceat(v, starts)
    lengths = np.diff(np.append(starts, len(v)))
    return take(cols, v == np.repeat(peak, lengths))


def _per_window_aggregate(node: PerWindowAggregate, cols: dict[str, np.ndarray]):
    from scabbard.kernels.aggregate import pane_aggregate

    schema = node.input.schema
    n = len(cols["window_end"])
    key_parts, key_fields = [], []
    for name, e in node.keys:
        v = np.asarray(eval_numpy(e, cols, schema))
        f = node.schema.field(name)
        key_fields.append(f)
        key_parts.append(v.view(np.int64).reshape(n, 2) if f.dtype == "uuid"
                         else v.astype(np.int64).reshape(n, 1))
    keys = np.hstack(key_parts) if key_parts else np.zeros((n, 0), dtype=np.int64)
    ints, floats, iops, fops, outs = [], [], [], [], []
    for a in node.aggs:
        if a.fn == "count":
            outs.append((a, None, -1))
            continue
        v = eval_numpy(a.expr, cols, schema)
        is_float = a.input_dtype(schema) in ("float32", "float64")
        (floats if is_float else ints).append(v)
        (fops if is_float else iops).append(_OPS[a.fn])
        outs.append((a, is_float, len(floats if is_float else ints) - 1))
    iv = np.column_stack(ints).astype(np.int64) if ints else np.zeros((n, 0), np.int64)
    fv = np.column_stack(floats).astype(np.float64) if floats else np.zeros((n, 0), np.float64)
    pane, gid, cnt, pi, pf, gkeys = pane_aggregate(cols["window_end"], keys, iv, fv, iops, fops, 1)
    range_ms = windowed_root(node.input).window.range_ms
    out = {"window_start": pane - range_ms, "window_end": pane}
    k = 0
    for f in key_fields:
        width = 2 if f.dtype == "uuid" else 1
        part = gkeys[gid, k:k + width]
        out[f.name] = (np.ascontiguousarray(part).view(np.uint64) if f.dtype == "uuid"
                       else part[:, 0].astype(f.numpy_dtype))
        k += width
    for a, is_float, slot in outs:
        if a.fn == "count":
            out[a.name] = cnt
            continue
        v = (pf if is_float else pi)[:, slot]
        out[a.name] = v / cnt if a.fn == "avg" else v.astype(node.schema.field(a.name).numpy_dtype)
    return out


def _key_words(cols: dict[str, np.ndarray], schema: Schema, names) -> list[np.ndarray]:
    """The int64 words of key columns (a uuid is two)."""
    out = []
    for n in names:
        v = np.asarray(cols[n])
        if schema.field(n).dtype == "uuid":
            w = np.ascontiguousarray(v).view(np.int64).reshape(len(v), 2)
            out += [w[:, 0], w[:, 1]]
        else:
            out.append(v.astype(np.int64))
    return out


# a lookup join's left side is cut into pieces run at once from this many rows on
JOIN_PIECE_ROWS = 1 << 13  # a piece of ~0.2 ms: far above a hand-over to a thread


def window_join(node: WindowJoin, left: dict, right: dict, parallel=None) -> list[dict]:
    """⋈ of two batches of complete windows on the window end and ``node.on``, then
    ``node.predicate``; rows in the left side's order, so in window order, in one or more
    pieces.  The left side's window bounds are kept.  A right side with one row per window
    and no ``on`` keys (a global aggregate's: SG3's) is a lookup by window end - with
    ``parallel`` (``(run, ways)``: ``run(fn, args)`` calls ``fn(*a)`` for each ``a`` at once)
    on ``ways`` contiguous pieces of the left side at once; anything else a numba hash join
    (:func:`scabbard.kernels.join.equi_join`)."""
    rw = right["window_end"]
    if node.on or (len(rw) > 1 and not bool(np.all(rw[1:] > rw[:-1]))):
        return [join_hashed(node, left, right)]
    n = len(left["window_end"])
    if parallel is None or n < 2 * JOIN_PIECE_ROWS:
        return [join_one_per_window(node, left, right)]
    run, ways = parallel
    # cut at windows' first rows: a window's rows stay in one piece, as the sink needs them
    # (a clocked sink commits a piece's last window whole)
    lw = left["window_end"]
    even = np.linspace(0, n, min(ways, n // JOIN_PIECE_ROWS) + 1).astype(np.int64)[1:-1]
    cuts = np.unique(np.concatenate(([0], np.searchsorted(lw, lw[even], side="left"), [n])))
    pieces = [{k: v[a:b] for k, v in left.items()}
              for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    return run(join_one_per_window, [(node, p, right) for p in pieces])


def join_hashed(node: WindowJoin, left: dict, right: dict) -> dict:
    from scabbard.kernels.join import equi_join

    ls, rs = node.left.schema, node.right.schema
    lkeys = np.column_stack([left["window_end"], *_key_words(left, ls, node.on)])
    rkeys = np.column_stack([right["window_end"], *_key_words(right, rs, node.on)])
    li, ri = equi_join(lkeys, rkeys)
    out = {f.name: left[f.name][li] for f in ls.fields}
    for f in rs.fields[2:]:
        if f.name not in node.on:
            out[f.name] = right[f.name][ri]
    if node.predicate is not None and len(li):
        out = take(out, eval_numpy(node.predicate, out, node.schema))
    return out


def join_one_per_window(node: WindowJoin, left: dict, right: dict) -> dict:
    """The join when the right side has at most one row per window (its window ends strictly
    increase) and there are no ``on`` keys: each left row's partner found by bisection, the
    predicate evaluated on every left row, and only the rows kept gathered - one pass."""
    ls, rs = node.left.schema, node.right.schema
    lw, rw = left["window_end"], right["window_end"]
    if not len(rw):  # no partner for any row
        return {**{f.name: left[f.name][:0] for f in ls.fields},
                **{f.name: right[f.name][:0] for f in rs.fields[2:]}}
    ri = np.minimum(np.searchsorted(rw, lw), len(rw) - 1)
    hit = rw[ri] == lw
    cols = {f.name: left[f.name] for f in ls.fields}
    cols.update({f.name: right[f.name][ri] for f in rs.fields[2:]})
    if node.predicate is not None and len(lw):
        with np.errstate(all="ignore"):  # rows without a partner hold a stand-in value
            hit &= eval_numpy(node.predicate, cols, node.schema)
    keep = np.flatnonzero(hit)
    out = {f.name: left[f.name][keep] for f in ls.fields}
    out.update({f.name: right[f.name][ri[keep]] for f in rs.fields[2:]})
    return out


# -- the operator graph ---------------------------------------------------------------------------
_KINDS = {WindowAggregate: "window", Having: "having", KeepMax: "keep_max",
          PerWindowAggregate: "per_window", WindowJoin: "join"}


@dataclass(frozen=True)
class Operator:
    """One operator of the query's graph above the source: a stable id (``window0``,
    ``join0``, ... numbered per kind in plan order), its plan node, the operators it reads
    (``source`` for a window over the input stream) and the one it feeds (``sink``)."""

    id: str
    node: Node
    inputs: tuple[str, ...]
    output: str

    @property
    def kind(self) -> str:
        return _KINDS.get(type(self.node), "select")

    @property
    def stateful(self) -> bool:
        """Holds state across batches of complete windows (a window over the source, a join)."""
        return self.kind in ("window", "join")

    def apply(self, *inputs: dict) -> dict:
        """The operator on one batch of complete windows per input (stateless operators and
        a join whose inputs cover the same windows: :meth:`join` in one piece)."""
        node = self.node
        if isinstance(node, Having):
            cols = inputs[0]
            if not len(cols["window_end"]):
                return cols
            return take(cols, eval_numpy(node.predicate, cols, node.input.schema))
        if isinstance(node, KeepMax):
            return _keep_max(inputs[0], node.column)
        if isinstance(node, PerWindowAggregate):
            return _per_window_aggregate(node, inputs[0])
        if isinstance(node, WindowJoin):
            return concat_pieces(window_join(node, inputs[0], inputs[1]))
        raise QueryError(f"{node.label()} is not a per-window operator")


def operators(root: Node) -> dict[str, Operator]:
    """The operators above the source, by id, in topological order (inputs first).  A
    stateless plan is one operator, ``select0`` (its σ, π and ⋈ relation fused)."""
    if stateless(root):
        return {"select0": Operator("select0", root, ("source",), "sink")}
    ids: dict[int, str] = {}
    counts: dict[str, int] = {}
    order: list[Node] = []
    parent: dict[int, Node] = {}

    def visit(node: Node) -> None:
        for c in node.children:
            if not isinstance(c, (Source, Filter, Project, RelationJoin)):
                parent[id(c)] = node
            visit(c)
        if type(node) in _KINDS:
            kind = _KINDS[type(node)]
            ids[id(node)] = f"{kind}{counts.get(kind, 0)}"
            counts[kind] = counts.get(kind, 0) + 1
            order.append(node)

    visit(root)
    out = {}
    for node in order:
        inputs = ("source",) if isinstance(node, WindowAggregate) else tuple(
            ids[id(c)] for c in node.children)
        up = parent.get(id(node))
        out[ids[id(node)]] = Operator(ids[id(node)], node, inputs,
                                      ids[id(up)] if up is not None else "sink")
    return out


@dataclass
class PhysicalPlan:
    """The query's operators: windows over the source (branches, each with its own window),
    per branch the stateless operators fused above it (run wherever its windows complete:
    inside tasks, in parallel, or in the assembly), and the operators the graph runs in
    window order after them (joins, what is above a join, and whatever sits above an edge
    that must not be fused - a p-stream's)."""

    root: Node
    branches: tuple[Branch, ...]
    schema: Schema  # of the final result rows
    operators: dict[str, Operator]
    chains: tuple[tuple[Operator, ...], ...]  # per branch: the operators fused above it
    graph: tuple[Operator, ...]  # the rest, in topological order
    selection: Selection | None = None  # a stateless query's one operator (no branches)

    @property
    def producers(self) -> list[str]:
        """The operators whose output the tasks produce, in order: each branch's top, or the
        stateless query's selection."""
        tops = [self.top(i) for i in range(len(self.branches))]
        return tops + ([self.selection.id] if self.selection is not None else [])

    @property
    def rows(self) -> bool:
        """The windows count tuples (their axis is the input offset), not event time."""
        return any(b.node.window.rows for b in self.branches)

    def post(self, i: int, cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Branch ``i``'s complete windows through its fused operators."""
        for op in self.chains[i]:
            if op.id != self.branches[i].emitted:
                cols = op.apply(cols)
        return cols

    def top(self, i: int) -> str:
        """The operator whose output leaves branch ``i``'s fused chain."""
        return self.chains[i][-1].id if self.chains[i] else self.branches[i].id


def _windows(node: Node) -> list[WindowAggregate]:
    if isinstance(node, WindowAggregate):
        return [node]
    return [a for c in node.children for a in _windows(c)]


def fuse_keep_max(b: Branch, column: str) -> tuple[int, int]:
    """The emission of branch ``b`` keeping only each window's largest ``column`` (a keep-max
    fused right above it still runs: the rows it gets are already its result), when the
    kernel compares exactly what the result column holds: the count, or an int64 or float64
    aggregate other than an average (a narrower type could make two values equal)."""
    for o in b.outputs:
        if o.name != column:
            continue
        if o.fn == "count":
            return kr.MAX_COUNT, 0
        if o.fn != "avg" and o.dtype == ("float64" if o.is_float else "int64"):
            return (kr.MAX_FLOAT if o.is_float else kr.MAX_INT), o.slot
    return kr.ALL_GROUPS, 0


def fuse_rollup_count(b: Branch, node: PerWindowAggregate) -> tuple[int, ...] | None:
    """The emission of branch ``b`` counting, per window, its groups per value of some of
    their keys - when ``node``, right above the branch, is exactly that: grouped by plain key
    columns of the branch, every aggregate a count (LRB3 counts LRB2's vehicles per
    segment).  The window's rows are then never written: the emission makes ``node``'s."""
    if not node.aggs or any(a.fn != "count" for a in node.aggs):
        return None
    words, at = {}, 0  # each key field's int64 words in the branch's key rows
    for f in b.key_fields:
        width = 2 if f.dtype == "uuid" else 1
        words[f.name] = list(range(at, at + width))
        at += width
    columns = []
    for name, e in node.keys:
        e = resolve(e, node.input.schema)
        if not isinstance(e, Col) or e.name not in words or \
                node.schema.field(name).dtype != b.node.schema.field(e.name).dtype:
            return None
        columns += words[e.name]
    return (kr.ROLLUP_COUNT, 0, *columns)


def plan(root: Node, unfused: frozenset[str] = frozenset()) -> PhysicalPlan:
    """Compile a logical plan: window aggregations (and operators on them), or a stateless
    plan (σ, π, ⋈ relation: :mod:`scabbard.engine.selection`).

    ``unfused``: operators whose *output* edge must stay an edge (a p-stream sits on it):
    what reads it is never fused into them."""
    ops = operators(root)
    unknown = sorted(set(unfused) - set(ops))
    if unknown:
        raise QueryError(f"no operator {', '.join(unknown)} in this query (operators: "
                         f"{', '.join(ops)})")
    if stateless(root):
        return PhysicalPlan(root, (), root.schema, ops, (), (), make_selection(root))
    if len({w.window.rows for w in _windows(root)}) > 1:
        raise QueryError("a query's windows all count tuples (window_rows) or all count event "
                         "time (window): not both")
    branches = []
    chains = []
    fused: set[str] = set()
    for op in ops.values():
        if op.kind != "window":
            continue
        b = make_branch(op.node)
        b.id = op.id
        branches.append(b)
        chain, cur = [], op
        while cur.output != "sink" and cur.id not in unfused:
            up = ops[cur.output]
            if len(up.inputs) != 1:
                break
            chain.append(up)
            cur = up
        chains.append(tuple(chain))
        fused |= {c.id for c in chain}
        if chain and chain[0].kind == "keep_max":
            b.select = fuse_keep_max(b, chain[0].node.column)
        if chain and chain[0].kind == "per_window":
            rollup = fuse_rollup_count(b, chain[0].node)
            if rollup is not None:
                b.select, b.rollup, b.emitted = rollup, chain[0].node, chain[0].id
    graph = tuple(o for o in ops.values() if o.kind != "window" and o.id not in fused)
    return PhysicalPlan(root, tuple(branches), root.schema, ops, tuple(chains), graph)
