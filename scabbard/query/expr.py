"""Scalar expressions over a tuple: columns, literals, arithmetic, comparisons, boolean logic.

Expressions are small immutable trees.  They are typed against a schema at
query-build time (:meth:`Expr.dtype`), so a bad reference or a type mismatch
fails when the query is written, with a message naming the problem - not when
the engine runs.  Backends translate them: the numba code generator
(``scabbard.kernels.codegen``) to Python source, the Spark backend to Columns.

Types: the schema's (int32, int64, uint32, float32, float64, uuid) plus bool.
Arithmetic on integers yields int64, with any float float64; ``/`` always float64;
``//`` and ``%`` of integers int64 (floor semantics).  A coded column (one with
``categories``) compares with its category names: ``col("event_type") == "view"``.
"""

from __future__ import annotations

from dataclasses import dataclass

from scabbard.errors import UserError
from scabbard.schema import Schema

INT_TYPES = frozenset({"int32", "int64", "uint32"})
FLOAT_TYPES = frozenset({"float32", "float64"})
NUMERIC = INT_TYPES | FLOAT_TYPES


class QueryError(UserError, ValueError):
    """A query is malformed: unknown column, type mismatch, bad window..."""


class Expr:
    """Base of expression nodes; operators build trees."""

    # -- typing -----------------------------------------------------------------------------
    def dtype(self, schema: Schema) -> str:
        raise NotImplementedError

    def columns(self) -> set[str]:
        """Names of the columns this expression reads."""
        raise NotImplementedError

    # -- building ---------------------------------------------------------------------------
    def _bin(self, op: str, other, swap: bool = False) -> Expr:
        other = other if isinstance(other, Expr) else Lit(other)
        return BinOp(op, other, self) if swap else BinOp(op, self, other)

    def __add__(self, o):
        return self._bin("+", o)

    def __radd__(self, o):
        return self._bin("+", o, True)

    def __sub__(self, o):
        return self._bin("-", o)

    def __rsub__(self, o):
        return self._bin("-", o, True)

    def __mul__(self, o):
        return self._bin("*", o)

    def __rmul__(self, o):
        return self._bin("*", o, True)

    def __truediv__(self, o):
        return self._bin("/", o)

    def __rtruediv__(self, o):
        return self._bin("/", o, True)

    def __floordiv__(self, o):
        return self._bin("//", o)

    def __mod__(self, o):
        return self._bin("%", o)

    def __eq__(self, o):  # type: ignore[override]
        return Cmp("==", self, o if isinstance(o, Expr) else Lit(o))

    def __ne__(self, o):  # type: ignore[override]
        return Cmp("!=", self, o if isinstance(o, Expr) else Lit(o))

    def __lt__(self, o):
        return Cmp("<", self, o if isinstance(o, Expr) else Lit(o))

    def __le__(self, o):
        return Cmp("<=", self, o if isinstance(o, Expr) else Lit(o))

    def __gt__(self, o):
        return Cmp(">", self, o if isinstance(o, Expr) else Lit(o))

    def __ge__(self, o):
        return Cmp(">=", self, o if isinstance(o, Expr) else Lit(o))

    def __and__(self, o):
        return BoolOp("and", (self, o))

    def __or__(self, o):
        return BoolOp("or", (self, o))

    def __invert__(self):
        return Not(self)

    def __hash__(self) -> int:
        return hash(repr(self))

    def __bool__(self) -> bool:
        raise QueryError(
            "an expression has no truth value; combine conditions with & | ~, not and/or/not"
        )


@dataclass(frozen=True, eq=False)
class Col(Expr):
    name: str

    def dtype(self, schema: Schema) -> str:
        if self.name not in schema:
            raise QueryError(
                f"unknown column {self.name!r} (available: {', '.join(schema.names)})"
            )
        return schema.field(self.name).dtype

    def columns(self) -> set[str]:
        return {self.name}

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, eq=False)
class Lit(Expr):
    value: int | float | str | bool

    def __post_init__(self) -> None:
        if not isinstance(self.value, int | float | str | bool):
            raise QueryError(f"literal {self.value!r} is not a number, string or bool")

    def dtype(self, schema: Schema) -> str:
        if isinstance(self.value, bool):
            return "bool"
        if isinstance(self.value, int):
            return "int64"
        if isinstance(self.value, float):
            return "float64"
        return "str"

    def columns(self) -> set[str]:
        return set()

    def __repr__(self) -> str:
        return repr(self.value)


_ARITH = {"+", "-", "*", "/", "//", "%"}


@dataclass(frozen=True, eq=False)
class BinOp(Expr):
    op: str
    left: Expr
    right: Expr

    def dtype(self, schema: Schema) -> str:
        lt, rt = self.left.dtype(schema), self.right.dtype(schema)
        for side, t in (("left", lt), ("right", rt)):
            if t not in NUMERIC:
                raise QueryError(f"arithmetic {self!r}: {side} operand is {t}, not a number")
        if self.op == "/":
            return "float64"
        if lt in FLOAT_TYPES or rt in FLOAT_TYPES:
            return "float64"
        return "int64"

    def columns(self) -> set[str]:
        return self.left.columns() | self.right.columns()

    def __repr__(self) -> str:
        return f"({self.left!r} {self.op} {self.right!r})"


@dataclass(frozen=True, eq=False)
class Cmp(Expr):
    op: str
    left: Expr
    right: Expr

    def resolved(self, schema: Schema) -> Cmp:
        """This comparison with category names replaced by their codes."""
        left, right = self.left, self.right
        for a, b, flip in ((left, right, False), (right, left, True)):
            if isinstance(a, Col) and isinstance(b, Lit) and isinstance(b.value, str):
                f = schema.field(a.name) if a.name in schema else None
                if f is None or not f.categories:
                    continue
                if b.value not in f.categories:
                    raise QueryError(
                        f"{a.name!r} has no category {b.value!r} (categories: "
                        f"{', '.join(f.categories)})"
                    )
                code = Lit(f.categories.index(b.value))
                return Cmp(self.op, code, a) if flip else Cmp(self.op, a, code)
        return self

    def dtype(self, schema: Schema) -> str:
        r = self.resolved(schema)
        lt, rt = r.left.dtype(schema), r.right.dtype(schema)
        if lt in NUMERIC and rt in NUMERIC:
            return "bool"
        if lt == rt == "uuid" and self.op in ("==", "!="):
            return "bool"
        raise QueryError(f"cannot compare {r.left!r} ({lt}) {self.op} {r.right!r} ({rt})")

    def columns(self) -> set[str]:
        return self.left.columns() | self.right.columns()

    def __repr__(self) -> str:
        return f"({self.left!r} {self.op} {self.right!r})"


@dataclass(frozen=True, eq=False)
class BoolOp(Expr):
    op: str  # "and" | "or"
    args: tuple[Expr, ...]

    def dtype(self, schema: Schema) -> str:
        for a in self.args:
            if a.dtype(schema) != "bool":
                raise QueryError(f"{self.op} needs conditions, got {a!r}")
        return "bool"

    def columns(self) -> set[str]:
        return set().union(*(a.columns() for a in self.args))

    def __repr__(self) -> str:
        return "(" + f" {self.op} ".join(repr(a) for a in self.args) + ")"


@dataclass(frozen=True, eq=False)
class Not(Expr):
    arg: Expr

    def dtype(self, schema: Schema) -> str:
        if self.arg.dtype(schema) != "bool":
            raise QueryError(f"not needs a condition, got {self.arg!r}")
        return "bool"

    def columns(self) -> set[str]:
        return self.arg.columns()

    def __repr__(self) -> str:
        return f"(not {self.arg!r})"


def col(name: str) -> Col:
    """A reference to column ``name``."""
    return Col(name)


def lit(value) -> Lit:
    return Lit(value)


def as_expr(x) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, str):
        return Col(x)
    return Lit(x)


def resolve(expr: Expr, schema: Schema) -> Expr:
    """``expr`` with category names in comparisons replaced by codes (for backends)."""
    if isinstance(expr, Cmp):
        r = expr.resolved(schema)
        return Cmp(r.op, resolve(r.left, schema), resolve(r.right, schema))
    if isinstance(expr, BinOp):
        return BinOp(expr.op, resolve(expr.left, schema), resolve(expr.right, schema))
    if isinstance(expr, BoolOp):
        return BoolOp(expr.op, tuple(resolve(a, schema) for a in expr.args))
    if isinstance(expr, Not):
        return Not(resolve(expr.arg, schema))
    return expr
