"""Persistence push-up (paper §3.4, Fig. 3; docs/design.md).

The ingress p-stream sits, before optimisation, right after the source: every
attribute of every tuple is persisted.  Push-up moves the operators that reduce
data *below* the p-stream - they run before persistence - so that the p-stream
holds a compact stream, still enough to recompute every result on recovery:

1. traverse each branch's stateless prefix (σ, π, ⋈ relation) in topological order,
   from the source up, keeping each derived attribute as an expression over source
   attributes;
2. **selections** (σ, also those over derived attributes - the HAVING-like ones over a
   projection) whose condition reads only source attributes move below the p-stream,
   rewritten over source attributes; with several branches (SG3) the p-stream keeps
   the tuples *any* branch needs (the disjunction), each branch still applying its own;
3. **projections**: attributes no operator reads are pruned;
4. **compression** is placed before the p-stream too (the codecs of
   :mod:`scabbard.compression`; chosen at run time, not here);
5. **stateful operators** (ω γ α, joins of windows, everything after the window
   aggregation) and relation joins are never moved: stateful ones amplify data and
   are checkpointed instead (§3.4), and a relation join would tie the persisted
   stream to a side table's contents.  Below a count-based window no selection
   moves either: the window numbers tuples by their offset in the stream it reads.

A stateless query (σ, π, ⋈ relation only) is one prefix: its selections move below the
p-stream, which then persists after them - its tuples are the query's result rows - and
its derived columns are computed above it from the attributes kept.

:func:`push_up` returns a :class:`PushUp`: the reduction to run before persistence
and the rewritten plan that reads the reduced stream.  Running the rewritten plan
on the reduced stream gives exactly the results of the original plan on the full
stream (tested).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from scabbard.query.expr import BinOp, BoolOp, Cmp, Col, Expr, Lit, Not, QueryError, resolve
from scabbard.query.plan import (
    Filter,
    Node,
    Project,
    RelationJoin,
    Source,
    WindowAggregate,
    WindowJoin,
    stateless,
)
from scabbard.schema import Schema

_PREFIX = (Filter, Project, RelationJoin)


@dataclass(frozen=True)
class PushUp:
    """What runs before the ingress p-stream, and the plan that reads what it persists.

    ``predicate``: over the source's attributes (None: every tuple is kept);
    ``columns``: the attributes persisted, in source order, timestamp first;
    ``schema``: the persisted p-stream's schema; ``plan``: the rewritten query plan,
    whose source is the p-stream.  ``moved``: labels of the operators moved below it.
    """

    source: Schema
    predicate: Expr | None
    columns: tuple[str, ...]
    schema: Schema
    plan: Node
    moved: tuple[str, ...]

    @property
    def pruned(self) -> tuple[str, ...]:
        return tuple(n for n in self.source.names if n not in self.columns)

    @property
    def bytes_per_kept_tuple(self) -> int:
        """Payload bytes of one persisted tuple (uncompressed)."""
        return sum(self.source.field(c).itemsize for c in self.columns)

    def explain(self, selectivity: float | None = None) -> str:
        pred = "every tuple" if self.predicate is None else f"σ[{self.predicate!r}]"
        lines = [f"P-Stream[{self.schema.name}: {len(self.columns)} of {len(self.source)} "
                 f"attributes, {self.bytes_per_kept_tuple} B/tuple; keeps {pred}]"]
        if self.pruned:
            lines.append(f"  pruned: {', '.join(self.pruned)}")
        if self.moved:
            lines.append(f"  moved below the p-stream: {'; '.join(self.moved)}")
        return "\n".join(lines)


# -- expressions over source attributes --------------------------------------------------------
def _substitute(expr: Expr, env: dict[str, Expr | None]) -> Expr | None:
    """``expr`` with every column replaced by its definition over source attributes;
    None if it reads an attribute that has none (a joined relation's)."""
    if isinstance(expr, Col):
        return env.get(expr.name)
    if isinstance(expr, Lit):
        return expr
    if isinstance(expr, BinOp | Cmp):
        left, right = _substitute(expr.left, env), _substitute(expr.right, env)
        if left is None or right is None:
            return None
        return type(expr)(expr.op, left, right)
    if isinstance(expr, BoolOp):
        args = [_substitute(a, env) for a in expr.args]
        return None if any(a is None for a in args) else BoolOp(expr.op, tuple(args))
    if isinstance(expr, Not):
        arg = _substitute(expr.arg, env)
        return None if arg is None else Not(arg)
    raise QueryError(f"push-up cannot rewrite {expr!r}")


def _conjunction(preds: list[Expr]) -> Expr | None:
    if not preds:
        return None
    return preds[0] if len(preds) == 1 else BoolOp("and", tuple(preds))


def _branches(node: Node) -> list[WindowAggregate]:
    """The window aggregations over the source (one per branch), in plan order."""
    if isinstance(node, WindowAggregate):
        return [node]
    return [b for c in node.children for b in _branches(c)]


def _chain(n: Node) -> list[Node]:
    """The stateless prefix ending at ``n`` (a branch's window's input, or a stateless
    plan's root), source first."""
    chain = []
    while not isinstance(n, Source):
        if not isinstance(n, _PREFIX):
            raise QueryError(f"{n.label()} cannot come before the window aggregation")
        chain.append(n)
        n = n.input
    return chain[::-1]


def _expressions(node: Node) -> list[Expr]:
    if isinstance(node, Filter):
        return [node.predicate]
    if isinstance(node, Project):
        return [e for _, e in node.columns]
    if isinstance(node, RelationJoin):
        return [Col(node.left)]
    if isinstance(node, WindowAggregate):
        return [e for _, e in node.keys] + [a.expr for a in node.aggs if a.expr is not None]
    return []


@dataclass
class _Branch:
    agg: WindowAggregate | None  # None: the stateless plan (its chain is the whole query)
    chain: list[Node]
    pushed: list[int]  # indices into chain of the filters moved below the p-stream
    predicate: Expr | None  # their conjunction over source attributes

    def used(self, kept: list[Node], source: Schema) -> set[str]:
        """The attributes what stays above the p-stream reads (an over-approximation is
        safe: a derived attribute named like a source one only keeps that one); a stateless
        plan's result without a projection is every attribute."""
        nodes = kept if self.agg is None else [*kept, self.agg]
        used = {"timestamp"}.union(*(e.columns() for n in nodes for e in _expressions(n)))
        if self.agg is None and not any(isinstance(n, Project) for n in self.chain):
            used |= set(source.names)
        return used


def _analyse(agg: WindowAggregate | None, chain: list[Node], source: Source) -> _Branch:
    """A branch's prefix: the filters that move below the p-stream.  None move below a
    count-based window: they would renumber the tuples it counts (by input offset)."""
    env: dict[str, Expr | None] = {n: Col(n) for n in source.schema.names}
    pushed, preds = [], []
    for i, node in enumerate(chain):
        if agg is not None and agg.window.rows:
            break
        if isinstance(node, Filter):
            over_source = _substitute(node.resolved_predicate(), env)
            if over_source is not None:
                pushed.append(i)
                preds.append(resolve(over_source, source.schema))
        elif isinstance(node, Project):
            env = {"timestamp": env["timestamp"],
                   **{name: _substitute(e, env) for name, e in node.columns}}
        else:  # a relation join adds attributes with no definition over the source
            env = {**env, **dict.fromkeys(node.columns)}
    return _Branch(agg, chain, pushed, _conjunction(preds))


def _rebuild(node: Node, done: dict[int, Node]) -> Node:
    """``node`` with its window aggregations replaced as ``done`` says (by id)."""
    if id(node) in done:
        return done[id(node)]
    kids = node.children
    if not kids:
        return node
    fields = {"left": 0, "right": 1} if isinstance(node, WindowJoin) else {"input": 0}
    return replace(node, **{k: _rebuild(kids[i], done) for k, i in fields.items()})


def push_up(plan: Node) -> PushUp:
    """Rewrite ``plan`` so that selections, projections and compression run before the
    ingress p-stream (steps in the module docstring)."""
    source = plan.source()
    if stateless(plan):  # the whole query is a prefix: it ends where its result does
        branches = [_analyse(None, _chain(plan), source)]
    else:
        branches = [_analyse(a, _chain(a.input), source) for a in _branches(plan)]
    # Step 2: the tuples some branch needs
    if any(b.predicate is None for b in branches):
        predicate = None
    elif len(branches) == 1 or all(repr(b.predicate) == repr(branches[0].predicate)
                                   for b in branches):
        predicate = branches[0].predicate
    else:
        predicate = BoolOp("or", tuple(b.predicate for b in branches))
    # a branch drops its filters below the p-stream when the p-stream keeps exactly its tuples
    exact = predicate is not None and all(repr(b.predicate) == repr(predicate) for b in branches)
    kept = [[n for i, n in enumerate(b.chain) if not (exact and i in b.pushed)] for b in branches]
    # Step 3: the attributes the operators above the p-stream read (an over-approximation is
    # safe: a derived attribute named like a source one only keeps that one)
    used = set().union(*(b.used(chain, source.schema)
                         for b, chain in zip(branches, kept, strict=True)))
    columns = tuple(n for n in source.schema.names if n in used)
    schema = Schema(f"{source.schema.name}_persisted",
                    tuple(source.schema.field(c) for c in columns),
                    description=f"{source.schema.name} after persistence push-up")
    reduced = Source(schema, source.name)
    # the rewritten branches: over the p-stream, without the filters it already applied
    done, moved = {}, []
    for b, chain in zip(branches, kept, strict=True):
        n: Node = reduced
        for node in chain:
            n = replace(node, input=n)
        done[id(b.agg if b.agg is not None else plan)] = (
            replace(b.agg, input=n) if b.agg is not None else n)
        moved += [b.chain[i].label() for i in b.pushed if exact and b.chain[i].label() not in moved]
    if predicate is not None and not exact:
        moved.append(f"σ[{predicate!r}] (what any branch keeps; each still applies its own)")
    if len(columns) < len(source.schema):
        moved.insert(0, f"π[{', '.join(columns)}]")
    return PushUp(source.schema, predicate, columns, schema, _rebuild(plan, done), tuple(moved))
