"""``scabbard check``: a run's committed output against a failure-free run (``output``),
and the crash states of a fault-tolerant run (``crash-states``).

:func:`add_parser` adds the ``check`` command to the ``scabbard`` parser's subcommands.
"""

from __future__ import annotations

from scabbard.cli.common import shared_flag
from scabbard.cli.settings import settings_flags, settings_from
from scabbard.progress import say


def add_parser(subparsers, full: bool = True) -> None:
    """Add ``check`` to a ``scabbard`` subparsers object; with ``full``, its commands (the
    explorer's settings give ``crash-states`` its flags, so the explorer is imported)."""
    p = subparsers.add_parser("check", help="check the fault-tolerance core beyond a killed process",
                              description="Checks of the fault-tolerance core.")
    sub = p.add_subparsers(dest="check_cmd", required=True, metavar="CHECK")
    if not full:
        return
    from scabbard.check.crashstates import USAGE, Settings
    from scabbard.ft import verify

    c = USAGE.parser(sub, "crash-states")
    shared_flag(c, "--query")
    settings_flags(c, Settings, "sink", "durability", "push_up", "compression",
                   "checkpoint_mode", "state_memory", "ingress_partitions", "tuples",
                   "batch_rows", "every_tasks", "states", "seed", "nested", "file_mib")
    shared_flag(c, "--persist-at", help="p-streams between operators besides the ingress "
        "(operator ids, or output: before the sink), as 'scabbard run --persist-at'")
    shared_flag(c, "--assembly", help="the recorded run's window state, as 'scabbard run "
        "--assembly': dataflow[:P] explores PipeFabric's partitioned dataflow, which auto "
        "chooses only for tasks of 2^19 keys or more (default auto); its output is compared "
        "with the serial engine's")
    shared_flag(c, "--data")
    c.set_defaults(func=_run_crash_states)
    o = verify.USAGE.parser(sub, "output")
    shared_flag(o, "--storage", required=True, help="the run's storage folder (as given to "
        "'scabbard run')")
    shared_flag(o, "--output", metavar="DIR", help="the output folder (default: the one the run "
        "recorded)")
    o.set_defaults(func=_run_output_check)


def _run_output_check(args) -> int:
    from scabbard.ft.verify import verify_run

    check = verify_run(args.storage, args.output)
    print(check)
    return 0 if check.ok else 1


def crash_settings(args):
    """The explorer's settings from ``check crash-states``'s flags."""
    from scabbard.check import Settings

    edges = tuple(e.strip() for e in (args.persist_at or "").split(",")
                  if e.strip() and e.strip() != "ingress")
    return settings_from(Settings, args, persist_at=edges,
                         assembly=args.assembly or Settings.assembly)


def _run_crash_states(args) -> int:
    from scabbard.check.crashstates import explore
    from scabbard.cli.common import query_dataset

    settings = crash_settings(args)
    report = explore(settings, query_dataset(args), log=say)
    print(report.summary())
    return 0 if report.ok else 1
