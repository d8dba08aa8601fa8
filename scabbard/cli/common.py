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

Every flag is declared once: a flag several commands take is declared in :data:`SHARED` or,
when it sets a field of a run's configuration (or of the simulator's hardware), in that field
(:mod:`scabbard.ft.flags`), and
each command adds it with :func:`shared_flag`, giving its own default (or a help that says what it
means there) where its use differs.  ``tests/test_structure.py`` holds it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from scabbard import paths
from scabbard.ft.command import storage_dir, verify_mode  # noqa: F401 (the commands')
from scabbard.ft.flags import parse_bytes  # noqa: F401 (the commands take it from here)


def _query_names() -> tuple[str, ...]:
    from scabbard.queries import ALL

    return ALL


CALIBRATION_HELP = ("calibration file (default: this machine's, experiments/calibration.json, "
                    "once `scabbard sim calibrate` made it; else the package's)")
SCALES = ("tiny", "small", "full")

# the flags several commands take that set no field of a run's configuration: name -> a
# function of nothing giving add_argument's keywords (called when a parser is built, so the
# query names are read then)
SHARED = {
    "--query": lambda: dict(required=True, type=str.upper, choices=_query_names(),
                            metavar="QUERY", help=f"one of {', '.join(_query_names())}"),
    "--queries": lambda: dict(nargs="+", type=str.upper, metavar="Q", default=None,
                              help="a subset of the queries"),
    "--data": lambda: dict(metavar="DIR",
                           help="dataset folder (default: <data root>/<workload>/small)"),
    "--output": lambda: dict(metavar="PATH", help="where the command writes what it makes"),
    "--scale": lambda: dict(choices=SCALES, default="small",
                            help="dataset preset: tiny, small or full (default: small)"),
    "--calibration": lambda: dict(default=None, metavar="FILE", help=CALIBRATION_HELP),
    "--sim-seconds": lambda: dict(type=float, metavar="SECONDS", help="simulated seconds"),
    "--tuples": lambda: dict(type=int, help="input tuples"),
    "--keys": lambda: dict(type=int, help="distinct keys"),
    "--event-seconds": lambda: dict(type=float, metavar="SECONDS",
                                    help="event-time length of the dataset in seconds"),
    "--change-at": lambda: dict(type=float, metavar="SECONDS",
                                help="when the data changes its distribution, in seconds"),
    "--seed": lambda: dict(type=int, default=0, help="random seed (default 0)"),
    "--master": lambda: dict(default="local[*]", help="Spark master URL (default: local[*])"),
    "--conf": lambda: dict(action="append", metavar="KEY=VALUE",
                           help="a Spark setting (repeatable), e.g. spark.executor.memory=4g"),
    "--workdir": lambda: dict(metavar="URI", help="spark backend: work folder (checkpoints, "
                              "windows, results) every executor reaches; needed on a cluster; "
                              "resumes"),
    "--verify": lambda: dict(action="store_true", help="also recompute every checksum"),
    "--json": lambda: dict(action="store_true", help="print the result as JSON"),
    "--persist-input": lambda: dict(action="store_true",
                                    help="persist the input in the ingress p-stream"),
    "--persist-at": lambda: dict(metavar="EDGE[,EDGE]",
                                 help="where p-streams sit besides the ingress: operator ids "
                                      "(their output: window0, join0, ...) or output (before "
                                      "the sink), as 'scabbard explain' lists them"),
}


def declared(name: str) -> dict:
    """add_argument's keywords for the shared flag ``name``: from :data:`SHARED`, or the
    field of a run's configuration it sets.  KeyError if neither declares it."""
    if name in SHARED:
        return SHARED[name]()
    from scabbard.ft.config import FTConfig, PersistConfig, RunConfig
    from scabbard.ft.flags import field_flag
    from scabbard.sim.config import Hardware

    kw = field_flag(name, RunConfig, PersistConfig, FTConfig, Hardware)
    if kw is None:
        raise KeyError(f"{name} is declared neither in SHARED nor by a configuration field")
    return kw


def shared_flag(p, name: str, **over) -> None:
    """Add the shared flag ``name`` to parser (or group) ``p``; ``over`` replaces its
    keywords where this command's use differs (its default, its help)."""
    p.add_argument(name, **{**declared(name), **over})


def hidden_alias(p, *flags: str, dest: str, **kw) -> None:
    """Old spellings of a flag: accepted, not shown by ``--help``."""
    p.add_argument(*flags, dest=dest, help=argparse.SUPPRESS, default=argparse.SUPPRESS, **kw)


def add_data_root(p, what: str = "dataset root", metavar: str = "DIR", dest: str = "data_root",
                  default=None) -> None:
    """``--data-root``, the folder the datasets live in (its one declaration)."""
    p.add_argument("--data-root", metavar=metavar, dest=dest, default=default,
                   help=f"{what} (default: data/ in the project folder: ${paths.HOME_VARIABLE}, "
                        "else this checkout)")


def data_root(args) -> Path:
    return paths.data_root(getattr(args, "data_root", None))


def query_dataset(args):
    """The dataset ``--data`` names, or the query's small default under the data root
    (generated on first use): :func:`scabbard.queries.dataset`."""
    from scabbard import queries

    return queries.dataset(args.query, args.data, data_root(args), verify_mode(args))
