"""The README's front door stays true: its Python example runs (on the tiny YSB dataset), its
commands name commands and flags that exist, and every document it links to is there."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_the_readme_stays_a_front_door():
    assert len(README.splitlines()) <= 200
    assert not re.search(r"\bissue \d+", README, re.I)
    for link in re.findall(r"\]\(([^)#]+)\)", README) + re.findall(r'src="([^"]+)"', README):
        assert (ROOT / link).exists(), link


def test_no_document_or_module_names_an_issue_number_or_the_design_draft():
    """Trackers a reader cannot see: the README, docs/, the package (its parameter files
    included) and the notebooks point at docs/design.md instead."""
    package = ROOT / "scabbard"
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
                *sorted(package.rglob("*.py")), *sorted(package.rglob("*.yaml")),
                *sorted((ROOT / "notebooks").glob("*.ipynb"))]:
        text = doc.read_text()
        assert not re.search(r"\bissues? \d+", text, re.I), doc.name
        assert "DESIGN.md" not in text, doc.name


def test_the_readme_python_example_runs(tiny, capsys):
    code = re.search(r"```python\n(.*?)```", README, re.S).group(1)
    code = code.replace('"data/ysb/small"', repr(str(tiny["ysb"].path)))
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "M tuples/s" in out and "views" in out and "ad_id" in out


def _commands():
    for block in re.findall(r"```(?:bash|console)\n(.*?)```", README, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.removeprefix("$ ").split("#")[0].strip().rstrip("&").strip()
            if line.startswith(".venv/bin/scabbard "):
                yield shlex.split(line)[1:]


@pytest.mark.parametrize("argv", list(_commands()), ids=" ".join)
def test_the_readme_commands_parse(argv):
    """Each scabbard command of the README is accepted by the parser (not run)."""
    from scabbard.cli import build_parser

    build_parser().parse_args(argv)
