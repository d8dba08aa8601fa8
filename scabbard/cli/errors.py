"""The command line's errors: every user error is one line, ``scabbard: error: ...``."""

from __future__ import annotations

EXIT_FAILURE = 1  # a failure while running
EXIT_USAGE = 2  # bad input


class CLIError(Exception):
    """A user error of a command, with its exit status."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.code = code


def one_line(e: BaseException) -> str:
    return " ".join(str(e).split())
