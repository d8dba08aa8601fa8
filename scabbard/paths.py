"""Where the workbench's files are, whatever the current folder: one place decides.

* :func:`home` - the project folder: ``$SCABBARD_HOME`` when set (the one variable the
  workbench reads), else the source checkout this package runs from (an editable install,
  as ``make setup`` makes: the folder holding ``pyproject.toml``, ``notebooks/`` and
  ``scabbard/``), else ``~/scabbard``.
* Under it: the datasets (:func:`data_root`, ``data/``), the runs and reports
  (:func:`runs_root`, ``experiments/runs/``), default storage folders (:func:`storage_root`)
  and the notebooks (:func:`notebooks_dir`).  A notebook opened in JupyterLab writes its
  tables and figures to :func:`lab_output` (``experiments/runs/lab/<notebook>/``), never
  into ``notebooks/``.
* Files shipped inside the package (:func:`resource`): the simulator's calibration
  (``calibration.json``) and the experiments' parameter files (``experiments/*.yaml``).
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from scabbard.errors import UserError

HOME_VARIABLE = "SCABBARD_HOME"


def _checkout() -> Path | None:
    """The source checkout holding this package, if it runs from one."""
    root = Path(__file__).resolve().parents[1]
    if (root / "pyproject.toml").is_file() and (root / "notebooks").is_dir():
        return root
    return None


def home() -> Path:
    """The project folder (``$SCABBARD_HOME``, else the checkout, else ``~/scabbard``)."""
    given = os.environ.get(HOME_VARIABLE)
    if given:
        path = Path(given).expanduser().resolve()
        if not path.is_dir():
            raise UserError(f"{HOME_VARIABLE}={given}: no such folder")
        return path
    return _checkout() or Path.home() / "scabbard"


def data_root(given: str | Path | None = None) -> Path:
    """``given`` if not None, else the project's dataset root, ``<home>/data``."""
    return Path(given) if given is not None else home() / "data"


def runs_root(given: str | Path | None = None) -> Path:
    """``given`` if not None, else where runs and reports go, ``<home>/experiments/runs``."""
    return Path(given) if given is not None else home() / "experiments" / "runs"


def storage_root() -> Path:
    """Default parent of the storage folders of runs not given one, ``<home>/storage``."""
    return home() / "storage"


def notebooks_dir() -> Path:
    """The figure notebooks, ``<home>/notebooks``."""
    return home() / "notebooks"


def lab_output(notebook: str) -> Path:
    """Where a notebook run by hand saves its tables and figures."""
    return runs_root() / "lab" / notebook


def notebook_dirs(notebook: str, data_dir: str | Path | None,
                  output_dir: str | Path | None) -> tuple[str, str]:
    """A notebook's ``data_dir`` and ``output_dir`` parameters resolved: the values
    papermill injected, else the project's data root and :func:`lab_output`."""
    out = Path(output_dir) if output_dir is not None else lab_output(notebook)
    out.mkdir(parents=True, exist_ok=True)
    return str(data_root(data_dir)), str(out)


def resource(name: str) -> Path:
    """A file shipped inside the package (``scabbard/resources/<name>``)."""
    return Path(str(resources.files("scabbard.resources").joinpath(name)))


def calibration() -> Path:
    """The simulator's calibration: this machine's (:func:`local_calibration`, written by
    ``scabbard sim calibrate`` / ``make sim``) when there is one, else the one shipped with
    the package (measured on another machine, maybe: the simulator says so)."""
    local = local_calibration()
    return local if local.is_file() else shipped_calibration()


def shipped_calibration() -> Path:
    """The calibration shipped in the package (``sim calibrate --replace-shipped`` writes it)."""
    return resource("calibration.json")


def local_calibration() -> Path:
    """Where ``scabbard sim calibrate`` writes this machine's calibration."""
    return home() / "experiments" / "calibration.json"


def spark_cluster() -> Path:
    """The local Spark standalone cluster's folder (``scabbard spark up|down|status``),
    ``<home>/spark-cluster``: the same cluster whatever folder a command runs in."""
    return home() / "spark-cluster"
