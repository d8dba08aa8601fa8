"""The dataflow's routing: which queries' groups can be routed from their input tuples
(:func:`check_routable`), the routing kernel generated for a query (:class:`Router`: its
selections and a hash of its group keys, one pass over a batch), and the number of
partitions worth running (:func:`plan_parts`).  See :mod:`scabbard.engine.dataflow`."""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property

import numpy as np

from scabbard.engine.frontcode import front, group_key_codes, inputs
from scabbard.kernels import assembler as ka
from scabbard.kernels import rows as kr
from scabbard.kernels.codegen import FrontSpec, compile_front
from scabbard.query.expr import QueryError
from scabbard.query.plan import Filter, Project, Source

SHORT_ROWS = np.iinfo(np.int32).max  # the longest batch whose row numbers route as int32


def check_routable(branch) -> None:
    """QueryError unless the branch's groups can be routed from its input tuples: keys
    computed by σ and π from source attributes (not a joined relation's), at least one, and
    every group's rows in one partition (a per-window count fused into the emission counts
    groups by some of their keys)."""
    node = branch.node
    if not node.keys:
        raise QueryError(f"{branch.id}: a global aggregate has one group: nothing to partition")
    at = node.input
    while not isinstance(at, Source):
        if not isinstance(at, Filter | Project):
            raise QueryError(f"{branch.id}: its groups' keys pass a {type(at).__name__}: a "
                             f"partitioned dataflow routes tuples by keys their own "
                             f"attributes give (selections and projections only)")
        at = at.input
    if branch.select[0] == kr.ROLLUP_COUNT:
        raise QueryError(f"{branch.id}: a per-window count over its groups is not "
                         f"partitioned by the groups' keys")


class Router:
    """A branch's routing kernel (see the module): its selections and its group keys, compiled
    by :func:`scabbard.kernels.codegen.compile_front` in index mode."""

    def __init__(self, branch, cache_dir, rows: bool = False):
        check_routable(branch)
        self.rows = rows  # count-based windows: a tuple's place on their axis is its offset
        node = branch.node
        f = front(node.input)
        keys = group_key_codes(node, f)
        self.columns, _ = inputs(f, node.input.source().schema, ("timestamp",))
        self.width = len(keys)
        self.spec = FrontSpec(self.columns, (), tuple(f.steps), tuple(keys), (), (),
                              index=True)
        self.cache_dir = cache_dir

    # each kernel compiled (or loaded from the cache) when first used: a run routes to one
    # partition or to several, and plans from the keys only where P is its to choose
    @cached_property
    def kernel(self):
        """The selections' row numbers and each tuple's group keys."""
        return compile_front(self.spec, self.cache_dir)

    @cached_property
    def routing(self):
        """Each row's partition, its keys hashed."""
        return compile_front(replace(self.spec, route=True), self.cache_dir)

    @cached_property
    def selecting(self):
        """One partition: the selections' row numbers alone - no keys, no hashing (None: no
        selection)."""
        return compile_front(replace(self.spec, keys=()), self.cache_dir) \
            if self.spec.steps else None

    def inputs(self, batch) -> list:
        """The kernels' leading arguments: the batch's tuple count, the windows' axis as the
        engine's front kernels get it (a replayed copy's shift deferred; count-based
        windows: input offsets), the columns."""
        ts = (np.arange(batch.offset, batch.end, dtype=np.int64) if self.rows
              else batch.event_time()[0])
        return [len(batch), ts, *(batch.column(c) for c in self.columns)]

    def keys(self, batch) -> tuple[np.ndarray, np.ndarray]:
        """The row numbers of the batch's tuples that pass the selections, and their group
        keys (an int64 matrix, a row a tuple)."""
        n = len(batch)
        idx, keys = np.empty(n, dtype=np.int64), np.empty((n, self.width), dtype=np.int64)
        m = self.kernel(*self.inputs(batch), idx, keys, np.empty((n, 0), np.int64),
                        np.empty((n, 0), np.float64))
        return idx[:m], keys[:m]

    def selected(self, batch) -> np.ndarray:
        """The row numbers of the batch's tuples that pass the selections."""
        if self.selecting is None:
            return np.arange(len(batch), dtype=np.int64)
        n = len(batch)
        idx, none = np.empty(n, dtype=np.int64), np.empty((n, 0), np.int64)
        m = self.selecting(*self.inputs(batch), idx, none, none, np.empty((n, 0), np.float64))
        return idx[:m]

    def loads(self, batch, most: int) -> list[float]:
        """For 1 to ``most`` partitions, the busiest one's share of the batch's tuples that
        pass the selections (1.0 where none does)."""
        return [max(shares) for shares in self.shares(batch, most)]

    def shares(self, batch, most: int) -> list[list[float]]:
        """For 1 to ``most`` partitions, each partition's share of the batch's tuples that
        pass the selections (all on the first where none does)."""
        idx, keys = self.keys(batch)
        if not len(idx):
            return [[1.0] + [0.0] * (p - 1) for p in range(1, most + 1)]
        return [(np.diff(ka.route_rows(idx, keys, p)[1]) / len(idx)).tolist()
                for p in range(1, most + 1)]

    def route(self, batch, parts: int) -> list[np.ndarray]:
        """Each partition's row numbers of ``batch`` (the tuples that pass the selections), in
        input order: the routing kernel gives each row's partition (those of
        :func:`~scabbard.kernels.assembler.route_rows`), then
        :func:`~scabbard.kernels.assembler.scatter_rows` lists them; one partition: the
        selections only."""
        if parts == 1:
            return [self.selected(batch)]
        if parts > ka.MOST_ROUTED:
            raise ValueError(f"a dataflow routes to at most {ka.MOST_ROUTED} partitions, "
                             f"not {parts}")
        # row numbers of 4 bytes where they fit: half the bytes written here and read by the
        # partitions (LRB1, 2 partitions: the routing's CPU in a run 3.9-5.7 -> 3.8-3.9 ns a
        # tuple, alone 3.8 either way; the run 37.9-40.8 -> 41.2-44.9 M tuples/s)
        n = len(batch)
        dtype = np.int32 if n <= SHORT_ROWS else np.int64
        of = np.empty(n, np.uint8)  # each row's partition, then the partitions' lists
        self.routing(*self.inputs(batch), parts, of)
        rows, counts = np.empty((parts, n), dtype), np.zeros(parts, np.int64)
        ka.scatter_rows(of, rows, counts)
        return [rows[p, :c] for p, c in enumerate(counts.tolist())]


def plan_parts(loads: list[float], within: float = 0.9) -> int:
    """The fewest partitions whose run is within ``within`` of the fastest choice's, from
    ``loads[P - 1]``: the busiest of P partitions' share of the tuples (a partition's work is
    its tuples, so P partitions take that share of one's time - one key: 1.0 at every P, and
    one partition is as fast as any; keys spread evenly: 1 / P)."""
    speed = [1.0 / max(x, 1e-9) for x in loads]
    return next(p for p, v in enumerate(speed, 1) if v >= within * max(speed))
