"""One run at a time per release, and a run trail that tells the truth.

The run lock is a row lock on the release's catalog row (FOR NO KEY UPDATE), taken NOWAIT as
the first statement of the run's transaction and held until it commits or rolls back:
- a consumer cannot take it: row locks need UPDATE on dbanon.release, which only dbanon's own
  roles have (an advisory lock, which any role that can connect may take, let a consumer block
  every refresh indefinitely);
- the run's REPEATABLE READ snapshot is taken by that statement, so a lock granted after the
  previous run committed sees that run's work; one that raced it fails to serialise and retries;
- a first publish has no row to lock: it claims the name by inserting the row in its own
  transaction (`claim`), which a second first publish of that name waits for, then finds taken;
- the lock vanishes with the session (a killed run never leaves one behind);
- NO KEY UPDATE, not UPDATE, so other sessions' rows that refer to the release (the trail's
  foreign keys) can still be written while the run holds it.
Per target schema, GRANT and REVOKE of USAGE serialise on the schema's own catalog row
(`schema_usage`), and two runs creating one schema on its unique name (the second takes the
schema the first made): no advisory lock is left for a consumer to hold.

The trail: a run of an existing release is recorded `running` in a row of its own, committed
before the run's transaction (and its lock) starts, and then set to `succeeded`, `failed`
(with the error), `skipped` or `refused`; a run that finds the release busy deletes its row. A
`running` row whose backend is gone belonged to a killed process: the next run of the release
marks it `abandoned`. A first publish that fails leaves no trace, as bad input must.
"""

from __future__ import annotations

import json
import time
from typing import Any

import psycopg
from psycopg import sql

from dbanon.errors import DbanonError, quote_ident, quote_name

# The error of a run whose backend ended without finishing it (a killed process).
KILLED = "the run was killed: its backend ended without finishing it"


class Busy(DbanonError):
    """Another run holds the release: exit code 3, so a scheduler can tell it from an error."""

    exit_code = 3


def holder(conn: psycopg.Connection, name: str) -> int | None:
    """The backend of the run of `name` in progress, if the trail knows it."""
    row = conn.execute(
        """SELECT u.pid FROM dbanon.run u JOIN dbanon.release r ON r.id = u.release_id
           WHERE r.name = %s AND u.status = 'running' AND u.pid <> pg_backend_pid()
             AND u.pid IN (SELECT pid FROM pg_stat_activity)
           ORDER BY u.started_at DESC LIMIT 1""",
        [name],
    ).fetchone()
    return row[0] if row else None


def _busy(name: str, pid: int | None) -> Busy:
    return Busy(
        f"release {quote_name(name)} is being published, refreshed or changed by another run"
        f"{f' (backend {pid})' if pid else ''}; try again, or pass --wait SECONDS"
    )


def lock_release(conn: psycopg.Connection, name: str, wait: float = 0.0) -> int | None:
    """Lock the release's catalog row, waiting up to `wait` seconds; Busy if another run has
    it. Returns the release's id (None: no such release, nothing locked). The lock opens the
    caller's transaction (at the connection's isolation level) and ends with it."""
    deadline = time.monotonic() + wait
    delay = 0.05
    while True:
        conn.rollback()
        try:
            row = conn.execute(
                "SELECT id FROM dbanon.release WHERE name = %s FOR NO KEY UPDATE NOWAIT", [name]
            ).fetchone()
            return row[0] if row else None
        except psycopg.errors.LockNotAvailable:
            conn.rollback()
        except psycopg.errors.SerializationFailure:
            conn.rollback()  # the holder committed after this snapshot: try again at once
            continue
        pid = holder(conn, name)
        conn.rollback()
        if time.monotonic() >= deadline:
            raise _busy(name, pid)
        time.sleep(min(delay, max(deadline - time.monotonic(), 0.0)))
        delay = min(delay * 2, 1.0)


def claim(conn: psycopg.Connection, name: str, insert: Any, wait: float = 0.0) -> int:
    """A first publish's lock: run `insert` (which inserts the release's row and returns its
    id) under a lock_timeout of `wait`; another first publish of the name in progress is Busy,
    one that committed meanwhile is an error. Rolled back with the run, it leaves no trace."""
    old = conn.execute("SELECT current_setting('lock_timeout')").fetchone()[0]
    conn.execute("SELECT set_config('lock_timeout', %s, true)", [f"{max(wait, 0.01):.3f}s"])
    try:
        with conn.transaction():
            rid = insert()
    except psycopg.errors.LockNotAvailable:
        raise _busy(name, None) from None
    except (psycopg.errors.SerializationFailure, psycopg.errors.UniqueViolation):
        raise DbanonError(
            f"release {quote_name(name)} was published by another run meanwhile: `dbanon refresh "
            f"{name}` rebuilds it, `publish --replace` redefines it"
        ) from None
    conn.execute("SELECT set_config('lock_timeout', %s, true)", [old])
    return rid


USAGE_PATIENCE = 30.0  # seconds a GRANT or REVOKE on a schema waits for another session's


def has_usage(conn: psycopg.Connection, schema: str, role: str) -> bool:
    """Whether `role` was granted USAGE on `schema` itself (not through PUBLIC or a group)."""
    return bool(conn.execute(
        """SELECT EXISTS (SELECT FROM pg_namespace n, aclexplode(n.nspacl) a
                          JOIN pg_roles r ON r.oid = a.grantee
                          WHERE n.nspname = %s AND r.rolname = %s
                            AND a.privilege_type = 'USAGE')""",
        [schema, role],
    ).fetchone()[0])  # fmt: skip


def schema_usage(conn: psycopg.Connection, schema: str, role: str, grant: bool = True) -> None:
    """GRANT (or REVOKE) USAGE on `schema` to `role` in the caller's transaction; a GRANT the
    role already has is not repeated.

    Either statement rewrites the schema's catalog row and holds it until its transaction
    ends, and any session may hold it so (even a GRANT that grants nothing does): a second
    GRANT or REVOKE waits for that transaction, then fails with 'tuple concurrently updated'.
    It is retried here (in a savepoint) for up to USAGE_PATIENCE seconds, then refused with one
    line. Refreshes of a granted release grant nothing new, so no other session can hold them
    up here; only a new grant (or a revoke) can be kept waiting, and never indefinitely."""
    if grant and has_usage(conn, schema, role):
        return
    statement = (
        sql.SQL("GRANT USAGE ON SCHEMA {} TO {}") if grant
        else sql.SQL("REVOKE USAGE ON SCHEMA {} FROM {}")
    ).format(sql.Identifier(schema), sql.Identifier(role))  # fmt: skip
    deadline = time.monotonic() + USAGE_PATIENCE
    while True:
        left = deadline - time.monotonic()
        try:
            with conn.transaction():
                conn.execute(
                    "SELECT set_config('lock_timeout', %s, true)", [f"{max(left, 0.01):.3f}s"]
                )
                conn.execute(statement)
            return
        except psycopg.errors.LockNotAvailable:
            left = 0.0
        except psycopg.errors.InternalError_ as e:
            if "concurrently updated" not in str(e):
                raise
        if deadline - time.monotonic() <= 0 or left <= 0:
            raise DbanonError(
                f"another session holds the privileges of schema {quote_ident(schema)} (a "
                "transaction "
                f"that ran GRANT or REVOKE on it) for over {USAGE_PATIENCE:.0f} s; nothing "
                "was changed: end that transaction and try again"
            )
        time.sleep(0.01)


def start(conn: psycopg.Connection, release: str) -> int | None:
    """Commit a `running` row for a run of an existing release (None for a first publish), and
    mark runs of it left `running` by a backend that is gone as `abandoned`. Committed before
    the run's transaction takes the lock, so that transaction's snapshot sees (and closes) it;
    a run that then finds the release busy discards it."""
    row = conn.execute("SELECT id FROM dbanon.release WHERE name = %s", [release]).fetchone()
    if row is None:
        conn.rollback()
        return None
    conn.execute(
        """UPDATE dbanon.run SET status = 'abandoned', finished_at = clock_timestamp(),
               error = %s
           WHERE release_id = %s AND status = 'running'
             AND (pid IS NULL OR pid NOT IN (SELECT pid FROM pg_stat_activity))""",
        [KILLED, row[0]],
    )
    try:
        run_id = conn.execute(
            "INSERT INTO dbanon.run (release_id, status, pid) "
            "VALUES (%s, 'running', pg_backend_pid()) RETURNING id",
            [row[0]],
        ).fetchone()[0]
    except psycopg.errors.ForeignKeyViolation:  # dropped meanwhile: the lock will say so
        conn.rollback()
        return None
    conn.commit()
    return run_id


def discard(conn: psycopg.Connection, run_id: int | None) -> None:
    """Delete the `running` row of a run that never got the lock (it did nothing)."""
    if run_id is None:
        return
    conn.rollback()
    conn.execute("DELETE FROM dbanon.run WHERE id = %s", [run_id])
    conn.commit()


def finish(
    conn: psycopg.Connection,
    run_id: int | None,
    release_id: int,
    status: str,
    *,
    source_rows: int | None = None,
    released_rows: int | None = None,
    metrics: dict[str, Any] | None = None,
    timings: dict[str, float] | None = None,
    fingerprint: str | None = None,
    error: str | None = None,
) -> None:
    """Close the run's row (or insert one for a first publish), in the caller's transaction."""
    values = [
        status, source_rows, released_rows, json.dumps(metrics, default=str) if metrics else None,
        json.dumps(timings) if timings else None, fingerprint, error,
    ]  # fmt: skip
    if run_id is None:
        conn.execute(
            """INSERT INTO dbanon.run (release_id, status, started_at, finished_at, source_rows,
                   released_rows, metrics, timings, source_fingerprint, error)
               VALUES (%s, %s, transaction_timestamp(), clock_timestamp(), %s, %s, %s::jsonb,
                       %s::jsonb, %s, %s)""",
            [release_id, *values],
        )
    else:
        conn.execute(
            """UPDATE dbanon.run SET status = %s, finished_at = clock_timestamp(), pid = NULL,
                   source_rows = %s, released_rows = %s, metrics = %s::jsonb, timings = %s::jsonb,
                   source_fingerprint = %s, error = %s
               WHERE id = %s""",
            [*values, run_id],
        )


def fail(conn: psycopg.Connection, run_id: int | None, status: str, error: str) -> None:
    """Record a run that did not succeed, in its own transaction (the work was rolled back)."""
    if run_id is None:
        return
    conn.rollback()
    row = conn.execute("SELECT release_id FROM dbanon.run WHERE id = %s", [run_id]).fetchone()
    if row:
        finish(conn, run_id, row[0], status, error=error)
    conn.commit()
