"""``scabbard reproduce``: execute the figure notebooks with papermill and write a report.

Each experiment is a parameter file shipped with the package,
``scabbard/resources/experiments/<name>.yaml``::

    notebook: 00_datasets.ipynb        # in the project's notebooks/ folder
    title: Benchmark datasets (Table 3)
    expected_s: {tiny: 40, small: 170}  # how long it took here (the first estimate)
    scales:                            # one parameter set per scale
      tiny:  {workloads: [cm, sg], scale: tiny}
      small: {...}
      full:  {...}

A run executes the selected experiments in name order into
``<runs>/<stamp>-<scale>/<name>/`` (the executed notebook, its HTML rendering and whatever
the notebook saves there: ``results.csv``, figures, subfolders), concatenates every
``results.csv`` into the run's ``results.csv`` and writes the report, ``index.html``
(:mod:`scabbard.experiments.report`).  Two parameters are always injected: ``output_dir``
(the experiment's folder) and ``data_dir`` (the dataset root).  While it runs, a line per
notebook gives the time so far and about what is left (from the times of the last run at
this scale, else ``expected_s``), and the lines the notebook prints follow it.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from scabbard import paths
from scabbard.errors import UserError
from scabbard.experiments.progress import Progress, Step, clock, guesses_from
from scabbard.progress import BATCH
from scabbard.usage import Usage

USAGE = Usage(  # scabbard reproduce
    "run the figure notebooks with papermill and write a report",
    "Execute the figure notebooks (parameters per scale: the package's experiments/*.yaml) "
    "with papermill into OUTPUT/<stamp>-<scale>/: per notebook the executed notebook, its HTML "
    "rendering with the figures inline, its tables and figures; an index.html with every "
    "figure of every notebook, each notebook's key table, the machine and the date.  A line "
    "per notebook tells the time so far and about what is left.",
    "How long it takes here (2 cores): tiny about 20 minutes (--jobs 2), small 1 h 35 min "
    "(measured in one run), full several hours; see the README.  A peer a notebook compares "
    "with (the broker, Flink) that is not installed is skipped with a note in the notebook.")

SCALES = ("tiny", "small", "full")
DEFAULT_GUESS_S = {"tiny": 60.0, "small": 300.0, "full": 1200.0}


class ExperimentError(UserError, ValueError):
    """A parameter file is malformed or names something that does not exist."""


@dataclass(frozen=True)
class Experiment:
    name: str
    title: str
    notebook: Path
    scales: dict
    expected_s: dict

    def parameters(self, scale: str) -> dict:
        if scale not in self.scales:
            raise ExperimentError(
                f"experiment {self.name!r} has no {scale!r} parameters "
                f"(has: {', '.join(self.scales)})"
            )
        return dict(self.scales[scale] or {})

    def guess_s(self, scale: str) -> float:
        return float(self.expected_s.get(scale, DEFAULT_GUESS_S[scale]))


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

    @property
    def ok(self) -> bool:
        """Every notebook ran."""
        return all(r.ok for r in self.results)

    def summary(self) -> str:
        """``scabbard reproduce``'s last lines: the run folder, a line per notebook (ok or
        FAILED with its error, seconds, output folder), the report's page."""
        lines = [f"\nrun folder: {self.run_dir}"]
        for r in self.results:
            lines.append(f"  {r.name:<28} {'ok' if r.ok else 'FAILED':<7} {r.seconds:7.1f} s  "
                         f"{r.output}")
            if not r.ok:
                lines.append(f"    {r.error}")
        lines.append(f"report:     {self.run_dir / 'index.html'}")
        return "\n".join(lines)


def load_experiments(root: Path | None = None) -> dict[str, Experiment]:
    """All parameter files shipped with the package, by name; their notebooks are looked up
    in ``root/notebooks`` (default: the project folder, :func:`scabbard.paths.home`)."""
    notebooks = Path(root) / "notebooks" if root is not None else paths.notebooks_dir()
    import yaml  # here: the command line reads this module's USAGE on every command

    folder = paths.resource("experiments")
    found = {}
    for path in sorted(folder.glob("*.yaml")):
        try:
            spec = yaml.safe_load(path.read_text())
        except yaml.YAMLError as e:
            raise ExperimentError(f"{path}: not valid YAML ({e})") from None
        if not isinstance(spec, dict) or "notebook" not in spec or "scales" not in spec:
            raise ExperimentError(f"{path}: needs 'notebook' and 'scales'")
        notebook = (notebooks / spec["notebook"]).resolve()
        if not notebook.is_file():
            raise ExperimentError(f"{path.name}: notebook {notebook} does not exist (the "
                                  f"notebooks are in the project folder: set "
                                  f"{paths.HOME_VARIABLE} to a checkout)")
        unknown = set(spec["scales"]) - set(SCALES)
        if unknown:
            raise ExperimentError(f"{path}: unknown scales {sorted(unknown)} (use {SCALES})")
        found[path.stem] = Experiment(path.stem, spec.get("title", path.stem), notebook,
                                      spec["scales"], dict(spec.get("expected_s") or {}))
    return found


class _Lines:
    """A file-like object papermill writes a notebook's stdout to: each line to ``log``."""

    def __init__(self, log: Callable[[str], None], prefix: str = "    | "):
        self.log, self.prefix, self.tail = log, prefix, ""

    def write(self, text: str) -> int:
        self.tail += text
        *lines, self.tail = self.tail.replace("\r", "\n").split("\n")
        for line in lines:
            if line.strip():
                self.log(self.prefix + line.rstrip())
        return len(text)

    def flush(self) -> None:
        pass


def run_experiment(exp: Experiment, scale: str, out_dir: Path, data_dir: Path,
                   cwd: Path, log: Callable[[str], None] | None = None) -> Result:
    """Execute one notebook with papermill into ``out_dir`` and render it to HTML there;
    with ``log``, the lines the notebook prints go to it as they come."""
    import papermill as pm

    from scabbard.experiments.report import render_notebook

    out_dir.mkdir(parents=True, exist_ok=True)
    output = out_dir / exp.notebook.name
    params = exp.parameters(scale)
    params.update(output_dir=str(out_dir.resolve()), data_dir=str(Path(data_dir).resolve()))
    start = time.perf_counter()
    error = ""
    was = os.environ.get(BATCH)
    os.environ[BATCH] = "1"  # the kernel inherits it: no progress widgets in the report
    try:
        pm.execute_notebook(
            str(exp.notebook), str(output), parameters=params, kernel_name="python3",
            cwd=str(cwd), progress_bar=False, log_output=False,
            stdout_file=_Lines(log) if log else None,
        )
    except Exception as e:  # papermill wraps the cell's error; keep its first line
        msg = str(e).strip().splitlines()
        error = next((m for m in msg if "Error" in m), msg[0] if msg else repr(e))
    finally:
        if was is None:
            os.environ.pop(BATCH, None)
    seconds = time.perf_counter() - start
    if output.is_file():
        try:
            render_notebook(output)
        except Exception as e:  # noqa: BLE001 - the report says it; the run is not lost
            error = error or f"rendering {output.name} to HTML failed: {e}"
    return Result(exp.name, not error, seconds, output, error)


def reproduce(
    root: Path | None = None,
    only: list[str] | None = None,
    scale: str = "small",
    runs_dir: Path | None = None,
    data_dir: Path | None = None,
    log: Callable[[str], None] = lambda s: None,
    jobs: int = 1,
) -> Report:
    """Run the selected experiments and write the report; return the run folder and one
    result per experiment.

    ``root``: the project folder holding ``notebooks/`` (default :func:`paths.home`);
    ``runs_dir``: where the run folder goes (default ``experiments/runs`` there);
    ``data_dir``: the dataset root (default ``data`` there).  ``jobs``: notebooks executed
    at once, each by its own process.  One by default: the notebooks measure throughput,
    and two at once share the machine's cores."""
    from scabbard.experiments.report import machine, write_index

    if jobs < 1:
        raise ExperimentError(f"jobs must be at least 1, got {jobs}")
    if scale not in SCALES:
        raise ExperimentError(f"unknown scale {scale!r} (use {', '.join(SCALES)})")
    root = Path(root).resolve() if root is not None else paths.home()
    experiments = load_experiments(root)
    if not experiments:
        raise ExperimentError(f"no parameter files in {paths.resource('experiments')}")
    names = sorted(experiments) if not only else list(only)
    unknown = [n for n in names if n not in experiments]
    if unknown:
        raise ExperimentError(
            f"unknown experiment(s) {unknown} (have: {', '.join(sorted(experiments))})"
        )
    for name in names:  # a malformed parameter set fails before any notebook runs
        experiments[name].parameters(scale)
    runs = paths.runs_root(runs_dir)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = runs / f"{stamp}-{scale}"
    run_dir.mkdir(parents=True, exist_ok=False)
    data_dir = paths.data_root(data_dir)
    before = machine()
    history = runs / f"reproduce-steps-{scale}.json"  # what each notebook took last time
    progress = Progress(guesses_from([Step(n, "notebook", experiments[n].guess_s(scale))
                                      for n in names], history), log)
    log(f"[reproduce] {len(names)} notebooks at scale {scale} into {run_dir}; about "
        f"{clock(progress.left_s())} in all, as first guessed"
        + (f" from the last run ({history.name})" if history.exists() else ""))
    done: dict[str, Result] = {}

    def finished(res: Result) -> None:
        log(f"[reproduce] {res.name}: {'ok' if res.ok else 'FAILED'} in {clock(res.seconds)}"
            + ("" if res.ok else f" - {res.error}"))
        done[res.name] = res

    if jobs == 1:
        for name in names:
            progress.start(name)
            log(f"    {experiments[name].title}")
            finished(_run_one(experiments[name], scale, run_dir, data_dir, root, log))
        progress.finish()
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            pending = [pool.submit(_run_one, experiments[n], scale, run_dir, data_dir, root)
                       for n in names]
            log(f"[reproduce] {len(names)} experiments, {jobs} at a time, scale {scale} ...")
            for f in as_completed(pending):
                finished(f.result())
    results = [done[name] for name in names]
    if jobs == 1:  # the next run's estimates (a failed notebook's time would mislead them)
        _remember(history, {r.name: progress.took[r.name] for r in results if r.ok})
    _collect_results(run_dir, results)
    write_index(run_dir, scale, results, experiments, before, machine())
    log(f"[reproduce] done in {clock(progress.elapsed_s)}; report: {run_dir / 'index.html'}")
    return Report(run_dir, tuple(results))


def _remember(history: Path, took: dict[str, float]) -> None:
    """Add the seconds each notebook took to ``history`` (those of other notebooks stay)."""
    import json

    try:
        known = json.loads(history.read_text())
    except (OSError, ValueError):
        known = {}
    known.update({k: round(v, 1) for k, v in took.items()})
    history.write_text(json.dumps(known, indent=1, sort_keys=True))


def _run_one(exp: Experiment, scale: str, run_dir: Path, data_dir: Path, root: Path,
             log: Callable[[str], None] | None = None) -> Result:
    try:
        return run_experiment(exp, scale, run_dir / exp.name, data_dir, root, log)
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
