"""``scabbard demo``: the workbench in a few minutes - what ``make demo`` runs."""

from __future__ import annotations

from pathlib import Path

from scabbard.cli.common import add_data_root, data_root, shared_flag
from scabbard.cli.errors import EXIT_FAILURE
from scabbard.progress import say


def add(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="the workbench in a few minutes: a kill recovered exactly once, push-up, 16 cores "
             "simulated - all in a report",
        description=(
            "Generate the datasets it needs (small scale, with Spark; kept for next time), then "
            "run the demo notebook into a report: a query run fault-tolerantly as its own "
            "process, killed with SIGKILL half-way and recovered, its output compared with a "
            "failure-free run (exactly once) and the recovery's phases; persistence push-up "
            "explained, with the bytes persisted per tuple before and after; push-up and "
            "compression measured; the paper's 16-core machine simulated.  Prints the "
            "report's path and the figures in it."),
        epilog="About 3 minutes here after `make setup` (2 cores); the first run also "
               "generates the datasets and compiles the kernels.",
    )
    shared_flag(p, "--scale", choices=("tiny", "small"), help="dataset preset and run lengths "
        "(default: small; tiny: the tests')")
    add_data_root(p)
    shared_flag(p, "--output", metavar="DIR", help="where the report folder goes (default: "
        "experiments/runs in the project folder)")
    p.set_defaults(func=_run_demo)


def _run_demo(args) -> int:
    from scabbard.experiments import demo

    ok = demo.run_demo(args.scale, data_root(args), Path(args.output) if args.output else None,
                       log=say)
    return 0 if ok else EXIT_FAILURE
