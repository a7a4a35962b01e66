"""Remove dbanon from a database: every release (its released relations and catalog entries),
then the catalog itself (Alembic down to base, which drops schema `dbanon`).

Nothing is dropped unless every release's relations are still its own: a relation someone
replaced under a release's name stops the whole uninstall before it starts. A target schema
dbanon created goes with its last release when empty (catalogue.SCHEMA_MARK); the others (the
DBA's, or made before dbanon marked its own) are left in place and listed.
"""

from __future__ import annotations

from typing import Any

import psycopg

from dbanon.db import catalog
from dbanon.errors import DbanonError, quote_name
from dbanon.lifecycle.catalogue import owned
from dbanon.lifecycle.releases import drop


def uninstall(conn: psycopg.Connection, dsn: str) -> dict[str, Any]:
    """Drop every release, then the catalog; returns what went and the schemas left behind."""
    if not catalog.installed(conn):
        conn.rollback()
        raise DbanonError("this database has no dbanon catalog: nothing to uninstall")
    rows = conn.execute(
        "SELECT name, target_schema, objects FROM dbanon.release ORDER BY name"
    ).fetchall()
    for name, schema, objects in rows:
        for obj in objects:
            if owned(conn, name, schema, obj) is False:
                conn.rollback()
                raise DbanonError(
                    f"{catalog.qualified(schema, obj)} is not the relation release "
                    f"{quote_name(name)} "
                    "published; dbanon will not drop it: rename or drop it yourself, then "
                    "uninstall again"
                )
    conn.rollback()
    dropped = {name: drop(conn, name) for name, _, _ in rows}
    from alembic import command

    command.downgrade(catalog.alembic_config(dsn), "base")
    schemas = sorted({schema for _, schema, _ in rows
                      if conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s",
                                      [schema]).fetchone()})  # fmt: skip
    conn.rollback()
    return {"releases": dropped, "catalog": "removed", "schemas_left": schemas}
