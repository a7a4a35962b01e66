"""Errors a user can act on: the CLI prints the message on one line and exits 2."""


class DbanonError(Exception):
    """Bad input or a state the user must fix; the message names the table/column/value."""


class ModelViolation(DbanonError):
    """A release failed its privacy check and was not made visible."""


def first_line(error: BaseException) -> str:
    """The first line of an error's message (PostgreSQL's come with DETAIL and HINT lines)."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


SHOWN_OFFENDERS = 5  # errors name this many offending columns or values, then a count


def offenders(items: list[str]) -> str:
    """`'a', 'b', 'c'` or `'a', 'b', ... (12 in all)`: every culprit named, within reason."""
    shown = ", ".join(repr(i) for i in items[:SHOWN_OFFENDERS])
    return shown if len(items) <= SHOWN_OFFENDERS else f"{shown}, ... ({len(items)} in all)"
