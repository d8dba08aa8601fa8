"""``scabbard bench kills``: a long kill campaign over the queries, both exactly-once sinks,
and the data reductions.

Each *configuration* - a query, a sink, with or without persistence push-up and a
compression scheme, with or without p-streams on the edges between operators - runs as its own engine process (:class:`Controller`), paced so
that its input lasts the campaign's kills; every incarnation is sent ``SIGKILL`` after
a random life, restarted with ``--recover`` until the input is consumed, and the
committed output is compared with a failure-free run of the same query on the same
input.  One row per configuration: kills, results compared, lost, duplicated, different.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from scabbard import paths, queries, workloads
from scabbard.engine import CollectSink, run_query
from scabbard.experiments import Common
from scabbard.ft.controller import Controller, campaign_config
from scabbard.ft.modes import EXACTLY_ONCE_SINKS

RESTART_S = 3.0  # about what an incarnation takes to start and recover on this machine
MAX_RESULTS = 3_000_000  # the failure-free output is held and compared in memory


@dataclass(frozen=True)
class Config:
    query: str
    sink: str = "clocked"
    push_up: bool = False
    compression: str = "none"
    persist_at: tuple[str, ...] = ()  # p-streams between operators (every edge, or none)
    checkpoint_mode: str = "full"

    @property
    def name(self) -> str:
        extra = (["push-up"] if self.push_up else []) + (
            [self.compression] if self.compression != "none" else []) + (
            ["p-streams on every edge"] if self.persist_at else []) + (
            [self.checkpoint_mode] if self.checkpoint_mode != "full" else [])
        return " ".join([self.query, self.sink] + extra)


@dataclass(frozen=True)
class Settings(Common):
    queries: Sequence[str] = field(default=queries.NAMES)
    sinks: Sequence[str] = EXACTLY_ONCE_SINKS
    kills: int = 23  # per configuration (11 queries x 2 sinks x 23 = 506)
    reduce_every: int = 3  # every that many configurations: push-up + a compression scheme
    # that scheme: the adaptive and the default one in turn ("alternate"), or always one
    reduced_with: str = "alternate"
    scale: str = "tiny"
    rate: float = 300_000.0  # input tuples/s of every run
    interval: float = 0.2
    min_life: float = 1.0
    max_life: float = 3.5
    batch: int = 4000
    seed: int = 0
    work: str = field(default_factory=lambda: str(paths.runs_root() / "kills"))
    # queries of several operators: p-streams on every edge between them on every other
    # configuration ("alternate"), on all ("all"), or on none
    placements: str = "alternate"
    assembly: str = "auto"  # every incarnation's --assembly
    # every incarnation's --ingress-partitions, in turn (a recovery then reads the source with
    # another number than the run it continues); empty: the engine's default
    ingress: Sequence[int] = ()
    checkpoint_mode: str = "full"  # of every configuration: full, incremental or eventual
    state_memory: int | None = None  # every incarnation's --state-memory (state spilled)
    darwin_keys: int | None = None  # DARWIN's dataset generated with this many keys
    adaptive_kernels: bool = False  # every incarnation's --adaptive-kernels (variant swaps)
    # the adaptive compression's decision interval in every incarnation: well within its life,
    # so that specialised codecs, their fallbacks and swaps are in the p-streams it leaves
    # (the engine's default, 4 s, is longer than most lives: they persisted the first codecs)
    compression_interval: float = 0.5

    def __post_init__(self) -> None:
        from scabbard.ft.panes import MODES

        if self.checkpoint_mode not in MODES:
            raise ValueError(f"checkpoint_mode must be one of {', '.join(MODES)}, got "
                             f"{self.checkpoint_mode!r}")
        if self.kills < 1 or self.reduce_every < 1:
            raise ValueError("kills and reduce_every must be >= 1")
        if self.reduced_with not in ("alternate", "adaptive", "default"):
            raise ValueError(f"reduced_with must be alternate, adaptive or default, got "
                             f"{self.reduced_with!r}")
        if self.placements not in ("alternate", "all", "none"):
            raise ValueError(f"placements must be alternate, all or none, got "
                             f"{self.placements!r}")
        if not 0 < self.min_life <= self.max_life:
            raise ValueError(f"need 0 < min_life <= max_life, got {self.min_life}, "
                             f"{self.max_life}")
        from scabbard.engine import EngineConfig

        object.__setattr__(self, "ingress", tuple(self.ingress))
        for n in self.ingress:
            EngineConfig(ingress_partitions=n)  # a bad number fails before anything runs
        EngineConfig(assembly=self.assembly)
        if self.assembly.startswith("dataflow") and self.placements != "none":
            raise ValueError("a partitioned dataflow persists its input only: --assembly "
                             "dataflow needs --placements none")


def plan(settings: Settings) -> list[Config]:
    """Every query with every sink; push-up and compression on every ``reduce_every``-th
    configuration (the adaptive and the default scheme in turn, or ``reduced_with``); a
    p-stream on every edge between operators of a query with several (LRB1, LRB3, SG3, NQ)
    on every other configuration, or on all, as ``placements`` says."""
    from scabbard.engine import physical

    out = []
    for q in settings.queries:
        edges = tuple(physical.operators(queries.get(q).node))
        for i, sink in enumerate(settings.sinks):
            k = len(out)
            reduce = k % settings.reduce_every == settings.reduce_every - 1
            turn = ("adaptive", "default")[(k // settings.reduce_every) % 2]
            scheme = ("none" if not reduce else turn if settings.reduced_with == "alternate"
                      else settings.reduced_with)
            placed = edges if len(edges) > 1 and (
                settings.placements == "all"
                or (settings.placements == "alternate" and i % 2 == 1)) else ()
            out.append(Config(q, sink, push_up=reduce, compression=scheme, persist_at=placed,
                              checkpoint_mode=settings.checkpoint_mode))
    return out


def run_one(cfg: Config, settings: Settings, rng: random.Random) -> dict:
    name = queries.workload_of(cfg.query)
    if name == "darwin" and settings.darwin_keys is not None:
        ds = workloads.get(name).SPEC.generate(scale=settings.scale, out=settings.data_dir,
                                               options={"keys": settings.darwin_keys})
    else:
        ds = workloads.dataset(name, settings.scale, root=settings.data_dir)
    work = Path(settings.work) / cfg.name.replace(" ", "-")
    shutil.rmtree(work, ignore_errors=True)
    # the input lasts every planned life and restart, so that every kill lands on a run; a
    # query with much output (SG2: a result per plug and second) reads less at a lower rate
    seconds = settings.kills * ((settings.min_life + settings.max_life) / 2 + RESTART_S)
    per_tuple = _results_per_tuple(cfg.query, ds)
    n = max(ds.rows, min(int(settings.rate * seconds), int(MAX_RESULTS / per_tuple)))
    c = Controller(campaign_config(
        cfg.query, ds.path, work, max_tuples=n, batch_rows=settings.batch, rate=n / seconds,
        assembly=settings.assembly, state_memory=settings.state_memory,
        adaptive_kernels=settings.adaptive_kernels,
        push_up=cfg.push_up, compression=cfg.compression,
        compression_interval=settings.compression_interval, persist_at=tuple(cfg.persist_at),
        interval=settings.interval, sink=cfg.sink, checkpoint_mode=cfg.checkpoint_mode),
        ingress_partitions=tuple(settings.ingress))
    camp = c.run([rng.uniform(settings.min_life, settings.max_life)
                  for _ in range(settings.kills)], timeout=4 * seconds + 600)
    v = camp.verdict
    resumed = recoveries(c.metrics_log)
    shutil.rmtree(work, ignore_errors=True)
    return {"configuration": cfg.name, "query": cfg.query, "sink": cfg.sink,
            "push_up": cfg.push_up, "compression": cfg.compression,
            "persist_at": ",".join(cfg.persist_at), "assembly": settings.assembly,
            "ingress": ",".join(map(str, settings.ingress)),
            "checkpoint_mode": cfg.checkpoint_mode, "kills": camp.kills,
            "restarts": camp.restarts, "tuples": n, "rate": round(n / seconds),
            "compared": v.compared, "lost": v.lost,
            "duplicated": v.duplicated, "different": v.different, "ok": v.ok,
            "seconds": round(camp.seconds, 1), **resumed}


def recoveries(metrics_log) -> dict:
    """Of a campaign's recoveries (its metrics log): how many resumed from an eventual step
    after their record (ft/steppoints.py), and the median tuples each replayed."""
    from scabbard.outputs import read_metrics

    try:
        m = read_metrics(metrics_log)
    except FileNotFoundError:
        return {"from_step": 0, "replay_median": None}
    if "phase" not in m:
        return {"from_step": 0, "replay_median": None}
    r = m[(m["event"] == "recovery") & (m["phase"] == "resume")]
    step = r["state_step"].notna().sum() if "state_step" in r else 0
    replay = r["state_replay_tuples"].dropna() if "state_replay_tuples" in r else r[:0]
    return {"from_step": int(step),
            "replay_median": float(replay.median()) if len(replay) else None}


def _results_per_tuple(query: str, ds) -> float:
    """Result rows per input tuple over one pass of the dataset."""
    sink = CollectSink()
    run_query(queries.get(query), ds, sink=sink)
    return max(sink.rows, 1) / ds.rows


def run(settings: Settings, log=print) -> pd.DataFrame:
    rng = random.Random(settings.seed)
    rows = []
    for cfg in plan(settings):
        r = run_one(cfg, settings, rng)
        rows.append(r)
        steps = (f", {r['from_step']} recoveries from a step"
                 if cfg.checkpoint_mode == "eventual" else "")
        log(f"{cfg.name:38s} kills {r['kills']:4d}  results compared {r['compared']:>10,}  "
            f"lost {r['lost']}  duplicated {r['duplicated']}  different {r['different']}  "
            f"({r['seconds']:.0f} s{steps})")
    return pd.DataFrame(rows)


def headline(runs: pd.DataFrame) -> str:
    return (f"{len(runs)} configurations, {int(runs['kills'].sum()):,} kills, "
            f"{int(runs['compared'].sum()):,} results compared: {int(runs['lost'].sum())} lost, "
            f"{int(runs['duplicated'].sum())} duplicated, {int(runs['different'].sum())} "
            f"different" + ("" if runs["ok"].all() else "  -- MISMATCH"))


def bench(settings: Settings, out: Path, log=print) -> int:
    """``scabbard bench kills``: the campaign, its headline, its runs in ``out``; 1 if any
    configuration lost, duplicated or changed a result."""
    from scabbard.experiments import save_tables

    log(f"{len(plan(settings))} configurations x {settings.kills} kills")
    runs = run(settings, log=log)
    log(headline(runs))
    log(f"results: {save_tables(out, runs=runs)}")
    return 0 if runs["ok"].all() else 1
