"""Server settings for a few statements of the current transaction, restored afterwards.

A publish runs in one transaction on the user's own server, so dbanon never changes a setting
beyond it: `set_config(name, value, true)` ends with the transaction whatever happens, and the
previous value is put back as soon as the statements that need the change are done.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import pq

# Enough for the sorts and hash tables of a 1M-row release to stay in memory (about 100-200 MB
# each); bigger ones spill to disk as usual.
BIG_WORK_MEM = "256MB"


@contextmanager
def local_settings(
    conn: psycopg.Connection, *, work_mem: str | None = None, **settings: str
) -> Iterator[None]:
    """Run the block with `settings` (e.g. enable_hashagg="off") and `work_mem` raised to at
    least the given size (a DBA's larger setting is kept). Takes effect only inside a
    transaction; on an autocommit connection it changes nothing."""
    wanted = dict(settings)
    if work_mem is not None:
        current = conn.execute(
            "SELECT CASE WHEN pg_size_bytes(current_setting('work_mem')) < pg_size_bytes(%s) "
            "THEN %s END",
            [work_mem, work_mem],
        ).fetchone()[0]
        if current is not None:
            wanted["work_mem"] = current
    old = {
        name: conn.execute("SELECT current_setting(%s)", [name]).fetchone()[0] for name in wanted
    }
    for name, value in wanted.items():
        conn.execute("SELECT set_config(%s, %s, true)", [name, value])
    try:
        yield
    finally:
        # A failed statement leaves the transaction aborted; its rollback restores them anyway.
        if conn.info.transaction_status == pq.TransactionStatus.INTRANS:
            for name, value in old.items():
                conn.execute("SELECT set_config(%s, %s, true)", [name, value])
