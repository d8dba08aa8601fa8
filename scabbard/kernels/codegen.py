"""Code generation of fused front-end kernels: select, project and relation join in one loop.

A query's stateless prefix - σ predicates, π expressions, ⋈ probes of static
relations - becomes one numba function that reads the input columns once and
writes, for every surviving tuple, its timestamp, group-key values and
aggregate inputs into compact arrays (the paper's fused operator code, §4.1,
generated as LightSaber does, but as Python source compiled by numba).

The source is written to ``<cache_dir>/front_<hash>.py`` and imported from
there, so numba's on-disk cache keys on a real file: a restarted engine loads
the compiled machine code instead of recompiling (the paper's persisted
binaries, §3.2).  The planner (``scabbard.engine.physical``) turns expressions
into the code strings; this module only assembles and loads them.

Numba's cache checks the file a kernel is defined in, not the code it calls or the types it
takes (a relation's :class:`~scabbard.kernels.hashtable.KeyTable`).  So the source names the
kernels package it was generated against (:func:`kernels_digest`, a hash of its files): after
any change to the kernels, every generated kernel is another file, compiled afresh - never
code compiled against an older package, nor a cache index an older package cannot read.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

_LOADED: dict[str, object] = {}
_KERNELS = Path(__file__).parent
_LOADING = threading.Lock()  # the workers of one engine may ask for the same kernel at once


@dataclass(frozen=True)
class FrontSpec:
    """What the generated kernel computes.

    ``columns``: input arrays ``c_<name>`` (uuid columns are (n, 2) arrays).
    ``relations``: per joined relation, the names of its arrays ``r<j>_<col>`` used.
    ``steps``: in order, ``("filter", code)`` or ``("join", j, (key code, ...))``; a join
    binds ``j<j>``, the matching relation row, for later code.
    ``keys`` / ``ints`` / ``floats``: code of each output column.
    ``index``: ``out_ts`` receives each surviving tuple's row number in the batch instead of
    its timestamp (a stateless query gathers its plain columns by it).
    ``gather``: the kernel reads the rows whose numbers its argument ``rows`` lists (``n`` of
    them), in that order - a partition of the dataflow reads its rows of a batch in place,
    never copied out first.
    """

    columns: tuple[str, ...]
    relations: tuple[tuple[str, ...], ...]
    steps: tuple[tuple, ...]
    keys: tuple[str, ...]
    ints: tuple[str, ...]
    floats: tuple[str, ...]
    index: bool = False
    gather: bool = False
    # the partitioned dataflow's routing kernel: the keys are hashed, not written out
    # (:func:`scabbard.kernels.assembler.route_part`'s hash), and each row's partition is
    # written to ``out_parts`` (uint8; ``ROUTE_SKIP`` where a selection drops the row) - no
    # key matrix written and read back; :func:`~scabbard.kernels.assembler.scatter_rows`
    # then lists each partition's rows
    route: bool = False
    # the instrumented variant (Grizzly): counts into ``prof`` how many rows reach
    # each run of consecutive filters (``prof[2 * f]``, at its first filter ``f``) and pass
    # each filter on its own (``prof[2 * f + 1]``: every filter of a run is evaluated, so
    # each one's selectivity is measured whatever the order)
    profile: bool = False
    # constants folded (Grizzly's optimised variant): ``(column, dtype, value)`` of
    # integer columns the profile saw constant - every use reads the literal, and a guard at
    # the top of the loop returns -1 (deoptimisation) on a row where the column differs
    consts: tuple[tuple[str, str, int], ...] = ()

    def folded(self, consts: tuple[tuple[str, str, int], ...]) -> FrontSpec:
        """The same kernel with ``consts`` folded into its code (see ``consts``)."""
        def fold(code: str) -> str:
            for c, dtype, v in consts:
                code = code.replace(f"c_{c}[i]", f"np.{dtype}({v})")
            return code
        if any(c not in self.columns for c, _, _ in consts):
            raise ValueError(f"folded columns {consts} not among the kernel's {self.columns}")
        steps = tuple(("filter", fold(st[1])) if st[0] == "filter"
                      else (st[0], st[1], tuple(fold(k) for k in st[2])) for st in self.steps)
        return dataclasses.replace(
            self, steps=steps, keys=tuple(map(fold, self.keys)), ints=tuple(map(fold, self.ints)),
            floats=tuple(map(fold, self.floats)), consts=self.consts + tuple(consts))

    def runs(self) -> list[list[int]]:
        """The runs of consecutive filters (indices into ``steps``), which may be reordered
        among themselves: a join between two runs binds what the later one may read."""
        out, cur = [], []
        for k, step in enumerate(self.steps):
            if step[0] == "filter":
                cur.append(k)
            elif cur:
                out.append(cur)
                cur = []
        return out + ([cur] if cur else [])

    def reordered(self, order: list[int]) -> FrontSpec:
        """The same kernel with its filters in ``order`` (a permutation of the filter steps'
        indices that keeps each run of consecutive filters in its place)."""
        runs = self.runs()
        if sorted(order) != sorted(k for r in runs for k in r):
            raise ValueError(f"not a permutation of the filters: {order}")
        steps, it = list(self.steps), iter(order)
        for r in runs:
            picked = [next(it) for _ in r]
            if sorted(picked) != r:
                raise ValueError(f"filters {picked} moved across a join")
            for k, src in zip(r, picked, strict=True):
                steps[k] = self.steps[src]
        return dataclasses.replace(self, steps=tuple(steps))

    def inputs(self) -> list[str]:
        """The kernel's leading arguments: rows, timestamps, columns, relations."""
        args = ["n", *(["rows"] if self.gather else []), "ts",
                *(f"c_{c}" for c in self.columns)]
        for j, cols in enumerate(self.relations):
            args.append(f"rt_{j}")
            args.extend(f"r{j}_{c}" for c in cols)
        return args

    def source(self) -> str:
        if self.route:
            return self._route_source()
        args = self.inputs() + ["out_ts", "out_keys", "out_i", "out_f"] \
            + (["prof"] if self.profile else [])
        if self.index and not (self.gather or self.profile or self.consts or self.keys or self.ints
                               or self.floats) and self.steps \
                and all(st[0] == "filter" for st in self.steps):
            # filters alone, row numbers out: every row's number written, the count moved
            # on by the predicate - no branch to mispredict (at selectivity 1/3 the branch
            # cost 2.9 ns a row here, this 0.8, numpy's mask and its nonzero rows 1.3)
            keep = " and ".join(f"({st[1]})" for st in self.steps)
            body = ["    m = 0", "    for i in range(n):", "        out_ts[m] = i",
                    f"        m += 1 if {keep} else 0", "    return m"]
            return _module("front", args, body)
        loop = ["    for r in range(n):", "        i = rows[r]"] if self.gather \
            else ["    for i in range(n):"]
        body = ["    m = 0", *loop, *self.step_lines()]
        body.append("        out_ts[m] = i" if self.index else "        out_ts[m] = ts[i]")
        body += [f"        out_keys[m, {k}] = np.int64({c})" for k, c in enumerate(self.keys)]
        body += [f"        out_i[m, {k}] = np.int64({c})" for k, c in enumerate(self.ints)]
        body += [f"        out_f[m, {k}] = np.float64({c})" for k, c in enumerate(self.floats)]
        body += ["        m += 1", "    return m"]
        return _module("front", args, body)

    def _route_source(self) -> str:
        if self.gather or self.profile or self.ints or self.floats or not self.keys:
            raise ValueError("a routing kernel reads every row, and hashes keys only")
        from scabbard.kernels.assembler import ROUTE_SKIP

        # each row's partition (a row the selections drop: ROUTE_SKIP), no list written:
        # without a selection a loop the compiler vectorises; assembler.scatter_rows then
        # writes each partition's row numbers
        skip = [f"        out_parts[i] = np.uint8({ROUTE_SKIP})"] if self.steps else []
        body = ["    m = 0", "    for i in range(n):", *skip, *self.step_lines(),
                "        h = np.uint64(SEED)",
                *(f"        h = route_mix(h, np.int64({c}))" for c in self.keys),
                "        out_parts[i] = np.uint8(route_part(h, parts))", "        m += 1",
                "    return m"]
        return _module("front", self.inputs() + ["parts", "out_parts"], body,
                       ("from scabbard.kernels.assembler import route_mix, route_part",
                        "from scabbard.kernels.hashtable import SEED"))

    def step_lines(self, fail: tuple[str, ...] = ("return -1",),
                   probes: tuple[str, str] = ("probe1", "probe2")) -> list[str]:
        """The loop body's filters and probes (``probes``: the functions probing a relation
        by one key word, by two): a row that fails one is skipped; first the guards of the
        folded constants, which run ``fail`` on a row that breaks one."""
        body = []
        for c, dtype, v in self.consts:
            body += [f"        if c_{c}[i] != np.{dtype}({v}):",
                     *(f"            {line}" for line in fail)]
        firsts = {r[0]: r for r in self.runs()} if self.profile else {}
        for k, step in enumerate(self.steps):
            if step[0] == "filter" and k in firsts:  # a run, every filter evaluated
                r = firsts[k]
                body.append(f"        prof[{2 * k}] += 1")
                for f in r:
                    body += [f"        p{f} = ({self.steps[f][1]})",
                             f"        if p{f}:", f"            prof[{2 * f + 1}] += 1"]
                body += [f"        if not ({' and '.join(f'p{f}' for f in r)}):",
                         "            continue"]
            elif step[0] == "filter":
                if not self.profile:
                    body += [f"        if not ({step[1]}):", "            continue"]
            else:
                _, j, key = step
                probe = probes[0] if len(key) == 1 else probes[1]
                keyargs = ", ".join(f"np.int64({k})" for k in key)
                body += [f"        j{j} = {probe}(rt_{j}, {keyargs})",
                         f"        if j{j} < 0:", "            continue"]
        return body

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.source().encode()).hexdigest()[:20]


@functools.cache
def kernels_digest() -> str:
    """A hash of the kernels package's source files (what generated code compiles against)."""
    h = hashlib.sha256()
    for f in sorted(_KERNELS.glob("*.py")):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _module(name: str, args: list[str], body: list[str], imports: tuple[str, ...] = ()) -> str:
    return "\n".join([
        '"""Generated by scabbard.kernels.codegen - do not edit."""',
        f"# compiled against scabbard.kernels {kernels_digest()}",
        "import numpy as np",
        "from scabbard.kernels._jit import scan",
        *imports,
        "from scabbard.kernels.join import (  # noqa: F401",
        "    probe1, probe2, probe_inline1, probe_inline2,",
        ")",
        "",
        "",
        "@scan",
        f"def {name}({', '.join(args)}):",
        *body,
        "",
    ])


SUM, MIN, MAX = 0, 1, 2  # as scabbard.kernels.aggregate's
# rows a fused kernel selects by its leading filters at a time, into its argument ``sel``
# (its caller's: a kernel of the hot loop allocates nothing)
BLOCK = 1024


@dataclass(frozen=True)
class DenseSpec:
    """The optimised variant of a branch's fragment (Grizzly): its front kernel fused
    with the per-pane aggregation into a dense array - no rows written out and read back, no
    hash, the aggregate operations and the key range compiled in as constants.

    The group of a row is ``sum((key_j - lo_j) * stride_j)``; a key outside
    ``[lo_j, lo_j + span_j)`` fails the guard: the kernel stops and returns -1 (the caller
    runs the generic kernels on the task).  Otherwise it writes the task's pane partials as
    :func:`scabbard.kernels.aggregate.pane_aggregate` does, row for row (group ids in order of
    first appearance), and returns their number; ``res[0]`` is the group count.  A row's
    event time is ``ts[i] + shift`` (``shift``: the argument after the front's and ``rc`` - a
    replayed copy's, deferred as the generic fragment defers it).  Its joins probe each
    relation's :class:`~scabbard.kernels.join.InlineIndex` (passed where the front takes the
    relation's index), and its leading filters select a block of rows before the rest runs
    on them (:meth:`_leading_filters`)."""

    front: FrontSpec
    iops: tuple[int, ...]
    fops: tuple[int, ...]
    slide: int
    lo: tuple[int, ...]
    span: tuple[int, ...]
    # the group keys are columns of joined relation ``coded``'s matching row (YSB's campaign
    # of an ad): the group is that row's code ``rc[j<coded>]`` (an argument after the front's,
    # one code per distinct key of the relation) in ``[lo[0], lo[0] + span[0])``, and the key
    # words are read only for a group's first row
    coded: int | None = None

    @staticmethod
    def _fold(op: int, acc: str, v: str) -> str:
        if op == SUM:
            return f"{acc} = {acc} + {v}"
        return f"{acc} = {acc} if {acc} {'<' if op == MIN else '>'} {v} else {v}"

    def source(self) -> str:
        f = self.front
        args = f.inputs() + (["rc"] if self.coded is not None else []) + ["shift"] \
            + ["gid_of", "group_keys", "acc_c", "acc_i", "acc_f", "touched", "o_pane", "o_gid",
               "o_cnt", "o_i", "o_f", "res", "sel"]
        ni, nf = len(self.iops), len(self.fops)
        flush = ["            for t in range(nt):", "                d = touched[t]",
                 "                o_pane[m] = pane", "                o_gid[m] = gid_of[d]",
                 "                o_cnt[m] = acc_c[d]",
                 *(f"                o_i[m, {j}] = acc_i[d, {j}]" for j in range(ni)),
                 *(f"                o_f[m, {j}] = acc_f[d, {j}]" for j in range(nf)),
                 "                acc_c[d] = 0", "                m += 1"]
        head, rest = self._leading_filters()
        body = ["    m = 0", "    groups = 0", "    nt = 0", "    pane = -9223372036854775808",
                "    for i in range(n):",
                *rest.step_lines(("res[0] = groups", "return -1"),
                                 ("probe_inline1", "probe_inline2")),
                f"        p = (ts[i] + shift) // {self.slide}",
                "        if p != pane:", *flush, "            nt = 0", "            pane = p"]
        guard = ["            res[0] = groups", "            return -1"]
        if self.coded is not None:  # the joined row's code; its key words once per group
            body += [f"        d = rc[j{self.coded}] - {self.lo[0]}",
                     f"        if d < 0 or d >= {self.span[0]}:", *guard,
                     "        if gid_of[d] < 0:", "            gid_of[d] = groups",
                     *(f"            group_keys[groups, {j}] = np.int64({code})"
                       for j, code in enumerate(f.keys)),
                     "            groups += 1"]
        else:
            index = "0"
            for j, code in enumerate(f.keys):
                body += [f"        k{j} = np.int64({code})", f"        x{j} = k{j} - {self.lo[j]}",
                         f"        if x{j} < 0 or x{j} >= {self.span[j]}:", *guard]
                index = f"x{j}" if j == 0 else f"({index}) * {self.span[j]} + x{j}"
            body += [f"        d = {index}", "        if gid_of[d] < 0:",
                     "            gid_of[d] = groups",
                     *(f"            group_keys[groups, {j}] = k{j}" for j in range(len(f.keys))),
                     "            groups += 1"]
        body += [f"        vi{j} = np.int64({c})" for j, c in enumerate(f.ints)]
        body += [f"        vf{j} = np.float64({c})" for j, c in enumerate(f.floats)]
        fold = [*(f"            {self._fold(op, f'acc_i[d, {j}]', f'vi{j}')}"
                  for j, op in enumerate(self.iops)),
                *(f"            {self._fold(op, f'acc_f[d, {j}]', f'vf{j}')}"
                  for j, op in enumerate(self.fops))]
        body += ["        if acc_c[d] == 0:", "            touched[nt] = d", "            nt += 1",
                 *(f"            acc_i[d, {j}] = vi{j}" for j in range(ni)),
                 *(f"            acc_f[d, {j}] = vf{j}" for j in range(nf)),
                 *(["        else:", *fold] if fold else []),
                 "        acc_c[d] += 1"]
        if head:  # the leading filters first, a block of rows at a time, with no branch
            loop = body.index("    for i in range(n):")
            body[loop:] = [f"    for base in range(0, n, {BLOCK}):",
                           f"        end = min(n, base + {BLOCK})", "        ns = 0",
                           "        for i in range(base, end):", "            sel[ns] = i",
                           f"            ns += 1 if {head} else 0",
                           "        for s in range(ns):", "            i = sel[s]",
                           *("    " + line for line in body[loop + 1:])]
        body += [*(line[8:] for line in flush), "    res[0] = groups", "    return m"]
        return _module("fused", args, body)

    def _leading_filters(self) -> tuple[str, FrontSpec]:
        """The filters before the front's first join, as one condition, and the front
        without them: a fused kernel selects a block's rows by them first, writing every
        row's number and moving the count on by the condition - no branch to mispredict
        (YSB's event type passes a third of the rows, in no order) - then runs the rest on
        the rows selected.  ("", the front) when there are none, or the front profiles or
        guards folded constants (their per-row bookkeeping stays in the one loop)."""
        f = self.front
        k = 0
        while k < len(f.steps) and f.steps[k][0] == "filter":
            k += 1
        if k == 0 or f.profile or f.consts:
            return "", f
        head = " and ".join(f"({st[1]})" for st in f.steps[:k])
        return f"({head})", dataclasses.replace(f, steps=f.steps[k:])

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.source().encode()).hexdigest()[:20]


def compile_front(spec: FrontSpec | DenseSpec, cache_dir: Path):
    """The compiled kernel for ``spec`` (generated once per cache folder, cached by numba)."""
    key = spec.digest
    if key in _LOADED:
        return _LOADED[key]
    with _LOADING:
        if key not in _LOADED:
            _LOADED[key] = _load(spec, key, cache_dir)
    return _LOADED[key]


def _load(spec: FrontSpec | DenseSpec, key: str, cache_dir: Path):
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    kind = "front" if isinstance(spec, FrontSpec) else "fused"
    path = cache_dir / f"{kind}_{key}.py"
    source = spec.source()
    if not path.is_file() or path.read_text() != source:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, path)
    name = f"scabbard_generated_{kind}_{key}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    module_spec.loader.exec_module(module)
    return getattr(module, kind)
