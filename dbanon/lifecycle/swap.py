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

import time

import psycopg
from psycopg import sql

from dbanon.db import store
from dbanon.db.catalog import qualified
from dbanon.db.store import Released, behind, dependents, find
from dbanon.errors import DbanonError, quote_name
from dbanon.lifecycle import runs
from dbanon.lifecycle.catalogue import owner_comment
from dbanon.methods.base import Built, Resolved


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


SWAP_LOCK_TIMEOUT = "2s"  # per attempt: how long new readers may queue behind the swap


SWAP_PATIENCE = 120.0  # seconds of attempts before the run gives up, the previous release kept


def swap_patiently(conn: psycopg.Connection, r: Resolved, built: list[Built]) -> float:
    """`swap` under a short lock_timeout, retried with backoff; returns the seconds waited.

    A DROP of the previous release waits for every consumer transaction reading it, and while it
    waits every new reader queues behind it: with a short timeout readers stall for at most that
    long per attempt, and the swap tries again once the long reader is gone."""
    started, delay = time.monotonic(), 0.1
    while True:
        try:
            with conn.transaction():  # a savepoint: a timed-out attempt is undone alone
                old = conn.execute("SELECT current_setting('lock_timeout')").fetchone()[0]
                conn.execute("SELECT set_config('lock_timeout', %s, true)", [SWAP_LOCK_TIMEOUT])
                swap(conn, r, built)
                conn.execute("SELECT set_config('lock_timeout', %s, true)", [old])
            return round(time.monotonic() - started, 3) if delay > 0.1 else 0.0
        except psycopg.errors.LockNotAvailable:
            if time.monotonic() - started > SWAP_PATIENCE:
                raise DbanonError(
                    f"the swap of release {quote_name(r.spec.name)} waited {SWAP_PATIENCE:.0f} s "
                    "for readers of its previous relations; the previous release is unchanged"
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def swap(conn: psycopg.Connection, r: Resolved, built: list[Built]) -> None:
    """Point the release's views at the built relations (`point` above: objects consumers built
    over them are kept) and grant consumers read access."""
    keeps = {(r.target_schema, b.name) for b in built}
    for schema, name in r.previous:  # checked in resolve: each is the release's own, or gone
        old = store.find(conn, schema, name)
        if (schema, name) not in keeps and old is not None:
            drop(conn, old, f"dropped (release {quote_name(r.spec.name)} no longer publishes it)")
    promise = ", ".join(m.name for m in r.models) or "no equivalence-class model"
    comment = f"{owner_comment(r.spec.name)} {r.method.name}; {promise}"
    for b in built:
        point(conn, r.ident(b.name), r.target_schema, b.name, r.stored(b))
        stored_kind = "VIEW" if b.kind == "view" else "TABLE"
        for kind, rel in (("VIEW", r.ident(b.name)), (stored_kind, r.stored(b))):
            conn.execute(
                sql.SQL("COMMENT ON {} {} IS {}").format(sql.SQL(kind), rel, sql.Literal(comment))
            )
        for role in r.grants:
            conn.execute(
                sql.SQL("GRANT SELECT ON {} TO {}").format(r.ident(b.name), sql.Identifier(role))
            )
    for role in r.grants:
        runs.schema_usage(conn, r.target_schema, role)
