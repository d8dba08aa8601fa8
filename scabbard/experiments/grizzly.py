"""Notebook 14 / ``scabbard bench adaptive``: Grizzly's adaptive compilation on this machine.

Grizzly (Grulich et al., SIGMOD 2020, §4-6) compiles a stream query generically, runs an
instrumented variant to profile the data, then an optimised variant specialised to it, and
deoptimises when the data breaks an assumption.  Here (:mod:`scabbard.engine.adaptive`):

* :func:`run` - per query, the engine with the generic kernels, with every task instrumented,
  and adaptive (generic, instrumented, then optimised); ``rounds`` interleaved, medians kept
  (the paper: instrumented ~0.5x, optimised ~3.3x the generic throughput on YSB);
* :func:`timeline` - Fig. 12: throughput over time of one adaptive run whose group keys leave
  the profiled range ``change_at`` seconds in (YSB: ten times more campaigns,
  :class:`MoreCampaigns`; the others: a key column moved by 1,000); the kernel events (profile, optimise,
  swap, deopt) on the same axis, and the time from the change to the re-optimised variant;
* :func:`recovery` - a SIGKILL and its recovery with the generic kernels and with adaptive
  ones, ``rounds`` interleaved: the variants come from numba's disk cache and a new
  incarnation profiles anew, so the recovery must take no longer;
* :func:`keys` - Fig. 11 / Table 1: the per-pane aggregation's throughput against the number
  of distinct keys, hash table against dense array (up to its limit);
* :func:`predicates` - Fig. 13: two filters whose selectivities cross, each order of the
  generated front kernel, and the order the instrumented variant's profile picks.
"""

from __future__ import annotations

import dataclasses
import functools
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from scabbard import queries, workloads
from scabbard.batch import Batch, ReplayBatch
from scabbard.engine import EngineConfig, NullSink, Replay, run_query
from scabbard.engine.adaptive import AdaptivePolicy
from scabbard.engine.sources import ReplaySource, SourceBatch, replays_in_order
from scabbard.experiments import Common, finish, save_tables
from scabbard.query import Query, col, count, sum_
from scabbard.schema import Field, Schema

VARIANTS = ("generic", "instrumented", "adaptive")
POLICIES = {"generic": None, "instrumented": AdaptivePolicy(force="instrumented"),
            "adaptive": AdaptivePolicy()}


@dataclass(frozen=True)
class Settings(Common):
    queries: Sequence[str] = ("YSB", "CM1", "CM2", "LRB1")
    variants: Sequence[str] = VARIANTS
    seconds: float = 4.0
    rounds: int = 3
    workers: int = 2
    timeline_query: str = "YSB"
    change_at: float = 4.0  # timeline: wall seconds into the run when the keys move
    stage_seconds: float = 0.5  # timeline: the generic and instrumented stages last this long
    recovery_query: str = "LRB1"  # recovery: a kill with generic and with adaptive kernels
    output_dir: str = "."

    def __post_init__(self) -> None:
        object.__setattr__(self, "queries", tuple(q.upper() for q in self.queries))
        object.__setattr__(self, "variants", tuple(self.variants))
        for q in (*self.queries, self.timeline_query, self.recovery_query):
            queries.workload_of(q)  # an unknown query: a one-line error
        bad = [v for v in self.variants if v not in VARIANTS]
        if bad:
            raise ValueError(f"unknown variant {bad[0]!r} (choose from {', '.join(VARIANTS)})")
        if self.seconds <= 0 or self.rounds < 1 or self.workers < 1 or self.change_at <= 0 \
                or not 0 <= self.stage_seconds < self.change_at:
            raise ValueError("seconds and change_at must be positive, rounds and workers >= 1, "
                             "0 <= stage_seconds < change_at")


def _dataset(name: str, s: Settings):
    return workloads.dataset(queries.workload_of(name), s.scale, root=str(s.data_dir))


def run(settings: Settings, log=print) -> pd.DataFrame:
    """Every query in every variant for ``seconds``, ``rounds`` times interleaved; saved as
    ``adaptive_runs.csv`` and ``results.csv``."""
    s, rows = settings, []
    for name in s.queries:  # compiled code loaded and the data paged in, unmeasured
        for v in s.variants:
            run_query(queries.get(name), _dataset(name, s), NullSink(),
                      EngineConfig(workers=s.workers, adaptive=POLICIES[v]),
                      replay=Replay(duration=min(1.0, s.seconds)))
    for k in range(s.rounds):
        for name in s.queries:
            for v in (*s.variants[k % len(s.variants):], *s.variants[:k % len(s.variants)]):
                r = run_query(queries.get(name), _dataset(name, s), NullSink(),
                              EngineConfig(workers=s.workers, adaptive=POLICIES[v]),
                              replay=Replay(duration=s.seconds))
                st = r.kernels.get("window0", {})
                rows.append({"query": name, "variant": v, "round": k,
                             "tuples_per_s": r.summary.tuples_per_s,
                             "optimised_tasks": st.get("optimised", 0),
                             "tasks": sum(st.get(x, 0) for x in ("generic", "instrumented",
                                                                 "optimised")),
                             "deopts": st.get("deopts", 0)})
                log(f"round {k + 1}/{s.rounds}  {name:5s} {v:13s} "
                    f"{r.summary.tuples_per_s / 1e6:9.1f} M tuples/s")
    runs = pd.DataFrame(rows)
    save_tables(s.output_dir, results=summary(runs), adaptive_runs=runs)
    return runs


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per query: the median M tuples/s of each variant and each over the generic one."""
    med = runs.groupby(["query", "variant"])["tuples_per_s"].median().unstack("variant") / 1e6
    out = med.rename(columns=lambda c: f"{c} M tuples/s")
    for v in ("instrumented", "adaptive"):
        if v in med and "generic" in med:
            out[f"{v} / generic"] = med[v] / med["generic"]
    return out.reset_index()


def plot(runs: pd.DataFrame, output_dir: str | None = None):
    """Throughput per query and variant (bars)."""
    import matplotlib.pyplot as plt

    med = runs.groupby(["query", "variant"])["tuples_per_s"].median().unstack("variant") / 1e6
    variants = [v for v in VARIANTS if v in med]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    x, width = np.arange(len(med)), 0.8 / max(1, len(variants))
    for j, v in enumerate(variants):
        ax.bar(x + (j - (len(variants) - 1) / 2) * width, med[v], width, label=v)
    ax.set_xticks(x, list(med.index))
    ax.set_ylabel("M tuples/s")
    ax.set_title("generic, instrumented and adaptive kernels")
    ax.legend(fontsize=8)
    return finish(fig, output_dir, "adaptive.png")


# -- Fig. 12: a change of the data ---------------------------------------------------------------
class ChangedReplay(ReplaySource):
    """The dataset replayed with other columns (``before``) until the replay's copy
    ``from_copy``, or ``after`` wall seconds into the run (at a batch boundary); then
    ``then`` (``changed_at``: seconds into the run when it happened).  Every column
    read-only, as a dataset's: numba compiles a kernel once per kind of array, and a
    writable one on either side would have every kernel compiled again, on the clock, at the
    change (a stall of half a second in a timeline)."""

    def __init__(self, dataset, before: tuple, then: tuple, from_copy: int | None = None,
                 after: float | None = None, **kw):
        super().__init__(dataset, **kw)
        for c in (*before, *then):
            c.flags.writeable = False
        self.before, self.then = before, then
        self.from_copy, self.after = from_copy, after
        self._t0: float | None = None
        self.changed_at: float | None = None

    def batches(self):
        self._t0 = time.perf_counter()
        yield from super().batches()

    @functools.cached_property
    def ordered(self) -> bool:
        """:attr:`ReplaySource.ordered`, of the columns replayed before and after the change."""
        at = self.schema.index("timestamp")
        return at == 0 and all(replays_in_order(c[at]) for c in (self.before, self.then))

    def columns_of(self, copy: int) -> tuple[np.ndarray, ...]:
        changed = (self.from_copy is not None and copy >= self.from_copy) or (
            self.after is not None and self._t0 is not None
            and time.perf_counter() - self._t0 >= self.after)
        if not changed:
            return self.before
        if self.changed_at is None:
            self.changed_at = time.perf_counter() - (self._t0 or time.perf_counter())
        return self.then


def _with(columns: tuple, at: int, column: np.ndarray) -> tuple:
    return (*columns[:at], np.ascontiguousarray(column), *columns[at + 1:])


class KeyShift(ChangedReplay):
    """The dataset replayed with a key column moved by ``by`` from the change on."""

    def __init__(self, dataset, column: str, by: int, **kw):
        at = [f.name for f in dataset.schema.fields].index(column)
        cols = tuple(np.asarray(c) for c in dataset.stream.columns)
        super().__init__(dataset, cols, _with(cols, at, cols[at] + by), **kw)


class MoreCampaigns(ChangedReplay):
    """YSB's dataset replayed with each event's ad moved to one of the first ``1 / factor``
    of the campaigns (ad row ``a`` -> ``a mod (ads / factor)`` of the ad -> campaign relation,
    whose campaigns own consecutive ads) until the change; then the events as generated:
    ``factor`` times more keys part-way (Grizzly's Fig. 12 on YSB)."""

    def __init__(self, dataset, factor: int = 10, **kw):
        at = [f.name for f in dataset.schema.fields].index("ad_id")
        ads = np.asarray(dataset.table("ad_campaign").column("ad_id"))
        if factor < 1 or len(ads) < factor:
            raise ValueError(f"{len(ads)} ads cannot be narrowed {factor}-fold")
        row_of = {(int(a), int(b)): r for r, (a, b) in enumerate(ads)}
        cols = tuple(np.asarray(c) for c in dataset.stream.columns)
        distinct, inverse = np.unique(cols[at], axis=0, return_inverse=True)
        rows = np.array([row_of[(int(a), int(b))] for a, b in distinct], np.int64)
        narrowed = ads[rows % (len(ads) // factor)]  # each distinct ad's narrowed ad
        super().__init__(dataset, _with(cols, at, narrowed[inverse.reshape(-1)]), cols, **kw)


KEY_COLUMNS = {"CM1": "category", "CM2": "job_id", "LRB1": "highway", "SG2": "house"}


RECOVERY_PHASES = ("kill -> recovered (replay done)", "kill -> caught up (latency back)")


def recovery(settings: Settings, log=print, **overrides) -> pd.DataFrame:
    """Notebook 04's experiment on ``recovery_query`` (input at half the sustainable rate,
    checkpoints every second, one SIGKILL, the restart's phases from its metrics log), with
    the generic kernels and with ``--adaptive-kernels``, ``rounds`` times interleaved: one
    row per run, each phase in ms, and whether the output was exactly once; saved as
    ``recovery.csv``.  ``overrides``: fields of the recovery experiment's settings (a rate,
    the input's length, the kill's time...)."""
    import shutil
    import tempfile

    from scabbard.experiments import recovery as rec

    s, rows, rate = settings, [], overrides.pop("rate", None)
    work = Path(tempfile.mkdtemp(prefix="scabbard-grizzly-recovery-",
                                 dir=str(Path(s.data_dir).parent)))
    try:
        for k in range(s.rounds):
            for adaptive in (False, True):
                out = rec.run(rec.Settings(query=s.recovery_query, scale=s.scale,
                                           data_dir=s.data_dir, workers=s.workers, rate=rate,
                                           work_dir=str(work), adaptive_kernels=adaptive,
                                           **overrides),
                              log=lambda *_: None)
                rate = out.rate  # the sustainable rate, measured once
                ms = rec.summary(out).set_index("phase")["ms"].to_dict()
                v = "adaptive" if adaptive else "generic"
                rows.append({"query": s.recovery_query, "variant": v, "round": k,
                             "rate": rate, "exactly_once": out.exactly_once,
                             **{p: ms.get(p, float("nan")) for p in (*rec.PHASES,
                                                                     *RECOVERY_PHASES)}})
                log(f"recovery round {k + 1}/{s.rounds}  {s.recovery_query} {v:9s} "
                    + "  ".join(f"{p} {ms.get(p, float('nan')):7.0f} ms" for p in RECOVERY_PHASES))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    runs = pd.DataFrame(rows)
    save_tables(s.output_dir, recovery=runs)
    return runs


def timeline(settings: Settings, log=print) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Fig. 12: one adaptive run of ``timeline_query`` for ``2 * change_at`` seconds (the
    generic and instrumented stages ``stage_seconds`` long at least, a swapped-in variant kept
    untried: at YSB's 10 campaigns the dense array and the hash table cost about the same,
    and the stages shown would hang on a trial's coin flip - :func:`run` keeps the trial), its keys
    changed at ``change_at`` (YSB: ten times more campaigns; another query: its key column
    moved by 1,000): the metrics samples, the kernel events, and
    ``{"changed_at", "deopt_at", "reoptimised_at", "recovery_s"}`` (seconds into the run;
    ``recovery_s``: from the change to the swap of the re-optimised variant).  Saved as
    ``timeline.csv`` and ``kernel_events.csv``."""
    from scabbard.outputs import metrics_log, read_metrics

    s, name = settings, settings.timeline_query
    if name not in KEY_COLUMNS and name != "YSB":
        raise ValueError(f"the timeline changes the keys of YSB, {', '.join(KEY_COLUMNS)}")
    ds = _dataset(name, s)
    out = Path(s.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "timeline_metrics.jsonl"
    log_path.unlink(missing_ok=True)
    run = {"batch_rows": 1 << 18, "replay": Replay(duration=2 * s.change_at)}
    src = MoreCampaigns(ds, 10, after=s.change_at, **run) if name == "YSB" \
        else KeyShift(ds, KEY_COLUMNS[name], 1000, after=s.change_at, **run)
    run_query(queries.get(name), ds, NullSink(),
              EngineConfig(workers=s.workers, metrics_interval=0.1,
                           adaptive=AdaptivePolicy(stage_seconds=s.stage_seconds,
                                                   trial_tasks=0)),
              source=src, watch=metrics_log(log_path))
    m = read_metrics(log_path)
    samples = m[m["event"] == "sample"] if "event" in m else m
    events = m[m["event"] == "kernel"][["t", "action", "task"]].reset_index(drop=True)
    start = float(m.loc[m["event"] == "start", "wall"].iloc[0]) if "wall" in m else 0.0
    changed = (src.changed_at or float("nan"))
    # the source's clock starts at its first batch, the metrics' at the run's start: close
    after = events[events["t"] >= changed - 0.05]
    deopt = after[after["action"] == "deopt"]["t"].min()
    swap = after[(after["action"] == "swap") & (after["t"] >= (deopt if deopt == deopt else 0))]
    swap_t = swap["t"].min()
    info = {"changed_at": changed, "deopt_at": deopt, "reoptimised_at": swap_t,
            "recovery_s": swap_t - changed, "start_wall": start}
    log(f"{name}: keys changed at {changed:.2f} s, deoptimised at {deopt:.2f} s, "
        f"re-optimised at {swap_t:.2f} s ({(swap_t - changed) * 1e3:.0f} ms after the change)")
    save_tables(out, timeline=samples, kernel_events=events)
    return samples, events, info


def plot_timeline(samples: pd.DataFrame, events: pd.DataFrame, info: dict,
                  output_dir: str | None = None):
    """Grizzly's Fig. 12: throughput over time with the kernel events."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.6))
    rate = samples["tuples_per_s"] / 1e6 if "tuples_per_s" in samples else samples.iloc[:, 0]
    ax.plot(samples["t"], rate, "-", color="tab:blue", label="throughput")
    colors = {"profile": "tab:gray", "optimise": "tab:orange", "swap": "tab:green",
              "deopt": "tab:red"}
    for action, color in colors.items():
        for t in events.loc[events["action"] == action, "t"]:
            ax.axvline(t, color=color, lw=1, alpha=0.8)
        ax.plot([], [], color=color, label=action)
    if info.get("changed_at") == info.get("changed_at"):
        ax.axvline(info["changed_at"], color="black", ls="--", lw=1, label="keys change")
    ax.set_xlabel("seconds")
    ax.set_ylabel("M tuples/s")
    ax.set_title("adaptive kernels across a change of the key range (after Grizzly's Fig. 12)")
    ax.legend(fontsize=8, ncol=3)
    return finish(fig, output_dir, "timeline.png")


# -- Fig. 11: distinct keys, dense array against hash table --------------------------------------
def keys(key_counts: Sequence[int] = (1, 10, 100, 1_000, 10_000, 60_000, 1_000_000, 10_000_000),
         rows: int = 1 << 21, reps: int = 3, output_dir: str | None = None,
         log=print) -> pd.DataFrame:
    """The per-pane aggregation (a sum and a max per key, 1 s panes over 10 s of rows) at
    each number of distinct keys: the hash table's kernel and - up to its limit - the dense
    array's; best of ``reps``.  Saved as ``keys.csv``."""
    from scabbard.kernels.aggregate import DENSE_MAX, MAX, SUM, dense_pane_aggregate, pane_aggregate

    rng = np.random.default_rng(0)
    ts = np.sort(rng.integers(0, 10_000, rows)).astype(np.int64)
    ivals = rng.integers(0, 100, (rows, 1)).astype(np.int64)
    fvals = rng.random((rows, 1))
    iops, fops = np.array([SUM]), np.array([MAX])
    out = []
    for k in key_counts:
        keys_ = rng.integers(0, k, (rows, 1)).astype(np.int64)
        runs = {"hash": lambda keys_=keys_: pane_aggregate(ts, keys_, ivals, fvals, iops, fops,
                                                           1000, ordered=True)}
        if k <= DENSE_MAX:
            runs["dense"] = lambda keys_=keys_, k=k: dense_pane_aggregate(
                ts, keys_, ivals, fvals, iops, fops, 1000, [0], [k])
        for how, fn in runs.items():
            fn()
            best = min(_timed(fn) for _ in range(reps))
            out.append({"keys": k, "aggregation": how, "tuples_per_s": rows / best})
            log(f"{k:>11,} keys  {how:5s} {rows / best / 1e6:8.1f} M tuples/s")
    table = pd.DataFrame(out)
    if output_dir:
        save_tables(output_dir, keys=table)
    return table


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def plot_keys(table: pd.DataFrame, output_dir: str | None = None):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    for how, g in table.groupby("aggregation"):
        ax.plot(g["keys"], g["tuples_per_s"] / 1e6, "o-", label=f"{how}")
    ax.set_xscale("log")
    ax.set_xlabel("distinct keys")
    ax.set_ylabel("M tuples/s (one core)")
    ax.set_title("per-pane aggregation: dense array vs hash table (after Grizzly's Fig. 11)")
    ax.legend(fontsize=8)
    return finish(fig, output_dir, "keys.png")


# -- Fig. 13: the order of two filters -------------------------------------------------------------
def predicates(selectivities: Sequence[float] = (0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99),
               rows: int = 1 << 21, reps: int = 3, cache_dir: str | None = None,
               output_dir: str | None = None, log=print) -> pd.DataFrame:
    """Two filters of one run, ``a`` passing a fraction ``s`` of the rows and ``b`` the
    fraction ``1 - s`` (independently drawn): the generated front kernel with ``a`` first and
    with ``b`` first, best of ``reps``, and the order the instrumented variant's profile
    chooses.  ``b`` reads a column more (an expression of two): the cheaper filter first is
    not always the better one.  Saved as ``predicates.csv``."""
    from scabbard.engine.runtime import default_cache_dir
    from scabbard.kernels.codegen import FrontSpec, compile_front

    cache = Path(cache_dir or default_cache_dir())  # a rerun loads the kernels compiled
    spec = FrontSpec(columns=("x", "y", "z"), relations=(),
                     steps=(("filter", "c_x[i] < qa"), ("filter", "c_y[i] + c_z[i] < qb")),
                     keys=(), ints=("c_x[i]",), floats=())
    rng = np.random.default_rng(0)
    x, y, z = (rng.random(rows) for _ in range(3))
    ts = np.arange(rows, dtype=np.int64)
    out = (np.empty(rows, np.int64), np.empty((rows, 0), np.int64),
           np.empty((rows, 1), np.int64), np.empty((rows, 0), np.float64))
    table = []
    for s in selectivities:
        # y + z < qb passes 1 - s of the rows (the sum of two uniforms: a triangle)
        p = 1 - s
        qb = np.sqrt(2 * p) if p <= 0.5 else 2 - np.sqrt(2 * (1 - p))
        kernels = {}
        for name, steps in (("a first", spec.steps), ("b first", spec.steps[::-1])):
            src = dataclasses.replace(spec, steps=tuple((k, c.replace("qa", repr(float(s)))
                                                         .replace("qb", repr(float(qb))))
                                                        for k, c in steps))
            kernels[name] = compile_front(src, cache)
        prof = dataclasses.replace(spec, profile=True, steps=tuple(
            (k, c.replace("qa", repr(float(s))).replace("qb", repr(float(qb))))
            for k, c in spec.steps))
        counts = np.zeros(4, dtype=np.int64)
        compile_front(prof, cache)(rows, ts, x, y, z, *out, counts)
        picked = "a first" if counts[1] <= counts[3] else "b first"
        row = {"selectivity_a": s, "picked": picked}
        for name, k in kernels.items():
            k(rows, ts, x, y, z, *out)
            row[name] = rows / min(_timed(lambda k=k: k(rows, ts, x, y, z, *out))
                                   for _ in range(reps))
        row["adaptive"] = row[picked]
        table.append(row)
        log(f"a passes {s:4.0%}: a first {row['a first'] / 1e6:7.1f}, b first "
            f"{row['b first'] / 1e6:7.1f} M tuples/s; the profile picks {picked}")
    t = pd.DataFrame(table)
    if output_dir:
        save_tables(output_dir, predicates=t)
    return t


def plot_predicates(table: pd.DataFrame, output_dir: str | None = None):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    for c, style in (("a first", "s--"), ("b first", "^--"), ("adaptive", "o-")):
        ax.plot(table["selectivity_a"], table[c] / 1e6, style, label=c)
    ax.set_xlabel("selectivity of filter a (b passes the rest)")
    ax.set_ylabel("M tuples/s (one core)")
    ax.set_title("the order of two filters (after Grizzly's Fig. 13)")
    ax.legend(fontsize=8)
    return finish(fig, output_dir, "predicates.png")


# -- Fig. 13 on the engine: selectivities that change while the query runs ------------------------
FILTERED = Schema(
    "filters",
    (Field("timestamp", "int64", "event time (ms)"),
     Field("x", "float64", "filter a's input: a passes x < 0.5"),
     Field("y", "float64", "filter b's input: b passes y + z < 1"),
     Field("z", "float64", "both filters' divisor")),
    row_bytes=32,
    description="Fig. 13's stream: two filters whose selectivities change phase by phase",
)
ORDERS = {"adaptive": None, "a first": ("a", "b"), "b first": ("b", "a")}


def two_filters(first: str = "a") -> Query:
    """Fig. 13's query: filters ``a`` (``x < 0.5``) and ``b`` (``y + z < 1``), each computed
    through two divisions and two products (predicates that cost what user-defined ones
    might: on a columnar scan that reads every column anyway, only the cost of evaluating
    the second filter tells the orders apart), ``first`` of them first, then rows and the
    sum of ``x`` per second."""
    x, y, z = col("x"), col("y"), col("z")

    def dear(v):  # v, through two divisions and two products
        return v / (z + 1.0) * (z + 1.0) / (z + 2.0) * (z + 2.0)
    a, b = dear(x) < 0.5, dear(y + z) < 1.0
    q = Query.stream(FILTERED, "filters")
    for p in ((a, b) if first == "a" else (b, a)):
        q = q.where(p)
    return (q.window(1).aggregate(count().alias("rows"), sum_("x").alias("x_sum"))
            .named(f"FIG13-{first}", f"two filters, {first} first; rows and sum of x per second"))


class Selectivities:
    """Fig. 13's stream, generated once per phase (``rows`` rows each, replayed): in phase
    ``k`` filter ``a`` passes a fraction ``phases[k]`` of the rows and ``b`` the rest
    (``1 - phases[k]``, drawn independently), for ``phase_rows`` rows; ``rate`` rows per ms of
    event time.  The phases change by rows, not by time, so runs in any order see the same
    data (``changed``: the wall time, from the first batch, each phase began at)."""

    def __init__(self, phases: Sequence[float], phase_rows: int, rows: int = 1 << 21,
                 batch_rows: int = 1 << 18, rate: int = 10_000, seed: int = 0):
        if not phases or not all(0 <= s <= 1 for s in phases):
            raise ValueError(f"selectivities between 0 and 1, got {list(phases)}")
        if rows % batch_rows or phase_rows % batch_rows or phase_rows <= 0:
            raise ValueError("rows and phase_rows must be positive multiples of batch_rows")
        rng = np.random.default_rng(seed)
        self.schema, self.batch_rows, self.phase_rows = FILTERED, batch_rows, phase_rows
        self.phases, self.rows = tuple(float(s) for s in phases), rows
        self.ts = np.arange(rows, dtype=np.int64) // rate
        self.span = int(self.ts[-1]) + 1
        self.blocks = []
        for s in self.phases:
            u = rng.random((3, rows))
            x = np.where(rng.random(rows) < s, 0.5 * u[0], 0.6 + 0.5 * u[0])
            y = np.where(rng.random(rows) < 1 - s, 0.5 * u[1], 1.1 + 0.5 * u[1])  # (no
            # sum near 1, where the divisions' rounding could tip it)
            self.blocks.append((x, y, 0.5 * u[2]))
        self.changed: list[float] = []
        self._stop = False

    def stop(self) -> None:
        self._stop = True

    def peek(self) -> Batch:
        return self._batch(0)

    def _batch(self, offset: int) -> Batch:
        phase = min(offset // self.phase_rows, len(self.phases) - 1)
        lo, copy = offset % self.rows, offset // self.rows
        cols = (self.ts[lo:lo + self.batch_rows],
                *(c[lo:lo + self.batch_rows] for c in self.blocks[phase]))
        return ReplayBatch(self.schema, cols, offset, copy * self.span) if copy \
            else Batch(self.schema, cols, offset)

    def batches(self) -> Iterator[SourceBatch]:
        t0, total = time.perf_counter(), self.phase_rows * len(self.phases)
        for seq, offset in enumerate(range(0, total, self.batch_rows)):
            if self._stop:
                return
            if offset % self.phase_rows == 0:
                self.changed.append(time.perf_counter() - t0)
            yield SourceBatch(seq, self._batch(offset), time.perf_counter())


def reacting(phases: Sequence[float] = (0.05, 0.95, 0.05), phase_rows: int = 1 << 30,
             workers: int = 2, orders: Sequence[str] = tuple(ORDERS), rows: int = 1 << 21,
             batch_rows: int = 1 << 18, output_dir=None,
             log=print) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Fig. 13 on the engine: :func:`two_filters` over :class:`Selectivities` (filter ``a``
    passing ``phases[k]`` of the rows in phase ``k``, ``b`` the rest), run with adaptive
    kernels and with each fixed order (the generic kernels: the query's order): the
    throughput over time of each run (metrics samples, ``order`` column), the adaptive run's
    kernel events (the filter order each swap put in), and when each phase began in each run
    (``rows``, ``batch_rows``: :class:`Selectivities`'). Saved as ``reacting.csv`` and
    ``reacting_events.csv``."""
    from scabbard.engine import Engine
    from scabbard.outputs import metrics_log, read_metrics

    bad = [o for o in orders if o not in ORDERS]
    if bad:
        raise ValueError(f"unknown order {bad[0]!r} (choose from {', '.join(ORDERS)})")
    src = Selectivities(phases, phase_rows, rows=rows, batch_rows=batch_rows)
    samples, events, changed = [], pd.DataFrame(), {}
    with tempfile.TemporaryDirectory(prefix="scabbard-fig13-") as tmp:
        for name in orders:
            first = "a" if ORDERS[name] is None else ORDERS[name][0]
            adaptive = AdaptivePolicy() if ORDERS[name] is None else None
            engine = Engine(two_filters(first), {}, EngineConfig(
                workers=workers, batch_rows=src.batch_rows, adaptive=adaptive,
                metrics_interval=0.1))
            path = Path(tmp) / f"{first}-{name}.jsonl"
            src.changed = []
            report = engine.run(src, NullSink(), engine.metrics(metrics_log(path)))
            m = read_metrics(path)
            s = m[m["event"] == "sample"].assign(order=name)
            samples.append(s)
            changed[name] = list(src.changed)
            if adaptive is not None and "action" in m:
                events = m[m["event"] == "kernel"].reset_index(drop=True)
            log(f"{name:9s} {report.summary.tuples_per_s / 1e6:8.1f} M tuples/s over the "
                f"phases {', '.join(f'{s:.0%}' for s in phases)} (a's selectivity)")
    table = pd.concat(samples, ignore_index=True)
    if output_dir:
        save_tables(output_dir, reacting=table, reacting_events=events)
    return table, events, changed


def plot_reacting(table: pd.DataFrame, events: pd.DataFrame, changed: dict,
                  output_dir: str | None = None):
    """Fig. 13 over time: each run's throughput, the adaptive run's swaps (with the filter
    order they put in), the variants its cost watch took back, and its phases' starts."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.6))
    for name, g in table.groupby("order", sort=False):
        ax.plot(g["t"], g["tuples_per_s"] / 1e6, "-", label=name, lw=1.5 if name == "adaptive"
                else 1, alpha=1 if name == "adaptive" else 0.7)
    for t in changed.get("adaptive", [])[1:]:
        ax.axvline(t, color="black", ls="--", lw=1)
    if len(events) and "action" in events:
        for _, e in events[events["action"] == "swap"].iterrows():
            order = (e.get("plan") or {}).get("filter_order") if isinstance(e.get("plan"), dict) \
                else None
            ax.axvline(e["t"], color="tab:green", lw=1, alpha=0.8)
            ax.annotate("b first" if order and order[0] != 0 else "a first", (e["t"], 0),
                        xycoords=("data", "axes fraction"), fontsize=7, rotation=90,
                        va="bottom", ha="right", color="tab:green")
        for t in events.loc[events["action"].isin(["slower", "deopt"]), "t"]:
            ax.axvline(t, color="tab:red", lw=1, alpha=0.8)
        ax.plot([], [], color="tab:green", label="swap (order)")
        ax.plot([], [], color="tab:red", label="slower: profiled anew")
    ax.set_xlabel("seconds (dashed: the selectivities change in the adaptive run)")
    ax.set_ylabel("M tuples/s")
    ax.set_title("two filters whose selectivities change (after Grizzly's Fig. 13)")
    ax.legend(fontsize=8)
    return finish(fig, output_dir, "reacting.png")
