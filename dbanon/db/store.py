"""The private store (schema `dbanon_store`, migration 0012): the relations behind released views.

Consumers read a release through a view in its target schema that selects everything from one
relation here (dbanon.lifecycle.swap). This module looks those links up in PostgreSQL's catalog.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from dbanon.db.catalog import STORE_SCHEMA


@dataclass(frozen=True)
class Released:
    """A relation in a release schema, as the catalog has it now."""

    oid: int
    schema: str
    name: str
    kind: str  # pg_class.relkind

    @property
    def ident(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.name)

    @property
    def keyword(self) -> sql.SQL:
        return sql.SQL({"v": "VIEW", "m": "MATERIALIZED VIEW"}.get(self.kind, "TABLE"))


def find(conn: psycopg.Connection, schema: str, name: str) -> Released | None:
    row = conn.execute(
        """SELECT c.oid, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = %s AND c.relname = %s""",
        [schema, name],
    ).fetchone()
    return Released(row[0], schema, name, row[1]) if row else None


def behind(conn: psycopg.Connection, view: Released) -> list[Released]:
    """The store relations a released view reads: what goes when the view is re-pointed."""
    if view.kind != "v":
        return []
    rows = conn.execute(
        """SELECT DISTINCT c.oid, c.relname, c.relkind FROM pg_rewrite rw
           JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = rw.oid
                           AND d.refclassid = 'pg_class'::regclass
           JOIN pg_class c ON c.oid = d.refobjid
           JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE rw.ev_class = %s AND c.oid <> %s AND n.nspname = %s""",
        [view.oid, view.oid, STORE_SCHEMA],
    ).fetchall()
    return [Released(oid, STORE_SCHEMA, name, kind) for oid, name, kind in rows]


def dependents(conn: psycopg.Connection, rel: Released) -> list[str]:
    """Objects built over a relation or its row type, each as `what name (owner role)`: what
    would stop a DROP of it. A view's own rule and the relation's own type are not counted."""
    rows = conn.execute(
        """WITH target AS (
               SELECT 'pg_class'::regclass AS cls, %(oid)s::oid AS id
               UNION ALL SELECT 'pg_type'::regclass, reltype FROM pg_class WHERE oid = %(oid)s),
           dep AS (
               SELECT DISTINCT d.classid, d.objid FROM pg_depend d JOIN target t
                   ON d.refclassid = t.cls AND d.refobjid = t.id
               WHERE d.deptype = 'n')
           SELECT CASE
                      WHEN dep.classid = 'pg_rewrite'::regclass THEN
                          CASE c.relkind WHEN 'm' THEN 'materialized view ' ELSE 'view ' END
                          || c.oid::regclass::text
                      WHEN dep.classid = 'pg_proc'::regclass THEN
                          'function ' || p.oid::regprocedure::text
                      ELSE pg_describe_object(dep.classid, dep.objid, 0)
                  END,
                  coalesce(pg_get_userbyid(c.relowner), pg_get_userbyid(p.proowner))
           FROM dep
           LEFT JOIN pg_rewrite rw ON dep.classid = 'pg_rewrite'::regclass AND rw.oid = dep.objid
           LEFT JOIN pg_class c ON c.oid = rw.ev_class
           LEFT JOIN pg_proc p ON dep.classid = 'pg_proc'::regclass AND p.oid = dep.objid
           WHERE c.oid IS DISTINCT FROM %(oid)s
           ORDER BY 1""",
        {"oid": rel.oid},
    ).fetchall()
    return [f"{what} (owner {owner})" if owner else what for what, owner in rows]


def live(conn: psycopg.Connection, schema: str, name: str) -> bool:
    """Whether a released relation computes from the source when read (a live view): a view that
    reads a view in the store, or, made before the store, none of it."""
    rel = find(conn, schema, name)
    if rel is None or rel.kind != "v":
        return False
    stored = behind(conn, rel)
    return not stored or any(s.kind == "v" for s in stored)
