"""Errors a user can act on: the CLI prints the message on one line and exits 2.

Also how every message names things, so one convention holds everywhere: SQL identifiers
(columns, relations, schemas, roles) as SQL needs them, like PostgreSQL's quote_ident and
psql (`zip`, `"Zip Code"`, `"Bank Data"."Consent Flags"`), so a name can be pasted into psql;
dbanon's own names (releases, hierarchies) single-quoted as SQL literals (`'it''s'`).
"""

import re
from collections.abc import Iterable


class DbanonError(Exception):
    """Bad input or a state the user must fix; the message names the table/column/value."""


class ModelViolation(DbanonError):
    """A release failed its privacy check and was not made visible."""


def first_line(error: BaseException) -> str:
    """The first line of an error's message (PostgreSQL's come with DETAIL and HINT lines)."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


_PLAIN = re.compile(r"[a-z_][a-z0-9_$]*")
# PostgreSQL's reserved key words (Appendix C): quote_ident quotes these too.
_KEY_WORDS = (
    "all analyse analyze and any array as asc asymmetric authorization binary both case cast "
    "check collate collation column concurrently constraint create cross current_catalog "
    "current_date current_role current_schema current_time current_timestamp current_user "
    "default deferrable desc distinct do else end except false fetch for foreign freeze from "
    "full grant group having ilike in initially inner intersect into is isnull join lateral "
    "leading left like limit localtime localtimestamp natural not notnull null offset on only "
    "or order outer overlaps placing primary references returning right select session_user "
    "similar some symmetric system_user table tablesample then to trailing true union unique "
    "user using variadic verbose when where window with"
)
_RESERVED = frozenset(_KEY_WORDS.split())


def quote_ident(name: str) -> str:
    """A name as SQL needs it, like PostgreSQL's quote_ident: bare when it can be, else in
    double quotes (capitals, spaces, quotes, unicode, key words)."""
    if _PLAIN.fullmatch(name) and name not in _RESERVED:
        return name
    return '"' + name.replace('"', '""') + '"'


def qualified(schema: str, name: str) -> str:
    """`schema.name` as SQL needs it."""
    return f"{quote_ident(schema)}.{quote_ident(name)}"


def idents(names: Iterable[str]) -> str:
    """Several identifiers as SQL needs them, comma-separated (`a, "B c"`)."""
    return ", ".join(map(quote_ident, names))


def quote_name(name: str) -> str:
    """One of dbanon's own names (a release, a hierarchy), which is no SQL identifier: in
    single quotes as an SQL literal, so it never reads as a column or relation."""
    return "'" + name.replace("'", "''") + "'"


SHOWN_OFFENDERS = 5  # errors name this many offending columns or values, then a count


def offenders(items: list[str]) -> str:
    """`'a', 'b', 'c'` or `'a', 'b', ... (12 in all)`: every culprit named, within reason."""
    shown = ", ".join(repr(i) for i in items[:SHOWN_OFFENDERS])
    return shown if len(items) <= SHOWN_OFFENDERS else f"{shown}, ... ({len(items)} in all)"
