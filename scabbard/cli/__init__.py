"""``scabbard``: the workbench's command line.

    scabbard datagen WORKLOAD|all [--scale tiny|small|full] [--duration S] [--rate R] ...
    scabbard run --query Q [--backend scabbard|spark] [--workers N] [--rate R] [--duration S] ...
    scabbard data list|check ...
    scabbard reproduce [--only NAME] [--scale small|full]
    scabbard bench datagen ...
    scabbard check crash-states --query Q [--sink clocked|transactional] [--states N]
    scabbard spark up|down|status [--folder DIR]

Every subcommand has ``--help``.  Errors print one line, ``scabbard: error: ...``,
and exit non-zero (2 for bad input, 1 for failures while running).
"""

from __future__ import annotations

import argparse
import sys

from scabbard import __version__
from scabbard.cli.errors import EXIT_FAILURE, EXIT_USAGE, CLIError, one_line

__all__ = ["EXIT_FAILURE", "EXIT_USAGE", "CLIError", "build_parser", "main"]


# -- main --------------------------------------------------------------------------------------
def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser.  ``command``: the one that will run (its group's heavy
    modules - the benchmarks' experiments - are imported only when it is that group, so
    that the engine's restart after a crash does not load pandas)."""
    parser = argparse.ArgumentParser(
        prog="scabbard",
        description="Scabbard workbench: fault-tolerant single-node stream processing.",
    )
    parser.add_argument("--version", action="version", version=f"scabbard {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from scabbard.cli import bench, data, datagen, reproduce, run

    datagen.add(sub)
    run.add_run(sub)
    run.add_ingest(sub)
    run.add_explain(sub)
    data.add(sub)
    reproduce.add(sub)
    bench.add(sub, full=command in (None, "bench"))
    from scabbard.cli import check, sim, spark  # light: SimPy, Spark load on use

    sim.add_parser(sub)
    check.add_parser(sub)
    spark.add(sub)
    return parser


# Errors that end a command with one line.  Named, not imported: a module that was never
# imported cannot have raised, and importing them all would load Spark and Arrow into every
# command (the engine's restart after a crash among them).
_USAGE_ERRORS = [("scabbard.workloads.generator", "DatagenError"),
                 ("scabbard.workloads", "UnknownWorkloadError"),
                 ("scabbard.schema", "SchemaError"), ("scabbard.query", "QueryError"),
                 ("scabbard.experiments.reproduce", "ExperimentError")]
_FAILURES = [("scabbard.data", "DatasetError"), ("scabbard.sparksession", "JavaNotFoundError"),
             ("scabbard.storage", "StorageError"), ("scabbard.pog", "PStreamError"),
             ("scabbard.pog.checkpoint", "CheckpointError"),
             ("scabbard.sparksession", "SparkMasterError"), ("scabbard.hadoopfs", "SharedFSError"),
             ("scabbard.standalone.daemons", "ClusterError")]


def _loaded(names: list[tuple[str, str]]) -> tuple[type, ...]:
    return tuple(getattr(sys.modules[m], c) for m, c in names if m in sys.modules)


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(next((w for w in words if not w.startswith("-")), ""))
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except CLIError as e:
        print(f"scabbard: error: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        print("scabbard: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        for names, code in ((_USAGE_ERRORS, EXIT_USAGE), (_FAILURES, EXIT_FAILURE)):
            if isinstance(e, _loaded(names)):
                print(f"scabbard: error: {one_line(e)}", file=sys.stderr)
                return code
        if isinstance(e, OSError):  # a full disk, a failed write, a missing folder ...
            where = f" ({e.filename})" if e.filename else ""
            print(f"scabbard: error: {e.strerror or e}{where}", file=sys.stderr)
            return EXIT_FAILURE
        raise



if __name__ == "__main__":
    sys.exit(main())
