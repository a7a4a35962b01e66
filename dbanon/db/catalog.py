"""The live PostgreSQL catalog (relations, columns, roles) and dbanon's own catalog schema.

Names given by users are looked up exactly in pg_catalog and composed into SQL only as
psycopg.sql.Identifier, so capitals, spaces, quotes and unicode in names are harmless.
"""

from __future__ import annotations

import csv
import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.resources import files

import psycopg
from psycopg import sql

from dbanon.core.hierarchy import Hierarchy
from dbanon.errors import DbanonError, qualified, quote_ident, quote_name

NUMERIC, DATE, CATEGORICAL = "numeric", "date", "categorical"


@dataclass(frozen=True)
class Relation:
    """A schema-qualified table or view that exists."""

    schema: str
    name: str
    kind: str = "r"  # pg_class.relkind

    @property
    def ident(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.name)

    @property
    def regclass(self) -> sql.Composable:
        """Its OID as an expression for catalog queries (the server quotes the name)."""
        return sql.SQL("to_regclass(format('%I.%I', {}::text, {}::text))").format(
            sql.Literal(self.schema), sql.Literal(self.name)
        )

    def __str__(self) -> str:
        """As SQL needs it, so a message's name can be pasted into psql (`rel."KM 5"`)."""
        return qualified(self.schema, self.name)


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # format_type(), e.g. 'integer', 'character varying(20)'
    kind: str  # NUMERIC, DATE or CATEGORICAL
    not_null: bool

    @property
    def ident(self) -> sql.Identifier:
        return sql.Identifier(self.name)


def shown(conn: psycopg.Connection, obj: sql.Composable) -> str:
    """A composed name for a message: an Identifier as SQL needs it (`h.ward`, `"Bank Data".t`,
    where psycopg's as_string quotes every part), anything else as the SQL it is."""
    if isinstance(obj, sql.Identifier):
        return ".".join(quote_ident(part) for part in obj._obj)
    return obj.as_string(conn)


def split_name(text: str) -> tuple[str | None, str]:
    """`schema.table` -> (schema, table), taken literally (case, spaces and quotes kept)."""
    schema, dot, name = text.partition(".")
    return (schema, name) if dot else (None, schema)


_SQL_PART = re.compile(r'\s*(?:"((?:[^"]|"")+)"|([A-Za-z_][A-Za-z0-9_$]*))\s*')


def _sql_name(text: str) -> list[str] | None:
    """The parts of a name in SQL syntax (`"a.b"."c"`, `s.t`), or None if it is not one."""
    parts, pos = [], 0
    while True:
        m = _SQL_PART.match(text, pos)
        if m is None:
            return None
        parts.append(
            m.group(1).replace('""', '"') if m.group(1) is not None else m.group(2).lower()
        )
        pos = m.end()
        if pos == len(text):
            return parts
        if text[pos] != ".":
            return None
        pos += 1


def parse_target(text: str) -> tuple[str | None, str]:
    """A relation that may not exist yet, named as `find_relation` reads names: in SQL syntax
    when it holds a double quote and is valid SQL (`"a.b"."c"`), else literally, split at the
    dot (`My Schema.My Table`). More than two parts is an error, never a table named `b.c`."""
    parts = _sql_name(text) if '"' in text else None
    if parts is None:
        parts = text.split(".")
    if len(parts) > 2 or not all(p.strip() for p in parts):
        raise DbanonError(
            f"{text!r} is not SCHEMA.NAME; put a name that holds a dot in double quotes, "
            'as in "my.schema"."my.table"'
        )
    return (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])


def parse_list(text: str) -> list[str]:
    """`a,b,"c, d"` -> ['a', 'b', 'c, d']: column lists, with CSV quoting for odd names. An
    empty item (`a,,b`, a trailing comma) is refused, not dropped: it is a typo more often than
    not, and the column the DBA meant would otherwise go silently undeclared."""
    items = [item.strip() for item in next(csv.reader([text], skipinitialspace=True), [])]
    if "" in items:
        raise DbanonError(f"empty name (item {items.index('') + 1}) in the list {text!r}")
    return items


def find_relation(conn: psycopg.Connection, text: str) -> Relation | None:
    """Look a name up literally (`My Schema.My Table`), then, if it holds a double quote,
    with SQL's rules (`"a.b"."c"`)."""
    base = """SELECT n.nspname, c.relname, c.relkind FROM pg_class c
              JOIN pg_namespace n ON n.oid = c.relnamespace WHERE """
    schema, name = split_name(text)
    if schema is None:  # the first match on the search path
        row = conn.execute(base + "c.oid = to_regclass(quote_ident(%s))", [name]).fetchone()
    else:
        row = conn.execute(base + "n.nspname = %s AND c.relname = %s", [schema, name]).fetchone()
    if row is None and '"' in text:
        try:
            with conn.transaction():  # a savepoint: a syntax error must not undo the caller's work
                row = conn.execute(
                    base
                    + """c.oid = to_regclass(array_to_string(
                        ARRAY(SELECT quote_ident(p) FROM unnest(parse_ident(%s)) p), '.'))""",
                    [text],
                ).fetchone()
        except psycopg.errors.Error:  # not valid SQL name syntax either
            row = None
    return Relation(*row) if row else None


def relation(conn: psycopg.Connection, text: str) -> Relation:
    """The relation named `text`, or a one-line error naming it."""
    rel = find_relation(conn, text)
    if rel is None or rel.kind not in ("r", "v", "m", "p", "f"):
        raise DbanonError(f"relation {_shown(text)} does not exist")
    return rel


def _shown(text: str) -> str:
    """A relation name as given, written as SQL needs it: read the way `find_relation` reads it
    (SQL syntax when it holds a double quote and parses, else literally, split at a dot)."""
    parts = _sql_name(text) if '"' in text else None
    if parts is None or len(parts) > 2:
        parts = list(split_name(text))
    return ".".join(quote_ident(p) for p in parts if p is not None)


def columns(conn: psycopg.Connection, rel: Relation) -> dict[str, Column]:
    """Columns of a relation in order, with the kind dbanon treats them as."""
    rows = conn.execute(
        """SELECT a.attname, format_type(a.atttypid, a.atttypmod), t.typcategory, a.attnotnull
           FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
           WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
           ORDER BY a.attnum""",
        [sql.Identifier(rel.schema, rel.name).as_string(conn)],
    ).fetchall()
    kinds = {"N": NUMERIC, "D": DATE}
    return {r[0]: Column(r[0], r[1], kinds.get(r[2], CATEGORICAL), r[3]) for r in rows}


def require_columns(cols: dict[str, Column], rel: Relation, names: list[str]) -> list[Column]:
    missing = [n for n in names if n not in cols]
    if missing:
        hint = suggest(missing[0], cols)
        raise DbanonError(f"column {quote_ident(missing[0])} does not exist in {rel}{hint}")
    return [cols[n] for n in names]


def suggest(name: str, names: Iterable[str]) -> str:
    """' (did you mean "Age"?)' for the closest existing name, case first, else ''."""
    names = list(names)
    same = [n for n in names if n.lower() == name.lower()]
    close = same or difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return f" (did you mean {quote_ident(close[0])}?)" if close else ""


def count_rows(conn: psycopg.Connection, rel: Relation) -> int:
    return conn.execute(sql.SQL("SELECT count(*) FROM {}").format(rel.ident)).fetchone()[0]


def role_exists(conn: psycopg.Connection, role: str) -> bool:
    return conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role]).fetchone() is not None


def require_role(conn: psycopg.Connection, role: str) -> None:
    """A role a release may be granted to, or a one-line error. PUBLIC (any spelling, as SQL
    reads `TO public`) is no role: a grant to it would let every role of the server, and every
    one created later, read the release; dbanon grants named roles only, and says so."""
    if role.lower() == "public":
        raise DbanonError(
            "PUBLIC is not a role: dbanon grants a release to named roles only (a grant to "
            "PUBLIC would let every role, and every later one, read it); CREATE ROLE a group "
            "role for the readers and grant that"
        )
    if not role_exists(conn, role):
        raise DbanonError(f"role {quote_ident(role)} does not exist")


# --- dbanon's own catalog -------------------------------------------------------------------


def alembic_config(dsn: str):  # noqa: ANN201 - alembic.config.Config, imported late (slow)
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(files("dbanon.migrations")))
    cfg.set_main_option("sqlalchemy.url", dsn.replace("%", "%%"))
    return cfg


def init(dsn: str) -> str:
    """Create or upgrade the catalog schema with Alembic; returns the revision now in place."""
    from alembic import command

    command.upgrade(alembic_config(dsn), "head")
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT version_num FROM dbanon.alembic_version").fetchone()[0]


# The catalog revision this code reads and writes (Alembic's head; a test keeps them equal).
REVISION = "0016"
# The private schema of the relations behind the released views (migration 0012): never granted,
# so no consumer object can depend on a relation a refresh drops.
STORE_SCHEMA = "dbanon_store"


def installed(conn: psycopg.Connection) -> bool:
    return conn.execute("SELECT to_regclass('dbanon.release') IS NOT NULL").fetchone()[0]


def require_catalog(conn: psycopg.Connection) -> None:
    """The catalog is installed and at this code's revision: a clear line, not a missing table."""
    if not installed(conn):
        raise DbanonError("the dbanon catalog is not installed in this database: run `dbanon init`")
    at = conn.execute("SELECT version_num FROM dbanon.alembic_version").fetchone()
    if at is None or at[0] != REVISION:
        raise DbanonError(
            f"the dbanon catalog is at revision {at[0] if at else 'none'}, this dbanon needs "
            f"{REVISION}: run `dbanon init` to upgrade it"
        )


def store_hierarchy(
    conn: psycopg.Connection, h: Hierarchy, *, replace: bool = False, force: bool = False
) -> dict[str, object]:
    """Write a hierarchy into the catalog (nodes and the leaf-to-label map), in the caller's
    transaction. Replacing one that releases use is refused unless `force`; then the version
    they were verified with is retired, not deleted: a live view keeps reading it until its
    release's next refresh takes the new one (dbanon.lifecycle.hierarchy_pins)."""
    require_catalog(conn)
    current = conn.execute(
        "SELECT id, version FROM dbanon.hierarchy WHERE name = %s AND retired_at IS NULL "
        "FOR UPDATE",
        [h.name],
    ).fetchone()
    if current and not replace:
        raise DbanonError(f"hierarchy {quote_name(h.name)} already exists (use --replace)")
    users = hierarchy_users(conn, h.name) if current else []
    result: dict[str, object] = {"name": h.name, "version": h.version, "releases": users}
    if current and current[1] == h.version:
        return {**result, "changed": False}  # the same content: nothing to replace
    if users and not force:
        raise DbanonError(
            f"hierarchy {quote_name(h.name)} is used by release(s) "
            f"{', '.join(map(quote_name, users))}; "
            "--force replaces it: each keeps the version it was verified with until its next "
            "refresh, which takes the new one"
        )
    if current:
        conn.execute(
            "UPDATE dbanon.hierarchy SET retired_at = clock_timestamp() WHERE id = %s",
            [current[0]],
        )
    kept = conn.execute(  # a retired version of the same content, still pinned: current again
        "UPDATE dbanon.hierarchy SET retired_at = NULL WHERE name = %s AND version = %s "
        "RETURNING id",
        [h.name, h.version],
    ).fetchone()
    if kept is None:
        _insert_hierarchy(conn, h)
    collect_hierarchies(conn)
    return {**result, "changed": True}


def _insert_hierarchy(conn: psycopg.Connection, h: Hierarchy) -> None:
    hid = conn.execute(
        "INSERT INTO dbanon.hierarchy (name, height, version) VALUES (%s, %s, %s) RETURNING id",
        [h.name, h.height, h.version],
    ).fetchone()[0]
    with conn.cursor() as cur:
        # Parents first (the root has the highest id), so the self-reference holds row by row.
        with cur.copy(
            "COPY dbanon.hierarchy_node (hierarchy_id, node_id, label, level, parent_id) FROM STDIN"
        ) as copy:
            for node in sorted(range(len(h.labels)), key=lambda i: -h.levels[i]):
                parent = h.parents[node]
                copy.write_row(
                    (hid, node, h.labels[node], h.levels[node], None if parent < 0 else parent)
                )
        with cur.copy(
            "COPY dbanon.hierarchy_map (hierarchy_id, value, level, label) FROM STDIN"
        ) as copy:
            for value, leaf in h.leaves.items():
                for anc in h.ancestors(leaf):
                    copy.write_row((hid, value, h.levels[anc], h.labels[anc]))


def collect_hierarchies(conn: psycopg.Connection) -> int:
    """Delete retired hierarchy versions no release pins any more; returns how many."""
    return conn.execute(
        """DELETE FROM dbanon.hierarchy h WHERE h.retired_at IS NOT NULL
             AND NOT EXISTS (SELECT FROM dbanon.release r
                             WHERE r.hierarchy_versions ->> h.name = h.version)"""
    ).rowcount


def hierarchy_version(conn: psycopg.Connection, name: str) -> str | None:
    """The current version of a stored hierarchy, or None."""
    row = conn.execute(
        "SELECT version FROM dbanon.hierarchy WHERE name = %s AND retired_at IS NULL", [name]
    ).fetchone()
    return row[0] if row else None


def load_hierarchy(conn: psycopg.Connection, name: str, version: str | None = None) -> Hierarchy:
    """The current version of a stored hierarchy, or the given `version` (a release's pin, kept
    while it is pinned) when it is still stored."""
    require_catalog(conn)
    rows = conn.execute(
        """SELECT array_agg(m.label ORDER BY m.level) FROM dbanon.hierarchy_map m
           JOIN dbanon.hierarchy h ON h.id = m.hierarchy_id
           WHERE h.name = %s AND h.id = (
               SELECT id FROM dbanon.hierarchy WHERE name = %s
               ORDER BY version IS NOT DISTINCT FROM %s DESC, retired_at IS NULL DESC LIMIT 1)
           GROUP BY m.value ORDER BY m.value""",
        [name, name, version],
    ).fetchall()
    if not rows:
        raise DbanonError(f"hierarchy {quote_name(name)} does not exist (see `dbanon hierarchy "
            "list`)")
    return Hierarchy.from_rows(name, [r[0] for r in rows])


def list_hierarchies(conn: psycopg.Connection) -> list[dict[str, object]]:
    require_catalog(conn)
    rows = conn.execute(
        """SELECT h.name, h.height, count(*) FILTER (WHERE n.level = 0), count(*), h.created_at,
                  h.version
           FROM dbanon.hierarchy h JOIN dbanon.hierarchy_node n ON n.hierarchy_id = h.id
           WHERE h.retired_at IS NULL GROUP BY h.id ORDER BY h.name"""
    ).fetchall()
    return [
        {
            "name": r[0],
            "height": r[1],
            "leaves": r[2],
            "nodes": r[3],
            "created_at": r[4].isoformat(),
            "version": r[5],
        }
        for r in rows
    ]


def hierarchy_users(conn: psycopg.Connection, name: str) -> list[str]:
    """The releases whose spec names hierarchy `name` for one of their columns, or as a
    parameter of a promised model (the sensitive hierarchy of (θ,k)-anonymity)."""
    rows = conn.execute(
        """SELECT r.name FROM dbanon.release r
           WHERE EXISTS (SELECT FROM jsonb_each_text(r.spec -> 'hierarchies') h
                         WHERE h.value = %(name)s)
              OR EXISTS (SELECT FROM jsonb_array_elements(r.spec -> 'models') m
                         WHERE m ->> 'hierarchy' = %(name)s)
           ORDER BY r.name""",
        {"name": name},
    ).fetchall()
    return [r[0] for r in rows]


def drop_hierarchy(conn: psycopg.Connection, name: str) -> None:
    """Delete a hierarchy, in the caller's transaction; refused while a release uses it."""
    load_hierarchy(conn, name)  # exists, or a one-line error
    users = hierarchy_users(conn, name)
    if users:
        raise DbanonError(
            f"hierarchy {quote_name(name)} is used by release(s) "
            f"{', '.join(map(quote_name, users))}; drop or re-publish them first"
        )
    conn.execute("DELETE FROM dbanon.hierarchy WHERE name = %s", [name])
