"""``scabbard``: the workbench's command line (``scabbard --help`` lists its commands).

Every subcommand has ``--help``.  Errors print one line, ``scabbard: error: ...``,
and exit non-zero (2 for bad input, 1 for failures while running).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from scabbard import __version__
from scabbard.cli.errors import EXIT_FAILURE, EXIT_USAGE, CLIError
from scabbard.errors import ScabbardError

__all__ = ["EXIT_FAILURE", "EXIT_USAGE", "CLIError", "Parser", "build_parser", "main"]


# -- main --------------------------------------------------------------------------------------
class Parser(argparse.ArgumentParser):
    """Every command's parser (subcommands' parsers take its class): a mistaken command, flag
    or value is one line, ``scabbard: error: ...``, exit 2 - argparse's own would print the
    whole usage before it."""

    def error(self, message: str):
        print(f"scabbard: error: {' '.join(message.split())} (see: {self.prog} --help)",
              file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser.  ``command``: the one that will run (its group's heavy
    modules - the benchmarks' experiments, the simulator's validation, the crash-state
    explorer - are imported only when it is that group, so that the engine's restart after a
    crash does not load pandas; ``run`` builds its own parser alone)."""
    parser = Parser(
        prog="scabbard",
        description="Scabbard workbench: fault-tolerant single-node stream processing.",
    )
    parser.add_argument("--version", action="version", version=f"scabbard {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from scabbard.cli import run

    run.add_run(sub)
    if command == "run":  # an engine process, a recovery's too: no other command's modules
        return parser
    run.add_ingest(sub)
    run.add_explain(sub)
    from scabbard.cli import bench, data, datagen, demo, reproduce

    datagen.add(sub, full=command in (None, "datagen"))
    data.add(sub)
    reproduce.add(sub)
    demo.add(sub)
    bench.add(sub, full=command in (None, "bench"))
    from scabbard.cli import check, sim, spark  # light: SimPy, Spark load on use

    sim.add_parser(sub, full=command in (None, "sim"))
    check.add_parser(sub, full=command in (None, "check"))
    spark.add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from scabbard.engine import memory

    memory.tune()  # before any thread allocates: one malloc arena (engine/memory.py)
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(next((w for w in words if not w.startswith("-")), ""))
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ScabbardError as e:  # CLIError and every error of the package a person can act on
        print(f"scabbard: error: {e.one_line()}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("scabbard: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of the output left (``| head``): end quietly
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as e:  # a full disk, a failed write, a missing folder ...
        where = f" ({e.filename})" if e.filename else ""
        print(f"scabbard: error: {e.strerror or e}{where}", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
