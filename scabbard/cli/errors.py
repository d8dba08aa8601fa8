"""The command line's errors: every user error is one line, ``scabbard: error: ...``.

:class:`CLIError` is a :class:`scabbard.errors.UserError` raised by the commands themselves
(flags that contradict each other, a value out of range); every other error of the package
derives from :class:`scabbard.errors.ScabbardError` too, and ``main`` prints each the same way.
"""

from __future__ import annotations

from scabbard.errors import EXIT_FAILURE, EXIT_USAGE, UserError

__all__ = ["EXIT_FAILURE", "EXIT_USAGE", "CLIError"]


class CLIError(UserError):
    """A user error of a command, with its exit status (2 unless ``code`` says otherwise)."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.exit_code = code

    @property
    def code(self) -> int:
        return self.exit_code
