"""How a generalised numeric or date value reads in a release: text for people, or a typed range.

`--ranges text` (the default) releases `60`, `36-37`, `1990-01-01..1990-06-30`: analysts read
released values, and a text column groups, sorts and exports as it reads. `--ranges typed`
releases PostgreSQL ranges for consumers who compute with them (`@>`, `lower()`, `&&`); a column
type always maps to the same range type, whichever method published it.
"""

from __future__ import annotations

from psycopg import sql

from dbanon.db.catalog import Column

RANGE_FORMS = ("text", "typed")
DEFAULT_FORM = "text"

# Range type of a column type (format_type() prefix); anything else numeric is numrange.
RANGE_TYPES = {
    "smallint": "int4range",
    "integer": "int4range",
    "bigint": "int8range",
    "date": "daterange",
    "timestamp without time zone": "tsrange",
    "timestamp with time zone": "tstzrange",
}
# Between the two ends of a text range: '-' for numbers, '..' where the values hold '-' (dates).
_TEXT_SEPARATOR = {"daterange": "..", "tsrange": "..", "tstzrange": ".."}


def range_type(col: Column) -> str:
    return RANGE_TYPES.get(col.type, "numrange")


def _text(col: Column, x: sql.Composable) -> sql.Composable:
    """A value as text; numerics without trailing zeros (2.50 -> 2.5)."""
    if range_type(col) == "numrange":
        return sql.SQL("trim_scale({}::numeric)::text").format(x)
    return sql.SQL("{}::text").format(x)


def closed_range(
    col: Column, low: sql.Composable, high: sql.Composable, form: str
) -> sql.Composable:
    """The released value of [low, high] (both included) of a numeric or date QI."""
    rt = range_type(col)
    if form == "typed":
        cast = "::numeric" if rt == "numrange" else ""
        return sql.SQL("{rt}({lo}{c}, {hi}{c}, '[]')").format(
            rt=sql.SQL(rt), lo=low, hi=high, c=sql.SQL(cast)
        )
    sep = _TEXT_SEPARATOR.get(rt, "-")
    return sql.SQL("CASE WHEN {lo} = {hi} THEN {l} ELSE {l} || {sep} || {h} END").format(
        lo=low, hi=high, l=_text(col, low), h=_text(col, high), sep=sql.Literal(sep)
    )
