"""One run at a time per release, and a run trail that tells the truth.

Locks are PostgreSQL advisory locks, so they hold across processes and machines and vanish with
the session that took them (a killed run never leaves one behind):
- per release, a session-level lock taken before the run's transaction starts, so the run's
  REPEATABLE READ snapshot is taken after the previous run committed (a lock taken inside the
  transaction would be granted to a snapshot that predates the previous run's swap);
- per target schema, a transaction-level lock around creating the schema and granting on it
  (two first publishes into a new schema, or two GRANTs on one schema, otherwise collide).

The trail: a run of an existing release is recorded `running` in a row of its own, committed
before the work starts, and then set to `succeeded`, `failed` (with the error), `skipped` or
`refused`. A `running` row whose backend is gone belonged to a killed process: the next run of
the release marks it `abandoned`. A first publish that fails leaves no trace, as bad input must.
"""

from __future__ import annotations

import json
import time
from typing import Any

import psycopg

from dbanon.errors import DbanonError

# The error of a run whose backend ended without finishing it (a killed process).
KILLED = "the run was killed: its backend ended without finishing it"
_RELEASE_LOCK = 0x64626E01  # the lock space of releases ("dbn" 1); the key is hashtext(name)
_SCHEMA_LOCK = 0x64626E02


class Busy(DbanonError):
    """Another run holds the release: exit code 3, so a scheduler can tell it from an error."""

    exit_code = 3


def holder(conn: psycopg.Connection, name: str) -> int | None:
    row = conn.execute(
        """SELECT l.pid FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted
             AND l.classid = %s::oid AND l.objid = hashtext(%s)::oid AND l.objsubid = 2""",
        [_RELEASE_LOCK, name],
    ).fetchone()
    return row[0] if row else None


def lock_release(conn: psycopg.Connection, name: str, wait: float = 0.0) -> None:
    """Take the release's session lock, waiting up to `wait` seconds; Busy if another run has
    it. Leaves no transaction open (the caller starts its own after)."""
    deadline = time.monotonic() + wait
    delay = 0.05
    while True:
        got = conn.execute(
            "SELECT pg_try_advisory_lock(%s, hashtext(%s))", [_RELEASE_LOCK, name]
        ).fetchone()[0]
        if got:
            conn.commit()
            return
        pid = holder(conn, name)
        conn.rollback()
        if time.monotonic() >= deadline:
            raise Busy(
                f"release {name!r} is being published or refreshed by another run"
                f"{f' (backend {pid})' if pid else ''}; try again, or pass --wait SECONDS"
            )
        time.sleep(min(delay, max(deadline - time.monotonic(), 0.0)))
        delay = min(delay * 2, 1.0)


def unlock_release(conn: psycopg.Connection, name: str) -> None:
    if conn.closed:
        return
    conn.rollback()
    conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", [_RELEASE_LOCK, name])
    conn.commit()


def lock_schema(conn: psycopg.Connection, schema: str) -> None:
    """Serialise schema creation and grants on `schema` until the caller's transaction ends."""
    conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [_SCHEMA_LOCK, schema])


def start(conn: psycopg.Connection, release: str) -> int | None:
    """Commit a `running` row for a run of an existing release (None for a first publish), and
    mark runs of it left `running` by a backend that is gone as `abandoned`."""
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
    run_id = conn.execute(
        "INSERT INTO dbanon.run (release_id, status, pid) "
        "VALUES (%s, 'running', pg_backend_pid()) RETURNING id",
        [row[0]],
    ).fetchone()[0]
    conn.commit()
    return run_id


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
