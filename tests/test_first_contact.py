"""First contact: bad input is one line without a traceback, commands give the same results
from any folder, uuids come out the same way on every output path, paths come from one
place, and the report holds every figure."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scabbard import paths
from scabbard.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def scabbard(*args, cwd, env=None, timeout=600):
    """The command as a person runs it: its own process, from ``cwd``."""
    environ = {k: v for k, v in os.environ.items() if k != paths.HOME_VARIABLE}
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "scabbard", *args], capture_output=True,
                          text=True, cwd=cwd, env=environ, timeout=timeout)


# -- bad input: one line, exit 2 ------------------------------------------------------------------
BAD_INPUTS = [
    (["reproduce", "--only", "nosuch"], "unknown experiment(s) ['nosuch']"),
    (["bench", "engine", "--queries", "FOO"], "unknown query 'FOO'"),
    (["sim", "run", "--query", "FOO"], "unknown query 'FOO'"),
    (["sim", "run", "--query", "CM1", "--cores", "0"], "--cores must be"),
    (["run", "--query", "CM1", "--output", "results.json"], "use a .parquet or .csv"),
    (["run", "--query", "CM1", "--checkpoint-interval", "1", "--storage", "s", "--output",
      "o.parquet"], "exactly-once folder, not a .parquet"),
    (["datagen", "nosuch"], "unknown workload 'nosuch'"),
    (["datagen", "lrb", "--event-seconds", "0"], "--event-seconds must be a positive number"),
    (["demo", "--data-root", "/proc/no/such/place"], "cannot write"),
    (["explain", "--query", "YSB", "--sample", "0"], "--sample must be >= 1"),
]


@pytest.mark.parametrize("args, message", BAD_INPUTS, ids=lambda a: " ".join(a)
                         if isinstance(a, list) else None)
def test_every_bad_input_is_one_line_without_a_traceback(tmp_path, args, message):
    out = scabbard(*args, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("scabbard: error: ") and out.stderr.count("\n") == 1, out.stderr
    assert "Traceback" not in out.stdout
    assert message in out.stderr and "Traceback" not in out.stderr


def _parsers(parser, name="scabbard"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, p in action.choices.items():
                yield from _parsers(p, f"{name} {sub}")


def test_help_shows_percent_signs_once_everywhere():
    for name, parser in _parsers(build_parser()):
        text = parser.format_help()
        assert "%%" not in text and "%(" not in text, name
    assert "80% load" in dict(_parsers(build_parser()))["scabbard bench"].format_help()


def test_old_spellings_still_work_but_are_not_shown():
    p = build_parser()
    a = p.parse_args(["run", "--query", "CM1", "--out", "r.csv", "--exactly-once",
                      "transactional"])
    assert (a.output, a.sink) == ("r.csv", "transactional")
    a = p.parse_args(["reproduce", "--root", "/x", "--runs-dir", "/y", "--data-dir", "/z"])
    assert (a.home, a.output, a.data_root) == ("/x", "/y", "/z")
    a = p.parse_args(["datagen", "lrb", "--out", "/d", "--duration", "5"])
    assert (a.data_root, a.duration) == ("/d", 5.0)
    a = p.parse_args(["sim", "run", "--query", "CM1", "--duration", "3", "--no-persist"])
    assert (a.sim_seconds, a.persist_input) == (3.0, False)
    helps = {name: parser.format_help() for name, parser in _parsers(p)}
    assert "--out " not in helps["scabbard run"] and "--exactly-once" not in helps["scabbard run"]
    assert "--output" in helps["scabbard run"] and "--sink" in helps["scabbard run"]
    for name in ("scabbard datagen", "scabbard data list", "scabbard reproduce",
                 "scabbard bench engine", "scabbard sim calibrate"):
        assert "--data-root" in helps[name], name


# -- the same results from any folder -------------------------------------------------------------
def test_commands_give_the_same_results_from_another_folder(tiny, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    data = str(tiny["ysb"].path)
    for args in (["sim", "run", "--query", "CM1", "--sim-seconds", "1", "--json"],
                 ["explain", "--query", "YSB", "--data", data, "--sample", "20000"],
                 ["run", "--query", "YSB", "--data", data, "--quiet",
                  "--output", str(tmp_path / "{where}.csv")]):
        outs = {}
        for where, cwd in (("root", ROOT), ("elsewhere", elsewhere)):
            out = scabbard(*[a.replace("{where}", where) for a in args], cwd=cwd)
            assert out.returncode == 0, out.stderr
            outs[where] = out.stdout
        if args[0] == "sim":  # the same prediction (the wall time it took aside)
            a, b = (json.loads(o) for o in outs.values())
            assert a["summary"] == b["summary"] and a["hardware"] == b["hardware"]
        elif args[0] == "explain":  # the plans and bytes (the placements' CPU is timed)
            a, b = (o.split("operator graph of")[0] for o in outs.values())
            assert a == b and "bytes persisted per input tuple" in a
    root_csv, other_csv = (pd.read_csv(tmp_path / f"{w}.csv") for w in ("root", "elsewhere"))
    pd.testing.assert_frame_equal(root_csv, other_csv)
    assert list(elsewhere.iterdir()) == []  # nothing written into the current folder


def test_the_project_folder_comes_from_scabbard_home_or_the_checkout(tmp_path, monkeypatch):
    monkeypatch.delenv(paths.HOME_VARIABLE, raising=False)
    assert paths.home() == ROOT and paths.data_root() == ROOT / "data"
    monkeypatch.setenv(paths.HOME_VARIABLE, str(tmp_path))
    assert paths.data_root() == tmp_path / "data"
    assert paths.runs_root() == tmp_path / "experiments" / "runs"
    data, out = paths.notebook_dirs("04_recovery", None, None)
    assert Path(out) == tmp_path / "experiments" / "runs" / "lab" / "04_recovery"
    assert Path(data) == tmp_path / "data" and Path(out).is_dir()
    assert paths.notebook_dirs("x", "/d", "/o") == ("/d", "/o")
    assert paths.calibration().is_file() and paths.resource("experiments").is_dir()
    monkeypatch.setenv(paths.HOME_VARIABLE, str(tmp_path / "missing"))
    from scabbard.errors import UserError

    with pytest.raises(UserError, match="no such folder"):
        paths.home()


def test_the_shipped_files_are_package_data():
    import tomllib

    shipped = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["scabbard.resources"]
    assert {"*.json", "experiments/*.yaml"} <= set(shipped)
    assert (ROOT / "scabbard" / "resources" / "calibration.json").is_file()
    assert not (ROOT / "experiments" / "calibration.json").exists()


def test_notebooks_write_nothing_into_their_folder():
    """Every notebook resolves data_dir and output_dir through scabbard.paths: no default
    points into notebooks/ (papermill sets both; JupyterLab leaves them None)."""
    import nbformat

    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        params = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
        assert "data_dir = None" in params.source and "output_dir = None" in params.source
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        assert f'paths.notebook_dirs("{path.stem}", data_dir, output_dir)' in code, path.name
        assert '"../data"' not in code and 'output_dir = "."' not in code


# -- uuids: the same on every output path ---------------------------------------------------------
@pytest.mark.slow
def test_uuids_are_canonical_strings_on_every_output_path(tiny, tmp_path):
    from scabbard.cli import main
    from scabbard.ft.sinks import read_output

    data = str(tiny["ysb"].path)
    base = ["run", "--query", "YSB", "--data", data, "--quiet"]
    assert main([*base, "--output", str(tmp_path / "r.parquet")]) == 0
    assert main([*base, "--output", str(tmp_path / "r.csv")]) == 0
    assert main([*base, "--checkpoint-interval", "0.2", "--storage", str(tmp_path / "s"),
                 "--output", str(tmp_path / "o")]) == 0
    frames = {"parquet": pd.read_parquet(tmp_path / "r.parquet"),
              "csv": pd.read_csv(tmp_path / "r.csv"),
              "exactly-once": read_output(tmp_path / "o").reset_index(drop=True)}
    keys = ["window_end", "campaign_id"]
    frames = {k: f.sort_values(keys).reset_index(drop=True) for k, f in frames.items()}
    ids = frames["parquet"]["campaign_id"]
    assert len(ids) > 0 and ids.map(type).eq(str).all()
    assert ids.str.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}").all()
    for name, f in frames.items():
        assert f["campaign_id"].map(type).eq(str).all(), name
        pd.testing.assert_frame_equal(f, frames["parquet"], check_dtype=False, obj=name)
    # the Parquet reader of the workbench takes result files back as uuid words
    from scabbard import queries
    from scabbard.data.parquet import read_parquet

    schema = queries.get("YSB").schema
    cols = read_parquet(schema, tmp_path / "r.parquet")
    words = cols[schema.names.index("campaign_id")]
    assert words.shape[1] == 2 and words.dtype == np.uint64


# -- a peer that is not installed: a note, not a failure ------------------------------------------
def test_a_missing_broker_is_skipped_with_a_note(tmp_path, monkeypatch):
    import contextlib

    from scabbard.experiments import ingest
    from scabbard.peers import broker

    monkeypatch.setattr(broker, "installed", lambda: False)
    lines = []
    with contextlib.ExitStack() as stack:
        assert ingest._broker(stack, tmp_path, lines.append) is None
    assert len(lines) == 1 and "skipped" in lines[0] and "make peers" in lines[0]


def test_the_report_reads_notes_tables_and_figures_from_a_notebook(tmp_path):
    import nbformat

    from scabbard.experiments import report

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stdout",
                               text="disk: fine\nnote: Flink-FT is skipped: not installed\n"),
        nbformat.v4.new_output("display_data", data={
            "text/html": "<table border='1' class='dataframe'><tr><td>1</td></tr></table>",
            "text/plain": "x"})]
    nb.cells = [cell]
    path = tmp_path / "n" / "n.ipynb"
    path.parent.mkdir()
    nbformat.write(nb, path)
    (tmp_path / "n" / "sub").mkdir()
    (tmp_path / "n" / "sub" / "f.png").write_bytes(b"png")
    (tmp_path / "n" / "g.svg").write_text("<svg/>")
    assert report.notes(path) == ["note: Flink-FT is skipped: not installed"]
    assert "dataframe" in report.key_table(path)
    assert [p.name for p in report.figures(path.parent)] == ["g.svg", "f.png"]
    html = report.render_notebook(path)
    assert html.is_file() and "dataframe" in html.read_text()
    m = report.machine()
    assert m["cores"] >= 1 and m["date"] and m["cpu"]


# -- interactive charts ----------------------------------------------------------------------------
def test_charts_are_self_contained_html(tmp_path):
    from scabbard.experiments import charts

    table = pd.DataFrame({"cores": [1, 2, 1, 2], "config": ["a", "a", "b", "b"],
                          "tuples_per_s": [1e6, 2e6, 0.5e6, 1e6]})
    chart = charts.throughput_cores(table, title="t")
    page = charts.save(chart, tmp_path, "c")
    text = page.read_text()
    assert "vegaEmbed" in text and "cdn.jsdelivr" not in text and len(text) > 100_000
    spec = chart.to_dict()
    assert any("bind" in p for p in spec.get("params", [])), "zoom and pan are bound"
    assert spec["encoding"]["tooltip"], "hover shows the values"
    assert "vegaEmbed" in charts.show(chart)._repr_html_()


@pytest.mark.spark
@pytest.mark.slow
def test_the_spark_backend_writes_uuids_as_the_engine_does(spark, tiny, tmp_path):
    from scabbard.cli import main

    data = str(tiny["ysb"].path)
    assert main(["run", "--query", "YSB", "--data", data, "--quiet",
                 "--output", str(tmp_path / "engine.parquet")]) == 0
    assert main(["run", "--query", "YSB", "--backend", "spark", "--data", data,
                 "--output", str(tmp_path / "spark.parquet")]) == 0
    engine, peer = (pd.read_parquet(tmp_path / f"{n}.parquet") for n in ("engine", "spark"))
    keys = ["window_end", "campaign_id"]
    engine, peer = (f.sort_values(keys).reset_index(drop=True) for f in (engine, peer))
    assert peer["campaign_id"].map(type).eq(str).all()
    pd.testing.assert_frame_equal(peer, engine, check_dtype=False)


# -- make demo, reduced ------------------------------------------------------------------------------
@pytest.mark.notebooks
@pytest.mark.slow
def test_the_demo_kills_recovers_and_reports(tiny, data_root, tmp_path):
    """``make demo`` at the tiny scale: a report with the verdict, the phases and the figures."""
    out = scabbard("demo", "--scale", "tiny", "--data-root", str(data_root), "--output",
                   str(tmp_path / "runs"), cwd=tmp_path, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = dict(line.split(":", 1) for line in out.stdout.splitlines()
                 if line.startswith(("report:", "notebook:", "figures:")))
    index, notebook = Path(lines["report"].strip()), Path(lines["notebook"].strip())
    assert index.is_file() and notebook.is_file()
    figures = {"recovery.png", "optimization_breakdown.png", "what_if_cores.png"}
    assert figures <= {f.strip() for f in lines["figures"].split(",")}
    page = index.read_text()
    assert all(f"demo/{f}" in page for f in figures) and "load average" in page
    rendered = notebook.read_text()
    assert "kill -&gt; recovered" in rendered or "kill -> recovered" in rendered
    assert "bytes per input tuple" in rendered and "vegaEmbed" in rendered
    verdict = pd.read_csv(index.parent / "demo" / "results.csv")
    assert verdict["exactly_once"].all()
