"""Errors that the CLI reports as one clear line (no traceback)."""


class UserError(Exception):
    """Bad input, a missing file, an unknown option value: the user can fix it."""

    exit_code = 2


class IncompleteInput(UserError):
    """An input was cut off or broken mid-way; what came before it was kept."""

    exit_code = 3
