"""A plan's stateless prefix (σ, π, ⋈ with a relation) as numba source: the code strings of the
fused front-end kernel (:mod:`scabbard.kernels.codegen` assembles and loads them).

:func:`front` walks the prefix from the source up and returns, for every attribute it
produces, the :class:`Code` computing it for row ``i``, and the kernel's steps (filters, relation
probes) in order.  A window's branch (:mod:`scabbard.engine.physical`) and a stateless query
(:mod:`scabbard.engine.selection`) both build their kernels from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scabbard.query.expr import BinOp, BoolOp, Cmp, Col, Expr, Lit, Not, QueryError, resolve
from scabbard.query.plan import Filter, Node, Project, RelationJoin, Source
from scabbard.schema import Schema


@dataclass(frozen=True)
class Code:
    """Generated source of a value: one string, or two for a uuid (its int64 words).

    ``deps``: the input columns it reads; ``rels``: the relation arrays it reads.
    """

    text: str | tuple[str, str]
    deps: frozenset = frozenset()
    rels: frozenset = frozenset()

    @property
    def uuid(self) -> bool:
        return isinstance(self.text, tuple)


def _join(text: str, *parts: Code) -> Code:
    return Code(text, frozenset().union(*(p.deps for p in parts)),
                frozenset().union(*(p.rels for p in parts)))


def gen(expr: Expr, env: dict[str, Code]) -> Code:
    """Source code computing ``expr`` for row ``i`` of the input."""
    if isinstance(expr, Col):
        return env[expr.name]
    if isinstance(expr, Lit):
        return Code(repr(expr.value))
    if isinstance(expr, BinOp):
        lt, rt = gen(expr.left, env), gen(expr.right, env)
        return _join(f"({lt.text} {expr.op} {rt.text})", lt, rt)
    if isinstance(expr, Cmp):
        lt, rt = gen(expr.left, env), gen(expr.right, env)
        if lt.uuid or rt.uuid:
            same = f"(({lt.text[0]} == {rt.text[0]}) and ({lt.text[1]} == {rt.text[1]}))"
            return _join(same if expr.op == "==" else f"(not {same})", lt, rt)
        return _join(f"({lt.text} {expr.op} {rt.text})", lt, rt)
    if isinstance(expr, BoolOp):
        parts = [gen(a, env) for a in expr.args]
        return _join("(" + f" {expr.op} ".join(p.text for p in parts) + ")", *parts)
    if isinstance(expr, Not):
        inner = gen(expr.arg, env)
        return _join(f"(not {inner.text})", inner)
    raise QueryError(f"cannot compile {expr!r}")


def column_code(name: str, dtype: str) -> Code:
    text = (f"c_{name}[i, 0]", f"c_{name}[i, 1]") if dtype == "uuid" else f"c_{name}[i]"
    return Code(text, frozenset({name}))


def _relation_code(j: int, name: str, dtype: str) -> Code:
    row = f"j{j}"
    text = (f"r{j}_{name}[{row}, 0]", f"r{j}_{name}[{row}, 1]") if dtype == "uuid" \
        else f"r{j}_{name}[{row}]"
    return Code(text, frozenset(), frozenset({(j, name)}))


@dataclass
class Front:
    """A prefix compiled: each attribute's :class:`Code` (``env``), the kernel's steps in
    order, the joined relations by join number, and every code the kernel evaluates."""

    env: dict[str, Code]
    steps: list = field(default_factory=list)
    relations: list = field(default_factory=list)  # RelationJoin nodes, by join number
    codes: list = field(default_factory=list)  # every Code the kernel evaluates


def front(node: Node) -> Front:
    """The prefix ending at ``node`` (σ, π, ⋈ relation down to the source), compiled."""
    if isinstance(node, Source):
        return Front({f.name: column_code(f.name, f.dtype) for f in node.schema.fields})
    inner = front(node.input)
    if isinstance(node, Filter):
        pred = gen(resolve(node.predicate, node.input.schema), inner.env)
        inner.steps.append(("filter", pred.text))
        inner.codes.append(pred)
    elif isinstance(node, Project):
        env = {"timestamp": inner.env["timestamp"]}
        for name, e in node.columns:
            env[name] = gen(resolve(e, node.input.schema), inner.env)
        inner.env = env
    elif isinstance(node, RelationJoin):
        j = len(inner.relations)
        key = gen(Col(node.left), inner.env)
        inner.steps.append(("join", j, key.text if key.uuid else (key.text,)))
        inner.codes.append(key)
        inner.relations.append(node)
        rel = node.relation.schema
        for c in node.columns:
            inner.env[c] = _relation_code(j, c, rel.field(c).dtype)
    else:
        raise QueryError(f"{node.label()} cannot come before the window aggregation")
    return inner


def inputs(f: Front, source: Schema, skip: tuple[str, ...] = ()) -> tuple[tuple, tuple]:
    """The source columns the kernel reads (in source order, except ``skip``) and, per joined
    relation, the node and the relation columns it reads."""
    used = frozenset().union(*(c.deps for c in f.codes))
    rels = frozenset().union(*(c.rels for c in f.codes))
    columns = tuple(n for n in source.names if n in used and n not in skip)
    relations = tuple((rj, tuple(c for c in rj.columns if (j, c) in rels))
                      for j, rj in enumerate(f.relations))
    return columns, relations


def group_key_codes(node, f: Front) -> list[str]:
    """The code of each group key word of window aggregation ``node`` over its prefix ``f``
    (a uuid key: two words), recorded in ``f``'s codes (the inputs the kernel reads)."""
    keys = []
    for _, e in node.keys:
        code = gen(resolve(e, node.input.schema), f.env)
        f.codes.append(code)
        keys.extend(code.text if code.uuid else [code.text])
    return keys
