"""The one kind of error every subcommand turns into one line on stderr and exit code 2."""

from __future__ import annotations


class UsageError(ValueError):
    """Bad input from the user (argument, file, unreachable service); the message is one line naming it."""
