"""What a source must be for a release to be built from it, read from the live catalog and data
before anything is written: a key that reads the same every time, and quasi-identifier values
that are numbers and points in time.

A key computed by a view (`random()`, `row_number() OVER ()`, `id + 0`) is not a row's
identity: the build joins the released groups back to the source by key, and a refresh keeps
rows in their groups by key, so a key that changes between two reads publishes nothing, or
the wrong rows. Only a column of a stored relation (a table, a partitioned, foreign or
materialised one), passed through views unchanged, is accepted. PostgreSQL itself records
where a view's output column comes from (TargetEntry.resorigtbl and resorigcol, set by the
parser only for a plain column reference, through subqueries and joins); that is read from
the view's rewrite rule rather than guessed from its text.

`Infinity`, `NaN` and `infinity` dates are no place on a line: the algorithms measure ranges,
distances and noise on numeric and date quasi-identifiers, and one such value turns every
measure it enters into inf or NaN (a numeric double precision cannot hold stops the build's
cast). They are counted in SQL, one scan, named with their column and rows, and refused
before the build. Types come from a registry (NOT_FINITE), by base type, so a domain over one
is checked too.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from dbanon.db.catalog import Column, Relation, qualified
from dbanon.errors import SHOWN_OFFENDERS, DbanonError, quote_ident

# Relation kinds whose columns hold stored values: a table, a partitioned table, a foreign
# table (the remote's values), a materialised view (its values until the next REFRESH).
STORED = ("r", "p", "f", "m")
MAX_VIEW_DEPTH = 64  # views over views: more than this and something is wrong


@dataclass(frozen=True)
class Probe:
    """A value of a type the algorithms cannot measure: how a message names it, the SQL test of
    a column `{c}` for it, and the server versions that have it."""

    label: str
    test: str
    since: int = 0
    until: int | None = None

    def applies(self, version: int) -> bool:
        return self.since <= version and (self.until is None or version < self.until)


def _equals(value: str, typ: str) -> Probe:
    return Probe(value, f"{{c}} = '{value}'::pg_catalog.{typ}")


# A numeric QI is measured as double precision: one that does not fit it (beyond 1.8e308, or
# so small it would round to 0) stops the build's cast; NaN and the infinities are apart.
_FLOAT8_MAX, _FLOAT8_TINY = "1.7976931348623157e308", "2.4703282292062328e-324"
_BEYOND = f"abs({{c}}) > {_FLOAT8_MAX} OR ({{c}} <> 0 AND abs({{c}}) < {_FLOAT8_TINY})"
NUMERIC_PROBES = (
    Probe("Infinity", "{c} = 'Infinity'::pg_catalog.numeric", since=140000),
    Probe("-Infinity", "{c} = '-Infinity'::pg_catalog.numeric", since=140000),
    _equals("NaN", "numeric"),
    Probe("a value beyond double precision",
          f"{{c}} NOT IN ('NaN', 'Infinity', '-Infinity') AND ({_BEYOND})", since=140000),
    Probe("a value beyond double precision", f"{{c}} <> 'NaN' AND ({_BEYOND})", until=140000),
)  # fmt: skip
# Per base type (a domain's is the type it is over), its values that are no number or no
# point in time (numeric's infinities came with PostgreSQL 14).
NOT_FINITE: dict[str, tuple[Probe, ...]] = {
    "float4": tuple(_equals(v, "float4") for v in ("Infinity", "-Infinity", "NaN")),
    "float8": tuple(_equals(v, "float8") for v in ("Infinity", "-Infinity", "NaN")),
    "numeric": NUMERIC_PROBES,
    **{typ: tuple(_equals(v, typ) for v in ("infinity", "-infinity"))
       for typ in ("date", "timestamp", "timestamptz")},
}  # fmt: skip


# --- the key --------------------------------------------------------------------------------------


def _tokens(text: str) -> Iterator[str]:
    """pg_node_tree's tokens as PostgreSQL's pg_strtok reads them: brackets alone, anything
    else up to white space or a bracket, a backslash taking the next character literally."""
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "(){}":
            yield ch
            i += 1
        else:
            out = []
            while i < n and not text[i].isspace() and text[i] not in "(){}":
                if text[i] == "\\" and i + 1 < n:
                    i += 1
                out.append(text[i])
                i += 1
            yield "".join(out)


def node_tree(text: str) -> Any:
    """A pg_node_tree as Python: `{NODE :field value ...}` a dict (its type under ""), `( )` a
    list, anything else a string; a field of several items (a Datum's bytes) a list of them."""
    tokens = list(_tokens(text))

    def read(pos: int) -> tuple[Any, int]:
        tok = tokens[pos]
        if tok == "{":
            node: dict[str, Any] = {"": tokens[pos + 1]}
            pos += 2
            while tokens[pos] != "}":
                name, pos, items = tokens[pos][1:], pos + 1, []
                while tokens[pos] != "}" and not tokens[pos].startswith(":"):
                    item, pos = read(pos)
                    items.append(item)
                node[name] = items[0] if len(items) == 1 else items
            return node, pos + 1
        if tok == "(":
            items, pos = [], pos + 1
            while tokens[pos] != ")":
                item, pos = read(pos)
                items.append(item)
            return items, pos + 1
        return tok, pos + 1

    return read(0)[0]


def _origin(conn: psycopg.Connection, view: int, attnum: int) -> tuple[int, int] | None:
    """Where output column `attnum` of a view comes from, as PostgreSQL's parser recorded it
    (relation oid, column number), or None when it is computed (an expression, a function's
    or VALUES' column, a UNION, a system column)."""
    row = conn.execute(
        "SELECT ev_action FROM pg_rewrite WHERE ev_class = %s AND rulename = '_RETURN'", [view]
    ).fetchone()
    try:
        query = node_tree(row[0])[0]
        entry = next(
            e for e in query["targetList"]
            if int(e["resno"]) == attnum and e.get("resjunk") != "true"
        )  # fmt: skip
        table, column = int(entry["resorigtbl"]), int(entry["resorigcol"])
    except (TypeError, LookupError, ValueError, StopIteration):
        return None
    return (table, column) if table and column > 0 else None


def require_stable_key(conn: psycopg.Connection, source: Relation, key: Column) -> None:
    """Refuse a key that is not a column of a stored relation passed through unchanged (see the
    module docstring); a table's own key is accepted at once."""
    oid, kind, attnum = conn.execute(
        "SELECT c.oid, c.relkind, a.attnum FROM pg_class c JOIN pg_attribute a "
        "ON a.attrelid = c.oid WHERE c.oid = %s::regclass AND a.attname = %s",
        [source.ident.as_string(conn), key.name],
    ).fetchone()
    name = str(source)
    for _ in range(MAX_VIEW_DEPTH):
        if kind in STORED:
            return
        origin = _origin(conn, oid, attnum) if kind == "v" else None
        if origin is None:
            where = (f"view {source} is computed by the view" if name == str(source)
                     else f"{source} is computed by view {name}")  # fmt: skip
            raise DbanonError(
                f"key column {quote_ident(key.name)} of {where}, not a column of a table: its "
                "values need "
                "not be the same at the next read, so released rows could not be joined back "
                "or kept across refreshes; key the source on a table's key passed through unchanged"
            )
        oid, attnum = origin
        schema, rel, kind = conn.execute(
            "SELECT n.nspname, c.relname, c.relkind FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = %s",
            [oid],
        ).fetchone()
        name = qualified(schema, rel)
    raise DbanonError(f"key column {quote_ident(key.name)} of {source}: views nested too deep to "
        "follow")


# --- the values -----------------------------------------------------------------------------------


def _base_types(
    conn: psycopg.Connection, source: Relation, cols: Sequence[Column]
) -> dict[str, str]:
    """Each column's base type name (a domain's, followed down to the type it is over)."""
    rows = conn.execute(
        """WITH RECURSIVE t(attname, typ) AS (
               SELECT a.attname, a.atttypid FROM pg_attribute a
               WHERE a.attrelid = %s::regclass AND a.attname = ANY(%s)
               UNION ALL
               SELECT t.attname, ty.typbasetype FROM t JOIN pg_type ty ON ty.oid = t.typ
               WHERE ty.typtype = 'd')
           SELECT t.attname, ty.typname FROM t JOIN pg_type ty ON ty.oid = t.typ
           WHERE ty.typtype <> 'd'""",
        [source.ident.as_string(conn), [c.name for c in cols]],
    ).fetchall()
    return dict(rows)


def not_finite(
    conn: psycopg.Connection, source: Relation, cols: Sequence[Column]
) -> list[tuple[str, list[tuple[str, int]]]]:
    """(column, [(value, rows)]) for every column holding a value of NOT_FINITE, in one scan."""
    version = conn.info.server_version
    base = _base_types(conn, source, cols)
    probes = [
        (c, probe)
        for c in cols
        for probe in NOT_FINITE.get(base.get(c.name, ""), ())
        if probe.applies(version)
    ]
    if not probes:
        return []
    counts = conn.execute(
        sql.SQL("SELECT {} FROM {}").format(
            sql.SQL(", ").join(
                sql.SQL("count(*) FILTER (WHERE {})").format(
                    sql.SQL(probe.test).format(c=c.ident)  # a constant of NOT_FINITE
                )
                for c, probe in probes
            ),
            source.ident,
        )
    ).fetchone()
    found: dict[str, list[tuple[str, int]]] = {}
    for (c, probe), n in zip(probes, counts, strict=True):
        if n:
            found.setdefault(c.name, []).append((probe.label, int(n)))
    return list(found.items())


def require_finite(
    conn: psycopg.Connection, source: Relation, cols: Sequence[Column], needs: str
) -> None:
    """Refuse `cols` holding Infinity, NaN or infinity, naming column, value and rows; `needs`
    says who cannot use them."""
    found = not_finite(conn, source, cols)
    if not found:
        return
    parts = [
        f"column {quote_ident(name)}{f' of {source}' if i == 0 else ''} holds "
        + " and ".join(f"{v} ({n} row{'s' if n > 1 else ''})" for v, n in values)
        for i, (name, values) in enumerate(found[:SHOWN_OFFENDERS])
    ]
    more = f", ... ({len(found)} columns in all)" if len(found) > SHOWN_OFFENDERS else ""
    raise DbanonError(
        f"{', '.join(parts)}{more}; {needs} needs finite numbers and dates: filter or replace "
        "those rows (in a view)"
    )
