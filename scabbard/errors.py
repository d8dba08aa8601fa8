"""The errors a person sees: one base class, one line each.

Every error the workbench raises for something a person can fix - a flag out of range, a
query or workload that does not exist, a missing dataset folder, a malformed parameter
file - derives from :class:`UserError`; the command line prints it as one line,
``scabbard: error: ...``, and exits 2.  Failures while running (a full disk, a dead JVM, a
damaged store) derive from :class:`Failure`: one line too, exit 1.  Both are a
:class:`ScabbardError`, the one class ``scabbard.cli.main`` catches.
"""

from __future__ import annotations

EXIT_FAILURE = 1  # a failure while running
EXIT_USAGE = 2  # bad input


class ScabbardError(Exception):
    """An error reported in one line; ``exit_code`` is the command's exit status."""

    exit_code = EXIT_FAILURE

    def one_line(self) -> str:
        return " ".join(str(self).split())


class UserError(ScabbardError):
    """Bad input: the person can fix it (exit 2)."""

    exit_code = EXIT_USAGE


class Failure(ScabbardError):
    """Something failed while running (exit 1)."""


class FlagError(UserError):
    """A command's flags that cannot run - a value out of range, flags that contradict each
    other - with its exit status (2 unless ``code`` says otherwise); the command line's
    ``CLIError``, raised also where flags are read outside it (:mod:`scabbard.ft.command`)."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.exit_code = code

    @property
    def code(self) -> int:
        return self.exit_code
