"""Adaptive query compilation (Grizzly, SIGMOD 2020, §4-5): kernels specialised to
the data while the query runs, and taken back when the data stops fitting them.

A branch's fragment - the generated front kernel (σ, π, ⋈ probes; :mod:`scabbard.kernels.codegen`)
and the per-pane aggregation (:mod:`scabbard.kernels.aggregate`) - runs in one of three
variants, task by task (tasks are independent, so a switch between two tasks is free):

* **generic**: today's kernels - the filters in the query's order, a hash table per task;
* **instrumented**: the generic kernels plus a profile of a **sample** of the task's rows
  (:attr:`AdaptivePolicy.sample`, in slices spread over the task; a small task whole) - every
  filter of a run of consecutive filters evaluated on each sampled row that reaches the run,
  so each one's selectivity is estimated whatever the order; the sampled keys' number of
  distinct values (estimated for the whole task) and the share of the most frequent one (a
  heavy hitter); and, over every row the generic kernels let through, each group-key word's
  smallest and largest value (a pass over the keys: a dense range must hold them all);
* **optimised**: the filters of each run ordered by measured selectivity (the most selective
  first), and - when the observed key range (widened by :attr:`AdaptivePolicy.margin`) holds
  at most :data:`~scabbard.kernels.aggregate.DENSE_MAX` groups - aggregation into a dense
  array indexed by the key's offset in the range, with no hash and no probe - or, when the
  group keys are columns of a joined relation's row (YSB's campaign of an ad, a uuid whose
  words span no small range), by the code of that row's key (:class:`RelationCodes`: one
  per distinct key of the relation, in the order of its rows), over the range of codes the
  profile saw, the key's words read once per group and task; and each input
  column the profile saw hold one value (an integer column: LRB's highway) folded into the
  code as that constant, so what is computed from it is computed once, at compile time.

Every assumption of an optimised variant is a **guard** checked inside the kernel: a key
(or a relation code) outside the range, or a folded column holding another value, stops the
kernel, and the task's rows are run again by the generic kernels (**deoptimisation**:
results never change); the branch goes back to profiling and optimises again for the data it
now sees.  The filter order needs no guard (any order gives the same rows); it is revisited
every :attr:`AdaptivePolicy.reprofile` tasks with one instrumented task.  And the variant
watches its own **cost per row**: when its latest tasks' median is
:attr:`AdaptivePolicy.slowdown` times its cost when it was kept, the data changed under it
without breaking a guard (filters that pass more rows, keys spread wider), and the branch
profiles anew (:meth:`AdaptiveBranch.watch`).  Hardware counters (cache misses, branch
misses) would tell why; this machine's virtual CPUs expose none to ``perf_event_open``.

A swapped-in variant is on **trial** first: its tasks alternate with generic ones until each
has run :attr:`AdaptivePolicy.trial_tasks` tasks, and it stays only if its median time per row
is below the generic kernels' (a specialisation is a bet on the data and the machine: a dense
array larger than the cache, or an allocator that serves the hash table well, can make it
lose); a rejected plan is not compiled again while the profile asks for one like it
(:meth:`Plan.like`).

The optimised front kernel is generated and compiled on a background thread while the current
variant keeps running, and swapped in when ready; numba caches it on disk by the digest of its
source (:func:`~scabbard.kernels.codegen.compile_front`), so a restarted engine finds it.  Each
step is a ``kernel`` event of the metrics log (``profile``, ``optimise``, ``swap``, ``keep``,
``slower``, ``retrial``, ``reject``, ``deopt``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from scabbard.engine.fused import RelationCodes, fused_args, run_fused
from scabbard.engine.profile import KEYS_SAMPLED, Profile, column_ranges, distinct_keys
from scabbard.kernels.aggregate import DENSE_MAX, key_range, pane_aggregate
from scabbard.kernels.codegen import DenseSpec, compile_front

GENERIC, INSTRUMENTED, OPTIMISED = "generic", "instrumented", "optimised"
TRIAL = "trial"  # the phase after a swap: optimised and generic tasks alternate, timed


@dataclass(frozen=True)
class AdaptivePolicy:
    """When a branch profiles, optimises and profiles again.

    ``warm_tasks``: generic tasks first; ``profile_tasks``: instrumented tasks whose profile
    decides the optimised variant; ``reprofile``: every this many optimised tasks, one
    instrumented (selectivities move; a key range is guarded instead); ``margin``: the dense
    range is the observed one widened by this fraction of it on each side (keys that drift
    a little do not deoptimise at once); ``dense_max``: the most groups a dense array holds;
    ``background``: compile on a thread of its own (False: at once, on the task's thread -
    deterministic, for tests); ``trial_tasks``: after a swap, this many tasks of each of the
    optimised and the generic variant, alternating, decide which one stays (0: the optimised
    variant stays untried - the tests of the variants' mechanics); ``force``: every task in
    one variant (``generic`` or ``instrumented``: what a benchmark compares the optimised
    variant with); ``fold``: constants folded; ``slowdown``: an optimised variant whose
    median time per row over its last ``watch_tasks`` tasks exceeds this many times its own
    when it was kept (its trial's median, or its first ``watch_tasks`` tasks' untried) is
    taken back and the branch profiles anew - the data changed under it (the filters'
    selectivities, the keys' spread) though no guard failed (0: never); ``stage_seconds``:
    the generic and the instrumented stages last at least this long besides their tasks
    (Grizzly's last as long as a compilation, seconds: a figure's stages long enough to
    see); ``sample``: the share of an instrumented task's rows the profile evaluates every
    filter on, in ``sample_slices`` slices spread over the task (1.0: every row, as a task
    of at most ``sample_min_rows`` rows always is)."""

    warm_tasks: int = 2
    profile_tasks: int = 4
    reprofile: int = 64
    margin: float = 0.25
    dense_max: int = DENSE_MAX
    background: bool = True
    trial_tasks: int = 4
    force: str | None = None
    fold: bool = True
    slowdown: float = 2.0
    watch_tasks: int = 8
    stage_seconds: float = 0.0
    sample: float = 1 / 16
    sample_slices: int = 16
    sample_min_rows: int = 1 << 16

    def __post_init__(self) -> None:
        if self.force not in (None, GENERIC, INSTRUMENTED):
            raise ValueError(f"force: generic or instrumented, not {self.force!r}")
        if min(self.warm_tasks, self.profile_tasks) < 0 or self.profile_tasks < 1 \
                or self.reprofile < 1 or self.margin < 0 or self.trial_tasks < 0 \
                or not 1 <= self.dense_max <= DENSE_MAX or self.watch_tasks < 1 \
                or not (self.slowdown == 0 or self.slowdown > 1) or self.stage_seconds < 0 \
                or not 0 < self.sample <= 1 or self.sample_slices < 1 or self.sample_min_rows < 0:
            raise ValueError("adaptive policy: tasks >= 1, margin >= 0, "
                             f"1 <= dense_max <= {DENSE_MAX:,}, slowdown 0 or > 1, "
                             "stage_seconds >= 0, 0 < sample <= 1, sample_slices >= 1")

    def slices(self, n: int) -> list[tuple[int, int]]:
        """The row ranges of an ``n``-row task the instrumented variant profiles: ``sample``
        of them in ``sample_slices`` slices spread evenly (all of a small task)."""
        if self.sample >= 1 or n <= self.sample_min_rows:
            return [(0, n)]
        k = self.sample_slices
        width = max(1, int(n * self.sample) // k)
        starts = np.linspace(0, n - width, k).astype(np.int64)
        return [(int(s), int(s) + width) for s in starts]


@dataclass(frozen=True)
class Plan:
    """What an optimised variant assumes: the filter order, and the dense key range (or
    None: hash aggregation)."""

    order: tuple[int, ...] | None
    lo: tuple[int, ...] | None = None
    span: tuple[int, ...] | None = None
    consts: tuple[tuple[str, str, int], ...] = ()  # (column, dtype, value) folded
    # the dense array is indexed by the code of joined relation ``coded``'s row (``lo``,
    # ``span``: a range of codes, :class:`RelationCodes`), not by the key's own words
    coded: int | None = None

    @property
    def dense(self) -> bool:
        return self.lo is not None

    def like(self, other: Plan | None) -> bool:
        """The same bet as ``other``: the filter order, and hash aggregation or a dense array
        of about the same size (a profile of other tasks widens a range a little)."""
        if other is None or self.order != other.order or (self.lo is None) != (other.lo is None) \
                or self.consts != other.consts or self.coded != other.coded:
            return False
        if self.lo is None:
            return True
        a, b = float(np.prod(self.span)), float(np.prod(other.span))
        return max(a, b) <= 2 * min(a, b)

    def describe(self) -> dict:
        return {"filter_order": list(self.order) if self.order else None,
                "dense": None if self.lo is None else
                {"lo": list(self.lo), "span": list(self.span),
                 **({"by_relation_row": self.coded} if self.coded is not None else {})},
                "constants": {c: v for c, _, v in self.consts} or None}

    @property
    def empty(self) -> bool:
        return self.order is None and self.lo is None and not self.consts


class AdaptiveBranch:
    """One branch's variants and the phase it is in (see the module); shared by the workers,
    which call :meth:`run` for their tasks concurrently."""

    def __init__(self, branch, index: int, cache_dir, policy: AdaptivePolicy,
                 compiler: ThreadPoolExecutor | None):
        self.b, self.index, self.cache_dir = branch, index, cache_dir
        self.policy, self.compiler = policy, compiler
        self.spec = branch.spec
        self.generic = branch.kernel(cache_dir)
        self.instrumented = None  # compiled when first needed
        self.variant: tuple | None = None  # (front, plan) of the optimised variant
        self.plan: Plan | None = None  # the plan of the variant installed or compiling
        self.lock = threading.Lock()
        self.phase = GENERIC
        self.entered = time.monotonic()  # when the phase began
        self.tasks = self.since = 0  # tasks run; in this phase
        self.profile = self._new_profile()
        self.compiling = False
        self.next_profile = policy.warm_tasks  # a generic branch profiles again from this task
        self.margin = policy.margin  # doubled at each deoptimisation: keys that drift
        # a branch with no group key and no two filters in a row has nothing to specialise
        self.reorderable = any(len(r) > 1 for r in self.spec.runs())
        self.useful = branch.key_width > 0 or self.reorderable
        self.on_event = None  # metrics.event, set by the run
        self.stats = {GENERIC: 0, INSTRUMENTED: 0, OPTIMISED: 0, "deopts": 0, "swaps": 0,
                      "rejects": 0, "slower": 0}
        # the optimised variant's own cost: ns per row when it was kept, and its latest tasks'
        self.kept_ns: float | None = None
        self.kept_n = 0  # the size of the tasks it was measured on (the trial's median)
        self.timed_n: list[int] = []  # the trial's task sizes
        self.off_size = 0  # optimised tasks in a row of another size than kept_n
        self.recent: deque[float] = deque(maxlen=policy.watch_tasks)
        self.trial = 0  # which trial the phase is (timings of an older one are dropped)
        self.timed: dict[str, list[float]] = {GENERIC: [], OPTIMISED: []}  # ns per row
        self.rejected: Plan | None = None  # lost its trial; not compiled again for now
        # every task's time and rows per variant (what the simulator's calibration reads)
        self.ns = {GENERIC: 0.0, INSTRUMENTED: 0.0, OPTIMISED: 0.0}
        self.rows = {GENERIC: 0, INSTRUMENTED: 0, OPTIMISED: 0}
        self.codes: RelationCodes | None = None  # the keys' relation codes, if they have some
        self._coded = branch.key_width > 0  # whether they may (known at the first profile)

    def _new_profile(self) -> Profile:
        return Profile(len(self.spec.steps), self.b.key_width, len(self.spec.columns))

    def _event(self, action: str, **fields) -> None:
        if self.on_event is not None:
            self.on_event("kernel", action=action, branch=self.b.id, **fields)

    # -- choosing the variant of a task (with the lock held) ---------------------------------------
    def _choose(self) -> str:
        p = self.policy
        self.tasks += 1
        if self.tasks == 1:  # the first stage counts from the stream's first task
            self.entered = time.monotonic()
        self.since += 1
        if p.force is not None:
            return p.force
        if not self.useful:
            return GENERIC
        if self.phase == TRIAL:
            return OPTIMISED if self.since % 2 else GENERIC
        if self.phase == GENERIC and self.tasks > self.next_profile and not self.compiling \
                and self._stage_done():
            self._enter(INSTRUMENTED)
            self._event("profile", task=self.tasks)
        elif self.phase == OPTIMISED and self.reorderable and self.since % p.reprofile == 0:
            return INSTRUMENTED  # one task's profile: the filter order is revisited
        return self.phase

    def _stage_done(self) -> bool:
        return time.monotonic() - self.entered >= self.policy.stage_seconds

    def _enter(self, phase: str) -> None:
        self.phase, self.since, self.entered = phase, 0, time.monotonic()
        if phase == OPTIMISED:  # its cost is measured anew (the trial's median, if it had one)
            self.kept_ns, self.kept_n, self.off_size = None, 0, 0
            self.recent.clear()
        if phase == INSTRUMENTED:
            self.profile = self._new_profile()
        if phase == TRIAL:
            self.trial += 1
            self.timed, self.timed_n = {GENERIC: [], OPTIMISED: []}, []

    # -- the task ------------------------------------------------------------------------------
    def run(self, n: int, times: tuple, inputs: tuple, rel_args: tuple, out: tuple):
        """The branch's front kernel and per-pane aggregation on one task, in the variant its
        phase asks for: the task's pane partials - the generic kernels' result, whatever the
        variant (``times``: the task's timestamps and the shift their event times are them
        plus - a replayed copy's, never added in a pass of its own; ``out``: the front's
        output arrays - timestamps, keys, integer and float inputs of the aggregates - for
        the variants that write them)."""
        with self.lock:
            kind = self._choose()
            variant = self.variant
            self.stats[kind] += 1
            trial = self.trial if self.phase == TRIAL else None
        # the CPU time of this thread: a variant's cost, not the waits of a busy machine (2
        # cores, two workers, a source and the interpreter lock: at YSB's 3 ns a row, the
        # wall time of a task doubled now and then and took a variant back as slower)
        t0 = time.thread_time_ns()
        partials = self._run(kind, variant, n, times, inputs, rel_args, out)
        ns = float(time.thread_time_ns() - t0)
        with self.lock:
            self.ns[kind] += ns
            self.rows[kind] += n
        if trial is not None and n:
            self._timed(kind, trial, ns / n, n)
        elif kind == OPTIMISED and n and self.policy.slowdown:
            self.watch(ns / n, n, variant)
        return partials

    def watch(self, ns_per_row: float, n: int, variant) -> None:
        """An optimised task's time per row (``n`` rows, of ``variant``): once the latest
        tasks' median is ``slowdown`` times the variant's own when it was kept, the variant is
        taken back and the branch profiles anew (a ``slower`` event).  A time per row holds
        for one size of task (a larger task's hash table or dense array leaves the cache):
        ``watch_tasks`` tasks in a row twice as large, or half, as those the trial ran put the
        variant on trial again (a ``retrial`` event; untried, its measure is taken anew); fewer
        - a replayed copy's short last task - are not measured."""
        with self.lock:
            if self.phase != OPTIMISED or variant is None or self.variant is not variant:
                return
            if self.kept_n and not self.kept_n / 2 <= n <= 2 * self.kept_n:
                self.off_size += 1
                if self.off_size < self.recent.maxlen:
                    return
                self._event("retrial", task=self.tasks, kept_rows=self.kept_n, rows=n)
                self._enter(TRIAL if self.policy.trial_tasks else OPTIMISED)
                return
            self.off_size = 0
            if not self.kept_n:
                self.kept_n = n
            self.recent.append(ns_per_row)
            if len(self.recent) < self.recent.maxlen:
                return
            now = float(np.median(self.recent))
            if self.kept_ns is None:  # kept untried: its first tasks are its own measure
                self.kept_ns = now
                self.recent.clear()
                return
            if now <= self.policy.slowdown * self.kept_ns:
                return
            self.stats["slower"] += 1
            self._event("slower", task=self.tasks, kept_ns_row=round(self.kept_ns, 2),
                        recent_ns_row=round(now, 2), plan=variant[1].describe())
            self.variant = self.plan = None
            self.compiling = False  # a compile in flight (a new filter order) is dropped
            self._enter(INSTRUMENTED)

    def summary(self) -> dict:
        """Tasks per variant, deoptimisations, swaps, rejects; each variant's time per row
        (ns, a deoptimised task's generic rerun included in the optimised time); ``kept``: 1
        if the optimised variant runs now (0: the generic kernels, or the trial is on)."""
        with self.lock:
            return {**self.stats, "kept": int(self.phase == OPTIMISED),
                    **{f"{k}_ns_row": round(self.ns[k] / self.rows[k], 3)
                       for k in self.ns if self.rows[k]}}

    def _run(self, kind: str, variant, n: int, times: tuple, inputs: tuple, rel_args: tuple,
             out: tuple):
        b, (ts, shift) = self.b, times
        o_ts, o_keys, o_i, o_f = out
        if kind == OPTIMISED and variant is not None:
            kernel, plan = variant
            if plan.lo is None:  # the filters reordered, constants folded; hash aggregation
                m = kernel(n, ts, *inputs, *rel_args, o_ts, o_keys, o_i, o_f)
                if m >= 0:
                    return pane_aggregate(o_ts[:m], o_keys[:m], o_i[:m], o_f[:m], b.iops,
                                          b.fops, b.slide_ms, ordered=True, shift=shift)
            else:
                partials = run_fused(kernel, b, plan, n, times, inputs,
                                     self._fused_args(plan, rel_args))
                if partials is not None:
                    return partials
            # a guard failed (a key outside the range, a folded column that changed): the
            # task again, generically (deoptimisation)
            m = self.generic(n, ts, *inputs, *rel_args, o_ts, o_keys, o_i, o_f)
            self._deopt(o_keys[:m], plan, inputs)
            return pane_aggregate(o_ts[:m], o_keys[:m], o_i[:m], o_f[:m], b.iops, b.fops,
                                  b.slide_ms, ordered=True, shift=shift)
        if kind == INSTRUMENTED:
            if self.instrumented is None:
                self.instrumented = compile_front(self._instrumented_spec(), self.cache_dir)
            counts = np.zeros(2 * len(self.spec.steps), dtype=np.int64)
            slices = self.policy.slices(n)
            if slices == [(0, n)]:  # the task whole: its output is the generic kernels'
                m = self.instrumented(n, ts, *inputs, *rel_args, o_ts, o_keys, o_i, o_f,
                                      counts)
                sampled = o_keys[:m]  # read before the next task writes o_keys
            else:  # the filters on the sample's slices, then the task by the generic kernels
                parts, per = [], KEYS_SAMPLED // len(slices) + 1
                for a, z in slices:  # each slice's keys strided to its share of the count
                    got = self.instrumented(z - a, ts[a:z], *(x[a:z] for x in inputs),
                                            *rel_args, o_ts, o_keys, o_i, o_f, counts)
                    parts.append(o_keys[:got:max(1, got // per)].copy())
                sampled = np.concatenate(parts)
                m = self.generic(n, ts, *inputs, *rel_args, o_ts, o_keys, o_i, o_f)
            lo, hi = key_range(o_keys[:m])
            ranges = column_ranges(inputs)
            partials = pane_aggregate(o_ts[:m], o_keys[:m], o_i[:m], o_f[:m], b.iops, b.fops,
                                      b.slide_ms, ordered=True, shift=shift)
            if self._coded and self.codes is None:
                self.codes = RelationCodes.of_branch(self.spec, rel_args)
                self._coded = self.codes is not None
            codes = self.codes.range_of(partials[-1]) if self.codes is not None else None
            self._profiled(counts, (lo, hi, codes, sampled), m, ranges, (ts, inputs, rel_args),
                           sum(z - a for a, z in slices))
            return partials
        m = self.generic(n, ts, *inputs, *rel_args, o_ts, o_keys, o_i, o_f)
        return pane_aggregate(o_ts[:m], o_keys[:m], o_i[:m], o_f[:m], b.iops, b.fops,
                              b.slide_ms, ordered=True, shift=shift)

    def _fused_args(self, plan: Plan, rel_args: tuple) -> tuple:
        return fused_args(plan, rel_args, self.codes)

    def _timed(self, kind: str, trial: int, ns_per_row: float, n: int) -> None:
        """A trial task's time (``n`` rows); once both variants ran enough tasks, the trial's
        verdict."""
        with self.lock:
            if self.phase != TRIAL or trial != self.trial:
                return  # a deopt, or a newer swap, ended this trial
            self.timed[kind].append(ns_per_row)
            self.timed_n.append(n)
            k = self.policy.trial_tasks
            if min(len(v) for v in self.timed.values()) < k:
                return
            generic, optimised = (float(np.median(self.timed[v])) for v in (GENERIC, OPTIMISED))
            fields = {"task": self.tasks, "generic_ns_row": round(generic, 2),
                      "optimised_ns_row": round(optimised, 2)}
            if optimised < generic:
                self._enter(OPTIMISED)
                self.kept_ns, self.kept_n = optimised, int(np.median(self.timed_n))
                self._event("keep", **fields)
                return
            self.stats["rejects"] += 1
            self.rejected, self.variant, self.plan = self.plan, None, None
            self._enter(GENERIC)
            self.next_profile = self.tasks + self.policy.reprofile  # the data may change
            self._event("reject", plan=self.rejected.describe() if self.rejected else None,
                        **fields)

    def _instrumented_spec(self):
        return dataclasses.replace(self.spec, profile=True)

    # -- profile, optimise, swap, deoptimise -------------------------------------------------------
    def _profiled(self, counts, keys: tuple, rows: int, ranges, sample, sampled: int) -> None:
        """An instrumented task's profile: ``counts`` of the filters over ``sampled`` rows;
        ``keys`` - its key words' smallest and largest values, its groups' smallest and
        largest relation code (or None), and the sampled rows' keys."""
        lo, hi, codes, keys_sampled = keys
        if self.b.key_width:  # outside the lock: a sort of at most 16 k keys
            estimate = distinct_keys(keys_sampled, rows)
        with self.lock:
            pr = self.profile
            pr.tasks += 1
            pr.counts += counts
            pr.sampled += sampled
            if self.b.key_width:
                pr.distinct, pr.top_share = (max(pr.distinct, estimate[0]),
                                             max(pr.top_share, estimate[1]))
            pr.lo = np.minimum(pr.lo, lo)
            pr.hi = np.maximum(pr.hi, hi)
            if codes is not None:
                pr.code_lo, pr.code_hi = min(pr.code_lo, codes[0]), max(pr.code_hi, codes[1])
            pr.rows += rows
            pr.columns(ranges)
            if self.phase == OPTIMISED:  # a periodic profile: only the filter order moves
                plan = self._plan(pr)
                if self.plan is not None and plan.order != self.plan.order:
                    self._optimise(dataclasses.replace(self.plan, order=plan.order), sample)
                self.profile = self._new_profile()
                return
            if self.phase != INSTRUMENTED or pr.tasks < self.policy.profile_tasks \
                    or not self._stage_done():
                return
            plan = self._plan(pr)
            rejected = plan.like(self.rejected)
            if plan.empty or rejected:
                # nothing to specialise (for now), or what lost its trial: the data may change
                self._event("optimise", task=self.tasks, plan=None, profile=pr.describe(),
                            **({"rejected": plan.describe()} if rejected else {}))
                self._enter(GENERIC)
                self.next_profile = self.tasks + self.policy.reprofile  # the data may change
                return
            self._optimise(plan, sample)

    def _plan(self, pr: Profile) -> Plan:
        """The variant the profile asks for."""
        order = None
        runs = self.spec.runs()
        if any(len(r) > 1 for r in runs):
            c = pr.counts
            rate = {f: c[2 * f + 1] / max(1, c[2 * r[0]]) for r in runs for f in r}
            order = tuple(f for r in runs for f in sorted(r, key=lambda f: (rate[f], f)))
            if order == tuple(f for r in runs for f in r):
                order = None  # the query's own order is the best one
        lo = span = None
        k = self.b.key_width
        if k and pr.rows and np.all(pr.lo <= pr.hi):
            # in floats: a word of a uuid key spans more than int64 holds
            width = pr.hi.astype(np.float64) - pr.lo.astype(np.float64) + 1
            pad = np.ceil(width * self.margin)
            if float(np.prod(width + 2 * pad)) <= self.policy.dense_max:
                lo = tuple(int(x) for x in pr.lo - pad.astype(np.int64))
                span = tuple(int(x) for x in (width + 2 * pad).astype(np.int64))
        consts = pr.constants(self.spec.columns) if self.policy.fold else ()
        if lo is None and self.codes is not None and pr.code_lo <= pr.code_hi:
            # the keys' own words span too much (uuids): the codes of their relation rows
            # seen, widened as a key range is (but not past the relation's codes)
            width = pr.code_hi - pr.code_lo + 1
            pad = int(np.ceil(width * self.margin))
            first = max(0, pr.code_lo - pad)
            end = min(len(self.codes), pr.code_hi + 1 + pad)
            if end - first <= self.policy.dense_max:
                return Plan(order, (first,), (end - first,), consts, coded=self.codes.relation)
        return Plan(order, lo, span, consts)

    def _optimise(self, plan: Plan, sample) -> None:
        """Compile ``plan``'s variant (in the background) and swap it in when ready (with the
        lock held)."""
        self.plan, self.compiling = plan, True
        self._event("optimise", task=self.tasks, plan=plan.describe(),
                    profile=self.profile.describe())
        if self.phase != OPTIMISED:
            self._enter(GENERIC)  # the generic kernels run while it compiles
        ts, inputs, rel_args = sample
        # views: the task's arrays' kinds (read-only, as a dataset's are) - numba compiles a
        # kernel once per kind, and a copy's would leave the first task to compile on the clock
        warm = (ts[:1], tuple(np.ascontiguousarray(x[:1]) for x in inputs), rel_args)
        if self.compiler is None or not self.policy.background:
            self._compile(plan, warm, locked=True)
        else:
            self.compiler.submit(self._compile, plan, warm)

    def _compile(self, plan: Plan, warm, locked: bool = False) -> None:
        try:
            self._build(plan, warm, locked)
        except Exception as e:  # noqa: BLE001 - the generic kernels keep running
            with (contextlib.nullcontext() if locked else self.lock):
                if self.plan == plan:
                    self.plan, self.compiling = None, False
                    self._enter(GENERIC)
                    self.next_profile = self.tasks + self.policy.reprofile
                    self._event("optimise_failed", task=self.tasks, error=repr(e))

    def _build(self, plan: Plan, warm, locked: bool) -> None:
        t0 = time.perf_counter()
        b = self.b
        spec = self.spec.reordered(list(plan.order)) if plan.order else self.spec
        if plan.consts:
            spec = spec.folded(plan.consts)
        if plan.lo is not None:  # the front fused with the dense aggregation
            spec = DenseSpec(spec, tuple(int(x) for x in b.iops), tuple(int(x) for x in b.fops),
                             int(b.slide_ms), plan.lo, plan.span, plan.coded)
        front = compile_front(spec, self.cache_dir)
        ts, inputs, rel_args = warm
        n = len(ts)
        if plan.lo is not None:  # numba compiles (or loads) it now, on a row
            run_fused(front, b, plan, n, (ts, 0), inputs, self._fused_args(plan, rel_args))
        else:
            out = (np.empty(n, np.int64), np.empty((n, b.key_width), np.int64),
                   np.empty((n, len(b.iops)), np.int64), np.empty((n, len(b.fops)), np.float64))
            front(n, ts, *inputs, *rel_args, *out)
        ms = round((time.perf_counter() - t0) * 1e3, 2)
        with (contextlib.nullcontext() if locked else self.lock):
            if self.plan == plan:  # not superseded while it compiled
                self.variant = (front, plan)
                self.compiling = False
                self._enter(TRIAL if self.policy.trial_tasks else OPTIMISED)
                self.stats["swaps"] += 1
                self._event("swap", task=self.tasks, compile_ms=ms, plan=plan.describe())

    def _deopt(self, keys, plan: Plan, inputs: tuple) -> None:
        lo, hi = key_range(keys)
        ranges = dict(zip(self.spec.columns, column_ranges(inputs), strict=True))
        changed = {c: [ranges[c][1], ranges[c][2]] for c, _, v in plan.consts
                   if ranges[c] is None or ranges[c][1:] != (v, v)}
        with self.lock:
            self.stats["deopts"] += 1
            if self.variant is not None and self.variant[1] == plan:
                self.variant, self.plan = None, None
                self.compiling = False  # a compile in flight (a new filter order) is dropped
                if not changed:
                    self.margin = max(2 * self.margin, 0.25)  # the range drifts: leave it room
                self._enter(INSTRUMENTED)
                reason = ("a folded constant changed" if changed
                          else "key outside the dense range")
                self._event("deopt", task=self.tasks, reason=reason,
                            range=plan.describe()["dense"],
                            seen={"lo": [int(x) for x in lo], "hi": [int(x) for x in hi]},
                            **({"columns": changed} if changed else {}))


class AdaptiveKernels:
    """The engine's adaptive branches and the thread that compiles their variants."""

    def __init__(self, branches, cache_dir, policy: AdaptivePolicy):
        self.policy = policy
        self.compiler = ThreadPoolExecutor(1, thread_name_prefix="compile") \
            if policy.background else None
        self.branches = [AdaptiveBranch(b, i, cache_dir, policy, self.compiler)
                         for i, b in enumerate(branches)]

    def listen(self, on_event) -> None:
        for a in self.branches:
            a.on_event = on_event

    def stats(self) -> dict:
        return {a.b.id: a.summary() for a in self.branches}
