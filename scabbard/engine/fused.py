"""The optimised variant's fused dense kernel on a task (:mod:`scabbard.engine.adaptive`), and
the relation codes a branch whose keys come from a joined relation is indexed by."""

from __future__ import annotations

import re

import numpy as np

from scabbard.kernels.codegen import BLOCK
from scabbard.kernels.hashtable import KeyTable
from scabbard.kernels.join import InlineIndex, inline_index

_RELATION_KEY = re.compile(r"^r(\d+)_(\w+)\[j(\d+)(?:, ([01]))?\]$")


class RelationCodes:
    """The codes of a branch whose group keys are all columns of one joined relation's
    matching row (YSB: the campaign of an ad): one code per distinct key of the relation, in
    order of its first row, and each row's code (``codes``, what a dense array is indexed by
    when the key's own words span too much for one - a uuid's do)."""

    def __init__(self, relation: int, codes: np.ndarray, keys: np.ndarray):
        self.relation, self.codes = relation, codes
        self._code_of = {tuple(int(w) for w in k): c for c, k in enumerate(keys)}

    @classmethod
    def of_branch(cls, spec, rel_args: tuple) -> RelationCodes | None:
        """The codes of the relation ``spec``'s keys all come from (None: they do not, or the
        relation is empty); ``rel_args``: the front kernel's relation arguments."""
        found = [_RELATION_KEY.match(k) for k in spec.keys]
        if not found or not all(found) or any(m[1] != m[3] for m in found) \
                or len({m[1] for m in found}) != 1:
            return None
        j = int(found[0][1])
        at = sum(1 + len(cols) for cols in spec.relations[:j]) + 1  # past the index
        names = spec.relations[j]
        words = []
        for m in found:
            arr = np.asarray(rel_args[at + names.index(m[2])])
            words.append(arr[:, int(m[4])] if m[4] is not None else arr)
        keys = np.stack([np.asarray(w, np.int64) for w in words], axis=1)
        if not len(keys):
            return None
        distinct, first, inverse = np.unique(keys, axis=0, return_index=True,
                                             return_inverse=True)
        order = np.argsort(first, kind="stable")
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order))
        return cls(j, np.ascontiguousarray(rank[inverse.reshape(-1)]), distinct[order])

    def __len__(self) -> int:
        return len(self._code_of)

    def range_of(self, group_keys: np.ndarray) -> tuple[int, int] | None:
        """The smallest and largest code of a task's groups (their key words, one row each;
        None: no group)."""
        codes = [self._code_of.get(tuple(int(w) for w in k), -1) for k in group_keys]
        codes = [c for c in codes if c >= 0]
        return (min(codes), max(codes)) if codes else None


_INLINE: dict[int, tuple] = {}  # id of a relation's index -> (the index, its InlineIndex)


def _inline(index: KeyTable) -> InlineIndex:
    """The :class:`~scabbard.kernels.join.InlineIndex` of a relation's index, made once (a
    relation's index lives as long as its engine; the entries made last are kept)."""
    got = _INLINE.get(id(index))
    if got is None or got[0] is not index:
        if len(_INLINE) >= 64:
            _INLINE.clear()
        got = _INLINE[id(index)] = (index, inline_index(index))
    return got[1]


def fused_args(plan, rel_args: tuple, codes: RelationCodes | None) -> tuple:
    """The relation arguments of ``plan``'s fused kernel: the front's, each relation's index
    as the inline index the fused kernel probes, then the relation codes it is indexed by
    (if it is)."""
    args = tuple(_inline(a) if isinstance(a, KeyTable) else a for a in rel_args)
    return args if plan.coded is None else (*args, codes.codes)


def run_fused(kernel, b, plan, n: int, times: tuple, inputs: tuple, rel_args: tuple):
    """The fused optimised kernel (:class:`~scabbard.kernels.codegen.DenseSpec`) on one task
    (``times``: its timestamps and their shift; ``rel_args``: its relation arguments,
    :func:`fused_args`): its pane partials, as
    :func:`~scabbard.kernels.aggregate.pane_aggregate` returns them, or None if a key failed
    the guard."""
    ts, shift = times  # event times: ts + shift
    size = int(np.prod(plan.span))
    k, ni, nf = b.key_width, len(b.iops), len(b.fops)
    panes = (int(ts[n - 1]) + shift) // b.slide_ms - (int(ts[0]) + shift) // b.slide_ms + 1 \
        if n else 1
    out = max(1, min(n, size * panes))  # a partial per (pane, group) at most
    gid_of = np.full(size, -1, dtype=np.int64)
    group_keys = np.empty((min(size, max(n, 1)), k), dtype=np.int64)
    parts = (np.empty(out, np.int64), np.empty(out, np.int64), np.empty(out, np.int64),
             np.empty((out, ni), np.int64), np.empty((out, nf), np.float64))
    res = np.zeros(1, dtype=np.int64)
    m = kernel(n, ts, *inputs, *rel_args, np.int64(shift), gid_of, group_keys,
               np.zeros(size, np.int64), np.empty((size, ni), np.int64),
               np.empty((size, nf), np.float64), np.empty(size, np.int64), *parts, res,
               np.empty(BLOCK, np.int64))
    if m < 0:
        return None
    return (*(x[:m] for x in parts), group_keys[:res[0]].copy())
