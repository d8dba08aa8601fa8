"""Dependencies declared and in step: every package the code imports is declared in
pyproject.toml, and environment.yml (conda) lists the same requirements."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
# import name -> distribution name, where they differ
DISTRIBUTION = {"yaml": "pyyaml", "IPython": "ipython", "PIL": "pillow"}
ELSEWHERE = {"pyflink"}  # the Flink peer's own environment (.venv-flink, scripts/setup-flink.sh)


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~ ;\[]", requirement.strip(), maxsplit=1)[0].lower()


def _requirements(specs) -> dict[str, str]:
    return {_name(r): re.sub(r"\s", "", r) for r in specs}


def _project():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return _requirements(project["dependencies"]), _requirements(
        project["optional-dependencies"]["dev"])


def test_every_third_party_import_of_the_package_is_declared():
    runtime, _ = _project()
    imported = set()
    for path in (ROOT / "scabbard").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    third = imported - set(sys.stdlib_module_names) - {"scabbard"} - ELSEWHERE
    missing = {m for m in third if DISTRIBUTION.get(m, m).lower() not in runtime}
    assert not missing, f"imported but not declared in pyproject.toml: {sorted(missing)}"


def test_environment_yml_lists_what_pyproject_declares():
    runtime, dev = _project()
    env = yaml.safe_load((ROOT / "environment.yml").read_text())["dependencies"]
    conda = [d for d in env if isinstance(d, str)]
    pip = next(d["pip"] for d in env if isinstance(d, dict))
    listed = _requirements([d for d in conda + pip
                            if not d.startswith(("-e", "python=", "openjdk", "pip"))])
    assert listed == runtime | dev
