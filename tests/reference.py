"""Slow, obviously correct references (pandas/numpy) for kernels, operators and whole queries.

``evaluate(query, columns, relations)`` computes a query's window results straight
from the definition: every tuple belongs to the ``range/slide`` windows that
contain its pane; a window's aggregate is the aggregate of its tuples.  (Tuples
are first summed per pane, which is exact for count/sum/min/max, so that big
windows stay cheap.)  A count-based window's "time" is the tuple's position in the
input (the frames' index: row ``i`` of ``columns`` is offset ``first + i``); a stateless
query's result is its surviving rows, in input order.  Nothing here shares code with the
engine.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from scabbard.query.expr import BinOp, BoolOp, Cmp, Col, Lit, Not
from scabbard.query.plan import (
    Filter,
    Having,
    KeepMax,
    PerWindowAggregate,
    Project,
    RelationJoin,
    Source,
    WindowAggregate,
    WindowJoin,
)


def to_frame(schema, columns) -> pd.DataFrame:
    """Columns -> DataFrame; uuids become 16-byte ``bytes`` (hashable, comparable)."""
    data = {}
    for f, c in zip(schema.fields, columns, strict=True):
        c = np.asarray(c)
        data[f.name] = [bytes(x) for x in np.ascontiguousarray(c).view("V16").ravel()] \
            if f.dtype == "uuid" else c
    return pd.DataFrame(data)


def _value(expr, df: pd.DataFrame, schema):
    if isinstance(expr, Col):
        return df[expr.name]
    if isinstance(expr, Lit):
        return expr.value
    if isinstance(expr, BinOp):
        a, b = _value(expr.left, df, schema), _value(expr.right, df, schema)
        if expr.op == "+":
            return a + b
        if expr.op == "-":
            return a - b
        if expr.op == "*":
            return a * b
        if expr.op == "/":
            return a / b
        if expr.op == "//":
            return a // b
        return a % b
    if isinstance(expr, Cmp):
        r = expr.resolved(schema)
        a, b = _value(r.left, df, schema), _value(r.right, df, schema)
        return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b,
                ">=": a >= b}[expr.op]
    if isinstance(expr, BoolOp):
        out = _value(expr.args[0], df, schema)
        for x in expr.args[1:]:
            v = _value(x, df, schema)
            out = (out & v) if expr.op == "and" else (out | v)
        return out
    if isinstance(expr, Not):
        return ~_value(expr.arg, df, schema)
    raise TypeError(expr)


def _aggregate(df: pd.DataFrame, group: list[str], aggs, schema) -> pd.DataFrame:
    work = df[group].copy()
    named = {}
    for a in aggs:
        if a.fn == "count":
            work["__one"] = 1
            named[a.name] = ("__one", "sum")
        else:
            col = f"__in_{a.name}"
            v = _value(a.expr, df, schema)
            work[col] = v.astype("float64" if "float" in a.input_dtype(schema) else "int64")
            if a.fn == "avg":
                work["__n_" + a.name] = 1
                named["__s_" + a.name] = (col, "sum")
                named["__c_" + a.name] = ("__n_" + a.name, "sum")
            else:
                named[a.name] = (col, a.fn)
    out = work.groupby(group, sort=False, dropna=False).agg(**named).reset_index()
    for a in aggs:
        if a.fn == "avg":
            out[a.name] = out.pop("__s_" + a.name) / out.pop("__c_" + a.name)
    return out


def _mask(predicate, df: pd.DataFrame, schema) -> np.ndarray:
    """A condition's value per row (a literal ``True``/``False`` for every row)."""
    return np.broadcast_to(np.asarray(_value(predicate, df, schema), dtype=bool), (len(df),))


def evaluate(node, columns: dict, relations: dict, first: int = 0) -> pd.DataFrame:
    """Window results of a plan over ``columns`` (name -> array) of its source, whose first
    row is the stream's offset ``first``."""
    if isinstance(node, Source):
        df = to_frame(node.schema, [columns[n] for n in node.schema.names])
        df.index = pd.RangeIndex(first, first + len(df))  # each tuple's offset
        return df
    if isinstance(node, Filter):
        df = evaluate(node.input, columns, relations, first)
        return df[_mask(node.predicate, df, node.input.schema)]
    if isinstance(node, Project):
        df = evaluate(node.input, columns, relations, first)
        out = pd.DataFrame({"timestamp": df["timestamp"]})
        for name, e in node.columns:
            out[name] = _value(e, df, node.input.schema)
        return out
    if isinstance(node, RelationJoin):
        df = evaluate(node.input, columns, relations, first)
        rel = relations[node.relation.name]
        rdf = to_frame(rel.schema, rel.columns)[[node.right, *node.columns]]
        rdf = rdf.rename(columns={node.right: "__rkey"})
        out = (df.assign(__offset=df.index)
               .merge(rdf, left_on=node.left, right_on="__rkey", how="inner")
               .drop(columns="__rkey").set_index("__offset").sort_index(kind="stable"))
        out.index.name = None
        return out
    if isinstance(node, WindowAggregate):
        df = evaluate(node.input, columns, relations, first)
        schema = node.input.schema
        keys = []
        axis = df.index.to_numpy() if node.window.rows else df["timestamp"].to_numpy()
        base = pd.DataFrame({"__pane": axis // node.window.slide_ms})
        for name, e in node.keys:
            base[name] = np.asarray(_value(e, df, schema))
            keys.append(name)
        for c in df.columns:
            if c not in base:
                base[c] = df[c].to_numpy()
        # every tuple copied into each of its windows: copy r ends r panes after its own
        n, panes = len(base), node.window.panes
        exploded = pd.DataFrame({c: np.tile(base[c].to_numpy(), panes) for c in base.columns})
        exploded["window_end"] = (exploded["__pane"].to_numpy() + 1
                                  + np.repeat(np.arange(panes), n)) * node.window.slide_ms
        out = _aggregate(exploded, ["window_end", *keys], node.aggs, schema)
        out.insert(0, "window_start", out["window_end"] - node.window.range_ms)
        return out[list(node.schema.names)]
    if isinstance(node, Having):
        df = evaluate(node.input, columns, relations, first)
        return df[_mask(node.predicate, df, node.input.schema)]
    if isinstance(node, KeepMax):
        df = evaluate(node.input, columns, relations, first)
        peak = df.groupby("window_end")[node.column].transform("max")
        return df[df[node.column] == peak]
    if isinstance(node, PerWindowAggregate):
        df = evaluate(node.input, columns, relations, first)
        keys = []
        base = df[["window_start", "window_end"]].copy()
        for name, e in node.keys:
            base[name] = np.asarray(_value(e, df, node.input.schema))
            keys.append(name)
        for c in df.columns:
            if c not in base:
                base[c] = df[c]
        out = _aggregate(base, ["window_start", "window_end", *keys], node.aggs, node.input.schema)
        return out[list(node.schema.names)]
    if isinstance(node, WindowJoin):
        left = evaluate(node.left, columns, relations, first)
        right = evaluate(node.right, columns, relations, first).drop(columns="window_start")
        out = left.merge(right, on=["window_end", *node.on], how="inner")
        if node.predicate is not None:
            out = out[np.asarray(_value(node.predicate, out, node.schema), dtype=bool)]
        return out[list(node.schema.names)]
    raise TypeError(node)


def canonical(df: pd.DataFrame, schema) -> pd.DataFrame:
    """Rows sorted by window and every non-float column; uuids as bytes; fresh index."""
    df = df.copy()
    for f in schema.fields:
        if f.dtype == "uuid" and len(df) and not isinstance(df[f.name].iloc[0], bytes):
            df[f.name] = [bytes(np.asarray(x, dtype=np.uint64).view(np.uint8)) for x in df[f.name]]
    order = [f.name for f in schema.fields if "float" not in f.dtype]
    return df[list(schema.names)].sort_values(order, kind="stable").reset_index(drop=True)


def assert_same_results(got: pd.DataFrame, want: pd.DataFrame, schema, rtol: float = 1e-9):
    """Equal window results: exact for integers, relative ``rtol`` for floats."""
    got, want = canonical(got, schema), canonical(want, schema)
    assert len(got) == len(want), f"{len(got)} result rows, expected {len(want)}"
    for f in schema.fields:
        a, b = got[f.name].to_numpy(), want[f.name].to_numpy()
        if "float" in f.dtype:
            np.testing.assert_allclose(a.astype(float), b.astype(float), rtol=rtol, atol=0,
                                       err_msg=f.name)
        else:
            assert (a == b).all(), f"column {f.name} differs"


# -- kernel-level references ---------------------------------------------------------------------
_COMBINE = {0: "sum", 1: "min", 2: "max"}


def pane_partials(ts, keys, ivals, fvals, iops, fops, slide):
    """{(pane, key tuple): (count, int states, float states)} by plain Python."""
    out = {}
    for r in range(len(ts)):
        k = (int(ts[r]) // slide, tuple(int(x) for x in keys[r]))
        iv, fv = list(ivals[r]), list(fvals[r])
        if k not in out:
            out[k] = [1, iv, fv]
            continue
        st = out[k]
        st[0] += 1
        for j, op in enumerate(iops):
            st[1][j] = _apply(op, st[1][j], iv[j])
        for j, op in enumerate(fops):
            st[2][j] = _apply(op, st[2][j], fv[j])
    return out


def _apply(op, a, b):
    return a + b if op == 0 else (min(a, b) if op == 1 else max(a, b))


def windows(partials: dict, iops, fops, panes: int, slide: int, p_lo: int, p_hi: int):
    """{(window_end, key): (count, ints, floats)} for windows ending at panes p_lo..p_hi."""
    out = {}
    for (p, key), (c, iv, fv) in partials.items():
        for end_pane in range(p, p + panes):
            if not p_lo <= end_pane <= p_hi:
                continue
            k = ((end_pane + 1) * slide, key)
            if k not in out:
                out[k] = [c, list(iv), list(fv)]
                continue
            st = out[k]
            st[0] += c
            for j, op in enumerate(iops):
                st[1][j] = _apply(op, st[1][j], iv[j])
            for j, op in enumerate(fops):
                st[2][j] = _apply(op, st[2][j], fv[j])
    return out


def equi_join_pairs(lkeys, rkeys) -> list[tuple[int, int]]:
    """Row pairs with equal key rows, by nested loops: left order, then right order."""
    return [(i, j) for i in range(len(lkeys)) for j in range(len(rkeys))
            if tuple(lkeys[i]) == tuple(rkeys[j])]
