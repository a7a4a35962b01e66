"""Server settings for a few statements of the current transaction, restored afterwards.

A publish runs in one transaction on the user's own server, so dbanon never changes a setting
beyond it: `set_config(name, value, true)` ends with the transaction whatever happens, and the
previous value is put back as soon as the statements that need the change are done. Used to
shape a plan where the planner's cost model is wrong about it (see the callers' notes).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import pq


@contextmanager
def local_settings(conn: psycopg.Connection, **settings: str) -> Iterator[None]:
    """Run the block with `settings` (e.g. enable_hashagg="off"). Takes effect only inside a
    transaction; on an autocommit connection it changes nothing."""
    old = {
        name: conn.execute("SELECT current_setting(%s)", [name]).fetchone()[0]
        for name in settings
    }
    for name, value in settings.items():
        conn.execute("SELECT set_config(%s, %s, true)", [name, value])
    try:
        yield
    finally:
        # A failed statement leaves the transaction aborted; its rollback restores them anyway.
        if conn.info.transaction_status == pq.TransactionStatus.INTRANS:
            for name, value in old.items():
                conn.execute("SELECT set_config(%s, %s, true)", [name, value])


def raise_work_mem(conn: psycopg.Connection, size: str) -> str:
    """Raise the transaction's work_mem to `size` (never lower it); returns the setting to
    restore with `restore_work_mem`."""
    before = conn.execute("SELECT current_setting('work_mem')").fetchone()[0]
    conn.execute(
        "SELECT set_config('work_mem', CASE WHEN pg_size_bytes(%s) < pg_size_bytes(%s) "
        "THEN %s ELSE %s END, true)",
        [before, size, size, before],
    )
    return before


def restore_work_mem(conn: psycopg.Connection, before: str) -> None:
    conn.execute("SELECT set_config('work_mem', %s, true)", [before])
