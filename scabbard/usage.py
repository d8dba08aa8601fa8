"""What a command says of itself: its line in its group's list, its ``--help``'s description
and epilog.  A long one is kept beside the work it describes (``scabbard run``'s in
:mod:`scabbard.ft.command`, the simulator's in :mod:`scabbard.sim.session`, the crash-state
explorer's in :mod:`scabbard.check.crashstates`, ...), as the benchmarks' table keeps theirs
(:mod:`scabbard.experiments.benches`): the command line declares a command's flags and calls
its work, and a change of what the work does is made where its text is.  (``ingest``,
``explain`` and ``demo`` keep theirs in the command line: their work's modules are heavier
to import than a restart after a crash, which reads every command's parser, should pay.)"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Usage:
    """A command's texts: ``summary`` its line in its group's list (and its help's first
    line when it has no ``description``), ``epilog`` what follows its flags."""

    summary: str
    description: str | None = None
    epilog: str | None = None

    def parser(self, sub, name: str):
        """The parser of the command ``name`` in the subparsers ``sub``, with these texts."""
        return sub.add_parser(name, help=self.summary.replace("%", "%%"),
                              description=self.description or
                              self.summary[:1].upper() + self.summary[1:] + ".",
                              epilog=self.epilog)
