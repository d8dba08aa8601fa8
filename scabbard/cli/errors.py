"""The command line's errors: every user error is one line, ``scabbard: error: ...``.

:class:`CLIError` (:class:`scabbard.errors.FlagError`) is a :class:`scabbard.errors.UserError`
raised by the commands themselves (flags that contradict each other, a value out of range);
every other error of the package derives from :class:`scabbard.errors.ScabbardError` too, and
``main`` prints each the same way.
"""

from __future__ import annotations

from scabbard.errors import EXIT_FAILURE, EXIT_USAGE, FlagError

__all__ = ["EXIT_FAILURE", "EXIT_USAGE", "CLIError"]

CLIError = FlagError
