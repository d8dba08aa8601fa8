"""``scabbard reproduce``: every notebook, executed with papermill, rendered into a report."""

from __future__ import annotations

from pathlib import Path

from scabbard.cli.common import add_data_root, hidden_alias, shared_flag
from scabbard.cli.errors import EXIT_FAILURE
from scabbard.progress import say


# -- reproduce ---------------------------------------------------------------------------------
def add(sub) -> None:
    from scabbard.experiments.reproduce import USAGE

    p = USAGE.parser(sub, "reproduce")
    p.add_argument("--only", action="append", metavar="NAME",
                   help="run only this experiment (repeatable), e.g. 00_datasets")
    shared_flag(p, "--scale", help="parameter set of each experiment (default: small)")
    shared_flag(p, "--output", metavar="DIR", help="where the run folder goes (default: "
        "experiments/runs in the project folder)")
    hidden_alias(p, "--runs-dir", dest="output")
    add_data_root(p, "dataset root passed to the notebooks")
    hidden_alias(p, "--data-dir", dest="data_root")
    p.add_argument("--home", metavar="DIR",
                   help="the project folder holding notebooks/ (default: $SCABBARD_HOME, else "
                        "this checkout)")
    hidden_alias(p, "--root", dest="home")
    p.add_argument("--jobs", type=int, default=1,
                   help="notebooks executed at once (default: 1; more share the cores that the "
                        "notebooks' throughput figures measure)")
    p.set_defaults(func=_run_reproduce)


def _run_reproduce(args) -> int:
    from scabbard.experiments.reproduce import reproduce

    report = reproduce(
        root=Path(args.home) if args.home else None, only=args.only, scale=args.scale,
        runs_dir=Path(args.output) if args.output else None,
        data_dir=Path(args.data_root) if args.data_root else None,
        log=say, jobs=args.jobs,
    )
    print(report.summary())
    return 0 if report.ok else EXIT_FAILURE
