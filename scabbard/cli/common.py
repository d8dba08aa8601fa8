"""What several commands share: the names of the things they all take, the dataset a query
runs on, the storage folder.

The same thing has the same flag in every command:

* ``--data-root DIR`` - the folder the datasets live in (``<root>/<workload>/<name>``);
  ``--data DIR`` - one dataset folder;
* ``--output PATH`` - where a command writes what it produces (a results file or folder, a
  report folder, a calibration file);
* ``--duration SECONDS`` - how long a run lasts, in wall-clock seconds; a dataset's
  event-time length is ``--event-seconds``, a simulated run's ``--sim-seconds``;
* ``--sink clocked|transactional`` - the exactly-once sink;
* ``--persist-input`` - the ingress p-stream stores the input.

Older spellings (``--out``, ``--root``, ``--data-dir``, ``--runs-dir``, ``--seconds``,
``--exactly-once``, ``--persist``) still work as hidden aliases, so scripts keep running.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from scabbard import paths
from scabbard.cli.errors import CLIError
from scabbard.ft.flags import parse_bytes  # noqa: F401 (the commands take it from here)


def hidden_alias(p, *flags: str, dest: str, **kw) -> None:
    """Old spellings of a flag: accepted, not shown by ``--help``."""
    p.add_argument(*flags, dest=dest, help=argparse.SUPPRESS, default=argparse.SUPPRESS, **kw)


def add_data_root(p, what: str = "dataset root") -> None:
    p.add_argument("--data-root", metavar="DIR",
                   help=f"{what} (default: data/ in the project folder: ${paths.HOME_VARIABLE}, "
                        "else this checkout)")


def data_root(args) -> Path:
    return paths.data_root(getattr(args, "data_root", None))


def storage_dir(args, query: str) -> Path:
    if args.storage:
        return Path(args.storage)
    return paths.storage_root() / f"{query}-{time.strftime('%Y%m%d-%H%M%S')}"


def verify_mode(args) -> bool | str:
    """The dataset check a command's flags ask for: ``--verify`` every time, ``--no-verify``
    never, else once per change of the dataset's files (:func:`scabbard.data.open_dataset`)."""
    always, never = getattr(args, "verify", False), getattr(args, "no_verify", False)
    if always and never:
        raise CLIError("--verify and --no-verify contradict each other: give one")
    return True if always else False if never else "once"


def query_dataset(args):
    """The dataset ``--data`` names, or the query's small default under the data root
    (generated on first use)."""
    from scabbard import queries, workloads
    from scabbard.data import dataset_path, open_dataset

    workload = queries.workload_of(args.query)
    schema = workloads.get(workload).SCHEMA
    verify = verify_mode(args)
    if args.data:
        ds = open_dataset(args.data, schema=schema, verify=verify)
    else:
        root = data_root(args)
        path = dataset_path(root, workload, "small")
        if not (path / "manifest.json").is_file():
            print(f"{path} not found: generating it (scabbard datagen {workload} --scale small)",
                  flush=True)
            spec = workloads.get(workload).SPEC
            spec.generate(scale="small", out=str(root), log=lambda s: print(s, flush=True))
        ds = open_dataset(path, schema=schema, verify=verify)
    return ds
