"""Every notebook runs, through `scabbard reproduce`, with tiny parameters."""

from pathlib import Path

import nbformat
import pytest

from scabbard import workloads
from scabbard.experiments.reproduce import load_experiments, reproduce

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = load_experiments(ROOT)


def test_every_notebook_is_run_by_an_experiment_with_tiny_parameters():
    notebooks = {p.resolve() for p in (ROOT / "notebooks").glob("*.ipynb")}
    covered = {e.notebook for e in EXPERIMENTS.values()}
    assert notebooks, "no notebooks"
    assert notebooks == covered, f"notebooks without a parameter file: {notebooks - covered}"
    for exp in EXPERIMENTS.values():
        assert "tiny" in exp.scales, f"{exp.name} has no tiny parameters for the test suite"


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.stem)
def test_notebooks_are_thin_and_parameterised(path):
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters' (papermill)"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.get("outputs") for c in code), "commit notebooks without outputs"
    assert max(len(c.source.splitlines()) for c in code) <= 15, "logic belongs in the package"


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_every_parameter_an_experiment_sets_is_one_its_notebook_declares(name):
    """papermill injects a parameter the notebook never declared without a word, and the
    notebook then runs with its default: every scale's parameters must be declared."""
    import ast

    exp = EXPERIMENTS[name]
    nb = nbformat.read(exp.notebook, as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    declared = {n.id for node in ast.parse(cell.source).body if isinstance(node, ast.Assign)
                for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    for scale in exp.scales:
        unknown = set(exp.parameters(scale)) - declared - {"output_dir", "data_dir"}
        assert not unknown, f"{name} {scale}: {sorted(unknown)} not in the parameters cell"


@pytest.fixture(scope="module")
def tiny_run(tiny, data_root, tmp_path_factory):
    """One `scabbard reproduce --scale tiny --jobs 2` of every experiment, shared by the tests
    below (two at a time: much of a notebook's time is its kernel starting and importing)."""
    return reproduce(root=ROOT, scale="tiny", runs_dir=tmp_path_factory.mktemp("runs"),
                     data_dir=data_root, jobs=2)


@pytest.mark.notebooks
@pytest.mark.slow
@pytest.mark.long
@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_notebook_runs_at_tiny_scale(name, tiny_run):
    (result,) = [r for r in tiny_run.results if r.name == name]
    assert result.ok, result.error
    assert result.output.is_file()
    assert (tiny_run.run_dir / "index.html").is_file()
    executed = nbformat.read(result.output, as_version=4)
    errors = [o for c in executed.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors


@pytest.mark.notebooks
@pytest.mark.slow
@pytest.mark.long
def test_datasets_notebook_summarises_all_six(tiny, tiny_run):
    import pandas as pd

    table = pd.read_csv(tiny_run.run_dir / "results.csv")
    table = table[table["experiment"] == "00_datasets"]
    assert sorted(table["workload"]) == sorted(workloads.NAMES)  # Table 3's six
    assert list(table.set_index("workload").loc[list(workloads.NAMES), "checksum"]) == [
        tiny[name].checksum[:23] for name in workloads.NAMES
    ]
    assert (tiny_run.run_dir / "00_datasets" / "datasets.png").stat().st_size > 10_000
    assert "datasets.png" in (tiny_run.run_dir / "index.html").read_text()


def test_reproduce_rejects_unknown_experiments_and_scales(tmp_path):
    from scabbard.experiments.reproduce import ExperimentError

    with pytest.raises(ExperimentError, match="unknown experiment"):
        reproduce(root=ROOT, only=["nope"], runs_dir=tmp_path)
    with pytest.raises(ExperimentError, match="unknown scale"):
        reproduce(root=ROOT, scale="huge", runs_dir=tmp_path)
    with pytest.raises(ExperimentError, match="jobs must be at least 1"):
        reproduce(root=ROOT, jobs=0, runs_dir=tmp_path)


@pytest.mark.notebooks
@pytest.mark.slow
@pytest.mark.long
def test_the_report_renders_every_notebook_and_shows_every_figure(tiny_run):
    from scabbard.experiments.report import figures

    page = (tiny_run.run_dir / "index.html").read_text()
    assert "load average" in page and "scale <b>tiny</b>" in page
    for r in tiny_run.results:
        rendered = r.output.with_suffix(".html")
        assert rendered.is_file() and "<img" in rendered.read_text(), r.name
        assert f'href="{r.name}/{rendered.name}"' in page
        for fig in figures(r.output.parent):  # subfolders too (04: one per restart kind)
            assert str(fig.relative_to(tiny_run.run_dir)) in page, fig
    assert "04_recovery/cold_restart/recovery.png" in page


def test_reproduce_shows_progress_with_an_estimate(tmp_path, monkeypatch):
    """One line per notebook with the time so far and what is left, and the notebook's own
    lines after it (here: an experiment whose notebook fails at once, so nothing runs)."""
    from scabbard.experiments import reproduce as rep

    lines = []
    monkeypatch.setattr(rep, "run_experiment", lambda exp, scale, out, data, cwd, log: (
        log("    | a line the notebook printed"),
        rep.Result(exp.name, True, 1.0, out / exp.notebook.name))[1])
    report = reproduce(root=ROOT, only=["05_compression_tradeoffs", "10_aligned_checkpoints"],
                       scale="tiny", runs_dir=tmp_path, log=lines.append)
    assert [r.ok for r in report.results] == [True, True]
    starts = [line for line in lines if line.startswith("[1/2") or line.startswith("[2/2")]
    assert len(starts) == 2 and all("elapsed, about" in s and "left]" in s for s in starts)
    assert "    | a line the notebook printed" in lines
    assert (report.run_dir / "index.html").is_file()
    assert (tmp_path / "reproduce-steps-tiny.json").is_file()  # the next run's estimates


def test_the_report_summary_lists_each_notebook_and_the_report(tmp_path):
    from scabbard.experiments.reproduce import Report, Result

    ok = Result("00_datasets", True, 12.34, tmp_path / "00")
    bad = Result("05_x", False, 1.0, tmp_path / "05", "boom")
    text = Report(tmp_path, (ok, bad)).summary()
    assert text.splitlines() == [
        "", f"run folder: {tmp_path}",
        f"  00_datasets                  ok         12.3 s  {tmp_path / '00'}",
        f"  05_x                         FAILED      1.0 s  {tmp_path / '05'}", "    boom",
        f"report:     {tmp_path / 'index.html'}"]
    assert not Report(tmp_path, (ok, bad)).ok and Report(tmp_path, (ok,)).ok
