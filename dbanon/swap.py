"""The swap: how a built release becomes what consumers read, so that nothing they build stops it.

A release's relations are built in the private store (`dbanon_store`, never granted). Consumers
read each through a view of the release's name in the target schema, `SELECT * FROM` its
relation in the store. A refresh points that view at the new relation with CREATE OR REPLACE
VIEW, which keeps the view's oid, grants, comment and row type, so every object other roles
built over it (temporary and permanent views, materialised views, functions over its row type
or reading it) keeps working and sees the new release; then it drops the old relation, which
nobody but the view can depend on (a consumer cannot even name it without USAGE on the store).

PostgreSQL refuses CREATE OR REPLACE VIEW only when the columns change (a name, a type, one
fewer: `publish --replace` with another spec). Then the view must be dropped and made again; if
another role's objects depend on it, the run stops naming each object and its owner, and the
previous release stays in place. A release made before the store existed (a table in the target
schema) is replaced by a view the same way at its first refresh.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from dbanon.db.catalog import qualified
from dbanon.db.store import Released, behind, dependents, find
from dbanon.errors import DbanonError


def drop(conn: psycopg.Connection, rel: Released, why: str) -> None:
    """Drop a released relation and what it reads in the store; never what others built on it:
    with dependents, stop naming them (`why`: what the drop is for, for the message)."""
    users = dependents(conn, rel)
    if users:
        raise DbanonError(
            f"{qualified(rel.schema, rel.name)} cannot be {why}: "
            f"{'; '.join(users)} depend{'s' if len(users) == 1 else ''} on it and dbanon drops "
            "only what it made; nothing was changed"
        )
    stored = behind(conn, rel)
    conn.execute(sql.SQL("DROP {} {}").format(rel.keyword, rel.ident))
    for s in stored:
        conn.execute(sql.SQL("DROP {} {}").format(s.keyword, s.ident))


def point(conn: psycopg.Connection, target: sql.Identifier, schema: str, name: str,
          stored: sql.Identifier) -> None:  # fmt: skip
    """Make the view `schema.name` read `stored`: re-pointed in place where PostgreSQL allows
    (same columns: dependents kept), else dropped and made anew (none may depend on it)."""
    view = sql.SQL("VIEW {} AS SELECT * FROM {}").format(target, stored)
    old = find(conn, schema, name)
    if old is not None and old.kind == "v":
        before = behind(conn, old)
        try:
            with conn.transaction():  # a savepoint: a refused replacement is undone alone
                conn.execute(sql.SQL("CREATE OR REPLACE ") + view)
        except psycopg.errors.InvalidTableDefinition as e:  # the columns changed
            drop(conn, old, f"given other columns ({str(e).splitlines()[0]})")
            conn.execute(sql.SQL("CREATE ") + view)
            return
        for s in before:
            conn.execute(sql.SQL("DROP {} {}").format(s.keyword, s.ident))
        return
    if old is not None:  # a table published before the store existed
        drop(conn, old, "replaced by a view")
    conn.execute(sql.SQL("CREATE ") + view)
