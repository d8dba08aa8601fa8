"""``scabbard reproduce``: execute the figure notebooks with papermill.

Each experiment is a parameter file ``experiments/<name>.yaml``::

    notebook: ../notebooks/00_datasets.ipynb     # relative to the YAML file
    title: Benchmark datasets (Table 3)
    scales:                                      # one parameter set per scale
      tiny:  {workloads: [cm, sg], scale: tiny}
      small: {...}
      full:  {...}

A run executes the selected experiments in name order into
``experiments/runs/<stamp>/<name>/`` (the executed notebook, and whatever the
notebook saves there: ``results.csv``, figures), concatenates every
``results.csv`` into the run's ``results.csv`` and writes an ``index.html``.
Two parameters are always injected: ``output_dir`` (the experiment's folder)
and ``data_dir`` (the dataset root).
"""

from __future__ import annotations

import html
import multiprocessing
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import yaml

SCALES = ("tiny", "small", "full")


class ExperimentError(ValueError):
    """A parameter file is malformed or names something that does not exist."""


@dataclass(frozen=True)
class Experiment:
    name: str
    title: str
    notebook: Path
    scales: dict

    def parameters(self, scale: str) -> dict:
        if scale not in self.scales:
            raise ExperimentError(
                f"experiment {self.name!r} has no {scale!r} parameters "
                f"(has: {', '.join(self.scales)})"
            )
        return dict(self.scales[scale] or {})


@dataclass(frozen=True)
class Result:
    name: str
    ok: bool
    seconds: float
    output: Path
    error: str = ""


@dataclass(frozen=True)
class Report:
    run_dir: Path
    results: tuple[Result, ...]


def load_experiments(root: Path) -> dict[str, Experiment]:
    """All parameter files under ``root/experiments``, by name."""
    folder = Path(root) / "experiments"
    found = {}
    for path in sorted(folder.glob("*.yaml")):
        try:
            spec = yaml.safe_load(path.read_text())
        except yaml.YAMLError as e:
            raise ExperimentError(f"{path}: not valid YAML ({e})") from None
        if not isinstance(spec, dict) or "notebook" not in spec or "scales" not in spec:
            raise ExperimentError(f"{path}: needs 'notebook' and 'scales'")
        notebook = (path.parent / spec["notebook"]).resolve()
        if not notebook.is_file():
            raise ExperimentError(f"{path}: notebook {notebook} does not exist")
        unknown = set(spec["scales"]) - set(SCALES)
        if unknown:
            raise ExperimentError(f"{path}: unknown scales {sorted(unknown)} (use {SCALES})")
        found[path.stem] = Experiment(path.stem, spec.get("title", path.stem), notebook,
                                      spec["scales"])
    return found


def run_experiment(exp: Experiment, scale: str, out_dir: Path, data_dir: Path,
                   cwd: Path) -> Result:
    """Execute one notebook with papermill into ``out_dir``."""
    import papermill as pm

    out_dir.mkdir(parents=True, exist_ok=True)
    output = out_dir / exp.notebook.name
    params = exp.parameters(scale)
    params.update(output_dir=str(out_dir.resolve()), data_dir=str(Path(data_dir).resolve()))
    start = time.perf_counter()
    try:
        pm.execute_notebook(
            str(exp.notebook), str(output), parameters=params, kernel_name="python3",
            cwd=str(cwd), progress_bar=False, log_output=False,
        )
    except Exception as e:  # papermill wraps the cell's error; keep its first line
        msg = str(e).strip().splitlines()
        reason = next((m for m in msg if "Error" in m), msg[0] if msg else repr(e))
        return Result(exp.name, False, time.perf_counter() - start, output, reason)
    return Result(exp.name, True, time.perf_counter() - start, output)


def reproduce(
    root: Path = Path("."),
    only: list[str] | None = None,
    scale: str = "small",
    runs_dir: Path | None = None,
    data_dir: Path | None = None,
    log: Callable[[str], None] = lambda s: None,
    jobs: int = 1,
) -> Report:
    """Run the selected experiments; return the run folder and one result per experiment.

    ``jobs``: notebooks executed at once, each by its own process.  One by default: the
    notebooks measure throughput, and two at once share the machine's cores."""
    if jobs < 1:
        raise ExperimentError(f"jobs must be at least 1, got {jobs}")
    root = Path(root).resolve()
    if scale not in SCALES:
        raise ExperimentError(f"unknown scale {scale!r} (use {', '.join(SCALES)})")
    experiments = load_experiments(root)
    if not experiments:
        raise ExperimentError(f"no parameter files in {root / 'experiments'}")
    names = sorted(experiments) if not only else list(only)
    unknown = [n for n in names if n not in experiments]
    if unknown:
        raise ExperimentError(
            f"unknown experiment(s) {unknown} (have: {', '.join(sorted(experiments))})"
        )
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = (runs_dir or root / "experiments" / "runs") / f"{stamp}-{scale}"
    run_dir.mkdir(parents=True, exist_ok=False)
    data_dir = data_dir or root / "data"
    for name in names:  # a malformed parameter set fails before any notebook runs
        experiments[name].parameters(scale)
    done: dict[str, Result] = {}

    def finished(res: Result) -> None:
        log(f"[reproduce] {res.name}: {'ok' if res.ok else 'FAILED'} in {res.seconds:.1f} s")
        done[res.name] = res

    if jobs == 1:
        for name in names:
            log(f"[reproduce] {name} ({experiments[name].title}), scale {scale} ...")
            finished(_run_one(experiments[name], scale, run_dir, data_dir, root))
    else:
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            pending = [pool.submit(_run_one, experiments[n], scale, run_dir, data_dir, root)
                       for n in names]
            log(f"[reproduce] {len(names)} experiments, {jobs} at a time, scale {scale} ...")
            for f in as_completed(pending):
                finished(f.result())
    results = [done[name] for name in names]
    _collect_results(run_dir, results)
    _write_index(run_dir, scale, results, experiments)
    return Report(run_dir, tuple(results))


def _run_one(exp: Experiment, scale: str, run_dir: Path, data_dir: Path, root: Path) -> Result:
    try:
        return run_experiment(exp, scale, run_dir / exp.name, data_dir, root)
    except Exception:  # noqa: BLE001 - reported as the experiment's failure
        return Result(exp.name, False, 0.0, run_dir / exp.name, traceback.format_exc(limit=1))


def _collect_results(run_dir: Path, results: list[Result]) -> None:
    import pandas as pd

    frames = []
    for r in results:
        csv = r.output.parent / "results.csv"
        if csv.is_file():
            df = pd.read_csv(csv)
            df.insert(0, "experiment", r.name)
            frames.append(df)
    if frames:
        pd.concat(frames, ignore_index=True).to_csv(run_dir / "results.csv", index=False)


def _write_index(run_dir: Path, scale: str, results: list[Result], experiments: dict) -> None:
    rows = []
    for r in results:
        folder = r.output.parent
        figures = sorted(p for p in folder.iterdir() if p.suffix in (".png", ".svg", ".html"))
        links = " ".join(
            f'<a href="{html.escape(str(p.relative_to(run_dir)))}">{html.escape(p.name)}</a>'
            for p in [r.output, *figures, folder / "results.csv"] if p.exists()
        )
        imgs = "".join(
            f'<div><img src="{html.escape(str(p.relative_to(run_dir)))}" style="max-width:100%"></div>'
            for p in figures if p.suffix == ".png"
        )
        status = "ok" if r.ok else f"FAILED: {html.escape(r.error)}"
        rows.append(
            f"<h2>{html.escape(r.name)}: {html.escape(experiments[r.name].title)}</h2>"
            f"<p>{status} &middot; {r.seconds:.1f} s &middot; {links}</p>{imgs}"
        )
    page = (
        "<!doctype html><meta charset='utf-8'><title>scabbard reproduce</title>"
        f"<h1>scabbard reproduce &middot; {html.escape(run_dir.name)} &middot; scale {scale}</h1>"
        + "".join(rows)
    )
    (run_dir / "index.html").write_text(page)
