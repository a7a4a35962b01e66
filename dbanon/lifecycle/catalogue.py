"""A release's row in the catalog (dbanon.release): reading and writing its spec, and knowing
which relations are its own (the comment every released relation carries)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import psycopg
from psycopg import sql

from dbanon.core.spec import ReleaseSpec
from dbanon.db import catalog
from dbanon.errors import DbanonError, quote_name
from dbanon.methods.base import Resolved


def release_row(conn: psycopg.Connection, name: str) -> tuple[Any, ...] | None:
    return conn.execute(
        "SELECT id, spec, target_schema, objects FROM dbanon.release WHERE name = %s", [name]
    ).fetchone()


def owner_comment(release: str) -> str:
    """How a relation dbanon published starts its comment; proof enough that dbanon made it."""
    return f"dbanon release {quote_name(release)}:"


def owned(conn: psycopg.Connection, release: str, schema: str, name: str) -> bool | None:
    """None if the relation does not exist, else whether it is this release's own."""
    row = conn.execute(
        """SELECT obj_description(c.oid, 'pg_class') FROM pg_class c
           JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s""",
        [schema, name],
    ).fetchone()
    if row is None:
        return None
    return (row[0] or "").startswith(owner_comment(release))


def store_spec(conn: psycopg.Connection, r: Resolved) -> int:
    """Insert or update the release's catalog row with the spec as run."""
    types = {c.name: c.type for c in [r.key, *r.qi, *r.sensitive]}
    spec = ReleaseSpec(
        **{**asdict(r.spec), "options": r.options, "grants": r.grants, "columns": types}
    )
    return conn.execute(
        """INSERT INTO dbanon.release (name, spec, target_schema, target_name, objects)
           VALUES (%s, %s::jsonb, %s, %s, %s)
           ON CONFLICT (name) DO UPDATE SET spec = EXCLUDED.spec, updated_at = now(),
               target_schema = EXCLUDED.target_schema, target_name = EXCLUDED.target_name,
               objects = EXCLUDED.objects
           RETURNING id""",
        [r.spec.name, spec.to_json(), r.target_schema, r.target_name, r.objects],
    ).fetchone()[0]


def load_spec(conn: psycopg.Connection, name: str) -> ReleaseSpec:
    catalog.require_catalog(conn)
    row = conn.execute("SELECT spec FROM dbanon.release WHERE name = %s", [name]).fetchone()
    if not row:
        raise DbanonError(f"release {quote_name(name)} does not exist (see `dbanon releases`)")
    return ReleaseSpec.from_dict(row[0])


def missing(conn: psycopg.Connection, schema: str, objects: Sequence[str]) -> list[str]:
    return [
        catalog.qualified(schema, o) for o in objects
        if catalog.find_relation(conn, f"{schema}.{o}") is None
    ]  # fmt: skip


# The comment on a schema dbanon created for a release's target: what it may drop, empty, with
# the last release there. A schema without it (the DBA's, or made before issue 34) is left.
SCHEMA_MARK = "created by dbanon for its releases; dropped with the last of them when empty"


def mark_schema(conn: psycopg.Connection, schema: str) -> None:
    conn.execute(sql.SQL("COMMENT ON SCHEMA {} IS {}").format(
        sql.Identifier(schema), sql.Literal(SCHEMA_MARK)))  # fmt: skip


def drop_schema_if_ours(conn: psycopg.Connection, schema: str) -> bool:
    """Drop `schema` when dbanon created it (SCHEMA_MARK), no release targets it any more and
    nothing is in it (DROP SCHEMA ... RESTRICT, in a savepoint: an object that appeared keeps
    it). Returns whether it went."""
    ours = conn.execute(
        """SELECT obj_description(n.oid, 'pg_namespace') = %s
                  AND NOT EXISTS (SELECT 1 FROM dbanon.release WHERE target_schema = %s)
           FROM pg_namespace n WHERE n.nspname = %s""",
        [SCHEMA_MARK, schema, schema],
    ).fetchone()
    if not (ours and ours[0]):
        return False
    try:
        with conn.transaction():
            conn.execute(sql.SQL("DROP SCHEMA {} RESTRICT").format(sql.Identifier(schema)))
    except psycopg.errors.DependentObjectsStillExist:
        return False
    return True
