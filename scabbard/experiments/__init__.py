"""One module per paper figure: typed settings -> a run returning a tidy table -> a plot.

Notebooks in ``notebooks/`` call these and stay thin; ``reproduce`` runs the
notebooks with papermill from the parameter files in ``experiments/``.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


def default_data_dir() -> str:
    """The project's dataset root (``scabbard.paths.data_root``): the default ``data_dir`` of
    every experiment's settings, whatever the current folder."""
    from scabbard import paths

    return str(paths.data_root())


@dataclass(frozen=True, kw_only=True)
class Common:
    """The fields every experiment's ``Settings`` shares: the datasets' scale and where they
    live (keyword-only: each experiment's own fields keep their order before them)."""

    scale: str = "small"
    data_dir: str = field(default_factory=default_data_dir)


@contextmanager
def scratch(folder: str | None, data_dir: str | Path, prefix: str) -> Iterator[Path]:
    """``folder`` if given (kept), else a temporary folder next to the data (removed after):
    storage on the same disk as the data, not in a RAM-backed /tmp."""
    path = Path(folder or tempfile.mkdtemp(prefix=prefix, dir=data_dir))
    path.mkdir(parents=True, exist_ok=True)
    try:
        yield path
    finally:
        if folder is None:
            shutil.rmtree(path, ignore_errors=True)


def interleaved_runs(settings, configs: Sequence[str], prefix: str) -> Iterator[tuple]:
    """Each of ``settings.queries`` (its dataset prepared) in every configuration,
    ``settings.rounds`` times, each round starting one configuration later so that none is
    always first: yields ``(query, dataset, round, config, folder)``, the folder in a scratch
    folder (``settings.storage_dir`` or one beside the data) removed at the end."""
    with scratch(settings.storage_dir, settings.data_dir, prefix) as root:
        for q in settings.queries:
            ds = prepared_dataset(q, settings.scale, settings.data_dir, settings.workers,
                                  settings.seconds)
            for rnd in range(settings.rounds):
                k = rnd % len(configs)
                for config in (*configs[k:], *configs[:k]):
                    yield q, ds, rnd, config, root / f"{q}-{config}"


def save_tables(output_dir: str | Path, **tables) -> Path:
    """Each table as ``<name>.csv`` in ``output_dir`` (created); the first one's path (by
    convention ``results``, the summary a reader opens first)."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, table in tables.items():
        table.to_csv(out / f"{name}.csv", index=False)
    return out / f"{next(iter(tables))}.csv"


def caption(fig, what: str) -> None:
    """A figure's caption, under it: what was measured (``what``: scale, runs, rounds) and
    where and when - this machine's CPU and cores, the date."""
    import datetime

    from scabbard.sim.machine import describe

    m = describe()
    where = f"measured on {m['cpu']}, {m['cores']} cores, {datetime.date.today().isoformat()}"
    fig.text(0.01, 0.005, f"{what} | {where}" if what else where, fontsize=7, color="0.35",
             ha="left", va="bottom")
    fig.subplots_adjust(bottom=0.16)


def finish(fig, output_dir: str | Path | None, name: str, dpi: int = 120):
    """Lay ``fig`` out and, with an ``output_dir``, save it there as ``name`` - with a
    caption naming the machine and the date (:func:`caption`) when it has none yet."""
    if output_dir and not fig.texts:
        caption(fig, "")
    fig.tight_layout(rect=(0, 0.04, 1, 1) if fig.texts else None)
    if output_dir:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        fig.savefig(Path(output_dir) / name, dpi=dpi)
    return fig


def simulated_cores_figure(output_dir: str | Path | None, name: str, title: str, draw):
    """A figure of simulated throughput against cores (log-log, the paper's server and SSD):
    ``draw(ax)`` plots the lines, this labels the axes, titles and saves it."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    draw(ax)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("cores (simulated: the paper's server and SSD, fault tolerance on)")
    ax.set_ylabel("M tuples/s")
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2)
    return finish(fig, output_dir, name)


def prepared_dataset(query: str, scale: str, data_dir: str | Path, workers: int,
                     seconds: float = 1.0):
    """The query's dataset (generated if missing), paged in and the query's compiled code
    loaded by one unmeasured run of up to ``seconds``, so measured runs start warm."""
    from scabbard import queries, workloads
    from scabbard.engine import EngineConfig, NullSink, Replay, run_query

    root = default_data_dir() if data_dir is None else str(data_dir)  # (a notebook's None)
    ds = workloads.dataset(queries.workload_of(query), scale, root=root)
    run_query(queries.get(query), ds, NullSink(), EngineConfig(workers=workers),
              replay=Replay(duration=min(1.0, seconds)))
    return ds


def wide():
    """pandas prints a wide table whole (no wrapping, every column)."""
    import pandas as pd

    return pd.option_context("display.width", 250, "display.max_columns", None)
